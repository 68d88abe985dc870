//! Makes untrusted text from mail safe to print on a terminal. Subjects,
//! addresses and even file names in a mailbox can carry escape sequences that
//! move the cursor or recolour the screen, and bidi controls that reorder
//! what is shown; each such character is replaced by a visible escape.

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
}
