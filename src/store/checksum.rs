//! bayesmail's own checksum: of the journal, the registry file and the
//! model file before format 5 (from format 5 on, the model's is XXH3-64).

/// The state step of both checksums: a bijection of the state for a given
/// word, and of the word for a given state.
pub(crate) fn step(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
}

/// The final mix of both checksums (a bijection).
pub fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

pub(crate) const CHECKSUM_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// The word made of the last `bytes.len() % 8` bytes, zero-padded.
pub(crate) fn last_word(rest: &[u8]) -> u64 {
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    u64::from_le_bytes(last)
}

/// A 64-bit checksum of `bytes`: each 8-byte word goes through [`step`] in
/// one of four lanes (word `i` in lane `i mod 4`), the lanes are folded into
/// one state with the same step, then the length and a final mix. Every
/// step is a bijection, so any change confined to one word is always
/// detected. Four independent lanes keep the multiplier busy where one chain
/// waits on each multiplication. The model file of format 4 has it.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    const LANES: usize = 4;
    let mut lanes: [u64; LANES] = std::array::from_fn(|i| CHECKSUM_SEED.wrapping_add(i as u64));
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let mut blocks = bytes.chunks_exact(8 * LANES);
    for block in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = step(*lane, word(&block[8 * i..8 * i + 8]));
        }
    }
    let mut words = blocks.remainder().chunks_exact(8);
    let mut i = 0;
    for w in &mut words {
        lanes[i] = step(lanes[i], word(w));
        i += 1;
    }
    // i < LANES: at most three whole words are left after the blocks.
    lanes[i] = step(lanes[i], last_word(words.remainder()));
    let h = lanes.into_iter().fold(CHECKSUM_SEED, step);
    finish(step(h, bytes.len() as u64))
}

/// The checksum of version 2 files: one chain over the 8-byte words, then
/// the length and a final mix.
pub(crate) fn checksum_v2(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut h = CHECKSUM_SEED;
    for chunk in &mut chunks {
        h = step(
            h,
            u64::from_le_bytes(chunk.try_into().expect("chunks of 8")),
        );
    }
    h = step(h, last_word(chunks.remainder()));
    finish(step(h, bytes.len() as u64))
}
