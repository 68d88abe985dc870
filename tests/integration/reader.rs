//! A reader that lives as long as its process follows the database:
//! [`Reader::refresh`] picks up a new model (`train`) and new journal
//! entries (`learn`, `unlearn`) without being reopened, does no reading
//! when nothing changed, and reports a damaged or truncated model itself.

use std::fs;

use bayesmail::db::{Database, Reader};
use bayesmail::decision::Decider;

use crate::common::*;

fn counts(reader: &Reader) -> [u64; 2] {
    reader.classifier().header().totals.messages
}

/// P(spam) the reader gives `raw`.
fn probability(reader: &Reader, raw: &[u8]) -> f64 {
    let decider = Decider {
        costs: Default::default(),
        min_known: bayesmail::config::DEFAULT_MIN_KNOWN,
        min_per_class: bayesmail::config::DEFAULT_MIN_PER_CLASS,
    };
    reader
        .classifier()
        .judge(&features(raw), &decider)
        .score
        .probability
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
    assert_eq!(probability(&reader, &raw), before, "taken back exactly");

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
        let err = reader.refresh().unwrap_err().to_string();
        assert!(err.contains("model.bin"), "{what}: {err}");
        assert!(database.reader().is_err(), "{what}");
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
