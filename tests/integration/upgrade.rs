//! A database of tokenizer version 3 (before runs of CJK became pairs of
//! characters) after the upgrade: it judges, learns and unlearns without
//! being rebuilt, an unlearn of a message it learned under version 3
//! reports the counts it could not take back, and the next write of the
//! store and of the model records version 4.

use std::collections::BTreeSet;
use std::time::Duration;

use bayesmail::db::{DbPaths, Trainer};
use bayesmail::model::{Delta, Params};
use bayesmail::store::{SledStore, Store};
use bayesmail::vocab::TOKENIZER_VERSION;

use crate::common::*;

const WAIT: Duration = Duration::from_secs(60);

/// Han and kana: the characters of the sample's Chinese and Japanese mail.
fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{9fff}')
}

/// The version 3 tokens of a version 4 CJK token: each character on its
/// own, under the token's namespace (`SUBJ:東京` → `SUBJ:東`, `SUBJ:京`).
fn single_characters(token: &str, out: &mut BTreeSet<String>) {
    let split = token
        .find(':')
        .filter(|&i| token[..i].bytes().all(|b| b.is_ascii_uppercase()))
        .map_or(0, |i| i + 1);
    let (namespace, word) = token.split_at(split);
    for c in word.chars() {
        if is_cjk(c) {
            out.insert(format!("{namespace}{c}"));
        } else {
            // A token of mixed scripts: version 3 had other words there;
            // what matters here is only that they are not version 4's.
            out.insert(format!("{namespace}{c}~"));
        }
    }
}

/// The tokenizer version in a model file's preamble.
fn model_tokenizer_version(db: &Db) -> u32 {
    let bytes = std::fs::read(db.model()).unwrap();
    u32::from_le_bytes(bytes[12..16].try_into().unwrap())
}

#[test]
fn a_version_3_database_judges_learns_and_unlearns_and_is_upgraded_by_its_next_write() {
    let db = Db::new();
    db.train_sample();
    let paths = DbPaths::new(db.dir());
    let chinese = sample_ham().join("12-chinese-friend-gb2312-base64.eml");
    let japanese = sample_ham().join("11-japanese-colleague-iso2022jp.eml");

    // Make the store what version 3 left: the two CJK hams counted with
    // single characters instead of pairs.
    let mut delta = Delta::default();
    for file in [&chinese, &japanese] {
        let features = features(&std::fs::read(file).unwrap());
        let pairs: BTreeSet<String> = features
            .tokens
            .iter()
            .filter(|t| t.chars().any(is_cjk))
            .map(str::to_owned)
            .collect();
        let mut singles = BTreeSet::new();
        for token in &pairs {
            single_characters(token, &mut singles);
        }
        for token in pairs.difference(&singles) {
            delta.words.entry(token.clone()).or_default()[0] -= 1;
        }
        for token in singles.difference(&pairs) {
            delta.words.entry(token.clone()).or_default()[0] += 1;
        }
    }
    assert!(delta.words.len() > 100, "{}", delta.words.len());
    let mut store = SledStore::open(&paths.counts(), WAIT).unwrap();
    assert_eq!(store.apply(&delta).unwrap(), 0);
    drop(store);
    // The version as the store records it, written where it keeps it.
    {
        // sled lets go of its lock when its last thread has: wait for it.
        let deadline = std::time::Instant::now() + WAIT;
        let sled = loop {
            match sled::Config::new().path(paths.counts()).open() {
                Ok(sled) => break sled,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("{e}"),
            }
        };
        let meta = sled.open_tree("meta").unwrap();
        meta.insert("tokenizer_version", &3u32.to_le_bytes()[..])
            .unwrap();
        sled.flush().unwrap();
    }
    // A model compiled from those counts, as version 3 wrote it.
    let mut trainer = Trainer::open(&paths, WAIT).unwrap();
    trainer.compile(Params::default(), None).unwrap();
    assert_eq!(trainer.store().tokenizer_version().unwrap(), 3);
    drop(trainer);
    let mut bytes = std::fs::read(db.model()).unwrap();
    bytes[12..16].copy_from_slice(&3u32.to_le_bytes());
    let body = bytes.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..body]);
    bytes[body..].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(db.model(), &bytes).unwrap();
    assert_eq!(model_tokenizer_version(&db), 3);

    // It judges, with the counts it has: the Chinese ham's pairs are
    // unknown to it, its single characters are no longer made.
    let chinese_verdict = &db.classify(&[&chinese])[0];
    assert!(chinese_verdict["probability"].as_f64().unwrap().is_finite());
    let script_ham = root().join("corpora/scripts/test/ham/zh-08.eml");
    let before = db.classify(&[&script_ham])[0]["known_tokens"]
        .as_u64()
        .unwrap();
    let stats = db.stats();
    assert!(stats["vocabulary"].as_u64().unwrap() > 0);
    assert_eq!(stats["tokenizer_version"], 3);
    let text = db.ok(&["stats"], None);
    assert!(
        text.contains(&format!(
            "tokenizer 3 (this bayesmail's: {TOKENIZER_VERSION}"
        )),
        "{text}"
    );

    // It learns a new Chinese message: the first write of the counts,
    // which records this version in the store and the model (the journal
    // takes changes only over a model of this build's own version).
    let out = db.ok(&["learn", "--ham", utf8(&script_ham)], None);
    assert!(out.contains("learned"), "{out}");
    assert_eq!(model_tokenizer_version(&db), TOKENIZER_VERSION);
    let after = db.classify(&[&script_ham])[0]["known_tokens"]
        .as_u64()
        .unwrap();
    assert!(after > before, "{before} → {after}");

    // It unlearns the Chinese ham learned under version 3: its pairs were
    // never counted, so they cannot be taken back exactly, and it says so.
    let out = db.run(&["unlearn", utf8(&chinese)], None);
    assert_exit(&out, 0, &["unlearn"]);
    let note = stderr(&out);
    assert!(note.contains("could not be taken back exactly"), "{note}");
    assert_eq!(db.counts()[0], 24 - 1 + 1);

    // A training run that learns the Chinese ham again: the version stays
    // this build's, in the store and in the model.
    let summary = db.train(&[&sample_spam()], &[&sample_ham()]);
    assert_eq!(summary["learned"], 1, "{summary}");
    let store = SledStore::open(&paths.counts(), WAIT).unwrap();
    assert_eq!(store.tokenizer_version().unwrap(), TOKENIZER_VERSION);
    drop(store);
    assert_eq!(model_tokenizer_version(&db), TOKENIZER_VERSION);
    assert_eq!(db.stats()["tokenizer_version"], TOKENIZER_VERSION);
    assert_eq!(db.counts(), [25, 24]);
}
