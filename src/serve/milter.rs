//! The milter protocol.

use super::{BoxConn, Peer, State};

/// Serves one milter connection.
pub(super) async fn serve(
    _conn: BoxConn,
    _peer: &Peer,
    _state: &std::sync::Arc<State>,
) -> std::io::Result<()> {
    Err(std::io::Error::other("milter is not served yet"))
}
