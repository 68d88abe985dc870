//! The models, as pure maths: no I/O. Bernoulli naive Bayes over token sets
//! with Beta pseudo-counts ([`bernoulli`]), Gaussian naive Bayes over the
//! metadata vector ([`gaussian`]), and the integer statistics both learn
//! from ([`counts`]). [`Model`] puts them together: statistics in, the
//! evidence of one message out, one number per [`View`] and one for the
//! metadata. How much each counts is learned per user by the stacker in
//! [`crate::decision::calibrate`].

pub mod bernoulli;
pub mod counts;
pub mod gaussian;
pub mod logistic;

use serde::{Deserialize, Serialize};

pub use bernoulli::{BetaPrior, Combine, LogThetas, TextEvidence};
pub use counts::{Delta, GaussStats, Label, TokenCounts, Totals};
pub use gaussian::GaussianNb;

use crate::vocab::{METADATA_LEN, VIEWS, View};

/// Hyperparameters as given (from defaults, a config file or flags).
/// [`Params::check`] turns them into [`ValidParams`], the only form the
/// maths accepts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Beta pseudo-count of presence. The default is what a model built
    /// only by learning uses; training chooses it (and `b`) by
    /// cross-validation unless one of them is pinned.
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
    /// The tempered combination's `min_strength` for the byte view: its
    /// features are many and each tells little, so it needs a higher floor
    /// than words. Chosen by cross-validation at training time unless a
    /// strength is pinned.
    pub bytes_min_strength: f64,
    /// Whether the stacker weighs the online discriminative view
    /// ([`logistic`]); its weights are learned (by `learn`, one message at
    /// a time, and by `train`, once through its calibration sample) only
    /// while it does (docs/experiments.md, "The online discriminative view
    /// over words", "A training run steps the view").
    pub logistic: bool,
    /// Whether these are a database's that only learns, whose
    /// pseudo-counts and word strength follow its size
    /// ([`ValidParams::at_size`]). Training that chooses them, and a
    /// configuration that pins any of them, clears it; a model written
    /// without it keeps what it has (and one that does not grow is
    /// written without it, as before).
    #[serde(default, skip_serializing_if = "is_false")]
    pub grows: bool,
}

/// For serde: a field left out when false.
fn is_false(value: &bool) -> bool {
    !*value
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
            bytes_min_strength: 3.0,
            logistic: true,
            grows: true,
        }
    }
}

/// Messages of the rarer class from which a database that only learns
/// ([`Params::grows`]) scores with [`GROWN_PRIOR`] and
/// [`GROWN_STRENGTH`]. The defaults suit a young database: its evidence
/// rests on words seen a few times, and a smaller pseudo-count or a higher
/// strength leaves it far less sure on mail unlike what it learned first
/// (docs/experiments.md, "Pseudo-counts chosen by the user's mail"). A
/// grown one has learned enough to weigh more words and only the stronger
/// ones, as training chooses for a database of its size ("A learning
/// database grows up").
pub const GROWN_AT: u64 = 300;
/// The Beta pseudo-counts (a = b) of a grown learning database.
pub const GROWN_PRIOR: f64 = 0.05;
/// The word views' tempered strength of a grown learning database (the
/// byte view keeps its own).
pub const GROWN_STRENGTH: f64 = 2.0;

impl Params {
    /// The hyperparameters in force at the size `messages` (`[ham,
    /// spam]`): see [`ValidParams::at_size`]. Invalid ones are returned as
    /// they are.
    pub fn at_size(self, messages: [u64; 2]) -> Params {
        self.check().map_or(self, |p| *p.at_size(messages).get())
    }
}

/// Hyperparameters that passed [`Params::check`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ValidParams {
    params: Params,
    prior: BetaPrior,
}

impl Params {
    /// How the evidence of `view` is combined: the byte view's tempered
    /// combination has its own strength.
    pub(crate) fn combine_of(&self, view: View) -> Combine {
        match (view, self.combine) {
            (View::Bytes, Combine::Tempered { power, .. }) => Combine::Tempered {
                min_strength: self.bytes_min_strength,
                power,
            },
            (_, combine) => combine,
        }
    }

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
        if !(self.bytes_min_strength.is_finite() && self.bytes_min_strength >= 0.0) {
            return Err(format!(
                "bytes_min_strength must be finite and ≥ 0 (got {})",
                self.bytes_min_strength
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
    pub(crate) fn prior(&self) -> BetaPrior {
        self.prior
    }

    /// The hyperparameters a database that has learned `messages`
    /// (`[ham, spam]`) scores with: these, or for one that only learns
    /// ([`Params::grows`]) and has learned [`GROWN_AT`] of each class,
    /// [`GROWN_PRIOR`] and [`GROWN_STRENGTH`] in their place.
    pub fn at_size(self, messages: [u64; 2]) -> ValidParams {
        let p = self.params;
        match p.combine {
            Combine::Tempered { power, .. }
                if p.grows && messages[0].min(messages[1]) >= GROWN_AT =>
            {
                Params {
                    a: GROWN_PRIOR,
                    b: GROWN_PRIOR,
                    combine: Combine::Tempered {
                        min_strength: GROWN_STRENGTH,
                        power,
                    },
                    ..p
                }
                .check()
                .unwrap_or(self)
            }
            _ => self,
        }
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
    /// Combined feature evidence of each view, in [`View::ALL`] order.
    pub views: [TextEvidence; VIEWS],
    /// Weighted metadata log-likelihood ratio.
    pub meta: f64,
    /// max over classes of the metadata log-likelihood: low when the
    /// message is unlike both classes.
    pub meta_fit: f64,
    /// Word tokens of the message (header and body views), known or not;
    /// the caller counts them (the model sees only the known ones), 0 if
    /// it did not.
    pub words: usize,
    /// The online discriminative view's score ([`logistic::score`]); the
    /// caller, who reads the weights, gives it (0 if it did not).
    pub logistic: f64,
}

impl Evidence {
    /// The model's (uncalibrated) log-odds of spam: the plain sum of the
    /// evidence, before the stacker weighs it.
    pub fn log_odds(&self) -> f64 {
        self.prior + self.views.iter().map(|v| v.score).sum::<f64>() + self.meta
    }

    /// The evidence of one view.
    pub fn view(&self, view: View) -> &TextEvidence {
        &self.views[view.index()]
    }

    /// Word tokens of the message seen in training (the header and body
    /// views; byte n-grams are nearly always known and tell nothing about
    /// how familiar a message is).
    pub fn known_words(&self) -> usize {
        self.view(View::Header).known + self.view(View::Body).known
    }

    /// The inputs of the stacker: each view's evidence, then the
    /// metadata's, then the online discriminative view's score.
    pub fn stacker_inputs(&self) -> [f64; VIEWS + 2] {
        let mut x = [0.0; VIEWS + 2];
        for (slot, v) in x.iter_mut().zip(&self.views) {
            *slot = v.score;
        }
        x[VIEWS] = self.meta;
        x[VIEWS + 1] = self.logistic;
        x
    }
}

/// The credibility of a model's evidence is m / (m + this), m the messages
/// learned of the rarer class: the evidence of each view and of the
/// metadata is multiplied by it, so a model of a handful of messages
/// speaks softly and one of hundreds at full voice. The evidence of a
/// young model rests on words seen once or twice, and is far less
/// reliable than its size says (a word seen in the one spam learned and
/// in none of four hams weighs 3.6 nats, well over the strength a
/// tempered combination needs to count it); without the factor a young
/// model's wrong guesses are as confident as a mature model's verdicts,
/// and a stacker fitted on a record of both ages fits neither
/// (docs/experiments.md, "A young model speaks softly"). A credibility
/// weight, as in Bühlmann's: half at this many messages of the rarer
/// class, 0.99 at a hundred times as many.
pub const CREDIBILITY_HALF: f64 = 5.0;

/// A model ready to score: the statistics with the hyperparameters applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    params: ValidParams,
    n: [u64; 2],
    absent_constant: [f64; VIEWS],
    gauss: GaussianNb,
    /// ln θ by count, for the present-token LLRs.
    thetas: LogThetas,
}

impl Model {
    /// Builds the scoring state from learned totals. `absent_constant` is
    /// [`bernoulli::absent_constant`] over each view's vocabulary, needed
    /// only by [`Combine::Textbook`] (pass zeros otherwise). The model
    /// scores with `params` [at the size](ValidParams::at_size) of the
    /// totals, and [`Model::params`] says so.
    pub fn new(params: ValidParams, totals: &Totals, absent_constant: [f64; VIEWS]) -> Model {
        let params = params.at_size(totals.messages);
        Model {
            params,
            n: totals.messages,
            absent_constant,
            gauss: GaussianNb::fit(&totals.gauss, params.get().var_floor, 1e-6),
            thetas: LogThetas::new(params.prior(), totals.messages),
        }
    }

    /// Messages learned, `[ham, spam]`.
    pub fn messages(&self) -> [u64; 2] {
        self.n
    }

    /// How much the model's evidence counts, in [0, 1): see
    /// [`CREDIBILITY_HALF`]. Every view's evidence and the metadata's are
    /// multiplied by it.
    pub fn credibility(&self) -> f64 {
        let m = self.n[0].min(self.n[1]) as f64;
        m / (m + CREDIBILITY_HALF)
    }

    /// The hyperparameters.
    pub fn params(&self) -> &ValidParams {
        &self.params
    }

    /// The evidence of one token: its present-token LLR.
    pub fn token_llr(&self, counts: TokenCounts) -> f64 {
        self.thetas.present_llr(counts)
    }

    /// Each metadata feature's share of the metadata evidence: its
    /// log-likelihood ratio clipped to ± `meta_clip`, times `meta_weight`
    /// and the model's [credibility](Self::credibility), over the number
    /// of features. They add up to [`Evidence::meta`]; all zero until both
    /// classes have been learned.
    pub(crate) fn metadata_shares(&self, metadata: &[f64; METADATA_LEN]) -> [f64; METADATA_LEN] {
        let mut shares = [0.0; METADATA_LEN];
        if self.n[0] > 0 && self.n[1] > 0 {
            let p = self.params.get();
            let weight = p.meta_weight * self.credibility() / METADATA_LEN as f64;
            for (share, llr) in shares.iter_mut().zip(self.gauss.llrs(metadata)) {
                *share = weight * llr.clamp(-p.meta_clip, p.meta_clip);
            }
        }
        shares
    }

    /// Scores a message from the counts of its features that are in the
    /// vocabulary, each with its view, and its metadata.
    pub fn evidence(
        &self,
        known: impl IntoIterator<Item = (View, TokenCounts)>,
        metadata: &[f64; METADATA_LEN],
    ) -> Evidence {
        let p = self.params.get();
        let mut views = match View::ALL.map(|v| p.combine_of(v)) {
            [
                Combine::Tempered {
                    min_strength: s0,
                    power: p0,
                },
                Combine::Tempered {
                    min_strength: s1,
                    power: p1,
                },
                Combine::Tempered {
                    min_strength: s2,
                    power: p2,
                },
            ] => {
                // The default: each view's sum in one pass, in the order
                // of its tokens, as `text_evidence` sums them.
                let strength = [s0, s1, s2];
                let mut sums = [bernoulli::Tempered::default(); VIEWS];
                for (view, counts) in known {
                    let v = view.index();
                    sums[v].add(self.thetas.present_llr(counts), strength[v]);
                }
                [sums[0].finish(p0), sums[1].finish(p1), sums[2].finish(p2)]
            }
            combines => {
                let mut by_view: [Vec<TokenCounts>; VIEWS] = Default::default();
                for (view, counts) in known {
                    by_view[view.index()].push(counts);
                }
                let mut views = [TextEvidence::default(); VIEWS];
                for (((ev, combine), counts), constant) in views
                    .iter_mut()
                    .zip(combines)
                    .zip(by_view)
                    .zip(self.absent_constant)
                {
                    let prior = self.params.prior();
                    *ev = bernoulli::text_evidence(prior, combine, self.n, constant, counts);
                }
                views
            }
        };
        let credibility = self.credibility();
        for view in &mut views {
            view.score *= credibility;
        }
        let (meta, meta_fit) = self.metadata_evidence(metadata);
        Evidence {
            prior: self.class_prior(),
            views,
            meta,
            meta_fit,
            words: 0,
            logistic: 0.0,
        }
    }

    /// The log prior odds of spam, from the class counts.
    fn class_prior(&self) -> f64 {
        let class_prior = |k: u64| (k as f64 + 1.0).ln();
        class_prior(self.n[1]) - class_prior(self.n[0])
    }

    /// [`Evidence::meta`] and [`Evidence::meta_fit`] of `metadata`.
    fn metadata_evidence(&self, metadata: &[f64; METADATA_LEN]) -> (f64, f64) {
        let have_both = self.n[0] > 0 && self.n[1] > 0;
        let meta = self.metadata_shares(metadata).iter().sum();
        let meta_fit = if have_both {
            self.gauss
                .log_likelihood(0, metadata)
                .max(self.gauss.log_likelihood(1, metadata))
        } else {
            0.0
        };
        (meta, meta_fit)
    }

    /// Whether `other` scores `view` exactly as this model does, given the
    /// same counts.
    fn same_view(&self, other: &Model, view: View) -> bool {
        let v = view.index();
        self.n == other.n
            && self.params.prior() == other.params.prior()
            && self.absent_constant[v].to_bits() == other.absent_constant[v].to_bits()
            && self.params.get().combine_of(view) == other.params.get().combine_of(view)
    }

    /// Whether `other` scores metadata exactly as this model does.
    fn same_metadata(&self, other: &Model) -> bool {
        let (p, q) = (self.params.get(), other.params.get());
        self.n == other.n
            && self.gauss == other.gauss
            && p.meta_weight.to_bits() == q.meta_weight.to_bits()
            && p.meta_clip.to_bits() == q.meta_clip.to_bits()
    }
}

/// Several models of the same counts that score a message together, as
/// each would alone ([`Model::evidence`]), doing once what they share: a
/// view combined the same way is scored once, the tempered combinations
/// of a view at several strengths share each token's LLR, and the
/// metadata is scored once. Choosing a combination strength scores every
/// message under each candidate; most of that work is the same.
#[derive(Debug, Clone)]
pub(crate) struct ModelSet {
    models: Vec<Model>,
    /// For each model and view, the first model that scores the view the
    /// same way (itself if none before it does).
    view_from: Vec<[usize; VIEWS]>,
    /// For each model, the first model that scores metadata the same way.
    meta_from: Vec<usize>,
}

impl ModelSet {
    /// The set of `models`, in this order.
    pub fn new(models: Vec<Model>) -> ModelSet {
        let first = |j: usize, same: &dyn Fn(&Model) -> bool| {
            models[..j].iter().position(same).unwrap_or(j)
        };
        let view_from = (0..models.len())
            .map(|j| View::ALL.map(|view| first(j, &|o: &Model| o.same_view(&models[j], view))))
            .collect();
        let meta_from = (0..models.len())
            .map(|j| first(j, &|o: &Model| o.same_metadata(&models[j])))
            .collect();
        ModelSet {
            models,
            view_from,
            meta_from,
        }
    }

    /// The evidence of one message under each model, in order: equal to
    /// [`Model::evidence`] of each.
    pub fn evidence(
        &self,
        known: impl IntoIterator<Item = (View, TokenCounts)>,
        metadata: &[f64; METADATA_LEN],
    ) -> Vec<Evidence> {
        let mut by_view: [Vec<TokenCounts>; VIEWS] = Default::default();
        for (view, counts) in known {
            by_view[view.index()].push(counts);
        }
        // Present-token LLRs of each view, by the prior and class totals
        // they were computed with.
        type Llrs = (BetaPrior, [u64; 2], Vec<f64>);
        let mut llrs: [Vec<Llrs>; VIEWS] = Default::default();
        let mut out: Vec<Evidence> = Vec::with_capacity(self.models.len());
        for (j, m) in self.models.iter().enumerate() {
            let prior = m.params.prior();
            let mut views = [TextEvidence::default(); VIEWS];
            for view in View::ALL {
                let v = view.index();
                let from = self.view_from[j][v];
                if from < j {
                    views[v] = out[from].views[v];
                    continue;
                }
                let counts = &by_view[v];
                let mut ev = match m.params.get().combine_of(view) {
                    Combine::Tempered {
                        min_strength,
                        power,
                    } => {
                        let cached = &mut llrs[v];
                        let at = match cached.iter().position(|(p, n, _)| *p == prior && *n == m.n)
                        {
                            Some(at) => at,
                            None => {
                                let values = counts.iter().map(|&c| prior.token_llr(c, m.n).0);
                                cached.push((prior, m.n, values.collect()));
                                cached.len() - 1
                            }
                        };
                        bernoulli::tempered(cached[at].2.iter().copied(), min_strength, power)
                    }
                    combine => bernoulli::text_evidence(
                        prior,
                        combine,
                        m.n,
                        m.absent_constant[v],
                        counts.iter().copied(),
                    ),
                };
                ev.score *= m.credibility();
                views[v] = ev;
            }
            let from = self.meta_from[j];
            let (meta, meta_fit) = if from < j {
                (out[from].meta, out[from].meta_fit)
            } else {
                m.metadata_evidence(metadata)
            };
            out.push(Evidence {
                prior: m.class_prior(),
                views,
                meta,
                meta_fit,
                words: 0,
                logistic: 0.0,
            });
        }
        out
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
    fn a_learning_database_scores_as_a_grown_one_from_its_size_on() {
        let young = ValidParams::default();
        assert!(young.get().grows);
        let grown = young.at_size([GROWN_AT + 50, GROWN_AT]);
        let p = grown.get();
        assert_eq!((p.a, p.b), (GROWN_PRIOR, GROWN_PRIOR));
        assert_eq!(
            p.combine_of(View::Body),
            Combine::Tempered {
                min_strength: GROWN_STRENGTH,
                power: 1.0
            }
        );
        assert_eq!(p.bytes_min_strength, young.get().bytes_min_strength);
        assert_eq!(
            grown.prior(),
            BetaPrior::new(GROWN_PRIOR, GROWN_PRIOR).unwrap()
        );
        // One class short of it: still young.
        assert_eq!(young.at_size([10_000, GROWN_AT - 1]), young);
        // Chosen or pinned values stay what they are at any size.
        let settled = Params {
            grows: false,
            ..Params::default()
        }
        .check()
        .unwrap();
        assert_eq!(settled.at_size([10_000, 10_000]), settled);
        // A model scores with the values in force at its totals' size.
        let totals = Totals {
            messages: [GROWN_AT, GROWN_AT],
            ..Totals::default()
        };
        assert_eq!(Model::new(young, &totals, [0.0; VIEWS]).params(), &grown);
    }

    #[test]
    fn parameters_written_before_a_database_could_grow_stay_as_they_were() {
        let mut json = serde_json::to_value(Params::default()).unwrap();
        json.as_object_mut().unwrap().remove("grows");
        let read: Params = serde_json::from_value(json).unwrap();
        assert!(!read.grows);
        assert_eq!(
            read,
            Params {
                grows: false,
                ..Params::default()
            }
        );
    }

    #[test]
    fn the_byte_view_has_its_own_strength() {
        let p = Params {
            bytes_min_strength: 3.5,
            ..Params::default()
        };
        let Combine::Tempered {
            min_strength,
            power,
        } = p.combine_of(View::Bytes)
        else {
            panic!("tempered");
        };
        assert_eq!((min_strength, power), (3.5, 1.0));
        assert_eq!(p.combine_of(View::Header), p.combine);
        assert_eq!(p.combine_of(View::Body), p.combine);
        let sum = Params {
            combine: Combine::Sum,
            ..p
        };
        assert_eq!(sum.combine_of(View::Bytes), Combine::Sum);
        assert!(
            Params {
                bytes_min_strength: -1.0,
                ..Params::default()
            }
            .check()
            .is_err()
        );
    }

    /// A young model's evidence is its combined evidence times m/(m + 5),
    /// m the messages of the rarer class: the view scores and the
    /// metadata's alike, and the metadata shares still add up to it.
    #[test]
    fn a_young_models_evidence_is_softened_by_its_credibility() {
        let both = TokenCounts { ham: 1, spam: 1 };
        let metadata = [1.0; METADATA_LEN];
        for (n, want) in [([1, 1], 1.0 / 6.0), ([5, 40], 0.5), ([400, 95], 0.95)] {
            let counts = TokenCounts {
                ham: 0,
                spam: n[1] as u32,
            };
            let mut totals = Totals {
                messages: n,
                ..Totals::default()
            };
            for (c, k) in n.iter().enumerate() {
                for i in 0..*k {
                    for g in totals.gauss[c].iter_mut() {
                        g.add((i % 3) as f64 + 4.0 * c as f64, 1);
                    }
                }
            }
            let p = ValidParams::default();
            let model = Model::new(p, &totals, [0.0; VIEWS]);
            assert!((model.credibility() - want).abs() < 1e-12, "{n:?}");
            let ev = model.evidence([(View::Body, counts), (View::Body, both)], &metadata);
            let raw = bernoulli::text_evidence(
                p.prior(),
                p.get().combine_of(View::Body),
                n,
                0.0,
                [counts, both],
            );
            assert!(raw.score > 0.0);
            assert!((ev.view(View::Body).score - want * raw.score).abs() < 1e-12);
            let shares: f64 = model.metadata_shares(&metadata).iter().sum();
            assert!(ev.meta != 0.0 && (ev.meta - shares).abs() < 1e-12);
        }
        let empty = Model::new(ValidParams::default(), &Totals::default(), [0.0; VIEWS]);
        assert_eq!(empty.credibility(), 0.0);
    }

    /// A set of models scores each message exactly as each model alone,
    /// whatever they share: tempered strengths, the byte view's own
    /// strength, other combinations, another prior or other metadata
    /// weights.
    #[test]
    fn a_model_set_scores_as_each_model_alone() {
        let mut totals = Totals {
            messages: [40, 25],
            ..Totals::default()
        };
        for (c, n) in [(0, 40), (1, 25)] {
            for i in 0..n {
                for (k, g) in totals.gauss[c].iter_mut().enumerate() {
                    g.add(((i * (k + 1) + c * 7) % 11) as f64, 1);
                }
            }
        }
        let tempered = |min_strength: f64, bytes_min_strength: f64| Params {
            combine: Combine::Tempered {
                min_strength,
                power: 1.0,
            },
            bytes_min_strength,
            ..Params::default()
        };
        let params = [
            tempered(0.5, 3.0),
            tempered(2.5, 3.0),
            tempered(0.5, 0.5),
            tempered(2.5, 0.0),
            Params {
                a: 1.0,
                b: 1.0,
                ..tempered(0.5, 3.0)
            },
            Params {
                meta_weight: 0.5,
                ..tempered(0.5, 3.0)
            },
            Params {
                combine: Combine::Sum,
                ..Params::default()
            },
            Params {
                combine: Combine::Fisher {
                    min_dev: 0.1,
                    s: 1.0,
                    x: 0.5,
                },
                ..Params::default()
            },
            Params {
                combine: Combine::Textbook,
                ..Params::default()
            },
        ];
        let models: Vec<Model> = params
            .iter()
            .map(|p| Model::new(p.check().unwrap(), &totals, [-1.5, -2.5, -3.5]))
            .collect();
        let set = ModelSet::new(models.clone());
        let known: Vec<(View, TokenCounts)> = (0..60u32)
            .map(|i| {
                let view = View::ALL[(i % 3) as usize];
                let counts = TokenCounts {
                    ham: 1 + (i * 7) % 40,
                    spam: 1 + (i * 13) % 25,
                };
                (view, counts)
            })
            .collect();
        let metadata: [f64; METADATA_LEN] = std::array::from_fn(|k| (k * 3 % 5) as f64);
        let together = set.evidence(known.iter().copied(), &metadata);
        assert_eq!(together.len(), models.len());
        for (model, ev) in models.iter().zip(&together) {
            let alone = model.evidence(known.iter().copied(), &metadata);
            assert_eq!(*ev, alone, "{:?}", model.params().get());
        }
        assert_ne!(together[0].views, together[1].views);
        assert_ne!(together[0].views, together[2].views);
        assert_ne!(together[0].meta, together[5].meta);
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
            grams: Vec::new(),
            lr_buckets: Vec::new(),
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
        let model = Model::new(ValidParams::default(), &totals, [0.0; VIEWS]);
        let counts = |t: &str| {
            let d = delta.words[t];
            let c = TokenCounts {
                ham: d[0] as u32,
                spam: d[1] as u32,
            };
            (crate::vocab::word_view(t), c)
        };
        let zero = [0.0; METADATA_LEN];
        let spam = model.evidence(["viagra", "free"].map(counts), &zero);
        let ham = model.evidence(["meeting", "agenda"].map(counts), &zero);
        assert!(spam.log_odds() > 3.0, "{spam:?}");
        assert!(ham.log_odds() < -3.0, "{ham:?}");
        let neutral = model.evidence(["the"].map(counts), &zero);
        assert_eq!(
            neutral.view(View::Body).used,
            0,
            "a token seen equally in both classes is too weak to count"
        );
        assert!(sigmoid(spam.log_odds()).is_finite());
    }
}
