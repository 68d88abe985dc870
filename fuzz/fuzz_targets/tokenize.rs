//! The analyzer on arbitrary text: every token carries the namespace it was
//! asked for (or the URL one), is non-empty and bounded, and the finished set
//! is sorted and unique.
#![no_main]

use bayesmail::tokenize::{Analyzer, MAX_TOKEN_LEN, TokenSet};
use bayesmail::vocab::URL_NAMESPACE;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let mut analyzer = Analyzer::new();
    let mut set = TokenSet::default();
    for namespace in ["", "SUBJ:"] {
        analyzer.tokenize(text, namespace, &mut set);
        let list = set.finish();
        let tokens: Vec<&str> = list.iter().collect();
        for token in &tokens {
            assert!(!token.is_empty(), "empty token");
            assert!(token.len() <= MAX_TOKEN_LEN, "token too long: {token:?}");
            assert!(
                token.starts_with(namespace) || token.starts_with(URL_NAMESPACE),
                "token {token:?} outside namespace {namespace:?}"
            );
        }
        for pair in tokens.windows(2) {
            assert!(pair[0] < pair[1], "unsorted or repeated: {pair:?}");
        }
        assert!(set.is_empty(), "finish left tokens behind");
    }
});
