//! Listing Maildirs and directory trees: which files to read, in which order.
//!
//! Listing one directory gives a list of [`Task`]s (files to read,
//! subdirectories to list later, errors to report); reading them, and keeping
//! symlink loops from being listed twice, is the caller's job.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{Error, Task};

/// The Maildir subdirectories; `tmp/` holds messages still being delivered.
const MAILDIR_SUBDIRS: [&str; 3] = ["cur", "new", "tmp"];

/// Whether `dir` is a Maildir: it has a `cur/` or `new/` subdirectory
/// (symlinks followed). A `tmp/` alone is not one: it is what many a tree
/// of saved mail holds, and every message under it would go unread.
pub(super) fn is_maildir(dir: &Path) -> bool {
    ["cur", "new"].iter().any(|sub| dir.join(sub).is_dir())
}

/// Whether `dir` has all of a Maildir's subdirectories: what a message
/// file named on its own must be in to be read as the Maildir reads it.
pub(super) fn is_whole_maildir(dir: &Path) -> bool {
    MAILDIR_SUBDIRS.iter().all(|sub| dir.join(sub).is_dir())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    /// A regular file, or a symlink that does not lead to a directory or
    /// anything special (a dangling one included: reading it reports why).
    File,
    /// FIFOs, sockets, devices: reading one could block or never end.
    Special,
}

struct Entry {
    name: OsString,
    path: PathBuf,
    kind: Kind,
}

fn is_dotfile(name: &OsString) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// The entries of `dir` sorted by name, dotfiles left out unless
/// `with_dotfiles`; entries that could not be examined come back as errors.
fn entries(dir: &Path, with_dotfiles: bool) -> io::Result<(Vec<Entry>, Vec<Task>)> {
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                errors.push(Task::Fail(Error::io_path(dir, e)));
                continue;
            }
        };
        let name = entry.file_name();
        if !with_dotfiles && is_dotfile(&name) {
            continue;
        }
        let path = entry.path();
        let file_type = match entry.file_type() {
            Ok(file_type) => file_type,
            Err(e) => {
                errors.push(Task::Fail(Error::io_path(&path, e)));
                continue;
            }
        };
        let kind = if file_type.is_symlink() {
            match fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => Kind::Dir,
                Ok(meta) if !meta.is_file() => Kind::Special,
                _ => Kind::File,
            }
        } else if file_type.is_dir() {
            Kind::Dir
        } else if file_type.is_file() {
            Kind::File
        } else {
            Kind::Special
        };
        entries.push(Entry { name, path, kind });
    }
    entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok((entries, errors))
}

/// The messages of the Maildir `dir`: the files in `cur/`, then in `new/`,
/// each sorted by name, without dotfiles; then, if `recursive`, its
/// subfolders that are themselves Maildirs (Maildir++ `.Name` folders and
/// nested Maildirs), sorted by name. A missing `cur/` or `new/` is not an
/// error; `tmp/` is never read.
pub(super) fn list_maildir(dir: &Path, recursive: bool) -> Vec<Task> {
    let mut tasks = Vec::new();
    for sub in ["cur", "new"] {
        let subdir = dir.join(sub);
        match entries(&subdir, false) {
            Ok((entries, errors)) => {
                tasks.extend(
                    entries
                        .into_iter()
                        .filter(|e| e.kind == Kind::File)
                        .map(|e| Task::File(e.path)),
                );
                tasks.extend(errors);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tasks.push(Task::Fail(Error::io_path(&subdir, e))),
        }
    }
    if recursive {
        match entries(dir, true) {
            Ok((entries, errors)) => {
                tasks.extend(
                    entries
                        .into_iter()
                        .filter(|e| {
                            e.kind == Kind::Dir
                                && !MAILDIR_SUBDIRS.iter().any(|sub| e.name == *sub)
                                && is_maildir(&e.path)
                        })
                        .map(|e| Task::Maildir(e.path)),
                );
                tasks.extend(errors);
            }
            Err(e) => tasks.push(Task::Fail(Error::io_path(dir, e))),
        }
    }
    tasks
}

/// What the directory `dir` holds, in name order, without dotfiles and
/// dot-directories: Maildirs to list as such, other directories to list in
/// turn, files to read (as an mbox or as one message, by their first bytes).
/// FIFOs, sockets and devices are left out.
pub(super) fn list_dir(dir: &Path) -> Vec<Task> {
    match entries(dir, false) {
        Ok((entries, errors)) => {
            let mut tasks: Vec<Task> = entries
                .into_iter()
                .filter_map(|e| match e.kind {
                    Kind::Dir if is_maildir(&e.path) => Some(Task::Maildir(e.path)),
                    Kind::Dir => Some(Task::Dir(e.path)),
                    Kind::File => Some(Task::Sniff(e.path)),
                    Kind::Special => None,
                })
                .collect();
            tasks.extend(errors);
            tasks
        }
        Err(e) => vec![Task::Fail(Error::io_path(dir, e))],
    }
}
