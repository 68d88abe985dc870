//! The write side: [`Trainer`] holds the sled count store (the source of
//! truth, one writer at a time) and turns labelled messages into deltas
//! (skipping what the registry says is already learned with the same label,
//! relearning what moved). A training run streams: each message read is
//! counted into a [`Run`] and its features dropped (a bounded sample is
//! kept for the fit of the stacker by [`crate::fit`]), and the run is
//! stored in one atomic write. [`Trainer::compile`] writes a new snapshot;
//! [`Trainer::publish`] compiles one unless snapshot and journal already
//! stand for the counts ([`super::quick`] is what appends to the journal).

use std::collections::HashMap;
use std::time::Duration;

use super::learnlog::Change;
use super::lock::{WriterLock, is_private, private_dir, privatize, refuse_foreign};
use super::run::Run;
use crate::db::ModelHeader;
use crate::db::{DbPaths, Error, Result, TrainSummary};
use crate::decision::Calibrator;
use crate::features::Features;
use crate::message::Identity;
use crate::model::{Combine, Delta, Label, Params, TokenCounts, bernoulli, logistic};
use crate::store::{self, Journal, SledStore, Snapshot, Store, StoreIdentity};
use crate::vocab::{Digest, VIEWS};

/// How long a writer waits for another writer's lock before giving up.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(30);

/// Messages per atomic store write of [`Trainer::learn`] (the full path of
/// `learn` given an mbox): each chunk carries the registry entries of its
/// own messages, so a run killed between chunks leaves counts and registry
/// consistent (a re-run finishes the job).
pub const CHUNK_MESSAGES: usize = 500;

/// A labelled message ready to learn.
#[derive(Debug, Clone)]
pub struct Labelled {
    /// Its features.
    pub features: Features,
    /// Who it is for the registry.
    pub identity: Identity,
    /// Its label.
    pub label: Label,
}

/// A damaged journal a writer set aside: where it is now, and what was
/// wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// The file it was renamed to.
    pub path: std::path::PathBuf,
    /// What is damaged.
    pub reason: String,
}

/// A name beside `path` for a damaged file set aside: `NAME.damaged`, or
/// `NAME.damaged.N` for the first N that is free.
fn aside(path: &std::path::Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".damaged");
    let first = std::path::PathBuf::from(&name);
    (1..)
        .map(|n| {
            if n == 1 {
                first.clone()
            } else {
                let mut numbered = name.clone();
                numbered.push(format!(".{n}"));
                numbered.into()
            }
        })
        .find(|p: &std::path::PathBuf| std::fs::symlink_metadata(p).is_err())
        .expect("a free name")
}

/// The write side: holds the sled store's lock for as long as it lives.
pub struct Trainer {
    paths: DbPaths,
    /// Closed before the lock is let go (fields drop in this order): a
    /// closing that hangs keeps the lock until the process ends
    /// ([`crate::store::stall`]), never sled's own lock without ours.
    store: SledStore,
    /// Held for the writer's life: see [`WriterLock`].
    _lock: WriterLock,
    /// Whether the registry file is gone (it must be before the store
    /// changes).
    registry_removed: bool,
    /// The snapshot's header (`None`: no snapshot, or one that does not
    /// read), read once: only this writer replaces the snapshot.
    header: Option<ModelHeader>,
    /// The journal as this writer last read or wrote it (only the writer
    /// changes it).
    journal: Option<Journal>,
    /// A stacker a learn refitted ([`Trainer::refitted`]), for the next
    /// snapshot.
    refitted: Option<(Calibrator, u64)>,
    /// The parameters of a first model, for a database without one
    /// ([`Trainer::first_params`]).
    first: Params,
    /// Why the snapshot there could not be read (damaged, or of a format
    /// this version does not read), if there is one.
    unreadable: Option<String>,
}

impl Trainer {
    /// Opens (creating if needed) the database, waiting up to `wait` for
    /// another writer.
    ///
    /// Fails with [`Error::LostHistory`] if the model was compiled from a
    /// count store that is no longer there as it was: another store (the
    /// first was deleted or replaced), or the same one at an earlier change
    /// (rolled back by a truncation or a restored copy). For a model written
    /// before stores had an identity, a store holding fewer messages than
    /// the model counts as one that lost its history. A model that cannot
    /// be read says nothing and is rebuilt by the next write.
    ///
    /// A directory it creates is private to the user (0700), the count
    /// store's files too; existing ones keep their permissions.
    ///
    /// A damaged journal ([`Journal::read`]) is an error: its entries are
    /// neither folded nor deleted (see [`Trainer::open_rebuilding`]).
    pub fn open(paths: &DbPaths, wait: Duration) -> Result<Trainer> {
        Self::open_with(paths, wait, false).map(|(trainer, _)| trainer)
    }

    /// [`Trainer::open`] for a writer that rebuilds the model from the
    /// count store and the folders it is given: a damaged journal is set
    /// aside (renamed, never deleted) instead of being an error, and
    /// returned. What `learn` and `unlearn` recorded only there since the
    /// model was last compiled is then not in the counts; learning the
    /// folders again puts it back.
    pub fn open_rebuilding(paths: &DbPaths, wait: Duration) -> Result<(Trainer, Option<SetAside>)> {
        Self::open_with(paths, wait, true)
    }

    fn open_with(
        paths: &DbPaths,
        wait: Duration,
        set_aside_damage: bool,
    ) -> Result<(Trainer, Option<SetAside>)> {
        // A directory that is there (or cannot be looked at, for a
        // parent's permissions) was not to be created: it could not be
        // entered.
        let create = |path: &std::path::Path| {
            private_dir(path).map_err(|source| {
                let path = path.to_path_buf();
                match std::fs::symlink_metadata(&path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Error::Create { path, source }
                    }
                    _ => Error::Enter { path, source },
                }
            })
        };
        refuse_foreign(paths)?;
        create(paths.dir())?;
        let counts = paths.counts();
        let new_store = match std::fs::symlink_metadata(&counts) {
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            // The database's directory (or one above it) is closed to us.
            Err(source) => {
                return Err(Error::Enter {
                    path: paths.dir().to_path_buf(),
                    source,
                });
            }
        };
        if new_store {
            create(&counts)?;
            // Best effort: a store left private shuts the group's other
            // writers out with an error that names it.
            let _ = crate::fsutil::share_new_dir(&counts);
        }
        let lock = WriterLock::take(paths, wait)?;
        let mut store = SledStore::open(&counts, wait)?;
        // sled creates its files under the umask, at creation and at each
        // open (a new snapshot of its own): made private here, or open to
        // the group of a store its group shares (as a database directory
        // open to its group makes it), so that the group's next writer can
        // open it. A store the user opened to others stays as it is.
        if is_private(&counts) {
            privatize(&counts);
        } else if crate::fsutil::shared_with_group(&counts) {
            crate::fsutil::share_tree(&counts);
        }
        paths.sweep_stale_temps();
        // Damaged, of another format, not a regular file: rebuilt. Unreadable for now: an error.
        let snapshot = Snapshot::open(&paths.snapshot()).and_then(|s| s.header());
        let (header, unreadable) = match snapshot {
            Ok(header) => (Some(header), None),
            Err(e) => match std::fs::symlink_metadata(paths.snapshot()) {
                Err(_) => (None, None),
                Ok(m) if m.is_file() && e.may_pass() => return Err(e.into()),
                Ok(_) => (None, Some(e.to_string())),
            },
        };
        let mut set_aside = None;
        let journal = match Journal::read(&paths.journal()) {
            Err(store::Error::Corrupt { path, reason }) if set_aside_damage => {
                let to = aside(&path);
                std::fs::rename(&path, &to).map_err(|source| store::Error::Io {
                    path: path.clone(),
                    source,
                })?;
                set_aside = Some(SetAside { path: to, reason });
                None
            }
            other => other?,
        };
        // What `learn` appended to the journal alone goes into the store
        // first (store + journal are the truth until then): the entries
        // past the store's generation. The registry file goes first: once
        // the store is past its state, a journal lost or damaged from here
        // on must not let `learn` restart one at that state, whose
        // generations the store has used.
        // Whether the journal is for this store at a state it has not
        // passed is told by the store alone: a model that is damaged or
        // gone must not make its entries vanish. Entries go in one at a
        // time, as readers replay them, each its own atomic change.
        if let Some(j) = &journal {
            let now = store.identity()?;
            let end = j.end();
            if now.id == end.id
                && j.base.generation <= now.generation
                && now.generation < end.generation
            {
                store::registry::remove(&paths.registry())?;
                for e in j.entries.iter().filter(|e| e.from >= now.generation) {
                    store.apply_at(&e.to_delta(), Some(e.to))?;
                }
                store.flush()?;
            }
        }
        let trainer = Trainer {
            _lock: lock,
            registry_removed: false,
            paths: paths.clone(),
            store,
            header,
            journal,
            refitted: None,
            first: Params::default(),
            unreadable,
        };
        trainer.check_history()?;
        Ok((trainer, set_aside))
    }

    /// Applies `delta` to the store, the only way this writer changes it:
    /// the registry file goes first (once), since it must never stand for
    /// a state the store has left.
    /// Returns how many counts it could not take back exactly.
    fn change_store(&mut self, delta: &Delta) -> Result<u64> {
        if !self.registry_removed {
            store::registry::remove(&self.paths.registry())?;
            self.registry_removed = true;
        }
        Ok(self.store.apply(delta)?)
    }

    /// See [`Trainer::open`].
    fn check_history(&self) -> Result<()> {
        let Some(model) = self.current_header() else {
            return Ok(());
        };
        let now = self.store.identity()?;
        // Where the journal took the model, not only where the snapshot was.
        let reason = match &self.model_identity()? {
            Some(built) if built.id != now.id => Some(
                "is not the one the model was built from (it was deleted or replaced)".to_string(),
            ),
            Some(built) if now.generation < built.generation => Some(format!(
                "has gone back to an earlier state (it is at change {}, the model was built at change {})",
                now.generation, built.generation
            )),
            Some(_) => None,
            None => {
                let held: u64 = self.store.totals()?.messages.iter().sum();
                let built: u64 = model.totals.messages.iter().sum();
                (held < built).then(|| format!("holds fewer messages ({held}) than the model"))
            }
        };
        match reason {
            None => Ok(()),
            Some(reason) => Err(Error::LostHistory {
                counts: self.paths.counts(),
                model: self.paths.snapshot(),
                model_messages: model.totals.messages.iter().sum(),
                reason,
            }),
        }
    }

    /// The header of the current snapshot, if there is one that reads.
    pub(super) fn current_header(&self) -> Option<ModelHeader> {
        let mut header = self.header.clone()?;
        // A stacker a learn refitted lives in the journal until the next
        // snapshot takes it.
        if let Some(journal) = self
            .journal
            .as_ref()
            .filter(|j| header.store.as_ref() == Some(&j.base))
            && let Some((stacker, n)) = journal.stacker()
        {
            header.calibrator = stacker;
            header.calibrated_on = usize::try_from(n).unwrap_or(usize::MAX);
        }
        Some(header)
    }

    /// Gives the stacker a learn refitted (see [`crate::db`]'s restack),
    /// which the next snapshot takes instead of the current one.
    pub(crate) fn refitted(&mut self, stacker: Option<(Calibrator, u64)>) {
        if stacker.is_some() {
            self.refitted = stacker;
        }
    }

    /// The store identity that snapshot and journal together reflect:
    /// `None` if there is no readable snapshot or it records no store.
    fn model_identity(&self) -> Result<Option<StoreIdentity>> {
        let Some(base) = self.header.as_ref().and_then(|h| h.store.clone()) else {
            return Ok(None);
        };
        Ok(Some(match &self.journal {
            Some(j) if j.base == base => j.end(),
            _ => base,
        }))
    }

    /// The count store.
    pub fn store(&self) -> &SledStore {
        &self.store
    }

    /// Learns messages idempotently: a message already learned with the same
    /// label is skipped, one learned with the other label is moved. Changes
    /// are applied in atomic chunks of [`CHUNK_MESSAGES`]; `progress` is
    /// called with the number of messages handled so far.
    pub fn learn(
        &mut self,
        messages: &[Labelled],
        progress: &mut dyn FnMut(usize),
    ) -> Result<TrainSummary> {
        let mut summary = TrainSummary::default();
        // One label per digest in this run; a message given twice with the
        // same label counts once, with both labels not at all.
        let mut wanted: HashMap<Digest, Option<Label>> = HashMap::new();
        for m in messages {
            match wanted.get(&m.identity.digest) {
                None => {
                    wanted.insert(m.identity.digest, Some(m.label));
                }
                Some(Some(l)) if *l == m.label => summary.duplicates += 1,
                Some(Some(_)) => {
                    wanted.insert(m.identity.digest, None);
                    summary.conflicting += 1;
                }
                Some(None) => summary.conflicting += 1,
            }
        }
        let mut seen = std::collections::HashSet::new();
        let mut delta = Delta::default();
        let mut weights = self.weights()?;
        let mut in_chunk = 0;
        for (i, m) in messages.iter().enumerate() {
            let digest = m.identity.digest;
            if wanted.get(&digest) != Some(&Some(m.label)) || !seen.insert(digest) {
                continue;
            }
            let now = self.registered(&m.identity)?;
            if !learn_into(&mut delta, &mut summary, m, now, weights.as_mut()) {
                continue;
            }
            in_chunk += 1;
            if in_chunk == CHUNK_MESSAGES {
                let chunk = std::mem::take(&mut delta);
                summary.inexact += self.change_store(&chunk)?;
                in_chunk = 0;
                progress(i + 1);
            }
        }
        if in_chunk > 0 {
            summary.inexact += self.change_store(&delta)?;
        }
        progress(messages.len());
        self.store.flush()?;
        summary.totals = self.store.totals()?.messages;
        Ok(summary)
    }

    /// True if the model snapshot is missing, unreadable (damaged, of an
    /// older format) or, with its journal, reflects other counts than the
    /// store holds now (e.g. a run was killed after storing its counts but
    /// before writing the snapshot or the journal): the next write must
    /// bring it up to date even if it learns nothing new.
    pub(crate) fn model_is_stale(&self) -> Result<bool> {
        if self.unreadable.is_some() {
            return Ok(true);
        }
        match self.model_identity()? {
            Some(model) => Ok(model != self.store.identity()?),
            // A model from before stores had an identity: compare counts.
            None => {
                let totals = self.store.totals()?;
                Ok(self.header.as_ref().is_none_or(|h| h.totals != totals))
            }
        }
    }

    /// Why the model there could not be read when this writer opened the
    /// database (damaged, or of a format this version does not read):
    /// the next snapshot is built from the counts, with the parameters of
    /// a first model and the stacker refitted from the record of
    /// prequential samples ([`crate::store::samples`]) where that holds
    /// enough of each class; the choices only a training run makes are
    /// not there.
    pub fn unreadable_model(&self) -> Option<&str> {
        self.unreadable.as_deref()
    }

    /// Makes the model reflect the counts after `learn` or `unlearn`,
    /// keeping its parameters and calibration: compiles a new snapshot (and
    /// registry file) unless snapshot and journal already stand for the
    /// store and the registry file is there, so that the next `learn` can
    /// take the journal alone. `params` are those of a first snapshot.
    /// Returns whether it compiled.
    pub(crate) fn publish(&mut self, params: Params) -> Result<bool> {
        let up_to_date = self.model_identity()? == Some(self.store.identity()?);
        if up_to_date && self.paths.registry().exists() {
            return Ok(false);
        }
        self.compile(params, None)?;
        Ok(true)
    }

    /// The label the registry knows a message under, and the digest it
    /// knows it by (a registry written before the canonical digest may know
    /// it by the legacy one).
    fn registered(&self, identity: &Identity) -> Result<Option<(Label, Digest)>> {
        for digest in identity.digests() {
            if let Some(label) = self.store.label_of(&digest)? {
                return Ok(Some((label, digest)));
            }
        }
        Ok(None)
    }

    /// Sets the parameters a first model will have: whether a database
    /// without a model learns the online discriminative view's weights.
    pub(crate) fn first_params(&mut self, params: Params) {
        self.first = params;
    }

    /// The online discriminative view's weights as the store holds them,
    /// if the model weighs that view (else its weights are not learned,
    /// and cost nothing).
    fn weights(&self) -> Result<Option<logistic::Table>> {
        let params = self.header.as_ref().map_or(&self.first, |h| &h.params);
        if !params.logistic {
            return Ok(None);
        }
        let mut table = logistic::Table::default();
        for (bucket, counts) in self.store.weights()? {
            table.set(bucket, counts);
        }
        Ok(Some(table))
    }

    /// Unlearns messages (features and identity), in one change of the
    /// store: for each, the label it had or [`Error::NotLearned`] if the
    /// registry does not know it (or it came earlier in `messages`); and
    /// how many counts could not be taken back exactly (see
    /// [`TrainSummary::inexact`]). The online discriminative view takes the
    /// reverse of each one's step ([`logistic::reverse_step`]), in order.
    pub fn unlearn(
        &mut self,
        messages: &[(&Features, Identity)],
    ) -> Result<(Vec<Result<Label>>, u64)> {
        let mut delta = Delta::default();
        let mut weights = self.weights()?;
        let mut gone = std::collections::HashSet::new();
        let mut results = Vec::with_capacity(messages.len());
        for (features, identity) in messages {
            let Some((label, known_as)) = self.registered(identity)? else {
                results.push(Err(Error::NotLearned));
                continue;
            };
            if !gone.insert(known_as) {
                results.push(Err(Error::NotLearned));
                continue;
            }
            delta.add_message(features, label, -1);
            if let Some(weights) = weights.as_mut() {
                weights.learn(Some(&mut delta), &features.lr_buckets, label, -1);
            }
            delta.registry.push((known_as, None));
            results.push(Ok(label));
        }
        let inexact = self.change_store(&delta)?;
        self.store.flush()?;
        Ok((results, inexact))
    }

    /// Adds one message read by a training run to `run`: skipped if the
    /// run already has it under the same label (a duplicate), a conflict if
    /// under the other, else counted for calibration and, unless the
    /// registry already has it under this label, for the store. `source`
    /// names where it came from (for a conflict).
    pub(crate) fn add_to_run(
        &self,
        run: &mut Run,
        m: &Labelled,
        source: impl std::fmt::Display,
    ) -> Result<()> {
        let digest = m.identity.digest;
        let Some((ex, key)) = run.take_in(m, source) else {
            return Ok(());
        };
        // The store takes each message's counts under its label (the run's
        // counts) but for those set apart: a message it holds already, and
        // the old label of one that moves.
        let now = self.registered(&m.identity)?;
        if let Some((_, known_as)) = now
            && known_as != digest
        {
            // Known by its legacy digest: from now on by its own.
            run.registry.push((known_as, None));
        }
        match now {
            Some((old, known_as)) if old == m.label => {
                run.set_apart(&ex, m.label);
                run.summary.unchanged += 1;
                if known_as != digest {
                    run.registry.push((digest, Some(m.label)));
                }
            }
            Some((old, _)) => {
                run.set_apart(&ex, old);
                run.change(&ex, old, -1);
                run.change(&ex, m.label, 1);
                run.registry.push((digest, Some(m.label)));
                run.summary.relearned += 1;
            }
            None => {
                run.change(&ex, m.label, 1);
                run.registry.push((digest, Some(m.label)));
                run.summary.learned += 1;
            }
        }
        // A message an earlier version counted twice, under two of its
        // digests (read once with and once without an mbox's last blank
        // line), is counted once from now on.
        let learned = !matches!(now, Some((old, _)) if old == m.label);
        let known_as = now.map(|(_, d)| d);
        for other in m.identity.digests().filter(|d| Some(*d) != known_as) {
            if let Some(label) = self.store.label_of(&other)? {
                run.set_apart(&ex, label);
                run.change(&ex, label, -1);
                run.registry.push((other, None));
                run.summary.merged += 1;
            }
        }
        run.offer(key, m.label, ex, learned);
        Ok(())
    }

    /// Applies what `run` changes to the store in one atomic write (all of
    /// it or, on error, none) and returns its summary. A run with a
    /// conflict must not be stored; it is refused.
    pub(crate) fn store_run(&mut self, run: Run) -> Result<TrainSummary> {
        let (delta, mut summary) = run.into_delta()?;
        if delta.is_empty() {
            // Nothing new: the store (and its generation) stay as they are.
            summary.totals = self.store.totals()?.messages;
            return Ok(summary);
        }
        summary.inexact = self.change_store(&delta)?;
        // Freed before sled writes its log: that is when its memory peaks.
        drop(delta);
        release_freed_memory();
        self.store.flush()?;
        summary.totals = self.store.totals()?.messages;
        Ok(summary)
    }

    /// Removes word tokens seen at most `max_count` times whose counts have
    /// not changed for `min_age_days` days (see
    /// [`SledStore::rare_and_old`]); every other count stays exactly as it
    /// was. Returns how many were removed. The caller compiles the model.
    pub fn prune(&mut self, max_count: u64, min_age_days: u32) -> Result<usize> {
        let before = crate::store::sled::aged_before(min_age_days);
        let delta = self.store.rare_and_old(max_count, before)?;
        let removed = delta.words.len();
        if removed > 0 {
            self.change_store(&delta)?;
            self.store.flush()?;
        }
        Ok(removed)
    }

    /// Writes a new snapshot from the store: the given parameters and
    /// calibration, or those of the current snapshot when `calibration` is
    /// `None` (defaults if there is none yet).
    /// The journal is folded in (the snapshot is compiled from the store,
    /// which holds every change) and removed after the new snapshot is in
    /// place: a writer killed in between leaves a journal for an older
    /// snapshot, which applies to nothing.
    pub fn compile(
        &mut self,
        params: Params,
        calibration: Option<(Calibrator, usize)>,
    ) -> Result<()> {
        let previous = self.current_header();
        // A model that did not read takes its stacker from the record.
        let recorded = || {
            let record = store::samples::read(&self.paths.samples()).ok()??;
            record.fit_if_enough().map(|(c, n)| (c, n as u64))
        };
        let refitted = match (&self.unreadable, &previous) {
            (Some(_), None) => self.refitted.take().or_else(recorded),
            _ => self.refitted.take(),
        }
        .map(|(c, n)| (c, usize::try_from(n).unwrap_or(usize::MAX)));
        let (params, calibrator, calibrated_on) = match (calibration, &previous) {
            (Some((c, n)), _) => (params, c, n),
            (None, Some(prev)) if let Some((c, n)) = refitted => (prev.params, c, n),
            (None, None) if let Some((c, n)) = refitted => (params, c, n),
            (None, Some(prev)) => (prev.params, prev.calibrator, prev.calibrated_on),
            (None, None) => (params, Calibrator::default(), 0),
        };
        let valid = params.check().map_err(|reason| Error::BadModel {
            path: self.paths.snapshot(),
            reason,
        })?;
        let totals = self.store.totals()?;
        let mut absent_constant = [0.0; VIEWS];
        if params.combine == Combine::Textbook {
            let mut vocab: [Vec<TokenCounts>; VIEWS] = Default::default();
            self.store.for_each_token(&mut |f, c: TokenCounts| {
                if let Some(view) = f.view() {
                    vocab[view.index()].push(c);
                }
            })?;
            for (constant, vocab) in absent_constant.iter_mut().zip(vocab) {
                *constant = bernoulli::absent_constant(valid.prior(), totals.messages, vocab);
            }
        }
        let header = ModelHeader {
            version: env!("CARGO_PKG_VERSION").to_string(),
            params,
            totals,
            calibrator,
            absent_constant,
            calibrated_on,
            store: Some(self.store.identity()?),
        };
        // The registry file stands for one snapshot: gone before another
        // replaces it.
        store::registry::remove(&self.paths.registry())?;
        store::write_store_snapshot(&self.paths.snapshot(), &header, &self.store)?;
        self.write_registry(&header)?;
        store::journal::remove(&self.paths.journal())?;
        self.journal = None;
        self.header = Some(header);
        self.unreadable = None;
        Ok(())
    }
}

/// Hands memory freed by the process back to the system, where the
/// allocator keeps it otherwise (glibc keeps freed memory of each thread's
/// arena for reuse): a training run's peak comes after reading, and the
/// reading's garbage need not count in it.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Trainer {
    /// Writes the registry file for the snapshot just written (`header`).
    fn write_registry(&mut self, header: &ModelHeader) -> Result<()> {
        let Some(base) = &header.store else {
            return Ok(());
        };
        let mut all = Vec::new();
        self.store.for_each_message(&mut |d, l| all.push((d, l)))?;
        store::registry::write(
            &self.paths.registry(),
            base,
            header.totals.messages,
            all.into_iter(),
        )?;
        self.registry_removed = false;
        Ok(())
    }
}

/// Adds the change that learns `m` to `delta`, given the label it has now
/// and the digest the registry knows it by (`None`: not learned), and
/// counts it in `summary`: nothing if it has that label already (but a
/// registry entry under its legacy digest moves to its own), a move if it
/// has the other. The online discriminative view steps through it in
/// `weights`, if given (and the same change goes to `delta`). Returns
/// whether anything changed.
pub(crate) fn learn_into(
    delta: &mut Delta,
    summary: &mut TrainSummary,
    m: &Labelled,
    now: Option<(Label, Digest)>,
    mut weights: Option<&mut logistic::Table>,
) -> bool {
    let digest = m.identity.digest;
    if let Some((_, known_as)) = now
        && known_as != digest
    {
        delta.registry.push((known_as, None));
    }
    let change = match now {
        Some((old, _)) if old == m.label => Change::Already(m.label),
        Some(_) => Change::Relabelled(m.label),
        None => Change::Learned(m.label),
    };
    summary.changes.push((digest, change));
    match now {
        Some((old, known_as)) if old == m.label => {
            summary.unchanged += 1;
            if known_as == digest {
                return false;
            }
            delta.registry.push((digest, Some(m.label)));
            return true;
        }
        Some((old, _)) => {
            delta.add_message(&m.features, old, -1);
            if let Some(w) = weights.as_deref_mut() {
                w.learn(Some(delta), &m.features.lr_buckets, old, -1);
            }
            summary.relearned += 1;
        }
        None => summary.learned += 1,
    }
    delta.add_message(&m.features, m.label, 1);
    if let Some(w) = weights {
        w.learn(Some(delta), &m.features.lr_buckets, m.label, 1);
    }
    delta.registry.push((digest, Some(m.label)));
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::features::Extractor;
    use crate::fit::Settings;
    use crate::vocab::{BUCKET_BITS, Feature, FeatureBuf};
    use std::path::Path;

    const WAIT: Duration = Duration::from_secs(5);

    /// A message of its own made from `text`, with `label`.
    pub(crate) fn labelled(text: &str, label: Label) -> Labelled {
        let raw = format!("Subject: {text}\n\n{text} body\n");
        Labelled {
            features: Extractor::new().extract(raw.as_bytes()).unwrap(),
            identity: Identity::of(raw.as_bytes()),
            label,
        }
    }

    /// A run smaller than the database keeps the database's pseudo-counts;
    /// one at least as large chooses them (from the grid, which 0.3 is not
    /// in).
    #[test]
    fn a_run_smaller_than_the_database_keeps_its_pseudo_counts() {
        use crate::db::train::{Before, Training, calibrate};
        let dir = tempfile::tempdir().unwrap();
        let trainer = Trainer::open(&DbPaths::new(dir.path()), WAIT).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let job = Training {
            ham: &[],
            spam: &[],
            options: Default::default(),
            params: crate::model::ValidParams::default(),
            select: crate::fit::Select::ALL,
            wait: WAIT,
            interrupt: &stop,
        };
        let settled = crate::model::Params {
            a: 0.3,
            b: 0.3,
            grows: false,
            ..crate::model::Params::default()
        };
        let run_with = |job: &Training<'_>, held: [u64; 2], database: crate::model::Params| {
            let mut run = Run::new();
            for i in 0..80 {
                let (text, label) = if i % 2 == 0 {
                    (format!("cheap pills offer{i} now"), Label::Spam)
                } else {
                    (format!("meeting notes agenda{i} friday"), Label::Ham)
                };
                trainer
                    .add_to_run(&mut run, &labelled(&text, label), "x")
                    .unwrap();
            }
            let before = Before {
                totals: held,
                params: Some(database),
            };
            let (params, fitted, calibration) = calibrate(&mut run, job, before, None, &|_| {});
            assert!(fitted.is_some());
            let crate::db::Calibration::Fitted {
                params: fitted_for, ..
            } = calibration
            else {
                panic!("{calibration:?}");
            };
            (params, fitted_for)
        };
        let chosen = |held, database| run_with(&job, held, database).0;
        let kept = chosen([41, 40], settled);
        assert_eq!((kept.a, kept.b), (0.3, 0.3), "80 messages added to 81");
        assert!(!kept.grows);
        let fresh = chosen([40, 40], settled);
        assert_eq!(fresh.a, fresh.b);
        assert!(crate::fit::PRIOR_GRID.contains(&fresh.a), "{}", fresh.a);
        assert!(!fresh.grows, "chosen");
        // A database that only learned keeps all of its own, still growing.
        let learning = crate::model::Params {
            grows: true,
            ..settled
        };
        assert_eq!(chosen([41, 40], learning), learning);
        assert!(
            !chosen([40, 40], learning).grows,
            "a run as large as it chooses"
        );
        // Grown, it keeps its own too, and the stacker is fitted for the
        // values it scores with.
        use crate::model::{GROWN_AT, GROWN_PRIOR, GROWN_STRENGTH};
        let grown = [GROWN_AT, GROWN_AT];
        let (stored, fitted_for) = run_with(&job, grown, learning);
        assert_eq!(stored, learning);
        assert_eq!((fitted_for.a, fitted_for.b), (GROWN_PRIOR, GROWN_PRIOR));
        assert_eq!(
            fitted_for.combine,
            Combine::Tempered {
                min_strength: GROWN_STRENGTH,
                power: 1.0
            }
        );
        // So is one the run makes grown.
        let (_, fitted_for) = run_with(&job, [GROWN_AT - 10, GROWN_AT - 10], learning);
        assert_eq!((fitted_for.a, fitted_for.b), (GROWN_PRIOR, GROWN_PRIOR));
        // With a strength pinned, the pseudo-counts kept are those it
        // scores with.
        let pinned = crate::model::Params {
            combine: Combine::Tempered {
                min_strength: 1.5,
                power: 1.0,
            },
            grows: false,
            ..crate::model::Params::default()
        };
        let job = Training {
            params: pinned.check().unwrap(),
            select: crate::fit::Select {
                prior: true,
                strength: false,
            },
            ..job
        };
        let (stored, _) = run_with(&job, grown, learning);
        assert_eq!(
            (stored.a, stored.b, stored.grows),
            (GROWN_PRIOR, GROWN_PRIOR, false)
        );
    }

    #[test]
    fn a_run_steps_the_discriminative_view_once_and_a_second_run_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DbPaths::new(dir.path());
        let mut trainer = Trainer::open(&paths, WAIT).unwrap();
        let settings = Settings {
            select: crate::fit::Select::NONE,
            params: crate::model::ValidParams::default(),
            inner_folds: 5,
            inputs: Default::default(),
        };
        let messages: Vec<Labelled> = (0..80)
            .map(|i| {
                if i % 4 == 0 {
                    labelled(&format!("cheap pills offer{i}"), Label::Spam)
                } else {
                    labelled(&format!("meeting notes agenda{i}"), Label::Ham)
                }
            })
            .collect();
        let table = |trainer: &Trainer| {
            let mut t = logistic::Table::default();
            for (bucket, counts) in trainer.store.weights().unwrap() {
                t.set(bucket, counts);
            }
            t
        };
        let mut run = Run::new();
        for m in &messages {
            trainer.add_to_run(&mut run, m, "x").unwrap();
        }
        let (_, fitted) = run.calibrate(&settings, 10, Some(table(&trainer)));
        // Each sample's input is the view's score before its own step:
        // zero for the first, not for those after.
        let fitted = fitted.expect("fitted");
        let lr = |s: &crate::decision::prequential::Sample| {
            s.inputs[crate::decision::calibrate::LOGISTIC]
        };
        assert!(fitted.samples.iter().filter(|s| lr(s) != 0.0).count() > 70);
        let mean = |spam: bool| {
            let of: Vec<f64> = fitted
                .samples
                .iter()
                .filter(|s| s.spam == spam)
                .map(lr)
                .collect();
            of.iter().sum::<f64>() / of.len() as f64
        };
        assert!(
            mean(true) > 0.0 && mean(false) < 0.0,
            "{} {}",
            mean(true),
            mean(false)
        );
        trainer.store_run(run).unwrap();
        let stepped = trainer.store.weights().unwrap();
        assert!(!stepped.is_empty());
        let buckets = |text: &str| {
            let raw = format!("Subject: x\n\n{text}\n");
            Extractor::new().extract(raw.as_bytes()).unwrap().lr_buckets
        };
        let t = table(&trainer);
        assert!(t.score(&buckets("cheap pills")) > 0.0);
        assert!(t.score(&buckets("meeting notes agenda")) < 0.0);

        // The same messages again: nothing is learned, so nothing steps
        // the view, and the store stays as it was.
        let before = trainer.store.identity().unwrap();
        let mut again = Run::new();
        for m in &messages {
            trainer.add_to_run(&mut again, m, "x").unwrap();
        }
        let (_, fitted) = again.calibrate(&settings, 10, Some(table(&trainer)));
        assert!(fitted.is_some());
        assert!(again.rest.weights.is_empty());
        assert_eq!(trainer.store_run(again).unwrap().unchanged, 80);
        assert_eq!(trainer.store.identity().unwrap(), before);
        assert_eq!(trainer.store.weights().unwrap(), stepped);
    }

    #[test]
    fn a_run_counts_every_message_and_fits_on_a_bounded_sample() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DbPaths::new(dir.path());
        let mut trainer = Trainer::open(&paths, WAIT).unwrap();
        let mut run = Run::with_sample(30);
        for i in 0..200 {
            let (text, label) = if i % 4 == 0 {
                (format!("cheap pills offer{i}"), Label::Spam)
            } else {
                (format!("meeting notes agenda{i}"), Label::Ham)
            };
            let m = labelled(&text, label);
            trainer.add_to_run(&mut run, &m, "x").unwrap();
            // The same message again is a duplicate, not a second count.
            trainer.add_to_run(&mut run, &m, "x").unwrap();
        }
        assert_eq!(run.len(), 200);
        let settings = Settings {
            select: crate::fit::Select::NONE,
            params: crate::model::ValidParams::default(),
            inner_folds: 5,
            inputs: Default::default(),
        };
        let (_, fitted) = run.calibrate(&settings, 10, None);
        let fitted = fitted.expect("fitted");
        assert_eq!(fitted.messages, 60, "30 of each class");
        // Its samples, one per message fitted on, start the record learns
        // refit on: each keyed by its message, labels as learned.
        assert_eq!(fitted.samples.len(), 60);
        assert_eq!(fitted.samples.iter().filter(|s| s.spam).count(), 30);
        let keys: std::collections::HashSet<u64> = fitted.samples.iter().map(|s| s.key).collect();
        assert_eq!(keys.len(), 60);
        let summary = trainer.store_run(run).unwrap();
        assert_eq!((summary.learned, summary.duplicates), (200, 200));
        assert_eq!(summary.totals, [150, 50]);
        let count = |w| trainer.store.token(Feature::Word(w)).unwrap();
        assert_eq!(count("meeting").ham, 150);
        assert_eq!(count("pills").spam, 50);

        // A second run of the same messages changes nothing, not even the
        // store's generation; one with a message under both labels is
        // refused whole.
        let before = trainer.store.identity().unwrap();
        let mut again = Run::new();
        trainer
            .add_to_run(
                &mut again,
                &labelled("meeting notes agenda1", Label::Ham),
                "a",
            )
            .unwrap();
        assert_eq!(trainer.store_run(again).unwrap().unchanged, 1);
        assert_eq!(trainer.store.identity().unwrap(), before);
        let mut both = Run::new();
        trainer
            .add_to_run(&mut both, &labelled("new one", Label::Ham), "a")
            .unwrap();
        trainer
            .add_to_run(&mut both, &labelled("new one", Label::Spam), "b")
            .unwrap();
        assert_eq!(both.conflicts(), ["b"]);
        assert!(matches!(
            trainer.store_run(both),
            Err(Error::Conflicting(c)) if c == ["b"]
        ));
        assert_eq!(trainer.store.identity().unwrap(), before);
    }

    /// A second run stores what changes: a message it holds already adds
    /// nothing, a moved one leaves its old label, a new one adds; each
    /// feature counts once per message: a word spelled as a format keyed by
    /// name spells a bucket the message has is a word of its own, and a
    /// number that is no bucket is left out.
    #[test]
    fn a_second_run_stores_the_counts_of_the_final_labels() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DbPaths::new(dir.path());
        let mut trainer = Trainer::open(&paths, WAIT).unwrap();
        let (a, b, c) = (
            labelled("meeting notes", Label::Ham),
            labelled("cheap pills meeting", Label::Spam),
            labelled("cheap offer", Label::Spam),
        );
        let mut odd = labelled("odd one", Label::Ham);
        odd.features.tokens = crate::tokenize::TokenList::from_tokens(
            odd.features
                .tokens
                .iter()
                .map(str::to_owned)
                .chain(["\u{1}00005".to_owned(), "\u{1}40000".to_owned()]),
        );
        odd.features.grams = vec![5, 7, 1 << BUCKET_BITS];
        let mut first = Run::new();
        for m in [&a, &b] {
            trainer.add_to_run(&mut first, m, "x").unwrap();
        }
        trainer.store_run(first).unwrap();
        let moved = Labelled {
            label: Label::Ham,
            ..b.clone()
        };
        let mut second = Run::new();
        for m in [&a, &moved, &c, &odd] {
            trainer.add_to_run(&mut second, m, "x").unwrap();
        }
        let summary = trainer.store_run(second).unwrap();
        assert_eq!(
            (summary.unchanged, summary.relearned, summary.learned),
            (1, 1, 2)
        );
        assert_eq!(summary.totals, [3, 1]);
        let mut expected: HashMap<FeatureBuf, TokenCounts> = HashMap::new();
        for m in [&a, &moved, &c, &odd] {
            let mut names = std::collections::HashSet::new();
            m.features.for_each_feature(|t| {
                names.insert(t.into_owned());
            });
            for t in names {
                let e = expected.entry(t).or_default();
                match m.label {
                    Label::Ham => e.ham += 1,
                    Label::Spam => e.spam += 1,
                }
            }
        }
        let mut stored: HashMap<FeatureBuf, TokenCounts> = HashMap::new();
        trainer
            .store
            .for_each_token(&mut |t, c| {
                if c.ham + c.spam > 0 {
                    stored.insert(t.into_owned(), c);
                }
            })
            .unwrap();
        assert_eq!(stored, expected);
        assert_eq!(stored[&FeatureBuf::Gram(5)].ham, 1);
        assert_eq!(stored[&FeatureBuf::Word("\u{1}00005".into())].ham, 1);
        assert_eq!(stored[&FeatureBuf::Word("\u{1}40000".into())].ham, 1);
        assert!(!stored.contains_key(&FeatureBuf::Gram(1 << BUCKET_BITS)));
    }

    /// A database trained on a few messages, its model compiled.
    fn trained(dir: &Path) -> DbPaths {
        let paths = DbPaths::new(dir.join("db"));
        let mut trainer = Trainer::open(&paths, WAIT).unwrap();
        let messages = [
            labelled("cheap meds", Label::Spam),
            labelled("meeting notes", Label::Ham),
            labelled("lunch plans", Label::Ham),
        ];
        trainer.learn(&messages, &mut |_| {}).unwrap();
        trainer.compile(Params::default(), None).unwrap();
        paths
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    fn lost_history(paths: &DbPaths) -> String {
        match Trainer::open(paths, WAIT) {
            Err(e @ Error::LostHistory { .. }) => e.to_string(),
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("a store that lost its history was accepted"),
        }
    }

    #[test]
    fn refuses_a_store_that_replaced_the_one_the_model_was_built_from() {
        let dir = tempfile::tempdir().unwrap();
        let paths = trained(dir.path());
        let model = std::fs::read(paths.snapshot()).unwrap();
        std::fs::remove_dir_all(paths.counts()).unwrap();
        let err = lost_history(&paths);
        assert!(err.contains("deleted or replaced"), "{err}");
        assert!(err.contains("built from 3 messages"), "{err}");
        assert!(err.contains("remove the model file as well"), "{err}");
        // Asking again changes nothing, and the model is untouched.
        lost_history(&paths);
        assert_eq!(std::fs::read(paths.snapshot()).unwrap(), model);
        // Starting over on purpose works.
        std::fs::remove_file(paths.snapshot()).unwrap();
        Trainer::open(&paths, WAIT).unwrap();
    }

    #[test]
    fn refuses_a_store_rolled_back_to_an_earlier_change() {
        let dir = tempfile::tempdir().unwrap();
        let paths = trained(dir.path());
        let copy = dir.path().join("counts-before");
        // A copy of the store before its last change, restored afterwards.
        copy_dir(&paths.counts(), &copy);
        {
            let mut trainer = Trainer::open(&paths, WAIT).unwrap();
            trainer
                .learn(&[labelled("more spam", Label::Spam)], &mut |_| {})
                .unwrap();
            trainer.compile(Params::default(), None).unwrap();
        }
        std::fs::remove_dir_all(paths.counts()).unwrap();
        std::fs::rename(&copy, paths.counts()).unwrap();
        let err = lost_history(&paths);
        assert!(err.contains("earlier state"), "{err}");
    }

    #[test]
    fn without_a_recorded_store_fewer_messages_than_the_model_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let paths = trained(dir.path());
        // A model written before models recorded their store.
        let snapshot = Snapshot::open(&paths.snapshot()).unwrap();
        let mut header: ModelHeader = snapshot.header().unwrap();
        header.store = None;
        let tokens: Vec<(FeatureBuf, TokenCounts)> =
            snapshot.iter().map(|(t, c)| (t.into_owned(), c)).collect();
        store::write_snapshot(&paths.snapshot(), &header, tokens).unwrap();
        // The same store is fine; a new one is not.
        drop(Trainer::open(&paths, WAIT).unwrap());
        std::fs::remove_dir_all(paths.counts()).unwrap();
        let err = lost_history(&paths);
        assert!(err.contains("fewer messages (0)"), "{err}");
    }

    #[test]
    fn a_model_that_cannot_be_read_for_now_is_not_one_to_rebuild() {
        let io = |source: std::io::Error| store::Error::Io {
            path: "model.bin".into(),
            source,
        };
        for now in [
            std::io::ErrorKind::PermissionDenied.into(),
            std::io::Error::from_raw_os_error(libc::EMFILE),
        ] {
            assert!(io(now).may_pass());
        }
        // A file of garbage too large to map: rebuilt.
        assert!(!io(std::io::Error::from_raw_os_error(libc::ENOMEM)).may_pass());
        // A link or a FIFO at its name, or damage: rebuilt.
        assert!(!io(std::io::Error::from_raw_os_error(libc::ELOOP)).may_pass());
        let damaged = store::Error::Corrupt {
            path: "model.bin".into(),
            reason: "truncated".into(),
        };
        assert!(!damaged.may_pass());
    }

    /// Unlearning several messages is one change: each named once, in
    /// order; one given twice is not learned the second time, one never
    /// learned is said so, and every count of the others is taken back.
    #[test]
    fn messages_unlearned_together_are_each_taken_back_once() {
        let dir = tempfile::tempdir().unwrap();
        let paths = trained(dir.path());
        let mut trainer = Trainer::open(&paths, WAIT).unwrap();
        let before = trainer.store.totals().unwrap();
        let extra = labelled("garden party", Label::Ham);
        trainer
            .learn(std::slice::from_ref(&extra), &mut |_| {})
            .unwrap();
        let word = |trainer: &Trainer, word| {
            let feature = crate::vocab::Feature::Word(word);
            trainer.store.token(feature).unwrap()
        };
        assert_eq!(word(&trainer, "garden"), TokenCounts { ham: 1, spam: 0 });
        let (spam, never) = (
            labelled("cheap meds", Label::Spam),
            labelled("never", Label::Ham),
        );
        let given = [
            (&extra.features, extra.identity),
            (&spam.features, spam.identity),
            (&extra.features, extra.identity),
            (&never.features, never.identity),
        ];
        let (results, inexact) = trainer.unlearn(&given).unwrap();
        let said: Vec<_> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
        assert_eq!(said, [Some(Label::Ham), Some(Label::Spam), None, None]);
        assert!(matches!(results[2], Err(Error::NotLearned)));
        assert_eq!(inexact, 0);
        let after = trainer.store.totals().unwrap();
        assert_eq!(after.messages, [before.messages[0], before.messages[1] - 1]);
        for w in ["garden", "party", "cheap", "meds"] {
            assert_eq!(word(&trainer, w), TokenCounts::default(), "{w}");
        }
    }

    #[test]
    fn a_killed_unlearn_is_not_a_lost_history() {
        let dir = tempfile::tempdir().unwrap();
        let paths = trained(dir.path());
        let mut trainer = Trainer::open(&paths, WAIT).unwrap();
        let m = labelled("cheap meds", Label::Spam);
        // Unlearned in the store, the model not yet compiled (as if killed).
        trainer.unlearn(&[(&m.features, m.identity)]).unwrap();
        drop(trainer);
        let trainer = Trainer::open(&paths, WAIT).unwrap();
        assert!(trainer.model_is_stale().unwrap());
    }
}
