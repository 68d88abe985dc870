//! The verdict a delivered message carries: [`Status`], the fields that
//! say it (`X-Spam-Status`, `X-Spam-Flag`), and [`Database::status`] /
//! [`Reader::status`], which judge a raw message and never fail: whatever
//! goes wrong becomes a status with a [`Reason`], so the message can still
//! be passed on.

use super::shared::SharedModel;
use super::{Database, Error, Judgment, Reader};
use crate::decision::{Decider, Doubt, Verdict};
use crate::features::Extractor;
use crate::store;

/// Why a message got no verdict. Its name goes into
/// `X-Spam-Status: Unknown, reason=NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The configuration file or a setting is invalid.
    Config,
    /// No model has been trained into the database.
    NoModel,
    /// The model was written by another format or tokenizer version.
    ModelVersion,
    /// The model file cannot be read or is damaged.
    ModelUnreadable,
    /// The message is larger than the size cap.
    TooLarge,
    /// The message cannot be parsed at all (e.g. it is empty).
    Unparseable,
    /// A bug: judging panicked.
    Internal,
    /// The shared store that holds the counts (Redis) did not answer in
    /// time or refused.
    StoreUnavailable,
    /// The server held as many bytes of messages as it may.
    Busy,
}

impl Reason {
    /// Its name in `X-Spam-Status`.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Config => "config-error",
            Reason::NoModel => "no-model",
            Reason::ModelVersion => "model-version",
            Reason::ModelUnreadable => "model-unreadable",
            Reason::TooLarge => "too-large",
            Reason::Unparseable => "unparseable",
            Reason::Internal => "internal-error",
            Reason::StoreUnavailable => "store-unavailable",
            Reason::Busy => "busy",
        }
    }

    /// The reason a reader that cannot open gives.
    pub fn of(err: &Error) -> Reason {
        match err {
            Error::NoModel(_) => Reason::NoModel,
            Error::Store(store::Error::Version { .. }) => Reason::ModelVersion,
            Error::Store(store::Error::Redis { .. }) => Reason::StoreUnavailable,
            _ => Reason::ModelUnreadable,
        }
    }
}

/// A verdict with its probability and the spam cutoff, or why there is none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// Judged.
    Verdict {
        /// The verdict.
        verdict: Verdict,
        /// P(spam).
        probability: f64,
        /// The probability above which a message is spam.
        cutoff: f64,
        /// Why it is unsure whatever the probability, if it is.
        doubt: Option<Doubt>,
    },
    /// Not judged.
    Unknown(Reason),
}

impl Status {
    /// The header fields that say it, in order.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let version = env!("CARGO_PKG_VERSION");
        match *self {
            Status::Verdict {
                verdict,
                probability,
                cutoff,
                doubt,
            } => {
                let word = match verdict {
                    Verdict::Spam => "Yes",
                    Verdict::Ham => "No",
                    Verdict::Unsure => "Unsure",
                };
                let reason = doubt.map(|d| format!(", reason={d}")).unwrap_or_default();
                let status = format!(
                    "{word}, probability={probability:.6}, cutoff={cutoff:.6}{reason}, version={version}"
                );
                let mut fields = Vec::with_capacity(2);
                if verdict == Verdict::Spam {
                    fields.push(("X-Spam-Flag", "YES".to_string()));
                }
                fields.push(("X-Spam-Status", status));
                fields
            }
            Status::Unknown(reason) => vec![(
                "X-Spam-Status",
                format!("Unknown, reason={}, version={version}", reason.name()),
            )],
        }
    }
}

/// A delivered message judged: its status and, when judged, its
/// calibrated log-odds; when not, why, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped {
    /// The verdict and its fields, or why there is none.
    pub status: Status,
    /// The calibrated log-odds, when judged.
    pub log_odds: Option<f64>,
    /// Why there is no verdict, in words.
    pub why: Option<String>,
}

impl Stamped {
    /// The verdict of `judgment`, by `decider`'s cutoffs.
    pub fn judged(judgment: &Judgment, decider: &Decider) -> Stamped {
        Stamped {
            status: Status::Verdict {
                verdict: judgment.verdict,
                probability: judgment.score.probability,
                cutoff: decider.costs.cutoffs().1,
                doubt: judgment.doubt,
            },
            log_odds: Some(judgment.score.log_odds),
            why: None,
        }
    }

    /// No verdict, for `reason`, said as `why`.
    pub fn unknown(reason: Reason, why: String) -> Stamped {
        Stamped {
            status: Status::Unknown(reason),
            log_odds: None,
            why: Some(why),
        }
    }
}

/// A raw message read once for judging by several models (one message to
/// several users): its features, or why it could not be parsed.
#[derive(Debug)]
pub struct Parsed(std::result::Result<crate::features::Features, String>);

impl Parsed {
    /// The message `raw` as delivered: the whole of it (what a delivery
    /// agent hands over is one message, whatever its body holds: agents
    /// pass body lines starting with "From " unescaped, so a line that
    /// looks like an mbox separator is the sender's to write, and judging
    /// only what comes before it would let a spam hide behind a harmless
    /// first part).
    pub fn of(raw: &[u8]) -> Parsed {
        Parsed(
            Extractor::new()
                .extract(raw)
                .map_err(|err| format!("cannot parse the message: {err}")),
        )
    }

    /// Its features, or the verdict-less stamp of a message that could not
    /// be parsed.
    fn features(&self) -> std::result::Result<&crate::features::Features, Stamped> {
        self.0
            .as_ref()
            .map_err(|why| Stamped::unknown(Reason::Unparseable, why.clone()))
    }
}

impl Reader {
    /// Judges the raw message `raw` as delivered ([`Parsed::of`]).
    pub fn stamp(&self, raw: &[u8], decider: &Decider) -> Stamped {
        self.stamp_parsed(&Parsed::of(raw), decider)
    }

    /// [`Reader::stamp`] of a message already read.
    pub fn stamp_parsed(&self, parsed: &Parsed, decider: &Decider) -> Stamped {
        match parsed.features() {
            Ok(features) => Stamped::judged(&self.classifier().judge(features, decider), decider),
            Err(stamped) => stamped,
        }
    }

    /// [`Reader::stamp`]'s status, and why there is none in words.
    pub fn status(&self, raw: &[u8], decider: &Decider) -> (Status, Option<String>) {
        let stamped = self.stamp(raw, decider);
        (stamped.status, stamped.why)
    }
}

/// Whether a user's model that has learned `messages` (ham, spam) judges
/// for its user rather than the global model: once it holds at least
/// `min_messages` of each class. The one rule, for models in Redis and in
/// directories.
pub fn user_model_judges(messages: [u64; 2], min_messages: u64) -> bool {
    messages[0].min(messages[1]) >= min_messages
}

/// Judges a message read as delivered ([`Parsed::of`], see
/// [`Reader::stamp`]) with models in Redis: with `user`'s model when it
/// has learned at least the given number of messages of each class, else
/// with `global` (also when the user's cannot be read: why is returned,
/// for the log). Also says whether the user's model judged. Never fails:
/// Redis down or slow gives [`Reason::StoreUnavailable`], a global model
/// that has not learned both classes (a Redis database or prefix that
/// holds nothing, say) [`Reason::NoModel`], as a directory without a
/// model does.
pub fn stamp_shared_parsed(
    global: &SharedModel,
    user: Option<(&SharedModel, u64)>,
    parsed: &Parsed,
    decider: &Decider,
) -> (Stamped, bool, Option<String>) {
    let features = match parsed.features() {
        Ok(features) => features,
        Err(stamped) => return (stamped, false, None),
    };
    let failed = |err: store::Error| {
        let err = Error::from(err);
        Stamped::unknown(Reason::of(&err), err.to_string())
    };
    let mut unread = None;
    if let Some((model, min_messages)) = user {
        match model.judge(features, decider) {
            Ok((j, messages)) if user_model_judges(messages, min_messages) => {
                return (Stamped::judged(&j, decider), true, None);
            }
            Ok(_) => {}
            // Redis out of reach: the global model is no nearer.
            Err(err) if crate::store::redis::out_of_reach(&err) => {
                return (failed(err), false, None);
            }
            Err(err) => unread = Some(err.to_string()),
        }
    }
    let stamped = match global.judge(features, decider) {
        Ok((_, messages)) if messages.contains(&0) => Stamped::unknown(
            Reason::NoModel,
            format!(
                "no model in {}: {}",
                global.store().shown(),
                super::train::missing_class(messages).unwrap_or_default()
            ),
        ),
        Ok((j, _)) => Stamped::judged(&j, decider),
        Err(err) => return (failed(err), false, None),
    };
    (stamped, false, unread)
}

impl Database {
    /// Opens a reader and judges `raw` with it (see [`Reader::status`]); a
    /// reader that cannot open gives a status with its [`Reason`].
    pub fn status(&self, raw: &[u8], decider: &Decider) -> (Status, Option<String>) {
        match self.reader() {
            Ok(reader) => reader.status(raw, decider),
            Err(err) => (Status::Unknown(Reason::of(&err)), Some(err.to_string())),
        }
    }
}
