//! Byte-level decoding: transfer encodings (base64, quoted-printable),
//! charsets, and header values with RFC 2047 encoded words. Lenient by
//! design: spam is often malformed, and a filter that refuses to read a
//! message cannot judge it.
//!
//! Every function here is linear in its input. Header values are decoded
//! here rather than by `mailparse` (whose `get_value` rescans the rest of
//! the line for each `=?`, which a header of many `=?` turns into hours);
//! the rules are the same as its, so ordinary mail decodes as before.

use std::borrow::Cow;

use encoding_rs::{Encoding, UTF_8, WINDOWS_1252};

/// Decodes base64, skipping every byte outside the alphabet (line breaks,
/// stray spaces, garbage) and stopping at the first `=` pad. Never fails:
/// a truncated final group yields the bytes it fully determines.
pub(crate) fn base64_lenient(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() / 4 * 3 + 3);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for &byte in input {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            _ => continue,
        };
        acc = (acc << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// Decodes quoted-printable in robust mode: malformed escapes are kept as
/// they are instead of failing the part.
pub(crate) fn quoted_printable(input: &[u8]) -> Vec<u8> {
    quoted_printable::decode(input, quoted_printable::ParseMode::Robust)
        .unwrap_or_else(|_| input.to_vec())
}

/// The number of bytes a base64 body decodes to, without decoding it.
pub(crate) fn base64_decoded_len(input: &[u8]) -> usize {
    let symbols = input
        .iter()
        .take_while(|&&b| b != b'=')
        .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'))
        .count();
    symbols * 3 / 4
}

/// Turns bytes in a declared charset into text.
///
/// Rules, in order:
/// - ASCII bytes in an ASCII-compatible charset are taken as they are.
/// - A label encoding_rs does not know is treated as missing.
/// - Bytes that are valid UTF-8 are read as UTF-8 when the label is missing,
///   unknown, or one of the Latin-1 family (mail software often declares
///   `us-ascii` or `iso-8859-1` for UTF-8 text).
/// - Otherwise the declared charset decodes them; if it is UTF-8 and the
///   bytes are not, valid runs stay UTF-8 and each stray byte is read as
///   windows-1252 (no U+FFFD for a single bad byte).
/// - With no usable label, windows-1252 (a superset of Latin-1 that maps
///   every byte) is the fallback.
pub(crate) fn decode_charset(bytes: &[u8], label: Option<&str>) -> String {
    let encoding = label.and_then(|l| Encoding::for_label(l.trim().as_bytes()));
    let ascii_compatible = encoding.is_none_or(|e| e.is_ascii_compatible());
    if ascii_compatible && bytes.is_ascii() {
        // Valid ASCII is valid UTF-8.
        return String::from_utf8(bytes.to_vec()).unwrap_or_default();
    }
    let latin_family = encoding.is_none_or(|e| e == WINDOWS_1252 || e == UTF_8);
    if latin_family && let Ok(text) = std::str::from_utf8(bytes) {
        return text.to_owned();
    }
    match encoding {
        Some(e) if e == UTF_8 => utf8_with_1252_fallback(bytes),
        Some(e) => {
            let (text, _) = e.decode_without_bom_handling(bytes);
            text.into_owned()
        }
        None => {
            let (text, _) = WINDOWS_1252.decode_without_bom_handling(bytes);
            text.into_owned()
        }
    }
}

fn utf8_with_1252_fallback(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        let (stray, _) = WINDOWS_1252.decode_without_bom_handling(chunk.invalid());
        out.push_str(&stray);
    }
    out
}

/// A raw header value as text: UTF-8 if it is valid UTF-8 (RFC 6532),
/// else Latin-1 (every byte one character).
pub(crate) fn header_text(raw: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(raw) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => encoding_rs::mem::decode_latin1(raw),
    }
}

/// A raw header value unfolded, with its RFC 2047 encoded words decoded.
///
/// ```
/// use bayesmail::message::decode::header_value;
/// assert_eq!(header_value(b"=?utf-8?q?caf=C3=A9?=\n =?utf-8?b?IOKCrA==?= ok"), "café € ok");
/// ```
pub fn header_value(raw: &[u8]) -> String {
    encoded_words(&header_text(raw)).0
}

/// [`header_value`] and the steps it took: bytes examined by its scans
/// plus the bytes of each encoded word decoded. Never more than
/// [`STEPS_PER_BYTE`] per byte of `raw` (the tests and the `decode_header`
/// fuzz target hold it to that), which is what keeps a header of many
/// `=?` from stalling delivery.
pub fn header_value_steps(raw: &[u8]) -> (String, usize) {
    encoded_words(&header_text(raw))
}

/// The bound on [`header_value_steps`]' steps per input byte: four per
/// byte of the value as text, which is at most twice as long as the raw
/// bytes (a value that is not UTF-8 is read as Latin-1, where every byte
/// from 0x80 up takes two).
pub const STEPS_PER_BYTE: usize = 8;

/// Decodes the encoded words of a header value and unfolds it, as
/// `mailparse`'s `MailHeader::get_value` does, in time linear in the value.
/// Returns the text and the number of steps taken.
///
/// The rules: a word starts at `=?` at the start of a line or after
/// whitespace, `"`, `(`, `)`, `<`, `>` or `,`, and ends at the first `?=`
/// after it that is followed by one of those or the end of the line. Its
/// inside is `charset?B|Q?text`; one that does not decode stays as written.
/// White space between two decoded words is dropped (RFC 2047 §6.2); a line
/// break and the white space after it become one space.
fn encoded_words(value: &str) -> (String, usize) {
    let mut out = Normalizer::default();
    let mut steps = 0;
    for (n, line) in value.lines().enumerate() {
        if n > 0 {
            out.newline();
        }
        steps += decode_line(line.trim_start(), &mut out);
    }
    steps += value.len();
    (out.text, steps)
}

/// Whether `c` may stand next to an encoded word.
fn delimits_word(c: Option<char>) -> bool {
    c.is_none_or(|c| c.is_whitespace() || matches!(c, '"' | '(' | ')' | '<' | '>' | ','))
}

/// Tokenizes one line into `out`; returns the steps taken.
fn decode_line(line: &str, out: &mut Normalizer) -> usize {
    let bytes = line.as_bytes();
    let opener = memchr::memmem::Finder::new(b"=?");
    // The first `?=` that can end a word, at or after some position. Ends
    // do not depend on where a word starts, so one answer serves every
    // start up to it, and an answer of "none" serves every later start.
    let mut end_cache: Option<Option<usize>> = None;
    let mut steps = 0;
    let mut from = 0;
    loop {
        let Some(at) = opener.find(&bytes[from..]).map(|p| from + p) else {
            steps += bytes.len() - from;
            out.segment(&line[from..]);
            return steps;
        };
        steps += at + 2 - from;
        let begin = at + 2;
        if !delimits_word(line[..at].chars().next_back()) {
            out.text(&line[from..begin]);
            from = begin;
            continue;
        }
        out.segment(&line[from..at]);
        // Starts only move forward, so a new scan begins past the end the
        // last one found: no byte is scanned for ends twice.
        let end = match end_cache {
            Some(found) if found.is_none_or(|e| e >= begin) => found,
            _ => {
                let found = find_word_end(line, begin, &mut steps);
                end_cache = Some(found);
                found
            }
        };
        match end {
            Some(end) => {
                steps += end - begin;
                match decode_word(&line[begin..end]) {
                    Some(word) => out.word(&word),
                    None => out.text(&line[at..end + 2]),
                }
                from = end + 2;
            }
            None => {
                out.text("=?");
                from = begin;
            }
        }
    }
}

/// The first `?=` at or after `from` that is followed by a delimiter.
fn find_word_end(line: &str, from: usize, steps: &mut usize) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut at = from;
    while let Some(p) = memchr::memmem::find(&bytes[at..], b"?=") {
        let end = at + p;
        *steps += p + 2;
        if delimits_word(line[end + 2..].chars().next()) {
            return Some(end);
        }
        at = end + 2;
    }
    *steps += bytes.len() - at;
    None
}

/// Decodes the inside of one encoded word (`charset?B|Q?text`).
fn decode_word(inside: &str) -> Option<String> {
    let (charset, rest) = inside.split_once('?')?;
    let (coding, text) = rest.split_once('?')?;
    let bytes = match coding {
        "B" | "b" => data_encoding::BASE64_MIME_PERMISSIVE
            .decode(text.as_bytes())
            .ok()?,
        "Q" | "q" => {
            // The decoder trims trailing white space, which here is text.
            let spaced = text.replace('_', " ");
            let trimmed = spaced.trim_end();
            let mut bytes =
                quoted_printable::decode(trimmed, quoted_printable::ParseMode::Robust).ok()?;
            bytes.extend_from_slice(&spaced.as_bytes()[trimmed.len()..]);
            bytes
        }
        _ => return None,
    };
    let charset = charset::Charset::for_label_no_replacement(charset.as_bytes())?;
    Some(charset.decode_without_bom_handling(&bytes).0.into_owned())
}

/// Joins the pieces of a header value, dropping white space between two
/// decoded words and turning each line break into a space.
#[derive(Default)]
struct Normalizer {
    text: String,
    /// What came last, when it decides what the next piece does.
    pending: Pending,
}

#[derive(Default)]
enum Pending {
    #[default]
    Nothing,
    /// A decoded word: white space after it waits for what follows.
    Word,
    /// White space after a decoded word, and the space of a line break
    /// after it: written if text follows, dropped if a word does.
    Space(String),
}

impl Normalizer {
    /// Plain text that is not only white space.
    fn text(&mut self, t: &str) {
        if let Pending::Space(ws) = std::mem::take(&mut self.pending) {
            self.text.push_str(&ws);
        }
        self.text.push_str(t);
    }

    /// A piece between words: text, or white space (which may be empty).
    fn segment(&mut self, s: &str) {
        if !s.trim_end().is_empty() {
            return self.text(s);
        }
        match self.pending {
            Pending::Word => self.pending = Pending::Space(s.to_owned()),
            _ => {
                self.text.push_str(s);
                self.pending = Pending::Nothing;
            }
        }
    }

    fn word(&mut self, w: &str) {
        self.text.push_str(w);
        self.pending = Pending::Word;
    }

    fn newline(&mut self) {
        self.pending = match std::mem::take(&mut self.pending) {
            Pending::Space(ws) => Pending::Space(ws + " "),
            Pending::Word => Pending::Space(" ".to_owned()),
            _ => {
                self.text.push(' ');
                Pending::Nothing
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (ours, mailparse's) decoding of one field's value: mailparse is the
    /// reference for ordinary input.
    fn both(raw: &str) -> (String, String) {
        let field = format!("X: {raw}");
        let (header, _) = mailparse::parse_header(field.as_bytes()).unwrap();
        (header_value(header.get_value_raw()), header.get_value())
    }

    #[test]
    fn encoded_words_decode_as_mailparse_decodes_them() {
        for raw in [
            "=?iso-8859-1?Q?=A1Hola,_se=F1or!?=",
            "=?utf-8?q?caf=C3=A9?= =?utf-8?b?IOKCrA==?= tail",
            "=?ISO-2022-JP?B?GyRCRnwbKEI=?=\n\t=?ISO-2022-JP?B?GyRCS1wbKEI=?=",
            "a =?utf-8?Q?x?=\n b",
            "=?utf-8?Q??=",
            "=?",
            "=?garbage?Q??=",
            "=?utf-8?Q?=E2=82 =AC?=",
            "hello=?utf-8?Q?world?=",
            "=?utf-8?Q?hello?=world",
            "\"=?utf-8?q?quoted?=\" (=?utf-8?q?comment?=) <a@b>",
            "=?UTF-7?Q?+JgM-?=",
            "=?x =?utf-8?q?a?=",
            "=?utf-8?q?a?= \n =?utf-8?q?b?= c",
            "=?utf-8?q?a?= \n =?broken d",
            "=?utf-8?q?trailing_?=  ",
            "Multi\n  line\n value",
        ] {
            let (ours, theirs) = both(raw);
            assert_eq!(ours, theirs, "{raw:?}");
        }
    }

    #[test]
    fn latin1_text_stays_within_the_bound() {
        // Found by the decode_header fuzz target: 8-bit bytes double in
        // length as text, so 4 steps per raw byte was too tight a bound.
        let raw = b"whi!#\x1b(B\n\x1b$B<ALd$,rnhilNaD01JEb4KEI=?=\n =?ISO-2022-JP\xc1\xbd?GyRCJUchPCU/M$\"$l$B<ALd$,$\"$l$P!\"A0F|";
        let raw = [&raw[..], &[0xff; 120], b" $^$G$K%a!<%k$G$*CN$i$;$/$@$5$$ "].concat();
        let (_, steps) = header_value_steps(&raw);
        assert!(
            steps > 4 * raw.len() / 2,
            "the case still exercises the bound: {steps}"
        );
        assert!(
            steps <= STEPS_PER_BYTE * raw.len(),
            "{steps} for {}",
            raw.len()
        );
    }

    #[test]
    fn a_flood_of_openers_is_decoded_in_linear_work() {
        // Each `=?` of this made mailparse scan the rest of the line.
        for unit in [
            "=?utf-8?q?",
            "=?",
            "=?a?q?b?=x",
            " =?a?q?",
            "=?utf-8?b?",
            "?=",
        ] {
            let value = unit.repeat(4 * 1024 * 1024 / unit.len());
            let (text, steps) = header_value_steps(value.as_bytes());
            assert!(!text.is_empty());
            assert!(
                steps <= STEPS_PER_BYTE * value.len(),
                "{unit:?}: {steps} steps for {} bytes",
                value.len()
            );
        }
    }

    proptest::proptest! {
        /// On ASCII, where both read the same characters, the decoder is
        /// mailparse's.
        #[test]
        fn decoding_matches_mailparse(
            raw in "(=\\?|\\?=|utf-8|\\?[qQbB]\\?|=C3=A9|w6k|_| |\t|\n |[a(),<>\"]){0,16}"
        ) {
            let (ours, theirs) = both(&raw);
            proptest::prop_assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn base64_decodes_wrapped_and_padded_input() {
        assert_eq!(base64_lenient(b"aGVs\r\nbG8g\nd29y bGQ="), b"hello world");
        assert_eq!(base64_lenient(b"aGk="), b"hi");
        assert_eq!(base64_decoded_len(b"aGVs\r\nbG8g\nd29y bGQ="), 11);
    }

    #[test]
    fn base64_survives_garbage_and_truncation() {
        assert_eq!(base64_lenient(b"aGVsbG8*!gd29y"), b"hello wor");
        assert_eq!(base64_lenient(b""), b"");
        assert_eq!(base64_lenient(b"a"), b"");
    }

    #[test]
    fn quoted_printable_keeps_malformed_escapes() {
        assert_eq!(
            quoted_printable(b"caf=C3=A9 =3D x=\nyz"),
            "café = xyz".as_bytes()
        );
        assert_eq!(quoted_printable(b"100=%"), b"100=%");
    }

    #[test]
    fn charsets_decode_and_fall_back() {
        assert_eq!(decode_charset(b"caf\xe9", Some("iso-8859-1")), "café");
        assert_eq!(decode_charset(b"\x80 5", Some("windows-1252")), "€ 5");
        assert_eq!(
            decode_charset(b"caf\xe9", Some("x-no-such-charset")),
            "café"
        );
        assert_eq!(decode_charset("café".as_bytes(), Some("us-ascii")), "café");
        assert_eq!(decode_charset(b"caf\xe9 \xc3\xa9", Some("utf-8")), "café é");
        assert_eq!(
            decode_charset(b"\xf0\xd2\xc9\xd7\xc5\xd4", Some("koi8-r")),
            "Привет"
        );
        assert_eq!(
            decode_charset(b"\x1b$B$3$s$K$A$O\x1b(B", Some("iso-2022-jp")),
            "こんにちは"
        );
        assert_eq!(decode_charset(b"plain", None), "plain");
    }
}
