//! The training protocol, shared by `Trainer` and evaluation: labelled
//! messages with their features interned ([`Dataset`]), integer counts
//! over them that add and subtract a message at a time ([`Counts`]), and
//! the choice of the pseudo-counts and the combination strengths and the
//! fit of the stacker by cross-validation inside the training data
//! ([`select_and_calibrate`]).
//!
//! The stacker is always fitted on scores the scored model did not train
//! on: inner cross-validated scores of the training data.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::decision::Calibrator;
use crate::decision::calibrate::{INPUTS, LOGISTIC};
use crate::features::Features;
use crate::model::{
    Combine, Delta, Label, Model, ModelSet, Params, TokenCounts, Totals, ValidParams, bernoulli,
    logistic,
};
use crate::vocab::METADATA_LEN;
use crate::vocab::{Feature, VIEWS, View, word_view};

/// One labelled message, its features interned.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Interned feature ids (every view), sorted.
    pub tokens: Vec<u32>,
    /// The metadata vector.
    pub metadata: [f64; METADATA_LEN],
    /// The true label.
    pub label: Label,
    /// The buckets of the online discriminative view
    /// ([`Features::lr_buckets`]), sorted; empty where the model does not
    /// weigh that view.
    pub lr_buckets: Vec<u32>,
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
        let mut words: HashMap<String, u32> = HashMap::new();
        let mut grams: HashMap<u32, u32> = HashMap::new();
        let mut views = Vec::new();
        let examples = items
            .into_iter()
            .map(|(f, label)| {
                let mut tokens: Vec<u32> = Vec::with_capacity(f.tokens.len() + f.grams.len());
                f.for_each_feature(|feature| {
                    let next = views.len() as u32;
                    let (id, view) = match feature {
                        Feature::Word(word) => match words.get(word) {
                            Some(&id) => (id, word_view(word)),
                            None => (
                                *words.entry(word.to_owned()).or_insert(next),
                                word_view(word),
                            ),
                        },
                        Feature::Gram(bucket) => {
                            (*grams.entry(bucket).or_insert(next), View::Bytes)
                        }
                        // Not a feature of naive Bayes: never given here.
                        Feature::Weight(_) => return,
                    };
                    if id == next {
                        views.push(view);
                    }
                    tokens.push(id);
                });
                tokens.sort_unstable();
                Example {
                    tokens,
                    metadata: f.metadata.0,
                    label,
                    lr_buckets: f.lr_buckets,
                }
            })
            .collect();
        Dataset {
            examples,
            vocabulary: views.len(),
            views,
        }
    }
}

/// Candidate `min_strength` values of the tempered combination, chosen
/// among by inner cross-validation on the training data (see
/// [`select_and_calibrate`]).
pub const STRENGTH_GRID: [f64; 5] = [0.5, 1.0, 1.5, 2.0, 2.5];

/// Candidate Beta pseudo-counts (a = b), chosen among by inner
/// cross-validation before the strengths: how far a word seen a few times
/// is trusted depends on how much mail there is and how alike it is, which
/// the user's own data says better than one constant.
pub const PRIOR_GRID: [f64; 4] = [0.02, 0.05, 0.1, 0.2];

/// Inner folds for fitting calibration and choosing the strength.
pub const DEFAULT_INNER_FOLDS: usize = 5;

/// Which hyperparameters training chooses by inner cross-validation: those
/// the user did not pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Select {
    /// The pseudo-counts, from [`PRIOR_GRID`].
    pub prior: bool,
    /// The tempered combination's strengths, from [`STRENGTH_GRID`] and
    /// [`BYTES_STRENGTH_GRID`].
    pub strength: bool,
}

impl Select {
    /// Everything chosen: nothing pinned.
    pub const ALL: Select = Select {
        prior: true,
        strength: true,
    };
    /// Nothing chosen: the configured values kept.
    pub const NONE: Select = Select {
        prior: false,
        strength: false,
    };
}

/// How the training protocol chooses and fits.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// What is chosen by inner cross-validation instead of taken as
    /// configured.
    pub select: Select,
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
    /// The names of the inputs: the views', then `metadata`, then
    /// `logistic` (the online discriminative view).
    pub fn names() -> [&'static str; INPUTS] {
        let mut names = ["metadata"; INPUTS];
        for v in View::ALL {
            names[v.index()] = v.name();
        }
        names[LOGISTIC] = "logistic";
        names
    }

    /// Parses a comma-separated list of input names.
    ///
    /// ```
    /// use bayesmail::fit::Inputs;
    /// let i = Inputs::parse("header,metadata").unwrap();
    /// assert_eq!(i.0, [true, false, false, true, false]);
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

    /// Makes room for a vocabulary of `vocabulary` features (new ones at
    /// zero).
    pub fn grow(&mut self, vocabulary: usize) {
        if self.tokens.len() < vocabulary {
            self.tokens.resize(vocabulary, [0, 0]);
        }
    }

    /// Messages counted per class, `[ham, spam]`.
    pub fn messages(&self) -> [u64; 2] {
        self.totals.messages
    }

    /// Size of the vocabulary counted.
    pub fn vocabulary(&self) -> usize {
        self.tokens.len()
    }

    /// The counts of feature `id`, `[ham, spam]`.
    pub fn of(&self, id: u32) -> [u32; 2] {
        self.tokens[id as usize]
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
}

/// Stacker inputs of one sample, and whether it is spam.
type Scored = ([f64; INPUTS], bool);

/// Scores each of `members` with models trained on `base` minus the
/// member's inner fold, one model for each of `candidates`: honest scores
/// of the training data, for each candidate in order, members in the same
/// order for each. The candidates share each fold's counts and what they
/// score alike ([`ModelSet`]), so that trying several strengths costs
/// little more than trying one.
fn inner_scores(
    data: &Dataset,
    base: &Counts,
    members: &[usize],
    candidates: &[ValidParams],
    k: usize,
    inputs: Inputs,
    stepped: &HashMap<usize, f64>,
) -> (Vec<usize>, Vec<Vec<Scored>>) {
    let k = k.max(2);
    let rows: Vec<(usize, Vec<[f64; INPUTS]>, bool)> = (0..k)
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
            let models = ModelSet::new(candidates.iter().map(|&p| counts.model(p, data)).collect());
            inner
                .into_iter()
                .map(|i| {
                    let ex = &data.examples[i];
                    let each = models
                        .evidence(counts.known(ex, data), &ex.metadata)
                        .iter()
                        .map(|ev| {
                            let mut x = ev.stacker_inputs();
                            x[LOGISTIC] = stepped.get(&i).copied().unwrap_or(0.0);
                            inputs.apply(x)
                        })
                        .collect();
                    (i, each, ex.label == Label::Spam)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let order = rows.iter().map(|(i, _, _)| *i).collect();
    let scores = (0..candidates.len())
        .map(|c| {
            rows.iter()
                .map(|(_, each, spam)| (each[c], *spam))
                .collect()
        })
        .collect();
    (order, scores)
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

/// Messages of each class the stacker is fitted on, at most. Fitting on
/// a bounded sample keeps the cost of calibrating (and the memory of a
/// training run, which keeps only the sample's features) independent of
/// how many messages are learned; a few thousand per class pin down a
/// handful of weights.
pub const SAMPLE_PER_CLASS: usize = 4000;

/// A bounded, stratified sample: of the items offered, the
/// `per_class` of each class with the smallest keys. With keys that are
/// hashes (of a message's digest, or its position), the sample is a
/// uniform draw that does not depend on the order items arrive in.
#[derive(Debug)]
pub struct Sample<T> {
    per_class: usize,
    kept: [std::collections::BinaryHeap<Keyed<T>>; 2],
    offered: [usize; 2],
}

/// An item ordered by its key alone.
#[derive(Debug)]
struct Keyed<T>(u64, usize, T);

impl<T> PartialEq for Keyed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<T> Eq for Keyed<T> {}
impl<T> PartialOrd for Keyed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Keyed<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

impl<T> Sample<T> {
    /// An empty sample keeping at most `per_class` items of each class.
    pub fn new(per_class: usize) -> Sample<T> {
        Sample {
            per_class,
            kept: Default::default(),
            offered: [0, 0],
        }
    }

    /// Offers an item of class `label` with key `key`.
    pub fn offer(&mut self, key: u64, label: Label, item: T) {
        let c = label.index();
        let n = self.offered[0] + self.offered[1];
        self.offered[c] += 1;
        let heap = &mut self.kept[c];
        if heap.len() < self.per_class {
            heap.push(Keyed(key, n, item));
        } else if heap.peek().is_some_and(|top| key < top.0) {
            heap.pop();
            heap.push(Keyed(key, n, item));
        }
    }

    /// Changes each kept item in place (its key and class stay).
    pub(crate) fn for_each_kept(&mut self, mut f: impl FnMut(&mut T)) {
        for heap in &mut self.kept {
            let mut items = std::mem::take(heap).into_vec();
            for Keyed(_, _, item) in &mut items {
                f(item);
            }
            *heap = items.into();
        }
    }

    /// How many items of each class were offered, `[ham, spam]`.
    pub(crate) fn offered(&self) -> [usize; 2] {
        self.offered
    }

    /// The kept items, each class in the order it was offered and the two
    /// interleaved in proportion: inner folds taken by position are then
    /// stratified (each holds its share of both classes).
    pub(crate) fn into_items(self) -> Vec<(Label, T)> {
        let in_order = |heap: std::collections::BinaryHeap<Keyed<T>>| {
            let mut items: Vec<(usize, T)> = heap
                .into_iter()
                .map(|Keyed(_, n, item)| (n, item))
                .collect();
            items.sort_by_key(|(n, _)| *n);
            items.into_iter().map(|(_, item)| item)
        };
        let [ham, spam] = self.kept;
        let (n_ham, n_spam) = (ham.len(), spam.len());
        let (mut ham, mut spam) = (in_order(ham), in_order(spam));
        let mut out = Vec::with_capacity(n_ham + n_spam);
        let (mut taken_ham, mut taken_spam) = (0usize, 0usize);
        while taken_ham < n_ham || taken_spam < n_spam {
            // Ham while its share taken so far is behind spam's:
            // taken_ham / n_ham <= taken_spam / n_spam, in integers.
            let ham_next = taken_spam == n_spam
                || (taken_ham < n_ham && taken_ham * n_spam <= taken_spam * n_ham);
            if ham_next {
                out.extend(ham.next().map(|item| (Label::Ham, item)));
                taken_ham += 1;
            } else {
                out.extend(spam.next().map(|item| (Label::Spam, item)));
                taken_spam += 1;
            }
        }
        out
    }
}

/// A well-mixed 64-bit key of a number (splitmix64's finaliser).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `members` if no class has more than [`SAMPLE_PER_CLASS`] of them, else a
/// [`Sample`] of them keyed by position in the corpus; in corpus order.
pub(crate) fn bounded(data: &Dataset, members: &[usize]) -> Vec<usize> {
    let mut sample = Sample::new(SAMPLE_PER_CLASS);
    for &i in members {
        sample.offer(mix(i as u64), data.examples[i].label, i);
    }
    if sample.offered().iter().all(|&n| n <= SAMPLE_PER_CLASS) {
        return members.to_vec();
    }
    let mut kept: Vec<usize> = sample.into_items().into_iter().map(|(_, i)| i).collect();
    kept.sort_unstable();
    kept
}

/// Chooses the hyperparameters and fits the stacker on training data only.
/// `base` holds the counts of the training data, which includes every
/// message of `members`; the fit uses [`SAMPLE_PER_CLASS`] of each class of
/// `members` at most (a [`Sample`]), scored by models of `base` without
/// their own inner fold. With `settings.select.prior`, each value of
/// [`PRIOR_GRID`] is tried as the pseudo-counts; then, with
/// `settings.select.strength` and a tempered combination, each value of
/// [`STRENGTH_GRID`] for the words, then each of [`BYTES_STRENGTH_GRID`]
/// for the byte view, every earlier choice kept; each time the one whose
/// fitted inner cross-validated scores have the lowest log-loss wins.
/// The online discriminative view's input is 0 in every sample, and the
/// stacker's weight for it 0 (see [`select_and_calibrate_with_samples`]).
pub fn select_and_calibrate(
    data: &Dataset,
    base: &Counts,
    members: &[usize],
    settings: &Settings,
) -> (ValidParams, Calibrator) {
    let (params, calibrator, _) =
        select_and_calibrate_with_samples(data, base, members, settings, &HashMap::new());
    (params, calibrator)
}

/// What a training run's pass of the online discriminative view gives
/// ([`step_through`]), by example index.
#[derive(Debug, Clone, Default)]
pub struct Stepped {
    /// Each member's score before its own step, from weights that start at
    /// zero and learn the run's members only: the view's input for the
    /// stacker's fit, scored, as the other inputs are, by a model of the
    /// run's own messages that had not learned the message scored.
    pub inputs: HashMap<usize, f64>,
    /// The step (in quanta, [`logistic::step`]) each member the store
    /// learns makes to the store's weights.
    pub steps: HashMap<usize, i64>,
}

/// Steps the online discriminative view once through `members`, in the
/// order of a hash of their keys (`keys`, by index: each message's own,
/// so the classes come mixed whatever order they were read in, and
/// however each class was sampled). A training run reads one class and
/// then the other, and an online learner stepped in that order is ruined
/// (`docs/experiments.md`, "The online discriminative view, built").
/// `weights` (the store's) are stepped by the members whose `learned` is
/// true (a message the store holds already under its label is not learned
/// again, so training again changes nothing), the change recorded in
/// `delta` if given; the inputs come from weights of the members alone
/// (see [`Stepped`]).
pub fn step_through(
    data: &Dataset,
    members: &[usize],
    keys: &[u64],
    learned: &[bool],
    weights: &mut logistic::Table,
    mut delta: Option<&mut Delta>,
) -> Stepped {
    let mut own = logistic::Table::default();
    let mut out = Stepped::default();
    for i in step_order(members, keys) {
        let ex = &data.examples[i];
        let z = own.learn(None, &ex.lr_buckets, ex.label, 1);
        out.inputs.insert(i, z);
        if learned[i] {
            let now = weights.learn(delta.as_deref_mut(), &ex.lr_buckets, ex.label, 1);
            let quanta = logistic::step(now, ex.lr_buckets.len(), ex.label);
            out.steps.insert(i, quanta);
        }
    }
    out
}

/// The order [`step_through`] steps `members` in: by a hash of each one's
/// key.
fn step_order(members: &[usize], keys: &[u64]) -> Vec<usize> {
    let mut order = members.to_vec();
    order.sort_by_key(|&i| (mix(keys[i]), i));
    order
}

/// [`select_and_calibrate`], and the samples the stacker was fitted on:
/// each with the index of its example. `stepped` holds the online
/// discriminative view's input of each member that has one
/// ([`Stepped::inputs`]); any other is 0.
pub fn select_and_calibrate_with_samples(
    data: &Dataset,
    base: &Counts,
    members: &[usize],
    settings: &Settings,
    stepped: &HashMap<usize, f64>,
) -> (ValidParams, Calibrator, Vec<(usize, Scored)>) {
    let members = &bounded(data, members)[..];
    let mut order = Vec::new();
    let mut score = |candidates: &[ValidParams]| {
        let (o, scores) = inner_scores(
            data,
            base,
            members,
            candidates,
            settings.inner_folds,
            settings.inputs,
            stepped,
        );
        order = o;
        scores
    };
    // The candidate whose fitted stacker has the lowest log-loss on its
    // own scores, among `candidates` scored as `scores`, and those scores.
    let best = |candidates: &[ValidParams], scores: &[Vec<Scored>]| {
        candidates
            .iter()
            .zip(scores)
            .map(|(&params, samples)| {
                let calibrator = Calibrator::fit(samples);
                (log_loss(&calibrator, samples), params, calibrator, samples)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, p, c, samples)| (p, c, samples.clone()))
            .unwrap_or((settings.params, Calibrator::default(), Vec::new()))
    };
    let (params, calibrator, samples) = choose(settings, &mut score, &best);
    let samples = order.into_iter().zip(samples).collect();
    (params, calibrator, samples)
}

/// A candidate chosen: its parameters, its fitted stacker and the scores
/// it was fitted on.
type Choice = (ValidParams, Calibrator, Vec<Scored>);

/// Picks the best of candidates scored alike (see [`choose`]).
type Best<'a> = &'a dyn Fn(&[ValidParams], &[Vec<Scored>]) -> Choice;

/// The search of [`select_and_calibrate`]: the pseudo-counts first (at
/// the configured strengths), then the strengths with them. `score`
/// scores candidates, `best` picks among scored ones.
fn choose(
    settings: &Settings,
    score: &mut dyn FnMut(&[ValidParams]) -> Vec<Vec<Scored>>,
    best: Best<'_>,
) -> Choice {
    // What is chosen is the database's from here on, whatever its size.
    let settled = Params {
        grows: false,
        ..*settings.params.get()
    }
    .check()
    .unwrap_or(settings.params);
    let mut chosen = settled;
    let mut scored = None;
    if settings.select.prior {
        // The configured values first: a tie keeps them.
        let given = *settled.get();
        let mut priors = vec![settled];
        priors.extend(
            PRIOR_GRID
                .iter()
                .filter(|&&v| (v, v) != (given.a, given.b))
                .filter_map(|&v| {
                    Params {
                        a: v,
                        b: v,
                        ..given
                    }
                    .check()
                    .ok()
                }),
        );
        let choice = best(&priors, &score(&priors));
        chosen = choice.0;
        scored = Some(choice);
    }
    let given = *chosen.get();
    let tempered = match given.combine {
        Combine::Tempered { power, .. } if settings.select.strength => Some(power),
        _ => None,
    };
    let Some(power) = tempered else {
        return match scored {
            Some(choice) => choice,
            None => best(&[chosen], &score(&[chosen])),
        };
    };
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
    let bytes = |chosen: &ValidParams| -> Vec<ValidParams> {
        BYTES_STRENGTH_GRID
            .iter()
            .filter_map(|&m| {
                Params {
                    bytes_min_strength: m,
                    ..*chosen.get()
                }
                .check()
                .ok()
            })
            .collect()
    };
    // The byte strengths of every word strength are scored in the same
    // pass as the word strengths: the second choice needs no second pass.
    let mut all = words.clone();
    let mut after = Vec::with_capacity(words.len());
    for w in &words {
        after.push(all.len());
        all.extend(bytes(w));
    }
    let scores = score(&all);
    let (chosen, _, _) = best(&words, &scores[..words.len()]);
    match words.iter().position(|w| *w == chosen) {
        Some(c) => {
            let range = after[c]..after[c] + bytes(&chosen).len();
            best(&all[range.clone()], &scores[range])
        }
        None => {
            let candidates = bytes(&chosen);
            best(&candidates, &score(&candidates))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_is_stepped_with_the_classes_mixed_however_they_were_sampled() {
        // A sample keeps each class's smallest keys: here every ham's key
        // is below every spam's, as when a large class is sampled thinly.
        let keys: Vec<u64> = (0..400u64)
            .map(|i| if i < 200 { i } else { 1_000_000 + i })
            .collect();
        let members: Vec<usize> = (0..400).collect();
        let order = step_order(&members, &keys);
        assert_eq!(order.len(), 400);
        let ham = |i: usize| i < 200;
        let longest = order
            .chunk_by(|&a, &b| ham(a) == ham(b))
            .map(<[usize]>::len)
            .max()
            .unwrap();
        assert!(longest <= 16, "{longest} of one class in a row");
        // In each half of the order, each class has about its share.
        let first_ham = order[..200].iter().filter(|&&i| ham(i)).count();
        assert!((70..=130).contains(&first_ham), "{first_ham}");
    }

    #[test]
    fn a_sample_keeps_the_smallest_keys_of_each_class_whatever_the_order() {
        let items: Vec<(u64, Label)> = (0..100u64)
            .map(|i| (mix(i), if i % 3 == 0 { Label::Spam } else { Label::Ham }))
            .collect();
        let kept = |order: &mut dyn Iterator<Item = &(u64, Label)>| {
            let mut sample = Sample::new(10);
            for &(key, label) in order {
                sample.offer(key, label, key);
            }
            assert_eq!(sample.offered(), [66, 34]);
            let mut keys: Vec<(Label, u64)> = sample.into_items();
            keys.sort();
            keys
        };
        let forward = kept(&mut items.iter());
        assert_eq!(forward, kept(&mut items.iter().rev()));
        for label in [Label::Ham, Label::Spam] {
            let mut all: Vec<u64> = items
                .iter()
                .filter(|(_, l)| *l == label)
                .map(|(k, _)| *k)
                .collect();
            all.sort();
            let got: Vec<u64> = forward
                .iter()
                .filter(|(l, _)| *l == label)
                .map(|(_, k)| *k)
                .collect();
            assert_eq!(got, all[..10]);
        }
    }

    /// Choosing the strengths scores each sampled message's tokens once,
    /// not once for each of the eight candidates (five word strengths, then
    /// three byte strengths); choosing the pseudo-counts before them once
    /// more for each candidate (each has its own LLRs).
    #[test]
    fn choosing_the_strengths_computes_each_token_llr_once() {
        let mut extractor = crate::features::Extractor::new();
        let items = (0..60).map(|i| {
            let (text, label) = if i % 2 == 0 {
                (format!("cheap pills offer now {i}"), Label::Spam)
            } else {
                (format!("meeting notes agenda friday {i}"), Label::Ham)
            };
            let raw = format!(
                "Subject: {text}\nFrom: x{}@example.com\n\n{text} body\n",
                i % 7
            );
            (extractor.extract(raw.as_bytes()).unwrap(), label)
        });
        let data = Dataset::new(items);
        let mut counts = Counts::new(data.vocabulary);
        for ex in &data.examples {
            counts.add(ex, 1);
        }
        let members: Vec<usize> = (0..data.examples.len()).collect();
        // One worker thread, so that the count of this thread is all of it.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let computed = |select: Select| {
            let settings = Settings {
                select,
                params: ValidParams::default(),
                inner_folds: 5,
                inputs: Inputs::default(),
            };
            pool.install(|| {
                crate::model::bernoulli::LLRS.with(|k| k.set(0));
                select_and_calibrate(&data, &counts, &members, &settings);
                crate::model::bernoulli::LLRS.with(|k| k.get())
            })
        };
        let tokens: usize = data.examples.iter().map(|ex| ex.tokens.len()).sum();
        let strengths = computed(Select {
            prior: false,
            strength: true,
        });
        assert!(strengths > 0);
        assert!(
            strengths <= tokens,
            "{strengths} token LLRs computed for {tokens} tokens"
        );
        let all = computed(Select::ALL);
        assert!(
            all > strengths && all <= (PRIOR_GRID.len() + 1) * tokens,
            "{all} token LLRs computed for {tokens} tokens"
        );
    }

    #[test]
    fn sampled_items_interleave_the_classes_in_proportion_each_in_order() {
        let mut sample = Sample::new(100);
        for i in 0..6u64 {
            sample.offer(mix(i), Label::Ham, i);
        }
        for i in 6..8u64 {
            sample.offer(mix(i), Label::Spam, i);
        }
        let order: Vec<u64> = sample.into_items().into_iter().map(|(_, i)| i).collect();
        assert_eq!(order, [0, 6, 1, 2, 3, 7, 4, 5]);
    }
}
