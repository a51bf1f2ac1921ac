//! Running whole programs on two backends and comparing what they print
//! (tests/jit.rs: the CPU backend, tests/gpu.rs: the GPU backend, each
//! against the reference interpreter).
//!
//! Tolerance: printed text must match token by token, except numbers, which
//! agree when `|a - b| <= 1e-3 * max(|a|, |b|) + 1e-4` (printed values
//! carry 4–6 significant digits; products sum in another order and
//! `exp`/`log`/`tanh` are a few ulps from libm, so a training run drifts in
//! the last printed digit at most).

use std::path::{Path, PathBuf};
use tfc::backend::BackendKind as Backend;
use tfc::driver::Session;
use tfc::runtime::exec::{execute, RunOptions};

/// Prints of `source` (named `name`, so relative paths resolve beside it).
pub fn run(name: &Path, source: &str, backend: Backend, optimize: bool) -> Result<String, String> {
    let mut session = Session::new();
    let file = session.add_source(&name.to_string_lossy(), source);
    let mut opts = tfc::passes::Options { target: backend.target(), ..Default::default() };
    if !optimize {
        let keep: &[&str] = if backend != Backend::Interp { &["partition", "schedule", "memory_plan"] } else { &[] };
        opts.disabled = tfc::passes::names().into_iter().filter(|n| !keep.contains(n)).map(String::from).collect();
    }
    let program = session.compile(file, &opts).map_err(|d| format!("{:?}", d[0].code))?;
    let mut out = Vec::new();
    let options = RunOptions { base_dir: session.base_dir(file), backend, ..RunOptions::default() };
    let result = execute(&program, &mut out, options);
    let text = String::from_utf8_lossy(&out).into_owned();
    match result {
        Ok(()) => Ok(text),
        Err(d) => Err(format!("{text}\nerror {:?}: {}", d.code, d.message)),
    }
}

/// Splits text into number and non-number tokens.
pub fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts_number = c.is_ascii_digit() || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()));
        if starts_number {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            let mut j = i + 1;
            while j < chars.len() {
                let d = chars[j];
                let exp_sign = (d == '-' || d == '+') && matches!(chars[j - 1], 'e' | 'E');
                if d.is_ascii_digit() || d == '.' || d == 'e' || d == 'E' || exp_sign {
                    j += 1;
                } else {
                    break;
                }
            }
            out.push(chars[i..j].iter().collect());
            i = j;
        } else {
            cur.push(c);
            i += 1;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

pub fn same_values(jit: &str, interp: &str) -> Result<(), String> {
    same_values_within(jit, interp, 1e-3)
}

/// `same_values` with numbers agreeing to `rel` relative (plus 1e-4).
pub fn same_values_within(jit: &str, interp: &str, rel: f64) -> Result<(), String> {
    let (a, b) = (tokens(jit), tokens(interp));
    if a.len() != b.len() {
        return Err(format!("different output shapes:\n--- jit\n{jit}\n--- interp\n{interp}"));
    }
    for (x, y) in a.iter().zip(&b) {
        match (x.parse::<f64>(), y.parse::<f64>()) {
            (Ok(p), Ok(q)) => {
                if !((p - q).abs() <= rel * p.abs().max(q.abs()) + 1e-4 || (p.is_nan() && q.is_nan())) {
                    return Err(format!("{x} (jit) vs {y} (interp)\n--- jit\n{jit}\n--- interp\n{interp}"));
                }
            }
            _ if x == y => {}
            _ => return Err(format!("`{x}` (jit) vs `{y}` (interp)\n--- jit\n{jit}\n--- interp\n{interp}")),
        }
    }
    Ok(())
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn tfl_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tfl"))
        .collect();
    files.sort();
    files
}

/// Every run case (`tests/cases/run`) with its source.
pub fn run_cases() -> Vec<(PathBuf, String)> {
    let files: Vec<(PathBuf, String)> = tfl_files(&root().join("tests/cases/run"))
        .into_iter()
        .map(|p| {
            let s = std::fs::read_to_string(&p).unwrap();
            (p, s)
        })
        .collect();
    assert!(files.len() > 20, "run cases not found");
    files
}

/// The examples of each folder of `dirs` (relative to the repository),
/// `shorten`ed, each placed in a scratch folder under `tmp` (`tmp` itself
/// for the first) whose `data` is the example folder's, so relative data
/// paths resolve as they do in place and checkpoints stay out of
/// `examples/out`.
pub fn shortened_examples(tmp: &Path, dirs: &[&str]) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for (k, dir) in dirs.iter().enumerate() {
        let scratch = match k {
            0 => tmp.to_path_buf(),
            _ => tmp.join(Path::new(dir).file_name().unwrap()),
        };
        std::fs::create_dir_all(&scratch).unwrap();
        let data = scratch.join("data");
        if !data.exists() {
            std::os::unix::fs::symlink(root().join(dir).join("data"), &data).unwrap();
        }
        for p in tfl_files(&root().join(dir)) {
            let source = shorten(&std::fs::read_to_string(&p).unwrap());
            files.push((scratch.join(p.file_name().unwrap()), source));
        }
    }
    files
}

/// Caps `epochs = N` at 2 and every `load_idx` source (MNIST) at its first
/// 2000 elements, so the interpreter's side of the comparison stays short.
pub fn shorten(source: &str) -> String {
    let epochs = source
        .lines()
        .map(|l| match l.trim().strip_prefix("epochs = ").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if n > 2 => l.replace(&format!("epochs = {n}"), "epochs = 2"),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = epochs.as_str();
    while let Some(at) = rest.find("load_idx(") {
        let close = at + rest[at..].find(')').expect("a load_idx call closes on its line");
        out.push_str(&rest[..=close]);
        out.push_str(" |> take(2000)");
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Runs every file on `backend` (optimized, and also at `-O0` with
/// `unoptimized`) and on the interpreter, and fails listing every program
/// whose prints differ beyond `rel` (`same_values_within`).
pub fn compare_all(files: &[(PathBuf, String)], backend: Backend, unoptimized: bool, rel: f64) {
    let mut failures = Vec::new();
    for (path, source) in files {
        let interp = run(path, source, Backend::Interp, true);
        for optimize in [true, false].into_iter().filter(|&o| o || unoptimized) {
            let compiled = run(path, source, backend, optimize);
            let verdict = match (&compiled, &interp) {
                (Ok(a), Ok(b)) => same_values_within(a, b, rel),
                (Err(a), Err(b)) => same_values_within(a, b, rel),
                (a, b) => Err(format!("{}: {a:?}\ninterp: {b:?}", backend.name())),
            };
            if let Err(why) = verdict {
                failures.push(format!("=== {} (optimized: {optimize}): {why}", path.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n\n"));
}

/// The run cases, examples and zoo benchmarks that have a training step,
/// metric or `map` kernel the plan for `backend` leaves to the host
/// interpreter (what `--strict` refuses), each with those kernels' ops,
/// sorted: the record of what a backend still lacks.
pub fn host_ops(backend: Backend) -> Vec<(String, Vec<String>)> {
    let mut files = tfl_files(&root().join("tests/cases/run"));
    for dir in ["examples", "examples/bench", "examples/zoo/bench"] {
        files.extend(tfl_files(&root().join(dir)));
    }
    let mut found: Vec<(String, Vec<String>)> = Vec::new();
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let mut session = Session::new();
        let file = session.add_source(&path.to_string_lossy(), &source);
        let opts = tfc::passes::Options { target: backend.target(), ..Default::default() };
        let Ok(program) = session.compile(file, &opts) else { continue };
        let mut ops: Vec<String> = tfc::passes::partition::host_kernels(&program)
            .iter()
            .filter_map(|d| d.message.strip_prefix('`')?.split('`').next().map(String::from))
            .collect();
        ops.sort();
        ops.dedup();
        if !ops.is_empty() {
            let rel = path.strip_prefix(root()).unwrap().to_string_lossy().into_owned();
            found.push((rel, ops));
        }
    }
    found.sort();
    found
}

/// `(file, ops)` pairs as `host_ops` gives them.
pub fn owned(pairs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    pairs.iter().map(|(f, ops)| (f.to_string(), ops.iter().map(|s| s.to_string()).collect())).collect()
}

/// Whether a GPU is here; fails under `CI=true` when none is.
#[cfg(feature = "gpu")]
pub fn gpu_here() -> bool {
    match tfc::backend::gpu::device::gpu() {
        Ok(gpu) => {
            eprintln!("GPU: {}", gpu.describe());
            true
        }
        Err(d) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI must run the GPU tests (apt-get install mesa-vulkan-drivers libvulkan1): {}", d.message)
        }
        Err(d) => {
            eprintln!("skipped: no GPU on this machine ({})", d.message);
            false
        }
    }
}
