//! The library flows one way: `src/lib.rs`'s documentation lists the
//! top-level modules from the bottom layer up, and a module may use only
//! those below it. This test reads the sources and fails on any reference
//! upward (so on any two modules that refer to each other, directly or
//! through others), on a module the list leaves out, and on a source file
//! with more than 800 lines before its test module.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::common::root;

/// The layers as `lib.rs` lists them: the lines of its documentation
/// between "Layers, from the bottom up:" and the next blank line, each
/// `` - `name`: … ``.
fn layers() -> Vec<String> {
    let lib = fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let docs: Vec<&str> = lib
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    let start = docs
        .iter()
        .position(|l| *l == "Layers, from the bottom up:")
        .expect("lib.rs documents its layers");
    docs[start + 1..]
        .iter()
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.strip_prefix("- `"))
        .map(|l| l.split('`').next().unwrap().to_string())
        .collect()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a source file without its test module (everything from a
/// `#[cfg(test)]` line on) and without comments.
fn code(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !is_test_module(l))
        .map(|l| l.split("//").next().unwrap())
        .collect()
}

/// Whether `line` starts a test module: `#[cfg(test)]`, or a `cfg` with
/// `test` among its conditions.
fn is_test_module(line: &str) -> bool {
    let line = line.trim();
    line.starts_with("#[cfg(") && line.contains("test")
}

/// The top-level module a file under `src/` belongs to (`None` for
/// `lib.rs`, `main.rs` and the binary's `cli/`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.trim_end_matches(".rs").to_string();
    (!["lib", "main", "cli"].contains(&name.as_str())).then_some(name)
}

#[test]
fn library_modules_refer_only_to_layers_below_them() {
    let layers = layers();
    let src = root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let rank = |m: &str| layers.iter().position(|l| l == m);
    let mut wrong = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let Some(here) = rank(&module) else {
            wrong.insert(
                format!("{module}: not in lib.rs's list of layers"),
                file.clone(),
            );
            continue;
        };
        let text = fs::read_to_string(file).unwrap();
        for line in code(&text) {
            for (at, _) in line.match_indices("crate::") {
                let used: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                match rank(&used) {
                    Some(there) if there > here => {
                        wrong.insert(
                            format!("{module} uses {used}, a layer above it"),
                            file.clone(),
                        );
                    }
                    None if !used.is_empty() => {
                        wrong.insert(
                            format!("{module} uses {used}, not in the list"),
                            file.clone(),
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "layers (bottom up) {layers:?}:\n{}",
        wrong
            .iter()
            .map(|(what, file)| format!("  {what} ({})", file.display()))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Every top-level module of lib.rs is in the list.
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap();
    for line in lib.lines().filter_map(|l| l.strip_prefix("pub mod ")) {
        let name = line.trim_end_matches(';');
        assert!(
            rank(name).is_some(),
            "{name} is not in lib.rs's list of layers"
        );
    }
}

#[test]
fn no_source_file_is_longer_than_800_lines_before_its_tests() {
    let src = root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = fs::read_to_string(f).unwrap();
            let n = text.lines().take_while(|l| !is_test_module(l)).count();
            (n > 800).then(|| format!("{} ({n} lines)", f.strip_prefix(&src).unwrap().display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "files over 800 lines before their tests: {long:#?}"
    );
}
