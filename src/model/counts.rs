//! The sufficient statistics the models learn from, and the deltas that
//! training and unlearning apply to them. All integers: training, unlearning
//! and merging are exact, so `unlearn(learn(x))` restores the counts bit for
//! bit and shards merge without rounding. Priors, variance floors and
//! calibration are applied when scoring, never stored.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::features::Features;
use crate::vocab::{Feature, METADATA_LEN};

/// The two classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    /// Wanted mail.
    Ham,
    /// Unwanted mail.
    Spam,
}

impl Label {
    /// Both labels, in index order.
    pub const ALL: [Label; 2] = [Label::Ham, Label::Spam];

    /// Index into per-class arrays: ham 0, spam 1.
    pub fn index(self) -> usize {
        match self {
            Label::Ham => 0,
            Label::Spam => 1,
        }
    }

    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Label::Ham => "ham",
            Label::Spam => "spam",
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Label {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "ham" => Ok(Label::Ham),
            "spam" => Ok(Label::Spam),
            _ => Err(format!("unknown label '{s}' (expected ham or spam)")),
        }
    }
}

/// Messages of each class containing one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenCounts {
    /// Ham messages containing the token.
    pub ham: u32,
    /// Spam messages containing the token.
    pub spam: u32,
}

impl TokenCounts {
    /// The count for one class.
    pub fn get(self, label: Label) -> u32 {
        match label {
            Label::Ham => self.ham,
            Label::Spam => self.spam,
        }
    }

    /// True if both counts are zero (the token can be forgotten).
    pub fn is_zero(self) -> bool {
        self.ham == 0 && self.spam == 0
    }
}

/// Fixed-point scale of metadata values in [`GaussStats`]: values are
/// stored as `round(x · 2^16)`, exact to ±8e-6, so sums are integers.
pub(crate) const GAUSS_SCALE: f64 = 65_536.0;

/// Sufficient statistics of one metadata feature in one class, in fixed
/// point: count, sum and sum of squares. Signed so a [`Delta`] can carry
/// removals. Mean and variance (the n, mean, M2 of Welford/Chan) are derived
/// from them when scoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GaussStats {
    /// Number of values.
    pub n: i64,
    /// Sum of fixed-point values.
    pub sum: i128,
    /// Sum of squared fixed-point values.
    pub sum_sq: i128,
}

impl GaussStats {
    /// Adds (sign +1) or removes (sign −1) one value.
    pub fn add(&mut self, x: f64, sign: i64) {
        let q = quantize(x);
        self.n += sign;
        self.sum += i128::from(sign) * i128::from(q);
        self.sum_sq += i128::from(sign) * i128::from(q) * i128::from(q);
    }

    /// Merges another set of statistics (or a signed delta) into this one.
    pub fn merge(&mut self, other: &GaussStats) {
        self.n += other.n;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
    }

    /// `(n, mean, M2)` in real units; `M2` is the sum of squared deviations.
    pub(crate) fn moments(&self) -> (i64, f64, f64) {
        if self.n <= 0 {
            return (0, 0.0, 0.0);
        }
        let n = self.n as f64;
        let mean_q = self.sum as f64 / n;
        // M2 = Σq² − (Σq)²/n, computed in integers where it matters.
        let m2_q = (self.sum_sq * self.n as i128 - self.sum * self.sum) as f64 / n;
        (
            self.n,
            mean_q / GAUSS_SCALE,
            m2_q.max(0.0) / (GAUSS_SCALE * GAUSS_SCALE),
        )
    }
}

fn quantize(x: f64) -> i64 {
    if x.is_finite() {
        (x.clamp(-1e9, 1e9) * GAUSS_SCALE).round() as i64
    } else {
        0
    }
}

/// Everything learned: message counts per class and metadata statistics
/// per class and feature. Token counts live beside it, keyed by token.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Totals {
    /// Messages learned per class (index [`Label::index`]).
    pub messages: [u64; 2],
    /// Metadata statistics per class, per feature.
    pub gauss: [[GaussStats; METADATA_LEN]; 2],
}
use crate::vocab::Digest;

/// A change to the statistics: what one training run, or one shard of it,
/// adds or removes. Deltas merge by addition, so per-thread deltas reduce to
/// one before a single store write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delta {
    /// Signed change of message counts per class.
    pub messages: [i64; 2],
    /// Signed change of word token counts per class (`[ham, spam]`).
    pub words: HashMap<String, [i64; 2]>,
    /// Signed change of the byte view's counts per class, by bucket.
    pub grams: HashMap<u32, [i64; 2]>,
    /// Signed change of the online discriminative view's weight counters
    /// (`[negative, positive]`), by bucket ([`crate::model::logistic`]).
    pub weights: HashMap<u32, [i64; 2]>,
    /// Signed change of metadata statistics per class and feature.
    pub gauss: [[GaussStats; METADATA_LEN]; 2],
    /// Registry changes: digest → new label, or `None` to forget it.
    pub registry: Vec<(Digest, Option<Label>)>,
}

impl Delta {
    /// Adds (sign +1) or removes (sign −1) one message's features under a label.
    pub fn add_message(&mut self, features: &Features, label: Label, sign: i64) {
        let c = label.index();
        self.messages[c] += sign;
        features.for_each_feature(|feature| self.change(feature)[c] += sign);
        for (stats, &x) in self.gauss[c].iter_mut().zip(&features.metadata.0) {
            stats.add(x, sign);
        }
    }

    /// The change of one feature's counts (`[ham, spam]`), for adding to:
    /// zero if it had none.
    pub fn change(&mut self, feature: Feature<'_>) -> &mut [i64; 2] {
        match feature {
            // Looked up before it is copied: most words are there already.
            Feature::Word(word) => {
                if !self.words.contains_key(word) {
                    self.words.insert(word.to_owned(), [0, 0]);
                }
                self.words.get_mut(word).expect("inserted above")
            }
            Feature::Gram(bucket) => self.grams.entry(bucket).or_default(),
            Feature::Weight(bucket) => self.weights.entry(bucket).or_default(),
        }
    }

    /// Every feature the delta changes, with its change (`[ham, spam]`,
    /// possibly zero), in no particular order.
    pub fn changes(&self) -> impl Iterator<Item = (Feature<'_>, [i64; 2])> + '_ {
        let words = self.words.iter().map(|(w, &d)| (Feature::Word(w), d));
        let grams = self.grams.iter().map(|(&b, &d)| (Feature::Gram(b), d));
        let weights = self.weights.iter().map(|(&b, &d)| (Feature::Weight(b), d));
        words.chain(grams).chain(weights)
    }

    /// Adds another delta into this one.
    pub fn merge(&mut self, other: Delta) {
        for c in 0..2 {
            self.messages[c] += other.messages[c];
            for (mine, theirs) in self.gauss[c].iter_mut().zip(&other.gauss[c]) {
                mine.merge(theirs);
            }
        }
        merge_map(&mut self.words, other.words);
        merge_map(&mut self.grams, other.grams);
        merge_map(&mut self.weights, other.weights);
        self.registry.extend(other.registry);
    }

    /// True if applying this delta would change nothing.
    pub fn is_empty(&self) -> bool {
        self.messages == [0, 0]
            && self.registry.is_empty()
            && self.changes().all(|(_, d)| d == [0, 0])
            && self
                .gauss
                .iter()
                .flatten()
                .all(|g| *g == GaussStats::default())
    }
}

/// Adds the changes of `theirs` into `mine`.
fn merge_map<K: std::hash::Hash + Eq>(
    mine: &mut HashMap<K, [i64; 2]>,
    theirs: HashMap<K, [i64; 2]>,
) {
    if mine.is_empty() {
        *mine = theirs;
        return;
    }
    for (key, d) in theirs {
        let e = mine.entry(key).or_default();
        e[0] += d[0];
        e[1] += d[1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Metadata;

    #[test]
    fn gauss_stats_give_moments_and_reverse_exactly() {
        let mut g = GaussStats::default();
        for x in [1.0, 2.5, 2.0] {
            g.add(x, 1);
        }
        let (n, mean, m2) = g.moments();
        assert_eq!(n, 3);
        assert!((mean - 11.0 / 6.0).abs() < 1e-9);
        // Σ(x−mean)² = 7/6 (the worked example's σ² = 7/18 times n).
        assert!((m2 - 7.0 / 6.0).abs() < 1e-6, "{m2}");
        g.add(2.5, -1);
        g.add(2.0, -1);
        g.add(1.0, -1);
        assert_eq!(g, GaussStats::default());
    }

    #[test]
    fn deltas_merge_and_cancel() {
        let f = Features {
            tokens: ["a", "b"].into_iter().collect(),
            grams: vec![7],
            lr_buckets: Vec::new(),
            metadata: Metadata([0.5; METADATA_LEN]),
        };
        let mut d = Delta::default();
        d.add_message(&f, Label::Spam, 1);
        assert_eq!(
            (d.words.len(), d.grams.len()),
            (2, 1),
            "both words and the byte n-gram are counted"
        );
        assert_eq!(d.grams[&7], [0, 1]);
        assert_eq!(d.words["a"], [0, 1]);
        assert_eq!(d.changes().count(), 3);
        let mut undo = Delta::default();
        undo.add_message(&f, Label::Spam, -1);
        d.merge(undo);
        assert!(d.is_empty());
        assert_eq!("SPAM".parse::<Label>(), Ok(Label::Spam));
        assert!("junk".parse::<Label>().is_err());
    }
}
