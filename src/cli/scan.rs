//! `bayesmail scan`: classify whole mailboxes in parallel, print one result
//! per message (table, JSON lines or CSV) and a summary, and optionally move
//! or copy the spam into a Maildir.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use bayesmail::db::{Classifier, Score};
use bayesmail::decision::Decider;
use bayesmail::decision::Verdict;
use bayesmail::features::Extractor;
use bayesmail::mailbox::{self, Delivered, MailboxKind, Maildir, MessageId, MoveError, RawMessage};
use bayesmail::message;
use bayesmail::sanitize::{for_json, for_terminal};

use super::read::{Skipped, finish_stream, for_each_mapped, planned_bytes};
use super::{Context, Outcome, ScanArgs};

/// One message classified (or why it could not be).
pub(super) struct Scanned {
    pub raw: RawMessage,
    pub score: Result<(Score, Verdict), message::Error>,
}

/// Extracts and scores one message; runs on the rayon workers of
/// [`for_each_mapped`]. Shared by `scan` and `classify`.
pub(super) fn scorer<'a>(
    classifier: &'a Classifier,
    decider: &'a Decider,
) -> impl Fn(&mut Extractor, RawMessage) -> Scanned + Sync + 'a {
    move |ex, raw| {
        let score = ex.extract(&raw.bytes).map(|features| {
            let j = classifier.judge(&features, decider);
            (j.score, j.verdict)
        });
        Scanned { raw, score }
    }
}

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

/// Where spam goes, and how.
struct SpamAction {
    maildir: Maildir,
    moving: bool,
    dry_run: bool,
    /// The target's canonical path, if it exists.
    canonical: Option<std::path::PathBuf>,
}

impl SpamAction {
    /// Whether `id` is a message of the target Maildir itself (reached with
    /// --recursive, or by naming a folder that holds the target). Such a
    /// message is already where spam goes; scanning it would also see the
    /// messages this run moves in, so a real run would count more than its
    /// --dry-run.
    fn holds(&self, id: &MessageId) -> bool {
        let (Some(target), MessageId::Path(path)) = (&self.canonical, id) else {
            return false;
        };
        path.parent()
            .and_then(Path::parent)
            .and_then(|maildir| std::fs::canonicalize(maildir).ok())
            .is_some_and(|maildir| maildir == *target)
    }
}

/// The result line of one message.
#[derive(Serialize)]
pub(super) struct Line<'a> {
    id: &'a str,
    verdict: Verdict,
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
    pub(super) fn new(id: &'a str, score: &Score, verdict: Verdict) -> Line<'a> {
        Line {
            id,
            verdict,
            probability: score.probability,
            log_odds: score.log_odds,
            known_tokens: score.evidence.known_words(),
            action: None,
            to: None,
        }
    }
}

#[derive(Default)]
struct Tally {
    messages: usize,
    verdicts: [usize; 3],
    unparsed: usize,
    acted: usize,
    already: usize,
    action_failed: usize,
    /// Moved messages copied into the target whose original could not be
    /// removed: in both places now.
    kept: usize,
    /// Messages read from the target Maildir itself, left alone.
    in_target: usize,
}

pub(super) fn scan(ctx: &Context, args: &ScanArgs) -> Result<Outcome> {
    let reader = ctx.reader()?;
    let classifier = reader.classifier();
    let decider: Decider = ctx.decider(&args.decision)?;
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
    let mut tally = Tally::default();
    let score = scorer(classifier, &decider);
    let result = for_each_mapped(&args.paths, &opts, &score, &mut |batch| {
        // Nothing judged with a model changed under us is printed or acted on.
        classifier.intact()?;
        for s in batch {
            progress.inc(s.raw.bytes.len() as u64);
            if action.as_ref().is_some_and(|a| a.holds(&s.raw.id)) {
                tally.in_target += 1;
                continue;
            }
            tally.messages += 1;
            let id = s.raw.id.to_string();
            let (score, verdict) = match s.score {
                Ok(scored) => scored,
                Err(err) => {
                    tally.unparsed += 1;
                    progress.suspend(|| eprintln!("bayesmail: {}: {err}", for_terminal(&id)));
                    continue;
                }
            };
            tally.verdicts[verdict_index(verdict)] += 1;
            let (act, to) = match (&action, verdict) {
                (Some(a), Verdict::Spam) => act_on(a, &s.raw, &mut tally, &progress),
                _ => (None, None),
            };
            let line = Line {
                action: act,
                to: to.as_deref(),
                ..Line::new(&id, &score, verdict)
            };
            write_line(&mut out, format, &line)?;
        }
        progress.set_message(format!(
            "{} messages, {:.0} msg/s",
            tally.messages,
            tally.messages as f64 / started.elapsed().as_secs_f64().max(1e-9)
        ));
        Ok(())
    });
    progress.finish_and_clear();
    let skipped = result.as_ref().map_or(Skipped::default(), |s| *s);
    let outcome = finish_stream(
        result,
        &mut out,
        tally.unparsed + tally.action_failed + tally.kept,
    )?;
    summary(&tally, skipped, started, action.as_ref());
    Ok(outcome)
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
    if moving {
        for path in &args.paths {
            if path.as_os_str() == "-" {
                bail!("--move-spam-to cannot move a message read from standard input");
            }
            if mailbox::detect(path).ok() == Some(MailboxKind::Mbox) {
                bail!(
                    "--move-spam-to cannot move messages out of an mbox file ({}); use --copy-spam-to",
                    path.display()
                );
            }
        }
    }
    let maildir = if args.dry_run {
        Maildir::at(target)
    } else {
        Maildir::create(target)
            .with_context(|| format!("preparing the Maildir {}", target.display()))?
    };
    Ok(Some(SpamAction {
        canonical: std::fs::canonicalize(target).ok(),
        maildir,
        moving,
        dry_run: args.dry_run,
    }))
}

/// Moves or copies one spam message; returns the action's name and where
/// the message went, or reports why not.
fn act_on(
    a: &SpamAction,
    raw: &RawMessage,
    tally: &mut Tally,
    progress: &ProgressBar,
) -> (Option<&'static str>, Option<String>) {
    let source = match &raw.id {
        MessageId::Path(p) => Some(p.as_path()),
        _ => None,
    };
    if a.moving && source.is_none() {
        tally.action_failed += 1;
        progress.suspend(|| {
            eprintln!(
                "bayesmail: {}: in an mbox file, not moved (use --copy-spam-to)",
                for_terminal(&raw.id.to_string())
            )
        });
        return (Some("not-moved"), None);
    }
    if a.dry_run {
        tally.acted += 1;
        let to = a.maildir.target(source, &raw.bytes);
        let name = if a.moving { "would-move" } else { "would-copy" };
        return (Some(name), Some(to.display().to_string()));
    }
    let done = match source {
        Some(src) if a.moving => a.maildir.move_in(src),
        _ => a
            .maildir
            .copy_in(source, &raw.bytes)
            .map_err(MoveError::from),
    };
    match done {
        Ok(Delivered::New(to)) => {
            tally.acted += 1;
            let name = if a.moving { "moved" } else { "copied" };
            (Some(name), Some(to.display().to_string()))
        }
        Ok(Delivered::Already(to)) => {
            tally.already += 1;
            (Some("already-there"), Some(to.display().to_string()))
        }
        Err(err) => {
            let id = for_terminal(&raw.id.to_string()).into_owned();
            let why = for_terminal(&err.to_string()).into_owned();
            if let MoveError::SourceKept { target, .. } = &err {
                // Not lost and not moved: reported as what it is, so the
                // user knows the original is still where it was.
                tally.kept += 1;
                progress.suspend(|| eprintln!("bayesmail: {id}: {why}"));
                return (
                    Some("copied-not-removed"),
                    Some(target.display().to_string()),
                );
            }
            tally.action_failed += 1;
            let verb = if a.moving { "moving" } else { "copying" };
            progress.suspend(|| eprintln!("bayesmail: {id}: {verb} failed: {why}"));
            (Some("failed"), None)
        }
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

fn verdict_index(v: Verdict) -> usize {
    match v {
        Verdict::Ham => 0,
        Verdict::Unsure => 1,
        Verdict::Spam => 2,
    }
}

fn summary(t: &Tally, skipped: Skipped, started: Instant, action: Option<&SpamAction>) {
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
    s += &skipped.note();
    if let Some(a) = action {
        let verb = match (a.moving, a.dry_run) {
            (true, false) => "moved",
            (false, false) => "copied",
            (true, true) => "would move",
            (false, true) => "would copy",
        };
        s += &format!(
            "; {verb} {} to {}",
            t.acted,
            for_terminal(&a.maildir.root().display().to_string())
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
