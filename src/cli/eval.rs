//! `bayesmail eval`: measure the filter on a labelled corpus, in memory.

use std::io::{self, BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use rayon::prelude::*;

use bayesmail::eval::confusion::Confusion;
use bayesmail::eval::protocol::{self, Settings};
use bayesmail::eval::{Report, Scored};
use bayesmail::features::{Extractor, Features};
use bayesmail::fit::Dataset;
use bayesmail::mailbox;
use bayesmail::model::Label;

use super::{EvalArgs, Outcome};

/// One labelled message to evaluate on: a file to read, or bytes already
/// read from a mailbox.
struct Item {
    path: PathBuf,
    bytes: Option<Vec<u8>>,
    label: Label,
    fold: usize,
}

/// Reads `fold<TAB>label<TAB>path` lines; paths relative to `root`.
fn read_folds(file: &Path, root: &Path) -> Result<Vec<Item>> {
    let f = std::fs::File::open(file)
        .with_context(|| format!("opening fold file {}", file.display()))?;
    let mut items = Vec::new();
    for (n, line) in io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", file.display()))?;
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.splitn(3, '\t');
        let (Some(fold), Some(label), Some(path)) = (cols.next(), cols.next(), cols.next()) else {
            bail!(
                "{}:{}: expected fold<TAB>label<TAB>path",
                file.display(),
                n + 1
            );
        };
        let fold: usize = fold
            .trim()
            .parse()
            .with_context(|| format!("{}:{}: bad fold '{fold}'", file.display(), n + 1))?;
        let label: Label = label
            .parse()
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", file.display(), n + 1))?;
        items.push(Item {
            path: root.join(path),
            bytes: None,
            label,
            fold,
        });
    }
    Ok(items)
}

/// Reads a TREC index: `spam PATH` / `ham PATH` lines, paths relative to
/// the index file's folder.
fn read_index(file: &Path) -> Result<Vec<Item>> {
    let base = file.parent().unwrap_or(Path::new("."));
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading index {}", file.display()))?;
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((label, path)) = line.trim().split_once(char::is_whitespace) else {
            bail!(
                "{}:{}: expected 'spam PATH' or 'ham PATH'",
                file.display(),
                n + 1
            );
        };
        let label: Label = label
            .parse()
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", file.display(), n + 1))?;
        items.push(Item {
            path: base.join(path.trim()),
            bytes: None,
            label,
            fold: 0,
        });
    }
    Ok(items)
}

/// Labelled mailboxes: every message of `--spam` and `--ham` (any mailbox
/// kind), folds assigned round-robin within each class (stratified). Files
/// that do not look like mail are skipped and said, as `train` skips them,
/// so that what is evaluated is what would be trained.
fn read_folders(spam: &[PathBuf], ham: &[PathBuf], k: usize) -> Result<Vec<Item>> {
    let opts = mailbox::Options::default();
    let mut items = Vec::new();
    for (paths, label) in [(ham, Label::Ham), (spam, Label::Spam)] {
        let mut n = 0;
        for m in mailbox::open_all(paths, &opts) {
            let m = m.context("reading a labelled mailbox")?;
            if !bayesmail::message::looks_like_mail(&m.bytes) {
                super::read::report_not_mail(&m.id.to_string());
                continue;
            }
            items.push(Item {
                path: PathBuf::from(m.id.to_string()),
                bytes: Some(m.bytes),
                label,
                fold: n % k,
            });
            n += 1;
        }
    }
    Ok(items)
}

fn extract(items: &[Item]) -> Result<Vec<Features>> {
    items
        .par_iter()
        .map_init(Extractor::new, |ex, item| {
            let read;
            let raw = match &item.bytes {
                Some(b) => b,
                None => {
                    read = std::fs::read(&item.path)
                        .with_context(|| format!("reading {}", item.path.display()))?;
                    &read
                }
            };
            ex.extract(raw)
                .with_context(|| format!("parsing {}", item.path.display()))
        })
        .collect()
}

pub(super) fn run(args: &EvalArgs, settings: Settings) -> Result<Outcome> {
    let start = Instant::now();
    let items = if let Some(index) = &args.online {
        read_index(index)?
    } else if let Some(folds) = &args.folds {
        let root = args
            .root
            .clone()
            .or_else(|| folds.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        read_folds(folds, &root)?
    } else if !args.spam.is_empty() && !args.ham.is_empty() {
        read_folders(&args.spam, &args.ham, usize::from(args.k))?
    } else {
        bail!(
            "say what to evaluate on: --folds FILE, --online INDEX, or --spam PATH... with --ham PATH..."
        );
    };
    if items.is_empty() {
        bail!("no messages to evaluate on");
    }
    let features = extract(&items)?;
    let data = Dataset::new(features.into_iter().zip(items.iter().map(|i| i.label)));
    let scored = if args.online.is_some() {
        protocol::online(&data, &settings).map_err(anyhow::Error::msg)?
    } else {
        let folds: Vec<usize> = items.iter().map(|i| i.fold).collect();
        protocol::cross_validate(&data, &folds, &settings)
    };
    let seconds = start.elapsed().as_secs_f64();
    let report = Report::new(&scored, &settings.decider.costs, seconds);
    if let Some(path) = &args.scores {
        write_scores(path, &items, &scored)?;
    }
    if let Some(dir) = &args.plot {
        for path in super::plot::write(dir, &scored)? {
            super::detail!("wrote {}", path.display());
        }
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.json {
        let folds = if args.online.is_some() {
            Vec::new()
        } else {
            per_fold(&items, &scored, &settings)?
        };
        let mut json = serde_json::to_value(&report)?;
        if let Some(obj) = json.as_object_mut() {
            obj.insert(
                "confusion".into(),
                serde_json::to_value(Confusion::new(&scored))?,
            );
            obj.insert("folds".into(), serde_json::Value::Array(folds));
        }
        serde_json::to_writer(&mut out, &json)?;
        writeln!(out)?;
    } else {
        write_report(
            &mut out,
            &report,
            if args.online.is_some() {
                "online"
            } else {
                "cross-validation"
            },
        )?;
    }
    Ok(Outcome::AllOk)
}

/// The report's figures and the confusion counts of each fold, in fold
/// order (cross-validation only). Speed is left out: it is measured over
/// the whole run, not per fold.
fn per_fold(
    items: &[Item],
    scored: &[Scored],
    settings: &Settings,
) -> Result<Vec<serde_json::Value>> {
    let mut by_fold: std::collections::BTreeMap<usize, Vec<Scored>> = Default::default();
    for s in scored {
        by_fold
            .entry(items[s.index].fold)
            .or_default()
            .push(s.clone());
    }
    by_fold
        .into_iter()
        .map(|(fold, scored)| {
            let mut v = serde_json::to_value(Report::new(&scored, &settings.decider.costs, 0.0))?;
            if let Some(obj) = v.as_object_mut() {
                obj.remove("messages_per_second");
                obj.insert("fold".into(), fold.into());
                obj.insert(
                    "confusion".into(),
                    serde_json::to_value(Confusion::new(&scored))?,
                );
            }
            Ok(v)
        })
        .collect()
}

fn write_scores(path: &Path, items: &[Item], scored: &[Scored]) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::new(file);
    writeln!(w, "path\tlabel\tfold\tlog_odds\tprobability\tverdict")?;
    for s in scored {
        let item = &items[s.index];
        writeln!(
            w,
            "{}\t{}\t{}\t{:.6}\t{:.6e}\t{}",
            item.path.display(),
            item.label,
            item.fold,
            s.log_odds,
            s.probability,
            s.verdict
        )?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}

fn write_report(out: &mut impl Write, r: &Report, protocol: &str) -> io::Result<()> {
    writeln!(out, "protocol            {protocol}")?;
    writeln!(
        out,
        "messages            {} ({} ham, {} spam)",
        r.n, r.n_ham, r.n_spam
    )?;
    writeln!(out, "ROC AUC             {:.6}", r.auc)?;
    writeln!(out, "(1-AUC)%            {:.4}", r.one_minus_auc_pct)?;
    writeln!(out, "FNR at FPR 0.1%     {:.2}%", r.fnr_at_fpr_0_1_pct)?;
    writeln!(
        out,
        "cutoffs             ham ≤ {:.4} < unsure ≤ {:.4} < spam",
        r.ham_cutoff, r.spam_cutoff
    )?;
    writeln!(
        out,
        "FPR / FNR           {:.3}% / {:.3}%   (unsure {:.2}%)",
        r.fpr_pct, r.fnr_pct, r.unsure_pct
    )?;
    writeln!(out, "lam%                {:.4}", r.lam_pct)?;
    writeln!(out, "ECE (10 bins)       {:.4}", r.ece)?;
    writeln!(
        out,
        "expected cost       {:.4} per message",
        r.expected_cost
    )?;
    writeln!(out, "messages/second     {:.0}", r.messages_per_second)
}
