//! The database under attack: a damaged or replaced model file, a FIFO in
//! its place, a count store that lost its history or whose writes hang (in
//! a command and in serve), messages saved with an mbox envelope line, and
//! writers killed while writing the model.

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
    run_bounded_with(db, args, input, &[])
}

/// [`run_bounded`] with `env` set for the binary.
fn run_bounded_with(db: &Db, args: &[&str], input: &[u8], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args())
        .args(args)
        .envs(env.iter().copied());
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

/// F15: after the count store is deleted or truncated, a writer refuses to
/// replace the model with one built from what is left, says why and how to
/// start over, and leaves the model as it was.
#[test]
fn a_writer_refuses_to_replace_the_model_after_the_store_lost_its_history() {
    let message = |db: &Db| {
        let path = db.path("message.eml");
        fs::write(&path, MESSAGE).unwrap();
        path
    };
    for damage in ["deleted", "truncated"] {
        let db = Db::new();
        db.train_sample();
        let model = fs::read(db.model()).unwrap();
        let counts = db.dir().join("counts.sled");
        if damage == "deleted" {
            fs::remove_dir_all(&counts).unwrap();
        } else {
            let file = counts.join("db");
            let len = fs::metadata(&file).unwrap().len();
            fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .unwrap()
                .set_len(len / 2)
                .unwrap();
        }
        let msg = message(&db);
        let mut journaled = 0;
        for args in [
            vec!["learn", "--spam", utf8(&msg)],
            vec!["train", "--spam", utf8(&msg)],
        ] {
            let out = db.run(&args, None);
            if damage == "truncated" && args[0] == "learn" && out.status.success() {
                // `learn` takes the journal alone and never reads the
                // store; the model file is left as it was, and the next
                // writer that opens the store refuses below.
                assert!(fs::read(db.model()).unwrap() == model, "{damage}: replaced");
                journaled += 1;
                continue;
            }
            assert_ne!(out.status.code(), Some(0), "{damage}: {args:?}");
            let err = stderr(&out);
            assert!(err.contains("is not replaced"), "{damage}: {err}");
            assert!(err.contains("remove the model file as well"), "{err}");
            assert!(fs::read(db.model()).unwrap() == model, "{damage}: replaced");
        }
        assert_eq!(db.counts(), [24, 24 + journaled]);
        // Starting over on purpose.
        fs::remove_file(db.model()).unwrap();
        db.ok(&["learn", "--spam", utf8(&msg)], None);
    }
}

/// A message file as saved with an mbox envelope line: an escaped `>From `
/// body line and the blank line an mbox writer adds at the end.
fn enveloped(n: usize) -> Vec<u8> {
    format!(
        "From sender{n}@offers.example  Thu Aug 22 13:17:22 2002\n\
         From: Offers <sender{n}@offers.example>\nTo: you@example.com\n\
         Subject: Offer number {n}\n\nCheap meds, offer {n}.\n>From the desk of the boss.\n\n"
    )
    .into_bytes()
}

/// F16: `learn` and `unlearn` compute the digest `train` computed for a
/// message file that starts with a `From ` line, so after `train` the file
/// is known: `learn` does not count it again and `unlearn` finds it.
#[test]
fn learn_and_unlearn_know_what_train_read_from_enveloped_files() {
    let db = Db::new();
    let spam = db.path("spam");
    fs::create_dir(&spam).unwrap();
    for n in 0..3 {
        fs::write(spam.join(format!("{n}.eml")), enveloped(n)).unwrap();
    }
    if let Some(corpus) = public_corpus() {
        let mut files: Vec<_> = fs::read_dir(corpus.join("spam-2"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files.iter().take(20) {
            fs::copy(f, spam.join(f.file_name().unwrap())).unwrap();
        }
    }
    let mut files: Vec<_> = fs::read_dir(&spam)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let summary = db.train(&[&spam], &[&sample_ham()]);
    assert_eq!(summary["learned"], files.len() + 24, "{summary}");
    let before = db.counts();
    for f in &files {
        let out = db.ok(&["learn", "--spam", utf8(f)], None);
        assert_eq!(out.trim(), "already learned as spam", "{}", f.display());
    }
    assert_eq!(db.counts(), before);
    let (last, rest) = files.split_last().unwrap();
    for f in rest {
        let out = db.ok(&["unlearn", utf8(f)], None);
        assert_eq!(out.trim(), "unlearned (was spam)", "{}", f.display());
    }
    assert_eq!(db.counts(), [24, 1]);
    // Unlearning the last spam leaves a database a model cannot be built
    // from (issue 18, trap 4): the model goes, and the run says so.
    let out = db.run(&["unlearn", utf8(last)], None);
    assert_exit(&out, 0, &["unlearn", "the last spam"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "unlearned (was spam)\n"
    );
    assert!(stderr(&out).contains("no model now"), "{}", stderr(&out));
    assert!(!db.model().exists());

    // A file holding several messages is a mailbox: each message is learned
    // (issue 18, trap 2).
    let mbox = db.path("two.mbox");
    fs::write(&mbox, [enveloped(7), enveloped(8)].concat()).unwrap();
    let out = db.run(&["learn", "--spam", utf8(&mbox)], None);
    assert_exit(&out, 0, &["learn", "an mbox"]);
    assert!(
        stderr(&out).starts_with("2 messages: 2 learned as spam"),
        "{}",
        stderr(&out)
    );
    assert_eq!(db.counts(), [24, 2]);
}

/// F20: a writer killed while writing the model leaves its temporary file;
/// the next write of the model removes it (and only temporaries of writers
/// that no longer run).
#[test]
fn the_next_model_write_removes_temporaries_of_killed_writers() {
    let db = Db::new();
    db.train_sample();
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = db.dir().join(format!(".model.bin.{dead}.0.tmp"));
    let live = db.dir().join(".model.bin.1.0.tmp");
    fs::write(&stale, vec![0u8; 1 << 20]).unwrap();
    fs::write(&live, b"a writer that still runs").unwrap();
    let msg = db.path("message.eml");
    fs::write(&msg, MESSAGE).unwrap();
    db.ok(&["learn", "--spam", utf8(&msg)], None);
    assert!(!stale.exists(), "a dead writer's temporary file survived");
    assert!(live.exists());
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    let made = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
}

/// Asserts that a writer's run failed at once with one line that names
/// `file` and says what it is.
fn assert_refused(out: &Output, what: &[&str], file: &std::path::Path, kind: &str) {
    assert_exit(out, 2, what);
    let err = stderr(out);
    let expected = format!("{}: not a regular file (a {kind})", file.display());
    assert_eq!(err.lines().count(), 1, "{what:?}: {err}");
    assert!(err.contains(&expected), "{what:?}: {err}");
}

/// Issue 26, D3: a FIFO at any file of the database fails every command
/// at once with one line naming the file, instead of hanging it (even
/// past `--wait`); `filter` passes the message on with
/// `reason=model-unreadable`. Once the FIFO is gone, all is as it was.
#[cfg(unix)]
#[test]
fn a_fifo_at_any_file_of_the_database_is_refused_at_once() {
    let db = Db::new();
    db.train_sample();
    let msg = db.path("message.eml");
    fs::write(&msg, MESSAGE).unwrap();
    let msg = utf8(&msg);
    let dir = db.dir();
    let before = db.counts();

    let journal = dir.join("model.journal");
    mkfifo(&journal);
    let out = run_bounded(&db, &["filter"], MESSAGE);
    assert_passed_unscored(&out, MESSAGE, "model-unreadable");
    let expected = format!("{}: not a regular file (a FIFO)", journal.display());
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    for args in [
        vec!["classify", msg],
        vec!["learn", "--spam", msg],
        vec!["unlearn", msg],
        vec!["train", "--spam", msg],
    ] {
        assert_refused(&run_bounded(&db, &args, b""), &args, &journal, "FIFO");
    }
    fs::remove_file(&journal).unwrap();

    let registry = dir.join("model.registry");
    let kept = db.path("registry");
    fs::rename(&registry, &kept).unwrap();
    mkfifo(&registry);
    for args in [vec!["learn", "--spam", msg], vec!["unlearn", msg]] {
        assert_refused(&run_bounded(&db, &args, b""), &args, &registry, "FIFO");
    }
    fs::remove_file(&registry).unwrap();
    fs::rename(&kept, &registry).unwrap();

    let lock = dir.join("lock");
    fs::remove_file(&lock).unwrap();
    mkfifo(&lock);
    for args in [
        vec!["learn", "--wait", "1", "--spam", msg],
        vec!["unlearn", "--wait", "1", msg],
        vec!["train", "--wait", "1", "--spam", msg],
        vec!["prune", "--wait", "1"],
    ] {
        let start = Instant::now();
        assert_refused(&run_bounded(&db, &args, b""), &args, &lock, "FIFO");
        assert!(start.elapsed() < Duration::from_secs(20), "{args:?}");
    }
    fs::remove_file(&lock).unwrap();

    let conf = dir.join("counts.sled").join("conf");
    let kept = db.path("conf");
    fs::rename(&conf, &kept).unwrap();
    mkfifo(&conf);
    for args in [vec!["train", "--spam", msg], vec!["prune"]] {
        assert_refused(&run_bounded(&db, &args, b""), &args, &conf, "FIFO");
    }
    fs::remove_file(&conf).unwrap();
    fs::rename(&kept, &conf).unwrap();

    assert_eq!(db.counts(), before);
    db.ok(&["learn", "--spam", msg], None);
    db.ok(&["unlearn", msg], None);
    let summary = db.train(&[&sample_spam()], &[&sample_ham()]);
    assert_eq!(summary["learned"], 0, "{summary}");
    assert_eq!(db.counts(), before);
}

/// Issue 26, S4: a link at the count store's files is refused before the
/// store is opened, so nothing is written through it (to a file of
/// someone else's, or created where a dangling link points), and the
/// error names the file.
#[cfg(unix)]
#[test]
fn a_link_in_the_count_store_is_refused_and_never_written_through() {
    let db = Db::new();
    db.train_sample();
    let msg = db.path("message.eml");
    fs::write(&msg, MESSAGE).unwrap();
    let msg = utf8(&msg);
    let store = db.dir().join("counts.sled");
    let victim = db.path("victim");
    let nowhere = db.path("nowhere");
    for name in ["db", "conf"] {
        let file = store.join(name);
        let kept = db.path(&format!("kept-{name}"));
        fs::rename(&file, &kept).unwrap();
        for target in [&victim, &nowhere] {
            fs::write(&victim, b"someone else's file").unwrap();
            std::os::unix::fs::symlink(target, &file).unwrap();
            for args in [vec!["train", "--spam", msg], vec!["prune"]] {
                let out = run_bounded(&db, &args, b"");
                assert_refused(&out, &args, &file, "symbolic link");
                assert_eq!(fs::read(&victim).unwrap(), b"someone else's file");
                assert!(!nowhere.exists(), "{args:?} created {}", nowhere.display());
            }
            fs::remove_file(&file).unwrap();
        }
        fs::rename(&kept, &file).unwrap();
    }
    let summary = db.train(&[&sample_spam()], &[&sample_ham()]);
    assert_eq!(summary["learned"], 0, "{summary}");
}

/// Issue 26, S3: links planted at the names bayesmail writes in the
/// database (the lock, the journal, the registry, the model and its
/// record) never get a byte written through them, nor a file created where
/// they dangle: each is refused or replaced, never followed for writing.
#[cfg(unix)]
#[test]
fn links_at_the_database_files_are_never_written_through() {
    let db = Db::new();
    db.train_sample();
    let msg = db.path("message.eml");
    fs::write(&msg, MESSAGE).unwrap();
    let msg = utf8(&msg);
    let dir = db.dir();
    let victim = db.path("victim");
    let nowhere = db.path("nowhere");
    for name in [
        "lock",
        "model.journal",
        "model.registry",
        "model.bin.checked",
        "model.bin",
    ] {
        let file = dir.join(name);
        let kept = db.path(name);
        let had = fs::rename(&file, &kept).is_ok();
        for target in [&victim, &nowhere] {
            fs::write(&victim, b"someone else's file").unwrap();
            std::os::unix::fs::symlink(target, &file).unwrap();
            for args in [
                vec!["learn", "--spam", msg],
                vec!["unlearn", msg],
                vec!["train", "--spam", msg],
            ] {
                let _ = run_bounded(&db, &args, b"");
                assert_eq!(
                    fs::read(&victim).unwrap(),
                    b"someone else's file",
                    "{name}: {args:?} wrote through the link"
                );
                assert!(!nowhere.exists(), "{name}: {args:?} created the file");
            }
            if name == "model.bin" {
                // Replaced by a file of its own, as private as a new one,
                // whatever the file the link led to allows.
                use std::os::unix::fs::PermissionsExt;
                let meta = fs::symlink_metadata(&file).unwrap();
                assert!(meta.is_file());
                assert_eq!(meta.permissions().mode() & 0o777, 0o600);
            }
            let _ = fs::remove_file(&file);
        }
        if had {
            fs::rename(&kept, &file).unwrap();
        }
    }
}

/// Whether `setpriv` can run a command as `nobody` (what a test run as
/// root needs to be another user); says why not when it cannot.
fn can_drop_privileges() -> bool {
    let usable = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "true",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !usable {
        eprintln!("running as root without setpriv to drop privileges: test skipped");
    }
    usable
}

/// Issue 26, D4: a reader who may not enter the database directory (a
/// delivery agent running as another user) is told that the model cannot
/// be read and why, not that there is none; `filter` says
/// `reason=model-unreadable`.
#[cfg(unix)]
#[test]
fn a_reader_who_cannot_enter_the_database_is_told_so() {
    use std::os::unix::fs::PermissionsExt;
    let db = Db::new();
    db.train_sample();
    // As root, permissions are not enforced: run the readers as `nobody`
    // (the temporary directory and config opened to them, the database
    // left private to root). Otherwise shut the owner out.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let as_reader = |args: &[&str]| -> Command {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(env!("CARGO_BIN_EXE_bayesmail"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        };
        cmd.args(db.global_args()).args(args);
        cmd
    };
    let dir_mode = |mode| fs::set_permissions(db.dir(), fs::Permissions::from_mode(mode)).unwrap();
    if root {
        if !can_drop_privileges() {
            return;
        }
        let top = db.path("config.toml");
        fs::set_permissions(top.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&top, fs::Permissions::from_mode(0o644)).unwrap();
        dir_mode(0o700);
    } else {
        dir_mode(0o000);
    }
    let expected = format!("cannot read {}: permission denied", db.model().display());

    let out = run_with_stdin(as_reader(&["filter"]), MESSAGE);
    if !root {
        dir_mode(0o700);
    }
    assert_passed_unscored(&out, MESSAGE, "model-unreadable");
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    assert!(!stderr(&out).contains("no-model"), "{}", stderr(&out));

    if !root {
        dir_mode(0o000);
    }
    let out = run_with_stdin(as_reader(&["classify", "-"]), MESSAGE);
    if !root {
        dir_mode(0o700);
    }
    assert_exit(&out, 2, &["classify"]);
    assert_eq!(stderr(&out), format!("bayesmail: {expected}\n"));
}

/// A database its group shares (a directory 2770 of the writers' group,
/// as the README's permissions allow): each member of the group trains
/// and learns into it in turn, with the common umask of 022, and nothing
/// in it is open to others. Before, a writer that was not root refused a
/// directory its group may change (a check meant for root only), and the
/// count store was made private to its first writer, so the group's next
/// writer could not open it.
#[cfg(unix)]
#[test]
fn each_writer_of_a_group_learns_into_the_database_its_group_shares() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path();
    fs::set_permissions(top, fs::Permissions::from_mode(0o755)).unwrap();
    let config = top.join("config.toml");
    fs::write(&config, "").unwrap();
    let mail = top.join("mail");
    fs::create_dir(&mail).unwrap();
    let copy = |from: &std::path::Path, name: &str| {
        let to = mail.join(name);
        fs::create_dir(&to).unwrap();
        for f in fs::read_dir(from).unwrap() {
            let f = f.unwrap().path();
            fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
        }
        to
    };
    let (spam, ham) = (copy(&sample_spam(), "spam"), copy(&sample_ham(), "ham"));
    let (one_spam, one_ham) = (mail.join("one-spam.eml"), mail.join("one-ham.eml"));
    fs::write(&one_spam, unseen(0, "X-Group: one spam")).unwrap();
    fs::write(&one_ham, unseen(30, "X-Group: one ham")).unwrap();
    // The writers: as root, two users of one group (nobody, and a user id
    // no one has, both of group 65534); otherwise this user alone.
    let group: u32 = if root {
        65534
    } else {
        fs::metadata(top).unwrap().gid()
    };
    let writers: Vec<Option<u32>> = if root {
        if !can_drop_privileges() {
            return;
        }
        vec![Some(65534), Some(65533)]
    } else {
        vec![None]
    };
    let db = top.join("db");
    fs::create_dir(&db).unwrap();
    std::os::unix::fs::chown(&db, None, Some(group)).unwrap();
    fs::set_permissions(&db, fs::Permissions::from_mode(0o2770)).unwrap();
    let run_as = |who: Option<u32>, args: &[&str]| -> Output {
        let mut cmd = match who {
            Some(uid) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={group}"))
                    .args(["--clear-groups", "--"])
                    .arg(env!("CARGO_BIN_EXE_bayesmail"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_bayesmail")),
        };
        cmd.args(["--db", utf8(&db), "--config", utf8(&config)])
            .args(args)
            .env_remove("BAYESMAIL_DB")
            .env_remove("BAYESMAIL_STORE");
        // SAFETY: umask is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o022);
                Ok(())
            });
        }
        cmd.output().unwrap()
    };
    let first = writers[0];
    let last = *writers.last().unwrap();
    let out = run_as(
        first,
        &["train", "-q", "--spam", utf8(&spam), "--ham", utf8(&ham)],
    );
    assert_exit(&out, 0, &["train"]);
    let out = run_as(last, &["learn", "--ham", utf8(&one_ham)]);
    assert_exit(&out, 0, &["learn", "--ham"]);
    let out = run_as(first, &["learn", "--spam", utf8(&one_spam)]);
    assert_exit(&out, 0, &["learn", "--spam"]);
    let out = run_as(last, &["stats", "--json"]);
    assert_exit(&out, 0, &["stats"]);
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["ham_messages"], 25, "{stats}");
    assert_eq!(stats["spam_messages"], 25, "{stats}");
    // Nothing in the database is open to others, and all of it is the
    // group's.
    let mut stack = vec![db.clone()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path.clone());
            }
            assert_eq!(
                meta.mode() & 0o007,
                0,
                "{} is open to others",
                path.display()
            );
            assert_eq!(meta.gid(), group, "{} is not the group's", path.display());
        }
    }
}

/// Issue 26, D4: a write that fails for want of space says so in words,
/// on one line: through sled (which passes an error on as its `Debug`
/// text, `Os { code: 27, … }`), writing the model, or writing stdout.
/// The file size limit stands in for a full disk.
#[cfg(unix)]
#[test]
fn a_full_disk_is_reported_in_words_on_one_line() {
    use std::os::unix::process::CommandExt;
    for limit in [100_000u64, 1_800_000] {
        let db = Db::new();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args()).args([
            "train",
            "--spam",
            utf8(&sample_spam()),
            "--ham",
            utf8(&sample_ham()),
        ]);
        // SAFETY: between fork and exec, only async-signal-safe calls.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let rlim = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &rlim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        assert_exit(&out, 2, &["train", &limit.to_string()]);
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.ends_with(": file too large\n"), "{limit}: {err}");
        assert!(!err.contains("Os {") && !err.contains("os error"), "{err}");
    }

    let db = Db::new();
    db.train_sample();
    let full = fs::File::create("/dev/full").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .args(db.global_args())
        .args(["classify", utf8(&sample_spam())])
        .stdout(full)
        .output()
        .unwrap();
    assert_exit(&out, 2, &["classify", "> /dev/full"]);
    assert_eq!(stderr(&out), "bayesmail: no space left on device\n");
    // A learn or unlearn of one message says what became of it on stdout:
    // on a full disk, one line and exit 2, never a panic (the message is
    // learned, and learning it again changes nothing).
    let message = db.path("full.eml");
    fs::write(&message, unseen(5, "X-Full: 1")).unwrap();
    for args in [
        &["learn", "--spam"][..],
        &["learn", "--spam", "--json"],
        &["unlearn"],
    ] {
        let full = fs::File::create("/dev/full").unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
            .args(db.global_args())
            .args(args)
            .arg(utf8(&message))
            .stdout(full)
            .output()
            .unwrap();
        assert_exit(&out, 2, &[args, &["> /dev/full"]].concat());
        assert_eq!(stderr(&out), "bayesmail: no space left on device\n");
    }
}

/// A write to the count store that never returns (as in sled's deadlock,
/// made here by a debug build's hook inside the transaction) ends the
/// process with exit 75 and one line naming the store, instead of holding
/// the writers' lock for good; the store opens afterwards with the counts
/// it had, and the same run then stores whole.
#[test]
fn a_write_to_the_store_that_hangs_ends_the_process_and_frees_the_database() {
    let db = Db::new();
    db.train_sample();
    let before = db.counts();
    let (ham, spam) = (db.path("ham"), db.path("spam"));
    for (i, folder) in [&ham, &spam].into_iter().enumerate() {
        fs::create_dir(folder).unwrap();
        for n in 0..5 {
            fs::write(folder.join(format!("{n}.eml")), unseen(10 * i + n, "hang")).unwrap();
        }
    }
    // Not waiting for the lock: it must be free the moment the process
    // has ended.
    let run = [
        "train",
        "--wait",
        "0",
        "--spam",
        utf8(&spam),
        "--ham",
        utf8(&ham),
    ];
    // Bounded: a hung write that does not end the process fails the test.
    let hang = [
        ("BAYESMAIL_TEST_HANG", "store-write"),
        ("BAYESMAIL_TEST_STALL_MS", "300"),
    ];
    let out = run_bounded_with(&db, &run, b"", &hang);
    assert_exit(&out, 75, &["train with a hung store write"]);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("count store")
            && err.contains(utf8(&db.dir()))
            && err.contains("has not returned"),
        "{err}"
    );
    assert!(
        db.dir().join("counts.test-hang-reached").exists(),
        "ended by the hung write, not another call"
    );
    // The store opens at once, without the run: the same run then learns
    // every message of it.
    let mut again = run.to_vec();
    again.push("--json");
    let out = run_bounded(&db, &again, b"");
    assert_exit(&out, 0, &["the same run again"]);
    let summary = &json_lines(&String::from_utf8_lossy(&out.stdout))[0];
    assert_eq!(summary["learned"], 10, "{summary}");
    assert_eq!(db.counts(), [before[0] + 5, before[1] + 5]);
}

/// A daemon's learn whose write to the store hangs ends `serve` as it
/// ends a command (exit 75, one line naming the store): the request in
/// flight gets no answer, nothing of it is stored, and serve started again
/// learns the message.
#[test]
fn a_learn_through_serve_whose_store_write_hangs_ends_serve_and_frees_the_database() {
    use crate::serve_http::{Server, post};
    let db = Db::new();
    db.train_sample();
    let before = db.counts();
    let message = db.path("new.eml");
    fs::write(&message, unseen(4, "X-Serve-Hang: 1")).unwrap();
    // Every learn goes straight into the count store (no journal), where
    // the debug build is told to hang.
    let straight = ("BAYESMAIL_JOURNAL_LIMIT", "0");
    let hang = [
        straight,
        ("BAYESMAIL_TEST_HANG", "store-write"),
        ("BAYESMAIL_TEST_STALL_MS", "300"),
    ];
    let mut server = Server::start_with(&db, &[], &hang);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-w", "\n%{http_code}"])
        .args(["--data-binary", &format!("@{}", utf8(&message))])
        .arg(server.url("/learn?class=spam"))
        .output()
        .expect("curl runs");
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && !answer.contains("learned"),
        "the learn that hung got an answer: {answer}"
    );
    let (status, log) = server.ended_within(60);
    assert_eq!(status.code(), Some(75), "{log}");
    let stalled: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("has not returned"))
        .collect();
    assert_eq!(stalled.len(), 1, "{log}");
    assert!(
        stalled[0].contains("count store") && stalled[0].contains(utf8(&db.dir())),
        "{log}"
    );
    assert!(
        db.dir().join("counts.test-hang-reached").exists(),
        "ended by the hung write, not another call"
    );
    assert_eq!(db.counts(), before, "nothing of the hung learn was stored");

    // Started again as its unit would start it: the same learn is stored.
    let mut server = Server::start_with(&db, &[], &[straight]);
    let (code, got) = post(&server.url("/learn?class=spam"), &message, &[]);
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["action"], "learned", "{got}");
    assert!(server.terminate());
    assert_eq!(db.counts(), [before[0], before[1] + 1]);
}

/// On a filesystem all but full, changing the counts is refused at once,
/// "no space left on device", and changes nothing; once there is room it
/// works. Before, sled hung in opening the count store (holding the
/// writers' lock until the watchdog ended it ten minutes later), and a
/// kill then could leave a training run half applied. The filesystem is a
/// small tmpfs mounted in a mount namespace of the test's own.
#[test]
fn a_full_disk_refuses_a_change_to_the_counts_at_once_and_changes_nothing() {
    let db = Db::new();
    db.train_sample();
    let tmp = tempfile::tempdir().unwrap();
    let message = tmp.path().join("new.eml");
    fs::write(&message, unseen(0, "full disk")).unwrap();
    let full = tmp.path().join("full");
    fs::create_dir(&full).unwrap();
    let script = format!(
        "set -e\n\
         mount -t tmpfs -o size=32m tmpfs {full}\n\
         cp -a {db} {full}/db\n\
         before=$({bin} --db {full}/db stats --json)\n\
         fallocate -l $(( $(stat -f -c '%a*%S' {full}) )) {full}/filler\n\
         set +e\n\
         BAYESMAIL_JOURNAL_LIMIT=1 timeout -s KILL 60 {bin} --db {full}/db learn --wait 8 \
         --spam {message}\n\
         echo \"full: $?\"\n\
         [ \"$({bin} --db {full}/db stats --json)\" = \"$before\" ] && echo unchanged\n\
         rm {full}/filler\n\
         BAYESMAIL_JOURNAL_LIMIT=1 {bin} --db {full}/db learn --wait 8 --spam {message}\n\
         echo \"room: $?\"\n",
        full = utf8(&full),
        db = utf8(&db.dir()),
        bin = env!("CARGO_BIN_EXE_bayesmail"),
        message = utf8(&message),
    );
    let (text, err) = in_own_mounts(&script);
    assert!(text.contains("full: 2\n"), "{text}\n{err}");
    assert!(err.contains("no space left on device"), "{err}");
    assert!(text.contains("unchanged"), "{text}\n{err}");
    assert!(text.contains("room: 0\n"), "{text}\n{err}");
}

/// A disk that fills after the counts are stored, while the model is
/// written: the training run fails saying that the counts hold its
/// change and the next learn or training run writes the model; once
/// there is room, running it again writes the model and the database is
/// the one a run with room would have made. (A disk that fills while
/// the counts are stored changes nothing: the guard of the test above.)
#[test]
fn a_disk_that_fills_while_the_model_is_written_leaves_the_counts_whole_and_the_next_run_writes_it()
{
    let clean = Db::new();
    clean.train_sample();
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    fs::create_dir(&full).unwrap();
    // Room for the count store and its 4 MB guard, not for the model too
    // (some 4 MB for a database this size).
    let script = format!(
        "mount -t tmpfs -o size=6m tmpfs {full}\n\
         mkdir -m 700 {full}/d\n\
         {bin} --db {full}/d/db train --spam {spam} --ham {ham}\n\
         echo \"full: $?\"\n\
         [ -e {full}/d/db/model.bin ] || echo \"no model\"\n\
         {bin} --db {full}/d/db stats\n\
         mount -o remount,size=64m {full}\n\
         {bin} --db {full}/d/db train --json --spam {spam} --ham {ham}\n\
         echo \"room: $?\"\n\
         {bin} --db {full}/d/db stats --json\n",
        full = utf8(&full),
        bin = env!("CARGO_BIN_EXE_bayesmail"),
        spam = utf8(&sample_spam()),
        ham = utf8(&sample_ham()),
    );
    let (text, err) = in_own_mounts(&script);
    assert!(text.contains("full: 2\n"), "{text}\n{err}");
    assert!(text.contains("no model\n"), "{text}\n{err}");
    assert!(
        err.contains("no space left on device: the counts hold this change")
            && err.contains("the next learn or training run writes it"),
        "{err}"
    );
    assert!(
        err.contains("where both are, the last change could not write it"),
        "stats: {err}"
    );
    assert!(text.contains("room: 0\n"), "{text}\n{err}");
    let lines: Vec<&str> = text.lines().collect();
    let again: serde_json::Value = lines
        .iter()
        .find_map(|l| {
            serde_json::from_str(l)
                .ok()
                .filter(|v: &serde_json::Value| v.get("unchanged").is_some())
        })
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(
        (
            &again["learned"],
            &again["unchanged"],
            &again["snapshot_written"]
        ),
        (&0.into(), &48.into(), &true.into()),
        "{again}"
    );
    let stats: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let want = clean.stats();
    for key in ["ham_messages", "spam_messages", "vocabulary", "weights"] {
        assert_eq!(stats[key], want[key], "{key}: {stats} against {want}");
    }
}

/// A model file damaged (truncated) is rebuilt by the next `learn` from the
/// counts, which hold everything, with its stacker refitted from the
/// record of judged messages kept beside it, and the learn says so. Before,
/// the learn said nothing, and the model it wrote had no stacker at all
/// (every view weighing 1, "calibrated on 0 messages").
#[test]
fn a_damaged_model_is_rebuilt_by_the_next_learn_with_its_stacker_and_said_so() {
    let db = Db::new();
    db.train_sample();
    let trained = db.stats();
    assert!(
        trained["calibrated_on"].as_u64().unwrap() >= 40,
        "{trained}"
    );
    fs::OpenOptions::new()
        .write(true)
        .open(db.model())
        .unwrap()
        .set_len(1000)
        .unwrap();
    let message = db.path("new.eml");
    fs::write(&message, unseen(0, "after the damage")).unwrap();
    let out = db.run(&["classify", utf8(&message)], None);
    assert_exit(&out, 2, &["classify", "a damaged model"]);
    let out = db.run(&["learn", "--ham", utf8(&message)], None);
    assert_exit(&out, 0, &["learn"]);
    let err = stderr(&out);
    assert!(
        err.contains("is corrupt")
            && err.contains(
                "the model was rebuilt from the counts, its stacker refitted on the last"
            ),
        "{err}"
    );
    let rebuilt = db.stats();
    assert_eq!(
        rebuilt["calibrated_on"], trained["calibrated_on"],
        "{rebuilt}"
    );
    // The same samples, the same fit (to rounding).
    for (view, weight) in trained["weights"].as_object().unwrap() {
        let now = rebuilt["weights"][view].as_f64().unwrap();
        assert!(
            (now - weight.as_f64().unwrap()).abs() < 1e-9,
            "{view}: {rebuilt}"
        );
    }
    assert_eq!(rebuilt["ham_messages"], 25, "{rebuilt}");
    // The next learn has nothing to say.
    let again = db.path("again.eml");
    fs::write(&again, unseen(1, "after the rebuild")).unwrap();
    let out = db.run(&["learn", "--spam", utf8(&again)], None);
    assert_exit(&out, 0, &["learn"]);
    assert!(!stderr(&out).contains("rebuilt"), "{}", stderr(&out));
}

/// Runs `script` with `sh` as root in a mount namespace of its own (where
/// it mounts the small filesystems these tests fill); its stdout and
/// stderr.
fn in_own_mounts(script: &str) -> (String, String) {
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", script])
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr(&out),
    )
}
