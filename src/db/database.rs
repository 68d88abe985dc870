//! [`Database`]: the one way to open a database directory, for its readers
//! and its writers; and [`Reader`], a reader that lives as long as its
//! process (a daemon's, for weeks) and follows the database as writers
//! change it.

use std::path::PathBuf;
use std::time::Duration;

use super::{Classifier, DbPaths, Result, Trainer};

/// A database directory: where its files are, and how to open its two
/// sides. Opening it does nothing on disk; [`Database::reader`] and
/// [`Database::writer`] do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Database {
    paths: DbPaths,
}

impl Database {
    /// The database at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Database {
        Database {
            paths: DbPaths::new(dir),
        }
    }

    /// Its files.
    pub fn paths(&self) -> &DbPaths {
        &self.paths
    }

    /// A reader of its model and journal (never of the count store, so it
    /// neither waits for nor blocks a writer).
    pub fn reader(&self) -> Result<Reader> {
        Reader::open(&self.paths)
    }

    /// Its writer, waiting up to `wait` for another writer's lock (see
    /// [`Trainer::open`]).
    pub fn writer(&self, wait: Duration) -> Result<Trainer> {
        Trainer::open(&self.paths, wait)
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
