//! Teaching a few messages without opening the count store: `learn` and
//! `unlearn` decide from the registry file and the journal, then append
//! one journal entry (with its registry changes). The store takes the
//! journal in when the next writer opens it ([`super::Trainer::open`]).
//!
//! This works only when the registry file stands for the snapshot the
//! journal applies to, the journal has no torn tail, and the change fits
//! the journal's bound; otherwise the functions here return `None` and the
//! caller takes the full path through the count store, which folds the
//! journal and compiles a new snapshot.

use std::collections::HashSet;
use std::time::Duration;

use super::learnlog::Change;
use super::restack::Restack;
use super::{Labelled, TrainSummary, WriterLock};
use crate::db::ModelHeader;
use crate::db::{DbPaths, Error, Result};
use crate::decision::Calibrator;
use crate::features::Features;
use crate::message::Identity;
use crate::model::{Combine, Delta, Label};
use crate::store::Snapshot;
use crate::store::journal::{self, Entry, Journal};
use crate::store::registry::RegistryFile;
use crate::store::sled::SledStore;
use crate::vocab::{Digest, Feature};

/// The registry file and the journal that applies on top of it, read under
/// the writers' lock.
struct State {
    _lock: WriterLock,
    registry: RegistryFile,
    /// `None`: no journal for this snapshot yet.
    journal: Option<Journal>,
}

impl State {
    /// Reads the state, or `None` if the quick path cannot be taken.
    fn read(paths: &DbPaths, wait: Duration) -> Result<Option<State>> {
        // A count store that is gone is reported by the full path.
        if !paths.snapshot().is_file() || !SledStore::exists(&paths.counts()) {
            return Ok(None);
        }
        super::lock::refuse_foreign(paths)?;
        let lock = WriterLock::take(paths, wait)?;
        paths.sweep_stale_temps();
        crate::store::snapshot::remove_check_record(&paths.snapshot());
        let Some(registry) = RegistryFile::read(&paths.registry())? else {
            return Ok(None);
        };
        // The registry file must stand for the snapshot readers apply the
        // journal to, or what is appended would be lost to them.
        // The textbook combination's per-view constants sum over the whole
        // vocabulary: a change to it needs a new snapshot.
        let Some(header) = Snapshot::peek_header::<ModelHeader>(&paths.snapshot()) else {
            return Ok(None);
        };
        if header.store != Some(registry.base.clone()) || header.params.combine == Combine::Textbook
        {
            return Ok(None);
        }
        let journal = match Journal::read(&paths.journal())? {
            // One left for an older snapshot applies to nothing.
            Some(j) if j.base != registry.base => None,
            Some(j) if !j.is_clean() || j.version != journal::JOURNAL_VERSION => return Ok(None),
            other => other,
        };
        Ok(Some(State {
            _lock: lock,
            registry,
            journal,
        }))
    }

    /// The label `digest` is learned under now.
    fn label_of(&self, digest: &Digest) -> Option<Label> {
        match self.journal.as_ref().and_then(|j| j.label_of(digest)) {
            Some(now) => now,
            None => self.registry.label_of(digest),
        }
    }

    /// The label a message is learned under now and the digest it is known
    /// by (see [`super::Trainer::registered`]).
    fn registered(&self, identity: &Identity) -> Option<(Label, Digest)> {
        identity
            .digests()
            .find_map(|d| self.label_of(&d).map(|label| (label, d)))
    }

    /// Messages per class now, before `delta`.
    fn messages(&self) -> [u64; 2] {
        // Entry by entry, clamped at zero, as readers replay them.
        let mut now = self.registry.messages.map(|n| n as i64);
        for e in self.journal.iter().flat_map(|j| &j.entries) {
            for (n, d) in now.iter_mut().zip(e.messages) {
                *n = (*n + d).max(0);
            }
        }
        now.map(|n| n as u64)
    }

    /// How many counts `delta` cannot take back exactly in the model as
    /// readers see it (they become zero, as in the count store; see
    /// [`crate::store::apply_token`]), or `None` if it does not apply: a
    /// count would overflow, or the model is not the one the registry
    /// stands for or is damaged.
    fn inexact(&self, paths: &DbPaths, delta: &Delta) -> Option<u64> {
        // Only a count that goes down can be inexact: a plain learn needs
        // no look at the model (a count of 2^32 messages is out of reach).
        let lowers = |d: &[i64; 2]| d[0] < 0 || d[1] < 0;
        if !lowers(&delta.messages) && !delta.changes().any(|(_, d)| lowers(&d)) {
            return Some(0);
        }
        // The counts as readers see them, for this message's features
        // only: the snapshot's, plus the journal's changes.
        let snapshot = Snapshot::open(&paths.snapshot()).ok()?;
        let header = snapshot.header::<ModelHeader>().ok()?;
        if header.store.as_ref() != Some(&self.registry.base) {
            return None;
        }
        let lookup = |feature: Feature<'_>| snapshot.lookup(feature);
        // What the journal itself left inexact is not this change's doing.
        let mut before = 0;
        let (totals, replayed) = match &self.journal {
            Some(j) => j.replay(&header.totals, lookup, &mut before).ok()?,
            None => (header.totals.clone(), Default::default()),
        };
        let mut inexact = 0;
        crate::store::apply_totals(&totals, delta, &mut inexact).ok()?;
        for (feature, d) in delta.changes() {
            let now = match replayed.get(feature) {
                Some((_, now)) => now,
                None => lookup(feature).unwrap_or_default(),
            };
            crate::store::apply_token(feature, now, d, &mut inexact).ok()?;
        }
        Some(inexact)
    }

    /// Appends `delta` as one entry and returns how many counts it could
    /// not take back exactly; `None` (nothing written) if it does not apply
    /// to the model, does not fit the journal or would take it past
    /// `limit` bytes.
    fn append(
        &self,
        paths: &DbPaths,
        delta: &Delta,
        stacker: Option<(Calibrator, u64)>,
        limit: u64,
    ) -> Result<Option<u64>> {
        let limit = limit.min(journal::MAX_JOURNAL_BYTES);
        let Some(inexact) = self.inexact(paths, delta) else {
            return Ok(None);
        };
        let from = self
            .journal
            .as_ref()
            .map_or(self.registry.base.generation, |j| j.end().generation);
        let Some(mut entry) = Entry::from_delta(from, from + 1, delta) else {
            return Ok(None);
        };
        entry.stacker = stacker;
        let encoded = entry.encode().len() as u64;
        match &self.journal {
            Some(j) => {
                if j.file_len + encoded > limit {
                    return Ok(None);
                }
                journal::append(&paths.journal(), &entry)?;
            }
            None => {
                if encoded > limit {
                    return Ok(None);
                }
                journal::start(&paths.journal(), &self.registry.base, &entry)?;
            }
        }
        Ok(Some(inexact))
    }
}

/// Learns `messages` (as [`super::Trainer::learn`] does) through the
/// journal alone, with the stacker `restack` refits in the same entry and
/// its record written after; `None` if the quick path cannot be taken
/// (then nothing was written).
pub(crate) fn learn(
    paths: &DbPaths,
    wait: Duration,
    messages: &[Labelled],
    limit: u64,
    restack: &mut Restack,
) -> Result<Option<TrainSummary>> {
    let Some(state) = State::read(paths, wait)? else {
        return Ok(None);
    };
    restack.judge(paths, messages, Some(&state.journal));
    let mut summary = TrainSummary::default();
    let mut delta = Delta::default();
    let mut given: std::collections::HashMap<Digest, Label> = Default::default();
    for m in messages {
        match given.get(&m.identity.digest) {
            Some(l) if *l == m.label => summary.duplicates += 1,
            // Both labels in one call: the full path reports it.
            Some(_) => return Ok(None),
            None => {
                given.insert(m.identity.digest, m.label);
            }
        }
    }
    let mut seen = HashSet::new();
    for m in messages {
        if !seen.insert(m.identity.digest) {
            continue;
        }
        let now = state.registered(&m.identity);
        super::writer::learn_into(&mut delta, &mut summary, m, now, restack.weights());
    }
    let before = state.messages();
    summary.totals = [0, 1].map(|c| (before[c] as i64 + delta.messages[c]).max(0) as u64);
    if delta.is_empty() {
        return Ok(Some(summary));
    }
    if summary.totals.contains(&0) {
        return Ok(None);
    }
    let stacker = restack.refit(&summary.changes);
    let Some(inexact) = state.append(paths, &delta, stacker, limit)? else {
        return Ok(None);
    };
    summary.inexact = inexact;
    // Still under the writers' lock (`state` holds it).
    restack.commit();
    Ok(Some(summary))
}

/// Unlearns messages (features and identity) through the journal alone:
/// one result per message, [`Error::NotLearned`] for one that is not
/// learned, and how many counts could not be taken back exactly; `None` if
/// the quick path cannot be taken (then nothing was written), including
/// when a class would be left empty (the full path removes the model
/// then). `restack` takes the messages' samples out of the stacker's
/// record.
pub(crate) fn unlearn(
    paths: &DbPaths,
    wait: Duration,
    messages: &[(&Features, Identity)],
    limit: u64,
    restack: &mut Restack,
) -> Result<Option<(Vec<Result<Label>>, u64)>> {
    let Some(state) = State::read(paths, wait)? else {
        return Ok(None);
    };
    let features: Vec<&Features> = messages.iter().map(|(f, _)| *f).collect();
    restack.weigh(paths, &features, Some(&state.journal));
    let mut delta = Delta::default();
    let mut results = Vec::with_capacity(messages.len());
    let mut done: std::collections::HashMap<Digest, Label> = Default::default();
    for (features, identity) in messages {
        let now = if done.contains_key(&identity.digest) {
            None
        } else {
            state.registered(identity)
        };
        match now {
            None => results.push(Err(Error::NotLearned)),
            Some((label, known_as)) => {
                delta.add_message(features, label, -1);
                if let Some(weights) = restack.weights() {
                    weights.learn(Some(&mut delta), &features.lr_buckets, label, -1);
                }
                delta.registry.push((known_as, None));
                done.insert(identity.digest, label);
                results.push(Ok(label));
            }
        }
    }
    let before = state.messages();
    let after = [0, 1].map(|c| before[c] as i64 + delta.messages[c]);
    if delta.is_empty() {
        return Ok(Some((results, 0)));
    }
    if after.iter().any(|&n| n <= 0) {
        return Ok(None);
    }
    let changes: Vec<_> = done
        .iter()
        .map(|(digest, label)| (*digest, Change::Unlearned(*label)))
        .collect();
    restack.refit(&changes);
    let Some(inexact) = state.append(paths, &delta, None, limit)? else {
        return Ok(None);
    };
    restack.commit();
    Ok(Some((results, inexact)))
}
