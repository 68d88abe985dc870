//! The Sendmail recipe (contrib/sendmail-milter.mc) run by a real
//! Sendmail against `bayesmail serve --milter`: Debian's sendmail-bin 8.17
//! and the sendmail-cf macros, unpacked by `.ci/run` under
//! `target/mta/sendmail` because the package conflicts with Postfix. Each
//! test builds a sendmail.cf of its own with m4 around the recipe, feeds
//! Sendmail SMTP on stdin (`-bs`, as root) and lets its local mailer (a
//! shell script) write each message into a Maildir in a temporary
//! directory.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Db, root, sample_files};
use crate::serve_exim::unpacked;
use crate::serve_milter::{Serve, have};

/// The recipe, and the milter address in it that the tests replace.
const CONTRIB: &str = "contrib/sendmail-milter.mc";
const CONTRIB_MILTER: &str = "S=inet:11340@127.0.0.1";

/// The host name Sendmail runs under: Sendmail sleeps a minute before it
/// reads its configuration when the system's name has no dot, so it runs
/// in a UTS namespace of its own under this one.
const HOSTNAME: &str = "mx.bayesmail.test";

/// Sendmail with a configuration of its own: `sendmail.cf` from the
/// recipe and m4, no aliases, no DNS, mail for any local part of
/// bayesmail.test handed to `deliver`, a script writing into `mail/`.
struct Sendmail {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Sendmail {
    /// `None`, said why, where Sendmail, its macros or m4 are missing.
    fn new(milter: &str) -> Option<Sendmail> {
        let bin = unpacked(
            "BAYESMAIL_SENDMAIL",
            "sendmail",
            "usr/libexec/sendmail/sendmail",
            "sendmail-bin",
        )?;
        let cf = unpacked(
            "BAYESMAIL_SENDMAIL_CF",
            "sendmail",
            "usr/share/sendmail/cf/m4/cf.m4",
            "sendmail-cf",
        )?;
        if !have("m4", "m4") || !have("unshare", "util-linux") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // The local mailer runs as Sendmail's default user.
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        for sub in ["queue", "mail", "mail/tmp", "mail/new"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        for sub in ["mail", "mail/tmp", "mail/new"] {
            std::fs::set_permissions(
                d.join(sub),
                std::os::unix::fs::PermissionsExt::from_mode(0o777),
            )
            .unwrap();
        }
        let deliver = d.join("deliver");
        std::fs::write(
            &deliver,
            format!(
                "#!/bin/sh\n\
                 name=\"$(date +%s.%N).$$\"\n\
                 cat > '{d}/mail/tmp/'\"$name\" && mv '{d}/mail/tmp/'\"$name\" '{d}/mail/new/'\"$name\"\n",
                d = d.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &deliver,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(d.join("service.switch"), "hosts files\n").unwrap();
        std::fs::write(d.join("hosts"), format!("127.0.0.1 {HOSTNAME} localhost\n")).unwrap();
        // The recipe as contrib/ gives it, at the address of the server
        // under test.
        let contrib = std::fs::read_to_string(root().join(CONTRIB)).unwrap();
        assert!(contrib.contains(CONTRIB_MILTER), "{contrib}");
        std::fs::write(
            d.join("milter.mc"),
            contrib.replace(CONTRIB_MILTER, &format!("S={milter}")),
        )
        .unwrap();
        let d = d.display();
        let mc = format!(
            "divert(-1)\n\
             divert(0)dnl\n\
             include(`{cf}')dnl\n\
             VERSIONID(`bayesmail test')dnl\n\
             OSTYPE(`linux')dnl\n\
             define(`confDOMAIN_NAME', `{HOSTNAME}')dnl\n\
             define(`QUEUE_DIR', `{d}/queue')dnl\n\
             define(`STATUS_FILE', `{d}/statistics')dnl\n\
             define(`confSERVICE_SWITCH_FILE', `{d}/service.switch')dnl\n\
             define(`confHOSTS_FILE', `{d}/hosts')dnl\n\
             define(`confPID_FILE', `{d}/sendmail.pid')dnl\n\
             define(`confDONT_PROBE_INTERFACES', `true')dnl\n\
             undefine(`ALIAS_FILE')dnl\n\
             define(`LOCAL_MAILER_PATH', `{d}/deliver')dnl\n\
             define(`LOCAL_MAILER_ARGS', `deliver $u')dnl\n\
             define(`LOCAL_MAILER_FLAGS', `n')dnl\n\
             FEATURE(`nocanonify')dnl\n\
             FEATURE(`accept_unresolvable_domains')dnl\n\
             LOCAL_DOMAIN(`bayesmail.test')dnl\n\
             include(`{d}/milter.mc')dnl\n\
             MAILER(`local')dnl\n",
            cf = cf.display(),
        );
        let out = crate::common::run_with_stdin(Command::new("m4"), mc.as_bytes());
        assert!(
            out.status.success(),
            "m4: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir_path = dir.path().to_path_buf();
        std::fs::write(dir_path.join("sendmail.cf"), &out.stdout).unwrap();
        Some(Sendmail { dir, bin })
    }

    fn cf(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sendmail.cf")).unwrap()
    }

    /// One SMTP session, a command at a time, sending `raw` from sender@
    /// to nobody@ (a user Sendmail's local mailer accepts); returns
    /// Sendmail's answers.
    fn session(&self, raw: &[u8]) -> String {
        let mut child = Command::new("unshare")
            .args(["--uts", "sh", "-c"])
            .arg(format!("hostname {HOSTNAME} && exec \"$0\" \"$@\""))
            .arg(&self.bin)
            .arg("-C")
            .arg(self.dir.path().join("sendmail.cf"))
            .args(["-odi", "-bs"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare runs");
        // Killed if it is not done in time, so that a silent Sendmail
        // fails the test rather than hangs it.
        let done = Arc::new(AtomicBool::new(false));
        let pid = child.id() as i32;
        let watchdog = {
            let done = done.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !done.load(Ordering::SeqCst) {
                    if Instant::now() > deadline {
                        // SAFETY: kill(2) on our child, not reaped before
                        // `done` is set.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut answers = String::new();
        let mut reply = |answers: &mut String| loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap() == 0 {
                break;
            }
            answers.push_str(&line);
            if line.as_bytes().get(3) != Some(&b'-') {
                break;
            }
        };
        reply(&mut answers);
        let mut data = Vec::new();
        for line in crate::serve_exim::lines(raw) {
            if line.starts_with(b".") {
                data.push(b'.');
            }
            data.extend_from_slice(line);
            data.extend_from_slice(b"\r\n");
        }
        data.extend_from_slice(b".\r\n");
        for command in [
            &b"HELO client.bayesmail.test\r\n"[..],
            b"MAIL FROM:<sender@bayesmail.test>\r\n",
            b"RCPT TO:<nobody@bayesmail.test>\r\n",
            b"DATA\r\n",
            &data,
            b"QUIT\r\n",
        ] {
            if stdin
                .write_all(command)
                .and_then(|_| stdin.flush())
                .is_err()
            {
                break;
            }
            reply(&mut answers);
        }
        drop(stdin);
        let status = child.wait().unwrap();
        done.store(true, Ordering::SeqCst);
        watchdog.join().unwrap();
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
        assert!(status.success(), "sendmail: {status}\n{answers}\n{err}");
        answers
    }

    fn mailbox(&self) -> BTreeSet<OsString> {
        crate::common::file_names(&self.dir.path().join("mail/new"))
    }

    /// Sends `raw` and waits for its delivery (Sendmail delivers in a
    /// process of its own once the session has taken the message).
    fn deliver(&self, raw: &[u8]) -> Vec<u8> {
        let before = self.mailbox();
        let answers = self.session(raw);
        assert!(
            answers.contains("Message accepted for delivery"),
            "not taken:\n{answers}"
        );
        crate::common::one_more_file(&self.dir.path().join("mail/new"), &before, 30, || {
            format!(
                "{answers}\nqueue: {:?}",
                crate::common::file_names(&self.dir.path().join("queue"))
            )
        })
    }
}

impl Drop for Sendmail {
    /// Waits for deliveries still running (their queue files) to end
    /// before the directory goes.
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let queued = |dir: &Path| {
            std::fs::read_dir(dir.join("queue")).is_ok_and(|d| {
                d.filter_map(Result::ok)
                    .any(|e| e.file_name().to_string_lossy().starts_with("qf"))
            })
        };
        while queued(self.dir.path()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A message with forged fields of ours among others.
const FORGED: &[u8] = b"From: a@bayesmail.test\r\n\
X-Spam-Flag: YES\r\n\
Subject: cheap meds\r\n\
x-spam-status: No, probability=0.000001\r\n\
X-Spam-Level: **\r\n\
X-Spam-Flag: YES\r\n\
Message-ID: <forged@bayesmail.test>\r\n\
Date: Mon, 23 Dec 2024 12:02:51 +0000\r\n\
\r\n\
Body text.\r\nX-Spam-Flag: in the body\r\n.leading dot\r\n";

/// A delivered message without Sendmail's Received field (with its
/// folded lines); it must be there, below our fields and above the rest.
fn without_received(delivered: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(delivered);
    let start = delivered
        .windows(16)
        .position(|w| w == b"Received: from c")
        .unwrap_or_else(|| panic!("no Received field:\n{text}"));
    assert!(start == 0 || delivered[start - 1] == b'\n', "{text}");
    let mut end = start;
    loop {
        end += delivered[end..].iter().position(|&b| b == b'\n').unwrap() + 1;
        if !matches!(delivered.get(end), Some(b' ' | b'\t')) {
            break;
        }
    }
    assert!(
        delivered[start..end]
            .windows(HOSTNAME.len())
            .any(|w| w == HOSTNAME.as_bytes()),
        "{text}"
    );
    [&delivered[..start], &delivered[end..]].concat()
}

/// `raw` as Sendmail's local mailer gets it: LF line ends, one after the
/// last line, and no Return-Path field (Sendmail drops one that came
/// with the message and writes its own for mailers that ask, with `P`).
fn as_delivered(raw: &[u8]) -> Vec<u8> {
    let stored = crate::serve_exim::as_stored(raw);
    let mut out = Vec::with_capacity(stored.len());
    let (mut in_header, mut dropping) = (true, false);
    for line in stored.split_inclusive(|&b| b == b'\n') {
        if in_header {
            if line == b"\n" {
                in_header = false;
            } else if matches!(line[0], b' ' | b'\t') {
                if dropping {
                    continue;
                }
            } else {
                dropping = line.len() >= 12 && line[..12].eq_ignore_ascii_case(b"Return-Path:");
                if dropping {
                    continue;
                }
            }
        }
        out.extend_from_slice(line);
    }
    out
}

/// The X-Spam-Status `filter` writes for `raw` on `db`.
/// `db` trained on the sample corpus, a serve on it, and a Sendmail whose
/// milter is that serve; `None` where Sendmail cannot run here.
fn started(db: &Db) -> Option<(Serve, Sendmail)> {
    db.train_sample();
    let serve = Serve::start(db, &[]);
    let milter = format!("inet:{}@127.0.0.1", serve.addr.rsplit_once(':').unwrap().1);
    Some((serve, Sendmail::new(&milter)?))
}

fn filter_status(db: &Db, raw: &[u8]) -> String {
    let out = db.run(&["filter"], Some(raw));
    assert!(out.status.success());
    crate::common::strip_ours(&out.stdout).1
}

#[test]
fn sendmail_delivers_each_message_with_filters_fields_and_nothing_else_changed() {
    let db = Db::new();
    let Some((mut serve, sendmail)) = started(&db) else {
        return;
    };
    let mut sent: Vec<Vec<u8>> = sample_files()
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    sent.push(FORGED.to_vec());
    let mut spam = 0;
    for (i, raw) in sent.iter().enumerate() {
        let got = sendmail.deliver(raw);
        let text = String::from_utf8_lossy(&got).into_owned();
        // Ours on top, Sendmail's Received below them.
        assert!(got.starts_with(b"X-Spam-"), "{text}");
        let (restored, status, _) = crate::common::strip_ours(&got);
        let restored = without_received(&restored);
        assert_eq!(status, filter_status(&db, raw), "message {i}");
        let word = crate::common::status_word(&status);
        spam += usize::from(word == "Yes");
        assert_eq!(
            text.contains("\nX-Spam-Flag: YES\n") || text.starts_with("X-Spam-Flag: YES\n"),
            word == "Yes",
            "{text}"
        );
        let want = as_delivered(raw);
        let same = restored
            .iter()
            .zip(&want)
            .take_while(|(a, b)| a == b)
            .count();
        assert!(
            restored == want,
            "message {i} changed at byte {same}: {:?} for {:?}",
            String::from_utf8_lossy(&restored[same..(same + 80).min(restored.len())]),
            String::from_utf8_lossy(&want[same..(same + 80).min(want.len())]),
        );
    }
    assert!(spam > 5, "{spam}");
    // The forged fields: renamed where they were.
    let forged = String::from_utf8(sendmail.deliver(FORGED)).unwrap();
    assert!(
        forged.contains(
            "From: a@bayesmail.test\nOld-X-Spam-Flag: YES\nSubject: cheap meds\n\
             Old-x-spam-status: No, probability=0.000001\nX-Spam-Level: **\n\
             Old-X-Spam-Flag: YES\n"
        ),
        "{forged}"
    );
    assert!(
        forged.contains("\n\nBody text.\nX-Spam-Flag: in the body\n.leading dot\n"),
        "{forged}"
    );
    // Without Date and Message-ID (Sendmail writes its own) the renamed
    // fields stay where they were too.
    let bare: Vec<u8> = as_delivered(FORGED)
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| !l.starts_with(b"Date: ") && !l.starts_with(b"Message-ID: "))
        .flatten()
        .copied()
        .collect();
    let delivered = String::from_utf8(sendmail.deliver(&bare)).unwrap();
    assert!(
        delivered.contains(
            "From: a@bayesmail.test\nOld-X-Spam-Flag: YES\nSubject: cheap meds\n\
             Old-x-spam-status: No, probability=0.000001\nX-Spam-Level: **\n\
             Old-X-Spam-Flag: YES\n"
        ),
        "{delivered}"
    );
    drop(sendmail);
    let (_, log) = serve.finish();
    assert!(log.contains("user=nobody@bayesmail.test"), "{log}");
}

#[test]
fn sendmail_still_delivers_when_serve_is_stopped() {
    let db = Db::new();
    let Some((mut serve, sendmail)) = started(&db) else {
        return;
    };
    let files = sample_files();
    let first = std::fs::read(&files[0]).unwrap();
    let second = std::fs::read(&files[files.len() - 1]).unwrap();
    assert!(sendmail.deliver(&first).starts_with(b"X-Spam-"));
    assert!(serve.stop(), "serve exits 0 on SIGTERM\n{}", serve.log());
    let got = sendmail.deliver(&second);
    assert!(
        without_received(&got) == as_delivered(&second),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn the_readmes_sendmail_lines_are_the_contrib_file_and_m4_makes_the_milter() {
    let docs = std::fs::read_to_string(root().join("README.md")).unwrap();
    let fence = "```sendmail-milter\n";
    let start = docs.find(fence).expect("a sendmail-milter block") + fence.len();
    let end = start + docs[start..].find("```").unwrap();
    let contrib = std::fs::read_to_string(root().join(CONTRIB)).unwrap();
    assert_eq!(&docs[start..end], contrib);
    assert!(docs.contains(&format!("]({CONTRIB})")));
    // What m4 and Sendmail's own macros make of it.
    let Some(sendmail) = Sendmail::new("inet:11340@127.0.0.1") else {
        return;
    };
    let cf = sendmail.cf();
    for line in [
        "\nXbayesmail, S=inet:11340@127.0.0.1, T=C:30s;S:30s;R:30s;E:5m\n",
        "\nO InputMailFilters=bayesmail\n",
        "\nO Milter.macros.connect=j, _, {daemon_name}, {if_name}, {if_addr}, v\n",
    ] {
        assert!(cf.contains(line), "{line:?} not in\n{cf}");
    }
}
