//! Issue 18: the traps a real mailbox springs. Maildir++ folders, mbox
//! input where one message was expected, single messages with an envelope
//! line, one-class models and databases created by accident, Ctrl-C during
//! `train`, and error messages.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::*;

/// The sample corpus's messages of one class, sorted.
fn sample(label: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(sample_dir().join(label))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "eml"))
        .collect();
    files.sort();
    files
}

/// A Maildir++ mailbox: the inbox holds `ham` sample ham messages, `.Junk`
/// holds `spam` sample spam messages, `.Trash` one spam and `.Sent` one
/// ham (neither should be learned from the README's command).
fn maildir_plus_plus(root: &Path, ham: usize, spam: usize) {
    let put = |dir: &Path, files: &[PathBuf]| {
        fs::create_dir_all(dir.join("cur")).unwrap();
        fs::create_dir_all(dir.join("new")).unwrap();
        fs::create_dir_all(dir.join("tmp")).unwrap();
        // Unique names, as a delivery agent makes them.
        let folder = dir.file_name().unwrap().to_str().unwrap().replace('.', "");
        for (i, f) in files.iter().enumerate() {
            fs::copy(f, dir.join("cur").join(format!("{folder}{i}.host:2,S"))).unwrap();
        }
    };
    let hams = sample("ham");
    let spams = sample("spam");
    put(root, &hams[..ham]);
    put(&root.join(".Junk"), &spams[..spam]);
    put(&root.join(".Trash"), &spams[spam..spam + 1]);
    put(&root.join(".Sent"), &hams[ham..ham + 1]);
}

/// An mbox of `messages`, each with an envelope line and mboxrd escaping.
fn mbox_of(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        bayesmail::mailbox::write_mbox_message(&mut out, Some("sender@example.org"), m).unwrap();
    }
    out
}

fn sample_bytes(label: &str, n: usize) -> Vec<Vec<u8>> {
    sample(label)[..n]
        .iter()
        .map(|p| fs::read(p).unwrap())
        .collect()
}

/// The "scanned N messages …" summary line of `scan`.
fn scanned(out: &std::process::Output) -> String {
    stderr(out)
        .lines()
        .find(|l| l.starts_with("scanned "))
        .unwrap_or_else(|| panic!("no summary in {}", stderr(out)))
        .split(" in ")
        .next()
        .unwrap()
        .to_string()
}

/// Trap 1: the README's `train --spam ~/Maildir/.Junk --ham ~/Maildir`
/// learns the inbox as ham and `.Junk` as spam, and nothing from `.Trash`
/// or `.Sent`.
#[test]
fn maildir_root_means_its_own_cur_and_new() {
    let db = Db::new();
    let mail = db.path("Maildir");
    maildir_plus_plus(&mail, 6, 5);
    let summary = db.train(&[&mail.join(".Junk")], &[&mail]);
    assert_eq!(summary["learned"], 11, "{summary}");
    assert_eq!(summary["totals"], serde_json::json!([6, 5]), "{summary}");
    assert_eq!(db.counts(), [6, 5]);

    // Named, a subfolder is read; --recursive reads all of them.
    let out = db.run(
        &["train", "--json", "--ham", utf8(&mail.join(".Sent"))],
        None,
    );
    assert_exit(&out, 0, &["train", "--ham", ".Sent"]);
    assert_eq!(db.counts(), [7, 5]);
}

/// Trap 1: the same message under both labels in one run is an error that
/// names it, and the run changes nothing.
#[test]
fn a_message_given_as_both_spam_and_ham_stops_the_run_and_is_named() {
    let db = Db::new();
    let mail = db.path("Maildir");
    maildir_plus_plus(&mail, 6, 5);
    db.train(&[&mail.join(".Junk")], &[&mail]);
    let model = fs::read(db.model()).unwrap();
    let junk = mail.join(".Junk");
    let out = db.run(
        &[
            "train",
            "--recursive",
            "--spam",
            utf8(&junk),
            "--ham",
            utf8(&mail),
        ],
        None,
    );
    assert_exit(&out, 2, &["train", "--recursive"]);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}/cur/Junk0.host:2,S", junk.display())),
        "{err}"
    );
    assert!(err.contains("both spam and ham"), "{err}");
    assert!(err.contains("nothing was learned"), "{err}");
    assert_eq!(db.counts(), [6, 5]);
    assert_eq!(fs::read(db.model()).unwrap(), model, "model unchanged");
}

/// Trap 1: `scan --move-spam-to ~/Maildir/.Junk ~/Maildir` counts the same
/// with and without --dry-run, with and without --recursive: the target's
/// own messages are not scanned again.
#[test]
fn scan_dry_run_counts_equal_the_real_runs() {
    let db = Db::new();
    db.train_sample();
    for recursive in [false, true] {
        let mail = db.path(&format!("Maildir-{recursive}"));
        maildir_plus_plus(&mail, 3, 3);
        // Spam in the inbox, to be moved to .Junk.
        for (i, f) in sample("spam")[10..14].iter().enumerate() {
            fs::copy(f, mail.join("new").join(format!("s{i}.host"))).unwrap();
        }
        let junk = mail.join(".Junk");
        let mut args = vec!["scan", "--move-spam-to", utf8(&junk)];
        if recursive {
            args.push("--recursive");
        }
        args.push(utf8(&mail));
        let mut dry = args.clone();
        dry.insert(1, "--dry-run");
        let would = db.run(&dry, None);
        assert_exit(&would, 0, &dry);
        let did = db.run(&args, None);
        assert_exit(&did, 0, &args);
        assert_eq!(scanned(&would), scanned(&did), "recursive: {recursive}");
        let total = if recursive { 3 + 4 + 2 } else { 3 + 4 };
        assert_eq!(scanned(&did), format!("scanned {total} messages"));
    }
}

/// Trap 2: several messages on stdin or in a file given to `learn`,
/// `unlearn` and `classify` are each handled.
#[test]
fn learn_unlearn_classify_take_each_message_of_an_mbox() {
    let db = Db::new();
    db.train_sample();
    let fresh = |n: usize, word: &str| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                format!(
                    "From: x{i}@{word}.example\nSubject: {word} offer {i}\n\n\
                     From the desk of {word}, 10:30: buy {word} {i} now\n"
                )
                .into_bytes()
            })
            .collect()
    };
    let stdin_mbox = mbox_of(&fresh(3, "alpha"));
    let before = db.counts();
    let out = db.run(&["learn", "--spam", "-"], Some(&stdin_mbox));
    assert_exit(&out, 0, &["learn", "--spam", "-"]);
    assert!(
        stderr(&out).contains("3 messages: 3 learned as spam"),
        "{}",
        stderr(&out)
    );
    assert_eq!(db.counts(), [before[0], before[1] + 3]);

    let file = db.path("archive.mbox");
    fs::write(&file, mbox_of(&fresh(4, "beta"))).unwrap();
    db.ok(&["learn", "--spam", utf8(&file)], None);
    assert_eq!(db.counts(), [before[0], before[1] + 7]);

    let lines = json_lines(&db.ok(&["classify", "--json", "-"], Some(&stdin_mbox)));
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[1]["id"].as_str().unwrap().starts_with("-:"));

    let out = db.ok(&["unlearn", "-"], Some(&stdin_mbox));
    assert_eq!(out.matches("unlearned (was spam)").count(), 3, "{out}");
    db.ok(&["unlearn", utf8(&file)], None);
    assert_eq!(db.counts(), before);
}

/// A large mbox is learned and unlearned a part at a time, so that it is
/// never all in memory: in parts (here one message each) it counts as
/// learned at once, a message learned under the other label moves, a
/// second learn changes nothing, and unlearning it in parts takes back
/// every count.
#[test]
fn an_mbox_learned_a_part_at_a_time_counts_as_one_learned_at_once() {
    let (whole, parts) = (Db::new(), Db::new());
    whole.train_sample();
    parts.train_sample();
    let before = parts.stats();
    let messages: Vec<Vec<u8>> = (0..9).map(|i| unseen(i, "in parts")).collect();
    let mbox = mbox_of(&messages);
    let file = parts.path("big.mbox");
    fs::write(&file, &mbox).unwrap();
    for db in [&whole, &parts] {
        db.ok(&["learn", "--ham", "-"], Some(&messages[4]));
    }
    whole.ok(&["learn", "--spam", utf8(&file)], None);
    let out = parts.run_in_parts(&["learn", "--spam", utf8(&file)], b"");
    assert_exit(&out, 0, &["learn in parts"]);
    let said = "9 messages: 8 learned as spam, 1 moved to spam, 0 already learned as spam";
    assert!(stderr(&out).contains(said), "{}", stderr(&out));
    let (a, b) = (whole.stats(), parts.stats());
    for key in ["ham_messages", "spam_messages", "vocabulary"] {
        assert_eq!(a[key], b[key], "{key}");
    }
    let out = parts.run_in_parts(&["learn", "--spam", utf8(&file)], b"");
    let said = "9 messages: 0 learned as spam, 0 moved to spam, 9 already learned as spam";
    assert!(stderr(&out).contains(said), "{}", stderr(&out));
    let out = parts.run_in_parts(&["unlearn", "-"], &mbox);
    assert_exit(&out, 0, &["unlearn in parts"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches(": unlearned (was spam)").count(),
        9,
        "{stdout}"
    );
    let after = parts.stats();
    for key in ["ham_messages", "spam_messages", "vocabulary"] {
        assert_eq!(after[key], before[key], "{key}");
    }
}

/// Trap 2, for `filter`: what a delivery agent hands it is one message,
/// and agents pass body lines starting with "From " unescaped, so input that
/// looks like an mbox of several messages is judged whole, every byte kept,
/// with no warning. Judging only its first part let a spam after a harmless
/// message and a line like a separator into the inbox. An envelope line on
/// top changes nothing.
#[test]
fn filter_judges_input_that_looks_like_an_mbox_as_one_message() {
    let db = Db::new();
    db.train_sample();
    let filter = |input: &[u8]| {
        let out = db.run(&["filter"], Some(input));
        assert_exit(&out, 0, &["filter"]);
        assert_eq!(stderr(&out), "", "no warning");
        let (restored, status, _) = strip_ours(&out.stdout);
        assert!(restored == input, "every byte kept");
        status
    };
    let [ham]: [Vec<u8>; 1] = sample_bytes("ham", 1).try_into().unwrap();
    let several = mbox_of(&[vec![ham.clone()], sample_bytes("spam", 2)].concat());
    let envelope_end = several.iter().position(|&b| b == b'\n').unwrap() + 1;
    let whole = filter(&several);
    assert_eq!(whole, filter(&several[envelope_end..]), "judged whole");
    assert_ne!(whole, filter(&mbox_of(&[ham])), "not as its first part");
    assert_ne!(status_word(&whole), "Unknown", "{whole}");

    // A separator and a header line at the end of a spam change nothing.
    let spam = mbox_of(&sample_bytes("spam", 1));
    let dodge = [&spam[..], b"\nFrom x@y Mon Jan  1 10:00:00 2024\nX: y\n"].concat();
    assert_eq!(status_word(&filter(&dodge)), "Yes");

    let one = b"From a@b.example Thu Jan  1 00:00:00 1970\nSubject: notes\n\n\
                Hello,\n\nFrom Monday at 10:30 we meet upstairs.\nSee you there.\n"
        .to_vec();
    assert_ne!(status_word(&filter(&one)), "Unknown");
}

/// Trap 3: a file with one envelope line and one message is a message: its
/// id is its path. `scan --move-spam-to` leaves it where it is and says
/// so, and `--copy-spam-to` copies it: such a file is also an mbox folder
/// of one message, which a delivery may be adding to (moved, the mail
/// delivered into it went to Junk inside the spam's file).
#[test]
fn one_message_with_an_envelope_line_is_a_message_copied_not_moved() {
    let db = Db::new();
    db.train_sample();
    let dir = db.path("saved");
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("spam.eml");
    fs::write(&file, mbox_of(&sample_bytes("spam", 1))).unwrap();
    let lines = db.classify(&[&file]);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["id"], utf8(&file), "{lines:?}");
    assert_eq!(lines[0]["verdict"], "spam", "{lines:?}");

    let junk = db.path("Junk");
    let before = fs::read(&file).unwrap();
    let out = db.run(&["scan", "--move-spam-to", utf8(&junk), utf8(&file)], None);
    assert_exit(&out, 1, &["scan", "--move-spam-to"]);
    assert!(stderr(&out).contains("not moved"), "{}", stderr(&out));
    assert_eq!(fs::read(&file).unwrap(), before, "left as it was");
    assert_eq!(fs::read_dir(junk.join("new")).unwrap().count(), 0);
    let out = db.run(&["scan", "--copy-spam-to", utf8(&junk), utf8(&file)], None);
    assert_exit(&out, 0, &["scan", "--copy-spam-to"]);
    assert_eq!(fs::read_dir(junk.join("new")).unwrap().count(), 1);
    assert_eq!(fs::read(&file).unwrap(), before);
}

/// Trap 4: a bad path stops `train` before anything is written; no model
/// is written until both classes have a message; `unlearn` and the reading
/// commands never create a database.
#[test]
fn no_one_class_model_and_no_database_by_accident() {
    let db = Db::new();
    let typo = db.path("Maildir/.Hma");
    let out = db.run(
        &[
            "train",
            "--spam",
            utf8(&sample_spam()),
            "--ham",
            utf8(&typo),
        ],
        None,
    );
    assert_exit(&out, 2, &["train", "--ham", "TYPO"]);
    let err = stderr(&out);
    assert!(err.contains(utf8(&typo)), "{err}");
    assert!(err.contains("no model was written"), "{err}");
    assert!(!db.model().exists());

    let out = db.run(&["train", "--spam", utf8(&sample_spam())], None);
    assert_exit(&out, 0, &["train", "--spam"]);
    let out = stderr(&out);
    assert!(out.contains("no model written"), "{out}");
    assert!(out.contains("no ham"), "{out}");
    assert!(!db.model().exists());
    let message = fs::read(&sample("ham")[0]).unwrap();
    let out = db.run(&["filter"], Some(&message));
    let (_, status, _) = strip_ours(&out.stdout);
    assert!(status.starts_with("Unknown, reason=no-model"), "{status}");

    let other = Db::new();
    let msg = utf8(&sample("ham")[0]).to_string();
    let out = other.run(&["unlearn", &msg], None);
    assert_exit(&out, 2, &["unlearn"]);
    for args in [
        vec!["classify", msg.as_str()],
        vec!["scan", msg.as_str()],
        vec!["explain", msg.as_str()],
        vec!["stats"],
        vec!["filter"],
    ] {
        other.run(&args, Some(&message));
        assert!(!other.dir().exists(), "{args:?} created the database");
    }
}

/// Trap 6: Ctrl-C during `train` says what was kept (nothing: a run is
/// stored whole, after reading), and the database and model agree.
#[test]
fn ctrl_c_during_train_says_what_was_kept_and_stats_agrees() {
    let Some(corpus) = public_corpus() else {
        return;
    };
    let db = Db::new();
    db.train_sample();
    let model = fs::read(db.model()).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args()).arg("train").arg("--spam");
    for d in ["spam-1", "spam-2"] {
        cmd.arg(corpus.join(d));
    }
    cmd.arg("--ham");
    for d in ["easy-ham-1", "easy-ham-2", "hard-ham-1"] {
        cmd.arg(corpus.join(d));
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the run has read some megabytes of mail (past the model
    // and store it opens first), then interrupt.
    // Polling is bounded by a count, not asserted on.
    let io = format!("/proc/{}/io", child.id());
    let read_bytes = || -> u64 {
        fs::read_to_string(&io)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("rchar: ").map(|n| n.trim().parse().ok()))
            })
            .flatten()
            .unwrap_or(0)
    };
    for _ in 0..2400 {
        std::thread::sleep(std::time::Duration::from_millis(25));
        if read_bytes() > 12 << 20 {
            break;
        }
    }
    // SAFETY: sends a signal to our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("interrupted"))
        .unwrap_or_else(|| panic!("no interrupted line: {err}"));
    if line.contains("while reading") {
        assert!(line.contains("nothing was stored"), "{line}");
        assert_eq!(db.counts(), [24, 24], "{line}");
        assert_eq!(fs::read(db.model()).unwrap(), model, "{line}");
    } else {
        // Past reading (a slow signal): everything was stored.
        // "interrupted after reading: all N messages were stored (H ham, S
        // spam in the database); …"
        let numbers: Vec<u64> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter(|w| !w.is_empty())
            .map(|w| w.parse().unwrap())
            .collect();
        assert!(line.contains("messages were stored"), "{line}");
        assert_eq!(db.counts(), [numbers[1], numbers[2]], "{line}");
        assert!(numbers[0] > 4000, "{line}");
    }
}

/// Trap 6: on a terminal, `train` shows a total, a percentage and an ETA.
#[test]
fn train_progress_shows_total_percentage_and_eta() {
    let Some(corpus) = public_corpus() else {
        return;
    };
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("script(1) not found: test skipped");
        return;
    }
    let db = Db::new();
    let mut line = format!("'{}'", env!("CARGO_BIN_EXE_bayesmail"));
    for a in db.global_args() {
        line += &format!(" '{a}'");
    }
    line += &format!(
        " train --spam '{}' --ham '{}'",
        corpus.join("spam-1").display(),
        corpus.join("hard-ham-1").display()
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ETA"), "{text}");
    assert!(text.contains('%'), "{text}");
    assert!(text.contains("messages"), "{text}");
}

/// Trap 7: each cause once, on one line (never an escaped newline), and
/// `learn DIR` points to `train`.
#[test]
fn errors_are_printed_once_with_real_newlines() {
    let db = Db::new();
    let bad = db.path("bad.toml");
    fs::write(&bad, "[model\n").unwrap();
    let out = run(&["--config", utf8(&bad), "stats"], None);
    assert_exit(&out, 2, &["stats", "bad config"]);
    let err = stderr(&out);
    assert!(!err.contains("\\u{a}"), "{err}");
    // One line: where in the file, then what.
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad.toml: line 1, column 7: "), "{err}");

    let file = db.path("a-file");
    fs::write(&file, "x").unwrap();
    let out = run(
        &[
            "--db",
            utf8(&file.join("db")),
            "--config",
            utf8(&db.path("config.toml")),
            "learn",
            "--spam",
            utf8(&sample("spam")[0]),
        ],
        None,
    );
    assert_exit(&out, 2, &["learn", "db under a file"]);
    let err = stderr(&out);
    assert_eq!(err.matches("not a directory").count(), 1, "{err}");

    let out = db.run(&["learn", "--spam", utf8(&sample_spam())], None);
    assert_exit(&out, 2, &["learn", "--spam", "DIR"]);
    let err = stderr(&out);
    assert!(err.contains("is a directory"), "{err}");
    assert!(err.contains("bayesmail train --spam"), "{err}");
}
