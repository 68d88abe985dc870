//! The model journal and the private database: `learn` and `unlearn` append
//! to the journal instead of recompiling the model, readers apply it, a
//! burst of concurrent `learn`s counts as one `train`, writers killed at
//! any moment (learning, folding, training) leave a database that opens,
//! classifies and agrees with its registry, and the database is private.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bayesmail::db::{Classifier, DbPaths, Trainer};
use bayesmail::message::digest;
use bayesmail::model::Label;
use bayesmail::store::Store;
use bayesmail::vocab::Feature;

use crate::common::*;

/// Generous: these tests wait on each other's locks on a busy machine.
const WAIT: &str = "600";

/// `n` messages that are in neither the sample corpus nor each other: a
/// sample message with a header and a body line of its own, keeping its
/// label. Written to `DIR/ham` and `DIR/spam`; returned with their labels.
fn extra_messages(dir: &Path, n: usize) -> Vec<(PathBuf, Label)> {
    let files = sample_files();
    let mut out = Vec::new();
    for label in ["ham", "spam"] {
        fs::create_dir_all(dir.join(label)).unwrap();
    }
    for i in 0..n {
        let source = &files[i % files.len()];
        let label = if source.parent().unwrap().ends_with("spam") {
            Label::Spam
        } else {
            Label::Ham
        };
        let mut bytes = format!("X-Extra: {i}\n").into_bytes();
        bytes.extend(fs::read(source).unwrap());
        bytes.extend(format!("\nextra line {i} zq{i}x\n").as_bytes());
        let path = dir
            .join(label.to_string())
            .join(format!("extra-{i:03}.eml"));
        fs::write(&path, bytes).unwrap();
        out.push((path, label));
    }
    out
}

fn flag(label: Label) -> &'static str {
    match label {
        Label::Ham => "--ham",
        Label::Spam => "--spam",
    }
}

fn command(db: &Db, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bayesmail"));
    cmd.args(db.global_args())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Asserts that the model readers see (snapshot + journal) holds exactly
/// the counts of the store: totals, every token, the vocabulary size.
fn assert_model_matches_store(db: &Db) {
    let paths = DbPaths::new(db.dir());
    let classifier = Classifier::open(&paths).expect("the model opens");
    // A writer takes in what `learn` left in the journal alone.
    let trainer = Trainer::open(&paths, Duration::from_secs(60)).unwrap();
    let store = trainer.store();
    assert_eq!(classifier.header().totals, store.totals().unwrap());
    let mut tokens = 0;
    store
        .for_each_token(&mut |t, c| {
            // Weights are looked up as counts are, but are no vocabulary.
            tokens += usize::from(!matches!(t, Feature::Weight(_)));
            assert_eq!(classifier.lookup(t), Some(c), "token {t:?}");
        })
        .unwrap();
    assert_eq!(classifier.vocabulary(), tokens);
    assert_eq!(
        classifier.header().store.as_ref(),
        Some(&store.identity().unwrap())
    );
}

/// Asserts that the store's message counts per class are those its
/// registry records for `messages` (every message ever given to it).
fn assert_store_matches_registry(db: &Db, messages: &[PathBuf]) {
    let paths = DbPaths::new(db.dir());
    let trainer = Trainer::open(&paths, Duration::from_secs(60)).unwrap();
    let store = trainer.store();
    let mut by_label = [0u64; 2];
    for m in messages {
        if let Some(label) = store.label_of(&digest(&fs::read(m).unwrap())).unwrap() {
            by_label[label.index()] += 1;
        }
    }
    assert_eq!(store.totals().unwrap().messages, by_label);
    assert_eq!(store.registry_len().unwrap(), by_label.iter().sum::<u64>());
}

/// A model file of a tokenizer version this build does not read (as a
/// newer bayesmail writes it, and an administrator who rolls back finds
/// it): a learn never appends to its journal, which readers refuse with
/// the file. Before, the journal took it and the learn said "learned"
/// while every judgment said `model-version`.
#[test]
fn a_learn_never_appends_to_a_model_file_readers_refuse() {
    let db = Db::new();
    db.train_sample();
    let model = db.model();
    let mut bytes = fs::read(&model).unwrap();
    let tokenizer = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
    bytes[12..16].copy_from_slice(&(tokenizer + 1).to_le_bytes());
    fs::write(&model, &bytes).unwrap();
    let probe = &sample_files()[0];
    let refused = db.run(&["classify", utf8(probe)], None);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let (extra, _) = extra_messages(&db.path("extra"), 1).remove(0);
    let learned = db.run(&["learn", "--ham", utf8(&extra)], None);
    // Either refused, or learned into a model readers read: never a
    // "learned" no one can judge with.
    if learned.status.success() {
        let judged = db.run(&["classify", utf8(probe)], None);
        assert!(judged.status.success(), "{}", stderr(&judged));
    }
}

#[test]
fn learn_and_unlearn_append_to_the_journal_and_leave_the_model_file_alone() {
    let db = Db::new();
    db.train_sample();
    let tmp = tempfile::tempdir().unwrap();
    let (message, _) = extra_messages(tmp.path(), 1).remove(0);
    let message = utf8(&message);
    let model = fs::read(db.model()).unwrap();
    let journal = DbPaths::new(db.dir()).journal();
    let before = db.counts();

    db.ok(&["learn", "--spam", message], None);
    assert_eq!(db.counts(), [before[0], before[1] + 1]);
    // The change went to the journal, a record the size of the message's
    // features, not to a recompiled model.
    assert!(
        fs::read(db.model()).unwrap() == model,
        "model.bin rewritten"
    );
    let one = fs::metadata(&journal).expect("a journal").len();
    let features = features(&fs::read(message).unwrap());
    let per_feature = 64 * (features.tokens.len() + features.grams.len()) as u64;
    assert!(one < 1024 + per_feature, "journal of {one} bytes");

    db.ok(&["unlearn", message], None);
    assert_eq!(db.counts(), before);
    assert!(
        fs::read(db.model()).unwrap() == model,
        "model.bin rewritten"
    );
    assert_model_matches_store(&db);

    // `train` folds the journal into a new model.
    db.train(&[&sample_spam()], &[&sample_ham()]);
    assert!(!journal.exists(), "train left the journal");
    assert_model_matches_store(&db);
}

/// Earlier versions left a record beside the model (`model.bin.checked`)
/// that let readers skip the checksum; nothing reads it now, and the next
/// `learn` removes it. A model whose mode a user loosened for a delivery
/// agent reads as before.
#[cfg(unix)]
#[test]
fn a_learn_removes_the_old_check_record() {
    use std::os::unix::fs::PermissionsExt;
    let db = Db::new();
    db.train_sample();
    let paths = DbPaths::new(db.dir());
    let model = paths.snapshot();
    let record = db.dir().join("model.bin.checked");
    assert!(!record.exists(), "train leaves no record");
    std::fs::write(&record, b"BAYESCHK, left by an earlier version").unwrap();
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o640)).unwrap();
    bayesmail::store::Snapshot::open(&model).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (message, label) = &extra_messages(tmp.path(), 1)[0];
    let out = db.run(&["learn", flag(*label), utf8(message)], None);
    assert_exit(&out, 0, &["learn"]);
    assert!(!record.exists(), "learn removed the old record");
    bayesmail::store::Snapshot::open(&model).unwrap();
}

#[test]
fn a_journal_past_its_bound_is_folded_into_the_model() {
    let db = Db::new();
    db.train_sample();
    let tmp = tempfile::tempdir().unwrap();
    let extra = extra_messages(tmp.path(), 6);
    let journal = DbPaths::new(db.dir()).journal();
    let mut sizes = Vec::new();
    for (path, label) in &extra {
        let out = command(&db, &["learn", flag(*label), utf8(path)])
            .env("BAYESMAIL_JOURNAL_LIMIT", "20000")
            .output()
            .unwrap();
        assert_exit(&out, 0, &["learn"]);
        sizes.push(fs::metadata(&journal).map_or(0, |m| m.len()));
        assert!(sizes.last().unwrap() <= &20_000, "{sizes:?}");
        assert_model_matches_store(&db);
    }
    // It grew, then folded (and started again).
    assert!(sizes.windows(2).any(|w| w[1] < w[0]), "{sizes:?}");
}

#[test]
fn a_burst_of_learns_all_succeed_and_count_as_one_train() {
    let tmp = tempfile::tempdir().unwrap();
    let extra = extra_messages(tmp.path(), 50);
    let burst = Db::new();
    burst.train_sample();
    let start = Instant::now();
    let children: Vec<_> = extra
        .iter()
        .map(|(path, label)| {
            command(&burst, &["learn", "--wait", WAIT, flag(*label), utf8(path)])
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_exit(&out, 0, &["learn in a burst"]);
    }
    eprintln!("50 learns in {:.1}s", start.elapsed().as_secs_f64());
    assert!(DbPaths::new(burst.dir()).journal().exists());

    let once = Db::new();
    once.train(
        &[&sample_spam(), &tmp.path().join("spam")],
        &[&sample_ham(), &tmp.path().join("ham")],
    );
    assert_eq!(burst.counts(), once.counts());
    let a = Classifier::open(&DbPaths::new(burst.dir())).unwrap();
    let b = Classifier::open(&DbPaths::new(once.dir())).unwrap();
    assert_eq!(a.header().totals, b.header().totals);
    assert_eq!(a.vocabulary(), b.vocabulary());
    let trainer = Trainer::open(&DbPaths::new(once.dir()), Duration::ZERO).unwrap();
    trainer
        .store()
        .for_each_token(&mut |t, c| {
            // The online discriminative view's weights are steps in the
            // order learned: a burst and a run step differently.
            if !matches!(t, Feature::Weight(_)) {
                assert_eq!(a.lookup(t), Some(c), "token {t:?}");
            }
        })
        .unwrap();
    drop(trainer);
    assert_model_matches_store(&burst);
}

/// A small deterministic generator (xorshift), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A fraction in [0, 1).
    fn fraction(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Starts `cmd`, kills it (SIGKILL) after `after` unless it ended first;
/// returns whether it was killed.
fn kill_after(mut cmd: Command, after: Duration) -> bool {
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if start.elapsed() >= after {
            child.kill().unwrap();
            child.wait().unwrap();
            return true;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// How long `cmd` takes, run to the end.
fn duration_of(mut cmd: Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    start.elapsed()
}

/// After a writer was killed: the model opens and classifies, the store
/// agrees with its registry, and the next writer (here a `learn` that
/// changes nothing) brings the model level with the store.
fn assert_survived(db: &Db, all: &[PathBuf], known: &Path) {
    let out = db.run(&["classify", "--json", utf8(&sample_spam())], None);
    assert_exit(&out, 0, &["classify after a kill"]);
    assert_eq!(
        json_lines(&String::from_utf8(out.stdout).unwrap()).len(),
        24
    );
    assert_store_matches_registry(db, all);
    db.ok(&["learn", "--wait", WAIT, "--spam", utf8(known)], None);
    assert_model_matches_store(db);
}

/// Kills `make(i)` at a random moment of its run, `rounds` times.
fn kill_at_random_moments(
    seed: u64,
    rounds: usize,
    db: &Db,
    all: &[PathBuf],
    make: &mut dyn FnMut(usize) -> Command,
) -> usize {
    let known = sample_spam().join(
        fs::read_dir(sample_spam())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .file_name(),
    );
    let mut rng = Rng(seed);
    // Killed somewhere in the span of an undisturbed run, measured on the
    // first round.
    let span = duration_of(make(0));
    assert_survived(db, all, &known);
    let mut killed = 0;
    for i in 1..=rounds {
        let after = span.mul_f64(1.2 * rng.fraction());
        killed += usize::from(kill_after(make(i), after));
        assert_survived(db, all, &known);
    }
    eprintln!("killed {killed} of {rounds} runs");
    killed
}

/// Every message a kill test may have given to the database.
fn all_messages(extra: &[(PathBuf, Label)]) -> Vec<PathBuf> {
    let mut all = sample_files();
    all.extend(extra.iter().map(|(p, _)| p.clone()));
    all
}

#[test]
fn learn_and_unlearn_killed_at_random_moments_leave_a_consistent_database() {
    let tmp = tempfile::tempdir().unwrap();
    let extra = extra_messages(tmp.path(), 12);
    let all = all_messages(&extra);
    let db = Db::new();
    db.train_sample();
    let mut rng = Rng(0x5eed_0001);
    let killed = kill_at_random_moments(0x5eed_0002, 12, &db, &all, &mut |i| {
        let (path, label) = &extra[i % extra.len()];
        let args = if i > 0 && rng.next().is_multiple_of(3) {
            vec!["unlearn", "--wait", WAIT, utf8(path)]
        } else {
            vec!["learn", "--wait", WAIT, flag(*label), utf8(path)]
        };
        command(&db, &args)
    });
    assert!(killed > 0, "no run was killed");
}

#[test]
fn learns_killed_while_folding_leave_a_consistent_database() {
    let tmp = tempfile::tempdir().unwrap();
    let extra = extra_messages(tmp.path(), 10);
    let all = all_messages(&extra);
    let db = Db::new();
    db.train_sample();
    let killed = kill_at_random_moments(0x5eed_0003, 10, &db, &all, &mut |i| {
        let (path, label) = &extra[i % extra.len()];
        // A bound every change passes: each `learn` folds.
        let mut cmd = command(&db, &["learn", "--wait", WAIT, flag(*label), utf8(path)]);
        cmd.env("BAYESMAIL_JOURNAL_LIMIT", "1");
        cmd
    });
    assert!(killed > 0, "no run was killed");
}

#[test]
fn train_killed_at_random_moments_leaves_a_consistent_database() {
    let tmp = tempfile::tempdir().unwrap();
    let extra = extra_messages(tmp.path(), 12);
    let all = all_messages(&extra);
    let db = Db::new();
    db.train_sample();
    // Journal entries for `train` to fold, then training runs killed.
    for (path, label) in &extra[..3] {
        db.ok(&["learn", flag(*label), utf8(path)], None);
    }
    let (spam, ham) = (tmp.path().join("spam"), tmp.path().join("ham"));
    let killed = kill_at_random_moments(0x5eed_0004, 8, &db, &all, &mut |i| {
        // Alternately the extra messages and the sample, so that each run
        // changes something.
        let (s, h) = if i % 2 == 0 {
            (spam.clone(), ham.clone())
        } else {
            (sample_ham(), sample_spam())
        };
        command(
            &db,
            &[
                "train",
                "--wait",
                WAIT,
                "--spam",
                utf8(&s),
                "--ham",
                utf8(&h),
            ],
        )
    });
    assert!(killed > 0, "no run was killed");
}

#[cfg(unix)]
#[test]
fn the_database_is_private_unless_the_user_loosens_it() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let db = Db::new();
    db.train_sample();
    let paths = DbPaths::new(db.dir());
    assert_eq!(mode(&db.dir()), 0o700);
    assert_eq!(mode(&paths.counts()), 0o700);
    assert_eq!(mode(&paths.snapshot()), 0o600);
    for entry in fs::read_dir(paths.counts()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            assert_eq!(mode(&entry.path()), 0o600, "{}", entry.path().display());
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let (message, _) = extra_messages(tmp.path(), 1).remove(0);
    db.ok(&["learn", "--spam", utf8(&message)], None);
    assert_eq!(mode(&paths.journal()), 0o600);
    // Files sled made at this open (its own snapshot) too.
    for entry in fs::read_dir(paths.counts()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            assert_eq!(mode(&entry.path()), 0o600, "{}", entry.path().display());
        }
    }
    let out = db.run(&["stats"], None);
    assert_exit(&out, 0, &["stats"]);
    assert!(!stderr(&out).contains("readable"), "{}", stderr(&out));

    // Loosened by the user: kept through a rewrite, and `stats` warns.
    let loose = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    loose(&db.dir(), 0o755);
    loose(&paths.snapshot(), 0o644);
    db.ok(&["unlearn", utf8(&message)], None);
    db.train(&[&sample_spam()], &[&sample_ham()]);
    assert_eq!(mode(&db.dir()), 0o755);
    assert_eq!(mode(&paths.snapshot()), 0o644);
    let out = db.run(&["stats"], None);
    assert_exit(&out, 0, &["stats"]);
    let err = stderr(&out);
    assert!(err.contains("readable by other users"), "{err}");
    assert!(err.contains("chmod 700"), "{err}");
}

/// `learn` and `unlearn` of a message take the journal alone: they run
/// while something else holds the count store (only the writers' lock is
/// theirs to wait for), and the next writer takes their changes in.
#[test]
fn learn_and_unlearn_do_not_open_the_count_store() {
    let db = Db::new();
    db.train_sample();
    let tmp = tempfile::tempdir().unwrap();
    let extra = extra_messages(tmp.path(), 3);
    let paths = DbPaths::new(db.dir());
    let held = bayesmail::store::SledStore::open(&paths.counts(), Duration::ZERO)
        .expect("nobody holds the store");
    for (message, label) in &extra {
        let out = db.run(&["learn", "--wait", "0", flag(*label), utf8(message)], None);
        assert_exit(&out, 0, &["learn while the store is held"]);
    }
    let out = db.run(&["unlearn", "--wait", "0", utf8(&extra[0].0)], None);
    assert_exit(&out, 0, &["unlearn while the store is held"]);
    // Learned again under the same label: nothing to do.
    let (again, label) = &extra[1];
    let out = db.run(&["learn", "--wait", "0", flag(*label), utf8(again)], None);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("already learned"), "{said}");
    drop(held);
    let mut expected = [24u64, 24];
    for (_, label) in &extra[1..] {
        expected[label.index()] += 1;
    }
    assert_eq!(db.counts(), expected);
    assert_model_matches_store(&db);
    assert_store_matches_registry(&db, &all_messages(&extra));
}

/// A copy of a learned message whose headers changed in ways the digest
/// ignores (a filter's own `X-Spam-Status`) has other features: unlearning
/// or moving it is refused as a count going negative, and the model stays
/// readable (the journal is never given an entry that does not apply).
#[test]
fn a_copy_with_volatile_fields_is_the_same_message_and_the_model_stays_readable() {
    let db = Db::new();
    db.train_sample();
    let tmp = tempfile::tempdir().unwrap();
    let (message, _) = extra_messages(tmp.path(), 1).remove(0);
    db.ok(&["learn", "--spam", utf8(&message)], None);
    let mut copy = b"X-Spam-Status: Yes, score=0.999\nX-Keywords: junk\n".to_vec();
    copy.extend(fs::read(&message).unwrap());
    let changed = tmp.path().join("changed.eml");
    fs::write(&changed, &copy).unwrap();
    assert_eq!(
        digest(&copy),
        digest(&fs::read(&message).unwrap()),
        "the digest ignores those headers"
    );
    assert_eq!(
        features(&copy),
        features(&fs::read(&message).unwrap()),
        "and so does every view"
    );
    for (args, counts) in [
        (vec!["unlearn", utf8(&changed)], [24, 24]),
        (vec!["learn", "--ham", utf8(&changed)], [25, 24]),
        (vec!["learn", "--spam", utf8(&message)], [24, 25]),
    ] {
        let out = db.run(&args, None);
        assert_exit(&out, 0, &args);
        assert!(
            stderr(&out).is_empty(),
            "taken back exactly: {}",
            stderr(&out)
        );
        assert_eq!(db.counts(), counts, "{args:?}");
        let out = db.run(&["classify", utf8(&message)], None);
        assert_exit(&out, 0, &["classify after the change"]);
    }
    assert_model_matches_store(&db);
}

/// A journal lost after a writer took it into the store loses no later
/// learn: `learn` does not start a journal at a state the store has left.
#[test]
fn a_journal_lost_after_a_fold_loses_no_later_learn() {
    let db = Db::new();
    db.train_sample();
    let tmp = tempfile::tempdir().unwrap();
    let extra = extra_messages(tmp.path(), 2);
    let paths = DbPaths::new(db.dir());
    db.ok(&["learn", flag(extra[0].1), utf8(&extra[0].0)], None);
    // A writer opens the store (takes the journal in) and stops.
    drop(Trainer::open(&paths, Duration::from_secs(60)).unwrap());
    fs::remove_file(paths.journal()).unwrap();
    db.ok(&["learn", flag(extra[1].1), utf8(&extra[1].0)], None);
    let trainer = Trainer::open(&paths, Duration::from_secs(60)).unwrap();
    for (path, label) in &extra {
        let d = digest(&fs::read(path).unwrap());
        assert_eq!(trainer.store().label_of(&d).unwrap(), Some(*label));
    }
    drop(trainer);
    assert_model_matches_store(&db);
}

/// Learning within an address-space limit of 256 MB, Dovecot's
/// `default_vsz_limit`, which learning from IMAP moves runs under, also
/// where the count store is opened (a full journal, forced here): before,
/// glibc's malloc arenas for the store's threads reserved more than the
/// limit, and every such `learn` aborted, so IMAP learning stopped for
/// good once the journal was full. A new database too.
#[test]
fn learn_works_within_dovecots_address_space_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let extra = extra_messages(tmp.path(), 4);
    let trained = Db::new();
    trained.train_sample();
    let new = Db::new();
    for db in [&trained, &new] {
        for (path, label) in &extra {
            let mut cmd = Command::new("prlimit");
            cmd.arg("--as=268435456")
                .arg(env!("CARGO_BIN_EXE_bayesmail"))
                .args(db.global_args())
                .args(["learn", "--wait", WAIT, flag(*label), utf8(path)])
                .env("BAYESMAIL_JOURNAL_LIMIT", "1");
            let out = cmd.output().expect("prlimit runs (util-linux)");
            assert_exit(&out, 0, &["learn under 256 MB", utf8(path)]);
        }
    }
}
