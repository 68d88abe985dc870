//! `bayesmail train`, `learn` and `unlearn`: the write side.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use bayesmail::db::{Labelled, Trainer};
use bayesmail::eval::protocol::{DEFAULT_INNER_FOLDS, DEFAULT_REFIT_EVERY, Settings};
use bayesmail::features::Extractor;
use bayesmail::model::Label;
use bayesmail::sanitize::for_terminal;
use bayesmail::{mailbox, message};

use super::read::{for_each_batch, read_one};
use super::{Context, LearnArgs, Outcome, TrainArgs, UnlearnArgs, detail, note};

/// Fewer messages of a class than this: too few to fit calibration by
/// cross-validation; the previous calibration (or none) is kept.
const MIN_CALIBRATION_PER_CLASS: usize = 20;

fn spinner(what: &str) -> ProgressBar {
    if !super::progress_allowed() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {pos} messages ({per_sec}, {elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

pub(super) fn train(ctx: &Context, args: &TrainArgs) -> Result<Outcome> {
    if args.spam.is_empty() && args.ham.is_empty() {
        bail!("nothing to learn: give --spam PATH... and/or --ham PATH...");
    }
    let (params, pinned) = ctx.params(&args.model)?;
    let start = Instant::now();
    // Take the writer's lock first: fail fast, before reading any mail.
    let mut trainer = Trainer::open(&ctx.db, Duration::from_secs(args.wait))?;
    let opts = args.mailbox.options();
    let bar = spinner("reading");
    let mut messages: Vec<Labelled> = Vec::new();
    let mut unparsed = 0;
    let mut unread = 0;
    for (paths, label) in [(&args.ham, Label::Ham), (&args.spam, Label::Spam)] {
        unread += for_each_batch(paths, &opts, true, &mut |batch| {
            for e in batch {
                match (e.features, e.digest) {
                    (Ok(features), Some(digest)) => messages.push(Labelled {
                        features,
                        digest,
                        label,
                    }),
                    (Err(err), _) => {
                        unparsed += 1;
                        eprintln!("bayesmail: {}: {err}", for_terminal(&e.raw.id.to_string()));
                    }
                    (Ok(_), None) => unreachable!("digests were asked for"),
                }
                bar.inc(1);
            }
            Ok(())
        })?;
    }
    let failed = unread + unparsed;
    detail!(
        "read {} messages in {:.1}s ({} could not be read, {} not parsed)",
        messages.len(),
        start.elapsed().as_secs_f64(),
        unread,
        unparsed
    );
    bar.set_message("learning");
    bar.set_position(0);
    let mut summary = trainer.learn(&messages, &mut |n| bar.set_position(n as u64))?;
    let changed = summary.learned + summary.relearned > 0 || trainer.model_is_stale()?;
    if changed {
        bar.set_message("calibrating");
        let settings = Settings {
            select_strength: !pinned,
            params,
            costs: ctx.config.costs(None).map_err(anyhow::Error::msg)?,
            inner_folds: DEFAULT_INNER_FOLDS,
            min_known: ctx.config.min_known(),
            refit_every: DEFAULT_REFIT_EVERY,
        };
        let fitting = Instant::now();
        let (chosen, calibration) =
            Trainer::calibrate(&messages, &settings, MIN_CALIBRATION_PER_CLASS);
        match &calibration {
            Some((_, n)) => detail!(
                "calibration fitted on {n} messages in {:.1}s; model {}",
                fitting.elapsed().as_secs_f64(),
                serde_json::to_string(&chosen)?
            ),
            None => note!(
                "bayesmail: note: fewer than {MIN_CALIBRATION_PER_CLASS} spam or ham messages \
                 in this run: the calibration is not refitted (the previous one, if any, is kept)"
            ),
        }
        bar.set_message("writing the model");
        trainer.compile(chosen, calibration)?;
        summary.snapshot_written = true;
    }
    bar.finish_and_clear();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "read {} messages in {:.1}s: {} learned, {} moved to the other label, {} already known{}{}",
            messages.len(),
            start.elapsed().as_secs_f64(),
            summary.learned,
            summary.relearned,
            summary.unchanged,
            if summary.duplicates > 0 {
                format!(", {} duplicates", summary.duplicates)
            } else {
                String::new()
            },
            if summary.conflicting > 0 {
                format!(
                    ", {} given as both spam and ham (left alone)",
                    summary.conflicting
                )
            } else {
                String::new()
            },
        )?;
        writeln!(
            out,
            "database {}: {} ham, {} spam{}",
            ctx.db.dir().display(),
            summary.totals[0],
            summary.totals[1],
            if summary.snapshot_written {
                "; model written"
            } else {
                "; nothing changed"
            }
        )?;
    }
    Ok(if failed > 0 {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}

/// Reads the one message `learn` and `unlearn` are given the way `train`
/// reads the same file in a folder, so that both compute the same digest: a
/// file that starts with a `From ` line is an mbox (the envelope line left
/// out, `>From ` escaping undone, the blank line an mbox writer adds at the
/// end dropped). Standard input and anything that is not a regular file are
/// taken verbatim, as a delivery agent passes a message on; `train` reads
/// the mbox it was delivered into back to those same bytes.
fn read_message(path: &Path) -> Result<Vec<u8>> {
    let regular = path.as_os_str() != "-" && std::fs::metadata(path).is_ok_and(|m| m.is_file());
    if !regular {
        return read_one(path);
    }
    let mut messages = mailbox::open(path, &mailbox::Options::default())
        .with_context(|| format!("reading {}", path.display()))?;
    let raw = match messages.next() {
        Some(message) => message.with_context(|| format!("reading {}", path.display()))?,
        None => bail!("empty message: {}", path.display()),
    };
    if messages.next().is_some() {
        bail!(
            "{} holds more than one message (it starts with a \"From \" line, so it is read \
             as an mbox): give one message, or use `bayesmail train` for a mailbox",
            path.display()
        );
    }
    if raw.bytes.iter().all(u8::is_ascii_whitespace) {
        bail!("empty message: {}", path.display());
    }
    Ok(raw.bytes)
}

fn one_message(file: &Path) -> Result<Labelled> {
    let raw = read_message(file)?;
    let features = Extractor::new()
        .extract(&raw)
        .with_context(|| format!("parsing {}", file.display()))?;
    Ok(Labelled {
        features,
        digest: message::digest(&raw),
        label: Label::Ham,
    })
}

pub(super) fn learn(ctx: &Context, args: &LearnArgs) -> Result<Outcome> {
    let mut msg = one_message(&args.file)?;
    msg.label = if args.spam { Label::Spam } else { Label::Ham };
    let mut trainer = Trainer::open(&ctx.db, Duration::from_secs(args.wait))?;
    let summary = trainer.learn(std::slice::from_ref(&msg), &mut |_| {})?;
    if summary.learned + summary.relearned > 0 || trainer.model_is_stale()? {
        let (params, _) = ctx.params(&super::ModelArgs::default())?;
        trainer.compile(*params.get(), None)?;
    }
    let (action, what) = if summary.relearned > 0 {
        ("moved", format!("moved to {}", msg.label))
    } else if summary.learned > 0 {
        ("learned", format!("learned as {}", msg.label))
    } else {
        (
            "already-learned",
            format!("already learned as {}", msg.label),
        )
    };
    if args.json {
        #[derive(serde::Serialize)]
        struct Learned<'a> {
            action: &'a str,
            label: Label,
            #[serde(flatten)]
            summary: &'a bayesmail::db::TrainSummary,
        }
        let learned = Learned {
            action,
            label: msg.label,
            summary: &summary,
        };
        println!("{}", serde_json::to_string(&learned)?);
    } else {
        println!("{what}");
    }
    detail!(
        "database {}: {} ham, {} spam",
        ctx.db.dir().display(),
        summary.totals[0],
        summary.totals[1]
    );
    Ok(Outcome::AllOk)
}

pub(super) fn unlearn(ctx: &Context, args: &UnlearnArgs) -> Result<Outcome> {
    let msg = one_message(&args.file)?;
    let mut trainer = Trainer::open(&ctx.db, Duration::from_secs(args.wait))?;
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let result = trainer.unlearn(&msg.features, msg.digest);
    // Compile after a change, and also when an earlier run was killed
    // between storing and compiling, so the model never lags the counts.
    if result.is_ok() || trainer.model_is_stale()? {
        trainer.compile(*params.get(), None)?;
    }
    let label = result?;
    if args.json {
        let out = serde_json::json!({ "action": "unlearned", "label": label });
        println!("{out}");
    } else {
        println!("unlearned (was {label})");
    }
    Ok(Outcome::AllOk)
}
