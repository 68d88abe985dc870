//! `serve --spamd`, driven by the real `spamc` (Debian's package `spamc`,
//! installed by `.ci/run`): every verb it sends, `-c` and `-E` exit codes
//! against `classify`'s verdicts, PROCESS and HEADERS against `filter`'s
//! output, `-L spam|ham|forget` for the global model and a user's, refused
//! user names, failures that leave the message unchanged; and, on a raw
//! socket, what spamc cannot send: SKIP, `Compress: zlib` (Debian's spamc
//! is built without zlib), Exim's REPORT request, bad requests, timeouts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use crate::common::{
    Db, Watch, file_names, run_with_stdin, sample_files, spawn_watched, strip_ours, to_crlf,
    unseen, utf8,
};
use crate::recipes::have;

/// A running `bayesmail serve --spamd 127.0.0.1:0`, stopped (killed and
/// waited for) when dropped.
struct Server {
    child: Option<Child>,
    port: u16,
    watch: Watch,
}

impl Server {
    /// Starts serve on `db` with `extra` arguments; waits for its
    /// "listening on" line, which names the port.
    fn start(db: &Db, extra: &[&str]) -> Server {
        Server::start_at(db, "127.0.0.1:0", extra)
    }

    /// Starts serve on `db` listening at `addr` (the port is 0 on a Unix
    /// socket).
    fn start_at(db: &Db, addr: &str, extra: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args())
            .args(["serve", "--spamd", addr])
            .args(extra);
        let (mut child, watch) = spawn_watched(cmd);
        let Some(bound) = watch.listening(1, 60) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve did not listen: {}", watch.log());
        };
        let port = bound[0].1.rsplit(':').next().unwrap().parse::<u16>();
        Server {
            child: Some(child),
            port: port.unwrap_or(0),
            watch,
        }
    }

    /// What serve said on stderr so far.
    fn log(&self) -> String {
        self.watch.log()
    }

    /// Whether serve has logged `what` (within ten seconds).
    fn logged(&self, what: &str) -> bool {
        self.watch.logged(what, 10)
    }

    /// Stops it: kill, then wait.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            child.wait().expect("serve is waited for");
        }
    }

    /// Runs spamc against this server with `args` and `input` on stdin.
    fn spamc(&self, args: &[&str], input: &[u8]) -> Output {
        spamc(self.port, args, input)
    }

    /// Sends `request` on a socket of its own, closes the sending side, and
    /// returns all of the answer.
    fn raw(&self, request: &[u8]) -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(request).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        answer
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the real spamc on `port` (no configuration file, one connection
/// attempt) with `args` and `input` on stdin.
fn spamc(port: u16, args: &[&str], input: &[u8]) -> Output {
    let mut cmd = Command::new("spamc");
    let port = port.to_string();
    cmd.args(["-F", "/dev/null", "-d", "127.0.0.1", "-p", &port])
        .args(["-t", "60", "--connect-retries", "1"])
        .args(args);
    run_with_stdin(cmd, input)
}

/// A request as spamc sends it: the verb, headers, Content-length.
fn request(verb: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{verb} SPAMC/1.5\r\n");
    for h in headers {
        out.push_str(&format!("{h}\r\n"));
    }
    out.push_str(&format!("Content-length: {}\r\n\r\n", body.len()));
    [out.as_bytes(), body].concat()
}

/// The first line of an answer.
fn status_line(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    text.split("\r\n").next().unwrap().to_string()
}

/// A database trained on the sample corpus.
fn trained() -> Db {
    let db = Db::new();
    db.train_sample();
    db
}

/// The message in `path`.
fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// `classify`'s verdict on each file.
fn verdicts(db: &Db, files: &[PathBuf]) -> Vec<String> {
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    db.classify(&paths)
        .iter()
        .map(|v| v["verdict"].as_str().unwrap().to_string())
        .collect()
}

/// A sample spam and a sample ham that `classify` judges so.
fn spam_and_ham(db: &Db) -> (PathBuf, PathBuf) {
    let files = sample_files();
    let v = verdicts(db, &files);
    let pick = |want: &str| files[v.iter().position(|x| x == want).unwrap()].clone();
    (pick("spam"), pick("ham"))
}

/// The score spamc -c prints, checked against the threshold.
fn score(stdout: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    let (score, threshold) = text
        .trim_end()
        .split_once('/')
        .unwrap_or_else(|| panic!("{text:?}"));
    assert_eq!(threshold, "5.0", "{text:?}");
    score.parse().unwrap()
}

#[test]
fn spamc_check_exit_codes_are_classifys_verdicts() {
    if !have("spamc") {
        return;
    }
    let db = trained();
    let mut files = sample_files();
    // Messages the model has not seen, too.
    for i in [0, 5, 30, 44] {
        let path = db.path(&format!("unseen-{i}.eml"));
        std::fs::write(&path, unseen(i, &format!("spamd check {i}"))).unwrap();
        files.push(path);
    }
    let verdicts = verdicts(&db, &files);
    let server = Server::start(&db, &[]);
    let mut spam = 0;
    for (file, verdict) in files.iter().zip(&verdicts) {
        let input = read(file);
        let out = server.spamc(&["-c"], &input);
        let is_spam = verdict == "spam";
        assert_eq!(
            out.status.code(),
            Some(i32::from(is_spam)),
            "{} ({verdict}): {}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            server.log()
        );
        // Unsure is not spam: below the threshold, as for Exim.
        assert_eq!(score(&out.stdout) >= 5.0, is_spam, "{}", file.display());
        spam += usize::from(is_spam);
    }
    assert!(spam > 0 && spam < files.len(), "{spam} of {}", files.len());
    // A user without a model of their own (no --user-db) is judged the same.
    let (s, h) = spam_and_ham(&db);
    assert_eq!(
        server
            .spamc(&["-c", "-u", "alice"], &read(&s))
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        server
            .spamc(&["-c", "-u", "alice"], &read(&h))
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn spamc_process_and_headers_give_filters_output() {
    if !have("spamc") {
        return;
    }
    let db = trained();
    let (s, h) = spam_and_ham(&db);
    let server = Server::start(&db, &[]);
    let forged = [
        &b"X-Spam-Status: No, trust me\nX-Spam-Flag: NO\n"[..],
        &read(&s),
    ]
    .concat();
    let inputs = [read(&s), read(&h), to_crlf(&read(&h)), forged];
    for (i, input) in inputs.iter().enumerate() {
        let out = server.spamc(&[], input);
        assert_eq!(out.status.code(), Some(0), "{i}: {}", server.log());
        let filtered = db.run(&["filter"], Some(input));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&filtered.stdout),
            "{i}: PROCESS is filter's output"
        );
        let (restored, status, _) = strip_ours(&out.stdout);
        assert_eq!(&restored, input, "{i}: the message, byte for byte");
        let word = status.split(',').next().unwrap();
        assert_eq!(word, if i == 1 || i == 2 { "No" } else { "Yes" }, "{i}");
        if i == 3 {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("\nOld-X-Spam-Status: No, trust me\n"),
                "{text}"
            );
        }
        // HEADERS: spamc puts the original body after the new header.
        let headers = server.spamc(&["--headers"], input);
        assert_eq!(headers.status.code(), Some(0));
        assert_eq!(headers.stdout, out.stdout, "{i}: HEADERS gives the same");
    }
    // A message with no header: spamc takes its body from after the first
    // empty line, so HEADERS' answer holds what comes before it; before,
    // the first paragraph was lost.
    let headless = b"\nfirst paragraph line 1\nline 2\n\nsecond paragraph\n";
    let out = server.spamc(&[], headless);
    assert_eq!(strip_ours(&out.stdout).0, headless, "PROCESS");
    let headers = server.spamc(&["--headers"], headless);
    assert_eq!(headers.status.code(), Some(0));
    assert_eq!(
        headers.stdout, out.stdout,
        "HEADERS of a message with no header"
    );
    // A message whose first empty line (where spamc takes the body from)
    // comes before the end of the header as bayesmail reads it: the
    // answer is our fields and what comes before that line, so the
    // message stays whole and keeps its verdict (a field named like ours
    // past the line stays as it came, as in any body). Before, serve
    // refused it, and spamc passed it on unjudged, which a sender could
    // ask for with one such line.
    let split = b"Subject: a\n\r\n\r\n\r\nFrom: x@y\r\nX-Spam-Flag: NO\r\n\r\nbody\n";
    let process = server.spamc(&[], split);
    let headers = server.spamc(&["--headers"], split);
    assert_eq!(headers.status.code(), Some(0));
    let (restored, status, _) = strip_ours(&headers.stdout);
    assert_eq!(restored, split, "HEADERS keeps the message whole");
    assert_eq!(status, strip_ours(&process.stdout).1, "and its verdict");
    // -E: spamc's exit code says spam, the message still comes out.
    let e = server.spamc(&["-E"], &read(&s));
    assert_eq!(e.status.code(), Some(1));
    assert_eq!(strip_ours(&e.stdout).0, read(&s));
    assert_eq!(server.spamc(&["-E"], &read(&h)).status.code(), Some(0));
}

#[test]
fn spamc_ping_symbols_and_reports() {
    if !have("spamc") {
        return;
    }
    let db = trained();
    let (s, h) = spam_and_ham(&db);
    let server = Server::start(&db, &[]);
    let ping = server.spamc(&["-K"], b"");
    assert_eq!(ping.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&ping.stdout), "SPAMD/1.5 0\n");

    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let sym = server.spamc(&["-y"], &read(&s));
    assert!(
        text(&sym).starts_with("BAYESMAIL_SPAM,BAYES_99"),
        "{}",
        text(&sym)
    );
    let sym = server.spamc(&["-y"], &read(&h));
    assert!(
        text(&sym).starts_with("BAYESMAIL_HAM,BAYES_"),
        "{}",
        text(&sym)
    );

    let report = server.spamc(&["-R"], &read(&s));
    let r = text(&report);
    assert!(score(r.lines().next().unwrap().as_bytes()) >= 5.0, "{r}");
    assert!(
        r.contains("this message is spam.") && r.contains("the global model"),
        "{r}"
    );
    let report = server.spamc(&["-R"], &read(&h));
    let r = text(&report);
    assert!(score(r.lines().next().unwrap().as_bytes()) < 5.0, "{r}");
    assert!(r.contains("this message is not spam."), "{r}");
    // -r: a report for spam only.
    // Its Spam line says True (spamd says Yes there, which spamc takes for
    // not spam): the score line comes first and -E says spam.
    let ifspam = server.spamc(&["-r", "-E"], &read(&s));
    assert_eq!(ifspam.status.code(), Some(1));
    let r = text(&ifspam);
    assert!(score(r.lines().next().unwrap().as_bytes()) >= 5.0, "{r}");
    assert!(r.contains("this message is spam."), "{r}");
    assert_eq!(text(&server.spamc(&["-r"], &read(&h))), "");
}

#[test]
fn spamc_learns_and_forgets_globally_and_per_user() {
    if !have("spamc") {
        return;
    }
    let db = trained();
    let message = unseen(3, "spamd tell");
    let said = |o: &Output| {
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim_end().to_string()
    };
    let done = "Message successfully un/learned";
    let already = "Message was already un/learned";

    // Without --user-db, learning goes to the global model.
    let mut server = Server::start(&db, &["--log-messages"]);
    assert_eq!(db.counts(), [24, 24]);
    assert_eq!(said(&server.spamc(&["-L", "spam"], &message)), done);
    assert_eq!(db.counts(), [24, 25]);
    // Logged in the words HTTP's learns are.
    let logged = server.watch.wait_for("tell id=", 10).unwrap_or_default();
    assert!(
        logged.ends_with("action=learned label=spam"),
        "{}",
        server.log()
    );
    assert_eq!(said(&server.spamc(&["-L", "spam"], &message)), already);
    assert_eq!(db.counts(), [24, 25]);
    assert_eq!(said(&server.spamc(&["-L", "ham"], &message)), done);
    assert_eq!(db.counts(), [25, 24]);
    assert_eq!(said(&server.spamc(&["-L", "forget"], &message)), done);
    assert_eq!(db.counts(), [24, 24]);
    assert_eq!(said(&server.spamc(&["-L", "forget"], &message)), already);
    server.stop();

    // With it, each user's own database; the global one is untouched.
    let users = db.path("users");
    let pattern = format!("{}/%u", users.display());
    let server = Server::start(&db, &["--user-db", &pattern, "--min-user-messages", "1"]);
    let alice = users.join("alice");
    let ham = read(&spam_and_ham(&db).1);
    assert_eq!(
        said(&server.spamc(&["-L", "spam", "-u", "alice"], &message)),
        done
    );
    assert!(alice.join("counts.sled").exists());
    assert_eq!(
        said(&server.spamc(&["-L", "spam", "-u", "alice"], &message)),
        already
    );
    assert_eq!(
        said(&server.spamc(&["-L", "ham", "-u", "alice"], &ham)),
        done
    );
    assert_eq!(db.counts_at(&alice), [1, 1]);
    assert_eq!(db.counts(), [24, 24]);
    assert!(!users.join("bob").exists());
    // Alice now holds one of each: her model judges her mail, not bob's.
    let r = said(&server.spamc(&["-R", "-u", "alice"], &message));
    assert!(r.contains("the model of user alice"), "{r}");
    let r = said(&server.spamc(&["-R", "-u", "bob"], &message));
    assert!(r.contains("the global model"), "{r}");
    // PROCESS's fields say which kind of model judged, naming no one.
    for (user, kind) in [("alice", "user"), ("bob", "global")] {
        let out = server.spamc(&["-u", user], &message);
        let text = String::from_utf8_lossy(&out.stdout);
        let status = text
            .lines()
            .find_map(|l| l.strip_prefix("X-Spam-Status: "))
            .unwrap_or_else(|| panic!("{user}: no X-Spam-Status in {text}"));
        assert!(
            status.ends_with(&format!(", model={kind}")),
            "{user}: {status}"
        );
        assert!(!status.contains(user), "{status}");
    }
    assert_eq!(
        said(&server.spamc(&["-L", "forget", "-u", "alice"], &message)),
        done
    );
    assert_eq!(
        said(&server.spamc(&["-L", "forget", "-u", "alice"], &message)),
        already
    );
    // (With no spam left her database holds no model, so stats cannot read
    // it:) learned again, it is one of each again.
    assert_eq!(
        said(&server.spamc(&["-L", "spam", "-u", "alice"], &message)),
        done
    );
    assert_eq!(db.counts_at(&alice), [1, 1]);
    assert_eq!(db.counts(), [24, 24]);
}

/// How many times `id=` stands in `line` outside double quotes.
fn outside_id(line: &str) -> usize {
    let outside: String = line.split('"').step_by(2).collect();
    outside.matches("id=").count()
}

/// A value the sender wrote (the Message-ID) cannot pass for more fields
/// of a `--log-messages` line: one with a space, a quote or an `=` is
/// quoted.
#[test]
fn a_message_cannot_write_fields_into_the_log_line() {
    let db = trained();
    let server = Server::start(&db, &["--log-messages"]);
    let forged = "<x@y> user=ceo@example.org Yes probability=0.999999";
    let message = format!("Message-ID: {forged}\nSubject: hi\n\nhello\n");
    for (verb, logged) in [("CHECK", "id="), ("TELL", "tell id=")] {
        let headers: &[&str] = match verb {
            "TELL" => &["Message-class: ham", "Set: local", "User: alice"],
            _ => &["User: alice"],
        };
        let answer = server.raw(&request(verb, headers, message.as_bytes()));
        assert!(
            status_line(&answer).ends_with("EX_OK"),
            "{verb}: {}",
            server.log()
        );
        let line = server.watch.wait_for(logged, 10).unwrap_or_default();
        let quoted = r#"id="<x@y> user=ceo@example.org Yes probability=0.999999" user=alice "#;
        assert!(line.contains(quoted), "{verb}: {line}");
        // Outside the quotes, one user= and one id=.
        assert_eq!(outside_id(&line), 1, "{line}");
        let outside: String = line.split('"').step_by(2).collect();
        assert_eq!(outside.matches("user=").count(), 1, "{line}");
    }
    // Nor a request line the client wrote, logged as refused.
    let answer = server.raw(b"CHECK id=<x@y> user=ceo SPAMC/1.5\r\n\r\n");
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 76 "),
        "{answer:?}"
    );
    let line = server
        .watch
        .wait_for("Bad header line", 10)
        .unwrap_or_default();
    assert!(
        line.contains(r#""CHECK id=<x@y> user=ceo SPAMC/1.5""#),
        "{line}"
    );
    assert_eq!(outside_id(&line), 0, "{line}");
    // However long: it is cut before it is quoted, not after.
    let long = format!(
        "CHECK {} id=<x@y> user=ceo SPAMC/1.5\r\n\r\n",
        "A".repeat(200)
    );
    server.raw(long.as_bytes());
    let line = server.watch.wait_for("Bad header line: \"CHECK AAA", 10);
    let line = line.unwrap_or_default();
    assert!(line.trim_end().ends_with('"'), "{line}");
    assert_eq!(outside_id(&line), 0, "{line}");
}

#[test]
fn refused_user_names_get_a_protocol_error_and_the_message_back() {
    if !have("spamc") {
        return;
    }
    let db = trained();
    let users = db.path("users");
    let pattern = format!("{}/%u", users.display());
    let server = Server::start(&db, &["--user-db", &pattern]);
    let (s, _) = spam_and_ham(&db);
    let input = read(&s);
    let long = "a".repeat(300);
    for user in ["../etc", "a%b", "x/../../y", "..", &long] {
        let out = server.spamc(&["-u", user], &input);
        assert_eq!(out.status.code(), Some(0), "{user}");
        assert_eq!(out.stdout, input, "{user}: passed on unchanged");
        let check = server.spamc(&["-c", "-u", user], &input);
        assert_eq!(check.status.code(), Some(0), "{user}");
        assert_eq!(check.stdout, b"0/0\n", "{user}");
        let learn = server.spamc(&["-L", "spam", "-u", user], &input);
        assert_ne!(learn.status.code(), Some(0), "{user}");
        assert!(!String::from_utf8_lossy(&learn.stdout).contains("successfully"));
        let answer = server.raw(&request("CHECK", &[&format!("User: {user}")], &input));
        assert!(
            status_line(&answer).starts_with("SPAMD/1.0 76 Bad header line: (User header refused"),
            "{user}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    // A NUL cannot go through spamc's command line; on the socket it is
    // refused the same way.
    let answer = server.raw(&request(
        "TELL",
        &["User: a\0b", "Message-class: spam", "Set: local"],
        &input,
    ));
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 76 "),
        "{answer:?}"
    );
    assert!(!users.exists(), "nothing made under the users' root");
    assert_eq!(db.counts(), [24, 24]);
    assert!(server.logged("User header refused"), "{}", server.log());
}

#[test]
fn a_stopped_server_leaves_the_message_to_spamc() {
    if !have("spamc") {
        return;
    }
    let db = trained();
    let (s, _) = spam_and_ham(&db);
    let input = read(&s);
    let mut server = Server::start(&db, &[]);
    assert_eq!(server.spamc(&["-c"], &input).status.code(), Some(1));
    server.stop();
    let out = server.spamc(&[], &input);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, input, "passed on unchanged");
    let check = server.spamc(&["-c"], &input);
    assert_eq!(
        (check.status.code(), &check.stdout[..]),
        (Some(0), &b"0/0\n"[..])
    );
    // Told not to fall back, spamc says it failed and writes nothing.
    let strict = server.spamc(&["-x"], &input);
    assert_ne!(strict.status.code(), Some(0));
    assert!(strict.stdout.is_empty());
}

#[test]
fn no_model_or_too_large_is_an_error_answer_and_the_message_goes_on() {
    if !have("spamc") {
        return;
    }
    let (s, _) = spam_and_ham(&trained());
    let input = read(&s);

    let empty = Db::new();
    let server = Server::start(&empty, &[]);
    let out = server.spamc(&[], &input);
    assert_eq!((out.status.code(), &out.stdout), (Some(0), &input));
    let check = server.spamc(&["-c"], &input);
    assert_eq!(
        (check.status.code(), &check.stdout[..]),
        (Some(0), &b"0/0\n"[..])
    );
    let answer = server.raw(&request("PROCESS", &[], &input));
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 69 Service Unavailable: "),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(server.logged("no-model"), "{}", server.log());

    let db = trained();
    let server = Server::start(&db, &["--max-size", "1000"]);
    assert!(input.len() > 1000);
    let out = server.spamc(&[], &input);
    assert_eq!((out.status.code(), &out.stdout), (Some(0), &input));
    let answer = server.raw(&request("PROCESS", &[], &input));
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 65 "),
        "{answer:?}"
    );
    // A claimed length far over the limit is not waited for past the end
    // of what is sent, nor kept.
    let mut huge = b"CHECK SPAMC/1.5\r\nContent-length: 1000000000000\r\n\r\n".to_vec();
    huge.extend_from_slice(&input);
    let answer = server.raw(&huge);
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 65 "),
        "{answer:?}"
    );
    // Compressed, what inflates past the limit is refused the same way.
    let bomb = zlib(&vec![b'a'; 500_000]);
    assert!(bomb.len() < 1000);
    let answer = server.raw(&request("CHECK", &["Compress: zlib"], &bomb));
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 65 "),
        "{answer:?}"
    );
    assert!(server.logged("too-large"), "{}", server.log());
    // A TELL of one is not learned, and says so (it is no judgment).
    let answer = server.raw(&request(
        "TELL",
        &["Message-class: spam", "Set: local", "User: dave"],
        &input,
    ));
    let line = status_line(&answer);
    assert!(
        line.starts_with("SPAMD/1.0 65 ") && line.ends_with("bytes: not learned"),
        "{answer:?}"
    );
    assert!(
        server.logged("message larger than 1000 bytes: not learned"),
        "{}",
        server.log()
    );
    // With a message budget no larger than the size limit, a compressed
    // message is still judged: what it may inflate to is held by
    // deflate's greatest ratio, not by the limit (before, every one was
    // busy).
    let tight = Server::start(&db, &["--max-size", "100000", "--max-held", "100000"]);
    let answer = tight.raw(&request("CHECK", &["Compress: zlib"], &zlib(&input)));
    assert!(
        status_line(&answer).starts_with("SPAMD/1.1 0 EX_OK"),
        "{answer:?}"
    );
}

/// `data` compressed as spamc -z does (zlib).
fn zlib(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(3));
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

/// An answer's header lines and its body.
fn split_answer(answer: &[u8]) -> (String, Vec<u8>) {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an answer header");
    (
        String::from_utf8_lossy(&answer[..end + 2]).into_owned(),
        answer[end + 4..].to_vec(),
    )
}

#[test]
fn the_protocol_beyond_what_spamc_sends() {
    let db = trained();
    let (s, h) = spam_and_ham(&db);
    let (spam, ham) = (read(&s), read(&h));
    let server = Server::start(&db, &["--timeout", "1"]);
    let filtered = db.run(&["filter"], Some(&spam)).stdout;

    // Compress: zlib, as spamc -z sends it: the same answer as plain.
    let plain = server.raw(&request("PROCESS", &["User: carol"], &spam));
    let packed = server.raw(&request(
        "PROCESS",
        &["User: carol", "Compress: zlib"],
        &zlib(&spam),
    ));
    assert_eq!(packed, plain);
    let (head, body) = split_answer(&packed);
    assert_eq!(body, filtered);
    assert!(head.starts_with("SPAMD/1.1 0 EX_OK\r\n"), "{head}");
    assert!(
        head.contains(&format!("Content-length: {}\r\n", body.len())),
        "{head}"
    );
    assert!(head.contains("Spam: True ; "), "{head}");
    // A damaged stream, as spamd: unavailable.
    let mut broken = zlib(&spam);
    broken.truncate(broken.len() / 2);
    let answer = server.raw(&request("CHECK", &["Compress: zlib"], &broken));
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 69 "),
        "{answer:?}"
    );
    // Bytes after the stream's end are not judged without: refused.
    let mut trailing = zlib(&spam);
    trailing.extend_from_slice(b"X-Spam-Flag: NO\n");
    let answer = server.raw(&request("CHECK", &["Compress: zlib"], &trailing));
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 69 ")
            && status_line(&answer).contains("after the end of the compressed stream"),
        "{answer:?}"
    );

    // Exim's request, byte for byte (src/spam.c), and the parse it makes
    // of the answer: "SPAMD/%7s 0 EX_OK\r\nSpam: %*s ; %lf / %lf\r\n\r\n".
    for (message, spammy) in [(&spam, true), (&ham, false)] {
        let mut exim = format!(
            "REPORT SPAMC/1.2\r\nUser: exim\r\nContent-length: {}\r\n\r\n",
            message.len()
        )
        .into_bytes();
        exim.extend_from_slice(message);
        let answer = String::from_utf8(server.raw(&exim)).unwrap();
        let rest = answer
            .strip_prefix("SPAMD/1.1 0 EX_OK\r\nSpam: ")
            .expect(&answer);
        let (word, rest) = rest.split_once(" ; ").unwrap();
        let (numbers, report) = rest.split_once("\r\n\r\n").unwrap();
        let (score, threshold) = numbers.split_once(" / ").unwrap();
        let (score, threshold): (f64, f64) = (score.parse().unwrap(), threshold.parse().unwrap());
        // Exim's spam condition: score >= threshold.
        assert_eq!(score >= threshold, spammy, "{answer}");
        assert_eq!(word, if spammy { "True" } else { "False" });
        assert!(report.starts_with("bayesmail "), "{answer}");
    }

    // SKIP: nothing. PING without headers (before 1.5): PONG.
    assert_eq!(server.raw(b"SKIP SPAMC/1.5\r\n\r\n"), b"");
    assert_eq!(server.raw(b"PING SPAMC/1.2\r\n"), b"SPAMD/1.5 0 PONG\r\n");
    // Unknown headers are ignored; CHECK has no Content-length in its answer.
    let answer = server.raw(&request("CHECK", &["X-Whatever: 1", "User: dave"], &spam));
    let answer = String::from_utf8(answer).unwrap();
    assert!(
        answer.starts_with("SPAMD/1.1 0 EX_OK\r\nSpam: True ; "),
        "{answer}"
    );
    assert!(answer.ends_with(" / 5.0\r\n\r\n"), "{answer}");
    // TELL without Set or Remove does nothing; both at once is refused.
    assert_eq!(
        server.raw(&request("TELL", &["Message-class: spam"], &spam)),
        b"SPAMD/1.1 0 EX_OK\r\n\r\n"
    );
    let answer = server.raw(&request(
        "TELL",
        &["Message-class: spam", "Set: local", "Remove: local"],
        &spam,
    ));
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 76 "),
        "{answer:?}"
    );
    assert_eq!(db.counts(), [24, 24]);

    // Bad requests: spamd's protocol errors.
    let bad: [&[u8]; 6] = [
        b"FROB SPAMC/1.5\r\n\r\n",
        b"CHECK HTTP/1.1\r\n\r\n",
        b"CHECK SPAMC/1.5\r\nContent-length: twelve\r\n\r\n",
        b"CHECK SPAMC/1.5\r\nno colon\r\n\r\n",
        b"CHECK SPAMC/1.5\r\nContent-length: 10\r\n",
        b"",
    ];
    for request in bad {
        let answer = server.raw(request);
        assert!(
            status_line(&answer).starts_with("SPAMD/1.0 76 Bad header line: "),
            "{request:?}: {answer:?}"
        );
    }
    // Fewer bytes than Content-length says.
    let mut short = request("CHECK", &[], &spam);
    short.truncate(short.len() - 10);
    let answer = server.raw(&short);
    assert!(
        status_line(&answer).contains("Content-Length mismatch"),
        "{answer:?}"
    );
    // A header line longer than spamc's own buffer (8 KB).
    let long = format!("X-Long: {}", "y".repeat(9000));
    let answer = server.raw(&request("CHECK", &[&long], &spam));
    assert!(
        status_line(&answer).contains("header line too long"),
        "{answer:?}"
    );
    // Too many headers.
    let many: Vec<String> = (0..300).map(|i| format!("X-{i}: y")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let answer = server.raw(&request("CHECK", &many, &spam));
    assert!(
        status_line(&answer).contains("too many headers"),
        "{answer:?}"
    );

    // A client that stops sending: the read timeout (1 s here) answers.
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(b"CHECK SPAMC/1.5\r\nContent-length: 100\r\n\r\nFrom: a")
        .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    assert!(
        status_line(&answer).starts_with("SPAMD/1.0 79 Timeout: "),
        "{answer:?}"
    );
    // And the server still answers.
    assert_eq!(
        server.raw(b"PING SPAMC/1.5\r\n\r\n"),
        b"SPAMD/1.5 0 PONG\r\n"
    );

    // A client that trickles a byte every 100 ms, each well inside the
    // read timeout (2 s on a server of its own), is answered once its
    // request is not whole within four of them (8 s), not served for as
    // long as it cares to send.
    let slow_server = Server::start(&db, &["--timeout", "2"]);
    let mut s = TcpStream::connect(("127.0.0.1", slow_server.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let trickle = b"CHECK SPAMC/1.5\r\nContent-length: 100000\r\n\r\n";
    // 300 bytes, 100 ms apart and more: thirty seconds of a client still
    // sending.
    let (sent, answer) = crate::common::trickle(&mut s, trickle, 300, |_| false);
    assert!(sent < 300, "still reading after {sent} bytes");
    let status = status_line(&answer);
    assert!(
        status.starts_with("SPAMD/1.0 79 Timeout: ") && status.contains("not received whole"),
        "{answer:?}"
    );
}

/// A large answer to a client that reads it steadily but slowly (about
/// 6 MB/s, far below the loopback's speed) is written whole: only a part
/// that waits the read timeout (2 s here) ends the connection, not the
/// whole answer taking longer than that.
#[test]
fn a_large_answer_read_steadily_is_written_whole() {
    let db = trained();
    let server = Server::start(&db, &["--timeout", "2", "--max-size", "64M"]);
    let mut message = b"From: a@example.org\r\nSubject: big\r\n\r\n".to_vec();
    while message.len() < 32_000_000 {
        message.extend_from_slice(b"a line of words to make a large message body\r\n");
    }
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    // A small receive buffer, so that what the kernel holds does not stand
    // in for reading.
    let size: libc::c_int = 64 * 1024;
    // SAFETY: setsockopt on a socket this test owns, with an int option.
    let set = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&request("PROCESS", &[], &message)).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    let mut part = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut part) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&part[..n]),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, body) = split_answer(&answer);
    assert!(status.starts_with("SPAMD/1.1 0 EX_OK"), "{status}");
    assert!(
        body.ends_with(&message),
        "{} of {} bytes",
        body.len(),
        message.len()
    );
}

/// Each listener has its own connections: spamd clients that hold every
/// one of theirs (here one, silent) leave the HTTP listener answering at
/// once.
#[test]
fn one_protocols_clients_cannot_take_anothers_connections() {
    let db = trained();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args()).args([
        "serve",
        "--spamd",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--max-connections",
        "1",
        "--timeout",
        "30",
    ]);
    let (mut child, watch) = spawn_watched(cmd);
    let Some(bound) = watch.listening(2, 60) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("serve did not listen: {}", watch.log());
    };
    let port = |name: &str| -> u16 {
        let (_, addr) = bound.iter().find(|(p, _)| p == name).unwrap();
        addr.rsplit(':').next().unwrap().parse().unwrap()
    };
    let health = || {
        let mut http = TcpStream::connect(("127.0.0.1", port("http"))).unwrap();
        // Far less than the 30 s the spamd connection is held.
        http.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        http.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        http.read_to_end(&mut answer).map(|_| answer)
    };
    // One request first: with one count of connections for both
    // listeners, either this one waits for the spamd listener's, or the
    // spamd listener takes the count next and the one after waits.
    let first = health();
    let mut held = TcpStream::connect(("127.0.0.1", port("spamd"))).unwrap();
    held.write_all(b"CHECK SPAMC/1.5\r\n").unwrap();
    let second = health();
    let _ = child.kill();
    let _ = child.wait();
    drop(held);
    for answer in [first, second] {
        let answer = answer.unwrap_or_else(|e| panic!("{e}: {}", watch.log()));
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    }
}

#[test]
fn spamc_over_a_unix_socket() {
    if !have("spamc") {
        return;
    }
    let db = trained();
    let (s, h) = spam_and_ham(&db);
    let socket = db.path("spamd.sock");
    let addr = format!("unix:{}", socket.display());
    let server = Server::start_at(&db, &addr, &["--socket-mode", "600"]);
    let run = |args: &[&str], input: &[u8]| {
        let mut cmd = Command::new("spamc");
        cmd.args(["-F", "/dev/null", "-U", utf8(&socket), "-t", "60"])
            .args(args);
        run_with_stdin(cmd, input)
    };
    assert_eq!(
        run(&["-c"], &read(&s)).status.code(),
        Some(1),
        "{}",
        server.log()
    );
    assert_eq!(run(&["-c"], &read(&h)).status.code(), Some(0));
    let out = run(&[], &read(&h));
    assert_eq!(out.stdout, db.run(&["filter"], Some(&read(&h))).stdout);
    assert_eq!(strip_ours(&out.stdout).0, read(&h));
}

#[test]
fn tell_while_another_writer_holds_the_lock_is_left_for_it() {
    if !have("spamc") {
        return;
    }
    let db = trained();
    let server = Server::start(&db, &[]);
    let message = unseen(7, "spamd tell locked");
    // Another writer (a train, say) holds the writers' lock past serve's
    // wait (5 s).
    let lock = std::fs::File::options()
        .read(true)
        .write(true)
        .open(db.dir().join("lock"))
        .unwrap();
    lock.lock().unwrap();
    let answer = server.raw(&request(
        "TELL",
        &["Message-class: spam", "Set: local"],
        &message,
    ));
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("SPAMD/1.1 0 EX_OK\r\nDidSet: local\r\n"),
        "{answer}"
    );
    assert_eq!(db.counts(), [24, 24], "not learned while the lock is held");
    assert_eq!(file_names(&db.dir().join("pending")).len(), 1);
    lock.unlock().unwrap();
    // The next writer takes it in first (a test's lock does not).
    let out = server.spamc(&["-L", "spam"], &unseen(8, "spamd tell after"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "Message successfully un/learned"
    );
    assert_eq!(db.counts(), [24, 26]);
    assert!(file_names(&db.dir().join("pending")).is_empty());
}
