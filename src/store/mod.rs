//! Where the learned counts live, and the compiled model file that scoring
//! reads.
//!
//! The [`Store`] trait is the whole interface to the counts: [`Totals`]
//! (messages and metadata statistics per class), per-feature
//! [`TokenCounts`] (a word token by name, a byte-view bucket by number:
//! [`Feature`]), and the registry of learned messages (digest → label)
//! that makes retraining idempotent. Changes arrive as a [`Delta`] and are
//! applied all or nothing.
//!
//! Three implementations:
//! - [`MemoryStore`]: ordered maps in memory, for tests and in-memory
//!   evaluation.
//! - [`SledStore`]: the on-disk source of truth, a sled database holding one
//!   writer's exclusive lock. sled types never leave this module: errors
//!   from sled become [`Error`] values.
//! - [`redis::RedisStore`]: the counts of a fleet in a Redis that every
//!   host reads and changes, each change one atomic script.
//!
//! Scoring does not use a [`Store`]: many `filter` processes run at once,
//! possibly while `train` holds the database lock, so they read an immutable
//! [`Snapshot`] written atomically after training ([`snapshot`]).
//!
//! This module knows nothing of messages, tokenization or scoring: it stores
//! integers exactly and checks that they never overflow. A change that would
//! take a count below zero (a message unlearned after `prune` removed some
//! of its words, or learned by a version that counted other features) sets
//! it to zero instead and is counted as inexact: retraining must never jam
//! on a count it cannot take back exactly.

mod checksum;
pub mod journal;
mod keys;
pub mod packed;
pub mod redis;
#[cfg(test)]
pub(crate) mod redis_server;
pub mod registry;
pub mod samples;
pub mod sled;
pub mod snapshot;
pub mod stall;
#[cfg(test)]
pub(crate) mod testkit;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::model::{Delta, GaussStats, Label, TokenCounts, Totals};
use crate::vocab::Digest;
use crate::vocab::METADATA_LEN;
use crate::vocab::{BUCKET_BITS, Feature, is_bucket};

pub use self::sled::{SledStore, StoreIdentity};
pub use journal::{DEFAULT_JOURNAL_LIMIT, Journal};
pub use snapshot::{Snapshot, write_snapshot, write_store_snapshot};

/// Version of the count store's layout (the snapshot has its own). Format
/// 1 (a key per token) is converted when a writer opens it; any other
/// version is refused. (Format 2 was never released.)
pub const FORMAT_VERSION: u32 = 3;

/// What can go wrong reading or writing counts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another process holds the database's exclusive lock.
    #[error(
        "database {} is in use by another process (waited {:.1}s for it)",
        path.display(),
        waited.as_secs_f64()
    )]
    Locked {
        /// The database directory.
        path: PathBuf,
        /// How long we waited for the lock.
        waited: Duration,
    },
    /// The data was written by a different format or tokenizer version.
    #[error(
        "{} was written with {what} {found}; this bayesmail needs {expected}: {}",
        path.display(),
        version_remedy(what)
    )]
    Version {
        /// The database directory or snapshot file.
        path: PathBuf,
        /// The version found in the data.
        found: u32,
        /// The version this build uses.
        expected: u32,
        /// Which version: `"format version"`, `"tokenizer version"`,
        /// `"metadata length"` or [`MODEL_FILE_FORMAT`].
        what: &'static str,
    },
    /// The stored data is damaged or is not ours.
    #[error("{} is corrupt: {reason}", path.display())]
    Corrupt {
        /// The database directory or snapshot file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An operating-system I/O error.
    #[error("{}: {}", path.display(), crate::fsutil::words(source))]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Any other error from the database engine.
    #[error("database {}: {source}", path.display())]
    Sled {
        /// The database directory.
        path: PathBuf,
        /// The engine's error (its type is deliberately hidden).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The Redis that holds the counts could not be reached or refused a
    /// command: down, slow past the timeout, or a login refused.
    #[error("Redis at {at}: {source}")]
    Redis {
        /// The Redis URL (no password) and the model.
        at: String,
        /// What the client said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Applying a delta would make a count exceed what it can hold.
    /// `token` is the feature as [`Feature`] displays it, or for the
    /// per-class totals a description in angle brackets such as
    /// `<spam messages>`.
    #[error("a count would overflow: {token}")]
    Overflow {
        /// The token or total concerned.
        token: String,
    },
    /// The caller passed something that cannot be stored.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The store is set up in a way that would lose counts (a Redis that
    /// may evict keys): no change is made until it is mended.
    #[error("{0}")]
    Config(String),
    /// Other changes to the same model came between this one's reads and
    /// its write every time it was tried: a retry is safe.
    #[error(
        "{at}: other learns changed the model {tries} times while this one was applied; try again"
    )]
    Contended {
        /// The Redis URL (no password) and the model.
        at: String,
        /// How many times it was tried.
        tries: usize,
    },
    /// No room for a new model: the Redis that holds the counts is nearly
    /// at its `maxmemory` ([`redis::Redis::room_for_a_new_model`]). For
    /// now: one asks again once there is room.
    #[error("{0}")]
    Full(String),
}

impl From<crate::fsutil::PathError> for Error {
    fn from(e: crate::fsutil::PathError) -> Error {
        Error::Io {
            path: e.path,
            source: e.source,
        }
    }
}

/// `what` of a model file written in another snapshot format: unlike the
/// other mismatches, the database itself is fine and `train` rewrites it.
pub const MODEL_FILE_FORMAT: &str = "model file format version";

/// What to do about a version mismatch.
fn version_remedy(what: &str) -> &'static str {
    if what == MODEL_FILE_FORMAT {
        "its counts are intact, and training on this database again rewrites the model file"
    } else {
        "retrain into a new database"
    }
}

impl Error {
    /// Whether this is a failure to open a file that may pass (its
    /// permissions, no file descriptor left), rather than something wrong
    /// with the file. (Memory is not among them: a reader sizes what it
    /// maps by the file, and a file of garbage may be larger than any.)
    pub fn may_pass(&self) -> bool {
        let Error::Io { source, .. } = self else {
            return false;
        };
        source.kind() == std::io::ErrorKind::PermissionDenied
            || matches!(
                source.raw_os_error(),
                Some(libc::EMFILE | libc::ENFILE | libc::EACCES | libc::EPERM)
            )
    }
}

/// Result of store operations.
pub type Result<T> = std::result::Result<T, Error>;

/// The learned statistics: read them, change them by deltas, make changes
/// durable.
pub trait Store {
    /// Message counts and metadata statistics per class.
    fn totals(&self) -> Result<Totals>;
    /// Counts of one feature; zero counts if it was never seen.
    fn token(&self, feature: Feature<'_>) -> Result<TokenCounts>;
    /// The label a message was learned under, if it was learned.
    fn label_of(&self, digest: &Digest) -> Result<Option<Label>>;
    /// Number of distinct features with non-zero counts: the vocabulary,
    /// and the online discriminative view's weights.
    fn token_count(&self) -> Result<u64>;
    /// Number of messages in the registry.
    fn registry_len(&self) -> Result<u64>;
    /// Every feature with non-zero counts, in [`Feature`]'s order: the
    /// words in byte order, then the buckets, then the weights.
    fn for_each_token(&self, f: &mut dyn FnMut(Feature<'_>, TokenCounts)) -> Result<()>;
    /// The online discriminative view's weights with non-zero counters,
    /// by bucket, in bucket order: what [`Store::for_each_token`] gives
    /// last, which a store may find without reading the rest.
    fn weights(&self) -> Result<Vec<(u32, TokenCounts)>> {
        let mut weights = Vec::new();
        self.for_each_token(&mut |feature, counts| {
            if let Feature::Weight(bucket) = feature {
                weights.push((bucket, counts));
            }
        })?;
        Ok(weights)
    }
    /// Applies a delta atomically: all of it or, on error (a count would
    /// overflow, a bucket is no bucket, or I/O), none of it. A count the
    /// delta would take below zero becomes zero; returns how many counts
    /// did (see `apply_token`). Features whose counts reach zero are
    /// removed.
    /// Registry: `Some(label)` sets, `None` removes; later entries for the
    /// same digest win.
    fn apply(&mut self, delta: &Delta) -> Result<u64>;
    /// Makes applied changes durable.
    fn flush(&mut self) -> Result<()>;
}

/// A [`Store`] in memory: ordered maps, nothing persisted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryStore {
    totals: Totals,
    words: BTreeMap<String, TokenCounts>,
    grams: BTreeMap<u32, TokenCounts>,
    weights: BTreeMap<u32, TokenCounts>,
    registry: HashMap<Digest, Label>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Copies the totals and token counts of another store (the registry is
    /// not copied: scoring does not need it). Useful to evaluate in memory
    /// what is on disk.
    pub fn load_counts(store: &dyn Store) -> Result<MemoryStore> {
        let mut copy = MemoryStore {
            totals: store.totals()?,
            ..MemoryStore::default()
        };
        store.for_each_token(&mut |feature, counts| match feature {
            Feature::Word(word) => {
                copy.words.insert(word.to_owned(), counts);
            }
            Feature::Gram(bucket) => {
                copy.grams.insert(bucket, counts);
            }
            Feature::Weight(bucket) => {
                copy.weights.insert(bucket, counts);
            }
        })?;
        Ok(copy)
    }
}

impl Store for MemoryStore {
    fn totals(&self) -> Result<Totals> {
        Ok(self.totals.clone())
    }

    fn token(&self, feature: Feature<'_>) -> Result<TokenCounts> {
        let counts = match feature {
            Feature::Word(word) => self.words.get(word),
            Feature::Gram(bucket) => self.grams.get(&bucket),
            Feature::Weight(bucket) => self.weights.get(&bucket),
        };
        Ok(counts.copied().unwrap_or_default())
    }

    fn label_of(&self, digest: &Digest) -> Result<Option<Label>> {
        Ok(self.registry.get(digest).copied())
    }

    fn token_count(&self) -> Result<u64> {
        Ok((self.words.len() + self.grams.len() + self.weights.len()) as u64)
    }

    fn registry_len(&self) -> Result<u64> {
        Ok(self.registry.len() as u64)
    }

    fn for_each_token(&self, f: &mut dyn FnMut(Feature<'_>, TokenCounts)) -> Result<()> {
        for (word, &counts) in &self.words {
            f(Feature::Word(word), counts);
        }
        for (&bucket, &counts) in &self.grams {
            f(Feature::Gram(bucket), counts);
        }
        for (&bucket, &counts) in &self.weights {
            f(Feature::Weight(bucket), counts);
        }
        Ok(())
    }

    fn apply(&mut self, delta: &Delta) -> Result<u64> {
        // Check everything before changing anything, so an error leaves the
        // store as it was.
        check_buckets(delta)?;
        let mut inexact = 0;
        let totals = apply_totals(&self.totals, delta, &mut inexact)?;
        let mut words = Vec::with_capacity(delta.words.len());
        for (word, &d) in delta.words.iter().filter(|(_, d)| **d != [0, 0]) {
            let old = self.words.get(word.as_str()).copied().unwrap_or_default();
            words.push((
                word,
                apply_token(Feature::Word(word), old, d, &mut inexact)?,
            ));
        }
        let grams = apply_numbered(&self.grams, &delta.grams, Feature::Gram, &mut inexact)?;
        let weights = apply_numbered(&self.weights, &delta.weights, Feature::Weight, &mut inexact)?;

        self.totals = totals;
        for (word, counts) in words {
            if counts.is_zero() {
                self.words.remove(word.as_str());
            } else {
                self.words.insert(word.clone(), counts);
            }
        }
        for (map, changed) in [(&mut self.grams, grams), (&mut self.weights, weights)] {
            for (bucket, counts) in changed {
                if counts.is_zero() {
                    map.remove(&bucket);
                } else {
                    map.insert(bucket, counts);
                }
            }
        }
        for (digest, label) in &delta.registry {
            match label {
                Some(label) => self.registry.insert(*digest, *label),
                None => self.registry.remove(digest),
            };
        }
        Ok(inexact)
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Where a store that keeps the byte view's buckets by number (sled's
/// gram blocks, Redis's bucket hash) keeps a numbered feature: a bucket of
/// the byte view at its number, a weight of the online discriminative view
/// 2^[`crate::vocab::BUCKET_BITS`] further on; `None` for a word or a number that is no
/// bucket.
pub fn slot_of(feature: Feature<'_>) -> Option<u32> {
    match feature {
        Feature::Gram(b) if is_bucket(b) => Some(b),
        Feature::Weight(b) if is_bucket(b) => Some(b | 1 << BUCKET_BITS),
        _ => None,
    }
}

/// Where a store that keeps features by number keeps the weights of
/// `buckets` (see [`slot_of`]; a number that is no bucket, none does).
pub fn weight_slots(buckets: &[u32]) -> impl Iterator<Item = u32> + '_ {
    let slots = buckets.iter().map(|&b| slot_of(Feature::Weight(b)));
    slots.map(|slot| slot.unwrap_or(u32::MAX))
}

/// The feature kept at `slot`: the inverse of
/// [`slot_of`].
pub fn feature_in(slot: u32) -> Feature<'static> {
    if is_bucket(slot) {
        Feature::Gram(slot)
    } else {
        Feature::Weight(slot & ((1 << BUCKET_BITS) - 1))
    }
}

/// The counts after `changes` of the buckets (or weights, as `feature`
/// says) whose counts are `now`.
fn apply_numbered(
    now: &BTreeMap<u32, TokenCounts>,
    changes: &HashMap<u32, [i64; 2]>,
    feature: fn(u32) -> Feature<'static>,
    inexact: &mut u64,
) -> Result<Vec<(u32, TokenCounts)>> {
    let mut after = Vec::with_capacity(changes.len());
    for (&bucket, &d) in changes.iter().filter(|(_, d)| **d != [0, 0]) {
        let old = now.get(&bucket).copied().unwrap_or_default();
        after.push((bucket, apply_token(feature(bucket), old, d, inexact)?));
    }
    Ok(after)
}

/// The counts of `feature` after adding `d` (`[ham, spam]`), or an error if
/// one would overflow. A count that would go below zero becomes zero and
/// adds one to `inexact`: it cannot be taken back exactly (the token was
/// pruned, or the message was counted with other features), and a count
/// that stays consistent is worth more than a retraining that jams.
pub(crate) fn apply_token(
    feature: Feature<'_>,
    old: TokenCounts,
    d: [i64; 2],
    inexact: &mut u64,
) -> Result<TokenCounts> {
    Ok(TokenCounts {
        ham: add_u32(old.ham, d[0], inexact, || feature.to_string())?,
        spam: add_u32(old.spam, d[1], inexact, || feature.to_string())?,
    })
}

/// An error unless every bucket `delta` changes, of the byte view or of a
/// weight, is one ([`is_bucket`]): a store has room for those only.
pub(crate) fn check_buckets(delta: &Delta) -> Result<()> {
    let mut numbers = delta.grams.keys().chain(delta.weights.keys());
    match numbers.find(|&&b| !is_bucket(b)) {
        Some(b) => Err(Error::Invalid(format!("{b:#x} is not a bucket"))),
        None => Ok(()),
    }
}

fn add_u32(old: u32, d: i64, inexact: &mut u64, what: impl Fn() -> String) -> Result<u32> {
    let new = i64::from(old)
        .checked_add(d)
        .ok_or_else(|| Error::Overflow { token: what() })?;
    if new < 0 {
        *inexact += 1;
        return Ok(0);
    }
    u32::try_from(new).map_err(|_| Error::Overflow { token: what() })
}

/// The totals after applying the message and metadata parts of `delta`; a
/// total that would go below zero becomes zero (see [`apply_token`]).
pub(crate) fn apply_totals(old: &Totals, delta: &Delta, inexact: &mut u64) -> Result<Totals> {
    let mut new = old.clone();
    for label in Label::ALL {
        let c = label.index();
        let what = || format!("<{label} messages>");
        let n = i128::from(old.messages[c]) + i128::from(delta.messages[c]);
        if n < 0 {
            *inexact += 1;
        }
        new.messages[c] = u64::try_from(n.max(0)).map_err(|_| Error::Overflow { token: what() })?;
        for k in 0..METADATA_LEN {
            new.gauss[c][k] = add_gauss(&old.gauss[c][k], &delta.gauss[c][k], label, k, inexact)?;
        }
    }
    Ok(new)
}

/// Sufficient statistics after adding `d`. Statistics of no messages are
/// zero, whatever a change that did not take them back exactly left.
fn add_gauss(
    old: &GaussStats,
    d: &GaussStats,
    label: Label,
    k: usize,
    inexact: &mut u64,
) -> Result<GaussStats> {
    let what = || format!("<{label} metadata feature {k}>");
    let overflow = || Error::Overflow { token: what() };
    let n = old.n.checked_add(d.n).ok_or_else(overflow)?;
    if n <= 0 {
        if n < 0 || old.sum.checked_add(d.sum) != Some(0) {
            *inexact += 1;
        }
        return Ok(GaussStats::default());
    }
    Ok(GaussStats {
        n,
        sum: old.sum.checked_add(d.sum).ok_or_else(overflow)?,
        sum_sq: old.sum_sq.checked_add(d.sum_sq).ok_or_else(overflow)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::FeatureBuf;

    fn counts(ham: u32, spam: u32) -> TokenCounts {
        TokenCounts { ham, spam }
    }

    fn word(w: &str) -> FeatureBuf {
        FeatureBuf::Word(w.into())
    }

    fn learn(tokens: &[&str], label: Label, sign: i64, digest: u8) -> Delta {
        let c = label.index();
        let mut d = Delta::default();
        d.messages[c] = sign;
        for t in tokens {
            d.change(Feature::Word(t))[c] += sign;
        }
        d.gauss[c][0] = GaussStats {
            n: sign,
            sum: 5 * i128::from(sign),
            sum_sq: 25 * i128::from(sign),
        };
        d.registry.push(([digest; 32], (sign > 0).then_some(label)));
        d
    }

    fn tokens_of(store: &dyn Store) -> Vec<(FeatureBuf, TokenCounts)> {
        let mut out = Vec::new();
        store
            .for_each_token(&mut |t, c| out.push((t.into_owned(), c)))
            .unwrap();
        out
    }

    #[test]
    fn memory_store_learns_and_unlearns_exactly() {
        let mut store = MemoryStore::new();
        store.apply(&learn(&["b", "a"], Label::Spam, 1, 1)).unwrap();
        store.apply(&learn(&["a", "c"], Label::Ham, 1, 2)).unwrap();
        assert_eq!(
            tokens_of(&store),
            [
                (word("a"), counts(1, 1)),
                (word("b"), counts(0, 1)),
                (word("c"), counts(1, 0))
            ]
        );
        assert_eq!(store.token(Feature::Word("a")).unwrap(), counts(1, 1));
        assert_eq!(store.token(Feature::Word("zzz")).unwrap(), counts(0, 0));
        assert_eq!(store.totals().unwrap().messages, [1, 1]);
        assert_eq!(store.label_of(&[1; 32]).unwrap(), Some(Label::Spam));
        assert_eq!(store.label_of(&[3; 32]).unwrap(), None);
        assert_eq!(
            (store.token_count().unwrap(), store.registry_len().unwrap()),
            (3, 2)
        );

        store
            .apply(&learn(&["b", "a"], Label::Spam, -1, 1))
            .unwrap();
        store.apply(&learn(&["a", "c"], Label::Ham, -1, 2)).unwrap();
        assert_eq!(
            store,
            MemoryStore::new(),
            "zero counts and registry entries are removed"
        );
    }

    #[test]
    fn counts_that_cannot_be_taken_back_exactly_become_zero_and_are_counted() {
        let mut store = MemoryStore::new();
        store.apply(&learn(&["a", "b"], Label::Spam, 1, 1)).unwrap();
        store.apply(&learn(&["a"], Label::Spam, 1, 2)).unwrap();

        // "c" was never counted (pruned, or counted by another version):
        // it stays at zero, the rest is taken back, and it is said once.
        let inexact = store
            .apply(&learn(&["a", "c"], Label::Spam, -1, 1))
            .unwrap();
        assert_eq!(inexact, 1);
        assert_eq!(
            tokens_of(&store),
            [(word("a"), counts(0, 1)), (word("b"), counts(0, 1))]
        );
        assert_eq!(store.totals().unwrap().messages, [0, 1]);
        assert_eq!(store.label_of(&[1; 32]).unwrap(), None);

        // A class with no messages left has no metadata statistics.
        let inexact = store.apply(&learn(&[], Label::Ham, -1, 9)).unwrap();
        assert_eq!(inexact, 2, "the ham total and its metadata statistics");
        assert_eq!(store.totals().unwrap().messages, [0, 1]);
        assert_eq!(store.totals().unwrap().gauss[0][0], GaussStats::default());

        let before = store.clone();
        let mut d = Delta::default();
        d.words.insert("a".into(), [0, i64::from(u32::MAX)]);
        assert!(matches!(store.apply(&d), Err(Error::Overflow { .. })));
        assert_eq!(store, before);
        // A number that is no bucket cannot be stored.
        let mut d = learn(&["a"], Label::Spam, 1, 3);
        d.grams.insert(1 << crate::vocab::BUCKET_BITS, [0, 1]);
        assert!(matches!(store.apply(&d), Err(Error::Invalid(_))));
        assert_eq!(store, before);
    }

    #[test]
    fn later_registry_entries_win_and_load_counts_copies() {
        let mut store = MemoryStore::new();
        let mut d = learn(&["x"], Label::Ham, 1, 7);
        d.change(Feature::Gram(5))[0] += 1;
        d.registry.push(([7; 32], None));
        d.registry.push(([8; 32], Some(Label::Ham)));
        d.registry.push(([8; 32], Some(Label::Spam)));
        store.apply(&d).unwrap();
        assert_eq!(store.label_of(&[7; 32]).unwrap(), None);
        assert_eq!(store.label_of(&[8; 32]).unwrap(), Some(Label::Spam));

        let copy = MemoryStore::load_counts(&store).unwrap();
        assert_eq!(
            tokens_of(&copy),
            [
                (word("x"), counts(1, 0)),
                (FeatureBuf::Gram(5), counts(1, 0))
            ]
        );
        assert_eq!(tokens_of(&copy), tokens_of(&store));
        assert_eq!(copy.totals().unwrap(), store.totals().unwrap());
    }

    #[test]
    fn errors_read_well() {
        let e = Error::Locked {
            path: "/db".into(),
            waited: Duration::from_millis(2500),
        };
        assert_eq!(
            e.to_string(),
            "database /db is in use by another process (waited 2.5s for it)"
        );
        let e = Error::Version {
            path: "/db".into(),
            found: 2,
            expected: 1,
            what: "tokenizer version",
        };
        assert_eq!(
            e.to_string(),
            "/db was written with tokenizer version 2; this bayesmail needs 1: retrain into a new database"
        );
        let e = Error::Version {
            path: "/db/model.bin".into(),
            found: 1,
            expected: 2,
            what: MODEL_FILE_FORMAT,
        };
        assert_eq!(
            e.to_string(),
            "/db/model.bin was written with model file format version 1; this bayesmail needs 2: \
             its counts are intact, and training on this database again rewrites the model file"
        );
    }

    #[test]
    fn stores_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MemoryStore>();
        check::<SledStore>();
        check::<Snapshot>();
        check::<Error>();
    }
}
