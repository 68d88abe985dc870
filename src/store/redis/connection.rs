//! The connections to one Redis and where it is: its URL, the key prefix,
//! and the names that may reach a key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Connection, ConnectionInfo, IntoConnectionInfo};

use super::DEFAULT_PREFIX;
use crate::store::{Error, Result};

/// The longest prefix or user name, in bytes.
const MAX_NAME: usize = 255;

/// Checks a key prefix or user name: 1 to 255 bytes of ASCII letters,
/// digits and `- + _ . , @ =` (spamd's safe set for user names), and `:`
/// in a prefix (`colon`). Nothing else can reach a key.
pub fn check_name(name: &str, colon: bool) -> Result<&str> {
    let bad = |why: String| Err(Error::Invalid(format!("Redis key name {name:?}: {why}")));
    if name.is_empty() || name.len() > MAX_NAME {
        return bad("must be 1 to 255 bytes".into());
    }
    match name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || "-+_.,@=".contains(c) || (colon && c == ':')))
    {
        Some(c) => bad(format!("the character {c:?} is not allowed")),
        None => Ok(name),
    }
}

/// Where a fleet's counts are: a Redis URL (`redis://[USER][:PASSWORD@]HOST[:PORT][/DB]`)
/// and the key prefix its `?prefix=` gives.
#[derive(Clone)]
pub struct RedisUrl {
    info: ConnectionInfo,
    pub(super) prefix: String,
    /// The URL without its password, to name the store in messages.
    pub(super) shown: String,
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl RedisUrl {
    /// Parses `url`: `redis://` with an optional user name and password,
    /// database number and `?prefix=NAME`.
    pub fn parse(url: &str) -> Result<RedisUrl> {
        let parsed = url::Url::parse(url)
            .map_err(|e| Error::Invalid(format!("Redis URL {}: {e}", hide_password(url))))?;
        if parsed.scheme() != "redis" {
            return Err(Error::Invalid(format!(
                "Redis URL {}: the scheme must be redis://",
                hide_password(url)
            )));
        }
        let prefix = match parsed.query_pairs().find(|(k, _)| k == "prefix") {
            Some((_, v)) => check_name(&v, true)?.to_string(),
            None => DEFAULT_PREFIX.to_string(),
        };
        let info = parsed
            .as_str()
            .into_connection_info()
            .map_err(|e| Error::Invalid(format!("Redis URL {}: {e}", hide_password(url))))?;
        // No CLIENT SETINFO after connecting: it only names the library to
        // Redis, and waiting for its answers would take the timeout twice
        // more from a Redis that has stopped answering.
        let redis_settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(redis_settings);
        Ok(RedisUrl {
            info,
            prefix,
            shown: hide_password(url),
        })
    }

    /// The URL, its password left out.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// `url` with any password replaced by `***`.
fn hide_password(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => crate::sanitize::for_terminal(url).into_owned(),
    }
}

/// The connections to one Redis ([`CONNECTIONS`]), shared by the models of
/// every user: each connects again, within the timeout, on its first use
/// after a failure (Redis restarted, the network was down), so everything
/// resumes when Redis is back.
#[derive(Clone)]
pub struct Redis {
    pub(super) inner: Arc<Shared>,
}

pub(super) struct Shared {
    client: redis::Client,
    pub(super) url: RedisUrl,
    timeout: Duration,
    /// The connections, used by one thread at a time each; None: not
    /// connected (never yet, or its last command failed).
    cons: Vec<Mutex<Option<Connection>>>,
    /// Where the next thread starts looking for a free connection.
    next: std::sync::atomic::AtomicUsize,
}

/// Connections to one Redis, at most: threads judging at once each get one
/// while there are enough (Redis answers them in turn, but none waits for
/// another's round trip).
pub const CONNECTIONS: usize = 4;

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redis({})", self.inner.url.shown)
    }
}

impl Redis {
    /// A handle on the Redis at `url`, each connection attempt and command
    /// bounded by `timeout`. Connects on first use: a daemon starts while
    /// Redis is down, and judges once it is up.
    pub fn new(url: &RedisUrl, timeout: Duration) -> Result<Redis> {
        let client = redis::Client::open(url.info.clone()).map_err(|e| Error::Redis {
            at: url.shown.clone(),
            source: Box::new(e),
        })?;
        Ok(Redis {
            inner: Arc::new(Shared {
                client,
                url: url.clone(),
                timeout,
                cons: (0..CONNECTIONS).map(|_| Mutex::new(None)).collect(),
                next: std::sync::atomic::AtomicUsize::new(0),
            }),
        })
    }

    /// [`Redis::new`], connected now, so that a wrong address or a refused
    /// login is said at once.
    pub fn connect(url: &RedisUrl, timeout: Duration) -> Result<Redis> {
        let redis = Redis::new(url, timeout)?;
        redis.ping()?;
        Ok(redis)
    }

    /// Asks Redis whether it answers.
    pub fn ping(&self) -> Result<()> {
        self.with(&self.inner.url.shown, |con| {
            redis::cmd("PING").query::<()>(con)
        })
    }

    /// Runs `f` on a connection, connecting first if there is none. A
    /// connection that fails (not Redis refusing the command) is dropped,
    /// so that the next use connects again; one kept from before that
    /// fails that way is tried once more on a new connection (Redis was
    /// restarted, or closed it as idle), which is safe for every command
    /// here: a change is refused when it was applied already (its
    /// generation moved).
    pub(super) fn with<T>(
        &self,
        shown: &str,
        f: impl FnMut(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        self.with_answers(shown, 1, f)
    }

    /// [`Redis::with`] for `f` that waits for `answers` answers in turn
    /// (a pipeline of that many commands): all of them within the timeout.
    pub(super) fn with_answers<T>(
        &self,
        shown: &str,
        answers: u32,
        mut f: impl FnMut(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let failed = |e: redis::RedisError| Error::Redis {
            at: shown.to_string(),
            source: Box::new(e),
        };
        // A free connection if there is one, else wait for one.
        let cons = &self.inner.cons;
        let start = self
            .inner
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let free = (0..cons.len()).find_map(|k| cons[(start + k) % cons.len()].try_lock().ok());
        let mut slot = match free {
            Some(slot) => slot,
            None => cons[start % cons.len()]
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        };
        let mut kept = slot.is_some();
        let started = std::time::Instant::now();
        let timeout = self.inner.timeout;
        loop {
            // A connection made now had part of the time (its handshake
            // waits for Redis too): its first command gets what is left,
            // so that one call takes the timeout at most.
            let fresh = slot.is_none();
            if fresh {
                // Connecting waits for each answer of the handshake in
                // turn (a password, a database other than 0): each gets
                // its share.
                let settings = self.inner.url.info.redis_settings();
                let handshake =
                    u32::from(settings.password().is_some()) + u32::from(settings.db() != 0);
                let con = self
                    .inner
                    .client
                    .get_connection_with_timeout(timeout / handshake.max(1))
                    .map_err(failed)?;
                *slot = Some(con);
            }
            let con = slot.as_mut().expect("connected above");
            // A pipeline waits for each of its answers in turn, each read
            // bounded by the socket's timeout: each gets its share of what
            // is left.
            let tuned = fresh || answers > 1;
            if tuned {
                let left = timeout
                    .saturating_sub(started.elapsed())
                    .max(Duration::from_millis(1));
                let each = (left / answers.max(1)).max(Duration::from_millis(1));
                con.set_read_timeout(Some(each)).map_err(failed)?;
                con.set_write_timeout(Some(left)).map_err(failed)?;
            }
            match f(con) {
                Ok(v) => {
                    if tuned {
                        con.set_read_timeout(Some(timeout)).map_err(failed)?;
                        con.set_write_timeout(Some(timeout)).map_err(failed)?;
                    }
                    return Ok(v);
                }
                Err(e) => {
                    let broken = e.is_io_error()
                        || e.is_timeout()
                        || e.is_connection_dropped()
                        || e.is_unrecoverable_error();
                    if !broken {
                        return Err(failed(e));
                    }
                    *slot = None;
                    // A timeout is Redis being slow: not tried again.
                    if !kept || e.is_timeout() {
                        return Err(failed(e));
                    }
                    kept = false;
                }
            }
        }
    }
}
