//! The token set of one message: distinct tokens kept in an arena as they
//! arrive (a hash table over it, so a repeated word costs no allocation),
//! then sorted into a [`TokenList`], the binary bag of words.

use super::{MAX_NAMESPACE_LEN, MAX_TOKEN_LEN};

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
    /// Distinct tokens pushed by [`super::push_host`].
    pub(super) hosts: usize,
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
pub(super) fn key_at(bytes: &[u8], at: usize) -> u64 {
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
    pub(super) fn push_keyed(
        &mut self,
        namespace: &str,
        namespace_key: u64,
        word: &str,
        word_keys: [u64; 2],
    ) {
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
    pub(crate) fn set_limit(&mut self, limit: Option<usize>) {
        self.limit = limit;
    }

    /// True if nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Number of distinct URL host tokens so far (those [`super::push_host`]
    /// pushed): the tokens under [`super::URL_NAMESPACE`], counted as they
    /// arrive rather than looked up after sorting.
    pub(crate) fn url_hosts(&self) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
