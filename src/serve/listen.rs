//! Where `serve` listens: `HOST:PORT` (TCP) or `unix:PATH`, which peers a
//! TCP listener accepts (`--allow` networks; loopback only by default),
//! and the connections it hands to a protocol.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// An address to listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket at this path.
    Unix(PathBuf),
}

impl std::str::FromStr for Addr {
    type Err = String;

    fn from_str(s: &str) -> Result<Addr, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path, as in unix:/run/bayesmail/spamd.sock".into());
            }
            return Ok(Addr::Unix(PathBuf::from(path)));
        }
        s.parse::<SocketAddr>().map(Addr::Tcp).map_err(|_| {
            format!("{s:?} is not HOST:PORT (an IP address and a port, as in 127.0.0.1:783) or unix:PATH")
        })
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Tcp(a) => write!(f, "{a}"),
            Addr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A network peers may connect from: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Network {
    type Err = String;

    fn from_str(s: &str) -> Result<Network, String> {
        let bad = || format!("{s:?} is not a network (an address, or ADDRESS/PREFIX)");
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Network { addr, prefix })
    }
}

impl Network {
    /// The loopback networks, 127.0.0.0/8 and ::1.
    pub fn loopback() -> Vec<Network> {
        vec![
            Network {
                addr: IpAddr::from([127, 0, 0, 0]),
                prefix: 8,
            },
            Network {
                addr: IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
                prefix: 128,
            },
        ]
    }

    /// Whether `ip` is in this network (an IPv4 address mapped into IPv6
    /// is taken as the IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let bits = |a: IpAddr| -> u128 {
            match a {
                IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
                IpAddr::V6(v6) => u128::from(v6),
            }
        };
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        // An IPv4 address is in the top 32 bits, so one mask serves both.
        let prefix = u32::from(self.prefix);
        if prefix == 0 {
            return true;
        }
        let mask = u128::MAX << (128 - prefix);
        bits(ip) & mask == bits(self.addr) & mask
    }
}

/// A connection from a peer, TCP or Unix.
pub trait Conn: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Conn for T {}

/// A boxed connection.
pub type BoxConn = Pin<Box<dyn Conn>>;

/// Who connected: a TCP address, or a peer on a Unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// A TCP peer.
    Tcp(SocketAddr),
    /// A peer on a Unix socket.
    Unix,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(a) => write!(f, "{a}"),
            Peer::Unix => f.write_str("unix"),
        }
    }
}

/// A bound listener, not yet accepting (it accepts once handed to the
/// runtime: [`Listener::accepting`]).
#[derive(Debug)]
pub enum Listener {
    /// On TCP.
    Tcp(std::net::TcpListener),
    /// On a Unix socket.
    Unix(std::os::unix::net::UnixListener, PathBuf),
}

/// A listener accepting on the runtime.
#[derive(Debug)]
pub enum Accepting {
    /// On TCP.
    Tcp(tokio::net::TcpListener),
    /// On a Unix socket.
    Unix(tokio::net::UnixListener),
}

/// Errors of binding.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {}", crate::fsutil::words(.source))]
pub struct BindError {
    /// The address.
    pub addr: Addr,
    /// Why.
    pub source: std::io::Error,
}

impl Listener {
    /// Binds `addr`. A Unix socket's file is made with `mode` (0660 unless
    /// given) and, with `group`, that group; a stale socket file left by a
    /// process that died is replaced, anything else at the path is refused.
    pub fn bind(addr: &Addr, mode: u32, group: Option<u32>) -> Result<Listener, BindError> {
        let err = |source| BindError {
            addr: addr.clone(),
            source,
        };
        match addr {
            Addr::Tcp(a) => {
                let std = std::net::TcpListener::bind(a).map_err(err)?;
                std.set_nonblocking(true).map_err(err)?;
                Ok(Listener::Tcp(std))
            }
            Addr::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt, PermissionsExt};
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    if !meta.file_type().is_socket() {
                        return Err(err(std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            "a file that is not a socket is there",
                        )));
                    }
                    // A socket someone still listens on is not taken over.
                    if std::os::unix::net::UnixStream::connect(path).is_ok() {
                        return Err(err(std::io::Error::from(std::io::ErrorKind::AddrInUse)));
                    }
                    std::fs::remove_file(path).map_err(err)?;
                }
                let std = std::os::unix::net::UnixListener::bind(path).map_err(err)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                    .map_err(err)?;
                if let Some(gid) = group {
                    std::os::unix::fs::chown(path, None, Some(gid)).map_err(err)?;
                }
                std.set_nonblocking(true).map_err(err)?;
                Ok(Listener::Unix(std, path.clone()))
            }
        }
    }

    /// The address it is bound to (a TCP port of 0 resolved).
    pub fn local(&self) -> String {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| "tcp".to_string(), |a| a.to_string()),
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }

    /// The listener accepting on the current tokio runtime.
    pub fn accepting(self) -> std::io::Result<Accepting> {
        Ok(match self {
            Listener::Tcp(l) => Accepting::Tcp(tokio::net::TcpListener::from_std(l)?),
            Listener::Unix(l, _) => Accepting::Unix(tokio::net::UnixListener::from_std(l)?),
        })
    }
}

/// TCP keepalive of every connection served: the first probe after this
/// long without a packet, then one every [`KEEPALIVE_INTERVAL`], and the
/// peer gone after [`KEEPALIVE_PROBES`] unanswered (about ten minutes in
/// all).
const KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(300);
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
const KEEPALIVE_PROBES: u32 = 5;

impl Accepting {
    /// The next connection.
    pub async fn accept(&self) -> std::io::Result<(BoxConn, Peer)> {
        match self {
            Accepting::Tcp(l) => {
                let (s, a) = l.accept().await?;
                let _ = s.set_nodelay(true);
                // A peer that is gone (its host down, the network cut) is
                // found out by the kernel: a milter connection waits for
                // its MTA as long as the SMTP session lasts.
                let probes = socket2::TcpKeepalive::new()
                    .with_time(KEEPALIVE_IDLE)
                    .with_interval(KEEPALIVE_INTERVAL)
                    .with_retries(KEEPALIVE_PROBES);
                let _ = socket2::SockRef::from(&s).set_tcp_keepalive(&probes);
                Ok((Box::pin(s), Peer::Tcp(a)))
            }
            Accepting::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok((Box::pin(s), Peer::Unix))
            }
        }
    }
}

/// Connections lingering after an answer given before their request was
/// read whole (HTTP's 413, 408 or busy), at most, in the process.
pub const MAX_LINGERING: usize = 64;

/// Connections lingering now.
static LINGERING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One of the connections lingering, given back when dropped.
pub struct Lingering;

impl Lingering {
    /// One, if fewer than [`MAX_LINGERING`] are taken.
    pub fn take() -> Option<Lingering> {
        LINGERING
            .fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| (n < MAX_LINGERING).then_some(n + 1),
            )
            .ok()
            .map(|_| Lingering)
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        LINGERING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_or_say_why_not() {
        assert_eq!(
            "127.0.0.1:783".parse::<Addr>().unwrap(),
            Addr::Tcp("127.0.0.1:783".parse().unwrap())
        );
        assert_eq!(
            "unix:/run/b.sock".parse::<Addr>().unwrap(),
            Addr::Unix("/run/b.sock".into())
        );
        for bad in ["localhost", "783", "unix:", "[::1]"] {
            assert!(bad.parse::<Addr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn networks_hold_what_they_should() {
        let lo = Network::loopback();
        let inside = |ip: &str| lo.iter().any(|n| n.contains(ip.parse().unwrap()));
        assert!(inside("127.0.0.1") && inside("127.9.9.9") && inside("::1"));
        assert!(inside("::ffff:127.0.0.1"));
        assert!(!inside("10.0.0.1") && !inside("::2") && !inside("128.0.0.1"));
        let net: Network = "192.168.1.0/24".parse().unwrap();
        assert!(net.contains("192.168.1.77".parse().unwrap()));
        assert!(!net.contains("192.168.2.1".parse().unwrap()));
        let any: Network = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains("8.8.8.8".parse().unwrap()));
        let six: Network = "2001:db8::/32".parse().unwrap();
        assert!(six.contains("2001:db8:1::5".parse().unwrap()));
        assert!(!six.contains("2001:db9::1".parse().unwrap()));
        for bad in ["1.2.3.4/33", "x", "::/129"] {
            assert!(bad.parse::<Network>().is_err(), "{bad}");
        }
    }
}
