//! Integration tests: the command line as a user runs it, the mailbox
//! readers against the public corpus, golden token files for the sample
//! corpus, and property tests over the whole feature pipeline.
//!
//! Tests that need the public corpus find it through `BAYESMAIL_CORPUS` or
//! `corpora/spamassassin`. Without it they say so and pass, unless `CI` or
//! `BAYESMAIL_REQUIRE_CORPUS` is set, in which case they fail: in CI they
//! must run.

mod cli;
mod cli_finish;
mod common;
mod compact;
mod corpus;
mod delivery;
mod engine;
mod golden;
mod hostile;
mod hostile_message;
mod hostile_scan;
mod hostile_store;
mod identity;
mod imap;
mod journal;
mod layers;
mod learning;
mod pending;
mod promises;
mod properties;
mod prune;
mod reader;
mod recipes;
mod review_speed;
mod scale;
mod scripts;
mod serve;
mod serve_exim;
mod serve_http;
mod serve_load;
mod serve_milter;
mod serve_redis;
mod serve_sendmail;
mod serve_spamd;
mod split;
mod train;
mod traps;
mod upgrade;
