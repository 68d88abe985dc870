//! What the whole-process benchmarks share: the public corpus and its
//! folders, both tools trained on it, one process run with its peak memory,
//! medians, and the environment knobs.

// Each bench uses its own part of this module.
#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The public corpus's spam folders.
pub const SPAM: [&str; 2] = ["spam-1", "spam-2"];
/// The public corpus's ham folders.
pub const HAM: [&str; 3] = ["easy-ham-1", "easy-ham-2", "hard-ham-1"];

/// The public corpus: `BAYESMAIL_CORPUS`, or `corpora/spamassassin`.
/// Exits with a message when it is not there.
pub fn corpus_dir() -> PathBuf {
    let dir = match std::env::var_os("BAYESMAIL_CORPUS") {
        Some(dir) => dir.into(),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpora/spamassassin"),
    };
    if !dir.join("spam-1").is_dir() {
        fail(&format!(
            "no public corpus at {} (set BAYESMAIL_CORPUS or run corpora/fetch)",
            dir.display()
        ));
    }
    dir
}

/// The corpus's spam and ham folders.
pub fn folders(corpus: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let dirs = |names: &[&str]| -> Vec<PathBuf> { names.iter().map(|d| corpus.join(d)).collect() };
    (dirs(&SPAM), dirs(&HAM))
}

/// Every message file of `dirs`, sorted.
pub fn files_in(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in dirs {
        for entry in std::fs::read_dir(dir).expect("corpus folder") {
            let path = entry.expect("corpus entry").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Exits with a message unless `program` runs (`program ARG`).
pub fn require(program: &str, arg: &str, package: &str) {
    let runs = Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !runs {
        fail(&format!(
            "{program} is not installed (Debian: apt-get install {package})"
        ));
    }
}

/// `bin --db db train` on the spam and ham folders.
pub fn train_bayesmail(bin: &Path, db: &Path, spam: &[PathBuf], ham: &[PathBuf]) {
    let mut train = Command::new(bin);
    train.arg("--db").arg(db).arg("train").arg("--spam");
    train.args(spam).arg("--ham").args(ham);
    check(train.stdout(Stdio::null()));
}

/// bogofilter's database in `db` (a directory that exists) registered with
/// the spam and ham folders.
pub fn train_bogofilter(db: &Path, spam: &[PathBuf], ham: &[PathBuf]) {
    for (flag, set) in [("-s", spam), ("-n", ham)] {
        let mut reg = Command::new("bogofilter");
        reg.arg("-d").arg(db).arg(flag).arg("-B").args(set.iter());
        check(&mut reg);
    }
}

/// Wall time, peak resident memory and minor page faults of one finished
/// process.
pub struct Run {
    pub wall: Duration,
    pub max_rss_kib: u64,
    pub faults: u64,
}

/// Runs `cmd` with `stdin` as standard input and its output discarded;
/// panics unless it exits with a status of 0, 1 or 2 (`bogofilter -p`
/// exits 1 for ham and 2 for unsure, `spamc -c` 1 for spam).
// The child is reaped by `wait4` (which also gives its peak memory), not by
// `Child::wait`.
#[allow(clippy::zombie_processes)]
pub fn run(cmd: &mut Command, stdin: &Path) -> Run {
    let input = File::open(stdin).expect("input file");
    let start = Instant::now();
    let child = cmd
        .stdin(input)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("process starts");
    let (status, max_rss_kib, faults) = wait(child.id() as libc::pid_t);
    let wall = start.elapsed();
    assert!(
        (0..=2).contains(&status),
        "{cmd:?} < {} exited with {status}",
        stdin.display()
    );
    Run {
        wall,
        max_rss_kib,
        faults,
    }
}

/// Waits for `pid` and returns its exit status, peak RSS (KiB) and minor
/// page faults.
fn wait(pid: libc::pid_t) -> (i32, u64, u64) {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for; the pointers are
    // to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (
        code,
        u64::try_from(usage.ru_maxrss).unwrap_or(0),
        u64::try_from(usage.ru_minflt).unwrap_or(0),
    )
}

/// Whether `bin`'s `filter` judges the message `f` with the model in `db`:
/// `Err` with its status field if it passes the message on unscored.
pub fn judges(bin: &Path, db: &Path, f: &Path) -> Result<(), String> {
    let out = Command::new(bin)
        .arg("--db")
        .arg(db)
        .arg("filter")
        .stdin(File::open(f).expect("input file"))
        .stderr(Stdio::null())
        .output()
        .expect("process starts");
    let out = String::from_utf8_lossy(&out.stdout);
    match out.lines().find_map(|l| l.strip_prefix("X-Spam-Status: ")) {
        Some(status) if !status.starts_with("Unknown") => Ok(()),
        Some(status) => Err(status.to_owned()),
        None => Err("no X-Spam-Status field".into()),
    }
}

pub fn check(cmd: &mut Command) {
    let status = cmd.status().expect("process starts");
    assert!(status.success(), "{cmd:?} failed: {status}");
}

pub fn median(xs: Vec<f64>) -> f64 {
    quantile(xs, 0.5)
}

/// The `q` quantile of `xs` (linear between the two nearest ranks).
pub fn quantile(mut xs: Vec<f64>, q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let at = q * (xs.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    xs[lo] + (xs[hi] - xs[lo]) * (at - lo as f64)
}

/// Median and maximum peak RSS, in MiB.
pub fn peak(runs: &[Run]) -> String {
    let kib: Vec<f64> = runs.iter().map(|r| r.max_rss_kib as f64).collect();
    let max = kib.iter().copied().fold(0.0, f64::max);
    format!(
        "median {:.1} MiB, max {:.1} MiB",
        median(kib) / 1024.0,
        max / 1024.0
    )
}

/// Median minor page faults.
pub fn faults(runs: &[Run]) -> String {
    format!(
        "{:.0}",
        median(runs.iter().map(|r| r.faults as f64).collect())
    )
}

/// The number in the environment variable `name`, or `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| fail(&format!("{name}={v} is not a number"))),
        Err(_) => default,
    }
}

/// Prints `message` and exits with status 1.
pub fn fail(message: &str) -> ! {
    let bench = std::env::args()
        .next()
        .map(|a| {
            let stem = Path::new(&a)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            // cargo names a bench binary NAME-HASH.
            stem.rsplit_once('-')
                .map_or(stem.clone(), |(n, _)| n.to_owned())
        })
        .unwrap_or_default();
    eprintln!("{bench}: {message}");
    std::process::exit(1);
}
