//! The mail-path recipes, run as written: each test takes the recipe from
//! its file in `contrib/`, and the README's blocks are checked to be the
//! same text, so a recipe that stops working fails here.
//! procmail, maildrop and sieve-test are the Debian packages (`.ci/run`
//! installs them); their tests fail if the programs are missing where the
//! public corpus is required (CI), and are skipped with a note elsewhere.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common::{
    Db, assert_exit, root, run_with_stdin, sample_files, sample_spam, stderr, to_crlf, utf8,
};

/// The body of the first code block fenced as ```` ```TAG ```` in README.md.
pub(crate) fn readme_block(tag: &str) -> String {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let fence = format!("```{tag}\n");
    let start = readme
        .find(&fence)
        .unwrap_or_else(|| panic!("no {tag} block in README.md"))
        + fence.len();
    let len = readme[start..].find("```").unwrap();
    readme[start..start + len].to_string()
}

/// The text of a recipe file in `contrib/`.
fn contrib(name: &str) -> String {
    fs::read_to_string(root().join("contrib").join(name))
        .unwrap_or_else(|e| panic!("contrib/{name}: {e}"))
}

#[test]
fn readme_recipes_are_the_contrib_files() {
    for (tag, file) in [
        ("procmail", "procmailrc"),
        ("maildrop", "mailfilter"),
        ("fetchmail", "fetchmailrc"),
        ("postfix", "postfix-master.cf"),
        ("dovecot", "dovecot-90-sieve.conf"),
        ("sieve", "bayesmail.sieve"),
        ("muttrc", "muttrc"),
    ] {
        assert_eq!(readme_block(tag), contrib(file), "README's {tag} block");
        let readme = fs::read_to_string(root().join("README.md")).unwrap();
        assert!(
            readme.contains(&format!("(contrib/{file})")),
            "README links contrib/{file}"
        );
    }
}

/// `contrib/bayesmail-sieve-filter` as a user installs it: `BAYESMAIL_BIN`
/// set to where the binary is, `bin`.
fn sieve_filter_program(bin: &std::path::Path) -> String {
    let script = contrib("bayesmail-sieve-filter");
    let default = "BAYESMAIL_BIN=/usr/local/bin/bayesmail\n";
    assert!(script.contains(default), "{script}");
    script.replace(default, &format!("BAYESMAIL_BIN='{}'\n", utf8(bin)))
}

/// A user's home with the `bayesmail` binary in `~/bin`, a Maildir with a
/// `.Junk` folder, and a trained database (on the sample corpus unless
/// given another).
struct Home {
    db: Db,
}

impl Home {
    fn new() -> Home {
        let db = Db::new();
        db.train_sample();
        Home::with(db)
    }

    /// The same home with the trained database `db`.
    fn with(db: Db) -> Home {
        let home = Home { db };
        fs::create_dir_all(home.dir().join("bin")).unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_bayesmail"),
            home.dir().join("bin/bayesmail"),
        )
        .unwrap();
        for folder in ["Maildir", "Maildir/.Junk"] {
            for sub in ["cur", "new", "tmp"] {
                fs::create_dir_all(home.dir().join(folder).join(sub)).unwrap();
            }
        }
        home
    }

    fn dir(&self) -> PathBuf {
        self.db.path("home")
    }

    /// `PATH` with `~/bin` first.
    fn path_var(&self) -> String {
        format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            utf8(&self.dir().join("bin"))
        )
    }

    /// A command with the environment a delivery agent gives the user:
    /// nothing inherited but HOME, PATH and the database settings.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .env("HOME", self.dir())
            .env("PATH", self.path_var())
            .env("BAYESMAIL_DB", self.db.dir())
            .env("BAYESMAIL_CONFIG", self.db.path("config.toml"));
        c
    }

    /// Delivers `message` with the recipe of `agent` (for procmail,
    /// contrib/procmailrc as `~/.procmailrc`, `-p` keeping PATH and the
    /// database settings, HOME as the delivery agent sets it), checking
    /// that the agent reports success.
    fn deliver(&self, agent: Agent, message: &[u8]) {
        let out = self.deliver_status(agent, message);
        assert_exit(&out, 0, &[agent.name()]);
    }

    /// [`Home::deliver`], returning what the agent did.
    fn deliver_status(&self, agent: Agent, message: &[u8]) -> std::process::Output {
        match agent {
            Agent::ProcmailFilter | Agent::ProcmailDelivery => {
                let rc = self.dir().join(".procmailrc");
                fs::write(&rc, contrib("procmailrc")).unwrap();
                let mut cmd = self.command("procmail");
                cmd.arg("-p");
                if agent == Agent::ProcmailFilter {
                    cmd.arg("-m");
                } else {
                    // As the delivery agent procmail sets PATH itself, to
                    // $HOME/bin and the system's directories of the user's
                    // passwd entry (root's here): the user's is given back.
                    cmd.args(["-f", "sender@example.org"])
                        .arg(format!("PATH={}", self.path_var()));
                }
                cmd.arg(format!("HOME={}", utf8(&self.dir()))).arg(&rc);
                run_with_stdin(cmd, message)
            }
            Agent::Maildrop => {
                let mut cmd = self.command("maildrop");
                cmd.arg(self.mailfilter());
                run_with_stdin(cmd, message)
            }
        }
    }

    /// The README's maildrop recipe as `~/.mailfilter`. maildrop sets PATH
    /// and HOME itself; the lines before the recipe give it what a real
    /// user's account would.
    fn mailfilter(&self) -> PathBuf {
        let rc = self.dir().join(".mailfilter");
        let preamble = format!(
            "PATH=\"{}\"\nHOME=\"{}\"\nBAYESMAIL_DB=\"{}\"\nBAYESMAIL_CONFIG=\"{}\"\n",
            self.path_var(),
            utf8(&self.dir()),
            utf8(&self.db.dir()),
            utf8(&self.db.path("config.toml"))
        );
        fs::write(&rc, preamble + &contrib("mailfilter")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&rc, fs::Permissions::from_mode(0o600)).unwrap();
        rc
    }

    /// Message files delivered to a Maildir folder ("" for the inbox).
    fn delivered(&self, folder: &str) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for sub in ["new", "cur"] {
            for e in fs::read_dir(self.dir().join("Maildir").join(folder).join(sub)).unwrap() {
                out.push(fs::read(e.unwrap().path()).unwrap());
            }
        }
        out
    }
}

/// A delivery agent running its recipe from contrib/.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    /// procmail as a general mail filter (`-m`, as Postfix's
    /// `mailbox_command` or fetchmail's `mda` may run it): the message as it
    /// came.
    ProcmailFilter,
    /// procmail as the delivery agent (`-f sender`): it puts a `From `
    /// envelope line on top of the message before the recipes see it.
    ProcmailDelivery,
    Maildrop,
}

impl Agent {
    /// The program the agent runs.
    fn program(self) -> &'static str {
        match self {
            Agent::ProcmailFilter | Agent::ProcmailDelivery => "procmail",
            Agent::Maildrop => "maildrop",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Agent::ProcmailFilter => "procmail -m",
            Agent::ProcmailDelivery => "procmail -f",
            Agent::Maildrop => "maildrop",
        }
    }

    /// The agents whose programs are installed.
    fn installed() -> Vec<Agent> {
        let mut agents = Vec::new();
        if have("procmail") {
            agents.extend([Agent::ProcmailFilter, Agent::ProcmailDelivery]);
        }
        if have("maildrop") {
            agents.push(Agent::Maildrop);
        }
        agents
    }
}

/// One sample message the trained model calls spam and one it calls ham.
fn spam_and_ham(db: &Db) -> (Vec<u8>, Vec<u8>) {
    let files = sample_files();
    let pick = |spam: bool, verdict: &str| {
        let f = files
            .iter()
            .filter(|f| f.starts_with(sample_spam()) == spam)
            .find(|f| db.classify(&[f])[0]["verdict"] == verdict)
            .unwrap_or_else(|| panic!("a sample message classified {verdict}"));
        fs::read(f).unwrap()
    };
    (pick(true, "spam"), pick(false, "ham"))
}

/// True if `program` is installed; if not, panics where the corpus (and so
/// the full CI setup) is required, and otherwise says the test is skipped.
pub(crate) fn have(program: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os("BAYESMAIL_REQUIRE_CORPUS").is_some();
    assert!(
        found || !required,
        "{program} is not installed (.ci/run installs it)"
    );
    if !found {
        eprintln!("{program} not installed: recipe test skipped");
    }
    found
}

fn has_line(message: &[u8], line: &str) -> bool {
    String::from_utf8_lossy(message).lines().any(|l| l == line)
}

fn status_line(message: &[u8]) -> String {
    String::from_utf8_lossy(message)
        .lines()
        .find(|l| l.starts_with("X-Spam-Status: "))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn procmail_recipe_files_spam_into_junk_and_ham_into_the_maildir_inbox() {
    if !have("procmail") {
        return;
    }
    // As a general filter and as the delivery agent: either way ham lands
    // in the Maildir the recipe assumes, not in /var/mail (or bounced
    // back with -m, procmail's EX_CANTCREAT when it falls off the end).
    for agent in [Agent::ProcmailFilter, Agent::ProcmailDelivery] {
        let home = Home::new();
        let (spam, ham) = spam_and_ham(&home.db);
        for message in [&spam, &ham] {
            home.deliver(agent, message);
        }
        let (junk, inbox) = (home.delivered(".Junk"), home.delivered(""));
        assert_eq!((junk.len(), inbox.len()), (1, 1), "{agent:?}");
        assert!(has_line(&junk[0], "X-Spam-Flag: YES"));
        assert!(status_line(&junk[0]).starts_with("X-Spam-Status: Yes, probability="));
        assert!(status_line(&inbox[0]).starts_with("X-Spam-Status: No, probability="));
        let new = home.dir().join("Maildir/new");
        assert_eq!(fs::read_dir(new).unwrap().count(), 1, "{agent:?}");
    }
}

#[test]
fn maildrop_recipe_files_spam_into_junk_and_ham_into_the_inbox() {
    if !have("maildrop") {
        return;
    }
    let home = Home::new();
    let rc = home.mailfilter();
    let (spam, ham) = spam_and_ham(&home.db);
    for message in [&spam, &ham] {
        let mut cmd = home.command("maildrop");
        cmd.arg(&rc);
        let out = run_with_stdin(cmd, message);
        assert_exit(&out, 0, &["maildrop"]);
    }
    let (junk, inbox) = (home.delivered(".Junk"), home.delivered(""));
    assert_eq!((junk.len(), inbox.len()), (1, 1));
    assert!(has_line(&junk[0], "X-Spam-Flag: YES"));
    assert!(status_line(&inbox[0]).starts_with("X-Spam-Status: No, probability="));
}

/// `contrib/bayesmail-postfix-filter` as a user installs it: `BAYESMAIL_BIN`
/// and `SENDMAIL` set at its top to `bin` and `sendmail`.
fn postfix_filter_program(bin: &std::path::Path, sendmail: &std::path::Path) -> String {
    let script = contrib("bayesmail-postfix-filter");
    let mut out = script.clone();
    for (line, value) in [
        ("BAYESMAIL_BIN=/usr/local/bin/bayesmail\n", bin),
        ("SENDMAIL=/usr/sbin/sendmail\n", sendmail),
    ] {
        assert!(script.contains(line), "{script}");
        let name = line.split('=').next().unwrap();
        out = out.replace(line, &format!("{name}='{}'\n", utf8(value)));
    }
    out
}

/// True if this process may run a command in a mount namespace of its own
/// (root, and `unshare` installed); if not, panics where the full CI setup
/// is required, and otherwise says the test is skipped.
fn can_unshare() -> bool {
    let ok = Command::new("unshare")
        .args(["-m", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os("BAYESMAIL_REQUIRE_CORPUS").is_some();
    assert!(
        ok || !required,
        "`unshare -m` does not run here (needs root and util-linux)"
    );
    if !ok {
        eprintln!("cannot unshare a mount namespace: test skipped");
    }
    ok
}

/// A command run as Postfix's pipe(8) runs a content filter: nothing
/// inherited but `PATH=/usr/bin:/bin`, `LANG=C` and `MAIL_CONFIG`, no
/// `HOME`, the working directory `spool`. The password database is this
/// process's with the running user's home directory changed to `home`, or
/// without the user at all (`None`): a copy bind-mounted over /etc/passwd
/// (and an nsswitch.conf that reads only it) in a mount namespace of the
/// command's own, so nothing outside it sees the change.
fn as_postfix_pipe(
    program: &std::path::Path,
    args: &[&str],
    spool: &std::path::Path,
    home: Option<&std::path::Path>,
) -> Command {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() }.to_string();
    let passwd: String = fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut f: Vec<&str> = l.split(':').collect();
            if f.len() < 7 || f[2] != uid {
                return Some(format!("{l}\n"));
            }
            let home = home?;
            f[5] = utf8(home);
            Some(f.join(":") + "\n")
        })
        .collect();
    let copy = spool.with_extension("passwd");
    fs::write(&copy, passwd).unwrap();
    // Only the file: nss-systemd would make up an entry for root.
    let nsswitch = spool.with_extension("nsswitch");
    fs::write(&nsswitch, "passwd: files\ngroup: files\n").unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c"])
        .arg(
            "mount --bind \"$1\" /etc/passwd && mount --bind \"$2\" /etc/nsswitch.conf && \
             cd \"$3\" && shift 3 && \
             exec env -i PATH=/usr/bin:/bin LANG=C MAIL_CONFIG=/etc/postfix \"$@\"",
        )
        .arg("sh")
        .arg(&copy)
        .arg(&nsswitch)
        .arg(spool)
        .arg(program)
        .args(args);
    cmd
}

/// Issue 26, U1: the script, installed as the README says, run as Postfix
/// runs it (no HOME, PATH=/usr/bin:/bin, the spool directory as working
/// directory), finds the binary and judges with the user's own database,
/// whose home comes from the password database; a user without a home
/// gets `reason=config-error`, never a database relative to the spool.
#[test]
fn postfix_filter_script_reinjects_the_message_judged_by_the_users_database() {
    let home = Home::new();
    assert!(
        contrib("postfix-master.cf")
            .contains("argv=/usr/local/bin/bayesmail-postfix-filter -f ${sender} -- ${recipient}")
    );
    // A stand-in sendmail that records its arguments and the message.
    let fake = home.dir().join("bin/sendmail");
    let record = home.dir().join("reinjected");
    fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" > '{0}.args'\ncat > '{0}'\n",
            utf8(&record)
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let script = home.dir().join("bin/bayesmail-postfix-filter");
    let install = |bin: &std::path::Path| {
        fs::write(&script, postfix_filter_program(bin, &fake)).unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    };
    install(std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail")));
    link_default_db(&home.dir(), &home.db);
    let spool = home.db.path("spool");
    fs::create_dir(&spool).unwrap();
    let (spam, ham) = spam_and_ham(&home.db);
    let args = ["-f", "from@example.org", "--", "to@example.org"];
    // Postfix's environment without the password database: the failures
    // that lose nothing still defer (75) rather than bounce.
    let pipe_env = |cmd: &mut Command| {
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LANG", "C")
            .env("MAIL_CONFIG", "/etc/postfix")
            .current_dir(&spool);
    };
    fs::write(&fake, "#!/bin/sh\ncat > /dev/null\nexit 1\n").unwrap();
    let mut cmd = Command::new(&script);
    pipe_env(cmd.args(args));
    assert_exit(
        &run_with_stdin(cmd, &spam),
        75,
        &["bayesmail-postfix-filter", "sendmail fails"],
    );
    install(&home.dir().join("no-such-binary"));
    let mut cmd = Command::new(&script);
    pipe_env(cmd.args(args));
    assert_exit(
        &run_with_stdin(cmd, &spam),
        75,
        &["bayesmail-postfix-filter", "no bayesmail"],
    );
    install(std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail")));
    fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" > '{0}.args'\ncat > '{0}'\n",
            utf8(&record)
        ),
    )
    .unwrap();
    if !can_unshare() {
        return;
    }
    for (message, status) in [(&spam, "Yes"), (&ham, "No")] {
        let cmd = as_postfix_pipe(&script, &args, &spool, Some(&home.dir()));
        let out = run_with_stdin(cmd, message);
        assert_exit(&out, 0, &["bayesmail-postfix-filter"]);
        let reinjected = fs::read(&record).unwrap();
        let line = status_line(&reinjected);
        assert!(
            line.starts_with(&format!("X-Spam-Status: {status}, probability=")),
            "{line}\n{}",
            stderr(&out)
        );
        assert_eq!(has_line(&reinjected, "X-Spam-Flag: YES"), status == "Yes");
        let ours = reinjected.len() - message.len();
        assert_eq!(ours, line.len() + 1 + usize::from(status == "Yes") * 17);
        let sent = fs::read_to_string(record.with_extension("args")).unwrap();
        assert_eq!(sent.trim(), "-G -i -f from@example.org -- to@example.org");
    }
    // No home anywhere: the message goes on, unjudged, and nothing lands
    // in the spool directory.
    let cmd = as_postfix_pipe(&script, &args, &spool, None);
    let out = run_with_stdin(cmd, &spam);
    assert_exit(&out, 0, &["bayesmail-postfix-filter", "no home"]);
    let reinjected = fs::read(&record).unwrap();
    assert!(
        status_line(&reinjected).starts_with("X-Spam-Status: Unknown, reason=config-error"),
        "{}",
        status_line(&reinjected)
    );
    assert!(stderr(&out).contains("HOME is not set"), "{}", stderr(&out));
    assert_eq!(fs::read_dir(&spool).unwrap().count(), 0);
}

#[test]
fn sieve_filter_program_returns_the_message_with_our_headers() {
    let home = Home::new();
    let sieve = contrib("bayesmail.sieve");
    assert!(
        sieve.contains("if filter \"bayesmail\" {") && sieve.contains("\"X-Spam-Flag\" \"YES\"")
    );
    // Installed as the README says, and run as Dovecot runs it: HOME and
    // USER, no PATH, the database the user's default under HOME.
    let program = home.dir().join("bin/sieve-filter-bayesmail");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail"));
    fs::write(&program, sieve_filter_program(bin)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    link_default_db(&home.dir(), &home.db);
    let (spam, ham) = spam_and_ham(&home.db);
    for (message, flagged) in [(&spam, true), (&ham, false)] {
        let mut cmd = Command::new(&program);
        cmd.env_clear().env("HOME", home.dir()).env("USER", "pat");
        let out = run_with_stdin(cmd, message);
        assert_exit(&out, 0, &["bayesmail-sieve-filter"]);
        assert_eq!(has_line(&out.stdout, "X-Spam-Flag: YES"), flagged);
        assert!(status_line(&out.stdout).contains("probability="));
        assert!(out.stdout.len() > message.len());
    }
}

/// Makes `db` the default database of a user whose home is `home`
/// (`~/.local/share/bayesmail`).
fn link_default_db(home: &std::path::Path, db: &Db) {
    let share = home.join(".local/share");
    fs::create_dir_all(&share).unwrap();
    std::os::unix::fs::symlink(db.dir(), share.join("bayesmail")).unwrap();
}

/// The macros of contrib/muttrc: (key, macro text), comments and settings
/// skipped.
fn mutt_macros() -> Vec<(String, String)> {
    contrib("muttrc")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .filter(|l| !l.starts_with("set "))
        .map(|l| {
            let rest = l.strip_prefix("macro index,pager ").expect(l);
            let (key, rest) = rest.split_once(' ').unwrap();
            let body = rest.strip_prefix('"').unwrap();
            let end = body.find('"').unwrap();
            (key.to_string(), body[..end].to_string())
        })
        .collect()
}

/// Where `what` starts in `text`, each time it occurs.
fn at(text: &str, what: &str) -> Vec<usize> {
    text.match_indices(what).map(|(i, _)| i).collect()
}

#[test]
fn mutt_macros_move_to_the_maildirplusplus_folders_without_questions() {
    let macros = mutt_macros();
    let keys: Vec<&str> = macros.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["S", "H"]);
    // S saves where procmail and maildrop deliver spam: ~/Maildir/.Junk,
    // which is =.Junk when folder=~/Maildir; H where they deliver ham:
    // ~/Maildir, which is =. A message learned as ham and left in Junk
    // would be learned as spam again by the next `train`.
    assert!(contrib("procmailrc").contains("$HOME/Maildir/.Junk/"));
    assert!(contrib("procmailrc").contains("DEFAULT=$MAILDIR/"));
    assert!(contrib("procmailrc").contains("MAILDIR=$HOME/Maildir\n"));
    assert!(contrib("mailfilter").contains("$HOME/Maildir/.Junk/"));
    assert!(contrib("mailfilter").contains("to \"$HOME/Maildir/\""));
    for ((key, text), folder) in macros.iter().zip(["=.Junk", "="]) {
        let step = |what: &str| {
            let found = at(text, what);
            assert_eq!(found.len(), 1, "{key}: one {what} in {text}");
            found[0]
        };
        // wait_key off before the pipe, back on after it; the questions
        // that would take the macro's next keys as their answer off
        // before the save, back on after it; then a line saying what was
        // done.
        let order = [
            step("<enter-command>set wait_key=no<enter>"),
            step("<pipe-message>"),
            step("<enter-command>set wait_key=yes confirmappend=no confirmcreate=no<enter>"),
            step(&format!("<save-message>{folder}<enter>")),
            step("<enter-command>set confirmappend=yes confirmcreate=yes<enter>"),
            step("<enter-command>echo 'bayesmail: learned as "),
        ];
        assert!(order.is_sorted(), "{key}: {text}");
        assert_eq!(at(text, "<save-message>").len(), 1, "{key}: {text}");
    }
}

#[test]
fn mutt_macros_learn_the_piped_message() {
    let home = Home::new();
    let macros = mutt_macros();
    let (spam, _) = spam_and_ham(&home.db);
    let before = home.db.counts();
    // Each macro pipes the message to the command between <pipe-message>
    // and <enter>, through the shell, as mutt does.
    let commands: Vec<&str> = macros
        .iter()
        .map(|(_, l)| {
            let start = l.find("<pipe-message>").unwrap() + "<pipe-message>".len();
            let len = l[start..].find("<enter>").unwrap();
            &l[start..start + len]
        })
        .collect();
    assert_eq!(
        commands,
        ["bayesmail learn --spam", "bayesmail learn --ham"]
    );
    // A new message learned as ham, then marked as spam: it moves.
    let new = [
        b"Subject: a new one\nFrom: x@new.example\n\n".as_ref(),
        &spam[spam.len() / 2..],
    ]
    .concat();
    for (command, expect) in [(commands[1], [1, 0]), (commands[0], [0, 1])] {
        let mut cmd = home.command("sh");
        cmd.args(["-c", command]);
        let out = run_with_stdin(cmd, &new);
        assert_exit(&out, 0, &[command]);
        let after = home.db.counts();
        assert_eq!(
            [after[0] - before[0], after[1] - before[1]],
            expect,
            "{command}"
        );
    }
}

/// The lines that end the header block for a strict parser but not for
/// every consumer, each followed by a forged flag: none may junk a ham.
fn forged_after_malformed(ham: &[u8]) -> Vec<Vec<u8>> {
    let malformed: [&[u8]; 4] = [
        b"X-B\xe4d: 8-bit name\n",
        b"X-N\0l: nul in name\n",
        b"From someone Mon Jan  1 00:00:00 2024\n",
        b": x\n",
    ];
    malformed
        .iter()
        .map(|bad| [*bad, b"X-Spam-Flag: YES\n", ham].concat())
        .collect()
}

#[test]
fn forged_flag_after_malformed_lines_does_not_junk_ham() {
    let home = Home::new();
    let (_, ham) = spam_and_ham(&home.db);
    let forged = forged_after_malformed(&ham);
    for agent in Agent::installed() {
        for message in &forged {
            home.deliver(agent, message);
        }
        assert_eq!(home.delivered(".Junk").len(), 0, "{agent:?} junked a ham");
    }
    let agents = Agent::installed().len();
    assert_eq!(home.delivered("").len(), agents * forged.len());
}

/// Pigeonhole's `sieve-test` running contrib/bayesmail.sieve, with
/// contrib/bayesmail-sieve-filter installed as its `vnd.dovecot.filter`
/// program `bayesmail`. Dovecot runs that program with HOME, USER and the
/// envelope but no PATH, so this is the environment the recipe must work
/// in. sieve-test refuses to run as root, so it runs as `nobody`
/// (`mail_uid`), and everything it reads is in a directory of its own
/// under /tmp that `nobody` can reach: the binary and the trained model
/// are copied there, since the checkout (and the test's temporary
/// directory) may be under a home or a directory `nobody` cannot enter.
/// The user's home is that directory, whose default database is the copy.
struct SieveTest {
    dir: tempfile::TempDir,
}

impl SieveTest {
    /// Installed with the binary `bin` (its copy, rather).
    fn new(home: &Home, bin: &std::path::Path) -> SieveTest {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("bayesmail-sieve")
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path();
        let open = |p: &std::path::Path| {
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap()
        };
        open(d);
        for sub in [
            "bin",
            "libexec",
            ".local",
            ".local/share",
            ".local/share/bayesmail",
        ] {
            fs::create_dir(d.join(sub)).unwrap();
            open(&d.join(sub));
        }
        let copy = d.join("libexec/bayesmail");
        fs::copy(bin, &copy).unwrap();
        open(&copy);
        // The model is all `filter` reads of the database (the count
        // store stays behind).
        for e in fs::read_dir(home.db.dir()).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                let to = d
                    .join(".local/share/bayesmail")
                    .join(p.file_name().unwrap());
                fs::copy(&p, &to).unwrap();
                fs::set_permissions(&to, fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
        let program = d.join("bin/bayesmail");
        fs::write(&program, sieve_filter_program(&copy)).unwrap();
        open(&program);
        // The mail store, written by the mail user when a script runs
        // with -e (as in delivery); no Junk folder yet.
        for sub in ["cur", "new", "tmp"] {
            fs::create_dir_all(d.join("Maildir").join(sub)).unwrap();
        }
        for p in ["Maildir", "Maildir/cur", "Maildir/new", "Maildir/tmp"] {
            std::os::unix::fs::chown(d.join(p), Some(65534), Some(65534)).unwrap();
        }
        // Dovecot's configuration as the README has it installed: both
        // contrib files, filing and learning, in that order.
        let shipped = [
            contrib("dovecot-90-sieve.conf"),
            contrib("dovecot-95-imapsieve.conf"),
        ]
        .concat()
        .replace("/etc/dovecot/sieve-filter", &format!("{}/bin", utf8(d)))
        .replace("/etc/dovecot/", &format!("{}/", utf8(d)));
        fs::write(
            d.join("dovecot.conf"),
            format!(
                "mail_uid = 65534\nmail_gid = 65534\nmail_location = maildir:{0}/Maildir\n{shipped}",
                utf8(d)
            ),
        )
        .unwrap();
        fs::write(d.join("script.sieve"), contrib("bayesmail.sieve")).unwrap();
        // For delivery by dovecot-lda: the script is the user's own
        // (`~/.dovecot.sieve`), and the home is the mail user's, who
        // writes the compiled script and the log beside it.
        fs::write(d.join(".dovecot.sieve"), contrib("bayesmail.sieve")).unwrap();
        fs::create_dir(d.join("run")).unwrap();
        for p in [d, &d.join("run")] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        fs::write(
            d.join("lda.conf"),
            format!(
                "protocols =\nssl = no\nbase_dir = {0}/run\nlog_path = {0}/lda.log\n\
                 mail_location = maildir:~/Maildir\n{shipped}",
                utf8(d)
            ),
        )
        .unwrap();
        SieveTest { dir }
    }

    /// Takes the filter program out of `sieve_filter_bin_dir`, as an
    /// installation that forgot it.
    fn remove_program(&self) {
        fs::remove_file(self.dir.path().join("bin/bayesmail")).unwrap();
    }

    /// Runs sieve-test on `message` (with `-e`: executing the actions on
    /// the Maildir); returns what it printed.
    fn run(&self, message: &[u8], execute: bool) -> String {
        use std::os::unix::fs::PermissionsExt;
        let d = self.dir.path();
        let file = d.join("message.eml");
        fs::write(&file, message).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        let mut cmd = Command::new("sieve-test");
        cmd.env("HOME", d).arg("-c").arg(d.join("dovecot.conf"));
        if execute {
            cmd.arg("-e");
        }
        let out = cmd.arg(d.join("script.sieve")).arg(&file).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// The folder the script files `message` into: "Junk" or "INBOX".
    fn folder(&self, message: &[u8]) -> &'static str {
        let text = self.run(message, false);
        assert!(text.contains("final result: success"), "{text}");
        if text.contains("store message in folder: Junk") {
            "Junk"
        } else {
            assert!(text.contains("store message in folder: INBOX"), "{text}");
            "INBOX"
        }
    }

    /// Delivers `message` with Dovecot's LDA, as the mail user with the
    /// environment it gives (`HOME` and `USER`), the script being the
    /// user's own; returns the messages now in the Maildir++ folder (""
    /// for INBOX, ".Junk").
    fn deliver(&self, message: &[u8], folder: &str) -> Vec<Vec<u8>> {
        use std::io::Write;
        let d = self.dir.path();
        let mut lda = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(LDA)
            .arg("-c")
            .arg(d.join("lda.conf"))
            .args(["-f", "sender@example.org"])
            .env_clear()
            .env("HOME", d)
            .env("USER", "nobody")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        lda.stdin.take().unwrap().write_all(message).unwrap();
        let out = lda.wait_with_output().unwrap();
        let log = fs::read_to_string(d.join("lda.log")).unwrap_or_default()
            + &fs::read_to_string(d.join(".dovecot.sieve.log")).unwrap_or_default();
        let text = format!(
            "{}{}{log}",
            stderr(&out),
            String::from_utf8_lossy(&out.stdout)
        );
        assert_exit(&out, 0, &["dovecot-lda", &text]);
        for line in log.lines() {
            assert!(
                !line.contains("Error:") && !line.contains("Fatal:"),
                "{log}"
            );
        }
        let new = d.join("Maildir").join(folder).join("new");
        let mut out = Vec::new();
        for e in fs::read_dir(&new).unwrap_or_else(|e| panic!("{}: {e}\n{text}", new.display())) {
            out.push(fs::read(e.unwrap().path()).unwrap());
        }
        out
    }
}

#[test]
fn sieve_recipe_files_spam_into_junk_however_long_the_header_block() {
    if !have("sieve-test") {
        return;
    }
    let home = Home::new();
    let (spam, ham) = spam_and_ham(&home.db);
    let sieve = SieveTest::new(&home, std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail")));
    assert_eq!(sieve.folder(&spam), "Junk");
    assert_eq!(sieve.folder(&ham), "INBOX");
    // 13 MB of header fields before the rest: our flag is still seen.
    let mut long = b"X-Long: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 13 << 20));
    long.push(b'\n');
    assert_eq!(sieve.folder(&[&long[..], &spam].concat()), "Junk");
    for forged in forged_after_malformed(&ham) {
        assert_eq!(sieve.folder(&forged), "INBOX");
    }
}

/// Dovecot's delivery agent, from dovecot-core (beside sieve-test).
const LDA: &str = "/usr/lib/dovecot/dovecot-lda";

/// Delivered by dovecot-lda with both contrib configuration files, the
/// script being the user's own (a user's script may only ask for the
/// extensions `sieve_extensions` allows).
#[test]
fn sieve_recipe_creates_a_missing_junk_folder_and_delivers_with_our_fields() {
    if !have("sieve-test") || !have(LDA) || !have("setpriv") {
        return;
    }
    let home = Home::new();
    let (spam, ham) = spam_and_ham(&home.db);
    let sieve = SieveTest::new(&home, std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail")));
    assert!(!sieve.dir.path().join("Maildir/.Junk").exists());
    let junk = sieve.deliver(&spam, ".Junk");
    assert_eq!(junk.len(), 1);
    assert!(has_line(&junk[0], "X-Spam-Flag: YES"));
    assert!(status_line(&junk[0]).starts_with("X-Spam-Status: Yes, probability="));
    let inbox = sieve.deliver(&ham, "");
    assert_eq!(inbox.len(), 1);
    assert!(status_line(&inbox[0]).starts_with("X-Spam-Status: No, probability="));
}

/// A user who has no Maildir yet (a new account) gets every message where
/// the recipe says, the first spam included: in `~/Maildir` and its `.Junk`
/// folder, both private. Neither agent makes what the recipe assumes:
/// procmail, told `MAILDIR=$HOME/Maildir`, delivered everything into the
/// home directory itself (`~/new`), and maildrop deferred every ham.
#[test]
fn the_recipes_make_a_new_users_maildir_and_junk_folder() {
    use std::os::unix::fs::PermissionsExt;
    for agent in [
        Agent::ProcmailFilter,
        Agent::ProcmailDelivery,
        Agent::Maildrop,
    ] {
        if !have(agent.program()) {
            return;
        }
        let home = Home::new();
        let (spam, ham) = spam_and_ham(&home.db);
        let maildir = home.dir().join("Maildir");
        fs::remove_dir_all(&maildir).unwrap();
        home.deliver(agent, &spam);
        home.deliver(agent, &ham);
        let name = agent.name();
        assert_eq!(home.delivered(".Junk").len(), 1, "{name}");
        assert_eq!(home.delivered("").len(), 1, "{name}");
        assert!(!home.dir().join("new").exists(), "{name}: into the home");
        for dir in [maildir.clone(), maildir.join("new"), maildir.join(".Junk")] {
            let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{name}: {}", dir.display());
        }
    }
}

/// maildrop runs `xfilter` and backticks with the account's login shell,
/// whatever `SHELL` the environment has: for a mail-only account whose
/// shell is `nologin` (Debian's `nobody`) every message was deferred. The
/// recipe names `/bin/sh`; the message is delivered.
#[test]
fn maildrop_recipe_delivers_for_an_account_whose_shell_is_nologin() {
    if !have("maildrop") || !have("setpriv") {
        return;
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap();
    let nobody_nologin = passwd
        .lines()
        .any(|l| l.starts_with("nobody:x:65534:") && l.ends_with("nologin"));
    // SAFETY: geteuid has no preconditions.
    if !nobody_nologin || unsafe { libc::geteuid() } != 0 {
        eprintln!("needs root and a nobody whose shell is nologin: test skipped");
        return;
    }
    let home = Home::new();
    let (_, ham) = spam_and_ham(&home.db);
    let rc = home.mailfilter();
    let own = |path: &std::path::Path| {
        std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    };
    own(&home.dir());
    own(&rc);
    for folder in ["Maildir", "Maildir/.Junk"] {
        for sub in ["", "cur", "new", "tmp"] {
            own(&home.dir().join(folder).join(sub));
        }
    }
    let mut cmd = home.command("setpriv");
    cmd.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "maildrop",
    ])
    .arg(&rc)
    .env("SHELL", "/bin/sh");
    let out = run_with_stdin(cmd, &ham);
    assert_exit(&out, 0, &["maildrop as nobody"]);
    assert_eq!(home.delivered("").len(), 1);
}

/// Hams with a forged flag where `filter` has ended the header block but a
/// delivery agent may read on (procmail reads LF lines: a `\r\n` line is
/// not empty to it), or spelled so that an agent reads it as ours (maildrop
/// deletes CRs), each with what it is.
fn forged_where_an_agent_reads_on(ham: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let crlf = to_crlf(ham);
    let blank = crlf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let (head, body) = crlf.split_at(blank);
    let flag = &b"X-Spam-Flag: YES\r\n"[..];
    let crs = vec![b'\r'; 300];
    let spread = [b"X-Spam-", &crs[..], b"Flag: YES"].concat();
    vec![
        ("CRLF, flag first in the body", [head, flag, body].concat()),
        (
            "CRLF, flag and a header line first in the body",
            [head, flag, b"Subject: hi\r\n\r\n", body].concat(),
        ),
        (
            "CRLF, flag at the end of the body",
            [&crlf[..], b"\r\n", flag].concat(),
        ),
        (
            "LF, flag after a \\r\\n line in the header",
            [b"X-Mailer: x\n\r\nX-Spam-Flag: YES\n", ham].concat(),
        ),
        (
            "LF, X-Spam- 300 CRs Flag",
            [&spread[..], b"\n", ham].concat(),
        ),
        (
            "CRLF, X-Spam- 300 CRs Flag",
            [&spread[..], b"\r\n", &crlf[..]].concat(),
        ),
        (
            "a forwarded message that was once flagged",
            in_parts(ham, b"Content-Type: message/rfc822\n\nX-Spam-Flag: YES\nFrom: x@example.com\nSubject: hi\n\ntext\n"),
        ),
        (
            "a flag in a part's header",
            in_parts(ham, b"Content-Type: text/plain\nX-Spam-Flag: YES\n\nmore text\n"),
        ),
    ]
}

/// `ham` made a MIME multipart whose first part is its body and whose
/// second is `part` (its header and body): maildrop's header patterns
/// search every part's header as well as the message's.
fn in_parts(ham: &[u8], part: &[u8]) -> Vec<u8> {
    let blank = ham.windows(2).position(|w| w == b"\n\n").unwrap();
    let (head, body) = (&ham[..=blank], &ham[blank + 2..]);
    let mut out: Vec<u8> = Vec::new();
    let mut kept = true;
    for line in head.split_inclusive(|&b| b == b'\n') {
        if !matches!(line.first(), Some(b' ' | b'\t')) {
            let lower = line.to_ascii_lowercase();
            kept = !(lower.starts_with(b"content-") || lower.starts_with(b"mime-version"));
        }
        if kept {
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(
        b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"=-b-=\"\n\n",
    );
    out.extend_from_slice(b"--=-b-=\nContent-Type: text/plain\n\n");
    out.extend_from_slice(body);
    out.extend_from_slice(b"\n--=-b-=\n");
    out.extend_from_slice(part);
    out.extend_from_slice(b"--=-b-=--\n");
    out
}

#[test]
fn every_recipe_junks_spam_and_no_forged_flag_crlf_or_not() {
    let home = Home::new();
    let (spam, ham) = spam_and_ham(&home.db);
    let hams = forged_where_an_agent_reads_on(&ham);
    let spams = [("LF", spam.clone()), ("CRLF", to_crlf(&spam))];
    let mut wrong = Vec::new();
    for agent in Agent::installed() {
        for (what, message, spam) in hams
            .iter()
            .map(|(w, m)| (w, m, false))
            .chain(spams.iter().map(|(w, m)| (w, m, true)))
        {
            let before = home.delivered(".Junk").len();
            home.deliver(agent, message);
            let junked = home.delivered(".Junk").len() > before;
            if junked != spam {
                wrong.push(format!("{agent:?}: {what}: junked {junked}"));
            }
        }
    }
    if have("sieve-test") {
        let sieve = SieveTest::new(&home, std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail")));
        for (what, message) in &hams {
            if sieve.folder(message) != "INBOX" {
                wrong.push(format!("sieve: {what}: junked"));
            }
        }
        for (what, message) in &spams {
            if sieve.folder(message) != "Junk" {
                wrong.push(format!("sieve: {what}: not junked"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Where `filter` cannot be run (missing: the link to it leads nowhere,
/// or a stand-in exits 127, as the shell does for a program it cannot
/// find) or gives up (75), each recipe goes on with the message as it
/// came, and a ham whose sender wrote `X-Spam-Flag: YES` on top reaches
/// the inbox (procmail, Sieve) or waits for the mail server to try again
/// (maildrop), never Junk. Before, procmail's next rule and the Sieve
/// script read the sender's flag as ours.
#[test]
fn a_recipe_whose_filter_fails_reads_no_forged_flag() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let (_, ham) = spam_and_ham(&home.db);
    let forged = [&b"X-Spam-Flag: YES\n"[..], &ham].concat();
    let link = home.dir().join("bin/bayesmail");
    let mut wrong = Vec::new();
    for case in ["75", "127", "missing"] {
        let stand_in = home.db.path(&format!("failing-{case}"));
        if case != "missing" {
            fs::write(
                &stand_in,
                format!("#!/bin/sh\ncat >/dev/null\nexit {case}\n"),
            )
            .unwrap();
            fs::set_permissions(&stand_in, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&stand_in, &link).unwrap();
        for agent in Agent::installed() {
            let (junk, inbox) = (home.delivered(".Junk").len(), home.delivered("").len());
            let out = home.deliver_status(agent, &forged);
            let delivered = home.delivered("").len() - inbox;
            // maildrop defers; with no program of that name in the rest of
            // its PATH either, procmail delivers. (A `bayesmail` installed
            // elsewhere on PATH would judge the message and deliver it.)
            let as_expected = match (agent, case) {
                (Agent::Maildrop, "missing") => {
                    (out.status.code() == Some(75) && delivered == 0)
                        || (out.status.success() && delivered == 1)
                }
                (Agent::Maildrop, _) => out.status.code() == Some(75) && delivered == 0,
                _ => out.status.success() && delivered == 1,
            };
            if !as_expected {
                wrong.push(format!(
                    "{agent:?}, {case}: {:?}, {delivered} in the inbox, {}",
                    out.status,
                    stderr(&out)
                ));
            }
            if home.delivered(".Junk").len() != junk {
                wrong.push(format!("{agent:?}, {case}: junked"));
            }
        }
        if have("sieve-test") {
            let bin = if case == "missing" {
                std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail"))
            } else {
                &stand_in
            };
            let sieve = SieveTest::new(&home, bin);
            if case == "missing" {
                sieve.remove_program();
            }
            let folder = sieve.folder(&forged);
            if folder != "INBOX" {
                wrong.push(format!("sieve, {case}: {folder}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// What a delivery agent hands `filter` is one message, whatever its body
/// holds: a spam after a harmless message and a line that looks like an
/// mbox separator (`From sender date`, after a blank line, before header
/// lines) is judged whole, so it still reaches Junk. procmail as the
/// delivery agent puts an envelope line on top, which made `filter` take
/// such input for an mbox and judge only its harmless first part. Needs a
/// model trained on real mail: the sample corpus's model judges by the
/// header alone (its body view has no weight), and the header here is the
/// harmless one.
#[test]
fn spam_after_a_fake_mbox_separator_reaches_junk_through_every_recipe() {
    let Some(corpus) = crate::common::public_corpus() else {
        return;
    };
    let db = Db::new();
    db.train(&[&corpus.join("spam-2")], &[&corpus.join("easy-ham-2")]);
    // A first part the model does not call spam on its own, then a line
    // like an mbox separator.
    let harmless = &b"From: alice@example.org\nSubject: lunch\n\nok\n\n"[..];
    let file = db.path("whole.eml");
    fs::write(&file, harmless).unwrap();
    assert_ne!(db.classify(&[&file])[0]["verdict"], "spam");
    let harmless = [harmless, b"From bob@example.com Wed Aug 16 00:29:00 2023\n"].concat();
    // Spam the model has not seen (the corpus's envelope line left off),
    // after the harmless part: those that `classify`, given each as a file
    // of one message, calls spam. The delivery agents must agree.
    let mut files: Vec<PathBuf> = fs::read_dir(corpus.join("spam-1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let messages: Vec<(String, Vec<u8>)> = files
        .iter()
        .step_by(50)
        .filter_map(|f| {
            let spam = fs::read(f).unwrap();
            let spam = match spam.strip_prefix(b"From ") {
                Some(rest) => &rest[rest.iter().position(|&b| b == b'\n')? + 1..],
                None => &spam[..],
            };
            let whole = [&harmless[..], spam].concat();
            fs::write(&file, &whole).unwrap();
            (db.classify(&[&file])[0]["verdict"] == "spam").then(|| (utf8(f).to_string(), whole))
        })
        .take(3)
        .flat_map(|(name, whole)| [(format!("{name}, CRLF"), to_crlf(&whole)), (name, whole)])
        .collect();
    assert_eq!(messages.len(), 6);
    let home = Home::with(db);
    let mut missed = Vec::new();
    for agent in Agent::installed() {
        for (what, message) in &messages {
            let before = home.delivered(".Junk").len();
            home.deliver(agent, message);
            if home.delivered(".Junk").len() == before {
                missed.push(format!("{agent:?}: {what}"));
            }
        }
    }
    if have("sieve-test") {
        let sieve = SieveTest::new(&home, std::path::Path::new(env!("CARGO_BIN_EXE_bayesmail")));
        for (what, message) in &messages {
            if sieve.folder(message) != "Junk" {
                missed.push(format!("sieve: {what}"));
            }
        }
    }
    assert!(missed.is_empty(), "not junked: {missed:#?}");
}

/// Issue 26, U9: the Sieve recipe works when the built binary is where
/// `nobody` cannot reach it (a checkout under a private home or a 0700
/// temporary directory): sieve-test runs a copy of it.
#[test]
fn sieve_recipe_works_when_nobody_cannot_reach_the_checkout() {
    if !have("sieve-test") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let (spam, ham) = spam_and_ham(&home.db);
    let private = tempfile::tempdir().unwrap();
    fs::set_permissions(private.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let target = private.path().join("target");
    fs::create_dir(&target).unwrap();
    let bin = target.join("bayesmail");
    fs::copy(env!("CARGO_BIN_EXE_bayesmail"), &bin).unwrap();
    let sieve = SieveTest::new(&home, &bin);
    assert_eq!(sieve.folder(&spam), "Junk");
    assert_eq!(sieve.folder(&ham), "INBOX");
}

/// Runs `tmux` on a server of this test's own (its own socket), so no
/// other tmux session on the machine is touched.
fn tmux(socket: &str, args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .unwrap()
}

/// Runs mutt under tmux (a terminal of its own) on `folder` of `home`'s
/// Maildir, with contrib/muttrc (which sets the folder and the mailbox
/// type) and nothing else but the inbox and the deletion of what is
/// moved (mutt's questions at their defaults), presses `key`
/// once the index shows `subject`, and waits for a message to be saved into
/// `target`'s `cur/`. Returns the files new there and the screen once the
/// macro's last line shows (or after a bounded wait).
fn mutt_macro(
    home: &Home,
    folder: &str,
    key: &str,
    subject: &str,
    target: &str,
) -> (Vec<PathBuf>, String) {
    let rc = home.dir().join("muttrc");
    fs::write(
        &rc,
        format!(
            "set spoolfile=~/Maildir\nset delete=yes\nsource {}\n",
            utf8(&root().join("contrib/muttrc"))
        ),
    )
    .unwrap();
    let socket = format!("bayesmail-test-{}-{key}", std::process::id());
    let mutt = format!(
        "env -i HOME='{}' TERM=xterm PATH='{}' BAYESMAIL_DB='{}' BAYESMAIL_CONFIG='{}' \
         mutt -n -F '{}' -f '{folder}'",
        utf8(&home.dir()),
        home.path_var(),
        utf8(&home.db.dir()),
        utf8(&home.db.path("config.toml")),
        utf8(&rc)
    );
    let started = tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "mutt",
            "-x",
            "120",
            "-y",
            "30",
            &mutt,
        ],
    );
    assert!(started.status.success(), "{started:?}");
    let screen =
        || String::from_utf8_lossy(&tmux(&socket, &["capture-pane", "-p"]).stdout).into_owned();
    let pause = || std::thread::sleep(std::time::Duration::from_millis(50));
    // Bounded polling, not a timing assertion: mutt shows the index, then
    // the macro runs, saves and says so (each step given 30 s: a loaded
    // machine took more than 10).
    for _ in 0..600 {
        if screen().contains(subject) {
            break;
        }
        pause();
    }
    let cur = home.dir().join("Maildir").join(target).join("cur");
    let files = || -> Vec<PathBuf> {
        fs::read_dir(&cur)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    };
    // What is there before the keys are sent: a loaded machine may run
    // the whole macro before this thread looks again.
    let there = files();
    tmux(&socket, &["send-keys", "-t", "mutt", key]);
    let mut saved = Vec::new();
    for _ in 0..600 {
        saved = files();
        saved.retain(|f| !there.contains(f));
        if !saved.is_empty() {
            break;
        }
        pause();
    }
    let mut shown = screen();
    for _ in 0..600 {
        if shown.contains("bayesmail: learned as") {
            break;
        }
        pause();
        shown = screen();
    }
    // A waiting "Press any key" would show now, after the save.
    pause();
    shown += &screen();
    tmux(&socket, &["kill-server"]);
    (saved, shown)
}

#[test]
fn mutt_runs_each_macro_to_the_end_without_a_key_press_and_says_so() {
    if !have("mutt") || !have("tmux") {
        return;
    }
    let home = Home::new();
    let (spam, ham) = spam_and_ham(&home.db);
    let before = home.db.counts();

    // S on a message not learned yet, in the inbox: learned as spam,
    // moved to =.Junk.
    let new_spam = [
        b"Subject: a new one\nFrom: x@new.example\n\n".as_ref(),
        &spam,
    ]
    .concat();
    fs::write(home.dir().join("Maildir/cur/1.test:2,S"), &new_spam).unwrap();
    let (saved, shown) = mutt_macro(&home, "=", "S", "a new one", ".Junk");
    assert_eq!(saved.len(), 1, "the message is in =.Junk\n{shown}");
    assert!(!shown.contains("Press any key"), "{shown}");
    assert!(
        shown.contains("bayesmail: learned as spam (unless an error was shown), moved to =.Junk"),
        "{shown}"
    );
    let after = home.db.counts();
    assert_eq!([after[0] - before[0], after[1] - before[1]], [0, 1]);

    // H on a message the filter put in Junk (alone there, so it is the
    // one under the cursor): learned as ham, moved to the inbox, where the
    // next `train` finds it as ham.
    for f in saved {
        fs::remove_file(f).unwrap();
    }
    let new_ham = [b"Subject: not junk\nFrom: y@new.example\n\n".as_ref(), &ham].concat();
    fs::write(home.dir().join("Maildir/.Junk/cur/2.test:2,S"), &new_ham).unwrap();
    let (saved, shown) = mutt_macro(&home, "=.Junk", "H", "not junk", "");
    assert_eq!(saved.len(), 1, "the message is in the inbox\n{shown}");
    // mutt adds a Content-Length field when it saves; the rest is as it was.
    let moved = fs::read(&saved[0]).unwrap();
    assert!(moved.starts_with(b"Subject: not junk\n") && moved.ends_with(&ham));
    assert!(!shown.contains("Press any key"), "{shown}");
    assert!(
        shown.contains("bayesmail: learned as ham (unless an error was shown), moved to the inbox"),
        "{shown}"
    );
    let after = home.db.counts();
    assert_eq!([after[0] - before[0], after[1] - before[1]], [1, 1]);
}
