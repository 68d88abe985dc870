//! Byte and substring search over message bytes: the `memchr` crate's
//! vector routines, at the vector width every processor of the target has.
//!
//! The crate's top-level functions pick the widest instructions the
//! running processor offers, and finding that out takes a handful of
//! `cpuid` instructions on the first search of a process. Under
//! virtualisation each `cpuid` traps to the host, so for a one-message
//! `filter` that probe costs more than the widest instructions save on the
//! few kilobytes of one message. On x86-64 this module therefore uses SSE2
//! (part of the architecture, nothing to probe); elsewhere the crate's own
//! functions, which probe nothing there (AArch64's vectors are likewise
//! part of the architecture). Nothing else in the library calls `memchr`.
//!
//! Owns: what to search with. Not: what is searched for (the callers).

// The crate's probing functions are called here only where they probe
// nothing: off x86-64, and on x86-64 after SSE2 was refused, which never
// happens (clippy.toml keeps them out of every other module).
#![allow(clippy::disallowed_methods)]

#[cfg(target_arch = "x86_64")]
use memchr::arch::x86_64::sse2::{memchr as simd, packedpair};

/// Where the first `needle` is in `haystack`.
///
/// ```
/// assert_eq!(bayesmail::find::byte(b'\n', b"ab\ncd\n"), Some(2));
/// assert_eq!(bayesmail::find::byte(b'x', b"ab"), None);
/// ```
#[inline]
pub fn byte(needle: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(one) = simd::One::new(needle) {
        return one.find(haystack);
    }
    memchr::memchr(needle, haystack)
}

/// Where the last `needle` is in `haystack`.
///
/// ```
/// assert_eq!(bayesmail::find::byte_rev(b';', b"a;b;c"), Some(3));
/// ```
#[inline]
pub fn byte_rev(needle: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(one) = simd::One::new(needle) {
        return one.rfind(haystack);
    }
    memchr::memrchr(needle, haystack)
}

/// Where the first of `a` or `b` is in `haystack`.
///
/// ```
/// assert_eq!(bayesmail::find::either(b'<', b'&', b"x &lt; <b>"), Some(2));
/// ```
#[inline]
pub fn either(a: u8, b: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(two) = simd::Two::new(a, b) {
        return two.find(haystack);
    }
    memchr::memchr2(a, b, haystack)
}

/// Every position of `needle` in `haystack`, in order.
///
/// ```
/// let at: Vec<usize> = bayesmail::find::all(b'\n', b"a\nb\n").collect();
/// assert_eq!(at, [1, 3]);
/// ```
pub fn all(needle: u8, haystack: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut from = 0;
    std::iter::from_fn(move || {
        let at = from + byte(needle, &haystack[from..])?;
        from = at + 1;
        Some(at)
    })
}

/// Every position of any of `a`, `b` or `c` in `haystack`, in order.
///
/// ```
/// let at: Vec<usize> = bayesmail::find::all_of3(b'a', b'b', b'c', b"xaybzc").collect();
/// assert_eq!(at, [1, 3, 5]);
/// ```
pub fn all_of3(a: u8, b: u8, c: u8, haystack: &[u8]) -> impl Iterator<Item = usize> + '_ {
    #[cfg(target_arch = "x86_64")]
    let three = simd::Three::new(a, b, c);
    let mut from = 0;
    std::iter::from_fn(move || {
        let rest = &haystack[from..];
        #[cfg(target_arch = "x86_64")]
        let found = match &three {
            Some(three) => three.find(rest),
            None => memchr::memchr3(a, b, c, rest),
        };
        #[cfg(not(target_arch = "x86_64"))]
        let found = memchr::memchr3(a, b, c, rest);
        let at = from + found?;
        from = at + 1;
        Some(at)
    })
}

/// Where the first `needle` is in `haystack`, for a needle searched for
/// once. A needle searched for in many haystacks is built once as a
/// [`Finder`].
///
/// ```
/// assert_eq!(bayesmail::find::seq(b"-->", b"<!-- x -->"), Some(7));
/// ```
pub fn seq(needle: &[u8], haystack: &[u8]) -> Option<usize> {
    Finder::new(needle).find(haystack)
}

/// A substring searcher for one needle.
///
/// Needles of up to 32 bytes are searched for with a vector pass over two
/// of their bytes, each candidate checked in full, as the `memchr` crate
/// does for them; longer needles, and haystacks too short for a vector,
/// with the Two-Way algorithm, linear in the haystack whatever it holds.
///
/// ```
/// let boundary = bayesmail::find::Finder::new(b"--frontier");
/// assert_eq!(boundary.find(b"preamble\n--frontier\n"), Some(9));
/// assert_eq!(boundary.find(b"--frontie"), None);
/// ```
#[derive(Debug, Clone)]
pub struct Finder<'n> {
    needle: &'n [u8],
    #[cfg(target_arch = "x86_64")]
    packed: Option<packedpair::Finder>,
    #[cfg(target_arch = "x86_64")]
    twoway: memchr::arch::all::twoway::Finder,
    #[cfg(not(target_arch = "x86_64"))]
    finder: memchr::memmem::Finder<'n>,
}

/// The longest needle searched for with the vector pass alone (as the
/// `memchr` crate does: beyond it, checking each candidate in full costs
/// more than Two-Way's guarantee).
#[cfg(target_arch = "x86_64")]
const PACKED_MAX: usize = 32;

impl<'n> Finder<'n> {
    /// A searcher for `needle`.
    pub fn new(needle: &'n [u8]) -> Finder<'n> {
        Finder {
            needle,
            #[cfg(target_arch = "x86_64")]
            packed: if needle.len() <= PACKED_MAX {
                packedpair::Finder::new(needle)
            } else {
                None
            },
            #[cfg(target_arch = "x86_64")]
            twoway: memchr::arch::all::twoway::Finder::new(needle),
            #[cfg(not(target_arch = "x86_64"))]
            finder: memchr::memmem::Finder::new(needle),
        }
    }

    /// Where the first occurrence of the needle is in `haystack`.
    pub fn find(&self, haystack: &[u8]) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        {
            match self.needle {
                [] => Some(0),
                [b] => byte(*b, haystack),
                _ => match &self.packed {
                    Some(p) if haystack.len() >= p.min_haystack_len() => {
                        p.find(haystack, self.needle)
                    }
                    _ => self.twoway.find(haystack, self.needle),
                },
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.finder.find(haystack)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(needle: &[u8], haystack: &[u8]) -> Option<usize> {
        if needle.is_empty() {
            return Some(0);
        }
        haystack.windows(needle.len()).position(|w| w == needle)
    }

    proptest! {
        #[test]
        fn every_search_agrees_with_a_naive_one(
            // A small alphabet, so needles are found, partly found, and
            // found overlapping; lengths across the vector widths.
            haystack in proptest::collection::vec(0u8..4, 0..200),
            needle in proptest::collection::vec(0u8..4, 0..40),
            a in 0u8..5, b in 0u8..5, c in 0u8..5,
        ) {
            let h = &haystack[..];
            prop_assert_eq!(byte(a, h), h.iter().position(|&x| x == a));
            prop_assert_eq!(byte_rev(a, h), h.iter().rposition(|&x| x == a));
            prop_assert_eq!(either(a, b, h), h.iter().position(|&x| x == a || x == b));
            let every: Vec<usize> = (0..h.len()).filter(|&i| h[i] == a).collect();
            prop_assert_eq!(all(a, h).collect::<Vec<_>>(), every);
            let any3: Vec<usize> =
                (0..h.len()).filter(|&i| [a, b, c].contains(&h[i])).collect();
            prop_assert_eq!(all_of3(a, b, c, h).collect::<Vec<_>>(), any3);
            prop_assert_eq!(seq(&needle, h), naive(&needle, h));
            // A needle cut from the haystack is found, at or before the cut.
            if h.len() > 10 {
                let cut = &h[3..h.len().min(3 + needle.len().max(2))];
                prop_assert_eq!(Finder::new(cut).find(h), naive(cut, h));
                prop_assert!(Finder::new(cut).find(h).is_some_and(|at| at <= 3));
            }
        }
    }

    #[test]
    fn a_long_needle_among_near_misses_is_found_where_it_fits() {
        // A boundary of 70 dashes in a megabyte of dashes but for its end:
        // a candidate at every byte. The answer is the only place it fits.
        let needle = vec![b'-'; 70];
        let mut haystack = vec![b'-'; 1 << 20];
        for i in (0..haystack.len()).step_by(69) {
            haystack[i] = b'x';
        }
        let n = haystack.len();
        haystack[n - 70..].fill(b'-');
        haystack[n - 71] = b'x';
        assert_eq!(Finder::new(&needle).find(&haystack), Some(n - 70));
    }
}
