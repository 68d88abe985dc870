//! `bayesmail serve` as a process, whatever the protocol: where it listens
//! and what it refuses, its Unix sockets, its stop on SIGTERM, and the
//! systemd unit in contrib/.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::process::{Child, Command, Stdio};

use crate::common::*;

/// `bayesmail serve ARGS` on `db`, started; returns the child and the
/// addresses it says it listens on, once it listens on all `n`.
pub fn start_serve(db: &Db, args: &[&str], n: usize) -> (Child, Vec<String>) {
    let (child, lines) = start_watched(db, args);
    let bound = (0..n)
        .map(|_| {
            let line = wait_for(&lines, " listening on ");
            line.split(" listening on ").nth(1).unwrap().to_string()
        })
        .collect();
    (child, bound)
}

/// Stops `child` with SIGTERM and returns its exit status.
pub fn stop(mut child: Child) -> std::process::ExitStatus {
    // SAFETY: kill(2) on a child this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    child.wait().unwrap()
}

#[test]
fn serve_needs_somewhere_to_listen_and_refuses_bad_addresses() {
    let db = Db::new();
    let out = db.run(&["serve"], None);
    assert_exit(&out, 2, &["serve", "with nowhere to listen"]);
    assert!(stderr(&out).contains("--spamd ADDR"), "{}", stderr(&out));
    let out = db.run(&["serve", "--http", "localhost"], None);
    assert_exit(&out, 2, &["serve", "with a bad address"]);
    assert!(stderr(&out).contains("HOST:PORT"), "{}", stderr(&out));
    let out = db.run(
        &["serve", "--http", "127.0.0.1:0", "--user-db", "users/%u"],
        None,
    );
    assert_exit(&out, 2, &["serve", "with a relative --user-db"]);
    assert!(stderr(&out).contains("absolute"), "{}", stderr(&out));
}

#[test]
fn a_unix_socket_has_its_mode_and_goes_away_on_sigterm() {
    let db = Db::new();
    let sock = db.path("spamd.sock");
    let addr = format!("unix:{}", sock.display());
    let (child, bound) = start_serve(&db, &["--spamd", &addr, "--socket-mode", "600"], 1);
    assert_eq!(bound, std::slice::from_ref(&addr));
    let meta = std::fs::symlink_metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // A second server does not take over a socket someone listens on.
    let out = db.run(&["serve", "--spamd", &addr], None);
    assert_exit(&out, 2, &["serve", "on a socket in use"]);
    assert!(stop(child).success());
    assert!(!sock.exists(), "the socket is removed when serve stops");
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(root().join("contrib/bayesmail.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/bayesmail "));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bayesmail.service");
    // The unit as installed, with this build where it says to install it.
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/bayesmail", env!("CARGO_BIN_EXE_bayesmail")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze is installed (.ci/run installs systemd)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `bayesmail serve ARGS` on `db`; its stderr lines come through the
/// receiver, the first being where it listens.
fn start_watched(db: &Db, args: &[&str]) -> (Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .args(db.global_args())
        .arg("serve")
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end even when no one listens any more, so that the
        // server never blocks on a full pipe.
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// The next line of `rx` that holds `what`, within ten seconds.
fn wait_for(rx: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(what) => return line,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("serve never said {what:?}");
}

#[test]
fn sighup_reads_the_configuration_again_and_keeps_the_old_one_when_it_is_broken() {
    let db = Db::new();
    db.train_sample();
    let config = db.path("config.toml");
    std::fs::write(&config, "[decision]\ncosts = \"20:1:0.5\"\n").unwrap();
    let (child, rx) = start_watched(&db, &["--http", "127.0.0.1:0"]);
    let addr = wait_for(&rx, "listening on")
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let hup = || {
        // SAFETY: kill(2) on a child this test started.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGHUP);
        }
    };
    std::fs::write(&config, "[decision\n").unwrap();
    hup();
    let line = wait_for(&rx, "reload");
    assert!(line.contains("keeping the settings in use"), "{line}");
    std::fs::write(&config, "[decision]\ncosts = \"10:1\"\n").unwrap();
    hup();
    wait_for(&rx, "reloaded");
    // It still answers.
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(stop(child).success());
}
