//! Learning from the mail client, end to end (issue 29): a real Dovecot
//! (dovecot-imapd, and dovecot-sieve's imapsieve and extprograms) on a
//! loopback port with a private configuration, the contrib files installed
//! as the README says (only paths, and the pipe program's settings the
//! README tells an administrator to set, substituted), and Python's
//! imaplib as the mail client. After each MOVE, COPY, APPEND or flag change
//! the user's database holds exactly the counts expected, and its learn
//! log exactly the lines.
//!
//! Dovecot will not run mail processes as root, so the mail user is
//! `nobody`, and starting Dovecot takes root: like the programs it needs,
//! root is required where the public corpus is (CI), and the tests are
//! skipped with a note elsewhere.

use std::fs;
use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// The IMAP user, its password, and the uid/gid its mail processes run as.
const USER: &str = "alice";
const PASSWORD: &str = "secret";
const NOBODY: u32 = 65534;

/// The contrib files of the recipe.
const CONF: &str = "dovecot-95-imapsieve.conf";
const PIPE: &str = "bayesmail-imap-learn";
const SIEVES: [&str; 2] = ["learn-spam.sieve", "learn-ham.sieve"];

/// How the pipe program learns (its `VIA` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Learn,
    Spamd,
    Http,
}

/// The text of a recipe file in `contrib/`.
fn contrib(name: &str) -> String {
    fs::read_to_string(root().join("contrib").join(name))
        .unwrap_or_else(|e| panic!("contrib/{name}: {e}"))
}

/// `text` with `from` (which must be there) replaced by `to`.
fn replaced(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} is not in the recipe");
    text.replace(from, to)
}

/// True if Dovecot, sievec, python3 and root are all here; if not, panics
/// where the full CI setup is required, and otherwise says the test is
/// skipped.
fn can_run() -> bool {
    for program in ["dovecot", "sievec", "python3", "spamc", "curl"] {
        if !crate::recipes::have(program) {
            return false;
        }
    }
    let imap = Path::new("/usr/lib/dovecot/imap").exists();
    let root = unsafe { libc::geteuid() } == 0;
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os("BAYESMAIL_REQUIRE_CORPUS").is_some();
    assert!(
        (imap && root) || !required,
        "Dovecot's imap (dovecot-imapd, installed by .ci/run) and root are needed"
    );
    if !(imap && root) {
        eprintln!("dovecot-imapd missing or not root: IMAP test skipped");
    }
    imap && root
}

/// `chown -R nobody:nogroup path`.
fn give_to_nobody(path: &Path) {
    std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in fs::read_dir(path).unwrap() {
            give_to_nobody(&entry.unwrap().path());
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process of the test's: stopped with SIGTERM (then killed) and waited
/// for when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a child this test started.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A mail server for one user, with the recipe installed, and the
/// database the user's moves teach.
struct Mail {
    // Dropped first: the processes stop before their directories go.
    _dovecot: Guard,
    _serve: Option<Guard>,
    port: u16,
    /// Everything of Dovecot's and the user's.
    dir: tempfile::TempDir,
    /// Fixture for the empty configuration and the global database (which
    /// serve needs).
    db: Db,
    /// The user's database.
    user_db: PathBuf,
    /// The counts before any move: the sample corpus.
    base: [u64; 2],
}

impl Mail {
    /// Dovecot with the recipe, the pipe program learning `via`.
    fn start(via: Via) -> Mail {
        let db = Db::new();
        let dir = tempfile::tempdir().unwrap();
        // nobody goes through it to the user's home.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let d = dir.path();
        let home = d.join("home");
        for sub in ["cur", "new", "tmp"] {
            fs::create_dir_all(home.join("Maildir").join(sub)).unwrap();
        }
        // The user's database: learn's default under the home Dovecot
        // gives (the pipe program's DB left empty), or serve's --user-db.
        let user_db = match via {
            Via::Learn => home.join(".local/share/bayesmail"),
            Via::Spamd | Via::Http => d.join("users").join(USER),
        };
        let out = run(
            &[
                "--db",
                utf8(&user_db),
                "--config",
                utf8(&db.path("config.toml")),
                "train",
                "--spam",
                utf8(&sample_spam()),
                "--ham",
                utf8(&sample_ham()),
            ],
            None,
        );
        assert_exit(&out, 0, &["train the user's database"]);
        give_to_nobody(&home);

        let serve = match via {
            Via::Learn => None,
            Via::Spamd | Via::Http => {
                let flag = if via == Via::Spamd {
                    "--spamd"
                } else {
                    "--http"
                };
                let pattern = format!("{}/users/%u", utf8(d));
                let (child, bound) = crate::serve::start_serve(
                    &db,
                    &[flag, "127.0.0.1:0", "--user-db", &pattern],
                    1,
                );
                Some((Guard(child), bound[0].clone()))
            }
        };

        // The pipe program, installed as the README says.
        let mut pipe = replaced(
            &contrib(PIPE),
            "BAYESMAIL_BIN=/usr/local/bin/bayesmail\n",
            &format!("BAYESMAIL_BIN='{}'\n", env!("CARGO_BIN_EXE_bayesmail")),
        );
        if let Some((_, addr)) = &serve {
            let port = addr.rsplit(':').next().unwrap();
            pipe = match via {
                Via::Spamd => replaced(
                    &replaced(&pipe, "\nVIA=learn\n", "\nVIA=spamd\n"),
                    "\nSPAMD_PORT=783\n",
                    &format!("\nSPAMD_PORT={port}\n"),
                ),
                _ => replaced(
                    &replaced(&pipe, "\nVIA=learn\n", "\nVIA=http\n"),
                    "\nHTTP_URL=http://127.0.0.1:11333\n",
                    &format!("\nHTTP_URL=http://{addr}\n"),
                ),
            };
        }
        let bin = d.join("sieve-pipe");
        fs::create_dir(&bin).unwrap();
        fs::write(bin.join(PIPE), pipe).unwrap();
        fs::set_permissions(bin.join(PIPE), fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(d.join("sieve")).unwrap();
        for script in SIEVES {
            fs::write(d.join("sieve").join(script), contrib(script)).unwrap();
        }
        fs::create_dir(d.join("conf.d")).unwrap();
        let recipe = replaced(
            &replaced(&contrib(CONF), "/etc/dovecot/sieve-pipe", utf8(&bin)),
            "/etc/dovecot/sieve/",
            &format!("{}/", utf8(&d.join("sieve"))),
        );
        fs::write(d.join("conf.d").join(CONF), recipe).unwrap();
        fs::write(
            d.join("passwd"),
            format!(
                "{USER}:{{PLAIN}}{PASSWORD}:{NOBODY}:{NOBODY}::{}::\n",
                utf8(&home)
            ),
        )
        .unwrap();
        let port = free_port();
        let conf = d.join("dovecot.conf");
        fs::write(&conf, dovecot_conf(d, port)).unwrap();
        // Compiled as the administrator does (the mail user may not write
        // beside them).
        for script in SIEVES {
            let out = Command::new("sievec")
                .arg("-c")
                .arg(&conf)
                .arg(d.join("sieve").join(script))
                .output()
                .unwrap();
            assert_exit(&out, 0, &["sievec", script]);
        }

        let child = Command::new("dovecot")
            .arg("-F")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dovecot starts");
        let mut dovecot = Guard(child);
        // Ready when it greets.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut greeting = [0; 4];
                if s.read_exact(&mut greeting).is_ok() && &greeting == b"* OK" {
                    break;
                }
            }
            let exited = dovecot.0.try_wait().unwrap().is_some();
            assert!(
                !exited && Instant::now() < deadline,
                "dovecot did not start: {}",
                fs::read_to_string(d.join("dovecot.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut mail = Mail {
            _dovecot: dovecot,
            _serve: serve.map(|(g, _)| g),
            port,
            dir,
            db,
            user_db,
            base: [0, 0],
        };
        mail.base = mail.counts();
        assert_eq!(mail.base, [24, 24]);
        mail
    }

    fn counts(&self) -> [u64; 2] {
        self.db.counts_at(&self.user_db)
    }

    /// The learn log's lines.
    fn log(&self) -> Vec<String> {
        fs::read_to_string(self.user_db.join("learn.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Runs the IMAP client: `op` and its arguments (see `CLIENT`).
    fn imap(&self, args: &[&str]) {
        let script = self.dir.path().join("client.py");
        if !script.exists() {
            fs::write(&script, CLIENT).unwrap();
        }
        let out = Command::new("python3")
            .arg(&script)
            .arg(self.port.to_string())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "imap {args:?}: {}\n{}\ndovecot's log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out),
            fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
        );
    }

    /// Does `args` with the client, then checks that the database holds
    /// `more` messages (ham, spam) more than before the moves, and that
    /// the learn log has `lines` lines, the last `action label origin`.
    fn step(&self, args: &[&str], more: [u64; 2], lines: usize, last: &str) {
        self.imap(args);
        let want = [self.base[0] + more[0], self.base[1] + more[1]];
        let log = self.log();
        assert_eq!(
            (self.counts(), log.len()),
            (want, lines),
            "after {args:?}: counts [ham, spam], learn log lines\n{}\ndovecot's log:\n{}",
            log.join("\n"),
            fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
        );
        if lines > 0 {
            let fields: Vec<&str> = log[lines - 1].split(' ').collect();
            assert_eq!(fields[1..4].join(" "), last, "{log:?}");
        }
    }

    /// A message file in the test directory, readable by the client.
    fn message_file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.dir.path().join(name);
        fs::write(&path, bytes).unwrap();
        utf8(&path).to_string()
    }

    /// The files of a Maildir folder ("" for INBOX, ".Junk", ...).
    fn folder(&self, folder: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for sub in ["new", "cur"] {
            let dir = self.dir.path().join("home/Maildir").join(folder).join(sub);
            for e in fs::read_dir(dir).into_iter().flatten() {
                out.push(e.unwrap().path());
            }
        }
        out
    }
}

/// Dovecot's configuration for the test: its own directories, port and
/// user, and the recipe included as an administrator includes it.
fn dovecot_conf(d: &Path, port: u16) -> String {
    let d = utf8(d);
    format!(
        r#"protocols = imap
listen = 127.0.0.1
base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
ssl = no
auth_mechanisms = plain
disable_plaintext_auth = no
default_internal_user = dovecot
default_login_user = dovenull
mail_location = maildir:~/Maildir
passdb {{
  driver = passwd-file
  args = {d}/passwd
}}
userdb {{
  driver = passwd-file
  args = {d}/passwd
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
namespace inbox {{
  inbox = yes
  mailbox Junk {{
    special_use = \Junk
    auto = create
  }}
  mailbox Trash {{
    special_use = \Trash
    auto = create
  }}
  mailbox "Deleted Messages" {{
    auto = create
  }}
  mailbox Archive {{
    auto = create
  }}
}}
!include {d}/conf.d/{CONF}
"#
    )
}

/// The mail client: `client.py PORT OP ARGS`, one IMAP session per call.
/// A message is found by the word of its X-Test-Word field.
const CLIENT: &str = r#"import imaplib, sys

port, op, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
m = imaplib.IMAP4("127.0.0.1", port)
m.login("alice", "secret")

def ok(result):
    typ, data = result
    if typ != "OK":
        sys.exit(f"{op} {args}: {typ} {data}")
    return data

def uid(box, word):
    ok(m.select(box))
    found = ok(m.uid("SEARCH", None, "HEADER", "X-Test-Word", word))[0].split()
    if len(found) != 1:
        sys.exit(f"{word} in {box}: {found}")
    return found[0]

if op in ("MOVE", "COPY"):
    box, word, dest = args
    # imaplib sends names as given: one with a space needs its quotes.
    ok(m.uid(op, uid(box, word), '"' + dest + '"'))
elif op == "FLAG":
    box, word, flag = args
    ok(m.uid("STORE", uid(box, word), "+FLAGS", f"({flag})"))
elif op == "APPEND":
    box, path = args
    with open(path, "rb") as f:
        ok(m.append(box, None, None, f.read()))
else:
    sys.exit(f"unknown op {op}")
m.logout()
"#;

/// Sample message `i` made one no database here has seen, with `word` in
/// a field of its own (for the client to find it by) and at its end.
fn tagged(i: usize, word: &str) -> Vec<u8> {
    [
        format!("X-Test-Word: {word}\n").as_bytes(),
        &unseen(i, word),
    ]
    .concat()
}

/// Three messages, each with a word of its own.
fn messages() -> [(String, Vec<u8>); 3] {
    [
        (3, "imapwordone"),
        (30, "imapwordtwo"),
        (12, "imapwordthree"),
    ]
    .map(|(i, word)| (word.to_string(), tagged(i, word)))
}

/// The moves a user makes, each checked: into Junk (MOVE, COPY, APPEND)
/// is spam, out of Junk into INBOX is ham and relabels; Junk → Trash,
/// INBOX → Archive and flag changes teach nothing. `origin` is what the learn log says.
fn moves_teach_exactly(via: Via, origin: &str) {
    if !can_run() {
        return;
    }
    let mail = Mail::start(via);
    let [(one, m1), (two, m2), (three, m3)] = messages();
    // Delivered into INBOX (APPEND to INBOX teaches nothing).
    for (word, m) in [(&one, &m1), (&two, &m2)] {
        let file = mail.message_file(word, m);
        mail.step(&["APPEND", "INBOX", &file], [0, 0], 0, "");
    }
    let spam = format!("learned spam {origin}");
    mail.step(&["FLAG", "INBOX", &one, "\\Flagged"], [0, 0], 0, "");
    // Filed away, neither into nor out of Junk: nothing learned.
    mail.step(&["COPY", "INBOX", &two, "Archive"], [0, 0], 0, "");
    mail.step(&["MOVE", "INBOX", &one, "Junk"], [0, 1], 1, &spam);
    mail.step(&["COPY", "INBOX", &two, "Junk"], [0, 2], 2, &spam);
    // A flag changed in Junk (read, flagged) is no new verdict.
    mail.step(&["FLAG", "Junk", &one, "\\Seen"], [0, 2], 2, &spam);
    // Rescued: moved from spam to ham, counted once.
    let rescued = format!("relabelled ham {origin}");
    mail.step(&["MOVE", "Junk", &one, "INBOX"], [1, 1], 3, &rescued);
    // Thrown away from Junk: still spam, nothing learned.
    mail.step(&["MOVE", "Junk", &two, "Trash"], [1, 1], 3, &rescued);
    // Appended into Junk (a client moving it from another account).
    let file = mail.message_file(&three, &m3);
    mail.step(&["APPEND", "Junk", &file], [1, 2], 4, &spam);
    // Copied out of Junk: ham, and the copy left in Junk teaches no more.
    mail.step(&["COPY", "Junk", &three, "INBOX"], [2, 1], 5, &rescued);
    // Trash under another client's name: nothing learned either.
    mail.step(
        &["MOVE", "Junk", &three, "Deleted Messages"],
        [2, 1],
        5,
        &rescued,
    );
    // A message moved back into Junk is spam again, moved once more.
    let moved_back = format!("relabelled spam {origin}");
    mail.step(&["MOVE", "INBOX", &one, "Junk"], [1, 2], 6, &moved_back);
    // A large message (past spamc's own limit of 500 KB unless told) is
    // learned as any other.
    let big_word = "imapwordbig";
    let mut big = tagged(5, big_word);
    big.extend("filler words of a long message\n".repeat(24_000).as_bytes());
    let file = mail.message_file(big_word, &big);
    mail.step(&["APPEND", "INBOX", &file], [1, 2], 6, &moved_back);
    mail.step(&["MOVE", "INBOX", big_word, "Junk"], [1, 3], 7, &spam);
    // The user sees that it works.
    let stats = |json: bool| {
        let config = mail.db.path("config.toml");
        let mut args = vec![
            "--db",
            utf8(&mail.user_db),
            "--config",
            utf8(&config),
            "stats",
        ];
        if json {
            args.push("--json");
        }
        let out = run(&args, None);
        assert_exit(&out, 0, &args);
        String::from_utf8(out.stdout).unwrap()
    };
    let text = stats(false);
    let imap_line = text
        .lines()
        .find(|l| l.starts_with("last learned from IMAP: "));
    let json: serde_json::Value = serde_json::from_str(&stats(true)).unwrap();
    if origin == "imap" {
        assert!(imap_line.is_some_and(|l| l.ends_with(" min ago")), "{text}");
        assert!(
            json["last_learned_from_imap_seconds_ago"].is_u64(),
            "{json}"
        );
        assert!(json["last_learned_from_imap"].is_string(), "{json}");
    } else {
        assert_eq!(imap_line, Some("last learned from IMAP: never"), "{text}");
        assert!(json["last_learned_from_imap"].is_null(), "{json}");
    }
    // Whichever way the move was told, stats says when and through what
    // the database last learned.
    let last_line = text.lines().find(|l| l.starts_with("last learned  "));
    assert!(
        last_line.is_some_and(|l| l.ends_with(&format!(" min ago ({origin})"))),
        "{text}"
    );
    assert_eq!(json["last_learned_from"], origin, "{json}");
    assert!(json["last_learned_seconds_ago"].is_u64(), "{json}");
}

#[test]
fn imap_moves_teach_the_users_database_through_learn() {
    moves_teach_exactly(Via::Learn, "imap");
}

#[test]
fn imap_moves_teach_through_serve_spamd_tell() {
    moves_teach_exactly(Via::Spamd, "spamd");
}

#[test]
fn imap_moves_teach_through_serve_http() {
    moves_teach_exactly(Via::Http, "imap");
}

/// Runs `bayesmail ARGS` on the user's database with `input` on stdin.
fn on_user_db(mail: &Mail, args: &[&str], input: Option<&[u8]>) -> std::process::Output {
    // As the mail user, who owns the database: root may not change another
    // user's database. The test's configuration, where that user reads it.
    let config = mail.user_db.with_file_name("test-config.toml");
    if !config.exists() {
        fs::copy(mail.db.path("config.toml"), &config).unwrap();
        give_to_nobody(&config);
    }
    let id = NOBODY.to_string();
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", &id, "--regid", &id, "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_bayesmail"))
        .args(["--db", utf8(&mail.user_db), "--config", utf8(&config)])
        .args(args);
    match input {
        Some(input) => run_with_stdin(cmd, input),
        None => cmd.output().unwrap(),
    }
}

/// Item 3: a message judged by `filter` (our fields added, a forged one
/// renamed, CRLF line ends), stored by Dovecot (LF in the Maildir) and
/// moved into Junk is the message judged: learning it from the IMAP move
/// and unlearning the message as it came in leaves the counts where they
/// were, and so does learning and unlearning the file Dovecot stored.
#[test]
fn imap_learns_the_message_filter_judged_whatever_delivery_did() {
    if !can_run() {
        return;
    }
    let mail = Mail::start(Via::Learn);
    let word = "imapwordjudged";
    let plain = tagged(40, word);
    // A forged verdict in the header, CRLF line ends, as it came by SMTP.
    let came = to_crlf(&[b"X-Spam-Status: No, forged\n".as_slice(), &plain].concat());
    let out = on_user_db(&mail, &["filter"], Some(&came));
    assert_exit(&out, 0, &["filter"]);
    let filtered = out.stdout;
    assert!(
        String::from_utf8_lossy(&filtered).contains("Old-X-Spam-Status: No, forged"),
        "{}",
        String::from_utf8_lossy(&filtered)
    );
    let file = mail.message_file("filtered", &filtered);
    mail.step(&["APPEND", "INBOX", &file], [0, 0], 0, "");
    mail.step(
        &["MOVE", "INBOX", word, "Junk"],
        [0, 1],
        1,
        "learned spam imap",
    );
    // What Dovecot stored: LF line ends, our fields there.
    let stored = mail.folder(".Junk");
    assert_eq!(stored.len(), 1, "{stored:?}");
    let stored = utf8(&stored[0]).to_string();
    let bytes = fs::read(&stored).unwrap();
    assert!(!bytes.contains(&b'\r'), "Dovecot stores LF");
    assert!(String::from_utf8_lossy(&bytes).contains("\nX-Spam-Status: "));
    // The same message: already learned, whichever form.
    for (what, input) in [("as it came", &came), ("as filtered", &filtered)] {
        let out = on_user_db(&mail, &["learn", "--spam"], Some(input));
        assert_exit(&out, 0, &["learn", what]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "already learned as spam\n",
            "{what}"
        );
    }
    // train over a folder holding both forms knows them too: one message
    // already known, the other form a duplicate of it.
    let folder = tempfile::tempdir().unwrap();
    fs::write(folder.path().join("came"), &came).unwrap();
    fs::write(folder.path().join("filtered"), &filtered).unwrap();
    give_to_nobody(folder.path());
    let out = on_user_db(&mail, &["train", "--spam", utf8(folder.path())], None);
    assert_exit(&out, 0, &["train"]);
    assert!(
        stderr(&out)
            .contains("0 learned, 0 moved to the other label, 1 already known, 1 duplicates"),
        "{}",
        stderr(&out)
    );
    assert_eq!(mail.counts(), [mail.base[0], mail.base[1] + 1]);
    let out = on_user_db(&mail, &["unlearn", "-"], Some(&came));
    assert_exit(&out, 0, &["unlearn as it came"]);
    assert_eq!(
        mail.counts(),
        mail.base,
        "unlearning the message as it came"
    );
    // The stored file, learned and unlearned: never fails, counts at zero.
    let out = on_user_db(&mail, &["learn", "--spam", &stored], None);
    assert_exit(&out, 0, &["learn the stored file"]);
    assert_eq!(mail.counts(), [mail.base[0], mail.base[1] + 1]);
    let out = on_user_db(&mail, &["unlearn", &stored], None);
    assert_exit(&out, 0, &["unlearn the stored file"]);
    assert_eq!(mail.counts(), mail.base);
    let actions: Vec<String> = mail
        .log()
        .iter()
        .map(|l| l.split(' ').skip(1).take(3).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        actions,
        [
            "learned spam imap",
            "already spam learn",
            "already spam learn",
            "unlearned spam learn",
            "learned spam learn",
            "unlearned spam learn",
        ]
    );
}

/// The pipe program never fails the IMAP command: whatever goes wrong
/// (no binary, a bad label or user name, a message that is not mail) it
/// exits 0 and says why on stderr, run with the environment Dovecot gives
/// (HOME, USER, no PATH).
#[test]
fn the_pipe_program_exits_0_and_says_why_whatever_fails() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    fs::create_dir(&home).unwrap();
    let script = contrib(PIPE);
    let installed = |name: &str, bin: &str, via: &str, port: u16| {
        let path = dir.path().join(format!("pipe-{name}"));
        let mut script = replaced(
            &script,
            "BAYESMAIL_BIN=/usr/local/bin/bayesmail\n",
            &format!("BAYESMAIL_BIN='{bin}'\n"),
        );
        for (from, to) in [
            ("VIA=learn\n", format!("VIA={via}\n")),
            ("SPAMD_PORT=783\n", format!("SPAMD_PORT={port}\n")),
            (
                "HTTP_URL=http://127.0.0.1:11333\n",
                format!("HTTP_URL=http://127.0.0.1:{port}\n"),
            ),
        ] {
            script = replaced(&script, from, &to);
        }
        fs::write(&path, script).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    let bin = env!("CARGO_BIN_EXE_bayesmail");
    // serve not running: the line names where it was asked, and why.
    let port = free_port();
    let good = installed("good", bin, "learn", port);
    let missing = installed("missing", "/nonexistent/bayesmail", "learn", port);
    let spamd = installed("spamd", bin, "spamd", port);
    let http = installed("http", bin, "http", port);
    let (spamd_why, http_why) = (
        format!("spam for alice through spamd at 127.0.0.1:{port} failed (exit 69): spamc: "),
        format!("ham for alice through http://127.0.0.1:{port} failed (exit 7): curl: "),
    );
    let mail = unseen(5, "pipewordone");
    for (program, args, input, why) in [
        (
            &missing,
            ["spam", USER],
            &mail[..],
            "learning as spam for alice through bayesmail learn failed",
        ),
        (&spamd, ["spam", USER], &mail[..], spamd_why.as_str()),
        (&http, ["ham", USER], &mail[..], http_why.as_str()),
        (&good, ["eggs", USER], &mail[..], "must be spam or ham"),
        (
            &good,
            ["ham", "../x"],
            &mail[..],
            "bad or missing user name",
        ),
        (&good, ["ham", ""], &mail[..], "bad or missing user name"),
        // A CR/LF would split curl's User header.
        (
            &good,
            ["ham", "alice\r\nX-Evil: 1"],
            &mail[..],
            "bad or missing user name",
        ),
        // Nothing learned into the empty home: one class is no model, and
        // not mail is refused; either way the move goes on.
        (
            &good,
            ["ham", USER],
            b"\x00\x01 not mail",
            "learning as ham for alice through bayesmail learn failed",
        ),
    ] {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .env("HOME", &home)
            .env("USER", USER);
        let out = run_with_stdin(cmd, input);
        assert_exit(&out, 0, &[utf8(program), args[0], args[1]]);
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    // And when it works, it says nothing.
    let mut cmd = Command::new(&good);
    cmd.args(["spam", USER]).env_clear().env("HOME", &home);
    let out = run_with_stdin(cmd, &mail);
    assert_exit(&out, 0, &["pipe program"]);
    assert_eq!(stderr(&out), "");
    let log = fs::read_to_string(home.join(".local/share/bayesmail/learn.log")).unwrap();
    assert!(log.contains(" learned spam imap "), "{log}");
}

/// The README shows the recipe as tested: its blocks are the contrib
/// files, and it links them and the pipe program.
#[test]
fn readme_imapsieve_blocks_are_the_contrib_files() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("### Learning from the mail client\n"));
    for (tag, file) in [
        ("dovecot-imapsieve", CONF),
        ("sieve learn-spam.sieve", SIEVES[0]),
        ("sieve learn-ham.sieve", SIEVES[1]),
    ] {
        assert_eq!(
            crate::recipes::readme_block(tag),
            contrib(file),
            "README's {tag} block"
        );
    }
    for file in [CONF, SIEVES[0], SIEVES[1], PIPE] {
        assert!(
            readme.contains(&format!("(contrib/{file})")),
            "README links contrib/{file}"
        );
    }
}

#[test]
fn a_learn_log_that_cannot_be_written_is_noted_and_the_learn_stands() {
    let db = Db::new();
    db.train_sample();
    let before = db.counts();
    // A directory where the log goes: no line can be appended.
    fs::create_dir_all(db.dir().join("learn.log")).unwrap();
    // Learned, then again: the second time nothing changed, and the note
    // says so.
    for note in ["the counts changed all the same", "nothing else changed"] {
        let out = db.run(
            &["learn", "--spam", "--origin", "imap", "-"],
            Some(&unseen(0, "X-Log-Test: 1")),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("learn.log not written") && said.contains(note),
            "{said}"
        );
        assert_eq!(db.counts(), [before[0], before[1] + 1]);
    }
    let out = db.run(&["unlearn", "-"], Some(&unseen(0, "X-Log-Test: 1")));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("learn.log not written"),
        "{}",
        stderr(&out)
    );
    assert_eq!(db.counts(), before);
}
