//! `bayesmail serve`: its arguments, [`bayesmail::serve::bind`] then
//! [`bayesmail::serve::run`], and what they say. Between the two, the
//! privileges are dropped (`--user`), so that a server started as root may
//! listen on a low port and still never judge mail as root.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use bayesmail::serve::{self, ModelSettings, Network, Protocol, Settings, users::UserDbPattern};

use super::{Context, Outcome, ServeArgs};

pub(super) fn run(ctx: &Context, args: &ServeArgs) -> Result<Outcome> {
    let mut listen = Vec::new();
    for (protocol, addrs) in [
        (Protocol::Spamd, &args.spamd),
        (Protocol::Milter, &args.milter),
        (Protocol::Http, &args.http),
    ] {
        listen.extend(addrs.iter().map(|a| (protocol, a.clone())));
    }
    if listen.is_empty() {
        bail!("say where to listen: --spamd ADDR, --milter ADDR and/or --http ADDR");
    }
    let models = model_settings(ctx, args)?;
    let socket_group = args.socket_group.as_deref().map(group_id).transpose()?;
    let settings = Settings {
        listen,
        allow: if args.allow.is_empty() {
            Network::loopback()
        } else {
            args.allow.clone()
        },
        socket_mode: args.socket_mode,
        socket_group,
        models,
        max_message: ctx
            .config
            .filter_max_size(args.max_size)
            .map_err(anyhow::Error::msg)?,
        max_connections: args.max_connections,
        read_timeout: Duration::from_secs(args.timeout.max(1)),
        idle_timeout: Duration::from_secs(args.timeout.max(1) * 2),
        shutdown_grace: Duration::from_secs(30),
        log_messages: args.log_messages,
    };
    let listeners = serve::bind(&settings)?;
    if let Some(user) = &args.user {
        drop_privileges(user)?;
    }
    // SIGHUP: the same settings again, every model reopened.
    let again = settings.models.clone();
    serve::run(
        settings,
        listeners,
        Box::new(move || Some(again.clone())),
        &|bound| {
            for (protocol, addr) in bound {
                serve::log_line(&format!("{} listening on {addr}", protocol.name()));
            }
        },
    )
    .context("running the server")?;
    Ok(Outcome::AllOk)
}

/// The models' settings from the arguments and the configuration.
fn model_settings(ctx: &Context, args: &ServeArgs) -> Result<ModelSettings> {
    let (params, _) = ctx.params(&super::ModelArgs::default())?;
    Ok(ModelSettings {
        global: ctx.db.dir().to_path_buf(),
        user_db: args
            .user_db
            .as_deref()
            .map(UserDbPattern::new)
            .transpose()?,
        min_user_messages: args.min_user_messages,
        cache_bytes: args.cache_mb.saturating_mul(1 << 20),
        decider: ctx.decider(&args.decision)?,
        learn_wait: Duration::from_secs(5),
        journal_limit: bayesmail::store::DEFAULT_JOURNAL_LIMIT,
        params: *params.get(),
    })
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
    use nix::unistd::{User, setgid, setgroups, setuid};
    let found = User::from_name(user)
        .with_context(|| format!("--user {user}"))?
        .with_context(|| format!("--user {user}: no such user"))?;
    setgroups(&[found.gid]).with_context(|| format!("--user {user}: setting its groups"))?;
    setgid(found.gid).with_context(|| format!("--user {user}: setting its group"))?;
    setuid(found.uid).with_context(|| format!("--user {user}: becoming the user"))?;
    Ok(())
}
