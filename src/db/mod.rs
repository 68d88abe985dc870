//! The database directory: its paths and errors, [`Database`] (which opens
//! its reader and its writer and runs the engine's calls: learn, unlearn,
//! prune), the read side ([`Classifier`], followed by [`Reader`]: the
//! snapshot and its journal, never the count store) and the write side
//! ([`Trainer`]: the count store, the snapshot, the journal; `quick`
//! teaches a few messages through the journal alone). The binary opens
//! both through [`Database`].
//!
//! ```text
//! DB/counts.sled/   the counts: source of truth, one writer (train, learn, unlearn)
//! DB/model.bin      the compiled model: immutable, replaced atomically by
//!                   `train` and when the journal grows past its bound, read
//!                   whole by any number of readers
//! DB/model.journal  the count changes since model.bin was compiled, one
//!                   checksummed entry per learn/unlearn, applied by readers
//!                   on open (see [`crate::store::journal`])
//! DB/model.samples  the prequential record the stacker is refitted on as
//!                   the database learns (see [`crate::store::samples`])
//! DB/learn.log      one line per message learn, unlearn or serve taught:
//!                   when, what, from where (see [`learnlog`])
//! DB/pending/       messages a learn or unlearn left for the next writer
//!                   while another held the database (see [`pending`])
//! ```
//!
//! The directory is created private (0700) and the files bayesmail writes
//! are created private (0600): the counts name every correspondent. Existing
//! permissions are left alone, so a user who loosened them keeps theirs.

use std::path::{Path, PathBuf};

mod database;
mod delivery;
pub mod learnlog;
mod lock;
pub mod pending;
pub(crate) mod quick;
mod reader;
mod report;
mod restack;
mod run;
mod scan;
pub mod shared;
mod summary;
mod train;
mod writer;

pub use database::{Database, ModelAfter, Reader, Unlearned};
pub use delivery::{Parsed, Reason, Stamped, Status, stamp_shared_parsed, user_model_judges};
pub use learnlog::Origin;
pub use pending::Taught;

pub use lock::WriterLock;
pub use reader::{
    Classifier, Explanation, Judgment, ModelHeader, Score, TokenWeight, ViewPart, judge,
};
pub use report::{Explained, Stats};
pub use run::Run;
pub use scan::{Action, ActionError, Event, ScanSummary, Scanned, SpamAction};
pub use summary::TrainSummary;
pub use train::{
    Calibration, Interrupted, MIN_CALIBRATION_PER_CLASS, Progress, Trained, Training, missing_class,
};
pub use writer::{
    CHUNK_MESSAGES, DEFAULT_LOCK_WAIT, Labelled, SetAside, Trainer, release_freed_memory,
};

use crate::store;

/// Errors of the database layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The count store or the snapshot failed.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The database has no model yet (nothing learned, or one class only).
    #[error("no model at {0}")]
    NoModel(PathBuf),
    /// The snapshot's parameters do not pass the checks.
    #[error("model at {path} is unusable: {reason}")]
    BadModel {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A training run was given messages under both labels: it cannot
    /// say which label the user meant, so it stores nothing.
    #[error(
        "{} message{} given as both spam and ham; nothing was learned and no model was written",
        .0.len(),
        if .0.len() == 1 { " is" } else { "s are" }
    )]
    Conflicting(Vec<String>),
    /// Paths given to a training run that are not mailboxes: it reads
    /// nothing and stores nothing.
    #[error(
        "{}: nothing was learned and no model was written: fix the path{}",
        first_few(.0),
        if .0.len() > 1 { "s" } else { "" }
    )]
    BadPaths(Vec<String>),
    /// Nothing has been learned into the database, so there is nothing to
    /// take back (unlearn) or remove (prune); it is not created.
    #[error("nothing has been learned into {} yet", .0.display())]
    NothingLearned(PathBuf),
    /// Unlearning a message that was never learned.
    #[error("this message was never learned, so it cannot be unlearned")]
    NotLearned,
    /// The count store no longer holds what the model was built from (it
    /// was deleted, truncated, replaced or rolled back): writing would
    /// replace the model with one built from what is left.
    #[error(
        "the count store {} {reason}, so the model at {} (built from {model_messages} messages) \
         is not replaced with one built from what is left. To keep the model, restore the \
         count store from a backup; to start over on purpose, remove the model file as well \
         (or use a new database directory) and retrain",
        counts.display(),
        model.display()
    )]
    LostHistory {
        /// The count store.
        counts: PathBuf,
        /// The snapshot file.
        model: PathBuf,
        /// Messages the model was built from.
        model_messages: u64,
        /// What happened to the store.
        reason: String,
    },
    /// The model file cannot be reached, so whether there is one is not
    /// known (a reader who may not enter the database directory, say).
    #[error("cannot read {}: {}", path.display(), crate::fsutil::words(source))]
    Unreadable {
        /// The model file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database directory is there but could not be entered or read
    /// (its own permissions or a parent's).
    #[error("cannot enter database directory {}: {}", path.display(), crate::fsutil::words(source))]
    Enter {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A writer running as root on a database another user can change
    /// ([`Database::unsafe_for_root`]): one another user owns, one
    /// it would make inside another user's directory, one reached through
    /// a directory others may write to.
    #[error("the database {why}: {}", why.instead())]
    Foreign {
        /// Who can change what.
        why: crate::fsutil::Unsafe,
    },
    /// Creating the database directory failed.
    #[error("cannot create database directory {}: {}", path.display(), crate::fsutil::words(source))]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A learn or unlearn found the database held by another writer past
    /// its wait ([`store::Error::Locked`]), and the message could not be
    /// left for the next writer either ([`pending`]).
    #[error("{locked}, and the message could not be left for the next writer: {why}")]
    NotLeft {
        /// The error of the learn.
        locked: Box<Error>,
        /// Why it could not be left.
        why: String,
    },
    /// The counts hold the change, but the model that follows them could
    /// not be written (a disk full, say). Nothing is half done: readers
    /// keep the model they had, and the next writer that finds it behind
    /// the counts writes it, even one that learns nothing new.
    #[error(
        "{source}: the counts hold this change, but the model could not be written to follow \
         them; the next learn or training run writes it"
    )]
    ModelNotWritten {
        /// Why.
        source: Box<Error>,
    },
}

impl Error {
    /// `self`, as the error of a model that could not be written after
    /// the counts changed.
    pub(crate) fn model_not_written(self) -> Error {
        Error::ModelNotWritten {
            source: Box::new(self),
        }
    }
}

/// The first few of `items` joined, and how many more: one line however
/// many a run names (a script's glob of thousands of wrong paths).
fn first_few(items: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = items[..items.len().min(SHOWN)].join("; ");
    if items.len() > SHOWN {
        text.push_str(&format!("; … and {} more", items.len() - SHOWN));
    }
    text
}

/// Result of the database layer.
pub type Result<T> = std::result::Result<T, Error>;

/// Paths inside a database directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbPaths {
    dir: PathBuf,
}

impl DbPaths {
    /// The database at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> DbPaths {
        DbPaths { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sled count store.
    pub fn counts(&self) -> PathBuf {
        self.dir.join("counts.sled")
    }

    /// The compiled model snapshot.
    pub fn snapshot(&self) -> PathBuf {
        self.dir.join("model.bin")
    }

    /// The journal of changes since the snapshot was compiled.
    pub fn journal(&self) -> PathBuf {
        self.dir.join("model.journal")
    }

    /// The registry file beside the snapshot (see
    /// [`crate::store::registry`]).
    pub fn registry(&self) -> PathBuf {
        self.dir.join("model.registry")
    }

    /// The prequential record the stacker of a learning database is
    /// refitted on (see [`crate::store::samples`]).
    pub fn samples(&self) -> PathBuf {
        self.dir.join("model.samples")
    }

    /// The writers' lock file.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }

    /// The messages left for the next writer (see [`pending`]).
    pub fn pending(&self) -> PathBuf {
        self.dir.join("pending")
    }

    /// Whether a database has been made here (its count store, or its
    /// model file), not a directory merely named like one.
    pub fn holds_database(&self) -> bool {
        crate::store::sled::SledStore::exists(&self.counts()) || self.snapshot().is_file()
    }

    /// Removes what writers killed while replacing the model's files
    /// (snapshot, journal, registry, record) left: every writer sweeps,
    /// since `learn` may never write the model file again before `train`.
    pub(crate) fn sweep_stale_temps(&self) {
        for file in [
            self.snapshot(),
            self.journal(),
            self.registry(),
            self.samples(),
        ] {
            if let Some(name) = file.file_name() {
                crate::fsutil::remove_stale_temps(
                    self.dir(),
                    Some(&name.to_string_lossy()),
                    std::time::Duration::ZERO,
                );
            }
        }
    }
}
