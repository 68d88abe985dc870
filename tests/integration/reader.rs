//! A reader that lives as long as its process follows the database:
//! [`Reader::refresh`] picks up a new model (`train`) and new journal
//! entries (`learn`, `unlearn`) without being reopened, does no reading
//! when nothing changed, and reports a damaged or truncated model itself.

use std::fs;

use bayesmail::db::{Database, Error, Reader};
use bayesmail::decision::Decider;
use bayesmail::decision::calibrate::LOGISTIC;
use bayesmail::model::logistic;
use bayesmail::store;

use crate::common::*;

fn counts(reader: &Reader) -> [u64; 2] {
    reader.classifier().header().totals.messages
}

fn decider() -> Decider {
    Decider {
        costs: Default::default(),
        min_known: bayesmail::config::DEFAULT_MIN_KNOWN,
        min_per_class: bayesmail::config::DEFAULT_MIN_PER_CLASS,
    }
}

/// P(spam) the reader gives `raw`.
fn probability(reader: &Reader, raw: &[u8]) -> f64 {
    reader
        .classifier()
        .judge(&features(raw), &decider())
        .score
        .probability
}

/// The evidence of the naive Bayes views and the metadata the reader
/// gives `raw`: what the counts say, apart from the online
/// discriminative view.
fn counted_evidence(reader: &Reader, raw: &[u8]) -> Vec<f64> {
    let inputs = reader
        .classifier()
        .judge(&features(raw), &decider())
        .score
        .evidence
        .stacker_inputs();
    inputs[..LOGISTIC].to_vec()
}

#[test]
fn a_reader_follows_train_learn_and_unlearn_after_refresh() {
    let db = Db::new();
    db.train_sample();
    let database = Database::new(db.dir());
    let mut reader = database.reader().unwrap();
    assert_eq!((counts(&reader), reader.loads()), ([24, 24], 1));

    // Nothing changed: only the files' metadata is looked at.
    for _ in 0..3 {
        assert!(!reader.refresh().unwrap());
    }
    assert_eq!(
        reader.loads(),
        1,
        "no model bytes read when nothing changed"
    );

    // learn: a journal entry.
    let extra = db.path("extra.eml");
    let raw = unseen(0, "zqreader");
    fs::write(&extra, &raw).unwrap();
    let before = probability(&reader, &raw);
    let counted = counted_evidence(&reader, &raw);
    db.ok(&["learn", "--spam", utf8(&extra)], None);
    assert_eq!(counts(&reader), [24, 24], "not before a refresh");
    assert!(reader.refresh().unwrap());
    assert_eq!((counts(&reader), reader.loads()), ([24, 25], 2));
    assert!(
        probability(&reader, &raw) > before,
        "the learned message moves"
    );
    assert!(!reader.refresh().unwrap());

    // unlearn: another entry.
    db.ok(&["unlearn", utf8(&extra)], None);
    assert!(reader.refresh().unwrap());
    assert_eq!(counts(&reader), [24, 24]);
    // The counts are taken back exactly; the online discriminative
    // view's step only within its bound (`unlearn` is approximate there,
    // see `learn_then_unlearn_moves_others_within_the_stated_bound`).
    assert_eq!(
        counted_evidence(&reader, &raw),
        counted,
        "taken back exactly"
    );

    // train: a new model.
    let more = db.path("more");
    fs::create_dir(&more).unwrap();
    fs::copy(&extra, more.join("extra.eml")).unwrap();
    db.train(&[&sample_spam(), &more], &[&sample_ham()]);
    assert!(reader.refresh().unwrap());
    assert_eq!((counts(&reader), reader.loads()), ([24, 25], 4));
    assert!(!reader.refresh().unwrap());
}

#[test]
fn a_damaged_or_truncated_model_is_the_readers_own_error() {
    let db = Db::new();
    db.train_sample();
    let database = Database::new(db.dir());
    let mut reader = database.reader().unwrap();
    let model = database.paths().snapshot();
    let good = fs::read(&model).unwrap();

    let mut damaged = good.clone();
    let at = damaged.len() / 3;
    damaged[at] ^= 0x20;
    for (what, bytes) in [
        ("damaged", damaged),
        ("truncated", good[..good.len() / 2].to_vec()),
    ] {
        // As a writer that went wrong would leave it: a new file.
        let tmp = db.path("model.tmp");
        fs::write(&tmp, &bytes).unwrap();
        fs::rename(&tmp, &model).unwrap();
        let err = reader.refresh().unwrap_err();
        assert!(is_corrupt(&err), "{what}: {err:?}");
        assert!(err.to_string().contains("model.bin"), "{what}: {err}");
        assert!(
            matches!(database.reader(), Err(e) if is_corrupt(&e)),
            "{what}"
        );
        assert_eq!(
            counts(&reader),
            [24, 24],
            "{what}: the reader keeps what it had"
        );
        // And tries again at the next refresh.
        assert!(reader.refresh().is_err(), "{what}");
    }
    let tmp = db.path("model.tmp");
    fs::write(&tmp, &good).unwrap();
    fs::rename(&tmp, &model).unwrap();
    assert!(reader.refresh().unwrap());
    assert_eq!(counts(&reader), [24, 24]);
}

/// The reader's own error for a model it refuses: the file is damaged.
fn is_corrupt(err: &Error) -> bool {
    matches!(err, Error::Store(store::Error::Corrupt { .. }))
}

/// Someone changes the model in place (a `cp` over it, a write into it, a
/// flip on the disk) under a reader that has it open: the reader keeps
/// judging with what it read and checked; its next refresh, and any new
/// reader, refuse the file as damaged, not crash or judge with it.
#[cfg(unix)]
#[test]
fn a_model_changed_in_place_under_a_reader_is_refused_at_refresh() {
    use std::os::unix::fs::FileExt;
    let db = Db::new();
    db.train_sample();
    let database = Database::new(db.dir());
    let mut reader = database.reader().unwrap();
    let model = database.paths().snapshot();
    let good = fs::read(&model).unwrap();
    let raw = unseen(0, "zqinplace");
    let before = probability(&reader, &raw);
    let open = || fs::OpenOptions::new().write(true).open(&model).unwrap();

    // Cut short in place (a new size: a refresh looks again).
    let file = open();
    file.set_len(good.len() as u64 / 2).unwrap();
    drop(file);
    assert_eq!(
        probability(&reader, &raw),
        before,
        "what it read is its own"
    );
    let err = reader.refresh().unwrap_err();
    assert!(is_corrupt(&err), "cut short: {err:?}");
    assert!(matches!(database.reader(), Err(e) if is_corrupt(&e)));

    // Grown in place: one byte more.
    let file = open();
    file.write_all_at(&good, 0).unwrap();
    file.write_all_at(&[0], good.len() as u64).unwrap();
    drop(file);
    let err = reader.refresh().unwrap_err();
    assert!(is_corrupt(&err), "grown: {err:?}");

    // One byte changed, size kept: every new reader refuses it.
    let file = open();
    file.set_len(good.len() as u64).unwrap();
    let at = good.len() as u64 / 3;
    file.write_all_at(&[good[at as usize] ^ 0x20], at).unwrap();
    drop(file);
    assert!(matches!(database.reader(), Err(e) if is_corrupt(&e)));
    assert_eq!(counts(&reader), [24, 24], "the reader keeps what it had");
    assert_eq!(probability(&reader, &raw), before);

    // Put right in place: read again.
    open().write_all_at(&good, 0).unwrap();
    assert!(database.reader().is_ok());
}

/// A model that weighs the online discriminative view: learning a message
/// and unlearning it gives back every count exactly, and moves every other
/// message's score by the view at most by the bound its module states
/// (its unlearning is approximate); `explain` shows the view's part.
#[test]
fn learn_then_unlearn_moves_others_within_the_stated_bound() {
    let db = Db::new();
    let (spam, ham) = (sample_spam(), sample_ham());
    let train = ["train", "--spam", utf8(&spam), "--ham", utf8(&ham)];
    db.ok(&train, None);
    // `train` steps the view's weights through its sample; `learn` steps
    // them one message at a time.
    for i in 0..8 {
        let taught = db.path(&format!("taught{i}.eml"));
        fs::write(&taught, unseen(i, "zqtaught")).unwrap();
        db.ok(&["learn", "--ham", utf8(&taught)], None);
    }
    let database = Database::new(db.dir());
    let others: Vec<Vec<u8>> = sample_files()
        .iter()
        .map(|p| fs::read(p).unwrap())
        .collect();
    let score = |raw: &[u8]| {
        let reader = database.reader().unwrap();
        reader.classifier().score(&features(raw))
    };
    let before: Vec<_> = others.iter().map(|r| score(r)).collect();
    let reader = database.reader().unwrap();
    let weight = reader.classifier().header().calibrator.weights[LOGISTIC];

    let extra = db.path("extra.eml");
    let raw = unseen(3, "zqbound");
    fs::write(&extra, &raw).unwrap();
    db.ok(&["learn", "--spam", utf8(&extra)], None);
    let moved = others
        .iter()
        .zip(&before)
        .filter(|(r, b)| score(r).evidence.logistic != b.evidence.logistic)
        .count();
    assert!(moved > 0, "learning stepped weights other messages have");
    db.ok(&["unlearn", utf8(&extra)], None);

    let learned = features(&raw).lr_buckets;
    for ((r, b), path) in others.iter().zip(&before).zip(sample_files()) {
        let after = score(r);
        assert_eq!(after.evidence.views, b.evidence.views, "{path:?}");
        assert_eq!(after.evidence.meta, b.evidence.meta, "{path:?}");
        let prefix = features(r).lr_buckets;
        let shared = prefix
            .iter()
            .filter(|x| learned.binary_search(x).is_ok())
            .count();
        let bound = logistic::learn_unlearn_bound(learned.len(), prefix.len(), shared);
        let by_view = (after.evidence.logistic - b.evidence.logistic).abs();
        assert!(by_view <= bound, "{path:?}: {by_view} > {bound}");
        let by_stacker = (after.log_odds - b.log_odds).abs();
        assert!(
            by_stacker <= weight * bound + 1e-9,
            "{path:?}: {by_stacker}"
        );
    }

    let why: serde_json::Value =
        serde_json::from_str(&db.ok(&["explain", "--json", utf8(&sample_files()[0])], None))
            .unwrap();
    let views = why["views"].as_array().unwrap();
    let part = views
        .iter()
        .find(|v| v["input"] == "logistic")
        .expect("its part");
    assert_ne!(part["evidence"].as_f64(), Some(0.0), "{part}");
    assert!(part["known"].as_u64().unwrap() > 0, "{part}");
}
