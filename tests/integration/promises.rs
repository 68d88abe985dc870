//! Issue 26, "keep the promises": what the README says and the commands
//! did not do.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;

/// Things that are not mail, as they lie around in folders: a picture, a
/// program, a text file.
fn not_mail(dir: &Path) -> Vec<std::path::PathBuf> {
    let files = [
        (
            "photo.png",
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10".to_vec(),
        ),
        (
            "program",
            [&b"\x7fELF\x02\x01\x01\0"[..], &[0u8; 64]].concat(),
        ),
        (
            "README",
            b"Bash is the shell, or command language interpreter, that will\n\
              appear in the GNU operating system.\n"
                .to_vec(),
        ),
    ];
    files
        .into_iter()
        .map(|(name, bytes)| {
            let path = dir.join(name);
            fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

/// U5: files that do not start with a header field are reported and
/// skipped by every command that reads mail from files, and counted in
/// the summaries; `filter` still passes anything on.
#[test]
fn files_that_are_not_mail_are_skipped_and_counted() {
    let db = Db::new();
    let ham = db.path("ham");
    fs::create_dir(&ham).unwrap();
    for f in fs::read_dir(sample_ham()).unwrap() {
        let f = f.unwrap().path();
        fs::copy(&f, ham.join(f.file_name().unwrap())).unwrap();
    }
    let junk = not_mail(&ham);
    let out = db.run(
        &[
            "train",
            "--json",
            "--spam",
            utf8(&sample_spam()),
            "--ham",
            utf8(&ham),
        ],
        None,
    );
    assert_exit(&out, 1, &["train", "with files that are not mail"]);
    let summary = &json_lines(&String::from_utf8_lossy(&out.stdout))[0];
    assert_eq!(summary["learned"], 48, "{summary}");
    assert_eq!(summary["not_mail"], 3, "{summary}");
    for f in &junk {
        assert!(
            stderr(&out).contains(&format!("{}: skipped: does not look like mail", utf8(f))),
            "{}",
            stderr(&out)
        );
    }
    let out = db.run(&["train", "--ham", utf8(&ham)], None);
    assert_exit(&out, 1, &["train", "text summary"]);
    assert!(
        stderr(&out).contains("already known; 3 skipped: not mail"),
        "{}",
        stderr(&out)
    );

    // eval evaluates what train would learn.
    let out = db.run(
        &[
            "eval",
            "--k",
            "3",
            "--spam",
            utf8(&sample_spam()),
            "--ham",
            utf8(&ham),
        ],
        None,
    );
    assert_exit(&out, 0, &["eval"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("48 (24 ham, 24 spam)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr(&out).matches("does not look like mail").count(), 3);

    let out = db.run(&["scan", utf8(&ham)], None);
    assert_exit(&out, 1, &["scan"]);
    assert!(
        stderr(&out).contains("3 skipped: not mail"),
        "{}",
        stderr(&out)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 24);
    for command in ["classify", "tokens"] {
        let out = db.run(&[command, "--json", utf8(&ham)], None);
        assert_exit(&out, 1, &[command]);
        assert_eq!(json_lines(&String::from_utf8_lossy(&out.stdout)).len(), 24);
        assert_eq!(stderr(&out).matches("does not look like mail").count(), 3);
    }
    for f in &junk {
        for args in [
            &["explain", utf8(f)][..],
            &["learn", "--spam", utf8(f)],
            &["unlearn", utf8(f)],
            &["classify", utf8(f)],
        ] {
            let out = db.run(args, None);
            assert_ne!(out.status.code(), Some(0), "{args:?}");
            assert!(stderr(&out).contains("does not look like mail"), "{args:?}");
            assert!(out.stdout.is_empty(), "{args:?}");
        }
        // The delivery hook passes anything on.
        let bytes = fs::read(f).unwrap();
        let out = db.run(&["filter"], Some(&bytes));
        assert_exit(&out, 0, &["filter", utf8(f)]);
        assert!(out.stdout.ends_with(&bytes));
    }
    assert_eq!(db.counts(), [24, 24]);
}

/// U5: every message of the public corpus and of the sample corpus looks
/// like mail.
#[test]
fn every_corpus_message_looks_like_mail() {
    for f in sample_files() {
        assert!(bayesmail::message::looks_like_mail(&fs::read(&f).unwrap()));
    }
    let Some(dir) = public_corpus() else { return };
    for (path, bytes) in public_files(&dir) {
        assert!(
            bayesmail::message::looks_like_mail(&bytes),
            "{}",
            path.display()
        );
    }
}

/// U3: `db = "~/x"` in the config file is the home's `x`, and a relative
/// `db` is beside the config file, never in the directory bayesmail runs
/// in.
#[test]
fn the_config_files_db_is_never_relative_to_the_working_directory() {
    let db = Db::new();
    let (home, work, conf) = (db.path("home"), db.path("work"), db.path("conf"));
    for d in [&home, &work, &conf] {
        fs::create_dir(d).unwrap();
    }
    let message = fs::read(&sample_files()[0]).unwrap();
    let learn = |config: &str| {
        fs::write(conf.join("config.toml"), config).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.env_clear()
            .env("HOME", &home)
            .env("BAYESMAIL_CONFIG", conf.join("config.toml"))
            .current_dir(&work)
            .args(["learn", "--ham", "-"])
            .stdout(Stdio::null());
        run_with_stdin(cmd, &message)
    };
    for (config, at) in [
        ("db = \"~/mail-db\"\n", home.join("mail-db")),
        ("db = \"rel-db\"\n", conf.join("rel-db")),
    ] {
        let out = learn(config);
        assert_exit(&out, 0, &["learn", config]);
        assert!(
            at.join("counts.sled").exists(),
            "{config}: {}",
            at.display()
        );
    }
    assert_eq!(fs::read_dir(&work).unwrap().count(), 0);
    // BAYESMAIL_DB too: a variable set outside a shell is not expanded by
    // one.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.env_clear()
        .env("HOME", &home)
        .env("BAYESMAIL_DB", "~/env-db")
        .env("BAYESMAIL_CONFIG", "/dev/null")
        .current_dir(&work)
        .args(["learn", "--ham", "-"]);
    assert_exit(
        &run_with_stdin(cmd, &message),
        0,
        &["BAYESMAIL_DB=~/env-db"],
    );
    assert!(home.join("env-db/counts.sled").exists());
    assert_eq!(fs::read_dir(&work).unwrap().count(), 0);
}

/// U7: `tokens` prints the byte view too (each bucket with the 4-grams of
/// the message behind it), and `explain` shows a byte feature as the bytes
/// it stands for, not as a bucket number.
#[test]
fn tokens_and_explain_show_the_bytes_behind_the_byte_view() {
    let file = sample_spam().join("02-lottery-winner.eml");
    let raw = fs::read(&file).unwrap();
    let want: Vec<String> = bayesmail::features::grams::buckets(&raw)
        .iter()
        .map(|b| format!("{b:05x}"))
        .collect();
    assert!(!want.is_empty());
    let line = &json_lines(
        &String::from_utf8(run(&["tokens", "--json", utf8(&file)], None).stdout).unwrap(),
    )[0];
    let buckets = line["bytes"].as_array().expect("a byte view");
    let got: Vec<&str> = buckets
        .iter()
        .map(|b| b["bucket"].as_str().unwrap())
        .collect();
    assert_eq!(got, want);
    assert!(
        buckets
            .iter()
            .all(|b| !b["grams"].as_array().unwrap().is_empty())
    );
    assert!(
        buckets
            .iter()
            .any(|b| b["grams"].as_array().unwrap().iter().any(|g| g == "Subj"))
    );
    let text = String::from_utf8(run(&["tokens", utf8(&file)], None).stdout).unwrap();
    assert!(
        text.contains(&format!("bytes ({} buckets", want.len())),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("  bytes:")).count(),
        want.len()
    );

    let db = Db::new();
    db.train_sample();
    let text = db.ok(&["explain", "--top", "100", utf8(&file)], None);
    let features: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("features"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let bytes: Vec<&&str> = features
        .iter()
        .filter(|l| l.trim_start().starts_with("bytes:"))
        .collect();
    assert!(!bytes.is_empty(), "{text}");
    for l in &bytes {
        assert!(l.trim_start().starts_with("bytes:\""), "{l}");
    }
    let json = &json_lines(&db.ok(&["explain", "--json", "--top", "100", utf8(&file)], None))[0];
    for t in json["tokens"].as_array().unwrap() {
        if t["view"] == "bytes" {
            assert!(!t["grams"].as_array().unwrap().is_empty(), "{t}");
        }
    }
}

/// U8: the README's first section says what its first command needs and
/// describes what the demo prints truthfully: the demo is run here as
/// printed (trained on the public corpus, the sample classified), and its
/// verdicts are counted against the README's.
#[test]
fn the_readme_describes_the_demo_as_it_runs() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let first = &readme[..readme.find("\n## ").unwrap()];
    assert!(
        first.contains("corpora/fetch && cargo run --release"),
        "{first}"
    );
    for needs in ["needs `npm` and network access", "about 20 MB"] {
        assert!(first.contains(needs), "{needs}");
    }
    let Some(corpus) = public_corpus() else {
        return;
    };
    let db = Db::new();
    let dirs = |names: &[&str]| -> Vec<String> {
        names
            .iter()
            .map(|n| utf8(&corpus.join(n)).to_string())
            .collect()
    };
    let mut args = vec!["train".to_string(), "--spam".into()];
    args.extend(dirs(&["spam-1", "spam-2"]));
    args.push("--ham".into());
    args.extend(dirs(&["easy-ham-1", "easy-ham-2", "hard-ham-1"]));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = db.run(&args, None);
    assert_exit(&out, 0, &["train", "the demo"]);
    assert!(
        stderr(&out).contains("database ")
            && stderr(&out).contains(": 4150 ham, 1896 spam; model written"),
        "{}",
        stderr(&out)
    );
    assert!(first.contains("4150 ham, 1896 spam; model written"));
    let out = db.ok(
        &["classify", utf8(&sample_spam()), utf8(&sample_ham())],
        None,
    );
    let count = |label: &str, verdict: &str| {
        out.lines()
            .filter(|l| {
                l.starts_with(&format!("{verdict} ")) && l.contains(&format!("/sample/{label}/"))
            })
            .count()
    };
    let (ss, su, sh) = (
        count("spam", "spam"),
        count("spam", "unsure"),
        count("spam", "ham"),
    );
    let (hh, hu, hs) = (
        count("ham", "ham"),
        count("ham", "unsure"),
        count("ham", "spam"),
    );
    let said = [
        format!(
            "judged {} of the 48 right, {}\nunsure and {} wrong",
            ss + hh,
            su + hu,
            sh + hs
        ),
        format!("of the 24 spam, {ss} spam, {su} unsure and {sh} ham"),
        format!("of the 24 ham, {hh} ham, {hu}\nunsure"),
        format!("and {hs} spam."),
    ];
    let flat = first.replace('\n', " ");
    for s in &said {
        assert!(
            flat.contains(&s.replace('\n', " ")),
            "README says otherwise than {s:?}\n{out}"
        );
    }
}

/// eval measures what a training run would learn: a message given under
/// both labels is refused as `train` refuses it, and a copy of one is
/// evaluated once (a copy in a training fold would judge itself, and
/// make the figures perfect).
#[test]
fn eval_refuses_a_message_labelled_both_ways_and_counts_a_copy_once() {
    let db = Db::new();
    let out = db.run(
        &[
            "eval",
            "--spam",
            utf8(&sample_spam()),
            utf8(&sample_ham()),
            "--ham",
            utf8(&sample_ham()),
        ],
        None,
    );
    assert_exit(&out, 2, &["eval, both labels"]);
    assert!(
        stderr(&out).contains("24 messages are given as both spam and ham"),
        "{}",
        stderr(&out)
    );
    let copies = db.path("copies");
    fs::create_dir(&copies).unwrap();
    for entry in fs::read_dir(sample_spam()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        fs::copy(&path, copies.join(&name)).unwrap();
        fs::copy(&path, copies.join(format!("copy-{name}"))).unwrap();
    }
    let out = db.run(
        &[
            "eval",
            "--spam",
            utf8(&copies),
            "--ham",
            utf8(&sample_ham()),
        ],
        None,
    );
    assert_exit(&out, 0, &["eval, copies"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("48 (24 ham, 24 spam)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr(&out).contains("24 copies of messages given more than once"),
        "{}",
        stderr(&out)
    );
}
