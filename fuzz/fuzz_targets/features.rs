//! `Extractor::extract` on arbitrary bytes: the token set must be what the
//! models expect (sorted, unique, non-empty tokens of bounded length) and the
//! metadata finite.
#![no_main]

use bayesmail::features::Extractor;
use bayesmail::tokenize::MAX_TOKEN_LEN;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let blank = data.iter().all(u8::is_ascii_whitespace);
    let Ok(features) = Extractor::new().extract(data) else {
        assert!(blank, "non-blank input rejected");
        return;
    };
    let tokens: Vec<&str> = features.tokens.iter().collect();
    for token in &tokens {
        assert!(!token.is_empty(), "empty token");
        assert!(token.len() <= MAX_TOKEN_LEN, "token too long: {token:?}");
    }
    for pair in tokens.windows(2) {
        assert!(pair[0] < pair[1], "unsorted or repeated: {pair:?}");
    }
    for value in features.metadata.0 {
        assert!(
            value.is_finite(),
            "metadata not finite: {:?}",
            features.metadata
        );
    }
});
