//! The HTTP connection itself, watched: whether a request is under way
//! (for the timeouts), how long a write may wait, and lingering after a
//! body refused unread.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::serve::BoxConn;

/// A connection that remembers whether bytes of a request came since the
/// last answer was written: a timeout then drops a client mid-request
/// (said in the log) rather than closing an idle one (not said).
///
/// After a body refused as too large, the connection closes with the rest
/// of it unread, and closing a socket with unread bytes sends a reset that
/// can destroy the answer before the client reads it. So it lingers, as
/// web servers do: once dropped, what still comes is read and thrown away
/// until the client closes, for at most `linger_for` (the read timeout, up
/// to 5 s; outside the connection limit, so kept short), and by at most
/// [`crate::serve::listen::MAX_LINGERING`] connections at once: past that, one is closed at
/// once, so that clients sent too much cannot hold the server's file
/// descriptors.
pub(super) struct Watched {
    pub(super) inner: Option<BoxConn>,
    pub(super) mid_request: Arc<AtomicBool>,
    pub(super) linger: Arc<AtomicBool>,
    pub(super) linger_for: Duration,
    /// How long a write may wait for the client to read (the read
    /// timeout): a client that never reads its answers gives its
    /// connection back.
    pub(super) write_timeout: Duration,
    /// Running while a write waits.
    pub(super) write_wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Watched {
    fn conn(&mut self) -> std::io::Result<Pin<&mut (dyn crate::serve::listen::Conn + 'static)>> {
        match &mut self.inner {
            Some(conn) => Ok(conn.as_mut()),
            None => Err(std::io::Error::from(std::io::ErrorKind::NotConnected)),
        }
    }

    /// `polled`, a write's outcome, or an error once the write has waited
    /// longer than the write timeout.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if polled.is_ready() {
            self.write_wait = None;
            return polled;
        }
        let timeout = self.write_timeout;
        let wait = self
            .write_wait
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match wait.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing of its answers for {} s",
                    timeout.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.linger.load(Ordering::Relaxed) {
            return;
        }
        let (Some(mut conn), Ok(runtime), Some(slot)) = (
            self.inner.take(),
            tokio::runtime::Handle::try_current(),
            crate::serve::listen::Lingering::take(),
        ) else {
            return;
        };
        let deadline = tokio::time::Instant::now() + self.linger_for;
        runtime.spawn(async move {
            use tokio::io::AsyncReadExt;
            let _slot = slot;
            let mut sink = vec![0u8; 16 * 1024];
            while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, conn.read(&mut sink)).await {
                if n == 0 {
                    break;
                }
            }
        });
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = match self.conn() {
            Ok(conn) => conn.poll_read(cx, buf),
            Err(err) => return Poll::Ready(Err(err)),
        };
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.mid_request.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = match self.conn() {
            Ok(conn) => conn.poll_write(cx, buf),
            Err(err) => return Poll::Ready(Err(err)),
        };
        let polled = self.bounded(cx, polled);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.mid_request.store(false, Ordering::Relaxed);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = match self.conn() {
            Ok(conn) => conn.poll_write_vectored(cx, bufs),
            Err(err) => return Poll::Ready(Err(err)),
        };
        let polled = self.bounded(cx, polled);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.mid_request.store(false, Ordering::Relaxed);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|c| c.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = match self.conn() {
            Ok(conn) => conn.poll_flush(cx),
            Err(err) => return Poll::Ready(Err(err)),
        };
        self.bounded(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.conn() {
            Ok(conn) => conn.poll_shutdown(cx),
            Err(err) => Poll::Ready(Err(err)),
        }
    }
}
