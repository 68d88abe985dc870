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
//! fast and many can run at once while a training run holds the database
//! (with `--store`, the model in Redis is asked on a second thread, given
//! up on after twice the store's timeout).
//!
//! Its arguments, one call of [`bayesmail::db::Database::status`] (the
//! verdict and its fields, or why there is none; with `--store`, of
//! [`bayesmail::db::stamp_shared_parsed`] on the global model in Redis),
//! and the message written
//! out through [`bayesmail::headers::write_with_fields`]; the rest is the
//! process's plumbing: standard streams that may be closed or
//! non-blocking, a size cap, a spool for the rest of a large message.

use std::io::{self, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;

use bayesmail::config::DEFAULT_FILTER_MAX_SIZE;
use bayesmail::db::{Reason, Status};
use bayesmail::decision::Verdict;
use bayesmail::fsutil::words;
use bayesmail::headers::write_with_fields;
use bayesmail::sanitize::for_terminal;

use super::{Context, FilterArgs};
use crate::ClosedStreams;

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

/// The `--verdict-exit` status of `status`.
fn exit_code(status: &Status) -> u8 {
    match status {
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

/// Runs `filter` and returns the exit status. Never fails before the
/// message has been passed on, whatever the configuration.
pub(super) fn run(streams: ClosedStreams, given: super::Given, args: &FilterArgs) -> u8 {
    let ctx = Context::new(given);
    let max_size = match &ctx {
        Ok(ctx) => ctx.config.filter_max_size(args.max_size),
        Err(_) => Ok(args.max_size.unwrap_or(DEFAULT_FILTER_MAX_SIZE)),
    };
    // A bad size setting is a bad configuration: the message goes out
    // unscored, like any other, under the default cap.
    let (max_size, size_error) = match max_size {
        Ok(n) => (n, None),
        Err(err) => (DEFAULT_FILTER_MAX_SIZE, Some(err)),
    };
    pass_on(streams, args.verdict_exit, max_size, |raw| {
        match (&ctx, size_error) {
            (Ok(ctx), None) => judge(ctx, args, raw),
            (Ok(ctx), Some(err)) => {
                warn(&ctx.file_fault("[filter] max_size", err).to_string());
                Status::Unknown(Reason::Config)
            }
            (Err(err), _) => {
                warn(&super::render_error(err));
                Status::Unknown(Reason::Config)
            }
        }
    })
}

/// Runs `filter` when its command line or environment could not be parsed
/// (`err`): the message is passed on unscored with `reason=config-error`,
/// as for a broken configuration file.
pub(super) fn run_failed_open(streams: ClosedStreams, verdict_exit: bool, err: &clap::Error) -> u8 {
    let rendered = err.render().to_string();
    if err.use_stderr() {
        let first = rendered.lines().next().unwrap_or("invalid command line");
        let first = first.strip_prefix("error: ").unwrap_or(first);
        warn(&format!("{first}; see `bayesmail filter --help`"));
    } else {
        // Help asked for in the mail path: it goes to stderr, the message
        // still goes out.
        let _ = write!(io::stderr().lock(), "{rendered}");
    }
    pass_on(streams, verdict_exit, DEFAULT_FILTER_MAX_SIZE, |_| {
        Status::Unknown(Reason::Config)
    })
}

/// If the command line asks for `filter`, whether it asks for
/// `--verdict-exit`; `None` for any other command. Read from the raw
/// arguments, for when clap could not parse them: the subcommand is the
/// first argument that is not a global option or its value. Which global
/// options take a value (as the next argument unless given as
/// `--name=value`) is read from the command's own definition. An option
/// whose value went missing (`--store-timeout $UNSET filter`) took
/// `filter` for its value: with no subcommand after it and a message on
/// standard input (not a terminal), that is a filter run too.
pub(super) fn invocation(args: &[std::ffi::OsString]) -> Option<bool> {
    let cli = <super::Cli as clap::CommandFactory>::command();
    let takes_value = |arg: &str| {
        cli.get_arguments().any(|a| {
            a.get_action().takes_values()
                && (a
                    .get_long()
                    .is_some_and(|l| arg.strip_prefix("--") == Some(l))
                    || a.get_short().is_some_and(|c| arg == format!("-{c}")))
        })
    };
    let verdict_exit = |from: usize| args[from..].iter().any(|a| a == "--verdict-exit");
    let mut value_was_filter = None;
    let mut i = 1;
    while let Some(arg) = args.get(i) {
        let arg = arg.to_string_lossy();
        if takes_value(&arg) {
            if args.get(i + 1).is_some_and(|v| v == "filter") {
                value_was_filter = Some(i + 2);
            }
            i += 2;
        } else if arg.starts_with('-') {
            // `--db=…`, a flag, `--`, or an option clap did not know.
            i += 1;
        } else {
            return (arg == "filter").then(|| verdict_exit(i + 1));
        }
    }
    // At a terminal it is someone typing, not a delivery agent: clap's
    // error is what they need, not a wait for a message.
    value_was_filter
        .filter(|_| !std::io::IsTerminal::is_terminal(&std::io::stdin()))
        .map(verdict_exit)
}

/// Reads the message, judges it with `score` (a panic there, a bug, gives
/// `reason=internal-error`), and passes it on with our fields. Returns the
/// exit status.
fn pass_on(
    streams: ClosedStreams,
    verdict_exit: bool,
    max_size: u64,
    score: impl FnOnce(&[u8]) -> Status,
) -> u8 {
    let io_failure = if verdict_exit {
        EXIT_ERROR
    } else {
        EXIT_TEMPFAIL
    };
    if streams.stdout {
        warn(
            "standard output is closed: nothing written; the delivery agent must keep the message",
        );
        return io_failure;
    }
    if streams.stdin {
        warn("standard input is closed: there is no message to pass on");
        return io_failure;
    }

    let stdin_file = raw_stream(0);
    let mut stdin = Stream(&stdin_file);
    // Room for most messages from the start: from an empty buffer the
    // standard library reads 32 bytes, then twice as many each time, a
    // system call each.
    let mut raw = Vec::with_capacity(64 * 1024);
    // At least 64 KiB, even under a smaller cap: where our fields go is read
    // off the first lines, which must be in memory whole.
    let limit = max_size.saturating_add(1).max(64 * 1024);
    // Read as a file, into the buffer as it is (a reader of our own would
    // have the buffer zeroed before each read); a descriptor left
    // non-blocking, once it would block, through `Stream`, which waits.
    let read = match (&*stdin_file).take(limit).read_to_end(&mut raw) {
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
            // What was read before is in `raw`.
            let left = limit - raw.len() as u64;
            (&mut stdin).take(left).read_to_end(&mut raw)
        }
        read => read,
    };
    if let Err(err) = read {
        warn(&format!(
            "reading the message from standard input: {}; nothing written",
            words(&err)
        ));
        return io_failure;
    }
    let too_large = raw.len() as u64 > max_size;

    let status = if too_large {
        Status::Unknown(Reason::TooLarge)
    } else {
        panic::catch_unwind(AssertUnwindSafe(|| score(&raw)))
            .unwrap_or(Status::Unknown(Reason::Internal))
    };
    if let Status::Unknown(reason) = &status {
        match reason {
            Reason::TooLarge => warn(&format!(
                "message larger than {max_size} bytes: passed through unscored"
            )),
            _ => warn(&format!(
                "no verdict ({}): message passed on unjudged",
                reason.name()
            )),
        }
    }

    // The rest of a too-large message is read before anything is written,
    // like the rest of any message: a caller that writes the whole message
    // before reading ours never deadlocks. It is spooled to an unnamed
    // temporary file, so memory stays bounded by the cap.
    let mut rest: Option<Box<dyn Read>> = None;
    if too_large {
        match spool(&mut stdin) {
            Ok(Spool::File(file)) => rest = Some(Box::new(file)),
            Ok(Spool::Unavailable(err)) => {
                // No temporary file (a full /tmp, a bad TMPDIR): the rest
                // streams from stdin instead. A caller that writes the whole
                // message before reading ours could stall, which is better
                // than a deferral that fails the same way at every retry.
                warn(&format!(
                    "cannot spool the rest of the message ({}): streaming it",
                    words(&err)
                ));
                rest = Some(Box::new(stdin));
            }
            Err(err) => {
                warn(&format!(
                    "reading the message from standard input: {}; nothing written",
                    words(&err)
                ));
                return io_failure;
            }
        }
    }

    let stdout = raw_stream(1);
    let mut out = io::BufWriter::with_capacity(64 * 1024, Stream(&stdout));
    // A panic while writing (a bug) may have written part of the message:
    // the delivery agent must keep it and try again, as for a write error.
    let written = panic::catch_unwind(AssertUnwindSafe(|| {
        write_message(&mut out, &raw, rest, &status)?;
        out.flush()
    }))
    .unwrap_or_else(|_| Err(io::Error::other("internal error while writing")));
    if let Err(err) = written {
        warn(&format!(
            "passing the message on failed: {}; the delivery agent must keep it",
            words(&err)
        ));
        return io_failure;
    }
    if verdict_exit { exit_code(&status) } else { 0 }
}

/// Standard input or output as a file, not through `io::stdin()` /
/// `io::stdout()`: those read EBADF (say, a stdout opened read-only) as an
/// empty message or a write that succeeded, which would lose the message.
/// Never closed: the descriptor belongs to the process.
fn raw_stream(fd: std::os::fd::RawFd) -> std::mem::ManuallyDrop<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: fds 0 and 1 are open (main checked them and put /dev/null on
    // closed ones), and ManuallyDrop never closes them.
    std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Where the rest of a too-large message went.
enum Spool {
    /// Into this unnamed temporary file, rewound.
    File(std::fs::File),
    /// Nowhere: no temporary file could be made (nothing was read).
    Unavailable(io::Error),
}

/// A standard stream that may have been left non-blocking by whoever
/// started us: a read or write that would block waits for the descriptor
/// instead of failing (which would defer the message for nothing).
struct Stream<'a>(&'a std::fs::File);

impl Stream<'_> {
    /// Retries `op` while it would block, waiting for `events` on the
    /// descriptor in between.
    fn blocking<T>(
        &self,
        events: libc::c_short,
        mut op: impl FnMut() -> io::Result<T>,
    ) -> io::Result<T> {
        use std::os::fd::AsRawFd;
        loop {
            match op() {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    let mut fd = libc::pollfd {
                        fd: self.0.as_raw_fd(),
                        events,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd, no timeout.
                    if unsafe { libc::poll(&mut fd, 1, -1) } < 0 {
                        let err = io::Error::last_os_error();
                        if err.kind() != io::ErrorKind::Interrupted {
                            return Err(err);
                        }
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                result => return result,
            }
        }
    }
}

impl Read for Stream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let file = self.0;
        self.blocking(libc::POLLIN, || (&*file).read(buf))
    }
}

impl Write for Stream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let file = self.0;
        self.blocking(libc::POLLOUT, || (&*file).write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Copies the rest of `input` into an unnamed temporary file. An error is
/// one of reading `input` or of the file once it had data.
fn spool(input: &mut impl Read) -> io::Result<Spool> {
    use std::io::Seek;
    let mut file = match tempfile::tempfile() {
        Ok(file) => file,
        Err(err) => return Ok(Spool::Unavailable(err)),
    };
    io::copy(input, &mut file)?;
    file.rewind()?;
    Ok(Spool::File(file))
}

/// Writes the message (`raw`, then `rest` if the message was larger than
/// what was read into memory) with the status fields added at the top and
/// fields of ours already in it renamed (see
/// [`bayesmail::headers::write_with_fields`]).
fn write_message(
    out: &mut dyn Write,
    raw: &[u8],
    rest: Option<Box<dyn Read + '_>>,
    status: &Status,
) -> io::Result<()> {
    let mut rest = rest;
    let added = write_with_fields(
        out,
        raw,
        rest.as_mut().map(|r| &mut **r as &mut dyn Read),
        &status.fields(),
    )?;
    if !added && !raw.is_empty() {
        warn("the message starts with a folded line: passed through without our headers");
    }
    Ok(())
}

/// Scores the message; any failure becomes an unknown status.
fn judge(ctx: &Context, args: &FilterArgs, raw: &[u8]) -> Status {
    // Debug builds can be told to panic here, so the tests can show that a
    // bug in judging still passes the message on.
    #[cfg(debug_assertions)]
    if std::env::var_os("BAYESMAIL_TEST_PANIC").is_some_and(|v| v == "judge") {
        panic!("BAYESMAIL_TEST_PANIC=judge");
    }
    let decider = match ctx.decider(&args.decision) {
        Ok(d) => d,
        Err(err) => {
            warn(&super::render_error(&err));
            return Status::Unknown(Reason::Config);
        }
    };
    let (status, why) = match ctx.shared() {
        Ok(None) => ctx.database().status(raw, &decider),
        Ok(Some(redis)) => match bayesmail::db::shared::SharedModel::of(&redis, None) {
            Ok(model) => {
                let timeout = ctx.store.as_ref().map_or(Duration::ZERO, |(_, t)| *t);
                judge_shared_within(model, raw, decider, 2 * timeout)
            }
            Err(err) => (Status::Unknown(Reason::Config), Some(err.to_string())),
        },
        Err(err) => (Status::Unknown(Reason::Config), Some(format!("{err:#}"))),
    };
    if let Some(why) = why {
        warn(&why);
    }
    status
}

/// Judges `raw` with the global model in Redis: the message is read
/// here, and the model asked on a thread of its own, given up on after
/// `bound` (see [`bayesmail::store::redis::within`]): the message must go
/// on, with `reason=store-unavailable`.
fn judge_shared_within(
    model: bayesmail::db::shared::SharedModel,
    raw: &[u8],
    decider: bayesmail::decision::Decider,
    bound: Duration,
) -> (Status, Option<String>) {
    use bayesmail::store::redis::Unanswered;
    let parsed = bayesmail::db::Parsed::of(raw);
    let judged = bayesmail::store::redis::within(bound, move || {
        // Debug builds can be told to panic here: the message still
        // goes on (the tests show it).
        #[cfg(debug_assertions)]
        if std::env::var_os("BAYESMAIL_TEST_PANIC").is_some_and(|v| v == "judge-shared") {
            panic!("BAYESMAIL_TEST_PANIC=judge-shared");
        }
        let stamped = bayesmail::db::stamp_shared_parsed(&model, None, &parsed, &decider).0;
        (stamped.status, stamped.why)
    });
    match judged {
        Ok(judged) => judged,
        Err(Unanswered::Late) => (
            Status::Unknown(Reason::StoreUnavailable),
            Some(format!(
                "the store gave no whole answer within {} ms",
                bound.as_millis()
            )),
        ),
        // No thread, or it panicked (which said so on stderr).
        Err(Unanswered::Failed) => (Status::Unknown(Reason::Internal), None),
    }
}

/// Reports on stderr. Writing there must never cost the message: a closed
/// or full stderr is ignored.
fn warn(message: &str) {
    let mut stderr = io::stderr().lock();
    // One prefixed line per line of the message (a TOML error has several),
    // so every line in a mail log says where it came from.
    for line in message.lines() {
        let _ = writeln!(stderr, "bayesmail filter: {}", for_terminal(line));
    }
}
