//! Mailbox readers against whole corpora: the same messages written as one
//! mbox, or as a Maildir, read back as exactly the same messages with the
//! same features as the individual files.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use bayesmail::features::Extractor;
use bayesmail::mailbox::{self, MailboxKind, Options, write_mbox_message};
use rayon::prelude::*;

use crate::common::{public_corpus, public_files, sample_files};

fn token_sets(messages: &[Vec<u8>]) -> Vec<Vec<String>> {
    messages
        .par_iter()
        .map_init(Extractor::new, |ex, raw| {
            ex.extract(raw).expect("message parses").tokens.to_vec()
        })
        .collect()
}

fn read_all(path: &std::path::Path, kind: MailboxKind) -> Vec<Vec<u8>> {
    mailbox::open_as(path, kind, &Options::default())
        .unwrap()
        .map(|m| m.expect("message reads").bytes)
        .collect()
}

/// Writes every message into one mbox (mboxrd escaping), reads it back and
/// compares count and token sets; returns how many messages had body lines
/// that needed escaping, so callers can check the test meant something.
fn mbox_roundtrip(messages: &[Vec<u8>]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.mbox");
    let mut out = BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut escaped = 0;
    for raw in messages {
        // The first line of many corpus files is their own envelope line,
        // which the writer escapes like any other `From ` line.
        let needs_escape = raw.split(|&b| b == b'\n').skip(1).any(|line| {
            let unquoted = line
                .iter()
                .position(|&b| b != b'>')
                .map_or(&[][..], |p| &line[p..]);
            unquoted.starts_with(b"From ")
        });
        escaped += usize::from(needs_escape);
        write_mbox_message(&mut out, Some("sender@example.org"), raw).unwrap();
    }
    out.flush().unwrap();
    drop(out);
    let back = read_all(&path, MailboxKind::Mbox);
    assert_eq!(
        back.len(),
        messages.len(),
        "message count after mbox round trip"
    );
    let expected = token_sets(messages);
    let got = token_sets(&back);
    for (i, (e, g)) in expected.iter().zip(&got).enumerate() {
        assert_eq!(e, g, "token set of message {i} changed through mbox");
    }
    escaped
}

fn maildir_roundtrip(messages: &[Vec<u8>]) {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("Maildir");
    for sub in ["cur", "new", "tmp"] {
        std::fs::create_dir_all(md.join(sub)).unwrap();
    }
    for (i, raw) in messages.iter().enumerate() {
        // Alternate cur/ (with flags) and new/; names sort in index order
        // within each folder.
        let name: PathBuf = if i % 2 == 0 {
            md.join("cur").join(format!("{i:08}.M1P1.host:2,S"))
        } else {
            md.join("new").join(format!("{i:08}.M1P1.host"))
        };
        std::fs::write(name, raw).unwrap();
    }
    let back = mailbox::open(&md, &Options::default())
        .unwrap()
        .map(|m| m.expect("message reads"))
        .collect::<Vec<_>>();
    assert_eq!(
        back.len(),
        messages.len(),
        "message count after Maildir round trip"
    );
    let expected = token_sets(messages);
    for m in &back {
        let name =
            m.id.path()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
        let index: usize = name[..8].parse().unwrap();
        assert_eq!(
            m.bytes, messages[index],
            "bytes of message {index} changed through Maildir"
        );
        let tokens = Extractor::new().extract(&m.bytes).unwrap().tokens.to_vec();
        assert_eq!(tokens, expected[index]);
    }
}

#[test]
fn sample_corpus_round_trips_through_mbox_and_maildir() {
    let messages: Vec<Vec<u8>> = sample_files()
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let escaped = mbox_roundtrip(&messages);
    assert!(
        escaped > 0,
        "the sample corpus should have body lines starting with From"
    );
    maildir_roundtrip(&messages);
}

/// Acceptance: the public corpus as one mbox reads back as exactly 6,046
/// messages whose token sets equal those of the individual files.
#[test]
fn public_corpus_round_trips_through_mbox() {
    let Some(dir) = public_corpus() else { return };
    let messages: Vec<Vec<u8>> = public_files(&dir).into_iter().map(|(_, b)| b).collect();
    assert_eq!(messages.len(), 6046);
    let escaped = mbox_roundtrip(&messages);
    assert!(escaped > 10, "only {escaped} messages needed From escaping");
}

/// Acceptance: the same for a Maildir.
#[test]
fn public_corpus_round_trips_through_maildir() {
    let Some(dir) = public_corpus() else { return };
    let messages: Vec<Vec<u8>> = public_files(&dir).into_iter().map(|(_, b)| b).collect();
    assert_eq!(messages.len(), 6046);
    maildir_roundtrip(&messages);
}

/// The directory reader finds every message of the corpus, each once.
#[test]
fn public_corpus_reads_as_a_directory_tree() {
    let Some(dir) = public_corpus() else { return };
    let ids: Vec<String> = mailbox::open(&dir, &Options::default())
        .unwrap()
        .map(|m| m.expect("message reads").id.to_string())
        .collect();
    assert_eq!(ids.len(), 6046);
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 6046);
}
