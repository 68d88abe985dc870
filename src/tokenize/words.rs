//! The tokenizer at the head of the pipeline: UAX #29 words, lower-cased,
//! with URLs (`scheme://…`) kept as one token so the URL filter can reduce
//! them to a host, and invisible characters removed first.
//!
//! Scripts written without spaces between words are cut into overlapping
//! pairs of characters instead ([`is_bigram_script`]): Han, Hiragana,
//! Katakana and Hangul (as Lucene's `CJKBigramFilter` does) and Thai, Lao,
//! Khmer and Myanmar. UAX #29 has no word boundaries for them: it makes
//! every Han character and every kana a word of its own, a whole run of
//! Katakana one word, a Thai character with its marks one word, and joins
//! Hangul to Latin letters and digits (`한국어abc`). A run of such
//! characters (each with the marks that follow it: a grapheme cluster)
//! gives every pair of neighbours (`東京都` → `東京`, `京都`); a run of one
//! gives that one. Hangul, which does space its words, is paired within
//! each word, so a word is found whatever particle follows it
//! (`회의는`, `회의를` share `회의`). A run ends at anything else: a space,
//! punctuation (`、` `。` are neither), Latin letters, digits.
//!
//! Lower-casing happens here, as each word is copied into its token, rather
//! than in a filter after: a filter reads and rewrites every token again
//! (tantivy's `LowerCaser` first checks it is ASCII, then folds it).

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};
use unicode_segmentation::{GraphemeIndices, UWordBoundIndices, UnicodeSegmentation};

/// Splits text into words on Unicode word boundaries (UAX #29), keeping only
/// segments with a letter or digit, as `unicode_words` does; a URL with a
/// scheme is one token; runs of Han, kana, Hangul, Thai, Lao, Khmer and
/// Myanmar characters become overlapping pairs of characters (grapheme
/// clusters; a run of one gives that one). Words come out lower-cased,
/// character by character (as tantivy's `LowerCaser` does: no final-sigma
/// rule).
#[derive(Clone, Default)]
pub struct MailWordTokenizer {
    cleaned: String,
    /// The token every stream writes into, kept so its text keeps its room
    /// from one text to the next.
    token: Token,
}

/// Characters that render as nothing (or only change direction) and that
/// spam puts inside words to dodge filters.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}')
}

/// Whether `c` belongs to a script whose runs are cut into pairs of
/// characters rather than into UAX #29 words: Han (with its radicals and
/// the marks `々` `〇` `〻`), Hiragana, Katakana (and the prolonged sound mark
/// `ー`; not the middle dot `・`, which separates words), Hangul (syllables
/// and jamo), and the letters and marks of Thai, Lao, Khmer and Myanmar
/// (not their digits, punctuation or currency signs).
pub(crate) fn is_bigram_script(c: char) -> bool {
    // Below Thai, none: one compare for every Latin, Cyrillic, Greek,
    // Arabic and Hebrew character.
    if c < '\u{0e01}' {
        return false;
    }
    matches!(c,
        // Thai, Lao
        '\u{0e01}'..='\u{0e3a}' | '\u{0e40}'..='\u{0e4e}'
        | '\u{0e81}'..='\u{0ece}' | '\u{0edc}'..='\u{0edf}'
        // Myanmar
        | '\u{1000}'..='\u{103f}' | '\u{1050}'..='\u{108f}' | '\u{109a}'..='\u{109f}'
        | '\u{a9e0}'..='\u{a9ef}' | '\u{a9fa}'..='\u{a9fe}' | '\u{aa60}'..='\u{aa7f}'
        // Hangul jamo
        | '\u{1100}'..='\u{11ff}'
        // Khmer
        | '\u{1780}'..='\u{17d3}' | '\u{17d7}' | '\u{17dc}' | '\u{17dd}'
        // Han radicals, iteration and number marks
        | '\u{2e80}'..='\u{2fdf}' | '\u{3005}' | '\u{3007}'
        | '\u{3021}'..='\u{3029}' | '\u{3038}'..='\u{303b}'
        // Hiragana, Katakana
        | '\u{3041}'..='\u{3096}' | '\u{3099}'..='\u{309f}'
        | '\u{30a1}'..='\u{30fa}' | '\u{30fc}'..='\u{30ff}' | '\u{31f0}'..='\u{31ff}'
        // Hangul compatibility jamo
        | '\u{3131}'..='\u{318e}'
        // Han
        | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}'
        // Hangul
        | '\u{a960}'..='\u{a97f}' | '\u{ac00}'..='\u{d7a3}' | '\u{d7b0}'..='\u{d7ff}'
        // Han compatibility
        | '\u{f900}'..='\u{faff}'
        // Half-width Katakana and Hangul
        | '\u{ff66}'..='\u{ff9f}' | '\u{ffa0}'..='\u{ffdc}'
        // Kana supplements
        | '\u{1aff0}'..='\u{1afff}' | '\u{1b000}'..='\u{1b16f}'
        // Han extensions B on (planes 2 and 3)
        | '\u{20000}'..='\u{3ffff}')
}

/// Length in bytes of the run of [`is_bigram_script`] characters at the
/// start of `text`: its grapheme clusters that start with one (so the marks
/// after a character stay with it).
fn bigram_run_len(text: &str) -> usize {
    text.graphemes(true)
        .take_while(|g| g.chars().next().is_some_and(is_bigram_script))
        .map(str::len)
        .sum()
}

/// The words of a run of [`is_bigram_script`] characters: each pair of
/// neighbouring grapheme clusters, or the one cluster of a run of one.
struct Bigrams<'a> {
    /// Offset of the run in the text.
    base: usize,
    units: GraphemeIndices<'a>,
    /// The last cluster read, as offsets in the text.
    last: Option<(usize, usize)>,
    /// Whether a pair (or the lone cluster) was returned.
    returned: bool,
}

impl<'a> Bigrams<'a> {
    fn new(run: &'a str, base: usize) -> Self {
        Bigrams {
            base,
            units: run.grapheme_indices(true),
            last: None,
            returned: false,
        }
    }

    fn next(&mut self) -> Option<(usize, usize)> {
        for (at, unit) in self.units.by_ref() {
            let unit = (self.base + at, self.base + at + unit.len());
            if let Some((start, _)) = self.last.replace(unit) {
                self.returned = true;
                return Some((start, unit.1));
            }
        }
        if self.returned {
            return None;
        }
        self.returned = true;
        self.last
    }
}

/// Whether `text` holds an [`is_invisible`] character, read from the bytes
/// of their UTF-8 encodings: several times faster than decoding every
/// character of a long non-ASCII text.
fn has_invisible(text: &str) -> bool {
    let b = text.as_bytes();
    // Only the lead bytes below can start one; they are searched for
    // (several bytes at a time) rather than every byte looked at.
    let mut leads =
        memchr::memchr3_iter(0xC2, 0xCD, 0xD8, b).chain(memchr::memchr3_iter(0xE1, 0xE2, 0xEF, b));
    leads.any(|i| match b[i] {
        0xC2 => b.get(i + 1) == Some(&0xAD),
        0xCD => b.get(i + 1) == Some(&0x8F),
        0xD8 => b.get(i + 1) == Some(&0x9C),
        0xE1 => b.get(i + 1..i + 3) == Some(&[0xA0, 0x8E]),
        0xE2 => matches!(
            b.get(i + 1..i + 3),
            Some([0x80, 0x8B..=0x8F | 0xAA..=0xAE] | [0x81, 0xA0..=0xA4 | 0xA6..=0xA9])
        ),
        0xEF => b.get(i + 1..i + 3) == Some(&[0xBB, 0xBF]),
        _ => false,
    })
}

impl Tokenizer for MailWordTokenizer {
    type TokenStream<'a> = MailWordStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> MailWordStream<'a> {
        let Self { cleaned, token } = self;
        let ascii = text.is_ascii();
        let text: &'a str = if !ascii && has_invisible(text) {
            cleaned.clear();
            cleaned.extend(text.chars().filter(|&c| !is_invisible(c)));
            cleaned
        } else {
            text
        };
        let mut buffer = std::mem::take(&mut token.text);
        buffer.clear();
        *token = Token {
            text: buffer,
            ..Token::default()
        };
        // An ASCII text is one line to the ASCII scanner: `\n` breaks words
        // there like any other separator.
        let ascii_end = if ascii { text.len() } else { 0 };
        MailWordStream {
            text,
            piece: Piece::Ascii(AsciiWords::new(&text.as_bytes()[..ascii_end], 0)),
            next_piece: ascii_end,
            line_end: 0,
            token,
            keys: None,
            skip_to: 0,
            position: 0,
        }
    }
}

/// The piece of text being split. A line break is always a word boundary
/// (UAX #29 rules WB3a/b), and so is a space followed by an ASCII letter or
/// digit (no rule joins across a space but WB3d, space to space, and WB4,
/// a space to the marks after it), so each piece between such boundaries
/// can be split on its own: a piece of pure ASCII by a scanner that
/// implements the same rules for ASCII only ([`AsciiWords`]), several
/// times faster than the general tables, which split the rest. A line with
/// one accented word thus costs the tables that word only. A run of
/// [`is_bigram_script`] characters is a piece of its own, cut into pairs.
enum Piece<'a> {
    Ascii(AsciiWords),
    Unicode {
        base: usize,
        segments: UWordBoundIndices<'a>,
    },
    Bigrams(Bigrams<'a>),
}

/// Token stream of [`MailWordTokenizer`].
pub struct MailWordStream<'a> {
    text: &'a str,
    piece: Piece<'a>,
    /// Where the next piece starts.
    next_piece: usize,
    /// End of the line the next piece is on (its `\n` or the text's end).
    line_end: usize,
    token: &'a mut Token,
    /// The current token's first 16 bytes as a token set keys them, when
    /// they came for free with its copy (a word of an ASCII piece).
    keys: Option<[u64; 2]>,
    skip_to: usize,
    position: usize,
}

/// Bytes that end a URL in running text.
fn ends_url(b: u8) -> bool {
    b.is_ascii_whitespace()
        || b.is_ascii_control()
        || matches!(
            b,
            b'"' | b'\''
                | b'<'
                | b'>'
                | b'('
                | b')'
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'|'
                | b'\\'
                | b'^'
                | b'`'
        )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Digit,
    Underscore,
    Other,
}

/// Word class of every ASCII byte, looked up rather than computed: this is
/// the innermost loop of tokenizing.
const CLASSES: [Class; 128] = {
    let mut table = [Class::Other; 128];
    let mut b = 0;
    while b < 128 {
        table[b] = match b as u8 {
            b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
            b'0'..=b'9' => Class::Digit,
            b'_' => Class::Underscore,
            _ => Class::Other,
        };
        b += 1;
    }
    table
};

fn class(b: u8) -> Class {
    CLASSES[usize::from(b & 0x7f)]
}

/// Every byte lane of a `u64` at once (SWAR): `LANES * b` repeats `b`.
const LANES: u64 = 0x0101_0101_0101_0101;
/// The top bit of every lane.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Eight bytes of `line` from `at` as a little-endian integer (byte `at`
/// in the lowest lane), zeros past the end, so a copy eight bytes at a time
/// may run past the end of the text.
fn load8(line: &[u8], at: usize) -> u64 {
    if at < line.len().saturating_sub(7) {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&line[at..at + 8]);
        return u64::from_le_bytes(bytes);
    }
    load8_tail(line, at)
}

/// [`load8`] within eight bytes of the end of the line.
#[cold]
fn load8_tail(line: &[u8], at: usize) -> u64 {
    let rest = line.get(at..).unwrap_or_default();
    let mut x = 0;
    for (i, &b) in rest.iter().take(8).enumerate() {
        x |= u64::from(b) << (8 * i);
    }
    x
}

/// The top bit of each lane set where the byte is in `lo..=hi` (ASCII
/// bounds), for lanes whose top bit is set on entry: such a lane minus an
/// ASCII value never borrows from its neighbour, and keeps its top bit
/// exactly if it was at least that value.
fn lanes_between(x: u64, lo: u8, hi: u8) -> u64 {
    let at_least = |b: u8| x.wrapping_sub(LANES * u64::from(b));
    at_least(lo) & !at_least(hi + 1) & HIGH
}

/// The top bit of each lane of `x` (eight ASCII bytes) set where that byte
/// is a letter, a digit or `_`: eight class lookups in a dozen operations
/// without a branch, so a word's end is found without a loop exit per byte.
fn word_lanes(x: u64) -> u64 {
    let x = x | HIGH;
    let letters = lanes_between(x | (LANES * 0x20), b'a', b'z');
    let digits = lanes_between(x, b'0', b'9');
    // `_` lanes become zero; a lane is zero exactly if adding 0x7f to its
    // low bits leaves the top bit clear and it had no top bit of its own.
    let t = x ^ (LANES * (0x80 | u64::from(b'_')));
    let low = LANES * 0x7f;
    let underscores = !(((t & low).wrapping_add(low)) | t) & HIGH;
    letters | digits | underscores
}

/// Eight ASCII bytes (a little-endian integer), upper-case letters made
/// lower-case, and the top bit of every byte cleared: the bytes past a
/// word's end may not be ASCII, and must stay so until they are cut off.
fn lower8(x: u64) -> u64 {
    let upper = lanes_between(x | HIGH, b'A', b'Z');
    (x | (upper >> 2)) & !HIGH
}

/// The key of eight bytes from `lowered` (as [`lower8`] gives them) of
/// which the first `n` (at least one) are a word's: big-endian, the bytes
/// past the word zeros.
fn key_of_lanes(lowered: u64, n: usize) -> u64 {
    // Never a shift by 64: `n` is at least one.
    lowered.swap_bytes() & (u64::MAX << (64 - 8 * n.min(8)))
}

/// Appends `text[start..end]` (ASCII, not empty) to `out`, lower-cased,
/// eight bytes at a time: whole eight-byte words are written (the bytes
/// past `end` too) and the excess cut off, so the copy branches once per
/// eight bytes rather than on every byte or on the exact length. Returns
/// the word's first 16 bytes as a token set keys them (`TokenSet`'s
/// `key_at`), read off the words being copied rather than loaded again
/// byte by byte.
fn push_ascii_lowercase(out: &mut String, text: &[u8], start: usize, end: usize) -> [u64; 2] {
    // SAFETY: only ASCII bytes are appended (`lower8` clears the top bit of
    // every byte), so whatever is kept of them, the string stays UTF-8.
    let out = unsafe { out.as_mut_vec() };
    let n = end - start;
    let len = out.len() + n;
    out.reserve(n + 8);
    let first = lower8(load8(text, start));
    out.extend_from_slice(&first.to_le_bytes());
    let mut keys = [key_of_lanes(first, n), 0];
    if n > 8 {
        let second = lower8(load8(text, start + 8));
        out.extend_from_slice(&second.to_le_bytes());
        keys[1] = key_of_lanes(second, n - 8);
        let mut at = start + 16;
        while at < end {
            out.extend_from_slice(&lower8(load8(text, at)).to_le_bytes());
            at += 8;
        }
    }
    out.truncate(len);
    keys
}

/// The 8-bit mask of the lanes of `lanes` whose top bit is set (lane `i`
/// gives bit `i`): one multiplication gathers the eight top bits into the
/// top byte, as no two of its partial products meet there.
fn gather(lanes: u64) -> u64 {
    ((lanes & HIGH) >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// Whether the byte `mid` between bytes `before` and `after` joins them
/// into one word: `:` `.` `'` between two letters (WB6/7), `,` `;` `.` `'`
/// between two digits (WB11/12).
fn joins(before: u8, mid: u8, after: u8) -> bool {
    matches!(
        (class(before), mid, class(after)),
        (Class::Letter, b':' | b'.' | b'\'', Class::Letter)
            | (Class::Digit, b',' | b';' | b'.' | b'\'', Class::Digit)
    )
}

/// One bit per byte of `block` (bit `i` for byte `i`), set where the byte
/// is a letter, a digit or `_` (the bytes are ASCII: the scanner only
/// reads ASCII pieces). On x86_64, SSE2 (part of every x86_64 processor)
/// classes sixteen bytes in a few compares and takes their bits in one
/// `movemask`, in fewer instructions than eight bytes at a time in
/// general-purpose registers ([`word_bits_swar`], the other targets' way).
#[cfg(target_arch = "x86_64")]
fn word_bits(block: &[u8; 64]) -> u64 {
    // SAFETY: SSE2 is part of the x86_64 baseline, so every processor this
    // code can run on has it.
    unsafe { word_bits_sse2(block) }
}

/// [`word_bits`] sixteen bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn word_bits_sse2(block: &[u8; 64]) -> u64 {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_cmplt_epi8, _mm_movemask_epi8,
        _mm_or_si128, _mm_set_epi64x, _mm_set1_epi8,
    };
    /// Lanes of `x` from `lo` to `hi` (ASCII) set. The compares are
    /// signed: a byte from 0x80 up would be negative, in no range.
    #[target_feature(enable = "sse2")]
    fn between(x: __m128i, lo: u8, hi: u8) -> __m128i {
        let above = _mm_cmpgt_epi8(x, _mm_set1_epi8(lo as i8 - 1));
        let below = _mm_cmplt_epi8(x, _mm_set1_epi8(hi as i8 + 1));
        _mm_and_si128(above, below)
    }
    let mut bits = 0;
    for (i, chunk) in block.chunks_exact(16).enumerate() {
        let mut lo = [0; 8];
        let mut hi = [0; 8];
        lo.copy_from_slice(&chunk[..8]);
        hi.copy_from_slice(&chunk[8..]);
        let x = _mm_set_epi64x(i64::from_le_bytes(hi), i64::from_le_bytes(lo));
        let letters = between(_mm_or_si128(x, _mm_set1_epi8(0x20)), b'a', b'z');
        let digits = between(x, b'0', b'9');
        let underscores = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'_' as i8));
        let word = _mm_or_si128(_mm_or_si128(letters, digits), underscores);
        bits |= u64::from(_mm_movemask_epi8(word) as u16) << (16 * i);
    }
    bits
}

#[cfg(not(target_arch = "x86_64"))]
fn word_bits(block: &[u8; 64]) -> u64 {
    word_bits_swar(block)
}

/// [`word_bits`] eight bytes at a time in a `u64`.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn word_bits_swar(block: &[u8; 64]) -> u64 {
    let mut bits = 0;
    for (i, chunk) in block.chunks_exact(8).enumerate() {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(chunk);
        bits |= gather(word_lanes(u64::from_le_bytes(bytes))) << (8 * i);
    }
    bits
}

/// The words of a pure-ASCII line, found 64 bytes at a time: each block of
/// the line becomes one bit per byte, set where the byte is a letter, a
/// digit or `_`, and a run of set bits is found with two bit scans, not a
/// loop over its bytes. For ASCII the UAX #29 rules reduce to: letters,
/// digits and `_` join each other (WB5, WB8–WB10, WB13a/b); `:` `.` `'`
/// join two letters (WB6/7); `,` `;` `.` `'` join two digits (WB11/12);
/// everything else breaks. So a word is a run, or runs joined by single
/// joiners, which are looked at only where a run stops.
struct AsciiWords {
    /// Offset of the current block in the text.
    base: usize,
    /// End of the line.
    end: usize,
    /// Word bytes of the current block not yet returned.
    bits: u64,
}

impl AsciiWords {
    /// The words of `line[start..]`, `line` ending where the line does.
    fn new(line: &[u8], start: usize) -> Self {
        let mut words = AsciiWords {
            base: start,
            end: line.len(),
            bits: 0,
        };
        words.bits = words.block(line);
        words
    }

    /// The word bits of the block at `self.base`; zeros past the line's end.
    /// Out of line: it runs once per 64 bytes, and inlined into the word
    /// stream's `advance` it made that function, called for every word,
    /// larger.
    #[inline(never)]
    fn block(&self, line: &[u8]) -> u64 {
        let mut block = [0; 64];
        match line.get(self.base..self.base + 64) {
            Some(whole) => block.copy_from_slice(whole),
            None => {
                let rest = line.get(self.base..).unwrap_or_default();
                block[..rest.len()].copy_from_slice(rest);
            }
        }
        word_bits(&block)
    }

    /// Takes the run of word bytes from bit `first` of the current block
    /// (a set bit) on, into the next blocks if it reaches the end of this
    /// one; returns where the run ends.
    fn take_run(&mut self, line: &[u8], first: u32) -> usize {
        let run = (!(self.bits >> first)).trailing_zeros();
        if first + run < 64 {
            self.bits &= !0 << (first + run);
            return self.base + (first + run) as usize;
        }
        self.bits = 0;
        while self.base + 64 < self.end {
            self.base += 64;
            let bits = self.block(line);
            let run = (!bits).trailing_zeros();
            if run < 64 {
                self.bits = bits & (!0 << run);
                return self.base + run as usize;
            }
        }
        self.base + 64
    }

    /// The next word, as `(start, end)`, skipping segments without a
    /// letter or digit.
    fn next(&mut self, line: &[u8]) -> Option<(usize, usize)> {
        loop {
            while self.bits == 0 {
                self.base += 64;
                if self.base >= self.end {
                    return None;
                }
                self.bits = self.block(line);
            }
            let first = self.bits.trailing_zeros();
            let start = self.base + first as usize;
            let mut end = self.take_run(line, first);
            // Most runs stop at a space: look at that byte first.
            while let Some(&mid @ (b':' | b'.' | b'\'' | b',' | b';')) = line.get(end)
                && end + 1 < self.end
                && joins(line[end - 1], mid, line[end + 1])
            {
                // The byte after the joiner is a letter or digit: the next
                // run starts there, in this block or at the next one's start.
                if end + 1 == self.base + 64 {
                    self.base += 64;
                    self.bits = self.block(line);
                }
                end = self.take_run(line, (end + 1 - self.base) as u32);
            }
            // A joiner always sits between letters or digits, so a segment
            // without a letter or digit is a run of `_`.
            if line[start] != b'_' || line[start..end].iter().any(|&b| b != b'_') {
                return Some((start, end));
            }
        }
    }
}

impl<'a> MailWordStream<'a> {
    /// If a URL scheme starts at `start` (the word `text[start..after]`
    /// followed by `://`), returns the end of the URL.
    fn url_end(&self, start: usize, after: usize) -> Option<usize> {
        // Most words are followed by anything but `:`; look at that byte
        // before comparing schemes.
        let bytes = self.text.as_bytes();
        if bytes.get(after) != Some(&b':')
            || bytes.get(after..after + 3) != Some(b"://")
            || !["http", "https", "ftp"]
                .iter()
                .any(|s| bytes[start..after].eq_ignore_ascii_case(s.as_bytes()))
        {
            return None;
        }
        let mut end = after + 3;
        while end < bytes.len() && !ends_url(bytes[end]) {
            end += 1;
        }
        while end > after + 3 && matches!(bytes[end - 1], b'.' | b',' | b';' | b':' | b'!' | b'?') {
            end -= 1;
        }
        // `end` may sit inside a multi-byte character only if the loop
        // stopped on a continuation byte, which `ends_url` never matches.
        (end > after + 3 && self.text.is_char_boundary(end)).then_some(end)
    }

    /// The next word of the text, as byte offsets.
    fn next_word(&mut self) -> Option<(usize, usize)> {
        loop {
            let word = match &mut self.piece {
                Piece::Ascii(words) => words.next(&self.text.as_bytes()[..words.end]),
                Piece::Bigrams(pairs) => pairs.next(),
                Piece::Unicode { .. } => self.next_unicode_word(),
            };
            if word.is_some() || !self.next_piece() {
                return word;
            }
        }
    }

    /// The next word of a line with non-ASCII characters, by the general
    /// tables. Kept out of line, away from the ASCII path.
    #[inline(never)]
    fn next_unicode_word(&mut self) -> Option<(usize, usize)> {
        let Piece::Unicode { base, segments } = &mut self.piece else {
            return None;
        };
        let base = *base;
        segments
            .find(|(_, seg)| seg.chars().any(char::is_alphanumeric))
            .map(|(s, seg)| (base + s, base + s + seg.len()))
    }

    /// Moves on to the next piece of text ([`Piece`]); false at the end of
    /// the text.
    #[inline(never)]
    fn next_piece(&mut self) -> bool {
        let bytes = self.text.as_bytes();
        let start = self.next_piece;
        if start >= bytes.len() {
            return false;
        }
        if start >= self.line_end {
            self.line_end =
                memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |p| start + p);
        }
        let line = &bytes[start..self.line_end];
        // Where a space is followed by an ASCII letter or digit.
        let cut = |at: usize| line[at - 1] == b' ' && line[at].is_ascii_alphanumeric();
        let (end, kind) = match first_non_ascii(line) {
            None => (line.len(), Kind::Ascii),
            // ASCII up to the last cut before the first non-ASCII byte,
            // else the tables up to the first cut or the first character
            // of a bigram script after it, whichever comes first. Each
            // search stops where the piece it makes ends, so a line costs
            // its length however many pieces it holds.
            Some(first) => match (1..first).rev().find(|&at| cut(at)) {
                Some(at) => (at, Kind::Ascii),
                None => {
                    // Bytes, not characters: a character of a bigram
                    // script is three or four bytes long, so only their
                    // lead bytes (from 0xE0) are decoded.
                    let stop = (first..line.len()).find_map(|at| match line[at] {
                        b if b.is_ascii_alphanumeric() && cut(at) => Some((at, Kind::Unicode)),
                        0xE0..
                            if self.text[start + at..]
                                .chars()
                                .next()
                                .is_some_and(is_bigram_script) =>
                        {
                            Some(match at {
                                0 => (
                                    bigram_run_len(&self.text[start..self.line_end]),
                                    Kind::Bigrams,
                                ),
                                _ if at == first => (at, Kind::Ascii),
                                _ => (at, Kind::Unicode),
                            })
                        }
                        _ => None,
                    });
                    stop.unwrap_or((line.len(), Kind::Unicode))
                }
            },
        };
        let end = start + end;
        // A piece ending the line: the next one starts after the `\n`.
        self.next_piece = if end == self.line_end { end + 1 } else { end };
        self.piece = match kind {
            Kind::Ascii => Piece::Ascii(AsciiWords::new(&bytes[..end], start)),
            Kind::Unicode => Piece::Unicode {
                base: start,
                segments: self.text[start..end].split_word_bound_indices(),
            },
            Kind::Bigrams => Piece::Bigrams(Bigrams::new(&self.text[start..end], start)),
        };
        true
    }
}

/// Which kind of [`Piece`] a piece of text is.
#[derive(Clone, Copy)]
enum Kind {
    Ascii,
    Unicode,
    Bigrams,
}

/// Where the first non-ASCII byte of `bytes` is, looking eight bytes at
/// a time.
fn first_non_ascii(bytes: &[u8]) -> Option<usize> {
    let mut chunks = bytes.chunks_exact(8);
    for (i, chunk) in chunks.by_ref().enumerate() {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let high = u64::from_le_bytes(word) & HIGH;
        if high != 0 {
            return Some(8 * i + (high.trailing_zeros() / 8) as usize);
        }
    }
    let rest = chunks.remainder();
    let at = rest.iter().position(|b| !b.is_ascii())?;
    Some(bytes.len() - rest.len() + at)
}

/// Appends `text` to `out`, lower-cased character by character. For words
/// with non-ASCII characters, so kept out of line.
#[inline(never)]
fn push_lowercase(out: &mut String, text: &str) {
    for c in text.chars() {
        out.extend(c.to_lowercase());
    }
}

impl MailWordStream<'_> {
    /// The current token's first 16 bytes as two big-endian integers padded
    /// with zeros (the keys a token set looks a word up by), if the stream
    /// has them: it does for the words of ASCII text, read off the copy.
    pub(crate) fn word_keys(&self) -> Option<[u64; 2]> {
        self.keys
    }
}

impl TokenStream for MailWordStream<'_> {
    fn advance(&mut self) -> bool {
        while let Some((start, word_end)) = self.next_word() {
            if start < self.skip_to {
                continue;
            }
            // A URL may run on past an ASCII piece, into the characters
            // of a bigram script that ended it.
            let (end, ascii) = match self.url_end(start, word_end) {
                Some(end) => {
                    self.skip_to = end;
                    (end, self.text[start..end].is_ascii())
                }
                None => (word_end, true),
            };
            self.token.text.clear();
            self.keys = if ascii && matches!(self.piece, Piece::Ascii(_)) {
                Some(push_ascii_lowercase(
                    &mut self.token.text,
                    self.text.as_bytes(),
                    start,
                    end,
                ))
            } else {
                push_lowercase(&mut self.token.text, &self.text[start..end]);
                None
            };
            self.token.offset_from = start;
            self.token.offset_to = end;
            self.token.position = self.position;
            self.position += 1;
            return true;
        }
        false
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lower-case character by character, as the stream does (no
    /// final-sigma rule).
    fn lower(word: &str) -> String {
        word.chars().flat_map(char::to_lowercase).collect()
    }

    /// The words of an ASCII text by the block scanner alone.
    fn ascii_words(text: &str) -> Vec<&str> {
        let bytes = text.as_bytes();
        let mut words = AsciiWords::new(bytes, 0);
        let mut out = Vec::new();
        while let Some((s, e)) = words.next(bytes) {
            out.push(&text[s..e]);
        }
        out
    }

    /// What the stream gives, the slow way: UAX #29 words between the runs
    /// of bigram scripts, and each run's neighbouring grapheme clusters.
    fn reference(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some((i, _)) = rest.char_indices().find(|&(_, c)| is_bigram_script(c)) {
            out.extend(rest[..i].unicode_words().map(lower));
            let units: Vec<&str> = rest[i..]
                .graphemes(true)
                .take_while(|g| g.chars().next().is_some_and(is_bigram_script))
                .collect();
            match units[..] {
                [one] => out.push(one.to_owned()),
                _ => out.extend(units.windows(2).map(|w| w.concat())),
            }
            rest = &rest[i + units.concat().len()..];
        }
        out.extend(rest.unicode_words().map(lower));
        out
    }

    fn words(text: &str) -> Vec<String> {
        let mut tokenizer = MailWordTokenizer::default();
        let mut stream = tokenizer.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            out.push(t.text.clone());
        }
        out
    }

    #[test]
    fn splits_like_uax29_words() {
        let text = "Don't pay $1,000.50 for V-I-A-G-R-A at www.example.com, ok? Ünïcode";
        let expected: Vec<String> = text.unicode_words().map(lower).collect();
        assert_eq!(words(text), expected);
    }

    #[test]
    fn cjk_runs_become_overlapping_pairs() {
        assert_eq!(
            words("東京都に住む"),
            ["東京", "京都", "都に", "に住", "住む"]
        );
        // Latin joined to Han, and a lone Han character between words.
        assert_eq!(words("Rust言語 is 速い"), ["rust", "言語", "is", "速い"]);
        assert_eq!(words("a 東 b"), ["a", "東", "b"]);
        assert_eq!(words("第3回"), ["第", "3", "回"]);
        // CJK punctuation and the Katakana middle dot end a run.
        assert_eq!(words("東京、大阪。"), ["東京", "大阪"]);
        assert_eq!(words("ジョン・スミス"), ["ジョ", "ョン", "スミ", "ミス"]);
        // Katakana runs, which UAX #29 keeps whole, are paired too.
        assert_eq!(
            words("コンピューター"),
            ["コン", "ンピ", "ピュ", "ュー", "ータ", "ター"]
        );
        // Traditional and simplified alike.
        assert_eq!(words("機會 机会"), ["機會", "机会"]);
    }

    #[test]
    fn hangul_is_paired_within_its_words() {
        assert_eq!(
            words("회의는 내일입니다"),
            ["회의", "의는", "내일", "일입", "입니", "니다"]
        );
        // UAX #29 joins Hangul to Latin letters (both are letters to it).
        assert_eq!("한국어abc".unicode_words().count(), 1);
        assert_eq!(words("한국어abc"), ["한국", "국어", "abc"]);
    }

    #[test]
    fn thai_and_other_unspaced_scripts_are_paired_by_clusters() {
        // UAX #29 makes every Thai character (with its marks) a word.
        assert_eq!("สวัสดี".unicode_words().count(), 4);
        // A vowel or tone mark stays with its consonant: ส วั ส ดี.
        assert_eq!(words("สวัสดี ครับ"), ["สวั", "วัส", "สดี", "ครั", "รับ"]);
        // Thai digits are digits, as UAX #29 has them.
        assert_eq!(words("ราคา ๕๐ บาท"), ["รา", "าค", "คา", "๕๐", "บา", "าท"]);
        // Lao, Khmer (a subscript consonant stays in its cluster), Myanmar.
        assert_eq!(words("ສະບາຍ"), ["ສະ", "ະບ", "ບາ", "າຍ"]);
        assert_eq!(words("សួស្តី"), ["សួស្តី"]);
        assert_eq!(words("မင်္ဂလာ"), reference("မင်္ဂလာ"));
        assert!(words("မင်္ဂလာ").len() > 1);
    }

    #[test]
    fn cjk_inside_urls_and_after_ascii_lines() {
        assert_eq!(
            words("見て http://例え.example/パス 今"),
            ["見て", "http://例え.example/パス", "今"]
        );
        assert_eq!(
            words("plain line\n東京 and more\nascii"),
            ["plain", "line", "東京", "and", "more", "ascii"]
        );
    }

    #[test]
    fn word_lanes_class_every_ascii_byte_in_every_lane() {
        for b in 0..128u8 {
            for lane in 0..8 {
                // The other lanes hold a word byte and a non-word byte in
                // turn, so a carry into or out of the lane would show.
                for filler in [b'a', b' ', b'_', 0x7f, 0] {
                    let mut bytes = [filler; 8];
                    bytes[lane] = b;
                    let lanes = word_lanes(u64::from_le_bytes(bytes));
                    let want = class(b) != Class::Other;
                    assert_eq!(
                        lanes >> (8 * lane + 7) & 1 == 1,
                        want,
                        "byte {b:#x} lane {lane}"
                    );
                    assert_eq!(lanes & !HIGH, 0);
                }
            }
        }
    }

    #[test]
    fn word_bits_class_every_ascii_byte_at_every_position() {
        for b in 0..128u8 {
            for at in 0..64 {
                for filler in [b'a', b' ', b'_', b'Z', b'9', 0x7f, 0] {
                    let mut block = [filler; 64];
                    block[at] = b;
                    let bits = word_bits(&block);
                    assert_eq!(bits, word_bits_swar(&block), "byte {b:#x} at {at}");
                    let want = class(b) != Class::Other;
                    assert_eq!(bits >> at & 1 == 1, want, "byte {b:#x} at {at}");
                }
            }
        }
    }

    #[test]
    fn gather_takes_every_top_bit_to_its_lane_bit() {
        for mask in 0..=255u64 {
            let lanes = (0..8)
                .filter(|i| mask >> i & 1 == 1)
                .fold(0u64, |acc, i| acc | (0x80 << (8 * i)));
            // Low bits in the lanes must not disturb the result.
            assert_eq!(gather(lanes | 0x7f7f_7f7f_7f7f_7f7f), mask);
        }
    }

    #[test]
    fn first_non_ascii_byte_is_found_at_every_position() {
        for len in 0..40 {
            let ascii = vec![b'a'; len];
            assert_eq!(first_non_ascii(&ascii), None);
            for at in 0..len {
                let mut bytes = ascii.clone();
                bytes[at] = 0xC3;
                bytes[len - 1] |= 0x80;
                assert_eq!(first_non_ascii(&bytes), Some(at), "{len} {at}");
            }
        }
    }

    #[test]
    fn invisible_characters_are_found_by_their_bytes() {
        for c in (0..=0x10ffff).filter_map(char::from_u32) {
            let text = format!("a{c}b");
            assert_eq!(has_invisible(&text), is_invisible(c), "{:x}", c as u32);
            assert_eq!(has_invisible(&text[1..text.len() - 1]), is_invisible(c));
        }
    }

    #[test]
    fn keeps_urls_whole() {
        assert_eq!(
            words("go to <https://x.example/a?b=c&d=e>. or http://y.example/."),
            [
                "go",
                "to",
                "https://x.example/a?b=c&d=e",
                "or",
                "http://y.example/"
            ]
        );
        assert_eq!(words("http:// nothing"), ["http", "nothing"]);
    }

    #[test]
    fn ascii_words_before_a_non_ascii_line_are_copied_exactly() {
        // Words copied eight bytes at a time read past their end, here into
        // the multi-byte characters of the next line.
        let text = "MiXed Ab\nééééééé\nCD\n東京東京";
        let expected = reference(text);
        assert_eq!(words(text), expected);
    }

    #[test]
    fn ascii_and_unicode_lines_mix() {
        let text = "naïve café\nplain ascii line\r\n東京 and 1,000\n";
        let expected = reference(text);
        assert_eq!(words(text), expected);
    }

    proptest::proptest! {
        /// The ASCII scanner agrees with unicode-segmentation on every ASCII text.
        #[test]
        fn ascii_scanner_matches_uax29(text in "[a-zA-Z0-9_.,;:' \"!$%&()\\-\t]{0,300}") {
            proptest::prop_assert_eq!(ascii_words(&text), text.unicode_words().collect::<Vec<_>>());
        }

        /// Long runs of letters or digits, joined or not, so that words and
        /// joiners fall on every position of the 64-byte blocks.
        #[test]
        fn ascii_scanner_matches_uax29_across_blocks(
            text in "(([a-zA-Z]{1,90}|[0-9]{1,90}|_{1,3})[.,;:' _-]{0,2}){0,12}"
        ) {
            proptest::prop_assert_eq!(ascii_words(&text), text.unicode_words().collect::<Vec<_>>());
        }

        /// Whole texts, lines and all, split exactly as unicode_words does
        /// (URLs aside), the runs of bigram scripts into pairs.
        #[test]
        fn stream_matches_uax29(
            text in "([a-zA-Z0-9_.,;:' \"!é東京にカナ한국สวัส\u{e34}\u{3099}\u{2019}\u{301}\u{a0}。\r\n-]|  ){0,200}"
        ) {
            proptest::prop_assert_eq!(words(&text), reference(&text));
        }
    }
}
