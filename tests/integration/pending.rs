//! A learn or unlearn that finds another writer holding the database past
//! its wait leaves the message for that writer, which takes it in when it
//! lets go: a move in the mail client during a long training run is
//! learned, not lost.

use std::fs;
use std::io::Write;
use std::process::Stdio;

use crate::common::{Db, assert_exit, file_names, stderr, unseen, utf8};

/// What the database's learn log says of each change: what, which label,
/// from where.
fn logged(db: &Db) -> Vec<String> {
    let log = fs::read_to_string(db.dir().join("learn.log")).unwrap();
    let words = |l: &str| l.split(' ').skip(1).take(3).collect::<Vec<_>>().join(" ");
    log.lines().map(words).collect()
}

/// Holds the database's writers' lock as another writer would.
fn hold(db: &Db) -> fs::File {
    let lock = fs::File::options()
        .read(true)
        .write(true)
        .open(db.dir().join("lock"))
        .unwrap();
    lock.lock().unwrap();
    lock
}

/// The envelope line before each message of [`mbox_of`].
const ENVELOPE: &[u8] = b"From someone@example.org Sat Nov 28 00:00:00 2026\n";

/// An mbox of `messages`, each after an envelope line and before a blank
/// line, as a mail program appends them.
fn mbox_of(messages: impl IntoIterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut mbox = Vec::new();
    for message in messages {
        mbox.extend_from_slice(ENVELOPE);
        mbox.extend_from_slice(&message);
        mbox.extend_from_slice(b"\n");
    }
    mbox
}

#[test]
fn learns_left_while_the_database_was_held_are_made_in_order_by_the_next_writer() {
    let db = Db::new();
    db.train_sample();
    let (x, y, z) = (db.path("x.eml"), db.path("y.eml"), db.path("z.eml"));
    fs::write(&x, unseen(0, "left x")).unwrap();
    fs::write(&y, unseen(30, "left y")).unwrap();
    fs::write(&z, unseen(1, "left z")).unwrap();
    let lock = hold(&db);
    let queued = |args: &[&str], said: &str| {
        let out = db.run(args, None);
        assert_exit(&out, 0, args);
        assert_eq!(String::from_utf8_lossy(&out.stdout), said);
        assert!(stderr(&out).contains("/pending, taken in when that writer is done"));
    };
    queued(
        &[
            "learn",
            "--wait",
            "0",
            "--origin",
            "imap",
            "--spam",
            utf8(&x),
        ],
        "queued as spam\n",
    );
    queued(
        &["unlearn", "--wait", "0", utf8(&x)],
        "queued to be unlearned\n",
    );
    queued(
        &["learn", "--wait", "0", "--ham", utf8(&y)],
        "queued as ham\n",
    );
    let out = db.run(
        &["learn", "--wait", "0", "--json", "--spam", utf8(&z)],
        None,
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["action"], "queued");
    assert_eq!(line["label"], "spam");
    let stats = db.stats();
    assert_eq!(stats["pending"]["waiting"], 4, "{stats}");
    assert_eq!(db.counts(), [24, 24], "nothing learned while it was held");
    assert!(
        db.ok(&["stats"], None)
            .contains("waiting             4 messages to learn or unlearn")
    );
    drop(lock);

    // The next writer takes them in before its own change, in order: x
    // learned and then unlearned, y learned, z learned.
    assert_eq!(
        db.ok(&["learn", "--spam", utf8(&z)], None),
        "already learned as spam\n"
    );
    assert_eq!(db.counts(), [25, 25]);
    assert_eq!(
        db.ok(&["learn", "--ham", utf8(&y)], None),
        "already learned as ham\n"
    );
    let out = db.run(&["unlearn", utf8(&x)], None);
    assert_exit(&out, 2, &["never learned"]);
    assert!(file_names(&db.dir().join("pending")).is_empty());
    assert_eq!(db.stats()["pending"]["waiting"], 0);
    assert_eq!(
        logged(&db),
        [
            "learned spam imap",
            "unlearned spam learn",
            "learned ham learn",
            "learned spam learn",
            "already spam learn",
            "already ham learn"
        ]
    );
}

#[test]
fn a_training_run_takes_in_what_was_left_while_it_read() {
    let db = Db::new();
    db.train_sample();
    // A run reading an mbox from stdin holds the lock until stdin ends.
    let mut train = std::process::Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .args(db.global_args())
        .args(["train", "--spam", "-", "--ham"])
        .arg(crate::common::sample_ham())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let probe = fs::File::options()
        .read(true)
        .write(true)
        .open(db.dir().join("lock"))
        .unwrap();
    let start = std::time::Instant::now();
    while probe.try_lock().is_ok() {
        probe.unlock().unwrap();
        assert!(
            start.elapsed().as_secs() < 60,
            "the run never took the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let moved = db.path("moved.eml");
    fs::write(&moved, unseen(2, "moved during the run")).unwrap();
    let out = db.run(
        &[
            "learn",
            "--wait",
            "0",
            "--origin",
            "imap",
            "--spam",
            utf8(&moved),
        ],
        None,
    );
    assert_exit(&out, 0, &["queued"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "queued as spam\n");
    let mut spam: Vec<_> = fs::read_dir(crate::common::sample_spam())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    spam.sort();
    let mbox = mbox_of(spam.iter().map(|file| fs::read(file).unwrap()));
    let mut stdin = train.stdin.take().unwrap();
    stdin.write_all(&mbox).unwrap();
    drop(stdin);
    let out = train.wait_with_output().unwrap();
    assert_exit(&out, 0, &["train"]);
    // No writer ran after it: the run itself took the message in.
    assert!(file_names(&db.dir().join("pending")).is_empty());
    assert_eq!(db.counts(), [24, 25]);
    let log = logged(&db);
    assert_eq!(
        log.last().map(String::as_str),
        Some("learned spam imap"),
        "{log:?}"
    );
}

#[test]
fn a_message_left_that_is_not_mail_is_set_aside_and_the_rest_are_taken_in() {
    let db = Db::new();
    db.train_sample();
    let lock = hold(&db);
    let first = db.path("first.eml");
    fs::write(&first, unseen(3, "before the damaged one")).unwrap();
    let out = db.run(&["learn", "--wait", "0", "--spam", utf8(&first)], None);
    assert_exit(&out, 0, &["queued"]);
    let pending = db.dir().join("pending");
    // An entry damaged after it was left (what a disk may do), after it.
    let damaged = format!("{}-1-1.learn.spam", "9".repeat(24));
    fs::write(pending.join(&damaged), b"\x00\x01 not mail").unwrap();
    drop(lock);
    let other = db.path("other.eml");
    fs::write(&other, unseen(4, "the next writer")).unwrap();
    db.ok(&["learn", "--ham", utf8(&other)], None);
    assert_eq!(db.counts(), [25, 25]);
    let left: Vec<_> = file_names(&pending).into_iter().collect();
    assert_eq!(
        left,
        [std::ffi::OsString::from(format!("failed-{damaged}"))]
    );
    let stats = db.stats();
    assert_eq!(stats["pending"]["waiting"], 0, "{stats}");
    assert_eq!(stats["pending"]["failed"], 1, "{stats}");
}

/// A learn that waited for the lock and got it takes in what was left
/// before it first: the last word on a message is the last asked.
#[test]
fn a_learn_that_waits_for_the_lock_comes_after_what_was_left_before_it() {
    let db = Db::new();
    db.train_sample();
    let x = db.path("x.eml");
    fs::write(&x, unseen(5, "asked twice")).unwrap();
    let lock = hold(&db);
    let out = db.run(&["learn", "--wait", "0", "--spam", utf8(&x)], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "queued as spam\n");
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        drop(lock);
    });
    // Waits for the lock, then takes the spam learn in before its own.
    let out = db.run(&["learn", "--wait", "30", "--ham", utf8(&x)], None);
    release.join().unwrap();
    assert_exit(&out, 0, &["learn --ham, waiting"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "moved to ham\n");
    assert_eq!(
        db.ok(&["learn", "--ham", utf8(&x)], None),
        "already learned as ham\n"
    );
    assert_eq!(db.counts(), [25, 24]);
}

/// What cannot be read in the queue (a directory, a FIFO named like an
/// entry) is set aside and holds back nothing behind it; a queue that is
/// a link is neither written nor read through.
#[test]
fn an_entry_that_cannot_be_read_holds_back_nothing_and_a_linked_queue_is_refused() {
    let db = Db::new();
    db.train_sample();
    let pending = db.dir().join("pending");
    fs::create_dir(&pending).unwrap();
    fs::create_dir(pending.join("000000000000000000000001-1-0.learn.spam")).unwrap();
    nix::unistd::mkfifo(
        &pending.join("000000000000000000000001-1-1.learn.spam"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let lock = hold(&db);
    let x = db.path("x.eml");
    fs::write(&x, unseen(6, "behind the broken ones")).unwrap();
    let out = db.run(&["learn", "--wait", "0", "--spam", utf8(&x)], None);
    assert_exit(&out, 0, &["queued behind broken entries"]);
    drop(lock);
    let other = db.path("other.eml");
    fs::write(&other, unseen(9, "the next writer")).unwrap();
    db.ok(&["learn", "--ham", utf8(&other)], None);
    assert_eq!(db.counts(), [25, 25]);
    let stats = db.stats();
    assert_eq!(stats["pending"]["waiting"], 0, "{stats}");
    assert_eq!(stats["pending"]["failed"], 2, "{stats}");

    // A link where the queue goes: refused, nothing written there.
    let elsewhere = db.path("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::remove_dir_all(&pending).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &pending).unwrap();
    let lock = hold(&db);
    let y = db.path("y.eml");
    fs::write(&y, unseen(10, "not through a link")).unwrap();
    let out = db.run(&["learn", "--wait", "0", "--spam", utf8(&y)], None);
    assert_exit(&out, 2, &["queue is a link"]);
    assert!(
        stderr(&out).contains("is not a directory"),
        "{}",
        stderr(&out)
    );
    assert!(file_names(&elsewhere).is_empty());
    drop(lock);
    // stats says so, rather than that nothing waits.
    let stats = db.stats();
    let refused = stats["pending"]["refused"].as_str().unwrap_or_default();
    assert!(refused.contains("is not a directory"), "{stats}");
    assert!(
        db.ok(&["stats"], None)
            .contains("waiting             cannot be read")
    );
}

/// What is left is the message as it was read, from standard input (kept)
/// as from a file of several (read again): each counts as learning it
/// there and then would have.
#[test]
fn messages_left_from_stdin_and_from_an_mbox_count_as_learned_directly() {
    let db = Db::new();
    db.train_sample();
    let mbox = db.path("three.mbox");
    let mut bytes = mbox_of((0..3).map(|i| unseen(11 + i, &format!("mbox {i}"))));
    // And one that is not mail: said, and the exit status says so.
    bytes.extend_from_slice(ENVELOPE);
    bytes.extend_from_slice(b"not mail\n");
    fs::write(&mbox, &bytes).unwrap();
    let piped = unseen(20, "from a pipe");
    let lock = hold(&db);
    let out = db.run(&["learn", "--wait", "0", "--spam", utf8(&mbox)], None);
    assert_exit(&out, 1, &["an mbox with one that is not mail, queued"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "3 messages queued as spam\n"
    );
    let out = db.run(&["learn", "--wait", "0", "--ham", "-"], Some(&piped));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "queued as ham\n");
    drop(lock);
    let out = db.run(&["learn", "--spam", utf8(&mbox)], None);
    assert_exit(&out, 1, &["learn the mbox again"]);
    assert!(
        stderr(&out).contains("3 already learned as spam"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        db.ok(&["learn", "--ham", "-"], Some(&piped)),
        "already learned as ham\n"
    );
    assert_eq!(db.counts(), [25, 27]);
}

/// An mbox learned a part at a time while another writer holds the
/// database is left whole: the first part after waiting, the rest at once,
/// and all of it taken in by the next writer.
#[test]
fn an_mbox_learned_in_parts_is_left_whole_while_the_database_is_held() {
    let db = Db::new();
    db.train_sample();
    let mbox = db.path("parts.mbox");
    let bytes = mbox_of((0..5).map(|i| unseen(i, &format!("part {i}"))));
    fs::write(&mbox, &bytes).unwrap();
    let lock = hold(&db);
    let out = db.run_in_parts(&["learn", "--wait", "1", "--spam", utf8(&mbox)], b"");
    assert_exit(&out, 0, &["learn in parts, queued"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "5 messages queued as spam\n"
    );
    assert_eq!(db.stats()["pending"]["waiting"], 5);
    drop(lock);
    db.ok(
        &["learn", "--ham", "-"],
        Some(&unseen(30, "after the parts")),
    );
    assert_eq!(db.counts(), [25, 29]);
    assert_eq!(db.stats()["pending"]["waiting"], 0);
}

/// A learn killed while it left a message (its file half written, under a
/// temporary name) leaves nothing behind for good: the next writer removes
/// it, once it has not changed for an hour, and only temporaries of
/// processes that no longer run.
#[test]
fn a_message_half_left_by_a_killed_learn_is_removed_by_the_next_writer() {
    let db = Db::new();
    db.train_sample();
    let pending = bayesmail::db::DbPaths::new(db.dir()).pending();
    fs::create_dir_all(&pending).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let name = "000001795835376677329226-0000016014-00000000000000000000.learn.spam";
    let temp = |pid: u32, n: u32, age: u64| {
        let path = pending.join(format!(".{name}.{pid}.{n}.tmp"));
        fs::write(&path, unseen(3, "half")).unwrap();
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
        let file = fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(then).unwrap();
        path
    };
    let stale = temp(dead, 0, 7200);
    let fresh = temp(dead, 1, 0);
    let live = temp(1, 0, 7200);
    db.ok(&["learn", "--ham", "-"], Some(&unseen(4, "next writer")));
    assert!(!stale.exists(), "a killed learn's temporary file survived");
    assert!(fresh.exists() && live.exists());
    assert_eq!(db.counts(), [25, 24]);
}
