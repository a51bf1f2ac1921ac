//! Model `state` that training writes (language.md §6, *Writing state*),
//! end to end through the `tfc` binary: a small network with
//! `std.nn.BatchNorm` trains, its running statistics leave their initial
//! values, are saved in checkpoints and by `save` under their paths,
//! resume bit for bit, and inference and `eval` metrics (during training
//! and after) read them; the compiled CPU backend and the interpreter
//! agree, and the JIT gives the same bits at one and two threads. Older
//! files without states keep the states as they were.
//!
//! Every test works in its own scratch directory (`support::scratch`).

mod support;

use std::path::Path;
use support::{fails, ok, run, scratch};
use tfc::ir::{DType, TensorType};

/// Dense with relu → BatchNorm → Dense over 4 features, trained with adam
/// on a fixed regression target; `settings` go into the train block,
/// `tail` after it.
fn program(epochs: usize, settings: &str, tail: &str) -> String {
    program_with("adam(lr = 0.05)", epochs, settings, tail)
}

fn program_with(optimizer: &str, epochs: usize, settings: &str, tail: &str) -> String {
    format!(
        "{PRELUDE}
train net on data {{
    loss(x, y) = mse(net(x), y)
    optimizer = {optimizer}
    epochs = {epochs}
{settings}
}}
{tail}
"
    )
}

/// The model, the data and a metric, before any training.
const PRELUDE: &str = r#"
use std.nn.{Dense, BatchNorm}
use std.loss.mse
use std.optim.{adam, sgd}
use std.metrics.mean_loss

model Net {
    l1 = Dense(4, 6, act = relu)
    bn = BatchNorm(6, momentum = 0.2)
    l2 = Dense(6, 1)
    fn forward(x) = x |> l1 |> bn |> l2
}
fn err(net, ds) = mean_loss(net, ds, mse)

let xs = reshape(sin(cast(arange(48), f32)) * 2.0, [12, 4])
let ys = reshape(sum(xs, axis = 1) * 0.5, [12, 1])
let data = from_tensors(xs, ys) |> shuffle(12, seed = 3) |> batch(4)
let all = from_tensors(xs, ys) |> batch(12)
let net = Net(seed = 1)
"#;

/// The tensors of the safetensors file `from` but the BatchNorm's running
/// statistics, written to `to`: a file as an earlier version wrote it.
fn without_states(from: &Path, to: &Path) {
    let file = tfc::io::checkpoint::SafeFile::read(from).expect("read the file");
    let tensors: Vec<(String, tfc::tensor::Tensor)> = file
        .names()
        .into_iter()
        .filter(|n| !n.starts_with("bn.running"))
        .map(|n| {
            let t = file.tensor(&n, true).expect("a tensor").1.expect("its values");
            (n, t)
        })
        .collect();
    let named: Vec<(String, &tfc::tensor::Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    let meta: Vec<(String, String)> = file.metadata().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    tfc::io::checkpoint::save(to, &named, &meta).expect("write the file");
}

/// Prints every trained value with all its digits, and checks that
/// inference normalizes with the running statistics.
const PRINT_ALL: &str = r#"
print(net.bn.running_mean, full = true)
print(net.bn.running_var, full = true)
print(net.bn.gamma, full = true)
print(net.l1.w, full = true)
print(net.l2.w, full = true)
let h = net.l1(xs)
let by_hand = (h - net.bn.running_mean) * rsqrt(net.bn.running_var + 1e-5) * net.bn.gamma + net.bn.beta
assert_close(net.bn(h), by_hand, tol = 0.0)
print(net(xs), full = true)
"#;

fn tensor(path: &Path, name: &str, shape: &[usize]) -> Vec<f64> {
    let want = vec![(name.to_string(), TensorType::new(DType::F32, shape.to_vec()))];
    let (t, _) = tfc::io::checkpoint::load(path, &want).unwrap_or_else(|d| panic!("{}: {}", name, d.message));
    t[0].to_f64_vec()
}

#[test]
fn batch_norm_statistics_train_checkpoint_and_resume_bit_for_bit() {
    let dir = scratch("state-resume");
    let whole = ok(&dir, &program(4, "", &format!("save(net, \"whole.safetensors\")\n{PRINT_ALL}")));
    // Two epochs with a checkpoint, then a fresh model resumes for two more.
    let first = program(2, "    checkpoint \"ckpt.safetensors\" every 1 epochs", "");
    ok(&dir, &first);
    let ckpt = dir.join("ckpt.safetensors");
    let mean_at_2 = tensor(&ckpt, "bn.running_mean", &[6]);
    let var_at_2 = tensor(&ckpt, "bn.running_var", &[6]);
    // The running statistics moved away from their initial zeros and ones.
    assert!(mean_at_2.iter().all(|&m| m != 0.0), "running_mean is still zero: {mean_at_2:?}");
    assert!(var_at_2.iter().all(|&v| v != 1.0), "running_var is still one: {var_at_2:?}");
    let resumed = ok(&dir, &program(4, "    resume = \"ckpt.safetensors\"", PRINT_ALL));
    assert_eq!(resumed, whole, "resumed training differs from training in one go");
    // `save` writes the states too, under the same paths as checkpoints.
    let saved = dir.join("whole.safetensors");
    let final_mean = tensor(&saved, "bn.running_mean", &[6]);
    assert_ne!(final_mean, mean_at_2, "two more epochs changed nothing");
}

#[test]
fn the_interpreter_and_the_jit_at_one_and_two_threads_agree() {
    let dir = scratch("state-backends");
    // With sgd: where a unit is active on a whole batch, the BatchNorm
    // after it cancels its bias, whose gradient is then rounding noise,
    // which adam would scale up to full steps of either sign.
    let source = program_with("sgd(lr = 0.1)", 3, "", PRINT_ALL);
    let runs: Vec<String> = [&["--threads", "1"][..], &["--threads", "2"], &["--backend", "interp"]]
        .iter()
        .map(|flags| {
            let r = run(&dir, &source, flags);
            assert_eq!(r.code, Some(0), "tfc {flags:?} failed:\n{}", r.stderr);
            r.stdout
        })
        .collect();
    assert_eq!(runs[0], runs[1], "the JIT differs between one and two threads");
    // The JIT sums matrix products in another order than the interpreter:
    // the same numbers within tests/jit.rs's tolerance, not the same bits.
    let numbers = |s: &str| -> Vec<f64> {
        s.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e'))
            .filter_map(|t| t.parse().ok())
            .collect()
    };
    let (jit, interp) = (numbers(&runs[0]), numbers(&runs[2]));
    assert_eq!(jit.len(), interp.len());
    for (a, b) in jit.iter().zip(&interp) {
        assert!((a - b).abs() <= 1e-3 * a.abs().max(b.abs()) + 1e-4, "jit {a} vs interp {b}\n{}\n{}", runs[0], runs[2]);
    }
}

#[test]
fn load_restores_states_and_files_without_states_keep_them() {
    let dir = scratch("state-load");
    let tail = r#"
save(net, "trained.safetensors")
let copy = Net(seed = 2)
load(copy, "trained.safetensors")
assert_close(copy.bn.running_mean, net.bn.running_mean, tol = 0.0)
assert_close(copy.bn.running_var, net.bn.running_var, tol = 0.0)
assert_close(copy(xs), net(xs), tol = 0.0)
print(copy.bn.running_var, full = true)
"#;
    let printed = ok(&dir, &program(1, "", tail));
    assert!(printed.starts_with("f32[6] ["), "{printed}");

    // A file of the parameters only (as written before states were saved):
    // `load` keeps the states as they were.
    let trained = dir.join("trained.safetensors");
    without_states(&trained, &dir.join("params_only.safetensors"));
    let keeps = r#"
let fresh = Net(seed = 2)
load(fresh, "params_only.safetensors")
assert_close(fresh.bn.running_mean, zeros([6]), tol = 0.0)
assert_close(fresh.bn.running_var, ones([6]), tol = 0.0)
assert_close(fresh.l1.w, net.l1.w, tol = 0.0)
print("kept")
"#;
    assert!(ok(&dir, &program(1, "", keeps)).ends_with("kept\n"));

    // A state of the wrong shape is an error listing it, like a parameter.
    let file = tfc::io::checkpoint::SafeFile::read(&trained).expect("read the saved file");
    let mut tensors: Vec<(String, tfc::tensor::Tensor)> = file
        .names()
        .into_iter()
        .filter(|n| n != "bn.running_var")
        .map(|n| {
            let t = file.tensor(&n, true).expect("a tensor").1.expect("its values");
            (n, t)
        })
        .collect();
    let bad_var = tfc::tensor::Tensor::from_vec(DType::F32, &[3], vec![1.0f32, 1.0, 1.0]).expect("a tensor");
    tensors.push(("bn.running_var".to_string(), bad_var));
    let wrong: Vec<(String, &tfc::tensor::Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    tfc::io::checkpoint::save(&dir.join("wrong.safetensors"), &wrong, &[]).expect("write the file");
    fails(
        &dir,
        &program(1, "", "load(Net(), \"wrong.safetensors\")"),
        &["does not match the model", "`bn.running_var` is f32[3] in the file but the model expects f32[6]"],
    );
}

#[test]
fn resuming_a_checkpoint_without_states_starts_them_from_their_initial_values() {
    let dir = scratch("state-old-checkpoint");
    ok(&dir, &program(1, "    checkpoint \"ckpt.safetensors\" every 1 epochs", ""));
    // The checkpoint as an earlier version wrote it: no model states.
    without_states(&dir.join("ckpt.safetensors"), &dir.join("old.safetensors"));
    // Resuming at epoch 1 of 1 runs no step: the states are their initial values.
    let tail = "assert_close(net.bn.running_mean, zeros([6]), tol = 0.0)\nprint(\"initial\")";
    assert!(ok(&dir, &program(1, "    resume = \"old.safetensors\"", tail)).ends_with("initial\n"));
}

#[test]
fn eval_metrics_during_training_read_the_running_statistics() {
    let dir = scratch("state-eval");
    // The metric of the last epoch, in the log, is the metric computed after
    // training: both read the trained running statistics.
    let settings = "    eval err on all\n    log \"log.jsonl\"";
    let tail = "save(net, \"trained.safetensors\")\nprint(err(net, all), full = true)";
    let after = ok(&dir, &program(2, settings, tail));
    let log = std::fs::read_to_string(dir.join("log.jsonl")).expect("the log");
    let last: serde_json::Value = serde_json::from_str(log.lines().last().expect("a line")).expect("JSON");
    let printed: f32 = after.trim().trim_start_matches("f32 ").parse().expect("a number");
    assert_eq!(last["err"].as_f64().map(|e| e as f32), Some(printed), "{log}\n{after}");
    // With the trained parameters but the initial statistics the metric
    // is another number: the statistics matter to it.
    without_states(&dir.join("trained.safetensors"), &dir.join("params.safetensors"));
    let initial = ok(&dir, &format!("{PRELUDE}load(net, \"params.safetensors\")\nprint(err(net, all), full = true)"));
    assert_ne!(initial, after, "the metric does not depend on the running statistics");
}
