//! Users and their databases: which names are accepted, and where a
//! user's database is under `--user-db PATTERN`.

use std::path::{Component, Path, PathBuf};

/// The longest user name accepted, in bytes.
pub const MAX_USER: usize = 255;

/// Why a user name or pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserError {
    /// Empty, too long, or holding a character outside spamd's safe set
    /// (`A-Z a-z 0-9 - + _ . , @ =`), a `.` or `..` part, or an `@` with
    /// an empty local part or domain.
    #[error("user name refused: {0}")]
    Refused(String),
    /// The pattern is not usable.
    #[error("user database pattern {pattern:?}: {why}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// Returns `dir`, a user's database, if it is there or its filesystem has
/// room for a new one: more free than [`kept_free`] keeps back. Any client
/// may name users, and a new database takes megabytes at once: a client
/// naming new users by the thousand must not fill the disk that the mail
/// system's queue and every other database need. A filesystem whose free
/// space cannot be read is not refused.
pub fn room_for(dir: PathBuf) -> Result<PathBuf, crate::store::Error> {
    if dir.exists() {
        return Ok(dir);
    }
    let at = dir.ancestors().find(|a| a.exists()).unwrap_or(&dir);
    let Ok(fs) = nix::sys::statvfs::statvfs(at) else {
        return Ok(dir);
    };
    let block = fs.fragment_size();
    let free = fs.blocks_available().saturating_mul(block);
    let kept = kept_free(fs.blocks().saturating_mul(block));
    if free > kept {
        return Ok(dir);
    }
    let why = format!(
        "no new user's database while its filesystem has {} MB free: the last {} MB are kept \
         for the mail system and the databases there are",
        free >> 20,
        kept >> 20
    );
    Err(crate::store::Error::Io {
        path: dir,
        source: std::io::Error::new(std::io::ErrorKind::StorageFull, why),
    })
}

/// The free space [`room_for`] keeps back on a filesystem of `size` bytes:
/// a twentieth of it, at most 1 GiB.
pub fn kept_free(size: u64) -> u64 {
    (size / 20).min(1 << 30)
}

/// Checks a user name as spamd does (its safe characters only), and
/// refuses what could name something else on disk: an empty name, one over
/// [`MAX_USER`] bytes, a name that is `.` or `..` or whose local part or
/// domain is, an `@` with nothing before or after it. Returns the name as
/// every model and database knows it: lower-cased, since mail servers
/// deliver `Alice@Example.org` to `alice@example.org` (and a sender
/// chooses the case of the recipient it writes).
pub fn check_user(user: &str) -> Result<String, UserError> {
    if user.is_empty() {
        return Err(UserError::Refused("the name is empty".into()));
    }
    let refuse = |why: &str| {
        let shown = crate::sanitize::shortened(user, 40);
        Err(UserError::Refused(format!(
            "{}: {why}",
            crate::sanitize::log_value(&shown)
        )))
    };
    if user.len() > MAX_USER {
        return refuse("longer than 255 bytes");
    }
    if let Some(c) = user
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-+_.,@=".contains(*c)))
    {
        return refuse(&format!(
            "the character '{}' is not allowed",
            c.escape_default()
        ));
    }
    let (local, domain) = split(user);
    if [user, local, domain]
        .iter()
        .any(|p| *p == "." || *p == "..")
    {
        return refuse("names a directory");
    }
    if user.contains('@') && (local.is_empty() || domain.is_empty()) {
        return refuse("has an empty local part or domain");
    }
    Ok(user.to_ascii_lowercase())
}

/// What `%d` is for a user name without a domain: a domain is what
/// follows a name's last `@`, so it never is `@`.
pub const NO_DOMAIN: &str = "@";

/// The local part and the domain of `user` (`""` when it has none).
fn split(user: &str) -> (&str, &str) {
    user.rsplit_once('@').unwrap_or((user, ""))
}

/// Where each user's database is: a pattern with `%u` (the whole user
/// name), `%l` (its local part), `%d` (its domain) and `%%`, as spamd's
/// `--virtual-config-dir`, e.g. `/var/lib/bayesmail/%d/%l`. It must be an
/// absolute path and name the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDbPattern {
    pattern: String,
}

impl UserDbPattern {
    /// Checks `pattern`.
    pub fn new(pattern: &str) -> Result<UserDbPattern, UserError> {
        let bad = |why| UserError::Pattern {
            pattern: pattern.to_string(),
            why,
        };
        if !Path::new(pattern).is_absolute() {
            return Err(bad("it must be an absolute path"));
        }
        let mut names_user = false;
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            if c == '%' {
                match chars.next() {
                    Some('u' | 'l' | 'd') => names_user = true,
                    Some('%') => {}
                    _ => return Err(bad("% is followed by u, l, d or %")),
                }
            }
        }
        if !names_user {
            return Err(bad("it names no user (%u, %l or %d)"));
        }
        if Path::new(pattern)
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        {
            return Err(bad("it has a . or .. part"));
        }
        Ok(UserDbPattern {
            pattern: pattern.to_string(),
        })
    }

    /// The directory every user's database is under: the pattern up to
    /// the last `/` before its first `%`.
    pub fn root(&self) -> PathBuf {
        let fixed = self.pattern.split('%').next().unwrap_or("");
        match fixed.rfind('/') {
            Some(0) | None => PathBuf::from("/"),
            Some(at) => PathBuf::from(&fixed[..at]),
        }
    }

    /// The database of `user` (checked by [`check_user`]). Every user's
    /// database is as deep under the pattern's root as every other's, so
    /// that none is inside another's or a domain's directory: `%d` of a
    /// name without a domain (`spamc -u alice`) is [`NO_DOMAIN`], which no
    /// domain can be.
    pub fn path(&self, user: &str) -> Result<PathBuf, UserError> {
        self.place(user, NO_DOMAIN)
    }

    /// Where an earlier version put the database of `user` when it differs
    /// from [`UserDbPattern::path`]: `%d` of a name without a domain was
    /// empty (`users//alice`, that is `users/alice`).
    pub fn earlier_path(&self, user: &str) -> Option<PathBuf> {
        let (_, domain) = split(user);
        let uses_domain = self.pattern.replace("%%", "").contains("%d");
        (domain.is_empty() && uses_domain)
            .then(|| self.place(user, ""))
            .and_then(Result::ok)
    }

    /// The pattern with `user`'s parts, `no_domain` standing for the
    /// domain of a name without one.
    fn place(&self, user: &str, no_domain: &str) -> Result<PathBuf, UserError> {
        let user = check_user(user)?;
        let user = user.as_str();
        let (local, domain) = split(user);
        let domain = if domain.is_empty() { no_domain } else { domain };
        let mut out = String::with_capacity(self.pattern.len() + user.len());
        let mut chars = self.pattern.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('u') => out.push_str(user),
                Some('l') => out.push_str(local),
                Some('d') => out.push_str(domain),
                _ => out.push('%'),
            }
        }
        let path = PathBuf::from(out);
        if path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        {
            return Err(UserError::Refused(format!("{user}: names a directory")));
        }
        Ok(path)
    }
}

/// The user a name or address given by a client names: its domain without
/// a trailing dot (`example.org.` is `example.org`), and its local part
/// cut at the first of `delimiters` (an address extension,
/// `alice+lists`), as the MTA delivers it. A local part that would be
/// left empty is kept whole.
pub fn without_extension(rcpt: &str, delimiters: &str) -> String {
    let (local, domain) = match rcpt.rsplit_once('@') {
        Some((l, d)) => (l, Some(d.strip_suffix('.').unwrap_or(d))),
        None => (rcpt, None),
    };
    let local = match local.find(|c| delimiters.contains(c)) {
        Some(0) | None => local,
        Some(at) => &local[..at],
    };
    match domain {
        Some(d) => format!("{local}@{d}"),
        None => local.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new user's database needs the free space a twentieth of its
    /// filesystem holds, 1 GiB at most; one that is there is never refused.
    #[test]
    fn a_new_users_database_leaves_the_disk_room() {
        const GIB: u64 = 1 << 30;
        assert_eq!(kept_free(10 * GIB), GIB / 2);
        assert_eq!(kept_free(100 * GIB), GIB);
        let tmp = tempfile::tempdir().unwrap();
        let there = tmp.path().to_path_buf();
        assert_eq!(room_for(there.clone()).unwrap(), there);
        // This machine's /tmp has room for one more.
        let new = tmp.path().join("example.org").join("alice");
        assert_eq!(room_for(new.clone()).unwrap(), new);
    }

    /// A pattern of the local part alone puts a machine account's login
    /// (`alice`, as Dovecot gives it) and its address (as a milter's
    /// recipient) in one database.
    #[test]
    fn a_patterns_root_is_where_every_database_is_under() {
        for (pattern, root) in [
            ("/var/lib/bayesmail/users/%d/%l", "/var/lib/bayesmail/users"),
            ("/var/lib/bayesmail/users/%u", "/var/lib/bayesmail/users"),
            ("/home/%l/.bayesmail", "/home"),
            ("/srv/u-%u", "/srv"),
            ("/%u", "/"),
        ] {
            assert_eq!(UserDbPattern::new(pattern).unwrap().root(), Path::new(root));
        }
    }

    #[test]
    fn a_pattern_of_the_local_part_alone_makes_a_login_and_its_address_one_user() {
        let p = UserDbPattern::new("/var/lib/bayesmail/users/%l").unwrap();
        assert_eq!(
            p.path("alice").unwrap(),
            p.path("alice@example.org").unwrap()
        );
        let p = UserDbPattern::new("/var/lib/bayesmail/users/%d/%l").unwrap();
        assert_ne!(
            p.path("alice").unwrap(),
            p.path("alice@example.org").unwrap()
        );
    }

    #[test]
    fn a_name_is_its_user_without_extension_or_the_domains_dot() {
        for (rcpt, delimiters, user) in [
            ("alice@example.org", "+", "alice@example.org"),
            ("alice+lists@example.org", "+", "alice@example.org"),
            ("alice+lists@example.org", "", "alice+lists@example.org"),
            ("alice-x+y@example.org.", "+-", "alice@example.org"),
            ("+alice@example.org", "+", "+alice@example.org"),
            ("alice+x", "+", "alice"),
            ("alice@example.org.", "", "alice@example.org"),
            ("a@b@example.org", "+", "a@b@example.org"),
        ] {
            assert_eq!(
                without_extension(rcpt, delimiters),
                user,
                "{rcpt} {delimiters}"
            );
        }
    }

    #[test]
    fn safe_names_pass_and_others_are_refused() {
        for ok in ["alice", "alice@example.org", "a.b+c_d-e=f,g", "a1"] {
            assert_eq!(check_user(ok), Ok(ok.to_string()));
        }
        assert_eq!(
            check_user("Alice@Example.ORG"),
            Ok("alice@example.org".into())
        );
        assert_eq!(
            check_user(""),
            Err(UserError::Refused("the name is empty".into()))
        );
        let long = "a".repeat(300);
        for bad in [
            "",
            "..",
            ".",
            "../etc",
            "a/b",
            "a%b",
            "a\0b",
            "a b",
            "é",
            &long,
            "..@x",
            "a@..",
            "@example.org",
            "alice@",
            "@",
        ] {
            assert!(check_user(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_pattern_places_each_user_under_its_root() {
        let p = UserDbPattern::new("/var/lib/bayesmail/%d/%l").unwrap();
        assert_eq!(
            p.path("alice@example.org").unwrap(),
            PathBuf::from("/var/lib/bayesmail/example.org/alice")
        );
        assert_eq!(
            p.path("ALICE@EXAMPLE.ORG").unwrap(),
            PathBuf::from("/var/lib/bayesmail/example.org/alice")
        );
        // Without a domain, a name is under `@`: never a domain's directory
        // (`example.org`), nor a database beside the domains'; with a domain
        // but no local part, it would be the domain's directory itself.
        for (user, path) in [("bob", "@/bob"), ("example.org", "@/example.org")] {
            let want = PathBuf::from("/var/lib/bayesmail").join(path);
            assert_eq!(p.path(user).unwrap(), want);
        }
        for bad in ["@example.org", "../x"] {
            assert!(p.path(bad).is_err(), "{bad}");
        }
        // Where an earlier version put bob's: `%d` empty; none elsewhere.
        assert_eq!(
            p.earlier_path("bob"),
            Some(PathBuf::from("/var/lib/bayesmail//bob"))
        );
        assert_eq!(p.earlier_path("alice@example.org"), None);
        let flat = UserDbPattern::new("/srv/%u").unwrap();
        assert_eq!(flat.path("bob").unwrap(), PathBuf::from("/srv/bob"));
        assert_eq!(flat.earlier_path("bob"), None);
        let literal = UserDbPattern::new("/srv/%%d/%l").unwrap();
        assert_eq!(literal.path("bob").unwrap(), PathBuf::from("/srv/%d/bob"));
        let u = UserDbPattern::new("/srv/%u/db%%").unwrap();
        assert_eq!(u.path("c@d").unwrap(), PathBuf::from("/srv/c@d/db%"));
        for bad in ["relative/%u", "/srv/db", "/srv/%x", "/srv/../%u"] {
            assert!(UserDbPattern::new(bad).is_err(), "{bad}");
        }
    }
}
