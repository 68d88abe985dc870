//! Makes untrusted text from mail safe to print on a terminal. Subjects,
//! addresses and even file names in a mailbox can carry escape sequences that
//! move the cursor or recolour the screen, and bidi controls that reorder
//! what is shown; each such character is replaced by a visible escape.
//!
//! Text for people (tables, CSV, messages on stderr) goes through
//! [`for_terminal`], which changes what it shows; JSON, read by programs,
//! goes through [`for_json`], which only changes how it is spelled.

use std::borrow::Cow;
use std::fmt::Write;

fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{61c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Returns `text` with control characters (C0, DEL, C1) and bidi controls
/// replaced by `\u{XX}` escapes; borrowed if nothing needed replacing.
///
/// ```
/// use bayesmail::sanitize::for_terminal;
/// assert_eq!(for_terminal("ok"), "ok");
/// assert_eq!(for_terminal("a\x1b[2Jb\u{202e}c"), "a\\u{1b}[2Jb\\u{202e}c");
/// ```
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Returns `text` cut to its first `chars` characters, with `…` after
/// them when it was longer.
///
/// ```
/// use bayesmail::sanitize::shortened;
/// assert_eq!(shortened("abcdef", 3), "abc…");
/// assert_eq!(shortened("abc", 3), "abc");
/// ```
pub fn shortened(text: &str, chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(chars) {
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
        None => Cow::Borrowed(text),
    }
}

/// Returns `text` as one value of a `key=value` log line, quoted (`"…"`)
/// when it is empty or holds a space, a quote, a backslash, an `=` or a
/// character [`for_terminal`] would escape, so that a value taken from a
/// message (a Message-ID, a user name) cannot pass for more fields of the
/// line. Inside the quotes `"` and `\` are escaped with a backslash and
/// those characters written `\u{XX}`, so the text `\u{a}` and a line feed
/// stay apart.
///
/// ```
/// use bayesmail::sanitize::log_value;
/// assert_eq!(log_value("<a@b>"), "<a@b>");
/// assert_eq!(log_value("<a@b> user=x"), r#""<a@b> user=x""#);
/// assert_eq!(log_value(r#"a"b\c"#), r#""a\"b\\c""#);
/// assert_eq!(log_value("a\u{202e}b"), r#""a\u{202e}b""#);
/// assert_eq!(log_value(r"a\u{202e}b"), r#""a\\u{202e}b""#);
/// assert_eq!(log_value(""), r#""""#);
/// ```
pub fn log_value(text: &str) -> Cow<'_, str> {
    let plain = !text.is_empty()
        && !text
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\\' | '=') || is_unsafe(c));
    if plain {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
            out.push(c);
        } else if is_unsafe(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// Returns serialized JSON `json` with DEL, C1 controls and bidi controls
/// written as `\uXXXX` escapes, so that it decodes to the same value but
/// shows no such character raw when it reaches a terminal. (serde_json
/// escapes C0 controls inside strings itself and leaves the others as they
/// are; outside strings JSON has no such characters, and its whitespace is
/// left alone.)
///
/// ```
/// use bayesmail::sanitize::for_json;
/// let json = serde_json::to_string("a\u{202e}b\u{9b}").unwrap();
/// let safe = for_json(&json);
/// assert_eq!(safe, r#""a\u202eb\u009b""#);
/// assert_eq!(serde_json::from_str::<String>(&safe).unwrap(), "a\u{202e}b\u{9b}");
/// ```
pub fn for_json(json: &str) -> Cow<'_, str> {
    let escaped = |c: char| c >= ' ' && is_unsafe(c);
    if !json.chars().any(escaped) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if escaped(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Bytes as a quoted string of printable ASCII, safe for a terminal and
/// lossless: `"`, `\\`, `\n`, `\r` and `\t` escaped as in Rust, any
/// other byte outside 0x20..=0x7e as `\xNN`. For raw bytes that need
/// not be text, such as the byte view's 4-grams.
///
/// ```
/// use bayesmail::sanitize::quote_bytes;
/// assert_eq!(quote_bytes(b"Rece"), r#""Rece""#);
/// assert_eq!(quote_bytes(b"d\n\x1b\xe4"), r#""d\n\x1b\xe4""#);
/// ```
pub fn quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_and_bidi_but_keeps_text() {
        assert_eq!(for_terminal("héllo wörld 東京"), "héllo wörld 東京");
        assert_eq!(
            for_terminal("tab\there\u{7f}\u{85}"),
            "tab\\u{9}here\\u{7f}\\u{85}"
        );
        assert_eq!(for_terminal("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
    }

    #[test]
    fn json_keeps_its_value_and_structure() {
        let value = serde_json::json!({"id": "x\u{1b}[2J\u{7f}\u{85}\u{2067}y\n", "n": 1});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = for_json(&text);
        assert!(
            !safe.contains(['\u{1b}', '\u{7f}', '\u{85}', '\u{2067}']),
            "{safe}"
        );
        assert!(safe.contains('\n'), "pretty-printing whitespace is kept");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }
}
