//! The `bayesmail` command: parses the command line, runs one command from
//! the library, and maps the outcome to an exit code. All the work is in the
//! library; this binary only translates.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
