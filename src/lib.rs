//! bayesmail: a Bayesian spam filter for real mail.
//!
//! Data flows one way: [`mailbox`] finds raw messages, [`message`] parses and
//! decodes them, [`features`] (built on [`tokenize`]) turns a parsed message
//! into the binary bag of words and the numeric metadata every later stage
//! uses. The command-line front end lives in the binary and only calls into
//! this library.

pub mod classifier;
pub mod config;
pub mod db;
pub mod decision;
pub mod eval;
pub mod features;
pub mod fsutil;
pub mod headers;
pub mod mailbox;
pub mod message;
pub mod model;
pub mod sanitize;
pub mod store;
pub mod tokenize;
pub mod trainer;
