//! One function from a message to what the models learn from: the binary
//! bag of words (a sorted, de-duplicated token set) and the numeric metadata
//! vector. Training, classification, filtering, scanning and evaluation all
//! call [`Extractor::extract`], so they can never disagree on features.
//!
//! # Token namespaces
//! | prefix | source |
//! |---|---|
//! | (none) | words of the body text (plain parts, the visible text of HTML parts, forwarded messages) |
//! | `HID:` | words of hidden HTML text (`display:none`, `visibility:hidden`, zero `font-size`, the `hidden` attribute) |
//! | `SUBJ:` | words of the Subject |
//! | `FROM:` | the sender's address, and the words of the sender's display name |
//! | `FROMDOM:` | the sender's domain and its parent domain |
//! | `RT:` | the Reply-To address; `RT:other-domain` if its domain differs from the sender's |
//! | `URL:` | hosts of URLs in text and of HTML link/image/form targets, their parent domains, `URL:ip-address` for numeric hosts |
//! | `MAILER:` | words of X-Mailer / User-Agent |
//! | `MSGID:` | the domain of the Message-ID and its parent |
//! | `RCVD:` | words of every Received header, without its trailing date |
//! | `CT:` | MIME type of every leaf part |
//! | `CS:` | declared charsets of text parts |
//! | `ATT:` | file-name extensions of attachments |
//! | `HDR:` | structural flags: `HDR:no-date`, `HDR:no-message-id`, `HDR:no-subject`, `HDR:html-only`, `HDR:malformed`, `HDR:too-many-fields` (more than are read) |
//!
//! At most [`MAX_TOKENS`] distinct tokens are taken from one message.
//!
//! To, Cc and list headers are deliberately not tokenized: they name the
//! mailbox owner and lists more than the sender (see `docs/features.md`).
//!
//! # Metadata (the Gaussian path)
//! See [`METADATA_NAMES`]; each value and its transform is documented there.

pub mod grams;

use serde::Serialize;

use crate::message::{self, Message, TextKind};
use crate::tokenize::{self, Analyzer, TokenList, TokenSet};

/// At most this many distinct tokens are taken from one message: the
/// first ones, in the order [`Extractor::from_message`] reads the message
/// (Received headers, subject, text, link hosts, then the sender and the
/// structure tokens, for which the last [`STRUCTURE_TOKENS`] are kept). A
/// message with a million distinct words would otherwise cost the store
/// and the model memory for each of them. Ordinary mail has a few hundred.
pub const MAX_TOKENS: usize = 8192;
/// Of [`MAX_TOKENS`], the room left for the tokens read after the text.
pub const STRUCTURE_TOKENS: usize = 256;

use crate::vocab::{Feature, METADATA_LEN, METADATA_NAMES, is_bucket};

/// The numeric metadata of one message, in [`METADATA_NAMES`] order.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Metadata(pub [f64; METADATA_LEN]);

impl Serialize for Metadata {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(METADATA_LEN))?;
        for (name, value) in METADATA_NAMES.iter().zip(self.0) {
            map.serialize_entry(name, &value)?;
        }
        map.end()
    }
}

/// What the models see of one message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Features {
    /// Sorted, de-duplicated tokens (the binary bag of words).
    pub tokens: TokenList,
    /// Sorted, distinct byte 4-gram buckets of the raw header block (the
    /// byte view, [`grams`]); empty when only the parsed message was seen.
    /// A number that is no bucket ([`crate::vocab::is_bucket`]) is left out
    /// by every stage.
    #[serde(skip)]
    pub grams: Vec<u32>,
    /// Sorted, distinct buckets of the word tokens
    /// ([`crate::vocab::word_bucket`]): the features of the online
    /// discriminative view ([`crate::model::logistic`]).
    #[serde(skip)]
    pub lr_buckets: Vec<u32>,
    /// The numeric metadata vector.
    pub metadata: Metadata,
}

impl Features {
    /// Calls `f` with every binary feature, in every view: the word
    /// tokens, then the byte view's buckets (those that are buckets).
    pub(crate) fn for_each_feature(&self, mut f: impl FnMut(Feature<'_>)) {
        for token in self.tokens.iter() {
            f(Feature::Word(token));
        }
        for &b in self.grams.iter().filter(|&&b| is_bucket(b)) {
            f(Feature::Gram(b));
        }
    }
}

/// Turns messages into features. Holds a tokenizer pipeline and buffers, so
/// make one per thread (e.g. rayon's `map_init`) and reuse it.
#[derive(Clone, Default)]
pub struct Extractor {
    analyzer: Analyzer,
    set: TokenSet,
}

impl Extractor {
    /// A new extractor.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses raw message bytes and extracts their features, from the
    /// message's [`message::canonical`] bytes (our `X-Spam-*` fields and
    /// other volatile fields, an mbox envelope line and trailing blank lines
    /// are not part of it).
    ///
    /// ```
    /// let f = bayesmail::features::Extractor::new()
    ///     .extract(b"From: Ann <ann@mail.example.org>\nSubject: Lunch?\n\nSee you at noon.\n")
    ///     .unwrap();
    /// assert!(f.tokens.contains("SUBJ:lunch"));
    /// assert!(f.tokens.contains("FROMDOM:example.org"));
    /// assert!(f.tokens.contains("noon"));
    /// ```
    pub fn extract(&mut self, raw: &[u8]) -> Result<Features, message::Error> {
        // The message as it identifies itself: what is counted for it is
        // then the same however it was stored, read or delivered.
        self.of_canonical(&message::canonical(raw))
    }

    /// The features of a message's canonical bytes.
    fn of_canonical(&mut self, canonical: &[u8]) -> Result<Features, message::Error> {
        let mut features = self.from_message(&message::parse(canonical)?);
        features.grams = grams::buckets(canonical);
        Ok(features)
    }

    /// [`Extractor::extract`] and the message's [`message::Identity`], from
    /// one canonical form: what a learner needs of a message.
    pub fn read(&mut self, raw: &[u8]) -> Result<(Features, message::Identity), message::Error> {
        let canonical = message::canonical(raw);
        let features = self.of_canonical(&canonical)?;
        Ok((features, message::Identity::with_canonical(raw, &canonical)))
    }

    /// Extracts the features of a parsed message.
    pub fn from_message(&mut self, msg: &Message) -> Features {
        let set = &mut self.set;
        let analyzer = &mut self.analyzer;
        set.set_limit(Some(MAX_TOKENS - STRUCTURE_TOKENS));
        // One pass over the headers (not a case-insensitive search of all
        // of them per name): the repeated ones are used as they come, as a
        // set has no order; the first of each single one is kept.
        let mut headers = Singles::default();
        let (mut received, mut recipients) = (0, 0);
        let mut net = String::new();
        for header in &msg.headers {
            let slot = match Name::of(&header.name) {
                None => continue,
                Some(Name::Received) => {
                    received += 1;
                    push_received(analyzer, set, &mut net, &header.value);
                    continue;
                }
                Some(Name::ToOrCc) => {
                    recipients += count_addresses(&header.value);
                    continue;
                }
                Some(Name::Subject) => &mut headers.subject,
                Some(Name::From) => &mut headers.from,
                Some(Name::ReplyTo) => &mut headers.reply_to,
                Some(Name::XMailer) => &mut headers.x_mailer,
                Some(Name::UserAgent) => &mut headers.user_agent,
                Some(Name::MessageId) => &mut headers.message_id,
                Some(Name::Date) => &mut headers.date,
            };
            slot.get_or_insert(&header.value);
        }
        let mut urls = 0;
        let subject = headers.subject;
        if let Some(subject) = subject {
            urls += analyzer.tokenize(subject, "SUBJ:", set);
        }
        for part in &msg.parts {
            urls += analyzer.tokenize(&part.text, "", set);
            if let Some(cs) = &part.charset {
                set.push("CS:", cs);
            }
        }
        // After all the visible text, so hidden filler cannot use up the
        // token budget before the words the recipient reads.
        for part in &msg.parts {
            urls += analyzer.tokenize(&part.hidden, "HID:", set);
        }
        let mut host = String::new();
        for link in &msg.links {
            if tokenize::write_url_host(link, &mut host) {
                urls += 1;
                tokenize::push_host(set, &host);
            }
        }
        set.set_limit(Some(MAX_TOKENS));
        let from = headers.from.and_then(first_address);
        let from_domain = from
            .as_ref()
            .and_then(|(_, addr)| domain_of(addr))
            .map(str::to_owned);
        if let Some((name, addr)) = &from {
            set.push("FROM:", addr);
            analyzer.tokenize(name, "FROM:", set);
            if let Some(domain) = &from_domain {
                push_domain(set, "FROMDOM:", domain);
            }
        }
        if let Some((_, addr)) = headers.reply_to.and_then(first_address) {
            set.push("RT:", &addr);
            if domain_of(&addr) != from_domain.as_deref() {
                set.push("RT:", "other-domain");
            }
        }
        for mailer in [headers.x_mailer, headers.user_agent].into_iter().flatten() {
            analyzer.tokenize(mailer, "MAILER:", set);
        }
        if let Some(domain) = headers.message_id.and_then(message_id_domain) {
            push_domain(set, "MSGID:", &domain);
        }
        for ct in &msg.content_types {
            set.push("CT:", ct);
        }
        for att in &msg.attachments {
            if let Some(ext) = att.filename.as_deref().and_then(extension) {
                set.push("ATT:", &ext);
            }
        }
        let date = headers.date.and_then(|d| mailparse::dateparse(d).ok());
        let has_html = msg.parts.iter().any(|p| p.kind == TextKind::Html);
        let has_plain = msg.parts.iter().any(|p| p.kind == TextKind::Plain);
        let html_only = has_html && !has_plain;
        for (flag, on) in [
            ("no-date", date.is_none()),
            ("no-message-id", headers.message_id.is_none()),
            ("no-subject", subject.is_none_or(|s| s.trim().is_empty())),
            ("html-only", html_only),
            ("malformed", msg.malformed),
            ("too-many-fields", msg.fields_capped),
        ] {
            if on {
                set.push("HDR:", flag);
            }
        }

        let url_hosts = set.url_hosts();
        let tokens = set.finish();
        debug_assert_eq!(
            url_hosts,
            tokens.count_prefixed(crate::vocab::URL_NAMESPACE)
        );
        let (upper, letters, non_ascii, non_space, chars) = char_stats(subject, msg);
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let ln1p = |n: usize| (n as f64).ln_1p();
        let (hour_sin, hour_cos) = match date {
            Some(t) => {
                let hour = t.rem_euclid(86_400) as f64 / 3_600.0;
                let angle = hour / 24.0 * std::f64::consts::TAU;
                (angle.sin(), angle.cos())
            }
            None => (0.0, 0.0),
        };
        let metadata = Metadata([
            ln1p(msg.size),
            ln1p(chars),
            ln1p(urls),
            ln1p(url_hosts),
            ratio(upper, letters),
            ratio(non_ascii, non_space),
            f64::from(u8::from(html_only)),
            ln1p(msg.attachments.len()),
            ln1p(recipients),
            ln1p(received),
            hour_sin,
            hour_cos,
        ]);
        Features {
            lr_buckets: lr_buckets(&tokens),
            tokens,
            grams: Vec::new(),
            metadata,
        }
    }
}

/// The sorted, distinct buckets of `tokens`' weights in the online
/// discriminative view ([`crate::vocab::word_bucket`]).
pub fn lr_buckets(tokens: &TokenList) -> Vec<u32> {
    let mut out: Vec<u32> = tokens.iter().map(crate::vocab::word_bucket).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The single headers features are made of: the first of each.
#[derive(Default)]
struct Singles<'a> {
    subject: Option<&'a str>,
    from: Option<&'a str>,
    reply_to: Option<&'a str>,
    x_mailer: Option<&'a str>,
    user_agent: Option<&'a str>,
    message_id: Option<&'a str>,
    date: Option<&'a str>,
}

/// Which header a name is, for the names features are made of.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Name {
    Subject,
    From,
    ReplyTo,
    XMailer,
    UserAgent,
    MessageId,
    Date,
    Received,
    ToOrCc,
}

impl Name {
    /// The header `name` is (case-insensitively), if features use it.
    fn of(name: &str) -> Option<Name> {
        // Its length first: most names are of none of these lengths, and
        // the rest are compared with a few names each, in place (copying a
        // name of any length into a buffer costs a `memcpy` call).
        let is = |want: &str| name.eq_ignore_ascii_case(want);
        Some(match name.len() {
            2 if is("to") || is("cc") => Name::ToOrCc,
            4 if is("from") => Name::From,
            4 if is("date") => Name::Date,
            7 if is("subject") => Name::Subject,
            8 if is("received") => Name::Received,
            8 if is("reply-to") => Name::ReplyTo,
            8 if is("x-mailer") => Name::XMailer,
            10 if is("user-agent") => Name::UserAgent,
            10 if is("message-id") => Name::MessageId,
            _ => return None,
        })
    }
}

/// Pushes the tokens of one Received header (`net` is room for writing the
/// network tokens, kept from one header to the next).
fn push_received(analyzer: &mut Analyzer, set: &mut TokenSet, net: &mut String, received: &str) {
    // The trailing "; date" says when the message was collected, not who
    // sent it: tokens of it would teach the calendar. It is cut off with
    // a vector search (`rsplit_once` uses the standard library's,
    // which reads a word at a time), as this runs over every Received.
    let route = memchr::memrchr(b';', received.as_bytes()).map_or(received, |at| &received[..at]);
    analyzer.tokenize(route, "RCVD:", set);
    // Relay addresses become number shapes as words; their networks (/24
    // and /16) are kept, as sender reputation is by network.
    for [a, b, c, _] in ipv4_addresses(route) {
        net.clear();
        net.push_str("net/16:");
        push_decimal(net, a);
        net.push('.');
        push_decimal(net, b);
        set.push("RCVD:", net);
        net.replace_range(..7, "net/24:");
        net.push('.');
        push_decimal(net, c);
        set.push("RCVD:", net);
    }
}

/// `(display name, lower-cased address)` of the first mailbox of an address
/// header, as [`addresses`] gives it. A header that is one plain mailbox,
/// as most From and Reply-To headers are, is read without the parser
/// ([`plain_mailbox`]).
fn first_address(value: &str) -> Option<(String, String)> {
    match plain_mailbox(value) {
        Some((name, addr)) => Some((name.to_owned(), addr.to_lowercase())),
        None => addresses(value).into_iter().next(),
    }
}

/// `(display name, lower-cased address)` of each mailbox in an address
/// header; groups are flattened. Unparseable headers give what can be
/// salvaged (an `@`-word), or nothing.
fn addresses(value: &str) -> Vec<(String, String)> {
    use mailparse::MailAddr;
    match mailparse::addrparse(value) {
        Ok(list) => list
            .iter()
            .flat_map(|a| match a {
                MailAddr::Single(s) => vec![(
                    s.display_name.clone().unwrap_or_default(),
                    s.addr.to_lowercase(),
                )],
                MailAddr::Group(g) => g
                    .addrs
                    .iter()
                    .map(|s| {
                        (
                            s.display_name.clone().unwrap_or_default(),
                            s.addr.to_lowercase(),
                        )
                    })
                    .collect(),
            })
            .collect(),
        Err(_) => salvaged(value)
            .map(|w| (String::new(), w.to_lowercase()))
            .collect(),
    }
}

/// The `@`-words of an address header mailparse cannot parse.
fn salvaged(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | ',' | '"'))
        .filter(|w| w.contains('@'))
}

/// `addresses(value).len()`, without copying or lower-casing any of them.
/// A plain list, as most To and Cc headers are, is counted by its commas
/// ([`plain_list_len`]); anything else goes through the parser.
fn count_addresses(value: &str) -> usize {
    plain_list_len(value).unwrap_or_else(|| parsed_count(value))
}

/// A plain address, `local@domain`: one `@` with something on each side,
/// and nothing but printable ASCII outside the specials of RFC 5322.
fn plain_address(a: &str) -> bool {
    let mut at = None;
    for (i, b) in a.bytes().enumerate() {
        let special = matches!(
            b,
            b'<' | b'>' | b'"' | b'(' | b')' | b',' | b';' | b':' | b'\\' | b'[' | b']'
        );
        if !b.is_ascii_graphic() || special || (b == b'@' && at.replace(i).is_some()) {
            return false;
        }
    }
    at.is_some_and(|i| i > 0 && i + 1 < a.len())
}

/// `(display name, address)` of `entry` if it is one plain mailbox, read as
/// mailparse's parser reads it: a plain address alone (no name), or one in
/// angle brackets after a plain name (letters, digits and spaces), after a
/// quoted name without quotes or backslashes inside, or after nothing.
/// Whitespace around the parts is not part of them. `None` for anything
/// else (comments, groups, escapes, lists), which needs the parser.
fn plain_mailbox(entry: &str) -> Option<(&str, &str)> {
    let entry = entry.trim();
    if plain_address(entry) {
        return Some(("", entry));
    }
    let (name, bracketed) = match entry.strip_prefix('"') {
        Some(quoted) => {
            let (name, rest) = quoted.split_once('"')?;
            if name.contains('\\') {
                return None;
            }
            (name, rest.trim_start())
        }
        None => {
            let at = entry.find('<')?;
            let name = &entry[..at];
            if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b' ') {
                return None;
            }
            (name.trim_end(), &entry[at..])
        }
    };
    let address = bracketed.strip_prefix('<')?.strip_suffix('>')?;
    plain_address(address).then_some((name, address))
}

/// The number of entries of a comma-separated list whose every entry is a
/// plain mailbox ([`plain_mailbox`]); `None` for anything else (comments,
/// groups, escapes, a comma inside quotes), which needs the parser.
fn plain_list_len(value: &str) -> Option<usize> {
    let mut entries = 0;
    for entry in value.split(',').filter(|e| !e.trim().is_empty()) {
        plain_mailbox(entry)?;
        entries += 1;
    }
    Some(entries)
}

/// [`count_addresses`] by the parser.
fn parsed_count(value: &str) -> usize {
    use mailparse::MailAddr;
    match mailparse::addrparse(value) {
        Ok(list) => list
            .iter()
            .map(|a| match a {
                MailAddr::Single(_) => 1,
                MailAddr::Group(g) => g.addrs.len(),
            })
            .sum(),
        Err(_) => salvaged(value).count(),
    }
}

/// Appends `n` in decimal (what `write!` does, without the formatter).
fn push_decimal(out: &mut String, n: u8) {
    if n >= 100 {
        out.push(char::from(b'0' + n / 100));
    }
    if n >= 10 {
        out.push(char::from(b'0' + n / 10 % 10));
    }
    out.push(char::from(b'0' + n % 10));
}

/// Dotted-quad IPv4 addresses in text (each octet ≤ 255, not part of a
/// longer dotted run), found as they are asked for.
fn ipv4_addresses(text: &str) -> impl Iterator<Item = [u8; 4]> + '_ {
    let bytes = text.as_bytes();
    let mut next = 0;
    std::iter::from_fn(move || {
        // This runs over every Received header: the scan keeps its place
        // in a local (the iterator's own field would be stored to memory
        // at every byte) and parses by hand without allocating.
        let mut i = next;
        let found = loop {
            let Some(start) = next_digit(bytes, i) else {
                i = bytes.len();
                break None;
            };
            // A run of digits and dots.
            let run = bytes[start..]
                .iter()
                .position(|&b| !b.is_ascii_digit() && b != b'.');
            i = run.map_or(bytes.len(), |r| start + r);
            if start > 0 && bytes[start - 1] == b'.' {
                continue;
            }
            if let Some(ip) = dotted_quad(&bytes[start..i]) {
                break Some(ip);
            }
        };
        next = i;
        found
    })
}

/// Where the first ASCII digit of `bytes` from `from` on is, looking at
/// eight bytes at a time (a route is mostly names, its digits far apart).
fn next_digit(bytes: &[u8], from: usize) -> Option<usize> {
    const LANES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut lanes = [0; 8];
        lanes.copy_from_slice(chunk);
        // Digits become 0 to 9 and nothing else does; a lane is below 10
        // if adding 0x76 to its low seven bits leaves the top bit clear,
        // and it had no top bit of its own (no carry leaves a lane).
        let x = u64::from_le_bytes(lanes) ^ (LANES * u64::from(b'0'));
        let not_digit = ((x & (LANES * 0x7f)) + LANES * 0x76) | x;
        let digits = !not_digit & HIGH;
        if digits != 0 {
            return Some(at + (digits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = bytes.get(at..).unwrap_or_default();
    rest.iter().position(u8::is_ascii_digit).map(|p| at + p)
}

/// The address `run` (digits and dots) spells as a dotted quad, if it is
/// exactly one.
fn dotted_quad(run: &[u8]) -> Option<[u8; 4]> {
    // `0.0.0.0` to `255.255.255.255`: most runs (ids, times, versions)
    // are told apart by their length alone.
    if !(7..=15).contains(&run.len()) {
        return None;
    }
    // One pass: a part ends at a dot or at the end of the run.
    let mut ip = [0u8; 4];
    let (mut octet, mut value, mut digits) = (0, 0u16, 0);
    for &b in run {
        if b == b'.' {
            if digits == 0 || octet == 3 {
                return None;
            }
            ip[octet] = value as u8;
            (octet, value, digits) = (octet + 1, 0, 0);
        } else {
            value = value * 10 + u16::from(b - b'0');
            digits += 1;
            if digits > 3 || value > 255 {
                return None;
            }
        }
    }
    if digits == 0 || octet != 3 {
        return None;
    }
    ip[3] = value as u8;
    Some(ip)
}

/// The lower-cased domain of a Message-ID (`<local@domain>`).
fn message_id_domain(value: &str) -> Option<String> {
    let inner = value.trim().trim_start_matches('<');
    let inner = inner.split('>').next().unwrap_or(inner);
    let (_, domain) = inner.rsplit_once('@')?;
    let domain = domain.trim().trim_end_matches('.').to_lowercase();
    (!domain.is_empty() && !domain.contains(char::is_whitespace)).then_some(domain)
}

fn domain_of(addr: &str) -> Option<&str> {
    addr.rsplit_once('@')
        .map(|(_, d)| d.trim_end_matches('.'))
        .filter(|d| !d.is_empty())
}

fn push_domain(set: &mut TokenSet, namespace: &str, domain: &str) {
    set.push(namespace, domain);
    if let Some(parent) = tokenize::parent_domain(domain)
        && parent != domain
    {
        set.push(namespace, parent);
    }
}

fn extension(filename: &str) -> Option<String> {
    let (_, ext) = filename
        .trim()
        .trim_end_matches(['"', '.'])
        .rsplit_once('.')?;
    let ok = !ext.is_empty() && ext.len() <= 10 && ext.chars().all(char::is_alphanumeric);
    ok.then(|| ext.to_lowercase())
}

/// Byte class counts of one text: (uppercase ASCII, ASCII letters, ASCII
/// whitespace, UTF-8 continuation bytes, ASCII bytes).
fn byte_counts(bytes: &[u8]) -> [usize; 5] {
    let mut total = [0usize; 5];
    // One pass with byte-wide counters, flushed before they can overflow,
    // lets the compiler count 16 or 32 bytes per instruction: every class
    // is a range or two, tested by one wrapping subtraction and one
    // compare each, and chunks are a multiple of 32 bytes long, so only
    // a text's last bytes are counted one at a time.
    for chunk in bytes.chunks(240) {
        let mut n = [0u8; 5];
        for &b in chunk {
            n[0] += u8::from(b.wrapping_sub(b'A') < 26);
            n[1] += u8::from((b | 0x20).wrapping_sub(b'a') < 26);
            // `\t` `\n` `\x0c` `\r` and space (what `is_ascii_whitespace`
            // takes): 9 to 13 but 11, or 32.
            n[2] += u8::from(b.wrapping_sub(9) < 5) - u8::from(b == 11) + u8::from(b == b' ');
            n[3] += u8::from((b as i8) < -64);
            n[4] += u8::from((b as i8) >= 0);
        }
        for (t, n) in total.iter_mut().zip(n) {
            *t += usize::from(n);
        }
    }
    total
}

/// (uppercase letters, letters, non-ASCII chars, non-space chars, chars) over
/// the subject and the text parts. Letters and case are ASCII letters only;
/// every non-ASCII character counts as non-space. That keeps every count a
/// branch-free pass over bytes the compiler can vectorise (this runs over all
/// the text of every message).
fn char_stats(subject: Option<&str>, msg: &Message) -> (usize, usize, usize, usize, usize) {
    let mut stats = (0, 0, 0, 0, 0);
    let texts = subject
        .into_iter()
        .chain(msg.parts.iter().map(|p| p.text.as_str()));
    for text in texts {
        let bytes = text.as_bytes();
        let [upper, letters, space, continuation, ascii] = byte_counts(bytes);
        // A UTF-8 character starts with any byte but a continuation byte.
        let chars = bytes.len() - continuation;
        stats.0 += upper;
        stats.1 += letters;
        stats.2 += chars - ascii;
        stats.3 += chars - space;
        stats.4 += chars;
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPAMMY: &[u8] = b"From: \"Best Deals\" <deals@promo.example.net>\n\
        Reply-To: claims@other.example\nTo: a@x.example, b@x.example\n\
        Subject: =?utf-8?B?RlJFRSBtb25leQ==?=\nDate: Tue, 01 Oct 2002 13:30:00 +0000\n\
        Content-Type: multipart/mixed; boundary=B\n\n--B\nContent-Type: text/html\n\n\
        <p>CLICK <a href=\"http://1.2.3.4/win\">HERE</a></p>\n--B\n\
        Content-Type: application/octet-stream; name=\"prize.exe\"\n\
        Content-Disposition: attachment; filename=\"prize.exe\"\n\
        Content-Transfer-Encoding: base64\n\nTVqQAAMAAAAEAAAA\n--B--\n";

    #[test]
    fn decimals_are_written_as_the_formatter_writes_them() {
        for n in 0..=u8::MAX {
            let mut out = String::from("x");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }

    #[test]
    fn tokens_carry_namespaces() {
        let f = Extractor::new().extract(SPAMMY).unwrap();
        for t in [
            "SUBJ:free",
            "SUBJ:money",
            "FROM:deals@promo.example.net",
            "FROM:best",
            "FROMDOM:promo.example.net",
            "FROMDOM:example.net",
            "RT:claims@other.example",
            "RT:other-domain",
            "URL:1.2.3.4",
            "URL:ip-address",
            "CT:text/html",
            "CT:application/octet-stream",
            "ATT:exe",
            "HDR:html-only",
            "HDR:no-message-id",
            "click",
            "here",
        ] {
            assert!(
                f.tokens.iter().any(|x| x == t),
                "missing {t} in {:?}",
                f.tokens
            );
        }
        let mut sorted = f.tokens.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, f.tokens.to_vec());
    }

    /// A megabyte of Han text, one run, gives a third of a million pairs:
    /// the token budget holds, and the pairs are there.
    #[test]
    fn a_megabyte_of_han_stays_within_the_token_budget() {
        // Characters from across the block, so the pairs are mostly distinct.
        let han: String = (0..350_000u32)
            .map(|i| char::from_u32(0x4e00 + (i * 7919) % 0x5000).unwrap())
            .collect();
        assert!(han.len() >= 1_000_000);
        let raw = format!(
            "Subject: =?UTF-8?B?5p2x5Lqs?=\nContent-Type: text/plain; charset=utf-8\n\
             Content-Transfer-Encoding: 8bit\n\n{han}\n"
        );
        let f = Extractor::new().extract(raw.as_bytes()).unwrap();
        assert!(f.tokens.len() <= MAX_TOKENS, "{}", f.tokens.len());
        assert!(f.tokens.len() > MAX_TOKENS / 2, "{}", f.tokens.len());
        assert!(f.tokens.contains("SUBJ:東京"));
        let first: String = han.chars().take(2).collect();
        assert!(f.tokens.contains(&first));
    }

    #[test]
    fn metadata_values() {
        let f = Extractor::new().extract(SPAMMY).unwrap();
        let m = |name: &str| f.metadata.0[METADATA_NAMES.iter().position(|n| *n == name).unwrap()];
        assert_eq!(m("html_only"), 1.0);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(m("log_attachments"), 2f64.ln()));
        assert!(close(m("log_recipients"), 3f64.ln()));
        assert!(close(m("log_urls"), 2f64.ln()));
        assert_eq!(m("log_received"), 0.0);
        // 13:30 UTC.
        let angle = 13.5 / 24.0 * std::f64::consts::TAU;
        assert!((m("hour_sin") - angle.sin()).abs() < 1e-12);
        assert!((m("hour_cos") - angle.cos()).abs() < 1e-12);
        // "FREE money" + "CLICK\nHERE": 13 uppercase of 18 letters.
        assert!(
            (m("upper_frac") - 13.0 / 18.0).abs() < 1e-12,
            "{}",
            m("upper_frac")
        );
        assert!(f.metadata.0.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn received_headers_give_route_and_networks_but_no_dates() {
        let raw = b"Received: from mx.sender.example (mx.sender.example [203.0.113.7])\n\
            \tby mail.example.org (Postfix) with ESMTP id ABC; Tue, 1 Oct 2002 13:30:00 +0000\n\
            Subject: s\n\nbody\n";
        let f = Extractor::new().extract(raw).unwrap();
        for t in [
            "RCVD:mx.sender.example",
            "RCVD:postfix",
            "RCVD:net/24:203.0.113",
            "RCVD:net/16:203.0",
        ] {
            assert!(f.tokens.contains(t), "missing {t} in {:?}", f.tokens);
        }
        assert!(
            !f.tokens.contains("RCVD:oct") && !f.tokens.contains("RCVD:tue"),
            "{:?}",
            f.tokens
        );
        assert_eq!(
            ipv4_addresses("a 1.2.3.4 b 999.1.1.1 1.2.3 1.2.3.4.5 [10.0.0.255]")
                .collect::<Vec<_>>(),
            [[1, 2, 3, 4], [10, 0, 0, 255]]
        );
    }

    #[test]
    fn next_digit_finds_every_digit_and_nothing_else_in_every_lane() {
        for b in 0..=u8::MAX {
            for filler in [b'a', b'/', b':', 0xb0, 0xff] {
                for at in 0..20 {
                    let mut bytes = [filler; 20];
                    bytes[at] = b;
                    let expected = bytes.iter().position(u8::is_ascii_digit);
                    assert_eq!(next_digit(&bytes, 0), expected, "{b:#x} at {at}");
                    assert_eq!(next_digit(&bytes, at + 1), None, "{b:#x} at {at}");
                }
            }
        }
    }

    #[test]
    fn non_ascii_link_targets_are_read() {
        // Found by fuzzing: a link target without a scheme whose fourth byte
        // is inside a multi-byte character.
        let f =
            Extractor::new().extract(b"Content-Type: text/html\n\n<a href=\"abc\xc3\xa9\">x</a>\n");
        assert!(f.unwrap().tokens.contains("x"));
    }

    #[test]
    fn addresses_are_counted_as_listed() {
        for value in [
            "a@x.example, \"B\" <b@x.example>",
            "list: c@x.example, d@x.example;, e@x.example",
            "broken <<a@x.example b@y.example",
            "",
            "a@x.example, Ann Lee <b@y.example>, , c@z.example",
            "Deal Shopper",
        ] {
            assert_eq!(count_addresses(value), addresses(value).len(), "{value}");
        }
    }

    #[test]
    fn plain_mailboxes() {
        for (value, expected) in [
            ("  Ann@X.example ", Some(("", "Ann@X.example"))),
            (
                "Ann Lee <ann@x.example>",
                Some(("Ann Lee", "ann@x.example")),
            ),
            (
                "\"Lee, Ann (HR)\"\t<ann@x.example>",
                Some(("Lee, Ann (HR)", "ann@x.example")),
            ),
            ("<ann@x.example>", Some(("", "ann@x.example"))),
            ("\"A \\\"B\\\"\" <ann@x.example>", None),
            ("ann@x.example (Ann Lee)", None),
            ("Ann <ann@x.example>, bob@y.example", None),
            ("Ann <ann>", None),
        ] {
            assert_eq!(plain_mailbox(value), expected, "{value}");
            let first = addresses(value).into_iter().next();
            assert_eq!(first_address(value), first, "{value}");
        }
    }

    proptest::proptest! {
        /// Lists counted by their commas count as the parser counts them.
        #[test]
        fn plain_lists_count_as_parsed(
            value in "(a@x\\.org|b@y|Ann Lee|<c@z\\.net>|<>|@|a@|@b| |\t|,|, |\"|\"Lee, Ann\"|\\\\|;|:|\\(){0,12}"
        ) {
            if let Some(n) = plain_list_len(&value) {
                proptest::prop_assert_eq!(n, parsed_count(&value));
            }
        }

        /// A mailbox read without the parser reads as the parser reads it.
        #[test]
        fn plain_mailboxes_read_as_parsed(
            value in "[ \t]{0,2}\
                (\"[A-Za-z ,()<>@\"\\\\\u{e9}]{0,6}\"|[A-Za-z ]{0,6}|[A-Za-z \u{e9}(\"]{0,4})\
                ( {0,2}|[ \t\u{a0}]{0,2})\
                (<[a-zA-Z]{1,3}@[a-z.]{1,4}>|<[a-zA-Z.@ >]{1,8}>|[a-zA-Z]{1,3}@[a-z]{1,3}|[a-zA-Z.@,]{1,6})\
                [ \t]{0,2}"
        ) {
            if let Some((name, addr)) = plain_mailbox(&value) {
                let parsed = addresses(&value);
                proptest::prop_assert_eq!(parsed.len(), 1);
                proptest::prop_assert_eq!(&parsed[0], &(name.to_owned(), addr.to_lowercase()));
            }
        }

        /// The vectorisable counts are the standard library's predicates,
        /// over texts long enough to span several chunks.
        #[test]
        fn byte_counts_are_the_ascii_classes(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..800)
        ) {
            let count = |f: fn(&u8) -> bool| bytes.iter().filter(|b| f(b)).count();
            proptest::prop_assert_eq!(
                byte_counts(&bytes),
                [
                    count(u8::is_ascii_uppercase),
                    count(u8::is_ascii_alphabetic),
                    count(u8::is_ascii_whitespace),
                    count(|b| b & 0xC0 == 0x80),
                    count(u8::is_ascii),
                ]
            );
        }

        /// The scan finds the dotted quads a split into runs of digits and
        /// dots finds: runs not led by a dot, of four parts of one to
        /// three digits, each at most 255.
        #[test]
        fn ipv4_addresses_are_the_dotted_quads(
            text in "([0-9]{1,4}|25[0-9]|\\.|\\.\\.|[a ;/:é°\\[\\]]{1,9}){0,24}"
        ) {
            let expected: Vec<[u8; 4]> = text
                .split(|c: char| !c.is_ascii_digit() && c != '.')
                .filter(|run| !run.starts_with('.'))
                .filter_map(|run| {
                    let parts: Vec<&str> = run.split('.').collect();
                    let mut ip = [0u8; 4];
                    if parts.len() != 4 {
                        return None;
                    }
                    for (octet, part) in ip.iter_mut().zip(&parts) {
                        if part.is_empty() || part.len() > 3 {
                            return None;
                        }
                        *octet = part.parse().ok()?;
                    }
                    Some(ip)
                })
                .collect();
            proptest::prop_assert_eq!(ipv4_addresses(&text).collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn header_names_are_known_in_any_case() {
        for (name, want) in [
            ("Subject", Some(Name::Subject)),
            ("FROM", Some(Name::From)),
            ("reply-TO", Some(Name::ReplyTo)),
            ("X-Mailer", Some(Name::XMailer)),
            ("User-Agent", Some(Name::UserAgent)),
            ("Message-ID", Some(Name::MessageId)),
            ("dATE", Some(Name::Date)),
            ("Received", Some(Name::Received)),
            ("To", Some(Name::ToOrCc)),
            ("cC", Some(Name::ToOrCc)),
            ("Bcc", None),
            ("Form", None),
            ("Subjects", None),
            ("X-Mailers", None),
            ("Message-Id2", None),
            ("Content-Type", None),
            ("", None),
            ("Réceived", None),
        ] {
            assert_eq!(Name::of(name), want, "{name}");
        }
    }

    #[test]
    fn dotted_quads_have_four_parts_of_one_to_three_digits_up_to_255() {
        for (run, want) in [
            ("1.2.3.4", Some([1, 2, 3, 4])),
            ("255.255.255.255", Some([255; 4])),
            ("010.0.0.1", Some([10, 0, 0, 1])),
            ("0001.1.1.1", None),
            ("256.1.1.1", None),
            ("1.1.1.256", None),
            ("1..2.3.4", None),
            ("1.2.3.4.", None),
            ("1.2.3", None),
            ("1.2.3.4.5", None),
            ("1234567", None),
        ] {
            assert_eq!(dotted_quad(run.as_bytes()), want, "{run}");
        }
    }

    #[test]
    fn extension_rules() {
        assert_eq!(extension("a.PDF").as_deref(), Some("pdf"));
        assert_eq!(extension("archive.tar.gz").as_deref(), Some("gz"));
        assert_eq!(extension("noext"), None);
        assert_eq!(extension("weird.$$$"), None);
    }
}
