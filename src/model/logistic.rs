//! The online discriminative view: logistic regression over each
//! message's word tokens (those of the header and the body views), each
//! hashed to one of 2^[`BUCKET_BITS`] weights
//! ([`crate::features::Features::lr_buckets`]), its weights updated by
//! every message learned one at a time, in the order learned, and by a
//! training run once through its calibration sample, in the order of a
//! hash of each message's key ([`crate::fit::step_through`]: a run reads
//! one class and then the other, an order that ruins an online learner).
//! Its score
//! is one more input of the stacker, beside the naive Bayes views and the
//! metadata.
//!
//! What a naive Bayes view cannot do, this one does: a feature's weight
//! depends on the others a message has (correlated words share the
//! evidence instead of each counting it in full), and it learns most from
//! the messages it gets wrong. Over the word tokens it ranks the public
//! corpus's streams better than over the byte 4-grams of each message's
//! first 6,000 bytes, the literature's features, and both together add
//! nothing to the words alone (`docs/experiments.md`, "The online
//! discriminative view over words"). The choices, each measured on the public
//! corpus's streams (`docs/experiments.md`, "The online discriminative
//! view"): a constant rate of [`RATE`], each message's features scaled by
//! 1/√n (n its distinct buckets) so a long message steps no further than a
//! short one, and a thick threshold: a message already on the right side
//! by a margin of [`MARGIN`] changes nothing, so the weights are not pulled
//! towards the easy bulk of the mail.
//!
//! # Weights as counts
//! A weight is kept as two counters of [`QUANTUM`]s, the positive and the
//! negative part, in the slots of a [`TokenCounts`] (`spam` and `ham`), so
//! every store, the journal and the model file keep the weights as they
//! keep counts: integers, changed by a [`Delta`], never below zero. A step
//! adds to one counter; unlearning adds the reverse step to the other.
//!
//! # Unlearning is approximate
//! Unlearning a message applies the reverse of the step its label would
//! make now, at the message's present score, not the step it made when it
//! was learned (nothing records that, and the messages learned after it
//! stepped from weights it had changed). So it takes back nothing of a
//! message the view now judges right by the margin, which after its own
//! step it mostly does, and never takes the message's own score past the
//! margin on the other side ([`reverse_step`]); a message moved to the
//! other label is corrected by the step of its new label. Learning and
//! then unlearning one message moves any other message's score by at most
//! [`learn_unlearn_bound`].

use std::collections::HashMap;

use super::counts::{Delta, Label, TokenCounts};
use super::sigmoid;
use crate::vocab::{BUCKET_BITS, Feature, is_bucket};

/// The learning rate: a message's step moves its own score by up to this
/// (in log-odds) times how wrong it was.
pub const RATE: f64 = 8.0;

/// The thick threshold: a learned message whose score is already on its
/// label's side by at least this (in log-odds) changes no weight.
pub const MARGIN: f64 = 2.0;

/// A weight counter's unit: 2^-12.
pub const QUANTUM: f64 = 1.0 / 4096.0;

/// When both counters of a weight reach this many quanta, a step takes
/// [`REBALANCE_BY`] off both (the weight, their difference, stays), so no
/// counter grows without bound.
pub const REBALANCE: u32 = 1 << 31;

/// What a rebalancing takes off both counters: a quarter of
/// [`REBALANCE`], so that hosts of a fleet rebalancing one weight at once
/// from the same reading (up to four) never take a counter below zero.
pub const REBALANCE_BY: i64 = 1 << 29;

/// A weight, from its two counters.
pub fn weight(counts: TokenCounts) -> f64 {
    (f64::from(counts.spam) - f64::from(counts.ham)) * QUANTUM
}

/// The score of a message with `n` features whose weights are
/// `weights` (the counters of each, absent ones left out): their sum
/// over √n, the log-odds of spam the view gives it.
pub fn score(weights: impl IntoIterator<Item = TokenCounts>, n: usize) -> f64 {
    if n == 0 {
        return 0.0;
    }
    weights.into_iter().map(weight).sum::<f64>() / (n as f64).sqrt()
}

/// The step learning a message of `n` features under `label` makes to each
/// of its weights, in quanta (positive towards spam), given its score
/// before learning: 0 if it is already on its label's side by [`MARGIN`].
pub fn step(score: f64, n: usize, label: Label) -> i64 {
    let y = match label {
        Label::Spam => 1.0,
        Label::Ham => 0.0,
    };
    let sign = 2.0 * y - 1.0;
    if n == 0 || !score.is_finite() || sign * score >= MARGIN {
        return 0;
    }
    let per_weight = RATE * (y - sigmoid(score)) / (n as f64).sqrt();
    (per_weight / QUANTUM).round() as i64
}

/// The step unlearning a message of `n` features that had `label` makes to
/// each of its weights, given its score now: the reverse of the step
/// learning it would make, but never taking the message's own score past
/// the margin on the other label's side. Without that bound an unlearning
/// steps hardest where the view already judges the message against its
/// old label, so messages moved to the other label one after another
/// (a batch moved back out of a spam folder) each push the weights they
/// share a full step further, and the view ends judging what resembles
/// them wrong; with it, like a learning step, it stops where the view is
/// sure.
pub fn reverse_step(score: f64, n: usize, label: Label) -> i64 {
    let back = -step(score, n, label);
    let sign = match label {
        Label::Spam => 1.0,
        Label::Ham => -1.0,
    };
    // How far the message's score may move: to MARGIN on the other side. A
    // step of q quanta on each of its n weights moves it by q·QUANTUM·√n.
    let room = sign * score + MARGIN;
    if back == 0 || room <= 0.0 {
        return 0;
    }
    let most = (room / (QUANTUM * (n as f64).sqrt())).floor() as i64;
    back.signum() * back.abs().min(most)
}

/// The change (`[ham, spam]`, as a [`Delta`] holds it) of a weight whose
/// counters are `now` by a step of `quanta`: added to the positive or the
/// negative counter, and [`REBALANCE_BY`] taken off both when both hold
/// [`REBALANCE`].
pub fn change(now: TokenCounts, quanta: i64) -> [i64; 2] {
    let mut change = if quanta >= 0 {
        [0, quanta]
    } else {
        [-quanta, 0]
    };
    if now.ham.min(now.spam) >= REBALANCE {
        for c in &mut change {
            *c -= REBALANCE_BY;
        }
    }
    change
}

/// Adds a step of `quanta` to every weight of `buckets` in `delta`, whose
/// counters are `now(bucket)` before it.
pub fn add_step(
    delta: &mut Delta,
    buckets: &[u32],
    quanta: i64,
    mut now: impl FnMut(u32) -> TokenCounts,
) {
    if quanta == 0 {
        return;
    }
    for &b in buckets.iter().filter(|&&b| is_bucket(b)) {
        let c = change(now(b), quanta);
        let slot = delta.change(Feature::Weight(b));
        slot[0] += c[0];
        slot[1] += c[1];
    }
}

/// By how much learning and then unlearning one message of `n` features
/// can move the score of another of `m` features that shares `shared` of
/// them: each of the two steps moves a shared weight by at most
/// [`RATE`]/√n (and half a quantum of rounding), which the other's score
/// counts over √m.
pub fn learn_unlearn_bound(n: usize, m: usize, shared: usize) -> f64 {
    if n == 0 || m == 0 {
        return 0.0;
    }
    let per_weight = RATE / (n as f64).sqrt() + QUANTUM / 2.0;
    2.0 * per_weight * shared as f64 / (m as f64).sqrt()
}

/// The weights of one message's buckets, as read before a change
/// (any other bucket's as zero), or none where the view is not learned:
/// what a change of one message steps from where the weights are not all
/// in memory.
#[derive(Debug, Clone, Default)]
pub struct Sparse(Option<HashMap<u32, TokenCounts>>);

impl Sparse {
    /// The weights of `buckets`, whose counters are `counts` (in the same
    /// order; `None`: zero).
    pub fn of(buckets: &[u32], counts: impl IntoIterator<Item = Option<TokenCounts>>) -> Sparse {
        let counts = buckets.iter().zip(counts);
        Sparse(Some(
            counts.map(|(&b, c)| (b, c.unwrap_or_default())).collect(),
        ))
    }

    /// Adds to `delta` the step learning (`sign` 1) or unlearning (−1) a
    /// message of buckets `buckets` under `label` makes, from these
    /// weights, and takes the step here too (a move's second step starts
    /// where its first ended); nothing where the view is not learned.
    pub fn step(&mut self, delta: &mut Delta, buckets: &[u32], label: Label, sign: i64) {
        let Some(weights) = &mut self.0 else {
            return;
        };
        let now = |b: u32| weights.get(&b).copied().unwrap_or_default();
        let z = score(buckets.iter().map(|&b| now(b)), buckets.len());
        let quanta = if sign >= 0 {
            step(z, buckets.len(), label)
        } else {
            reverse_step(z, buckets.len(), label)
        };
        self.add(delta, buckets, quanta);
    }

    /// Adds to `delta` a step of `quanta` to each weight of `buckets`
    /// (one a training run computed, [`crate::fit::step_through`]), from
    /// these weights, and takes it here too; nothing where the view is not
    /// learned.
    pub fn add(&mut self, delta: &mut Delta, buckets: &[u32], quanta: i64) {
        let Some(weights) = &mut self.0 else {
            return;
        };
        add_step(delta, buckets, quanta, |b| {
            weights.get(&b).copied().unwrap_or_default()
        });
        if quanta != 0 {
            for &b in buckets.iter().filter(|&&b| is_bucket(b)) {
                let before = weights.get(&b).copied().unwrap_or_default();
                weights.insert(b, apply(before, change(before, quanta)));
            }
        }
    }
}

/// Every weight in memory, by bucket: what a learn or an evaluation steps
/// through message by message.
#[derive(Debug, Clone)]
pub struct Table {
    counts: Vec<TokenCounts>,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            counts: vec![TokenCounts::default(); 1 << BUCKET_BITS],
        }
    }
}

impl Table {
    /// The counters of `bucket` (zero for a number that is no bucket).
    pub fn get(&self, bucket: u32) -> TokenCounts {
        self.counts
            .get(bucket as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Sets the counters of `bucket` (ignored for a number that is no
    /// bucket).
    pub fn set(&mut self, bucket: u32, counts: TokenCounts) {
        if let Some(slot) = self.counts.get_mut(bucket as usize) {
            *slot = counts;
        }
    }

    /// The score of a message whose buckets are `buckets`.
    pub fn score(&self, buckets: &[u32]) -> f64 {
        score(buckets.iter().map(|&b| self.get(b)), buckets.len())
    }

    /// Learns (`sign` +1) or unlearns (`sign` −1) a message under `label`:
    /// steps its weights here and records the same change in `delta`, if
    /// given. Returns its score before the step.
    pub fn learn(
        &mut self,
        delta: Option<&mut Delta>,
        buckets: &[u32],
        label: Label,
        sign: i64,
    ) -> f64 {
        let z = self.score(buckets);
        let quanta = if sign >= 0 {
            step(z, buckets.len(), label)
        } else {
            reverse_step(z, buckets.len(), label)
        };
        if let Some(delta) = delta {
            add_step(delta, buckets, quanta, |b| self.get(b));
        }
        if quanta != 0 {
            for &b in buckets.iter().filter(|&&b| is_bucket(b)) {
                let before = self.get(b);
                self.set(b, apply(before, change(before, quanta)));
            }
        }
        z
    }
}

/// Counters `now` after a change `c` (`[ham, spam]`), as a store applies
/// it: saturating at the bounds of a count.
fn apply(now: TokenCounts, c: [i64; 2]) -> TokenCounts {
    let add = |n: u32, d: i64| (i64::from(n) + d).clamp(0, i64::from(u32::MAX)) as u32;
    TokenCounts {
        ham: add(now.ham, c[0]),
        spam: add(now.spam, c[1]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(ham: u32, spam: u32) -> TokenCounts {
        TokenCounts { ham, spam }
    }

    #[test]
    fn a_weight_is_the_difference_of_its_counters() {
        assert_eq!(weight(counts(0, 4096)), 1.0);
        assert_eq!(weight(counts(8192, 4096)), -1.0);
        assert_eq!(score([counts(0, 4096); 4], 4), 2.0);
        assert_eq!(score([], 0), 0.0);
    }

    #[test]
    fn a_step_moves_towards_the_label_and_stops_past_the_margin() {
        let n = 100;
        // From zero weights: half wrong, a step of rate/2 over √n.
        let s = step(0.0, n, Label::Spam);
        assert_eq!(s, ((RATE * 0.5 / 10.0) / QUANTUM).round() as i64);
        assert_eq!(step(0.0, n, Label::Ham), -s);
        // Right by less than the margin: a smaller step; by more, none.
        let near = step(1.0, n, Label::Spam);
        assert!(0 < near && near < s, "{near} {s}");
        assert_eq!(step(MARGIN, n, Label::Spam), 0);
        assert_eq!(step(-MARGIN, n, Label::Ham), 0);
        // Wrong by far: the full rate.
        assert!(step(-10.0, n, Label::Spam) > s);
        assert_eq!(step(f64::NAN, n, Label::Spam), 0);
        assert_eq!(step(0.0, 0, Label::Spam), 0);
        // Unlearning: the reverse of learning's step, as far as the
        // margin on the other side and no further.
        assert_eq!(reverse_step(1.0, n, Label::Spam), -near);
        let to_margin = reverse_step(0.0, n, Label::Spam);
        assert!(-s < to_margin && to_margin < 0, "{to_margin}");
        let after = to_margin as f64 * QUANTUM * (n as f64).sqrt();
        assert!((after + MARGIN).abs() <= QUANTUM * 10.0, "{after}");
        assert_eq!(reverse_step(0.0, n, Label::Ham), -to_margin);
        assert_eq!(reverse_step(-MARGIN, n, Label::Spam), 0);
        assert_eq!(reverse_step(-10.0, n, Label::Spam), 0);
        assert_eq!(reverse_step(10.0, n, Label::Ham), 0);
    }

    #[test]
    fn a_step_adds_to_one_counter_and_rebalances_both() {
        assert_eq!(change(counts(0, 0), 7), [0, 7]);
        assert_eq!(change(counts(0, 0), -7), [7, 0]);
        let r = REBALANCE_BY;
        assert_eq!(change(counts(REBALANCE, REBALANCE + 3), 7), [-r, 7 - r]);
        assert_eq!(change(counts(REBALANCE - 1, u32::MAX), 7), [0, 7]);
        let now = counts(REBALANCE + 1, REBALANCE + 3);
        let after = apply(now, change(now, -2));
        assert_eq!(weight(after), weight(now) - 2.0 * QUANTUM);
        assert!(after.ham < REBALANCE && after.spam < REBALANCE);
        // Four rebalancings from one reading (hosts at once) leave the
        // weight as it was and both counters above zero.
        let mut c = now;
        for _ in 0..4 {
            c = apply(c, change(now, 0));
        }
        assert_eq!(weight(c), weight(now));
        assert!(c.ham > 0 && c.spam > 0);
    }

    #[test]
    fn learning_a_message_moves_its_score_to_its_label_and_the_delta_says_how() {
        let mut table = Table::default();
        let mut delta = Delta::default();
        let spam: Vec<u32> = (0..50).collect();
        assert_eq!(table.learn(Some(&mut delta), &spam, Label::Spam, 1), 0.0);
        let z = table.score(&spam);
        assert!(z > 0.0, "{z}");
        // The delta holds what the table did.
        let mut replay = Table::default();
        for (&b, c) in &delta.weights {
            replay.set(b, apply(TokenCounts::default(), *c));
        }
        assert_eq!(replay.score(&spam), z);
        // Learned again and again it stops at the margin.
        for _ in 0..20 {
            table.learn(Some(&mut delta), &spam, Label::Spam, 1);
        }
        let settled = table.score(&spam);
        assert!((MARGIN..MARGIN + RATE).contains(&settled), "{settled}");
        let before = delta.clone();
        table.learn(Some(&mut delta), &spam, Label::Spam, 1);
        assert_eq!(delta, before);
    }

    #[test]
    fn learn_then_unlearn_moves_others_within_the_bound() {
        let mut table = Table::default();
        let mut delta = Delta::default();
        let others: Vec<(Vec<u32>, Label)> = (0..40u32)
            .map(|i| {
                let label = if i % 2 == 0 { Label::Spam } else { Label::Ham };
                ((i * 7..i * 7 + 60).collect(), label)
            })
            .collect();
        for (b, l) in &others {
            table.learn(Some(&mut delta), b, *l, 1);
        }
        let before: Vec<f64> = others.iter().map(|(b, _)| table.score(b)).collect();
        let message: Vec<u32> = (100..180).collect();
        table.learn(Some(&mut delta), &message, Label::Spam, 1);
        table.learn(Some(&mut delta), &message, Label::Spam, -1);
        for ((b, _), z) in others.iter().zip(before) {
            let shared = b.iter().filter(|x| message.contains(x)).count();
            let bound = learn_unlearn_bound(message.len(), b.len(), shared);
            let moved = (table.score(b) - z).abs();
            assert!(moved <= bound, "{moved} > {bound}");
            if shared == 0 {
                assert_eq!(moved, 0.0);
            }
        }
    }

    /// Messages of one class: `k` buckets from a pool shared by both
    /// classes and `k` from the class's own (xorshift, so the same each run).
    fn messages(seed: &mut u64, label: Label, count: usize, k: u32) -> Vec<Vec<u32>> {
        let mut next = |below: u32| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            (*seed % u64::from(below)) as u32
        };
        let own = match label {
            Label::Ham => 10_000,
            Label::Spam => 20_000,
        };
        (0..count)
            .map(|_| {
                let mut m: Vec<u32> = (0..k).map(|_| next(300)).collect();
                m.extend((0..k).map(|_| own + next(3_000)));
                m.sort_unstable();
                m.dedup();
                m
            })
            .collect()
    }

    #[test]
    fn a_batch_moved_to_the_other_label_and_back_leaves_the_others_judged_as_before() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        let mut table = Table::default();
        let ham = messages(&mut seed, Label::Ham, 300, 40);
        let spam = messages(&mut seed, Label::Spam, 300, 40);
        for _ in 0..2 {
            for (h, s) in ham.iter().zip(&spam) {
                table.learn(None, h, Label::Ham, 1);
                table.learn(None, s, Label::Spam, 1);
            }
        }
        let (new_ham, new_spam) = (
            messages(&mut seed, Label::Ham, 100, 40),
            messages(&mut seed, Label::Spam, 100, 40),
        );
        let judged = |t: &Table| {
            let right =
                |ms: &[Vec<u32>], sign: f64| ms.iter().filter(|m| sign * t.score(m) > 0.0).count();
            (right(&new_ham, -1.0), right(&new_spam, 1.0))
        };
        let before = judged(&table);
        assert!(before.0 >= 95 && before.1 >= 95, "{before:?}");
        // 24 ham moved into the spam folder by mistake and back (and 24
        // spam out of it and back): each learned under the other label,
        // then each moved to its own (unlearned, then learned, the second
        // step starting where the first ended).
        for mistake in [Label::Ham, Label::Spam] {
            let other = match mistake {
                Label::Ham => Label::Spam,
                Label::Spam => Label::Ham,
            };
            let batch = messages(&mut seed, mistake, 24, 40);
            let mut t = table.clone();
            for m in &batch {
                t.learn(None, m, other, 1);
            }
            for m in &batch {
                t.learn(None, m, other, -1);
                t.learn(None, m, mistake, 1);
            }
            // As if they had been learned under their label once.
            let mut control = table.clone();
            for m in &batch {
                control.learn(None, m, mistake, 1);
            }
            let (after, want) = (judged(&t), judged(&control));
            for (a, w) in [(after.0, want.0), (after.1, want.1)] {
                assert!(
                    a + 5 >= w,
                    "{mistake:?} moved and back: {after:?}, learned once: {want:?}"
                );
            }
        }
    }
}
