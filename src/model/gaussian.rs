//! Gaussian naive Bayes over the metadata vector: per class and feature a
//! normal density from the learned statistics, with a variance floor so a
//! feature that never varied in one class cannot give infinite evidence.

use serde::{Deserialize, Serialize};

use super::GaussStats;
use crate::vocab::METADATA_LEN;

/// Per-class normal parameters, ready for scoring.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GaussianNb {
    /// Means, `[class][feature]` (class index as in `Label::index`).
    pub mean: [[f64; METADATA_LEN]; 2],
    /// Variances after the floor, `[class][feature]`.
    pub var: [[f64; METADATA_LEN]; 2],
}

impl GaussianNb {
    /// Maximum-likelihood means and variances (divide by n) from the
    /// statistics, each variance raised to at least `floor_frac` × the
    /// feature's variance over both classes, and at least `min_var`.
    // Class and feature indices address parallel arrays; index loops say so.
    #[allow(clippy::needless_range_loop)]
    pub fn fit(
        stats: &[[GaussStats; METADATA_LEN]; 2],
        floor_frac: f64,
        min_var: f64,
    ) -> GaussianNb {
        let mut nb = GaussianNb {
            mean: [[0.0; METADATA_LEN]; 2],
            var: [[0.0; METADATA_LEN]; 2],
        };
        for k in 0..METADATA_LEN {
            let mut pooled = stats[0][k];
            pooled.merge(&stats[1][k]);
            let (n, _, m2) = pooled.moments();
            let pooled_var = if n > 0 { m2 / n as f64 } else { 0.0 };
            let floor = (floor_frac * pooled_var).max(min_var);
            for c in 0..2 {
                let (n, mean, m2) = stats[c][k].moments();
                nb.mean[c][k] = mean;
                nb.var[c][k] = if n > 0 {
                    (m2 / n as f64).max(floor)
                } else {
                    pooled_var.max(floor).max(1.0)
                };
            }
        }
        nb
    }

    /// ln N(x; μ, σ²) for one class, summed over features.
    pub(crate) fn log_likelihood(&self, class: usize, x: &[f64; METADATA_LEN]) -> f64 {
        (0..METADATA_LEN)
            .map(|k| log_normal(x[k], self.mean[class][k], self.var[class][k]))
            .sum()
    }

    /// Per-feature log-likelihood ratios, spam vs ham.
    pub fn llrs(&self, x: &[f64; METADATA_LEN]) -> [f64; METADATA_LEN] {
        std::array::from_fn(|k| {
            log_normal(x[k], self.mean[1][k], self.var[1][k])
                - log_normal(x[k], self.mean[0][k], self.var[0][k])
        })
    }
}

/// ln N(x; μ, σ²).
pub(crate) fn log_normal(x: f64, mean: f64, var: f64) -> f64 {
    let d = x - mean;
    -0.5 * ((std::f64::consts::TAU * var).ln() + d * d / var)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example in DESIGN.md: two features, class 1 at
    /// (8.5,2.5),(9,2),(8,1), class 2 at (1,8),(2.5,7.5),(2,7), equal priors,
    /// ML variances; at x_A = (3, 4) the log-odds class 1 vs class 2 is
    /// exactly −408/7.
    #[test]
    fn worked_example_from_the_design() {
        let class1 = [[8.5, 2.5], [9.0, 2.0], [8.0, 1.0]];
        let class2 = [[1.0, 8.0], [2.5, 7.5], [2.0, 7.0]];
        let mut stats = [[GaussStats::default(); METADATA_LEN]; 2];
        // Index 1 plays class 1, index 0 class 2; features beyond the first
        // two stay empty and are not scored below.
        for p in class1 {
            stats[1][0].add(p[0], 1);
            stats[1][1].add(p[1], 1);
        }
        for p in class2 {
            stats[0][0].add(p[0], 1);
            stats[0][1].add(p[1], 1);
        }
        let nb = GaussianNb::fit(&stats, 0.0, 0.0);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(nb.mean[1][0], 8.5) && close(nb.mean[1][1], 11.0 / 6.0));
        assert!(close(nb.mean[0][0], 11.0 / 6.0) && close(nb.mean[0][1], 7.5));
        assert!(close(nb.var[1][0], 1.0 / 6.0) && close(nb.var[1][1], 7.0 / 18.0));
        assert!(close(nb.var[0][0], 7.0 / 18.0) && close(nb.var[0][1], 1.0 / 6.0));
        let mut x = [0.0; METADATA_LEN];
        x[0] = 3.0;
        x[1] = 4.0;
        let llr = nb.llrs(&x);
        let log_odds = llr[0] + llr[1];
        assert!((log_odds - (-408.0 / 7.0)).abs() < 1e-4, "{log_odds}");
        // P(class 2 | x_A) = 1 − σ(−408/7) ≈ 1 − 4.86e-26.
        let p1 = crate::model::sigmoid(log_odds);
        assert!((p1 - 4.86e-26).abs() < 0.01e-26, "{p1:e}");
    }

    #[test]
    fn variance_floor_keeps_evidence_finite() {
        let mut stats = [[GaussStats::default(); METADATA_LEN]; 2];
        for _ in 0..10 {
            stats[0][6].add(0.0, 1);
            stats[1][6].add(1.0, 1);
        }
        let nb = GaussianNb::fit(&stats, 0.01, 1e-4);
        let x = [0.5; METADATA_LEN];
        assert!(nb.llrs(&x).iter().all(|v| v.is_finite()));
        assert!(nb.var[0][6] > 0.0);
    }
}
