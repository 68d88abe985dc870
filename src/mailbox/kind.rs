//! The kinds of mailbox there are and the two mbox escaping conventions,
//! as names a user gives on the command line.

use std::fmt;
use std::str::FromStr;

/// The kinds of mailbox this module reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MailboxKind {
    /// A Maildir: a directory with `cur/`, `new/` and `tmp/`; one file per
    /// message in `cur/` and `new/`.
    Maildir,
    /// An mbox file: messages one after another, each introduced by a
    /// `From ` separator line.
    ///
    /// The reader goes line by line (a line ends at `\n`; `\r\n` works the
    /// same way) and follows these rules:
    /// - The file must be empty (no messages) or start with `From `.
    /// - A line starting with `From ` is a separator if it is the first line
    ///   of the file, or the line before it is blank (`\n` or `\r\n`), or it
    ///   looks like a separator: `From `, a sender token (no whitespace, right
    ///   after the space), whitespace, then text containing a time of day
    ///   (`H:MM` or `HH:MM`). The last case only rescues files whose writer
    ///   left out the blank line; a well-formed mbox never has an unescaped
    ///   `From ` line in a body.
    /// - A message is the lines after its separator up to the next separator
    ///   or the end of the file, except that one blank line right before the
    ///   next separator, or at the very end of the file, is dropped: writers
    ///   add it, so it is not part of the message. The separator line itself
    ///   is not part of the message either.
    /// - A message whose header gives its body's length (`Content-Length`,
    ///   once), as Dovecot and other mboxcl2 writers store messages without
    ///   escaping their body's `From ` lines, ends where that length says
    ///   if the end of the file or the next separator line follows (after
    ///   one blank line at most; without it, a line that looks like a
    ///   separator), its body kept as stored. A length over 16 MiB is left
    ///   to the rules above; after one that does not hold, so is every
    ///   length in the file.
    /// - One `>` is removed from escaped `From ` lines, per [`MboxEscaping`].
    /// - A message left with no bytes at all is an [`super::Error::EmptyMessage`]
    ///   item; a read error is an [`super::Error::Io`] item and ends the file.
    /// - Each message's id carries the byte offset of its separator line.
    ///
    /// So a last message without a final newline comes back as it is, and
    /// [`super::write_mbox_message`] output reads back byte for byte.
    Mbox,
    /// A directory tree of message files (`.eml` and the like), walked in
    /// full, dotfiles and dot-directories left out. Maildirs found inside are
    /// read as Maildirs, and files that start with `From ` as mboxes when
    /// they hold several messages; a file holding one message after its
    /// envelope line is that message (id `path`, see [`MailboxKind::File`]).
    Dir,
    /// A single file holding one message. A file that starts with a `From `
    /// envelope line and holds one message (no second separator by the
    /// [`MailboxKind::Mbox`] rules) is a message too: its id is the plain
    /// path, so it can be moved like any message file, and its bytes are
    /// what an mbox reader gives (envelope line left out, `>From ` escaping
    /// undone), so its registry digest is the same however it is reached.
    File,
    /// Standard input: one message, or, if it is clearly an mbox of several
    /// messages (see [`super::looks_like_several_messages`]), each of them.
    Stdin,
}

impl MailboxKind {
    /// The lower-case name used on the command line and in [`fmt::Display`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Maildir => "maildir",
            Self::Mbox => "mbox",
            Self::Dir => "dir",
            Self::File => "file",
            Self::Stdin => "stdin",
        }
    }
}

impl fmt::Display for MailboxKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MailboxKind {
    type Err = String;

    /// Parses `maildir`, `mbox`, `dir`, `file` or `stdin` (any case).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            Self::Maildir,
            Self::Mbox,
            Self::Dir,
            Self::File,
            Self::Stdin,
        ]
        .into_iter()
        .find(|kind| kind.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            format!("unknown mailbox kind '{s}' (expected maildir, mbox, dir, file or stdin)")
        })
    }
}

/// How body lines that begin with `From ` are escaped in an mbox file.
///
/// Writers put a `>` in front of such lines so that readers do not take them
/// for message separators. The two common conventions differ in whether
/// already-quoted lines are escaped again, and so in what the reader has to
/// undo. The same file read both ways gives different bytes only on lines that
/// start with two or more `>` before `From `.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MboxEscaping {
    /// mboxrd (the default, and what [`super::write_mbox_message`] writes): writers
    /// escape every line matching `^>*From `, so the reader strips one `>`
    /// from every line matching `^>+From `. Reversible: round-trips exactly.
    #[default]
    Mboxrd,
    /// mboxo: writers escape only lines matching `^From `, so the reader
    /// strips the `>` only from lines matching `^>From ` (exactly one `>`);
    /// `>>From ` stays as it is. Lossy: a body line that really began with
    /// `>From ` comes back as `From `.
    Mboxo,
}

impl MboxEscaping {
    /// The lower-case name used on the command line and in [`fmt::Display`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Mboxrd => "mboxrd",
            Self::Mboxo => "mboxo",
        }
    }
}

impl fmt::Display for MboxEscaping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MboxEscaping {
    type Err = String;

    /// Parses `mboxrd` or `mboxo` (any case).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [Self::Mboxrd, Self::Mboxo]
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown mbox escaping '{s}' (expected mboxrd or mboxo)"))
    }
}
