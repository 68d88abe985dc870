//! Putting messages into a Maildir without ever losing or doubling one.
//!
//! A message read from a Maildir keeps its file name (the Maildir unique
//! name with its `:2,` flags) and its subfolder (`cur/` or `new/`); any
//! other message (from an mbox, a directory tree, stdin) gets a name made
//! from a SHA-256 digest of its exact bytes and goes to `new/`. Names are
//! thus fixed by the message, which makes every operation safe to repeat.
//!
//! A message is already in the target when a file there has the same
//! unique name (the part of the name before the `:` that starts the flags),
//! in `cur/` or `new/`, and the same bytes. The flags and the subfolder are
//! left out because a mail client changes them (`new/x` becomes
//! `cur/x:2,S` once read) in the source and in the target alike; the bytes
//! are compared because only identical content may count as "already
//! there". Names from a digest of the exact bytes make distinct content get
//! distinct names, even where it differs only in headers that mail programs
//! rewrite (`Status:`, `X-Spam-*`). The target's `cur/` and `new/` are
//! listed once, when first needed, and again only when an entry has moved
//! since.
//!
//! - [`Maildir::move_in`] renames the file into the target: one atomic
//!   `rename` within a filesystem. Across filesystems it copies into the
//!   target's `tmp/`, fsyncs, renames into place, fsyncs the directory, and
//!   only then deletes the source (and fsyncs its directory). If the delete
//!   fails (or the move was interrupted before it), the message is in both
//!   places: that is [`MoveError::SourceKept`], and moving the same file
//!   again finds the target's copy identical and only deletes the source.
//! - A source that is a symlink is moved by its content: the message it
//!   leads to is written into the target as a regular file and the link is
//!   removed. Renaming the link itself would leave a relative link pointing
//!   nowhere from its new depth, and the file it leads to may be outside
//!   the mailbox or shared, so it is left where it is.
//! - [`Maildir::copy_in`] writes the bytes the same way (tmp, fsync, rename,
//!   fsync) and leaves the source alone.
//!
//! A different message already under the target's unique name (which
//! Maildir unique names make all but impossible) is never overwritten: the
//! move or copy fails with [`io::ErrorKind::AlreadyExists`].

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// What happened to one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Written (or renamed) to this path.
    New(PathBuf),
    /// An identical message was already at this path; nothing written (a
    /// move then only removed the source).
    Already(PathBuf),
}

impl Delivered {
    /// Where the message is now.
    pub fn path(&self) -> &Path {
        match self {
            Delivered::New(p) | Delivered::Already(p) => p,
        }
    }
}

/// Why [`Maildir::move_in`] did not complete.
#[derive(thiserror::Error, Debug)]
pub enum MoveError {
    /// Reading the source or writing the target failed; the source was not
    /// removed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The message is safely in the target, but the source could not be
    /// removed: it is now in both places. Moving it again removes the
    /// source without writing a second copy.
    #[error(
        "copied to {}, but the original could not be removed: {error}",
        .target.display()
    )]
    SourceKept {
        /// The file that could not be removed.
        original: PathBuf,
        /// Where the message is in the target.
        target: PathBuf,
        /// Why the removal failed (its text names `original`).
        error: io::Error,
    },
    /// Copied into the target, but the source had gone from its folder
    /// meanwhile: another program moved or deleted it.
    #[error(
        "copied to {}, but {} had gone from its folder meanwhile (moved or deleted by another \
         program): if it was moved, it is in both places",
        .target.display(),
        .original.display()
    )]
    SourceGone {
        /// The file that had gone.
        original: PathBuf,
        /// Where the message is in the target.
        target: PathBuf,
    },
    /// The file is not the message that was judged, and stays where it
    /// is: an mbox (a file starting with a `From ` line, whose messages
    /// are copied, never moved: a mail program may be adding to it), or a
    /// file that changed since it was read.
    #[error("{}: {}; left where it is", .path.display(), if *.mbox {
        "an mbox file (it starts with a From line): its messages are copied, never moved"
    } else {
        "changed since it was read"
    })]
    NotJudged {
        /// The file.
        path: PathBuf,
        /// Whether it is an mbox.
        mbox: bool,
    },
}

/// A Maildir to deliver into.
#[derive(Debug)]
pub struct Maildir {
    root: PathBuf,
    /// The unique names of the messages in `cur/` and `new/` and where each
    /// is; listed when first needed.
    index: Mutex<Option<HashMap<OsString, PathBuf>>>,
}

impl Clone for Maildir {
    fn clone(&self) -> Maildir {
        Maildir::at(&self.root)
    }
}

impl Maildir {
    /// The Maildir at `root`, creating it (`cur/`, `new/`, `tmp/`) if needed:
    /// a root it creates (and the folders above it) is private (0700), as
    /// mail is; in a root there already, the subfolders it creates get the
    /// root's permissions (a Maildir shared with a group stays so), and
    /// what is there keeps its own. Its `cur/`, `new/` and `tmp/` must be
    /// directories of their own: a link there (to another user's
    /// directory, say) is refused, so that nothing is created through it.
    pub fn create(root: &Path) -> io::Result<Maildir> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if !root.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root)
                .map_err(|e| annotate(e, root))?;
        }
        let mode = fs::metadata(root)
            .map_err(|e| annotate(e, root))?
            .permissions()
            .mode()
            & 0o777;
        for sub in ["cur", "new", "tmp"] {
            let dir = root.join(sub);
            match fs::DirBuilder::new().mode(mode).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(annotate(e, &dir)),
            }
            crate::fsutil::check_kind(&dir, true).map_err(|e| annotate(e, &dir))?;
        }
        Ok(Maildir::at(root))
    }

    /// The Maildir at `root`, as it is (for naming targets without writing).
    pub fn at(root: &Path) -> Maildir {
        Maildir {
            root: root.to_path_buf(),
            index: Mutex::new(None),
        }
    }

    /// The Maildir's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a message would go: `source` is the file it was read from (if
    /// it is one message in a file), `bytes` its content.
    pub fn target(&self, source: Option<&Path>, bytes: &[u8]) -> PathBuf {
        let from_maildir = source.and_then(maildir_parts);
        match from_maildir {
            Some((sub, name)) => self.root.join(sub).join(name),
            None => {
                use sha2::{Digest as _, Sha256};
                let digest = Sha256::digest(bytes);
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                self.root.join("new").join(format!("{hex}.bayesmail"))
            }
        }
    }

    /// Moves the message file at `source`, judged as `judged`, into this
    /// Maildir. Only a file that holds exactly what was judged is moved.
    pub fn move_in(&self, source: &Path, judged: &[u8]) -> Result<Delivered, MoveError> {
        let (bytes, is_link) = read_judged(source, judged)?;
        let target = self.target(Some(source), &bytes);
        if let Some(existing) = self.existing(&target)? {
            if same_file(source, &existing) {
                return Ok(Delivered::Already(existing));
            }
            if !holds(&existing, &bytes)? {
                return Err(exists_error(&existing).into());
            }
            return match remove_source(source, &existing) {
                // Gone meanwhile (another program moved or deleted it):
                // the message is here all the same.
                Err(MoveError::SourceKept { error, .. })
                    if error.kind() == io::ErrorKind::NotFound =>
                {
                    Ok(Delivered::Already(existing))
                }
                removed => removed.map(|()| Delivered::Already(existing)),
            };
        }
        if !is_link {
            match fs::rename(source, &target) {
                Ok(()) => {
                    self.remember(&target);
                    // Moved: a folder that cannot be synced (one its owner
                    // may write but not read) changes nothing of that.
                    let _ = sync_parent(&target);
                    let _ = sync_parent(source);
                    return Ok(Delivered::New(target));
                }
                Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {}
                Err(e) => return Err(annotate(e, source).into()),
            }
        }
        self.copy_then_delete(source, &target, &bytes)
    }

    /// What [`Maildir::move_in`] would do, found out without doing it:
    /// where the message would go ([`Delivered::New`]), or where it is
    /// already, or the error the move would meet.
    pub fn would_move(&self, source: &Path, judged: &[u8]) -> Result<Delivered, MoveError> {
        let (bytes, _) = read_judged(source, judged)?;
        let target = self.target(Some(source), &bytes);
        match self.existing(&target)? {
            Some(existing) if same_file(source, &existing) || holds(&existing, &bytes)? => {
                Ok(Delivered::Already(existing))
            }
            Some(existing) => Err(exists_error(&existing).into()),
            None => Ok(Delivered::New(target)),
        }
    }

    /// What [`Maildir::copy_in`] would do, found out without doing it.
    pub(crate) fn would_copy(&self, source: Option<&Path>, bytes: &[u8]) -> io::Result<Delivered> {
        let target = self.target(source, bytes);
        match self.existing(&target)? {
            Some(existing) if holds(&existing, bytes)? => Ok(Delivered::Already(existing)),
            Some(existing) => Err(exists_error(&existing)),
            None => Ok(Delivered::New(target)),
        }
    }

    /// The cross-filesystem move (and the move of a symlink): a durable
    /// copy first, the source deleted only once the copy is in place.
    fn copy_then_delete(
        &self,
        source: &Path,
        target: &Path,
        bytes: &[u8],
    ) -> Result<Delivered, MoveError> {
        self.write_new(target, bytes, received(source))?;
        self.remember(target);
        match remove_source(source, target) {
            Err(MoveError::SourceKept {
                original, error, ..
            }) if error.kind() == io::ErrorKind::NotFound => match renamed(source, bytes) {
                // A mail client renamed it meanwhile (read it, flagged it).
                Some(now) => remove_source(&now, target).map(|()| Delivered::New(target.into())),
                None => Err(MoveError::SourceGone {
                    original,
                    target: target.to_path_buf(),
                }),
            },
            removed => removed.map(|()| Delivered::New(target.to_path_buf())),
        }
    }

    /// Copies a message into this Maildir; `source` is the file it was read
    /// from, if it is one message in a file (it names the copy).
    pub(crate) fn copy_in(&self, source: Option<&Path>, bytes: &[u8]) -> io::Result<Delivered> {
        let target = self.target(source, bytes);
        if let Some(existing) = self.existing(&target)? {
            return if holds(&existing, bytes)? {
                Ok(Delivered::Already(existing))
            } else {
                Err(exists_error(&existing))
            };
        }
        self.write_new(&target, bytes, source.and_then(received))?;
        self.remember(&target);
        Ok(Delivered::New(target))
    }

    /// The message in this Maildir with `target`'s unique name, whatever
    /// its flags and subfolder; else `target` itself if it exists.
    fn existing(&self, target: &Path) -> io::Result<Option<PathBuf>> {
        let unique = unique_name(target.file_name().unwrap_or_default());
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        let mut fresh = false;
        if index.is_none() {
            *index = Some(self.list()?);
            fresh = true;
        }
        let mut found = index.as_ref().and_then(|i| i.get(unique).cloned());
        if found.as_ref().is_some_and(|p| !exists(p)) && !fresh {
            // The client renamed it since the listing.
            *index = Some(self.list()?);
            found = index.as_ref().and_then(|i| i.get(unique).cloned());
        }
        match found {
            Some(p) if exists(&p) => Ok(Some(p)),
            _ => Ok(exists(target).then(|| target.to_path_buf())),
        }
    }

    /// Notes a message just written to `path`.
    fn remember(&self, path: &Path) {
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        if let (Some(index), Some(name)) = (index.as_mut(), path.file_name()) {
            index.insert(unique_name(name).to_os_string(), path.to_path_buf());
        }
    }

    /// The unique names in `cur/` and `new/` and where each is.
    fn list(&self) -> io::Result<HashMap<OsString, PathBuf>> {
        let mut index = HashMap::new();
        for sub in ["cur", "new"] {
            let dir = self.root.join(sub);
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(annotate(e, &dir)),
            };
            for entry in entries {
                let name = entry.map_err(|e| annotate(e, &dir))?.file_name();
                index
                    .entry(unique_name(&name).to_os_string())
                    .or_insert_with(|| dir.join(&name));
            }
        }
        Ok(index)
    }

    /// Writes `bytes` to `target` through `tmp/`: write, fsync, rename,
    /// fsync the directory. `times`: the source file's, which the copy
    /// keeps (a Maildir's readers take a message's modification time for
    /// when it was received).
    fn write_new(
        &self,
        target: &Path,
        bytes: &[u8],
        times: Option<fs::FileTimes>,
    ) -> io::Result<()> {
        let (tmp, mut f) = self.create_temp(target).map_err(|e| annotate(e, target))?;
        let result = (|| {
            f.write_all(bytes)?;
            if let Some(times) = times {
                f.set_times(times)?;
            }
            f.sync_all()?;
            fs::rename(&tmp, target)?;
            sync_parent(target)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(|e| annotate(e, target))
    }

    /// Creates a new file in `tmp/` for `target`, named as `target` if
    /// that name is free, else with this process's id and a number added.
    /// Never opens what is there already: a link planted at the name
    /// (which the message's bytes predict) is passed over, not written
    /// through.
    fn create_temp(&self, target: &Path) -> io::Result<(PathBuf, File)> {
        let name = target.file_name().expect("targets have a file name");
        let dir = self.root.join("tmp");
        let mut tmp = dir.join(name);
        // Readable by whom the Maildir is (its root's permissions, as
        // Dovecot creates mail), never by more: 0600 in a private one; the
        // owner always reads and writes it (it is read back to compare).
        use std::os::unix::fs::PermissionsExt;
        let mode =
            fs::metadata(&self.root).map_or(0o600, |m| m.permissions().mode() & 0o666 | 0o600);
        for n in 0..100 {
            match crate::fsutil::create_new(&tmp, mode) {
                Ok(f) => return Ok((tmp, f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            let mut other = name.to_os_string();
            other.push(format!(".{}.{n}", std::process::id()));
            tmp = dir.join(other);
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("no free temporary name in {}", dir.display()),
        ))
    }
}

/// The times of the message file `source`, for a copy of it to keep.
fn received(source: &Path) -> Option<fs::FileTimes> {
    let meta = fs::metadata(source).ok()?;
    Some(
        fs::FileTimes::new()
            .set_accessed(meta.accessed().ok()?)
            .set_modified(meta.modified().ok()?),
    )
}

/// A Maildir file name without its flags: up to the `:` that starts them.
fn unique_name(name: &OsStr) -> &OsStr {
    let bytes = name.as_bytes();
    let end = memchr::memchr(b':', bytes).unwrap_or(bytes.len());
    OsStr::from_bytes(&bytes[..end])
}

/// Whether something (a dangling link included) is at `path`.
fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Removes a moved message's source, which is already safe at `target`.
fn remove_source(source: &Path, target: &Path) -> Result<(), MoveError> {
    fs::remove_file(source).map_err(|e| MoveError::SourceKept {
        original: source.to_path_buf(),
        target: target.to_path_buf(),
        error: annotate(e, source),
    })?;
    // Removed: a folder that cannot be synced changes nothing of that.
    let _ = sync_parent(source);
    Ok(())
}

/// What the Maildir message `source` is called now, if a mail client
/// renamed it since it was read (its flags changed, or it went from
/// `new/` to `cur/`): the file of its Maildir with the same unique name
/// and exactly `bytes`.
fn renamed(source: &Path, bytes: &[u8]) -> Option<PathBuf> {
    let (_, name) = maildir_parts(source)?;
    let unique = unique_name(name);
    let maildir = source.parent()?.parent()?;
    ["cur", "new"].iter().find_map(|sub| {
        fs::read_dir(maildir.join(sub))
            .ok()?
            .flatten()
            .map(|entry| entry.path())
            .find(|path| {
                path.file_name().is_some_and(|n| unique_name(n) == unique)
                    && holds(path, bytes).unwrap_or(false)
            })
    })
}

/// The file at `source` for a move, and whether it is a link: an error
/// unless it holds exactly `judged`. Opened without blocking, so a FIFO
/// put under the name since it was read is refused, not waited on.
fn read_judged(source: &Path, judged: &[u8]) -> Result<(Vec<u8>, bool), MoveError> {
    let is_link = fs::symlink_metadata(source)
        .map_err(|e| annotate(e, source))?
        .file_type()
        .is_symlink();
    let mut bytes = Vec::with_capacity(judged.len());
    crate::fsutil::open_regular(source)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| annotate(e, source))?;
    if bytes != judged {
        return Err(MoveError::NotJudged {
            path: source.to_path_buf(),
            mbox: bytes.starts_with(b"From "),
        });
    }
    Ok((bytes, is_link))
}

/// Whether the file at `path` holds exactly `bytes`.
fn holds(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    // Without blocking: a FIFO under the name must not stall the run.
    let mut f = match crate::fsutil::open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(annotate(e, path)),
    };
    if f.metadata()?.len() != bytes.len() as u64 {
        return Ok(false);
    }
    let mut existing = Vec::with_capacity(bytes.len());
    f.read_to_end(&mut existing)
        .map_err(|e| annotate(e, path))?;
    Ok(existing == bytes)
}

/// True if `a` and `b` name the same file (moving a message onto itself
/// must not delete it).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// For a file in a Maildir's `cur/` or `new/`: that subfolder and the
/// file name.
fn maildir_parts(path: &Path) -> Option<(&'static str, &OsStr)> {
    let name = path.file_name()?;
    let sub = path.parent()?.file_name()?;
    if sub == "cur" {
        Some(("cur", name))
    } else if sub == "new" {
        Some(("new", name))
    } else {
        None
    }
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| annotate(e, dir)),
        None => Ok(()),
    }
}

fn exists_error(target: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{}: a different message with the same unique name is already there",
            target.display()
        ),
    )
}

fn annotate(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("{}: {}", path.display(), crate::fsutil::words(&e)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maildir_with(dir: &Path, sub: &str, name: &str, bytes: &[u8]) -> PathBuf {
        let md = Maildir::create(dir).unwrap();
        let path = md.root().join(sub).join(name);
        fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn move_keeps_name_and_subfolder_and_is_safe_to_repeat() {
        let tmp = tempfile::tempdir().unwrap();
        let src = maildir_with(
            &tmp.path().join("inbox"),
            "cur",
            "1.a.host:2,S",
            b"A: 1\n\nx\n",
        );
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let moved = junk.move_in(&src, b"A: 1\n\nx\n").unwrap();
        let target = junk.root().join("cur/1.a.host:2,S");
        assert_eq!(moved, Delivered::New(target.clone()));
        assert!(!src.exists());
        assert_eq!(fs::read(&target).unwrap(), b"A: 1\n\nx\n");

        // Interrupted after a cross-filesystem copy: the source is still
        // there. Moving again removes it and writes nothing new.
        fs::write(&src, b"A: 1\n\nx\n").unwrap();
        assert_eq!(
            junk.move_in(&src, b"A: 1\n\nx\n").unwrap(),
            Delivered::Already(target.clone())
        );
        assert!(!src.exists());
        assert_eq!(fs::read_dir(junk.root().join("cur")).unwrap().count(), 1);
        assert_eq!(fs::read_dir(junk.root().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn cross_filesystem_move_copies_durably_then_deletes() {
        let tmp = tempfile::tempdir().unwrap();
        let src = maildir_with(&tmp.path().join("inbox"), "new", "4.d.host", b"A: 1\n\ny\n");
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let target = junk.target(Some(&src), b"A: 1\n\ny\n");
        assert_eq!(target, junk.root().join("new/4.d.host"));
        let moved = junk
            .copy_then_delete(&src, &target, b"A: 1\n\ny\n")
            .unwrap();
        assert_eq!(moved, Delivered::New(target.clone()));
        assert!(!src.exists());
        assert_eq!(fs::read(&target).unwrap(), b"A: 1\n\ny\n");
        assert_eq!(fs::read_dir(junk.root().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn moving_a_message_onto_itself_keeps_it() {
        let tmp = tempfile::tempdir().unwrap();
        let src = maildir_with(
            &tmp.path().join("junk"),
            "cur",
            "3.c.host:2,",
            b"A: 1\n\nx\n",
        );
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        assert_eq!(
            junk.move_in(&src, b"A: 1\n\nx\n").unwrap(),
            Delivered::Already(src.clone())
        );
        assert_eq!(fs::read(&src).unwrap(), b"A: 1\n\nx\n");
    }

    #[test]
    fn never_overwrites_a_different_message() {
        let tmp = tempfile::tempdir().unwrap();
        let src = maildir_with(
            &tmp.path().join("inbox"),
            "new",
            "2.b.host",
            b"A: 1\n\nmine\n",
        );
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        fs::write(junk.root().join("new/2.b.host"), b"A: 1\n\nother\n").unwrap();
        let Err(MoveError::Io(err)) = junk.move_in(&src, b"A: 1\n\nmine\n") else {
            panic!("moved over a different message")
        };
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&src).unwrap(), b"A: 1\n\nmine\n");
        assert_eq!(
            fs::read(junk.root().join("new/2.b.host")).unwrap(),
            b"A: 1\n\nother\n"
        );
    }

    #[test]
    fn a_maildir_made_here_is_private_and_mail_is_readable_as_its_root_is() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let tmp = tempfile::tempdir().unwrap();
        let junk = Maildir::create(&tmp.path().join("a/junk")).unwrap();
        for dir in ["a", "a/junk", "a/junk/cur", "a/junk/new", "a/junk/tmp"] {
            assert_eq!(mode(&tmp.path().join(dir)), 0o700, "{dir}");
        }
        let copy = junk.copy_in(None, b"Subject: x\n\nprivate\n").unwrap();
        assert_eq!(mode(copy.path()), 0o600);
        // A Maildir its owner shares with a group keeps doing so: its new
        // subfolders and mail are the group's to read, no one else's.
        let shared = tmp.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o750)).unwrap();
        let shared = Maildir::create(&shared).unwrap();
        let copy = shared.copy_in(None, b"Subject: y\n\nshared\n").unwrap();
        assert_eq!(mode(copy.path()), 0o640);
        assert_eq!(mode(shared.root()), 0o750, "kept");
        for sub in ["cur", "new", "tmp"] {
            assert_eq!(mode(&shared.root().join(sub)), 0o750, "{sub}");
        }
    }

    #[test]
    fn copies_are_named_by_content_and_not_repeated() {
        let tmp = tempfile::tempdir().unwrap();
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let a = junk.copy_in(None, b"A: 1\n\nfrom an mbox\n").unwrap();
        assert!(matches!(&a, Delivered::New(p) if p.starts_with(junk.root().join("new"))));
        let again = junk.copy_in(None, b"A: 1\n\nfrom an mbox\n").unwrap();
        assert_eq!(again, Delivered::Already(a.path().to_path_buf()));
        let b = junk.copy_in(None, b"A: 1\n\nanother\n").unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(fs::read_dir(junk.root().join("new")).unwrap().count(), 2);
    }

    #[test]
    fn missing_source_is_an_error_and_nothing_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let Err(MoveError::Io(err)) = junk.move_in(&tmp.path().join("inbox/cur/gone"), b"") else {
            panic!("moved a missing file")
        };
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("gone"));
        for sub in ["cur", "new", "tmp"] {
            assert_eq!(fs::read_dir(junk.root().join(sub)).unwrap().count(), 0);
        }
    }

    #[test]
    fn a_copy_is_found_under_its_unique_name_whatever_its_flags_and_subfolder() {
        let tmp = tempfile::tempdir().unwrap();
        let bytes = b"A: 1\n\nread later\n";
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let first = junk
            .copy_in(Some(&tmp.path().join("inbox/new/5.e.host")), bytes)
            .unwrap();
        assert_eq!(first, Delivered::New(junk.root().join("new/5.e.host")));
        // The client reads the copy in Junk, then the original.
        let read = junk.root().join("cur/5.e.host:2,S");
        fs::rename(first.path(), &read).unwrap();
        let again = junk
            .copy_in(Some(&tmp.path().join("inbox/cur/5.e.host:2,RS")), bytes)
            .unwrap();
        assert_eq!(again, Delivered::Already(read.clone()));
        // A fresh Maildir value lists the folder anew and finds it too.
        let fresh = Maildir::at(junk.root());
        let source = tmp.path().join("inbox/cur/5.e.host:2,");
        assert_eq!(
            fresh.copy_in(Some(&source), bytes).unwrap(),
            Delivered::Already(read.clone())
        );
        // Same unique name, other bytes: never taken for the same message.
        let err = fresh.copy_in(Some(&source), b"A: 2\n\n").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(unique_name(OsStr::new("5.e.host:2,S")), "5.e.host");
        assert_eq!(unique_name(OsStr::new("5.e.host")), "5.e.host");
    }

    #[test]
    fn names_from_content_differ_for_any_byte_difference() {
        let junk = Maildir::at(Path::new("junk"));
        let a = junk.target(None, b"Subject: x\n\nbody\n");
        let b = junk.target(None, b"Status: RO\nSubject: x\n\nbody\n");
        let c = junk.target(None, b"X-Spam-Status: Yes\nSubject: x\n\nbody\n");
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(b, c);
        assert_eq!(a, junk.target(None, b"Subject: x\n\nbody\n"));
    }

    #[test]
    fn moving_a_symlink_moves_the_message_it_leads_to_as_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store/m");
        fs::create_dir_all(store.parent().unwrap()).unwrap();
        fs::write(&store, b"A: 1\n\nlinked\n").unwrap();
        let inbox = Maildir::create(&tmp.path().join("inbox")).unwrap();
        let link = inbox.root().join("cur/6.f.host:2,");
        std::os::unix::fs::symlink("../../store/m", &link).unwrap();
        let junk = Maildir::create(&tmp.path().join("a/b/junk")).unwrap();
        let moved = junk.move_in(&link, b"A: 1\n\nlinked\n").unwrap();
        let target = junk.root().join("cur/6.f.host:2,");
        assert_eq!(moved, Delivered::New(target.clone()));
        assert!(fs::symlink_metadata(&target).unwrap().is_file());
        assert_eq!(fs::read(&target).unwrap(), b"A: 1\n\nlinked\n");
        assert!(fs::symlink_metadata(&link).is_err());
        assert_eq!(fs::read(&store).unwrap(), b"A: 1\n\nlinked\n");
    }

    /// Makes `dir` refuse removals (append-only where allowed, which holds
    /// for root; else read-only); `false` if neither takes effect here.
    fn make_undeletable(dir: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        let probe = dir.join(".probe");
        fs::write(&probe, b"x").unwrap();
        let appended = std::process::Command::new("chattr")
            .arg("+a")
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !appended {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).unwrap();
        }
        fs::remove_file(&probe).is_err()
    }

    fn make_deletable(dir: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::process::Command::new("chattr")
            .arg("-a")
            .arg(dir)
            .status();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_source_that_cannot_be_removed_is_reported_as_kept_and_not_copied_twice() {
        let tmp = tempfile::tempdir().unwrap();
        let bytes = b"A: 1\n\nstuck\n";
        let src = maildir_with(&tmp.path().join("inbox"), "new", "7.g.host", bytes);
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let target = junk.target(Some(&src), bytes);
        let new = src.parent().unwrap();
        if !make_undeletable(new) {
            make_deletable(new);
            eprintln!("cannot make a directory undeletable here: test skipped");
            return;
        }
        let first = junk.copy_then_delete(&src, &target, bytes);
        let again = junk.move_in(&src, bytes);
        make_deletable(new);
        for result in [first, again] {
            let Err(MoveError::SourceKept {
                original,
                target: t,
                ..
            }) = &result
            else {
                panic!("{result:?}")
            };
            assert_eq!((original, t), (&src, &target));
            let text = result.unwrap_err().to_string();
            assert!(text.contains("could not be removed"), "{text}");
        }
        assert!(src.exists());
        assert_eq!(fs::read_dir(junk.root().join("new")).unwrap().count(), 1);
        assert_eq!(
            junk.move_in(&src, bytes).unwrap(),
            Delivered::Already(target)
        );
        assert!(!src.exists());
    }

    /// Only a file that holds exactly what was judged is moved: one that
    /// starts with an mbox `From ` line (read as the message after it, and
    /// a folder a mail program may be adding to) stays, as does one that
    /// changed since it was read, and a FIFO put under its name is refused
    /// without waiting. A dry run says what the run would.
    #[test]
    fn only_the_file_judged_is_moved_and_a_dry_run_says_what_a_run_does() {
        let tmp = tempfile::tempdir().unwrap();
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let folder = tmp.path().join("mail");
        fs::create_dir(&folder).unwrap();
        let message = b"Subject: x\n\nspam\n";
        let mbox = folder.join("inbox");
        let mut with_envelope = b"From a@b Thu Jan  1 00:00:00 1970\n".to_vec();
        with_envelope.extend_from_slice(message);
        fs::write(&mbox, &with_envelope).unwrap();
        for result in [
            junk.would_move(&mbox, message),
            junk.move_in(&mbox, message),
        ] {
            assert!(
                matches!(result, Err(MoveError::NotJudged { mbox: true, .. })),
                "{result:?}"
            );
        }
        assert_eq!(fs::read(&mbox).unwrap(), with_envelope);
        let changed = folder.join("changed.eml");
        fs::write(&changed, b"Subject: x\n\nspam, and more since\n").unwrap();
        let result = junk.move_in(&changed, message);
        let Err(err @ MoveError::NotJudged { mbox: false, .. }) = result else {
            panic!("{result:?}")
        };
        assert!(
            err.to_string().contains("changed since it was read"),
            "{err}"
        );
        assert!(changed.exists());
        let fifo = folder.join("fifo.eml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let result = junk.move_in(&fifo, message);
        assert!(matches!(result, Err(MoveError::Io(_))), "{result:?}");
        for sub in ["cur", "new", "tmp"] {
            assert_eq!(fs::read_dir(junk.root().join(sub)).unwrap().count(), 0);
        }

        // The dry run finds what is in the target as the run does.
        let src = maildir_with(&tmp.path().join("inbox"), "cur", "8.h.host:2,", message);
        let copy = junk.copy_in(Some(&src), message).unwrap();
        assert_eq!(
            junk.would_move(&src, message).unwrap(),
            Delivered::Already(copy.path().to_path_buf())
        );
        assert_eq!(
            junk.would_copy(Some(&src), message).unwrap(),
            Delivered::Already(copy.path().to_path_buf())
        );
        let other = maildir_with(
            &tmp.path().join("inbox"),
            "cur",
            "8.h.host:2,S",
            b"A: 2\n\n",
        );
        let err = junk.would_move(&other, b"A: 2\n\n").unwrap_err();
        assert!(err.to_string().contains("a different message"), "{err}");
        let fresh = maildir_with(&tmp.path().join("inbox"), "new", "9.i.host", message);
        assert_eq!(
            junk.would_move(&fresh, message).unwrap(),
            Delivered::New(junk.root().join("new/9.i.host"))
        );
        assert!(fresh.exists());
    }

    /// A source a mail client renamed while it was copied (read, so moved
    /// from `new/` to `cur/` with a flag) is found under its new name and
    /// removed: the message ends in the target alone.
    #[test]
    fn a_source_renamed_meanwhile_is_removed_under_its_new_name() {
        let tmp = tempfile::tempdir().unwrap();
        let bytes = b"A: 1\n\nread meanwhile\n";
        let inbox = tmp.path().join("inbox");
        let now = maildir_with(&inbox, "cur", "11.k.host:2,S", bytes);
        let other = maildir_with(&inbox, "cur", "11.k.hostname:2,S", bytes);
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let src = inbox.join("new/11.k.host");
        let target = junk.target(Some(&src), bytes);
        let moved = junk.copy_then_delete(&src, &target, bytes).unwrap();
        assert_eq!(moved, Delivered::New(target.clone()));
        assert!(!now.exists());
        assert!(other.exists(), "another message left alone");
        assert_eq!(fs::read(&target).unwrap(), bytes);
    }

    /// A source gone from its folder while it was copied (another program
    /// moved or deleted it) is said to be that, not "could not be
    /// removed"; a copy already in the target with the source gone is
    /// simply there.
    #[test]
    fn a_source_gone_meanwhile_is_said_to_be_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let bytes = b"A: 1\n\ngone\n";
        let junk = Maildir::create(&tmp.path().join("junk")).unwrap();
        let src = tmp.path().join("inbox/new/10.j.host");
        let target = junk.target(Some(&src), bytes);
        let result = junk.copy_then_delete(&src, &target, bytes);
        let Err(err @ MoveError::SourceGone { .. }) = result else {
            panic!("{result:?}")
        };
        assert!(
            err.to_string().contains("had gone from its folder"),
            "{err}"
        );
        assert_eq!(fs::read(&target).unwrap(), bytes);
    }
}
