//! The stacker of a database that learns message by message, fitted on the
//! learn stream's own prequential scores: each message, before it is
//! learned, is scored by the model of everything learned before it (the
//! stacker inputs a reader computes for it), and those inputs are kept with
//! the message's label, the most recent [`KEPT`] of them. The stacker is
//! fitted again on what is kept whenever a tenth of it is new since the
//! last fit and it holds enough of each class. So a database built only by
//! `learn` calibrates itself from its first tens of messages on, by a rule
//! that needs nothing but the stream, and `eval --online` measures exactly
//! that rule.
//!
//! A training run starts the record from its own calibration samples
//! (inner cross-validated scores: scores of models that did not see the
//! message, as prequential scores are), so the learns after it refit on
//! the same kind of evidence, and only once a tenth of the record is
//! theirs.
//!
//! Samples are kept under their message's key (the first 8 bytes of its
//! digest): a message moved to the other label moves its sample, and one
//! unlearned takes its sample back, so the record holds what the counts
//! hold.

use std::collections::VecDeque;

use super::Calibrator;
use super::calibrate::{INPUTS, MIN_PER_CLASS};

/// Prequential samples kept: the most recent, so that the stacker follows
/// the scale of today's model's evidence, which grows with the database.
pub const KEPT: usize = 4000;

/// One kept sample: a message's key, the stacker inputs it had before it
/// was learned, and whether it is spam.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The first 8 bytes of the message's digest, little-endian.
    pub key: u64,
    /// Its stacker inputs (each view's evidence, then the metadata's).
    pub inputs: [f64; INPUTS],
    /// Its label.
    pub spam: bool,
}

/// The prequential record of a database and when to refit from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prequential {
    samples: VecDeque<Sample>,
    /// Samples added since the stacker was last fitted.
    since_fit: u32,
    /// Samples the current stacker was fitted on: a record that lost its
    /// samples (its file damaged or gone) waits until it holds half as
    /// many before it refits, rather than replace a stacker fitted on many
    /// messages by one fitted on a handful.
    fitted_on: u32,
}

impl Prequential {
    /// A record as stored.
    pub fn from_parts(samples: Vec<Sample>, since_fit: u32, fitted_on: u32) -> Prequential {
        let from = samples.len().saturating_sub(KEPT);
        Prequential {
            samples: samples.into_iter().skip(from).collect(),
            since_fit,
            fitted_on,
        }
    }

    /// A record that starts from a training run's calibration samples (the
    /// last [`KEPT`] are kept), whose stacker was fitted on all of them.
    pub fn after_training(samples: Vec<Sample>) -> Prequential {
        let fitted_on = u32::try_from(samples.len()).unwrap_or(u32::MAX);
        Prequential::from_parts(samples, 0, fitted_on)
    }

    /// An empty record for a database whose stacker was fitted on
    /// `fitted_on` messages (0: not fitted), its samples lost.
    pub fn without_samples(fitted_on: u32) -> Prequential {
        Prequential::from_parts(Vec::new(), 0, fitted_on)
    }

    /// Records the prequential sample of one message learned; returns the
    /// stacker fitted again, and the samples it was fitted on, when it is
    /// time: a tenth of what is kept is new since the last fit, the record
    /// holds at least half of what the current stacker was fitted on, and
    /// at least [`MIN_PER_CLASS`] of each class. A stream of one class (a
    /// user who only ever moves spam into Junk) so keeps the stacker it
    /// has rather than fit one to the class mix alone.
    pub fn observe(&mut self, sample: Sample) -> Option<(Calibrator, usize)> {
        if self.samples.len() == KEPT {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        self.since_fit = self.since_fit.saturating_add(1);
        let kept = self.samples.len();
        let spam = self.samples.iter().filter(|s| s.spam).count();
        if (self.since_fit as usize) * 10 < kept
            || kept < (self.fitted_on as usize).min(KEPT) / 2
            || spam.min(kept - spam) < MIN_PER_CLASS
        {
            return None;
        }
        self.since_fit = 0;
        self.fitted_on = kept as u32;
        Some((self.fit(), kept))
    }

    /// The message `key` moved to the other label: its sample moves too.
    pub fn relabel(&mut self, key: u64, spam: bool) {
        for s in self.samples.iter_mut().filter(|s| s.key == key) {
            s.spam = spam;
        }
    }

    /// The message `key` was unlearned: its sample goes.
    pub fn forget(&mut self, key: u64) {
        self.samples.retain(|s| s.key != key);
    }

    /// The stacker fitted on the samples kept.
    pub fn fit(&self) -> Calibrator {
        let samples: Vec<([f64; INPUTS], bool)> =
            self.samples.iter().map(|s| (s.inputs, s.spam)).collect();
        Calibrator::fit(&samples)
    }

    /// The stacker fitted on the samples kept, and how many, if they hold
    /// at least [`MIN_PER_CLASS`] of each class: for a model rebuilt
    /// without the stacker it had.
    pub fn fit_if_enough(&self) -> Option<(Calibrator, usize)> {
        let kept = self.samples.len();
        let spam = self.samples.iter().filter(|s| s.spam).count();
        (spam.min(kept - spam) >= MIN_PER_CLASS).then(|| (self.fit(), kept))
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> impl ExactSizeIterator<Item = &Sample> {
        self.samples.iter()
    }

    /// Samples added since the last fit.
    pub fn since_fit(&self) -> u32 {
        self.since_fit
    }

    /// Samples the current stacker was fitted on, as this record knows.
    pub fn fitted_on(&self) -> u32 {
        self.fitted_on
    }
}

/// The key a sample is kept under: the first 8 bytes of the message's
/// digest.
pub fn key_of(digest: &[u8; 32]) -> u64 {
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: usize) -> Sample {
        let spam = i.is_multiple_of(3);
        let x = if spam { 2.0 } else { -2.0 } + (i % 7) as f64 / 7.0 - 0.5;
        let mut inputs = [0.0; INPUTS];
        inputs[0] = x;
        inputs[1] = x / 2.0;
        inputs[INPUTS - 1] = 0.1;
        Sample {
            key: i as u64,
            inputs,
            spam,
        }
    }

    #[test]
    fn it_refits_when_a_tenth_is_new_and_keeps_the_most_recent() {
        let mut p = Prequential::default();
        let fits: Vec<usize> = (0..300)
            .filter(|&i| p.observe(sample(i)).is_some())
            .map(|i| i + 1)
            .collect();
        // Not before twenty of each class (the 20th spam is the 58th
        // message), then each time a tenth of what is kept is new.
        assert_eq!(fits[0], 58, "{fits:?}");
        assert!(
            fits.windows(2).all(|w| (w[1] - w[0]) * 10 >= w[0]),
            "{fits:?}"
        );
        assert!(fits.len() > 10, "{fits:?}");
        let mut full = Prequential::after_training((0..KEPT + 5).map(sample).collect());
        assert_eq!(full.samples().len(), KEPT);
        assert_eq!(full.samples().next(), Some(&sample(5)));
        // After training, a learn refits only once a tenth is new.
        let refits = (0..KEPT / 10)
            .filter(|&i| full.observe(sample(KEPT + 5 + i)).is_some())
            .count();
        assert_eq!(refits, 1);
        assert_eq!(full.samples().len(), KEPT);
        full.forget(sample(KEPT + 5).key);
        assert_eq!(full.samples().len(), KEPT - 1);
        full.relabel(sample(KEPT + 6).key, true);
        assert!(
            full.samples()
                .any(|s| s.key == sample(KEPT + 6).key && s.spam)
        );
    }

    #[test]
    fn a_stream_of_one_class_keeps_the_stacker_it_has() {
        // A balanced start (a training run), then only spam: once the ham
        // has aged out of the record, no refit replaces the stacker.
        let mut p = Prequential::after_training((0..2000).map(sample).collect());
        let mut last = None;
        for i in 0..(2 * KEPT) {
            let mut s = sample(3 * (2000 + i));
            s.key = (10_000 + i) as u64;
            if let Some(fit) = p.observe(s) {
                last = Some(fit);
            }
        }
        assert!(p.samples().all(|s| s.spam));
        // Refits happened while ham was still kept, none after.
        let (c, n) = last.expect("refitted while both classes were kept");
        assert!(n <= KEPT);
        assert_ne!(c, Calibrator::default());
    }

    #[test]
    fn a_record_that_lost_its_samples_waits_for_half_of_what_was_fitted() {
        let mut p = Prequential::without_samples(1000);
        let first = (0..1000)
            .position(|i| p.observe(sample(i)).is_some())
            .unwrap();
        assert_eq!(first + 1, 500);
    }

    #[test]
    fn the_fit_separates_what_the_samples_separate() {
        let mut p = Prequential::default();
        let mut last = None;
        for i in 0..200 {
            last = p.observe(sample(i)).or(last);
        }
        let (c, n) = last.expect("fitted");
        assert!(n > 150);
        let at = |x: f64| {
            let mut inputs = [0.0; INPUTS];
            inputs[0] = x;
            inputs[1] = x / 2.0;
            inputs[INPUTS - 1] = 0.1;
            c.probability(inputs)
        };
        assert!(at(2.5) > 0.9);
        assert!(at(-2.5) < 0.1);
    }
}
