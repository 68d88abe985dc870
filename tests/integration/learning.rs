//! Properties of learning: exact reversibility, chunking and parallelism
//! change nothing, posteriors stay finite probabilities, retraining is a
//! no-op; and the acceptance figures on the public corpus.

use bayesmail::db::{DbPaths, Labelled, Trainer};
use bayesmail::decision::Calibrator;
use bayesmail::features::{Features, Metadata};
use bayesmail::model::{Delta, Label, Model, Params, TokenCounts, Totals, sigmoid};
use bayesmail::store::{MemoryStore, Store};
use bayesmail::vocab::METADATA_LEN;
use bayesmail::vocab::{Feature, FeatureBuf, VIEWS, word_view};
use proptest::prelude::*;
use rayon::prelude::*;

use crate::common::public_corpus;

fn features() -> impl Strategy<Value = (Features, Label)> {
    (
        prop::collection::btree_set("[a-f]{1,3}", 0..12),
        prop::array::uniform12(-50.0f64..50.0),
        any::<bool>(),
    )
        .prop_map(|(tokens, meta, spam)| {
            (
                Features {
                    tokens: tokens.into_iter().collect(),
                    grams: Vec::new(),
                    lr_buckets: Vec::new(),
                    metadata: Metadata(meta),
                },
                if spam { Label::Spam } else { Label::Ham },
            )
        })
}

fn delta_of(messages: &[(Features, Label)], sign: i64) -> Delta {
    let mut d = Delta::default();
    for (f, l) in messages {
        d.add_message(f, *l, sign);
    }
    d
}

fn snapshot(store: &MemoryStore) -> (Totals, Vec<(FeatureBuf, TokenCounts)>) {
    let mut tokens = Vec::new();
    store
        .for_each_token(&mut |t, c| tokens.push((t.into_owned(), c)))
        .unwrap();
    (store.totals().unwrap(), tokens)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// untrain(train(x)) restores the store exactly, from any starting point.
    #[test]
    fn unlearning_restores_the_store_exactly(
        base in prop::collection::vec(features(), 0..10),
        x in prop::collection::vec(features(), 1..10),
    ) {
        let mut store = MemoryStore::new();
        store.apply(&delta_of(&base, 1)).unwrap();
        let before = store.clone();
        store.apply(&delta_of(&x, 1)).unwrap();
        store.apply(&delta_of(&x, -1)).unwrap();
        prop_assert_eq!(store, before);
    }

    /// Training in chunks equals training in one batch; building the delta
    /// in parallel (rayon fold + reduce) equals building it sequentially.
    #[test]
    fn chunks_and_parallel_equal_one_sequential_batch(
        messages in prop::collection::vec(features(), 0..40),
        chunk in 1usize..7,
    ) {
        let mut one = MemoryStore::new();
        one.apply(&delta_of(&messages, 1)).unwrap();
        let mut chunked = MemoryStore::new();
        for c in messages.chunks(chunk) {
            chunked.apply(&delta_of(c, 1)).unwrap();
        }
        let parallel = messages
            .par_iter()
            .fold(Delta::default, |mut d, (f, l)| {
                d.add_message(f, *l, 1);
                d
            })
            .reduce(Delta::default, |mut a, b| {
                a.merge(b);
                a
            });
        let mut par = MemoryStore::new();
        par.apply(&parallel).unwrap();
        prop_assert_eq!(snapshot(&one), snapshot(&chunked));
        prop_assert_eq!(snapshot(&one), snapshot(&par));
    }

    /// Posteriors are finite and in [0, 1] for any counts, metadata and
    /// calibration.
    #[test]
    fn posteriors_are_finite_probabilities(
        messages in prop::collection::vec(features(), 0..30),
        probe in features(),
        w in prop::array::uniform5(-100.0f64..100.0),
        bias in -100.0f64..100.0,
        a in 0.001f64..10.0,
    ) {
        let mut store = MemoryStore::new();
        store.apply(&delta_of(&messages, 1)).unwrap();
        let params = Params { a, b: a, ..Params::default() }.check().unwrap();
        let model = Model::new(params, &store.totals().unwrap(), [0.0; VIEWS]);
        let known = probe
            .0
            .tokens
            .iter()
            .map(|t| (word_view(t), store.token(Feature::Word(t)).unwrap()))
            .filter(|(_, c)| !c.is_zero());
        let ev = model.evidence(known, &probe.0.metadata.0);
        prop_assert!(ev.log_odds().is_finite(), "{ev:?}");
        let p = sigmoid(ev.log_odds());
        prop_assert!((0.0..=1.0).contains(&p));
        let c = Calibrator { weights: w, bias };
        let q = c.probability(ev.stacker_inputs());
        prop_assert!(q.is_finite() && (0.0..=1.0).contains(&q));
    }
}

/// Learning the same messages twice changes nothing the second time.
#[test]
fn relearning_the_same_messages_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let paths = DbPaths::new(dir.path());
    let mut trainer = Trainer::open(&paths, std::time::Duration::ZERO).unwrap();
    let messages: Vec<Labelled> = (0..30u8)
        .map(|i| Labelled {
            features: Features {
                tokens: [format!("t{}", i % 7), format!("u{}", i % 3)]
                    .into_iter()
                    .collect(),
                grams: vec![u32::from(i % 5)],
                lr_buckets: Vec::new(),
                metadata: Metadata([f64::from(i); METADATA_LEN]),
            },
            identity: [i; 32].into(),
            label: if i % 2 == 0 { Label::Spam } else { Label::Ham },
        })
        .collect();
    let first = trainer.learn(&messages, &mut |_| {}).unwrap();
    assert_eq!(first.learned, 30);
    let before = MemoryStore::load_counts(trainer.store()).unwrap();
    let second = trainer.learn(&messages, &mut |_| {}).unwrap();
    assert_eq!(
        (second.learned, second.relearned, second.unchanged),
        (0, 0, 30)
    );
    assert_eq!(MemoryStore::load_counts(trainer.store()).unwrap(), before);
}

/// Acceptance: 5-fold cross-validation on the fixed split of the public
/// corpus reaches (1−AUC)% ≤ 0.05, FNR ≤ 5% at FPR = 0.1%, ECE ≤ 0.01.
#[test]
fn public_corpus_cross_validation_meets_the_targets() {
    let Some(dir) = public_corpus() else { return };
    // The fixed stratified split every figure of the project is quoted on
    // (a copy of the one shipped beside the shared corpus).
    let folds = crate::common::root()
        .join("corpora")
        .join("spamassassin-folds.tsv");
    let args = [
        "eval",
        "--json",
        "--folds",
        folds.to_str().unwrap(),
        "--root",
        dir.to_str().unwrap(),
    ];
    let out = crate::common::run(&args, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["n"], 6046);
    let get = |k: &str| r[k].as_f64().unwrap();
    assert!(get("one_minus_auc_pct") <= 0.05, "{r}");
    assert!(get("fnr_at_fpr_0_1_pct") <= 5.0, "{r}");
    assert!(get("ece") <= 0.01, "{r}");
    assert!((0.0..=1.0).contains(&get("auc")));
}

/// A user moves a batch into the spam folder by mistake and back again (or
/// a batch of spam out of it and back), each move one `learn` as a mail
/// client's sieve script runs it: the model must judge other mail as one
/// that learned the batch once under its right label does, not as the
/// online view's unlearning steps had left it, each pushing the weights the
/// batch shares a full step further (found by a walkthrough: 1,396 spam
/// judged spam before, 245 after).
#[test]
fn a_batch_moved_into_the_spam_folder_and_back_judges_as_if_learned_once() {
    use crate::common::{Db, sample_ham, sample_spam, utf8};
    let Some(dir) = public_corpus() else { return };
    let (held_spam, held_ham) = (dir.join("spam-1"), dir.join("easy-ham-2"));
    for (batch, right, folder, wrong_label, label) in [
        (sample_ham(), "spam", &held_spam, "--spam", "--ham"),
        (sample_spam(), "ham", &held_ham, "--ham", "--spam"),
    ] {
        let mut files: Vec<_> = std::fs::read_dir(&batch)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let judged_right = |moves: &[&str]| {
            let db = Db::new();
            db.train(&[&dir.join("spam-2")], &[&dir.join("easy-ham-1")]);
            for label in moves {
                for f in &files {
                    db.ok(&["learn", "--origin", "imap", label, utf8(f)], None);
                }
            }
            db.classify(&[folder])
                .iter()
                .filter(|v| v["verdict"] == right)
                .count()
        };
        let (once, moved) = (judged_right(&[label]), judged_right(&[wrong_label, label]));
        assert!(
            moved * 100 >= once * 97,
            "{} moved {wrong_label} and back: {moved} of {} judged {right}, against {once} \
             when learned once",
            batch.display(),
            folder.display()
        );
    }
}
