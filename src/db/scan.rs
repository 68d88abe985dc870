//! [`Reader::scan`]: judging every message of some mailboxes, in parallel,
//! each result handed to a sink in input order, and optionally moving or
//! copying the spam into a Maildir.

use std::path::{Path, PathBuf};

use super::{Error, Judgment, Reader};
use crate::decision::{Decider, Verdict};
use crate::features::Extractor;
use crate::mailbox::{self, Delivered, MailboxKind, Maildir, MessageId, MoveError, RawMessage};
use crate::message;
use crate::sources::{self, Skip, Skipped};

/// Where a scan puts the messages it judges spam, and how.
#[derive(Debug)]
pub struct SpamAction {
    maildir: Maildir,
    moving: bool,
    dry_run: bool,
    /// The target's canonical path, if it exists.
    canonical: Option<PathBuf>,
    /// Run as root: each folder a message was moved out of, and whether
    /// another user can change what it leads to (a folder a recursive read
    /// entered, or a link followed, that the sources named did not show).
    checked: std::sync::Mutex<std::collections::HashMap<PathBuf, Option<String>>>,
}

/// Why a [`SpamAction`] cannot be taken on these sources.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// Messages read from standard input cannot be moved.
    #[error("cannot move a message read from standard input")]
    MoveStdin,
    /// Messages of an mbox file cannot be moved out of it.
    #[error("cannot move messages out of an mbox file ({})", .0.display())]
    MoveMbox(PathBuf),
    /// Run as root, another user can change what the target or a source
    /// of a move leads to ([`crate::fsutil::unsafe_for_root_in`]).
    #[error("{why}: {}", why.instead())]
    Foreign {
        /// Who can change what.
        why: crate::fsutil::Unsafe,
    },
    /// The target Maildir cannot be made.
    #[error("preparing the Maildir {}: {}", .path.display(), crate::fsutil::words(.source))]
    Target {
        /// The target.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl SpamAction {
    /// Moves (`moving`) or copies spam read from `sources` into the Maildir
    /// at `target`, created if need be; with `dry_run`, only says where each
    /// message would go and creates nothing. Moving is refused for standard
    /// input and mbox files; run as root, a target (with its `tmp/`, `new/`
    /// and `cur/`) or a source of a move that another user can change
    /// ([`crate::fsutil::unsafe_for_root`]) is refused: that user could swap
    /// its folders for links while the run renames and writes through
    /// them, and what root made there would be closed to them.
    pub fn new(
        target: &Path,
        moving: bool,
        dry_run: bool,
        sources: &[PathBuf],
    ) -> Result<SpamAction, ActionError> {
        let foreign = |path: &Path| {
            crate::fsutil::unsafe_for_root(path).map(|why| ActionError::Foreign { why })
        };
        if moving {
            for path in sources {
                if path.as_os_str() == "-" {
                    return Err(ActionError::MoveStdin);
                }
                if mailbox::detect(path).ok() == Some(MailboxKind::Mbox) {
                    return Err(ActionError::MoveMbox(path.clone()));
                }
                if let Some(err) = foreign(path) {
                    return Err(err);
                }
            }
        }
        // A target that is a file (an mbox, as mutt's `=Junk` may be) is
        // said to be that first, whoever runs this.
        if std::fs::metadata(target).is_ok_and(|m| !m.is_dir()) {
            return Err(ActionError::Target {
                path: target.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    "not a directory (spam goes into a Maildir)",
                ),
            });
        }
        // The target and the folders the messages go through, each a
        // directory root writes in.
        for dir in [
            target.to_path_buf(),
            target.join("tmp"),
            target.join("new"),
            target.join("cur"),
        ] {
            if let Some(why) = crate::fsutil::unsafe_for_root_in(&dir) {
                return Err(ActionError::Foreign { why });
            }
        }
        let maildir = if dry_run {
            Maildir::at(target)
        } else {
            Maildir::create(target).map_err(|source| ActionError::Target {
                path: target.to_path_buf(),
                source,
            })?
        };
        Ok(SpamAction {
            canonical: std::fs::canonicalize(target).ok(),
            maildir,
            moving,
            dry_run,
            checked: Default::default(),
        })
    }

    /// The target Maildir.
    pub fn target(&self) -> &Path {
        self.maildir.root()
    }

    /// Whether spam is moved (not copied).
    pub fn moving(&self) -> bool {
        self.moving
    }

    /// Whether nothing is done, only said.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Whether `id` is a message of the target Maildir itself (reached with
    /// a recursive read, or by naming a folder that holds the target). Such
    /// a message is already where spam goes; scanning it would also see the
    /// messages this run moves in, so a real run would count more than its
    /// dry run.
    fn holds(&self, id: &MessageId) -> bool {
        let (Some(target), MessageId::Path(path)) = (&self.canonical, id) else {
            return false;
        };
        path.parent()
            .and_then(Path::parent)
            .and_then(|maildir| std::fs::canonicalize(maildir).ok())
            .is_some_and(|maildir| maildir == *target)
    }

    /// Whether, run as root, another user can change what the folder
    /// `dir` leads to: in words, why not to move mail out of it.
    fn foreign(&self, dir: &Path) -> Option<String> {
        let mut checked = self
            .checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        checked
            .entry(dir.to_path_buf())
            .or_insert_with(|| crate::fsutil::unsafe_for_root_in(dir).map(|why| why.to_string()))
            .clone()
    }

    /// Moves or copies one spam message.
    fn take(&self, raw: &RawMessage) -> Action {
        let source = match &raw.id {
            MessageId::Path(p) => Some(p.as_path()),
            _ => None,
        };
        if self.moving && source.is_none() {
            return Action::NotMoved;
        }
        if let Some(folder) = source.filter(|_| self.moving).and_then(Path::parent)
            && let Some(why) = self.foreign(folder)
        {
            return Action::Failed(format!("not moved: {why}"));
        }
        // A dry run looks as the run would, and stops short of acting.
        let done = match (source, self.dry_run) {
            (Some(src), false) if self.moving => self.maildir.move_in(src, &raw.bytes),
            (Some(src), true) if self.moving => self.maildir.would_move(src, &raw.bytes),
            (_, false) => self
                .maildir
                .copy_in(source, &raw.bytes)
                .map_err(MoveError::from),
            (_, true) => self
                .maildir
                .would_copy(source, &raw.bytes)
                .map_err(MoveError::from),
        };
        match done {
            Ok(Delivered::New(to)) if self.dry_run && self.moving => Action::WouldMove(to),
            Ok(Delivered::New(to)) if self.dry_run => Action::WouldCopy(to),
            Ok(Delivered::New(to)) if self.moving => Action::Moved(to),
            Ok(Delivered::New(to)) => Action::Copied(to),
            Ok(Delivered::Already(to)) => Action::Already(to),
            Err(MoveError::NotJudged { mbox: true, .. }) => Action::NotMoved,
            Err(err @ (MoveError::SourceKept { .. } | MoveError::SourceGone { .. })) => {
                let why = err.to_string();
                let (MoveError::SourceKept { target, .. } | MoveError::SourceGone { target, .. }) =
                    err
                else {
                    unreachable!("matched above")
                };
                Action::Kept { to: target, why }
            }
            Err(err) => Action::Failed(err.to_string()),
        }
    }
}

/// What was done with a spam message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Moved to this path.
    Moved(PathBuf),
    /// Copied to this path.
    Copied(PathBuf),
    /// Would be moved here (dry run).
    WouldMove(PathBuf),
    /// Would be copied here (dry run).
    WouldCopy(PathBuf),
    /// Already in the target, at this path.
    Already(PathBuf),
    /// In an mbox file: not moved.
    NotMoved,
    /// Copied into the target, but the original could not be removed: in
    /// both places now.
    Kept {
        /// The copy.
        to: PathBuf,
        /// Why the original stays.
        why: String,
    },
    /// Moving or copying failed; the message is where it was.
    Failed(String),
}

impl Action {
    /// Its name in a result line.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Moved(_) => "moved",
            Action::Copied(_) => "copied",
            Action::WouldMove(_) => "would-move",
            Action::WouldCopy(_) => "would-copy",
            Action::Already(_) => "already-there",
            Action::NotMoved => "not-moved",
            Action::Kept { .. } => "copied-not-removed",
            Action::Failed(_) => "failed",
        }
    }

    /// Where the message went (or would go), if anywhere.
    pub fn to(&self) -> Option<&Path> {
        match self {
            Action::Moved(p)
            | Action::Copied(p)
            | Action::WouldMove(p)
            | Action::WouldCopy(p)
            | Action::Already(p)
            | Action::Kept { to: p, .. } => Some(p),
            Action::NotMoved | Action::Failed(_) => None,
        }
    }
}

/// One message judged (or why it could not be).
#[derive(Debug)]
pub struct Scanned {
    /// Where it is.
    pub id: MessageId,
    /// Its size.
    pub bytes: usize,
    /// Its judgment, or why it could not be parsed.
    pub judged: Result<Judgment, message::Error>,
    /// What was done with it, when it is spam and the scan has an action.
    pub action: Option<Action>,
}

/// What a scan hands its sink, in input order.
#[derive(Debug)]
pub enum Event {
    /// A message passed over while reading.
    Skipped(Skip),
    /// A message judged.
    Scanned(Scanned),
}

/// What a scan did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanSummary {
    /// Messages judged or found unparsable (those in the target aside).
    pub messages: usize,
    /// Messages of each verdict, by [`Verdict::index`] (ham, unsure, spam).
    pub verdicts: [usize; 3],
    /// Messages that could not be parsed.
    pub unparsed: usize,
    /// Messages moved or copied (or that would be, in a dry run).
    pub acted: usize,
    /// Messages already in the target.
    pub already: usize,
    /// Messages whose move or copy failed (or that could not be moved).
    pub action_failed: usize,
    /// Moved messages copied into the target whose original could not be
    /// removed: in both places now.
    pub kept: usize,
    /// Messages read from the target Maildir itself, left alone.
    pub in_target: usize,
    /// Messages passed over while reading.
    pub skipped: Skipped,
}

impl ScanSummary {
    /// Whether any message could not be read, parsed or acted on.
    pub fn failures(&self) -> usize {
        self.skipped.total() + self.unparsed + self.action_failed + self.kept
    }
}

impl Reader {
    /// Judges every message under `paths` (read with `opts`) with
    /// `decider`, in parallel, handing each to `sink` in input order; spam
    /// is moved or copied by `action`, if there is one. Messages the target
    /// itself holds are left alone. Stops at the first error of `sink`,
    /// and returns it beside what was done until then.
    pub fn scan<E: From<Error>>(
        &self,
        paths: &[PathBuf],
        opts: &mailbox::Options,
        decider: &Decider,
        action: Option<&SpamAction>,
        sink: &mut dyn FnMut(Event) -> Result<(), E>,
    ) -> (ScanSummary, Result<(), E>) {
        let classifier = self.classifier();
        let judge = |ex: &mut Extractor, raw: RawMessage| {
            let judged = ex
                .extract(&raw.bytes)
                .map(|features| classifier.judge(&features, decider));
            (raw, judged)
        };
        let mut summary = ScanSummary::default();
        let skipped = std::cell::Cell::new(Skipped::default());
        let sink = std::cell::RefCell::new(sink);
        let failed = std::cell::RefCell::new(None);
        let result = sources::for_each_mapped(
            paths,
            opts,
            &judge,
            &mut |skip| {
                let mut s = skipped.get();
                match skip {
                    Skip::Unreadable(_) => s.unreadable += 1,
                    Skip::NotMail(_) => s.not_mail += 1,
                }
                skipped.set(s);
                // A sink that fails here stops the scan at the next batch.
                if let Err(err) = (sink.borrow_mut())(Event::Skipped(skip)) {
                    failed.borrow_mut().get_or_insert(err);
                }
            },
            &mut |batch| {
                if let Some(err) = failed.borrow_mut().take() {
                    return Err(err);
                }
                for (raw, judged) in batch {
                    if action.is_some_and(|a| a.holds(&raw.id)) {
                        summary.in_target += 1;
                        continue;
                    }
                    summary.messages += 1;
                    let done = match &judged {
                        Ok(judgment) => {
                            summary.verdicts[judgment.verdict.index()] += 1;
                            match (action, judgment.verdict) {
                                (Some(a), Verdict::Spam) => Some(a.take(&raw)),
                                _ => None,
                            }
                        }
                        Err(_) => {
                            summary.unparsed += 1;
                            None
                        }
                    };
                    match &done {
                        Some(Action::Already(_)) => summary.already += 1,
                        Some(Action::Kept { .. }) => summary.kept += 1,
                        Some(Action::NotMoved | Action::Failed(_)) => summary.action_failed += 1,
                        Some(_) => summary.acted += 1,
                        None => {}
                    }
                    (sink.borrow_mut())(Event::Scanned(Scanned {
                        bytes: raw.bytes.len(),
                        id: raw.id,
                        judged,
                        action: done,
                    }))?;
                }
                Ok(())
            },
        );
        summary.skipped = skipped.get();
        let result = match failed.into_inner() {
            Some(err) => Err(err),
            None => result.map(|_| ()),
        };
        (summary, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target that is a file (an mbox such as mutt's `=Junk`) is said to
    /// be no directory, whoever runs the sweep: as root the checks of where
    /// root writes came first and spoke of links.
    #[test]
    fn a_target_that_is_a_file_is_said_to_be_no_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let junk = tmp.path().join("Junk");
        std::fs::write(
            &junk,
            b"From a Mon Jan  1 10:00:00 2024\nSubject: x\n\nhi\n",
        )
        .unwrap();
        for (moving, dry_run) in [(true, false), (false, false), (true, true)] {
            let Err(err) = SpamAction::new(&junk, moving, dry_run, &[]) else {
                panic!("a file taken for a Maildir")
            };
            assert!(err.to_string().contains("not a directory"), "{err}");
        }
        assert!(std::fs::metadata(&junk).unwrap().is_file());
    }
}
