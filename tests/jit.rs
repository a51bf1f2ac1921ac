//! The JIT backend against the reference interpreter on whole programs:
//! every run case (`tests/cases/run`) and every example gives the same
//! printed values on `--backend jit` as on the interpreter, optimized and
//! at `-O0`, and training steps really run compiled code.
//!
//! Tolerance: printed text must match token by token, except numbers, which
//! agree when `|jit - interp| <= 1e-3 * max(|jit|, |interp|) + 1e-4`
//! (printed values carry 4–6 significant digits; matmul through `gemm` sums
//! in a different order and `exp`/`log`/`tanh` are polynomials a few ulps
//! from libm, so a training run drifts in the last printed digit at most).
//! Examples train for at most 2 epochs here (they train for 20–40 as
//! shipped, which the interpreter would take minutes for), in a temporary
//! directory so their checkpoints do not touch `examples/out`.

mod support;

use std::path::Path;
use support::backends::{compare_all, host_ops, owned, root, run, run_cases, same_values, shortened_examples};
use tfc::backend::BackendKind as Backend;
use tfc::driver::Session;
use tfc::runtime::exec::{execute, RunOptions};

#[test]
fn every_run_case_prints_the_same_values_on_jit_and_interp() {
    compare_all(&run_cases(), Backend::Jit, true, 1e-3);
}

#[test]
fn every_example_prints_the_same_values_on_jit_and_interp() {
    let tmp = std::env::temp_dir().join(format!("tfc-jit-examples-{}", std::process::id()));
    compare_all(&shortened_examples(&tmp, &["examples", "examples/bench"]), Backend::Jit, true, 1e-3);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Which run cases and examples `--strict` refuses on the CPU backend —
/// the programs with a training step, metric or `map` kernel that the plan
/// leaves to the host interpreter — and for which ops. A new host kernel
/// fails this test, and so does one that no longer needs the host (then
/// shorten the list): it is the record of what the CPU backend still lacks.
#[test]
fn strict_refuses_exactly_the_programs_with_known_host_kernels() {
    // None: since `scan` loops run natively (their bodies planned as units
    // of their own), every kernel of these programs has CPU code.
    let known: &[(&str, &[&str])] = &[];
    let found = host_ops(Backend::Jit);
    assert_eq!(found, owned(known));
}

/// What each step of the first training step of `source` computes, in
/// run order (the labels of `tfc bench --profile`).
fn step_labels(source: &str) -> Vec<String> {
    first_step(source, 1, |unit| unit.profile().into_iter().map(|t| t.label).collect())
}

/// How the JIT runs the kernels of the first training step of `source`.
fn step_counts(source: &str) -> tfc::backend::StepCounts {
    first_step(source, 1, |unit| unit.counts())
}

/// `what` of the JIT unit of the first training step of `source`, prepared
/// for `threads` worker threads.
fn first_step<T>(source: &str, threads: usize, what: impl Fn(&dyn tfc::backend::PreparedUnit) -> T) -> T {
    let mut session = Session::new();
    let file = session.add_source("step.tfl", source);
    let program = session.compile(file, &tfc::passes::Options::default()).expect("compiles");
    let tfc::ir::Effect::Train(plan) =
        program.effects.iter().find(|e| matches!(e, tfc::ir::Effect::Train(_))).expect("a train effect")
    else {
        unreachable!()
    };
    let mut out = Vec::new();
    let options = RunOptions { backend: Backend::Jit, threads, ..RunOptions::default() };
    let mut ex = tfc::runtime::exec::Executor::new(&program, &mut out, options).unwrap();
    let region = ex.compile_region(&plan.steps[0].1).expect("the step prepares");
    let unit = region.unit();
    assert_eq!(unit.backend(), "jit");
    what(unit)
}

/// The runtime finds a region's compiled unit by the region's id; a plan
/// that has no unit of that id, or a unit of other nodes, is an error —
/// never a quiet run on the interpreter.
#[test]
fn a_broken_region_to_unit_join_is_an_error() {
    let source = "use std.optim.sgd\nmodel S { param w: f32[1] = ones()\n fn forward(x) = x * w }\nlet net = S()\n\
        train net on from_tensors([1.0, 2.0, 3.0, 4.0]) |> batch(2) {\n\
            loss(x) = mean(square(net(x)))\n optimizer = sgd(lr = 0.1)\n epochs = 1\n}\nprint(net.w)\n";
    let mut session = Session::new();
    let file = session.add_source("join.tfl", source);
    let program = session.compile(file, &tfc::passes::Options::default()).expect("compiles");
    let run = |p: &tfc::ir::Program| {
        let mut out = Vec::new();
        let options = RunOptions { backend: Backend::Jit, ..RunOptions::default() };
        tfc::runtime::exec::execute(p, &mut out, options).map(|_| String::from_utf8(out).unwrap())
    };
    assert_eq!(run(&program).expect("the intact plan runs"), "f32[1] [-0.75]\n");
    fn step(p: &mut tfc::ir::Program) -> &mut tfc::ir::compiled::CompiledUnit {
        let units = &mut p.compiled.as_mut().expect("a plan").units;
        units.iter_mut().find(|u| u.name.contains("step")).expect("a step unit")
    }
    let mut renumbered = program.clone();
    step(&mut renumbered).region = Some(tfc::ir::plan::RegionId(9999));
    let e = run(&renumbered).expect_err("a unit of another region's id must not run");
    assert!(e.message.contains("no compilation unit for region"), "{}", e.message);
    let mut emptied = program.clone();
    step(&mut emptied).kernels.pop();
    let e = run(&emptied).expect_err("a unit of other nodes must not run");
    assert!(e.message.contains("plans") && e.message.contains("nodes but region"), "{}", e.message);
}

/// A small training step (a 64-128-10 MLP's) runs on the calling thread
/// even when worker threads are asked for: waking them would cost more
/// than the step (it ran 8x slower at two threads); the bench MLP's step
/// uses them.
#[test]
fn only_steps_with_enough_work_use_worker_threads() {
    let source = |dims: &str, batch: usize| {
        format!(
            "use std.nn.{{Dense}}\nuse std.loss.softmax_cross_entropy\nuse std.optim.adam\n\
             model M {{ l1 = Dense({dims}, act = relu)\n l2 = Dense(128, 10)\n fn forward(x) = x |> l1 |> l2 }}\n\
             let net = M(seed = 1)\n\
             let xs = normal([{batch}, {}], seed = 2)\n\
             let ys = zeros([{batch}], dtype = i32)\n\
             train net on from_tensors(xs, ys) |> batch({batch}) {{\n\
                 loss(x, y) = softmax_cross_entropy(net(x), y)\n optimizer = adam(lr = 1e-2)\n epochs = 1\n}}\n",
            dims.split(',').next().unwrap_or("1").trim()
        )
    };
    assert!(!first_step(&source("64, 128", 64), 2, |u| u.is_threaded()));
    assert!(first_step(&source("784, 128", 256), 2, |u| u.is_threaded()));
    assert!(!first_step(&source("784, 128", 256), 1, |u| u.is_threaded()));
}

#[test]
fn a_training_step_runs_compiled_kernels_and_gemm() {
    let source = "use std.nn.{Dense}\nuse std.loss.softmax_cross_entropy\nuse std.optim.adam\n\
        model M { l1 = Dense(8, 16, act = relu)\n l2 = Dense(16, 3)\n fn forward(x) = x |> l1 |> l2 }\n\
        let net = M(seed = 1)\n\
        let xs = normal([12, 8], seed = 2)\n\
        let ys = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]\n\
        train net on from_tensors(xs, ys) |> batch(4) {\n\
            loss(x, y) = softmax_cross_entropy(net(x), y)\n optimizer = adam(lr = 1e-2)\n epochs = 3\n}\n\
        print(net.l2.b)\n";
    let counts = step_counts(source);
    assert!(counts.gemm >= 2, "{counts:?}");
    // Only Adam's scalar `beta ^ step` runs on the interpreter; the loss's
    // one_hot compiles with the rest of its kernel.
    assert!(counts.interp <= 1, "{counts:?}");
    assert!(counts.jit >= 2, "{counts:?}");
    // The weight gradients' `transpose(x)` operands are read through gemm's
    // strides (the input gradients' `transpose(w)` are materialized).
    assert!(counts.folded >= 1, "{counts:?}");
    // The first layer's product goes straight into its ReLU's buffer, which
    // the bias-and-ReLU epilogue then overwrites in place (checked against
    // the interpreter below).
    assert!(counts.in_place >= 1, "{counts:?}");
    // Steps that touch disjoint storage may run at once: a layer's weight
    // and input gradients, the Adam updates of different parameters.
    assert!(counts.forks >= 2, "{counts:?}");
    // Kernels that differ only in size (the Adam updates of the two layers'
    // weights, of their biases) share compiled code: sizes are arguments.
    let distinct = tfc::backend::cpu::with_compiler(|c| Ok(c.compiled())).unwrap();
    assert!(distinct < counts.jit, "{distinct} distinct kernels for {counts:?}");
    // And the values agree with the interpreter.
    let interp = run(Path::new("step.tfl"), source, Backend::Interp, true).unwrap();
    let jit = run(Path::new("step.tfl"), source, Backend::Jit, true).unwrap();
    same_values(&jit, &interp).unwrap();
}

/// The input gradients' `g @ transpose(w)` read a materialized transpose:
/// `[37, 21]` and `[21, 3]` weights fill whole 16x8 blocks and leave ragged
/// rows and columns, and the training agrees with the interpreter.
#[test]
fn input_gradients_through_materialized_transposes_match_the_interpreter() {
    let source = "use std.nn.{Dense}\nuse std.loss.softmax_cross_entropy\nuse std.optim.sgd\n\
        model M { l1 = Dense(5, 37, act = relu)\n l2 = Dense(37, 21, act = relu)\n l3 = Dense(21, 3)\n\
        fn forward(x) = x |> l1 |> l2 |> l3 }\n\
        let net = M(seed = 3)\n\
        let xs = normal([24, 5], seed = 4)\n\
        let ys = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]\n\
        train net on from_tensors(xs, ys) |> batch(12) {\n\
            loss(x, y) = softmax_cross_entropy(net(x), y)\n optimizer = sgd(lr = 0.1)\n epochs = 4\n}\n\
        print(net.l1.w)\nprint(net.l1.b)\n";
    let profile = step_labels(source);
    assert!(profile.iter().any(|l| l.starts_with("transpose 37x21")), "{profile:?}");
    assert!(profile.iter().any(|l| l.starts_with("gemm 12x21 @ 21x37:")), "{profile:?}");
    let interp = run(Path::new("step.tfl"), source, Backend::Interp, true).unwrap();
    let jit = run(Path::new("step.tfl"), source, Backend::Jit, true).unwrap();
    same_values(&jit, &interp).unwrap();
}

/// Attention's head split and merge (`[B, T, H, D] ↔ [B, H, T, D]`: the
/// last axis stays), its transposed keys (the last two axes swap) and a
/// full reversal of a rank-3 tensor (neither) all run as native transposes,
/// through forward and backward, and train as on the interpreter.
#[test]
fn transposes_of_any_rank_run_natively_and_match_the_interpreter() {
    let source = "use std.nn.{Dense}\nuse std.optim.sgd\n\
        model M { q = Dense(6, 6)\n k = Dense(6, 6)\n\
        fn heads(x) = transpose(reshape(x, [2, 5, 3, 2]), [0, 2, 1, 3])\n\
        fn forward(x) {\n let s = heads(q(x)) @ transpose(heads(k(x)), [0, 1, 3, 2])\n\
        let merged = reshape(transpose(softmax(s) @ heads(x), [0, 2, 1, 3]), [2, 5, 6])\n\
        transpose(merged, [2, 1, 0])\n } }\n\
        let net = M(seed = 5)\n\
        let xs = normal([8, 5, 6], seed = 6)\n\
        train net on from_tensors(xs) |> batch(2) {\n\
            loss(x) = mean(square(net(x)))\n optimizer = sgd(lr = 0.1)\n epochs = 3\n}\n\
        print(net.q.w)\nprint(net.k.b)\n";
    let profile = step_labels(source);
    for shape in ["transpose 2x5x3x2:", "transpose 2x3x5x2:", "transpose 6x5x2:"] {
        assert!(profile.iter().any(|l| l.starts_with(shape)), "no {shape} in {profile:?}");
    }
    assert!(!profile.iter().any(|l| l.starts_with("interpreted: transpose")), "{profile:?}");
    let interp = run(Path::new("step.tfl"), source, Backend::Interp, true).unwrap();
    let jit = run(Path::new("step.tfl"), source, Backend::Jit, true).unwrap();
    same_values(&jit, &interp).unwrap();
}

/// An embedding's lookup and its gradient (gather, scatter-add into the
/// table with repeated ids) run natively and train as on the interpreter;
/// an id out of range is the interpreter's E0402 at the lookup's line.
#[test]
fn embeddings_gather_and_scatter_natively_and_match_the_interpreter() {
    let source = "use std.nn.{Embedding}\nuse std.optim.sgd\n\
        model M { e = Embedding(7, 5)\n fn forward(ids) = sum(square(e(ids))) }\nlet net = M(seed = 2)\n\
        let ids = [[0, 3, 3], [6, 1, 0], [2, 2, 2], [5, 4, 6]]\n\
        train net on from_tensors(ids) |> batch(2) {\n\
            loss(i) = net(i)\n optimizer = sgd(lr = 0.1)\n epochs = 3\n}\nprint(net.e.table)\n";
    let profile = step_labels(source);
    assert!(profile.iter().any(|l| l.starts_with("gather 6 of 1x7x5 rows")), "{profile:?}");
    assert!(profile.iter().any(|l| l.starts_with("scatter_add 6 rows into 1x7x5")), "{profile:?}");
    assert!(!profile.iter().any(|l| l.starts_with("interpreted")), "{profile:?}");
    let interp = run(Path::new("emb.tfl"), source, Backend::Interp, true).unwrap();
    let jit = run(Path::new("emb.tfl"), source, Backend::Jit, true).unwrap();
    assert_eq!(jit, interp, "a gather and a scatter-add are exact");
    let bad = source.replace("[5, 4, 6]]", "[5, 4, 7]]");
    let e = run(Path::new("emb.tfl"), &bad, Backend::Jit, true).expect_err("id 7 is out of range");
    assert!(e.contains("E0402") || e.contains("Runtime"), "{e}");
    assert!(e.contains("gather index 7 is out of range for axis 0 of size 7"), "{e}");
}

/// After training, an evaluation over large batches of a model with
/// BatchNorm: the statements computed at once on the backend (values of
/// the running statistics, broadcast to the batch) hand the evaluation unit
/// what it reads, intact. It once failed with "outside value missing" (the
/// unit reads a broadcast as its source, which the statements did not hand
/// out), then computed wrong accuracies (a handed-out value whose bytes
/// the main unit's plan let a later kernel reuse).
#[test]
fn an_evaluation_after_training_reads_intact_statement_values() {
    let source = "use std.nn.{Dense, BatchNorm, GlobalAvgPool}\nuse std.loss.softmax_cross_entropy\n\
        use std.optim.adam\nuse std.metrics.accuracy\nuse std.init.{he_normal}\n\
        model ConvBn(cin: int, cout: int, stride = 1) {\n param w: f32[3, 3, cin, cout] = he_normal()\n\
        bn = BatchNorm(cout)\n fn forward(x) = bn(conv2d(x, w, stride = stride, padding = 1))\n}\n\
        model Net { c = ConvBn(1, 8)\n c2 = ConvBn(8, 8, stride = 2)\n pool = GlobalAvgPool()\n\
        out = Dense(8, 2)\n fn forward(x: f32[B, 16, 16, 1]) -> f32[B, 2] = out(pool(relu(c2(relu(c(x)))))) }\n\
        let xs = normal([1024, 16, 16, 1], seed = 1)\nlet ys = cast(mean(xs, axis = (1, 2, 3)) > 0.0, i32)\n\
        let data = from_tensors(xs, ys)\nlet net = Net(seed = 1)\n\
        train net on data |> batch(256) {\n loss(x, y) = softmax_cross_entropy(net(x), y)\n\
        optimizer = adam(lr = 1e-2)\n steps = 3\n}\nprint(accuracy(net, data |> batch(512)))\n";
    let interp = run(Path::new("bn.tfl"), source, Backend::Interp, true).unwrap();
    let jit = run(Path::new("bn.tfl"), source, Backend::Jit, true).unwrap();
    same_values(&jit, &interp).unwrap();
}

/// Slices (strided and reversed), pads and concatenations — and their
/// gradients, which are pads, slices and sums of slices — run as native
/// block copies and train exactly as on the interpreter.
#[test]
fn slices_pads_and_concats_run_natively_and_match_the_interpreter() {
    let source = "use std.nn.{Dense}\nuse std.optim.sgd\n\
        model M { l = Dense(6, 4)\n\
        fn forward(x) {\n let h = l(x)\n let a = slice(h, [0, 3], [4, 0], [1, -1])\n\
        let b = pad(slice(h, [0, 0], [4, 4], [1, 2]), [0, 0, 1, 1])\n\
        sum(square(concat((a, b, h), axis = 1)))\n } }\n\
        let net = M(seed = 4)\n\
        train net on from_tensors(normal([8, 6], seed = 5)) |> batch(4) {\n\
            loss(x) = net(x)\n optimizer = sgd(lr = 0.01)\n epochs = 3\n}\nprint(net.l.w)\n";
    let labels = step_labels(source);
    for op in ["slice ", "pad ", "concat "] {
        assert!(labels.iter().any(|l| l.starts_with(op)), "no native {op}in {labels:?}");
    }
    assert!(!labels.iter().any(|l| l.starts_with("interpreted")), "{labels:?}");
    let interp = run(Path::new("window.tfl"), source, Backend::Interp, true).unwrap();
    let jit = run(Path::new("window.tfl"), source, Backend::Jit, true).unwrap();
    same_values(&jit, &interp).unwrap();
}

/// Integer and `f64` kernels that run the interpreter's own loops natively
/// (reductions, `argmax`, matmuls, convolutions and both their gradients,
/// poolings and their gradients, scatter-adds) and copies of every type
/// (transposes, slices, pads, concatenations, gathers of `i32`, `i64`,
/// `bool` and `f64` values): the run cases that use them have no kernel on
/// the host, the `f64` CNN's training step has no interpreted step, and
/// every printed value is exactly the interpreter's.
#[test]
fn integer_bool_and_f64_kernels_run_natively_and_match_the_interpreter_exactly() {
    let cases = [
        "integer_reductions_argmax_and_matmul_run_natively.tfl",
        "integer_and_bool_layouts_run_natively.tfl",
        "f64_convolutions_pools_and_copies_run_natively.tfl",
    ];
    for name in cases {
        let path = root().join("tests/cases/run").join(name);
        let source = std::fs::read_to_string(&path).unwrap();
        let mut session = Session::new();
        let file = session.add_source(&path.to_string_lossy(), &source);
        let opts = tfc::passes::Options { target: Backend::Jit.target(), ..Default::default() };
        let program = session.compile(file, &opts).expect("compiles");
        let host: Vec<String> =
            tfc::passes::partition::host_kernels(&program).iter().map(|d| d.message.clone()).collect();
        assert!(host.is_empty(), "{name}: {host:?}");
        let interp = run(&path, &source, Backend::Interp, true).unwrap();
        let jit = run(&path, &source, Backend::Jit, true).unwrap();
        assert_eq!(jit, interp, "{name}");
    }
    let cnn = std::fs::read_to_string(root().join("tests/cases/run").join(cases[2])).unwrap();
    let labels = step_labels(&cnn);
    let native = [
        "f64 conv2d ",
        "f64 conv2d_grad_input ",
        "f64 conv2d_grad_filter ",
        "f64 Max pool 4x6x6x4",
        "f64 Max pool grad ",
        "f64 Avg pool grad ",
        "f64 matmul ",
        "f64 reduce ",
        "gather ",
        "scatter_add ",
        "pad ",
        "slice ",
        "concat ",
    ];
    for want in native {
        assert!(labels.iter().any(|l| l.starts_with(want)), "no {want}in {labels:?}");
    }
    assert!(!labels.iter().any(|l| l.starts_with("interpreted")), "{labels:?}");
}

/// `cumsum` (f32, f16 and i32 lanes), `argsort` (behind `sort`, `top_k`)
/// and `prod` in a training step run as native loops, none interpreted;
/// the plan puts none of them on the host. (Every run case, this one
/// included, also prints the same values on jit and interp.)
#[test]
fn cumsum_argsort_and_prod_in_a_training_step_run_natively() {
    let path = root().join("tests/cases/run/sorting_scans_and_products_in_a_training_step.tfl");
    let source = std::fs::read_to_string(&path).unwrap();
    let labels = step_labels(&source);
    let native = [
        "f32 argsort 4x6x1 along axis 1, descending",
        "f32 argsort 1x4x6 along axis 1, ascending",
        "f32 cumsum 4x6x1 along axis 1 reversed",
        "f32 cumsum 4x6x1 along axis 1",
        "f16 cumsum 4x6x1 along axis 1",
        "i32 cumsum 4x3x1 along axis 1",
        "reduce Prod 4x6 over [1]",
        "gather ",
        "scatter_add ",
    ];
    for want in native {
        assert!(labels.iter().any(|l| l.contains(want)), "no {want} in {labels:?}");
    }
    assert!(!labels.iter().any(|l| l.starts_with("interpreted")), "{labels:?}");
    let mut session = Session::new();
    let file = session.add_source(&path.to_string_lossy(), &source);
    let opts = tfc::passes::Options { target: Backend::Jit.target(), ..Default::default() };
    let program = session.compile(file, &opts).expect("compiles");
    assert!(tfc::passes::partition::host_kernels(&program).is_empty());
}

/// An index of `take_along_axis` outside its axis is a run-time error
/// (E0402) on both backends, not a read of the neighbouring row through
/// the flat index the gather uses; it names the user's index, its position,
/// the axis and its size (not the flat index).
#[test]
fn take_along_axis_refuses_an_index_outside_the_axis() {
    let ok = "let x = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]\nprint(take_along_axis(x, [[2], [0]], axis = 1))\n";
    for backend in [Backend::Interp, Backend::Jit] {
        assert_eq!(run(Path::new("t.tfl"), ok, backend, true).unwrap().trim(), "f32[2, 1] [[3], [4]]");
        for (bad, says, at) in
            [("[[0], [3]]", "index 3 ", "at indices[1, 0]"), ("[[-1], [0]]", "index -1 ", "at indices[0, 0]")]
        {
            let source = ok.replace("[[2], [0]]", bad);
            let e = run(Path::new("t.tfl"), &source, backend, true).expect_err("out of range");
            assert!(e.contains("Runtime") && e.contains(says), "{backend:?} {bad}: {e}");
            assert!(e.contains("out of range for axis 1 of size 3"), "{backend:?} {bad}: {e}");
            assert!(e.contains(at), "{backend:?} {bad}: {e}");
        }
    }
}

#[test]
fn jit_runs_are_bit_identical_run_to_run() {
    let path = root().join("tests/cases/run/optimizers_adam_adamw_and_rmsprop.tfl");
    let source = std::fs::read_to_string(&path).unwrap();
    let first = run(&path, &source, Backend::Jit, true);
    assert_eq!(first, run(&path, &source, Backend::Jit, true));
}

#[test]
fn number_tokens_compare_with_a_tolerance() {
    assert!(same_values("[1.0001, -2e-3] ok", "[1.0002, -0.002] ok").is_ok());
    assert!(same_values("[1.1]", "[1.0]").is_err());
    assert!(same_values("a 1", "b 1").is_err());
}

fn tfc(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tfc")).args(args).current_dir(root()).output().expect("tfc runs")
}

#[test]
fn emit_clif_prints_vector_loops_for_the_bench_step() {
    let o = tfc(&["build", "--emit", "clif", "examples/bench/mlp.tfl"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("; unit `train 3 step (batch 64)`"), "{text}");
    assert!(text.matches("function u0:").count() >= 10, "{text}");
    assert!(text.contains("f32x4") && text.contains("brif"), "{text}");
}

#[test]
fn emit_asm_prints_the_machine_code_of_the_bench_step() {
    // Cranelift's code, as a machine without AVX-512 runs it.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tfc"))
        .args(["build", "--emit", "asm", "examples/bench/mlp.tfl"])
        .env("TFC_NO_AVX512", "1")
        .current_dir(root())
        .output()
        .expect("tfc runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("; unit `train 3 step (batch 64)`"), "{text}");
    // Packed single-precision arithmetic on 128-bit registers, and a return per kernel.
    assert!(text.contains("vaddps") && text.contains("%xmm"), "{text}");
    assert!(text.matches("\n  ret").count() >= 10, "{text}");
    assert!(!text.contains("module `wide`"), "{text}");
    // This machine's code: module `wide`'s 512-bit code where it has AVX-512.
    let o = tfc(&["build", "--emit", "asm", "examples/bench/mlp.tfl"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let wide = text.matches("; AVX-512 code of module `wide`, what this machine runs:").count();
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
        assert!(wide >= 10, "{text}");
        assert!(text.contains("vaddps zmm") && text.contains("{k7}") && text.contains("vzeroupper"), "{text}");
    } else {
        assert_eq!(wide, 0, "{text}");
    }
}

#[test]
fn bench_prints_one_json_object_per_train_block() {
    let o = tfc(&["bench", "examples/bench/mlp.tfl", "--steps", "2", "--warmup", "1", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    for key in ["name", "compile_ms", "steps", "threads", "arena_bytes", "peak_rss_bytes", "loss_first", "loss_last"] {
        assert!(v.get(key).is_some(), "missing {key}: {text}");
    }
    assert!(v["step_ms"]["median"].as_f64().unwrap() > 0.0);
    assert!(v["step_ms"]["p90"].as_f64().unwrap() >= v["step_ms"]["median"].as_f64().unwrap());
    assert_eq!(v["steps"], 2);
    // The first loss is deterministic: the peers' weights and batch give
    // their loss oracle (tests/bench_oracle.rs checks it closely).
    let first = v["loss_first"].as_f64().unwrap();
    assert!((first - 2.760_419).abs() < 1e-5, "{first}");
    // Without `--threads`, every core works.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(v["threads"].as_u64(), Some(cores as u64));
    // A thread count of zero is a usage error.
    let bad = tfc(&["bench", "examples/bench/mlp.tfl", "--threads", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--threads"));
}

/// A metric over a dataset (`accuracy`: the forward pass and the metric,
/// the inference a user runs) is timed like a training step, after it, on
/// the compiled backend, with the profile of its kernels.
#[test]
fn bench_times_inference_through_metrics() {
    let o = tfc(&["bench", "examples/digits_mlp.tfl", "--steps", "3", "--warmup", "1", "--json", "--profile"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let objects: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    let kinds: Vec<&str> = objects.iter().map(|v| v["kind"].as_str().unwrap_or("?")).collect();
    assert_eq!(kinds, ["train", "inference"], "{text}");
    let metric = &objects[1];
    assert!(metric["name"].as_str().unwrap().starts_with("metric "), "{text}");
    assert_eq!(metric["backend"], "jit");
    assert!(metric["step_ms"]["median"].as_f64().unwrap() > 0.0, "{text}");
    let accuracy = metric["value"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&accuracy), "{text}");
    let labels: Vec<&str> = metric["profile"].as_array().unwrap().iter().filter_map(|r| r["label"].as_str()).collect();
    assert!(labels.iter().any(|l| l.starts_with("gemm 256x64 @ 64x")), "{labels:?}");
}

/// An `export fn` is timed as a call of the compiled function, after the
/// program's statements, with the weights the program loaded.
#[test]
fn bench_times_exported_functions() {
    let o =
        tfc(&["bench", "examples/bench/mlp_infer.tfl", "--steps", "3", "--warmup", "1", "--json", "--threads", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let results: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    let names: Vec<&str> = results.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["export logits1", "export logits64"], "{text}");
    for r in &results {
        assert_eq!(r["kind"], "export");
        assert_eq!(r["backend"], "jit");
        assert!(r["step_ms"]["median"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Row 0 of a ramp input through the peers' weights: the same logit in
    // both calls (one row of the batch of 64 is the same input).
    let v1 = results[0]["value"].as_f64().unwrap();
    let v64 = results[1]["value"].as_f64().unwrap();
    assert!((v1 - v64).abs() < 1e-5 && v1 != 0.0, "{v1} {v64}");
}

/// `--profile` times every step of the compiled training step: the JSON
/// lists them slowest first, with labels that say what each computes, and
/// their times add up to about the step's; the interpreter has no steps
/// to profile.
#[test]
fn bench_profile_lists_every_step_of_the_training_step() {
    let o = tfc(&["bench", "examples/bench/cnn.tfl", "--steps", "3", "--warmup", "1", "--json", "--profile"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let rows = v["profile"].as_array().expect("a profile");
    let labels: Vec<&str> = rows.iter().filter_map(|r| r["label"].as_str()).collect();
    for kind in ["conv2d 64x28x28x16 <- 64x28x28x1", "conv2d grad-filter", "conv2d grad-input", "pool grad", "gemm"] {
        assert!(labels.iter().any(|l| l.contains(kind)), "no {kind} in {labels:?}");
    }
    // Only Adam's scalar `beta ^ step` falls back to the interpreter; every
    // contraction (with the pooled ReLU mask in its epilogue) is compiled.
    let interpreted: Vec<&&str> = labels.iter().filter(|l| l.starts_with("interpreted")).collect();
    assert!(interpreted.iter().all(|l| l.contains("pow") && !l.contains("conv")), "{interpreted:?}");
    // The direct kernels add the bias and apply ReLU before they store a
    // convolution's output, and the pooled ReLU mask before they store the
    // input gradient: no separate epilogue step passes over either.
    if labels.iter().any(|l| l.contains("direct")) {
        let epilogue = |l: &&&str| l.contains(": conv2d,") || l.contains(": conv2d_grad_input,");
        assert!(!labels.iter().any(|l| l.starts_with("fused") && epilogue(&l)), "{labels:?}");
        // Both convolutions also write the 2x2 max pool of their output:
        // no pooling pass reads it back (only the gradients' passes remain).
        assert_eq!(labels.iter().filter(|l| l.contains("(3x3 kernel, direct) and 2x2 max pool")).count(), 2);
        assert!(!labels.iter().any(|l| l.starts_with("Max pool 64x")), "{labels:?}");
        // Their gradients read the first maxima the fused pools recorded,
        // not the convolutions' outputs, which nothing else reads, so those
        // are not stored.
        let from_maxima = labels.iter().filter(|l| l.starts_with("Max pool grad") && l.contains("recorded maxima"));
        assert_eq!(from_maxima.count(), 2, "{labels:?}");
        assert_eq!(labels.iter().filter(|l| l.contains("max pool, only the pool stored")).count(), 2, "{labels:?}");
        // The first layer's bias and weight gradients read its pool's
        // gradient from the pooled gradient and the maxima, so that
        // gradient is not written.
        assert!(labels.iter().any(|l| l.starts_with("reduce Sum 64x28x28x16 over [0, 1, 2] from the recorded maxima")));
        assert!(labels
            .iter()
            .any(|l| l.starts_with("conv2d grad-filter 3x3x1x16") && l.contains("from the recorded maxima")));
        assert!(labels.iter().any(|l| l.starts_with("Max pool grad 64x28x28x16 (not needed")), "{labels:?}");
    }
    let ms: Vec<f64> = rows.iter().map(|r| r["ms"].as_f64().expect("ms")).collect();
    assert!(ms.windows(2).all(|w| w[0] >= w[1]), "not slowest first: {ms:?}");
    let median = v["step_ms"]["median"].as_f64().expect("a median");
    let sum: f64 = ms.iter().sum();
    assert!(sum > 0.3 * median && sum < 3.0 * median, "steps sum to {sum} ms, a step takes {median} ms");
    let text = tfc(&["bench", "examples/bench/mlp.tfl", "--steps", "2", "--warmup", "0", "--profile"]);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("ms/step  share  step"));
    // The backward pass's transposes of activations (left operands of the
    // weight gradients) are read through gemm's strides; those of weights
    // (right operands of the input gradients) are copied first, which gemm
    // then reads faster.
    assert!(text.contains("gemm 784x64ᵀ @ 64x256") && !text.contains("transpose 64x"), "{text}");
    assert!(text.contains("transpose 256x256") && text.contains("gemm 64x256 @ 256x256: matmul, broadcast_to, select"));
    // The interpreter profiles its nodes the same way.
    let interp = tfc(&["bench", "examples/bench/mlp.tfl", "--steps", "1", "--backend", "interp", "--profile"]);
    assert!(interp.status.success(), "{}", String::from_utf8_lossy(&interp.stderr));
    let text = String::from_utf8_lossy(&interp.stdout);
    assert!(text.contains("interpreted: matmul f32[64, 256]"), "{text}");
}

/// Machines without AVX-512 run convolutions through im2col and `gemm`
/// (`TFC_NO_AVX512` takes that path here): the CNN's losses agree with the
/// direct kernels' to float rounding, and the profile says which ran.
#[test]
fn convolutions_without_avx512_take_im2col_with_the_same_losses() {
    let bench = |no_avx512: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tfc"));
        cmd.args(["bench", "examples/bench/cnn.tfl", "--steps", "3", "--warmup", "2", "--json", "--profile"]);
        cmd.current_dir(root()).env_remove("TFC_NO_AVX512");
        if no_avx512 {
            cmd.env("TFC_NO_AVX512", "1");
        }
        let o = cmd.output().expect("tfc runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        let labels: Vec<String> =
            v["profile"].as_array().expect("a profile").iter().map(|r| r["label"].to_string()).collect();
        (v["loss_first"].as_f64().unwrap(), v["loss_last"].as_f64().unwrap(), labels.join("\n"))
    };
    let (first, last, labels) = bench(true);
    assert!(labels.contains("3x3 kernel, im2col") && !labels.contains("direct"), "{labels}");
    let (first_d, last_d, labels_d) = bench(false);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        assert!(labels_d.contains("3x3 kernel, direct"), "{labels_d}");
    }
    assert!((first - first_d).abs() <= 1e-6 * first.abs(), "{first} vs {first_d}");
    assert!((last - last_d).abs() <= 1e-4 * last.abs(), "{last} vs {last_d}");
}

/// Adam's update runs as a native AVX-512 loop where the machine has it
/// (`TFC_NO_AVX512` turns it off) and as Cranelift code otherwise: the
/// same float operations, so training the bench MLP prints the same losses
/// to the last bit either way.
#[test]
fn adam_updates_give_the_same_bits_natively_and_compiled() {
    let run = |no_avx512: bool, args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tfc"));
        cmd.args(args).current_dir(root()).env_remove("TFC_NO_AVX512");
        if no_avx512 {
            cmd.env("TFC_NO_AVX512", "1");
        }
        let o = cmd.output().expect("tfc runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let train = ["run", "examples/bench/mlp.tfl"];
    assert_eq!(run(false, &train), run(true, &train));
    let profile = ["bench", "examples/bench/mlp.tfl", "--steps", "1", "--warmup", "0", "--profile"];
    assert!(!run(true, &profile).contains("adam update"));
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
        let text = run(false, &profile);
        // The three weights' and the three biases' updates.
        assert_eq!(text.matches("adam update").count(), 6, "{text}");
    }
}

/// The threaded scheduler runs independent steps at once (each reads and
/// writes storage no concurrent step writes) and splits kernels only along
/// independent outputs (elementwise rows, matrix-product output blocks), so
/// training gives the same bits at any thread count: the losses of five
/// steps, printed with every digit, agree for `--threads 1`, `2` and `3` on
/// the bench MLP and CNN (whose weights, update kernels and convolutions
/// are large enough to be split, and whose backward passes have parallel
/// branches), the digits CNN and the tanh RNN of the scan run case
/// (whose forward and backward `scan` loops run their compiled bodies
/// once per step, each body a unit of its own).
#[test]
fn training_is_bit_identical_at_one_two_and_three_threads() {
    let half = "tests/cases/run/half_precision_training_of_an_mlp_and_a_cnn.tfl";
    let rnn = "tests/cases/run/scan_loops_and_trains_a_tanh_rnn.tfl";
    for file in ["examples/bench/mlp.tfl", "examples/digits_cnn.tfl", "examples/bench/cnn.tfl", half, rnn] {
        let losses = |threads: &str| {
            let o = tfc(&["bench", file, "--steps", "3", "--warmup", "2", "--json", "--threads", threads]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let text = String::from_utf8_lossy(&o.stdout);
            let objects: Vec<serde_json::Value> =
                text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
            let v = &objects[0];
            assert_eq!(v["threads"].as_u64(), threads.parse().ok());
            // A metric after training (the digits CNN's accuracy) too.
            let metrics: Vec<String> = objects[1..].iter().map(|m| m["value"].to_string()).collect();
            (v["loss_first"].to_string(), v["loss_last"].to_string(), metrics)
        };
        let one = losses("1");
        assert_eq!(one, losses("2"), "{file}");
        assert_eq!(one, losses("3"), "{file}");
    }
}

/// Convolutions (forward, both gradients; stride 1 and 2, SAME and VALID
/// padding, several channels) run natively (direct kernels, or im2col +
/// gemm) and pooling (max and
/// average, and their gradients) runs natively; the trained values agree
/// with the interpreter's.
#[test]
fn a_convolution_step_runs_conv_and_pooling_natively() {
    let source = "use std.loss.softmax_cross_entropy\nuse std.optim.adam\n\
        model C {\n param w1: f32[3, 3, 2, 4] = normal(seed = 1) * 0.3\n param w2: f32[2, 2, 4, 3] = normal(seed = 2) * 0.3\n\
         param d: f32[12, 3] = normal(seed = 3) * 0.3\n\
         fn forward(x: f32[B, 9, 9, 2]) -> f32[B, 3] {\n\
           let h = max_pool2d(relu(conv2d(x, w1, padding = \"same\")), 2, stride = 1)\n\
           let h = avg_pool2d(conv2d(h, w2, stride = 2, padding = \"valid\"), 2, padding = \"same\")\n\
           reshape(h, [B, 12]) @ d\n }\n}\n\
        let net = C()\n\
        let xs = normal([6, 9, 9, 2], seed = 4)\n\
        let ys = [0, 1, 2, 0, 1, 2]\n\
        train net on from_tensors(xs, ys) |> batch(3) {\n\
            loss(x, y) = softmax_cross_entropy(net(x), y)\n optimizer = adam(lr = 1e-2)\n epochs = 4\n}\n\
        print(net.w1)\nprint(net.w2)\nprint(net.d)\n";
    let counts = step_counts(source);
    // Two forward convolutions, the input gradient of the second and both
    // weight gradients, and the dense matmuls: all through gemm.
    assert!(counts.gemm >= 6, "{counts:?}");
    // Two poolings and their gradients (plus native reductions).
    assert!(counts.native >= 4, "{counts:?}");
    let interp = run(Path::new("conv.tfl"), source, Backend::Interp, true).unwrap();
    let jit = run(Path::new("conv.tfl"), source, Backend::Jit, true).unwrap();
    same_values(&jit, &interp).unwrap();
}

/// The named fusions the plan records (`passes::conv_pool`,
/// `passes::adam_update`; on machines whose CPU runs them) are the ones the
/// lowering applies: a 2x2 max pool written by the convolution before it,
/// whose gradient reads the recorded maxima, and Adam's update as one
/// loop; none is left unapplied, and the trained values agree with the
/// interpreter's.
#[test]
fn the_plans_fusions_are_the_ones_the_lowering_applies() {
    let source = "use std.loss.softmax_cross_entropy\nuse std.optim.adam\n\
        model C {\n param w: f32[3, 3, 1, 16] = normal(seed = 1) * 0.3\n param b: f32[16] = zeros([16])\n\
         param d: f32[256, 3] = normal(seed = 3) * 0.1\n\
         fn forward(x: f32[B, 8, 8, 1]) -> f32[B, 3] {\n\
           let h = max_pool2d(relu(conv2d(x, w, padding = \"same\") + b), 2)\n\
           reshape(h, [B, 256]) @ d\n }\n}\n\
        let net = C()\n\
        let xs = normal([8, 8, 8, 1], seed = 4)\n\
        let ys = [0, 1, 2, 0, 1, 2, 0, 1]\n\
        train net on from_tensors(xs, ys) |> batch(4) {\n\
            loss(x, y) = softmax_cross_entropy(net(x), y)\n optimizer = adam(lr = 1e-2)\n epochs = 3\n}\n\
        print(net.w)\nprint(net.b)\nprint(net.d)\n";
    let counts = step_counts(source);
    assert_eq!(counts.unfused, 0, "{counts:?}");
    assert_eq!(counts.interp, 0, "{counts:?}");
    let interp = run(Path::new("fusions.tfl"), source, Backend::Interp, true).unwrap();
    let jit = run(Path::new("fusions.tfl"), source, Backend::Jit, true).unwrap();
    same_values(&jit, &interp).unwrap();
    // In bf16, the plan also names the updates whose gradients are bf16
    // products (`adam_update_with_half_gradient`), and the lowering
    // applies every one: the gradients lie in f32 scratch.
    let bf16 = source.replace("epochs = 3\n", "epochs = 3\n precision = \"bf16\"\n");
    assert_ne!(bf16, source);
    let counts = step_counts(&bf16);
    assert_eq!(counts.unfused, 0, "{counts:?}");
    assert_eq!(counts.interp, 0, "{counts:?}");
}

/// The f16 and bf16 training steps of the half-precision run case (an MLP
/// and a CNN of each type, whose printed values the run cases compare
/// with the interpreter's) run compiled: every step of each is native or
/// generated code — bf16 products on the bf16 kernels (`bf16 gemm`), the
/// rest of the products, convolutions, pooling and reductions on `f32`
/// widened from two-byte storage and rounded back — and none interpreted.
#[test]
fn half_precision_training_steps_have_no_interpreted_step() {
    let case = "tests/cases/run/half_precision_training_of_an_mlp_and_a_cnn.tfl";
    let o = tfc(&["bench", case, "--steps", "3", "--warmup", "1", "--json", "--profile"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let trains: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("one JSON object a line"))
        .filter(|v| v["kind"] == "train")
        .collect();
    assert_eq!(trains.len(), 4, "{text}");
    for (t, want) in trains.iter().zip(["gemm", "gemm", "conv2d", "conv2d"]) {
        let labels: Vec<&str> = t["profile"].as_array().unwrap().iter().filter_map(|r| r["label"].as_str()).collect();
        assert!(!labels.iter().any(|l| l.starts_with("interpreted")), "{labels:?}");
        let product = |l: &&str| l.starts_with(want) || l.starts_with(&format!("bf16 {want}"));
        assert!(labels.iter().any(product), "no {want} in {labels:?}");
        assert!(labels.iter().any(|l| l.starts_with("widen")) && labels.iter().any(|l| l.starts_with("fused")));
    }
}

/// A bf16 training step (`precision = "bf16"`) whose products are large
/// enough runs them on the bf16 kernels — the matmuls (their transposes
/// folded) as `bf16 gemm`, the convolutions (16 to 64 and 64 to 64
/// channels) and their gradients on the direct `bf16` kernels where the
/// CPU has AVX512-BF16 (`bf16 direct`), else as `bf16 im2col`, their
/// epilogues in one pass each (`bf16 epilogue`, on AVX-512) — and prints
/// what the interpreter prints.
#[test]
fn bf16_products_and_convolutions_run_on_the_bf16_kernels_and_match_the_interpreter() {
    let source = "use std.nn.{Conv2d, Dense}\nuse std.loss.softmax_cross_entropy\nuse std.optim.sgd\n\
        model Net { c = Conv2d(16, 64, act = relu)\n e = Conv2d(64, 64, act = relu)\n d = Dense(8 * 8 * 64, 10)\n\
        fn forward(x) = d(reshape(e(c(x)), [-1, 8 * 8 * 64])) }\n\
        let net = Net(seed = 3)\n\
        let x = reshape(sin(cast(arange(8 * 8 * 8 * 16), f32) * 0.37), [8, 8, 8, 16])\n\
        let y = cast(arange(8), i32) % 10\n\
        train net on from_tensors(x, y) |> batch(8) {\n loss(x, y) = softmax_cross_entropy(net(x), y)\n\
        optimizer = sgd(lr = 0.05)\n steps = 3\n precision = \"bf16\"\n}\n\
        print(sum(net.c.w), sum(net.e.w), sum(net.d.w))\n";
    let labels = step_labels(source);
    let avx512 = std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512dq");
    let bf16_units = avx512
        && std::arch::is_x86_feature_detected!("avx512bf16")
        && std::env::var("TFC_ISA").map_or(true, |isa| isa != "portable");
    let how = if bf16_units { "bf16 direct" } else { "bf16 im2col" };
    for kind in [
        "bf16 gemm".to_string(),
        format!("conv2d 8x8x8x64 <- 8x8x8x16 (3x3 kernel, {how}"),
        format!("conv2d grad-input 8x8x8x64 <- 8x8x8x64 (3x3 kernel, {how}"),
        format!("conv2d grad-filter 3x3x16x64 <- 8x8x8x16 (3x3 kernel, {how}"),
    ] {
        assert!(labels.iter().any(|l| l.starts_with(&kind)), "no {kind} in {labels:?}");
    }
    // With AVX-512, a convolution's rounding, bias, ReLU and mask run in
    // one pass, and so does the backward's ReLU mask on a gradient kept in
    // f32 as well.
    for kind in [
        "bf16 epilogue 512x64 (rounded, bias, relu, its mask)",
        "bf16 epilogue 512x64 (rounded, a mask, also kept in f32)",
    ] {
        assert_eq!(labels.iter().any(|l| l.starts_with(kind)), avx512, "{kind} in {labels:?}");
    }
    let name = Path::new("bf16.tfl");
    let jit = run(name, source, Backend::Jit, true).unwrap();
    let interp = run(name, source, Backend::Interp, true).unwrap();
    same_values(&jit, &interp).unwrap();
}

/// A bf16 convolution whose activation a max pool reads keeps it in f32:
/// with AVX-512 its epilogue is one pass that rounds the product, adds the
/// bias, applies the ReLU and stores the f32 result (no two-byte copy),
/// and the trained values are the interpreter's.
#[test]
fn a_pooled_bf16_convolutions_epilogue_is_one_pass_into_f32() {
    let source = "use std.nn.{Conv2d, Dense}\nuse std.loss.softmax_cross_entropy\nuse std.optim.sgd\n\
        model Net { c = Conv2d(16, 32, act = relu)\n d = Dense(4 * 4 * 32, 10)\n\
        fn forward(x) = d(reshape(max_pool2d(c(x), 2), [-1, 4 * 4 * 32])) }\n\
        let net = Net(seed = 5)\n\
        let x = reshape(cos(cast(arange(8 * 8 * 8 * 16), f32) * 0.21), [8, 8, 8, 16])\n\
        let y = cast(arange(8), i32) % 10\n\
        train net on from_tensors(x, y) |> batch(8) {\n loss(x, y) = softmax_cross_entropy(net(x), y)\n\
        optimizer = sgd(lr = 0.05)\n steps = 3\n precision = \"bf16\"\n}\n\
        print(sum(net.c.w), sum(net.d.w))\n";
    let labels = step_labels(source);
    let avx512 = std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl");
    let kind = "bf16 epilogue 512x32 (rounded, bias, relu, kept in f32)";
    assert_eq!(labels.iter().any(|l| l.starts_with(kind)), avx512, "{kind} in {labels:?}");
    let name = Path::new("pooled.tfl");
    let jit = run(name, source, Backend::Jit, true).unwrap();
    let interp = run(name, source, Backend::Interp, true).unwrap();
    same_values(&jit, &interp).unwrap();
}

/// Top-level statements with much work (an inference over a large batch)
/// run on the CPU backend as one unit of the main plan — its products on
/// `gemm`, its activations compiled — and print what the interpreter
/// prints; `--verbose` says so. Small statements stay on the interpreter.
#[test]
fn large_statements_run_on_the_cpu_backend_and_match_the_interpreter() {
    let program = "use std.nn.{Dense}\n\
        model Mlp { l1 = Dense(64, 128, act = relu)\n l2 = Dense(128, 10)\n fn forward(x) = x |> l1 |> l2 }\n\
        let net = Mlp(seed = 1)\n\
        let x = reshape(sin(cast(arange(4096 * 64), f32) * 0.01), [4096, 64])\n\
        let y = net(x)\n\
        print(sum(y), mean(softmax(y)), y[7])\n\
        print(sum(net.l2.b + 1.0))\n";
    let dir = std::env::temp_dir().join(format!("tfc-statements-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("infer.tfl");
    std::fs::write(&path, program).unwrap();
    let path = path.to_str().unwrap();
    let jit = tfc(&["run", "--verbose", path]);
    let interp = tfc(&["run", "--verbose", "--backend", "interp", path]);
    assert!(jit.status.success() && interp.status.success(), "{}", String::from_utf8_lossy(&jit.stderr));
    let (out, reference) = (String::from_utf8_lossy(&jit.stdout), String::from_utf8_lossy(&interp.stdout));
    same_values(&out, &reference).unwrap();
    let report = String::from_utf8_lossy(&jit.stderr);
    let lines: Vec<&str> = report.lines().filter(|l| l.starts_with("statements: ")).collect();
    // One unit for the inference; the small last statement is interpreted.
    assert_eq!(lines.len(), 1, "{report}");
    assert!(lines[0].contains("on the jit backend"), "{report}");
    assert!(!String::from_utf8_lossy(&interp.stderr).contains("statements: "));
    std::fs::remove_dir_all(&dir).ok();
}

/// Integer division by zero and negative integer powers in compiled code
/// fail as in the interpreter: the same error (with the failing operands)
/// at the same source line, for the first failing op, then the first
/// failing element, at one thread and at two (the rows are split between
/// threads, and a later row fails first in time as often as not).
#[test]
fn compiled_integer_division_by_zero_reports_the_interpreters_error_at_any_thread_count() {
    // Each element is a pair of rows of 10^6 ints, enough work for
    // threads: `a` the index, `b` 0 at 50,000 and 950,000 (one in each
    // thread's half) and 1 at 10. So `a / b` fails at 50,000 (the first
    // error, "50000 / 0") and at 950,000, and `7 / (b - 1)` fails earlier
    // in flat order, at 10, but is the later op.
    let source = "let i = cast(arange(1000000), i32)\n\
        let b = where(i == 50000 or i == 950000, 0, where(i == 10, 1, i + 2))\n\
        let ds = from_tensors(reshape(i, [1, 1000000]), reshape(b, [1, 1000000]))\n\
        print(collect(ds |> map(fn(a, b) = (a / b, 7 / (b - 1), a ^ (b - 50000)))))\n";
    let mut session = Session::new();
    let file = session.add_source("fails.tfl", source);
    let program = session.compile(file, &tfc::passes::Options::default()).expect("compiles");
    assert!(tfc::passes::partition::host_kernels(&program).is_empty(), "the map's kernels are compiled");
    let fail = |backend: Backend, threads: usize| {
        let mut out = Vec::new();
        let options = RunOptions { backend, threads, ..RunOptions::default() };
        execute(&program, &mut out, options).expect_err("the division fails")
    };
    let interp = fail(Backend::Interp, 1);
    assert!(interp.message.contains("integer division by zero (50000 / 0)"), "{interp:?}");
    for threads in [1, 2] {
        assert_eq!(fail(Backend::Jit, threads), interp, "at {threads} threads");
    }
}

/// Integer `%` in compiled code gives the interpreter's floored remainders
/// (the divisor's sign), and `% 0` fails as there, with the same error at
/// the first failing element, at one thread and at two.
#[test]
fn compiled_integer_remainder_matches_the_interpreter_and_reports_modulo_by_zero() {
    let run = |source: &str, backend: Backend, threads: usize| {
        let mut session = Session::new();
        let file = session.add_source("rem.tfl", source);
        let program = session.compile(file, &tfc::passes::Options::default()).expect("compiles");
        assert!(tfc::passes::partition::host_kernels(&program).is_empty(), "the map's kernels are compiled");
        let mut out = Vec::new();
        let options = RunOptions { backend, threads, ..RunOptions::default() };
        execute(&program, &mut out, options).map(|()| String::from_utf8(out).unwrap())
    };
    // Remainders of every sign pair, over enough elements to split rows.
    let fine = "let i = cast(arange(1000000), i32) - 500000\n\
        let ds = from_tensors(reshape(i, [1, 1000000]))\n\
        let r = first(ds |> map(fn(a) = (a % 7, a % -7, sum(a % 7), sum(a % -7))))\n\
        print(r[0][0:9], r[1][0:9], r[2], r[3])\n";
    let expected = run(fine, Backend::Interp, 1).expect("runs");
    // -500000 = -71429·7 + 3: the floored remainder is 3, not -4.
    assert!(expected.starts_with("i32[9] [3, 4, 5, 6, 0, 1, 2, 3, 4]"), "{expected}");
    for threads in [1, 2] {
        assert_eq!(run(fine, Backend::Jit, threads).expect("runs"), expected, "at {threads} threads");
    }
    let failing = "let i = cast(arange(1000000), i32)\n\
        let b = where(i == 50000 or i == 950000, 0, i + 1)\n\
        let ds = from_tensors(reshape(i, [1, 1000000]), reshape(b, [1, 1000000]))\n\
        print(collect(ds |> map(fn(a, b) = a % b)))\n";
    let interp = run(failing, Backend::Interp, 1).expect_err("the remainder fails");
    assert!(interp.message.contains("integer modulo by zero (50000 % 0)"), "{interp:?}");
    for threads in [1, 2] {
        assert_eq!(run(failing, Backend::Jit, threads).expect_err("fails"), interp, "at {threads} threads");
    }
}

/// An LSTM-style training step over `steps` time steps, batch 8.
fn lstm_step(steps: usize) -> String {
    format!(
        "use std.nn.{{Dense}}\nuse std.optim.adam\n\
        model L {{\n gx = Dense(1, 32)\n gh = Dense(8, 32)\n\
        fn cell(c, x) {{\n let (h, s) = c\n let z = gx(x) + gh(h)\n\
        let s2 = sigmoid(z[:, 0:8]) * s + sigmoid(z[:, 8:16]) * tanh(z[:, 16:24])\n\
        let h2 = sigmoid(z[:, 24:32]) * tanh(s2)\n ((h2, s2), h2)\n }}\n\
        fn forward(x: f32[B, T]) -> f32[B] {{\n let z = zeros([B, 8])\n\
        let (last, _) = scan(cell, (z, z), transpose(reshape(x, [B, T, 1]), [1, 0, 2]))\n sum(last[0], axis = 1)\n }}\n}}\n\
        let xs = uniform(shape = [8, {steps}], seed = 3)\nlet net = L(seed = 1)\n\
        train net on from_tensors(xs, sum(xs, axis = 1)) |> batch(8) {{\n\
        loss(x, y) = mean(square(net(x) - y))\n optimizer = adam(lr = 1e-2)\n epochs = 2\n}}\nprint(net.gh.w)\n"
    )
}

/// `scan` is one node whatever the number of steps: the optimized program
/// of an LSTM-style training step has the same number of nodes and kernels
/// at 28 and at 280 time steps (so compile time stays flat), its loops run
/// their bodies as compiled units (no kernel, in the step or in a body, on
/// the interpreter), and its trained weights agree with the interpreter's.
#[test]
fn a_scan_compiles_to_the_same_program_at_any_length_and_matches_the_interpreter() {
    let size = |steps: usize| {
        let mut session = Session::new();
        let file = session.add_source("lstm.tfl", &lstm_step(steps));
        let opts = tfc::passes::Options { target: Backend::Jit.target(), ..Default::default() };
        let program = session.compile(file, &opts).expect("compiles");
        let kernels: usize = program.compiled.as_ref().map_or(0, |c| c.units.iter().map(|u| u.kernels.len()).sum());
        (program.graph.node_count(), kernels)
    };
    assert_eq!(size(28), size(280));
    let source = lstm_step(28);
    let counts = step_counts(&source);
    assert_eq!((counts.interp, counts.unplanned), (0, 0), "{counts:?}");
    assert!(counts.gemm >= 4, "the bodies' products run on gemm: {counts:?}");
    let path = root().join("lstm.tfl");
    let jit = run(&path, &source, Backend::Jit, true).unwrap();
    let interp = run(&path, &source, Backend::Interp, false).unwrap();
    same_values(&jit, &interp).unwrap();
}
