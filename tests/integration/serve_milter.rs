//! `bayesmail serve --milter` driven by real milter clients: `miltertest`
//! (a Lua script written here) and Postfix's `smtpd` in a private
//! configuration directory. Each test starts its own server on a loopback
//! port the server picks, and stops it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    Db, Watch, sample_files, sample_ham, sample_spam, spawn_watched, stderr, utf8,
};

/// A running `bayesmail serve`, stopped (SIGTERM, then waited for) when
/// dropped.
pub struct Serve {
    child: Child,
    /// Where the milter listens, as `HOST:PORT`.
    pub addr: String,
    watch: Watch,
}

impl Serve {
    /// Starts `serve --milter 127.0.0.1:0 EXTRA…` on `db` and waits for it
    /// to say where it listens (`HOST:PORT` or `unix:PATH`).
    pub fn start(db: &Db, extra: &[&str]) -> Serve {
        Serve::start_at(db, "127.0.0.1:0", extra)
    }

    /// Starts `serve --milter ADDR EXTRA…` on `db`.
    pub fn start_at(db: &Db, addr: &str, extra: &[&str]) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
        cmd.args(db.global_args())
            .args(["serve", "--milter", addr, "--log-messages"])
            .args(extra);
        let (mut child, watch) = spawn_watched(cmd);
        let Some(bound) = watch.listening(1, 30) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve did not listen: {}", watch.log());
        };
        Serve {
            child,
            addr: bound[0].1.clone(),
            watch,
        }
    }

    /// What it wrote on stderr so far (lines still in the pipe are not
    /// there yet: [`Serve::finish`] has them all).
    pub fn log(&self) -> String {
        self.watch.log()
    }

    /// Stops it; returns whether it exited with 0, and all it wrote.
    pub fn finish(&mut self) -> (bool, String) {
        let ok = self.stop();
        (ok, self.watch.finish())
    }

    /// Stops it with SIGTERM and waits; returns whether it exited with 0.
    pub fn stop(&mut self) -> bool {
        // SAFETY: kill(2) on the id of our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Whether `program` can be run; if not, panics in CI (where `.ci/run`
/// installs it) and says the test is skipped elsewhere.
pub(crate) fn have(program: &str, package: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        let required = std::env::var_os("CI").is_some()
            || std::env::var_os("BAYESMAIL_REQUIRE_CORPUS").is_some();
        assert!(
            !required,
            "{program} is not installed (Debian package {package})"
        );
        eprintln!("{program} is not installed (package {package}): test skipped");
    }
    found
}

/// A Lua string literal holding `bytes` exactly.
fn lua(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\{b:03}"));
        }
    }
    out.push('"');
    out
}

/// A header field: name, value.
type Field = (Vec<u8>, Vec<u8>);

/// A message split as an MTA hands it to a milter: header fields (name,
/// value after the colon with its leading blanks, folded lines kept with
/// their line ends as LF) and the body in CRLF.
fn split_message(raw: &[u8]) -> (Vec<Field>, Vec<u8>) {
    let text = raw.to_vec();
    let mut fields: Vec<Field> = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let end = text[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(text.len(), |p| at + p + 1);
        let line = &text[at..end];
        let content = line.strip_suffix(b"\n").unwrap_or(line);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        at = end;
        if content.is_empty() {
            break;
        }
        if matches!(content[0], b' ' | b'\t') {
            let last = fields.last_mut().expect("no folded first line");
            last.1.push(b'\n');
            last.1.extend_from_slice(content);
            continue;
        }
        let colon = content
            .iter()
            .position(|&b| b == b':')
            .expect("a header line");
        let value = &content[colon + 1..];
        fields.push((content[..colon].to_vec(), value.to_vec()));
    }
    let mut body = Vec::new();
    for &b in &text[at..] {
        if b == b'\n' && body.last() != Some(&b'\r') {
            body.push(b'\r');
        }
        body.push(b);
    }
    (fields, body)
}

/// Lua that sends one message on `conn` (envelope, fields, body, end of
/// message). A value is sent without its leading space: miltertest puts
/// one in front of each value itself once SMFIP_HDR_LEADSPC is agreed.
pub(crate) fn lua_message(raw: &[u8], rcpt: &str) -> String {
    let (fields, body) = split_message(raw);
    let mut lua_text = String::new();
    lua_text.push_str("check(mt.mailfrom(conn, \"<sender@example.org>\"))\n");
    // Several recipients, separated by spaces: one RCPT each.
    for rcpt in rcpt.split(' ') {
        lua_text.push_str(&format!(
            "check(mt.rcptto(conn, {}))\n",
            lua(rcpt.as_bytes())
        ));
    }
    for (name, value) in fields {
        let value = value.strip_prefix(b" ").unwrap_or(&value);
        lua_text.push_str(&format!(
            "check(mt.header(conn, {}, {}))\n",
            lua(&name),
            lua(value)
        ));
    }
    lua_text.push_str("check(mt.eoh(conn))\n");
    for chunk in body.chunks(60_000) {
        lua_text.push_str(&format!("check(mt.bodystring(conn, {}))\n", lua(chunk)));
    }
    lua_text.push_str("check(mt.eom(conn))\n");
    lua_text
}

/// The head of every script: connect and negotiate.
pub(crate) fn lua_head(addr: &str) -> String {
    let socket = match addr.strip_prefix("unix:") {
        Some(path) => format!("unix:{path}"),
        None => format!("inet:{}@127.0.0.1", addr.rsplit_once(':').unwrap().1),
    };
    format!(
        "mt.set_timeout(60)\n\
         function check(err) if err ~= nil then error(err) end end\n\
         conn = mt.connect(\"{socket}\", 20, 0.25)\n\
         if conn == nil then error(\"cannot connect\") end\n\
         check(mt.negotiate(conn, nil, nil, nil))\n\
         check(mt.conninfo(conn, \"client.example.org\", \"192.0.2.1\"))\n\
         check(mt.helo(conn, \"client.example.org\"))\n"
    )
}

/// Runs a miltertest script; returns its stdout, panicking with its output
/// if it fails.
pub(crate) fn miltertest(dir: &Path, script: &str) -> String {
    let path = dir.join("test.lua");
    std::fs::write(&path, script).unwrap();
    let out = Command::new("miltertest")
        .arg("-s")
        .arg(&path)
        .output()
        .expect("miltertest runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "miltertest failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The X-Spam-Status `filter` writes for `raw` on `db`.
fn filter_status(db: &Db, raw: &[u8]) -> String {
    let out = db.run(&["filter"], Some(raw));
    assert!(out.status.success());
    crate::common::strip_ours(&out.stdout).1
}

/// The value miltertest saw for the `n`th field `name` added.
pub(crate) fn lua_echo_header(tag: &str, name: &str) -> String {
    format!(
        "v = mt.getheader(conn, \"{name}\", 0)\n\
         if v == nil then v = \"(none)\" end\n\
         mt.echo(\"{tag} \" .. v)\n"
    )
}

/// Lines of `out` starting with `tag `, without it.
pub(crate) fn tagged<'a>(out: &'a str, tag: &str) -> Vec<&'a str> {
    out.lines()
        .filter_map(|l| l.strip_prefix(tag).and_then(|l| l.strip_prefix(' ')))
        .collect()
}

#[test]
fn miltertest_verdicts_equal_filters_on_one_connection() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let mut serve = Serve::start(&db, &[]);
    let files: Vec<PathBuf> = sample_files();
    let mut script = lua_head(&serve.addr);
    // Every sample message over one connection: the milter forgets each
    // message at its end and judges the next afresh.
    for (i, file) in files.iter().enumerate() {
        let raw = std::fs::read(file).unwrap();
        script.push_str(&lua_message(&raw, "<user@example.org>"));
        script.push_str(&lua_echo_header(&format!("STATUS{i}"), "X-Spam-Status"));
        script.push_str(&format!(
            "if mt.getreply(conn) ~= SMFIR_CONTINUE then error(\"not continued\") end\n\
             if mt.eom_check(conn, MT_BODYCHANGE) then error(\"body changed\") end\n\
             if mt.eom_check(conn, MT_HDRDELETE) then mt.echo(\"DELETED{i}\") end\n"
        ));
    }
    script.push_str("mt.disconnect(conn)\n");
    let tmp = tempfile::tempdir().unwrap();
    let out = miltertest(tmp.path(), &script);
    let mut spam = 0;
    for (i, file) in files.iter().enumerate() {
        let raw = std::fs::read(file).unwrap();
        let want = filter_status(&db, &raw);
        // miltertest and the milter agreed on SMFIP_HDR_LEADSPC: values
        // carry the space after the colon.
        let got = tagged(&out, &format!("STATUS{i}"));
        assert_eq!(got, vec![format!(" {want}")], "{}\n{out}", file.display());
        spam += usize::from(want.starts_with("Yes"));
        assert!(
            !out.contains(&format!("DELETED{i}\n")),
            "{}",
            file.display()
        );
    }
    assert!(spam > 5 && spam < files.len(), "{spam} spam verdicts");
    let (_, log) = serve.finish();
    assert_eq!(
        log.matches("user=user@example.org").count(),
        files.len(),
        "{log}"
    );
}

/// A message with forged fields of ours among others.
const FORGED: &[u8] = b"From: a@example.org\r\n\
X-Spam-Flag: YES\r\n\
Subject: cheap meds\r\n\
x-spam-status: No, probability=0.000001\r\n\
X-Spam-Level: **\r\n\
X-Spam-Flag: YES\r\n\
Message-ID: <forged@example.org>\r\n\
Date: Mon, 23 Dec 2024 12:02:51 +0000\r\n\
\r\n\
Body text.\r\nX-Spam-Flag: in the body\r\n";

#[test]
fn miltertest_forged_fields_are_renamed_and_ours_go_on_top() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let serve = Serve::start(&db, &[]);
    let mut script = lua_head(&serve.addr);
    script.push_str(&lua_message(FORGED, "<user@example.org>"));
    script.push_str(&lua_echo_header("STATUS", "X-Spam-Status"));
    for (tag, op, args) in [
        ("DEL-FLAG", "MT_HDRDELETE", "\"X-Spam-Flag\""),
        ("DEL-STATUS", "MT_HDRDELETE", "\"x-spam-status\""),
        ("DEL-LEVEL", "MT_HDRDELETE", "\"X-Spam-Level\""),
        ("CHG-LEVEL", "MT_HDRCHANGE", "\"X-Spam-Level\""),
        ("OLD-FLAG", "MT_HDRINSERT", "\"Old-X-Spam-Flag\", \" YES\""),
        (
            "OLD-STATUS",
            "MT_HDRINSERT",
            "\"Old-x-spam-status\", \" No, probability=0.000001\"",
        ),
        ("ADDED", "MT_HDRADD", ""),
        ("BODY", "MT_BODYCHANGE", ""),
    ] {
        let args = if args.is_empty() {
            String::new()
        } else {
            format!(", {args}")
        };
        script.push_str(&format!(
            "if mt.eom_check(conn, {op}{args}) then mt.echo(\"{tag} yes\") else mt.echo(\"{tag} no\") end\n"
        ));
    }
    script.push_str("mt.disconnect(conn)\n");
    let tmp = tempfile::tempdir().unwrap();
    let out = miltertest(tmp.path(), &script);
    let want = filter_status(&db, FORGED);
    assert_eq!(tagged(&out, "STATUS"), vec![format!(" {want}")], "{out}");
    for (tag, answer) in [
        ("DEL-FLAG", "yes"),
        ("DEL-STATUS", "yes"),
        ("DEL-LEVEL", "no"),
        ("CHG-LEVEL", "no"),
        ("OLD-FLAG", "yes"),
        ("OLD-STATUS", "yes"),
        ("ADDED", "no"),
        ("BODY", "no"),
    ] {
        assert_eq!(tagged(&out, tag), vec![answer], "{tag}\n{out}");
    }
}

/// The forged fields a milter connection holds to rename are bounded as
/// the message is (`--max-size`): from the first that does not fit, none
/// is renamed. Before, a client could make serve hold any number of
/// megabytes of them; and a small field after one that did not fit was
/// held without it, so the index that deletes it named the one before.
#[test]
fn miltertest_forged_fields_held_are_bounded_by_the_size_limit() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let serve = Serve::start(&db, &["--max-size", "1000"]);
    let (a, b, c) = ("a".repeat(600), "b".repeat(600), "YES".to_string());
    let raw = format!(
        "From: a@example.org\r\nX-Spam-Flag: {a}\r\nX-Spam-Flag: {b}\r\n\
         X-Spam-Flag: {c}\r\nSubject: hi\r\n\r\nBody.\r\n"
    );
    let mut script = lua_head(&serve.addr);
    script.push_str(&lua_message(raw.as_bytes(), "<user@example.org>"));
    for (tag, value) in [("FIRST", &a), ("SECOND", &b), ("THIRD", &c)] {
        script.push_str(&format!(
            "if mt.eom_check(conn, MT_HDRINSERT, \"Old-X-Spam-Flag\", \" {value}\") then mt.echo(\"{tag} yes\") else mt.echo(\"{tag} no\") end\n"
        ));
    }
    script.push_str("mt.disconnect(conn)\n");
    let tmp = tempfile::tempdir().unwrap();
    let out = miltertest(tmp.path(), &script);
    assert_eq!(tagged(&out, "FIRST"), vec!["yes"], "{out}");
    assert_eq!(tagged(&out, "SECOND"), vec!["no"], "{out}");
    assert_eq!(tagged(&out, "THIRD"), vec!["no"], "{out}");
}

/// Runs one message through a server started with `extra` on loopback;
/// returns
/// miltertest's report: the reply to the end of the message, whether
/// fields were inserted, quarantine and the SMTP reply asked for.
fn one_message(db: &Db, extra: &[&str], raw: &[u8]) -> (String, String) {
    one_message_at(db, "127.0.0.1:0", extra, raw)
}

/// [`one_message`] with `rcpt` (in angle brackets) as the first recipient.
fn one_message_to(db: &Db, extra: &[&str], raw: &[u8], rcpt: &str) -> (String, String) {
    message_at_to(db, "127.0.0.1:0", extra, raw, rcpt)
}

/// [`one_message`] with the server listening on `addr`.
fn one_message_at(db: &Db, addr: &str, extra: &[&str], raw: &[u8]) -> (String, String) {
    message_at_to(db, addr, extra, raw, "<user@example.org>")
}

fn message_at_to(db: &Db, addr: &str, extra: &[&str], raw: &[u8], rcpt: &str) -> (String, String) {
    let mut serve = Serve::start_at(db, addr, extra);
    let mut script = lua_head(&serve.addr);
    script.push_str(&lua_message(raw, rcpt));
    script.push_str(&lua_echo_header("STATUS", "X-Spam-Status"));
    script.push_str(
        "r = mt.getreply(conn)\n\
         if r == SMFIR_CONTINUE then mt.echo(\"REPLY continue\")\n\
         elseif r == SMFIR_REPLYCODE then mt.echo(\"REPLY replycode\")\n\
         elseif r == SMFIR_DISCARD then mt.echo(\"REPLY discard\")\n\
         elseif r == SMFIR_ACCEPT then mt.echo(\"REPLY accept\")\n\
         else mt.echo(\"REPLY other\") end\n\
         if mt.eom_check(conn, MT_QUARANTINE) then mt.echo(\"QUARANTINE yes\") end\n\
         if mt.eom_check(conn, MT_SMTPREPLY, \"550\", \"5.7.1\", \"Message judged spam\") then mt.echo(\"SMTP 550 5.7.1\") end\n\
         mt.disconnect(conn)\n",
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = miltertest(tmp.path(), &script);
    let (_, log) = serve.finish();
    (out, log)
}

#[test]
fn miltertest_spam_actions_apply_to_spam_only() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    // A message of each verdict, as filter judges them.
    let first = |word: &str| {
        sample_files()
            .iter()
            .map(|f| std::fs::read(f).unwrap())
            .find(|raw| filter_status(&db, raw).starts_with(word))
            .expect("a sample message of that verdict")
    };
    let (spam, ham) = (first("Yes,"), first("No,"));
    for (action, reply) in [
        ("accept", "continue"),
        ("reject", "replycode"),
        ("discard", "discard"),
        ("quarantine", "continue"),
    ] {
        let extra = ["--milter-spam-action", action];
        let (out, log) = one_message(&db, &extra, &spam);
        assert_eq!(tagged(&out, "REPLY"), vec![reply], "{action}\n{out}\n{log}");
        let fields = matches!(action, "accept" | "quarantine");
        assert_eq!(
            tagged(&out, "STATUS")[0].starts_with(" Yes,"),
            fields,
            "{action}\n{out}"
        );
        assert_eq!(
            out.contains("QUARANTINE yes"),
            action == "quarantine",
            "{out}"
        );
        assert_eq!(out.contains("SMTP 550 5.7.1"), action == "reject", "{out}");
        // Ham is accepted with its fields whatever the spam action.
        let (out, _) = one_message(&db, &extra, &ham);
        assert_eq!(tagged(&out, "REPLY"), vec!["continue"], "{action}\n{out}");
        assert!(tagged(&out, "STATUS")[0].starts_with(" No,"), "{out}");
        assert!(
            !out.contains("QUARANTINE") && !out.contains("SMTP"),
            "{out}"
        );
    }
}

#[test]
fn miltertest_no_verdict_is_accepted_with_the_unknown_status() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let trained = Db::new();
    trained.train_sample();
    let raw = std::fs::read(&sample_files()[0]).unwrap();
    // Larger than the limit: judged by no model, said so in the log.
    let mut large = raw.clone();
    large.extend(std::iter::repeat_n(b"padding line\r\n", 400).flatten());
    let (out, log) = one_message(
        &trained,
        &["--max-size", "4K", "--milter-spam-action", "reject"],
        &large,
    );
    assert_eq!(tagged(&out, "REPLY"), vec!["continue"], "{out}");
    let status = tagged(&out, "STATUS");
    assert!(
        status[0].starts_with(" Unknown, reason=too-large, version="),
        "{out}"
    );
    assert!(log.contains("why=message larger than 4096 bytes"), "{log}");
    // No model at all.
    let empty = Db::new();
    let (out, log) = one_message(&empty, &[], &raw);
    assert_eq!(tagged(&out, "REPLY"), vec!["continue"], "{out}");
    let want = filter_status(&empty, &raw);
    assert!(want.starts_with("Unknown, reason=no-model"), "{want}");
    assert_eq!(tagged(&out, "STATUS"), vec![format!(" {want}")], "{out}");
    assert!(log.contains("why="), "{log}");
}

#[test]
fn miltertest_a_message_is_measured_with_lf_line_ends_as_filter_measures_it() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let trained = Db::new();
    trained.train_sample();
    // Under 4K with LF line ends (as a delivery agent hands `filter` the
    // message), over it in SMTP's CRLF, as the MTA sends the body.
    let mut lf = std::fs::read(&sample_files()[0]).unwrap();
    while lf.len() < 3_900 {
        lf.extend_from_slice(b"pad\n");
    }
    let crlf: Vec<u8> = lf
        .split_inclusive(|&b| b == b'\n')
        .flat_map(|line| match line.strip_suffix(b"\n") {
            Some(text) => [text, b"\r\n"].concat(),
            None => line.to_vec(),
        })
        .collect();
    assert!(crlf.len() > 4_096, "{}", crlf.len());
    let (out, log) = one_message(&trained, &["--max-size", "4K"], &crlf);
    let want = filter_status(&trained, &lf);
    assert!(!want.starts_with("Unknown"), "{want}");
    assert_eq!(
        tagged(&out, "STATUS"),
        vec![format!(" {want}")],
        "{out}\n{log}"
    );
}

/// The Postfix recipe, and the milter address in it.
const CONTRIB: &str = "contrib/postfix-milter.cf";
const CONTRIB_MILTER: &str = "inet:127.0.0.1:11340";

/// A Postfix of its own: `smtpd` on a loopback port, the milter lines of
/// contrib/postfix-milter.cf (`milter_default_action = accept`), mail for user@example.org delivered
/// by `virtual` into a Maildir; everything under a temporary directory.
/// `message_drop_headers` is emptied so that a sent Return-Path stays, and
/// the delivered message can be compared with the sent one.
/// Stopped when dropped.
struct Postfix {
    dir: tempfile::TempDir,
    port: u16,
}

impl Postfix {
    /// Starts it with contrib/postfix-milter.cf's lines for the milter at
    /// `milter` (`inet:HOST:PORT`), or `None` (said why) where Postfix
    /// cannot run here.
    fn start(milter: &str) -> Option<Postfix> {
        if !have("postfix", "postfix") || !have("smtp-source", "postfix") {
            return None;
        }
        if !nix::unistd::Uid::effective().is_root() {
            let required = std::env::var_os("CI").is_some()
                || std::env::var_os("BAYESMAIL_REQUIRE_CORPUS").is_some();
            assert!(!required, "Postfix needs root to start");
            eprintln!("Postfix needs root to start: test skipped");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Postfix's daemons run as its own user: they must reach the tree.
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        for sub in ["etc", "spool", "data", "mail"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        let nobody = 65534;
        std::os::unix::fs::chown(d.join("mail"), Some(nobody), Some(nobody)).unwrap();
        let postfix = nix::unistd::User::from_name("postfix")
            .unwrap()
            .expect("the postfix user (made by the package)");
        std::os::unix::fs::chown(d.join("data"), Some(postfix.uid.as_raw()), None).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = d.display();
        // The milter lines as contrib/postfix-milter.cf gives them, at
        // the address of the server under test.
        let contrib = std::fs::read_to_string(crate::common::root().join(CONTRIB)).unwrap();
        assert!(contrib.contains(CONTRIB_MILTER), "{contrib}");
        let contrib = contrib.replace(CONTRIB_MILTER, milter);
        std::fs::write(
            dir.path().join("etc/main.cf"),
            format!(
                "compatibility_level = 3.6\n\
                 queue_directory = {d}/spool\n\
                 data_directory = {d}/data\n\
                 maillog_file_prefixes = {d}\n\
                 maillog_file = {d}/maillog\n\
                 mail_owner = postfix\n\
                 myhostname = mx.example.net\n\
                 mydomain = example.net\n\
                 mydestination =\n\
                 inet_interfaces = loopback-only\n\
                 inet_protocols = ipv4\n\
                 mynetworks = 127.0.0.0/8\n\
                 relayhost =\n\
                 alias_maps =\n\
                 alias_database =\n\
                 biff = no\n\
                 smtputf8_enable = no\n\
                 message_drop_headers =\n\
                 virtual_mailbox_domains = example.org\n\
                 virtual_mailbox_base = {d}/mail\n\
                 virtual_mailbox_maps = texthash:{d}/etc/vmailbox\n\
                 virtual_uid_maps = static:{nobody}\n\
                 virtual_gid_maps = static:{nobody}\n\
                 milter_connect_timeout = 5s\n\
                 {contrib}"
            ),
        )
        .unwrap();
        std::fs::write(dir.path().join("etc/vmailbox"), "user@example.org user/\n").unwrap();
        let mut master = format!("127.0.0.1:{port} inet n - n - - smtpd\n");
        for line in [
            "pickup unix n - n 60 1 pickup",
            "cleanup unix n - n - 0 cleanup",
            "qmgr unix n - n 300 1 qmgr",
            "rewrite unix - - n - - trivial-rewrite",
            "bounce unix - - n - 0 bounce",
            "defer unix - - n - 0 bounce",
            "trace unix - - n - 0 bounce",
            "verify unix - - n - 1 verify",
            "flush unix n - n 1000? 0 flush",
            "proxymap unix - - n - - proxymap",
            "showq unix n - n - - showq",
            "error unix - - n - - error",
            "retry unix - - n - - error",
            "discard unix - - n - - discard",
            "local unix - n n - - local",
            "virtual unix - n n - - virtual",
            "anvil unix - - n - 1 anvil",
            "scache unix - - n - 1 scache",
            "postlog unix-dgram n - n - 1 postlogd",
        ] {
            master.push_str(line);
            master.push('\n');
        }
        std::fs::write(dir.path().join("etc/master.cf"), master).unwrap();
        let out = Command::new("postfix")
            .arg("-c")
            .arg(dir.path().join("etc"))
            .arg("start")
            .output()
            .expect("postfix runs");
        let postfix = Postfix { dir, port };
        assert!(
            out.status.success(),
            "postfix start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            postfix.maillog()
        );
        // smtpd answers once master has bound the port.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "smtpd not listening\n{}",
                postfix.maillog()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(postfix)
    }

    fn maillog(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("maillog")).unwrap_or_default()
    }

    /// Submits `raw` over SMTP to user@example.org.
    fn send(&self, raw: &[u8]) {
        let (ok, why) = self.try_send(raw);
        assert!(ok, "smtp-source: {why}\n{}", self.maillog());
    }

    /// Submits `raw`; returns whether it was taken, and smtp-source's
    /// complaint.
    fn try_send(&self, raw: &[u8]) -> (bool, String) {
        self.try_send_to(raw, "user@example.org")
    }

    /// [`Postfix::try_send`] with the recipient written `rcpt`.
    fn try_send_to(&self, raw: &[u8], rcpt: &str) -> (bool, String) {
        let file = self.dir.path().join("outgoing.eml");
        std::fs::write(&file, raw).unwrap();
        let out = Command::new("smtp-source")
            .arg("-F")
            .arg(&file)
            .args(["-f", "sender@example.org", "-t", rcpt])
            .arg(format!("127.0.0.1:{}", self.port))
            .output()
            .expect("smtp-source runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The names of the messages delivered so far.
    fn mailbox(&self) -> std::collections::BTreeSet<std::ffi::OsString> {
        crate::common::file_names(&self.dir.path().join("mail/user/new"))
    }

    /// Submits `raw` over SMTP and waits for its delivery; returns what
    /// was delivered.
    fn deliver(&self, raw: &[u8]) -> Vec<u8> {
        self.deliver_with(|| self.send(raw))
    }

    /// Submits `raw` through Postfix's sendmail(1) (pickup, and so
    /// `non_smtpd_milters`) and waits for its delivery.
    fn deliver_local(&self, raw: &[u8]) -> Vec<u8> {
        self.deliver_with(|| {
            let mut cmd = Command::new("sendmail");
            cmd.arg("-C").arg(self.dir.path().join("etc")).args([
                "-f",
                "sender@example.org",
                "user@example.org",
            ]);
            let out = crate::common::run_with_stdin(cmd, raw);
            assert!(
                out.status.success(),
                "sendmail: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.maillog()
            );
        })
    }

    /// Runs `submit` and waits for one more message in the Maildir.
    fn deliver_with(&self, submit: impl FnOnce()) -> Vec<u8> {
        let before = self.mailbox();
        submit();
        crate::common::one_more_file(&self.dir.path().join("mail/user/new"), &before, 60, || {
            self.maillog()
        })
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let pid_file = self.dir.path().join("spool/pid/master.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        let _ = Command::new("postfix")
            .arg("-c")
            .arg(self.dir.path().join("etc"))
            .arg("stop")
            .output();
        if let Some(pid) = pid {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// A delivered message split into what Postfix and we added and the rest:
/// the delivery fields `virtual` puts on top (Return-Path, X-Original-To,
/// Delivered-To), then our X-Spam-Status (None if absent), the message with
/// our fields taken out and renamed fields named back, and Postfix's own
/// Received field taken out: what was sent.
fn unwrap_delivered(delivered: &[u8]) -> (Option<String>, Vec<u8>) {
    let text = delivered;
    let mut rest = text;
    for prefix in [&b"Return-Path: "[..], b"X-Original-To: ", b"Delivered-To: "] {
        assert!(
            rest.starts_with(prefix),
            "{}",
            String::from_utf8_lossy(text)
        );
        let end = rest.iter().position(|&b| b == b'\n').unwrap() + 1;
        rest = &rest[end..];
    }
    let (restored, status) = if rest.starts_with(b"X-Spam-") {
        let (restored, status, _) = crate::common::strip_ours(rest);
        (restored, Some(status))
    } else {
        (rest.to_vec(), None)
    };
    // Postfix's Received field, with its folded lines.
    assert!(
        restored.starts_with(b"Received: from "),
        "{}",
        String::from_utf8_lossy(&restored)
    );
    let mut at = 0;
    loop {
        at += restored[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
        if !matches!(restored.get(at), Some(b' ' | b'\t')) {
            break;
        }
    }
    (status, restored[at..].to_vec())
}

/// `raw` as the Maildir holds it after `smtp-source -F`: LF line ends,
/// and one more line end (smtp-source ends every line it reads with one,
/// the empty one after a file's last line end too).
fn as_stored(raw: &[u8]) -> Vec<u8> {
    let mut lf: Vec<u8> = raw.iter().copied().filter(|&b| b != b'\r').collect();
    lf.push(b'\n');
    lf
}

#[test]
fn postfix_delivers_each_message_with_filters_fields_and_nothing_else_changed() {
    let db = Db::new();
    db.train_sample();
    let serve = Serve::start(&db, &[]);
    let Some(postfix) = Postfix::start(&format!("inet:{}", serve.addr)) else {
        return;
    };
    let mut sent: Vec<Vec<u8>> = sample_files()
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    sent.push(FORGED.to_vec());
    let delivered: Vec<Vec<u8>> = sent.iter().map(|raw| postfix.deliver(raw)).collect();
    let tmp = tempfile::tempdir().unwrap();
    let mut spam = 0;
    for (i, (raw, got)) in sent.iter().zip(&delivered).enumerate() {
        let (status, restored) = unwrap_delivered(got);
        let status =
            status.unwrap_or_else(|| panic!("no fields:\n{}", String::from_utf8_lossy(got)));
        // Delivered = sent + our fields.
        let sent_lf = as_stored(raw);
        let same = restored
            .iter()
            .zip(&sent_lf)
            .take_while(|(a, b)| a == b)
            .count();
        assert!(
            restored == sent_lf,
            "message {i} changed at byte {same}: {:?} for {:?}",
            String::from_utf8_lossy(&restored[same..(same + 80).min(restored.len())]),
            String::from_utf8_lossy(&sent_lf[same..(same + 80).min(sent_lf.len())]),
        );
        // The verdict is classify's on what was sent.
        let file = tmp.path().join(format!("{i}.eml"));
        std::fs::write(&file, raw).unwrap();
        let classified = &db.classify(&[&file])[0];
        let word = match classified["verdict"].as_str().unwrap() {
            "spam" => "Yes",
            "ham" => "No",
            _ => "Unsure",
        };
        assert_eq!(
            crate::common::status_word(&status),
            word,
            "{status} {classified}"
        );
        assert_eq!(status, filter_status(&db, raw), "message {i}");
        spam += usize::from(word == "Yes");
        if word == "Yes" {
            assert!(got.windows(18).any(|w| w == b"\nX-Spam-Flag: YES\n"), "{i}");
        }
    }
    assert!(spam > 5, "{spam}");
    // The forged fields: renamed where they were, ours on top.
    let forged = String::from_utf8_lossy(delivered.last().unwrap()).into_owned();
    let at = forged.find("\nReceived: from ").unwrap();
    assert!(forged[..at].contains("\nX-Spam-Status: "), "{forged}");
    assert!(
        forged[at..].contains(
            "From: a@example.org\nOld-X-Spam-Flag: YES\nSubject: cheap meds\n\
             Old-x-spam-status: No, probability=0.000001\nX-Spam-Level: **\n\
             Old-X-Spam-Flag: YES\n"
        ),
        "{forged}"
    );
    assert!(
        forged.contains("\n\nBody text.\nX-Spam-Flag: in the body\n"),
        "{forged}"
    );
}

#[test]
fn postfix_still_delivers_when_serve_is_stopped_mid_run() {
    let db = Db::new();
    db.train_sample();
    let mut serve = Serve::start(&db, &[]);
    let Some(postfix) = Postfix::start(&format!("inet:{}", serve.addr)) else {
        return;
    };
    let files = sample_files();
    let first = std::fs::read(&files[0]).unwrap();
    let second = std::fs::read(&files[files.len() - 1]).unwrap();
    let delivered = postfix.deliver(&first);
    assert!(unwrap_delivered(&delivered).0.is_some());
    assert!(serve.stop(), "serve exits 0 on SIGTERM\n{}", serve.log());
    let delivered = postfix.deliver(&second);
    let (status, restored) = unwrap_delivered(&delivered);
    assert_eq!(status, None, "{}", String::from_utf8_lossy(&delivered));
    assert!(
        restored == as_stored(&second),
        "{}",
        String::from_utf8_lossy(&delivered)
    );
    let log = postfix.maillog();
    assert!(
        log.contains(&format!("connect to Milter service inet:{}", serve.addr)),
        "{log}"
    );
}

/// A message of thousands of fields named like ours, the sender's, is
/// delivered through Postfix with our fields on top and the first hundred
/// of them renamed, the rest as they came. Before, every one was renamed:
/// two changes each, which Postfix accepted with 250 and then could not
/// read back from its queue file (`too many reverse jump records`), and
/// the message was never delivered; working out the renaming also took
/// time that grew with the square of their number.
#[test]
fn postfix_delivers_a_message_of_thousands_of_forged_fields() {
    let db = Db::new();
    db.train_sample();
    let serve = Serve::start(&db, &[]);
    let Some(postfix) = Postfix::start(&format!("inet:{}", serve.addr)) else {
        return;
    };
    let fields = 12_000;
    let mut raw = b"From: a@example.org\r\nSubject: many flags\r\n".to_vec();
    for _ in 0..fields {
        raw.extend_from_slice(b"X-Spam-Flag: NO\r\n");
    }
    raw.extend_from_slice(b"Message-ID: <many@example.org>\r\n\r\nBody text.\r\n");
    let delivered = postfix.deliver(&raw);
    let text = String::from_utf8_lossy(&delivered);
    let (status, _) = unwrap_delivered(&delivered);
    assert!(status.is_some(), "no status of ours");
    let lines = |line: &str| text.lines().filter(|l| *l == line).count();
    let (renamed, kept) = (lines("Old-X-Spam-Flag: NO"), lines("X-Spam-Flag: NO"));
    assert_eq!(renamed, bayesmail::serve::RENAMED_FIELDS);
    assert_eq!(renamed + kept, fields);
    assert!(text.contains("\n\nBody text.\n"));
}

/// The recipient's model is chosen by the address Postfix delivers to
/// (`{rcpt_addr}`), not by how the sender wrote it: a source route
/// (`<@relay.example:user@example.org>`) or a quoted local part
/// (`"us\er"@example.org`) is user@example.org's mail. Before, each named
/// a user of its own, or none, and was judged by the global model.
#[test]
fn postfix_recipients_are_named_as_postfix_resolves_them() {
    let db = Db::new();
    db.train_sample();
    let serve = Serve::start(&db, &[]);
    let Some(postfix) = Postfix::start(&format!("inet:{}", serve.addr)) else {
        return;
    };
    let raw = std::fs::read(&sample_files()[0]).unwrap();
    for (i, rcpt) in ["@relay.example:user@example.org", "\"us\\er\"@example.org"]
        .into_iter()
        .enumerate()
    {
        let delivered = postfix.deliver_with(|| {
            let (ok, why) = postfix.try_send_to(&raw, rcpt);
            assert!(ok, "smtp-source: {why}\n{}", postfix.maillog());
        });
        assert!(unwrap_delivered(&delivered).0.is_some());
        // The message's log line (written as the milter answers).
        let deadline = Instant::now() + Duration::from_secs(30);
        let log = loop {
            let log = serve.log();
            if log.matches(" user=").count() > i || Instant::now() > deadline {
                break log;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(
            log.matches(" user=user@example.org ").count(),
            i + 1,
            "{rcpt}\n{log}"
        );
    }
}

#[test]
fn postfix_rejects_spam_only_when_told_to() {
    let db = Db::new();
    db.train_sample();
    let serve = Serve::start(&db, &["--milter-spam-action", "reject"]);
    let Some(postfix) = Postfix::start(&format!("inet:{}", serve.addr)) else {
        return;
    };
    let first = |word: &str| {
        sample_files()
            .iter()
            .map(|f| std::fs::read(f).unwrap())
            .find(|raw| filter_status(&db, raw).starts_with(word))
            .unwrap()
    };
    let (spam, ham) = (first("Yes,"), first("No,"));
    let (taken, why) = postfix.try_send(&spam);
    assert!(
        !taken && why.contains("550 5.7.1 Message judged spam"),
        "{why}"
    );
    let delivered = postfix.deliver(&ham);
    let (status, _) = unwrap_delivered(&delivered);
    assert!(status.unwrap().starts_with("No,"));
    // The spam was not delivered: the ham is the only message.
    assert_eq!(postfix.mailbox().len(), 1, "{}", postfix.maillog());
    let log = postfix.maillog();
    assert!(
        log.contains("milter-reject: END-OF-MESSAGE") && log.contains("5.7.1 Message judged spam"),
        "{log}"
    );
}

#[test]
fn miltertest_over_a_unix_socket() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let socket = db.path("milter.sock");
    let raw = std::fs::read(&sample_files()[1]).unwrap();
    let (out, log) = one_message_at(&db, &format!("unix:{}", utf8(&socket)), &[], &raw);
    assert_eq!(
        tagged(&out, "STATUS"),
        vec![format!(" {}", filter_status(&db, &raw))],
        "{out}\n{log}"
    );
    // The server took its socket away when it stopped.
    assert!(!socket.exists());
}

#[test]
fn the_readmes_postfix_lines_are_the_contrib_file() {
    let docs = std::fs::read_to_string(crate::common::root().join("README.md")).unwrap();
    let fence = "```postfix-milter\n";
    let start = docs.find(fence).expect("a postfix-milter block") + fence.len();
    let end = start + docs[start..].find("```").unwrap();
    let contrib = std::fs::read_to_string(crate::common::root().join(CONTRIB)).unwrap();
    assert_eq!(&docs[start..end], contrib);
    assert!(docs.contains(&format!("]({CONTRIB})")));
}

/// A message is in flight from its MAIL FROM: told to stop after the
/// recipients (before the first field; before, the connection was ended
/// there and the MTA passed the message on unjudged, a forged flag with
/// it) or between the header and the body, serve answers it, then ends
/// the connection.
#[test]
fn miltertest_sigterm_lets_the_message_in_flight_finish_then_ends_the_connection() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let raw = std::fs::read(&sample_files()[2]).unwrap();
    let message = lua_message(&raw, "<user@example.org>");
    for stop_before in ["check(mt.header(conn,", "check(mt.eoh(conn))"] {
        sigterm_before(&db, &raw, &message, stop_before);
    }
}

fn sigterm_before(db: &Db, raw: &[u8], message: &str, stop_before: &str) {
    let mut serve = Serve::start(db, &[]);
    let pid = serve.child.id();
    let (head, tail) = message.split_at(message.find(stop_before).unwrap());
    let mut script = lua_head(&serve.addr);
    script.push_str(head);
    script.push_str(&format!(
        "os.execute(\"kill -TERM {pid}\")\nmt.sleep(0.5)\n"
    ));
    script.push_str(tail);
    script.push_str(&lua_echo_header("STATUS", "X-Spam-Status"));
    // The next message finds the connection closed.
    script.push_str(
        "err = mt.mailfrom(conn, \"<sender@example.org>\")\n\
         if err == nil then err = mt.rcptto(conn, \"<user@example.org>\") end\n\
         if err == nil then mt.echo(\"NEXT taken\") else mt.echo(\"NEXT refused\") end\n",
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = miltertest(tmp.path(), &script);
    assert_eq!(
        tagged(&out, "STATUS"),
        vec![format!(" {}", filter_status(db, raw))],
        "stopped before {stop_before}: {out}"
    );
    assert_eq!(tagged(&out, "NEXT"), vec!["refused"], "{out}");
    let (ok, log) = serve.finish();
    assert!(ok && !log.contains("still open"), "{log}");
}

#[test]
fn postfix_non_smtpd_milters_judge_local_submissions_too() {
    let db = Db::new();
    db.train_sample();
    let mut serve = Serve::start(&db, &[]);
    let Some(postfix) = Postfix::start(&format!("inet:{}", serve.addr)) else {
        return;
    };
    let delivered = String::from_utf8(postfix.deliver_local(FORGED)).unwrap();
    let status = filter_status(&db, FORGED);
    let at = delivered
        .find("\nReceived: by mx.example.net (Postfix, from userid ")
        .unwrap();
    assert!(
        delivered[..at].ends_with(&format!("\nX-Spam-Status: {status}")),
        "{delivered}"
    );
    assert!(
        delivered[at..].contains(
            "From: a@example.org\nOld-X-Spam-Flag: YES\nSubject: cheap meds\n\
             Old-x-spam-status: No, probability=0.000001\nX-Spam-Level: **\n\
             Old-X-Spam-Flag: YES\n"
        ),
        "{delivered}"
    );
    let (_, log) = serve.finish();
    assert!(log.contains("user=user@example.org"), "{log}");
}

#[test]
fn miltertest_the_spam_action_can_come_from_the_config_file() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let spam = sample_files()
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .find(|raw| filter_status(&db, raw).starts_with("Yes,"))
        .unwrap();
    std::fs::write(
        db.path("config.toml"),
        "[serve]\nmilter_spam_action = \"quarantine\"\n",
    )
    .unwrap();
    let (out, _) = one_message(&db, &[], &spam);
    assert!(out.contains("QUARANTINE yes"), "{out}");
    // A flag wins over the key.
    let (out, _) = one_message(&db, &["--milter-spam-action", "reject"], &spam);
    assert!(
        out.contains("SMTP 550 5.7.1") && !out.contains("QUARANTINE"),
        "{out}"
    );
    // A bad value is refused before anything listens.
    std::fs::write(
        db.path("config.toml"),
        "[serve]\nmilter_spam_action = \"bounce\"\n",
    )
    .unwrap();
    let out = db.run(&["serve", "--milter", "127.0.0.1:0"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let file = format!("config file {}: ", db.path("config.toml").display());
    assert!(
        err.contains(&format!("{file}[serve] milter_spam_action")) && err.contains("bounce"),
        "{err}"
    );
    // Each [serve] value the file gets wrong is said with the file's name.
    for (line, key) in [
        ("socket_mode = \"999\"", "socket_mode"),
        ("max_held = \"lots\"", "max_held"),
        ("allow = [\"nowhere\"]", "allow"),
        ("user_db = \"/x/%q\"", "user_db"),
    ] {
        std::fs::write(db.path("config.toml"), format!("[serve]\n{line}\n")).unwrap();
        let out = db.run(&["serve", "--milter", "127.0.0.1:0"], None);
        assert!(!out.status.success(), "{line}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{file}[serve] {key}: ")),
            "{line}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// Once the SMTP session has begun the MTA may stay silent for as long as
/// its client is slow, not only `--timeout`: between two messages
/// (Sendmail sends no ABORT after a message it accepted) and between a
/// message's RCPT and its fields (the client's DATA trickling in, which
/// the MTA passes on only once it is whole). Each message after such a
/// pause must still be judged on the same connection; a milter that gave
/// up would leave it to the MTA's default action, unjudged.
#[test]
fn miltertest_a_pause_between_two_messages_keeps_the_connection() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let mut serve = Serve::start(&db, &["--timeout", "2"]);
    let raw = std::fs::read(&sample_files()[0]).unwrap();
    let mut script = lua_head(&serve.addr);
    for i in 0..3 {
        let mut message = lua_message(&raw, "<user@example.org>");
        match i {
            1 => script.push_str("mt.sleep(6)\n"),
            2 => {
                let fields = message.find("check(mt.header(").unwrap();
                message.insert_str(fields, "mt.sleep(6)\n");
            }
            _ => {}
        }
        script.push_str(&message);
        script.push_str(&lua_echo_header(&format!("STATUS{i}"), "X-Spam-Status"));
        script
            .push_str("if mt.getreply(conn) ~= SMFIR_CONTINUE then error(\"not continued\") end\n");
    }
    script.push_str("mt.disconnect(conn)\n");
    let tmp = tempfile::tempdir().unwrap();
    let out = miltertest(tmp.path(), &script);
    let want = format!(" {}", filter_status(&db, &raw));
    for i in 0..3 {
        assert_eq!(
            tagged(&out, &format!("STATUS{i}")),
            vec![want.as_str()],
            "{out}"
        );
    }
    let (_, log) = serve.finish();
    assert!(!log.contains("sent nothing for too long"), "{log}");
}

/// A message is read and judged under the size limit it began with: a
/// reload to a larger one while its body comes does not give a verdict on
/// the bytes kept before it and the chunks after (the ones between were
/// dropped), nor a smaller one cut it short.
#[test]
fn miltertest_a_reload_mid_message_leaves_its_size_limit() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let config = db.path("config.toml");
    std::fs::write(&config, "[serve]\nmax_size = \"1K\"\n").unwrap();
    let serve = Serve::start(&db, &[]);
    let pid = serve.child.id() as i32;
    let mut script = lua_head(&serve.addr);
    script.push_str(
        "check(mt.mailfrom(conn, \"<sender@example.org>\"))\n\
         check(mt.rcptto(conn, \"<user@example.org>\"))\n\
         check(mt.header(conn, \"Subject\", \"hello\"))\n\
         check(mt.eoh(conn))\n",
    );
    let chunk = "a line of the body\\n".repeat(120);
    script.push_str(&format!("check(mt.bodystring(conn, \"{chunk}\"))\n"));
    script.push_str("mt.sleep(4)\n");
    script.push_str(&format!("check(mt.bodystring(conn, \"{chunk}\"))\n"));
    script.push_str("check(mt.eom(conn))\n");
    script.push_str(&lua_echo_header("STATUS", "X-Spam-Status"));
    script.push_str("mt.disconnect(conn)\n");
    let reload = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        std::fs::write(&config, "[serve]\nmax_size = \"64K\"\n").unwrap();
        // SAFETY: kill(2) on the id of the test's own child.
        unsafe { libc::kill(pid, libc::SIGHUP) };
    });
    let tmp = tempfile::tempdir().unwrap();
    let out = miltertest(tmp.path(), &script);
    reload.join().unwrap();
    assert!(serve.log().contains("reloaded"), "{}", serve.log());
    let status = tagged(&out, "STATUS");
    assert!(
        status.len() == 1
            && status[0]
                .trim_start()
                .starts_with("Unknown, reason=too-large"),
        "{out}"
    );
}

/// An MTA that does not let milters add and change header fields (its
/// messages would get no fields, forged ones not renamed) is said in the
/// log, once however many connections it makes.
#[test]
fn an_mta_that_lets_no_fields_be_changed_is_said_once() {
    let db = Db::new();
    db.train_sample();
    let mut serve = Serve::start(&db, &[]);
    // Version 6, actions SMFIF_ADDHDRS alone, every protocol step.
    let optneg = [
        0, 0, 0, 13, b'O', 0, 0, 0, 6, 0, 0, 0, 0x01, 0, 0x1f, 0xff, 0xff,
    ];
    for _ in 0..2 {
        let mut client = std::net::TcpStream::connect(&serve.addr).unwrap();
        std::io::Write::write_all(&mut client, &optneg).unwrap();
        let mut answer = [0u8; 5];
        std::io::Read::read_exact(&mut client, &mut answer).unwrap();
        assert_eq!(answer[4], b'O', "the options are negotiated");
    }
    let (_, log) = serve.finish();
    let said = "the MTA does not let milters add and change header fields";
    assert_eq!(log.matches(said).count(), 1, "{log}");
}

/// A client that connects to the milter port and does not negotiate is
/// dropped after `--timeout`, not kept for the session's idle time (600
/// s): it would hold a connection slot that spamd and HTTP share.
#[test]
fn a_milter_client_that_never_negotiates_is_dropped_after_the_timeout() {
    let db = Db::new();
    db.train_sample();
    let mut serve = Serve::start(&db, &["--timeout", "1"]);
    let mut silent = std::net::TcpStream::connect(&serve.addr).unwrap();
    assert!(
        crate::serve_http::closed_within(&mut silent, std::time::Duration::from_secs(20)),
        "still open"
    );
    // Nor one that sends a byte of its negotiation and no more.
    let mut partial = std::net::TcpStream::connect(&serve.addr).unwrap();
    std::io::Write::write_all(&mut partial, b"\0").unwrap();
    assert!(
        crate::serve_http::closed_within(&mut partial, std::time::Duration::from_secs(20)),
        "still open after a byte"
    );
    // Nor one that negotiates and then says nothing (an MTA starts the
    // session at once): before, it held its connection for ten minutes,
    // and a loopback client holding them all left Postfix without the
    // milter.
    let optneg = [
        0, 0, 0, 13, b'O', 0, 0, 0, 6, 0, 0, 1, 0xff, 0, 0x1f, 0xff, 0xff,
    ];
    let mut tries = 0;
    let mut negotiated = loop {
        tries += 1;
        let began = std::time::Instant::now();
        let mut client = std::net::TcpStream::connect(&serve.addr).unwrap();
        std::io::Write::write_all(&mut client, &optneg).unwrap();
        let sent = began.elapsed();
        let mut answer = [0u8; 5];
        match std::io::Read::read_exact(&mut client, &mut answer) {
            Ok(()) => {
                assert_eq!(answer[4], b'O', "the options are negotiated");
                break client;
            }
            // This thread stalled past the timeout (a loaded machine)
            // before its negotiation went out: rightly dropped; again.
            Err(_) if sent >= std::time::Duration::from_secs(1) && tries < 5 => continue,
            Err(e) => panic!("the negotiation was not answered: {e}"),
        }
    };
    assert!(
        crate::serve_http::closed_within(&mut negotiated, std::time::Duration::from_secs(20)),
        "still open after negotiating"
    );
    let (stopped, log) = serve.finish();
    assert!(log.contains("sent nothing for too long"), "{log}");
    // The stop is said, and its end.
    assert!(stopped, "{log}");
    assert!(
        log.contains("stopping (SIGTERM): no new connections"),
        "{log}"
    );
    assert!(log.trim_end().ends_with("stopped"), "{log}");
}

/// The milter holds a message's bytes of its budget (`--max-held`) as
/// they come: while another connection holds it with a message not yet
/// ended, a message that does not fit gets no verdict (`reason=busy`) and
/// goes on, its forged fields renamed as ever; once that message is
/// answered, messages are judged again.
#[test]
fn miltertest_a_message_past_the_budget_is_passed_on_busy() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let mut serve = Serve::start(&db, &["--max-size", "100K", "--max-held", "150K"]);
    let filler = vec![b'x'; 60_000];
    let mut raw = b"X-Spam-Flag: YES\n".to_vec();
    raw.extend_from_slice(&std::fs::read(&sample_files()[0]).unwrap());
    raw.extend_from_slice(&filler);
    raw.push(b'\n');
    let mut script = lua_head(&serve.addr)
        .replace("conn = ", "holder = ")
        .replace("conn == nil", "holder == nil")
        .replace("(conn,", "(holder,");
    script.push_str(
        "check(mt.mailfrom(holder, \"<a@example.org>\"))\n\
         check(mt.rcptto(holder, \"<user@example.org>\"))\n\
         check(mt.header(holder, \"Subject\", \"held\"))\n\
         check(mt.eoh(holder))\n",
    );
    for _ in 0..2 {
        script.push_str(&format!("check(mt.bodystring(holder, {}))\n", lua(&filler)));
    }
    script.push_str(&lua_head(&serve.addr));
    script.push_str(&lua_message(&raw, "<user@example.org>"));
    script.push_str(&lua_echo_header("BUSY", "X-Spam-Status"));
    script.push_str(
        "if mt.eom_check(conn, MT_HDRCHANGE, \"X-Spam-Flag\", \"\") then mt.echo(\"RENAMED yes\") end\n\
         check(mt.eom(holder))\n",
    );
    script.push_str(&lua_message(&raw, "<user@example.org>"));
    script.push_str(&lua_echo_header("AFTER", "X-Spam-Status"));
    let tmp = tempfile::tempdir().unwrap();
    let out = miltertest(tmp.path(), &script);
    let busy = tagged(&out, "BUSY");
    assert!(
        busy.len() == 1 && busy[0].trim_start().starts_with("Unknown, reason=busy"),
        "{out}"
    );
    assert_eq!(tagged(&out, "RENAMED"), vec!["yes"], "{out}");
    let after = tagged(&out, "AFTER");
    assert!(
        after.len() == 1 && !after[0].starts_with("Unknown"),
        "{out}"
    );
    let (ok, log) = serve.finish();
    assert!(ok && log.contains("reason=busy"), "{log}");
}

/// One copy of a message goes to all its recipients: with users' models
/// and a spam action that loses mail (`discard`), one recipient's model
/// calling it spam must not drop another's copy, whichever comes first.
/// Before, the first recipient's model judged for all: a ham alice had
/// taught her model to call spam was dropped for bob too when alice came
/// first, and delivered when bob did.
#[test]
fn miltertest_one_recipients_model_never_drops_anothers_copy() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let users = db.path("users");
    let pattern = format!("{}/%u", users.display());
    let extra = [
        "--user-db",
        pattern.as_str(),
        "--min-user-messages",
        "1",
        "--milter-spam-action",
        "discard",
    ];
    // Alice's model was taught the other way round: what the global model
    // calls ham, hers calls spam.
    let raw = sample_files()
        .into_iter()
        .filter(|f| f.starts_with(sample_ham()))
        .map(|f| std::fs::read(f).unwrap())
        .find(|raw| filter_status(&db, raw).starts_with("No,"))
        .expect("a sample ham the global model calls ham");
    let alice = users.join("alice@example.org");
    let out = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
        .args([
            "--db",
            utf8(&alice),
            "--config",
            utf8(&db.path("config.toml")),
        ])
        .args(["train", "--spam", utf8(&sample_ham())])
        .args(["--ham", utf8(&sample_spam())])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let reply = |rcpts: &str| {
        let (out, log) = one_message_to(&db, &extra, &raw, rcpts);
        (tagged(&out, "REPLY")[0].to_string(), out, log)
    };
    let (alone, out, log) = reply("<alice@example.org>");
    assert_eq!(
        alone, "discard",
        "alice's own copy is hers to lose\n{out}\n{log}"
    );
    for rcpts in [
        "<bob@example.org>",
        "<alice@example.org> <bob@example.org>",
        "<bob@example.org> <alice@example.org>",
        "<alice@example.org> <Alice@example.org> <bob@example.org>",
    ] {
        let (got, out, log) = reply(rcpts);
        assert_eq!(got, "continue", "{rcpts}\n{out}\n{log}");
        let status = tagged(&out, "STATUS")[0].to_string();
        assert!(
            status.starts_with(" No,") && status.ends_with("model=global"),
            "{status}"
        );
    }
    // Users, not spellings, count towards the cap: nine users each
    // written two ways are nine judgments, not a crowd for the global
    // model alone.
    let rcpts: Vec<String> = (0..9)
        .flat_map(|i| {
            [
                format!("<u{i}+x@example.org>"),
                format!("<U{i}@Example.org.>"),
            ]
        })
        .collect();
    let mut logged = extra.to_vec();
    logged.extend(["--recipient-delimiter", "+"]);
    let (_, log) = one_message_to(&db, &logged, &raw, &rcpts.join(" "));
    let names: Vec<String> = (0..9).map(|i| format!("u{i}@example.org")).collect();
    assert!(log.contains(&format!("user={} ", names.join(";"))), "{log}");
    // More users than that: the global model alone judges, once.
    let crowd: Vec<String> = (0..=16).map(|i| format!("<v{i}@example.org>")).collect();
    let (out, log) = one_message_to(&db, &logged, &raw, &crowd.join(" "));
    assert!(log.contains("user=- "), "{log}");
    assert!(tagged(&out, "STATUS")[0].ends_with("model=global"), "{out}");
}

#[test]
fn miltertest_per_user_the_status_says_which_kind_of_model_judged() {
    if !have("miltertest", "miltertest") {
        return;
    }
    let db = Db::new();
    db.train_sample();
    let users = db.path("users");
    let pattern = format!("{}/%u", users.display());
    let extra = ["--user-db", pattern.as_str(), "--min-user-messages", "1"];
    let raw = std::fs::read(&sample_files()[0]).unwrap();
    let status = |out: &str| tagged(out, "STATUS")[0].to_string();
    // The recipient has no model yet: the global one judges.
    let (out, _) = one_message(&db, &extra, &raw);
    let global = status(&out);
    assert!(global.ends_with(", model=global"), "{out}");
    // Once the recipient's own model holds one of each, it judges; the
    // field names the kind of model, never the user (another recipient of
    // the same copy may be a Bcc).
    let own = users.join("user@example.org");
    let first = |dir: PathBuf| {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files.swap_remove(0)
    };
    for (class, file) in [
        ("--spam", first(sample_spam())),
        ("--ham", first(sample_ham())),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bayesmail"))
            .args([
                "--db",
                utf8(&own),
                "--config",
                utf8(&db.path("config.toml")),
            ])
            .args(["learn", class, utf8(&file)])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let (out, _) = one_message(&db, &extra, &raw);
    let user = status(&out);
    assert!(user.ends_with(", model=user"), "{out}");
    assert!(!user.contains("example.org"), "{user}");
    // The sender writes the recipient's case: the same user's model.
    let (out, _) = one_message_to(&db, &extra, &raw, "<USER@Example.ORG>");
    assert!(status(&out).ends_with(", model=user"), "{out}");
    // An address extension is the same user where the MTA says so
    // (--recipient-delimiter, as Postfix's recipient_delimiter), and a
    // domain's trailing dot always.
    let (out, _) = one_message_to(&db, &extra, &raw, "<user@example.org.>");
    assert!(status(&out).ends_with(", model=user"), "{out}");
    let (out, _) = one_message_to(&db, &extra, &raw, "<user+lists@example.org>");
    assert_eq!(status(&out), global, "{out}");
    let mut delimited = extra.to_vec();
    delimited.extend(["--recipient-delimiter", "+-"]);
    for rcpt in ["<user+lists@example.org>", "<USER-x+y@example.org.>"] {
        let (out, _) = one_message_to(&db, &delimited, &raw, rcpt);
        assert!(status(&out).ends_with(", model=user"), "{rcpt}: {out}");
    }
    // A recipient whose name is refused (an apostrophe is not among the
    // safe characters) is judged by the global model, and the log says
    // why: a verdict all the same, for it and every other recipient.
    let (out, log) = one_message_to(&db, &extra, &raw, "<o'brien@example.org>");
    assert_eq!(status(&out), global, "{out}");
    assert!(log.contains("judged with the global model"), "{log}");
    // A user's model that cannot be read: the global one judges, and the
    // log says so (a user without a model is not worth a line).
    let model = own.join("model.bin");
    let len = std::fs::metadata(&model).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (out, log) = one_message(&db, &extra, &raw);
    assert_eq!(status(&out), global, "{out}");
    assert!(
        log.contains("user user@example.org: ") && log.contains("judged with the global model"),
        "{log}"
    );
    // Without --user-db there is one model and nothing to say: filter's
    // fields exactly.
    let (out, _) = one_message(&db, &[], &raw);
    assert_eq!(status(&out).trim_start(), filter_status(&db, &raw), "{out}");
}
