//! Shared test helpers: a scratch directory per test (also used by
//! tests/training.rs), running the `tfc` binary in it, and writers for small
//! data files in the binary formats of §8 (IDX, npy, npz, gzip) so that
//! every pipeline test builds exactly the (possibly corrupted) file it needs.
#![allow(dead_code)]

pub mod backends;
pub mod props;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch directory, removed when the test passes and kept when it fails.
pub struct Scratch(pub PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn scratch(test: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("tfc-test-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    Scratch(dir)
}

pub fn put(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write a scratch file");
    path
}

/// The result of one `tfc run`.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Writes `program` to `main.tfl` in `dir` and runs it there with `extra` flags.
pub fn run(dir: &Path, program: &str, extra: &[&str]) -> Run {
    put(dir, "main.tfl", program.as_bytes());
    let args: Vec<&std::ffi::OsStr> =
        std::iter::once("run").chain(extra.iter().copied()).chain(["main.tfl"]).map(std::ffi::OsStr::new).collect();
    tfc(dir, &args)
}

/// Runs the `tfc` binary in `dir` with `args` (colours off).
pub fn tfc(dir: &Path, args: &[&std::ffi::OsStr]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run tfc");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `program` and expects success; returns its standard output.
pub fn ok(dir: &Path, program: &str) -> String {
    let r = run(dir, program, &[]);
    assert_eq!(r.code, Some(0), "tfc failed:\n{}", r.stderr);
    r.stdout
}

/// Runs `program` and expects a failure whose message holds every `needle`.
pub fn fails(dir: &Path, program: &str, needles: &[&str]) -> String {
    let r = run(dir, program, &[]);
    assert_eq!(r.code, Some(1), "expected exit 1, got {:?}\nstdout:\n{}\nstderr:\n{}", r.code, r.stdout, r.stderr);
    // The renderer wraps long messages; compare against the text unwrapped.
    let flat: String = r
        .stderr
        .lines()
        .map(|l| l.trim_start_matches(|c: char| c.is_whitespace() || c == '│'))
        .collect::<Vec<_>>()
        .join(" ");
    for n in needles {
        assert!(flat.contains(n), "the diagnostic lacks `{n}`:\n{}", r.stderr);
    }
    assert!(!r.stderr.contains("panicked"), "tfc panicked:\n{}", r.stderr);
    r.stderr
}

/// An IDX file: magic with `dtype` byte, big-endian dims, then `data`.
pub fn idx(dtype: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, dtype, dims.len() as u8];
    for d in dims {
        b.extend(d.to_be_bytes());
    }
    b.extend(data);
    b
}

/// A version-1 `.npy` file.
pub fn npy(descr: &str, shape: &[usize], fortran: bool, data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let order = if fortran { "True" } else { "False" };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {tuple}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((h.len() as u16).to_le_bytes());
    b.extend(h.as_bytes());
    b.extend(data);
    b
}

/// A zip archive of `members`, deflated or stored.
pub fn zip(members: &[(&str, Vec<u8>)], deflate: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let body = if deflate {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).expect("deflate");
            e.finish().expect("deflate")
        } else {
            data.clone()
        };
        let method: u16 = if deflate { 8 } else { 0 };
        let offset = out.len() as u32;
        let common = |b: &mut Vec<u8>| {
            b.extend(20u16.to_le_bytes());
            b.extend(0u16.to_le_bytes());
            b.extend(method.to_le_bytes());
            b.extend([0u8; 4]);
            b.extend(crc.sum().to_le_bytes());
            b.extend((body.len() as u32).to_le_bytes());
            b.extend((data.len() as u32).to_le_bytes());
            b.extend((name.len() as u16).to_le_bytes());
            b.extend(0u16.to_le_bytes());
        };
        out.extend(0x0403_4b50u32.to_le_bytes());
        common(&mut out);
        out.extend(name.as_bytes());
        out.extend(&body);
        central.extend(0x0201_4b50u32.to_le_bytes());
        central.extend(20u16.to_le_bytes());
        common(&mut central);
        central.extend([0u8; 6]);
        central.extend(0u32.to_le_bytes());
        central.extend(offset.to_le_bytes());
        central.extend(name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    out.extend(&central);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend(cd_offset.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}

pub fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The Python that has the packages of `.ci/requirements-tests.txt` (ONNX,
/// ONNX Runtime, TensorBoard), which tests use to read tfc's files with
/// those tools' own readers: `$TFC_TEST_PYTHON`, else `.venv-tests` in the
/// repository (`.ci/run` creates it). `None` when there is none; under
/// `CI=true` a missing venv fails the test instead, so a lost install step
/// cannot turn these tests into silent skips.
pub fn test_python() -> Option<PathBuf> {
    let candidate = match std::env::var_os("TFC_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-tests/bin/python"),
    };
    if candidate.exists() {
        return Some(candidate);
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !in_ci,
        "CI=true but no Python for the interchange tests at {}: run .ci/run's venv step",
        candidate.display()
    );
    eprintln!(
        "note: no Python venv at {}; skipping the check with Python's readers (.ci/run creates it)",
        candidate.display()
    );
    None
}

/// Runs `script` with the test Python and `args`; panics with its output if
/// it fails.
pub fn python(python: &Path, script: &str, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(python).arg("-c").arg(script).args(args).output().expect("run the test Python");
    assert!(
        out.status.success(),
        "the Python check failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A line fit that logs (tests/plot.rs, tests/tensorboard_log.rs): `LR` is
/// the learning rate and `LOG` the log setting, filled in per run; a metric
/// every 2 epochs, 6 epochs of 4 batches.
pub const LOGGED_LINE_FIT: &str = r#"
use std.loss.mse
use std.optim.sgd
use std.metrics.mean_loss

model Line {
    param w: f32[1, 1] = zeros()
    param b: f32[1] = zeros()
    fn forward(x: f32[B, 1]) -> f32[B, 1] = x @ w + b
}
let xs = reshape(linspace(-1.0, 1.0, 16), [16, 1])
let data = from_tensors(xs, 3.0 * xs + 0.5)
fn line_loss(net, ds) = mean_loss(net, ds, mse)
let net = Line()
train net on data |> shuffle(16, seed = 1) |> batch(4) {
    loss(x, y) = mse(net(x), y)
    optimizer = sgd(lr = LR)
    epochs = 6
    eval line_loss on data |> batch(16) every 2 epochs
    LOG
}
"#;

/// A 784-64-10 MLP trained for `epochs` with Adam on `x.npy` (`f32[N, 784]`)
/// and `y.npy` (`i32[N]` labels) in the test's directory, followed by
/// `tail` (tests/onnx_export.rs, tests/onnx_import.rs: an `export fn` and
/// what to print).
pub fn trained_mlp(epochs: usize, tail: &str) -> String {
    format!(
        r#"
use std.nn.{{Dense}}
use std.loss.{{softmax_cross_entropy}}
use std.optim.{{adam}}
model MLP {{
    l1 = Dense(784, 64, act = relu)
    l2 = Dense(64, 10)
    fn forward(x) = l2(l1(x))
}}
let net = MLP()
let x = collect(load_npy("x.npy"))
let y = collect(load_npy("y.npy"))
train net on from_tensors(x, y) |> batch(8) {{
    loss(x, y) = softmax_cross_entropy(net(x), y)
    optimizer = adam(lr = 1e-2)
    epochs = {epochs}
}}
{tail}"#
    )
}

/// Deterministic inputs in [-1, 1) (a small LCG: no Python needed).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The digits data (`digits`, features scaled to [0, 1]) and the MLP of
/// examples/digits_mlp.tfl, with the imports both need.
pub fn digits_model() -> String {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/digits.csv.gz");
    format!(
        r#"use std.nn.{{Dense}}
use std.loss.softmax_cross_entropy
use std.optim.adam
use std.metrics.{{accuracy, mean_loss}}
model Mlp {{
    l1 = Dense(64, 128, act = relu)
    l2 = Dense(128, 10)
    fn forward(x: f32[B, 64]) -> f32[B, 10] = x |> l1 |> l2
}}
let digits = load_csv("{}", label = -1) |> map(fn(x, y) = (x / 16.0, y))
"#,
        data.display()
    )
}

/// Writes `program` to `main.tfl` in `dir` and runs it with `args` and the
/// environment `env` (`TFC_ISA` removed unless `env` sets it).
pub fn run_with(dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    put(dir, "main.tfl", program.as_bytes());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tfc"));
    cmd.current_dir(dir).arg("run").args(args).arg("main.tfl").env("NO_COLOR", "1").env_remove("TFC_ISA");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run tfc");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `digits_model()`, split 80/20 (`train_set`, `test_set`), and `net`
/// trained on it for `epochs` with Adam (lr 1e-3, batches of 64), with
/// `settings` added to the train block.
pub fn digits_trained(epochs: usize, settings: &str) -> String {
    format!(
        r#"{}
let (train_set, test_set) = split(digits, 0.8, seed = 0)
let net = Mlp(seed = 42)
train net on train_set |> shuffle(1024, seed = 1) |> batch(64) {{
    loss(x, y) = softmax_cross_entropy(net(x), y)
    optimizer = adam(lr = 1e-3)
    epochs = {epochs}
    {settings}
}}
"#,
        digits_model()
    )
}

/// A feature of a `tf.train.Example`, for `tfrecord`.
pub enum Feature {
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Bytes(Vec<Vec<u8>>),
}

/// TFRecord bytes of one `tf.train.Example` per entry of `examples`
/// (features by name), with correct masked CRC-32Cs. Floats and ints are
/// written packed, as TensorFlow writes them.
pub fn tfrecord(examples: &[Vec<(&str, Feature)>]) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    /// A length-delimited field (wire type 2).
    fn field(out: &mut Vec<u8>, number: u64, payload: &[u8]) {
        varint(out, (number << 3) | 2);
        varint(out, payload.len() as u64);
        out.extend_from_slice(payload);
    }
    fn masked_crc32c(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
            }
        }
        (!crc).rotate_right(15).wrapping_add(0xa282_ead8)
    }
    let mut out = Vec::new();
    for example in examples {
        let mut features = Vec::new();
        for (name, feature) in example {
            let (mut list, mut values) = (Vec::new(), Vec::new());
            let kind = match feature {
                Feature::Bytes(items) => {
                    items.iter().for_each(|b| field(&mut list, 1, b));
                    1
                }
                Feature::Floats(v) => {
                    v.iter().for_each(|x| values.extend(x.to_le_bytes()));
                    field(&mut list, 1, &values);
                    2
                }
                Feature::Ints(v) => {
                    v.iter().for_each(|&x| varint(&mut values, x as u64));
                    field(&mut list, 1, &values);
                    3
                }
            };
            let (mut value, mut entry) = (Vec::new(), Vec::new());
            field(&mut value, kind, &list);
            field(&mut entry, 1, name.as_bytes());
            field(&mut entry, 2, &value);
            field(&mut features, 1, &entry);
        }
        let mut record = Vec::new();
        field(&mut record, 1, &features);
        let len = (record.len() as u64).to_le_bytes();
        out.extend(len);
        out.extend(masked_crc32c(&len).to_le_bytes());
        out.extend(&record);
        out.extend(masked_crc32c(&record).to_le_bytes());
    }
    out
}
