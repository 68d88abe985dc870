//! `filter` where the environment meets the command line: a `filter`
//! command line means what clap makes of it, environment included.

use std::process::Command;

use crate::common::{Db, run_with_stdin, stderr, strip_ours};

const MESSAGE: &[u8] = b"Subject: hello\n\nA line of text.\n";

/// clap reads `BAYESMAIL_DB` and `BAYESMAIL_CONFIG` for the level (program
/// or `filter`) where the option was not given and refuses an empty value
/// there, even when the option is given at the other level: such a command
/// line is a configuration error, the message passed on unscored, never
/// judged with the option's value.
#[test]
fn an_empty_environment_variable_beside_its_option_is_refused_as_clap_refuses_it() {
    let db = Db::new();
    db.train_sample();
    let dir = db.dir();
    let dir = dir.to_str().unwrap();
    let config = db.path("config.toml");
    std::fs::write(&config, "").unwrap();
    let config = config.to_str().unwrap();
    let db_option = format!("--db={dir}");
    let config_option = format!("--config={config}");
    let cases: [(&[&str], &str, &str); 6] = [
        (&["--db", dir, "filter"], "BAYESMAIL_DB", "--db <DIR>"),
        (&["filter", "--db", dir], "BAYESMAIL_DB", "--db <DIR>"),
        (&[&db_option, "filter"], "BAYESMAIL_DB", "--db <DIR>"),
        (
            &["--config", config, "filter", "--db", dir],
            "BAYESMAIL_CONFIG",
            "--config <FILE>",
        ),
        (
            &["--db", dir, "filter", "--config", config],
            "BAYESMAIL_CONFIG",
            "--config <FILE>",
        ),
        (
            &["--db", dir, "filter", &config_option],
            "BAYESMAIL_CONFIG",
            "--config <FILE>",
        ),
    ];
    for (args, variable, option) in cases {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(args)
            .env_remove("BAYESMAIL_DB")
            .env_remove("BAYESMAIL_CONFIG")
            .env(variable, "");
        let out = run_with_stdin(cmd, MESSAGE);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let (restored, status, _) = strip_ours(&out.stdout);
        assert_eq!(restored, MESSAGE, "{args:?}");
        assert!(
            status.starts_with("Unknown, reason=config-error,"),
            "{args:?} {variable}=\"\": {status}"
        );
        let expected = format!("a value is required for '{option}' but none was supplied");
        assert!(
            stderr(&out).contains(&expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
