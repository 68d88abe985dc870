//! Calibration: a logistic map from the model's evidence to P(spam), fitted
//! on scores the model did not train on (cross-validated scores of the
//! training data). Naive Bayes scores rank well but pile up at the extremes;
//! the fitted map learns how much each kind of evidence is really worth.
//!
//! The inputs are the evidence of each view of the message (see
//! [`crate::vocab::View`]) and the metadata evidence, so the fit is also how
//! much each view counts for this user's mail: a logistic stacker, Platt
//! scaling generalised to [`INPUTS`] inputs. A view that carries nothing gets
//! a weight near zero. No weight is negative: every input is a
//! log-likelihood ratio, and evidence for ham must never count for spam
//! (with little data and views that overlap, an unconstrained fit can give
//! one view a negative weight); an input whose weight would be negative is
//! left out of the fit. The targets are the labels themselves, not
//! Platt's smoothed ones ((N+ + 1)/(N+ + 2) and 1/(N− + 2)): those pull
//! every spam, however clear, toward a probability just below 1, which
//! flattens the map and leaves clear spam in the unsure band below the
//! spam cutoff. What keeps the map finite on separable data, and sane on
//! a handful of messages, is instead a weak Gaussian prior centred on the
//! unfitted map (each naive Bayes view's evidence added, the online
//! discriminative view's left out, no intercept): with few
//! samples the fit stays near what an untrained model says, and with many
//! the samples decide.

use serde::{Deserialize, Serialize};

use crate::model::sigmoid;
use crate::vocab::VIEWS;

/// Number of inputs to the calibration map: one per view of naive Bayes,
/// then the metadata, then the online discriminative view
/// ([`LOGISTIC`]).
pub const INPUTS: usize = VIEWS + 2;

/// The input of the online discriminative view
/// ([`crate::model::logistic`]): the last. A map fitted before it was
/// there has one input fewer, and is read with weight 0 for it.
pub const LOGISTIC: usize = VIEWS + 1;

/// Precision of the Gaussian prior on each weight and the intercept, in
/// units of the log-loss summed over samples: one sample's worth, so it
/// decides only when samples are few or separate the classes perfectly
/// (where the labels alone would send the weights and the intercept to
/// infinity).
pub(crate) const PRIOR_PRECISION: f64 = 1.0;

/// Messages of each class a stacker is fitted on, at least: with fewer,
/// the map it has stays (the unfitted one, or the last one fitted). A
/// handful of one class fits an intercept to the class mix, not to the
/// evidence.
pub const MIN_PER_CLASS: usize = 20;

/// p = σ(w · x + bias).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibrator {
    /// Weights of each view's evidence, then of the metadata evidence,
    /// then of the online discriminative view's score.
    #[serde(deserialize_with = "weights")]
    pub weights: [f64; INPUTS],
    /// Intercept.
    pub bias: f64,
}

/// A map's weights as written: [`INPUTS`] of them, or one fewer from
/// before the online discriminative view (its weight then 0, so the map
/// judges as it did).
fn weights<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[f64; INPUTS], D::Error> {
    let given = Vec::<f64>::deserialize(d)?;
    let mut weights = [0.0; INPUTS];
    match given.len() {
        INPUTS | LOGISTIC => {
            weights[..given.len()].copy_from_slice(&given);
            Ok(weights)
        }
        n => Err(serde::de::Error::invalid_length(
            n,
            &"one weight per stacker input",
        )),
    }
}

impl Default for Calibrator {
    /// The sum of the naive Bayes evidence: what an uncalibrated model
    /// says.
    fn default() -> Self {
        let mut weights = [1.0; INPUTS];
        // The online discriminative view starts from zero weights, and its
        // scores grow in scale as it learns: it counts for as much as the
        // user's own mail shows it is worth, and for nothing before.
        weights[LOGISTIC] = 0.0;
        Calibrator { weights, bias: 0.0 }
    }
}

impl Calibrator {
    /// P(spam) for inputs `x`.
    pub fn probability(&self, x: [f64; INPUTS]) -> f64 {
        sigmoid(self.logit(x))
    }

    /// The calibrated log-odds.
    pub fn logit(&self, x: [f64; INPUTS]) -> f64 {
        let z: f64 = self.weights.iter().zip(x).map(|(w, v)| w * v).sum::<f64>() + self.bias;
        if z.is_finite() { z } else { 0.0 }
    }

    /// Fits the map by Newton's method on the log-loss plus a weak
    /// Gaussian prior toward the unfitted map, with no negative weight: while the fit gives some
    /// input a negative weight, the most negative is left out (weight 0)
    /// and the rest fitted again. `samples` are (inputs, is_spam). With
    /// fewer than two samples of either class, returns the default map.
    pub fn fit(samples: &[([f64; INPUTS], bool)]) -> Calibrator {
        let pos = samples.iter().filter(|s| s.1).count();
        let neg = samples.len() - pos;
        if pos < 2 || neg < 2 {
            return Calibrator::default();
        }
        let most_negative = |c: &Calibrator| {
            (0..INPUTS)
                .filter(|&i| c.weights[i] < 0.0)
                .min_by(|&a, &b| c.weights[a].total_cmp(&c.weights[b]))
        };
        let c = Self::fit_unconstrained(samples);
        let Some(mut worst) = most_negative(&c) else {
            return c;
        };
        // Left-out inputs are zero in every sample, so their weight is 0 and
        // they are never the most negative again: at most INPUTS rounds.
        let mut kept: Vec<([f64; INPUTS], bool)> = samples.to_vec();
        let mut c = c;
        for _ in 0..INPUTS {
            for (x, _) in &mut kept {
                x[worst] = 0.0;
            }
            c = Self::fit_unconstrained(&kept);
            match most_negative(&c) {
                Some(i) => worst = i,
                None => break,
            }
        }
        c
    }

    /// The logistic fit itself: the maximum a posteriori map under a
    /// Gaussian prior ([`PRIOR_PRECISION`]) centred on the unfitted map;
    /// an input that is zero in every sample gets weight 0.
    // Index loops mirror the gradient and Hessian formulas.
    #[allow(clippy::needless_range_loop)]
    fn fit_unconstrained(samples: &[([f64; INPUTS], bool)]) -> Calibrator {
        const K: usize = INPUTS + 1;
        // The prior's mean: the unfitted map's weight for an input with
        // evidence, 0 for one zero in every sample (left out) and for the
        // intercept.
        let mut mean = [0.0; K];
        for (x, _) in samples {
            for i in 0..INPUTS {
                if x[i] != 0.0 {
                    mean[i] = Calibrator::default().weights[i];
                }
            }
        }
        // Newton's method from the prior's mean can overshoot when the
        // inputs are large; from zero it converges.
        let mut theta = [0.0; K];
        for _ in 0..100 {
            let mut grad = [0.0; K];
            let mut hess = [[0.0; K]; K];
            for (x, y) in samples {
                let mut row = [1.0; K];
                row[..INPUTS].copy_from_slice(x);
                let z: f64 = row.iter().zip(&theta).map(|(a, b)| a * b).sum();
                let p = sigmoid(z);
                let t = if *y { 1.0 } else { 0.0 };
                let w = (p * (1.0 - p)).max(1e-12);
                for i in 0..K {
                    grad[i] += (p - t) * row[i];
                    for j in 0..K {
                        hess[i][j] += w * row[i] * row[j];
                    }
                }
            }
            for i in 0..K {
                grad[i] += PRIOR_PRECISION * (theta[i] - mean[i]);
                hess[i][i] += PRIOR_PRECISION;
            }
            let Some(step) = solve(hess, grad) else { break };
            let mut max_step: f64 = 0.0;
            for i in 0..K {
                theta[i] -= step[i];
                max_step = max_step.max(step[i].abs());
            }
            if max_step < 1e-10 {
                break;
            }
        }
        if theta.iter().all(|v| v.is_finite()) {
            let mut weights = [0.0; INPUTS];
            weights.copy_from_slice(&theta[..INPUTS]);
            Calibrator {
                weights,
                bias: theta[INPUTS],
            }
        } else {
            Calibrator::default()
        }
    }
}

/// Solves a small symmetric system by Gaussian elimination with pivoting.
// Index loops read like the textbook algorithm; iterators would not.
#[allow(clippy::needless_range_loop)]
fn solve<const K: usize>(mut a: [[f64; K]; K], mut b: [f64; K]) -> Option<[f64; K]> {
    for col in 0..K {
        let pivot = (col..K).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..K {
            let f = a[row][col] / a[col][col];
            for k in col..K {
                a[row][k] -= f * a[col][k];
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; K];
    for row in (0..K).rev() {
        let s: f64 = (row + 1..K).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs with the first two set and the rest zero.
    fn x2(a: f64, b: f64) -> [f64; INPUTS] {
        let mut x = [0.0; INPUTS];
        x[0] = a;
        x[1] = b;
        x
    }

    #[test]
    fn recovers_a_known_logistic_map() {
        // Deterministic samples from p = σ(2·x0 + 0.5·x1 + 1), expanded into
        // fractional counts by repetition.
        let mut samples = Vec::new();
        for i in -20..=20 {
            for j in -4..=4 {
                let x = x2(i as f64 / 5.0, j as f64);
                let p = sigmoid(2.0 * x[0] + 0.5 * x[1] + 1.0);
                let spam = (p * 100.0).round() as usize;
                samples.extend(std::iter::repeat_n((x, true), spam));
                samples.extend(std::iter::repeat_n((x, false), 100 - spam));
            }
        }
        let c = Calibrator::fit(&samples);
        assert!((c.weights[0] - 2.0).abs() < 0.05, "{c:?}");
        assert!((c.weights[1] - 0.5).abs() < 0.05, "{c:?}");
        assert!((c.bias - 1.0).abs() < 0.05, "{c:?}");
    }

    #[test]
    fn a_confident_map_is_not_flattened() {
        // Ten samples per point of p = σ(3·x0), most of them far from the
        // boundary: a fit that pulled every spam toward a target below 1
        // would flatten the slope (Platt's targets give about 2.5) and keep
        // clear spam near the spam cutoff. Rounding the frequencies to
        // tenths makes the tails a little steeper than σ(3·x0), so the
        // labels' own fit lies a little above 3.
        let mut samples = Vec::new();
        for i in -20..=20 {
            let x = x2(i as f64 / 4.0, 0.0);
            let spam = (sigmoid(3.0 * x[0]) * 10.0).round() as usize;
            samples.extend(std::iter::repeat_n((x, true), spam));
            samples.extend(std::iter::repeat_n((x, false), 10 - spam));
        }
        let c = Calibrator::fit(&samples);
        assert!((3.0..4.0).contains(&c.weights[0]), "{c:?}");
        assert!(c.bias.abs() < 0.05, "{c:?}");
    }

    #[test]
    fn few_separable_samples_keep_a_map_near_the_unfitted_one() {
        // Twelve messages whose evidence separates the classes perfectly:
        // the labels alone would send the weight and the intercept off to
        // infinity, and a message with no evidence at all (every input 0)
        // would be judged by the intercept alone.
        let samples: Vec<_> = (0..12)
            .map(|i| {
                let spam = i % 2 == 0;
                let e = if spam { 2.0 } else { -2.0 } + (i / 2) as f64 / 4.0;
                (x2(e, e), spam)
            })
            .collect();
        let c = Calibrator::fit(&samples);
        assert!(c.probability([0.0; INPUTS]) > 0.2, "{c:?}");
        assert!(c.probability([0.0; INPUTS]) < 0.8, "{c:?}");
        assert!(
            c.weights[..2].iter().all(|w| (0.3..5.0).contains(w)),
            "{c:?}"
        );
        assert!(c.weights[2..].iter().all(|&w| w == 0.0), "{c:?}");
    }

    #[test]
    fn no_weight_is_negative() {
        // p = σ(2·x0 − x1): x1 counts against spam, though (like a view
        // that overlaps another) it rises with x0. The fit leaves it out
        // rather than let evidence for spam count for ham.
        let mut samples = Vec::new();
        for i in -20..=20 {
            for j in -4..=4 {
                let a = i as f64 / 5.0;
                let x = x2(a, a + j as f64 / 4.0);
                let p = sigmoid(2.0 * x[0] - x[1]);
                let spam = (p * 100.0).round() as usize;
                samples.extend(std::iter::repeat_n((x, true), spam));
                samples.extend(std::iter::repeat_n((x, false), 100 - spam));
            }
        }
        let c = Calibrator::fit(&samples);
        assert_eq!(c.weights[1], 0.0, "{c:?}");
        assert!(c.weights[0] > 0.5, "{c:?}");
        assert!(c.weights.iter().all(|&w| w >= 0.0), "{c:?}");
    }

    #[test]
    fn an_input_of_noise_gets_a_weight_near_zero() {
        // Input 0 carries the label; input 2 is noise from a fixed-seed
        // generator.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut noise = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
        };
        let mut samples = Vec::new();
        for i in 0..4000 {
            let signal = (i % 200) as f64 / 20.0 - 5.0;
            let spam = sigmoid(1.5 * signal) > (i % 7) as f64 / 7.0 + 0.07;
            let mut x = [0.0; INPUTS];
            x[0] = signal;
            x[2] = noise();
            samples.push((x, spam));
        }
        let c = Calibrator::fit(&samples);
        assert!(c.weights[0] > 0.5, "{c:?}");
        assert!(c.weights[2].abs() < 0.1 * c.weights[0], "{c:?}");
    }

    #[test]
    fn separable_data_stays_finite_and_degenerate_input_falls_back() {
        let samples: Vec<_> = (0..50)
            .map(|i| (x2(i as f64 - 25.0, 0.0), i >= 25))
            .collect();
        let c = Calibrator::fit(&samples);
        assert!(c.weights.iter().all(|w| w.is_finite()) && c.bias.is_finite());
        assert!(c.probability(x2(10.0, 0.0)) > 0.9 && c.probability(x2(-10.0, 0.0)) < 0.1);
        assert_eq!(
            Calibrator::fit(&[(x2(1.0, 0.0), true)]),
            Calibrator::default()
        );
    }
}
