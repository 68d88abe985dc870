//! In the mail path: `filter` passes every message on byte for byte with
//! only our headers added, fails open, and runs many at once beside a
//! training run; `scan` classifies mailboxes and moves or copies spam
//! without losing or doubling a message.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{
    Db, assert_exit, json_lines, public_corpus, public_files, sample_files, sample_ham,
    sample_spam, spawn_with_stdin, status_word, stderr, strip_ours, to_crlf, utf8,
};

/// A message in none of the corpora, spam-like.
const SPAMMY: &[u8] = b"From: \"Prize Desk\" <win@prize-desk.example>\n\
To: pat@example.org\n\
Subject: You have won - claim your cash reward now\n\
Message-ID: <1@prize-desk.example>\n\
Content-Type: text/plain\n\
\n\
Congratulations! You are selected for a cash prize. Click\n\
http://prize-desk.example/claim now, limited offer, act today!\n";

/// Runs `filter` on `input` with extra arguments.
fn filter(db: &Db, args: &[&str], input: &[u8]) -> Output {
    let mut all = vec!["filter"];
    all.extend_from_slice(args);
    db.run(&all, Some(input))
}

/// A database trained on the sample corpus.
fn trained() -> Db {
    let db = Db::new();
    db.train_sample();
    db
}

#[test]
fn filter_adds_only_our_headers_to_every_public_message_lf_and_crlf() {
    let Some(corpus) = public_corpus() else {
        return;
    };
    let db = trained();
    let files = public_files(&corpus);
    let next = AtomicUsize::new(0);
    let checked = AtomicUsize::new(0);
    let renamed = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((path, lf)) = files.get(i) else {
                        break;
                    };
                    for input in [lf.clone(), to_crlf(lf)] {
                        let out = filter(&db, &[], &input);
                        assert_exit(&out, 0, &["filter", utf8(path)]);
                        let (restored, status, crlf) = strip_ours(&out.stdout);
                        assert!(restored == input, "{}: bytes changed", path.display());
                        let word = status_word(&status);
                        assert_ne!(word, "Unknown", "{}: {status}", path.display());
                        let first_line = input.split(|&b| b == b'\n').next().unwrap();
                        assert_eq!(crlf, first_line.ends_with(b"\r"), "{}", path.display());
                        if out.stdout.windows(5).any(|w| w == b"\nOld-") {
                            renamed.fetch_add(1, Ordering::Relaxed);
                        }
                        checked.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(checked.into_inner(), 2 * files.len());
    // The public corpus carries X-Spam-Status fields from another filter:
    // they must have been renamed, not removed or left to be believed.
    assert!(renamed.into_inner() > 100);
}

/// Asserts `out` is `input` with `X-Spam-Status: Unknown, reason=REASON`
/// added, and the exit status is `code`.
fn assert_unknown(out: &Output, input: &[u8], reason: &str, code: i32) {
    assert_exit(out, code, &["filter", reason]);
    let (restored, status, _) = strip_ours(&out.stdout);
    assert!(restored == input, "bytes changed ({reason})");
    assert_eq!(status_word(&status), "Unknown");
    assert!(
        status.contains(&format!("reason={reason},")),
        "{status} is not {reason}"
    );
    assert!(!stderr(out).is_empty(), "the reason goes to stderr");
}

#[test]
fn filter_gives_verdict_headers_and_verdict_exit_codes() {
    let db = trained();
    // A spam and a ham message the model is sure of, by `classify`.
    let sure = |class: &Path, verdict: &str| {
        let file = sample_files()
            .into_iter()
            .filter(|f| f.starts_with(class))
            .find(|f| db.classify(&[f])[0]["verdict"] == verdict)
            .unwrap_or_else(|| panic!("a sample message classified as {verdict}"));
        fs::read(file).unwrap()
    };
    let (spam, ham) = (sure(&sample_spam(), "spam"), sure(&sample_ham(), "ham"));
    for (input, word, code) in [(&spam[..], "Yes", 0), (&ham[..], "No", 1)] {
        let out = filter(&db, &[], input);
        assert_exit(&out, 0, &["filter"]);
        let (restored, status, _) = strip_ours(&out.stdout);
        assert!(restored == input);
        assert_eq!(status_word(&status), word, "{status}");
        let flagged = out.stdout.starts_with(b"X-Spam-Flag: YES\n");
        assert_eq!(flagged, word == "Yes");
        let out = filter(&db, &["--verdict-exit"], input);
        assert_exit(&out, code, &["filter", "--verdict-exit"]);
    }
    // A forged verdict is renamed, and ours goes before it.
    let forged = [
        b"X-Spam-Status: No, hits=-100\nX-Spam-Flag: NO\n".as_ref(),
        &spam,
    ]
    .concat();
    let out = filter(&db, &[], &forged);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("X-Spam-Flag: YES\nX-Spam-Status: Yes, "),
        "{text}"
    );
    assert!(
        text.contains(concat!(
            " version=",
            env!("CARGO_PKG_VERSION"),
            "\nOld-X-Spam-Status: No, hits=-100\nOld-X-Spam-Flag: NO\n"
        )),
        "{text}"
    );
}

#[test]
fn filter_fails_open_without_a_usable_model() {
    let input = SPAMMY;
    // No model at all.
    let db = Db::new();
    assert_unknown(&filter(&db, &[], input), input, "no-model", 0);
    assert_unknown(
        &filter(&db, &["--verdict-exit"], input),
        input,
        "no-model",
        3,
    );

    // A model of another format or tokenizer version.
    let db = trained();
    let good = fs::read(db.model()).unwrap();
    for at in [8, 12] {
        let mut other = good.clone();
        other[at] = other[at].wrapping_add(1);
        fs::write(db.model(), &other).unwrap();
        assert_unknown(&filter(&db, &[], input), input, "model-version", 0);
        assert_unknown(
            &filter(&db, &["--verdict-exit"], input),
            input,
            "model-version",
            3,
        );
        if at == 8 {
            // Another model file format: the database is fine, and the
            // error says that training again rewrites the model file.
            let out = filter(&db, &[], input);
            assert!(
                stderr(&out).contains("training on this database again rewrites"),
                "{}",
                stderr(&out)
            );
            let summary = db.train(&[&sample_spam()], &[&sample_ham()]);
            assert_eq!(summary["snapshot_written"], true, "{summary}");
            let out = filter(&db, &[], input);
            assert_exit(&out, 0, &["filter after retraining"]);
            let (restored, status, _) = strip_ours(&out.stdout);
            assert!(restored == input);
            assert_ne!(status_word(&status), "Unknown", "{status}");
            fs::write(db.model(), &good).unwrap();
        }
    }
    // Damaged: truncated, garbage, a directory in its place.
    fs::write(db.model(), &good[..good.len() / 2]).unwrap();
    assert_unknown(&filter(&db, &[], input), input, "model-unreadable", 0);
    fs::write(db.model(), b"not a model at all").unwrap();
    assert_unknown(&filter(&db, &[], input), input, "model-unreadable", 0);
    fs::remove_file(db.model()).unwrap();
    fs::create_dir(db.model()).unwrap();
    assert_unknown(&filter(&db, &[], input), input, "model-unreadable", 0);

    // A broken configuration file.
    let db = trained();
    fs::write(db.path("config.toml"), "[decision]\ncosts = \"nonsense\"\n").unwrap();
    assert_unknown(&filter(&db, &[], input), input, "config-error", 0);
    fs::write(db.path("config.toml"), "this is not toml =").unwrap();
    assert_unknown(&filter(&db, &[], input), input, "config-error", 0);
}

#[test]
fn filter_passes_a_60_mb_message_through_unscored() {
    let db = trained();
    let mut input =
        b"From: big@example.org\r\nSubject: a large attachment\r\nContent-Type: text/plain\r\n\r\n"
            .to_vec();
    let line = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345678\r\n";
    while input.len() < 60 << 20 {
        input.extend_from_slice(line);
    }
    let out = filter(&db, &[], &input);
    assert_unknown(&out, &input, "too-large", 0);
    let out = filter(&db, &["--verdict-exit"], &input);
    assert_unknown(&out, &input, "too-large", 3);
    // The cap is a setting: a small message over a small cap.
    let small = [b"Subject: short header\n\n".as_ref(), &[b'x'; 300]].concat();
    assert_unknown(
        &filter(&db, &["--max-size", "100"], &small),
        &small,
        "too-large",
        0,
    );
    fs::write(db.path("config.toml"), "[filter]\nmax_size = \"100\"\n").unwrap();
    assert_unknown(&filter(&db, &[], &small), &small, "too-large", 0);
    // A header block longer than the cap still carries our field: it goes
    // at the top.
    assert_unknown(&filter(&db, &[], SPAMMY), SPAMMY, "too-large", 0);
}

#[test]
fn filter_passes_random_bytes_through_unchanged() {
    let db = trained();
    // A fixed-seed generator: the same inputs on every run.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..24 {
        let len = (next() % 5000) as usize;
        let mut input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 3 == 1 {
            // Random bytes behind a header line: a header block to add to.
            input.splice(0..0, b"Subject: noise\n".iter().copied());
        }
        if round % 6 == 2 {
            input.retain(|&b| b != 0);
        }
        let out = filter(&db, &[], &input);
        assert_exit(&out, 0, &["filter", "random bytes"]);
        if out.stdout != input {
            let (restored, status, _) = strip_ours(&out.stdout);
            assert!(restored == input, "round {round}: bytes changed");
            status_word(&status);
        } else {
            assert!(
                round % 3 != 1,
                "round {round}: a header block got no status"
            );
        }
        let out = filter(&db, &["--verdict-exit"], &input);
        assert!(matches!(out.status.code(), Some(0..=3)), "{:?}", out.status);
    }
    // Empty input: nothing in, nothing out.
    let out = filter(&db, &[], b"");
    assert_exit(&out, 0, &["filter", "empty"]);
    assert!(out.stdout.is_empty());
}

#[test]
fn filter_with_a_closed_stdout_tells_the_agent_to_keep_the_message() {
    let db = trained();
    let mut input = SPAMMY.to_vec();
    input.extend(std::iter::repeat_n(b"filler line to fill pipes\n".as_slice(), 40_000).flatten());
    for (flag, code) in [(None, 75), (Some("--verdict-exit"), 3)] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args()).arg("filter").args(flag);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
            input
        });
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        input = writer.join().unwrap();
        assert_eq!(status.code(), Some(code), "{err}");
        assert!(err.contains("keep it"), "{err}");
    }
}

#[test]
fn many_filters_at_once_while_training_runs() {
    let Some(corpus) = public_corpus() else {
        return;
    };
    let db = trained();
    let inputs: Vec<Vec<u8>> = public_files(&corpus)
        .into_iter()
        .step_by(97)
        .take(32)
        .map(|(_, bytes)| bytes)
        .collect();
    assert_eq!(inputs.len(), 32);
    // A training run on the same database, holding its lock and replacing
    // the model snapshot while the filters run.
    let mut train = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    train
        .args(db.global_args())
        .args(["train", "--spam"])
        .arg(corpus.join("spam-2"))
        .arg("--ham")
        .arg(corpus.join("easy-ham-2"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut train = train.spawn().unwrap();
    for round in 0..3 {
        let children: Vec<_> = inputs
            .iter()
            .map(|input| {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
                cmd.args(db.global_args()).arg("filter");
                spawn_with_stdin(cmd, input)
            })
            .collect();
        for ((child, writer), input) in children.into_iter().zip(&inputs) {
            let out = child.wait_with_output().unwrap();
            writer.join().unwrap().unwrap();
            assert_exit(&out, 0, &["filter", "concurrent", &round.to_string()]);
            let (restored, status, _) = strip_ours(&out.stdout);
            assert!(
                restored == *input,
                "round {round}: output incomplete or changed"
            );
            assert_ne!(status_word(&status), "Unknown", "{status}");
        }
    }
    assert!(train.wait().unwrap().success());
}

/// A Maildir at `dir` holding the sample corpus's messages in `cur/`.
fn sample_maildir(dir: &Path) -> Vec<PathBuf> {
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(dir.join(sub)).unwrap();
    }
    sample_files()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let to = dir.join("cur").join(format!("{i}.sample.host:2,S"));
            fs::copy(f, &to).unwrap();
            to
        })
        .collect()
}

/// Every file under the Maildir's cur/ and new/, with its bytes.
fn maildir_contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for sub in ["cur", "new"] {
        if let Ok(entries) = fs::read_dir(dir.join(sub)) {
            for e in entries {
                let p = e.unwrap().path();
                out.push((
                    format!("{sub}/{}", p.file_name().unwrap().to_str().unwrap()),
                    fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn scan_reports_every_message_in_each_format() {
    let db = trained();
    let inbox = db.path("inbox");
    let files = sample_maildir(&inbox);
    let json = json_lines(&db.ok(&["scan", "--json", utf8(&inbox)], None));
    assert_eq!(json.len(), files.len());
    for line in &json {
        assert!(["ham", "unsure", "spam"].contains(&line["verdict"].as_str().unwrap()));
        assert!(line.get("action").is_none());
    }
    let classify = json_lines(&db.ok(&["classify", "--json", utf8(&inbox)], None));
    for (s, c) in json.iter().zip(&classify) {
        assert_eq!(s["id"], c["id"]);
        assert_eq!(s["verdict"], c["verdict"]);
        assert_eq!(s["probability"], c["probability"]);
    }
    let csv = db.ok(&["scan", "--csv", utf8(&inbox)], None);
    let mut rows = csv.lines();
    assert_eq!(
        rows.next(),
        Some("id,verdict,probability,log_odds,known_tokens,action,to")
    );
    assert_eq!(rows.count(), files.len());
    let out = db.run(&["scan", utf8(&inbox)], None);
    assert_exit(&out, 0, &["scan"]);
    let table = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(table.lines().count(), files.len());
    let summary = stderr(&out);
    assert!(
        summary.contains(&format!("scanned {} messages", files.len())),
        "{summary}"
    );
    assert!(
        !summary.contains('\r'),
        "no progress bar when stderr is not a terminal"
    );

    // An unreadable message is reported and skipped; the exit status says so.
    fs::write(inbox.join("new/empty.host"), b"").unwrap();
    let out = db.run(&["scan", "--json", utf8(&inbox)], None);
    assert_exit(&out, 1, &["scan", "with an empty message"]);
    assert_eq!(
        json_lines(&String::from_utf8(out.stdout.clone()).unwrap()).len(),
        files.len()
    );
    assert!(stderr(&out).contains("empty.host"), "{}", stderr(&out));
}

/// `scan` run by root moves or writes no mail in another user's Maildir
/// (nor makes one there): that user could swap its folders for links
/// while the run renames and writes through them (into /etc, say), and
/// what root made there (`.Junk` and its `cur/`, `new/`, `tmp/`, private)
/// was closed to them, so their client, Dovecot and the delivery recipes
/// could not open it. Refused whether the paths are absolute or relative,
/// naming the owner, and for each message of a folder of theirs a sweep
/// reaches through root's own (a link followed); reading their mail
/// (classifying, copying out of it into root's own folder) is not. A
/// copy keeps its message's modification time, which Maildir readers
/// take for when it was received.
#[test]
fn scan_as_root_moves_and_writes_no_mail_in_another_users_maildir() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("needs root: test skipped");
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let db = trained();
    let maildir = db.path("home/Maildir");
    let inbox = maildir.join(".Inbox");
    let files = sample_maildir(&inbox);
    let received = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    for f in &files {
        fs::File::options()
            .write(true)
            .open(f)
            .unwrap()
            .set_modified(received)
            .unwrap();
    }
    let chown = Command::new("chown")
        .args(["-R", "nobody:nogroup"])
        .arg(db.path("home"))
        .status()
        .unwrap();
    assert!(chown.success());
    let before = maildir_contents(&inbox);
    let review = db.path("review");
    let scan = |args: &[&str], dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_bayesmail"))
            .args(db.global_args())
            .arg("scan")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap()
    };
    let junk = maildir.join(".Junk");
    for (args, dir, owned) in [
        (
            vec!["--move-spam-to", utf8(&junk), utf8(&inbox)],
            db.path(""),
            "belongs to nobody",
        ),
        (
            vec!["--copy-spam-to", utf8(&junk), utf8(&inbox)],
            db.path(""),
            "would be made in a directory of nobody",
        ),
        (
            vec!["--copy-spam-to", ".Junk", ".Inbox"],
            maildir.clone(),
            "would be made in a directory of nobody",
        ),
        (
            vec!["--move-spam-to", ".Junk", ".Inbox"],
            maildir.clone(),
            "belongs to nobody",
        ),
        (
            vec!["--move-spam-to", utf8(&inbox), utf8(&inbox)],
            db.path(""),
            "belongs to nobody",
        ),
        (
            vec!["--move-spam-to", utf8(&review), utf8(&inbox)],
            db.path(""),
            "belongs to nobody",
        ),
    ] {
        let out = scan(&args, &dir);
        assert_exit(&out, 2, &args);
        let err = stderr(&out);
        assert!(
            err.contains(owned) && err.contains("runuser -u nobody"),
            "{args:?}: {err}"
        );
    }
    assert!(!junk.exists() && !review.exists());
    assert_eq!(maildir_contents(&inbox), before);
    // Nor in a folder of root's that every user may change.
    let open = db.path("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let out = scan(&["--copy-spam-to", utf8(&open), utf8(&inbox)], &db.path(""));
    assert_exit(&out, 2, &["copy into a folder every user may change"]);
    assert!(
        stderr(&out).contains("may be changed by every user"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fs::read_dir(&open).unwrap().count(), 0);
    // A dry run says what the run would do: refuse.
    let out = scan(
        &["--dry-run", "--move-spam-to", utf8(&junk), utf8(&inbox)],
        &db.path(""),
    );
    assert_exit(&out, 2, &["dry run"]);
    // A folder of theirs reached through root's own (a link a recursive
    // sweep follows): each message stays, and says why.
    let sweep = db.path("sweep");
    fs::create_dir(&sweep).unwrap();
    std::os::unix::fs::symlink(&inbox, sweep.join("nobody")).unwrap();
    let out = scan(
        &[
            "--json",
            "--recursive",
            "--move-spam-to",
            utf8(&review),
            utf8(&sweep),
        ],
        &db.path(""),
    );
    assert_exit(&out, 1, &["sweep through a link"]);
    let lines = json_lines(&String::from_utf8(out.stdout.clone()).unwrap());
    let spam: Vec<_> = lines.iter().filter(|l| l["verdict"] == "spam").collect();
    assert!(spam.len() >= 15, "{lines:?}");
    assert!(spam.iter().all(|l| l["action"] == "failed"), "{lines:?}");
    assert!(stderr(&out).contains("not moved:"), "{}", stderr(&out));
    assert_eq!(maildir_contents(&inbox), before);
    // Reading it is not refused: copies into root's own folder, which
    // keep each message's time.
    let out = scan(
        &["--copy-spam-to", utf8(&review), utf8(&inbox)],
        &db.path(""),
    );
    assert_exit(&out, 0, &["copy into root's folder"]);
    let copies = maildir_contents(&review);
    assert!(copies.len() >= 15, "{}", copies.len());
    for (name, _) in copies {
        let meta = fs::metadata(review.join(&name)).unwrap();
        assert_eq!(meta.mtime(), 1_600_000_000, "{name}");
    }
    assert_eq!(maildir_contents(&inbox), before);
}

#[test]
fn scan_moves_spam_into_a_maildir_without_loss_or_duplicates() {
    let db = trained();
    let inbox = db.path("inbox");
    sample_maildir(&inbox);
    let before = maildir_contents(&inbox);
    let junk = db.path("junk");
    let scan = |args: &[&str]| json_lines(&db.ok(&[&["scan", "--json"], args].concat(), None));

    // A dry run changes nothing and says what it would do.
    let dry = scan(&["--dry-run", "--move-spam-to", utf8(&junk), utf8(&inbox)]);
    let spam: Vec<&serde_json::Value> = dry.iter().filter(|l| l["verdict"] == "spam").collect();
    assert!(spam.len() >= 15, "{} spam", spam.len());
    assert!(spam.iter().all(|l| l["action"] == "would-move"));
    assert_eq!(maildir_contents(&inbox), before);
    assert!(!junk.exists());

    let moved = scan(&["--move-spam-to", utf8(&junk), utf8(&inbox)]);
    let n_moved = moved.iter().filter(|l| l["action"] == "moved").count();
    assert_eq!(n_moved, spam.len());
    let (left, gone) = (maildir_contents(&inbox), maildir_contents(&junk));
    assert_eq!(left.len() + gone.len(), before.len());
    let mut all: Vec<_> = left.into_iter().chain(gone.clone()).collect();
    all.sort();
    assert_eq!(all, before, "every message kept, name and bytes");
    for l in &moved {
        if l["action"] == "moved" {
            assert!(Path::new(l["to"].as_str().unwrap()).is_file());
        }
    }

    // Again: nothing left to move in the inbox; scanning the junk folder
    // onto itself keeps every message.
    let again = scan(&["--move-spam-to", utf8(&junk), utf8(&inbox)]);
    assert!(again.iter().all(|l| l["action"].is_null()), "{again:?}");
    db.ok(&["scan", "--move-spam-to", utf8(&junk), utf8(&junk)], None);
    assert_eq!(maildir_contents(&junk), gone);

    // Copying from an mbox: copies named by content, not repeated.
    let mbox = db.path("spam.mbox");
    let mut bytes = Vec::new();
    for f in sample_files()
        .iter()
        .filter(|f| f.starts_with(sample_spam()))
    {
        bayesmail::mailbox::write_mbox_message(&mut bytes, None, &fs::read(f).unwrap()).unwrap();
    }
    fs::write(&mbox, &bytes).unwrap();
    let copies = db.path("copies");
    let first = scan(&["--copy-spam-to", utf8(&copies), utf8(&mbox)]);
    let n_copied = first.iter().filter(|l| l["action"] == "copied").count();
    assert!(n_copied >= 15);
    let second = scan(&["--copy-spam-to", utf8(&copies), utf8(&mbox)]);
    assert_eq!(
        second
            .iter()
            .filter(|l| l["action"] == "already-there")
            .count(),
        n_copied
    );
    assert_eq!(maildir_contents(&copies).len(), n_copied);

    // Moving out of an mbox is refused before anything happens.
    let out = db.run(
        &["scan", "--move-spam-to", utf8(&copies), utf8(&mbox)],
        None,
    );
    assert_exit(&out, 2, &["scan", "--move-spam-to", "mbox"]);
    assert!(stderr(&out).contains("--copy-spam-to"), "{}", stderr(&out));
}
