//! `bayesmail serve --http`, the real server driven by the real `curl` (and
//! by a raw socket where a client must misbehave): verdicts as `classify`
//! gives them, learning as `learn`/`unlearn` does it, per-user models,
//! metrics, health, the body cap, slow and idle clients, and a stop that
//! still answers the request in flight.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Db, Watch, sample_files, spawn_watched, unseen, utf8};

/// A running `bayesmail serve --http 127.0.0.1:0`; killed and waited for
/// when dropped.
pub(crate) struct Server {
    child: Child,
    addr: String,
    /// Its stderr (behind a lock: a server is shared by the threads of a
    /// test).
    watch: std::sync::Mutex<Watch>,
}

impl Server {
    /// Starts serve on `db` with `extra` arguments and waits for the line
    /// that says where it listens.
    pub(crate) fn start(db: &Db, extra: &[&str]) -> Server {
        Server::start_with(db, extra, &[])
    }

    /// [`Server::start`] with `env` set for serve.
    pub(crate) fn start_with(db: &Db, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args())
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(extra)
            .envs(env.iter().copied());
        let (child, watch) = spawn_watched(cmd);
        let bound = watch
            .listening(1, 120)
            .unwrap_or_else(|| panic!("serve says where it listens: {}", watch.log()));
        Server {
            child,
            addr: bound[0].1.clone(),
            watch: std::sync::Mutex::new(watch),
        }
    }

    /// Waits (at most `secs` seconds) for serve to end by itself; its exit
    /// status and everything it wrote on stderr.
    pub(crate) fn ended_within(&mut self, secs: u64) -> (std::process::ExitStatus, String) {
        let watch = self.watch.get_mut().unwrap();
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, watch.finish());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("serve did not end within {secs} s: {}", watch.log());
    }

    /// What it wrote on stderr so far, once a line holding `what` is
    /// there (at most ten seconds).
    pub(crate) fn log_after(&self, what: &str) -> String {
        let watch = self.watch.lock().unwrap();
        watch.wait_for(what, 10);
        watch.log()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.addr).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        stream
    }

    /// SIGTERM, then waits (a bounded time) for it to exit; returns
    /// whether it exited successfully.
    pub(crate) fn terminate(&mut self) -> bool {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("serve did not stop within 60 s of SIGTERM");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl -sS` with `args`; returns the HTTP status and the body.
pub(crate) fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "60", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs (the curl package)");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "curl {args:?}: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

/// `curl` posting the file `body` to `url` with `headers`; the status and
/// the JSON answer.
pub(crate) fn post(url: &str, body: &Path, headers: &[&str]) -> (u16, Value) {
    let data = format!("@{}", utf8(body));
    let mut args = vec!["--data-binary", &data];
    for h in headers {
        args.extend(["-H", h]);
    }
    args.push(url);
    let (code, text) = curl(&args);
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    (code, json)
}

/// The value of the metric line `name` (with its labels) in `text`.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} not in\n{text}"))
        .parse()
        .unwrap()
}

/// Writes `message` to a file in the database's temporary directory.
fn message_file(db: &Db, name: &str, message: &[u8]) -> PathBuf {
    let path = db.path(name);
    std::fs::write(&path, message).unwrap();
    path
}

/// Reads one HTTP response from `stream`: its status and body (by its
/// Content-Length).
fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = (stream.read(&mut byte)).unwrap_or_else(|e| panic!("the response comes: {e}"));
        assert_eq!(n, 1, "connection closed mid-response: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}

/// Whether the server closed `stream` (reads its end) within `wait`.
pub(crate) fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // The wait ran out with the connection open.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            // Reset, aborted: closed all the same.
            Err(_) => return true,
        }
    }
}

#[test]
fn check_gives_classify_verdicts_and_metrics_count_them() {
    let db = Db::new();
    db.train_sample();
    let socket = db.path("http.sock");
    let unix = format!("unix:{}", utf8(&socket));
    let server = Server::start(&db, &["--http", &unix]);
    let files = sample_files();
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let expected = db.classify(&paths);
    let mut tally = [0u64; 3];
    for (path, want) in files.iter().zip(&expected) {
        let (code, got) = post(&server.url("/check"), path, &["Queue-Id: Q1"]);
        assert_eq!(code, 200, "{}: {got}", path.display());
        assert_eq!(got["verdict"], want["verdict"], "{}", path.display());
        assert_eq!(
            got["probability"],
            want["probability"],
            "{}",
            path.display()
        );
        assert_eq!(got["log_odds"], want["log_odds"], "{}", path.display());
        assert_eq!(got["model"], "global");
        assert!(got["reason"].is_null() && got["why"].is_null());
        let fields = got["fields"].as_array().unwrap();
        let status = fields.last().unwrap();
        assert_eq!(status[0], "X-Spam-Status");
        let word = crate::common::status_word(status[1].as_str().unwrap());
        let verdict = want["verdict"].as_str().unwrap();
        assert_eq!(
            word,
            match verdict {
                "spam" => "Yes",
                "ham" => "No",
                _ => "Unsure",
            }
        );
        // X-Spam-Flag comes first, and with spam only.
        assert_eq!(fields.len() == 2, verdict == "spam", "{got}");
        tally[["ham", "unsure", "spam"]
            .iter()
            .position(|v| *v == verdict)
            .unwrap()] += 1;
    }
    assert!(tally[0] > 0 && tally[2] > 0, "{tally:?}");

    let (code, health) = curl(&[&server.url("/health")]);
    assert_eq!((code, health.trim()), (200, r#"{"status":"ok"}"#));
    let (code, text) = curl(&[&server.url("/metrics")]);
    assert_eq!(code, 200);
    for (i, v) in ["ham", "unsure", "spam"].iter().enumerate() {
        let name = format!("bayesmail_messages_total{{verdict=\"{v}\"}}");
        assert_eq!(metric(&text, &name), tally[i] as f64, "{name}");
    }
    assert_eq!(
        metric(&text, "bayesmail_judge_seconds_count"),
        files.len() as f64
    );
    let db_label = format!("{{db=\"{}\"}}", utf8(&db.dir()));
    assert_eq!(
        metric(&text, &format!("bayesmail_model_generation{db_label}")),
        1.0
    );
    assert!(metric(&text, &format!("bayesmail_model_bytes{db_label}")) > 0.0);
    // Every curl above was a connection of its own, and this one too.
    assert_eq!(
        metric(&text, "bayesmail_connections_total{result=\"accepted\"}"),
        (files.len() + 2) as f64
    );

    // One curl, three requests: one connection, kept alive.
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "60",
            "-o",
            "/dev/null",
            "-o",
            "/dev/null",
        ])
        .args(["-o", "/dev/null", "-w", "%{http_code}:%{num_connects} "])
        .args([1, 2, 3].map(|_| server.url("/health")))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.split_whitespace().collect::<Vec<_>>(),
        ["200:1", "200:0", "200:0"]
    );

    // The same over the Unix socket.
    let data = format!("@{}", utf8(&files[0]));
    let (code, text) = curl(&[
        "--unix-socket",
        utf8(&socket),
        "--data-binary",
        &data,
        "http://localhost/check",
    ]);
    assert_eq!(code, 200, "{text}");
    let got: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got["probability"], expected[0]["probability"]);

    // An empty body has no verdict: 422, with the reason and the fields.
    let (code, text) = curl(&["--data-binary", "", &server.url("/check")]);
    assert_eq!(code, 422, "{text}");
    let got: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got["reason"], "unparseable");
    assert!(got["verdict"].is_null() && !got["why"].as_str().unwrap().is_empty());
    let (_, text) = curl(&[&server.url("/metrics")]);
    let name = "bayesmail_messages_total{verdict=\"unknown\",reason=\"unparseable\"}";
    assert_eq!(metric(&text, name), 1.0);

    // Wrong method, wrong path.
    let (code, body) = curl(&["-X", "GET", &server.url("/check")]);
    assert_eq!(code, 405, "{body}");
    let (code, body) = curl(&[&server.url("/nowhere")]);
    assert_eq!(code, 404, "{body}");
}

#[test]
fn learn_and_unlearn_count_as_the_commands_do() {
    let served = Db::new();
    let twin = Db::new();
    served.train_sample();
    twin.train_sample();
    let server = Server::start(&served, &[]);
    let message = message_file(&served, "new.eml", &unseen(3, "X-Http-Learn: 1"));
    let file = utf8(&message);
    let before = served.counts();
    assert_eq!(before, twin.counts());
    let generation = |server: &Server| {
        let (_, text) = curl(&[&server.url("/metrics")]);
        let name = format!(
            "bayesmail_model_generation{{db=\"{}\"}}",
            utf8(&served.dir())
        );
        metric(&text, &name)
    };
    let (code, _) = post(&server.url("/check"), &message, &[]);
    assert_eq!(code, 200);
    assert_eq!(generation(&server), 1.0);

    // Each step through HTTP and through the command, then the counts.
    let steps: [(&str, &[&str], &str, &str); 5] = [
        ("/learn?class=spam", &["learn", "--spam"], "learned", "spam"),
        ("/learn?class=spam", &["learn", "--spam"], "already", "spam"),
        ("/learn?class=ham", &["learn", "--ham"], "moved", "ham"),
        ("/unlearn", &["unlearn"], "unlearned", "ham"),
        ("/learn?class=ham", &["learn", "--ham"], "learned", "ham"),
    ];
    for (path, command, action, label) in steps {
        let (code, got) = post(&server.url(path), &message, &[]);
        assert_eq!(code, 200, "{path}: {got}");
        assert_eq!(got["action"], action, "{path}: {got}");
        assert_eq!(got["label"], label, "{path}: {got}");
        assert_eq!(got["database"], "global");
        let mut args = command.to_vec();
        args.push(file);
        twin.ok(&args, None);
        assert_eq!(served.counts(), twin.counts(), "after {path} ({action})");
    }
    assert_eq!(served.counts(), [before[0] + 1, before[1]]);

    // The model judging /check is the one learned into.
    let (code, _) = post(&server.url("/check"), &message, &[]);
    assert_eq!(code, 200);
    assert!(generation(&server) > 1.0);

    let errors = |server: &Server| {
        let (_, text) = curl(&[&server.url("/metrics")]);
        metric(&text, "bayesmail_learn_errors_total")
    };
    let errors_before = errors(&server);
    // Unlearning twice: the second says it was never learned; nothing moves.
    let (code, got) = post(&server.url("/unlearn"), &message, &[]);
    assert_eq!((code, &got["action"]), (200, &Value::from("unlearned")));
    let (code, got) = post(&server.url("/unlearn"), &message, &[]);
    assert_eq!(code, 404, "{got}");
    assert_eq!(got["reason"], "not-learned");
    assert_eq!(served.counts(), before);

    // Not mail, no class: refused, nothing learned.
    let junk = message_file(&served, "junk", b"\x00\x01 not a message");
    let (code, got) = post(&server.url("/learn?class=spam"), &junk, &[]);
    assert_eq!(code, 422, "{got}");
    let (code, got) = post(&server.url("/learn"), &message, &[]);
    assert_eq!((code, &got["reason"]), (400, &Value::from("bad-class")));
    assert_eq!(served.counts(), before);

    let (_, text) = curl(&[&server.url("/metrics")]);
    assert_eq!(metric(&text, "bayesmail_learns_total{kind=\"spam\"}"), 1.0);
    assert_eq!(metric(&text, "bayesmail_learns_total{kind=\"ham\"}"), 2.0);
    assert_eq!(
        metric(&text, "bayesmail_learns_total{kind=\"unlearn\"}"),
        2.0
    );
    // The second unlearn and the message that is not mail.
    assert_eq!(errors(&server) - errors_before, 2.0);
}

#[test]
fn each_user_is_judged_by_its_own_model_or_the_global_one() {
    let db = Db::new();
    db.train_sample();
    let users = db.path("users");
    let pattern = format!("{}/%d/%l", utf8(&users));
    let server = Server::start(&db, &["--user-db", &pattern, "--min-user-messages", "1"]);
    let files = sample_files();
    let spam = files
        .iter()
        .find(|p| p.to_str().unwrap().contains("/spam/"))
        .unwrap();
    let ham = files
        .iter()
        .find(|p| p.to_str().unwrap().contains("/ham/"))
        .unwrap();

    // A user with no model: the global one judges, and the answer says so.
    let (code, got) = post(&server.url("/check"), spam, &["User: nobody@example.org"]);
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        (&got["model"], &got["user"]),
        (&Value::from("global"), &Value::from("nobody@example.org"))
    );
    assert!(!users.exists(), "judging made no database");

    // Learning for a user makes its database under the pattern.
    for (path, class) in [(spam, "spam"), (ham, "ham")] {
        let (code, got) = post(
            &server.url(&format!("/learn?class={class}")),
            path,
            &["User: alice@example.org"],
        );
        assert_eq!(code, 200, "{got}");
        assert_eq!(got["action"], "learned");
        assert_eq!(got["database"], "user:alice@example.org");
    }
    let alice = users.join("example.org").join("alice");
    let stats = crate::common::json_lines(
        &String::from_utf8(
            Command::new(env!("CARGO_BIN_EXE_bayesmail"))
                .args([
                    "--db",
                    utf8(&alice),
                    "--config",
                    utf8(&db.path("config.toml")),
                ])
                .args(["stats", "--json"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap(),
    );
    assert_eq!(stats[0]["ham_messages"], 1, "{stats:?}");
    assert_eq!(stats[0]["spam_messages"], 1, "{stats:?}");
    // The global database did not move.
    assert_eq!(db.counts(), [24, 24]);

    // Alice now has a model of her own (one of each class is the minimum here).
    let (code, got) = post(&server.url("/check"), spam, &["User: alice@example.org"]);
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["model"], "user:alice@example.org");
    // The fields say which kind judged, as the milter's and spamd's do.
    let status = |got: &Value| {
        got["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f[0] == "X-Spam-Status")
            .map(|f| f[1].as_str().unwrap().to_string())
            .unwrap()
    };
    assert!(status(&got).ends_with(", model=user"), "{got}");
    let (_, global) = post(&server.url("/check"), spam, &[]);
    assert!(status(&global).ends_with(", model=global"), "{global}");
    // Another user still gets the global one.
    let (_, got) = post(&server.url("/check"), spam, &["User: bob@example.org"]);
    assert_eq!(got["model"], "global");
    // Her spam unlearned, her database holds one class and no model: the
    // global one judges her mail again, not the model serve had read.
    let (code, got) = post(&server.url("/unlearn"), spam, &["User: alice@example.org"]);
    assert_eq!(code, 200, "{got}");
    assert!(!alice.join("model.bin").exists());
    let (_, got) = post(&server.url("/check"), spam, &["User: alice@example.org"]);
    assert_eq!(got["model"], "global", "{got}");
    let (_, got) = post(
        &server.url("/learn?class=spam"),
        spam,
        &["User: alice@example.org"],
    );
    assert_eq!(got["action"], "learned", "{got}");
    let (_, got) = post(&server.url("/check"), spam, &["User: alice@example.org"]);
    assert_eq!(got["model"], "user:alice@example.org", "{got}");

    // Names that could reach elsewhere are refused, before anything is read.
    let long = format!("User: {}", "a".repeat(300));
    for header in ["User: ../etc", "User: ..", "User: a%b", "User: a/b", &long] {
        for path in ["/check", "/learn?class=spam", "/unlearn"] {
            let (code, got) = post(&server.url(path), spam, &[header]);
            assert_eq!(code, 400, "{header} {path}: {got}");
            assert_eq!(got["reason"], "bad-user", "{header} {path}");
        }
    }
    // A NUL cannot be given to curl: a raw request, refused by the parser.
    let mut stream = server.connect();
    stream
        .write_all(b"POST /check HTTP/1.1\r\nHost: x\r\nUser: a\0b\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    let (code, _) = read_response(&mut stream);
    assert_eq!(code, 400);
    // Under the root: only alice's database.
    let mut made: Vec<_> = walk(&users)
        .into_iter()
        .filter(|p| p.is_dir() && p.join("model.bin").exists())
        .collect();
    made.sort();
    assert_eq!(made, [alice]);
    let mut beside: Vec<_> = std::fs::read_dir(db.path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    beside.sort();
    assert_eq!(beside, ["config.toml", "db", "users"]);

    // A user without a domain has its database under `@`; one that an
    // earlier version made at `users/carol` (`%d` empty) is used there,
    // and the log says once where to move it.
    let earlier = users.join("carol");
    for (class, path) in [("--spam", spam), ("--ham", ham)] {
        let out = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
            .args([
                "--db",
                utf8(&earlier),
                "--config",
                utf8(&db.path("config.toml")),
            ])
            .args(["learn", class, utf8(path)])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for _ in 0..2 {
        let (_, got) = post(&server.url("/check"), spam, &["User: carol"]);
        assert_eq!(got["model"], "user:carol", "{got}");
    }
    let log = server.log_after("move it to");
    assert_eq!(log.matches("move it to").count(), 1, "{log}");
    assert!(!users.join("@").join("carol").exists());
    let (_, got) = post(&server.url("/learn?class=spam"), spam, &["User: dave"]);
    assert_eq!(got["action"], "learned", "{got}");
    assert!(users.join("@").join("dave").join("counts.sled").exists());
    // A user named like a database's own file is no earlier database: a
    // name without a domain that is a domain's name goes where it
    // belongs, not into that domain's directory.
    for user in ["User: counts.sled@example.org", "User: example.org"] {
        let (_, got) = post(&server.url("/learn?class=spam"), spam, &[user]);
        assert_eq!(got["action"], "learned", "{user}: {got}");
    }
    assert!(
        users
            .join("@")
            .join("example.org")
            .join("counts.sled")
            .exists()
    );
    assert!(!users.join("example.org").join("learn.log").exists());
}

/// `--recipient-delimiter` names the same user whichever protocol gives
/// the name: HTTP's `User: alice+lists@example.org` learns into and is
/// judged by alice@example.org's model, as the milter's recipient is.
/// Before, it applied to the milter alone, and HTTP and spamd learned
/// into a database of `alice+lists`'s that judged nothing the milter saw.
#[test]
fn an_address_extension_names_the_same_user_over_http() {
    let db = Db::new();
    db.train_sample();
    let users = db.path("users");
    let pattern = format!("{}/%d/%l", utf8(&users));
    let server = Server::start(
        &db,
        &[
            "--user-db",
            &pattern,
            "--min-user-messages",
            "1",
            "--recipient-delimiter",
            "+",
        ],
    );
    let files = sample_files();
    for (class, part) in [("spam", "/spam/"), ("ham", "/ham/")] {
        let path = files
            .iter()
            .find(|p| p.to_str().unwrap().contains(part))
            .unwrap();
        let (code, got) = post(
            &server.url(&format!("/learn?class={class}")),
            path,
            &["User: Alice+Lists@example.org."],
        );
        assert_eq!(code, 200, "{got}");
        assert_eq!(got["database"], "user:alice@example.org", "{got}");
    }
    assert!(
        users.join("example.org/alice/model.bin").is_file(),
        "{:?}",
        walk(&users)
    );
    assert_eq!(
        std::fs::read_dir(users.join("example.org"))
            .unwrap()
            .count(),
        1
    );
    for user in ["alice@example.org", "alice+other@example.org"] {
        let (code, got) = post(
            &server.url("/check"),
            &files[0],
            &[&format!("User: {user}")],
        );
        assert_eq!(code, 200, "{got}");
        assert_eq!(got["model"], "user:alice@example.org", "{user}: {got}");
    }
}

/// Every path under `dir`.
pub(crate) fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// Connections refused a body too large linger outside the connection
/// limit (reading the rest, so that the client gets its answer), but no
/// more than a bound of them at once: 300 such clients that stay
/// connected leave the server with fewer than 100 open files. Before,
/// each held one for its linger, and a client opening them fast ran the
/// server out of file descriptors (the milter's connections included).
#[test]
fn connections_refused_too_large_hold_few_of_the_servers_files() {
    let db = Db::new();
    db.train_sample();
    let server = Server::start(&db, &["--max-size", "20K"]);
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.child.id()))
            .unwrap()
            .count()
    };
    let before = fds();
    let mut held = Vec::new();
    for _ in 0..300 {
        let mut conn = server.connect();
        conn.write_all(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
            .unwrap();
        let (code, body) = read_response(&mut conn);
        assert_eq!(code, 413, "{body}");
        held.push(conn);
    }
    let during = fds();
    assert!(
        during < before + 100,
        "{before} open files before, {during} after"
    );
    // The server still answers.
    let (code, _) = post(&server.url("/check"), &sample_files()[0], &[]);
    assert_eq!(code, 200);
}

#[test]
fn bodies_over_the_cap_are_refused_and_slow_clients_dropped() {
    let db = Db::new();
    db.train_sample();
    let server = Server::start(&db, &["--max-size", "20K", "--timeout", "1"]);
    let big = message_file(&db, "big.eml", &{
        let mut m = unseen(0, "X-Big: 1");
        while m.len() < 2_000_000 {
            m.extend_from_slice(b"filler line of a message far over the cap\n");
        }
        m
    });
    // Declared too large (curl asks first: Expect: 100-continue), and
    // chunked, found too large while read.
    for headers in [&[][..], &["Transfer-Encoding: chunked"][..]] {
        let (code, got) = post(&server.url("/check"), &big, headers);
        assert_eq!(code, 413, "{headers:?}: {got}");
        assert_eq!(got["reason"], "too-large");
        assert!(got["verdict"].is_null());
        assert!(
            got["fields"][0][1]
                .as_str()
                .unwrap()
                .starts_with("Unknown, reason=too-large")
        );
    }
    // A client that does not ask first and sends it all still reads its
    // 413 (the server reads and drops the rest rather than reset it). The
    // server closes, unanswered, a connection that has not sent its head
    // within twice its timeout: the head goes out as soon as the
    // connection is made, and the server is given 5 s, so that a test
    // thread that stalls under load is not taken for a silent client.
    let patient = Server::start(&db, &["--max-size", "20K", "--timeout", "5"]);
    let body = std::fs::read(&big).unwrap();
    let head = format!(
        "POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    for _ in 0..3 {
        let mut eager = patient.connect();
        eager.write_all(head.as_bytes()).unwrap();
        let mut writer = eager.try_clone().unwrap();
        let body = body.clone();
        let sending = std::thread::spawn(move || {
            let _ = writer.write_all(&body);
        });
        let (code, body) = read_response(&mut eager);
        assert_eq!(code, 413, "{body}");
        drop(eager);
        sending.join().unwrap();
    }
    let (code, got) = post(&server.url("/learn?class=spam"), &big, &[]);
    assert_eq!((code, &got["reason"]), (413, &Value::from("too-large")));
    assert!(
        got["why"].as_str().unwrap().ends_with(": not learned"),
        "{got}"
    );
    assert_eq!(db.counts(), [24, 24]);

    // A request whose header comes a byte every 3 s is dropped before it
    // is whole (the idle timeout is 2 s with --timeout 1).
    let request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut slow = server.connect();
    let mut sent = 0;
    let mut dropped = false;
    for byte in request {
        if slow.write_all(&[*byte]).is_err() {
            dropped = true;
            break;
        }
        sent += 1;
        if closed_within(&mut slow, Duration::from_secs(3)) {
            dropped = true;
            break;
        }
    }
    assert!(dropped && sent < request.len(), "sent {sent} bytes");

    // A body that stops coming: 408 after the read timeout (1 s), then
    // the connection closes.
    let mut stalled = server.connect();
    stalled
        .write_all(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nFrom")
        .unwrap();
    let (code, body) = read_response(&mut stalled);
    assert_eq!(code, 408, "{body}");
    assert!(body.contains("\"reason\":\"timeout\""), "{body}");
    assert!(closed_within(&mut stalled, Duration::from_secs(10)));

    // A kept-alive connection with no second request is closed.
    let mut idle = server.connect();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut idle).0, 200);
    assert!(closed_within(&mut idle, Duration::from_secs(15)));

    // A body that trickles a byte every 100 ms, each well inside the read
    // timeout (2 s on a server of its own): 408 once it is not whole four
    // read timeouts (8 s) after it began.
    let slow_server = Server::start(&db, &["--timeout", "2"]);
    let mut trickle = slow_server.connect();
    trickle
        .write_all(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        .unwrap();
    trickle
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // 300 bytes, 100 ms apart and more: thirty seconds of a client still
    // sending.
    let (sent, answer) = crate::common::trickle(&mut trickle, b"", 300, |got| {
        got.windows(4).any(|w| w == b"\r\n\r\n")
    });
    let answer = String::from_utf8_lossy(&answer);
    assert!(sent < 300, "still reading after {sent} bytes of the body");
    assert!(
        answer.starts_with("HTTP/1.1 408") && answer.contains("came slower than"),
        "{answer}"
    );

    // A client that pipelines requests and never reads the answers: once
    // a write has waited the read timeout (2 s) the connection is closed,
    // long before every answer is written.
    let asked = 20_000;
    let mut deaf = slow_server.connect();
    let mut sender = deaf.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        for _ in 0..asked {
            if sender
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .is_err()
            {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_secs(8));
    deaf.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answers = Vec::new();
    let _ = deaf.read_to_end(&mut answers);
    let _ = deaf.shutdown(std::net::Shutdown::Both);
    writer.join().unwrap();
    let answered = answers.windows(12).filter(|w| w == b"HTTP/1.1 200").count();
    assert!(answered < asked, "{answered} of {asked} answered");

    // A request sent whole, then the client's side closed: answered.
    let mut half = slow_server.connect();
    half.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    half.shutdown(std::net::Shutdown::Write).unwrap();
    half.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = half.read_to_end(&mut answer);
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");

    // And the servers still serve (the eager clients' three on the
    // patient one).
    for (server, too_large) in [(&server, 2.0), (&patient, 3.0)] {
        let (_, text) = curl(&[&server.url("/metrics")]);
        assert_eq!(
            metric(
                &text,
                "bayesmail_messages_total{verdict=\"unknown\",reason=\"too-large\"}"
            ),
            too_large
        );
    }
}

#[test]
fn a_stop_answers_the_request_in_flight() {
    let db = Db::new();
    db.train_sample();
    let mut server = Server::start(&db, &[]);
    let file = &sample_files()[30];
    let message = std::fs::read(file).unwrap();
    let want = &db.classify(&[file])[0];

    // Half a request, then make sure it was accepted: a later connection
    // is answered, so the earlier one was taken off the queue first.
    let mut in_flight = server.connect();
    let (half, rest) = message.split_at(message.len() / 2);
    write!(
        in_flight,
        "POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        message.len()
    )
    .unwrap();
    in_flight.write_all(half).unwrap();
    let (code, _) = curl(&[&server.url("/health")]);
    assert_eq!(code, 200);

    let addr = server.addr.clone();
    let stopped = std::thread::spawn(move || server.terminate());
    // The server stops taking connections once it has the signal.
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(&addr).is_ok() {
        assert!(Instant::now() < deadline, "serve still accepts");
        std::thread::sleep(Duration::from_millis(20));
    }
    in_flight.write_all(rest).unwrap();
    let (code, body) = read_response(&mut in_flight);
    assert_eq!(code, 200, "{body}");
    let got: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(got["verdict"], want["verdict"]);
    assert_eq!(got["probability"], want["probability"]);
    assert!(closed_within(&mut in_flight, Duration::from_secs(30)));
    assert!(stopped.join().unwrap(), "serve exits successfully");
}
