//! Token counts packed into shards: the layout of the count store's
//! `shards` tree ([`super::sled`]).
//!
//! A token belongs to shard [`shard_of`] (the top [`SHARD_BITS`] bits of
//! [`token_hash`]), and a shard's tokens are one value, sorted by bytes and
//! front-coded: each entry is the length of the prefix it shares with the
//! entry before (LEB128), the length of the rest (LEB128), the rest, then
//! the ham and spam counts (LEB128 each). Tokens carry a namespace prefix
//! (`subject:`, `URL:`, a byte-view marker), so neighbours share a good
//! part; most counts are small, so they take a byte or two.
//!
//! One value per shard instead of one key per token is what keeps the store
//! small and its writes few: sled spends tens of bytes on every key, and a
//! training run writes each shard it touches once, where one key per token
//! made it insert every token through a transaction.

use super::snapshot::token_hash;
use crate::model::TokenCounts;
use crate::vocab::Digest;

/// Bits of the shard number: 1,024 shards, a few kilobytes each for a
/// vocabulary of hundreds of thousands of tokens. Only writers that open
/// the count store rewrite shards (`learn` appends to the journal), and
/// sled spends less space on fewer, larger values.
pub const SHARD_BITS: u32 = 10;

/// Number of shards.
pub(crate) const SHARDS: usize = 1 << SHARD_BITS;

/// The shard a token lives in.
pub fn shard_of(token: &str) -> u16 {
    (token_hash(token.as_bytes()) >> (64 - SHARD_BITS)) as u16
}

/// The sled key of a shard (big-endian, so shards sort by number).
pub(crate) fn shard_key(shard: u16) -> [u8; 2] {
    shard.to_be_bytes()
}

/// Appends `v` as LEB128.
fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 value of at most 64 bits.
fn get(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A shard's entry: the token, its counts, and the day they last changed.
pub type Word = (String, TokenCounts, u32);

/// Encodes a shard's entries, which must be sorted by token bytes, distinct,
/// and none of them zero.
pub fn encode(entries: &[Word]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 14);
    let mut prev: &[u8] = &[];
    for (token, c, day) in entries {
        let t = token.as_bytes();
        let shared = prev.iter().zip(t).take_while(|(a, b)| a == b).count();
        put(&mut out, shared as u64);
        put(&mut out, (t.len() - shared) as u64);
        out.extend_from_slice(&t[shared..]);
        put(&mut out, u64::from(c.ham));
        put(&mut out, u64::from(c.spam));
        put(&mut out, u64::from(*day));
        prev = t;
    }
    out
}

/// Reads a shard's entries in order, rebuilding each token from the
/// shared prefix. Each call to [`Entries::next_entry`] gives the token's
/// bytes, its counts and day; `Some(None)` at the end; `None` if damaged.
struct Entries<'a> {
    bytes: &'a [u8],
    at: usize,
    token: Vec<u8>,
}

impl<'a> Entries<'a> {
    fn new(bytes: &'a [u8]) -> Entries<'a> {
        Entries {
            bytes,
            at: 0,
            token: Vec::new(),
        }
    }

    fn next_entry(&mut self) -> Option<Option<(&[u8], TokenCounts, u32)>> {
        let (bytes, at) = (self.bytes, &mut self.at);
        if *at == bytes.len() {
            return Some(None);
        }
        let shared = usize::try_from(get(bytes, at)?).ok()?;
        let rest = usize::try_from(get(bytes, at)?).ok()?;
        if shared > self.token.len() {
            return None;
        }
        let end = at.checked_add(rest).filter(|&e| e <= bytes.len())?;
        self.token.truncate(shared);
        self.token.extend_from_slice(&bytes[*at..end]);
        *at = end;
        let ham = u32::try_from(get(bytes, at)?).ok()?;
        let spam = u32::try_from(get(bytes, at)?).ok()?;
        let day = u32::try_from(get(bytes, at)?).ok()?;
        Some(Some((&self.token, TokenCounts { ham, spam }, day)))
    }
}

/// Decodes a shard, checking everything [`encode`] promises: UTF-8 tokens
/// in strictly increasing byte order, counts that fit and are not both
/// zero. `None` if the value is damaged.
pub fn decode(bytes: &[u8]) -> Option<Vec<Word>> {
    let mut out: Vec<Word> = Vec::new();
    let mut entries = Entries::new(bytes);
    while let Some((token, c, day)) = entries.next_entry()? {
        if c.is_zero() || out.last().is_some_and(|(p, _, _)| p.as_bytes() >= token) {
            return None;
        }
        out.push((String::from_utf8(token.to_vec()).ok()?, c, day));
    }
    Some(out)
}

/// The counts of `token` in an encoded shard, without building the others.
/// `None` if the value is damaged.
pub fn find(bytes: &[u8], token: &str) -> Option<TokenCounts> {
    let mut entries = Entries::new(bytes);
    while let Some((current, c, _)) = entries.next_entry()? {
        match current.cmp(token.as_bytes()) {
            std::cmp::Ordering::Less => {}
            std::cmp::Ordering::Equal => return Some(c),
            std::cmp::Ordering::Greater => break,
        }
    }
    Some(TokenCounts::default())
}

/// Buckets of the byte view per gram block: the byte view's counts are
/// kept by bucket, without names, [`GRAM_BLOCK`] to a value.
pub const GRAM_BLOCK: usize = 4096;

/// The sled key of the gram block holding `bucket` (three bytes, so it
/// never meets a shard's two-byte key).
pub(crate) fn gram_block_key(bucket: u32) -> [u8; 3] {
    let block = (bucket as usize / GRAM_BLOCK) as u16;
    let [hi, lo] = block.to_be_bytes();
    [b'G', hi, lo]
}

/// The block number of a gram block key, if it is one.
#[cfg(test)]
pub(crate) fn gram_block_of_key(key: &[u8]) -> Option<u32> {
    match key {
        [b'G', hi, lo] => Some(u32::from(u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }
}

/// Encodes a gram block: the ham and spam counts (LEB128) of each of its
/// [`GRAM_BLOCK`] buckets in order.
pub(crate) fn encode_grams(counts: &[TokenCounts]) -> Vec<u8> {
    let mut out = Vec::with_capacity(counts.len() * 3);
    for c in counts {
        put(&mut out, u64::from(c.ham));
        put(&mut out, u64::from(c.spam));
    }
    out
}

/// Decodes a gram block of exactly [`GRAM_BLOCK`] buckets; `None` if
/// damaged.
pub(crate) fn decode_grams(bytes: &[u8]) -> Option<Vec<TokenCounts>> {
    let mut out = Vec::with_capacity(GRAM_BLOCK);
    let mut at = 0;
    while at < bytes.len() {
        let ham = u32::try_from(get(bytes, &mut at)?).ok()?;
        let spam = u32::try_from(get(bytes, &mut at)?).ok()?;
        out.push(TokenCounts { ham, spam });
    }
    (out.len() == GRAM_BLOCK).then_some(out)
}

/// Bits of the registry's shard number: 256 shards of the learned
/// messages, each a sorted run of fixed-size records.
pub(crate) const REGISTRY_SHARD_BITS: u32 = 8;

/// Number of registry shards.
pub(crate) const REGISTRY_SHARDS: usize = 1 << REGISTRY_SHARD_BITS;

/// What the registry keeps of a message digest: its first 128 bits, as
/// unlikely to collide by chance as the whole (the digest is a
/// cryptographic hash) and half the bytes.
pub(crate) type RegistryKey = [u8; 16];

/// The registry key of a digest.
pub(crate) fn registry_key(digest: &Digest) -> RegistryKey {
    digest[..16].try_into().expect("16 bytes")
}

/// Bytes of one registry record: the key, then the label byte.
const RECORD: usize = 17;

/// The registry shard of a message digest (its top bits: digests are
/// hashes, so shards fill evenly).
pub(crate) fn registry_shard_of(digest: &Digest) -> u16 {
    (u16::from_be_bytes([digest[0], digest[1]])) >> (16 - REGISTRY_SHARD_BITS)
}

/// Encodes a registry shard: `(key, label byte)` records sorted by key,
/// distinct.
pub(crate) fn encode_registry(entries: &[(RegistryKey, u8)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * RECORD);
    for (digest, label) in entries {
        out.extend_from_slice(digest);
        out.push(*label);
    }
    out
}

/// Decodes a registry shard, checking order and length; labels are
/// returned as stored (the caller checks them). `None` if damaged.
pub(crate) fn decode_registry(bytes: &[u8]) -> Option<Vec<(RegistryKey, u8)>> {
    if !bytes.len().is_multiple_of(RECORD) {
        return None;
    }
    let mut out: Vec<(RegistryKey, u8)> = Vec::with_capacity(bytes.len() / RECORD);
    for record in bytes.chunks_exact(RECORD) {
        let digest: RegistryKey = record[..16].try_into().ok()?;
        if out.last().is_some_and(|(d, _)| *d >= digest) {
            return None;
        }
        out.push((digest, record[16]));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn c(ham: u32, spam: u32) -> TokenCounts {
        TokenCounts { ham, spam }
    }

    #[test]
    fn round_trips_and_finds() {
        let entries = vec![
            ("subject:cheap".to_string(), c(0, 7), 20_000),
            ("subject:cheaper".to_string(), c(1, 300), 20_001),
            ("subject:meeting".to_string(), c(u32::MAX, 0), 0),
            ("url:example.org".to_string(), c(2, 2), 20_000),
        ];
        let bytes = encode(&entries);
        assert_eq!(decode(&bytes).unwrap(), entries);
        for (t, counts, _) in &entries {
            assert_eq!(find(&bytes, t), Some(*counts));
        }
        assert_eq!(find(&bytes, "subject:che"), Some(TokenCounts::default()));
        assert_eq!(find(&bytes, "zzz"), Some(TokenCounts::default()));
        // Shared prefixes are stored once and small counts take a byte:
        // less than the tokens' own bytes with two `u32` counts each.
        let raw: usize = entries.iter().map(|(t, _, _)| t.len() + 12).sum();
        assert!(bytes.len() < raw * 2 / 3, "{} vs {raw}", bytes.len());
    }

    #[test]
    fn damaged_shards_are_refused() {
        let entries = vec![("a".to_string(), c(1, 0), 5), ("b".to_string(), c(0, 1), 6)];
        let bytes = encode(&entries);
        // Cut anywhere inside an entry: refused, never a panic.
        let first = encode(&entries[..1]).len();
        for cut in (1..bytes.len()).filter(|&c| c != first) {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        // Out of order, zero counts, a prefix longer than the previous token.
        assert_eq!(
            decode(&encode(&[entries[1].clone(), entries[0].clone()])),
            None
        );
        assert_eq!(decode(&encode(&[("a".to_string(), c(0, 0), 1)])), None);
        assert_eq!(decode(&[5, 1, b'a', 1, 0, 1]), None);
        // Not UTF-8.
        assert_eq!(decode(&[0, 1, 0xff, 1, 0, 1]), None);
    }

    #[test]
    fn gram_blocks_round_trip_and_refuse_damage() {
        let mut counts = vec![TokenCounts::default(); GRAM_BLOCK];
        counts[7] = c(3, 70_000);
        counts[GRAM_BLOCK - 1] = c(1, 0);
        let bytes = encode_grams(&counts);
        assert_eq!(decode_grams(&bytes).unwrap(), counts);
        assert_eq!(decode_grams(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_grams(&bytes[..bytes.len() - 2]), None);
        assert_eq!(
            gram_block_of_key(&gram_block_key(5 * GRAM_BLOCK as u32 + 9)),
            Some(5)
        );
        assert_eq!(gram_block_of_key(&shard_key(5)), None);
    }

    #[test]
    fn registry_shards_round_trip_and_refuse_damage() {
        let entries = vec![([1u8; 16], 0u8), ([2u8; 16], 1u8), ([200u8; 16], 1u8)];
        let bytes = encode_registry(&entries);
        assert_eq!(decode_registry(&bytes).unwrap(), entries);
        assert_eq!(decode_registry(&bytes[..20]), None);
        let unsorted = encode_registry(&[entries[1], entries[0]]);
        assert_eq!(decode_registry(&unsorted), None);
        assert_eq!(registry_shard_of(&[0xff; 32]) as usize, REGISTRY_SHARDS - 1);
        assert_eq!(registry_shard_of(&[0; 32]), 0);
    }

    proptest! {
        #[test]
        fn any_sorted_entries_round_trip(
            map in proptest::collection::btree_map("[a-c:é]{0,6}", (0u32..3, 0u32..70_000, 0u32..30_000), 0..40)
        ) {
            let entries: Vec<Word> = map
                .into_iter()
                .filter(|(_, (h, s, _))| h + s > 0)
                .map(|(t, (h, s, d))| (t, c(h, s), d))
                .collect();
            let bytes = encode(&entries);
            prop_assert_eq!(decode(&bytes), Some(entries.clone()));
            for (t, counts, _) in &entries {
                prop_assert_eq!(find(&bytes, t), Some(*counts));
            }
        }
    }
}
