//! `bayesmail train`, `learn`, `unlearn` and `prune`: the write side.
//! Each is its arguments, one call of [`bayesmail::db::Database`]
//! (`train`, `learn`, `unlearn`, `prune`; `learn` and `unlearn` get their
//! messages from [`bayesmail::sources::messages_in_file`]) and what it
//! printed. Ctrl-C during `train` sets the flag the run watches
//! ([`bayesmail::db::Training::interrupt`]).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use super::{
    Context, LearnArgs, Outcome, PruneArgs, TrainArgs, UnlearnArgs, complain, detail, note, say,
};
use bayesmail::db::shared::SharedModel;
use bayesmail::db::{
    Calibration, Interrupted, Labelled, MIN_CALIBRATION_PER_CLASS, ModelAfter, Progress, Taught,
    TrainSummary, Training, missing_class,
};
use bayesmail::model::Label;
use bayesmail::sanitize::for_terminal;
use bayesmail::sources::{self, FileMessage, Skipped, planned_bytes};
use bayesmail::store::DEFAULT_JOURNAL_LIMIT;
use bayesmail::store::redis::Redis;

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
fn hint(ctx: &Context, verb: &str, err: bayesmail::db::Error) -> anyhow::Error {
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
fn learn_note(what: Option<&str>) {
    if let Some(what) = what {
        note!("bayesmail: note: {}", for_terminal(what));
    }
}

/// Says, once, that counts of `what` could not be taken back exactly.
fn inexact_note(what: &str, inexact: u64) {
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
fn duplicates_note(summary: &TrainSummary) -> String {
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
        Some(redis) => SharedModel::new(redis.store(None)?).train(&job, &on_progress),
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
        "pruned {removed} tokens seen in at most {} messages and unchanged for {} days; {left} \
         tokens left{}",
        args.max_count,
        args.min_age,
        no_model.map_or(String::new(), |why| format!("; no model: {why}"))
    );
    Ok(Outcome::AllOk)
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
        let model = bayesmail::db::shared::SharedModel::new(redis.store(user.as_deref())?);
        let whose = user.map_or(String::new(), |u| format!("user {u}: "));
        let (removed, left) = model.prune(args.max_count, args.min_age)?;
        note!(
            "{whose}pruned {removed} tokens seen in at most {} messages and unchanged for {} \
             days; {left} tokens left",
            args.max_count,
            args.min_age
        );
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

/// The messages of the file `learn` and `unlearn` are given (see
/// [`sources::messages_in_file`]); those that could not be read or parsed
/// are reported, and their number returned beside the others.
fn read_messages(path: &Path, command: &str) -> Result<(Vec<FileMessage>, usize)> {
    let (messages, failed) = match sources::messages_in_file(path) {
        Ok(read) => read,
        Err(sources::Error::Directory(_)) => bail!(
            "{} is a directory: `{command}` takes one message file, an mbox file or '-'; \
             to learn a folder of messages use `bayesmail train --spam DIR` or `--ham DIR` \
             (unlearning happens there too: a message moved to the other folder is moved \
             to the other label)",
            path.display()
        ),
        Err(err) => return Err(err.into()),
    };
    for err in &failed {
        complain!("bayesmail: {}", for_terminal(&err.to_string()));
    }
    Ok((messages, failed.len()))
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

/// Runs `change` (learning or unlearning `messages` messages in Redis,
/// after the check that Redis keeps what it is given) on a thread of its
/// own, given up on after `wait` seconds or the store's
/// [`Redis::change_bound`], whichever is longer, for each message: an
/// answer that trickles in for ever must not hold Dovecot's pipe program
/// or a cron job for ever. Whether a change given up on was stored is not
/// known, and making it again is safe: every change goes by the message's
/// identity.
fn within_store<T: Send + 'static>(
    redis: Redis,
    wait: u64,
    messages: usize,
    change: impl FnOnce(&Redis) -> Result<T> + Send + 'static,
) -> Result<T> {
    use bayesmail::store::redis::{Unanswered, within};
    let each = Duration::from_secs(wait).max(redis.change_bound());
    let bound = each.saturating_mul(u32::try_from(messages.max(1)).unwrap_or(u32::MAX));
    let at = redis.url().shown().to_string();
    let changed = within(bound, move || {
        if let Some(why) = redis.refuse_eviction()? {
            complain!("bayesmail: warning: {why}");
        }
        change(&redis)
    });
    match changed {
        Ok(result) => result,
        Err(Unanswered::Late) => bail!(
            "Redis at {at} gave no whole answer within {} ms: whether the change was stored is \
             not known, and making it again is safe",
            bound.as_millis()
        ),
        // The thread panicked (and said so on stderr), or none started.
        Err(Unanswered::Failed) => bail!("internal error while changing the counts in {at}"),
    }
}

/// The messages of `file` as they were read, for a learn that leaves them
/// for another writer: kept from standard input, read again from a file.
fn raw_again(file: &Path, kept: Vec<Option<Vec<u8>>>) -> Result<Vec<Vec<u8>>, String> {
    match kept.into_iter().collect::<Option<Vec<_>>>() {
        Some(raw) => Ok(raw),
        None => sources::raw_messages_in_file(file).map_err(|e| e.to_string()),
    }
}

/// Says that `count` messages were left for the writer that held the
/// database past `wait` seconds, to learn as `label` (`None`: unlearn),
/// and `failed` others of the file could not be read.
fn left(
    ctx: &Context,
    json: bool,
    wait: u64,
    label: Option<Label>,
    (count, failed): (usize, usize),
) -> Result<Outcome> {
    let action = match label {
        Some(label) => format!("queued as {label}"),
        None => "queued to be unlearned".to_string(),
    };
    if json {
        let mut line = serde_json::json!({ "action": "queued", "messages": count });
        if let Some(label) = label {
            line["label"] = serde_json::json!(label);
        }
        say(line)?;
    } else {
        say(match count {
            1 => action,
            n => format!("{n} messages {action}"),
        })?;
    }
    let pending = bayesmail::db::DbPaths::new(ctx.db.dir()).pending();
    note!(
        "bayesmail: note: another writer held {} past --wait ({wait} s): {} in {}, taken in \
         when that writer is done (bayesmail stats counts what waits)",
        ctx.location()?,
        if count == 1 {
            "the message waits"
        } else {
            "the messages wait"
        },
        for_terminal(&pending.display().to_string()),
    );
    Ok(if failed > 0 {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}

/// Why there is no model after `learn` or `unlearn`, if there is none.
fn no_model_now(model: ModelAfter) -> Option<String> {
    match model {
        ModelAfter::UpToDate => None,
        ModelAfter::Removed(totals) => missing_class(totals),
    }
}

pub(super) fn learn(ctx: &Context, args: &LearnArgs) -> Result<Outcome> {
    let label = if args.spam { Label::Spam } else { Label::Ham };
    let (messages, failed) = read_messages(&args.file, "learn")?;
    let names: Vec<String> = messages.iter().map(|m| m.id.clone()).collect();
    let (labelled, kept): (Vec<Labelled>, Vec<Option<Vec<u8>>>) = messages
        .into_iter()
        .map(|m| {
            let labelled = Labelled {
                features: m.features,
                identity: m.identity,
                label,
            };
            (labelled, m.raw)
        })
        .unzip();
    let count = labelled.len();
    let wait = Duration::from_secs(args.wait);
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let (summary, model) = match ctx.shared()? {
        Some(redis) => (
            within_store(redis, args.wait, count, move |redis| {
                Ok(SharedModel::new(redis.store(None)?).learn_all(&labelled)?)
            })?,
            ModelAfter::UpToDate,
        ),
        None => match ctx
            .database_to_change()?
            .with_origin(args.origin)
            .learn_or_leave(
                &labelled,
                || raw_again(&args.file, kept),
                wait,
                journal_limit(),
                *params.get(),
            )
            .map_err(|e| hint(ctx, "learn", e))?
        {
            Taught::Now(done) => done,
            Taught::Left => return left(ctx, args.json, args.wait, Some(label), (count, failed)),
        },
    };
    let no_model = no_model_now(model);
    let moved = match names.as_slice() {
        [one] => one.clone(),
        _ => format!("the messages moved to {label}"),
    };
    inexact_note(&moved, summary.inexact);
    learn_note(summary.log_failure.as_deref());
    learn_note(summary.rebuilt.as_deref());
    let action = if summary.relearned > 0 {
        "moved"
    } else if summary.learned > 0 {
        "learned"
    } else {
        "already-learned"
    };
    if args.json {
        #[derive(serde::Serialize)]
        struct Learned<'a> {
            action: &'a str,
            label: Label,
            #[serde(flatten)]
            summary: &'a TrainSummary,
            #[serde(skip_serializing_if = "Option::is_none")]
            no_model: Option<&'a str>,
        }
        let learned = Learned {
            action,
            label,
            summary: &summary,
            no_model: no_model.as_deref(),
        };
        say(serde_json::to_string(&learned)?)?;
    }
    // One message: what became of it is the result, on stdout. Several:
    // a summary of the run, on stderr.
    if !args.json && count == 1 {
        say(match action {
            "moved" => format!("moved to {label}"),
            "learned" => format!("learned as {label}"),
            _ => format!("already learned as {label}"),
        })?;
    } else if !args.json {
        note!(
            "{} messages: {} learned as {label}, {} moved to {label}, {} already learned as \
             {label}{}",
            count,
            summary.learned,
            summary.relearned,
            summary.unchanged,
            duplicates_note(&summary),
        );
    }
    if let (Some(why), false) = (&no_model, args.json) {
        note!("bayesmail: note: no model written yet: {why}");
    }
    detail!(
        "{}: {} ham, {} spam",
        ctx.location()?,
        summary.totals[0],
        summary.totals[1]
    );
    Ok(if failed > 0 {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}

pub(super) fn unlearn(ctx: &Context, args: &UnlearnArgs) -> Result<Outcome> {
    let (messages, mut failed) = read_messages(&args.file, "unlearn")?;
    let wait = Duration::from_secs(args.wait);
    let given: Vec<_> = messages.iter().map(|m| (&m.features, m.identity)).collect();
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let unlearned = match ctx.shared()? {
        Some(redis) => {
            let owned: Vec<_> = messages
                .iter()
                .map(|m| (m.features.clone(), m.identity))
                .collect();
            within_store(redis, args.wait, owned.len(), move |redis| {
                let given: Vec<_> = owned.iter().map(|(f, i)| (f, *i)).collect();
                Ok(SharedModel::new(redis.store(None)?).unlearn_all(&given))
            })?
        }
        None => {
            let kept: Vec<_> = messages.iter().map(|m| m.raw.clone()).collect();
            let raw = || raw_again(&args.file, kept);
            match ctx
                .database_to_change()?
                .with_origin(args.origin)
                .unlearn_or_leave(&given, raw, wait, journal_limit(), *params.get())
                .map_err(|e| hint(ctx, "unlearn", e))?
            {
                Taught::Now(done) => done,
                Taught::Left => {
                    return left(ctx, args.json, args.wait, None, (messages.len(), failed));
                }
            }
        }
    };
    let no_model = no_model_now(unlearned.model);
    let what = match messages.as_slice() {
        [one] => one.id.clone(),
        _ => "the messages unlearned".to_string(),
    };
    inexact_note(&what, unlearned.inexact);
    learn_note(unlearned.log_failure.as_deref());
    learn_note(unlearned.rebuilt.as_deref());
    let results = unlearned.results;
    let single = messages.len() == 1 && failed == 0;
    let mut lines = Vec::new();
    let mut first_error = None;
    for (FileMessage { id, .. }, result) in messages.iter().zip(results) {
        match result {
            Ok(was) => {
                lines.push(if args.json {
                    let mut line = serde_json::json!({ "action": "unlearned", "label": was });
                    if !single {
                        line["id"] = id.as_str().into();
                    }
                    line.to_string()
                } else if single {
                    format!("unlearned (was {was})")
                } else {
                    format!("{}: unlearned (was {was})", for_terminal(id))
                });
            }
            Err(err @ bayesmail::db::Error::NotLearned) if !single => {
                failed += 1;
                complain!("bayesmail: {}: {err}", for_terminal(id));
            }
            Err(err @ bayesmail::db::Error::NotLearned) => {
                first_error = Some(anyhow::anyhow!("{}: {err}", for_terminal(id)));
                break;
            }
            Err(err) => {
                first_error = Some(err.into());
                break;
            }
        }
    }
    if let Some(err) = first_error {
        return Err(err);
    }
    for line in lines {
        say(line)?;
    }
    if let Some(why) = no_model {
        if args.json {
            say(serde_json::json!({ "no_model": why }))?;
        } else {
            note!("bayesmail: note: no model now: {why}");
        }
    }
    Ok(if failed > 0 {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}
