//! bayesmail: a Bayesian spam filter for real mail.
//!
//! Data flows one way: [`mailbox`] finds raw messages, [`message`] parses and
//! decodes them, [`features`] (built on [`tokenize`]) turns a parsed message
//! into the binary bag of words and the numeric metadata every later stage
//! uses ([`sources`] reads them from mailboxes in parallel batches),
//! [`model`] and [`decision`] are the maths, [`store`] keeps the counts and
//! the compiled model, [`db`] is the database and the engine's calls
//! (train, learn, unlearn, scan, judge), [`eval`] measures, and [`serve`]
//! is the daemon mail servers call. The command-line front end lives in the
//! binary: each command is its arguments, one call into this library, and
//! printing.
//!
//! Open a database, teach it, judge a message:
//!
//! ```
//! use std::time::Duration;
//! use bayesmail::db::{Database, Labelled};
//! use bayesmail::decision::Decider;
//! use bayesmail::features::Extractor;
//! use bayesmail::model::{Label, Params};
//!
//! let dir = tempfile::tempdir()?;
//! let db = Database::new(dir.path().join("db"));
//! let mut extractor = Extractor::new();
//! let mut labelled = |raw: &[u8], label| -> Result<Labelled, Box<dyn std::error::Error>> {
//!     let (features, identity) = extractor.read(raw)?;
//!     Ok(Labelled { features, identity, label })
//! };
//! let mail = [
//!     labelled(b"Subject: minutes\n\nThe minutes of Tuesday's meeting.\n", Label::Ham)?,
//!     labelled(b"Subject: cheap pills\n\nBuy cheap pills now!\n", Label::Spam)?,
//! ];
//! db.learn(&mail, Duration::from_secs(5), 1 << 20, Params::default())?;
//!
//! let reader = db.reader()?;
//! let decider = Decider { costs: Default::default(), min_known: 1, min_per_class: 1 };
//! let message = Extractor::new().extract(b"Subject: pills\n\nCheap pills!\n")?;
//! let judgment = reader.classifier().judge(&message, &decider);
//! assert!(judgment.score.probability > 0.5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layers, from the bottom up:
//! - `vocab`: names and numbers every layer agrees on
//! - `fsutil`: opening and creating files safely
//! - `sanitize`: untrusted text made safe for a terminal
//! - `mailbox`: Maildirs, mboxes, trees of files
//! - `message`: MIME parsing and decoding, a message's identity
//! - `headers`: `filter`'s header fields and the renaming of forged ones
//! - `tokenize`: the word tokenizer
//! - `features`: a message's binary features and metadata
//! - `sources`: reading messages from mailboxes and files, in parallel batches
//! - `model`: Bernoulli and Gaussian naive Bayes, counts and deltas
//! - `decision`: calibration, costs and verdicts
//! - `fit`: the stacker's fit by cross-validation
//! - `store`: the count store, the compiled model and its journal
//! - `db`: the database directory, its readers and its writers
//! - `eval`: metrics and evaluation protocols
//! - `config`: the configuration file
//! - `serve`: the resident server (milter, spamd's protocol, HTTP), a model per user
//!
//! A module uses only those above it in this list (a test holds it).

pub mod config;
pub mod db;
pub mod decision;
pub mod eval;
pub mod features;
pub mod fit;
pub mod fsutil;
pub mod headers;
pub mod mailbox;
pub mod message;
pub mod model;
pub mod sanitize;
pub mod serve;
pub mod sources;
pub mod store;
pub mod tokenize;
pub mod vocab;
