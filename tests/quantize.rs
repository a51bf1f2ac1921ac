//! int8 post-training quantization (`quantize`, §9 *Quantized inference*)
//! end to end: the quantized digits MLP keeps the f32 accuracy within half
//! a point; its int8 products (module `int8_gemm`: VNNI or portable) give
//! the interpreter's results bit for bit on every tier this machine has, at
//! one and two threads, on shapes with ragged edges; quantized models save
//! and load as safetensors (i8 weights plus `.scale`); the plan shows the
//! int8 kernels; and every bad input is a diagnostic.

mod support;
use support::*;

/// The digits MLP trained in f32 for 20 epochs, then quantized with
/// dynamic ranges and with ranges calibrated on the first batch of 256
/// training images;
/// prints the f32, the int8 and the calibrated int8 test accuracy.
fn digits_quantized() -> String {
    format!(
        "{}let q = quantize(net)
let c = quantize(net, calibration = train_set |> batch(256))
print(accuracy(net, test_set |> batch(256)))
print(accuracy(q, test_set |> batch(256)))
print(accuracy(c, test_set |> batch(256)))
",
        digits_trained(20, "")
    )
}

/// A quantized two-layer model with ragged sizes (k = 37 and 19, n = 19
/// and 5: not multiples of the kernels' 4-wide steps or 32-wide panels)
/// and inputs with negative-only, positive-only and zero rows, printing
/// every output value: through a `map` (which runs on the compiled
/// backend) in batches of 6 rows, and a single row at the top level. The
/// layers have biases that are not 0, and the model is read from a file,
/// so its products are not folded away at compile time: the CPU backend
/// applies the first layer's bias and ReLU in the product's store. `c` is
/// calibrated on eight of the rows (the others' values outside its ranges
/// saturate).
const RAGGED: &str = r#"
use std.init.{glorot_uniform}
model Layer(inputs: int, outputs: int, act = identity) {
    param w: f32[inputs, outputs] = glorot_uniform()
    param b: f32[outputs] = uniform(low = -0.5, high = 0.5)
    fn forward(x) = act(x @ w + b)
}
model Two {
    a = Layer(37, 19, act = relu)
    b = Layer(19, 5)
    fn forward(x) = x |> a |> b
}
save(Two(seed = 3), "out/two.safetensors")
let net = Two(seed = 4)
load(net, "out/two.safetensors")
let q = quantize(net)
let x = sin(reshape(arange(13 * 37, dtype = f32), [13, 37]) * 0.37) * 3.0
let rows = concat((x, -abs(x[0:2, :]), abs(x[2:4, :]), zeros([1, 37])), axis = 0)
print(collect(from_tensors(rows) |> batch(6) |> map(fn(x) = q(x))), full = true)
print(q(rows[0]), full = true)
let c = quantize(net, calibration = x[0:8])
print(collect(from_tensors(rows) |> batch(6) |> map(fn(x) = c(x))), full = true)
"#;

fn accuracies(out: &str) -> [f64; 3] {
    let numbers: Vec<f64> = out.split_whitespace().filter_map(|w| w.parse::<f64>().ok()).collect();
    assert!(numbers.len() >= 3, "expected three accuracies, got:\n{out}");
    [numbers[0], numbers[1], numbers[2]]
}

#[test]
fn the_quantized_digits_mlp_keeps_the_f32_accuracy() {
    let dir = scratch("quantize-digits");
    let out = ok(&dir, &digits_quantized());
    let [f32_accuracy, int8_accuracy, calibrated] = accuracies(&out);
    assert!(f32_accuracy > 0.9, "the f32 model did not learn: {f32_accuracy}");
    for (what, accuracy) in [("int8", int8_accuracy), ("calibrated int8", calibrated)] {
        assert!(
            (f32_accuracy - accuracy).abs() <= 0.005,
            "{what} accuracy {accuracy} is more than half a point from f32's {f32_accuracy}"
        );
    }
}

/// `program`'s stdout on the interpreter, after checking that every
/// instruction-set tier this CPU has prints it exactly, at one and two
/// threads, under `--strict` (the tiers it lacks are named on stderr).
fn same_output_on_every_tier(dir: &std::path::Path, program: &str) -> String {
    let reference = run(dir, program, &["--backend", "interp"]);
    assert_eq!(reference.code, Some(0), "{}", reference.stderr);
    let mut skipped = Vec::new();
    for isa in ["portable", "avx512", "amx"] {
        for threads in ["1", "2"] {
            let r = run_with(dir, program, &["--threads", threads, "--strict"], &[("TFC_ISA", isa)]);
            if r.code != Some(0) && r.stderr.contains("E0903") {
                skipped.push(isa);
                break;
            }
            assert_eq!(r.code, Some(0), "TFC_ISA={isa}: {}", r.stderr);
            assert_eq!(r.stdout, reference.stdout, "TFC_ISA={isa} at {threads} threads differs from the interpreter");
        }
    }
    eprintln!("tiers skipped (not on this CPU): {skipped:?}");
    reference.stdout
}

/// The kernels of `program`'s plan (`tfc build --emit plan`) include each
/// of `kernels`.
fn plan_shows(dir: &std::path::Path, program: &str, kernels: &[&str]) {
    put(dir, "plan.tfl", program.as_bytes());
    let plan = tfc(dir, &["build".as_ref(), "plan.tfl".as_ref(), "--emit".as_ref(), "plan".as_ref()]);
    assert_eq!(plan.code, Some(0), "{}", plan.stderr);
    for kernel in kernels {
        assert!(plan.stdout.contains(kernel), "no `{kernel}` in the plan:\n{}", plan.stdout);
    }
}

#[test]
fn int8_products_match_the_interpreter_bit_for_bit_on_every_tier_and_thread_count() {
    let out = same_output_on_every_tier(&scratch("quantize-bits"), RAGGED);
    assert!(out.contains("f32[3, 6, 5]"), "{out}");
}

/// A small CNN read from a file, quantized with dynamic and with calibrated
/// ranges: a first 1-channel convolution (which stays f32), a 4-channel
/// one with VALID padding and a stride of 2 (its patches read in place), a
/// 5-channel one with SAME padding and an even kernel (patches made), then
/// a dense layer; every output value printed, one image with a NaN among
/// them.
const CNN: &str = r#"
use std.nn.{Conv2d, Dense, Flatten}
model Cnn {
    c1 = Conv2d(1, 4, kernel = 3, act = relu)
    c2 = Conv2d(4, 5, kernel = 3, stride = 2, padding = "valid", act = relu)
    c3 = Conv2d(5, 6, kernel = 2, act = relu)
    flat = Flatten()
    out = Dense(3 * 3 * 6, 4)
    fn forward(x: f32[B, 8, 8, 1]) -> f32[B, 4] = x |> c1 |> c2 |> c3 |> flat |> out
}
save(Cnn(seed = 5), "out/cnn.safetensors")
let net = Cnn(seed = 6)
load(net, "out/cnn.safetensors")
let x = sin(reshape(arange(5 * 64, dtype = f32), [5, 8, 8, 1]) * 0.7) * 2.0
let bad = concat((x[0:4], x[4:5] * 0.0 + log(0.0 * x[4:5] - 1.0)), axis = 0)
let q = quantize(net)
let c = quantize(net, calibration = x[0:2])
print(q(bad), full = true)
print(c(bad), full = true)
print(max(abs(q(x) - net(x))) < 0.05 * max(abs(net(x))))
save(c, "out/c.safetensors")
let back = quantize(Cnn(seed = 7), calibration = x)
load(back, "out/c.safetensors")
assert_close(back(x), c(x), tol = 0.0)
"#;

#[test]
fn int8_convolutions_match_the_interpreter_bit_for_bit_on_every_tier_and_thread_count() {
    let dir = scratch("quantize-conv-bits");
    let out = same_output_on_every_tier(&dir, CNN);
    assert!(out.contains("nan") && out.ends_with("bool true\n"), "{out}");
    plan_shows(&dir, CNN, &["conv2d 5x8x8x1 * 3x3x1x4", "quant_conv2d 45x36x5 i8", "quant_conv2d 45x20x6 static i8"]);
}

/// An LSTM and a GRU (std.nn, built on `scan`) quantized with dynamic and
/// with calibrated ranges: the products inside the loop's body run on int8
/// too (the body carries the i8 weights in); calibrated, the products
/// outside the loop get static ranges and those inside keep per-row ones.
const RNN: &str = r#"
use std.nn.{LSTM, GRU, Dense}
model Net {
    lstm = LSTM(8, 16, sequences = true)
    gru = GRU(16, 12)
    out = Dense(12, 4)
    fn forward(x: f32[B, 5, 8]) -> f32[B, 4] = x |> lstm |> gru |> out
}
save(Net(seed = 1), "out/net.safetensors")
let net = Net(seed = 2)
load(net, "out/net.safetensors")
let x = sin(reshape(arange(3 * 40, dtype = f32), [3, 5, 8]))
print(quantize(net)(x), full = true)
print(quantize(net, calibration = x[0:2])(x), full = true)
print(max(abs(quantize(net)(x) - net(x))) < 0.05 * max(abs(net(x))))
"#;

#[test]
fn int8_recurrent_layers_match_the_interpreter_bit_for_bit_on_every_tier_and_thread_count() {
    let dir = scratch("quantize-rnn-bits");
    let out = same_output_on_every_tier(&dir, RNN);
    assert!(out.ends_with("bool true\n"), "{out}");
    // The LSTM's input product (outside the loop), calibrated, and its
    // recurrent product (in the loop's body), int8 with per-row ranges.
    plan_shows(&dir, RNN, &["quant_matmul 15x8x64 static i8", "quant_matmul 3x16x64 i8"]);
}

#[test]
fn the_plan_shows_the_int8_kernels() {
    let dir = scratch("quantize-plan");
    put(&dir, "main.tfl", RAGGED.as_bytes());
    let plan = tfc(&dir, &["build".as_ref(), "main.tfl".as_ref(), "--emit".as_ref(), "plan".as_ref()]);
    assert_eq!(plan.code, Some(0), "{}", plan.stderr);
    assert!(plan.stdout.contains("quant_matmul 6x37x19 i8"), "{}", plan.stdout);
    assert!(plan.stdout.contains("quant_matmul 6x19x5 static i8"), "{}", plan.stdout);
    // The CPU backend applies the hidden layer's bias and ReLU as the
    // product is stored: no pass of their own.
    put(&dir, "bench.tfl", format!("{RAGGED}\nexport fn logits(x: f32[13, 37]) = q(x)\n").as_bytes());
    let args = ["bench", "bench.tfl", "--steps", "2", "--warmup", "1", "--profile"];
    let profile = tfc(&dir, &args.map(|a| a.as_ref()));
    assert_eq!(profile.code, Some(0), "{}", profile.stderr);
    let fused = profile.stdout.lines().find(|l| l.contains("int8 gemm 13x37x19 ("));
    assert!(fused.is_some_and(|l| l.contains("bias and relu applied")), "{}", profile.stdout);
    assert!(!profile.stdout.contains("fused 13x19"), "{}", profile.stdout);
    // A C library has no int8 code: refused, saying what to export instead.
    let args = ["build", "bench.tfl", "--emit", "lib", "-o", "out/lib"];
    let lib = tfc(&dir, &args.map(|a| a.as_ref()));
    assert_eq!(lib.code, Some(1), "{}", lib.stderr);
    for part in ["E0345", "is an int8 product", "export the f32 model to the library"] {
        assert!(lib.stderr.contains(part), "no `{part}` in:\n{}", lib.stderr);
    }
}

#[test]
fn quantized_models_save_and_load_as_safetensors() {
    let dir = scratch("quantize-save");
    let program = format!(
        "{RAGGED}
save(q, \"out/q.safetensors\")
let other = quantize(Two(seed = 9))
load(other, \"out/q.safetensors\")
assert_close(other(rows), q(rows), tol = 0.0)
assert_close(other.a.w, q.a.w, tol = 0.0)
print(sum(abs(Two(seed = 9).a.w - q.a.w)) > 0.0)
"
    );
    let out = ok(&dir, &program);
    assert!(out.trim_end().ends_with("bool true"), "{out}");
    let file = std::fs::read(dir.join("out/q.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8_lossy(&file[8..8 + header_len]);
    let entry =
        |name: &str| header.split(&format!("\"{name}\":{{")).nth(1).map(|rest| rest.split('}').next().unwrap_or(""));
    assert!(entry("a.w").is_some_and(|e| e.contains(r#""dtype":"I8","shape":[37,19]"#)), "{header}");
    assert!(entry("a.w.scale").is_some_and(|e| e.contains(r#""dtype":"F32","shape":[19]"#)), "{header}");
}

#[test]
fn bad_inputs_are_diagnostics() {
    let dir = scratch("quantize-bad");
    let model =
        "use std.nn.{Dense}\nuse std.optim.sgd\nmodel M {\n    l = Dense(4, 3)\n    fn forward(x) = x |> l\n}\n";
    // A quantized file into an f32 model, and an f32 file into a quantized one.
    fails(
        &dir,
        &format!("{model}save(quantize(M()), \"q.safetensors\")\nload(M(), \"q.safetensors\")"),
        &["E0001", "`l.w` is i8[4, 3] in the file but the model expects f32[4, 3]", "quantize(Model(…))"],
    );
    fails(
        &dir,
        &format!("{model}save(M(), \"f.safetensors\")\nload(quantize(M()), \"f.safetensors\")"),
        &["E0001", "`l.w` is f32[4, 3] in the file but the model expects i8[4, 3]", "`l.w.scale` is missing"],
    );
    fails(
        &dir,
        "model S {\n    param s: f32[4] = ones()\n    fn forward(x) = x * s\n}\nlet q = quantize(S())",
        &["E0324", "model `S` has no f32 weight matrix to quantize"],
    );
    fails(&dir, "let q = quantize(3)", &["`quantize` expects a model"]);
    // Calibration data that is not a tensor, does not fit the model's
    // input, or reaches no int8 product; a file quantized without
    // calibration into a calibrated model.
    fails(
        &dir,
        &format!("{model}let q = quantize(M(), calibration = 3)"),
        &["E0324", "calibration data must be an f32 tensor of example inputs, not"],
    );
    fails(
        &dir,
        &format!("{model}let q = quantize(M(), calibration = from_tensors(ones([8, 4])))"),
        &["E0324", "a calibration dataset must be batched", "calibration = ds |> batch(512)"],
    );
    fails(
        &dir,
        &format!("{model}let q = quantize(M(), calibration = ones([8, 5]))"),
        &["E0324", "the calibration data does not fit model `M`", "running `M` on it"],
    );
    fails(
        &dir,
        "model T {\n    param w: f32[3, 4] = ones()\n    fn forward(x) = x @ transpose(w)\n}\n\
         let q = quantize(T(), calibration = ones([2, 4]))",
        &["E0324", "calibrating `T` ran none of its int8 products"],
    );
    fails(
        &dir,
        &format!(
            "{model}save(quantize(M()), \"d.safetensors\")\n\
             load(quantize(M(), calibration = ones([2, 4])), \"d.safetensors\")"
        ),
        &["E0001", "`l.w.input_range` is missing"],
    );
    fails(
        &dir,
        &format!(
            "{model}let q = quantize(M())\nlet data = from_tensors(ones([8, 4]), zeros([8, 3])) |> batch(4)\n\
             train q on data {{\n    loss(x, y) = mean((q(x) - y) ^ 2)\n    optimizer = sgd(lr = 0.1)\n    epochs = 1\n}}"
        ),
        &["E0324", "model `M` is quantized: its int8 products have no gradient"],
    );
    fails(
        &dir,
        "let w = cast(ones([2, 2]), i8)\nprint(w + w)",
        &["E0301", "add of an i8 tensor: i8 values (quantized weights) only convert with `cast`"],
    );
}
