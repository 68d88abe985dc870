//! One message, one identity: what is counted for a message is what is
//! taken back, however it was read (a file, stdin, inside an mbox, a Maildir
//! entry), delivered (through `filter`) or pruned since, and no message can
//! make `train`, `learn` or `unlearn` fail for the rest of the database's
//! life. The property test at the end runs random sequences of all of it
//! and compares the counts with a fresh `train` over the final folders.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use bayesmail::db::DbPaths;
use bayesmail::model::{Label, TokenCounts};
use bayesmail::store::{MemoryStore, SledStore, Store};
use bayesmail::vocab::{Feature, FeatureBuf};
use proptest::prelude::*;

use crate::common::*;

/// Runs `args` against `db` and asserts it succeeded; returns stderr.
fn ok(db: &Db, args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = db.run(args, stdin);
    assert_exit(&out, 0, args);
    stderr(&out)
}

/// A Maildir at `dir` (cur/, new/, tmp/), created if needed.
fn maildir(dir: &Path) -> PathBuf {
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(dir.join(sub)).unwrap();
    }
    dir.to_path_buf()
}

/// `raw` as an mbox of one message: an envelope line, `>From ` escaping
/// and the blank line that ends it.
fn as_mbox(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    bayesmail::mailbox::write_mbox_message(&mut out, Some("someone@example.org"), raw).unwrap();
    out
}

/// The first sample ham, with a body line an mbox writer must escape.
fn ham_with_from_line() -> Vec<u8> {
    let mut raw = fs::read(sample_files()[0].clone()).unwrap();
    raw.extend_from_slice(b"\nFrom the desk of nobody in particular.\n");
    raw
}

#[test]
fn a_delivered_copy_of_a_message_learned_raw_moves_it_and_train_goes_on() {
    // T1: our fields at the top must not change what is counted.
    let db = Db::new();
    db.train_sample();
    let raw = ham_with_from_line();
    let file = db.path("raw.eml");
    fs::write(&file, &raw).unwrap();
    ok(&db, &["learn", "--ham", utf8(&file)], None);
    let out = db.run(&["filter"], Some(&raw));
    assert_exit(&out, 0, &["filter"]);
    assert!(out.stdout.starts_with(b"X-Spam-"), "our fields come first");
    let delivered = db.path("f.eml");
    fs::write(&delivered, &out.stdout).unwrap();
    let before = db.counts();
    let learned = db.ok(&["learn", "--spam", utf8(&delivered)], None);
    assert!(learned.contains("moved to spam"), "{learned}");
    assert_eq!(db.counts(), [before[0] - 1, before[1] + 1]);

    // The delivered copy sits in Junk: train over the folders every day.
    let junk = maildir(&db.path("Junk"));
    fs::copy(&delivered, junk.join("cur/1:2,S")).unwrap();
    for _ in 0..2 {
        let summary = db.train(&[&junk], &[&sample_ham()]);
        assert_eq!(summary["learned"], 0, "{summary}");
        assert_eq!(summary["relearned"], 0, "{summary}");
    }
    // And back: unlearned by its raw bytes.
    let out = db.ok(&["unlearn", utf8(&file)], None);
    assert!(out.contains("was spam"), "{out}");
    assert_eq!(db.counts(), [before[0] - 1, before[1]]);
}

/// `raw` as Dovecot stores it in an mbox folder: its envelope line,
/// Dovecot's fields (`X-UID`, `Status`, `Content-Length`) at the end of the
/// header, the body unescaped (the length says where it ends), and a blank
/// line.
fn as_dovecot_mbox(raw: &[u8], uid: usize) -> Vec<u8> {
    let at = raw.windows(2).position(|w| w == b"\n\n").unwrap() + 1;
    let (header, body) = (&raw[..at], &raw[at + 1..]);
    [
        &b"From alice@vm  Sat Nov 28 03:12:03 2026\n"[..],
        header,
        format!(
            "X-UID: {uid}\nStatus: RO\nContent-Length: {}\n\n",
            body.len()
        )
        .as_bytes(),
        body,
        b"\n",
    ]
    .concat()
}

/// A message learned through a mail client's move (whole, through the
/// IMAP script) is the message `train` and `unlearn` read from the folder
/// Dovecot stored it in as an mbox, though its body's `From ` lines are not
/// escaped there: counted once, and taken back exactly.
#[test]
fn a_message_learned_by_a_move_is_the_one_train_reads_from_dovecots_mbox() {
    let db = Db::new();
    db.train_sample();
    let before = db.counts();
    let moved = ham_with_from_line();
    let other = [
        &b"Subject: minutes\nFrom: sec@club.example\n\nHello all,\n\n"[..],
        b"From the treasurer: we are fine.\n\nFrom now on we meet on Mondays.\n",
    ]
    .concat();
    ok(
        &db,
        &["learn", "--origin", "imap", "--spam", "-"],
        Some(&moved),
    );
    let junk = db.path("Junk");
    fs::write(
        &junk,
        [as_dovecot_mbox(&moved, 1), as_dovecot_mbox(&other, 2)].concat(),
    )
    .unwrap();
    let said = ok(&db, &["train", "--spam", utf8(&junk)], None);
    assert!(
        said.contains("1 learned, 0 moved to the other label, 1 already known"),
        "{said}"
    );
    assert_eq!(db.counts(), [before[0], before[1] + 2]);
    ok(&db, &["unlearn", utf8(&junk)], None);
    assert_eq!(db.counts(), before);
}

#[test]
fn a_message_read_any_way_is_counted_once() {
    // T3: a file starting with `From ` and ending with a blank line, stdin,
    // an mbox, a Maildir entry, CRLF: one message.
    let db = Db::new();
    db.train_sample();
    let before = db.counts();
    let raw = [
        &fs::read(&sample_files()[2]).unwrap()[..],
        b"\nA line of its own, zqxk.\n",
    ]
    .concat();
    let enveloped = [
        &b"From someone@example.org Wed Aug 16 00:29:00 2023\n"[..],
        &raw,
        b"\n\n",
    ]
    .concat();
    let file = db.path("enveloped.eml");
    fs::write(&file, &enveloped).unwrap();
    ok(&db, &["learn", "--ham", utf8(&file)], None);
    let mut after = [before[0] + 1, before[1]];
    assert_eq!(db.counts(), after);
    let out = db.ok(&["learn", "--ham", "-"], Some(&enveloped));
    assert!(out.contains("already learned"), "stdin: {out}");
    let out = db.ok(&["learn", "--ham", "-"], Some(&to_crlf(&raw)));
    assert!(out.contains("already learned"), "CRLF on stdin: {out}");
    let inbox = maildir(&db.path("Inbox"));
    fs::write(inbox.join("cur/17.M1P2.host:2,S"), &raw).unwrap();
    let summary = db.train(&[&sample_spam()], &[&inbox]);
    assert_eq!(summary["learned"], 0, "Maildir: {summary}");
    assert_eq!(db.counts(), after);

    // Inside an mbox, its body's `From ` line escaped: the same message.
    let quoted = ham_with_from_line();
    let single = db.path("quoted.eml");
    fs::write(&single, &quoted).unwrap();
    ok(&db, &["learn", "--ham", utf8(&single)], None);
    after[0] += 1;
    let mbox = db.path("box.mbox");
    fs::write(&mbox, as_mbox(&quoted)).unwrap();
    let out = db.ok(&["learn", "--ham", utf8(&mbox)], None);
    assert!(out.contains("already learned"), "mbox: {out}");

    // The other way round: learned from a Maildir first, then as a file.
    let other = fs::read(&sample_files()[1]).unwrap();
    let other = [&other[..], b"\nA line of its own, zqxj.\n"].concat();
    fs::write(inbox.join("cur/18.M1P2.host:2,S"), &other).unwrap();
    let summary = db.train(&[&sample_spam()], &[&inbox]);
    assert_eq!(summary["learned"], 1, "{summary}");
    after[0] += 1;
    let copy = db.path("other.eml");
    fs::write(&copy, [&other[..], b"\n"].concat()).unwrap();
    let out = db.ok(&["learn", "--ham", utf8(&copy)], None);
    assert!(out.contains("already learned"), "file after Maildir: {out}");
    assert_eq!(db.counts(), after);
}

#[test]
fn a_pruned_message_can_be_relabelled_unlearned_and_learned_again() {
    // T2: prune removes counts a later unlearn would take back.
    let db = Db::new();
    let ham = maildir(&db.path("Inbox"));
    let spam = maildir(&db.path("Junk"));
    for (i, file) in sample_files().iter().enumerate() {
        let to = if file.parent().unwrap().ends_with("spam") {
            &spam
        } else {
            &ham
        };
        // A word of its own: seen once, so pruned.
        fs::write(
            to.join(format!("cur/{i}:2,S")),
            unseen(i, &format!("zqx{i}only")),
        )
        .unwrap();
    }
    db.train(&[&spam], &[&ham]);
    let pruned = db.ok(&["prune", "--min-age", "0"], None);
    assert!(!pruned.contains("pruned 0 tokens"), "{pruned}");
    let before = db.counts();

    // Relabel by moving, then train, on every later run too.
    fs::rename(ham.join("cur/0:2,S"), spam.join("cur/0:2,S")).unwrap();
    for run in 0..2 {
        let out = db.run(
            &[
                "train",
                "--json",
                "--spam",
                utf8(&spam),
                "--ham",
                utf8(&ham),
            ],
            None,
        );
        assert_exit(&out, 0, &["train"]);
        let noted = stderr(&out).contains("could not be taken back exactly");
        assert_eq!(noted, run == 0, "said once: {}", stderr(&out));
    }
    assert_eq!(db.counts(), [before[0] - 1, before[1] + 1]);
    // learn under the other label, unlearn, learn again.
    let moved = spam.join("cur/0:2,S");
    ok(&db, &["learn", "--ham", utf8(&moved)], None);
    ok(&db, &["unlearn", utf8(&moved)], None);
    ok(&db, &["learn", "--spam", utf8(&moved)], None);
    assert_eq!(db.counts(), [before[0] - 1, before[1] + 1]);
    let summary = db.train(&[&spam], &[&ham]);
    assert_eq!(
        (summary["learned"].as_u64(), summary["relearned"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn a_damaged_journal_is_an_error_never_folded_and_train_rebuilds() {
    // D1: one flipped byte in the journal.
    let db = Db::new();
    db.train_sample();
    let spam = maildir(&db.path("more-spam"));
    let files = sample_files();
    for i in 0..5 {
        let path = spam.join(format!("cur/{i}:2,S"));
        fs::write(&path, unseen(i, &format!("extra {i} zqv"))).unwrap();
        ok(&db, &["learn", "--spam", utf8(&path)], None);
    }
    let journal = DbPaths::new(db.dir()).journal();
    let mut bytes = fs::read(&journal).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    fs::write(&journal, &bytes).unwrap();

    let out = db.run(&["stats"], None);
    assert_exit(&out, 2, &["stats"]);
    assert!(
        stderr(&out).contains("model.journal is corrupt"),
        "{}",
        stderr(&out)
    );
    let out = db.run(&["filter"], Some(&fs::read(&files[0]).unwrap()));
    assert_exit(&out, 0, &["filter"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("X-Spam-Status: Unknown, reason=model-unreadable"),
        "filter fails open with a reason"
    );
    let extra = db.path("one-more.eml");
    fs::write(
        &extra,
        [&fs::read(&files[6]).unwrap()[..], b"\nmore zqw\n"].concat(),
    )
    .unwrap();
    let out = db.run(&["learn", "--spam", utf8(&extra)], None);
    assert_exit(&out, 2, &["learn"]);
    assert!(
        stderr(&out).contains("nothing was changed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        fs::read(&journal).unwrap(),
        bytes,
        "neither folded nor deleted"
    );

    // train over the folders sets it aside and learns them again.
    let out = db.run(
        &[
            "train",
            "--spam",
            utf8(&sample_spam()),
            utf8(&spam),
            "--ham",
            utf8(&sample_ham()),
        ],
        None,
    );
    assert_exit(&out, 0, &["train"]);
    assert!(stderr(&out).contains("set aside"), "{}", stderr(&out));
    assert_eq!(
        fs::read(journal.with_extension("journal.damaged")).unwrap(),
        bytes
    );
    assert_eq!(db.counts(), [24, 24 + 5], "every learned message is back");
}

#[test]
fn a_journal_grown_by_junk_is_refused_in_bounded_memory() {
    // D2: 300 MB appended; the reader must not load it.
    let db = Db::new();
    db.train_sample();
    let extra = db.path("extra.eml");
    fs::write(&extra, unseen(3, "zqj")).unwrap();
    ok(&db, &["learn", "--spam", utf8(&extra)], None);
    let journal = DbPaths::new(db.dir()).journal();
    let file = fs::OpenOptions::new().append(true).open(&journal).unwrap();
    file.set_len(300 << 20).unwrap();
    // Under a 200 MB address-space limit, loading the journal cannot work.
    let script = format!(
        "ulimit -v 204800; exec '{}' --db '{}' --config '{}' filter",
        env!("CARGO_BIN_EXE_bayesmail"),
        utf8(&db.dir()),
        utf8(&db.path("config.toml"))
    );
    let cmd = {
        let mut c = std::process::Command::new("sh");
        c.arg("-c").arg(&script);
        c
    };
    let raw = fs::read(&sample_files()[0]).unwrap();
    let out = run_with_stdin(cmd, &raw);
    assert_exit(&out, 0, &["filter under ulimit"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("X-Spam-Status: Unknown, reason=model-unreadable"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("more than a journal ever does"),
        "{}",
        stderr(&out)
    );
}

/// How a message reaches a command.
#[derive(Debug, Clone, Copy)]
enum How {
    File,
    Stdin,
    Mbox,
    /// A file with an envelope line, mbox escaping and blank lines after.
    Enveloped,
    Crlf,
}

#[derive(Debug, Clone)]
enum Op {
    Learn(usize, Label, How),
    Unlearn(usize, How),
    /// Move it to the other folder (or into one), then `train`.
    Relabel(usize, Label),
    Train,
    Prune,
    /// `filter` it; the folder copy becomes what filter delivered.
    Deliver(usize),
}

fn how() -> impl Strategy<Value = How> {
    prop_oneof![
        Just(How::File),
        Just(How::Stdin),
        Just(How::Mbox),
        Just(How::Enveloped),
        Just(How::Crlf),
    ]
}

fn label() -> impl Strategy<Value = Label> {
    prop_oneof![Just(Label::Ham), Just(Label::Spam)]
}

fn op(messages: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..messages, label(), how()).prop_map(|(m, l, h)| Op::Learn(m, l, h)),
        2 => (0..messages, how()).prop_map(|(m, h)| Op::Unlearn(m, h)),
        2 => (0..messages, label()).prop_map(|(m, l)| Op::Relabel(m, l)),
        1 => Just(Op::Train),
        1 => Just(Op::Prune),
        2 => (0..messages).prop_map(Op::Deliver),
    ]
}

/// Every token count, the totals and the registry size of a database's
/// count store.
fn counts_of(dir: &Path) -> (MemoryStore, BTreeMap<FeatureBuf, TokenCounts>, u64) {
    let store = SledStore::open(
        &DbPaths::new(dir).counts(),
        std::time::Duration::from_secs(60),
    )
    .unwrap();
    let memory = MemoryStore::load_counts(&store).unwrap();
    let mut tokens = BTreeMap::new();
    memory
        .for_each_token(&mut |t, c| {
            // The online discriminative view's weights are its steps, in
            // the order messages were learned, not counts of messages.
            if !matches!(t, Feature::Weight(_)) {
                tokens.insert(t.into_owned(), c);
            }
        })
        .unwrap();
    (memory, tokens, store.registry_len().unwrap())
}

/// The folders, the messages and where each is, as the user sees them.
struct World {
    db: Db,
    ham: PathBuf,
    spam: PathBuf,
    /// The bytes of each message as stored now (raw, or as delivered).
    bytes: Vec<Vec<u8>>,
    /// Which folder each message is in, if any.
    folder: Vec<Option<Label>>,
    pruned: bool,
}

impl World {
    fn new() -> World {
        let db = Db::new();
        let ham = maildir(&db.path("Inbox"));
        let spam = maildir(&db.path("Junk"));
        let bytes: Vec<Vec<u8>> = (0..sample_files().len())
            .map(|i| unseen(i, &format!("zqp{i}")))
            .collect();
        let folder = vec![None; bytes.len()];
        let mut world = World {
            db,
            ham,
            spam,
            bytes,
            folder,
            pruned: false,
        };
        // A young database: a few of each class, sorted as the corpus is.
        let files = sample_files();
        for (i, file) in files.iter().enumerate().filter(|(i, _)| i % 4 == 0) {
            let label = if file.parent().unwrap().ends_with("spam") {
                Label::Spam
            } else {
                Label::Ham
            };
            world.put(i, Some(label));
        }
        world.train();
        world
    }

    fn dir(&self, label: Label) -> &Path {
        match label {
            Label::Ham => &self.ham,
            Label::Spam => &self.spam,
        }
    }

    /// Puts message `m` in the folder for `label` (or takes it out).
    fn put(&mut self, m: usize, label: Option<Label>) {
        let name = format!("cur/{m}.M1P1.host:2,S");
        for l in [Label::Ham, Label::Spam] {
            let _ = fs::remove_file(self.dir(l).join(&name));
        }
        if let Some(l) = label {
            fs::write(self.dir(l).join(&name), &self.bytes[m]).unwrap();
        }
        self.folder[m] = label;
    }

    fn train(&self) -> serde_json::Value {
        let out = self.db.run(
            &[
                "train",
                "--json",
                "--spam",
                utf8(&self.spam),
                "--ham",
                utf8(&self.ham),
            ],
            None,
        );
        assert_exit(&out, 0, &["train"]);
        json_lines(&String::from_utf8(out.stdout).unwrap())
            .pop()
            .unwrap()
    }

    /// Runs `args` with message `m` given as `how`.
    fn with_message(&self, args: &[&str], m: usize, how: How) {
        let raw = &self.bytes[m];
        let (input, stdin): (Vec<u8>, bool) = match how {
            How::File => (raw.clone(), false),
            How::Stdin => (raw.clone(), true),
            How::Mbox => (as_mbox(raw), false),
            // A file an agent wrote with an envelope line: escaped as an
            // mbox is (a body line starting `From ` after a blank line,
            // unescaped, would start another message), blank lines after.
            How::Enveloped => ([&as_mbox(raw)[..], b"\n\n"].concat(), false),
            How::Crlf => (to_crlf(raw), true),
        };
        let path = self.db.path("given.eml");
        let mut all: Vec<&str> = args.to_vec();
        let out = if stdin {
            all.push("-");
            self.db.run(&all, Some(&input))
        } else {
            fs::write(&path, &input).unwrap();
            all.push(utf8(&path));
            self.db.run(&all, None)
        };
        assert_exit(&out, 0, &all);
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Learn(m, label, how) => {
                let flag = if label == Label::Spam {
                    "--spam"
                } else {
                    "--ham"
                };
                self.with_message(&["learn", flag], m, how);
                self.put(m, Some(label));
            }
            Op::Unlearn(m, how) => {
                // Only what was learned can be unlearned.
                if self.folder[m].is_some() {
                    self.with_message(&["unlearn"], m, how);
                    self.put(m, None);
                }
            }
            Op::Relabel(m, label) => {
                self.put(m, Some(label));
                self.train();
            }
            Op::Train => {
                let summary = self.train();
                assert_eq!(summary["learned"], 0, "{summary}");
                assert_eq!(summary["relearned"], 0, "{summary}");
            }
            Op::Prune => {
                let out = self.db.run(&["prune", "--min-age", "0"], None);
                assert_exit(&out, 0, &["prune"]);
                self.pruned = true;
            }
            Op::Deliver(m) => {
                let out = self.db.run(&["filter"], Some(&self.bytes[m]));
                assert_exit(&out, 0, &["filter"]);
                self.bytes[m] = out.stdout;
                let folder = self.folder[m];
                self.put(m, folder);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, failure_persistence: None, ..ProptestConfig::default() })]

    /// The acceptance property: no command fails, no message is counted
    /// twice (a last `train` over the folders learns and moves nothing),
    /// and the counts equal those of a fresh `train` over the final folders,
    /// or, after `prune`, differ only by counts it removed.
    #[test]
    fn any_sequence_keeps_one_count_per_message(ops in prop::collection::vec(op(sample_files().len()), 1..12)) {
        let mut world = World::new();
        for op in &ops {
            world.apply(op);
        }
        world.apply(&Op::Train);

        let fresh = Db::new();
        let out = fresh.run(
            &["train", "--spam", utf8(&world.spam), "--ham", utf8(&world.ham)],
            None,
        );
        assert_exit(&out, 0, &["fresh train"]);
        let (ours, our_tokens, our_registry) = counts_of(&world.db.dir());
        let (theirs, their_tokens, their_registry) = counts_of(&fresh.dir());
        prop_assert_eq!(our_registry, their_registry);
        prop_assert_eq!(ours.totals().unwrap(), theirs.totals().unwrap());
        if world.pruned {
            for (token, c) in &our_tokens {
                let fresh = their_tokens.get(token).copied().unwrap_or_default();
                prop_assert!(c.ham <= fresh.ham && c.spam <= fresh.spam, "{}: {:?} > {:?}", token, c, fresh);
            }
        } else {
            prop_assert_eq!(our_tokens, their_tokens);
        }
    }
}

#[test]
fn a_model_damaged_or_gone_does_not_make_the_journal_vanish() {
    // What learn recorded in the journal alone is in no model and not yet
    // in the count store: a writer must take it in whatever the model.
    for damage in ["flip", "remove"] {
        let db = Db::new();
        db.train_sample();
        let mut learned = Vec::new();
        for i in 0..3 {
            let path = db.path(&format!("new-{i}.eml"));
            fs::write(&path, unseen(i, &format!("zqn{i}"))).unwrap();
            ok(&db, &["learn", "--spam", utf8(&path)], None);
            learned.push(path);
        }
        let model = DbPaths::new(db.dir()).snapshot();
        if damage == "flip" {
            let mut bytes = fs::read(&model).unwrap();
            let at = bytes.len() / 2;
            bytes[at] ^= 1;
            fs::write(&model, bytes).unwrap();
        } else {
            fs::remove_file(&model).unwrap();
        }
        // The obvious repair: train over the folders as they were.
        ok(
            &db,
            &[
                "train",
                "--spam",
                utf8(&sample_spam()),
                "--ham",
                utf8(&sample_ham()),
            ],
            None,
        );
        assert_eq!(db.counts(), [24, 27], "{damage}: the three learns are kept");
        for path in &learned {
            let out = db.ok(&["learn", "--spam", utf8(path)], None);
            assert!(out.contains("already learned"), "{damage}: {out}");
        }
    }
}

#[test]
fn a_count_set_to_zero_does_not_cancel_a_later_learn() {
    // The journal's entries are replayed one by one, as the store takes
    // them in: a clamped unlearn followed by a learn leaves the learn.
    let db = Db::new();
    db.train_sample();
    let unique = db.path("u.eml");
    fs::write(
        &unique,
        "From: zed@uniq.example\nSubject: qwertyuniq asdfuniq\n\nzxcvuniq poiuuniq lkjhuniq\n",
    )
    .unwrap();
    ok(&db, &["learn", "--ham", utf8(&unique)], None);
    ok(&db, &["prune", "--min-age", "0"], None);
    let noted = ok(&db, &["learn", "--spam", utf8(&unique)], None);
    assert!(noted.contains("could not be taken back exactly"), "{noted}");
    ok(&db, &["unlearn", utf8(&unique)], None);
    let quiet = ok(&db, &["learn", "--ham", utf8(&unique)], None);
    assert!(
        quiet.is_empty(),
        "nothing inexact in a plain learn: {quiet}"
    );
    let unknown = |db: &Db| -> u64 {
        let json = json_lines(&db.ok(&["explain", "--json", utf8(&unique)], None));
        json[0]["unknown_tokens"]
            .as_u64()
            .unwrap_or_else(|| panic!("{}", json[0]))
    };
    assert_eq!(unknown(&db), 0, "the relearned message's words are known");
    // Through the count store, too.
    ok(
        &db,
        &[
            "train",
            "--spam",
            utf8(&sample_spam()),
            "--ham",
            utf8(&sample_ham()),
            utf8(&unique),
        ],
        None,
    );
    assert_eq!(unknown(&db), 0);
    let again = ok(&db, &["unlearn", utf8(&unique)], None);
    assert!(again.is_empty(), "taken back exactly: {again}");
}

#[test]
fn a_forged_field_filter_renames_anywhere_does_not_change_the_message() {
    // filter renames forged fields past lines that end the header block
    // for us (a malformed line, a `\r\n` line in an LF message) and in
    // spellings some agent reads as ours: the delivered copy must still be
    // the message learned raw.
    let db = Db::new();
    db.train_sample();
    let forged: [&[u8]; 7] = [
        b"From: alice@example.org\nSubject: lunch\n\x80bad: x\nX-Spam-Flag: YES\nTo: bob@example.org\n\nSee you at noon.\n",
        b"From: alice@example.org\nSubject: tea\n\r\nX-Spam-Flag: YES\n\nSee you at four.\n",
        b"From: alice@example.org\nSubject: cake\nX-Spam-\r\r\rFlag: YES\n\nSee you at five.\n",
        b"From: alice@example.org\nSubject: pie\nX-Spam-Flag\0: YES\n\nSee you at six.\n",
        b"From: alice@example.org\nSubject: jam\nFrom bob Wed Aug 16 00:29:00 2023\nX-Spam-Status: No\n\nAt seven.\n",
        b"From: alice@example.org\r\nSubject: bun\r\n:colon\r\nX-Spam-\rFlag: YES\r\n\r\nAt eight.\r\n",
        b"From: alice@example.org\nSubject: tart\nX-Spam-Score: 9.9\nOld-X-Spam-Level: ***\n\nAt nine.\n",
    ];
    for raw in forged {
        let file = db.path("raw.eml");
        fs::write(&file, raw).unwrap();
        let out = db.ok(&["learn", "--ham", utf8(&file)], None);
        assert!(out.contains("learned as ham"), "{out}");
        let delivered = db.run(&["filter"], Some(raw));
        assert_exit(&delivered, 0, &["filter"]);
        let out = db.ok(&["learn", "--ham", "-"], Some(&delivered.stdout));
        assert!(
            out.contains("already learned"),
            "{:?} delivered as {:?}: {out}",
            String::from_utf8_lossy(raw),
            String::from_utf8_lossy(&delivered.stdout)
        );
    }
    // X-Spam-Score and Old-X-Spam-Level are volatile too.
    let bare = b"From: alice@example.org\nSubject: tart\n\nAt nine.\n";
    let out = db.ok(&["learn", "--ham", "-"], Some(bare));
    assert!(out.contains("already learned"), "{out}");
}

/// Learns `raw` through the library as a version before the canonical
/// digest did: registered under `digest` only.
fn learn_as_before(db: &Db, raw: &[u8], digest: bayesmail::vocab::Digest, label: Label) {
    let mut trainer =
        bayesmail::db::Trainer::open(&DbPaths::new(db.dir()), std::time::Duration::from_secs(60))
            .unwrap();
    let message = bayesmail::db::Labelled {
        features: features(raw),
        identity: digest.into(),
        label,
    };
    trainer.learn(&[message], &mut |_| {}).unwrap();
    trainer.compile(Default::default(), None).unwrap();
}

#[test]
fn a_database_from_before_the_canonical_digest_knows_its_messages() {
    use bayesmail::message::legacy_digest;
    let db = Db::new();
    db.train_sample();
    let raw = unseen(5, "zqlegacy");
    // Learned from a Maildir by the earlier version: the file as it was,
    // with the blank line that ends a message in an mbox.
    let stored = [&raw[..], b"\n"].concat();
    learn_as_before(&db, &stored, legacy_digest(&stored), Label::Ham);
    assert_eq!(db.counts(), [25, 24]);
    // Given now as a file (read by the mbox reader, without that line).
    let file = db.path("m.eml");
    fs::write(
        &file,
        [&b"From a@b.example Mon Jan  1 00:00:00 2024\n"[..], &stored].concat(),
    )
    .unwrap();
    let out = db.ok(&["learn", "--ham", utf8(&file)], None);
    assert!(out.contains("already learned"), "{out}");
    let out = db.ok(&["learn", "--spam", utf8(&file)], None);
    assert!(out.contains("moved to spam"), "{out}");
    assert_eq!(db.counts(), [24, 25]);

    // Counted twice by the earlier version (with and without the blank
    // line): a train over the folders counts it once.
    let other = unseen(6, "zqtwice");
    let twice = [&other[..], b"\n"].concat();
    learn_as_before(&db, &other, legacy_digest(&other), Label::Ham);
    learn_as_before(&db, &twice, legacy_digest(&twice), Label::Ham);
    let inbox = maildir(&db.path("Inbox"));
    for (i, f) in fs::read_dir(sample_ham()).unwrap().enumerate() {
        fs::copy(f.unwrap().path(), inbox.join(format!("cur/{i}:2,S"))).unwrap();
    }
    fs::write(inbox.join("cur/twice:2,S"), &twice).unwrap();
    let junk = maildir(&db.path("Junk"));
    for (i, f) in fs::read_dir(sample_spam()).unwrap().enumerate() {
        fs::copy(f.unwrap().path(), junk.join(format!("cur/{i}:2,S"))).unwrap();
    }
    fs::write(junk.join("cur/m:2,S"), &stored).unwrap();
    let summary = db.train(&[&junk], &[&inbox]);
    assert_eq!(summary["merged"], 1, "{summary}");
    assert_eq!(db.counts(), [25, 25]);
    let fresh = Db::new();
    fresh.train(&[&junk], &[&inbox]);
    assert_eq!(fresh.counts(), db.counts());
    let summary = db.train(&[&junk], &[&inbox]);
    assert!(summary.get("merged").is_none(), "{summary}");
}

#[test]
fn a_link_at_the_journal_is_refused_by_readers_and_writers_alike() {
    let db = Db::new();
    db.train_sample();
    let extra = db.path("extra.eml");
    fs::write(&extra, unseen(2, "zqlink")).unwrap();
    ok(&db, &["learn", "--spam", utf8(&extra)], None);
    let journal = DbPaths::new(db.dir()).journal();
    let elsewhere = db.path("elsewhere.journal");
    fs::rename(&journal, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &journal).unwrap();
    for args in [vec!["stats"], vec!["learn", "--ham", utf8(&extra)]] {
        let out = db.run(&args, None);
        assert_exit(&out, 2, &args);
        assert!(
            stderr(&out).contains("symbolic link"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = db.run(&["filter"], Some(&fs::read(&extra).unwrap()));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("X-Spam-Status: Unknown, reason=model-unreadable"),
        "{}",
        stderr(&out)
    );
    assert!(
        fs::symlink_metadata(&journal)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn scan_never_creates_a_copy_through_a_linked_tmp_directory() {
    let db = Db::new();
    db.train_sample();
    let target = db.path("Junk");
    fs::create_dir_all(target.join("cur")).unwrap();
    fs::create_dir_all(target.join("new")).unwrap();
    let victim = db.path("victim");
    fs::create_dir(&victim).unwrap();
    std::os::unix::fs::symlink(&victim, target.join("tmp")).unwrap();
    let out = db.run(
        &[
            "scan",
            "--copy-spam-to",
            utf8(&target),
            utf8(&sample_spam()),
        ],
        None,
    );
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert_eq!(
        fs::read_dir(&victim).unwrap().count(),
        0,
        "nothing created through the link"
    );
}
