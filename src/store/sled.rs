//! The on-disk [`Store`]: a sled database, the source of truth for the
//! counts. One process at a time may open it (sled takes an exclusive file
//! lock); [`SledStore::open`] waits a bounded time for it.
//!
//! # Layout
//! | tree | key | value |
//! |---|---|---|
//! | `shards` | shard number (`u16` BE) | the shard's word tokens and counts, packed (see [`super::packed`]); an empty shard is not stored |
//! | `shards` | `G`, block number (`u16` BE) | the byte view's counts of [`packed::GRAM_BLOCK`] buckets from `block · GRAM_BLOCK` on, by bucket (no names); from 2^18 on, the weight counters of the online discriminative view, bucket 2^18 + b holding the weight of `b`; a block of zeros is not stored |
//! | `messages` | registry shard number (`u16` BE) | the learned messages of the shard: records of the first 16 bytes of the digest and one byte (0 ham, 1 spam), sorted (see [`super::packed`]); an empty shard is not stored |
//! | `meta` | `format_version`, `tokenizer_version` | `u32` LE (the tokenizer version of the last write: see [`SledStore::open`]) |
//! | `meta` | `totals` | see below |
//! | `meta` | `sizes` | tokens in `shards`, messages in `messages`: 2 × `u64` LE |
//! | `meta` | `store_id` | 16 random bytes chosen when the database is created |
//! | `meta` | `generation` | `u64` LE: how many deltas have been applied |
//!
//! `totals` is `u32` LE [`METADATA_LEN`], then messages per class (2 ×
//! `u64` LE, ham first), then for ham and then spam, per metadata feature:
//! `n` `i64` LE, `sum` `i128` LE, `sum_sq` `i128` LE.
//!
//! The sizes are kept in `meta` because sled counts a tree by walking it.
//!
//! The id and the generation make up [`StoreIdentity`]: a model compiled
//! from this store records it, so a writer can tell a store that was
//! deleted, replaced or rolled back from the one the model was built from
//! (the id differs, or the generation went back). A database made before
//! they existed gets an id when next opened and starts at generation 0.
//!
//! # Size of a delta
//! [`Store::apply`] runs one sled transaction over the three trees, which
//! holds every write of the delta in memory until it commits: at most every
//! shard once, so a delta of any size costs at most about the store's own
//! size. Reading a shard decodes it whole; a delta touching a token of a
//! shard rewrites that shard.
//!
//! # Format 1
//! Format 1 kept one key per token in a `tokens` tree (value: ham `u32`
//! LE, spam `u32` LE), a byte-view bucket under its name (U+0001 and the
//! bucket in five lower-case hex digits). A writer opening such a store
//! converts it: it writes the shards, then records format 3, then drops
//! the `tokens` tree, so a conversion killed at any point is redone or
//! finished by the next open.

use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use ::sled::transaction::{ConflictableTransactionError, TransactionError};
use ::sled::{Db, Transactional, Tree};

use super::packed::{self, RegistryKey, registry_key, registry_shard_of, shard_key, shard_of};
use super::{Error, FORMAT_VERSION, Result, Store, apply_token, apply_totals, check_buckets};
use super::{feature_in, slot_of};
use crate::fsutil;
use crate::model::{Delta, GaussStats, Label, TokenCounts, Totals};
use crate::vocab::Digest;
use crate::vocab::METADATA_LEN;
use crate::vocab::{BUCKET_BITS, Feature};
use crate::vocab::{TOKENIZER_VERSION, readable_tokenizer};

const FORMAT_KEY: &[u8] = b"format_version";
const TOKENIZER_KEY: &[u8] = b"tokenizer_version";
const TOTALS_KEY: &[u8] = b"totals";
const SIZES_KEY: &[u8] = b"sizes";
const STORE_ID_KEY: &[u8] = b"store_id";
const GENERATION_KEY: &[u8] = b"generation";

/// sled's page cache. The store is read and written a shard at a time and
/// snapshots are what scoring reads, so a small cache costs nothing and
/// keeps a training run's memory low (sled's default is a gigabyte).
const CACHE_BYTES: u64 = 2 << 20;

/// How long to sleep between attempts to take the database lock.
const LOCK_RETRY: Duration = Duration::from_millis(50);

/// Which store, at which change: see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoreIdentity {
    /// Random id given to the store when it was created (32 hex digits).
    pub id: String,
    /// Number of deltas applied to the store since it was created; never
    /// goes back in a store that keeps its history.
    pub generation: u64,
}

/// The counts in a sled database. See the [module docs](self) for the layout.
///
/// sled's handles are dropped by hand ([`Drop`]), so that closing the
/// store (sled flushes and waits for its threads) is watched as every
/// other call is ([`super::stall`]).
pub struct SledStore {
    path: PathBuf,
    db: ManuallyDrop<Db>,
    /// The day changes are stamped with, if not today (tests).
    today: Option<u32>,
    shards: ManuallyDrop<Tree>,
    registry: ManuallyDrop<Tree>,
    meta: ManuallyDrop<Tree>,
}

impl Drop for SledStore {
    fn drop(&mut self) {
        let _watch = self.watched();
        // SAFETY: each handle is dropped once, here, and never used again:
        // the store is being dropped.
        unsafe {
            ManuallyDrop::drop(&mut self.shards);
            ManuallyDrop::drop(&mut self.registry);
            ManuallyDrop::drop(&mut self.meta);
            ManuallyDrop::drop(&mut self.db);
        }
    }
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SledStore {
    /// Whether a sled store has been made at `path` (its data file is
    /// there): what sled keeps inside its directory is this module's
    /// business alone.
    pub fn exists(path: &Path) -> bool {
        path.join("db").is_file()
    }

    /// Opens the database at `path` (a directory), creating it if missing.
    ///
    /// If another process holds the database, retries until `wait` has
    /// passed and then fails with [`Error::Locked`]. A database written with
    /// another [`FORMAT_VERSION`], or a tokenizer version this one cannot
    /// read ([`readable_tokenizer`]), is refused with [`Error::Version`]; a
    /// readable older tokenizer version is replaced by [`TOKENIZER_VERSION`]
    /// with the next delta applied.
    pub fn open(path: &Path, wait: Duration) -> Result<SledStore> {
        check_files(path)?;
        check_room(path)?;
        let start = Instant::now();
        let watched = || super::stall::watch(call_named(path));
        let db = loop {
            let opened = {
                let _watch = watched();
                remove_interrupted_snapshots(path);
                ::sled::Config::new()
                    .path(path)
                    .cache_capacity(CACHE_BYTES)
                    .open()
            };
            match opened {
                Ok(db) => break db,
                Err(e) if is_lock_error(&e) => {
                    let waited = start.elapsed();
                    if waited >= wait {
                        return Err(Error::Locked {
                            path: path.to_owned(),
                            waited,
                        });
                    }
                    thread::sleep(LOCK_RETRY.min(wait - waited));
                }
                Err(e) => return Err(sled_error(path, e)),
            }
        };
        let _watch = watched();
        // Dropped, on an error below, while watched.
        let db = db;
        let err = |e| sled_error(path, e);
        // Plain handles until the store owns them: one opened before an
        // error is closed, not leaked with sled's file lock.
        let (shards, registry, meta) = (
            db.open_tree("shards").map_err(err)?,
            db.open_tree("messages").map_err(err)?,
            db.open_tree("meta").map_err(err)?,
        );
        let store = SledStore {
            path: path.to_owned(),
            shards: ManuallyDrop::new(shards),
            today: None,
            registry: ManuallyDrop::new(registry),
            meta: ManuallyDrop::new(meta),
            db: ManuallyDrop::new(db),
        };
        store.check_or_init()?;
        Ok(store)
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes the database occupies on disk.
    #[cfg(test)]
    pub(crate) fn size_on_disk(&self) -> Result<u64> {
        self.db.size_on_disk().map_err(|e| self.sled_error(e))
    }

    fn check_or_init(&self) -> Result<()> {
        let format = self.meta.get(FORMAT_KEY).map_err(|e| self.sled_error(e))?;
        let Some(format) = format else {
            return self.init();
        };
        if format[..] == 1u32.to_le_bytes() {
            self.upgrade_from_format_1()?;
        } else {
            self.check_version(&format, FORMAT_VERSION, "format version")?;
            // A conversion killed after recording format 3 left this.
            self.drop_format_1_trees()?;
        }
        let tokenizer = self
            .meta
            .get(TOKENIZER_KEY)
            .map_err(|e| self.sled_error(e))?;
        let tokenizer = tokenizer.ok_or_else(|| self.corrupt("no tokenizer version"))?;
        let tokenizer = self.decode_version(&tokenizer, "tokenizer version")?;
        if !readable_tokenizer(tokenizer) {
            return Err(self.version_error(tokenizer, TOKENIZER_VERSION, "tokenizer version"));
        }
        // Both decode or report what is wrong (including another METADATA_LEN).
        self.totals()?;
        self.sizes()?;
        if self
            .meta
            .get(STORE_ID_KEY)
            .map_err(|e| self.sled_error(e))?
            .is_none()
        {
            // Made before stores had an id: give it one now.
            let err = |e| self.sled_error(e);
            self.meta
                .insert(STORE_ID_KEY, &new_store_id()[..])
                .map_err(err)?;
            self.db.flush().map_err(err)?;
        }
        self.identity()?;
        Ok(())
    }

    /// Converts a format 1 store (one key per token) to shards: see the
    /// [module docs](self#format-1).
    fn upgrade_from_format_1(&self) -> Result<()> {
        let err = |e| self.sled_error(e);
        let tokens = self.db.open_tree("tokens").map_err(err)?;
        let mut shards: Vec<Vec<packed::Word>> = vec![Vec::new(); packed::SHARDS];
        let today = self.today.unwrap_or_else(today);
        let mut blocks: std::collections::BTreeMap<u32, Vec<TokenCounts>> = Default::default();
        for entry in tokens.iter() {
            let (key, value) = entry.map_err(err)?;
            let token = String::from_utf8(key.to_vec())
                .map_err(|_| self.corrupt("a token is not UTF-8"))?;
            let counts = decode_counts(&value).ok_or_else(|| self.corrupt(bad_counts(&token)))?;
            if counts.is_zero() {
                continue;
            }
            match super::keys::bucket_of(token.as_bytes()) {
                Some(bucket) => {
                    let block = bucket as usize / packed::GRAM_BLOCK;
                    let block = blocks
                        .entry(block as u32)
                        .or_insert_with(|| vec![TokenCounts::default(); packed::GRAM_BLOCK]);
                    block[bucket as usize % packed::GRAM_BLOCK] = counts;
                }
                None => shards[usize::from(shard_of(&token))].push((token, counts, today)),
            }
        }
        // A conversion killed before recording format 3 may have left
        // shards: they are written again whole.
        self.shards.clear().map_err(err)?;
        let mut batch = ::sled::Batch::default();
        for (shard, entries) in shards.iter().enumerate() {
            // sled iterates keys in byte order: each shard is sorted.
            if !entries.is_empty() {
                batch.insert(&shard_key(shard as u16)[..], packed::encode(entries));
            }
        }
        for (block, counts) in &blocks {
            let key = packed::gram_block_key(block * packed::GRAM_BLOCK as u32);
            batch.insert(&key[..], packed::encode_grams(counts));
        }
        self.shards.apply_batch(batch).map_err(err)?;
        let old_registry = self.db.open_tree("registry").map_err(err)?;
        let mut registry: Vec<Vec<(RegistryKey, u8)>> = vec![Vec::new(); packed::REGISTRY_SHARDS];
        for entry in old_registry.iter() {
            let (key, value) = entry.map_err(err)?;
            let digest: Digest = key[..]
                .try_into()
                .map_err(|_| self.corrupt("bad registry entry"))?;
            let label = decode_label(&value).ok_or_else(|| self.corrupt("bad registry entry"))?;
            registry[usize::from(registry_shard_of(&digest))]
                .push((registry_key(&digest), label_byte(label)));
        }
        self.registry.clear().map_err(err)?;
        let mut batch = ::sled::Batch::default();
        for (shard, entries) in registry.iter().enumerate() {
            if !entries.is_empty() {
                batch.insert(
                    &shard_key(shard as u16)[..],
                    packed::encode_registry(entries),
                );
            }
        }
        self.registry.apply_batch(batch).map_err(err)?;
        self.db.flush().map_err(err)?;
        self.meta
            .insert(FORMAT_KEY, &FORMAT_VERSION.to_le_bytes()[..])
            .map_err(err)?;
        self.db.flush().map_err(err)?;
        self.drop_format_1_trees()
    }

    /// Drops the `tokens` and `registry` trees of format 1 if they are
    /// still there.
    fn drop_format_1_trees(&self) -> Result<()> {
        let err = |e| self.sled_error(e);
        let names = self.db.tree_names();
        for old in ["tokens", "registry"] {
            if names.iter().any(|n| &n[..] == old.as_bytes()) {
                self.db.drop_tree(old).map_err(err)?;
                self.db.flush().map_err(err)?;
            }
        }
        Ok(())
    }

    /// The decoded counts of one gram block (`None` if it is not stored).
    fn gram_block(&self, block: u32) -> Result<Option<Vec<TokenCounts>>> {
        let key = packed::gram_block_key(block * packed::GRAM_BLOCK as u32);
        match self.shards.get(key).map_err(|e| self.sled_error(e))? {
            None => Ok(None),
            Some(v) => packed::decode_grams(&v)
                .map(Some)
                .ok_or_else(|| self.corrupt(format!("bad gram block {block}"))),
        }
    }

    /// The decoded entries of one shard (empty if it is not stored).
    fn shard(&self, shard: u16) -> Result<Vec<packed::Word>> {
        match self
            .shards
            .get(shard_key(shard))
            .map_err(|e| self.sled_error(e))?
        {
            None => Ok(Vec::new()),
            Some(v) => packed::decode(&v).ok_or_else(|| self.corrupt(bad_shard(shard))),
        }
    }

    /// The store's id and generation.
    pub fn identity(&self) -> Result<StoreIdentity> {
        let _watch = self.watched();
        let get = |key| self.meta.get(key).map_err(|e| self.sled_error(e));
        let id = get(STORE_ID_KEY)?
            .filter(|id| id.len() == 16)
            .ok_or_else(|| self.corrupt("bad store id record"))?;
        let generation = match get(GENERATION_KEY)? {
            None => 0,
            Some(g) => decode_u64(&g).ok_or_else(|| self.corrupt("bad generation record"))?,
        };
        Ok(StoreIdentity {
            id: id.iter().map(|b| format!("{b:02x}")).collect(),
            generation,
        })
    }

    fn check_version(&self, bytes: &[u8], expected: u32, what: &'static str) -> Result<()> {
        let found = self.decode_version(bytes, what)?;
        if found != expected {
            return Err(self.version_error(found, expected, what));
        }
        Ok(())
    }

    fn decode_version(&self, bytes: &[u8], what: &'static str) -> Result<u32> {
        <[u8; 4]>::try_from(bytes)
            .map(u32::from_le_bytes)
            .map_err(|_| self.corrupt(format!("bad {what} record")))
    }

    fn version_error(&self, found: u32, expected: u32, what: &'static str) -> Error {
        Error::Version {
            path: self.path.clone(),
            found,
            expected,
            what,
        }
    }

    /// The tokenizer version the counts were last written under: this
    /// version's once anything was written, an older readable one
    /// ([`crate::vocab::OLDEST_READABLE_TOKENIZER`]) until then.
    pub fn tokenizer_version(&self) -> Result<u32> {
        let _watch = self.watched();
        let bytes = self
            .meta
            .get(TOKENIZER_KEY)
            .map_err(|e| self.sled_error(e))?
            .ok_or_else(|| self.corrupt("no tokenizer version"))?;
        self.decode_version(&bytes, "tokenizer version")
    }

    /// Records the versions in a new database.
    fn init(&self) -> Result<()> {
        let err = |e| self.sled_error(e);
        let mut has_data = false;
        for name in self.db.tree_names() {
            has_data |= !self.db.open_tree(name).map_err(err)?.is_empty();
        }
        if has_data {
            return Err(
                self.corrupt("it has data but no format version (not a bayesmail database?)")
            );
        }
        let mut batch = ::sled::Batch::default();
        batch.insert(TOKENIZER_KEY, &TOKENIZER_VERSION.to_le_bytes()[..]);
        batch.insert(TOTALS_KEY, encode_totals(&Totals::default()));
        batch.insert(SIZES_KEY, &encode_sizes([0, 0])[..]);
        batch.insert(STORE_ID_KEY, &new_store_id()[..]);
        batch.insert(GENERATION_KEY, &0u64.to_le_bytes()[..]);
        // Written last: its presence means the rest is there.
        batch.insert(FORMAT_KEY, &FORMAT_VERSION.to_le_bytes()[..]);
        self.meta.apply_batch(batch).map_err(err)?;
        self.db.flush().map_err(err)?;
        Ok(())
    }

    fn sizes(&self) -> Result<[u64; 2]> {
        let bytes = self.meta.get(SIZES_KEY).map_err(|e| self.sled_error(e))?;
        bytes
            .and_then(|b| decode_sizes(&b))
            .ok_or_else(|| self.corrupt("bad sizes record"))
    }

    fn sled_error(&self, e: ::sled::Error) -> Error {
        sled_error(&self.path, e)
    }

    fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }
}

impl Store for SledStore {
    fn totals(&self) -> Result<Totals> {
        let _watch = self.watched();
        let bytes = self.meta.get(TOTALS_KEY).map_err(|e| self.sled_error(e))?;
        let bytes = bytes.ok_or_else(|| self.corrupt("no totals record"))?;
        decode_totals(&bytes).map_err(|e| e.into_error(&self.path))
    }

    fn token(&self, feature: Feature<'_>) -> Result<TokenCounts> {
        let _watch = self.watched();
        let token = match feature {
            Feature::Word(word) => word,
            Feature::Gram(_) | Feature::Weight(_) => {
                let Some(slot) = slot_of(feature) else {
                    return Ok(TokenCounts::default());
                };
                let block = self.gram_block(slot / packed::GRAM_BLOCK as u32)?;
                return Ok(block
                    .map(|b| b[slot as usize % packed::GRAM_BLOCK])
                    .unwrap_or_default());
            }
        };
        let shard = shard_of(token);
        match self
            .shards
            .get(shard_key(shard))
            .map_err(|e| self.sled_error(e))?
        {
            None => Ok(TokenCounts::default()),
            Some(v) => packed::find(&v, token).ok_or_else(|| self.corrupt(bad_shard(shard))),
        }
    }

    fn label_of(&self, digest: &Digest) -> Result<Option<Label>> {
        let _watch = self.watched();
        let shard = registry_shard_of(digest);
        let Some(v) = self
            .registry
            .get(shard_key(shard))
            .map_err(|e| self.sled_error(e))?
        else {
            return Ok(None);
        };
        let entries =
            packed::decode_registry(&v).ok_or_else(|| self.corrupt(bad_registry(shard)))?;
        match entries.binary_search_by(|(d, _)| d.cmp(&registry_key(digest))) {
            Err(_) => Ok(None),
            Ok(i) => decode_label(&[entries[i].1])
                .map(Some)
                .ok_or_else(|| self.corrupt("bad registry entry")),
        }
    }

    fn token_count(&self) -> Result<u64> {
        let _watch = self.watched();
        Ok(self.sizes()?[0])
    }

    fn registry_len(&self) -> Result<u64> {
        let _watch = self.watched();
        Ok(self.sizes()?[1])
    }

    fn for_each_token(&self, f: &mut dyn FnMut(Feature<'_>, TokenCounts)) -> Result<()> {
        let _watch = self.watched();
        // Shards hold words by hash: the promised byte order needs them all.
        let mut words = Vec::new();
        for shard in 0..packed::SHARDS {
            words.extend(self.shard(shard as u16)?);
        }
        words.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (word, counts, _) in &words {
            f(Feature::Word(word), *counts);
        }
        drop(words);
        let blocks = (2usize << BUCKET_BITS).div_ceil(packed::GRAM_BLOCK);
        for block in 0..blocks as u32 {
            if let Some(counts) = self.gram_block(block)? {
                let first = block * packed::GRAM_BLOCK as u32;
                for (slot, c) in (first..).zip(counts).filter(|(_, c)| !c.is_zero()) {
                    f(feature_in(slot), c);
                }
            }
        }
        Ok(())
    }

    fn weights(&self) -> Result<Vec<(u32, TokenCounts)>> {
        let _watch = self.watched();
        // The gram blocks past the byte view's.
        let first = (1usize << BUCKET_BITS) / packed::GRAM_BLOCK;
        let blocks = (2usize << BUCKET_BITS).div_ceil(packed::GRAM_BLOCK);
        let mut weights = Vec::new();
        for block in first as u32..blocks as u32 {
            if let Some(counts) = self.gram_block(block)? {
                let start = block * packed::GRAM_BLOCK as u32;
                for (slot, c) in (start..).zip(counts).filter(|(_, c)| !c.is_zero()) {
                    if let Feature::Weight(bucket) = feature_in(slot) {
                        weights.push((bucket, c));
                    }
                }
            }
        }
        Ok(weights)
    }

    fn apply(&mut self, delta: &Delta) -> Result<u64> {
        self.apply_at(delta, None)
    }

    fn flush(&mut self) -> Result<()> {
        let _watch = self.watched();
        self.db.flush().map_err(|e| self.sled_error(e))?;
        Ok(())
    }
}

impl SledStore {
    /// Watches a call into this store until the guard is dropped
    /// ([`super::stall`]).
    fn watched(&self) -> super::stall::Watch {
        super::stall::watch(call_named(&self.path))
    }

    /// Every learned message (its registry key) with its label, in byte
    /// order of the key.
    pub(crate) fn for_each_message(&self, f: &mut dyn FnMut(RegistryKey, Label)) -> Result<()> {
        let _watch = self.watched();
        for entry in self.registry.iter() {
            let (key, value) = entry.map_err(|e| self.sled_error(e))?;
            let shard = key
                .as_ref()
                .try_into()
                .map(u16::from_be_bytes)
                .map_err(|_| self.corrupt("bad registry shard key"))?;
            let entries =
                packed::decode_registry(&value).ok_or_else(|| self.corrupt(bad_registry(shard)))?;
            for (digest, label) in entries {
                let label =
                    decode_label(&[label]).ok_or_else(|| self.corrupt("bad registry entry"))?;
                f(digest, label);
            }
        }
        Ok(())
    }

    /// Stamps changes with `day` (days since 1970) instead of today: for
    /// tests of what ages.
    #[cfg(test)]
    pub(crate) fn set_today(&mut self, day: u32) {
        self.today = Some(day);
    }

    /// The delta that removes every word token seen at most `max_count`
    /// times (ham and spam together) whose counts last changed before day
    /// `before` (days since 1970): rare and old. The byte view's buckets
    /// are a fixed table and are never pruned.
    pub fn rare_and_old(&self, max_count: u64, before: u32) -> Result<Delta> {
        let _watch = self.watched();
        let mut delta = Delta::default();
        for shard in 0..packed::SHARDS {
            for (token, c, day) in self.shard(shard as u16)? {
                if u64::from(c.ham) + u64::from(c.spam) <= max_count && day < before {
                    delta
                        .words
                        .insert(token, [-i64::from(c.ham), -i64::from(c.spam)]);
                }
            }
        }
        Ok(delta)
    }

    /// [`Store::apply`], leaving the store at `generation` if given (a
    /// journal folded in: the store takes the generation its entries
    /// reached) instead of one past the current one.
    pub(crate) fn apply_at(&mut self, delta: &Delta, target: Option<u64>) -> Result<u64> {
        let today = self.today.unwrap_or_else(today);
        let path = &self.path;
        let abort = |e: Error| ConflictableTransactionError::Abort(e);
        let corrupt = |reason: String| {
            abort(Error::Corrupt {
                path: path.clone(),
                reason,
            })
        };
        let bad_sizes = || corrupt("bad sizes record".into());
        check_buckets(delta)?;
        // The changes of each shard, sorted by word (a shard is rewritten
        // once per delta).
        let mut by_shard: std::collections::BTreeMap<u16, Vec<(&str, [i64; 2])>> =
            std::collections::BTreeMap::new();
        for (word, &d) in delta.words.iter().filter(|(_, d)| **d != [0, 0]) {
            by_shard
                .entry(shard_of(word))
                .or_default()
                .push((word.as_str(), d));
        }
        // Gram block → (bucket, change).
        let mut by_block: std::collections::BTreeMap<u32, Vec<(u32, [i64; 2])>> =
            std::collections::BTreeMap::new();
        let grams = delta.grams.iter().map(|(&b, d)| (Feature::Gram(b), d));
        let weights = delta.weights.iter().map(|(&b, d)| (Feature::Weight(b), d));
        for (feature, &d) in grams.chain(weights).filter(|(_, d)| **d != [0, 0]) {
            // Checked above: every one is a bucket.
            let slot = slot_of(feature).ok_or_else(|| Error::Invalid(feature.to_string()))?;
            by_block
                .entry(slot / packed::GRAM_BLOCK as u32)
                .or_default()
                .push((slot, d));
        }
        let mut registry_by_shard: std::collections::BTreeMap<u16, Vec<(&Digest, &Option<Label>)>> =
            std::collections::BTreeMap::new();
        for (digest, label) in &delta.registry {
            registry_by_shard
                .entry(registry_shard_of(digest))
                .or_default()
                .push((digest, label));
        }
        for changes in by_shard.values_mut() {
            changes.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        // Counted again by each try of the transaction.
        let inexact = std::cell::Cell::new(0);
        let _watch = self.watched();
        let trees: (&Tree, &Tree, &Tree) = (&self.shards, &self.registry, &self.meta);
        let result = trees.transaction(|(t, r, m)| {
            // Debug builds can be told to hang here, as sled's deadlock
            // does, so the tests can show what becomes of such a write.
            #[cfg(debug_assertions)]
            if std::env::var_os("BAYESMAIL_TEST_HANG").is_some_and(|v| v == "store-write") {
                let _ = std::fs::write(path.with_extension("test-hang-reached"), b"");
                loop {
                    thread::sleep(Duration::from_secs(3600));
                }
            }
            let mut inexact_here = 0;
            let totals = m
                .get(TOTALS_KEY)?
                .ok_or_else(|| corrupt("no totals record".into()))?;
            let totals = decode_totals(&totals).map_err(|e| abort(e.into_error(path)))?;
            let totals = apply_totals(&totals, delta, &mut inexact_here).map_err(abort)?;
            let sizes = m.get(SIZES_KEY)?;
            let [mut n_tokens, mut n_registry] =
                sizes.and_then(|b| decode_sizes(&b)).ok_or_else(bad_sizes)?;

            for (shard, changes) in &by_shard {
                let key = shard_key(*shard);
                let mut entries = match t.get(key)? {
                    Some(v) => packed::decode(&v).ok_or_else(|| corrupt(bad_shard(*shard)))?,
                    None => Vec::new(),
                };
                let before = entries.len() as u64;
                for &(token, d) in changes {
                    let word = Feature::Word(token);
                    match entries.binary_search_by(|(e, _, _)| e.as_str().cmp(token)) {
                        Ok(i) => {
                            let new = apply_token(word, entries[i].1, d, &mut inexact_here)
                                .map_err(abort)?;
                            entries[i].1 = new;
                            entries[i].2 = today;
                        }
                        Err(i) => {
                            let new =
                                apply_token(word, TokenCounts::default(), d, &mut inexact_here)
                                    .map_err(abort)?;
                            entries.insert(i, (token.to_owned(), new, today));
                        }
                    }
                }
                entries.retain(|(_, c, _)| !c.is_zero());
                let after = entries.len() as u64;
                n_tokens = (n_tokens + after)
                    .checked_sub(before)
                    .ok_or_else(bad_sizes)?;
                if entries.is_empty() {
                    t.remove(&key[..])?;
                } else {
                    t.insert(&key[..], packed::encode(&entries))?;
                }
            }

            for (block, changes) in &by_block {
                let key = packed::gram_block_key(block * packed::GRAM_BLOCK as u32);
                let mut counts = match t.get(key)? {
                    Some(v) => packed::decode_grams(&v)
                        .ok_or_else(|| corrupt(format!("bad gram block {block}")))?,
                    None => vec![TokenCounts::default(); packed::GRAM_BLOCK],
                };
                for &(number, d) in changes {
                    let slot = &mut counts[number as usize % packed::GRAM_BLOCK];
                    let new = apply_token(feature_in(number), *slot, d, &mut inexact_here)
                        .map_err(abort)?;
                    n_tokens = match (slot.is_zero(), new.is_zero()) {
                        (true, false) => n_tokens + 1,
                        (false, true) => n_tokens.checked_sub(1).ok_or_else(bad_sizes)?,
                        _ => n_tokens,
                    };
                    *slot = new;
                }
                if counts.iter().all(|c| c.is_zero()) {
                    t.remove(&key[..])?;
                } else {
                    t.insert(&key[..], packed::encode_grams(&counts))?;
                }
            }

            for (shard, changes) in &registry_by_shard {
                let key = shard_key(*shard);
                let mut entries = match r.get(key)? {
                    Some(v) => {
                        packed::decode_registry(&v).ok_or_else(|| corrupt(bad_registry(*shard)))?
                    }
                    None => Vec::new(),
                };
                let before = entries.len() as u64;
                // In order: later changes of the same digest win.
                for (digest, label) in changes {
                    let key = registry_key(digest);
                    match (entries.binary_search_by(|(d, _)| d.cmp(&key)), label) {
                        (Ok(i), Some(l)) => entries[i].1 = label_byte(*l),
                        (Ok(i), None) => {
                            entries.remove(i);
                        }
                        (Err(i), Some(l)) => entries.insert(i, (key, label_byte(*l))),
                        (Err(_), None) => {}
                    }
                }
                n_registry = (n_registry + entries.len() as u64)
                    .checked_sub(before)
                    .ok_or_else(bad_sizes)?;
                if entries.is_empty() {
                    r.remove(&key[..])?;
                } else {
                    r.insert(&key[..], packed::encode_registry(&entries))?;
                }
            }

            let generation = match m.get(GENERATION_KEY)? {
                None => 0,
                Some(g) => decode_u64(&g).ok_or_else(|| corrupt("bad generation record".into()))?,
            };
            m.insert(TOTALS_KEY, encode_totals(&totals))?;
            m.insert(SIZES_KEY, &encode_sizes([n_tokens, n_registry])[..])?;
            let next = target.unwrap_or(generation + 1);
            if next <= generation {
                return Err(corrupt(format!(
                    "a change would take the store from generation {generation} back to {next}"
                )));
            }
            m.insert(GENERATION_KEY, &next.to_le_bytes()[..])?;
            // Counts of an older readable tokenizer are now mixed with this
            // one's: the store is this version's from here on.
            m.insert(TOKENIZER_KEY, &TOKENIZER_VERSION.to_le_bytes()[..])?;
            inexact.set(inexact_here);
            Ok(())
        });
        match result {
            Ok(()) => Ok(inexact.get()),
            Err(TransactionError::Abort(e)) => Err(e),
            Err(TransactionError::Storage(e)) => Err(self.sled_error(e)),
        }
    }
}

/// sled reports a held lock as an `Other` I/O error with this text (0.34:
/// `could not acquire lock on "…": … WouldBlock …`); it has no better signal.
fn is_lock_error(e: &::sled::Error) -> bool {
    matches!(e, ::sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

/// Removes the snapshot files sled left half written (`snap.*.generating`,
/// which it renames `snap.*` once whole), when no process has the store
/// open (sled's `flock` on `db`, taken here for the while). sled 0.34 reads
/// the greatest `snap.*` name, such a file included: one left empty by a
/// full disk made every later open fail as corrupt, for good. Without it,
/// sled recovers from its last whole snapshot and its log, as after a kill.
/// Best effort: what cannot be removed is left to sled.
fn remove_interrupted_snapshots(path: &Path) {
    let Ok(db) = std::fs::File::open(path.join("db")) else {
        return;
    };
    if db.try_lock().is_err() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        if name.starts_with(b"snap.") && name.ends_with(b".generating") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Refuses a count store whose files are not what sled makes (regular
/// files, and directories for the store and its `blobs`), before sled opens
/// them: sled follows links and blocks on a FIFO, so a link at `db` would
/// be written through and a FIFO at `conf` would hang the writer.
/// Bytes that must be free on the store's filesystem to open it: on a
/// filesystem all but full, sled 0.34 hangs in opening (its writes wait
/// for room for good) instead of failing, holding the writers' lock until
/// the watchdog ends it, and a training run so ended may leave part of
/// its change applied; with a little room it fails with "no space left
/// on device".
const ROOM: u64 = 4 << 20;

/// An error, "no space left on device", if the filesystem holding `path`
/// (or the directory it is to be made in) has less than [`ROOM`] free.
/// One whose free space cannot be read is not refused.
fn check_room(path: &Path) -> Result<()> {
    let at = if path.exists() {
        path
    } else {
        path.parent().unwrap_or(path)
    };
    let Ok(fs) = nix::sys::statvfs::statvfs(at) else {
        return Ok(());
    };
    let free = fs.blocks_available().saturating_mul(fs.fragment_size());
    if free >= ROOM {
        return Ok(());
    }
    Err(Error::Io {
        path: path.to_owned(),
        source: std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!(
                "no space left on device ({} KB free; changing the counts needs {} MB): nothing \
                 was changed",
                free >> 10,
                ROOM >> 20
            ),
        ),
    })
}

fn check_files(path: &Path) -> Result<()> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    let is_dir = |dir: &Path| fsutil::check_kind(dir, true).map_err(io(dir));
    let file = |file: &Path| fsutil::check_kind(file, false).map(drop).map_err(io(file));
    let entries = |dir: &Path| -> Result<Vec<PathBuf>> {
        let list = std::fs::read_dir(dir).map_err(io(dir))?;
        list.map(|e| e.map(|e| e.path()).map_err(io(dir))).collect()
    };
    if !is_dir(path)? {
        return Ok(());
    }
    for entry in entries(path)? {
        let name = entry.file_name().unwrap_or_default().as_encoded_bytes();
        if name == b"conf" || name == b"db" || name.starts_with(b"snap.") {
            file(&entry)?;
        }
    }
    let blobs = path.join("blobs");
    if is_dir(&blobs)? {
        for blob in entries(&blobs)? {
            file(&blob)?;
        }
    }
    Ok(())
}

/// A call into the store at `path`, as the line of a stalled one names it.
fn call_named(path: &Path) -> String {
    format!("a call to the count store {}", path.display())
}

fn sled_error(path: &Path, e: ::sled::Error) -> Error {
    let path = path.to_owned();
    match e {
        ::sled::Error::Io(source) => Error::Io { path, source },
        // sled's own words carry an empty backtrace and an offset it often
        // does not know.
        ::sled::Error::Corruption { at: Some(at), .. } => Error::Corrupt {
            path,
            reason: format!("sled read corrupted data at {at}"),
        },
        ::sled::Error::Corruption { .. } => Error::Corrupt {
            path,
            reason: "sled read corrupted data".into(),
        },
        e => Error::Sled {
            path,
            source: Box::new(e),
        },
    }
}

/// The day counts unchanged for `min_age_days` days last changed before
/// (days since 1970): today minus that, plus one (0 days: any day up to
/// today).
pub fn aged_before(min_age_days: u32) -> u32 {
    (today() + 1).saturating_sub(min_age_days)
}

/// Days since 1970-01-01 (UTC), today.
pub fn today() -> u32 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (secs / 86_400) as u32
}

fn bad_registry(shard: u16) -> String {
    format!("bad registry shard {shard}")
}

fn bad_shard(shard: u16) -> String {
    format!("bad token shard {shard}")
}

fn bad_counts(token: &str) -> String {
    format!("bad counts for token {token:?}")
}

#[cfg(test)]
fn encode_counts(c: TokenCounts) -> [u8; 8] {
    let mut out = [0; 8];
    out[..4].copy_from_slice(&c.ham.to_le_bytes());
    out[4..].copy_from_slice(&c.spam.to_le_bytes());
    out
}

fn decode_counts(b: &[u8]) -> Option<TokenCounts> {
    let b: &[u8; 8] = b.try_into().ok()?;
    Some(TokenCounts {
        ham: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        spam: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
    })
}

fn label_byte(label: Label) -> u8 {
    match label {
        Label::Ham => 0,
        Label::Spam => 1,
    }
}

fn decode_label(b: &[u8]) -> Option<Label> {
    match b {
        [0] => Some(Label::Ham),
        [1] => Some(Label::Spam),
        _ => None,
    }
}

/// 16 bytes that differ between stores: an identity, not a secret, so the
/// standard library's randomly keyed hasher (seeded by the operating
/// system), the time and the process id are enough.
fn new_store_id() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut id = [0u8; 16];
    for (i, half) in id.chunks_exact_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(now);
        h.write_u32(std::process::id());
        h.write_usize(i);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    id
}

fn decode_u64(b: &[u8]) -> Option<u64> {
    let mut r = Reader(b);
    let v = r.u64()?;
    r.0.is_empty().then_some(v)
}

fn encode_sizes(sizes: [u64; 2]) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&sizes[0].to_le_bytes());
    out[8..].copy_from_slice(&sizes[1].to_le_bytes());
    out
}

fn decode_sizes(b: &[u8]) -> Option<[u64; 2]> {
    let mut r = Reader(b);
    let sizes = [r.u64()?, r.u64()?];
    r.0.is_empty().then_some(sizes)
}

const GAUSS_BYTES: usize = 8 + 16 + 16;
const TOTALS_BYTES: usize = 4 + 2 * 8 + 2 * METADATA_LEN * GAUSS_BYTES;

fn encode_totals(t: &Totals) -> Vec<u8> {
    let mut out = Vec::with_capacity(TOTALS_BYTES);
    out.extend_from_slice(&(METADATA_LEN as u32).to_le_bytes());
    for m in t.messages {
        out.extend_from_slice(&m.to_le_bytes());
    }
    for g in t.gauss.iter().flatten() {
        out.extend_from_slice(&g.n.to_le_bytes());
        out.extend_from_slice(&g.sum.to_le_bytes());
        out.extend_from_slice(&g.sum_sq.to_le_bytes());
    }
    out
}

/// Why a totals record did not decode; turned into an [`Error`] once the
/// path is at hand.
#[derive(Debug)]
enum TotalsError {
    MetadataLen(u32),
    Malformed,
}

impl TotalsError {
    fn into_error(self, path: &Path) -> Error {
        match self {
            TotalsError::MetadataLen(found) => Error::Version {
                path: path.to_owned(),
                found,
                expected: METADATA_LEN as u32,
                what: "metadata length",
            },
            TotalsError::Malformed => Error::Corrupt {
                path: path.to_owned(),
                reason: "bad totals record".into(),
            },
        }
    }
}

fn decode_totals(b: &[u8]) -> std::result::Result<Totals, TotalsError> {
    let mut r = Reader(b);
    let len = r.u32().ok_or(TotalsError::Malformed)?;
    if len as usize != METADATA_LEN {
        return Err(TotalsError::MetadataLen(len));
    }
    if b.len() != TOTALS_BYTES {
        return Err(TotalsError::Malformed);
    }
    let mut t = Totals::default();
    for m in &mut t.messages {
        *m = r.u64().ok_or(TotalsError::Malformed)?;
    }
    for g in t.gauss.iter_mut().flatten() {
        let n = r.i64().ok_or(TotalsError::Malformed)?;
        let sum = r.i128().ok_or(TotalsError::Malformed)?;
        let sum_sq = r.i128().ok_or(TotalsError::Malformed)?;
        *g = GaussStats { n, sum, sum_sq };
    }
    Ok(t)
}

/// Reads little-endian integers off the front of a slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_le_bytes)
    }

    fn i128(&mut self) -> Option<i128> {
        self.take().map(i128::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::store::MemoryStore;
    use crate::store::keys::GramName;
    use crate::store::testkit::*;

    const WAIT: Duration = Duration::from_secs(5);

    #[test]
    fn identity_persists_and_counts_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut store = SledStore::open(&path, WAIT).unwrap();
        let new = store.identity().unwrap();
        assert_eq!((new.id.len(), new.generation), (32, 0));
        store.apply(&message(&["a"], Label::Spam, 1, 1, 5)).unwrap();
        store.apply(&message(&["b"], Label::Ham, 1, 2, 5)).unwrap();
        // A refused delta is not a change.
        let mut overflow = Delta::default();
        overflow.words.insert("a".into(), [0, i64::from(u32::MAX)]);
        assert!(store.apply(&overflow).is_err());
        store.flush().unwrap();
        drop(store);
        let store = SledStore::open(&path, WAIT).unwrap();
        let now = store.identity().unwrap();
        assert_eq!((now.id.as_str(), now.generation), (new.id.as_str(), 2));
        let other = SledStore::open(&dir.path().join("other"), WAIT).unwrap();
        assert_ne!(other.identity().unwrap().id, new.id);
    }

    #[test]
    fn a_store_made_before_identities_gets_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut store = SledStore::open(&path, WAIT).unwrap();
        store.apply(&message(&["a"], Label::Spam, 1, 1, 5)).unwrap();
        store.meta.remove(STORE_ID_KEY).unwrap();
        store.meta.remove(GENERATION_KEY).unwrap();
        store.flush().unwrap();
        let before = dump(&store);
        drop(store);
        let store = SledStore::open(&path, WAIT).unwrap();
        let id = store.identity().unwrap();
        assert_eq!((id.id.len(), id.generation), (32, 0));
        assert_eq!(dump(&store), before);
        drop(store);
        let again = SledStore::open(&path, WAIT).unwrap();
        assert_eq!(again.identity().unwrap(), id);
    }

    /// A snapshot sled began and could not finish (a full disk leaves it
    /// empty) does not make the store unreadable.
    #[test]
    fn a_snapshot_left_half_written_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut store = SledStore::open(&path, WAIT).unwrap();
        store
            .apply(&message(&["hello"], Label::Spam, 1, 1, 1))
            .unwrap();
        store.flush().unwrap();
        let before = dump(&store);
        drop(store);
        let stale = path.join("snap.7FFFFFFFFFFFFFFF.generating");
        std::fs::write(&stale, b"").unwrap();
        let store = SledStore::open(&path, WAIT).unwrap();
        assert_eq!(dump(&store), before);
        assert!(!stale.exists());
        // While the store is open, another opener leaves sled's files alone.
        std::fs::write(&stale, b"").unwrap();
        remove_interrupted_snapshots(&path);
        assert!(stale.exists());
    }

    #[test]
    fn creates_reopens_and_keeps_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut store = SledStore::open(&path, WAIT).unwrap();
        assert_eq!(dump(&store), dump(&MemoryStore::new()));
        store
            .apply(&message(
                &["hello", "wörld"],
                Label::Spam,
                1,
                1,
                -(1 << 100),
            ))
            .unwrap();
        store
            .apply(&message(&["hello"], Label::Ham, 1, 2, 3))
            .unwrap();
        store.flush().unwrap();
        let before = dump(&store);
        assert!(store.size_on_disk().unwrap() > 0);
        drop(store);

        let store = SledStore::open(&path, WAIT).unwrap();
        assert_eq!(dump(&store), before);
        assert_eq!(
            store.token(Feature::Word("hello")).unwrap(),
            TokenCounts { ham: 1, spam: 1 }
        );
        assert_eq!(store.label_of(&[1; 32]).unwrap(), Some(Label::Spam));
        assert_eq!(store.totals().unwrap().gauss[1][0].sum, -(1 << 100));
    }

    #[test]
    fn sled_and_memory_agree_over_a_sequence_of_applies() {
        let dir = tempfile::tempdir().unwrap();
        let mut sled = SledStore::open(&dir.path().join("db"), WAIT).unwrap();
        let mut memory = MemoryStore::new();
        let steps = [
            message(&["a", "b", "c"], Label::Spam, 1, 0, 10),
            message(&["a", "d"], Label::Ham, 1, 1, 20),
            message(&["b", "é"], Label::Spam, 1, 2, 30),
            message(&["a", "b", "c"], Label::Spam, -1, 0, 10),
            message(&["a", "b", "c"], Label::Ham, 1, 0, 10),
            message(&["zz"], Label::Ham, -1, 3, 1), // refused: never learned
            message(&["a", "d"], Label::Ham, -1, 1, 20),
        ];
        for delta in &steps {
            let (m, s) = (memory.apply(delta), sled.apply(delta));
            assert_eq!(m.is_ok(), s.is_ok(), "{m:?} vs {s:?}");
            assert_eq!(dump(&sled), dump(&memory));
        }
        assert_eq!(sled.token_count().unwrap(), 4);
        assert_eq!(sled.registry_len().unwrap(), 2);
    }

    /// Issue 26, D4: sled hands on an I/O error it keeps (a write that
    /// failed in its flusher) as a copy whose message is the original's
    /// `Debug` text; it is still said in words.
    #[test]
    fn a_full_disk_through_sled_is_said_in_words() {
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let cloned = ::sled::Error::Io(full).clone();
        assert!(cloned.to_string().contains("Os { code: 28"), "{cloned}");
        let err = sled_error(Path::new("counts.sled"), cloned);
        assert_eq!(err.to_string(), "counts.sled: no space left on device");
    }

    /// Issue 26, D3 and S4: the count store's files are checked before
    /// sled opens them: a FIFO is not waited on, a link is not written
    /// through (to a file or to where it dangles).
    #[test]
    fn special_files_and_links_in_the_store_are_refused_before_sled_opens_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        drop(SledStore::open(&path, WAIT).unwrap());
        let victim = dir.path().join("victim");
        let nowhere = dir.path().join("nowhere");
        let fifo = |p: &Path| {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        };
        for name in ["conf", "db", "blobs", "blobs/1", "snap.0000000000000001"] {
            let file = path.join(name);
            let kept = dir.path().join("kept");
            let had = std::fs::rename(&file, &kept).is_ok();
            for plant in ["fifo", "link", "dangling"] {
                std::fs::write(&victim, b"someone else's file").unwrap();
                match plant {
                    "fifo" => fifo(&file),
                    "link" => std::os::unix::fs::symlink(&victim, &file).unwrap(),
                    _ => std::os::unix::fs::symlink(&nowhere, &file).unwrap(),
                }
                let err = SledStore::open(&path, WAIT).unwrap_err().to_string();
                assert!(
                    err.starts_with(&format!("{}: not a ", file.display())),
                    "{err}"
                );
                assert_eq!(std::fs::read(&victim).unwrap(), b"someone else's file");
                assert!(!nowhere.exists(), "{name}");
                std::fs::remove_file(&file).unwrap();
            }
            if had {
                std::fs::rename(&kept, &file).unwrap();
            }
        }
        drop(SledStore::open(&path, WAIT).unwrap());
    }

    #[test]
    fn a_refused_delta_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SledStore::open(&dir.path().join("db"), WAIT).unwrap();
        store
            .apply(&message(&["a", "b"], Label::Spam, 1, 1, 5))
            .unwrap();
        let before = dump(&store);

        let mut bad = message(&["a", "b"], Label::Spam, 1, 1, 5);
        bad.words.insert("b".into(), [0, i64::from(u32::MAX)]);
        bad.registry.push(([2; 32], Some(Label::Ham)));
        let err = store.apply(&bad).unwrap_err();
        assert!(
            matches!(&err, Error::Overflow { token } if token == "b"),
            "{err}"
        );
        assert_eq!(dump(&store), before);
        // A bucket's overflow names it as people read it.
        let mut bad = message_of(&[Feature::Gram(7)], Label::Spam, 1, 3, 5);
        bad.grams.insert(7, [0, i64::from(u32::MAX) + 1]);
        let err = store.apply(&bad).unwrap_err();
        assert!(
            matches!(&err, Error::Overflow { token } if token == "bytes:00007"),
            "{err}"
        );
        // A number that is no bucket is refused, before anything changes.
        let mut bad = message(&["a", "b"], Label::Spam, 1, 4, 5);
        bad.grams.insert(1 << BUCKET_BITS, [1, 0]);
        let err = store.apply(&bad).unwrap_err();
        assert!(matches!(&err, Error::Invalid(_)), "{err}");
        assert_eq!(dump(&store), before);
    }

    #[test]
    fn a_count_that_cannot_be_taken_back_exactly_becomes_zero_and_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SledStore::open(&dir.path().join("db"), WAIT).unwrap();
        store
            .apply(&message(&["a", "b"], Label::Spam, 1, 1, 5))
            .unwrap();
        // "never" was pruned or never counted; a bucket of the byte view too.
        let mut back = message(&["a", "b", "never"], Label::Spam, -1, 1, 5);
        back.grams.insert(7, [0, -1]);
        assert_eq!(store.apply(&back).unwrap(), 2);
        assert_eq!(store.totals().unwrap().messages, [0, 0]);
        assert_eq!(store.token_count().unwrap(), 0);
        assert_eq!(store.registry_len().unwrap(), 0);
    }

    #[test]
    fn refuses_other_versions() {
        for (key, what) in [
            (FORMAT_KEY, "format version"),
            (TOKENIZER_KEY, "tokenizer version"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("db");
            let mut store = SledStore::open(&path, WAIT).unwrap();
            store.meta.insert(key, &99u32.to_le_bytes()[..]).unwrap();
            store.flush().unwrap();
            drop(store);
            let err = SledStore::open(&path, WAIT).unwrap_err();
            assert!(
                matches!(err, Error::Version { found: 99, what: w, .. } if w == what),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(&format!("{what} 99")), "{text}");
            assert!(text.contains("retrain into a new database"), "{text}");
        }
    }

    /// A store of tokenizer version 3 (before CJK pairs) opens, reads and
    /// is written into; the first write records this version. Versions it
    /// cannot read stay refused.
    #[test]
    fn a_store_of_tokenizer_version_3_is_read_and_upgraded_by_its_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut store = SledStore::open(&path, WAIT).unwrap();
        store
            .apply(&message(&["a", "東"], Label::Spam, 1, 1, 5))
            .unwrap();
        store
            .meta
            .insert(TOKENIZER_KEY, &3u32.to_le_bytes()[..])
            .unwrap();
        store.flush().unwrap();
        drop(store);

        let mut store = SledStore::open(&path, WAIT).unwrap();
        assert_eq!(
            store.tokenizer_version().unwrap(),
            3,
            "opening writes nothing"
        );
        assert_eq!(store.token(Feature::Word("東")).unwrap().spam, 1);
        assert_eq!(store.totals().unwrap().messages, [0, 1]);
        store
            .apply(&message(&["a", "東京"], Label::Ham, 1, 2, 5))
            .unwrap();
        assert_eq!(store.tokenizer_version().unwrap(), TOKENIZER_VERSION);
        assert_eq!(
            store.token(Feature::Word("a")).unwrap(),
            TokenCounts { ham: 1, spam: 1 }
        );
        drop(store);
        let store = SledStore::open(&path, WAIT).unwrap();
        assert_eq!(store.tokenizer_version().unwrap(), TOKENIZER_VERSION);
        assert_eq!(store.totals().unwrap().messages, [1, 1]);
        drop(store);

        for unreadable in [2, TOKENIZER_VERSION + 1] {
            let store = SledStore::open(&path, WAIT).unwrap();
            store
                .meta
                .insert(TOKENIZER_KEY, &unreadable.to_le_bytes()[..])
                .unwrap();
            store.db.flush().unwrap();
            drop(store);
            let err = SledStore::open(&path, WAIT).unwrap_err();
            assert!(
                matches!(err, Error::Version { found, .. } if found == unreadable),
                "{err:?}"
            );
            let store = ::sled::Config::new().path(&path).open().unwrap();
            let meta = store.open_tree("meta").unwrap();
            meta.insert(TOKENIZER_KEY, &TOKENIZER_VERSION.to_le_bytes()[..])
                .unwrap();
            store.flush().unwrap();
        }
    }

    #[test]
    fn a_format_1_store_is_converted_with_every_count_and_label() {
        let mut memory = MemoryStore::new();
        memory
            .apply(&message_of(
                &[
                    Feature::Word("a"),
                    Feature::Word("b"),
                    Feature::Word("subject:x"),
                    Feature::Gram(7),
                    Feature::Gram(0x2ffff),
                ],
                Label::Spam,
                1,
                1,
                7,
            ))
            .unwrap();
        memory
            .apply(&message(&["b", "c"], Label::Ham, 1, 2, 3))
            .unwrap();
        memory.apply(&message(&["c"], Label::Ham, 1, 3, 5)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            // Format 1, written as it was: a key per token and per message.
            let db = ::sled::Config::new().path(&path).open().unwrap();
            let tokens = db.open_tree("tokens").unwrap();
            memory
                .for_each_token(&mut |t, c| {
                    let name = match t {
                        Feature::Word(w) => w.to_owned(),
                        Feature::Gram(b) => GramName::of(b).as_str().to_owned(),
                        // Format 1 held no weights.
                        Feature::Weight(_) => return,
                    };
                    tokens.insert(name, &encode_counts(c)[..]).unwrap();
                })
                .unwrap();
            let registry = db.open_tree("registry").unwrap();
            for d in 0..DIGESTS {
                if let Some(l) = memory.label_of(&[d; 32]).unwrap() {
                    registry.insert([d; 32], &[label_byte(l)][..]).unwrap();
                }
            }
            let meta = db.open_tree("meta").unwrap();
            meta.insert(TOKENIZER_KEY, &TOKENIZER_VERSION.to_le_bytes()[..])
                .unwrap();
            meta.insert(TOTALS_KEY, encode_totals(&memory.totals().unwrap()))
                .unwrap();
            let sizes = [
                memory.token_count().unwrap(),
                memory.registry_len().unwrap(),
            ];
            meta.insert(SIZES_KEY, &encode_sizes(sizes)[..]).unwrap();
            meta.insert(STORE_ID_KEY, &[7u8; 16][..]).unwrap();
            meta.insert(FORMAT_KEY, &1u32.to_le_bytes()[..]).unwrap();
            db.flush().unwrap();
        }
        let store = SledStore::open(&path, WAIT).unwrap();
        assert_eq!(dump(&store), dump(&memory));
        let names = store.db.tree_names();
        assert!(!names.iter().any(|n| &n[..] == b"tokens"), "{names:?}");
        assert!(!names.iter().any(|n| &n[..] == b"registry"), "{names:?}");
        drop(store);
        // Converted once: it opens as format 3 and keeps its identity.
        let mut store = SledStore::open(&path, WAIT).unwrap();
        assert_eq!(dump(&store), dump(&memory));
        assert_eq!(store.identity().unwrap().id, "07".repeat(16));
        let more = message(&["a", "d"], Label::Spam, 1, 4, 1);
        store.apply(&more).unwrap();
        memory.apply(&more).unwrap();
        assert_eq!(dump(&store), dump(&memory));
    }

    #[test]
    fn pruning_removes_rare_old_words_and_never_changes_a_kept_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SledStore::open(&dir.path().join("db"), WAIT).unwrap();
        store.set_today(100);
        store
            .apply(&message_of(
                &[
                    Feature::Word("old1"),
                    Feature::Word("often"),
                    Feature::Word("later"),
                    Feature::Gram(1),
                ],
                Label::Spam,
                1,
                1,
                1,
            ))
            .unwrap();
        for d in 2..5 {
            store
                .apply(&message(&["often"], Label::Ham, 1, d, 1))
                .unwrap();
        }
        store.set_today(200);
        store
            .apply(&message(&["later", "new1"], Label::Ham, 1, 5, 1))
            .unwrap();
        let before = dump(&store);
        // Seen at most twice, last changed before day 150: only "old1"
        // ("often" is seen 4 times, "later" changed on day 200, "new1" is
        // new, and the byte view's bucket is never pruned).
        let delta = store.rare_and_old(2, 150).unwrap();
        let pruned: Vec<&String> = delta.words.keys().collect();
        assert_eq!(pruned, ["old1"]);
        assert!(delta.grams.is_empty());
        store.apply(&delta).unwrap();
        let after = dump(&store);
        let kept: Vec<_> = before
            .tokens
            .iter()
            .filter(|(t, _)| t.as_feature() != Feature::Word("old1"))
            .cloned()
            .collect();
        assert_eq!(after.tokens, kept);
        assert_eq!(after.token_count, before.token_count - 1);
        assert_eq!(after.totals, before.totals);
        assert_eq!(after.labels, before.labels);
        // Nothing older than day 0: nothing to prune.
        assert!(store.rare_and_old(u64::MAX, 0).unwrap().words.is_empty());
    }

    #[test]
    fn refuses_a_sled_database_that_is_not_ours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = ::sled::open(&path).unwrap();
        db.open_tree("tokens").unwrap().insert("x", "y").unwrap();
        db.flush().unwrap();
        drop(db);
        let err = SledStore::open(&path, WAIT).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    }

    #[test]
    fn waits_for_the_lock_then_gives_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let held = SledStore::open(&path, WAIT).unwrap();
        let wait = Duration::from_millis(300);
        let start = Instant::now();
        let err = SledStore::open(&path, wait).unwrap_err();
        let elapsed = start.elapsed();
        match &err {
            Error::Locked { waited, .. } => assert!(*waited >= wait, "{waited:?}"),
            other => panic!("expected Locked, got {other:?}"),
        }
        assert!(elapsed >= wait);
        // Generous: only catches a wait that ignores its limit.
        assert!(elapsed < wait + Duration::from_secs(20), "{elapsed:?}");
        assert!(
            err.to_string().contains("is in use by another process"),
            "{err}"
        );
        drop(held);
    }

    #[test]
    fn gets_the_lock_when_it_is_released_while_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let held = SledStore::open(&path, WAIT).unwrap();
        let releaser = thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        let store = SledStore::open(&path, Duration::from_secs(30)).unwrap();
        releaser.join().unwrap();
        assert_eq!(store.token_count().unwrap(), 0);
    }

    #[test]
    fn totals_records_round_trip_and_reject_other_lengths() {
        let mut t = Totals {
            messages: [3, u64::MAX],
            ..Totals::default()
        };
        t.gauss[1][METADATA_LEN - 1] = GaussStats {
            n: -1,
            sum: i128::MIN,
            sum_sq: i128::MAX,
        };
        let bytes = encode_totals(&t);
        assert_eq!(bytes.len(), TOTALS_BYTES);
        assert_eq!(decode_totals(&bytes).unwrap(), t);
        assert!(matches!(
            decode_totals(&bytes[..bytes.len() - 1]),
            Err(TotalsError::Malformed)
        ));
        let mut other = bytes.clone();
        other[..4].copy_from_slice(&7u32.to_le_bytes());
        assert!(matches!(
            decode_totals(&other),
            Err(TotalsError::MetadataLen(7))
        ));
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// One to three messages learned or unlearned in one delta.
        Apply(Box<Delta>),
        /// Flush, drop and reopen the sled store.
        Reopen,
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            12 => delta_strategy().prop_map(|delta| Op::Apply(Box::new(delta))),
            1 => Just(Op::Reopen),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// The acceptance property: whatever sequence of learning and
        /// unlearning, with reopens in between, the sled store shows exactly
        /// what the memory store shows, counts the same inexact counts,
        /// refuses exactly what it refuses, and a refused delta changes
        /// neither.
        #[test]
        fn sled_store_equals_memory_store(ops in prop::collection::vec(op_strategy(), 1..32)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("db");
            let mut sled = SledStore::open(&path, WAIT).unwrap();
            let mut memory = MemoryStore::new();
            for op in &ops {
                match op {
                    Op::Apply(delta) => {
                        let before = memory.clone();
                        match (memory.apply(delta), sled.apply(delta)) {
                            (Ok(m), Ok(s)) => prop_assert_eq!(m, s, "inexact counts"),
                            (Err(Error::Overflow { .. }), Err(Error::Overflow { .. })) => {
                                prop_assert_eq!(&memory, &before);
                            }
                            (m, s) => prop_assert!(false, "memory: {:?}, sled: {:?}", m, s),
                        }
                    }
                    Op::Reopen => {
                        sled.flush().unwrap();
                        drop(sled);
                        sled = SledStore::open(&path, WAIT).unwrap();
                    }
                }
                prop_assert_eq!(dump(&sled), dump(&memory));
            }
        }
    }
}
