//! From evidence to a verdict: calibration maps the model's scores to a
//! probability that means what it says, and asymmetric costs turn the
//! probability into ham, unsure or spam; [`Decider`] is the one verdict
//! rule. Pure maths, no I/O.

pub mod calibrate;
pub mod prequential;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use calibrate::Calibrator;
pub use prequential::Prequential;

use crate::model::Evidence;

/// What to do with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Deliver.
    Ham,
    /// Let a person look.
    Unsure,
    /// Junk it.
    Spam,
}

impl Verdict {
    /// Every verdict, from the least severe for a message to the most:
    /// the order of [`Verdict::index`].
    pub const ALL: [Verdict; 3] = [Verdict::Ham, Verdict::Unsure, Verdict::Spam];

    /// The verdict's place in [`Verdict::ALL`]: a higher one does more to
    /// the message (a count per verdict is indexed by it, and of several
    /// judgments the least harmful is the lowest).
    pub fn index(self) -> usize {
        match self {
            Verdict::Ham => 0,
            Verdict::Unsure => 1,
            Verdict::Spam => 2,
        }
    }

    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ham => "ham",
            Verdict::Unsure => "unsure",
            Verdict::Spam => "spam",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Costs of the three outcomes that can go wrong, in any unit: a ham
/// judged spam (`fp`, a lost real message), a spam judged ham (`fn_`), and
/// an unsure verdict (`unsure`, a person's attention). Build with
/// [`Costs::new`] or parse `FP:FN` / `FP:FN:UNSURE` (e.g. `10:1:0.1`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    fp: f64,
    fn_: f64,
    unsure: Option<f64>,
}

/// The default costs: a lost real message costs twenty spams let through;
/// an unsure message costs half of one (someone has to look at it, as at
/// a spam in the inbox, but knows to look). Cutoffs: ham ≤ 0.5 < unsure ≤
/// 0.975 < spam. Chosen by measurement (docs/experiments.md, "The default
/// costs"): the band holds at most 3% of mail while at most 0.1% of ham is
/// lost, where a tenth for the unsure cost left 5% of mail unsure.
pub const DEFAULT_COSTS: &str = "20:1:0.5";

impl Default for Costs {
    fn default() -> Self {
        DEFAULT_COSTS.parse().expect("default costs are valid")
    }
}

impl Costs {
    /// Checked costs: finite and > 0; `unsure` if given finite and ≥ 0.
    pub fn new(fp: f64, fn_: f64, unsure: Option<f64>) -> Result<Self, String> {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !ok(fp) || !ok(fn_) {
            return Err(format!(
                "costs must be finite and > 0 (got fp={fp}, fn={fn_})"
            ));
        }
        if let Some(u) = unsure
            && !(u.is_finite() && u >= 0.0)
        {
            return Err(format!("the unsure cost must be finite and ≥ 0 (got {u})"));
        }
        Ok(Costs { fp, fn_, unsure })
    }

    /// Cost of a false positive.
    pub fn fp(&self) -> f64 {
        self.fp
    }

    /// Cost of a false negative.
    pub fn fn_(&self) -> f64 {
        self.fn_
    }

    /// Cost of an unsure verdict, if that action is offered.
    pub fn unsure(&self) -> Option<f64> {
        self.unsure
    }

    /// The Bayes-optimal cutoffs `(ham_below, spam_above)` on P(spam):
    /// ham if p ≤ ham cutoff, spam if p > spam cutoff, unsure between.
    /// Without an unsure action (or when it never pays) both equal
    /// c_fp / (c_fp + c_fn).
    ///
    /// Expected losses: ham p·c_fn, spam (1−p)·c_fp, unsure c_u. Unsure beats
    /// ham when p > c_u/c_fn and beats spam when p < 1 − c_u/c_fp.
    pub fn cutoffs(&self) -> (f64, f64) {
        // As a ratio, so that costs near f64::MAX do not overflow the sum.
        let single = 1.0 / (1.0 + self.fn_ / self.fp);
        match self.unsure {
            Some(u) => {
                let ham = u / self.fn_;
                let spam = 1.0 - u / self.fp;
                if ham < spam {
                    (ham, spam)
                } else {
                    (single, single)
                }
            }
            None => (single, single),
        }
    }

    /// The verdict minimising expected cost at probability `p`.
    pub(crate) fn decide(&self, p: f64) -> Verdict {
        let (ham, spam) = self.cutoffs();
        if p.is_nan() {
            Verdict::Unsure
        } else if p > spam {
            Verdict::Spam
        } else if p <= ham {
            Verdict::Ham
        } else {
            Verdict::Unsure
        }
    }

    /// The cost of a verdict for a message of known class.
    pub fn cost(&self, verdict: Verdict, is_spam: bool) -> f64 {
        match (verdict, is_spam) {
            (Verdict::Spam, false) => self.fp,
            (Verdict::Ham, true) => self.fn_,
            (Verdict::Unsure, _) => self.unsure.unwrap_or(0.0),
            _ => 0.0,
        }
    }
}

impl FromStr for Costs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let num = |x: &str| {
            x.trim()
                .parse::<f64>()
                .map_err(|_| format!("'{x}' is not a number in costs '{s}'"))
        };
        match parts.as_slice() {
            [fp, fn_] => Costs::new(num(fp)?, num(fn_)?, None),
            [fp, fn_, u] => Costs::new(num(fp)?, num(fn_)?, Some(num(u)?)),
            _ => Err(format!(
                "costs must be FP:FN or FP:FN:UNSURE, e.g. 10:1:0.1 (got '{s}')"
            )),
        }
    }
}

impl fmt::Display for Costs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.fp, self.fn_)?;
        if let Some(u) = self.unsure {
            write!(f, ":{u}")?;
        }
        Ok(())
    }
}

/// Why a message is unsure whatever its probability: the model has too
/// little to go on, and a guess would be confident only by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Doubt {
    /// Too few messages of one class learned.
    YoungModel,
    /// Too few of the message's words were ever seen.
    FewKnownWords,
    /// Spam by its probability, but unlike anything learned: few and a
    /// minority of its words known, and its metadata far from both
    /// classes' (see [`unfamiliar`]).
    Unfamiliar,
}

impl Doubt {
    /// Its name, as the status fields and `explain` give it.
    pub fn name(self) -> &'static str {
        match self {
            Doubt::YoungModel => "young-model",
            Doubt::FewKnownWords => "few-known-words",
            Doubt::Unfamiliar => "unfamiliar",
        }
    }

    /// What it means, in words.
    pub fn meaning(self) -> &'static str {
        match self {
            Doubt::YoungModel => "the model has learned too few messages of one class",
            Doubt::FewKnownWords => "too few of the message's words were ever seen",
            Doubt::Unfamiliar => {
                "spam by its probability, but unlike anything learned: few of its words known, its metadata far from both classes'"
            }
        }
    }
}

impl fmt::Display for Doubt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// [`unfamiliar`]: a message with this many known words or more has
/// evidence enough to be judged, however new the rest of it is.
pub const UNFAMILIAR_KNOWN_WORDS: usize = 50;

/// [`unfamiliar`]: the metadata fits neither class when its log-likelihood
/// under the closer class's Gaussians is below this (nats, summed over the
/// metadata features).
pub const UNFAMILIAR_META_FIT: f64 = -20.0;

/// Whether the model has seen almost nothing like the message: fewer than
/// [`UNFAMILIAR_KNOWN_WORDS`] of its words known, and fewer than half,
/// and its metadata far from both classes ([`UNFAMILIAR_META_FIT`]). Mail
/// in a language or from a kind of sender the user never trained on looks
/// like this, and naive Bayes judges it on the handful of words it shares
/// with one class (a Korean newsletter on the few Korean words of Korean
/// spam): such a verdict is confident by accident. The byte view is not
/// asked: almost every header 4-gram is known in any model. The three
/// conditions together hold for almost no message of the mail a model was
/// trained on (docs/experiments.md, "Unfamiliar mail").
pub fn unfamiliar(evidence: &Evidence) -> bool {
    let known = evidence.known_words();
    known < UNFAMILIAR_KNOWN_WORDS
        && 2 * known < evidence.words
        && evidence.meta_fit < UNFAMILIAR_META_FIT
}

/// The one verdict rule: the cost-optimal verdict for the calibrated
/// probability, except that a model that has seen too little of either
/// class, or a message with too few known words, is unsure rather than a
/// guess; and a message unlike anything learned ([`unfamiliar`]) is never
/// spam, only unsure. The last is one-sided, as the costs are: junking
/// real mail on a few words it shares with spam is the loss that matters,
/// while a ham verdict on unfamiliar mail costs at most a spam let
/// through; and mail in a language the user has taught the model a
/// little of stays unfamiliar by these measures for a long time, so
/// doubting every verdict on it would leave all of it unsure. Each
/// unsure verdict the probability did not decide carries its [`Doubt`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decider {
    /// Decision costs.
    pub costs: Costs,
    /// Fewer known word tokens than this: unsure.
    pub min_known: usize,
    /// Fewer learned messages of either class than this: unsure.
    pub min_per_class: u64,
}

impl Decider {
    /// The verdict for a message with this `evidence` and calibrated
    /// `probability`, from a model trained on `messages` (`[ham, spam]`),
    /// and why it is unsure when the probability did not decide.
    pub fn verdict(
        &self,
        messages: [u64; 2],
        evidence: &Evidence,
        probability: f64,
    ) -> (Verdict, Option<Doubt>) {
        if messages.iter().any(|&n| n < self.min_per_class) {
            return (Verdict::Unsure, Some(Doubt::YoungModel));
        }
        if evidence.known_words() < self.min_known {
            return (Verdict::Unsure, Some(Doubt::FewKnownWords));
        }
        match self.costs.decide(probability) {
            Verdict::Spam if unfamiliar(evidence) => (Verdict::Unsure, Some(Doubt::Unfamiliar)),
            verdict => (verdict, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_way_cutoff_is_the_cost_ratio() {
        let c: Costs = "10:1".parse().unwrap();
        let (h, s) = c.cutoffs();
        assert!((h - 10.0 / 11.0).abs() < 1e-15 && h == s);
        assert_eq!(c.decide(0.9), Verdict::Ham);
        assert_eq!(c.decide(0.95), Verdict::Spam);
    }

    #[test]
    fn unsure_band_from_the_abstain_cost() {
        let c: Costs = "10:1:0.1".parse().unwrap();
        let (h, s) = c.cutoffs();
        assert!((h - 0.1).abs() < 1e-15 && (s - 0.99).abs() < 1e-15);
        assert_eq!(c.decide(0.05), Verdict::Ham);
        assert_eq!(c.decide(0.5), Verdict::Unsure);
        assert_eq!(c.decide(0.995), Verdict::Spam);
        assert_eq!(c.decide(f64::NAN), Verdict::Unsure);
        // An abstain cost too high to ever pay: no band.
        let c: Costs = "10:1:5".parse().unwrap();
        assert_eq!(c.cutoffs().0, c.cutoffs().1);
        // Expected cost is minimised at every p.
        let c: Costs = "10:1:0.1".parse().unwrap();
        for i in 0..=1000 {
            let p = i as f64 / 1000.0;
            let loss = |v| p * c.cost(v, true) + (1.0 - p) * c.cost(v, false);
            let best = [Verdict::Ham, Verdict::Unsure, Verdict::Spam]
                .into_iter()
                .map(loss)
                .fold(f64::INFINITY, f64::min);
            assert!(loss(c.decide(p)) <= best + 1e-12, "p={p}");
        }
    }

    #[test]
    fn costs_near_the_largest_float_keep_their_cutoffs() {
        let c: Costs = "1e308:1e308".parse().unwrap();
        assert_eq!(c.cutoffs(), (0.5, 0.5));
        assert_eq!(c.decide(0.4), Verdict::Ham);
        let c: Costs = "1.7e308:1e308".parse().unwrap();
        let (h, s) = c.cutoffs();
        assert!((h - 1.7 / 2.7).abs() < 1e-12 && h == s);
        // Extreme ratios tend to the right limits: never spam, always spam.
        assert_eq!("1e308:1e-308".parse::<Costs>().unwrap().cutoffs().1, 1.0);
        assert_eq!("1e-308:1e308".parse::<Costs>().unwrap().cutoffs().1, 0.0);
    }

    #[test]
    fn bad_costs_are_rejected_with_a_message() {
        for bad in [
            "", "10", "0:1", "a:1", "1:-1", "1:1:-0.5", "1:1:1:1", "inf:1",
        ] {
            let err = bad.parse::<Costs>().unwrap_err();
            assert!(!err.is_empty());
        }
        assert_eq!("10:1:0.1".parse::<Costs>().unwrap().to_string(), "10:1:0.1");
    }
    /// Evidence of a message with `known` of its `words` words known (all
    /// in the body view) and metadata fitting its closer class at
    /// `meta_fit` nats.
    fn evidence(known: usize, words: usize, meta_fit: f64) -> Evidence {
        let mut e = Evidence {
            meta_fit,
            words,
            ..Evidence::default()
        };
        e.views[crate::vocab::View::Body.index()].known = known;
        e
    }

    fn decider() -> Decider {
        Decider {
            costs: Costs::default(),
            min_known: 5,
            min_per_class: 10,
        }
    }

    #[test]
    fn a_message_unlike_anything_learned_is_unsure_for_that_reason() {
        let d = decider();
        let grown = [100, 100];
        // Thirty of eighty words known, metadata far from both classes:
        // never spam, however sure the probability; ham and the band stay.
        let strange = evidence(30, 80, -40.0);
        assert_eq!(
            d.verdict(grown, &strange, 0.9999),
            (Verdict::Unsure, Some(Doubt::Unfamiliar))
        );
        assert_eq!(d.verdict(grown, &strange, 0.0001), (Verdict::Ham, None));
        assert_eq!(d.verdict(grown, &strange, 0.7), (Verdict::Unsure, None));
        // Each condition alone is not enough: metadata that fits, half the
        // words known, or enough known words to go on.
        for e in [
            evidence(30, 80, -5.0),
            evidence(40, 80, -40.0),
            evidence(UNFAMILIAR_KNOWN_WORDS, 200, -40.0),
        ] {
            assert_eq!(d.verdict(grown, &e, 0.9999), (Verdict::Spam, None), "{e:?}");
            assert_eq!(d.verdict(grown, &e, 0.0001), (Verdict::Ham, None), "{e:?}");
        }
        // Words not counted (0) never make a message unfamiliar.
        assert_eq!(
            d.verdict(grown, &evidence(30, 0, -40.0), 0.9999),
            (Verdict::Spam, None)
        );
    }

    #[test]
    fn each_doubt_is_named_and_the_first_that_holds_is_given() {
        let d = decider();
        let unfamiliar = evidence(3, 80, -40.0);
        assert_eq!(
            d.verdict([9, 100], &unfamiliar, 0.9999),
            (Verdict::Unsure, Some(Doubt::YoungModel))
        );
        assert_eq!(
            d.verdict([100, 100], &unfamiliar, 0.9999),
            (Verdict::Unsure, Some(Doubt::FewKnownWords))
        );
        // In the probability band, unsure needs no doubt.
        assert_eq!(
            d.verdict([100, 100], &evidence(60, 80, 0.0), 0.7),
            (Verdict::Unsure, None)
        );
        let names: Vec<&str> = [Doubt::YoungModel, Doubt::FewKnownWords, Doubt::Unfamiliar]
            .iter()
            .map(|d| d.name())
            .collect();
        assert_eq!(names, ["young-model", "few-known-words", "unfamiliar"]);
        assert_eq!(
            serde_json::to_value(Doubt::FewKnownWords).unwrap(),
            "few-known-words"
        );
    }
}
