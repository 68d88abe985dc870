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

use super::{Labelled, TrainSummary, WriterLock};
use crate::classifier::ModelHeader;
use crate::db::{DbPaths, Error, Result};
use crate::features::Features;
use crate::model::{Combine, Delta, Digest, Label};
use crate::store::Snapshot;
use crate::store::journal::{self, Entry, Journal};
use crate::store::registry::RegistryFile;

/// The registry file and the journal that applies on top of it, read under
/// the writers' lock.
struct State {
    _lock: WriterLock,
    registry: RegistryFile,
    /// `None`: no journal for this snapshot yet.
    journal: Option<Journal>,
    /// The sum of the journal's entries.
    journal_delta: Option<Delta>,
}

impl State {
    /// Reads the state, or `None` if the quick path cannot be taken.
    fn read(paths: &DbPaths, wait: Duration) -> Result<Option<State>> {
        // A count store that is gone is reported by the full path.
        if !paths.snapshot().is_file() || !paths.counts().join("db").is_file() {
            return Ok(None);
        }
        let lock = WriterLock::take(paths, wait)?;
        for file in [paths.snapshot(), paths.journal(), paths.registry()] {
            if let Some(name) = file.file_name() {
                crate::store::snapshot::remove_stale_temps(paths.dir(), &name.to_string_lossy());
            }
        }
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
        let journal_delta = journal.as_ref().map(Journal::delta);
        Ok(Some(State {
            _lock: lock,
            registry,
            journal,
            journal_delta,
        }))
    }

    /// The label `digest` is learned under now.
    fn label_of(&self, digest: &Digest) -> Option<Label> {
        match self.journal.as_ref().and_then(|j| j.label_of(digest)) {
            Some(now) => now,
            None => self.registry.label_of(digest),
        }
    }

    /// Messages per class now, before `delta`.
    fn messages(&self) -> [u64; 2] {
        let d = self.journal_delta.as_ref().map_or([0, 0], |j| j.messages);
        [0, 1].map(|c| (self.registry.messages[c] as i64 + d[c]).max(0) as u64)
    }

    /// Whether `delta` applies to the model without a count going
    /// negative or overflowing. A copy of a message with other features
    /// than the one learned (headers that the digest ignores, added since)
    /// would not: the full path then refuses it, where an entry in the
    /// journal would make the model unreadable.
    fn applies(&self, paths: &DbPaths, delta: &Delta) -> bool {
        // Only a count that goes down can go negative: a plain learn needs
        // no look at the model (a count of 2^32 messages is out of reach).
        let lowers = |d: &[i64; 2]| d[0] < 0 || d[1] < 0;
        if !lowers(&delta.messages) && !delta.tokens.values().any(lowers) {
            return true;
        }
        // The counts as readers see them, for this message's features
        // only: the snapshot's, plus the journal's changes.
        let Ok(snapshot) = Snapshot::open_unverified(&paths.snapshot()) else {
            return false;
        };
        let Ok(header) = snapshot.header::<ModelHeader>() else {
            return false;
        };
        if header.store.as_ref() != Some(&self.registry.base) {
            return false;
        }
        let empty = Delta::default();
        let journal = self.journal_delta.as_ref().unwrap_or(&empty);
        let Ok(totals) = crate::store::apply_totals(&header.totals, journal) else {
            return false;
        };
        if crate::store::apply_totals(&totals, delta).is_err() {
            return false;
        }
        delta.tokens.iter().all(|(token, &d)| {
            let stored = match crate::features::grams::parse(token) {
                Some(b) => snapshot.gram(b),
                None => snapshot.lookup(token),
            };
            let old = match journal.tokens.get(token) {
                Some(&j) => match crate::store::apply_token(token, stored.unwrap_or_default(), j) {
                    Ok(c) => c,
                    Err(_) => return false,
                },
                None => stored.unwrap_or_default(),
            };
            crate::store::apply_token(token, old, d).is_ok()
        }) && snapshot.intact().is_ok()
    }

    /// Appends `delta` as one entry; `false` (nothing written) if it does
    /// not apply to the model, does not fit the journal or would take it
    /// past `limit` bytes.
    fn append(&self, paths: &DbPaths, delta: &Delta, limit: u64) -> Result<bool> {
        if !self.applies(paths, delta) {
            return Ok(false);
        }
        let from = self
            .journal
            .as_ref()
            .map_or(self.registry.base.generation, |j| j.end().generation);
        let Some(entry) = Entry::from_delta(from, from + 1, delta) else {
            return Ok(false);
        };
        let encoded = entry.encode().len() as u64;
        match &self.journal {
            Some(j) => {
                if j.file_len + encoded > limit {
                    return Ok(false);
                }
                journal::append(&paths.journal(), &entry)?;
            }
            None => {
                if encoded > limit {
                    return Ok(false);
                }
                journal::start(&paths.journal(), &self.registry.base, &entry)?;
            }
        }
        // A model whose mode was loosened for a delivery agent (a new
        // change time) is checked whole by every reader until a record
        // vouches for it again.
        crate::store::snapshot::refresh_checked(&paths.snapshot());
        Ok(true)
    }
}

/// Learns `messages` (as [`super::Trainer::learn`] does) through the
/// journal alone; `None` if the quick path cannot be taken (then nothing
/// was written).
pub fn learn(
    paths: &DbPaths,
    wait: Duration,
    messages: &[Labelled],
    limit: u64,
) -> Result<Option<TrainSummary>> {
    let Some(state) = State::read(paths, wait)? else {
        return Ok(None);
    };
    let mut summary = TrainSummary::default();
    let mut delta = Delta::default();
    let mut given: std::collections::HashMap<Digest, Label> = Default::default();
    for m in messages {
        match given.get(&m.digest) {
            Some(l) if *l == m.label => summary.duplicates += 1,
            // Both labels in one call: the full path reports it.
            Some(_) => return Ok(None),
            None => {
                given.insert(m.digest, m.label);
            }
        }
    }
    let mut seen = HashSet::new();
    for m in messages {
        if !seen.insert(m.digest) {
            continue;
        }
        super::learn_into(&mut delta, &mut summary, m, state.label_of(&m.digest));
    }
    let before = state.messages();
    summary.totals = [0, 1].map(|c| (before[c] as i64 + delta.messages[c]) as u64);
    if delta.is_empty() {
        return Ok(Some(summary));
    }
    if summary.totals.contains(&0) || !state.append(paths, &delta, limit)? {
        return Ok(None);
    }
    Ok(Some(summary))
}

/// Unlearns messages (features and digest) through the journal alone: one
/// result per message, [`Error::NotLearned`] for one that is not learned;
/// `None` if the quick path cannot be taken (then nothing was written),
/// including when a class would be left empty (the full path removes the
/// model then).
pub fn unlearn(
    paths: &DbPaths,
    wait: Duration,
    messages: &[(&Features, Digest)],
    limit: u64,
) -> Result<Option<Vec<Result<Label>>>> {
    let Some(state) = State::read(paths, wait)? else {
        return Ok(None);
    };
    let mut delta = Delta::default();
    let mut results = Vec::with_capacity(messages.len());
    let mut done: std::collections::HashMap<Digest, Label> = Default::default();
    for (features, digest) in messages {
        let now = if done.contains_key(digest) {
            None
        } else {
            state.label_of(digest)
        };
        match now {
            None => results.push(Err(Error::NotLearned)),
            Some(label) => {
                delta.add_message(features, label, -1);
                delta.registry.push((*digest, None));
                done.insert(*digest, label);
                results.push(Ok(label));
            }
        }
    }
    let before = state.messages();
    let after = [0, 1].map(|c| before[c] as i64 + delta.messages[c]);
    if delta.is_empty() {
        return Ok(Some(results));
    }
    if after.contains(&0) || !state.append(paths, &delta, limit)? {
        return Ok(None);
    }
    Ok(Some(results))
}
