//! The byte view's features: hashed byte 4-grams of the start of the raw
//! header block. Headers carry much of what tells spam (the route, the
//! mailer, the way fields are written) in forms that word tokens split or
//! miss, and byte n-grams see them without any parsing, so they hold up
//! against obfuscation and broken MIME. Hashing into a fixed number of
//! buckets keeps the feature space, and so the store, bounded; two 4-grams
//! sharing a bucket share its counts, which costs little at this size.
//!
//! The header block is the one [`crate::message::split_header`] finds. Line
//! ends are read as LF and a leading mbox envelope line is skipped, so a
//! message and its CRLF or mbox twin have the same features. Each line
//! gives at most [`LINE_BYTES`], so one huge field cannot blank out the
//! rest of the header block.

use crate::message::split_header;
use crate::vocab::BUCKET_BITS;

/// Bytes of the header block read, from its start.
pub const HEADER_BYTES: usize = 2000;

/// Bytes read from any one line of the header block.
pub const LINE_BYTES: usize = 256;

/// The sorted, distinct buckets of the byte 4-grams of the first
/// [`HEADER_BYTES`] bytes of `raw`'s header block, each line cut at
/// [`LINE_BYTES`].
///
/// ```
/// use bayesmail::features::grams::buckets;
/// let a = buckets(b"Subject: hi\n\nbody");
/// assert_eq!(a, buckets(b"Subject: hi\r\n\r\nother body"));
/// assert_eq!(a.len(), "Subject: hi".len() - 3);
/// ```
pub fn buckets(raw: &[u8]) -> Vec<u32> {
    let mut out: Vec<u32> = sample(raw)
        .windows(4)
        .map(|w| bucket(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    sort(&mut out);
    out.dedup();
    out
}

/// The distinct byte 4-grams behind [`buckets`], each with its bucket,
/// sorted by bucket and then by gram: what a bucket of this message stands
/// for, to show people (`explain`, `tokens`). Not on the scoring path.
///
/// ```
/// use bayesmail::features::grams::{buckets, grams};
/// let raw = b"Subject: hi\n\nbody";
/// let g = grams(raw);
/// assert!(g.iter().any(|(_, gram)| gram == b"Subj"));
/// let mut b: Vec<u32> = g.iter().map(|&(b, _)| b).collect();
/// b.dedup();
/// assert_eq!(b, buckets(raw));
/// ```
pub fn grams(raw: &[u8]) -> Vec<(u32, [u8; 4])> {
    let mut out: Vec<(u32, [u8; 4])> = sample(raw)
        .windows(4)
        .map(|w| {
            let gram = [w[0], w[1], w[2], w[3]];
            (bucket(u32::from_le_bytes(gram)), gram)
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The bytes the 4-grams are taken from: the first [`HEADER_BYTES`] of
/// `raw`'s header block, lines ending in LF, each cut at [`LINE_BYTES`].
fn sample(raw: &[u8]) -> Vec<u8> {
    let (head, _) = split_header(raw);
    let mut sample = Vec::with_capacity(HEADER_BYTES.min(head.len()));
    for line in head.split_inclusive(|&b| b == b'\n') {
        if sample.len() >= HEADER_BYTES {
            break;
        }
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        sample.extend_from_slice(&line[..line.len().min(LINE_BYTES)]);
        sample.push(b'\n');
    }
    sample.truncate(HEADER_BYTES);
    if sample.last() == Some(&b'\n') {
        sample.pop();
    }
    sample
}

/// Digits of [`sort`]: two passes cover a bucket number.
const DIGIT_BITS: u32 = BUCKET_BITS.div_ceil(2);

/// Sorts bucket numbers (< 2^[`BUCKET_BITS`]): a radix sort in two passes
/// of [`DIGIT_BITS`] bits, linear in the thousands of buckets every message
/// has, where a comparison sort is not; the result is the same.
fn sort(v: &mut Vec<u32>) {
    if v.len() < 64 {
        v.sort_unstable();
        return;
    }
    let mask = (1u32 << DIGIT_BITS) - 1;
    let mut other = vec![0u32; v.len()];
    for pass in 0..2 {
        let shift = pass * DIGIT_BITS;
        let mut at = [0usize; 1 << DIGIT_BITS];
        for &x in v.iter() {
            at[((x >> shift) & mask) as usize] += 1;
        }
        let mut sum = 0;
        for slot in at.iter_mut() {
            (*slot, sum) = (sum, sum + *slot);
        }
        for &x in v.iter() {
            let digit = ((x >> shift) & mask) as usize;
            other[at[digit]] = x;
            at[digit] += 1;
        }
        std::mem::swap(v, &mut other);
    }
}

/// Fibonacci hashing: the top bits of the 4-gram times 2^32/φ. Stable
/// across versions and platforms, since counts are stored by bucket.
fn bucket(gram: u32) -> u32 {
    gram.wrapping_mul(0x9E37_79B1) >> (32 - BUCKET_BITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_header_block_only_up_to_the_cap() {
        let with_body = buckets(b"A: 1\nB: 2\n\nbody words here\n");
        assert_eq!(with_body, buckets(b"A: 1\nB: 2\n"));
        assert_eq!(with_body, buckets(b"From x@y Mon\nA: 1\nB: 2\n\nz"));
        let mut long = b"X: ".to_vec();
        long.extend((0..10_000u32).flat_map(|i| i.to_le_bytes()));
        let capped = buckets(&long);
        assert_eq!(capped, buckets(&long[..LINE_BYTES]));
        assert!(capped.iter().all(|&b| b < 1 << BUCKET_BITS));
        let mut many: Vec<u8> = (0..1000u32)
            .flat_map(|i| format!("X-{i}: {}\n", i * 7919).into_bytes())
            .collect();
        let whole = many.clone();
        // Nothing past the cap counts.
        many.truncate(HEADER_BYTES + 50);
        assert_eq!(buckets(&whole), buckets(&many));
        many.truncate(HEADER_BYTES / 2);
        assert_ne!(buckets(&whole), buckets(&many));
        assert!(buckets(b"").is_empty() && buckets(b"abc").is_empty());
    }

    #[test]
    fn one_huge_field_does_not_hide_the_rest_of_the_header_block() {
        let rest = b"Received: from spam.example\nSubject: win\n";
        let mut long = b"X-Long: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 1 << 20));
        long.push(b'\n');
        let hidden = buckets(&[&long[..], rest].concat());
        let seen = buckets(rest);
        assert!(seen.iter().all(|b| hidden.binary_search(b).is_ok()));
        // The envelope line and the split are the message layer's.
        assert_eq!(buckets(b"A: 1\nnot a field\nB: 2\n"), buckets(b"A: 1\n"));
    }

    #[test]
    fn the_radix_sort_sorts() {
        let mut x: u32 = 12345;
        for len in [0, 1, 63, 64, 65, 2000] {
            let mut v: Vec<u32> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x >> (32 - BUCKET_BITS)
                })
                .chain([0, (1 << BUCKET_BITS) - 1])
                .collect();
            let mut expected = v.clone();
            expected.sort_unstable();
            sort(&mut v);
            assert_eq!(v, expected, "{len}");
        }
    }
}
