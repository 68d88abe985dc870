//! `bayesmail serve`: its arguments, [`bayesmail::serve::bind`] then
//! [`bayesmail::serve::run`], and what they say. Between the two, the
//! privileges are dropped (`--user`), so that a server started as root may
//! listen on a low port and still never judge mail as root.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use bayesmail::serve::{self, ModelSettings, Network, Protocol, Settings, users::UserDbPattern};
use bayesmail::store::redis::Eviction;

use super::{Context, Outcome, ServeArgs};

pub(super) fn run(ctx: &Context, args: &ServeArgs) -> Result<Outcome> {
    let settings = read_settings(ctx, args)?;
    let listeners = serve::bind(&settings)?;
    if let Some(user) = args.user.as_deref().or(ctx.config.serve.user.as_deref()) {
        drop_privileges(user)?;
        // A model the user cannot read would leave every message
        // unjudged, each logged: say so once, now, and do not start.
        if let Some(why) = unreadable_model(&settings.models) {
            anyhow::bail!("user {user} {why}");
        }
    } else if nix::unistd::geteuid().is_root() {
        // Allowed (a test, a container), but not what a server should do.
        serve::log_line("running as root: --user USER runs it as that user once it is listening");
        // Learning into another user's database as root is refused (its
        // files would be closed to that user): say so now, not at the
        // first TELL.
        let refused = [
            (
                "the global database",
                bayesmail::db::Database::new(&settings.models.global).unsafe_for_root(),
            ),
            (
                "users' databases",
                (settings.models.user_db.as_ref())
                    .and_then(|p| bayesmail::fsutil::unsafe_for_root(&p.root())),
            ),
        ];
        for (which, why) in refused {
            if settings.models.shared.is_none()
                && let Some(why) = why
            {
                let hint = why
                    .owner
                    .as_ref()
                    .map(|owner| format!(" (--user {owner})"))
                    .unwrap_or_default();
                serve::log_line(&format!(
                    "learning into {which} is refused while serve runs as root: {}{hint}",
                    bayesmail::db::Error::Foreign { why }
                ));
            }
        }
    }
    // A server without a global model judges nothing a user's model does
    // not: said once, at the start, rather than by every message's line.
    if settings.models.shared.is_none() && has_no_model(&settings.models.global) {
        serve::log_line(&format!(
            "no model at {} yet: every message no user's model judges gets no verdict \
             (reason=no-model) until it holds ham and spam (`bayesmail --db {} train`, or \
             learning through serve)",
            settings.models.global.display(),
            settings.models.global.display()
        ));
    }
    // SIGHUP: the configuration read again (the databases, the users'
    // pattern, the verdict rule, and what serve does: which peers it
    // serves, sizes, timeouts, the milter's action, the log), every model
    // reopened; where it listens and what it holds stay until a restart. A
    // configuration that no longer reads keeps the old one.
    let given = ctx.given.clone();
    let again = args.clone();
    // A global model this process can no longer read (its files given to
    // another user, or made private), or that is not there, keeps the
    // settings in use too: reopened, every message would go unjudged.
    let in_use = std::sync::Mutex::new(settings.models.global.clone());
    let reload = move || match Context::new(given.clone())
        .and_then(|ctx| read_settings(&ctx, &again))
    {
        Ok(settings) => match unreadable_model(&settings.models).or_else(|| {
            let in_use = in_use.lock().unwrap_or_else(|e| e.into_inner());
            missing(&settings, &in_use)
        }) {
            None => {
                *in_use.lock().unwrap_or_else(|e| e.into_inner()) = settings.models.global.clone();
                Some(settings)
            }
            Some(why) => {
                serve::log_line(&format!(
                    "reload: this process {}; keeping the settings and models in use",
                    why.replace('\n', "; ")
                ));
                None
            }
        },
        Err(err) => {
            serve::log_line(&format!(
                "reload: {}; keeping the settings in use",
                super::render_error(&err).replace('\n', "; ")
            ));
            None
        }
    };
    serve::run(settings, listeners, Box::new(reload), &|bound| {
        for (protocol, addr) in bound {
            serve::log_line(&format!("{} listening on {addr}", protocol.name()));
        }
    })
    .context("running the server")?;
    Ok(Outcome::AllOk)
}

/// The server's settings from the arguments and the configuration, as
/// it starts and as SIGHUP reads them again.
fn read_settings(ctx: &Context, args: &ServeArgs) -> Result<Settings> {
    let conf = &ctx.config.serve;
    let mut listen = Vec::new();
    for (protocol, flags, keys) in [
        (Protocol::Spamd, &args.spamd, &conf.spamd),
        (Protocol::Milter, &args.milter, &conf.milter),
        (Protocol::Http, &args.http, &conf.http),
    ] {
        let addrs = if flags.is_empty() {
            parse_all(ctx, keys, protocol.name())?
        } else {
            flags.clone()
        };
        listen.extend(addrs.into_iter().map(|a| (protocol, a)));
    }
    if listen.is_empty() {
        bail!(
            "say where to listen: --spamd ADDR, --milter ADDR and/or --http ADDR (or spamd, \
             milter, http in the config file's [serve] table)"
        );
    }
    let models = model_settings(ctx, args)?;
    let socket_group = args
        .socket_group
        .as_deref()
        .or(conf.socket_group.as_deref())
        .map(group_id)
        .transpose()?;
    let socket_mode = match (args.socket_mode, &conf.socket_mode) {
        (Some(mode), _) => mode,
        (None, Some(text)) => {
            super::args::parse_mode(text).map_err(|e| ctx.file_fault("[serve] socket_mode", e))?
        }
        (None, None) => 0o660,
    };
    let allow = if !args.allow.is_empty() {
        args.allow.clone()
    } else if !conf.allow.is_empty() {
        parse_all(ctx, &conf.allow, "allow")?
    } else {
        Network::loopback()
    };
    let max_message = match args.max_size {
        Some(n) => n,
        None => match &conf.max_size {
            Some(size) => size
                .bytes()
                .map_err(|e| ctx.file_fault("[serve] max_size", e))?,
            None => ctx
                .config
                .filter_max_size(None)
                .map_err(anyhow::Error::msg)?,
        },
    };
    let max_held = match (args.max_held, &conf.max_held) {
        (Some(n), _) => n,
        (None, Some(size)) => size
            .bytes()
            .map_err(|e| ctx.file_fault("[serve] max_held", e))?,
        (None, None) => DEFAULT_MAX_HELD.max(max_message),
    };
    if max_held < max_message {
        bail!(
            "--max-held ({max_held} bytes) is less than --max-size ({max_message} bytes): a \
             message of the largest size judged could never be held"
        );
    }
    let timeout = args
        .timeout
        .or(conf.timeout)
        .unwrap_or(30)
        .clamp(1, MAX_TIMEOUT);
    Ok(Settings {
        listen,
        allow,
        socket_mode,
        socket_group,
        models,
        max_message,
        max_held,
        max_connections: args.max_connections.or(conf.max_connections).unwrap_or(256),
        read_timeout: Duration::from_secs(timeout),
        request_timeout: Duration::from_secs(timeout * REQUEST_TIMEOUTS),
        idle_timeout: Duration::from_secs(timeout * 2),
        shutdown_grace: Duration::from_secs(30),
        log_messages: args.log_messages || conf.log_messages == Some(true),
        milter_spam_action: match (args.milter_spam_action, &conf.milter_spam_action) {
            (Some(action), _) => action,
            (None, Some(text)) => text
                .parse()
                .map_err(|e| ctx.file_fault("[serve] milter_spam_action", e))?,
            (None, None) => serve::SpamAction::default(),
        },
    })
}

/// Why a reload to `settings` would judge nothing: its global database is
/// another than the one `in_use` and has no model (a mistyped `db`). The
/// same database without a model yet reloads: serve may start before it
/// is trained.
fn missing(settings: &Settings, in_use: &std::path::Path) -> Option<String> {
    let global = &settings.models.global;
    (settings.models.shared.is_none() && global != in_use && has_no_model(global))
        .then(|| format!("finds no model at {}", global.display()))
}

/// Whether the database at `dir` has no model file (one this process
/// cannot read is another matter: [`unreadable_model`]).
fn has_no_model(dir: &std::path::Path) -> bool {
    let model = bayesmail::db::DbPaths::new(dir).snapshot();
    std::fs::symlink_metadata(&model).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// A spamd request, or an HTTP request's body, must be whole within this
/// many `--timeout`s (two minutes at the default), and after that for as
/// long as it keeps coming at `serve::MIN_RATE`: a client trickling a byte
/// now and then gives its connection back, a large message on a slow link
/// is still read.
const REQUEST_TIMEOUTS: u64 = 4;

/// Bytes of messages held at once unless told (or `--max-size`, if
/// larger): some memory a small server has, and room for 32 messages of the
/// default size cap at once.
const DEFAULT_MAX_HELD: u64 = 512 << 20;

/// The longest `--timeout` taken (a day); a larger one is this.
const MAX_TIMEOUT: u64 = 86_400;

/// Parses the config file's `[serve] KEY` list.
fn parse_all<T: std::str::FromStr<Err = String>>(
    ctx: &Context,
    texts: &[String],
    key: &str,
) -> Result<Vec<T>> {
    texts
        .iter()
        .map(|t| {
            t.parse()
                .map_err(|e| ctx.file_fault(&format!("[serve] {key}"), e))
        })
        .collect()
}

/// The models' settings from the arguments and the configuration.
fn model_settings(ctx: &Context, args: &ServeArgs) -> Result<ModelSettings> {
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    let user_db = args
        .user_db
        .as_deref()
        .or(ctx.config.serve.user_db.as_deref());
    let shared = ctx.shared()?;
    if let Some(redis) = &shared {
        eviction_at_start(redis)?;
    }
    if user_db.is_some() && shared.is_some() {
        bail!("--user-db and --store: users' models are in Redis with --store, not in directories");
    }
    let shared_cap = match (args.store_max_memory, &ctx.config.serve.store_max_memory) {
        (Some(n), _) => Some(n),
        (None, Some(size)) => Some(
            size.bytes()
                .map_err(|e| ctx.file_fault("[serve] store_max_memory", e))?,
        ),
        (None, None) => None,
    };
    if shared_cap.is_some() && shared.is_none() {
        bail!(
            "--store-max-memory (or [serve] store_max_memory) caps models in Redis: it needs \
             --store; a database directory's size is kept by `bayesmail prune`"
        );
    }
    Ok(ModelSettings {
        global: ctx.db.dir().to_path_buf(),
        user_db: match (&args.user_db, &ctx.config.serve.user_db) {
            (Some(pattern), _) => Some(UserDbPattern::new(pattern)?),
            (None, Some(pattern)) => Some(
                UserDbPattern::new(pattern).map_err(|e| ctx.file_fault("[serve] user_db", e))?,
            ),
            (None, None) => None,
        },
        min_user_messages: args
            .min_user_messages
            .or(ctx.config.serve.min_user_messages)
            .unwrap_or(20),
        cache_bytes: args
            .cache_mb
            .or(ctx.config.serve.cache_mb)
            .unwrap_or(512)
            .saturating_mul(1 << 20),
        decider: ctx.decider(&args.decision)?,
        learn_wait: Duration::from_secs(5),
        journal_limit: super::train::journal_limit(),
        params: *params.get(),
        shared,
        shared_window: Duration::from_millis(
            args.store_cache_ms
                .or(ctx.config.serve.store_cache_ms)
                .unwrap_or(500),
        ),
        shared_cap,
        recipient_delimiter: args
            .recipient_delimiter
            .clone()
            .or_else(|| ctx.config.serve.recipient_delimiter.clone())
            .unwrap_or_default(),
    })
}

/// Checks the eviction policy of the Redis the counts are in
/// ([`Redis::refuse_eviction`]): one that may evict counts is an error, as
/// is a Redis that refuses to answer (a password missing or wrong). One
/// out of reach now (down, or its answer not whole within twice the
/// store's timeout) does not stop serve starting: mail is judged once it
/// answers. The policy is asked again before each change.
///
/// [`Redis::refuse_eviction`]: bayesmail::store::redis::Redis::refuse_eviction
fn eviction_at_start(redis: &bayesmail::store::redis::Redis) -> Result<()> {
    let asked = redis.clone();
    let later = |why: String| {
        serve::log_line(&format!(
            "store: {why}; messages are judged once it answers, and its eviction policy \
             is asked before each learn"
        ));
        Ok(())
    };
    match bayesmail::store::redis::within(2 * redis.timeout(), move || asked.eviction()) {
        // Users' models are begun by any client serve accepts: without a
        // limit, nothing keeps a flood of new names from Redis's memory.
        Ok(Ok(Eviction {
            warning: None,
            limited: Some(false),
        })) => {
            serve::log_line(&format!(
                "warning: Redis at {} has no maxmemory: nothing bounds the memory new users' \
                 models may take; set maxmemory (with maxmemory-policy noeviction), and serve \
                 begins none in its last tenth",
                redis.url().shown()
            ));
            Ok(())
        }
        Ok(Ok(Eviction { warning: None, .. })) => Ok(()),
        Ok(Ok(Eviction {
            warning: Some(why), ..
        })) => {
            serve::log_line(&format!("warning: {why}"));
            Ok(())
        }
        Ok(Err(err)) if bayesmail::store::redis::out_of_reach(&err) => later(err.to_string()),
        // Refused (a password, an eviction policy that loses counts): it
        // will not work by waiting.
        Ok(Err(refused)) => Err(refused.into()),
        Err(_) => later(format!(
            "Redis at {} gave no whole answer within {} ms",
            redis.url().shown(),
            (2 * redis.timeout()).as_millis()
        )),
    }
}

/// The id of a group given by name or number.
fn group_id(group: &str) -> Result<u32> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => bail!("--socket-group {group}: no such group"),
        Err(err) => bail!("--socket-group {group}: {err}"),
    }
}

/// Becomes `user` (its group, its supplementary groups, then the user),
/// for good.
fn drop_privileges(user: &str) -> Result<()> {
    use nix::unistd::{User, initgroups, setgid, setuid};
    let found = User::from_name(user)
        .with_context(|| format!("--user {user}"))?
        .with_context(|| format!("--user {user}: no such user"))?;
    // The group database's groups of the user, as a login gives them (a
    // database shared with the `mail` group stays readable to a server
    // whose user is in it).
    let name = std::ffi::CString::new(user).with_context(|| format!("--user {user}"))?;
    initgroups(&name, found.gid).with_context(|| format!("--user {user}: setting its groups"))?;
    setgid(found.gid).with_context(|| format!("--user {user}: setting its group"))?;
    setuid(found.uid).with_context(|| format!("--user {user}: becoming the user"))?;
    Ok(())
}

/// Why this process cannot read the global model's files, if it cannot
/// (`cannot read FILE: WHY`). Only a refusal counts: a model not there yet
/// is no reason not to judge once it is.
fn unreadable_model(models: &serve::ModelSettings) -> Option<String> {
    if models.shared.is_some() {
        return None;
    }
    let paths = bayesmail::db::DbPaths::new(&models.global);
    [paths.snapshot(), paths.journal()]
        .iter()
        .find_map(|file| match std::fs::File::open(file) {
            Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => Some(format!(
                "cannot read {}: {}",
                file.display(),
                bayesmail::fsutil::words(&err)
            )),
            _ => None,
        })
}
