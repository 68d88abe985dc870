//! `bayesmail serve` under load: 200 clients at once across its three
//! protocols (the real `spamc`, `curl` and `miltertest`), each answered with
//! `classify`'s verdict; and 50 users, some with a model of their own
//! learned through TELL, each judged by the model that is theirs.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    Db, json_lines, run_with_stdin, sample_files, spawn_watched, status_word, unseen, utf8,
};
use crate::serve_milter::{have, lua_echo_header, lua_head, lua_message, miltertest, tagged};

/// A running `bayesmail serve`, with the address of each protocol it
/// listens on; killed and waited for when dropped (a test that passes
/// stops it with SIGTERM first).
struct Server {
    child: Option<Child>,
    addrs: HashMap<String, String>,
}

impl Server {
    /// Starts serve on `db` with `args`; waits until it says it listens on
    /// all of `protocols`.
    fn start(db: &Db, args: &[&str], protocols: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args()).arg("serve").args(args);
        let (child, watch) = spawn_watched(cmd);
        let addrs: HashMap<String, String> = watch
            .listening(protocols.len(), 60)
            .unwrap_or_else(|| panic!("serve says where it listens: {}", watch.log()))
            .into_iter()
            .collect();
        for p in protocols {
            assert!(addrs.contains_key(*p), "{p}: {addrs:?}");
        }
        Server {
            child: Some(child),
            addrs,
        }
    }

    fn addr(&self, protocol: &str) -> &str {
        &self.addrs[protocol]
    }

    fn port(&self, protocol: &str) -> String {
        self.addr(protocol).rsplit_once(':').unwrap().1.to_string()
    }

    /// SIGTERM, then waits (a bounded time); asserts a clean exit.
    fn terminate(&mut self) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on a child this test started.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "serve exited with {status}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "serve did not stop within 60 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The real spamc on `port` with `args` and `input` on stdin.
fn spamc(port: &str, args: &[&str], input: &[u8]) -> Output {
    let mut cmd = Command::new("spamc");
    cmd.args(["-F", "/dev/null", "-d", "127.0.0.1", "-p", port])
        .args(["-t", "60", "--connect-retries", "1"])
        .args(args);
    run_with_stdin(cmd, input)
}

/// `curl` posting `body` to `url` with `headers`: the status and the JSON
/// answer.
fn post(url: &str, body: &Path, headers: &[&str]) -> (u16, Value) {
    let data = format!("@{}", utf8(body));
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "60", "-w", "\n%{http_code}"])
        .args(["--data-binary", &data]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(url).output().expect("curl runs (the curl package)");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "curl {url}: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, code) = text.rsplit_once('\n').unwrap();
    let json = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    (code.parse().unwrap(), json)
}

/// The verdict an X-Spam-Status value says.
fn verdict_of_status(status: &str) -> String {
    match status_word(status) {
        "Yes" => "spam",
        "No" => "ham",
        "Unsure" => "unsure",
        other => panic!("no verdict: {other} in {status}"),
    }
    .to_string()
}

/// The header block of a message, up to its first empty line.
fn header_block(message: &[u8]) -> String {
    let text = String::from_utf8_lossy(message);
    let end = text
        .find("\r\n\r\n")
        .or_else(|| text.find("\n\n"))
        .unwrap_or(text.len());
    text[..end].to_string()
}

/// `classify --json`'s verdict on `path` with the database `dir`.
fn classify_at(db: &Db, dir: &Path, paths: &[&Path]) -> Vec<String> {
    let config = db.path("config.toml");
    let mut args = vec![
        "--db",
        utf8(dir),
        "--config",
        utf8(&config),
        "classify",
        "--json",
    ];
    args.extend(paths.iter().map(|p| utf8(p)));
    let out = crate::common::run(&args, None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::common::stderr(&out)
    );
    json_lines(&String::from_utf8(out.stdout).unwrap())
        .iter()
        .map(|v| v["verdict"].as_str().unwrap().to_string())
        .collect()
}

/// How one client asks.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    /// `spamc -c`: spam or not, by exit code and score.
    SpamcCheck,
    /// `spamc` (PROCESS): the X-Spam-Status field says the verdict.
    SpamcProcess,
    /// `curl` POST /check.
    Curl,
    /// `miltertest`: one SMTP transaction.
    Milter,
}

/// What one client was answered: the verdict (for `spamc -c`, "spam" or
/// "not spam").
fn ask(client: Client, server: &Server, path: &Path, tmp: &Path) -> String {
    let raw = std::fs::read(path).unwrap();
    match client {
        Client::SpamcCheck => {
            let out = spamc(&server.port("spamd"), &["-c"], &raw);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let (score, threshold) = text
                .trim_end()
                .split_once('/')
                .unwrap_or_else(|| panic!("spamc -c said {text:?}"));
            assert_eq!(threshold, "5.0", "{text:?}");
            let spam = score.parse::<f64>().unwrap() >= 5.0;
            assert_eq!(out.status.code(), Some(i32::from(spam)), "{text:?}");
            if spam { "spam" } else { "not spam" }.to_string()
        }
        Client::SpamcProcess => {
            let out = spamc(&server.port("spamd"), &[], &raw);
            assert_eq!(out.status.code(), Some(0));
            let head = header_block(&out.stdout);
            let status = head
                .lines()
                .find_map(|l| l.strip_prefix("X-Spam-Status: "))
                .unwrap_or_else(|| panic!("no X-Spam-Status in {head}"));
            verdict_of_status(status)
        }
        Client::Curl => {
            let url = format!("http://{}/check", server.addr("http"));
            let (code, got) = post(&url, path, &[]);
            assert_eq!(code, 200, "{got}");
            assert_eq!(got["model"], "global", "{got}");
            got["verdict"].as_str().unwrap().to_string()
        }
        Client::Milter => {
            let mut script = lua_head(server.addr("milter"));
            script.push_str(&lua_message(&raw, "<user@example.org>"));
            script.push_str(&lua_echo_header("STATUS", "X-Spam-Status"));
            script.push_str(
                "if mt.getreply(conn) ~= SMFIR_CONTINUE then error(\"not continued\") end\n\
                 mt.disconnect(conn)\n",
            );
            let out = miltertest(tmp, &script);
            let status = tagged(&out, "STATUS");
            assert_eq!(status.len(), 1, "{out}");
            verdict_of_status(status[0].trim_start())
        }
    }
}

#[test]
fn two_hundred_clients_at_once_across_the_three_protocols_get_classifys_verdicts() {
    if !have("spamc", "spamc") || !have("miltertest", "miltertest") || !have("curl", "curl") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let mut files = sample_files();
    // Messages the model has not seen, too.
    for i in [1, 7, 26, 40] {
        let path = db.path(&format!("unseen-{i}.eml"));
        std::fs::write(&path, unseen(i, &format!("load {i}"))).unwrap();
        files.push(path);
    }
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let expected = classify_at(&db, &db.dir(), &paths);
    let server = Arc::new(Server::start(
        &db,
        &[
            "--spamd",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--milter",
            "127.0.0.1:0",
        ],
        &["spamd", "http", "milter"],
    ));
    const CLIENTS: usize = 200;
    let kinds = [
        Client::SpamcCheck,
        Client::Curl,
        Client::Milter,
        Client::SpamcProcess,
        Client::Curl,
        Client::Milter,
    ];
    let start = Arc::new(Barrier::new(CLIENTS));
    let began = Instant::now();
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let client = kinds[i % kinds.len()];
            let path = files[i % files.len()].clone();
            let server = server.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                let tmp = tempfile::tempdir().unwrap();
                start.wait();
                (
                    client,
                    path.clone(),
                    ask(client, &server, &path, tmp.path()),
                )
            })
        })
        .collect();
    let mut answered = HashMap::new();
    let mut spam = 0;
    for (i, handle) in handles.into_iter().enumerate() {
        let (client, path, got) = handle
            .join()
            .unwrap_or_else(|_| panic!("client {i} was not answered as it should be"));
        let want = &expected[i % files.len()];
        let want = if client == Client::SpamcCheck && want != "spam" {
            "not spam"
        } else {
            want
        };
        assert_eq!(got, want, "client {i} ({client:?}) on {}", path.display());
        *answered.entry(format!("{client:?}")).or_insert(0) += 1;
        spam += usize::from(got == "spam");
    }
    eprintln!(
        "{CLIENTS} clients answered in {:?}: {answered:?}",
        began.elapsed()
    );
    assert_eq!(answered.values().sum::<usize>(), CLIENTS);
    assert!(spam > 0 && spam < CLIENTS, "{spam} spam verdicts");
    let mut server = Arc::try_unwrap(server).ok().expect("every client is done");
    server.terminate();
}

#[test]
fn fifty_users_each_judged_by_their_own_model_or_the_global_one() {
    if !have("spamc", "spamc") || !have("curl", "curl") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let users = db.path("users");
    let pattern = format!("{}/%u", utf8(&users));
    let mut server = Server::start(
        &db,
        &[
            "--spamd",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--user-db",
            &pattern,
            "--min-user-messages",
            "1",
        ],
        &["spamd", "http"],
    );
    let files = sample_files();
    let ham = files.iter().find(|p| utf8(p).contains("/ham/")).unwrap();
    let spam = files.iter().find(|p| utf8(p).contains("/spam/")).unwrap();
    let probe = db.path("probe.eml");
    std::fs::write(&probe, unseen(30, "fifty users")).unwrap();
    const USERS: usize = 50;
    const OWN: usize = 10;

    // The first ten learn one ham and one spam each through TELL, all at
    // once.
    let port = server.port("spamd");
    let learners: Vec<_> = (0..OWN)
        .map(|i| {
            let port = port.clone();
            let (ham, spam) = (ham.clone(), spam.clone());
            std::thread::spawn(move || {
                let user = format!("user{i}");
                for (class, path) in [("ham", &ham), ("spam", &spam)] {
                    let out = spamc(
                        &port,
                        &["-u", &user, "-L", class],
                        &std::fs::read(path).unwrap(),
                    );
                    assert_eq!(
                        out.status.code(),
                        Some(0),
                        "{user} {class}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    assert_eq!(
                        String::from_utf8_lossy(&out.stdout).trim_end(),
                        "Message successfully un/learned",
                        "{user} {class}"
                    );
                }
            })
        })
        .collect();
    for l in learners {
        l.join().expect("a learner was answered");
    }

    let global = classify_at(&db, &db.dir(), &[&probe])[0].clone();
    // All fifty judged at once over HTTP.
    let url = format!("http://{}/check", server.addr("http"));
    let judges: Vec<_> = (0..USERS)
        .map(|i| {
            let (url, probe) = (url.clone(), probe.clone());
            std::thread::spawn(move || post(&url, &probe, &[&format!("User: user{i}")]))
        })
        .collect();
    for (i, judge) in judges.into_iter().enumerate() {
        let (code, got) = judge.join().expect("a judge was answered");
        let user = format!("user{i}");
        assert_eq!(code, 200, "{user}: {got}");
        assert_eq!(got["user"], user.as_str(), "{got}");
        let dir = users.join(&user);
        if i < OWN {
            assert_eq!(got["model"], format!("user:{user}"), "{got}");
            assert_eq!(db.counts_at(&dir), [1, 1], "{user}");
            let own = classify_at(&db, &dir, &[&probe]);
            assert_eq!(got["verdict"], own[0].as_str(), "{user}: {got}");
        } else {
            assert_eq!(got["model"], "global", "{user}: {got}");
            assert_eq!(got["verdict"], global.as_str(), "{user}: {got}");
            assert!(!dir.exists(), "{user}: judging made no database");
        }
    }
    // Learning for users did not touch the global model.
    assert_eq!(db.counts(), [24, 24]);

    // Names that could reach elsewhere are refused, by both protocols.
    let long = "a".repeat(300);
    for user in ["../etc", "..", "a%b", "x/../../y", &long] {
        let (code, got) = post(&url, &probe, &[&format!("User: {user}")]);
        assert_eq!((code, &got["reason"]), (400, &Value::from("bad-user")));
        let learn = spamc(
            &port,
            &["-u", user, "-L", "spam"],
            &std::fs::read(spam).unwrap(),
        );
        assert_ne!(learn.status.code(), Some(0), "{user}");
        assert!(!String::from_utf8_lossy(&learn.stdout).contains("successfully"));
    }
    // A NUL cannot go through curl's or spamc's command line: raw requests.
    let mut http = TcpStream::connect(server.addr("http")).unwrap();
    http.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    http.write_all(b"POST /check HTTP/1.1\r\nHost: x\r\nUser: a\0b\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = http.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let mut spamd = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    spamd
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    spamd
        .write_all(b"CHECK SPAMC/1.5\r\nUser: a\0b\r\nContent-length: 0\r\n\r\n")
        .unwrap();
    spamd.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    spamd.read_to_end(&mut answer).unwrap();
    assert!(
        answer.starts_with(b"SPAMD/1.0 76 "),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // Under the root: the ten databases and nothing else.
    let mut made: Vec<String> = std::fs::read_dir(&users)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    made.sort();
    let mut want: Vec<String> = (0..OWN).map(|i| format!("user{i}")).collect();
    want.sort();
    assert_eq!(made, want);
    let mut beside: Vec<String> = std::fs::read_dir(db.path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    beside.sort();
    assert_eq!(beside, ["config.toml", "db", "probe.eml", "users"]);
    server.terminate();
}
