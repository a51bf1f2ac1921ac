//! The JIT's convolutions and pooling against the reference interpreter on
//! random geometry: one SGD step (`lr = 1`) of a model whose parameters are
//! a convolution's (or pooling's) input and weights, so the step runs the
//! forward op and both gradients (the input's and, for convolutions, the
//! weights') through the JIT's native kernels (`conv`: the direct AVX-512
//! kernels where the machine has them, im2col and gemm otherwise;
//! `pool`: the disjoint-window fast path or the interpreter's code) and the
//! updated parameters print as shortest round-trip text on each backend.
//!
//! Geometry: batch 1–2, height and width 1–8, 1–3 input and output
//! channels, kernels and windows 1–3 per axis, stride 1–3, dilation 1–2
//! (convolutions), padding up to the window's extent minus one per side.
//! The loss is `sum(y * y * g)` for a fixed random `g`, so the gradient that
//! flows back depends on the forward result as well.
//!
//! Tolerance: convolutions sum in another order on the JIT (gemm's
//! blocking or the direct kernels' tap order, fused multiply-adds), so
//! each updated value agrees when
//! `|jit - interp| <= 1e-4 * (1 + the largest magnitude in that parameter)`
//! — a hundred times the rounding of these few-hundred-term sums, and far
//! below what a wrong tap or channel moves. Pooling is exact: the JIT folds
//! each window in the interpreter's order with the same operations and
//! routes a max window's gradient to its first maximum (inputs are rounded
//! to halves so that ties occur), so the printed values must be identical.
//! The pooling input is a full-shape parameter, so no batch reduction
//! (whose order may differ) sits between the pooling gradient and the
//! printed values.
//!
//! A third property runs two CNN layers (`conv → bias → ReLU → 2x2 max
//! pool → conv`, SAME, 1–40 and 1–20 channels, sizes 2–9) through the
//! JIT's fusions: the bias and ReLU applied by the convolution, the pool
//! written by it (with the first maxima its gradient reads, and without
//! storing the activation unless the model also reads it), the pooled ReLU
//! mask applied by the second layer's input gradient (same tolerance).
//!
//! Cost: each case compiles and runs two small programs; 64 cases per
//! property keep the file well under a minute in a debug build.

use proptest::prelude::*;
use tfc::backend::BackendKind as Backend;
use tfc::driver::Session;
use tfc::runtime::exec::{execute, Executor, RunOptions};

/// The tensors `source` prints on `backend` (without the training progress
/// lines, whose throughput varies).
fn run(source: &str, backend: Backend) -> String {
    let mut session = Session::new();
    let file = session.add_source("prop.tfl", source);
    let program = session.compile(file, &tfc::passes::Options::default()).unwrap_or_else(|d| {
        panic!("does not compile: {:?} {}\n{source}", d[0].code, d[0].message);
    });
    let mut out = Vec::new();
    let options = RunOptions { base_dir: session.base_dir(file), backend, ..RunOptions::default() };
    if let Err(d) = execute(&program, &mut out, options) {
        panic!("fails on {backend:?}: {:?} {}\n{source}", d.code, d.message);
    }
    String::from_utf8_lossy(&out).lines().filter(|l| l.starts_with("f32[")).map(|l| format!("{l}\n")).collect()
}

/// How the JIT runs the program's training step.
fn step_counts(source: &str) -> tfc::backend::StepCounts {
    let mut session = Session::new();
    let file = session.add_source("prop.tfl", source);
    let program = session.compile(file, &tfc::passes::Options::default()).expect("compiles");
    let Some(tfc::ir::Effect::Train(plan)) = program.effects.iter().find(|e| matches!(e, tfc::ir::Effect::Train(_)))
    else {
        panic!("no train effect in\n{source}");
    };
    let mut out = Vec::new();
    let options = RunOptions { backend: Backend::Jit, ..RunOptions::default() };
    let mut ex = Executor::new(&program, &mut out, options).expect("an executor");
    let region = ex.compile_region(&plan.steps[0].1).expect("the step prepares");
    region.unit().counts()
}

/// The values of each printed tensor (one per line: `f32[…] [[…]]`).
fn values(printed: &str) -> Vec<Vec<f32>> {
    printed
        .lines()
        .map(|line| {
            let (_, data) = line.split_once("] ").unwrap_or_else(|| panic!("not a tensor: {line}"));
            data.split(|c: char| c == '[' || c == ']' || c == ',' || c.is_whitespace())
                .filter(|t| !t.is_empty())
                .map(|t| t.parse::<f32>().unwrap_or_else(|_| panic!("not a number: {t}")))
                .collect()
        })
        .collect()
}

/// Both backends' printed parameters agree within the module's tolerance.
fn close(jit: &str, interp: &str) -> Result<(), String> {
    let (a, b) = (values(jit), values(interp));
    if a.len() != b.len() || a.iter().zip(&b).any(|(x, y)| x.len() != y.len()) {
        return Err(format!("different shapes:\n--- jit\n{jit}\n--- interp\n{interp}"));
    }
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        let largest = y.iter().fold(0f32, |m, v| m.max(v.abs()));
        let tol = 1e-4 * (1.0 + largest);
        for (i, (&p, &q)) in x.iter().zip(y).enumerate() {
            if !((p - q).abs() <= tol || (p.is_nan() && q.is_nan())) {
                return Err(format!("parameter {k}, element {i}: jit {p} vs interpreter {q} (tolerance {tol})"));
            }
        }
    }
    Ok(())
}

/// A convolution's geometry.
#[derive(Clone, Debug)]
struct ConvCase {
    n: usize,
    hw: [usize; 2],
    c: usize,
    o: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    padding: [usize; 4],
}

/// Along one axis: the padded length minus the window's extent (`None` when
/// the window does not fit), so the output size is `span / stride + 1`.
fn span(input: usize, window: usize, dilation: usize, pad: usize) -> Option<usize> {
    let extent = dilation * (window - 1) + 1;
    (input + pad >= extent).then(|| input + pad - extent)
}

fn conv_case() -> impl Strategy<Value = ConvCase> {
    (1..=2usize, [1..=8usize, 1..=8usize], 1..=3usize, 1..=3usize, [1..=3usize, 1..=3usize])
        .prop_flat_map(|(n, hw, c, o, kernel)| {
            let dilation = [1..=2usize, 1..=2usize];
            (Just((n, hw, c, o, kernel)), [1..=3usize, 1..=3usize], dilation)
        })
        .prop_flat_map(|((n, hw, c, o, kernel), stride, dilation)| {
            let pad = |a: usize| 0..=dilation[a] * (kernel[a] - 1);
            let padding = [pad(0), pad(0), pad(1), pad(1)];
            (Just(ConvCase { n, hw, c, o, kernel, stride, dilation, padding: [0; 4] }), padding)
        })
        .prop_map(|(case, padding)| ConvCase { padding, ..case })
        .prop_filter("the window fits", |k| {
            (0..2).all(|a| span(k.hw[a], k.kernel[a], k.dilation[a], k.padding[2 * a] + k.padding[2 * a + 1]).is_some())
        })
}

fn list(v: &[usize]) -> String {
    format!("[{}]", v.iter().map(usize::to_string).collect::<Vec<_>>().join(", "))
}

/// The program's end after its model `M`: one SGD step (`lr = 1`) over
/// the batch `xs` (an expression) with the loss `sum(y * y * g)` for a
/// random `g` of `y`'s shape `g_shape`, then the parameters `printed`.
fn one_sgd_step(n: usize, xs: &str, g_shape: [usize; 4], printed: &[&str]) -> String {
    let prints: String = printed.iter().map(|p| format!("print(net.{p}, full = true)\n")).collect();
    format!(
        "let net = M()\n\
         let xs = {xs}\n\
         let g = normal({g}, seed = 4)\n\
         train net on from_tensors(xs) |> batch({n}) {{\n\
           loss(x) = sum(net(x) * net(x) * g)\n\
           optimizer = sgd(lr = 1.0)\n\
           epochs = 1\n\
         }}\n\
         {prints}",
        g = list(&g_shape),
    )
}

fn conv_program(k: &ConvCase) -> String {
    let out = |a: usize| {
        let pad = k.padding[2 * a] + k.padding[2 * a + 1];
        span(k.hw[a], k.kernel[a], k.dilation[a], pad).map_or(0, |span| span / k.stride[a] + 1)
    };
    let (n, h, w, c, o) = (k.n, k.hw[0], k.hw[1], k.c, k.o);
    let model = format!(
        "use std.optim.sgd\n\
         model M {{\n\
           param u: f32[{h}, {w}, {c}] = normal(seed = 1)\n\
           param w: f32[{kh}, {kw}, {c}, {o}] = normal(seed = 2)\n\
           fn forward(x) = conv2d(x + u, w, stride = {s}, padding = {p}, dilation = {d})\n\
         }}\n",
        kh = k.kernel[0],
        kw = k.kernel[1],
        s = list(&k.stride),
        p = list(&k.padding),
        d = list(&k.dilation),
    );
    let xs = format!("normal([{n}, {h}, {w}, {c}], seed = 3)");
    model + &one_sgd_step(n, &xs, [n, out(0), out(1), o], &["u", "w"])
}

/// A pooling's geometry.
#[derive(Clone, Debug)]
struct PoolCase {
    max: bool,
    n: usize,
    hw: [usize; 2],
    c: usize,
    size: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 4],
}

fn pool_case() -> impl Strategy<Value = PoolCase> {
    // Disjoint windows without padding (the JIT's fast path) half the time.
    (any::<bool>(), any::<bool>(), 1..=2usize, [1..=8usize, 1..=8usize], 1..=20usize, [1..=3usize, 1..=3usize])
        .prop_flat_map(|(max, disjoint, n, hw, c, size)| {
            let stride = if disjoint {
                [size[0]..=size[0] + 1, size[1]..=size[1] + 1].boxed()
            } else {
                [1..=3usize, 1..=3usize].boxed()
            };
            let pad = |a: usize| 0..=if disjoint { 0 } else { size[a] - 1 };
            (Just((max, n, hw, c, size)), stride, [pad(0), pad(0), pad(1), pad(1)])
        })
        .prop_map(|((max, n, hw, c, size), stride, padding)| PoolCase { max, n, hw, c, size, stride, padding })
        .prop_filter("the window fits", |k| {
            (0..2).all(|a| span(k.hw[a], k.size[a], 1, k.padding[2 * a] + k.padding[2 * a + 1]).is_some())
        })
}

fn pool_program(k: &PoolCase) -> String {
    let (n, h, w, c) = (k.n, k.hw[0], k.hw[1], k.c);
    let out = |a: usize| {
        let pad = k.padding[2 * a] + k.padding[2 * a + 1];
        span(k.hw[a], k.size[a], 1, pad).map_or(0, |span| span / k.stride[a] + 1)
    };
    let model = format!(
        "use std.optim.sgd\n\
         model M {{\n\
           param u: f32[{n}, {h}, {w}, {c}] = floor(normal(seed = 1) * 2.0) / 2.0\n\
           fn forward(x) = {op}(x + u, {size}, stride = {s}, padding = {p})\n\
         }}\n",
        op = if k.max { "max_pool2d" } else { "avg_pool2d" },
        size = list(&k.size),
        s = list(&k.stride),
        p = list(&k.padding),
    );
    let xs = format!("floor(normal([{n}, {h}, {w}, {c}], seed = 3) * 2.0) / 2.0");
    model + &one_sgd_step(n, &xs, [n, out(0), out(1), c], &["u"])
}

/// Two CNN layers' geometry: `conv → bias → ReLU → 2x2 max pool`, then a
/// second convolution, both SAME with stride 1. The inputs and weights are
/// halves, so the forward sums are exact in any order: the ReLU masks and
/// the pools' maxima (ties included) are the same on both backends, and
/// only the gradients' rounding differs.
#[derive(Clone, Debug)]
struct LayersCase {
    n: usize,
    hw: [usize; 2],
    c: usize,
    /// Channels of the first and second convolution.
    o: [usize; 2],
    kernel: usize,
    /// Whether the model also sums the pooled activation (then without the
    /// ReLU, whose mask would take the pool's place after the convolution),
    /// so the convolution must store it, not only its pool.
    side: bool,
}

fn layers_case() -> impl Strategy<Value = LayersCase> {
    // Channels across one and two vectors of 16, whole and masked; sizes
    // odd and even (a 2x2 pool of an odd size drops its last row or column,
    // and the convolution then leaves it to the pooling step).
    (1..=2usize, [2..=9usize, 2..=9usize], 1..=3usize, [1..=40usize, 1..=20usize], 2..=3usize, any::<bool>())
        .prop_map(|(n, hw, c, o, kernel, side)| LayersCase { n, hw, c, o, kernel, side })
}

fn layers_program(k: &LayersCase) -> String {
    let (n, [h, w], c, [o1, o2], kk) = (k.n, k.hw, k.c, k.o, k.kernel);
    let (activation, side) = if k.side { ("", " + sum(y) / 64.0") } else { ("relu", "") };
    let model = format!(
        "use std.optim.sgd\n\
         model M {{\n\
           param u: f32[{h}, {w}, {c}] = floor(normal(seed = 1) * 2.0) / 2.0\n\
           param w1: f32[{kk}, {kk}, {c}, {o1}] = floor(normal(seed = 2) * 2.0) / 2.0\n\
           param b1: f32[{o1}] = floor(normal(seed = 5) * 2.0) / 2.0\n\
           param w2: f32[{kk}, {kk}, {o1}, {o2}] = floor(normal(seed = 6) * 2.0) / 2.0\n\
           fn forward(x) {{\n\
             let y = {activation}(conv2d(x + u, w1, padding = \"same\") + b1)\n\
             conv2d(max_pool2d(y, 2), w2, padding = \"same\"){side}\n\
           }}\n\
         }}\n"
    );
    let xs = format!("floor(normal([{n}, {h}, {w}, {c}], seed = 3) * 2.0) / 2.0");
    model + &one_sgd_step(n, &xs, [n, h / 2, w / 2, o2], &["u", "w1", "b1", "w2"])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The fusions of a CNN layer — bias and ReLU applied by the
    /// convolution, its 2x2 max pool written by it (even sizes), the pooled
    /// ReLU mask applied by the next layer's input gradient — give the
    /// interpreter's values (within the convolutions' tolerance).
    #[test]
    fn random_cnn_layers_with_fused_epilogues_and_pools_match_the_interpreter(case in layers_case()) {
        let source = layers_program(&case);
        let (jit, interp) = (run(&source, Backend::Jit), run(&source, Backend::Interp));
        close(&jit, &interp).map_err(|e| TestCaseError::fail(format!("{e}\n{source}")))?;
    }

    #[test]
    fn random_convolutions_and_their_gradients_match_the_interpreter(case in conv_case()) {
        let source = conv_program(&case);
        let counts = step_counts(&source);
        // The forward convolution and both gradients run as native
        // convolution steps (counted with the matrix products).
        prop_assert!(counts.gemm >= 3, "{counts:?}\n{source}");
        let (jit, interp) = (run(&source, Backend::Jit), run(&source, Backend::Interp));
        close(&jit, &interp).map_err(|e| TestCaseError::fail(format!("{e}\n{source}")))?;
    }

    #[test]
    fn random_pooling_and_its_gradient_match_the_interpreter_exactly(case in pool_case()) {
        let source = pool_program(&case);
        let counts = step_counts(&source);
        // The pooling and its gradient run natively.
        prop_assert!(counts.native >= 2, "{counts:?}\n{source}");
        let (jit, interp) = (run(&source, Backend::Jit), run(&source, Backend::Interp));
        prop_assert_eq!(&jit, &interp, "{}", source);
    }
}
