//! Generates one test function per data-driven case file under
//! `tests/cases/<stage>/**/*.tfl`, so every case is its own test with its
//! own name (`tests/cases.rs` includes the generated file).

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=tests/cases");
    let root = Path::new("tests/cases");
    let mut files = Vec::new();
    collect(root, &mut files);
    files.sort();
    let mut out = String::new();
    for file in &files {
        let rel = file.strip_prefix(root).unwrap_or(file);
        let name: String = rel
            .with_extension("")
            .to_string_lossy()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
            .collect();
        let _ = writeln!(out, "#[test]\nfn {name}() {{ run_case({:?}); }}", rel.to_string_lossy());
    }
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("cases.rs");
    let _ = std::fs::write(dest, out);
}

fn collect(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "tfl") {
            files.push(path);
        }
    }
}
