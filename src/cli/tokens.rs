//! `bayesmail tokens`: print each message's features, as
//! [`bayesmail::sources::for_each_mapped`] reads and extracts them.

use std::io::{self, BufWriter, Write};

use anyhow::Result;

use bayesmail::features::{Extractor, Features, grams};
use bayesmail::mailbox::RawMessage;
use bayesmail::sanitize::{for_terminal, quote_bytes};
use bayesmail::sources;
use bayesmail::vocab::METADATA_NAMES;

use super::{Outcome, TokensArgs, complain};

pub(super) fn run(args: &TokensArgs) -> Result<Outcome> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failures = 0;
    let extract = |ex: &mut Extractor, raw: RawMessage| {
        let features = ex.extract(&raw.bytes);
        (raw, features)
    };
    let result = sources::for_each_mapped(
        &args.paths,
        &args.mailbox.options(),
        &extract,
        &mut |skip| {
            complain!("bayesmail: {}", for_terminal(&skip.to_string()));
        },
        &mut |batch| -> Result<()> {
            for (raw, features) in batch {
                let id = raw.id.to_string();
                match features {
                    Ok(features) => {
                        let bytes = byte_view(&raw.bytes, &features);
                        if args.json {
                            write_json(&mut out, &id, &features, &bytes)?;
                        } else {
                            write_text(&mut out, &id, &features, &bytes)?;
                        }
                    }
                    Err(err) => {
                        failures += 1;
                        complain!("bayesmail: {}: {err}", for_terminal(&id));
                    }
                }
            }
            Ok(())
        },
    );
    let skipped = result.as_ref().map_or(0, |s| s.total());
    super::finish_stream(result.map(|_| ()), &mut out, failures + skipped)
}

/// One bucket of the byte view: its name and the 4-grams of this message
/// that fell in it, each escaped ([`quote_bytes`] without the quotes).
#[derive(serde::Serialize)]
struct Bucket {
    bucket: String,
    grams: Vec<String>,
}

/// The byte view of `raw` as the filter sees it: each bucket of
/// `features` with the grams behind it.
fn byte_view(raw: &[u8], features: &Features) -> Vec<Bucket> {
    // From the bytes the features were taken from.
    let all = grams::grams(&bayesmail::message::canonical(raw));
    features
        .grams
        .iter()
        .map(|&b| Bucket {
            bucket: format!("{b:05x}"),
            grams: all
                .iter()
                .filter(|(bucket, _)| *bucket == b)
                .map(|(_, g)| unquoted(g))
                .collect(),
        })
        .collect()
}

/// [`quote_bytes`] without the quotes around it.
pub(super) fn unquoted(bytes: &[u8]) -> String {
    let quoted = quote_bytes(bytes);
    quoted[1..quoted.len() - 1].to_string()
}

#[derive(serde::Serialize)]
struct JsonLine<'a> {
    id: &'a str,
    #[serde(flatten)]
    features: &'a Features,
    bytes: &'a [Bucket],
}

fn write_json(
    out: &mut impl Write,
    id: &str,
    features: &Features,
    bytes: &[Bucket],
) -> io::Result<()> {
    serde_json::to_writer(
        &mut *out,
        &JsonLine {
            id,
            features,
            bytes,
        },
    )?;
    out.write_all(b"\n")
}

fn write_text(
    out: &mut impl Write,
    id: &str,
    features: &Features,
    bytes: &[Bucket],
) -> io::Result<()> {
    writeln!(out, "==> {} <==", for_terminal(id))?;
    writeln!(out, "tokens ({}):", features.tokens.len())?;
    for token in &features.tokens {
        writeln!(out, "  {}", for_terminal(token))?;
    }
    writeln!(
        out,
        "bytes ({} buckets of the header block's 4-grams):",
        bytes.len()
    )?;
    for b in bytes {
        let grams: Vec<String> = b.grams.iter().map(|g| format!("\"{g}\"")).collect();
        writeln!(out, "  bytes:{} {}", b.bucket, grams.join(" "))?;
    }
    write!(out, "metadata:")?;
    for (name, value) in METADATA_NAMES.iter().zip(features.metadata.0) {
        write!(out, " {name}={value:.4}")?;
    }
    writeln!(out)
}
