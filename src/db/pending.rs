//! Messages left for the next writer: a `learn` or `unlearn` (the
//! command's or serve's) that finds another writer holding the database
//! past its wait (a training run over large folders, say) leaves each
//! message here rather than fail (see
//! [`super::Database::learn_or_leave`]), and the writers take them in, in
//! the order they came. A move the user made in their mail client while a
//! training run held the database is learned when the run ends, not lost.
//!
//! ```text
//! DB/pending/NANOS-PID-N.ORIGIN.WHAT   the message as it was read; WHAT is
//!                                      spam, ham or unlearn
//! DB/pending/failed-NAME               one that could not be read as mail
//! ```
//!
//! Each entry is written whole (a temporary name, synced, renamed), so a
//! writer never sees part of one. A writer takes them in once it holds
//! the lock it waited for, before its own change, so nothing left before
//! it got the lock comes after it; the lock is held across all of them,
//! so they are made in order and by one process at a time; each is
//! removed once its change is made. A process killed in
//! between leaves it to be made again, which changes nothing (learning and
//! unlearning go by the message's identity).
//!
//! Taking them in never waits for the writers' lock, and none is left
//! behind: every writer looks for them after it lets the lock go, and one
//! that leaves a message tries the lock after it has; so either it gets
//! the lock, or whoever holds it looks after letting go.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::learnlog::Origin;
use super::lock::Holding;
use super::{Database, DbPaths, Error, Labelled, Result};
use crate::features::Extractor;
use crate::model::{Label, Params};

/// What was asked of a message left pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// Learn it under this label.
    Learn(Label),
    /// Unlearn it.
    Unlearn,
}

impl Asked {
    fn name(self) -> &'static str {
        match self {
            Asked::Learn(l) => l.name(),
            Asked::Unlearn => "unlearn",
        }
    }

    fn from_name(name: &str) -> Option<Asked> {
        match name {
            "unlearn" => Some(Asked::Unlearn),
            _ => name.parse().ok().map(Asked::Learn),
        }
    }
}

/// At most this many messages wait at once: past it, a learn fails as it
/// would without the queue, rather than fill the disk.
pub const MAX_PENDING: usize = 10_000;

/// At most this many bytes of messages wait at once (see [`MAX_PENDING`]).
pub const MAX_PENDING_BYTES: u64 = 256 << 20;

/// The prefix of an entry set aside.
const FAILED: &str = "failed-";

/// One message waiting.
#[derive(Debug)]
pub(super) struct Entry {
    /// Its file.
    pub path: PathBuf,
    /// What was asked.
    pub asked: Asked,
    /// Who asked.
    pub origin: Origin,
}

/// How many messages wait, and how many were set aside.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Waiting {
    /// Messages waiting for the writers' lock.
    pub waiting: usize,
    /// Messages set aside: they could not be read as mail when taken in.
    pub failed: usize,
    /// Why the queue cannot be read, if it cannot (a link where its
    /// directory should be): nothing can be left there until it is mended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Leaves `raw` for the next writer. Fails if the directory cannot be
/// made or written, or [`MAX_PENDING`] or [`MAX_PENDING_BYTES`] would be
/// passed.
pub(super) fn put(paths: &DbPaths, raw: &[u8], asked: Asked, origin: Origin) -> io::Result<()> {
    put_within(paths, raw, asked, origin, (MAX_PENDING, MAX_PENDING_BYTES))
}

/// [`put`] with its bounds: messages and bytes.
fn put_within(
    paths: &DbPaths,
    raw: &[u8],
    asked: Asked,
    origin: Origin,
    (max, max_bytes): (usize, u64),
) -> io::Result<()> {
    let dir = paths.pending();
    if fs::symlink_metadata(&dir).is_err() {
        super::lock::private_dir(&dir)?;
        let _ = crate::fsutil::share_new_dir(&dir);
    }
    let len = raw.len() as u64;
    if len > max_bytes {
        return Err(io::Error::other(format!(
            "the message ({len} bytes) is larger than the {max_bytes} bytes that may wait"
        )));
    }
    // What was set aside counts too: it stays until someone removes it.
    let (count, bytes) = listed(paths)?
        .iter()
        .fold((0, 0), |(n, b), (path, _)| (n + 1, b + size(path)));
    if count >= max || bytes + len > max_bytes {
        return Err(io::Error::other(format!(
            "{} already holds {count} messages ({bytes} bytes) waiting or set aside",
            dir.display()
        )));
    }
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!(
        "{nanos:024}-{:010}-{:020}.{}.{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        origin.name(),
        asked.name()
    );
    crate::fsutil::write_atomically(&dir.join(name), raw).map_err(|e| e.source)
}

fn size(path: &Path) -> u64 {
    fs::symlink_metadata(path).map_or(0, |m| m.len())
}

/// The names in the directory (none if there is none) that are not
/// temporary, with their paths. Only a directory itself, never one reached
/// through a link: what is read and removed there must be the database's.
fn listed(paths: &DbPaths) -> io::Result<Vec<(PathBuf, String)>> {
    let dir = paths.pending();
    match fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(io::Error::other(format!(
                "{} is not a directory (a link or a file); remove it",
                dir.display()
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    }
    Ok(fs::read_dir(&dir)?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            (!name.starts_with('.')).then(|| (e.path(), name))
        })
        .collect())
}

/// The entries waiting, oldest first (none if there is no directory).
pub(super) fn entries(paths: &DbPaths) -> io::Result<Vec<Entry>> {
    let mut found: Vec<Entry> = listed(paths)?
        .into_iter()
        .filter_map(|(path, name)| {
            let mut parts = name.rsplitn(3, '.');
            let asked = Asked::from_name(parts.next()?)?;
            let origin = parts.next()?.parse().ok()?;
            let stem = parts.next()?;
            stem.bytes().next()?.is_ascii_digit().then_some(Entry {
                path,
                asked,
                origin,
            })
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// How many wait and how many were set aside.
pub(super) fn waiting(paths: &DbPaths) -> Waiting {
    let listed = match listed(paths) {
        Ok(listed) => listed,
        Err(e) => {
            return Waiting {
                refused: Some(crate::fsutil::words(&e)),
                ..Waiting::default()
            };
        }
    };
    Waiting {
        waiting: entries(paths).map_or(0, |e| e.len()),
        failed: listed.iter().filter(|(_, n)| n.starts_with(FAILED)).count(),
        refused: None,
    }
}

/// The message of `entry`; `None` if it is gone (another process took it
/// in).
pub(super) fn read(entry: &Entry) -> io::Result<Option<Vec<u8>>> {
    match crate::fsutil::open_regular_no_follow(&entry.path) {
        Ok(mut file) => {
            let mut raw = Vec::new();
            file.read_to_end(&mut raw)?;
            Ok(Some(raw))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes `entry`, its change made (gone already is fine).
pub(super) fn done(entry: &Entry) -> io::Result<()> {
    match fs::remove_file(&entry.path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Sets `entry` aside: it will never be taken in (not mail, say).
pub(super) fn set_aside(entry: &Entry) -> io::Result<()> {
    let name = entry.path.file_name().unwrap_or_default().to_string_lossy();
    fs::rename(
        &entry.path,
        entry.path.with_file_name(format!("{FAILED}{name}")),
    )
}

/// What a learn or unlearn that may leave its messages pending did.
#[derive(Debug)]
pub enum Taught<T> {
    /// Made now: what [`Database::learn`] or [`Database::unlearn`] says.
    Now(T),
    /// Another writer held the database past the wait: the messages were
    /// left for it, which takes them in when it lets go.
    Left,
}

impl Database {
    /// [`Database::learn`], except that when another writer holds the
    /// database past `wait` the messages are left for it rather than the
    /// learn failing: `raw` gives them as they were read (asked only then,
    /// so that a caller need not keep a large mbox in memory; each is
    /// checked to be the message learned, by its identity).
    pub fn learn_or_leave(
        &self,
        messages: &[Labelled],
        raw: impl FnOnce() -> std::result::Result<Vec<Vec<u8>>, String>,
        wait: Duration,
        journal_limit: u64,
        params: Params,
    ) -> Result<Taught<(super::TrainSummary, super::ModelAfter)>> {
        match self.learn(messages, wait, journal_limit, params) {
            Err(locked @ Error::Store(crate::store::Error::Locked { .. })) => {
                let asked = messages.iter().map(|m| (Asked::Learn(m.label), m.identity));
                self.leave_pending(raw, asked.collect(), locked, journal_limit, params)
            }
            learned => learned.map(Taught::Now),
        }
    }

    /// [`Database::unlearn`], leaving the messages as
    /// [`Database::learn_or_leave`] does.
    pub fn unlearn_or_leave(
        &self,
        messages: &[(&crate::features::Features, crate::message::Identity)],
        raw: impl FnOnce() -> std::result::Result<Vec<Vec<u8>>, String>,
        wait: Duration,
        journal_limit: u64,
        params: Params,
    ) -> Result<Taught<super::Unlearned>> {
        match self.unlearn(messages, wait, journal_limit, params) {
            Err(locked @ Error::Store(crate::store::Error::Locked { .. })) => {
                let asked = messages.iter().map(|(_, id)| (Asked::Unlearn, *id));
                self.leave_pending(raw, asked.collect(), locked, journal_limit, params)
            }
            unlearned => unlearned.map(Taught::Now),
        }
    }

    /// Leaves each message of `raw` for the next writer, asked what
    /// `asked` says of the message of that identity, after a learn or
    /// unlearn failed with `locked`; then takes in what is pending if the
    /// lock has come free since (see the module's documentation). Fails
    /// with [`Error::NotLeft`] if `raw` does not give those messages, one
    /// cannot be written, or the queue is full (those before it wait all
    /// the same).
    fn leave_pending<T>(
        &self,
        raw: impl FnOnce() -> std::result::Result<Vec<Vec<u8>>, String>,
        asked: Vec<(Asked, crate::message::Identity)>,
        locked: Error,
        journal_limit: u64,
        params: Params,
    ) -> Result<Taught<T>> {
        let not_left = |why: String| Error::NotLeft {
            locked: Box::new(locked),
            why,
        };
        let raw = match raw() {
            Ok(raw) if raw.len() == asked.len() => raw,
            Ok(_) => return Err(not_left("the messages could not be read again".into())),
            Err(why) => return Err(not_left(why)),
        };
        let mut extractor = Extractor::new();
        for (message, (_, identity)) in raw.iter().zip(&asked) {
            let same = extractor
                .read(message)
                .is_ok_and(|(_, id)| id.digest == identity.digest);
            if !same {
                return Err(not_left(
                    "the message read again is not the one learned (its file changed)".into(),
                ));
            }
        }
        for (i, (message, (what, _))) in raw.iter().zip(&asked).enumerate() {
            if let Err(e) = put(self.paths(), message, *what, self.origin()) {
                let left = match i {
                    0 => String::new(),
                    n => format!(" ({n} of {} were left)", raw.len()),
                };
                return Err(not_left(format!("{}{left}", crate::fsutil::words(&e))));
            }
        }
        self.take_pending(journal_limit, params);
        Ok(Taught::Left)
    }

    /// How many messages wait for the writers' lock, and how many were
    /// set aside.
    pub fn pending(&self) -> Waiting {
        waiting(self.paths())
    }

    /// Runs `change`, one of the engine's writers, holding the writers'
    /// lock (waited for up to `wait`) from before what is pending is taken
    /// in to after its own change, so that nothing left before it got the
    /// lock comes after it; then, the lock let go, takes in what was left
    /// meanwhile ([`Database::take_pending`]). A database not made yet
    /// has nothing pending: `change` makes it.
    pub(super) fn in_turn<T>(
        &self,
        wait: Duration,
        journal_limit: u64,
        params: Params,
        change: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let held = match self.paths().dir().is_dir() {
            true => super::lock::refuse_foreign(self.paths())
                .and_then(|()| Holding::take(self.paths(), wait))
                .map(Some),
            false => Ok(None),
        };
        let result = match held {
            // One left earlier that cannot be made now (a full disk) stops
            // this change too: it must not come before it.
            Ok(Some(_holding)) => self.take_in(journal_limit, params).and_then(|()| change()),
            Ok(None) => change(),
            Err(locked @ Error::Store(crate::store::Error::Locked { .. })) => Err(locked),
            // Said by the writer itself, in its words (a directory it may
            // not enter, say).
            Err(_) => change(),
        };
        self.take_pending(journal_limit, params);
        result
    }

    /// Takes in the messages left pending, oldest first, if the writers'
    /// lock is free now (else whoever holds it does, after). Best effort:
    /// one whose change fails (a full disk) is left for the next writer;
    /// one that cannot be read, or not as mail, is set aside.
    pub(super) fn take_pending(&self, journal_limit: u64, params: Params) {
        // Again after letting go: what was left while the lock was held.
        while entries(self.paths()).is_ok_and(|e| !e.is_empty()) {
            let Ok(_holding) = Holding::take(self.paths(), Duration::ZERO) else {
                return;
            };
            if self.take_in(journal_limit, params).is_err() {
                return;
            }
        }
    }

    /// [`Database::take_pending`] under the lock: all taken in, or the
    /// error of the change that stopped it (the entry left for the next
    /// writer). An entry that is not a regular file or not mail is set
    /// aside; one that cannot even be set aside is passed over.
    fn take_in(&self, journal_limit: u64, params: Params) -> Result<()> {
        let io = |source| {
            Error::Store(crate::store::Error::Io {
                path: self.paths().pending(),
                source,
            })
        };
        // What writers killed while leaving a message left half written
        // (an hour on: no learn writes one for that long).
        let hour = Duration::from_secs(3600);
        crate::fsutil::remove_stale_temps(&self.paths().pending(), None, hour);
        let mut extractor = Extractor::new();
        let mut passed = std::collections::HashSet::new();
        loop {
            let found = entries(self.paths()).map_err(io)?;
            if found.iter().all(|e| passed.contains(&e.path)) {
                return Ok(());
            }
            for entry in found {
                if passed.contains(&entry.path) {
                    continue;
                }
                let read = match read(&entry) {
                    Ok(Some(raw)) => crate::message::looks_like_mail(&raw)
                        .then(|| extractor.read(&raw).ok())
                        .flatten(),
                    Ok(None) => continue,
                    // Not a regular file: never one to take in.
                    Err(e) if e.kind() == io::ErrorKind::InvalidInput => None,
                    // Perhaps only for now (no descriptor left, say).
                    Err(e) => return Err(io(e)),
                };
                let Some((features, identity)) = read else {
                    if set_aside(&entry).is_err() {
                        passed.insert(entry.path);
                    }
                    continue;
                };
                let db = self.clone().with_origin(entry.origin);
                let none = Duration::ZERO;
                let made = match entry.asked {
                    Asked::Learn(label) => {
                        let message = Labelled {
                            features,
                            identity,
                            label,
                        };
                        db.learn_now(&[message], none, journal_limit, params)
                            .map(drop)
                    }
                    Asked::Unlearn => db
                        .unlearn_now(&[(&features, identity)], none, journal_limit, params)
                        .and_then(|mut u| match u.results.remove(0) {
                            Ok(_) | Err(Error::NotLearned) => Ok(()),
                            Err(e) => Err(e),
                        }),
                };
                match made {
                    // Made (the model behind the counts is written by the
                    // next writer that changes them).
                    Ok(()) | Err(Error::NothingLearned(_) | Error::ModelNotWritten { .. }) => {
                        done(&entry).map_err(io)?;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_back_in_the_order_they_were_left_with_what_was_asked() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DbPaths::new(dir.path().join("db"));
        assert!(entries(&paths).unwrap().is_empty(), "no directory: none");
        let asked = [
            (Asked::Learn(Label::Spam), Origin::Imap),
            (Asked::Unlearn, Origin::Learn),
            (Asked::Learn(Label::Ham), Origin::Http),
        ];
        for (i, (what, origin)) in asked.iter().enumerate() {
            put(
                &paths,
                format!("Subject: {i}\n\nx\n").as_bytes(),
                *what,
                *origin,
            )
            .unwrap();
        }
        // Not an entry: a temporary file, the lock, one set aside, a stray.
        fs::write(paths.pending().join(".x.1.2.tmp"), "a").unwrap();
        fs::write(paths.pending().join("notes.txt"), "a").unwrap();
        let found = entries(&paths).unwrap();
        let got: Vec<_> = found.iter().map(|e| (e.asked, e.origin)).collect();
        assert_eq!(got, asked);
        for (i, e) in found.iter().enumerate() {
            let raw = read(e).unwrap().unwrap();
            assert_eq!(raw, format!("Subject: {i}\n\nx\n").as_bytes());
        }
        set_aside(&found[1]).unwrap();
        done(&found[0]).unwrap();
        done(&found[0]).unwrap();
        assert_eq!(read(&found[0]).unwrap(), None);
        let w = waiting(&paths);
        assert_eq!((w.waiting, w.failed), (1, 1));
    }

    #[test]
    fn a_full_queue_refuses_more() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DbPaths::new(dir.path().join("db"));
        let small = |raw: &[u8]| put_within(&paths, raw, Asked::Unlearn, Origin::Learn, (3, 100));
        small(&[b'x'; 50]).unwrap();
        small(&[b'x'; 40]).unwrap();
        let err = small(&[b'x'; 11]).unwrap_err();
        assert!(err.to_string().contains("2 messages (90 bytes)"), "{err}");
        small(&[b'x'; 10]).unwrap();
        let err = small(b"x").unwrap_err();
        assert!(err.to_string().contains("3 messages"), "{err}");
        let err = small(&[b'x'; 101]).unwrap_err();
        assert!(
            err.to_string()
                .contains("(101 bytes) is larger than the 100"),
            "{err}"
        );
    }
}
