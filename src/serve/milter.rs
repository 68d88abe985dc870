//! The milter protocol (version 6, as Postfix's `smtpd_milters` and
//! Sendmail's `INPUT_MAIL_FILTER` speak it), on the `miltr-server` crate.
//!
//! Each message is collected (its header fields as the MTA sends them,
//! then its body chunks, at most `max_message` bytes and one more, so a
//! larger one is known to be too large without being kept), judged at the
//! end of the body through [`State::judge`], and answered with the header
//! actions that make the delivered message what `filter` would have
//! written: our fields ([`crate::db::Status::fields`]) inserted at the top,
//! and the fields the client sent under one of our names
//! ([`OUR_FIELDS`](crate::vocab::OUR_FIELDS)) renamed with
//! [`RENAMED_PREFIX`] in place (deleted with CHGHEADER, inserted again
//! under the new name at its position): the first
//! [`RENAMED_FIELDS`] of them, within `max_message` bytes. The body is
//! never touched: the milter does not even ask for the right to.
//!
//! The users are the envelope recipients (RCPT): the address Postfix
//! resolved (its `{rcpt_addr}` macro), else the argument as sent, angle
//! brackets and a source route taken off. One message gets one verdict
//! for all its recipients: each recipient's model judges it (or the
//! global one, when that user has no model of its own or too young a
//! one, or its name is refused, or its model cannot be read) and the
//! judgment least harmful to any of them is kept
//! ([`super::Models::judge_for_all`]), so spam is refused, dropped or held
//! only when every recipient's model says spam; more than
//! [`JUDGED_RECIPIENTS`] users are judged by the global model. With users'
//! models, `X-Spam-Status` says which kind judged
//! ([`super::Judged::fields`]). A message without a verdict (too large,
//! no readable model, an internal error) is accepted with the Unknown
//! status field, as `filter` passes it on; a milter that cannot answer at
//! all (stopped, timed out) leaves the MTA to its `milter_default_action`,
//! which should be `accept`.
//!
//! It does not own the listeners, the connection limit or the models
//! (see [`super`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use miltr_common::actions::{Action, Continue, Discard, Replycode};
use miltr_common::commands::{Body, Connect, Header, Macro, Mail, Recipient};
use miltr_common::encoding::Writable;
use miltr_common::modifications::ModificationResponse;
use miltr_common::modifications::headers::{ChangeHeader, InsertHeader};
use miltr_common::modifications::quarantine::Quarantine;
use miltr_common::optneg::{Capability, OptNeg, Protocol};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::compat::TokioAsyncReadCompatExt;

use super::{BoxConn, Peer, State};
use crate::db::Status;
use crate::decision::Verdict;
use crate::vocab::RENAMED_PREFIX;

/// What the milter tells the MTA to do with a message judged spam. Every
/// other message (ham, unsure, no verdict) is accepted with our fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpamAction {
    /// Accept it with our fields (the default).
    #[default]
    Accept,
    /// Refuse it in the SMTP session (550 5.7.1).
    Reject,
    /// Accept it and drop it silently.
    Discard,
    /// Accept it with our fields into the MTA's hold queue.
    Quarantine,
}

impl std::str::FromStr for SpamAction {
    type Err = String;

    fn from_str(s: &str) -> Result<SpamAction, String> {
        match s {
            "accept" => Ok(SpamAction::Accept),
            "reject" => Ok(SpamAction::Reject),
            "discard" => Ok(SpamAction::Discard),
            "quarantine" => Ok(SpamAction::Quarantine),
            _ => Err(format!(
                "{s:?} is not an action: accept, reject, discard or quarantine"
            )),
        }
    }
}

/// Longest milter packet taken: Postfix and Sendmail send body chunks of
/// at most 64 KiB, and a header field is bounded by the MTA's own limit
/// (Postfix's `header_size_limit` is 100 KiB by default); a larger packet
/// ends the connection, and the MTA's default action decides.
const MAX_PACKET: usize = 1 << 20;

/// Serves one milter connection.
pub(super) async fn serve(conn: BoxConn, _peer: &Peer, state: &Arc<State>) -> std::io::Result<()> {
    let flags: [Arc<AtomicBool>; 3] = Default::default();
    let timed = Timed::new(conn, state.clone(), flags.clone());
    let mut milter = Bayes::new(state.clone(), flags);
    let mut server = miltr_server::Server::new(&mut milter, false, MAX_PACKET);
    server
        .handle_connection(timed.compat())
        .await
        .map_err(|err| match err {
            miltr_server::Error::Io(err) => err,
            other => std::io::Error::other(other.to_string()),
        })
}

/// One connection's milter: the message being collected.
struct Bayes {
    state: Arc<State>,
    /// Set from the first field of a message to its answer: the reads'
    /// timeout is then the one inside a message.
    in_message: Arc<AtomicBool>,
    /// Set once the SMTP session has begun (the MTA's CONNECT, which it
    /// sends as soon as the options are negotiated): until then the reads'
    /// timeout is the one inside a message, so that a client that
    /// negotiates and then says nothing gives its connection back rather
    /// than hold it for the session ([`Timed::timeout`]).
    negotiated: Arc<AtomicBool>,
    /// Set from the transaction's MAIL FROM (or first RCPT) to its
    /// message's answer or its abort: a server stopping meanwhile waits
    /// for the message rather than end the connection, which the MTA
    /// would take as leave to pass the message on unjudged.
    in_transaction: Arc<AtomicBool>,
    /// Whether header values come and go with their leading space
    /// (SMFIP_HDR_LEADSPC), so a renamed field keeps its bytes.
    leading_space: bool,
    /// Header fields above the first one sent that INSHEADER positions
    /// count, by the MTA (see [`hidden_fields`]).
    hidden: u32,
    /// The MTA is Postfix (its `v` macro says so), whose `{rcpt_addr}`
    /// is the address it resolved the recipient to.
    postfix: bool,
    /// The envelope recipients' users, each once, in order: at most
    /// [`JUDGED_RECIPIENTS`] of them.
    recipients: Vec<String>,
    /// More recipients came than [`JUDGED_RECIPIENTS`].
    crowded: bool,
    /// The MTA's queue id (macro `i`), for the log.
    queue_id: Option<String>,
    /// Header fields received in this message so far.
    seen: u32,
    /// The first [`RENAMED_FIELDS`] fields named like ours, as received,
    /// within `max_message` bytes: only these are kept apart from the
    /// rebuilt message (the others are not needed again). Always the
    /// first ones: CHGHEADER's index counts the fields of a name from the
    /// top, which [`header_actions`] counts from these.
    forged: Vec<Forged>,
    /// A field named like ours did not fit: none after it is held.
    forged_full: bool,
    /// The address the MTA resolved the coming RCPT to (macro
    /// `{rcpt_addr}`), which names its user rather than the address as
    /// the sender wrote it.
    rcpt_addr: Option<String>,
    /// The message's Message-ID, for the log when there is no queue id.
    message_id: Option<String>,
    /// The message rebuilt in LF form ([`lf_lines`]): header block, empty
    /// line, body; at most `max_message + 1` bytes.
    raw: Vec<u8>,
    /// The last body chunk ended in CR ([`lf_lines`]).
    body_cr: bool,
    /// `raw`'s bytes, held of the milter's budget.
    held: Option<super::budget::Held>,
    /// Whether the budget had no room for the message: it is dropped.
    busy: bool,
    /// The size limit the message is read and judged under, from its first
    /// byte kept: a reload meanwhile does not change it.
    limit: Option<u64>,
}

impl Bayes {
    fn new(
        state: Arc<State>,
        [in_message, negotiated, in_transaction]: [Arc<AtomicBool>; 3],
    ) -> Bayes {
        Bayes {
            state,
            in_message,
            negotiated,
            in_transaction,
            leading_space: false,
            hidden: 0,
            postfix: false,
            recipients: Vec::new(),
            crowded: false,
            queue_id: None,
            seen: 0,
            forged: Vec::new(),
            forged_full: false,
            rcpt_addr: None,
            message_id: None,
            raw: Vec::new(),
            body_cr: false,
            held: None,
            busy: false,
            limit: None,
        }
    }

    /// Forgets the message (not the connection's negotiation).
    fn reset(&mut self) {
        self.busy = false;
        self.limit = None;
        self.held = None;
        self.in_message.store(false, Ordering::SeqCst);
        self.in_transaction.store(false, Ordering::SeqCst);
        self.recipients.clear();
        self.crowded = false;
        self.queue_id = None;
        self.seen = 0;
        self.forged.clear();
        self.forged_full = false;
        self.rcpt_addr = None;
        self.message_id = None;
        self.raw = Vec::new();
        self.body_cr = false;
    }

    /// The size limit of the message being read ([`Bayes::limit`]).
    fn max_message(&mut self) -> u64 {
        let state = &self.state;
        *self
            .limit
            .get_or_insert_with(|| state.settings().max_message)
    }

    /// Appends `bytes` to the message, keeping at most one byte past the
    /// size limit.
    fn keep(&mut self, bytes: &[u8]) {
        let max = self.max_message();
        let cap = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
        let room = cap.saturating_sub(self.raw.len());
        let kept = &bytes[..bytes.len().min(room)];
        if self.busy || kept.is_empty() {
            return;
        }
        // Held of the milter's budget as they come (at most the size
        // limit: the byte past it only marks the message too large); past
        // the budget, the message is dropped and gets no verdict.
        let budget = self.state.budget(super::Protocol::Milter);
        let want = ((self.raw.len() + kept.len()) as u64).min(max);
        if self
            .held
            .get_or_insert_with(|| budget.empty())
            .at_least(want)
        {
            self.raw.extend_from_slice(kept);
        } else {
            self.busy = true;
            self.raw = Vec::new();
            self.held = None;
        }
    }

    /// The log's name for the message: the queue id, else its Message-ID.
    fn id(&self) -> String {
        self.queue_id
            .clone()
            .or_else(|| self.message_id.clone())
            .unwrap_or_default()
    }
}

/// How many fields named like ours a message may have renamed (and no
/// more than `--max-size` bytes of them: from the first that would pass
/// that, none is held); those after them stay as they came. Each is two
/// changes for the MTA to make, and an MTA takes only so many to one
/// message: Postfix, given about 20,000, accepts the message and then
/// cannot read its own queue file, and the message is never delivered. No
/// mail sends more than a few of these fields but to forge them, and a
/// forged flag after the first hundred only files its own message in
/// Junk.
pub const RENAMED_FIELDS: usize = 100;

/// A field named like one of ours, as the MTA sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Forged {
    /// Its position among the fields sent, from 0.
    position: u32,
    name: Vec<u8>,
    value: Vec<u8>,
}

/// An envelope address without its source route (RFC 5321's
/// `@relay.example,@other.example:bob@example.org`, which MTAs deliver to
/// bob@example.org).
fn without_source_route(address: &str) -> &str {
    match address.strip_prefix('@').and_then(|r| r.split_once(':')) {
        Some((_, mailbox)) => mailbox,
        None => address,
    }
}

/// Entries Sendmail keeps above the first field of a message, less one:
/// a sendmail.cf built from Sendmail's m4 macros has nine header
/// templates (Return-Path, Received, Resent-Date, Date, Resent-From, From,
/// Full-Name, Resent-Message-Id, Message-Id), each an entry of the
/// message's header list whether it is written out or not, and Sendmail
/// puts an inserted field after the entry the index reaches, not before.
/// Seen with Sendmail 8.17.
const SENDMAIL_HIDDEN: u32 = 8;

/// How many entries the MTA whose `v` macro is `version` counts above the
/// first field it sent when it inserts one. Postfix ("Postfix 3.7.11")
/// puts its own Received field on top, hides it from milters and counts
/// it (seen with Postfix 3.7's smtpd). Sendmail ("8.17.1.9", sent once
/// its connect macros name `v`) counts [`SENDMAIL_HIDDEN`]. Other MTAs,
/// and Sendmail without `v`, none.
fn hidden_fields(version: &[u8]) -> u32 {
    if version.starts_with(b"Postfix") {
        1
    } else if version.starts_with(b"8.") {
        SENDMAIL_HIDDEN
    } else {
        0
    }
}

/// The header actions for `status` on a message whose fields named like
/// ours were `forged` (in the order sent): each renamed in place, bottom
/// up so each index still means what it meant when the fields were sent,
/// then our fields inserted at the top. With `leading_space`, values carry
/// their space; `hidden` fields the MTA did not send sit above the first
/// one sent.
fn header_actions(
    forged: &[Forged],
    fields: Vec<(&'static str, String)>,
    leading_space: bool,
    hidden: u32,
) -> Vec<HeaderAction> {
    let mut actions = Vec::new();
    for (i, field) in forged.iter().enumerate().rev() {
        // CHGHEADER's index counts the fields of that name, from 1, in
        // any case (as Postfix and Sendmail compare names); every field of
        // that name is named like ours, so the forged ones are all to count.
        let nth = forged[..=i]
            .iter()
            .filter(|f| f.name.eq_ignore_ascii_case(&field.name))
            .count();
        actions.push(HeaderAction::Delete {
            name: field.name.clone(),
            nth: nth as u32,
        });
        actions.push(HeaderAction::Insert {
            at: field.position + hidden,
            name: [RENAMED_PREFIX.as_bytes(), &field.name].concat(),
            value: field.value.clone(),
        });
    }
    // Inserted at 0 last to first, so they read in filter's order.
    for (name, value) in fields.into_iter().rev() {
        let value = if leading_space {
            format!(" {value}")
        } else {
            value
        };
        actions.push(HeaderAction::Insert {
            at: 0,
            name: name.as_bytes().to_vec(),
            value: value.into_bytes(),
        });
    }
    actions
}

/// A header action, as the milter answers it at the end of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HeaderAction {
    /// Delete the `nth` field named `name` (CHGHEADER with an empty value).
    Delete { name: Vec<u8>, nth: u32 },
    /// Insert a field at position `at` among the fields (INSHEADER).
    Insert {
        at: u32,
        name: Vec<u8>,
        value: Vec<u8>,
    },
}

/// Whether a field name the MTA sent names one of ours, as `filter`'s
/// renamer reads a name ([`crate::vocab::names_our_field`], the name's colon
/// put back).
fn names_ours(name: &[u8]) -> bool {
    let mut line: Vec<u8> = name.iter().copied().filter(|&b| b != b'\r').collect();
    line.push(b':');
    crate::vocab::names_our_field(&line) == Some(true)
}

/// A header field's name and value as the MTA sent them, byte for byte
/// (`Header` itself offers them only as lossy UTF-8).
fn field_bytes(header: &Header) -> (Vec<u8>, Vec<u8>) {
    let mut buf = bytes::BytesMut::with_capacity(header.len());
    header.write(&mut buf);
    let mut parts = buf[..].split(|&b| b == 0);
    let name = parts.next().unwrap_or(&[]).to_vec();
    let value = parts.next().unwrap_or(&[]).to_vec();
    (name, value)
}

/// Header lines in the MTA's form end in LF (Postfix) or CRLF; the body
/// comes in SMTP's CRLF. The rebuilt message takes LF throughout, the form
/// a delivery agent hands `filter`, so that its size is the one `filter`
/// counts (features do not depend on line endings). `cr` carries a CR
/// that ended the last piece: a CRLF may be split between two body chunks.
/// A CR not followed by LF is kept.
fn lf_lines(bytes: &[u8], cr: &mut bool, out: &mut Vec<u8>) {
    for &b in bytes {
        if std::mem::take(cr) && b != b'\n' {
            out.push(b'\r');
        }
        if b == b'\r' {
            *cr = true;
        } else {
            out.push(b);
        }
    }
}

#[async_trait]
impl miltr_server::Milter for Bayes {
    type Error = std::io::Error;

    async fn option_negotiation(
        &mut self,
        theirs: OptNeg,
    ) -> Result<OptNeg, miltr_server::Error<Self::Error>> {
        // Add, change and insert header fields, and quarantine; no right
        // to touch the body or the envelope.
        let wanted =
            Capability::SMFIF_ADDHDRS | Capability::SMFIF_CHGHDRS | Capability::SMFIF_QUARANTINE;
        // Header values with their leading space, where the MTA can send
        // them so. Every step is taken (each costs a few bytes), as some
        // clients (miltertest) stop when told to skip the connection step.
        let skip = Protocol::SMFIP_HDR_LEADSPC;
        let ours = OptNeg {
            version: theirs.version.min(6),
            capabilities: wanted & theirs.capabilities,
            protocol: skip & theirs.protocol,
            ..OptNeg::default()
        };
        self.leading_space = ours.protocol.contains(Protocol::SMFIP_HDR_LEADSPC);
        let fields = Capability::SMFIF_ADDHDRS | Capability::SMFIF_CHGHDRS;
        if !theirs.capabilities.contains(fields)
            && !self
                .state
                .milter_fields_refused
                .swap(true, Ordering::SeqCst)
        {
            // Said once: the MTA's configuration, not one message's fault.
            super::log_line(
                "milter: the MTA does not let milters add and change header fields \
                 (SMFIF_ADDHDRS and SMFIF_CHGHDRS), which the milter needs to give its \
                 messages their X-Spam fields and rename fields forged in them; a spam \
                 action of reject or discard still holds",
            );
        }
        Ok(ours)
    }

    async fn connect(&mut self, _connect: Connect) -> Result<Action, Self::Error> {
        self.negotiated.store(true, Ordering::SeqCst);
        Ok(Continue.into())
    }

    async fn macro_(&mut self, macro_: Macro) -> Result<(), Self::Error> {
        for (name, value) in macro_.macros() {
            if name == b"i" && !value.is_empty() {
                self.queue_id = Some(String::from_utf8_lossy(value).into_owned());
            }
            if name == b"v" {
                self.hidden = hidden_fields(value);
                self.postfix = value.starts_with(b"Postfix");
            }
            if name == b"{rcpt_addr}" {
                self.rcpt_addr = Some(String::from_utf8_lossy(value).into_owned());
            }
        }
        Ok(())
    }

    async fn mail(&mut self, _mail: Mail) -> Result<Action, Self::Error> {
        self.in_transaction.store(true, Ordering::SeqCst);
        Ok(Continue.into())
    }

    async fn rcpt(&mut self, recipient: Recipient) -> Result<Action, Self::Error> {
        self.in_transaction.store(true, Ordering::SeqCst);
        // Postfix's reading of the address (`{rcpt_addr}`): the sender's
        // spelling may route or quote it (`<@relay:bob@…>`, `"b\ob"@…`),
        // which Postfix delivers to bob, and must not choose whose model
        // judges. Sendmail's macro of that name is what its rules made of
        // the address (the mailer's user, `bob` for local mail, or a
        // virtusertable's target), not the recipient's name, and is left.
        let resolved = self
            .rcpt_addr
            .take()
            .filter(|a| self.postfix && a.contains('@'));
        let given = recipient.recipient();
        let rcpt = resolved.as_deref().unwrap_or(&given).trim();
        let rcpt = rcpt
            .strip_prefix('<')
            .and_then(|r| r.strip_suffix('>'))
            .unwrap_or(rcpt);
        let rcpt = without_source_route(rcpt);
        if !rcpt.is_empty() {
            // The name its model is chosen by, so that one user written
            // two ways (`Bob@…`, `bob+lists@…`) is judged once; a name
            // refused as it came, for the log to say so.
            let user = self
                .state
                .models
                .user_name(rcpt)
                .unwrap_or_else(|_| rcpt.to_string());
            if !self.recipients.contains(&user) {
                if self.recipients.len() < JUDGED_RECIPIENTS {
                    self.recipients.push(user);
                } else {
                    self.crowded = true;
                }
            }
        }
        Ok(Continue.into())
    }

    async fn header(&mut self, header: Header) -> Result<Action, Self::Error> {
        self.in_message.store(true, Ordering::SeqCst);
        let (name, value) = field_bytes(&header);
        let mut line = name.clone();
        line.push(b':');
        if !self.leading_space {
            line.push(b' ');
        }
        let mut cr = false;
        lf_lines(&value, &mut cr, &mut line);
        if cr {
            line.push(b'\r');
        }
        line.push(b'\n');
        self.keep(&line);
        if self.message_id.is_none() && name.eq_ignore_ascii_case(b"Message-ID") {
            self.message_id = Some(String::from_utf8_lossy(&value).trim().to_string());
        }
        if names_ours(&name) && !self.forged_full {
            // Kept apart from the message, and so bounded as it is.
            let held: usize = self
                .forged
                .iter()
                .map(|f| f.name.len() + f.value.len())
                .sum();
            let max = usize::try_from(self.max_message()).unwrap_or(usize::MAX);
            if self.forged.len() < RENAMED_FIELDS && held + name.len() + value.len() <= max {
                self.forged.push(Forged {
                    position: self.seen,
                    name,
                    value,
                });
            } else {
                self.forged_full = true;
            }
        }
        self.seen = self.seen.saturating_add(1);
        Ok(Continue.into())
    }

    async fn end_of_header(&mut self) -> Result<Action, Self::Error> {
        self.in_message.store(true, Ordering::SeqCst);
        self.keep(b"\n");
        Ok(Continue.into())
    }

    async fn body(&mut self, body: Body) -> Result<Action, Self::Error> {
        self.in_message.store(true, Ordering::SeqCst);
        let mut lines = Vec::with_capacity(body.as_bytes().len());
        lf_lines(body.as_bytes(), &mut self.body_cr, &mut lines);
        self.keep(&lines);
        Ok(Continue.into())
    }

    async fn end_of_body(&mut self) -> Result<ModificationResponse, Self::Error> {
        if std::mem::take(&mut self.body_cr) {
            self.keep(b"\r");
        }
        // Its bytes stay held until the message is reset after its answer.
        let raw = std::mem::take(&mut self.raw);
        let id = self.id();
        let per_user = self.state.models.per_user();
        // Without users' models every recipient is judged by the global
        // one: once. With them, each recipient's model, the judgment least
        // harmful to any kept; a crowd of recipients (a list's expansion)
        // is judged by the global model alone.
        let users = match (per_user, self.crowded) {
            (true, false) => std::mem::take(&mut self.recipients),
            (true, true) => Vec::new(),
            (false, _) => self.recipients.drain(..).take(1).collect(),
        };
        let judged = if self.busy {
            self.state.busy(super::Protocol::Milter, &users, &id)
        } else {
            let max = self.max_message();
            self.state.judge_for_all(users, raw, &id, max).await
        };
        let fields = judged.fields(per_user);
        let spam = matches!(
            judged.stamped.status,
            Status::Verdict {
                verdict: Verdict::Spam,
                ..
            }
        );
        let mut response = ModificationResponse::builder();
        for action in header_actions(&self.forged, fields, self.leading_space, self.hidden) {
            match action {
                HeaderAction::Delete { name, nth } => {
                    response.push(ChangeHeader::new(nth, &name, b""));
                }
                HeaderAction::Insert { at, name, value } => {
                    response.push(InsertHeader::new(at, &name, &value));
                }
            }
        }
        let action = if spam {
            self.state.settings().milter_spam_action
        } else {
            SpamAction::Accept
        };
        let response = match action {
            SpamAction::Accept => response.contin(),
            SpamAction::Quarantine => {
                response.push(Quarantine::new(b"judged spam by bayesmail"));
                response.contin()
            }
            SpamAction::Discard => ModificationResponse::builder().build(Discard),
            SpamAction::Reject => ModificationResponse::builder().build(Replycode::new(
                [5u8, 5, 0],
                [5u16, 7, 1],
                "Message judged spam",
            )),
        };
        self.reset();
        Ok(response)
    }

    async fn abort(&mut self) -> Result<(), Self::Error> {
        self.reset();
        Ok(())
    }
}

/// A connection whose reads time out ([`Timed::timeout`]) and that reads as
/// closed once the server is stopping and no transaction is open:
/// a read is only asked for once the last answer has been written, so a
/// message in flight is answered before the connection ends.
struct Timed {
    conn: BoxConn,
    in_message: Arc<AtomicBool>,
    negotiated: Arc<AtomicBool>,
    in_transaction: Arc<AtomicBool>,
    inside: Duration,
    /// When the MTA last sent something: the deadline is this plus the
    /// timeout that applies now, which the packet's handler may have
    /// changed since (a message ended, options negotiated).
    last: tokio::time::Instant,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// Ready once the server is stopping.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopping: bool,
}

impl Timed {
    fn new(
        conn: BoxConn,
        state: Arc<State>,
        [in_message, negotiated, in_transaction]: [Arc<AtomicBool>; 3],
    ) -> Self {
        let inside = state.settings().read_timeout;
        Timed {
            conn,
            in_message,
            negotiated,
            in_transaction,
            inside,
            last: tokio::time::Instant::now(),
            deadline: Box::pin(tokio::time::sleep(inside)),
            stop: Box::pin(async move {
                let notified = state.stopping.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !state.stopped.load(Ordering::SeqCst) {
                    notified.await;
                }
            }),
            stopping: false,
        }
    }

    /// The read timeout that applies now, if one does: the server's read
    /// timeout inside a message and before the SMTP session begins (an MTA
    /// negotiates and sends CONNECT as soon as it connects), so that a
    /// client that connects and says nothing does not hold a connection
    /// slot for long; none otherwise. The MTA keeps a milter connection
    /// for the whole SMTP session and sends nothing while its client is
    /// slow (NOOPs, a DATA that trickles in, each within Postfix's
    /// `smtpd_timeout`), for as long as the client likes; a milter that
    /// gave up meanwhile would leave that client's message to the MTA's
    /// `milter_default_action`, unjudged, forged fields and all. A peer
    /// that is gone is found by TCP keepalive (or, on a Unix socket, as the
    /// end of the connection).
    fn timeout(&self) -> Option<Duration> {
        let inside = self.in_message.load(Ordering::SeqCst);
        (inside || !self.negotiated.load(Ordering::SeqCst)).then_some(self.inside)
    }
}

impl AsyncRead for Timed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if !this.stopping && this.stop.as_mut().poll(cx).is_ready() {
            this.stopping = true;
        }
        if this.stopping
            && !this.in_message.load(Ordering::SeqCst)
            && !this.in_transaction.load(Ordering::SeqCst)
        {
            // Read as the end of the connection: the MTA goes on without
            // the milter (its milter_default_action).
            return Poll::Ready(Ok(()));
        }
        match this.conn.as_mut().poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.last = tokio::time::Instant::now();
                Poll::Ready(result)
            }
            Poll::Pending => {
                let Some(timeout) = this.timeout() else {
                    return Poll::Pending;
                };
                let due = this.last + timeout;
                if this.deadline.deadline() != due {
                    this.deadline.as_mut().reset(due);
                }
                match this.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the MTA sent nothing for too long",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for Timed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.conn.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.conn.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.conn.as_mut().poll_shutdown(cx)
    }
}

/// Recipients of one message judged each by their own model; a message
/// to more distinct users than this is judged by the global model alone,
/// so that a list's expansion costs one judgment, not hundreds.
pub const JUDGED_RECIPIENTS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Reason;

    #[test]
    fn a_source_route_is_no_part_of_the_recipient() {
        for (given, mailbox) in [
            ("@relay.example:bob@example.org", "bob@example.org"),
            ("@a.example,@b.example:bob@example.org", "bob@example.org"),
            ("bob@example.org", "bob@example.org"),
            ("\"b:ob\"@example.org", "\"b:ob\"@example.org"),
            ("@", "@"),
        ] {
            assert_eq!(without_source_route(given), mailbox, "{given}");
        }
    }

    #[test]
    fn our_names_are_told_as_filter_tells_them() {
        for ours in [
            &b"X-Spam-Flag"[..],
            b"x-spam-status",
            b"X-SPAM-FLAG ",
            b"X-Spam-\rFlag",
            b"X-Spam-Flag\0garbage",
            b"X-Spam-Status\t",
        ] {
            assert!(names_ours(ours), "{ours:?}");
        }
        for not in [
            &b"X-Spam-Flagged"[..],
            b"X-Spam-Level",
            b"Old-X-Spam-Flag",
            b"",
        ] {
            assert!(!names_ours(not), "{not:?}");
        }
    }

    #[test]
    fn forged_fields_are_renamed_bottom_up_and_ours_go_on_top() {
        let forged: Vec<Forged> = [
            ("From", " a@example.org"),
            ("X-Spam-Flag", " YES"),
            ("Subject", " hi"),
            ("x-spam-status", " No"),
            ("X-SPAM-FLAG", " YES"),
        ]
        .iter()
        .enumerate()
        .filter(|(_, (n, _))| names_ours(n.as_bytes()))
        .map(|(i, (n, v))| Forged {
            position: i as u32,
            name: n.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        })
        .collect();
        let status = Status::Unknown(Reason::NoModel);
        let insert = |at: u32, name: &str, value: &str| HeaderAction::Insert {
            at,
            name: name.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
        };
        let delete = |name: &str, nth: u32| HeaderAction::Delete {
            name: name.as_bytes().to_vec(),
            nth,
        };
        let ours = status.fields()[0].1.clone();
        for hidden in [0, 1] {
            assert_eq!(
                header_actions(&forged, status.fields(), true, hidden),
                vec![
                    delete("X-SPAM-FLAG", 2),
                    insert(4 + hidden, "Old-X-SPAM-FLAG", " YES"),
                    delete("x-spam-status", 1),
                    insert(3 + hidden, "Old-x-spam-status", " No"),
                    delete("X-Spam-Flag", 1),
                    insert(1 + hidden, "Old-X-Spam-Flag", " YES"),
                    insert(0, "X-Spam-Status", &format!(" {ours}")),
                ]
            );
        }
        // Without the leading space agreed, values go as they came and
        // ours without one; a spam verdict puts the flag first.
        let spam = Status::Verdict {
            verdict: Verdict::Spam,
            probability: 0.99,
            cutoff: 0.9,
            doubt: None,
        };
        let actions = header_actions(&[], spam.fields(), false, 0);
        let names: Vec<&[u8]> = actions
            .iter()
            .map(|a| match a {
                HeaderAction::Insert { at: 0, name, .. } => name.as_slice(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(names, vec![&b"X-Spam-Status"[..], b"X-Spam-Flag"]);
        assert!(matches!(&actions[1], HeaderAction::Insert { value, .. } if value == b"YES"));
    }

    #[test]
    fn field_bytes_keep_eight_bit_bytes() {
        let header = Header::new(b"Subject", b" \xa3100 \xff");
        assert_eq!(
            field_bytes(&header),
            (b"Subject".to_vec(), b" \xa3100 \xff".to_vec())
        );
    }

    #[test]
    fn lines_take_lf_even_when_a_crlf_is_split_between_chunks() {
        let mut out = Vec::new();
        let mut cr = false;
        lf_lines(b"a\n\tb\r\n c\r", &mut cr, &mut out);
        assert!(cr);
        lf_lines(b"\nd\re\r", &mut cr, &mut out);
        assert!(cr);
        lf_lines(b"f", &mut cr, &mut out);
        assert!(!cr);
        assert_eq!(out, b"a\n\tb\n c\nd\re\rf");
    }

    #[test]
    fn postfix_and_sendmail_hide_fields_others_none() {
        assert_eq!(hidden_fields(b"Postfix 3.7.11"), 1);
        assert_eq!(hidden_fields(b"8.17.1.9"), 8);
        assert_eq!(hidden_fields(b"OpenSMTPD"), 0);
        assert_eq!(hidden_fields(b""), 0);
    }
}
