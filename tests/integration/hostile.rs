//! The delivery hook under attack: every class of hostile input a red team
//! used (huge and many headers, encoded-word floods, MIME bombs, HTML
//! pathologies, forged fields after malformed lines) is generated here and
//! put through `filter`, which must pass it on byte for byte with only our
//! fields added, within a bound on memory; and every way of starting
//! `filter` badly (closed or unwritable streams, bad arguments and
//! environment) must still pass the message on or tell the delivery agent
//! to keep it.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use crate::common::{Db, assert_exit, features, status_word, stderr, strip_ours};

/// A plain message the sample-trained model has never seen.
const PLAIN: &[u8] = b"From: Sam <sam@example.org>\nTo: pat@example.org\n\
Subject: minutes of the allotment meeting\nMessage-ID: <m1@example.org>\n\n\
Here are the minutes. The water tank is fixed; next meeting in May.\n";

/// A database trained on the sample corpus.
fn trained() -> Db {
    let db = Db::new();
    db.train_sample();
    db
}

/// What one run of `filter` gave: exit status, stdout and stderr.
struct Run {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `cmd` with `input` on stdin (written from another thread while the
/// output is read).
fn run_measured(mut cmd: Command, input: &[u8]) -> Run {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = stdin.write_all(input);
        });
        let err = s.spawn(move || {
            let mut e = String::new();
            let _ = stderr.read_to_string(&mut e);
            e
        });
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).unwrap();
        let status = child.wait().unwrap();
        Run {
            code: status.code(),
            stdout: out,
            stderr: err.join().unwrap(),
        }
    })
}

fn filter_cmd(db: &Db, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args()).arg("filter").args(args);
    cmd
}

/// The message with our fields taken out again must be the input; returns
/// the X-Spam-Status value.
fn assert_passed_on(out: &[u8], input: &[u8], what: &str) -> String {
    let (restored, status, _) = strip_ours(out);
    assert!(restored == input, "{what}: bytes changed");
    status_word(&status);
    status
}

// ---------------------------------------------------------------------
// The generator: one function per class of hostile input.

/// Header fields of `total` bytes: one field, or many short ones.
fn huge_header(total: usize, many: bool) -> Vec<u8> {
    let mut m = b"From: a@b.example\nSubject: big\n".to_vec();
    if many {
        let mut i = 0;
        while m.len() < total {
            m.extend_from_slice(format!("X-Field-{i}: value {i}\n").as_bytes());
            i += 1;
        }
    } else {
        m.extend_from_slice(b"X-Long: ");
        m.extend(std::iter::repeat_n(b'a', total));
        m.push(b'\n');
    }
    m.extend_from_slice(b"\nbody text here\n");
    m
}

/// A header line made of `n` starts of encoded words, the stall the red
/// team found; in the subject, a part header and a forwarded message.
fn encoded_word_flood(n: usize, place: &str) -> Vec<u8> {
    let flood = b"=?utf-8?q?".repeat(n);
    let mut m = b"From: a@b.example\n".to_vec();
    match place {
        "subject" => {
            m.extend_from_slice(b"Subject: ");
            m.extend_from_slice(&flood);
            m.extend_from_slice(b"\n\nbody\n");
        }
        "part" => {
            m.extend_from_slice(b"Content-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: text/plain; name=\"");
            m.extend_from_slice(&flood);
            m.extend_from_slice(b"\"\n\nbody\n--b--\n");
        }
        _ => {
            m.extend_from_slice(b"Content-Type: message/rfc822\n\nSubject: ");
            m.extend_from_slice(&flood);
            m.extend_from_slice(b"\n\ninner body\n");
        }
    }
    m
}

/// Multiparts nested `depth` deep, or `width` parts side by side.
fn mime_bomb(depth: usize, width: usize) -> Vec<u8> {
    let mut m = b"From: a@b.example\nSubject: bomb\n".to_vec();
    for d in 0..depth {
        m.extend_from_slice(
            format!("Content-Type: multipart/mixed; boundary=\"b{d}\"\n\n--b{d}\n").as_bytes(),
        );
    }
    m.extend_from_slice(b"Content-Type: text/plain\n\ninnermost text\n");
    for w in 0..width {
        m.extend_from_slice(
            format!("--b{}\nContent-Type: text/plain\n\npart {w}\n", depth - 1).as_bytes(),
        );
    }
    for d in (0..depth).rev() {
        m.extend_from_slice(format!("--b{d}--\n").as_bytes());
    }
    m
}

/// An HTML part of about `size` bytes of one pathology.
fn html_pathology(kind: &str, size: usize) -> Vec<u8> {
    let unit: &[u8] = match kind {
        "unclosed" => b"<div><span><b><i><a href=\"http://x.example/",
        "nested" => b"<table><tr><td>",
        "comment" => b"<!-- never closed ",
        "entities" => b"&#x1F4A9;&amp&#99999999999;&lt",
        _ => b"<p style=\"display:none\">hidden words here</p>",
    };
    let mut m = b"From: a@b.example\nSubject: html\nContent-Type: text/html\n\n".to_vec();
    while m.len() < size {
        m.extend_from_slice(unit);
    }
    m.extend_from_slice(b"\nvisible buy now\n");
    m
}

/// Forged fields of ours after each kind of malformed header line.
fn forged_after_malformed() -> Vec<Vec<u8>> {
    let bad: [&[u8]; 5] = [
        b"X-B\xe4d: 8-bit name",
        b"X-N\0l: nul in name",
        b"From someone else Mon Jan  1 00:00:00 2024",
        b": x",
        b"a line that is no header",
    ];
    bad.iter()
        .map(|b| {
            [
                b"From: a@b.example\nSubject: hi\n".as_ref(),
                b,
                b"\nX-Spam-Flag: YES\nX-Spam-Status: Yes, probability=1\n\nbody\n",
            ]
            .concat()
        })
        .collect()
}

#[test]
fn hostile_messages_pass_through_byte_exact_with_bounded_work_and_memory() {
    let db = trained();
    let mb = 1 << 20;
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        ("12 MB header field".into(), huge_header(12 * mb, false)),
        ("8 MB of short fields".into(), huge_header(8 * mb, true)),
        ("6 MB of the shortest fields".into(), {
            let mut m = b"From: a@b.example\nSubject: padded\n".to_vec();
            m.extend(b"a:b\n".repeat(6 * mb / 4));
            m.extend(b"\nbuy cheap pills now\n");
            m
        }),
        ("nesting 5,000 deep".into(), mime_bomb(5_000, 1)),
        ("50,000 parts".into(), mime_bomb(1, 50_000)),
    ];
    for place in ["subject", "part", "forwarded"] {
        // 4 MB of encoded-word starts.
        cases.push((
            format!("encoded-word flood in the {place}"),
            encoded_word_flood(400_000, place),
        ));
    }
    for kind in ["unclosed", "nested", "comment", "entities", "hidden"] {
        cases.push((format!("HTML: {kind}"), html_pathology(kind, 4 * mb)));
    }
    for (i, m) in forged_after_malformed().into_iter().enumerate() {
        cases.push((format!("forged after malformed line {i}"), m));
    }
    for (what, input) in &cases {
        // Bounded work inside the extractor: the features of one message
        // are bounded whatever its size.
        let f = features(input);
        assert!(
            f.tokens.len() <= 20_000,
            "{what}: {} tokens",
            f.tokens.len()
        );

        // Memory: the message, a few working copies of it, and a fixed
        // allowance for the program and the model, enforced as a limit on
        // the process's address space (an allocation past it aborts the
        // process, and the test fails).
        let limit = (128 * mb + 8 * input.len()) as libc::rlim_t;
        let mut cmd = filter_cmd(&db, &[]);
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                let rl = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &rl) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let run = run_measured(cmd, input);
        assert_eq!(run.code, Some(0), "{what}: {}", run.stderr);
        let status = assert_passed_on(&run.stdout, input, what);
        assert!(!status.starts_with("Unknown"), "{what}: {status}");
        let out = String::from_utf8_lossy(&run.stdout[..run.stdout.len().min(200)]).into_owned();
        assert!(
            out.starts_with("X-Spam-Status: ") || out.starts_with("X-Spam-Flag: YES"),
            "{what}: our fields come first: {out:?}"
        );
    }
}

#[test]
fn forged_fields_after_malformed_lines_are_renamed() {
    let db = trained();
    for input in forged_after_malformed() {
        let out = db.run(&["filter"], Some(&input));
        assert_exit(&out, 0, &["filter"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("\nOld-X-Spam-Flag: YES\n"), "{text}");
        assert!(
            text.contains("\nOld-X-Spam-Status: Yes, probability=1\n"),
            "{text}"
        );
        let ours = text.lines().filter(|l| l.starts_with("X-Spam-")).count();
        let flagged = text.lines().any(|l| l == "X-Spam-Flag: YES");
        assert_eq!(ours, 1 + usize::from(flagged), "{text}");
    }
}

#[test]
fn our_fields_come_first_however_long_the_header_block() {
    // Consumers that stop reading a header block after some megabytes
    // (Dovecot's sieve) must still see our fields.
    let db = trained();
    let input = huge_header(13 << 20, false);
    let out = db.run(&["filter"], Some(&input));
    assert_exit(&out, 0, &["filter"]);
    assert!(out.stdout.starts_with(b"X-Spam-"));
    assert_passed_on(&out.stdout, &input, "13 MB header");
    // After an mbox envelope line, which must stay first.
    let mut enveloped = b"From a@b.example Mon Jan  1 00:00:00 2024\n".to_vec();
    enveloped.extend_from_slice(PLAIN);
    let out = db.run(&["filter"], Some(&enveloped));
    assert!(
        out.stdout
            .starts_with(b"From a@b.example Mon Jan  1 00:00:00 2024\nX-Spam-")
    );
    assert_passed_on(&out.stdout, &enveloped, "envelope");
}

#[test]
fn a_too_large_message_with_a_long_header_still_gets_its_status() {
    let db = trained();
    for many in [false, true] {
        let input = huge_header(20_000, many);
        let out = db.run(&["filter", "--max-size", "1K"], Some(&input));
        assert_exit(&out, 0, &["filter"]);
        let status = assert_passed_on(&out.stdout, &input, "too large");
        assert!(status.starts_with("Unknown, reason=too-large,"), "{status}");
    }
    // A long envelope line under a tiny cap: the fields still go after it.
    let enveloped = [
        b"From averylongsender@example.org Mon Jan  1 00:00:00 2024\n".as_ref(),
        PLAIN,
    ]
    .concat();
    let out = db.run(&["filter", "--max-size", "20"], Some(&enveloped));
    assert!(out.stdout.starts_with(b"From averylongsender@example.org Mon Jan  1 00:00:00 2024\nX-Spam-Status: Unknown, reason=too-large"));
    assert_passed_on(&out.stdout, &enveloped, "long envelope");
    // No temporary file for the rest: it streams instead.
    let mut cmd = filter_cmd(&db, &["--max-size", "100"]);
    cmd.env("TMPDIR", db.path("no-such-dir"));
    let run = run_measured(cmd, PLAIN);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_passed_on(&run.stdout, PLAIN, "no temporary file");
    // A forged field beyond the part read into memory is renamed too.
    let mut forged = huge_header(200_000, true);
    let at = forged.windows(2).position(|w| w == b"\n\n").unwrap() + 1;
    forged.splice(at..at, b"X-Spam-Flag: YES\n".iter().copied());
    let out = db.run(&["filter", "--max-size", "1K"], Some(&forged));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\nOld-X-Spam-Flag: YES\n"));
    assert!(!text.lines().any(|l| l == "X-Spam-Flag: YES"));
}

/// Runs `filter` with the given standard streams closed (0, 1 or 2).
fn with_closed(db: &Db, fds: &'static [i32], args: &[&str], input: &[u8]) -> Run {
    let mut cmd = filter_cmd(db, args);
    // SAFETY: close() is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in fds {
                libc::close(fd);
            }
            Ok(())
        });
    }
    run_measured(cmd, input)
}

#[test]
fn closed_stdout_or_stdin_tells_the_agent_to_keep_the_message() {
    let db = trained();
    for (fds, what) in [(&[1][..], "stdout"), (&[0][..], "stdin")] {
        for (args, code) in [(&[][..], 75), (&["--verdict-exit"][..], 3)] {
            let run = with_closed(&db, fds, args, PLAIN);
            assert_eq!(
                run.code,
                Some(code),
                "closed {what} {args:?}: {}",
                run.stderr
            );
            assert!(
                run.stderr.contains(&format!("standard {}", &what[3..]))
                    || run.stderr.contains(what),
                "{}",
                run.stderr
            );
        }
    }
}

#[test]
fn a_stdout_opened_read_only_or_stdin_write_only_is_not_a_silent_success() {
    let db = trained();
    let file = db.path("message.eml");
    fs::write(&file, PLAIN).unwrap();
    for (stdin_write_only, code) in [(false, 75), (true, 75)] {
        let mut cmd = filter_cmd(&db, &[]);
        if stdin_write_only {
            cmd.stdin(fs::OpenOptions::new().write(true).open(&file).unwrap());
            cmd.stdout(Stdio::piped());
        } else {
            cmd.stdin(fs::File::open(&file).unwrap());
            cmd.stdout(fs::File::open(&file).unwrap());
        }
        let out = cmd.stderr(Stdio::piped()).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "write-only stdin: {stdin_write_only}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn an_unwritable_stderr_never_costs_the_message() {
    let db = trained();
    // Every case writes a warning: no model, a too-large message, no header.
    let empty = Db::new();
    let cases: [(&Db, &[&str], &[u8]); 3] = [
        (&empty, &[], PLAIN),
        (&db, &["--max-size", "10"], PLAIN),
        (&db, &[], b"no header block here\n"),
    ];
    for (db, args, input) in cases {
        // stderr on /dev/full (every write fails) and closed.
        let mut cmd = filter_cmd(db, args);
        cmd.stderr(
            fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        );
        let out = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(input)?;
                c.wait_with_output()
            })
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?} 2>/dev/full");
        assert_eq!(strip_or_same(&out.stdout), input, "{args:?} 2>/dev/full");
        let run = with_closed(db, &[2], args, input);
        assert_eq!(run.code, Some(0), "{args:?} 2>&-");
        assert_eq!(strip_or_same(&run.stdout), input, "{args:?} 2>&-");
    }
}

/// `out` with our fields taken out, or `out` itself if it has none.
fn strip_or_same(out: &[u8]) -> Vec<u8> {
    if out.starts_with(b"X-Spam-") {
        strip_ours(out).0
    } else {
        out.to_vec()
    }
}

/// `filter` as a user id the password database does not know, with no
/// `HOME`, looked up through the system's own name services
/// (`/etc/nsswitch.conf` as it is; Debian's lists `systemd` after `files`):
/// the message goes on with `reason=config-error`, exit 0. A statically
/// linked glibc crashed here, in the systemd module it loaded.
#[test]
fn filter_for_a_user_id_no_one_knows_passes_the_message_on() {
    // SAFETY: getuid(2) has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("not root: test skipped");
        return;
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.arg("filter").env_clear().current_dir("/");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let id = 54_321;
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(id) != 0
                || libc::setuid(id) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = crate::common::run_with_stdin(cmd, PLAIN);
    assert_exit(&out, 0, &["filter", "as user id 54321"]);
    let status = assert_passed_on(&out.stdout, PLAIN, "no home");
    assert!(
        status.starts_with("Unknown, reason=config-error,"),
        "{status}: {}",
        stderr(&out)
    );
}

#[test]
fn a_panic_while_judging_still_passes_the_message_on() {
    let db = trained();
    let mut cmd = filter_cmd(&db, &[]);
    cmd.env("BAYESMAIL_TEST_PANIC", "judge");
    let run = run_measured(cmd, PLAIN);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let status = assert_passed_on(&run.stdout, PLAIN, "panic");
    assert!(
        status.starts_with("Unknown, reason=internal-error,"),
        "{status}"
    );
}

/// With the counts in Redis the model is asked on a thread of its own: a
/// panic there also passes the message on, at once. Nothing listens at the
/// store's address; the thread panics before it would connect.
#[test]
fn a_panic_while_judging_from_the_store_still_passes_the_message_on() {
    let db = trained();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args())
        .args([
            "--store",
            "redis://127.0.0.1:9/0",
            "--store-timeout",
            "60000",
        ])
        .arg("filter")
        .env("BAYESMAIL_TEST_PANIC", "judge-shared");
    let run = run_measured(cmd, PLAIN);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let status = assert_passed_on(&run.stdout, PLAIN, "panic");
    assert!(
        status.starts_with("Unknown, reason=internal-error,"),
        "{status}"
    );
    assert!(run.stderr.contains("judge-shared"), "{}", run.stderr);
}

#[test]
fn bad_arguments_and_environment_fail_open() {
    let db = trained();
    let config = db.path("config.toml");
    let config = config.to_str().unwrap();
    let dbdir = db.dir();
    let dbdir = dbdir.to_str().unwrap();
    // The bad environment variables, each with the other setting given.
    type Env<'a> = &'a [(&'a str, &'a str)];
    let mut cases: Vec<(Vec<&str>, Env)> = vec![
        (vec!["--config", config, "filter"], &[("BAYESMAIL_DB", "")]),
        (vec!["--db", dbdir, "filter"], &[("BAYESMAIL_CONFIG", "")]),
    ];
    // The bad arguments of `filter`, with both settings given.
    for bad in [
        &["--costs", "1:0"][..],
        &["--max-size", "-1"],
        &["--no-such-flag"],
        &["--costs", "1e308:1e308:x"],
        &["extra"],
    ] {
        let mut args = vec!["--db", dbdir, "--config", config, "filter"];
        args.extend_from_slice(bad);
        cases.push((args, &[]));
    }
    // Every global option that takes a value, before `filter` (its value
    // is no subcommand), with a bad argument of filter's or a bad value.
    for before in [
        &["--store-timeout", "1000"][..],
        &["--store", "redis://127.0.0.1:1"],
        &["--db", dbdir, "--store-timeout", "1000", "--config", config],
    ] {
        let mut args = vec!["--db", dbdir, "--config", config];
        args.extend_from_slice(before);
        args.extend(["filter", "--max-size", "1.5M"]);
        cases.push((args, &[]));
    }
    cases.push((vec!["--db", dbdir, "--store-timeout", "abc", "filter"], &[]));
    // A value gone missing (an unset variable in a delivery agent's
    // template): the option takes `filter` for its value.
    for option in ["--store-timeout", "--config", "--db"] {
        cases.push((vec!["--db", dbdir, option, "filter"], &[]));
    }
    let db_from_env = [("BAYESMAIL_DB", dbdir)];
    cases.push((
        vec!["--store-timeout", "5", "--store-timeout", "6", "filter"],
        &db_from_env,
    ));
    for (args, env) in cases {
        for verdict_exit in [false, true] {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
            cmd.args(&args)
                .env_remove("BAYESMAIL_DB")
                .env_remove("BAYESMAIL_CONFIG");
            if verdict_exit {
                cmd.arg("--verdict-exit");
            }
            for (k, v) in env {
                cmd.env(k, v);
            }
            let run = run_measured(cmd, PLAIN);
            let code = if verdict_exit { 3 } else { 0 };
            assert_eq!(run.code, Some(code), "{args:?} {env:?}: {}", run.stderr);
            let status = assert_passed_on(&run.stdout, PLAIN, "bad arguments");
            assert!(
                status.starts_with("Unknown, reason=config-error,"),
                "{args:?}: {status}"
            );
            assert!(!run.stderr.is_empty());
        }
    }
    // A bad size in the config file is a config error too.
    fs::write(db.path("config.toml"), "[filter]\nmax_size = \"abc\"\n").unwrap();
    let run = run_measured(filter_cmd(&db, &[]), PLAIN);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let status = assert_passed_on(&run.stdout, PLAIN, "bad max_size");
    assert!(
        status.starts_with("Unknown, reason=config-error,"),
        "{status}"
    );
    fs::write(db.path("config.toml"), "").unwrap();
    // Options before the subcommand that clap does not know, and `--`.
    for args in [&["--bogus", "filter"][..], &["--", "filter"]] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(args);
        let run = run_measured(cmd, PLAIN);
        assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
        assert_passed_on(&run.stdout, PLAIN, "option before filter");
    }
    // Help asked for in the mail path goes to stderr; the message goes out.
    let run = run_measured(filter_cmd(&db, &["--help"]), PLAIN);
    assert_eq!(run.code, Some(0));
    assert_passed_on(&run.stdout, PLAIN, "filter --help");
    assert!(run.stderr.contains("delivery hook"), "{}", run.stderr);
    // Other commands still reject bad arguments.
    let out = crate::common::run(&["classify", "--no-such-flag", "x"], None);
    assert_exit(&out, 2, &["classify --no-such-flag"]);
    assert!(stderr(&out).contains("--no-such-flag"));
}

/// A pipe whose both ends are non-blocking, as some callers leave them.
fn nonblocking_pipe() -> (fs::File, fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two new descriptors, owned by the files below.
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) },
        0
    );
    unsafe { (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1])) }
}

/// Makes our end of a pipe blocking again (the flag is per end).
fn set_blocking(file: &fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
}

#[test]
fn non_blocking_standard_streams_are_waited_on_not_failed() {
    let db = trained();
    // Big enough to fill a pipe several times over.
    let mut input = PLAIN.to_vec();
    input.extend_from_slice(&b"more words for the pipe\n".repeat(20_000));
    let (stdin_read, mut stdin_write) = nonblocking_pipe();
    let (mut stdout_read, stdout_write) = nonblocking_pipe();
    set_blocking(&stdin_write);
    set_blocking(&stdout_read);
    let mut cmd = filter_cmd(&db, &[]);
    cmd.stdin(stdin_read)
        .stdout(stdout_write)
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let writer = {
        let input = input.clone();
        std::thread::spawn(move || {
            // Late, so the first reads find an empty pipe.
            std::thread::sleep(std::time::Duration::from_millis(100));
            stdin_write.write_all(&input).unwrap();
        })
    };
    // Late too, so the writes find a full pipe.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut out = Vec::new();
    stdout_read.read_to_end(&mut out).unwrap();
    writer.join().unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_passed_on(&out, &input, "non-blocking streams");
}
