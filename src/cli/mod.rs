//! Command-line front end (clap derive). Turns arguments into checked
//! library types, runs the command, prints through `impl Write`, and reports
//! errors once.

mod eval;
mod tokens;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use bayesmail::decision::Costs;
use bayesmail::eval::protocol::Settings;
use bayesmail::mailbox;
use bayesmail::model::{Combine, Params, ValidParams};

/// Exit status: every message was handled.
const EXIT_OK: u8 = 0;
/// Exit status: some messages could not be read or parsed (reported on
/// stderr); the others were handled.
const EXIT_SOME_FAILED: u8 = 1;
/// Exit status: the command could not run (bad arguments, unreadable path).
const EXIT_FATAL: u8 = 2;

/// A Bayesian spam filter for real mail.
///
/// bayesmail reads messages from Maildirs, mbox files, directory trees of
/// message files, single files or standard input, decodes them (MIME,
/// charsets, HTML) and turns each into a set of tokens and a vector of
/// numeric metadata: the features its models learn from.
#[derive(Parser, Debug)]
#[command(name = "bayesmail", version, about, long_about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the features (tokens and metadata) of each message.
    ///
    /// Exit status: 0 if every message was read, 1 if some could not be
    /// (each reported on stderr, the rest printed), 2 if the command could
    /// not run at all.
    Tokens(TokensArgs),
    /// Measure the filter on a labelled corpus (in memory; nothing is
    /// written to the database).
    ///
    /// Cross-validation over a fold file (--folds, lines
    /// fold<TAB>label<TAB>path) or labelled folders (--spam/--ham, --k folds),
    /// or the TREC online protocol over an index (--online, lines 'spam PATH'
    /// / 'ham PATH': classify each message in order, then learn it).
    Eval(Box<EvalArgs>),
}

/// Model hyperparameters and decision costs.
#[derive(Args, Debug, Clone)]
struct ModelArgs {
    /// Beta pseudo-count of presence (a in θ = (N_jc + a) / (N_c + a + b)).
    #[arg(long)]
    alpha: Option<f64>,
    /// Beta pseudo-count of absence (b).
    #[arg(long)]
    beta: Option<f64>,
    /// How token evidence is combined: tempered (mean over strong tokens),
    /// sum (naive Bayes over present tokens) or textbook (every vocabulary
    /// token, present or absent).
    #[arg(long, value_enum)]
    combine: Option<CombineArg>,
    /// Tempered combination: tokens with |LLR| below this (nats) are left out.
    #[arg(long)]
    min_strength: Option<f64>,
    /// Tempered combination: divide the sum by n^power (1 = mean, 0 = sum).
    #[arg(long)]
    power: Option<f64>,
    /// Weight of the metadata (Gaussian) evidence; 0 leaves it out.
    #[arg(long)]
    meta_weight: Option<f64>,
    /// Variance floor of the Gaussian model, as a fraction of each
    /// feature's variance over both classes.
    #[arg(long)]
    var_floor: Option<f64>,
    /// Clip each metadata feature's log-likelihood ratio to ± this (nats).
    #[arg(long)]
    meta_clip: Option<f64>,
    /// Costs FP:FN[:UNSURE]: a ham judged spam, a spam judged ham, and an
    /// unsure verdict (omit for no unsure band).
    #[arg(long, value_parser = parse_costs)]
    costs: Option<Costs>,
}

fn parse_costs(s: &str) -> Result<Costs, String> {
    s.parse()
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum CombineArg {
    Tempered,
    Fisher,
    Sum,
    Textbook,
}

impl ModelArgs {
    fn params(&self) -> anyhow::Result<ValidParams> {
        let mut p = Params::default();
        if let Some(a) = self.alpha {
            p.a = a;
        }
        if let Some(b) = self.beta {
            p.b = b;
        }
        if let Some(c) = self.combine {
            p.combine = match c {
                CombineArg::Sum => Combine::Sum,
                CombineArg::Textbook => Combine::Textbook,
                CombineArg::Tempered => Combine::default(),
                CombineArg::Fisher => Combine::Fisher {
                    min_dev: self.min_strength.unwrap_or(0.1),
                    s: 1.0,
                    x: 0.5,
                },
            };
        }
        if let (Combine::Fisher { s, x, .. }, Some(power)) = (&mut p.combine, self.power) {
            // For the Fisher combination --power sets Robinson's strength s.
            *s = power;
            *x = 0.5;
        }
        if let Combine::Tempered {
            min_strength,
            power,
        } = &mut p.combine
        {
            if let Some(m) = self.min_strength {
                *min_strength = m;
            }
            if let Some(x) = self.power {
                *power = x;
            }
        }
        if let Some(w) = self.meta_weight {
            p.meta_weight = w;
        }
        if let Some(v) = self.var_floor {
            p.var_floor = v;
        }
        if let Some(v) = self.meta_clip {
            p.meta_clip = v;
        }
        p.check().map_err(anyhow::Error::msg)
    }

    fn costs(&self) -> Costs {
        self.costs.unwrap_or_default()
    }
}

#[derive(Args, Debug)]
struct EvalArgs {
    /// Fold file: lines fold<TAB>label<TAB>path.
    #[arg(long, value_name = "FILE", conflicts_with = "online")]
    folds: Option<PathBuf>,
    /// Folder the fold file's paths are relative to (default: the fold
    /// file's folder).
    #[arg(long, value_name = "DIR", requires = "folds")]
    root: Option<PathBuf>,
    /// TREC index for the online protocol: lines 'spam PATH' / 'ham PATH'.
    #[arg(long, value_name = "INDEX")]
    online: Option<PathBuf>,
    /// Labelled spam (Maildirs or directories), with --ham.
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with_all = ["folds", "online"])]
    spam: Vec<PathBuf>,
    /// Labelled ham (Maildirs or directories), with --spam.
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with_all = ["folds", "online"])]
    ham: Vec<PathBuf>,
    /// Number of folds for --spam/--ham.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(usize))]
    k: usize,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Write per-message scores (TSV) to this file.
    #[arg(long, value_name = "FILE")]
    scores: Option<PathBuf>,
    /// Messages with fewer known tokens than this are judged unsure.
    #[arg(long, default_value_t = 5)]
    min_known: usize,
    #[command(flatten)]
    model: ModelArgs,
}

/// How to read mailboxes; shared by every command that reads mail.
#[derive(Args, Debug, Clone)]
struct MailboxArgs {
    /// Escaping convention of mbox files: mboxrd strips one '>' from every
    /// '>…>From ' line, mboxo only from '>From '.
    #[arg(long, value_enum, default_value_t = Escaping::Mboxrd)]
    mbox_escaping: Escaping,
    /// Do not descend into Maildir subfolders (.Folder and nested Maildirs).
    #[arg(long)]
    no_recursive: bool,
}

impl MailboxArgs {
    fn options(&self) -> mailbox::Options {
        mailbox::Options {
            recursive: !self.no_recursive,
            escaping: match self.mbox_escaping {
                Escaping::Mboxrd => mailbox::MboxEscaping::Mboxrd,
                Escaping::Mboxo => mailbox::MboxEscaping::Mboxo,
            },
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum Escaping {
    Mboxrd,
    Mboxo,
}

#[derive(Args, Debug)]
struct TokensArgs {
    /// Messages to read: Maildirs, mbox files, directories of message files,
    /// single message files, or '-' for one message on standard input.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Print one JSON object per line: {"id":…, "tokens":[…], "metadata":{…}}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    mailbox: MailboxArgs,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Tokens(args) => tokens::run(&args),
        Command::Eval(args) => args.model.params().and_then(|params| {
            let settings = Settings {
                select_strength: args.model.min_strength.is_none(),
                params,
                costs: args.model.costs(),
                inner_folds: 5,
                min_known: args.min_known,
                refit_every: 250,
            };
            eval::run(&args, settings)
        }),
    };
    match outcome {
        Ok(Outcome::AllOk) => ExitCode::from(EXIT_OK),
        Ok(Outcome::SomeFailed) => ExitCode::from(EXIT_SOME_FAILED),
        Err(err) => {
            eprintln!("bayesmail: {err:#}");
            ExitCode::from(EXIT_FATAL)
        }
    }
}

/// How a command that went through its input ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    AllOk,
    SomeFailed,
}

/// True for the error a write gets when the reader of stdout went away
/// (`bayesmail tokens … | head`): that ends the output, it is not a failure.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }
}
