//! What a reader can say about one message ([`Reader::explain_message`])
//! and about its database ([`Reader::stats`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::{Explanation, Judgment, Reader, Result, TokenWeight};
use crate::decision::Decider;
use crate::features::{Extractor, grams};
use crate::message;
use crate::model::Params;

/// One message judged and explained.
#[derive(Debug)]
pub struct Explained {
    /// Its score and verdict.
    pub judgment: Judgment,
    /// Why: each view's part, the strongest features, the metadata.
    pub explanation: Explanation,
    /// The byte 4-grams of the message with their buckets, sorted by
    /// bucket: what each byte feature stands for.
    grams: Vec<(u32, [u8; 4])>,
}

impl Explained {
    /// The 4-grams of this message behind a byte feature; `None` for a
    /// word.
    pub fn grams_of(&self, t: &TokenWeight) -> Option<Vec<&[u8; 4]>> {
        let bucket = t.bucket?;
        Some(
            self.grams
                .iter()
                .filter(|(b, _)| *b == bucket)
                .map(|(_, g)| g)
                .collect(),
        )
    }
}

/// What a database holds, as its model says.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// The directory.
    pub database: String,
    /// Ham learned.
    pub ham_messages: u64,
    /// Spam learned.
    pub spam_messages: u64,
    /// Features in the model.
    pub vocabulary: usize,
    /// Bytes of the directory's files.
    pub size_on_disk_bytes: u64,
    /// Bytes of the model file.
    pub model_bytes: u64,
    /// This bayesmail's version.
    pub bayesmail_version: &'static str,
    /// The version that wrote the model.
    pub model_written_by: String,
    /// The store's format.
    pub store_format_version: u32,
    /// The tokenizer version the model's counts were made with: this
    /// bayesmail's ([`crate::vocab::TOKENIZER_VERSION`]), or an older one it reads until
    /// the model is compiled again.
    pub tokenizer_version: u32,
    /// The model's parameters, as in force at its size
    /// ([`Params::at_size`]).
    pub params: Params,
    /// Messages the stacker was fitted on.
    pub calibrated_on: usize,
    /// The stacker's weight of each view and of the metadata: how much
    /// each counts for this user's mail.
    pub weights: BTreeMap<&'static str, f64>,
    /// When a mail client's move last taught this database (the learn
    /// log's last `imap` line), as `YYYY-MM-DDTHH:MM:SSZ`; `None` if never.
    pub last_learned_from_imap: Option<String>,
    /// Seconds since then.
    pub last_learned_from_imap_seconds_ago: Option<u64>,
    /// When anything last taught this database (the learn log's last
    /// line), as `YYYY-MM-DDTHH:MM:SSZ`; `None` if never.
    pub last_learned: Option<String>,
    /// Seconds since then.
    pub last_learned_seconds_ago: Option<u64>,
    /// Where that came from: `learn`, `imap`, `spamd` (a mail client's move
    /// told through spamc says so) or `http`.
    pub last_learned_from: Option<String>,
    /// Messages a learn or unlearn left for the next writer (see
    /// [`super::pending`]).
    pub pending: super::pending::Waiting,
    /// The directory's permission bits when others may read it (the
    /// counts name every correspondent).
    #[serde(skip)]
    pub readable_by_others: Option<u32>,
}

/// Bytes of the files under `path` (symlinks not followed).
fn size(path: &Path) -> u64 {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| size(&e.path())).sum())
            .unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

impl Reader {
    /// Judges `raw` with `decider` and says why.
    pub fn explain_message(
        &self,
        raw: &[u8],
        decider: &Decider,
    ) -> std::result::Result<Explained, message::Error> {
        let features = Extractor::new().extract(raw)?;
        let classifier = self.classifier();
        Ok(Explained {
            judgment: classifier.judge(&features, decider),
            explanation: classifier.explain(&features),
            // From the bytes the features were taken from.
            grams: grams::grams(&message::canonical(raw)),
        })
    }

    /// What the database holds.
    pub fn stats(&self) -> Result<Stats> {
        let classifier = self.classifier();
        let paths = self.paths();
        let h = classifier.header();
        let readable_by_others = {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(paths.dir())
                .ok()
                .map(|m| m.permissions().mode() & 0o777)
                .filter(|mode| mode & 0o044 != 0)
        };
        let imap = super::learnlog::last_from(paths, super::Origin::Imap);
        let last = super::learnlog::last(paths);
        let ago = |t: std::time::SystemTime| {
            std::time::SystemTime::now()
                .duration_since(t)
                .unwrap_or_default()
                .as_secs()
        };
        Ok(Stats {
            last_learned: last.as_ref().map(|(t, _)| super::learnlog::utc(*t)),
            last_learned_seconds_ago: last.as_ref().map(|(t, _)| ago(*t)),
            last_learned_from: last.map(|(_, origin)| origin),
            last_learned_from_imap: imap.map(super::learnlog::utc),
            last_learned_from_imap_seconds_ago: imap.map(|t| {
                std::time::SystemTime::now()
                    .duration_since(t)
                    .unwrap_or_default()
                    .as_secs()
            }),
            database: paths.dir().display().to_string(),
            ham_messages: h.totals.messages[0],
            spam_messages: h.totals.messages[1],
            vocabulary: classifier.vocabulary(),
            size_on_disk_bytes: size(paths.dir()),
            model_bytes: size(&paths.snapshot()),
            bayesmail_version: env!("CARGO_PKG_VERSION"),
            model_written_by: h.version.clone(),
            store_format_version: crate::store::FORMAT_VERSION,
            tokenizer_version: classifier.tokenizer_version(),
            params: h.params.at_size(h.totals.messages),
            calibrated_on: h.calibrated_on,
            weights: crate::fit::Inputs::names()
                .into_iter()
                .zip(h.calibrator.weights)
                .filter(|(name, _)| h.params.logistic || *name != "logistic")
                .collect(),
            pending: super::pending::waiting(paths),
            readable_by_others,
        })
    }
}
