//! Shared fixtures: where the corpora are, the binary, feature helpers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bayesmail::features::{Extractor, Features};

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
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        // The child may exit before reading everything; that is its business.
        let _ = pipe.write_all(input);
    }
    child.wait_with_output().expect("binary runs")
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
