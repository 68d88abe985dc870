//! Measuring the filter on a labelled corpus: the metrics ([`Report`]) and
//! the protocols ([`protocol`]: k-fold cross-validation and the TREC online
//! protocol), in memory. Library code, so tests measure with it too.

pub mod confusion;
mod corpus;
pub mod interval;
pub mod protocol;

pub use corpus::{Corpus, Error, Evaluation, Fold, Item, ONLINE_WINDOWS, Window, evaluate};

use serde::Serialize;

use crate::decision::{Costs, Verdict};
pub use interval::Intervals;

/// One scored message of an evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scored {
    /// Index of the message in the corpus.
    pub index: usize,
    /// True label.
    pub is_spam: bool,
    /// The calibrated log-odds: `probability` is σ(`log_odds`).
    pub log_odds: f64,
    /// Calibrated P(spam).
    pub probability: f64,
    /// The verdict at the configured costs.
    pub verdict: Verdict,
}

/// The figures of an evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Messages scored.
    pub n: usize,
    /// Ham and spam among them.
    pub n_ham: usize,
    /// Spam among them.
    pub n_spam: usize,
    /// Area under the ROC curve of the calibrated probability.
    pub auc: f64,
    /// (1 − AUC) in percent.
    pub one_minus_auc_pct: f64,
    /// Logistic average misclassification at the operating point, percent.
    pub lam_pct: f64,
    /// Ham judged spam, percent of ham, at the operating point.
    pub fpr_pct: f64,
    /// Spam judged ham, percent of spam, at the operating point.
    pub fnr_pct: f64,
    /// Messages judged unsure, percent of all.
    pub unsure_pct: f64,
    /// Spam judged ham when the threshold is set for a ham-judged-spam rate
    /// of at most 0.1%, percent of spam.
    pub fnr_at_fpr_0_1_pct: f64,
    /// Expected calibration error, 10 equal-width bins.
    pub ece: f64,
    /// Mean cost per message at the configured costs.
    pub expected_cost: f64,
    /// The cutoffs on P(spam) at the configured costs.
    pub ham_cutoff: f64,
    /// Spam cutoff.
    pub spam_cutoff: f64,
    /// Messages per second, parsing included, over the whole run.
    pub messages_per_second: f64,
    /// The 95% intervals of the ranking figures and the verdicts' rates
    /// ([`interval`]); `None` when a class is missing.
    pub intervals: Option<Intervals>,
}

impl Report {
    /// Computes every figure from scored messages.
    pub fn new(scored: &[Scored], costs: &Costs, seconds: f64) -> Report {
        // Ranked by the calibrated log-odds, which orders messages as the
        // probability does but never rounds to 0 or 1.
        let ranks: Vec<(f64, bool)> = scored.iter().map(|s| (s.log_odds, s.is_spam)).collect();
        let pairs: Vec<(f64, bool)> = scored.iter().map(|s| (s.probability, s.is_spam)).collect();
        let n_spam = scored.iter().filter(|s| s.is_spam).count();
        let n_ham = scored.len() - n_spam;
        let count = |f: &dyn Fn(&Scored) -> bool| scored.iter().filter(|s| f(s)).count();
        let fp = count(&|s| !s.is_spam && s.verdict == Verdict::Spam);
        let fn_ = count(&|s| s.is_spam && s.verdict == Verdict::Ham);
        let unsure = count(&|s| s.verdict == Verdict::Unsure);
        let pct = |a: usize, b: usize| {
            if b == 0 {
                0.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        let auc = auc(&ranks);
        let (ham_cutoff, spam_cutoff) = costs.cutoffs();
        Report {
            n: scored.len(),
            n_ham,
            n_spam,
            auc,
            one_minus_auc_pct: 100.0 * (1.0 - auc),
            lam_pct: 100.0 * lam(fp, n_ham, fn_, n_spam),
            fpr_pct: pct(fp, n_ham),
            fnr_pct: pct(fn_, n_spam),
            unsure_pct: pct(unsure, scored.len()),
            fnr_at_fpr_0_1_pct: 100.0 * fnr_at_fpr(&ranks, 0.001),
            ece: ece(&pairs, 10),
            expected_cost: if scored.is_empty() {
                0.0
            } else {
                scored
                    .iter()
                    .map(|s| costs.cost(s.verdict, s.is_spam))
                    .sum::<f64>()
                    / scored.len() as f64
            },
            ham_cutoff,
            spam_cutoff,
            messages_per_second: if seconds > 0.0 {
                scored.len() as f64 / seconds
            } else {
                0.0
            },
            intervals: Intervals::of(scored),
        }
    }
}

/// ROC AUC by the rank-sum (Mann–Whitney) statistic, ties counted half.
/// 0.5 when either class is missing.
pub fn auc(scores: &[(f64, bool)]) -> f64 {
    let mut sorted: Vec<(f64, bool)> = scores.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n_pos = sorted.iter().filter(|s| s.1).count() as f64;
    let n_neg = sorted.len() as f64 - n_pos;
    if n_pos == 0.0 || n_neg == 0.0 {
        return 0.5;
    }
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j < sorted.len() && sorted[j].0 == sorted[i].0 {
            j += 1;
        }
        // Average rank (1-based) of the tie group i..j.
        let avg = (i + j + 1) as f64 / 2.0;
        rank_sum += avg * sorted[i..j].iter().filter(|s| s.1).count() as f64;
        i = j;
    }
    (rank_sum - n_pos * (n_pos + 1.0) / 2.0) / (n_pos * n_neg)
}

/// The spam-missed rate when the threshold is the lowest that keeps the
/// ham-judged-spam rate at or under `max_fpr` (a message is judged spam
/// when its score is strictly above the threshold).
pub(crate) fn fnr_at_fpr(scores: &[(f64, bool)], max_fpr: f64) -> f64 {
    let mut ham: Vec<f64> = scores.iter().filter(|s| !s.1).map(|s| s.0).collect();
    let spam: Vec<f64> = scores.iter().filter(|s| s.1).map(|s| s.0).collect();
    if ham.is_empty() || spam.is_empty() {
        return 0.0;
    }
    ham.sort_by(|a, b| b.total_cmp(a));
    let allowed = (max_fpr * ham.len() as f64).floor() as usize;
    // Threshold at the (allowed+1)-th highest ham score: at most `allowed`
    // ham scores are strictly above it (ties at the threshold are not).
    let threshold = ham[allowed.min(ham.len() - 1)];
    spam.iter().filter(|&&s| s <= threshold).count() as f64 / spam.len() as f64
}

/// Logistic average misclassification (TREC): the inverse logit of the mean
/// of the logits of the two error rates, each smoothed by half a message.
pub fn lam(fp: usize, n_ham: usize, fn_: usize, n_spam: usize) -> f64 {
    let rate = |e: usize, n: usize| (e as f64 + 0.5) / (n as f64 + 1.0);
    let logit = |p: f64| (p / (1.0 - p)).ln();
    crate::model::sigmoid((logit(rate(fp, n_ham)) + logit(rate(fn_, n_spam))) / 2.0)
}

/// Expected calibration error with `bins` equal-width bins of P(spam):
/// Σ_b (n_b / n) · |fraction spam in b − mean probability in b|.
pub fn ece(scores: &[(f64, bool)], bins: usize) -> f64 {
    let mut count = vec![0usize; bins];
    let mut conf = vec![0.0; bins];
    let mut pos = vec![0usize; bins];
    for &(p, y) in scores {
        let b = ((p * bins as f64) as usize).min(bins - 1);
        count[b] += 1;
        conf[b] += p;
        pos[b] += usize::from(y);
    }
    let n = scores.len().max(1) as f64;
    (0..bins)
        .filter(|&b| count[b] > 0)
        .map(|b| {
            let c = count[b] as f64;
            (c / n) * (pos[b] as f64 / c - conf[b] / c).abs()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_by_hand() {
        assert_eq!(auc(&[(0.1, false), (0.9, true)]), 1.0);
        assert_eq!(auc(&[(0.9, false), (0.1, true)]), 0.0);
        // One tie between classes counts half: pairs (p,n): (0.5,0.5)=½,
        // (0.5,0.2)=1, (0.8,0.5)=1, (0.8,0.2)=1 → 3.5/4.
        let s = [(0.5, true), (0.8, true), (0.5, false), (0.2, false)];
        assert!((auc(&s) - 0.875).abs() < 1e-15);
        assert_eq!(auc(&[(0.5, true)]), 0.5);
    }

    #[test]
    fn fnr_at_fpr_by_hand() {
        // 1000 ham at 0..1000, one ham allowed above the threshold (0.1%):
        // threshold = second-highest ham = 998; spam at 998 and below miss.
        let mut s: Vec<(f64, bool)> = (0..1000).map(|i| (i as f64, false)).collect();
        s.extend([(997.0, true), (998.0, true), (998.5, true), (2000.0, true)]);
        assert!((fnr_at_fpr(&s, 0.001) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn ece_and_lam_by_hand() {
        // Bin [0.8,0.9): two messages at 0.8, one spam → |0.5 − 0.8| = 0.3.
        // Bin [0.1,0.2): two at 0.1, no spam → 0.1. Weighted: (0.3+0.1)/2.
        let s = [(0.8, true), (0.8, false), (0.1, false), (0.1, false)];
        assert!((ece(&s, 10) - 0.2).abs() < 1e-12);
        assert!(ece(&[(1.0, true), (0.0, false)], 10) < 1e-12);
        // Equal error rates: lam is that rate (smoothed).
        assert!((lam(9, 99, 9, 99) - 0.095).abs() < 1e-12);
    }
}
