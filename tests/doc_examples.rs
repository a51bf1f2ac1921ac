//! Every example program the project shows its users must check and run:
//! each ```` ```tfl ```` block of `docs/language.md` and each
//! `examples/**/*.tfl` file (except those with a `train` statement: they
//! train for many epochs and overwrite files under `examples/out/`).
//!
//! Conventions of `docs/language.md`:
//! - a ```` ```tfl ```` block is a complete program; blocks do not share
//!   bindings. Code that must not be checked (not-yet-supported features,
//!   programs that show an error) goes in ```` ```text ```` blocks;
//! - a ```` ```output ```` block right after a ```` ```tfl ```` block (blank
//!   lines between are allowed) is exactly what the program prints;
//! - a block runs as if it were a file in the crate root, so relative data
//!   paths such as `examples/data/digits.csv.gz` resolve against the crate
//!   root, and files a block writes should go under `out/` (git-ignored).
//!
//! Each test reports every failing program, not only the first, naming the
//! markdown line or the file, with the rendered diagnostics.

use std::path::{Path, PathBuf};

/// One program to check: where it comes from, its text, and the standard
/// output it must produce (if given).
struct Example {
    name: String,
    /// The source name diagnostics show; its directory is the one relative
    /// paths in the program resolve against.
    source: String,
    /// For a markdown block, the line of its opening fence.
    line: usize,
    text: String,
    expected: Option<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The ```` ```tfl ```` blocks of a markdown text, each with the
/// ```` ```output ```` block that follows it. A block is named
/// `file, block at line N`, N being the line of its opening fence.
fn markdown_examples(file: &str, markdown: &str) -> Vec<Example> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut out: Vec<Example> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_end();
        let Some(info) = fence.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let info = info.trim().to_string();
        let start = i;
        let mut body = String::new();
        i += 1;
        while i < lines.len() && lines[i].trim_end() != "```" {
            body.push_str(lines[i]);
            body.push('\n');
            i += 1;
        }
        assert!(i < lines.len(), "{file}:{}: the ```{info} block is never closed", start + 1);
        i += 1;
        match info.as_str() {
            "tfl" => out.push(Example {
                name: format!("{file}, block at line {}", start + 1),
                source: format!("{}, block at line {}", base_name(file), start + 1),
                line: start + 1,
                text: body,
                expected: None,
            }),
            "output" => {
                // It belongs to the block just before it, if only blank
                // lines separate them.
                let previous = out.last_mut().filter(|e| {
                    let after_close = e.line + e.text.lines().count() + 1;
                    lines[after_close..start].iter().all(|l| l.trim().is_empty())
                });
                match previous {
                    Some(e) if e.expected.is_none() => e.expected = Some(body),
                    _ => panic!("{file}:{}: an ```output block must directly follow a ```tfl block", start + 1),
                }
            }
            _ => {}
        }
    }
    out
}

/// The file name of `path` without its directories.
fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Every `.tfl` file under `dir`, sorted.
fn tfl_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "tfl") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// True if the program has a `train` statement.
fn has_train(text: &str) -> bool {
    text.lines().any(|l| l.trim_start().starts_with("train "))
}

/// Checks and runs one example; the error text if it fails.
fn run(example: &Example) -> Result<(), String> {
    let mut s = tfc::driver::Session::new();
    let f = s.add_source(&example.source, &example.text);
    let program =
        s.check(f).map_err(|diags| format!("does not check:\n{}", tfc::diag::render(&diags, &s.sources, false)))?;
    let mut stdout: Vec<u8> = Vec::new();
    // Written files resolve against the same directory as data files.
    let options = tfc::runtime::exec::RunOptions { base_dir: s.base_dir(f), ..Default::default() };
    if let Err(d) = tfc::runtime::exec::execute(&program, &mut stdout, options) {
        let printed = String::from_utf8_lossy(&stdout);
        return Err(format!(
            "fails when run:\n{}\nafter printing:\n{printed}",
            tfc::diag::render(std::slice::from_ref(&d), &s.sources, false)
        ));
    }
    let printed = String::from_utf8(stdout).map_err(|_| "printed text that is not UTF-8".to_string())?;
    match &example.expected {
        Some(expected) if *expected != printed => Err(format!(
            "prints something else than its ```output block:\n--- expected\n{expected}--- printed\n{printed}---"
        )),
        _ => Ok(()),
    }
}

/// Runs every example and panics with the report of all failures.
fn run_all(what: &str, examples: &[Example]) {
    assert!(!examples.is_empty(), "no examples found in {what}");
    let failures: Vec<String> =
        examples.iter().filter_map(|e| run(e).err().map(|msg| format!("=== {}: {msg}", e.name))).collect();
    if !failures.is_empty() {
        panic!("{} of {} examples in {what} fail:\n\n{}", failures.len(), examples.len(), failures.join("\n\n"));
    }
}

#[test]
fn language_reference_examples_check_and_run() {
    let path = root().join("docs/language.md");
    let markdown = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let examples = markdown_examples("docs/language.md", &markdown);
    run_all("docs/language.md", &examples);
}

#[test]
fn example_programs_check_and_run() {
    let dir = root().join("examples");
    let examples: Vec<Example> = tfl_files(&dir)
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let name = path.strip_prefix(root()).unwrap_or(&path).display().to_string();
            (!has_train(&text)).then_some(Example { source: name.clone(), name, line: 0, text, expected: None })
        })
        .collect();
    run_all("examples/", &examples);
}

#[test]
fn markdown_blocks_are_extracted_with_their_output() {
    let md = "# t\n\n```tfl\nprint(1)\n```\n\n```output\n1\n```\n\n```text\nnot code\n```\n```tfl\nlet a = 2\n\nprint(a)\n```\n";
    let ex = markdown_examples("m.md", md);
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].name, "m.md, block at line 3");
    let nested = markdown_examples("docs/m.md", "```tfl\nprint(1)\n```\n");
    assert_eq!(nested[0].name, "docs/m.md, block at line 1");
    assert_eq!(nested[0].source, "m.md, block at line 1");
    assert_eq!(ex[0].text, "print(1)\n");
    assert_eq!(ex[0].expected.as_deref(), Some("1\n"));
    assert_eq!(ex[1].name, "m.md, block at line 14");
    assert_eq!(ex[1].text, "let a = 2\n\nprint(a)\n");
    assert_eq!(ex[1].expected, None);
    assert!(has_train("let x = 1\ntrain net on data {\n}\n"));
    assert!(!has_train("// how to train a net\nlet trained = 1\n"));
}

/// The README's quick start tells the truth: its Rust version is the
/// crate's `rust-version`, and the sample output of its first command is
/// what the example prints, digit for digit (losses, accuracy; the
/// examples per second depend on the machine). The example runs in a
/// scratch copy, so `examples/out` is not touched.
#[test]
fn the_readme_quick_start_shows_what_the_first_command_prints() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let version = manifest.lines().find_map(|l| l.strip_prefix("rust-version = ")).expect("a rust-version");
    let version = version.trim_matches('"');
    assert!(readme.contains(&format!("Rust toolchain ({version} or newer")), "README's Rust version is not {version}");
    // The first ```text block after the quick-start command.
    let start = readme.find("cargo run --release -- run examples/digits_mlp.tfl").expect("the quick start");
    let block = &readme[start..];
    let block = &block[block.find("```text\n").expect("its sample output") + 8..];
    let block = &block[..block.find("```").expect("the block's end")];
    let dir = std::env::temp_dir().join(format!("tfc-readme-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::copy(root().join("examples/digits_mlp.tfl"), dir.join("digits_mlp.tfl")).unwrap();
    std::fs::copy(root().join("examples/data/digits.csv.gz"), dir.join("data/digits.csv.gz")).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tfc"))
        .args(["run", "digits_mlp.tfl"])
        .current_dir(&dir)
        .output()
        .expect("tfc runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = format!("{}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
    let without_rate =
        |line: &str| line.rsplit_once("  ").filter(|(_, r)| r.ends_with("ex/s")).map_or(line, |(l, _)| l).to_string();
    let lines: Vec<String> = printed.lines().map(without_rate).collect();
    for shown in block.lines().filter(|l| *l != "…") {
        assert!(lines.contains(&without_rate(shown)), "the README shows `{shown}`, the example prints:\n{printed}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
