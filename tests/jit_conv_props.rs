//! The JIT's convolutions and pooling against the reference interpreter on
//! random geometry: one SGD step (`lr = 1`) of a model whose parameters are
//! a convolution's (or pooling's) input and weights, so the step runs the
//! forward op and both gradients (the input's and, for convolutions, the
//! weights') through the JIT's native kernels (`conv`: the direct AVX-512
//! kernels where the machine has them, im2col and gemm otherwise;
//! `pool`: the disjoint-window fast path or the interpreter's code) and the
//! updated parameters print as shortest round-trip text on each backend.
//!
//! The programs, their geometry and the loss: `support::props` (shared
//! with tests/gpu_props.rs).
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

mod support;

use proptest::prelude::*;
use support::props::{close, conv_case, conv_program, one_sgd_step, pool_case, pool_program, printed as run};
use tfc::backend::BackendKind as Backend;
use tfc::driver::Session;
use tfc::runtime::exec::{Executor, RunOptions};

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
    model + &one_sgd_step(n, &xs, &[n, h / 2, w / 2, o2], &["u", "w1", "b1", "w2"])
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
        close(&jit, &interp, 1e-4).map_err(|e| TestCaseError::fail(format!("{e}\n{source}")))?;
    }

    #[test]
    fn random_convolutions_and_their_gradients_match_the_interpreter(case in conv_case()) {
        let source = conv_program(&case);
        let counts = step_counts(&source);
        // The forward convolution and both gradients run as native
        // convolution steps (counted with the matrix products).
        prop_assert!(counts.gemm >= 3, "{counts:?}\n{source}");
        let (jit, interp) = (run(&source, Backend::Jit), run(&source, Backend::Interp));
        close(&jit, &interp, 1e-4).map_err(|e| TestCaseError::fail(format!("{e}\n{source}")))?;
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
