//! HTML to text for tokenizing: a single pass that drops markup, comments,
//! scripts and styles, decodes character references, and keeps the targets of
//! links and images (where spam tells on itself). It is not a renderer: block
//! elements become line breaks, inline elements become nothing, so
//! `V<b></b>iagra` reads as the word the recipient sees.
//!
//! Text the recipient cannot see (inside an element hidden by an inline
//! `display:none`, `visibility:hidden` or zero `font-size`, or by the
//! `hidden` attribute) is kept apart from the visible text: kilobytes of
//! invisible ham words would otherwise outvote the few visible spam words.
//! Open elements are tracked on a stack so a hidden element ends where it
//! (or, if left open, an enclosing element) is closed, as a browser ends it.

use std::collections::HashMap;

/// Text and link targets extracted from an HTML document.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HtmlText {
    /// The visible text, with block elements as line breaks.
    pub text: String,
    /// The text of hidden elements, in document order, with the same
    /// spacing rules as `text`.
    pub hidden: String,
    /// `href` of `a`/`area`, `src` of `img`, `action` of `form`, in document
    /// order (hidden elements included: a link target is evidence whether
    /// or not it shows).
    pub links: Vec<String>,
}

impl HtmlText {
    /// The text currently being written: hidden or visible.
    fn target(&mut self, hidden: bool) -> &mut String {
        if hidden {
            &mut self.hidden
        } else {
            &mut self.text
        }
    }
}

/// Converts HTML to text and link targets. Never fails: unbalanced or broken
/// markup is read as well as it can be. Work is linear in the input: each
/// open element is pushed once and popped at most once.
///
/// ```
/// let out = bayesmail::message::html::to_text(
///     r#"<p>Buy <b>now</b> &amp; save</p><a href="http://shop.example/x">here</a>
///        <div style="display: none">ham words</div>"#);
/// assert_eq!(out.text.trim(), "Buy now & save\nhere");
/// assert_eq!(out.hidden.trim(), "ham words");
/// assert_eq!(out.links, ["http://shop.example/x"]);
/// ```
pub fn to_text(html: &str) -> HtmlText {
    let mut out = HtmlText {
        text: String::with_capacity(html.len() / 2),
        hidden: String::new(),
        links: Vec::new(),
    };
    let mut open = OpenElements::default();
    let bytes = html.as_bytes();
    let mut i = 0;
    let mut text_start = 0;
    while let Some(off) = memchr::memchr2(b'<', b'&', &bytes[i..]) {
        let at = i + off;
        push_text(out.target(open.hidden()), &html[text_start..at]);
        if bytes[at] == b'&' {
            let (decoded, used) = char_ref(&html[at..]);
            let target = out.target(open.hidden());
            match decoded {
                Some(c) => target.push(c),
                None => target.push('&'),
            }
            i = at + used;
        } else {
            i = tag(html, at, &mut out, &mut open);
        }
        text_start = i;
    }
    push_text(out.target(open.hidden()), &html[text_start..]);
    out
}

/// The stack of open elements, as far as visibility needs it: each entry is
/// a name key and whether that element hides its content. A count per name
/// lets a closing tag with no open element of its name be ignored at once,
/// so a closing tag never searches the stack in vain.
#[derive(Default)]
struct OpenElements {
    stack: Vec<(u64, bool)>,
    counts: HashMap<u64, u32>,
    /// Hiding elements on the stack.
    hiding: usize,
}

impl OpenElements {
    fn hidden(&self) -> bool {
        self.hiding > 0
    }

    fn push(&mut self, key: u64, hides: bool) {
        self.stack.push((key, hides));
        *self.counts.entry(key).or_default() += 1;
        self.hiding += usize::from(hides);
    }

    /// Pops up to and including the innermost open element with this key,
    /// if there is one: elements left open inside it end with it.
    fn close(&mut self, key: u64) {
        if self.counts.get(&key).is_none_or(|&n| n == 0) {
            return;
        }
        while let Some((top, hides)) = self.stack.pop() {
            if let Some(n) = self.counts.get_mut(&top) {
                *n -= 1;
            }
            self.hiding -= usize::from(hides);
            if top == key {
                return;
            }
        }
    }
}

/// A case-insensitive key for an element name (FNV-1a over the lower-cased
/// bytes). Two names that collide only make a closing tag end the wrong
/// element, which changes nothing but the split between visible and hidden.
fn name_key(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b.to_ascii_lowercase())).wrapping_mul(0x100_0000_01b3)
    })
}

/// Elements that never have content or a closing tag.
fn is_void(name: &str) -> bool {
    const VOID: &[&str] = &[
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr",
    ];
    VOID.iter().any(|v| name.eq_ignore_ascii_case(v))
}

/// Whether an inline `style` value hides the element: `display:none`,
/// `visibility:hidden` or a zero `font-size`, in any case and spacing,
/// with or without `!important`.
fn style_hides(style: &str) -> bool {
    style.split(';').any(|decl| {
        let Some((prop, value)) = decl.split_once(':') else {
            return false;
        };
        let prop = prop.trim();
        let value: String = value
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        let value = value.strip_suffix("!important").unwrap_or(&value);
        if prop.eq_ignore_ascii_case("display") {
            value == "none"
        } else if prop.eq_ignore_ascii_case("visibility") {
            value == "hidden"
        } else if prop.eq_ignore_ascii_case("font-size") {
            is_zero_length(value)
        } else {
            false
        }
    })
}

/// `0`, `0px`, `0.0pt`, `00em`, `0%`: a number that is zero, with or without
/// a unit.
fn is_zero_length(value: &str) -> bool {
    let number = value.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%');
    !number.is_empty()
        && number.bytes().any(|b| b == b'0')
        && number.bytes().all(|b| b == b'0' || b == b'.')
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
fn tag(html: &str, at: usize, out: &mut HtmlText, open: &mut OpenElements) -> usize {
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
        out.target(open.hidden()).push('<');
        return at + 1;
    }
    let attrs = scan_attributes(html, j, name, closing, out);
    let end = attrs.end;
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
    if name.is_empty() {
        // A declaration or processing instruction: no element.
        return end;
    }
    if closing {
        // The break belongs to the element that ends: a hidden block leaves
        // no break in the visible text, as it has no box there.
        separate(out.target(open.hidden()), name);
        if !is_void(name) {
            open.close(name_key(name));
        }
        return end;
    }
    if closes_paragraph(name) {
        open.close(name_key("p"));
    }
    let was_hidden = open.hidden();
    if !is_void(name) {
        open.push(name_key(name), attrs.hides);
    }
    let hidden = was_hidden || attrs.hides;
    if hidden && !was_hidden && !out.hidden.is_empty() && !out.hidden.ends_with([' ', '\n']) {
        // Hidden runs from different places are different words.
        out.hidden.push(' ');
    }
    let target = out.target(hidden);
    separate(target, name);
    target.push_str(&attrs.alt);
    end
}

/// The break an element makes in the text: a line for block elements, a
/// space for table cells, nothing for inline elements.
fn separate(text: &mut String, name: &str) {
    if is_block(name) && !text.ends_with('\n') {
        if text.ends_with(' ') {
            text.pop();
        }
        text.push('\n');
    } else if (name.eq_ignore_ascii_case("td") || name.eq_ignore_ascii_case("th"))
        && !text.ends_with([' ', '\n'])
    {
        text.push(' ');
    }
}

/// What a tag's attributes say beyond its link targets.
struct Attributes {
    /// The index after the tag's `>`.
    end: usize,
    /// Whether an inline style or the `hidden` attribute hides the element.
    hides: bool,
    /// The decoded `alt` text of an image (of every `alt` attribute, as
    /// a tag may carry more than one).
    alt: String,
}

/// Reads attributes up to the closing `>`, collecting link targets, image
/// alt text and whether the element is hidden.
fn scan_attributes(
    html: &str,
    mut j: usize,
    name: &str,
    closing: bool,
    out: &mut HtmlText,
) -> Attributes {
    let bytes = html.as_bytes();
    let mut attrs = Attributes {
        end: bytes.len(),
        hides: false,
        alt: String::new(),
    };
    let wanted: &[&str] = if closing {
        &[]
    } else if name.eq_ignore_ascii_case("a") || name.eq_ignore_ascii_case("area") {
        &["href", "style", "hidden"]
    } else if name.eq_ignore_ascii_case("img") {
        &["src", "alt", "style", "hidden"]
    } else if name.eq_ignore_ascii_case("form") {
        &["action", "style", "hidden"]
    } else {
        &["style", "hidden"]
    };
    loop {
        while j < bytes.len() && (bytes[j].is_ascii_whitespace() || bytes[j] == b'/') {
            j += 1;
        }
        match bytes.get(j) {
            None => return attrs,
            Some(b'>') => {
                attrs.end = j + 1;
                return attrs;
            }
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
        if !closing && attr.eq_ignore_ascii_case("hidden") {
            attrs.hides = true;
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
            match kind {
                "hidden" => {}
                "style" => attrs.hides |= style_hides(&decode_refs(value)),
                "alt" => {
                    push_text(&mut attrs.alt, &decode_refs(value.trim()));
                    attrs.alt.push(' ');
                }
                _ => {
                    let value = decode_refs(value.trim());
                    if !value.is_empty() {
                        out.links.push(value);
                    }
                }
            }
        }
    }
}

/// Elements whose start ends an open paragraph (HTML's "close a p
/// element"), so a hidden `<p>` left open does not hide the next one.
fn closes_paragraph(name: &str) -> bool {
    const CLOSERS: &[&str] = &[
        "p",
        "div",
        "ul",
        "ol",
        "dl",
        "li",
        "dd",
        "dt",
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
        "form",
        "section",
        "center",
        "address",
        "article",
        "aside",
        "header",
        "footer",
        "nav",
        "main",
        "figure",
        "fieldset",
        "details",
        "menu",
    ];
    CLOSERS.iter().any(|c| name.eq_ignore_ascii_case(c))
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
    fn hidden_text_is_kept_apart() {
        let out = to_text(
            "<p>buy now</p><div style=\"Display :\tNONE !important\">ham words</div>\
             <span style='color:red; visibility: hidden'>more ham</span>\
             <font style=\"font-size:0px\">tiny</font><b style=\"font-size:0\">zero</b>\
             <p hidden>attr</p><img src=x.gif alt=\"alt ham\" style=\"display:none\">\
             <span style=\"font-size:10px\">cheap</span>",
        );
        assert_eq!(
            out.text.split_whitespace().collect::<Vec<_>>(),
            ["buy", "now", "cheap"]
        );
        assert_eq!(
            out.hidden.split_whitespace().collect::<Vec<_>>(),
            [
                "ham", "words", "more", "ham", "tiny", "zero", "attr", "alt", "ham"
            ]
        );
        assert_eq!(out.links, ["x.gif"]);
    }

    #[test]
    fn an_unclosed_hidden_element_ends_with_its_parent() {
        let out = to_text(
            "<table><tr><td><div style=display:none>filler <b>more</td><td>visible</td></tr></table>\
             <div><span hidden>x <i>y</div>after<p style=display:none>para<p>next",
        );
        assert_eq!(
            out.text.split_whitespace().collect::<Vec<_>>(),
            ["visible", "after", "next"]
        );
        assert_eq!(
            out.hidden.split_whitespace().collect::<Vec<_>>(),
            ["filler", "more", "x", "y", "para"]
        );
    }

    #[test]
    fn nested_hidden_elements_and_void_elements() {
        let out = to_text(
            "<div style=display:none>a<br><img src=i.png><hr><div>b<span hidden>c</span>d</div>e</div>\
             f<span>g<span style=visibility:hidden>h</span>i</span>j</span></div></p>k",
        );
        assert_eq!(
            out.hidden.split_whitespace().collect::<Vec<_>>(),
            ["a", "bcd", "e", "h"]
        );
        // A hidden element leaves no break behind: "g" and "i" join as shown.
        assert_eq!(
            out.text.split_whitespace().collect::<Vec<_>>(),
            ["fgij", "k"]
        );
    }

    #[test]
    fn a_closing_tag_ends_what_was_left_open_inside_it() {
        // Closing tags that match no open element are ignored without a
        // search; the first matching one ends everything inside it.
        let html = format!(
            "<span hidden>{}{}</div>{}tail",
            "<b>".repeat(50_000),
            "</i>".repeat(50_000),
            "</span>".repeat(50_000)
        );
        let out = to_text(&html);
        assert_eq!(out.text, "tail");
        assert!(out.hidden.trim().is_empty());
    }

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
            "<a href='http://a.example/?x=1&amp;y=2'>one</a><img src=http://img.example/p.gif alt=\"Cheap\" alt='Pills'>\
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
        assert!(out.text.contains("one") && out.text.contains("Cheap Pills"));
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
