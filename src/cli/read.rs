//! Reading messages for the commands: in batches, features extracted in
//! parallel (one extractor per rayon worker), results in input order.
//!
//! A batch is bounded by bytes as well as by count, so that memory stays a
//! few messages per worker however large the messages are: at most two
//! batches are alive at once (the one being mapped and the one being read
//! ahead), and a batch stops growing once it holds [`BATCH_BYTES_PER_WORKER`]
//! bytes per worker.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};
use rayon::prelude::*;

use bayesmail::features::{Extractor, Features};
use bayesmail::mailbox::{self, RawMessage};
use bayesmail::message;
use bayesmail::sanitize::for_terminal;

/// Messages parsed in parallel per batch, at most.
pub(super) const BATCH: usize = 256;

/// Message bytes per rayon worker after which a batch stops growing. Small
/// messages fill a batch by count; large ones by bytes, so a batch of
/// multi-megabyte messages holds about one per worker instead of
/// [`BATCH`] of them.
pub(super) const BATCH_BYTES_PER_WORKER: usize = 4 << 20;

/// The byte budget of one batch on the current rayon pool.
fn batch_bytes() -> usize {
    BATCH_BYTES_PER_WORKER.saturating_mul(rayon::current_num_threads().max(1))
}

/// What a read passed over, each reported on stderr as it was met.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Skipped {
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

    /// `"; N skipped: not mail"` for a summary, or nothing.
    pub fn note(self) -> String {
        match self.not_mail {
            0 => String::new(),
            n => format!("; {n} skipped: not mail"),
        }
    }
}

/// Why a file is not taken as a message.
pub(super) const NOT_MAIL: &str = "does not look like mail (it does not start with a header field)";

/// Reports, on stderr, a message skipped because it does not look like
/// mail. Not silenced by `-q`: like a message that cannot be read, it
/// makes the exit status 1.
pub(super) fn report_not_mail(id: &str) {
    eprintln!("bayesmail: {}: skipped: {NOT_MAIL}", for_terminal(id));
}

/// A message read and turned into features (or the reason it could not be).
pub(super) struct Extracted {
    pub raw: RawMessage,
    pub features: Result<Features, message::Error>,
}

/// Reads every message under `paths`, extracting features batch by batch
/// and handing each batch to `f`. Messages that cannot be read and files
/// that are not mail are reported on stderr, skipped and counted.
pub(super) fn for_each_batch(
    paths: &[std::path::PathBuf],
    opts: &mailbox::Options,
    f: &mut dyn FnMut(Vec<Extracted>) -> Result<()>,
) -> Result<Skipped> {
    let extract = |ex: &mut Extractor, raw: RawMessage| {
        let features = ex.extract(&raw.bytes);
        Extracted { raw, features }
    };
    for_each_mapped(paths, opts, &extract, f)
}

/// Reads every message under `paths` and applies `map` to each, in
/// parallel (one [`Extractor`] per rayon worker), handing the results to
/// `f` batch by batch in input order. While the workers read the next batch
/// and map this one, this thread hands the batch before it to `f`: `f` is
/// often sequential work, which would otherwise leave the workers idle, and
/// it stays on the caller's thread (so its allocations stay in that
/// thread's arena). Messages that cannot be read and files that do not
/// look like mail ([`message::looks_like_mail`]) are reported on stderr,
/// skipped and counted. After `f` fails, nothing more is handed to it.
pub(super) fn for_each_mapped<T: Send>(
    paths: &[std::path::PathBuf],
    opts: &mailbox::Options,
    map: &(dyn Fn(&mut Extractor, RawMessage) -> T + Sync),
    f: &mut dyn FnMut(Vec<T>) -> Result<()>,
) -> Result<Skipped> {
    let mut failed = Skipped::default();
    let budget = batch_bytes();
    let mut messages = mailbox::open_all(paths, opts);
    let mut batch = read_batch(&mut messages, &mut failed, budget);
    let mut previous: Option<Vec<T>> = None;
    while !batch.is_empty() || previous.is_some() {
        let mut this: Option<Vec<T>> = None;
        let mut handled = Ok(());
        let mut next = Vec::new();
        rayon::in_place_scope(|scope| {
            // Reading is spawned first: spawned from outside the pool, jobs
            // are taken in order, and a worker finds the map's split halves
            // before it looks for other jobs, so reading spawned second is
            // left until the map is done, with the other worker idle.
            let (messages, failed, next) = (&mut messages, &mut failed, &mut next);
            scope.spawn(move |_| *next = read_batch(messages, failed, budget));
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
    Ok(failed)
}

/// The next readable messages, up to [`BATCH`] of them or until they hold
/// `budget` bytes (the message that reaches the budget is the batch's last;
/// a batch always has room for one message, however large); unreadable ones
/// and those that are not mail are reported and counted in `failed`.
fn read_batch(
    messages: &mut impl Iterator<Item = mailbox::Result<RawMessage>>,
    failed: &mut Skipped,
    budget: usize,
) -> Vec<RawMessage> {
    let mut batch = Vec::new();
    let mut bytes = 0usize;
    for item in messages.by_ref() {
        match item {
            Ok(raw) if !message::looks_like_mail(&raw.bytes) => {
                failed.not_mail += 1;
                report_not_mail(&raw.id.to_string());
            }
            Ok(raw) => {
                bytes = bytes.saturating_add(raw.bytes.len());
                batch.push(raw);
                if batch.len() == BATCH || bytes >= budget {
                    break;
                }
            }
            Err(err) => {
                failed.unreadable += 1;
                eprintln!("bayesmail: {}", for_terminal(&err.to_string()));
            }
        }
    }
    batch
}

/// Ends a command that streamed one line per message to `out`: flushes,
/// takes a closed stdout (`… | head`) as the end of the output rather than
/// an error, and says whether any message could not be read or was not
/// mail (`skipped`, from [`for_each_batch`]) or could not be parsed
/// (`unparsed`).
pub(super) fn finish_stream(
    result: Result<Skipped>,
    out: &mut impl std::io::Write,
    unparsed: usize,
) -> Result<super::Outcome> {
    let failed = match result.and_then(|skipped| out.flush().map(|_| skipped).map_err(Into::into)) {
        Ok(skipped) => skipped.total() + unparsed > 0,
        Err(err) if super::is_broken_pipe(&err) => unparsed > 0,
        Err(err) => return Err(err),
    };
    Ok(if failed {
        super::Outcome::SomeFailed
    } else {
        super::Outcome::AllOk
    })
}

/// Bytes of the files that reading `paths` with `opts` will go through,
/// for a progress bar: a Maildir's cur/ and new/ (and, with `recursive`,
/// everything under it), a directory tree in full, a file's size; standard
/// input and anything unreadable count 0. Symlinks are not followed.
pub(super) fn planned_bytes(paths: &[std::path::PathBuf], opts: &mailbox::Options) -> u64 {
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
pub(super) fn tree_bytes(path: &Path) -> u64 {
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

/// Reads one message from a file or, for `-`, standard input.
pub(super) fn read_one(path: &Path) -> Result<Vec<u8>> {
    let bytes = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut buf)
            .context("reading standard input")?;
        buf
    } else {
        std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        bail!("empty message: {}", path.display());
    }
    Ok(bytes)
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
                    &mut |batch| {
                        batches.push(batch.iter().sum::<usize>());
                        Ok(())
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
}
