//! Bernoulli naive Bayes over the token set, with Beta(a, b) pseudo-counts.
//!
//! θ_jc = (N_jc + a) / (N_c + a + b) is the posterior-predictive probability
//! that a message of class c contains token j. A present token contributes
//! ln θ_js − ln θ_jh to the spam-vs-ham log-odds; an absent one
//! ln(1 − θ_js) − ln(1 − θ_jh). How the per-token evidence is combined is
//! [`Combine`]'s business (see the project's docs on why the plain sum is
//! not the default).

use serde::{Deserialize, Serialize};

use super::TokenCounts;

/// A Beta(a, b) prior on each θ_jc; a = b = 1 is Laplace's correction.
/// Checked: build it through [`BetaPrior::new`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BetaPrior {
    a: f64,
    b: f64,
}

impl BetaPrior {
    /// A prior with pseudo-counts `a` (presence) and `b` (absence), both
    /// finite and > 0.
    pub fn new(a: f64, b: f64) -> Result<Self, String> {
        if !(a.is_finite() && a > 0.0 && b.is_finite() && b > 0.0) {
            return Err(format!(
                "Beta pseudo-counts must be finite and > 0 (got a={a}, b={b})"
            ));
        }
        Ok(BetaPrior { a, b })
    }

    /// Pseudo-count of presence.
    pub fn a(self) -> f64 {
        self.a
    }

    /// Pseudo-count of absence.
    pub fn b(self) -> f64 {
        self.b
    }

    /// (ln θ, ln(1 − θ)) for a token in `k` of `n` messages of a class.
    pub fn log_theta(self, k: u32, n: u64) -> (f64, f64) {
        let n = n as f64;
        let k = f64::from(k).min(n);
        let denom = (n + self.a + self.b).ln();
        ((k + self.a).ln() - denom, (n - k + self.b).ln() - denom)
    }

    /// The evidence of one token, spam vs ham: (present, absent) log
    /// likelihood ratios. `n` is `[ham, spam]` messages learned.
    pub fn token_llr(self, c: TokenCounts, n: [u64; 2]) -> (f64, f64) {
        #[cfg(test)]
        LLRS.with(|k| k.set(k.get() + 1));
        let (ps, qs) = self.log_theta(c.spam, n[1]);
        let (ph, qh) = self.log_theta(c.ham, n[0]);
        (ps - ph, qs - qh)
    }
}

/// Counts up to which a [`LogThetas`] keeps its logarithms in a table:
/// the counts most lookups meet. Larger ones are computed each time, so
/// that making a model (once per message in the online protocol) costs at
/// most this many logarithms however large the model.
const LOG_THETA_TABLE: u64 = 1 << 12;

/// ln θ of a present token, per class and count: ln θ = ln(k + a) −
/// ln(n + a + b), the denominator computed once per class, the numerator
/// looked up in a table of ln(k + a) for the counts most features have
/// (scoring needs it for each of a message's thousand-odd known features).
/// Each value is [`BetaPrior::log_theta`]'s own, computed by the same
/// operations, so the evidence is the same bit for bit.
#[derive(Debug, Clone, PartialEq)]
pub struct LogThetas {
    prior: BetaPrior,
    /// Messages `[ham, spam]`.
    n: [u64; 2],
    /// Per class, ln(n + a + b).
    ln_denom: [f64; 2],
    /// ln(k + a) for each count k up to the larger class's messages (or
    /// [`LOG_THETA_TABLE`]).
    ln_counts: Vec<f64>,
}

impl LogThetas {
    /// The logarithms for `prior` and `n` = `[ham, spam]` messages.
    pub fn new(prior: BetaPrior, n: [u64; 2]) -> LogThetas {
        let ln_denom = |n: u64| (n as f64 + prior.a + prior.b).ln();
        let top = n[0].max(n[1]).min(LOG_THETA_TABLE);
        LogThetas {
            prior,
            n,
            ln_denom: [ln_denom(n[0]), ln_denom(n[1])],
            ln_counts: (0..=top).map(|k| (k as f64 + prior.a).ln()).collect(),
        }
    }

    /// ln θ for a token in `k` messages of `class` (0 ham, 1 spam): the
    /// first of [`BetaPrior::log_theta`], by the same operations (a count
    /// above the class's messages counts as all of them).
    fn ln_theta(&self, class: usize, k: u32) -> f64 {
        let k = u64::from(k).min(self.n[class]);
        let ln = match self.ln_counts.get(k as usize) {
            Some(&ln) => ln,
            None => (k as f64 + self.prior.a).ln(),
        };
        ln - self.ln_denom[class]
    }

    /// The present-token LLR of a token: the first of
    /// [`BetaPrior::token_llr`], bit for bit.
    #[inline]
    pub fn present_llr(&self, c: TokenCounts) -> f64 {
        #[cfg(test)]
        LLRS.with(|k| k.set(k.get() + 1));
        self.ln_theta(1, c.spam) - self.ln_theta(0, c.ham)
    }
}

#[cfg(test)]
thread_local! {
    /// Token LLRs computed on this thread: tests bound the scoring work
    /// with it.
    pub(crate) static LLRS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How per-token evidence becomes the text log-odds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Combine {
    /// The textbook model: every token of the vocabulary counts, present
    /// or absent. Needs the absent-token constant of the whole vocabulary.
    Textbook,
    /// Sum of the present tokens' log-likelihood ratios.
    Sum,
    /// Tempered: the sum over present tokens whose |LLR| ≥ `min_strength`,
    /// divided by their number raised to `power` (0 = sum, 1 = mean). The
    /// independence assumption counts hundreds of correlated tokens as
    /// independent witnesses; dividing by n^power discounts that.
    Tempered {
        /// Tokens weaker than this (in nats) are left out.
        min_strength: f64,
        /// Exponent of the token count in the divisor, in [0, 1].
        power: f64,
    },
    /// Robinson's smoothed token probabilities combined by Fisher's
    /// chi-square method (as in SpamBayes and bogofilter): tokens within
    /// `min_dev` of 0.5 are left out; the score is logit((1 + H − S)/2).
    Fisher {
        /// Tokens with |f(w) − 0.5| below this are left out.
        min_dev: f64,
        /// Strength of the background belief `x` in Robinson's f(w).
        s: f64,
        /// Background belief about an unknown token's spamminess.
        x: f64,
    },
}

/// P(Q ≥ chi2) for a chi-square variable with `2n` degrees of freedom.
fn chi2_q(chi2: f64, n: usize) -> f64 {
    let m = chi2 / 2.0;
    let mut term = (-m).exp();
    let mut sum = term;
    for i in 1..n {
        term *= m / i as f64;
        sum += term;
    }
    sum.min(1.0)
}

impl Default for Combine {
    fn default() -> Self {
        Combine::Tempered {
            min_strength: 1.0,
            power: 1.0,
        }
    }
}

/// Text evidence of one message.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TextEvidence {
    /// The combined log-odds contribution of the tokens.
    pub score: f64,
    /// Tokens of the message seen in training.
    pub known: usize,
    /// Tokens that entered the combination.
    pub used: usize,
}

/// Combines the evidence of a message's known tokens. `counts` yields the
/// counts of each token of the message that is in the vocabulary;
/// `absent_constant` is Σ over the vocabulary of the absent-token LLR (only
/// [`Combine::Textbook`] reads it).
pub fn text_evidence(
    prior: BetaPrior,
    combine: Combine,
    n: [u64; 2],
    absent_constant: f64,
    counts: impl IntoIterator<Item = TokenCounts>,
) -> TextEvidence {
    let mut ev = TextEvidence::default();
    match combine {
        Combine::Textbook => {
            ev.score = absent_constant;
            for c in counts {
                let (present, absent) = prior.token_llr(c, n);
                ev.score += present - absent;
                ev.known += 1;
            }
            ev.used = ev.known;
        }
        Combine::Sum => {
            for c in counts {
                ev.score += prior.token_llr(c, n).0;
                ev.known += 1;
            }
            ev.used = ev.known;
        }
        Combine::Fisher { min_dev, s, x } => {
            let (mut ln_f, mut ln_1f, mut used) = (0.0, 0.0, 0usize);
            for c in counts {
                ev.known += 1;
                let rs = f64::from(c.spam) / (n[1].max(1) as f64);
                let rh = f64::from(c.ham) / (n[0].max(1) as f64);
                let p = if rs + rh > 0.0 { rs / (rs + rh) } else { 0.5 };
                let count = f64::from(c.spam) + f64::from(c.ham);
                let f = ((s * x + count * p) / (s + count)).clamp(1e-9, 1.0 - 1e-9);
                if (f - 0.5).abs() >= min_dev {
                    ln_f += f.ln();
                    ln_1f += (1.0 - f).ln();
                    used += 1;
                }
            }
            ev.used = used;
            if used > 0 {
                let h = chi2_q(-2.0 * ln_f, used);
                let sp = chi2_q(-2.0 * ln_1f, used);
                let i = ((1.0 + h - sp) / 2.0).clamp(1e-12, 1.0 - 1e-12);
                ev.score = (i / (1.0 - i)).ln();
            }
        }
        Combine::Tempered {
            min_strength,
            power,
        } => {
            ev = tempered(
                counts.into_iter().map(|c| prior.token_llr(c, n).0),
                min_strength,
                power,
            );
        }
    }
    ev
}

/// The tempered combination ([`Combine::Tempered`]) of a message's known
/// tokens given their present-token LLRs, in order: the one computation
/// [`text_evidence`] makes, for callers that reuse the LLRs across
/// strengths.
pub fn tempered(
    llrs: impl IntoIterator<Item = f64>,
    min_strength: f64,
    power: f64,
) -> TextEvidence {
    let mut t = Tempered::default();
    for llr in llrs {
        t.add(llr, min_strength);
    }
    t.finish(power)
}

/// [`tempered`] one LLR at a time, for a caller that meets the tokens of
/// several views in one pass: the same operations in the same order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tempered {
    sum: f64,
    known: usize,
    used: usize,
}

impl Tempered {
    /// Adds the next token's present-token LLR.
    pub fn add(&mut self, llr: f64, min_strength: f64) {
        self.known += 1;
        if llr.abs() >= min_strength {
            self.sum += llr;
            self.used += 1;
        }
    }

    /// The evidence of the tokens added.
    pub fn finish(self, power: f64) -> TextEvidence {
        let mut ev = TextEvidence {
            known: self.known,
            used: self.used,
            ..TextEvidence::default()
        };
        if ev.used > 0 {
            ev.score = self.sum / (ev.used as f64).powf(power);
        }
        ev
    }
}

/// Σ over the vocabulary of each token's absent-token LLR, for
/// [`Combine::Textbook`].
pub fn absent_constant(
    prior: BetaPrior,
    n: [u64; 2],
    vocabulary: impl IntoIterator<Item = TokenCounts>,
) -> f64 {
    vocabulary
        .into_iter()
        .map(|c| prior.token_llr(c, n).1)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tc(ham: u32, spam: u32) -> TokenCounts {
        TokenCounts { ham, spam }
    }

    #[test]
    fn laplace_theta_by_hand() {
        let p = BetaPrior::new(1.0, 1.0).unwrap();
        // 3 of 8 messages: θ = 4/10.
        let (lt, l1t) = p.log_theta(3, 8);
        assert!((lt - 0.4f64.ln()).abs() < 1e-15);
        assert!((l1t - 0.6f64.ln()).abs() < 1e-15);
        // Spam 3 of 8 (θ=0.4), ham 1 of 18 (θ=0.1): present LLR ln 4,
        // absent ln(0.6/0.9).
        let (present, absent) = p.token_llr(tc(1, 3), [18, 8]);
        assert!((present - 4f64.ln()).abs() < 1e-12);
        assert!((absent - (0.6f64 / 0.9).ln()).abs() < 1e-12);
    }

    /// [`LogThetas`] gives [`BetaPrior::token_llr`]'s present-token LLR
    /// bit for bit: for every count up to the largest total and beyond it,
    /// for counts above the class total, with a prior whose ln θ rounds to
    /// 0, for totals past 2^53 (where a count and the total round apart as
    /// floats), and for counts spread over a larger model.
    #[test]
    fn log_thetas_are_the_plain_computation() {
        let priors = [(0.1, 0.1), (1.0, 1.0), (0.5, 1e-300), (3.0, 0.25)];
        let totals = [
            [0, 0],
            [7, 3],
            [4150, 1896],
            [65_541, 1],
            [(1 << 53) + 1, u64::MAX],
        ];
        for (a, b) in priors {
            let prior = BetaPrior::new(a, b).unwrap();
            for n in totals {
                let thetas = LogThetas::new(prior, n);
                let top = n[0].max(n[1]).min(70_000) as u32;
                let ks = (0..=top + 3).chain([u32::MAX - 1, u32::MAX]);
                for k in ks {
                    for c in [tc(k, 0), tc(0, k), tc(k, k), tc(k / 2, k), tc(1, k)] {
                        let plain = prior.token_llr(c, n).0;
                        let got = thetas.present_llr(c);
                        assert_eq!(got.to_bits(), plain.to_bits(), "{a} {b} {n:?} {c:?}");
                    }
                }
            }
        }
        let prior = BetaPrior::new(0.5, 2.0).unwrap();
        for n in [[30_000, 20_000], [70_000, 600]] {
            let thetas = LogThetas::new(prior, n);
            for i in 0..20_000u32 {
                let x = i.wrapping_mul(2_654_435_761);
                let c = tc(x % 70_001, (x >> 7) % 40_000);
                let plain = prior.token_llr(c, n).0;
                assert_eq!(
                    thetas.present_llr(c).to_bits(),
                    plain.to_bits(),
                    "{n:?} {c:?}"
                );
            }
        }
    }

    #[test]
    fn tempered_one_at_a_time_is_tempered() {
        let llrs = [0.5, -2.0, 3.25, -0.1, 1.0, 7.0];
        for (min_strength, power) in [(0.0, 1.0), (1.0, 0.5), (10.0, 1.0)] {
            let mut t = Tempered::default();
            for l in llrs {
                t.add(l, min_strength);
            }
            let whole = tempered(llrs, min_strength, power);
            assert_eq!(t.finish(power), whole);
        }
    }

    #[test]
    fn rejects_bad_pseudo_counts() {
        for (a, b) in [
            (0.0, 1.0),
            (1.0, -1.0),
            (f64::NAN, 1.0),
            (1.0, f64::INFINITY),
        ] {
            assert!(BetaPrior::new(a, b).is_err());
        }
    }

    #[test]
    fn combinations_by_hand() {
        let p = BetaPrior::new(1.0, 1.0).unwrap();
        let n = [18, 8];
        let toks = [tc(1, 3), tc(17, 0)];
        let w: Vec<(f64, f64)> = toks.iter().map(|&c| p.token_llr(c, n)).collect();
        let sum = text_evidence(p, Combine::Sum, n, 0.0, toks);
        assert!((sum.score - (w[0].0 + w[1].0)).abs() < 1e-12);
        let mean = text_evidence(
            p,
            Combine::Tempered {
                min_strength: 0.0,
                power: 1.0,
            },
            n,
            0.0,
            toks,
        );
        assert!((mean.score - (w[0].0 + w[1].0) / 2.0).abs() < 1e-12);
        // Only the first token is weaker than 2 nats: ln 4 ≈ 1.39.
        let strong = text_evidence(
            p,
            Combine::Tempered {
                min_strength: 2.0,
                power: 1.0,
            },
            n,
            0.0,
            toks,
        );
        assert_eq!((strong.used, strong.known), (1, 2));
        assert!((strong.score - w[1].0).abs() < 1e-12);
        let constant = absent_constant(p, n, toks);
        let book = text_evidence(p, Combine::Textbook, n, constant, toks);
        assert!(
            (book.score - (w[0].0 + w[1].0)).abs() < 1e-12,
            "all present: absent terms cancel"
        );
    }
}
