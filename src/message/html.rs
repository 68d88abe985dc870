//! HTML to text for tokenizing: a single pass that drops markup, comments,
//! scripts and styles, decodes character references, and keeps the targets of
//! links and images (where spam tells on itself). It is not a renderer: block
//! elements become line breaks, inline elements become nothing, so
//! `V<b></b>iagra` reads as the word the recipient sees.

/// Text and link targets extracted from an HTML document.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HtmlText {
    /// The visible text, with block elements as line breaks.
    pub text: String,
    /// `href` of `a`/`area`, `src` of `img`, `action` of `form`, in document order.
    pub links: Vec<String>,
}

/// Converts HTML to text and link targets. Never fails: unbalanced or broken
/// markup is read as well as it can be.
///
/// ```
/// let out = bayesmail::message::html::to_text(
///     r#"<p>Buy <b>now</b> &amp; save</p><a href="http://shop.example/x">here</a>"#);
/// assert_eq!(out.text.trim(), "Buy now & save\nhere");
/// assert_eq!(out.links, ["http://shop.example/x"]);
/// ```
pub fn to_text(html: &str) -> HtmlText {
    let mut out = HtmlText {
        text: String::with_capacity(html.len() / 2),
        links: Vec::new(),
    };
    let bytes = html.as_bytes();
    let mut i = 0;
    let mut text_start = 0;
    while let Some(off) = memchr::memchr2(b'<', b'&', &bytes[i..]) {
        let at = i + off;
        push_text(&mut out.text, &html[text_start..at]);
        if bytes[at] == b'&' {
            let (decoded, used) = char_ref(&html[at..]);
            match decoded {
                Some(c) => out.text.push(c),
                None => out.text.push('&'),
            }
            i = at + used;
        } else {
            i = tag(html, at, &mut out);
        }
        text_start = i;
    }
    push_text(&mut out.text, &html[text_start..]);
    out
}

/// Text between tags, with runs of whitespace collapsed to one space.
fn push_text(out: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    if !text.bytes().any(|b| b.is_ascii_whitespace()) {
        out.push_str(text);
        return;
    }
    for (n, piece) in text.split(|c: char| c.is_ascii_whitespace()).enumerate() {
        if n > 0 && !out.ends_with([' ', '\n']) {
            out.push(' ');
        }
        out.push_str(piece);
    }
}

fn find_ci(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

/// Handles markup starting at `at` (a `<`); returns the index after it.
fn tag(html: &str, at: usize, out: &mut HtmlText) -> usize {
    let bytes = html.as_bytes();
    let rest = &bytes[at..];
    if rest.starts_with(b"<!--") {
        return match memchr::memmem::find(&rest[4..], b"-->") {
            Some(end) => at + 4 + end + 3,
            None => bytes.len(),
        };
    }
    let mut j = at + 1;
    let closing = bytes.get(j) == Some(&b'/');
    if closing {
        j += 1;
    }
    let name_start = j;
    while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'-') {
        j += 1;
    }
    let name = &html[name_start..j];
    if name.is_empty() && !matches!(bytes.get(j), Some(b'!' | b'?')) {
        // A lone '<' in text ("a < b"): keep it as text.
        out.text.push('<');
        return at + 1;
    }
    let end = scan_attributes(html, j, name, closing, out);
    if !closing && (name.eq_ignore_ascii_case("script") || name.eq_ignore_ascii_case("style")) {
        let close = if name.eq_ignore_ascii_case("script") {
            &b"</script"[..]
        } else {
            &b"</style"[..]
        };
        return match find_ci(&bytes[end..], close) {
            Some(p) => {
                let after = end + p;
                memchr::memchr(b'>', &bytes[after..]).map_or(bytes.len(), |q| after + q + 1)
            }
            None => bytes.len(),
        };
    }
    if is_block(name) && !out.text.ends_with('\n') {
        if out.text.ends_with(' ') {
            out.text.pop();
        }
        out.text.push('\n');
    } else if (name.eq_ignore_ascii_case("td") || name.eq_ignore_ascii_case("th"))
        && !out.text.ends_with([' ', '\n'])
    {
        out.text.push(' ');
    }
    end
}

/// Reads attributes up to the closing `>`, collecting link targets and image
/// alt text; returns the index after the `>`.
fn scan_attributes(
    html: &str,
    mut j: usize,
    name: &str,
    closing: bool,
    out: &mut HtmlText,
) -> usize {
    let bytes = html.as_bytes();
    let wanted: &[&str] = if closing {
        &[]
    } else if name.eq_ignore_ascii_case("a") || name.eq_ignore_ascii_case("area") {
        &["href"]
    } else if name.eq_ignore_ascii_case("img") {
        &["src", "alt"]
    } else if name.eq_ignore_ascii_case("form") {
        &["action"]
    } else {
        &[]
    };
    loop {
        while j < bytes.len() && (bytes[j].is_ascii_whitespace() || bytes[j] == b'/') {
            j += 1;
        }
        match bytes.get(j) {
            None => return bytes.len(),
            Some(b'>') => return j + 1,
            Some(_) => {}
        }
        let attr_start = j;
        while j < bytes.len() && !matches!(bytes[j], b'=' | b'>') && !bytes[j].is_ascii_whitespace()
        {
            j += 1;
        }
        let attr = &html[attr_start..j];
        if attr_start == j {
            // A stray '=' or quote: step over it.
            j += 1;
            continue;
        }
        while j < bytes.len() && bytes[j].is_ascii_whitespace() {
            j += 1;
        }
        if bytes.get(j) != Some(&b'=') {
            continue;
        }
        j += 1;
        while j < bytes.len() && bytes[j].is_ascii_whitespace() {
            j += 1;
        }
        let (value, next) = match bytes.get(j) {
            Some(&q @ (b'"' | b'\'')) => {
                let start = j + 1;
                match memchr::memchr(q, &bytes[start..]) {
                    Some(len) => (&html[start..start + len], start + len + 1),
                    None => (&html[start..], bytes.len()),
                }
            }
            _ => {
                let start = j;
                while j < bytes.len() && !bytes[j].is_ascii_whitespace() && bytes[j] != b'>' {
                    j += 1;
                }
                (&html[start..j], j)
            }
        };
        j = next;
        if let Some(&kind) = wanted.iter().find(|w| attr.eq_ignore_ascii_case(w)) {
            let value = decode_refs(value.trim());
            if kind == "alt" {
                push_text(&mut out.text, &value);
                out.text.push(' ');
            } else if !value.is_empty() {
                out.links.push(value);
            }
        }
    }
}

fn is_block(name: &str) -> bool {
    const BLOCK: &[&str] = &[
        "p",
        "br",
        "div",
        "tr",
        "li",
        "ul",
        "ol",
        "table",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "blockquote",
        "pre",
        "hr",
        "title",
        "body",
        "center",
        "dd",
        "dt",
        "form",
        "section",
    ];
    BLOCK.iter().any(|b| name.eq_ignore_ascii_case(b))
}

/// Decodes every character reference in an attribute value.
fn decode_refs(value: &str) -> String {
    if !value.contains('&') {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(p) = rest.find('&') {
        out.push_str(&rest[..p]);
        let (decoded, used) = char_ref(&rest[p..]);
        match decoded {
            Some(c) => out.push(c),
            None => out.push('&'),
        }
        rest = &rest[p + used..];
    }
    out.push_str(rest);
    out
}

/// Decodes one character reference at the start of `s` (which begins with
/// `&`). Returns the character, if it is one, and the bytes consumed (1 when
/// it is not a reference, so the `&` is kept as text).
fn char_ref(s: &str) -> (Option<char>, usize) {
    let bytes = s.as_bytes();
    let limit = bytes.len().min(12);
    let Some(semi) = bytes[..limit].iter().position(|&b| b == b';') else {
        return (None, 1);
    };
    let body = &s[1..semi];
    let c = if let Some(num) = body.strip_prefix('#') {
        let value = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => num.parse::<u32>().ok(),
        };
        value.map(|v| match v {
            // Numeric references in the C1 range mean windows-1252 in practice.
            0x80..=0x9f => {
                let byte = [v as u8];
                let (t, _) = encoding_rs::WINDOWS_1252.decode_without_bom_handling(&byte);
                t.chars().next().unwrap_or('\u{fffd}')
            }
            _ => char::from_u32(v).unwrap_or('\u{fffd}'),
        })
    } else {
        named(body)
    };
    match c {
        Some(c) => (Some(c), semi + 1),
        None => (None, 1),
    }
}

fn named(name: &str) -> Option<char> {
    const NAMED: &[(&str, char)] = &[
        ("amp", '&'),
        ("lt", '<'),
        ("gt", '>'),
        ("quot", '"'),
        ("apos", '\''),
        ("nbsp", ' '),
        ("copy", '©'),
        ("reg", '®'),
        ("trade", '™'),
        ("euro", '€'),
        ("pound", '£'),
        ("yen", '¥'),
        ("cent", '¢'),
        ("sect", '§'),
        ("deg", '°'),
        ("plusmn", '±'),
        ("times", '×'),
        ("divide", '÷'),
        ("middot", '·'),
        ("bull", '•'),
        ("hellip", '…'),
        ("ndash", '–'),
        ("mdash", '—'),
        ("lsquo", '‘'),
        ("rsquo", '’'),
        ("ldquo", '“'),
        ("rdquo", '”'),
        ("laquo", '«'),
        ("raquo", '»'),
        ("iexcl", '¡'),
        ("iquest", '¿'),
        ("shy", '\u{ad}'),
        ("zwj", '\u{200d}'),
        ("zwnj", '\u{200c}'),
        ("agrave", 'à'),
        ("aacute", 'á'),
        ("acirc", 'â'),
        ("atilde", 'ã'),
        ("auml", 'ä'),
        ("aring", 'å'),
        ("aelig", 'æ'),
        ("ccedil", 'ç'),
        ("egrave", 'è'),
        ("eacute", 'é'),
        ("ecirc", 'ê'),
        ("euml", 'ë'),
        ("igrave", 'ì'),
        ("iacute", 'í'),
        ("icirc", 'î'),
        ("iuml", 'ï'),
        ("ntilde", 'ñ'),
        ("ograve", 'ò'),
        ("oacute", 'ó'),
        ("ocirc", 'ô'),
        ("otilde", 'õ'),
        ("ouml", 'ö'),
        ("oslash", 'ø'),
        ("ugrave", 'ù'),
        ("uacute", 'ú'),
        ("ucirc", 'û'),
        ("uuml", 'ü'),
        ("yacute", 'ý'),
        ("yuml", 'ÿ'),
        ("szlig", 'ß'),
        ("Agrave", 'À'),
        ("Aacute", 'Á'),
        ("Auml", 'Ä'),
        ("Ccedil", 'Ç'),
        ("Eacute", 'É'),
        ("Egrave", 'È'),
        ("Ntilde", 'Ñ'),
        ("Ouml", 'Ö'),
        ("Uuml", 'Ü'),
    ];
    NAMED
        .iter()
        .find(|(n, _)| *n == name)
        .or_else(|| NAMED.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)))
        .map(|&(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_scripts_styles_comments_and_joins_inline_markup() {
        let out = to_text(
            "<html><head><style>p{color:red}</style><script>var x='<b>';</script></head>\
             <body><!-- hidden --><p>V<b></b>iagra <i>now</i></p><div>next&nbsp;line</div></body>",
        );
        assert_eq!(out.text.trim(), "Viagra now\nnext line");
        assert!(out.links.is_empty());
    }

    #[test]
    fn keeps_link_targets_and_alt_text() {
        let out = to_text(
            "<a href='http://a.example/?x=1&amp;y=2'>one</a><img src=http://img.example/p.gif alt=\"Cheap\">\
             <form action=\"https://f.example/post\"></form><area href=\"/rel\">",
        );
        assert_eq!(
            out.links,
            [
                "http://a.example/?x=1&y=2",
                "http://img.example/p.gif",
                "https://f.example/post",
                "/rel"
            ]
        );
        assert!(out.text.contains("one") && out.text.contains("Cheap"));
    }

    #[test]
    fn decodes_character_references() {
        let out = to_text("caf&eacute; &#8364;5 &#x41;&#150; &bogus; a&b &#99999999;");
        assert_eq!(out.text, "café €5 A– &bogus; a&b \u{fffd}");
    }

    #[test]
    fn survives_broken_markup() {
        for html in [
            "<",
            "<a href=\"x",
            "a < b > c",
            "<!-- open",
            "<script>never closed",
            "&#",
            "<p =x>y",
        ] {
            let _ = to_text(html);
        }
        assert_eq!(to_text("a < b").text, "a < b");
    }
}
