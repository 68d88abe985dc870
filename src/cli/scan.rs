//! `bayesmail scan`: classify whole mailboxes in parallel, print one result
//! per message (table, JSON lines or CSV) and a summary, and optionally move
//! or copy the spam into a Maildir. Its arguments, one call of
//! [`bayesmail::db::Reader::scan`], and what that call hands back, printed.

use std::io::{self, BufWriter, Write};
use std::time::Instant;

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use bayesmail::db::{Action, ActionError, Event, Judgment, ScanSummary, SpamAction};
use bayesmail::decision::{Doubt, Verdict};
use bayesmail::sanitize::{for_json, for_terminal};
use bayesmail::sources::planned_bytes;

use super::{Context, Outcome, ScanArgs, complain};

/// How per-message lines are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// verdict, probability, log-odds, id (and what was done with it).
    Table,
    /// One JSON object per line.
    Json,
    /// CSV with a header row.
    Csv,
}

/// The result line of one message.
#[derive(Serialize)]
pub(super) struct Line<'a> {
    id: &'a str,
    verdict: Verdict,
    /// Why an unsure verdict is unsure whatever its probability (JSON
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    probability: f64,
    log_odds: f64,
    known_tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<&'a str>,
}

impl<'a> Line<'a> {
    /// The line of a scored message, with no action taken.
    pub(super) fn new(id: &'a str, judgment: &Judgment) -> Line<'a> {
        let score = &judgment.score;
        Line {
            id,
            verdict: judgment.verdict,
            reason: judgment.doubt.map(Doubt::name),
            probability: score.probability,
            log_odds: score.log_odds,
            known_tokens: score.evidence.known_words(),
            action: None,
            to: None,
        }
    }
}

pub(super) fn scan(ctx: &Context, args: &ScanArgs) -> Result<Outcome> {
    let reader = ctx.reader()?;
    let decider = ctx.decider(&args.decision)?;
    let opts = args.mailbox.options();
    let action = spam_action(args)?;
    let format = if args.json {
        Format::Json
    } else if args.csv {
        Format::Csv
    } else {
        Format::Table
    };

    let progress = progress_bar(args);
    let started = Instant::now();
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if args.csv {
        writeln!(
            out,
            "id,verdict,probability,log_odds,known_tokens,action,to"
        )?;
    }
    let mut messages = 0usize;
    // A sweep that moves or copies goes on when its reader stops reading
    // (`… | head`): the lines are a report, the moves are the work, and a
    // run cut short would exit 0 with spam left in place.
    let acting = action.as_ref().is_some_and(|a| !a.dry_run());
    let mut closed = false;
    let (summary, result) = reader.scan(
        &args.paths,
        &opts,
        &decider,
        action.as_ref(),
        &mut |event| -> Result<()> {
            let s = match event {
                Event::Skipped(skip) => {
                    progress
                        .suspend(|| complain!("bayesmail: {}", for_terminal(&skip.to_string())));
                    return Ok(());
                }
                Event::Scanned(s) => s,
            };
            progress.inc(s.bytes as u64);
            messages += 1;
            if messages.is_multiple_of(256) {
                progress.set_message(format!(
                    "{messages} messages, {:.0} msg/s",
                    messages as f64 / started.elapsed().as_secs_f64().max(1e-9)
                ));
            }
            let id = s.id.to_string();
            let judgment = match s.judged {
                Ok(judgment) => judgment,
                Err(err) => {
                    progress.suspend(|| complain!("bayesmail: {}: {err}", for_terminal(&id)));
                    return Ok(());
                }
            };
            report_action(&id, s.action.as_ref(), action.as_ref(), &progress);
            let to = s
                .action
                .as_ref()
                .and_then(|a| a.to())
                .map(|p| p.display().to_string());
            let line = Line {
                action: s.action.as_ref().map(|a| a.name()),
                to: to.as_deref(),
                ..Line::new(&id, &judgment)
            };
            if closed {
                return Ok(());
            }
            match write_line(&mut out, format, &line) {
                Err(err) if acting && super::is_broken_pipe(&err) => {
                    closed = true;
                    Ok(())
                }
                written => written,
            }
        },
    );
    progress.finish_and_clear();
    let outcome = super::finish_stream(result, &mut out, summary.failures())?;
    print_summary(&summary, started, action.as_ref());
    Ok(outcome)
}

/// Says on stderr what went wrong with moving or copying a message, if
/// anything did.
fn report_action(
    id: &str,
    done: Option<&Action>,
    action: Option<&SpamAction>,
    progress: &ProgressBar,
) {
    let id = for_terminal(id);
    match done {
        Some(Action::NotMoved) => progress.suspend(|| {
            complain!("bayesmail: {id}: in an mbox file, not moved (use --copy-spam-to)")
        }),
        // Not lost and not moved: reported as what it is, so the user
        // knows the original is still where it was.
        Some(Action::Kept { why, .. }) => {
            progress.suspend(|| complain!("bayesmail: {id}: {}", for_terminal(why)))
        }
        Some(Action::Failed(why)) => {
            let verb = if action.is_some_and(|a| a.moving()) {
                "moving"
            } else {
                "copying"
            };
            progress.suspend(|| complain!("bayesmail: {id}: {verb} failed: {}", for_terminal(why)))
        }
        _ => {}
    }
}

/// Checks the move/copy options before anything is read.
fn spam_action(args: &ScanArgs) -> Result<Option<SpamAction>> {
    let (target, moving) = match (&args.move_spam_to, &args.copy_spam_to) {
        (Some(t), None) => (t, true),
        (None, Some(t)) => (t, false),
        (None, None) => {
            if args.dry_run {
                bail!("--dry-run needs --move-spam-to or --copy-spam-to");
            }
            return Ok(None);
        }
        (Some(_), Some(_)) => bail!("give --move-spam-to or --copy-spam-to, not both"),
    };
    match SpamAction::new(target, moving, args.dry_run, &args.paths) {
        Ok(action) => Ok(Some(action)),
        Err(err @ ActionError::MoveMbox(_)) => bail!("--move-spam-to {err}; use --copy-spam-to"),
        Err(err @ ActionError::MoveStdin) => bail!("--move-spam-to {err}"),
        Err(err) => match &err {
            ActionError::Foreign { why } => bail!("{err}{}", super::run_as(why)),
            _ => Err(err.into()),
        },
    }
}

/// Writes one result line.
pub(super) fn write_line(out: &mut impl Write, format: Format, line: &Line) -> Result<()> {
    match format {
        Format::Json => writeln!(out, "{}", for_json(&serde_json::to_string(line)?))?,
        Format::Csv => writeln!(
            out,
            "{},{},{:.6},{:.3},{},{},{}",
            csv_field(&for_terminal(line.id)),
            line.verdict,
            line.probability,
            line.log_odds,
            line.known_tokens,
            line.action.unwrap_or(""),
            csv_field(&for_terminal(line.to.unwrap_or("")))
        )?,
        Format::Table => {
            write!(
                out,
                "{:<6} {:.6} {:>9.3}  {}",
                line.verdict,
                line.probability,
                line.log_odds,
                for_terminal(line.id)
            )?;
            match (line.action, line.to) {
                (Some(a), Some(to)) => writeln!(out, "  [{a} to {}]", for_terminal(to))?,
                (Some(a), None) => writeln!(out, "  [{a}]")?,
                _ => writeln!(out)?,
            }
        }
    }
    Ok(())
}

/// An RFC 4180 field: quoted when it holds a comma, quote or line break.
/// Untrusted text is passed through [`for_terminal`] first (CSV is read by
/// people, in a terminal or a spreadsheet), which leaves no line breaks.
fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

fn print_summary(t: &ScanSummary, started: Instant, action: Option<&SpamAction>) {
    let secs = started.elapsed().as_secs_f64();
    let mut s = format!(
        "scanned {} messages in {secs:.2}s ({:.0} msg/s): {} ham, {} unsure, {} spam",
        t.messages,
        t.messages as f64 / secs.max(1e-9),
        t.verdicts[0],
        t.verdicts[1],
        t.verdicts[2]
    );
    if t.unparsed > 0 {
        s += &format!("; {} could not be parsed", t.unparsed);
    }
    if t.skipped.unreadable > 0 {
        s += &format!("; {} could not be read", t.skipped.unreadable);
    }
    s += &super::train::not_mail_note(t.skipped);
    if let Some(a) = action {
        let verb = match (a.moving(), a.dry_run()) {
            (true, false) => "moved",
            (false, false) => "copied",
            (true, true) => "would move",
            (false, true) => "would copy",
        };
        s += &format!(
            "; {verb} {} to {}",
            t.acted,
            for_terminal(&a.target().display().to_string())
        );
        if t.already > 0 {
            s += &format!(" ({} were already there)", t.already);
        }
        if t.kept > 0 {
            s += &format!(", {} copied but not removed (now in both places)", t.kept);
        }
        if t.action_failed > 0 {
            s += &format!(", {} failed", t.action_failed);
        }
        if t.in_target > 0 {
            s += &format!(
                "; {} messages already in the target left alone",
                t.in_target
            );
        }
    }
    super::note!("{s}");
}

/// A progress bar over the bytes to read, on stderr, only when stderr is a
/// terminal.
fn progress_bar(args: &ScanArgs) -> ProgressBar {
    if args.no_progress || !super::progress_allowed() {
        return ProgressBar::hidden();
    }
    let total = planned_bytes(&args.paths, &args.mailbox.options());
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{wide_bar} {percent:>3}% {msg}, ETA {eta}")
            .expect("the template is valid"),
    );
    bar
}
