//! Splitting an mbox stream into messages, and writing one.
//!
//! The reader works line by line over a `BufRead`, so it holds one message at
//! a time. The rules it follows are documented on [`MailboxKind::Mbox`]; the
//! writer produces exactly what those rules read back.
//!
//! [`MailboxKind::Mbox`]: super::MailboxKind::Mbox

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use super::{Error, MboxEscaping, MessageId, RawMessage, Result, non_empty};

/// The separator line [`write_mbox_message`] writes when given no envelope
/// sender (the convention mutt and pine use for a placeholder).
const DEFAULT_SENDER: &str = "MAILER-DAEMON";
/// The date on every separator line [`write_mbox_message`] writes.
const SEPARATOR_DATE: &str = "Thu Jan  1 00:00:00 1970";

/// How long a reader waits for a mail program that holds an mbox to
/// change it (a delivery appending, a client rewriting it) before leaving
/// it unread: such programs hold it for moments.
pub(super) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long one process waits for locked mboxes in all: past it, each
/// one found locked is left unread at once, so that a user's locks (or
/// stale dotlocks) cannot hold a sweep of many mailboxes for hours.
const LOCK_WAIT_ALL: std::time::Duration = std::time::Duration::from_secs(120);

/// A dotlock older than this is one a crashed program left, and is not
/// waited on (mail programs take one for moments, and break older ones).
const STALE_DOTLOCK: std::time::Duration = std::time::Duration::from_secs(300);

/// Milliseconds this process has waited for locked mboxes.
static WAITED_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The length of the mbox `file` at `path` once no mail program is
/// changing it: the reader reads that much, and messages appended after
/// are left for the next read. Waits while a program holds the mbox to
/// write it (its `flock` or `fcntl` lock, taken shared here for a moment,
/// or a dotlock `PATH.lock` younger than five minutes), [`LOCK_WAIT`] at
/// most and [`LOCK_WAIT_ALL`] in all; a filesystem without such locks is
/// read as it is. Holds no lock after: a reader whose output waits (`scan
/// … | less`) must not hold up deliveries.
pub(super) fn settled_length(file: &std::fs::File, path: &Path) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering::Relaxed;
    let started = std::time::Instant::now();
    let mut dotlock = path.as_os_str().to_os_string();
    dotlock.push(".lock");
    let dotlock = PathBuf::from(dotlock);
    let whole = |kind: i32| libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    // SAFETY: fcntl on the descriptor `file` owns, with a lock description
    // that lives across the call.
    let fcntl_lock =
        |kind: i32| unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &whole(kind)) == 0 };
    let unsupported = |e: &io::Error| {
        matches!(
            e.raw_os_error(),
            Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)
        )
    };
    let dotlocked = || {
        std::fs::symlink_metadata(&dotlock)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().map_or(true, |age| age < STALE_DOTLOCK))
    };
    loop {
        let shared = match file.try_lock_shared() {
            Ok(()) => true,
            Err(std::fs::TryLockError::WouldBlock) => false,
            Err(std::fs::TryLockError::Error(e)) if unsupported(&e) => true,
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        };
        let read = shared
            && (fcntl_lock(libc::F_RDLCK) || {
                let e = io::Error::last_os_error();
                if !unsupported(&e)
                    && !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES))
                {
                    return Err(e);
                }
                unsupported(&e)
            });
        let settled = read && !dotlocked();
        let length = if settled {
            Some(file.metadata().map(|m| m.len()))
        } else {
            None
        };
        if read {
            fcntl_lock(libc::F_UNLCK);
        }
        if shared {
            let _ = file.unlock();
        }
        if let Some(length) = length {
            return length;
        }
        let waited = WAITED_MS.fetch_add(50, Relaxed);
        if started.elapsed() >= LOCK_WAIT || waited >= LOCK_WAIT_ALL.as_millis() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "another program holds it to change it{}: left unread",
                    if read {
                        format!(" (its dotlock {} is there)", dotlock.display())
                    } else {
                        String::new()
                    }
                ),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The longest body whose `Content-Length` the reader reads ahead to check
/// ([`MboxReader::body_of_length`]): a longer one is read by the separator
/// rule, so that a length no writer gave cannot make the reader hold a
/// large part of the file.
const LENGTH_CHECKED_UP_TO: u64 = 16 << 20;

/// Streams the messages of one mbox file.
pub(super) struct MboxReader<R> {
    reader: R,
    path: PathBuf,
    escaping: MboxEscaping,
    /// Bytes consumed from `reader` so far.
    pos: u64,
    /// Offset of the separator line of the next message, whose separator line
    /// has already been consumed; `None` once the file is done (end of file or
    /// a read error).
    next_start: Option<u64>,
    /// Bytes read ahead and put back (a `Content-Length` that did not
    /// hold), read before `reader`'s from `carry_at` on.
    carry: Vec<u8>,
    carry_at: usize,
    /// Whether the lengths headers give are still read: once one did not
    /// hold, the file's writer is not one that gives them.
    lengths: bool,
}

impl<R: BufRead> MboxReader<R> {
    /// Start reading an mbox at its beginning: an empty stream has no
    /// messages, a non-empty one must start with `From `.
    pub(super) fn new(mut reader: R, path: &Path, escaping: MboxEscaping) -> Result<Self> {
        let mut first_line = Vec::new();
        reader
            .read_until(b'\n', &mut first_line)
            .map_err(|e| Error::io_path(path, e))?;
        Self::with_first_line(reader, path, escaping, first_line)
    }

    /// Like [`MboxReader::new`], when the caller has already read the first
    /// line (including its `\n`, if any) from `reader`.
    pub(super) fn with_first_line(
        reader: R,
        path: &Path,
        escaping: MboxEscaping,
        first_line: Vec<u8>,
    ) -> Result<Self> {
        let next_start = if first_line.is_empty() {
            None
        } else if first_line.starts_with(b"From ") {
            Some(0)
        } else {
            return Err(Error::NotAMailbox {
                path: path.to_path_buf(),
                reason: "does not start with a \"From \" line",
            });
        };
        Ok(Self {
            reader,
            path: path.to_path_buf(),
            escaping,
            pos: first_line.len() as u64,
            next_start,
            carry: Vec::new(),
            carry_at: 0,
            lengths: true,
        })
    }

    /// Appends the next line (up to and including its `\n`) to `out`,
    /// from what was put back first; 0 at the end of the file.
    fn read_line(&mut self, out: &mut Vec<u8>) -> io::Result<usize> {
        let rest = &self.carry[self.carry_at..];
        if rest.is_empty() {
            return self.reader.read_until(b'\n', out);
        }
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        out.extend_from_slice(&rest[..end]);
        self.carry_at += end;
        if self.carry_at == self.carry.len() {
            // Let go of it: what was read ahead may have been large.
            self.carry = Vec::new();
            self.carry_at = 0;
        }
        Ok(end)
    }

    /// Puts `read` (the bytes just read) back, to be read again first.
    fn put_back(&mut self, mut read: Vec<u8>) {
        read.extend_from_slice(&self.carry[self.carry_at..]);
        self.carry = read;
        self.carry_at = 0;
    }

    /// Reads the body of a message whose header gives its length
    /// (`Content-Length`, as Dovecot and other mboxcl2 writers store each
    /// message, its body lines that start with `From ` left unescaped):
    /// `len` bytes, taken as the body, as they are, if what follows them
    /// is the end of the file or the next separator line (after one blank
    /// line at most; without it, one that looks like a separator). Returns
    /// that body and the next separator's offset (`None`: the end of the
    /// file), read past it; or, if the length does not hold, puts back what
    /// it read (for the separator rule to read) and returns `None`, and
    /// lengths are not read again in this file. Over
    /// [`LENGTH_CHECKED_UP_TO`] bytes, `None` at once (later lengths are
    /// still read).
    fn body_of_length(&mut self, len: u64) -> io::Result<Option<(Vec<u8>, Option<u64>)>> {
        if !self.lengths || len > LENGTH_CHECKED_UP_TO {
            return Ok(None);
        }
        let mut read = Vec::new();
        while (read.len() as u64) < len {
            if self.read_line(&mut read)? == 0 {
                break;
            }
        }
        let mut next = None;
        if read.len() as u64 == len {
            let body_end = read.len();
            // What follows: nothing, a separator, or a blank line and then
            // nothing or a separator.
            let mut at = body_end;
            // An empty body follows the header's blank line.
            let mut after_blank = len == 0 || read.ends_with(b"\n\n") || read.ends_with(b"\n\r\n");
            for _ in 0..2 {
                let n = self.read_line(&mut read)?;
                let line = &read[at..];
                if n == 0 {
                    next = Some(None);
                } else if is_separator(line, after_blank) {
                    next = Some(Some(self.pos + at as u64));
                } else if at == body_end && (line == b"\n" || line == b"\r\n") {
                    at += n;
                    after_blank = true;
                    continue;
                }
                break;
            }
            if let Some(next) = next {
                self.pos += read.len() as u64;
                read.truncate(body_end);
                return Ok(Some((read, next)));
            }
        }
        self.put_back(read);
        self.lengths = false;
        Ok(None)
    }
}

/// The length a header line gives the body (`Content-Length: N`), if it is
/// that field with a number.
fn content_length(line: &[u8]) -> Option<u64> {
    let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
    if !name.eq_ignore_ascii_case(b"Content-Length") {
        return None;
    }
    std::str::from_utf8(&value[1..]).ok()?.trim().parse().ok()
}

impl<R> MboxReader<R> {
    /// Whether another message follows (its separator line has been read).
    pub(super) fn has_more(&self) -> bool {
        self.next_start.is_some()
    }
}

impl<R: BufRead> Iterator for MboxReader<R> {
    type Item = Result<RawMessage>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.next_start.take()?;
        let id = MessageId::Mbox {
            path: self.path.clone(),
            offset: start,
        };
        // Lines are read straight into the message; a separator line is cut
        // off again, so the common case copies each byte once.
        let mut message = Vec::new();
        // Length of the previous line if it was blank ("\n" or "\r\n"), else 0.
        let mut blank_len = 0;
        let mut in_header = true;
        // The body's length, if the header gives it: `Some(None)` once a
        // second field gives it again.
        let mut given: Option<Option<u64>> = None;
        loop {
            let line_start = message.len();
            let n = match self.read_line(&mut message) {
                Ok(n) => n,
                // `next_start` stays `None`: nothing after a read error is
                // trusted.
                Err(e) => return Some(Err(Error::io(id, e))),
            };
            if n == 0 {
                message.truncate(line_start - blank_len);
                return Some(non_empty(id, message));
            }
            let line_pos = self.pos;
            self.pos += n as u64;
            let line = &message[line_start..];
            if is_separator(line, blank_len > 0) {
                message.truncate(line_start - blank_len);
                self.next_start = Some(line_pos);
                return Some(non_empty(id, message));
            }
            blank_len = if line == b"\n" || line == b"\r\n" {
                n
            } else {
                0
            };
            if in_header && blank_len > 0 {
                in_header = false;
                if let Some(Some(len)) = given {
                    match self.body_of_length(len) {
                        Ok(Some((body, next))) => {
                            message.extend_from_slice(&body);
                            self.next_start = next;
                            return Some(non_empty(id, message));
                        }
                        Ok(None) => {}
                        Err(e) => return Some(Err(Error::io(id, e))),
                    }
                }
            } else if in_header && let Some(len) = content_length(line) {
                given = Some(given.map_or(Some(len), |_| None));
            }
            if is_escaped(line, self.escaping) {
                message.remove(line_start);
            }
        }
    }
}

impl<R: BufRead> std::iter::FusedIterator for MboxReader<R> {}

/// Whether `line` starts a new message. `after_blank`: the line before it was
/// blank.
fn is_separator(line: &[u8], after_blank: bool) -> bool {
    line.starts_with(b"From ") && (after_blank || looks_like_separator(&line[5..]))
}

/// Whether the text after `From ` has the shape of a separator line
/// (`sender date`): a sender token right after the space, then whitespace,
/// then something containing a time of day (`H:MM` or `HH:MM`).
///
/// Only consulted for `From ` lines that do not follow a blank line, which a
/// well-formed mbox never has (writers escape `From ` in bodies), so it only
/// rescues files whose writer forgot the blank line. Every ctime-style date
/// carries a time; a year alone is too common in prose to count.
pub(super) fn looks_like_separator(rest: &[u8]) -> bool {
    let sender_len = rest
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    if sender_len == 0 {
        return false;
    }
    let date = &rest[sender_len..];
    date.windows(4).any(|w| {
        w[0].is_ascii_digit() && w[1] == b':' && w[2].is_ascii_digit() && w[3].is_ascii_digit()
    })
}

/// Whether `line` starts with `>` in front of `From `, as escaped by
/// writers of the given convention.
pub(super) fn is_escaped(line: &[u8], escaping: MboxEscaping) -> bool {
    match escaping {
        MboxEscaping::Mboxrd => line.first() == Some(&b'>') && needs_escape(line),
        MboxEscaping::Mboxo => line.starts_with(b">From "),
    }
}

/// Whether a message line must be escaped when written (mboxrd): it matches
/// `^>*From `.
fn needs_escape(line: &[u8]) -> bool {
    let quotes = line.iter().take_while(|&&b| b == b'>').count();
    line[quotes..].starts_with(b"From ")
}

/// Append one message to an mbox, mboxrd-escaped.
///
/// Writes the separator line `From SENDER Thu Jan  1 00:00:00 1970`, where
/// SENDER is `envelope` (an envelope sender address; it must be non-empty and
/// free of whitespace and control characters, else the error kind is
/// [`io::ErrorKind::InvalidInput`]) or `MAILER-DAEMON`; then the message with
/// a `>` put in front of every line matching `^>*From ` (the message's first
/// line included); then a `\n` if the message does not end with one; then one
/// blank line (`\n`).
///
/// What the reader gives back (with the default [`MboxEscaping::Mboxrd`]):
/// - a message that ends with `\n` (or `\r\n`): exactly the same bytes, since
///   the reader drops exactly the one blank line in front of the next
///   separator or at the end of the file;
/// - a non-empty message without a final `\n`: the message plus `\n`;
/// - an empty message: an [`Error::EmptyMessage`] item.
///
/// Line endings inside the message are kept as they are; the separator and
/// blank lines are always `\n`. The writer makes many small writes: give it
/// a buffered writer.
///
/// ```
/// use bayesmail::mailbox::write_mbox_message;
///
/// let mut out = Vec::new();
/// write_mbox_message(&mut out, Some("alice@example.org"), b"Subject: hi\n\nFrom me.\n")?;
/// assert_eq!(
///     out,
///     b"From alice@example.org Thu Jan  1 00:00:00 1970\nSubject: hi\n\n>From me.\n\n"
/// );
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write_mbox_message<W: Write>(
    w: &mut W,
    envelope: Option<&str>,
    message: &[u8],
) -> io::Result<()> {
    let sender = envelope.unwrap_or(DEFAULT_SENDER);
    if sender.is_empty() || sender.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid mbox envelope sender {sender:?}"),
        ));
    }
    writeln!(w, "From {sender} {SEPARATOR_DATE}")?;
    // Write the message in runs, breaking only where a '>' goes in.
    let mut written = 0;
    let line_starts = std::iter::once(0).chain(memchr::memchr_iter(b'\n', message).map(|i| i + 1));
    for start in line_starts {
        if start < message.len() && needs_escape(&message[start..]) {
            w.write_all(&message[written..start])?;
            w.write_all(b">")?;
            written = start;
        }
    }
    w.write_all(&message[written..])?;
    if !message.is_empty() && !message.ends_with(b"\n") {
        w.write_all(b"\n")?;
    }
    w.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Cursor;

    fn read(mbox: &[u8], escaping: MboxEscaping) -> Vec<Result<RawMessage>> {
        MboxReader::new(Cursor::new(mbox), Path::new("box"), escaping)
            .unwrap()
            .collect()
    }

    /// Messages (bytes) read from `mbox`, failing on any error item.
    fn messages(mbox: &[u8], escaping: MboxEscaping) -> Vec<Vec<u8>> {
        read(mbox, escaping)
            .into_iter()
            .map(|m| m.unwrap().bytes)
            .collect()
    }

    fn offsets(mbox: &[u8]) -> Vec<u64> {
        read(mbox, MboxEscaping::Mboxrd)
            .into_iter()
            .map(|m| match m.unwrap().id {
                MessageId::Mbox { offset, .. } => offset,
                other => panic!("unexpected id {other:?}"),
            })
            .collect()
    }

    fn write_all(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            write_mbox_message(&mut out, None, m).unwrap();
        }
        out
    }

    const SEP: &str = "From MAILER-DAEMON Thu Jan  1 00:00:00 1970\n";

    #[test]
    fn splits_on_from_lines_after_blank_lines_and_strips_one_blank_line() {
        let mbox = format!("{SEP}Subject: a\n\nbody a\n\n{SEP}Subject: b\n\nbody b\n\n\n");
        assert_eq!(
            messages(mbox.as_bytes(), MboxEscaping::Mboxrd),
            [&b"Subject: a\n\nbody a\n"[..], b"Subject: b\n\nbody b\n\n"]
        );
    }

    #[test]
    fn offsets_point_at_separator_lines() {
        let mbox = format!("{SEP}a\n\n{SEP}bb\n\n{SEP}ccc\n");
        let sep = SEP.len() as u64;
        assert_eq!(offsets(mbox.as_bytes()), [0, sep + 3, 2 * sep + 3 + 4]);
        for offset in offsets(mbox.as_bytes()) {
            assert!(mbox[offset as usize..].starts_with("From "));
        }
    }

    #[test]
    fn mboxrd_and_mboxo_differ_only_on_multiply_quoted_lines() {
        let mbox = format!(
            "{SEP}Subject: q\n\n>From one\n>>From two\n>>>From three\n> From not\nFrom x\n\n"
        );
        assert_eq!(
            messages(mbox.as_bytes(), MboxEscaping::Mboxrd),
            [&b"Subject: q\n\nFrom one\n>From two\n>>From three\n> From not\nFrom x\n"[..]]
        );
        assert_eq!(
            messages(mbox.as_bytes(), MboxEscaping::Mboxo),
            [&b"Subject: q\n\nFrom one\n>>From two\n>>>From three\n> From not\nFrom x\n"[..]]
        );
    }

    /// Dovecot (and other mboxcl2 writers) store each message with a
    /// `Content-Length` and leave its body's `From ` lines as they are: the
    /// length says where the message ends, and the body comes back as
    /// stored.
    #[test]
    fn a_body_whose_length_the_header_gives_is_read_by_it() {
        let body_a =
            "Patch below.\n\nFrom 1234abcd Mon Sep 17 00:00:00 2001\nFrom: dev@x\n>From kept\n";
        let body_b = "From now on\n";
        let mbox = format!(
            "From alice@vm  Sat Nov 28 03:12:03 2026\nSubject: a\nContent-Length: {}\n\n{body_a}\n\
             From alice@vm  Sat Nov 28 03:12:04 2026\nSubject: b\ncontent-length:{}\r\n\n{body_b}",
            body_a.len(),
            body_b.len()
        );
        let read = messages(mbox.as_bytes(), MboxEscaping::Mboxrd);
        assert_eq!(
            read,
            [
                format!("Subject: a\nContent-Length: {}\n\n{body_a}", body_a.len()).into_bytes(),
                format!("Subject: b\ncontent-length:{}\r\n\n{body_b}", body_b.len()).into_bytes(),
            ]
        );
        let second = mbox.find("From alice@vm  Sat Nov 28 03:12:04").unwrap() as u64;
        assert_eq!(offsets(mbox.as_bytes()), [0, second]);
        // Without the blank line before the next separator, and with one
        // at the end of the file.
        let tight = format!("{SEP}Content-Length: 12\n\nFrom now on\n{SEP}Subject: c\n\nc\n");
        assert_eq!(
            messages(tight.as_bytes(), MboxEscaping::Mboxrd),
            [
                &b"Content-Length: 12\n\nFrom now on\n"[..],
                b"Subject: c\n\nc\n"
            ]
        );
    }

    /// A length that does not end where a separator or the file does (too
    /// short, too long, in the middle of a line, past the end), given
    /// twice, or too large to check is not the writer's: the separator rule
    /// reads the message as it would without it; after one that did not
    /// hold, no length in the file is read.
    #[test]
    fn a_length_that_does_not_hold_leaves_the_separator_rule() {
        let body = "one\nFrom two\nthree\n";
        for given in [
            "4",
            "5",
            "13",
            "30",
            "9999",
            "19\nContent-Length: 19",
            "99999999999",
        ] {
            let with = format!("{SEP}Content-Length: {given}\n\n{body}\n{SEP}Subject: n\n\nn\n");
            let without = format!("{SEP}X-Length: {given}\n\n{body}\n{SEP}Subject: n\n\nn\n");
            let unlabelled = |m: Vec<Vec<u8>>| -> Vec<String> {
                m.into_iter()
                    .map(|b| {
                        String::from_utf8(b)
                            .unwrap()
                            .replace("Content-Length", "X-Length")
                    })
                    .collect()
            };
            assert_eq!(
                unlabelled(messages(with.as_bytes(), MboxEscaping::Mboxrd)),
                unlabelled(messages(without.as_bytes(), MboxEscaping::Mboxrd)),
                "{given}"
            );
            assert_eq!(offsets(with.as_bytes()).len(), 2, "{given}");
        }
        // After one that did not hold, a right one is not read either.
        let right = "a\n\nFrom b 10:00\nc\n";
        let mbox = format!(
            "{SEP}Content-Length: 1\n\n{right}\n{SEP}Content-Length: {}\n\n{right}\n",
            right.len()
        );
        assert_eq!(messages(mbox.as_bytes(), MboxEscaping::Mboxrd).len(), 4);
        let alone = format!("{SEP}Content-Length: {}\n\n{right}\n", right.len());
        assert_eq!(messages(alone.as_bytes(), MboxEscaping::Mboxrd).len(), 1);
        // Nor after a length too large to check, or an empty body's right
        // before the next separator (one a blank line must come before):
        // the next message's length is read.
        for first in [
            format!("Content-Length: {}\n\nx\n\n", LENGTH_CHECKED_UP_TO + 1),
            "Content-Length: 0\n\n".to_string(),
        ] {
            let mbox = format!(
                "{SEP}{first}From bob\nContent-Length: {}\n\n{right}\n",
                right.len()
            );
            assert_eq!(
                messages(mbox.as_bytes(), MboxEscaping::Mboxrd).len(),
                2,
                "{first}"
            );
        }
    }

    #[test]
    fn escaped_from_line_after_blank_line_is_not_a_separator() {
        let mbox = format!("{SEP}Subject: q\n\n>From the start\n\n{SEP}next\n");
        assert_eq!(
            messages(mbox.as_bytes(), MboxEscaping::Mboxrd),
            [&b"Subject: q\n\nFrom the start\n"[..], b"next\n"]
        );
    }

    #[test]
    fn unescaped_from_line_without_blank_line_splits_only_if_it_looks_like_a_separator() {
        let mbox = format!(
            "{SEP}Subject: a\n\nbody\nFrom here on, no time.\nFrom  no sender 10:30\n\
             From bob@example.org Mon Feb  3 10:30:00 2020\nSubject: b\n"
        );
        assert_eq!(
            messages(mbox.as_bytes(), MboxEscaping::Mboxrd),
            [
                &b"Subject: a\n\nbody\nFrom here on, no time.\nFrom  no sender 10:30\n"[..],
                b"Subject: b\n"
            ]
        );
    }

    #[test]
    fn crlf_mbox() {
        let mbox = b"From a Thu Jan  1 00:00:00 1970\r\nSubject: a\r\n\r\n>From x\r\n\r\nFrom b Thu Jan  1 00:00:00 1970\r\nSubject: b\r\n\r\nbody\r\n\r\n";
        assert_eq!(
            messages(mbox, MboxEscaping::Mboxrd),
            [
                &b"Subject: a\r\n\r\nFrom x\r\n"[..],
                b"Subject: b\r\n\r\nbody\r\n"
            ]
        );
        let second = mbox.windows(6).position(|w| w == b"From b").unwrap() as u64;
        assert_eq!(offsets(mbox), [0, second]);
    }

    #[test]
    fn last_message_without_trailing_newline_is_returned_as_is() {
        let mbox = format!("{SEP}Subject: a\n\nbody a\n\n{SEP}Subject: b\n\nbody b");
        assert_eq!(
            messages(mbox.as_bytes(), MboxEscaping::Mboxrd),
            [&b"Subject: a\n\nbody a\n"[..], b"Subject: b\n\nbody b"]
        );
    }

    #[test]
    fn empty_stream_has_no_messages() {
        assert!(read(b"", MboxEscaping::Mboxrd).is_empty());
    }

    #[test]
    fn stream_not_starting_with_from_is_not_an_mbox() {
        let err = MboxReader::new(
            Cursor::new(b"Subject: x\n"),
            Path::new("box"),
            MboxEscaping::Mboxrd,
        )
        .err()
        .unwrap();
        assert_eq!(
            err.to_string(),
            "not a mailbox: box (does not start with a \"From \" line)"
        );
    }

    #[test]
    fn empty_message_between_separators_is_an_error_item_and_reading_goes_on() {
        let mbox = format!("{SEP}\n{SEP}Subject: b\n");
        let got = read(mbox.as_bytes(), MboxEscaping::Mboxrd);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0].as_ref().unwrap_err().to_string(),
            "empty message: box:0"
        );
        assert_eq!(got[1].as_ref().unwrap().bytes, b"Subject: b\n");
    }

    #[test]
    fn separator_only_file_is_one_empty_message() {
        let got = read(SEP.as_bytes(), MboxEscaping::Mboxrd);
        assert_eq!(got.len(), 1);
        assert!(matches!(got[0], Err(Error::EmptyMessage { .. })));
    }

    /// A reader that fails after handing out its data.
    struct FailingAfter(Cursor<Vec<u8>>);

    impl io::Read for FailingAfter {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(io::Error::other("disk on fire")),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn read_error_is_one_error_item_then_the_file_stops() {
        let mbox = format!("{SEP}Subject: a\n\n{SEP}Subject: b\n");
        let reader = io::BufReader::new(FailingAfter(Cursor::new(mbox.into_bytes())));
        let got: Vec<_> = MboxReader::new(reader, Path::new("box"), MboxEscaping::Mboxrd)
            .unwrap()
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap().bytes, b"Subject: a\n");
        let sep = SEP.len();
        assert_eq!(
            got[1].as_ref().unwrap_err().to_string(),
            format!("box:{}: disk on fire", sep + 12)
        );
    }

    #[test]
    fn writer_escapes_from_lines_and_adds_newline_and_blank_line() {
        let out = write_all(&[b"From start\n>From a\n>>From b\n> From c\nFromage\nFrom end"]);
        assert_eq!(
            out,
            format!("{SEP}>From start\n>>From a\n>>>From b\n> From c\nFromage\n>From end\n\n")
                .into_bytes()
        );
        assert_eq!(
            messages(&out, MboxEscaping::Mboxrd),
            [&b"From start\n>From a\n>>From b\n> From c\nFromage\nFrom end\n"[..]]
        );
        // mboxo cannot undo mboxrd's double escaping.
        assert_eq!(
            messages(&out, MboxEscaping::Mboxo),
            [&b"From start\n>>From a\n>>>From b\n> From c\nFromage\nFrom end\n"[..]]
        );
    }

    #[test]
    fn writer_uses_envelope_sender_and_rejects_bad_ones() {
        let mut out = Vec::new();
        write_mbox_message(&mut out, Some("bob@example.org"), b"x\n").unwrap();
        assert_eq!(out, b"From bob@example.org Thu Jan  1 00:00:00 1970\nx\n\n");
        for bad in ["", "a b", "a\nb", "a\tb"] {
            let err = write_mbox_message(&mut Vec::new(), Some(bad), b"x\n").unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn writer_output_of_empty_message_reads_back_as_empty_message_error() {
        let out = write_all(&[b"", b"x\n"]);
        assert_eq!(out, format!("{SEP}\n{SEP}x\n\n").into_bytes());
        let got = read(&out, MboxEscaping::Mboxrd);
        assert!(matches!(got[0], Err(Error::EmptyMessage { .. })));
        assert_eq!(got[1].as_ref().unwrap().bytes, b"x\n");
    }

    #[test]
    fn crlf_messages_round_trip() {
        let msgs: [&[u8]; 2] = [
            b"Subject: a\r\n\r\nFrom x\r\n\r\n",
            b"Subject: b\r\n\r\n>From y\r\n",
        ];
        let out = write_all(&msgs);
        assert_eq!(messages(&out, MboxEscaping::Mboxrd), msgs);
    }

    fn line() -> impl Strategy<Value = Vec<u8>> {
        let prefix = prop_oneof![
            Just(&b""[..]),
            Just(&b"From "[..]),
            Just(&b">From "[..]),
            Just(&b">>From "[..]),
            Just(&b">"[..]),
            Just(&b"From"[..]),
        ];
        let text = prop_oneof![
            Just(Vec::new()),
            Just(b"MAILER-DAEMON Thu Jan  1 00:00:00 1970".to_vec()),
            proptest::collection::vec(
                any::<u8>().prop_filter("no newline", |&b| b != b'\n'),
                0..20
            ),
        ];
        (prefix, text, any::<bool>()).prop_map(|(prefix, text, crlf)| {
            let mut line = prefix.to_vec();
            line.extend(text);
            line.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            line
        })
    }

    fn message() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(line(), 1..12).prop_map(|lines| lines.concat())
    }

    proptest! {
        #[test]
        fn written_messages_read_back_identically(
            msgs in proptest::collection::vec(message(), 0..8)
        ) {
            let mut out = Vec::new();
            let mut starts = Vec::new();
            for m in &msgs {
                starts.push(out.len() as u64);
                write_mbox_message(&mut out, None, m).unwrap();
            }
            let got: Vec<RawMessage> = read(&out, MboxEscaping::Mboxrd)
                .into_iter()
                .collect::<Result<_>>()
                .unwrap();
            prop_assert_eq!(got.len(), msgs.len());
            for ((got, want), start) in got.iter().zip(&msgs).zip(&starts) {
                prop_assert_eq!(&got.bytes, want);
                prop_assert_eq!(
                    &got.id,
                    &MessageId::Mbox { path: PathBuf::from("box"), offset: *start }
                );
            }
        }

        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut mbox = b"From x\n".to_vec();
            mbox.extend(bytes);
            for escaping in [MboxEscaping::Mboxrd, MboxEscaping::Mboxo] {
                let _ = read(&mbox, escaping);
            }
        }
    }
}
