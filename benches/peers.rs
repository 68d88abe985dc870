//! Whole-process timings of bayesmail against bogofilter, on the same
//! machine in the same run, both trained on the whole public corpus:
//!
//! - `filter` latency: one process per message (`bayesmail filter` and
//!   `bogofilter -p`, both passing the message through with their headers
//!   added), over MESSAGES messages spread over the corpus, each message
//!   going to every tool with the order rotating from message to message,
//!   so that machine noise and warm caches favour none;
//! - `scan` throughput over the whole corpus (`bayesmail scan`, parallel,
//!   against `bogofilter -b`, its batch mode), ROUNDS alternating rounds;
//! - teaching one message, as a "Junk" button does: `bayesmail learn
//!   --spam` then `bayesmail unlearn` against `bogofilter -s` then
//!   `bogofilter -S`, two processes each, over LEARN messages that neither
//!   tool has seen (corpus messages with a header of their own), the tools
//!   alternating; the median includes the journal folds `learn` makes now
//!   and then;
//! - the peak resident memory (`wait4`'s `ru_maxrss`) and minor page
//!   faults of every process.
//!
//! Prints medians and the ratios bayesmail / bogofilter.
//!
//! ```sh
//! BAYESMAIL_CORPUS=../shared/corpora/spamassassin cargo bench --bench peers
//! BAYESMAIL_PEERS_MESSAGES=500 BAYESMAIL_PEERS_ROUNDS=5 BAYESMAIL_PEERS_LEARN=100 cargo bench --bench peers
//! ```
//!
//! `BAYESMAIL_PEERS_ALSO` (paths separated by `:`) names other bayesmail
//! binaries (another build of the same code, say) whose `filter`, `scan`
//! and `learn` + `unlearn` are timed in the same rotations, each against a
//! database trained on the same messages by that binary itself (a build of
//! another model file format cannot read this build's model), and reported
//! beside it. Every bayesmail binary must judge a first message (not pass
//! it on unscored) before any is timed.
//!
//! Needs `bogofilter` on the PATH (Debian: `apt-get install bogofilter`).

mod common;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    Run, corpus_dir, env_number, fail, faults, files_in, folders, judges, median, peak, require,
    run, train_bayesmail, train_bogofilter,
};

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter by here.
    let corpus = corpus_dir();
    require("bogofilter", "-V", "bogofilter");
    let n_messages = env_number("BAYESMAIL_PEERS_MESSAGES", 500);
    let rounds = env_number("BAYESMAIL_PEERS_ROUNDS", 5);
    let n_learn = env_number("BAYESMAIL_PEERS_LEARN", 100);
    let bm = PathBuf::from(env!("CARGO_BIN_EXE_bayesmail"));
    let also: Vec<PathBuf> = std::env::var_os("BAYESMAIL_PEERS_ALSO")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    let work = tempfile::tempdir().expect("temporary directory");
    let bm_db = work.path().join("bayesmail-db");
    let bogo_db = work.path().join("bogofilter-db");
    std::fs::create_dir(&bogo_db).expect("bogofilter directory");

    let (spam, ham) = folders(&corpus);
    let files = files_in(&[spam.clone(), ham.clone()].concat());
    eprintln!("training both tools on {} messages", files.len());
    let also_dbs: Vec<PathBuf> = (0..also.len())
        .map(|k| work.path().join(format!("also-{k}-db")))
        .collect();
    for (bin, db) in std::iter::once((&bm, &bm_db)).chain(also.iter().zip(&also_dbs)) {
        train_bayesmail(bin, db, &spam, &ham);
    }
    train_bogofilter(&bogo_db, &spam, &ham);

    // filter latency: the same messages for both, every k-th of the corpus.
    let step = (files.len() / n_messages.max(1)).max(1);
    let sample: Vec<&PathBuf> = files.iter().step_by(step).take(n_messages).collect();
    let bm_filter_with = |bin: &Path, db: &Path, f: &Path| {
        let mut c = Command::new(bin);
        c.arg("--db").arg(db).arg("filter");
        run(&mut c, f)
    };
    let bm_filter = |f: &Path| bm_filter_with(&bm, &bm_db, f);
    let bogo_filter = |f: &Path| {
        let mut c = Command::new("bogofilter");
        c.arg("-d").arg(&bogo_db).arg("-p");
        run(&mut c, f)
    };

    // Each message goes to every tool, the order rotating from message to
    // message: a process that runs right after another one on the same
    // message finds more of it in the caches.
    let contestants = 2 + also.len();
    let run_one = |which: usize, f: &Path| match which {
        0 => bm_filter(f),
        1 => bogo_filter(f),
        k => bm_filter_with(&also[k - 2], &also_dbs[k - 2], f),
    };
    // A binary that cannot read its model passes messages on unscored,
    // which is fast and times nothing of interest.
    for (bin, db) in std::iter::once((&bm, &bm_db)).chain(also.iter().zip(&also_dbs)) {
        let first = sample
            .first()
            .map_or(Path::new("/dev/null"), |f| f.as_path());
        if let Err(status) = judges(bin, db, first) {
            fail(&format!(
                "{} filter does not judge {}: {status}",
                bin.display(),
                first.display()
            ));
        }
    }
    for f in sample.iter().take(50) {
        for which in 0..contestants {
            run_one(which, f);
        }
    }
    let mut times: Vec<Vec<Run>> = (0..contestants).map(|_| Vec::new()).collect();
    for (i, f) in sample.iter().enumerate() {
        for j in 0..contestants {
            let which = (i + j) % contestants;
            times[which].push(run_one(which, f));
        }
    }
    let also_times = times.split_off(2);
    let bogo_times = times.pop().expect("bogofilter's times");
    let bm_times = times.pop().expect("bayesmail's times");

    // scan throughput over the whole corpus.
    let list = work.path().join("files.txt");
    let mut out = File::create(&list).expect("file list");
    for f in &files {
        writeln!(out, "{}", f.display()).expect("file list");
    }
    drop(out);
    let bm_scan_with = |bin: &Path, db: &Path| {
        let mut c = Command::new(bin);
        c.arg("--db").arg(db).arg("scan").arg("--json");
        c.args(spam.iter().chain(&ham));
        run(&mut c, Path::new("/dev/null"))
    };
    let bogo_scan = || {
        let mut c = Command::new("bogofilter");
        c.arg("-d").arg(&bogo_db).arg("-b").arg("-t");
        run(&mut c, &list)
    };
    let scan_one = |which: usize| match which {
        0 => bm_scan_with(&bm, &bm_db),
        1 => bogo_scan(),
        k => bm_scan_with(&also[k - 2], &also_dbs[k - 2]),
    };
    for which in 0..contestants {
        scan_one(which);
    }
    let mut scans: Vec<Vec<Run>> = (0..contestants).map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for j in 0..contestants {
            let which = (round + j) % contestants;
            scans[which].push(scan_one(which));
        }
    }
    let also_scans = scans.split_off(2);
    let bogo_scans = scans.pop().expect("bogofilter's scans");
    let bm_scans = scans.pop().expect("bayesmail's scans");

    // learn + unlearn of one unseen message, every tool, the order
    // rotating from message to message.
    let unseen = work.path().join("unseen");
    std::fs::create_dir(&unseen).expect("unseen directory");
    let learn_pair_bm = |bin: &Path, db: &Path, f: &Path| {
        let mut learn = Command::new(bin);
        learn.arg("--db").arg(db).args(["learn", "--spam", "-"]);
        let mut unlearn = Command::new(bin);
        unlearn.arg("--db").arg(db).args(["unlearn", "-"]);
        run(&mut learn, f).wall + run(&mut unlearn, f).wall
    };
    let learn_pair_bogo = |f: &Path| {
        let mut learn = Command::new("bogofilter");
        learn.arg("-d").arg(&bogo_db).arg("-s");
        let mut unlearn = Command::new("bogofilter");
        unlearn.arg("-d").arg(&bogo_db).arg("-S");
        run(&mut learn, f).wall + run(&mut unlearn, f).wall
    };
    let learn_one = |which: usize, f: &Path| match which {
        0 => learn_pair_bm(&bm, &bm_db, f),
        1 => learn_pair_bogo(f),
        k => learn_pair_bm(&also[k - 2], &also_dbs[k - 2], f),
    };
    let mut learns: Vec<Vec<f64>> = (0..contestants).map(|_| Vec::new()).collect();
    for (i, f) in files.iter().step_by(step).take(n_learn).enumerate() {
        let mut bytes = format!("X-Peers-Unseen: {i}\n").into_bytes();
        bytes.extend(std::fs::read(f).expect("corpus message"));
        let path = unseen.join(format!("{i}.eml"));
        std::fs::write(&path, bytes).expect("unseen message");
        for j in 0..contestants {
            let which = (i + j) % contestants;
            learns[which].push(learn_one(which, &path).as_secs_f64());
        }
    }
    let also_learns = learns.split_off(2);
    let bogo_learns = learns.pop().expect("bogofilter's learns");
    let bm_learns = learns.pop().expect("bayesmail's learns");
    let count = bm_learns.len();
    let mean = |xs: &[f64]| 1e3 * xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    let (bm_learn_mean, bogo_learn_mean) = (mean(&bm_learns), mean(&bogo_learns));
    let (bm_learn_ms, bogo_learn_ms) = (1e3 * median(bm_learns), 1e3 * median(bogo_learns));

    let n = files.len() as f64;
    let rate = |runs: &[Run]| n / median(runs.iter().map(|r| r.wall.as_secs_f64()).collect());
    let ms = |runs: &[Run]| 1e3 * median(runs.iter().map(|r| r.wall.as_secs_f64()).collect());
    let (bm_ms, bogo_ms) = (ms(&bm_times), ms(&bogo_times));
    let (bm_rate, bogo_rate) = (rate(&bm_scans), rate(&bogo_scans));
    println!(
        "filter, one process per message, median of {} messages:",
        sample.len()
    );
    println!(
        "  bayesmail filter    {bm_ms:.3} ms   peak RSS {}   page faults {}",
        peak(&bm_times),
        faults(&bm_times)
    );
    println!(
        "  bogofilter -p       {bogo_ms:.3} ms   peak RSS {}   page faults {}",
        peak(&bogo_times),
        faults(&bogo_times)
    );
    println!("  ratio bayesmail/bogofilter  {:.2}", bm_ms / bogo_ms);
    for (bin, times) in also.iter().zip(&also_times) {
        let also_ms = ms(times);
        println!(
            "  also {}: {also_ms:.3} ms   page faults {}   ratio to bogofilter {:.2}",
            bin.display(),
            faults(times),
            also_ms / bogo_ms
        );
    }
    println!(
        "scan, whole corpus ({} messages), median of {rounds} rounds:",
        files.len()
    );
    println!(
        "  bayesmail scan      {bm_rate:.0} msg/s   peak RSS {}",
        peak(&bm_scans)
    );
    println!(
        "  bogofilter -b       {bogo_rate:.0} msg/s   peak RSS {}",
        peak(&bogo_scans)
    );
    println!("  ratio bayesmail/bogofilter  {:.2}", bm_rate / bogo_rate);
    for (bin, scans) in also.iter().zip(&also_scans) {
        let also_rate = rate(scans);
        println!(
            "  also {}: {also_rate:.0} msg/s   peak RSS {}   ratio to bogofilter {:.2}",
            bin.display(),
            peak(scans),
            also_rate / bogo_rate
        );
    }
    println!("learn + unlearn of one unseen message, two processes, {count} messages:");
    println!(
        "  bayesmail learn --spam + unlearn   median {bm_learn_ms:.1} ms   mean {bm_learn_mean:.1} ms"
    );
    println!(
        "  bogofilter -s + -S                 median {bogo_learn_ms:.1} ms   mean {bogo_learn_mean:.1} ms"
    );
    println!(
        "  ratio bayesmail/bogofilter  {:.2}",
        bm_learn_ms / bogo_learn_ms
    );
    for (bin, learns) in also.iter().zip(also_learns) {
        let (also_mean, also_ms) = (mean(&learns), 1e3 * median(learns));
        println!(
            "  also {}: median {also_ms:.1} ms   mean {also_mean:.1} ms   ratio to bogofilter {:.2}",
            bin.display(),
            also_ms / bogo_learn_ms
        );
    }
}
