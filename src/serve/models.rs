//! [`Models`]: the readers `serve` judges with, one per database (the
//! global one and each user's), opened on first use, kept under a memory
//! bound (least recently used out) and refreshed when a writer changed
//! their model or journal; and learning, through the same calls as the
//! `learn` and `unlearn` commands.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::learn_error::LearnError;
use super::users::{UserDbPattern, UserError};
use crate::db::shared::SharedModel;
use crate::db::{
    self, Database, Labelled, ModelAfter, Origin, Reader, Reason, Stamped, Status, Taught,
    TrainSummary,
};
use crate::decision::Decider;
use crate::features::Extractor;
use crate::model::{Label, Params};
use crate::store::redis::Redis;

/// What [`Models`] needs to know.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    /// The global database: judges users without a model of their own
    /// (or all, without `user_db`).
    pub global: PathBuf,
    /// Where each user's database is, if users have their own.
    pub user_db: Option<UserDbPattern>,
    /// A user's model judges once it holds at least this many messages of
    /// each class; before, the global one does.
    pub min_user_messages: u64,
    /// Bytes of models kept open at once, at most (the last one used is
    /// always kept, however large).
    pub cache_bytes: u64,
    /// The verdict rule.
    pub decider: Decider,
    /// Learning: how long to wait for another writer's lock.
    pub learn_wait: Duration,
    /// Learning: the journal's bound.
    pub journal_limit: u64,
    /// Learning: the parameters of a first model.
    pub params: Params,
    /// Where the counts are when they are in Redis (`--store`): then every
    /// model, the global one and each user's, is there, and `global` and
    /// `user_db` are not used.
    pub shared: Option<Redis>,
    /// With the counts in Redis: how long counts read from it are used
    /// again (another host's learn reaches this one's verdicts within it).
    pub shared_window: Duration,
    /// With the counts in Redis: the Redis memory each model (the global
    /// one and each user's) is kept under, in bytes (see
    /// [`Models::keep_under_cap`]).
    pub shared_cap: Option<u64>,
    /// The characters that start an address extension in a user name's
    /// local part (Postfix's `recipient_delimiter`): whichever protocol
    /// names `alice+lists@example.org` (a milter's recipient, spamd's
    /// `User`, HTTP's), alice@example.org's model judges and learns.
    /// Empty: none.
    pub recipient_delimiter: String,
}

/// Which model judged a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// The user's own.
    User(String),
    /// The global one.
    Global,
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Which::User(u) => write!(f, "user:{u}"),
            Which::Global => f.write_str("global"),
        }
    }
}

/// A message judged, and which model judged it.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The verdict and its fields, or why there is none.
    pub stamped: Stamped,
    /// The model that judged; `None` when none could.
    pub which: Option<Which>,
}

impl Judged {
    /// The header fields that say the verdict ([`Status::fields`]); where
    /// users have models of their own (`per_user`), `X-Spam-Status` also
    /// says which kind judged: `model=user` or `model=global`. The user is
    /// not named: with several recipients one copy would name another,
    /// perhaps a Bcc.
    ///
    /// [`Status::fields`]: crate::db::Status::fields
    pub fn fields(&self, per_user: bool) -> Vec<(&'static str, String)> {
        let mut fields = self.stamped.status.fields();
        if let (true, Some(which)) = (per_user, &self.which) {
            let kind = match which {
                Which::User(_) => "user",
                Which::Global => "global",
            };
            for (name, value) in &mut fields {
                if *name == "X-Spam-Status" {
                    value.push_str(", model=");
                    value.push_str(kind);
                }
            }
        }
        fields
    }
}

/// One open database: its reader and the bytes its model takes.
struct Open {
    reader: RwLock<Reader>,
    bytes: u64,
    /// A refresh failed and the log said so: said once until one works.
    refresh_failed: std::sync::atomic::AtomicBool,
}

/// The open readers, with when each was last used.
#[derive(Default)]
struct Cache {
    open: HashMap<PathBuf, (Arc<Open>, u64)>,
    clock: u64,
    bytes: u64,
}

/// The readers `serve` judges with, and its learning.
pub struct Models {
    settings: RwLock<ModelSettings>,
    cache: Mutex<Cache>,
    /// With the counts in Redis: each model judged with lately, by user
    /// (None: the global one).
    shared: Mutex<HashMap<Option<String>, Arc<SharedModel>>>,
    /// What the log has said once already (a user's model judged by the
    /// global one, and why; a database found where it used to be).
    noted: Mutex<std::collections::HashSet<String>>,
}

/// Notes kept at once, at most: past it they are forgotten and may be
/// said again (a flood of names cannot grow the set without bound).
const NOTES: usize = 10_000;

/// Models in Redis kept at once, at most (each is its totals, the tables
/// made from them, and counts it read lately: see [`USER_RECENT_MAX`]).
const SHARED_MODELS: usize = 1024;

/// Features of the counts read lately that a user's model in Redis holds,
/// at most (some hundreds of kilobytes): any client may name users, and
/// every model named holds what it read, so all of them together stay
/// within some hundreds of megabytes. The global model, which judges
/// most mail, holds as many as a model holds unless told.
const USER_RECENT_MAX: usize = 8_192;

impl std::fmt::Debug for Models {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Models").finish_non_exhaustive()
    }
}

/// The model file's size.
fn model_bytes(db: &Path) -> u64 {
    std::fs::metadata(crate::db::DbPaths::new(db).snapshot()).map_or(0, |m| m.len())
}

impl Models {
    /// Models under `settings`; nothing is opened yet.
    pub fn new(settings: ModelSettings) -> Models {
        Models {
            settings: RwLock::new(settings),
            cache: Mutex::new(Cache::default()),
            shared: Mutex::new(HashMap::new()),
            noted: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Logs `line` unless it was logged before (since the start or the
    /// last reload).
    fn note_once(&self, line: String) {
        let mut noted = self.noted.lock().unwrap_or_else(|e| e.into_inner());
        if noted.len() >= NOTES {
            noted.clear();
        }
        if noted.insert(line.clone()) {
            super::log_line(&line);
        }
    }

    /// Replaces the settings and forgets every open reader (a reload).
    pub(crate) fn reload(&self, settings: ModelSettings) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = settings;
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = Cache::default();
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.noted.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The current settings.
    pub fn settings(&self) -> ModelSettings {
        self.settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// With the counts in Redis and a cap: keeps every model in Redis, the
    /// global one and each user's, under the cap (see
    /// [`crate::store::redis::RedisStore::cap`]; a model another host is
    /// capping is left to it). Stops when `stop` says so, and at the first
    /// model Redis does not answer for. Returns a line for each model it
    /// trimmed or could not. Works on models of its own, so that the
    /// counts the judging models read lately stay theirs.
    pub fn keep_under_cap(&self, stop: &dyn Fn() -> bool) -> Vec<String> {
        let settings = self.settings();
        let (Some(redis), Some(max)) = (settings.shared, settings.shared_cap) else {
            return Vec::new();
        };
        let users = match redis.users() {
            Ok(users) => users,
            Err(err) => return vec![format!("store: listing the users' models: {err}")],
        };
        let mut lines = Vec::new();
        for user in std::iter::once(None).chain(users.iter().map(|u| Some(u.as_str()))) {
            if stop() {
                break;
            }
            let whose = user.map_or("the global model".to_string(), |u| format!("user {u}"));
            let capped = SharedModel::of(&redis, user).and_then(|model| model.cap(max));
            match capped {
                Ok(Some(c)) if c.removed > 0 => lines.push(format!(
                    "store: {whose}: removed {} tokens, the least seen and oldest, to fit the \
                     cap of {:.1} MB ({:.1} MB before, {:.1} MB now)",
                    c.removed,
                    max as f64 / 1e6,
                    c.before as f64 / 1e6,
                    c.after as f64 / 1e6
                )),
                Ok(_) => {}
                Err(err) => {
                    let unreachable = matches!(err, crate::store::Error::Redis { .. });
                    lines.push(format!("store: {whose}: keeping it under the cap: {err}"));
                    if unreachable {
                        break;
                    }
                }
            }
        }
        lines
    }

    /// Whether users have models of their own (`--user-db`, or the counts
    /// in Redis).
    pub fn per_user(&self) -> bool {
        let settings = self.settings.read().unwrap_or_else(|e| e.into_inner());
        settings.user_db.is_some() || settings.shared.is_some()
    }

    /// Before each change to the counts in Redis: its eviction policy,
    /// asked every time (an administrator may set one that evicts while
    /// serve runs, or Redis restarts with one). One that may evict counts
    /// refuses the change (and each later one until mended).
    fn check_eviction(&self, redis: &Redis) -> Result<(), LearnError> {
        if let Some(why) = redis.refuse_eviction().map_err(db::Error::from)? {
            self.note_once(format!("warning: {why}"));
        }
        Ok(())
    }

    /// The model in Redis of `user` (None: the global one). Opening one
    /// reads nothing: a user name that is refused is the only error.
    fn shared_model(
        &self,
        redis: &Redis,
        user: Option<&str>,
    ) -> Result<Arc<SharedModel>, LearnError> {
        let key = user.map(|u| self.user_name(u)).transpose()?;
        let user = key.as_deref();
        let mut models = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = models.get(&key) {
            return Ok(Arc::clone(m));
        }
        let window = self
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .shared_window;
        let mut model = SharedModel::of(redis, user)
            .map_err(db::Error::from)?
            .with_window(window);
        if user.is_some() {
            model = model.with_recent_max(USER_RECENT_MAX);
        }
        let model = Arc::new(model);
        if models.len() >= SHARED_MODELS {
            models.clear();
        }
        models.insert(key, Arc::clone(&model));
        Ok(model)
    }

    /// [`Models::judge_parsed`] with the counts in Redis.
    fn judge_shared(
        &self,
        redis: &Redis,
        user: Option<&str>,
        parsed: &db::Parsed,
        settings: &ModelSettings,
    ) -> Judged {
        let unknown = |reason, why: String| Judged {
            stamped: Stamped::unknown(reason, why),
            which: None,
        };
        // A name refused (as a milter's recipient can be): the global
        // model judges, as for a user without a model, and the log says so.
        let user = match user.map(|u| self.user_name(u)).transpose() {
            Ok(user) => user,
            Err(err) => {
                self.note_once(format!("{err}; judged with the global model"));
                None
            }
        };
        let user_model = match user
            .as_deref()
            .map(|u| self.shared_model(redis, Some(u)))
            .transpose()
        {
            Ok(m) => m,
            Err(err) => return unknown(Reason::Config, err.to_string()),
        };
        let global = match self.shared_model(redis, None) {
            Ok(m) => m,
            Err(err) => return unknown(Reason::Config, err.to_string()),
        };
        let (stamped, by_user, unread) = db::stamp_shared_parsed(
            &global,
            user_model
                .as_deref()
                .map(|m| (m, settings.min_user_messages)),
            parsed,
            &settings.decider,
        );
        if let (Some(why), Some(user)) = (unread, &user) {
            let user = crate::sanitize::log_value(user);
            self.note_once(format!("user {user}: {why}; judged with the global model"));
        }
        let which = match (&stamped.status, user) {
            (Status::Unknown(_), _) => None,
            (_, Some(user)) if by_user => Some(Which::User(user)),
            _ => Some(Which::Global),
        };
        Judged { stamped, which }
    }

    /// Databases open now, and the bytes their models take.
    pub fn open_now(&self) -> Vec<(PathBuf, u64)> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut open: Vec<_> = cache
            .open
            .iter()
            .map(|(p, (o, _))| (p.clone(), o.bytes))
            .collect();
        open.sort();
        open
    }

    /// Databases open now, and how many times each one's reader has read
    /// its model ([`Reader::loads`]: once at open, once per change a writer
    /// made): the model's generation as this process knows it.
    pub fn generations(&self) -> Vec<(PathBuf, u64)> {
        let open: Vec<_> = {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache
                .open
                .iter()
                .map(|(p, (o, _))| (p.clone(), o.clone()))
                .collect()
        };
        let mut out: Vec<_> = open
            .into_iter()
            .map(|(p, o)| {
                let loads = o.reader.read().unwrap_or_else(|e| e.into_inner()).loads();
                (p, loads)
            })
            .collect();
        out.sort();
        out
    }

    /// The reader of the database at `dir`, opened if need be (evicting the
    /// least recently used ones past the memory bound) and refreshed if a
    /// writer changed its files.
    fn reader(&self, dir: &Path, bound: u64) -> db::Result<Arc<Open>> {
        use std::sync::atomic::Ordering::Relaxed;
        let found = {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.clock += 1;
            let now = cache.clock;
            cache.open.get_mut(dir).map(|(open, used)| {
                *used = now;
                open.clone()
            })
        };
        if let Some(open) = found {
            let current = open
                .reader
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .is_current();
            if current {
                return Ok(open);
            }
            // Ok: read again; Err(true): unreadable, kept as it was;
            // Err(false): the model is gone.
            let kept: Result<(), bool> = {
                let mut reader = open.reader.write().unwrap_or_else(|e| e.into_inner());
                match reader.refresh() {
                    Ok(_) => Ok(()),
                    // Damaged or unreadable: it judges with what it had,
                    // and the log says so once.
                    // (Gone is only "no such file": a directory closed
                    // to this process is no reason to forget its model.)
                    Err(e)
                        if !matches!(
                            std::fs::symlink_metadata(reader.paths().snapshot()),
                            Err(ref gone) if gone.kind() == std::io::ErrorKind::NotFound
                        ) =>
                    {
                        if !open.refresh_failed.swap(true, Relaxed) {
                            super::log_line(&format!(
                                "model {}: changed, but not read again ({}); judging with \
                                 the model as it was",
                                crate::sanitize::for_terminal(&dir.display().to_string()),
                                crate::sanitize::for_terminal(&e.to_string())
                            ));
                        }
                        Err(true)
                    }
                    // The model is gone (removed, or the counts no longer
                    // hold both classes): judging with it would judge with
                    // what the database no longer has.
                    Err(_) => Err(false),
                }
            };
            match kept {
                Ok(()) => {
                    open.refresh_failed.store(false, Relaxed);
                    return Ok(open);
                }
                Err(true) => return Ok(open),
                // Forgotten; opened anew below, which says why there is
                // none (or reads one made meanwhile).
                Err(false) => {
                    let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                    // Unless another thread has put a new one there since.
                    if cache
                        .open
                        .get(dir)
                        .is_some_and(|(cached, _)| Arc::ptr_eq(cached, &open))
                        && let Some((gone, _)) = cache.open.remove(dir)
                    {
                        cache.bytes -= gone.bytes;
                    }
                }
            }
        }
        let reader = Database::new(dir).reader()?;
        let open = Arc::new(Open {
            bytes: model_bytes(dir),
            reader: RwLock::new(reader),
            refresh_failed: Default::default(),
        });
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.clock += 1;
        let now = cache.clock;
        if let Some((old, _)) = cache.open.insert(dir.to_path_buf(), (open.clone(), now)) {
            cache.bytes -= old.bytes;
        }
        cache.bytes += open.bytes;
        while cache.bytes > bound && cache.open.len() > 1 {
            let Some(oldest) = cache
                .open
                .iter()
                .filter(|(p, _)| p.as_path() != dir)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            if let Some((gone, _)) = cache.open.remove(&oldest) {
                cache.bytes -= gone.bytes;
            }
        }
        Ok(open)
    }

    /// The user `given` (by a request, or as a milter's recipient) names:
    /// without its address extension ([`super::users::without_extension`]
    /// by the settings' delimiters), then checked
    /// ([`super::users::check_user`]).
    pub(crate) fn user_name(&self, given: &str) -> Result<String, UserError> {
        super::users::check_user(&self.without_extension(given))
    }

    /// `given` without its address extension and its domain's trailing
    /// dot, by the settings' delimiters.
    fn without_extension(&self, given: &str) -> String {
        let settings = self.settings.read().unwrap_or_else(|e| e.into_inner());
        super::users::without_extension(given, &settings.recipient_delimiter)
    }

    /// The model learning for `user` goes to: the user's own when users
    /// have their own (`--user-db`, or the counts in Redis), else the
    /// global one.
    pub fn learning_model(&self, user: Option<&str>) -> Result<Which, UserError> {
        let Some(user) = user else {
            return Ok(Which::Global);
        };
        let shared = self
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .shared
            .is_some();
        let user = self.user_name(user)?;
        if shared {
            return Ok(Which::User(user));
        }
        Ok(match self.user_db(&user)? {
            Some(_) => Which::User(user),
            None => Which::Global,
        })
    }

    /// The database of `user` (a name already checked and without its
    /// address extension) under
    /// the settings, if users have their own.
    /// A database made where an earlier version put it
    /// ([`UserDbPattern::earlier_path`]) and not yet moved is used there,
    /// and the log says once where to move it.
    pub fn user_db(&self, user: &str) -> Result<Option<PathBuf>, UserError> {
        let settings = self.settings.read().unwrap_or_else(|e| e.into_inner());
        let Some(pattern) = settings.user_db.as_ref() else {
            return Ok(None);
        };
        let path = pattern.path(user)?;
        if !path.exists()
            && let Some(earlier) = pattern
                .earlier_path(user)
                // A database's own files, not a directory named like one
                // (the domain directory holding a user called
                // `counts.sled` or `model.bin` is no database).
                .filter(|p| crate::db::DbPaths::new(p).holds_database())
        {
            self.note_once(format!(
                "user {}: its database is at {}, where an earlier version put it; \
                 move it to {} (it is used where it is until then)",
                crate::sanitize::log_value(user),
                earlier.display(),
                path.display()
            ));
            return Ok(Some(earlier));
        }
        Ok(Some(path))
    }

    /// Judges the message `parsed` for `user` (or for no one): with the
    /// user's own model when there is one holding at least the minimum of
    /// each class, else with the global one. Never fails: whatever goes
    /// wrong is a status without a verdict, with its reason.
    fn judge_parsed(&self, user: Option<&str>, parsed: &db::Parsed) -> Judged {
        let settings = self.settings();
        if let Some(redis) = &settings.shared {
            return self.judge_shared(redis, user, parsed, &settings);
        }
        let bound = settings.cache_bytes;
        let unknown = |reason, why: String| Judged {
            stamped: Stamped::unknown(reason, why),
            which: None,
        };
        // The user's model when it can judge; else the global one, and a
        // line in the log when that is not simply because the user has no
        // model yet (a name refused, as a milter's recipient can be; a
        // model that cannot be read).
        let mut chosen = None;
        if let Some(user) = user {
            let db = self
                .user_name(user)
                .and_then(|user| Ok((self.user_db(&user)?, user)));
            match db {
                Ok((Some(dir), user)) => match self.reader(&dir, bound) {
                    Ok(open) => {
                        let reader = open.reader.read().unwrap_or_else(|e| e.into_inner());
                        let messages = reader.classifier().header().totals.messages;
                        drop(reader);
                        if crate::db::user_model_judges(messages, settings.min_user_messages) {
                            chosen = Some((open, Which::User(user)));
                        }
                    }
                    Err(err) if Reason::of(&err) == Reason::NoModel => {}
                    Err(err) => {
                        let user = crate::sanitize::log_value(&user);
                        self.note_once(format!("user {user}: {err}; judged with the global model"))
                    }
                },
                Ok((None, _)) => {}
                Err(err) => self.note_once(format!("{err}; judged with the global model")),
            }
        }
        let (open, which) = match chosen {
            Some(c) => c,
            None => match self.reader(&settings.global, bound) {
                Ok(open) => (open, Which::Global),
                Err(err) => return unknown(Reason::of(&err), err.to_string()),
            },
        };
        let reader = open.reader.read().unwrap_or_else(|e| e.into_inner());
        let stamped = reader.stamp_parsed(parsed, &settings.decider);
        Judged {
            which: stamped.log_odds.is_some().then_some(which),
            stamped,
        }
    }

    /// The Redis that holds the counts, if they are there.
    pub fn shared(&self) -> Option<Redis> {
        let settings = self.settings.read().unwrap_or_else(|e| e.into_inner());
        settings.shared.clone()
    }

    /// Judges `raw` for each of `users` (each with the user's own model
    /// when it holds the minimum of each class, else the global one; no
    /// users: for no one) and keeps the judgment least harmful to any of
    /// them: ham over
    /// unsure over spam, then the lowest probability; no verdict at all
    /// (the message passed on unscored) over any. One copy of a message
    /// goes to all its recipients, so it is junked, refused or held only
    /// when every recipient's model calls it spam: one user's model never
    /// costs another user a real message, whatever the recipients' order.
    pub fn judge_for_all(&self, users: &[String], raw: &[u8]) -> Judged {
        // Read once, judged by each model.
        let parsed = db::Parsed::of(raw);
        let mut judged = users.iter().map(|u| self.judge_parsed(Some(u), &parsed));
        let Some(first) = judged.next() else {
            return self.judge_parsed(None, &parsed);
        };
        judged.fold(first, |kept, next| {
            if harm(&next) < harm(&kept) {
                next
            } else {
                kept
            }
        })
    }

    /// The database learning for `user` goes to: the user's own when users
    /// have their own, else the global one.
    fn learning_db(
        &self,
        user: Option<&str>,
        origin: Origin,
    ) -> Result<(Database, ModelSettings), LearnError> {
        let settings = self.settings();
        let dir = match user
            .map(|u| self.user_name(u).and_then(|u| self.user_db(&u)))
            .transpose()?
            .flatten()
        {
            Some(dir) => super::users::room_for(dir).map_err(db::Error::from)?,
            None => settings.global.clone(),
        };
        Ok((Database::new(dir).with_origin(origin), settings))
    }

    /// Learns `raw` as `label` for `user` (see [`Database::learn`]):
    /// idempotent, and a message learned under the other label is moved.
    /// The learn log says it came from `origin`.
    pub fn learn(
        &self,
        user: Option<&str>,
        raw: &[u8],
        label: Label,
        origin: Origin,
    ) -> Result<Taught<(TrainSummary, ModelAfter)>, LearnError> {
        if !crate::message::looks_like_mail(raw) {
            return Err(LearnError::Message(crate::sources::NOT_MAIL.to_string()));
        }
        let (features, identity) = Extractor::new()
            .read(raw)
            .map_err(|e| LearnError::Message(e.to_string()))?;
        let message = Labelled {
            features,
            identity,
            label,
        };
        if let Some(redis) = self.settings().shared {
            self.check_eviction(&redis)?;
            let model = self.shared_model(&redis, user)?;
            if user.is_some() && model.messages().map_err(db::Error::from)? == [0, 0] {
                redis.room_for_a_new_model().map_err(db::Error::from)?;
            }
            let summary = model.learn_all(std::slice::from_ref(&message))?;
            return Ok(Taught::Now((summary, ModelAfter::UpToDate)));
        }
        let (db, settings) = self.learning_db(user, origin)?;
        let (wait, limit) = (settings.learn_wait, settings.journal_limit);
        let raw = || Ok(vec![raw.to_vec()]);
        let taught = db.learn_or_leave(&[message], raw, wait, limit, settings.params)?;
        if let Taught::Now((summary, _)) = &taught {
            super::log_notes(&[&summary.log_failure, &summary.rebuilt]);
        }
        Ok(taught)
    }

    /// Unlearns `raw` for `user`: returns the label it had (`None`: left
    /// for the writer holding the database). The learn log says it came
    /// from `origin`.
    pub fn unlearn(
        &self,
        user: Option<&str>,
        raw: &[u8],
        origin: Origin,
    ) -> Result<Option<Label>, LearnError> {
        let (features, identity) = Extractor::new()
            .read(raw)
            .map_err(|e| LearnError::Message(e.to_string()))?;
        if let Some(redis) = self.settings().shared {
            self.check_eviction(&redis)?;
            let model = self.shared_model(&redis, user)?;
            return (model.unlearn(&features, &identity))
                .map_err(db::Error::from)?
                .map(Some)
                .ok_or(LearnError::Db(db::Error::NotLearned));
        }
        let (db, settings) = self.learning_db(user, origin)?;
        let (wait, limit) = (settings.learn_wait, settings.journal_limit);
        let given = [(&features, identity)];
        let raw = || Ok(vec![raw.to_vec()]);
        match db.unlearn_or_leave(&given, raw, wait, limit, settings.params)? {
            Taught::Now(mut unlearned) => {
                super::log_notes(&[&unlearned.log_failure, &unlearned.rebuilt]);
                Ok(Some(unlearned.results.remove(0)?))
            }
            Taught::Left => Ok(None),
        }
    }
}

/// How harmful a judgment is to a recipient whose mail it is: no verdict
/// (passed on), ham, unsure, spam; within a verdict, by probability.
fn harm(judged: &Judged) -> (usize, f64) {
    match judged.stamped.status {
        crate::db::Status::Unknown(_) => (0, 0.0),
        crate::db::Status::Verdict {
            verdict,
            probability,
            ..
        } => (verdict.index() + 1, probability),
    }
}
