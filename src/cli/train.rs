//! `bayesmail train` and `prune`: the write side over folders. Each is its
//! arguments, one call of [`bayesmail::db::Database`] and what it printed;
//! the notes `learn` and `unlearn` share ([`super::learn`]) are here. Ctrl-C
//! during `train` sets the flag the run watches
//! ([`bayesmail::db::Training::interrupt`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use super::{Context, Outcome, PruneArgs, TrainArgs, complain, detail, note};
use bayesmail::db::shared::SharedModel;
use bayesmail::db::{
    Calibration, Interrupted, MIN_CALIBRATION_PER_CLASS, ModelAfter, Progress, TrainSummary,
    Training, missing_class,
};
use bayesmail::sanitize::for_terminal;
use bayesmail::sources::{Skipped, planned_bytes};
use bayesmail::store::DEFAULT_JOURNAL_LIMIT;

/// Exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report).
const EXIT_INTERRUPTED: u8 = 130;

/// Set by the SIGINT handler; checked between batches while reading and
/// after the run is stored.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // A second Ctrl-C ends the process at once, as the user expects when
    // the first seems not to be heard.
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

/// While alive, Ctrl-C sets [`INTERRUPTED`] instead of ending the process,
/// so that `train` stops where nothing is half done and says what it kept.
struct CatchSigint;

impl CatchSigint {
    fn install() -> CatchSigint {
        INTERRUPTED.store(false, Ordering::SeqCst);
        // SAFETY: the handler only stores an atomic and calls signal().
        unsafe {
            libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
        }
        CatchSigint
    }
}

impl Drop for CatchSigint {
    fn drop(&mut self) {
        // SAFETY: restores the default disposition.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
    }
}

/// A progress bar on stderr (hidden unless stderr is a terminal) over
/// `total` units: position, total, percentage and time left.
fn progress_bar(total: u64, unit: &str, what: &str) -> ProgressBar {
    if !super::progress_allowed() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let template = if unit == "bytes" {
        "{msg:<10} [{wide_bar}] {bytes}/{total_bytes} {percent:>3}%, ETA {eta}"
    } else {
        "{msg:<10} [{wide_bar}] {pos}/{len} messages {percent:>3}%, ETA {eta}"
    };
    bar.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A spinner for a stage whose length is not known (calibration).
fn spinner(bar: &ProgressBar, what: &str) {
    if bar.is_hidden() {
        return;
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(what.to_string());
}

/// A writer's error, with what to do about it: `verb` is the command that
/// failed; a damaged journal is set aside by `train` only.
pub(super) fn hint(ctx: &Context, verb: &str, err: bayesmail::db::Error) -> anyhow::Error {
    use bayesmail::{db::Error, store};
    match &err {
        Error::NothingLearned(_) => anyhow::anyhow!("{err}, so there is nothing to {verb}"),
        Error::Store(store::Error::Corrupt { path, .. }) if *path == ctx.db.journal() => {
            anyhow::anyhow!(
                "{err}; nothing was changed. `bayesmail train` over your folders sets the damaged \
                 journal aside and rebuilds the model"
            )
        }
        _ => err.into(),
    }
}

/// Says `what` as a note, if there is one: that the learn log could not
/// be written (and whether the counts changed all the same), or that the
/// model was rebuilt from the counts.
pub(super) fn learn_note(what: Option<&str>) {
    if let Some(what) = what {
        note!("bayesmail: note: {}", for_terminal(what));
    }
}

/// Says, once, that counts of `what` could not be taken back exactly.
pub(super) fn inexact_note(what: &str, inexact: u64) {
    if inexact > 0 {
        note!(
            "bayesmail: note: {}: {inexact} count{} could not be taken back exactly (words \
             removed by prune, or counted by an older bayesmail) and {} set to \
             zero; the rest of the database is unchanged",
            for_terminal(what),
            if inexact == 1 { "" } else { "s" },
            if inexact == 1 { "was" } else { "were" },
        );
    }
}

/// ", N duplicates" when a run was given the same message more than once.
pub(super) fn duplicates_note(summary: &TrainSummary) -> String {
    if summary.duplicates > 0 {
        format!(", {} duplicates", summary.duplicates)
    } else {
        String::new()
    }
}

pub(super) fn train(ctx: &Context, args: &TrainArgs) -> Result<Outcome> {
    if args.spam.is_empty() && args.ham.is_empty() {
        bail!("nothing to learn: give --spam PATH... and/or --ham PATH...");
    }
    let (params, select) = ctx.params(&args.model)?;
    let start = Instant::now();
    // Ctrl-C from here on stops at a point where nothing is half done.
    let sigint = CatchSigint::install();
    let opts = args.mailbox.options();
    // Sizing the folders walks them once more: only for a bar that shows.
    let planned = if super::progress_allowed() {
        let all: Vec<_> = args.ham.iter().chain(&args.spam).cloned().collect();
        planned_bytes(&all, &opts)
    } else {
        0
    };
    let bar = progress_bar(planned, "bytes", "reading");
    let job = Training {
        ham: &args.ham,
        spam: &args.spam,
        options: opts,
        params,
        select,
        wait: Duration::from_secs(args.wait),
        interrupt: &INTERRUPTED,
    };
    let on_progress = |p: Progress<'_>| match p {
        Progress::SetAside(aside) => bar.suspend(|| {
            complain!(
                "bayesmail: {}: {}; set aside as {}: what learn and unlearn recorded there since \
                 the last train is not in the model until the folders are learned again",
                ctx.db.journal().display(),
                aside.reason,
                aside.path.display()
            )
        }),
        Progress::Skipped(skip) => {
            bar.suspend(|| complain!("bayesmail: {}", for_terminal(&skip.to_string())))
        }
        Progress::Unparsed(id, err) => {
            bar.suspend(|| complain!("bayesmail: {}: {err}", for_terminal(&id.to_string())))
        }
        Progress::Read { bytes, messages } => {
            bar.inc(bytes);
            bar.set_message(format!("reading {messages} messages"));
        }
        Progress::Calibrating => spinner(&bar, "calibrating"),
    };
    let trained = match ctx.shared_for_changes()? {
        Some(redis) => SharedModel::of(&redis, None)?.train(&job, &on_progress),
        None => ctx.database_to_change()?.train(&job, &on_progress),
    };
    let trained = match trained {
        Ok(trained) => trained,
        Err(err) => {
            bar.finish_and_clear();
            return Err(train_error(err));
        }
    };
    bar.finish_and_clear();
    let failed = trained.skipped.total() + trained.unparsed;
    detail!(
        "read {} messages ({} could not be read, {} not mail, {} not parsed)",
        trained.read,
        trained.skipped.unreadable,
        trained.skipped.not_mail,
        trained.unparsed,
    );
    if trained.interrupted == Some(Interrupted::Reading) {
        complain!(
            "bayesmail: interrupted while reading ({} messages read): nothing was stored; the \
             database and its model are as they were",
            trained.read
        );
        return Ok(Outcome::Exit(EXIT_INTERRUPTED));
    }
    match &trained.calibration {
        Calibration::Fitted { messages, params } => detail!(
            "calibration fitted on {messages} messages; model {}",
            serde_json::to_string(params)?
        ),
        Calibration::TooFew => note!(
            "bayesmail: note: fewer than {MIN_CALIBRATION_PER_CLASS} spam or ham messages in \
             this run: the calibration is not refitted (the previous one, if any, is kept)"
        ),
        Calibration::NotRun => {}
    }
    let summary = &trained.summary;
    inexact_note(
        "the messages that moved to the other label",
        summary.inexact,
    );
    if summary.merged > 0 {
        note!(
            "bayesmail: note: {} message{} an earlier version counted twice {} now counted once",
            summary.merged,
            if summary.merged == 1 { "" } else { "s" },
            if summary.merged == 1 { "is" } else { "are" },
        );
    }
    let missing = &trained.no_model;
    if trained.interrupted.is_some() {
        let model = match (missing, summary.snapshot_written) {
            (Some(why), _) => format!("no model was written: {why}"),
            (None, true) => "the model was written".to_string(),
            (None, false) => "the model was already up to date".to_string(),
        };
        complain!(
            "bayesmail: interrupted after reading: all {} messages were stored ({} ham, {} \
             spam in the database); {model}",
            trained.stored,
            summary.totals[0],
            summary.totals[1],
        );
        return Ok(Outcome::Exit(EXIT_INTERRUPTED));
    }
    drop(sigint);
    // The JSON summary is what was asked for: a result, on stdout. The
    // text one is a summary: on stderr, silenced by -q.
    if args.json {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        /// The store's summary and, when there were any, the files
        /// skipped as not mail.
        #[derive(serde::Serialize)]
        struct Json<'a> {
            #[serde(flatten)]
            summary: &'a TrainSummary,
            #[serde(skip_serializing_if = "is_zero")]
            not_mail: usize,
        }
        fn is_zero(n: &usize) -> bool {
            *n == 0
        }
        let json = Json {
            summary,
            not_mail: trained.skipped.not_mail,
        };
        serde_json::to_writer(&mut out, &json)?;
        writeln!(out)?;
        if let Some(why) = missing {
            note!("bayesmail: no model written: {why}");
        }
    } else {
        note!(
            "read {} messages in {:.1}s: {} learned, {} moved to the other label, {} already known{}{}",
            trained.read,
            start.elapsed().as_secs_f64(),
            summary.learned,
            summary.relearned,
            summary.unchanged,
            duplicates_note(summary),
            not_mail_note(trained.skipped),
        );
        note!(
            "{}: {} ham, {} spam{}",
            ctx.location()?,
            summary.totals[0],
            summary.totals[1],
            match (missing, summary.snapshot_written) {
                (Some(why), _) => format!("; no model written: {why}"),
                (None, true) => "; model written".to_string(),
                (None, false) => "; nothing changed".to_string(),
            }
        );
    }
    Ok(if failed > 0 {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}

/// A training run's error, with what to do about it where the library's
/// words cannot say (they name no command).
fn train_error(err: bayesmail::db::Error) -> anyhow::Error {
    use bayesmail::db::Error;
    match &err {
        Error::BadPaths(_) => anyhow::anyhow!("{err} and run train again"),
        Error::Conflicting(sources) => {
            const SHOWN: usize = 10;
            for source in sources.iter().take(SHOWN) {
                complain!(
                    "bayesmail: {} is given as spam and was given as ham too",
                    for_terminal(source)
                );
            }
            if sources.len() > SHOWN {
                complain!("bayesmail: … and {} more", sources.len() - SHOWN);
            }
            anyhow::anyhow!(
                "{err}. A message has one label: remove it from one side, or name the folders \
                 apart (a Maildir means its own cur/ and new/; its .Folders are read only when \
                 named or with --recursive)"
            )
        }
        _ => err.into(),
    }
}

/// `"; N skipped: not mail"` for a summary, or nothing.
pub(super) fn not_mail_note(skipped: Skipped) -> String {
    match skipped.not_mail {
        0 => String::new(),
        n => format!("; {n} skipped: not mail"),
    }
}

pub(super) fn prune(ctx: &Context, args: &PruneArgs) -> Result<Outcome> {
    if let Some(redis) = ctx.shared_for_changes()? {
        return prune_shared(&redis, args);
    }
    if args.max_memory.is_some() || args.user.is_some() || args.all_users {
        bail!("--max-memory, --user and --all-users are for a model in Redis (--store)");
    }
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let (removed, left, model) = ctx
        .database_to_change()?
        .prune(
            args.max_count,
            args.min_age,
            Duration::from_secs(args.wait),
            *params.get(),
        )
        .map_err(|e| hint(ctx, "prune", e))?;
    let no_model = no_model_now(model);
    note!(
        "{}; {left} tokens left{}",
        pruned(removed as u64, args),
        no_model.map_or(String::new(), |why| format!("; no model: {why}"))
    );
    Ok(Outcome::AllOk)
}

/// What `prune` removed, by its rule, in words.
fn pruned(removed: u64, args: &PruneArgs) -> String {
    let s = |n: u64| if n == 1 { "" } else { "s" };
    format!(
        "pruned {removed} token{} seen in at most {} message{} and unchanged for {} day{}",
        s(removed),
        args.max_count,
        s(args.max_count),
        args.min_age,
        s(u64::from(args.min_age))
    )
}

/// `prune --store`: the rule, then the cap if one is given, on each model
/// named.
fn prune_shared(redis: &bayesmail::store::redis::Redis, args: &PruneArgs) -> Result<Outcome> {
    let users: Vec<Option<String>> = if args.all_users {
        std::iter::once(None)
            .chain(redis.users()?.into_iter().map(Some))
            .collect()
    } else {
        // The name as serve knows it (without case).
        vec![
            args.user
                .as_deref()
                .map(bayesmail::serve::users::check_user)
                .transpose()?,
        ]
    };
    for user in users {
        let model = bayesmail::db::shared::SharedModel::of(redis, user.as_deref())?;
        let whose = user.map_or(String::new(), |u| format!("user {u}: "));
        let (removed, left) = model.prune(args.max_count, args.min_age)?;
        note!("{whose}{}; {left} tokens left", pruned(removed, args));
        let Some(max) = args.max_memory else {
            continue;
        };
        match model.cap(max)? {
            None => note!("{whose}another host is capping the model's memory now"),
            Some(c) if c.removed == 0 => note!(
                "{whose}{:.1} MB of Redis memory: within the cap of {:.1} MB",
                c.before as f64 / 1e6,
                max as f64 / 1e6
            ),
            Some(c) => note!(
                "{whose}removed {} more tokens, the least seen and oldest, to fit the cap of \
                 {:.1} MB: {:.1} MB of Redis memory before, {:.1} MB now",
                c.removed,
                max as f64 / 1e6,
                c.before as f64 / 1e6,
                c.after as f64 / 1e6
            ),
        }
    }
    Ok(Outcome::AllOk)
}

/// The journal bound of `learn`, `unlearn` and serve's learns:
/// [`DEFAULT_JOURNAL_LIMIT`], or `BAYESMAIL_JOURNAL_LIMIT` bytes (a knob
/// for tests that must make folds happen often, and for measuring).
pub(super) fn journal_limit() -> u64 {
    std::env::var("BAYESMAIL_JOURNAL_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_JOURNAL_LIMIT)
}

/// Why there is no model after `learn` or `unlearn`, if there is none.
pub(super) fn no_model_now(model: ModelAfter) -> Option<String> {
    match model {
        ModelAfter::UpToDate => None,
        ModelAfter::Removed(totals) => missing_class(totals),
    }
}
