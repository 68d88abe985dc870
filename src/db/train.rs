//! [`Database::train`]: a training run over labelled folders, from reading
//! them to the model it leaves.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Database, Error, Labelled, Result, Run, SetAside, TrainSummary};
use crate::decision::Prequential;
use crate::features::{Extractor, Features};
use crate::fit::{DEFAULT_INNER_FOLDS, Select, Settings};
use crate::mailbox::{self, MessageId, RawMessage};
use crate::message::{self, Identity};
use crate::model::{Label, Params, ValidParams, logistic};
use crate::sources::{self, Skip, Skipped};
use crate::store::Store;

/// Fewer messages of a class than this in a run: too few to fit the
/// calibration by cross-validation; the previous calibration (or none) is
/// kept.
pub const MIN_CALIBRATION_PER_CLASS: usize = crate::decision::calibrate::MIN_PER_CLASS;

/// What a training run is asked to do.
#[derive(Debug)]
pub struct Training<'a> {
    /// Folders (or files) of ham.
    pub ham: &'a [PathBuf],
    /// Folders (or files) of spam.
    pub spam: &'a [PathBuf],
    /// How to read them.
    pub options: mailbox::Options,
    /// The model's parameters; what `select` names, the stacker's fit
    /// chooses among its candidates.
    pub params: ValidParams,
    /// What the fit may choose (what the user did not pin).
    pub select: Select,
    /// How long to wait for another writer's lock.
    pub wait: Duration,
    /// Set (by a signal handler, say) to stop the run: while reading, it
    /// stops before anything is stored; after, what was read is stored and
    /// the model written, and the run says it was interrupted.
    pub interrupt: &'a AtomicBool,
}

/// What a training run reports as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// A damaged journal was set aside before the run began.
    SetAside(&'a SetAside),
    /// A message was passed over while reading.
    Skipped(Skip),
    /// A message could not be parsed.
    Unparsed(&'a MessageId, &'a message::Error),
    /// A batch was read: its bytes, and the messages read so far.
    Read {
        /// Bytes of the batch's messages.
        bytes: u64,
        /// Messages read so far in the run.
        messages: usize,
    },
    /// Reading is over; the calibration is being fitted.
    Calibrating,
}

/// How the run left the calibration.
#[derive(Debug, Clone, PartialEq)]
pub enum Calibration {
    /// Fitted on this many messages, with these parameters.
    Fitted {
        /// Messages of the sample it was fitted on.
        messages: usize,
        /// The parameters chosen.
        params: Params,
    },
    /// Too few messages of a class in the run: the previous one is kept.
    TooFew,
    /// The run held no message.
    NotRun,
}

/// Where a run was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// While reading: nothing was stored.
    Reading,
    /// After reading: everything read was stored and the model written.
    AfterReading,
}

/// What a training run did.
#[derive(Debug)]
pub struct Trained {
    /// Messages read and parsed.
    pub read: usize,
    /// Messages passed over while reading.
    pub skipped: Skipped,
    /// Messages that could not be parsed.
    pub unparsed: usize,
    /// What was stored (empty when interrupted while reading).
    pub summary: TrainSummary,
    /// Why no model was written, when the counts cannot make one.
    pub no_model: Option<String>,
    /// The calibration.
    pub calibration: Calibration,
    /// Messages stored in the run (distinct, duplicates and conflicts
    /// aside).
    pub stored: usize,
    /// Whether and where the run was interrupted.
    pub interrupted: Option<Interrupted>,
}

/// Why no model can be written for counts of `[ham, spam]` messages, if
/// it cannot: a model needs at least one message of each class.
pub fn missing_class(totals: [u64; 2]) -> Option<String> {
    match totals {
        [0, 0] => Some("the database holds no messages".to_string()),
        [0, n] => Some(format!(
            "the database holds {n} spam and no ham; learn some ham"
        )),
        [n, 0] => Some(format!(
            "the database holds {n} ham and no spam; learn some spam"
        )),
        _ => None,
    }
}

/// What a training run keeps of a message it read.
struct Read {
    id: MessageId,
    /// Its size.
    bytes: usize,
    /// Its features and identity.
    read: std::result::Result<(Features, Identity), message::Error>,
}

/// Extracts what training needs of `raw` on a reading worker, which also
/// frees the message's bytes: the thread that counts has enough to do.
fn read_for_training(ex: &mut Extractor, raw: RawMessage) -> Read {
    Read {
        read: ex.read(&raw.bytes),
        bytes: raw.bytes.len(),
        id: raw.id,
    }
}

/// A stage stopped by [`Training::interrupt`].
struct Stop;

/// What reading a run's folders came to.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reading {
    /// Messages read and parsed.
    pub read: usize,
    /// Messages that could not be parsed.
    pub unparsed: usize,
    /// Messages passed over.
    pub skipped: Skipped,
    /// Whether [`Training::interrupt`] stopped it.
    pub stopped: bool,
}

impl Trained {
    /// A run interrupted while reading: nothing stored.
    pub(crate) fn stopped(reading: Reading) -> Trained {
        Trained {
            read: reading.read,
            skipped: reading.skipped,
            unparsed: reading.unparsed,
            summary: TrainSummary::default(),
            no_model: None,
            calibration: Calibration::NotRun,
            stored: 0,
            interrupted: Some(Interrupted::Reading),
        }
    }
}

/// Reads the run's folders (its ham, then its spam), giving `each` every
/// message read with where it was; an error of `each` stops the reading
/// and is returned. The paths were checked ([`check_paths`]) before.
pub(crate) fn read_folders(
    job: &Training<'_>,
    progress: &dyn Fn(Progress<'_>),
    each: &mut dyn FnMut(Labelled, &MessageId) -> Result<()>,
) -> Result<Reading> {
    let interrupted = || job.interrupt.load(Ordering::SeqCst);
    let mut reading = Reading::default();
    for (paths, label) in [(job.ham, Label::Ham), (job.spam, Label::Spam)] {
        let mut failed = None;
        let result = sources::for_each_mapped(
            paths,
            &job.options,
            &read_for_training,
            &mut |skip| progress(Progress::Skipped(skip)),
            &mut |batch| {
                let mut bytes = 0;
                for e in batch {
                    bytes += e.bytes as u64;
                    match e.read {
                        Ok((features, identity)) => {
                            reading.read += 1;
                            let message = Labelled {
                                features,
                                identity,
                                label,
                            };
                            if let Err(err) = each(message, &e.id) {
                                failed = Some(err);
                                return Err(Stop);
                            }
                        }
                        Err(err) => {
                            reading.unparsed += 1;
                            progress(Progress::Unparsed(&e.id, &err));
                        }
                    }
                }
                progress(Progress::Read {
                    bytes,
                    messages: reading.read,
                });
                if interrupted() { Err(Stop) } else { Ok(()) }
            },
        );
        if let Some(err) = failed {
            return Err(err);
        }
        match result {
            Ok(s) => {
                reading.skipped.unreadable += s.unreadable;
                reading.skipped.not_mail += s.not_mail;
            }
            Err(Stop) => {
                reading.stopped = true;
                return Ok(reading);
            }
        }
    }
    Ok(reading)
}

/// What a database holds before a training run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Before {
    /// Messages learned, `[ham, spam]`.
    pub totals: [u64; 2],
    /// Its model's parameters (None: no model yet).
    pub params: Option<Params>,
}

/// The weights of the online discriminative view in `store`, which a run
/// steps from, if the run's model weighs that view.
pub(crate) fn weights_to_step(
    store: &(impl Store + ?Sized),
    job: &Training<'_>,
) -> Result<Option<logistic::Table>> {
    if !job.params.get().logistic {
        return Ok(None);
    }
    let mut table = logistic::Table::default();
    for (bucket, counts) in store.weights()? {
        table.set(bucket, counts);
    }
    Ok(Some(table))
}

/// Fits the run's stacker (and chooses the pseudo-counts and strengths,
/// unless pinned) on its sample, as every training run does: the
/// parameters chosen, the stacker with what it was fitted on (None with
/// too few of a class), and what became of the calibration. The
/// pseudo-counts suit the size of the database: a run with fewer messages
/// than the database held `before` it does not choose them, and keeps
/// the database's own (all of them, still following its size, in a
/// database that only learned: [`Params::grows`]). `weights` (see
/// [`weights_to_step`]) are stepped through the sample
/// ([`Run::calibrate`]).
pub(crate) fn calibrate(
    run: &mut Run,
    job: &Training<'_>,
    before: Before,
    weights: Option<logistic::Table>,
    progress: &dyn Fn(Progress<'_>),
) -> (Params, Option<super::run::Fitted>, Calibration) {
    if run.is_empty() {
        return (*job.params.get(), None, Calibration::NotRun);
    }
    progress(Progress::Calibrating);
    let (mut select, mut params) = (job.select, job.params);
    let smaller = (run.len() as u64) < before.totals.iter().sum::<u64>();
    // The database's values as it will score with them, at its size after
    // the run (at most its size and the run's).
    let [ham, spam] = run.sample.offered().map(|n| n as u64);
    let after = [before.totals[0] + ham, before.totals[1] + spam];
    let in_force = before.params.map(|kept| kept.at_size(after));
    // A database that only learned, given a run smaller than itself,
    // keeps following its size (`Params::grows`): the stacker is fitted
    // for the values in force, and it keeps its own.
    let growing = before
        .params
        .filter(|kept| kept.grows && params.get().grows && smaller);
    if let (Some(_), Some(now)) = (growing, in_force) {
        select.prior = false;
        select.strength = false;
        if let Ok(p) = (Params {
            a: now.a,
            b: now.b,
            combine: now.combine,
            bytes_min_strength: now.bytes_min_strength,
            grows: false,
            ..*params.get()
        })
        .check()
        {
            params = p;
        }
    } else if select.prior && smaller {
        select.prior = false;
        if let Some(now) = in_force
            && let Ok(p) = (Params {
                a: now.a,
                b: now.b,
                ..*params.get()
            })
            .check()
        {
            params = p;
        }
    }
    let settings = Settings {
        select,
        params,
        inner_folds: DEFAULT_INNER_FOLDS,
        inputs: Default::default(),
    };
    let (fitted_for, fitted) = run.calibrate(&settings, MIN_CALIBRATION_PER_CLASS, weights);
    let calibration = match &fitted {
        Some(f) => Calibration::Fitted {
            messages: f.messages,
            params: fitted_for,
        },
        None => Calibration::TooFew,
    };
    let chosen = match growing {
        Some(kept) => Params {
            a: kept.a,
            b: kept.b,
            combine: kept.combine,
            bytes_min_strength: kept.bytes_min_strength,
            grows: true,
            ..fitted_for
        },
        None => fitted_for,
    };
    (chosen, fitted, calibration)
}

/// An error if any path of the run is not a mailbox.
pub(crate) fn check_paths(job: &Training<'_>) -> Result<()> {
    let bad: Vec<String> = job
        .spam
        .iter()
        .chain(job.ham)
        .filter_map(|path| mailbox::detect(path).err().map(|e| e.to_string()))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Error::BadPaths(bad))
    }
}

impl Database {
    /// Trains the database on labelled folders: takes the writer's lock
    /// (setting a damaged journal aside), reads every message (each counted
    /// as it is read and its features dropped, unless sampled for the
    /// calibration, so memory follows the vocabulary, not the number of
    /// messages), refuses a run that gives a message both labels
    /// ([`Error::Conflicting`]), fits the calibration, stores the counts in
    /// one atomic write, and compiles the model when anything changed (a
    /// journal left by learn is folded too: a run always leaves one model
    /// holding everything). Paths that are not mailboxes are refused before
    /// anything is read ([`Error::BadPaths`]).
    ///
    /// Messages left pending ([`Database::learn_or_leave`]) are taken in
    /// before the run and after it: one moved in the mail client while the
    /// run read its folders ends with the label of the move.
    pub fn train(&self, job: &Training<'_>, progress: &dyn Fn(Progress<'_>)) -> Result<Trained> {
        check_paths(job)?;
        let limit = crate::store::DEFAULT_JOURNAL_LIMIT;
        self.in_turn(job.wait, limit, *job.params.get(), || {
            self.train_now(job, progress)
        })
    }

    fn train_now(&self, job: &Training<'_>, progress: &dyn Fn(Progress<'_>)) -> Result<Trained> {
        // The lock first: fail fast, before reading any mail.
        let (mut trainer, set_aside) = self.rebuilding_writer(job.wait)?;
        if let Some(aside) = &set_aside {
            progress(Progress::SetAside(aside));
        }
        let interrupted = || job.interrupt.load(Ordering::SeqCst);
        let mut run = Run::new();
        let reading = read_folders(job, progress, &mut |message, id| {
            trainer.add_to_run(&mut run, &message, id)
        })?;
        let Reading {
            read,
            unparsed,
            skipped,
            ..
        } = reading;
        if reading.stopped {
            return Ok(Trained::stopped(reading));
        }
        if !run.conflicts().is_empty() {
            return Err(Error::Conflicting(run.conflicts().to_vec()));
        }
        super::release_freed_memory();

        // Everything after reading is short and finishes even when
        // interrupted.
        let before = Before {
            totals: crate::store::Store::totals(trainer.store())?.messages,
            params: trainer.current_header().map(|h| h.params),
        };
        let weights = weights_to_step(trainer.store(), job)?;
        let (chosen, fitted, calibration) = calibrate(&mut run, job, before, weights, progress);
        let stored = run.len();
        let mut summary = trainer.store_run(run)?;
        let no_model = missing_class(summary.totals);
        let changed = summary.learned + summary.relearned > 0
            || trainer.model_is_stale()?
            || self.paths().journal().exists();
        if changed && no_model.is_none() {
            trainer
                .compile(chosen, fitted.as_ref().map(|f| (f.calibrator, f.messages)))
                .map_err(Error::model_not_written)?;
            summary.snapshot_written = true;
            // The learns after this run refit on the scores its stacker
            // was fitted on, and then on theirs.
            if let Some(f) = fitted {
                crate::store::samples::write(
                    &self.paths().samples(),
                    &Prequential::after_training(f.samples),
                )?;
            }
        }
        Ok(Trained {
            read,
            skipped,
            unparsed,
            summary,
            no_model,
            calibration,
            stored,
            interrupted: interrupted().then_some(Interrupted::AfterReading),
        })
    }
}
