//! [`evaluate`]: an evaluation from a labelled corpus on disk (a fold
//! file, a TREC index, or labelled mailboxes) to its scores.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;

use super::confusion::Confusion;
use super::protocol::{self, Settings};
use super::{Report, Scored};
use crate::decision::Costs;
use crate::features::Extractor;
use crate::fit::Dataset;
use crate::mailbox;
use crate::message;
use crate::model::Label;
use crate::sources::Skip;

/// A labelled corpus to evaluate on.
#[derive(Debug, Clone, Copy)]
pub enum Corpus<'a> {
    /// A fold file: `fold<TAB>label<TAB>path` lines, paths relative to
    /// `root`; cross-validation over its folds.
    Folds {
        /// The fold file.
        file: &'a Path,
        /// What its paths are relative to.
        root: &'a Path,
    },
    /// A TREC index: `spam PATH` / `ham PATH` lines in stream order, paths
    /// relative to the index's folder; the online protocol.
    Online(&'a Path),
    /// Every message of these mailboxes (any kind), folds assigned
    /// round-robin within each class (stratified); cross-validation over
    /// `k` folds.
    Folders {
        /// Mailboxes of spam.
        spam: &'a [PathBuf],
        /// Mailboxes of ham.
        ham: &'a [PathBuf],
        /// Folds.
        k: usize,
    },
}

/// Errors of reading a corpus.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("reading {}: {}", .path.display(), crate::fsutil::words(.source))]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of a fold file or index is not what it should be.
    #[error("{}:{line}: {what}", .file.display())]
    Line {
        /// The file.
        file: PathBuf,
        /// Its line, from 1.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// A labelled mailbox could not be read.
    #[error("reading a labelled mailbox: {0}")]
    Mailbox(#[from] mailbox::Error),
    /// A message could not be parsed.
    #[error("parsing {}: {source}", .path.display())]
    Parse {
        /// The message.
        path: PathBuf,
        /// Why.
        source: message::Error,
    },
    /// The corpus holds no message.
    #[error("no messages to evaluate on")]
    Empty,
    /// The protocol cannot run on this corpus.
    #[error("{0}")]
    Protocol(String),
    /// Messages given under both labels (the same message as spam and as
    /// ham): what the filter should have said of them is not known, as a
    /// training run refuses them.
    #[error("{}", conflicting(.0))]
    Conflicting(Vec<String>),
}

/// One labelled message of a corpus.
#[derive(Debug, Clone)]
pub struct Item {
    /// Where it is.
    pub path: PathBuf,
    /// Its bytes, when read from a mailbox.
    bytes: Option<Vec<u8>>,
    /// Its label.
    pub label: Label,
    /// Its fold (0 online).
    pub fold: usize,
}

/// An evaluation done: the corpus's messages and their scores.
#[derive(Debug)]
pub struct Evaluation {
    /// The messages, in corpus order.
    pub items: Vec<Item>,
    /// Their scores (`Scored::index` is the item's).
    pub scored: Vec<Scored>,
    /// Whether it ran the online protocol.
    pub online: bool,
    /// How long it took, in seconds.
    pub seconds: f64,
    /// Copies of messages given again under the same label, left out
    /// (cross-validation only: a copy in a training fold would judge
    /// itself).
    pub duplicates: usize,
}

/// The figures of one fold.
#[derive(Debug)]
pub struct Fold {
    /// The fold.
    pub fold: usize,
    /// Its figures (speed left out: it is measured over the whole run).
    pub report: Report,
    /// Its confusion counts.
    pub confusion: Confusion,
}

impl Evaluation {
    /// The figures of the whole run.
    pub fn report(&self, costs: &Costs) -> Report {
        Report::new(&self.scored, costs, self.seconds)
    }

    /// The figures of each fold, in fold order (none online).
    pub fn folds(&self, costs: &Costs) -> Vec<Fold> {
        if self.online {
            return Vec::new();
        }
        let mut by_fold: std::collections::BTreeMap<usize, Vec<Scored>> = Default::default();
        for s in &self.scored {
            by_fold
                .entry(self.items[s.index].fold)
                .or_default()
                .push(s.clone());
        }
        by_fold
            .into_iter()
            .map(|(fold, scored)| Fold {
                fold,
                report: Report::new(&scored, costs, 0.0),
                confusion: Confusion::new(&scored),
            })
            .collect()
    }
}

/// Where the online protocol's windows start: the young database (the
/// first 500 messages), the growing one (500 to 2,000) and the rest.
pub const ONLINE_WINDOWS: [usize; 3] = [0, 500, 2000];

/// The figures of the messages `start..end` of an online run.
#[derive(Debug)]
pub struct Window {
    /// The first message, counted from 0.
    pub start: usize,
    /// One past the last.
    pub end: usize,
    /// Their figures (speed left out).
    pub report: Report,
}

impl Evaluation {
    /// The figures of each of [`ONLINE_WINDOWS`] that holds messages, in
    /// stream order (none for cross-validation).
    pub fn windows(&self, costs: &Costs) -> Vec<Window> {
        if !self.online {
            return Vec::new();
        }
        let n = self.scored.len();
        let ends = ONLINE_WINDOWS.iter().skip(1).copied().chain([n]);
        ONLINE_WINDOWS
            .iter()
            .zip(ends)
            .map(|(&start, end)| (start, end.min(n)))
            .filter(|(start, end)| start < end)
            .map(|(start, end)| Window {
                start,
                end,
                report: Report::new(&self.scored[start..end], costs, 0.0),
            })
            .collect()
    }
}

/// Evaluates on `corpus` with `settings`: cross-validation over its folds,
/// or the online protocol over an index. Files among labelled mailboxes
/// that do not look like mail are handed to `skip` and left out, as a
/// training run leaves them out, so that what is evaluated is what would
/// be trained.
pub fn evaluate(
    corpus: Corpus<'_>,
    settings: &Settings,
    skip: &mut dyn FnMut(Skip),
) -> Result<Evaluation, Error> {
    let start = Instant::now();
    let items = match corpus {
        Corpus::Folds { file, root } => read_folds(file, root)?,
        Corpus::Online(index) => read_index(index)?,
        Corpus::Folders { spam, ham, k } => read_folders(spam, ham, k, skip)?,
    };
    if items.is_empty() {
        return Err(Error::Empty);
    }
    let online = matches!(corpus, Corpus::Online(_));
    let weighs = settings.training.params.get().logistic;
    measurable(&items, online, settings)?;
    let features = items
        .par_iter()
        .map_init(Extractor::new, |ex, item| {
            let read;
            let raw = match &item.bytes {
                Some(b) => b,
                None => {
                    read = std::fs::read(&item.path).map_err(|source| Error::Read {
                        path: item.path.clone(),
                        source,
                    })?;
                    &read
                }
            };
            let (mut f, identity) = ex.read(raw).map_err(|source| Error::Parse {
                path: item.path.clone(),
                source,
            })?;
            // The online discriminative view's features are kept only
            // when the model weighs it.
            if !weighs {
                f.lr_buckets = Vec::new();
            }
            Ok((f, identity))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let (mut features, mut digests): (Vec<_>, Vec<_>) = features
        .into_iter()
        .map(|(f, identity)| (f, identity.digest))
        .unzip();
    // The online protocol learns a message seen again as `learn` does.
    let mut items = items;
    let duplicates = if online {
        0
    } else {
        let keep = distinct(&items, &digests)?;
        let before = items.len();
        (items, (features, digests)) = items
            .into_iter()
            .zip(features.into_iter().zip(digests))
            .zip(keep)
            .filter_map(|(all, keep)| keep.then_some(all))
            .unzip();
        // What is left may no longer be measurable (copies of one fold
        // given as another).
        measurable(&items, online, settings)?;
        before - items.len()
    };
    let data = Dataset::new(features.into_iter().zip(items.iter().map(|i| i.label)));
    let scored = if online {
        protocol::online(&data, &digests, settings).map_err(Error::Protocol)?
    } else {
        let folds: Vec<usize> = items.iter().map(|i| i.fold).collect();
        protocol::cross_validate(&data, &digests, &folds, settings)
    };
    Ok(Evaluation {
        items: items
            .into_iter()
            .map(|i| Item { bytes: None, ..i })
            .collect(),
        scored,
        online,
        seconds: start.elapsed().as_secs_f64(),
        duplicates,
    })
}

/// [`Error::Conflicting`] in words: how many, and the first few.
fn conflicting(pairs: &[String]) -> String {
    let many = match pairs.len() {
        1 => "a message is".to_string(),
        n => format!("{n} messages are"),
    };
    let shown = pairs[..pairs.len().min(3)].join("; ");
    let more = if pairs.len() > 3 { "; …" } else { "" };
    format!(
        "{many} given as both spam and ham, so no figure would mean anything: {}{more}",
        crate::sanitize::for_terminal(&shown)
    )
}

/// Which of `items` (with their `digests`) to keep: the first of each
/// message; [`Error::Conflicting`] if one is given under both labels.
fn distinct(items: &[Item], digests: &[crate::vocab::Digest]) -> Result<Vec<bool>, Error> {
    let mut first: std::collections::HashMap<_, usize> = Default::default();
    let mut conflicts = Vec::new();
    let keep = digests
        .iter()
        .enumerate()
        .map(|(i, d)| match first.get(d) {
            None => {
                first.insert(*d, i);
                true
            }
            Some(&j) => {
                if items[j].label != items[i].label {
                    conflicts.push(format!(
                        "{} ({}) and {} ({})",
                        items[j].path.display(),
                        items[j].label,
                        items[i].path.display(),
                        items[i].label
                    ));
                }
                false
            }
        })
        .collect();
    if conflicts.is_empty() {
        Ok(keep)
    } else {
        Err(Error::Conflicting(conflicts))
    }
}

/// An error if the figures could say nothing: a class with no message
/// (ranking and rates need both), cross-validation over one fold (nothing
/// to train on), or no evidence left to judge with (the views given are
/// all left out by the model's settings).
fn measurable(items: &[Item], online: bool, settings: &Settings) -> Result<(), Error> {
    for label in [Label::Ham, Label::Spam] {
        if !items.iter().any(|i| i.label == label) {
            return Err(Error::Protocol(format!(
                "no {} among the {} messages: the figures need both classes",
                label.name(),
                items.len()
            )));
        }
    }
    if !online && items.iter().all(|i| i.fold == items[0].fold) {
        return Err(Error::Protocol(format!(
            "every message is in fold {}: cross-validation needs two folds or more",
            items[0].fold
        )));
    }
    let params = settings.training.params.get();
    let mut on = settings.training.inputs.0;
    on[crate::decision::calibrate::LOGISTIC] &= params.logistic;
    on[crate::vocab::VIEWS] &= params.meta_weight > 0.0;
    if !on.iter().any(|&b| b) {
        return Err(Error::Protocol(
            "no view left to judge with: the views given are all left out by the model's settings"
                .into(),
        ));
    }
    Ok(())
}

/// A bad line of `file`.
fn bad_line(file: &Path, n: usize, what: impl Into<String>) -> Error {
    Error::Line {
        file: file.to_path_buf(),
        line: n + 1,
        what: what.into(),
    }
}

/// Reads `fold<TAB>label<TAB>path` lines; paths relative to `root`.
fn read_folds(file: &Path, root: &Path) -> Result<Vec<Item>, Error> {
    let read = |source| Error::Read {
        path: file.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(file).map_err(read)?;
    let mut items = Vec::new();
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(read)?;
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.splitn(3, '\t');
        let (Some(fold), Some(label), Some(path)) = (cols.next(), cols.next(), cols.next()) else {
            return Err(bad_line(file, n, "expected fold<TAB>label<TAB>path"));
        };
        let fold: usize = fold
            .trim()
            .parse()
            .map_err(|e| bad_line(file, n, format!("bad fold '{fold}': {e}")))?;
        let label: Label = label.parse().map_err(|e| bad_line(file, n, e))?;
        items.push(Item {
            path: root.join(path),
            bytes: None,
            label,
            fold,
        });
    }
    Ok(items)
}

/// Reads a TREC index: `spam PATH` / `ham PATH` lines, paths relative to
/// the index file's folder.
fn read_index(file: &Path) -> Result<Vec<Item>, Error> {
    let base = file.parent().unwrap_or(Path::new("."));
    let text = std::fs::read_to_string(file).map_err(|source| Error::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((label, path)) = line.trim().split_once(char::is_whitespace) else {
            return Err(bad_line(file, n, "expected 'spam PATH' or 'ham PATH'"));
        };
        let label: Label = label.parse().map_err(|e| bad_line(file, n, e))?;
        items.push(Item {
            path: base.join(path.trim()),
            bytes: None,
            label,
            fold: 0,
        });
    }
    Ok(items)
}

/// Labelled mailboxes, folds round-robin within each class.
fn read_folders(
    spam: &[PathBuf],
    ham: &[PathBuf],
    k: usize,
    skip: &mut dyn FnMut(Skip),
) -> Result<Vec<Item>, Error> {
    let opts = mailbox::Options::default();
    let mut items = Vec::new();
    for (paths, label) in [(ham, Label::Ham), (spam, Label::Spam)] {
        let mut n = 0;
        for m in mailbox::open_all(paths, &opts) {
            let m = m?;
            if !message::looks_like_mail(&m.bytes) {
                skip(Skip::NotMail(m.id));
                continue;
            }
            items.push(Item {
                path: PathBuf::from(m.id.to_string()),
                bytes: Some(m.bytes),
                label,
                fold: n % k.max(1),
            });
            n += 1;
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Verdict;

    fn run(n: usize, online: bool) -> Evaluation {
        Evaluation {
            items: Vec::new(),
            scored: (0..n)
                .map(|index| {
                    let is_spam = index % 3 == 0;
                    // Wrong on every 7th message of the first 500 only.
                    let right = index >= 500 || index % 7 != 0;
                    let spam_like = is_spam == right;
                    Scored {
                        index,
                        is_spam,
                        log_odds: if spam_like { 3.0 } else { -3.0 },
                        probability: if spam_like { 0.95 } else { 0.05 },
                        verdict: if spam_like {
                            Verdict::Spam
                        } else {
                            Verdict::Ham
                        },
                    }
                })
                .collect(),
            online,
            seconds: 1.0,
            duplicates: 0,
        }
    }

    #[test]
    fn online_windows_split_the_stream_where_said() {
        let costs = Costs::default();
        let windows = run(2500, true).windows(&costs);
        let bounds: Vec<(usize, usize)> = windows.iter().map(|w| (w.start, w.end)).collect();
        assert_eq!(bounds, vec![(0, 500), (500, 2000), (2000, 2500)]);
        assert_eq!(windows[1].report.n, 1500);
        // The mistakes are all in the first window.
        assert!(windows[0].report.fpr_pct > 0.0);
        assert_eq!(windows[1].report.fpr_pct, 0.0);
        assert_eq!(windows[2].report.one_minus_auc_pct, 0.0);
        // A short stream has the windows it reaches; cross-validation none.
        let short: Vec<usize> = run(700, true)
            .windows(&costs)
            .iter()
            .map(|w| w.end)
            .collect();
        assert_eq!(short, vec![500, 700]);
        assert!(run(2500, false).windows(&costs).is_empty());
    }
}
