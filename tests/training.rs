//! Training end to end (§6–§9), through the `tfc` binary and the library
//! API: the examples learn what they claim, training is bit-for-bit
//! reproducible, checkpoints survive `kill -9` at any moment and `resume`
//! continues exactly, bad input fails with a clear diagnostic and a non-zero
//! exit without damaging a checkpoint already on disk, and `log` writes one
//! JSON object per epoch.
//!
//! Every test works in its own scratch directory (relative paths in a
//! program resolve against its file's directory), with a copy of the digits
//! data at `data/digits.csv.gz`. Tests about mechanics train small models
//! for a few epochs; only the two accuracy tests train the examples fully.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tfc::ir::{DType, Literal, TensorType};
use tfc::tensor::Tensor;

const DIGITS: &[u8] = include_bytes!("../examples/data/digits.csv.gz");

mod support;
use support::Scratch;

/// A scratch directory for one test, holding `data/digits.csv.gz`. It is
/// removed when the test passes and kept for inspection when it fails.
fn scratch(test: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("tfc-training-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).expect("create the scratch directory");
    std::fs::write(dir.join("data/digits.csv.gz"), DIGITS).expect("copy the digits data");
    Scratch(dir)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a scratch file");
    path
}

/// `tfc run [extra] file` in `dir`, as a user would type it there (so the
/// paths in diagnostics are short and relative).
fn tfc_command(dir: &Path, file: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tfc"));
    c.current_dir(dir).arg("run").args(extra).arg(file).env("NO_COLOR", "1");
    c
}

/// Runs `tfc run [extra] file` in `dir` to completion.
fn run(dir: &Path, file: &str, extra: &[&str]) -> Output {
    tfc_command(dir, file, extra).output().expect("the tfc binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Diagnostics are rendered 100 columns wide: joins the wrapped lines
/// (dropping the indentation and the `│` gutter) so that messages can be
/// matched as one line each.
fn unwrapped(text: &str) -> String {
    text.lines().map(|l| l.trim_start().trim_start_matches('│').trim()).collect::<Vec<_>>().join(" ")
}

fn assert_success(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "tfc failed:\n{}", stderr(o));
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The value of the last `print` of an `f32` scalar (`f32 0.975`).
fn printed_scalar(o: &Output) -> f64 {
    let out = stdout(o);
    let last = out.lines().last().unwrap_or_default();
    last.strip_prefix("f32 ")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("expected a printed f32 scalar, got {out:?}"))
}

/// Copies an example into `dir` (next to the copied data) and runs it there,
/// so whatever it writes stays out of the source tree.
fn run_example(dir: &Path, name: &str) -> Output {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name))
        .expect("read the example");
    write(dir, name, &text);
    run(dir, name, &[])
}

#[test]
fn digits_mlp_reaches_97_percent_test_accuracy() {
    let dir = scratch("mlp-accuracy");
    let o = run_example(&dir, "digits_mlp.tfl");
    assert_success(&o);
    let acc = printed_scalar(&o);
    assert!(acc >= 0.97, "digits_mlp test accuracy {acc} < 0.97");
    assert!(dir.join("out/mlp.safetensors").is_file(), "the example saves its weights");
    // Its checkpoint is a file of its own, which a rerun with `resume` can
    // start from (the final weights have no training step).
    let checkpoint = read(&dir.join("out/mlp_checkpoint.safetensors"));
    assert!(String::from_utf8_lossy(&checkpoint).contains("\"step\""), "the checkpoint records its step");
}

#[test]
fn digits_cnn_reaches_98_percent_test_accuracy() {
    let dir = scratch("cnn-accuracy");
    let o = run_example(&dir, "digits_cnn.tfl");
    assert_success(&o);
    let acc = printed_scalar(&o);
    assert!(acc >= 0.98, "digits_cnn test accuracy {acc} < 0.98");
}

#[test]
fn linear_regression_recovers_the_true_weights() {
    let dir = scratch("linear-regression");
    let o = run_example(&dir, "linear_regression.tfl");
    // The example's own assert_close checks the weights against the truth.
    assert_success(&o);
    assert!(stdout(&o).starts_with("f32[3, 1] "), "{}", stdout(&o));
}

#[test]
fn the_autoencoder_cuts_its_reconstruction_loss() {
    let dir = scratch("autoencoder");
    let o = run_example(&dir, "autoencoder.tfl");
    // The example asserts that the loss fell to under a quarter.
    assert_success(&o);
    assert!(stdout(&o).contains("reconstruction loss after"), "{}", stdout(&o));
}

/// A small MLP on 256 digits with dropout, shuffling and adam: every source
/// of randomness a training run has.
const SMALL_MLP: &str = r#"
use std.nn.{Dense, Dropout}
use std.loss.softmax_cross_entropy
use std.optim.adam
use std.metrics.accuracy

model Mlp {
    l1 = Dense(64, 32, act = relu)
    drop = Dropout(0.2, seed = 3)
    l2 = Dense(32, 10)
    fn forward(x: f32[B, 64]) -> f32[B, 10] = x |> l1 |> drop |> l2
}

let digits = load_csv("data/digits.csv.gz", label = -1)
    |> map(fn(x, y) = (x / 16.0, y))
    |> take(256)
let net = Mlp(seed = 5)
"#;

fn small_mlp_training(epochs: usize, settings: &str) -> String {
    format!(
        "{SMALL_MLP}
train net on digits |> shuffle(256, seed = 2) |> batch(32) {{
    loss(x, y) = softmax_cross_entropy(net(x), y)
    optimizer = adam(lr = 1e-3)
    epochs = {epochs}
{settings}
}}
save(net, \"final.safetensors\")
print(net.l2.w, full = true)
"
    )
}

#[test]
fn training_twice_gives_bit_identical_weights() {
    let program = small_mlp_training(3, "");
    let (a, b, c) = (scratch("determinism-a"), scratch("determinism-b"), scratch("determinism-c"));
    let runs: Vec<Output> = [&a, &b]
        .iter()
        .map(|dir| {
            write(dir, "train.tfl", &program);
            run(dir, "train.tfl", &[])
        })
        .collect();
    for o in &runs {
        assert_success(o);
    }
    assert_eq!(stdout(&runs[0]), stdout(&runs[1]), "printed weights differ between runs");
    let weights = read(&a.join("final.safetensors"));
    assert_eq!(weights, read(&b.join("final.safetensors")), "saved weights differ between runs");

    // The library API in this process gives the same bytes as the binary
    // (which optimizes and runs on the JIT by default).
    let file = write(&c, "train.tfl", &program);
    let mut session = tfc::driver::Session::new();
    let id = session.load_file(&file).expect("load the program");
    let compiled = session.compile(id, &tfc::passes::Options::default()).expect("the program compiles");
    let mut out = Vec::new();
    let options = tfc::runtime::exec::RunOptions {
        base_dir: session.base_dir(id),
        backend: tfc::backend::BackendKind::Jit,
        ..Default::default()
    };
    tfc::runtime::exec::execute(&compiled, &mut out, options).expect("the program runs");
    assert_eq!(String::from_utf8_lossy(&out), stdout(&runs[0]));
    assert_eq!(read(&c.join("final.safetensors")), weights, "the library run differs from the binary's");
}

#[test]
fn dropout_draws_a_new_mask_every_step() {
    // Two SGD steps on `sum(dropout(x * w))` with x = 1, rate 0.5 (kept
    // units are scaled by 2) and lr 0.25: each step lowers the kept weights
    // by 0.5. With one mask for both steps every weight would end at 0 or 1;
    // with a fresh mask per step, about half end at 0.5.
    let dir = scratch("dropout-masks");
    let program = r#"
use std.nn.{Dropout}
use std.optim.sgd
model M {
    param w: f32[256] = ones()
    drop = Dropout(0.5, seed = 1)
    fn forward(x: f32[B, 256]) -> f32[B, 256] = drop(x * w)
}
let net = M(seed = 0)
train net on from_tensors(ones([2, 256]), ones([2, 256])) |> batch(1) {
    loss(x, y) = sum(net(x))
    optimizer = sgd(lr = 0.25)
}
print(net.w, full = true)
"#;
    write(&dir, "dropout.tfl", program);
    let o = run(&dir, "dropout.tfl", &[]);
    assert_success(&o);
    let out = stdout(&o);
    let values: Vec<f64> = out
        .trim()
        .trim_start_matches("f32[256] ")
        .trim_matches(['[', ']'])
        .split(", ")
        .map(|v| v.parse().unwrap_or_else(|_| panic!("a number: {v:?}")))
        .collect();
    assert_eq!(values.len(), 256);
    let count = |x: f64| values.iter().filter(|&&v| v == x).count();
    assert_eq!(count(0.0) + count(0.5) + count(1.0), 256, "{out}");
    assert!((96..=160).contains(&count(0.5)), "kept in exactly one of the two steps: {}\n{out}", count(0.5));
}

/// The names and types in a checkpoint of the small MLP trained with adam.
fn small_mlp_checkpoint_entries() -> Vec<(String, TensorType)> {
    let params = [("l1.w", vec![64, 32]), ("l1.b", vec![32]), ("l2.w", vec![32, 10]), ("l2.b", vec![10])];
    let mut want: Vec<(String, TensorType)> =
        params.iter().map(|(n, s)| (n.to_string(), TensorType::new(DType::F32, s.clone()))).collect();
    for (n, s) in &params {
        for state in ["m", "v"] {
            want.push((format!("optimizer/{n}/{state}"), TensorType::new(DType::F32, s.clone())));
        }
    }
    want
}

/// The epoch recorded in a complete checkpoint, or `None` while there is none.
fn checkpoint_epoch(path: &Path) -> Option<u64> {
    let (_, meta) = tfc::io::checkpoint::load(path, &[]).ok()?;
    meta.get("epoch")?.parse().ok()
}

/// The files in `dir` other than the program and its data.
fn outputs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list the scratch directory")
        .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "data" && !n.ends_with(".tfl"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_run_killed_during_checkpointing_resumes_to_the_same_weights() {
    const EPOCHS: u64 = 60;
    let settings = "    checkpoint \"ck.safetensors\" every 1 epochs\n    resume = \"ck.safetensors\"";
    let program = small_mlp_training(EPOCHS as usize, settings);

    // The reference: one uninterrupted run (no checkpoint yet, so `resume`
    // starts from scratch).
    let whole = scratch("kill-reference");
    write(&whole, "train.tfl", &program);
    let o = run(&whole, "train.tfl", &[]);
    assert_success(&o);
    assert!(stderr(&o).contains("no checkpoint at"), "{}", stderr(&o));

    // The interrupted run: SIGKILL three times, each at an arbitrary moment
    // after the checkpoint has been replaced at least twice since the start
    // of that attempt. Checkpoints are written every epoch (tens of ms), so
    // the kill often lands in the middle of a write.
    let dir = scratch("kill-resume");
    let ck = dir.join("ck.safetensors");
    write(&dir, "train.tfl", &program);
    let mut last_epoch = 0;
    for attempt in 0..3u64 {
        let mut child =
            tfc_command(&dir, "train.tfl", &[]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn tfc");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if checkpoint_epoch(&ck).is_some_and(|e| e >= last_epoch + 2) {
                break;
            }
            assert!(Instant::now() < deadline, "no checkpoint appeared in 60 s");
            assert!(child.try_wait().expect("poll tfc").is_none(), "tfc exited before it could be killed");
            std::thread::sleep(Duration::from_millis(2));
        }
        // An arbitrary moment: a few milliseconds that differ per attempt and run.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let jitter = (now.subsec_nanos() as u64 / 1000 + 7 * attempt) % 25;
        std::thread::sleep(Duration::from_millis(jitter));
        child.kill().expect("kill -9 tfc");
        let status = child.wait().expect("reap tfc");
        assert!(!status.success(), "tfc finished before it was killed; make the run longer");
        assert!(!dir.join("final.safetensors").exists(), "the killed run must not have finished");

        // What is on disk is a complete checkpoint of a finished epoch:
        // every tensor with its full data, the step and epoch in its metadata.
        let (tensors, meta) = tfc::io::checkpoint::load(&ck, &small_mlp_checkpoint_entries())
            .unwrap_or_else(|d| panic!("the checkpoint is damaged after kill -9: {}", d.message));
        assert_eq!(tensors.len(), 12);
        let epoch: u64 = meta["epoch"].parse().expect("an epoch number");
        let step: u64 = meta["step"].parse().expect("a step number");
        assert!(epoch >= last_epoch + 2 && epoch < EPOCHS, "epoch {epoch} after attempt {attempt}");
        assert_eq!(step, epoch * 8, "256 examples in batches of 32 are 8 steps per epoch");
        last_epoch = epoch;

        // Nothing else could be mistaken for the checkpoint: at most the
        // killed writer's hidden temporary file, which is never read.
        for name in outputs(&dir) {
            assert!(
                name == "ck.safetensors"
                    || (name.starts_with(".ck.safetensors.tmp-") && !name.ends_with(".safetensors")),
                "unexpected file `{name}` after kill -9"
            );
        }
    }

    // Resume to the end: the same final weights (and final checkpoint) as
    // the uninterrupted run, bit for bit.
    let o = run(&dir, "train.tfl", &[]);
    assert_success(&o);
    let resumed = format!("resuming from ck.safetensors at epoch {last_epoch}, step {}", last_epoch * 8);
    assert!(stderr(&o).contains(&resumed), "{}", stderr(&o));
    assert_eq!(read(&dir.join("final.safetensors")), read(&whole.join("final.safetensors")), "resumed weights differ");
    assert_eq!(read(&ck), read(&whole.join("ck.safetensors")), "the final checkpoints differ");
    assert_eq!(stdout(&o), stdout(&run(&whole, "train.tfl", &[])), "a finished checkpoint resumes to the same model");
}

// ---------------------------------------------------------------------------
// Bad input: a clear diagnostic, exit status 1, and no damage on disk.

/// A valid checkpoint of a one-layer model that every bad-input test keeps
/// in its directory (as `ck.safetensors`) and finds unchanged afterwards.
fn write_guard_checkpoint(dir: &Path) -> Vec<u8> {
    let ty = TensorType::new(DType::F32, vec![2, 3]);
    let w = Tensor::from_literal(&Literal::Float(vec![0.5, -1.0, 2.0, 0.25, 3.0, -4.5]), &ty).expect("a tensor");
    let path = dir.join("ck.safetensors");
    tfc::io::checkpoint::save(&path, &[("l.w".to_string(), &w)], &[("epoch".into(), "1".into())])
        .expect("write the guard checkpoint");
    read(&path)
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("list a directory") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                todo.push(p);
            } else {
                files.insert(p.clone(), read(&p));
            }
        }
    }
    files
}

/// Runs `program` (with `extra` flags) in a scratch directory that also
/// holds `ck.safetensors` and `files`; asserts that it fails with `code`,
/// exit status 1, no panic and nothing on stdout, and that no file in the
/// directory was created, changed or removed. Returns stderr, `unwrapped`.
fn fails_with(test: &str, program: &str, files: &[(&str, &[u8])], extra: &[&str], code: &str) -> String {
    let dir = scratch(test);
    write_guard_checkpoint(&dir);
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write a scratch file");
    }
    write(&dir, "bad.tfl", program);
    let before = snapshot(&dir);
    let o = run(&dir, "bad.tfl", extra);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "expected a program error:\n{err}");
    let one_line = unwrapped(&err);
    assert!(!err.contains("panicked"), "tfc panicked:\n{err}");
    assert!(err.contains(&format!("error[{code}]")), "expected {code}:\n{err}");
    assert!(o.stdout.is_empty(), "nothing may be printed before the failure: {}", stdout(&o));
    let after = snapshot(&dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "files were created or removed:\n{err}"
    );
    for (path, bytes) in &before {
        assert!(after[path] == *bytes, "{} was changed by a failing run", path.display());
    }
    one_line
}

/// A two-input regression model with a train block whose loss and data
/// the tests vary. It would checkpoint over the guard file every epoch.
fn regression(data: &str, loss: &str, optimizer: &str) -> String {
    format!(
        r#"
use std.nn.{{Dense}}
use std.loss.mse
use std.optim.sgd

model M {{
    l = Dense(4, 2)
    fn forward(x: f32[B, 4]) -> f32[B, 2] = l(x)
}}
let data = {data}
let net = M(seed = 0)
train net on data |> batch(8) {{
    loss(x, y) = {loss}
    optimizer = {optimizer}
    epochs = 3
    checkpoint "ck.safetensors" every 1 epochs
}}
print(net.l.b)
"#
    )
}

const GOOD_DATA: &str = "from_tensors(normal([64, 4], seed = 1), normal([64, 2], seed = 2))";

#[test]
fn a_loss_that_is_not_a_scalar_is_e0318() {
    let program = regression(GOOD_DATA, "(net(x) - y) ^ 2", "sgd(lr = 0.1)");
    let err = fails_with("loss-not-scalar", &program, &[], &[], "E0318");
    assert!(err.contains("the loss must be a float scalar") && err.contains("f32[8, 2]"), "{err}");
    assert!(err.contains("bad.tfl:13:18"), "the loss expression is pointed at:\n{err}");
}

#[test]
fn a_parameter_that_gets_no_gradient_is_e0319() {
    let program = regression(GOOD_DATA, "mse(net(x), y)", "sgd(lr = 0.1)")
        .replace("l = Dense(4, 2)", "l = Dense(4, 2)\n    param unused: f32[3] = zeros()");
    let err = fails_with("no-gradient", &program, &[], &[], "E0319");
    assert!(err.contains("parameter `unused` gets no gradient"), "{err}");
}

#[test]
fn a_dataset_that_does_not_fit_the_model_names_both_shapes() {
    let data = "from_tensors(normal([64, 5], seed = 1), normal([64, 2], seed = 2))";
    let program = regression(data, "mse(net(x), y)", "sgd(lr = 0.1)");
    let err = fails_with("element-shape", &program, &[], &[], "E0308");
    // The model's annotation and the batches' actual type.
    assert!(err.contains("f32[B, 4]") && err.contains("f32[8, 5]"), "{err}");
}

#[test]
fn a_missing_csv_is_e0001_naming_the_file() {
    let program = "let d = load_csv(\"data/no_such_file.csv\", label = -1)\nprint(count(d))\n";
    let err = fails_with("missing-csv", program, &[], &[], "E0001");
    assert!(err.contains("no_such_file.csv") && err.contains("no such file"), "{err}");
}

#[test]
fn a_ragged_csv_row_names_the_file_and_line() {
    let program = "let d = load_csv(\"rows.csv\", label = -1)\nprint(count(d))\n";
    let err = fails_with("ragged-csv", program, &[("rows.csv", b"1,2,3\n4,5,6\n7,8\n")], &[], "E0001");
    assert!(err.contains("rows.csv:3: this row has 2 columns, earlier rows have 3"), "{err}");
}

#[test]
fn a_non_number_in_a_csv_names_the_file_and_line() {
    let program = "let d = load_csv(\"rows.csv\", label = -1)\nprint(count(d))\n";
    let err = fails_with("non-number-csv", program, &[("rows.csv", b"1,2,3\n4,5,6\n\n7,x,9\n")], &[], "E0001");
    assert!(err.contains("rows.csv:4: column 2 is not a number: `x`"), "{err}");
}

/// A checkpoint of a model with layers `l1` (4→8) and `l2` (8→1) trained
/// with adam: the wrong shapes and names for `Other` below.
fn foreign_checkpoint(dir: &Path) {
    let program = r#"
use std.nn.{Dense}
use std.loss.mse
use std.optim.adam
model M {
    l1 = Dense(4, 8, act = relu)
    l2 = Dense(8, 1)
    fn forward(x: f32[B, 4]) -> f32[B, 1] = l2(l1(x))
}
let net = M(seed = 0)
train net on from_tensors(normal([32, 4], seed = 1), normal([32, 1], seed = 2)) |> batch(16) {
    loss(x, y) = mse(net(x), y)
    optimizer = adam(lr = 0.01)
    checkpoint "foreign.safetensors" every 1 epochs
}
save(net, "foreign_weights.safetensors")
"#;
    write(dir, "foreign.tfl", program);
    assert_success(&run(dir, "foreign.tfl", &[]));
}

/// `Other` has `l1` 4→6 and `out` 6→1: two shapes differ, two names are
/// missing and two are extra.
const OTHER: &str = r#"
use std.nn.{Dense}
use std.loss.mse
use std.optim.adam
model Other {
    l1 = Dense(4, 6, act = relu)
    out = Dense(6, 1)
    fn forward(x: f32[B, 4]) -> f32[B, 1] = out(l1(x))
}
let net = Other(seed = 0)
"#;

fn assert_lists_the_differences(err: &str) {
    for line in [
        "`l1.w` is f32[4, 8] in the file but the model expects f32[4, 6]",
        "`l1.b` is f32[8] in the file but the model expects f32[6]",
        "`out.w` is missing (expected f32[6, 1])",
        "`out.b` is missing (expected f32[1])",
        "`l2.b`, `l2.w`",
    ] {
        assert!(err.contains(line), "missing `{line}` in:\n{err}");
    }
}

#[test]
fn loading_weights_that_do_not_match_the_model_lists_the_differences() {
    let dir = scratch("load-mismatch-source");
    foreign_checkpoint(&dir);
    let weights = read(&dir.join("foreign_weights.safetensors"));
    let program = format!("{OTHER}load(net, \"foreign_weights.safetensors\")\nprint(net.l1.b)\n");
    let err = fails_with("load-mismatch", &program, &[("foreign_weights.safetensors", &weights)], &[], "E0001");
    assert!(err.contains("`foreign_weights.safetensors` does not match the model"), "{err}");
    assert_lists_the_differences(&err);
}

#[test]
fn resuming_from_a_checkpoint_that_does_not_match_the_model_lists_the_differences() {
    let dir = scratch("resume-mismatch-source");
    foreign_checkpoint(&dir);
    let ck = read(&dir.join("foreign.safetensors"));
    let program = format!(
        "{OTHER}
train net on from_tensors(normal([32, 4], seed = 1), normal([32, 1], seed = 2)) |> batch(16) {{
    loss(x, y) = mse(net(x), y)
    optimizer = adam(lr = 0.01)
    epochs = 3
    checkpoint \"foreign.safetensors\" every 1 epochs
    resume = \"foreign.safetensors\"
}}
print(net.l1.b)
"
    );
    // The run fails before its first step, so the checkpoint it could not
    // resume from is left exactly as it was (fails_with compares bytes).
    let err = fails_with("resume-mismatch", &program, &[("foreign.safetensors", &ck)], &[], "E0001");
    assert!(err.contains("`foreign.safetensors` does not match the model"), "{err}");
    assert_lists_the_differences(&err);
    assert!(err.contains("`optimizer/l1.w/m` is f32[4, 8] in the file but the model expects f32[4, 6]"), "{err}");
    assert!(err.contains("`optimizer/out.w/v` is missing"), "{err}");
}

#[test]
fn a_nan_loss_stops_training_naming_the_step() {
    // The logarithm of a negative number: NaN at the very first step.
    let program = regression(GOOD_DATA, "mean(log(net(x) - 10.0))", "sgd(lr = 0.1)");
    let err = fails_with("nan-loss", &program, &[], &[], "E0402");
    assert!(err.contains("the loss became NaN at step 1 (epoch 1)"), "{err}");
    assert!(err.contains("--check-numerics"), "the diagnostic suggests --check-numerics:\n{err}");

    // A huge learning rate: finite at first, then the weights blow up.
    let program = regression(GOOD_DATA, "mse(net(x), y)", "sgd(lr = 1e6)");
    let err = fails_with("diverging-loss", &program, &[], &[], "E0402");
    let at = err.find("at step ").map(|i| &err[i + 8..]).unwrap_or_default();
    let step: u64 = at.split(' ').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(err.contains("the loss became") && step > 1, "expected a later step:\n{err}");
}

#[test]
fn check_numerics_names_the_first_op_and_its_source_span() {
    let program = regression(GOOD_DATA, "mean(log(net(x) - 10.0))", "sgd(lr = 0.1)");
    let err = fails_with("check-numerics", &program, &[], &["--check-numerics"], "E0402");
    assert!(err.contains("`log` produced a NaN or infinity"), "{err}");
    // Line 13 of the program, the column of `log(`.
    assert!(err.contains("bad.tfl:13:23"), "{err}");
    assert!(err.contains("first non-finite value computed here (f32[8, 2])"), "{err}");
    assert!(err.contains("in training step 1 (epoch 1)"), "{err}");
}

// ---------------------------------------------------------------------------

#[test]
fn the_log_has_one_json_object_per_epoch() {
    let dir = scratch("json-log");
    let program = format!(
        "{SMALL_MLP}
let (train_set, test_set) = split(digits, 0.75, seed = 0)
train net on train_set |> batch(32) {{
    loss(x, y) = softmax_cross_entropy(net(x), y)
    optimizer = adam(lr = 1e-3)
    epochs = 5
    eval accuracy on test_set |> batch(64) every 2 epochs
    log \"out/train.jsonl\"
}}
"
    );
    write(&dir, "train.tfl", &program);
    // Twice: a run that starts from scratch starts a fresh log.
    for _ in 0..2 {
        assert_success(&run(&dir, "train.tfl", &[]));
    }
    let text = std::fs::read_to_string(dir.join("out/train.jsonl")).expect("the log exists");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "one line per epoch:\n{text}");
    for (i, line) in lines.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON `{line}`: {e}"));
        let epoch = i as u64 + 1;
        assert_eq!(v["epoch"].as_u64(), Some(epoch), "{line}");
        assert_eq!(v["step"].as_u64(), Some(epoch * 6), "192 examples in batches of 32: {line}");
        let loss = v["loss"].as_f64().unwrap_or(f64::NAN);
        assert!(loss.is_finite() && loss > 0.0, "{line}");
        assert!(v["examples_per_sec"].as_f64().is_some_and(|r| r > 0.0), "{line}");
        // Evaluated every 2 epochs and after the last.
        let evaluated = epoch.is_multiple_of(2) || epoch == 5;
        let acc = v.get("accuracy").and_then(|a| a.as_f64());
        assert_eq!(acc.is_some(), evaluated, "{line}");
        assert!(acc.is_none_or(|a| (0.0..=1.0).contains(&a)), "{line}");
    }
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let last: serde_json::Value = serde_json::from_str(lines[4]).unwrap();
    assert!(last["loss"].as_f64() < first["loss"].as_f64(), "the loss falls:\n{text}");
}

/// A checkpoint whose `step` is there but is not a number says so (it used
/// to say the checkpoint had no `step`).
#[test]
fn resuming_from_a_checkpoint_whose_step_is_not_a_number_says_what_it_is() {
    let dir = scratch("resume-bad-step");
    let program = regression(GOOD_DATA, "mse(net(x), y)", "sgd(lr = 0.1)");
    write(&dir, "train.tfl", &program);
    let o = run(&dir, "train.tfl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The step's digits become letters of the same count: the header keeps
    // its length.
    let mut ck = read(&dir.join("ck.safetensors"));
    let n = u64::from_le_bytes(ck[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(ck[8..8 + n].to_vec()).unwrap();
    let at = header.find("\"step\":\"").expect("a step in the metadata") + 8;
    let digits = header[at..].chars().take_while(char::is_ascii_digit).count();
    assert!(digits > 0, "{header}");
    ck[8 + at..8 + at + digits].fill(b'x');
    let resumed = program.replace("    epochs = 3\n", "    epochs = 3\n    resume = \"ck.safetensors\"\n");
    let err = fails_with("resume-bad-step-run", &resumed, &[("ck.safetensors", &ck)], &[], "E0001");
    assert!(err.contains("is not a training checkpoint: its `step` is `x"), "{err}");
}

/// A checkpoint write removes the temporaries that killed runs left beside
/// it (`.ck.safetensors.tmp-<pid>` of a process that no longer runs), and
/// keeps a live process's.
#[test]
fn a_checkpoint_write_removes_temporaries_of_dead_runs() {
    let dir = scratch("stale-temporaries");
    let dead = std::process::Command::new("true").spawn().expect("spawn true");
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait().expect("true finishes");
    let stale = dir.join(format!(".ck.safetensors.tmp-{dead_pid}"));
    let live = dir.join(format!(".ck.safetensors.tmp-{}", std::process::id()));
    std::fs::write(&stale, b"half a checkpoint").unwrap();
    std::fs::write(&live, b"another run's").unwrap();
    write(&dir, "train.tfl", &regression(GOOD_DATA, "mse(net(x), y)", "sgd(lr = 0.1)"));
    let o = run(&dir, "train.tfl", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.join("ck.safetensors").is_file());
    assert!(!stale.exists(), "the dead run's temporary is gone");
    assert!(live.exists(), "a live process's temporary stays");
}

/// A model with a list of sub-models (`blocks = [Block(4) for i in 0..3]`).
const BLOCK_STACK: &str = r#"use std.nn.{Dense}
use std.loss.mse
use std.optim.adam
model Block(d: int) {
    l1 = Dense(d, d, act = relu)
    l2 = Dense(d, d)
    fn forward(x) = x + l2(l1(x))
}
model Stack(n: int) {
    blocks = [Block(4) for i in 0..n]
    head = Dense(4, 1)
    fn forward(x) {
        let h = x
        for b in blocks {
            h = b(h)
        }
        head(h)
    }
}
let xs = reshape(linspace(-1.0, 1.0, 32), [8, 4])
let ys = sum(xs, axis = 1, keepdims = true)
let net = Stack(3, seed = 7)
save(net, "init.safetensors")
train net on from_tensors(xs, ys) |> batch(4) {
    loss(x, y) = mse(net(x), y)
    optimizer = adam(lr = 1e-2)
    epochs = 2
    checkpoint "ck.safetensors" every 1 epochs
}
save(net, "final.safetensors")
let copy = Stack(3, seed = 1)
load(copy, "final.safetensors")
assert_close(copy(xs), net(xs), tol = 0.0)
print(copy.blocks[2].l2.w, full = true)
"#;

#[test]
fn a_list_of_blocks_is_seeded_and_checkpointed_by_numbered_paths() {
    let (a, b) = (scratch("block-list-a"), scratch("block-list-b"));
    for dir in [&a, &b] {
        write(dir, "stack.tfl", BLOCK_STACK);
        assert_success(&run(dir, "stack.tfl", &[]));
    }
    // The same seed gives bit-identical initial weights, block by block.
    assert_eq!(read(&a.join("init.safetensors")), read(&b.join("init.safetensors")));
    // Each block's parameters are named by its index in the list, in the
    // checkpoint with their optimizer states as in `save`.
    let mut params: Vec<(String, Vec<usize>)> = Vec::new();
    for k in 0..3 {
        for layer in ["l1", "l2"] {
            params.push((format!("blocks.{k}.{layer}.w"), vec![4, 4]));
            params.push((format!("blocks.{k}.{layer}.b"), vec![4]));
        }
    }
    params.push(("head.w".into(), vec![4, 1]));
    params.push(("head.b".into(), vec![1]));
    let ty = |s: &[usize]| TensorType::new(DType::F32, s.to_vec());
    let mut want: Vec<(String, TensorType)> = params.iter().map(|(n, s)| (n.clone(), ty(s))).collect();
    let saved = tfc::io::checkpoint::load(&a.join("final.safetensors"), &want);
    assert!(saved.is_ok(), "save names the blocks' parameters by index: {:?}", saved.err());
    for (n, s) in &params {
        for state in ["m", "v"] {
            want.push((format!("optimizer/{n}/{state}"), ty(s)));
        }
    }
    let ck = tfc::io::checkpoint::load(&a.join("ck.safetensors"), &want);
    assert!(ck.is_ok(), "the checkpoint names them the same way: {:?}", ck.err());
    let header = String::from_utf8_lossy(&read(&a.join("final.safetensors"))).into_owned();
    assert!(!header.contains("\"l1.w\""), "no block parameter is saved without its path");
}
