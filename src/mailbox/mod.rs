//! Finding and reading raw messages out of mailboxes.
//!
//! This module owns everything between a path on the command line and the
//! bytes of one message: telling the kinds of mailbox apart ([`detect`]),
//! walking Maildirs and directory trees, splitting mbox files, reading stdin,
//! and naming each message with a [`MessageId`] so that reports can point back
//! to it. It hands out the bytes exactly as stored (an mbox message is
//! unescaped, see [`MboxEscaping`]); it does not parse MIME, decode anything or
//! look at headers — that is the `message` module's job.
//!
//! Reading streams: messages come out one at a time, an mbox is read line by
//! line, so memory is bounded by the largest single message, not by the
//! mailbox. Each message comes as its own [`Result`], so one unreadable file
//! (a message that vanished from a live Maildir, a dangling symlink) is
//! reported and the batch goes on.
//!
//! ```
//! use bayesmail::mailbox::{self, Options};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("inbox.mbox");
//! let mut mbox = Vec::new();
//! mailbox::write_mbox_message(&mut mbox, None, b"Subject: one\n\nFrom here on.\n")?;
//! mailbox::write_mbox_message(&mut mbox, None, b"Subject: two\n\nbody\n")?;
//! std::fs::write(&path, &mbox)?;
//!
//! let messages: Vec<_> = mailbox::open(&path, &Options::default())?.collect();
//! assert_eq!(messages.len(), 2);
//! let first = messages[0].as_ref().unwrap();
//! assert_eq!(first.bytes, b"Subject: one\n\nFrom here on.\n");
//! assert_eq!(first.id.to_string(), format!("{}:0", path.display()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod deliver;
mod kind;
mod mbox;
mod walk;

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufReader, Read};
use std::iter::FusedIterator;
use std::path::{Path, PathBuf};

pub use deliver::{Delivered, Maildir, MoveError};
pub use kind::{MailboxKind, MboxEscaping};
use mbox::MboxReader;
pub use mbox::write_mbox_message;

/// How mailboxes are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Options {
    /// Descend into Maildir subfolders: Maildir++ folders (`.Name` directories
    /// holding `cur/` or `new/`) and nested Maildirs (plain subdirectories
    /// holding `cur/` or `new/`). Default `false`: in Maildir++ the root is
    /// the inbox, and `.Junk`, `.Trash` or `.Sent` are other folders, so a
    /// Maildir means its own `cur/` and `new/` unless the caller asks for
    /// more. Directory trees ([`MailboxKind::Dir`]) are always walked in
    /// full (Maildirs found in them follow this setting).
    pub recursive: bool,
    /// The mbox escaping convention to undo. Default [`MboxEscaping::Mboxrd`].
    pub escaping: MboxEscaping,
}

/// Where a message came from.
///
/// `Display` gives the path, `path:offset` for a message in an mbox (the byte
/// offset of its `From ` separator line), or `-` for stdin. Paths that are not
/// valid UTF-8 are displayed (and serialized) lossily; the id itself keeps the
/// exact path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum MessageId {
    /// A file holding one message (Maildir message, file in a tree, single
    /// file).
    Path(#[serde(serialize_with = "serialize_path_lossy")] PathBuf),
    /// A message inside an mbox file.
    Mbox {
        /// The mbox file.
        #[serde(serialize_with = "serialize_path_lossy")]
        path: PathBuf,
        /// Byte offset of the message's `From ` separator line in the file.
        offset: u64,
    },
    /// Standard input.
    Stdin,
    /// One of several messages in an mbox read from standard input.
    StdinMbox {
        /// Byte offset of the message's `From ` separator line in the input.
        offset: u64,
    },
}

impl MessageId {
    /// The file the message lives in; `None` for stdin.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Path(path) | Self::Mbox { path, .. } => Some(path),
            Self::Stdin | Self::StdinMbox { .. } => None,
        }
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Path(path) => write!(f, "{}", path.display()),
            Self::Mbox { path, offset } => write!(f, "{}:{offset}", path.display()),
            Self::Stdin => f.write_str("-"),
            Self::StdinMbox { offset } => write!(f, "-:{offset}"),
        }
    }
}

fn serialize_path_lossy<S: serde::Serializer>(
    path: &Path,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    // A non-UTF-8 file name must not make a whole report fail to serialize.
    serializer.serialize_str(&path.to_string_lossy())
}

/// One message as stored, with where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawMessage {
    /// Where the message came from.
    pub id: MessageId,
    /// The message bytes, exactly as stored; for mbox messages without the
    /// `From ` separator line and with the `>From ` escaping undone.
    pub bytes: Vec<u8>,
}

/// Errors finding or reading messages.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    /// Reading, listing or opening `at` failed. The message names the path:
    /// "no such file or directory: X", "permission denied: X",
    /// "is a directory: X", otherwise `X: <system error>`.
    #[error("{}", describe_io(.at, .error))]
    Io {
        /// The file, directory, mbox message or stdin that failed.
        at: MessageId,
        /// The underlying error (its text is part of this error's message).
        error: io::Error,
    },
    /// The path exists but cannot be read as a mailbox of the kind asked for
    /// (or of any kind, when detecting).
    #[error("not a mailbox: {} ({reason})", .path.display())]
    NotAMailbox {
        /// The path.
        path: PathBuf,
        /// Why, e.g. "not a regular file or directory".
        reason: &'static str,
    },
    /// A message with no bytes at all: an empty file, empty stdin, or two
    /// mbox separators with nothing between them.
    #[error("empty message: {id}")]
    EmptyMessage {
        /// The empty message.
        id: MessageId,
    },
}

impl Error {
    /// The path the error is about; `None` for stdin.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Io { at, .. } => at.path(),
            Self::NotAMailbox { path, .. } => Some(path),
            Self::EmptyMessage { id } => id.path(),
        }
    }

    fn io(at: MessageId, error: io::Error) -> Self {
        Self::Io { at, error }
    }

    fn io_path(path: &Path, error: io::Error) -> Self {
        Self::Io {
            at: MessageId::Path(path.to_path_buf()),
            error,
        }
    }
}

fn describe_io(at: &MessageId, error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => format!("no such file or directory: {at}"),
        io::ErrorKind::PermissionDenied => format!("permission denied: {at}"),
        io::ErrorKind::IsADirectory => format!("is a directory: {at}"),
        _ => format!("{at}: {}", crate::fsutil::words(error)),
    }
}

/// Results of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Detect the kind of mailbox at `path`.
///
/// - `-` is [`MailboxKind::Stdin`];
/// - a directory with a `cur/` or `new/` subdirectory is a
///   [`MailboxKind::Maildir`], any other directory a [`MailboxKind::Dir`];
/// - a file whose first five bytes are `From ` is a [`MailboxKind::Mbox`]
///   if it holds more than one message, else a [`MailboxKind::File`] (one
///   message after an envelope line; finding out reads that message),
///   except in the `cur/` or `new/` of a whole Maildir (`cur/`, `new/` and
///   `tmp/`), where it is the one message the Maildir reader reads; any
///   other non-empty file is a [`MailboxKind::File`].
///
/// Symlinks are followed. An empty file is an mbox with nothing in it (what
/// a mail client leaves of a folder emptied: a nightly training run over
/// `~/mail/Junk` must not fail the day it is empty), as it is in a
/// directory tree; a command that takes one message says there is none.
/// Anything that is neither a regular file nor a directory (a FIFO, a device)
/// is an error too, since sniffing it would consume its data; [`open_as`]
/// reads those as [`MailboxKind::File`] or [`MailboxKind::Mbox`].
pub fn detect(path: &Path) -> Result<MailboxKind> {
    if path == Path::new("-") {
        return Ok(MailboxKind::Stdin);
    }
    let meta = fs::metadata(path).map_err(|e| Error::io_path(path, e))?;
    if meta.is_dir() {
        return Ok(if walk::is_maildir(path) {
            MailboxKind::Maildir
        } else {
            MailboxKind::Dir
        });
    }
    if !meta.is_file() {
        return Err(Error::NotAMailbox {
            path: path.to_path_buf(),
            reason: "not a regular file or directory",
        });
    }
    let mut file = File::open(path).map_err(|e| Error::io_path(path, e))?;
    let prefix = read_prefix(&mut file).map_err(|e| Error::io_path(path, e))?;
    if prefix.is_empty() {
        Ok(MailboxKind::Mbox)
    } else if prefix == *b"From " {
        drop(file);
        if in_maildir(path) {
            return Ok(MailboxKind::File);
        }
        match sniff(path, MboxEscaping::default(), false)? {
            Sniffed::Mbox(..) => Ok(MailboxKind::Mbox),
            Sniffed::Message(_) => Ok(MailboxKind::File),
            // Emptied since.
            Sniffed::Empty => Ok(MailboxKind::Mbox),
        }
    } else {
        Ok(MailboxKind::File)
    }
}

/// Whether `path` is a message file of a Maildir (in the `cur/` or `new/`
/// of a directory that has all of `cur/`, `new/` and `tmp/`, so that an
/// archive of mbox files in a folder called `new` is not one): one
/// message, whatever its first line, as the Maildir reader reads it, so
/// that the same file given by its path or by its Maildir is the same
/// message.
fn in_maildir(path: &Path) -> bool {
    let Some(parent) = path.parent() else {
        return false;
    };
    let maildir = match parent.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    matches!(
        parent.file_name().and_then(|n| n.to_str()),
        Some("cur" | "new")
    ) && walk::is_whole_maildir(maildir)
        && fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Open `path` (or `-` for stdin), detecting its kind with [`detect`], and
/// stream its messages.
///
/// Returns an error only if the path itself cannot be opened or detected;
/// failures of single messages (and of subfolders) come out as `Err` items.
pub fn open(path: &Path, opts: &Options) -> Result<Messages> {
    if path != Path::new("-") && in_maildir(path) {
        // As the Maildir reader reads it: one message, verbatim.
        return open_as(path, MailboxKind::File, opts);
    }
    match detect(path)? {
        // Read the way a file in a tree is, so that a message with an
        // envelope line gets the same bytes and id either way.
        MailboxKind::File | MailboxKind::Mbox => {
            Ok(Messages::new(*opts, vec![Task::Sniff(path.to_path_buf())]))
        }
        kind => open_as(path, kind, opts),
    }
}

/// Open `path` as a mailbox of the given kind and stream its messages.
///
/// - [`MailboxKind::Mbox`]: the file must be empty (zero messages) or start
///   with `From `; otherwise "not a mailbox: X (does not start with a "From "
///   line)".
/// - [`MailboxKind::Maildir`], [`MailboxKind::Dir`]: `path` must be a
///   directory.
/// - [`MailboxKind::File`]: `path` must exist and not be a directory; the
///   whole file is one message.
/// - [`MailboxKind::Stdin`]: `path` is ignored; all of stdin is read. If it
///   is clearly an mbox of several messages ([`looks_like_several_messages`])
///   it is split by the [`MailboxKind::Mbox`] rules (ids `-:offset`);
///   otherwise it is one message, kept verbatim (a leading `From ` line
///   included), as a delivery agent passes one on.
pub fn open_as(path: &Path, kind: MailboxKind, opts: &Options) -> Result<Messages> {
    let mut messages = Messages::new(*opts, Vec::new());
    match kind {
        MailboxKind::Stdin => messages.tasks.push(Task::Stdin),
        MailboxKind::File => {
            let meta = fs::metadata(path).map_err(|e| Error::io_path(path, e))?;
            if meta.is_dir() {
                return Err(Error::io_path(path, io::ErrorKind::IsADirectory.into()));
            }
            messages.tasks.push(Task::Named(path.to_path_buf()));
        }
        MailboxKind::Mbox => {
            let file = File::open(path).map_err(|e| Error::io_path(path, e))?;
            let length = if file.metadata().is_ok_and(|m| m.is_file()) {
                mbox::settled_length(&file, path).map_err(|e| Error::io_path(path, e))?
            } else {
                u64::MAX
            };
            messages.mbox = Some(MboxReader::new(
                BufReader::new(file.take(length)),
                path,
                opts.escaping,
            )?);
        }
        MailboxKind::Maildir | MailboxKind::Dir => {
            let meta = fs::metadata(path).map_err(|e| Error::io_path(path, e))?;
            if !meta.is_dir() {
                return Err(Error::NotAMailbox {
                    path: path.to_path_buf(),
                    reason: "not a directory",
                });
            }
            let dir = path.to_path_buf();
            messages.tasks.push(if kind == MailboxKind::Maildir {
                Task::Maildir(dir)
            } else {
                Task::Dir(dir)
            });
        }
    }
    Ok(messages)
}

/// Open several paths, in order, as one stream of messages.
///
/// Each path is detected and opened when the previous one is exhausted; a path
/// that cannot be opened comes out as one `Err` item and the others continue.
/// The same message reached through two of the paths comes out twice.
pub(crate) fn open_all(
    paths: &[PathBuf],
    opts: &Options,
) -> impl Iterator<Item = Result<RawMessage>> + Send + use<> {
    Messages::new(*opts, paths.iter().cloned().map(Task::Open).collect())
}

/// A stream of messages from one or more mailboxes; see [`open`].
///
/// `Send`, so a consumer can spread the work over threads (e.g. with rayon's
/// `par_bridge()`). Directories are listed lazily, one at a time, when the
/// stream reaches them. Messages come out in a fixed order: a Maildir's `cur/`
/// then `new/`, each sorted by file name, then its subfolders sorted by name;
/// a directory tree in path order, depth first; an mbox in file order.
pub struct Messages {
    /// Work still to do; the next task is at the end.
    tasks: Vec<Task>,
    /// Messages already read, handed out before anything else.
    pending: std::collections::VecDeque<Result<RawMessage>>,
    /// The mbox being read, if any; drained (after `pending`) before the
    /// next task.
    mbox: Option<MboxReader<BufReader<io::Take<File>>>>,
    opts: Options,
    /// The directories already listed under the current root, by device
    /// and inode (links followed), so that directory symlinks are followed
    /// without looping.
    visited: HashSet<(u64, u64)>,
}

/// One step of work for [`Messages`].
enum Task {
    /// Detect and open a path given by the caller ([`open_all`]).
    Open(PathBuf),
    /// A file that is one message, whatever its first bytes: found in a
    /// Maildir, so read only if it is a regular file when opened (one
    /// swapped for a FIFO since the listing is refused, not waited on).
    File(PathBuf),
    /// A file the caller named as one message: read whatever it is (a
    /// FIFO, `/dev/stdin`).
    Named(PathBuf),
    /// A file in a directory tree: an mbox if it starts with `From `,
    /// otherwise one message.
    Sniff(PathBuf),
    /// A Maildir to list.
    Maildir(PathBuf),
    /// A plain directory to list.
    Dir(PathBuf),
    /// Standard input.
    Stdin,
    /// An error found while listing, reported in its place in the order.
    Fail(Error),
}

impl Messages {
    fn new(opts: Options, mut tasks: Vec<Task>) -> Self {
        tasks.reverse();
        Self {
            tasks,
            pending: Default::default(),
            mbox: None,
            opts,
            visited: HashSet::new(),
        }
    }

    /// Queue `children` so that they come next, in their order.
    fn push_front(&mut self, children: Vec<Task>) {
        self.tasks.extend(children.into_iter().rev());
    }

    /// Note `dir` as listed; `false` if it was listed before (a symlink loop
    /// or a second way to the same directory).
    fn first_visit(&mut self, dir: &Path) -> Result<bool> {
        // By identity, not by canonical path: working that out walks every
        // directory up to the root, which grows with the cube of the depth
        // over a deep tree.
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(dir).map_err(|e| Error::io_path(dir, e))?;
        Ok(self.visited.insert((meta.dev(), meta.ino())))
    }

    /// List a Maildir or a plain directory and queue what it holds.
    fn list(&mut self, dir: &Path, kind: MailboxKind) -> Option<Result<RawMessage>> {
        match self.first_visit(dir) {
            Err(e) => return Some(Err(e)),
            Ok(false) => return None,
            Ok(true) => {}
        }
        let children = if kind == MailboxKind::Maildir {
            walk::list_maildir(dir, self.opts.recursive)
        } else {
            walk::list_dir(dir)
        };
        self.push_front(children);
        None
    }

    /// Run one task; `Some` if it produced an item.
    fn run(&mut self, task: Task) -> Option<Result<RawMessage>> {
        match task {
            Task::Open(path) => {
                self.visited.clear();
                match open(&path, &self.opts) {
                    Ok(opened) => {
                        // Only reached once the previous mbox is drained.
                        debug_assert!(self.mbox.is_none() && self.pending.is_empty());
                        self.mbox = opened.mbox;
                        self.pending = opened.pending;
                        // Both are stacks with the next task last.
                        self.tasks.extend(opened.tasks);
                        None
                    }
                    Err(e) => Some(Err(e)),
                }
            }
            Task::File(path) => Some(read_file(&path, true)),
            Task::Named(path) => Some(read_file(&path, false)),
            Task::Sniff(path) => match sniff(&path, self.opts.escaping, true) {
                Ok(Sniffed::Mbox(reader, first)) => {
                    self.mbox = Some(reader);
                    Some(first)
                }
                Ok(Sniffed::Message(message)) => Some(Ok(message)),
                // An empty file is a folder with nothing in it (what a mail
                // client leaves of an mbox emptied): no message, and
                // nothing wrong.
                Ok(Sniffed::Empty) => None,
                Err(e) => Some(Err(e)),
            },
            Task::Maildir(dir) => self.list(&dir, MailboxKind::Maildir),
            Task::Dir(dir) => self.list(&dir, MailboxKind::Dir),
            Task::Stdin => match read_stdin(self.opts.escaping) {
                Ok(mut messages) => {
                    let first = messages.pop_front();
                    self.pending = messages;
                    first
                }
                Err(e) => Some(Err(e)),
            },
            Task::Fail(e) => Some(Err(e)),
        }
    }
}

impl Iterator for Messages {
    type Item = Result<RawMessage>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if let Some(reader) = &mut self.mbox {
                match reader.next() {
                    Some(item) => return Some(item),
                    None => self.mbox = None,
                }
            }
            let task = self.tasks.pop()?;
            if let Some(item) = self.run(task) {
                return Some(item);
            }
        }
    }
}

impl FusedIterator for Messages {}

impl fmt::Debug for Messages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Messages")
            .field("pending_tasks", &self.tasks.len())
            .field("reading_mbox", &self.mbox.is_some())
            .field("opts", &self.opts)
            .finish()
    }
}

/// Read up to the first five bytes of `reader` (fewer only at end of file).
fn read_prefix(reader: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut prefix = Vec::with_capacity(5);
    reader.take(5).read_to_end(&mut prefix)?;
    Ok(prefix)
}

fn non_empty(id: MessageId, bytes: Vec<u8>) -> Result<RawMessage> {
    if bytes.is_empty() {
        Err(Error::EmptyMessage { id })
    } else {
        Ok(RawMessage { id, bytes })
    }
}

/// Reads the message file `path`; `regular`: only if it is a regular
/// file, opened without blocking.
fn read_file(path: &Path, regular: bool) -> Result<RawMessage> {
    let bytes = if regular {
        let mut bytes = Vec::new();
        crate::fsutil::open_regular(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map(|_| bytes)
    } else {
        fs::read(path)
    };
    let bytes = bytes.map_err(|e| Error::io_path(path, e))?;
    non_empty(MessageId::Path(path.to_path_buf()), bytes)
}

/// Reads all of stdin: one message, or each message of an mbox of several.
fn read_stdin(escaping: MboxEscaping) -> Result<std::collections::VecDeque<Result<RawMessage>>> {
    let mut bytes = Vec::new();
    io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(MessageId::Stdin, e))?;
    Ok(split_input(bytes, escaping))
}

/// `bytes` as one message (verbatim) or, when
/// [`looks_like_several_messages`], as the messages of an mbox, with
/// [`MessageId::StdinMbox`] ids. The messages are cut only at separators
/// that meet that function's three signs, so a body line starting with
/// "From " stays in its message; each message is then read as in an mbox
/// file (separator line and the blank line before the next left out,
/// escaping undone).
fn split_input(
    bytes: Vec<u8>,
    escaping: MboxEscaping,
) -> std::collections::VecDeque<Result<RawMessage>> {
    let starts = separators(&bytes);
    if starts.len() < 2 {
        return [non_empty(MessageId::Stdin, bytes)].into();
    }
    let mut out = std::collections::VecDeque::with_capacity(starts.len());
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(bytes.len());
        let id = MessageId::StdinMbox {
            offset: start as u64,
        };
        let chunk = &bytes[start..end];
        let body_start = memchr::memchr(b'\n', chunk).map_or(chunk.len(), |p| p + 1);
        let mut message = Vec::with_capacity(chunk.len() - body_start);
        let mut last_blank = 0;
        for line in chunk[body_start..].split_inclusive(|&b| b == b'\n') {
            let from = usize::from(mbox::is_escaped(line, escaping));
            message.extend_from_slice(&line[from..]);
            last_blank = if line == b"\n" || line == b"\r\n" {
                line.len()
            } else {
                0
            };
        }
        message.truncate(message.len() - last_blank);
        out.push_back(non_empty(id, message));
    }
    out
}

/// Byte offsets of the separator lines of `input` by the rule of
/// [`looks_like_several_messages`] (the first line included, if it starts
/// with `From `). Only the places where a line starting `From ` follows a
/// blank line are looked at closely, found by a search for "\nFrom ", so
/// a long message read from standard input costs one vector search.
fn separators(input: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    if !input.starts_with(b"From ") {
        return starts;
    }
    starts.push(0);
    let first_len = memchr::memchr(b'\n', input).map_or(input.len(), |p| p + 1);
    let line_end = |start: usize| {
        memchr::memchr(b'\n', &input[start..]).map_or(input.len(), |p| start + p + 1)
    };
    let finder = memchr::memmem::Finder::new(b"\nFrom ");
    let mut at = first_len;
    while let Some(found) = input.get(at..).and_then(|rest| finder.find(rest)) {
        // The `From ` line starts after the newline found, at or after the
        // second line, so the line before it is not the first, which
        // starts `From `: it is blank if it is all a line ending.
        let start = at + found + 1;
        at = start;
        if !matches!(input[..start - 1], [.., b'\n'] | [.., b'\n', b'\r']) {
            continue;
        }
        let end = line_end(start);
        if mbox::looks_like_separator(&input[start + 5..end])
            && is_header_like(&input[end..line_end(end)])
        {
            starts.push(start);
        }
    }
    starts
}

/// Whether `input` (a stream said to hold one message, such as standard
/// input) is clearly an mbox of several messages: it starts with a `From `
/// line, and a later line is a separator by all three signs at once: it
/// follows a blank line, has the shape `From sender … H:MM …`, and the line
/// after it looks like a header field (`Name: value`, the name printable
/// ASCII without spaces).
///
/// A delivery agent hands a program one message with its envelope line and
/// an unescaped body, in which a paragraph may well start with "From "; the
/// three signs together keep such a body from passing for a second message,
/// while every mbox a mail program writes meets them.
///
/// ```
/// use bayesmail::mailbox::looks_like_several_messages;
/// let one = b"From a@b Thu Jan  1 00:00:00 1970\nSubject: x\n\nFrom here on, 10:30.\n";
/// assert!(!looks_like_several_messages(one));
/// let two = b"From a@b Thu Jan  1 00:00:00 1970\nSubject: x\n\nbody\n\nFrom c@d Thu Jan  1 00:00:00 1970\nSubject: y\n\nbody\n";
/// assert!(looks_like_several_messages(two));
/// ```
pub fn looks_like_several_messages(input: &[u8]) -> bool {
    separators(input).len() > 1
}

/// Whether `line` looks like the first line of a header field: a non-empty
/// name of printable ASCII other than space and colon, then a colon.
fn is_header_like(line: &[u8]) -> bool {
    let name_len = line
        .iter()
        .position(|&b| !(b'!'..=b'~').contains(&b) || b == b':')
        .unwrap_or(line.len());
    name_len > 0 && line.get(name_len) == Some(&b':')
}

enum Sniffed {
    /// An mbox of more than one message: the first one, and the reader
    /// positioned at the second.
    Mbox(MboxReader<BufReader<io::Take<File>>>, Result<RawMessage>),
    Message(RawMessage),
    /// An empty file: an mbox whose last message was deleted.
    Empty,
}

/// Open a file found in a directory tree (or named on its own) and decide
/// whether it is an mbox or a single message: a file starting with `From `
/// that holds one message is that message, under its plain path.
/// `settled`: an mbox is read as far as it was once no mail program was
/// changing it ([`mbox::settled_length`]); else as it is (to tell its
/// kind).
fn sniff(path: &Path, escaping: MboxEscaping, settled: bool) -> Result<Sniffed> {
    let fail = |e| Error::io_path(path, e);
    // Without blocking: a FIFO swapped in since the listing is refused.
    let mut file = crate::fsutil::open_regular(path).map_err(fail)?;
    let mut bytes = read_prefix(&mut file).map_err(fail)?;
    if settled && bytes.len() < 5 && !bytes.is_empty() && b"From ".starts_with(&bytes) {
        // The first message of an mbox being delivered, its envelope line
        // not whole yet: read once the delivery is done.
        mbox::settled_length(&file, path).map_err(fail)?;
        io::Seek::rewind(&mut file).map_err(fail)?;
        bytes = read_prefix(&mut file).map_err(fail)?;
    }
    if bytes.is_empty() {
        return Ok(Sniffed::Empty);
    }
    if bytes == *b"From " {
        let length = if settled {
            mbox::settled_length(&file, path).map_err(fail)?
        } else {
            u64::MAX
        };
        // The reader wants the whole file, separator line included; chaining
        // the prefix back in front avoids needing a seekable file.
        let mut reader = BufReader::new(file.take(length.saturating_sub(5)));
        let prefix_len = bytes.len();
        let mut first_line = bytes;
        io::BufRead::read_until(&mut reader, b'\n', &mut first_line).map_err(fail)?;
        debug_assert!(first_line.len() >= prefix_len);
        let mut reader = MboxReader::with_first_line(reader, path, escaping, first_line)?;
        let as_file = |e: Error| match e {
            Error::EmptyMessage { .. } => Error::EmptyMessage {
                id: MessageId::Path(path.to_path_buf()),
            },
            Error::Io { error, .. } => Error::io_path(path, error),
            e => e,
        };
        let first = match reader.next() {
            Some(first) => first,
            None => {
                return Err(as_file(Error::EmptyMessage {
                    id: MessageId::Stdin,
                }));
            }
        };
        if reader.has_more() {
            return Ok(Sniffed::Mbox(reader, first));
        }
        return first.map_err(as_file).map(|m| {
            Sniffed::Message(RawMessage {
                id: MessageId::Path(path.to_path_buf()),
                bytes: m.bytes,
            })
        });
    }
    file.read_to_end(&mut bytes).map_err(fail)?;
    non_empty(MessageId::Path(path.to_path_buf()), bytes).map(Sniffed::Message)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;

    /// [`separators`] as first written: line by line, the rule read off
    /// directly.
    fn separators_by_lines(input: &[u8]) -> Vec<usize> {
        let mut starts = Vec::new();
        if !input.starts_with(b"From ") {
            return starts;
        }
        starts.push(0);
        let first_len = input
            .iter()
            .position(|&b| b == b'\n')
            .map_or(input.len(), |p| p + 1);
        let mut pos = first_len;
        let mut lines = input[first_len..]
            .split_inclusive(|&b| b == b'\n')
            .peekable();
        let mut after_blank = false;
        while let Some(line) = lines.next() {
            if after_blank
                && line.starts_with(b"From ")
                && mbox::looks_like_separator(&line[5..])
                && lines.peek().is_some_and(|next| is_header_like(next))
            {
                starts.push(pos);
            }
            after_blank = line == b"\n" || line == b"\r\n";
            pos += line.len();
        }
        starts
    }

    proptest::proptest! {
        /// The separators found by searching are those the line-by-line
        /// rule finds, on input built from the pieces that matter: `From `
        /// lines good and bad, blank lines of both endings, header-like
        /// lines and text.
        #[test]
        fn separators_are_found_as_line_by_line(
            first in 0usize..4,
            pieces in proptest::collection::vec(0usize..SEPARATOR_PIECES.len(), 0..24),
        ) {
            // Most inputs start as an mbox does, from one of the `From `
            // pieces.
            let input: Vec<u8> = std::iter::once(first)
                .chain(pieces)
                .flat_map(|p| SEPARATOR_PIECES[p].bytes())
                .collect();
            proptest::prop_assert_eq!(separators(&input), separators_by_lines(&input));
        }
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// The same on byte soup: the pieces above mixed with runs of the
        /// bytes that matter (line endings, `From `'s letters, ':'), so
        /// that candidates overlap, lines end bare or not at all, and
        /// "\nFrom " follows "\r", "\r\n" or the first line.
        #[test]
        fn separators_are_found_as_line_by_line_in_byte_soup(
            mbox in proptest::prelude::any::<bool>(),
            pieces in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(SEPARATOR_PIECES).prop_map(|s| s.as_bytes().to_vec()),
                    proptest::collection::vec(proptest::sample::select(&b"\n\rFrom :aX \t1"[..]), 0..6),
                ],
                0..30,
            ),
        ) {
            let mut input = if mbox {
                b"From a@b Mon Jan  1 10:00:00 2024".to_vec()
            } else {
                Vec::new()
            };
            input.extend(pieces.concat());
            proptest::prop_assert_eq!(separators(&input), separators_by_lines(&input));
        }
    }

    const SEPARATOR_PIECES: &[&str] = &[
        "From a@b Mon Jan  1 10:00:00 2024",
        "From b Thu Jan  1 00:00:00 1970\n",
        "From here on, 10:30.",
        "From ",
        "\n\nFrom c Thu Jan  1 00:00:00 1970\nSubject: y\n",
        "\r\n\r\nFrom d Thu Jan  1 00:00:00 1970\r\n",
        "From",
        "\n",
        "\r\n",
        "\r",
        "\n\n",
        "Subject: x\n",
        "X-A:",
        "not: a header",
        "text",
        " ",
        ":",
    ];

    /// Each item as "relative/path", "relative/path:offset" or "ERR message",
    /// with `root` cut out of paths.
    fn summary(root: &Path, items: impl Iterator<Item = Result<RawMessage>>) -> Vec<String> {
        let root = format!("{}/", root.display());
        items
            .map(|item| match item {
                Ok(m) => m.id.to_string().replace(&root, ""),
                Err(e) => format!("ERR {}", e.to_string().replace(&root, "")),
            })
            .collect()
    }

    fn write(path: &Path, bytes: &[u8]) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }

    fn utf8_path(path: &Path) -> &str {
        path.to_str().unwrap()
    }

    fn mbox_of(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            write_mbox_message(&mut out, None, m).unwrap();
        }
        out
    }

    /// The messages read from the mbox at `path` while a delivery, started
    /// and holding its lock, is finished by `finish` 300 ms later, on a
    /// thread of its own.
    fn read_while_finished(path: &Path, finish: impl FnOnce() + Send + 'static) -> Vec<Vec<u8>> {
        let finishing = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            finish();
        });
        let got = open(path, &Options::default())
            .unwrap()
            .map(|m| m.unwrap().bytes)
            .collect();
        finishing.join().unwrap();
        got
    }

    /// An mbox a delivery holds locked (its `flock`, or its dotlock) while
    /// it appends a message is read once the delivery is done: the last
    /// message whole, never cut where the delivery had got to.
    #[test]
    fn an_mbox_being_delivered_to_is_read_once_the_delivery_is_done() {
        let whole = mbox_of(&[b"Subject: a\n\none\n", b"Subject: b\n\ntwo, all of it\n"]);
        let half = whole.len() - 8;
        for dotlock in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let path = tmp.path().join("inbox");
            fs::write(&path, &whole[..half]).unwrap();
            let lock = tmp.path().join("inbox.lock");
            let delivery = fs::OpenOptions::new().append(true).open(&path).unwrap();
            if dotlock {
                fs::write(&lock, b"").unwrap();
            } else {
                delivery.lock().unwrap();
            }
            let rest = whole[half..].to_vec();
            let got = read_while_finished(&path, move || {
                let mut delivery = delivery;
                std::io::Write::write_all(&mut delivery, &rest).unwrap();
                if dotlock {
                    fs::remove_file(&lock).unwrap();
                }
                // Closing the file lets its lock go.
            });
            assert_eq!(
                got,
                vec![
                    b"Subject: a\n\none\n".to_vec(),
                    b"Subject: b\n\ntwo, all of it\n".to_vec()
                ],
                "dotlock {dotlock}"
            );
        }
    }

    /// An mbox whose first message is being delivered, not even its
    /// envelope line whole yet ("Fr"), is read once the delivery is done,
    /// not as a message of two bytes that is no mail.
    #[test]
    fn an_mbox_whose_first_envelope_line_is_being_written_is_read_once_done() {
        let whole = mbox_of(&[b"Subject: a\n\none\n"]);
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("inbox");
        fs::write(&path, &whole[..2]).unwrap();
        let lock = tmp.path().join("inbox.lock");
        fs::write(&lock, b"").unwrap();
        let rest = whole[2..].to_vec();
        let delivering = path.clone();
        let got = read_while_finished(&path, move || {
            let mut delivery = fs::OpenOptions::new()
                .append(true)
                .open(&delivering)
                .unwrap();
            std::io::Write::write_all(&mut delivery, &rest).unwrap();
            fs::remove_file(&lock).unwrap();
        });
        assert_eq!(got, vec![b"Subject: a\n\none\n".to_vec()]);
    }

    /// A delivery by another process that holds the mbox with an `fcntl`
    /// write lock (Postfix's local, Dovecot and procmail lock so) is
    /// waited for too; the lock is a child's, since a process's own
    /// `fcntl` locks never stand in its way.
    #[test]
    fn an_mbox_another_process_holds_with_fcntl_is_read_once_it_is_done() {
        let whole = mbox_of(&[b"Subject: a\n\none\n", b"Subject: b\n\ntwo, all of it\n"]);
        let half = whole.len() - 8;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("inbox");
        fs::write(&path, &whole[..half]).unwrap();
        let rest = tmp.path().join("rest");
        fs::write(&rest, &whole[half..]).unwrap();
        let held = tmp.path().join("held");
        // Perl is in every Debian system (perl-base): struct flock on
        // Linux x86_64 and arm64 is two shorts, padding, two off_t, a pid.
        let mut child = std::process::Command::new("perl")
            .args([
                "-e",
                r#"use Fcntl; open(my $f, ">>", $ARGV[0]) or die;
                   my $lk = pack("s s x4 q q i x4", F_WRLCK, 0, 0, 0, 0);
                   fcntl($f, F_SETLKW, $lk) or die "lock: $!";
                   open(my $h, ">", $ARGV[2]) or die; close($h);
                   select(undef, undef, undef, 0.4);
                   open(my $r, "<", $ARGV[1]) or die; local $/; my $rest = <$r>;
                   syswrite($f, $rest) or die; close($f);"#,
                utf8_path(&path),
                utf8_path(&rest),
                utf8_path(&held),
            ])
            .spawn()
            .expect("perl runs");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !held.exists() {
            assert!(std::time::Instant::now() < deadline, "perl took no lock");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let got: Vec<_> = open(&path, &Options::default())
            .unwrap()
            .map(|m| m.unwrap().bytes)
            .collect();
        assert!(child.wait().unwrap().success());
        assert_eq!(
            got,
            vec![
                b"Subject: a\n\none\n".to_vec(),
                b"Subject: b\n\ntwo, all of it\n".to_vec()
            ]
        );
    }

    /// A reader holds no lock while it reads, so a reader whose output
    /// waits (`scan … | less`) holds up no delivery: what is appended
    /// after it began is left for the next read. A dotlock a crashed
    /// program left (older than five minutes) is not waited on.
    #[test]
    fn a_reader_holds_up_no_delivery_and_waits_on_no_stale_dotlock() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("inbox");
        fs::write(
            &path,
            mbox_of(&[b"Subject: a\n\none\n", b"Subject: b\n\ntwo\n"]),
        )
        .unwrap();
        let lock = tmp.path().join("inbox.lock");
        fs::write(&lock, b"").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(600);
        fs::File::options()
            .write(true)
            .open(&lock)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let started = std::time::Instant::now();
        let mut reading = open(&path, &Options::default()).unwrap();
        let first = reading.next().unwrap().unwrap();
        assert_eq!(first.bytes, b"Subject: a\n\none\n");
        assert!(
            started.elapsed() < super::mbox::LOCK_WAIT / 2,
            "waited on a stale dotlock"
        );
        // A delivery now: its lock is free, and what it adds is not read.
        let mut delivery = fs::OpenOptions::new().append(true).open(&path).unwrap();
        delivery.try_lock().expect("the reader holds no lock");
        std::io::Write::write_all(&mut delivery, &mbox_of(&[b"Subject: c\n\nthree\n"])).unwrap();
        drop(delivery);
        let rest: Vec<_> = reading.map(|m| m.unwrap().bytes).collect();
        assert_eq!(rest, vec![b"Subject: b\n\ntwo\n".to_vec()]);
        assert_eq!(open(&path, &Options::default()).unwrap().count(), 3);
    }

    /// A Maildir's message file that starts with an envelope line and
    /// quotes one in its body is one message, as the Maildir reads it,
    /// whether it is given by its path or by its Maildir.
    #[test]
    fn a_maildir_file_given_by_its_path_is_one_message_as_the_maildir_reads_it() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp.path().join("Maildir");
        for sub in ["cur", "new", "tmp"] {
            fs::create_dir_all(m.join(sub)).unwrap();
        }
        let bytes = b"From ann@example.org Mon Jan  1 10:00:00 2024\nSubject: a\n\n\
            Quoted:\n\nFrom bob@example.org Tue Jan  2 11:00:00 2024\nSubject: b\n\nhi\n";
        let file = m.join("cur/1:2,S");
        write(&file, bytes);
        assert_eq!(detect(&file).unwrap(), MailboxKind::File);
        let by_path: Vec<RawMessage> = open(&file, &Options::default())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let by_maildir: Vec<RawMessage> = open(&m, &Options::default())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(by_path.len(), 1);
        assert_eq!(by_path[0].bytes, bytes);
        assert_eq!(by_maildir.len(), 1);
        assert_eq!(by_maildir[0].bytes, by_path[0].bytes);
        // The same file outside a Maildir is an mbox of two, in a folder
        // called `new` that is no Maildir's too.
        let loose = tmp.path().join("loose");
        write(&loose, bytes);
        assert_eq!(detect(&loose).unwrap(), MailboxKind::Mbox);
        let archive = tmp.path().join("archive/new/box");
        fs::create_dir_all(archive.parent().unwrap()).unwrap();
        write(&archive, bytes);
        assert_eq!(detect(&archive).unwrap(), MailboxKind::Mbox);
        let split = open(&archive, &Options::default()).unwrap().count();
        assert_eq!(split, 2);
    }

    /// A folder called `tmp` in a tree of saved mail is read (it made the
    /// tree a Maildir, whose `tmp/` is never read, and every message went
    /// unread); an empty file in a tree, an mbox emptied, is no message
    /// and no error.
    #[test]
    fn a_tree_with_a_tmp_folder_is_read_and_an_empty_file_in_it_is_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let saved = tmp.path().join("saved");
        fs::create_dir_all(saved.join("tmp")).unwrap();
        write(&saved.join("tmp/a.eml"), b"Subject: a\n\nx\n");
        write(&saved.join("inbox"), b"");
        let got: Vec<_> = open(&saved, &Options::default()).unwrap().collect();
        assert_eq!(got.len(), 1, "{got:?}");
        let message = got.into_iter().next().unwrap().unwrap();
        assert_eq!(message.id, MessageId::Path(saved.join("tmp/a.eml")));
    }

    /// A message file a listing found, swapped for a FIFO before it is
    /// read, is an error item at once, not a read that waits for ever; so
    /// is a file of a tree.
    #[test]
    fn a_fifo_swapped_in_after_the_listing_is_refused_not_waited_on() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("m");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        for task in [Task::File(fifo.clone()), Task::Sniff(fifo.clone())] {
            // On a thread, so that a read that waits fails the test.
            let (sender, got) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let read: Vec<_> = Messages::new(Options::default(), vec![task])
                    .map(|m| m.map(|_| ()).map_err(|e| e.to_string()))
                    .collect();
                let _ = sender.send(read);
            });
            let got = got
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("the read waited on the FIFO");
            assert_eq!(got.len(), 1);
            let err = got.into_iter().next().unwrap().unwrap_err();
            assert!(err.contains("not a regular file"), "{err}");
        }
    }

    #[test]
    fn detects_each_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join("maildir/new")).unwrap();
        fs::create_dir_all(root.join("only-tmp/tmp")).unwrap();
        fs::create_dir_all(root.join("plain/sub")).unwrap();
        write(
            &root.join("box"),
            &mbox_of(&[b"Subject: a\n", b"Subject: b\n"]),
        );
        write(
            &root.join("one"),
            b"From x Thu Jan  1 00:00:00 1970\nSubject: a\n",
        );
        write(&root.join("msg.eml"), b"Subject: a\n\nFrom me\n");
        write(&root.join("short"), b"Fro");
        write(&root.join("empty"), b"");
        symlink(root.join("maildir"), root.join("link")).unwrap();

        let kind = |name: &str| detect(&root.join(name)).unwrap();
        assert_eq!(detect(Path::new("-")).unwrap(), MailboxKind::Stdin);
        assert_eq!(kind("maildir"), MailboxKind::Maildir);
        assert_eq!(kind("only-tmp"), MailboxKind::Dir);
        assert_eq!(kind("link"), MailboxKind::Maildir);
        assert_eq!(kind("plain"), MailboxKind::Dir);
        assert_eq!(kind("box"), MailboxKind::Mbox);
        // Issue 18, trap 3: one message after an envelope line is a message.
        assert_eq!(kind("one"), MailboxKind::File);
        assert_eq!(kind("msg.eml"), MailboxKind::File);
        assert_eq!(kind("short"), MailboxKind::File);
        // A folder emptied: an mbox with nothing in it.
        assert_eq!(kind("empty"), MailboxKind::Mbox);

        let err = |name: &str| detect(&root.join(name)).unwrap_err().to_string();
        let path = |name: &str| root.join(name).display().to_string();
        assert_eq!(
            err("missing"),
            format!("no such file or directory: {}", path("missing"))
        );
        assert!(matches!(
            detect(Path::new("/dev/null")),
            Err(Error::NotAMailbox {
                reason: "not a regular file or directory",
                ..
            })
        ));
    }

    #[test]
    fn kinds_and_escapings_parse_and_display() {
        for kind in [
            MailboxKind::Maildir,
            MailboxKind::Mbox,
            MailboxKind::Dir,
            MailboxKind::File,
            MailboxKind::Stdin,
        ] {
            assert_eq!(kind.to_string().parse::<MailboxKind>(), Ok(kind));
        }
        assert_eq!("MBOX".parse::<MailboxKind>(), Ok(MailboxKind::Mbox));
        assert!("mh".parse::<MailboxKind>().unwrap_err().contains("'mh'"));
        for escaping in [MboxEscaping::Mboxrd, MboxEscaping::Mboxo] {
            assert_eq!(escaping.to_string().parse::<MboxEscaping>(), Ok(escaping));
        }
        assert!("mboxcl2".parse::<MboxEscaping>().is_err());
        assert_eq!(Options::default().escaping, MboxEscaping::Mboxrd);
        // Issue 18, trap 1: a Maildir++ root means its own cur/ and new/.
        assert!(!Options::default().recursive);
    }

    #[test]
    fn message_ids_display() {
        assert_eq!(MessageId::Path("a/b".into()).to_string(), "a/b");
        let id = MessageId::Mbox {
            path: "a/box".into(),
            offset: 42,
        };
        assert_eq!(id.to_string(), "a/box:42");
        assert_eq!(id.path(), Some(Path::new("a/box")));
        assert_eq!(MessageId::Stdin.to_string(), "-");
        assert_eq!(MessageId::Stdin.path(), None);
    }

    #[test]
    fn maildir_reads_cur_then_new_sorted_skipping_tmp_and_dotfiles_then_subfolders() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp.path();
        write(&m.join("cur/2:2,S"), b"Subject: 2\n");
        write(&m.join("cur/1:2,S"), b"Subject: 1\n");
        write(&m.join("cur/.hidden"), b"Subject: hidden\n");
        write(&m.join("new/3"), b"Subject: 3\n");
        write(&m.join("tmp/4"), b"Subject: being delivered\n");
        write(&m.join(".Sub.Folder/cur/5"), b"Subject: 5\n");
        fs::create_dir_all(m.join(".Sub.Folder/tmp")).unwrap();
        write(&m.join(".Empty/new/.keep"), b"x");
        write(&m.join("nested/new/6"), b"Subject: 6\n");
        write(&m.join("nested/.Inner/cur/7"), b"Subject: 7\n");
        write(&m.join("not-a-maildir/8"), b"Subject: 8\n");
        write(&m.join("dovecot-uidlist"), b"3 V1 N1\n");
        write(&m.join("maildirfolder"), b"");

        let recursive = Options {
            recursive: true,
            ..Options::default()
        };
        let all: Vec<_> = open(m, &recursive).unwrap().collect();
        let bytes: Vec<_> = all
            .iter()
            .map(|r| r.as_ref().unwrap().bytes.clone())
            .collect();
        assert_eq!(bytes[0], b"Subject: 1\n");
        assert_eq!(
            summary(m, all.into_iter()),
            [
                "cur/1:2,S",
                "cur/2:2,S",
                "new/3",
                ".Sub.Folder/cur/5",
                "nested/new/6",
                "nested/.Inner/cur/7",
            ]
        );

        assert_eq!(
            summary(m, open(m, &Options::default()).unwrap()),
            ["cur/1:2,S", "cur/2:2,S", "new/3"]
        );
    }

    #[test]
    fn maildir_message_that_vanishes_or_cannot_be_read_is_an_error_item_then_reading_goes_on() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp.path();
        write(&m.join("cur/1"), b"Subject: 1\n");
        write(&m.join("cur/2"), b"Subject: 2\n");
        symlink(m.join("nowhere"), m.join("cur/3")).unwrap();
        write(&m.join("cur/4"), b"");
        write(&m.join("new/5"), b"Subject: 5\n");
        fs::create_dir_all(m.join("tmp")).unwrap();

        let mut messages = open(m, &Options::default()).unwrap();
        assert_eq!(summary(m, messages.by_ref().take(1)), ["cur/1"]);
        // Moved away (say, to cur/ by another client) after the listing.
        fs::remove_file(m.join("cur/2")).unwrap();
        assert_eq!(
            summary(m, messages),
            [
                "ERR no such file or directory: cur/2",
                "ERR no such file or directory: cur/3",
                "ERR empty message: cur/4",
                "new/5",
            ]
        );
    }

    #[test]
    fn dir_tree_reads_files_nested_mboxes_and_maildirs_in_path_order() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(&d.join("a.eml"), b"Subject: a\n");
        write(&d.join("b/c.eml"), b"Subject: c\n\nFrom me\n");
        let mbox = mbox_of(&[b"Subject: m1\n\nFrom x\n", b"Subject: m2\n"]);
        write(&d.join("b/inbox.mbox"), &mbox);
        write(&d.join(".hidden.eml"), b"Subject: hidden\n");
        write(&d.join(".git/config"), b"[core]\n");
        write(&d.join("m/cur/1"), b"Subject: maildir\n");
        write(&d.join("m/.Sub/new/2"), b"Subject: sub\n");
        write(&d.join("z.eml"), b"Subject: z\n");

        let opts = Options {
            recursive: true,
            ..Options::default()
        };
        assert_eq!(detect(d).unwrap(), MailboxKind::Dir);
        let all: Vec<_> = open(d, &opts).unwrap().collect();
        let second_offset = mbox
            .windows(12)
            .position(|w| w == b"\nFrom MAILER")
            .unwrap()
            + 1;
        let texts: Vec<&[u8]> = all.iter().map(|r| &r.as_ref().unwrap().bytes[..]).collect();
        assert_eq!(
            texts,
            [
                &b"Subject: a\n"[..],
                b"Subject: c\n\nFrom me\n",
                b"Subject: m1\n\nFrom x\n",
                b"Subject: m2\n",
                b"Subject: maildir\n",
                b"Subject: sub\n",
                b"Subject: z\n",
            ]
        );
        assert_eq!(
            summary(d, all.into_iter()),
            [
                "a.eml".to_string(),
                "b/c.eml".into(),
                "b/inbox.mbox:0".into(),
                format!("b/inbox.mbox:{second_offset}"),
                "m/cur/1".into(),
                "m/.Sub/new/2".into(),
                "z.eml".into(),
            ]
        );
    }

    #[test]
    fn dir_tree_with_symlink_loops_and_dangling_links_terminates() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(&d.join("a.eml"), b"Subject: a\n");
        write(&d.join("sub/b.eml"), b"Subject: b\n");
        symlink(d, d.join("sub/loop")).unwrap();
        symlink(d.join("sub"), d.join("again")).unwrap();
        symlink(d.join("gone"), d.join("dangling.eml")).unwrap();
        symlink(d.join("self"), d.join("self")).unwrap();
        assert_eq!(
            summary(d, open(d, &Options::default()).unwrap()),
            [
                "a.eml".to_string(),
                // "again" is "sub" through a link; listed first, so "sub" is
                // not listed again.
                "again/b.eml".into(),
                "ERR no such file or directory: dangling.eml".into(),
                // "Too many levels of symbolic links", in the system's words.
                format!(
                    "ERR self: {}",
                    crate::fsutil::words(&File::open(d.join("self")).unwrap_err())
                ),
            ]
        );
    }

    #[test]
    fn non_utf8_file_names_are_kept_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::from_bytes(b"caf\xe9.eml");
        let path = tmp.path().join(name);
        write(&path, b"Subject: x\n");
        let got: Vec<_> = open(tmp.path(), &Options::default()).unwrap().collect();
        let message = got[0].as_ref().unwrap();
        assert_eq!(message.id, MessageId::Path(path.clone()));
        assert!(message.id.to_string().ends_with("caf\u{fffd}.eml"));
    }

    #[test]
    fn mbox_file_offsets_and_empty_mbox() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("box");
        let first: &[u8] = b"Subject: 1\n\n>From quoted\nFrom a Thu Jan  1 00:00:00 1970\n";
        let mbox = mbox_of(&[first, b"Subject: 2\n"]);
        write(&path, &mbox);
        let got: Vec<_> = open(&path, &Options::default())
            .unwrap()
            .map(|m| m.unwrap())
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].bytes, first);
        for m in &got {
            let MessageId::Mbox { offset, path: p } = &m.id else {
                panic!("{:?}", m.id)
            };
            assert_eq!(p, &path);
            assert!(mbox[*offset as usize..].starts_with(b"From MAILER-DAEMON"));
        }

        let empty = tmp.path().join("empty");
        write(&empty, b"");
        assert_eq!(open(&empty, &Options::default()).unwrap().count(), 0);
        let opts = Options::default();
        assert_eq!(
            open_as(&empty, MailboxKind::Mbox, &opts).unwrap().count(),
            0
        );
        assert_eq!(
            summary(
                tmp.path(),
                open_as(&empty, MailboxKind::File, &opts).unwrap()
            ),
            ["ERR empty message: empty"]
        );
    }

    #[test]
    fn open_as_checks_the_path_fits_the_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("msg");
        write(&file, b"Subject: x\n");
        let opts = Options::default();
        let err = |kind| open_as(&file, kind, &opts).unwrap_err().to_string();
        let shown = file.display();
        assert_eq!(
            err(MailboxKind::Mbox),
            format!("not a mailbox: {shown} (does not start with a \"From \" line)")
        );
        assert_eq!(
            err(MailboxKind::Maildir),
            format!("not a mailbox: {shown} (not a directory)")
        );
        assert_eq!(
            err(MailboxKind::Dir),
            format!("not a mailbox: {shown} (not a directory)")
        );
        let dir_err = open_as(tmp.path(), MailboxKind::File, &opts).unwrap_err();
        assert_eq!(
            dir_err.to_string(),
            format!("is a directory: {}", tmp.path().display())
        );
        assert_eq!(dir_err.path(), Some(tmp.path()));
        // A file starting with "From " read as a single file keeps its bytes.
        let mbox = tmp.path().join("box");
        write(&mbox, b"From x\nSubject: y\n");
        let whole: Vec<_> = open_as(&mbox, MailboxKind::File, &opts).unwrap().collect();
        assert_eq!(whole[0].as_ref().unwrap().bytes, b"From x\nSubject: y\n");
    }

    #[test]
    fn open_all_chains_paths_and_reports_the_bad_one_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(
            &d.join("box"),
            &mbox_of(&[b"Subject: 1\n", b"Subject: 2\n"]),
        );
        write(&d.join("m/new/3"), b"Subject: 3\n");
        write(&d.join("empty"), b"");
        write(&d.join("one.eml"), b"Subject: 4\n");
        let paths: Vec<PathBuf> = ["box", "missing", "m", "empty", "one.eml", "m"]
            .iter()
            .map(|p| d.join(p))
            .collect();
        let got = summary(d, open_all(&paths, &Options::default()));
        assert_eq!(got.len(), 6);
        assert_eq!(got[0], "box:0");
        assert!(got[1].starts_with("box:"));
        assert_eq!(
            got[2..],
            [
                "ERR no such file or directory: missing",
                "m/new/3",
                "one.eml",
                "m/new/3",
            ]
        );
    }

    /// Issue 18, trap 3: a file with one envelope line and one message is
    /// read as that message, under its plain path, wherever it is found;
    /// the envelope line is left out as an mbox reader would.
    #[test]
    fn one_message_after_an_envelope_line_is_a_message_not_an_mbox() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let body: &[u8] = b"Subject: one\n\nFrom the start, 10:30.\n";
        let file = d.join("saved.eml");
        write(&file, &mbox_of(&[body]));
        let expect = vec![RawMessage {
            id: MessageId::Path(file.clone()),
            bytes: body.to_vec(),
        }];
        let got = |path: &Path| -> Vec<RawMessage> {
            open(path, &Options::default())
                .unwrap()
                .map(|m| m.unwrap())
                .collect()
        };
        assert_eq!(got(&file), expect);
        assert_eq!(got(d), expect);
        write(&d.join("empty-after-envelope"), b"From x\n");
        let empty = d.join("empty-after-envelope");
        assert_eq!(
            open(&empty, &Options::default()).unwrap_err().to_string(),
            format!("empty message: {}", empty.display())
        );
    }

    #[test]
    fn several_messages_on_one_stream_are_told_apart_from_one() {
        let env = "From a@b.example Thu Jan  1 00:00:00 1970\n";
        let one = format!("{env}Subject: x\n\nFrom the desk of Mr. X, 10:30 today:\nhi\n");
        assert!(!looks_like_several_messages(one.as_bytes()));
        let no_header = format!("{one}\n{env}and then more prose\n");
        assert!(!looks_like_several_messages(no_header.as_bytes()));
        let two = format!("{one}\n{env}Subject: y\n\nbody\n");
        assert!(looks_like_several_messages(two.as_bytes()));
        assert!(looks_like_several_messages(
            two.replace('\n', "\r\n").as_bytes()
        ));
        assert!(!looks_like_several_messages(&two.as_bytes()[1..]));
        let messages = split_input(two.clone().into_bytes(), MboxEscaping::Mboxrd);
        let ids: Vec<String> = messages
            .iter()
            .map(|m| m.as_ref().unwrap().id.to_string())
            .collect();
        assert_eq!(ids, ["-:0".to_string(), format!("-:{}", one.len() + 1)]);
        assert_eq!(
            messages[0].as_ref().unwrap().bytes,
            &one.as_bytes()[env.len()..]
        );
        assert_eq!(messages[1].as_ref().unwrap().bytes, b"Subject: y\n\nbody\n");
        let single = split_input(one.clone().into_bytes(), MboxEscaping::Mboxrd);
        assert_eq!(single[0].as_ref().unwrap().bytes, one.as_bytes());
        assert_eq!(single[0].as_ref().unwrap().id, MessageId::Stdin);
    }

    #[test]
    fn streams_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let messages = open_all(&[], &Options::default());
        assert_send(&messages);
        let tmp = tempfile::tempdir().unwrap();
        assert_send(&open(tmp.path(), &Options::default()).unwrap());
        assert_send(&Error::EmptyMessage {
            id: MessageId::Stdin,
        });
    }
}
