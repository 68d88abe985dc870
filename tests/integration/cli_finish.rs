//! The finished command line: shell completions and man pages generated
//! from the clap definitions, `-q`/`-v`, `--json` on `learn`, `unlearn` and
//! `stats`, and `eval --plot`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{Db, assert_exit, run, sample_files, sample_ham, sample_spam, stderr, utf8};

/// Every subcommand a user can type.
const SUBCOMMANDS: [&str; 12] = [
    "tokens",
    "train",
    "learn",
    "unlearn",
    "classify",
    "scan",
    "filter",
    "explain",
    "stats",
    "eval",
    "completions",
    "man",
];

fn stdout_of(args: &[&str]) -> String {
    let out = run(args, None);
    assert_exit(&out, 0, args);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_for_bash_zsh_and_fish_offer_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completions lack {sub}");
        }
        // Options of the deferred subcommands are there too.
        assert!(script.contains("move-spam-to"), "{shell}");
        assert!(script.contains("verdict-exit"), "{shell}");
    }
    let out = run(&["completions", "tcsh"], None);
    assert_exit(&out, 2, &["completions", "tcsh"]);
}

/// roff escapes a '-' as '\-'.
fn roff(s: &str) -> String {
    s.replace('-', "\\-")
}

#[test]
fn man_page_names_every_subcommand_and_each_has_its_own_page() {
    let page = stdout_of(&["man"]);
    assert!(page.contains(".TH bayesmail 1"), "{page}");
    for sub in SUBCOMMANDS {
        assert!(
            page.contains(&format!("bayesmail\\-{sub}(1)")),
            "main page lacks {sub}"
        );
        let own = stdout_of(&["man", sub]);
        assert!(own.contains(&format!(".TH bayesmail-{sub} 1")), "{sub}");
        assert!(own.contains(&format!("bayesmail\\-{sub} \\- ")), "{sub}");
    }
    let train = stdout_of(&["man", "train"]);
    for option in ["--spam", "--ham", "--json", "--quiet", "--verbose"] {
        assert!(train.contains(&roff(option)), "man train lacks {option}");
    }
    let out = run(&["man", "nosuch"], None);
    assert_exit(&out, 2, &["man", "nosuch"]);
    assert!(stderr(&out).contains("no command named 'nosuch'"));
}

fn one_json(text: &str) -> Value {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[test]
fn learn_unlearn_and_stats_print_json() {
    let db = Db::new();
    db.train_sample();
    let message = b"Subject: lunch on friday\nFrom: sam@example.org\n\nShall we meet at noon?\n";
    let learned = one_json(&db.ok(&["learn", "--ham", "--json", "-"], Some(message)));
    assert_eq!(learned["action"], "learned", "{learned}");
    assert_eq!(learned["label"], "ham");
    assert_eq!(learned["learned"], 1);
    assert_eq!(learned["totals"], serde_json::json!([25, 24]), "{learned}");
    let moved = one_json(&db.ok(&["learn", "--spam", "--json", "-"], Some(message)));
    assert_eq!(
        (&moved["action"], &moved["label"], &moved["relearned"]),
        (&"moved".into(), &"spam".into(), &1.into())
    );
    let again = one_json(&db.ok(&["learn", "--spam", "--json", "-"], Some(message)));
    assert_eq!(again["action"], "already-learned");
    let unlearned = one_json(&db.ok(&["unlearn", "--json", "-"], Some(message)));
    assert_eq!(
        unlearned,
        serde_json::json!({"action": "unlearned", "label": "spam"})
    );
    let stats = one_json(&db.ok(&["stats", "--json"], None));
    for key in [
        "database",
        "ham_messages",
        "spam_messages",
        "vocabulary",
        "params",
        "bayesmail_version",
    ] {
        assert!(keys(&stats).contains(&key), "stats lacks {key}: {stats}");
    }
    assert_eq!(
        (&stats["ham_messages"], &stats["spam_messages"]),
        (&24.into(), &24.into())
    );
    // How much each view counts, as the stacker learned it.
    let weights = stats["weights"].as_object().expect("weights");
    let mut views: Vec<&str> = weights.keys().map(String::as_str).collect();
    views.sort_unstable();
    assert_eq!(views, ["body", "bytes", "header", "logistic", "metadata"]);
    assert!(
        weights
            .values()
            .all(|w| w.as_f64().is_some_and(f64::is_finite))
    );
}

/// The first `n` sample messages of each class.
fn few(n: usize) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let files = sample_files();
    let of = |dir: PathBuf| -> Vec<PathBuf> {
        files
            .iter()
            .filter(|f| f.starts_with(&dir))
            .take(n)
            .cloned()
            .collect()
    };
    (of(sample_spam()), of(sample_ham()))
}

fn train_args<'a>(spam: &'a [PathBuf], ham: &'a [PathBuf], flag: Option<&'a str>) -> Vec<&'a str> {
    let mut args: Vec<&str> = flag.into_iter().collect();
    args.push("train");
    args.push("--spam");
    args.extend(spam.iter().map(|p| utf8(p)));
    args.push("--ham");
    args.extend(ham.iter().map(|p| utf8(p)));
    args
}

#[test]
fn quiet_silences_notes_and_summaries_and_verbose_adds_detail() {
    let (spam, ham) = few(5);
    // Too few messages to fit the calibration: a note says so.
    let db = Db::new();
    let normal = db.run(&train_args(&spam, &ham, None), None);
    assert_exit(&normal, 0, &["train"]);
    assert!(
        stderr(&normal).contains("calibration is not refitted"),
        "{}",
        stderr(&normal)
    );
    let db = Db::new();
    let quiet = db.run(&train_args(&spam, &ham, Some("-q")), None);
    assert_exit(&quiet, 0, &["train", "-q"]);
    assert_eq!(stderr(&quiet), "");
    // Issue 26, U6: train's summary is a summary like scan's: on stderr,
    // and -q silences it; stdout has no summaries.
    assert_eq!(String::from_utf8_lossy(&quiet.stdout), "");
    assert!(normal.stdout.is_empty());
    assert!(
        stderr(&normal).contains("\nread 10 messages"),
        "{}",
        stderr(&normal)
    );
    // Its JSON is a result: on stdout, -q or not.
    let db = Db::new();
    let mut args = train_args(&spam, &ham, Some("-q"));
    args.insert(2, "--json");
    let json = db.run(&args, None);
    assert_exit(&json, 0, &["-q", "train", "--json"]);
    assert!(String::from_utf8_lossy(&json.stdout).starts_with("{"));
    assert_eq!(stderr(&json), "");
    // learn of several messages and prune: summaries too.
    let mbox = db.path("two.mbox");
    let message = |n: usize| {
        format!(
            "From a@b Mon Jan  1 00:00:00 2024\nFrom: x{n}@example.org\nSubject: note {n}\n\nhello {n}\n"
        )
    };
    fs::write(&mbox, message(1) + "\n" + &message(2)).unwrap();
    for (args, summary) in [
        (
            &["learn", "--ham", utf8(&mbox)][..],
            "2 messages: 2 learned as ham",
        ),
        (&["prune"][..], "pruned 0 tokens"),
    ] {
        let loud = db.run(args, None);
        assert_exit(&loud, 0, args);
        assert!(stderr(&loud).starts_with(summary), "{}", stderr(&loud));
        assert!(loud.stdout.is_empty(), "{args:?}");
        let quiet: Vec<&str> = ["-q"].iter().copied().chain(args.iter().copied()).collect();
        let out = db.run(&quiet, None);
        assert_exit(&out, 0, &quiet);
        assert_eq!(
            (stderr(&out).as_str(), out.stdout.len()),
            ("", 0),
            "{quiet:?}"
        );
    }
    let db = Db::new();
    let verbose = db.run(&train_args(&spam, &ham, Some("--verbose")), None);
    assert_exit(&verbose, 0, &["train", "-v"]);
    assert!(
        stderr(&verbose).contains("read 10 messages"),
        "{}",
        stderr(&verbose)
    );

    // scan's summary on stderr is a note too; the results on stdout stay.
    let dir = utf8(&sample_spam()).to_string();
    let scan = db.run(&["scan", &dir], None);
    assert!(
        stderr(&scan).starts_with("scanned 24 messages"),
        "{}",
        stderr(&scan)
    );
    let quiet_scan = db.run(&["-q", "scan", &dir], None);
    assert_eq!(stderr(&quiet_scan), "");
    assert_eq!(quiet_scan.stdout.len(), scan.stdout.len());
    assert_eq!(quiet_scan.status.code(), scan.status.code());
    // An error still reaches stderr under -q.
    let missing = db.run(&["-q", "classify", "/nonexistent/mail"], None);
    assert!(!stderr(&missing).is_empty());
    // -q and -v together are a usage error.
    let both = db.run(&["-q", "-v", "stats"], None);
    assert_exit(&both, 2, &["-q", "-v"]);
}

/// Renders `svg` to PNG with `rsvg-convert`; returns (width, height,
/// RGBA pixels).
fn render(svg: &Path) -> (u32, u32, Vec<u8>) {
    let png = svg.with_extension("png");
    let out = Command::new("rsvg-convert")
        .arg(svg)
        .arg("-o")
        .arg(&png)
        .output()
        .unwrap();
    assert_exit(&out, 0, &["rsvg-convert", utf8(svg)]);
    let mut decoder = png::Decoder::new(std::io::BufReader::new(fs::File::open(&png).unwrap()));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::ALPHA);
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(frame.color_type, png::ColorType::Rgba, "{}", png.display());
    pixels.truncate(frame.buffer_size());
    (frame.width, frame.height, pixels)
}

#[test]
fn eval_plot_writes_a_roc_curve_and_a_reliability_diagram_that_render() {
    let db = Db::new();
    let dir = db.path("plots");
    let spam = utf8(&sample_spam()).to_string();
    let ham = utf8(&sample_ham()).to_string();
    let args = [
        "eval", "--spam", &spam, "--ham", &ham, "--k", "4", "--json", "--plot",
    ];
    let mut all = args.to_vec();
    all.push(utf8(&dir));
    let report = one_json(&db.ok(&all, None));

    // --json: confusion counts that add up, and one entry per fold.
    let confusion = &report["confusion"];
    let cells: u64 = keys(confusion)
        .iter()
        .map(|k| confusion[k].as_u64().unwrap())
        .sum();
    assert_eq!(cells, 48, "{confusion}");
    let ham_cells: u64 = ["ham_as_ham", "ham_as_unsure", "ham_as_spam"]
        .iter()
        .map(|k| confusion[k].as_u64().unwrap())
        .sum();
    assert_eq!(ham_cells, report["n_ham"].as_u64().unwrap());
    let folds = report["folds"].as_array().unwrap();
    assert_eq!(folds.len(), 4, "{report}");
    let mut n = 0;
    for (i, fold) in folds.iter().enumerate() {
        assert_eq!(fold["fold"], i);
        for key in ["n", "auc", "fpr_pct", "fnr_pct", "ece", "confusion"] {
            assert!(keys(fold).contains(&key), "fold lacks {key}: {fold}");
        }
        n += fold["n"].as_u64().unwrap();
    }
    assert_eq!(n, 48);
    // Each figure's 95% interval holds it, in the whole and in each fold.
    for r in std::iter::once(&report).chain(folds) {
        for key in [
            "one_minus_auc_pct",
            "fnr_at_fpr_0_1_pct",
            "fpr_pct",
            "unsure_pct",
        ] {
            let point = r[key].as_f64().unwrap();
            let bounds = &r["intervals"][key];
            let (low, high) = (bounds[0].as_f64().unwrap(), bounds[1].as_f64().unwrap());
            assert!(low <= point && point <= high, "{key}: {r}");
        }
    }
    let text = db.ok(&args[..args.len() - 2], None);
    assert!(
        text.contains("(1-AUC)%") && text.contains("(95%: "),
        "{text}"
    );

    if !crate::recipes::have("rsvg-convert") {
        return;
    }
    for name in ["roc.svg", "reliability.svg"] {
        let svg = dir.join(name);
        let text = fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg"), "{name}");
        let (w, h, pixels) = render(&svg);
        assert!(
            (400..=2000).contains(&w) && (300..=2000).contains(&h),
            "{name}: {w}x{h}"
        );
        let rgba: Vec<&[u8]> = pixels.chunks(4).collect();
        let inked = rgba
            .iter()
            .filter(|p| p[3] > 0 && p[..3] != [255, 255, 255])
            .count();
        // The data are drawn in pure blue; axes and text in black or grey.
        let blue = rgba
            .iter()
            .filter(|p| p[3] > 200 && p[2] > 200 && p[0] < 60 && p[1] < 60)
            .count();
        let total = rgba.len();
        assert!(
            inked * 50 > total,
            "{name}: only {inked} of {total} pixels drawn"
        );
        assert!(inked * 2 < total, "{name}: {inked} of {total} pixels drawn");
        assert!(blue > 500, "{name}: the curve has {blue} pixels");
    }
}

/// `explain` reads one message: an mbox of several is refused with one
/// line naming it (judged whole it would be a blob that is none of them),
/// while one message after an envelope line is explained.
#[test]
fn explain_refuses_an_mbox_of_several_messages() {
    let db = Db::new();
    db.train_sample();
    let files = sample_files();
    let envelope = b"From someone@example.com Mon Jan  1 00:00:00 2024\n";
    let mut two = Vec::new();
    for file in &files[..2] {
        two.extend_from_slice(envelope);
        two.extend_from_slice(&fs::read(file).unwrap());
        two.push(b'\n');
    }
    let mbox = db.path("two.mbox");
    fs::write(&mbox, &two).unwrap();
    let out = db.run(&["explain", utf8(&mbox)], None);
    assert_exit(&out, 2, &["explain", "two.mbox"]);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(utf8(&mbox)) && err.contains("several messages"),
        "{err}"
    );
    let one = db.path("one.mbox");
    fs::write(
        &one,
        [&envelope[..], &fs::read(&files[0]).unwrap()].concat(),
    )
    .unwrap();
    let why = one_json(&db.ok(&["explain", "--json", utf8(&one)], None));
    let direct = one_json(&db.ok(&["explain", "--json", utf8(&files[0])], None));
    assert_eq!(
        why["log_odds"], direct["log_odds"],
        "the message, not its envelope"
    );
}

/// `explain`'s parts add up to the log-odds it prints, the metadata shares
/// to the metadata evidence, and every command's log-odds is the log-odds
/// of the probability it prints.
#[test]
fn explain_adds_up_and_log_odds_match_the_probability() {
    let db = Db::new();
    db.train_sample();
    let stats = one_json(&db.ok(&["stats", "--json"], None));
    let rarer = ["ham_messages", "spam_messages"]
        .map(|k| stats[k].as_f64().unwrap_or_else(|| panic!("{k}: {stats}")))
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    for file in sample_files() {
        let file = utf8(&file);
        let why = one_json(&db.ok(&["explain", "--json", file], None));
        let num = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("a number: {v}"));
        // The evidence is the model's, scaled by its credibility.
        assert!(
            (num(&why["credibility"]) - rarer / (rarer + 5.0)).abs() < 1e-12,
            "{why}"
        );
        let views = why["views"].as_array().expect("views");
        // Three views, the metadata, the online discriminative view.
        assert_eq!(views.len(), 5, "{why}");
        let sum: f64 =
            views.iter().map(|v| num(&v["contribution"])).sum::<f64>() + num(&why["bias"]);
        assert!(
            (sum - num(&why["logit"])).abs() < 1e-9,
            "{file}: {sum} vs {why}"
        );
        assert!(
            (num(&why["logit"]) - num(&why["log_odds"])).abs() < 1e-9,
            "{why}"
        );
        for v in views {
            let product = num(&v["evidence"]) * num(&v["weight"]);
            assert!((product - num(&v["contribution"])).abs() < 1e-9, "{v}");
        }
        let meta = views
            .iter()
            .find(|v| v["input"] == "metadata")
            .expect("metadata part");
        let shares: f64 = why["metadata"]
            .as_array()
            .expect("metadata")
            .iter()
            .map(|m| num(&m[2]))
            .sum();
        assert!(
            (shares - num(&meta["evidence"])).abs() < 1e-9,
            "{file}: {shares} vs {meta}"
        );
        let p = num(&why["probability"]);
        let logit = num(&why["log_odds"]);
        let back = 1.0 / (1.0 + (-logit).exp());
        assert!(
            (back - p).abs() < 1e-12,
            "{file}: σ({logit}) = {back}, printed {p}"
        );
        let classified = one_json(&db.ok(&["classify", "--json", file], None));
        assert_eq!(classified["log_odds"], why["log_odds"], "{classified}");
        assert_eq!(
            classified["probability"], why["probability"],
            "{classified}"
        );
    }
}

/// A reader of stdout that went away ends the output quietly, as with any
/// Unix tool (`bayesmail stats | head -3`).
#[test]
fn a_closed_stdout_pipe_ends_the_output_quietly() {
    let db = Db::new();
    db.train_sample();
    let message = db.path("new.eml");
    fs::write(&message, crate::common::unseen(6, "X-Pipe: 1")).unwrap();
    let message = utf8(&message);
    for args in [
        &["stats"][..],
        &["stats", "--json"],
        &["man"],
        &["learn", "--spam", message],
        &["unlearn", message],
    ] {
        // A pipe whose reader is gone before the command writes anything.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args()).args(args);
        let out = cmd
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert!(
            !stderr(&out).contains("Broken pipe"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
}

/// `eval` refuses, with one line, what it cannot measure: a class with no
/// message, cross-validation over one fold, no view left to judge with.
#[test]
fn eval_refuses_what_it_cannot_measure() {
    let dir = tempfile::tempdir().unwrap();
    let (spam, ham) = (sample_spam(), sample_ham());
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let one_fold = dir.path().join("one.tsv");
    let only_spam = dir.path().join("spam.index");
    let (mut folds, mut index) = (String::new(), String::new());
    for (label, folder) in [("spam", &spam), ("ham", &ham)] {
        for entry in fs::read_dir(folder).unwrap() {
            let path = entry.unwrap().path();
            folds.push_str(&format!("0\t{label}\t{}\n", path.display()));
            if label == "spam" {
                index.push_str(&format!("spam {}\n", path.display()));
            }
        }
    }
    fs::write(&one_fold, folds).unwrap();
    fs::write(&only_spam, index).unwrap();
    let folders = ["--spam", utf8(&spam), "--ham", utf8(&ham)];
    let cases: [(Vec<&str>, &str); 5] = [
        (
            vec!["--folds", utf8(&one_fold)],
            "every message is in fold 0",
        ),
        (
            vec!["--spam", utf8(&spam), "--ham", utf8(&empty)],
            "no ham among",
        ),
        (vec!["--online", utf8(&only_spam)], "no ham among"),
        (
            [&folders[..], &["--views", "logistic", "--no-logistic"]].concat(),
            "no view left",
        ),
        (
            [&folders[..], &["--views", "metadata", "--meta-weight", "0"]].concat(),
            "no view left",
        ),
    ];
    for (args, why) in cases {
        let args = [&["eval"][..], &args].concat();
        let out = run(&args, None);
        assert_exit(&out, 2, &args);
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

/// A bad value in the configuration file is told on one line naming the
/// file and its table when a command uses it, and an option that overrides
/// it still wins.
#[test]
fn a_bad_value_in_the_config_file_is_named_and_an_option_still_wins() {
    let db = Db::new();
    db.train_sample();
    // The database's own config file, which `Db::run` names.
    let config = db.path("config.toml");
    let (spam, ham) = (sample_spam(), sample_ham());
    let message = sample_files()[0].clone();
    let with = |text: &str, args: &[&str], stdin: Option<&[u8]>| {
        fs::write(&config, text).unwrap();
        db.run(args, stdin)
    };
    let train = ["train", "-q", "--spam", utf8(&spam), "--ham", utf8(&ham)];
    let cases: [(&str, Vec<&str>, Vec<&str>, &str); 2] = [
        (
            "[model]\na = -1\n",
            train.to_vec(),
            [&train[..], &["--alpha", "0.1"]].concat(),
            "[model]: Beta pseudo-counts",
        ),
        (
            "[decision]\ncosts = \"1:0\"\n",
            vec!["classify", utf8(&message)],
            vec!["classify", "--costs", "10:1", utf8(&message)],
            "[decision] costs: ",
        ),
    ];
    for (text, bad, overridden, why) in cases {
        let out = with(text, &bad, None);
        assert_exit(&out, 2, &bad);
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("config file {}: {why}", utf8(&config))),
            "{err}"
        );
        assert_exit(&with(text, &overridden, None), 0, &overridden);
    }
    let raw = fs::read(&message).unwrap();
    let text = "[filter]\nmax_size = \"lots\"\n";
    let out = with(text, &["filter"], Some(&raw));
    assert_exit(&out, 0, &["filter", "with a bad max_size"]);
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(status.contains("reason=config-error"), "{status}");
    assert!(
        stderr(&out).contains(&format!(
            "config file {}: [filter] max_size: ",
            utf8(&config)
        )),
        "{}",
        stderr(&out)
    );
    let out = with(text, &["filter", "--max-size", "1M"], Some(&raw));
    assert_exit(&out, 0, &["filter", "--max-size 1M"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("reason=config-error"),
        "the option wins"
    );
}

/// A command whose stderr cannot be written (a full disk, a reader gone)
/// still does its work and exits with the status it would have had: the
/// lines it could not write are lost, never the outcome (no panic, 101).
#[test]
fn a_full_stderr_changes_no_exit_status() {
    let db = Db::new();
    db.train_sample();
    let missing = db.path("no-such-message");
    let missing = utf8(&missing);
    let cases: [&[&str]; 7] = [
        &["classify", missing],
        &["learn", "--spam", missing],
        &["train", "--spam", missing, "--ham", missing],
        &["scan", missing],
        &["explain", missing],
        &["tokens", missing],
        &["eval", "--spam", missing, "--ham", missing],
    ];
    for args in cases {
        let written = db.run(args, None);
        assert!(!written.stderr.is_empty(), "{args:?}: says nothing");
        let mut all = db.global_args();
        all.extend(args.iter().map(|a| a.to_string()));
        let full = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
            .args(&all)
            .stdout(std::process::Stdio::null())
            .stderr(
                fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .status()
            .unwrap();
        assert_ne!(
            written.status.code(),
            Some(101),
            "{args:?}: {}",
            stderr(&written)
        );
        assert_eq!(full.code(), written.status.code(), "{args:?} 2>/dev/full");
    }
}
