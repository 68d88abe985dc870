//! The shared vocabulary: names and numbers that every layer agrees on and
//! that depend on nothing else. The views a feature can belong to, the
//! typed feature itself ([`Feature`]: a word token, or a byte-view bucket
//! by number) and its view, the metadata vector's names and length, the
//! token namespaces the views are told by, and the version of the feature
//! rules.
//!
//! Every other module may use this one; it uses none of them, so putting a
//! name here never makes two modules depend on each other.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Version of the feature rules (word tokens and the byte view's n-grams).
/// Any change that alters the features of some message must bump it, and
/// say here whether counts of the versions before can still be read
/// ([`OLDEST_READABLE_TOKENIZER`]).
///
/// Version 4 cuts runs of Han, kana, Hangul, Thai, Lao, Khmer and Myanmar
/// into pairs of characters, where version 3 took UAX #29's words (single
/// Han characters and kana, whole Katakana and Hangul words, single Thai
/// clusters). Every other token is the same, so a database of version 3 is
/// read and learned into, and records version 4 when next written: its
/// old tokens of those scripts stay counted (apart from a lone character,
/// no message makes them again; `prune` drops them in time), and a message
/// learned under version 3 with such text, unlearned now, takes back pairs
/// that were never counted. Those counts go to zero and are reported as
/// not taken back exactly (see [`crate::store`]), as for a pruned word.
///
/// Version 5 reads only the first 1,000 fields of each header and adds
/// `HDR:too-many-fields` when there are more. No real mail has that many,
/// so every other message's tokens are as under version 4, and a database
/// of version 4 (or 3) is read and learned into as above.
pub const TOKENIZER_VERSION: u32 = 5;

/// The oldest tokenizer version whose stored counts (in the count store
/// and in the model file) this version reads: see [`TOKENIZER_VERSION`].
/// Older and newer versions are refused.
pub const OLDEST_READABLE_TOKENIZER: u32 = 3;

/// Whether counts made under tokenizer version `version` can be read.
pub fn readable_tokenizer(version: u32) -> bool {
    (OLDEST_READABLE_TOKENIZER..=TOKENIZER_VERSION).contains(&version)
}

/// Prefix of URL host tokens.
pub const URL_NAMESPACE: &str = "URL:";

/// One view of a message: its own Bernoulli naive Bayes over its own binary
/// features, with its own tempered evidence. Every feature belongs to
/// exactly one view ([`Feature::view`]), so the counts of all views live in
/// one store and one snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum View {
    /// Word tokens of the header fields (namespaced: `SUBJ:`, `FROM:`,
    /// `RCVD:`, …).
    Header,
    /// Word tokens of the body text, and link hosts (`URL:`).
    Body,
    /// Hashed byte 4-grams of the raw header block
    /// ([`crate::features::grams`]): robust to obfuscation and to broken
    /// MIME, which the word views miss.
    Bytes,
}

/// Number of views.
pub const VIEWS: usize = 3;

impl View {
    /// Every view, in the order of evidence and stacker inputs.
    pub const ALL: [View; VIEWS] = [View::Header, View::Body, View::Bytes];

    /// Its index in [`View::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            View::Header => "header",
            View::Body => "body",
            View::Bytes => "bytes",
        }
    }
}

/// Bits of a bucket number: 2^18 buckets.
pub const BUCKET_BITS: u32 = 18;

/// The hash of a token: FNV-1a over its bytes with a final mix. Part of
/// the file formats: the model file's token table is laid out by it
/// (`store::snapshot`), and the online discriminative view's weights are
/// kept by [`word_bucket`]. It must never change without a new version of
/// both.
pub fn token_hash(token: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in token {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^ (h >> 32)
}

/// The bucket (below 2^[`BUCKET_BITS`]) of a word token's weight in the
/// online discriminative view ([`crate::model::logistic`]): the top bits
/// of its [`token_hash`].
///
/// ```
/// use bayesmail::vocab::{is_bucket, word_bucket};
/// assert!(is_bucket(word_bucket("SUBJ:lunch")));
/// assert_ne!(word_bucket("SUBJ:lunch"), word_bucket("lunch"));
/// ```
pub fn word_bucket(token: &str) -> u32 {
    (token_hash(token.as_bytes()) >> (64 - BUCKET_BITS)) as u32
}

/// Whether `n` is a bucket of the byte view: below 2^[`BUCKET_BITS`]. A
/// larger number in [`Feature::Gram`] stands for nothing: extraction never
/// makes one, scoring and training leave it out, and stores refuse it.
pub fn is_bucket(n: u32) -> bool {
    n < 1 << BUCKET_BITS
}

/// One binary feature of a message, as every stage from extraction to the
/// model file handles it: a word token, or a bucket of the byte view by its
/// number. A bucket is never spelled as a name on the way; only a file
/// format that keys every feature by a name spells one (`store`).
///
/// Features order as their owned form does: words in byte order, then
/// buckets in number order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature<'a> {
    /// A word token of the header or the body view (which, its namespace
    /// tells: see [`Feature::view`]).
    Word(&'a str),
    /// A bucket of the byte view's hashed 4-grams
    /// ([`crate::features::grams`]), below 2^[`BUCKET_BITS`].
    Gram(u32),
    /// The weight of a bucket of the online discriminative view
    /// ([`crate::model::logistic`]), below 2^[`BUCKET_BITS`]: no view of
    /// naive Bayes, its counts are the weight's two counters.
    Weight(u32),
}

impl Feature<'_> {
    /// The naive Bayes view the feature belongs to: a bucket, the byte
    /// view's; a word, the header view if it has a header field's
    /// namespace (a non-empty run of upper-case ASCII letters before a
    /// `:`, other than `URL:`), else the body view; a weight, none.
    ///
    /// ```
    /// use bayesmail::vocab::{Feature, View};
    /// assert_eq!(Feature::Word("SUBJ:cheap").view(), Some(View::Header));
    /// assert_eq!(Feature::Word("URL:example.com").view(), Some(View::Body));
    /// assert_eq!(Feature::Word("cheap").view(), Some(View::Body));
    /// assert_eq!(Feature::Gram(0xbadf).view(), Some(View::Bytes));
    /// assert_eq!(Feature::Weight(0xbadf).view(), None);
    /// ```
    pub fn view(self) -> Option<View> {
        match self {
            Feature::Word(word) => Some(word_view(word)),
            Feature::Gram(_) => Some(View::Bytes),
            Feature::Weight(_) => None,
        }
    }

    /// The owned form.
    pub fn into_owned(self) -> FeatureBuf {
        match self {
            Feature::Word(word) => FeatureBuf::Word(word.to_owned()),
            Feature::Gram(bucket) => FeatureBuf::Gram(bucket),
            Feature::Weight(bucket) => FeatureBuf::Weight(bucket),
        }
    }
}

/// The view of a word token: see [`Feature::view`].
pub fn word_view(word: &str) -> View {
    // A namespace is upper-case letters up to the first ':': stop at the
    // first byte that is not one, not at the first ':' (a body word can be
    // long and have none).
    let upper = word.bytes().take_while(u8::is_ascii_uppercase).count();
    let namespace =
        (upper > 0 && word.as_bytes().get(upper) == Some(&b':')).then(|| &word[..upper]);
    let url = URL_NAMESPACE.trim_end_matches(':');
    match namespace {
        Some(ns) if ns != url => View::Header,
        _ => View::Body,
    }
}

/// A feature as people read it: a word as it is, a bucket as `bytes:`
/// and its number in five hex digits, a weight as `weight:` and its
/// bucket's.
///
/// ```
/// use bayesmail::vocab::Feature;
/// assert_eq!(Feature::Word("SUBJ:cheap").to_string(), "SUBJ:cheap");
/// assert_eq!(Feature::Gram(0x3_a0f1).to_string(), "bytes:3a0f1");
/// assert_eq!(Feature::Weight(0x3_a0f1).to_string(), "weight:3a0f1");
/// ```
impl fmt::Display for Feature<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Feature::Word(word) => f.write_str(word),
            Feature::Gram(bucket) => write!(f, "bytes:{bucket:05x}"),
            Feature::Weight(bucket) => write!(f, "weight:{bucket:05x}"),
        }
    }
}

/// The owned form of a [`Feature`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FeatureBuf {
    /// A word token.
    Word(String),
    /// A bucket of the byte view.
    Gram(u32),
    /// A weight of the online discriminative view.
    Weight(u32),
}

impl FeatureBuf {
    /// The borrowed form.
    pub fn as_feature(&self) -> Feature<'_> {
        match self {
            FeatureBuf::Word(word) => Feature::Word(word),
            FeatureBuf::Gram(bucket) => Feature::Gram(*bucket),
            FeatureBuf::Weight(bucket) => Feature::Weight(*bucket),
        }
    }

    /// Its view ([`Feature::view`]).
    pub fn view(&self) -> Option<View> {
        self.as_feature().view()
    }
}

impl From<Feature<'_>> for FeatureBuf {
    fn from(feature: Feature<'_>) -> FeatureBuf {
        feature.into_owned()
    }
}

impl fmt::Display for FeatureBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_feature().fmt(f)
    }
}

/// Number of metadata features.
pub const METADATA_LEN: usize = 12;

/// Names of the metadata features, in vector order. Counts are taken as
/// ln(1 + n) so the Gaussian model sees a roughly symmetric spread.
///
/// | name | value |
/// |---|---|
/// | `log_size` | ln(1 + size in bytes of the message's canonical form: line ends counted as one byte, volatile fields and trailing blank lines left out) |
/// | `log_text_chars` | ln(1 + characters of decoded text) |
/// | `log_urls` | ln(1 + URLs in text and HTML link targets) |
/// | `log_url_hosts` | ln(1 + distinct URL hosts) |
/// | `upper_frac` | uppercase ASCII letters / ASCII letters in subject and text (0 if none) |
/// | `nonascii_frac` | non-ASCII characters / non-space characters in text (0 if none) |
/// | `html_only` | 1 if there is an HTML part and no plain-text part, else 0 |
/// | `log_attachments` | ln(1 + non-text parts) |
/// | `log_recipients` | ln(1 + addresses in To and Cc) |
/// | `log_received` | ln(1 + Received headers) |
/// | `hour_sin` | sin(2π·h/24), h the UTC hour of the Date header (0 if no valid date) |
/// | `hour_cos` | cos(2π·h/24) (0 if no valid date) |
pub const METADATA_NAMES: [&str; METADATA_LEN] = [
    "log_size",
    "log_text_chars",
    "log_urls",
    "log_url_hosts",
    "upper_frac",
    "nonascii_frac",
    "html_only",
    "log_attachments",
    "log_recipients",
    "log_received",
    "hour_sin",
    "hour_cos",
];

/// The header fields `filter` adds (first in the message) and renames
/// where a message already holds them.
pub const OUR_FIELDS: [&str; 2] = ["X-Spam-Flag", "X-Spam-Status"];

/// What `filter` puts in front of the name of a field of ours that was
/// already in the message (the convention of `formail -i`).
pub const RENAMED_PREFIX: &str = "Old-";

/// Whether a line starting with `start` (its CRs left out: maildrop deletes
/// them before it matches) names a field of ours: `Some(true)` if it does,
/// `Some(false)` if it cannot, `None` if more bytes are needed. Any case; a
/// space, a tab or a NUL ends a name as `:` does (Dovecot reads a NUL so).
/// The one rule for what is ours: `filter`'s renaming, the milter's and a
/// message's identity ask it.
pub fn names_our_field(start: &[u8]) -> Option<bool> {
    let mut undecided = false;
    for name in OUR_FIELDS {
        let name = name.as_bytes();
        let n = start.len().min(name.len());
        if !start[..n].eq_ignore_ascii_case(&name[..n]) {
            continue;
        }
        match start.get(name.len()) {
            None => undecided = true,
            Some(b':' | b' ' | b'\t' | b'\0') => return Some(true),
            Some(_) => {}
        }
    }
    if undecided { None } else { Some(false) }
}

/// A digest identifying a message for the learned-message registry.
pub type Digest = [u8; 32];

#[cfg(test)]
mod tests {
    use super::*;

    /// A word's view is its namespace's, by the definition: a header
    /// field's namespace is a non-empty run of upper-case letters before
    /// the first ':', and `URL:` is the body's.
    #[test]
    fn views_by_definition() {
        let by_definition = |f: &str| {
            let ns = f.find(':').map(|p| &f[..p]);
            match ns {
                Some(ns) if !ns.is_empty() && ns.bytes().all(|b| b.is_ascii_uppercase()) => {
                    if ns == "URL" {
                        View::Body
                    } else {
                        View::Header
                    }
                }
                _ => View::Body,
            }
        };
        let words = [
            "",
            ":",
            "A:",
            "SUBJ:x",
            "SUBJ:a:b",
            "Subj:x",
            "SUBJx",
            "SUBJ",
            "URL:x.example",
            "URLS:x",
            "UR:x",
            "a:B:c",
            "AB:CD:e",
            "ÉT:x",
            "\u{1}0abcd",
            "x\u{1}",
            "free",
            "FROM::",
            "FROM1:x",
        ];
        for w in words {
            assert_eq!(Feature::Word(w).view(), Some(by_definition(w)), "{w:?}");
        }
        for b in [0, 0xabcd, (1 << BUCKET_BITS) - 1] {
            assert_eq!(Feature::Gram(b).view(), Some(View::Bytes));
        }
    }

    #[test]
    fn features_order_words_first_and_own_themselves() {
        let mut all = [
            FeatureBuf::Gram(16),
            FeatureBuf::Word("b".into()),
            FeatureBuf::Gram(1),
            FeatureBuf::Word("\u{1}00000".into()),
            FeatureBuf::Word("a".into()),
        ];
        all.sort();
        let borrowed: Vec<Feature> = all.iter().map(FeatureBuf::as_feature).collect();
        assert_eq!(
            borrowed,
            [
                Feature::Word("\u{1}00000"),
                Feature::Word("a"),
                Feature::Word("b"),
                Feature::Gram(1),
                Feature::Gram(16),
            ]
        );
        assert!(borrowed.is_sorted());
        for f in borrowed {
            assert_eq!(FeatureBuf::from(f).as_feature(), f);
        }
        assert!(is_bucket((1 << BUCKET_BITS) - 1));
        assert!(!is_bucket(1 << BUCKET_BITS));
    }
}
