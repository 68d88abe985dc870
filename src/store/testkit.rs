//! What the tests of every [`Store`] share: everything a store shows
//! through the trait, deltas of small messages, and random sequences of
//! them, so that each store is held equal to [`super::MemoryStore`] by the
//! same property.

use proptest::prelude::*;

use super::Store;
use crate::model::{Delta, GaussStats, Label, TokenCounts, Totals};
use crate::vocab::{BUCKET_BITS, Feature, FeatureBuf};

/// Everything observable through the trait, for the digests `0..DIGESTS`.
#[derive(Debug, PartialEq)]
pub(crate) struct Dump {
    pub totals: Totals,
    pub tokens: Vec<(FeatureBuf, TokenCounts)>,
    pub token_count: u64,
    pub registry_len: u64,
    pub labels: Vec<Option<Label>>,
}

pub(crate) const DIGESTS: u8 = 6;

pub(crate) fn dump(store: &dyn Store) -> Dump {
    let mut tokens = Vec::new();
    store
        .for_each_token(&mut |t, c| tokens.push((t.into_owned(), c)))
        .unwrap();
    for (t, c) in &tokens {
        assert_eq!(store.token(t.as_feature()).unwrap(), *c);
    }
    let weights: Vec<(u32, TokenCounts)> = tokens
        .iter()
        .filter_map(|(t, c)| match t {
            FeatureBuf::Weight(b) => Some((*b, *c)),
            _ => None,
        })
        .collect();
    assert_eq!(store.weights().unwrap(), weights);
    Dump {
        totals: store.totals().unwrap(),
        tokens,
        token_count: store.token_count().unwrap(),
        registry_len: store.registry_len().unwrap(),
        labels: (0..DIGESTS)
            .map(|d| store.label_of(&[d; 32]).unwrap())
            .collect(),
    }
}

/// [`dump`] of everything but the online discriminative view's weights
/// (which depend on the order messages were learned in, and which
/// unlearning takes back only approximately).
pub(crate) fn counts_dump(store: &dyn Store) -> Dump {
    let mut d = dump(store);
    let before = d.tokens.len();
    d.tokens
        .retain(|(t, _)| !matches!(t, FeatureBuf::Weight(_)));
    d.token_count -= (before - d.tokens.len()) as u64;
    d
}

/// A delta learning (sign 1) or unlearning (sign −1) one message.
pub(crate) fn message(words: &[&str], label: Label, sign: i64, digest: u8, value: i128) -> Delta {
    let features: Vec<Feature> = words.iter().map(|w| Feature::Word(w)).collect();
    message_of(&features, label, sign, digest, value)
}

/// [`message`] of any features.
pub(crate) fn message_of(
    features: &[Feature],
    label: Label,
    sign: i64,
    digest: u8,
    value: i128,
) -> Delta {
    let c = label.index();
    let mut d = Delta::default();
    d.messages[c] = sign;
    for &f in features {
        d.change(f)[c] += sign;
    }
    for (k, g) in d.gauss[c].iter_mut().enumerate() {
        let x = value * (k as i128 + 1);
        *g = GaussStats {
            n: sign,
            sum: i128::from(sign) * x,
            sum_sq: i128::from(sign) * (x >> 60) * (x >> 60),
        };
    }
    d.registry.push(([digest; 32], (sign > 0).then_some(label)));
    d
}

// With buckets of the byte view (kept by number, in gram blocks), the
// last one among them, weights (kept after the buckets), and words
// spelled as a format keyed by name spells a bucket and a weight (words
// like any other).
pub(crate) const TOKENS: [Feature<'static>; 15] = [
    Feature::Gram(0),
    Feature::Gram(0xfff),
    Feature::Gram((1 << BUCKET_BITS) - 1),
    Feature::Weight(0),
    Feature::Weight((1 << BUCKET_BITS) - 1),
    Feature::Word("\u{1}00fff"),
    Feature::Word("\u{2}00fff"),
    Feature::Word("a"),
    Feature::Word("ab"),
    Feature::Word("b"),
    Feature::Word("SUBJ:free"),
    Feature::Word("URL:example.com"),
    Feature::Word("é"),
    Feature::Word("日本"),
    Feature::Word("zz"),
];

pub(crate) fn message_strategy() -> impl Strategy<Value = Delta> {
    (
        prop::sample::subsequence(TOKENS.to_vec(), 0..=4),
        prop::sample::select(Label::ALL.to_vec()),
        prop_oneof![3 => Just(1i64), 2 => Just(-1i64)],
        0..DIGESTS,
        any::<i64>(),
    )
        .prop_map(|(tokens, label, sign, digest, value)| {
            message_of(&tokens, label, sign, digest, i128::from(value) << 40)
        })
}

/// One to three messages learned or unlearned, merged into one delta.
pub(crate) fn delta_strategy() -> impl Strategy<Value = Delta> {
    prop::collection::vec(message_strategy(), 1..=3).prop_map(|messages| {
        let mut delta = Delta::default();
        for m in messages {
            delta.merge(m);
        }
        delta
    })
}

pub(crate) use super::redis_server::RedisServer;
