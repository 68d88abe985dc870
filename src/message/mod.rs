//! Raw bytes in, a decoded message out: headers with RFC 2047 words decoded,
//! the text of every text part (transfer encoding and charset undone, HTML
//! turned into text with its link targets kept) and metadata about the other
//! parts. This module owns MIME; it knows nothing of tokens or models.
//!
//! Where a header block ends is decided by [`split_header`]'s rule, for the
//! message and for each MIME part alike (the first empty line, or the first
//! line that is neither a field nor a continuation, which starts the body).
//! The fields in it are split by `mailparse`; MIME structure, header value
//! decoding ([`decode::header_value`]) and the reading of `Content-Type` and
//! `Content-Disposition` are done here, each in time linear in the input
//! (mailparse's own `parse_mail` decodes every part's `Content-Type` with a
//! decoder that is quadratic in the number of `=?`, and its parameter
//! parser is quadratic in the number of parameters). Charsets come from
//! `encoding_rs`. Parsing is lenient: anything that is not empty gives a
//! [`Message`], even if every header is broken (the input is then read as a
//! body).
//!
//! # Limits that keep the first text
//! A hostile message must not cost unbounded work, nor hide its text behind
//! the limits that bound the work. So:
//! - Of each text part, at most [`TEXT_PART_CAP`] bytes are read, counted
//!   from where its text starts: a leading run of white space (and, in
//!   HTML, comments) in a part larger than the cap is skipped first. A
//!   base64 or quoted-printable part is decoded from at most four times the
//!   cap of its encoded bytes.
//! - A text part marked as an attachment (`Content-Disposition: attachment`
//!   with a file name) is an attachment; but if the message has no other
//!   text that is not blank, the first such part is read as its body, as
//!   many mail readers show it inline.
//! - Forwarded messages (`message/rfc822`) are walked eight levels deep;
//!   a deeper one is read as text as it is written (headers and body, up to
//!   the cap). Multipart nesting is split to mailparse's depth of 100.

pub mod decode;
pub mod html;
mod identity;
mod split;

pub use identity::{Identity, canonical, digest, legacy_digest};
pub use split::{MAIL_SNIFF_BYTES, looks_like_mail, split_header};

use std::borrow::Cow;

use mailparse::{
    DispositionType, MailHeader, MailParseError, ParsedContentDisposition, ParsedContentType,
};

/// Of each text part, at most this many bytes (after transfer decoding,
/// from where its text starts) are read.
pub const TEXT_PART_CAP: usize = 2 * 1024 * 1024;
/// Of a base64 or quoted-printable text part, at most this many encoded
/// bytes are decoded.
const ENCODED_READ_CAP: usize = 4 * TEXT_PART_CAP;
/// `message/rfc822` parts nested deeper than this are read as plain text.
const MAX_NESTING: usize = 8;
/// Multipart nesting deeper than this is not split further: the part is
/// read as one (mailparse's own limit, where it fails the whole message).
const MAX_MULTIPART_DEPTH: u8 = 100;
/// Of each entity's header, the first this many fields are read (real
/// mail has a few dozen, a long relay chain a few hundred); the rest are
/// not features. Each field read costs memory many times its bytes, so a
/// header of millions of tiny fields (`a:b`) must not all be kept: the
/// message still passes on whole, and the fields of ours among the rest
/// are still renamed, by the writer, which keeps none.
pub const MAX_HEADER_FIELDS: usize = 1000;
/// A multipart is split into at most this many parts; the last takes the
/// rest of its body.
const MAX_PARTS: usize = 1000;
/// Of a `Content-Type` or `Content-Disposition`, only the parameters read
/// here are kept, and at most this many of them (a name split into RFC 2231
/// continuations takes one per piece).
const MAX_PARAMS: usize = 64;

/// Why a message could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The input held no bytes (or only whitespace).
    #[error("empty message")]
    Empty,
}

/// Result of parsing.
pub type Result<T> = std::result::Result<T, Error>;

/// One header, its name as written and its value unfolded and decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Name as it appears in the message (compare case-insensitively).
    pub name: String,
    /// Value with folding removed and encoded words decoded.
    pub value: String,
}

/// Whether a text part was plain text or HTML.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// `text/plain` (or a part with no usable type).
    Plain,
    /// `text/html`, already converted to text.
    Html,
}

/// The decoded text of one text part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextPart {
    /// Plain or HTML.
    pub kind: TextKind,
    /// The text (for HTML, the visible text).
    pub text: String,
    /// For HTML, the text of hidden elements (see [`html`]); empty for
    /// plain text.
    pub hidden: String,
    /// The charset label as declared (lower-cased), if any.
    pub charset: Option<String>,
    /// True if the part was larger than [`TEXT_PART_CAP`] and was cut.
    pub truncated: bool,
}

/// A part that is not text: its type, name and decoded size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// MIME type, lower-cased (`application/pdf`).
    pub content_type: String,
    /// File name from Content-Disposition or Content-Type, if any.
    pub filename: Option<String>,
    /// Size in bytes after transfer decoding (computed, not decoded).
    pub size: usize,
}

/// A parsed, decoded message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// Top-level headers in order.
    pub headers: Vec<Header>,
    /// Text parts in order, including those of forwarded messages.
    pub parts: Vec<TextPart>,
    /// Link targets found in HTML parts, in order.
    pub links: Vec<String>,
    /// Non-text parts.
    pub attachments: Vec<Attachment>,
    /// MIME types of every leaf part, in order.
    pub content_types: Vec<String>,
    /// Size of the message in bytes, counting line ends as one byte so a
    /// message and its CRLF twin agree.
    pub size: usize,
    /// True if no empty line ended the header block: a line that is neither
    /// a field nor a continuation started the body (the whole input, if its
    /// first line is one), as [`split_header`] reads it.
    pub malformed: bool,
    /// True if the header held more fields than are read
    /// ([`MAX_HEADER_FIELDS`]): no real mail does.
    pub fields_capped: bool,
}

impl Message {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    /// The decoded subject, or "" if there is none.
    pub fn subject(&self) -> &str {
        self.header("subject").unwrap_or("")
    }
}

/// Parses raw message bytes (LF or CRLF line ends; a leading mbox `From `
/// envelope line is skipped). The header block ends as [`split_header`]
/// says, in the message and in each of its parts.
///
/// ```
/// let msg = bayesmail::message::parse(
///     b"Subject: =?utf-8?q?caf=C3=A9?=\nContent-Type: text/html\n\n<p>Hello &amp; bye</p>",
/// ).unwrap();
/// assert_eq!(msg.subject(), "café");
/// assert_eq!(msg.parts[0].text.trim(), "Hello & bye");
/// ```
pub fn parse(raw: &[u8]) -> Result<Message> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Empty);
    }
    let raw = normalize_line_ends(raw);
    let raw = split::strip_envelope(&raw);
    let (head_end, body_start) = split::split_entity(raw);
    let mut msg = Message {
        size: raw.len(),
        malformed: head_end == body_start && body_start < raw.len(),
        fields_capped: first_fields(&raw[..head_end], MAX_HEADER_FIELDS).len() < head_end,
        ..Message::default()
    };
    match parse_part(raw, false, MAX_MULTIPART_DEPTH) {
        Ok(parsed) => {
            msg.headers = parsed
                .headers
                .iter()
                .map(|h| Header {
                    name: h.get_key(),
                    value: decode::header_value(h.get_value_raw()),
                })
                .collect();
            let mut walker = Walker {
                msg: &mut msg,
                text_attachment: None,
            };
            walk(&parsed, &mut walker, 0);
            if let Some((text, charset, kind)) = walker.text_attachment.take()
                && msg.parts.iter().all(|p| p.text.trim().is_empty())
            {
                push_part(&mut msg, text, charset, kind);
            }
        }
        Err(_) => {
            msg.malformed = true;
            push_text(&mut msg, raw, None, TextKind::Plain);
        }
    }
    Ok(msg)
}

/// CRLF → LF, so every later step sees one convention (and a message and its
/// CRLF twin give the same features). Lone CRs are kept.
pub(crate) fn normalize_line_ends(raw: &[u8]) -> Cow<'_, [u8]> {
    let Some(first) = find_crlf(raw) else {
        return Cow::Borrowed(raw);
    };
    let mut out = Vec::with_capacity(raw.len());
    let mut rest = raw;
    let mut next = Some(first);
    while let Some(p) = next {
        out.extend_from_slice(&rest[..p]);
        out.push(b'\n');
        rest = &rest[p + 2..];
        next = find_crlf(rest);
    }
    out.extend_from_slice(rest);
    Cow::Owned(out)
}

/// Offset of the first `\r\n` in `s`. A byte search for `\r` rather than
/// a substring search: it needs no searcher set up per call, which matters
/// to the one-message-per-process `filter`.
fn find_crlf(s: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = memchr::memchr(b'\r', &s[from..]) {
        let at = from + p;
        if s.get(at + 1) == Some(&b'\n') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// One MIME entity: its header fields, its type, its body and, for a
/// multipart, its parts.
struct Part<'a> {
    headers: Vec<MailHeader<'a>>,
    ctype: ParsedContentType,
    body: &'a [u8],
    subparts: Vec<Part<'a>>,
}

impl Part<'_> {
    /// The raw value of the first field with this name.
    fn raw_header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.get_key_ref().eq_ignore_ascii_case(name))
            .map(|h| h.get_value_raw())
    }
}

/// Splits an entity: its header block by [`split_header`]'s rule (so a
/// part that starts with text has no fields and is plain text), its fields
/// by `mailparse`, its parts by the boundary search of
/// `mailparse::parse_mail`, reading the fields with this module's linear
/// decoders. `depth` counts down the multipart levels left to split.
fn parse_part(
    raw: &[u8],
    in_digest: bool,
    depth: u8,
) -> std::result::Result<Part<'_>, MailParseError> {
    let (head_end, body_start) = split::split_entity(raw);
    let head = first_fields(&raw[..head_end], MAX_HEADER_FIELDS);
    let (headers, _) = mailparse::parse_headers(head)?;
    let mut part = Part {
        headers,
        ctype: ParsedContentType::default(),
        body: &raw[body_start..],
        subparts: Vec::new(),
    };
    part.ctype = match part.raw_header("Content-Type") {
        Some(value) => content_type(value),
        None if in_digest => ParsedContentType {
            mimetype: "message/rfc822".into(),
            ..ParsedContentType::default()
        },
        None => ParsedContentType::default(),
    };
    if raw.len() > body_start
        && part.ctype.mimetype.starts_with("multipart")
        && let Some(boundary) = part.ctype.params.get("boundary")
        && let Some(depth) = depth.checked_sub(1)
    {
        let boundary = format!("--{boundary}");
        let digest = part.ctype.mimetype == "multipart/digest";
        let (subparts, body_end) =
            split_multipart(raw, body_start, boundary.as_bytes(), digest, depth)?;
        part.subparts = subparts;
        part.body = &raw[body_start..body_end];
    }
    Ok(part)
}

/// The start of the header block `head` holding its first `max` fields
/// (a field is a line that does not start with a space or a tab, with the
/// lines that continue it): all of it if it has no more.
fn first_fields(head: &[u8], max: usize) -> &[u8] {
    let mut fields = 0;
    let mut at = 0;
    while at < head.len() {
        if !matches!(head[at], b' ' | b'\t') {
            if fields == max {
                return &head[..at];
            }
            fields += 1;
        }
        match memchr::memchr(b'\n', &head[at..]) {
            Some(p) => at += p + 1,
            None => break,
        }
    }
    head
}

/// The parts of a multipart body and where its preamble ends.
fn split_multipart<'a>(
    raw: &'a [u8],
    body_start: usize,
    boundary: &[u8],
    digest: bool,
    depth: u8,
) -> std::result::Result<(Vec<Part<'a>>, usize), MailParseError> {
    let mut subparts = Vec::new();
    let finder = memchr::memmem::Finder::new(boundary);
    // A boundary counts only at the start of a line.
    let find_boundary = |from: usize| {
        let mut at = from;
        while let Some(p) = finder.find(&raw[at..]) {
            let hit = at + p;
            if hit == from || raw[hit - 1] == b'\n' {
                return Some(hit);
            }
            at = hit + 1;
        }
        None
    };
    let Some(first) = find_boundary(body_start) else {
        return Ok((subparts, body_start));
    };
    let body_end = strip_line_end(raw, body_start, first);
    let mut boundary_end = first + boundary.len();
    while let Some(start) =
        memchr::memchr(b'\n', &raw[boundary_end..]).map(|p| boundary_end + p + 1)
    {
        // The last part a multipart may have takes the rest of the body:
        // memory stays bounded however many boundaries a message repeats.
        let next = if subparts.len() + 1 < MAX_PARTS {
            find_boundary(start)
        } else {
            None
        };
        let end = next.map_or(raw.len(), |b| strip_line_end(raw, start, b));
        subparts.push(parse_part(&raw[start..end], digest, depth)?);
        boundary_end = next.map_or(raw.len(), |b| b + boundary.len());
        if boundary_end + 2 > raw.len() || raw[boundary_end..].starts_with(b"--") {
            break;
        }
    }
    Ok((subparts, body_end))
}

/// `end` moved back over one LF or CRLF (not before `start`): the line end
/// before a boundary belongs to the boundary.
fn strip_line_end(raw: &[u8], start: usize, mut end: usize) -> usize {
    if end > start && raw[end - 1] == b'\n' {
        end -= 1;
        if end > start && raw[end - 1] == b'\r' {
            end -= 1;
        }
    }
    end
}

/// The parameters of a `Content-Type` or `Content-Disposition` value that
/// this module reads, with the value before them: at most [`MAX_PARAMS`],
/// split at `;` outside quotes as mailparse splits them.
///
/// An opening quote that is never closed (`boundary="--_=_x` with no
/// closing quote, as some spam writes it) is dropped and the value read
/// again without it, so that parameter's value is read unquoted and the
/// parameters after it stay parameters, as mail readers read them.
fn kept_params(value: &str) -> String {
    match kept_params_once(value) {
        (_, Some(open)) => kept_params_once(&[&value[..open], &value[open + 1..]].concat()).0,
        (out, None) => out,
    }
}

/// [`kept_params`] in one pass; also returns the offset of a quote left
/// open at the end of `value`.
fn kept_params_once(value: &str) -> (String, Option<usize>) {
    const READ: [&str; 4] = ["charset", "boundary", "name", "filename"];
    let mut out = String::new();
    let (mut kept, mut first) = (0, true);
    let (mut start, mut quoted, mut escaped, mut opened) = (0, false, false, 0);
    let bytes = value.as_bytes();
    for i in 0..=bytes.len() {
        let b = bytes.get(i).copied();
        if escaped {
            escaped = false;
            continue;
        } else if quoted && b == Some(b'\\') {
            escaped = true;
            continue;
        } else if b == Some(b'"') {
            quoted = !quoted;
            opened = i;
            continue;
        } else if b.is_some() && (b != Some(b';') || quoted) {
            continue;
        }
        let piece = &value[start..i];
        start = i + 1;
        if first {
            first = false;
            out.push_str(piece);
            continue;
        }
        let key = piece.split('=').next().unwrap_or("").trim();
        let key = key.split('*').next().unwrap_or("");
        if kept < MAX_PARAMS && READ.iter().any(|r| key.eq_ignore_ascii_case(r)) {
            out.push(';');
            out.push_str(piece);
            kept += 1;
        }
    }
    (out, quoted.then_some(opened))
}

/// A `Content-Type` field's value read in linear time.
fn content_type(raw: &[u8]) -> ParsedContentType {
    mailparse::parse_content_type(&kept_params(&decode::header_value(raw)))
}

/// A `Content-Disposition` field's value read in linear time.
fn content_disposition(raw: &[u8]) -> ParsedContentDisposition {
    mailparse::parse_content_disposition(&kept_params(&decode::header_value(raw)))
}

fn walk(part: &Part<'_>, walker: &mut Walker<'_>, depth: usize) {
    // A missing ';' ("TEXT/PLAIN charset=US-ASCII") leaves the parameters
    // in the type; mail clients read such a part by its type alone.
    let mimetype = part
        .ctype
        .mimetype
        .split(|c: char| c.is_whitespace() || c == ';')
        .next()
        .unwrap_or("");
    if mimetype.starts_with("multipart/") && !part.subparts.is_empty() {
        for sub in &part.subparts {
            walk(sub, walker, depth);
        }
        return;
    }
    walker.msg.content_types.push(mimetype.to_owned());
    let disposition = part
        .raw_header("Content-Disposition")
        .map(content_disposition)
        .unwrap_or_default();
    let filename = disposition
        .params
        .get("filename")
        .or_else(|| part.ctype.params.get("name"))
        .cloned();
    let is_attachment =
        matches!(disposition.disposition, DispositionType::Attachment) && filename.is_some();
    let encoding = part
        .raw_header("Content-Transfer-Encoding")
        .map(|e| decode::header_value(e).trim().to_ascii_lowercase());
    let encoded = part.body;
    let charset = part
        .ctype
        .params
        .get("charset")
        .map(|c| c.to_ascii_lowercase());
    let text_kind = match mimetype {
        "text/html" => Some(TextKind::Html),
        // A missing, empty or broken type, and multipart without parts, are
        // read as plain text: mail clients show them that way.
        "text/plain" | "text" | "" => Some(TextKind::Plain),
        m if m.starts_with("multipart/") || !m.contains('/') => Some(TextKind::Plain),
        _ => None,
    };
    match text_kind {
        Some(kind) => {
            let text = text_of(encoded, encoding.as_deref(), kind);
            if is_attachment {
                // Kept aside: read only if the message has no other text.
                if walker.text_attachment.is_none() {
                    walker.text_attachment = Some((text, charset, kind));
                }
                walker.msg.attachments.push(Attachment {
                    content_type: mimetype.to_owned(),
                    filename,
                    size: decoded_len(encoded, encoding.as_deref()),
                });
            } else {
                push_part(walker.msg, text, charset, kind);
            }
        }
        None if mimetype == "message/rfc822" && !is_attachment => {
            let bytes = transfer_decode(encoded, encoding.as_deref(), usize::MAX);
            if depth >= MAX_NESTING {
                // Too deep to walk on: read as it is written, as text.
                let text = TextBytes::capped(&bytes, TextKind::Plain);
                push_part(walker.msg, text, None, TextKind::Plain);
                return;
            }
            match parse_part(&bytes, false, MAX_MULTIPART_DEPTH) {
                Ok(inner) => {
                    if let Some(subject) = inner.raw_header("Subject") {
                        push_text(
                            walker.msg,
                            decode::header_value(subject).as_bytes(),
                            Some("utf-8".into()),
                            TextKind::Plain,
                        );
                    }
                    walk(&inner, walker, depth + 1);
                }
                Err(_) => push_text(walker.msg, &bytes, None, TextKind::Plain),
            }
        }
        None => {
            walker.msg.attachments.push(Attachment {
                content_type: mimetype.to_owned(),
                filename,
                size: decoded_len(encoded, encoding.as_deref()),
            });
        }
    }
}

/// Walks a MIME tree into a message.
struct Walker<'m> {
    msg: &'m mut Message,
    /// The first text part marked as an attachment, read as the body if the
    /// message has no other text.
    text_attachment: Option<(TextBytes, Option<String>, TextKind)>,
}

/// The size of a part's body after transfer decoding.
fn decoded_len(encoded: &[u8], encoding: Option<&str>) -> usize {
    match encoding {
        Some("base64") => decode::base64_decoded_len(encoded),
        _ => encoded.len(),
    }
}

/// Undoes a transfer encoding, reading at most `limit` encoded bytes.
fn transfer_decode<'a>(encoded: &'a [u8], encoding: Option<&str>, limit: usize) -> Cow<'a, [u8]> {
    let encoded = &encoded[..encoded.len().min(limit)];
    match encoding {
        Some("base64") => Cow::Owned(decode::base64_lenient(encoded)),
        Some("quoted-printable") => Cow::Owned(decode::quoted_printable(encoded)),
        _ => Cow::Borrowed(encoded),
    }
}

/// The bytes of a text part that are read: at most [`TEXT_PART_CAP`], from
/// where its text starts ([`text_start`]).
struct TextBytes {
    bytes: Vec<u8>,
    truncated: bool,
}

impl TextBytes {
    fn capped(bytes: &[u8], kind: TextKind) -> TextBytes {
        // A part within the cap is read whole, its prefix as well.
        let skip = if bytes.len() > TEXT_PART_CAP {
            text_start(bytes, kind)
        } else {
            0
        };
        let bytes = &bytes[skip..];
        TextBytes {
            bytes: bytes[..bytes.len().min(TEXT_PART_CAP)].to_vec(),
            truncated: bytes.len() > TEXT_PART_CAP,
        }
    }
}

/// The text bytes of a part. An encoded part is decoded from at most
/// [`ENCODED_READ_CAP`] bytes, so a long prefix without text can be skipped
/// without decoding a part of any size.
fn text_of(encoded: &[u8], encoding: Option<&str>, kind: TextKind) -> TextBytes {
    match encoding {
        Some("base64" | "quoted-printable") => {
            let decoded = transfer_decode(encoded, encoding, ENCODED_READ_CAP);
            let mut text = TextBytes::capped(&decoded, kind);
            text.truncated |= encoded.len() > ENCODED_READ_CAP;
            text
        }
        _ => TextBytes::capped(encoded, kind),
    }
}

/// Where the text of a part starts: after its leading white space and, in
/// HTML, the comments among it. Such a prefix shows nothing, so it must not
/// use up the cap before the first text (a 2 MB comment once hid a body).
fn text_start(bytes: &[u8], kind: TextKind) -> usize {
    let mut at = 0;
    loop {
        at += bytes[at..]
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(bytes.len() - at);
        if kind == TextKind::Html && bytes[at..].starts_with(b"<!--") {
            match memchr::memmem::find(&bytes[at + 4..], b"-->") {
                Some(end) => at += 4 + end + 3,
                None => return at,
            }
        } else {
            return at;
        }
    }
}

fn push_part(msg: &mut Message, text: TextBytes, charset: Option<String>, kind: TextKind) {
    push_text(msg, &text.bytes, charset, kind);
    if text.truncated
        && let Some(last) = msg.parts.last_mut()
    {
        last.truncated = true;
    }
}

fn push_text(msg: &mut Message, bytes: &[u8], charset: Option<String>, kind: TextKind) {
    let text = decode::decode_charset(bytes, charset.as_deref());
    let (text, hidden) = match kind {
        TextKind::Plain => (text, String::new()),
        TextKind::Html => {
            let out = html::to_text(&text);
            msg.links.extend(out.links);
            (out.text, out.hidden)
        }
    };
    msg.parts.push(TextPart {
        kind,
        text,
        hidden,
        charset,
        truncated: false,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_fields_of_a_header_are_read() {
        let head = b"A: 1\n folded\nB: 2\n\tmore\nC: 3\n";
        assert_eq!(first_fields(head, 1), b"A: 1\n folded\n");
        assert_eq!(first_fields(head, 2), b"A: 1\n folded\nB: 2\n\tmore\n");
        assert_eq!(first_fields(head, 3), head);
        assert_eq!(first_fields(b"A: 1", 1), b"A: 1");
        // A message of a million tiny fields keeps a bounded number, and
        // what comes after them still reads.
        let mut raw = b"Subject: hello\n".to_vec();
        raw.extend(b"a:b\n".repeat(1_000_000));
        raw.extend(b"\nbody words here\n");
        let msg = parse(&raw).unwrap();
        assert_eq!(msg.headers.len(), MAX_HEADER_FIELDS);
        assert!(msg.fields_capped);
        assert!(!parse(b"Subject: hello\n\nbody\n").unwrap().fields_capped);
        assert_eq!(msg.subject(), "hello");
        assert!(msg.parts[0].text.contains("body words here"));
    }

    #[test]
    fn a_multipart_of_endless_empty_parts_is_split_into_a_bounded_number() {
        let mut raw = b"Content-Type: multipart/mixed; boundary=b\n\n".to_vec();
        for _ in 0..50_000 {
            raw.extend_from_slice(b"--b\n\n");
        }
        raw.extend_from_slice(b"--b\n\nlast words\n--b--\n");
        let part = parse_part(&raw, false, MAX_MULTIPART_DEPTH).unwrap();
        assert_eq!(part.subparts.len(), MAX_PARTS);
        let msg = parse(&raw).unwrap();
        assert!(msg.parts.iter().any(|p| p.text.contains("last words")));
    }

    #[test]
    fn digest_ignores_storage_details_but_not_content() {
        let a = digest(b"Subject: hi\nFrom: a@b.example\n\nbody\n");
        let crlf = digest(b"Subject: hi\r\nFrom: a@b.example\r\n\r\nbody\r\n");
        let moved = digest(
            b"From a@b Mon Jan  1 00:00:00 2024\nSubject: hi\nStatus: RO\nX-Spam-Status: Yes,\n  probability=1\nFrom: a@b.example\n\nbody\n",
        );
        assert_eq!(a, crlf);
        assert_eq!(a, moved);
        // As `filter` writes it: a forged field renamed, ours added.
        let filtered = digest(
            b"Subject: hi\nOld-X-Spam-Status: No\nFrom: a@b.example\nX-Spam-Flag: YES\nX-Spam-Status: Yes, probability=1\n\nbody\n",
        );
        assert_eq!(a, filtered);
        assert_ne!(a, digest(b"Subject: hi\nFrom: a@b.example\n\nbody!\n"));
        assert_ne!(a, digest(b"Subject: ho\nFrom: a@b.example\n\nbody\n"));
    }

    #[test]
    fn empty_input_is_an_error() {
        assert_eq!(parse(b""), Err(Error::Empty));
        assert_eq!(parse(b" \r\n\t"), Err(Error::Empty));
    }

    #[test]
    fn decodes_encoded_words_and_bodies() {
        let raw = b"Subject: =?iso-8859-1?Q?Caf=E9?= =?utf-8?B?IOKCrA==?=\n\
            Content-Type: multipart/alternative; boundary=\"b\"\n\n\
            --b\nContent-Type: text/plain; charset=koi8-r\nContent-Transfer-Encoding: base64\n\n8NLJ18XU\n\
            --b\nContent-Type: text/html; charset=utf-8\nContent-Transfer-Encoding: quoted-printable\n\n\
            <a href=3D\"http://x.example/\">caf=C3=A9</a>\n--b--\n";
        let msg = parse(raw).unwrap();
        assert_eq!(msg.subject(), "Café €");
        assert_eq!(msg.parts.len(), 2);
        assert_eq!(msg.parts[0].text, "Привет");
        assert_eq!(msg.parts[1].kind, TextKind::Html);
        assert_eq!(msg.parts[1].text.trim(), "café");
        assert_eq!(msg.links, ["http://x.example/"]);
        assert_eq!(msg.content_types, ["text/plain", "text/html"]);
    }

    #[test]
    fn attachments_are_described_not_decoded() {
        let raw = b"Content-Type: multipart/mixed; boundary=x\n\n--x\n\nhello\n--x\n\
            Content-Type: application/pdf; name=\"a.pdf\"\nContent-Disposition: attachment; filename=\"a.pdf\"\n\
            Content-Transfer-Encoding: base64\n\nJVBERi0xLjQK\n--x--\n";
        let msg = parse(raw).unwrap();
        assert_eq!(msg.parts.len(), 1);
        assert_eq!(
            msg.attachments,
            [Attachment {
                content_type: "application/pdf".into(),
                filename: Some("a.pdf".into()),
                size: 9
            }]
        );
    }

    #[test]
    fn a_type_without_its_semicolon_is_still_text() {
        let msg = parse(b"Content-Type: TEXT/PLAIN charset=US-ASCII\n\nhello there\n").unwrap();
        assert_eq!(msg.parts.len(), 1);
        assert!(msg.attachments.is_empty());
        assert_eq!(msg.content_types, ["text/plain"]);
    }

    #[test]
    fn forwarded_messages_are_read() {
        let raw = b"Content-Type: message/rfc822\n\nSubject: inner news\n\nforwarded body\n";
        let msg = parse(raw).unwrap();
        let all: Vec<&str> = msg.parts.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(all, ["inner news", "forwarded body\n"]);
    }

    /// The text of every part, joined.
    fn all_text(msg: &Message) -> String {
        msg.parts.iter().map(|p| p.text.as_str()).collect()
    }

    #[test]
    fn a_header_block_without_a_blank_line_keeps_its_body() {
        let msg = parse(b"Subject: cheap meds\nBuy pills now at\nhttp://x.example/\n").unwrap();
        assert_eq!(msg.subject(), "cheap meds");
        assert_eq!(msg.headers.len(), 1);
        assert_eq!(all_text(&msg), "Buy pills now at\nhttp://x.example/\n");
        assert!(msg.malformed);
        let crlf =
            parse(b"Subject: cheap meds\r\nBuy pills now at\r\nhttp://x.example/\r\n").unwrap();
        assert_eq!(msg, crlf);
        let fine = parse(b"Subject: cheap meds\n\nBuy pills now at\n").unwrap();
        assert!(!fine.malformed);
    }

    #[test]
    fn a_part_without_headers_is_plain_text() {
        let raw = b"Content-Type: multipart/alternative; boundary=b\n\n\
            --b\nBuy pills now\nat http://x.example/\n--b\nContent-Type: text/html\n\n<p>second</p>\n--b--\n";
        let msg = parse(raw).unwrap();
        assert_eq!(msg.content_types, ["text/plain", "text/html"]);
        assert_eq!(msg.parts[0].text, "Buy pills now\nat http://x.example/");
        assert_eq!(msg.parts[1].text.trim(), "second");
        // A part whose first line reads like a field still starts its body
        // at the first line that is not one.
        let raw =
            b"Content-Type: multipart/mixed; boundary=b\n\n--b\nNote: read this\nBuy now\n--b--\n";
        let msg = parse(raw).unwrap();
        assert_eq!(all_text(&msg), "Buy now");
    }

    #[test]
    fn an_unterminated_quoted_boundary_still_splits_the_parts() {
        let raw = b"Content-Type: multipart/alternative; boundary=\"--_=_swift-123\n\n\
            ----_=_swift-123\nContent-Type: text/plain\n\nverify your account\n\
            ----_=_swift-123\nContent-Type: text/html\n\n<b>now</b>\n----_=_swift-123--\n";
        let msg = parse(raw).unwrap();
        assert_eq!(msg.content_types, ["text/plain", "text/html"]);
        assert_eq!(msg.parts[0].text, "verify your account");
        assert_eq!(msg.parts[1].text.trim(), "now");
        // The open quote does not swallow the parameters after it.
        let raw =
            b"Content-Type: multipart/mixed; boundary=\"b; charset=utf-8\n\n--b\n\nhello\n--b--\n";
        assert_eq!(all_text(&parse(raw).unwrap()), "hello");
    }

    #[test]
    fn boundary_lines_with_trailing_junk_still_split() {
        let raw = b"Content-Type: multipart/mixed; boundary=b\n\n\
            --b  junk\n\nfirst\n--b\t\tmore junk\n\nsecond\n--b--  trailing\n\nepilogue\n";
        let msg = parse(raw).unwrap();
        let texts: Vec<&str> = msg.parts.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(texts, ["first", "second"]);
    }

    #[test]
    fn a_missing_closing_boundary_ends_the_last_part_at_the_end() {
        let raw =
            b"Content-Type: multipart/mixed; boundary=b\n\n--b\n\nfirst\n--b\n\nsecond\nand last\n";
        let msg = parse(raw).unwrap();
        let texts: Vec<&str> = msg.parts.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(texts, ["first", "second\nand last\n"]);
    }

    #[test]
    fn digest_reads_the_header_block_by_the_split_rule() {
        // Volatile fields before the blank-less body are left out…
        let a = digest(b"Subject: hi\nStatus: RO\nBuy pills\n\nmore\n");
        assert_eq!(a, digest(b"Subject: hi\nBuy pills\n\nmore\n"));
        // …but a body line that looks like one of them is content.
        assert_ne!(
            digest(b"Subject: hi\nBuy pills\nStatus: RO\n"),
            digest(b"Subject: hi\nBuy pills\n")
        );
    }

    #[test]
    fn crlf_and_envelope_line_do_not_change_the_result() {
        let lf = parse(b"Subject: hi\nX-A: b\n\nbody\nline\n").unwrap();
        let crlf = parse(b"Subject: hi\r\nX-A: b\r\n\r\nbody\r\nline\r\n").unwrap();
        let env = parse(b"From someone@example.com Mon Jan  1 00:00:00 2024\nSubject: hi\nX-A: b\n\nbody\nline\n")
            .unwrap();
        assert_eq!(lf, crlf);
        assert_eq!(lf, env);
    }
}
