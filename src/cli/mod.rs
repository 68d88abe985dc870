//! Command-line front end (clap derive). Turns arguments into checked
//! library types, runs the command, prints through `impl Write`, and reports
//! errors once.

mod classify;
mod eval;
mod filter;
mod manual;
mod plot;
mod read;
mod scan;
mod tokens;
mod train;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

use bayesmail::config::{self, Config, ModelConfig};
use bayesmail::db::{DEFAULT_LOCK_WAIT, DbPaths};
use bayesmail::decision::Costs;
use bayesmail::decision::Decider;
use bayesmail::eval::protocol::{DEFAULT_REFIT_EVERY, Settings};
use bayesmail::fit::{self as training, DEFAULT_INNER_FOLDS};
use bayesmail::mailbox;
use bayesmail::model::ValidParams;

/// Exit status: every message was handled.
const EXIT_OK: u8 = 0;
/// Exit status: some messages could not be read or parsed (reported on
/// stderr); the others were handled.
const EXIT_SOME_FAILED: u8 = 1;
/// Exit status: the command could not run (bad arguments, unreadable path).
const EXIT_FATAL: u8 = 2;

/// A Bayesian spam filter for real mail.
///
/// bayesmail learns from mail you have sorted (train, learn, unlearn),
/// decides for each new message ham, unsure or spam with a calibrated
/// probability (classify, explain), and measures itself on labelled corpora
/// (eval). It reads Maildirs, mbox files, directory trees of message files,
/// single files and standard input.
///
/// The database is a directory: --db, else $BAYESMAIL_DB, else `db` in the
/// config file, else ~/.local/share/bayesmail. The config file (TOML) is
/// --config, else $BAYESMAIL_CONFIG, else ~/.config/bayesmail/config.toml if
/// it exists. Flags override the config file.
#[derive(Parser, Debug)]
#[command(name = "bayesmail", version, about, long_about, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// The options every command takes.
#[derive(Args, Debug)]
struct GlobalArgs {
    /// Database directory.
    #[arg(long, global = true, env = "BAYESMAIL_DB", value_name = "DIR")]
    db: Option<PathBuf>,
    /// Configuration file (TOML).
    #[arg(long, global = true, env = "BAYESMAIL_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Quiet: no progress, notes or summaries on stderr; errors still go
    /// there.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Verbose: say more on stderr (what each phase did and how long it
    /// took).
    #[arg(short, long, global = true)]
    verbose: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the features (tokens and metadata) of each message.
    ///
    /// Exit status: 0 if every message was read, 1 if some could not be
    /// (each reported on stderr, the rest printed), 2 if the command could
    /// not run at all.
    Tokens(TokensArgs),
    /// Learn from sorted folders: every message under --spam is spam, every
    /// message under --ham is ham.
    ///
    /// Idempotent: a message already learned with the same label is skipped;
    /// one learned with the other label (it moved from Junk to Inbox, say) is
    /// unlearned and learned again. Afterwards the combination strength is
    /// chosen and the calibration fitted by cross-validation over the given
    /// messages, and a new model snapshot is written for classification.
    ///
    /// A Maildir means its own cur/ and new/; its Maildir++ .Folders are
    /// read only when named or with --recursive. The run refuses, before
    /// changing anything, a path that does not exist and a message given
    /// under both --spam and --ham (each such message is named). No model
    /// is written until the database holds at least one message of each
    /// class. Each message is counted as it is read and the whole run is
    /// stored in one atomic write: Ctrl-C while reading stores nothing;
    /// after reading, the run finishes storing and says so.
    ///
    /// Exit status: 0 done, 1 done but some messages could not be read, 2
    /// failed (nothing half-written: the database keeps its old state or
    /// gains the whole run), 130 interrupted.
    Train(TrainArgs),
    /// Learn a message (a file, or '-' for stdin) as spam or ham; each
    /// message of an mbox file (or of an mbox on stdin).
    ///
    /// No model is written until the database holds at least one message of
    /// each class.
    Learn(LearnArgs),
    /// Forget a learned message (a file, or '-' for stdin); each message of
    /// an mbox.
    Unlearn(UnlearnArgs),
    /// Remove word tokens that are rare and old, to keep the database small.
    ///
    /// A word token seen in at most --max-count messages (ham and spam
    /// together) whose counts have not changed for --min-age days is
    /// removed; every other count stays exactly as it was, and so do the
    /// message counts and the registry. The byte view's buckets are a fixed
    /// table and are never pruned. The model is rewritten. Exit status: 0
    /// done, 2 failed (nothing changed).
    Prune(PruneArgs),
    /// Classify messages: verdict, calibrated P(spam) and model log-odds.
    ///
    /// Reads only the model snapshot, so it runs while a training run holds
    /// the database. Exit status: 0 if every message was classified, 1 if
    /// some could not be read, 2 if the command could not run (no model).
    Classify(ClassifyArgs),
    /// Classify whole mailboxes in parallel: one line per message (a table,
    /// --json lines or --csv) on stdout, a summary on stderr, and a progress
    /// bar when stderr is a terminal.
    ///
    /// With --move-spam-to (Maildir or message-file sources) or
    /// --copy-spam-to, spam goes into a Maildir (created if missing): a
    /// Maildir message keeps its name and cur/ or new/; others are named by
    /// their content. A move is one atomic rename within a filesystem, or
    /// copy, fsync, rename, then delete across filesystems; if interrupted,
    /// running the same scan again finishes it without duplicates. A message
    /// already in the target is never written twice, and a different file
    /// is never overwritten. --dry-run shows what would happen.
    ///
    /// Exit status: 0 if every message was classified (and moved or copied),
    /// 1 if some could not be read, parsed, moved or copied (each reported
    /// on stderr), 2 if the command could not run (no model, bad options).
    Scan(ScanArgs),
    /// The mail delivery hook: read one message on stdin, write it to stdout
    /// with X-Spam-Status (and, on spam, X-Spam-Flag: YES) added at the top
    /// (after an mbox envelope line), every other byte unchanged.
    ///
    /// X-Spam-Status is `Yes`, `No` or `Unsure`, then `probability=P`
    /// (calibrated P(spam)), `cutoff=C` (spam above C) and `version=V`. Fields
    /// named X-Spam-Status or X-Spam-Flag already in the message's header
    /// (forged, or from another filter; up to the first empty line) are
    /// renamed Old-X-Spam-Status / Old-X-Spam-Flag.
    ///
    /// Fails open: if the model is missing, damaged or of another version,
    /// the configuration, environment or command line is invalid, the
    /// message cannot be parsed or is
    /// larger than --max-size, the message goes out unchanged with
    /// `X-Spam-Status: Unknown, reason=R` (R one of no-model, model-version,
    /// model-unreadable, config-error, unparseable, too-large,
    /// internal-error), and the reason goes to stderr. The input is one
    /// message, judged whole: a body line that looks like an mbox separator
    /// is part of it (to judge each message of an mbox, use `classify -`).
    /// Empty input and input whose first line starts with a space or tab go
    /// out without our fields.
    ///
    /// Exit status, by default: 0 whenever the message was passed on,
    /// whatever the verdict; 75 (EX_TEMPFAIL: keep the message and retry) if
    /// it could not be (stdin closed or unreadable, stdout closed or
    /// failing). With
    /// --verdict-exit: 0 spam, 1 ham, 2 unsure, 3 no verdict or not passed
    /// on.
    Filter(FilterArgs),
    /// Show the tokens and metadata that moved a message's score the most.
    Explain(ExplainArgs),
    /// Show what the database holds: counts, vocabulary, size, versions.
    Stats(StatsArgs),
    /// Measure the filter on a labelled corpus (in memory; nothing is
    /// written to the database).
    ///
    /// Cross-validation over a fold file (--folds, lines
    /// fold<TAB>label<TAB>path) or labelled folders (--spam/--ham, --k folds),
    /// or the TREC online protocol over an index (--online, lines 'spam PATH'
    /// / 'ham PATH': classify each message in order, then learn it).
    Eval(Box<EvalArgs>),
    /// Print a shell completion script for bash, zsh, fish, elvish or
    /// PowerShell on stdout.
    ///
    /// For example, bash: `bayesmail completions bash >
    /// ~/.local/share/bash-completion/completions/bayesmail`; zsh: into a
    /// directory on $fpath as `_bayesmail`; fish: `bayesmail completions fish
    /// > ~/.config/fish/completions/bayesmail.fish`.
    Completions(CompletionsArgs),
    /// Print a man page (roff) on stdout: bayesmail(1), or with a command
    /// name that command's page, bayesmail-COMMAND(1).
    ///
    /// For example: `bayesmail man > ~/.local/share/man/man1/bayesmail.1`,
    /// or `bayesmail man train | man -l -`.
    Man(ManArgs),
}

/// Model hyperparameters and decision costs, overriding the config file.
#[derive(Args, Debug, Clone, Default)]
struct ModelArgs {
    /// Beta pseudo-count of presence (a in θ = (N_jc + a) / (N_c + a + b)).
    #[arg(long, value_name = "A")]
    alpha: Option<f64>,
    /// Beta pseudo-count of absence (b).
    #[arg(long, value_name = "B")]
    beta: Option<f64>,
    /// How token evidence is combined: tempered (mean over strong tokens),
    /// sum (naive Bayes over present tokens) or textbook (every vocabulary
    /// token, present or absent).
    #[arg(long, value_enum)]
    combine: Option<CombineArg>,
    /// Tempered combination: tokens with |LLR| below this (nats) are left
    /// out. Unset: chosen by cross-validation on the training data.
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
    /// Tempered combination of the byte view: byte n-grams with |LLR|
    /// below this (nats) are left out. Unset: chosen by cross-validation on
    /// the training data (pinning either strength pins both).
    #[arg(long)]
    bytes_min_strength: Option<f64>,
}

impl ModelArgs {
    fn overrides(&self) -> ModelConfig {
        ModelConfig {
            a: self.alpha,
            b: self.beta,
            combine: self.combine.map(|c| c.name().to_string()),
            min_strength: self.min_strength,
            power: self.power,
            var_floor: self.var_floor,
            meta_weight: self.meta_weight,
            meta_clip: self.meta_clip,
            bytes_min_strength: self.bytes_min_strength,
        }
    }
}

/// Decision settings, overriding the config file.
#[derive(Args, Debug, Clone, Default)]
struct DecisionArgs {
    /// Costs FP:FN[:UNSURE]: a ham judged spam, a spam judged ham, and an
    /// unsure verdict (omit the third for no unsure band). Default 20:1:0.5.
    #[arg(long, value_parser = parse_costs, value_name = "FP:FN[:U]")]
    costs: Option<Costs>,
    /// Messages with fewer known tokens than this are judged unsure
    /// (default 5).
    #[arg(long, value_name = "N")]
    min_known: Option<usize>,
}

fn parse_costs(s: &str) -> Result<Costs, String> {
    s.parse()
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum CombineArg {
    Tempered,
    Sum,
    Textbook,
}

impl CombineArg {
    fn name(self) -> &'static str {
        match self {
            CombineArg::Tempered => "tempered",
            CombineArg::Sum => "sum",
            CombineArg::Textbook => "textbook",
        }
    }
}

#[derive(Args, Debug)]
struct TrainArgs {
    /// Spam: Maildirs, mbox files, directories or message files.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    spam: Vec<PathBuf>,
    /// Ham: Maildirs, mbox files, directories or message files.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    ham: Vec<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for another process holding the database.
    #[arg(long, default_value_t = DEFAULT_LOCK_WAIT.as_secs(), value_name = "SECONDS")]
    wait: u64,
    #[command(flatten)]
    mailbox: MailboxArgs,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(Args, Debug)]
struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
struct ManArgs {
    /// The command whose page to print (default: the main page).
    #[arg(value_name = "COMMAND")]
    command: Option<String>,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("label").required(true).args(["spam", "ham"])))]
struct LearnArgs {
    /// Learn it as spam.
    #[arg(long)]
    spam: bool,
    /// Learn it as ham.
    #[arg(long)]
    ham: bool,
    /// The message file, or '-' for standard input.
    #[arg(default_value = "-", value_name = "FILE")]
    file: PathBuf,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for another process holding the database.
    #[arg(long, default_value_t = DEFAULT_LOCK_WAIT.as_secs(), value_name = "SECONDS")]
    wait: u64,
}

#[derive(Args, Debug)]
struct UnlearnArgs {
    /// The message file, or '-' for standard input.
    #[arg(default_value = "-", value_name = "FILE")]
    file: PathBuf,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for another process holding the database.
    #[arg(long, default_value_t = DEFAULT_LOCK_WAIT.as_secs(), value_name = "SECONDS")]
    wait: u64,
}

#[derive(Args, Debug)]
struct PruneArgs {
    /// Remove tokens seen in at most this many messages.
    #[arg(long, default_value_t = 1, value_name = "N")]
    max_count: u64,
    /// ... whose counts have not changed for this many days.
    #[arg(long, default_value_t = 30, value_name = "DAYS")]
    min_age: u32,
    /// Seconds to wait for another process holding the database.
    #[arg(long, default_value_t = DEFAULT_LOCK_WAIT.as_secs(), value_name = "SECONDS")]
    wait: u64,
}

#[derive(Args, Debug)]
struct ClassifyArgs {
    /// Messages: Maildirs, mbox files, directories, message files, or '-'.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// One JSON object per message: id, verdict, probability, log_odds.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    mailbox: MailboxArgs,
    #[command(flatten)]
    decision: DecisionArgs,
}

#[derive(Args, Debug)]
struct ScanArgs {
    /// Maildirs, mbox files, directories or message files.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// One JSON object per message: id, verdict, probability, log_odds,
    /// known_tokens, and action and to when spam was moved or copied.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV with a header row: id,verdict,probability,log_odds,known_tokens,action,to.
    #[arg(long)]
    csv: bool,
    /// Move messages judged spam into this Maildir.
    #[arg(long, value_name = "MAILDIR", conflicts_with = "copy_spam_to")]
    move_spam_to: Option<PathBuf>,
    /// Copy messages judged spam into this Maildir.
    #[arg(long, value_name = "MAILDIR")]
    copy_spam_to: Option<PathBuf>,
    /// Show what would be moved or copied; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    no_progress: bool,
    #[command(flatten)]
    mailbox: MailboxArgs,
    #[command(flatten)]
    decision: DecisionArgs,
}

#[derive(Args, Debug)]
struct FilterArgs {
    /// Exit with the verdict: 0 spam, 1 ham, 2 unsure, 3 no verdict or
    /// error (like bogofilter), for scripts that branch on it.
    #[arg(long)]
    verdict_exit: bool,
    /// Messages larger than this pass through unscored (reason=too-large):
    /// bytes, or a number with K, M or G. Default: the config file's
    /// [filter] max_size, else 16M.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    max_size: Option<u64>,
    #[command(flatten)]
    decision: DecisionArgs,
}

fn parse_size(s: &str) -> Result<u64, String> {
    config::parse_size(s)
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// The message file, or '-' for standard input.
    #[arg(default_value = "-", value_name = "FILE")]
    file: PathBuf,
    /// How many tokens to show.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Print as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    decision: DecisionArgs,
}

#[derive(Args, Debug)]
struct StatsArgs {
    /// Print as JSON.
    #[arg(long)]
    json: bool,
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
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(2..=100))]
    k: u16,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Write per-message scores (TSV) to this file.
    #[arg(long, value_name = "FILE")]
    scores: Option<PathBuf>,
    /// Write a ROC curve (roc.svg) and a reliability diagram
    /// (reliability.svg) into this folder (created if missing).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Judge with only these views (comma-separated: header, body, bytes,
    /// metadata), to measure each apart; the stacker gives the others no
    /// weight. Default: all.
    #[arg(long, value_name = "LIST")]
    views: Option<String>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    decision: DecisionArgs,
}

/// How to read mailboxes; shared by every command that reads mail.
#[derive(Args, Debug, Clone)]
struct MailboxArgs {
    /// Escaping convention of mbox files: mboxrd strips one '>' from every
    /// '>…>From ' line, mboxo only from '>From '.
    #[arg(long, value_enum, default_value_t = Escaping::Mboxrd)]
    mbox_escaping: Escaping,
    /// Also read a Maildir's subfolders (Maildir++ .Folder directories and
    /// nested Maildirs). Without it a Maildir means its own cur/ and new/:
    /// in Maildir++ the root is the inbox, and .Junk, .Trash or .Sent are
    /// other folders, read only when named.
    #[arg(long)]
    recursive: bool,
}

impl MailboxArgs {
    fn options(&self) -> mailbox::Options {
        mailbox::Options {
            recursive: self.recursive,
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

/// Everything a command needs from the environment, resolved once.
struct Context {
    config: Config,
    db: DbPaths,
}

impl Context {
    fn new(cli_db: Option<PathBuf>, cli_config: Option<PathBuf>) -> anyhow::Result<Context> {
        let expand = |path: PathBuf| config::expand_home(&path).map_err(anyhow::Error::msg);
        let config = match cli_config.map(expand).transpose()? {
            Some(path) => Config::load(&path)?,
            None => match config::default_config_file() {
                Some(path) => Config::load(&path)?,
                None => Config::default(),
            },
        };
        // --db and BAYESMAIL_DB as given (relative to where we run, as any
        // path on a command line), but with `~` expanded: an environment
        // variable set in a crontab or a delivery agent's configuration
        // is not expanded by a shell. Never a relative default.
        let db = match cli_db.map(expand).transpose()? {
            Some(db) => db,
            None => match &config.db {
                Some(db) => db.clone(),
                None => config::default_db_dir().map_err(anyhow::Error::msg)?,
            },
        };
        Ok(Context {
            config,
            db: DbPaths::new(db),
        })
    }

    fn params(&self, model: &ModelArgs) -> anyhow::Result<(ValidParams, bool)> {
        let (params, pinned) = self
            .config
            .params(&model.overrides())
            .map_err(anyhow::Error::msg)?;
        Ok((params.check().map_err(anyhow::Error::msg)?, pinned))
    }

    /// The database.
    fn database(&self) -> bayesmail::db::Database {
        bayesmail::db::Database::new(self.db.dir())
    }

    /// Opens the database's reader; without a model, says how to make one.
    fn reader(&self) -> anyhow::Result<bayesmail::db::Reader> {
        self.database().reader().map_err(|e| match e {
            bayesmail::db::Error::NoModel(_) => {
                anyhow::anyhow!("{e}: run `bayesmail train` first")
            }
            e => e.into(),
        })
    }

    fn decider(&self, d: &DecisionArgs) -> anyhow::Result<Decider> {
        Ok(Decider {
            costs: self.config.costs(d.costs).map_err(anyhow::Error::msg)?,
            min_known: d.min_known.unwrap_or(self.config.min_known()),
            min_per_class: self.config.min_per_class(),
        })
    }
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

/// A note on stderr, unless `-q`.
macro_rules! note {
    ($($arg:tt)*) => {
        if $crate::cli::verbosity() >= $crate::cli::Verbosity::Normal {
            eprintln!($($arg)*);
        }
    };
}

/// Detail on stderr, only with `-v`.
macro_rules! detail {
    ($($arg:tt)*) => {
        if $crate::cli::verbosity() >= $crate::cli::Verbosity::Verbose {
            eprintln!($($arg)*);
        }
    };
}
use {detail, note};

/// Whether a progress bar may be drawn: stderr is a terminal and not `-q`.
fn progress_allowed() -> bool {
    verbosity() > Verbosity::Quiet && std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Runs the command line and returns the process exit code.
pub fn main(streams: crate::ClosedStreams, args: Vec<std::ffi::OsString>) -> u8 {
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
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
    let command = match cli.command {
        // The delivery hook builds its own context: it must pass the
        // message on even when the configuration is broken.
        Command::Filter(args) => {
            return filter::run(streams, cli.global.db, cli.global.config, &args);
        }
        // Generated from the definitions alone: no config, no database.
        Command::Completions(args) => return finish(manual::completions(args.shell)),
        Command::Man(args) => return finish(manual::man(args.command.as_deref())),
        command => command,
    };
    let outcome = Context::new(cli.global.db, cli.global.config).and_then(|ctx| match command {
        Command::Tokens(args) => tokens::run(&args),
        Command::Train(args) => train::train(&ctx, &args),
        Command::Learn(args) => train::learn(&ctx, &args),
        Command::Unlearn(args) => train::unlearn(&ctx, &args),
        Command::Prune(args) => train::prune(&ctx, &args),
        Command::Classify(args) => classify::classify(&ctx, &args),
        Command::Scan(args) => scan::scan(&ctx, &args),
        Command::Filter(_) | Command::Completions(_) | Command::Man(_) => {
            unreachable!("returned above")
        }
        Command::Explain(args) => classify::explain(&ctx, &args),
        Command::Stats(args) => classify::stats(&ctx, &args),
        Command::Eval(args) => {
            let (params, pinned) = ctx.params(&args.model)?;
            let decider = ctx.decider(&args.decision)?;
            let settings = Settings {
                training: training::Settings {
                    select_strength: !pinned,
                    params,
                    inner_folds: DEFAULT_INNER_FOLDS,
                    inputs: match &args.views {
                        Some(list) => training::Inputs::parse(list).map_err(anyhow::Error::msg)?,
                        None => training::Inputs::default(),
                    },
                },
                decider,
                refit_every: DEFAULT_REFIT_EVERY,
            };
            eval::run(&args, settings)
        }
    });
    finish(outcome)
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
            eprintln!("bayesmail: {}", render_error(&err));
            EXIT_FATAL
        }
    }
}

/// An error and its causes as one text for a person: each cause once (a
/// cause whose text the message already shows, as when an error embeds its
/// source's text, is not repeated), joined by ": ", newlines in a message
/// (a TOML error's caret lines) kept as newlines, every line made safe for
/// a terminal.
fn render_error(err: &anyhow::Error) -> String {
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
        assert_eq!(seen, 13);
        let filter = cli.find_subcommand("filter").unwrap();
        assert!(
            filter
                .get_about()
                .is_some_and(|a| a.to_string().starts_with("The mail delivery hook"))
        );
        assert!(filter.get_arguments().any(|a| a.get_id() == "max_size"));
    }
}
