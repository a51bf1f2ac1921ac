//! No input makes tfc panic: every case file and example, and many
//! deterministic mutations of each (deleted, duplicated and swapped byte
//! ranges, inserted tokens, truncations), go through parse → resolve →
//! trace. Every outcome is fine except a panic (or an internal error, which
//! is a bug by definition).

use tfc::diag::Code;
use tfc::driver::Session;

/// Tokens that tend to reach unusual parser and checker states.
const TOKENS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "|>",
    ".",
    "@",
    "^",
    "-",
    "not ",
    " and ",
    "=",
    "\n",
    ";",
    "0",
    "-1",
    "1e999",
    "99999999999999999999",
    "f32[",
    "_",
    "...",
    "::",
    "fn(x) = x",
    "let ",
    "model M { }",
    "if true { 1 } else { 2 }",
    "for i in 0..3 { x = x }",
    "..",
    "[m for m in (1, 2)]",
    "\"",
    "\\",
    "//",
    "/*",
    "x",
    "zeros([0])",
    "[[1.0], [2.0, 3.0]]",
    "grad(",
    "train ",
    "seed = ",
    "axis = 99",
];

/// A small deterministic generator (SplitMix64), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(src: &str, rng: &mut Rng) -> String {
    let mut bytes = src.as_bytes().to_vec();
    let n = bytes.len();
    let a = rng.below(n + 1);
    let b = (a + rng.below(16)).min(n);
    match rng.below(5) {
        0 => {
            bytes.drain(a..b);
        }
        1 => {
            let piece: Vec<u8> = bytes[a..b].to_vec();
            let at = rng.below(bytes.len() + 1);
            bytes.splice(at..at, piece);
        }
        2 => {
            let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
            bytes.splice(a..a, t.iter().copied());
        }
        3 => bytes.truncate(a),
        _ => {
            let c = rng.below(n + 1);
            let d = (c + (b - a)).min(n);
            if b <= c {
                let second: Vec<u8> = bytes[c..d].to_vec();
                let first: Vec<u8> = bytes[a..b].to_vec();
                bytes.splice(c..d, first);
                bytes.splice(a..b, second);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn corpus() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["tests/cases", "examples", "std"] {
        collect(&root.join(dir), &mut files);
    }
    files.sort();
    files.into_iter().map(|p| (p.display().to_string(), std::fs::read_to_string(&p).unwrap_or_default())).collect()
}

fn collect(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "tfl") {
            out.push(p);
        }
    }
}

fn check_no_internal_error(name: &str, src: &str) {
    let mut session = Session::new();
    let file = session.add_source(name, src);
    if let Err(diags) = session.check(file) {
        let internal: Vec<_> = diags.iter().filter(|d| d.code == Code::Internal).collect();
        assert!(internal.is_empty(), "internal error on input {name}:\n{src}\n{internal:?}");
    }
}

#[test]
fn every_case_and_example_checks_without_panicking() {
    for (name, src) in corpus() {
        check_no_internal_error(&name, &src);
    }
}

#[test]
fn mutated_programs_never_panic() {
    let corpus = corpus();
    assert!(corpus.len() > 10, "the corpus is missing");
    let mut rng = Rng(0x7fc0_2026);
    let mut checked = 0;
    for (name, src) in &corpus {
        for round in 0..24 {
            let mut m = mutate(src, &mut rng);
            if round % 3 == 2 {
                m = mutate(&m, &mut rng);
            }
            check_no_internal_error(&format!("{name} (mutation {round})"), &m);
            checked += 1;
        }
    }
    assert!(checked >= corpus.len() * 24);
}
