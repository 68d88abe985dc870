//! What a learn, an unlearn or a training run did, as the commands report
//! it.

use serde::Serialize;

use super::learnlog::Change;
use crate::vocab::Digest;

/// What a training run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TrainSummary {
    /// Messages learned for the first time.
    pub learned: usize,
    /// Messages learned before under the other label, now moved.
    pub relearned: usize,
    /// Messages already learned with the same label.
    pub unchanged: usize,
    /// The same message given twice in this run (counted once).
    pub duplicates: usize,
    /// Messages given with both labels in this run (left alone).
    pub conflicting: usize,
    /// Messages an earlier version counted twice (under two digests),
    /// now counted once. Left out of JSON when zero.
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub merged: usize,
    /// Messages learned per class after the run, `[ham, spam]`.
    pub totals: [u64; 2],
    /// Counts that a move to the other label could not take back exactly
    /// (the message's words were pruned, or it was counted by a version
    /// that saw other features): they were set to zero. Left out of JSON
    /// when zero.
    #[serde(skip_serializing_if = "is_zero")]
    pub inexact: u64,
    /// Whether a new snapshot was written.
    pub snapshot_written: bool,
    /// What became of each message `learn` was given (for the learn log);
    /// empty after a training run.
    #[serde(skip)]
    pub(crate) changes: Vec<(Digest, Change)>,
    /// Why the learn log could not be written after a learn, if it could
    /// not, and whether the counts changed all the same (they did unless
    /// every message was already learned so).
    #[serde(skip)]
    pub log_failure: Option<String>,
    /// Why the model was rebuilt from the counts, if a learn or unlearn
    /// found it unreadable (see [`super::Trainer::unreadable_model`]).
    #[serde(skip)]
    pub rebuilt: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}
