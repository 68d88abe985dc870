//! The write side and the database as users run them: `train`, `learn` and
//! `unlearn`, then `classify`, `explain` and `stats` over what was learned.
//! Every test has its own database in its own temporary directory.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use bayesmail::db::{DbPaths, Labelled, Trainer};
use bayesmail::model::Label;
use bayesmail::store::{SledStore, Store};
use bayesmail::vocab::METADATA_NAMES;

use crate::common::{
    Db, assert_exit, features, json_lines, public_corpus, sample_dir, sample_files, sample_ham,
    sample_spam, stderr, to_crlf, utf8,
};

/// A message in none of the corpora, spam-like.
const NEW_SPAM: &str = "\
From: \"Reward Centre\" <claims@reward-centre.example>
To: pat@example.org
Subject: Your parcel reward is waiting - confirm today
Date: Mon, 14 Oct 2024 09:12:44 +0000
Message-ID: <20241014091244.5521@reward-centre.example>
MIME-Version: 1.0
Content-Type: text/plain; charset=\"us-ascii\"

Congratulations! You have been selected to receive a cash reward.
Confirm your details within 24 hours at http://reward-centre.example/claim
to release your prize. Limited offer, act now.
";

/// Another message in none of the corpora, ham-like.
const NEW_HAM: &str = "\
From: Sam Ortiz <sam@orchard.example>
To: pat@example.org
Subject: Apples for Saturday
Date: Tue, 15 Oct 2024 18:03:10 +0100
Message-ID: <a1b2c3d4@orchard.example>
MIME-Version: 1.0
Content-Type: text/plain; charset=\"utf-8\"

Hi Pat,

the Bramleys are ready. Shall I bring two crates on Saturday morning, or
would the afternoon suit you better?

Sam
";

/// Checks one `classify --json` line and returns its verdict.
fn checked_verdict(line: &Value) -> &str {
    let p = line["probability"].as_f64().unwrap();
    assert!(p.is_finite() && (0.0..=1.0).contains(&p), "{line}");
    assert!(line["log_odds"].as_f64().unwrap().is_finite(), "{line}");
    assert!(line["known_tokens"].is_u64(), "{line}");
    assert!(line["id"].is_string(), "{line}");
    let verdict = line["verdict"].as_str().unwrap();
    assert!(["spam", "ham", "unsure"].contains(&verdict), "{line}");
    verdict
}

/// Copies every file of `from` into `to` (created).
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

fn sorted_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn train_on_the_sample_corpus_then_classify_it() {
    let db = Db::new();
    let summary = db.train(&[&sample_spam()], &[&sample_ham()]);
    assert_eq!(
        summary,
        json!({
            "learned": 48,
            "relearned": 0,
            "unchanged": 0,
            "duplicates": 0,
            "conflicting": 0,
            "totals": [24, 24],
            "snapshot_written": true,
        })
    );
    assert!(db.model().is_file());

    let stats = db.stats();
    assert_eq!(stats["ham_messages"], 24, "{stats}");
    assert_eq!(stats["spam_messages"], 24, "{stats}");
    assert_eq!(stats["calibrated_on"], 48, "{stats}");
    assert!(stats["vocabulary"].as_u64().unwrap() > 500, "{stats}");
    assert!(stats["model_bytes"].as_u64().unwrap() > 0, "{stats}");

    let lines = db.classify(&[&sample_ham(), &sample_spam()]);
    assert_eq!(lines.len(), 48);
    let ids: BTreeSet<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    let files = sample_files();
    let expected: BTreeSet<&str> = files.iter().map(|p| utf8(p)).collect();
    assert_eq!(ids, expected);

    let ham_prefix = format!("{}/", utf8(&sample_ham()));
    let mut wrong = Vec::new();
    let mut right = 0;
    for line in &lines {
        let verdict = checked_verdict(line);
        let id = line["id"].as_str().unwrap();
        let truth = if id.starts_with(&ham_prefix) {
            "ham"
        } else {
            "spam"
        };
        if verdict == truth {
            right += 1;
        } else if verdict != "unsure" {
            wrong.push(line);
        }
    }
    assert!(
        wrong.len() <= 8,
        "{} of 48 training messages judged the wrong class: {wrong:#?}",
        wrong.len()
    );
    assert!(right >= 24, "only {right} of 48 judged right");
}

#[test]
fn training_the_same_mail_again_changes_nothing() {
    let db = Db::new();
    db.train_sample();
    let model = db.model();
    let bytes = fs::read(&model).unwrap();
    let meta = fs::metadata(&model).unwrap();
    let stats = db.stats();

    let again = db.train(&[&sample_spam()], &[&sample_ham()]);
    assert_eq!(
        again,
        json!({
            "learned": 0,
            "relearned": 0,
            "unchanged": 48,
            "duplicates": 0,
            "conflicting": 0,
            "totals": [24, 24],
            "snapshot_written": false,
        })
    );
    // The same folders twice: every message is a duplicate, still nothing to do.
    let twice = db.train(
        &[&sample_spam(), &sample_spam()],
        &[&sample_ham(), &sample_ham()],
    );
    assert_eq!(twice["duplicates"], 48, "{twice}");
    assert_eq!(twice["unchanged"], 48, "{twice}");
    assert_eq!(twice["learned"], 0, "{twice}");
    assert_eq!(twice["snapshot_written"], false, "{twice}");

    assert!(
        fs::read(&model).unwrap() == bytes,
        "model.bin was rewritten"
    );
    let after = fs::metadata(&model).unwrap();
    assert_eq!(after.modified().unwrap(), meta.modified().unwrap());
    assert_eq!(after.ino(), meta.ino(), "model.bin was replaced");

    // sled may grow its files when it is opened again, so the database size
    // is left out; everything else must be the same.
    let without_size = |mut v: Value| {
        v.as_object_mut().unwrap().remove("size_on_disk_bytes");
        v
    };
    assert_eq!(without_size(db.stats()), without_size(stats));
}

#[test]
fn a_message_moved_to_the_other_folder_is_relearned() {
    let db = Db::new();
    let (ham, spam) = (db.path("mail/ham"), db.path("mail/spam"));
    copy_dir(&sample_ham(), &ham);
    copy_dir(&sample_spam(), &spam);
    assert_eq!(db.train(&[&spam], &[&ham])["learned"], 48);

    let from = sorted_files(&spam).remove(0);
    let moved = ham.join(from.file_name().unwrap());
    fs::rename(&from, &moved).unwrap();
    let summary = db.train(&[&spam], &[&ham]);
    assert_eq!(
        summary,
        json!({
            "learned": 0,
            "relearned": 1,
            "unchanged": 47,
            "duplicates": 0,
            "conflicting": 0,
            "totals": [25, 23],
            "snapshot_written": true,
        })
    );
    assert_eq!(db.counts(), [25, 23]);

    // Given as both spam and ham in one run: a learned message (now ham) and
    // a new one. The run refuses, names them and changes nothing (issue 18,
    // trap 1).
    let both = db.path("both.eml");
    fs::copy(&moved, &both).unwrap();
    let new = db.path("new.eml");
    fs::write(&new, NEW_HAM).unwrap();
    let args = [&spam, &both, &new].map(|p| utf8(p).to_string());
    let out = db.run(
        &[
            "train",
            "--spam",
            &args[0],
            &args[1],
            &args[2],
            "--ham",
            utf8(&ham),
            utf8(&new),
        ],
        None,
    );
    assert_exit(&out, 2, &["train", "both labels"]);
    let err = stderr(&out);
    assert!(
        err.contains("2 messages are given as both spam and ham"),
        "{err}"
    );
    assert!(
        err.contains(utf8(&new)) && err.contains(utf8(&both)),
        "{err}"
    );
    assert_eq!(db.counts(), [25, 23]);
    assert_eq!(
        db.ok(&["learn", "--ham", utf8(&both)], None).trim(),
        "already learned as ham"
    );
    let out = db.run(&["unlearn", utf8(&new)], None);
    assert_exit(&out, 2, &["unlearn", "new.eml"]);
    assert_eq!(
        stderr(&out),
        format!(
            "bayesmail: {}: this message was never learned, so it cannot be unlearned\n",
            utf8(&new)
        ),
        "one line naming the file"
    );
}

#[test]
fn learn_and_unlearn_one_message() {
    let db = Db::new();
    db.train_sample();
    let vocabulary = |db: &Db| db.stats()["vocabulary"].as_u64().unwrap();
    let base = vocabulary(&db);
    let file = db.path("reward.eml");
    fs::write(&file, NEW_SPAM).unwrap();
    let file = utf8(&file);

    assert_eq!(
        db.ok(&["learn", "--spam", file], None).trim(),
        "learned as spam"
    );
    assert_eq!(db.counts(), [24, 25]);
    let grown = vocabulary(&db);
    assert!(grown > base, "{grown} tokens after learning, {base} before");

    let again = db.ok(&["learn", "--spam", file], None);
    assert!(again.contains("already"), "{again}");
    assert_eq!(db.counts(), [24, 25]);

    assert_eq!(
        db.ok(&["unlearn", file], None).trim(),
        "unlearned (was spam)"
    );
    assert_eq!(db.counts(), [24, 24]);
    assert_eq!(vocabulary(&db), base, "unlearning left tokens behind");

    let other = db.path("apples.eml");
    fs::write(&other, NEW_HAM).unwrap();
    let out = db.run(&["unlearn", utf8(&other)], None);
    assert_exit(&out, 2, &["unlearn", "apples.eml"]);
    assert!(stderr(&out).contains("never learned"), "{}", stderr(&out));
    assert_eq!(db.counts(), [24, 24]);

    // Standard input.
    assert_eq!(
        db.ok(&["learn", "--spam", "-"], Some(NEW_SPAM.as_bytes()))
            .trim(),
        "learned as spam"
    );
    assert_eq!(db.counts(), [24, 25]);

    // The same message stored with CRLF line ends is the same message.
    let crlf_bytes = to_crlf(NEW_SPAM.as_bytes());
    let crlf = db.path("reward-crlf.eml");
    fs::write(&crlf, &crlf_bytes).unwrap();
    assert_eq!(
        db.ok(&["learn", "--ham", utf8(&crlf)], None).trim(),
        "moved to ham"
    );
    assert_eq!(db.counts(), [25, 24]);
    assert_eq!(vocabulary(&db), grown);
    assert_eq!(
        db.ok(&["unlearn", "-"], Some(&crlf_bytes)).trim(),
        "unlearned (was ham)"
    );
    assert_eq!(db.counts(), [24, 24]);
    assert_eq!(vocabulary(&db), base, "unlearning left tokens behind");
}

#[test]
fn commands_that_cannot_run_exit_2() {
    let db = Db::new();
    fs::create_dir(db.dir()).unwrap();
    let spam_file = sorted_files(&sample_spam()).remove(0);
    for args in [
        &["classify", utf8(&sample_ham())][..],
        &["classify", "--json", "-"],
        &["explain", utf8(&spam_file)],
        &["stats", "--json"],
    ] {
        let out = db.run(args, Some(NEW_SPAM.as_bytes()));
        assert_exit(&out, 2, args);
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            stderr(&out).contains("`bayesmail train`"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert!(!db.model().exists());

    // Usage errors.
    for args in [
        &["learn"][..],
        &["learn", "-"],
        &["learn", "--spam", "--ham", "-"],
        &["train"],
        &["train", "--json", "--spam"],
        &["learn", "--spam", "--wait", "soon", "-"],
    ] {
        let out = db.run(args, Some(NEW_SPAM.as_bytes()));
        assert_exit(&out, 2, args);
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let out = db.run(&["learn", "-"], Some(NEW_SPAM.as_bytes()));
    assert!(stderr(&out).contains("--spam"), "{}", stderr(&out));
    let out = db.run(&["train"], None);
    assert!(
        stderr(&out).contains("nothing to learn"),
        "{}",
        stderr(&out)
    );
    assert!(
        !DbPaths::new(db.dir()).counts().exists(),
        "a usage error created the count store"
    );
}

#[test]
fn readers_never_need_the_writers_lock() {
    let db = Db::new();
    db.train_sample();
    let file = db.path("reward.eml");
    fs::write(&file, NEW_SPAM).unwrap();
    let spam_file = sorted_files(&sample_spam()).remove(1);

    // What a running writer holds: the writers' lock, then the store.
    let paths = DbPaths::new(db.dir());
    let held = (
        bayesmail::db::WriterLock::take(&paths, Duration::ZERO).expect("no other writer"),
        SledStore::open(&paths.counts(), Duration::ZERO).expect("nobody holds the store"),
    );
    assert_eq!(db.classify(&[&sample_ham()]).len(), 24);
    db.ok(&["explain", utf8(&spam_file)], None);
    db.ok(&["explain", "--json", "-"], Some(NEW_SPAM.as_bytes()));
    assert_eq!(db.counts(), [24, 24]);

    // A learn waits, then leaves the message for the writer.
    let args = ["learn", "--wait", "1", "--spam", utf8(&file)];
    let start = Instant::now();
    let out = db.run(&args, None);
    let took = start.elapsed();
    assert_exit(&out, 0, &args);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "queued as spam\n");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(20),
        "gave up after {took:?}"
    );
    let ham = sample_ham();
    let args = [
        "train",
        "--wait",
        "0",
        "--spam",
        utf8(&file),
        "--ham",
        utf8(&ham),
    ];
    let out = db.run(&args, None);
    assert_exit(&out, 2, &args);
    assert!(stderr(&out).contains("in use"), "{}", stderr(&out));

    drop(held);
    assert_eq!(db.counts(), [24, 24]);
    assert_eq!(
        db.ok(&["learn", "--wait", "5", "--spam", utf8(&file)], None)
            .trim(),
        "already learned as spam",
        "taken in first"
    );
    assert_eq!(db.counts(), [24, 25]);
}

/// Bigger training input for the kill test: the public corpus if present,
/// else many altered copies of the sample corpus. Returns (spam, ham).
fn big_input(db: &Db) -> (Vec<PathBuf>, Vec<PathBuf>) {
    if let Some(dir) = public_corpus() {
        return (
            vec![dir.join("spam-1"), dir.join("spam-2")],
            vec![dir.join("easy-ham-1")],
        );
    }
    let mut out = Vec::new();
    for label in ["spam", "ham"] {
        let to = db.path(&format!("big/{label}"));
        fs::create_dir_all(&to).unwrap();
        for file in sorted_files(&sample_dir().join(label)) {
            let bytes = fs::read(&file).unwrap();
            let name = file.file_name().unwrap().to_str().unwrap();
            // A header of its own makes each copy a different message.
            for i in 0..84 {
                let mut copy = format!("X-Copy: {i}\n").into_bytes();
                copy.extend_from_slice(&bytes);
                fs::write(to.join(format!("{i:02}-{name}")), copy).unwrap();
            }
        }
        out.push(vec![to]);
    }
    let ham = out.pop().unwrap();
    (out.pop().unwrap(), ham)
}

/// Message counts and registry size of the count store, checked for
/// consistency: every message learned has its registry entry.
fn store_totals(db: &Db) -> [u64; 2] {
    let store = SledStore::open(&DbPaths::new(db.dir()).counts(), Duration::from_secs(10))
        .expect("the count store opens");
    let totals = store.totals().unwrap().messages;
    assert_eq!(
        store.registry_len().unwrap(),
        totals[0] + totals[1],
        "registry and message counts disagree"
    );
    totals
}

/// Size and modification time of every file of the count store: they change
/// once a training run starts writing counts.
fn store_files(db: &Db) -> Vec<(PathBuf, u64, SystemTime)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, u64, SystemTime)>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.metadata() {
                Ok(m) if m.is_dir() => walk(&path, out),
                Ok(m) => out.push((path, m.len(), m.modified().unwrap())),
                Err(_) => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(&DbPaths::new(db.dir()).counts(), &mut out);
    out.sort();
    out
}

/// When to kill a training run.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// This long after it started.
    After(Duration),
    /// As soon as the count store's files change: it has started learning.
    FirstWrite,
    /// While it writes the new model (its temporary file exists), after
    /// every chunk has reached the store.
    ModelWrite,
}

/// Whether a temporary file of a model being written is in the database.
fn model_being_written(db: &Db) -> bool {
    fs::read_dir(db.dir()).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(".model.bin.") && name.ends_with(".tmp")
        })
    })
}

#[test]
fn a_training_run_killed_at_any_moment_leaves_a_usable_database() {
    let db = Db::new();
    db.train_sample();
    let old = [24, 24];
    let (spam, ham) = big_input(&db);
    let mut args = db.global_args();
    args.extend(["train".into(), "--json".into(), "--spam".into()]);
    args.extend(spam.iter().map(|p| utf8(p).to_string()));
    args.push("--ham".into());
    args.extend(ham.iter().map(|p| utf8(p).to_string()));

    // The binary is a debug build and reading the input takes it seconds (more
    // on a busy machine), so fixed delays would all land while it reads. The
    // first kills are early (opening the store, reading); one comes as soon
    // as the run starts writing counts, which measures how long reading
    // takes, and the next that long plus a margin after the start, while it
    // learns chunks; the last while it writes the model, when every chunk is
    // in the store and only the snapshot is missing.
    let mut schedule = vec![
        KillAt::After(Duration::from_millis(50)),
        KillAt::After(Duration::from_millis(1_000)),
        KillAt::FirstWrite,
    ];
    let mut reading: Option<Duration> = None;
    let mut seen = Vec::new();
    let mut store_before = old;
    let mut i = 0;
    while i < schedule.len() {
        let at = schedule[i];
        i += 1;
        let mut child = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        match at {
            KillAt::After(delay) => std::thread::sleep(delay),
            KillAt::FirstWrite => {
                // Let it open the store (which may touch its files) first.
                std::thread::sleep(Duration::from_millis(1_000));
                let before = store_files(&db);
                while child.try_wait().unwrap().is_none()
                    && store_files(&db) == before
                    && start.elapsed() < Duration::from_secs(120)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let took = start.elapsed();
                reading = Some(took);
                schedule.push(KillAt::After(took + Duration::from_millis(1_500)));
                schedule.push(KillAt::ModelWrite);
            }
            KillAt::ModelWrite => {
                while child.try_wait().unwrap().is_none()
                    && !model_being_written(&db)
                    && start.elapsed() < Duration::from_secs(120)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let finished = child.try_wait().unwrap();
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let killed_after = start.elapsed();
        if let Some(status) = finished {
            assert!(status.success(), "train exited with {status}");
        }

        let store = store_totals(&db);
        assert!(
            store[0] >= store_before[0] && store[1] >= store_before[1],
            "the store went from {store_before:?} to {store:?}"
        );
        store_before = store;

        let lines = db.classify(&[&sample_ham(), &sample_spam()]);
        assert_eq!(lines.len(), 48, "after a kill at {at:?}");
        for line in &lines {
            checked_verdict(line);
        }
        let counts = db.counts();
        assert!(
            counts == old || (counts[0] > old[0] && counts[1] > old[1]),
            "after a kill at {at:?} the model has {counts:?}"
        );
        eprintln!(
            "train killed at {at:?} ({killed_after:.1?}, {status}): store {store:?}, model {counts:?}"
        );
        seen.push(counts);
    }
    assert!(reading.is_some());

    let summary = db.train(
        &spam.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &ham.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
    );
    let totals: [u64; 2] = serde_json::from_value(summary["totals"].clone()).unwrap();
    assert!(totals[0] > old[0] && totals[1] > old[1], "{summary}");
    assert_eq!(store_totals(&db), totals);
    assert_eq!(
        db.counts(),
        totals,
        "the finished run left the model behind the store: {summary}"
    );
    for counts in seen {
        assert!(counts[0] <= totals[0] && counts[1] <= totals[1]);
    }
    assert_eq!(db.classify(&[&sample_ham(), &sample_spam()]).len(), 48);
}

/// A run killed after its last chunk reached the store but before the new
/// model was written leaves a store ahead of the model. The next run must
/// bring the model up to date even though it has nothing new to learn.
#[test]
fn a_rerun_after_a_kill_before_the_snapshot_writes_the_model() {
    let db = Db::new();
    db.train_sample();
    {
        // What `train` does before it calibrates and compiles; dropping the
        // trainer here is where a SIGKILL would stop it.
        let mut trainer = Trainer::open(&DbPaths::new(db.dir()), Duration::from_secs(10)).unwrap();
        let raw = NEW_SPAM.as_bytes();
        let message = Labelled {
            features: features(raw),
            identity: bayesmail::message::Identity::of(raw),
            label: Label::Spam,
        };
        let summary = trainer.learn(&[message], &mut |_| {}).unwrap();
        assert_eq!(summary.learned, 1);
    }
    assert_eq!(db.counts(), [24, 24], "the model is not written yet");

    let file = db.path("reward.eml");
    fs::write(&file, NEW_SPAM).unwrap();
    let summary = db.train(&[&sample_spam(), &file], &[&sample_ham()]);
    assert_eq!(summary["totals"], json!([24, 25]), "{summary}");
    assert_eq!(
        db.counts(),
        [24, 25],
        "train left the model behind the store: {summary}"
    );
}

#[test]
fn explain_json_lists_the_strongest_evidence_first() {
    let db = Db::new();
    db.train_sample();
    let file = sample_spam().join("02-lottery-winner.eml");
    assert!(file.is_file());
    let explain = |extra: &[&str]| {
        let mut args = vec!["explain", "--json"];
        args.extend_from_slice(extra);
        args.push(utf8(&file));
        let lines = json_lines(&db.ok(&args, None));
        assert_eq!(lines.len(), 1);
        lines.into_iter().next().unwrap()
    };
    let v = explain(&[]);
    assert!(["spam", "ham", "unsure"].contains(&v["verdict"].as_str().unwrap()));
    assert_ne!(v["verdict"], "ham", "a training spam explained as ham: {v}");
    let p = v["probability"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&p), "{v}");

    let tokens = v["tokens"].as_array().unwrap();
    assert!(!tokens.is_empty() && tokens.len() <= 20, "{v}");
    let llrs: Vec<f64> = tokens
        .iter()
        .map(|t| {
            assert!(t["token"].is_string() && t["used"].is_boolean(), "{t}");
            assert!(
                t["ham"].as_u64().unwrap() + t["spam"].as_u64().unwrap() > 0,
                "{t}"
            );
            t["llr"].as_f64().unwrap()
        })
        .collect();
    assert!(llrs.iter().all(|x| x.is_finite()), "{llrs:?}");
    assert!(
        llrs.windows(2).all(|w| w[0].abs() >= w[1].abs()),
        "not sorted by |llr|: {llrs:?}"
    );

    let metadata = v["metadata"].as_array().unwrap();
    assert_eq!(metadata.len(), 12, "{v}");
    let names: BTreeSet<&str> = metadata.iter().map(|m| m[0].as_str().unwrap()).collect();
    assert_eq!(names, METADATA_NAMES.into_iter().collect());
    let meta_llrs: Vec<f64> = metadata.iter().map(|m| m[2].as_f64().unwrap()).collect();
    assert!(metadata.iter().all(|m| m[1].as_f64().unwrap().is_finite()));
    assert!(
        meta_llrs.windows(2).all(|w| w[0].abs() >= w[1].abs()),
        "metadata not strongest first: {meta_llrs:?}"
    );

    let top3 = explain(&["--top", "3"]);
    assert_eq!(top3["tokens"].as_array().unwrap()[..], tokens[..3]);
}

/// Paths that are not mailboxes stop a training run before it reads
/// anything, with one line that names each of them.
#[test]
fn train_names_every_bad_path_on_one_line() {
    let db = Db::new();
    let ham = sample_ham();
    let args = [
        "train",
        "--spam",
        "/nonexistent-a",
        "/nonexistent-b",
        "--ham",
        utf8(&ham),
    ];
    let out = db.run(&args, None);
    assert_exit(&out, 2, &args);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    for want in ["/nonexistent-a", "/nonexistent-b", "nothing was learned"] {
        assert!(err.contains(want), "{err}");
    }
    assert!(!db.dir().join("model.bin").exists());
}

/// An empty message on standard input is said once, naming it once.
#[test]
fn learn_of_an_empty_stdin_says_so_once() {
    let db = Db::new();
    let out = db.run(&["learn", "--spam", "-"], Some(b""));
    assert_exit(&out, 2, &["learn", "--spam", "-"]);
    assert_eq!(stderr(&out).trim_end(), "bayesmail: empty message: -");
}

/// A writer makes its database's missing parents, but not a home
/// directory that does not exist (a stale or mistyped `HOME`).
#[test]
fn a_writer_does_not_make_a_missing_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("gone");
    let spam = sample_files()
        .into_iter()
        .find(|f| f.starts_with(sample_spam()))
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .env_clear()
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin")
        .args(["learn", "--spam", utf8(&spam)])
        .output()
        .unwrap();
    assert_exit(&out, 2, &["learn", "with HOME gone"]);
    let err = stderr(&out);
    assert!(
        err.contains("does not exist") && err.contains(utf8(&home)),
        "{err}"
    );
    assert!(!home.exists());
}

/// A run given many paths that are not mailboxes (a glob gone wrong) says
/// so in one line of reasonable length: the first few, and how many more.
#[test]
fn many_bad_paths_are_named_in_one_short_line() {
    let db = Db::new();
    let missing: Vec<String> = (0..40)
        .map(|i| crate::common::utf8(&db.path(&format!("missing-{i:02}"))).to_string())
        .collect();
    let mut args = vec!["train", "--spam"];
    args.extend(missing[..20].iter().map(String::as_str));
    args.push("--ham");
    args.extend(missing[20..].iter().map(String::as_str));
    let out = db.run(&args, None);
    assert_exit(&out, 2, &["train"]);
    let err = crate::common::stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("missing-00") && !err.contains("missing-05"),
        "{err}"
    );
    assert!(err.contains("… and 35 more"), "{err}");
    assert!(err.len() < 1000, "{} bytes: {err}", err.len());
}

/// A mail client leaves an emptied folder as an empty file: the nightly
/// run over it and the inbox learns the inbox, and the folder counts as
/// one with nothing in it.
#[test]
fn a_training_run_over_an_emptied_mbox_learns_the_other_folders() {
    let db = Db::new();
    db.train_sample();
    let junk = db.path("Junk");
    fs::write(&junk, b"").unwrap();
    let inbox = db.path("inbox.eml");
    fs::write(&inbox, NEW_HAM).unwrap();
    let summary = db.train(&[&junk], &[&inbox]);
    assert_eq!(summary["learned"], 1, "{summary}");
    assert_eq!(db.counts(), [25, 24]);
    // One message asked for, and the file holds none: said so.
    let out = db.run(&["learn", "--spam", utf8(&junk)], None);
    assert_exit(&out, 2, &["no message in"]);
}
