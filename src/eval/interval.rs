//! How far an evaluation's figures could move on another draw of the same
//! kind of mail: 95% intervals by the stratified bootstrap.
//!
//! Each resample draws, with replacement, as many ham from the ham and as
//! many spam from the spam as were scored, keeping every message's score,
//! and computes the figures again; the interval is the 2.5th and 97.5th
//! percentiles of [`RESAMPLES`] resamples (the percentile bootstrap; the
//! TREC spam track, too, gave its figures with 95% intervals). It measures the
//! sampling error of the messages, not how the scores would differ had
//! the database learned other mail before them. A resample is a count per
//! message, so each costs one pass over the messages in score order. The
//! generator is seeded with a constant: the same scores give the same
//! intervals.

use std::ops::Range;

use serde::Serialize;

use super::Scored;
use crate::decision::Verdict;

/// Resamples behind each interval.
pub const RESAMPLES: usize = 1000;

/// The 95% intervals of an evaluation's figures, each `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Intervals {
    /// (1 − AUC) in percent.
    pub one_minus_auc_pct: [f64; 2],
    /// FNR at FPR 0.1%, percent.
    pub fnr_at_fpr_0_1_pct: [f64; 2],
    /// Ham judged spam, percent of ham.
    pub fpr_pct: [f64; 2],
    /// Spam judged ham, percent of spam.
    pub fnr_pct: [f64; 2],
    /// Messages judged unsure, percent of all.
    pub unsure_pct: [f64; 2],
}

/// One message as the resamples see it, in ascending score order.
struct Point {
    log_odds: f64,
    is_spam: bool,
    verdict: Verdict,
}

/// The figures of one resample, in [`Intervals`]' order.
type Figures = [f64; 5];

impl Intervals {
    /// The intervals of `scored`'s figures; `None` when a class is missing
    /// (no ranking figure exists then).
    pub fn of(scored: &[Scored]) -> Option<Intervals> {
        let points = sorted_points(scored);
        let (spam, ham): (Vec<usize>, Vec<usize>) =
            (0..points.len()).partition(|&i| points[i].is_spam);
        if spam.is_empty() || ham.is_empty() {
            return None;
        }
        let groups = tie_groups(&points);
        let mut rng = SplitMix(SEED);
        let mut weights = vec![0u32; points.len()];
        let mut samples: Vec<Figures> = Vec::with_capacity(RESAMPLES);
        for _ in 0..RESAMPLES {
            weights.fill(0);
            for class in [&spam, &ham] {
                for _ in 0..class.len() {
                    weights[class[rng.below(class.len())]] += 1;
                }
            }
            samples.push(figures(&points, &groups, &weights, [ham.len(), spam.len()]));
        }
        let bounds = |k: usize| {
            let mut v: Vec<f64> = samples.iter().map(|f| f[k]).collect();
            v.sort_by(f64::total_cmp);
            [percentile(&v, 0.025), percentile(&v, 0.975)]
        };
        Some(Intervals {
            one_minus_auc_pct: bounds(0),
            fnr_at_fpr_0_1_pct: bounds(1),
            fpr_pct: bounds(2),
            fnr_pct: bounds(3),
            unsure_pct: bounds(4),
        })
    }
}

/// `scored` as the resamples see it, in ascending score order.
fn sorted_points(scored: &[Scored]) -> Vec<Point> {
    let mut points: Vec<Point> = scored
        .iter()
        .map(|s| Point {
            log_odds: s.log_odds,
            is_spam: s.is_spam,
            verdict: s.verdict,
        })
        .collect();
    points.sort_by(|a, b| a.log_odds.total_cmp(&b.log_odds));
    points
}

/// The seed of every run's generator.
const SEED: u64 = 0x0b00_75f7_a9e5_2002;

/// The ranges of `points` (in ascending score order) that hold one score.
fn tie_groups(points: &[Point]) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for i in 1..=points.len() {
        if i == points.len() || points[i].log_odds != points[start].log_odds {
            groups.push(start..i);
            start = i;
        }
    }
    groups
}

/// The figures of the messages counted `weights` times (`points` in
/// ascending score order, `groups` their ties; `n` the ham and spam
/// drawn): (1 − AUC)% by the rank-sum with ties counted half, FNR at FPR
/// 0.1% at the threshold [`super::fnr_at_fpr`] sets, and the verdicts'
/// rates.
fn figures(points: &[Point], groups: &[Range<usize>], weights: &[u32], n: [usize; 2]) -> Figures {
    let (nh, ns) = (n[0] as f64, n[1] as f64);
    // Each group's ham and spam drawn, and the verdicts' errors.
    let (mut fp, mut fn_, mut unsure) = (0.0, 0.0, 0.0);
    let drawn: Vec<[f64; 2]> = groups
        .iter()
        .map(|group| {
            let mut g = [0.0; 2];
            for i in group.clone() {
                let (p, w) = (&points[i], f64::from(weights[i]));
                g[usize::from(p.is_spam)] += w;
                match (p.verdict, p.is_spam) {
                    (Verdict::Spam, false) => fp += w,
                    (Verdict::Ham, true) => fn_ += w,
                    (Verdict::Unsure, _) => unsure += w,
                    _ => {}
                }
            }
            g
        })
        .collect();
    // Ascending: each spam outranks the ham below it and half the ham tied
    // with it.
    let (mut pairs, mut ham_below) = (0.0, 0.0);
    for &[gh, gs] in &drawn {
        pairs += gs * (ham_below + gh / 2.0);
        ham_below += gh;
    }
    // Descending: the threshold is the score of the (allowed + 1)-th
    // highest ham; the spam strictly above it are caught.
    let allowed = (0.001 * nh).floor();
    let (mut ham_above, mut spam_above) = (0.0, 0.0);
    for &[gh, gs] in drawn.iter().rev() {
        if ham_above + gh > allowed {
            break;
        }
        ham_above += gh;
        spam_above += gs;
    }
    [
        100.0 * (1.0 - pairs / (nh * ns)),
        100.0 * (ns - spam_above) / ns,
        100.0 * fp / nh,
        100.0 * fn_ / ns,
        100.0 * unsure / (nh + ns),
    ]
}

/// The `q` quantile of sorted `v`, by linear interpolation between ranks.
fn percentile(v: &[f64], q: f64) -> f64 {
    let at = q * (v.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
}

/// SplitMix64 (Steele, Lea & Flood 2014): small, fast and good enough to
/// draw resamples.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below
    /// n / 2^64).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores with ties and every verdict, from a fixed generator.
    fn sample(n: usize, seed: u64) -> Vec<Scored> {
        let mut rng = SplitMix(seed);
        (0..n)
            .map(|index| {
                let is_spam = rng.below(3) == 0;
                // Coarse scores, so that ties happen; spam higher on average.
                let log_odds = (rng.below(9) as f64 - 4.0) + if is_spam { 2.0 } else { 0.0 };
                let verdict = match log_odds {
                    x if x > 3.0 => Verdict::Spam,
                    x if x < 0.0 => Verdict::Ham,
                    _ => Verdict::Unsure,
                };
                Scored {
                    index,
                    is_spam,
                    log_odds,
                    probability: crate::model::sigmoid(log_odds),
                    verdict,
                }
            })
            .collect()
    }

    #[test]
    fn a_resample_of_every_message_once_gives_the_reports_figures() {
        for (n, seed) in [(40, 1), (300, 2), (2500, 3)] {
            let scored = sample(n, seed);
            let report = super::super::Report::new(&scored, &Default::default(), 0.0);
            let points = sorted_points(&scored);
            let spam = points.iter().filter(|p| p.is_spam).count();
            let got = figures(&points, &tie_groups(&points), &vec![1; n], [n - spam, spam]);
            let want = [
                report.one_minus_auc_pct,
                report.fnr_at_fpr_0_1_pct,
                report.fpr_pct,
                report.fnr_pct,
                report.unsure_pct,
            ];
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-9, "n {n}: {got:?} against {want:?}");
            }
        }
    }

    #[test]
    fn intervals_hold_the_figures_and_narrow_with_more_mail() {
        let scored = sample(800, 7);
        let report = super::super::Report::new(&scored, &Default::default(), 0.0);
        let i = Intervals::of(&scored).unwrap();
        assert_eq!(
            Intervals::of(&scored),
            Some(i),
            "the same scores, the same intervals"
        );
        for ([low, high], point) in [
            (i.one_minus_auc_pct, report.one_minus_auc_pct),
            (i.unsure_pct, report.unsure_pct),
            (i.fpr_pct, report.fpr_pct),
            (i.fnr_pct, report.fnr_pct),
        ] {
            assert!(low < point && point < high, "{low} {point} {high}");
        }
        // Four times the messages, drawn alike: about half the width.
        let more = sample(3200, 8);
        let wide = |i: Intervals| i.one_minus_auc_pct[1] - i.one_minus_auc_pct[0];
        let ratio = wide(Intervals::of(&more).unwrap()) / wide(i);
        assert!((0.35..0.7).contains(&ratio), "{ratio}");
    }

    #[test]
    fn a_perfect_ranking_has_no_width_and_a_missing_class_no_interval() {
        let mut scored = sample(200, 9);
        for s in &mut scored {
            s.log_odds = if s.is_spam { 5.0 } else { -5.0 };
        }
        let i = Intervals::of(&scored).unwrap();
        assert_eq!(i.one_minus_auc_pct, [0.0, 0.0]);
        assert_eq!(i.fnr_at_fpr_0_1_pct, [0.0, 0.0]);
        scored.retain(|s| s.is_spam);
        assert_eq!(Intervals::of(&scored), None);
    }
}
