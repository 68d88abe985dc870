//! `bayesmail completions` and `bayesmail man`: shell completion scripts
//! (clap_complete) and man pages (clap_mangen), both generated from the
//! clap definitions so they cannot drift from the real command line.

use std::io::Write;

use anyhow::{Result, bail};
use clap::CommandFactory;

use super::{Cli, Outcome};

/// The whole command line, every deferred subcommand's arguments defined.
fn built() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

/// Writes the completion script for `shell` to stdout.
pub(super) fn completions(shell: clap_complete::Shell) -> Result<Outcome> {
    let mut cmd = built();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "bayesmail", &mut script);
    write_stdout(&script)
}

/// Writes bayesmail(1), or bayesmail-COMMAND(1) for `command`, to stdout.
pub(super) fn man(command: Option<&str>) -> Result<Outcome> {
    let cmd = built();
    let page = match command {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) => {
                // Named as man(1) finds it, with the version and the
                // parent's authors a subcommand does not carry.
                let full = format!("bayesmail-{}", sub.get_name());
                sub.clone()
                    .name(full.clone())
                    .bin_name(format!("bayesmail {}", sub.get_name()))
                    .display_name(full)
                    .version(env!("CARGO_PKG_VERSION"))
            }
            None => {
                let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
                bail!(
                    "no command named '{name}'; the commands are: {}",
                    names.join(", ")
                );
            }
        },
    };
    let mut roff = Vec::new();
    clap_mangen::Man::new(page).render(&mut roff)?;
    write_stdout(&roff)
}

fn write_stdout(bytes: &[u8]) -> Result<Outcome> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(Outcome::AllOk),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Outcome::AllOk),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subcommand_has_a_page_that_names_its_options() {
        let cmd = built();
        for sub in cmd.get_subcommands() {
            let name = sub.get_name();
            let page = sub.clone().name(format!("bayesmail-{name}"));
            let mut roff = Vec::new();
            clap_mangen::Man::new(page).render(&mut roff).unwrap();
            let roff = String::from_utf8(roff).unwrap();
            assert!(roff.contains(&format!("bayesmail\\-{name}")), "{name}");
            for arg in sub.get_arguments().filter_map(|a| a.get_long()) {
                let arg = arg.replace('-', "\\-");
                assert!(roff.contains(&arg), "{name}: --{arg} missing");
            }
        }
    }
}
