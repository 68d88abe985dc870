//! URL hosts as tokens: finding a URL's host, its parent domain, and the
//! `URL:` tokens a host gives.

use super::{MAX_TOKEN_LEN, TokenSet, URL_NAMESPACE};

/// Pushes `URL:host` and `URL:parent` (the registrable part as far as a
/// rule of thumb can tell: the last two labels, three under a two-letter
/// country code with a short second level such as `co.uk`). IP-address hosts
/// also give the token `URL:ip-address`. A host too long for a token gives
/// its parent only, and `URL:long-host` if that is too long as well.
pub fn push_host(sink: &mut TokenSet, host: &str) {
    let before = sink.len();
    let fits = |name: &str| URL_NAMESPACE.len() + name.len() <= MAX_TOKEN_LEN;
    sink.push(URL_NAMESPACE, host);
    if is_ip_like(host) {
        sink.push(URL_NAMESPACE, "ip-address");
    } else if let Some(parent) = parent_domain(host)
        && parent != host
        && fits(parent)
    {
        sink.push(URL_NAMESPACE, parent);
    } else if !fits(host) {
        sink.push(URL_NAMESPACE, "long-host");
    }
    sink.hosts += sink.len() - before;
}

/// The registrable-looking suffix of a host name.
pub fn parent_domain(host: &str) -> Option<&str> {
    // The last three dots, right to left: the last label ends the host,
    // the second last lies between the first two dots found.
    // A byte loop: host names are short, too short for a searcher to pay.
    let mut dots = (0..host.len())
        .rev()
        .filter(|&i| host.as_bytes()[i] == b'.');
    let last = dots.next()?;
    let second = dots.next();
    let third = dots.next();
    let country_code = second.is_some_and(|d| host.len() - last - 1 == 2 && last - d - 1 <= 3);
    let cut = if country_code { third } else { second };
    Some(cut.map_or(host, |d| &host[d + 1..]))
}

fn is_ip_like(host: &str) -> bool {
    host.bytes()
        .all(|b| b.is_ascii_hexdigit() || b == b'.' || b == b'x' || b == b':')
        && host.bytes().any(|b| b.is_ascii_digit())
        && (host.contains('.') || host.contains(':') || host.bytes().all(|b| b.is_ascii_digit()))
}

/// The host of a URL, normalised: lower-case, without user info, port,
/// trailing dot or a leading `www.`. `None` if there is no host.
///
/// ```
/// use bayesmail::tokenize::url_host;
/// assert_eq!(url_host("https://bob:pw@WWW.Example.COM:8080/a?b").as_deref(), Some("example.com"));
/// assert_eq!(url_host("www.example.org").as_deref(), Some("example.org"));
/// assert_eq!(url_host("mailto:x@example.com"), None);
/// ```
pub fn url_host(url: &str) -> Option<String> {
    let mut host = String::new();
    write_url_host(url, &mut host).then_some(host)
}

/// [`url_host`] into `out` (cleared first), so that a caller with many
/// links reuses one buffer; false if there is no host.
pub fn write_url_host(url: &str, out: &mut String) -> bool {
    out.clear();
    let Some(range) = host_range(url) else {
        return false;
    };
    let host = &url[range];
    // Only `W` lower-cases to `w`: stripping `www.` in any case before
    // lower-casing is stripping it after.
    let host = match host.get(..4) {
        Some(www) if www.eq_ignore_ascii_case("www.") => &host[4..],
        _ => host,
    };
    if host.is_ascii() {
        let valid = !host.is_empty()
            && host.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'%')
            });
        if valid {
            out.push_str(host);
            out.make_ascii_lowercase();
        }
        return valid;
    }
    // `str::to_lowercase`, final sigma and all: rare enough to allocate.
    out.push_str(&host.to_lowercase());
    let valid = out
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%'));
    if !valid {
        out.clear();
    }
    valid
}

/// Where the first `://` of `text` is: a byte search for `:` rather than
/// `str::find`'s substring searcher, whose set-up costs more than a link
/// takes to scan.
pub(super) fn find_scheme_end(text: &str) -> Option<usize> {
    memchr::memchr_iter(b':', text.as_bytes()).find(|&at| text[at..].starts_with("://"))
}

/// Where the host of a URL lies in it, before normalisation other than
/// dropping trailing dots.
pub(super) fn host_range(url: &str) -> Option<std::ops::Range<usize>> {
    let start = match find_scheme_end(url) {
        Some(p) => p + 3,
        None if url.len() > 4 && url.as_bytes()[..4].eq_ignore_ascii_case(b"www.") => 0,
        None => return None,
    };
    // Byte searches: every delimiter is ASCII, so each cut is at a
    // character boundary, and a link is too short for a searcher to pay.
    let upto = |text: &str, stop: fn(u8) -> bool| -> usize {
        text.bytes().position(stop).unwrap_or(text.len())
    };
    let rest = &url[start..];
    let authority = &rest[..upto(rest, |b| matches!(b, b'/' | b'?' | b'#' | b'\\'))];
    // After the last `@` (user info), up to the port or, for `[v6]`, the `]`.
    let host_port = authority
        .bytes()
        .rposition(|b| b == b'@')
        .map_or(0, |p| p + 1);
    let (from, host) = match authority[host_port..].strip_prefix('[') {
        Some(v6) => (host_port + 1, &v6[..upto(v6, |b| b == b']')]),
        None => {
            let host = &authority[host_port..];
            (host_port, &host[..upto(host, |b| b == b':')])
        }
    };
    let host = host.trim_end_matches('.');
    Some(start + from..start + from + host.len())
}
