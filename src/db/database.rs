//! [`Database`]: a database directory, to open its readers and its writers
//! and to run the engine's calls on it (learn, unlearn, prune); and
//! [`Reader`], a reader that lives as long as its process (a daemon's, for
//! weeks) and follows the database as writers change it.

use std::path::PathBuf;
use std::time::Duration;

use super::learnlog::{self, Change, Origin};
use super::restack::Restack;
use super::{Classifier, DbPaths, Error, Labelled, Result, SetAside, TrainSummary, Trainer, quick};
use crate::features::Features;
use crate::message::Identity;
use crate::model::{Label, Params};
use crate::store::Store;

/// A database directory: where its files are, and how to open its two
/// sides. Opening it does nothing on disk; [`Database::reader`] and
/// [`Database::writer`] do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Database {
    paths: DbPaths,
    origin: Origin,
}

impl Database {
    /// The database at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Database {
        Database {
            paths: DbPaths::new(dir),
            origin: Origin::default(),
        }
    }

    /// The same database, with `origin` named in the learn log for what
    /// [`Database::learn`] and [`Database::unlearn`] change.
    pub fn with_origin(mut self, origin: Origin) -> Database {
        self.origin = origin;
        self
    }

    /// Its files.
    pub fn paths(&self) -> &DbPaths {
        &self.paths
    }

    /// Who asks for its learns (see [`Database::with_origin`]).
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// A reader of its model and journal (never of the count store, so it
    /// neither waits for nor blocks a writer).
    pub fn reader(&self) -> Result<Reader> {
        Reader::open(&self.paths)
    }

    /// Why, run as root, no writer may write it, if none may: another
    /// user can change what its path leads to (the writers refuse it with
    /// [`super::Error::Foreign`]; a command may say so before it reads
    /// anything).
    pub fn unsafe_for_root(&self) -> Option<crate::fsutil::Unsafe> {
        super::lock::unsafe_for_root(&self.paths)
    }

    /// Its writer, waiting up to `wait` for another writer's lock (see
    /// [`Trainer::open`]).
    pub fn writer(&self, wait: Duration) -> Result<Trainer> {
        Trainer::open(&self.paths, wait)
    }

    /// Its writer for rebuilding the model from the count store and the
    /// folders a training run reads: a damaged journal is set aside rather
    /// than refused (see [`Trainer::open_rebuilding`]).
    pub(crate) fn rebuilding_writer(&self, wait: Duration) -> Result<(Trainer, Option<SetAside>)> {
        Trainer::open_rebuilding(&self.paths, wait)
    }
}

/// What teaching a few messages left of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelAfter {
    /// Up to date with the counts (through the journal, or compiled anew).
    UpToDate,
    /// No model: the counts no longer hold both classes (`[ham, spam]`),
    /// and a model of one class would call everything unsure, so the model
    /// files were removed.
    Removed([u64; 2]),
}

/// What [`Database::unlearn`] did with each message.
#[derive(Debug)]
pub struct Unlearned {
    /// Per message, in order: the label it had, or why not
    /// ([`Error::NotLearned`]: never learned, or given before in the same
    /// call). A database's unlearn is one change, all or none, and fails
    /// as a whole; in Redis, after an error other than that, the rest
    /// were not tried.
    pub results: Vec<Result<Label>>,
    /// Counts of the messages unlearned that could not be taken back
    /// exactly (see [`TrainSummary::inexact`]).
    pub inexact: u64,
    /// What the model is now.
    pub model: ModelAfter,
    /// Why the learn log could not be written, if it could not, and whether
    /// the counts changed all the same (see [`TrainSummary::log_failure`]).
    pub log_failure: Option<String>,
    /// Why the model was rebuilt from the counts, if it was (see
    /// [`TrainSummary::rebuilt`]).
    pub rebuilt: Option<String>,
}

/// What to say of a model `writer` found unreadable (`unreadable`, why)
/// and rebuilt from the counts, if it did.
fn rebuilt(writer: &Trainer, unreadable: Option<String>) -> Option<String> {
    let why = unreadable?;
    let header = writer.current_header()?;
    let stacker = match header.calibrated_on {
        0 => "no stacker fitted yet (too few messages judged of a class)".to_string(),
        n => format!("its stacker refitted on the last {n} messages judged"),
    };
    Some(format!(
        "{why}: the model was rebuilt from the counts, {stacker}; a training run over your \
         folders makes again the choices only a training run makes"
    ))
}

impl Database {
    /// Learns a few messages under their labels, idempotently (see
    /// [`Trainer::learn`]): through the journal alone when it can, else
    /// through the count store, then makes the model follow (`params` are
    /// those of a first model). Waits up to `wait` for another writer; the
    /// journal grows to at most `journal_limit` bytes before it is folded.
    ///
    /// Messages left pending ([`Database::learn_or_leave`]) are taken in
    /// first, under the lock this learn waited for, and again after.
    pub fn learn(
        &self,
        messages: &[Labelled],
        wait: Duration,
        journal_limit: u64,
        params: Params,
    ) -> Result<(TrainSummary, ModelAfter)> {
        self.in_turn(wait, journal_limit, params, || {
            self.learn_now(messages, wait, journal_limit, params)
        })
    }

    pub(super) fn learn_now(
        &self,
        messages: &[Labelled],
        wait: Duration,
        journal_limit: u64,
        params: Params,
    ) -> Result<(TrainSummary, ModelAfter)> {
        // Each message as the model judges it before this learn, under
        // the writers' lock: the stacker's prequential samples.
        let mut restack = Restack::new(&self.paths);
        let learned = quick::learn(&self.paths, wait, messages, journal_limit, &mut restack)?;
        let (summary, model) = match learned {
            Some(summary) => (summary, ModelAfter::UpToDate),
            None => {
                let mut writer = self.writer(wait)?;
                writer.first_params(params);
                let unreadable = writer.unreadable_model().map(str::to_owned);
                restack.judge_again(&self.paths, messages, None);
                let mut summary = writer.learn(messages, &mut |_| {})?;
                writer.refitted(restack.refit(&summary.changes));
                let model = self.follow(&mut writer, params)?;
                restack.commit();
                summary.rebuilt = rebuilt(&writer, unreadable);
                (summary, model)
            }
        };
        let mut summary = summary;
        summary.log_failure = self.log(&summary.changes);
        Ok((summary, model))
    }

    /// Appends `changes` to the learn log. The counts have changed by
    /// then: a log that cannot be written (a full disk) must not turn a
    /// learn that happened into an error, so that failure is returned in
    /// words, for the caller to note.
    fn log(&self, changes: &[(crate::vocab::Digest, Change)]) -> Option<String> {
        let changed = changes
            .iter()
            .any(|(_, change)| !matches!(change, Change::Already(_)));
        learnlog::append(&self.paths, self.origin, changes)
            .err()
            .map(|e| {
                format!(
                    "learn log {} not written: {}; {}",
                    learnlog::path(&self.paths).display(),
                    crate::fsutil::words(&e),
                    if changed {
                        "the counts changed all the same"
                    } else {
                        "nothing else changed"
                    }
                )
            })
    }

    /// Unlearns a few messages (features and identity) as
    /// [`Database::learn`] learns them, messages left pending taken in
    /// before and after.
    pub fn unlearn(
        &self,
        messages: &[(&Features, Identity)],
        wait: Duration,
        journal_limit: u64,
        params: Params,
    ) -> Result<Unlearned> {
        self.in_turn(wait, journal_limit, params, || {
            self.unlearn_now(messages, wait, journal_limit, params)
        })
    }

    pub(super) fn unlearn_now(
        &self,
        messages: &[(&Features, Identity)],
        wait: Duration,
        journal_limit: u64,
        params: Params,
    ) -> Result<Unlearned> {
        self.must_exist()?;
        let log = |results: &[Result<Label>]| {
            let changes: Vec<_> = messages
                .iter()
                .zip(results)
                .filter_map(|((_, id), r)| Some((id.digest, Change::Unlearned(*r.as_ref().ok()?))))
                .collect();
            self.log(&changes)
        };
        let mut restack = Restack::new(&self.paths);
        if let Some((results, inexact)) =
            quick::unlearn(&self.paths, wait, messages, journal_limit, &mut restack)?
        {
            let log_failure = log(&results);
            return Ok(Unlearned {
                results,
                inexact,
                log_failure,
                model: ModelAfter::UpToDate,
                rebuilt: None,
            });
        }
        let mut writer = self.writer(wait)?;
        let unreadable = writer.unreadable_model().map(str::to_owned);
        let (results, inexact) = writer.unlearn(messages)?;
        let changes: Vec<_> = messages
            .iter()
            .zip(&results)
            .filter_map(|((_, id), r)| Some((id.digest, Change::Unlearned(*r.as_ref().ok()?))))
            .collect();
        restack.refit(&changes);
        let model = self.follow(&mut writer, params)?;
        restack.commit();
        let log_failure = log(&results);
        Ok(Unlearned {
            results,
            inexact,
            log_failure,
            model,
            rebuilt: rebuilt(&writer, unreadable),
        })
    }

    /// Removes word tokens seen at most `max_count` times and unchanged for
    /// `min_age_days` days (see [`Trainer::prune`]) and makes the model
    /// follow. Returns how many were removed and how many tokens are left
    /// (the naive Bayes views' words and byte buckets, as `stats` counts its
    /// vocabulary: the discriminative view's weights are not tokens).
    pub fn prune(
        &self,
        max_count: u64,
        min_age_days: u32,
        wait: Duration,
        params: Params,
    ) -> Result<(usize, u64, ModelAfter)> {
        let limit = crate::store::DEFAULT_JOURNAL_LIMIT;
        self.in_turn(wait, limit, params, || {
            self.prune_now(max_count, min_age_days, wait, params)
        })
    }

    fn prune_now(
        &self,
        max_count: u64,
        min_age_days: u32,
        wait: Duration,
        params: Params,
    ) -> Result<(usize, u64, ModelAfter)> {
        self.must_exist()?;
        let mut writer = self.writer(wait)?;
        let removed = writer.prune(max_count, min_age_days)?;
        let model = self.follow(&mut writer, params)?;
        let store = writer.store();
        let left = store
            .token_count()?
            .saturating_sub(store.weights()?.len() as u64);
        Ok((removed, left, model))
    }

    /// [`Error::NothingLearned`] when the count store does not exist:
    /// opening a writer would create it, empty.
    fn must_exist(&self) -> Result<()> {
        if self.paths.counts().exists() {
            Ok(())
        } else {
            Err(Error::NothingLearned(self.paths.dir().to_path_buf()))
        }
    }

    /// Makes the model follow the counts after `writer` changed them (see
    /// [`Trainer::publish`]), or removes it if they no longer hold both
    /// classes. Also repairs a model an earlier writer left behind the
    /// counts (killed between storing and publishing), so the model never
    /// lags them.
    fn follow(&self, writer: &mut Trainer, params: Params) -> Result<ModelAfter> {
        let totals = writer.store().totals()?.messages;
        if totals.contains(&0) {
            for path in [
                self.paths.registry(),
                self.paths.snapshot(),
                self.paths.journal(),
            ] {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(source) => return Err(crate::store::Error::Io { path, source }.into()),
                }
            }
            return Ok(ModelAfter::Removed(totals));
        }
        writer
            .publish(params)
            .map_err(super::Error::model_not_written)?;
        Ok(ModelAfter::UpToDate)
    }
}

/// What a file was when a reader read it: its identity, size and change
/// time. A writer replaces the model by a rename (another inode) and
/// appends to the journal (another size and time), so a file that still
/// matches has not changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    dev: u64,
    ino: u64,
    len: u64,
    ctime: (i64, i64),
}

impl Seen {
    /// The file at `path` as it is now; `None` if there is none.
    fn now(path: &std::path::Path) -> Option<Seen> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(Seen {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// A reader that follows its database: [`Reader::refresh`] looks at the
/// model and journal files and reads them again only when a writer has
/// changed them, so a long-lived process judges with what was last
/// learned. Judging goes through [`Reader::classifier`].
pub struct Reader {
    paths: DbPaths,
    classifier: Classifier,
    seen: [Option<Seen>; 2],
    loads: u64,
}

impl Reader {
    fn open(paths: &DbPaths) -> Result<Reader> {
        // Looked at before reading, so that a change made while it reads
        // is seen by the next refresh rather than missed.
        let seen = Self::look(paths);
        let classifier = Classifier::open(paths)?;
        Ok(Reader {
            paths: paths.clone(),
            classifier,
            seen,
            loads: 1,
        })
    }

    fn look(paths: &DbPaths) -> [Option<Seen>; 2] {
        [Seen::now(&paths.snapshot()), Seen::now(&paths.journal())]
    }

    /// Reads the model and its journal again if a writer changed either
    /// since they were read; returns whether it did. When nothing changed
    /// it only looks at the two files' metadata. If reading fails (a model
    /// damaged, removed or of another version), the error is returned and
    /// the reader keeps judging with what it had; the next refresh tries
    /// again.
    pub fn refresh(&mut self) -> Result<bool> {
        let now = Self::look(&self.paths);
        if now == self.seen {
            return Ok(false);
        }
        let classifier = Classifier::open(&self.paths)?;
        self.classifier = classifier;
        self.seen = now;
        self.loads += 1;
        Ok(true)
    }

    /// Whether the model and journal files are as this reader last read
    /// them (only their metadata is looked at): when not,
    /// [`Reader::refresh`] reads them again.
    pub(crate) fn is_current(&self) -> bool {
        Self::look(&self.paths) == self.seen
    }

    /// The model as last read, to judge and explain with.
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }

    /// The database it reads.
    pub fn paths(&self) -> &DbPaths {
        &self.paths
    }

    /// How many times this reader has read its model and journal: once at
    /// open and once per refresh that found a change.
    pub fn loads(&self) -> u64 {
        self.loads
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("db", &self.paths.dir())
            .field("loads", &self.loads)
            .finish_non_exhaustive()
    }
}
