//! `bayesmail filter`: the mail delivery hook. One message in on stdin, the
//! same message out on stdout with our verdict headers added, and nothing
//! else changed (see [`bayesmail::headers`]).
//!
//! It fails open: whatever goes wrong with the model, the configuration or
//! the message, the message still goes out, byte for byte, with
//! `X-Spam-Status: Unknown, reason=…` where it has a header block to carry
//! it. Only when the message cannot be passed on (stdin unreadable, stdout
//! closed) does the exit status tell the delivery agent to keep it and try
//! again. Runs on one thread and reads only the model snapshot, so it starts
//! fast and many can run at once while a training run holds the database.

use std::io::{self, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;

use bayesmail::db::{self, Classifier};
use bayesmail::decision::Verdict;
use bayesmail::features::Extractor;
use bayesmail::headers::HeaderBlock;
use bayesmail::sanitize::for_terminal;
use bayesmail::store;

use super::{Context, FilterArgs};

/// `--verdict-exit` status of a spam verdict.
pub(super) const EXIT_SPAM: u8 = 0;
/// `--verdict-exit` status of a ham verdict.
pub(super) const EXIT_HAM: u8 = 1;
/// `--verdict-exit` status of an unsure verdict.
pub(super) const EXIT_UNSURE: u8 = 2;
/// `--verdict-exit` status when no verdict could be reached (the message
/// still went out unchanged) or the message could not be passed on.
pub(super) const EXIT_ERROR: u8 = 3;
/// Default-mode status when the message could not be passed on (stdin
/// unreadable, stdout closed): sysexits' EX_TEMPFAIL, which tells a
/// delivery agent to keep the message and try again.
pub(super) const EXIT_TEMPFAIL: u8 = 75;

/// Why a message got no verdict. The name goes into
/// `X-Spam-Status: Unknown, reason=NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// The configuration file or a setting is invalid.
    Config,
    /// No model has been trained into the database.
    NoModel,
    /// The model was written by another format or tokenizer version.
    ModelVersion,
    /// The model file cannot be read or is damaged.
    ModelUnreadable,
    /// The message is larger than the size cap.
    TooLarge,
    /// The message cannot be parsed at all (e.g. it is empty).
    Unparseable,
    /// A bug: scoring panicked.
    Internal,
}

impl Reason {
    fn name(self) -> &'static str {
        match self {
            Reason::Config => "config-error",
            Reason::NoModel => "no-model",
            Reason::ModelVersion => "model-version",
            Reason::ModelUnreadable => "model-unreadable",
            Reason::TooLarge => "too-large",
            Reason::Unparseable => "unparseable",
            Reason::Internal => "internal-error",
        }
    }
}

/// A verdict with its probability and the spam cutoff, or why there is none.
enum Status {
    Verdict {
        verdict: Verdict,
        probability: f64,
        cutoff: f64,
    },
    Unknown(Reason),
}

impl Status {
    /// The header fields to add, in order.
    fn fields(&self) -> Vec<(&'static str, String)> {
        let version = env!("CARGO_PKG_VERSION");
        match *self {
            Status::Verdict {
                verdict,
                probability,
                cutoff,
            } => {
                let word = match verdict {
                    Verdict::Spam => "Yes",
                    Verdict::Ham => "No",
                    Verdict::Unsure => "Unsure",
                };
                let status = format!(
                    "{word}, probability={probability:.6}, cutoff={cutoff:.6}, version={version}"
                );
                let mut fields = Vec::with_capacity(2);
                if verdict == Verdict::Spam {
                    fields.push(("X-Spam-Flag", "YES".to_string()));
                }
                fields.push(("X-Spam-Status", status));
                fields
            }
            Status::Unknown(reason) => vec![(
                "X-Spam-Status",
                format!("Unknown, reason={}, version={version}", reason.name()),
            )],
        }
    }

    fn exit_code(&self) -> u8 {
        match self {
            Status::Verdict {
                verdict: Verdict::Spam,
                ..
            } => EXIT_SPAM,
            Status::Verdict {
                verdict: Verdict::Ham,
                ..
            } => EXIT_HAM,
            Status::Verdict {
                verdict: Verdict::Unsure,
                ..
            } => EXIT_UNSURE,
            Status::Unknown(_) => EXIT_ERROR,
        }
    }
}

/// Runs `filter` and returns the exit status. Never fails before the
/// message has been passed on, whatever the configuration.
pub(super) fn run(db: Option<PathBuf>, config: Option<PathBuf>, args: &FilterArgs) -> u8 {
    let ctx = Context::new(db, config);
    let max_size = match &ctx {
        Ok(ctx) => ctx.config.filter_max_size(args.max_size),
        Err(_) => Ok(args
            .max_size
            .unwrap_or(bayesmail::config::DEFAULT_FILTER_MAX_SIZE)),
    };
    let max_size = max_size.unwrap_or_else(|err| {
        warn(&format!("{err}; using the default size cap"));
        bayesmail::config::DEFAULT_FILTER_MAX_SIZE
    });
    let io_failure = if args.verdict_exit {
        EXIT_ERROR
    } else {
        EXIT_TEMPFAIL
    };

    let mut stdin = io::stdin().lock();
    let mut raw = Vec::new();
    let limit = max_size.saturating_add(1);
    if let Err(err) = (&mut stdin).take(limit).read_to_end(&mut raw) {
        warn(&format!(
            "reading the message from standard input: {err}; nothing written"
        ));
        return io_failure;
    }
    let too_large = raw.len() as u64 > max_size;

    let status = if too_large {
        Status::Unknown(Reason::TooLarge)
    } else {
        match ctx {
            Ok(ctx) => judge(&ctx, args, &raw),
            Err(err) => {
                warn(&format!("{err:#}"));
                Status::Unknown(Reason::Config)
            }
        }
    };
    if let Status::Unknown(reason) = &status {
        match reason {
            Reason::TooLarge => warn(&format!(
                "message larger than {max_size} bytes: passed through unscored"
            )),
            _ => warn(&format!(
                "no verdict ({}): message passed through unchanged",
                reason.name()
            )),
        }
    }

    // The rest of a too-large message is read before anything is written,
    // like the rest of any message: a caller that writes the whole message
    // before reading ours never deadlocks. It is spooled to an unnamed
    // temporary file, so memory stays bounded by the cap.
    let rest = if too_large {
        match spool(&mut stdin) {
            Ok(rest) => Some(rest),
            Err(err) => {
                warn(&format!(
                    "reading the message from standard input: {err}; nothing written"
                ));
                return io_failure;
            }
        }
    } else {
        None
    };

    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let written = write_message(&mut out, &raw, &status).and_then(|()| {
        if let Some(mut rest) = rest {
            io::copy(&mut rest, &mut out)?;
        }
        out.flush()
    });
    if let Err(err) = written {
        warn(&format!(
            "passing the message on failed: {err}; the delivery agent must keep it"
        ));
        return io_failure;
    }
    if args.verdict_exit {
        status.exit_code()
    } else {
        0
    }
}

/// Copies the rest of `input` into an unnamed temporary file, rewound.
fn spool(input: &mut impl Read) -> io::Result<std::fs::File> {
    use std::io::Seek;
    let mut file = tempfile::tempfile()?;
    io::copy(input, &mut file)?;
    file.rewind()?;
    Ok(file)
}

/// Writes `raw` with the status fields added to its header block, or
/// unchanged if it has none we can find (or, for a too-large message, none
/// within the bytes read).
fn write_message(out: &mut dyn Write, raw: &[u8], status: &Status) -> io::Result<()> {
    let fields = status.fields();
    let truncated = matches!(status, Status::Unknown(Reason::TooLarge));
    match HeaderBlock::locate(raw) {
        Some(block) if !(truncated && block.at_input_end()) => block.write(out, raw, &fields),
        _ => {
            if !raw.is_empty() {
                warn("no header block found: message passed through without our headers");
            }
            out.write_all(raw)
        }
    }
}

/// Scores the message; any failure becomes an unknown status. A panic in
/// scoring (a bug) is caught so that the message still goes out.
fn judge(ctx: &Context, args: &FilterArgs, raw: &[u8]) -> Status {
    let decider = match ctx.decider(&args.decision) {
        Ok(d) => d,
        Err(err) => {
            warn(&format!("{err:#}"));
            return Status::Unknown(Reason::Config);
        }
    };
    let classifier = match Classifier::open(&ctx.db) {
        Ok(c) => c,
        Err(err) => {
            warn(&err.to_string());
            return Status::Unknown(match err {
                db::Error::NoModel(_) => Reason::NoModel,
                db::Error::Store(store::Error::Version { .. }) => Reason::ModelVersion,
                _ => Reason::ModelUnreadable,
            });
        }
    };
    let scored = panic::catch_unwind(AssertUnwindSafe(|| {
        let features = Extractor::new().extract(raw)?;
        let score = classifier.score(&features);
        let verdict = decider.verdict(classifier.header().totals.messages, &score);
        Ok::<_, bayesmail::message::Error>(Status::Verdict {
            verdict,
            probability: score.probability,
            cutoff: decider.costs.cutoffs().1,
        })
    }));
    match scored {
        Ok(Ok(status)) => status,
        Ok(Err(err)) => {
            warn(&format!("cannot parse the message: {err}"));
            Status::Unknown(Reason::Unparseable)
        }
        Err(_) => Status::Unknown(Reason::Internal),
    }
}

fn warn(message: &str) {
    eprintln!("bayesmail filter: {}", for_terminal(message));
}
