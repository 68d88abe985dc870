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
mod mbox;
mod walk;

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufReader, Read};
use std::iter::FusedIterator;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use deliver::{Delivered, Maildir, MoveError};
use mbox::MboxReader;
pub use mbox::write_mbox_message;

/// The kinds of mailbox this module reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MailboxKind {
    /// A Maildir: a directory with `cur/`, `new/` and `tmp/`; one file per
    /// message in `cur/` and `new/`.
    Maildir,
    /// An mbox file: messages one after another, each introduced by a
    /// `From ` separator line.
    ///
    /// The reader goes line by line (a line ends at `\n`; `\r\n` works the
    /// same way) and follows these rules:
    /// - The file must be empty (no messages) or start with `From `.
    /// - A line starting with `From ` is a separator if it is the first line
    ///   of the file, or the line before it is blank (`\n` or `\r\n`), or it
    ///   looks like a separator: `From `, a sender token (no whitespace, right
    ///   after the space), whitespace, then text containing a time of day
    ///   (`H:MM` or `HH:MM`). The last case only rescues files whose writer
    ///   left out the blank line; a well-formed mbox never has an unescaped
    ///   `From ` line in a body.
    /// - A message is the lines after its separator up to the next separator
    ///   or the end of the file, except that one blank line right before the
    ///   next separator, or at the very end of the file, is dropped: writers
    ///   add it, so it is not part of the message. The separator line itself
    ///   is not part of the message either.
    /// - One `>` is removed from escaped `From ` lines, per [`MboxEscaping`].
    /// - A message left with no bytes at all is an [`Error::EmptyMessage`]
    ///   item; a read error is an [`Error::Io`] item and ends the file.
    /// - Each message's id carries the byte offset of its separator line.
    ///
    /// So a last message without a final newline comes back as it is, and
    /// [`write_mbox_message`] output reads back byte for byte.
    Mbox,
    /// A directory tree of message files (`.eml` and the like), walked in
    /// full, dotfiles and dot-directories left out. Maildirs found inside are
    /// read as Maildirs, and files that start with `From ` as mboxes (a
    /// single saved message with an envelope line thus becomes one message
    /// with id `path:0`, its `From ` line left out).
    Dir,
    /// A single file holding one message.
    File,
    /// Standard input, holding one message.
    Stdin,
}

impl MailboxKind {
    /// The lower-case name used on the command line and in [`fmt::Display`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Maildir => "maildir",
            Self::Mbox => "mbox",
            Self::Dir => "dir",
            Self::File => "file",
            Self::Stdin => "stdin",
        }
    }
}

impl fmt::Display for MailboxKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MailboxKind {
    type Err = String;

    /// Parses `maildir`, `mbox`, `dir`, `file` or `stdin` (any case).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            Self::Maildir,
            Self::Mbox,
            Self::Dir,
            Self::File,
            Self::Stdin,
        ]
        .into_iter()
        .find(|kind| kind.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            format!("unknown mailbox kind '{s}' (expected maildir, mbox, dir, file or stdin)")
        })
    }
}

/// How body lines that begin with `From ` are escaped in an mbox file.
///
/// Writers put a `>` in front of such lines so that readers do not take them
/// for message separators. The two common conventions differ in whether
/// already-quoted lines are escaped again, and so in what the reader has to
/// undo. The same file read both ways gives different bytes only on lines that
/// start with two or more `>` before `From `.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MboxEscaping {
    /// mboxrd (the default, and what [`write_mbox_message`] writes): writers
    /// escape every line matching `^>*From `, so the reader strips one `>`
    /// from every line matching `^>+From `. Reversible: round-trips exactly.
    #[default]
    Mboxrd,
    /// mboxo: writers escape only lines matching `^From `, so the reader
    /// strips the `>` only from lines matching `^>From ` (exactly one `>`);
    /// `>>From ` stays as it is. Lossy: a body line that really began with
    /// `>From ` comes back as `From `.
    Mboxo,
}

impl MboxEscaping {
    /// The lower-case name used on the command line and in [`fmt::Display`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Mboxrd => "mboxrd",
            Self::Mboxo => "mboxo",
        }
    }
}

impl fmt::Display for MboxEscaping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MboxEscaping {
    type Err = String;

    /// Parses `mboxrd` or `mboxo` (any case).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [Self::Mboxrd, Self::Mboxo]
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown mbox escaping '{s}' (expected mboxrd or mboxo)"))
    }
}

/// How mailboxes are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Options {
    /// Descend into Maildir subfolders: Maildir++ folders (`.Name` directories
    /// holding `cur/` or `new/`) and nested Maildirs (plain subdirectories
    /// holding `cur/` or `new/`). Default `true`. Directory trees
    /// ([`MailboxKind::Dir`]) are always walked in full.
    pub recursive: bool,
    /// The mbox escaping convention to undo. Default [`MboxEscaping::Mboxrd`].
    pub escaping: MboxEscaping,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            recursive: true,
            escaping: MboxEscaping::default(),
        }
    }
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
}

impl MessageId {
    /// The file the message lives in; `None` for stdin.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Path(path) | Self::Mbox { path, .. } => Some(path),
            Self::Stdin => None,
        }
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Path(path) => write!(f, "{}", path.display()),
            Self::Mbox { path, offset } => write!(f, "{}:{offset}", path.display()),
            Self::Stdin => f.write_str("-"),
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
        /// Why, e.g. "empty file".
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
        _ => format!("{at}: {error}"),
    }
}

/// Results of this module.
pub type Result<T> = std::result::Result<T, Error>;

/// Detect the kind of mailbox at `path`.
///
/// - `-` is [`MailboxKind::Stdin`];
/// - a directory with a `cur/`, `new/` or `tmp/` subdirectory is a
///   [`MailboxKind::Maildir`], any other directory a [`MailboxKind::Dir`];
/// - a file whose first five bytes are `From ` is a [`MailboxKind::Mbox`],
///   any other non-empty file a [`MailboxKind::File`].
///
/// Symlinks are followed. An empty file is an error ("not a mailbox: X (empty
/// file)"): it could be an empty mbox or an empty message, and reading it as
/// either would silently give nothing; use [`open_as`] to say which.
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
        Err(Error::NotAMailbox {
            path: path.to_path_buf(),
            reason: "empty file",
        })
    } else if prefix == *b"From " {
        Ok(MailboxKind::Mbox)
    } else {
        Ok(MailboxKind::File)
    }
}

/// Open `path` (or `-` for stdin), detecting its kind with [`detect`], and
/// stream its messages.
///
/// Returns an error only if the path itself cannot be opened or detected;
/// failures of single messages (and of subfolders) come out as `Err` items.
pub fn open(path: &Path, opts: &Options) -> Result<Messages> {
    open_as(path, detect(path)?, opts)
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
/// - [`MailboxKind::Stdin`]: `path` is ignored; all of stdin is one message,
///   kept verbatim (a leading `From ` line included).
pub fn open_as(path: &Path, kind: MailboxKind, opts: &Options) -> Result<Messages> {
    let mut messages = Messages::new(*opts, Vec::new());
    match kind {
        MailboxKind::Stdin => messages.tasks.push(Task::Stdin),
        MailboxKind::File => {
            let meta = fs::metadata(path).map_err(|e| Error::io_path(path, e))?;
            if meta.is_dir() {
                return Err(Error::io_path(path, io::ErrorKind::IsADirectory.into()));
            }
            messages.tasks.push(Task::File(path.to_path_buf()));
        }
        MailboxKind::Mbox => {
            let file = File::open(path).map_err(|e| Error::io_path(path, e))?;
            messages.mbox = Some(MboxReader::new(BufReader::new(file), path, opts.escaping)?);
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
pub fn open_all(
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
    /// The mbox being read, if any; drained before the next task.
    mbox: Option<MboxReader<BufReader<File>>>,
    opts: Options,
    /// Canonical paths of the directories already listed under the current
    /// root, so that directory symlinks are followed without looping.
    visited: HashSet<PathBuf>,
}

/// One step of work for [`Messages`].
enum Task {
    /// Detect and open a path given by the caller ([`open_all`]).
    Open(PathBuf),
    /// A file that is one message, whatever its first bytes.
    File(PathBuf),
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
        let canonical = fs::canonicalize(dir).map_err(|e| Error::io_path(dir, e))?;
        Ok(self.visited.insert(canonical))
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
                        debug_assert!(self.mbox.is_none());
                        self.mbox = opened.mbox;
                        // Both are stacks with the next task last.
                        self.tasks.extend(opened.tasks);
                        None
                    }
                    Err(e) => Some(Err(e)),
                }
            }
            Task::File(path) => Some(read_file(&path)),
            Task::Sniff(path) => match sniff(&path, self.opts.escaping) {
                Ok(Sniffed::Mbox(reader)) => {
                    self.mbox = Some(reader);
                    None
                }
                Ok(Sniffed::Message(message)) => Some(Ok(message)),
                Err(e) => Some(Err(e)),
            },
            Task::Maildir(dir) => self.list(&dir, MailboxKind::Maildir),
            Task::Dir(dir) => self.list(&dir, MailboxKind::Dir),
            Task::Stdin => Some(read_stdin()),
            Task::Fail(e) => Some(Err(e)),
        }
    }
}

impl Iterator for Messages {
    type Item = Result<RawMessage>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
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

fn read_file(path: &Path) -> Result<RawMessage> {
    let bytes = fs::read(path).map_err(|e| Error::io_path(path, e))?;
    non_empty(MessageId::Path(path.to_path_buf()), bytes)
}

fn read_stdin() -> Result<RawMessage> {
    let mut bytes = Vec::new();
    io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(MessageId::Stdin, e))?;
    non_empty(MessageId::Stdin, bytes)
}

enum Sniffed {
    Mbox(MboxReader<BufReader<File>>),
    Message(RawMessage),
}

/// Open a file found in a directory tree and decide by its first bytes whether
/// it is an mbox or a single message.
fn sniff(path: &Path, escaping: MboxEscaping) -> Result<Sniffed> {
    let fail = |e| Error::io_path(path, e);
    let mut file = File::open(path).map_err(fail)?;
    let mut bytes = read_prefix(&mut file).map_err(fail)?;
    if bytes == *b"From " {
        // The reader wants the whole file, separator line included; chaining
        // the prefix back in front avoids needing a seekable file.
        let mut reader = BufReader::new(file);
        let prefix_len = bytes.len();
        let mut first_line = bytes;
        io::BufRead::read_until(&mut reader, b'\n', &mut first_line).map_err(fail)?;
        debug_assert!(first_line.len() >= prefix_len);
        return MboxReader::with_first_line(reader, path, escaping, first_line).map(Sniffed::Mbox);
    }
    file.read_to_end(&mut bytes).map_err(fail)?;
    non_empty(MessageId::Path(path.to_path_buf()), bytes).map(Sniffed::Message)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;

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

    fn mbox_of(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            write_mbox_message(&mut out, None, m).unwrap();
        }
        out
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
            b"From x Thu Jan  1 00:00:00 1970\nSubject: a\n",
        );
        write(&root.join("msg.eml"), b"Subject: a\n\nFrom me\n");
        write(&root.join("short"), b"Fro");
        write(&root.join("empty"), b"");
        symlink(root.join("maildir"), root.join("link")).unwrap();

        let kind = |name: &str| detect(&root.join(name)).unwrap();
        assert_eq!(detect(Path::new("-")).unwrap(), MailboxKind::Stdin);
        assert_eq!(kind("maildir"), MailboxKind::Maildir);
        assert_eq!(kind("only-tmp"), MailboxKind::Maildir);
        assert_eq!(kind("link"), MailboxKind::Maildir);
        assert_eq!(kind("plain"), MailboxKind::Dir);
        assert_eq!(kind("box"), MailboxKind::Mbox);
        assert_eq!(kind("msg.eml"), MailboxKind::File);
        assert_eq!(kind("short"), MailboxKind::File);

        let err = |name: &str| detect(&root.join(name)).unwrap_err().to_string();
        let path = |name: &str| root.join(name).display().to_string();
        assert_eq!(
            err("empty"),
            format!("not a mailbox: {} (empty file)", path("empty"))
        );
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
        assert!(Options::default().recursive);
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

        let all: Vec<_> = open(m, &Options::default()).unwrap().collect();
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

        let flat = Options {
            recursive: false,
            ..Options::default()
        };
        assert_eq!(
            summary(m, open(m, &flat).unwrap()),
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

        let opts = Options::default();
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
                format!("ERR self: {}", File::open(d.join("self")).unwrap_err()),
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
        assert!(open(&empty, &Options::default()).is_err());
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
        assert_eq!(got.len(), 7);
        assert_eq!(got[0], "box:0");
        assert!(got[1].starts_with("box:"));
        assert_eq!(
            got[2..],
            [
                "ERR no such file or directory: missing",
                "m/new/3",
                "ERR not a mailbox: empty (empty file)",
                "one.eml",
                "m/new/3",
            ]
        );
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
