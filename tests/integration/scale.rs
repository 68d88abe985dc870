//! The scale fixture's builder, `corpora/replicate`: every copy of a
//! message is a message of its own to the registry, and parses as the
//! original does.

use std::process::Command;

use crate::common::{Db, assert_exit, root, sample_dir, sample_ham, sample_spam, utf8};

#[test]
fn replicated_copies_are_distinct_messages_with_the_same_text() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("x3");
    let out = Command::new(root().join("corpora").join("replicate"))
        .args([utf8(&sample_dir()), utf8(&target), "3"])
        .output()
        .expect("corpora/replicate runs (needs python3)");
    assert_exit(&out, 0, &["corpora/replicate"]);
    let db = Db::new();
    let copies = |class: &std::path::Path| -> Vec<std::path::PathBuf> {
        let rel = class.strip_prefix(sample_dir()).unwrap();
        (1..=3)
            .map(|k| target.join(format!("copy-{k}")).join(rel))
            .collect()
    };
    let (spam, ham) = (copies(&sample_spam()), copies(&sample_ham()));
    let spam: Vec<&std::path::Path> = spam.iter().map(|p| p.as_path()).collect();
    let ham: Vec<&std::path::Path> = ham.iter().map(|p| p.as_path()).collect();
    let summary = db.train(&spam, &ham);
    assert_eq!(summary["learned"], 3 * 48, "{summary}");
    assert_eq!(summary["totals"], serde_json::json!([72, 72]), "{summary}");
    // A copy keeps the original's words, plus its own last line.
    let name = std::fs::read_dir(sample_spam())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .min()
        .unwrap();
    let tokens = |path: &std::path::Path| -> Vec<String> {
        let line = db.ok(&["tokens", "--json", utf8(path)], None);
        let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    };
    let original = tokens(&sample_spam().join(&name));
    let copy = tokens(&spam[1].join(&name));
    let kept = original.iter().filter(|t| copy.contains(t)).count();
    assert!(kept + 2 >= original.len(), "{original:?} vs {copy:?}");
    assert!(copy.contains(&"copy".to_string()), "{copy:?}");
    // Refuses to write over an existing target.
    let again = Command::new(root().join("corpora").join("replicate"))
        .args([utf8(&sample_dir()), utf8(&target), "3"])
        .output()
        .unwrap();
    assert_exit(&again, 2, &["corpora/replicate", "again"]);
}
