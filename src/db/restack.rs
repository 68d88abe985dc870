//! The stacker of a database that learns, refitted as it learns
//! ([`crate::decision::prequential`]): each message `learn` is given is
//! scored by the model as it is before the learn, under the writers' lock
//! (its prequential sample),
//! the record of samples beside the model takes what the learn changed
//! (a message learned, moved to the other label, unlearned), and when the
//! rule says so the stacker is fitted again; the writer puts it in the
//! journal entry or the snapshot the learn writes, and the record is
//! written after, under the same writers' lock.
//!
//! A database without a model (fewer than one message of each class)
//! gives no samples, as the online protocol of `eval` gives none before
//! its model has seen both classes.

use std::collections::HashMap;
use std::path::PathBuf;

use super::learnlog::Change;
use super::{Classifier, DbPaths, Labelled};
use crate::decision::Calibrator;
use crate::decision::calibrate::INPUTS;
use crate::decision::prequential::{Prequential, Sample, key_of};
use crate::model::{Label, logistic};
use crate::store::{Journal, samples};
use crate::vocab::Digest;

/// What a learn or unlearn does to the stacker's record.
pub(crate) struct Restack {
    path: PathBuf,
    /// Whether the messages were judged ([`Restack::judge`]).
    judged: bool,
    /// Each message's stacker inputs before the learn, by digest.
    inputs: HashMap<Digest, [f64; INPUTS]>,
    /// Messages the model's stacker was fitted on: what a record that is
    /// lost starts from.
    fitted_on: u32,
    /// The record after the change, until it is written.
    pending: Option<Prequential>,
    /// The online discriminative view's weights of the messages'
    /// buckets, as the model had them when it judged them (the rest
    /// zero): what a learn through the journal steps through; `None` if
    /// the model does not weigh that view (or there is none).
    weights: Option<logistic::Table>,
}

impl Restack {
    /// Judges `messages` by the model as it is now, if it has one, once:
    /// under the writers' lock, with the journal as the writer read it
    /// (`None`: read it here).
    pub(crate) fn judge(
        &mut self,
        paths: &DbPaths,
        messages: &[Labelled],
        journal: Option<&Option<Journal>>,
    ) {
        if self.judged {
            return;
        }
        self.judge_again(paths, messages, journal);
    }

    /// [`Restack::judge`] even if judged before: for the full path after a
    /// quick path that gave up and let go of the lock, in which time
    /// another writer may have changed the model.
    pub(crate) fn judge_again(
        &mut self,
        paths: &DbPaths,
        messages: &[Labelled],
        journal: Option<&Option<Journal>>,
    ) {
        self.judged = true;
        let features: Vec<&crate::features::Features> =
            messages.iter().map(|m| &m.features).collect();
        if let Ok(model) = Classifier::open_for(paths, &features, journal) {
            self.weights = model.weights_of(&features);
            self.fitted_on = u32::try_from(model.header().calibrated_on).unwrap_or(u32::MAX);
            self.inputs = messages
                .iter()
                .map(|m| {
                    let inputs = model.score(&m.features).evidence.stacker_inputs();
                    (m.identity.digest, inputs)
                })
                .collect();
        }
    }

    /// For a learn or an unlearn in the database at `paths` (a learn's
    /// messages are judged by [`Restack::judge`], under the writers' lock).
    pub(crate) fn new(paths: &DbPaths) -> Restack {
        Restack {
            path: paths.samples(),
            judged: false,
            inputs: HashMap::new(),
            fitted_on: 0,
            pending: None,
            weights: None,
        }
    }

    /// Reads the weights of the buckets of `features` from the
    /// model, for an unlearn (which judges nothing): see
    /// [`Restack::weights`].
    pub(crate) fn weigh(
        &mut self,
        paths: &DbPaths,
        features: &[&crate::features::Features],
        journal: Option<&Option<Journal>>,
    ) {
        if let Ok(model) = Classifier::open_for(paths, features, journal) {
            self.weights = model.weights_of(features);
        }
    }

    /// The online discriminative view's weights of the messages judged
    /// ([`Restack::judge`]) or weighed ([`Restack::weigh`]), as the model
    /// had them; `None` if it does not weigh that view.
    pub(crate) fn weights(&mut self) -> Option<&mut logistic::Table> {
        self.weights.as_mut()
    }

    /// Takes `changes` into the record (computed afresh from the record
    /// on disk, so that a quick path that gives up and the full path after
    /// it count each change once), kept until [`Restack::commit`]; returns
    /// the stacker refitted, and the samples it was fitted on, if the rule
    /// refits.
    pub(crate) fn refit(&mut self, changes: &[(Digest, Change)]) -> Option<(Calibrator, u64)> {
        self.pending = None;
        if changes.iter().all(|(_, c)| matches!(c, Change::Already(_))) {
            return None;
        }
        // A record that cannot be read is no record: it never stops a
        // learn.
        let before = samples::read(&self.path)
            .ok()
            .flatten()
            .unwrap_or_else(|| Prequential::without_samples(self.fitted_on));
        let mut record = before.clone();
        let mut refitted = None;
        for (digest, change) in changes {
            let key = key_of(digest);
            match *change {
                Change::Learned(label) => {
                    if let Some(&inputs) = self.inputs.get(digest) {
                        let sample = Sample {
                            key,
                            inputs,
                            spam: label == Label::Spam,
                        };
                        if let Some((stacker, n)) = record.observe(sample) {
                            refitted = Some((stacker, n as u64));
                        }
                    }
                }
                Change::Relabelled(label) => record.relabel(key, label == Label::Spam),
                Change::Unlearned(_) => record.forget(key),
                Change::Already(_) => {}
            }
        }
        // A record the change left as it was is not written again.
        self.pending = (record != before).then_some(record);
        refitted
    }

    /// Writes the record as [`Restack::refit`] left it; called under the
    /// writers' lock, once the change is written. The change stands
    /// whatever happens here: a record that cannot be written (a full
    /// disk) is removed rather than left behind the counts, and the refits
    /// after wait until a new one holds enough.
    pub(crate) fn commit(&mut self) {
        if let Some(record) = self.pending.take()
            && samples::write(&self.path, &record).is_err()
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
