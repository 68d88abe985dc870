//! The model journal: the count changes made since the snapshot was
//! compiled, appended one entry per `learn` or `unlearn`, so that teaching
//! one message costs in proportion to the message, not to the vocabulary
//! (recompiling the snapshot reads every token).
//!
//! Readers apply it on top of the snapshot it names. The writer (who holds
//! the writers' lock, so there is one at a time) appends to it and, past a
//! size bound, folds everything into a new snapshot and removes it.
//!
//! `learn` and `unlearn` append to it without changing the count store
//! (see `db::quick`): entries carry their registry changes,
//! and until the next writer opens the store and takes in the entries past
//! its generation, store + journal are the truth.

//! # Which snapshot it applies to
//! The journal's header names the [`StoreIdentity`] the snapshot was compiled
//! at; each entry carries the store generation before and after its change.
//! Entries are applied while they chain (the first starts at the header's
//! generation, each next one where the previous ended) and their checksums
//! match; the first one that does not (a tail torn by a writer killed while
//! appending) ends the journal. A journal whose header names another
//! snapshot (one left behind by a writer killed between writing a new
//! snapshot and removing the journal) applies to nothing and is ignored.
//!
//! A writer that changes the count store itself (a training run, or a
//! `learn` that cannot take the journal alone) changes it before it writes
//! a new snapshot, so one killed in between leaves a store ahead of
//! snapshot + journal: the next writer sees it (its generation is past the
//! journal's end) and compiles.
//!
//! # Layout
//! All integers little-endian.
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `BAYESJNL` |
//! | 4 | `u32` journal format version ([`JOURNAL_VERSION`]) |
//! | 4 | `u32` length `k` of the store id |
//! | `k` | the store id (UTF-8) |
//! | 8 | `u64` store generation of the snapshot |
//! | 8 | `u64` checksum of the bytes above |
//!
//! then entries, each:
//!
//! | bytes | content |
//! |---|---|
//! | 4 | `u32` length `p` of the payload |
//! | 4 | the low 32 bits of the checksum of those 4 bytes (from version 3) |
//! | `p` | payload |
//! | 8 | `u64` checksum of the bytes above of this entry |
//!
//! The payload: `u64` generation before, `u64` generation after, 2 × `i64`
//! message-count changes (ham, spam), for ham then spam and each metadata
//! feature `n` `i64`, `sum` `i128`, `sum_sq` `i128`; `u32` number of tokens,
//! then per token `u16` length, the token (UTF-8; a byte-view bucket under
//! its name, U+0001 and the bucket in five lower-case hex digits; the
//! buckets come first, in bucket order, then the words in byte order),
//! `i32` ham and `i32` spam change; then the online discriminative view's
//! weights ([`crate::model::logistic`]), grouped by their change (a
//! message steps all of its weights alike): `u32` number of groups, each
//! `i32` change of the negative and `i32` of the positive counter, `u32`
//! number of buckets and each bucket (`u32`); then `u32` number of registry changes, each the message digest
//! (32 bytes) and one byte: 0 learned as ham, 1 as spam, 2 forgotten;
//! then one byte, 1 if the change refitted the stacker, followed by its
//! weights and intercept (`f64` each) and the `u64` number of samples it
//! was fitted on, or 0.
//! Version 1 had no registry changes (its counts were in the count store
//! already), versions 1 and 2 no check of an entry's length, versions 1 to
//! 3 no stacker, version 4 a stacker of one input fewer (no online
//! discriminative view, whose weight is then 0) and no weights: readers
//! still apply them; writers do not append to them, and the next writer
//! rewrites the snapshot.
//!
//! # Damage
//! An entry whose length, checksum or chain is wrong, or bytes after the
//! last entry that are not one, make the journal damaged: readers fail
//! (`filter` passes the message on with a reason) and writers neither fold
//! nor delete it (see [`crate::db::Trainer::open`]). Only a last entry
//! cut short, which a writer killed while appending leaves and never
//! acknowledged, is left out without an error; the length check tells it
//! from a damaged length.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use super::checksum::checksum;
use super::keys::{self, GramName};
use super::{Error, Result, StoreIdentity};
use crate::decision::Calibrator;
use crate::decision::calibrate::{INPUTS, LOGISTIC};
use crate::fsutil;
use crate::fsutil::write_atomically;
use crate::model::{Delta, GaussStats, Label, TokenCounts, Totals};
use crate::vocab::Digest;
use crate::vocab::Feature;
use crate::vocab::METADATA_LEN;

/// Version of the journal layout.
pub const JOURNAL_VERSION: u32 = 5;

/// First bytes of every journal file.
pub(crate) const JOURNAL_MAGIC: &[u8; 8] = b"BAYESJNL";

/// The size past which a writer folds the journal into a new snapshot
/// instead of appending: readers parse the whole journal on every open, so
/// this bounds what a `filter` pays for recent learning.
pub const DEFAULT_JOURNAL_LIMIT: u64 = 1 << 20;

/// The most a journal ever holds, whatever limit its writer was given:
/// readers refuse a larger file without reading it.
pub const MAX_JOURNAL_BYTES: u64 = 16 << 20;

/// One change: what one writer's session did to the counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    /// Store generation before the change.
    pub from: u64,
    /// Store generation after the change.
    pub to: u64,
    /// Change of message counts per class.
    pub messages: [i64; 2],
    /// Change of metadata statistics per class and feature.
    pub gauss: [[GaussStats; METADATA_LEN]; 2],
    /// Change of word token counts, `[ham, spam]`, in byte order of the
    /// word.
    pub words: Vec<(String, [i32; 2])>,
    /// Change of the byte view's counts, `[ham, spam]`, in bucket order.
    pub grams: Vec<(u32, [i32; 2])>,
    /// Change of the online discriminative view's weight counters,
    /// `[negative, positive]`, in bucket order.
    pub weights: Vec<(u32, [i32; 2])>,
    /// Registry changes, in order: digest → new label, or `None` to forget.
    pub registry: Vec<(Digest, Option<Label>)>,
    /// The stacker refitted by this change, and the samples it was fitted
    /// on (see [`crate::decision::prequential`]); it replaces the model's
    /// from here on.
    pub stacker: Option<(Calibrator, u64)>,
}

impl Entry {
    /// The entry for `delta`, or `None` if a change does not fit the
    /// journal (a word longer than 64 KiB or spelled as a bucket's name, a
    /// number that is no bucket, a count change beyond `i32`): then fold.
    pub(crate) fn from_delta(from: u64, to: u64, delta: &Delta) -> Option<Entry> {
        let change = |d: &[i64; 2]| Some([i32::try_from(d[0]).ok()?, i32::try_from(d[1]).ok()?]);
        let mut words = Vec::with_capacity(delta.words.len());
        for (word, d) in delta.words.iter().filter(|(_, d)| **d != [0, 0]) {
            u16::try_from(word.len()).ok()?;
            if !keys::has_name(Feature::Word(word)) {
                return None;
            }
            words.push((word.clone(), change(d)?));
        }
        words.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut grams = Vec::with_capacity(delta.grams.len());
        for (&bucket, d) in delta.grams.iter().filter(|(_, d)| **d != [0, 0]) {
            if !keys::has_name(Feature::Gram(bucket)) {
                return None;
            }
            grams.push((bucket, change(d)?));
        }
        grams.sort_unstable_by_key(|&(bucket, _)| bucket);
        let mut weights = Vec::with_capacity(delta.weights.len());
        for (&bucket, d) in delta.weights.iter().filter(|(_, d)| **d != [0, 0]) {
            if !crate::vocab::is_bucket(bucket) {
                return None;
            }
            weights.push((bucket, change(d)?));
        }
        weights.sort_unstable_by_key(|&(bucket, _)| bucket);
        Some(Entry {
            from,
            to,
            messages: delta.messages,
            gauss: delta.gauss,
            words,
            grams,
            weights,
            registry: delta.registry.clone(),
            stacker: None,
        })
    }

    /// The entry as a [`Delta`].
    pub(crate) fn to_delta(&self) -> Delta {
        let widen = |d: &[i32; 2]| [i64::from(d[0]), i64::from(d[1])];
        Delta {
            messages: self.messages,
            words: self
                .words
                .iter()
                .map(|(w, d)| (w.clone(), widen(d)))
                .collect(),
            grams: self.grams.iter().map(|(b, d)| (*b, widen(d))).collect(),
            weights: self.weights.iter().map(|(b, d)| (*b, widen(d))).collect(),
            gauss: self.gauss,
            registry: self.registry.clone(),
        }
    }

    /// Every change of the entry, buckets first, then words, then
    /// weights, as the file lists them.
    pub fn changes(&self) -> impl Iterator<Item = (Feature<'_>, [i32; 2])> + '_ {
        let grams = self.grams.iter().map(|&(b, d)| (Feature::Gram(b), d));
        let words = self.words.iter().map(|(w, d)| (Feature::Word(w), *d));
        let weights = self.weights.iter().map(|&(b, d)| (Feature::Weight(b), d));
        grams.chain(words).chain(weights)
    }

    /// The entry framed for the file: length, payload, checksum.
    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self
            .words
            .iter()
            .map(|(w, _)| 2 + w.len() + 8)
            .sum::<usize>()
            + self.grams.len() * (2 + 6 + 8)
            + 4
            + self.weights.len() * (4 + 12)
            + 4
            + 33 * self.registry.len();
        let head = frame_head(JOURNAL_VERSION);
        let mut p = Vec::with_capacity(head + 16 + 16 + 2 * METADATA_LEN * 40 + 4 + size + 8);
        p.extend_from_slice(&[0; 8][..head]);
        p.extend_from_slice(&self.from.to_le_bytes());
        p.extend_from_slice(&self.to.to_le_bytes());
        for m in self.messages {
            p.extend_from_slice(&m.to_le_bytes());
        }
        for class in &self.gauss {
            for g in class {
                p.extend_from_slice(&g.n.to_le_bytes());
                p.extend_from_slice(&g.sum.to_le_bytes());
                p.extend_from_slice(&g.sum_sq.to_le_bytes());
            }
        }
        let features = self.words.len() + self.grams.len();
        p.extend_from_slice(&(features as u32).to_le_bytes());
        let grams = self.grams.iter().map(|&(b, d)| (Feature::Gram(b), d));
        let words = self.words.iter().map(|(w, d)| (Feature::Word(w), *d));
        for (feature, d) in grams.chain(words) {
            let gram;
            let name = match feature {
                Feature::Word(word) => word,
                Feature::Gram(bucket) => {
                    gram = GramName::of(bucket);
                    gram.as_str()
                }
                // Not in this list: see below.
                Feature::Weight(_) => continue,
            };
            // Lengths were checked by `from_delta`.
            p.extend_from_slice(&(name.len() as u16).to_le_bytes());
            p.extend_from_slice(name.as_bytes());
            p.extend_from_slice(&d[0].to_le_bytes());
            p.extend_from_slice(&d[1].to_le_bytes());
        }
        // The weights, grouped by their change: a message steps all of its
        // weights alike.
        let mut groups: std::collections::BTreeMap<[i32; 2], Vec<u32>> = Default::default();
        for &(bucket, d) in &self.weights {
            groups.entry(d).or_default().push(bucket);
        }
        p.extend_from_slice(&(groups.len() as u32).to_le_bytes());
        for (d, buckets) in groups {
            p.extend_from_slice(&d[0].to_le_bytes());
            p.extend_from_slice(&d[1].to_le_bytes());
            p.extend_from_slice(&(buckets.len() as u32).to_le_bytes());
            for b in buckets {
                p.extend_from_slice(&b.to_le_bytes());
            }
        }
        p.extend_from_slice(&(self.registry.len() as u32).to_le_bytes());
        for (digest, label) in &self.registry {
            p.extend_from_slice(digest);
            p.push(match label {
                Some(Label::Ham) => 0,
                Some(Label::Spam) => 1,
                None => 2,
            });
        }
        match &self.stacker {
            None => p.push(0),
            Some((c, n)) => {
                p.push(1);
                for w in c.weights {
                    p.extend_from_slice(&w.to_le_bytes());
                }
                p.extend_from_slice(&c.bias.to_le_bytes());
                p.extend_from_slice(&n.to_le_bytes());
            }
        }
        let len = (p.len() - head) as u32;
        p[..4].copy_from_slice(&len.to_le_bytes());
        p[4..8].copy_from_slice(&length_check(len).to_le_bytes());
        let sum = checksum(&p);
        p.extend_from_slice(&sum.to_le_bytes());
        p
    }

    /// Decodes one payload of a journal of format `version`; `None` if it
    /// does not parse exactly.
    fn decode(p: &[u8], version: u32) -> Option<Entry> {
        let mut r = Cursor(p);
        let from = r.u64()?;
        let to = r.u64()?;
        let messages = [r.i64()?, r.i64()?];
        let mut gauss = [[GaussStats::default(); METADATA_LEN]; 2];
        for class in &mut gauss {
            for g in class.iter_mut() {
                *g = GaussStats {
                    n: r.i64()?,
                    sum: i128::from_le_bytes(r.take()?),
                    sum_sq: i128::from_le_bytes(r.take()?),
                };
            }
        }
        let n = u32::from_le_bytes(r.take()?) as usize;
        // Each token takes at least 10 bytes: a bad count cannot make us
        // reserve more than the payload could hold.
        let mut words = Vec::with_capacity(n.min(p.len() / 10));
        let mut grams = Vec::new();
        let mut weights = Vec::new();
        for _ in 0..n {
            let len = usize::from(u16::from_le_bytes(r.take()?));
            let name = std::str::from_utf8(r.bytes(len)?).ok()?;
            let d = [i32::from_le_bytes(r.take()?), i32::from_le_bytes(r.take()?)];
            match keys::feature_of(name) {
                Feature::Gram(bucket) => grams.push((bucket, d)),
                // Weights have their own section.
                Feature::Weight(_) => return None,
                Feature::Word(word) => words.push((word.to_owned(), d)),
            }
        }
        if version >= 5 {
            let groups = u32::from_le_bytes(r.take()?) as usize;
            for _ in 0..groups {
                let d = [i32::from_le_bytes(r.take()?), i32::from_le_bytes(r.take()?)];
                let k = u32::from_le_bytes(r.take()?) as usize;
                // Each bucket takes 4 bytes: a bad count cannot make us
                // reserve more than the payload could hold.
                weights.reserve(k.min(r.0.len() / 4));
                for _ in 0..k {
                    let bucket = u32::from_le_bytes(r.take()?);
                    if !crate::vocab::is_bucket(bucket) {
                        return None;
                    }
                    weights.push((bucket, d));
                }
            }
            weights.sort_unstable_by_key(|&(b, _)| b);
        }
        let n = if version >= 2 {
            u32::from_le_bytes(r.take()?) as usize
        } else {
            0
        };
        let mut registry = Vec::with_capacity(n.min(p.len() / 33));
        for _ in 0..n {
            let digest: Digest = r.take()?;
            let label = match r.take::<1>()?[0] {
                0 => Some(Label::Ham),
                1 => Some(Label::Spam),
                2 => None,
                _ => return None,
            };
            registry.push((digest, label));
        }
        let stacker = if version >= 4 && r.take::<1>()?[0] == 1 {
            let mut weights = [0.0; INPUTS];
            let given = if version >= 5 { INPUTS } else { LOGISTIC };
            for w in &mut weights[..given] {
                *w = f64::from_le_bytes(r.take()?);
            }
            let bias = f64::from_le_bytes(r.take()?);
            let n = r.u64()?;
            if !weights.iter().chain([&bias]).all(|x| x.is_finite()) {
                return None;
            }
            Some((Calibrator { weights, bias }, n))
        } else {
            None
        };
        if !r.0.is_empty() {
            return None;
        }
        Some(Entry {
            from,
            to,
            messages,
            gauss,
            words,
            grams,
            weights,
            registry,
            stacker,
        })
    }
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take()?))
    }
}

/// A journal as read: the snapshot it applies to and its valid entries.
#[derive(Debug, Clone, PartialEq)]
pub struct Journal {
    /// Its format version: entries of version 1 carry no registry changes
    /// (writers then do not append to it).
    pub version: u32,
    /// The snapshot's store identity.
    pub base: StoreIdentity,
    /// The entries that chain from `base`, checksums matching.
    pub entries: Vec<Entry>,
    /// Bytes of the file up to the end of the last valid entry.
    pub valid_len: u64,
    /// Bytes of the whole file.
    pub file_len: u64,
}

impl Journal {
    /// Reads the journal at `path`: `Ok(None)` if there is none. A journal
    /// that is damaged (a header or an entry whose checksum does not match,
    /// entries that do not chain, bytes after the last entry that are no
    /// entry) or larger than [`MAX_JOURNAL_BYTES`] is an [`Error::Corrupt`]:
    /// the entries after the damage cannot be read, so applying or folding
    /// the ones before it would silently drop the rest. Only a last entry
    /// cut short (a writer killed while appending, which is never
    /// acknowledged) is left out without an error.
    pub fn read(path: &Path) -> Result<Option<Journal>> {
        // As `learn` opens it to append: a link there is refused by
        // readers too, so that every command sees the same journal.
        let mut file = match fsutil::open_regular_no_follow(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(Error::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_owned(),
            reason,
        };
        let len = file.metadata().map_or(0, |m| m.len());
        if len > MAX_JOURNAL_BYTES {
            return Err(corrupt(format!(
                "it holds {len} bytes, more than a journal ever does ({MAX_JOURNAL_BYTES})"
            )));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        (&mut file)
            .take(MAX_JOURNAL_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| Error::Io {
                path: path.to_owned(),
                source,
            })?;
        if bytes.len() as u64 > MAX_JOURNAL_BYTES {
            return Err(corrupt(format!(
                "it holds more than a journal ever does ({MAX_JOURNAL_BYTES} bytes)"
            )));
        }
        Journal::parse(&bytes).map(Some).map_err(corrupt)
    }

    /// Parses journal bytes; the error says what is damaged (see
    /// [`Journal::read`]).
    pub fn parse(bytes: &[u8]) -> std::result::Result<Journal, String> {
        let short = || "it is damaged in its header (cut short, or a length is wrong)".to_string();
        let mut r = Cursor(bytes);
        if r.bytes(8).ok_or_else(short)? != JOURNAL_MAGIC {
            return Err("it does not start as a journal does".into());
        }
        let version = u32::from_le_bytes(r.take().ok_or_else(short)?);
        let k = u32::from_le_bytes(r.take().ok_or_else(short)?) as usize;
        let id = r.bytes(k).ok_or_else(short)?;
        let id = std::str::from_utf8(id).unwrap_or_default().to_owned();
        let generation = r.u64().ok_or_else(short)?;
        let header_len = bytes.len() - r.0.len();
        if r.u64().ok_or_else(short)? != checksum(&bytes[..header_len]) {
            return Err("it is damaged in its header (checksum mismatch)".into());
        }
        if !(1..=JOURNAL_VERSION).contains(&version) {
            return Err(format!(
                "its format version is {version}, not one this bayesmail reads (1 to {JOURNAL_VERSION})"
            ));
        }
        let mut at = header_len + 8;
        let mut entries: Vec<Entry> = Vec::new();
        let mut end = generation;
        while at < bytes.len() {
            let damaged = |what: &str| {
                format!(
                    "it is damaged at byte {at}, entry {} of those since the model was \
                     written: {what}",
                    entries.len() + 1
                )
            };
            // A last entry cut short: a writer killed while appending.
            let head = frame_head(version);
            let Some(frame) = bytes.get(at..at + head) else {
                break;
            };
            let len = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes"));
            if head == 8 && frame[4..8] != length_check(len).to_le_bytes() {
                return Err(damaged("its length is damaged"));
            }
            let len = len as usize;
            if len as u64 > MAX_JOURNAL_BYTES {
                return Err(damaged("its length is impossible"));
            }
            let Some(sum) = bytes.get(at + head + len..at + head + len + 8) else {
                break;
            };
            let framed = &bytes[at..at + head + len];
            if u64::from_le_bytes(sum.try_into().expect("8 bytes")) != checksum(framed) {
                return Err(damaged("its checksum does not match"));
            }
            match Entry::decode(&framed[head..], version) {
                Some(e) if e.from == end && e.to > e.from => {
                    end = e.to;
                    entries.push(e);
                }
                Some(_) => return Err(damaged("it does not follow the entry before it")),
                None => return Err(damaged("it does not decode")),
            }
            at += head + len + 8;
        }
        Ok(Journal {
            version,
            base: StoreIdentity { id, generation },
            entries,
            valid_len: at.min(bytes.len()) as u64,
            file_len: bytes.len() as u64,
        })
    }

    /// The last stacker its entries refitted, and the samples it was
    /// fitted on: the model's from then on.
    pub fn stacker(&self) -> Option<(Calibrator, u64)> {
        self.entries.iter().rev().find_map(|e| e.stacker)
    }

    /// The store identity snapshot + journal stand for.
    pub fn end(&self) -> StoreIdentity {
        StoreIdentity {
            id: self.base.id.clone(),
            generation: self.entries.last().map_or(self.base.generation, |e| e.to),
        }
    }

    /// Whether every byte of the file belongs to a valid entry (no torn
    /// tail that an append would have to follow).
    pub(crate) fn is_clean(&self) -> bool {
        self.valid_len == self.file_len
    }

    /// The label the journal gives `digest` last, if it changes it:
    /// `Some(None)` if it forgets it.
    pub fn label_of(&self, digest: &Digest) -> Option<Option<Label>> {
        self.entries
            .iter()
            .rev()
            .flat_map(|e| e.registry.iter().rev())
            .find(|(d, _)| d == digest)
            .map(|(_, l)| *l)
    }

    /// The counts after the entries, applied one after the other to the
    /// counts `base` gives for a feature (`None`: it has none) and to
    /// `totals`, each clamped at zero as the count store clamps it when it
    /// takes the entries in one by one (see `apply_token`), so
    /// that readers, the store and `learn`'s own check agree even where a
    /// count could not be taken back exactly. Returns the totals and, for
    /// every feature an entry changes, its count before and after.
    pub(crate) fn replay(
        &self,
        totals: &Totals,
        base: impl FnMut(Feature<'_>) -> Option<TokenCounts>,
        inexact: &mut u64,
    ) -> Result<(Totals, Replayed)> {
        self.replay_of(totals, base, |_| true, inexact)
    }

    /// [`Journal::replay`] for the features `wanted` keeps only: the totals
    /// as whole, the counts of those features alone (what judging a few
    /// messages needs, without a lookup and an entry for every feature
    /// the journal changed).
    pub(crate) fn replay_of(
        &self,
        totals: &Totals,
        mut base: impl FnMut(Feature<'_>) -> Option<TokenCounts>,
        wanted: impl Fn(Feature<'_>) -> bool,
        inexact: &mut u64,
    ) -> Result<(Totals, Replayed)> {
        let mut totals = totals.clone();
        let mut replayed = Replayed::default();
        let mut before = |feature| {
            let was = base(feature);
            (was, was.unwrap_or_default())
        };
        for e in &self.entries {
            let change = Delta {
                messages: e.messages,
                gauss: e.gauss,
                ..Delta::default()
            };
            totals = super::apply_totals(&totals, &change, inexact)?;
            for (feature, d) in e.changes().filter(|(f, _)| wanted(*f)) {
                let (_, now) = match feature {
                    Feature::Word(word) => replayed
                        .words
                        .entry(word.to_owned())
                        .or_insert_with(|| before(feature)),
                    Feature::Gram(bucket) => replayed
                        .grams
                        .entry(bucket)
                        .or_insert_with(|| before(feature)),
                    Feature::Weight(bucket) => replayed
                        .weights
                        .entry(bucket)
                        .or_insert_with(|| before(feature)),
                };
                let d = [i64::from(d[0]), i64::from(d[1])];
                *now = super::apply_token(feature, *now, d, inexact)?;
            }
        }
        Ok((totals, replayed))
    }
}

/// What [`Journal::replay`] gives per feature: its count before the
/// journal (`None`: none) and after.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    /// By word.
    pub words: HashMap<String, (Option<TokenCounts>, TokenCounts)>,
    /// By bucket.
    pub grams: HashMap<u32, (Option<TokenCounts>, TokenCounts)>,
    /// Weights, by bucket.
    pub weights: HashMap<u32, (Option<TokenCounts>, TokenCounts)>,
}

impl Replayed {
    /// The counts of `feature` before and after, if the journal changes it.
    pub fn get(&self, feature: Feature<'_>) -> Option<(Option<TokenCounts>, TokenCounts)> {
        match feature {
            Feature::Word(word) => self.words.get(word).copied(),
            Feature::Gram(bucket) => self.grams.get(&bucket).copied(),
            Feature::Weight(bucket) => self.weights.get(&bucket).copied(),
        }
    }
}

/// Bytes in front of an entry's payload in a journal of format `version`:
/// its length and, from version 3, a check of the length, so that a
/// damaged length is told apart from an entry cut short.
fn frame_head(version: u32) -> usize {
    if version >= 3 { 8 } else { 4 }
}

/// The check written after an entry's length.
fn length_check(len: u32) -> u32 {
    checksum(&len.to_le_bytes()) as u32
}

/// The header bytes of a journal for the snapshot at `base`.
fn header(base: &StoreIdentity) -> Vec<u8> {
    let mut h = Vec::with_capacity(8 + 4 + 4 + base.id.len() + 16);
    h.extend_from_slice(JOURNAL_MAGIC);
    h.extend_from_slice(&JOURNAL_VERSION.to_le_bytes());
    h.extend_from_slice(&(base.id.len() as u32).to_le_bytes());
    h.extend_from_slice(base.id.as_bytes());
    h.extend_from_slice(&base.generation.to_le_bytes());
    let sum = checksum(&h);
    h.extend_from_slice(&sum.to_le_bytes());
    h
}

/// Starts a journal at `path` for the snapshot at `base`, holding `entry`:
/// written whole and renamed into place, so a reader sees the old journal
/// or the new one.
pub fn start(path: &Path, base: &StoreIdentity, entry: &Entry) -> Result<()> {
    let mut bytes = header(base);
    bytes.extend_from_slice(&entry.encode());
    Ok(write_atomically(path, &bytes)?)
}

/// Appends `entry` to the journal at `path` in one write, then syncs it. A
/// reader that reads while the write is under way sees a torn last entry
/// and ignores it.
pub fn append(path: &Path, entry: &Entry) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = fsutil::open_append(path).map_err(io)?;
    file.write_all(&entry.encode()).map_err(io)?;
    file.sync_data().map_err(io)
}

/// Removes the journal at `path`, if there is one.
pub fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> StoreIdentity {
        StoreIdentity {
            id: "00112233445566778899aabbccddeeff".into(),
            generation: 7,
        }
    }

    fn entry(from: u64, to: u64, token: &str, d: i64) -> Entry {
        let mut delta = Delta {
            messages: [0, d],
            ..Delta::default()
        };
        delta.words.insert(token.into(), [0, d]);
        delta.words.insert("zero".into(), [0, 0]);
        delta.grams.insert(9, [0, 0]);
        delta.weights.insert(9, [d, 0]);
        delta.gauss[1][0] = GaussStats {
            n: d,
            sum: 3 * i128::from(d),
            sum_sq: 9 * i128::from(d),
        };
        Entry::from_delta(from, to, &delta).unwrap()
    }

    #[test]
    fn a_version_1_journal_is_still_read_and_registry_changes_round_trip() {
        // Version 1: the same entries without the registry section.
        let mut e = entry(7, 8, "cash", 1);
        e.weights.clear();
        let framed = e.encode();
        // Less the weights' and the registry's counts and the stacker byte.
        let payload = &framed[8..framed.len() - 8 - 4 - 4 - 1];
        let mut v1 = Vec::new();
        v1.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        v1.extend_from_slice(payload);
        let sum = checksum(&v1);
        v1.extend_from_slice(&sum.to_le_bytes());
        let mut bytes = header(&base());
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let sum = checksum(&bytes[..bytes.len() - 8]);
        let at = bytes.len() - 8;
        bytes[at..].copy_from_slice(&sum.to_le_bytes());
        bytes.extend_from_slice(&v1);
        let j = Journal::parse(&bytes).expect("a version 1 journal reads");
        assert_eq!((j.version, j.entries.len()), (1, 1));
        assert_eq!(j.entries[0].words, e.words);
        assert_eq!(j.entries[0].grams, e.grams);
        assert!(j.is_clean());

        let mut delta = e.to_delta();
        delta.registry = vec![([3; 32], Some(Label::Spam)), ([4; 32], None)];
        let with = Entry::from_delta(8, 9, &delta).unwrap();
        let mut bytes = header(&base());
        bytes.extend_from_slice(&entry(7, 8, "cash", 1).encode());
        bytes.extend_from_slice(&with.encode());
        let j = Journal::parse(&bytes).unwrap();
        assert_eq!(j.version, JOURNAL_VERSION);
        assert_eq!(j.entries[1].registry, delta.registry);
        assert_eq!(j.label_of(&[3; 32]), Some(Some(Label::Spam)));
        assert_eq!(j.label_of(&[4; 32]), Some(None));
        assert_eq!(j.label_of(&[5; 32]), None);
    }

    #[test]
    fn a_replay_of_some_features_gives_theirs_as_the_whole_replay_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.journal");
        start(&path, &base(), &entry(7, 8, "a", 1)).unwrap();
        append(&path, &entry(8, 10, "b", 2)).unwrap();
        append(&path, &entry(10, 11, "a", -1)).unwrap();
        let j = Journal::read(&path).unwrap().unwrap();
        let snapshot =
            |f: Feature<'_>| (f == Feature::Word("a")).then_some(TokenCounts { ham: 0, spam: 4 });
        let (mut n1, mut n2) = (0, 0);
        let (all_totals, all) = j.replay(&Totals::default(), snapshot, &mut n1).unwrap();
        let (totals, some) = j
            .replay_of(
                &Totals::default(),
                snapshot,
                |f| f == Feature::Word("a"),
                &mut n2,
            )
            .unwrap();
        assert_eq!(totals, all_totals, "the totals are whole");
        assert_eq!(some.get(Feature::Word("a")), all.get(Feature::Word("a")));
        assert_eq!(
            some.get(Feature::Word("a")).map(|(_, now)| now),
            Some(TokenCounts { ham: 0, spam: 4 })
        );
        assert!(all.get(Feature::Word("b")).is_some());
        assert_eq!(some.get(Feature::Word("b")), None, "not asked for");
    }

    #[test]
    fn entries_round_trip_and_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.journal");
        assert_eq!(Journal::read(&path).unwrap(), None);
        start(&path, &base(), &entry(7, 8, "a", 1)).unwrap();
        append(&path, &entry(8, 10, "b", 2)).unwrap();
        let j = Journal::read(&path).unwrap().unwrap();
        assert_eq!(j.base, base());
        assert_eq!(j.entries, [entry(7, 8, "a", 1), entry(8, 10, "b", 2)]);
        assert_eq!(
            (j.entries[0].words.len(), j.entries[0].grams.len()),
            (1, 0),
            "zero changes are left out"
        );
        assert!(j.is_clean());
        assert_eq!(j.end().generation, 10);
        let mut inexact = 0;
        let (totals, tokens) = j
            .replay(&Totals::default(), |_| None, &mut inexact)
            .unwrap();
        assert_eq!(totals.messages, [0, 3]);
        assert_eq!(totals.gauss[1][0].sum, 9);
        assert_eq!(
            tokens.get(Feature::Word("b")),
            Some((None, TokenCounts { ham: 0, spam: 2 }))
        );
        // A weight's counters, by their own name, apart from the bucket's.
        assert_eq!(j.entries[1].weights, [(9, [2, 0])]);
        assert_eq!(
            tokens.get(Feature::Weight(9)),
            Some((None, TokenCounts { ham: 3, spam: 0 }))
        );
        assert_eq!(tokens.get(Feature::Gram(9)), None);
        assert_eq!(inexact, 0);
    }

    #[test]
    fn a_torn_tail_is_left_out_and_damage_anywhere_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.journal");
        start(&path, &base(), &entry(7, 8, "a", 1)).unwrap();
        append(&path, &entry(8, 9, "b", 1)).unwrap();
        let whole = fs::read(&path).unwrap();
        let first_end =
            Journal::parse(&whole).unwrap().valid_len as usize - entry(8, 9, "b", 1).encode().len();
        // Every cut inside the second entry keeps exactly the first.
        for cut in first_end..whole.len() {
            let j = Journal::parse(&whole[..cut]).unwrap();
            assert_eq!(j.entries.len(), 1, "cut at {cut}");
            assert_eq!(j.valid_len as usize, first_end);
            assert!(!j.is_clean() || cut == first_end);
        }
        // A flipped byte anywhere (header or either entry) is damage, not
        // a shorter journal: nothing is applied or folded.
        for at in 0..whole.len() {
            let mut bad = whole.clone();
            bad[at] ^= 0x40;
            // A flip in the last length can make the entry look cut short.
            if let Ok(j) = Journal::parse(&bad) {
                assert!(
                    (first_end..first_end + 4).contains(&at) && !j.is_clean(),
                    "flip at {at} read as {} entries",
                    j.entries.len()
                );
                continue;
            }
            let err = Journal::parse(&bad).unwrap_err();
            assert!(err.contains("damaged") || err.contains("start"), "{err}");
        }
        // Junk after the last entry is damage too.
        let mut junk = whole.clone();
        junk.extend_from_slice(&[0; 64]);
        assert!(Journal::parse(&junk).unwrap_err().contains("damaged"));
        fs::write(&path, &junk).unwrap();
        let err = Journal::read(&path).unwrap_err().to_string();
        assert!(err.contains("model.journal is corrupt"), "{err}");
    }

    #[test]
    fn a_journal_larger_than_any_writer_makes_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.journal");
        start(&path, &base(), &entry(7, 8, "a", 1)).unwrap();
        let file = fs::OpenOptions::new().append(true).open(&path).unwrap();
        file.set_len(MAX_JOURNAL_BYTES + 1).unwrap();
        let err = Journal::read(&path).unwrap_err().to_string();
        assert!(err.contains("more than a journal ever does"), "{err}");
    }

    #[test]
    fn entries_that_do_not_chain_are_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.journal");
        start(&path, &base(), &entry(7, 8, "a", 1)).unwrap();
        // Skips generation 8..9.
        append(&path, &entry(9, 10, "b", 1)).unwrap();
        let err = Journal::read(&path).unwrap_err().to_string();
        assert!(err.contains("does not follow"), "{err}");
        // An entry that does not start at the header's generation.
        start(&path, &base(), &entry(6, 8, "a", 1)).unwrap();
        assert!(Journal::read(&path).is_err());
    }

    #[test]
    fn changes_that_do_not_fit_are_refused() {
        let mut delta = Delta::default();
        delta.words.insert("a".into(), [i64::from(i32::MAX) + 1, 0]);
        assert_eq!(Entry::from_delta(0, 1, &delta), None);
        let mut delta = Delta::default();
        delta.words.insert("x".repeat(70_000), [1, 0]);
        assert_eq!(Entry::from_delta(0, 1, &delta), None);
        // A word that would read back as a bucket, a number that is no
        // bucket.
        let mut delta = Delta::default();
        delta.words.insert("\u{1}00007".into(), [1, 0]);
        assert_eq!(Entry::from_delta(0, 1, &delta), None);
        let mut delta = Delta::default();
        delta.grams.insert(1 << crate::vocab::BUCKET_BITS, [1, 0]);
        assert_eq!(Entry::from_delta(0, 1, &delta), None);
        // A word that spells no bucket is a word like any other.
        let mut delta = Delta::default();
        delta.words.insert("\u{1}40000".into(), [1, 0]);
        let e = Entry::from_delta(0, 1, &delta).unwrap();
        assert_eq!(e.words, [("\u{1}40000".to_string(), [1, 0])]);
    }

    /// An entry's bytes are the documented layout, byte for byte: a
    /// bucket under its name (U+0001 and five hex digits) before the words
    /// in byte order, as journals were always written.
    #[test]
    fn entries_keep_their_layout_and_buckets_their_names() {
        let mut delta = Delta {
            messages: [1, 0],
            ..Delta::default()
        };
        delta.words.insert("b".into(), [1, 0]);
        delta.words.insert("SUBJ:a".into(), [2, -1]);
        delta.grams.insert(0x3_a0f1, [1, 0]);
        delta.grams.insert(7, [-3, 0]);
        delta.weights.insert(9, [0, 40]);
        delta.weights.insert(2, [0, 40]);
        delta.weights.insert(5, [7, 0]);
        delta.registry.push(([5; 32], Some(Label::Ham)));
        let e = Entry::from_delta(4, 5, &delta).unwrap();

        let mut p = Vec::new();
        p.extend_from_slice(&4u64.to_le_bytes());
        p.extend_from_slice(&5u64.to_le_bytes());
        p.extend_from_slice(&1i64.to_le_bytes());
        p.extend_from_slice(&0i64.to_le_bytes());
        p.extend(std::iter::repeat_n(0u8, 2 * METADATA_LEN * (8 + 16 + 16)));
        p.extend_from_slice(&4u32.to_le_bytes());
        for (name, d) in [
            ("\u{1}00007", [-3i32, 0]),
            ("\u{1}3a0f1", [1, 0]),
            ("SUBJ:a", [2, -1]),
            ("b", [1, 0]),
        ] {
            p.extend_from_slice(&(name.len() as u16).to_le_bytes());
            p.extend_from_slice(name.as_bytes());
            p.extend_from_slice(&d[0].to_le_bytes());
            p.extend_from_slice(&d[1].to_le_bytes());
        }
        // The weights, grouped by change, in the order of the changes.
        p.extend_from_slice(&2u32.to_le_bytes());
        for (d, buckets) in [([0i32, 40], &[2u32, 9][..]), ([7, 0], &[5][..])] {
            p.extend_from_slice(&d[0].to_le_bytes());
            p.extend_from_slice(&d[1].to_le_bytes());
            p.extend_from_slice(&(buckets.len() as u32).to_le_bytes());
            for b in buckets {
                p.extend_from_slice(&b.to_le_bytes());
            }
        }
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&[5; 32]);
        p.push(0);
        // No stacker refitted.
        p.push(0);
        let framed = e.encode();
        assert_eq!(&framed[..4], (p.len() as u32).to_le_bytes());
        assert_eq!(&framed[8..framed.len() - 8], &p[..]);

        // One refitted: its weights, intercept and sample count follow.
        let refitted = Calibrator {
            weights: [0.5; INPUTS],
            bias: -1.25,
        };
        let with = Entry {
            stacker: Some((refitted, 321)),
            ..e.clone()
        };
        let framed_with = with.encode();
        let payload = &framed_with[8..framed_with.len() - 8];
        assert_eq!(payload.len(), p.len() + 8 * (INPUTS + 2));
        assert_eq!(payload[p.len() - 1], 1);
        assert_eq!(&payload[payload.len() - 8..], 321u64.to_le_bytes());
        let mut with_bytes = header(&StoreIdentity {
            generation: 4,
            ..base()
        });
        with_bytes.extend_from_slice(&framed_with);
        let j = Journal::parse(&with_bytes).unwrap();
        assert_eq!(j.stacker(), Some((refitted, 321)));

        let mut bytes = header(&StoreIdentity {
            generation: 4,
            ..base()
        });
        bytes.extend_from_slice(&framed);
        let j = Journal::parse(&bytes).unwrap();
        assert_eq!(j.entries, std::slice::from_ref(&e));
        assert_eq!(e.grams, [(7, [-3, 0]), (0x3_a0f1, [1, 0])]);
        assert_eq!(j.entries[0].to_delta(), delta);
    }
}
