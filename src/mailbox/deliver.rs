//! Putting messages into a Maildir without ever losing or doubling one.
//!
//! A message read from a Maildir keeps its file name (the Maildir unique
//! name with its `:2,` flags) and its subfolder (`cur/` or `new/`); any
//! other message gets a name made from its digest and goes to `new/`. Names
//! are thus fixed by the message, which makes every operation safe to
//! repeat: a message already in the target under its name is not written
//! again.
//!
//! - [`Maildir::move_in`] renames the file into the target: one atomic
//!   `rename` within a filesystem. Across filesystems it copies into the
//!   target's `tmp/`, fsyncs, renames into place, fsyncs the directory, and
//!   only then deletes the source (and fsyncs its directory). Interrupted
//!   before the delete, the message exists in both places; running the same
//!   move again finds the target's copy identical and just deletes the
//!   source.
//! - [`Maildir::copy_in`] writes the bytes the same way (tmp, fsync, rename,
//!   fsync) and leaves the source alone.
//!
//! A different message already under the target name (which Maildir unique
//! names make all but impossible) is never overwritten: the move or copy
//! fails with [`io::ErrorKind::AlreadyExists`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

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

/// A Maildir to deliver into.
#[derive(Debug, Clone)]
pub struct Maildir {
    root: PathBuf,
}

impl Maildir {
    /// The Maildir at `root`, creating it (`cur/`, `new/`, `tmp/`) if needed.
    pub fn create(root: &Path) -> io::Result<Maildir> {
        for sub in ["cur", "new", "tmp"] {
            fs::create_dir_all(root.join(sub)).map_err(|e| annotate(e, &root.join(sub)))?;
        }
        Ok(Maildir {
            root: root.to_path_buf(),
        })
    }

    /// The Maildir at `root`, as it is (for naming targets without writing).
    pub fn at(root: &Path) -> Maildir {
        Maildir {
            root: root.to_path_buf(),
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
                let digest = crate::message::digest(bytes);
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                self.root.join("new").join(format!("{hex}.bayesmail"))
            }
        }
    }

    /// Moves the message file at `source` into this Maildir.
    pub fn move_in(&self, source: &Path) -> io::Result<Delivered> {
        let bytes = fs::read(source).map_err(|e| annotate(e, source))?;
        let target = self.target(Some(source), &bytes);
        if same_file(source, &target) {
            return Ok(Delivered::Already(target));
        }
        if let Some(existing) = identical_at(&target, &bytes)? {
            fs::remove_file(source).map_err(|e| annotate(e, source))?;
            sync_parent(source)?;
            return Ok(Delivered::Already(existing));
        }
        if target.exists() {
            return Err(exists(&target));
        }
        match fs::rename(source, &target) {
            Ok(()) => {
                sync_parent(&target)?;
                sync_parent(source)?;
                Ok(Delivered::New(target))
            }
            Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
                self.copy_then_delete(source, &target, &bytes)
            }
            Err(e) => Err(annotate(e, source)),
        }
    }

    /// The cross-filesystem move: a durable copy first, the source deleted
    /// only once the copy is in place.
    fn copy_then_delete(
        &self,
        source: &Path,
        target: &Path,
        bytes: &[u8],
    ) -> io::Result<Delivered> {
        self.write_new(target, bytes)?;
        fs::remove_file(source).map_err(|e| annotate(e, source))?;
        sync_parent(source)?;
        Ok(Delivered::New(target.to_path_buf()))
    }

    /// Copies a message into this Maildir; `source` is the file it was read
    /// from, if it is one message in a file (it names the copy).
    pub fn copy_in(&self, source: Option<&Path>, bytes: &[u8]) -> io::Result<Delivered> {
        let target = self.target(source, bytes);
        if let Some(existing) = identical_at(&target, bytes)? {
            return Ok(Delivered::Already(existing));
        }
        if target.exists() {
            return Err(exists(&target));
        }
        self.write_new(&target, bytes)?;
        Ok(Delivered::New(target))
    }

    /// Writes `bytes` to `target` through `tmp/`: write, fsync, rename,
    /// fsync the directory.
    fn write_new(&self, target: &Path, bytes: &[u8]) -> io::Result<()> {
        let name = target.file_name().expect("targets have a file name");
        let tmp = self.root.join("tmp").join(name);
        let result = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, target)?;
            sync_parent(target)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(|e| annotate(e, target))
    }
}

/// `Some(target)` if `target` holds exactly `bytes`.
fn identical_at(target: &Path, bytes: &[u8]) -> io::Result<Option<PathBuf>> {
    let mut f = match File::open(target) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(annotate(e, target)),
    };
    if f.metadata()?.len() != bytes.len() as u64 {
        return Ok(None);
    }
    let mut existing = Vec::with_capacity(bytes.len());
    f.read_to_end(&mut existing)?;
    Ok((existing == bytes).then(|| target.to_path_buf()))
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
fn maildir_parts(path: &Path) -> Option<(&'static str, &std::ffi::OsStr)> {
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

fn exists(target: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{}: a different message is already there", target.display()),
    )
}

fn annotate(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
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
        let moved = junk.move_in(&src).unwrap();
        let target = junk.root().join("cur/1.a.host:2,S");
        assert_eq!(moved, Delivered::New(target.clone()));
        assert!(!src.exists());
        assert_eq!(fs::read(&target).unwrap(), b"A: 1\n\nx\n");

        // Interrupted after a cross-filesystem copy: the source is still
        // there. Moving again removes it and writes nothing new.
        fs::write(&src, b"A: 1\n\nx\n").unwrap();
        assert_eq!(
            junk.move_in(&src).unwrap(),
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
        assert_eq!(junk.move_in(&src).unwrap(), Delivered::Already(src.clone()));
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
        let err = junk.move_in(&src).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&src).unwrap(), b"A: 1\n\nmine\n");
        assert_eq!(
            fs::read(junk.root().join("new/2.b.host")).unwrap(),
            b"A: 1\n\nother\n"
        );
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
        let err = junk
            .move_in(&tmp.path().join("inbox/cur/gone"))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("gone"));
        for sub in ["cur", "new", "tmp"] {
            assert_eq!(fs::read_dir(junk.root().join(sub)).unwrap().count(), 0);
        }
    }
}
