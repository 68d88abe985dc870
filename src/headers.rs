//! Adding our verdict headers to a message without changing anything else.
//!
//! [`HeaderBlock::locate`] checks that a raw message starts with a header
//! block we can add to and finds where our fields go; [`HeaderBlock::start`]
//! writes the message up to there and our fields, and returns a [`Renamer`]
//! through which the rest of the message is written, in one piece or in
//! chunks. Every byte goes out as it came, with two documented changes:
//!
//! - **Our fields go at the top**, after a first-line mbox envelope
//!   (`From sender date`) if there is one, as trace fields are added. Every
//!   consumer reads the top of a message first, so none misses them however
//!   long or malformed the rest of the header block is, and where the
//!   header block ends does not matter.
//! - **Forged fields are renamed.** A line of the header region that starts
//!   with the name of one of [`OUR_FIELDS`](crate::vocab::OUR_FIELDS)
//!   followed by `:`, a space, a tab or a
//!   NUL (where Dovecot ends a name), in any case and with any number of
//!   CRs anywhere in it (maildrop deletes them), say a spammer's
//!   `X-Spam-Flag: YES`, gets [`RENAMED_PREFIX`] in front
//!   (`Old-X-Spam-Flag: YES`), the convention of `formail -i`. Rules that
//!   match `^X-Spam-Flag:` then see only ours, and the old value stays
//!   readable. The header region here is the widest any consumer reads: it
//!   runs to the first empty line (`\n`, or `\r\n` in a message whose
//!   lines end in CRLF: procmail reads an LF message's header on past a
//!   `\r\n` line), past malformed lines
//!   (8-bit or NUL bytes in a name, a stray `From ` line, a line starting
//!   with `:`) that end the header block for our own parser, because
//!   procmail, maildrop or sieve may read on.
//!
//! Our fields go on every message except two kinds, which go out without
//! them (forged fields still renamed): empty input (or an envelope line
//! alone), and a message whose first line (after an optional envelope
//! line) starts with a space or a tab, which would read as a continuation
//! of our last field. A message whose first line is not a well-formed
//! field (binary junk, a body without headers, an 8-bit field name) still
//! gets them: its header block ends at that line, which starts the body,
//! before our fields are added and after, so nothing reads differently; and
//! a spammer cannot dodge our verdict by starting with a broken line.

use std::io::{self, Write};

use crate::vocab::RENAMED_PREFIX;

/// Where our fields go in a message, and with which line ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderBlock {
    /// Byte offset of the first header line: just past the envelope line,
    /// or 0.
    top: usize,
    /// The line ending of the message: `\r\n` if its first line ends so,
    /// else `\n`.
    eol: &'static [u8],
}

impl HeaderBlock {
    /// Finds where our fields go in `raw`, or `None` if they cannot go in
    /// (see the module documentation). Only the first two lines are read,
    /// so a prefix of a long message is enough.
    ///
    /// ```
    /// use bayesmail::headers::HeaderBlock;
    ///
    /// let raw = b"Subject: hi\r\nX-Spam-Status: No\r\n\r\nbody\r\n";
    /// let block = HeaderBlock::locate(raw).unwrap();
    /// let mut out = Vec::new();
    /// block.write(&mut out, raw, &[("X-Spam-Status", "Yes")]).unwrap();
    /// assert_eq!(
    ///     out,
    ///     b"X-Spam-Status: Yes\r\nSubject: hi\r\nOld-X-Spam-Status: No\r\n\r\nbody\r\n"
    /// );
    /// assert!(HeaderBlock::locate(b" folded: no\r\n").is_none());
    /// ```
    pub fn locate(raw: &[u8]) -> Option<HeaderBlock> {
        let (first, after_first) = line_at(raw, 0)?;
        let (top, line) = if first.starts_with(b"From ") {
            if !first.ends_with(b"\n") {
                return None;
            }
            (
                after_first,
                line_at(raw, after_first).map_or(&b""[..], |l| l.0),
            )
        } else {
            (0, first)
        };
        // The message's own line ending: that of its first header line, not
        // of an envelope line the delivery agent may have written its own way.
        let eol: &'static [u8] =
            if line.ends_with(b"\r\n") || (line.is_empty() && first.ends_with(b"\r\n")) {
                b"\r\n"
            } else {
                b"\n"
            };
        let continuation = matches!(line.first(), Some(b' ' | b'\t'));
        (!continuation).then_some(HeaderBlock { top, eol })
    }

    /// The message's line ending, which our fields use too.
    #[cfg(test)]
    pub(crate) fn eol(&self) -> &'static [u8] {
        self.eol
    }

    /// Writes the start of `raw` (the input `locate` was given, or a prefix
    /// of the message at least that long) up to where our fields go, then
    /// `fields` (name, value), each on its own line. Returns the renamer
    /// through which the rest of the message, from [`HeaderBlock::top`] on,
    /// must be written. Values must be one line.
    pub fn start(
        &self,
        out: &mut dyn Write,
        raw: &[u8],
        fields: &[(&str, impl AsRef<str>)],
    ) -> io::Result<Renamer> {
        out.write_all(&raw[..self.top])?;
        for (name, value) in fields {
            let value = value.as_ref();
            debug_assert!(!value.contains(['\r', '\n']), "header values are one line");
            out.write_all(name.as_bytes())?;
            out.write_all(b": ")?;
            out.write_all(value.as_bytes())?;
            out.write_all(self.eol)?;
        }
        Ok(Renamer::new(self.eol == b"\r\n"))
    }

    /// Offset in the message where the part written through the renamer
    /// starts.
    pub fn top(&self) -> usize {
        self.top
    }

    /// Writes the whole of `raw` with `fields` added and fields of ours
    /// already present renamed.
    pub fn write(
        &self,
        out: &mut dyn Write,
        raw: &[u8],
        fields: &[(&str, impl AsRef<str>)],
    ) -> io::Result<()> {
        let mut renamer = self.start(out, raw, fields)?;
        renamer.write(out, &raw[self.top..])?;
        renamer.finish(out)
    }
}

/// Writes a message (`raw`, then `rest` when the message was larger than
/// what was read into memory) with `fields` added at the top and fields of
/// ours already in it renamed; without `fields` when they cannot go in (the
/// message starts with a folded line, or is empty). Returns whether they
/// went in.
pub fn write_with_fields(
    out: &mut dyn Write,
    raw: &[u8],
    rest: Option<&mut dyn io::Read>,
    fields: &[(&str, impl AsRef<str>)],
) -> io::Result<bool> {
    let (mut renamer, from, added) = match HeaderBlock::locate(raw) {
        Some(block) => (block.start(out, raw, fields)?, block.top(), true),
        None => {
            let crlf = memchr::memchr(b'\n', raw).is_some_and(|p| p > 0 && raw[p - 1] == b'\r');
            (Renamer::new(crlf), 0, false)
        }
    };
    renamer.write(out, &raw[from..])?;
    if let Some(rest) = rest {
        let mut buf = vec![0; 64 * 1024];
        loop {
            let n = match rest.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            renamer.write(out, &buf[..n])?;
        }
    }
    renamer.finish(out)?;
    Ok(added)
}

/// Writes a message's header region through, renaming fields named like
/// ours (see the module documentation); everything after the first empty
/// line goes through as it is. Takes the message in chunks of any size, and
/// decides each line on its whole field name however long (CRs in it
/// included) with constant work per byte and a few bytes of memory: the CRs
/// held back with the start of a line are counted, not kept.
/// Wider than [`crate::message::split_header`]'s block on purpose: procmail's view, not ours.
#[derive(Debug, Default)]
pub struct Renamer {
    /// The message's lines end in CRLF, so a `\r\n` line ends the header
    /// region; in an LF message only `\n` does (procmail reads on past a
    /// `\r\n` line there).
    crlf: bool,
    state: State,
    /// The start of the current line, held until it is known whether it
    /// names a field of ours: each byte other than CR with the number of
    /// CRs before it (at most the longest name and one byte).
    held: Vec<(u64, u8)>,
    /// CRs held after the last byte of `held`.
    crs: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a header line (`held` and `crs` hold what was read
    /// of it).
    #[default]
    LineStart,
    /// Inside a header line that has been decided.
    InLine,
    /// Past the header region: bytes go through.
    Body,
}

impl Renamer {
    /// A renamer for a message whose lines end in CRLF (`crlf`) or LF.
    pub fn new(crlf: bool) -> Renamer {
        Renamer {
            crlf,
            ..Renamer::default()
        }
    }

    /// Writes `chunk`, the next bytes of the message.
    pub fn write(&mut self, out: &mut dyn Write, mut chunk: &[u8]) -> io::Result<()> {
        while !chunk.is_empty() {
            match self.state {
                State::Body => return out.write_all(chunk),
                State::InLine => match memchr::memchr(b'\n', chunk) {
                    Some(p) => {
                        out.write_all(&chunk[..=p])?;
                        chunk = &chunk[p + 1..];
                        self.state = State::LineStart;
                    }
                    None => return out.write_all(chunk),
                },
                State::LineStart => {
                    let crs = chunk.iter().take_while(|&&b| b == b'\r').count();
                    self.crs += crs as u64;
                    chunk = &chunk[crs..];
                    if let Some((&byte, rest)) = chunk.split_first() {
                        chunk = rest;
                        self.held.push((std::mem::take(&mut self.crs), byte));
                        self.decide(out)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes what is held back at the end of the message.
    pub fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.release(out)
    }

    /// Looks at the start of the current line, its last byte just added to
    /// `held`, and once it tells, writes it (renamed if it names a field of
    /// ours) and moves on.
    fn decide(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let next = match self.held[..] {
            [(0, b'\n')] => State::Body,
            [(1, b'\n')] if self.crlf => State::Body,
            _ => {
                let mut name = [0; NAME_HELD];
                for (slot, &(_, byte)) in name.iter_mut().zip(&self.held) {
                    *slot = byte;
                }
                match crate::vocab::names_our_field(&name[..self.held.len()]) {
                    None => return Ok(()),
                    Some(true) => {
                        out.write_all(RENAMED_PREFIX.as_bytes())?;
                        State::InLine
                    }
                    Some(false) if self.held.last().is_some_and(|&(_, b)| b == b'\n') => {
                        State::LineStart
                    }
                    Some(false) => State::InLine,
                }
            }
        };
        self.release(out)?;
        self.state = next;
        Ok(())
    }

    /// Writes the held start of the line as it came, and forgets it.
    fn release(&mut self, out: &mut dyn Write) -> io::Result<()> {
        for (crs, byte) in std::mem::take(&mut self.held) {
            write_crs(out, crs)?;
            out.write_all(&[byte])?;
        }
        write_crs(out, std::mem::take(&mut self.crs))
    }
}

/// Writes `n` CRs.
fn write_crs(out: &mut dyn Write, mut n: u64) -> io::Result<()> {
    const CRS: [u8; 64] = [b'\r'; 64];
    while n > 0 {
        let k = n.min(CRS.len() as u64);
        out.write_all(&CRS[..k as usize])?;
        n -= k;
    }
    Ok(())
}

/// The most bytes (CRs left out) a line's start can have before
/// [`crate::vocab::names_our_field`] decides it: the longest name and the
/// byte after it.
const NAME_HELD: usize = 14;

/// The line starting at `at` with its line ending, and the offset after it;
/// `None` at the end of the input.
fn line_at(raw: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if at >= raw.len() {
        return None;
    }
    let end = memchr::memchr(b'\n', &raw[at..]).map_or(raw.len(), |p| at + p + 1);
    Some((&raw[at..end], end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS_LINE: &[u8] = b"X-Spam-Status: No, probability=0.01";

    fn annotate(raw: &[u8]) -> Option<Vec<u8>> {
        let block = HeaderBlock::locate(raw)?;
        let mut out = Vec::new();
        block
            .write(&mut out, raw, &[("X-Spam-Status", "No, probability=0.01")])
            .unwrap();
        Some(out)
    }

    /// `raw` with our line (and `eol`) put at offset `at`.
    fn with_ours_at(raw: &[u8], at: usize, eol: &[u8]) -> Vec<u8> {
        [&raw[..at], OURS_LINE, eol, &raw[at..]].concat()
    }

    #[test]
    fn puts_our_fields_at_the_top_keeping_line_endings() {
        let lf = b"A: 1\nB: 2\n\nbody\n\nmore\n";
        assert_eq!(annotate(lf).unwrap(), with_ours_at(lf, 0, b"\n"));
        let crlf = b"A: 1\r\nB: 2\r\n\r\nbody\r\n";
        assert_eq!(annotate(crlf).unwrap(), with_ours_at(crlf, 0, b"\r\n"));
    }

    #[test]
    fn goes_after_the_envelope_line() {
        let raw = b"From a@b Mon Jan  1 00:00:00 2024\nSubject: a\n  b\n\nbody";
        let after_envelope = raw.iter().position(|&b| b == b'\n').unwrap() + 1;
        assert_eq!(
            annotate(raw).unwrap(),
            with_ours_at(raw, after_envelope, b"\n")
        );
        let empty_block = b"From x\n\nbody\n";
        assert_eq!(
            annotate(empty_block).unwrap(),
            with_ours_at(empty_block, 7, b"\n")
        );
    }

    #[test]
    fn renames_fields_of_ours_whatever_their_case() {
        let raw = b"x-spam-status: No,\n  forged\nX-Spam-Flag : YES\nX-Spam-Level: **\n\nX-Spam-Status: in body\n";
        let mut want = OURS_LINE.to_vec();
        want.extend_from_slice(b"\nOld-x-spam-status: No,\n  forged\nOld-X-Spam-Flag : YES\nX-Spam-Level: **\n\nX-Spam-Status: in body\n");
        assert_eq!(annotate(raw).unwrap(), want);
    }

    #[test]
    fn renames_forged_fields_after_malformed_lines() {
        // Each malformed line ends the header block for a strict parser but
        // not for every consumer, so the field after it is still renamed.
        for bad in [
            &b"X-B\xe4d: 8-bit name"[..],
            b"X-N\0l: nul in name",
            b"From someone else",
            b": x",
            b"not a header at all",
        ] {
            let raw = [b"Subject: hi\n", bad, b"\nX-Spam-Flag: YES\n\nbody\n"].concat();
            let out = annotate(&raw).unwrap();
            let want = [
                OURS_LINE,
                b"\nSubject: hi\n",
                bad,
                b"\nOld-X-Spam-Flag: YES\n\nbody\n",
            ]
            .concat();
            assert_eq!(out, want, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn renames_spellings_that_some_consumer_reads_as_ours() {
        // maildrop deletes CRs before matching; Dovecot ends a name at NUL.
        for forged in [
            &b"\rX-Spam-Flag: YES\n"[..],
            b"X-Spam-\rFlag: YES\n",
            b"X-Spam-Flag\r: YES\n",
            b"\r\r\rX-Spam-Flag: YES\n",
            b"X-Spam-Flag\0: YES\n",
            b"X-Spam-Status\0garbage: Yes\n",
        ] {
            let raw = [b"Subject: hi\n", forged, b"\nbody\n"].concat();
            let out = annotate(&raw).unwrap();
            let want = [OURS_LINE, b"\nSubject: hi\nOld-", forged, b"\nbody\n"].concat();
            assert_eq!(out, want, "{:?}", String::from_utf8_lossy(forged));
        }
    }

    #[test]
    fn renames_a_name_spread_over_any_number_of_crs() {
        // maildrop deletes every CR, however many: the whole name decides,
        // not its first few hundred bytes.
        for crs in [1, 255, 256, 300, 100_000] {
            let cr = vec![b'\r'; crs];
            for forged in [
                [b"X-Spam-", &cr[..], b"Flag: YES\n"].concat(),
                [&cr[..], b"x-spam-status: No\n"].concat(),
                [b"X-Spam-Flag", &cr[..], b": YES\n"].concat(),
                [b"X", &cr[..], b"-Spam-Flag", &cr[..], b"\0: YES\n"].concat(),
            ] {
                let raw = [b"Subject: hi\n", &forged[..], b"\nX-Spam-Flag: body\n"].concat();
                let want = [
                    OURS_LINE,
                    b"\nSubject: hi\nOld-",
                    &forged[..],
                    b"\nX-Spam-Flag: body\n",
                ]
                .concat();
                let block = HeaderBlock::locate(&raw).unwrap();
                for size in [1, 7, 4096, raw.len()] {
                    let mut out = Vec::new();
                    let mut renamer = block
                        .start(&mut out, &raw, &[("X-Spam-Status", "No, probability=0.01")])
                        .unwrap();
                    for chunk in raw.chunks(size) {
                        renamer.write(&mut out, chunk).unwrap();
                    }
                    renamer.finish(&mut out).unwrap();
                    assert!(
                        out == want,
                        "{crs} CRs, chunks of {size}: {:?}",
                        &forged[..20.min(forged.len())]
                    );
                }
            }
            // Look-alikes and an empty line made of CRs stay as they are.
            for alike in [
                [b"X-Spam-", &cr[..], b"Flagged: x\n"].concat(),
                [b"X-Spam-Flag", &cr[..], b"\n"].concat(),
            ] {
                let raw = [b"A: 1\n", &alike[..], b"\nbody\n"].concat();
                assert!(
                    annotate(&raw).unwrap() == with_ours_at(&raw, 0, b"\n"),
                    "{crs}"
                );
            }
        }
    }

    #[test]
    fn the_longest_name_and_a_byte_are_all_that_is_held() {
        let longest = crate::vocab::OUR_FIELDS
            .iter()
            .map(|n| n.len())
            .max()
            .unwrap();
        assert_eq!(NAME_HELD, longest + 1);
    }

    #[test]
    fn leaves_look_alikes_continuations_and_the_body_alone() {
        let raw =
            b"X-Spam-Flagged: x\nX-Spam-Statu: y\nA: 1\n X-Spam-Flag: YES\n\nX-Spam-Flag: YES\n";
        assert_eq!(annotate(raw).unwrap(), with_ours_at(raw, 0, b"\n"));
        // In an LF message a `\r\n` line does not end the header for
        // procmail, so a field after it is still renamed.
        let lf = b"A: 1\n\r\nX-Spam-Flag: YES\n\nX-Spam-Flag: body\n";
        let want = [
            OURS_LINE,
            b"\nA: 1\n\r\nOld-X-Spam-Flag: YES\n\nX-Spam-Flag: body\n",
        ]
        .concat();
        assert_eq!(annotate(lf).unwrap(), want);
        let crlf = b"A: 1\r\n\r\nX-Spam-Flag: YES\r\n";
        assert_eq!(annotate(crlf).unwrap(), with_ours_at(crlf, 0, b"\r\n"));
    }

    #[test]
    fn chunked_writes_give_the_same_bytes() {
        let raw =
            b"From x\nA: 1\nX-Spam-Flag: YES\nx-spam-status:\tNo\r\nB: 2\n\nX-Spam-Flag: YES\n";
        let block = HeaderBlock::locate(raw).unwrap();
        let whole = annotate(raw).unwrap();
        for size in 1..raw.len() {
            let mut out = Vec::new();
            let mut renamer = block
                .start(&mut out, raw, &[("X-Spam-Status", "No, probability=0.01")])
                .unwrap();
            for chunk in raw[block.top()..].chunks(size) {
                renamer.write(&mut out, chunk).unwrap();
            }
            renamer.finish(&mut out).unwrap();
            assert_eq!(out, whole, "chunks of {size}");
        }
    }

    #[test]
    fn a_prefix_of_a_long_header_is_enough() {
        // Where the header block ends does not matter: the fields go at the
        // top whatever follows.
        let mut raw = b"Subject: hi\nX-Long: ".to_vec();
        raw.extend(std::iter::repeat_n(b'a', 100_000));
        let block = HeaderBlock::locate(&raw[..40]).unwrap();
        assert_eq!(block.top(), 0);
    }

    #[test]
    fn an_envelope_line_with_another_line_ending_does_not_decide_ours() {
        let mixed = b"From a@b Mon Jan  1 10:00:00 2024\nA: 1\r\n\r\nbody\r\n";
        let block = HeaderBlock::locate(mixed).unwrap();
        assert_eq!(block.eol(), b"\r\n");
        let lf_after_crlf = b"From a@b Mon Jan  1 10:00:00 2024\r\nA: 1\n\nbody\n";
        assert_eq!(HeaderBlock::locate(lf_after_crlf).unwrap().eol(), b"\n");
    }

    #[test]
    fn headers_without_body_or_final_line_end() {
        for raw in [&b"A: 1\nB: 2"[..], b"A: 1"] {
            assert_eq!(annotate(raw).unwrap(), with_ours_at(raw, 0, b"\n"));
        }
        let crlf = b"A: 1\r\n";
        assert_eq!(annotate(crlf).unwrap(), with_ours_at(crlf, 0, b"\r\n"));
    }

    #[test]
    fn empty_header_block() {
        assert_eq!(
            annotate(b"\nbody\n").unwrap(),
            with_ours_at(b"\nbody\n", 0, b"\n")
        );
    }

    #[test]
    fn no_well_formed_header_block_still_gets_our_fields() {
        for raw in [
            &b"just text\n\nA: 1\n"[..],
            b"\x00\x01\x02",
            b"bad name: 1\n",
            b"X-B\xe4d: 8-bit\nX-Spam-Flag: YES\n\nbody\n",
        ] {
            let out = annotate(raw).unwrap();
            assert!(out.starts_with(OURS_LINE), "{raw:?}");
            assert!(!out.windows(13).any(|w| w == b"\nX-Spam-Flag:"), "{raw:?}");
        }
        let envelope_only = b"From x\n";
        assert_eq!(
            annotate(envelope_only).unwrap(),
            with_ours_at(envelope_only, 7, b"\n")
        );
    }

    #[test]
    fn where_our_fields_cannot_go() {
        for raw in [
            &b""[..],
            b" A: 1\n",
            b"\tA: 1\n",
            b"From x\n A: 1\n",
            b"From x",
        ] {
            assert_eq!(HeaderBlock::locate(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn forged_fields_are_renamed_without_our_fields_too() {
        let raw = b" folded first\nX-Spam-Flag: YES\n\nX-Spam-Flag: body\n";
        let mut out = Vec::new();
        let mut renamer = Renamer::new(false);
        renamer.write(&mut out, raw).unwrap();
        renamer.finish(&mut out).unwrap();
        assert_eq!(
            out,
            b" folded first\nOld-X-Spam-Flag: YES\n\nX-Spam-Flag: body\n"
        );
    }
}
