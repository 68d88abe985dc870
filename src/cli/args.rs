//! The command line's definition (clap derive): every command, its
//! arguments and its help text. Dispatch is in the parent module.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

use bayesmail::config::{self, ModelConfig};
use bayesmail::db::DEFAULT_LOCK_WAIT;
use bayesmail::decision::Costs;
use bayesmail::mailbox;

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
pub(super) struct Cli {
    #[command(flatten)]
    pub(super) global: GlobalArgs,
    #[command(subcommand)]
    pub(super) command: Command,
}

/// The options every command takes.
#[derive(Args, Debug)]
pub(super) struct GlobalArgs {
    /// Database directory.
    #[arg(long, global = true, env = "BAYESMAIL_DB", value_name = "DIR")]
    pub(super) db: Option<PathBuf>,
    /// Configuration file (TOML).
    #[arg(long, global = true, env = "BAYESMAIL_CONFIG", value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// Keep the counts in Redis, shared by every host pointed at it, instead
    /// of in --db: redis://[USER][:PASSWORD@]HOST[:PORT][/DB][?prefix=NAME]
    /// (default prefix bayesmail), or rediss:// for TLS (&ca=FILE: the
    /// authority that signed the server's certificate). For train, learn,
    /// unlearn, stats, prune, filter (the global model) and serve (where
    /// each user named by a request has a model of its own there). A --db
    /// typed on the command line is used over a store from
    /// BAYESMAIL_STORE or the config file.
    #[arg(long, global = true, env = "BAYESMAIL_STORE", value_name = "URL")]
    pub(super) store: Option<String>,
    /// Milliseconds a request to Redis may take, connecting included,
    /// before the command gives up (serve and filter: the message gets no
    /// verdict, reason store-unavailable). Default 1000.
    #[arg(long, global = true, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) store_timeout: Option<u64>,
    /// Quiet: no progress, notes or summaries on stderr; errors still go
    /// there.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(super) quiet: bool,
    /// Verbose: say more on stderr (what each phase did and how long it
    /// took).
    #[arg(short, long, global = true)]
    pub(super) verbose: bool,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
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
    /// unlearned and learned again. Afterwards the pseudo-counts and the
    /// combination strengths are chosen and the calibration fitted by
    /// cross-validation over the given messages, and a new model snapshot
    /// is written for classification.
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
    /// gains the whole run), 130 interrupted, 75 a call to the count store
    /// hung for ten minutes (it recovers on the next open, as after a kill).
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
    /// done, 2 failed (nothing changed), 75 a call to the count store hung
    /// for ten minutes (it recovers on the next open, as after a kill).
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
    /// Run as a server that mail servers call: a milter (Postfix,
    /// Sendmail), spamd's protocol (spamc, Exim) and HTTP/JSON, with a model
    /// per user.
    ///
    /// Every option can also be given in the config file's [serve] table
    /// under the same name (spamd, milter, http and allow as lists); an
    /// option on the command line wins.
    ///
    /// Listens where told (TCP on HOST:PORT, or unix:PATH), judges each
    /// message with the user's own model (--user-db) or the database's, and
    /// learns through the same journal as `learn`. Loopback peers only
    /// unless --allow says otherwise. Stops on SIGTERM or SIGINT after the
    /// messages in flight; SIGHUP reads the configuration again and reopens
    /// every model.
    Serve(Box<ServeArgs>),
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
    /// / 'ham PATH': classify each message in order, then learn it, the
    /// stacker refitted on the stream's own judgments as `learn` refits it;
    /// figures also per window: messages 1-500, 501-2,000, the rest).
    ///
    /// Each ranking figure and verdict rate comes with its 95% interval (a
    /// stratified bootstrap of the messages scored): how far it could move
    /// on another draw of the same kind of mail. Two settings whose
    /// intervals overlap widely have not been told apart.
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
pub(super) struct ModelArgs {
    /// Beta pseudo-count of presence (a in θ = (N_jc + a) / (N_c + a + b)).
    /// If neither this nor --beta is given, training chooses a = b by
    /// cross-validation on the training data; a model built only by
    /// learning uses 0.1.
    #[arg(long, value_name = "A")]
    pub(super) alpha: Option<f64>,
    /// Beta pseudo-count of absence (b). Giving either pins both (the
    /// other at 0.1).
    #[arg(long, value_name = "B")]
    pub(super) beta: Option<f64>,
    /// How token evidence is combined: tempered (mean over strong tokens),
    /// sum (naive Bayes over present tokens) or textbook (every vocabulary
    /// token, present or absent).
    #[arg(long, value_enum)]
    pub(super) combine: Option<CombineArg>,
    /// Tempered combination: tokens with |LLR| below this (nats) are left
    /// out. Unset: chosen by cross-validation on the training data.
    #[arg(long)]
    pub(super) min_strength: Option<f64>,
    /// Tempered combination: divide the sum by n^power (1 = mean, 0 = sum).
    #[arg(long)]
    pub(super) power: Option<f64>,
    /// Weight of the metadata (Gaussian) evidence; 0 leaves it out.
    #[arg(long)]
    pub(super) meta_weight: Option<f64>,
    /// Variance floor of the Gaussian model, as a fraction of each
    /// feature's variance over both classes.
    #[arg(long)]
    pub(super) var_floor: Option<f64>,
    /// Clip each metadata feature's log-likelihood ratio to ± this (nats).
    #[arg(long)]
    pub(super) meta_clip: Option<f64>,
    /// Tempered combination of the byte view: byte n-grams with |LLR|
    /// below this (nats) are left out. Unset: chosen by cross-validation on
    /// the training data (pinning either strength pins both).
    #[arg(long)]
    pub(super) bytes_min_strength: Option<f64>,
    /// Leave out the online discriminative view (a logistic regression
    /// over each message's words, stepped by each message `learn` teaches,
    /// in order, and by `train` once through its calibration sample in a
    /// mixed order): the stacker does not weigh it and its weights are not
    /// learned. As `logistic = false` in `[model]`.
    #[arg(long)]
    pub(super) no_logistic: bool,
}

impl ModelArgs {
    pub(super) fn overrides(&self) -> ModelConfig {
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
            logistic: self.no_logistic.then_some(false),
        }
    }
}

/// Decision settings, overriding the config file.
#[derive(Args, Debug, Clone, Default)]
pub(super) struct DecisionArgs {
    /// Costs FP:FN[:UNSURE]: a ham judged spam, a spam judged ham, and an
    /// unsure verdict (omit the third for no unsure band). Default 20:1:0.5.
    #[arg(long, value_parser = parse_costs, value_name = "FP:FN[:U]")]
    pub(super) costs: Option<Costs>,
    /// Messages with fewer known tokens than this are judged unsure
    /// (default 5).
    #[arg(long, value_name = "N")]
    pub(super) min_known: Option<usize>,
}

fn parse_costs(s: &str) -> Result<Costs, String> {
    s.parse()
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub(super) enum CombineArg {
    Tempered,
    Sum,
    Textbook,
}

impl CombineArg {
    pub(super) fn name(self) -> &'static str {
        match self {
            CombineArg::Tempered => "tempered",
            CombineArg::Sum => "sum",
            CombineArg::Textbook => "textbook",
        }
    }
}

#[derive(Args, Debug)]
pub(super) struct TrainArgs {
    /// Spam: Maildirs, mbox files, directories or message files.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub(super) spam: Vec<PathBuf>,
    /// Ham: Maildirs, mbox files, directories or message files.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub(super) ham: Vec<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Seconds to wait for another process holding the database.
    #[arg(long, default_value_t = DEFAULT_LOCK_WAIT.as_secs(), value_name = "SECONDS")]
    pub(super) wait: u64,
    #[command(flatten)]
    pub(super) mailbox: MailboxArgs,
    #[command(flatten)]
    pub(super) model: ModelArgs,
}

#[derive(Args, Debug)]
pub(super) struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    pub(super) shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub(super) struct ManArgs {
    /// The command whose page to print (default: the main page).
    #[arg(value_name = "COMMAND")]
    pub(super) command: Option<String>,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("label").required(true).args(["spam", "ham"])))]
pub(super) struct LearnArgs {
    /// Learn it as spam.
    #[arg(long)]
    pub(super) spam: bool,
    /// Learn it as ham.
    #[arg(long)]
    pub(super) ham: bool,
    /// The message file, or '-' for standard input.
    #[arg(default_value = "-", value_name = "FILE")]
    pub(super) file: PathBuf,
    /// Who asks, for the database's learn log: imap for a mail client's
    /// move (Dovecot imapsieve's pipe program), else learn.
    #[arg(long, default_value = "learn", value_name = "ORIGIN")]
    pub(super) origin: bayesmail::db::Origin,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Seconds to wait for another process holding the database; then
    /// the message is left in the database's pending/ ("queued"), taken in
    /// by the next learn, unlearn, train or prune (the one holding it, as
    /// it ends).
    #[arg(long, default_value_t = DEFAULT_LOCK_WAIT.as_secs(), value_name = "SECONDS")]
    pub(super) wait: u64,
}

#[derive(Args, Debug)]
pub(super) struct UnlearnArgs {
    /// The message file, or '-' for standard input.
    #[arg(default_value = "-", value_name = "FILE")]
    pub(super) file: PathBuf,
    /// Who asks, for the database's learn log: imap for a mail client's
    /// move (Dovecot imapsieve's pipe program), else learn.
    #[arg(long, default_value = "learn", value_name = "ORIGIN")]
    pub(super) origin: bayesmail::db::Origin,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Seconds to wait for another process holding the database; then
    /// the message is left in the database's pending/ ("queued"), taken in
    /// by the next learn, unlearn, train or prune (the one holding it, as
    /// it ends).
    #[arg(long, default_value_t = DEFAULT_LOCK_WAIT.as_secs(), value_name = "SECONDS")]
    pub(super) wait: u64,
}

#[derive(Args, Debug)]
pub(super) struct PruneArgs {
    /// Remove tokens seen in at most this many messages.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(super) max_count: u64,
    /// ... whose counts have not changed for this many days.
    #[arg(long, default_value_t = 30, value_name = "DAYS")]
    pub(super) min_age: u32,
    /// With --store: then keep the model's Redis memory at most this
    /// (bytes; K, M, G suffixes), removing the words seen least and, among
    /// those, the oldest first.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) max_memory: Option<u64>,
    /// With --store: the model of this user (default: the global one).
    #[arg(long, value_name = "NAME", conflicts_with = "all_users")]
    pub(super) user: Option<String>,
    /// With --store: the global model and every user's.
    #[arg(long)]
    pub(super) all_users: bool,
    /// Seconds to wait for another process holding the database.
    #[arg(long, default_value_t = DEFAULT_LOCK_WAIT.as_secs(), value_name = "SECONDS")]
    pub(super) wait: u64,
}

#[derive(Args, Debug)]
pub(super) struct ClassifyArgs {
    /// Messages: Maildirs, mbox files, directories, message files, or '-'.
    #[arg(required = true, value_name = "PATH")]
    pub(super) paths: Vec<PathBuf>,
    /// One JSON object per message: id, verdict, reason (when unsure
    /// whatever the probability), probability, log_odds, known_tokens.
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) mailbox: MailboxArgs,
    #[command(flatten)]
    pub(super) decision: DecisionArgs,
}

#[derive(Args, Debug)]
pub(super) struct ScanArgs {
    /// Maildirs, mbox files, directories or message files.
    #[arg(required = true, value_name = "PATH")]
    pub(super) paths: Vec<PathBuf>,
    /// One JSON object per message: id, verdict, reason (why an unsure
    /// verdict is unsure whatever its probability: young-model,
    /// few-known-words or unfamiliar), probability, log_odds, known_tokens,
    /// and action and to when spam was moved or copied.
    #[arg(long, conflicts_with = "csv")]
    pub(super) json: bool,
    /// CSV with a header row: id,verdict,probability,log_odds,known_tokens,action,to.
    #[arg(long)]
    pub(super) csv: bool,
    /// Move messages judged spam into this Maildir.
    #[arg(long, value_name = "MAILDIR", conflicts_with = "copy_spam_to")]
    pub(super) move_spam_to: Option<PathBuf>,
    /// Copy messages judged spam into this Maildir.
    #[arg(long, value_name = "MAILDIR")]
    pub(super) copy_spam_to: Option<PathBuf>,
    /// Show what would be moved or copied; change nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    pub(super) no_progress: bool,
    #[command(flatten)]
    pub(super) mailbox: MailboxArgs,
    #[command(flatten)]
    pub(super) decision: DecisionArgs,
}

#[derive(Args, Debug)]
pub(super) struct FilterArgs {
    /// Exit with the verdict: 0 spam, 1 ham, 2 unsure, 3 no verdict or
    /// error (like bogofilter), for scripts that branch on it.
    #[arg(long)]
    pub(super) verdict_exit: bool,
    /// Messages larger than this pass through unscored (reason=too-large):
    /// bytes, or a number with K, M or G. Default: the config file's
    /// [filter] max_size, else 16M.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub(super) max_size: Option<u64>,
    #[command(flatten)]
    pub(super) decision: DecisionArgs,
}

fn parse_size(s: &str) -> Result<u64, String> {
    config::parse_size(s)
}

#[derive(Args, Debug)]
pub(super) struct ExplainArgs {
    /// The message file, or '-' for standard input.
    #[arg(default_value = "-", value_name = "FILE")]
    pub(super) file: PathBuf,
    /// How many tokens to show.
    #[arg(long, default_value_t = 20)]
    pub(super) top: usize,
    /// Print as JSON.
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) decision: DecisionArgs,
}

#[derive(Args, Debug)]
pub(super) struct StatsArgs {
    /// Print as JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// With --store: the model of this user (default: the global one).
    #[arg(long, value_name = "NAME")]
    pub(super) user: Option<String>,
}

#[derive(Args, Debug)]
pub(super) struct EvalArgs {
    /// Fold file: lines fold<TAB>label<TAB>path.
    #[arg(long, value_name = "FILE", conflicts_with = "online")]
    pub(super) folds: Option<PathBuf>,
    /// Folder the fold file's paths are relative to (default: the fold
    /// file's folder).
    #[arg(long, value_name = "DIR", requires = "folds")]
    pub(super) root: Option<PathBuf>,
    /// TREC index for the online protocol: lines 'spam PATH' / 'ham PATH'.
    #[arg(long, value_name = "INDEX")]
    pub(super) online: Option<PathBuf>,
    /// Labelled spam (Maildirs or directories), with --ham.
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with_all = ["folds", "online"])]
    pub(super) spam: Vec<PathBuf>,
    /// Labelled ham (Maildirs or directories), with --spam.
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with_all = ["folds", "online"])]
    pub(super) ham: Vec<PathBuf>,
    /// Number of folds for --spam/--ham.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(2..=100))]
    pub(super) k: u16,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(super) json: bool,
    /// Write per-message scores (TSV) to this file.
    #[arg(long, value_name = "FILE")]
    pub(super) scores: Option<PathBuf>,
    /// Write a ROC curve (roc.svg) and a reliability diagram
    /// (reliability.svg) into this folder (created if missing).
    #[arg(long, value_name = "DIR")]
    pub(super) plot: Option<PathBuf>,
    /// Judge with only these views (comma-separated: header, body, bytes,
    /// metadata, logistic), to measure each apart; the stacker gives the
    /// others no weight. Default: all.
    #[arg(long, value_name = "LIST")]
    pub(super) views: Option<String>,
    #[command(flatten)]
    pub(super) model: ModelArgs,
    #[command(flatten)]
    pub(super) decision: DecisionArgs,
}

/// How to read mailboxes; shared by every command that reads mail.
#[derive(Args, Debug, Clone)]
pub(super) struct MailboxArgs {
    /// Escaping convention of mbox files: mboxrd strips one '>' from every
    /// '>…>From ' line, mboxo only from '>From '.
    #[arg(long, value_enum, default_value_t = Escaping::Mboxrd)]
    pub(super) mbox_escaping: Escaping,
    /// Also read a Maildir's subfolders (Maildir++ .Folder directories and
    /// nested Maildirs). Without it a Maildir means its own cur/ and new/:
    /// in Maildir++ the root is the inbox, and .Junk, .Trash or .Sent are
    /// other folders, read only when named.
    #[arg(long)]
    pub(super) recursive: bool,
}

impl MailboxArgs {
    pub(super) fn options(&self) -> mailbox::Options {
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
pub(super) enum Escaping {
    Mboxrd,
    Mboxo,
}

#[derive(Args, Debug)]
pub(super) struct TokensArgs {
    /// Messages to read: Maildirs, mbox files, directories of message files,
    /// single message files, or '-' for one message on standard input.
    #[arg(required = true, value_name = "PATH")]
    pub(super) paths: Vec<PathBuf>,
    /// Print one JSON object per line: {"id":…, "tokens":[…], "metadata":{…},
    /// "bytes":[{"bucket":…, "grams":[…]}, …]} (the byte view's buckets and
    /// the 4-grams in each).
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) mailbox: MailboxArgs,
}

/// `serve`'s arguments.
#[derive(Args, Debug, Clone)]
pub(super) struct ServeArgs {
    /// Speak spamd's protocol (SPAMC/1.5) on ADDR: HOST:PORT or unix:PATH
    /// (repeatable).
    #[arg(long, value_name = "ADDR")]
    pub(super) spamd: Vec<bayesmail::serve::Addr>,
    /// Speak the milter protocol (version 6) on ADDR (repeatable).
    #[arg(long, value_name = "ADDR")]
    pub(super) milter: Vec<bayesmail::serve::Addr>,
    /// Speak HTTP/JSON on ADDR (repeatable).
    #[arg(long, value_name = "ADDR")]
    pub(super) http: Vec<bayesmail::serve::Addr>,
    /// Each user's database: an absolute path with %u (user), %l (its local
    /// part), %d (its domain), e.g. /var/lib/bayesmail/%d/%l. Without it
    /// every message is judged by --db.
    #[arg(long, value_name = "PATTERN")]
    pub(super) user_db: Option<String>,
    /// With --store: milliseconds the counts read from Redis are used
    /// again for the next messages before they are read anew, so that a
    /// learn on another server changes this one's verdicts within this
    /// time (this server's own learns at once). 0 reads every message's
    /// counts from Redis. Default 500.
    #[arg(long, value_name = "MS")]
    pub(super) store_cache_ms: Option<u64>,
    /// With --store: keep each model's Redis memory (the global one's and
    /// each user's) under this (bytes; K, M, G suffixes), checked at start
    /// and every minute; over it, the words seen least and, among those,
    /// the oldest are removed first. Default: no cap (see `prune`).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) store_max_memory: Option<u64>,
    /// A user's model judges once it holds this many ham and this many
    /// spam; before, --db's model does. Default 20.
    #[arg(long, value_name = "N")]
    pub(super) min_user_messages: Option<u64>,
    /// Networks TCP peers may connect from (ADDRESS or ADDRESS/PREFIX,
    /// repeatable). Default: loopback only.
    #[arg(long, value_name = "NETWORK")]
    pub(super) allow: Vec<bayesmail::serve::Network>,
    /// Mode of the Unix sockets, in octal. Default 660.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub(super) socket_mode: Option<u32>,
    /// Group of the Unix sockets (a name or a number).
    #[arg(long, value_name = "GROUP")]
    pub(super) socket_group: Option<String>,
    /// After binding, run as this user (and its group): for a server
    /// started as root to listen on a low port.
    #[arg(long, value_name = "USER")]
    pub(super) user: Option<String>,
    /// Messages larger than this (bytes; K, M, G suffixes) get no verdict
    /// and are passed on unchanged. Default: filter's cap.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) max_size: Option<u64>,
    /// Bytes of messages held at once by each protocol's connections, as
    /// they arrive (K, M, G suffixes; at least --max-size): a message that
    /// would pass it gets no verdict (reason=busy) and is passed on.
    /// Default 512M.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) max_held: Option<u64>,
    /// Connections served at once on each listener; more wait to be
    /// accepted. Default 256.
    #[arg(long, value_name = "N")]
    pub(super) max_connections: Option<usize>,
    /// Megabytes of models kept in memory at once (least recently used
    /// out). Default 512.
    #[arg(long, value_name = "MB")]
    pub(super) cache_mb: Option<u64>,
    /// Seconds a client may send nothing, or leave its answer unread (64
    /// KiB of it, for spamd), before it is dropped; taken as at least 1 and
    /// at most 86400. A spamd request or an HTTP request's body must be
    /// whole within four times this, or keep coming at 8 KiB/s. Default 30.
    #[arg(long, value_name = "SECONDS")]
    pub(super) timeout: Option<u64>,
    /// One log line per message on stderr (id, user, verdict, P, model, ms).
    #[arg(long)]
    pub(super) log_messages: bool,
    /// What the milter tells the MTA to do with a message judged spam:
    /// accept (with our fields), reject (550 5.7.1), discard, or
    /// quarantine (Postfix's hold queue, with our fields). Every other
    /// message is accepted with our fields. Default accept.
    #[arg(long, value_name = "ACTION")]
    pub(super) milter_spam_action: Option<bayesmail::serve::SpamAction>,
    /// The characters that start an address extension in a user name's
    /// local part, as Postfix's recipient_delimiter (Debian sets +):
    /// alice+lists@example.org, as a milter's recipient, spamd's User or
    /// HTTP's, is judged and learned by alice@example.org's model. A
    /// trailing dot of the domain is always left out. Read again on
    /// SIGHUP. Default none.
    #[arg(long, value_name = "CHARS")]
    pub(super) recipient_delimiter: Option<String>,
    #[command(flatten)]
    pub(super) decision: DecisionArgs,
}

pub(super) fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not an octal mode such as 660"))
}
