//! The compact model file: the byte view's counts in a table indexed by
//! bucket, no key per bucket; the classifier reads them back by number,
//! with the journal's changes on top.

use std::fs;
use std::time::Duration;

use bayesmail::db::{Classifier, DbPaths, Trainer};
use bayesmail::model::TokenCounts;
use bayesmail::store::Store;
use bayesmail::vocab::{BUCKET_BITS, Feature};

use crate::common::*;

/// The store's counts of every bucket of the byte view, and how many word
/// tokens it holds.
fn store_counts(db: &Db) -> (Vec<Option<TokenCounts>>, u64) {
    let paths = DbPaths::new(db.dir());
    // A writer takes in what `learn` left in the journal alone.
    let trainer = Trainer::open(&paths, Duration::from_secs(600)).unwrap();
    let store = trainer.store();
    let mut buckets = vec![None; 1 << BUCKET_BITS];
    let mut words = 0;
    store
        .for_each_token(&mut |t, c| match t {
            Feature::Gram(b) => buckets[b as usize] = Some(c),
            Feature::Word(_) => words += 1,
            Feature::Weight(_) => {}
        })
        .unwrap();
    (buckets, words)
}

/// Asserts that the classifier gives, for every bucket, the store's counts.
fn assert_buckets_match_store(db: &Db) {
    let (expected, _) = store_counts(db);
    let classifier = Classifier::open(&DbPaths::new(db.dir())).unwrap();
    let seen = expected.iter().filter(|c| c.is_some()).count();
    assert!(seen > 1000, "only {seen} buckets learned");
    for (b, counts) in expected.iter().enumerate() {
        let b = b as u32;
        assert_eq!(classifier.gram(b), *counts, "bucket {b:#x}");
        assert_eq!(
            classifier.lookup(Feature::Gram(b)),
            *counts,
            "bucket {b:#x}"
        );
    }
    assert_eq!(classifier.gram(1 << BUCKET_BITS), None);
    assert_eq!(classifier.gram(u32::MAX), None);
}

#[test]
fn gram_counts_round_trip_through_train_snapshot_and_classifier() {
    let db = Db::new();
    db.train_sample();
    assert_buckets_match_store(&db);

    // A message with header bytes of its own: learned into the journal,
    // whose bucket changes the classifier applies over the table.
    let message = db.path("new.eml");
    let mut raw = b"X-Never-Seen-Before: qqzzj wvvk 9731\nX-Other: \x7f\x7e\x7d\n".to_vec();
    raw.extend(fs::read(sample_files()[0].clone()).unwrap());
    fs::write(&message, &raw).unwrap();
    let model = fs::read(db.model()).unwrap();
    db.ok(&["learn", "--spam", utf8(&message)], None);
    assert!(DbPaths::new(db.dir()).journal().exists());
    assert!(
        fs::read(db.model()).unwrap() == model,
        "model.bin rewritten"
    );
    assert_buckets_match_store(&db);

    db.ok(&["unlearn", utf8(&message)], None);
    assert_buckets_match_store(&db);
}

/// The model file keys the word tokens only: its token count (after the
/// JSON header) is the store's word tokens, not words and buckets.
#[test]
fn the_model_file_keys_word_tokens_only() {
    let db = Db::new();
    db.train_sample();
    let bytes = fs::read(db.model()).unwrap();
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let header_len = u64_at(16) as usize;
    let keyed = u64_at(24 + header_len);
    let (buckets, words) = store_counts(&db);
    assert_eq!(keyed, words);
    let learned = buckets.iter().filter(|c| c.is_some()).count() as u64;
    assert_eq!(db.stats()["vocabulary"].as_u64(), Some(words + learned));
}
