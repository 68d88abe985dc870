//! `bayesmail tokens`: print each message's features.

use std::io::{self, BufWriter, Write};

use anyhow::{Context, Result};
use rayon::prelude::*;

use bayesmail::features::{Extractor, Features, METADATA_NAMES};
use bayesmail::mailbox::{self, RawMessage};
use bayesmail::sanitize::for_terminal;

use super::{Outcome, TokensArgs, is_broken_pipe};

/// Messages parsed in parallel per batch; output stays in input order.
const BATCH: usize = 256;

pub(super) fn run(args: &TokensArgs) -> Result<Outcome> {
    let opts = args.mailbox.options();
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = false;
    let mut messages = mailbox::open_all(&args.paths, &opts);
    let mut batch: Vec<RawMessage> = Vec::with_capacity(BATCH);
    loop {
        batch.clear();
        for item in messages.by_ref() {
            match item {
                Ok(raw) => {
                    batch.push(raw);
                    if batch.len() == BATCH {
                        break;
                    }
                }
                Err(err) => {
                    failed = true;
                    eprintln!("bayesmail: {}", for_terminal(&err.to_string()));
                }
            }
        }
        if batch.is_empty() {
            break;
        }
        let results: Vec<_> = batch
            .par_iter()
            .map_init(Extractor::new, |ex, raw| ex.extract(&raw.bytes))
            .collect();
        for (raw, result) in batch.iter().zip(results) {
            let id = raw.id.to_string();
            match result {
                Ok(features) => {
                    let written = if args.json {
                        write_json(&mut out, &id, &features)
                    } else {
                        write_text(&mut out, &id, &features)
                    };
                    if let Err(err) = written.context("writing to standard output") {
                        return finish_on_write_error(err, failed);
                    }
                }
                Err(err) => {
                    failed = true;
                    eprintln!("bayesmail: {}: {err}", for_terminal(&id));
                }
            }
        }
    }
    if let Err(err) = out.flush().context("writing to standard output") {
        return finish_on_write_error(err, failed);
    }
    Ok(if failed {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}

fn finish_on_write_error(err: anyhow::Error, failed: bool) -> Result<Outcome> {
    if is_broken_pipe(&err) {
        Ok(if failed {
            Outcome::SomeFailed
        } else {
            Outcome::AllOk
        })
    } else {
        Err(err)
    }
}

#[derive(serde::Serialize)]
struct JsonLine<'a> {
    id: &'a str,
    #[serde(flatten)]
    features: &'a Features,
}

fn write_json(out: &mut impl Write, id: &str, features: &Features) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &JsonLine { id, features })?;
    out.write_all(b"\n")
}

fn write_text(out: &mut impl Write, id: &str, features: &Features) -> io::Result<()> {
    writeln!(out, "==> {} <==", for_terminal(id))?;
    writeln!(out, "tokens ({}):", features.tokens.len())?;
    for token in &features.tokens {
        writeln!(out, "  {}", for_terminal(token))?;
    }
    write!(out, "metadata:")?;
    for (name, value) in METADATA_NAMES.iter().zip(features.metadata.0) {
        write!(out, " {name}={value:.4}")?;
    }
    writeln!(out)
}
