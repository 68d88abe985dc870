//! Writing a snapshot: encoding the layout, and replacing a file atomically
//! (a new temporary file, fsynced, renamed into place, the directory
//! fsynced), and sweeping the temporary files a killed writer left.

use super::*;
use crate::fsutil::{remove_stale_temps, write_atomically};
use crate::vocab::FeatureBuf;

/// Writes a snapshot of `features` (borrowed or owned: [`Feature`],
/// [`FeatureBuf`]) with `header` (serialized as JSON) to `path`, atomically
/// replacing any file there.
///
/// Features may come in any order (they are sorted here); features with
/// zero counts are left out; a feature given twice, or a number that is no
/// bucket ([`crate::vocab::is_bucket`]), is an [`Error::Invalid`].
///
/// ```
/// # fn main() -> bayesmail::store::Result<()> {
/// use bayesmail::model::TokenCounts;
/// use bayesmail::store::{Snapshot, write_snapshot};
/// use bayesmail::vocab::Feature;
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("model.bin");
/// let counts = TokenCounts { ham: 3, spam: 1 };
/// write_snapshot(&path, &"my header", [(Feature::Word("hello"), counts)])?;
///
/// let snapshot = Snapshot::open(&path)?;
/// assert_eq!(snapshot.lookup(Feature::Word("hello")), Some(counts));
/// assert_eq!(snapshot.lookup(Feature::Word("absent")), None);
/// assert_eq!(snapshot.lookup(Feature::Gram(7)), None);
/// assert_eq!(snapshot.header::<String>()?, "my header");
/// # Ok(())
/// # }
/// ```
pub fn write_snapshot<H, F, I>(path: &Path, header: &H, features: I) -> Result<()>
where
    H: Serialize + ?Sized,
    F: Into<FeatureBuf>,
    I: IntoIterator<Item = (F, TokenCounts)>,
{
    let mut words = Vec::new();
    let mut grams = Vec::new();
    for (feature, counts) in features {
        match feature.into() {
            FeatureBuf::Word(word) => words.push((word, counts)),
            other => grams.push((table_slot(other.as_feature()), counts)),
        }
    }
    write_parts(path, header, words, grams)
}

/// Writes a snapshot of every feature in `store` (see [`write_snapshot`]).
pub fn write_store_snapshot<H>(path: &Path, header: &H, store: &dyn Store) -> Result<()>
where
    H: Serialize + ?Sized,
{
    let mut words = Vec::with_capacity(usize::try_from(store.token_count()?).unwrap_or(0));
    let mut grams = Vec::new();
    store.for_each_token(&mut |feature, counts| match feature {
        Feature::Word(word) => words.push((word.to_owned(), counts)),
        other => grams.push((table_slot(other), counts)),
    })?;
    write_parts(path, header, words, grams)
}

/// The entry of the bucket table that holds a bucket or a weight; past
/// the table for a number that is no bucket, which writing refuses.
fn table_slot(feature: Feature<'_>) -> u32 {
    crate::store::slot_of(feature).unwrap_or(u32::MAX)
}

/// [`write_snapshot`] of the words and the table entries (buckets, then
/// weights: [`crate::store::slot_of`]) apart.
fn write_parts<H, K>(
    path: &Path,
    header: &H,
    mut words: Vec<(K, TokenCounts)>,
    mut grams: Vec<(u32, TokenCounts)>,
) -> Result<()>
where
    H: Serialize + ?Sized,
    K: AsRef<str>,
{
    words.retain(|(_, counts)| !counts.is_zero());
    grams.retain(|(_, counts)| !counts.is_zero());
    if !words.is_sorted_by(|a, b| key(a) < key(b)) {
        words.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        if let Some(w) = words.windows(2).find(|w| key(&w[0]) == key(&w[1])) {
            let word = w[0].0.as_ref();
            return Err(Error::Invalid(format!(
                "token {word:?} given twice for a snapshot"
            )));
        }
    }
    if !grams.is_sorted_by(|a, b| a.0 < b.0) {
        grams.sort_unstable_by_key(|&(bucket, _)| bucket);
        if let Some(w) = grams.windows(2).find(|w| w[0].0 == w[1].0) {
            let feature = crate::store::feature_in(w[0].0);
            return Err(Error::Invalid(format!(
                "{feature} given twice for a snapshot"
            )));
        }
    }
    if let Some(&(slot, _)) = grams.last().filter(|(b, _)| *b >= 2 << BUCKET_BITS) {
        return Err(Error::Invalid(format!("{slot:#x} is not a bucket")));
    }
    let header = serde_json::to_vec(header)
        .map_err(|e| Error::Invalid(format!("snapshot header does not serialize: {e}")))?;
    let bytes = encode(&header, &words, &grams)?;
    write_atomically(path, &bytes)?;
    remove_check_record(path);
    Ok(())
}

/// Removes what earlier versions kept beside the model at `path`: the
/// record `NAME.checked` (the file as its writer last checked it, which let
/// readers skip the checksum; nothing reads it now) and the temporary
/// files of its killed writers. For writers; best effort.
pub(crate) fn remove_check_record(path: &Path) {
    let Some(name) = path.file_name() else {
        return;
    };
    let mut record = name.to_owned();
    record.push(".checked");
    let record = path.with_file_name(record);
    if let (Some(dir), Some(name)) = (record.parent(), record.file_name()) {
        remove_stale_temps(
            dir,
            Some(&name.to_string_lossy()),
            std::time::Duration::ZERO,
        );
    }
    // A link there is removed, never followed.
    let _ = fs::remove_file(&record);
}

/// The bytes of a snapshot of `words` (sorted by bytes, distinct, no zero
/// counts) and `grams` (buckets, sorted, distinct, no zero counts).
pub(super) fn encode<K: AsRef<str>>(
    header: &[u8],
    words: &[(K, TokenCounts)],
    grams: &[(u32, TokenCounts)],
) -> Result<Vec<u8>> {
    let n = words.len();
    let keys_len: usize = words.iter().map(|(k, _)| k.as_ref().len()).sum();
    if u32::try_from(keys_len).is_err() {
        return Err(Error::Invalid(format!(
            "{keys_len} bytes of tokens do not fit the snapshot format (at most 4 GiB)"
        )));
    }
    let m = slot_count(SNAPSHOT_VERSION, n);
    let b = grams.last().map_or(0, |&(i, _)| i as usize + 1);
    let mut out = Vec::with_capacity(
        PREAMBLE + header.len() + 8 + 4 * (n + 1) + 8 * n + keys_len + 8 + 4 * m + 16 + 8 * b + 8,
    );
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    out.extend_from_slice(&TOKENIZER_VERSION.to_le_bytes());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(&(n as u64).to_le_bytes());
    let mut offset = 0u32;
    out.extend_from_slice(&offset.to_le_bytes());
    for (k, _) in words {
        // Cannot overflow: the sum of all lengths fits in u32 (checked above).
        offset += k.as_ref().len() as u32;
        out.extend_from_slice(&offset.to_le_bytes());
    }
    for (_, c) in words {
        out.extend_from_slice(&c.ham.to_le_bytes());
        out.extend_from_slice(&c.spam.to_le_bytes());
    }
    for (k, _) in words {
        out.extend_from_slice(k.as_ref().as_bytes());
    }
    let mut slots = vec![0u32; m];
    for (i, (k, _)) in words.iter().enumerate() {
        let hash = token_hash(k.as_ref().as_bytes());
        let mut slot = home_slot(SNAPSHOT_VERSION, hash, m);
        while slots[slot] != 0 {
            slot = if slot + 1 == m { 0 } else { slot + 1 };
        }
        // n < 2^32 - 1: the key blob alone has a byte per token and fits u32.
        slots[slot] = slot_tag(SNAPSHOT_VERSION, n, hash).1 | (i as u32 + 1);
    }
    out.extend_from_slice(&(m as u64).to_le_bytes());
    for v in slots {
        out.extend_from_slice(&v.to_le_bytes());
    }
    // The byte view's buckets only: the weights are no vocabulary.
    let g = grams
        .iter()
        .filter(|&&(i, _)| (i as usize) < BUCKETS)
        .count();
    out.extend_from_slice(&(g as u64).to_le_bytes());
    out.extend_from_slice(&(b as u64).to_le_bytes());
    let mut table = vec![0u8; 8 * b];
    for &(i, c) in grams {
        let at = 8 * i as usize;
        table[at..at + 4].copy_from_slice(&c.ham.to_le_bytes());
        table[at + 4..at + 8].copy_from_slice(&c.spam.to_le_bytes());
    }
    out.extend_from_slice(&table);
    let sum = checksum_of(SNAPSHOT_VERSION, &out);
    out.extend_from_slice(&sum.to_le_bytes());
    Ok(out)
}

pub(super) fn key<K: AsRef<str>>(t: &(K, TokenCounts)) -> &[u8] {
    t.0.as_ref().as_bytes()
}
