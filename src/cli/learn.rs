//! `bayesmail learn` and `unlearn`: the messages of one file (a message,
//! an mbox, standard input) learned under a label or unlearned, a part at
//! a time ([`part_bytes`]), each part one call of
//! [`bayesmail::db::Database`] (`learn_or_leave`, `unlearn_or_leave`) or of
//! the model in Redis, and what it printed.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};

use super::train::{hint, inexact_note, journal_limit, learn_note, no_model_now};
use super::{Context, LearnArgs, Outcome, UnlearnArgs, complain, detail, note, say};
use bayesmail::db::shared::SharedModel;
use bayesmail::db::{Labelled, ModelAfter, Taught, TrainSummary};
use bayesmail::model::Label;
use bayesmail::sanitize::for_terminal;
use bayesmail::sources::{self, FileMessage, FileMessages};
use bayesmail::store::redis::Redis;

/// Bytes of messages a learn or unlearn reads and teaches at a time: each
/// part is one change of the database, so that a large mbox is never all in
/// memory at once (a part's features and the change they make take several
/// times its bytes). 4 MiB, or `BAYESMAIL_LEARN_PART_BYTES` (a knob for
/// tests of files in several parts, and for measuring).
fn part_bytes() -> usize {
    std::env::var("BAYESMAIL_LEARN_PART_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(4 << 20)
}

/// Opens the file `learn` or `unlearn` (`command`) is given.
fn open(path: &Path, command: &str) -> Result<FileMessages> {
    match FileMessages::open(path) {
        Ok(file) => Ok(file),
        Err(sources::Error::Directory(_)) => bail!(
            "{} is a directory: `{command}` takes one message file, an mbox file or '-'; \
             to learn a folder of messages use `bayesmail train --spam DIR` or `--ham DIR` \
             (unlearning happens there too: a message moved to the other folder is moved \
             to the other label)",
            path.display()
        ),
        Err(err) => Err(err.into()),
    }
}

/// The next part of `file`'s messages; each that could not be read or
/// parsed is reported and counted in `failed`. `None` at the end.
fn next_part(file: &mut FileMessages, failed: &mut usize) -> Result<Option<Vec<FileMessage>>> {
    let Some((messages, errors)) = file.next_part(part_bytes())? else {
        return Ok(None);
    };
    for err in &errors {
        complain!("bayesmail: {}", for_terminal(&err.to_string()));
    }
    *failed += errors.len();
    Ok(Some(messages))
}

/// An error of a part after others were taught (`done`, `what`: learned or
/// unlearned) or left for another writer (`queued`): says what became of
/// them, and that teaching the file again is safe.
fn after_parts(err: anyhow::Error, done: usize, queued: usize, what: &str) -> anyhow::Error {
    let n = |n: usize| match n {
        1 => "1 message".to_string(),
        n => format!("{n} messages"),
    };
    let before = match (done, queued) {
        (0, 0) => return err,
        (d, 0) => format!("{} before it {what}", n(d)),
        (0, q) => format!(
            "{} before it left for the writer that holds the database",
            n(q)
        ),
        (d, q) => format!(
            "{} before it {what} and {} left for the writer that holds the database",
            n(d),
            n(q)
        ),
    };
    anyhow::anyhow!(
        "{err:#}; the {before} (each message is taught by its identity, so doing it again is \
         safe)"
    )
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

/// Says on stdout that `count` messages were left for the writer that held
/// the database, to learn as `label` (`None`: unlearn), and where they wait
/// ([`left_note`]).
fn left(ctx: &Context, json: bool, wait: u64, label: Option<Label>, count: usize) -> Result<()> {
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
    left_note(ctx, wait, count)
}

/// Says where `count` messages left for the writer that held the database
/// past `wait` seconds wait, or that they were taken in since (nothing
/// waits now: that writer was done, or a later part of the same learn
/// found the database free and took them in before its own).
fn left_note(ctx: &Context, wait: u64, count: usize) -> Result<()> {
    let pending = bayesmail::db::DbPaths::new(ctx.db.dir()).pending();
    let now = bayesmail::db::Database::new(ctx.db.dir()).pending();
    let messages = match count {
        1 => "the message".to_string(),
        n => format!("{n} messages"),
    };
    note!(
        "bayesmail: note: another writer held {} past --wait ({wait} s): {messages} left in {}, \
         {}",
        ctx.location()?,
        for_terminal(&pending.display().to_string()),
        match (now.waiting, now.refused) {
            (0, None) => "and taken in since (nothing waits now)",
            _ => "taken in when that writer is done (bayesmail stats counts what waits)",
        },
    );
    Ok(())
}

/// Where a learn or unlearn goes: the model in Redis (`--store`) or the
/// database.
enum Target {
    Store(Redis),
    Database(bayesmail::db::Database),
}

impl Target {
    fn of(ctx: &Context, origin: bayesmail::db::Origin) -> Result<Target> {
        Ok(match ctx.shared()? {
            Some(redis) => Target::Store(redis),
            None => Target::Database(ctx.database_to_change()?.with_origin(origin)),
        })
    }
}

/// Adds a later part's summary to the learn's.
fn add_part(sum: &mut Option<TrainSummary>, part: TrainSummary) {
    let Some(sum) = sum else {
        *sum = Some(part);
        return;
    };
    sum.learned += part.learned;
    sum.relearned += part.relearned;
    sum.unchanged += part.unchanged;
    sum.duplicates += part.duplicates;
    sum.conflicting += part.conflicting;
    sum.merged += part.merged;
    sum.inexact += part.inexact;
    sum.totals = part.totals;
    sum.snapshot_written |= part.snapshot_written;
}

pub(super) fn learn(ctx: &Context, args: &LearnArgs) -> Result<Outcome> {
    let label = if args.spam { Label::Spam } else { Label::Ham };
    let mut file = open(&args.file, "learn")?;
    let mut failed = 0;
    let mut part = next_part(&mut file, &mut failed)?;
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let target = Target::of(ctx, args.origin)?;
    let mut wait = Duration::from_secs(args.wait);
    let (mut count, mut queued) = (0, 0);
    let mut first_id = None;
    let mut summary = None;
    let mut model = ModelAfter::UpToDate;
    while let Some(messages) = part {
        let taught = count - queued;
        count += messages.len();
        first_id = first_id.or_else(|| messages.first().map(|m| m.id.clone()));
        let (labelled, raw): (Vec<Labelled>, Vec<Vec<u8>>) = messages
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
        let n = labelled.len();
        let now = match &target {
            Target::Store(redis) => within_store(redis.clone(), args.wait, n, move |redis| {
                Ok(SharedModel::of(redis, None)?.learn_all(&labelled)?)
            })
            .map(|s| Taught::Now((s, ModelAfter::UpToDate))),
            Target::Database(database) => database
                .learn_or_leave(&labelled, || Ok(raw), wait, journal_limit(), *params.get())
                .map_err(|e| hint(ctx, "learn", e)),
        };
        match now.map_err(|e| after_parts(e, taught, queued, "learned"))? {
            Taught::Now((part, after)) => {
                learn_note(part.log_failure.as_deref());
                learn_note(part.rebuilt.as_deref());
                add_part(&mut summary, part);
                model = after;
            }
            Taught::Left => {
                queued += n;
                // The writer holds on: the rest is left for it at once,
                // unless it has let go by then.
                wait = Duration::ZERO;
            }
        }
        part = next_part(&mut file, &mut failed)
            .map_err(|e| after_parts(e, count - queued, queued, "learned"))?;
    }
    let outcome = match failed {
        0 => Outcome::AllOk,
        _ => Outcome::SomeFailed,
    };
    let Some(summary) = summary else {
        // Every part was left.
        if queued > 0 {
            left(ctx, args.json, args.wait, Some(label), count)?;
        }
        return Ok(outcome);
    };
    let no_model = no_model_now(model);
    let moved = match (count, first_id) {
        (1, Some(one)) => one,
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
            /// Messages left for the writer that held the database.
            #[serde(skip_serializing_if = "is_zero")]
            queued: usize,
        }
        fn is_zero(n: &usize) -> bool {
            *n == 0
        }
        let learned = Learned {
            action,
            label,
            summary: &summary,
            no_model: no_model.as_deref(),
            queued,
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
             {label}{}{}",
            count,
            summary.learned,
            summary.relearned,
            summary.unchanged,
            super::train::duplicates_note(&summary),
            match queued {
                0 => String::new(),
                q => format!(", {q} queued as {label}"),
            },
        );
    }
    if queued > 0 {
        left_note(ctx, args.wait, queued)?;
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
    Ok(outcome)
}

pub(super) fn unlearn(ctx: &Context, args: &UnlearnArgs) -> Result<Outcome> {
    let mut file = open(&args.file, "unlearn")?;
    let mut failed = 0;
    let mut part = next_part(&mut file, &mut failed)?;
    // One message, read: what became of it is the result itself.
    let single = failed == 0 && part.as_ref().is_some_and(|p| p.len() == 1) && file.is_done();
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let target = Target::of(ctx, args.origin)?;
    let mut wait = Duration::from_secs(args.wait);
    let (mut unlearned, mut queued, mut inexact) = (0, 0, 0);
    let mut first_id = None;
    let mut model = ModelAfter::UpToDate;
    let mut lines = Vec::new();
    let mut first_error = None;
    while let Some(messages) = part {
        first_id = first_id.or_else(|| messages.first().map(|m| m.id.clone()));
        let given: Vec<_> = messages.iter().map(|m| (&m.features, m.identity)).collect();
        let now = match &target {
            Target::Store(redis) => {
                let owned: Vec<_> = messages
                    .iter()
                    .map(|m| (m.features.clone(), m.identity))
                    .collect();
                within_store(redis.clone(), args.wait, owned.len(), move |redis| {
                    let given: Vec<_> = owned.iter().map(|(f, i)| (f, *i)).collect();
                    Ok(SharedModel::of(redis, None)?.unlearn_all(&given))
                })
                .map(Taught::Now)
            }
            Target::Database(database) => {
                let raw = || Ok(messages.iter().map(|m| m.raw.clone()).collect());
                database
                    .unlearn_or_leave(&given, raw, wait, journal_limit(), *params.get())
                    .map_err(|e| hint(ctx, "unlearn", e))
            }
        };
        let done = match now {
            Ok(Taught::Now(done)) => done,
            Ok(Taught::Left) => {
                queued += messages.len();
                wait = Duration::ZERO;
                part = match next_part(&mut file, &mut failed) {
                    Ok(part) => part,
                    Err(err) => {
                        first_error = Some(after_parts(err, unlearned, queued, "unlearned"));
                        break;
                    }
                };
                continue;
            }
            Err(err) => {
                first_error = Some(after_parts(err, unlearned, queued, "unlearned"));
                break;
            }
        };
        learn_note(done.log_failure.as_deref());
        learn_note(done.rebuilt.as_deref());
        inexact += done.inexact;
        model = done.model;
        for (FileMessage { id, .. }, result) in messages.iter().zip(done.results) {
            match result {
                Ok(was) => {
                    unlearned += 1;
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
                    first_error = Some(after_parts(err.into(), unlearned, queued, "unlearned"));
                    break;
                }
            }
        }
        if first_error.is_some() {
            break;
        }
        part = match next_part(&mut file, &mut failed) {
            Ok(part) => part,
            Err(err) => {
                first_error = Some(after_parts(err, unlearned, queued, "unlearned"));
                break;
            }
        };
    }
    let what = match (single, first_id) {
        (true, Some(one)) => one,
        _ => "the messages unlearned".to_string(),
    };
    inexact_note(&what, inexact);
    // What was unlearned is said even when a later message stopped the
    // rest: it is not learned any more.
    for line in lines {
        say(line)?;
    }
    if let Some(err) = first_error {
        return Err(err);
    }
    if queued > 0 {
        // Said as for a file left whole: one line, on stdout.
        left(ctx, args.json, args.wait, None, queued)?;
    }
    if let Some(why) = no_model_now(model) {
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
