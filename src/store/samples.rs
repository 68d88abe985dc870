//! The prequential record file: the samples the stacker of a learning
//! database is refitted on ([`crate::decision::prequential`]), beside the
//! model. Only writers read it, under the writers' lock; readers take the
//! stacker from the model and its journal. It can be rebuilt by nothing
//! but the stream it records, and losing it costs little (the next refits
//! wait until the record holds enough again), so a file that is gone,
//! damaged or of another version reads as no record.
//!
//! # Layout
//! All integers little-endian.
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `BAYESPRQ` |
//! | 4 | `u32` format version ([`SAMPLES_VERSION`]) |
//! | 4 | `u32` samples since the last fit |
//! | 4 | `u32` samples the current stacker was fitted on |
//! | 4 | `u32` number of samples `n` |
//! | n × (9 + 8 [`INPUTS`]) | samples, oldest first: the key (`u64`), 0 ham or 1 spam, the inputs (`f64` each) |
//! | 8 | `u64` checksum of all the bytes before it |
//!
//! Version 1 has one input fewer (no online discriminative view): it is
//! read with that input 0 in every sample.

use std::io::{self, Read};
use std::path::Path;

use super::checksum::checksum;
use super::{Error, Result};
use crate::decision::calibrate::{INPUTS, LOGISTIC};
use crate::decision::prequential::{KEPT, Prequential, Sample};
use crate::fsutil;
use crate::fsutil::write_atomically_unsynced;

/// Version of the record file layout.
pub const SAMPLES_VERSION: u32 = 2;

/// Magic bytes of a record file.
const MAGIC: &[u8; 8] = b"BAYESPRQ";

/// Bytes of one sample of a record of `version`.
const fn sample_bytes(version: u32) -> usize {
    9 + 8 * if version >= 2 { INPUTS } else { LOGISTIC }
}

/// Bytes of one sample.
const SAMPLE: usize = sample_bytes(SAMPLES_VERSION);

/// Encodes `record` as the file holds it.
pub fn encode(record: &Prequential) -> Vec<u8> {
    let n = record.samples().len();
    let mut bytes = Vec::with_capacity(24 + n * SAMPLE + 8);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&SAMPLES_VERSION.to_le_bytes());
    bytes.extend_from_slice(&record.since_fit().to_le_bytes());
    bytes.extend_from_slice(&record.fitted_on().to_le_bytes());
    bytes.extend_from_slice(&(n as u32).to_le_bytes());
    for s in record.samples() {
        bytes.extend_from_slice(&s.key.to_le_bytes());
        bytes.push(u8::from(s.spam));
        for x in s.inputs {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    let sum = checksum(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    bytes
}

/// Parses a record file; `None` if it is damaged or of another version.
pub fn parse(bytes: &[u8]) -> Option<Prequential> {
    let body = bytes.len().checked_sub(8)?;
    let stored = u64::from_le_bytes(bytes[body..].try_into().ok()?);
    if checksum(&bytes[..body]) != stored || bytes.get(..8)? != MAGIC {
        return None;
    }
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let version = u32_at(8)?;
    if !(1..=SAMPLES_VERSION).contains(&version) {
        return None;
    }
    let size = sample_bytes(version);
    let (since_fit, fitted_on, n) = (u32_at(12)?, u32_at(16)?, u32_at(20)? as usize);
    if n > KEPT || 24 + n * size != body {
        return None;
    }
    let samples = bytes[24..body]
        .chunks_exact(size)
        .map(|r| {
            let mut inputs = [0.0; INPUTS];
            for (x, b) in inputs.iter_mut().zip(r[9..].chunks_exact(8)) {
                *x = f64::from_le_bytes(b.try_into().expect("8 bytes"));
            }
            let spam = match r[8] {
                0 => false,
                1 => true,
                _ => return None,
            };
            inputs.iter().all(|x| x.is_finite()).then_some(Sample {
                key: u64::from_le_bytes(r[..8].try_into().expect("8 bytes")),
                inputs,
                spam,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Prequential::from_parts(samples, since_fit, fitted_on))
}

/// Reads the record at `path`: `Ok(None)` if there is none or it does not
/// parse. Anything but a regular file there is an error, found without
/// blocking on it.
pub fn read(path: &Path) -> Result<Option<Prequential>> {
    let read = fsutil::open_regular(path).and_then(|mut file| {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map(|_| bytes)
    });
    match read {
        Ok(bytes) => Ok(parse(&bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Writes the record at `path` atomically, unsynced: a record lost in a
/// crash costs only the refits that wait until it holds enough again.
pub fn write(path: &Path, record: &Prequential) -> Result<()> {
    Ok(write_atomically_unsynced(path, &encode(record))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_damage_as_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.samples");
        assert_eq!(read(&path).unwrap(), None);
        let samples: Vec<Sample> = (0..5u64)
            .map(|i| Sample {
                key: i * 977,
                inputs: [i as f64 - 2.5; INPUTS],
                spam: i % 2 == 0,
            })
            .collect();
        let record = Prequential::from_parts(samples, 3, 40);
        write(&path, &record).unwrap();
        assert_eq!(read(&path).unwrap(), Some(record));
        let mut bytes = std::fs::read(&path).unwrap();
        for i in [0, 9, 13, 24, 32, bytes.len() - 1] {
            bytes[i] ^= 1;
            assert_eq!(parse(&bytes), None, "byte {i}");
            bytes[i] ^= 1;
        }
        assert_eq!(parse(&bytes[..bytes.len() - 1]), None);
    }

    #[test]
    fn a_version_1_record_is_read_with_no_logistic_input() {
        let samples: Vec<Sample> = (0..3u64)
            .map(|i| {
                let mut inputs = [i as f64 + 0.5; INPUTS];
                inputs[LOGISTIC] = 0.0;
                Sample {
                    key: i,
                    inputs,
                    spam: i == 1,
                }
            })
            .collect();
        let record = Prequential::from_parts(samples, 1, 2);
        let now = encode(&record);
        // The same record as version 1 wrote it: each sample without its
        // last input.
        let mut old = now[..24].to_vec();
        old[8..12].copy_from_slice(&1u32.to_le_bytes());
        for chunk in now[24..now.len() - 8].chunks_exact(SAMPLE) {
            old.extend_from_slice(&chunk[..SAMPLE - 8]);
        }
        let sum = checksum(&old);
        old.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(parse(&old), Some(record));
    }
}
