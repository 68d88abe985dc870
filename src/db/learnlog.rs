//! The learn log: one line per message learned, moved to the other label
//! or unlearned by `learn`, `unlearn` or `serve` (not by `train`, whose
//! runs are their own record), so that a user can see that learning from
//! the mail client works (`bayesmail stats`: "last learned from IMAP").
//! It owns the file's format, its bound and its reading; what is learned
//! is [`super::Database`]'s.
//!
//! ```text
//! DB/learn.log    2026-11-26T12:21:56Z learned spam imap 3f9a…(16 hex digits)
//! DB/learn.log.1  the lines before, once learn.log passed LOG_LIMIT bytes
//! ```
//!
//! Lines are appended with one `write` (O_APPEND), so processes learning at
//! once do not mix their lines. The file is created private (0600): the
//! times say when the user read mail. When it passes [`LOG_LIMIT`] bytes it
//! is renamed to `learn.log.1` (replacing the one before), so the log never
//! holds much more than twice that; two processes rotating at once may lose
//! a few lines of the older file, which a log of this kind can afford.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::DbPaths;
use crate::model::Label;
use crate::vocab::Digest;

/// Bytes past which the log is rotated.
pub const LOG_LIMIT: u64 = 64 * 1024;

/// Who asked for a learn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// `bayesmail learn` / `unlearn` run by hand (or a script).
    #[default]
    Learn,
    /// The mail client: a move into or out of Junk (Dovecot imapsieve's
    /// pipe program, `learn --origin imap`, HTTP `origin=imap`).
    Imap,
    /// spamd's TELL (`spamc -L`) to `serve`.
    Spamd,
    /// `serve`'s HTTP `/learn` and `/unlearn`.
    Http,
}

impl Origin {
    /// Its name in the log and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Origin::Learn => "learn",
            Origin::Imap => "imap",
            Origin::Spamd => "spamd",
            Origin::Http => "http",
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Origin {
    type Err = String;

    fn from_str(s: &str) -> Result<Origin, String> {
        [Origin::Learn, Origin::Imap, Origin::Spamd, Origin::Http]
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| format!("unknown origin {s:?}: learn, imap, spamd or http"))
    }
}

/// What happened to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Learned for the first time under this label.
    Learned(Label),
    /// Moved from the other label to this one.
    Relabelled(Label),
    /// Already learned under this label: nothing changed.
    Already(Label),
    /// Unlearned; it had this label.
    Unlearned(Label),
}

impl Change {
    fn words(self) -> (&'static str, Label) {
        match self {
            Change::Learned(l) => ("learned", l),
            Change::Relabelled(l) => ("relabelled", l),
            Change::Already(l) => ("already", l),
            Change::Unlearned(l) => ("unlearned", l),
        }
    }
}

/// The log file of the database at `paths`.
pub fn path(paths: &DbPaths) -> PathBuf {
    paths.dir().join("learn.log")
}

/// The rotated log beside `log`.
fn older(log: &Path) -> PathBuf {
    log.with_extension("log.1")
}

/// One log line for `change` of the message `digest` at `time`.
pub fn line(time: SystemTime, change: Change, origin: Origin, digest: &Digest) -> String {
    let (action, label) = change.words();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{} {action} {label} {origin} {hex}\n", utc(time))
}

/// Appends one line per change to the log of `paths`, rotating it first
/// if it is past [`LOG_LIMIT`].
pub fn append(paths: &DbPaths, origin: Origin, changes: &[(Digest, Change)]) -> io::Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let log = path(paths);
    if fs::metadata(&log).is_ok_and(|m| m.len() > LOG_LIMIT) {
        match fs::rename(&log, older(&log)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    let now = SystemTime::now();
    let text: String = changes
        .iter()
        .map(|(d, c)| line(now, *c, origin, d))
        .collect();
    crate::fsutil::open_or_create_shared(&log, true)?.write_all(text.as_bytes())
}

/// When the last line from `origin` was written, if the log (or the
/// rotated one) has one.
pub fn last_from(paths: &DbPaths, origin: Origin) -> Option<SystemTime> {
    last_where(paths, |name| name == origin.name()).map(|(time, _)| time)
}

/// When the database last learned anything, and from where (the origin's
/// name as the log gives it); `None` if the log says nothing.
pub fn last(paths: &DbPaths) -> Option<(SystemTime, String)> {
    last_where(paths, |_| true)
}

/// The last line of the log (or of the one rotated before it) whose origin
/// `wanted` takes: its time and origin.
fn last_where(paths: &DbPaths, wanted: impl Fn(&str) -> bool) -> Option<(SystemTime, String)> {
    let log = path(paths);
    [log.clone(), older(&log)].iter().find_map(|file| {
        let text = fs::read_to_string(file).ok()?;
        text.lines().rev().find_map(|l| {
            let mut fields = l.split(' ');
            let time = fields.next()?;
            let origin = fields.nth(2)?;
            wanted(origin)
                .then(|| Some((parse_utc(time)?, origin.to_string())))
                .flatten()
        })
    })
}

/// `time` as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The time [`utc`] wrote; `None` if `text` is not of that form.
pub fn parse_utc(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())
            .flatten()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, m, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3600 + m * 60 + s).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_writes_and_reads_known_times() {
        for (secs, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_795_695_716, "2026-11-26T12:21:56Z"),
            (4_107_542_399, "2100-02-28T23:59:59Z"),
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(utc(t), text);
            assert_eq!(parse_utc(text), Some(t), "{text}");
        }
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-11-26 12:21:56Z",
            "2026-11-26T12:21:5xZ",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }

    #[test]
    fn origins_parse_their_names() {
        for o in [Origin::Learn, Origin::Imap, Origin::Spamd, Origin::Http] {
            assert_eq!(o.name().parse::<Origin>(), Ok(o));
        }
        assert!(
            "IMAP"
                .parse::<Origin>()
                .unwrap_err()
                .contains("learn, imap")
        );
    }

    #[test]
    fn appends_private_lines_finds_the_last_imap_one_and_stays_bounded() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let paths = DbPaths::new(dir.path());
        assert_eq!(last_from(&paths, Origin::Imap), None);
        let d = [0xab; 32];
        append(&paths, Origin::Learn, &[(d, Change::Learned(Label::Spam))]).unwrap();
        assert_eq!(last_from(&paths, Origin::Imap), None);
        append(
            &paths,
            Origin::Imap,
            &[
                (d, Change::Relabelled(Label::Ham)),
                (d, Change::Unlearned(Label::Ham)),
            ],
        )
        .unwrap();
        let text = fs::read_to_string(path(&paths)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].ends_with(" learned spam learn abababababababab"),
            "{text}"
        );
        assert!(
            lines[1].ends_with(" relabelled ham imap abababababababab"),
            "{text}"
        );
        assert!(
            lines[2].ends_with(" unlearned ham imap abababababababab"),
            "{text}"
        );
        let mode = fs::metadata(path(&paths)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let last = last_from(&paths, Origin::Imap).unwrap();
        assert!(SystemTime::now().duration_since(last).unwrap() < Duration::from_secs(3600));
        // Bounded: however many lines, at most twice the limit on disk.
        let many: Vec<_> = (0..200)
            .map(|_| (d, Change::Already(Label::Spam)))
            .collect();
        for _ in 0..40 {
            append(&paths, Origin::Spamd, &many).unwrap();
        }
        let both = fs::metadata(path(&paths)).unwrap().len()
            + fs::metadata(older(&path(&paths))).unwrap().len();
        assert!(both <= 2 * LOG_LIMIT + 200 * 60, "{both} bytes");
        // The IMAP lines are rotated away; the newest spamd one is found.
        assert!(last_from(&paths, Origin::Spamd).is_some());
    }
}
