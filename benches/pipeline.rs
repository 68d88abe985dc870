//! Where the time goes for one message, on one core: reading the files,
//! MIME structure alone (mailparse), the full message stage (MIME + transfer
//! and charset decoding + HTML to text), and the full feature extraction
//! (message stage + tokenizer + metadata), and the tokenizer and metadata
//! alone over messages parsed beforehand.
//!
//! Reads the public corpus from `BAYESMAIL_CORPUS` or
//! `corpora/spamassassin`, else the sample corpus. Each benchmark counts
//! what it produced and asserts the count, so a broken benchmark cannot
//! look fast.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use bayesmail::features::Extractor;
use bayesmail::{mailbox, message};

fn corpus_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BAYESMAIL_CORPUS") {
        return dir.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpora");
    let public = root.join("spamassassin");
    if public.is_dir() {
        public
    } else {
        root.join("sample")
    }
}

fn load(dir: &Path) -> Vec<Vec<u8>> {
    mailbox::open(dir, &mailbox::Options::default())
        .expect("corpus directory opens")
        .map(|m| m.expect("corpus message reads").bytes)
        .collect()
}

fn pipeline(c: &mut Criterion) {
    let dir = corpus_dir();
    let corpus = load(&dir);
    let n = corpus.len();
    assert!(n > 0, "no messages in {}", dir.display());
    eprintln!("corpus: {} ({n} messages)", dir.display());

    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(n as u64));
    group.sample_size(10);

    group.bench_function("read_files", |b| {
        b.iter(|| {
            let mut count = 0;
            let mut bytes = 0;
            for m in mailbox::open(&dir, &mailbox::Options::default()).unwrap() {
                bytes += m.unwrap().bytes.len();
                count += 1;
            }
            assert_eq!(count, n);
            black_box(bytes)
        })
    });

    group.bench_function("mime_structure_only", |b| {
        b.iter(|| {
            let mut parts = 0;
            for raw in &corpus {
                if let Ok(p) = mailparse::parse_mail(raw) {
                    parts += 1 + p.subparts.len();
                }
            }
            assert!(parts >= n);
            black_box(parts)
        })
    });

    group.bench_function("message_parse_decode", |b| {
        b.iter(|| {
            let mut text = 0;
            for raw in &corpus {
                let msg = message::parse(raw).unwrap();
                text += msg.parts.iter().map(|p| p.text.len()).sum::<usize>();
            }
            assert!(text > n);
            black_box(text)
        })
    });

    // The tokenizer and metadata alone, over messages parsed beforehand:
    // what feature extraction adds to the message stage.
    let parsed: Vec<message::Message> = corpus
        .iter()
        .map(|raw| message::parse(raw).unwrap())
        .collect();
    group.bench_function("features_of_parsed", |b| {
        let mut extractor = Extractor::new();
        b.iter(|| {
            let mut tokens = 0;
            for msg in &parsed {
                tokens += extractor.from_message(msg).tokens.len();
            }
            assert!(tokens > n);
            black_box(tokens)
        })
    });
    drop(parsed);

    group.bench_function("features", |b| {
        let mut extractor = Extractor::new();
        b.iter(|| {
            let mut tokens = 0;
            for raw in &corpus {
                tokens += extractor.extract(raw).unwrap().tokens.len();
            }
            assert!(tokens > n);
            black_box(tokens)
        })
    });
    group.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
