//! Where a message's header block ends and its body starts: one rule for
//! every reader of ours (parsing, the parts of a MIME message, the message
//! digest, and any later view of the raw bytes). It does not decide what
//! `filter` renames: [`crate::headers::Renamer`] reads the header region as
//! the delivery tools downstream of us read it, which is wider.
//!
//! # The rule
//! The header block is a run of lines, each either a **field**, a name of
//! one or more printable ASCII characters (33..=126) other than `:`, then
//! optional spaces or tabs, then `:`; or a **continuation**, a line starting
//! with a space or a tab that follows a field. It ends at the first line
//! that is neither: an empty line (`\n` or `\r\n`), which belongs to neither
//! part, or any other line, which starts the body. This is the rule of
//! Python's `email.feedparser` (and of mail readers that show such a body),
//! so a spammer who leaves out the blank line cannot hide the body from us.
//! Two deliberate departures from Python's `headerRE`
//! (`^(From |[\041-\071\073-\176]*:|[\t ])`):
//! - Spaces or tabs before the `:` (`Subject : hi`) still make a field, as
//!   RFC 5322's obsolete syntax allows and real mail writes; an empty name
//!   (a line starting with `:`) does not.
//! - A line starting with a space or a tab before any field is not a
//!   continuation of nothing: it starts the body, so its text is read.
//!
//! As in Python, a body line such as `http://x.example/` right after the
//! fields *is* a field syntactically (`http` is a valid name) and so stays
//! in the header block; the body starts at the first line that cannot be a
//! field, such as one with a space before its first `:`.
//!
//! # The envelope line
//! A leading mbox envelope line (`From sender date`) is part of neither: it
//! is dropped here, in [`strip_envelope`], and only at the top of a whole
//! message ([`split_header`]); a MIME part or a forwarded message is split
//! by [`split_entity`] without it, so a part whose text starts with
//! `From now on` keeps that line as text. Inside the header block a
//! `From ` line is not a field and so starts the body.

/// Splits a message into its header block and its body, on LF or CRLF
/// input. The header block holds the field lines with their line ends; the
/// body starts after the empty line that ends the header block, or at the
/// first line that is neither a field nor a continuation (see the module
/// documentation for the rule). A leading mbox `From ` envelope line is in
/// neither.
///
/// ```
/// use bayesmail::message::split_header;
///
/// let (head, body) = split_header(b"Subject: hi\r\n\r\nbody\r\n");
/// assert_eq!((head, body), (&b"Subject: hi\r\n"[..], &b"body\r\n"[..]));
/// // No blank line: the first line that is not a field starts the body.
/// let (head, body) = split_header(b"Subject: cheap meds\nBuy pills now\n");
/// assert_eq!((head, body), (&b"Subject: cheap meds\n"[..], &b"Buy pills now\n"[..]));
/// ```
pub fn split_header(raw: &[u8]) -> (&[u8], &[u8]) {
    let raw = strip_envelope(raw);
    let (head_end, body_start) = split_entity(raw);
    (&raw[..head_end], &raw[body_start..])
}

/// How far into a message (after its envelope line) [`looks_like_mail`]
/// looks for the end of its first header field's name.
pub const MAIL_SNIFF_BYTES: usize = 4096;

/// Whether `raw` looks like a mail message at all: its first line, after a
/// leading mbox envelope line, is a header field by the rule of
/// [`split_header`] (a name of printable ASCII other than `:`, optional
/// spaces or tabs, then `:`), with the `:` within the first
/// [`MAIL_SNIFF_BYTES`] bytes. Every message starts with a field; a
/// picture, a binary or a text file almost never does. The commands that
/// read mail from files skip what fails this (`filter` does not use it: it
/// passes everything on).
///
/// ```
/// use bayesmail::message::looks_like_mail;
/// assert!(looks_like_mail(b"Return-Path: <a@b.example>\nSubject: hi\n\nbody\n"));
/// assert!(looks_like_mail(b"From a@b Mon Jan  1 00:00:00 2024\nSubject: hi\n\nbody\n"));
/// assert!(!looks_like_mail(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"));
/// assert!(!looks_like_mail(b"Bash is the shell, or command language interpreter.\n"));
/// ```
pub fn looks_like_mail(raw: &[u8]) -> bool {
    let raw = strip_envelope(raw);
    let window = &raw[..raw.len().min(MAIL_SNIFF_BYTES)];
    let line = window.split(|&b| b == b'\n').next().unwrap_or_default();
    is_field(line)
}

/// `raw` without a leading mbox envelope line (`From ` and the rest of that
/// line). The one place where the envelope line is recognised for reading;
/// only a whole message can have one.
pub(crate) fn strip_envelope(raw: &[u8]) -> &[u8] {
    if raw.starts_with(b"From ") {
        memchr::memchr(b'\n', raw).map_or(&[][..], |p| &raw[p + 1..])
    } else {
        raw
    }
}

/// Where the header block of one entity (a message without its envelope
/// line, a MIME part, a forwarded message) ends and where its body starts:
/// `(head_end, body_start)`, equal if no empty line separates them. Linear
/// in the length of the header block.
pub(crate) fn split_entity(raw: &[u8]) -> (usize, usize) {
    let mut at = 0;
    let mut in_field = false;
    while at < raw.len() {
        let rest = &raw[at..];
        let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |p| p + 1);
        let line = &rest[..end];
        if line == b"\n" || line == b"\r\n" {
            return (at, at + end);
        }
        let continuation = in_field && matches!(line[0], b' ' | b'\t');
        if !continuation && !is_field(line) {
            return (at, at);
        }
        in_field = true;
        at += end;
    }
    (at, at)
}

/// Whether `line` starts a header field: a name of printable ASCII other
/// than `:`, optional spaces or tabs, then `:`.
fn is_field(line: &[u8]) -> bool {
    let name = line
        .iter()
        .position(|&b| !(33..=126).contains(&b) || b == b':')
        .unwrap_or(line.len());
    if name == 0 {
        return false;
    }
    let colon = line[name..]
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .map(|p| name + p);
    colon.is_some_and(|c| line[c] == b':')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(raw: &[u8]) -> (&str, &str) {
        let (head, body) = split_header(raw);
        (
            std::str::from_utf8(head).unwrap(),
            std::str::from_utf8(body).unwrap(),
        )
    }

    #[test]
    fn an_empty_line_ends_the_header_block_and_belongs_to_neither() {
        assert_eq!(
            split(b"A: 1\nB: 2\n\nbody\n\nmore\n"),
            ("A: 1\nB: 2\n", "body\n\nmore\n")
        );
        assert_eq!(
            split(b"A: 1\r\nB: 2\r\n\r\nbody\r\n"),
            ("A: 1\r\nB: 2\r\n", "body\r\n")
        );
        assert_eq!(split(b"\nbody\n"), ("", "body\n"));
        assert_eq!(split(b"A: 1\n"), ("A: 1\n", ""));
        assert_eq!(split(b"A: 1"), ("A: 1", ""));
        assert_eq!(split(b""), ("", ""));
    }

    #[test]
    fn a_line_that_is_not_a_field_starts_the_body() {
        let raw = b"Subject: cheap meds\nBuy pills now at\nhttp://x.example/\n";
        assert_eq!(
            split(raw),
            (
                "Subject: cheap meds\n",
                "Buy pills now at\nhttp://x.example/\n"
            )
        );
        let crlf = b"Subject: cheap meds\r\nBuy pills\r\n\r\nmore\r\n";
        assert_eq!(
            split(crlf),
            ("Subject: cheap meds\r\n", "Buy pills\r\n\r\nmore\r\n")
        );
        // No header at all: everything is body.
        assert_eq!(split(b"just text\n\nA: 1\n"), ("", "just text\n\nA: 1\n"));
        // A stray envelope line inside the header block is not a field.
        assert_eq!(split(b"A: 1\nFrom x\nB: 2\n"), ("A: 1\n", "From x\nB: 2\n"));
    }

    #[test]
    fn continuation_lines_belong_to_the_field_before_them() {
        assert_eq!(
            split(b"Subject: a\n  b\n\tc\nX: y\n\nbody"),
            ("Subject: a\n  b\n\tc\nX: y\n", "body")
        );
        // Before any field there is nothing to continue.
        assert_eq!(
            split(b" folded\nA: 1\n\nbody"),
            ("", " folded\nA: 1\n\nbody")
        );
        // A line of white space continues the field (Python reads it so).
        assert_eq!(split(b"A: 1\n \nbody\n"), ("A: 1\n \n", "body\n"));
    }

    #[test]
    fn field_names_are_printable_ascii_without_colon() {
        for field in [
            &b"X-Odd!#$%&'*+.^_`|~{}[]<>\"(),;=?@\\/: v\n"[..],
            b"Subject : spaced\n",
            b"Subject\t: tabbed\n",
            b"Subject:\n",
            b"http://x.example/\n",
        ] {
            let raw = [field, b"\nbody"].concat();
            assert_eq!(
                split_header(&raw).0,
                field,
                "{:?}",
                String::from_utf8_lossy(field)
            );
        }
        for not_field in [
            &b": no name\n"[..],
            b"Two words: no\n",
            b"X-B\xe4d: 8-bit\n",
            b"X-Nul\0: v\n",
            b"no colon at all\n",
            b"\r\n",
            b"\rA: 1\n",
        ] {
            let raw = [b"A: 1\n", not_field, b"B: 2\n\nbody"].concat();
            assert_eq!(
                split_header(&raw).0,
                b"A: 1\n",
                "{:?}",
                String::from_utf8_lossy(not_field)
            );
        }
    }

    #[test]
    fn a_leading_envelope_line_is_in_neither_part() {
        let raw = b"From a@b Mon Jan  1 00:00:00 2024\nSubject: hi\n\nbody\n";
        assert_eq!(split(raw), ("Subject: hi\n", "body\n"));
        assert_eq!(split(b"From a@b"), ("", ""));
        // A part is split without it: `From now on` is text.
        assert_eq!(split_entity(b"From now on\n"), (0, 0));
    }

    /// Issue 26, U5: what does not start with a header field is not mail.
    #[test]
    fn only_what_starts_with_a_header_field_looks_like_mail() {
        for mail in [
            &b"Subject: hi\n\nbody"[..],
            b"Received: from x\r\n\tby y\r\n\r\n",
            b"X-Odd!#: v\n",
            b"From a@b Mon Jan  1 00:00:00 2024\r\nFrom: a@b\r\n",
            b"Subject : spaced\n",
            b"Subject:",
        ] {
            assert!(looks_like_mail(mail), "{:?}", String::from_utf8_lossy(mail));
        }
        let long_name = [vec![b'X'; MAIL_SNIFF_BYTES], b": v\n".to_vec()].concat();
        for not_mail in [
            &b""[..],
            b"\n",
            b"\nSubject: after a blank line\n",
            b" folded: first\n",
            b"just text\nSubject: x\n",
            b"X-B\xe4d: 8-bit name\n",
            b": no name\n",
            b"\x7fELF\x02\x01\x01\0",
            b"%PDF-1.4\n",
            b"From a@b Mon Jan  1 00:00:00 2024\n",
            b"From a@b Mon Jan  1 00:00:00 2024\nno field\n",
            &long_name,
        ] {
            assert!(
                !looks_like_mail(not_mail),
                "{:?}",
                String::from_utf8_lossy(not_mail)
            );
        }
    }

    #[test]
    fn lf_and_crlf_split_at_the_same_lines() {
        let lf = b"A: 1\n b\nC : 2\nnot a field\n\nrest\n";
        let crlf = b"A: 1\r\n b\r\nC : 2\r\nnot a field\r\n\r\nrest\r\n";
        let (h1, b1) = split_header(lf);
        let (h2, b2) = split_header(crlf);
        assert_eq!(h1.iter().filter(|&&b| b == b'\n').count(), 3);
        assert_eq!(h2.iter().filter(|&&b| b == b'\n').count(), 3);
        assert!(b1.starts_with(b"not a field\n"));
        assert!(b2.starts_with(b"not a field\r\n"));
    }
}
