//! The counts in Redis, so that several hosts judge and learn with one set
//! of statistics: the [`Store`] of a fleet, as [`super::SledStore`] is the
//! store of one machine.
//!
//! One model lives under one key prefix, `{NAME}` (the braces are Redis
//! Cluster's hash tag, so that a model's keys share a slot and one script
//! can change them together):
//! - `{NAME}:m`, a hash: `format` (the layout, [`LAYOUT`]), `totals` (the
//!   message counts and metadata statistics, as JSON: their sums need 128
//!   bits, more than Redis integers and Lua numbers hold), `generation`
//!   (how many changes were applied), `tokens` (features with non-zero
//!   counts) and `header` (what the model needs beyond counts, see
//!   [`RedisStore::transact`]).
//! - `{NAME}:w`, a hash: each word token → its counts and the day they
//!   last changed, 12 bytes (ham, spam, days since 1970; unsigned 32-bit
//!   little-endian). The day is what expiry goes by ([`Expiry`]).
//! - `{NAME}:g`, a hash: each byte-view bucket (4 bytes, big-endian) → its
//!   counts, 8 bytes (ham, spam); and from 2^18 on, 2^18 + b → the two
//!   counters of the weight of bucket b of the online discriminative view
//!   ([`crate::model::logistic`]). The buckets are bounded in number and
//!   never expire.
//! - `{NAME}:r`, a hash: each learned message's digest (32 bytes) → its
//!   label (`h` or `s`): the registry that keeps `train` and `learn`
//!   idempotent across hosts.
//! - `{NAME}:s`, a string: the prequential record the stacker of a model
//!   that learns is fitted again from (see [`RedisStore::transact`]);
//!   `samples` in `{NAME}:m` is its version.
//! - `{NAME}:x`, a string while a host caps the model's memory
//!   ([`RedisStore::cap`]): one host at a time does.
//!
//! `NAME` is the prefix the store was opened with (`bayesmail` unless the
//! URL says `?prefix=`), and for a user's model `PREFIX:u:USER`. Prefixes
//! and user names are checked against a small safe set ([`check_name`]):
//! no brace, space or control character can reach a key, and since a user
//! name holds no `:`, no user's keys can be another model's.
//!
//! A change is applied by one Lua script that first checks
//! every count it would write, then writes them all: concurrent changes
//! from many hosts are serialised by Redis, none is lost or applied twice,
//! and one that would overflow a count changes nothing. The totals are
//! computed here from the totals read with their generation; the script
//! refuses the change if another host's change came in between, and it is
//! computed again from the new totals (optimistic concurrency). A count a
//! change would take below zero becomes zero and is counted as inexact, as
//! in every store.
//!
//! Expiry ([`RedisStore::expire`], [`RedisStore::cap`]) removes word
//! tokens by one more script that checks each again as it removes it, so a
//! token a host learned meanwhile stays.
//!
//! Durability is Redis's: [`Store::flush`] does nothing; configure Redis's
//! persistence (AOF or RDB) for the counts to survive a restart of Redis.

use std::time::Duration;

use redis::Script;

mod connection;
mod expiry;
mod scripts;

pub use connection::{
    ASKS_PER_CHANGE, CONNECTIONS, Eviction, Redis, RedisUrl, Unanswered, check_name, out_of_reach,
    within,
};
use expiry::EXPIRE;
pub use expiry::{Capped, Expiry};
use scripts::{APPLY, READ};

use super::{Error, Result, Store, apply_totals, check_buckets, feature_in, slot_of};
use crate::model::{Delta, Label, TokenCounts, Totals};
use crate::vocab::{BUCKET_BITS, Digest, Feature};

/// Version of the key layout above; a model written with another is
/// refused.
pub const LAYOUT: u32 = 2;

/// The prefix of every key unless the URL gives one.
pub const DEFAULT_PREFIX: &str = "bayesmail";

/// How long a command may take before the store gives up, unless the
/// caller says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// Fields of a hash an estimate of its memory samples.
const SAMPLES: u32 = 64;

/// Times a change is computed again when other hosts' changes keep coming
/// in between (each retry means another change was applied).
const RETRIES: usize = 64;

/// The keys of one model.
#[derive(Debug, Clone)]
struct Keys {
    meta: String,
    words: String,
    grams: String,
    registry: String,
    samples: String,
    lock: String,
}

impl Keys {
    fn new(name: &str) -> Keys {
        let key = |k: &str| format!("{{{name}}}:{k}");
        Keys {
            meta: key("m"),
            words: key("w"),
            grams: key("g"),
            registry: key("r"),
            samples: key("s"),
            lock: key("x"),
        }
    }
}

impl Redis {
    /// The users that have a model, sorted (by SCAN: no one command holds
    /// Redis for the whole key space).
    pub fn users(&self) -> Result<Vec<String>> {
        let url = &self.inner.url;
        let pattern = format!("{{{}:u:*}}:m", url.prefix);
        let skip = format!("{{{}:u:", url.prefix).len();
        let mut users = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = self.with(&url.shown, |con| {
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(con)
            })?;
            // A key that is not one of ours (not UTF-8, a name outside the
            // safe set) is passed over.
            for key in keys {
                if let Ok(key) = std::str::from_utf8(&key)
                    && let Some(user) = key.get(skip..key.len().saturating_sub(3))
                    && check_name(user, false).is_ok()
                {
                    users.push(user.to_string());
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        users.sort_unstable();
        users.dedup();
        Ok(users)
    }

    /// The store of the global model (`user` None) or of a user's. Checks
    /// the name only: nothing is read until the store is used.
    pub fn store(&self, user: Option<&str>) -> Result<RedisStore> {
        let url = &self.inner.url;
        let name = match user {
            Some(user) => format!("{}:u:{}", url.prefix, check_name(user, false)?),
            None => url.prefix.clone(),
        };
        let shown = match user {
            Some(user) => format!("{} (user {user})", url.shown),
            None => url.shown.clone(),
        };
        Ok(RedisStore {
            redis: self.clone(),
            keys: Keys::new(&name),
            shown,
            script: Script::new(APPLY),
            read: Script::new(READ),
            expire: Script::new(EXPIRE),
            today: None,
        })
    }
}

/// A model's counts in Redis. See the module's documentation.
pub struct RedisStore {
    redis: Redis,
    keys: Keys,
    shown: String,
    script: Script,
    read: Script,
    expire: Script,
    /// The day changes are stamped with, if not today (tests).
    today: Option<u32>,
}

impl RedisStore {
    /// Connects to the Redis at `url` for the global model (`user` None)
    /// or a user's, each command bounded by `timeout`. A model written
    /// with another key layout is refused. For tests: the commands and
    /// serve open a model through [`Redis::store`], reading nothing.
    #[cfg(test)]
    pub(crate) fn open(
        url: &RedisUrl,
        user: Option<&str>,
        timeout: Duration,
    ) -> Result<RedisStore> {
        let store = Redis::connect(url, timeout)?.store(user)?;
        store.check_layout(None)?;
        Ok(store)
    }

    /// An error unless the model's key layout is this build's (`format`
    /// as read; None: read it).
    fn check_layout(&self, format: Option<Option<u32>>) -> Result<()> {
        let format = match format {
            Some(f) => f,
            None => self.query(redis::cmd("HGET").arg(&self.keys.meta).arg("format"))?,
        };
        match format {
            None | Some(LAYOUT) => Ok(()),
            Some(found) => Err(self.corrupt(format!(
                "key layout {found}; this bayesmail reads layout {LAYOUT}"
            ))),
        }
    }

    /// Runs one command.
    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.redis.with(&self.shown, |con| cmd.query(con))
    }

    /// The totals stored as `json` (None: none yet).
    fn totals_of(&self, json: Option<Vec<u8>>) -> Result<Totals> {
        match json {
            None => Ok(Totals::default()),
            Some(json) => serde_json::from_slice(&json)
                .map_err(|e| self.corrupt(format!("the totals do not read: {e}"))),
        }
    }

    fn corrupt(&self, what: String) -> Error {
        Error::Corrupt {
            path: self.shown.clone().into(),
            reason: what,
        }
    }

    /// What a change is computed from, and the generation it was read
    /// at: the totals, the label the registry has for `digest` (if
    /// asked), and if `record` is the version of the prequential record
    /// the caller holds (0: none), the header and the record unless it is
    /// that version.
    pub(crate) fn read_for_change(
        &self,
        digest: Option<&Digest>,
        record: Option<u64>,
    ) -> Result<(Read, u64)> {
        let mut invocation = self.read.prepare_invoke();
        invocation
            .key(&self.keys.meta)
            .key(&self.keys.registry)
            .key(&self.keys.samples)
            .arg(digest.map_or(&[][..], |d| &d[..]))
            .arg(record.map_or(String::new(), |v| v.to_string()));
        type Answer = (
            Option<Vec<u8>>,
            Option<u64>,
            Option<String>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Option<u64>,
        );
        let (totals, generation, code, record, header, record_version): Answer =
            self.redis.with(&self.shown, |con| invocation.invoke(con))?;
        let totals = self.totals_of(totals)?;
        let label = match (digest, code.as_deref()) {
            (None, _) | (_, None) => None,
            (_, Some("h")) => Some(Label::Ham),
            (_, Some("s")) => Some(Label::Spam),
            (_, Some(other)) => return Err(self.corrupt(format!("a registry label is {other:?}"))),
        };
        let read = Read {
            totals,
            label,
            record,
            record_version: record_version.unwrap_or(0),
            header,
        };
        Ok((read, generation.unwrap_or(0)))
    }

    /// The totals and the generation they were read at.
    fn totals_at(&self) -> Result<(Totals, u64)> {
        let (totals, generation): (Option<Vec<u8>>, Option<u64>) = self.query(
            redis::cmd("HMGET")
                .arg(&self.keys.meta)
                .arg("totals")
                .arg("generation"),
        )?;
        let totals = self.totals_of(totals)?;
        Ok((totals, generation.unwrap_or(0)))
    }

    /// Every field and value of the hash `key` (see
    /// [`RedisStore::scan_pages`]).
    fn scan_hash(&self, key: &str) -> Result<Vec<Field>> {
        let mut out = Vec::new();
        self.scan_pages(key, &mut |page| {
            out.extend(page);
            Ok(())
        })?;
        Ok(out)
    }

    /// Hands `f` the fields and values of the hash `key` page by page, by
    /// HSCAN: no one command holds Redis for the whole hash. A field there
    /// throughout is handed once at least.
    fn scan_pages(&self, key: &str, f: &mut dyn FnMut(Vec<Field>) -> Result<()>) -> Result<()> {
        let mut cursor: u64 = 0;
        loop {
            let (next, page): (u64, Vec<Field>) = self.query(
                redis::cmd("HSCAN")
                    .arg(key)
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(1000),
            )?;
            f(page)?;
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// The counts stored as `value` under the bucket or word `field`, and
    /// for a word the day they last changed: `value` must be 8 bytes for a
    /// bucket, 12 for a word.
    fn decode(
        &self,
        field: &dyn std::fmt::Display,
        value: &[u8],
        word: bool,
    ) -> Result<(TokenCounts, u32)> {
        let expected = if word { 12 } else { 8 };
        if value.len() != expected {
            return Err(self.corrupt(format!(
                "the counts of {field} are {} bytes, not {expected}",
                value.len()
            )));
        }
        let part =
            |i: usize| u32::from_le_bytes([value[i], value[i + 1], value[i + 2], value[i + 3]]);
        let counts = TokenCounts {
            ham: part(0),
            spam: part(4),
        };
        Ok((counts, if word { part(8) } else { 0 }))
    }

    /// The script's arguments for `write` on totals `totals` read at
    /// generation `generation`.
    fn arguments(&self, write: &Write, totals: &Totals, generation: u64) -> Result<Vec<Vec<u8>>> {
        let delta = &write.delta;
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(8 + delta.words.len() + delta.grams.len());
        args.push(generation.to_string().into_bytes());
        args.push(
            serde_json::to_vec(totals)
                .map_err(|e| Error::Invalid(format!("the totals do not serialise: {e}")))?,
        );
        args.push(self.today().to_string().into_bytes());
        args.push(write.record.clone().unwrap_or_default());
        args.push(write.header.clone().unwrap_or_default());
        args.push(
            write
                .record
                .as_deref()
                .map_or(String::new(), |r| record_version(r).to_string())
                .into_bytes(),
        );
        // Each view's changes grouped by their (Δham, Δspam) (a message's
        // are all one): the number of groups, then for each Δham, Δspam,
        // the number of fields and the fields.
        let mut section = |changes: Vec<(Vec<u8>, [i64; 2])>| {
            let mut groups: std::collections::BTreeMap<[i64; 2], Vec<Vec<u8>>> =
                std::collections::BTreeMap::new();
            for (field, d) in changes {
                groups.entry(d).or_default().push(field);
            }
            args.push(groups.len().to_string().into_bytes());
            for (d, fields) in groups {
                args.push(d[0].to_string().into_bytes());
                args.push(d[1].to_string().into_bytes());
                args.push(fields.len().to_string().into_bytes());
                args.extend(fields);
            }
        };
        let changed = |d: &[i64; 2]| *d != [0, 0];
        section(
            delta
                .words
                .iter()
                .filter(|(_, d)| changed(d))
                .map(|(w, d)| (w.as_bytes().to_vec(), *d))
                .collect(),
        );
        let grams = delta.grams.iter().map(|(&b, d)| (Feature::Gram(b), d));
        let weights = delta.weights.iter().map(|(&b, d)| (Feature::Weight(b), d));
        section(
            grams
                .chain(weights)
                .filter(|(_, d)| changed(d))
                .filter_map(|(f, d)| Some((slot_of(f)?.to_be_bytes().to_vec(), *d)))
                .collect(),
        );
        // Later entries for the same digest win, as the script applies
        // them in order.
        for (digest, label) in &delta.registry {
            args.push(digest.to_vec());
            args.push(label.map_or("", label_code).as_bytes().to_vec());
        }
        Ok(args)
    }
}

impl RedisStore {
    /// Applies the change `change` computes from what it is given to read
    /// (the totals; the label `digest` has in the registry, None: not
    /// learned or `digest` None; with `record` Some, the header and the
    /// prequential record, the latter only if it is not the version
    /// `record` says the caller holds), as one transaction: if any other
    /// change lands between the reads and the write, the reads and
    /// `change` are done again.
    /// `change` returning None writes nothing. Returns the label it saw
    /// and, when it wrote, the counts made inexact. This is how a host
    /// learns a message exactly once however many hosts learn it at once,
    /// and keeps its sample in the record exactly when it is counted.
    pub fn transact(
        &self,
        mut change: impl FnMut(&Read) -> Result<Option<Write>>,
        digest: Option<&Digest>,
        record: Option<u64>,
    ) -> Result<(Option<Label>, Option<u64>)> {
        for _ in 0..RETRIES {
            // What the change is computed from, in one round trip (one
            // script: one moment); a change landing after it moves the
            // generation, so the script refuses what was computed from
            // these reads.
            let (read, generation) = self.read_for_change(digest, record)?;
            let Some(write) = change(&read)? else {
                return Ok((read.label, None));
            };
            check_buckets(&write.delta)?;
            let mut inexact = 0;
            let totals = apply_totals(&read.totals, &write.delta, &mut inexact)?;
            if let Some(n) = self.try_apply(&write, &totals, generation)? {
                return Ok((read.label, Some(inexact + n)));
            }
        }
        Err(Error::Contended {
            at: self.shown.clone(),
            tries: RETRIES,
        })
    }

    /// Runs the script: `write` with the new `totals`, if the generation
    /// is still `generation`. None if it moved (nothing written).
    fn try_apply(&self, write: &Write, totals: &Totals, generation: u64) -> Result<Option<u64>> {
        let args = self.arguments(write, totals, generation)?;
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(&self.keys.meta)
            .key(&self.keys.words)
            .key(&self.keys.grams)
            .key(&self.keys.registry)
            .key(&self.keys.samples);
        for a in &args {
            invocation.arg(&a[..]);
        }
        let answer: (i64, redis::Value) =
            self.redis.with(&self.shown, |con| invocation.invoke(con))?;
        match answer {
            (-1, _) => Ok(None),
            (-2, field) => {
                let field = match field {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => format!("{other:?}"),
                };
                Err(Error::Overflow { token: field })
            }
            (_, redis::Value::Int(n)) => Ok(Some(n as u64)),
            (_, other) => Err(self.corrupt(format!("the apply script answered {other:?}"))),
        }
    }

    /// What judging a message needs, in one round trip: the counts of
    /// `words` and of `slots`, the byte view's buckets and the weights by
    /// where they are kept ([`crate::store::slot_of`]) (None: never seen), the totals, the
    /// generation they are at, and the header [`RedisStore::transact`]
    /// stored (None: none yet). A model of another key layout is an
    /// error.
    pub fn lookup(&self, words: &[&str], slots: &[u32]) -> Result<Lookup> {
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET")
            .arg(&self.keys.meta)
            .arg("totals")
            .arg("generation")
            .arg("header")
            .arg("format");
        // HMGET needs a field: an empty list asks for one that is never
        // stored (every stored field has a length).
        pipe.cmd("HMGET").arg(&self.keys.words);
        if words.is_empty() {
            pipe.arg("");
        }
        for w in words {
            pipe.arg(*w);
        }
        pipe.cmd("HMGET").arg(&self.keys.grams);
        if slots.is_empty() {
            pipe.arg("");
        }
        for b in slots {
            pipe.arg(&b.to_be_bytes()[..]);
        }
        type Meta = (Option<Vec<u8>>, Option<u64>, Option<Vec<u8>>, Option<u32>);
        type Values = Vec<Option<Vec<u8>>>;
        let (meta, mut word_values, mut gram_values): (Meta, Values, Values) = self
            .redis
            .with_answers(&self.shown, 3, |con| pipe.query(con))?;
        word_values.truncate(words.len());
        gram_values.truncate(slots.len());
        if word_values.len() != words.len() || gram_values.len() != slots.len() {
            return Err(self.corrupt("the lookup script answered for other features".into()));
        }
        self.check_layout(Some(meta.3))?;
        let totals = self.totals_of(meta.0)?;
        let mut out = Lookup {
            words: Vec::with_capacity(words.len()),
            grams: Vec::with_capacity(slots.len()),
            totals,
            generation: meta.1.unwrap_or(0),
            header: meta.2,
        };
        for (w, v) in words.iter().zip(word_values) {
            out.words.push(
                v.map(|v| self.decode(w, &v, true).map(|d| d.0))
                    .transpose()?,
            );
        }
        for (b, v) in slots.iter().zip(gram_values) {
            out.grams.push(
                v.map(|v| self.decode(b, &v, false).map(|d| d.0))
                    .transpose()?,
            );
        }
        Ok(out)
    }

    /// Bytes of Redis memory the model's keys take (Redis's `MEMORY
    /// USAGE`): `exact`, every field counted (a command that holds Redis
    /// for as long as the model is large), or estimated from a sample of
    /// each hash's fields.
    pub fn memory(&self, exact: bool) -> Result<Memory> {
        let mut pipe = redis::pipe();
        for key in [
            &self.keys.meta,
            &self.keys.words,
            &self.keys.grams,
            &self.keys.registry,
            &self.keys.samples,
        ] {
            pipe.cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .arg("SAMPLES")
                .arg(if exact { 0 } else { SAMPLES });
        }
        let sizes: Vec<Option<u64>> = self
            .redis
            .with_answers(&self.shown, 5, |con| pipe.query(con))?;
        let size = |i: usize| sizes.get(i).copied().flatten().unwrap_or(0);
        Ok(Memory {
            meta: size(0),
            words: size(1),
            grams: size(2),
            registry: size(3),
            samples: size(4),
        })
    }

    /// Where it is, for messages: the URL without its password, and the
    /// user.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

/// Bytes of Redis memory a model's keys take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Memory {
    /// The totals, the header and the rest of `{NAME}:m`.
    pub meta: u64,
    /// The word tokens.
    pub words: u64,
    /// The byte view's buckets.
    pub grams: u64,
    /// The registry of learned messages.
    pub registry: u64,
    /// The prequential record.
    pub samples: u64,
}

impl Memory {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.meta + self.words + self.grams + self.registry + self.samples
    }
}

/// The version a prequential record is stored under: a hash of it, so
/// that a host holding a record of the version Redis has holds that
/// record, even after Redis lost changes (restarted from an older file,
/// failed over to a replica behind) and others were made since.
pub fn record_version(record: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(record).max(1)
}

/// What a change is computed from ([`RedisStore::transact`]), read at one
/// moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Read {
    /// The totals.
    pub totals: Totals,
    /// The label the registry has for the digest asked (None: not learned,
    /// or not asked).
    pub label: Option<Label>,
    /// The prequential record as stored, if asked, there is one, and it
    /// is not the version the caller holds.
    pub record: Option<Vec<u8>>,
    /// The version of the stored record (0: none, or not asked; see
    /// [`record_version`]).
    pub record_version: u64,
    /// The header, if asked and there is one.
    pub header: Option<Vec<u8>>,
}

/// A change [`RedisStore::transact`] writes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Write {
    /// The counts, totals and registry entries it changes.
    pub delta: Delta,
    /// The new prequential record (None: unchanged).
    pub record: Option<Vec<u8>>,
    /// The new header (None: unchanged).
    pub header: Option<Vec<u8>>,
}

/// The answer of [`RedisStore::lookup`].
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    /// The counts of each word asked, in order.
    pub words: Vec<Option<TokenCounts>>,
    /// The counts of each bucket or weight asked, in order.
    pub grams: Vec<Option<TokenCounts>>,
    /// The totals.
    pub totals: Totals,
    /// How many changes the model has had: equal generations, equal
    /// totals and header.
    pub generation: u64,
    /// The stored header, if any.
    pub header: Option<Vec<u8>>,
}

/// A hash's field and value.
type Field = (Vec<u8>, Vec<u8>);

fn label_code(label: Label) -> &'static str {
    match label {
        Label::Ham => "h",
        Label::Spam => "s",
    }
}

impl RedisStore {
    /// Every entry of the bucket hash (the byte view's buckets and the
    /// weights, by slot: [`slot_of`]) with its counts, in slot order.
    fn slots(&self) -> Result<Vec<(u32, TokenCounts)>> {
        let mut slots = Vec::new();
        for (field, value) in self.scan_hash(&self.keys.grams)? {
            let slot = <[u8; 4]>::try_from(&field[..])
                .ok()
                .map(u32::from_be_bytes)
                .filter(|&b| b < 2 << BUCKET_BITS)
                .ok_or_else(|| self.corrupt("a byte-view bucket is no bucket".into()))?;
            slots.push((slot, self.decode(&slot, &value, false)?.0));
        }
        slots.sort_unstable_by_key(|s| s.0);
        Ok(slots)
    }
}

impl Store for RedisStore {
    fn totals(&self) -> Result<Totals> {
        Ok(self.totals_at()?.0)
    }

    fn token(&self, feature: Feature<'_>) -> Result<TokenCounts> {
        let value: Option<Vec<u8>> = match feature {
            Feature::Word(word) => {
                self.query(redis::cmd("HGET").arg(&self.keys.words).arg(word))?
            }
            Feature::Gram(_) | Feature::Weight(_) => match slot_of(feature) {
                Some(slot) => self.query(
                    redis::cmd("HGET")
                        .arg(&self.keys.grams)
                        .arg(&slot.to_be_bytes()[..]),
                )?,
                None => None,
            },
        };
        match value {
            Some(v) => Ok(self
                .decode(&feature, &v, matches!(feature, Feature::Word(_)))?
                .0),
            None => Ok(TokenCounts::default()),
        }
    }

    fn label_of(&self, digest: &Digest) -> Result<Option<Label>> {
        let code: Option<String> =
            self.query(redis::cmd("HGET").arg(&self.keys.registry).arg(&digest[..]))?;
        match code.as_deref() {
            None => Ok(None),
            Some("h") => Ok(Some(Label::Ham)),
            Some("s") => Ok(Some(Label::Spam)),
            Some(other) => Err(self.corrupt(format!("a registry label is {other:?}"))),
        }
    }

    fn token_count(&self) -> Result<u64> {
        let n: Option<u64> = self.query(redis::cmd("HGET").arg(&self.keys.meta).arg("tokens"))?;
        Ok(n.unwrap_or(0))
    }

    fn registry_len(&self) -> Result<u64> {
        self.query(redis::cmd("HLEN").arg(&self.keys.registry))
    }

    fn for_each_token(&self, f: &mut dyn FnMut(Feature<'_>, TokenCounts)) -> Result<()> {
        let mut words = self.scan_hash(&self.keys.words)?;
        words.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (field, value) in &words {
            let word = std::str::from_utf8(field)
                .map_err(|_| self.corrupt("a word token is not UTF-8".into()))?;
            let (counts, _) = self.decode(&word, value, true)?;
            f(Feature::Word(word), counts);
        }
        for (slot, counts) in self.slots()? {
            f(feature_in(slot), counts);
        }
        Ok(())
    }

    fn weights(&self) -> Result<Vec<(u32, TokenCounts)>> {
        let weights = self.slots()?.into_iter();
        let weights = weights.filter_map(|(slot, counts)| match feature_in(slot) {
            Feature::Weight(bucket) => Some((bucket, counts)),
            _ => None,
        });
        Ok(weights.collect())
    }

    fn apply(&mut self, delta: &Delta) -> Result<u64> {
        check_buckets(delta)?;
        let write = Write {
            delta: delta.clone(),
            ..Write::default()
        };
        let (_, inexact) = self.transact(|_| Ok(Some(write.clone())), None, None)?;
        Ok(inexact.unwrap_or(0))
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::store::MemoryStore;
    use crate::store::testkit::*;

    const WAIT: Duration = Duration::from_secs(5);

    fn open(server: &RedisServer, prefix: &str, user: Option<&str>) -> RedisStore {
        let url = RedisUrl::parse(&server.url(&format!("/0?prefix={prefix}"))).unwrap();
        RedisStore::open(&url, user, WAIT).unwrap()
    }

    /// A message of more features than Lua can unpack at once (8,000), or
    /// of none: each answered, in order.
    #[test]
    fn a_lookup_answers_for_every_feature_asked_in_order() {
        let server = RedisServer::start();
        let mut store = open(&server, "many", None);
        store
            .apply(&message_of(
                &[Feature::Word("w00007"), Feature::Gram(9)],
                Label::Spam,
                1,
                1,
                0,
            ))
            .unwrap();
        let words: Vec<String> = (0..20_000).map(|i| format!("w{i:05}")).collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let grams: Vec<u32> = (0..20_000).collect();
        let found = store.lookup(&words, &grams).unwrap();
        assert_eq!(found.words.len(), words.len());
        assert_eq!(found.grams.len(), grams.len());
        let seen = TokenCounts { ham: 0, spam: 1 };
        for (i, c) in found.words.iter().enumerate() {
            assert_eq!(*c, (i == 7).then_some(seen), "word {i}");
        }
        for (i, c) in found.grams.iter().enumerate() {
            assert_eq!(*c, (i == 9).then_some(seen), "bucket {i}");
        }
        let none = store.lookup(&[], &[]).unwrap();
        assert_eq!((none.words.len(), none.grams.len()), (0, 0));
        assert_eq!(none.totals.messages, [0, 1]);
    }

    #[test]
    fn the_script_writes_the_layout_this_build_reads() {
        assert!(APPLY.contains(&format!("'format', '{LAYOUT}'")));
    }

    /// The acceptance property: whatever sequence of learning and
    /// unlearning, the Redis store shows exactly what the memory store
    /// shows, counts the same inexact counts, refuses exactly what it
    /// refuses, and a refused delta changes neither; a second connection
    /// (another host) sees the same. One Redis for every case (each under a
    /// prefix of its own), stopped when the test ends.
    #[test]
    fn redis_store_equals_memory_store() {
        use proptest::test_runner::{Config, TestRunner};
        let server = RedisServer::start();
        let case = std::cell::Cell::new(0);
        let mut runner = TestRunner::new(Config {
            cases: 24,
            ..Config::default()
        });
        let deltas = prop::collection::vec(delta_strategy(), 1..24);
        let result = runner.run(&deltas, |deltas| {
            case.set(case.get() + 1);
            let prefix = format!("case{}", case.get());
            let mut redis = open(&server, &prefix, None);
            let other = open(&server, &prefix, None);
            let mut memory = MemoryStore::new();
            for delta in &deltas {
                let before = memory.clone();
                match (memory.apply(delta), redis.apply(delta)) {
                    (Ok(m), Ok(r)) => prop_assert_eq!(m, r, "inexact counts"),
                    (Err(Error::Overflow { .. }), Err(Error::Overflow { .. })) => {
                        prop_assert_eq!(&memory, &before);
                    }
                    (m, r) => prop_assert!(false, "memory: {:?}, redis: {:?}", m, r),
                }
                prop_assert_eq!(dump(&redis), dump(&memory));
            }
            prop_assert_eq!(dump(&other), dump(&memory));
            Ok(())
        });
        if let Err(failure) = result {
            panic!("{failure}");
        }
    }

    #[test]
    fn concurrent_learns_from_many_connections_all_count_once() {
        let server = RedisServer::start();
        let url = server.url("/1");
        let threads = 8;
        let per_thread = 25;
        let mut expected = MemoryStore::new();
        let deltas: Vec<Vec<Delta>> = (0..threads)
            .map(|t| {
                (0..per_thread)
                    .map(|k| {
                        let label = if (t + k) % 3 == 0 {
                            Label::Spam
                        } else {
                            Label::Ham
                        };
                        let words = ["shared", if k % 2 == 0 { "even" } else { "odd" }];
                        let mut d = message(&words, label, 1, 0, 7 << 40);
                        // A digest of its own per message.
                        d.registry[0].0[0] = t as u8;
                        d.registry[0].0[1] = k as u8;
                        d
                    })
                    .collect()
            })
            .collect();
        for d in deltas.iter().flatten() {
            expected.apply(d).unwrap();
        }
        std::thread::scope(|scope| {
            for mine in &deltas {
                let url = url.clone();
                scope.spawn(move || {
                    let mut store =
                        RedisStore::open(&RedisUrl::parse(&url).unwrap(), None, WAIT).unwrap();
                    for d in mine {
                        assert_eq!(store.apply(d).unwrap(), 0);
                    }
                });
            }
        });
        let store = RedisStore::open(&RedisUrl::parse(&url).unwrap(), None, WAIT).unwrap();
        assert_eq!(store.totals().unwrap(), expected.totals().unwrap());
        assert_eq!(
            store.token(Feature::Word("shared")).unwrap(),
            expected.token(Feature::Word("shared")).unwrap()
        );
        assert_eq!(store.registry_len().unwrap(), (threads * per_thread) as u64);
        assert_eq!(store.totals_at().unwrap().1, (threads * per_thread) as u64);
    }

    #[test]
    fn a_count_never_goes_negative_and_an_overflow_changes_nothing() {
        let server = RedisServer::start();
        let mut store = open(&server, "bounds", None);
        store
            .apply(&message(&["a", "b"], Label::Spam, 1, 1, 0))
            .unwrap();
        // Unlearning twice: the second takes counts below zero.
        store
            .apply(&message(&["a", "b"], Label::Spam, -1, 1, 0))
            .unwrap();
        let inexact = store
            .apply(&message(&["a"], Label::Spam, -1, 1, 0))
            .unwrap();
        assert!(inexact >= 2, "{inexact}");
        assert_eq!(
            store.token(Feature::Word("a")).unwrap(),
            TokenCounts::default()
        );
        assert_eq!(store.token_count().unwrap(), 0);

        store.apply(&message(&["c"], Label::Ham, 1, 2, 0)).unwrap();
        let before = dump(&store);
        let mut huge = message(&["c", "d"], Label::Ham, 1, 3, 0);
        huge.words.insert("c".into(), [i64::from(u32::MAX), 0]);
        assert!(matches!(store.apply(&huge), Err(Error::Overflow { .. })));
        assert_eq!(
            dump(&store),
            before,
            "an overflowing change wrote something"
        );
    }

    #[test]
    fn users_have_keys_of_their_own_and_no_name_reaches_another_key() {
        let server = RedisServer::start();
        let mut alice = open(&server, "bm", Some("alice@example.org"));
        alice
            .apply(&message(&["hello"], Label::Ham, 1, 1, 0))
            .unwrap();
        let global = open(&server, "bm", None);
        let bob = open(&server, "bm", Some("bob@example.org"));
        for other in [&global, &bob] {
            assert_eq!(other.totals().unwrap(), Totals::default());
            assert_eq!(other.label_of(&[1; 32]).unwrap(), None);
        }
        assert_eq!(alice.totals().unwrap().messages, [1, 0]);
        let url = RedisUrl::parse(&server.url("/0?prefix=bm")).unwrap();
        for bad in [
            "a}b",
            "{bm}",
            "a:b",
            "a b",
            "a\r\nFLUSHALL",
            "",
            "ä",
            &"x".repeat(256),
        ] {
            let err = RedisStore::open(&url, Some(bad), WAIT).err().expect(bad);
            assert!(matches!(err, Error::Invalid(_)), "{bad:?}: {err}");
        }
        for bad in ["a}b", "{x", "a b", "x*"] {
            let err = RedisUrl::parse(&server.url(&format!("/0?prefix={bad}"))).unwrap_err();
            assert!(err.to_string().contains("not allowed"), "{bad:?}: {err}");
        }
    }

    /// The users listed are those with a model; a key in the users' space
    /// that is not one of ours (not UTF-8, a name outside the safe set)
    /// is passed over, not an error.
    #[test]
    fn users_are_listed_and_keys_not_ours_are_passed_over() {
        let server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0?prefix=list")).unwrap();
        let redis = Redis::connect(&url, WAIT).unwrap();
        for user in ["bob", "alice@example.org"] {
            let mut store = redis.store(Some(user)).unwrap();
            store.apply(&message(&["x"], Label::Ham, 1, 1, 0)).unwrap();
        }
        let odd = open(&server, "list", None);
        for key in [&b"{list:u:\xff}:m"[..], b"{list:u:a b}:m"] {
            let _: () = odd
                .query(redis::cmd("HSET").arg(key).arg("format").arg(2))
                .unwrap();
        }
        assert_eq!(redis.users().unwrap(), ["alice@example.org", "bob"]);
    }

    /// An ACL user with its password in the URL works; a wrong password is
    /// refused, and the error does not show it.
    #[test]
    fn an_acl_user_and_password_log_in_and_a_wrong_one_is_refused() {
        let server = RedisServer::start();
        let admin = open(&server, "acl", None);
        let _: () = admin
            .query(
                redis::cmd("ACL")
                    .arg("SETUSER")
                    .arg("fleet")
                    .arg("on")
                    .arg(">s3cret")
                    .arg("~{bayesmail*")
                    .arg("+@all"),
            )
            .unwrap();
        let url = RedisUrl::parse(
            &server
                .url("/0")
                .replace("redis://", "redis://fleet:s3cret@"),
        )
        .unwrap();
        let mut store = RedisStore::open(&url, None, WAIT).unwrap();
        store
            .apply(&message(&["acl"], Label::Ham, 1, 1, 0))
            .unwrap();
        assert_eq!(store.totals().unwrap().messages, [1, 0]);
        let wrong =
            RedisUrl::parse(&server.url("/0").replace("redis://", "redis://fleet:wrong@")).unwrap();
        let err = RedisStore::open(&wrong, None, WAIT)
            .err()
            .unwrap()
            .to_string();
        assert!(!err.contains("wrong"), "{err}");
        assert!(
            err.starts_with("Redis at redis://fleet:***@127.0.0.1"),
            "{err}"
        );
        // A Redis that wants a password the URL does not give says so,
        // whether it answers NOAUTH (a small command) or closes the
        // connection (a large one from a client not logged in).
        let _: () = admin
            .query(
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("requirepass")
                    .arg("s3cret"),
            )
            .unwrap();
        let none = RedisUrl::parse(&server.url("/0")).unwrap();
        let err = RedisStore::open(&none, None, WAIT)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("authentication required"), "{err}");
        let store = Redis::new(&none, WAIT).unwrap().store(None).unwrap();
        let words: Vec<String> = (0..5_000).map(|i| format!("word{i}")).collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let err = store.lookup(&words, &[]).unwrap_err().to_string();
        assert!(err.contains("authentication required"), "{err}");
    }

    #[test]
    fn urls_keep_their_password_out_of_messages() {
        let url = RedisUrl::parse("redis://fleet:s3cret@127.0.0.1:6379/2?prefix=mail").unwrap();
        assert!(!url.shown().contains("s3cret"), "{}", url.shown());
        assert_eq!(url.prefix(), "mail");
        assert_eq!(
            RedisUrl::parse("redis://127.0.0.1/").unwrap().prefix(),
            DEFAULT_PREFIX
        );
        for bad in ["http://127.0.0.1/", "redis://127.0.0.1/x", "not a url"] {
            assert!(RedisUrl::parse(bad).is_err(), "{bad}");
        }
        // A prefix that would name another prefix's user's model.
        let err = RedisUrl::parse("redis://127.0.0.1/0?prefix=pc:u:alice")
            .unwrap_err()
            .to_string();
        assert!(err.contains(":u:"), "{err}");
        assert_eq!(
            RedisUrl::parse("redis://127.0.0.1/0?prefix=site:mail")
                .unwrap()
                .prefix(),
            "site:mail"
        );
        // Refused with the password still hidden, and a password with
        // characters a URL reads as its own (a generator's, unescaped)
        // as well, with what to do.
        let err = RedisUrl::parse("http://u:s3cret@h/")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("s3cret"), "{err}");
        for url in [
            "redis://:Zx9/Qw+e=@127.0.0.1:6379/0",
            "redis://:Zx9#Qw@127.0.0.1:6379/0",
            "redis://fleet:a?b@c@127.0.0.1/0",
            "redis://fleet:4821/Qx9secret@127.0.0.1/0",
            "redis://fleet:4821?Qx9secret@127.0.0.1/0",
            "redis://127.0.0.1/0?pass=Qx9secret",
        ] {
            let err = RedisUrl::parse(url).unwrap_err().to_string();
            for part in ["Zx9", "Qw", "a?b", "Qx9"] {
                assert!(!err.contains(part), "{url}: {err}");
            }
        }
        // One that parses into a host of the password's first part still
        // hides the rest wherever the store is named.
        let odd = RedisUrl::parse("redis://fleet:4821#Qx9secret@127.0.0.1/0").unwrap();
        assert!(!odd.shown().contains("Qx9"), "{}", odd.shown());
        assert!(
            RedisUrl::parse("redis://:Zx9/Qw+e=@127.0.0.1:6379/0")
                .unwrap_err()
                .to_string()
                .contains("%2F")
        );
        // The client library's own option is its.
        RedisUrl::parse("redis://127.0.0.1/0?protocol=resp3&prefix=p").unwrap();
        // An option misspelt is refused, not passed over.
        for url in [
            "redis://127.0.0.1/0?Prefix=tenant2",
            "redis://127.0.0.1/0?prefx=tenant2",
            "redis://127.0.0.1/?db=4",
        ] {
            let err = RedisUrl::parse(url).unwrap_err().to_string();
            assert!(err.contains("unknown option"), "{err}");
        }
    }

    #[test]
    fn a_redis_that_is_gone_is_a_clear_error_within_the_timeout_and_use_resumes_when_it_is_back() {
        let mut server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0")).unwrap();
        let mut store = RedisStore::open(&url, None, Duration::from_millis(500)).unwrap();
        store.apply(&message(&["x"], Label::Ham, 1, 1, 0)).unwrap();
        server.kill();
        let started = std::time::Instant::now();
        let err = store
            .apply(&message(&["y"], Label::Ham, 1, 2, 0))
            .unwrap_err();
        assert!(matches!(err, Error::Redis { .. }), "{err}");
        assert!(
            err.to_string().starts_with("Redis at redis://127.0.0.1:"),
            "{err}"
        );
        let err = RedisStore::open(&url, None, Duration::from_millis(500))
            .err()
            .unwrap();
        assert!(matches!(err, Error::Redis { .. }), "{err}");
        // Bounded work: both failures together well inside a few timeouts.
        assert!(started.elapsed() < Duration::from_secs(5));
        // The same store works again once Redis is back (it keeps nothing
        // here: this one persists nothing).
        server.restart();
        store.apply(&message(&["z"], Label::Spam, 1, 3, 0)).unwrap();
        assert_eq!(store.totals().unwrap().messages, [0, 1]);
    }

    /// A Redis that hangs (stopped, its connections open): a lookup on a
    /// connection kept from before, and one on a new connection, each
    /// fail as Redis errors, and the same store works once it answers.
    #[test]
    fn a_redis_that_hangs_is_an_error_and_use_resumes_when_it_answers() {
        let server = RedisServer::start();
        let url = RedisUrl::parse(&server.url("/0")).unwrap();
        let timeout = Duration::from_millis(200);
        let mut store = RedisStore::open(&url, None, timeout).unwrap();
        store.apply(&message(&["x"], Label::Ham, 1, 1, 0)).unwrap();
        server.pause();
        let kept = store.lookup(&["x"], &[]).unwrap_err();
        let kept_text = kept.to_string();
        let fresh = Redis::new(&url, timeout)
            .unwrap()
            .store(None)
            .unwrap()
            .lookup(&["x"], &[])
            .unwrap_err();
        server.resume();
        for err in [kept, fresh] {
            assert!(matches!(err, Error::Redis { .. }), "{err}");
        }
        assert!(kept_text.contains("no answer within 200 ms"), "{kept_text}");
        let found = store.lookup(&["x"], &[]).unwrap();
        assert_eq!(found.words, [Some(TokenCounts { ham: 1, spam: 0 })]);
    }

    #[test]
    fn a_model_of_another_layout_is_refused() {
        let server = RedisServer::start();
        let store = open(&server, "old", None);
        let _: () = store
            .query(
                redis::cmd("HSET")
                    .arg(&store.keys.meta)
                    .arg("format")
                    .arg(9),
            )
            .unwrap();
        let url = RedisUrl::parse(&server.url("/0?prefix=old")).unwrap();
        let err = RedisStore::open(&url, None, WAIT).err().unwrap();
        assert!(err.to_string().contains("key layout 9"), "{err}");
    }
}
