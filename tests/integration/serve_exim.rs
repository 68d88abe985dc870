//! The Exim recipe (contrib/exim-spamd.conf) run by a real Exim against
//! `bayesmail serve --spamd`: Debian's exim4-daemon-heavy (the `spam`
//! condition needs content scanning), unpacked by `.ci/run` under
//! `target/mta/exim` because the package conflicts with Postfix. Each test
//! gives Exim a private configuration (`-C`, as root) around the recipe,
//! feeds it SMTP on stdin (`-bs`) and lets it deliver into a Maildir in a
//! temporary directory before it exits (`-odf`).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::{Db, root, sample_files, spawn_with_stdin};

/// The recipe, and the address in it that the tests replace.
const CONTRIB: &str = "contrib/exim-spamd.conf";
const CONTRIB_SPAMD: &str = "spamd_address = 127.0.0.1 783";

/// Whether CI asked for every test to run.
pub(crate) fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("BAYESMAIL_REQUIRE_CORPUS").is_some()
}

/// A program of a Debian package `.ci/run` unpacks rather than installs
/// (it conflicts with Postfix): `$VAR`, else `target/mta/DIR/REL` in this
/// checkout. `None`, said why, where it is missing or the tests do not
/// run as root (both MTAs need root to take a configuration of ours);
/// in CI that is a failure.
pub(crate) fn unpacked(var: &str, dir: &str, rel: &str, package: &str) -> Option<PathBuf> {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/mta").join(dir).join(rel));
    if !path.is_file() {
        assert!(
            !required(),
            "{} is missing: .ci/run unpacks Debian's {package} there (or set {var})",
            path.display()
        );
        eprintln!(
            "{} is missing (package {package}): test skipped",
            path.display()
        );
        return None;
    }
    if !nix::unistd::Uid::effective().is_root() {
        assert!(
            !required(),
            "{package} needs root to run a configuration of ours"
        );
        eprintln!("{package} needs root: test skipped");
        return None;
    }
    Some(path)
}

/// The Exim `.ci/run` unpacks ([`unpacked`]).
fn exim_bin() -> Option<PathBuf> {
    unpacked(
        "BAYESMAIL_EXIM",
        "exim",
        "usr/sbin/exim4",
        "exim4-daemon-heavy",
    )
}

/// A running `bayesmail serve --spamd` on a loopback port; stopped when
/// dropped.
struct Spamd {
    child: Child,
    port: u16,
}

impl Spamd {
    fn start(db: &Db) -> Spamd {
        let (child, bound) =
            crate::serve::start_serve(db, &["--spamd", "127.0.0.1:0", "--log-messages"], 1);
        let port = bound[0].rsplit_once(':').unwrap().1.parse().unwrap();
        Spamd { child, port }
    }

    /// SIGTERM, then waits; whether it exited with 0.
    fn stop(&mut self) -> bool {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap().success()
    }
}

impl Drop for Spamd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// An Exim configuration of its own in a temporary directory: the
/// recipe's main-section lines and ACL statements (with the deny lines
/// uncommented when `deny`), mail for user@bayesmail.test accepted and
/// delivered by appendfile into a Maildir as `nobody`. Every name is
/// under `bayesmail.test`: the sample model has learned `example.org` as
/// a ham word, and Exim's own Received field, which spamd sees, would
/// carry it. `return_path_remove` is off so that a sent Return-Path stays,
/// and the delivered message can be compared with the sent one.
struct Exim {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Exim {
    fn new(bin: &Path, spamd_port: u16, deny: bool) -> Exim {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Exim gives up root for its exim_user (nobody) with a -C
        // configuration: the tree must be its.
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        for sub in ["spool", "log", "mail"] {
            std::fs::create_dir(d.join(sub)).unwrap();
            std::os::unix::fs::chown(d.join(sub), Some(65534), Some(65534)).unwrap();
        }
        let contrib = std::fs::read_to_string(root().join(CONTRIB)).unwrap();
        assert!(contrib.contains(CONTRIB_SPAMD), "{contrib}");
        let contrib = contrib.replace(
            CONTRIB_SPAMD,
            &format!("spamd_address = 127.0.0.1 {spamd_port}"),
        );
        let contrib = if deny {
            let uncommented = contrib
                .replace("  # deny  spam ", "  deny  spam ")
                .replace("  #       message ", "        message ");
            assert_ne!(uncommented, contrib, "the recipe's deny lines");
            uncommented
        } else {
            contrib
        };
        let (main, acl) = contrib
            .split_once("\nacl_check_data:\n")
            .expect("the recipe's acl_check_data");
        let d = d.display();
        let conf = format!(
            "exim_path = {bin}\n\
             exim_user = nobody\n\
             exim_group = nogroup\n\
             spool_directory = {d}/spool\n\
             log_file_path = {d}/log/%slog\n\
             primary_hostname = mx.bayesmail.test\n\
             qualify_domain = bayesmail.test\n\
             domainlist local_domains = bayesmail.test\n\
             acl_smtp_rcpt = acl_check_rcpt\n\
             acl_smtp_data = acl_check_data\n\
             keep_environment =\n\
             return_path_remove = false\n\
             {main}\n\
             begin acl\n\
             acl_check_rcpt:\n  accept domains = +local_domains\n  deny\n\
             acl_check_data:\n{acl}  accept\n\
             begin routers\n\
             to_maildir:\n  driver = accept\n  domains = +local_domains\n  local_parts = user\n  transport = maildir\n\
             begin transports\n\
             maildir:\n  driver = appendfile\n  directory = {d}/mail/user\n  maildir_format\n  create_directory\n  user = nobody\n  group = nogroup\n",
            bin = bin.display(),
        );
        std::fs::write(dir.path().join("exim.conf"), conf).unwrap();
        Exim {
            dir,
            bin: bin.to_path_buf(),
        }
    }

    /// Exim's main and panic logs.
    fn log(&self) -> String {
        let read = |name| std::fs::read_to_string(self.dir.path().join("log").join(name));
        format!(
            "{}{}",
            read("mainlog").unwrap_or_default(),
            read("paniclog").unwrap_or_default()
        )
    }

    /// One SMTP session on stdin sending `raw` from sender@ to user@;
    /// returns Exim's answers once it has exited (delivery done).
    fn session(&self, raw: &[u8]) -> String {
        let mut input = b"HELO client.bayesmail.test\r\n\
              MAIL FROM:<sender@bayesmail.test>\r\n\
              RCPT TO:<user@bayesmail.test>\r\nDATA\r\n"
            .to_vec();
        for line in lines(raw) {
            if line.starts_with(b".") {
                input.push(b'.');
            }
            input.extend_from_slice(line);
            input.extend_from_slice(b"\r\n");
        }
        input.extend_from_slice(b".\r\nQUIT\r\n");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-C")
            .arg(self.dir.path().join("exim.conf"))
            .args(["-odf", "-bs"]);
        let (mut child, writer) = spawn_with_stdin(cmd, &input);
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("exim -bs did not finish\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = writer.join();
        let mut answers = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut answers)
            .unwrap();
        answers
    }

    fn mailbox(&self) -> BTreeSet<OsString> {
        crate::common::file_names(&self.dir.path().join("mail/user/new"))
    }

    /// Sends `raw` and returns the one message that was delivered.
    fn deliver(&self, raw: &[u8]) -> Vec<u8> {
        let before = self.mailbox();
        let answers = self.session(raw);
        assert!(
            answers.contains("\n250 OK id="),
            "not taken:\n{answers}\n{}",
            self.log()
        );
        crate::common::one_more_file(&self.dir.path().join("mail/user/new"), &before, 20, || {
            self.log()
        })
    }
}

/// The lines of `raw` without their line ends (a last line without one
/// is a line).
pub(crate) fn lines(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    raw.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// `raw` as a Maildir holds it: LF line ends, one after the last line.
pub(crate) fn as_stored(raw: &[u8]) -> Vec<u8> {
    lines(raw).flat_map(|l| [l, b"\n"].concat()).collect()
}

/// What Exim and the recipe did to a delivered message: Exim's Received
/// field on top (with its folded lines), the recipe's fields at the end
/// of the header (score and bar; whether X-Spam-Flag: YES), and the rest.
struct Delivered {
    received: Vec<u8>,
    score: Option<(f64, String)>,
    flag: bool,
    rest: Vec<u8>,
}

fn unwrap_delivered(delivered: &[u8]) -> Delivered {
    let text = String::from_utf8_lossy(delivered);
    assert!(
        delivered.starts_with(b"Received: from "),
        "no Received on top:\n{text}"
    );
    let mut at = 0;
    loop {
        at += delivered[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
        if !matches!(delivered.get(at), Some(b' ' | b'\t')) {
            break;
        }
    }
    let received = delivered[..at].to_vec();
    assert!(
        received.windows(17).any(|w| w == b"mx.bayesmail.test"),
        "{text}"
    );
    let header_end = delivered[at..]
        .windows(2)
        .position(|w| w == b"\n\n")
        .map_or(delivered.len(), |p| at + p + 1);
    let (mut score, mut flag) = (None, false);
    let mut rest = Vec::new();
    for line in delivered[at..header_end].split_inclusive(|&b| b == b'\n') {
        if let Some(v) = line.strip_prefix(b"X-Spam-Score: ") {
            assert!(score.is_none(), "two X-Spam-Score fields:\n{text}");
            let v = std::str::from_utf8(v).unwrap().trim_end();
            let (number, bar) = v.split_once(' ').unwrap();
            score = Some((number.parse().unwrap(), bar.to_string()));
        } else if line == b"X-Spam-Flag: YES\n" {
            assert!(!flag, "two X-Spam-Flag fields:\n{text}");
            flag = true;
        } else {
            // Ours come last in the header, as add_header puts them.
            assert!(score.is_none() && !flag, "{text}");
            rest.extend_from_slice(line);
        }
    }
    rest.extend_from_slice(&delivered[header_end..]);
    Delivered {
        received,
        score,
        flag,
        rest,
    }
}

/// A message with forged X-Spam-* fields: the recipe's, ours, another filter's.
const FORGED: &[u8] = b"From: a@bayesmail.test\r\n\
X-Spam-Flag: YES\r\n\
Subject: cheap meds\r\n\
x-spam-score: -50.0 (--------------------------------------------------)\r\n\
X-Spam-Status: No, probability=0.000001\r\n\
X-Spam-Level: \r\n\
Message-ID: <forged@bayesmail.test>\r\n\
Date: Mon, 23 Dec 2024 12:02:51 +0000\r\n\
\r\n\
Body text.\r\nX-Spam-Flag: in the body\r\n.leading dot\r\n";

/// The cutoff in `filter`'s X-Spam-Status on `db`.
fn cutoff(db: &Db) -> f64 {
    let out = db.run(&["filter"], Some(FORGED));
    let (_, status, _) = crate::common::strip_ours(&out.stdout);
    status
        .split(", ")
        .find_map(|part| part.strip_prefix("cutoff="))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn exim_delivers_each_message_with_the_recipes_fields_and_classifys_verdict() {
    let Some(bin) = exim_bin() else {
        return;
    };
    let db = Db::new();
    db.train_sample();
    let spamd = Spamd::start(&db);
    let exim = Exim::new(&bin, spamd.port, false);
    let cutoff = cutoff(&db);
    let logit = cutoff.ln() - (-cutoff).ln_1p();
    let mut sent: Vec<Vec<u8>> = sample_files()
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    sent.push(FORGED.to_vec());
    let tmp = tempfile::tempdir().unwrap();
    let (mut spam, mut ham) = (0, 0);
    for (i, raw) in sent.iter().enumerate() {
        let got = exim.deliver(raw);
        let text = String::from_utf8_lossy(&got).into_owned();
        let delivered = unwrap_delivered(&got);
        let (score, bar) = delivered
            .score
            .clone()
            .unwrap_or_else(|| panic!("no X-Spam-Score:\n{text}\n{}", exim.log()));
        // Spamd judged what Exim scanned: its envelope fields and its
        // Received field on top of the message as sent. classify on the
        // same bytes must agree.
        let scanned = [
            &b"X-Envelope-From: <sender@bayesmail.test>\nX-Envelope-To: user@bayesmail.test\n"[..],
            &delivered.received,
            &as_stored(raw),
        ]
        .concat();
        let file = tmp.path().join(format!("{i}.eml"));
        std::fs::write(&file, &scanned).unwrap();
        let classified = &db.classify(&[&file])[0];
        let verdict = classified["verdict"].as_str().unwrap();
        let log_odds = classified["log_odds"].as_f64().unwrap();
        // The score says the verdict: at least 5.0 for spam, at most 4.9
        // otherwise (an unsure verdict its probability did not decide can
        // have evidence past the cutoff).
        let want = (5.0 + log_odds - logit).clamp(-999.9, 999.9);
        let want = if verdict == "spam" {
            want.max(5.0)
        } else {
            want.min(4.9)
        };
        assert!(
            (score - want).abs() <= 0.11,
            "message {i}: score {score}, classify {classified}\ndelivered:\n{text}"
        );
        assert_eq!(score >= 5.0, verdict == "spam", "{i}: {score} {classified}");
        assert_eq!(
            delivered.flag,
            verdict == "spam",
            "{i}: {classified}\n{text}"
        );
        assert!(bar.starts_with('(') && bar.ends_with(')'), "{bar}");
        spam += usize::from(verdict == "spam");
        ham += usize::from(verdict == "ham");
        // Nothing else changed: the message is as sent, less every
        // X-Spam-* field it came with.
        let want: Vec<u8> = as_stored(raw)
            .split_inclusive(|&b| b == b'\n')
            .scan(true, |in_header, l| {
                *in_header &= l != b"\r\n" && l != b"\n";
                Some((*in_header, l))
            })
            .filter(|(in_header, l)| {
                raw.as_slice() != FORGED
                    || !(*in_header && l.to_ascii_lowercase().starts_with(b"x-spam-"))
            })
            .flat_map(|(_, l)| l)
            .copied()
            .collect();
        assert!(delivered.rest == want, "message {i} changed:\n{text}");
    }
    assert!(spam > 5 && ham > 5, "{spam} spam, {ham} ham");
}

#[test]
fn exim_refuses_spam_with_the_deny_lines_and_delivers_when_serve_is_stopped() {
    let Some(bin) = exim_bin() else {
        return;
    };
    let db = Db::new();
    db.train_sample();
    let mut spamd = Spamd::start(&db);
    let exim = Exim::new(&bin, spamd.port, true);
    let verdict = |raw: &[u8]| {
        let out = db.run(&["filter"], Some(raw));
        crate::common::strip_ours(&out.stdout).1
    };
    let first = |word: &str| {
        sample_files()
            .iter()
            .map(|f| std::fs::read(f).unwrap())
            .find(|raw| verdict(raw).starts_with(word))
            .unwrap()
    };
    let (spam, ham) = (first("Yes,"), first("No,"));
    let answers = exim.session(&spam);
    assert!(
        answers.contains("\n550 This message was classified as spam\r\n"),
        "{answers}\n{}",
        exim.log()
    );
    assert!(exim.mailbox().is_empty(), "{}", exim.log());
    let delivered = unwrap_delivered(&exim.deliver(&ham));
    assert!(delivered.score.unwrap().0 < 5.0 && !delivered.flag);
    // serve stopped: the spam is delivered, as sent, without our fields.
    assert!(spamd.stop(), "serve exits 0 on SIGTERM");
    let got = exim.deliver(&spam);
    let delivered = unwrap_delivered(&got);
    assert!(
        delivered.score.is_none() && !delivered.flag,
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(delivered.rest == as_stored(&spam));
    let log = exim.log();
    assert!(log.contains("spamd"), "{log}");
}

#[test]
fn the_readmes_exim_lines_are_the_contrib_file() {
    let docs = std::fs::read_to_string(root().join("README.md")).unwrap();
    let fence = "```exim-spamd\n";
    let start = docs.find(fence).expect("an exim-spamd block") + fence.len();
    let end = start + docs[start..].find("```").unwrap();
    let contrib = std::fs::read_to_string(root().join(CONTRIB)).unwrap();
    assert_eq!(&docs[start..end], contrib);
    assert!(docs.contains(&format!("]({CONTRIB})")));
}
