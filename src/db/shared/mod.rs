//! A model whose counts live in Redis ([`crate::store::redis`]), shared by
//! every host of a fleet.
//!
//! How a host judges: it looks up each message's features in Redis, with
//! the totals and the header, in one round trip ([`RedisStore::lookup`]),
//! as rspamd's Redis Bayes does. There is no copy to go stale: a message
//! learned on one host changes the next verdict of every host. The model
//! built from the totals is kept while the store's generation and totals
//! stay the same, so a host rebuilds it only after a change (the
//! generation alone comes back to a number it had once Redis has lost
//! changes and counted others).
//!
//! How a host learns: one transaction per message
//! ([`RedisStore::transact`]) reads the label the registry has for the
//! message and writes the change that label calls for (nothing, a move
//! from the other label, or a first count), refused and done again if any
//! other change landed in between. However many hosts learn the same
//! message at once, it is counted once.
//!
//! What the model needs beyond counts (the hyperparameters and the
//! stacker) is the [`SharedHeader`], stored with the counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::TrainSummary;
use super::learnlog::Change;
use super::{Judgment, Score};
use crate::decision::calibrate::INPUTS;
use crate::decision::prequential::{Prequential, Sample, key_of};
use crate::decision::{Calibrator, Decider};
use crate::features::Features;
use crate::message::Identity;
use crate::model::{Delta, Label, Model, Params, TokenCounts, Totals, ValidParams, logistic};
#[cfg(test)]
use crate::store::redis::RedisUrl;
use crate::store::redis::{
    Capped, Expiry, Lookup, Memory, Read, Redis, RedisStore, Write, record_version,
};
use crate::store::{Error, Result, Store, samples, slot_of, weight_slots};
use crate::vocab::{Digest, Feature, VIEWS, View};

mod train;

/// What a shared model needs beyond its counts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SharedHeader {
    /// Hyperparameters in force.
    pub params: Params,
    /// The stacker.
    pub calibrator: Calibrator,
    /// Messages the stacker was fitted on (0: not fitted).
    pub calibrated_on: usize,
}

/// How a change steps the online discriminative view's weights.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// Not at all (the model does not weigh the view).
    None,
    /// As `learn` steps them: the reverse step of the old label of a
    /// message that moves, then its label's step, each from its score now.
    AsLearned,
    /// By this many quanta each, the step a training run computed
    /// ([`crate::fit::step_through`]).
    By(i64),
}

/// What [`SharedModel::stats`] says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SharedStats {
    /// The Redis URL (no password) and the user.
    pub store: String,
    /// Ham learned.
    pub ham_messages: u64,
    /// Spam learned.
    pub spam_messages: u64,
    /// Features with non-zero counts: words, byte buckets and the online
    /// view's weights (a directory's `vocabulary` leaves the weights out;
    /// an unlearn need not bring them back to zero).
    pub features: u64,
    /// Messages in the registry.
    pub registry: u64,
    /// Redis memory the model's keys take.
    pub memory_bytes: u64,
    /// ... key by key.
    pub memory_parts: Memory,
    /// That, per message learned.
    pub memory_per_message: Option<f64>,
    /// Changes applied so far.
    pub changes: u64,
    /// Hyperparameters, as in force at the counts' size
    /// ([`Params::at_size`]).
    pub params: Params,
    /// Messages the stacker was fitted on (0: not fitted).
    pub calibrated_on: usize,
    /// The stacker's weight of each view and of the metadata.
    pub weights: std::collections::BTreeMap<&'static str, f64>,
}

/// The model of one generation, with its header.
struct Built {
    generation: u64,
    /// The totals it was built from: a generation does not name one
    /// model alone once Redis has lost changes (a restart from an older
    /// snapshot, a FLUSHALL) and counted as many others since.
    totals: Totals,
    model: Model,
    header: SharedHeader,
}

/// A model in Redis: see the module's documentation.
pub struct SharedModel {
    store: RedisStore,
    built: Mutex<Option<Arc<Built>>>,
    /// How long counts read from Redis are used again (zero: never).
    window: Duration,
    recent: RwLock<Recent>,
    /// Features `recent` holds at most ([`RECENT_MAX`] unless told).
    recent_max: usize,
    /// The prequential record as this host last read or wrote it, and its
    /// version: read again only when another host changed it.
    record: Mutex<Option<(u64, Prequential)>>,
    /// Held by each learn and unlearn here: they conflict only with hosts'.
    changing: Mutex<()>,
}

/// Counts read from Redis lately, used again while they are younger than
/// the model's window: most features of a message (the words and header
/// bytes every message shares) were read for the messages before it, so a
/// host asks Redis only for the rest. When the window is over they are
/// kept for another if the model's generation has not moved since the
/// window began (nothing changed: they are exact), and forgotten
/// otherwise; also forgotten after this host's own changes. They are at
/// most the model's limit ([`RECENT_MAX`] unless told): a message whose
/// counts would pass it is answered from what was read and what is held,
/// and at the window's end a store more than nine tenths full is
/// forgotten, to fill again with what is read now.
struct Recent {
    since: Instant,
    words: HashMap<String, Option<TokenCounts>, Hasher>,
    grams: HashMap<u32, Option<TokenCounts>, Hasher>,
    /// The totals, generation and header of the last lookup.
    meta: Option<(Totals, u64, Option<Vec<u8>>)>,
    /// The generation and totals the window began at: what it read is
    /// exact while the model's are still these (the generation alone
    /// comes back after Redis has lost changes and counted others).
    began: Option<(u64, Totals)>,
    /// The totals in `meta` are older than a change this host made.
    stale: bool,
}

/// A new prequential record and a new header, as stored (each None:
/// unchanged).
type Restacked = (Option<Vec<u8>>, Option<Vec<u8>>);

/// `header` as stored, its parameters checked.
fn header_json(header: &SharedHeader) -> Result<Vec<u8>> {
    header
        .params
        .check()
        .map_err(|e| Error::Invalid(format!("model parameters: {e}")))?;
    serde_json::to_vec(header)
        .map_err(|e| Error::Invalid(format!("the model header does not serialise: {e}")))
}

/// The hasher of [`Recent`]'s maps: fast, seeded at random (the words
/// are the senders').
type Hasher = foldhash::fast::RandomState;

/// Features [`Recent`] holds at most (some tens of megabytes).
const RECENT_MAX: usize = 500_000;

impl Recent {
    fn new() -> Recent {
        Recent {
            since: Instant::now(),
            words: HashMap::default(),
            grams: HashMap::default(),
            meta: None,
            began: None,
            stale: false,
        }
    }
}

impl SharedModel {
    /// The global model (`user` None) or a user's in `redis`: the one way
    /// the commands and serve open a model in Redis. Nothing is read until
    /// it judges or learns (its key layout is checked then); a user name
    /// that is refused is the only error.
    pub fn of(redis: &Redis, user: Option<&str>) -> Result<SharedModel> {
        Ok(SharedModel::new(redis.store(user)?))
    }

    /// Connects to the model at `url`, its key layout checked now: for
    /// tests.
    #[cfg(test)]
    pub(crate) fn open(
        url: &RedisUrl,
        user: Option<&str>,
        timeout: Duration,
    ) -> Result<SharedModel> {
        Ok(SharedModel::new(RedisStore::open(url, user, timeout)?))
    }

    /// The model whose counts are `store`.
    pub fn new(store: RedisStore) -> SharedModel {
        SharedModel {
            store,
            built: Mutex::new(None),
            window: Duration::ZERO,
            recent: RwLock::new(Recent::new()),
            recent_max: RECENT_MAX,
            record: Mutex::new(None),
            changing: Mutex::new(()),
        }
    }

    /// The same model, reading counts from Redis again only when those it
    /// read are older than `window`: a change another host makes reaches
    /// this one's verdicts within `window`, and this host's own at once.
    pub fn with_window(mut self, window: Duration) -> SharedModel {
        self.window = window;
        self
    }

    /// The same model, holding at most `features` of the counts it read
    /// (a daemon keeps a model for each user a request names, and each
    /// holds what it read: their sum must stay small).
    pub fn with_recent_max(mut self, features: usize) -> SharedModel {
        self.recent_max = features;
        self
    }

    /// Forgets the counts read lately (after a change this host made to
    /// more than counts).
    fn forget_recent(&self) {
        *self.recent.write().unwrap_or_else(|e| e.into_inner()) = Recent::new();
    }

    /// Forgets what this host read of a message's features and of the
    /// totals, after it changed their counts: its next judgment reads them
    /// anew, and the rest stays (emptying all of it, hundreds of thousands
    /// of entries on a busy host, would cost each learn more than the
    /// learn).
    fn forget_message(&self, features: &Features) {
        let mut recent = self.recent.write().unwrap_or_else(|e| e.into_inner());
        for w in features.tokens.iter() {
            recent.words.remove(w);
        }
        for g in &features.grams {
            recent.grams.remove(g);
        }
        for slot in weight_slots(&features.lr_buckets) {
            recent.grams.remove(&slot);
        }
        // The totals are read again with the next lookup; the generation
        // the window began at stays, so that the window's end sees the
        // change and forgets the rest too.
        recent.stale = true;
    }

    /// The lookup of `words` and `grams`, from the counts read lately where
    /// they are young enough, from Redis for the rest.
    fn lookup(&self, words: &[&str], grams: &[u32]) -> Result<Lookup> {
        if self.window.is_zero() {
            return self.store.lookup(words, grams);
        }
        // Most messages: every count was read lately, under a lock many
        // judging threads share.
        {
            let recent = self.recent.read().unwrap_or_else(|e| e.into_inner());
            if recent.since.elapsed() < self.window
                && !recent.stale
                && let Some((totals, generation, header)) = &recent.meta
            {
                let w: Option<Vec<_>> = words
                    .iter()
                    .map(|w| recent.words.get(*w).copied())
                    .collect();
                let g: Option<Vec<_>> =
                    grams.iter().map(|g| recent.grams.get(g).copied()).collect();
                if let (Some(words), Some(grams)) = (w, g) {
                    return Ok(Lookup {
                        words,
                        grams,
                        totals: totals.clone(),
                        generation: *generation,
                        header: header.clone(),
                    });
                }
            }
        }
        let over = {
            let recent = self.recent.read().unwrap_or_else(|e| e.into_inner());
            recent.since.elapsed() >= self.window
        };
        if over {
            // The window is over: what was read stays exact if no change
            // landed since it began (the generation did not move), and is
            // forgotten otherwise.
            let now = self.store.lookup(&[], &[])?;
            let mut recent = self.recent.write().unwrap_or_else(|e| e.into_inner());
            let unchanged = recent
                .began
                .as_ref()
                .is_some_and(|(g, t)| *g == now.generation && *t == now.totals);
            let held = recent.words.len() + recent.grams.len();
            if unchanged && held <= self.recent_max / 10 * 9 {
                recent.since = Instant::now();
            } else {
                *recent = Recent::new();
            }
            recent.began = Some((now.generation, now.totals.clone()));
            recent.stale = false;
            recent.meta = Some((now.totals, now.generation, now.header));
        }
        let (missing_words, missing_grams) = {
            let recent = self.recent.read().unwrap_or_else(|e| e.into_inner());
            let w: Vec<&str> = words
                .iter()
                .copied()
                .filter(|w| !recent.words.contains_key(*w))
                .collect();
            let g: Vec<u32> = grams
                .iter()
                .copied()
                .filter(|g| !recent.grams.contains_key(g))
                .collect();
            (w, g)
        };
        let known_meta = {
            let recent = self.recent.read().unwrap_or_else(|e| e.into_inner());
            recent.meta.is_some() && !recent.stale
        };
        let fetched = if missing_words.is_empty() && missing_grams.is_empty() && known_meta {
            None
        } else {
            Some(self.store.lookup(&missing_words, &missing_grams)?)
        };
        let mut recent = self.recent.write().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = &fetched {
            let held = recent.words.len() + recent.grams.len();
            if held + missing_words.len() + missing_grams.len() > self.recent_max {
                // Full: answered from what was read and what is held,
                // nothing more kept.
                let read: HashMap<&str, Option<TokenCounts>> = missing_words
                    .iter()
                    .copied()
                    .zip(f.words.iter().copied())
                    .collect();
                let read_grams: HashMap<u32, Option<TokenCounts>> = missing_grams
                    .iter()
                    .copied()
                    .zip(f.grams.iter().copied())
                    .collect();
                let found: Option<Vec<_>> = words
                    .iter()
                    .map(|w| read.get(w).or_else(|| recent.words.get(*w)).copied())
                    .collect();
                let found_grams: Option<Vec<_>> = grams
                    .iter()
                    .map(|g| read_grams.get(g).or_else(|| recent.grams.get(g)).copied())
                    .collect();
                let (Some(found), Some(found_grams)) = (found, found_grams) else {
                    // Some of it was let go meanwhile (a window's end).
                    drop(recent);
                    return self.store.lookup(words, grams);
                };
                return Ok(Lookup {
                    words: found,
                    grams: found_grams,
                    totals: f.totals.clone(),
                    generation: f.generation,
                    header: f.header.clone(),
                });
            }
            for (w, c) in missing_words.iter().zip(&f.words) {
                recent.words.insert((*w).to_string(), *c);
            }
            for (g, c) in missing_grams.iter().zip(&f.grams) {
                recent.grams.insert(*g, *c);
            }
            // The generation the window began at is kept: a change since
            // must empty the cache when the window ends, even if these
            // counts are newer.
            recent
                .began
                .get_or_insert_with(|| (f.generation, f.totals.clone()));
            recent.stale = false;
            recent.meta = Some((f.totals.clone(), f.generation, f.header.clone()));
        }
        // Another thread may have emptied some of it since the first look
        // (a window's end, a learn): then Redis is asked for all of it.
        let all_there = words.iter().all(|w| recent.words.contains_key(*w))
            && grams.iter().all(|g| recent.grams.contains_key(g));
        let (Some((totals, generation, header)), true) = (recent.meta.clone(), all_there) else {
            drop(recent);
            return self.store.lookup(words, grams);
        };
        Ok(Lookup {
            words: words.iter().map(|w| recent.words[*w]).collect(),
            grams: grams.iter().map(|g| recent.grams[g]).collect(),
            totals,
            generation,
            header,
        })
    }

    /// Its counts.
    pub fn store(&self) -> &RedisStore {
        &self.store
    }

    /// Judges a message's features with the model as Redis has it now;
    /// also says how many messages of each class (`[ham, spam]`) that
    /// model had learned.
    pub fn judge(&self, features: &Features, decider: &Decider) -> Result<(Judgment, [u64; 2])> {
        let (score, built, messages) = self.score(features)?;
        Ok((
            super::reader::judged(&built.model, score, decider),
            messages,
        ))
    }

    /// [`SharedModel::judge`]'s score, the model that gave it, and the
    /// messages of each class it had learned.
    fn score(&self, features: &Features) -> Result<(Score, Arc<Built>, [u64; 2])> {
        let words: Vec<&str> = features.tokens.iter().collect();
        // The buckets, then the weights if the model last built weighs them.
        let grams = features
            .grams
            .iter()
            .filter_map(|&b| slot_of(Feature::Gram(b)));
        let kept = self.built.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let weigh = kept.is_none_or(|b| b.header.params.logistic);
        let weighed = if weigh { &features.lr_buckets[..] } else { &[] };
        let slots: Vec<u32> = grams.chain(weight_slots(weighed)).collect();
        let lookup = self.lookup(&words, &slots)?;
        let built = self.built(lookup.generation, &lookup)?;
        let (grams, weights) = lookup.grams.split_at(slots.len() - weighed.len());
        let known = words
            .iter()
            .zip(&lookup.words)
            .filter_map(|(w, c)| c.map(|c| (crate::vocab::word_view(w), c)))
            .chain(grams.iter().filter_map(|c| c.map(|c| (View::Bytes, c))));
        let logistic = logistic::score(weights.iter().flatten().copied(), weights.len());
        let score = super::reader::score(
            &built.model,
            &built.header.calibrator,
            known,
            words.len(),
            logistic,
            &features.metadata.0,
        );
        Ok((score, built, lookup.totals.messages))
    }

    /// The model for `generation`, built from `lookup` unless the one kept
    /// is of that generation.
    fn built(&self, generation: u64, lookup: &Lookup) -> Result<Arc<Built>> {
        let mut kept = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = kept
            .as_ref()
            .filter(|b| b.generation == generation && b.totals == lookup.totals)
        {
            return Ok(Arc::clone(b));
        }
        let header = self.header_of(lookup.header.as_deref())?;
        let params: ValidParams = header.params.check().map_err(|e| Error::Corrupt {
            path: self.store.shown().into(),
            reason: format!("the model header's parameters: {e}"),
        })?;
        let built = Arc::new(Built {
            generation,
            totals: lookup.totals.clone(),
            model: Model::new(params, &lookup.totals, [0.0; VIEWS]),
            header,
        });
        *kept = Some(Arc::clone(&built));
        Ok(built)
    }

    /// Learns a message under `label`, exactly once: not again under the
    /// same label, moved from the other one. The stacker follows, as a
    /// database's does when it learns ([`crate::decision::prequential`]):
    /// the message's score by the model before the learn is kept with its
    /// label in the record, in the same transaction as its counts, and the
    /// stacker is fitted again when the rule says so.
    pub fn learn(&self, features: &Features, identity: &Identity, label: Label) -> Result<Change> {
        // A model of both classes scores it; one without gives no sample.
        let (score, built, [ham, spam]) = self.score(features)?;
        let inputs = (ham > 0 && spam > 0).then(|| score.evidence.stacker_inputs());
        let logistic = built.header.params.logistic;
        let step = if logistic {
            Step::AsLearned
        } else {
            Step::None
        };
        self.change_label(features, identity, label, Some(inputs), step)
    }

    /// [`SharedModel::learn`]'s counts: `step` says how the online
    /// discriminative view is stepped; `inputs` is None to leave the
    /// record as it is (a training run writes its own after), Some(None)
    /// when the model scored no sample.
    fn change_label(
        &self,
        features: &Features,
        identity: &Identity,
        label: Label,
        inputs: Option<Option<[f64; INPUTS]>>,
        step: Step,
    ) -> Result<Change> {
        let _one = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        let held = self.held_record();
        let written = Mutex::new(None);
        let weights = self.weights_of(features, step != Step::None)?;
        let (before, _) = self.store.transact(
            |read| {
                // What an earlier try computed did not land.
                *written.lock().unwrap_or_else(|e| e.into_inner()) = None;
                let change = match read.label {
                    Some(l) if l == label => return Ok(None),
                    Some(_) => Change::Relabelled(label),
                    None => Change::Learned(label),
                };
                let mut delta = Delta::default();
                let mut weights = weights.clone();
                if let Some(old) = read.label {
                    delta.add_message(features, old, -1);
                    if step == Step::AsLearned {
                        weights.step(&mut delta, &features.lr_buckets, old, -1);
                    }
                }
                delta.add_message(features, label, 1);
                match step {
                    Step::AsLearned => weights.step(&mut delta, &features.lr_buckets, label, 1),
                    Step::By(quanta) => weights.add(&mut delta, &features.lr_buckets, quanta),
                    Step::None => {}
                }
                delta.registry.push((identity.digest, Some(label)));
                let (record, header) = match inputs {
                    Some(inputs) => {
                        self.restacked(read, &identity.digest, change, inputs, &written)?
                    }
                    None => (None, None),
                };
                Ok(Some(Write {
                    delta,
                    record,
                    header,
                }))
            },
            Some(&identity.digest),
            inputs.map(|_| held),
        )?;
        self.keep_record(written);
        self.forget_message(features);
        Ok(match before {
            Some(l) if l == label => Change::Already(label),
            Some(_) => Change::Relabelled(label),
            None => Change::Learned(label),
        })
    }

    /// The online discriminative view's weights of a message's
    /// buckets as Redis holds them now, if the view is learned (`on`). A
    /// change steps from them; another host stepping them meanwhile is not
    /// seen (the steps add up, as in lock-free stochastic gradient descent).
    fn weights_of(&self, f: &Features, on: bool) -> Result<logistic::Sparse> {
        if !on {
            return Ok(logistic::Sparse::default());
        }
        let slots: Vec<u32> = weight_slots(&f.lr_buckets).collect();
        let counts = self.store.lookup(&[], &slots)?.grams;
        Ok(logistic::Sparse::of(&f.lr_buckets, counts))
    }

    /// Takes a learned message back, and its sample out of the record; the
    /// label it had, or None if it was not learned (nothing changes).
    pub fn unlearn(&self, features: &Features, identity: &Identity) -> Result<Option<Label>> {
        let _one = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        let held = self.held_record();
        let written = Mutex::new(None);
        let logistic = self.score(features)?.1.header.params.logistic;
        let weights = self.weights_of(features, logistic)?;
        let (had, _) = self.store.transact(
            |read| {
                // What an earlier try computed did not land.
                *written.lock().unwrap_or_else(|e| e.into_inner()) = None;
                let Some(old) = read.label else {
                    return Ok(None);
                };
                let mut delta = Delta::default();
                delta.add_message(features, old, -1);
                weights
                    .clone()
                    .step(&mut delta, &features.lr_buckets, old, -1);
                delta.registry.push((identity.digest, None));
                let change = Change::Unlearned(old);
                let (record, header) =
                    self.restacked(read, &identity.digest, change, None, &written)?;
                Ok(Some(Write {
                    delta,
                    record,
                    header,
                }))
            },
            Some(&identity.digest),
            Some(held),
        )?;
        self.keep_record(written);
        self.forget_message(features);
        Ok(had)
    }

    /// The record (and the header, if the stacker is fitted again) after
    /// `change` of the message `digest`, from the record and header `read`
    /// (its stacker inputs before a learn, if the model had both classes):
    /// each None if unchanged. A record that does not read is no record:
    /// it never stops a change.
    fn restacked(
        &self,
        read: &Read,
        digest: &Digest,
        change: Change,
        inputs: Option<[f64; INPUTS]>,
        written: &Mutex<Option<(u64, Prequential)>>,
    ) -> Result<Restacked> {
        let header = self.header_of(read.header.as_deref())?;
        let fitted_on = u32::try_from(header.calibrated_on).unwrap_or(u32::MAX);
        let held = self.record.lock().unwrap_or_else(|e| e.into_inner());
        let before = match (&read.record, &*held) {
            (Some(bytes), _) => samples::parse(bytes),
            (None, Some((version, record))) if *version == read.record_version => {
                Some(record.clone())
            }
            (None, _) => None,
        }
        .unwrap_or_else(|| Prequential::without_samples(fitted_on));
        drop(held);
        let mut record = before.clone();
        let key = key_of(digest);
        let mut refitted = None;
        match change {
            Change::Learned(label) => {
                if let Some(inputs) = inputs {
                    let spam = label == Label::Spam;
                    refitted = record.observe(Sample { key, inputs, spam });
                }
            }
            Change::Relabelled(label) => record.relabel(key, label == Label::Spam),
            Change::Unlearned(_) => record.forget(key),
            Change::Already(_) => {}
        }
        if record == before {
            return Ok((None, None));
        }
        let bytes = samples::encode(&record);
        // The version the write makes, if it lands.
        *written.lock().unwrap_or_else(|e| e.into_inner()) = Some((record_version(&bytes), record));
        let header = match refitted {
            Some((calibrator, n)) => Some(header_json(&SharedHeader {
                calibrator,
                calibrated_on: n,
                ..header
            })?),
            None => None,
        };
        Ok((Some(bytes), header))
    }

    /// The version of the record this host holds (0: none).
    fn held_record(&self) -> u64 {
        let held = self.record.lock().unwrap_or_else(|e| e.into_inner());
        held.as_ref().map_or(0, |(version, _)| *version)
    }

    /// Keeps the record a change wrote (the last one computed, the one
    /// that landed), if it wrote one.
    fn keep_record(&self, written: Mutex<Option<(u64, Prequential)>>) {
        if let Some(record) = written.into_inner().unwrap_or_else(|e| e.into_inner()) {
            *self.record.lock().unwrap_or_else(|e| e.into_inner()) = Some(record);
        }
    }

    /// The header stored as `json` (None: the default one).
    fn header_of(&self, json: Option<&[u8]>) -> Result<SharedHeader> {
        match json {
            None => Ok(SharedHeader::default()),
            Some(json) => serde_json::from_slice(json).map_err(|e| Error::Corrupt {
                path: self.store.shown().into(),
                reason: format!("the model header does not read: {e}"),
            }),
        }
    }

    /// Stores what the model needs beyond its counts (and, if given, the
    /// prequential record it starts from), as one change every host sees.
    pub fn set_header(&self, header: &SharedHeader, record: Option<&Prequential>) -> Result<()> {
        let write = Write {
            delta: Delta::default(),
            record: record.map(samples::encode),
            header: Some(header_json(header)?),
        };
        self.store
            .transact(|_| Ok(Some(write.clone())), None, None)?;
        self.forget_recent();
        Ok(())
    }

    /// What the model holds, and the Redis memory it takes.
    pub fn stats(&self) -> Result<SharedStats> {
        let lookup = self.store.lookup(&[], &[])?;
        let header = self.header_of(lookup.header.as_deref())?;
        let features = self.store.token_count()?;
        let memory_parts = self.store.memory(true)?;
        let memory_bytes = memory_parts.total();
        let learned = lookup.totals.messages[0] + lookup.totals.messages[1];
        Ok(SharedStats {
            store: self.store.shown().to_string(),
            ham_messages: lookup.totals.messages[0],
            spam_messages: lookup.totals.messages[1],
            features,
            registry: self.store.registry_len()?,
            memory_bytes,
            memory_parts,
            memory_per_message: (learned > 0).then(|| memory_bytes as f64 / learned as f64),
            changes: lookup.generation,
            params: header.params.at_size(lookup.totals.messages),
            calibrated_on: header.calibrated_on,
            weights: crate::fit::Inputs::names()
                .into_iter()
                .zip(header.calibrator.weights)
                .filter(|(name, _)| header.params.logistic || *name != "logistic")
                .collect(),
        })
    }

    /// Removes word tokens seen in at most `max_count` messages whose
    /// counts have not changed for `min_age_days` days, as `prune` does in
    /// a database (see [`RedisStore::expire`]). Returns how many were
    /// removed and how many tokens are left.
    pub fn prune(&self, max_count: u64, min_age_days: u32) -> Result<(u64, u64)> {
        let before = crate::store::sled::aged_before(min_age_days);
        let removed = self.store.expire(Expiry::rare_and_old(max_count, before))?;
        self.forget_recent();
        Ok((removed, self.store.token_count()?))
    }

    /// Keeps the model's Redis memory at most `max` bytes (see
    /// [`RedisStore::cap`]); None if another host is at it.
    pub fn cap(&self, max: u64) -> Result<Option<Capped>> {
        let capped = self.store.cap(max)?;
        if capped.is_some_and(|c| c.removed > 0) {
            self.forget_recent();
        }
        Ok(capped)
    }

    /// Messages learned, `[ham, spam]`.
    pub fn messages(&self) -> Result<[u64; 2]> {
        Ok(self.store.totals()?.messages)
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::db::judge;
    use crate::decision::{Costs, Verdict};
    use crate::features::Extractor;
    use crate::store::MemoryStore;
    use crate::store::testkit::{RedisServer, counts_dump, dump};

    const WAIT: Duration = Duration::from_secs(10);

    /// A labelled message of the repository's corpora.
    struct Message {
        features: Features,
        identity: Identity,
        label: Label,
    }

    fn read(dir: &Path, label: Label) -> Vec<Message> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "eml"))
            .collect();
        paths.sort();
        paths
            .iter()
            .map(|p| {
                let raw = std::fs::read(p).unwrap();
                Message {
                    features: Extractor::new().extract(&raw).unwrap(),
                    identity: Identity::of(&raw),
                    label,
                }
            })
            .collect()
    }

    fn corpus(dir: &str) -> Vec<Message> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpora")
            .join(dir);
        let mut all = read(&root.join("spam"), Label::Spam);
        all.extend(read(&root.join("ham"), Label::Ham));
        all
    }

    fn decider() -> Decider {
        Decider {
            costs: Costs::default(),
            min_known: 5,
            min_per_class: 10,
        }
    }

    /// The judgment of a model kept in memory, as one host with the
    /// counts of `store` would make it.
    fn local_judge(store: &MemoryStore, header: &SharedHeader, m: &Features) -> Judgment {
        let totals = store.totals().unwrap();
        let model = Model::new(header.params.check().unwrap(), &totals, [0.0; VIEWS]);
        let mut known = Vec::new();
        m.for_each_feature(|f| {
            let c = store.token(f).unwrap();
            if let (false, Some(view)) = (c.is_zero(), f.view()) {
                known.push((view, c));
            }
        });
        let weights = m
            .lr_buckets
            .iter()
            .map(|&b| store.token(Feature::Weight(b)).unwrap());
        judge(
            &model,
            &header.calibrator,
            &decider(),
            known,
            m.tokens.len(),
            logistic::score(weights, m.lr_buckets.len()),
            &m.metadata.0,
        )
    }

    #[test]
    fn four_hosts_learning_at_once_judge_as_one_local_model_of_the_same_messages() {
        let server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0?prefix=fleet")).unwrap();
        let taught = corpus("sample");
        let judged = corpus("scripts/test");
        // Every message is learned by two hosts at once, and every fifth
        // first under the wrong label (then moved by a later learn).
        let hosts = 4;
        let mut plans: Vec<Vec<(usize, Label)>> = vec![Vec::new(); hosts];
        for (i, m) in taught.iter().enumerate() {
            if i % 5 == 0 {
                let wrong = match m.label {
                    Label::Spam => Label::Ham,
                    Label::Ham => Label::Spam,
                };
                plans[i % hosts].push((i, wrong));
            }
            plans[(i + 1) % hosts].push((i, m.label));
            plans[(i + 2) % hosts].push((i, m.label));
        }
        // A model that weighs the online discriminative view: the hosts
        // step its weights as they learn.
        let header = SharedHeader {
            params: Params {
                logistic: true,
                ..Params::default()
            },
            calibrator: Calibrator {
                weights: [0.8, 0.9, 0.7, 0.5, 0.3],
                bias: -0.2,
            },
            ..SharedHeader::default()
        };
        SharedModel::open(&url, None, WAIT)
            .unwrap()
            .set_header(&header, None)
            .unwrap();
        std::thread::scope(|scope| {
            for plan in &plans {
                let (url, taught) = (&url, &taught);
                scope.spawn(move || {
                    let host = SharedModel::open(url, None, WAIT).unwrap();
                    for &(i, label) in plan {
                        host.learn(&taught[i].features, &taught[i].identity, label)
                            .unwrap();
                    }
                });
            }
        });
        // The wrong labels came first on their host but may have landed
        // after a right one elsewhere: teach the right ones once more, as
        // the user's last word.
        let last = SharedModel::open(&url, None, WAIT).unwrap();
        for m in &taught {
            last.learn(&m.features, &m.identity, m.label).unwrap();
        }

        let mut local = MemoryStore::new();
        for m in &taught {
            let mut d = Delta::default();
            d.add_message(&m.features, m.label, 1);
            d.registry.push((m.identity.digest, Some(m.label)));
            local.apply(&d).unwrap();
        }
        assert_eq!(counts_dump(last.store()), dump(&local), "counts differ");
        // The online discriminative view's weights are the hosts' steps in
        // their order: the local model judges with them as they stand.
        let weights = Delta {
            weights: (last.store().weights().unwrap().into_iter())
                .map(|(b, c)| (b, [i64::from(c.ham), i64::from(c.spam)]))
                .collect(),
            ..Delta::default()
        };
        assert!(!weights.weights.is_empty());
        local.apply(&weights).unwrap();
        // The stacker the hosts refitted as they learned (their order was
        // theirs): the one a local model judges with.
        let (stored, _) = last.store().read_for_change(None, Some(0)).unwrap();
        let header = last.header_of(stored.header.as_deref()).unwrap();
        // The record the hosts kept changing at once lost no move: each
        // sample is one taught message's, once, under its last label.
        let record = samples::parse(&stored.record.unwrap()).unwrap();
        let labels: HashMap<u64, bool> = taught
            .iter()
            .map(|m| (key_of(&m.identity.digest), m.label == Label::Spam))
            .collect();
        let mut keys = std::collections::HashSet::new();
        for sample in record.samples() {
            assert!(keys.insert(sample.key), "a message's sample twice");
            assert_eq!(labels.get(&sample.key), Some(&sample.spam));
        }
        assert!(keys.len() > taught.len() / 2, "{} samples", keys.len());
        let mut verdicts = [0; 3];
        for _ in 0..hosts {
            let host = SharedModel::open(&url, None, WAIT).unwrap();
            for m in &judged {
                let want = local_judge(&local, &header, &m.features);
                let (got, _) = host.judge(&m.features, &decider()).unwrap();
                assert_eq!(got.verdict, want.verdict);
                assert_eq!(got.doubt, want.doubt);
                assert!((got.score.log_odds - want.score.log_odds).abs() < 1e-9);
                verdicts[got.verdict as usize] += 1;
            }
        }
        // Not all of one verdict: the comparison means something.
        assert!(
            verdicts.iter().filter(|&&n| n > 0).count() >= 2,
            "{verdicts:?}"
        );
    }

    #[test]
    fn learning_is_idempotent_moves_between_labels_and_unlearns() {
        let server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0")).unwrap();
        let host = SharedModel::open(&url, Some("alice@example.org"), WAIT).unwrap();
        let m = &corpus("sample")[0];
        let (f, id) = (&m.features, &m.identity);
        assert_eq!(
            host.learn(f, id, Label::Spam).unwrap(),
            Change::Learned(Label::Spam)
        );
        assert_eq!(
            host.learn(f, id, Label::Spam).unwrap(),
            Change::Already(Label::Spam)
        );
        assert_eq!(host.messages().unwrap(), [0, 1]);
        assert_eq!(
            host.learn(f, id, Label::Ham).unwrap(),
            Change::Relabelled(Label::Ham)
        );
        assert_eq!(host.messages().unwrap(), [1, 0]);
        assert_eq!(host.unlearn(f, id).unwrap(), Some(Label::Ham));
        assert_eq!(host.unlearn(f, id).unwrap(), None);
        // Every count is back where it was; the online discriminative
        // view's weights only nearly (its unlearning is approximate).
        assert_eq!(counts_dump(host.store()), dump(&MemoryStore::new()));
        // Another user, and the global model, never saw any of it.
        host.learn(f, id, Label::Spam).unwrap();
        for other in [None, Some("bob@example.org")] {
            let other = SharedModel::open(&url, other, WAIT).unwrap();
            assert_eq!(other.messages().unwrap(), [0, 0]);
        }
    }

    #[test]
    fn a_learn_or_a_new_header_on_one_host_changes_the_next_verdict_of_another() {
        let server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0")).unwrap();
        let taught = corpus("sample");
        let teacher = SharedModel::open(&url, None, WAIT).unwrap();
        let judge_host = SharedModel::open(&url, None, WAIT).unwrap();
        let probe = &taught[0];
        let (young, _) = judge_host.judge(&probe.features, &decider()).unwrap();
        assert_eq!(young.verdict, Verdict::Unsure);
        for m in &taught {
            teacher.learn(&m.features, &m.identity, m.label).unwrap();
        }
        let (grown, _) = judge_host.judge(&probe.features, &decider()).unwrap();
        assert_ne!(grown.score.log_odds, young.score.log_odds);
        teacher
            .set_header(
                &SharedHeader {
                    calibrator: Calibrator {
                        weights: [0.5; 5],
                        bias: 1.0,
                    },
                    ..SharedHeader::default()
                },
                None,
            )
            .unwrap();
        let (recalibrated, _) = judge_host.judge(&probe.features, &decider()).unwrap();
        assert_ne!(recalibrated.score.log_odds, grown.score.log_odds);
    }

    /// Redis gone: a message whose counts were all read within the window
    /// is still judged from them, as before; one with features not read
    /// gets no verdict (a Redis error); both resume when Redis is back.
    #[test]
    fn with_redis_gone_counts_read_lately_still_judge_and_nothing_else_does() {
        let mut server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0")).unwrap();
        let taught = corpus("sample");
        let teacher = SharedModel::open(&url, None, WAIT).unwrap();
        for m in &taught {
            teacher.learn(&m.features, &m.identity, m.label).unwrap();
        }
        let judged = corpus("scripts/test");
        let (seen, unseen) = (&judged[0], &judged[1]);
        let cached = SharedModel::open(&url, None, Duration::from_millis(300))
            .unwrap()
            .with_window(Duration::from_secs(60));
        let (before, _) = cached.judge(&seen.features, &decider()).unwrap();
        server.kill();
        let (after, _) = cached.judge(&seen.features, &decider()).unwrap();
        assert_eq!(after, before);
        let err = cached.judge(&unseen.features, &decider()).unwrap_err();
        assert!(matches!(err, Error::Redis { .. }), "{err}");
        server.restart();
        cached.judge(&unseen.features, &decider()).unwrap();
    }

    /// A model told to hold few of the counts it read holds no more, and
    /// judges as reading everything does.
    #[test]
    fn a_model_holds_no_more_counts_than_it_is_told_and_judges_the_same() {
        let server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0")).unwrap();
        let teacher = SharedModel::open(&url, None, WAIT).unwrap();
        for m in &corpus("sample") {
            teacher.learn(&m.features, &m.identity, m.label).unwrap();
        }
        let judged = corpus("scripts/test");
        // Room for a few messages' counts, not for all of them: some are
        // answered partly from what is held and partly from what was just
        // read, with nothing more kept.
        let largest = judged
            .iter()
            .map(|m| m.features.tokens.len() + m.features.grams.len())
            .max()
            .unwrap();
        let most = largest * 3;
        let small = SharedModel::open(&url, None, WAIT)
            .unwrap()
            .with_window(Duration::from_secs(60))
            .with_recent_max(most);
        let (mut held_most, mut mixed) = (0, 0);
        for m in &judged {
            let before = {
                let recent = small.recent.read().unwrap();
                recent.words.len() + recent.grams.len()
            };
            let (want, _) = teacher.judge(&m.features, &decider()).unwrap();
            let (got, _) = small.judge(&m.features, &decider()).unwrap();
            assert_eq!(got, want);
            let recent = small.recent.read().unwrap();
            let held = recent.words.len() + recent.grams.len();
            assert!(held <= most, "{held} > {most}");
            held_most = held_most.max(held);
            mixed += usize::from(before > 0 && held == before);
        }
        assert!(
            held_most > largest,
            "it held too little to be tried: {held_most}"
        );
        assert!(mixed > 0, "no message was answered from a full store");
    }

    #[test]
    fn counts_read_lately_judge_as_redis_does_and_give_way_within_the_window() {
        let server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0")).unwrap();
        let taught = corpus("sample");
        let judged = corpus("scripts/test");
        let teacher = SharedModel::open(&url, None, WAIT).unwrap();
        for m in &taught[1..] {
            teacher.learn(&m.features, &m.identity, m.label).unwrap();
        }
        let window = Duration::from_millis(300);
        let cached = SharedModel::open(&url, None, WAIT)
            .unwrap()
            .with_window(window);
        // Judging message after message from what was read lately gives
        // what reading everything gives, twice over (the second time all
        // from memory).
        for _ in 0..2 {
            for m in &judged {
                let (want, _) = teacher.judge(&m.features, &decider()).unwrap();
                let (got, _) = cached.judge(&m.features, &decider()).unwrap();
                assert_eq!(got, want);
            }
        }
        // Another host's learn: not seen while the window lasts, seen
        // after it.
        let probe = &taught[0];
        // A window that begins with the next judgment.
        std::thread::sleep(window);
        let started = Instant::now();
        let (before, _) = cached.judge(&probe.features, &decider()).unwrap();
        teacher
            .learn(&probe.features, &probe.identity, probe.label)
            .unwrap();
        let (now, _) = teacher.judge(&probe.features, &decider()).unwrap();
        assert_ne!(now.score.log_odds, before.score.log_odds);
        let (soon, _) = cached.judge(&probe.features, &decider()).unwrap();
        if started.elapsed() < window {
            assert_eq!(soon.score.log_odds, before.score.log_odds);
        }
        std::thread::sleep(window);
        let (later, _) = cached.judge(&probe.features, &decider()).unwrap();
        assert_eq!(later, now);
        // Its own learn: seen at once.
        cached.unlearn(&probe.features, &probe.identity).unwrap();
        let (own, _) = cached.judge(&probe.features, &decider()).unwrap();
        assert_eq!(own.score.log_odds, before.score.log_odds);
    }

    #[test]
    fn a_redis_that_lost_changes_is_not_judged_from_what_was_read_before_them() {
        let server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0")).unwrap();
        let taught = corpus("sample");
        let teacher = SharedModel::open(&url, None, WAIT).unwrap();
        let teach = |flip: bool| {
            for m in &taught {
                let label = match (m.label, flip) {
                    (l, false) => l,
                    (Label::Ham, true) => Label::Spam,
                    (Label::Spam, true) => Label::Ham,
                };
                teacher.learn(&m.features, &m.identity, label).unwrap();
            }
            teacher.store().lookup(&[], &[]).unwrap().generation
        };
        let generation = teach(false);
        let window = Duration::from_millis(200);
        let hosts = [
            SharedModel::open(&url, None, WAIT).unwrap(),
            SharedModel::open(&url, None, WAIT)
                .unwrap()
                .with_window(window),
        ];
        let probe = &taught[0];
        for host in &hosts {
            host.judge(&probe.features, &decider()).unwrap();
        }
        // Redis loses what it held (FLUSHALL here; a restart from an older
        // snapshot is alike) and is taught as many changes again, each
        // message under the other label: the generation is where it was,
        // the counts are not.
        let mut con = redis::Client::open(server.url("/0"))
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        assert_eq!(teach(true), generation);
        std::thread::sleep(window);
        let (want, _) = SharedModel::open(&url, None, WAIT)
            .unwrap()
            .judge(&probe.features, &decider())
            .unwrap();
        for host in &hosts {
            let (got, _) = host.judge(&probe.features, &decider()).unwrap();
            assert_eq!(got, want);
        }
    }
}
