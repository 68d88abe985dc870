//! The database under attack: a damaged or replaced model file, a FIFO in
//! its place, a count store that lost its history, messages saved with an
//! mbox envelope line, and writers killed while writing the model.

use std::fs;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::*;

const MESSAGE: &[u8] = b"From: Deals <deals@offers.example>\nTo: you@example.com\n\
Subject: Cheap meds, act now\n\nBuy cheap meds now, limited offer, click here.\n";

/// Runs the binary against `db` with `input` on stdin, killing it if it has
/// not exited within a bound far above any normal run: a hang fails the test
/// instead of stalling the suite.
fn run_bounded(db: &Db, args: &[&str], input: &[u8]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args()).args(args);
    let (mut child, writer) = spawn_with_stdin(cmd, input);
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{args:?} did not exit: it blocked");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    // The child may exit before reading its input.
    let _ = writer.join().unwrap();
    out
}

/// Asserts `filter` passed `input` through with `reason=REASON`.
fn assert_passed_unscored(out: &Output, input: &[u8], reason: &str) {
    assert_exit(out, 0, &["filter", reason]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("reason={reason}")),
        "no reason={reason}: {text}"
    );
    // Without the fields filter adds (and their continuation lines), the
    // output is the input.
    let mut kept = Vec::new();
    let mut ours = false;
    for line in out.stdout.split_inclusive(|&b| b == b'\n') {
        let continuation = line.first().is_some_and(|b| *b == b' ' || *b == b'\t');
        if !continuation {
            ours = line.starts_with(b"X-Spam-");
        }
        if !ours {
            kept.extend_from_slice(line);
        }
    }
    assert!(kept == input, "message changed: {text}");
}

/// The classify verdicts of the sample corpus, by file.
fn verdicts(db: &Db) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = db
        .classify(&[&sample_spam(), &sample_ham()])
        .into_iter()
        .map(|l| (l["id"].to_string(), l["probability"].to_string()))
        .collect();
    v.sort();
    v
}

/// F12: a model with a run of bytes zeroed is refused by every reader
/// (`filter` passes the message on unscored, `classify` fails), and `train`
/// rebuilds it even though no message changed.
#[test]
fn a_damaged_model_is_refused_and_train_rebuilds_it() {
    let db = Db::new();
    db.train_sample();
    let before = verdicts(&db);
    let mut bytes = fs::read(db.model()).unwrap();
    let mid = bytes.len() / 2;
    let run = bytes.len() / 4;
    bytes[mid - run / 2..mid + run / 2].fill(0);
    fs::write(db.model(), &bytes).unwrap();

    assert_passed_unscored(
        &run_bounded(&db, &["filter"], MESSAGE),
        MESSAGE,
        "model-unreadable",
    );
    let out = db.run(&["classify", utf8(&sample_spam())], None);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("checksum mismatch"),
        "{}",
        stderr(&out)
    );

    let summary = db.train(&[&sample_spam()], &[&sample_ham()]);
    assert_eq!(summary["learned"], 0, "{summary}");
    assert_eq!(summary["snapshot_written"], true, "{summary}");
    assert_eq!(verdicts(&db), before);
}

/// F14: a FIFO at the model's path makes readers fail at once, not wait for
/// a writer that never comes.
#[cfg(unix)]
#[test]
fn a_fifo_in_place_of_the_model_fails_at_once() {
    let db = Db::new();
    db.train_sample();
    fs::remove_file(db.model()).unwrap();
    let made = Command::new("mkfifo")
        .arg(db.model())
        .status()
        .expect("mkfifo runs");
    assert!(made.success());

    assert_passed_unscored(
        &run_bounded(&db, &["filter"], MESSAGE),
        MESSAGE,
        "model-unreadable",
    );
    let out = run_bounded(&db, &["classify", utf8(&sample_spam())], b"");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
    // The writer replaces it.
    let summary = db.train(&[&sample_spam()], &[&sample_ham()]);
    assert_eq!(summary["snapshot_written"], true, "{summary}");
    assert!(fs::metadata(db.model()).unwrap().is_file());
}
