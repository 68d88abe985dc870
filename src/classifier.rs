//! The read side and the one judge.
//!
//! [`judge`] is how bayesmail judges a message, everywhere: the model's
//! evidence per view, the stacker's calibrated probability, the verdict
//! rule of [`Decider`]. Every command that classifies goes through
//! [`Classifier::judge`], which reads counts from the snapshot; evaluation
//! calls [`judge`] with counts held in memory, so what it reports is what
//! users get.
//!
//! [`Classifier`] reads only the snapshot, so classification never waits for
//! or blocks a training run; opening it costs one read of the file and a
//! check of its checksum, so a damaged model is refused.

use serde::{Deserialize, Serialize};

use crate::db::{DbPaths, Error, Result};
use crate::decision::{Calibrator, Decider, Verdict};
use crate::features::{Features, METADATA_LEN, METADATA_NAMES};
use crate::model::{
    BYTES_PREFIX, Combine, Evidence, Model, Params, TokenCounts, Totals, VIEWS, View,
};
use crate::store::{Snapshot, StoreIdentity};

/// What the snapshot carries besides token counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelHeader {
    /// The bayesmail version that wrote it.
    pub version: String,
    /// Hyperparameters in force (the strength chosen at training time).
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
}

/// Scores a message: `model`'s evidence from the counts of its features
/// that are in the vocabulary (each with its view) and its metadata,
/// weighed by `stacker`.
pub fn score(
    model: &Model,
    stacker: &Calibrator,
    known: impl IntoIterator<Item = (View, TokenCounts)>,
    metadata: &[f64; METADATA_LEN],
) -> Score {
    let evidence = model.evidence(known, metadata);
    let log_odds = stacker.logit(evidence.stacker_inputs());
    Score {
        evidence,
        log_odds,
        probability: crate::model::sigmoid(log_odds),
    }
}

/// The one judge: [`score`], then [`Decider::verdict`].
pub fn judge(
    model: &Model,
    stacker: &Calibrator,
    decider: &Decider,
    known: impl IntoIterator<Item = (View, TokenCounts)>,
    metadata: &[f64; METADATA_LEN],
) -> Judgment {
    let score = score(model, stacker, known, metadata);
    Judgment {
        score,
        verdict: decider.verdict(model.messages(), &score.evidence, score.probability),
    }
}

/// One feature's part in a decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenWeight {
    /// The feature: a word token, or `bytes:BUCKET` for a byte n-gram.
    pub token: String,
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
    /// The view (`metadata` is reported as `None`).
    pub view: Option<View>,
    /// Its evidence before the stacker: the tempered log-likelihood ratio.
    pub evidence: f64,
    /// The stacker's weight for it.
    pub weight: f64,
    /// weight × evidence: its share of the calibrated log-odds.
    pub contribution: f64,
    /// Its features seen in training (0 for metadata).
    pub known: usize,
    /// Its features strong enough to enter the combination.
    pub used: usize,
}

/// Why a message scored as it did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// Each view's part, then the metadata's: the contributions and
    /// `bias` add up to `logit`, the calibrated log-odds.
    pub views: Vec<ViewPart>,
    /// The stacker's intercept.
    pub bias: f64,
    /// The calibrated log-odds of spam: σ(logit) is the probability.
    pub logit: f64,
    /// Known features, strongest first.
    pub tokens: Vec<TokenWeight>,
    /// Tokens never seen in training (they contribute nothing).
    pub unknown_tokens: usize,
    /// Metadata features with value and log-likelihood ratio, strongest first.
    pub metadata: Vec<(String, f64, f64)>,
}

/// The read side: the snapshot, read into memory and checked, and the model
/// built from its header. `Send + Sync`, so one can serve many threads.
pub struct Classifier {
    snapshot: Snapshot,
    header: ModelHeader,
    model: Model,
}

impl Classifier {
    /// Opens the snapshot of the database at `paths`.
    pub fn open(paths: &DbPaths) -> Result<Classifier> {
        let path = paths.snapshot();
        if !path.exists() {
            return Err(Error::NoModel(paths.dir().to_path_buf()));
        }
        let snapshot = Snapshot::open(&path)?;
        let header: ModelHeader = snapshot.header()?;
        let params = header.params.check().map_err(|reason| Error::BadModel {
            path: path.clone(),
            reason,
        })?;
        let model = Model::new(params, &header.totals, header.absent_constant);
        Ok(Classifier {
            snapshot,
            header,
            model,
        })
    }

    /// The snapshot header.
    pub fn header(&self) -> &ModelHeader {
        &self.header
    }

    /// Distinct tokens in the model.
    pub fn vocabulary(&self) -> usize {
        self.snapshot.len()
    }

    /// The counts of the message's features that are in the vocabulary,
    /// each with its view.
    fn known(&self, features: &Features) -> Vec<(View, TokenCounts)> {
        let mut known = Vec::with_capacity(features.tokens.len() + features.grams.len());
        features.for_each_feature(|t| {
            if let Some(c) = self.snapshot.lookup(t) {
                known.push((View::of(t), c));
            }
        });
        known
    }

    /// Scores a message's features.
    pub fn score(&self, features: &Features) -> Score {
        score(
            &self.model,
            &self.header.calibrator,
            self.known(features),
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
            &features.metadata.0,
        )
    }

    /// The views, features and metadata behind a score, strongest first.
    pub fn explain(&self, features: &Features) -> Explanation {
        let min_strength = match self.header.params.combine {
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
            view: None,
            evidence: inputs[VIEWS],
            weight: meta_weight,
            contribution: meta_weight * inputs[VIEWS],
            known: 0,
            used: 0,
        });
        let mut unknown_tokens = 0;
        let mut tokens = Vec::new();
        features.for_each_feature(|t| match self.snapshot.lookup(t) {
            Some(c) => {
                let llr = self.model.token_llr(c);
                let view = View::of(t);
                let token = match view {
                    View::Bytes => format!("bytes:{}", t.trim_start_matches(BYTES_PREFIX)),
                    _ => t.to_owned(),
                };
                tokens.push(TokenWeight {
                    token,
                    view,
                    llr,
                    ham: c.ham,
                    spam: c.spam,
                    used: llr.abs() >= min_strength,
                });
            }
            None => unknown_tokens += 1,
        });
        tokens.sort_by(|a, b| b.llr.abs().total_cmp(&a.llr.abs()));
        let llrs = self.model.gaussian().llrs(&features.metadata.0);
        let mut metadata: Vec<(String, f64, f64)> = METADATA_NAMES
            .iter()
            .zip(features.metadata.0)
            .zip(llrs)
            .map(|((name, value), llr)| (name.to_string(), value, llr))
            .collect();
        metadata.sort_by(|a, b| b.2.abs().total_cmp(&a.2.abs()));
        Explanation {
            views,
            bias: calibrator.bias,
            logit: calibrator.logit(inputs),
            tokens,
            unknown_tokens,
            metadata,
        }
    }
}
