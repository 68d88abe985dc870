//! How a file format that keys every feature by a name spells it: a word
//! as its UTF-8 bytes, a bucket of the byte view as U+0001 (a control
//! character no word token contains) and the bucket in five lower-case hex
//! digits. The journal's entries are written so; count stores of format 1
//! and model files of versions 2 and 3 were, and are still read.
//!
//! Nowhere else is a bucket a name: features are typed ([`Feature`]) from
//! extraction on, the count store keeps buckets in blocks by number and
//! the model file (from version 4) in a table indexed by bucket.

use crate::vocab::{Feature, is_bucket};

/// The first byte of every bucket's name.
const GRAM_PREFIX: u8 = 0x01;

/// A bucket's name, spelled without allocating.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GramName([u8; 6]);

impl GramName {
    /// The name of `bucket` (a bucket: [`is_bucket`]; the digits of a
    /// larger number past the fifth are lost).
    pub fn of(bucket: u32) -> GramName {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut name = [GRAM_PREFIX; 6];
        for (i, slot) in name[1..].iter_mut().enumerate() {
            *slot = HEX[(bucket >> (4 * (4 - i)) & 0xf) as usize];
        }
        GramName(name)
    }

    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        // ASCII by construction.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The bucket `name` stands for, if it is exactly what [`GramName`] spells
/// for a bucket: the inverse of [`GramName::of`].
pub(crate) fn bucket_of(name: &[u8]) -> Option<u32> {
    let hex = name.strip_prefix(&[GRAM_PREFIX])?;
    if hex.len() != 5 || !hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let bucket = hex.iter().fold(0u32, |n, &b| {
        (n << 4) | char::from(b).to_digit(16).unwrap_or(0)
    });
    is_bucket(bucket).then_some(bucket)
}

/// The feature a name stands for: the bucket it spells, else the word.
pub(crate) fn feature_of(name: &str) -> Feature<'_> {
    match bucket_of(name.as_bytes()) {
        Some(bucket) => Feature::Gram(bucket),
        None => Feature::Word(name),
    }
}

/// Whether a format keyed by name can hold `feature`: a bucket, or a word
/// that does not spell one (it would read back as the bucket). A weight
/// of the online discriminative view has no name: the formats that hold
/// weights keep them by bucket.
pub(crate) fn has_name(feature: Feature<'_>) -> bool {
    match feature {
        Feature::Word(word) => bucket_of(word.as_bytes()).is_none(),
        Feature::Gram(bucket) => is_bucket(bucket),
        Feature::Weight(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::BUCKET_BITS;

    #[test]
    fn bucket_names_round_trip_and_nothing_else_is_one() {
        assert_eq!(GramName::of(0x3_a0f1).as_str(), "\u{1}3a0f1");
        assert_eq!(GramName::of(0x1f).as_str(), "\u{1}0001f");
        assert_ne!(GramName::of(1).as_str(), GramName::of(16).as_str());
        for b in [0, 1, 0x1f, 0x3_a0f1, (1 << BUCKET_BITS) - 1] {
            let name = GramName::of(b);
            assert_eq!(bucket_of(name.as_str().as_bytes()), Some(b));
            assert_eq!(feature_of(name.as_str()), Feature::Gram(b));
            assert!(has_name(Feature::Gram(b)));
        }
        for name in [
            "",
            "\u{1}",
            "\u{1}0001",
            "\u{1}000001",
            "\u{1}4_000",
            "\u{1}40000",
            "\u{1}fffff",
            "\u{1}0001F",
            "\u{1}3A0F1",
            "+0001f",
            "free",
        ] {
            assert_eq!(bucket_of(name.as_bytes()), None, "{name:?}");
            assert_eq!(feature_of(name), Feature::Word(name));
            assert!(has_name(Feature::Word(name)));
        }
        assert!(!has_name(Feature::Word("\u{1}0001f")));
        assert!(!has_name(Feature::Gram(1 << BUCKET_BITS)));
    }
}
