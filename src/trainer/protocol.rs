//! The training protocol, shared by `Trainer` and evaluation: labelled
//! messages with their features interned ([`Dataset`]), integer counts
//! over them that add and subtract a message at a time ([`Counts`]), and
//! the choice of the combination strength and the fit of the stacker by
//! cross-validation inside the training data ([`select_and_calibrate`]).
//!
//! The stacker is always fitted on scores the scored model did not train
//! on: inner cross-validated scores of the training data.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::decision::Calibrator;
use crate::decision::calibrate::INPUTS;
use crate::features::{Features, METADATA_LEN};
use crate::model::{
    Combine, Label, Model, Params, TokenCounts, Totals, VIEWS, ValidParams, View, bernoulli,
};

/// One labelled message, its features interned.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Interned feature ids (every view), sorted.
    pub tokens: Vec<u32>,
    /// The metadata vector.
    pub metadata: [f64; METADATA_LEN],
    /// The true label.
    pub label: Label,
}

/// A labelled corpus with interned features.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// The messages, in corpus order.
    pub examples: Vec<Example>,
    /// Number of distinct features.
    pub vocabulary: usize,
    /// The view of each feature id.
    pub views: Vec<View>,
}

impl Dataset {
    /// Interns the features of labelled messages.
    pub fn new(items: impl IntoIterator<Item = (Features, Label)>) -> Dataset {
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut views = Vec::new();
        let examples = items
            .into_iter()
            .map(|(f, label)| {
                let mut tokens: Vec<u32> = Vec::with_capacity(f.tokens.len() + f.grams.len());
                f.for_each_feature(|t| {
                    let id = match ids.get(t) {
                        Some(&id) => id,
                        None => {
                            let next = ids.len() as u32;
                            ids.insert(t.to_owned(), next);
                            views.push(View::of(t));
                            next
                        }
                    };
                    tokens.push(id);
                });
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
            views,
        }
    }
}

/// Candidate `min_strength` values of the tempered combination, chosen
/// among by inner cross-validation on the training data (see
/// [`select_and_calibrate`]).
pub const STRENGTH_GRID: [f64; 5] = [0.5, 1.0, 1.5, 2.0, 2.5];

/// Inner folds for fitting calibration and choosing the strength.
pub const DEFAULT_INNER_FOLDS: usize = 5;

/// How the training protocol chooses and fits.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Choose the tempered combination's `min_strength` from
    /// [`STRENGTH_GRID`] by inner cross-validation, instead of using the
    /// configured one.
    pub select_strength: bool,
    /// Model hyperparameters.
    pub params: ValidParams,
    /// Inner folds for fitting the stacker.
    pub inner_folds: usize,
    /// The stacker inputs in use (all, unless measuring views apart).
    pub inputs: Inputs,
}

/// Which of the stacker's inputs (the views, then the metadata) are used.
/// An input left out is fitted as zero, so its weight is zero and it does
/// not count, as if the view were not there: a way to measure views apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs(pub [bool; INPUTS]);

impl Default for Inputs {
    fn default() -> Self {
        Inputs([true; INPUTS])
    }
}

impl Inputs {
    /// The names of the inputs: the views', then `metadata`.
    pub fn names() -> [&'static str; INPUTS] {
        let mut names = ["metadata"; INPUTS];
        for v in View::ALL {
            names[v.index()] = v.name();
        }
        names
    }

    /// Parses a comma-separated list of input names.
    ///
    /// ```
    /// use bayesmail::trainer::protocol::Inputs;
    /// let i = Inputs::parse("header,metadata").unwrap();
    /// assert_eq!(i.0, [true, false, false, true]);
    /// assert!(Inputs::parse("header,nope").is_err());
    /// ```
    pub fn parse(list: &str) -> Result<Inputs, String> {
        let mut on = [false; INPUTS];
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let i = Self::names()
                .iter()
                .position(|n| *n == name)
                .ok_or_else(|| {
                    format!(
                        "unknown view {name:?} (known: {})",
                        Self::names().join(", ")
                    )
                })?;
            on[i] = true;
        }
        if on.iter().any(|&b| b) {
            Ok(Inputs(on))
        } else {
            Err("no view given".into())
        }
    }

    /// `x` with the inputs not in use set to zero.
    pub fn apply(&self, mut x: [f64; INPUTS]) -> [f64; INPUTS] {
        for (v, on) in x.iter_mut().zip(self.0) {
            if !on {
                *v = 0.0;
            }
        }
        x
    }
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

    /// The scoring model of these counts.
    pub fn model(&self, params: ValidParams, data: &Dataset) -> Model {
        let mut constant = [0.0; VIEWS];
        if params.get().combine == Combine::Textbook {
            for view in View::ALL {
                let vocab = self
                    .tokens
                    .iter()
                    .zip(&data.views)
                    .filter(|(c, v)| c[0] + c[1] > 0 && **v == view)
                    .map(|(c, _)| TokenCounts {
                        ham: c[0],
                        spam: c[1],
                    });
                constant[view.index()] =
                    bernoulli::absent_constant(params.prior(), self.totals.messages, vocab);
            }
        }
        Model::new(params, &self.totals, constant)
    }

    /// The counts of `ex`'s features that these counts have seen, each
    /// with its view.
    pub fn known<'a>(
        &'a self,
        ex: &'a Example,
        data: &'a Dataset,
    ) -> impl Iterator<Item = (View, TokenCounts)> + 'a {
        ex.tokens.iter().filter_map(|&t| {
            let c = self.tokens[t as usize];
            (c[0] + c[1] > 0).then_some((
                data.views[t as usize],
                TokenCounts {
                    ham: c[0],
                    spam: c[1],
                },
            ))
        })
    }

    /// The stacker's inputs for `ex` under `model` (built from these counts).
    pub fn stacker_inputs(&self, model: &Model, ex: &Example, data: &Dataset) -> [f64; INPUTS] {
        model
            .evidence(self.known(ex, data), &ex.metadata)
            .stacker_inputs()
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
    inputs: Inputs,
) -> Vec<([f64; INPUTS], bool)> {
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
            let model = counts.model(params, data);
            inner
                .into_iter()
                .map(|i| {
                    let ex = &data.examples[i];
                    (
                        inputs.apply(counts.stacker_inputs(&model, ex, data)),
                        ex.label == Label::Spam,
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Mean log-loss of a calibrator on samples.
fn log_loss(c: &Calibrator, samples: &[([f64; INPUTS], bool)]) -> f64 {
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

/// Candidate strengths of the byte view (`bytes_min_strength`), chosen
/// among after the word strength: its features are many and weak, so its
/// floor lies higher.
pub const BYTES_STRENGTH_GRID: [f64; 3] = [2.0, 3.0, 4.0];

/// Chooses the hyperparameters and fits the stacker on training data only.
/// `base` holds the counts of exactly `members`. With
/// `settings.select_strength` and a tempered combination, each value of
/// [`STRENGTH_GRID`] is tried for the words, then each of
/// [`BYTES_STRENGTH_GRID`] for the byte view with the words' choice kept;
/// each time the one whose fitted inner cross-validated scores have the
/// lowest log-loss wins.
pub fn select_and_calibrate(
    data: &Dataset,
    base: &Counts,
    members: &[usize],
    settings: &Settings,
) -> (ValidParams, Calibrator) {
    let fit = |params: ValidParams| {
        let samples = inner_scores(
            data,
            base,
            members,
            params,
            settings.inner_folds,
            settings.inputs,
        );
        let calibrator = Calibrator::fit(&samples);
        (log_loss(&calibrator, &samples), params, calibrator)
    };
    let best = |candidates: Vec<ValidParams>| {
        candidates
            .into_iter()
            .map(fit)
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, p, c)| (p, c))
            .unwrap_or((settings.params, Calibrator::default()))
    };
    let given = *settings.params.get();
    let Combine::Tempered { power, .. } = given.combine else {
        return best(vec![settings.params]);
    };
    if !settings.select_strength {
        return best(vec![settings.params]);
    }
    let words: Vec<ValidParams> = STRENGTH_GRID
        .iter()
        .filter_map(|&m| {
            Params {
                combine: Combine::Tempered {
                    min_strength: m,
                    power,
                },
                ..given
            }
            .check()
            .ok()
        })
        .collect();
    let (chosen, _) = best(words);
    let bytes: Vec<ValidParams> = BYTES_STRENGTH_GRID
        .iter()
        .filter_map(|&m| {
            Params {
                bytes_min_strength: m,
                ..*chosen.get()
            }
            .check()
            .ok()
        })
        .collect();
    best(bytes)
}
