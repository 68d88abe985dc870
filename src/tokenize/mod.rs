//! Text to tokens: tantivy's tokenizer pipeline, a tokenizer that splits on
//! Unicode word boundaries (UAX #29, from unicode-segmentation), keeps URLs
//! whole and lower-cases each word as it copies it out, followed by filters
//! that reduce URLs to their host, turn numbers into shapes and drop
//! over-long tokens. It is composed as `TextAnalyzer::builder` composes it,
//! but kept with its concrete type rather than boxed into a `TextAnalyzer`
//! (a test holds the two to the same tokens). Invisible characters
//! (zero-width spaces, soft hyphens, bidi controls) are removed before
//! splitting, so `vi\u{200b}agra` is one word.
//!
//! This module owns tantivy; no tantivy type leaves it. It knows nothing of
//! messages: [`crate::features`] decides which text goes in under which
//! namespace.

mod words;

use tantivy::tokenizer::{Token, TokenFilter, TokenStream, Tokenizer};

pub use words::MailWordTokenizer;

/// Version of the feature rules (word tokens and the byte view's n-grams).
/// Any change that alters the features of some message must bump it, so
/// stored counts are never mixed across tokenizers.
pub const TOKENIZER_VERSION: u32 = 3;

/// Longest token, in bytes, namespace included. Longer ones are dropped.
pub const MAX_TOKEN_LEN: usize = 48;
/// Longest namespace prefix (`FROMDOM:`).
pub const MAX_NAMESPACE_LEN: usize = 8;
/// Prefix of URL host tokens.
pub const URL_NAMESPACE: &str = "URL:";

/// Tokens of one message: de-duplicated as they arrive (a hash table over
/// an arena, so a repeated word costs no allocation and is never copied),
/// then sorted into the binary bag of words.
#[derive(Default, Clone)]
pub struct TokenSet {
    /// Each distinct token's bytes, in arrival order (UTF-8 as a whole).
    arena: Vec<u8>,
    /// Each distinct token, in arrival order.
    spans: Vec<Span>,
    /// Open-addressing table over `spans` (a power of two long, or empty).
    slots: Vec<Slot>,
    /// The slots in use, to empty them again after a message.
    used: Vec<u32>,
    /// Room for sorting `spans`.
    scratch: Vec<Span>,
    /// Distinct tokens pushed by [`push_host`].
    hosts: usize,
    /// At most this many distinct tokens are kept, if set.
    limit: Option<usize>,
}

/// Slots a [`TokenSet`]'s table keeps between messages (a message has
/// about 200 distinct tokens); a larger table is dropped after its message.
const SLOTS_KEPT: usize = 4096;

/// A slot of the token table: 32 bits of the token's hash (never zero;
/// zero marks an empty slot) and its index in the spans. Eight bytes, so
/// the table of a message stays in the nearest cache: a lookup is bound by
/// the load of its slot.
#[derive(Clone, Copy, Default)]
struct Slot {
    tag: u32,
    index: u32,
}

/// The tag of a slot from a token's hash: bits the slot's position does
/// not use, never zero.
fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32 | 1
}

/// Sorts spans into token order: a counting sort by first byte through
/// `scratch`, then each bucket by the integer keys alone (a cheap
/// comparison the sort can inline), then the rare runs that tie on them
/// (tokens alike in their first 16 bytes) by their full text.
fn sort_spans(spans: &mut Vec<Span>, scratch: &mut Vec<Span>, arena: &[u8]) {
    let mut bounds = [0u32; 256];
    for s in spans.iter() {
        bounds[s.first_byte()] += 1;
    }
    let mut total = 0;
    for end in &mut bounds {
        total += *end;
        *end = total;
    }
    // Filled from the end of each bucket down, so `bounds` ends up holding
    // each bucket's start.
    scratch.clear();
    scratch.resize(spans.len(), Span::default());
    for s in spans.iter().rev() {
        let at = &mut bounds[s.first_byte()];
        *at -= 1;
        scratch[*at as usize] = *s;
    }
    std::mem::swap(spans, scratch);
    let wide = |s: &Span| (u128::from(s.keys[0]) << 64) | u128::from(s.keys[1]);
    for (b, &start) in bounds.iter().enumerate() {
        let end = bounds.get(b + 1).map_or(spans.len(), |&e| e as usize);
        let bucket = &mut spans[start as usize..end];
        if bucket.len() > 1 {
            bucket.sort_unstable_by_key(wide);
        }
    }
    // Neighbours are compared by their keys alone; a tie starts a run.
    let mut i = 1;
    while i < spans.len() {
        if spans[i].keys != spans[i - 1].keys {
            i += 1;
            continue;
        }
        let start = i - 1;
        let keys = spans[start].keys;
        let run = spans[start..].iter().take_while(|s| s.keys == keys).count();
        spans[start..start + run].sort_unstable_by(|x, y| x.text(arena).cmp(y.text(arena)));
        i = start + run + 1;
    }
}

/// Where a token lies in the arena, with its first 16 bytes as two
/// big-endian integers padded with zeros. Most tokens are no longer than
/// that, so equality and order are mostly decided by comparing integers,
/// without reading the arena.
#[derive(Clone, Copy, Default)]
struct Span {
    keys: [u64; 2],
    start: u32,
    end: u32,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("distinct", &self.spans.len())
            .finish()
    }
}

/// Up to 8 bytes of `bytes` from `at`, as a big-endian integer padded with
/// zeros (so integers order like the byte strings they start). Loads of two
/// overlapping halves instead of a byte loop.
fn key_at(bytes: &[u8], at: usize) -> u64 {
    let rest = bytes.get(at..).unwrap_or_default();
    let n = rest.len();
    let be32 = |i: usize| {
        u64::from(u32::from_be_bytes([
            rest[i],
            rest[i + 1],
            rest[i + 2],
            rest[i + 3],
        ]))
    };
    let be16 = |i: usize| u64::from(u16::from_be_bytes([rest[i], rest[i + 1]]));
    match n {
        8.. => u64::from_be_bytes([
            rest[0], rest[1], rest[2], rest[3], rest[4], rest[5], rest[6], rest[7],
        ]),
        4..=7 => (be32(0) << 32) | (be32(n - 4) << (8 * (8 - n))),
        2..=3 => (be16(0) << 48) | (be16(n - 2) << (8 * (8 - n))),
        1 => u64::from(rest[0]) << 56,
        0 => 0,
    }
}

/// The keys of the token `namespace` + a word with keys `word`, for a
/// namespace of at most 8 bytes: the word's keys shifted right past the
/// namespace's, so the token is never put together to be looked up.
/// `namespace_key` is the namespace's own key (`key_at(namespace, 0)`),
/// which a caller pushing many words under one namespace reads once.
fn keys_of(namespace: &[u8], namespace_key: u64, word: [u64; 2]) -> [u64; 2] {
    debug_assert_eq!(namespace_key, key_at(namespace, 0));
    if namespace.is_empty() {
        return word;
    }
    // A shift by 8 to 64 bits, done as two so that neither reaches 64.
    let shift = 8 * namespace.len() as u32 - 1;
    [
        namespace_key | (word[0] >> 1 >> shift),
        (word[0] << (63 - shift)) | (word[1] >> 1 >> shift),
    ]
}

/// Folded multiply: the high and low halves of the 128-bit product, mixed.
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Hash of a token from its keys, its length and its bytes past the first
/// 16 (`tail`): one multiplication for most tokens.
#[inline(always)]
fn hash_token(keys: [u64; 2], len: usize, tail: &[u8]) -> u64 {
    const SEEDS: [u64; 3] = [
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
    ];
    let mut hash = fold_mul(keys[0] ^ SEEDS[0], keys[1] ^ SEEDS[1] ^ len as u64);
    let mut at = 0;
    while at < tail.len() {
        hash = fold_mul(hash ^ key_at(tail, at), SEEDS[2]);
        at += 8;
    }
    hash
}

impl Span {
    fn text<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        &arena[self.start as usize..self.end as usize]
    }

    fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    fn first_byte(&self) -> usize {
        (self.keys[0] >> 56) as usize
    }

    /// The token's bytes past its first 16.
    fn tail<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        self.text(arena).get(16..).unwrap_or_default()
    }

    fn hash(&self, arena: &[u8]) -> u64 {
        hash_token(self.keys, self.len(), self.tail(arena))
    }
}

impl TokenSet {
    /// Adds `namespace` + `word`, unless the result is longer than
    /// [`MAX_TOKEN_LEN`] or `word` is empty.
    pub fn push(&mut self, namespace: &str, word: &str) {
        let bytes = word.as_bytes();
        let namespace_key = key_at(namespace.as_bytes(), 0);
        self.push_keyed(
            namespace,
            namespace_key,
            word,
            [key_at(bytes, 0), key_at(bytes, 8)],
        );
    }

    /// [`TokenSet::push`] given the keys of `word` (its first 16 bytes as
    /// [`key_at`] reads them), for a caller that has them already.
    #[inline(always)]
    fn push_keyed(&mut self, namespace: &str, namespace_key: u64, word: &str, word_keys: [u64; 2]) {
        debug_assert_eq!(
            word_keys,
            [key_at(word.as_bytes(), 0), key_at(word.as_bytes(), 8)]
        );
        let len = namespace.len() + word.len();
        if word.is_empty() || len > MAX_TOKEN_LEN {
            return;
        }
        if namespace.len() > MAX_NAMESPACE_LEN {
            return self.push_joined(namespace, word);
        }
        // The token is looked up by its keys and its tail (the bytes past
        // its first 16, all in `word`) and copied into the arena only if
        // it is new.
        let (namespace, word) = (namespace.as_bytes(), word.as_bytes());
        let keys = keys_of(namespace, namespace_key, word_keys);
        let tail = word.get(16 - namespace.len()..).unwrap_or_default();
        if 2 * (self.spans.len() + 1) > self.slots.len() {
            self.grow();
        }
        // Linear probing from the hash: the table is at most half full.
        let mask = self.slots.len() - 1;
        let hash = hash_token(keys, len, tail);
        let tag = tag_of(hash);
        let mut at = hash as usize & mask;
        loop {
            let slot = self.slots[at];
            if slot.tag == 0 {
                break;
            }
            if slot.tag == tag {
                let span = &self.spans[slot.index as usize];
                if span.keys == keys
                    && span.len() == len
                    && (len <= 16 || span.tail(&self.arena) == tail)
                {
                    return;
                }
            }
            at = (at + 1) & mask;
        }
        if self.limit.is_some_and(|limit| self.spans.len() >= limit) {
            return;
        }
        self.slots[at] = Slot {
            tag,
            index: self.spans.len() as u32,
        };
        self.used.push(at as u32);
        // The keys are the token's first 16 bytes, padded with zeros: two
        // fixed-size writes rather than a copy of each part.
        let start = self.arena.len();
        self.arena.extend_from_slice(&keys[0].to_be_bytes());
        self.arena.extend_from_slice(&keys[1].to_be_bytes());
        self.arena.truncate(start + len.min(16));
        self.arena.extend_from_slice(tail);
        self.spans.push(Span {
            keys,
            start: start as u32,
            end: self.arena.len() as u32,
        });
    }

    /// Doubles the table (to 512 slots at first) and puts every token
    /// back in.
    #[cold]
    fn grow(&mut self) {
        let size = (2 * self.slots.len()).max(512);
        self.slots = vec![Slot::default(); size];
        self.used.clear();
        let mask = size - 1;
        for (index, span) in self.spans.iter().enumerate() {
            let hash = span.hash(&self.arena);
            let mut at = hash as usize & mask;
            while self.slots[at].tag != 0 {
                at = (at + 1) & mask;
            }
            self.slots[at] = Slot {
                tag: tag_of(hash),
                index: index as u32,
            };
            self.used.push(at as u32);
        }
    }

    /// [`TokenSet::push`] for a namespace too long to shift into the keys.
    #[cold]
    #[inline(never)]
    fn push_joined(&mut self, namespace: &str, word: &str) {
        self.push("", &format!("{namespace}{word}"));
    }

    /// Number of distinct tokens so far.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Keeps at most `limit` distinct tokens (`None`: no limit) from now
    /// until [`TokenSet::finish`]: a new token pushed when there are
    /// `limit` already is left out, so the first ones stay.
    pub fn set_limit(&mut self, limit: Option<usize>) {
        self.limit = limit;
    }

    /// True if nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Number of distinct URL host tokens so far (those [`push_host`]
    /// pushed): the tokens under [`URL_NAMESPACE`], counted as they
    /// arrive rather than looked up after sorting.
    pub fn url_hosts(&self) -> usize {
        self.hosts
    }

    /// The sorted, de-duplicated tokens; leaves the set empty for reuse.
    pub fn finish(&mut self) -> TokenList {
        sort_spans(&mut self.spans, &mut self.scratch, &self.arena);
        // The arena holds each distinct token once: the list takes a copy
        // of it whole (one exact-size allocation and one copy, rather than
        // one per token), and the arena keeps its room for the next message.
        // Every token is a namespace and a word, both `str`, so the arena
        // is UTF-8; were it not, the list would come out empty, not wrong.
        let out = match String::from_utf8(self.arena.clone()) {
            Ok(text) => TokenList {
                text,
                spans: self.spans.iter().map(|s| (s.start, s.end)).collect(),
            },
            Err(_) => TokenList::default(),
        };
        self.arena.clear();
        self.spans.clear();
        self.hosts = 0;
        self.limit = None;
        // Empty the slots in use; after a huge message, start the next one
        // with a small table instead.
        if self.slots.len() > SLOTS_KEPT {
            self.slots = Vec::new();
            self.used = Vec::new();
            self.arena = Vec::new();
            self.spans = Vec::new();
            self.scratch = Vec::new();
        } else {
            for &at in &self.used {
                self.slots[at as usize] = Slot::default();
            }
            self.used.clear();
        }
        out
    }
}

/// A sorted, de-duplicated list of tokens (a message's binary bag of
/// words): their text in one string, in any order, and where each lies in
/// it, in token order. Serialises as a list of strings.
#[derive(Clone, Default)]
pub struct TokenList {
    text: String,
    spans: Vec<(u32, u32)>,
}

impl PartialEq for TokenList {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for TokenList {}

impl std::hash::Hash for TokenList {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.len().hash(state);
        for token in self {
            token.hash(state);
        }
    }
}

impl std::fmt::Debug for TokenList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl TokenList {
    /// Builds a list from any tokens: sorted and de-duplicated here.
    pub fn from_tokens<S: AsRef<str>>(tokens: impl IntoIterator<Item = S>) -> TokenList {
        let mut all: Vec<S> = tokens.into_iter().collect();
        all.sort_unstable_by(|a, b| a.as_ref().cmp(b.as_ref()));
        all.dedup_by(|a, b| a.as_ref() == b.as_ref());
        let mut out = TokenList::default();
        for t in &all {
            let start = out.text.len() as u32;
            out.text.push_str(t.as_ref());
            out.spans.push((start, out.text.len() as u32));
        }
        out
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The `i`-th token in sorted order.
    pub fn get(&self, i: usize) -> Option<&str> {
        let &(start, end) = self.spans.get(i)?;
        self.text.get(start as usize..end as usize)
    }

    /// The tokens in sorted order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.spans.len()).map(|i| self.get(i).unwrap_or(""))
    }

    /// Whether `token` is in the list (binary search).
    pub fn contains(&self, token: &str) -> bool {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.get(mid).unwrap_or("").cmp(token) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    /// Number of tokens starting with `prefix`: they are adjacent in
    /// token order, so two binary searches find them.
    ///
    /// ```
    /// let list = bayesmail::tokenize::TokenList::from_tokens(["URL:a", "T", "URL:b", "Z"]);
    /// assert_eq!(list.count_prefixed("URL:"), 2);
    /// ```
    pub fn count_prefixed(&self, prefix: &str) -> usize {
        let first = self.partition_point(|t| t < prefix);
        let end = self.partition_point(|t| t < prefix || t.starts_with(prefix));
        end - first
    }

    /// The first index whose token fails `before` (which must hold for a
    /// leading run of tokens and for none after it).
    fn partition_point(&self, before: impl Fn(&str) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if before(self.get(mid).unwrap_or("")) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The tokens as owned strings.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

impl<S: AsRef<str>> FromIterator<S> for TokenList {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        TokenList::from_tokens(iter)
    }
}

impl serde::Serialize for TokenList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'a> IntoIterator for &'a TokenList {
    type Item = &'a str;
    type IntoIter = Box<dyn Iterator<Item = &'a str> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// The tokenizer pipeline. Cheap to create; not shareable across threads
/// (tantivy's token streams borrow it mutably), so each worker owns one.
#[derive(Clone)]
pub struct Analyzer {
    pipeline: Pipeline,
}

/// The pipeline with its type spelled out: what `TextAnalyzer::builder`
/// composes, before `build` boxes it. Kept unboxed, each text costs no
/// boxed stream and each token no dynamic call, and the filters inline
/// into the loop of [`Analyzer::tokenize`].
type Pipeline = MapFilterWrapper<
    MapFilterWrapper<MapFilterWrapper<MailWordTokenizer, UrlToHost>, NumberShape>,
    LengthLimit,
>;

impl Default for Analyzer {
    fn default() -> Self {
        Self::new()
    }
}

impl Analyzer {
    /// Builds the pipeline: lower-cased words → URL hosts → number shapes →
    /// length limit.
    pub fn new() -> Self {
        let words = MailWordTokenizer::default();
        let hosts = MapFilter(UrlToHost).transform(words);
        let shapes = MapFilter(NumberShape).transform(hosts);
        Analyzer {
            pipeline: MapFilter(LengthLimit).transform(shapes),
        }
    }

    /// Tokenizes `text`, pushing each word into `sink` under `namespace`.
    /// URL hosts go in under [`URL_NAMESPACE`] whatever the namespace, each
    /// with its parent domain. Returns the number of URLs seen.
    ///
    /// ```
    /// use bayesmail::tokenize::{Analyzer, TokenSet};
    /// let mut set = TokenSet::default();
    /// Analyzer::new().tokenize("Win $1,000 at HTTP://WWW.Lucky.Example.com/x now", "", &mut set);
    /// assert_eq!(
    ///     set.finish().to_vec(),
    ///     ["#,###", "URL:example.com", "URL:lucky.example.com", "at", "now", "win"]
    /// );
    /// ```
    pub fn tokenize(&mut self, text: &str, namespace: &str, sink: &mut TokenSet) -> usize {
        let mut urls = 0;
        let namespace_key = key_at(namespace.as_bytes(), 0);
        let mut stream = self.pipeline.token_stream(text);
        while stream.advance() {
            let token = stream.token();
            // Words are lower-cased, so a first byte other than `U` tells
            // most tokens from the URL filter's at one look.
            if token.text.starts_with('U')
                && let Some(host) = token.text.strip_prefix(URL_NAMESPACE)
            {
                urls += 1;
                push_host(sink, host);
            } else {
                match stream.word_keys() {
                    Some(keys) => sink.push_keyed(namespace, namespace_key, &token.text, keys),
                    None => sink.push(namespace, &token.text),
                }
            }
        }
        urls
    }
}

/// Pushes `URL:host` and `URL:parent` (the registrable part as far as a
/// rule of thumb can tell: the last two labels, three under a two-letter
/// country code with a short second level such as `co.uk`). IP-address hosts
/// also give the token `URL:ip-address`. A host too long for a token gives
/// its parent only, and `URL:long-host` if that is too long as well.
pub fn push_host(sink: &mut TokenSet, host: &str) {
    let before = sink.len();
    let fits = |name: &str| URL_NAMESPACE.len() + name.len() <= MAX_TOKEN_LEN;
    sink.push(URL_NAMESPACE, host);
    if is_ip_like(host) {
        sink.push(URL_NAMESPACE, "ip-address");
    } else if let Some(parent) = parent_domain(host)
        && parent != host
        && fits(parent)
    {
        sink.push(URL_NAMESPACE, parent);
    } else if !fits(host) {
        sink.push(URL_NAMESPACE, "long-host");
    }
    sink.hosts += sink.len() - before;
}

/// The registrable-looking suffix of a host name.
pub fn parent_domain(host: &str) -> Option<&str> {
    // The last three dots, right to left: the last label ends the host,
    // the second last lies between the first two dots found.
    // A byte loop: host names are short, too short for a searcher to pay.
    let mut dots = (0..host.len())
        .rev()
        .filter(|&i| host.as_bytes()[i] == b'.');
    let last = dots.next()?;
    let second = dots.next();
    let third = dots.next();
    let country_code = second.is_some_and(|d| host.len() - last - 1 == 2 && last - d - 1 <= 3);
    let cut = if country_code { third } else { second };
    Some(cut.map_or(host, |d| &host[d + 1..]))
}

fn is_ip_like(host: &str) -> bool {
    host.bytes()
        .all(|b| b.is_ascii_hexdigit() || b == b'.' || b == b'x' || b == b':')
        && host.bytes().any(|b| b.is_ascii_digit())
        && (host.contains('.') || host.contains(':') || host.bytes().all(|b| b.is_ascii_digit()))
}

/// The host of a URL, normalised: lower-case, without user info, port,
/// trailing dot or a leading `www.`. `None` if there is no host.
///
/// ```
/// use bayesmail::tokenize::url_host;
/// assert_eq!(url_host("https://bob:pw@WWW.Example.COM:8080/a?b").as_deref(), Some("example.com"));
/// assert_eq!(url_host("www.example.org").as_deref(), Some("example.org"));
/// assert_eq!(url_host("mailto:x@example.com"), None);
/// ```
pub fn url_host(url: &str) -> Option<String> {
    let mut host = String::new();
    write_url_host(url, &mut host).then_some(host)
}

/// [`url_host`] into `out` (cleared first), so that a caller with many
/// links reuses one buffer; false if there is no host.
pub fn write_url_host(url: &str, out: &mut String) -> bool {
    out.clear();
    let Some(range) = host_range(url) else {
        return false;
    };
    let host = &url[range];
    // Only `W` lower-cases to `w`: stripping `www.` in any case before
    // lower-casing is stripping it after.
    let host = match host.get(..4) {
        Some(www) if www.eq_ignore_ascii_case("www.") => &host[4..],
        _ => host,
    };
    if host.is_ascii() {
        let valid = !host.is_empty()
            && host.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'%')
            });
        if valid {
            out.push_str(host);
            out.make_ascii_lowercase();
        }
        return valid;
    }
    // `str::to_lowercase`, final sigma and all: rare enough to allocate.
    out.push_str(&host.to_lowercase());
    let valid = out
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%'));
    if !valid {
        out.clear();
    }
    valid
}

/// Where the first `://` of `text` is: a byte search for `:` rather than
/// `str::find`'s substring searcher, whose set-up costs more than a link
/// takes to scan.
fn find_scheme_end(text: &str) -> Option<usize> {
    memchr::memchr_iter(b':', text.as_bytes()).find(|&at| text[at..].starts_with("://"))
}

/// Where the host of a URL lies in it, before normalisation other than
/// dropping trailing dots.
fn host_range(url: &str) -> Option<std::ops::Range<usize>> {
    let start = match find_scheme_end(url) {
        Some(p) => p + 3,
        None if url.len() > 4 && url.as_bytes()[..4].eq_ignore_ascii_case(b"www.") => 0,
        None => return None,
    };
    // Byte searches: every delimiter is ASCII, so each cut is at a
    // character boundary, and a link is too short for a searcher to pay.
    let upto = |text: &str, stop: fn(u8) -> bool| -> usize {
        text.bytes().position(stop).unwrap_or(text.len())
    };
    let rest = &url[start..];
    let authority = &rest[..upto(rest, |b| matches!(b, b'/' | b'?' | b'#' | b'\\'))];
    // After the last `@` (user info), up to the port or, for `[v6]`, the `]`.
    let host_port = authority
        .bytes()
        .rposition(|b| b == b'@')
        .map_or(0, |p| p + 1);
    let (from, host) = match authority[host_port..].strip_prefix('[') {
        Some(v6) => (host_port + 1, &v6[..upto(v6, |b| b == b']')]),
        None => {
            let host = &authority[host_port..];
            (host_port, &host[..upto(host, |b| b == b':')])
        }
    };
    let host = host.trim_end_matches('.');
    Some(start + from..start + from + host.len())
}

/// Filter: a URL token (`scheme://…` or `www.…`) becomes `URL:host`. For
/// the tokens that pass [`UrlToHost`]'s first look.
#[inline(never)]
fn url_to_host(token: &mut Token) -> bool {
    let text = &token.text;
    let is_url =
        find_scheme_end(text).is_some() || (text.starts_with("www.") && text[4..].contains('.'));
    if !is_url {
        return true;
    }
    let Some(range) = host_range(text) else {
        return false;
    };
    let host = &text[range.clone()];
    if !host.is_ascii() {
        return match url_host(text) {
            Some(host) => {
                token.text.clear();
                token.text.push_str(URL_NAMESPACE);
                token.text.push_str(&host);
                true
            }
            None => false,
        };
    }
    // ASCII: what url_host does, in place.
    let skip = if host.len() >= 4 && host.as_bytes()[..4].eq_ignore_ascii_case(b"www.") {
        4
    } else {
        0
    };
    let host = &host[skip..];
    let valid = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'%'));
    if !valid {
        return false;
    }
    token.text.truncate(range.end);
    token
        .text
        .replace_range(..range.start + skip, URL_NAMESPACE);
    token.text[URL_NAMESPACE.len()..].make_ascii_lowercase();
    true
}

/// Filter: a token made of digits and number punctuation becomes its shape,
/// every digit replaced by `#` (`$1,000.50` → `#,###.##`): prices and dates
/// tell more by their form than by their value. Returns whether it did.
#[inline(never)]
fn number_shape(token: &mut Token) -> bool {
    // One pass: a letter (or anything else) ends the look at once.
    let mut digits = false;
    for &b in token.text.as_bytes() {
        match b {
            b'0'..=b'9' => digits = true,
            b'.' | b',' | b':' | b';' | b'\'' | b'_' => {}
            _ => return false,
        }
    }
    if digits {
        // SAFETY: ASCII digits become an ASCII byte, so the text stays
        // UTF-8 (and is not checked again: it is a hot path).
        let bytes = unsafe { token.text.as_bytes_mut() };
        for b in bytes.iter_mut().filter(|b| b.is_ascii_digit()) {
            *b = b'#';
        }
    }
    digits
}

/// What a [`Rewrite`] did to a token.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rewritten {
    /// Left it as it was.
    Kept,
    /// Changed its text.
    Changed,
    /// Dropped it.
    Dropped,
}

impl Rewritten {
    /// A filter's answer for a token it may have changed: kept if `keep`.
    fn changed_unless_dropped(keep: bool) -> Rewritten {
        if keep {
            Rewritten::Changed
        } else {
            Rewritten::Dropped
        }
    }
}

/// A rewrite of one token, in place.
trait Rewrite: Clone + Send + Sync + 'static {
    fn rewrite(&self, token: &mut Token) -> Rewritten;
}

/// [`url_to_host`] as a [`Rewrite`].
#[derive(Clone, Copy)]
struct UrlToHost;

impl Rewrite for UrlToHost {
    #[inline(always)]
    fn rewrite(&self, token: &mut Token) -> Rewritten {
        // The tokenizer keeps `scheme://` only for http, https and ftp,
        // lower-cased, so URL tokens start with one of those or `www.`: a
        // look at four bytes, false for almost every token (so the branch
        // is predicted), sends the rest on unchanged.
        let text = token.text.as_bytes();
        if text.len() < 8 || !matches!(&text[..4], b"http" | b"ftp:" | b"www.") {
            return Rewritten::Kept;
        }
        // Counted as changed even when it is not a URL: rare, and safe.
        Rewritten::changed_unless_dropped(url_to_host(token))
    }
}

/// [`number_shape`] as a [`Rewrite`].
#[derive(Clone, Copy)]
struct NumberShape;

impl Rewrite for NumberShape {
    #[inline(always)]
    fn rewrite(&self, token: &mut Token) -> Rewritten {
        // Only a token starting with a digit or `_` can be a number.
        if token
            .text
            .as_bytes()
            .first()
            .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
            && number_shape(token)
        {
            return Rewritten::Changed;
        }
        Rewritten::Kept
    }
}

/// The length limit of the pipeline, as tantivy's `RemoveLongFilter` has
/// it (tokens of fewer bytes than the limit are kept): words that leave
/// room for the longest namespace within [`MAX_TOKEN_LEN`].
#[derive(Clone, Copy)]
struct LengthLimit;

impl Rewrite for LengthLimit {
    #[inline(always)]
    fn rewrite(&self, token: &mut Token) -> Rewritten {
        // A URL host too long to be a token still gives its parent domain
        // ([`push_host`] applies the limit to each).
        if token.text.len() <= MAX_TOKEN_LEN - MAX_NAMESPACE_LEN
            || token.text.starts_with(URL_NAMESPACE)
        {
            Rewritten::Kept
        } else {
            Rewritten::Dropped
        }
    }
}

/// A token filter from a [`Rewrite`]. Generic over it (each rewrite its
/// own type, not a `fn` pointer) so each filter inlines into the stream's
/// loop, and the pipeline's type can be named.
#[derive(Clone, Copy)]
struct MapFilter<F>(F);

impl<F: Rewrite> TokenFilter for MapFilter<F> {
    type Tokenizer<T: Tokenizer> = MapFilterWrapper<T, F>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> MapFilterWrapper<T, F> {
        MapFilterWrapper {
            f: self.0,
            inner: tokenizer,
        }
    }
}

#[derive(Clone)]
struct MapFilterWrapper<T, F> {
    f: F,
    inner: T,
}

impl<T: Tokenizer, F: Rewrite> Tokenizer for MapFilterWrapper<T, F> {
    type TokenStream<'a> = MapFilterStream<T::TokenStream<'a>, F>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        MapFilterStream {
            f: self.f.clone(),
            tail: self.inner.token_stream(text),
            changed: false,
        }
    }
}

struct MapFilterStream<S, F> {
    f: F,
    tail: S,
    /// Whether the rewrite changed the current token.
    changed: bool,
}

impl<S: TokenStream, F: Rewrite> TokenStream for MapFilterStream<S, F> {
    fn advance(&mut self) -> bool {
        while self.tail.advance() {
            match self.f.rewrite(self.tail.token_mut()) {
                Rewritten::Kept => self.changed = false,
                Rewritten::Changed => self.changed = true,
                Rewritten::Dropped => continue,
            }
            return true;
        }
        false
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

/// A token stream of the pipeline, which passes on the keys the word
/// stream read off a word ([`MailWordStream::word_keys`]) for as long as
/// no filter has changed the word, so a token set need not read them
/// again. Only the pipeline's own filters sit between the two, and each
/// says when it changed a token.
trait KeyedStream: TokenStream {
    /// The keys of the current token's text, if known.
    fn word_keys(&self) -> Option<[u64; 2]>;
}

impl KeyedStream for words::MailWordStream<'_> {
    #[inline(always)]
    fn word_keys(&self) -> Option<[u64; 2]> {
        words::MailWordStream::word_keys(self)
    }
}

impl<S: KeyedStream, F: Rewrite> KeyedStream for MapFilterStream<S, F> {
    #[inline(always)]
    fn word_keys(&self) -> Option<[u64; 2]> {
        if self.changed {
            None
        } else {
            self.tail.word_keys()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_hosts_are_counted_as_they_arrive() {
        let mut set = TokenSet::default();
        let text = "see http://a.example.com/x, http://A.example.com/y and http://10.0.0.1/ \
            or www.b.example.com";
        assert_eq!(Analyzer::new().tokenize(text, "", &mut set), 4);
        push_host(&mut set, "c.example.org");
        push_host(&mut set, "c.example.org");
        set.push("", "url");
        // a.example.com, example.com, 10.0.0.1, ip-address, b.example.com,
        // c.example.org, example.org.
        assert_eq!(set.url_hosts(), 7);
        let list = set.finish();
        assert_eq!(list.count_prefixed(URL_NAMESPACE), 7);
        assert_eq!(set.url_hosts(), 0);
    }

    /// The pipeline as a tantivy `TextAnalyzer`, built the usual way.
    fn text_analyzer() -> tantivy::tokenizer::TextAnalyzer {
        tantivy::tokenizer::TextAnalyzer::builder(MailWordTokenizer::default())
            .filter(MapFilter(UrlToHost))
            .filter(MapFilter(NumberShape))
            .filter(MapFilter(LengthLimit))
            .build()
    }

    fn tokens(text: &str) -> Vec<String> {
        let mut set = TokenSet::default();
        Analyzer::new().tokenize(text, "", &mut set);
        set.finish().to_vec()
    }

    #[test]
    fn words_are_lowercased_and_deduplicated() {
        assert_eq!(tokens("Hello hello HELLO wörld Wörld"), ["hello", "wörld"]);
    }

    #[test]
    fn invisible_characters_do_not_split_or_hide_words() {
        assert_eq!(
            tokens("vi\u{200b}agra c\u{ad}ialis \u{202e}free\u{202c}"),
            ["cialis", "free", "viagra"]
        );
    }

    #[test]
    fn urls_become_hosts_with_parents() {
        assert_eq!(
            tokens(
                "see https://a.b.example.co.uk:8080/p?q=1, http://192.168.0.1/x and www.shop.example"
            ),
            [
                "URL:192.168.0.1",
                "URL:a.b.example.co.uk",
                "URL:example.co.uk",
                "URL:ip-address",
                "URL:shop.example",
                "and",
                "see"
            ]
        );
    }

    #[test]
    fn numbers_become_shapes() {
        assert_eq!(
            tokens("call 555-1234 or 1,000.50 on 12:30 4u"),
            ["##", "###", "####", "#,###.##", "4u", "call", "on", "or"]
        );
    }

    #[test]
    fn long_tokens_are_dropped() {
        let long = "a".repeat(MAX_TOKEN_LEN);
        assert_eq!(tokens(&format!("short {long}")), ["short"]);
    }

    #[test]
    fn namespaces_prefix_words_but_not_urls() {
        let mut set = TokenSet::default();
        let urls = Analyzer::new().tokenize("Free http://x.example/", "SUBJ:", &mut set);
        assert_eq!(urls, 1);
        assert_eq!(set.finish().to_vec(), ["SUBJ:free", "URL:x.example"]);
    }

    proptest::proptest! {
        /// The set keeps each token once and finishes in byte order, however
        /// a token is split into namespace and word (namespaces of up to 8
        /// bytes are shifted into the keys, longer ones joined first), and
        /// whatever its bytes (NULs and multi-byte characters included).
        #[test]
        fn token_sets_are_sorted_and_deduplicated(
            pushes in proptest::collection::vec(
                ("(|A:|AB:|A|ABCDEFG:|ABCDEFGHIJ:)", "[ab\\x00é]{0,24}"),
                0..64,
            )
        ) {
            let mut set = TokenSet::default();
            let mut expected = std::collections::BTreeSet::new();
            for _ in 0..2 {
                for (namespace, word) in &pushes {
                    set.push(namespace, word);
                    if !word.is_empty() && namespace.len() + word.len() <= MAX_TOKEN_LEN {
                        expected.insert(format!("{namespace}{word}"));
                    }
                }
                proptest::prop_assert_eq!(set.len(), expected.len());
                let list = set.finish();
                proptest::prop_assert_eq!(list.to_vec(), expected.iter().cloned().collect::<Vec<_>>());
                expected.clear();
            }
        }
    }

    /// Past the first table size the set grows and keeps every token; after
    /// a message that large it starts the next one small, and still right.
    #[test]
    fn token_sets_grow_and_start_small_again() {
        let mut set = TokenSet::default();
        let words: Vec<String> = (0..5000).map(|i| format!("w{i}")).collect();
        for word in words.iter().chain(&words) {
            set.push("RCVD:", word);
        }
        assert_eq!(set.len(), words.len());
        assert!(set.slots.len() > SLOTS_KEPT);
        let list = set.finish();
        let mut expected: Vec<String> = words.iter().map(|w| format!("RCVD:{w}")).collect();
        expected.sort();
        assert_eq!(list.to_vec(), expected);
        assert!(set.slots.is_empty() && set.is_empty());
        for word in ["b", "a", "b"] {
            set.push("", word);
        }
        assert_eq!(set.finish().to_vec(), ["a", "b"]);
    }

    #[test]
    fn token_lists_search_and_serialise() {
        let list = TokenList::from_tokens(["b", "a", "c", "a"]);
        assert_eq!(list.to_vec(), ["a", "b", "c"]);
        assert!(list.contains("b") && !list.contains("d") && !list.contains(""));
        assert_eq!(serde_json::to_string(&list).unwrap(), r#"["a","b","c"]"#);
        assert!(TokenList::default().is_empty());
        // Equal token lists are equal and hash alike however their text is
        // laid out (a set keeps its tokens in arrival order).
        let mut set = TokenSet::default();
        for t in ["c", "a", "b", "a"] {
            set.push("", t);
        }
        let from_set = set.finish();
        assert_eq!(from_set, list);
        let hasher = std::collections::hash_map::RandomState::new();
        use std::hash::BuildHasher;
        assert_eq!(hasher.hash_one(&from_set), hasher.hash_one(&list));
        assert_ne!(TokenList::from_tokens(["a", "b"]), list);
    }

    #[test]
    fn url_hosts_of_non_ascii_targets_do_not_panic() {
        assert_eq!(url_host("abcé"), None);
        assert_eq!(url_host("wwwé.x"), None);
        assert_eq!(url_host("www.exämple.org").as_deref(), Some("exämple.org"));
    }

    /// The rule as first written, to check the allocation-free one against.
    fn parent_domain_reference(host: &str) -> Option<&str> {
        let labels: Vec<&str> = host.rsplitn(4, '.').collect();
        if labels.len() < 2 {
            return None;
        }
        let keep = if labels.len() >= 3 && labels[0].len() == 2 && labels[1].len() <= 3 {
            3
        } else {
            2
        };
        let suffix_len: usize = labels[..keep].iter().map(|l| l.len()).sum::<usize>() + keep - 1;
        Some(&host[host.len() - suffix_len..])
    }

    proptest::proptest! {
        /// Counting by binary search counts what a scan counts.
        #[test]
        fn prefixed_tokens_are_counted(
            tokens in proptest::collection::vec("(|U|UR|URL|URL:|URM|T)[:a-z]{0,3}", 0..24),
            prefix in "(|U|URL:|URL:a|T:|x)",
        ) {
            let list = TokenList::from_tokens(&tokens);
            let scanned = list.iter().filter(|t| t.starts_with(&prefix)).count();
            proptest::prop_assert_eq!(list.count_prefixed(&prefix), scanned);
        }

        #[test]
        fn parent_domain_matches_the_reference(host in "[a-zé]{0,4}(\\.[a-zé]{0,4}){0,5}") {
            proptest::prop_assert_eq!(parent_domain(&host), parent_domain_reference(&host));
        }

        /// The boxed `TextAnalyzer` and the unboxed pipeline are one
        /// pipeline: they give the same tokens.
        #[test]
        fn text_analyzer_is_the_pipeline(
            text in "([a-zA-Z0-9_.,;:'/ é東-]|https?://|www\\.|\\$1,000|\n){0,60}"
        ) {
            let mut analyzer = Analyzer::new();
            let mut stream = analyzer.pipeline.token_stream(&text);
            let mut unboxed = Vec::new();
            while let Some(token) = stream.next() {
                unboxed.push(token.text.clone());
            }
            let mut boxed = Vec::new();
            let mut text_analyzer = text_analyzer();
            let mut stream = text_analyzer.token_stream(&text);
            while let Some(token) = stream.next() {
                boxed.push(token.text.clone());
            }
            proptest::prop_assert_eq!(unboxed, boxed);
        }

        /// The keys the word stream reads off a word, and passes through
        /// the filters that left it alone, are the keys of the token's
        /// text; an ASCII word that no filter changes has them.
        #[test]
        fn streamed_keys_are_the_tokens_keys(
            text in "([a-zA-Z0-9_.,;:'/ é東-]|https?://|www\\.|\\$1,000|[a-z]{9,20}|\n){0,60}"
        ) {
            let mut analyzer = Analyzer::new();
            let mut stream = analyzer.pipeline.token_stream(&text);
            while stream.advance() {
                let word = stream.token().text.as_bytes();
                match stream.word_keys() {
                    Some(keys) => {
                        proptest::prop_assert_eq!(keys, [key_at(word, 0), key_at(word, 8)]);
                    }
                    // Only the URL filter looks at (and may count as
                    // changed) a word of lower-case letters.
                    None => proptest::prop_assert!(
                        !text.is_ascii()
                            || !word.iter().all(u8::is_ascii_lowercase)
                            || word.starts_with(b"http")
                            || word.starts_with(b"www"),
                        "{:?} had no keys",
                        stream.token().text
                    ),
                }
            }
        }

        /// The in-place URL filter gives what `url_host` gives.
        #[test]
        fn url_filter_matches_url_host(
            url in "(http://|https://|ftp://|www\\.|WWW\\.|wwW\\.)[a-zA-Z0-9.@:/?#_%é\\[\\]\\\\-]{0,24}"
        ) {
            let mut token = Token { text: url.clone(), ..Token::default() };
            let kept = UrlToHost.rewrite(&mut token) != Rewritten::Dropped;
            let is_url = url.contains("://") || (url.starts_with("www.") && url[4..].contains('.'));
            // The filter runs after lower-casing: it looks only at lower-case
            // schemes and `www.`.
            let lower_start = ["http", "ftp:", "www."].iter().any(|p| url.starts_with(p));
            let expected = if url.len() < 8 || !is_url || !lower_start {
                Some(url.clone())
            } else {
                url_host(&url).map(|h| format!("{URL_NAMESPACE}{h}"))
            };
            proptest::prop_assert_eq!(kept.then_some(token.text), expected);
        }
    }

    #[test]
    fn parent_domains() {
        assert_eq!(parent_domain("a.b.example.com"), Some("example.com"));
        assert_eq!(parent_domain("mail.example.co.uk"), Some("example.co.uk"));
        assert_eq!(parent_domain("example.com"), Some("example.com"));
        assert_eq!(parent_domain("localhost"), None);
    }
}
