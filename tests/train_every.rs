//! `every n steps` in a `train` block (§9), end to end through the `tfc`
//! binary: metrics, log lines and checkpoints at step points inside epochs;
//! a run stopped inside an epoch resumes from its last step checkpoint to
//! the same weights, optimizer states and log lines (all but the
//! throughput) as a run never stopped, at one and two threads, on the JIT
//! and the interpreter; a log's step losses are the means of the steps
//! since the previous line; bad counts and damaged checkpoint metadata are
//! diagnostics with a non-zero exit.
//!
//! Every test works in its own scratch directory (`support::scratch`).

mod support;

use support::{fails, ok, run, scratch};

/// A line fit on 10 shuffled examples in batches of 4 (3 steps an epoch),
/// with Adam (optimizer state to carry) for 4 epochs; `settings` go into the
/// train block. Prints the trained weights and Adam's state exactly.
fn program(settings: &str) -> String {
    format!(
        r#"use std.loss.mse
use std.optim.adam
use std.metrics.mean_loss

model Line {{
    param w: f32[1, 1] = zeros()
    param b: f32[1] = zeros()
    fn forward(x) = x @ w + b
}}
fn line_loss(net, ds) = mean_loss(net, ds, mse)
let xs = reshape(linspace(-1.0, 1.0, 10), [10, 1])
let data = from_tensors(xs, 3.0 * xs + 0.5) |> shuffle(10, seed = 2) |> batch(4)
let net = Line()
train net on data {{
    loss(x, y) = mse(net(x), y)
    optimizer = adam(lr = 0.1)
    epochs = 4
{settings}
}}
print(net.w)
print(net.b)
print(line_loss(net, data))
"#
    )
}

/// The log's lines without their (timing-dependent) throughput.
fn log_lines(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("out/log.jsonl")).expect("read the log");
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            let rate = v.as_object_mut().and_then(|o| o.remove("examples_per_sec"));
            assert!(rate.is_some_and(|r| r.is_number()), "a line without its throughput: {l}");
            v
        })
        .collect()
}

const EVENTS: &str = r#"    eval line_loss on data every 5 steps
    checkpoint "out/ck.safetensors" every 4 steps
    log "out/log.jsonl" every 3 steps
    resume = "out/ck.safetensors""#;

#[test]
fn metrics_logs_and_checkpoints_fall_on_their_steps() {
    let dir = scratch("every-points");
    ok(&dir, &program(EVENTS));
    let lines = log_lines(&dir);
    let at: Vec<(u64, u64, bool, bool)> = lines
        .iter()
        .map(|l| {
            (
                l["step"].as_u64().unwrap(),
                l["epoch"].as_u64().unwrap(),
                l.get("loss").is_some(),
                l.get("line_loss").is_some(),
            )
        })
        .collect();
    // Log points at steps 3, 6, 9, 12 (with the loss), metric points at 5,
    // 10 and after the last step, 12 (metrics only); the epoch is the one
    // each step belongs to.
    let want = [
        (3, 1, true, false),
        (5, 2, false, true),
        (6, 2, true, false),
        (9, 3, true, false),
        (10, 4, false, true),
        (12, 4, true, false),
        (12, 4, false, true),
    ];
    assert_eq!(at, want, "log lines:\n{lines:#?}");
    // The last metric line is the metric the program prints after training.
    let printed = ok(&dir, &program(""));
    let last_metric = lines[6]["line_loss"].as_f64().unwrap();
    let printed_metric: f64 =
        printed.lines().last().unwrap().trim_start_matches("f32 ").parse().expect("a printed number");
    assert!((last_metric - printed_metric).abs() <= 1e-6 * printed_metric.abs(), "{last_metric} vs {printed_metric}");
    // The checkpoint is the one of step 12 (the last multiple of 4).
    let ck = tfc::io::checkpoint::load_optional(&dir.join("out/ck.safetensors"), &[], 0).expect("a checkpoint").1;
    assert_eq!(ck.get("step").map(String::as_str), Some("12"));
    assert_eq!(ck.get("epoch").map(String::as_str), Some("3"), "step 12 ends epoch 4, after its checkpoint");
    assert_eq!(ck.get("batch").map(String::as_str), Some("3"));
}

#[test]
fn step_losses_in_the_log_average_to_the_epoch_losses() {
    let dir = scratch("every-means");
    ok(&dir, &program("    log \"out/log.jsonl\" every 1 steps"));
    let steps: Vec<f64> = log_lines(&dir).iter().map(|l| l["loss"].as_f64().unwrap()).collect();
    assert_eq!(steps.len(), 12, "one line per step");
    ok(&dir, &program("    log \"out/log.jsonl\""));
    let epochs: Vec<f64> = log_lines(&dir).iter().map(|l| l["loss"].as_f64().unwrap()).collect();
    assert_eq!(epochs.len(), 4, "one line per epoch");
    for (k, e) in epochs.iter().enumerate() {
        let mean = steps[3 * k..3 * k + 3].iter().sum::<f64>() / 3.0;
        assert!((mean - e).abs() <= 1e-12 * e.abs(), "epoch {}: steps average {mean}, the epoch line says {e}", k + 1);
    }
}

#[test]
fn a_run_stopped_inside_an_epoch_resumes_bit_for_bit() {
    for flags in [&["--threads", "1"][..], &["--threads", "2"], &["--backend", "interp"]] {
        let whole = scratch("every-whole");
        let reference = run(&whole, &program(EVENTS), flags);
        assert_eq!(reference.code, Some(0), "{}", reference.stderr);
        // Stopped after step 5 (inside epoch 2; the last checkpoint is step
        // 4's, batch 1 of epoch 2), then resumed with the same program.
        let dir = scratch("every-resume");
        let stopped = run(&dir, &program(&format!("{EVENTS}\n    steps = 5")), flags);
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
        let resumed = run(&dir, &program(EVENTS), flags);
        assert_eq!(resumed.code, Some(0), "{}", resumed.stderr);
        assert!(resumed.stderr.contains("at epoch 1, step 4 (batch 1 of epoch 2)"), "{}", resumed.stderr);
        assert_eq!(resumed.stdout, reference.stdout, "{flags:?}: resumed weights differ");
        // The stopped run's lines after its checkpoint (step 5's) are
        // dropped, not written twice.
        assert_eq!(log_lines(&dir), log_lines(&whole), "{flags:?}: resumed log differs");
    }
}

#[test]
fn bad_counts_are_diagnostics() {
    let dir = scratch("every-bad");
    fails(&dir, &program("    log \"out/log.jsonl\" every 0 steps"), &["E0309", "expected a positive int, found 0"]);
    fails(&dir, &program("    eval line_loss on data every 1.5 steps"), &["expected a positive int, found 1.5"]);
    fails(
        &dir,
        &program("    checkpoint \"out/ck.safetensors\" every -2 steps"),
        &["expected a positive int, found -2"],
    );
    fails(&dir, &program("    log \"out/log.jsonl\" every 2 batches"), &["E0101", "`epochs` or `steps`"]);
}

#[test]
fn damaged_position_metadata_is_a_diagnostic_and_leaves_the_file_alone() {
    let dir = scratch("every-damaged");
    ok(&dir, &program(EVENTS));
    let path = dir.join("out/ck.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    for (key, bad) in [("batch", "\"three\""), ("epoch_loss_sum", "\"NaN\"")] {
        let mut json: serde_json::Value = serde_json::from_str(header).unwrap();
        json["__metadata__"][key] = serde_json::from_str(bad).unwrap();
        let mut text = json.to_string().into_bytes();
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        let mut damaged = (text.len() as u64).to_le_bytes().to_vec();
        damaged.extend(&text);
        damaged.extend(&bytes[8 + n..]);
        std::fs::write(&path, &damaged).unwrap();
        let want = format!("its `{key}` is");
        fails(&dir, &program(EVENTS), &["is not a training checkpoint", &want]);
        assert_eq!(std::fs::read(&path).unwrap(), damaged, "the checkpoint was changed");
    }
}
