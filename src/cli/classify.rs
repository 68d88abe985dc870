//! `bayesmail classify`, `explain` and `stats`: the read side. Only the
//! model snapshot is read, never the count store, so these run while a
//! training run holds the database. Each is its arguments, one call of
//! [`bayesmail::db::Reader`] (`scan` without an action, `explain_message`,
//! `stats`) and what it returned, printed.

use std::io::{self, BufWriter, Write};

use anyhow::{Context as _, Result};
use serde::Serialize;

use bayesmail::decision::{Doubt, Verdict};
use bayesmail::sanitize::{for_terminal, quote_bytes};
use bayesmail::vocab::TOKENIZER_VERSION;

use bayesmail::db::Event;
use bayesmail::sources::read_mail;

use super::scan::{Format, Line, write_line};
use super::tokens::unquoted;
use super::{ClassifyArgs, Context, ExplainArgs, Outcome, StatsArgs, complain};

/// `stats`' lines on the model's parameters and its stacker: what it was
/// fitted on and each view's weight.
fn write_stacker(
    out: &mut impl Write,
    params: &bayesmail::model::Params,
    calibrated_on: usize,
    weights: &std::collections::BTreeMap<&'static str, f64>,
) -> Result<()> {
    writeln!(
        out,
        "model               {}",
        serde_json::to_string(params)?
    )?;
    writeln!(
        out,
        "calibrated on       {calibrated_on} messages (by the last train run, at most {} of \
         each class, or by learning: the last {} judged before they were learned)",
        bayesmail::fit::SAMPLE_PER_CLASS,
        bayesmail::decision::prequential::KEPT
    )?;
    writeln!(
        out,
        "view weights        {}",
        weights_line(weights.iter().map(|(v, w)| (v, *w)))
    )?;
    Ok(())
}

/// The stacker's weights as `stats` prints them: `view 0.906, …`.
fn weights_line<D: std::fmt::Display>(weights: impl Iterator<Item = (D, f64)>) -> String {
    weights
        .map(|(view, w)| format!("{view} {w:.3}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `stats --store`: a model in Redis.
fn shared_stats(redis: &bayesmail::store::redis::Redis, args: &StatsArgs) -> Result<Outcome> {
    // The name as serve knows it: without case, and a domain without its
    // trailing dot (an address extension is the server's setting).
    let user = args
        .user
        .as_deref()
        .map(|u| {
            bayesmail::serve::users::check_user(&bayesmail::serve::users::without_extension(u, ""))
        })
        .transpose()?;
    let model = bayesmail::db::shared::SharedModel::of(redis, user.as_deref())?;
    let s = model.stats()?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer(&mut out, &s)?;
        writeln!(out)?;
        return Ok(Outcome::AllOk);
    }
    writeln!(out, "store               {}", for_terminal(&s.store))?;
    writeln!(
        out,
        "messages learned    {} ham, {} spam ({} in the registry)",
        s.ham_messages, s.spam_messages, s.registry
    )?;
    // Unlike a directory's count of tokens, Redis's counts the online
    // view's weights too, which an unlearn does not take back exactly.
    writeln!(
        out,
        "vocabulary          {} features (words, byte buckets and the online view's weights)",
        s.features
    )?;
    let mb = |bytes: u64| bytes as f64 / 1e6;
    writeln!(
        out,
        "Redis memory        {:.1} MB{}: words {:.1} MB, byte view {:.1} MB, registry {:.1} MB",
        mb(s.memory_bytes),
        match s.memory_per_message {
            Some(per) => format!(" ({:.0} bytes per message learned)", per),
            None => String::new(),
        },
        mb(s.memory_parts.words),
        mb(s.memory_parts.grams),
        mb(s.memory_parts.registry)
    )?;
    writeln!(out, "changes             {}", s.changes)?;
    write_stacker(&mut out, &s.params, s.calibrated_on, &s.weights)?;
    Ok(Outcome::AllOk)
}

/// `classify`: `scan`'s judging and result lines, without its actions,
/// progress bar or summary.
pub(super) fn classify(ctx: &Context, args: &ClassifyArgs) -> Result<Outcome> {
    let reader = ctx.reader()?;
    let decider = ctx.decider(&args.decision)?;
    let format = if args.json {
        Format::Json
    } else {
        Format::Table
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let (summary, result) = reader.scan(
        &args.paths,
        &args.mailbox.options(),
        &decider,
        None,
        &mut |event| -> Result<()> {
            match event {
                Event::Skipped(skip) => complain!("bayesmail: {}", for_terminal(&skip.to_string())),
                Event::Scanned(s) => {
                    let id = s.id.to_string();
                    match s.judged {
                        Ok(judgment) => write_line(&mut out, format, &Line::new(&id, &judgment))?,
                        Err(err) => complain!("bayesmail: {}: {err}", for_terminal(&id)),
                    }
                }
            }
            Ok(())
        },
    );
    super::finish_stream(result, &mut out, summary.failures())
}

pub(super) fn explain(ctx: &Context, args: &ExplainArgs) -> Result<Outcome> {
    let reader = ctx.reader()?;
    let decider = ctx.decider(&args.decision)?;
    let raw = read_mail(&args.file)?;
    let mut explained = reader
        .explain_message(&raw, &decider)
        .with_context(|| format!("parsing {}", args.file.display()))?;
    explained.explanation.tokens.truncate(args.top);
    let (score, verdict, doubt) = (
        &explained.judgment.score,
        explained.judgment.verdict,
        explained.judgment.doubt,
    );
    let why = &explained.explanation;
    let grams_of = |t| explained.grams_of(t);
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.json {
        #[derive(Serialize)]
        struct Json<'a> {
            verdict: Verdict,
            /// Why it is unsure whatever the probability, or null.
            reason: Option<&'static str>,
            probability: f64,
            log_odds: f64,
            known_tokens: usize,
            #[serde(flatten)]
            explanation: &'a bayesmail::db::Explanation,
        }
        let mut json = serde_json::to_value(Json {
            verdict,
            reason: doubt.map(Doubt::name),
            probability: score.probability,
            log_odds: score.log_odds,
            known_tokens: score.evidence.known_words(),
            explanation: why,
        })?;
        if let Some(tokens) = json["tokens"].as_array_mut() {
            for (t, weight) in tokens.iter_mut().zip(&why.tokens) {
                if let Some(grams) = grams_of(weight) {
                    t["grams"] = grams.iter().map(|g| unquoted(&g[..])).collect();
                }
            }
        }
        serde_json::to_writer(&mut out, &json)?;
        writeln!(out)?;
        return Ok(Outcome::AllOk);
    }
    writeln!(
        out,
        "verdict      {verdict}   P(spam) = {:.6}   log-odds = {:.3}",
        score.probability, score.log_odds
    )?;
    if let Some(doubt) = doubt {
        writeln!(out, "reason       {doubt}: {}", doubt.meaning())?;
    }
    writeln!(
        out,
        "credibility  {:.3}   (the evidence below is scaled by it: m/(m+{}), m messages of the rarer class learned)",
        why.credibility,
        bayesmail::model::CREDIBILITY_HALF
    )?;
    writeln!(
        out,
        "\nview         evidence  × weight  = contribution   features used/known"
    )?;
    for part in &why.views {
        writeln!(
            out,
            "  {:<10} {:>+9.3} {:>9.3} {:>+14.3}   {}",
            part.input,
            part.evidence,
            part.weight,
            part.contribution,
            match (part.view, part.input) {
                (Some(_), _) => format!("{}/{}", part.used, part.known),
                (None, "logistic") => format!("{} weighted", part.known),
                (None, _) => String::new(),
            }
        )?;
    }
    writeln!(
        out,
        "  {:<10} {:>+34.3}\n  {:<10} {:>+34.3}   (σ = P(spam); {} features unknown)",
        "bias", why.bias, "logit", why.logit, why.unknown_tokens
    )?;
    writeln!(
        out,
        "\nfeatures (LLR > 0 points to spam)  view       LLR    ham   spam"
    )?;
    for t in &why.tokens {
        let name = match grams_of(t) {
            Some(grams) => {
                let quoted: Vec<String> = grams.iter().map(|g| quote_bytes(&g[..])).collect();
                format!("bytes:{}", quoted.join(","))
            }
            None => for_terminal(&t.token).into_owned(),
        };
        writeln!(
            out,
            "  {:<34} {:<7} {:>+7.3} {:>6} {:>6}{}",
            name,
            t.view.name(),
            t.llr,
            t.ham,
            t.spam,
            if t.used { "" } else { "  (too weak, not used)" }
        )?;
    }
    writeln!(
        out,
        "\nmetadata (shares of its evidence)      value    share"
    )?;
    for (name, value, share) in &why.metadata {
        writeln!(out, "  {name:<34} {value:>9.4} {share:>+8.4}")?;
    }
    Ok(Outcome::AllOk)
}

pub(super) fn stats(ctx: &Context, args: &StatsArgs) -> Result<Outcome> {
    if let Some(redis) = ctx.shared()? {
        return shared_stats(&redis, args);
    }
    if args.user.is_some() {
        anyhow::bail!("--user: the models of users are in Redis only with --store");
    }
    let s = ctx.reader()?.stats()?;
    if let Some(mode) = s.readable_by_others {
        // Only a warning: loosening it is the user's choice to make.
        let dir = for_terminal(&s.database);
        complain!(
            "bayesmail: warning: the database directory {dir} is readable by other users \
             (mode {mode:03o}), and its counts name every correspondent; `chmod 700 {dir}` makes \
             it private",
        );
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer(&mut out, &s)?;
        writeln!(out)?;
    } else {
        writeln!(out, "database            {}", for_terminal(&s.database))?;
        writeln!(
            out,
            "messages learned    {} ham, {} spam",
            s.ham_messages, s.spam_messages
        )?;
        writeln!(out, "vocabulary          {} tokens", s.vocabulary)?;
        writeln!(
            out,
            "size on disk        {:.1} MB (model {:.1} MB)",
            s.size_on_disk_bytes as f64 / 1e6,
            s.model_bytes as f64 / 1e6
        )?;
        let tokenizer = if s.tokenizer_version == TOKENIZER_VERSION {
            s.tokenizer_version.to_string()
        } else {
            format!(
                "{} (this bayesmail's: {TOKENIZER_VERSION}, from the next compiled model)",
                s.tokenizer_version
            )
        };
        writeln!(
            out,
            "versions            bayesmail {} (model written by {}), store format {}, tokenizer {}",
            s.bayesmail_version, s.model_written_by, s.store_format_version, tokenizer
        )?;
        write_stacker(&mut out, &s.params, s.calibrated_on, &s.weights)?;
        writeln!(
            out,
            "last learned from IMAP: {}",
            match s.last_learned_from_imap_seconds_ago {
                Some(secs) => format!("{} min ago", secs / 60),
                None => "never".to_string(),
            }
        )?;
        writeln!(
            out,
            "last learned        {}",
            match (s.last_learned_seconds_ago, &s.last_learned_from) {
                (Some(secs), Some(from)) => format!("{} min ago ({from})", secs / 60),
                _ => "never".to_string(),
            }
        )?;
        let pending = &s.pending;
        if let Some(why) = &pending.refused {
            writeln!(
                out,
                "waiting             cannot be read ({}): a learn that finds the database \
                 held fails rather than leave its message there",
                for_terminal(why)
            )?;
        }
        let messages = |n: usize| match n {
            1 => "1 message".to_string(),
            n => format!("{n} messages"),
        };
        if pending.waiting > 0 {
            writeln!(
                out,
                "waiting             {} to learn or unlearn: another writer held the database; \
                 the next learn, unlearn, train or prune takes them in",
                messages(pending.waiting)
            )?;
        }
        if pending.failed > 0 {
            writeln!(
                out,
                "set aside           {} left to learn that could not be read as mail \
                 ({}/pending/failed-*: remove them once looked at)",
                messages(pending.failed),
                for_terminal(&s.database)
            )?;
        }
    }
    Ok(Outcome::AllOk)
}
