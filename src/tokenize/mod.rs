//! Text to tokens: tantivy's tokenizer pipeline, a tokenizer that splits on
//! Unicode word boundaries (UAX #29, from unicode-segmentation), cuts runs
//! of CJK, Thai and the other scripts written without spaces into
//! overlapping pairs of characters, keeps URLs whole and lower-cases each
//! word as it copies it out, followed by filters
//! that reduce URLs to their host, turn numbers into shapes and drop
//! over-long tokens. It is composed as `TextAnalyzer::builder` composes it,
//! but kept with its concrete type rather than boxed into a `TextAnalyzer`
//! (a test holds the two to the same tokens). Invisible characters
//! (zero-width spaces, soft hyphens, bidi controls) are removed before
//! splitting, so `vi\u{200b}agra` is one word.
//!
//! This module owns tantivy; no tantivy type leaves it. It knows nothing of
//! messages: [`crate::features`] decides which text goes in under which
//! namespace.

mod set;
mod url;
mod words;

use tantivy::tokenizer::{Token, TokenFilter, TokenStream, Tokenizer};

use crate::vocab::URL_NAMESPACE;
use set::key_at;
pub use set::{TokenList, TokenSet};
use url::{find_scheme_end, host_range};
pub use url::{parent_domain, push_host, url_host, write_url_host};
pub use words::MailWordTokenizer;

/// Longest token, in bytes, namespace included. Longer ones are dropped.
pub const MAX_TOKEN_LEN: usize = 48;
/// Longest namespace prefix (`FROMDOM:`).
pub(crate) const MAX_NAMESPACE_LEN: usize = 8;

/// The tokenizer pipeline. Cheap to create; not shareable across threads
/// (tantivy's token streams borrow it mutably), so each worker owns one.
#[derive(Clone)]
pub struct Analyzer {
    pipeline: Pipeline,
}

/// The pipeline with its type spelled out: what `TextAnalyzer::builder`
/// composes, before `build` boxes it. Kept unboxed, each text costs no
/// boxed stream and each token no dynamic call, and the filters inline
/// into the loop of [`Analyzer::tokenize`].
type Pipeline = MapFilterWrapper<
    MapFilterWrapper<MapFilterWrapper<MailWordTokenizer, UrlToHost>, NumberShape>,
    LengthLimit,
>;

impl Default for Analyzer {
    fn default() -> Self {
        Self::new()
    }
}

impl Analyzer {
    /// Builds the pipeline: lower-cased words → URL hosts → number shapes →
    /// length limit.
    pub fn new() -> Self {
        let words = MailWordTokenizer::default();
        let hosts = MapFilter(UrlToHost).transform(words);
        let shapes = MapFilter(NumberShape).transform(hosts);
        Analyzer {
            pipeline: MapFilter(LengthLimit).transform(shapes),
        }
    }

    /// Tokenizes `text`, pushing each word into `sink` under `namespace`.
    /// URL hosts go in under [`URL_NAMESPACE`] whatever the namespace, each
    /// with its parent domain. Returns the number of URLs seen.
    ///
    /// ```
    /// use bayesmail::tokenize::{Analyzer, TokenSet};
    /// let mut set = TokenSet::default();
    /// Analyzer::new().tokenize("Win $1,000 at HTTP://WWW.Lucky.Example.com/x now", "", &mut set);
    /// assert_eq!(
    ///     set.finish().to_vec(),
    ///     ["#,###", "URL:example.com", "URL:lucky.example.com", "at", "now", "win"]
    /// );
    /// ```
    pub fn tokenize(&mut self, text: &str, namespace: &str, sink: &mut TokenSet) -> usize {
        let mut urls = 0;
        let namespace_key = key_at(namespace.as_bytes(), 0);
        let mut stream = self.pipeline.token_stream(text);
        while stream.advance() {
            let token = stream.token();
            // Words are lower-cased, so a first byte other than `U` tells
            // most tokens from the URL filter's at one look.
            if token.text.starts_with('U')
                && let Some(host) = token.text.strip_prefix(URL_NAMESPACE)
            {
                urls += 1;
                push_host(sink, host);
            } else {
                match stream.word_keys() {
                    Some(keys) => sink.push_keyed(namespace, namespace_key, &token.text, keys),
                    None => sink.push(namespace, &token.text),
                }
            }
        }
        urls
    }
}

/// Filter: a URL token (`scheme://…` or `www.…`) becomes `URL:host`. For
/// the tokens that pass [`UrlToHost`]'s first look.
#[inline(never)]
fn url_to_host(token: &mut Token) -> bool {
    let text = &token.text;
    let is_url =
        find_scheme_end(text).is_some() || (text.starts_with("www.") && text[4..].contains('.'));
    if !is_url {
        return true;
    }
    let Some(range) = host_range(text) else {
        return false;
    };
    let host = &text[range.clone()];
    if !host.is_ascii() {
        return match url_host(text) {
            Some(host) => {
                token.text.clear();
                token.text.push_str(URL_NAMESPACE);
                token.text.push_str(&host);
                true
            }
            None => false,
        };
    }
    // ASCII: what url_host does, in place.
    let skip = if host.len() >= 4 && host.as_bytes()[..4].eq_ignore_ascii_case(b"www.") {
        4
    } else {
        0
    };
    let host = &host[skip..];
    let valid = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'%'));
    if !valid {
        return false;
    }
    token.text.truncate(range.end);
    token
        .text
        .replace_range(..range.start + skip, URL_NAMESPACE);
    token.text[URL_NAMESPACE.len()..].make_ascii_lowercase();
    true
}

/// Filter: a token made of digits and number punctuation becomes its shape,
/// every digit replaced by `#` (`$1,000.50` → `#,###.##`): prices and dates
/// tell more by their form than by their value. Returns whether it did.
#[inline(never)]
fn number_shape(token: &mut Token) -> bool {
    // One pass: a letter (or anything else) ends the look at once.
    let mut digits = false;
    for &b in token.text.as_bytes() {
        match b {
            b'0'..=b'9' => digits = true,
            b'.' | b',' | b':' | b';' | b'\'' | b'_' => {}
            _ => return false,
        }
    }
    if digits {
        // SAFETY: ASCII digits become an ASCII byte, so the text stays
        // UTF-8 (and is not checked again: it is a hot path).
        let bytes = unsafe { token.text.as_bytes_mut() };
        for b in bytes.iter_mut().filter(|b| b.is_ascii_digit()) {
            *b = b'#';
        }
    }
    digits
}

/// What a [`Rewrite`] did to a token.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rewritten {
    /// Left it as it was.
    Kept,
    /// Changed its text.
    Changed,
    /// Dropped it.
    Dropped,
}

impl Rewritten {
    /// A filter's answer for a token it may have changed: kept if `keep`.
    fn changed_unless_dropped(keep: bool) -> Rewritten {
        if keep {
            Rewritten::Changed
        } else {
            Rewritten::Dropped
        }
    }
}

/// A rewrite of one token, in place.
trait Rewrite: Clone + Send + Sync + 'static {
    fn rewrite(&self, token: &mut Token) -> Rewritten;
}

/// [`url_to_host`] as a [`Rewrite`].
#[derive(Clone, Copy)]
struct UrlToHost;

impl Rewrite for UrlToHost {
    #[inline(always)]
    fn rewrite(&self, token: &mut Token) -> Rewritten {
        // The tokenizer keeps `scheme://` only for http, https and ftp,
        // lower-cased, so URL tokens start with one of those or `www.`: a
        // look at four bytes, false for almost every token (so the branch
        // is predicted), sends the rest on unchanged.
        let text = token.text.as_bytes();
        if text.len() < 8 || !matches!(&text[..4], b"http" | b"ftp:" | b"www.") {
            return Rewritten::Kept;
        }
        // Counted as changed even when it is not a URL: rare, and safe.
        Rewritten::changed_unless_dropped(url_to_host(token))
    }
}

/// [`number_shape`] as a [`Rewrite`].
#[derive(Clone, Copy)]
struct NumberShape;

impl Rewrite for NumberShape {
    #[inline(always)]
    fn rewrite(&self, token: &mut Token) -> Rewritten {
        // Only a token starting with a digit or `_` can be a number.
        if token
            .text
            .as_bytes()
            .first()
            .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
            && number_shape(token)
        {
            return Rewritten::Changed;
        }
        Rewritten::Kept
    }
}

/// The length limit of the pipeline, as tantivy's `RemoveLongFilter` has
/// it (tokens of fewer bytes than the limit are kept): words that leave
/// room for the longest namespace within [`MAX_TOKEN_LEN`].
#[derive(Clone, Copy)]
struct LengthLimit;

impl Rewrite for LengthLimit {
    #[inline(always)]
    fn rewrite(&self, token: &mut Token) -> Rewritten {
        // A URL host too long to be a token still gives its parent domain
        // ([`push_host`] applies the limit to each).
        if token.text.len() <= MAX_TOKEN_LEN - MAX_NAMESPACE_LEN
            || token.text.starts_with(URL_NAMESPACE)
        {
            Rewritten::Kept
        } else {
            Rewritten::Dropped
        }
    }
}

/// A token filter from a [`Rewrite`]. Generic over it (each rewrite its
/// own type, not a `fn` pointer) so each filter inlines into the stream's
/// loop, and the pipeline's type can be named.
#[derive(Clone, Copy)]
struct MapFilter<F>(F);

impl<F: Rewrite> TokenFilter for MapFilter<F> {
    type Tokenizer<T: Tokenizer> = MapFilterWrapper<T, F>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> MapFilterWrapper<T, F> {
        MapFilterWrapper {
            f: self.0,
            inner: tokenizer,
        }
    }
}

#[derive(Clone)]
struct MapFilterWrapper<T, F> {
    f: F,
    inner: T,
}

impl<T: Tokenizer, F: Rewrite> Tokenizer for MapFilterWrapper<T, F> {
    type TokenStream<'a> = MapFilterStream<T::TokenStream<'a>, F>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        MapFilterStream {
            f: self.f.clone(),
            tail: self.inner.token_stream(text),
            changed: false,
        }
    }
}

struct MapFilterStream<S, F> {
    f: F,
    tail: S,
    /// Whether the rewrite changed the current token.
    changed: bool,
}

impl<S: TokenStream, F: Rewrite> TokenStream for MapFilterStream<S, F> {
    fn advance(&mut self) -> bool {
        while self.tail.advance() {
            match self.f.rewrite(self.tail.token_mut()) {
                Rewritten::Kept => self.changed = false,
                Rewritten::Changed => self.changed = true,
                Rewritten::Dropped => continue,
            }
            return true;
        }
        false
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

/// A token stream of the pipeline, which passes on the keys the word
/// stream read off a word ([`MailWordStream::word_keys`]) for as long as
/// no filter has changed the word, so a token set need not read them
/// again. Only the pipeline's own filters sit between the two, and each
/// says when it changed a token.
trait KeyedStream: TokenStream {
    /// The keys of the current token's text, if known.
    fn word_keys(&self) -> Option<[u64; 2]>;
}

impl KeyedStream for words::MailWordStream<'_> {
    #[inline(always)]
    fn word_keys(&self) -> Option<[u64; 2]> {
        words::MailWordStream::word_keys(self)
    }
}

impl<S: KeyedStream, F: Rewrite> KeyedStream for MapFilterStream<S, F> {
    #[inline(always)]
    fn word_keys(&self) -> Option<[u64; 2]> {
        if self.changed {
            None
        } else {
            self.tail.word_keys()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_hosts_are_counted_as_they_arrive() {
        let mut set = TokenSet::default();
        let text = "see http://a.example.com/x, http://A.example.com/y and http://10.0.0.1/ \
            or www.b.example.com";
        assert_eq!(Analyzer::new().tokenize(text, "", &mut set), 4);
        push_host(&mut set, "c.example.org");
        push_host(&mut set, "c.example.org");
        set.push("", "url");
        // a.example.com, example.com, 10.0.0.1, ip-address, b.example.com,
        // c.example.org, example.org.
        assert_eq!(set.url_hosts(), 7);
        let list = set.finish();
        assert_eq!(list.count_prefixed(URL_NAMESPACE), 7);
        assert_eq!(set.url_hosts(), 0);
    }

    /// The pipeline as a tantivy `TextAnalyzer`, built the usual way.
    fn text_analyzer() -> tantivy::tokenizer::TextAnalyzer {
        tantivy::tokenizer::TextAnalyzer::builder(MailWordTokenizer::default())
            .filter(MapFilter(UrlToHost))
            .filter(MapFilter(NumberShape))
            .filter(MapFilter(LengthLimit))
            .build()
    }

    fn tokens(text: &str) -> Vec<String> {
        let mut set = TokenSet::default();
        Analyzer::new().tokenize(text, "", &mut set);
        set.finish().to_vec()
    }

    #[test]
    fn words_are_lowercased_and_deduplicated() {
        assert_eq!(tokens("Hello hello HELLO wörld Wörld"), ["hello", "wörld"]);
    }

    #[test]
    fn invisible_characters_do_not_split_or_hide_words() {
        assert_eq!(
            tokens("vi\u{200b}agra c\u{ad}ialis \u{202e}free\u{202c}"),
            ["cialis", "free", "viagra"]
        );
    }

    #[test]
    fn urls_become_hosts_with_parents() {
        assert_eq!(
            tokens(
                "see https://a.b.example.co.uk:8080/p?q=1, http://192.168.0.1/x and www.shop.example"
            ),
            [
                "URL:192.168.0.1",
                "URL:a.b.example.co.uk",
                "URL:example.co.uk",
                "URL:ip-address",
                "URL:shop.example",
                "and",
                "see"
            ]
        );
    }

    #[test]
    fn numbers_become_shapes() {
        assert_eq!(
            tokens("call 555-1234 or 1,000.50 on 12:30 4u"),
            ["##", "###", "####", "#,###.##", "4u", "call", "on", "or"]
        );
    }

    #[test]
    fn long_tokens_are_dropped() {
        let long = "a".repeat(MAX_TOKEN_LEN);
        assert_eq!(tokens(&format!("short {long}")), ["short"]);
    }

    #[test]
    fn namespaces_prefix_words_but_not_urls() {
        let mut set = TokenSet::default();
        let urls = Analyzer::new().tokenize("Free http://x.example/", "SUBJ:", &mut set);
        assert_eq!(urls, 1);
        assert_eq!(set.finish().to_vec(), ["SUBJ:free", "URL:x.example"]);
    }

    proptest::proptest! {
        /// The set keeps each token once and finishes in byte order, however
        /// a token is split into namespace and word (namespaces of up to 8
        /// bytes are shifted into the keys, longer ones joined first), and
        /// whatever its bytes (NULs and multi-byte characters included).
        #[test]
        fn token_sets_are_sorted_and_deduplicated(
            pushes in proptest::collection::vec(
                ("(|A:|AB:|A|ABCDEFG:|ABCDEFGHIJ:)", "[ab\\x00é]{0,24}"),
                0..64,
            )
        ) {
            let mut set = TokenSet::default();
            let mut expected = std::collections::BTreeSet::new();
            for _ in 0..2 {
                for (namespace, word) in &pushes {
                    set.push(namespace, word);
                    if !word.is_empty() && namespace.len() + word.len() <= MAX_TOKEN_LEN {
                        expected.insert(format!("{namespace}{word}"));
                    }
                }
                proptest::prop_assert_eq!(set.len(), expected.len());
                let list = set.finish();
                proptest::prop_assert_eq!(list.to_vec(), expected.iter().cloned().collect::<Vec<_>>());
                expected.clear();
            }
        }
    }

    #[test]
    fn token_lists_search_and_serialise() {
        let list = TokenList::from_tokens(["b", "a", "c", "a"]);
        assert_eq!(list.to_vec(), ["a", "b", "c"]);
        assert!(list.contains("b") && !list.contains("d") && !list.contains(""));
        assert_eq!(serde_json::to_string(&list).unwrap(), r#"["a","b","c"]"#);
        assert!(TokenList::default().is_empty());
        // Equal token lists are equal and hash alike however their text is
        // laid out (a set keeps its tokens in arrival order).
        let mut set = TokenSet::default();
        for t in ["c", "a", "b", "a"] {
            set.push("", t);
        }
        let from_set = set.finish();
        assert_eq!(from_set, list);
        let hasher = std::collections::hash_map::RandomState::new();
        use std::hash::BuildHasher;
        assert_eq!(hasher.hash_one(&from_set), hasher.hash_one(&list));
        assert_ne!(TokenList::from_tokens(["a", "b"]), list);
    }

    #[test]
    fn url_hosts_of_non_ascii_targets_do_not_panic() {
        assert_eq!(url_host("abcé"), None);
        assert_eq!(url_host("wwwé.x"), None);
        assert_eq!(url_host("www.exämple.org").as_deref(), Some("exämple.org"));
    }

    /// The rule as first written, to check the allocation-free one against.
    fn parent_domain_reference(host: &str) -> Option<&str> {
        let labels: Vec<&str> = host.rsplitn(4, '.').collect();
        if labels.len() < 2 {
            return None;
        }
        let keep = if labels.len() >= 3 && labels[0].len() == 2 && labels[1].len() <= 3 {
            3
        } else {
            2
        };
        let suffix_len: usize = labels[..keep].iter().map(|l| l.len()).sum::<usize>() + keep - 1;
        Some(&host[host.len() - suffix_len..])
    }

    proptest::proptest! {
        /// Counting by binary search counts what a scan counts.
        #[test]
        fn prefixed_tokens_are_counted(
            tokens in proptest::collection::vec("(|U|UR|URL|URL:|URM|T)[:a-z]{0,3}", 0..24),
            prefix in "(|U|URL:|URL:a|T:|x)",
        ) {
            let list = TokenList::from_tokens(&tokens);
            let scanned = list.iter().filter(|t| t.starts_with(&prefix)).count();
            proptest::prop_assert_eq!(list.count_prefixed(&prefix), scanned);
        }

        #[test]
        fn parent_domain_matches_the_reference(host in "[a-zé]{0,4}(\\.[a-zé]{0,4}){0,5}") {
            proptest::prop_assert_eq!(parent_domain(&host), parent_domain_reference(&host));
        }

        /// The boxed `TextAnalyzer` and the unboxed pipeline are one
        /// pipeline: they give the same tokens.
        #[test]
        fn text_analyzer_is_the_pipeline(
            text in "([a-zA-Z0-9_.,;:'/ é東-]|https?://|www\\.|\\$1,000|\n){0,60}"
        ) {
            let mut analyzer = Analyzer::new();
            let mut stream = analyzer.pipeline.token_stream(&text);
            let mut unboxed = Vec::new();
            while let Some(token) = stream.next() {
                unboxed.push(token.text.clone());
            }
            let mut boxed = Vec::new();
            let mut text_analyzer = text_analyzer();
            let mut stream = text_analyzer.token_stream(&text);
            while let Some(token) = stream.next() {
                boxed.push(token.text.clone());
            }
            proptest::prop_assert_eq!(unboxed, boxed);
        }

        /// The keys the word stream reads off a word, and passes through
        /// the filters that left it alone, are the keys of the token's
        /// text; an ASCII word that no filter changes has them.
        #[test]
        fn streamed_keys_are_the_tokens_keys(
            text in "([a-zA-Z0-9_.,;:'/ é東-]|https?://|www\\.|\\$1,000|[a-z]{9,20}|\n){0,60}"
        ) {
            let mut analyzer = Analyzer::new();
            let mut stream = analyzer.pipeline.token_stream(&text);
            while stream.advance() {
                let word = stream.token().text.as_bytes();
                match stream.word_keys() {
                    Some(keys) => {
                        proptest::prop_assert_eq!(keys, [key_at(word, 0), key_at(word, 8)]);
                    }
                    // Only the URL filter looks at (and may count as
                    // changed) a word of lower-case letters.
                    None => proptest::prop_assert!(
                        !text.is_ascii()
                            || !word.iter().all(u8::is_ascii_lowercase)
                            || word.starts_with(b"http")
                            || word.starts_with(b"www"),
                        "{:?} had no keys",
                        stream.token().text
                    ),
                }
            }
        }

        /// The in-place URL filter gives what `url_host` gives.
        #[test]
        fn url_filter_matches_url_host(
            url in "(http://|https://|ftp://|www\\.|WWW\\.|wwW\\.)[a-zA-Z0-9.@:/?#_%é\\[\\]\\\\-]{0,24}"
        ) {
            let mut token = Token { text: url.clone(), ..Token::default() };
            let kept = UrlToHost.rewrite(&mut token) != Rewritten::Dropped;
            let is_url = url.contains("://") || (url.starts_with("www.") && url[4..].contains('.'));
            // The filter runs after lower-casing: it looks only at lower-case
            // schemes and `www.`.
            let lower_start = ["http", "ftp:", "www."].iter().any(|p| url.starts_with(p));
            let expected = if url.len() < 8 || !is_url || !lower_start {
                Some(url.clone())
            } else {
                url_host(&url).map(|h| format!("{URL_NAMESPACE}{h}"))
            };
            proptest::prop_assert_eq!(kept.then_some(token.text), expected);
        }
    }

    #[test]
    fn parent_domains() {
        assert_eq!(parent_domain("a.b.example.com"), Some("example.com"));
        assert_eq!(parent_domain("mail.example.co.uk"), Some("example.co.uk"));
        assert_eq!(parent_domain("example.com"), Some("example.com"));
        assert_eq!(parent_domain("localhost"), None);
    }
}
