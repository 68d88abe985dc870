//! Where the time goes for one message, on one core: reading the files,
//! MIME structure alone (mailparse), the full message stage (MIME + transfer
//! and charset decoding + HTML to text), and the full feature extraction
//! (message stage + tokenizer + metadata), and the tokenizer and metadata
//! alone over messages parsed beforehand.
//!
//! Last, `stage_ratios` prints the ratios between the stages from
//! interleaved rounds, which hold up under load better than criterion's
//! one-after-another timings.
//!
//! Reads the public corpus from `BAYESMAIL_CORPUS` or
//! `corpora/spamassassin`, else the sample corpus. Each benchmark counts
//! what it produced and asserts the count, so a broken benchmark cannot
//! look fast.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

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

/// The ratios between stages, measured so that load on the machine falls
/// on both sides of each ratio alike: every round times the message stage,
/// the whole extraction and the extraction after parsing back to back over
/// the corpus, and the medians over the rounds are printed
/// (`BAYESMAIL_RATIO_ROUNDS`, default 15). Criterion times one stage after
/// another, minutes apart, so its ratios move with the load.
fn stage_ratios(_: &mut Criterion) {
    // Criterion does not see this function: honour `--list` and name
    // filters by hand.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let wanted = filters.is_empty() || filters.iter().any(|f| "stage_ratios".contains(f.as_str()));
    if !wanted || args.iter().any(|a| a == "--list") {
        return;
    }
    let corpus = load(&corpus_dir());
    let n = corpus.len();
    let parsed: Vec<message::Message> = corpus
        .iter()
        .map(|raw| message::parse(raw).unwrap())
        .collect();
    let rounds: usize = std::env::var("BAYESMAIL_RATIO_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15)
        .max(1);
    let mut extractor = Extractor::new();
    let (mut stage_us, mut whole_us, mut after_us) = (Vec::new(), Vec::new(), Vec::new());
    let mut whole_ratio = Vec::new();
    let mut after_ratio = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        let mut text = 0;
        for raw in &corpus {
            text += message::parse(raw).unwrap().parts.len();
        }
        let stage = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut tokens = 0;
        for raw in &corpus {
            tokens += extractor.extract(raw).unwrap().tokens.len();
        }
        let whole = start.elapsed().as_secs_f64();
        let start = Instant::now();
        for msg in &parsed {
            tokens += extractor.from_message(msg).tokens.len();
        }
        let after = start.elapsed().as_secs_f64();
        assert!(tokens > 2 * n && text >= n);
        black_box((text, tokens));
        let per_message = |t: f64| t / n as f64 * 1e6;
        stage_us.push(per_message(stage));
        whole_us.push(per_message(whole));
        after_us.push(per_message(after));
        whole_ratio.push(whole / stage);
        after_ratio.push(after / stage);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    eprintln!("stage ratios, {rounds} interleaved rounds, median (min–max):");
    for (name, v) in [
        ("message stage µs/message", &mut stage_us),
        ("features µs/message", &mut whole_us),
        ("features of parsed µs/message", &mut after_us),
        ("features / message stage", &mut whole_ratio),
        ("features of parsed / message stage", &mut after_ratio),
    ] {
        let (mid, lo, hi) = median(v);
        eprintln!("  {name}: {mid:.2} ({lo:.2}–{hi:.2})");
    }
}

criterion_group!(benches, pipeline, stage_ratios);
criterion_main!(benches);
