//! `tfc build FILE --emit onnx -o FILE.onnx`: trained models written as
//! ONNX and run by ONNX Runtime, whose outputs must match what `tfc`
//! prints for the same inputs (an MLP, a CNN with BatchNorm, a causal
//! transformer block over token ids, and a function over many of the other
//! ops), and the diagnostics for exports that cannot be written.
//!
//! The ONNX check uses the test venv's `onnx` (the checker, with shape
//! inference) and `onnxruntime` (tests/support `test_python`); inputs are
//! `.npy` files the test writes, read by the program with `load_npy` and by
//! Python with NumPy.

mod support;

use std::path::Path;
use std::process::Command;
use support::{npy, put, scratch, test_python, values};

fn f32_npy(dir: &Path, name: &str, shape: &[usize], seed: u64) {
    let data: Vec<u8> = values(shape.iter().product(), seed).iter().flat_map(|v| v.to_le_bytes()).collect();
    put(dir, name, &npy("<f4", shape, false, &data));
}

fn i32_npy(dir: &Path, name: &str, shape: &[usize], below: i32, seed: u64) {
    let data: Vec<u8> = values(shape.iter().product(), seed)
        .iter()
        .flat_map(|v| (((v + 1.0) / 2.0 * below as f32) as i32).min(below - 1).to_le_bytes())
        .collect();
    put(dir, name, &npy("<i4", shape, false, &data));
}

/// Runs `tfc build main.tfl --emit onnx -o model.onnx` (plus `extra`) in
/// `dir`; returns (exit code, stdout, stderr).
fn build(dir: &Path, program: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    put(dir, "main.tfl", program.as_bytes());
    let out = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .current_dir(dir)
        .args(["build", "main.tfl", "--emit", "onnx", "-o", "model.onnx", "--threads", "1"])
        .args(extra)
        .env("NO_COLOR", "1")
        .output()
        .expect("run tfc");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Checks the model with ONNX's checker and runs it in ONNX Runtime on the
/// named `.npy` inputs; each of its outputs must match the tfc-printed
/// line of the same index (`f32[…] [[…]]`, printed with `full = true`)
/// within `tol` (relative to 1 + |value|). Returns the ONNX operator types
/// and initializer names, for the callers' own checks.
fn check_with_onnx_runtime(dir: &Path, inputs: &[(&str, &str)], printed: &str, tol: f64) -> String {
    let Some(python) = test_python() else { return String::new() };
    put(dir, "tfc_out.txt", printed.as_bytes());
    let feeds: Vec<String> = inputs.iter().map(|(name, file)| format!("{name}={file}")).collect();
    let script = r#"
import json, os, sys, numpy as np, onnx, onnxruntime as ort
os.chdir(sys.argv[1]); del sys.argv[1]
model = onnx.load("model.onnx")
onnx.checker.check_model(model, full_check=True)
so = ort.SessionOptions(); so.intra_op_num_threads = 1
sess = ort.InferenceSession("model.onnx", so, providers=["CPUExecutionProvider"])
feeds = {k: np.load(v) for k, v in (a.split("=") for a in sys.argv[2:])}
outs = sess.run(None, feeds)
lines = [l for l in open("tfc_out.txt").read().splitlines() if l.strip()]
assert len(lines) >= len(outs), (lines, len(outs))
tol = float(sys.argv[1])
for got, line in zip(outs, lines[-len(outs):]):
    head, _, rest = line.partition(" ")
    body = line.partition("] ")[2] if "[" in head else rest
    body = body.replace("true", "1").replace("false", "0")
    want = np.array(json.loads(body), dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.max(np.abs(got - want) / (1 + np.abs(want))) if want.size else 0.0
    assert err <= tol, f"ONNX Runtime differs from tfc by {err} (tol {tol})"
# An open batch size: the model runs on any batch, here all rows but one.
dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
if all(isinstance(d[0], str) for d in dims.values()):
    rows = len(next(iter(feeds.values()))) - 1
    part = sess.run(None, {k: v[:rows] for k, v in feeds.items()})
    for small, full in zip(part, outs):
        assert small.shape[0] == rows and np.allclose(small, full[:rows], rtol=1e-5, atol=1e-6), (small, full[:rows])
    print("open batch:", " ".join(f"{k}={d}" for k, d in sorted(dims.items())))
print("ops:", " ".join(n.op_type for n in model.graph.node))
print("initializers:", " ".join(i.name for i in model.graph.initializer))
"#;
    let tol = tol.to_string();
    let mut args: Vec<&std::ffi::OsStr> = vec![dir.as_os_str(), std::ffi::OsStr::new(&tol)];
    args.extend(feeds.iter().map(std::ffi::OsStr::new));
    support::python(&python, script, &args)
}

#[test]
fn a_trained_mlp_runs_in_onnx_runtime_with_tfcs_outputs() {
    let dir = scratch("onnx-mlp");
    f32_npy(&dir, "x.npy", &[16, 784], 1);
    i32_npy(&dir, "y.npy", &[16], 10, 2);
    let program = support::trained_mlp(
        2,
        "export fn predict(x: f32[B, 784]) -> f32[B, 10] = softmax(net(x))\nprint(predict(x), full = true)\n",
    );
    let (code, stdout, stderr) = build(&dir, &program, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let info = check_with_onnx_runtime(&dir, &[("x", "x.npy")], &stdout, 1e-5);
    if !info.is_empty() {
        let line = |p: &str| info.lines().find_map(|l| l.strip_prefix(p)).unwrap_or_else(|| panic!("{info}"));
        assert!(line("ops: ").starts_with("MatMul Add Relu MatMul Add"), "{info}");
        // The trained weights, named by their paths in the model.
        for name in ["l1.w", "l1.b", "l2.w", "l2.b"] {
            assert!(line("initializers: ").split(' ').any(|i| i == name), "no initializer {name} in {info}");
        }
        assert_eq!(line("open batch: "), "x=['B', 784]");
    }
}

#[test]
fn a_cnn_with_batch_norm_runs_in_onnx_runtime_with_tfcs_outputs() {
    let dir = scratch("onnx-cnn");
    f32_npy(&dir, "x.npy", &[8, 12, 12, 1], 3);
    i32_npy(&dir, "y.npy", &[8], 10, 4);
    let program = r#"
use std.nn.{Conv2d, BatchNorm, MaxPool2d, Flatten, Dense, GlobalAvgPool}
use std.loss.{softmax_cross_entropy}
use std.optim.{adam}
model CNN {
    c1 = Conv2d(1, 8, kernel = 3)
    bn = BatchNorm(8)
    c2 = Conv2d(8, 8, kernel = 3, stride = 2, padding = "valid")
    fc = Dense(8 + 8, 10)
    fn forward(x) {
        let h = max_pool2d(relu(bn(c1(x))), 2)
        let g = avg_pool2d(relu(c2(h)), 2, padding = "same")
        fc(concat((Flatten()(g), GlobalAvgPool()(h)), axis = 1))
    }
}
let net = CNN()
let x = collect(load_npy("x.npy"))
let y = collect(load_npy("y.npy"))
train net on from_tensors(x, y) |> batch(4) {
    loss(x, y) = softmax_cross_entropy(net(x), y)
    optimizer = adam(lr = 1e-2)
    epochs = 2
}
export fn predict(x: f32[N, 12, 12, 1]) = (net(x), argmax(net(x), axis = 1))
let (logits, classes) = predict(x)
print(logits, full = true)
print(classes, full = true)
"#;
    let (code, stdout, stderr) = build(&dir, program, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let info = check_with_onnx_runtime(&dir, &[("x", "x.npy")], &stdout, 1e-4);
    if !info.is_empty() {
        for op in ["Conv", "MaxPool", "AveragePool", "ArgMax", "Concat"] {
            assert!(info.lines().any(|l| l.starts_with("ops: ") && l.split(' ').any(|o| o == op)), "no {op} in {info}");
        }
        assert!(info.contains("open batch: x=['N', 12, 12, 1]"), "{info}");
    }
}

#[test]
fn a_causal_transformer_block_over_token_ids_runs_in_onnx_runtime() {
    let dir = scratch("onnx-gpt");
    i32_npy(&dir, "ids.npy", &[2, 8], 20, 5);
    let program = r#"
use std.nn.{Embedding, TransformerBlock, LayerNorm, Dense}
model Tiny {
    tok = Embedding(20, 16)
    pos = Embedding(8, 16)
    block = TransformerBlock(16, 2, 32)
    ln = LayerNorm(16)
    head = Dense(16, 20)
    fn forward(ids) = head(ln(block(tok(ids) + pos(arange(8)))))
}
let net = Tiny()
let ids = collect(load_npy("ids.npy"))
export fn logits(ids: i32[B, 8]) = log_softmax(net(ids))
print(logits(ids), full = true)
"#;
    let (code, stdout, stderr) = build(&dir, program, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let info = check_with_onnx_runtime(&dir, &[("ids", "ids.npy")], &stdout, 1e-5);
    assert!(info.is_empty() || info.contains("open batch: ids=['B', 8]"), "{info}");
}

#[test]
fn elementwise_shape_and_reduction_ops_match_onnx_runtime() {
    let dir = scratch("onnx-ops");
    f32_npy(&dir, "a.npy", &[3, 4], 6);
    i32_npy(&dir, "k.npy", &[3, 4], 7, 7);
    let program = r#"
let a = collect(load_npy("a.npy"))
let k = collect(load_npy("k.npy"))
export fn ops(a: f32[3, 4], k: i32[3, 4]) {
    let b = a * 3.0
    let m = b % 0.7 + cast(k % 3, f32) + cast(one_hot(k, 7), f32)[:, :, 2]
    let r = round(b) + ceil(b) - floor(b) + sign(b) + abs(b)
    let s = log1p(abs(a)) + expm1(a) + rsqrt(abs(a) + 1.0) + erf(a) + sin(a) * cos(a) + sigmoid(a) + tanh(a)
    let w = where(a > 0.0 and k != 3, exp(a), -sqrt(abs(a)))
    let c = concat((a[::-1, 1:3], transpose(transpose(a, [1, 0])[::-2, :], [1, 0]) ^ 2.0), axis = 1)
    let p = pad(a, [1, 0, 0, 2], value = 0.5)
    (m + r + s + w, c, cumsum(a, axis = 1), prod(a, axis = 0), min(a, axis = 1, keepdims = true), p,
     maximum(a, 0.25) - minimum(a, -0.25), mean(variance(a, axis = 0)), cast(k, f32) / 7.0,
     (k - 3) / 2 + (3 - k) / -2 + k ^ 2, argsort(a, axis = 1), sort(a, axis = 0, descending = true))
}
let (o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11, o12) = ops(a, k)
print(o1, full = true)
print(o2, full = true)
print(o3, full = true)
print(o4, full = true)
print(o5, full = true)
print(o6, full = true)
print(o7, full = true)
print(o8, full = true)
print(o9, full = true)
print(o10, full = true)
print(o11, full = true)
print(o12, full = true)
"#;
    let (code, stdout, stderr) = build(&dir, program, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    check_with_onnx_runtime(&dir, &[("a", "a.npy"), ("k", "k.npy")], &stdout, 1e-5);
}

/// `(exit code, stderr)` of a build that must fail, after checking that
/// no model file was left behind.
fn refused(dir: &Path, program: &str, extra: &[&str], needles: &[&str]) {
    let (code, _, stderr) = build(dir, program, extra);
    assert_eq!(code, Some(1), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "`{n}` not in:\n{stderr}");
    }
    assert!(!dir.join("model.onnx").exists(), "a failed export left model.onnx behind");
}

#[test]
fn exports_that_cannot_be_written_are_diagnostics() {
    let dir = scratch("onnx-bad");
    refused(&dir, "print(1)\n", &[], &["E0340", "exports no function"]);
    let two = "export fn f(x: f32[2]) = x * 2.0\nexport fn g(x: f32[2]) = x + 1.0\n";
    refused(&dir, two, &[], &["E0312", "several", "`f`, `g`"]);
    refused(&dir, two, &["--export", "h"], &["E0312", "no function `h`"]);
    let (code, _, stderr) = build(&dir, two, &["--export", "g"]);
    assert_eq!(code, Some(0), "{stderr}");
    let model = std::fs::read(dir.join("model.onnx")).expect("--export g writes the model");
    // The graph is named after the export, and it adds (g) rather than doubles (f).
    assert!(model.windows(3).any(|w| w == b"\x12\x01g") && model.windows(3).any(|w| w == b"Add"), "{model:?}");
    std::fs::remove_file(dir.join("model.onnx")).unwrap();
    refused(&dir, "export fn f(x) = x * 2.0\n", &[], &["E0340", "parameter `x` of exported `f` has no type"]);
    refused(&dir, "export fn f(x: f32[B, T]) = x * 2.0\n", &[], &["E0340", "two sizes open, `B` and `T`"]);
    let half = "export fn f(x: f32[B, 2]) = concat((x, x), axis = 0)[0:B]\n";
    refused(&dir, half, &[], &["E0341", "cannot keep `B` open: it slices part of axis 0"]);
    refused(&dir, "export fn f(x: f32[B, 2]) = x / B\n", &[], &["E0341", "depends on `B`"]);
    refused(&dir, "export fn f(x: f32[B, 2]) = pad(x, [0, 1, 0, 0])\n", &[], &["E0341", "not a multiple of `B`"]);
    refused(&dir, "export fn f(n: int) = n\n", &[], &["E0340", "is not a tensor"]);
    refused(&dir, "export fn f(x: f32[2]) = 3\n", &[], &["E0340", "returns tensors"]);
    refused(&dir, "export fn f(x: f32[2]) = x\nexport fn f(x: f32[3]) = x\n", &[], &["E0203", "exported twice"]);
    let scan = "export fn f(xs: f32[4, 2]) = scan(fn(c, x) = (c + x, c), zeros([2]), xs)[1]\n";
    refused(&dir, scan, &[], &["E0341", "`scan` loops are not exported yet", "exported here"]);
    refused(&dir, "export fn f(a: bool[2, 2]) = a @ a\n", &[], &["E0341", "matrix product of bools"]);
    // `--emit onnx` writes a binary file: it needs `-o`.
    put(&dir, "main.tfl", b"export fn f(x: f32[2]) = x\n");
    let out = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .current_dir(&*dir)
        .args(["build", "main.tfl", "--emit", "onnx"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-o FILE.onnx"));
    // A run that fails after the check writes nothing either.
    refused(&dir, "export fn f(x: f32[2]) = x\nassert_close(1.0, 2.0)\n", &[], &["E0401"]);
}

#[test]
fn an_exported_function_is_an_ordinary_function_in_tfc_run() {
    let dir = scratch("onnx-run");
    let out = support::ok(
        &dir,
        "export fn twice(x: f32[2]) = x * 2.0\nprint(twice([1.0, 2.0]))\nlet export = 3\nprint(export)\n",
    );
    assert_eq!(out, "f32[2] [2, 4]\n3\n");
}
