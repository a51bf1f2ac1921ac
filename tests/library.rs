//! Ahead-of-time libraries (`tfc build --emit lib`): a C program links an
//! exported MNIST MLP and CNN with tfc's runtime (`libtfc.a`) and computes
//! the in-process call's outputs bit for bit (and the interpreter's within
//! rounding), without allocating; what a library cannot hold is refused
//! before any file is written.

mod support;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use tfc::backend::BackendKind;
use tfc::ir::{DType, Literal, TensorType};
use tfc::tensor::Tensor;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/mnist");

/// An MLP trained for one short epoch on MNIST, its classifier exported
/// with an open batch.
fn mlp_program() -> String {
    format!(
        "use std.nn.{{Dense}}\nuse std.loss.softmax_cross_entropy\nuse std.optim.adam\n\
         model Mlp {{\n    l1 = Dense(784, 64, act = relu)\n    l2 = Dense(64, 10)\n    \
         fn forward(x: f32[B, 784]) -> f32[B, 10] = x |> l1 |> l2\n}}\n\
         fn prepare(image, label) = (reshape(image, [784]) / 255.0, label)\n\
         let train_set = load_idx(\"{DATA}/train-images-idx3-ubyte.gz\", \"{DATA}/train-labels-idx1-ubyte.gz\") |> take(1280) |> map(prepare)\n\
         let net = Mlp(seed = 3)\n\
         train net on train_set |> batch(64) {{\n    loss(x, y) = softmax_cross_entropy(net(x), y)\n    optimizer = adam(lr = 3e-3)\n}}\n\
         export fn predict(x: f32[B, 784]) -> f32[B, 10] = softmax(net(x))\n"
    )
}

/// A CNN (convolutions with bias and ReLU, fused 2x2 max pools, a dense
/// classifier) trained briefly, exported at one fixed batch.
fn cnn_program() -> String {
    format!(
        "use std.nn.{{Conv2d, Dense, Flatten}}\nuse std.loss.softmax_cross_entropy\nuse std.optim.adam\n\
         model Cnn {{\n    c1 = Conv2d(1, 8, kernel = 3, act = relu)\n    c2 = Conv2d(8, 16, kernel = 3, act = relu)\n    \
         flat = Flatten()\n    out = Dense(7 * 7 * 16, 10)\n    fn forward(x: f32[B, 28, 28, 1]) -> f32[B, 10] {{\n        \
         let h = max_pool2d(c1(x), 2)\n        let h = max_pool2d(c2(h), 2)\n        out(flat(h))\n    }}\n}}\n\
         fn prepare(image, label) = (reshape(image, [28, 28, 1]) / 255.0, label)\n\
         let train_set = load_idx(\"{DATA}/train-images-idx3-ubyte.gz\", \"{DATA}/train-labels-idx1-ubyte.gz\") |> take(500) |> map(prepare)\n\
         let net = Cnn(seed = 7)\n\
         train net on train_set |> batch(50) {{\n    loss(x, y) = softmax_cross_entropy(net(x), y)\n    optimizer = adam(lr = 2e-3)\n}}\n\
         export fn classify(x: f32[16, 28, 28, 1]) -> f32[16, 10] = softmax(net(x))\n"
    )
}

/// tfc's runtime library, built with the crate as a static library: beside
/// the test binary's directory (`target/*/libtfc.a`) or, in it, the newest
/// `libtfc-*.a`.
fn runtime_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    let uplifted = deps.parent().map(|p| p.join("libtfc.a"));
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(deps)
        .expect("the deps directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libtfc-") && n.ends_with(".a"))
        })
        .chain(uplifted.filter(|p| p.exists()))
        .collect();
    candidates.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    candidates.pop().expect("cargo builds libtfc.a with the crate (crate-type staticlib)")
}

/// The C compiler, or a clear failure.
fn c_compiler() -> &'static str {
    let found = Command::new("cc").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "these tests link C programs: install a C compiler (`apt-get install gcc`), as .ci/run does");
    "cc"
}

/// Writes `program` and runs `tfc build --emit lib -o DIR/NAME` with `extra`.
fn build_library(dir: &Path, name: &str, program: &str, extra: &[&str]) -> support::Run {
    support::put(dir, "main.tfl", program.as_bytes());
    let prefix = dir.join(name);
    let mut args: Vec<&OsStr> = ["build", "main.tfl", "--emit", "lib", "-o"].map(OsStr::new).to_vec();
    args.push(prefix.as_os_str());
    args.extend(extra.iter().map(OsStr::new));
    support::tfc(dir, &args)
}

/// Compiles tests/library/run_export.c against library `name` for its
/// function `function` (upper-cased: its macros' prefix).
fn link(dir: &Path, name: &str, function: &str, param: &str) -> PathBuf {
    let upper = function.to_uppercase();
    let exe = dir.join(format!("run_{function}"));
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/library/run_export.c");
    let runtime = runtime_library();
    let out = Command::new(c_compiler())
        .current_dir(dir)
        .args(["-O2", "-include"])
        .arg(format!("{name}.h"))
        .arg(format!("-DCALL={function}"))
        .arg(format!("-DIN_ELEMS={upper}_{}_ELEMENTS", param.to_uppercase()))
        .arg(format!("-DOUT_ELEMS={upper}_OUT0_ELEMENTS"))
        .arg(format!("-DARENA_BYTES={upper}_ARENA_BYTES"))
        .arg(source)
        .arg(format!("{name}.o"))
        .arg(&runtime)
        .args(["-lm", "-lpthread", "-ldl", "-Wl,--gc-sections", "-o"])
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(out.status.success(), "linking failed:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// Runs the linked program on `x`; returns its outputs.
fn call_library(exe: &Path, dir: &Path, x: &[f32]) -> Vec<f32> {
    let (input, output) = (dir.join("x.f32"), dir.join("y.f32"));
    std::fs::write(&input, support::f32s(x)).expect("write the input");
    let out = Command::new(exe).arg(&input).arg(&output).output().expect("run the C program");
    assert!(
        out.status.success(),
        "the C program failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&output).expect("read the output");
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The program's own call of export `name` (the region at `batch`, or its
/// fixed one) on `x`, on `backend`: the program runs first, as `tfc build`
/// runs it.
fn call_in_process(dir: &Path, backend: BackendKind, name: &str, batch: Option<usize>, x: &[f32]) -> Vec<f32> {
    let mut session = tfc::driver::Session::new();
    session.export_sizes = batch.into_iter().collect();
    let id = session.load_file(&dir.join("main.tfl")).expect("load the program");
    let opts = tfc::passes::Options { target: BackendKind::Jit.target(), ..Default::default() };
    let program = session.compile(id, &opts).expect("compile the program");
    let mut sink = Vec::new();
    let options =
        tfc::runtime::exec::RunOptions { base_dir: dir.to_path_buf(), backend, threads: 2, ..Default::default() };
    let mut ex = tfc::runtime::exec::Executor::new(&program, &mut sink, options).expect("an executor");
    for effect in &program.effects {
        ex.run_effect(effect).expect("run the program");
    }
    let export = program
        .effects
        .iter()
        .find_map(|e| match e {
            tfc::ir::Effect::Export(x) if x.name == name => Some(x),
            _ => None,
        })
        .expect("the export");
    let region = match batch {
        Some(n) => &export.sized.iter().find(|(b, _)| *b == n).expect("the sized region").1,
        None => &export.region,
    };
    let ty: &TensorType = &region.inputs[0].1;
    assert_eq!(ty.numel(), x.len());
    let input = Tensor::from_literal(&Literal::Float(x.iter().map(|&v| f64::from(v)).collect()), ty).expect("a tensor");
    let compiled = ex.compile_region(region).expect("prepare the export");
    let out = ex.run_region(&compiled, &[input]).expect("run the export");
    assert_eq!(out[0].dtype(), DType::F32);
    out[0].to_f64_vec().into_iter().map(|v| v as f32).collect()
}

fn assert_bits(library: &[f32], in_process: &[f32], what: &str) {
    assert_eq!(library.len(), in_process.len(), "{what}");
    for (i, (a, b)) in library.iter().zip(in_process).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "{what}: element {i}: library {a}, in process {b}");
    }
}

fn assert_close(library: &[f32], reference: &[f32], tol: f32, what: &str) {
    for (i, (a, b)) in library.iter().zip(reference).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}: element {i}: library {a}, interpreter {b}");
    }
}

#[test]
fn an_exported_mlp_links_into_c_and_computes_the_same_bits_at_each_batch_size() {
    let dir = support::scratch("library-mlp");
    let built = build_library(&dir, "mnist_mlp", &mlp_program(), &["--batch", "1,64"]);
    assert_eq!(built.code, Some(0), "tfc build failed:\n{}", built.stderr);
    let header = std::fs::read_to_string(dir.join("mnist_mlp.h")).expect("the header");
    assert!(header.contains("int mnist_mlp_predict_b1(const float *x, float *out0, void *arena);"), "{header}");
    assert!(header.contains("int mnist_mlp_predict_b64(const float *x, float *out0, void *arena);"), "{header}");
    for batch in [1, 64] {
        let function = format!("mnist_mlp_predict_b{batch}");
        let exe = link(&dir, "mnist_mlp", &function, "x");
        let x = support::values(batch * 784, batch as u64);
        let library = call_library(&exe, &dir, &x);
        assert_bits(&library, &call_in_process(&dir, BackendKind::Jit, "predict", Some(batch), &x), &function);
        let reference = call_in_process(&dir, BackendKind::Interp, "predict", Some(batch), &x);
        assert_close(&library, &reference, 1e-5, &function);
        // Each row is a distribution over the ten classes.
        for row in library.chunks(10) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-4, "{row:?}");
        }
    }
}

#[test]
fn an_exported_cnn_links_into_c_and_computes_the_same_bits() {
    let dir = support::scratch("library-cnn");
    let built = build_library(&dir, "cnn", &cnn_program(), &[]);
    // A library's convolutions are the direct AVX-512 kernels; on a CPU
    // without them the build refuses the export, saying why.
    #[cfg(target_arch = "x86_64")]
    let direct = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let direct = false;
    if !direct {
        eprintln!("no AVX-512 here: the CNN's export must be refused");
        assert_refused(&built, &["E0345", "the direct kernels do not run here"]);
        return;
    }
    assert_eq!(built.code, Some(0), "tfc build failed:\n{}", built.stderr);
    let exe = link(&dir, "cnn", "cnn_classify", "x");
    let x = support::values(16 * 28 * 28, 5);
    let library = call_library(&exe, &dir, &x);
    assert_bits(&library, &call_in_process(&dir, BackendKind::Jit, "classify", None, &x), "cnn_classify");
    let reference = call_in_process(&dir, BackendKind::Interp, "classify", None, &x);
    assert_close(&library, &reference, 1e-4, "cnn_classify");
    // Without AVX-512 (as `TFC_NO_AVX512` pretends) the direct convolutions
    // cannot run: the call says so (1) rather than computing other bits.
    let out = Command::new(&exe)
        .arg(dir.join("x.f32"))
        .arg(dir.join("y.f32"))
        .env("TFC_NO_AVX512", "1")
        .output()
        .expect("run the C program");
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the call returned 1"));
}

/// A refused build: exit 1, no panic, every needle in the diagnostic.
fn assert_refused(r: &support::Run, needles: &[&str]) {
    assert_eq!(r.code, Some(1), "expected exit 1:\n{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    let flat: String = r.stderr.split_whitespace().filter(|w| *w != "│").collect::<Vec<_>>().join(" ");
    for n in needles {
        assert!(flat.contains(n), "the diagnostic lacks `{n}`:\n{}", r.stderr);
    }
}

#[test]
fn what_a_library_cannot_hold_is_refused_before_any_file_is_written() {
    let dir = support::scratch("library-refusals");
    let open = "export fn f(x: f32[B, 4]) = x * 2.0\n";
    assert_refused(&build_library(&dir, "lib", open, &[]), &["E0340", "--batch 1,64"]);
    let ints = "export fn f(x: i32[4]) = x * 2\n";
    assert_refused(&build_library(&dir, "lib", ints, &[]), &["E0345", "library functions take and give"]);
    let division = "export fn f(x: f32[4], k: f32[4]) = x / k + cast(cast(x, i32) / 0, f32)\n";
    assert_refused(&build_library(&dir, "lib", division, &[]), &["E0345", "can fail at run time"]);
    let moves = "export fn f(x: f32[2, 3, 4]) = transpose(x * 2.0, [1, 0, 2])\n";
    assert_refused(&build_library(&dir, "lib", moves, &[]), &["E0345", "moves axes other than the last two"]);
    let plain = "export fn f(x: f32[4]) = x\n";
    assert_refused(&build_library(&dir, "not-a-c-name", plain, &[]), &["must be a C identifier"]);
    assert_refused(&build_library(&dir, "lib", open, &["--batch", "0"]), &["at least one row"]);
    assert_refused(&build_library(&dir, "lib", plain, &["--export", "g"]), &["exports no function `g`"]);
    assert_refused(&build_library(&dir, "lib", "let x = 1\n", &[]), &["exports no function"]);
    assert!(!dir.join("lib.o").exists() && !dir.join("lib.h").exists(), "a refused build wrote files");
}
