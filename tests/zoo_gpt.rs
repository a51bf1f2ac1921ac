//! `examples/zoo/gpt.tfl`, the character-level GPT, runs end to end on the
//! default (JIT) backend with `--strict`, shortened by source substitution
//! (as `shorten` in tests/jit.rs does): a few training steps, a small
//! held-out set and short samples. The held-out loss must fall, every
//! prompt must be text of the corpus (`load_text` and `print_text` round
//! trip), and every sample must print exactly its number of characters
//! (the model's 128 classes are ASCII, one character each).
//!
//! Cost: about 10 s in a debug build (trace, compile, 6 steps, 3 metric
//! passes and 40 sampling steps of 3 texts).

use std::path::PathBuf;
use std::process::Command;

const STEPS: usize = 6;
const CHARS: usize = 40;
/// The model's context, `CONTEXT` in gpt.tfl: each prompt's length.
const CONTEXT: usize = 128;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// gpt.tfl with fewer steps, a smaller held-out set, shorter samples and
/// the corpus by its absolute path (the shortened file lives elsewhere).
fn shortened(corpus: &std::path::Path) -> String {
    let mut source = std::fs::read_to_string(root().join("examples/zoo/gpt.tfl")).expect("gpt.tfl is readable");
    let substitutions = [
        ("const STEPS = 800".to_string(), format!("const STEPS = {STEPS}")),
        ("const CHARS = 200".to_string(), format!("const CHARS = {CHARS}")),
        ("every 200 steps".to_string(), "every 3 steps".to_string()),
        ("take(512)".to_string(), "take(32)".to_string()),
        ("\"../data/shakespeare.txt.gz\"".to_string(), format!("{:?}", corpus.display().to_string())),
    ];
    for (from, to) in &substitutions {
        assert!(source.contains(from.as_str()), "gpt.tfl no longer holds `{from}`: update this test");
        source = source.replace(from.as_str(), to);
    }
    source
}

/// The value of the line starting with `prefix` (`… f32 1.25`).
fn loss_after(stdout: &str, prefix: &str) -> f64 {
    let line = stdout.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` in:\n{stdout}"));
    let value = line.rsplit(' ').next().unwrap_or_default();
    value.parse().unwrap_or_else(|e| panic!("`{line}`: {e}"))
}

/// `text` split after its first `n` characters.
fn split_chars(text: &str, n: usize) -> (&str, &str) {
    let at = text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    text.split_at(at)
}

#[test]
fn gpt_trains_and_samples_lines_of_the_expected_length() {
    let corpus = root().join("examples/data/shakespeare.txt.gz");
    let text = String::from_utf8(tfc::io::loaders::read_bytes(&corpus).expect("the corpus reads")).unwrap();
    let dir = std::env::temp_dir().join(format!("tfc-zoo-gpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gpt.tfl");
    std::fs::write(&file, shortened(&corpus)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .args(["run", "--strict"])
        .arg(&file)
        .env("NO_COLOR", "1")
        .output()
        .expect("the tfc binary runs");
    let stdout = String::from_utf8(o.stdout).expect("the samples are ASCII");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "gpt.tfl failed:\n{stdout}\n{stderr}");
    assert!(stderr.contains(&format!("step {STEPS}")) && stderr.contains("val_loss"), "{stderr}");

    let before = loss_after(&stdout, "held-out loss before training");
    let after = loss_after(&stdout, &format!("held-out loss after {STEPS} steps"));
    // Random logits over 128 classes start near ln 128 = 4.85.
    assert!((4.0..7.0).contains(&before), "held-out loss before training: {before}");
    assert!(after < before - 0.3, "the held-out loss did not fall: {before} -> {after}");

    let mut rest = &stdout[stdout.find("=== prompt 1\n").unwrap_or_else(|| panic!("no samples:\n{stdout}"))..];
    for k in 1..=3 {
        let marker = format!("=== prompt {k}\n");
        rest = rest.strip_prefix(marker.as_str()).unwrap_or_else(|| panic!("no `{marker}` at:\n{rest}"));
        let (prompt, after_prompt) = split_chars(rest, CONTEXT);
        assert!(text.contains(prompt), "prompt {k} is not text of the corpus: {prompt:?}");
        let marker = format!("\n=== sample {k}\n");
        rest = after_prompt.strip_prefix(marker.as_str()).unwrap_or_else(|| panic!("no `{marker}` at:\n{rest}"));
        let (sample, after_sample) = split_chars(rest, CHARS);
        assert_eq!(sample.chars().count(), CHARS, "sample {k}: {sample:?}");
        rest = after_sample.strip_prefix('\n').unwrap_or_else(|| panic!("sample {k} is longer: {rest:?}"));
    }
    assert_eq!(rest, "", "more output after the samples");
    let _ = std::fs::remove_dir_all(&dir);
}
