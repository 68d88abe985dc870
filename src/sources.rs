//! Reading messages for the engine's calls: mailboxes read in batches with
//! features extracted in parallel (one extractor per rayon worker, results
//! in input order), one message from a file or standard input, and the
//! messages of one file that `learn` and `unlearn` are given.
//!
//! A batch is bounded by bytes as well as by count, so that memory stays a
//! few messages per worker however large the messages are: at most two
//! batches are alive at once (the one being mapped and the one being read
//! ahead), and a batch stops growing once it holds [`BATCH_BYTES_PER_WORKER`]
//! bytes per worker.
//!
//! Nothing here prints: what is passed over is handed to the caller as a
//! [`Skip`], on the caller's thread.

use std::io::Read;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::features::{Extractor, Features};
use crate::mailbox::{self, MessageId, RawMessage};
use crate::message::{self, Identity};

/// Messages parsed in parallel per batch, at most.
pub const BATCH: usize = 256;

/// Message bytes per rayon worker after which a batch stops growing. Small
/// messages fill a batch by count; large ones by bytes, so a batch of
/// multi-megabyte messages holds about one per worker instead of
/// [`BATCH`] of them.
pub const BATCH_BYTES_PER_WORKER: usize = 4 << 20;

/// Why a file is not taken as a message.
pub(crate) const NOT_MAIL: &str = "does not look like mail (it does not start with a header field)";

/// The byte budget of one batch on the current rayon pool.
fn batch_bytes() -> usize {
    BATCH_BYTES_PER_WORKER.saturating_mul(rayon::current_num_threads().max(1))
}

/// What a read passed over, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// Messages that could not be read.
    pub unreadable: usize,
    /// Files (or messages of an mbox, or standard input) that do not look
    /// like mail ([`message::looks_like_mail`]): a picture, a binary, a
    /// README among the messages.
    pub not_mail: usize,
}

impl Skipped {
    /// Everything passed over.
    pub fn total(self) -> usize {
        self.unreadable + self.not_mail
    }
}

/// One message passed over while reading mailboxes.
#[derive(Debug, thiserror::Error)]
pub enum Skip {
    /// It could not be read.
    #[error(transparent)]
    Unreadable(mailbox::Error),
    /// It does not look like mail.
    #[error("{0}: skipped: {NOT_MAIL}")]
    NotMail(MessageId),
}

/// Errors of reading one message or the messages of one file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file or standard input could not be read.
    #[error("reading {}: {}", .path.display(), crate::fsutil::words(.source))]
    Read {
        /// The file, or `-`.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A mailbox could not be opened or a message in it read (the
    /// mailbox's error names the file or message).
    #[error("{source}")]
    Mailbox {
        /// The file given.
        path: PathBuf,
        /// Why.
        source: mailbox::Error,
    },
    /// A directory was given where one message or an mbox file is read.
    #[error("{} is a directory", .0.display())]
    Directory(PathBuf),
    /// The message is empty or only white space.
    #[error("empty message: {0}")]
    Empty(String),
    /// The message does not look like mail.
    #[error("{0}: {NOT_MAIL}")]
    NotMail(String),
    /// One message was asked for and the input is an mbox of several.
    #[error("{0}: holds several messages (an mbox), not one")]
    Several(String),
    /// The message cannot be parsed.
    #[error("parsing {id}: {source}")]
    Parse {
        /// The message.
        id: String,
        /// Why.
        source: message::Error,
    },
    /// The file holds no message.
    #[error("no message in {}", .0.display())]
    NoMessage(PathBuf),
    /// The file grew shorter between two parts of a read, as when a mail
    /// program rewrites a folder (an expunge): what follows is not read.
    #[error(
        "{} grew shorter while it was read (a mail program rewrote it): the rest of it was not read",
        .0.display()
    )]
    Shrank(PathBuf),
}

/// Reads every message under `paths` and applies `map` to each, in
/// parallel (one [`Extractor`] per rayon worker), handing the results to
/// `f` batch by batch in input order. While the workers read the next batch
/// and map this one, this thread hands the batch before it to `f`: `f` is
/// often sequential work, which would otherwise leave the workers idle, and
/// it stays on the caller's thread (so its allocations stay in that
/// thread's arena). Messages that cannot be read and files that do not
/// look like mail ([`message::looks_like_mail`]) are handed to `skip` (on
/// the caller's thread, in order), passed over and counted. After `f`
/// fails, nothing more is handed to it.
pub fn for_each_mapped<T: Send, E>(
    paths: &[PathBuf],
    opts: &mailbox::Options,
    map: &(dyn Fn(&mut Extractor, RawMessage) -> T + Sync),
    skip: &mut dyn FnMut(Skip),
    f: &mut dyn FnMut(Vec<T>) -> Result<(), E>,
) -> Result<Skipped, E> {
    let mut skipped = Skipped::default();
    let budget = batch_bytes();
    let mut messages = mailbox::open_all(paths, opts);
    let mut passed = Vec::new();
    let mut batch = read_batch(&mut messages, &mut passed, budget);
    let mut previous: Option<Vec<T>> = None;
    loop {
        for s in passed.drain(..) {
            match s {
                Skip::Unreadable(_) => skipped.unreadable += 1,
                Skip::NotMail(_) => skipped.not_mail += 1,
            }
            skip(s);
        }
        if batch.is_empty() && previous.is_none() {
            break;
        }
        let mut this: Option<Vec<T>> = None;
        let mut handled = Ok(());
        let mut next = Vec::new();
        rayon::in_place_scope(|scope| {
            // Reading is spawned first: spawned from outside the pool, jobs
            // are taken in order, and a worker finds the map's split halves
            // before it looks for other jobs, so reading spawned second is
            // left until the map is done, with the other worker idle.
            let (messages, passed, next) = (&mut messages, &mut passed, &mut next);
            scope.spawn(move |_| *next = read_batch(messages, passed, budget));
            if !batch.is_empty() {
                let batch = std::mem::take(&mut batch);
                let this = &mut this;
                scope.spawn(move |_| {
                    *this = Some(
                        batch
                            .into_par_iter()
                            .map_init(Extractor::new, map)
                            .collect::<Vec<T>>(),
                    );
                });
            }
            handled = previous.take().map_or(Ok(()), &mut *f);
        });
        handled?;
        previous = this;
        batch = next;
    }
    Ok(skipped)
}

/// The next readable messages, up to [`BATCH`] of them or until they hold
/// `budget` bytes (the message that reaches the budget is the batch's last;
/// a batch always has room for one message, however large); unreadable ones
/// and those that are not mail go to `passed`.
fn read_batch(
    messages: &mut impl Iterator<Item = mailbox::Result<RawMessage>>,
    passed: &mut Vec<Skip>,
    budget: usize,
) -> Vec<RawMessage> {
    let mut batch = Vec::new();
    let mut bytes = 0usize;
    for item in messages.by_ref() {
        match item {
            Ok(raw) if !message::looks_like_mail(&raw.bytes) => {
                passed.push(Skip::NotMail(raw.id));
            }
            Ok(raw) => {
                bytes = bytes.saturating_add(raw.bytes.len());
                batch.push(raw);
                if batch.len() == BATCH || bytes >= budget {
                    break;
                }
            }
            Err(err) => passed.push(Skip::Unreadable(err)),
        }
    }
    batch
}

/// Bytes of the files that reading `paths` with `opts` will go through,
/// for a progress bar: a Maildir's cur/ and new/ (and, with `recursive`,
/// everything under it), a directory tree in full, a file's size; standard
/// input and anything unreadable count 0. Symlinks are not followed.
pub fn planned_bytes(paths: &[PathBuf], opts: &mailbox::Options) -> u64 {
    paths
        .iter()
        .map(|path| match mailbox::detect(path) {
            Ok(mailbox::MailboxKind::Maildir) if !opts.recursive => {
                tree_bytes(&path.join("cur")) + tree_bytes(&path.join("new"))
            }
            Ok(_) => tree_bytes(path),
            Err(_) => 0,
        })
        .sum()
}

/// Bytes of the regular files under `path` (symlinks not followed).
pub(crate) fn tree_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| tree_bytes(&e.path())).sum())
            .unwrap_or(0)
    } else if meta.is_file() {
        meta.len()
    } else {
        0
    }
}

/// Reads one message, verbatim, from a file or, for `-`, standard input.
/// An empty one (nothing but white space) is an error.
pub fn read_one(path: &Path) -> Result<Vec<u8>, Error> {
    let read = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf).map(|_| buf)
    } else {
        std::fs::read(path)
    };
    let bytes = read.map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Empty(path.display().to_string()));
    }
    Ok(bytes)
}

/// Reads one message to judge or explain: [`read_one`], refused if it does
/// not look like mail or is an mbox of several messages (by the rule that
/// reads standard input as several: [`mailbox::looks_like_several_messages`]),
/// which would be judged as one blob that is none of them.
pub fn read_mail(path: &Path) -> Result<Vec<u8>, Error> {
    let raw = read_one(path)?;
    if !message::looks_like_mail(&raw) {
        return Err(Error::NotMail(path.display().to_string()));
    }
    if mailbox::looks_like_several_messages(&raw) {
        return Err(Error::Several(path.display().to_string()));
    }
    Ok(raw)
}

/// One message of a file given to learn or unlearn: where it is, its
/// features and its identity.
#[derive(Debug)]
pub struct FileMessage {
    /// Where it is (the file, `file:offset` in an mbox, `-`).
    pub id: String,
    /// Its features.
    pub features: Features,
    /// Its identity.
    pub identity: Identity,
    /// The message as it was read (what its features and identity were
    /// read from): a learn that finds the database held leaves it for the
    /// writer that holds it.
    pub raw: Vec<u8>,
}

/// A part of a file's messages: those read, and the errors of those that
/// could not be read or parsed.
pub type Part = (Vec<FileMessage>, Vec<Error>);

/// The messages of one file given to learn or unlearn, read a part at a
/// time ([`FileMessages::next_part`]) so that a large mbox is never all in
/// memory. They are read the way a folder's reader reads the same file, so
/// that both compute the same digests: a file holding one message after a
/// `From ` envelope line is that message (the envelope line left out,
/// `>From ` escaping undone), a file holding several (an mbox) is each of
/// them. Standard input is one message taken verbatim, as a delivery agent
/// passes one on, unless it is clearly an mbox of several messages (see
/// [`mailbox::looks_like_several_messages`]); anything else that is not a
/// regular file (a FIFO) is one message.
pub struct FileMessages {
    path: PathBuf,
    raws: std::iter::Peekable<Box<dyn Iterator<Item = mailbox::Result<RawMessage>>>>,
    extractor: Extractor,
    /// Whether a part was handed out already.
    begun: bool,
    /// A regular file's device, inode and length when it was opened.
    opened: Option<(u64, u64, u64)>,
}

/// A regular file's device, inode and length, by its path.
fn file_now(path: &Path) -> Option<(u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    Some((meta.dev(), meta.ino(), meta.len()))
}

impl FileMessages {
    /// Opens `path`; a directory is [`Error::Directory`].
    pub fn open(path: &Path) -> Result<FileMessages, Error> {
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Err(Error::Directory(path.to_path_buf()));
        }
        let regular = path.as_os_str() == "-" || std::fs::metadata(path).is_ok_and(|m| m.is_file());
        let raws: Box<dyn Iterator<Item = mailbox::Result<RawMessage>>> = if regular {
            Box::new(
                mailbox::open(path, &mailbox::Options::default()).map_err(|source| {
                    Error::Mailbox {
                        path: path.to_path_buf(),
                        source,
                    }
                })?,
            )
        } else {
            let one = RawMessage {
                id: MessageId::Path(path.to_path_buf()),
                bytes: read_one(path)?,
            };
            Box::new(std::iter::once(Ok(one)))
        };
        Ok(FileMessages {
            path: path.to_path_buf(),
            raws: raws.peekable(),
            extractor: Extractor::new(),
            begun: false,
            opened: (path.as_os_str() != "-").then(|| file_now(path)).flatten(),
        })
    }

    /// The next messages, read until they hold `bytes` bytes or the file
    /// ends (at least one message), with the errors of those that could not
    /// be read or parsed; `None` once all are read. When the file holds one
    /// message and it fails, its error is the result, and a file with no
    /// message at all is [`Error::NoMessage`]. A file that grew shorter
    /// since it was opened (rewritten where it is: the part read next would
    /// begin in another message, or miss some) is [`Error::Shrank`]; one
    /// that grew (a delivery appended) is read as far as it was.
    pub fn next_part(&mut self, bytes: usize) -> Result<Option<Part>, Error> {
        let first = !self.begun;
        self.begun = true;
        if let (false, Some((dev, ino, len))) = (first, self.opened)
            && file_now(&self.path).is_some_and(|(d, i, l)| (d, i) == (dev, ino) && l < len)
        {
            return Err(Error::Shrank(self.path.clone()));
        }
        let mut messages = Vec::new();
        let mut failed = Vec::new();
        let mut read = 0usize;
        while read < bytes {
            let Some(raw) = self.raws.next() else { break };
            let outcome = raw
                .map_err(|source| Error::Mailbox {
                    path: self.path.clone(),
                    source,
                })
                .and_then(|raw| {
                    read = read.saturating_add(raw.bytes.len());
                    self.read(raw)
                });
            match outcome {
                Ok(m) => messages.push(m),
                Err(err) => failed.push(err),
            }
        }
        if messages.is_empty() && failed.is_empty() {
            return match first {
                true => Err(Error::NoMessage(self.path.clone())),
                false => Ok(None),
            };
        }
        // One message given, and it cannot be read: the call failed.
        if first && messages.is_empty() && failed.len() == 1 && self.raws.peek().is_none() {
            return Err(failed.remove(0));
        }
        Ok(Some((messages, failed)))
    }

    /// Whether every message was read.
    pub fn is_done(&mut self) -> bool {
        self.raws.peek().is_none()
    }

    /// Reads one message's features and identity, if it is mail.
    fn read(&mut self, raw: RawMessage) -> Result<FileMessage, Error> {
        let id = raw.id.to_string();
        if raw.bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(Error::Empty(id));
        }
        if !message::looks_like_mail(&raw.bytes) {
            return Err(Error::NotMail(id));
        }
        match self.extractor.read(&raw.bytes) {
            Ok((features, identity)) => Ok(FileMessage {
                id,
                features,
                identity,
                raw: raw.bytes,
            }),
            Err(source) => Err(Error::Parse { id, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 15, F11: a mailbox of large messages is read a few messages per
    /// worker at a time, not [`BATCH`] messages at a time.
    #[test]
    fn batches_of_large_messages_are_bounded_by_bytes() {
        const MIB: usize = 1 << 20;
        let tmp = tempfile::tempdir().unwrap();
        let new = tmp.path().join("new");
        std::fs::create_dir_all(&new).unwrap();
        let mut message = b"Subject: big\n\n".to_vec();
        message.resize(MIB, b'x');
        for i in 0..24 {
            std::fs::write(new.join(format!("{i}.big.host")), &message).unwrap();
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let mut batches = Vec::new();
        let unread = pool
            .install(|| {
                for_each_mapped(
                    &[tmp.path().to_path_buf()],
                    &mailbox::Options::default(),
                    &|_, raw: RawMessage| raw.bytes.len(),
                    &mut |_| panic!("nothing is skipped"),
                    &mut |batch| {
                        batches.push(batch.iter().sum::<usize>());
                        Ok::<(), ()>(())
                    },
                )
            })
            .unwrap();
        assert_eq!(unread, Skipped::default());
        assert_eq!(batches.iter().sum::<usize>(), 24 * MIB);
        // 4 MiB per worker, plus the one message that crosses the budget.
        let bound = 2 * 4 * MIB + MIB;
        assert!(
            batches.iter().all(|&b| b <= bound),
            "batch bytes {batches:?} exceed {bound}"
        );
    }

    /// A file given to learn is read a part at a time, each part ending
    /// once the messages read for it (mail or not) hold the bytes asked, at
    /// least one: every message once and in order, what is not mail beside
    /// the part it was in. Each message here is 20 bytes, the one that is
    /// not mail 9.
    #[test]
    fn a_file_for_learn_is_read_in_parts_bounded_by_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let mbox = tmp.path().join("box");
        let mut bytes = Vec::new();
        for i in 0..7 {
            bytes.extend_from_slice(b"From a@b Sat Nov 28 00:00:00 2026\n");
            match i {
                3 => bytes.extend_from_slice(b"not mail\n\n"),
                _ => bytes.extend_from_slice(format!("Subject: m{i}\n\nbody {i}\n\n").as_bytes()),
            }
        }
        std::fs::write(&mbox, &bytes).unwrap();
        let mut file = FileMessages::open(&mbox).unwrap();
        let mut parts = Vec::new();
        while let Some((messages, failed)) = file.next_part(40).unwrap() {
            let subjects: Vec<String> = messages
                .iter()
                .map(|m| String::from_utf8_lossy(&m.raw[9..11]).into_owned())
                .collect();
            parts.push((subjects, failed.len()));
        }
        let want = |m: &[&str], failed| (m.iter().map(|s| s.to_string()).collect(), failed);
        assert_eq!(
            parts,
            [
                want(&["m0", "m1"], 0),
                want(&["m2", "m4"], 1),
                want(&["m5", "m6"], 0),
            ]
        );
        assert!(file.is_done());
        // All at once, the same messages.
        let (all, failed) = FileMessages::open(&mbox)
            .unwrap()
            .next_part(usize::MAX)
            .unwrap()
            .unwrap();
        assert_eq!((all.len(), failed.len()), (6, 1));
        // One message that is not mail is the call's error; nothing at all
        // is no message.
        let one = tmp.path().join("one");
        std::fs::write(&one, b"not mail\n").unwrap();
        let err = FileMessages::open(&one).unwrap().next_part(1).err();
        assert!(matches!(err, Some(Error::NotMail(_))), "{err:?}");
        std::fs::write(&one, b"").unwrap();
        let err = FileMessages::open(&one).unwrap().next_part(1).err();
        assert!(matches!(err, Some(Error::NoMessage(_))), "{err:?}");
        assert!(matches!(
            FileMessages::open(tmp.path()).err(),
            Some(Error::Directory(_))
        ));
    }

    /// A file rewritten shorter between two parts (a mail program's
    /// expunge) stops the read rather than give a part that begins inside
    /// another message; one a delivery appended to is read as far as it was.
    #[test]
    fn a_file_that_grows_shorter_between_parts_stops_the_read() {
        let tmp = tempfile::tempdir().unwrap();
        let mbox = tmp.path().join("box");
        let message =
            |i: usize| format!("From a@b Sat Nov 28 00:00:00 2026\nSubject: m{i}\n\nbody\n\n");
        let all: String = (0..4).map(message).collect();
        std::fs::write(&mbox, &all).unwrap();
        let mut file = FileMessages::open(&mbox).unwrap();
        assert_eq!(file.next_part(1).unwrap().unwrap().0.len(), 1);
        let mut append = std::fs::File::options().append(true).open(&mbox).unwrap();
        std::io::Write::write_all(&mut append, message(4).as_bytes()).unwrap();
        assert_eq!(file.next_part(1).unwrap().unwrap().0.len(), 1);
        std::fs::File::options()
            .write(true)
            .open(&mbox)
            .unwrap()
            .set_len(all.len() as u64 / 2)
            .unwrap();
        assert!(matches!(file.next_part(1), Err(Error::Shrank(_))));
    }

    /// What is not mail is handed to the caller, in order, and counted.
    #[test]
    fn what_is_passed_over_reaches_the_caller() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a"), b"Subject: a\n\nbody\n").unwrap();
        std::fs::write(tmp.path().join("b.png"), b"\x89PNG\r\n\x1a\n").unwrap();
        let mut skips = Vec::new();
        let mut read = 0;
        let skipped = for_each_mapped(
            &[tmp.path().to_path_buf()],
            &mailbox::Options::default(),
            &|_, _| (),
            &mut |s| skips.push(s.to_string()),
            &mut |batch| {
                read += batch.len();
                Ok::<(), ()>(())
            },
        )
        .unwrap();
        assert_eq!(read, 1);
        assert_eq!(skipped.not_mail, 1);
        assert_eq!(skips.len(), 1);
        assert!(
            skips[0].contains("b.png") && skips[0].contains(NOT_MAIL),
            "{skips:?}"
        );
    }
}
