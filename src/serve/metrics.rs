//! What `serve` counts, and its Prometheus text: messages by verdict,
//! latency, errors by reason, learns, connections, and the models open.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::db::{Reason, Status};
use crate::decision::Verdict;

/// The upper bounds of the latency histogram's buckets, in seconds.
pub(crate) const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0,
];

/// Every reason there can be no verdict, in the order they are counted.
const REASONS: [Reason; 9] = [
    Reason::Config,
    Reason::NoModel,
    Reason::ModelVersion,
    Reason::ModelUnreadable,
    Reason::TooLarge,
    Reason::Unparseable,
    Reason::Internal,
    Reason::StoreUnavailable,
    Reason::Busy,
];

/// The counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Messages by verdict: ham, unsure, spam.
    verdicts: [AtomicU64; 3],
    /// Messages without a verdict, by reason ([`REASONS`]' order).
    unknown: [AtomicU64; REASONS.len()],
    /// Latency histogram: counts per bucket (the last is +Inf).
    latency: [AtomicU64; 13],
    /// Sum of the latencies, in microseconds.
    latency_us: AtomicU64,
    /// Learns: spam, ham, unlearn.
    learns: [AtomicU64; 3],
    /// Learns that failed.
    learn_errors: AtomicU64,
    /// Connections accepted, and refused (not an allowed peer).
    connections: AtomicU64,
    refused: AtomicU64,
}

impl Metrics {
    /// Counts one message judged in `took`.
    pub fn judged(&self, status: &Status, took: Duration) {
        match status {
            Status::Verdict { verdict, .. } => {
                self.verdicts[verdict.index()].fetch_add(1, Ordering::Relaxed);
            }
            Status::Unknown(reason) => {
                let i = REASONS.iter().position(|r| r == reason).unwrap_or(6);
                self.unknown[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        let secs = took.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
        self.latency_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Counts a learn: `Some(true)` spam, `Some(false)` ham, `None` an
    /// unlearn; `ok` whether it worked.
    pub fn learned(&self, spam: Option<bool>, ok: bool) {
        if !ok {
            self.learn_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let i = match spam {
            Some(true) => 0,
            Some(false) => 1,
            None => 2,
        };
        self.learns[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection, accepted or refused.
    pub(crate) fn connection(&self, accepted: bool) {
        let c = if accepted {
            &self.connections
        } else {
            &self.refused
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition, with the models open now
    /// (database, model bytes).
    pub fn render(&self, models: &[(std::path::PathBuf, u64)]) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP bayesmail_messages_total Messages judged, by verdict (unknown: no verdict, by reason).\n# TYPE bayesmail_messages_total counter"
        );
        for v in Verdict::ALL {
            let _ = writeln!(
                out,
                "bayesmail_messages_total{{verdict=\"{}\"}} {}",
                v.name(),
                get(&self.verdicts[v.index()])
            );
        }
        for (i, r) in REASONS.iter().enumerate() {
            let _ = writeln!(
                out,
                "bayesmail_messages_total{{verdict=\"unknown\",reason=\"{}\"}} {}",
                r.name(),
                get(&self.unknown[i])
            );
        }
        let _ = writeln!(
            out,
            "# HELP bayesmail_judge_seconds Time to judge a message, from its last byte to its answer.\n# TYPE bayesmail_judge_seconds histogram"
        );
        let mut cumulative = 0;
        for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += get(&self.latency[i]);
            let _ = writeln!(
                out,
                "bayesmail_judge_seconds_bucket{{le=\"{b}\"}} {cumulative}"
            );
        }
        cumulative += get(&self.latency[LATENCY_BUCKETS.len()]);
        let _ = writeln!(
            out,
            "bayesmail_judge_seconds_bucket{{le=\"+Inf\"}} {cumulative}\nbayesmail_judge_seconds_sum {}\nbayesmail_judge_seconds_count {cumulative}",
            get(&self.latency_us) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "# HELP bayesmail_learns_total Messages learned or unlearned.\n# TYPE bayesmail_learns_total counter"
        );
        for (i, k) in ["spam", "ham", "unlearn"].iter().enumerate() {
            let _ = writeln!(
                out,
                "bayesmail_learns_total{{kind=\"{k}\"}} {}",
                get(&self.learns[i])
            );
        }
        let _ = writeln!(
            out,
            "# HELP bayesmail_learn_errors_total Learns that failed.\n# TYPE bayesmail_learn_errors_total counter\nbayesmail_learn_errors_total {}",
            get(&self.learn_errors)
        );
        let _ = writeln!(
            out,
            "# HELP bayesmail_connections_total Connections, accepted or refused (peer not allowed).\n# TYPE bayesmail_connections_total counter\nbayesmail_connections_total{{result=\"accepted\"}} {}\nbayesmail_connections_total{{result=\"refused\"}} {}",
            get(&self.connections),
            get(&self.refused)
        );
        let _ = writeln!(
            out,
            "# HELP bayesmail_model_bytes Size of each model open now.\n# TYPE bayesmail_model_bytes gauge"
        );
        for (db, bytes) in models {
            let db = label_value(db);
            let _ = writeln!(out, "bayesmail_model_bytes{{db=\"{db}\"}} {bytes}");
        }
        out
    }
}

/// A database's path as a label value of the Prometheus text format:
/// backslash, double quote and line feed escaped, so that no path can end
/// its line or its label.
pub(crate) fn label_value(db: &std::path::Path) -> String {
    db.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_path_ends_no_line_or_label_of_the_exposition() {
        let db = std::path::Path::new("/srv/a\"b\\c\nbayesmail_forged 1");
        let text = Metrics::default().render(&[(db.to_path_buf(), 7)]);
        let line = text
            .lines()
            .find(|l| l.starts_with("bayesmail_model_bytes{"))
            .unwrap();
        assert_eq!(
            line,
            "bayesmail_model_bytes{db=\"/srv/a\\\"b\\\\c\\nbayesmail_forged 1\"} 7"
        );
        assert!(!text.lines().any(|l| l.starts_with("bayesmail_forged")));
    }
}
