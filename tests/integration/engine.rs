//! The engine's calls as a library user (a daemon) makes them, with no
//! binary in between: a training run with its progress and interruption,
//! a scan into a sink, a delivered message's status, and an evaluation.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bayesmail::db::{
    Calibration, Database, Event, Interrupted, Labelled, Progress, Reason, Status, Training,
};
use bayesmail::decision::calibrate::LOGISTIC;
use bayesmail::decision::{Decider, Verdict};
use bayesmail::eval::{Corpus, evaluate};
use bayesmail::features::Extractor;
use bayesmail::model::{Label, Params};
use bayesmail::store::journal::DEFAULT_JOURNAL_LIMIT;

use crate::common::*;

fn decider() -> Decider {
    Decider {
        costs: Default::default(),
        min_known: bayesmail::config::DEFAULT_MIN_KNOWN,
        min_per_class: bayesmail::config::DEFAULT_MIN_PER_CLASS,
    }
}

fn training<'a>(
    ham: &'a [std::path::PathBuf],
    spam: &'a [std::path::PathBuf],
    interrupt: &'a AtomicBool,
) -> Training<'a> {
    Training {
        ham,
        spam,
        options: Default::default(),
        params: Params::default().check().unwrap(),
        select: bayesmail::fit::Select::ALL,
        wait: Duration::from_secs(5),
        interrupt,
    }
}

#[test]
fn a_training_run_reports_its_progress_and_leaves_a_model() {
    let db = Db::new();
    let (ham, spam) = ([sample_ham()], [sample_spam()]);
    let stop = AtomicBool::new(false);
    let read = Mutex::new((0u64, 0usize));
    let calibrating = AtomicBool::new(false);
    let trained = Database::new(db.dir())
        .train(&training(&ham, &spam, &stop), &|p| match p {
            Progress::Read { bytes, messages } => {
                let mut r = read.lock().unwrap();
                r.0 += bytes;
                r.1 = messages;
            }
            Progress::Calibrating => calibrating.store(true, Ordering::SeqCst),
            other => panic!("unexpected progress {other:?}"),
        })
        .unwrap();
    assert_eq!(trained.read, 48);
    assert_eq!(trained.interrupted, None);
    assert_eq!(trained.summary.learned, 48);
    assert_eq!(trained.summary.totals, [24, 24]);
    assert!(trained.summary.snapshot_written);
    assert!(matches!(
        trained.calibration,
        Calibration::Fitted { messages: 48, .. }
    ));
    let (bytes, messages) = *read.lock().unwrap();
    let on_disk: u64 = sample_files()
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!((bytes, messages), (on_disk, 48));
    assert!(calibrating.load(Ordering::SeqCst));
    assert_eq!(db.counts(), [24, 24]);
}

/// The pseudo-counts a training run settled on stay the model's when it
/// learns afterwards, whatever a learn is given for a first model.
#[test]
fn a_trained_models_pseudo_counts_outlive_its_learns() {
    let db = Db::new();
    let (ham, spam) = ([sample_ham()], [sample_spam()]);
    let stop = AtomicBool::new(false);
    let mut job = training(&ham, &spam, &stop);
    job.params = Params {
        a: 0.3,
        b: 0.3,
        ..Params::default()
    }
    .check()
    .unwrap();
    job.select = bayesmail::fit::Select::NONE;
    let database = Database::new(db.dir());
    database.train(&job, &|_| {}).unwrap();
    let pseudo = |db: &Database| {
        let p = db.reader().unwrap().classifier().header().params;
        (p.a, p.b)
    };
    assert_eq!(pseudo(&database), (0.3, 0.3));
    let mut extractor = Extractor::new();
    for (i, label) in [Label::Spam, Label::Ham].into_iter().enumerate() {
        let (features, identity) = extractor.read(&unseen(i, "zqprior")).unwrap();
        let message = Labelled {
            features,
            identity,
            label,
        };
        database
            .learn(
                &[message],
                Duration::from_secs(5),
                // Through the journal, then with none: the model compiled again.
                [DEFAULT_JOURNAL_LIMIT, 0][i],
                Params::default(),
            )
            .unwrap();
        assert_eq!(pseudo(&database), (0.3, 0.3), "after learn {i}");
    }
}

#[test]
fn a_training_run_interrupted_while_reading_stores_nothing() {
    let db = Db::new();
    let (ham, spam) = ([sample_ham()], [sample_spam()]);
    let stop = AtomicBool::new(false);
    let trained = Database::new(db.dir())
        .train(&training(&ham, &spam, &stop), &|p| {
            if let Progress::Read { .. } = p {
                // As a Ctrl-C handler would, during the first batch.
                stop.store(true, Ordering::SeqCst);
            }
        })
        .unwrap();
    assert_eq!(trained.interrupted, Some(Interrupted::Reading));
    assert_eq!(trained.summary.learned, 0);
    assert!(!db.model().exists(), "no model written");
    let reader = Database::new(db.dir()).reader();
    assert!(reader.is_err(), "nothing to read");
}

#[test]
fn a_scan_hands_each_message_to_its_sink_in_order() {
    let db = Db::new();
    db.train_sample();
    let reader = Database::new(db.dir()).reader().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let picture = dir.path().join("b.png");
    std::fs::write(&picture, b"\x89PNG\r\n\x1a\n").unwrap();
    for (i, name) in ["a", "c"].iter().enumerate() {
        std::fs::write(dir.path().join(name), unseen(i, "zqscan")).unwrap();
    }
    let mut seen = Vec::new();
    let (summary, result) = reader.scan(
        &[dir.path().to_path_buf()],
        &Default::default(),
        &decider(),
        None,
        &mut |event| -> Result<(), bayesmail::db::Error> {
            seen.push(match event {
                Event::Skipped(skip) => format!("skipped {skip}"),
                Event::Scanned(s) => {
                    assert!(s.judged.is_ok() && s.action.is_none());
                    s.id.to_string()
                }
            });
            Ok(())
        },
    );
    result.unwrap();
    assert_eq!(summary.messages, 2);
    assert_eq!(summary.verdicts.iter().sum::<usize>(), 2);
    assert_eq!(summary.skipped.not_mail, 1);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[0].starts_with("skipped ") && seen[0].contains("b.png"));
    assert!(
        seen[1].ends_with("/a") && seen[2].ends_with("/c"),
        "{seen:?}"
    );
}

#[test]
fn a_delivered_message_gets_a_status_and_never_an_error() {
    let db = Db::new();
    let database = Database::new(db.dir());
    let spam = std::fs::read(
        sample_files()
            .iter()
            .find(|p| p.starts_with(sample_spam()))
            .unwrap(),
    )
    .unwrap();
    let (status, why) = database.status(&spam, &decider());
    assert_eq!(status, Status::Unknown(Reason::NoModel));
    assert!(why.is_some());
    assert!(status.fields()[0].1.starts_with("Unknown, reason=no-model"));

    db.train_sample();
    let (status, why) = database.status(&spam, &decider());
    assert_eq!(why, None);
    let Status::Verdict { verdict, .. } = status else {
        panic!("{status:?}")
    };
    assert_eq!(verdict, Verdict::Spam, "a trained message");
    let names: Vec<_> = status.fields().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["X-Spam-Flag", "X-Spam-Status"]);
}

/// `eval`'s settings with the default model and [`decider`].
fn eval_settings() -> bayesmail::eval::protocol::Settings {
    bayesmail::eval::protocol::Settings {
        training: bayesmail::fit::Settings {
            select: bayesmail::fit::Select::NONE,
            params: Params::default().check().unwrap(),
            inner_folds: bayesmail::fit::DEFAULT_INNER_FOLDS,
            inputs: Default::default(),
        },
        decider: decider(),
    }
}

#[test]
fn an_evaluation_over_labelled_folders_scores_every_message() {
    let settings = eval_settings();
    let (spam, ham) = ([sample_spam()], [sample_ham()]);
    let mut skipped = 0;
    let evaluation = evaluate(
        Corpus::Folders {
            spam: &spam,
            ham: &ham,
            k: 4,
        },
        &settings,
        &mut |_| skipped += 1,
    )
    .unwrap();
    assert_eq!(skipped, 0);
    assert_eq!(evaluation.scored.len(), 48);
    assert_eq!(evaluation.folds(&settings.decider.costs).len(), 4);
    let report = evaluation.report(&settings.decider.costs);
    assert_eq!((report.n_ham, report.n_spam), (24, 24));
    assert!(report.auc > 0.9, "{report:?}");
}

/// The first `n` messages of the fold file, in its order, with their
/// labels: the stream `eval --online` reads.
fn fold_stream(corpus: &std::path::Path, n: usize) -> Vec<(Label, std::path::PathBuf)> {
    let folds = std::fs::read_to_string(root().join("corpora/spamassassin-folds.tsv")).unwrap();
    folds
        .lines()
        .take(n)
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let label = if fields[1] == "spam" {
                Label::Spam
            } else {
                Label::Ham
            };
            (label, corpus.join(fields[2]))
        })
        .collect()
}

/// With the online discriminative view (the default), whose weights
/// `learn` steps through the journal and through the count store as `eval
/// --online` steps them, and which the refitted stacker weighs.
#[test]
fn a_database_that_only_learns_judges_as_eval_online_measures() {
    let Some((_dir, db)) = learns_as_eval_online_measures(Params::default()) else {
        return;
    };
    let reader = db.reader().unwrap();
    let classifier = reader.classifier();
    assert!(classifier.header().calibrator.weights[LOGISTIC] > 0.0);
    let ex = Extractor::new()
        .extract(&std::fs::read(sample_ham().join("02-work-q3-planning.eml")).unwrap())
        .unwrap();
    assert_ne!(classifier.logistic(&ex), 0.0, "its weights were learned");
}

/// Without it: its weights are never learned, and the stacker does not
/// weigh it.
#[test]
fn a_database_that_leaves_out_the_online_discriminative_view_judges_as_eval_online_measures() {
    let without = Params {
        logistic: false,
        ..Params::default()
    };
    let Some((_dir, db)) = learns_as_eval_online_measures(without) else {
        return;
    };
    let store = db.writer(Duration::from_secs(5)).unwrap();
    let weights = bayesmail::store::Store::weights(store.store()).unwrap();
    assert!(weights.is_empty(), "{} weights learned", weights.len());
    drop(store);
    let reader = db.reader().unwrap();
    assert_eq!(
        reader.classifier().header().calibrator.weights[LOGISTIC],
        0.0
    );
}

/// Teaches a database the public corpus's stream one message at a time,
/// with `params` for its first model, each message judged before as `eval
/// --online` judges it with the same parameters; returns the database
/// (and its directory), or None without the corpus.
fn learns_as_eval_online_measures(params: Params) -> Option<(tempfile::TempDir, Database)> {
    // eval --online judges each message with everything before it and
    // refits the stacker by the rule learn follows: a database taught one
    // message at a time gives each message, before learning it, the same
    // probability.
    let corpus = public_corpus()?;
    let mut stream = fold_stream(&corpus, 100);
    // Messages seen before: again under the same label (judged, learned
    // no more) and under the other one (moved), as a user who sorts a
    // message twice or changes their mind.
    for i in (0..30).step_by(3) {
        let (label, path) = stream[i].clone();
        stream.push((label, path.clone()));
        if i % 2 == 0 {
            let other = if label == Label::Spam {
                Label::Ham
            } else {
                Label::Spam
            };
            stream.push((other, path));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("online.index");
    let lines: Vec<String> = stream
        .iter()
        .map(|(label, path)| format!("{} {}", label.name(), path.display()))
        .collect();
    std::fs::write(&index, lines.join("\n") + "\n").unwrap();
    let mut settings = eval_settings();
    settings.training.params = params.check().unwrap();
    let evaluation = evaluate(Corpus::Online(&index), &settings, &mut |_| {}).unwrap();
    let db = Database::new(dir.path().join("db"));
    let mut extractor = Extractor::new();
    let mut compared = 0;
    for (i, (label, path)) in stream.iter().enumerate() {
        let (features, identity) = extractor.read(&std::fs::read(path).unwrap()).unwrap();
        if let Ok(reader) = db.reader() {
            let got = reader.classifier().score(&features).log_odds;
            let want = evaluation.scored[i].log_odds;
            assert!(
                (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                "message {i}: the database says {got}, eval {want}"
            );
            compared += 1;
        }
        let message = Labelled {
            features,
            identity,
            label: *label,
        };
        db.learn(
            &[message],
            Duration::from_secs(5),
            DEFAULT_JOURNAL_LIMIT,
            params,
        )
        .unwrap();
    }
    assert!(compared > 90, "{compared}");
    // The stacker was refitted along the way, and the model says on what.
    let calibrated_on = db.reader().unwrap().classifier().header().calibrated_on;
    assert!(calibrated_on > 60, "{calibrated_on}");
    Some((dir, db))
}
