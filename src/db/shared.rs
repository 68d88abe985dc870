//! A model whose counts live in Redis ([`crate::store::redis`]), shared by
//! every host of a fleet.
//!
//! How a host judges: it looks up each message's features in Redis, with
//! the totals and the header, in one round trip ([`RedisStore::lookup`]),
//! as rspamd's Redis Bayes does. There is no copy to go stale: a message
//! learned on one host changes the next verdict of every host. The model
//! built from the totals is kept while the store's generation stays the
//! same, so a host rebuilds it only after a change.
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

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::learnlog::Change;
use super::{Judgment, judge};
use crate::decision::{Calibrator, Decider};
use crate::features::Features;
use crate::message::Identity;
use crate::model::{Delta, Label, Model, Params, ValidParams};
use crate::store::redis::{RedisStore, RedisUrl};
use crate::store::{Error, Result, Store};
use crate::vocab::{VIEWS, View};

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

/// The model of one generation, with its header.
struct Built {
    generation: u64,
    model: Model,
    header: SharedHeader,
}

/// A model in Redis: see the module's documentation.
pub struct SharedModel {
    store: RedisStore,
    built: Mutex<Option<Arc<Built>>>,
}

impl SharedModel {
    /// Connects to the global model at `url` (`user` None) or a user's,
    /// each Redis command bounded by `timeout`.
    pub fn open(url: &RedisUrl, user: Option<&str>, timeout: Duration) -> Result<SharedModel> {
        Ok(SharedModel::new(RedisStore::open(url, user, timeout)?))
    }

    /// The model whose counts are `store`.
    pub fn new(store: RedisStore) -> SharedModel {
        SharedModel {
            store,
            built: Mutex::new(None),
        }
    }

    /// Its counts.
    pub fn store(&self) -> &RedisStore {
        &self.store
    }

    /// Judges a message's features with the model as Redis has it now;
    /// also says how many messages of each class (`[ham, spam]`) that
    /// model had learned.
    pub fn judge(&self, features: &Features, decider: &Decider) -> Result<(Judgment, [u64; 2])> {
        let words: Vec<&str> = features.tokens.iter().collect();
        let lookup = self.store.lookup(&words, &features.grams)?;
        let built = self.built(lookup.generation, &lookup)?;
        let known = words
            .iter()
            .zip(&lookup.words)
            .filter_map(|(w, c)| c.map(|c| (crate::vocab::Feature::Word(w).view(), c)))
            .chain(
                lookup
                    .grams
                    .iter()
                    .filter_map(|c| c.map(|c| (View::Bytes, c))),
            );
        let judgment = judge(
            &built.model,
            &built.header.calibrator,
            decider,
            known,
            words.len(),
            &features.metadata.0,
        );
        Ok((judgment, lookup.totals.messages))
    }

    /// The model for `generation`, built from `lookup` unless the one kept
    /// is of that generation.
    fn built(&self, generation: u64, lookup: &crate::store::redis::Lookup) -> Result<Arc<Built>> {
        let mut kept = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = kept.as_ref().filter(|b| b.generation == generation) {
            return Ok(Arc::clone(b));
        }
        let header: SharedHeader = match &lookup.header {
            None => SharedHeader::default(),
            Some(json) => serde_json::from_slice(json).map_err(|e| Error::Corrupt {
                path: self.store.shown().into(),
                reason: format!("the model header does not read: {e}"),
            })?,
        };
        let params: ValidParams = header.params.check().map_err(|e| Error::Corrupt {
            path: self.store.shown().into(),
            reason: format!("the model header's parameters: {e}"),
        })?;
        let built = Arc::new(Built {
            generation,
            model: Model::new(params, &lookup.totals, [0.0; VIEWS]),
            header,
        });
        *kept = Some(Arc::clone(&built));
        Ok(built)
    }

    /// Learns a message under `label`, exactly once: not again under the
    /// same label, moved from the other one.
    pub fn learn(&self, features: &Features, identity: &Identity, label: Label) -> Result<Change> {
        let (before, _) = self.store.transact(
            |_, had| {
                Ok(match had {
                    Some(l) if l == label => None,
                    had => {
                        let mut delta = Delta::default();
                        if let Some(old) = had {
                            delta.add_message(features, old, -1);
                        }
                        delta.add_message(features, label, 1);
                        delta.registry.push((identity.digest, Some(label)));
                        Some(delta)
                    }
                })
            },
            Some(&identity.digest),
        )?;
        Ok(match before {
            Some(l) if l == label => Change::Already(label),
            Some(_) => Change::Relabelled(label),
            None => Change::Learned(label),
        })
    }

    /// Takes a learned message back; the label it had, or None if it was
    /// not learned (nothing changes).
    pub fn unlearn(&self, features: &Features, identity: &Identity) -> Result<Option<Label>> {
        let (had, _) = self.store.transact(
            |_, had| {
                Ok(had.map(|old| {
                    let mut delta = Delta::default();
                    delta.add_message(features, old, -1);
                    delta.registry.push((identity.digest, None));
                    delta
                }))
            },
            Some(&identity.digest),
        )?;
        Ok(had)
    }

    /// Stores what the model needs beyond its counts.
    pub fn set_header(&self, header: &SharedHeader) -> Result<()> {
        header
            .params
            .check()
            .map_err(|e| Error::Invalid(format!("model parameters: {e}")))?;
        let json = serde_json::to_vec(header)
            .map_err(|e| Error::Invalid(format!("the model header does not serialise: {e}")))?;
        self.store.set_header(&json)
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
    use crate::decision::{Costs, Verdict};
    use crate::features::Extractor;
    use crate::store::MemoryStore;
    use crate::store::testkit::{RedisServer, dump};

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
            if !c.is_zero() {
                known.push((f.view(), c));
            }
        });
        judge(
            &model,
            &header.calibrator,
            &decider(),
            known,
            m.tokens.len(),
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
        let header = SharedHeader {
            calibrator: Calibrator {
                weights: [0.8, 0.9, 0.7, 0.5],
                bias: -0.2,
            },
            ..SharedHeader::default()
        };
        SharedModel::open(&url, None, WAIT)
            .unwrap()
            .set_header(&header)
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
        assert_eq!(dump(last.store()), dump(&local), "counts differ");
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
        assert_eq!(dump(host.store()), dump(&MemoryStore::new()));
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
            .set_header(&SharedHeader {
                calibrator: Calibrator {
                    weights: [0.5; 4],
                    bias: 1.0,
                },
                ..SharedHeader::default()
            })
            .unwrap();
        let (recalibrated, _) = judge_host.judge(&probe.features, &decider()).unwrap();
        assert_ne!(recalibrated.score.log_odds, grown.score.log_odds);
    }
}
