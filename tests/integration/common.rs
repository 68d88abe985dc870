//! Shared fixtures: where the corpora are, the binary, feature helpers.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use bayesmail::db::DbPaths;
use bayesmail::features::{Extractor, Features};

#[path = "../../src/store/redis_server.rs"]
pub mod redis_server;

/// Root of the repository.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The sample corpus written for the project.
pub fn sample_dir() -> PathBuf {
    root().join("corpora").join("sample")
}

/// Every sample message file, sorted.
pub fn sample_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for label in ["ham", "spam"] {
        for entry in std::fs::read_dir(sample_dir().join(label)).expect("sample corpus exists") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "eml") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(
        files.len() >= 40,
        "sample corpus has {} messages",
        files.len()
    );
    files
}

/// The public corpus, if present. Panics if it is absent but required.
pub fn public_corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("BAYESMAIL_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("corpora").join("spamassassin"));
    if dir.join("easy-ham-1").is_dir() {
        return Some(dir);
    }
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os("BAYESMAIL_REQUIRE_CORPUS").is_some();
    assert!(
        !required,
        "public corpus not found at {} (set BAYESMAIL_CORPUS)",
        dir.display()
    );
    eprintln!("public corpus not found at {}: test skipped", dir.display());
    None
}

/// Every file of the public corpus with its bytes, in path order.
pub fn public_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for group in ["easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join(group))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        paths.sort();
        for p in paths {
            let bytes = std::fs::read(&p).unwrap();
            out.push((p, bytes));
        }
    }
    out
}

/// Features of raw bytes; panics on a parse error.
pub fn features(raw: &[u8]) -> Features {
    Extractor::new().extract(raw).expect("message parses")
}

/// Runs the binary with arguments and optional stdin.
pub fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let mut pipe = child.stdin.take();
    std::thread::scope(|s| {
        if let (Some(input), Some(mut pipe)) = (stdin, pipe.take()) {
            // Written from another thread while the output is read, so a
            // child that writes before it has read everything cannot block.
            // The child may exit before reading everything; that is its
            // business.
            s.spawn(move || {
                let _ = pipe.write_all(input);
            });
        }
        child.wait_with_output().expect("binary runs")
    })
}

/// Starts `cmd` with piped stdio and writes `input` to its stdin from
/// another thread (so a child that writes before it has read everything
/// cannot block); join the thread after waiting for the child.
pub fn spawn_with_stdin(
    mut cmd: Command,
    input: &[u8],
) -> (
    std::process::Child,
    std::thread::JoinHandle<std::io::Result<()>>,
) {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("process starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    (child, std::thread::spawn(move || stdin.write_all(&input)))
}

/// Runs `cmd` with `input` on stdin; returns its output. A child that
/// exits before reading all of it (a script that fails early, a reader
/// refused its model) closes the pipe: that is its business, and what it
/// wrote says what happened.
pub fn run_with_stdin(cmd: Command, input: &[u8]) -> Output {
    let (child, writer) = spawn_with_stdin(cmd, input);
    let out = child.wait_with_output().expect("process runs");
    match writer.join().expect("writer thread") {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("stdin written: {e}"),
        _ => {}
    }
    out
}

/// LF → CRLF on every line end.
pub fn to_crlf(lf: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lf.len() + lf.len() / 40);
    for &b in lf {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

/// A database directory inside its own temporary directory, with an empty
/// config file so that no configuration from the environment applies.
pub struct Db {
    tmp: tempfile::TempDir,
}

impl Db {
    pub fn new() -> Db {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("config.toml"), "").unwrap();
        Db { tmp }
    }

    /// The database directory (not created until a writer runs).
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("db")
    }

    /// A path in the temporary directory, beside the database.
    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    pub fn model(&self) -> PathBuf {
        DbPaths::new(self.dir()).snapshot()
    }

    /// The global flags naming this database and the empty config file.
    pub fn global_args(&self) -> Vec<String> {
        vec![
            "--db".into(),
            utf8(&self.dir()).into(),
            "--config".into(),
            utf8(&self.path("config.toml")).into(),
        ]
    }

    /// Runs the binary against this database.
    pub fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let global = self.global_args();
        let mut all: Vec<&str> = global.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        run(&all, stdin)
    }

    /// Runs the binary against this database, reading files given to
    /// `learn` and `unlearn` one message at a time
    /// (`BAYESMAIL_LEARN_PART_BYTES`), as it reads an mbox larger than a
    /// part.
    pub fn run_in_parts(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(self.global_args())
            .args(args)
            .env("BAYESMAIL_LEARN_PART_BYTES", "1");
        run_with_stdin(cmd, stdin)
    }

    /// Runs the binary, asserts exit status 0 and returns stdout.
    pub fn ok(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.run(args, stdin);
        assert_exit(&out, 0, args);
        String::from_utf8(out.stdout).unwrap()
    }

    /// `train --json`; returns the summary.
    pub fn train(&self, spam: &[&Path], ham: &[&Path]) -> Value {
        let mut args = vec!["train", "--json", "--spam"];
        args.extend(spam.iter().map(|p| utf8(p)));
        args.push("--ham");
        args.extend(ham.iter().map(|p| utf8(p)));
        let lines = json_lines(&self.ok(&args, None));
        assert_eq!(lines.len(), 1, "{lines:?}");
        lines.into_iter().next().unwrap()
    }

    /// `stats --json`.
    pub fn stats(&self) -> Value {
        let lines = json_lines(&self.ok(&["stats", "--json"], None));
        assert_eq!(lines.len(), 1, "{lines:?}");
        lines.into_iter().next().unwrap()
    }

    /// Messages per class in the model, `[ham, spam]`.
    pub fn counts(&self) -> [u64; 2] {
        let s = self.stats();
        [
            s["ham_messages"].as_u64().unwrap(),
            s["spam_messages"].as_u64().unwrap(),
        ]
    }

    /// Messages per class, `[ham, spam]`, of another database at `dir`
    /// read with this one's configuration (a user's, under `serve`).
    pub fn counts_at(&self, dir: &Path) -> [u64; 2] {
        let config = self.path("config.toml");
        let out = run(
            &[
                "--db",
                utf8(dir),
                "--config",
                utf8(&config),
                "stats",
                "--json",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        [
            v["ham_messages"].as_u64().unwrap(),
            v["spam_messages"].as_u64().unwrap(),
        ]
    }

    /// `classify --json`; one object per message.
    pub fn classify(&self, paths: &[&Path]) -> Vec<Value> {
        let mut args = vec!["classify", "--json"];
        args.extend(paths.iter().map(|p| utf8(p)));
        json_lines(&self.ok(&args, None))
    }

    /// Trains on the sample corpus and checks the summary.
    pub fn train_sample(&self) {
        let summary = self.train(&[&sample_spam()], &[&sample_ham()]);
        assert_eq!(summary["learned"], 48, "{summary}");
        assert_eq!(summary["snapshot_written"], true, "{summary}");
    }
}

/// Sample message `i` with a line of its own (`tag`): a message neither
/// the sample corpus nor another test's holds.
pub fn unseen(i: usize, tag: &str) -> Vec<u8> {
    [
        &fs::read(&sample_files()[i]).unwrap()[..],
        format!("\n{tag}\n").as_bytes(),
    ]
    .concat()
}

pub fn utf8(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

pub fn sample_ham() -> PathBuf {
    sample_dir().join("ham")
}

pub fn sample_spam() -> PathBuf {
    sample_dir().join("spam")
}

pub fn assert_exit(out: &Output, code: i32, what: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// Splits `out` (a `filter` output) back into the input: removes our field
/// lines (checking their form) from the header block and undoes the
/// renaming of fields of ours that were already there. Returns the restored
/// input, the X-Spam-Status value, and whether our lines ended in CRLF.
pub fn strip_ours(out: &[u8]) -> (Vec<u8>, String, bool) {
    let mut restored = Vec::with_capacity(out.len());
    let mut status = None;
    let mut crlf = true;
    let mut in_header = true;
    let mut rest = out;
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |p| p + 1);
        let (line, tail) = rest.split_at(end);
        rest = tail;
        if in_header {
            let content = line.strip_suffix(b"\n").unwrap_or(line);
            let content = content.strip_suffix(b"\r").unwrap_or(content);
            if let Some(v) = content.strip_prefix(b"X-Spam-Status: ") {
                assert!(status.is_none(), "two X-Spam-Status fields of ours");
                status = Some(String::from_utf8(v.to_vec()).unwrap());
                crlf &= line.ends_with(b"\r\n");
                continue;
            }
            if content == b"X-Spam-Flag: YES" {
                crlf &= line.ends_with(b"\r\n");
                continue;
            }
            if let Some(renamed) = line.strip_prefix(b"Old-") {
                let name = renamed.split(|&b| b == b':').next().unwrap();
                let name = String::from_utf8_lossy(name).trim().to_ascii_lowercase();
                if name == "x-spam-status" || name == "x-spam-flag" {
                    restored.extend_from_slice(renamed);
                    continue;
                }
            }
            if content.is_empty() {
                in_header = false;
            }
        }
        restored.extend_from_slice(line);
    }
    (
        restored,
        status.expect("an X-Spam-Status field of ours"),
        crlf,
    )
}

/// Checks the form of an X-Spam-Status value; returns its first word.
pub fn status_word(status: &str) -> &str {
    let word = status.split(',').next().unwrap();
    match word {
        "Yes" | "No" | "Unsure" => {
            let mut parts: Vec<&str> = status.split(", ").collect();
            // An unsure verdict its probability did not decide says why.
            if parts.len() == 5 {
                assert_eq!(word, "Unsure", "{status}");
                let reason = parts.remove(3).strip_prefix("reason=");
                assert!(
                    matches!(
                        reason,
                        Some("young-model" | "few-known-words" | "unfamiliar")
                    ),
                    "{status}"
                );
            }
            assert_eq!(parts.len(), 4, "{status}");
            let p: f64 = parts[1]
                .strip_prefix("probability=")
                .unwrap()
                .parse()
                .unwrap();
            assert!((0.0..=1.0).contains(&p), "{status}");
            assert!(parts[2].starts_with("cutoff="), "{status}");
            assert_eq!(parts[3], concat!("version=", env!("CARGO_PKG_VERSION")));
        }
        "Unknown" => assert!(status.contains(", reason="), "{status}"),
        other => panic!("unexpected status {other:?} in {status}"),
    }
    word
}

/// The stderr of a `bayesmail serve` a test started, read to its end on a
/// thread of its own (so that serve never blocks on a full pipe): every
/// line kept for the log, and handed on for the test to wait for.
pub struct Watch {
    lines: std::sync::mpsc::Receiver<String>,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Spawns `cmd` (a `bayesmail serve`, however it is started) with no
/// stdin or stdout and its stderr watched.
pub fn spawn_watched(mut cmd: Command) -> (std::process::Child, Watch) {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let kept = log.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            {
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
            let _ = tx.send(line);
        }
    });
    let watch = Watch {
        lines,
        log,
        reader: Some(reader),
    };
    (child, watch)
}

impl Watch {
    /// What serve wrote so far (lines still in the pipe are not there
    /// yet: [`Watch::finish`] has them all).
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether serve has logged `what` within `secs` seconds: a line may
    /// reach the log after the answer it is about reaches the test.
    pub fn logged(&self, what: &str, secs: u64) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while !self.log().contains(what) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        true
    }

    /// Everything serve wrote, once it has exited.
    pub fn finish(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.log()
    }

    /// The next line that holds `what`, within `secs` seconds; `None` if
    /// none came.
    pub fn wait_for(&self, what: &str, secs: u64) -> Option<String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(what) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// The next `n` "PROTOCOL listening on ADDR" lines, as (protocol,
    /// address), within `secs` seconds in all; `None` if they did not all
    /// come.
    pub fn listening(&self, n: usize, secs: u64) -> Option<Vec<(String, String)>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        (0..n)
            .map(|_| {
                let left = deadline
                    .checked_duration_since(std::time::Instant::now())?
                    .as_secs()
                    .max(1);
                let line = self.wait_for(" listening on ", left)?;
                let (head, addr) = line.split_once(" listening on ")?;
                let protocol = head.rsplit(' ').next()?.to_string();
                Some((protocol, addr.trim().to_string()))
            })
            .collect()
    }
}

/// The names of the files in `dir` (a Maildir's `new/`); none if it is
/// not there.
pub fn file_names(dir: &Path) -> std::collections::BTreeSet<std::ffi::OsString> {
    fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default()
}

/// Waits up to `secs` seconds for one file more in `dir` than `before`
/// held (a message delivered) and returns its bytes; exactly one must
/// come. `why` says what the mail server said, for the failure.
pub fn one_more_file(
    dir: &Path,
    before: &std::collections::BTreeSet<std::ffi::OsString>,
    secs: u64,
    why: impl Fn() -> String,
) -> Vec<u8> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let after = file_names(dir);
        if let Some(new) = after.difference(before).next() {
            assert_eq!(after.len(), before.len() + 1, "{}", why());
            return fs::read(dir.join(new)).unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not delivered\n{}",
            why()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sends `prefix` and then `x` bytes on `stream`, one byte per wait of its
/// read timeout (the caller sets it), reading what comes back between
/// them, until `done` holds of what came, the server closes, or `limit`
/// bytes are sent. Returns the bytes sent and everything read (the rest of
/// the answer too, waiting up to ten seconds for it).
pub fn trickle(
    stream: &mut std::net::TcpStream,
    prefix: &[u8],
    limit: usize,
    done: impl Fn(&[u8]) -> bool,
) -> (usize, Vec<u8>) {
    use std::io::{Read, Write};
    let mut answer = Vec::new();
    let mut sent = 0;
    while sent < limit && !done(&answer) {
        let byte = prefix.get(sent).copied().unwrap_or(b'x');
        if stream.write_all(&[byte]).is_err() {
            break;
        }
        sent += 1;
        let mut chunk = [0u8; 1024];
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(_) => continue,
        }
    }
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let _ = stream.read_to_end(&mut answer);
    (sent, answer)
}
