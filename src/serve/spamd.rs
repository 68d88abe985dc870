//! spamd's protocol: SpamAssassin's `SPAMC/1.5` as its `spamd/PROTOCOL`
//! documents it and its spamd answers it, so that an unchanged `spamc`
//! (and Exim's `spamd_address`) can use `serve`. This module owns the
//! request's parsing, the answers, and the mapping of our verdict onto
//! spamd's score and threshold; judging and learning are [`State::judge`]
//! and [`State::learn`], the same calls the other protocols make.
//!
//! One request per connection, as spamd: the answer is written and the
//! connection closed. Every failure (a bad request or user name, a message
//! over the size limit, no readable model, a timeout, an internal error) is
//! one of spamd's error lines, `SPAMD/1.0 CODE TEXT`, with a sysexits code;
//! spamc then passes the message on unchanged (PROCESS, HEADERS) or prints
//! `0/0` (CHECK): a message is never altered or lost here.
//!
//! # Score and threshold
//!
//! spamd speaks in SpamAssassin points against a threshold: spamc's `-c`
//! and `-E` exit codes follow the `Spam: True|False` word, Exim's `spam`
//! condition is `score >= threshold` and its rules often compare
//! `$spam_score_int` (ten times the score) with 50. So the threshold is
//! always 5.0 (SpamAssassin's default) and the score is
//! `5.0 + log-odds − logit(spam cutoff)`: one point per nat of evidence past
//! the cutoff, rounded to one decimal, bounded to ±999.9, and nudged so
//! that it is at least 5.0 exactly when the verdict is spam. Unsure is not
//! spam: its score stays below 5.0, for spamc and for Exim.

use std::sync::Arc;

use tokio::io::AsyncWriteExt;

use super::{BoxConn, Judged, LearnError, Learned, Peer, State, Which, log_line};
use crate::db::{Reason, Status};
use crate::decision::Verdict;

mod request;

use request::{Headers, Input, Read, Verb, request_line};

/// The threshold said to spamc, in SpamAssassin points.
pub const THRESHOLD: f64 = 5.0;

/// The sysexits codes spamd answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    /// The message cannot be judged as sent: too large, not mail.
    DataErr = 65,
    /// No model to judge with, or a compressed body that does not inflate.
    Unavailable = 69,
    /// A bug.
    Software = 70,
    /// The database is busy (another writer, and the message could not be
    /// left for it), or took a change it could not write the model for:
    /// try again.
    TempFail = 75,
    /// A request spamd's protocol does not allow.
    Protocol = 76,
    /// The configuration is wrong.
    Config = 78,
    /// The client sent nothing for too long, or its request came too
    /// slowly to be whole by its deadline.
    Timeout = 79,
}

impl Code {
    /// The words spamd puts before the reason.
    fn label(self) -> &'static str {
        match self {
            Code::DataErr => "EX_DATAERR",
            Code::Unavailable => "Service Unavailable",
            Code::Software => "EX_SOFTWARE",
            Code::TempFail => "EX_TEMPFAIL",
            Code::Protocol => "Bad header line",
            Code::Config => "EX_CONFIG",
            Code::Timeout => "Timeout",
        }
    }
}

/// A request that ends with an error line instead of an answer.
#[derive(Debug)]
struct Failure {
    code: Code,
    text: String,
    /// Already logged (by [`State::judge`]), so not again.
    logged: bool,
}

impl Failure {
    fn new(code: Code, text: impl Into<String>) -> Failure {
        Failure {
            code,
            text: text.into(),
            logged: false,
        }
    }

    fn protocol(text: impl Into<String>) -> Failure {
        Failure::new(Code::Protocol, text)
    }

    /// The error line: one line, whatever the text holds.
    fn line(&self) -> String {
        format!(
            "SPAMD/1.0 {} {}: {}\r\n",
            self.code as u8,
            self.code.label(),
            one_line(&self.text)
        )
    }
}

/// Why a request stops early.
enum Stop {
    /// With an error line.
    Fail(Failure),
    /// The connection broke: nothing can be answered.
    Io(std::io::Error),
}

impl From<Failure> for Stop {
    fn from(f: Failure) -> Stop {
        Stop::Fail(f)
    }
}

/// `text` made safe for one protocol line (and a log): control characters
/// become `?`, and it is cut at 200 characters.
fn one_line(text: &str) -> String {
    crate::sanitize::shortened(text, 200)
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Serves one spamd connection: one request, one answer, then the
/// connection is closed. A failure is answered with spamd's error line and
/// returned, to be logged with the peer (unless already logged).
pub(super) async fn serve(
    mut conn: BoxConn,
    _peer: &Peer,
    state: &Arc<State>,
) -> std::io::Result<()> {
    // The message's bytes, held of spamd's budget as they arrive, until
    // its answer (the message again, once it is dropped) is written.
    let mut held = state.budget(super::Protocol::Spamd).empty();
    let (answer, complaint) = match request(&mut conn, state, &mut held).await {
        Ok(answer) => (answer, None),
        Err(Stop::Fail(f)) => {
            let complaint = (!f.logged).then(|| f.line().trim_end().to_string());
            (f.line().into_bytes(), complaint)
        }
        Err(Stop::Io(e)) => return Err(e),
    };
    // Each part of the answer must be taken within the read timeout: a
    // large answer to a client reading steadily is written whole, one that
    // reads nothing gives its connection back.
    let timeout = state.settings().read_timeout;
    let written: Result<std::io::Result<()>, tokio::time::error::Elapsed> = async {
        for part in answer.chunks(ANSWER_PART) {
            if let Err(e) = tokio::time::timeout(timeout, conn.write_all(part)).await? {
                return Ok(Err(e));
            }
        }
        tokio::time::timeout(timeout, async {
            conn.flush().await?;
            conn.shutdown().await
        })
        .await
    }
    .await;
    match written {
        Ok(Ok(())) => {}
        // A client gone after sending everything: nothing to answer.
        Ok(Err(e)) if complaint.is_none() => return Err(e),
        Ok(Err(_)) => {}
        Err(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client did not take {} KiB of the answer within {} s",
                    ANSWER_PART / 1024,
                    timeout.as_secs()
                ),
            ));
        }
    }
    drop(held);
    match complaint {
        Some(c) => Err(std::io::Error::other(c)),
        None => Ok(()),
    }
}

/// The bytes of an answer that must be taken within the read timeout
/// (at the default 30 s, a client reading 2 KiB/s is served).
const ANSWER_PART: usize = 64 * 1024;

/// Reads one request and makes its answer.
async fn request(
    conn: &mut BoxConn,
    state: &Arc<State>,
    held: &mut super::budget::Held,
) -> Result<Vec<u8>, Stop> {
    let settings = state.settings();
    let mut input = Input::new(conn, settings.read_timeout, settings.request_timeout);
    let Some(line) = input.line().await? else {
        return Err(Failure::protocol("(closed before headers)").into());
    };
    let (verb, version) = request_line(&line)?;
    // PING and SKIP carry headers since 1.5; the others since 1.1 (TELL
    // always did).
    let has_headers = match verb {
        Verb::Ping | Verb::Skip => version >= 1.5,
        Verb::Tell => true,
        _ => version > 1.0,
    };
    let headers = if has_headers {
        input.headers().await?
    } else {
        Headers::default()
    };
    match verb {
        Verb::Ping => return Ok(b"SPAMD/1.5 0 PONG\r\n".to_vec()),
        Verb::Skip => return Ok(Vec::new()),
        _ => {}
    }
    if verb == Verb::Tell && headers.set_local && headers.remove_local {
        return Err(Failure::protocol(
            "Unable to set local and remove local in the same operation.",
        )
        .into());
    }
    if verb == Verb::Tell && headers.set_local && headers.class.is_none() {
        return Err(Failure::protocol("(Set: local needs a Message-class: spam or ham)").into());
    }
    let max = settings.max_message;
    let raw = match input.message(&headers, max, held).await? {
        Read::Message(raw) => raw,
        // Not a judgment, nor a learn: refused, and logged with the peer
        // as a request refused is.
        Read::TooLarge if verb == Verb::Tell => {
            return Err(Failure::new(Code::DataErr, State::too_large_to_learn(max)).into());
        }
        Read::TooLarge => {
            let users: Vec<String> = headers.user.iter().cloned().collect();
            return Err(no_verdict(&state.too_large(&users, "", max)).into());
        }
        Read::Busy if verb == Verb::Tell => {
            let budget = state.budget(super::Protocol::Spamd);
            return Err(Failure::new(
                Code::TempFail,
                super::budget::busy_why(budget, "not learned"),
            )
            .into());
        }
        Read::Busy => {
            let users: Vec<String> = headers.user.iter().cloned().collect();
            let judged = state.busy(super::Protocol::Spamd, &users, "");
            return Err(no_verdict(&judged).into());
        }
    };
    if verb == Verb::Tell {
        tell(state, headers, raw).await
    } else {
        judge(state, verb, version, headers.user, raw, max).await
    }
}

/// Judges `raw` and answers `verb`.
async fn judge(
    state: &Arc<State>,
    verb: Verb,
    version: f64,
    user: Option<String>,
    raw: Vec<u8>,
    max: u64,
) -> Result<Vec<u8>, Stop> {
    let id = message_id(&raw);
    let rewrite = matches!(verb, Verb::Process | Verb::Headers);
    let (judged, raw) = if rewrite {
        (state.judge(user, raw.clone(), &id, max).await, raw)
    } else {
        (state.judge(user, raw, &id, max).await, Vec::new())
    };
    let Some((spam, score)) = points(&judged.stamped.status, judged.stamped.log_odds) else {
        return Err(no_verdict(&judged).into());
    };
    let spam_line = format!(
        "Spam: {} ; {score:.1} / {THRESHOLD:.1}",
        if spam { "True" } else { "False" }
    );
    let mut out = Vec::new();
    if rewrite {
        // HEADERS: spamc puts after the answer what follows the end of the
        // header in its own copy, as it finds it (the first empty line):
        // the answer is what comes before that, written as PROCESS writes
        // the whole. Where our own reading of the header ends later (a
        // sender's `\n\r\n`), a field named like ours past spamc's end
        // stays as it came, as in any body; the verdict is the whole
        // message's.
        let given = match verb {
            Verb::Headers => &raw[..header_end(&raw)],
            _ => &raw[..],
        };
        let mut message = Vec::with_capacity(given.len() + 256);
        crate::headers::write_with_fields(
            &mut message,
            given,
            None,
            &judged.fields(state.models.per_user()),
        )
        .map_err(|e| Failure::new(Code::Software, format!("writing the answer: {e}")))?;
        // At most two copies of a message at a time.
        drop(raw);
        if version >= 1.3 {
            out.extend_from_slice(
                format!(
                    "SPAMD/1.1 0 EX_OK\r\nContent-length: {}\r\n{spam_line}\r\n\r\n",
                    message.len()
                )
                .as_bytes(),
            );
        } else if version >= 1.2 {
            out.extend_from_slice(
                format!(
                    "SPAMD/1.1 0 EX_OK\r\nContent-length: {}\r\n\r\n",
                    message.len()
                )
                .as_bytes(),
            );
        } else {
            out.extend_from_slice(b"SPAMD/1.0 0 EX_OK\r\n");
        }
        out.extend_from_slice(&message);
        return Ok(out);
    }
    out.extend_from_slice(b"SPAMD/1.1 0 EX_OK\r\n");
    if verb == Verb::Check {
        out.extend_from_slice(format!("{spam_line}\r\n\r\n").as_bytes());
        return Ok(out);
    }
    let body = match verb {
        Verb::Symbols => symbols(&judged.stamped.status),
        Verb::Report => report(&judged),
        // spamd writes "Yes"/"No" here, which spamc reads as not spam;
        // PROTOCOL says it is REPORT's answer, so `spamc -r -E` works.
        Verb::ReportIfSpam if spam => report(&judged),
        _ => String::new(),
    };
    if version >= 1.3 {
        out.extend_from_slice(format!("Content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(format!("{spam_line}\r\n\r\n{body}").as_bytes());
    Ok(out)
}

/// The error answer for a message `judge` gave no verdict.
fn no_verdict(judged: &Judged) -> Failure {
    let Status::Unknown(reason) = judged.stamped.status else {
        return Failure::new(Code::Software, "no verdict");
    };
    let code = match reason {
        Reason::Config => Code::Config,
        Reason::NoModel
        | Reason::ModelVersion
        | Reason::ModelUnreadable
        | Reason::StoreUnavailable => Code::Unavailable,
        Reason::Busy => Code::TempFail,
        Reason::TooLarge | Reason::Unparseable => Code::DataErr,
        Reason::Internal => Code::Software,
    };
    Failure {
        code,
        text: judged
            .stamped
            .why
            .clone()
            .unwrap_or_else(|| reason.name().to_string()),
        logged: true,
    }
}

/// Learns or unlearns `raw` as TELL asks; `Set: remote` and `Remove:
/// remote` (reporting to networks) are not done and not said done.
async fn tell(state: &Arc<State>, headers: Headers, raw: Vec<u8>) -> Result<Vec<u8>, Stop> {
    let label = match (headers.set_local, headers.remove_local) {
        (true, _) => headers.class,
        (false, true) => None,
        (false, false) => return Ok(b"SPAMD/1.1 0 EX_OK\r\n\r\n".to_vec()),
    };
    let user = headers.user;
    let id = message_id(&raw);
    let result = state
        .learn(user.clone(), raw, label, crate::db::Origin::Spamd)
        .await;
    let said = match &result {
        Ok(learned) => {
            let (action, label) = learned.action();
            format!(
                "action={action} label={}",
                label.map_or("-", crate::model::Label::name)
            )
        }
        Err(e) => e.to_string(),
    };
    let never_learned = matches!(
        &result,
        Err(LearnError::Db(
            crate::db::Error::NotLearned | crate::db::Error::NothingLearned(_)
        ))
    );
    if state.settings().log_messages || (result.is_err() && !never_learned) {
        log_line(&format!(
            "tell id={} user={} {}",
            crate::sanitize::log_value(if id.is_empty() { "-" } else { &id }),
            crate::sanitize::log_value(user.as_deref().unwrap_or("-")),
            crate::sanitize::for_terminal(&said),
        ));
    }
    let did = match result {
        // Queued: made when the writer holding the database lets go.
        Ok(Learned::Learned(_) | Learned::Moved(_) | Learned::Queued(Some(_))) => {
            "DidSet: local\r\n"
        }
        Ok(Learned::Unlearned(_) | Learned::Queued(None)) => "DidRemove: local\r\n",
        Ok(Learned::Already(_)) => "",
        // Never learned: spamc says "already un/learned".
        Err(_) if never_learned => "",
        Err(e) => {
            return Err(Failure {
                code: tell_code(&e),
                text: e.to_string(),
                logged: true,
            }
            .into());
        }
    };
    Ok(format!("SPAMD/1.1 0 EX_OK\r\n{did}\r\n").into_bytes())
}

/// The status of a TELL that failed: a retry may do (another writer held
/// the database, or the counts took the change and the model was not
/// written), or not.
fn tell_code(err: &LearnError) -> Code {
    match err {
        LearnError::User(_) => Code::Protocol,
        LearnError::Message(_) => Code::DataErr,
        e if e.retryable() => Code::TempFail,
        LearnError::Db(_) => Code::Unavailable,
    }
}

/// Our verdict as spamd's: whether it is spam, and the score against
/// [`THRESHOLD`] (see the module documentation); `None` without a verdict.
pub fn points(status: &Status, log_odds: Option<f64>) -> Option<(bool, f64)> {
    let Status::Verdict {
        verdict, cutoff, ..
    } = *status
    else {
        return None;
    };
    let spam = verdict == Verdict::Spam;
    let logit = cutoff.ln() - (-cutoff).ln_1p();
    let past = log_odds.map_or(f64::NAN, |l| l - logit);
    let score = if past.is_nan() {
        THRESHOLD
    } else {
        ((THRESHOLD + past).clamp(-999.9, 999.9) * 10.0).round() / 10.0
    };
    let score = if spam {
        score.max(THRESHOLD)
    } else {
        score.min(THRESHOLD - 0.1)
    };
    Some((spam, score))
}

/// SYMBOLS' answer: our verdict, and SpamAssassin's Bayes rule for the
/// probability (`BAYES_00` … `BAYES_99`, and `BAYES_999` beside
/// `BAYES_99`), so that rules written for those names keep working.
fn symbols(status: &Status) -> String {
    let Status::Verdict {
        verdict,
        probability: p,
        ..
    } = *status
    else {
        return String::new();
    };
    let word = match verdict {
        Verdict::Spam => "BAYESMAIL_SPAM",
        Verdict::Ham => "BAYESMAIL_HAM",
        Verdict::Unsure => "BAYESMAIL_UNSURE",
    };
    let bayes = [
        (0.01, "BAYES_00"),
        (0.05, "BAYES_05"),
        (0.20, "BAYES_20"),
        (0.40, "BAYES_40"),
        (0.60, "BAYES_50"),
        (0.80, "BAYES_60"),
        (0.95, "BAYES_80"),
        (0.99, "BAYES_95"),
    ]
    .iter()
    .find(|(upto, _)| p <= *upto)
    .map_or("BAYES_99", |(_, name)| name);
    let mut out = format!("{word},{bayes}");
    if p > 0.999 {
        out.push_str(",BAYES_999");
    }
    out
}

/// REPORT's answer: the verdict in words, its probability and cutoff, and
/// which model judged.
fn report(judged: &Judged) -> String {
    let Status::Verdict {
        verdict,
        probability,
        cutoff,
        doubt,
    } = judged.stamped.status
    else {
        return String::new();
    };
    let word = match (verdict, doubt) {
        (Verdict::Spam, _) => "spam".to_string(),
        (Verdict::Ham, _) => "not spam".to_string(),
        (Verdict::Unsure, None) => "unsure (not spam)".to_string(),
        (Verdict::Unsure, Some(doubt)) => format!("unsure (not spam; {doubt})"),
    };
    let model = match &judged.which {
        Some(Which::User(u)) => format!("the model of user {u}"),
        Some(Which::Global) | None => "the global model".to_string(),
    };
    format!(
        "bayesmail {}: this message is {word}.\n\
         Probability of spam {probability:.6}; spam above {cutoff:.6}.\n\
         Judged by {model}.\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// Where the header ends in `message` as spamc finds it when it puts its
/// copy's body after HEADERS' answer: after the first `\r\n\r\n` or
/// `\n\n`; the whole message when there is neither.
fn header_end(message: &[u8]) -> usize {
    let mut at = 0;
    while let Some(lf) = memchr::memchr(b'\n', &message[at..]) {
        let i = at + lf;
        if message[i + 1..].starts_with(b"\n") {
            return i + 2;
        }
        if i >= 1 && message[i - 1] == b'\r' && message[i + 1..].starts_with(b"\r\n") {
            return i + 3;
        }
        at = i + 1;
    }
    message.len()
}

/// The message's Message-ID, for the log (empty when it has none).
fn message_id(raw: &[u8]) -> String {
    let (header, _) = crate::message::split_header(raw);
    let mut lines = header.split(|&b| b == b'\n');
    while let Some(line) = lines.next() {
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        if line[..colon]
            .trim_ascii()
            .eq_ignore_ascii_case(b"message-id")
        {
            let mut value = line[colon + 1..].trim_ascii().to_vec();
            // A folded Message-ID continues on the next line.
            if value.is_empty()
                && let Some(next) = lines.next()
            {
                value = next.trim_ascii().to_vec();
            }
            return one_line(&String::from_utf8_lossy(&value));
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Label;
    use std::time::Duration;

    fn verdict(verdict: Verdict, probability: f64, cutoff: f64) -> Status {
        Status::Verdict {
            verdict,
            probability,
            cutoff,
            doubt: None,
        }
    }

    #[test]
    fn a_tell_is_tried_again_when_the_database_was_busy_or_its_model_not_written() {
        let full = || {
            crate::db::Error::Store(crate::store::Error::Io {
                path: "model.bin".into(),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            })
        };
        let code = |e| tell_code(&LearnError::Db(e)) as u8;
        assert_eq!(code(full().model_not_written()), Code::TempFail as u8);
        // A full disk is for now too; a database it may not write is not.
        assert_eq!(code(full()), Code::TempFail as u8);
        let denied = crate::db::Error::Store(crate::store::Error::Io {
            path: "model.bin".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        });
        assert_eq!(code(denied), Code::Unavailable as u8);
    }

    #[test]
    fn scores_are_spam_exactly_when_the_verdict_is() {
        // Cutoff 0.5: logit 0, so the score is 5 + log-odds.
        let s = verdict(Verdict::Spam, 0.999, 0.5);
        assert_eq!(points(&s, Some(6.9)), Some((true, 11.9)));
        let h = verdict(Verdict::Ham, 0.01, 0.5);
        assert_eq!(points(&h, Some(-4.6)), Some((false, 0.4)));
        // Just past the cutoff rounds to 5.0 and stays spam; at it, not.
        assert_eq!(points(&s, Some(0.01)), Some((true, 5.0)));
        assert_eq!(points(&h, Some(0.0)), Some((false, 4.9)));
        // Unsure with a probability above the cutoff (too few known
        // words) is below the threshold all the same.
        let u = verdict(Verdict::Unsure, 0.9999, 0.5);
        assert_eq!(points(&u, Some(9.2)), Some((false, 4.9)));
        // Cutoff 0.9: logit ≈ 2.197.
        let s9 = verdict(Verdict::Spam, 0.99, 0.9);
        assert_eq!(points(&s9, Some(4.595)), Some((true, 7.4)));
        // Extremes stay finite and on the right side.
        assert_eq!(points(&s, Some(f64::INFINITY)), Some((true, 999.9)));
        assert_eq!(points(&h, Some(f64::NEG_INFINITY)), Some((false, -999.9)));
        let never = verdict(Verdict::Ham, 1.0, 1.0);
        assert_eq!(points(&never, Some(50.0)), Some((false, -999.9)));
        assert_eq!(points(&s, None), Some((true, 5.0)));
        assert_eq!(points(&Status::Unknown(Reason::NoModel), None), None);
    }

    #[test]
    fn symbols_follow_spamassassins_bayes_rules() {
        assert_eq!(
            symbols(&verdict(Verdict::Spam, 0.9995, 0.5)),
            "BAYESMAIL_SPAM,BAYES_99,BAYES_999"
        );
        assert_eq!(
            symbols(&verdict(Verdict::Spam, 0.995, 0.5)),
            "BAYESMAIL_SPAM,BAYES_99"
        );
        assert_eq!(
            symbols(&verdict(Verdict::Unsure, 0.5, 0.5)),
            "BAYESMAIL_UNSURE,BAYES_50"
        );
        assert_eq!(
            symbols(&verdict(Verdict::Ham, 0.0, 0.5)),
            "BAYESMAIL_HAM,BAYES_00"
        );
    }

    #[test]
    fn the_header_ends_where_spamc_looks_for_it() {
        assert_eq!(header_end(b"A: b\n\nbody\n\n"), 6);
        assert_eq!(header_end(b"A: b\r\n\r\nbody"), 8);
        assert_eq!(header_end(b"A: b\r\nC: d\r\n"), 12);
        assert_eq!(header_end(b"\n\nx"), 2);
    }

    #[test]
    fn error_lines_are_one_line() {
        let f = Failure::protocol("(User header refused: a\r\nSpam: True)");
        let line = f.line();
        assert_eq!(line.matches("\r\n").count(), 1, "{line:?}");
        assert!(line.starts_with("SPAMD/1.0 76 Bad header line: "), "{line}");
        assert_eq!(
            message_id(b"Subject: x\nMessage-ID:\n <a@b>\n\nbody"),
            "<a@b>"
        );
        assert_eq!(message_id(b"Subject: x\n\nMessage-ID: <no>\n"), "");
    }

    /// A state judging with a model learned from three copies of one ham
    /// and of one spam (each with a header line of its own) in `dir`,
    /// messages up to 2,000 bytes.
    fn state(dir: &std::path::Path) -> Arc<State> {
        let state = Arc::new(State::new(super::super::Settings {
            listen: Vec::new(),
            allow: Vec::new(),
            socket_mode: 0o600,
            socket_group: None,
            models: super::super::ModelSettings {
                global: dir.join("db"),
                user_db: None,
                min_user_messages: 1,
                cache_bytes: 1 << 20,
                decider: crate::decision::Decider {
                    costs: Default::default(),
                    min_known: 1,
                    min_per_class: 1,
                },
                learn_wait: Duration::from_secs(5),
                journal_limit: crate::store::DEFAULT_JOURNAL_LIMIT,
                params: Default::default(),
                shared: None,
                shared_window: Duration::ZERO,
                shared_cap: None,
                recipient_delimiter: String::new(),
            },
            max_message: 2000,
            max_held: 1 << 30,
            max_connections: 1,
            read_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(1),
            log_messages: false,
            milter_spam_action: Default::default(),
        }));
        for i in 0..3 {
            for (raw, label) in [(HAM, Label::Ham), (SPAM, Label::Spam)] {
                let raw = [format!("X-Copy: {i}\n").as_bytes(), raw].concat();
                state
                    .models
                    .learn(None, &raw, label, crate::db::Origin::Spamd)
                    .unwrap();
            }
        }
        state
    }

    const HAM: &[u8] = b"From: ann@example.org\nSubject: minutes\n\nThe minutes of the meeting.\n";
    const SPAM: &[u8] =
        b"From: win@prize.example\nSubject: cash prize\n\nClaim your cash prize now!\n";

    /// Sends `input` (then closes the sending side) to a connection served
    /// by `state`; returns all of the answer.
    fn exchange(state: &Arc<State>, input: Vec<u8>) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, server) = tokio::io::duplex(8 * 1024);
            let state = state.clone();
            let serving = tokio::spawn(async move {
                let _ = serve(Box::pin(server), &Peer::Unix, &state).await;
            });
            let (mut rd, mut wr) = tokio::io::split(client);
            let writing = tokio::spawn(async move {
                let _ = wr.write_all(&input).await;
                let _ = wr.shutdown().await;
            });
            let mut answer = Vec::new();
            let _ = rd.read_to_end(&mut answer).await;
            writing.await.unwrap();
            serving.await.unwrap();
            answer
        })
    }

    #[test]
    fn a_served_request_gets_its_answer() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(dir.path());
        let ask = |verb: &str, headers: &str, body: &[u8]| {
            let mut input = format!(
                "{verb} SPAMC/1.5\r\n{headers}Content-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            input.extend_from_slice(body);
            String::from_utf8(exchange(&state, input)).unwrap()
        };
        let check = ask("CHECK", "", SPAM);
        assert!(
            check.starts_with("SPAMD/1.1 0 EX_OK\r\nSpam: True ; "),
            "{check}"
        );
        let check = ask("CHECK", "User: ann\r\n", HAM);
        assert!(
            check.starts_with("SPAMD/1.1 0 EX_OK\r\nSpam: False ; "),
            "{check}"
        );
        let process = ask("PROCESS", "", HAM);
        let (head, body) = process.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-length: {}", body.len())),
            "{head}"
        );
        assert!(body.starts_with("X-Spam-Status: No, ") && body.ends_with("meeting.\n"));
        let tell = ask("TELL", "Message-class: spam\r\nSet: local\r\n", HAM);
        assert_eq!(tell, "SPAMD/1.1 0 EX_OK\r\nDidSet: local\r\n\r\n");
        let tell = ask("TELL", "Remove: local\r\n", HAM);
        assert_eq!(tell, "SPAMD/1.1 0 EX_OK\r\nDidRemove: local\r\n\r\n");
        let big = ask("CHECK", "", &[b'a'; 3000]);
        assert!(big.starts_with("SPAMD/1.0 65 EX_DATAERR: "), "{big}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Whatever a client sends, in whatever pieces of a plausible
        /// request, the answer is spamd's: nothing (SKIP, or a client gone)
        /// or a status line first; and a PROCESS answered with EX_OK
        /// carries the length it says.
        #[test]
        fn any_request_gets_a_spamd_answer(
            verb in proptest::sample::select(vec![
                "CHECK", "SYMBOLS", "REPORT", "REPORT_IFSPAM", "SKIP", "PING",
                "PROCESS", "HEADERS", "TELL", "FROB", "",
            ]),
            version in proptest::sample::select(vec!["SPAMC/1.5", "SPAMC/1.2", "SPAMC/1.0", "SPAMC/x", "HTTP/1.1"]),
            headers in proptest::collection::vec(proptest::sample::select(vec![
                "User: ann", "User: ../x", "User: a%b", "Compress: zlib", "Compress: gzip",
                "Message-class: spam", "Message-class: ham", "Message-class: x",
                "Set: local", "Remove: local", "Content-length: 5", "Content-length: x",
                "X-Other: y", "no colon",
            ]), 0..5),
            length in proptest::option::of(0usize..3000),
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            spam in proptest::bool::ANY,
            cut in proptest::option::of(0usize..400),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let state = state(dir.path());
            let message = [if spam { SPAM } else { HAM }, &body[..]].concat();
            let mut input = format!("{verb} {version}\r\n");
            for h in &headers {
                input.push_str(h);
                input.push_str("\r\n");
            }
            if let Some(n) = length {
                input.push_str(&format!("Content-length: {}\r\n", n.min(message.len())));
            }
            input.push_str("\r\n");
            let mut input = input.into_bytes();
            input.extend_from_slice(&message);
            if let Some(cut) = cut {
                input.truncate(cut);
            }
            let answer = exchange(&state, input);
            if answer.is_empty() {
                return Ok(());
            }
            let text = String::from_utf8_lossy(&answer);
            let (line, rest) = text.split_once("\r\n").unwrap_or_else(|| panic!("{text:?}"));
            let mut words = line.split(' ');
            let proto = words.next().unwrap();
            proptest::prop_assert!(proto.starts_with("SPAMD/1."), "{text:?}");
            let code: u8 = words.next().unwrap().parse().unwrap();
            proptest::prop_assert!(code == 0 || (64..=79).contains(&code), "{text:?}");
            if code != 0 {
                proptest::prop_assert_eq!(rest, "", "an error is one line: {:?}", text);
            }
            if code == 0 && verb == "PROCESS" && version == "SPAMC/1.5" {
                let (head, body) = rest.split_once("\r\n\r\n").unwrap();
                let length = format!("Content-length: {}", answer.len() - (text.len() - body.len()));
                proptest::prop_assert!(head.contains(&length), "{:?}", text);
            }
        }
    }
}
