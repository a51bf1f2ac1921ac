//! The module layering, enforced: `src/lib.rs` lists the top-level modules
//! in layers, and a module's code (tests aside) may name only modules
//! listed before it — `crate::runtime` inside `src/ir/` fails this test,
//! naming the file and line. docs/ARCHITECTURE.md explains the layers.

use std::path::{Path, PathBuf};

/// Uses that go up a layer on purpose, each with its reason.
const EXCEPTIONS: &[(&str, &str, &str)] =
    &[("sema", "trace", "name resolution needs the names of the built-ins, which the tracer's built-in table defines")];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The top-level modules in the order `src/lib.rs` declares them.
fn layers() -> Vec<String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    lib.lines().filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';').map(String::from)).collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of top-level module `m`: `src/m.rs` or everything in `src/m/`.
fn files_of(m: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let single = root().join("src").join(format!("{m}.rs"));
    if single.exists() {
        files.push(single);
    }
    let dir = root().join("src").join(m);
    if dir.is_dir() {
        rust_files(&dir, &mut files);
    }
    files.sort();
    files
}

/// `(line, module)` for every `crate::module` a file's non-test code names
/// (the code before its first `#[cfg(test)]`; comments skipped).
fn crate_uses(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                found.push((i + 1, name));
            }
            rest = after;
        }
        // `use crate::{a, b::c}` names several modules at once.
        if let Some(group) = code.split("crate::{").nth(1) {
            for part in group.split(',') {
                let name: String = part.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    found.push((i + 1, name));
                }
            }
        }
    }
    found
}

/// Every use that breaks the layering, as `file:line: a uses b`.
fn violations() -> Vec<String> {
    let layers = layers();
    let rank = |m: &str| layers.iter().position(|l| l == m);
    let mut bad = Vec::new();
    for (at, m) in layers.iter().enumerate() {
        for file in files_of(m) {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for (line, used) in crate_uses(&text) {
                let Some(used_at) = rank(&used) else { continue };
                let allowed = used_at <= at || EXCEPTIONS.iter().any(|(a, b, _)| a == m && *b == used);
                if !allowed {
                    let rel = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
                    bad.push(format!("{rel}:{line}: `{m}` uses `{used}`, a later layer"));
                }
            }
        }
    }
    bad
}

#[test]
fn no_module_uses_a_later_layer() {
    let bad = violations();
    assert!(bad.is_empty(), "the module layering (src/lib.rs, docs/ARCHITECTURE.md) is broken:\n{}", bad.join("\n"));
}

#[test]
fn every_source_folder_is_a_listed_module() {
    let layers = layers();
    assert!(layers.len() >= 10, "src/lib.rs lists its modules as `pub mod name;` lines: {layers:?}");
    for entry in std::fs::read_dir(root().join("src")).expect("src").flatten() {
        let name = entry.file_name().to_string_lossy().trim_end_matches(".rs").to_string();
        if name == "lib" || name == "main" {
            continue;
        }
        assert!(layers.contains(&name), "src/{name} is not listed in src/lib.rs, so it has no layer");
    }
}

#[test]
fn the_architecture_document_shows_the_same_layers() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let listed: Vec<String> = doc
        .lines()
        .skip_while(|l| !l.starts_with("## Layers"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| ")?.split(" |").next().map(|m| m.trim_matches('`').to_string()))
        .filter(|m| m.starts_with(|c: char| c.is_ascii_lowercase()) && m != "modules")
        .collect();
    let flat: Vec<String> = listed.iter().flat_map(|row| row.split("`, `").map(String::from)).collect();
    assert_eq!(flat, layers(), "docs/ARCHITECTURE.md's layer table lists the modules of src/lib.rs in its order");
}

#[test]
fn the_checker_finds_uses_and_skips_tests_and_comments() {
    let text = "use crate::ir::Graph;\nuse crate::{diag::Span, tensor};\n// crate::cli in a comment\n\
        fn f() { crate::runtime::exec::run() }\n#[cfg(test)]\nmod tests { use crate::driver; }\n";
    let names: Vec<(usize, String)> = crate_uses(text);
    let want = [(1, "ir"), (2, "diag"), (2, "tensor"), (4, "runtime")];
    let names: Vec<(usize, &str)> = names.iter().map(|(l, n)| (*l, n.as_str())).collect();
    assert_eq!(names, want);
}
