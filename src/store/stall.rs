//! A bound on how long one call into the count store may take.
//!
//! sled 0.34 can deadlock under load (its open issue 1412: in a
//! transaction's commit, the committing thread holds the segment
//! accountant's mutex while it waits for a write that the I/O threads, each
//! waiting for that mutex, can never do; reads are reported to hang too).
//! Such a call never returns, and the process holds the writers' lock until
//! someone kills it: every later `learn`, move or training run waits on it.
//! A retraining that jams is worse than one that fails, so every call into
//! sled (opening the store, each read and write, closing it) is watched
//! (`watch`); one that has not returned after [`STALL_LIMIT`] ends the
//! process with a one-line error on stderr and exit status [`STALL_EXIT`].
//! The locks go with the process, and sled recovers its files on the next
//! open as after any kill (a transaction is whole or absent). A daemon
//! (`serve`) is ended too: its learns for that database would wait for good,
//! and its supervisor starts it again.
//!
//! Nothing a healthy store does comes near the limit: the largest single
//! call is a whole training run's write, or the conversion of an old
//! store's format, each a few seconds for a corpus of thousands. A process
//! stopped past the limit (a suspended job) is given [`STALL_GRACE`] more
//! after the watchdog first sees the deadline passed, for a call that
//! resumed to return.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long one call into the count store may take before the process is
/// ended (ten minutes).
pub const STALL_LIMIT: Duration = Duration::from_secs(600);

/// How long past its deadline a call is still given once the watchdog has
/// seen the deadline pass (it may itself have been stopped).
pub const STALL_GRACE: Duration = Duration::from_secs(10);

/// The exit status of a process ended by a stalled call: 75, `EX_TEMPFAIL`
/// of `sysexits.h`, so that a mail server that ran the command (a `learn`
/// from a Sieve or procmail rule) tries it again later.
pub const STALL_EXIT: i32 = 75;

/// What the watchdog tells: a call that stalled, or that it cannot watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Report<'a> {
    /// A call has not returned (the line says which).
    Stuck(&'a str),
    /// The watchdog could not start (the line says why).
    Unwatched(&'a str),
}

/// What to do with a report.
type OnStall = Box<dyn Fn(Report<'_>) + Send + Sync>;

/// A watched call: when it must have returned, whether that deadline was
/// already seen passing once (the grace), and what it is.
struct Deadline {
    at: Instant,
    overdue: bool,
    what: String,
    since: Instant,
}

/// Deadlines of the calls being watched, by a number of their own.
#[derive(Default)]
struct Armed {
    next: u64,
    deadlines: BTreeMap<u64, Deadline>,
    /// Until when the watchdog sleeps (None: until told), so that a call
    /// wakes it only when it must wake sooner: calls come and go without
    /// a wake-up each.
    sleeps_until: Option<Instant>,
}

/// A thread that wakes at the earliest deadline of the calls it watches.
pub(crate) struct Watchdog {
    armed: Mutex<Armed>,
    changed: Condvar,
    limit: Duration,
    grace: Duration,
    on_stall: OnStall,
}

impl Watchdog {
    /// A watchdog with its own thread, calling `on_stall` once for each
    /// call still armed `limit` after it was armed and `grace` after the
    /// watchdog first saw that. If the thread cannot be started, calls go
    /// unwatched (as before there was a watchdog, which must not stop
    /// them) and `on_stall` is told so.
    pub(crate) fn start(limit: Duration, grace: Duration, on_stall: OnStall) -> Arc<Watchdog> {
        let dog = Arc::new(Watchdog {
            armed: Mutex::new(Armed::default()),
            changed: Condvar::new(),
            limit,
            grace,
            on_stall,
        });
        let watching = Arc::clone(&dog);
        let started = std::thread::Builder::new()
            .name("store-watchdog".into())
            .spawn(move || watching.run());
        if let Err(e) = started {
            (dog.on_stall)(Report::Unwatched(&format!(
                "cannot start the thread that bounds calls into the count store ({e}); \
                 a call that hangs will not be ended"
            )));
        }
        dog
    }

    /// Watches one call, described by `what`, until the guard is dropped.
    pub(crate) fn watch(self: &Arc<Self>, what: String) -> Watch {
        let mut armed = lock(&self.armed);
        let id = armed.next;
        armed.next += 1;
        let since = Instant::now();
        let at = since + self.limit;
        let overdue = false;
        let deadline = Deadline {
            at,
            overdue,
            what,
            since,
        };
        armed.deadlines.insert(id, deadline);
        let wake = armed.sleeps_until.is_none_or(|until| until > at);
        drop(armed);
        if wake {
            self.changed.notify_one();
        }
        Watch {
            dog: Arc::clone(self),
            id,
        }
    }

    fn run(&self) {
        let mut armed = lock(&self.armed);
        loop {
            let now = Instant::now();
            let mut stalled = Vec::new();
            armed.deadlines.retain(|_, d| {
                if d.at > now {
                    true
                } else if !d.overdue {
                    d.overdue = true;
                    d.at = now + self.grace;
                    true
                } else {
                    stalled.push((std::mem::take(&mut d.what), now - d.since));
                    false
                }
            });
            if !stalled.is_empty() {
                // Said without the lock: a writer finishing (or starting)
                // a call must never wait on a stderr that blocks.
                drop(armed);
                for (what, taken) in stalled {
                    (self.on_stall)(Report::Stuck(&format!(
                        "{what} has not returned after {} s: the store is stuck (a known \
                         sled deadlock); ending the process so that the database is free \
                         again (it recovers as after a kill)",
                        taken.as_secs()
                    )));
                }
                armed = lock(&self.armed);
                continue;
            }
            let next = armed.deadlines.values().map(|d| d.at).min();
            armed.sleeps_until = next;
            armed = match next {
                None => self.changed.wait(armed).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.changed
                        .wait_timeout(armed, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// The lock, whether or not a thread panicked holding it (the map stays
/// consistent: every change is one insert, update or remove).
fn lock(armed: &Mutex<Armed>) -> std::sync::MutexGuard<'_, Armed> {
    armed.lock().unwrap_or_else(|e| e.into_inner())
}

/// A call being watched: dropping it (the call returned, or unwound)
/// disarms it.
pub(crate) struct Watch {
    dog: Arc<Watchdog>,
    id: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The watchdog, if it wakes for this deadline, finds it gone.
        lock(&self.dog.armed).deadlines.remove(&self.id);
    }
}

/// [`STALL_LIMIT`] and [`STALL_GRACE`]; debug builds can be given both
/// (`BAYESMAIL_TEST_STALL_MS`), so that the tests can show a stalled call
/// ending the process.
fn limits() -> (Duration, Duration) {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("BAYESMAIL_TEST_STALL_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let ms = Duration::from_millis(ms.min(3_600_000));
        return (ms, ms);
    }
    (STALL_LIMIT, STALL_GRACE)
}

/// Watches one call into the count store, described by `what` (which
/// names the store), until the guard is dropped: see the
/// [module docs](self).
pub(crate) fn watch(what: impl Into<String>) -> Watch {
    static DOG: OnceLock<Arc<Watchdog>> = OnceLock::new();
    DOG.get_or_init(|| {
        let (limit, grace) = limits();
        Watchdog::start(
            limit,
            grace,
            Box::new(|report| match report {
                Report::Unwatched(line) => {
                    let _ = writeln!(std::io::stderr(), "bayesmail: {line}");
                }
                Report::Stuck(line) => {
                    // The process must end whatever becomes of the line:
                    // never a panic (stderr may be a closed pipe), never a
                    // wait on Rust's stderr lock, and a stderr that blocks
                    // (a full pipe) is cut short by the alarm, whose
                    // default action ends the process.
                    let text = format!("bayesmail: {line}\n");
                    // SAFETY: signal, alarm and write take no Rust state;
                    // the buffer outlives the write. _exit ends the process
                    // at once: the stuck thread holds sled's locks, and
                    // nothing may run that could wait on them (destructors,
                    // exit handlers).
                    unsafe {
                        libc::signal(libc::SIGALRM, libc::SIG_DFL);
                        libc::alarm(5);
                        libc::write(libc::STDERR_FILENO, text.as_ptr().cast(), text.len());
                        libc::_exit(STALL_EXIT)
                    }
                }
            }),
        )
    })
    .watch(what.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn dog(limit: Duration, grace: Duration) -> (Arc<Watchdog>, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::start(
            limit,
            grace,
            Box::new(move |report| {
                if let Report::Stuck(line) = report {
                    let _ = tx.send(line.to_owned());
                }
            }),
        );
        (dog, rx)
    }

    #[test]
    fn a_call_that_does_not_return_in_time_is_reported_once_naming_the_store() {
        let (dog, stalls) = dog(Duration::from_millis(50), Duration::from_millis(50));
        let stuck = dog.watch("a call to /db".into());
        let line = stalls.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(line.starts_with("a call to /db has not returned"), "{line}");
        assert!(!line.contains('\n'), "{line}");
        // Once: the deadline was removed when it was reported.
        assert!(stalls.recv_timeout(Duration::from_millis(300)).is_err());
        drop(stuck);
    }

    #[test]
    fn calls_that_return_are_never_reported_and_a_later_one_still_is() {
        let (dog, stalls) = dog(Duration::from_millis(500), Duration::from_millis(100));
        for _ in 0..50 {
            drop(dog.watch("quick".into()));
        }
        let quick = dog.watch("still quick".into());
        std::thread::sleep(Duration::from_millis(10));
        drop(quick);
        // Past every quick call's deadline and grace: none was reported.
        assert!(stalls.recv_timeout(Duration::from_millis(1200)).is_err());
        let _slow = dog.watch("slow".into());
        let line = stalls.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(line.starts_with("slow has not returned"), "{line}");
    }

    #[test]
    fn a_call_that_returns_within_the_grace_is_not_reported() {
        // The deadline passes (as in a process stopped past it), the call
        // returns within the grace after the watchdog first sees it.
        let (dog, stalls) = dog(Duration::from_millis(50), Duration::from_secs(3));
        let late = dog.watch("late".into());
        std::thread::sleep(Duration::from_millis(400));
        drop(late);
        assert!(stalls.recv_timeout(Duration::from_secs(4)).is_err());
    }
}
