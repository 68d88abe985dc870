//! Confusion counts of an evaluation: how many ham and spam messages got
//! each verdict. The rates in [`Report`](super::Report) are these counts
//! divided; the counts themselves say how many messages a rate rests on.

use serde::Serialize;

use super::Scored;
use crate::decision::Verdict;

/// Messages per true label and verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Confusion {
    /// Ham judged ham.
    pub ham_as_ham: usize,
    /// Ham judged unsure.
    pub ham_as_unsure: usize,
    /// Ham judged spam (false positives).
    pub ham_as_spam: usize,
    /// Spam judged ham (false negatives).
    pub spam_as_ham: usize,
    /// Spam judged unsure.
    pub spam_as_unsure: usize,
    /// Spam judged spam.
    pub spam_as_spam: usize,
}

impl Confusion {
    /// Counts the verdicts of `scored` by true label.
    pub fn new(scored: &[Scored]) -> Confusion {
        let mut c = Confusion::default();
        for s in scored {
            let cell = match (s.is_spam, s.verdict) {
                (false, Verdict::Ham) => &mut c.ham_as_ham,
                (false, Verdict::Unsure) => &mut c.ham_as_unsure,
                (false, Verdict::Spam) => &mut c.ham_as_spam,
                (true, Verdict::Ham) => &mut c.spam_as_ham,
                (true, Verdict::Unsure) => &mut c.spam_as_unsure,
                (true, Verdict::Spam) => &mut c.spam_as_spam,
            };
            *cell += 1;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_cell() {
        let s = |is_spam, verdict| Scored {
            index: 0,
            is_spam,
            log_odds: 0.0,
            probability: 0.5,
            verdict,
        };
        let scored = [
            s(false, Verdict::Ham),
            s(false, Verdict::Ham),
            s(false, Verdict::Spam),
            s(true, Verdict::Unsure),
            s(true, Verdict::Spam),
        ];
        assert_eq!(
            Confusion::new(&scored),
            Confusion {
                ham_as_ham: 2,
                ham_as_spam: 1,
                spam_as_unsure: 1,
                spam_as_spam: 1,
                ..Confusion::default()
            }
        );
    }
}
