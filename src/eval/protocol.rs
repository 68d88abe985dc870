//! Evaluation protocols over an in-memory labelled corpus: k-fold
//! cross-validation (train on k−1 folds, score the last, pool the scores)
//! and the TREC online protocol (in order: classify a message, then learn
//! its true label). Each measures what a deployment does: cross-validation
//! trains with the training protocol of [`crate::fit`], as `train` does;
//! online learns message by message and refits the stacker on the
//! stream's prequential scores, as `learn` does
//! ([`crate::decision::prequential`]). Both judge with
//! [`crate::db::judge`], as the commands do.
//!
//! The stacker is always fitted on scores of models that did not see the
//! message scored: in cross-validation, inner cross-validated scores of the
//! outer training folds; online, each message's score before it was
//! learned.

use std::collections::HashMap;

use rayon::prelude::*;

use super::Scored;
use crate::db::judge;
use crate::decision::calibrate::INPUTS;
use crate::decision::prequential::{Sample, key_of};
use crate::decision::{Calibrator, Decider, Prequential};
use crate::fit::{self as training, Counts, Dataset, select_and_calibrate_with_samples};
use crate::model::{Combine, Label, logistic};
use crate::vocab::{Digest, View};

/// What an evaluation needs besides the data.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How each model is trained.
    pub training: training::Settings,
    /// The verdict rule, as the commands apply it.
    pub decider: Decider,
}

/// Judges example `index` with the model of `counts`, the online
/// discriminative view's `weights` and the stacker, as a command would;
/// also gives the stacker inputs it was judged with.
fn scored(
    index: usize,
    data: &Dataset,
    counts: &Counts,
    model: &crate::model::Model,
    weights: &logistic::Table,
    stacker: &Calibrator,
    settings: &Settings,
) -> (Scored, [f64; INPUTS]) {
    let ex = &data.examples[index];
    let words = ex
        .tokens
        .iter()
        .filter(|&&t| data.views[t as usize] != View::Bytes)
        .count();
    let j = judge(
        model,
        stacker,
        &settings.decider,
        counts.known(ex, data),
        words,
        weights.score(&ex.lr_buckets),
        &ex.metadata,
    );
    (
        Scored {
            index,
            is_spam: ex.label == Label::Spam,
            log_odds: j.score.log_odds,
            probability: j.score.probability,
            verdict: j.verdict,
        },
        j.score.evidence.stacker_inputs(),
    )
}

/// k-fold cross-validation: `folds[i]` is the fold of example `i`. Returns
/// one [`Scored`] per example, in corpus order. Each training set is
/// fitted as `train` fits a run into an empty database: when the model
/// weighs the online discriminative view, it is stepped from zero through
/// the training set's calibration sample in the order `train` steps it
/// (a hash of each message's key, from `digests`, their identities)
/// before the stacker's fit, and judges the test fold with what it
/// learned. (The sample itself is chosen by position in the corpus, where
/// `train` chooses it by key: they differ only when a class of the
/// training set has more than [`training::SAMPLE_PER_CLASS`] messages.)
pub(crate) fn cross_validate(
    data: &Dataset,
    digests: &[Digest],
    folds: &[usize],
    settings: &Settings,
) -> Vec<Scored> {
    assert_eq!(folds.len(), data.examples.len(), "one fold per example");
    assert_eq!(digests.len(), data.examples.len(), "one digest per example");
    let keys: Vec<u64> = digests.iter().map(key_of).collect();
    let learned = vec![true; data.examples.len()];
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
            let mut weights = logistic::Table::default();
            let stepped = if settings.training.params.get().logistic {
                let sample = training::bounded(data, &rest);
                training::step_through(data, &sample, &keys, &learned, &mut weights, None).inputs
            } else {
                HashMap::new()
            };
            let (params, stacker, _) = select_and_calibrate_with_samples(
                data,
                &train,
                &rest,
                &settings.training,
                &stepped,
            );
            let model = train.model(params, data);
            test.into_iter()
                .map(|i| self::scored(i, data, &train, &model, &weights, &stacker, settings).0)
                .collect::<Vec<_>>()
        })
        .collect();
    scored.sort_by_key(|s| s.index);
    scored
}

/// The TREC online protocol, as a database that only learns lives it:
/// each message in order is judged by the model of everything before it,
/// then learned with its true label, and its prequential sample (the
/// stacker inputs it was judged with, once the model has seen both
/// classes) goes to the record the stacker is refitted on, by the rule
/// `learn` follows ([`Prequential::observe`]). A message seen before
/// (`digests`, its identity) is judged again but learned as `learn` learns
/// it: not again under the same label, moved under the other one. The
/// hyperparameters are those given, at the size of the counts each
/// message is judged with ([`crate::model::ValidParams::at_size`]), as
/// `learn`'s are. The textbook
/// combination needs a pass over the vocabulary per message, so it is
/// rejected here.
///
/// It measures full feedback: every message is learned with its label. A
/// deployment learns only what its user sorts (mostly spam moved into
/// Junk), which this protocol does not show.
pub fn online(
    data: &Dataset,
    digests: &[Digest],
    settings: &Settings,
) -> Result<Vec<Scored>, String> {
    assert_eq!(digests.len(), data.examples.len(), "one digest per example");
    let params = settings.training.params;
    if params.get().combine == Combine::Textbook {
        return Err("the online protocol does not support the textbook combination".into());
    }
    let mut counts = Counts::new(data.vocabulary);
    let mut weights = logistic::Table::default();
    // Learned only if the model weighs it, as `learn` does.
    let weigh = params.get().logistic;
    let mut stacker = Calibrator::default();
    let mut record = Prequential::default();
    let mut out = Vec::with_capacity(data.examples.len());
    // Each message learned: the example it was learned as.
    let mut learned: HashMap<Digest, usize> = HashMap::new();
    for (i, ex) in data.examples.iter().enumerate() {
        let model = counts.model(params, data);
        let (s, inputs) = scored(i, data, &counts, &model, &weights, &stacker, settings);
        out.push(s);
        let key = key_of(&digests[i]);
        match learned.get(&digests[i]).copied() {
            Some(j) if data.examples[j].label == ex.label => continue,
            Some(j) => {
                let old = &data.examples[j];
                counts.add(old, -1);
                counts.add(ex, 1);
                if weigh {
                    weights.learn(None, &old.lr_buckets, old.label, -1);
                    weights.learn(None, &ex.lr_buckets, ex.label, 1);
                }
                record.relabel(key, ex.label == Label::Spam);
            }
            None => {
                if counts.messages().iter().all(|&n| n > 0) {
                    let sample = Sample {
                        key,
                        inputs: settings.training.inputs.apply(inputs),
                        spam: ex.label == Label::Spam,
                    };
                    if let Some((refitted, _)) = record.observe(sample) {
                        stacker = refitted;
                    }
                }
                counts.add(ex, 1);
                if weigh {
                    weights.learn(None, &ex.lr_buckets, ex.label, 1);
                }
            }
        }
        learned.insert(digests[i], i);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Costs;
    use crate::features::{Features, Metadata};
    use crate::fit::select_and_calibrate;
    use crate::model::ValidParams;
    use crate::vocab::METADATA_LEN;

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
                    grams: Vec::new(),
                    lr_buckets: Vec::new(),
                    metadata: Metadata([m; METADATA_LEN]),
                },
                if spam { Label::Spam } else { Label::Ham },
            ));
        }
        Dataset::new(items)
    }

    /// A digest of its own for each example.
    fn distinct(data: &Dataset) -> Vec<Digest> {
        (0..data.examples.len())
            .map(|i| {
                let mut d = [0u8; 32];
                d[..8].copy_from_slice(&(i as u64).to_le_bytes());
                d
            })
            .collect()
    }

    #[test]
    fn online_learns_a_message_seen_before_as_learn_does() {
        // The first 60 messages, then the same 60 again: the second pass is
        // judged but not learned (the same labels), so its scores are those
        // of a model that holds the first pass only, the one that judges
        // the first message after it.
        let base = toy();
        let mut examples: Vec<_> = base.examples[..60].to_vec();
        examples.extend_from_slice(&base.examples[..60]);
        examples.push(base.examples[60].clone());
        let data = Dataset { examples, ..base };
        let mut digests = distinct(&data)[..60].to_vec();
        digests.extend(digests.clone());
        digests.push([0xff; 32]);
        let scored = online(&data, &digests, &settings()).unwrap();
        let mut unseen = data.examples[..60].to_vec();
        unseen.push(data.examples[120].clone());
        let once = Dataset {
            examples: unseen,
            vocabulary: data.vocabulary,
            views: data.views.clone(),
        };
        let alone = online(&once, &distinct(&once), &settings()).unwrap();
        assert_eq!(scored[120].log_odds, alone[60].log_odds);
        // Without the identities, the repeats are learned again and the
        // last message is judged otherwise.
        let twice = online(&data, &distinct(&data), &settings()).unwrap();
        assert_ne!(twice[120].log_odds, alone[60].log_odds);
    }

    fn settings() -> Settings {
        Settings {
            training: training::Settings {
                select: crate::fit::Select::ALL,
                params: ValidParams::default(),
                inner_folds: 5,
                inputs: Default::default(),
            },
            decider: Decider {
                costs: Costs::default(),
                min_known: 1,
                min_per_class: 1,
            },
        }
    }

    #[test]
    fn cross_validation_separates_an_easy_corpus() {
        let data = toy();
        let folds: Vec<usize> = (0..data.examples.len()).map(|i| i % 5).collect();
        let scored = cross_validate(&data, &distinct(&data), &folds, &settings());
        assert_eq!(scored.len(), 200);
        assert!(scored.iter().enumerate().all(|(i, s)| s.index == i));
        let report = super::super::Report::new(&scored, &settings().decider.costs, 1.0);
        assert!(report.auc > 0.99, "{report:?}");
        assert!(scored.iter().all(|s| (0.0..=1.0).contains(&s.probability)));
    }

    #[test]
    fn online_scores_before_learning() {
        let data = toy();
        let scored = online(&data, &distinct(&data), &settings()).unwrap();
        assert_eq!(scored.len(), 200);
        // The very first message is scored by an empty model.
        assert_eq!(scored[0].log_odds, 0.0);
        let late = &scored[100..];
        let pairs: Vec<(f64, bool)> = late.iter().map(|s| (s.probability, s.is_spam)).collect();
        assert!(super::super::auc(&pairs) > 0.99);
    }

    #[test]
    fn online_refits_on_the_prequential_record_as_learn_does() {
        // Each message is judged with the counts of everything before it
        // and the stacker the record last gave; its sample (the inputs it
        // was judged with) goes to the record once both classes are seen.
        let mut data = noisy(true);
        data.examples.truncate(300);
        let settings = settings();
        let given_scores = online(&data, &distinct(&data), &settings).unwrap();
        let mut counts = Counts::new(data.vocabulary);
        let mut record = Prequential::default();
        let mut stacker = Calibrator::default();
        let mut weights = logistic::Table::default();
        let mut refits = 0;
        for (i, given) in given_scores.iter().enumerate() {
            let model = counts.model(settings.training.params, &data);
            let (expected, inputs) =
                scored(i, &data, &counts, &model, &weights, &stacker, &settings);
            assert_eq!(given.probability, expected.probability, "message {i}");
            let ex = &data.examples[i];
            if counts.messages().iter().all(|&n| n > 0) {
                let sample = Sample {
                    key: i as u64,
                    inputs,
                    spam: ex.label == Label::Spam,
                };
                if let Some((c, n)) = record.observe(sample) {
                    assert_eq!(n, record.samples().len());
                    stacker = c;
                    refits += 1;
                }
            } else {
                assert_eq!(stacker, Calibrator::default());
            }
            counts.add(ex, 1);
            weights.learn(None, &ex.lr_buckets, ex.label, 1);
        }
        // Once twenty of each class are kept, each time a tenth is new.
        assert!((10..40).contains(&refits), "{refits} refits");
        assert_ne!(stacker, Calibrator::default());
    }

    /// A corpus where words carry the label only now and then (a third of
    /// the messages have a telling word), so that ranking is imperfect and a
    /// harmful view would show.
    fn noisy(random_grams: bool) -> Dataset {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let items = (0..1500)
            .map(|i| {
                let spam = i % 3 == 0;
                let mut tokens: Vec<String> = (0..8).map(|_| format!("w{}", next() % 60)).collect();
                if next() % 3 == 0 {
                    tokens.push(if spam { "offer" } else { "agenda" }.into());
                }
                let grams = if random_grams {
                    (0..20).map(|_| (next() % 100) as u32).collect()
                } else {
                    Vec::new()
                };
                let mut grams: Vec<u32> = grams;
                grams.sort_unstable();
                grams.dedup();
                (
                    Features {
                        tokens: tokens.into_iter().collect(),
                        grams,
                        lr_buckets: Vec::new(),
                        metadata: Metadata([0.0; METADATA_LEN]),
                    },
                    if spam { Label::Spam } else { Label::Ham },
                )
            })
            .collect::<Vec<_>>();
        Dataset::new(items)
    }

    /// Counts of every message of `data`, and the messages' indices.
    fn learned_all(data: &Dataset) -> (Counts, Vec<usize>) {
        let mut counts = Counts::new(data.vocabulary);
        for ex in &data.examples {
            counts.add(ex, 1);
        }
        (counts, (0..data.examples.len()).collect())
    }

    #[test]
    fn a_view_of_random_features_gets_a_weight_near_zero_and_does_not_hurt() {
        use crate::vocab::View;
        let folds: Vec<usize> = (0..1500).map(|i| i % 5).collect();
        let report = |data: &Dataset| {
            let scored = cross_validate(data, &distinct(data), &folds, &settings());
            super::super::Report::new(&scored, &settings().decider.costs, 1.0)
        };
        let (plain, noisy) = (noisy(false), noisy(true));
        // The stacker fitted on all of the noisy data.
        let (counts, members) = learned_all(&noisy);
        let (_, stacker) = select_and_calibrate(&noisy, &counts, &members, &settings().training);
        let words = stacker.weights[View::Body.index()];
        let bytes = stacker.weights[View::Bytes.index()];
        assert!(words > 0.3, "{stacker:?}");
        assert!(bytes.abs() < 0.15 * words, "{stacker:?}");
        // Under cross-validation the random view costs (almost) nothing.
        let (without, with) = (report(&plain), report(&noisy));
        assert!(without.auc < 0.99, "the corpus is hard enough: {without:?}");
        assert!(with.auc > without.auc - 0.01, "{with:?} vs {without:?}");
    }

    #[test]
    fn a_view_left_out_gets_no_weight() {
        use crate::fit::Inputs;
        use crate::vocab::View;
        let data = noisy(true);
        let (counts, members) = learned_all(&data);
        let mut training = settings().training;
        training.inputs = Inputs::parse("body,metadata").unwrap();
        let (_, stacker) = select_and_calibrate(&data, &counts, &members, &training);
        assert_eq!(stacker.weights[View::Bytes.index()], 0.0, "{stacker:?}");
        assert_eq!(stacker.weights[View::Header.index()], 0.0, "{stacker:?}");
        assert!(stacker.weights[View::Body.index()] > 0.3, "{stacker:?}");
    }

    #[test]
    fn the_byte_views_strength_is_chosen_from_its_grid_unless_pinned() {
        use crate::fit::BYTES_STRENGTH_GRID;
        let data = noisy(true);
        let (counts, members) = learned_all(&data);
        let mut training = settings().training;
        let (chosen, _) = select_and_calibrate(&data, &counts, &members, &training);
        assert!(BYTES_STRENGTH_GRID.contains(&chosen.get().bytes_min_strength));
        // Chosen: the database's from now on, whatever its size.
        assert!(training.params.get().grows && !chosen.get().grows);
        training.select = crate::fit::Select::NONE;
        training.params = crate::model::Params {
            bytes_min_strength: 0.25,
            ..*training.params.get()
        }
        .check()
        .unwrap();
        let (kept, _) = select_and_calibrate(&data, &counts, &members, &training);
        assert_eq!(kept.get().bytes_min_strength, 0.25);
    }

    #[test]
    fn the_pseudo_counts_are_chosen_from_their_grid_unless_pinned() {
        use crate::fit::{PRIOR_GRID, Select};
        let data = noisy(true);
        let (counts, members) = learned_all(&data);
        let mut training = settings().training;
        // Pseudo-counts so large that every token weighs almost nothing:
        // a candidate of the grid fits better.
        training.params = crate::model::Params {
            a: 5.0,
            b: 5.0,
            ..*training.params.get()
        }
        .check()
        .unwrap();
        // The strengths pinned, the pseudo-counts still chosen.
        training.select = Select {
            prior: true,
            strength: false,
        };
        let (chosen, _) = select_and_calibrate(&data, &counts, &members, &training);
        let p = chosen.get();
        assert_eq!(p.a, p.b);
        assert!(PRIOR_GRID.contains(&p.a), "{p:?}");
        assert_eq!(p.combine, training.params.get().combine);
        assert_eq!(
            p.bytes_min_strength,
            training.params.get().bytes_min_strength
        );
        // Both chosen: the strengths are chosen with the chosen prior.
        training.select = Select::ALL;
        let (both, _) = select_and_calibrate(&data, &counts, &members, &training);
        let p = both.get();
        assert!(PRIOR_GRID.contains(&p.a) && p.a == p.b, "{p:?}");
        assert!(crate::fit::BYTES_STRENGTH_GRID.contains(&p.bytes_min_strength));
        training.select = Select::NONE;
        let (kept, _) = select_and_calibrate(&data, &counts, &members, &training);
        assert_eq!((kept.get().a, kept.get().b), (5.0, 5.0));
    }
}
