//! Command-line front end (clap derive). Turns arguments into checked
//! library types, runs the command, prints through `impl Write`, and reports
//! errors once.

mod tokens;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use bayesmail::mailbox;

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
