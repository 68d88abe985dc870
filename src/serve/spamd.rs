//! The spamd protocol.

use super::{BoxConn, Peer, State};

/// Serves one spamd connection.
pub(super) async fn serve(
    _conn: BoxConn,
    _peer: &Peer,
    _state: &std::sync::Arc<State>,
) -> std::io::Result<()> {
    Err(std::io::Error::other("spamd is not served yet"))
}
