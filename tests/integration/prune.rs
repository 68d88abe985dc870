//! `bayesmail prune`: rare, old word tokens go; every kept count stays.

use std::collections::BTreeMap;
use std::time::Duration;

use bayesmail::db::{Classifier, DbPaths, Trainer};
use bayesmail::model::TokenCounts;
use bayesmail::store::Store;
use bayesmail::vocab::FeatureBuf;

use crate::common::*;

/// Every token of the store with its counts.
fn store_tokens(db: &Db) -> BTreeMap<FeatureBuf, TokenCounts> {
    let trainer = Trainer::open(&DbPaths::new(db.dir()), Duration::from_secs(60)).unwrap();
    let mut all = BTreeMap::new();
    trainer
        .store()
        .for_each_token(&mut |t, c| {
            all.insert(t.into_owned(), c);
        })
        .unwrap();
    all
}

#[test]
fn prune_removes_rare_words_keeps_every_other_count_and_rewrites_the_model() {
    let db = Db::new();
    db.train_sample();
    let before = store_tokens(&db);
    let stats_before = db.stats();

    // Nothing has been unchanged for 30 days yet: nothing goes.
    let out = stderr(&db.run(&["prune"], None));
    assert!(
        out.starts_with("pruned 0 tokens seen in at most 1 message and unchanged for 30 days;"),
        "{out}"
    );
    assert_eq!(store_tokens(&db), before);

    let out = db.run(&["prune", "--max-count", "1", "--min-age", "0"], None);
    assert_exit(&out, 0, &["prune"]);
    let out = stderr(&out);
    let after = store_tokens(&db);
    let removed: Vec<&FeatureBuf> = before.keys().filter(|t| !after.contains_key(*t)).collect();
    assert!(!removed.is_empty());
    assert!(
        out.starts_with(&format!("pruned {} token", removed.len())),
        "{out}"
    );
    for (token, counts) in &before {
        match after.get(token) {
            // Kept: exactly as it was.
            Some(kept) => assert_eq!(kept, counts, "{token:?}"),
            // Gone: a word seen once, never a bucket of the byte view.
            None => {
                assert_eq!(counts.ham + counts.spam, 1, "{token:?}");
                assert!(matches!(token, FeatureBuf::Word(_)), "{token:?}");
            }
        }
    }
    assert_eq!(db.counts(), [24, 24]);
    // The model is the store's: the pruned tokens are gone from it too.
    let classifier = Classifier::open(&DbPaths::new(db.dir())).unwrap();
    let features = after
        .keys()
        .filter(|t| !matches!(t, FeatureBuf::Weight(_)))
        .count();
    assert_eq!(classifier.vocabulary(), features);
    for token in removed {
        assert_eq!(classifier.lookup(token.as_feature()), None, "{token:?}");
    }
    let stats = db.stats();
    assert_ne!(stats["vocabulary"], stats_before["vocabulary"]);
    // What prune says is left is what stats counts.
    assert!(
        out.contains(&format!("; {} tokens left", stats["vocabulary"])),
        "{out} against {}",
        stats["vocabulary"]
    );
    assert_eq!(db.classify(&[&sample_spam()]).len(), 24);
}
