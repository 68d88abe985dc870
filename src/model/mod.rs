//! The models, as pure maths: no I/O. Bernoulli naive Bayes over token sets
//! with Beta pseudo-counts ([`bernoulli`]), Gaussian naive Bayes over the
//! metadata vector ([`gaussian`]), and the integer statistics both learn
//! from ([`counts`]). [`Model`] puts them together: statistics in, the
//! evidence of one message out.

pub mod bernoulli;
pub mod counts;
pub mod gaussian;

use serde::{Deserialize, Serialize};

pub use bernoulli::{BetaPrior, Combine, TextEvidence};
pub use counts::{Delta, Digest, GaussStats, Label, TokenCounts, Totals};
pub use gaussian::GaussianNb;

use crate::features::METADATA_LEN;

/// Hyperparameters as given (from defaults, a config file or flags).
/// [`Params::check`] turns them into [`ValidParams`], the only form the
/// maths accepts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Beta pseudo-count of presence.
    pub a: f64,
    /// Beta pseudo-count of absence.
    pub b: f64,
    /// How token evidence is combined.
    pub combine: Combine,
    /// Variance floor of the Gaussian model, as a fraction of the feature's
    /// variance over both classes.
    pub var_floor: f64,
    /// Weight of the metadata evidence relative to one tempered token
    /// average; 0 leaves the metadata out.
    pub meta_weight: f64,
    /// Each metadata feature's log-likelihood ratio is clipped to ± this
    /// (nats): a Gaussian's tails are far thinner than real mail's, and one
    /// feature far out in a tail must not outvote everything else.
    pub meta_clip: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            a: 0.1,
            b: 0.1,
            combine: Combine::default(),
            var_floor: 0.01,
            meta_weight: 1.0,
            meta_clip: 3.0,
        }
    }
}

/// Hyperparameters that passed [`Params::check`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ValidParams {
    params: Params,
    prior: BetaPrior,
}

impl Params {
    /// Checks every value once, at the edge.
    pub fn check(self) -> Result<ValidParams, String> {
        let prior = BetaPrior::new(self.a, self.b)?;
        if let Combine::Tempered {
            min_strength,
            power,
        } = self.combine
            && !(min_strength.is_finite() && min_strength >= 0.0 && (0.0..=1.0).contains(&power))
        {
            return Err(format!(
                "tempered combination needs min_strength ≥ 0 and power in [0, 1] (got {min_strength}, {power})"
            ));
        }
        if !(self.var_floor.is_finite() && self.var_floor > 0.0) {
            return Err(format!(
                "var_floor must be finite and > 0 (got {})",
                self.var_floor
            ));
        }
        if !(self.meta_clip.is_finite() && self.meta_clip > 0.0) {
            return Err(format!(
                "meta_clip must be finite and > 0 (got {})",
                self.meta_clip
            ));
        }
        if !(self.meta_weight.is_finite() && self.meta_weight >= 0.0) {
            return Err(format!(
                "meta_weight must be finite and ≥ 0 (got {})",
                self.meta_weight
            ));
        }
        Ok(ValidParams {
            params: self,
            prior,
        })
    }
}

impl ValidParams {
    /// The checked values.
    pub fn get(&self) -> &Params {
        &self.params
    }

    /// The Beta prior.
    pub fn prior(&self) -> BetaPrior {
        self.prior
    }
}

impl Default for ValidParams {
    fn default() -> Self {
        Params::default().check().expect("defaults are valid")
    }
}

/// A numerically stable logistic function: never overflows, never NaN for
/// finite input.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The evidence of one message, spam vs ham, before calibration.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Evidence {
    /// Log prior odds, from the class counts.
    pub prior: f64,
    /// Combined token evidence.
    pub text: TextEvidence,
    /// Weighted metadata log-likelihood ratio.
    pub meta: f64,
    /// max over classes of the metadata log-likelihood: low when the
    /// message is unlike both classes.
    pub meta_fit: f64,
}

impl Evidence {
    /// The model's (uncalibrated) log-odds of spam.
    pub fn log_odds(&self) -> f64 {
        self.prior + self.text.score + self.meta
    }
}

/// A model ready to score: the statistics with the hyperparameters applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    params: ValidParams,
    n: [u64; 2],
    absent_constant: f64,
    gauss: GaussianNb,
}

impl Model {
    /// Builds the scoring state from learned totals. `absent_constant` is
    /// [`bernoulli::absent_constant`] over the vocabulary, needed only by
    /// [`Combine::Textbook`] (pass 0 otherwise).
    pub fn new(params: ValidParams, totals: &Totals, absent_constant: f64) -> Model {
        Model {
            params,
            n: totals.messages,
            absent_constant,
            gauss: GaussianNb::fit(&totals.gauss, params.get().var_floor, 1e-6),
        }
    }

    /// Messages learned, `[ham, spam]`.
    pub fn messages(&self) -> [u64; 2] {
        self.n
    }

    /// The hyperparameters.
    pub fn params(&self) -> &ValidParams {
        &self.params
    }

    /// The Gaussian model.
    pub fn gaussian(&self) -> &GaussianNb {
        &self.gauss
    }

    /// The evidence of one token: its present-token LLR.
    pub fn token_llr(&self, counts: TokenCounts) -> f64 {
        self.params.prior().token_llr(counts, self.n).0
    }

    /// Scores a message from the counts of its tokens that are in the
    /// vocabulary and its metadata.
    pub fn evidence(
        &self,
        known: impl IntoIterator<Item = TokenCounts>,
        metadata: &[f64; METADATA_LEN],
    ) -> Evidence {
        let p = self.params.get();
        let prior = self.params.prior();
        let text = bernoulli::text_evidence(prior, p.combine, self.n, self.absent_constant, known);
        let have_both = self.n[0] > 0 && self.n[1] > 0;
        let (meta, meta_fit) = if have_both {
            let clip = p.meta_clip;
            let llr: f64 = self
                .gauss
                .llrs(metadata)
                .iter()
                .map(|v| v.clamp(-clip, clip))
                .sum();
            let fit = self
                .gauss
                .log_likelihood(0, metadata)
                .max(self.gauss.log_likelihood(1, metadata));
            (p.meta_weight * llr / METADATA_LEN as f64, fit)
        } else {
            (0.0, 0.0)
        };
        let class_prior = |k: u64| (k as f64 + 1.0).ln();
        Evidence {
            prior: class_prior(self.n[1]) - class_prior(self.n[0]),
            text,
            meta,
            meta_fit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{Features, Metadata};

    #[test]
    fn sigmoid_is_stable() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(sigmoid(1000.0), 1.0);
        assert_eq!(sigmoid(-1000.0), 0.0);
        assert!((0.0..1e-300).contains(&sigmoid(-745.0)));
        assert!(sigmoid(f64::MAX).is_finite() && sigmoid(f64::MIN) == 0.0);
        assert!((sigmoid(2.0) + sigmoid(-2.0) - 1.0).abs() < 1e-15);
    }

    #[test]
    fn params_are_checked() {
        assert!(Params::default().check().is_ok());
        assert!(
            Params {
                a: 0.0,
                ..Params::default()
            }
            .check()
            .is_err()
        );
        assert!(
            Params {
                var_floor: -1.0,
                ..Params::default()
            }
            .check()
            .is_err()
        );
        assert!(
            Params {
                combine: Combine::Tempered {
                    min_strength: 1.0,
                    power: 2.0
                },
                ..Params::default()
            }
            .check()
            .is_err()
        );
    }

    #[test]
    fn spammy_tokens_raise_the_odds() {
        let mut delta = Delta::default();
        let msg = |tokens: &[&str]| Features {
            tokens: tokens.iter().map(|t| t.to_string()).collect(),
            metadata: Metadata([0.0; METADATA_LEN]),
        };
        for _ in 0..10 {
            delta.add_message(&msg(&["viagra", "free", "the"]), Label::Spam, 1);
            delta.add_message(&msg(&["meeting", "agenda", "the"]), Label::Ham, 1);
        }
        let totals = Totals {
            messages: [10, 10],
            ..Totals::default()
        };
        let model = Model::new(ValidParams::default(), &totals, 0.0);
        let counts = |t: &str| {
            let d = delta.tokens[t];
            TokenCounts {
                ham: d[0] as u32,
                spam: d[1] as u32,
            }
        };
        let zero = [0.0; METADATA_LEN];
        let spam = model.evidence(["viagra", "free"].map(counts), &zero);
        let ham = model.evidence(["meeting", "agenda"].map(counts), &zero);
        assert!(spam.log_odds() > 3.0, "{spam:?}");
        assert!(ham.log_odds() < -3.0, "{ham:?}");
        let neutral = model.evidence(["the"].map(counts), &zero);
        assert_eq!(
            neutral.text.used, 0,
            "a token seen equally in both classes is too weak to count"
        );
        assert!(sigmoid(spam.log_odds()).is_finite());
    }
}
