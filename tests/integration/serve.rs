//! `bayesmail serve` as a process, whatever the protocol: where it listens
//! and what it refuses, its Unix sockets, its stop on SIGTERM, and the
//! systemd unit in contrib/.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::process::{Child, Command};

use crate::common::*;

/// `bayesmail serve ARGS` on `db`, started; returns the child and the
/// addresses it says it listens on, once it listens on all `n`.
pub fn start_serve(db: &Db, args: &[&str], n: usize) -> (Child, Vec<String>) {
    let (child, watch) = start_watched(db, args);
    let bound = watch
        .listening(n, 10)
        .unwrap_or_else(|| panic!("serve never said where it listens: {}", watch.log()))
        .into_iter()
        .map(|(_, addr)| addr)
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

/// The bytes of messages held at once are bounded for each protocol
/// (`--max-held`), as they arrive: a request that only declares its length
/// holds nothing; of two clients each sending most of a message that
/// together pass the bound, one at least is answered busy (spamd
/// EX_TEMPFAIL, HTTP 503: both, when each took part before the other
/// took the rest); and once they are gone messages are judged again. Before, each listener took its connection limit times the size
/// limit (a client sending 256 large messages at once drove serve to
/// gigabytes).
#[test]
fn the_bytes_of_messages_held_at_once_are_bounded() {
    use std::io::{Read, Write};
    let db = Db::new();
    db.train_sample();
    let (child, bound) = start_serve(
        &db,
        &[
            "--spamd",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--max-size",
            "100K",
            "--max-held",
            "150K",
            "--timeout",
            "2",
        ],
        2,
    );
    let spamd = &bound[0];
    let http = &bound[1];
    let message = std::fs::read(&sample_files()[0]).unwrap();
    let big = [&message[..], &vec![b'x'; 60_000]].concat();
    let answer_of = |mut conn: std::net::TcpStream| {
        conn.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut answer = Vec::new();
        let _ = conn.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    };
    let process = |message: &[u8]| {
        let mut conn = std::net::TcpStream::connect(spamd).unwrap();
        let head = format!(
            "PROCESS SPAMC/1.5\r\nContent-length: {}\r\n\r\n",
            message.len()
        );
        conn.write_all(head.as_bytes()).unwrap();
        conn.write_all(message).unwrap();
        answer_of(conn)
    };
    // Most of a message of 100,000 bytes, the rest never sent.
    let most = |addr: &str, head: &str| {
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        conn.write_all(head.as_bytes()).unwrap();
        conn.write_all(&vec![b'y'; 99_000]).unwrap();
        conn
    };
    // Declared, not sent: nothing held.
    let mut declared = std::net::TcpStream::connect(spamd).unwrap();
    declared
        .write_all(b"PROCESS SPAMC/1.5\r\nContent-length: 100000\r\n\r\n")
        .unwrap();
    let answer = process(&big);
    assert!(answer.starts_with("SPAMD/1.1 0 EX_OK"), "{answer}");
    drop(declared);
    // Two that pass the bound together: one is refused.
    let spamd_head = "PROCESS SPAMC/1.5\r\nContent-length: 100000\r\n\r\n";
    let (a, b) = (most(spamd, spamd_head), most(spamd, spamd_head));
    let answers = [answer_of(a), answer_of(b)];
    let busy = answers
        .iter()
        .filter(|a| a.starts_with("SPAMD/1.0 75 EX_TEMPFAIL"))
        .count();
    assert!(busy >= 1, "{answers:?}");
    let http_head = "POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";
    let (a, b) = (most(http, http_head), most(http, http_head));
    let answers = [answer_of(a), answer_of(b)];
    let busy = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 503") && a.contains("\"reason\":\"busy\""))
        .count();
    assert!(busy >= 1, "{answers:?}");
    // All given back once they are answered.
    let started = std::time::Instant::now();
    loop {
        let answer = process(&big);
        if answer.starts_with("SPAMD/1.1 0 EX_OK") {
            break;
        }
        assert!(started.elapsed().as_secs() < 20, "{answer}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(stop(child).success());
}

/// serve started on a database with no model says so once, at the start
/// (every message would get no verdict), and not when there is one.
#[test]
fn serve_without_a_model_says_so_at_the_start() {
    let db = Db::new();
    let (child, watch) = start_watched(&db, &["--http", "127.0.0.1:0"]);
    let line = wait_for(&watch, "no model at");
    assert!(
        line.contains("reason=no-model") && line.contains(" train`"),
        "{line}"
    );
    // Told to stop once it listens (and so heeds SIGTERM).
    assert!(watch.listening(1, 10).is_some(), "{}", watch.log());
    assert!(stop(child).success());
    db.train_sample();
    let (child, watch) = start_watched(&db, &["--http", "127.0.0.1:0"]);
    assert!(watch.listening(1, 10).is_some(), "{}", watch.log());
    assert!(stop(child).success());
    assert!(!watch.log().contains("no model"), "{}", watch.log());
}

/// A serve that stops while a client keeps it waiting leaves alone the
/// socket a serve started meanwhile bound at the same path: it removes
/// only the file it made. Before, it removed the new one's, which then
/// ran on and no client could reach.
#[test]
fn a_stopping_serve_leaves_the_socket_of_the_one_started_after_it() {
    use std::io::Write;
    let db = Db::new();
    let sock = db.path("spamd.sock");
    let addr = format!("unix:{}", sock.display());
    let (old, bound) = start_serve(
        &db,
        &["--spamd", &addr, "--http", "127.0.0.1:0", "--timeout", "2"],
        2,
    );
    // Half a request, on another listener (a connection on the socket
    // would keep its inode from being used again): the old serve waits
    // for it up to its timeout.
    let http = bound.iter().find(|a| !a.starts_with("unix:")).unwrap();
    let mut slow = std::net::TcpStream::connect(http).unwrap();
    slow.write_all(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nFrom:")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: kill(2) on a child this test started.
    unsafe {
        libc::kill(old.id() as i32, libc::SIGTERM);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Once it no longer listens, a new serve takes the path.
    let started = std::time::Instant::now();
    let new = loop {
        let (child, watch) = start_watched(&db, &["--spamd", &addr]);
        if watch.listening(1, 10).is_some() {
            break child;
        }
        let _ = stop(child);
        assert!(started.elapsed().as_secs() < 20, "{}", watch.log());
    };
    let mut old = old;
    assert!(old.wait().unwrap().success());
    drop(slow);
    assert!(
        std::os::unix::net::UnixStream::connect(&sock).is_ok(),
        "the new serve's socket is gone"
    );
    assert!(stop(new).success());
    assert!(!sock.exists(), "the new serve removes its own socket");
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

/// The steps the unit's comment gives, run as printed (all but the last,
/// `systemctl enable`): the user made, its
/// directory and the configuration file made, the first `train` as that
/// user (with the sample corpus's folders); then the database is that
/// user's and holds the corpus. Run as root in a mount namespace of its
/// own (a copy of /etc, an empty /var/lib, this build at
/// /usr/local/bin/bayesmail), so nothing outside it changes; skipped
/// where that cannot be made.
#[test]
fn the_systemd_units_steps_work_as_printed() {
    // SAFETY: getuid(2) has no preconditions.
    let root_user = unsafe { libc::getuid() } == 0;
    if !root_user
        || !Command::new("unshare")
            .args(["-m", "true"])
            .status()
            .is_ok_and(|s| s.success())
    {
        eprintln!("not root, or no mount namespaces: test skipped");
        return;
    }
    let unit = std::fs::read_to_string(root().join("contrib/bayesmail.service")).unwrap();
    let steps: String = unit
        .lines()
        .skip_while(|l| !l.ends_with("then:"))
        .skip(1)
        .map_while(|l| l.strip_prefix("#   "))
        // Enabling the unit needs a running systemd: the one step not run.
        .filter(|l| !l.starts_with("systemctl "))
        .map(|l| l.trim_start().to_string() + "\n")
        .collect();
    assert!(
        steps.contains("useradd") && steps.contains("train"),
        "{steps}"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["etc", "bin"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    let mut mode = std::fs::metadata(d).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
    std::fs::set_permissions(d, mode).unwrap();
    let copied = Command::new("cp")
        .args(["-a", "/etc/.", utf8(&d.join("etc"))])
        .status()
        .unwrap();
    assert!(copied.success());
    let steps = steps
        .replace("SPAM-FOLDER", utf8(&sample_spam()))
        .replace("HAM-FOLDER", utf8(&sample_ham()));
    let script = format!(
        "set -e\n\
         mount --bind {etc} /etc\n\
         mount -t tmpfs tmpfs /var/lib\n\
         mount -t tmpfs tmpfs /usr/local/bin\n\
         touch /usr/local/bin/bayesmail\n\
         mount --bind {bin} /usr/local/bin/bayesmail\n\
         {steps}\
         runuser -u bayesmail -- bayesmail --config /etc/bayesmail/config.toml \
         --db /var/lib/bayesmail/global stats\n\
         stat -c '%U %a' /var/lib/bayesmail/global/model.bin\n",
        etc = utf8(&d.join("etc")),
        bin = env!("CARGO_BIN_EXE_bayesmail"),
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("messages learned    24 ham, 24 spam"),
        "{text}"
    );
    assert!(text.contains("bayesmail 600"), "{text}");
}

/// `bayesmail serve ARGS` on `db`, its stderr watched.
fn start_watched(db: &Db, args: &[&str]) -> (Child, Watch) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args()).arg("serve").args(args);
    spawn_watched(cmd)
}

/// The next line serve writes that holds `what`, within ten seconds.
fn wait_for(watch: &Watch, what: &str) -> String {
    watch
        .wait_for(what, 10)
        .unwrap_or_else(|| panic!("serve never said {what:?}: {}", watch.log()))
}

#[test]
fn sighup_reads_the_configuration_again_and_keeps_the_old_one_when_it_is_broken() {
    let db = Db::new();
    db.train_sample();
    let config = db.path("config.toml");
    std::fs::write(&config, "[decision]\ncosts = \"20:1:0.5\"\n").unwrap();
    let (child, watch) = start_watched(&db, &["--http", "127.0.0.1:0"]);
    let addr = wait_for(&watch, "listening on")
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
    let line = wait_for(&watch, "reload");
    assert!(line.contains("keeping the settings in use"), "{line}");
    // A file gone is said once, in words.
    std::fs::remove_file(&config).unwrap();
    hup();
    let line = wait_for(&watch, "reload: cannot read");
    assert!(
        line.contains("no such file or directory") && !line.contains("os error"),
        "{line}"
    );
    std::fs::write(&config, "[decision]\ncosts = \"10:1\"\n").unwrap();
    hup();
    wait_for(&watch, "reloaded");
    // It still answers.
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // What serve does is read again too (a size limit, the peers it
    // serves); what it holds since it started is said to stay.
    let check = || {
        let body = vec![b'x'; 2048];
        let mut conn = std::net::TcpStream::connect(&addr).unwrap();
        let head = format!(
            "POST /check HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(&[head.as_bytes(), &body].concat()).unwrap();
        let mut answer = String::new();
        let _ = conn.read_to_string(&mut answer);
        answer
    };
    assert!(!check().starts_with("HTTP/1.1 413"));
    std::fs::write(&config, "[serve]\nmax_size = \"1K\"\nmax_connections = 3\n").unwrap();
    hup();
    let line = wait_for(&watch, "reloaded");
    assert!(line.contains("max_connections changed but stays"), "{line}");
    assert!(check().starts_with("HTTP/1.1 413"), "{}", check());
    // A size limit over the bytes held as started is not taken.
    std::fs::write(&config, "[serve]\nmax_size = \"600M\"\n").unwrap();
    hup();
    let line = wait_for(&watch, "reloaded");
    assert!(line.contains("max_size (over max_held)"), "{line}");
    assert!(check().starts_with("HTTP/1.1 413"), "{}", check());
    std::fs::write(&config, "[serve]\nallow = [\"10.0.0.0/8\"]\n").unwrap();
    hup();
    wait_for(&watch, "reloaded");
    assert_eq!(check(), "");
    wait_for(&watch, "not in the allowed networks");
    assert!(stop(child).success());
}

/// A reload whose database has no model (a mistyped `db`) would leave
/// every message unjudged: the settings and models in use are kept, and
/// the log says why.
#[test]
fn sighup_to_a_database_without_a_model_keeps_the_one_in_use() {
    let db = Db::new();
    db.train_sample();
    let config = db.path("config.toml");
    let with_db = |dir: &std::path::Path| format!("db = \"{}\"\n", dir.display());
    std::fs::write(&config, with_db(&db.dir())).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(["--config", utf8(&config), "serve", "--http", "127.0.0.1:0"]);
    let (child, watch) = spawn_watched(cmd);
    let addr = wait_for(&watch, "listening on")
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    std::fs::write(&config, with_db(&db.path("mistyped"))).unwrap();
    // SAFETY: kill(2) on a child this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGHUP);
    }
    let line = wait_for(&watch, "reload");
    assert!(
        line.contains("finds no model at") && line.contains("keeping the settings and models"),
        "{line}"
    );
    let spam = sample_files()
        .into_iter()
        .find(|f| f.starts_with(sample_spam()))
        .unwrap();
    let (code, got) = crate::serve_http::post(&format!("http://{addr}/check"), &spam, &[]);
    assert_eq!(
        (code, &got["model"]),
        (200, &serde_json::Value::from("global")),
        "{got}"
    );
    assert!(stop(child).success());
}

/// README's "Running as a server": every `bayesmail … serve` command and
/// every `spamc` line of an `sh` block (comments off), and every `$ curl`
/// line with the answer printed under it; last, the systemd unit's
/// command.
struct ServeDocs {
    serves: Vec<String>,
    spamcs: Vec<String>,
    curls: Vec<(String, String)>,
}

fn serve_docs() -> ServeDocs {
    let docs = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = docs
        .find("### Running as a server")
        .expect("README has Running as a server");
    let section = &docs[start..];
    let section = &section[..section[4..].find("\n### ").map_or(section.len(), |e| e + 4)];
    let mut found = ServeDocs {
        serves: Vec::new(),
        spamcs: Vec::new(),
        curls: Vec::new(),
    };
    for block in section.split("```sh\n").skip(1) {
        let block = &block[..block.find("```").unwrap()];
        let lines: Vec<&str> = block.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if let Some(curl) = line.strip_prefix("$ curl ") {
                found
                    .curls
                    .push((format!("curl {curl}"), lines[i + 1].to_string()));
            }
        }
        let joined = block.replace("\\\n", " ");
        for line in joined.lines() {
            let line = line.split(" # ").next().unwrap().trim().to_string();
            if line.starts_with("bayesmail ") && line.contains(" serve ") {
                found.serves.push(line);
            } else if line.starts_with("spamc ") {
                found.spamcs.push(line);
            }
        }
    }
    // The systemd unit's command, as systemd reads it (`%%` is `%`).
    let unit = std::fs::read_to_string(root().join("contrib/bayesmail.service")).unwrap();
    let exec = unit
        .split("\nExecStart=/usr/local/bin/")
        .nth(1)
        .expect("the unit has an ExecStart");
    let mut command = String::new();
    for line in exec.lines() {
        match line.strip_suffix('\\') {
            Some(more) => command.push_str(more),
            None => {
                command.push_str(line);
                break;
            }
        }
    }
    let command = command.split_whitespace().collect::<Vec<_>>().join(" ");
    found.serves.push(command.replace("%%", "%"));
    found
}

/// The keys of a JSON object, sorted.
fn keys(json: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

#[test]
fn the_readmes_serve_spamc_and_curl_commands_run_as_printed() {
    let docs = serve_docs();
    assert!(docs.serves.len() >= 5, "{:?}", docs.serves);
    // The unit listens where the Postfix recipe and spamc look.
    let unit = docs.serves.last().unwrap();
    let postfix = std::fs::read_to_string(root().join("contrib/postfix-milter.cf")).unwrap();
    let milter = unit
        .split("--milter ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert!(
        postfix.contains(&format!("smtpd_milters = inet:{milter}\n")),
        "{unit}"
    );
    assert!(unit.contains("--spamd 127.0.0.1:783 "), "{unit}");
    assert!(docs.spamcs.len() >= 9, "{:?}", docs.spamcs);
    assert!(docs.curls.len() >= 2, "{:?}", docs.curls);
    let global = Db::new();
    global.train_sample();
    let message = sample_files()[0].clone();
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let sh = |line: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(line)
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let (mut spamcs_run, mut curls_run) = (0, 0);
    for command in &docs.serves {
        // Where it lives is the only change: the directories under a
        // temporary one, the ports free ones, and the user to drop to one
        // that exists here (root only may drop).
        let root = tempfile::tempdir().unwrap();
        let var = root.path().join("var/lib/bayesmail");
        let run = root.path().join("run/bayesmail");
        std::fs::create_dir_all(&var).unwrap();
        std::os::unix::fs::symlink(global.dir(), var.join("global")).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        let mut local = command
            .replace("/var/lib/bayesmail", utf8(&var))
            .replace("/run/bayesmail", utf8(&run));
        for port in [":783", ":11333", ":11340"] {
            local = local.replace(&format!("127.0.0.1{port}"), "127.0.0.1:0");
        }
        // SAFETY: getuid(2) has no preconditions.
        let root_user = unsafe { libc::getuid() } == 0;
        local = local.replace(
            " --user bayesmail",
            if root_user { " --user nobody" } else { "" },
        );
        if root_user && local.contains(" --user nobody") {
            give_to_nobody(&global);
        }
        let listeners = ["--milter ", "--spamd ", "--http "]
            .iter()
            .map(|f| command.matches(f).count())
            .sum();
        // A command without --db judges with the environment's database,
        // as the service's environment would say.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("exec {local}"))
            .env("PATH", &path)
            .env("BAYESMAIL_DB", global.dir())
            .env("BAYESMAIL_CONFIG", global.path("config.toml"));
        let (mut child, watch) = spawn_watched(cmd);
        let bound = watch
            .listening(listeners, 10)
            .unwrap_or_else(|| panic!("{command}: {}", watch.log()));
        for (protocol, addr) in &bound {
            match (protocol.as_str(), addr.strip_prefix("unix:")) {
                ("http", None) => {
                    for (curl, printed) in &docs.curls {
                        let local = curl
                            .replace("127.0.0.1:11333", addr)
                            .replace("@message.eml", &format!("@{}", utf8(&message)));
                        let out = sh(&local);
                        assert!(out.status.success(), "{local}: {}", stderr(&out));
                        let got: serde_json::Value = serde_json::from_slice(&out.stdout)
                            .unwrap_or_else(|e| {
                                panic!("{local}: {e}: {}", String::from_utf8_lossy(&out.stdout))
                            });
                        let want: serde_json::Value = serde_json::from_str(printed).unwrap();
                        assert_eq!(keys(&got), keys(&want), "{local}: {got}");
                        curls_run += 1;
                    }
                }
                ("spamd", socket) => {
                    let out_file = root.path().join("out.eml");
                    for spamc in &docs.spamcs {
                        let local = match socket {
                            None if spamc.contains(" -p 783 ") => {
                                let port = addr.rsplit_once(':').unwrap().1;
                                spamc.replace(" -p 783 ", &format!(" -p {port} "))
                            }
                            Some(socket) if spamc.contains(" -U /run/bayesmail/spamd.sock ") => {
                                spamc.replace("/run/bayesmail/spamd.sock", socket)
                            }
                            _ => continue,
                        };
                        let local = local
                            .replace("< message.eml", &format!("< {}", utf8(&message)))
                            .replace("> out.eml", &format!("> {}", utf8(&out_file)));
                        let out = sh(&local);
                        // 0, or 1 for spam with -c and -E; spamc says
                        // nothing on stderr when all went well.
                        assert!(
                            matches!(out.status.code(), Some(0 | 1)) && out.stderr.is_empty(),
                            "{local}: {:?} {}",
                            out.status,
                            stderr(&out)
                        );
                        if local.contains(" -c ") {
                            let said = String::from_utf8_lossy(&out.stdout);
                            assert!(said.trim_end().ends_with("/5.0"), "{local}: {said}");
                        }
                        spamcs_run += 1;
                    }
                }
                _ => {}
            }
        }
        if command.contains("--user-db") && command.contains("--http") {
            // The learn went to alice's own database, where the pattern says.
            let alice = if command.contains("users/%d/%l") {
                "users/example.org/alice"
            } else {
                assert!(command.contains("users/%l"), "{command}");
                "users/alice"
            };
            assert!(var.join(alice).join("counts.sled").exists(), "{command}");
        }
        // SAFETY: kill(2) on the serve this test started (the shell
        // exec'd it).
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        assert!(child.wait().unwrap().success(), "{command}");
    }
    // Every spamc line ran against a TCP listener or the socket, every
    // curl line against each HTTP one.
    assert!(spamcs_run >= docs.spamcs.len(), "{spamcs_run}");
    assert!(curls_run >= 2 * docs.curls.len(), "{curls_run}");
}

/// Makes `nobody`, whom a server started as root drops to, the owner of
/// `db`'s files, as an administrator would arrange.
fn give_to_nobody(db: &Db) {
    let status = Command::new("chown")
        .args(["-R", "nobody"])
        .arg(db.path(""))
        .status()
        .unwrap();
    assert!(status.success());
}

/// A server started as root without `--user` learns into no database
/// another user owns, nor makes a user's database inside another user's
/// directory (spamd TELL and HTTP `/learn` alike go through the same
/// writer): before, it left root's lock, journal and learn log in them,
/// so the owner's own `learn` and `filter` failed, and `serve --user`
/// refused to start. It says so when it starts, refuses each learn with a
/// reason, and still judges.
#[test]
fn a_server_running_as_root_learns_into_no_database_another_user_owns() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("needs root: test skipped");
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let db = Db::new();
    db.train_sample();
    let users = db.path("users");
    std::fs::create_dir(&users).unwrap();
    give_to_nobody(&db);
    let outside = tempfile::tempdir().unwrap();
    let message = outside.path().join("message");
    std::fs::write(&message, unseen(2, "rootserves")).unwrap();
    let pattern = format!("{}/%d/%l", utf8(&users));
    let server =
        crate::serve_http::Server::start(&db, &["--user-db", &pattern, "--min-user-messages", "1"]);
    let log = server.log_after("learning into users' databases is refused");
    assert!(
        log.contains("learning into the global database is refused"),
        "{log}"
    );
    assert!(log.contains("belongs to nobody"), "{log}");
    for (user, why) in [
        (None, "belongs to nobody"),
        (
            Some("User: alice@example.org"),
            "would be made in a directory of nobody",
        ),
    ] {
        let headers: Vec<&str> = user.into_iter().collect();
        let (code, got) =
            crate::serve_http::post(&server.url("/learn?class=spam"), &message, &headers);
        assert_eq!(
            (code, &got["reason"]),
            (500, &"database-owner".into()),
            "{got}"
        );
        assert!(got["why"].as_str().unwrap().contains(why), "{got}");
        let (code, got) = crate::serve_http::post(&server.url("/check"), &message, &headers);
        assert_eq!(code, 200, "{got}");
        assert_ne!(got["verdict"], "unknown", "{got}");
    }
    let roots: Vec<_> = crate::serve_http::walk(&db.path(""))
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).unwrap().uid() != 65534)
        .collect();
    assert_eq!(roots, Vec::<std::path::PathBuf>::new());
    assert!(!users.join("example.org").exists());
    assert_eq!(db.counts(), [24, 24]);
}

/// `--user` gives the server the user's groups from the group database,
/// supplementary ones included (a database shared with a group it is in
/// stays readable). Run in a mount namespace whose `/etc/group` makes
/// `nobody` a member of one more group; skipped where that cannot be made.
#[test]
fn user_keeps_its_supplementary_groups() {
    // SAFETY: getuid(2) has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    let can = root
        && Command::new("unshare")
            .args(["-m", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if !can {
        eprintln!("not root, or no mount namespaces: test skipped");
        return;
    }
    let db = Db::new();
    db.train_sample();
    give_to_nobody(&db);
    let group = db.path("group");
    let mut groups = std::fs::read_to_string("/etc/group").unwrap();
    groups.push_str("bayesmail-test:x:4321:nobody\n");
    std::fs::write(&group, groups).unwrap();
    let serve = [
        utf8(std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail"))).to_string(),
        db.global_args().join(" "),
    ]
    .join(" ");
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c"]).arg(format!(
        "mount --bind {} /etc/group && exec {serve} serve --http 127.0.0.1:0 --user nobody",
        utf8(&group)
    ));
    let (mut child, watch) = spawn_watched(cmd);
    let listening = watch.wait_for("listening on", 10);
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening.is_some(), "{}", watch.log());
    let line = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
    assert!(line.split_whitespace().any(|g| g == "4321"), "{line}");
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid.split_whitespace().nth(1) != Some("0"), "{uid}");
}

/// A server that would run as a user who cannot read its model does not
/// start: one line names the user and the file, rather than every message
/// passing on unjudged. The database's directory may be open to all (0755,
/// its files private to root, as `train` makes them under a umask of 022);
/// what counts is whether the files the reader opens can be read. Once
/// they are the user's, it starts.
#[test]
fn user_who_cannot_read_the_model_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: getuid(2) has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("not root: test skipped");
        return;
    }
    let db = Db::new();
    db.train_sample();
    for dir in [db.path(""), db.dir()] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let serve = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args())
            .args(["serve", "--http", "127.0.0.1:0", "--user", "nobody"]);
        spawn_watched(cmd)
    };

    let (mut child, mut watch) = serve();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let err = watch.finish();
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{err}");
    assert!(
        err.contains("user nobody cannot read")
            && err.contains("model")
            && err.contains("permission denied")
            && err.lines().count() == 1,
        "{err}"
    );

    give_to_nobody(&db);
    let (mut child, watch) = serve();
    let listening = watch.wait_for("listening on", 30);
    assert!(listening.is_some(), "{}", watch.log());
    assert!(!watch.log().contains("running as root"), "{}", watch.log());
    // The model made root's and private while it runs: a reload keeps the
    // models in use rather than judge nothing, and says why.
    let addr = listening.unwrap().rsplit(' ').next().unwrap().to_string();
    let spam = sample_files()
        .into_iter()
        .find(|f| f.starts_with(sample_spam()))
        .unwrap();
    let check = || crate::serve_http::post(&format!("http://{addr}/check"), &spam, &[]);
    assert_eq!(check().0, 200);
    let model = db.model();
    std::os::unix::fs::chown(&model, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o600)).unwrap();
    // SAFETY: kill(2) on a child this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGHUP);
    }
    let line = watch.wait_for("reload:", 30).unwrap_or_default();
    assert!(
        line.contains("cannot read") && line.contains("keeping the settings and models in use"),
        "{}",
        watch.log()
    );
    // And the database's directory closed to it as well: the model it
    // has is still judged with (a directory it cannot enter is not a
    // model gone).
    std::os::unix::fs::chown(db.dir(), Some(0), Some(0)).unwrap();
    std::fs::set_permissions(db.dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, got) = check();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        (code, &got["model"]),
        (200, &serde_json::Value::from("global")),
        "{got}"
    );
    assert_ne!(got["verdict"], "unknown", "{got}");

    // Without --user, as root: it serves, and says how not to.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args())
        .args(["serve", "--http", "127.0.0.1:0"]);
    let (mut child, watch) = spawn_watched(cmd);
    let warned = watch.wait_for("running as root: --user USER", 30);
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned.is_some(), "{}", watch.log());
}

/// Root's `learn`, `train`, `unlearn` or `prune` on a database another
/// user owns (`sudo bayesmail --db /var/lib/bayesmail/global learn …`) is
/// refused, naming the owner, and changes nothing: its files left root's
/// (the journal, the learn log, the count store's own), the daemon running
/// as that user (`serve --user`) judged with a model it could no longer
/// follow, and after a reload judged nothing. The owner learns as before.
#[test]
fn roots_writes_to_a_database_another_user_owns_are_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !crate::recipes::have("setpriv") {
        eprintln!("needs root and setpriv: test skipped");
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let db = Db::new();
    db.train_sample();
    give_to_nobody(&db);
    let owned = |dir: &std::path::Path| -> Vec<String> {
        crate::serve_http::walk(dir)
            .into_iter()
            .filter(|p| std::fs::symlink_metadata(p).unwrap().uid() != 65534)
            .map(|p| p.display().to_string())
            .collect()
    };
    let spam = utf8(&sample_spam()).to_string();
    let ham = utf8(&sample_ham()).to_string();
    let message = unseen(1, "rootlearns");
    for args in [
        &["learn", "--spam"][..],
        &["unlearn"],
        &["train", "--spam", &spam, "--ham", &ham],
        &["prune"],
    ] {
        let out = db.run(args, Some(&message));
        assert_exit(&out, 2, args);
        let err = stderr(&out);
        assert!(
            err.contains("belongs to nobody") && err.contains("runuser -u nobody"),
            "{args:?}: {err}"
        );
        assert_eq!(owned(&db.dir()), Vec::<String>::new(), "{args:?}");
    }
    assert_eq!(db.counts(), [24, 24]);
    // Nor does root make a new database inside another user's directory.
    let inside = db.path("home");
    std::fs::create_dir(&inside).unwrap();
    std::os::unix::fs::chown(&inside, Some(65534), Some(65534)).unwrap();
    let fresh = inside.join("db");
    let out = run(&["--db", utf8(&fresh), "learn", "--spam"], Some(&message));
    assert_exit(&out, 2, &["learn into a new database in nobody's home"]);
    assert!(stderr(&out).contains("would be made in a directory of nobody"));
    assert!(!fresh.exists());
    // Nor when the database is named from inside that directory.
    let out = run_with_stdin(
        {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
            cmd.current_dir(&inside)
                .args(["--db", "db", "learn", "--spam"]);
            cmd
        },
        &message,
    );
    assert_exit(
        &out,
        2,
        &["learn into a relative new database in nobody's home"],
    );
    assert!(stderr(&out).contains("would be made in a directory of nobody"));
    assert!(!fresh.exists());
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_bayesmail"))
        .args(db.global_args())
        .args(["learn", "--spam"]);
    let out = run_with_stdin(cmd, &message);
    assert_exit(&out, 0, &["learn as nobody"]);
    assert_eq!(db.counts(), [24, 25]);
    // A database that is there but closed to its user is said to be
    // that, not one that could not be made.
    let closed = Db::new();
    closed.train_sample();
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_bayesmail"))
        .args(closed.global_args())
        .args(["learn", "--spam"]);
    let out = run_with_stdin(cmd, &unseen(4, "nobodyshut"));
    assert_exit(&out, 2, &["learn as nobody in root's database"]);
    let want = format!(
        "cannot enter database directory {}:",
        closed.dir().display()
    );
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
}
