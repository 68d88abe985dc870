//! `scan` under hostile conditions (issue 15): moves whose original cannot
//! be removed, mail clients renaming messages between runs, mbox messages
//! that differ only in rewritten headers, relative symlinks, and file names
//! carrying terminal escapes and bidi controls.

use std::fs;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::common::*;

fn trained() -> Db {
    let db = Db::new();
    db.train_sample();
    db
}

/// The bytes of the sample corpus's first spam (judged spam by a model
/// trained on the sample corpus).
fn spam() -> Vec<u8> {
    let mut files: Vec<PathBuf> = fs::read_dir(sample_spam())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    fs::read(&files[0]).unwrap()
}

fn make_maildir(dir: &Path) {
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(dir.join(sub)).unwrap();
    }
}

/// The files in a Maildir's `cur/` and `new/`, as `sub/name`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for sub in ["cur", "new"] {
        if let Ok(entries) = fs::read_dir(dir.join(sub)) {
            for e in entries {
                let name = e.unwrap().file_name();
                out.push(format!("{sub}/{}", name.to_str().unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// `scan --json ARGS`: the output and its lines.
fn scan(db: &Db, args: &[&str]) -> (Output, Vec<Value>) {
    let out = db.run(&[&["scan", "--json"], args].concat(), None);
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    (out, lines)
}

/// Makes `dir` refuse to have entries removed, for as long as the guard
/// lives: `chattr +a` (append-only, which holds even for root) where the
/// filesystem and privileges allow it, else a read-only mode (which holds
/// for other users). `None` if neither takes effect here.
struct Undeletable(PathBuf);

impl Undeletable {
    fn new(dir: &Path) -> Option<Undeletable> {
        use std::os::unix::fs::PermissionsExt;
        let probe = |n: &str| {
            let p = dir.join(format!(".probe-{n}"));
            fs::write(&p, b"x").unwrap();
            p
        };
        let (a, b) = (probe("a"), probe("b"));
        let guard = Undeletable(dir.to_path_buf());
        let chattr = Command::new("chattr").arg("+a").arg(dir).output();
        if chattr.is_ok_and(|o| o.status.success()) && fs::remove_file(&a).is_err() {
            return Some(guard);
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).unwrap();
        if fs::remove_file(&b).is_err() {
            return Some(guard);
        }
        None
    }
}

impl Drop for Undeletable {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = Command::new("chattr").arg("-a").arg(&self.0).output();
        let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o755));
    }
}

/// F17: across filesystems, a move copies and then deletes. When the
/// delete fails the message is in both places: that is reported precisely,
/// counted, makes the exit status 1, and a re-run neither copies again nor
/// says anything else; once the original can be removed, a re-run finishes
/// the move.
#[test]
fn a_cross_filesystem_move_whose_original_cannot_be_removed_is_reported_and_finished_later() {
    let db = trained();
    // The Maildir to move from must be on another filesystem than the
    // Junk folder; /dev/shm is a tmpfs where there is one.
    let Ok(other) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("no /dev/shm: test skipped");
        return;
    };
    let junk = db.path("junk");
    let here = fs::metadata(db.path("config.toml")).unwrap().dev();
    if fs::metadata(other.path()).unwrap().dev() == here {
        eprintln!("/dev/shm is not another filesystem: test skipped");
        return;
    }
    let inbox = other.path().join("inbox");
    make_maildir(&inbox);
    let original = inbox.join("new/1.spam.host");
    fs::write(&original, spam()).unwrap();
    let Some(guard) = Undeletable::new(&inbox.join("new")) else {
        eprintln!("cannot make a directory undeletable here: test skipped");
        return;
    };

    let args = ["--move-spam-to", utf8(&junk), utf8(&inbox)];
    for run in ["first", "again"] {
        let (out, lines) = scan(&db, &args);
        assert_exit(&out, 1, &["scan", run]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["action"], "copied-not-removed", "{run}: {lines:?}");
        assert_eq!(lines[0]["to"], utf8(&junk.join("new/1.spam.host")));
        let err = stderr(&out);
        assert!(
            err.contains("could not be removed") && err.contains(utf8(&original)),
            "{run}: {err}"
        );
        assert!(
            err.contains("moved 0 to") && err.contains("1 copied but not removed"),
            "{run}: {err}"
        );
        assert!(original.exists());
        assert_eq!(listing(&junk), ["new/1.spam.host"], "{run}");
    }

    drop(guard);
    let (out, lines) = scan(&db, &args);
    assert_exit(&out, 0, &["scan", "once the original can be removed"]);
    assert_eq!(lines[0]["action"], "already-there", "{lines:?}");
    assert!(!original.exists());
    assert_eq!(listing(&junk), ["new/1.spam.host"]);
    assert_eq!(fs::read(junk.join("new/1.spam.host")).unwrap(), spam());
}

/// F18: a copy is recognised by its Maildir unique name, whatever the mail
/// client did to either file since (new/ → cur/, flags changed).
#[test]
fn copies_are_not_repeated_after_the_client_renames_either_file() {
    let db = trained();
    let inbox = db.path("inbox");
    let junk = db.path("junk");
    make_maildir(&inbox);
    fs::write(inbox.join("new/1.spam.host"), spam()).unwrap();
    let args = ["--copy-spam-to", utf8(&junk), utf8(&inbox)];

    let (out, lines) = scan(&db, &args);
    assert_exit(&out, 0, &["scan", "first"]);
    assert_eq!(lines[0]["action"], "copied");
    assert_eq!(listing(&junk), ["new/1.spam.host"]);

    // The client reads the message in the inbox.
    fs::rename(
        inbox.join("new/1.spam.host"),
        inbox.join("cur/1.spam.host:2,S"),
    )
    .unwrap();
    let (out, lines) = scan(&db, &args);
    assert_exit(&out, 0, &["scan", "after new/ -> cur/"]);
    assert_eq!(lines[0]["action"], "already-there", "{lines:?}");
    assert_eq!(listing(&junk), ["new/1.spam.host"]);

    // ... then the copy in Junk, and flags the original again.
    fs::rename(
        junk.join("new/1.spam.host"),
        junk.join("cur/1.spam.host:2,S"),
    )
    .unwrap();
    fs::rename(
        inbox.join("cur/1.spam.host:2,S"),
        inbox.join("cur/1.spam.host:2,FS"),
    )
    .unwrap();
    let (out, lines) = scan(&db, &args);
    assert_exit(&out, 0, &["scan", "after flags changed"]);
    assert_eq!(lines[0]["action"], "already-there", "{lines:?}");
    assert_eq!(lines[0]["to"], utf8(&junk.join("cur/1.spam.host:2,S")));
    assert_eq!(listing(&junk), ["cur/1.spam.host:2,S"]);
}

/// F19: mbox messages that differ only in headers a mail program rewrites
/// (`Status:`, `X-Spam-*`) are distinct files, and each gets a name of its
/// own; copying them again, or after the client filed the copies in cur/,
/// writes nothing.
#[test]
fn mbox_messages_differing_only_in_rewritten_headers_get_distinct_names() {
    let db = trained();
    let body = spam();
    let mut mbox = Vec::new();
    for extra in [&b""[..], b"Status: RO\n", b"X-Spam-Status: Yes\n"] {
        let message = [extra, &body[..]].concat();
        bayesmail::mailbox::write_mbox_message(&mut mbox, None, &message).unwrap();
    }
    let path = db.path("spam.mbox");
    fs::write(&path, &mbox).unwrap();
    let junk = db.path("junk");
    let args = ["--copy-spam-to", utf8(&junk), utf8(&path)];

    let (out, lines) = scan(&db, &args);
    assert_exit(&out, 0, &["scan", "first"]);
    let actions: Vec<_> = lines.iter().map(|l| l["action"].clone()).collect();
    assert_eq!(actions, ["copied", "copied", "copied"], "{}", stderr(&out));
    let first = listing(&junk);
    assert_eq!(first.len(), 3, "{first:?}");

    let (out, lines) = scan(&db, &args);
    assert_exit(&out, 0, &["scan", "again"]);
    assert!(
        lines.iter().all(|l| l["action"] == "already-there"),
        "{lines:?}"
    );
    assert_eq!(listing(&junk), first);

    // The client files the copies as read.
    for name in &first {
        let from = junk.join(name);
        let to = junk.join("cur").join(format!(
            "{}:2,S",
            from.file_name().unwrap().to_str().unwrap()
        ));
        fs::rename(from, to).unwrap();
    }
    let (out, lines) = scan(&db, &args);
    assert_exit(&out, 0, &["scan", "after the client filed them"]);
    assert!(
        lines.iter().all(|l| l["action"] == "already-there"),
        "{lines:?}"
    );
    assert_eq!(listing(&junk).len(), 3);
}

/// F21: a message that is a relative symlink keeps its content when moved
/// to a Maildir at another depth.
#[test]
fn moving_a_relative_symlink_keeps_the_message() {
    let db = trained();
    let inbox = db.path("inbox");
    make_maildir(&inbox);
    let store = db.path("store");
    fs::create_dir_all(&store).unwrap();
    fs::write(store.join("m.eml"), spam()).unwrap();
    symlink("../../store/m.eml", inbox.join("cur/1.link.host:2,S")).unwrap();
    let junk = db.path("deeper/still/junk");

    let (out, lines) = scan(&db, &["--move-spam-to", utf8(&junk), utf8(&inbox)]);
    assert_exit(&out, 0, &["scan", "--move-spam-to"]);
    assert_eq!(lines[0]["action"], "moved", "{lines:?}");
    let moved = junk.join("cur/1.link.host:2,S");
    assert_eq!(
        fs::read(&moved).unwrap(),
        spam(),
        "the moved message is readable"
    );
    assert!(fs::symlink_metadata(inbox.join("cur/1.link.host:2,S")).is_err());
    // The file the link led to is not the scan's to remove.
    assert_eq!(fs::read(store.join("m.eml")).unwrap(), spam());
    let (out, lines) = scan(&db, &[utf8(&junk)]);
    assert_exit(&out, 0, &["scan", "the Junk folder"]);
    assert_eq!(lines[0]["verdict"], "spam");
}

/// F25: file names carry escapes and bidi controls to whoever reads the
/// report; no output format passes them on raw.
#[test]
fn file_names_with_escapes_and_bidi_controls_are_sanitised_in_every_format() {
    let db = trained();
    let dir = db.path("dir");
    fs::create_dir_all(&dir).unwrap();
    let name = "evil\x1b[2J\u{9b}31m\u{202e}lmx.eml, \"q\"";
    fs::write(dir.join(name), spam()).unwrap();
    let junk = db.path("junk");
    let raw = |s: &str| s.contains(['\x1b', '\u{9b}', '\u{202e}']);

    for format in ["--csv", "--json", "--no-progress"] {
        let out = db.run(
            &["scan", format, "--copy-spam-to", utf8(&junk), utf8(&dir)],
            None,
        );
        assert_exit(&out, 0, &["scan", format]);
        let text = String::from_utf8(out.stdout.clone()).unwrap();
        assert!(!raw(&text), "{format}: {text:?}");
        assert!(!raw(&stderr(&out)), "{format}: {}", stderr(&out));
        match format {
            "--csv" => {
                let row = text.lines().nth(1).unwrap();
                assert!(
                    row.starts_with('"') && row.contains(r#"\u{202e}lmx.eml, ""q""","#),
                    "{row}"
                );
            }
            "--json" => {
                // Escaped, so the id still reads back exactly.
                let line = &json_lines(&text)[0];
                assert_eq!(line["id"], utf8(&dir.join(name)));
            }
            _ => assert!(
                text.contains(r"\u{1b}[2J\u{9b}31m\u{202e}lmx.eml"),
                "{text}"
            ),
        }
    }
}

/// Issue 26, S3: the name a copy gets in the target's `tmp/` follows from
/// the message's bytes, so another user can plant a link (or a FIFO)
/// there first. The copy never writes through the link (the file it leads
/// to keeps its bytes), never waits on the FIFO, and still lands in the
/// target as a regular file holding the message.
#[test]
fn a_link_or_fifo_planted_at_the_temporary_name_is_never_written_through() {
    let db = trained();
    let junk = db.path("junk");
    make_maildir(&junk);
    let victim = db.path("victim");
    let target = bayesmail::mailbox::Maildir::at(&junk).target(None, &spam());
    let name = target.file_name().unwrap();
    let planted = junk.join("tmp").join(name);
    let source = db.path("message.eml");
    fs::write(&source, spam()).unwrap();
    for plant in ["link", "fifo"] {
        fs::write(&victim, b"someone else's file").unwrap();
        if plant == "link" {
            symlink(&victim, &planted).unwrap();
        } else {
            let made = Command::new("mkfifo").arg(&planted).status().unwrap();
            assert!(made.success());
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args()).args([
            "scan",
            "--json",
            "--copy-spam-to",
            utf8(&junk),
            utf8(&source),
        ]);
        let (mut child, writer) = spawn_with_stdin(cmd, b"");
        let start = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > std::time::Duration::from_secs(60) {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("{plant}: scan did not exit: it blocked");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let _ = writer.join();
        assert_exit(&out, 0, &["scan", plant]);
        let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(lines[0]["action"], "copied", "{plant}: {lines:?}");
        assert!(
            fs::read(&victim).unwrap() == b"someone else's file",
            "{plant}: written through"
        );
        let meta = fs::symlink_metadata(&target).unwrap();
        assert!(meta.is_file(), "{plant}: {:?}", meta.file_type());
        assert_eq!(fs::read(&target).unwrap(), spam(), "{plant}");
        // What was planted is left alone.
        assert!(fs::symlink_metadata(&planted).is_ok(), "{plant}");
        fs::remove_file(&target).unwrap();
        fs::remove_file(&planted).unwrap();
    }
}

/// What could not be read (a link to nothing) and what is not mail are
/// each told, counted in the summary, and make the exit status 1.
#[test]
fn the_summary_counts_what_could_not_be_read_and_what_is_not_mail() {
    let db = trained();
    let dir = db.path("inbox");
    make_maildir(&dir);
    fs::write(dir.join("new/1.eml"), spam()).unwrap();
    fs::write(dir.join("new/2.txt"), b"not mail at all\n").unwrap();
    symlink("/nonexistent/message", dir.join("new/3.eml")).unwrap();
    let out = db.run(&["scan", utf8(&dir)], None);
    assert_exit(&out, 1, &["scan", "with an unreadable file"]);
    let err = stderr(&out);
    let summary = err
        .lines()
        .find(|l| l.starts_with("scanned "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(summary.starts_with("scanned 1 messages"), "{summary}");
    assert!(summary.contains("; 1 could not be read"), "{summary}");
    assert!(summary.contains("; 1 skipped: not mail"), "{summary}");
    assert!(err.contains("3.eml"), "{err}");
}

/// A sweep that moves spam goes on when whoever reads its lines stops
/// (`scan --move-spam-to … | head -1`), and its exit status says how the
/// sweep went. Before, it stopped at the first line that could not be
/// written, with most spam left in place, and exited 0.
#[test]
fn a_sweep_goes_on_when_its_output_is_closed() {
    let db = trained();
    let tmp = tempfile::tempdir().unwrap();
    let inbox = tmp.path().join("inbox");
    make_maildir(&inbox);
    let spam = spam();
    // Lines enough to fill any pipe's buffer several times over.
    let n = 3000;
    for i in 0..n {
        let mut message = spam.clone();
        message.extend_from_slice(format!("\n{i}\n").as_bytes());
        fs::write(inbox.join(format!("new/{i}.m.host")), message).unwrap();
    }
    let junk = tmp.path().join("junk");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args())
        .args(["scan", "--move-spam-to", utf8(&junk), utf8(&inbox)])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 0, &["scan with its output closed"]);
    assert_eq!(listing(&inbox), Vec::<String>::new(), "spam left in place");
    assert_eq!(listing(&junk).len(), n);
}
