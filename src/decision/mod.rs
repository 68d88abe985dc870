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

/// The one verdict rule: the cost-optimal verdict for the calibrated
/// probability, except that a model that has seen too little of either
/// class, or a message with too few known words (mostly unlike anything
/// learned), is unsure rather than a guess.
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
    /// `probability`, from a model trained on `messages` (`[ham, spam]`).
    pub fn verdict(&self, messages: [u64; 2], evidence: &Evidence, probability: f64) -> Verdict {
        if messages.iter().any(|&n| n < self.min_per_class)
            || evidence.known_words() < self.min_known
        {
            Verdict::Unsure
        } else {
            self.costs.decide(probability)
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
}
