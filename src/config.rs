//! Configuration: where the database lives, the model's hyperparameters and
//! the decision costs, from a TOML file. Precedence (highest first):
//! command-line flags, environment (`BAYESMAIL_DB`, `BAYESMAIL_CONFIG`), the
//! config file, built-in defaults. Every default lives in one place:
//! [`crate::model::Params::default`], [`crate::decision::DEFAULT_COSTS`] and
//! the constants here.
//!
//! ```toml
//! db = "/var/lib/bayesmail"      # database directory
//!
//! [model]
//! a = 0.1                         # pin the Beta pseudo-counts (else chosen by CV at train time)
//! b = 0.1
//! min_strength = 1.5              # pin the tempered strength (else chosen by CV at train time)
//! bytes_min_strength = 3.0        # the byte view's (pinning either pins both)
//! power = 1.0
//! var_floor = 0.01
//! meta_weight = 1.0
//! meta_clip = 3.0
//! logistic = true                 # weigh the online discriminative view (false: leave it out)
//!
//! [decision]
//! costs = "20:1:0.5"              # FP:FN[:UNSURE]
//! min_known = 5                   # fewer known tokens than this: unsure
//! min_per_class = 1               # fewer messages of a class learned: unsure
//!
//! [filter]
//! max_size = "16M"                # larger messages pass `filter` unscored (bytes, or K/M/G)
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::decision::Costs;
use crate::fit::Select;
use crate::model::{Combine, Params};

/// Messages with fewer known tokens than this are judged unsure.
pub const DEFAULT_MIN_KNOWN: usize = 5;
/// With fewer messages than this of either class learned, every verdict is
/// unsure. One: a model that has never seen a class cannot tell it from
/// the other; from the first message of each class on, the model's
/// credibility ([`crate::model::CREDIBILITY_HALF`]) softens a young
/// model's evidence and the costs decide (docs/experiments.md, "A young
/// model speaks softly": a higher floor only adds unsure verdicts).
pub const DEFAULT_MIN_PER_CLASS: u64 = 1;
/// `filter` passes larger messages through unscored (16 MiB).
pub const DEFAULT_FILTER_MAX_SIZE: u64 = 16 << 20;

/// Errors reading a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read config file {}: {}", path.display(), crate::fsutil::words(source))]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the location.
        message: String,
    },
}

/// The `[model]` table: each value overrides the default.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Beta pseudo-count of presence.
    pub a: Option<f64>,
    /// Beta pseudo-count of absence.
    pub b: Option<f64>,
    /// `tempered`, `sum` or `textbook`.
    pub combine: Option<String>,
    /// Tempered combination: fixed strength (otherwise chosen when training).
    pub min_strength: Option<f64>,
    /// Tempered combination: exponent of the token count.
    pub power: Option<f64>,
    /// Gaussian variance floor (fraction of pooled variance).
    pub var_floor: Option<f64>,
    /// Weight of metadata evidence.
    pub meta_weight: Option<f64>,
    /// Clip of per-feature metadata evidence (nats).
    pub meta_clip: Option<f64>,
    /// Tempered combination: fixed strength of the byte view (otherwise
    /// chosen when training).
    pub bytes_min_strength: Option<f64>,
    /// Whether the stacker weighs the online discriminative view.
    pub logistic: Option<bool>,
}

/// The `[decision]` table.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DecisionConfig {
    /// `FP:FN[:UNSURE]`.
    pub costs: Option<String>,
    /// Fewer known tokens than this: unsure.
    pub min_known: Option<usize>,
    /// Fewer messages of a class learned than this: unsure.
    pub min_per_class: Option<u64>,
}

/// The `[filter]` table.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// Largest message `filter` scores: bytes, or a number with K, M or G.
    pub max_size: Option<Size>,
}

/// The `[serve]` table: what `bayesmail serve`'s flags of the same names
/// say; a flag given on the command line wins over its key.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// Addresses for spamd's protocol (`HOST:PORT` or `unix:PATH`).
    #[serde(default)]
    pub spamd: Vec<String>,
    /// Addresses for the milter.
    #[serde(default)]
    pub milter: Vec<String>,
    /// Addresses for HTTP.
    #[serde(default)]
    pub http: Vec<String>,
    /// Each user's database: a pattern with `%u`, `%l`, `%d`.
    pub user_db: Option<String>,
    /// With the counts in Redis: milliseconds counts read are used again.
    pub store_cache_ms: Option<u64>,
    /// With the counts in Redis: the memory each model is kept under.
    pub store_max_memory: Option<Size>,
    /// Messages of each class a user's model needs before it judges.
    pub min_user_messages: Option<u64>,
    /// Networks TCP peers may connect from.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Mode of the Unix sockets, in octal, as a string (`"660"`).
    pub socket_mode: Option<String>,
    /// Group of the Unix sockets.
    pub socket_group: Option<String>,
    /// The user to run as after binding.
    pub user: Option<String>,
    /// Largest message judged.
    pub max_size: Option<Size>,
    /// Bytes of messages held at once.
    pub max_held: Option<Size>,
    /// Connections served at once on each listener.
    pub max_connections: Option<usize>,
    /// Megabytes of models kept in memory.
    pub cache_mb: Option<u64>,
    /// Seconds a client may send nothing.
    pub timeout: Option<u64>,
    /// One log line per message.
    pub log_messages: Option<bool>,
    /// What the milter does with spam: `accept`, `reject`, `discard` or
    /// `quarantine`.
    pub milter_spam_action: Option<String>,
    /// The characters that start an address extension in a user name's
    /// local part.
    pub recipient_delimiter: Option<String>,
}

/// A size in a config file: a number of bytes, or a string such as `"16M"`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Size {
    /// Bytes.
    Bytes(u64),
    /// Text for [`parse_size`].
    Text(String),
}

impl Size {
    /// The bytes it says.
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            Size::Bytes(n) => Ok(*n),
            Size::Text(s) => parse_size(s),
        }
    }
}

/// Parses a size: a whole number of bytes with an optional suffix K, M or G
/// (powers of 1024, case-insensitive, an optional trailing `B` or `iB`).
///
/// ```
/// use bayesmail::config::parse_size;
/// assert_eq!(parse_size("16M"), Ok(16 << 20));
/// assert_eq!(parse_size("512k"), Ok(512 << 10));
/// assert_eq!(parse_size("1000"), Ok(1000));
/// assert!(parse_size("-1").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let lower = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 10),
        Some(b'm') => (&lower[..lower.len() - 1], 20),
        Some(b'g') => (&lower[..lower.len() - 1], 30),
        _ => (lower, 0),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("invalid size '{s}' (expected bytes, or a number with K, M or G)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("size '{s}' is too large"))
}

/// A configuration file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Database directory.
    pub db: Option<PathBuf>,
    /// The counts in Redis instead: a `redis://` URL.
    pub store: Option<String>,
    /// Milliseconds a Redis command may take (at least 1).
    pub store_timeout: Option<std::num::NonZeroU64>,
    /// Model hyperparameters.
    #[serde(default)]
    pub model: ModelConfig,
    /// Decision settings.
    #[serde(default)]
    pub decision: DecisionConfig,
    /// `filter` settings.
    #[serde(default)]
    pub filter: FilterConfig,
    /// `serve` settings.
    #[serde(default)]
    pub serve: ServeConfig,
}

impl Config {
    /// Reads and parses a TOML file. Its `db` comes out absolute: a
    /// leading `~` or `~/` is the home directory ([`expand_home`]), and any
    /// other relative path is relative to the config file's directory, as
    /// paths in a config file usually are, never to whatever directory
    /// bayesmail runs in.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = read_small_file(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Config::parse(&text).map_err(|message| Error::Parse {
            path: path.to_path_buf(),
            message,
        })?;
        if let Some(db) = &config.db {
            if db.as_os_str().is_empty() {
                return Err(Error::Parse {
                    path: path.to_path_buf(),
                    message: "db is empty".to_string(),
                });
            }
            let db = expand_home(db).map_err(|message| Error::Parse {
                path: path.to_path_buf(),
                message: format!("db: {message}"),
            })?;
            let base = path.parent().unwrap_or(Path::new(""));
            let db = std::path::absolute(base.join(&db)).unwrap_or(db);
            config.db = Some(db);
        }
        Ok(config)
    }

    /// Parses TOML text. The error is one line: the line and column of the
    /// fault (the column in bytes), then TOML's message, at most a few
    /// hundred characters.
    pub fn parse(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|e| {
            // One line: where, then what (not the parser's picture of the
            // line with a caret under it).
            let what = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
            let mut message = match e.span() {
                Some(span) => {
                    let before = &text.as_bytes()[..span.start.min(text.len())];
                    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
                    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
                    format!("line {line}, column {column}: {what}")
                }
                None => what,
            };
            if message.len() > 300 {
                let mut end = 300;
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message.truncate(end);
                message.push('…');
            }
            message
        })
    }

    /// Applies the `[model]` table (then `overrides`, e.g. from flags) to the
    /// defaults. Returns the parameters and what training may choose: the
    /// pseudo-counts unless `a` or `b` is given, the tempered strengths
    /// unless one of them is.
    pub fn params(&self, overrides: &ModelConfig) -> Result<(Params, Select), String> {
        let pick = |flag: Option<f64>, file: Option<f64>| flag.or(file);
        let m = &self.model;
        let mut p = Params::default();
        let (a, b) = (pick(overrides.a, m.a), pick(overrides.b, m.b));
        if let Some(a) = a {
            p.a = a;
        }
        if let Some(b) = b {
            p.b = b;
        }
        let combine = overrides
            .combine
            .as_deref()
            .or(m.combine.as_deref())
            .unwrap_or("tempered");
        let min_strength = pick(overrides.min_strength, m.min_strength);
        let power = pick(overrides.power, m.power);
        p.combine = match combine {
            "tempered" => {
                let Combine::Tempered {
                    min_strength: ms,
                    power: pw,
                } = Combine::default()
                else {
                    unreachable!("the default combination is tempered")
                };
                Combine::Tempered {
                    min_strength: min_strength.unwrap_or(ms),
                    power: power.unwrap_or(pw),
                }
            }
            "sum" => Combine::Sum,
            "textbook" => Combine::Textbook,
            other => {
                return Err(format!(
                    "unknown combination '{other}' (expected tempered, sum or textbook)"
                ));
            }
        };
        if let Some(v) = pick(overrides.var_floor, m.var_floor) {
            p.var_floor = v;
        }
        if let Some(v) = pick(overrides.meta_weight, m.meta_weight) {
            p.meta_weight = v;
        }
        if let Some(v) = pick(overrides.meta_clip, m.meta_clip) {
            p.meta_clip = v;
        }
        let bytes_min_strength = pick(overrides.bytes_min_strength, m.bytes_min_strength);
        if let Some(v) = bytes_min_strength {
            p.bytes_min_strength = v;
        }
        if let Some(v) = overrides.logistic.or(m.logistic) {
            p.logistic = v;
        }
        let pinned = min_strength.is_some() || bytes_min_strength.is_some();
        // Values given are kept as given, at any size.
        p.grows = !pinned && a.is_none() && b.is_none() && combine == "tempered";
        p.check()?;
        Ok((
            p,
            Select {
                prior: a.is_none() && b.is_none(),
                strength: !pinned && combine == "tempered",
            },
        ))
    }

    /// The decision costs: `flag`, else the file's, else the default.
    pub fn costs(&self, flag: Option<Costs>) -> Result<Costs, String> {
        match (flag, &self.decision.costs) {
            (Some(c), _) => Ok(c),
            (None, Some(s)) => s.parse(),
            (None, None) => Ok(Costs::default()),
        }
    }

    /// Minimum known tokens for a verdict other than unsure.
    pub fn min_known(&self) -> usize {
        self.decision.min_known.unwrap_or(DEFAULT_MIN_KNOWN)
    }

    /// The largest message `filter` scores: `flag`, else the file's, else
    /// [`DEFAULT_FILTER_MAX_SIZE`].
    pub fn filter_max_size(&self, flag: Option<u64>) -> Result<u64, String> {
        match (flag, &self.filter.max_size) {
            (Some(n), _) => Ok(n),
            (None, Some(size)) => size.bytes(),
            (None, None) => Ok(DEFAULT_FILTER_MAX_SIZE),
        }
    }

    /// Minimum messages per class for a verdict other than unsure.
    pub fn min_per_class(&self) -> u64 {
        self.decision.min_per_class.unwrap_or(DEFAULT_MIN_PER_CLASS)
    }
}

/// The largest config file read: far more than any real one, small enough
/// that a wrong path (a log, a disk image, /dev/zero) fails at once.
pub(crate) const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a config file of at most [`MAX_CONFIG_BYTES`], as UTF-8: a FIFO is
/// refused without blocking, and an endless device (`/dev/zero`) stops at
/// the limit.
fn read_small_file(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    // A regular file or a character device (`/dev/null` says "no
    // settings"); a FIFO, socket or directory is a wrong path.
    let kind = file.metadata()?.file_type();
    if !(kind.is_file() || std::os::unix::fs::FileTypeExt::is_char_device(&kind)) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "neither a regular file nor a device",
        ));
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than {MAX_CONFIG_BYTES} bytes"),
        ));
    }
    Ok(text)
}

/// The home directory: `HOME` if it is an absolute path, else the
/// password database's entry for the effective user (`getpwuid_r`), if
/// that is an absolute path. Delivery agents often run us without `HOME`
/// (Postfix's `pipe` does), and a relative home would put the database
/// wherever the agent's working directory happens to be.
pub fn home_dir() -> Option<PathBuf> {
    home_dir_from(std::env::var_os("HOME"))
}

/// [`home_dir`] with `home` standing for the `HOME` variable.
fn home_dir_from(home: Option<std::ffi::OsString>) -> Option<PathBuf> {
    home.map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .or_else(password_home)
}

/// The home directory of the effective user in the password database.
fn password_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: `passwd` is plain data that getpwuid_r fills in; all-zero
        // is a valid value for it.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: the buffer outlives the call and its length is given;
        // the strings `entry` points to live in the buffer, read below
        // before the buffer is touched again.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut entry,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || found.is_null() || entry.pw_dir.is_null() {
            return None;
        }
        // SAFETY: getpwuid_r succeeded, so pw_dir is a NUL-terminated
        // string inside `buf`.
        let dir = unsafe { std::ffi::CStr::from_ptr(entry.pw_dir) };
        let dir = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
        return dir.is_absolute().then_some(dir);
    }
}

/// Why there is no home directory, for messages.
fn no_home() -> String {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    format!(
        "HOME is not set to an absolute path and the password database has no home \
         directory for user id {uid}"
    )
}

/// `path` with a leading `~` or `~/` replaced by the home directory
/// ([`home_dir`]); any other path as it is. `~user` is refused: only the
/// current user's home is looked up.
///
/// ```
/// use std::path::Path;
/// use bayesmail::config::expand_home;
/// assert_eq!(expand_home(Path::new("/var/db")).unwrap(), Path::new("/var/db"));
/// assert_eq!(expand_home(Path::new("db/~")).unwrap(), Path::new("db/~"));
/// assert!(expand_home(Path::new("~pat/db")).is_err());
/// ```
pub fn expand_home(path: &Path) -> Result<PathBuf, String> {
    expand_home_with(path, home_dir)
}

fn expand_home_with(
    path: &Path,
    home: impl FnOnce() -> Option<PathBuf>,
) -> Result<PathBuf, String> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let rest = match bytes {
        [b'~'] => &[][..],
        // `~//x` is `~/x`: joined as `/x`, it would replace the home.
        [b'~', b'/', rest @ ..] => {
            let slashes = rest.iter().take_while(|&&b| b == b'/').count();
            &rest[slashes..]
        }
        [b'~', ..] => {
            return Err(format!(
                "{}: `~user` is not expanded; write the directory in full",
                path.display()
            ));
        }
        _ => return Ok(path.to_path_buf()),
    };
    let home = home().ok_or_else(|| format!("cannot expand {}: {}", path.display(), no_home()))?;
    Ok(home.join(std::ffi::OsStr::from_bytes(rest)))
}

/// The database directory when none is given: `$XDG_DATA_HOME/bayesmail`
/// if that is absolute, else `~/.local/share/bayesmail`. Never a relative
/// path: without a home directory ([`home_dir`]) it is an error, which
/// `filter` turns into `reason=config-error`.
pub fn default_db_dir() -> Result<PathBuf, String> {
    if let Some(d) = absolute_var("XDG_DATA_HOME") {
        return Ok(d.join("bayesmail"));
    }
    match home_dir() {
        // A writer makes the database's missing parents; a home that does
        // not exist (a mistyped or stale HOME) is not one of them.
        Some(home)
            if std::fs::metadata(&home)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
        {
            Err(format!(
                "no database directory: the home directory {} does not exist",
                home.display()
            ))
        }
        Some(home) => Ok(home.join(".local").join("share").join("bayesmail")),
        None => Err(format!("no database directory: {}", no_home())),
    }
}

/// An environment variable naming an absolute directory (the XDG base
/// directory rules ignore relative ones).
fn absolute_var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
}

/// `$XDG_CONFIG_HOME/bayesmail/config.toml` or
/// `~/.config/bayesmail/config.toml`, if that file exists.
pub fn default_config_file() -> Option<PathBuf> {
    let base = absolute_var("XDG_CONFIG_HOME").or_else(|| home_dir().map(|h| h.join(".config")))?;
    let file = base.join("bayesmail").join("config.toml");
    file.is_file().then_some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_does_not_parse_is_told_on_one_line_with_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        for (text, want) in [
            ("bogus = 1\n", "line 1, column 1: unknown field `bogus`"),
            ("[model\n", "line 1, column 7: "),
            ("[model]\n\na = \"x\"\n", "line 3, column 5: "),
        ] {
            std::fs::write(&file, text).unwrap();
            let err = Config::load(&file).unwrap_err().to_string();
            assert_eq!(err.lines().count(), 1, "{text:?}: {err}");
            assert!(
                err.starts_with(&format!("config file {}: ", file.display())) && err.contains(want),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn a_config_path_that_is_no_config_file_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path in our own temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for path in [fifo.as_path(), Path::new("/dev/zero"), dir.path()] {
            let err = Config::load(path).unwrap_err().to_string();
            assert!(err.contains("cannot read config file"), "{err}");
        }
        assert!(Config::load(Path::new("/dev/null")).is_ok());
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; (MAX_CONFIG_BYTES + 10) as usize]).unwrap();
        assert!(
            Config::load(&big)
                .unwrap_err()
                .to_string()
                .contains("larger than")
        );
        let long_line = dir.path().join("bad.toml");
        std::fs::write(&long_line, "x = ".to_string() + &"y".repeat(100_000)).unwrap();
        assert!(Config::load(&long_line).unwrap_err().to_string().len() < 1000);
    }

    /// Issue 26, U1: without `HOME` (Postfix's `pipe`), the home directory
    /// is the password database's; a relative `HOME` is not taken.
    #[test]
    fn without_home_the_password_database_names_the_home_directory() {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() }.to_string();
        let listed = passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 6 && f[2] == uid).then(|| PathBuf::from(f[5]))
        });
        let Some(listed) = listed else {
            eprintln!("user {uid} is not in /etc/passwd: test skipped");
            return;
        };
        assert_eq!(home_dir_from(None), Some(listed.clone()));
        assert_eq!(home_dir_from(Some("relative".into())), Some(listed));
        assert_eq!(
            home_dir_from(Some("/home/pat".into())),
            Some(PathBuf::from("/home/pat"))
        );
    }

    /// Issue 26, U3: `~` and `~/` are the home directory; nothing else is
    /// touched, and without a home it is an error, never a relative path.
    #[test]
    fn a_leading_tilde_is_the_home_directory() {
        let home = || Some(PathBuf::from("/home/pat"));
        let expand = |p: &str| expand_home_with(Path::new(p), home);
        assert_eq!(expand("~"), Ok(PathBuf::from("/home/pat")));
        assert_eq!(expand("~/db"), Ok(PathBuf::from("/home/pat/db")));
        assert_eq!(expand("~//db/x"), Ok(PathBuf::from("/home/pat/db/x")));
        assert_eq!(expand("db/~/x"), Ok(PathBuf::from("db/~/x")));
        assert_eq!(expand("/abs"), Ok(PathBuf::from("/abs")));
        assert!(expand("~pat/db").unwrap_err().contains("~user"));
        let err = expand_home_with(Path::new("~/db"), || None).unwrap_err();
        assert!(err.contains("HOME is not set"), "{err}");
    }

    /// Issue 26, U3: the config file's `db` never ends up relative to the
    /// directory bayesmail runs in.
    #[test]
    fn the_config_files_db_is_relative_to_the_file_or_home() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        let db_of = |text: &str| {
            std::fs::write(&file, text).unwrap();
            Config::load(&file).map(|c| c.db.unwrap())
        };
        assert_eq!(
            db_of("db = \"mail/db\"\n").unwrap(),
            dir.path().join("mail/db")
        );
        assert_eq!(db_of("db = \"/var/db\"\n").unwrap(), Path::new("/var/db"));
        if let Some(home) = home_dir() {
            assert_eq!(db_of("db = \"~/x\"\n").unwrap(), home.join("x"));
        }
        assert!(
            db_of("db = \"\"\n")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(db_of("db = \"~pat/x\"\n").is_err());
    }

    #[test]
    fn file_values_apply_and_flags_win() {
        let c = Config::parse(
            "db = \"/tmp/x\"\n[model]\na = 0.5\nmin_strength = 2.0\n[decision]\ncosts = \"20:1\"\nmin_known = 3\n",
        )
        .unwrap();
        assert_eq!(c.db.as_deref(), Some(Path::new("/tmp/x")));
        let (p, select) = c.params(&ModelConfig::default()).unwrap();
        assert_eq!(p.a, 0.5);
        assert_eq!(select, Select::NONE, "a and min_strength pinned");
        assert!(!p.grows, "pinned values stay as given at any size");
        let (young, _) = Config::parse("")
            .unwrap()
            .params(&ModelConfig::default())
            .unwrap();
        assert!(young.grows, "nothing pinned: a learning database grows");
        for pin in [
            "a = 0.1",
            "b = 0.1",
            "min_strength = 1.0",
            "bytes_min_strength = 3.0",
            "combine = \"sum\"",
        ] {
            let c = Config::parse(&format!("[model]\n{pin}\n")).unwrap();
            assert!(!c.params(&ModelConfig::default()).unwrap().0.grows, "{pin}");
        }
        assert_eq!(
            p.combine,
            Combine::Tempered {
                min_strength: 2.0,
                power: 1.0
            }
        );
        let (p, _) = c
            .params(&ModelConfig {
                a: Some(0.2),
                ..ModelConfig::default()
            })
            .unwrap();
        assert_eq!(p.a, 0.2);
        assert_eq!(c.costs(None).unwrap().to_string(), "20:1");
        assert_eq!(c.min_known(), 3);
        let (_, select) = Config::default().params(&ModelConfig::default()).unwrap();
        assert_eq!(select, Select::ALL, "by default training chooses");
        let (_, select) = Config::default()
            .params(&ModelConfig {
                b: Some(0.3),
                ..ModelConfig::default()
            })
            .unwrap();
        assert_eq!(
            select,
            Select {
                prior: false,
                strength: true
            },
            "b alone pins the pseudo-counts"
        );
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        assert!(
            Config::parse("[model]\nalpha = 1\n")
                .unwrap_err()
                .contains("alpha")
        );
        assert!(
            Config::parse("[model]\na = -1\n")
                .unwrap()
                .params(&ModelConfig::default())
                .is_err()
        );
        assert!(
            Config::parse("[model]\ncombine = \"magic\"\n")
                .unwrap()
                .params(&ModelConfig::default())
                .is_err()
        );
        assert!(
            Config::parse("[decision]\ncosts = \"1\"\n")
                .unwrap()
                .costs(None)
                .is_err()
        );
    }

    #[test]
    fn filter_size_from_flag_file_or_default() {
        assert_eq!(
            Config::default().filter_max_size(None),
            Ok(DEFAULT_FILTER_MAX_SIZE)
        );
        let text = Config::parse("[filter]\nmax_size = \"2M\"\n").unwrap();
        assert_eq!(text.filter_max_size(None), Ok(2 << 20));
        assert_eq!(text.filter_max_size(Some(7)), Ok(7));
        let bytes = Config::parse("[filter]\nmax_size = 4096\n").unwrap();
        assert_eq!(bytes.filter_max_size(None), Ok(4096));
        let bad = Config::parse("[filter]\nmax_size = \"lots\"\n").unwrap();
        assert!(bad.filter_max_size(None).unwrap_err().contains("lots"));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("3 KB"), Ok(3 << 10));
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }
}
