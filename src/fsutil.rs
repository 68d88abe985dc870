//! Opening and creating the files bayesmail keeps: the database's (model,
//! journal, registry, lock, the count store's files) and the messages it
//! writes into a Maildir. Every such open goes through here, so each keeps
//! the same three promises:
//!
//! - **No open blocks.** Files are opened with `O_NONBLOCK`, so a FIFO put
//!   where a file of ours belongs is opened at once (or refused) instead of
//!   waiting for a reader or writer that never comes; the descriptor handed
//!   back is blocking again.
//! - **Only regular files.** The open file is checked (`fstat`, so nothing
//!   swapped in between a check and the open is used) and anything else is
//!   refused with an error that says what it is: "not a regular file (a
//!   FIFO)".
//! - **Nothing is written through a link.** A file is created with
//!   `O_CREAT | O_EXCL`, which never follows a link and never reuses what is
//!   there, and a file written in place is opened with `O_NOFOLLOW`. A link
//!   planted at a name bayesmail will write (the names are predictable)
//!   cannot make it overwrite the file the link leads to. Reads follow
//!   links: reading through one changes nothing.
//!
//! `check_kind` checks a path that another library opens (sled opens its
//! own files) the same way, as far as a check before the open can.
//! [`words`] says what an I/O error was in a few words on one line.
//!
//! [`write_atomically`] replaces a file whole (a private temporary file
//! beside it, synced, renamed over it, the directory synced), and
//! [`remove_stale_temps`] clears what killed writers left.
//!
//! Owns: how files are opened, created and replaced, and what an I/O error
//! says. Not: what is in the files, or where they are
//! ([`crate::db::DbPaths`]).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Opens `path` for reading if it is a regular file (a link is followed).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("f");
/// std::fs::write(&path, b"x").unwrap();
/// assert!(bayesmail::fsutil::open_regular(&path).is_ok());
/// let err = bayesmail::fsutil::open_regular(dir.path()).unwrap_err();
/// assert_eq!(err.to_string(), "not a regular file (a directory)");
/// ```
pub fn open_regular(path: &Path) -> io::Result<File> {
    open(path, OpenOptions::new().read(true), Follow::Yes)
}

/// Opens `path` for reading if it is a regular file, not through a link:
/// for the database's own files, where a link is as wrong as a FIFO.
pub(crate) fn open_regular_no_follow(path: &Path) -> io::Result<File> {
    open(path, OpenOptions::new().read(true), Follow::No)
}

/// Opens the existing regular file `path` for appending, never through a
/// link.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    // Read access too: a FIFO opened for writing alone without blocking
    // fails (ENXIO) instead of opening and being refused by kind.
    open(path, OpenOptions::new().read(true).append(true), Follow::No)
}

/// Opens the regular file `path` for reading and writing, creating it with
/// `mode` if it is missing (a lock file, which stays), never through a
/// link.
pub(crate) fn open_or_create(path: &Path, mode: u32) -> io::Result<File> {
    open(
        path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(mode),
        Follow::No,
    )
}

/// Opens the regular file `path` for appending, creating it with `mode` if
/// it is missing (a log), never through a link.
pub(crate) fn open_append_or_create(path: &Path, mode: u32) -> io::Result<File> {
    open(
        path,
        OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(mode),
        Follow::No,
    )
}

/// Creates the new file `path` with `mode` for writing: fails with
/// [`io::ErrorKind::AlreadyExists`] if anything (a link included) is
/// there.
pub(crate) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    open(
        path,
        OpenOptions::new().write(true).create_new(true).mode(mode),
        Follow::No,
    )
}

/// Whether an open follows a link at the path's last component.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Follow {
    Yes,
    No,
}

fn open(path: &Path, options: &mut OpenOptions, follow: Follow) -> io::Result<File> {
    let mut flags = libc::O_NONBLOCK;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    let file = options
        .custom_flags(flags)
        .open(path)
        .map_err(|e| explain(path, e, follow))?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(not_regular(kind));
    }
    // SAFETY: fcntl on a descriptor `file` owns, reading and setting its
    // status flags only.
    unsafe {
        let fd = file.as_raw_fd();
        let status = libc::fcntl(fd, libc::F_GETFL);
        if status == -1 || libc::fcntl(fd, libc::F_SETFL, status & !libc::O_NONBLOCK) == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(file)
}

/// The error of an open that failed because of what is at `path`: a link
/// refused by `O_NOFOLLOW` (ELOOP) or a socket or FIFO that cannot be
/// opened so (ENXIO) is named for what it is.
fn explain(path: &Path, err: io::Error, follow: Follow) -> io::Error {
    if !matches!(err.raw_os_error(), Some(libc::ELOOP | libc::ENXIO)) {
        return err;
    }
    let meta = match follow {
        Follow::Yes => fs::metadata(path),
        Follow::No => fs::symlink_metadata(path),
    };
    match meta {
        Ok(m) if !m.file_type().is_file() => not_regular(m.file_type()),
        _ => err,
    }
}

/// Checks what is at `path` without following a link, for a file that
/// another library opens: `Ok(false)` if nothing is there, `Ok(true)` if
/// it is a directory (`dir`) or a regular file (not `dir`), else an error
/// that says what it is.
pub(crate) fn check_kind(path: &Path, dir: bool) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() == dir && m.is_file() != dir => Ok(true),
        Ok(m) if dir => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a directory (a {})", describe(m.file_type())),
        )),
        Ok(m) => Err(not_regular(m.file_type())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn not_regular(kind: fs::FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file (a {})", describe(kind)),
    )
}

/// A word for a kind of file.
fn describe(kind: fs::FileType) -> &'static str {
    if kind.is_symlink() {
        "symbolic link"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "device"
    } else if kind.is_dir() {
        "directory"
    } else if kind.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

/// What the I/O error `err` was, in words on one line: the system's
/// message without its number, starting in lower case ("no space left on
/// device"), or the error's own message.
///
/// An error that went through sled may carry the `Debug` text of the
/// original as its message (`Os { code: 28, kind: StorageFull, … }`: sled
/// clones an error that way); it is said in words as well.
///
/// ```
/// use std::io;
/// use bayesmail::fsutil::words;
/// assert_eq!(words(&io::Error::from_raw_os_error(28)), "no space left on device");
/// let cloned = io::Error::new(io::ErrorKind::StorageFull,
///     r#"Os { code: 28, kind: StorageFull, message: "No space left on device" }"#);
/// assert_eq!(words(&cloned), "no space left on device");
/// ```
pub fn words(err: &io::Error) -> String {
    if let Some(code) = err.raw_os_error() {
        return os_words(code);
    }
    let Some(inner) = err.get_ref() else {
        return err.to_string();
    };
    let text = inner.to_string();
    if let Some(code) = text
        .strip_prefix("Os { code: ")
        .and_then(|rest| rest.split(',').next())
        .and_then(|code| code.parse().ok())
    {
        return os_words(code);
    }
    if text.starts_with("Kind(") {
        return err.kind().to_string();
    }
    if let Some(message) = text
        .strip_prefix("Custom { kind: ")
        .and_then(|rest| rest.split_once("error: \""))
        .and_then(|(_, message)| message.rsplit_once('"'))
    {
        return message.0.to_string();
    }
    text.lines().collect::<Vec<_>>().join(" ")
}

/// The system's message for the error number `code`, without the number,
/// starting in lower case.
fn os_words(code: i32) -> String {
    let text = io::Error::from_raw_os_error(code).to_string();
    let text = text.rsplit_once(" (os error").map_or(&text[..], |(t, _)| t);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text.to_string(),
    }
}

/// A file operation that failed, with the file it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}", .path.display(), words(.source))]
pub struct PathError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

/// Distinguishes temporary files of concurrent writers in one process.
pub(crate) static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new temporary file name beside `path` (`.NAME.PID.N.tmp`), as
/// [`remove_stale_temps`] knows them.
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(
        ".{}.{}.{}.tmp",
        name,
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Creates a new temporary file beside `path` (mode 0600), never through
/// a link: a name that is taken (by a link someone put there, say) is
/// passed over for the next.
fn create_temp(path: &Path) -> io::Result<(PathBuf, File)> {
    let mut tries = 0;
    loop {
        let tmp = temp_path(path);
        match create_new(&tmp, 0o600) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Writes `bytes` to `path` atomically (to a temporary file beside it, synced, then renamed over it, and the directory synced). One
/// that replaces a file takes that file's permissions and group, so a user
/// who loosened them keeps theirs; a new one is the owner's (0600) and,
/// where the directory is shared with its group and no one else, that
/// group's as far as the directory lets the group read and write: a
/// directory 0750 of group `mail` gives 0640 of group `mail`, one 0755 or
/// 0700 gives 0600.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), PathError> {
    write_replacing(path, bytes, true)
}

/// [`write_atomically`] without the syncs, for a file whose loss in a
/// crash costs nothing but work to redo: readers still see the old file or
/// the new one whole, never a part.
pub fn write_atomically_unsynced(path: &Path, bytes: &[u8]) -> Result<(), PathError> {
    write_replacing(path, bytes, false)
}

fn write_replacing(path: &Path, bytes: &[u8], durable: bool) -> Result<(), PathError> {
    let name = path.file_name().ok_or_else(|| PathError {
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    remove_stale_temps(
        dir,
        Some(&name.to_string_lossy()),
        std::time::Duration::ZERO,
    );
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| PathError { path, source }
    };
    let (tmp, mut file) = create_temp(path).map_err(io(path))?;
    let written = (|| {
        // Only a file's own permissions: a link there is replaced, and
        // what it leads to (someone else's file, readable by all) says
        // nothing about who may read ours.
        let (mode, group) = match fs::symlink_metadata(path).ok().filter(|m| m.is_file()) {
            Some(existing) => (existing.mode() & 0o7777, Some(existing.gid())),
            None => new_file_access(dir),
        };
        give_access(&file, mode, group).map_err(io(&tmp))?;
        file.write_all(bytes).map_err(io(&tmp))?;
        if durable {
            file.sync_all().map_err(io(&tmp))?;
        }
        drop(file);
        fs::rename(&tmp, path).map_err(io(path))
    })();
    if written.is_err() {
        // Best effort: the error that matters is the one already in hand.
        let _ = fs::remove_file(&tmp);
        return written;
    }
    if !durable {
        return Ok(());
    }
    // Make the rename itself durable.
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Why root must not write at a path: somewhere on the way to it another
/// user can change what the path leads to. Root's files there would be
/// closed to that user, and a link swapped in under a running command
/// (a directory renamed away and a link to `/etc` put in its place)
/// would send root's writes wherever the user chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsafe {
    /// The path as given.
    pub path: PathBuf,
    /// What is wrong with it, to follow the path in a sentence
    /// ("belongs to alice", "goes through /tmp, which every user may
    /// change").
    pub reason: String,
    /// The user who can change it, where one user can: the one to run
    /// the command as instead.
    pub owner: Option<String>,
}

impl Unsafe {
    /// What root writing there would do, and what to do instead, in words.
    pub fn instead(&self) -> String {
        match &self.owner {
            Some(owner) => format!(
                "as root this would leave files {owner} cannot use, or write wherever a link \
                 {owner} swaps in leads; run it as {owner}"
            ),
            None => "as root this could write wherever a link swapped in under it leads; \
                     keep it in a directory only root may change (made first with mkdir -m 700)"
                .to_string(),
        }
    }
}

impl std::fmt::Display for Unsafe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.path.display(), self.reason)
    }
}

/// Who besides root may change what is in the directory of `meta`, by
/// its mode: every user, or a group's members (users an ACL lets write
/// show in the group bits too).
fn writers_besides_root(meta: &fs::Metadata) -> Option<String> {
    if meta.mode() & 0o002 != 0 {
        Some("every user".to_string())
    } else if meta.mode() & 0o020 != 0 {
        let group = nix::unistd::Group::from_gid(meta.gid().into())
            .ok()
            .flatten()
            .map_or(meta.gid().to_string(), |g| g.name);
        Some(format!("the group {group}"))
    } else {
        None
    }
}

/// [`unsafe_for_root`] for a directory root makes, renames or writes
/// files in: also refused when others may change what is in it, sticky
/// or not (a name root is about to use could be taken first, or a file
/// renamed in or out).
pub fn unsafe_for_root_in(dir: &Path) -> Option<Unsafe> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    if let Some(why) = unsafe_for_root(dir) {
        return Some(why);
    }
    let meta = fs::metadata(dir).ok()?;
    writers_besides_root(&meta).map(|who| Unsafe {
        path: dir.to_path_buf(),
        reason: format!("may be changed by {who}"),
        owner: None,
    })
}

/// When this process runs as root: whether another user can change what
/// `path` leads to (see [`Unsafe`]). The path is followed as the kernel
/// follows it, from the working directory if relative, through each
/// link and `..`: a directory or link on the way that another user owns,
/// a directory on the way that others may write to (its group, whichever
/// it is: a group's members, or users an ACL lets write, which the
/// group bits show; a sticky one such as `/tmp` only where what is in it
/// is not root's, or where the rest of the path is still to be made
/// there), a `..` after a directory still to be made, or a path that
/// cannot be followed to its end. What is inside a directory only root
/// may change is root's to write, whoever owns a file there.
pub fn unsafe_for_root(path: &Path) -> Option<Unsafe> {
    use std::collections::VecDeque;
    use std::path::Component;
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    // Whatever stops the look refuses: the command would go on by a way
    // not looked at (a working directory removed under it, a path longer
    // than the kernel follows whole).
    let unknown = |what: &str, err: io::Error| {
        Some(Unsafe {
            path: path.to_path_buf(),
            reason: format!("cannot be followed to its end ({what}: {})", words(&err)),
            owner: None,
        })
    };
    let abs = match std::path::absolute(path) {
        Ok(abs) => abs,
        Err(err) => return unknown("the working directory", err),
    };
    // The owner of what the path leads to, if it is there.
    let owner_of_end = fs::metadata(&abs).ok().map(|m| m.uid());
    let exists = fs::symlink_metadata(&abs).is_ok();
    let name = |uid: u32| {
        nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map_or(uid.to_string(), |u| u.name)
    };
    let refuse = |reason: String, owner: Option<String>| {
        Some(Unsafe {
            path: path.to_path_buf(),
            reason,
            owner,
        })
    };
    let others = writers_besides_root;
    let mut rest: VecDeque<std::ffi::OsString> = VecDeque::new();
    let push = |rest: &mut VecDeque<std::ffi::OsString>, p: &Path, front: bool| {
        let items: Vec<std::ffi::OsString> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        if front {
            for item in items.into_iter().rev() {
                rest.push_front(item);
            }
        } else {
            rest.extend(items);
        }
    };
    push(&mut rest, &abs, false);
    let root = Path::new("/");
    let mut cur = root.to_path_buf();
    let mut cur_meta = match fs::metadata(root) {
        Ok(meta) => meta,
        Err(err) => return unknown("/", err),
    };
    let mut links = 0;
    while let Some(item) = rest.pop_front() {
        if item == ".." {
            cur = cur.parent().unwrap_or(root).to_path_buf();
            cur_meta = match fs::metadata(&cur) {
                Ok(meta) => meta,
                Err(err) => return unknown(&cur.display().to_string(), err),
            };
            continue;
        }
        let next = cur.join(&item);
        let meta = match fs::symlink_metadata(&next) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(who) = others(&cur_meta) {
                    return refuse(
                        format!("would be made in {}, which {who} may change", cur.display()),
                        None,
                    );
                }
                if rest.iter().any(|r| r == "..") {
                    return refuse(
                        "goes back up (..) out of a directory still to be made".to_string(),
                        None,
                    );
                }
                return None;
            }
            Err(err) => return unknown(&next.display().to_string(), err),
        };
        let link = meta.file_type().is_symlink();
        let last = rest.is_empty() && links == 0;
        if meta.uid() != 0 && (meta.is_dir() || link) {
            let owner = name(meta.uid());
            let reason = if link {
                format!("goes through a link of {owner} ({})", next.display())
            } else if last || owner_of_end == Some(meta.uid()) {
                format!("belongs to {owner}")
            } else if exists {
                format!("is in a directory of {owner}")
            } else {
                format!("would be made in a directory of {owner}")
            };
            return refuse(reason, Some(owner));
        }
        let sticky = cur_meta.mode() & 0o1000 != 0;
        if let Some(who) = others(&cur_meta)
            && !(sticky && meta.uid() == 0)
        {
            return refuse(
                format!("goes through {}, which {who} may change", cur.display()),
                None,
            );
        }
        if link {
            links += 1;
            if links > 40 {
                let loops = io::Error::from_raw_os_error(libc::ELOOP);
                return unknown(&next.display().to_string(), loops);
            }
            let target = match fs::read_link(&next) {
                Ok(target) => target,
                Err(err) => return unknown(&next.display().to_string(), err),
            };
            if target.is_absolute() {
                cur = root.to_path_buf();
                cur_meta = match fs::metadata(root) {
                    Ok(meta) => meta,
                    Err(err) => return unknown("/", err),
                };
            }
            push(&mut rest, &target, true);
            continue;
        }
        cur = next;
        cur_meta = meta;
    }
    None
}

/// The mode and group of a new file in `dir`: the owner's alone (0600),
/// or shared with the directory's group where the directory is open to
/// that group and closed to others (0750 gives 0640, 0770 gives 0660),
/// never with everyone: a directory open to all (0755, as a umask of 022
/// makes it) says nothing about who should read.
fn new_file_access(dir: &Path) -> (u32, Option<u32>) {
    match fs::metadata(dir) {
        Ok(d) if d.mode() & 0o007 == 0 => (d.mode() & 0o660 | 0o600, Some(d.gid())),
        _ => (0o600, None),
    }
}

/// Gives `file` `mode`, and `group` if given. Best effort for the group:
/// only a member of the group may give a file to it, and the mode follows
/// (a file of the owner's group that the group may read would be read by
/// the wrong one).
fn give_access(file: &File, mode: u32, group: Option<u32>) -> io::Result<()> {
    let grouped = group.is_none_or(|gid| {
        file.metadata().is_ok_and(|m| m.gid() == gid)
            || std::os::unix::fs::fchown(file, None, Some(gid)).is_ok()
    });
    let mode = if grouped { mode } else { mode & 0o7707 };
    file.set_permissions(fs::Permissions::from_mode(mode))
}

/// Opens the regular file `path` of a database for reading and writing
/// (`append`: appending), never through a link; one that is missing is
/// made as [`write_atomically`] makes a new file: the owner's, or shared
/// with the directory's group as the directory is. A file every writer of
/// a database shares (its lock, its learn log) must open for each writer
/// the directory lets in, or one writer jams the others.
pub(crate) fn open_or_create_shared(path: &Path, append: bool) -> io::Result<File> {
    match create_new(path, 0o600) {
        Ok(file) => {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let (mode, group) = new_file_access(dir);
            give_access(&file, mode, group)?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if append {
        open_append_or_create(path, 0o600)
    } else {
        open_or_create(path, 0o600)
    }
}

/// Gives the directory `dir`, just made the owner's alone, what a new
/// file beside it gets ([`new_file_access`]), search where read is
/// given, and its parent's set-group-id bit: a database's count store is
/// made open to the database's group as the database's other new files
/// are, or the group's other writers could not open it.
pub(crate) fn share_new_dir(dir: &Path) -> io::Result<()> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (mode, group) = new_file_access(parent);
    if group.is_none() {
        return Ok(());
    }
    let setgid = fs::metadata(parent).map_or(0, |m| m.mode() & 0o2000);
    let mode = mode | (mode & 0o440) >> 2 | setgid;
    let made = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)?;
    give_access(&made, mode, group)
}

/// Whether `dir` is open to its group and closed to others: what a
/// database's directory (or count store) shared by a group of users is.
pub(crate) fn shared_with_group(dir: &Path) -> bool {
    fs::metadata(dir).is_ok_and(|m| m.mode() & 0o070 != 0 && m.mode() & 0o007 == 0)
}

/// Gives each directory and regular file under `dir` that this process
/// owns `dir`'s group and what `dir` lets its group do (a file without
/// search; a directory `dir`'s set-group-id bit too), nothing to others.
/// A count store's engine makes its files under the umask, at creation
/// and at each open (sled's snapshot; during a run it makes files only
/// for values far larger than a count); in a store its group shares,
/// each writer opens to the group what it made, so that the next writer
/// of the group can open the store. Best effort: what cannot be changed
/// is left.
///
/// The group may rename, link and replace what is in the store, so
/// nothing is reached by name twice: each entry is opened from its
/// directory's descriptor, never through a link, and changed through its
/// own descriptor; a file with more than one name (a link to a file of
/// this user's elsewhere) is left as it is.
pub(crate) fn share_tree(dir: &Path) {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(top) = nix::fcntl::open(dir, flags, nix::sys::stat::Mode::empty()) else {
        return;
    };
    let top = File::from(top);
    let Ok(meta) = top.metadata() else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    let group = meta.mode() & 0o070;
    share_under(top.into(), meta.gid(), group, meta.mode() & 0o2000, me, 0);
}

/// [`share_tree`] below the open directory `dir`.
fn share_under(dir: std::os::fd::OwnedFd, gid: u32, group: u32, setgid: u32, me: u32, depth: u32) {
    use nix::fcntl::OFlag;
    use std::os::unix::ffi::OsStrExt;
    let Ok(listed) = dir.try_clone() else {
        return;
    };
    let Ok(mut listing) = nix::dir::Dir::from_fd(listed) else {
        return;
    };
    let names: Vec<std::ffi::CString> = listing
        .iter()
        .flatten()
        .map(|e| e.file_name().to_owned())
        .filter(|n| {
            let n = std::ffi::OsStr::from_bytes(n.as_bytes());
            n != "." && n != ".."
        })
        .collect();
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    for name in names {
        let Ok(fd) =
            nix::fcntl::openat(&dir, name.as_c_str(), flags, nix::sys::stat::Mode::empty())
        else {
            continue;
        };
        let file = File::from(fd);
        let Ok(meta) = file.metadata() else {
            continue;
        };
        let mode = if meta.is_dir() {
            0o700 | group | setgid
        } else if meta.is_file() && meta.nlink() == 1 {
            0o600 | group & 0o060
        } else {
            continue;
        };
        if meta.uid() == me && (meta.mode() & 0o7777 != mode || meta.gid() != gid) {
            let _ = give_access(&file, mode, Some(gid));
        }
        if meta.is_dir() && depth < 8 {
            share_under(file.into(), gid, group, setgid, me, depth + 1);
        }
    }
}

/// Removes the temporary files that killed writers of `name` (`None`: of
/// any file, as in a directory of files each written once) left in `dir`:
/// only files named as [`write_atomically`] names them (`.NAME.PID.N.tmp`),
/// only those of a process that no longer runs, so a concurrent writer
/// keeps its file, and only those unchanged for `idle` (where writers do
/// not hold a lock: a writer in another PID namespace, or whose process
/// `/proc` hides, looks dead). Where live processes cannot be told (no
/// `/proc`), removes nothing. Best effort: a file that cannot be removed
/// is left for the next write.
pub fn remove_stale_temps(dir: &Path, name: Option<&str>, idle: std::time::Duration) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(stem) = file_name
            .to_str()
            .and_then(|f| f.strip_prefix('.'))
            .and_then(|f| f.strip_suffix(".tmp"))
        else {
            continue;
        };
        let mut parts = stem.rsplitn(3, '.');
        let (Some(n), Some(pid), Some(of)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if name.is_some_and(|name| name != of) {
            continue;
        }
        let (Ok(pid), Ok(_)) = (pid.parse::<u32>(), n.parse::<u64>()) else {
            continue;
        };
        let dead = pid != std::process::id() && !proc.join(pid.to_string()).exists();
        let idle_for = |m: fs::Metadata| m.modified().ok()?.elapsed().ok();
        let idle = idle.is_zero() || entry.metadata().ok().and_then(idle_for) >= Some(idle);
        if dead && idle && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn fifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// D3: a FIFO is refused by every open, at once, whatever the access.
    #[test]
    fn a_fifo_is_refused_by_every_open_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fifo");
        fifo(&path);
        type Open = fn(&Path) -> io::Result<File>;
        let opens: [(&str, Open); 4] = [
            ("read", open_regular),
            ("append", open_append),
            ("open or create", |p| open_or_create(p, 0o600)),
            ("create", |p| create_new(p, 0o600)),
        ];
        for (what, open) in opens {
            let err = open(&path).unwrap_err();
            let expected = if what == "create" {
                io::ErrorKind::AlreadyExists
            } else {
                io::ErrorKind::InvalidInput
            };
            assert_eq!(err.kind(), expected, "{what}: {err}");
            if what != "create" {
                assert_eq!(err.to_string(), "not a regular file (a FIFO)", "{what}");
            }
        }
    }

    /// S3, S4: nothing is written through a link, dangling or not; a read
    /// follows it.
    #[test]
    fn nothing_is_written_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        for path in [&link, &dangling] {
            let err = open_append(path).unwrap_err();
            assert_eq!(err.to_string(), "not a regular file (a symbolic link)");
            let err = open_or_create(path, 0o600).unwrap_err();
            assert_eq!(err.to_string(), "not a regular file (a symbolic link)");
            let err = create_new(path, 0o600).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        }
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert!(!dir.path().join("nowhere").exists());
        let mut text = String::new();
        open_regular(&link)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "keep");
    }

    /// Root's writes are refused wherever another user can change what
    /// the path leads to, however the path gets there: a directory or a
    /// link of theirs on the way, a directory others may write to, a `..`
    /// out of a directory still to be made; and allowed in root's own
    /// directories.
    #[test]
    fn root_writes_only_where_no_other_user_can_change_the_way() {
        // SAFETY: reading the process's effective user id.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mkdir = |name: &str, mode: u32, uid: u32| {
            let p = d.join(name);
            fs::create_dir(&p).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            std::os::unix::fs::chown(&p, Some(uid), None).unwrap();
            p
        };
        mkdir("root", 0o755, 0);
        mkdir("root/inner", 0o755, 0);
        mkdir("nobody", 0o755, 65534);
        mkdir("nobody/roots", 0o755, 0);
        mkdir("open", 0o777, 0);
        mkdir("open/roots", 0o755, 0);
        mkdir("sticky", 0o1777, 0);
        mkdir("rootgroup", 0o775, 0);
        mkdir("root/open", 0o777, 0);
        mkdir("sticky/roots", 0o755, 0);
        std::os::unix::fs::symlink(d.join("nobody"), d.join("rootlink")).unwrap();
        std::os::unix::fs::symlink(d.join("root"), d.join("nobodylink")).unwrap();
        std::os::unix::fs::lchown(d.join("nobodylink"), Some(65534), None).unwrap();
        let why = |rel: &str| unsafe_for_root(&d.join(rel)).map(|u| (u.reason, u.owner));
        let nobody = Some("nobody".to_string());
        for ok in [
            "root/db",
            "root/inner",
            "root/inner/new/db",
            "sticky/roots/db",
            "root/../root/db",
        ] {
            assert_eq!(why(ok), None, "{ok}");
        }
        assert_eq!(
            why("nobody"),
            Some(("belongs to nobody".into(), nobody.clone()))
        );
        assert_eq!(
            why("nobody/db"),
            Some((
                "would be made in a directory of nobody".into(),
                nobody.clone()
            ))
        );
        assert_eq!(
            why("nobody/roots"),
            Some(("is in a directory of nobody".into(), nobody.clone()))
        );
        for through in ["rootlink/db", "root/../nobody/db"] {
            assert_eq!(
                why(through),
                Some((
                    "would be made in a directory of nobody".into(),
                    nobody.clone()
                )),
                "{through}"
            );
        }
        let (reason, owner) = why("nobodylink/db").unwrap();
        assert!(
            reason.starts_with("goes through a link of nobody"),
            "{reason}"
        );
        assert_eq!(owner, nobody);
        let (reason, owner) = why("missing/../nobody/db").unwrap();
        assert!(reason.contains("(..)"), "{reason}");
        assert_eq!(owner, None);
        // A directory root writes in, which others may change itself.
        assert_eq!(unsafe_for_root_in(&d.join("root/inner")), None);
        let reason = unsafe_for_root_in(&d.join("root/open")).unwrap().reason;
        assert_eq!(reason, "may be changed by every user");
        let (reason, _) = why("rootgroup/db").unwrap();
        assert!(
            reason.ends_with("which the group root may change"),
            "{reason}"
        );
        // A path that cannot be followed to its end is refused: a loop of
        // links.
        std::os::unix::fs::symlink(d.join("loop"), d.join("loop")).unwrap();
        let reason = why("loop/db").unwrap().0;
        assert!(
            reason.starts_with("cannot be followed to its end"),
            "{reason}"
        );
        for (rel, made) in [
            ("open/db", true),
            ("open/roots", false),
            ("sticky/db", true),
        ] {
            let (reason, owner) = why(rel).unwrap();
            let want = if made {
                "would be made in"
            } else {
                "goes through"
            };
            assert!(
                reason.starts_with(want) && reason.ends_with("which every user may change"),
                "{rel}: {reason}"
            );
            assert_eq!(owner, None);
        }
    }

    /// A count store its group shares: what is in it is opened to the
    /// group, and nothing a link in it leads to (a symbolic link to a
    /// private directory or file, a second name of a private file).
    #[test]
    fn a_shared_store_opens_to_its_group_only_what_is_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        let set = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
        let store = d.join("counts.sled");
        fs::create_dir(&store).unwrap();
        set(&store, 0o770);
        fs::write(store.join("db"), b"counts").unwrap();
        set(&store.join("db"), 0o600);
        fs::create_dir(store.join("blobs")).unwrap();
        set(&store.join("blobs"), 0o700);
        fs::write(store.join("blobs/1"), b"blob").unwrap();
        set(&store.join("blobs/1"), 0o600);
        // The user's own private things, and links to them in the store.
        fs::create_dir(d.join("private")).unwrap();
        set(&d.join("private"), 0o700);
        fs::write(d.join("private/key"), b"secret").unwrap();
        set(&d.join("private/key"), 0o600);
        fs::write(d.join("secret"), b"secret").unwrap();
        set(&d.join("secret"), 0o600);
        std::os::unix::fs::symlink(d.join("private"), store.join("to-dir")).unwrap();
        std::os::unix::fs::symlink(d.join("secret"), store.join("to-file")).unwrap();
        fs::hard_link(d.join("secret"), store.join("second-name")).unwrap();
        // Another member's file (root could change it, and must not).
        let root = nix::unistd::geteuid().is_root();
        if root {
            fs::write(store.join("theirs"), b"theirs").unwrap();
            set(&store.join("theirs"), 0o600);
            std::os::unix::fs::chown(store.join("theirs"), Some(65534), None).unwrap();
        }

        share_tree(&store);

        if root {
            assert_eq!(mode(&store.join("theirs")), 0o600);
        }

        assert_eq!(mode(&store.join("db")), 0o660);
        assert_eq!(mode(&store.join("blobs")), 0o770);
        // A store whose new files take its group (set-group-id) gives its
        // directories the same.
        set(&store, 0o2770);
        share_tree(&store);
        assert_eq!(mode(&store.join("blobs")), 0o2770);
        assert_eq!(mode(&store.join("blobs/1")), 0o660);
        assert_eq!(mode(&d.join("private")), 0o700);
        assert_eq!(mode(&d.join("private/key")), 0o600);
        assert_eq!(mode(&d.join("secret")), 0o600);

        // A store open to its group for reading only gives read alone.
        set(&store, 0o750);
        share_tree(&store);
        assert_eq!(mode(&store.join("db")), 0o640);
        assert_eq!(mode(&store.join("blobs")), 0o750);
        assert_eq!(mode(&d.join("private")), 0o700);
        assert_eq!(mode(&d.join("secret")), 0o600);
    }

    /// A new file is shared with its directory's group only where the
    /// directory is open to that group and closed to others; a replaced
    /// one keeps its own mode and group.
    #[test]
    fn a_new_file_takes_its_directorys_permissions_a_replacement_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mode = |name: &str| fs::metadata(d.join(name)).unwrap().mode() & 0o7777;
        let set = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
        // A directory open to all (0755, as a umask of 022 makes it)
        // shares nothing: never with everyone, nor with a group no one
        // chose.
        for (dir_mode, name, want) in [
            (0o700, "private", 0o600),
            (0o750, "shared", 0o640),
            (0o770, "team", 0o660),
            (0o755, "open", 0o600),
        ] {
            set(d, dir_mode);
            write_atomically(&d.join(name), b"x").unwrap();
            assert_eq!(mode(name), want, "{name} in a directory of {dir_mode:o}");
            // A database's lock and log, made by whichever writer comes
            // first, the same: the directory's other writers open them.
            let lock = format!("{name}.lock");
            open_or_create_shared(&d.join(&lock), false).unwrap();
            assert_eq!(mode(&lock), want, "{lock} in a directory of {dir_mode:o}");
            let log = format!("{name}.log");
            open_or_create_shared(&d.join(&log), true)
                .unwrap()
                .write_all(b"a\n")
                .unwrap();
            open_or_create_shared(&d.join(&log), true)
                .unwrap()
                .write_all(b"b\n")
                .unwrap();
            assert_eq!(fs::read(d.join(&log)).unwrap(), b"a\nb\n");
            assert_eq!(mode(&log), want, "{log} in a directory of {dir_mode:o}");
        }
        // One that is there keeps its mode.
        set(&d.join("open.lock"), 0o640);
        open_or_create_shared(&d.join("open.lock"), false).unwrap();
        assert_eq!(mode("open.lock"), 0o640);
        set(&d.join("private"), 0o604);
        write_atomically(&d.join("private"), b"y").unwrap();
        assert_eq!(mode("private"), 0o604);
        // SAFETY: reading the process's effective user id.
        if unsafe { libc::geteuid() } == 0 {
            let gid = |name: &str| fs::metadata(d.join(name)).unwrap().gid();
            set(d, 0o750);
            std::os::unix::fs::chown(d, None, Some(8)).unwrap();
            write_atomically(&d.join("grouped"), b"x").unwrap();
            assert_eq!((gid("grouped"), mode("grouped")), (8, 0o640));
            std::os::unix::fs::chown(d.join("grouped"), None, Some(9)).unwrap();
            write_atomically_unsynced(&d.join("grouped"), b"y").unwrap();
            assert_eq!((gid("grouped"), mode("grouped")), (9, 0o640));
        }
    }

    /// What is opened is a blocking descriptor of the regular file, created
    /// with the mode asked for.
    #[test]
    fn regular_files_open_blocking_and_are_created_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut file = create_new(&path, 0o600).unwrap();
        file.write_all(b"a").unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        open_append(&path).unwrap().write_all(b"b").unwrap();
        let lock = open_or_create(&dir.path().join("lock"), 0o600).unwrap();
        for file in [open_regular(&path).unwrap(), lock] {
            // SAFETY: reading the status flags of an open descriptor.
            let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
            assert_eq!(flags & libc::O_NONBLOCK, 0);
        }
        assert_eq!(fs::read(&path).unwrap(), b"ab");
    }

    #[test]
    fn check_kind_tells_files_directories_links_and_nothing_apart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, b"").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(check_kind(dir.path(), true).unwrap());
        assert!(check_kind(&file, false).unwrap());
        assert!(!check_kind(&dir.path().join("none"), false).unwrap());
        assert_eq!(
            check_kind(&file, true).unwrap_err().to_string(),
            "not a directory (a regular file)"
        );
        assert_eq!(
            check_kind(dir.path(), false).unwrap_err().to_string(),
            "not a regular file (a directory)"
        );
        assert_eq!(
            check_kind(&link, true).unwrap_err().to_string(),
            "not a directory (a symbolic link)"
        );
    }

    /// D4: every way an I/O error reaches us reads as words on one line.
    #[test]
    fn io_errors_read_as_words() {
        let cases = [
            (io::Error::from_raw_os_error(13), "permission denied"),
            (io::Error::from_raw_os_error(28), "no space left on device"),
            (
                io::Error::new(
                    io::ErrorKind::StorageFull,
                    r#"Os { code: 28, kind: StorageFull, message: "No space left on device" }"#,
                ),
                "no space left on device",
            ),
            (
                io::Error::new(io::ErrorKind::StorageFull, "Kind(StorageFull)"),
                "no storage space",
            ),
            (
                io::Error::other(r#"Custom { kind: Other, error: "it broke" }"#),
                "it broke",
            ),
            (io::Error::other("two\nlines"), "two lines"),
            (io::ErrorKind::StorageFull.into(), "no storage space"),
        ];
        for (err, said) in cases {
            assert_eq!(words(&err), said, "{err:?}");
        }
    }
}
