//! The writers' lock, and keeping the database directory private.

use std::time::Duration;

use super::{DbPaths, Error, Result};
use crate::store;

/// The writers' lock: an exclusive lock (`File::try_lock`, `flock` on
/// Linux) on `DB/lock`, held by one
/// writer at a time (`train`, `learn`, `unlearn`), whether or not it opens
/// the count store. Released when dropped (or when the process dies).
/// Within a `Holding` of the same database on the same thread, taking
/// it again takes nothing (and letting go of that lets go of nothing).
#[derive(Debug)]
pub struct WriterLock {
    _file: Option<std::fs::File>,
}

std::thread_local! {
    /// The lock files this thread holds through a [`Holding`].
    static HOLDING: std::cell::RefCell<Vec<std::path::PathBuf>> = const {
        std::cell::RefCell::new(Vec::new())
    };
}

/// The writers' lock held across several of the engine's calls on one
/// thread, each of which takes it in turn (the messages left pending,
/// taken in one after another, with no other writer between them).
#[derive(Debug)]
pub(super) struct Holding {
    _lock: WriterLock,
    path: std::path::PathBuf,
}

impl Holding {
    /// Takes the lock of the database at `paths` as [`WriterLock::take`]
    /// does.
    pub fn take(paths: &DbPaths, wait: Duration) -> Result<Holding> {
        let lock = WriterLock::take(paths, wait)?;
        let path = paths.lock();
        HOLDING.with(|h| h.borrow_mut().push(path.clone()));
        Ok(Holding { _lock: lock, path })
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        // Its own claim only: a Holding taken inside another leaves the
        // outer one's.
        HOLDING.with(|h| {
            let mut held = h.borrow_mut();
            if let Some(i) = held.iter().rposition(|p| *p == self.path) {
                held.remove(i);
            }
        });
    }
}

impl WriterLock {
    /// Takes the lock of the database at `paths`, waiting up to `wait` for
    /// another writer. The directory must exist. Anything but a regular
    /// file at `DB/lock` (a FIFO, a link) is refused at once.
    pub fn take(paths: &DbPaths, wait: Duration) -> Result<WriterLock> {
        let path = paths.lock();
        if HOLDING.with(|h| h.borrow().contains(&path)) {
            return Ok(WriterLock { _file: None });
        }
        let io = |source| {
            Error::Store(store::Error::Io {
                path: path.clone(),
                source,
            })
        };
        let file = crate::fsutil::open_or_create_shared(&path, false).map_err(io)?;
        let start = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(WriterLock { _file: Some(file) }),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(err)) => return Err(io(err)),
            }
            let waited = start.elapsed();
            if waited >= wait {
                return Err(Error::Store(store::Error::Locked {
                    path: paths.dir().to_path_buf(),
                    waited,
                }));
            }
            std::thread::sleep(Duration::from_millis(20).min(wait - waited));
        }
    }
}

/// Refuses a writer running as root on the database at `paths` when
/// another user can change what its path leads to
/// ([`crate::fsutil::unsafe_for_root_in`]), its count store's included:
/// root's lock, journal, log and store files there would be closed to
/// that user, whose own writers and readers would then fail on them, and
/// a link swapped in under the writer would send its files wherever the
/// user chose. Giving the files to the owner instead
/// was tried and dropped: it cannot be done safely for files the store
/// makes and names itself, nor through a hard link.
pub(super) fn refuse_foreign(paths: &DbPaths) -> Result<()> {
    // A file where the directory should be is said as such, whoever runs
    // (as root it would read as a path that cannot be followed).
    if std::fs::metadata(paths.dir()).is_ok_and(|m| !m.is_dir()) {
        return Err(Error::Enter {
            path: paths.dir().to_path_buf(),
            source: std::io::Error::from_raw_os_error(libc::ENOTDIR),
        });
    }
    match unsafe_for_root(paths) {
        Some(why) => Err(Error::Foreign { why }),
        None => Ok(()),
    }
}

/// Why a writer running as root must not write the database at `paths`
/// (see [`refuse_foreign`]), if it must not.
pub(super) fn unsafe_for_root(paths: &DbPaths) -> Option<crate::fsutil::Unsafe> {
    // Not a directory at all: [`refuse_foreign`] says so.
    if std::fs::metadata(paths.dir()).is_ok_and(|m| !m.is_dir()) {
        return None;
    }
    let counts = paths.counts();
    [paths.dir(), &counts, &counts.join("blobs")]
        .into_iter()
        .find_map(crate::fsutil::unsafe_for_root_in)
}

/// Creates `dir` and its missing parents private to the user (0700 on
/// Unix); an existing directory is left as it is.
pub(super) fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Whether only the owner may enter `dir` (always true where there are no
/// Unix permissions).
pub(super) fn is_private(dir: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o077 == 0)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        true
    }
}

/// Makes what is in the directory `dir` private: files 0600,
/// directories 0700. Best effort: the directory itself is already private.
/// Called only on the count store's directory, whose files are sled's.
pub(super) fn privatize(dir: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let mode = if kind.is_dir() {
                privatize(&entry.path());
                0o700
            } else if kind.is_file() {
                0o600
            } else {
                continue;
            };
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holding_inside_another_leaves_the_outer_ones_claim() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DbPaths::new(dir.path());
        let outer = Holding::take(&paths, Duration::ZERO).unwrap();
        drop(Holding::take(&paths, Duration::ZERO).unwrap());
        // Still this thread's: taken again without waiting.
        drop(WriterLock::take(&paths, Duration::ZERO).unwrap());
        // Another thread's take waits for it.
        let elsewhere = |paths: DbPaths| {
            std::thread::spawn(move || WriterLock::take(&paths, Duration::ZERO).is_ok())
                .join()
                .unwrap()
        };
        assert!(!elsewhere(paths.clone()));
        drop(outer);
        assert!(elsewhere(paths));
    }
}
