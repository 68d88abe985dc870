//! `bayesmail eval`: measure the filter on a labelled corpus, in memory.
//! Its arguments, one call of [`bayesmail::eval::evaluate`], and the
//! report (text or JSON), the scores file and the plots it asks for.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};

use bayesmail::eval::protocol::Settings;
use bayesmail::eval::{Corpus, Intervals, Item, Report, Scored, evaluate};
use bayesmail::sanitize::for_terminal;

use super::{EvalArgs, Outcome, complain};

pub(super) fn run(args: &EvalArgs, settings: Settings) -> Result<Outcome> {
    let root;
    let corpus = if let Some(index) = &args.online {
        Corpus::Online(index)
    } else if let Some(folds) = &args.folds {
        root = args
            .root
            .clone()
            .or_else(|| folds.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        Corpus::Folds {
            file: folds,
            root: &root,
        }
    } else if !args.spam.is_empty() && !args.ham.is_empty() {
        Corpus::Folders {
            spam: &args.spam,
            ham: &args.ham,
            k: usize::from(args.k),
        }
    } else {
        bail!(
            "say what to evaluate on: --folds FILE, --online INDEX, or --spam PATH... with --ham PATH..."
        );
    };
    let evaluation = evaluate(corpus, &settings, &mut |skip| {
        complain!("bayesmail: {}", for_terminal(&skip.to_string()))
    })?;
    if evaluation.duplicates > 0 {
        super::note!(
            "bayesmail: note: {} copies of messages given more than once were left out (a copy \
             in a training fold would judge itself)",
            evaluation.duplicates
        );
    }
    let costs = &settings.decider.costs;
    let report = evaluation.report(costs);
    if let Some(path) = &args.scores {
        write_scores(path, &evaluation.items, &evaluation.scored)?;
    }
    if let Some(dir) = &args.plot {
        for path in super::plot::write(dir, &evaluation.scored)? {
            super::detail!("wrote {}", path.display());
        }
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.json {
        let mut folds = Vec::new();
        for fold in evaluation.folds(costs) {
            let mut v = serde_json::to_value(&fold.report)?;
            if let Some(obj) = v.as_object_mut() {
                obj.remove("messages_per_second");
                obj.insert("fold".into(), fold.fold.into());
                obj.insert("confusion".into(), serde_json::to_value(fold.confusion)?);
            }
            folds.push(v);
        }
        let mut json = serde_json::to_value(&report)?;
        if let Some(obj) = json.as_object_mut() {
            obj.insert(
                "confusion".into(),
                serde_json::to_value(bayesmail::eval::confusion::Confusion::new(
                    &evaluation.scored,
                ))?,
            );
            obj.insert("folds".into(), serde_json::Value::Array(folds));
            let mut windows = Vec::new();
            for w in evaluation.windows(costs) {
                let mut v = serde_json::to_value(&w.report)?;
                if let Some(obj) = v.as_object_mut() {
                    obj.remove("messages_per_second");
                    obj.insert("start".into(), w.start.into());
                    obj.insert("end".into(), w.end.into());
                }
                windows.push(v);
            }
            obj.insert("windows".into(), serde_json::Value::Array(windows));
        }
        serde_json::to_writer(&mut out, &json)?;
        writeln!(out)?;
    } else {
        write_report(
            &mut out,
            &report,
            if evaluation.online {
                "online"
            } else {
                "cross-validation"
            },
        )?;
        let windows = evaluation.windows(costs);
        if !windows.is_empty() {
            writeln!(
                out,
                "by window           (1-AUC)%  [95%]              FNR@0.1%   FPR      FNR      unsure  [95%]           ECE"
            )?;
        }
        for w in windows {
            let r = &w.report;
            let [auc, uns] = match &r.intervals {
                Some(i) => [
                    format!("[{}]", between(i.one_minus_auc_pct, 4, "")),
                    format!("[{}]", between(i.unsure_pct, 2, "%")),
                ],
                None => Default::default(),
            };
            writeln!(
                out,
                "  {:<17} {:>8.4}  {:<18} {:>7.2}%  {:>6.3}%  {:>6.3}%  {:>5.2}%  {:<15} {:.4}",
                format!("{}–{}", w.start + 1, w.end),
                r.one_minus_auc_pct,
                auc,
                r.fnr_at_fpr_0_1_pct,
                r.fpr_pct,
                r.fnr_pct,
                r.unsure_pct,
                uns,
                r.ece
            )?;
        }
    }
    Ok(Outcome::AllOk)
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
    let interval = |pick: fn(&Intervals) -> [f64; 2], digits: usize, unit: &str| {
        r.intervals
            .as_ref()
            .map(|i| format!("   (95%: {})", between(pick(i), digits, unit)))
            .unwrap_or_default()
    };
    writeln!(out, "ROC AUC             {:.6}", r.auc)?;
    writeln!(
        out,
        "(1-AUC)%            {:.4}{}",
        r.one_minus_auc_pct,
        interval(|i| i.one_minus_auc_pct, 4, "")
    )?;
    writeln!(
        out,
        "FNR at FPR 0.1%     {:.2}%{}",
        r.fnr_at_fpr_0_1_pct,
        interval(|i| i.fnr_at_fpr_0_1_pct, 2, "%")
    )?;
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
    if let Some(i) = &r.intervals {
        writeln!(
            out,
            "  95% intervals     FPR {}, FNR {}, unsure {}",
            between(i.fpr_pct, 3, "%"),
            between(i.fnr_pct, 3, "%"),
            between(i.unsure_pct, 2, "%")
        )?;
    }
    writeln!(out, "lam%                {:.4}", r.lam_pct)?;
    writeln!(out, "ECE (10 bins)       {:.4}", r.ece)?;
    writeln!(
        out,
        "expected cost       {:.4} per message",
        r.expected_cost
    )?;
    writeln!(out, "messages/second     {:.0}", r.messages_per_second)
}

/// An interval as `low–high` with `digits` decimals and `unit` after each
/// bound.
fn between([low, high]: [f64; 2], digits: usize, unit: &str) -> String {
    format!("{low:.digits$}{unit}–{high:.digits$}{unit}")
}
