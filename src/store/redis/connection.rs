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
    /// With `rediss://`: the certificates (PEM) the server's is checked
    /// against instead of the system's (`?ca=FILE`).
    ca: Option<Vec<u8>>,
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
    /// Parses `url`: `redis://`, or `rediss://` for TLS, with an optional
    /// user name and password, database number, `?prefix=NAME`, and with
    /// `rediss://` `?ca=FILE` (the certificates, PEM, of the authority
    /// that signed the server's, when it is not one the system trusts).
    pub fn parse(url: &str) -> Result<RedisUrl> {
        let shown = hide_password(url);
        let bad = |why: String| Error::Invalid(format!("Redis URL {shown}: {why}"));
        let mut parsed = url::Url::parse(url).map_err(|e| {
            // A password from a generator often has a character a URL
            // gives a meaning to, which then cuts the address short.
            let hint = if url.contains('@') {
                " (a user name or password must write / # ? @ % as %2F %23 %3F %40 %25)"
            } else {
                ""
            };
            bad(format!("{e}{hint}"))
        })?;
        let tls = match parsed.scheme() {
            "redis" => false,
            "rediss" => true,
            _ => return Err(bad("the scheme must be redis:// or rediss://".into())),
        };
        let mut prefix = DEFAULT_PREFIX.to_string();
        let mut ca = None;
        let mut rest = Vec::new();
        for (k, v) in parsed.query_pairs() {
            match &*k {
                "prefix" => {
                    prefix = check_name(&v, true)?.to_string();
                    // `{P:u:NAME}` is user NAME's model under prefix P:
                    // a prefix holding `:u:` would be another's user.
                    if prefix.contains(":u:") {
                        return Err(bad(format!(
                            "prefix={prefix}: a prefix may not hold \":u:\" (the keys of \
                             user NAME under prefix P are {{P:u:NAME}})"
                        )));
                    }
                }
                "ca" if tls => {
                    let read = std::fs::read(&*v)
                        .map_err(|e| bad(format!("ca={v}: {}", crate::fsutil::words(&e))))?;
                    ca = Some(read);
                }
                "ca" => return Err(bad("ca= is for rediss:// (TLS) only".into())),
                // The client library's: RESP2 or RESP3.
                "protocol" => rest.push((k.into_owned(), v.into_owned())),
                // A name misspelt would put one tenant's counts in
                // another's model without a word. The name is said only
                // if it cannot be part of a password cut short.
                other => {
                    let named = other.len() <= 20
                        && other.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_');
                    let name = if named {
                        format!("{other:?}")
                    } else {
                        "after ?".to_string()
                    };
                    return Err(bad(format!(
                        "unknown option {name} (the options are prefix, protocol and, \
                         with rediss://, ca)"
                    )));
                }
            }
        }
        // What is ours is not the client library's.
        if rest.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(rest);
        }
        let info = parsed
            .as_str()
            .into_connection_info()
            .map_err(|e| bad(e.to_string()))?;
        // No CLIENT SETINFO after connecting: it only names the library to
        // Redis, and waiting for its answers would take the timeout twice
        // more from a Redis that has stopped answering.
        let redis_settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(redis_settings);
        Ok(RedisUrl {
            info,
            ca,
            prefix,
            shown,
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

/// `url` with any password replaced by `***`. One that does not parse, or
/// parses into an odd shape (a fragment, a path that is no database
/// number, an option of no known name: what a password with `/`, `#` or
/// `?` unescaped makes of it), has everything between `://` and its last
/// `@` and everything after a `?` or `#` left out, since where its password
/// ends cannot be told.
fn hide_password(url: &str) -> String {
    let plain = |u: &url::Url| {
        let path = u.path().trim_start_matches('/');
        u.fragment().is_none()
            && path.bytes().all(|b| b.is_ascii_digit())
            && u.query_pairs()
                .all(|(k, _)| ["prefix", "ca", "protocol"].contains(&&*k))
    };
    match url::Url::parse(url) {
        Ok(mut u) if plain(&u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        _ => {
            let mut hidden = match (url.find("://"), url.rfind('@')) {
                (Some(start), Some(at)) if at > start + 3 => {
                    format!("{}***{}", &url[..start + 3], &url[at..])
                }
                _ => url.to_string(),
            };
            let after = hidden.find("://").map_or(0, |i| i + 3);
            if let Some(cut) = hidden[after..].find(['?', '#']) {
                hidden.truncate(after + cut);
                hidden.push_str("?…");
            }
            crate::sanitize::for_terminal(&hidden).into_owned()
        }
    }
}

/// Whether `err` is Redis out of reach (not listening, the network down,
/// no whole answer in time) rather than Redis refusing something (a
/// password, a command): what a daemon may start without, and works once
/// Redis answers.
pub fn out_of_reach(err: &Error) -> bool {
    let Error::Redis { source, .. } = err else {
        return false;
    };
    source
        .downcast_ref::<redis::RedisError>()
        .is_some_and(redis::RedisError::is_io_error)
}

/// Why [`within`] has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    /// None came within the bound.
    Late,
    /// No thread could be started, or it ended without one (it panicked).
    Failed,
}

/// Runs `f` on a thread of its own and waits for its answer `bound` at
/// most. Each wait for Redis is bounded by the store's timeout, but an
/// answer that keeps arriving a few bytes at a time is read until it
/// ends: where the caller must go on (a message waits, a daemon starts),
/// this bounds the whole. A thread given up on ends when its answer does,
/// or with the process.
pub fn within<T: Send + 'static>(
    bound: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::result::Result<T, Unanswered> {
    let (sender, answer) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("redis".into())
        .spawn(move || {
            let _ = sender.send(f());
        })
        .map_err(|_| Unanswered::Failed)?;
    answer.recv_timeout(bound).map_err(|e| match e {
        std::sync::mpsc::RecvTimeoutError::Timeout => Unanswered::Late,
        std::sync::mpsc::RecvTimeoutError::Disconnected => Unanswered::Failed,
    })
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
    /// Told each time a connection is let go, so that a thread waiting
    /// for one is woken rather than polling (a thread that polls loses to
    /// those that arrive after it).
    freed: (Mutex<()>, std::sync::Condvar),
}

/// A connection taken from [`Shared::cons`]; letting it go wakes a thread
/// waiting for one (once it is free, and under the lock the waiter checks
/// under, so that no wake-up is lost).
struct Slot<'a> {
    con: Option<std::sync::MutexGuard<'a, Option<Connection>>>,
    freed: &'a (Mutex<()>, std::sync::Condvar),
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        drop(self.con.take());
        let _told = self.freed.0.lock().unwrap_or_else(|e| e.into_inner());
        self.freed.1.notify_one();
    }
}

/// Questions one change to a model is given time for: a learn asks a
/// handful (the registry, the counts, the change itself, the totals);
/// the rest is room for a retry when another host's change comes between.
pub const ASKS_PER_CHANGE: u32 = 8;

/// Connections to one Redis, at most: threads judging at once each get one
/// while there are enough (Redis answers them in turn, but none waits for
/// another's round trip).
pub const CONNECTIONS: usize = 16;

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
        let client = match &url.ca {
            None => redis::Client::open(url.info.clone()),
            Some(ca) => redis::Client::build_with_tls(
                url.info.clone(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            ),
        }
        .map_err(|e| Error::Redis {
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
                freed: (Mutex::new(()), std::sync::Condvar::new()),
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

    /// An error if Redis may evict keys to stay under its memory limit
    /// (`maxmemory` set and an `allkeys-*` policy): it would drop counts
    /// and the registry that keeps learning idempotent, without a word to
    /// anyone. A `volatile-*` policy evicts only keys with a time to live,
    /// which ours never have. A Redis that does not let this user read
    /// `INFO` (an ACL user without `@dangerous`) is taken, with the words
    /// of a warning returned.
    pub fn refuse_eviction(&self) -> Result<Option<String>> {
        self.eviction().map(|e| e.warning)
    }

    /// [`Redis::refuse_eviction`], with whether Redis has a memory limit
    /// at all (`maxmemory`), from one `INFO`: without one nothing bounds
    /// the models clients may begin, and [`Redis::room_for_a_new_model`]
    /// refuses none.
    pub fn eviction(&self) -> Result<Eviction> {
        let info = match self.memory_info() {
            Ok(info) => info,
            Err(e) if !not_permitted(&e) => return Err(e),
            Err(e) => {
                return Ok(Eviction {
                    warning: Some(format!(
                        "Redis at {}: its eviction policy could not be read ({e}); it must be \
                         maxmemory-policy noeviction, or a full Redis drops learned messages",
                        self.inner.url.shown
                    )),
                    limited: None,
                });
            }
        };
        let limited = memory_limit(&info) > 0;
        match info_field(&info, "maxmemory_policy") {
            Some(policy) if limited && policy.starts_with("allkeys") => {
                Err(Error::Config(format!(
                    "Redis at {}: maxmemory-policy {policy} would evict counts and the \
                     registry when Redis is full, losing learned messages without a word; \
                     set maxmemory-policy noeviction, and cap the models' memory instead",
                    self.inner.url.shown
                )))
            }
            _ => Ok(Eviction {
                warning: None,
                limited: Some(limited),
            }),
        }
    }

    /// [`Error::Full`] if Redis is within a tenth of its `maxmemory`: a new
    /// user's model is not begun then. Any client serve accepts may name
    /// users, and a flood of new names must not take the memory that every
    /// model learning needs (a full Redis refuses every write). A Redis
    /// without `maxmemory`, or whose `INFO` this user may not read, is not
    /// refused.
    pub fn room_for_a_new_model(&self) -> Result<()> {
        let info = match self.memory_info() {
            Ok(info) => info,
            Err(e) if not_permitted(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let field = |name: &str| -> u64 {
            info_field(&info, name)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let (used, max) = (field("used_memory"), memory_limit(&info));
        if max == 0 || used.saturating_mul(10) < max.saturating_mul(9) {
            return Ok(());
        }
        Err(Error::Full(format!(
            "Redis at {}: no new user's model while it uses {} of its {} MB (maxmemory): \
             the last tenth is kept for the models there are",
            self.inner.url.shown,
            used >> 20,
            max >> 20
        )))
    }

    /// What `INFO memory` says: its use, its limit and its policy.
    fn memory_info(&self) -> Result<String> {
        self.with(&self.inner.url.shown, |con| {
            redis::cmd("INFO").arg("memory").query::<String>(con)
        })
    }

    /// Where it is.
    pub fn url(&self) -> &RedisUrl {
        &self.inner.url
    }

    /// How long each connection attempt and each wait for an answer may
    /// take.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// How long one change to a model (learning or unlearning one message)
    /// may take in all, where the caller must go on (see [`within`]): the
    /// store's timeout for each of [`ASKS_PER_CHANGE`] questions.
    pub fn change_bound(&self) -> Duration {
        self.inner.timeout.saturating_mul(ASKS_PER_CHANGE)
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
    /// A Redis that wants a password the URL does not give says so: it
    /// answers NOAUTH to each command, or closes the connection on a large
    /// one from a client not logged in, which reads as the end of a file.
    pub(super) fn with_answers<T>(
        &self,
        shown: &str,
        answers: u32,
        f: impl FnMut(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let started = std::time::Instant::now();
        self.answered(shown, answers, f).map_err(|e| {
            let Error::Redis { source, .. } = &e else {
                return e;
            };
            let said = source.to_string();
            // The probe has what is left of the timeout, so that one call
            // still takes the timeout at most.
            let left = self.inner.timeout.saturating_sub(started.elapsed());
            let noauth = said.contains("NOAUTH")
                || (said.contains("end of file") || said.contains("reset by peer"))
                    && self.wants_password(left);
            if !noauth {
                return e;
            }
            Error::Redis {
                at: shown.to_string(),
                source: "authentication required: this Redis wants a password, and the URL \
                         gives none (redis://[USER]:PASSWORD@HOST…)"
                    .into(),
            }
        })
    }

    /// Whether a new connection's PING is refused for want of a login,
    /// asked within `within` (none left: not asked).
    fn wants_password(&self, within: Duration) -> bool {
        let half = within / 2;
        if half < Duration::from_millis(1) {
            return false;
        }
        let Ok(mut con) = self.inner.client.get_connection_with_timeout(half) else {
            return false;
        };
        let _ = con.set_read_timeout(Some(half));
        match redis::cmd("PING").query::<()>(&mut con) {
            Err(e) => e.code() == Some("NOAUTH"),
            Ok(()) => false,
        }
    }

    fn answered<T>(
        &self,
        shown: &str,
        answers: u32,
        mut f: impl FnMut(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let timeout = self.inner.timeout;
        // A read that timed out says so, not the system's word for it
        // ("Resource temporarily unavailable").
        let failed = |e: redis::RedisError| Error::Redis {
            at: shown.to_string(),
            source: Box::new(if e.is_timeout() {
                redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {} ms", timeout.as_millis()),
                ))
            } else {
                e
            }),
        };
        let started = std::time::Instant::now();
        // A free connection if there is one, else wait for one, within
        // the same time: a thread behind others waiting on a Redis that
        // hangs gives up when its own time is over.
        let cons = &self.inner.cons;
        let start = self
            .inner
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let freed = &self.inner.freed;
        // Looked for under the lock a connection let go is told under, so
        // that none is let go unseen between the look and the wait.
        let mut told = freed.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut taken = loop {
            let free =
                (0..cons.len()).find_map(|k| match cons[(start + k) % cons.len()].try_lock() {
                    Ok(slot) => Some(slot),
                    Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                    Err(std::sync::TryLockError::WouldBlock) => None,
                });
            if let Some(con) = free {
                drop(told);
                break Slot {
                    con: Some(con),
                    freed,
                };
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(Error::Redis {
                    at: shown.to_string(),
                    source: Box::new(redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "this process's {} connections to Redis were each busy with \
                             another request for {} ms",
                            cons.len(),
                            timeout.as_millis()
                        ),
                    ))),
                });
            }
            // Woken when one is let go.
            told = match freed.1.wait_timeout(told, timeout - waited) {
                Ok((told, _)) => told,
                Err(e) => e.into_inner().0,
            };
        };
        let slot = &mut **taken.con.as_mut().expect("taken above");
        let mut kept = slot.is_some();
        loop {
            // A connection made now had part of the time (its handshake
            // waits for Redis too): its first command gets what is left,
            // so that one call takes the timeout at most.
            let fresh = slot.is_none();
            if fresh {
                let con = self
                    .inner
                    .client
                    .get_connection_with_timeout(
                        timeout.saturating_sub(started.elapsed()) / self.handshake(),
                    )
                    .map_err(failed)?;
                *slot = Some(con);
            }
            let con = slot.as_mut().expect("connected above");
            // A pipeline waits for each of its answers in turn, each read
            // bounded by the socket's timeout: each gets its share of what
            // is left. The full timeout is set back whatever the answer.
            let tuned = fresh || answers > 1;
            if tuned {
                let left = timeout
                    .saturating_sub(started.elapsed())
                    .max(Duration::from_millis(1));
                let each = (left / answers.max(1)).max(Duration::from_millis(1));
                con.set_read_timeout(Some(each)).map_err(failed)?;
                con.set_write_timeout(Some(left)).map_err(failed)?;
            }
            let answer = f(con);
            let reset = |con: &mut Connection| -> redis::RedisResult<()> {
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))
            };
            match answer {
                Ok(v) => {
                    if tuned {
                        reset(con).map_err(failed)?;
                    }
                    return Ok(v);
                }
                Err(e) => {
                    let broken = e.is_io_error()
                        || e.is_timeout()
                        || e.is_connection_dropped()
                        || e.is_unrecoverable_error();
                    if !broken {
                        // Redis refused the command; the connection stays.
                        if tuned && reset(con).is_err() {
                            *slot = None;
                        }
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

    /// The parts the time of a connection's setup is shared among: its
    /// handshake waits for each answer in turn (a TLS handshake, a login
    /// or a protocol's HELLO, a database other than 0).
    fn handshake(&self) -> u32 {
        let info = &self.inner.url.info;
        let settings = info.redis_settings();
        let tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
        let hello = settings.password().is_some() || settings.protocol().supports_resp3();
        (u32::from(tls) + u32::from(hello) + u32::from(settings.db() != 0)).max(1)
    }
}

/// The value of `name` in an `INFO` answer (`name:value` lines).
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// The memory limit an `INFO` answer gives (`maxmemory`), 0 for none.
fn memory_limit(info: &str) -> u64 {
    info_field(info, "maxmemory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What [`Redis::eviction`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// A warning to give: the policy could not be read.
    pub warning: Option<String>,
    /// Whether Redis has a memory limit (`None`: not known).
    pub limited: Option<bool>,
}

/// Whether Redis refused a command to this user (an ACL user without
/// `@dangerous` may not read `INFO`).
fn not_permitted(err: &Error) -> bool {
    err.to_string().to_ascii_uppercase().contains("NOPERM")
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::model::{Label, TokenCounts};
    use crate::store::Store;
    use crate::store::testkit::message;
    use crate::vocab::Feature;

    /// Runs `openssl` with `args` in `dir`.
    fn openssl(dir: &Path, args: &[&str]) {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs (.ci/run installs it)");
        assert!(status.success(), "openssl {args:?}");
    }

    /// A redis-server speaking only TLS, killed when dropped.
    struct TlsServer(Child);

    impl Drop for TlsServer {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// `rediss://` with the authority that signed the server's certificate
    /// (`?ca=`): the store works over TLS; without it (the system does not
    /// trust that authority), or with `redis://`, it does not connect, and
    /// says so.
    #[test]
    fn rediss_with_the_servers_authority_connects_and_without_it_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        openssl(
            d,
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            ]
            .into_iter()
            .chain([
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=bayesmail test authority",
            ])
            .collect::<Vec<_>>(),
        );
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
            ]
            .into_iter()
            .chain(["-out", "server.csr", "-subj", "/CN=127.0.0.1"])
            .collect::<Vec<_>>(),
        );
        std::fs::write(d.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
            ]
            .into_iter()
            .chain([
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "san.ext",
            ])
            .collect::<Vec<_>>(),
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let _server = TlsServer(
            Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", "0"])
                .args(["--tls-port", &port.to_string()])
                .args([
                    "--tls-cert-file",
                    "server.pem",
                    "--tls-key-file",
                    "server.key",
                ])
                .args(["--tls-ca-cert-file", "ca.pem", "--tls-auth-clients", "no"])
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(d)
                .current_dir(d)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts"),
        );
        let ca = d.join("ca.pem");
        let url = format!("rediss://127.0.0.1:{port}/0?prefix=tls&ca={}", ca.display());
        let url = RedisUrl::parse(&url).unwrap();
        let timeout = Duration::from_secs(2);
        let deadline = Instant::now() + Duration::from_secs(10);
        let redis = loop {
            match Redis::connect(&url, timeout) {
                Ok(r) => break r,
                Err(e) if Instant::now() > deadline => panic!("no TLS connection: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let mut store = redis.store(None).unwrap();
        store
            .apply(&message(&["tls"], Label::Spam, 1, 1, 0))
            .unwrap();
        assert_eq!(
            store.token(Feature::Word("tls")).unwrap(),
            TokenCounts { ham: 0, spam: 1 }
        );

        let untrusted = RedisUrl::parse(&format!("rediss://127.0.0.1:{port}/0")).unwrap();
        let err = Redis::connect(&untrusted, timeout).unwrap_err().to_string();
        assert!(err.contains("Redis at rediss://127.0.0.1"), "{err}");
        let plain = RedisUrl::parse(&format!("redis://127.0.0.1:{port}/0")).unwrap();
        assert!(Redis::connect(&plain, timeout).is_err());
        // ca= names a file that must be there, and is for TLS only.
        let missing = RedisUrl::parse("rediss://127.0.0.1:1/0?ca=/nonexistent/ca.pem")
            .unwrap_err()
            .to_string();
        assert!(missing.contains("ca=/nonexistent/ca.pem"), "{missing}");
        let err = RedisUrl::parse(&format!("redis://127.0.0.1:1/0?ca={}", ca.display()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("rediss://"), "{err}");
    }
}
