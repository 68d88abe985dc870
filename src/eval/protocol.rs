//! Evaluation protocols over an in-memory labelled corpus: k-fold
//! cross-validation (train on k−1 folds, score the last, pool the scores)
//! and the TREC online protocol (in order: classify a message, then learn
//! its true label). Tokens are interned once, so training a fold is adding
//! and subtracting integer counts.
//!
//! Calibration is always fitted on scores the scored model did not train
//! on: in cross-validation, on inner cross-validated scores of the outer
//! training folds only; online, on the scores already given to earlier
//! messages (each made before its message was learned).

use std::collections::HashMap;

use rayon::prelude::*;

use super::Scored;
use crate::decision::{Calibrator, Costs, Verdict};
use crate::features::{Features, METADATA_LEN};
use crate::model::{Combine, Evidence, Label, Model, TokenCounts, Totals, ValidParams, bernoulli};

/// One labelled message, its tokens interned.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Interned token ids, sorted.
    pub tokens: Vec<u32>,
    /// The metadata vector.
    pub metadata: [f64; METADATA_LEN],
    /// The true label.
    pub label: Label,
}

/// A labelled corpus with interned tokens.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// The messages, in corpus order.
    pub examples: Vec<Example>,
    /// Number of distinct tokens.
    pub vocabulary: usize,
}

impl Dataset {
    /// Interns the tokens of labelled features.
    pub fn new(items: impl IntoIterator<Item = (Features, Label)>) -> Dataset {
        let mut ids: HashMap<String, u32> = HashMap::new();
        let examples = items
            .into_iter()
            .map(|(f, label)| {
                let mut tokens: Vec<u32> = f
                    .tokens
                    .iter()
                    .map(|t| match ids.get(t) {
                        Some(&id) => id,
                        None => {
                            let next = ids.len() as u32;
                            ids.insert(t.to_owned(), next);
                            next
                        }
                    })
                    .collect();
                tokens.sort_unstable();
                Example {
                    tokens,
                    metadata: f.metadata.0,
                    label,
                }
            })
            .collect();
        Dataset {
            examples,
            vocabulary: ids.len(),
        }
    }
}

/// Candidate `min_strength` values of the tempered combination, chosen
/// among by inner cross-validation on the training data (see
/// [`select_and_calibrate`]).
pub const STRENGTH_GRID: [f64; 5] = [0.5, 1.0, 1.5, 2.0, 2.5];

/// Inner folds for fitting calibration and choosing the strength.
pub const DEFAULT_INNER_FOLDS: usize = 5;
/// Online protocol: messages between refits of the calibration.
pub const DEFAULT_REFIT_EVERY: usize = 250;

/// What an evaluation needs besides the data.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Choose the tempered combination's `min_strength` from
    /// [`STRENGTH_GRID`] by inner cross-validation, instead of using the
    /// configured one.
    pub select_strength: bool,
    /// Model hyperparameters.
    pub params: ValidParams,
    /// Decision costs.
    pub costs: Costs,
    /// Inner folds for fitting calibration in cross-validation.
    pub inner_folds: usize,
    /// Messages with fewer known tokens than this are judged unsure.
    pub min_known: usize,
    /// Online protocol: refit calibration every this many messages.
    pub refit_every: usize,
}

/// Integer statistics over interned tokens.
#[derive(Clone)]
pub struct Counts {
    tokens: Vec<[u32; 2]>,
    totals: Totals,
}

impl Counts {
    /// Empty counts for a vocabulary of this size.
    pub fn new(vocabulary: usize) -> Counts {
        Counts {
            tokens: vec![[0, 0]; vocabulary],
            totals: Totals::default(),
        }
    }

    /// Learns (sign +1) or unlearns (sign −1) one example.
    pub fn add(&mut self, ex: &Example, sign: i64) {
        let c = ex.label.index();
        for &t in &ex.tokens {
            let slot = &mut self.tokens[t as usize][c];
            *slot = if sign > 0 { *slot + 1 } else { *slot - 1 };
        }
        self.totals.messages[c] = (self.totals.messages[c] as i64 + sign) as u64;
        for (g, &x) in self.totals.gauss[c].iter_mut().zip(&ex.metadata) {
            g.add(x, sign);
        }
    }

    fn model(&self, params: ValidParams) -> Model {
        let constant = if params.get().combine == Combine::Textbook {
            let vocab = self
                .tokens
                .iter()
                .filter(|c| c[0] + c[1] > 0)
                .map(|c| TokenCounts {
                    ham: c[0],
                    spam: c[1],
                });
            bernoulli::absent_constant(params.prior(), self.totals.messages, vocab)
        } else {
            0.0
        };
        Model::new(params, &self.totals, constant)
    }

    fn evidence(&self, model: &Model, ex: &Example) -> Evidence {
        let known = ex.tokens.iter().filter_map(|&t| {
            let c = self.tokens[t as usize];
            (c[0] + c[1] > 0).then_some(TokenCounts {
                ham: c[0],
                spam: c[1],
            })
        });
        model.evidence(known, &ex.metadata)
    }
}

/// The inputs of the calibration map for one message's evidence.
pub fn calibration_inputs(ev: &Evidence) -> [f64; 2] {
    [ev.text.score, ev.meta]
}

fn verdict(settings: &Settings, ev: &Evidence, p: f64) -> Verdict {
    if ev.text.known < settings.min_known {
        Verdict::Unsure
    } else {
        settings.costs.decide(p)
    }
}

/// Scores each of `members` with a model trained on `base` minus the
/// member's inner fold: honest scores of the training data.
fn inner_scores(
    data: &Dataset,
    base: &Counts,
    members: &[usize],
    params: ValidParams,
    k: usize,
) -> Vec<([f64; 2], bool)> {
    let k = k.max(2);
    (0..k)
        .into_par_iter()
        .flat_map_iter(|g| {
            let mut counts = base.clone();
            let inner: Vec<usize> = members
                .iter()
                .copied()
                .enumerate()
                .filter(|(pos, _)| pos % k == g)
                .map(|(_, i)| i)
                .collect();
            for &i in &inner {
                counts.add(&data.examples[i], -1);
            }
            let model = counts.model(params);
            inner
                .into_iter()
                .map(|i| {
                    let ex = &data.examples[i];
                    (
                        calibration_inputs(&counts.evidence(&model, ex)),
                        ex.label == Label::Spam,
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Mean log-loss of a calibrator on samples.
fn log_loss(c: &Calibrator, samples: &[([f64; 2], bool)]) -> f64 {
    let eps = 1e-12;
    samples
        .iter()
        .map(|(x, y)| {
            let p = c.probability(*x).clamp(eps, 1.0 - eps);
            if *y { -p.ln() } else { -(1.0 - p).ln() }
        })
        .sum::<f64>()
        / samples.len().max(1) as f64
}

/// Chooses the hyperparameters and fits calibration on training data only.
/// `base` holds the counts of exactly `members`. With
/// `settings.select_strength` and a tempered combination, each value of
/// [`STRENGTH_GRID`] is tried and the one whose calibrated inner
/// cross-validated scores have the lowest log-loss wins.
pub fn select_and_calibrate(
    data: &Dataset,
    base: &Counts,
    members: &[usize],
    settings: &Settings,
) -> (ValidParams, Calibrator) {
    let candidates: Vec<ValidParams> = match settings.params.get().combine {
        Combine::Tempered { power, .. } if settings.select_strength => STRENGTH_GRID
            .iter()
            .filter_map(|&m| {
                let mut p = *settings.params.get();
                p.combine = Combine::Tempered {
                    min_strength: m,
                    power,
                };
                p.check().ok()
            })
            .collect(),
        _ => vec![settings.params],
    };
    candidates
        .into_iter()
        .map(|params| {
            let samples = inner_scores(data, base, members, params, settings.inner_folds);
            let calibrator = Calibrator::fit(&samples);
            (log_loss(&calibrator, &samples), params, calibrator)
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, p, c)| (p, c))
        .unwrap_or((settings.params, Calibrator::default()))
}

/// k-fold cross-validation: `folds[i]` is the fold of example `i`. Returns
/// one [`Scored`] per example, in corpus order.
pub fn cross_validate(data: &Dataset, folds: &[usize], settings: &Settings) -> Vec<Scored> {
    assert_eq!(folds.len(), data.examples.len(), "one fold per example");
    let mut all = Counts::new(data.vocabulary);
    for ex in &data.examples {
        all.add(ex, 1);
    }
    let mut fold_ids: Vec<usize> = folds.to_vec();
    fold_ids.sort_unstable();
    fold_ids.dedup();
    let mut scored: Vec<Scored> = fold_ids
        .par_iter()
        .flat_map_iter(|&f| {
            let mut train = all.clone();
            let (test, rest): (Vec<usize>, Vec<usize>) =
                (0..data.examples.len()).partition(|&i| folds[i] == f);
            for &i in &test {
                train.add(&data.examples[i], -1);
            }
            let (params, calibrator) = select_and_calibrate(data, &train, &rest, settings);
            let model = train.model(params);
            test.into_iter()
                .map(|i| {
                    let ex = &data.examples[i];
                    let ev = train.evidence(&model, ex);
                    let p = calibrator.probability(calibration_inputs(&ev));
                    Scored {
                        index: i,
                        is_spam: ex.label == Label::Spam,
                        log_odds: ev.log_odds(),
                        probability: p,
                        verdict: verdict(settings, &ev, p),
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect();
    scored.sort_by_key(|s| s.index);
    scored
}

/// The TREC online protocol: each message in order is classified by the
/// model of everything before it, then learned with its true label.
/// Calibration is refitted every `refit_every` messages on the scores given
/// so far. The textbook combination needs a pass over the vocabulary per
/// message, so it is rejected here.
pub fn online(data: &Dataset, settings: &Settings) -> Result<Vec<Scored>, String> {
    if settings.params.get().combine == Combine::Textbook {
        return Err("the online protocol does not support the textbook combination".into());
    }
    let mut counts = Counts::new(data.vocabulary);
    let mut calibrator = Calibrator::default();
    let mut history: Vec<([f64; 2], bool)> = Vec::with_capacity(data.examples.len());
    let mut scored = Vec::with_capacity(data.examples.len());
    let refit = settings.refit_every.max(1);
    for (i, ex) in data.examples.iter().enumerate() {
        let model = counts.model(settings.params);
        let ev = counts.evidence(&model, ex);
        let inputs = calibration_inputs(&ev);
        let p = calibrator.probability(inputs);
        let is_spam = ex.label == Label::Spam;
        scored.push(Scored {
            index: i,
            is_spam,
            log_odds: ev.log_odds(),
            probability: p,
            verdict: verdict(settings, &ev, p),
        });
        history.push((inputs, is_spam));
        counts.add(ex, 1);
        if (i + 1) % refit == 0 {
            calibrator = Calibrator::fit(&history);
        }
    }
    Ok(scored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Metadata;

    fn toy() -> Dataset {
        // Spam shares "win"/"cash", ham "meeting"/"notes"; everything shares
        // filler words; the metadata differs a little.
        let mut items = Vec::new();
        for i in 0..200 {
            let spam = i % 3 == 0;
            let mut tokens: Vec<String> =
                (0..6).map(|k| format!("filler{}", (i + k) % 17)).collect();
            if spam {
                tokens.extend(["win".into(), "cash".into(), format!("spamonly{}", i % 5)]);
            } else {
                tokens.extend([
                    "meeting".into(),
                    "notes".into(),
                    format!("hamonly{}", i % 7),
                ]);
            }
            tokens.sort();
            tokens.dedup();
            let m = if spam { 1.0 } else { 0.0 } + (i % 10) as f64 / 10.0;
            items.push((
                Features {
                    tokens: tokens.into_iter().collect(),
                    metadata: Metadata([m; METADATA_LEN]),
                },
                if spam { Label::Spam } else { Label::Ham },
            ));
        }
        Dataset::new(items)
    }

    fn settings() -> Settings {
        Settings {
            select_strength: true,
            params: ValidParams::default(),
            costs: Costs::default(),
            inner_folds: 5,
            min_known: 1,
            refit_every: 50,
        }
    }

    #[test]
    fn cross_validation_separates_an_easy_corpus() {
        let data = toy();
        let folds: Vec<usize> = (0..data.examples.len()).map(|i| i % 5).collect();
        let scored = cross_validate(&data, &folds, &settings());
        assert_eq!(scored.len(), 200);
        assert!(scored.iter().enumerate().all(|(i, s)| s.index == i));
        let report = super::super::Report::new(&scored, &settings().costs, 1.0);
        assert!(report.auc > 0.99, "{report:?}");
        assert!(scored.iter().all(|s| (0.0..=1.0).contains(&s.probability)));
    }

    #[test]
    fn online_scores_before_learning() {
        let data = toy();
        let scored = online(&data, &settings()).unwrap();
        assert_eq!(scored.len(), 200);
        // The very first message is scored by an empty model.
        assert_eq!(scored[0].log_odds, 0.0);
        let late = &scored[100..];
        let pairs: Vec<(f64, bool)> = late.iter().map(|s| (s.probability, s.is_spam)).collect();
        assert!(super::super::auc(&pairs) > 0.99);
    }
}
