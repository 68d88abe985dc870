//! The command line as users run it.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::common::{Db, assert_exit, public_corpus, run, sample_dir, stderr};

/// A database that has learned one class has counts and no model: the
/// commands that read the model say so, and change nothing (a new user's
/// first `stats` after a first learn).
#[test]
fn a_database_of_one_class_is_said_to_have_no_model_and_left_alone() {
    let db = Db::new();
    let spam = std::fs::read_dir(crate::common::sample_spam())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let spam = spam.to_str().unwrap();
    let learned = db.run(&["learn", "--spam", spam], None);
    assert!(learned.status.success(), "{}", stderr(&learned));
    let files = |dir: &std::path::Path| {
        let mut all: Vec<(String, std::time::SystemTime)> = walk(dir)
            .into_iter()
            .map(|p| {
                let modified = std::fs::metadata(&p).unwrap().modified().unwrap();
                (p.display().to_string(), modified)
            })
            .collect();
        all.sort();
        all
    };
    let before = files(&db.dir());
    for args in [&["stats"][..], &["classify", spam][..]] {
        let out = db.run(args, None);
        assert_exit(&out, 2, args);
        assert!(
            stderr(&out).contains("a database that has learned one class so far has none"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(files(&db.dir()), before, "a reader changed the database");
    // Nothing is made where there is no database.
    let none = db.path("none");
    let config = db.path("config.toml");
    let none_db = none.to_str().unwrap();
    let out = run(
        &[
            "--db",
            none_db,
            "--config",
            config.to_str().unwrap(),
            "stats",
        ],
        None,
    );
    assert_exit(&out, 2, &["stats"]);
    assert!(!none.exists());
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn version_and_help() {
    let out = run(&["--version"], None);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with(concat!("bayesmail ", env!("CARGO_PKG_VERSION")))
    );
    for args in [&["--help"][..], &["tokens", "--help"]] {
        let out = run(args, None);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: bayesmail"));
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = run(&["tokens"], None);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["no-such-command"], None);
    assert_eq!(out.status.code(), Some(2));
    let out = run(
        &["tokens", "--mbox-escaping", "weird", "-"],
        Some(b"Subject: x\n\nbody\n"),
    );
    assert_eq!(out.status.code(), Some(2));
    // Each on one line: clap's error and tips, then which help to read.
    for (args, want) in [
        (
            &["learn", "--spam", "--ham", "x"][..],
            "bayesmail: the argument '--spam' cannot be used with '--ham' \
             (see `bayesmail learn --help`)\n",
        ),
        (
            &["learn"],
            "bayesmail: the following required arguments were not provided: <--spam|--ham> \
             (see `bayesmail learn --help`)\n",
        ),
        (
            &["prune", "--min-age", "1e3"],
            "bayesmail: invalid value '1e3' for '--min-age <DAYS>': invalid digit found in \
             string (see `bayesmail prune --help`)\n",
        ),
        (
            &["trian"],
            "bayesmail: unrecognized subcommand 'trian'; tip: a similar subcommand exists: \
             'train' (see `bayesmail --help`)\n",
        ),
    ] {
        let out = run(args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
    }
    // An environment variable of ours set but empty is named.
    let out = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .arg("stats")
        .env("BAYESMAIL_DB", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("BAYESMAIL_DB is set but empty"), "{err}");
}

#[test]
fn tokens_of_a_message_on_stdin_as_json() {
    let out = run(
        &["tokens", "--json", "-"],
        Some(b"Subject: Hello World\n\nCheap pills at http://pills.example/\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["id"], "-");
    let tokens: Vec<&str> = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for t in [
        "SUBJ:hello",
        "SUBJ:world",
        "cheap",
        "pills",
        "URL:pills.example",
    ] {
        assert!(tokens.contains(&t), "{t} missing from {tokens:?}");
    }
    let meta = v["metadata"].as_object().unwrap();
    assert_eq!(meta.len(), bayesmail::vocab::METADATA_LEN);
    assert!(
        meta.values()
            .all(|x| x.as_f64().is_some_and(f64::is_finite))
    );
}

#[test]
fn bad_messages_are_reported_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.eml"), b"Subject: one\n\nfirst\n").unwrap();
    std::fs::write(dir.path().join("b.eml"), b"").unwrap();
    std::fs::write(dir.path().join("c.eml"), b"Subject: three\n\nthird\n").unwrap();
    let missing = dir.path().join("missing");
    let out = run(
        &[
            "tokens",
            "--json",
            dir.path().to_str().unwrap(),
            missing.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // An empty file in a tree is an mbox with nothing in it, not an error.
    assert!(!stderr.contains("b.eml"), "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");
    let out = run(&["tokens", "-"], Some(b""));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty"));
}

#[test]
fn terminal_output_is_sanitised() {
    let msg = "Subject: =?utf-8?q?evil=1B=5B2J_name=E2=80=AE?=\nFrom: \"\x1b[31mred\" <a@b.example>\n\nhi\n";
    let out = run(&["tokens", "-"], Some(msg.as_bytes()));
    assert!(out.status.success());
    assert!(
        !out.stdout.contains(&0x1b),
        "raw escape reached the terminal"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\u{202e}'));
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .arg("tokens")
        .args(std::iter::repeat_n(sample_dir(), 8))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Acceptance: over every message of the public corpus, `tokens --json`
/// exits 0 and prints 6,046 lines, at least 99.5% with a non-empty token set.
#[test]
fn tokens_json_over_the_public_corpus() {
    let Some(dir) = public_corpus() else { return };
    let out = run(&["tokens", "--json", dir.to_str().unwrap()], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut lines = 0;
    let mut non_empty = 0;
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        lines += 1;
        non_empty += usize::from(!v["tokens"].as_array().unwrap().is_empty());
    }
    assert_eq!(lines, 6046);
    assert!(
        non_empty as f64 >= 0.995 * lines as f64,
        "{non_empty} of {lines} non-empty"
    );
}

/// Where the counts are: in the store whenever one is named, except for a
/// `--db` typed on the command line where no `--store` is. A `--db` given
/// to try something on a scratch directory must not teach the fleet's
/// store that the configuration or `BAYESMAIL_STORE` names, and a
/// `BAYESMAIL_DB` left in a delivery script must not take a fleet host off
/// its store (nothing listens at the store here: a command that takes it
/// fails, one that takes the directory learns).
#[test]
fn a_db_on_the_command_line_is_not_passed_over_for_a_store_from_elsewhere() {
    use crate::common::{Db, sample_files, stderr, utf8};
    let db = Db::new();
    let store = "redis://127.0.0.1:1/0";
    std::fs::write(db.path("config.toml"), format!("store = \"{store}\"\n")).unwrap();
    let files = sample_files();
    let learn = |env: &[(&str, &str)], args: &[&str], message: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_bayesmail"))
            .args(["--config", utf8(&db.path("config.toml"))])
            .args(args)
            .args(["learn", "--spam", utf8(message)])
            .env_remove("BAYESMAIL_DB")
            .env_remove("BAYESMAIL_STORE")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let dir = db.dir();
    let dir = utf8(&dir);
    // The file's store, the environment's: a typed --db wins, and learns.
    for (i, env) in [&[][..], &[("BAYESMAIL_STORE", store)]]
        .into_iter()
        .enumerate()
    {
        let out = learn(env, &["--db", dir], &files[i]);
        assert_eq!(out.status.code(), Some(0), "{env:?}: {}", stderr(&out));
        let log = std::fs::read_to_string(db.dir().join("learn.log")).unwrap();
        assert_eq!(log.lines().count(), i + 1, "{env:?}: {log}");
    }
    // A typed --store takes --db's place; with no --db the file's store is
    // the place, and so it is with BAYESMAIL_DB set.
    for (env, args) in [
        (&[][..], &["--db", dir, "--store", store][..]),
        (&[], &[]),
        (&[("BAYESMAIL_DB", dir)], &[]),
    ] {
        let out = learn(env, args, &files[2]);
        assert_eq!(out.status.code(), Some(2), "{env:?} {args:?}");
        let err = stderr(&out);
        assert!(
            err.contains("Redis at redis://127.0.0.1:1"),
            "{env:?} {args:?}: {err}"
        );
    }
}

/// A Redis timeout of 0 was taken as 1 ms without a word (then nothing
/// answered in time): refused, on the command line and in the file.
#[test]
fn a_store_timeout_of_zero_is_refused() {
    let db = Db::new();
    let out = db.run(&["--store-timeout", "0", "stats"], None);
    assert_exit(&out, 2, &["--store-timeout 0"]);
    assert!(
        stderr(&out).contains("'0' for '--store-timeout"),
        "{}",
        stderr(&out)
    );
    std::fs::write(db.path("config.toml"), "store_timeout = 0\n").unwrap();
    let out = db.run(&["stats"], None);
    assert_exit(&out, 2, &["store_timeout = 0"]);
    assert!(
        stderr(&out).contains("config.toml: line 1") && stderr(&out).contains("nonzero"),
        "{}",
        stderr(&out)
    );
}

/// `--db` naming a file: the writers say it is not a directory (as root
/// they spoke of links that cannot be followed).
#[test]
fn a_database_path_that_is_a_file_is_said_to_be_one() {
    let db = Db::new();
    let file = db.path("afile");
    std::fs::write(&file, "x\n").unwrap();
    let message = sample_dir()
        .join("spam")
        .join("01-pharmacy-html-obfuscated.eml");
    let out = run(
        &[
            "--db",
            file.to_str().unwrap(),
            "learn",
            "--spam",
            message.to_str().unwrap(),
        ],
        None,
    );
    assert_exit(&out, 2, &["learn into a file"]);
    assert!(
        stderr(&out).contains("afile: not a directory"),
        "{}",
        stderr(&out)
    );
}
