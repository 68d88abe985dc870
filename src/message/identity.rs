//! What makes a message the same message however it was stored or read:
//! the canonical bytes that both the registry digest and every feature are
//! taken from (DESIGN.md, "One message, one identity").
//!
//! A message learned from a file, from standard input, inside an mbox, as a
//! Maildir entry, or after delivery through `filter` must be counted once
//! and taken back exactly. Each of those ways of reading changes bytes that
//! say nothing of the message: line ends, an mbox envelope line, the blank
//! line an mbox puts after each message, the `>` an mbox writer puts before
//! a body line starting with `From `, and fields that mail software (and
//! `filter`) adds or rewrites in the header block. [`canonical`] removes
//! exactly those, so the digest and the features agree by construction.

use std::borrow::Cow;

use super::split;
use crate::vocab::{Digest, RENAMED_PREFIX};

/// Headers that mail software adds or rewrites while a message sits in a
/// mailbox (read flags, IMAP bookkeeping, filter verdicts, our own headers):
/// not part of the message's identity or features, so moving a message
/// between folders, reading it or filtering it again does not make it a
/// different message. Any field whose name starts with `X-Bayesmail` too.
const VOLATILE_HEADERS: &[&str] = &[
    "status",
    "x-status",
    "x-keywords",
    "x-uid",
    "x-imap",
    "x-imapbase",
    "content-length",
    "lines",
    "x-mozilla-status",
    "x-mozilla-status2",
    "x-mozilla-keys",
    "x-spam-flag",
    "x-spam-status",
    "x-spam-level",
    "x-spam-checker-version",
    "x-bogosity",
    "old-x-spam-flag",
    "old-x-spam-status",
];

/// Whether a header line (not a continuation) starts a volatile field:
/// one of [`VOLATILE_HEADERS`], or any `X-Spam-*`, `Old-X-Spam-*` or
/// `X-Bayesmail-*`.
fn is_volatile(line: &[u8]) -> bool {
    let name = line.split(|&b| b == b':').next().unwrap_or(b"");
    let name = String::from_utf8_lossy(name).trim().to_ascii_lowercase();
    VOLATILE_HEADERS.contains(&name.as_str())
        || ["x-spam-", "old-x-spam-", "x-bayesmail"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// Whether `line` names one of `filter`'s fields
/// ([`OUR_FIELDS`](crate::vocab::OUR_FIELDS)), with or without
/// [`RENAMED_PREFIX`], as `filter`'s renamer reads a name
/// ([`crate::vocab::names_our_field`]): CRs anywhere in it left out.
fn ours_or_renamed(line: &[u8]) -> bool {
    let mut name = line.iter().copied().filter(|&b| b != b'\r');
    let mut start = [0u8; 24];
    let mut len = 0;
    for b in name.by_ref().take(start.len()) {
        start[len] = b;
        len += 1;
    }
    let start = &start[..len];
    let start = match start.get(..RENAMED_PREFIX.len()) {
        Some(p) if p.eq_ignore_ascii_case(RENAMED_PREFIX.as_bytes()) => {
            &start[RENAMED_PREFIX.len()..]
        }
        _ => start,
    };
    crate::vocab::names_our_field(start) == Some(true)
}

/// `message` (without its envelope line) without the lines, up to the
/// first empty line as `filter`'s renamer finds it (`\n`, or `\r\n` in a
/// message whose first line ends so), that name one of our fields: where
/// `filter` renames a forged one, past lines that end the header block
/// for us but not for every delivery agent, the message before and after
/// delivery must read the same.
fn without_our_fields(message: &[u8]) -> Cow<'_, [u8]> {
    let mut lines = message.split_inclusive(|&b| b == b'\n');
    let crlf = message
        .split_inclusive(|&b| b == b'\n')
        .next()
        .is_some_and(|l| l.ends_with(b"\r\n"));
    let mut at = 0;
    let mut out: Option<Vec<u8>> = None;
    let mut dropping = false;
    for line in lines.by_ref() {
        if line == b"\n" || (crlf && line == b"\r\n") {
            break;
        }
        // A field's continuation lines go with it.
        let continuation = matches!(line.first(), Some(b' ' | b'\t'));
        dropping = if continuation {
            dropping
        } else {
            ours_or_renamed(line)
        };
        if dropping {
            out.get_or_insert_with(|| message[..at].to_vec());
        } else if let Some(out) = &mut out {
            out.extend_from_slice(line);
        }
        at += line.len();
    }
    match out {
        None => Cow::Borrowed(message),
        Some(mut out) => {
            out.extend_from_slice(&message[at..]);
            Cow::Owned(out)
        }
    }
}

/// Calls `f` with each kept line of the header block `head` (LF line ends):
/// every line but those of volatile fields and their continuations.
fn kept_header_lines<'a>(head: &'a [u8], mut f: impl FnMut(&'a [u8])) {
    let mut skipping = false;
    for line in head.split_inclusive(|&b| b == b'\n') {
        let continuation = line.first().is_some_and(|b| *b == b' ' || *b == b'\t');
        if !continuation {
            skipping = is_volatile(line);
        }
        if !skipping {
            f(line);
        }
    }
}

/// The message as it identifies itself: line ends as LF, without a leading
/// mbox envelope line, without the volatile fields of the header block (as
/// [`super::split_header`] finds it: `Status`, `X-Keywords`, `X-Spam-*`,
/// `Old-X-Spam-*`, …) and without any line that names one of `filter`'s
/// fields where `filter` renames them (a wider region), with body lines written `>From `, `>>From `, … as
/// `From ` (mbox escaping, undone the same way whichever convention wrote
/// it), and ending in exactly one line end (blank lines at the end, such as
/// the one that separates messages in an mbox, are dropped; a missing final
/// line end is added). The empty line that ends the header block stays.
///
/// ```
/// use bayesmail::message::canonical;
/// let stored = b"From a@b.example Mon Jan  1 00:00:00 2024\r\nSubject: hi\r\nStatus: RO\r\n\r\n>From here\r\n\r\n";
/// assert_eq!(&canonical(stored)[..], b"Subject: hi\n\nFrom here\n");
/// ```
pub fn canonical(raw: &[u8]) -> Cow<'_, [u8]> {
    let ours_out = without_our_fields(split::strip_envelope(raw));
    let lf = super::normalize_line_ends(&ours_out);
    let message = &lf[..];
    let (head_end, _) = split::split_entity(message);
    let (head, body) = message.split_at(head_end);
    let mut out = Vec::with_capacity(message.len() + 1);
    kept_header_lines(head, |line| out.extend_from_slice(line));
    for line in body.split_inclusive(|&b| b == b'\n') {
        let quotes = line.iter().take_while(|&&b| b == b'>').count();
        if quotes > 0 && line[quotes..].starts_with(b"From ") {
            out.extend_from_slice(&line[quotes..]);
        } else {
            out.extend_from_slice(line);
        }
    }
    while out.ends_with(b"\n\n") {
        out.pop();
    }
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    if out == raw {
        Cow::Borrowed(raw)
    } else {
        Cow::Owned(out)
    }
}

/// A SHA-256 digest identifying a message for the learned-message
/// registry: of its [`canonical`] bytes. Stable across CRLF/LF storage,
/// mboxes, Maildirs, standard input, folder moves and re-filtering.
pub fn digest(raw: &[u8]) -> Digest {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(canonical(raw)).into()
}

/// The digest this message had in the registry of databases written before
/// [`digest`] took the canonical bytes (it kept trailing blank lines, a
/// missing final line end and mbox escaping as they were read). A message
/// a registry knows only by this digest is the same message: writers look
/// it up under both and move it to [`digest`].
pub fn legacy_digest(raw: &[u8]) -> Digest {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(legacy_bytes(raw)).into()
}

/// What [`legacy_digest`] hashes: LF line ends, no envelope line, no
/// volatile fields in the header block (the empty line that ends it was
/// hashed with the body).
fn legacy_bytes(raw: &[u8]) -> Vec<u8> {
    let lf = super::normalize_line_ends(raw);
    let message = split::strip_envelope(&lf);
    let (head_end, _) = split::split_entity(message);
    let (head, body) = message.split_at(head_end);
    let mut out = Vec::with_capacity(message.len());
    kept_header_lines(head, |line| out.extend_from_slice(line));
    out.extend_from_slice(body);
    out
}

/// Who a message is for the registry of learned messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Its [`digest`].
    pub digest: Digest,
    /// The [`legacy_digest`]s a registry may know it by, where they differ
    /// from [`Identity::digest`]: that of its bytes as read now, and that
    /// of the same bytes with one blank line more or less at the end (the
    /// earlier digest kept the blank line that ends a message in an mbox
    /// when a Maildir or a file was read whole, and lost it when the mbox
    /// reader read it).
    pub legacy: [Option<Digest>; 2],
}

impl Identity {
    /// The identity of the message `raw`.
    pub fn of(raw: &[u8]) -> Identity {
        Identity::with_canonical(raw, &canonical(raw))
    }

    /// The identity of the message `raw` whose [`canonical`] bytes are
    /// `canonical` (for a caller that has them already).
    pub(crate) fn with_canonical(raw: &[u8], canonical: &[u8]) -> Identity {
        use sha2::{Digest as _, Sha256};
        let digest: Digest = Sha256::digest(canonical).into();
        // Both earlier digests in one pass: the bytes as read now, and the
        // same with one blank line more or less at the end, share all but
        // their last byte.
        let bytes = legacy_bytes(raw);
        let (as_read, other): (Digest, Digest) = if bytes.ends_with(b"\n\n") {
            let mut less = Sha256::new();
            less.update(&bytes[..bytes.len() - 1]);
            let mut whole = less.clone();
            whole.update(b"\n");
            (whole.finalize().into(), less.finalize().into())
        } else {
            let mut whole = Sha256::new();
            whole.update(&bytes);
            let mut more = whole.clone();
            more.update(b"\n");
            (whole.finalize().into(), more.finalize().into())
        };
        let differs = |d: Digest| (d != digest).then_some(d);
        Identity {
            digest,
            legacy: [differs(as_read), differs(other)],
        }
    }

    /// The digests the registry may know the message by, the current one
    /// first.
    pub(crate) fn digests(&self) -> impl Iterator<Item = Digest> + '_ {
        std::iter::once(self.digest).chain(self.legacy.iter().flatten().copied())
    }
}

impl From<Digest> for Identity {
    fn from(digest: Digest) -> Identity {
        Identity {
            digest,
            legacy: [None; 2],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGE: &[u8] = b"Subject: hi\nFrom: a@b.example\n\nbody\nFrom now on\n";

    /// The ways a message reaches us, each as its bytes.
    fn stored_forms() -> Vec<Vec<u8>> {
        let crlf = String::from_utf8(MESSAGE.to_vec())
            .unwrap()
            .replace('\n', "\r\n")
            .into_bytes();
        let escaped = String::from_utf8(MESSAGE.to_vec())
            .unwrap()
            .replace("\nFrom now", "\n>From now")
            .into_bytes();
        let envelope = [&b"From a@b.example Wed Aug 16 00:29:00 2023\n"[..], MESSAGE].concat();
        vec![
            MESSAGE.to_vec(),
            crlf.clone(),
            [MESSAGE, b"\n"].concat(),
            [MESSAGE, b"\n\n\n"].concat(),
            [&crlf[..], b"\r\n"].concat(),
            MESSAGE[..MESSAGE.len() - 1].to_vec(),
            escaped.clone(),
            [&envelope[..], b"\n"].concat(),
            [b"From x Thu Jan  1 00:00:00 1970\n", &escaped[..], b"\n"].concat(),
            // As `filter` delivers it, and as a mail client marks it.
            [
                &b"X-Spam-Flag: YES\nX-Spam-Status: Yes, probability=1.000000,\n  cutoff=0.975000\n"[..],
                MESSAGE,
            ]
            .concat(),
            b"Subject: hi\nStatus: RO\nX-Keywords: $Junk\nFrom: a@b.example\nOld-X-Spam-Flag: YES\n\nbody\nFrom now on\n".to_vec(),
        ]
    }

    #[test]
    fn every_stored_form_has_the_same_canonical_bytes_and_digest() {
        for form in stored_forms() {
            assert_eq!(
                &canonical(&form)[..],
                MESSAGE,
                "{}",
                String::from_utf8_lossy(&form)
            );
            assert_eq!(digest(&form), digest(MESSAGE));
        }
    }

    #[test]
    fn content_still_tells_messages_apart() {
        let a = digest(MESSAGE);
        assert_ne!(
            a,
            digest(b"Subject: hi\nFrom: a@b.example\n\nbody!\nFrom now on\n")
        );
        assert_ne!(
            a,
            digest(b"Subject: ho\nFrom: a@b.example\n\nbody\nFrom now on\n")
        );
        // A blank line inside the body is content; only trailing ones go.
        assert_ne!(
            a,
            digest(b"Subject: hi\nFrom: a@b.example\n\nbody\n\nFrom now on\n")
        );
        // A body line that looks like a volatile field is content.
        assert_ne!(
            digest(b"Subject: hi\nBuy pills\nStatus: RO\n"),
            digest(b"Subject: hi\nBuy pills\n")
        );
    }

    #[test]
    fn the_digest_of_a_message_ending_in_one_line_end_is_what_it_was() {
        // Registries written before the canonical form hold these digests.
        for raw in [
            MESSAGE,
            b"Subject: hi\r\nStatus: RO\r\n\r\nbody\r\n",
            b"From a Mon Jan  1 00:00:00 2024\nSubject: hi\nBuy pills\n",
        ] {
            assert_eq!(digest(raw), legacy_digest(raw));
            let id = Identity::of(raw);
            assert_eq!((id.digest, id.legacy[0]), (digest(raw), None));
            // As a Maildir or a file read whole kept it before: with the
            // blank line an mbox puts after it.
            let blank = [raw, b"\n"].concat();
            assert_eq!(id.legacy[1], Some(legacy_digest(&blank)));
        }
        let trailing = [MESSAGE, b"\n"].concat();
        assert_eq!(
            Identity::of(&trailing),
            Identity {
                digest: digest(MESSAGE),
                legacy: [Some(legacy_digest(&trailing)), None]
            },
            "read from a Maildir now, known as the mbox reader read it then"
        );
        // The same in CRLF: the blank line is two bytes.
        let crlf = b"Subject: hi\r\n\r\nbody\r\n\r\n";
        let read_then = legacy_digest(&crlf[..crlf.len() - 2]);
        assert!(Identity::of(crlf).digests().any(|d| d == read_then));
        assert_ne!(read_then, legacy_digest(&crlf[..crlf.len() - 1]));
    }
}
