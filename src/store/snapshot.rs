//! The compiled model file: an immutable, memory-mapped snapshot of the
//! token counts plus a JSON header (whatever the caller stores there:
//! totals, parameters, calibration). Scoring processes read it and never
//! touch the database, so they never wait for its lock and many can run at
//! once while training goes on.
//!
//! [`write_snapshot`] writes a temporary file in the target's directory,
//! fsyncs it, renames it over the target and fsyncs the directory: a reader
//! sees the old file or the new one, never a mix. [`Snapshot::open`] maps
//! the file and checks only what is O(1) (magic, versions, that every length
//! and offset table fits, that the file length is exact), so a truncated
//! file is always refused; [`Snapshot::verify`] reads everything and checks
//! the checksum. Lookups go through an open-addressing hash table (one or
//! two probes, a few cache lines per token, where a binary search over a
//! large vocabulary takes a score of dependent cache misses). They
//! bounds-check every access and probe at most the whole table, so even a
//! corrupt file that passes `open` gives wrong answers at worst, never a
//! panic or a hang.
//!
//! # Layout
//! All integers little-endian. `n` is the number of tokens, `h` the header
//! length.
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `BAYESMDL` |
//! | 4 | `u32` snapshot format version ([`SNAPSHOT_VERSION`]) |
//! | 4 | `u32` tokenizer version ([`TOKENIZER_VERSION`]) |
//! | 8 | `u64` header length `h` |
//! | `h` | header, JSON (UTF-8) |
//! | 8 | `u64` token count `n` |
//! | 4 (n + 1) | `u32` offsets into the key blob: token `i` is `keys[off[i]..off[i+1]]`; `off[0] = 0`, `off[n]` = blob length |
//! | 8 n | counts of token `i`: `u32` ham, `u32` spam (never both zero) |
//! | `off[n]` | key blob: the tokens (UTF-8), sorted by bytes, no duplicates, concatenated |
//! | 8 | `u64` slot count `m`: the smallest power of two ≥ max(2n, 1) |
//! | 4 m | `u32` hash slots: 0 empty, else token index + 1; token `t` is at the first slot from `hash(t) mod m` on (linear probing), see [`token_hash`] |
//! | 8 | `u64` checksum of all the bytes before it (see [`Snapshot::verify`]) |
//!
//! The mapped file must not be changed in place while mapped (writers only
//! ever rename a new file over it, which leaves the mapped one intact).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::Mmap;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Error, Result, Store};
use crate::model::TokenCounts;
use crate::tokenize::TOKENIZER_VERSION;

/// Version of the snapshot file layout (independent of the count store's
/// format). Version 2 added the hash table.
pub const SNAPSHOT_VERSION: u32 = 2;

/// First bytes of every snapshot file.
pub const MAGIC: &[u8; 8] = b"BAYESMDL";

/// Magic, two versions, header length.
const PREAMBLE: usize = 8 + 4 + 4 + 8;
/// The smallest possible file: preamble, empty header, n = 0, one offset,
/// one hash slot, checksum.
const MIN_LEN: usize = PREAMBLE + 8 + 4 + 8 + 4 + 8;

/// The hash of a token for the snapshot's table: FNV-1a over its bytes with
/// a final mix. Part of the file format: it must never change without a new
/// [`SNAPSHOT_VERSION`].
pub fn token_hash(token: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in token {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^ (h >> 32)
}

/// Slots for `n` tokens: at most half full.
fn slot_count(n: usize) -> usize {
    n.saturating_mul(2).max(1).next_power_of_two()
}

/// Writes a snapshot of `tokens` with `header` (serialized as JSON) to
/// `path`, atomically replacing any file there.
///
/// Tokens may come in any order (they are sorted by bytes here); tokens with
/// zero counts are left out; a token given twice is an [`Error::Invalid`].
///
/// ```
/// # fn main() -> bayesmail::store::Result<()> {
/// use bayesmail::model::TokenCounts;
/// use bayesmail::store::{Snapshot, write_snapshot};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("model.bin");
/// let counts = TokenCounts { ham: 3, spam: 1 };
/// write_snapshot(&path, &"my header", [("hello", counts)])?;
///
/// let snapshot = Snapshot::open(&path)?;
/// assert_eq!(snapshot.lookup("hello"), Some(counts));
/// assert_eq!(snapshot.lookup("absent"), None);
/// assert_eq!(snapshot.header::<String>()?, "my header");
/// # Ok(())
/// # }
/// ```
pub fn write_snapshot<H, K, I>(path: &Path, header: &H, tokens: I) -> Result<()>
where
    H: Serialize + ?Sized,
    K: AsRef<str>,
    I: IntoIterator<Item = (K, TokenCounts)>,
{
    let mut tokens: Vec<(K, TokenCounts)> = tokens
        .into_iter()
        .filter(|(_, counts)| !counts.is_zero())
        .collect();
    if !tokens.is_sorted_by(|a, b| key(a) < key(b)) {
        tokens.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        if let Some(w) = tokens.windows(2).find(|w| key(&w[0]) == key(&w[1])) {
            let token = w[0].0.as_ref();
            return Err(Error::Invalid(format!(
                "token {token:?} given twice for a snapshot"
            )));
        }
    }
    let header = serde_json::to_vec(header)
        .map_err(|e| Error::Invalid(format!("snapshot header does not serialize: {e}")))?;
    let bytes = encode(&header, &tokens)?;
    write_atomically(path, &bytes)
}

/// Writes a snapshot of every token in `store` (see [`write_snapshot`]).
pub fn write_store_snapshot<H>(path: &Path, header: &H, store: &dyn Store) -> Result<()>
where
    H: Serialize + ?Sized,
{
    let mut tokens = Vec::with_capacity(usize::try_from(store.token_count()?).unwrap_or(0));
    store.for_each_token(&mut |token, counts| tokens.push((token.to_owned(), counts)))?;
    write_snapshot(path, header, tokens)
}

fn encode<K: AsRef<str>>(header: &[u8], tokens: &[(K, TokenCounts)]) -> Result<Vec<u8>> {
    let n = tokens.len();
    let keys_len: usize = tokens.iter().map(|(k, _)| k.as_ref().len()).sum();
    if u32::try_from(keys_len).is_err() {
        return Err(Error::Invalid(format!(
            "{keys_len} bytes of tokens do not fit the snapshot format (at most 4 GiB)"
        )));
    }
    let mut out =
        Vec::with_capacity(PREAMBLE + header.len() + 8 + 4 * (n + 1) + 8 * n + keys_len + 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    out.extend_from_slice(&TOKENIZER_VERSION.to_le_bytes());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(&(n as u64).to_le_bytes());
    let mut offset = 0u32;
    out.extend_from_slice(&offset.to_le_bytes());
    for (k, _) in tokens {
        // Cannot overflow: the sum of all lengths fits in u32 (checked above).
        offset += k.as_ref().len() as u32;
        out.extend_from_slice(&offset.to_le_bytes());
    }
    for (_, c) in tokens {
        out.extend_from_slice(&c.ham.to_le_bytes());
        out.extend_from_slice(&c.spam.to_le_bytes());
    }
    for (k, _) in tokens {
        out.extend_from_slice(k.as_ref().as_bytes());
    }
    let m = slot_count(n);
    let mut slots = vec![0u32; m];
    for (i, (k, _)) in tokens.iter().enumerate() {
        let mut slot = token_hash(k.as_ref().as_bytes()) as usize & (m - 1);
        while slots[slot] != 0 {
            slot = (slot + 1) & (m - 1);
        }
        // n < 2^32 - 1: the key blob alone has a byte per token and fits u32.
        slots[slot] = i as u32 + 1;
    }
    out.extend_from_slice(&(m as u64).to_le_bytes());
    for v in slots {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    Ok(out)
}

fn key<K: AsRef<str>>(t: &(K, TokenCounts)) -> &[u8] {
    t.0.as_ref().as_bytes()
}

/// Distinguishes temporary files of concurrent writers in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{} is not a file name", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io(&tmp))?;
        file.write_all(bytes).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        drop(file);
        fs::rename(&tmp, path).map_err(io(path))
    })();
    if written.is_err() {
        // Best effort: the error that matters is the one already in hand.
        let _ = fs::remove_file(&tmp);
        return written;
    }
    // Make the rename itself durable.
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// A 64-bit checksum of `bytes`. Each 8-byte word goes through a step that
/// is a bijection of the state, so any change confined to one word is always
/// detected; the length and a final mix are folded in at the end.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut step = |w: u64| h = (h ^ w).wrapping_mul(K).rotate_left(29);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        step(u64::from_le_bytes(chunk.try_into().expect("chunks of 8")));
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    step(u64::from_le_bytes(last));
    step(bytes.len() as u64);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// A memory-mapped compiled model: header and sorted token counts.
/// Cheap to open; lookups are binary searches that allocate nothing.
pub struct Snapshot {
    path: PathBuf,
    map: Mmap,
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
    /// Number of hash slots (a power of two, more than `n`).
    m: usize,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("path", &self.path)
            .field("tokens", &self.n)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// Maps the snapshot at `path` and checks its magic, versions and that
    /// its tables fit the file exactly. Does not read the token table.
    pub fn open(path: &Path) -> Result<Snapshot> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_owned(),
            reason,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < MIN_LEN as u64 {
            return Err(corrupt(format!("too short for a model file ({len} bytes)")));
        }
        // SAFETY: the mapping is only sound while nobody modifies the file.
        // Snapshots are never written in place: writers rename a complete new
        // file over the old one, which leaves this inode as it is.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let bytes = &map[..];
        if bytes.len() as u64 != len {
            return Err(corrupt("changed size while being opened".into()));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("not a bayesmail model file (bad magic)".into()));
        }
        let version = |at: usize, expected: u32, what: &'static str| {
            let found = read_u32(bytes, at).unwrap_or(0);
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
        version(8, SNAPSHOT_VERSION, super::MODEL_FILE_FORMAT)?;
        version(12, TOKENIZER_VERSION, "tokenizer version")?;

        // Everything but the trailing checksum.
        let body = bytes.len() - 8;
        let truncated = || corrupt("truncated, or its lengths are damaged".into());
        let header_len = read_u64(bytes, 16).ok_or_else(truncated)?;
        let header_end = usize::try_from(header_len)
            .ok()
            .and_then(|h| PREAMBLE.checked_add(h))
            .filter(|&end| end <= body)
            .ok_or_else(truncated)?;
        let n = read_u64(bytes, header_end).ok_or_else(truncated)?;
        let n = usize::try_from(n).map_err(|_| truncated())?;
        let offsets = header_end + 8;
        let layout = (|| {
            let counts = offsets.checked_add(n.checked_add(1)?.checked_mul(4)?)?;
            let keys = counts.checked_add(n.checked_mul(8)?)?;
            (keys <= body).then_some((counts, keys))
        })();
        let (counts, keys_start) = layout.ok_or_else(truncated)?;
        let first = read_u32(bytes, offsets).ok_or_else(truncated)?;
        let keys_len = read_u32(bytes, offsets + 4 * n).ok_or_else(truncated)? as usize;
        let keys_end = keys_start.checked_add(keys_len).ok_or_else(truncated)?;
        let m = read_u64(bytes, keys_end).ok_or_else(truncated)?;
        let m = usize::try_from(m).map_err(|_| truncated())?;
        let slots = keys_end + 8;
        if first != 0
            || m != slot_count(n)
            || m.checked_mul(4).and_then(|t| slots.checked_add(t)) != Some(body)
        {
            return Err(truncated());
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
            map,
        })
    }

    /// The file this snapshot was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header, deserialized from its JSON.
    pub fn header<H: DeserializeOwned>(&self) -> Result<H> {
        serde_json::from_slice(&self.map[self.header.clone()])
            .map_err(|e| self.corrupt(format!("bad header: {e}")))
    }

    /// The counts of `token`, if it is in the snapshot: a hash-table probe,
    /// no allocation.
    pub fn lookup(&self, token: &str) -> Option<TokenCounts> {
        self.index_of(token.as_bytes())
            .and_then(|i| self.counts_at(i))
    }

    /// The index of `wanted` through the hash table. Probes at most every
    /// slot once, so a damaged table cannot loop.
    fn index_of(&self, wanted: &[u8]) -> Option<usize> {
        let mask = self.m - 1;
        let mut slot = token_hash(wanted) as usize & mask;
        for _ in 0..self.m {
            let v = read_u32(&self.map, self.slots + 4 * slot)? as usize;
            if v == 0 {
                return None;
            }
            if v <= self.n && self.key(v - 1)? == wanted {
                return Some(v - 1);
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True if the snapshot holds no tokens.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Every token and its counts, in byte order of the token. Entries that
    /// are damaged (see [`Snapshot::verify`]) are skipped.
    pub fn iter(&self) -> impl Iterator<Item = (&str, TokenCounts)> {
        (0..self.n).filter_map(|i| {
            let key = std::str::from_utf8(self.key(i)?).ok()?;
            Some((key, self.counts_at(i)?))
        })
    }

    /// Reads the whole file and checks the checksum, that the tokens are
    /// UTF-8 and strictly sorted, that no counts are zero and that the
    /// header is JSON. Costs time proportional to the file size, which
    /// [`Snapshot::open`] avoids.
    pub fn verify(&self) -> Result<()> {
        let bytes = &self.map[..];
        let (body, stored) = bytes.split_at(bytes.len() - 8);
        let stored = u64::from_le_bytes(stored.try_into().expect("8 bytes"));
        if checksum(body) != stored {
            return Err(self.corrupt("checksum mismatch".into()));
        }
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
        Ok(())
    }

    /// The bytes of token `i`, or `None` if its offsets are damaged.
    fn key(&self, i: usize) -> Option<&[u8]> {
        let bytes = &self.map[..];
        let start = read_u32(bytes, self.offsets + 4 * i)? as usize;
        let end = read_u32(bytes, self.offsets + 4 * (i + 1))? as usize;
        bytes
            .get(self.keys.start.checked_add(start)?..self.keys.start.checked_add(end)?)
            .filter(|_| end <= self.keys.len())
    }

    fn counts_at(&self, i: usize) -> Option<TokenCounts> {
        let at = self.counts + 8 * i;
        Some(TokenCounts {
            ham: read_u32(&self.map, at)?,
            spam: read_u32(&self.map, at + 4)?,
        })
    }

    fn corrupt(&self, reason: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason,
        }
    }
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

    use super::*;
    use crate::store::MemoryStore;

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

    fn sample() -> Vec<(String, TokenCounts)> {
        let words = [
            "free",
            "a",
            "ab",
            "abc",
            "b",
            "SUBJ:free",
            "URL:example.com",
            "é",
            "日本",
            "zz",
        ];
        words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                (
                    w.to_string(),
                    TokenCounts {
                        ham: i as u32,
                        spam: 7 * i as u32 + 1,
                    },
                )
            })
            .collect()
    }

    fn sorted_sample() -> Vec<(String, TokenCounts)> {
        let mut s = sample();
        s.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        s
    }

    /// The bytes `write_snapshot` writes for the sample (built in memory:
    /// the property tests use them hundreds of times).
    fn sample_bytes() -> Vec<u8> {
        static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        BYTES
            .get_or_init(|| {
                encode(&serde_json::to_vec(&header()).unwrap(), &sorted_sample()).unwrap()
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
            assert_eq!(snap.lookup(&token), Some(counts), "{token}");
        }
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
        ] {
            assert_eq!(snap.lookup(absent), None, "{absent}");
        }
        let listed: Vec<(String, TokenCounts)> =
            snap.iter().map(|(t, c)| (t.to_owned(), c)).collect();
        assert_eq!(listed, sorted_sample());
        assert!(
            snap.header::<Vec<u32>>().is_err(),
            "a header of another shape is an error"
        );
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
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
        write_snapshot(&path, &(), [("gone", zero)]).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        snap.verify().unwrap();
        assert!(snap.is_empty());
        assert_eq!(snap.lookup("gone"), None);
        assert_eq!(snap.lookup(""), None);
        assert_eq!(snap.iter().count(), 0);
        snap.header::<()>().unwrap();
    }

    #[test]
    fn refuses_duplicate_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let c = TokenCounts { ham: 1, spam: 0 };
        let err = write_snapshot(&path, &(), [("b", c), ("a", c), ("b", c)]).unwrap_err();
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
            delta
                .tokens
                .insert(token, [i64::from(c.ham), i64::from(c.spam)]);
        }
        store.apply(&delta).unwrap();
        write_store_snapshot(&path, &header(), &store).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        let listed: Vec<(String, TokenCounts)> =
            snap.iter().map(|(t, c)| (t.to_owned(), c)).collect();
        assert_eq!(listed, sorted_sample());
    }

    #[test]
    fn replacing_leaves_open_readers_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let old = TokenCounts { ham: 1, spam: 2 };
        let new = TokenCounts { ham: 3, spam: 4 };
        write_snapshot(&path, "old", [("t", old)]).unwrap();
        let reader = Snapshot::open(&path).unwrap();
        write_snapshot(&path, "new", [("t", new), ("u", new)]).unwrap();
        assert_eq!(reader.lookup("t"), Some(old));
        assert_eq!(reader.header::<String>().unwrap(), "old");
        reader.verify().unwrap();
        let fresh = Snapshot::open(&path).unwrap();
        assert_eq!((fresh.lookup("t"), fresh.len()), (Some(new), 2));
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
            let _ = snap.lookup(&token);
        }
        let _ = snap.lookup("");
        let _ = snap.lookup("not there");
        let _ = snap.iter().count();
        let _ = snap.header::<Header>();
        let _ = snap.len();
    }

    proptest! {
        /// One damaged byte: refused by `open`, or caught by `verify`, and
        /// never a panic in between.
        #[test]
        fn a_flipped_byte_is_always_detected(at in any::<prop::sample::Index>(), xor in 1u8..=255) {
            let mut bytes = sample_bytes();
            let at = at.index(bytes.len());
            bytes[at] ^= xor;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("model.bin");
            fs::write(&path, &bytes).unwrap();
            if let Ok(snap) = Snapshot::open(&path) {
                exercise(&snap);
                prop_assert!(snap.verify().is_err(), "byte {} ^ {:#x} not detected", at, xor);
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

    #[test]
    fn checksum_sees_single_word_changes() {
        let a = vec![0u8; 37];
        let mut b = a.clone();
        b[36] = 1;
        assert_ne!(checksum(&a), checksum(&b));
        assert_ne!(checksum(&a), checksum(&a[..36]));
        assert_ne!(checksum(&[]), checksum(&[0]));
    }
}
