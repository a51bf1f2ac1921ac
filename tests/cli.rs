//! The `tfc` binary as a user meets it: exit codes (0 success, 1 program
//! error, 2 usage error), stdout carrying only program output, and a clear
//! diagnostic for every kind of bad input — never a panic or a hang.

use std::path::PathBuf;
use std::process::{Command, Output};

fn tfc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tfc")).args(args).env("NO_COLOR", "1").output().expect("the tfc binary runs")
}

fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write scratch file");
    path
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_no_panic(o: &Output) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "tfc panicked:\n{err}");
}

#[test]
fn run_prints_program_output_on_stdout_and_exits_zero() {
    let f = scratch("ok.tfl", b"print([1.0, 2.5] * 2.0)\n");
    let o = tfc(&["run", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "f32[2] [2, 5]\n");
    assert!(o.stderr.is_empty());
}

#[test]
fn check_succeeds_silently_on_a_good_program() {
    let f = scratch("good.tfl", b"let x = [1.0, 2.0]\nprint(x)\n");
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "check prints nothing on stdout");
}

#[test]
fn a_shape_error_exits_one_with_the_code_and_line_on_stderr() {
    let f = scratch("bad.tfl", b"let a = zeros([2, 3])\nlet b = zeros([4, 5])\nprint(a @ b)\n");
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("E0303"), "{err}");
    assert!(err.contains("bad.tfl:3"), "{err}");
    assert!(err.contains("f32[2, 3]") && err.contains("f32[4, 5]"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let o = tfc(&["run", "/nonexistent/dir/prog.tfl"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0001") && stderr(&o).contains("no such file"), "{}", stderr(&o));
}

#[test]
fn a_directory_is_not_a_source_file() {
    let dir = std::env::temp_dir();
    let o = tfc(&["check", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0001"), "{}", stderr(&o));
    assert_no_panic(&o);
}

#[test]
fn an_empty_file_is_reported() {
    let f = scratch("empty.tfl", b"");
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0003"), "{}", stderr(&o));
    let f = scratch("comments.tfl", b"// only a comment\n\n");
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0003"), "{}", stderr(&o));
}

#[test]
fn non_utf8_bytes_are_reported_with_their_position() {
    let f = scratch("latin1.tfl", b"let x = 1\nprint(\xff\xfe)\n");
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("E0002") && err.contains("line 2"), "{err}");
}

#[test]
fn deeply_nested_expressions_are_bounded_not_a_stack_overflow() {
    let deep = format!("print({}1.0{})\n", "(".repeat(100_000), ")".repeat(100_000));
    let f = scratch("deep.tfl", deep.as_bytes());
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0102"), "{}", stderr(&o));
    let unary = format!("print({}1.0)\n", "-".repeat(100_000));
    let f = scratch("unary.tfl", unary.as_bytes());
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_no_panic(&o);
}

#[test]
fn deep_recursion_in_the_program_is_bounded() {
    let f = scratch("rec.tfl", b"fn f(x) = f(x + 1.0)\nprint(f(1.0))\n");
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0102"), "{}", stderr(&o));
}

#[test]
fn a_huge_literal_shape_is_rejected_before_allocating() {
    let f = scratch("huge.tfl", b"let x = zeros([100000, 100000, 100000])\nprint(sum(x))\n");
    let o = tfc(&["run", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("E0317"), "{}", stderr(&o));
    let f = scratch("overflow.tfl", b"let x = ones([9223372036854775807, 9223372036854775807])\n");
    let o = tfc(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_no_panic(&o);
}

#[test]
fn unknown_flags_and_subcommands_are_usage_errors() {
    for args in [&["run", "--bogus", "x.tfl"][..], &["frobnicate"], &[], &["build", "x.tfl", "--emit", "asm-ish"]] {
        let o = tfc(args);
        assert_eq!(o.status.code(), Some(2), "args {args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn help_and_version_exit_zero() {
    let o = tfc(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("check"));
    let o = tfc(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn a_failed_assertion_exits_one_after_printing_earlier_output() {
    let f = scratch("assert.tfl", b"print(1)\nassert_close([1.0, 2.0], [1.0, 2.5])\nprint(2)\n");
    let o = tfc(&["run", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1\n");
    assert!(stderr(&o).contains("E0401"), "{}", stderr(&o));
}

#[test]
fn build_emits_ir_ast_and_dot() {
    let f = scratch("emit.tfl", b"let x = [1.0, 2.0]\nprint(exp(x))\n");
    let path = f.to_str().unwrap();
    let ir = tfc(&["build", path, "--emit", "ir"]);
    assert_eq!(ir.status.code(), Some(0), "{}", stderr(&ir));
    assert!(String::from_utf8_lossy(&ir.stdout).contains("= exp %"));
    let ast = tfc(&["build", path, "--emit", "ast"]);
    assert!(String::from_utf8_lossy(&ast.stdout).contains("exp"));
    let out = f.with_extension("dot");
    let dot = tfc(&["build", path, "--emit", "dot", "-o", out.to_str().unwrap()]);
    assert_eq!(dot.status.code(), Some(0), "{}", stderr(&dot));
    let text = std::fs::read_to_string(&out).expect("dot written");
    assert!(text.starts_with("digraph"), "{text}");
}

/// `--strict` refuses a training step with a kernel the CPU backend leaves
/// to the host interpreter, before anything runs, at the op's line; the
/// plan says the same (`on Host` with the reason); without the flag the
/// program runs, and a program without such kernels runs under the flag.
/// A program whose memory plan cannot fit the machine is refused before
/// anything runs (E0902 at its largest value), on either backend, instead of
/// dying in the allocator. Two live values of 2^34 f32 each: 137 GB.
#[test]
fn a_plan_larger_than_the_machine_is_e0902_before_anything_runs() {
    let program = "print(\"started\")\nlet x = ones([131072, 131072]) * 2.0\n\
        let y = transpose(x, [1, 0])\nlet z = y * x\nprint(sum(z))\n";
    let file = scratch("too_big.tfl", program.as_bytes());
    for backend in ["jit", "interp"] {
        let o = tfc(&["run", "--backend", backend, file.to_str().unwrap()]);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(1), "{backend}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("error[E0902]") && err.contains("the plan needs 137.4 GB"), "{backend}: {err}");
        assert!(err.contains("the largest value: f32[131072, 131072] (68.7 GB)"), "{backend}: {err}");
        assert!(o.stdout.is_empty(), "{backend}: nothing ran");
    }
}

/// The plan says which kernels the CPU computes in another dtype than they
/// store: f16 values are widened to f32 inside the kernel.
#[test]
fn the_plan_shows_half_kernels_computed_in_f32() {
    let program = "let x = cast(normal([128, 64], seed = 1), f16)\nprint(exp(x) * x)\nprint(sum(x))\n";
    let file = scratch("half_plan.tfl", program.as_bytes());
    let plan = tfc(&["build", file.to_str().unwrap(), "--emit", "plan"]);
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(plan.contains("Reduction f16 (in f32) on Cpu"), "{plan}");
    // The interpreter computes in the values' own dtype; sources are no code.
    assert!(plan.lines().filter(|l| l.contains("on Host") || l.contains("Source")).all(|l| !l.contains("(in ")));
}

#[test]
fn strict_refuses_host_kernels_before_running_and_the_plan_shows_them() {
    // The CPU backend compiles one_hot only below 2^24 classes (the class
    // index is compared as an f32).
    let program = "print(\"started\")\n\
        let ys = from_tensors([3, 16777215]) |> batch(1) |> map(fn(y) = one_hot(y, 16777216) * 2.0)\n\
        print(collect(ys |> map(fn(h) = sum(h))))\n";
    let file = scratch("strict.tfl", program.as_bytes());
    let path = file.to_str().unwrap();
    let strict = tfc(&["run", "--strict", path]);
    assert_no_panic(&strict);
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    let text = stderr(&strict);
    assert!(text.contains("error[E0901]") && text.contains("would run on the host interpreter"), "{text}");
    assert!(
        text.contains("`one_hot` would run") && text.contains("f32[1, 16777216] runs only on the host interpreter"),
        "{text}"
    );
    assert!(text.contains("strict.tfl:2:"), "the error points at the one_hot's line: {text}");
    assert!(strict.stdout.is_empty(), "nothing ran: {}", String::from_utf8_lossy(&strict.stdout));
    let relaxed = tfc(&["run", path]);
    assert!(relaxed.status.success(), "{}", stderr(&relaxed));
    assert_eq!(String::from_utf8_lossy(&relaxed.stdout), "started\nf32[2] [2, 2]\n");
    let plan = tfc(&["build", path, "--emit", "plan"]);
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(plan.contains("on Host (no CPU kernel for `one_hot` on f32[1, 16777216])"), "{plan}");
    let mlp = "use std.nn.{Dense, Embedding}\nuse std.optim.adam\n\
        model M { e = Embedding(5, 3)\n l = Dense(3, 2)\n fn forward(ids) = l(e(ids)) }\n\
        let net = M()\ntrain net on from_tensors([[0, 1], [2, 3], [4, 0], [1, 2]]) |> batch(2) {\n\
            loss(ids) = mean(square(net(ids)))\n optimizer = adam(lr = 0.1)\n epochs = 1\n}\nprint(net.l.b)\n";
    let mlp = scratch("strict_mlp.tfl", mlp.as_bytes());
    let ok = tfc(&["run", "--strict", mlp.to_str().unwrap()]);
    assert!(ok.status.success(), "{}", stderr(&ok));
}

/// `tfc build --emit plan` names the parts of a training step: its loss,
/// each parameter's gradient as the update reads it (after clipping, with
/// the global norm) and each update and optimizer state.
#[test]
fn the_plan_names_a_training_steps_loss_gradients_and_updates() {
    let program = "use std.optim.momentum\nmodel M { param w: f32[2] = ones()\n param b: f32[1] = zeros()\n\
        fn forward(x) = sum(x * w) + b }\nlet net = M()\n\
        train net on from_tensors(ones([4, 2])) |> batch(2) {\n\
            loss(x) = mean(square(net(x)))\n optimizer = momentum(lr = 0.1)\n clip_grad_norm = 1.0\n epochs = 1\n}\n";
    let file = scratch("parts.tfl", program.as_bytes());
    let plan = tfc(&["build", file.to_str().unwrap(), "--emit", "plan"]);
    assert!(plan.status.success(), "{}", stderr(&plan));
    let plan = String::from_utf8_lossy(&plan.stdout);
    let line = plan.lines().find(|l| l.trim_start().starts_with("step: loss %")).unwrap_or_else(|| panic!("{plan}"));
    for part in ["; gradients: w %", ", b %", "(clipped by the global norm %", "; updates: w %", "; states: w/v %"] {
        assert!(line.contains(part), "no `{part}` in {line}");
    }
    assert!(!line.contains("missing"), "every part names a node of the program: {line}");
}

/// The traced IR (`--emit ir`) shows a training step's gradient requests;
/// the `autodiff` pass, the optimizer's first, replaces them (its dump has
/// none left) and cannot be disabled, not even by `-O0`; nor can the other
/// passes that complete the lowering (`autocast`, `all_reduce`).
#[test]
fn autodiff_is_a_pass_that_turns_gradient_requests_into_gradients() {
    let program = "use std.optim.sgd\nmodel M { param w: f32[3] = ones()\n fn forward(x) = sum(x * w) }\n\
        let net = M()\ntrain net on from_tensors(ones([4, 3])) |> batch(2) {\n loss(x) = square(net(x))\n\
        optimizer = sgd(lr = 0.1)\n epochs = 1\n}\nprint(net.w)\n";
    let file = scratch("autodiff.tfl", program.as_bytes());
    let path = file.to_str().unwrap();
    let ir = tfc(&["build", path, "--emit", "ir"]);
    assert!(ir.status.success(), "{}", stderr(&ir));
    assert!(String::from_utf8_lossy(&ir.stdout).contains(" = gradient %"), "{}", String::from_utf8_lossy(&ir.stdout));
    let dump = tfc(&["build", path, "--dump-after", "autodiff"]);
    assert!(dump.status.success(), "{}", stderr(&dump));
    let text = stderr(&dump);
    assert!(text.contains("--- after autodiff") && !text.contains("gradient %"), "{text}");
    for required in ["autodiff", "autocast", "all_reduce"] {
        let off = tfc(&["build", path, "--disable-pass", required]);
        assert_eq!(off.status.code(), Some(1));
        let said = format!("the `{required}` pass cannot be disabled");
        assert!(stderr(&off).contains(&said), "{}", stderr(&off));
    }
    let run = tfc(&["run", "-O0", path]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(String::from_utf8_lossy(&run.stdout).starts_with("f32[3]"));
}

/// A diagnostic on a very long line (a generated megabyte of one
/// expression) shows an excerpt around the span with its line and column,
/// not the whole line.
#[test]
fn a_diagnostic_on_a_very_long_line_shows_an_excerpt() {
    let program = format!("let x = [{}] + onez([2])\n", vec!["1.0"; 200_000].join(", "));
    let file = scratch("long_line.tfl", program.as_bytes());
    let o = tfc(&["check", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.len() < 2_000, "{} bytes of diagnostics", err.len());
    assert!(err.contains("unknown name `onez`") && err.contains("long_line.tfl:1:1000012"), "{err}");
    assert!(err.contains("1.0, 1.0] + onez([2])") && err.contains("^^^^"), "{err}");
}

/// A flat chain of binary operators is not nesting: one as long as the
/// limit traces and runs (every walk of its left-deep syntax tree fits the
/// main thread's stack, in this build too), inside a function and at the top
/// level; one term more is E0102 naming the limit.
#[test]
fn a_long_flat_chain_of_operators_runs_and_one_past_the_limit_is_e0102() {
    let limit = tfc::syntax::MAX_CHAIN_LENGTH;
    let program = format!(
        "fn f(y) = y{}\nlet x = 0.0{}\nprint(f([1.0, 2.0]))\nprint(x)\n",
        " * 1.0 + y".repeat(limit / 2),
        " + 1.0".repeat(limit)
    );
    let file = scratch("chain.tfl", program.as_bytes());
    let o = tfc(&["run", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let want = format!("f32[2] [{}, {}]\nf32 {limit}\n", limit / 2 + 1, 2 * (limit / 2 + 1));
    assert_eq!(String::from_utf8_lossy(&o.stdout), want);

    let program = format!("let x = 0.0{}\n", " + 1.0".repeat(limit + 1));
    let file = scratch("chain_too_long.tfl", program.as_bytes());
    let o = tfc(&["check", file.to_str().unwrap()]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("E0102") && err.contains(&format!("limit {limit} binary operators")), "{err}");
}

/// A build without feature `gpu` says how to get the GPU backend, for
/// `--device gpu` and `--emit wgsl`, and `--device auto` runs on the CPU.
#[cfg(not(feature = "gpu"))]
#[test]
fn a_build_without_the_gpu_backend_says_how_to_get_it() {
    let file = scratch("no-gpu.tfl", b"print(1 + 1)\n");
    let path = file.to_str().unwrap();
    for args in [vec!["run", path, "--device", "gpu"], vec!["build", path, "--emit", "wgsl"]] {
        let o = tfc(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains("built without the GPU backend"), "{}", stderr(&o));
        assert!(stderr(&o).contains("--features gpu"), "{}", stderr(&o));
        assert_no_panic(&o);
    }
    let auto = tfc(&["run", path, "--device", "auto"]);
    assert_eq!(auto.status.code(), Some(0), "{}", stderr(&auto));
    assert_eq!(String::from_utf8_lossy(&auto.stdout).trim(), "2");
    assert!(stderr(&auto).contains("running on the CPU"), "{}", stderr(&auto));
}

/// `--device gpu` or `auto` with a flag that runs the interpreter is
/// refused rather than quietly run on the interpreter (in any build).
#[test]
fn device_with_an_interpreter_flag_is_refused() {
    let file = scratch("device-conflict.tfl", b"print(1 + 1)\n");
    let path = file.to_str().unwrap();
    for extra in [["--backend", "interp"].as_slice(), ["--check-numerics"].as_slice()] {
        for device in ["gpu", "auto"] {
            let mut args = vec!["run", path, "--device", device];
            args.extend_from_slice(extra);
            let o = tfc(&args);
            assert_eq!(o.status.code(), Some(1), "{args:?}");
            assert!(stderr(&o).contains("`--device` cannot be combined with it"), "{}", stderr(&o));
            assert_no_panic(&o);
        }
    }
}
