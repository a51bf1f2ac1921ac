//! The streaming pipeline runtime end to end through `tfc run`: every
//! transform on its edge cases (empty datasets, a last partial batch, a
//! shuffle buffer larger than the data, repeat after cache, cache files),
//! determinism across `parallel` and `prefetch` settings, and errors from
//! each stage reaching the user as one diagnostic naming the element —
//! with no hang (each run has a deadline) and a non-zero exit.

mod support;
use support::*;

#[test]
fn transforms_on_edge_cases() {
    let d = scratch("edges");
    let out = ok(
        &d,
        r#"print(count(range(0) |> batch(4)))
print(count(range(5) |> skip(9)), count(range(5) |> take(0)))
print(collect(range(6) |> batch(3) |> map(fn(x) = sum(x)) |> take(2)))
let last = range(7) |> batch(3)
print(count(last), count(range(7) |> batch(3, drop_remainder = true)))
print(evaluate(last, fn(x) = cast(shape(x)[0], f32)))
print(collect(range(5) |> shuffle(100, seed = 3)))
print(collect(range(5) |> shuffle(1, seed = 3)))
print(collect(range(30) |> shuffle(7, seed = 5) |> skip(3) |> take(20)))
print(collect(range(3) |> map(fn(i) = i * 10) |> cache() |> repeat(3)))
print(collect(range(4) |> cache() |> shuffle(4, seed = 2) |> repeat(2)))
print(first(range(6) |> filter(fn(i) = i > 1) |> skip(1) |> take(2)))
print(collect(range(4) |> prefetch(1) |> map(fn(i) = i + 1) |> prefetch(auto)))
"#,
    );
    assert_eq!(
        out,
        "0\n0 0\ni32[2] [3, 12]\n3 2\nf32 2.7142856\ni32[5] [0, 2, 4, 3, 1]\ni32[5] [0, 1, 2, 3, 4]\ni32[20] [3, 4, 10, 1, 9, 7, 0, 12, 17, 18, 8, 14, 21, 16, 13, 15, 19, 23, 22, 20]\ni32[9] [0, 10, 20, 0, 10, 20, 0, 10, 20]\ni32[8] [1, 0, 2, 3, 1, 0, 2, 3]\ni32 3\ni32[4] [1, 2, 3, 4]\n"
    );
}

#[test]
fn empty_data_is_reported_not_hung() {
    let d = scratch("empty");
    fails(&d, "print(first(range(3) |> filter(fn(i) = i > 5) |> prefetch(2)))\n", &["E0402", "the dataset is empty"]);
    fails(&d, "print(first(range(0) |> map(fn(i) = i, parallel = 2)))\n", &["the dataset is empty"]);
}

const DETERMINISM: &str = r#"
let data = range(192) |> map(fn(i) = (cast(i, f32) * 0.37 + sin(cast(i, f32)), i - i / 7 * 7)PAR)
let ds = data |> shuffle(64, seed = 9) |> batch(16) |> map(fn(x, y) = (sum(x), sum(y)))PRE
print(collect(ds |> take(12) |> map(fn(a, b) = a)))
print(collect(ds |> take(12) |> map(fn(a, b) = b)))
"#;

#[test]
fn results_do_not_depend_on_parallel_or_prefetch() {
    let d = scratch("determinism");
    let run_with = |par: &str, pre: &str| ok(&d, &DETERMINISM.replace("PAR", par).replace("PRE", pre));
    let reference = run_with("", "");
    assert!(reference.contains("f32[12]"), "{reference}");
    for (par, pre) in [
        (", parallel = 1", ""),
        (", parallel = 2", " |> prefetch(1)"),
        (", parallel = 5", " |> prefetch(auto)"),
        (", parallel = auto", " |> prefetch(3)"),
    ] {
        assert_eq!(run_with(par, pre), reference, "parallel{par} prefetch{pre}");
    }
}

#[test]
fn training_is_bit_identical_with_a_threaded_pipeline() {
    let d = scratch("train_threads");
    let program = r#"
use std.nn.{Dense}
use std.loss.mse
use std.optim.adam
model Net { l = Dense(3, 1); fn forward(x) = l(x) }
let xs = range(64) |> map(fn(i) = (cast(i - i / 5 * 5, f32) * ones([3]) / 5.0, cast(i - i / 3 * 3, f32) * ones([1]))MAP)
let net = Net(seed = 1)
train net on xs |> shuffle(32, seed = 4) |> batch(8)PRE {
    loss(x, y) = mse(net(x), y)
    optimizer = adam(lr = 0.05)
    epochs = 3
}
print(net.l.w)
"#;
    let plain = ok(&d, &program.replace("MAP", "").replace("PRE", ""));
    let threaded = ok(&d, &program.replace("MAP", ", parallel = 3").replace("PRE", " |> prefetch(auto)"));
    assert_eq!(plain, threaded);
}

#[test]
fn a_failing_map_names_the_element_at_any_parallelism() {
    let d = scratch("map_error");
    for (par, pre) in [
        ("", ""),
        (", parallel = 1", ""),
        (", parallel = 3", " |> prefetch(2)"),
        (", parallel = auto", " |> prefetch(auto)"),
    ] {
        let program = format!(
            "let ds = range(52) |> map(fn(i) = 100 / (i - 37){par}) |> batch(4){pre}\nprint(count(ds))\nprint(first(ds))\nprint(collect(ds |> map(fn(x) = sum(x))))\n"
        );
        let r = run(&d, &program, &[]);
        assert_eq!(r.code, Some(1), "{par}{pre}: {}", r.stderr);
        assert_eq!(r.stdout, "13\ni32[4] [-3, -3, -3, -3]\n", "{par}{pre}: the output before the error");
        assert!(r.stderr.contains("division by zero"), "{par}{pre}: {}", r.stderr);
        assert!(r.stderr.contains("while computing `map` on element 37 of the dataset"), "{par}{pre}: {}", r.stderr);
    }
}

#[test]
fn errors_from_filter_and_from_a_stage_before_a_parallel_map() {
    let d = scratch("stage_errors");
    fails(
        &d,
        "print(first(range(20) |> filter(fn(i) = 10 / (i - 12) > -100) |> skip(14) |> prefetch(2)))\n",
        &["division by zero", "`filter` on element 12"],
    );
    fails(
        &d,
        "print(collect(range(20) |> map(fn(i) = 10 / (i - 15)) |> map(fn(i) = i + 1, parallel = 4)))\n",
        &["division by zero", "`map` on element 15"],
    );
    let r = run(
        &d,
        r#"
use std.nn.{Dense}
use std.loss.mse
use std.optim.sgd
model Net { l = Dense(1, 1); fn forward(x) = l(x) }
let net = Net(seed = 1)
let data = range(40) |> map(fn(i) = (ones([1]) * cast(10 / (i - 30), f32), ones([1])), parallel = 2)
train net on data |> batch(4) |> prefetch(auto) {
    loss(x, y) = mse(net(x), y)
    optimizer = sgd(lr = 0.01)
    epochs = 2
}
print(net.l.w)
"#,
        &[],
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("`map` on element 30"), "{}", r.stderr);
    assert!(r.stdout.is_empty());
}

#[test]
fn cache_to_a_file_is_reused_and_rewritten_for_another_plan() {
    let d = scratch("cache_file");
    let program = |scale: &str| {
        format!("let ds = range(6) |> map(fn(i) = cast(i, f32) * {scale}) |> cache(\"out/c.safetensors\") |> batch(2)\nprint(collect(ds |> map(fn(x) = sum(x))))\n")
    };
    let r = run(&d, &program("2.0"), &["--verbose"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "f32[3] [2, 10, 18]\n");
    assert!(r.stderr.contains("cache: wrote 6 elements"), "{}", r.stderr);
    assert!(d.join("out/c.safetensors").exists());
    let again = run(&d, &program("2.0"), &["--verbose"]);
    assert_eq!(again.stdout, r.stdout);
    assert!(again.stderr.contains("read 6 elements from"), "{}", again.stderr);
    let other = run(&d, &program("3.0"), &["--verbose"]);
    assert_eq!(other.code, Some(0), "{}", other.stderr);
    assert!(
        other.stderr.contains("cache: wrote 6 elements"),
        "a changed plan must not reuse the file: {}",
        other.stderr
    );
    assert_eq!(other.stdout, "f32[3] [3, 15, 27]\n");
}

#[test]
fn verbose_reports_the_pipeline_choices() {
    let d = scratch("verbose");
    let r = run(&d, "print(count(range(9)))\nprint(collect(range(300) |> map(fn(i) = i * 2, parallel = auto) |> prefetch(auto) |> batch(100) |> map(fn(x) = sum(x))))\n", &["--verbose"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "9\ni32[3] [9900, 29900, 49900]\n");
    assert!(r.stderr.contains("map(parallel = auto) at transform 1: starts with 1 worker"), "{}", r.stderr);
    assert!(r.stderr.contains("prefetch(auto) at transform 2"), "{}", r.stderr);
    let quiet = run(&d, "print(collect(range(3) |> prefetch(auto)))\n", &[]);
    assert!(!quiet.stderr.contains("pipeline:"), "{}", quiet.stderr);
}

#[test]
fn bad_pipeline_arguments_are_check_errors() {
    let d = scratch("bad_args");
    fails(&d, "print(count(range(4) |> batch(0)))\n", &["the batch size must be positive, not 0"]);
    fails(&d, "print(count(range(4) |> prefetch(0)))\n", &["must be positive or `auto`, not 0"]);
    fails(
        &d,
        "print(count(range(4) |> map(fn(i) = i, parallel = 0)))\n",
        &["`parallel` must be positive or `auto`, not 0"],
    );
    fails(&d, "print(count(range(4) |> shuffle(0)))\n", &["the buffer size must be positive"]);
}

/// A training program whose data has a parallel map, a shuffle and a
/// prefetch; `SIZE` and `BUF` set its size and shuffle buffer.
const AHEAD: &str = r#"
use std.nn.{Dense}
use std.loss.mse
use std.optim.sgd
model Net { l = Dense(1, 1); fn forward(x) = l(x) }
let net = Net(seed = 1)
// The integer division keeps the map per element (it may fail), so the
// shuffle buffer fills with mapped elements, which takes a while.
train net on range(SIZE) |> map(fn(i) = cast(i / 1, f32) * ones([1]) + 0.5, parallel = 3) |> shuffle(BUF, seed = 2)
    |> batch(4) |> prefetch(auto) {
    loss(x) = mean(net(x))
    optimizer = sgd(lr = 0.1)
    epochs = 4
}
"#;

fn train_plan(program: &tfc::ir::Program) -> &tfc::ir::plan::TrainPlan {
    program
        .effects
        .iter()
        .find_map(|e| match e {
            tfc::ir::Effect::Train(p) => Some(p),
            _ => None,
        })
        .expect("the program trains")
}

fn compile(text: &str) -> tfc::ir::Program {
    let mut session = tfc::driver::Session::new();
    let file = session.add_source("ahead.tfl", text);
    session.compile(file, &tfc::passes::Options::default()).expect("the program compiles")
}

#[test]
fn epochs_started_ahead_are_the_epochs_run_alone() {
    use tfc::runtime::exec::{Executor, RunOptions};
    use tfc::runtime::pipeline::{elements, for_each_ahead, Ahead};
    let program = compile(&AHEAD.replace("BUF", "16").replace("SIZE", "40"));
    let plan = train_plan(&program);
    let mut sink = std::io::sink();
    let mut ex = Executor::new(&program, &mut sink, RunOptions::default()).expect("an executor");
    let mut ahead = Ahead::default();
    let mut epochs = Vec::new();
    for epoch in 0..4u64 {
        let mut got = Vec::new();
        // Epochs 1..3 were started ahead, while the one before was consumed.
        for_each_ahead(&mut ex, &plan.data, epoch, Some(epoch + 1), &mut ahead, None, |_, _, e| {
            got.push(e);
            Ok(true)
        })
        .expect("the epoch runs");
        let alone = elements(&mut ex, &plan.data, epoch).expect("the epoch runs alone");
        assert_eq!(got, alone, "epoch {epoch}");
        assert_eq!(got.len(), 10);
        epochs.push(got);
    }
    assert_ne!(epochs[0], epochs[1], "the shuffle differs between epochs");
}

#[test]
fn a_pass_started_ahead_stops_promptly_when_dropped() {
    use std::time::Instant;
    use tfc::runtime::exec::{Executor, RunOptions};
    use tfc::runtime::pipeline::{for_each_ahead, Ahead};
    let program = compile(&AHEAD.replace("BUF", "200000").replace("SIZE", "200000"));
    let plan = train_plan(&program);
    let mut sink = std::io::sink();
    let mut ex = Executor::new(&program, &mut sink, RunOptions::default()).expect("an executor");
    let mut ahead = Ahead::default();
    let start = Instant::now();
    // Epoch 0's first batch waits for its 200000-element shuffle buffer;
    // then epoch 1 starts filling its own, and the loop stops at the second.
    for_each_ahead(&mut ex, &plan.data, 0, Some(1), &mut ahead, None, |_, i, _| Ok(i == 0)).expect("the epoch runs");
    let fill = start.elapsed();
    let start = Instant::now();
    drop(ahead);
    let stop = start.elapsed();
    // Waiting for epoch 1's fill would take about as long as epoch 0's; half
    // leaves room for a loaded machine's slower thread wake-ups.
    assert!(stop * 2 < fill, "dropping the pass of epoch 1 took {stop:?}; filling the buffer took {fill:?}");
}

const MOVED_MAP: &str = r#"
let images = reshape(arange(300, dtype = f32), [50, 2, 3])
let data = from_tensors(images, arange(50)) |> map(fn(x, y) = (transpose(x) * 0.5 - 3.0, y * 2)PAR)
let ds = data |> shuffle(20, seed = 4) |> skip(3) |> take(45) |> batch(8)PRE
print(count(ds))
print(first(ds))
print(evaluate(ds, fn(x, y) = mean(x) + mean(cast(y, f32))))
print(evaluate(ds |> skip(5), fn(x, y) = sum(x) + sum(cast(y, f32))))
"#;

#[test]
fn a_map_moved_behind_batch_gives_what_it_gives_per_element() {
    // The optimizer runs this map on whole batches of 8 (`vectorize_maps`),
    // and the last batch of 5 element by element; unoptimized (`-O0`) it
    // runs per element, before the shuffle. Both must print the same, at
    // any `parallel` setting.
    let d = scratch("moved_map");
    let program = |par: &str, pre: &str| MOVED_MAP.replace("PAR", par).replace("PRE", pre);
    let per_element = run(&d, &program("", ""), &["-O0"]);
    assert_eq!(per_element.code, Some(0), "{}", per_element.stderr);
    assert!(per_element.stdout.starts_with("6\n"), "{}", per_element.stdout);
    for (par, pre) in [("", ""), (", parallel = 2", " |> prefetch(2)"), (", parallel = auto", " |> prefetch(auto)")] {
        let r = run(&d, &program(par, pre), &["--verbose"]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert_eq!(r.stdout, per_element.stdout, "{par}{pre}");
        if !par.is_empty() {
            assert!(r.stderr.contains("(on batches of 8)"), "{par}: the map runs on batches: {}", r.stderr);
        }
    }
}

#[test]
fn map_and_filter_after_a_batch_with_a_shorter_last_batch() {
    // Batches of 10 elements by 4: [0..3], [4..7], [8, 9]. Each function is
    // traced for both sizes; one that keeps the batch axis gives batches
    // again, one that drops it gives plain elements.
    let d = scratch("map_after_batch");
    let out = ok(
        &d,
        r#"let ds = range(10) |> batch(4)
print(collect(ds |> map(fn(x) = sum(x))))
let scaled = ds |> map(fn(x) = cast(x, f32) * 0.5, parallel = 2)
print(count(scaled), first(scaled))
print(evaluate(scaled, fn(x) = mean(x)))
print(evaluate(ds |> filter(fn(x) = sum(x) > 10) |> map(fn(x) = cast(x, f32)), fn(x) = sum(x)))
print(collect(ds |> map(fn(x) = x[0])))
"#,
    );
    assert_eq!(out, "i32[3] [6, 22, 17]\n3 f32[4] [0, 0.5, 1, 1.5]\nf32 2.25\nf32 20.333334\ni32[3] [0, 4, 8]\n");
}

#[test]
fn a_tensor_a_dataset_was_made_from_is_still_there_after_training() {
    // The dataset takes the tensor's rows without a copy when nothing
    // else reads it (`alone`); whatever reads it later gets the same
    // values (`read_later`), and the training is the same.
    let d = scratch("source-moved");
    let program = |after: &str| {
        format!(
            r#"use std.nn.{{Dense}}
use std.loss.softmax_cross_entropy
use std.optim.sgd
let xs = normal([64, 4], seed = 1)
let ys = cast(floor(uniform([64], seed = 2) * 3.0), i32)
print(sum(xs))
let net = Dense(4, 3, seed = 0)
train net on from_tensors(xs, ys) |> batch(16) {{
    loss(x, y) = softmax_cross_entropy(net(x), y)
    optimizer = sgd(lr = 0.1)
    epochs = 2
}}
print(sum(net(ones([1, 4]))))
{after}"#
        )
    };
    let alone = ok(&d, &program(""));
    let out = ok(
        &d,
        &program("print(sum(xs))\nprint(sum(xs * 2.0))\nprint(evaluate(from_tensors(xs, xs) |> batch(16), fn(a, b) = sum(a - b)))\n"),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert_eq!(alone, format!("{}\n{}\n", lines[0], lines[1]), "the same training either way");
    assert_eq!(lines[0], lines[2], "{out}");
    let sum: f32 = lines[0].trim_start_matches("f32 ").parse().expect("a sum");
    let twice: f32 = lines[3].trim_start_matches("f32 ").parse().expect("a sum");
    assert_eq!(twice, 2.0 * sum, "{out}");
    assert_eq!(lines[4], "f32 0", "{out}");
}
