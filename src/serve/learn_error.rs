//! What learning through `serve` fails with, and whether asking again
//! may do.

use super::users::UserError;
use crate::db;

/// Errors of learning through `serve`.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    /// The user name or its database path is refused.
    #[error(transparent)]
    User(#[from] UserError),
    /// The message cannot be parsed or is not mail.
    #[error("the message cannot be learned: {0}")]
    Message(String),
    /// The database refused.
    #[error(transparent)]
    Db(#[from] db::Error),
}

impl LearnError {
    /// Whether asking again may do: another writer held the database, the
    /// counts took the change and the model was not written, or the disk
    /// or Redis was full (a new user's database or model included:
    /// [`super::users::room_for`], [`crate::store::Error::Full`]).
    pub fn retryable(&self) -> bool {
        use crate::store::Error::{Contended, Full, Io, Locked};
        use std::io::ErrorKind::StorageFull;
        match self {
            LearnError::Db(db::Error::Store(Io { source, .. })) => source.kind() == StorageFull,
            LearnError::Db(db::Error::Store(Locked { .. } | Contended { .. } | Full(_)))
            | LearnError::Db(db::Error::NotLeft { .. } | db::Error::ModelNotWritten { .. }) => true,
            _ => false,
        }
    }
}
