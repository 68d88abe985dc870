//! The read side and the one judge.
//!
//! [`judge`] is how bayesmail judges a message, everywhere: the model's
//! evidence per view, the stacker's calibrated probability, the verdict
//! rule of [`Decider`]. Every command that classifies goes through
//! [`Classifier::judge`], which reads counts from the snapshot; evaluation
//! calls [`judge`] with counts held in memory, so what it reports is what
//! users get.
//!
//! [`Classifier`] reads only the snapshot and its journal (the changes
//! `learn` and `unlearn` made since the snapshot was compiled), never the
//! count store, so classification never waits for or blocks a training run;
//! opening it reads the snapshot and the journal and checks both (see
//! [`Snapshot::open`]), so a damaged model is refused when it is opened and
//! nothing need be checked after judging.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::db::{DbPaths, Error, Result};
use crate::decision::calibrate::LOGISTIC;
use crate::decision::{Calibrator, Decider, Doubt, Verdict};
use crate::features::Features;
use crate::model::{Combine, Evidence, Model, Params, TokenCounts, Totals, logistic};
use crate::store::{self, Journal, Snapshot, StoreIdentity};
use crate::vocab::{Feature, METADATA_LEN, METADATA_NAMES};
use crate::vocab::{VIEWS, View};

/// What the snapshot carries besides token counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelHeader {
    /// The bayesmail version that wrote it.
    pub version: String,
    /// Hyperparameters as stored (the strength chosen at training time); a
    /// model scores with them at its size ([`Params::at_size`]).
    pub params: Params,
    /// Message counts and metadata statistics.
    pub totals: Totals,
    /// Calibration fitted on cross-validated scores of the training data.
    pub calibrator: Calibrator,
    /// Σ of absent-feature evidence over each view's vocabulary (textbook
    /// model only).
    pub absent_constant: [f64; VIEWS],
    /// Messages the calibration was fitted on (0: not calibrated).
    pub calibrated_on: usize,
    /// The count store it was compiled from, at which change (absent in
    /// models written before stores had an identity).
    #[serde(default)]
    pub store: Option<StoreIdentity>,
}

/// The score of one message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// The evidence of each view and of the metadata, before the stacker.
    pub evidence: Evidence,
    /// The calibrated log-odds of spam, the stacker's output:
    /// `probability` is σ(`log_odds`). Unlike the probability it does not
    /// round to 0 or 1, so it ranks every message.
    pub log_odds: f64,
    /// Calibrated P(spam).
    pub probability: f64,
}

/// The score and the verdict of one message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judgment {
    /// The score.
    pub score: Score,
    /// The verdict.
    pub verdict: Verdict,
    /// Why it is unsure whatever the probability, if it is.
    pub doubt: Option<Doubt>,
}

/// Scores a message: `model`'s evidence from the counts of its features
/// that are in the vocabulary (each with its view) and its metadata, and
/// the online discriminative view's score `logistic` (left out unless the
/// model's parameters weigh it), weighed by `stacker`. `words` is the
/// message's word tokens, known or not.
pub fn score(
    model: &Model,
    stacker: &Calibrator,
    known: impl IntoIterator<Item = (View, TokenCounts)>,
    words: usize,
    logistic: f64,
    metadata: &[f64; METADATA_LEN],
) -> Score {
    let evidence = Evidence {
        words,
        logistic: if model.params().get().logistic {
            logistic
        } else {
            0.0
        },
        ..model.evidence(known, metadata)
    };
    let log_odds = stacker.logit(evidence.stacker_inputs());
    Score {
        evidence,
        log_odds,
        probability: crate::model::sigmoid(log_odds),
    }
}

/// The one judge: `score`, then [`Decider::verdict`].
pub fn judge(
    model: &Model,
    stacker: &Calibrator,
    decider: &Decider,
    known: impl IntoIterator<Item = (View, TokenCounts)>,
    words: usize,
    logistic: f64,
    metadata: &[f64; METADATA_LEN],
) -> Judgment {
    judged(
        model,
        score(model, stacker, known, words, logistic, metadata),
        decider,
    )
}

/// The judgment of `score`, a score by `model`: [`Decider::verdict`].
pub fn judged(model: &Model, score: Score, decider: &Decider) -> Judgment {
    let (verdict, doubt) = decider.verdict(model.messages(), &score.evidence, score.probability);
    Judgment {
        score,
        verdict,
        doubt,
    }
}

/// One feature's part in a decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenWeight {
    /// The feature: a word token, or `bytes:BUCKET` for a byte n-gram.
    pub token: String,
    /// The byte view's bucket, for a byte n-gram.
    #[serde(skip)]
    pub bucket: Option<u32>,
    /// Its view.
    pub view: View,
    /// Its log-likelihood ratio, spam vs ham (nats).
    pub llr: f64,
    /// Ham messages that contained it.
    pub ham: u32,
    /// Spam messages that contained it.
    pub spam: u32,
    /// Whether it was strong enough to enter the combination.
    pub used: bool,
}

/// One view's part in a decision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ViewPart {
    /// The stacker's input: a view's name, `metadata` or `logistic` (the
    /// online discriminative view).
    pub input: &'static str,
    /// The view of naive Bayes (`None` for the metadata and the online
    /// discriminative view).
    pub view: Option<View>,
    /// Its evidence before the stacker: the tempered log-likelihood ratio
    /// of a view, the metadata's, the online discriminative view's score.
    pub evidence: f64,
    /// The stacker's weight for it.
    pub weight: f64,
    /// weight × evidence: its share of the calibrated log-odds.
    pub contribution: f64,
    /// Its features seen in training (0 for metadata; for the online
    /// discriminative view, its features with a weight).
    pub known: usize,
    /// Its features strong enough to enter the combination.
    pub used: usize,
}

/// Why a message scored as it did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// Each view's part, then the metadata's, then the online
    /// discriminative view's if the model weighs it: the contributions and
    /// `bias` add up to `logit`, the calibrated log-odds.
    pub views: Vec<ViewPart>,
    /// The stacker's intercept.
    pub bias: f64,
    /// The model's credibility: each view's evidence and the metadata's
    /// are the combined evidence times this ([`crate::model::CREDIBILITY_HALF`]).
    pub credibility: f64,
    /// The calibrated log-odds of spam: σ(logit) is the probability.
    pub logit: f64,
    /// Known features, strongest first.
    pub tokens: Vec<TokenWeight>,
    /// Tokens never seen in training (they contribute nothing).
    pub unknown_tokens: usize,
    /// Metadata features with their value and their share of the metadata
    /// evidence (clipped, weighted; the shares add up to that evidence),
    /// strongest first.
    pub metadata: Vec<(String, f64, f64)>,
}

/// The read side: the snapshot, read into memory and checked, the journal
/// of changes since it was compiled applied on top, and the model built
/// from the result. `Send + Sync`, so one can serve many threads.
pub struct Classifier {
    snapshot: Snapshot,
    /// Counts of the word tokens the journal changed (zero: gone).
    overlay: HashMap<String, TokenCounts>,
    /// Counts of the byte view's buckets the journal changed (zero: gone).
    gram_overlay: GramOverlay,
    /// Counters of the weights the journal changed (zero: gone).
    weight_overlay: GramOverlay,
    vocabulary: usize,
    header: ModelHeader,
    model: Model,
}

/// How far ahead of its lookup a feature's counts are fetched: far enough
/// for the fetch to arrive, near enough to stay in the cache.
const PREFETCH_AHEAD: usize = 16;

/// How many times [`Classifier::open`] reads snapshot and journal again when
/// a writer replaced the snapshot in between. A writer replaces it at most
/// once per run, so a second read all but always agrees; after the last
/// try the snapshot read is used with what journal matches it, which is a
/// consistent (if slightly older) model, so a reader never waits.
const OPEN_TRIES: usize = 3;

/// The file behind `path`, to tell whether it was replaced.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let modified = std::fs::metadata(path).ok()?.modified().ok()?;
        let d = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some((d.as_secs(), u64::from(d.subsec_nanos())))
    }
}

impl Classifier {
    /// Opens the snapshot of the database at `paths` and applies its
    /// journal, if the journal was written for this snapshot.
    pub fn open(paths: &DbPaths) -> Result<Classifier> {
        Classifier::open_with(paths, None, None)
    }

    /// [`Classifier::open`] to judge the messages of `features` only: the
    /// journal's changes are taken for their features alone, so that
    /// judging a message or two before learning them costs no replay of
    /// everything the journal changed. The counts of other features, and
    /// [`Classifier::vocabulary`], are those of the snapshot.
    ///
    /// `journal`, when given, is the journal as the caller (a writer, who
    /// holds the writers' lock, so that neither file can change) has read
    /// it already: it is not read again.
    pub(crate) fn open_for(
        paths: &DbPaths,
        features: &[&Features],
        journal: Option<&Option<Journal>>,
    ) -> Result<Classifier> {
        let mut words = std::collections::HashSet::new();
        let mut grams = std::collections::HashSet::new();
        for f in features {
            f.for_each_feature(|feature| match feature {
                Feature::Word(w) => {
                    words.insert(w.to_owned());
                }
                Feature::Gram(b) => {
                    grams.insert(b);
                }
                Feature::Weight(_) => {}
            });
        }
        // Learning steps a message's weights from their present values:
        // every weight of every message is wanted.
        let weighed: std::collections::HashSet<u32> = features
            .iter()
            .flat_map(|f| f.lr_buckets.iter().copied())
            .collect();
        let wanted = move |feature: Feature<'_>| match feature {
            Feature::Word(w) => words.contains(w),
            Feature::Gram(b) => grams.contains(&b),
            Feature::Weight(b) => weighed.contains(&b),
        };
        Classifier::open_with(paths, Some(&wanted), journal)
    }

    fn open_with(
        paths: &DbPaths,
        wanted: Option<&dyn Fn(Feature<'_>) -> bool>,
        given: Option<&Option<Journal>>,
    ) -> Result<Classifier> {
        let path = paths.snapshot();
        // Only a model that is not there is no model: one that cannot be
        // looked at (a directory the reader may not enter) is unreadable.
        match std::fs::metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NoModel(paths.dir().to_path_buf()));
            }
            Err(source) => return Err(Error::Unreadable { path, source }),
        }
        let mut tries = 0;
        let read;
        let (snapshot, journal) = match given {
            // Under the writers' lock: neither file changes.
            Some(journal) => (Snapshot::open(&path)?, journal.as_ref()),
            None => loop {
                tries += 1;
                let before = file_id(&path);
                let snapshot = Snapshot::open(&path)?;
                let journal = Journal::read(&paths.journal())?;
                if tries == OPEN_TRIES || file_id(&path) == before {
                    read = journal;
                    break (snapshot, read.as_ref());
                }
            },
        };
        let mut header: ModelHeader = snapshot.header()?;
        let params = header.params.check().map_err(|reason| Error::BadModel {
            path: path.clone(),
            reason,
        })?;
        let mut overlay = HashMap::new();
        let mut gram_overlay = GramOverlay::default();
        let mut weight_overlay = GramOverlay::default();
        let mut vocabulary = snapshot.len();
        let journal = journal.filter(|j| header.store.as_ref() == Some(&j.base));
        if let Some(journal) = journal.filter(|j| !j.entries.is_empty()) {
            let bad = |e: store::Error| Error::BadModel {
                path: paths.journal(),
                reason: format!("it does not apply to the model: {e}"),
            };
            // Counts the journal cannot take back exactly become zero, as
            // they do in the count store when it takes the journal in.
            let mut inexact = 0;
            let (totals, replayed) = match wanted {
                None => journal.replay(&header.totals, |f| snapshot.lookup(f), &mut inexact),
                Some(wanted) => {
                    journal.replay_of(&header.totals, |f| snapshot.lookup(f), wanted, &mut inexact)
                }
            }
            .map_err(bad)?;
            header.totals = totals;
            for (old, new) in replayed.words.values().chain(replayed.grams.values()) {
                match (old.is_some(), new.is_zero()) {
                    (false, false) => vocabulary += 1,
                    (true, true) => vocabulary -= 1,
                    _ => {}
                }
            }
            for (word, (_, new)) in replayed.words {
                overlay.insert(word, new);
            }
            for (bucket, (_, new)) in replayed.grams {
                gram_overlay.insert(bucket, new);
            }
            for (bucket, (_, new)) in replayed.weights {
                weight_overlay.insert(bucket, new);
            }
            header.store = Some(journal.end());
            if let Some((stacker, n)) = journal.stacker() {
                header.calibrator = stacker;
                header.calibrated_on = usize::try_from(n).unwrap_or(usize::MAX);
            }
        }
        let model = Model::new(params, &header.totals, header.absent_constant);
        Ok(Classifier {
            snapshot,
            overlay,
            gram_overlay,
            weight_overlay,
            vocabulary,
            header,
            model,
        })
    }

    /// The model header: the snapshot's, with the totals and the store
    /// generation the journal brings it to.
    pub fn header(&self) -> &ModelHeader {
        &self.header
    }

    /// The tokenizer version of the model file's counts (an older one
    /// this version reads, until a writer compiles the model again).
    pub fn tokenizer_version(&self) -> u32 {
        self.snapshot.tokenizer_version()
    }

    /// Distinct tokens in the model.
    pub fn vocabulary(&self) -> usize {
        self.vocabulary
    }

    /// The counts of a feature, if it is in the vocabulary.
    pub fn lookup(&self, feature: Feature<'_>) -> Option<TokenCounts> {
        match feature {
            Feature::Word(word) => self.word(word),
            Feature::Gram(bucket) => self.gram(bucket),
            Feature::Weight(bucket) => self.weight(bucket),
        }
    }

    /// The counters of the weight of `bucket` of the online discriminative
    /// view, if it has any.
    pub fn weight(&self, bucket: u32) -> Option<TokenCounts> {
        match self.weight_overlay.get(bucket) {
            Some(c) if c.is_zero() => None,
            Some(c) => Some(c),
            None => self.snapshot.weight(bucket),
        }
    }

    /// The counts of a word token, if it is in the vocabulary.
    fn word(&self, token: &str) -> Option<TokenCounts> {
        if self.overlay.is_empty() {
            return self.snapshot.lookup(Feature::Word(token));
        }
        match self.overlay.get(token) {
            Some(c) if c.is_zero() => None,
            Some(&c) => Some(c),
            None => self.snapshot.lookup(Feature::Word(token)),
        }
    }

    /// The counts of the byte view's `bucket`, if it was seen: by number,
    /// with no name to spell.
    pub fn gram(&self, bucket: u32) -> Option<TokenCounts> {
        match self.gram_overlay.get(bucket) {
            Some(c) if c.is_zero() => None,
            Some(c) => Some(c),
            None => self.snapshot.gram(bucket),
        }
    }

    /// The counts of the message's features that are in the vocabulary,
    /// each with its view.
    fn known<'a>(
        &'a self,
        features: &'a Features,
    ) -> impl Iterator<Item = (View, TokenCounts)> + 'a {
        // The snapshot's answers for every token at once (see
        // `Snapshot::lookup_all`), a learned-since count taking precedence.
        let mut words = Vec::with_capacity(features.tokens.len());
        self.snapshot
            .lookup_all(features.tokens.iter(), |t, stored| {
                let counts = match self.overlay.get(t) {
                    Some(c) if c.is_zero() => None,
                    Some(&c) => Some(c),
                    None => stored,
                };
                if let Some(c) = counts {
                    words.push((crate::vocab::word_view(t), c));
                }
            });
        let grams = features.grams.iter().enumerate().filter_map(|(i, &b)| {
            if let Some(&ahead) = features.grams.get(i + PREFETCH_AHEAD) {
                self.snapshot.prefetch_gram(ahead);
            }
            self.gram(b).map(|c| (View::Bytes, c))
        });
        words.into_iter().chain(grams)
    }

    /// The online discriminative view's weights of the buckets of
    /// `features`, in a table (every other weight zero); `None` if the
    /// model does not weigh that view (its weights are not learned then).
    pub fn weights_of(&self, features: &[&Features]) -> Option<logistic::Table> {
        if !self.header.params.logistic {
            return None;
        }
        let mut table = logistic::Table::default();
        for &b in features.iter().flat_map(|f| &f.lr_buckets) {
            if let Some(counts) = self.weight(b) {
                table.set(b, counts);
            }
        }
        Some(table)
    }

    /// The online discriminative view's score of a message's features (0
    /// if the model does not weigh it).
    pub fn logistic(&self, features: &Features) -> f64 {
        if !self.header.params.logistic {
            return 0.0;
        }
        let weights = features.lr_buckets.iter().filter_map(|&b| self.weight(b));
        logistic::score(weights, features.lr_buckets.len())
    }

    /// Scores a message's features.
    pub fn score(&self, features: &Features) -> Score {
        score(
            &self.model,
            &self.header.calibrator,
            self.known(features),
            features.tokens.len(),
            self.logistic(features),
            &features.metadata.0,
        )
    }

    /// Judges a message's features: see [`judge`].
    pub fn judge(&self, features: &Features, decider: &Decider) -> Judgment {
        judge(
            &self.model,
            &self.header.calibrator,
            decider,
            self.known(features),
            features.tokens.len(),
            self.logistic(features),
            &features.metadata.0,
        )
    }

    /// The views, features and metadata behind a score, strongest first.
    pub fn explain(&self, features: &Features) -> Explanation {
        let min_strength = |view: View| match self.model.params().get().combine_of(view) {
            Combine::Tempered { min_strength, .. } => min_strength,
            _ => 0.0,
        };
        let score = self.score(features);
        let calibrator = &self.header.calibrator;
        let inputs = score.evidence.stacker_inputs();
        let mut views: Vec<ViewPart> = View::ALL
            .iter()
            .map(|&v| {
                let ev = score.evidence.view(v);
                let weight = calibrator.weights[v.index()];
                ViewPart {
                    input: v.name(),
                    view: Some(v),
                    evidence: ev.score,
                    weight,
                    contribution: weight * ev.score,
                    known: ev.known,
                    used: ev.used,
                }
            })
            .collect();
        let meta_weight = calibrator.weights[VIEWS];
        views.push(ViewPart {
            input: "metadata",
            view: None,
            evidence: inputs[VIEWS],
            weight: meta_weight,
            contribution: meta_weight * inputs[VIEWS],
            known: 0,
            used: 0,
        });
        // The online discriminative view's part, where the model weighs it.
        if self.header.params.logistic {
            let weighted = features
                .lr_buckets
                .iter()
                .filter(|&&b| self.weight(b).is_some())
                .count();
            let lr_weight = calibrator.weights[LOGISTIC];
            views.push(ViewPart {
                input: "logistic",
                view: None,
                evidence: inputs[LOGISTIC],
                weight: lr_weight,
                contribution: lr_weight * inputs[LOGISTIC],
                known: weighted,
                used: weighted,
            });
        }
        let mut unknown_tokens = 0;
        let mut tokens = Vec::new();
        let mut weigh = |feature: Feature<'_>, view: View| match self.lookup(feature) {
            Some(c) => {
                let llr = self.model.token_llr(c);
                tokens.push(TokenWeight {
                    token: feature.to_string(),
                    bucket: match feature {
                        Feature::Gram(b) => Some(b),
                        Feature::Word(_) | Feature::Weight(_) => None,
                    },
                    view,
                    llr,
                    ham: c.ham,
                    spam: c.spam,
                    used: llr.abs() >= min_strength(view),
                });
            }
            None => unknown_tokens += 1,
        };
        for t in features.tokens.iter() {
            weigh(Feature::Word(t), crate::vocab::word_view(t));
        }
        for &b in &features.grams {
            weigh(Feature::Gram(b), View::Bytes);
        }
        tokens.sort_by(|a, b| b.llr.abs().total_cmp(&a.llr.abs()));
        let shares = self.model.metadata_shares(&features.metadata.0);
        let mut metadata: Vec<(String, f64, f64)> = METADATA_NAMES
            .iter()
            .zip(features.metadata.0)
            .zip(shares)
            .map(|((name, value), share)| (name.to_string(), value, share))
            .collect();
        metadata.sort_by(|a, b| b.2.abs().total_cmp(&a.2.abs()));
        Explanation {
            views,
            bias: calibrator.bias,
            credibility: self.model.credibility(),
            logit: calibrator.logit(inputs),
            tokens,
            unknown_tokens,
            metadata,
        }
    }
}

/// The counts of the byte view's buckets that the journal changed. Every
/// gram of every message is looked up here first, so a bit per bucket says
/// which are changed, and only those go to the map.
#[derive(Debug, Default)]
struct GramOverlay {
    /// Bit `b` set: bucket `b` is in `counts` (empty while none is).
    changed: Vec<u64>,
    counts: HashMap<u32, TokenCounts>,
}

impl GramOverlay {
    fn insert(&mut self, bucket: u32, counts: TokenCounts) {
        let (word, bit) = (bucket as usize / 64, bucket % 64);
        if self.changed.len() <= word {
            self.changed.resize(word + 1, 0);
        }
        self.changed[word] |= 1 << bit;
        self.counts.insert(bucket, counts);
    }

    fn get(&self, bucket: u32) -> Option<TokenCounts> {
        let word = self.changed.get(bucket as usize / 64)?;
        if word & (1 << (bucket % 64)) == 0 {
            return None;
        }
        self.counts.get(&bucket).copied()
    }
}
