//! `serve`: one resident process that mail servers call, over a milter
//! (Postfix, Sendmail), spamd's protocol (spamc, Exim) and HTTP/JSON, with
//! a model per user.
//!
//! Async is here only: a tokio runtime accepts connections and reads and
//! writes them; judging and learning are the library's synchronous calls
//! ([`Models`]), run on tokio's blocking threads. Every failure to judge is
//! an answer without a verdict, never a lost or altered message.

pub mod budget;
mod learn_error;
pub mod listen;
pub mod metrics;
mod models;
pub mod users;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

pub use learn_error::LearnError;
pub use listen::{Addr, BoxConn, Listener, Network, Peer};
pub use metrics::Metrics;
pub use milter::{RENAMED_FIELDS, SpamAction};
pub use models::{Judged, ModelSettings, Models, Which};

use crate::model::Label;

/// The protocols `serve` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// spamd's (SPAMC/1.5).
    Spamd,
    /// The milter protocol (version 6).
    Milter,
    /// HTTP/1.1 with JSON answers.
    Http,
}

impl Protocol {
    /// Its name, as the command line and the log say it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Spamd => "spamd",
            Protocol::Milter => "milter",
            Protocol::Http => "http",
        }
    }
}

/// What `serve` is told.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where to listen, and for which protocol.
    pub listen: Vec<(Protocol, Addr)>,
    /// The networks TCP peers may connect from.
    pub allow: Vec<Network>,
    /// Mode of the Unix sockets it makes.
    pub socket_mode: u32,
    /// Group of the Unix sockets it makes.
    pub socket_group: Option<u32>,
    /// The models and learning.
    pub models: ModelSettings,
    /// Messages larger than this get no verdict (and are passed on
    /// unchanged).
    pub max_message: u64,
    /// Bytes of messages held at once by each protocol's connections: a
    /// message that would pass it gets no verdict (`busy`) and is passed
    /// on.
    pub max_held: u64,
    /// Connections served at once on each listener; more wait to be
    /// accepted. Each has its own, so that clients of one protocol cannot
    /// take the MTA's milter connections.
    pub max_connections: usize,
    /// A client that sends nothing for this long is dropped.
    pub read_timeout: Duration,
    /// A spamd request, or an HTTP request's body, not whole in this long
    /// (and coming slower than [`MIN_RATE`]) is answered with a timeout and
    /// its connection closed.
    pub request_timeout: Duration,
    /// A kept-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// After SIGTERM, how long connections in flight may take to finish.
    pub shutdown_grace: Duration,
    /// One log line per message on stderr.
    pub log_messages: bool,
    /// What the milter does with a message judged spam.
    pub milter_spam_action: SpamAction,
}

/// What every connection shares.
#[derive(Debug)]
pub(crate) struct State {
    /// The settings, as SIGHUP last read them ([`State::settings`]).
    settings: std::sync::RwLock<Arc<Settings>>,
    /// The models.
    pub models: Models,
    /// The counters.
    pub metrics: Metrics,
    /// The bytes of messages held at once, for each protocol
    /// ([`State::budget`]).
    budgets: [Arc<budget::Budget>; 3],
    /// The messages being read into features at once to judge.
    pub judging: budget::ParseRoom,
    /// The messages being read into features at once to learn.
    pub learning: budget::ParseRoom,
    /// Whether an MTA was found not to let the milter add and change
    /// header fields (said once).
    pub milter_fields_refused: AtomicBool,
    /// Connections open now.
    pub open: AtomicUsize,
    /// Told when the server is stopping: a kept-alive connection ends after
    /// its current request.
    pub stopping: Notify,
    /// Set once the server is stopping.
    pub stopped: AtomicBool,
}

impl State {
    /// Shared state for `settings`.
    pub fn new(settings: Settings) -> State {
        State {
            judging: budget::ParseRoom::new(settings.max_message),
            learning: budget::ParseRoom::new(settings.max_message),
            milter_fields_refused: AtomicBool::new(false),
            models: Models::new(settings.models.clone()),
            budgets: [(); 3].map(|()| budget::Budget::new(settings.max_held)),
            settings: std::sync::RwLock::new(Arc::new(settings)),
            metrics: Metrics::default(),
            open: AtomicUsize::new(0),
            stopping: Notify::new(),
            stopped: Default::default(),
        }
    }

    /// The settings in use: a connection reads them as it needs them, so
    /// a reload holds from its next request or message on.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes `new` settings (SIGHUP), but for what is fixed once serve
    /// runs (where it listens, its sockets, the connections and bytes it
    /// holds, the grace at the end), and reopens every model. Returns the
    /// names of the settings that changed but were kept.
    pub fn reload(&self, mut new: Settings) -> Vec<&'static str> {
        let old = self.settings();
        let mut kept = Vec::new();
        let mut keep = |name, changed: bool| {
            if changed {
                kept.push(name);
            }
        };
        keep("where it listens", new.listen != old.listen);
        keep("socket_mode", new.socket_mode != old.socket_mode);
        keep("socket_group", new.socket_group != old.socket_group);
        keep("max_held", new.max_held != old.max_held);
        keep(
            "max_connections",
            new.max_connections != old.max_connections,
        );
        // A message of the largest size judged must fit in the bytes held,
        // which stay as started.
        if new.max_message > old.max_held {
            keep("max_size (over max_held)", true);
            new.max_message = old.max_message;
        }
        new.listen = old.listen.clone();
        new.socket_mode = old.socket_mode;
        new.socket_group = old.socket_group;
        new.max_held = old.max_held;
        new.max_connections = old.max_connections;
        new.shutdown_grace = old.shutdown_grace;
        self.judging.fit(new.max_message);
        self.learning.fit(new.max_message);
        self.models.reload(new.models.clone());
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
        kept
    }

    /// Judges `raw` for `user` on a blocking thread, counts it and logs it
    /// (when asked to): `id` names the message in the log (a queue id or a
    /// Message-ID).
    /// `max_message` is the size limit the message was read under (a
    /// reload meanwhile does not change what it is judged by).
    pub async fn judge(
        self: &Arc<Self>,
        user: Option<String>,
        raw: Vec<u8>,
        id: &str,
        max_message: u64,
    ) -> Judged {
        self.judge_for_all(user.into_iter().collect(), raw, id, max_message)
            .await
    }

    /// [`State::judge`] for each of `users` (none: for no one), keeping
    /// the judgment least harmful to any of them
    /// ([`Models::judge_for_all`]).
    pub async fn judge_for_all(
        self: &Arc<Self>,
        users: Vec<String>,
        raw: Vec<u8>,
        id: &str,
        max_message: u64,
    ) -> Judged {
        let started = Instant::now();
        if raw.len() as u64 > max_message {
            return self.too_large(&users, id, max_message);
        }
        let state = self.clone();
        let judged = {
            // Each model may ask once, and one more time is allowed.
            let bound = self.models.shared().map(|redis| {
                let asks =
                    u32::try_from(users.len().max(1)).map_or(u32::MAX, |n| n.saturating_add(1));
                redis.timeout().saturating_mul(asks)
            });
            let users = users.clone();
            // Waiting for a turn has a bound of its own where the store has
            // one: threads still waiting for the store hold their turns, and
            // a message behind them is busy, not the store's to blame.
            let turn = match bound {
                None => Some(state.judging.turn(raw.len()).await),
                Some(bound) => tokio::time::timeout(bound, state.judging.turn(raw.len()))
                    .await
                    .ok(),
            };
            let Some(turn) = turn else {
                let judged = Judged {
                    stamped: crate::db::Stamped::unknown(
                        crate::db::Reason::Busy,
                        "other messages were being read: passed on unscored".to_string(),
                    ),
                    which: None,
                };
                self.record(&users, id, &judged, started.elapsed());
                return judged;
            };
            let judging = tokio::task::spawn_blocking(move || {
                let _turn = turn;
                state.models.judge_for_all(&users, &raw)
            });
            let judged = match bound {
                None => Ok(judging.await),
                // The thread still waiting holds its connection until the
                // answer ends; the others take the rest.
                Some(bound) => tokio::time::timeout(bound, judging)
                    .await
                    .map_err(|_| bound),
            };
            match judged {
                Ok(Ok(judged)) => judged,
                Ok(Err(_)) => Judged {
                    stamped: crate::db::Stamped::unknown(
                        crate::db::Reason::Internal,
                        "internal error while judging".to_string(),
                    ),
                    which: None,
                },
                Err(bound) => Judged {
                    stamped: crate::db::Stamped::unknown(
                        crate::db::Reason::StoreUnavailable,
                        format!(
                            "the store gave no whole answer within {} ms",
                            bound.as_millis()
                        ),
                    ),
                    which: None,
                },
            }
        };
        self.record(&users, id, &judged, started.elapsed());
        judged
    }

    /// Counts `judged` and logs it (when asked to, or when it has a why).
    fn record(&self, users: &[String], id: &str, judged: &Judged, took: Duration) {
        self.metrics.judged(&judged.stamped.status, took);
        if self.settings().log_messages || judged.stamped.why.is_some() {
            log_line(&format!(
                "id={} user={} {} model={} ms={:.2}{}",
                crate::sanitize::log_value(if id.is_empty() { "-" } else { id }),
                crate::sanitize::log_value(&if users.is_empty() {
                    "-".to_string()
                } else {
                    users.join(";")
                }),
                judged
                    .stamped
                    .status
                    .fields()
                    .last()
                    .map_or(String::new(), |(_, v)| v
                        .split(", version=")
                        .next()
                        .unwrap_or("")
                        .replace(", ", " ")),
                judged
                    .which
                    .as_ref()
                    .map_or("none".to_string(), |w| crate::sanitize::log_value(
                        &w.to_string()
                    )
                    .into_owned()),
                took.as_secs_f64() * 1e3,
                judged
                    .stamped
                    .why
                    .as_deref()
                    .map_or(String::new(), |w| format!(
                        " why={}",
                        crate::sanitize::for_terminal(w)
                    )),
            ));
        }
    }

    /// The bytes of messages held at once by the connections of
    /// `protocol`: a message's, as they arrive, until its answer is made.
    pub fn budget(&self, protocol: Protocol) -> &Arc<budget::Budget> {
        &self.budgets[protocol as usize]
    }

    /// No verdict for `users` because the connections of `protocol` hold as
    /// many bytes of messages as they may ([`State::budget`]): counted and
    /// logged as any message without a verdict is.
    pub fn busy(&self, protocol: Protocol, users: &[String], id: &str) -> Judged {
        let judged = Judged {
            stamped: crate::db::Stamped::unknown(
                crate::db::Reason::Busy,
                budget::busy_why(self.budget(protocol), "passed on unscored"),
            ),
            which: None,
        };
        self.record(users, id, &judged, Duration::ZERO);
        judged
    }

    /// Why a message larger than `max_message` bytes given to learn is not
    /// learned, in words: HTTP's `/learn` and spamd's TELL say the same.
    pub fn too_large_to_learn(max_message: u64) -> String {
        format!("message larger than {max_message} bytes: not learned")
    }

    /// No verdict for `users` because the message is larger than
    /// `max_message` bytes: counted and logged as any judgment, in no
    /// time (nothing was judged).
    pub fn too_large(&self, users: &[String], id: &str, max_message: u64) -> Judged {
        let judged = Judged {
            stamped: crate::db::Stamped::unknown(
                crate::db::Reason::TooLarge,
                format!("message larger than {max_message} bytes: passed on unscored"),
            ),
            which: None,
        };
        self.record(users, id, &judged, Duration::ZERO);
        judged
    }

    /// Learns (`Some(label)`) or unlearns (`None`) `raw` for `user` on a
    /// blocking thread, and counts it. Returns what it did in words.
    pub async fn learn(
        self: &Arc<Self>,
        user: Option<String>,
        raw: Vec<u8>,
        label: Option<Label>,
        origin: crate::db::Origin,
    ) -> Result<Learned, LearnError> {
        let state = self.clone();
        let bound = (self.models.shared())
            .map(|redis| (redis.change_bound(), redis.url().shown().to_string()));
        let learning = async move {
            let turn = state.learning.turn(raw.len()).await;
            tokio::task::spawn_blocking(move || {
                let _turn = turn;
                match label {
                    Some(label) => state
                        .models
                        .learn(user.as_deref(), &raw, label, origin)
                        .map(|taught| match taught {
                            crate::db::Taught::Now((summary, _)) if summary.relearned > 0 => {
                                Learned::Moved(label)
                            }
                            crate::db::Taught::Now((summary, _)) if summary.learned > 0 => {
                                Learned::Learned(label)
                            }
                            crate::db::Taught::Now(_) => Learned::Already(label),
                            crate::db::Taught::Left => Learned::Queued(Some(label)),
                        }),
                    None => (state.models.unlearn(user.as_deref(), &raw, origin))
                        .map(|had| had.map_or(Learned::Queued(None), Learned::Unlearned)),
                }
            })
            .await
        };
        // The thread still waiting on a trickling answer holds its
        // connection until the answer ends; whether it stored the change
        // is not known, and telling it again is safe.
        let learned = match bound {
            None => Ok(learning.await),
            Some((bound, at)) => tokio::time::timeout(bound, learning)
                .await
                .map_err(|_| (bound, at)),
        };
        let result = match learned {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(LearnError::Message(
                "internal error while learning".to_string(),
            )),
            Err((bound, at)) => Err(LearnError::Db(crate::db::Error::Store(
                crate::store::Error::Redis {
                    at,
                    source: format!(
                        "the learn was not done within {} ms (Redis slow, or this server's \
                         learns of the model queued behind one another): whether the change \
                         was stored is not known, and making it again is safe",
                        bound.as_millis()
                    )
                    .into(),
                },
            ))),
        };
        // A learn that changed nothing (already learned) is neither a learn
        // nor an error.
        if !matches!(result, Ok(Learned::Already(_))) {
            self.metrics
                .learned(label.map(|l| l == Label::Spam), result.is_ok());
        }
        result
    }
}

/// What a learn through `serve` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// Learned under this label.
    Learned(Label),
    /// Moved from the other label to this one.
    Moved(Label),
    /// Already learned under this label: nothing changed.
    Already(Label),
    /// Unlearned; it had this label.
    Unlearned(Label),
    /// Another writer held the database past the wait: left for it to
    /// learn under this label (`None`: to unlearn) when it lets go.
    Queued(Option<Label>),
}

impl Learned {
    /// What was done, in the word the logs and HTTP's answer use, and the
    /// label.
    pub fn action(self) -> (&'static str, Option<Label>) {
        match self {
            Learned::Learned(l) => ("learned", Some(l)),
            Learned::Moved(l) => ("moved", Some(l)),
            Learned::Already(l) => ("already", Some(l)),
            Learned::Unlearned(l) => ("unlearned", Some(l)),
            Learned::Queued(l) => ("queued", l),
        }
    }
}

/// The device, inode and change time of the file at `path` (not
/// followed), if any: a filesystem may give a new file the inode number of
/// one just removed (ext4 does), not the same change time.
fn file_identity(path: &std::path::Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()))
}

/// Logs each of `notes` that there is, as a note.
fn log_notes(notes: &[&Option<String>]) {
    for note in notes.iter().copied().flatten() {
        log_line(&format!("note: {note}"));
    }
}

/// One line on stderr (where a service manager's journal takes it). A
/// closed or full stderr is ignored.
pub fn log_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "bayesmail serve: {line}");
}

/// Serves one connection with its protocol.
async fn connection(protocol: Protocol, conn: BoxConn, peer: Peer, state: Arc<State>) {
    let result = match protocol {
        Protocol::Spamd => spamd::serve(conn, &peer, &state).await,
        Protocol::Http => http::serve(conn, &peer, &state).await,
        Protocol::Milter => milter::serve(conn, &peer, &state).await,
    };
    if let Err(err) = result {
        log_line(&format!("{} {peer}: {err}", protocol.name()));
    }
}

mod http;
mod milter;
mod spamd;

/// Binds every address of `settings` (before any privilege is dropped).
pub fn bind(settings: &Settings) -> Result<Vec<(Protocol, Listener)>, listen::BindError> {
    settings
        .listen
        .iter()
        .map(|(p, a)| {
            Listener::bind(a, settings.socket_mode, settings.socket_group).map(|l| (*p, l))
        })
        .collect()
}

/// What SIGHUP calls: the settings to take, if they are read again.
pub type Reload = Box<dyn Fn() -> Option<Settings> + Send + Sync>;

/// A protocol and the address its listener is bound to.
pub type Bound = (Protocol, String);

/// Serves on `listeners` until SIGTERM or SIGINT, then lets connections in
/// flight finish (up to the grace period); SIGHUP calls `reload` and, when
/// it gives new model settings, takes them and forgets every open reader.
/// `ready` is called with the addresses once every listener accepts.
/// How often every model in Redis is checked against the cap.
const CAP_CHECK: Duration = Duration::from_secs(60);

/// Keeps the models in Redis under their cap, now and every
/// [`CAP_CHECK`] (see [`Models::keep_under_cap`]).
async fn keep_under_cap(state: Arc<State>) {
    loop {
        let models = state.clone();
        let lines = tokio::task::spawn_blocking(move || {
            models
                .models
                .keep_under_cap(&|| models.stopped.load(Ordering::SeqCst))
        })
        .await
        .unwrap_or_default();
        for line in lines {
            log_line(&line);
        }
        tokio::time::sleep(CAP_CHECK).await;
    }
}

pub fn run(
    settings: Settings,
    listeners: Vec<(Protocol, Listener)>,
    reload: Reload,
    ready: &dyn Fn(&[Bound]),
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bayesmail-serve")
        .build()?;
    let served = runtime.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let state = Arc::new(State::new(settings));
        let bound: Vec<_> = listeners.iter().map(|(p, l)| (*p, l.local())).collect();
        // Each socket file as bound (device, inode, change time): removed at the end
        // only if it is still that one, not one a serve started since
        // bound at the path once this one stopped listening.
        let sockets: Vec<_> = listeners
            .iter()
            .filter_map(|(_, l)| match l {
                Listener::Unix(_, path) => Some((path.clone(), file_identity(path)?)),
                Listener::Tcp(_) => None,
            })
            .collect();
        let mut tasks = tokio::task::JoinSet::new();
        for (protocol, listener) in listeners {
            let state = state.clone();
            let limit = Arc::new(Semaphore::new(state.settings().max_connections.max(1)));
            tasks.spawn(accept_loop(protocol, listener.accepting()?, state, limit));
        }
        tasks.spawn(keep_under_cap(state.clone()));
        ready(&bound);
        let stop = loop {
            tokio::select! {
                _ = term.recv() => break "SIGTERM",
                _ = int.recv() => break "SIGINT",
                _ = hup.recv() => {
                    if let Some(settings) = reload() {
                        let kept = state.reload(settings);
                        log_line(&format!(
                            "reloaded: settings read again, models reopened{}",
                            match kept.as_slice() {
                                [] => String::new(),
                                kept => format!(
                                    "; {} changed but stay{} as started until a restart",
                                    kept.join(", "),
                                    if kept.len() == 1 { "s" } else { "" }
                                ),
                            }
                        ));
                    }
                }
            }
        };
        // Stop accepting, then wait for what is in flight.
        let open = state.open.load(Ordering::SeqCst);
        log_line(&format!(
            "stopping ({stop}): no new connections{}",
            match open {
                0 => String::new(),
                n => format!(
                    "; {n} open may finish within {} s",
                    state.settings().shutdown_grace.as_secs()
                ),
            }
        ));
        state.stopped.store(true, Ordering::SeqCst);
        state.stopping.notify_waiters();
        tasks.abort_all();
        let deadline = Instant::now() + state.settings().shutdown_grace;
        while state.open.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = state.open.load(Ordering::SeqCst);
        if left > 0 {
            log_line(&format!("stopped with {left} connections still open"));
        } else {
            log_line("stopped");
        }
        for (path, bound) in sockets {
            if file_identity(&path) == Some(bound) {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(())
    });
    // A judging or learning thread still waiting for Redis (an answer
    // that trickles in for ever) is one its request gave up on already:
    // it must not keep the process from ending.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// Accepts connections on one listener, each served on its own task, at
/// most `limit` (the listener's own) at once; TCP peers outside the
/// allowed networks are closed at once.
async fn accept_loop(
    protocol: Protocol,
    listener: listen::Accepting,
    state: Arc<State>,
    limit: Arc<Semaphore>,
) {
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let (conn, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(err) => {
                // Out of descriptors, say: wait a little rather than spin.
                log_line(&format!(
                    "{}: accepting: {}",
                    protocol.name(),
                    crate::fsutil::words(&err)
                ));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if let Peer::Tcp(addr) = &peer
            && !state.settings().allow.iter().any(|n| n.contains(addr.ip()))
        {
            state.metrics.connection(false);
            log_line(&format!(
                "{}: refused {addr}: not in the allowed networks",
                protocol.name()
            ));
            continue;
        }
        state.metrics.connection(true);
        state.open.fetch_add(1, Ordering::SeqCst);
        let state = state.clone();
        tokio::spawn(async move {
            connection(protocol, conn, peer, state.clone()).await;
            state.open.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
        });
    }
}

/// Reads from `conn` into `buf` with the read timeout: `Ok(0)` at the end,
/// an error of kind `TimedOut` when the client sent nothing for that long.
pub async fn read_some(
    conn: &mut BoxConn,
    buf: &mut [u8],
    timeout: Duration,
) -> std::io::Result<usize> {
    use tokio::io::AsyncReadExt;
    match tokio::time::timeout(timeout, conn.read(buf)).await {
        Ok(read) => read,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client sent nothing for too long",
        )),
    }
}

/// The slowest a client may send a request and still be served: bytes a
/// second, on top of the request timeout (mod_reqtimeout's `MinRate`).
pub const MIN_RATE: u64 = 8 * 1024;

/// When a request being read must be whole: the request timeout after its
/// reading began, pushed back by the time the bytes received so far take
/// at [`MIN_RATE`]. A client that keeps up that rate is never cut, however
/// large its message; one trickling a byte now and then is cut at the
/// request timeout. Time spent on the request once read (judging) does
/// not count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestClock {
    began: Instant,
    whole: Duration,
    received: u64,
}

impl RequestClock {
    /// A request whose reading begins now, given `whole` at the least.
    pub fn start(whole: Duration) -> RequestClock {
        RequestClock {
            began: Instant::now(),
            whole,
            received: 0,
        }
    }

    /// Counts `n` more bytes received.
    pub fn received(&mut self, n: usize) {
        self.received = self.received.saturating_add(n as u64);
    }

    /// How long the next read may wait (at most `read_timeout`), and
    /// whether the request's deadline, not the read timeout, is what
    /// limits it.
    pub fn next_wait(&self, read_timeout: Duration) -> (Duration, bool) {
        let allowed = self
            .whole
            .saturating_add(Duration::from_secs(self.received / MIN_RATE));
        let left = allowed.saturating_sub(self.began.elapsed());
        if left < read_timeout {
            (left, true)
        } else {
            (read_timeout, false)
        }
    }

    /// The time the request was given before any byte counted.
    pub fn whole(&self) -> Duration {
        self.whole
    }
}
