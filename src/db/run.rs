//! One training run, read as a stream of messages and reduced as it goes
//! (see [`Run`]).

use std::collections::HashMap;

use rayon::prelude::*;

use super::{Error, Labelled, Result, TrainSummary, release_freed_memory};
use crate::decision::{Calibrator, prequential};
use crate::features::Features;
use crate::fit::{self as protocol, Counts, Dataset, Example, Sample, Settings};
use crate::model::{Delta, Label, Params, logistic};
use crate::vocab::{Digest, View, is_bucket};

/// No id yet.
const NO_ID: u32 = u32::MAX;

/// One training run, read as a stream of messages and reduced as it goes:
/// its features interned once, the counts of its messages (what the stacker
/// is fitted on), the change it makes to the store, and a bounded
/// [`Sample`] of its messages' features for the fit. Its memory grows with
/// the vocabulary, plus about a hundred bytes per message (the digests
/// that make a run idempotent and find duplicates), not with the messages'
/// features: those of a message are dropped once counted, unless sampled.
pub struct Run {
    /// Ids of the word tokens. foldhash, seeded at random per run (so
    /// words crafted to collide cannot be planned): SipHash, the standard
    /// one, was most of the time a run spends counting.
    pub(super) ids: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    /// Ids of the byte view's buckets ([`NO_ID`]: none yet), indexed by
    /// bucket: most features are buckets, and an index beats hashing a name.
    pub(super) gram_ids: Vec<u32>,
    pub(super) views: Vec<View>,
    pub(super) counts: Counts,
    /// By feature id, `[ham, spam]`: what `counts` holds that the store
    /// does not take under that label (see [`Trainer::add_to_run`]); the
    /// change to the store's counts is `counts` minus this. Empty until a
    /// message needs it: a first training run never does.
    pub(super) apart: Vec<[u32; 2]>,
    /// Change to everything else (messages, metadata, and the online
    /// discriminative view's weights once [`Run::calibrate`] has stepped
    /// them); no tokens.
    pub(super) rest: Delta,
    /// The step each message the run learns makes to the online
    /// discriminative view's weights, by key (see [`Run::calibrate`]):
    /// what a fleet's run adds with each message, which a directory's run
    /// has in `rest` already.
    pub(super) steps: HashMap<u64, i64>,
    pub(super) registry: Vec<(Digest, Option<Label>)>,
    pub(super) labels: HashMap<Digest, Label>,
    /// The calibration sample: each message's key, example, and whether
    /// the store learns it in this run (new, or under another label).
    pub(super) sample: Sample<(u64, Example, bool)>,
    pub(super) conflicts: Vec<String>,
    pub(super) summary: TrainSummary,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("messages", &self.labels.len())
            .field("vocabulary", &self.views.len())
            .finish_non_exhaustive()
    }
}

impl Default for Run {
    fn default() -> Self {
        Run::new()
    }
}

/// A training run's stacker: fitted on inner cross-validated scores of its
/// sample, which start the prequential record later learns refit on.
#[derive(Debug, Clone)]
pub struct Fitted {
    /// The stacker.
    pub calibrator: Calibrator,
    /// Messages it was fitted on.
    pub messages: usize,
    /// The scores it was fitted on, keyed by message.
    pub samples: Vec<prequential::Sample>,
}

impl Run {
    /// An empty run.
    pub fn new() -> Run {
        Run::with_sample(protocol::SAMPLE_PER_CLASS)
    }

    /// An empty run whose calibration sample keeps `per_class` messages of
    /// each class at most.
    pub(crate) fn with_sample(per_class: usize) -> Run {
        Run {
            ids: HashMap::default(),
            gram_ids: Vec::new(),
            views: Vec::new(),
            counts: Counts::new(0),
            apart: Vec::new(),
            rest: Delta::default(),
            steps: HashMap::new(),
            registry: Vec::new(),
            labels: HashMap::new(),
            sample: Sample::new(per_class),
            conflicts: Vec::new(),
            summary: TrainSummary::default(),
        }
    }

    /// Takes `m` into the run's own counts, those the stacker is fitted
    /// with: its example and sampling key, or None for a duplicate (the
    /// same label again) or a conflict (the other label: noted, with
    /// `source`, for the run to be refused).
    pub(crate) fn take_in(
        &mut self,
        m: &Labelled,
        source: impl std::fmt::Display,
    ) -> Option<(Example, u64)> {
        let digest = m.identity.digest;
        match self.labels.get(&digest) {
            Some(&l) if l == m.label => {
                self.summary.duplicates += 1;
                return None;
            }
            Some(_) => {
                self.summary.conflicting += 1;
                self.conflicts.push(source.to_string());
                return None;
            }
            None => {}
        }
        self.labels.insert(digest, m.label);
        let ex = self.intern(&m.features, m.label);
        self.counts.add(&ex, 1);
        Some((ex, key_of(&digest)))
    }

    /// Offers an example taken in to the calibration sample; `learned`:
    /// whether the store learns the message in this run (not when it holds
    /// it already under this label), which decides whether the run steps
    /// the online discriminative view with it.
    pub(crate) fn offer(&mut self, key: u64, label: Label, ex: Example, learned: bool) {
        self.sample.offer(key, label, (key, ex, learned));
    }

    /// Marks as not learned each sampled message that `holds` (asked once
    /// per sampled message, with its digest and label) says the store
    /// already holds under that label: for a store where asking costs a
    /// round trip, after reading, only for the messages the sample kept.
    pub(crate) fn settle_learned<E>(
        &mut self,
        mut holds: impl FnMut(&Digest, Label) -> std::result::Result<bool, E>,
    ) -> std::result::Result<(), E> {
        let mut sampled = std::collections::HashSet::new();
        self.sample.for_each_kept(|(key, _, _)| {
            sampled.insert(*key);
        });
        let mut held = std::collections::HashSet::new();
        for (digest, &label) in &self.labels {
            let key = key_of(digest);
            if sampled.contains(&key) && holds(digest, label)? {
                held.insert(key);
            }
        }
        self.sample.for_each_kept(|(key, _, learned)| {
            if held.contains(key) {
                *learned = false;
            }
        });
        Ok(())
    }

    /// The keys of the sampled messages.
    #[cfg(test)]
    fn sample_keys(&mut self) -> Vec<u64> {
        let mut keys = Vec::new();
        self.sample.for_each_kept(|(key, _, _)| keys.push(*key));
        keys
    }

    /// Distinct messages the run holds (duplicates and conflicts aside).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the run holds no message.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Where the messages given with both labels were met the second time.
    pub(crate) fn conflicts(&self) -> &[String] {
        &self.conflicts
    }

    /// What the run did so far (totals are filled in when it is stored).
    pub fn summary(&self) -> &TrainSummary {
        &self.summary
    }

    /// The id of a new feature of view `view`.
    pub(super) fn next_id(&mut self, view: View) -> u32 {
        let id = self.views.len() as u32;
        self.views.push(view);
        id
    }

    /// The id of the byte view's `bucket` (a bucket: [`is_bucket`]), a new
    /// one if it is new.
    pub(super) fn gram_id(&mut self, bucket: u32) -> u32 {
        if self.gram_ids.is_empty() {
            self.gram_ids = vec![NO_ID; 1 << crate::vocab::BUCKET_BITS];
        }
        let id = self.gram_ids[bucket as usize];
        if id != NO_ID {
            return id;
        }
        let id = self.next_id(View::Bytes);
        self.gram_ids[bucket as usize] = id;
        id
    }

    /// The id of a word token, a new one if it is new.
    pub(super) fn word_id(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.ids.get(word) {
            return id;
        }
        let id = self.next_id(crate::vocab::word_view(word));
        self.ids.insert(word.into(), id);
        id
    }

    /// Interns a message's features (new ones get the next ids), each id
    /// once, in no particular order (the calibration sorts those it keeps):
    /// distinct words and distinct buckets have distinct ids, so a
    /// message's ids are distinct as they come.
    pub(super) fn intern(&mut self, features: &Features, label: Label) -> Example {
        let mut tokens = Vec::with_capacity(features.tokens.len() + features.grams.len());
        for t in features.tokens.iter() {
            tokens.push(self.word_id(t));
        }
        for &b in features.grams.iter().filter(|&&b| is_bucket(b)) {
            tokens.push(self.gram_id(b));
        }
        self.counts.grow(self.views.len());
        Example {
            tokens,
            metadata: features.metadata.0,
            label,
            // Kept while the message is in the calibration sample, which
            // steps the online discriminative view (see `Run::calibrate`).
            lr_buckets: features.lr_buckets.clone(),
        }
    }

    /// Records that the store does not take `ex`'s counts under `label`.
    pub(super) fn set_apart(&mut self, ex: &Example, label: Label) {
        let c = label.index();
        if self.apart.len() < self.views.len() {
            self.apart.resize(self.views.len(), [0, 0]);
        }
        for &t in &ex.tokens {
            self.apart[t as usize][c] += 1;
        }
    }

    /// Records that the store learns (`sign` 1) or unlearns (−1) the
    /// message of `ex` under `label`: its number and metadata (its
    /// features' counts are the run's, see [`Run::set_apart`]).
    pub(super) fn change(&mut self, ex: &Example, label: Label, sign: i64) {
        let c = label.index();
        self.rest.messages[c] += sign;
        for (stats, &x) in self.rest.gauss[c].iter_mut().zip(&ex.metadata) {
            stats.add(x, sign);
        }
    }

    /// Chooses the pseudo-counts and strengths and fits the stacker by inner
    /// cross-validation over the run's sample, with the counts of all its
    /// messages, as `eval` does inside its training folds. With `weights`
    /// (the store's weights of the online discriminative view, when the
    /// model weighs it), the view is first stepped once through the
    /// sample ([`protocol::step_through`]: in the order of a hash of each
    /// message, the classes mixed where the run read one and then the
    /// other), even when the run is too small to fit a stacker; the change
    /// is part of the run's delta, and each message's step is in
    /// `Run::steps`. Returns the chosen parameters and the stacker with
    /// what it was fitted on, or the given parameters and `None` when the
    /// run has fewer than `min` messages of either class.
    pub fn calibrate(
        &mut self,
        settings: &Settings,
        min: usize,
        weights: Option<logistic::Table>,
    ) -> (Params, Option<Fitted>) {
        let [ham, spam] = self.sample.offered();
        let enough = ham >= min && spam >= min;
        if !enough && weights.is_none() {
            return (*settings.params.get(), None);
        }
        let sample = std::mem::replace(&mut self.sample, Sample::new(0));
        let mut keys = Vec::new();
        let mut learned = Vec::new();
        let mut examples = Vec::new();
        for (_, (key, ex, learns)) in sample.into_items() {
            keys.push(key);
            learned.push(learns);
            examples.push(ex);
        }
        // The fit sums each message's evidence in the order of its ids
        // (see [`Run::intern`]); sorted here, for the sampled messages only.
        examples
            .par_iter_mut()
            .for_each(|ex| ex.tokens.sort_unstable());
        let data = Dataset {
            examples,
            vocabulary: self.views.len(),
            views: std::mem::take(&mut self.views),
        };
        let members: Vec<usize> = (0..data.examples.len()).collect();
        let stepped = match weights {
            Some(mut weights) => {
                let stepped = protocol::step_through(
                    &data,
                    &members,
                    &keys,
                    &learned,
                    &mut weights,
                    Some(&mut self.rest),
                );
                self.steps = stepped.steps.iter().map(|(&i, &q)| (keys[i], q)).collect();
                stepped.inputs
            }
            None => HashMap::new(),
        };
        if !enough {
            self.views = data.views;
            return (*settings.params.get(), None);
        }
        let (params, calibrator, mut scored) = protocol::select_and_calibrate_with_samples(
            &data,
            &self.counts,
            &members,
            settings,
            &stepped,
        );
        self.views = data.views;
        // The record keeps them in the order the messages were sampled.
        scored.sort_by_key(|(i, _)| *i);
        let samples = scored
            .into_iter()
            .map(|(i, (inputs, spam))| prequential::Sample {
                key: keys[i],
                inputs,
                spam,
            })
            .collect();
        (
            *params.get(),
            Some(Fitted {
                calibrator,
                messages: data.examples.len(),
                samples,
            }),
        )
    }

    /// The store delta of the run and its summary so far; refused if the
    /// run has conflicts.
    pub(super) fn into_delta(self) -> Result<(Delta, TrainSummary)> {
        if !self.conflicts.is_empty() {
            return Err(Error::Conflicting(self.conflicts));
        }
        let Run {
            ids,
            gram_ids,
            apart,
            mut rest,
            steps,
            registry,
            summary,
            counts,
            views,
            labels,
            sample,
            conflicts,
        } = self;
        // What the store does not need goes before the delta is built.
        drop((views, labels, sample, conflicts, steps));
        release_freed_memory();
        let vocabulary = counts.vocabulary();
        let change = |id: u32| {
            let [ham, spam] = counts.of(id);
            let [ham_apart, spam_apart] = apart.get(id as usize).copied().unwrap_or([0, 0]);
            let d = [
                i64::from(ham) - i64::from(ham_apart),
                i64::from(spam) - i64::from(spam_apart),
            ];
            (d != [0, 0]).then_some(d)
        };
        rest.grams = gram_ids
            .into_iter()
            .enumerate()
            .filter(|&(_, id)| id != NO_ID)
            .filter_map(|(bucket, id)| Some((bucket as u32, change(id)?)))
            .collect();
        // Sized once: a table grown by doubling holds two copies at its peak.
        let changed = (0..vocabulary as u32)
            .filter(|&id| change(id).is_some())
            .count();
        rest.words = HashMap::with_capacity(changed.saturating_sub(rest.grams.len()));
        rest.words.extend(
            ids.into_iter()
                .filter_map(|(word, id)| Some((String::from(word), change(id)?))),
        );
        rest.registry = registry;
        Ok((rest, summary))
    }
}

/// A message's sampling key: the start of its digest.
fn key_of(digest: &Digest) -> u64 {
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::writer::tests::labelled;

    #[test]
    fn only_sampled_messages_are_asked_about_and_those_held_do_not_learn() {
        let mut run = Run::with_sample(2);
        let mut digests = Vec::new();
        for i in 0..6 {
            let label = if i % 2 == 0 { Label::Spam } else { Label::Ham };
            let m = labelled(&format!("message {i}"), label);
            let (ex, key) = run.take_in(&m, "x").unwrap();
            run.offer(key, label, ex, true);
            digests.push(m.identity.digest);
        }
        let sampled = run.sample_keys();
        let held = *digests
            .iter()
            .find(|d| sampled.contains(&key_of(d)))
            .unwrap();
        let mut asked = Vec::new();
        run.settle_learned(|digest, _| {
            asked.push(*digest);
            Ok::<_, ()>(*digest == held)
        })
        .unwrap();
        // Two of each class kept, each asked about once, no other.
        assert_eq!(asked.len(), 4, "{asked:?}");
        assert!(asked.iter().all(|d| sampled.contains(&key_of(d))));
        let mut kept = Vec::new();
        run.sample
            .for_each_kept(|(key, _, learned)| kept.push((*key, *learned)));
        assert_eq!(kept.len(), 4);
        for (key, learned) in kept {
            assert_eq!(learned, key != key_of(&held), "{key}");
        }
    }
}
