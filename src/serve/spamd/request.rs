//! What a spamd client sends, read: the request line, the headers that
//! mean something (others are ignored, as spamd ignores them), and the
//! message, each read within the read timeout and the whole request by
//! its deadline ([`RequestClock`]), kept in memory only up to the size
//! limit (a larger one is read and dropped). Answers are the parent
//! module's.

use std::io::Read as _;
use std::time::{Duration, Instant};

use super::{Code, Failure, Stop};
use crate::model::Label;
use crate::sanitize::{log_value, shortened};
use crate::serve::budget::Held;
use crate::serve::{BoxConn, RequestClock, read_some};

/// The longest request or header line read, in bytes (spamc's own buffer).
const MAX_LINE: usize = 8192;

/// Header lines after the request line, at most (as spamd).
const MAX_HEADERS: usize = 255;

/// The verbs of SPAMC/1.5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Check,
    Symbols,
    Report,
    ReportIfSpam,
    Skip,
    Ping,
    Process,
    Headers,
    Tell,
}

impl Verb {
    fn parse(word: &[u8]) -> Option<Verb> {
        Some(match word {
            b"CHECK" => Verb::Check,
            b"SYMBOLS" => Verb::Symbols,
            b"REPORT" => Verb::Report,
            b"REPORT_IFSPAM" => Verb::ReportIfSpam,
            b"SKIP" => Verb::Skip,
            b"PING" => Verb::Ping,
            b"PROCESS" => Verb::Process,
            b"HEADERS" => Verb::Headers,
            b"TELL" => Verb::Tell,
            _ => return None,
        })
    }
}

/// The request line: `VERB SPAMC/VERSION`. The version is a number, as
/// spamd compares it.
pub(super) fn request_line(line: &[u8]) -> Result<(Verb, f64), Failure> {
    // Quoted: the text goes to the log as well as back to the client.
    let bad = || {
        let shown = shortened(&String::from_utf8_lossy(line), 150).into_owned();
        Failure::protocol(log_value(&shown).into_owned())
    };
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let (Some(verb), Some(proto), None) = (words.next(), words.next(), words.next()) else {
        return Err(bad());
    };
    let verb = Verb::parse(verb).ok_or_else(bad)?;
    let version = proto
        .strip_prefix(b"SPAMC/")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(bad)?;
    Ok((verb, version))
}

/// The request's headers that mean something here; others are ignored.
#[derive(Debug, Default)]
pub(super) struct Headers {
    pub(super) length: Option<u64>,
    pub(super) user: Option<String>,
    pub(super) compressed: bool,
    pub(super) class: Option<Label>,
    pub(super) set_local: bool,
    pub(super) remove_local: bool,
}

impl Headers {
    /// Takes one header line (without its line end).
    fn take(&mut self, line: &[u8]) -> Result<(), Failure> {
        let Some(colon) = memchr::memchr(b':', line) else {
            return Err(Failure::protocol("(header not in 'Name: value' format)"));
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        let text = || String::from_utf8_lossy(value).into_owned();
        if is("Content-length") {
            let digits = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| Failure::protocol("(Content-Length contains non-numeric bytes)"))?;
            let n = digits
                .parse::<u64>()
                .map_err(|_| Failure::protocol("(Content-Length too large)"))?;
            if self.length.is_some_and(|was| was != n) {
                return Err(Failure::protocol("(two different Content-Length headers)"));
            }
            self.length = Some(n);
        } else if is("User") {
            let user = std::str::from_utf8(value)
                .map_err(|_| Failure::protocol("(User header refused: not UTF-8)"))?;
            let user = crate::serve::users::check_user(user)
                .map_err(|e| Failure::protocol(format!("(User header refused: {e})")))?;
            // Two names for one request: which one was meant is not known
            // (a front end adding its own after the client's, say).
            if self.user.as_ref().is_some_and(|was| *was != user) {
                return Err(Failure::protocol("(two different User headers)"));
            }
            self.user = Some(user);
        } else if is("Message-class") {
            let class = match value.to_ascii_lowercase().as_slice() {
                b"spam" => Label::Spam,
                b"ham" => Label::Ham,
                _ => {
                    return Err(Failure::protocol(
                        "(Message-class header contains invalid class)",
                    ));
                }
            };
            if self.class.is_some_and(|was| was != class) {
                return Err(Failure::protocol("(two different Message-class headers)"));
            }
            self.class = Some(class);
        } else if is("Set") {
            self.set_local = contains_word(value, b"local");
        } else if is("Remove") {
            self.remove_local = contains_word(value, b"local");
        } else if is("Compress") {
            if !contains_word(value, b"zlib") {
                return Err(Failure::protocol(format!(
                    "(compression type not supported: {})",
                    log_value(&text())
                )));
            }
            self.compressed = true;
        }
        Ok(())
    }
}

/// Whether `value` holds `word`, in any case (spamd's `/local/i`).
fn contains_word(value: &[u8], word: &[u8]) -> bool {
    value
        .to_ascii_lowercase()
        .windows(word.len())
        .any(|w| w == word)
}

/// What the client sends, each read within the read timeout and all of it
/// by the request's deadline (a client that sends a byte now and then
/// holds a connection no longer), kept in memory only as far as the
/// message limit allows.
pub(super) struct Input<'a> {
    conn: &'a mut BoxConn,
    buf: Vec<u8>,
    /// Bytes of `buf` already taken.
    taken: usize,
    timeout: Duration,
    /// When the whole request must have arrived.
    clock: RequestClock,
}

/// How much is read from the connection at a time.
const CHUNK: usize = 16 * 1024;

impl<'a> Input<'a> {
    /// Reads from `conn`, each read waiting at most `timeout`, and all of
    /// them together at most `whole`.
    pub(super) fn new(conn: &'a mut BoxConn, timeout: Duration, whole: Duration) -> Input<'a> {
        Input {
            conn,
            buf: Vec::with_capacity(CHUNK),
            taken: 0,
            timeout,
            clock: RequestClock::start(whole),
        }
    }

    /// Reads more; `Ok(0)` at the end of what the client sends.
    async fn fill(&mut self) -> Result<usize, Stop> {
        // What was taken goes, so the buffer holds at most a line and a
        // chunk however many lines come.
        self.buf.drain(..self.taken);
        self.taken = 0;
        let old = self.buf.len();
        self.buf.resize(old + CHUNK, 0);
        let (wait, late) = self.clock.next_wait(self.timeout);
        let read = read_some(self.conn, &mut self.buf[old..], wait).await;
        let n = *read.as_ref().unwrap_or(&0);
        self.buf.truncate(old + n);
        self.clock.received(n);
        match read {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                let why = if late {
                    format!(
                        "(request not received whole within {} seconds, and coming slower than \
                         {} KiB/s)",
                        self.clock.whole().as_secs(),
                        crate::serve::MIN_RATE / 1024
                    )
                } else {
                    format!(
                        "({} second socket timeout reading input from client)",
                        self.timeout.as_secs()
                    )
                };
                Err(Stop::Fail(Failure::new(Code::Timeout, why)))
            }
            Err(e) => Err(Stop::Io(e)),
        }
    }

    /// The next line without its line end (LF or CRLF); `None` at the end.
    pub(super) async fn line(&mut self) -> Result<Option<Vec<u8>>, Stop> {
        // Bytes after `taken` already searched for a line end.
        let mut searched = 0;
        loop {
            let have = &self.buf[self.taken..];
            let found = memchr::memchr(b'\n', &have[searched..]);
            if found.map_or(have.len(), |lf| searched + lf) > MAX_LINE {
                return Err(Failure::protocol("(header line too long)").into());
            }
            if let Some(lf) = found {
                let mut line = have[..searched + lf].to_vec();
                self.taken += searched + lf + 1;
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(line));
            }
            searched = have.len();
            if self.fill().await? == 0 {
                return Ok(None);
            }
        }
    }

    /// The header lines up to the empty one.
    pub(super) async fn headers(&mut self) -> Result<Headers, Stop> {
        let mut headers = Headers::default();
        for _ in 0..=MAX_HEADERS {
            let Some(line) = self.line().await? else {
                return Err(Failure::protocol("(EOF during headers)").into());
            };
            if line.is_empty() {
                return Ok(headers);
            }
            headers.take(&line)?;
        }
        Err(Failure::protocol("(too many headers)").into())
    }

    /// Up to `limit` bytes more, and whether the client ended before;
    /// `None` once they pass what `held` can hold (each byte is held as it
    /// is taken).
    async fn up_to(
        &mut self,
        limit: u64,
        held: &mut Held,
    ) -> Result<Option<(Vec<u8>, bool)>, Stop> {
        let mut out = Vec::new();
        loop {
            let have = &self.buf[self.taken..];
            let want = (limit - out.len() as u64).min(have.len() as u64) as usize;
            if !held.at_least((out.len() + want) as u64) {
                return Ok(None);
            }
            out.extend_from_slice(&have[..want]);
            self.taken += want;
            if out.len() as u64 == limit {
                return Ok(Some((out, false)));
            }
            if self.fill().await? == 0 {
                return Ok(Some((out, true)));
            }
        }
    }

    /// Reads and drops up to `limit` bytes (all, without a limit), for at
    /// most the read timeout in all (less if the request's deadline comes
    /// first): the client's write completes, so it reads our answer rather
    /// than a reset, and nothing is kept.
    pub(super) async fn drop_up_to(&mut self, limit: Option<u64>) -> Result<(), Stop> {
        let until = Instant::now() + self.timeout;
        let mut left = limit.unwrap_or(u64::MAX);
        loop {
            let have = (self.buf.len() - self.taken) as u64;
            let n = have.min(left);
            self.taken += n as usize;
            left -= n;
            if left == 0 || Instant::now() >= until {
                return Ok(());
            }
            match self.fill().await {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(Stop::Fail(_)) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// The message: `Content-length` bytes (or all the client sends, up to
    /// the end), inflated when compressed; `None` when it is larger than
    /// `max` (it is then read and dropped, never kept).
    pub(super) async fn message(
        &mut self,
        headers: &Headers,
        max: u64,
        held: &mut Held,
    ) -> Result<Read, Stop> {
        if headers.compressed && headers.length.is_none() {
            return Err(
                Failure::new(Code::Unavailable, "Compress requires Content-length header").into(),
            );
        }
        // zlib may grow what does not compress by a few bytes per block.
        let limit = if headers.compressed {
            max.saturating_add(max / 1000 + 1024)
        } else {
            max
        };
        let body = match headers.length {
            Some(n) if n > limit => {
                self.drop_up_to(Some(n)).await?;
                return Ok(Read::TooLarge);
            }
            Some(n) => {
                let Some((body, ended)) = self.up_to(n, held).await? else {
                    // What was taken is dropped: given back before the
                    // rest is read and dropped too.
                    let rest = n.saturating_sub(held.bytes());
                    held.release();
                    self.drop_up_to(Some(rest)).await?;
                    return Ok(Read::Busy);
                };
                if ended {
                    return Err(Failure::protocol(format!(
                        "(Content-Length mismatch: Expected {n} bytes, got {} bytes)",
                        body.len()
                    ))
                    .into());
                }
                body
            }
            None => {
                let Some((body, ended)) = self.up_to(limit.saturating_add(1), held).await? else {
                    held.release();
                    self.drop_up_to(None).await?;
                    return Ok(Read::Busy);
                };
                if !ended {
                    drop(body);
                    held.release();
                    self.drop_up_to(None).await?;
                    return Ok(Read::TooLarge);
                }
                body
            }
        };
        if !headers.compressed {
            return Ok(Read::Message(body));
        }
        // Inflating megabytes is work for a blocking thread, not the
        // runtime's; what inflates past `max` stops there, and what it
        // inflates to is held as it comes (the hold goes with it).
        let mut moving = held.take();
        let inflated = tokio::task::spawn_blocking(move || {
            let mut raw = Vec::with_capacity(body.len().saturating_mul(3).min(max as usize));
            let mut decoder =
                flate2::bufread::ZlibDecoder::new(&body[..]).take(max.saturating_add(1));
            let mut chunk = vec![0u8; 64 * 1024];
            let read = loop {
                match decoder.read(&mut chunk) {
                    // Bytes after the stream's end are not part of the
                    // message: refused, as a stream that does not inflate
                    // is, rather than judged without them.
                    Ok(0) if decoder.limit() > 0 && !decoder.get_ref().get_ref().is_empty() => {
                        break Err(std::io::Error::other(format!(
                            "{} bytes after the end of the compressed stream",
                            decoder.get_ref().get_ref().len()
                        )));
                    }
                    Ok(0) => break Ok(Some(raw)),
                    Ok(n) => {
                        let held = body.len() as u64 + (raw.len() + n) as u64;
                        if !moving.at_least(held.min(body.len() as u64 + max)) {
                            break Ok(None);
                        }
                        raw.extend_from_slice(&chunk[..n]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            (read, moving)
        })
        .await
        .map_err(|_| Failure::new(Code::Software, "internal error while inflating"))?;
        let (read, moving) = inflated;
        *held = moving;
        let Some(raw) = read.map_err(|e| Failure::new(Code::Unavailable, format!("zlib: {e}")))?
        else {
            held.release();
            return Ok(Read::Busy);
        };
        Ok(if raw.len() as u64 <= max {
            Read::Message(raw)
        } else {
            Read::TooLarge
        })
    }
}

/// What [`Input::message`] read.
pub(super) enum Read {
    /// The message.
    Message(Vec<u8>),
    /// Larger than the size limit: read and dropped.
    TooLarge,
    /// More than the budget held could take: the rest read and dropped.
    Busy,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_parse_or_are_protocol_errors() {
        assert_eq!(
            request_line(b"PROCESS SPAMC/1.5").unwrap(),
            (Verb::Process, 1.5)
        );
        assert_eq!(
            request_line(b"REPORT_IFSPAM SPAMC/1.2").unwrap(),
            (Verb::ReportIfSpam, 1.2)
        );
        for bad in [
            &b"FROB SPAMC/1.5"[..],
            b"CHECK",
            b"CHECK SPAMD/1.5",
            b"CHECK SPAMC/x",
            b"CHECK SPAMC/1.5 more",
            b"check SPAMC/1.5",
            b"",
        ] {
            let e = request_line(bad).unwrap_err();
            assert_eq!(e.code, Code::Protocol, "{bad:?}");
        }
    }

    #[test]
    fn headers_are_checked_as_spamd_checks_them() {
        let mut h = Headers::default();
        for line in [
            &b"Content-length: 120"[..],
            b"User: alice@example.org",
            b"Compress: zlib",
            b"X-Unknown: whatever",
            b"Message-class: SPAM",
            b"Set: local, remote",
        ] {
            h.take(line).unwrap();
        }
        assert_eq!(h.length, Some(120));
        assert_eq!(h.user.as_deref(), Some("alice@example.org"));
        // The same again is the same; another name, class or length is
        // refused rather than one chosen.
        h.take(b"User: Alice@Example.org").unwrap();
        h.take(b"Message-class: spam").unwrap();
        h.take(b"Content-length: 120").unwrap();
        for other in [
            &b"User: mallory@example.org"[..],
            b"Message-class: ham",
            b"Content-length: 12",
        ] {
            let e = h.take(other).unwrap_err();
            assert_eq!(e.code, Code::Protocol, "{other:?}");
            assert!(e.text.contains("two different"), "{}", e.text);
        }
        assert_eq!(h.user.as_deref(), Some("alice@example.org"));
        assert!(h.compressed && h.set_local && !h.remove_local);
        assert_eq!(h.class, Some(Label::Spam));
        let long = format!("User: {}", "a".repeat(300));
        for bad in [
            &b"Content-length: 12x"[..],
            b"Content-length: ",
            b"Content-length: 99999999999999999999999",
            b"User: ../etc",
            b"User: a%b",
            b"User: a\xffb",
            long.as_bytes(),
            b"Message-class: eggs",
            b"Compress: gzip",
            b"no colon here",
        ] {
            let e = Headers::default().take(bad).unwrap_err();
            assert_eq!(e.code, Code::Protocol, "{}", String::from_utf8_lossy(bad));
        }
        // Each says what is wrong: a number too large is not "non-numeric",
        // an empty name is not quoted.
        let said = |line: &[u8]| Headers::default().take(line).unwrap_err().line();
        assert!(said(b"Content-length: 99999999999999999999999").contains("too large"));
        assert!(said(b"Content-length: 12x").contains("non-numeric"));
        assert!(
            said(b"User: ").contains("the name is empty"),
            "{}",
            said(b"User: ")
        );
    }
}
