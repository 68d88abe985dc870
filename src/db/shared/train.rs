//! A fleet's training run ([`SharedModel::train`]), and the learns and
//! unlearns of several messages.

use super::*;
use crate::db::train::{Before, calibrate, check_paths, read_folders, weights_to_step};
use crate::db::{Interrupted, Progress, Run, Trained, Training, missing_class};

impl SharedModel {
    /// Trains the model on labelled folders, as [`crate::db::Database::train`]
    /// trains a directory: a run that gives a message both labels is
    /// refused before anything is stored, the stacker is fitted on the
    /// run's sample by inner cross-validation, and every message is learned
    /// once. The folders are read twice: first to check and fit, then to
    /// learn each message as its own transaction, so that other hosts
    /// keep judging and learning while a large run is stored (one change
    /// of all of it would hold Redis for seconds). A run interrupted while
    /// storing leaves what it learned learned, each message whole (its step
    /// of the online discriminative view included), and the stacker as it
    /// was.
    pub fn train(
        &self,
        job: &Training<'_>,
        progress: &dyn Fn(Progress<'_>),
    ) -> crate::db::Result<Trained> {
        check_paths(job)?;
        let mut run = Run::new();
        let weighs = job.params.get().logistic;
        let reading = read_folders(job, progress, &mut |m, id| {
            if let Some((ex, key)) = run.take_in(&m, id) {
                // Whether the store learns it (see `Run::offer`) is
                // asked below, for the sampled messages only.
                run.offer(key, m.label, ex, true);
            }
            Ok(())
        })?;
        if reading.stopped {
            return Ok(Trained::stopped(reading));
        }
        if !run.conflicts().is_empty() {
            return Err(crate::db::Error::Conflicting(run.conflicts().to_vec()));
        }
        if weighs {
            run.settle_learned(|digest, label| {
                Ok::<_, crate::db::Error>(self.store.label_of(digest)? == Some(label))
            })?;
        }
        let lookup = self.store.lookup(&[], &[])?;
        let before = Before {
            totals: lookup.totals.messages,
            // Without a header yet, a fleet that learned scores with the
            // default one's.
            params: match lookup.header.as_deref() {
                Some(json) => Some(self.header_of(Some(json))?.params),
                None if lookup.totals.messages != [0, 0] => Some(SharedHeader::default().params),
                None => None,
            },
        };
        let weights = weights_to_step(&self.store, job)?;
        let (chosen, fitted, calibration) = calibrate(&mut run, job, before, weights, progress);
        // The step each message makes to the online discriminative view's
        // weights (see `Run::calibrate`), added with the message, so that a
        // run interrupted while storing leaves each message it stored whole.
        let steps = std::mem::take(&mut run.steps);
        let mut summary = TrainSummary {
            duplicates: run.summary().duplicates,
            ..TrainSummary::default()
        };
        // Storing finishes even when interrupted, as a directory's run
        // does once it has read everything.
        let never = std::sync::atomic::AtomicBool::new(false);
        let storing = Training {
            ham: job.ham,
            spam: job.spam,
            options: job.options,
            params: job.params,
            select: job.select,
            wait: job.wait,
            interrupt: &never,
        };
        let quiet = |_: Progress<'_>| {};
        read_folders(&storing, &quiet, &mut |m, _| {
            let step = match steps.get(&key_of(&m.identity.digest)) {
                Some(&quanta) => Step::By(quanta),
                None => Step::None,
            };
            match self.change_label(&m.features, &m.identity, m.label, None, step)? {
                Change::Learned(_) => summary.learned += 1,
                Change::Relabelled(_) => summary.relearned += 1,
                _ => summary.unchanged += 1,
            }
            Ok(())
        })?;
        summary.totals = self.messages()?;
        // The model changed (there is no file to write: every host reads
        // the counts as they are); a run that changed nothing leaves the
        // stacker too.
        summary.snapshot_written = summary.learned + summary.relearned > 0;
        // The learns after this run refit on the scores its stacker was
        // fitted on, and then on theirs.
        if let (Some(f), true) = (fitted, summary.snapshot_written) {
            let header = SharedHeader {
                params: chosen,
                calibrator: f.calibrator,
                calibrated_on: f.messages,
            };
            self.set_header(&header, Some(&Prequential::after_training(f.samples)))?;
        }
        Ok(Trained {
            read: reading.read,
            skipped: reading.skipped,
            unparsed: reading.unparsed,
            no_model: missing_class(summary.totals),
            summary,
            calibration,
            stored: run.len(),
            interrupted: job
                .interrupt
                .load(std::sync::atomic::Ordering::SeqCst)
                .then_some(Interrupted::AfterReading),
        })
    }

    /// Learns each of `messages` under its label ([`SharedModel::learn`]),
    /// one transaction each; the same message twice counts once.
    pub fn learn_all(&self, messages: &[crate::db::Labelled]) -> crate::db::Result<TrainSummary> {
        let mut summary = TrainSummary::default();
        let mut seen = std::collections::HashSet::new();
        for m in messages {
            if !seen.insert(m.identity.digest) {
                summary.duplicates += 1;
                continue;
            }
            match self.learn(&m.features, &m.identity, m.label)? {
                Change::Learned(_) => summary.learned += 1,
                Change::Relabelled(_) => summary.relearned += 1,
                _ => summary.unchanged += 1,
            }
        }
        summary.totals = self.messages()?;
        Ok(summary)
    }

    /// Unlearns each of `messages` ([`SharedModel::unlearn`]): per message,
    /// the label it had or [`crate::db::Error::NotLearned`]; after another
    /// error, the rest are not tried.
    pub fn unlearn_all(&self, messages: &[(&Features, Identity)]) -> crate::db::Unlearned {
        let mut results = Vec::with_capacity(messages.len());
        for (features, identity) in messages {
            let result = match self.unlearn(features, identity) {
                Ok(Some(label)) => Ok(label),
                Ok(None) => Err(crate::db::Error::NotLearned),
                Err(err) => Err(err.into()),
            };
            let stop = matches!(&result, Err(e) if !matches!(e, crate::db::Error::NotLearned));
            results.push(result);
            if stop {
                break;
            }
        }
        crate::db::Unlearned {
            results,
            inexact: 0,
            model: crate::db::ModelAfter::UpToDate,
            log_failure: None,
            rebuilt: None,
        }
    }
}
