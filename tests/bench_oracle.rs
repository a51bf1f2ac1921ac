//! tfc reproduces the peer benchmarks' loss oracle (../shared/bench/README.md):
//! `examples/bench/{mlp,mlp256,cnn}.tfl` load the peers' own initial weights
//! and fixed batch (written by benches/peers/make_data.py with numpy's
//! generators) and train with the same Adam, so `tfc bench … --warmup 0
//! --steps 220` must report the peers' step-1 and step-220 losses.
//!
//! Tolerances, from what the frameworks give (full digits, this machine):
//!
//! | problem  | step 1: JAX / tfc jit / tfc interp | step 220: JAX / TF graph / tfc jit / tfc interp |
//! |----------|------------------------------------|--------------------------------------------------|
//! | MLP b64  | 2.7604194 / 2.7604196 / 2.7604196  | 4.55107e-5 / 4.54772e-5 / 4.55126e-5 / 4.55126e-5 |
//! | MLP b256 | 2.6034713 / 2.6034710 / 2.6034718  | 1.35255e-4 / 1.35161e-4 / 1.35256e-4 / not run   |
//! | CNN b64  | 2.4029775 / 2.4029782 / 2.4029779  | 1.64066e-3 / 1.64091e-3 / 1.64070e-3 / not run   |
//!
//! (the interpreter's 220 MLP b64 steps give the JIT's loss bit for bit; its
//! 220 steps of the other two take minutes even in a release build.)
//!
//! - Step 1 is one forward pass from identical inputs: only the summation
//!   order differs (gemm blocking, the conv's loops), a few f32 ulps (one ulp
//!   is 2.4e-7 at these values; the largest gap seen is the CNN's 3 ulps,
//!   3e-7 relative). The oracle itself is rounded to 7 digits (±2e-7
//!   relative). `STEP1_REL` = 2e-6 leaves room for other summation orders
//!   while any real difference (another initialization, a transposed
//!   weight, a missing bias) moves the loss by far more than 1e-3.
//! - Step 220 follows 219 Adam updates near a minimum, where the loss is
//!   tiny and rounding compounds: tfc and JAX, which share the update rule
//!   `p - lr * mhat / (sqrt(vhat) + eps)`, differ by at most 4e-5 relative.
//!   The oracle is rounded to 4–5 digits (up to 1.1e-4 relative, for
//!   4.551e-05). `STEP220_REL` = 2e-4 covers both, and is still 3–4 times
//!   smaller than the effect of Keras' placement of eps (TF, XLA: 7e-4 to
//!   8e-4 off for the MLPs), so a change of the update rule fails here.
//!
//! Cost: each run goes through the `tfc` binary (`tfc bench`), on the JIT
//! for all 220 steps (the interpreter needs minutes for the CNN in a debug
//! build); the interpreter, which defines the semantics, is checked at step
//! 1 on all three problems and for all 220 steps on the small MLP only.
//! In a debug build that is about 80 s of CPU on two test threads, about
//! 45 s of wall time on an idle 2-core machine: the CNN's 220 JIT steps
//! (about 40 s; its convolutions still run on interpreter code) and the
//! MLP's 220 interpreter steps (about 33 s) run side by side.

use std::path::PathBuf;
use std::process::Command;

/// Relative tolerance of step 1's loss (see the module header).
const STEP1_REL: f64 = 2e-6;
/// Relative tolerance of step 220's loss (see the module header).
const STEP220_REL: f64 = 2e-4;

/// One canonical problem: its program and the peers' loss oracle.
struct Problem {
    file: &'static str,
    step1: f64,
    step220: f64,
}

const MLP_B64: Problem = Problem { file: "examples/bench/mlp.tfl", step1: 2.760419, step220: 4.551e-05 };
const MLP_B256: Problem = Problem { file: "examples/bench/mlp256.tfl", step1: 2.603471, step220: 1.3525e-04 };
const CNN_B64: Problem = Problem { file: "examples/bench/cnn.tfl", step1: 2.402977, step220: 1.6407e-03 };

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tfc bench FILE --backend B --warmup 0 --steps N --json`: the losses of
/// step 1 and step N.
fn bench(file: &str, backend: &str, steps: usize) -> (f64, f64) {
    let o = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .args(["bench", file, "--backend", backend, "--warmup", "0", "--steps", &steps.to_string(), "--json"])
        .current_dir(root())
        .output()
        .expect("the tfc binary runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "tfc bench {file} failed:\n{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["steps"], steps, "{stdout}");
    let loss = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no `{k}` in {stdout}"));
    (loss("loss_first"), loss("loss_last"))
}

fn assert_close(what: &str, got: f64, oracle: f64, rel: f64) {
    let err = (got - oracle).abs() / oracle.abs();
    assert!(
        err <= rel,
        "{what}: tfc gives {got:e}, the peers' oracle is {oracle:e} (relative error {err:.2e} > {rel:e})"
    );
}

/// Runs all 220 steps of `p` on `backend` and checks both oracle losses.
fn reproduces_the_oracle(p: &Problem, backend: &str) {
    let (first, last) = bench(p.file, backend, 220);
    assert_close(&format!("{} step 1 ({backend})", p.file), first, p.step1, STEP1_REL);
    assert_close(&format!("{} step 220 ({backend})", p.file), last, p.step220, STEP220_REL);
}

#[test]
fn mlp_b64_reproduces_the_oracle_on_the_jit() {
    reproduces_the_oracle(&MLP_B64, "jit");
}

#[test]
fn mlp_b256_reproduces_the_oracle_on_the_jit() {
    reproduces_the_oracle(&MLP_B256, "jit");
}

#[test]
fn cnn_b64_reproduces_the_oracle_on_the_jit() {
    reproduces_the_oracle(&CNN_B64, "jit");
}

#[test]
fn mlp_b64_reproduces_the_oracle_on_the_interpreter() {
    reproduces_the_oracle(&MLP_B64, "interp");
}

#[test]
fn every_problem_starts_at_the_oracle_on_the_interpreter() {
    for p in [&MLP_B256, &CNN_B64] {
        let (first, last) = bench(p.file, "interp", 1);
        assert_eq!(first, last, "one step: the first loss is the last");
        assert_close(&format!("{} step 1 (interp)", p.file), first, p.step1, STEP1_REL);
    }
}

#[test]
fn tfc_run_prints_the_losses_of_step_1_and_step_220() {
    // The program prints the loss before training and after 219 updates,
    // which are the losses the 1st and the 220th training step see.
    let o = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .args(["run", "--backend", "jit", MLP_B64.file])
        .current_dir(root())
        .output()
        .expect("the tfc binary runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    let losses: Vec<f64> = stdout
        .lines()
        .map(|l| l.strip_prefix("f32 ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("`{l}` in {stdout}")))
        .collect();
    assert_eq!(losses.len(), 2, "{stdout}");
    assert_close("tfc run: the first print", losses[0], MLP_B64.step1, STEP1_REL);
    assert_close("tfc run: the second print", losses[1], MLP_B64.step220, STEP220_REL);
}
