//! Adding our verdict headers to a message without changing anything else.
//!
//! [`HeaderBlock::locate`] finds where the header block of a raw message
//! ends and which line ending it uses; [`HeaderBlock::write`] writes the
//! message with our fields inserted at the end of the header block. Every
//! other byte goes out as it came, with one documented exception: a header
//! field that arrives already named like one of ours ([`OURS`], say a
//! spammer's forged `X-Spam-Status: No`) is renamed by putting
//! [`RENAMED_PREFIX`] in front of its name (`Old-X-Spam-Status: No`), the
//! convention of `formail -i`. Rules that match `^X-Spam-Status:` then see
//! only our verdict, and the old value stays readable.
//!
//! The header block is the lines from the start of the message that are
//! header fields (`Name: value`, name of printable ASCII without spaces),
//! their folded continuation lines, and a first-line mbox envelope
//! (`From sender date`, which procmail and other local delivery agents pass
//! along). It ends at the first other line: normally the blank line before
//! the body; for a malformed message, the first line that is not a header.
//! A message whose first line is not a header field has no header block we
//! can add to.

use std::io::{self, Write};

/// The fields we write. Fields with these names already in a message are
/// renamed, case-insensitively.
pub const OURS: [&str; 2] = ["X-Spam-Flag", "X-Spam-Status"];

/// What is put in front of the name of a field of ours that was already in
/// the message.
pub const RENAMED_PREFIX: &str = "Old-";

/// Where a message's header block ends, and what needs renaming in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderBlock {
    /// Byte offset just past the last line of the header block (the start
    /// of the blank separator line, of the body, or the end of the input).
    end: usize,
    /// The line ending of the header block: `\r\n` if its first line ends
    /// so, else `\n`.
    eol: &'static [u8],
    /// The header block runs to the end of the input without a final line
    /// ending, so one must be written before our fields.
    unterminated: bool,
    /// The block runs to the end of the input (no blank line or body seen).
    at_input_end: bool,
    /// Offsets of the lines that start a field named like one of ours.
    ours: Vec<usize>,
}

impl HeaderBlock {
    /// Finds the header block of `raw`, or `None` if the message does not
    /// start with a header field (after an optional mbox envelope line), or
    /// with the blank line of an empty header block.
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
    ///     b"Subject: hi\r\nOld-X-Spam-Status: No\r\nX-Spam-Status: Yes\r\n\r\nbody\r\n"
    /// );
    /// assert!(HeaderBlock::locate(b"\x89PNG\r\n").is_none());
    /// ```
    pub fn locate(raw: &[u8]) -> Option<HeaderBlock> {
        let mut block = HeaderBlock {
            end: raw.len(),
            eol: b"\n",
            unterminated: false,
            at_input_end: true,
            ours: Vec::new(),
        };
        let mut fields = 0usize;
        let mut at = 0;
        let mut first = true;
        while at < raw.len() {
            let (line, next) = match memchr::memchr(b'\n', &raw[at..]) {
                Some(p) => (&raw[at..at + p], at + p + 1),
                None => (&raw[at..], raw.len()),
            };
            if first && line.ends_with(b"\r") && raw[next - 1] == b'\n' {
                block.eol = b"\r\n";
            }
            let content = line.strip_suffix(b"\r").unwrap_or(line);
            let kind = if first && content.starts_with(b"From ") {
                Line::Envelope
            } else if fields > 0 && matches!(content.first(), Some(b' ' | b'\t')) {
                Line::Continuation
            } else if let Some(name) = field_name(content) {
                fields += 1;
                if OURS.iter().any(|o| o.as_bytes().eq_ignore_ascii_case(name)) {
                    block.ours.push(at);
                }
                Line::Field
            } else {
                Line::Other
            };
            if kind == Line::Other {
                if fields == 0 && !(content.is_empty() && (first || at_envelope_end(raw, at))) {
                    return None;
                }
                block.end = at;
                block.at_input_end = false;
                return Some(block);
            }
            first = false;
            at = next;
        }
        if fields == 0 {
            return None;
        }
        block.unterminated = !raw.ends_with(b"\n");
        Some(block)
    }

    /// True if the header block runs to the end of the input: no blank line
    /// and no body were found. For a prefix of a longer message, that means
    /// the header block was not found within the prefix.
    pub fn at_input_end(&self) -> bool {
        self.at_input_end
    }

    /// The header block's line ending.
    pub fn eol(&self) -> &'static [u8] {
        self.eol
    }

    /// Writes `raw` (the input `locate` was given) with fields of ours
    /// already present renamed and `fields` (name, value) inserted at the
    /// end of the header block, each on its own line with the block's line
    /// ending. Values must be one line.
    pub fn write(
        &self,
        out: &mut dyn Write,
        raw: &[u8],
        fields: &[(&str, impl AsRef<str>)],
    ) -> io::Result<()> {
        let mut from = 0;
        for &at in &self.ours {
            out.write_all(&raw[from..at])?;
            out.write_all(RENAMED_PREFIX.as_bytes())?;
            from = at;
        }
        out.write_all(&raw[from..self.end])?;
        if self.unterminated {
            out.write_all(self.eol)?;
        }
        for (name, value) in fields {
            let value = value.as_ref();
            debug_assert!(!value.contains(['\r', '\n']), "header values are one line");
            out.write_all(name.as_bytes())?;
            out.write_all(b": ")?;
            out.write_all(value.as_bytes())?;
            out.write_all(self.eol)?;
        }
        out.write_all(&raw[self.end..])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Envelope,
    Field,
    Continuation,
    Other,
}

/// True if the line starting at `at` directly follows a first-line mbox
/// envelope (`From …`): a message that is an envelope line, then a blank
/// line, has an empty header block.
fn at_envelope_end(raw: &[u8], at: usize) -> bool {
    raw.starts_with(b"From ") && memchr::memchr(b'\n', raw).is_some_and(|p| p + 1 == at)
}

/// The name of a header field line (`Name: value` or `Name : value`), or
/// `None` if the line is not one. Names are printable ASCII without `:`
/// (RFC 5322 `ftext`).
fn field_name(line: &[u8]) -> Option<&[u8]> {
    let colon = memchr::memchr(b':', line)?;
    let name = line[..colon].trim_ascii_end();
    let ok = !name.is_empty()
        && name.iter().all(|&b| (33..=126).contains(&b))
        && line[name.len()..colon]
            .iter()
            .all(|&b| b == b' ' || b == b'\t');
    ok.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotate(raw: &[u8]) -> Option<Vec<u8>> {
        let block = HeaderBlock::locate(raw)?;
        let mut out = Vec::new();
        block
            .write(&mut out, raw, &[("X-Spam-Status", "No, probability=0.01")])
            .unwrap();
        Some(out)
    }

    #[test]
    fn inserts_before_the_blank_line_keeping_line_endings() {
        assert_eq!(
            annotate(b"A: 1\nB: 2\n\nbody\n\nmore\n").unwrap(),
            b"A: 1\nB: 2\nX-Spam-Status: No, probability=0.01\n\nbody\n\nmore\n"
        );
        assert_eq!(
            annotate(b"A: 1\r\nB: 2\r\n\r\nbody\r\n").unwrap(),
            b"A: 1\r\nB: 2\r\nX-Spam-Status: No, probability=0.01\r\n\r\nbody\r\n"
        );
    }

    #[test]
    fn keeps_folded_fields_and_the_envelope_line_in_the_block() {
        assert_eq!(
            annotate(b"From a@b Mon Jan  1 00:00:00 2024\nSubject: a\n  b\n\nbody").unwrap(),
            b"From a@b Mon Jan  1 00:00:00 2024\nSubject: a\n  b\nX-Spam-Status: No, probability=0.01\n\nbody"
        );
    }

    #[test]
    fn renames_fields_of_ours_whatever_their_case() {
        let raw = b"x-spam-status: No,\n  forged\nX-Spam-Flag : YES\nX-Spam-Level: **\n\nX-Spam-Status: in body\n";
        assert_eq!(
            annotate(raw).unwrap(),
            b"Old-x-spam-status: No,\n  forged\nOld-X-Spam-Flag : YES\nX-Spam-Level: **\nX-Spam-Status: No, probability=0.01\n\nX-Spam-Status: in body\n"
        );
    }

    #[test]
    fn headers_without_body_or_final_line_end() {
        assert_eq!(
            annotate(b"A: 1\nB: 2").unwrap(),
            b"A: 1\nB: 2\nX-Spam-Status: No, probability=0.01\n"
        );
        assert_eq!(
            annotate(b"A: 1\r\n").unwrap(),
            b"A: 1\r\nX-Spam-Status: No, probability=0.01\r\n"
        );
        assert!(HeaderBlock::locate(b"A: 1").unwrap().at_input_end());
        assert!(!HeaderBlock::locate(b"A: 1\n\n").unwrap().at_input_end());
    }

    #[test]
    fn malformed_header_block_ends_at_the_first_non_header_line() {
        assert_eq!(
            annotate(b"A: 1\nnot a header\nB: 2\n\nbody\n").unwrap(),
            b"A: 1\nX-Spam-Status: No, probability=0.01\nnot a header\nB: 2\n\nbody\n"
        );
    }

    #[test]
    fn empty_header_block() {
        assert_eq!(
            annotate(b"\nbody\n").unwrap(),
            b"X-Spam-Status: No, probability=0.01\n\nbody\n"
        );
        assert_eq!(
            annotate(b"From x\n\nbody\n").unwrap(),
            b"From x\nX-Spam-Status: No, probability=0.01\n\nbody\n"
        );
    }

    #[test]
    fn no_header_block() {
        for raw in [
            &b""[..],
            b"just text\n\nA: 1\n",
            b" A: 1\n",
            b"From x\nnot a header\n",
            b"From x",
            b"\x00\x01\x02",
            b"bad name: 1\n",
        ] {
            assert_eq!(HeaderBlock::locate(raw), None, "{raw:?}");
        }
    }
}
