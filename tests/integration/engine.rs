//! The engine's calls as a library user (a daemon) makes them, with no
//! binary in between: a training run with its progress and interruption,
//! a scan into a sink, a delivered message's status, and an evaluation.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bayesmail::db::{
    Calibration, Database, Event, Interrupted, Progress, Reason, Status, Training,
};
use bayesmail::decision::{Decider, Verdict};
use bayesmail::eval::{Corpus, evaluate};
use bayesmail::model::Params;

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
        select_strength: true,
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

#[test]
fn an_evaluation_over_labelled_folders_scores_every_message() {
    let settings = bayesmail::eval::protocol::Settings {
        training: bayesmail::fit::Settings {
            select_strength: false,
            params: Params::default().check().unwrap(),
            inner_folds: bayesmail::fit::DEFAULT_INNER_FOLDS,
            inputs: Default::default(),
        },
        decider: decider(),
        refit_every: bayesmail::eval::protocol::DEFAULT_REFIT_EVERY,
    };
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
