//! The compiled model file: an immutable snapshot of the token counts plus
//! a JSON header (whatever the caller stores there: totals, parameters,
//! calibration). Scoring processes read it and never touch the database,
//! so they never wait for its lock and many can run at once while training
//! goes on.
//!
//! [`write_snapshot`] writes a temporary file in the target's directory,
//! fsyncs it, renames it over the target and fsyncs the directory: a reader
//! sees the old file or the new one, never a mix. Temporary files left by a
//! writer that was killed are removed by the next write.
//!
//! [`Snapshot::open`] reads the whole file into memory and refuses it
//! unless it is a regular file of exactly the right length whose checksum
//! over every byte matches, so a damaged or truncated model is an error
//! from `open`, never a quiet shift in verdicts. What it read is the
//! reader's own: a file replaced, changed or cut short afterwards changes
//! nothing it sees. [`Snapshot::verify`] checks the rest (order, UTF-8, the
//! hash table, the bucket table).
//! Word tokens are looked up through an open-addressing hash table (one or
//! two probes, a few cache lines per token, where a binary search over a
//! large vocabulary takes a score of dependent cache misses). The byte
//! view's hashed n-grams ([`crate::features::grams`]) are a bounded set of
//! bucket numbers, most of them in use, so their counts are a dense table
//! indexed by bucket ([`Snapshot::gram`]): no key, no slot, one read per
//! lookup, and 8 bytes per bucket where a keyed entry took about 26.
//! Lookups bounds-check every access and probe at most the whole table, so
//! even a file that passes `open` but not `verify` gives wrong answers at
//! worst, never a hang.
//!
//! # Layout
//! All integers little-endian. `n` is the number of word tokens (every
//! token but the byte view's buckets), `h` the header length.
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `BAYESMDL` |
//! | 4 | `u32` snapshot format version ([`SNAPSHOT_VERSION`]) |
//! | 4 | `u32` tokenizer version ([`TOKENIZER_VERSION`]; an older one that it reads is read) |
//! | 8 | `u64` header length `h` |
//! | `h` | header, JSON (UTF-8) |
//! | 8 | `u64` token count `n` |
//! | 4 (n + 1) | `u32` offsets into the key blob: token `i` is `keys[off[i]..off[i+1]]`; `off[0] = 0`, `off[n]` = blob length |
//! | 8 n | counts of token `i`: `u32` ham, `u32` spam (never both zero) |
//! | `off[n]` | key blob: the tokens (UTF-8), sorted by bytes, no duplicates, concatenated |
//! | 8 | `u64` slot count `m` = max(⌈4n / 3⌉, 1) |
//! | 4 m | `u32` hash slots: 0 empty, else token index + 1 in the low `k` bits, `k` the bits of `n` (`⌈log2(n + 1)⌉`), and the low `32 - k` bits of `hash(t)` above them (a tag: most slots of other tokens are passed over without reading their key); token `t` is at the first slot from `⌊hash(t) · m / 2^64⌋` on (linear probing, slot `m - 1` followed by slot 0), see [`token_hash`] |
//! | 8 | `u64` `g`: buckets of the byte view with non-zero counts (weights not counted) |
//! | 8 | `u64` `b`: entries in the table below: the highest such entry + 1 (0 if none), at most 2^([`BUCKET_BITS`] + 1) |
//! | 8 b | counts of bucket `i` (the feature [`Feature::Gram`]`(i)`): `u32` ham, `u32` spam; both zero for a bucket never seen; from 2^[`BUCKET_BITS`] on, entry 2^[`BUCKET_BITS`] + `i` holds the counters of [`Feature::Weight`]`(i)` |
//! | 8 | `u64` checksum of all the bytes before it: XXH3-64, seed 0 |
//!
//! Version 5 has the same layout with a table of at most 2^[`BUCKET_BITS`]
//! entries (no weights). Version 4 has that layout, with a checksum of bayesmail's own (four
//! lanes of 8-byte words, folded; see `checksum` in the source). Versions
//! 2 and 3 have no bucket table (the buckets are keyed tokens like the
//! others, under their names: U+0001 and the bucket in five lower-case hex
//! digits), `m` is the smallest power of two ≥ max(2n, 1), token `t`'s
//! first slot is `hash(t) mod m` and slots hold no tag.

use std::fs;
use std::io::{self, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

mod buffer;
mod write;

use super::checksum::{checksum, checksum_v2};
use super::keys::{self, GramName};
use super::{Error, Result, Store};
use crate::fsutil::open_regular;
use crate::model::TokenCounts;
use crate::vocab::BUCKET_BITS;
use crate::vocab::Feature;
use crate::vocab::{TOKENIZER_VERSION, readable_tokenizer};
use buffer::*;
pub(crate) use write::remove_check_record;
#[cfg(test)]
use write::*;
pub use write::{write_snapshot, write_store_snapshot};

/// Version of the snapshot file layout (independent of the count store's
/// format). Version 2 added the hash table; version 3 has the same layout
/// with a checksum computed in four independent lanes, cheaper to check
/// than one chain that waits on every multiplication, since every open now
/// checks it. Version 4 keeps the byte view's counts in a table indexed by
/// bucket and fills the hash table fuller: every open reads and checks the
/// whole file, so its size is the latency of `filter`. Version 5 has
/// version 4's layout with an XXH3-64 checksum, quicker to check over every
/// byte, which every open does. Version 6 has version 5's layout with a
/// bucket table of up to twice as many entries: from 2^18 on, entry
/// 2^18 + b holds the weight counters of bucket b of the online
/// discriminative view ([`crate::model::logistic`]). Versions 2 to 5 are
/// still read (with no weights), so a model keeps working after an upgrade
/// until the next training run rewrites it.
pub const SNAPSHOT_VERSION: u32 = 6;

/// The first version whose bucket table holds weights.
const WEIGHTS: u32 = 6;

/// The first version with the bucket table and the fuller hash table.
const DENSE_GRAMS: u32 = 4;

/// The oldest snapshot version [`Snapshot::open`] reads.
const OLDEST_READABLE: u32 = 2;

/// First bytes of every snapshot file.
pub const MAGIC: &[u8; 8] = b"BAYESMDL";

/// The first snapshot format whose checksum is XXH3-64.
const XXH3_FORMAT: u32 = 5;

/// The checksum of a snapshot of format `version`.
fn checksum_of(version: u32, bytes: &[u8]) -> u64 {
    match version {
        2 => checksum_v2(bytes),
        v if v >= XXH3_FORMAT => xxhash_rust::xxh3::xxh3_64(bytes),
        _ => checksum(bytes),
    }
}

/// Magic, two versions, header length.
const PREAMBLE: usize = 8 + 4 + 4 + 8;
/// The smallest possible file of any version read: preamble, empty header,
/// n = 0, one offset, one hash slot, checksum.
const MIN_LEN: usize = PREAMBLE + 8 + 4 + 8 + 4 + 8;

/// Buckets of the byte view: the most the bucket table holds.
const BUCKETS: usize = 1 << BUCKET_BITS;

/// The hash of a token for the snapshot's table. Part of the file format:
/// it must never change without a new [`SNAPSHOT_VERSION`].
pub use crate::vocab::token_hash;

/// Slots for `n` tokens in a file of format `version`: from version 4 on,
/// three quarters full, where a probe that misses still reads two or three
/// slots of one cache line, and any count is allowed, so the table is never
/// twice the size it needs; before, at most half full and a power of two.
fn slot_count(version: u32, n: usize) -> usize {
    if version >= DENSE_GRAMS {
        n.saturating_mul(4).div_ceil(3).max(1)
    } else {
        n.saturating_mul(2).max(1).next_power_of_two()
    }
}

/// How a slot holds a token's index in a file of format `version` for `n`
/// tokens: the index + 1 in the low bits (those `n` needs), the token
/// hash's low bits above them, from version 4 on. Returns the mask of the
/// index bits and the tag of `hash` (shifted into place).
fn slot_tag(version: u32, n: usize, hash: u64) -> (u32, u32) {
    if version < DENSE_GRAMS {
        return (u32::MAX, 0);
    }
    // n < 2^32 (the key blob has a byte per token and fits u32).
    let bits = u64::BITS - (n as u64).leading_zeros();
    let mask = (1u64 << bits) - 1;
    // (mask as u32): a mask of 32 bits or fewer; the tag lies above it.
    (mask as u32, ((hash << bits) & !mask & 0xffff_ffff) as u32)
}

/// The first slot of a token of hash `hash` in a table of `m` slots and
/// format `version`: the high bits of the hash scaled to `m` (any `m`), or
/// before version 4 its low bits (`m` a power of two).
fn home_slot(version: u32, hash: u64, m: usize) -> usize {
    if version >= DENSE_GRAMS {
        // < m: the product of a 64-bit hash and m, over 2^64.
        ((u128::from(hash) * m as u128) >> 64) as usize
    } else {
        hash as usize & (m - 1)
    }
}

/// A compiled model opened for reading: header and token counts. Opening
/// reads the whole file into memory and checks it; lookups are hash-table
/// probes that allocate nothing.
pub struct Snapshot {
    path: PathBuf,
    /// The whole file.
    bytes: Buffer,
    header: Range<usize>,
    n: usize,
    /// Start of the offset table.
    offsets: usize,
    /// Start of the counts table.
    counts: usize,
    /// Start and end of the key blob.
    keys: Range<usize>,
    /// Start of the hash slots.
    slots: usize,
    /// Number of hash slots (more than `n`).
    m: usize,
    /// The format version read.
    version: u32,
    /// Start of the bucket table.
    buckets: usize,
    /// Buckets in the bucket table (`b`).
    b: usize,
    /// Buckets with non-zero counts (`g`).
    g: usize,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("path", &self.path)
            .field("tokens", &self.n)
            .field("buckets", &self.g)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// Opens the snapshot at `path`: reads the whole file into memory and
    /// checks it: magic, versions, that its tables fit the file exactly,
    /// and the checksum over every byte. Anything but a regular file (a
    /// FIFO, a device, a directory) is refused without reading from it, so
    /// a FIFO put there cannot block the caller. A file that changes size
    /// while it is read is refused; one changed in place without a change
    /// of size fails the checksum.
    pub fn open(path: &Path) -> Result<Snapshot> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_owned(),
            reason,
        };
        let file = open_regular(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < MIN_LEN as u64 {
            return Err(corrupt(format!("too short for a model file ({len} bytes)")));
        }
        let len = usize::try_from(len).map_err(|_| io(io::ErrorKind::OutOfMemory.into()))?;
        let mut bytes = Buffer::new(len).map_err(io)?;
        let changed = || corrupt("changed size while being read".into());
        (&file).read_exact(&mut bytes[..]).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                changed()
            } else {
                io(e)
            }
        })?;
        if (&file).read(&mut [0u8; 1]).map_err(io)? != 0 {
            return Err(changed());
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("not a bayesmail model file (bad magic)".into()));
        }
        let version = |at: usize, expected: u32, what: &'static str| {
            let found = read_u32(&bytes, at).unwrap_or(0);
            if found == expected {
                Ok(())
            } else {
                Err(Error::Version {
                    path: path.to_owned(),
                    found,
                    expected,
                    what,
                })
            }
        };
        let format = read_u32(&bytes, 8).unwrap_or(0);
        if !(OLDEST_READABLE..=SNAPSHOT_VERSION).contains(&format) {
            version(8, SNAPSHOT_VERSION, super::MODEL_FILE_FORMAT)?;
        }
        // Counts of an older tokenizer that this one reads: see
        // [`TOKENIZER_VERSION`].
        if !readable_tokenizer(read_u32(&bytes, 12).unwrap_or(0)) {
            version(12, TOKENIZER_VERSION, "tokenizer version")?;
        }
        // Everything but the trailing checksum.
        let body = bytes.len() - 8;
        let truncated = || corrupt("truncated, or its lengths are damaged".into());
        let header_len = read_u64(&bytes, 16).ok_or_else(truncated)?;
        let header_end = usize::try_from(header_len)
            .ok()
            .and_then(|h| PREAMBLE.checked_add(h))
            .filter(|&end| end <= body)
            .ok_or_else(truncated)?;
        let n = read_u64(&bytes, header_end).ok_or_else(truncated)?;
        let n = usize::try_from(n).map_err(|_| truncated())?;
        let offsets = header_end + 8;
        let layout = (|| {
            let counts = offsets.checked_add(n.checked_add(1)?.checked_mul(4)?)?;
            let keys = counts.checked_add(n.checked_mul(8)?)?;
            (keys <= body).then_some((counts, keys))
        })();
        let (counts, keys_start) = layout.ok_or_else(truncated)?;
        let first = read_u32(&bytes, offsets).ok_or_else(truncated)?;
        let keys_len = read_u32(&bytes, offsets + 4 * n).ok_or_else(truncated)? as usize;
        let keys_end = keys_start.checked_add(keys_len).ok_or_else(truncated)?;
        let m = read_u64(&bytes, keys_end).ok_or_else(truncated)?;
        let m = usize::try_from(m).map_err(|_| truncated())?;
        let slots = keys_end + 8;
        let slots_end = m.checked_mul(4).and_then(|t| slots.checked_add(t));
        if first != 0 || m != slot_count(format, n) || slots_end.is_none_or(|end| end > body) {
            return Err(truncated());
        }
        let slots_end = slots_end.unwrap_or(body);
        let (buckets, b, g) = if format >= DENSE_GRAMS {
            let g = read_u64(&bytes, slots_end).ok_or_else(truncated)?;
            let b = read_u64(&bytes, slots_end + 8).ok_or_else(truncated)?;
            let most = if format >= WEIGHTS {
                2 * BUCKETS
            } else {
                BUCKETS
            };
            if b > most as u64 || g > b {
                return Err(truncated());
            }
            // Both at most 2^(BUCKET_BITS + 1): they fit.
            (slots_end + 16, b as usize, g as usize)
        } else {
            (slots_end, 0, 0)
        };
        if buckets.checked_add(8 * b) != Some(body) {
            return Err(truncated());
        }
        // A damaged file must be refused, not scored with: damaged counts
        // would shift verdicts without a word. So must one changed in place
        // while it was read, which mixes two files' bytes.
        if checksum_of(format, &bytes[..body]) != stored_checksum(&bytes) {
            return Err(corrupt("checksum mismatch (the file is damaged)".into()));
        }
        Ok(Snapshot {
            path: path.to_owned(),
            header: PREAMBLE..header_end,
            n,
            offsets,
            counts,
            keys: keys_start..keys_end,
            slots,
            m,
            version: format,
            buckets,
            b,
            g,
            bytes,
        })
    }

    /// The header of the snapshot at `path`, read without the rest of the
    /// file and without its checksum: `None` if it does not read, or was
    /// written in another format or by another tokenizer version than this
    /// build writes (a newer one this build cannot read, or an older one
    /// it reads until a writer compiles the model again). For a writer
    /// that only needs to know which snapshot is in place, to append to
    /// it what this build counts (readers check the whole file).
    pub fn peek_header<H: DeserializeOwned>(path: &Path) -> Option<H> {
        let mut file = open_regular(path).ok()?;
        let mut preamble = [0u8; PREAMBLE];
        file.read_exact(&mut preamble).ok()?;
        if &preamble[..8] != MAGIC
            || read_u32(&preamble, 8)? != SNAPSHOT_VERSION
            || read_u32(&preamble, 12)? != TOKENIZER_VERSION
        {
            return None;
        }
        let len = usize::try_from(read_u64(&preamble, 16)?).ok()?;
        if len > 16 << 20 {
            return None;
        }
        let mut header = vec![0u8; len];
        file.read_exact(&mut header).ok()?;
        serde_json::from_slice(&header).ok()
    }

    /// The file this snapshot was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header, deserialized from its JSON.
    pub fn header<H: DeserializeOwned>(&self) -> Result<H> {
        serde_json::from_slice(&self.bytes[self.header.clone()])
            .map_err(|e| self.corrupt(format!("bad header: {e}")))
    }

    /// The counts of `feature`, if it is in the snapshot: a hash-table
    /// probe for a word token, a read of the bucket table for a bucket of
    /// the byte view ([`Snapshot::gram`]); no allocation.
    pub fn lookup(&self, feature: Feature<'_>) -> Option<TokenCounts> {
        match feature {
            Feature::Word(word) => self.word_token(word),
            Feature::Gram(bucket) => self.gram(bucket),
            Feature::Weight(bucket) => self.weight(bucket),
        }
    }

    /// The counters of the weight of `bucket` of the online discriminative
    /// view, if it has any: one read of the bucket table (none before
    /// version 6).
    pub fn weight(&self, bucket: u32) -> Option<TokenCounts> {
        let slot = crate::store::slot_of(Feature::Weight(bucket))? as usize;
        if self.version < WEIGHTS || slot >= self.b {
            return None;
        }
        self.pair(self.buckets + 8 * slot).filter(|c| !c.is_zero())
    }

    /// The counts of a word token. Before version 4 a key that spells a
    /// bucket's name is that bucket, not a word.
    fn word_token(&self, word: &str) -> Option<TokenCounts> {
        if self.version < DENSE_GRAMS && !keys::has_name(Feature::Word(word)) {
            return None;
        }
        self.word(word.as_bytes())
    }

    /// The counts of the byte view's `bucket`, if it was seen: one read of
    /// the bucket table.
    pub fn gram(&self, bucket: u32) -> Option<TokenCounts> {
        if bucket as usize >= BUCKETS {
            return None;
        }
        if self.version < DENSE_GRAMS {
            return self.word(GramName::of(bucket).as_str().as_bytes());
        }
        let i = bucket as usize;
        if i >= self.b {
            return None;
        }
        self.pair(self.buckets + 8 * i).filter(|c| !c.is_zero())
    }

    /// Asks the processor to start fetching the counts of `bucket`, for a
    /// [`Snapshot::gram`] call a little later: a message's buckets are
    /// known in advance and scattered over the table, so each read would
    /// otherwise wait on memory in turn. Changes nothing a lookup returns.
    pub fn prefetch_gram(&self, bucket: u32) {
        if self.version >= DENSE_GRAMS && (bucket as usize) < self.b {
            prefetch(&self.bytes, self.buckets + 8 * bucket as usize);
        }
    }

    /// Calls `found` with each of `tokens`, in order, and its counts: what
    /// [`Snapshot::lookup`] answers for it. A word's lookup waits on memory
    /// three times in turn (its slot; its offsets and counts; its key), and
    /// looked up one after another, the words of a message each wait all
    /// three times on a model not yet in the cache. Here the tokens go in batches, each
    /// step taken for the whole batch before the next and asking ahead for
    /// the memory the next step reads, so the waits of a batch overlap. A
    /// step that meets anything but the plain case (a tag shared by
    /// another token, a damaged entry) answers with [`Snapshot::lookup`].
    pub fn lookup_all<'t>(
        &self,
        tokens: impl Iterator<Item = &'t str>,
        mut found: impl FnMut(&'t str, Option<TokenCounts>),
    ) {
        /// Tokens whose memory is asked for together: enough to keep the
        /// processor's outstanding fetches busy.
        const BATCH: usize = 16;
        if self.version < DENSE_GRAMS {
            tokens.for_each(|t| found(t, self.word_token(t)));
            return;
        }
        let mut batch = [("", Step::Done(None)); BATCH];
        let mut tokens = tokens.peekable();
        while tokens.peek().is_some() {
            let mut len = 0;
            for (entry, token) in batch.iter_mut().zip(tokens.by_ref()) {
                *entry = (token, self.first_step(token));
                len += 1;
            }
            let batch = &mut batch[..len];
            for (_, step) in batch.iter_mut() {
                if let Step::Probe(slot, hash) = *step {
                    *step = match self.probe(slot, hash, |_| Some(true)) {
                        Some(i) => {
                            prefetch(&self.bytes, self.offsets + 4 * i);
                            prefetch(&self.bytes, self.counts + 8 * i);
                            Step::Index(i)
                        }
                        None => Step::Done(None),
                    };
                }
            }
            for &(_, step) in batch.iter() {
                if let Step::Index(i) = step
                    && let Some(start) = read_u32(&self.bytes, self.offsets + 4 * i)
                {
                    prefetch(&self.bytes, self.keys.start.saturating_add(start as usize));
                }
            }
            for &(token, step) in batch.iter() {
                let counts = match step {
                    Step::Done(counts) => counts,
                    Step::Index(i) if self.key(i) == Some(token.as_bytes()) => self.counts_at(i),
                    // A tag shared with another token (the wanted one may
                    // be further on) or a damaged entry: the whole probe.
                    _ => self.word(token.as_bytes()),
                };
                found(token, counts);
            }
        }
    }

    /// [`Snapshot::lookup_all`]'s first step (version 4 on): where
    /// `token`'s probe starts (its slot asked for).
    fn first_step(&self, token: &str) -> Step {
        let hash = token_hash(token.as_bytes());
        let slot = home_slot(self.version, hash, self.m);
        prefetch(&self.bytes, self.slots + 4 * slot);
        Step::Probe(slot, hash)
    }

    /// The index in the first slot from `slot` on that holds the tag of
    /// `hash` and an index that `accept`s (`None` from it ends the probe),
    /// or `None` at an empty slot. Probes at most every slot once, so a
    /// damaged table cannot loop.
    fn probe(
        &self,
        mut slot: usize,
        hash: u64,
        mut accept: impl FnMut(usize) -> Option<bool>,
    ) -> Option<usize> {
        let (mask, tag) = slot_tag(self.version, self.n, hash);
        for _ in 0..self.m {
            let v = read_u32(&self.bytes, self.slots + 4 * slot)?;
            if v == 0 {
                return None;
            }
            let i = (v & mask) as usize;
            if v & !mask == tag && (1..=self.n).contains(&i) && accept(i - 1)? {
                return Some(i - 1);
            }
            slot = if slot + 1 >= self.m { 0 } else { slot + 1 };
        }
        None
    }

    /// The counts of a keyed token.
    fn word(&self, token: &[u8]) -> Option<TokenCounts> {
        self.index_of(token).and_then(|i| self.counts_at(i))
    }

    /// The index of `wanted` through the hash table.
    fn index_of(&self, wanted: &[u8]) -> Option<usize> {
        let hash = token_hash(wanted);
        let slot = home_slot(self.version, hash, self.m);
        self.probe(slot, hash, |i| Some(self.key(i)? == wanted))
    }

    /// The tokenizer version its counts were made with: this version's
    /// ([`TOKENIZER_VERSION`]) or an older one that it reads.
    pub fn tokenizer_version(&self) -> u32 {
        // Checked by `open`.
        read_u32(&self.bytes, 12).unwrap_or(0)
    }

    /// Number of tokens: keyed tokens and byte-view buckets with counts
    /// (the online discriminative view's weights are not tokens).
    pub fn len(&self) -> usize {
        self.n + self.g
    }

    /// True if the snapshot holds no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every feature and its counts, in [`Feature`]'s order: the words in
    /// byte order, then the buckets. Entries that are damaged (see
    /// [`Snapshot::verify`]) are skipped.
    pub fn iter(&self) -> impl Iterator<Item = (Feature<'_>, TokenCounts)> + '_ {
        let old = self.version < DENSE_GRAMS;
        let keyed = move |n: usize| {
            (0..n).filter_map(move |i| {
                let key = std::str::from_utf8(self.key(i)?).ok()?;
                Some((key, self.counts_at(i)?))
            })
        };
        let words = keyed(self.n)
            .filter(move |(k, _)| !old || keys::has_name(Feature::Word(k)))
            .map(|(k, c)| (Feature::Word(k), c));
        // Before version 4 the buckets are keyed tokens, whose names sort
        // in bucket order.
        let named = keyed(if old { self.n } else { 0 })
            .map(|(k, c)| (keys::feature_of(k), c))
            .filter(|(f, _)| matches!(f, Feature::Gram(_)));
        let table = self
            .table()
            .map(|(slot, c)| (crate::store::feature_in(slot), c));
        words.chain(named).chain(table)
    }

    /// The byte view's buckets with counts in the bucket table, in bucket
    /// order (none before version 4, whose buckets are keyed tokens).
    pub fn grams(&self) -> impl Iterator<Item = (u32, TokenCounts)> + '_ {
        self.table().take_while(|&(i, _)| (i as usize) < BUCKETS)
    }

    /// Every entry of the bucket table with counts, in order: the byte
    /// view's buckets, then the weights.
    fn table(&self) -> impl Iterator<Item = (u32, TokenCounts)> + '_ {
        (0..self.b).filter_map(|i| {
            let c = self.pair(self.buckets + 8 * i)?;
            // i < b ≤ 2^(BUCKET_BITS + 1).
            (!c.is_zero()).then_some((i as u32, c))
        })
    }

    /// Checks what [`Snapshot::open`] leaves out (it has checked the
    /// checksum): that the tokens are UTF-8 and strictly sorted, that no
    /// counts are zero, that every token is found through the hash table and
    /// that the header is JSON. Costs a hash and a probe per token, which
    /// opening avoids; a file written by [`write_snapshot`] always passes.
    pub fn verify(&self) -> Result<()> {
        let bytes = &self.bytes[..];
        serde_json::from_slice::<serde::de::IgnoredAny>(&bytes[self.header.clone()])
            .map_err(|e| self.corrupt(format!("bad header: {e}")))?;
        let mut previous: Option<&[u8]> = None;
        for i in 0..self.n {
            let key = self
                .key(i)
                .ok_or_else(|| self.corrupt(format!("bad offsets at {i}")))?;
            if std::str::from_utf8(key).is_err() {
                return Err(self.corrupt(format!("token {i} is not UTF-8")));
            }
            if previous.is_some_and(|p| p >= key) {
                return Err(self.corrupt(format!("token {i} is out of order")));
            }
            if self.counts_at(i).is_none_or(|c| c.is_zero()) {
                return Err(self.corrupt(format!("token {i} has no counts")));
            }
            if self.index_of(key) != Some(i) {
                return Err(self.corrupt(format!("token {i} is not in the hash table")));
            }
            previous = Some(key);
        }
        let seen = self.grams().count();
        if seen != self.g {
            return Err(self.corrupt(format!(
                "{seen} buckets have counts where {} are announced",
                self.g
            )));
        }
        let last = self
            .b
            .checked_sub(1)
            .map(|i| self.pair(self.buckets + 8 * i));
        if last.is_some_and(|c| c.is_none_or(|c| c.is_zero())) {
            return Err(self.corrupt("the bucket table ends in an empty bucket".into()));
        }
        Ok(())
    }

    /// The bytes of token `i`, or `None` if its offsets are damaged.
    fn key(&self, i: usize) -> Option<&[u8]> {
        let bytes = &self.bytes[..];
        let start = read_u32(bytes, self.offsets + 4 * i)? as usize;
        let end = read_u32(bytes, self.offsets + 4 * (i + 1))? as usize;
        bytes
            .get(self.keys.start.checked_add(start)?..self.keys.start.checked_add(end)?)
            .filter(|_| end <= self.keys.len())
    }

    fn counts_at(&self, i: usize) -> Option<TokenCounts> {
        self.pair(self.counts + 8 * i)
    }

    /// The counts stored at byte `at`.
    fn pair(&self, at: usize) -> Option<TokenCounts> {
        Some(TokenCounts {
            ham: read_u32(&self.bytes, at)?,
            spam: read_u32(&self.bytes, at.checked_add(4)?)?,
        })
    }

    fn corrupt(&self, reason: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason,
        }
    }
}

/// The checksum a snapshot of `bytes` (at least [`MIN_LEN`] long) ends
/// with.
fn stored_checksum(bytes: &[u8]) -> u64 {
    read_u64(bytes, bytes.len() - 8).expect("a snapshot ends in its checksum")
}

/// Where a token's lookup stands between [`Snapshot::lookup_all`]'s steps.
#[derive(Clone, Copy)]
enum Step {
    Done(Option<TokenCounts>),
    /// Probe the hash table from this slot for this hash.
    Probe(usize, u64),
    /// The token whose tag matched: check its key.
    Index(usize),
}

/// A hint to fetch the cache line of `bytes[at]` (nothing if `at` is out
/// of bounds or the processor has no such hint).
fn prefetch(bytes: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(byte) = bytes.get(at) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch only hints the cache; it never faults and
        // reads nothing the program sees (and the address is in bounds).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::Deserialize;
    use std::io::Write;
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::store::MemoryStore;
    use crate::vocab::FeatureBuf;
    use std::fs::OpenOptions;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Header {
        messages: [u64; 2],
        note: String,
    }

    fn header() -> Header {
        Header {
            messages: [10, 20],
            note: "calibration goes here".into(),
        }
    }

    fn word(w: &str) -> FeatureBuf {
        FeatureBuf::Word(w.into())
    }

    fn sample() -> Vec<(FeatureBuf, TokenCounts)> {
        let features = [
            word("free"),
            word("a"),
            word("ab"),
            word("abc"),
            word("b"),
            word("SUBJ:free"),
            word("URL:example.com"),
            word("é"),
            word("日本"),
            word("zz"),
            // Buckets of the byte view: the bucket table.
            FeatureBuf::Gram(0),
            FeatureBuf::Gram(5),
            FeatureBuf::Gram(0x28),
            // Words spelled almost as a bucket's name: keyed tokens.
            word("\u{1}0002A"),
            word("\u{1}fffff"),
        ];
        features
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                (
                    f,
                    TokenCounts {
                        ham: i as u32,
                        spam: 7 * i as u32 + 1,
                    },
                )
            })
            .collect()
    }

    fn sorted_sample() -> Vec<(FeatureBuf, TokenCounts)> {
        let mut s = sample();
        s.sort_by(|a, b| a.0.cmp(&b.0));
        s
    }

    /// The words and the buckets of `features` apart, as `encode` takes
    /// them.
    type Parts = (Vec<(String, TokenCounts)>, Vec<(u32, TokenCounts)>);
    fn parts(features: &[(FeatureBuf, TokenCounts)]) -> Parts {
        let (mut words, mut grams) = (Vec::new(), Vec::new());
        for (f, c) in features {
            match f {
                FeatureBuf::Word(w) => words.push((w.clone(), *c)),
                FeatureBuf::Gram(b) => grams.push((*b, *c)),
                FeatureBuf::Weight(b) => grams.push((*b | 1 << BUCKET_BITS, *c)),
            }
        }
        words.sort_by(|a, b| a.0.cmp(&b.0));
        grams.sort_by_key(|&(b, _)| b);
        (words, grams)
    }

    /// `features` as a format keyed by name spells them, in byte order.
    fn named(features: &[(FeatureBuf, TokenCounts)]) -> Vec<(String, TokenCounts)> {
        let mut named: Vec<(String, TokenCounts)> = features
            .iter()
            .map(|(f, c)| match f {
                FeatureBuf::Word(w) => (w.clone(), *c),
                FeatureBuf::Gram(b) => (GramName::of(*b).as_str().to_owned(), *c),
                // Formats keyed by name held no weights.
                FeatureBuf::Weight(_) => unreachable!("no weight in a keyed snapshot"),
            })
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
    }

    /// The bytes `write_snapshot` writes for the sample (built in memory:
    /// the property tests use them hundreds of times).
    fn sample_bytes() -> Vec<u8> {
        static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        BYTES
            .get_or_init(|| {
                let (words, grams) = parts(&sample());
                encode(&serde_json::to_vec(&header()).unwrap(), &words, &grams).unwrap()
            })
            .clone()
    }

    #[test]
    fn sample_bytes_are_what_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        write_snapshot(&path, &header(), sample()).unwrap();
        assert_eq!(fs::read(&path).unwrap(), sample_bytes());
    }

    /// Issue 26, S3: a link planted at the temporary names the next write
    /// will try (they are predictable) is passed over, never written
    /// through, and the write still lands.
    #[test]
    fn a_write_passes_over_links_at_its_temporary_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let victim = dir.path().join("victim");
        fs::write(&victim, b"someone else's file").unwrap();
        let next = crate::fsutil::TEMP_COUNTER.load(Ordering::Relaxed);
        let planted: Vec<PathBuf> = (next..next + 20)
            .map(|n| {
                let name = format!(".model.bin.{}.{n}.tmp", std::process::id());
                dir.path().join(name)
            })
            .collect();
        for link in &planted {
            std::os::unix::fs::symlink(&victim, link).unwrap();
        }
        write_snapshot(&path, &header(), sample()).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"someone else's file");
        assert_eq!(fs::read(&path).unwrap(), sample_bytes());
        assert!(fs::symlink_metadata(&path).unwrap().is_file());
    }

    #[test]
    fn round_trips_tokens_and_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        write_snapshot(&path, &header(), sample()).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        snap.verify().unwrap();
        assert_eq!(snap.len(), sample().len());
        assert!(!snap.is_empty());
        assert_eq!(snap.header::<Header>().unwrap(), header());
        for (token, counts) in sample() {
            assert_eq!(snap.lookup(token.as_feature()), Some(counts), "{token}");
        }
        assert_lookup_all_agrees(&snap, &wanted());
        for absent in [
            "",
            "0",
            "abcd",
            "aa",
            "free ",
            "SUBJ:",
            "zzz",
            "日",
            "\u{10ffff}",
            "\u{1}00001",
            "\u{1}00029",
            "\u{1}3ffff",
            "\u{1}",
            "\u{1}00000",
        ] {
            assert_eq!(snap.lookup(Feature::Word(absent)), None, "{absent}");
        }
        // Buckets by number, as the classifier looks them up.
        let gram = |b: u32| {
            sample()
                .into_iter()
                .find(|(t, _)| *t == FeatureBuf::Gram(b))
        };
        for bucket in [0, 5, 0x28] {
            assert_eq!(snap.gram(bucket), gram(bucket).map(|t| t.1), "{bucket}");
            assert_eq!(snap.gram(bucket), snap.lookup(Feature::Gram(bucket)));
            assert!(snap.gram(bucket).is_some());
        }
        for bucket in [
            1,
            4,
            0x27,
            0x29,
            (1 << BUCKET_BITS) - 1,
            1 << BUCKET_BITS,
            u32::MAX,
        ] {
            assert_eq!(snap.gram(bucket), None, "{bucket}");
            assert_eq!(snap.lookup(Feature::Gram(bucket)), None, "{bucket}");
        }
        assert_eq!(
            snap.grams().map(|(b, _)| b).collect::<Vec<_>>(),
            [0, 5, 0x28]
        );
        let listed: Vec<(FeatureBuf, TokenCounts)> =
            snap.iter().map(|(t, c)| (t.into_owned(), c)).collect();
        assert_eq!(listed, sorted_sample());
        assert!(
            snap.header::<Vec<u32>>().is_err(),
            "a header of another shape is an error"
        );
        // No temporary file is left behind.
        let mut names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["model.bin"]);
    }

    #[test]
    fn totals_survive_a_json_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let mut totals = crate::model::Totals {
            messages: [1, u64::MAX],
            ..Default::default()
        };
        totals.gauss[1][0] = crate::model::GaussStats {
            n: 3,
            sum: i128::MIN,
            sum_sq: i128::MAX,
        };
        write_snapshot(&path, &totals, sample()).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        assert_eq!(snap.header::<crate::model::Totals>().unwrap(), totals);
    }

    #[test]
    fn empty_snapshot_and_zero_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let zero = TokenCounts::default();
        write_snapshot(
            &path,
            &(),
            [(Feature::Word("gone"), zero), (Feature::Gram(3), zero)],
        )
        .unwrap();
        let snap = Snapshot::open(&path).unwrap();
        snap.verify().unwrap();
        assert!(snap.is_empty());
        assert_eq!(snap.lookup(Feature::Word("gone")), None);
        assert_eq!(snap.lookup(Feature::Word("")), None);
        assert_eq!(snap.lookup(Feature::Gram(3)), None);
        assert_eq!(snap.iter().count(), 0);
        snap.header::<()>().unwrap();
    }

    /// Weights sit in the bucket table past the buckets (so a snapshot
    /// with any weight is larger than the tests of every byte can use).
    #[test]
    fn weights_round_trip_apart_from_the_buckets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let c = |ham, spam| TokenCounts { ham, spam };
        let last = (1 << BUCKET_BITS) - 1;
        let features = [
            (FeatureBuf::Gram(5), c(1, 2)),
            (FeatureBuf::Weight(5), c(30, 4)),
            (FeatureBuf::Weight(last), c(0, 9)),
            (word("w"), c(1, 0)),
        ];
        write_snapshot(&path, &(), features.clone()).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        snap.verify().unwrap();
        assert_eq!(snap.lookup(Feature::Gram(5)), Some(c(1, 2)));
        assert_eq!(snap.lookup(Feature::Weight(5)), Some(c(30, 4)));
        assert_eq!(snap.weight(last), Some(c(0, 9)));
        assert_eq!(snap.weight(6), None);
        assert_eq!(snap.gram(last), None);
        assert_eq!(snap.grams().collect::<Vec<_>>(), [(5, c(1, 2))]);
        let mut all: Vec<_> = snap.iter().map(|(f, c)| (f.into_owned(), c)).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want = features.to_vec();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(all, want);
        // A weight of a number that is no bucket has no place.
        let err =
            write_snapshot(&path, &(), [(Feature::Weight(1 << BUCKET_BITS), c(1, 0))]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    }

    #[test]
    fn refuses_duplicate_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let c = TokenCounts { ham: 1, spam: 0 };
        let (a, b) = (Feature::Word("a"), Feature::Word("b"));
        let err = write_snapshot(&path, &(), [(b, c), (a, c), (b, c)]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err:?}");
        let g = Feature::Gram(4);
        let err = write_snapshot(&path, &(), [(g, c), (a, c), (g, c)]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err:?}");
        // A number that is no bucket has no place in the table.
        let err = write_snapshot(&path, &(), [(Feature::Gram(1 << BUCKET_BITS), c)]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err:?}");
        assert!(!path.exists());
    }

    #[test]
    fn writes_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let mut store = MemoryStore::new();
        let mut delta = crate::model::Delta::default();
        for (token, c) in sample() {
            *delta.change(token.as_feature()) = [i64::from(c.ham), i64::from(c.spam)];
        }
        store.apply(&delta).unwrap();
        write_store_snapshot(&path, &header(), &store).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        let listed: Vec<(FeatureBuf, TokenCounts)> =
            snap.iter().map(|(t, c)| (t.into_owned(), c)).collect();
        assert_eq!(listed, sorted_sample());
        assert_eq!(fs::read(&path).unwrap(), sample_bytes());
    }

    #[test]
    fn replacing_leaves_open_readers_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let old = TokenCounts { ham: 1, spam: 2 };
        let new = TokenCounts { ham: 3, spam: 4 };
        let (t, u) = (Feature::Word("t"), Feature::Word("u"));
        write_snapshot(&path, "old", [(t, old)]).unwrap();
        let reader = Snapshot::open(&path).unwrap();
        write_snapshot(&path, "new", [(t, new), (u, new)]).unwrap();
        assert_eq!(reader.lookup(t), Some(old));
        assert_eq!(reader.header::<String>().unwrap(), "old");
        reader.verify().unwrap();
        let fresh = Snapshot::open(&path).unwrap();
        assert_eq!((fresh.lookup(t), fresh.len()), (Some(new), 2));
    }

    /// A model file of tokenizer version 3 (before CJK pairs) is read as it
    /// is; one of a version this one cannot read is refused.
    #[test]
    fn reads_a_model_file_of_an_older_readable_tokenizer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let current = dir.path().join("current.bin");
        fs::write(&current, sample_bytes()).unwrap();
        let current = Snapshot::open(&current).unwrap();
        for (found, readable) in [(3, true), (2, false), (TOKENIZER_VERSION + 1, false)] {
            let mut bytes = sample_bytes();
            bytes[12..16].copy_from_slice(&found.to_le_bytes());
            fs::write(&path, resealed(bytes)).unwrap();
            match Snapshot::open(&path) {
                Ok(snapshot) => {
                    assert!(readable, "{found}");
                    snapshot.verify().unwrap();
                    assert_eq!(snapshot.len(), current.len());
                    assert_eq!(snapshot.tokenizer_version(), found);
                    assert_eq!(current.tokenizer_version(), TOKENIZER_VERSION);
                    for (word, counts) in parts(&sample()).0 {
                        let word = Feature::Word(&word);
                        assert_eq!(snapshot.lookup(word), current.lookup(word));
                        assert_eq!(snapshot.lookup(word), Some(counts));
                    }
                }
                Err(err) => {
                    assert!(!readable, "{found}: {err}");
                    assert!(
                        matches!(err, Error::Version { found: f, .. } if f == found),
                        "{err:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn refuses_other_versions_and_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        for (at, what) in [
            (8, crate::store::MODEL_FILE_FORMAT),
            (12, "tokenizer version"),
        ] {
            let mut bytes = sample_bytes();
            bytes[at..at + 4].copy_from_slice(&77u32.to_le_bytes());
            fs::write(&path, &bytes).unwrap();
            let err = Snapshot::open(&path).unwrap_err();
            assert!(
                matches!(err, Error::Version { found: 77, what: w, .. } if w == what),
                "{err:?}"
            );
        }
        let mut bytes = sample_bytes();
        bytes[0] = b'X';
        fs::write(&path, &bytes).unwrap();
        assert!(matches!(Snapshot::open(&path), Err(Error::Corrupt { .. })));
        fs::write(&path, b"").unwrap();
        assert!(matches!(Snapshot::open(&path), Err(Error::Corrupt { .. })));
        let missing = dir.path().join("missing.bin");
        assert!(matches!(Snapshot::open(&missing), Err(Error::Io { .. })));
    }

    #[test]
    fn every_truncation_and_extension_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let bytes = sample_bytes();
        for len in 0..bytes.len() {
            fs::write(&path, &bytes[..len]).unwrap();
            assert!(Snapshot::open(&path).is_err(), "truncated to {len} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        fs::write(&path, &longer).unwrap();
        assert!(Snapshot::open(&path).is_err());
    }

    /// Uses a damaged snapshot every way there is; must not panic.
    fn exercise(snap: &Snapshot) {
        for (token, _) in sample() {
            let _ = snap.lookup(token.as_feature());
        }
        for bucket in (0..64).chain([(1 << BUCKET_BITS) - 1, 1 << BUCKET_BITS, u32::MAX]) {
            let _ = snap.gram(bucket);
        }
        let _ = snap.grams().count();
        let _ = snap.lookup(Feature::Word(""));
        let _ = snap.lookup(Feature::Word("not there"));
        let _ = snap.lookup(Feature::Word("\u{1}00005"));
        let _ = snap.iter().count();
        let _ = snap.header::<Header>();
        let _ = snap.len();
    }

    proptest! {
        /// One damaged byte anywhere: refused by `open`.
        #[test]
        fn a_flipped_byte_is_always_refused_at_open(at in any::<prop::sample::Index>(), xor in 1u8..=255) {
            let mut bytes = sample_bytes();
            let at = at.index(bytes.len());
            bytes[at] ^= xor;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("model.bin");
            fs::write(&path, &bytes).unwrap();
            if let Ok(snap) = Snapshot::open(&path) {
                exercise(&snap);
                prop_assert!(false, "byte {} ^ {:#x} not detected", at, xor);
            }
        }

        /// Many damaged bytes: no panic, whatever `open` and `verify` say.
        #[test]
        fn random_damage_never_panics(
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
        ) {
            let mut bytes = sample_bytes();
            for (at, value) in flips {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("model.bin");
            fs::write(&path, &bytes).unwrap();
            if let Ok(snap) = Snapshot::open(&path) {
                exercise(&snap);
                let _ = snap.verify();
            }
        }
    }

    /// The words `lookup_all` is tried on: every word of the sample, the
    /// sample's buckets spelled as words, and some that are not in it.
    fn wanted() -> Vec<String> {
        let mut tokens: Vec<String> = named(&sample()).into_iter().map(|(t, _)| t).collect();
        tokens.extend(["", "zzz", "free ", "\u{1}00001", "\u{1}3ffff"].map(String::from));
        tokens
    }

    /// `lookup_all` gives, in order, what `lookup` gives for each word.
    fn assert_lookup_all_agrees(snap: &Snapshot, tokens: &[String]) {
        let one_by_one: Vec<_> = tokens
            .iter()
            .map(|t| (t.as_str(), snap.lookup(Feature::Word(t))))
            .collect();
        let mut all = Vec::new();
        snap.lookup_all(tokens.iter().map(String::as_str), |t, c| all.push((t, c)));
        assert_eq!(all, one_by_one);
    }

    /// Many batches: a vocabulary of thousands, looked up with as many
    /// absent tokens, interleaved.
    #[test]
    fn lookup_all_answers_as_lookup_over_many_batches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let counts = |i: u32| TokenCounts { ham: i, spam: 1 };
        let vocabulary = (0..3000u32).map(|i| (FeatureBuf::Word(format!("w{i}")), counts(i)));
        write_snapshot(&path, &header(), vocabulary).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        let tokens: Vec<String> = (0..6001)
            .map(|i| format!("{}{}", if i % 2 == 0 { "w" } else { "x" }, i / 2))
            .collect();
        assert_lookup_all_agrees(&snap, &tokens);
        assert_eq!(snap.lookup(Feature::Word("w2999")), Some(counts(2999)));
    }

    proptest! {
        /// Damage that only `verify` sees (the checksum made right again):
        /// `lookup_all` still answers what `lookup` answers.
        #[test]
        fn lookup_all_answers_as_lookup_in_a_damaged_file(
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
        ) {
            let mut bytes = sample_bytes();
            // Past the header (whose damage `open` refuses), before the checksum.
            let body = PREAMBLE + serde_json::to_vec(&header()).unwrap().len();
            for (at, value) in flips {
                let at = body + at.index(bytes.len() - 8 - body);
                bytes[at] = value;
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("model.bin");
            fs::write(&path, resealed(bytes)).unwrap();
            if let Ok(snap) = Snapshot::open(&path) {
                assert_lookup_all_agrees(&snap, &wanted());
            }
        }
    }

    /// A token of a random model: short words (many sharing prefixes),
    /// byte-view buckets, and names that are almost buckets.
    fn model_token() -> impl Strategy<Value = String> {
        prop_oneof![
            "[abc]{0,4}",
            "[a-z\u{e9}]{1,8}",
            (0..1u32 << BUCKET_BITS).prop_map(|b| GramName::of(b).as_str().to_owned()),
            "\u{1}[0-9a-fA-F]{4,6}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// On random models of either layout read (version 3 and the
        /// current one), with slots forged to carry a wanted token's tag
        /// and any index and then random damage, `lookup_all` answers what
        /// `lookup` answers for tokens present and absent.
        #[test]
        fn lookup_all_answers_as_lookup_on_random_models_with_forged_slots(
            tokens in prop::collection::btree_map(model_token(), (0u32..4, 0u32..4), 0..300),
            absent in prop::collection::vec(model_token(), 0..60),
            forged in prop::collection::vec(
                (any::<prop::sample::Index>(), any::<u32>(), any::<prop::sample::Index>()),
                0..8,
            ),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            v3 in any::<bool>(),
        ) {
            let tokens: Vec<(String, TokenCounts)> = tokens
                .into_iter()
                .filter(|(_, (ham, spam))| ham + spam > 0)
                .map(|(t, (ham, spam))| (t, TokenCounts { ham, spam }))
                .collect();
            let header = serde_json::to_vec(&header()).unwrap();
            let mut bytes = if v3 {
                encode_v3(&header, &tokens)
            } else {
                // As a version 4 writer takes them: a bucket's name is the
                // bucket.
                let typed: Vec<(FeatureBuf, TokenCounts)> = tokens
                    .iter()
                    .map(|(t, c)| (keys::feature_of(t).into_owned(), *c))
                    .collect();
                let (words, grams) = parts(&typed);
                encode(&header, &words, &grams).unwrap()
            };
            let mut wanted: Vec<String> = tokens.into_iter().rev().map(|(t, _)| t).collect();
            wanted.extend(absent);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("model.bin");
            fs::write(&path, &bytes).unwrap();
            let snap = Snapshot::open(&path).unwrap();
            if !wanted.is_empty() {
                for (slot, index, token) in forged {
                    let hash = token_hash(wanted[token.index(wanted.len())].as_bytes());
                    let (mask, tag) = slot_tag(snap.version, snap.n, hash);
                    let at = snap.slots + 4 * slot.index(snap.m);
                    bytes[at..at + 4].copy_from_slice(&(tag | (index & mask)).to_le_bytes());
                }
            }
            let body = PREAMBLE + header.len();
            for (at, value) in flips {
                let at = body + at.index(bytes.len() - 8 - body);
                bytes[at] = value;
            }
            drop(snap);
            fs::write(&path, resealed(bytes)).unwrap();
            if let Ok(snap) = Snapshot::open(&path) {
                assert_lookup_all_agrees(&snap, &wanted);
            }
        }
    }

    /// Where a slot carries the wanted token's tag but another token's
    /// index, `lookup_all` probes on as `lookup` does: it finds a token
    /// further on and reports an absent one absent.
    #[test]
    fn lookup_all_probes_past_a_slot_whose_tag_is_shared() {
        let bytes = sample_bytes();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        fs::write(&path, &bytes).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        let slot_at = |slot: usize| snap.slots + 4 * slot;
        let home = |token: &str| home_slot(snap.version, token_hash(token.as_bytes()), snap.m);
        let tag = |token: &str| slot_tag(snap.version, snap.n, token_hash(token.as_bytes())).1;
        let value = |slot: usize| read_u32(&bytes, slot_at(slot)).unwrap();
        // A present word at its home slot with an empty slot after it.
        let present = sample()
            .into_iter()
            .filter_map(|(t, _)| match t {
                FeatureBuf::Word(w) => Some(w),
                FeatureBuf::Gram(_) | FeatureBuf::Weight(_) => None,
            })
            .find(|t| {
                let h = home(t);
                h + 1 < snap.m
                    && value(h + 1) == 0
                    && value(h) & !slot_tag(snap.version, snap.n, 0).0 == tag(t)
            })
            .expect("a word at its home slot before an empty one");
        let absent = "not in the sample";
        let other = if present == "a" { 2 } else { 1 };
        let mut forged = bytes.clone();
        let h = home(&present);
        let genuine = value(h);
        forged[slot_at(h + 1)..slot_at(h + 1) + 4].copy_from_slice(&genuine.to_le_bytes());
        forged[slot_at(h)..slot_at(h) + 4].copy_from_slice(&(tag(&present) | other).to_le_bytes());
        let a = home(absent);
        forged[slot_at(a)..slot_at(a) + 4].copy_from_slice(&(tag(absent) | other).to_le_bytes());
        let path = dir.path().join("forged.bin");
        fs::write(&path, resealed(forged)).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        let expected = sample()
            .into_iter()
            .find(|(t, _)| t.as_feature() == Feature::Word(&present))
            .unwrap()
            .1;
        assert_eq!(
            snap.lookup(Feature::Word(&present)),
            Some(expected),
            "found past the shared tag"
        );
        assert_eq!(snap.lookup(Feature::Word(absent)), None);
        let mut tokens = wanted();
        tokens.push(absent.into());
        assert_lookup_all_agrees(&snap, &tokens);
    }

    /// A model with a run of bytes zeroed in its counts (as a damaged disk
    /// block leaves it) is refused when opened, not scored with.
    #[test]
    fn open_refuses_a_zeroed_run_of_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let many: Vec<(FeatureBuf, TokenCounts)> = (0..5000)
            .map(|i| {
                (
                    word(&format!("token{i:05}")),
                    TokenCounts { ham: i, spam: 1 },
                )
            })
            .collect();
        write_snapshot(&path, &header(), many).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle - 4096..middle + 4096].fill(0);
        fs::write(&path, &bytes).unwrap();
        let err = Snapshot::open(&path).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { reason, .. } if reason.contains("checksum")),
            "{err:?}"
        );
    }

    /// The bytes a version 3 writer wrote for `tokens` (sorted, no zero
    /// counts): every token keyed, buckets too, in a power-of-two hash
    /// table at most half full.
    fn encode_v3(header: &[u8], tokens: &[(String, TokenCounts)]) -> Vec<u8> {
        let n = tokens.len();
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&TOKENIZER_VERSION.to_le_bytes());
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(header);
        out.extend_from_slice(&(n as u64).to_le_bytes());
        let mut offset = 0u32;
        out.extend_from_slice(&offset.to_le_bytes());
        for (k, _) in tokens {
            offset += k.len() as u32;
            out.extend_from_slice(&offset.to_le_bytes());
        }
        for (_, c) in tokens {
            out.extend_from_slice(&c.ham.to_le_bytes());
            out.extend_from_slice(&c.spam.to_le_bytes());
        }
        for (k, _) in tokens {
            out.extend_from_slice(k.as_bytes());
        }
        let m = (2 * n).max(1).next_power_of_two();
        let mut slots = vec![0u32; m];
        for (i, (k, _)) in tokens.iter().enumerate() {
            let mut slot = token_hash(k.as_bytes()) as usize & (m - 1);
            while slots[slot] != 0 {
                slot = (slot + 1) & (m - 1);
            }
            slots[slot] = i as u32 + 1;
        }
        out.extend_from_slice(&(m as u64).to_le_bytes());
        for v in slots {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Files of the previous formats (version 4: this layout with the
    /// four-lane checksum; 3: every token keyed; 2: as 3 with a one-chain
    /// checksum) are still read, buckets included, and checked, so a
    /// database keeps judging after an upgrade without a training run.
    #[test]
    fn reads_and_checks_version_2_3_and_4_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let mut v4 = sample_bytes();
        v4[8..12].copy_from_slice(&4u32.to_le_bytes());
        let body = v4.len() - 8;
        let sum = checksum(&v4[..body]);
        v4[body..].copy_from_slice(&sum.to_le_bytes());
        let v3 = encode_v3(&serde_json::to_vec(&header()).unwrap(), &named(&sample()));
        let mut v2 = v3.clone();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let body = v2.len() - 8;
        let sum = checksum_v2(&v2[..body]);
        v2[body..].copy_from_slice(&sum.to_le_bytes());
        // The current version's checksum is not the earlier ones'.
        let mut v5_sum = v4.clone();
        v5_sum[8..12].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        fs::write(&path, &v5_sum).unwrap();
        assert!(matches!(Snapshot::open(&path), Err(Error::Corrupt { .. })));
        for mut bytes in [v4, v3, v2] {
            fs::write(&path, &bytes).unwrap();
            let snap = Snapshot::open(&path).unwrap();
            snap.verify().unwrap();
            assert_eq!(snap.len(), sample().len());
            assert_eq!(snap.header::<Header>().unwrap(), header());
            for (token, counts) in sample() {
                assert_eq!(snap.lookup(token.as_feature()), Some(counts), "{token:?}");
                if let FeatureBuf::Gram(bucket) = token {
                    assert_eq!(snap.gram(bucket), Some(counts), "{bucket}");
                    // A bucket's name is the bucket, not a word.
                    let name = GramName::of(bucket);
                    assert_eq!(snap.lookup(Feature::Word(name.as_str())), None);
                }
            }
            assert_eq!((snap.gram(1), snap.gram(u32::MAX)), (None, None));
            let listed: Vec<(FeatureBuf, TokenCounts)> =
                snap.iter().map(|(t, c)| (t.into_owned(), c)).collect();
            assert_eq!(listed, sorted_sample());
            exercise(&snap);
            bytes[PREAMBLE + 3] ^= 1;
            fs::write(&path, &bytes).unwrap();
            assert!(matches!(Snapshot::open(&path), Err(Error::Corrupt { .. })));
        }
    }

    /// The bytes with the checksum of their version made right again:
    /// damage that only `verify` can see.
    fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
        let body = bytes.len() - 8;
        let version = read_u32(&bytes, 8).unwrap();
        let sum = checksum_of(version, &bytes[..body]);
        bytes[body..].copy_from_slice(&sum.to_le_bytes());
        bytes
    }

    /// The bucket table: its own 8 bytes a bucket up to the highest one
    /// used, its count of buckets in use checked by `verify`, its bounds by
    /// `open`.
    #[test]
    fn the_bucket_table_is_sized_by_its_highest_bucket_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let bytes = sample_bytes();
        // Checksum, then 0x29 buckets of 8 bytes, then b and g.
        let table = bytes.len() - 8 - 8 * 0x29;
        assert_eq!(read_u64(&bytes, table - 8), Some(0x29));
        assert_eq!(read_u64(&bytes, table - 16), Some(3));
        let words = sample().len() - 3;
        let m = read_u64(&bytes, table - 24 - 4 * slot_count(SNAPSHOT_VERSION, words));
        assert_eq!(m, Some((4 * words as u64).div_ceil(3)));

        // g announces more buckets than the table holds.
        let mut wrong = bytes.clone();
        wrong[table - 16..table - 8].copy_from_slice(&4u64.to_le_bytes());
        fs::write(&path, resealed(wrong)).unwrap();
        let err = Snapshot::open(&path).unwrap().verify().unwrap_err();
        assert!(err.to_string().contains("4 are announced"), "{err}");
        // A bucket emptied: g is wrong and so is the table's end.
        let mut wrong = bytes.clone();
        let last = bytes.len() - 16;
        wrong[last..last + 8].fill(0);
        fs::write(&path, resealed(wrong)).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        assert_eq!(snap.gram(0x28), None);
        assert!(snap.verify().is_err());
        // b beyond the bucket space, or not the table's length: refused.
        for b in [
            0x28u64,
            0x2a,
            1 << BUCKET_BITS,
            (1 << BUCKET_BITS) + 1,
            u64::MAX,
        ] {
            let mut wrong = bytes.clone();
            wrong[table - 8..table].copy_from_slice(&b.to_le_bytes());
            fs::write(&path, resealed(wrong)).unwrap();
            assert!(
                matches!(Snapshot::open(&path), Err(Error::Corrupt { .. })),
                "b = {b}"
            );
        }
        // Keyed tokens spelled as buckets' names, with an empty bucket
        // table: from version 4 on, keyed tokens are words, whatever their
        // spelling, and the buckets are the table's.
        let header = serde_json::to_vec(&header()).unwrap();
        let named = named(&sample());
        let keyed = encode_v3(&header, &named);
        let mut keyed = keyed[..keyed.len() - 8].to_vec();
        keyed[8..12].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        let n = sample().len();
        let slots_at = keyed.len() - 4 * (2 * n).next_power_of_two();
        let m = slot_count(SNAPSHOT_VERSION, n);
        let mut slots = vec![0u32; m];
        for (i, (k, _)) in named.iter().enumerate() {
            let hash = token_hash(k.as_bytes());
            let mut slot = home_slot(SNAPSHOT_VERSION, hash, m);
            while slots[slot] != 0 {
                slot = (slot + 1) % m;
            }
            slots[slot] = slot_tag(SNAPSHOT_VERSION, n, hash).1 | (i as u32 + 1);
        }
        keyed.truncate(slots_at - 8);
        keyed.extend_from_slice(&(m as u64).to_le_bytes());
        keyed.extend(slots.iter().flat_map(|v| v.to_le_bytes()));
        keyed.extend_from_slice(&[0; 16]);
        keyed.extend_from_slice(&[0; 8]);
        fs::write(&path, resealed(keyed)).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        snap.verify().unwrap();
        for (name, counts) in &named {
            assert_eq!(snap.lookup(Feature::Word(name)), Some(*counts), "{name:?}");
        }
        for bucket in [0, 5, 0x28] {
            assert_eq!(snap.gram(bucket), None);
        }
        assert!(snap.iter().all(|(f, _)| matches!(f, Feature::Word(_))));
        exercise(&snap);
    }

    /// The whole bucket space round-trips, the last bucket included.
    #[test]
    fn every_bucket_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let all: Vec<(FeatureBuf, TokenCounts)> = (0..1u32 << BUCKET_BITS)
            .step_by(5)
            .chain([(1 << BUCKET_BITS) - 1])
            .map(|b| (FeatureBuf::Gram(b), TokenCounts { ham: b, spam: 1 }))
            .chain((0..3000).map(|i| (word(&format!("word{i}")), TokenCounts { ham: i, spam: 0 })))
            .filter(|(_, c)| !c.is_zero())
            .collect();
        write_snapshot(&path, &(), all.clone()).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        snap.verify().unwrap();
        // Over 2 MiB: read into a window that huge pages can back.
        assert_eq!(snap.bytes.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(snap.len(), all.len());
        for (name, counts) in &all {
            assert_eq!(snap.lookup(name.as_feature()), Some(*counts), "{name:?}");
            if let FeatureBuf::Gram(b) = *name {
                assert_eq!(snap.gram(b), Some(*counts));
            }
        }
        for i in 0..3000 {
            assert_eq!(snap.lookup(Feature::Word(&format!("word{i}x"))), None);
        }
        assert_eq!(snap.lookup(Feature::Word("word0")), None);
        assert_eq!(snap.gram(1), None);
        assert_eq!(snap.grams().count(), all.len() - 2999);
        // Eight bytes a bucket, no more; a word: its key (at most 8 bytes),
        // its offset, its counts and 4/3 of a slot.
        let words = 2999 * (8 + 4 + 8 + 6) + 200;
        let len = fs::metadata(&path).unwrap().len();
        assert!(len < 8 * (1 << BUCKET_BITS) + words, "{len}");
    }

    /// Someone truncates and rewrites the file in place (`cp other
    /// model.bin`) while a reader has it open: the reader goes on with what
    /// it read, which was checked whole; the next open refuses the file.
    #[test]
    fn a_file_cut_short_under_an_open_reader_leaves_it_what_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        write_snapshot(&path, &header(), sample()).unwrap();
        let reader = Snapshot::open(&path).unwrap();
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(0).unwrap();
        (&file).write_all(b"BAYESMDL half a model").unwrap();
        drop(file);
        for (token, counts) in sample() {
            assert_eq!(reader.lookup(token.as_feature()), Some(counts), "{token}");
        }
        assert_eq!(reader.header::<Header>().unwrap(), header());
        reader.verify().unwrap();
        assert!(matches!(Snapshot::open(&path), Err(Error::Corrupt { .. })));
    }

    /// One byte changed in place, size kept (a write into the file, or a
    /// flip on the storage, which sets no change time): the next open
    /// refuses the file, whatever its times say.
    #[cfg(unix)]
    #[test]
    fn a_model_changed_in_place_is_refused_by_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        write_snapshot(&path, &header(), sample()).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        // A count in the middle of the file: the layout stays valid.
        let at = snap.counts + 4;
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        let before = file.metadata().unwrap();
        std::os::unix::fs::FileExt::write_at(&file, &[0x55], at as u64).unwrap();
        // As a flip on the disk leaves it: the same times.
        let times = fs::FileTimes::new()
            .set_accessed(before.accessed().unwrap())
            .set_modified(before.modified().unwrap());
        file.set_times(times).unwrap();
        drop(file);
        let err = Snapshot::open(&path).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { reason, .. } if reason.contains("checksum")),
            "{err:?}"
        );
        // The reader opened before still has what it checked.
        assert_eq!(
            snap.lookup(Feature::Word("free")),
            sample()
                .into_iter()
                .find(|t| t.0 == word("free"))
                .map(|t| t.1)
        );
    }

    /// Writers remove the record earlier versions kept beside the model
    /// (`model.bin.checked`) and its temporaries, and nothing else.
    #[test]
    fn writers_remove_the_old_check_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let record = dir.path().join("model.bin.checked");
        fs::write(&record, b"BAYESCHK left by an earlier version").unwrap();
        write_snapshot(&path, &header(), sample()).unwrap();
        assert!(!record.exists());
        fs::write(&record, b"BAYESCHK").unwrap();
        let other = dir.path().join("other.bin.checked");
        fs::write(&other, b"not ours").unwrap();
        remove_check_record(&path);
        assert!(!record.exists());
        assert!(other.exists());
        // Nothing there: nothing to do.
        remove_check_record(&path);
        Snapshot::open(&path).unwrap();
    }

    /// A FIFO (or a directory) at the model's path is refused at once: opening
    /// a FIFO for reading would otherwise wait for a writer forever.
    #[cfg(unix)]
    #[test]
    fn refuses_what_is_not_a_regular_file_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("model.bin");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let opener = fifo.clone();
        std::thread::spawn(move || tx.send(Snapshot::open(&opener).map(|_| ())));
        let result = rx.recv_timeout(std::time::Duration::from_secs(30));
        if result.is_err() {
            // Unblock the stuck open so the thread can end, then fail.
            let _ = OpenOptions::new().write(true).open(&fifo);
            panic!("opening a FIFO blocked");
        }
        let err = result.unwrap().unwrap_err();
        assert!(
            err.to_string().contains("not a regular file (a FIFO)"),
            "{err}"
        );

        let sub = dir.path().join("dir.bin");
        fs::create_dir(&sub).unwrap();
        let err = Snapshot::open(&sub).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    /// A writer killed between creating its temporary file and renaming it
    /// leaves the file behind; the next write removes it, and only it.
    #[test]
    fn a_write_removes_temporaries_of_dead_writers_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let name = |pid: u32, n: &str| dir.path().join(format!(".model.bin.{pid}.{n}.tmp"));
        let stale = name(dead, "0");
        let kept = [
            name(std::process::id(), "999999"),
            // PID 1 always runs.
            name(1, "0"),
            name(dead, "x"),
            dir.path().join(format!(".other.bin.{dead}.0.tmp")),
            dir.path().join(format!("model.bin.{dead}.0.tmp")),
        ];
        for p in kept.iter().chain([&stale]) {
            fs::write(p, b"partial").unwrap();
        }
        write_snapshot(&path, &header(), sample()).unwrap();
        assert!(!stale.exists() || Path::new("/proc/self").metadata().is_err());
        for p in &kept {
            assert!(p.exists(), "{} removed", p.display());
        }
        Snapshot::open(&path).unwrap();
    }

    #[test]
    fn checksum_sees_single_word_changes() {
        let a = vec![0u8; 37];
        let mut b = a.clone();
        b[36] = 1;
        assert_ne!(checksum(&a), checksum(&b));
        assert_ne!(checksum(&a), checksum(&a[..36]));
        assert_ne!(checksum(&[]), checksum(&[0]));
        // One word changed in each lane position and in the tail.
        let long = vec![7u8; 8 * 4 * 3 + 8 * 3 + 5];
        for at in (0..long.len()).step_by(8) {
            let mut changed = long.clone();
            changed[at] ^= 0x80;
            assert_ne!(checksum(&long), checksum(&changed), "word at {at}");
        }
    }
}
