//! Mixed-precision training (`precision = "bf16" | "f16"`, `--precision`)
//! end to end: the digits MLP trained in each precision on the compiled
//! backend reaches the `f32` accuracy within 0.3 points and the
//! interpreter's loss within a stated tolerance, on every instruction-set
//! tier this machine has (`TFC_ISA`); the same bits at one and two threads;
//! the plan shows the low-precision products; and every bad input is a
//! diagnostic.
//!
//! Tolerance: the compiled bf16 products sum their pairs in another order
//! than the interpreter (AVX512-BF16 `vdpbf16ps` and AMX `tdpbf16ps` round
//! between the two products of a pair and flush denormals), and each
//! product's result is rounded to bf16, so one ulp of bf16 (2^-8 relative)
//! can differ in an activation; over 920 Adam steps that drifts the final
//! loss by a few percent. The tests allow 15% relative on the final
//! training loss and 0.3 points of test accuracy (the issue's bar).

mod support;
use std::ffi::OsStr;
use support::*;

/// The digits MLP (examples/digits_mlp.tfl) with `settings` added to its
/// train block, printing the final loss and the test accuracy.
fn digits_mlp(settings: &str) -> String {
    format!(
        "{}print(mean_loss(net, train_set |> batch(256), softmax_cross_entropy))\nprint(accuracy(net, test_set |> batch(256)))\n",
        digits_trained(40, settings)
    )
}

/// The two numbers the program prints: the training loss and the accuracy.
fn loss_and_accuracy(out: &str) -> (f64, f64) {
    let numbers: Vec<f64> = out.split_whitespace().filter_map(|w| w.parse::<f64>().ok()).collect();
    assert_eq!(numbers.len(), 2, "expected a loss and an accuracy, got:\n{out}");
    (numbers[0], numbers[1])
}

fn succeeds(r: Run) -> String {
    assert_eq!(r.code, Some(0), "tfc failed:\n{}", r.stderr);
    r.stdout
}

/// The instruction-set tiers this machine runs, as `tfc --version
/// --verbose` reports them, and those it lacks.
fn tiers(dir: &std::path::Path) -> (Vec<&'static str>, Vec<&'static str>) {
    let (mut have, mut lack) = (Vec::new(), Vec::new());
    for tier in ["portable", "avx512", "amx"] {
        let r = run_with(dir, "print(1)", &[], &[("TFC_ISA", tier)]);
        match r.code {
            Some(0) => have.push(tier),
            _ => {
                assert!(r.stderr.contains("E0903"), "TFC_ISA={tier} failed without E0903:\n{}", r.stderr);
                lack.push(tier)
            }
        }
    }
    (have, lack)
}

#[test]
fn low_precision_training_reaches_the_f32_accuracy_on_every_tier() {
    let dir = scratch("mixed-accuracy");
    let (_, f32_accuracy) = loss_and_accuracy(&succeeds(run_with(&dir, &digits_mlp(""), &[], &[])));
    let (have, lack) = tiers(&dir);
    if !lack.is_empty() {
        eprintln!("skipped tiers this CPU lacks: {}", lack.join(", "));
    }
    for precision in ["bf16", "f16"] {
        let program = digits_mlp(&format!("precision = \"{precision}\""));
        let (reference_loss, reference_accuracy) =
            loss_and_accuracy(&succeeds(run_with(&dir, &program, &["--backend", "interp"], &[])));
        assert!(
            (reference_accuracy - f32_accuracy).abs() <= 0.003,
            "{precision} on the interpreter: accuracy {reference_accuracy} against f32's {f32_accuracy}"
        );
        for tier in &have {
            let (loss, accuracy) = loss_and_accuracy(&succeeds(run_with(&dir, &program, &[], &[("TFC_ISA", tier)])));
            assert!(
                (accuracy - f32_accuracy).abs() <= 0.003,
                "{precision} on {tier}: accuracy {accuracy} against f32's {f32_accuracy}"
            );
            assert!(
                (loss - reference_loss).abs() <= 0.15 * reference_loss,
                "{precision} on {tier}: loss {loss} against the interpreter's {reference_loss}"
            );
        }
    }
}

#[test]
fn low_precision_steps_give_the_same_bits_at_one_and_two_threads() {
    let dir = scratch("mixed-threads");
    let (have, _) = tiers(&dir);
    for precision in ["bf16", "f16"] {
        let program = digits_mlp("epochs = 3").replace("epochs = 40\n", "");
        for tier in &have {
            let at = |threads: &str| {
                let args = ["--threads", threads, "--precision", precision];
                succeeds(run_with(&dir, &program, &args, &[("TFC_ISA", tier)]))
            };
            assert_eq!(at("1"), at("2"), "{precision} on {tier}");
        }
    }
}

#[test]
fn the_plan_and_the_profile_show_the_low_precision_products() {
    let dir = scratch("mixed-plan");
    put(&dir, "main.tfl", digits_mlp("precision = \"bf16\"").as_bytes());
    let plan = tfc(&dir, &["build", "main.tfl", "--emit", "plan"].map(OsStr::new));
    assert_eq!(plan.code, Some(0), "{}", plan.stderr);
    assert!(plan.stdout.contains("matmul") && plan.stdout.contains("bf16"), "{}", plan.stdout);
    let dump = tfc(&dir, &["build", "main.tfl", "--dump-after", "autocast"].map(OsStr::new));
    assert!(dump.stderr.contains("cast") && dump.stderr.contains(": bf16[64, 128]"), "{}", dump.stderr);
    // `--precision f32` turns the train block's precision off.
    let off = tfc(&dir, &["build", "main.tfl", "--precision", "f32", "--dump-after", "autocast"].map(OsStr::new));
    assert!(!off.stderr.contains("bf16"), "{}", off.stderr);
    let bench = tfc(&dir, &["bench", "main.tfl", "--steps", "3", "--warmup", "1", "--profile"].map(OsStr::new));
    assert_eq!(bench.code, Some(0), "{}", bench.stderr);
    assert!(bench.stdout.contains("bf16 gemm"), "{}", bench.stdout);
    // With AVX-512, the update of a weight whose gradient is a bf16
    // product runs on Adam's native loop too, and the layers' epilogues
    // in one pass each.
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512dq")
    {
        // Each weight's update is the 23-op epilogue of its gradient's product.
        let updates: Vec<&str> =
            plan.stdout.lines().filter(|l| l.contains("matmul") && l.contains("epilogue 23 ops")).collect();
        assert!(
            !updates.is_empty() && updates.iter().all(|l| l.ends_with("fused: adam update (epilogue)")),
            "{}",
            plan.stdout
        );
        // The weights are [64, 128] and [128, 10].
        for label in
            ["adam update 2x4096", "adam update 1x1280", "bf16 epilogue 64x128 (rounded, bias, relu, its mask)"]
        {
            assert!(bench.stdout.contains(label), "no {label} in {}", bench.stdout);
        }
    }
}

#[test]
fn bad_precisions_and_instruction_sets_are_diagnostics() {
    let dir = scratch("mixed-bad");
    let program = digits_mlp("precision = \"fp8\"");
    let r = run_with(&dir, &program, &[], &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("E0323") && r.stderr.contains("no precision named `fp8`"), "{}", r.stderr);
    let r = run_with(&dir, &digits_mlp("precision = 16"), &[], &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("must be a precision string"), "{}", r.stderr);
    let r = run_with(&dir, &digits_mlp(""), &["--precision", "half"], &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("E0323") && r.stderr.contains("--precision"), "{}", r.stderr);
    // A model whose parameters are all f64 has nothing to cast.
    let f64_model = r#"
use std.optim.sgd
model S { param w: f64[2, 2] = ones()
 fn forward(x) = x @ w }
let net = S()
train net on from_tensors(cast([[1.0, 2.0], [3.0, 4.0]], f64)) |> batch(2) {
    loss(x) = sum(net(x))
    optimizer = sgd(lr = 0.1)
    precision = "bf16"
}
"#;
    let r = run_with(&dir, f64_model, &[], &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("E0323") && r.stderr.contains("no f32 parameters"), "{}", r.stderr);
    let r = run_with(&dir, "print(1)", &[], &[("TFC_ISA", "sse9")]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("E0903") && r.stderr.contains("sse9"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn version_verbose_names_the_kernels_tier() {
    let dir = scratch("mixed-version");
    let r = tfc(&dir, &["--version", "--verbose"].map(OsStr::new));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.starts_with("tfc ") && r.stdout.contains("low-precision kernels: "), "{}", r.stdout);
    let plain = tfc(&dir, &["--version"].map(OsStr::new));
    assert_eq!(plain.stdout.lines().count(), 1, "{}", plain.stdout);
}

/// The digits MLP in f16 with its loss multiplied by `factor` (so that
/// the scaled gradients overflow f16 at first), for `steps` steps, logging
/// every step and checkpointing every 5, resuming from the checkpoint if
/// `resume`; prints the sum of the output layer's weights.
fn scaled_f16(factor: f64, steps: usize, resume: bool) -> String {
    let resume = if resume { "resume = \"ck.safetensors\"" } else { "" };
    format!(
        r#"
{}
let net = Mlp(seed = 42)
train net on digits |> shuffle(1024, seed = 1) |> batch(64) {{
    loss(x, y) = softmax_cross_entropy(net(x), y) * {factor:?}
    optimizer = adam(lr = 1e-3)
    steps = {steps}
    precision = "f16"
    log "log.jsonl" every 1 steps
    checkpoint "ck.safetensors" every 5 steps
    {resume}
}}
print(sum(net.l2.w), full = true)
"#,
        digits_model()
    )
}

/// `(loss_scale, skipped_steps)` of each line of `log.jsonl` in `dir`.
fn scales(dir: &std::path::Path) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(dir.join("log.jsonl")).expect("the log");
    let field = |line: &str, key: &str| -> f64 {
        let at = line.find(&format!("\"{key}\": ")).unwrap_or_else(|| panic!("no {key} in {line}"));
        let rest = &line[at + key.len() + 4..];
        rest[..rest.find([',', '}']).unwrap()].trim().parse().unwrap()
    };
    text.lines().map(|l| (field(l, "loss_scale"), field(l, "skipped_steps"))).collect()
}

#[test]
fn f16_loss_scaling_skips_overflowing_steps_halves_the_scale_and_recovers() {
    let dir = scratch("mixed-scaling");
    succeeds(run_with(&dir, &scaled_f16(1e4, 20, false), &[], &[]));
    let lines = scales(&dir);
    assert_eq!(lines.len(), 20);
    // The loss times 1e4 times 2^15 overflows f16's 65504 in the backward
    // products: each such step is skipped and halves the scale ...
    assert_eq!(lines[0], (16384.0, 1.0), "{lines:?}");
    let skipped = lines.iter().enumerate().take_while(|(i, (_, skipped))| *skipped == (i + 1) as f64).count();
    assert!(skipped >= 5, "the first steps are skipped: {lines:?}");
    assert!(lines.iter().all(|(scale, skipped)| *scale == 32768.0 / 2f64.powf(*skipped)), "{lines:?}");
    // ... until the gradients fit: then steps run and the scale stays.
    let (scale, count) = lines[skipped - 1];
    assert_eq!(lines[skipped], (scale, count), "{lines:?}");
    assert!(lines[skipped..skipped + 3].iter().all(|&l| l == (scale, count)), "{lines:?}");
    // Without the overflow nothing is skipped and the scale stays 2^15.
    let clean = scratch("mixed-scaling-clean");
    succeeds(run_with(&clean, &scaled_f16(1.0, 10, false), &[], &[]));
    assert!(scales(&clean).iter().all(|&l| l == (32768.0, 0.0)), "{:?}", scales(&clean));
}

/// A skipped step is not one of the optimizer's steps: an optimizer that
/// records the `step` it is given (and leaves the parameters alone) has
/// seen 20 − skipped after 20 steps, as PyTorch's Adam counts its own
/// steps under `GradScaler`.
#[test]
fn skipped_f16_steps_do_not_count_as_optimizer_steps() {
    let dir = scratch("mixed-scaling-steps");
    let program = format!(
        r#"
{}
optimizer stepper() {{
    state seen = zeros_like(param)
    update {{
        seen = seen * 0.0 + step
        param
    }}
}}
let net = Mlp(seed = 42)
train net on digits |> batch(64) {{
    loss(x, y) = softmax_cross_entropy(net(x), y) * 1e4
    optimizer = stepper()
    steps = 20
    precision = "f16"
    log "log.jsonl" every 1 steps
    checkpoint "ck.safetensors" every 20 steps
}}
"#,
        digits_model()
    );
    succeeds(run_with(&dir, &program, &[], &[]));
    let out = succeeds(run_with(
        &dir,
        "print(collect(load_safetensors(\"ck.safetensors\", \"optimizer/l2.b/seen\")))",
        &[],
        &[],
    ));
    let skipped = scales(&dir).last().expect("a log line").1;
    assert!(skipped >= 5.0, "the first steps are skipped: {:?}", scales(&dir));
    let seen = 20.0 - skipped;
    assert!(out.contains(&format!("[{seen}, {seen}, {seen},")), "expected step {seen} everywhere:\n{out}");
}

#[test]
fn f16_loss_scaling_resumes_bit_exactly() {
    let whole = scratch("mixed-resume-whole");
    let expected = succeeds(run_with(&whole, &scaled_f16(1e4, 24, false), &[], &[]));
    let parts = scratch("mixed-resume-parts");
    succeeds(run_with(&parts, &scaled_f16(1e4, 12, false), &[], &[]));
    // The checkpoint at step 10 holds the halved scale and its counters.
    let resumed = succeeds(run_with(&parts, &scaled_f16(1e4, 24, true), &[], &[]));
    assert_eq!(resumed, expected);
    assert_eq!(scales(&parts), scales(&whole));
}
