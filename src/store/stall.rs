//! A bound on how long one write to the count store may take.
//!
//! sled 0.34 can deadlock inside a transaction's commit under load (its
//! open issue 1412: the committing thread holds the segment accountant's
//! mutex while it waits for a write that the I/O threads, each waiting
//! for that mutex, can never do). Such a write never returns, and the
//! process holds the writers' lock until someone kills it: every later
//! `learn`, move or training run waits on it. A retraining that jams is
//! worse than one that fails, so each write to sled is watched
//! ([`watch`]); one that has not returned after [`STALL_LIMIT`] ends the
//! process with a one-line error on stderr and exit status
//! [`STALL_EXIT`]. The writers' lock goes with the process, and sled
//! recovers its files on the next open as after any kill (a transaction
//! is whole or absent).
//!
//! Nothing a healthy store does comes near the limit: the largest single
//! write is a whole training run's, which is the run's changed counts,
//! written once.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long one write to the count store may take before the process is
/// ended (ten minutes).
pub const STALL_LIMIT: Duration = Duration::from_secs(600);

/// The exit status of a process ended by a stalled write: 75, `EX_TEMPFAIL`
/// of `sysexits.h`, so that a mail server that ran the command (a `learn`
/// from a Sieve or procmail rule) tries it again later.
pub const STALL_EXIT: i32 = 75;

/// What to do with a write that stalled: given the line that says so.
type OnStall = Box<dyn Fn(&str) + Send + Sync>;

/// Deadlines of the writes being watched, by a number of their own.
#[derive(Default)]
struct Armed {
    next: u64,
    deadlines: BTreeMap<u64, (Instant, String)>,
}

/// A thread that wakes at the earliest deadline of the writes it watches.
pub(crate) struct Watchdog {
    armed: Mutex<Armed>,
    changed: Condvar,
    limit: Duration,
    on_stall: OnStall,
}

impl Watchdog {
    /// A watchdog with its own thread, calling `on_stall` once for each
    /// write still armed `limit` after it was armed.
    pub(crate) fn start(limit: Duration, on_stall: OnStall) -> Arc<Watchdog> {
        let dog = Arc::new(Watchdog {
            armed: Mutex::new(Armed::default()),
            changed: Condvar::new(),
            limit,
            on_stall,
        });
        let watching = Arc::clone(&dog);
        // If the thread cannot be started, writes go unwatched, as before
        // there was a watchdog: that must not stop them.
        let _ = std::thread::Builder::new()
            .name("store-watchdog".into())
            .spawn(move || watching.run());
        dog
    }

    /// Watches one write, described by `what`, until the guard is dropped.
    pub(crate) fn watch(self: &Arc<Self>, what: String) -> Watch {
        let mut armed = lock(&self.armed);
        let id = armed.next;
        armed.next += 1;
        armed
            .deadlines
            .insert(id, (Instant::now() + self.limit, what));
        drop(armed);
        self.changed.notify_one();
        Watch {
            dog: Arc::clone(self),
            id,
        }
    }

    fn run(&self) {
        let mut armed = lock(&self.armed);
        loop {
            let now = Instant::now();
            let stalled: Vec<u64> = armed
                .deadlines
                .iter()
                .filter(|(_, (deadline, _))| *deadline <= now)
                .map(|(&id, _)| id)
                .collect();
            for id in stalled {
                if let Some((_, what)) = armed.deadlines.remove(&id) {
                    (self.on_stall)(&format!(
                        "{what} has not finished after {} s: the store is stuck (a known sled \
                         deadlock); ending the process so that the database is free again \
                         (it recovers as after a kill)",
                        self.limit.as_secs()
                    ));
                }
            }
            let next = armed.deadlines.values().map(|(d, _)| *d).min();
            armed = match next {
                None => self.changed.wait(armed).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let wait = deadline.saturating_duration_since(Instant::now());
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
/// consistent: every change is one insert or remove).
fn lock(armed: &Mutex<Armed>) -> std::sync::MutexGuard<'_, Armed> {
    armed.lock().unwrap_or_else(|e| e.into_inner())
}

/// A write being watched: dropping it (the write returned, or unwound)
/// disarms it.
pub(crate) struct Watch {
    dog: Arc<Watchdog>,
    id: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        lock(&self.dog.armed).deadlines.remove(&self.id);
        self.dog.changed.notify_one();
    }
}

/// Watches one write to the count store, described by `what` (which
/// names the store), until the guard is dropped: see the
/// [module docs](self).
pub(crate) fn watch(what: impl Into<String>) -> Watch {
    static DOG: OnceLock<Arc<Watchdog>> = OnceLock::new();
    DOG.get_or_init(|| {
        Watchdog::start(
            STALL_LIMIT,
            Box::new(|line| {
                eprintln!("bayesmail: {line}");
                // The stalled thread holds sled's locks: nothing may run
                // that could wait on them (destructors, exit handlers).
                // SAFETY: _exit ends the process; it touches no Rust state.
                unsafe { libc::_exit(STALL_EXIT) }
            }),
        )
    })
    .watch(what.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn dog(limit: Duration) -> (Arc<Watchdog>, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::start(
            limit,
            Box::new(move |line| {
                let _ = tx.send(line.to_owned());
            }),
        );
        (dog, rx)
    }

    #[test]
    fn a_write_that_does_not_return_in_time_is_reported_once_naming_the_store() {
        let (dog, stalls) = dog(Duration::from_millis(50));
        let stuck = dog.watch("the write to /db".into());
        let line = stalls.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(
            line.starts_with("the write to /db has not finished"),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
        // Once: the deadline was removed when it was reported.
        assert!(stalls.recv_timeout(Duration::from_millis(300)).is_err());
        drop(stuck);
    }

    #[test]
    fn writes_that_return_are_never_reported_and_a_later_one_still_is() {
        let (dog, stalls) = dog(Duration::from_millis(200));
        for _ in 0..50 {
            drop(dog.watch("quick".into()));
        }
        let quick = dog.watch("still quick".into());
        std::thread::sleep(Duration::from_millis(50));
        drop(quick);
        // Past every quick write's deadline: none was reported.
        assert!(stalls.recv_timeout(Duration::from_millis(400)).is_err());
        let _slow = dog.watch("slow".into());
        let line = stalls.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(line.starts_with("slow has not finished"), "{line}");
    }
}
