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
    /// read from), kept only from what cannot be read again (standard
    /// input, a pipe; see [`raw_messages_in_file`]).
    pub raw: Option<Vec<u8>>,
}

/// Reads the messages of one file the way a folder's reader reads the same
/// file, so that both compute the same digests: a file holding one message
/// after a `From ` envelope line is that message (the envelope line left
/// out, `>From ` escaping undone), a file holding several (an mbox) is each
/// of them. Standard input is one message taken verbatim, as a delivery
/// agent passes one on, unless it is clearly an mbox of several messages
/// (see [`mailbox::looks_like_several_messages`]); anything else that is not
/// a regular file (a FIFO) is one message. A directory is
/// [`Error::Directory`].
///
/// Returns the messages read and the errors of those that could not be
/// read or parsed; when the file holds one message and it fails, its error
/// is the result.
pub fn messages_in_file(path: &Path) -> Result<(Vec<FileMessage>, Vec<Error>), Error> {
    let raws = raws_in_file(path)?;
    // What cannot be read again: standard input, a pipe.
    let once = path.as_os_str() == "-" || !std::fs::metadata(path).is_ok_and(|m| m.is_file());
    let single = raws.len() == 1;
    let mut extractor = Extractor::new();
    let mut messages = Vec::with_capacity(raws.len());
    let mut failed = Vec::new();
    for raw in raws {
        let outcome = raw
            .map_err(|source| Error::Mailbox {
                path: path.to_path_buf(),
                source,
            })
            .and_then(|raw| {
                let id = raw.id.to_string();
                if raw.bytes.iter().all(u8::is_ascii_whitespace) {
                    return Err(Error::Empty(id));
                }
                if !message::looks_like_mail(&raw.bytes) {
                    return Err(Error::NotMail(id));
                }
                match extractor.read(&raw.bytes) {
                    Ok((features, identity)) => Ok(FileMessage {
                        id,
                        features,
                        identity,
                        raw: once.then_some(raw.bytes),
                    }),
                    Err(source) => Err(Error::Parse { id, source }),
                }
            });
        match outcome {
            Ok(m) => messages.push(m),
            // One message given, and it cannot be read: the call failed.
            Err(err) if single => return Err(err),
            Err(err) => failed.push(err),
        }
    }
    if messages.is_empty() && failed.is_empty() {
        return Err(Error::NoMessage(path.to_path_buf()));
    }
    Ok((messages, failed))
}

/// The messages of the file `path` as [`messages_in_file`] reads them,
/// unparsed.
fn raws_in_file(path: &Path) -> Result<Vec<mailbox::Result<RawMessage>>, Error> {
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(Error::Directory(path.to_path_buf()));
    }
    let regular = path.as_os_str() == "-" || std::fs::metadata(path).is_ok_and(|m| m.is_file());
    Ok(if regular {
        mailbox::open(path, &mailbox::Options::default())
            .map_err(|source| Error::Mailbox {
                path: path.to_path_buf(),
                source,
            })?
            .collect()
    } else {
        vec![Ok(RawMessage {
            id: MessageId::Path(path.to_path_buf()),
            bytes: read_one(path)?,
        })]
    })
}

/// The bytes of each message of the file `path` that [`messages_in_file`]
/// read as mail, read again (a learn that leaves its messages for another
/// writer asks for them only then, rather than keep a large mbox in
/// memory); a file changed since may give others.
pub fn raw_messages_in_file(path: &Path) -> Result<Vec<Vec<u8>>, Error> {
    let mut extractor = Extractor::new();
    Ok(raws_in_file(path)?
        .into_iter()
        .filter_map(Result::ok)
        .map(|raw| raw.bytes)
        .filter(|b| {
            !b.iter().all(u8::is_ascii_whitespace)
                && message::looks_like_mail(b)
                && extractor.read(b).is_ok()
        })
        .collect())
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
