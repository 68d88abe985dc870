//! bayesmail: a Bayesian spam filter for real mail.
//!
//! Data flows one way: [`mailbox`] finds raw messages, [`message`] parses and
//! decodes them, [`features`] (built on [`tokenize`]) turns a parsed message
//! into the binary bag of words and the numeric metadata every later stage
//! uses, [`model`] and [`decision`] are the maths, [`store`] keeps the
//! counts and the compiled model, and [`db`] is the database the commands
//! (and a daemon) open. The command-line front end lives in the binary and
//! only calls into this library.
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
//! - `model`: Bernoulli and Gaussian naive Bayes, counts and deltas
//! - `decision`: calibration, costs and verdicts
//! - `fit`: the stacker's fit by cross-validation
//! - `store`: the count store, the compiled model and its journal
//! - `db`: the database directory, its readers and its writers
//! - `eval`: metrics and evaluation protocols
//! - `config`: the configuration file
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
pub mod store;
pub mod tokenize;
pub mod vocab;
