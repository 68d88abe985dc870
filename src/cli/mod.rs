//! Command-line front end (clap derive). Turns arguments into checked
//! library types, runs the command, prints through `impl Write`, and reports
//! errors once.

mod args;
mod classify;
mod eval;
mod filter;
mod learn;
mod manual;
mod plot;
mod scan;
mod serve;
mod tokens;
mod train;

use args::*;

use std::path::PathBuf;

use bayesmail::config::{self, Config};
use bayesmail::db::DbPaths;
use bayesmail::decision::Decider;
use bayesmail::eval::protocol::Settings;
use bayesmail::fit::{self as training, DEFAULT_INNER_FOLDS, Select};
use bayesmail::model::ValidParams;

/// Exit status: every message was handled.
const EXIT_OK: u8 = 0;
/// Exit status: some messages could not be read or parsed (reported on
/// stderr); the others were handled.
const EXIT_SOME_FAILED: u8 = 1;
/// Exit status: the command could not run (bad arguments, unreadable path).
const EXIT_FATAL: u8 = 2;

/// Everything a command needs from the environment, resolved once.
struct Context {
    config: Config,
    db: DbPaths,
    /// Where the counts are in Redis (`--store`, the config's `store`),
    /// and how long a command may take there.
    store: Option<(String, std::time::Duration)>,
    /// The global options as given, to read the settings again (serve's
    /// SIGHUP).
    given: Given,
    /// The configuration file read, if one was.
    config_file: Option<PathBuf>,
}

/// The global options that say where the settings and the counts are, as
/// given on the command line or in the environment.
#[derive(Debug, Clone, Default)]
struct Given {
    db: Option<PathBuf>,
    config: Option<PathBuf>,
    store: Option<String>,
    store_timeout: Option<u64>,
    /// Whether `db` and `store` came from the environment
    /// (`BAYESMAIL_DB`, `BAYESMAIL_STORE`) rather than the command line.
    db_from_env: bool,
    store_from_env: bool,
}

impl Given {
    /// Whether the counts are in the store rather than the directory: in
    /// the store whenever one is named (`--store`, `BAYESMAIL_STORE` or the
    /// configuration file), except for a `--db` typed on the command line
    /// where no `--store` is: a directory given to try something on must
    /// not be passed over for the fleet's store. A `BAYESMAIL_DB` left in a
    /// delivery script does not take a fleet host off its store.
    fn store_over_db(&self, config: &Config) -> bool {
        let store_typed = self.store.is_some() && !self.store_from_env;
        let db_typed = self.db.is_some() && !self.db_from_env;
        (self.store.is_some() || config.store.is_some()) && (store_typed || !db_typed)
    }
}

impl Context {
    fn new(given: Given) -> anyhow::Result<Context> {
        let (cli_db, cli_config) = (given.db.clone(), given.config.clone());
        let expand = |path: PathBuf| config::expand_home(&path).map_err(anyhow::Error::msg);
        let config_file = match cli_config.map(expand).transpose()? {
            Some(path) => Some(path),
            None => config::default_config_file(),
        };
        let config = match &config_file {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        // --db and BAYESMAIL_DB as given (relative to where we run, as any
        // path on a command line), but with `~` expanded: an environment
        // variable set in a crontab or a delivery agent's configuration
        // is not expanded by a shell. Never a relative default.
        let db = match cli_db.map(expand).transpose()? {
            Some(db) => db,
            None => match &config.db {
                Some(db) => db.clone(),
                None => config::default_db_dir()
                    .map_err(|e| anyhow::anyhow!("{e}; give --db or BAYESMAIL_DB"))?,
            },
        };
        let store = given
            .store
            .clone()
            .or_else(|| config.store.clone())
            .filter(|_| given.store_over_db(&config))
            .map(|url| {
                let timeout = given
                    .store_timeout
                    .or(config.store_timeout.map(u64::from))
                    .map_or(
                        bayesmail::store::redis::DEFAULT_TIMEOUT,
                        std::time::Duration::from_millis,
                    );
                (url, timeout)
            });
        Ok(Context {
            config,
            db: DbPaths::new(db),
            store,
            given,
            config_file,
        })
    }

    /// The Redis the counts are in, if `--store` (or the config) says so;
    /// nothing is connected yet.
    fn shared(&self) -> anyhow::Result<Option<bayesmail::store::redis::Redis>> {
        use bayesmail::store::redis::{Redis, RedisUrl};
        self.store
            .as_ref()
            .map(|(url, timeout)| Ok(Redis::new(&RedisUrl::parse(url)?, *timeout)?))
            .transpose()
    }

    /// [`Context::shared`] for a command that changes the counts: refused
    /// if that Redis may evict keys when full, and a warning if it would
    /// not say.
    fn shared_for_changes(&self) -> anyhow::Result<Option<bayesmail::store::redis::Redis>> {
        let shared = self.shared()?;
        if let Some(redis) = &shared
            && let Some(why) = redis.refuse_eviction()?
        {
            complain!("bayesmail: warning: {why}");
        }
        Ok(shared)
    }

    /// Where the counts are, for messages: `database DIR`, or `store URL`
    /// (its password left out).
    fn location(&self) -> anyhow::Result<String> {
        Ok(match &self.store {
            Some((url, _)) => format!(
                "store {}",
                bayesmail::store::redis::RedisUrl::parse(url)?.shown()
            ),
            None => format!(
                "database {}",
                bayesmail::sanitize::for_terminal(&self.db.dir().display().to_string())
            ),
        })
    }

    /// An error if the counts are in Redis: for the commands that work on a
    /// database directory only.
    fn directory_only(&self, command: &str) -> anyhow::Result<()> {
        if self.store.is_some() {
            anyhow::bail!(
                "--store: {command} works on a database directory (--db) only; with the counts in Redis use train, learn, unlearn, stats, prune, filter or serve"
            );
        }
        Ok(())
    }

    fn params(&self, model: &ModelArgs) -> anyhow::Result<(ValidParams, Select)> {
        let overrides = model.overrides();
        let checked = |config: &Config| {
            config
                .params(&overrides)
                .and_then(|(p, select)| Ok((p.check()?, select)))
        };
        checked(&self.config).map_err(|e| {
            // The file's fault if the options alone would do.
            match checked(&Config::default()) {
                Ok(_) => self.file_fault("[model]", e),
                Err(_) => anyhow::Error::msg(e),
            }
        })
    }

    /// An error of a value in the configuration file, naming the file and
    /// where in it (`what`: the table, or the table and key).
    fn file_fault(&self, what: &str, e: impl std::fmt::Display) -> anyhow::Error {
        match &self.config_file {
            Some(path) => anyhow::anyhow!("config file {}: {what}: {e}", path.display()),
            None => anyhow::anyhow!("{what}: {e}"),
        }
    }

    /// The database.
    fn database(&self) -> bayesmail::db::Database {
        bayesmail::db::Database::new(self.db.dir())
    }

    /// The database, for a command that changes it: refused to root when
    /// another user can change what its path leads to
    /// ([`bayesmail::db::Database::unsafe_for_root`], the writers' own
    /// check, said here before anything is read, with how to run it
    /// instead).
    /// Root's files in it (the journal, the learn log, the count store's)
    /// would be closed to that user, and `serve --user` would judge with a
    /// model it can no longer follow, then after a reload with none.
    fn database_to_change(&self) -> anyhow::Result<bayesmail::db::Database> {
        let database = self.database();
        if let Some(why) = database.unsafe_for_root() {
            let hint = run_as(&why);
            anyhow::bail!("{}{hint}", bayesmail::db::Error::Foreign { why });
        }
        Ok(database)
    }

    /// Opens the database's reader; without a model, says how to make one.
    fn reader(&self) -> anyhow::Result<bayesmail::db::Reader> {
        self.directory_only("this command")?;
        self.database().reader().map_err(|e| match e {
            bayesmail::db::Error::NoModel(_) => {
                // A database that learned one class so far has counts but
                // no model: the model needs both. One whose model could
                // not be written (a full disk) has it written by the next
                // change. Its counts are not read here: only a writer
                // opens them, and a reader must not be one.
                anyhow::anyhow!(
                    "{e}: a model is written once both ham and spam are learned (`bayesmail \
                     learn`, or `bayesmail train`): a database that has learned one class so far \
                     has none yet (`learn` said which it lacks); where both are, the last change \
                     could not write it, and the next learn or training run will"
                )
            }
            e => e.into(),
        })
    }

    fn decider(&self, d: &DecisionArgs) -> anyhow::Result<Decider> {
        Ok(Decider {
            costs: self
                .config
                .costs(d.costs)
                .map_err(|e| self.file_fault("[decision] costs", e))?,
            min_known: d.min_known.unwrap_or(self.config.min_known()),
            min_per_class: self.config.min_per_class(),
        })
    }
}

/// How to run a command root was refused as the user who can change the
/// path (` (runuser -u alice -- bayesmail …)`), where one user can.
fn run_as(why: &bayesmail::fsutil::Unsafe) -> String {
    why.owner
        .as_ref()
        .map(|owner| format!(" (runuser -u {owner} -- bayesmail …)"))
        .unwrap_or_default()
}

/// How much a command says on stderr besides its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verbosity {
    /// `-q`: errors only.
    Quiet = 0,
    /// Errors, notes, summaries, and progress on a terminal.
    Normal = 1,
    /// `-v`: also what each phase did.
    Verbose = 2,
}

/// Set once from `-q`/`-v` before any command runs; a process runs one
/// command, so a global spares threading it through every printer.
static VERBOSITY: std::sync::atomic::AtomicU8 =
    std::sync::atomic::AtomicU8::new(Verbosity::Normal as u8);

fn verbosity() -> Verbosity {
    match VERBOSITY.load(std::sync::atomic::Ordering::Relaxed) {
        0 => Verbosity::Quiet,
        1 => Verbosity::Normal,
        _ => Verbosity::Verbose,
    }
}

/// A line on stderr. Never a panic: a full disk or a reader gone there
/// loses the line, not the command's work or its exit status.
macro_rules! complain {
    ($($arg:tt)*) => {
        $crate::cli::stderr_line(format_args!($($arg)*))
    };
}

/// What `complain!` writes with.
fn stderr_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// A note on stderr, unless `-q`.
macro_rules! note {
    ($($arg:tt)*) => {
        if $crate::cli::verbosity() >= $crate::cli::Verbosity::Normal {
            $crate::cli::complain!($($arg)*);
        }
    };
}

/// Detail on stderr, only with `-v`.
macro_rules! detail {
    ($($arg:tt)*) => {
        if $crate::cli::verbosity() >= $crate::cli::Verbosity::Verbose {
            $crate::cli::complain!($($arg)*);
        }
    };
}
use {complain, detail, note};

/// Whether a progress bar may be drawn: stderr is a terminal and not `-q`.
fn progress_allowed() -> bool {
    verbosity() > Verbosity::Quiet && std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Runs the command line and returns the process exit code.
pub fn main(streams: crate::ClosedStreams, args: Vec<std::ffi::OsString>) -> u8 {
    use clap::{CommandFactory, FromArgMatches};
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .and_then(|mut matches| {
            let from_env =
                |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::EnvVariable);
            let sources = (from_env("db"), from_env("store"));
            Cli::from_arg_matches_mut(&mut matches).map(|cli| (cli, sources))
        });
    let (cli, (db_from_env, store_from_env)) = match parsed {
        Ok(parsed) => parsed,
        // The delivery hook must pass the message on even when its own
        // command line or environment is wrong: a mistake in a mail
        // server's configuration must not bounce or stall mail.
        // Help and version go to stdout, except for a `filter` reading a
        // message: that message must come out, not the help in its place.
        Err(err)
            if !err.use_stderr()
                && (filter::invocation(&args).is_none()
                    || std::io::IsTerminal::is_terminal(&std::io::stdin())) =>
        {
            err.exit()
        }
        Err(err) => match filter::invocation(&args) {
            Some(verdict_exit) => return filter::run_failed_open(streams, verdict_exit, &err),
            None if err.use_stderr()
                && err.kind()
                    != clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
            {
                use std::io::Write;
                let line = usage_error(&err.render().to_string(), &args);
                let _ = writeln!(
                    std::io::stderr(),
                    "bayesmail: {}",
                    bayesmail::sanitize::for_terminal(&line)
                );
                return EXIT_FATAL;
            }
            None => err.exit(),
        },
    };
    let level = if cli.global.quiet {
        Verbosity::Quiet
    } else if cli.global.verbose {
        Verbosity::Verbose
    } else {
        Verbosity::Normal
    };
    VERBOSITY.store(level as u8, std::sync::atomic::Ordering::Relaxed);
    let given = Given {
        db: cli.global.db,
        config: cli.global.config,
        store: cli.global.store,
        store_timeout: cli.global.store_timeout,
        db_from_env,
        store_from_env,
    };
    let command = match cli.command {
        // The delivery hook builds its own context: it must pass the
        // message on even when the configuration is broken.
        Command::Filter(args) => {
            return filter::run(streams, given, &args);
        }
        // Generated from the definitions alone: no config, no database.
        Command::Completions(args) => return finish(manual::completions(args.shell)),
        Command::Man(args) => return finish(manual::man(args.command.as_deref())),
        command => command,
    };
    let outcome = Context::new(given).and_then(|ctx| match command {
        Command::Tokens(args) => tokens::run(&args),
        Command::Train(args) => train::train(&ctx, &args),
        Command::Learn(args) => learn::learn(&ctx, &args),
        Command::Unlearn(args) => learn::unlearn(&ctx, &args),
        Command::Prune(args) => train::prune(&ctx, &args),
        Command::Classify(args) => classify::classify(&ctx, &args),
        Command::Scan(args) => scan::scan(&ctx, &args),
        Command::Serve(args) => serve::run(&ctx, &args),
        Command::Filter(_) | Command::Completions(_) | Command::Man(_) => {
            unreachable!("returned above")
        }
        Command::Explain(args) => classify::explain(&ctx, &args),
        Command::Stats(args) => classify::stats(&ctx, &args),
        Command::Eval(args) => {
            let (params, select) = ctx.params(&args.model)?;
            let decider = ctx.decider(&args.decision)?;
            let settings = Settings {
                training: training::Settings {
                    select,
                    params,
                    inner_folds: DEFAULT_INNER_FOLDS,
                    inputs: match &args.views {
                        Some(list) => training::Inputs::parse(list).map_err(anyhow::Error::msg)?,
                        None => training::Inputs::default(),
                    },
                },
                decider,
            };
            eval::run(&args, settings)
        }
    });
    finish(outcome)
}

/// A usage error as clap words it (the error, its tips, then a usage line
/// and a pointer to `--help`, on several lines), on one line: the error
/// and its tips, an environment variable of ours set but empty if the
/// error is about its option, then which `--help` to read. `args` is the
/// command line.
fn usage_error(text: &str, args: &[std::ffi::OsString]) -> String {
    let cli = <Cli as clap::CommandFactory>::command();
    let mut line = String::new();
    for part in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if part.starts_with("Usage:") || part.starts_with("For more information") {
            break;
        }
        let part = part.strip_prefix("error: ").unwrap_or(part);
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(part);
    }
    let subcommands: Vec<&clap::Command> = args
        .iter()
        .skip(1)
        .filter_map(|a| cli.find_subcommand(a))
        .take(1)
        .collect();
    for command in [&cli].into_iter().chain(subcommands.iter().copied()) {
        for arg in command.get_arguments() {
            let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) else {
                continue;
            };
            let empty = std::env::var_os(env).is_some_and(|v| v.is_empty());
            if empty && line.contains(&format!("'--{long}")) {
                line.push_str(&format!("; {} is set but empty", env.to_string_lossy()));
            }
        }
    }
    let help = match subcommands.first() {
        Some(sub) => format!("bayesmail {} --help", sub.get_name()),
        None => "bayesmail --help".to_string(),
    };
    format!("{line} (see `{help}`)")
}

/// Writes `line` and a newline on standard output: a write that fails (a
/// full disk, a reader gone) is the command's error, never a panic.
fn say(line: impl std::fmt::Display) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush())?;
    Ok(())
}

/// Prints an error once and maps the outcome to an exit code.
fn finish(outcome: anyhow::Result<Outcome>) -> u8 {
    match outcome {
        Ok(Outcome::AllOk) => EXIT_OK,
        Ok(Outcome::SomeFailed) => EXIT_SOME_FAILED,
        Ok(Outcome::Exit(code)) => code,
        // The reader of stdout went away (`bayesmail man | head`): the
        // output ends there, as with any Unix tool; nothing failed.
        Err(err) if is_broken_pipe(&err) => EXIT_OK,
        Err(err) => {
            complain!("bayesmail: {}", render_error(&err));
            EXIT_FATAL
        }
    }
}

/// An error and its causes as one text for a person: each cause once (a
/// cause whose text the message already shows, as when an error embeds its
/// source's text, is not repeated), joined by ": ", newlines in a message
/// kept as newlines (never escaped), every line made safe for a terminal.
pub(super) fn render_error(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        // An I/O error in words, as the errors that wrap one say it.
        let message = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => bayesmail::fsutil::words(io),
            None => cause.to_string(),
        };
        let message = message.trim();
        if message.is_empty() || text.contains(message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(message);
    }
    text.lines()
        .map(bayesmail::sanitize::for_terminal)
        .collect::<Vec<_>>()
        .join("\n")
}

/// How a command that went through its input ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    AllOk,
    SomeFailed,
    /// Ended early with this status (e.g. interrupted), already reported.
    Exit(u8),
}

/// True for the error a write gets when the reader of stdout went away
/// (`bayesmail tokens … | head`): that ends the output, it is not a failure.
/// Ends a command that streamed one line per message to `out`: flushes,
/// takes a closed stdout (`… | head`) as the end of the output rather than
/// an error, and says whether any of its messages failed (`failures`: could
/// not be read, was not mail, could not be parsed or acted on).
fn finish_stream(
    result: anyhow::Result<()>,
    out: &mut impl std::io::Write,
    failures: usize,
) -> anyhow::Result<Outcome> {
    match result.and_then(|()| out.flush().map_err(Into::into)) {
        Ok(()) => {}
        Err(err) if is_broken_pipe(&err) => {}
        Err(err) => return Err(err),
    }
    Ok(if failures > 0 {
        Outcome::SomeFailed
    } else {
        Outcome::AllOk
    })
}

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

    /// Issue 18, trap 7: each cause once, newlines as newlines.
    #[test]
    fn errors_show_each_cause_once_with_real_newlines() {
        let io = std::io::Error::from_raw_os_error(17);
        let shown = bayesmail::fsutil::words(&io);
        let err = anyhow::Error::new(bayesmail::db::Error::Create {
            path: "db".into(),
            source: io,
        })
        .context("opening the database");
        let text = render_error(&err);
        assert_eq!(text.matches(&shown).count(), 1, "{text}");
        assert!(
            text.starts_with("opening the database: cannot create"),
            "{text}"
        );
        let err = anyhow::anyhow!("line one\n  | line two\x1b[2J");
        assert_eq!(render_error(&err), "line one\n  | line two\\u{1b}[2J");
    }

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    /// Each subcommand is described by its own doc comment, never by that
    /// of an argument struct it flattens.
    #[test]
    fn each_subcommand_keeps_its_own_description() {
        let cli = Cli::command();
        let flattened = [
            "The options every command takes",
            "Model hyperparameters",
            "Decision settings",
            "How to read mailboxes",
        ];
        let mut seen = 0;
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            let about = sub.get_about().map(|a| a.to_string());
            let about = about.unwrap_or_else(|| panic!("{name} has no description"));
            assert!(
                !flattened.iter().any(|f| about.starts_with(f)),
                "{name}: {about}"
            );
            seen += 1;
        }
        assert_eq!(seen, 14);
        let filter = cli.find_subcommand("filter").unwrap();
        assert!(
            filter
                .get_about()
                .is_some_and(|a| a.to_string().starts_with("The mail delivery hook"))
        );
        assert!(filter.get_arguments().any(|a| a.get_id() == "max_size"));
    }
}
