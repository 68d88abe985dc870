//! The HTTP/JSON protocol: HTTP/1.1 with kept-alive connections (hyper's
//! server connection), `POST /check`, `POST /learn?class=spam|ham`,
//! `POST /unlearn`, `GET /health` and `GET /metrics`. The user whose model
//! judges or learns is the `User` request header (as rspamd's); a
//! `Queue-Id` header names the message in the log.
//!
//! It owns the requests, their answers and their bounds: the body size
//! (refused from its declared length, or as soon as it is passed, never
//! buffered beyond the cap), the read timeout while a body comes, the idle
//! timeout of a kept-alive connection (which also bounds the time a
//! request's header may take) and the graceful end of a connection when the
//! server stops. Judging, learning and the counters are [`State`]'s.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Body, Bytes};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};

mod watched;

use super::budget::Held;
use super::{BoxConn, Judged, LearnError, Peer, RequestClock, State, log_line};
use crate::db::{self, Origin, Reason, Status};
use crate::model::Label;
use crate::sanitize::for_terminal;
use watched::Watched;

/// The request header naming the user whose model judges (`/check`) or
/// learns (`/learn`, `/unlearn`). Without it, the global model does.
pub const USER_HEADER: &str = "user";

/// The request header naming the message in the log (a queue id).
pub const QUEUE_ID_HEADER: &str = "queue-id";

/// An answer: a whole body, small or bounded by the message cap.
type Answer = Response<Full<Bytes>>;

/// Serves one HTTP connection until the client closes it, it stays idle
/// past the idle timeout, or the server stops (then the request in
/// flight, if any, is answered first).
pub(super) async fn serve(conn: BoxConn, peer: &Peer, state: &Arc<State>) -> std::io::Result<()> {
    let mid_request = Arc::new(AtomicBool::new(false));
    let linger = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Watched {
        inner: Some(conn),
        mid_request: mid_request.clone(),
        linger: linger.clone(),
        linger_for: state.settings().read_timeout.min(Duration::from_secs(5)),
        write_timeout: state.settings().read_timeout,
        write_wait: None,
    });
    let service = {
        let state = state.clone();
        let peer = peer.clone();
        hyper::service::service_fn(move |req| {
            let state = state.clone();
            let peer = peer.clone();
            let linger = linger.clone();
            async move {
                // On a task of its own, so that a bug that panics is an
                // internal error for this request rather than a lost
                // connection (and a count of open connections never
                // brought down, which would hold up shutdown).
                let answered = tokio::spawn(async move { answer(req, &peer, &state).await })
                    .await
                    .unwrap_or_else(|_| {
                        error(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            Reason::Internal.name(),
                            "internal error while answering",
                        )
                    });
                if matches!(
                    answered.status(),
                    StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
                ) || answered.extensions().get::<Unread>().is_some()
                {
                    // The rest of the body may still be coming: see Watched.
                    linger.store(true, Ordering::Relaxed);
                }
                Ok::<_, Infallible>(answered)
            }
        })
    };
    let idle = state.settings().idle_timeout;
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // A client that sends its request whole and then closes its side
        // (`shutdown(SHUT_WR)`, as some scripts do) still gets the answer.
        // So a client that goes away mid-request is noticed only when its
        // answer is written: its connection is held while it is judged.
        .half_close(true)
        // hyper starts this clock when the connection waits for a request:
        // it is the idle timeout of a kept-alive connection and the bound
        // on a request's header alike (a client that sends a byte now and
        // then is dropped all the same).
        .header_read_timeout(idle)
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let stopping = state.stopping.notified();
    tokio::pin!(stopping);
    // Registered before the flag is read, so a stop between the two is not
    // missed.
    stopping.as_mut().enable();
    let result = if state.stopped.load(Ordering::SeqCst) {
        conn.as_mut().graceful_shutdown();
        conn.await
    } else {
        tokio::select! {
            result = conn.as_mut() => result,
            _ = &mut stopping => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        }
    };
    match result {
        Ok(()) => Ok(()),
        Err(err) if err.is_timeout() => {
            if mid_request.load(Ordering::Relaxed) {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "dropped: a request's header was not complete within {} s",
                        idle.as_secs()
                    ),
                ))
            } else {
                // A kept-alive connection with nothing more to ask.
                Ok(())
            }
        }
        Err(err) if err.is_incomplete_message() => Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the client closed the connection mid-request",
        )),
        // A write that waited too long (Watched) says so, not hyper's
        // words for any failed write.
        Err(err) => Err(
            match std::error::Error::source(&err).and_then(|e| e.downcast_ref::<std::io::Error>()) {
                Some(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                    std::io::Error::new(io.kind(), io.to_string())
                }
                _ => std::io::Error::other(err.to_string()),
            },
        ),
    }
}

/// Answers one request (any body type, so tests can call it without a
/// connection).
async fn answer<B>(req: Request<B>, peer: &Peer, state: &Arc<State>) -> Answer
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let get = matches!(*req.method(), Method::GET | Method::HEAD);
    let post = *req.method() == Method::POST;
    let path = req.uri().path();
    if post
        && matches!(path, "/check" | "/learn" | "/unlearn")
        && let Some(refused) = coding_refused(req.headers())
    {
        return refused;
    }
    match req.uri().path() {
        "/check" if post => check(req, peer, state).await,
        "/learn" if post => match class(req.uri().query()) {
            Ok(label) => learn(req, peer, state, Some(label)).await,
            Err(why) => error(StatusCode::BAD_REQUEST, "bad-class", &why),
        },
        "/unlearn" if post => learn(req, peer, state, None).await,
        "/health" if get => health(state),
        "/metrics" if get => metrics(state),
        "/check" | "/learn" | "/unlearn" => not_allowed("POST"),
        "/health" | "/metrics" => not_allowed("GET, HEAD"),
        _ => error(
            StatusCode::NOT_FOUND,
            "not-found",
            "no such path: POST /check, /learn?class=spam|ham or /unlearn; GET /health or /metrics",
        ),
    }
}

/// The refusal of a body sent in a coding serve does not undo: judged or
/// learned, it would be its compressed bytes read as a message. A content
/// coding (`Content-Encoding: gzip`) is 415 with `Accept-Encoding:
/// identity`; a transfer coding other than chunked (`Transfer-Encoding:
/// gzip, chunked`, whose gzip hyper leaves in place) is 501, as RFC 9112
/// asks of a coding a server does not understand. Its body is left
/// unread.
fn coding_refused(headers: &hyper::HeaderMap) -> Option<Answer> {
    let other = |name: header::HeaderName, allowed: &str| {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .find(|c| !c.is_empty() && c != allowed)
    };
    let mut answer = if let Some(coding) = other(header::CONTENT_ENCODING, "identity") {
        let mut answer = error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-coding",
            &format!("Content-Encoding {coding} is not undone here: send the message as it is"),
        );
        answer.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        answer
    } else {
        let coding = other(header::TRANSFER_ENCODING, "chunked")?;
        error(
            StatusCode::NOT_IMPLEMENTED,
            "unsupported-coding",
            &format!("Transfer-Encoding {coding} is not undone here (chunked is)"),
        )
    };
    answer.extensions_mut().insert(Unread);
    Some(answer)
}

/// The value of `key` in `query`, if given; `Err` if given twice with two
/// values (which was meant is not known, as with two `User` fields).
fn query_value<'a>(query: Option<&'a str>, key: &str) -> Result<Option<&'a str>, String> {
    let mut values = (query.unwrap_or("").split('&'))
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| *k == key)
        .map(|(_, value)| value);
    let first = values.next();
    match values.find(|v| Some(*v) != first) {
        Some(other) => Err(format!(
            "{key} given twice, as {:?} and {:?}",
            for_terminal(first.unwrap_or_default()),
            for_terminal(other)
        )),
        None => Ok(first),
    }
}

/// `?class=spam|ham` of a learn.
fn class(query: Option<&str>) -> Result<Label, String> {
    match query_value(query, "class")? {
        Some(v) => v
            .parse()
            .map_err(|_| format!("class {:?} is neither spam nor ham", for_terminal(v))),
        None => Err("say what to learn the message as: /learn?class=spam or ?class=ham".into()),
    }
}

/// `&origin=imap` of a learn or unlearn (the mail client's move, for the
/// learn log); without it, HTTP.
fn origin(query: Option<&str>) -> Result<Origin, String> {
    match query_value(query, "origin")? {
        None | Some("http") => Ok(Origin::Http),
        Some("imap") => Ok(Origin::Imap),
        Some(v) => Err(format!(
            "origin {:?} is neither imap nor http",
            for_terminal(v)
        )),
    }
}

/// The user the request names, checked; `Err` is the answer refusing it.
fn user_of<B>(req: &Request<B>) -> Result<Option<String>, Box<Answer>> {
    let Some(value) = req.headers().get(USER_HEADER) else {
        return Ok(None);
    };
    let refuse = |why: &str| Box::new(error(StatusCode::BAD_REQUEST, "bad-user", why));
    // Which of two names was meant is not known (a front end adding its
    // own after the client's, say); the same name twice, in any case, is
    // one.
    let name = |v: &HeaderValue| {
        v.to_str()
            .ok()
            .and_then(|u| super::users::check_user(u).ok())
    };
    let names = req.headers().get_all(USER_HEADER);
    if names.iter().any(|v| name(v) != name(value)) {
        return Err(refuse("two different User headers"));
    }
    let user = value
        .to_str()
        .map_err(|_| refuse("user name refused: it is not ASCII text"))?;
    let user = super::users::check_user(user).map_err(|e| refuse(&e.to_string()))?;
    Ok(Some(user))
}

/// Why a body was not read whole.
#[derive(Debug)]
enum BodyError {
    /// Larger than the cap (declared so, or found so while reading).
    TooLarge,
    /// The client sent nothing for the read timeout.
    TimedOut,
    /// The body had not arrived whole by the request's deadline.
    Late,
    /// The client broke off, or sent a body that does not frame.
    Broken(String),
    /// The server holds as many bytes of messages as it may.
    Busy,
}

/// Reads a request's body whole, up to the message cap: a larger one is
/// refused from its `Content-Length` before any of it is read, or as soon
/// as what came passes the cap. Each read waits at most the read timeout,
/// and the whole body must come by the request's deadline
/// ([`RequestClock`]). Its bytes are held of HTTP's budget as they
/// arrive, until the caller drops what is returned with them.
async fn read_body<B>(
    req: Request<B>,
    state: &State,
    settings: &super::Settings,
) -> Result<(Vec<u8>, Held), BodyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let max = settings.max_message;
    let mut clock = RequestClock::start(settings.request_timeout);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(BodyError::TooLarge);
    }
    let mut held = state.budget(super::Protocol::Http).empty();
    let mut body = req.into_body();
    // What is declared, up to the cap, but never a large guess up front.
    let mut raw = Vec::with_capacity(declared.unwrap_or(0).min(max).min(1 << 20) as usize);
    loop {
        let (wait, late) = clock.next_wait(settings.read_timeout);
        let frame = match tokio::time::timeout(wait, body.frame()).await {
            Err(_) if late => return Err(BodyError::Late),
            Err(_) => return Err(BodyError::TimedOut),
            Ok(None) => return Ok((raw, held)),
            Ok(Some(Err(err))) => return Err(BodyError::Broken(err.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            clock.received(data.len());
            if (raw.len() + data.len()) as u64 > max {
                return Err(BodyError::TooLarge);
            }
            if !held.at_least((raw.len() + data.len()) as u64) {
                return Err(BodyError::Busy);
            }
            raw.extend_from_slice(&data);
        }
    }
}

/// The answer to a body that was not read whole (too large: one to learn).
fn body_error(err: BodyError, peer: &Peer, state: &State) -> Answer {
    match err {
        BodyError::TooLarge => too_large_to_learn(state),
        BodyError::TimedOut => {
            let why = format!(
                "the client sent nothing for {} s while sending the body",
                state.settings().read_timeout.as_secs()
            );
            log_line(&format!("http {peer}: dropped: {why}"));
            error(StatusCode::REQUEST_TIMEOUT, "timeout", &why)
        }
        BodyError::Late => {
            let why = format!(
                "the body was not whole after {} s and came slower than {} KiB/s",
                state.settings().request_timeout.as_secs(),
                super::MIN_RATE / 1024
            );
            log_line(&format!("http {peer}: dropped: {why}"));
            error(StatusCode::REQUEST_TIMEOUT, "timeout", &why)
        }
        BodyError::Broken(why) => error(
            StatusCode::BAD_REQUEST,
            "bad-body",
            &format!("the body could not be read: {why}"),
        ),
        BodyError::Busy => {
            let mut answer = error(
                StatusCode::SERVICE_UNAVAILABLE,
                Reason::Busy.name(),
                &super::budget::busy_why(state.budget(super::Protocol::Http), "not learned"),
            );
            answer.extensions_mut().insert(Unread);
            answer
        }
    }
}

/// 413 for a body over the cap given to learn (`/check` answers its own).
fn too_large_to_learn(state: &State) -> Answer {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        Reason::TooLarge.name(),
        &State::too_large_to_learn(state.settings().max_message),
    )
}

/// `POST /check`.
async fn check<B>(req: Request<B>, peer: &Peer, state: &Arc<State>) -> Answer
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let user = match user_of(&req) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let id = req
        .headers()
        .get(QUEUE_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut unread = false;
    let settings = state.settings();
    let judged = match read_body(req, state, &settings).await {
        // Its bytes stay held while it is judged.
        Ok((raw, _held)) => {
            let max = settings.max_message;
            state.judge(user.clone(), raw, &id, max).await
        }
        Err(BodyError::Busy) => {
            let users: Vec<String> = user.iter().cloned().collect();
            unread = true;
            state.busy(super::Protocol::Http, &users, &id)
        }
        Err(BodyError::TooLarge) => {
            let users: Vec<String> = user.iter().cloned().collect();
            state.too_large(&users, &id, settings.max_message)
        }
        Err(err) => return body_error(err, peer, state),
    };
    let (status, body) = judged_json(&judged, user.as_deref(), state.models.per_user());
    let mut answer = json_answer(status, &body);
    if unread {
        answer.extensions_mut().insert(Unread);
    }
    answer
}

/// Marks an answer given before the body was read whole: its connection
/// lingers (see [`Watched`]).
#[derive(Clone, Copy)]
struct Unread;

/// The JSON of a message judged, and the HTTP status that goes with it:
/// 200 with a verdict; without one, 413 (too large), 422 (not a message
/// that parses), 503 (no usable model) or 500.
fn judged_json(judged: &Judged, user: Option<&str>, per_user: bool) -> (StatusCode, Value) {
    // The fields the milter and spamd's PROCESS add (with users' models,
    // which kind judged).
    let fields: Vec<[String; 2]> = judged
        .fields(per_user)
        .into_iter()
        .map(|(name, value)| [name.to_string(), value])
        .collect();
    let model = judged.which.as_ref().map(|w| w.to_string());
    match judged.stamped.status {
        Status::Verdict {
            verdict,
            probability,
            cutoff,
            doubt,
        } => (
            StatusCode::OK,
            json!({
                "verdict": verdict.name(),
                "probability": probability,
                "log_odds": judged.stamped.log_odds,
                "cutoff": cutoff,
                "fields": fields,
                "model": model,
                "user": user,
                "reason": doubt.map(crate::decision::Doubt::name),
                "why": null,
            }),
        ),
        Status::Unknown(reason) => {
            let status = match reason {
                Reason::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                Reason::Unparseable => StatusCode::UNPROCESSABLE_ENTITY,
                Reason::NoModel
                | Reason::ModelVersion
                | Reason::ModelUnreadable
                | Reason::StoreUnavailable
                | Reason::Busy => StatusCode::SERVICE_UNAVAILABLE,
                Reason::Config | Reason::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (
                status,
                json!({
                    "verdict": null,
                    "probability": null,
                    "log_odds": null,
                    "fields": fields,
                    "model": model,
                    "user": user,
                    "reason": reason.name(),
                    "why": judged.stamped.why.as_deref().map(one_line),
                }),
            )
        }
    }
}

/// `POST /learn?class=…` (`label` given) and `POST /unlearn` (`None`).
async fn learn<B>(req: Request<B>, peer: &Peer, state: &Arc<State>, label: Option<Label>) -> Answer
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let user = match user_of(&req) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let origin = match origin(req.uri().query()) {
        Ok(origin) => origin,
        Err(why) => return error(StatusCode::BAD_REQUEST, "bad-origin", &why),
    };
    // The database it goes to, as /check names models.
    let database = match state.models.learning_model(user.as_deref()) {
        Ok(which) => which.to_string(),
        Err(err) => return error(StatusCode::BAD_REQUEST, "bad-user", &err.to_string()),
    };
    let settings = state.settings();
    let (raw, held) = match read_body(req, state, &settings).await {
        Ok(read) => read,
        Err(err) => return body_error(err, peer, state),
    };
    // Held while learned.
    let _held = held;
    let result = state.learn(user.clone(), raw, label, origin).await;
    let shown_user = crate::sanitize::log_value(user.as_deref().unwrap_or("-")).into_owned();
    let shown_database = crate::sanitize::log_value(&database).into_owned();
    let done = match result {
        Ok(done) => done,
        Err(err) => {
            let (status, reason) = learn_status(&err);
            let why = match err {
                // Said by its name, not by where it would be: any client
                // may name a user who has none.
                LearnError::Db(db::Error::NothingLearned(_)) => {
                    format!("nothing has been learned into {database} yet")
                }
                err => one_line(&err.to_string()),
            };
            if status.is_server_error() || settings.log_messages {
                log_line(&format!(
                    "{} user={shown_user} database={shown_database} failed: {}",
                    if label.is_some() { "learn" } else { "unlearn" },
                    for_terminal(&why)
                ));
            }
            return error(status, reason, &why);
        }
    };
    let (action, label) = done.action();
    let label = label.map_or("-", Label::name);
    if settings.log_messages {
        log_line(&format!(
            "learn user={shown_user} database={shown_database} action={action} label={label}"
        ));
    }
    let mut answer = json!({ "action": action, "database": database });
    if label != "-" {
        answer["label"] = label.into();
    }
    // Left for the writer holding the database: accepted, not yet made.
    let status = match done {
        super::Learned::Queued(_) => StatusCode::ACCEPTED,
        _ => StatusCode::OK,
    };
    json_answer(status, &answer)
}

/// The HTTP status and reason of a learn that failed.
fn learn_status(err: &LearnError) -> (StatusCode, &'static str) {
    match err {
        LearnError::User(_) => (StatusCode::BAD_REQUEST, "bad-user"),
        LearnError::Message(_) => (StatusCode::UNPROCESSABLE_ENTITY, "not-mail"),
        LearnError::Db(db::Error::NotLearned) => (StatusCode::NOT_FOUND, "not-learned"),
        LearnError::Db(db::Error::NothingLearned(_)) => (StatusCode::NOT_FOUND, "nothing-learned"),
        LearnError::Db(
            db::Error::Store(
                crate::store::Error::Locked { .. } | crate::store::Error::Contended { .. },
            )
            | db::Error::NotLeft { .. },
        ) => (StatusCode::SERVICE_UNAVAILABLE, "locked"),
        LearnError::Db(db::Error::Store(crate::store::Error::Config(_))) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "store-config")
        }
        LearnError::Db(db::Error::Store(crate::store::Error::Redis { .. })) => {
            (StatusCode::SERVICE_UNAVAILABLE, "store-unavailable")
        }
        // The change is in the counts; a retry is safe and the next learn
        // writes the model.
        LearnError::Db(db::Error::ModelNotWritten { .. }) => {
            (StatusCode::SERVICE_UNAVAILABLE, "model-not-written")
        }
        // The disk full, or no room for a new user's database or model in
        // Redis: for now.
        LearnError::Db(db::Error::Store(crate::store::Error::Io { source, .. }))
            if source.kind() == std::io::ErrorKind::StorageFull =>
        {
            (StatusCode::INSUFFICIENT_STORAGE, "no-room")
        }
        LearnError::Db(db::Error::Store(crate::store::Error::Full(_))) => {
            (StatusCode::INSUFFICIENT_STORAGE, "no-room")
        }
        LearnError::Db(db::Error::Foreign { .. }) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "database-owner")
        }
        LearnError::Db(_) => (StatusCode::INTERNAL_SERVER_ERROR, "database"),
    }
}

/// `GET /health`: 200 while serving, 503 once stopping.
fn health(state: &State) -> Answer {
    if state.stopped.load(Ordering::SeqCst) {
        json_answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "status": "stopping" }),
        )
    } else {
        json_answer(StatusCode::OK, &json!({ "status": "ok" }))
    }
}

/// `GET /metrics`: the counters in Prometheus text, with each open
/// database's model generation.
fn metrics(state: &State) -> Answer {
    let mut text = state.metrics.render(&state.models.open_now());
    let _ = writeln!(
        text,
        "# HELP bayesmail_model_generation Times each open database's model has been read by this \
         process (once at open, once per change a writer made).\n# TYPE bayesmail_model_generation gauge"
    );
    for (db, loads) in state.models.generations() {
        let db = super::metrics::label_value(&db);
        let _ = writeln!(text, "bayesmail_model_generation{{db=\"{db}\"}} {loads}");
    }
    let mut answer = Response::new(Full::new(Bytes::from(text)));
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    answer
}

/// 405, with the methods the path takes.
fn not_allowed(allow: &'static str) -> Answer {
    let mut answer = error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        &format!("this path takes {allow}"),
    );
    answer
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    answer
}

/// An error answer: `reason` a short name, `why` one line of words.
fn error(status: StatusCode, reason: &str, why: &str) -> Answer {
    json_answer(status, &json!({ "reason": reason, "why": one_line(why) }))
}

fn json_answer(status: StatusCode, body: &Value) -> Answer {
    let mut text = body.to_string();
    text.push('\n');
    let mut answer = Response::new(Full::new(Bytes::from(text)));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    answer
}

/// `text` on one line (a database error may have several).
fn one_line(text: &str) -> String {
    text.split(['\r', '\n'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Decider;
    use crate::model::Params;
    use crate::serve::{ModelSettings, Settings, users::UserDbPattern};

    fn state(dir: &std::path::Path, max_message: u64) -> Arc<State> {
        Arc::new(State::new(Settings {
            listen: Vec::new(),
            allow: crate::serve::Network::loopback(),
            socket_mode: 0o660,
            socket_group: None,
            models: ModelSettings {
                global: dir.join("global"),
                user_db: Some(UserDbPattern::new(&format!("{}/users/%u", dir.display())).unwrap()),
                min_user_messages: 1,
                cache_bytes: 1 << 20,
                decider: Decider {
                    costs: Default::default(),
                    min_known: 1,
                    min_per_class: 1,
                },
                learn_wait: Duration::from_secs(1),
                journal_limit: crate::store::DEFAULT_JOURNAL_LIMIT,
                params: Params::default(),
                shared: None,
                shared_window: Duration::ZERO,
                shared_cap: None,
                recipient_delimiter: String::new(),
            },
            max_message,
            max_held: 1 << 30,
            max_connections: 4,
            read_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(4),
            idle_timeout: Duration::from_secs(2),
            shutdown_grace: Duration::from_secs(1),
            log_messages: false,
            milter_spam_action: Default::default(),
        }))
    }

    /// Sends `req` to `answer`; returns the status and the JSON body.
    fn ask(state: &Arc<State>, req: Request<Full<Bytes>>) -> (StatusCode, Value) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let answer = runtime.block_on(answer(req, &Peer::Unix, state));
        let status = answer.status();
        let body = runtime
            .block_on(answer.into_body().collect())
            .unwrap()
            .to_bytes();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// What the learn log of the database at `dir` says of each change:
    /// what, which label, from where.
    fn logged(dir: &std::path::Path) -> Vec<String> {
        let log = std::fs::read_to_string(dir.join("learn.log")).unwrap();
        let words = |l: &str| l.split(' ').skip(1).take(3).collect::<Vec<_>>().join(" ");
        log.lines().map(words).collect()
    }

    fn with(builder: hyper::http::request::Builder, body: &[u8]) -> Request<Full<Bytes>> {
        builder
            .body(Full::new(Bytes::copy_from_slice(body)))
            .unwrap()
    }

    const MAIL: &[u8] = b"From: a@example.org\nSubject: hello\n\nhello there\n";

    #[test]
    fn health_says_ok_then_stopping() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path(), 1000);
        let req = || Request::get("/health").body(Full::default()).unwrap();
        let (status, body) = ask(&state, req());
        assert_eq!(
            (status, body["status"].as_str()),
            (StatusCode::OK, Some("ok"))
        );
        state.stopped.store(true, Ordering::SeqCst);
        let (status, body) = ask(&state, req());
        assert_eq!(
            (status, body["status"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("stopping"))
        );
    }

    #[test]
    fn no_model_is_503_with_the_reason_and_its_fields() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path(), 1000);
        let (status, body) = ask(&state, with(Request::post("/check"), MAIL));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["reason"], "no-model");
        assert!(body["verdict"].is_null() && body["model"].is_null());
        let status_field = &body["fields"][0];
        assert_eq!(status_field[0], "X-Spam-Status");
        assert!(
            status_field[1]
                .as_str()
                .unwrap()
                .starts_with("Unknown, reason=no-model")
        );
        assert!(!body["why"].as_str().unwrap().is_empty());
    }

    #[test]
    fn a_body_in_a_coding_not_undone_is_refused_not_judged() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path(), 1000);
        for path in ["/check", "/learn?class=spam", "/unlearn"] {
            for (name, value, status) in [
                (
                    "Content-Encoding",
                    "gzip",
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ),
                (
                    "Content-Encoding",
                    "identity, Deflate",
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ),
                (
                    "Transfer-Encoding",
                    "gzip, chunked",
                    StatusCode::NOT_IMPLEMENTED,
                ),
            ] {
                let req = with(Request::post(path).header(name, value), MAIL);
                let (got, body) = ask(&state, req);
                assert_eq!(
                    (got, &body["reason"]),
                    (status, &Value::from("unsupported-coding"))
                );
                let coding = value.rsplit(", ").last().unwrap().to_ascii_lowercase();
                let coding = if coding == "identity" {
                    "deflate".into()
                } else {
                    coding
                };
                assert!(body["why"].as_str().unwrap().contains(&coding), "{body}");
            }
            // The codings that are the message as it is pass on (to no model).
            for (name, value) in [
                ("Content-Encoding", "identity"),
                ("Transfer-Encoding", "chunked"),
            ] {
                let req = with(Request::post(path).header(name, value), MAIL);
                let (got, body) = ask(&state, req);
                assert_ne!(
                    body["reason"], "unsupported-coding",
                    "{path} {name}: {got} {body}"
                );
            }
        }
        // A path that is none is said to be none, whatever its coding.
        let req = with(
            Request::post("/nope").header("Content-Encoding", "gzip"),
            MAIL,
        );
        assert_eq!(ask(&state, req).0, StatusCode::NOT_FOUND);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let req = with(
            Request::post("/check").header("Content-Encoding", "gzip"),
            MAIL,
        );
        let other = tempfile::tempdir().unwrap();
        let fresh = self::state(other.path(), 1000);
        let answer = runtime.block_on(answer(req, &Peer::Unix, &fresh));
        assert_eq!(answer.headers()[header::ACCEPT_ENCODING], "identity");
        assert!(
            answer.extensions().get::<Unread>().is_some(),
            "its body is left unread"
        );
        let text = fresh.metrics.render(&[]);
        let judged = text
            .lines()
            .filter(|l| l.starts_with("bayesmail_messages_total{") && !l.ends_with(" 0"));
        assert_eq!(judged.count(), 0, "nothing was judged: {text}");
    }

    /// The messages read into features at once to judge, and those to
    /// learn, each hold at most a message of the size limit for each core:
    /// another waits its turn and gets it when one ends. A judgment never
    /// waits for learns (which may wait for another writer's lock), nor a
    /// learn for judgments; a reload that raises the limit makes room.
    #[test]
    fn large_messages_are_read_into_features_a_few_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let limit = 2 << 20;
        let state = state(dir.path(), limit);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            fn now<F: Future>(f: F) -> tokio::time::Timeout<F> {
                tokio::time::timeout(Duration::ZERO, f)
            }
            fn soon<F: Future>(f: F) -> tokio::time::Timeout<F> {
                tokio::time::timeout(Duration::from_secs(60), f)
            }
            let full = |room: &'static str| {
                let room = match room {
                    "judging" => &state.judging,
                    _ => &state.learning,
                };
                async move {
                    let mut turns = Vec::new();
                    for _ in 0..cores {
                        let turn = now(room.turn(limit as usize)).await;
                        turns.push(turn.expect("a message of the limit for each core").unwrap());
                    }
                    assert!(now(room.turn(1)).await.is_err(), "even a small one waits");
                    turns
                }
            };
            // Long enough for a small message to be judged or learned:
            // one that is not has waited for its turn.
            fn waits<F: Future>(f: F) -> tokio::time::Timeout<F> {
                tokio::time::timeout(Duration::from_secs(2), f)
            }
            let mut judging = full("judging").await;
            let message = || MAIL.to_vec();
            let judged = waits(state.judge(None, message(), "", limit)).await;
            assert!(judged.is_err(), "a message to judge waits its turn");
            let learned = soon(state.learn(None, message(), Some(Label::Spam), Origin::Http)).await;
            assert!(
                matches!(learned, Ok(Ok(_))),
                "a learn does not wait for judgments"
            );
            let learning = full("learning").await;
            let learned = waits(state.learn(None, message(), Some(Label::Ham), Origin::Http)).await;
            assert!(learned.is_err(), "a message to learn waits its turn");
            judging.pop();
            let judged = soon(state.judge(None, message(), "", limit)).await;
            assert!(
                judged.is_ok(),
                "one ended: the next may begin, learns or not"
            );
            // A reload that raises the limit makes room for it.
            state.judging.fit(4 * limit);
            let big = now(state.judging.turn(4 * limit as usize)).await;
            assert!(big.is_ok(), "room for the raised limit");
            // A message over the room waits for all of it, not for ever.
            drop((judging, big, learning));
            assert!(now(state.judging.turn(usize::MAX)).await.is_ok());
        });
    }

    /// With the counts in Redis, a message that cannot have its turn to
    /// be read within the store's bound (turns held by threads still
    /// waiting for the store, or by many large messages) is busy, not the
    /// store's fault.
    #[test]
    fn a_message_waiting_too_long_for_its_turn_is_busy_not_the_stores_fault() {
        let server = crate::store::redis_server::RedisServer::start();
        let url = crate::store::redis::RedisUrl::parse(&server.url("/0?prefix=turns")).unwrap();
        let redis = crate::store::redis::Redis::connect(&url, Duration::from_millis(200)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let limit = 2 << 20;
        let mut settings = (*self::state(dir.path(), limit).settings()).clone();
        settings.models.shared = Some(redis);
        let state = Arc::new(State::new(settings));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let judged = runtime.block_on(async {
            let mut turns = Vec::new();
            for _ in 0..cores {
                turns.push(state.judging.turn(limit as usize).await);
            }
            let judging = state.judge(None, MAIL.to_vec(), "", limit);
            tokio::time::timeout(Duration::from_secs(60), judging).await
        });
        let judged = judged.expect("answered within the bound, not held");
        assert_eq!(
            judged.stamped.status,
            crate::db::Status::Unknown(crate::db::Reason::Busy),
            "{:?}",
            judged.stamped
        );
    }

    #[test]
    fn too_large_is_413_declared_or_found() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path(), 10);
        // Declared.
        let declared = Request::post("/check").header("Content-Length", MAIL.len());
        let (status, body) = ask(&state, with(declared, MAIL));
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body["reason"], "too-large");
        assert!(
            body["fields"][0][1]
                .as_str()
                .unwrap()
                .starts_with("Unknown, reason=too-large")
        );
        // Found while reading: no Content-Length.
        let (status, body) = ask(&state, with(Request::post("/learn?class=spam"), MAIL));
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body["reason"], "too-large");
        let text = state.metrics.render(&[]);
        assert!(
            text.contains("bayesmail_messages_total{verdict=\"unknown\",reason=\"too-large\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn bad_requests_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path(), 1000);
        for (req, status, reason) in [
            (
                with(Request::post("/learn"), MAIL),
                StatusCode::BAD_REQUEST,
                "bad-class",
            ),
            (
                with(Request::post("/learn?class=eggs"), MAIL),
                StatusCode::BAD_REQUEST,
                "bad-class",
            ),
            (
                with(Request::post("/learn?class=ham&class=spam"), MAIL),
                StatusCode::BAD_REQUEST,
                "bad-class",
            ),
            (
                with(
                    Request::post("/learn?class=ham&origin=imap&origin=http"),
                    MAIL,
                ),
                StatusCode::BAD_REQUEST,
                "bad-origin",
            ),
            (
                with(Request::post("/learn?class=spam&origin=eggs"), MAIL),
                StatusCode::BAD_REQUEST,
                "bad-origin",
            ),
            (
                with(Request::post("/check").header("User", "../etc"), MAIL),
                StatusCode::BAD_REQUEST,
                "bad-user",
            ),
            (
                with(
                    Request::post("/learn?class=spam").header("User", "a%b"),
                    MAIL,
                ),
                StatusCode::BAD_REQUEST,
                "bad-user",
            ),
            (
                with(
                    Request::post("/unlearn").header("User", "x".repeat(300)),
                    MAIL,
                ),
                StatusCode::BAD_REQUEST,
                "bad-user",
            ),
            (
                with(Request::get("/check"), b""),
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
            ),
            (
                with(Request::get("/nowhere"), b""),
                StatusCode::NOT_FOUND,
                "not-found",
            ),
            (
                with(Request::post("/learn?class=ham"), b"not mail at all"),
                StatusCode::UNPROCESSABLE_ENTITY,
                "not-mail",
            ),
        ] {
            let shown = format!("{} {}", req.method(), req.uri());
            let (got, body) = ask(&state, req);
            assert_eq!(got, status, "{shown}: {body}");
            assert_eq!(body["reason"], reason, "{shown}: {body}");
            let why = body["why"].as_str().unwrap();
            assert!(!why.is_empty() && !why.contains('\n'), "{shown}: {body}");
        }
        // Nothing refused reached a disk.
        assert!(!dir.path().join("users").exists());
        assert!(!dir.path().join("global").exists());
    }

    #[test]
    fn learns_per_user_then_unlearns() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path(), 10_000);
        let learn = |uri: &str| with(Request::post(uri).header("User", "carol@example.org"), MAIL);
        // Before anything is learned: said by the user's name, not by
        // where the server keeps its database.
        let (status, body) = ask(&state, learn("/unlearn"));
        assert_eq!(
            (status, &body["reason"], &body["why"]),
            (
                StatusCode::NOT_FOUND,
                &json!("nothing-learned"),
                &json!("nothing has been learned into user:carol@example.org yet")
            )
        );
        let (status, body) = ask(&state, learn("/learn?class=spam"));
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            (&body["action"], &body["label"], &body["database"]),
            (
                &json!("learned"),
                &json!("spam"),
                &json!("user:carol@example.org")
            )
        );
        assert!(dir.path().join("users/carol@example.org").is_dir());
        let (_, body) = ask(&state, learn("/learn?class=spam"));
        assert_eq!(body["action"], "already");
        let (_, body) = ask(&state, learn("/learn?class=ham&origin=imap"));
        assert_eq!(
            (&body["action"], &body["label"]),
            (&json!("moved"), &json!("ham"))
        );
        let (_, body) = ask(&state, learn("/unlearn"));
        assert_eq!(
            (&body["action"], &body["label"]),
            (&json!("unlearned"), &json!("ham"))
        );
        let (status, body) = ask(&state, learn("/unlearn"));
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["reason"], "not-learned");
        // The user's learn log: what, and from where.
        let said = logged(&dir.path().join("users/carol@example.org"));
        assert_eq!(
            said,
            [
                "learned spam http",
                "already spam http",
                "relabelled ham imap",
                "unlearned ham http"
            ]
        );
        let text = state.metrics.render(&[]);
        for line in [
            "bayesmail_learns_total{kind=\"spam\"} 1",
            "bayesmail_learns_total{kind=\"ham\"} 1",
            "bayesmail_learns_total{kind=\"unlearn\"} 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn a_learn_while_another_writer_holds_the_database_is_accepted_and_left_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path(), 10_000);
        let post = |uri: &str, body: &[u8]| {
            with(Request::post(uri).header("User", "dan@example.org"), body)
        };
        let (status, _) = ask(&state, post("/learn?class=ham", MAIL));
        assert_eq!(status, StatusCode::OK);
        let db = dir.path().join("users/dan@example.org");
        let lock = std::fs::File::options()
            .write(true)
            .open(db.join("lock"))
            .unwrap();
        lock.lock().unwrap();
        let other = [&b"Subject: other\n"[..], MAIL].concat();
        let (status, body) = ask(&state, post("/learn?class=spam&origin=imap", &other));
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(
            (&body["action"], &body["label"]),
            (&json!("queued"), &json!("spam"))
        );
        let (status, body) = ask(&state, post("/unlearn", MAIL));
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["action"], "queued");
        assert!(body.get("label").is_none(), "{body}");
        lock.unlock().unwrap();
        let third = [&b"Subject: third\n"[..], MAIL].concat();
        let (status, _) = ask(&state, post("/learn?class=spam", &third));
        assert_eq!(status, StatusCode::OK);
        let said = logged(&db);
        assert_eq!(
            said,
            [
                "learned ham http",
                "learned spam imap",
                "unlearned ham http",
                "learned spam http"
            ]
        );
    }

    #[test]
    fn two_different_user_names_are_refused_not_one_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path(), 10_000);
        let two = |second: &str| {
            let req = Request::post("/learn?class=spam")
                .header("User", "erin@example.org")
                .header("User", second);
            ask(&state, with(req, MAIL))
        };
        let (status, body) = two("mallory@example.org");
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["reason"], "bad-user");
        assert!(!dir.path().join("users").exists(), "nothing made");
        let (status, body) = two("Erin@Example.org");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["database"], "user:erin@example.org");
    }

    #[test]
    fn a_learn_whose_model_was_not_written_is_a_retry_not_a_failure() {
        let full = || {
            db::Error::Store(crate::store::Error::Io {
                path: "model.bin".into(),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            })
        };
        let status = learn_status(&LearnError::Db(full().model_not_written()));
        assert_eq!(
            status,
            (StatusCode::SERVICE_UNAVAILABLE, "model-not-written")
        );
        // A full disk (or no room for a new user's database) is for now:
        // 507, and spamd's answer is a temporary failure.
        let status = learn_status(&LearnError::Db(full()));
        assert_eq!(status, (StatusCode::INSUFFICIENT_STORAGE, "no-room"));
        assert!(LearnError::Db(full()).retryable());
        let denied = LearnError::Db(db::Error::Store(crate::store::Error::Io {
            path: "model.bin".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        }));
        assert_eq!(
            learn_status(&denied),
            (StatusCode::INTERNAL_SERVER_ERROR, "database")
        );
        assert!(!denied.retryable());
    }

    #[test]
    fn one_line_joins_lines() {
        assert_eq!(one_line("a\nb\r\n\n c "), "a; b; c");
    }
}
