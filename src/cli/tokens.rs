//! `bayesmail tokens`: print each message's features.

use std::io::{self, BufWriter, Write};

use anyhow::Result;

use bayesmail::features::{Features, METADATA_NAMES};
use bayesmail::sanitize::for_terminal;

use super::read::{finish_stream, for_each_batch};
use super::{Outcome, TokensArgs};

pub(super) fn run(args: &TokensArgs) -> Result<Outcome> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut unparsed = 0;
    let result = for_each_batch(&args.paths, &args.mailbox.options(), &mut |batch| {
        for e in batch {
            let id = e.raw.id.to_string();
            match e.features {
                Ok(features) if args.json => write_json(&mut out, &id, &features)?,
                Ok(features) => write_text(&mut out, &id, &features)?,
                Err(err) => {
                    unparsed += 1;
                    eprintln!("bayesmail: {}: {err}", for_terminal(&id));
                }
            }
        }
        Ok(())
    });
    finish_stream(result, &mut out, unparsed)
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
