//! Byte-level decoding of body parts: transfer encodings (base64,
//! quoted-printable) and charsets. Lenient by design: spam is often
//! malformed, and a filter that refuses to read a message cannot judge it.

use encoding_rs::{Encoding, UTF_8, WINDOWS_1252};

/// Decodes base64, skipping every byte outside the alphabet (line breaks,
/// stray spaces, garbage) and stopping at the first `=` pad. Never fails:
/// a truncated final group yields the bytes it fully determines.
pub fn base64_lenient(input: &[u8]) -> Vec<u8> {
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
pub fn quoted_printable(input: &[u8]) -> Vec<u8> {
    quoted_printable::decode(input, quoted_printable::ParseMode::Robust)
        .unwrap_or_else(|_| input.to_vec())
}

/// The number of bytes a base64 body decodes to, without decoding it.
pub fn base64_decoded_len(input: &[u8]) -> usize {
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
pub fn decode_charset(bytes: &[u8], label: Option<&str>) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
