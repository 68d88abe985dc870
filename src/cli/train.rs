//! `bayesmail train`, `learn` and `unlearn`: the write side.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use bayesmail::db::Run;
use bayesmail::db::{Labelled, ModelAfter, TrainSummary};
use bayesmail::features::Extractor;
use bayesmail::fit::{DEFAULT_INNER_FOLDS, Settings};
use bayesmail::mailbox::RawMessage;
use bayesmail::message::Identity;
use bayesmail::model::Label;
use bayesmail::sanitize::for_terminal;
use bayesmail::store::DEFAULT_JOURNAL_LIMIT;
use bayesmail::{mailbox, message};

use super::read::{NOT_MAIL, Skipped, for_each_mapped, planned_bytes, read_one};
use super::{Context, LearnArgs, Outcome, PruneArgs, TrainArgs, UnlearnArgs, detail, note};

/// Fewer messages of a class than this: too few to fit calibration by
/// cross-validation; the previous calibration (or none) is kept.
const MIN_CALIBRATION_PER_CLASS: usize = 20;

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

    fn interrupted(&self) -> bool {
        INTERRUPTED.load(Ordering::SeqCst)
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

/// The error a stage returns when Ctrl-C stopped it.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
struct Interrupted;

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

/// Checks each path named on the command line before anything is read or
/// written, so that a typo stops the run instead of training a model on
/// one side only.
fn check_paths(args: &TrainArgs) -> Result<()> {
    let mut bad = Vec::new();
    for path in args.spam.iter().chain(&args.ham) {
        if let Err(err) = mailbox::detect(path) {
            bad.push(for_terminal(&err.to_string()).into_owned());
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    bail!(
        "{}\nnothing was learned and no model was written: fix the path{} and run train again",
        bad.join("\n"),
        if bad.len() > 1 { "s" } else { "" }
    )
}

/// Fails, naming them, if any message was given with both labels: one run
/// cannot say which label the user meant, so it changes nothing.
fn refuse_conflicts(conflicts: &[String]) -> Result<()> {
    if conflicts.is_empty() {
        return Ok(());
    }
    const SHOWN: usize = 10;
    for source in conflicts.iter().take(SHOWN) {
        eprintln!(
            "bayesmail: {} is given as spam and was given as ham too",
            for_terminal(source)
        );
    }
    if conflicts.len() > SHOWN {
        eprintln!("bayesmail: … and {} more", conflicts.len() - SHOWN);
    }
    bail!(
        "{} message{} given as both spam and ham; nothing was learned and no model was written. \
         A message has one label: remove it from one side, or name the folders apart (a Maildir \
         means its own cur/ and new/; its .Folders are read only when named or with --recursive)",
        conflicts.len(),
        if conflicts.len() == 1 { " is" } else { "s are" }
    )
}

/// Why no model can be written for these counts, if it cannot: a model
/// needs at least one message of each class.
fn missing_class(totals: [u64; 2]) -> Option<String> {
    let [ham, spam] = totals;
    match (ham, spam) {
        (0, 0) => Some("the database holds no messages".to_string()),
        (0, n) => Some(format!(
            "the database holds {n} spam and no ham; learn some ham (--ham)"
        )),
        (n, 0) => Some(format!(
            "the database holds {n} ham and no spam; learn some spam (--spam)"
        )),
        _ => None,
    }
}

/// A writer's error, with what to do when it is a damaged journal: no
/// writer but `train` touches one.
fn hint(ctx: &Context, err: bayesmail::db::Error) -> anyhow::Error {
    use bayesmail::{db::Error, store};
    match &err {
        Error::Store(store::Error::Corrupt { path, .. }) if *path == ctx.db.journal() => {
            anyhow::anyhow!(
                "{err}; nothing was changed. `bayesmail train` over your folders sets the damaged \
                 journal aside and rebuilds the model"
            )
        }
        _ => err.into(),
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

/// What a training run keeps of a message it read.
struct ReadForTraining {
    id: mailbox::MessageId,
    /// Its size.
    bytes: usize,
    /// Its features and identity.
    read: Result<(bayesmail::features::Features, Identity), message::Error>,
}

/// Extracts what training needs of `raw` on a reading worker, which also
/// frees the message's bytes: the thread that counts has enough to do.
fn read_for_training(ex: &mut Extractor, raw: RawMessage) -> ReadForTraining {
    ReadForTraining {
        read: ex.read(&raw.bytes),
        bytes: raw.bytes.len(),
        id: raw.id,
    }
}

pub(super) fn train(ctx: &Context, args: &TrainArgs) -> Result<Outcome> {
    if args.spam.is_empty() && args.ham.is_empty() {
        bail!("nothing to learn: give --spam PATH... and/or --ham PATH...");
    }
    let (params, pinned) = ctx.params(&args.model)?;
    check_paths(args)?;
    let start = Instant::now();
    // Ctrl-C from here on stops at a point where nothing is half done.
    let sigint = CatchSigint::install();
    // Take the writer's lock first: fail fast, before reading any mail.
    let (mut trainer, set_aside) = ctx
        .database()
        .rebuilding_writer(Duration::from_secs(args.wait))?;
    if let Some(aside) = set_aside {
        eprintln!(
            "bayesmail: {}: {}; set aside as {}: what learn and unlearn recorded there since \
             the last train is not in the model until the folders are learned again",
            ctx.db.journal().display(),
            aside.reason,
            aside.path.display()
        );
    }
    let opts = args.mailbox.options();

    let all_paths: Vec<_> = args.ham.iter().chain(&args.spam).cloned().collect();
    // Sizing the folders walks them once more: only for a bar that shows.
    let planned = if super::progress_allowed() {
        planned_bytes(&all_paths, &opts)
    } else {
        0
    };
    let bar = progress_bar(planned, "bytes", "reading");
    // Each message is counted as it is read and its features dropped
    // (unless sampled for calibration): memory follows the vocabulary, not
    // the number of messages.
    let mut run = Run::new();
    let mut read_count = 0;
    let mut unparsed = 0;
    let mut skipped = Skipped::default();
    let mut interrupted_reading = false;
    for (paths, label) in [(&args.ham, Label::Ham), (&args.spam, Label::Spam)] {
        let result = for_each_mapped(paths, &opts, &read_for_training, &mut |batch| {
            for e in batch {
                bar.inc(e.bytes as u64);
                match e.read {
                    Ok((features, identity)) => {
                        read_count += 1;
                        let message = Labelled {
                            features,
                            identity,
                            label,
                        };
                        trainer.add_to_run(&mut run, &message, &e.id)?;
                    }
                    Err(err) => {
                        unparsed += 1;
                        bar.suspend(|| {
                            eprintln!("bayesmail: {}: {err}", for_terminal(&e.id.to_string()))
                        });
                    }
                }
            }
            bar.set_message(format!("reading {read_count} messages"));
            if sigint.interrupted() {
                return Err(Interrupted.into());
            }
            Ok(())
        });
        match result {
            Ok(s) => {
                skipped.unreadable += s.unreadable;
                skipped.not_mail += s.not_mail;
            }
            Err(err) if err.is::<Interrupted>() => {
                interrupted_reading = true;
                break;
            }
            Err(err) => return Err(err),
        }
    }
    bar.finish_and_clear();
    let failed = skipped.total() + unparsed;
    detail!(
        "read {read_count} messages in {:.1}s ({} could not be read, {} not mail, {unparsed} not \
         parsed)",
        start.elapsed().as_secs_f64(),
        skipped.unreadable,
        skipped.not_mail
    );
    if interrupted_reading {
        eprintln!(
            "bayesmail: interrupted while reading ({read_count} messages read): nothing was \
             stored; the database and its model are as they were"
        );
        return Ok(Outcome::Exit(EXIT_INTERRUPTED));
    }
    refuse_conflicts(run.conflicts())?;
    bayesmail::db::release_freed_memory();

    // Everything after reading is short and finishes even after Ctrl-C.
    let calibration = if run.is_empty() {
        None
    } else {
        let shown = progress_bar(0, "messages", "");
        spinner(&shown, "calibrating");
        let settings = Settings {
            select_strength: !pinned,
            params,
            inner_folds: DEFAULT_INNER_FOLDS,
            inputs: Default::default(),
        };
        let fitting = Instant::now();
        let result = run.calibrate(&settings, MIN_CALIBRATION_PER_CLASS);
        shown.finish_and_clear();
        match &result.1 {
            Some((_, n)) => detail!(
                "calibration fitted on {n} messages in {:.1}s; model {}",
                fitting.elapsed().as_secs_f64(),
                serde_json::to_string(&result.0)?
            ),
            None => note!(
                "bayesmail: note: fewer than {MIN_CALIBRATION_PER_CLASS} spam or ham \
                 messages in this run: the calibration is not refitted (the previous one, if \
                 any, is kept)"
            ),
        }
        Some(result)
    };
    let stored = run.len();
    let storing = Instant::now();
    let mut summary = trainer.store_run(run)?;
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
    detail!("stored in {:.1}s", storing.elapsed().as_secs_f64());
    let missing = missing_class(summary.totals);
    // A journal left by `learn` is folded too: `train` always leaves one
    // snapshot holding everything.
    let changed = summary.learned + summary.relearned > 0
        || trainer.model_is_stale()?
        || ctx.db.journal().exists();
    if changed && missing.is_none() {
        let compiling = Instant::now();
        match calibration {
            Some((chosen, Some(fitted))) => trainer.compile(chosen, Some(fitted))?,
            Some((chosen, None)) => trainer.compile(chosen, None)?,
            None => trainer.compile(*params.get(), None)?,
        }
        summary.snapshot_written = true;
        detail!(
            "model compiled in {:.1}s",
            compiling.elapsed().as_secs_f64()
        );
    }
    if sigint.interrupted() {
        let model = match (&missing, summary.snapshot_written) {
            (Some(why), _) => format!("no model was written: {why}"),
            (None, true) => "the model was written".to_string(),
            (None, false) => "the model was already up to date".to_string(),
        };
        eprintln!(
            "bayesmail: interrupted after reading: all {stored} messages were stored ({} ham, {} \
             spam in the database); {model}",
            summary.totals[0], summary.totals[1],
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
            summary: &summary,
            not_mail: skipped.not_mail,
        };
        serde_json::to_writer(&mut out, &json)?;
        writeln!(out)?;
        if let Some(why) = &missing {
            note!("bayesmail: no model written: {why}");
        }
    } else {
        note!(
            "read {read_count} messages in {:.1}s: {} learned, {} moved to the other label, {} already known{}{}",
            start.elapsed().as_secs_f64(),
            summary.learned,
            summary.relearned,
            summary.unchanged,
            duplicates_note(&summary),
            skipped.note(),
        );
        note!(
            "database {}: {} ham, {} spam{}",
            for_terminal(&ctx.db.dir().display().to_string()),
            summary.totals[0],
            summary.totals[1],
            match (&missing, summary.snapshot_written) {
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

pub(super) fn prune(ctx: &Context, args: &PruneArgs) -> Result<Outcome> {
    // Opening a database that does not exist would create it, empty.
    if !ctx.db.counts().exists() {
        bail!(
            "nothing has been learned into {} yet, so there is nothing to prune",
            ctx.db.dir().display()
        );
    }
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let (removed, left, model) = ctx
        .database()
        .prune(
            args.max_count,
            args.min_age,
            Duration::from_secs(args.wait),
            *params.get(),
        )
        .map_err(|e| hint(ctx, e))?;
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

/// Reads the messages `learn` and `unlearn` are given the way `train`
/// reads the same file in a folder, so that both compute the same digests:
/// a file holding one message after a `From ` envelope line is that message
/// (the envelope line left out, `>From ` escaping undone), a file holding
/// several (an mbox) is each of them. Standard input is one message taken
/// verbatim, as a delivery agent passes one on, unless it is clearly an mbox
/// of several messages (see [`mailbox::looks_like_several_messages`]);
/// anything else that is not a regular file (a FIFO) is one message. A
/// directory is refused with a pointer to `train`, which reads folders.
/// Messages that cannot be read or parsed are reported; their number is
/// returned beside the others.
fn read_messages(path: &Path, command: &str) -> Result<(Vec<(String, Labelled)>, usize)> {
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        bail!(
            "{} is a directory: `{command}` takes one message file, an mbox file or '-'; \
             to learn a folder of messages use `bayesmail train --spam DIR` or `--ham DIR` \
             (unlearning happens there too: a message moved to the other folder is moved \
             to the other label)",
            path.display()
        );
    }
    let regular = path.as_os_str() == "-" || std::fs::metadata(path).is_ok_and(|m| m.is_file());
    let raws: Vec<mailbox::Result<mailbox::RawMessage>> = if regular {
        mailbox::open(path, &mailbox::Options::default())
            .with_context(|| format!("reading {}", path.display()))?
            .collect()
    } else {
        vec![Ok(mailbox::RawMessage {
            id: mailbox::MessageId::Path(path.to_path_buf()),
            bytes: read_one(path)?,
        })]
    };
    let single = raws.len() == 1;
    let mut extractor = Extractor::new();
    let mut messages = Vec::with_capacity(raws.len());
    let mut failed = 0;
    for raw in raws {
        let outcome = raw.map_err(anyhow::Error::from).and_then(|raw| {
            let id = raw.id.to_string();
            if raw.bytes.iter().all(u8::is_ascii_whitespace) {
                bail!("empty message: {id}");
            }
            if !message::looks_like_mail(&raw.bytes) {
                bail!("{id}: {NOT_MAIL}");
            }
            let (features, identity) = extractor
                .read(&raw.bytes)
                .with_context(|| format!("parsing {id}"))?;
            Ok((
                id,
                Labelled {
                    features,
                    identity,
                    label: Label::Ham,
                },
            ))
        });
        match outcome {
            Ok(m) => messages.push(m),
            // One message given, and it cannot be read: the command failed.
            Err(err) if single => return Err(err),
            Err(err) => {
                failed += 1;
                eprintln!("bayesmail: {}", for_terminal(&format!("{err:#}")));
            }
        }
    }
    if messages.is_empty() && failed == 0 {
        bail!("no message in {}", path.display());
    }
    Ok((messages, failed))
}

/// The journal bound of `learn` and `unlearn`: [`DEFAULT_JOURNAL_LIMIT`],
/// or `BAYESMAIL_JOURNAL_LIMIT` bytes (a knob for tests that must make
/// folds happen often, and for measuring).
fn journal_limit() -> u64 {
    std::env::var("BAYESMAIL_JOURNAL_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_JOURNAL_LIMIT)
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
    let (mut messages, failed) = read_messages(&args.file, "learn")?;
    for (_, m) in &mut messages {
        m.label = label;
    }
    let names: Vec<String> = messages.iter().map(|(id, _)| id.clone()).collect();
    let labelled: Vec<Labelled> = messages.into_iter().map(|(_, m)| m).collect();
    let wait = Duration::from_secs(args.wait);
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let (summary, model) = ctx
        .database()
        .learn(&labelled, wait, journal_limit(), *params.get())
        .map_err(|e| hint(ctx, e))?;
    let no_model = no_model_now(model);
    let moved = match names.as_slice() {
        [one] => one.clone(),
        _ => format!("the messages moved to {label}"),
    };
    inexact_note(&moved, summary.inexact);
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
        println!("{}", serde_json::to_string(&learned)?);
    }
    // One message: what became of it is the result, on stdout. Several:
    // a summary of the run, on stderr.
    if !args.json && labelled.len() == 1 {
        println!(
            "{}",
            match action {
                "moved" => format!("moved to {label}"),
                "learned" => format!("learned as {label}"),
                _ => format!("already learned as {label}"),
            }
        );
    } else if !args.json {
        note!(
            "{} messages: {} learned as {label}, {} moved to {label}, {} already learned as \
             {label}{}",
            labelled.len(),
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
        "database {}: {} ham, {} spam",
        ctx.db.dir().display(),
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
    // Only a database that exists can have learned the message; opening one
    // that does not would create it, empty.
    if !ctx.db.counts().exists() {
        bail!(
            "nothing has been learned into {} yet, so there is nothing to unlearn",
            ctx.db.dir().display()
        );
    }
    let (messages, mut failed) = read_messages(&args.file, "unlearn")?;
    let wait = Duration::from_secs(args.wait);
    let given: Vec<_> = messages
        .iter()
        .map(|(_, m)| (&m.features, m.identity))
        .collect();
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let unlearned = ctx
        .database()
        .unlearn(&given, wait, journal_limit(), *params.get())
        .map_err(|e| hint(ctx, e))?;
    let no_model = no_model_now(unlearned.model);
    let what = match messages.as_slice() {
        [(one, _)] => one.clone(),
        _ => "the messages unlearned".to_string(),
    };
    inexact_note(&what, unlearned.inexact);
    let results = unlearned.results;
    let single = messages.len() == 1 && failed == 0;
    let mut lines = Vec::new();
    let mut first_error = None;
    for ((id, _), result) in messages.iter().zip(results) {
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
                eprintln!("bayesmail: {}: {err}", for_terminal(id));
            }
            Err(err) => {
                first_error = Some(err);
                break;
            }
        }
    }
    if let Some(err) = first_error {
        return Err(err.into());
    }
    for line in lines {
        println!("{line}");
    }
    if let Some(why) = no_model {
        if args.json {
            println!("{}", serde_json::json!({ "no_model": why }));
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
