//! The bytes of messages `serve` holds at once, over the connections of
//! one protocol (each has its own bound, so that clients of one cannot
//! leave another, the MTA's milter, without room): each message's bytes
//! are held as they arrive (a compressed one's as it is inflated) until
//! its answer is made (spamd's: written). A message that would take the
//! total past the bound gets no verdict (`busy`) and is passed on, rather
//! than many clients sending large messages at once driving the server
//! out of memory (each listener's connection limit times the size limit is
//! gigabytes).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The bound and what is held now.
#[derive(Debug)]
pub struct Budget {
    held: AtomicU64,
    max: u64,
}

/// Bytes held of a [`Budget`], given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Budget {
    /// A budget of `max` bytes.
    pub fn new(max: u64) -> Arc<Budget> {
        Arc::new(Budget {
            held: AtomicU64::new(0),
            max,
        })
    }

    /// The bound.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Nothing held yet, to grow as bytes arrive.
    pub fn empty(self: &Arc<Self>) -> Held {
        Held {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }
}

impl Held {
    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Holds at least `bytes` in all, if they fit; else holds what it held.
    pub fn at_least(&mut self, bytes: u64) -> bool {
        bytes <= self.bytes || self.grow(bytes - self.bytes)
    }

    /// What it holds, moved to a hold of its own (it holds nothing after).
    pub fn take(&mut self) -> Held {
        let bytes = std::mem::take(&mut self.bytes);
        Held {
            budget: self.budget.clone(),
            bytes,
        }
    }

    /// Gives back all it holds (it holds nothing after).
    pub fn release(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::SeqCst);
        self.bytes = 0;
    }

    /// Holds `more` bytes besides, if they fit; else holds what it held.
    pub fn grow(&mut self, more: u64) -> bool {
        let max = self.budget.max;
        let grown = self
            .budget
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                n.checked_add(more).filter(|&t| t <= max)
            })
            .is_ok();
        if grown {
            self.bytes += more;
        }
        grown
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// Why a message was not judged (or learned: `done` says which) for the
/// budget, in words.
pub fn busy_why(budget: &Budget, done: &str) -> String {
    format!(
        "the server holds as many bytes of messages as it may ({} bytes, max_held): {done}",
        budget.max()
    )
}

/// The bytes of messages read into features at once, by judging or by
/// learning (each has its own, so that learns waiting for a database
/// another writer holds never keep a message from its verdict): a message
/// of the size limit for each core. The copies a reading makes (the text
/// decoded, the words, the features) come to about twice the message, so
/// many large messages finished together (each one's bytes already held
/// of its protocol's [`Budget`]) are read a few at a time rather than all
/// at once adding twice their size again; small ones seldom wait.
#[derive(Debug)]
pub struct ParseRoom {
    turns: Arc<tokio::sync::Semaphore>,
    /// KiB the room holds when no turn is taken.
    kib: std::sync::atomic::AtomicUsize,
    cores: usize,
}

impl ParseRoom {
    /// Room for a message of `max_message` bytes for each core of this
    /// machine, at least 1 MiB.
    pub fn new(max_message: u64) -> ParseRoom {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let kib = Self::kib_for(max_message, cores);
        ParseRoom {
            turns: Arc::new(tokio::sync::Semaphore::new(kib)),
            kib: kib.into(),
            cores,
        }
    }

    fn kib_for(max_message: u64, cores: usize) -> usize {
        let kib = usize::try_from(max_message.div_ceil(1024)).unwrap_or(usize::MAX);
        kib.saturating_mul(cores.max(1))
            .clamp(1024, tokio::sync::Semaphore::MAX_PERMITS)
    }

    /// Makes room for a size limit raised since (a reload); a lowered one
    /// leaves it as it is.
    pub fn fit(&self, max_message: u64) {
        let want = Self::kib_for(max_message, self.cores);
        let had = self.kib.fetch_max(want, Ordering::SeqCst);
        if want > had {
            self.turns.add_permits(want - had);
        }
    }

    /// Waits until `bytes` of message may be read: the turn is over when
    /// what is returned is dropped. A message larger than the room waits
    /// for all of it.
    pub async fn turn(&self, bytes: usize) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let room = self.kib.load(Ordering::SeqCst);
        let kib = bytes.div_ceil(1024).clamp(1, room);
        let kib = u32::try_from(kib).unwrap_or(u32::MAX);
        self.turns.clone().acquire_many_owned(kib).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_held_is_bounded_and_given_back() {
        let budget = Budget::new(100);
        let mut a = budget.empty();
        assert!(a.at_least(60));
        assert!(!budget.empty().at_least(50), "60 + 50 > 100");
        let mut b = budget.empty();
        assert!(b.at_least(40));
        assert!(!a.grow(1));
        assert_eq!(budget.held(), 100);
        drop(b);
        assert!(a.at_least(90) && a.at_least(80), "grows to 90, keeps it");
        assert_eq!(budget.held(), 90);
        let mut moved = a.take();
        assert_eq!((a.bytes(), moved.bytes(), budget.held()), (0, 90, 90));
        moved.release();
        assert_eq!(budget.held(), 0);
        drop(a);
        assert_eq!(budget.held(), 0);
        assert!(!budget.empty().at_least(101));
    }
}
