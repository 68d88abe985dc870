//! The registry file: which messages are learned, and under which label,
//! as of one state of the count store, beside the snapshot compiled from
//! that state. With the journal (whose entries carry their registry
//! changes) it answers what `learn` and `unlearn` must know, whether a
//! message is learned already, without opening the count store: opening
//! sled costs more than the rest of teaching one message.
//!
//! A writer that changes the count store removes this file first (see
//! [`remove`]) and a new snapshot writes it again, so it never stands for
//! another state than the one it names: a missing file means "ask the
//! count store".
//!
//! # Layout
//! All integers little-endian.
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `BAYESREG` |
//! | 4 | `u32` format version ([`REGISTRY_VERSION`]) |
//! | 4 | `u32` length `k` of the store id |
//! | `k` | the store id (UTF-8) |
//! | 8 | `u64` store generation |
//! | 16 | messages learned as ham, as spam: 2 × `u64` |
//! | 8 | `u64` number of records `n` |
//! | 17 n | records: the first 16 bytes of the digest, then 0 ham or 1 spam; sorted, distinct |
//! | 8 | `u64` checksum of all the bytes before it |

use std::fs;
use std::io::{self, Read};
use std::path::Path;

use super::checksum::checksum;
use super::packed::{RegistryKey, registry_key};
use super::{Error, Result, StoreIdentity};
use crate::fsutil;
use crate::fsutil::write_atomically;
use crate::model::Label;
use crate::vocab::Digest;

/// Version of the registry file layout.
pub const REGISTRY_VERSION: u32 = 1;

/// Magic bytes of a registry file.
const MAGIC: &[u8; 8] = b"BAYESREG";

/// Bytes of one record.
const RECORD: usize = 17;

/// A registry file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RegistryFile {
    /// The store state it stands for.
    pub base: StoreIdentity,
    /// Messages learned per class, `[ham, spam]`.
    pub messages: [u64; 2],
    records: Vec<u8>,
}

impl RegistryFile {
    /// The label `digest` is learned under, if it is.
    pub fn label_of(&self, digest: &Digest) -> Option<Label> {
        let n = self.records.len() / RECORD;
        let record = |i: usize| &self.records[i * RECORD..(i + 1) * RECORD];
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match record(mid)[..16].cmp(&registry_key(digest)[..]) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return Some(if record(mid)[16] == 0 {
                        Label::Ham
                    } else {
                        Label::Spam
                    });
                }
            }
        }
        None
    }

    /// Parses a registry file; `None` if it is damaged or of another
    /// version (then the count store is asked instead).
    pub fn parse(bytes: &[u8]) -> Option<RegistryFile> {
        let body = bytes.len().checked_sub(8)?;
        let stored = u64::from_le_bytes(bytes[body..].try_into().ok()?);
        if checksum(&bytes[..body]) != stored {
            return None;
        }
        let mut at: usize = 0;
        let mut take = |n: usize| {
            let slice = bytes.get(at..at.checked_add(n)?)?;
            at += n;
            Some(slice)
        };
        if take(8)? != MAGIC {
            return None;
        }
        let u32_ = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        let u64_ = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        if u32_(take(4)?) != REGISTRY_VERSION {
            return None;
        }
        let k = u32_(take(4)?) as usize;
        let id = std::str::from_utf8(take(k)?).ok()?.to_owned();
        let generation = u64_(take(8)?);
        let messages = [u64_(take(8)?), u64_(take(8)?)];
        let n = usize::try_from(u64_(take(8)?)).ok()?;
        let records = take(n.checked_mul(RECORD)?)?.to_vec();
        if at != body {
            return None;
        }
        let sorted = records
            .chunks_exact(RECORD)
            .zip(records.chunks_exact(RECORD).skip(1))
            .all(|(a, b)| a[..16] < b[..16]);
        let labels = records.chunks_exact(RECORD).all(|r| r[16] <= 1);
        (sorted && labels).then_some(RegistryFile {
            base: StoreIdentity { id, generation },
            messages,
            records,
        })
    }

    /// Reads the registry file at `path`: `Ok(None)` if there is none or it
    /// does not parse. Anything but a regular file there is an error,
    /// found without blocking on it.
    pub fn read(path: &Path) -> Result<Option<RegistryFile>> {
        let read = fsutil::open_regular(path).and_then(|mut file| {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map(|_| bytes)
        });
        match read {
            Ok(bytes) => Ok(RegistryFile::parse(&bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io {
                path: path.to_owned(),
                source,
            }),
        }
    }
}

/// Writes the registry file at `path` atomically: the store state `base`,
/// its message counts, and its learned messages, which `entries` yields
/// sorted by digest.
pub fn write(
    path: &Path,
    base: &StoreIdentity,
    messages: [u64; 2],
    entries: impl Iterator<Item = (RegistryKey, Label)>,
) -> Result<()> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&REGISTRY_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(base.id.len() as u32).to_le_bytes());
    bytes.extend_from_slice(base.id.as_bytes());
    bytes.extend_from_slice(&base.generation.to_le_bytes());
    for m in messages {
        bytes.extend_from_slice(&m.to_le_bytes());
    }
    let count_at = bytes.len();
    bytes.extend_from_slice(&0u64.to_le_bytes());
    let mut n = 0u64;
    for (digest, label) in entries {
        bytes.extend_from_slice(&digest);
        bytes.push(label.index() as u8);
        n += 1;
    }
    bytes[count_at..count_at + 8].copy_from_slice(&n.to_le_bytes());
    let sum = checksum(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    Ok(write_atomically(path, &bytes)?)
}

/// Removes the registry file at `path`, if there is one, and makes the
/// removal durable: done before the count store changes.
pub fn remove(path: &Path) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_finds_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.registry");
        let base = StoreIdentity {
            id: "ab".repeat(16),
            generation: 7,
        };
        let entries = [([1u8; 16], Label::Ham), ([9u8; 16], Label::Spam)];
        write(&path, &base, [1, 1], entries.into_iter()).unwrap();
        let file = RegistryFile::read(&path).unwrap().unwrap();
        assert_eq!((file.base.clone(), file.messages), (base, [1, 1]));
        assert_eq!(file.label_of(&[1; 32]), Some(Label::Ham));
        assert_eq!(file.label_of(&[9; 32]), Some(Label::Spam));
        assert_eq!(file.label_of(&[5; 32]), None);
        let mut bytes = fs::read(&path).unwrap();
        for i in [0, 20, bytes.len() - 20, bytes.len() - 1] {
            bytes[i] ^= 1;
            assert_eq!(RegistryFile::parse(&bytes), None, "byte {i}");
            bytes[i] ^= 1;
        }
        assert_eq!(RegistryFile::parse(&bytes[..bytes.len() - 1]), None);
        remove(&path).unwrap();
        assert_eq!(RegistryFile::read(&path).unwrap(), None);
        remove(&path).unwrap();
    }
}
