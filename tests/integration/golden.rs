//! Golden token files for the sample corpus: any change in parsing or
//! tokenizing shows as a diff in `tests/golden/`. After an intended change,
//! regenerate with `BAYESMAIL_BLESS=1 cargo test --test integration golden`
//! and review the diff.

use std::fmt::Write;
use std::path::PathBuf;

use bayesmail::features::Features;
use bayesmail::vocab::METADATA_NAMES;

use crate::common::{features, root, sample_dir, sample_files};

fn render(f: &Features) -> String {
    let mut out = String::new();
    writeln!(out, "# tokens: {}", f.tokens.len()).unwrap();
    for t in &f.tokens {
        writeln!(out, "{t}").unwrap();
    }
    writeln!(out, "# metadata").unwrap();
    for (name, value) in METADATA_NAMES.iter().zip(f.metadata.0) {
        writeln!(out, "{name} {value:.6}").unwrap();
    }
    out
}

fn golden_path(message: &std::path::Path) -> PathBuf {
    let rel = message.strip_prefix(sample_dir()).unwrap();
    root()
        .join("tests")
        .join("golden")
        .join(rel)
        .with_extension("tokens")
}

#[test]
fn sample_corpus_matches_golden_tokens() {
    let bless = std::env::var_os("BAYESMAIL_BLESS").is_some();
    let mut mismatches = Vec::new();
    for file in sample_files() {
        let got = render(&features(&std::fs::read(&file).unwrap()));
        let golden = golden_path(&file);
        if bless {
            std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
            std::fs::write(&golden, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if want != got {
            let want_lines: std::collections::BTreeSet<&str> = want.lines().collect();
            let got_lines: std::collections::BTreeSet<&str> = got.lines().collect();
            let removed: Vec<_> = want_lines.difference(&got_lines).take(10).collect();
            let added: Vec<_> = got_lines.difference(&want_lines).take(10).collect();
            mismatches.push(format!(
                "{}\n  - {removed:?}\n  + {added:?}",
                golden.display()
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "tokens differ from the golden files (BAYESMAIL_BLESS=1 to accept):\n{}",
        mismatches.join("\n")
    );
}
