//! The GPU backend's generated shaders against the reference interpreter on
//! random geometry (`support::props`): matrix products with ragged sides
//! (across the 64-wide output tile and the 16-deep `k` tile, batched on one
//! or both operands), reductions over any set of axes with every op (some
//! axes hundreds long), convolutions, pooling, each forward and through
//! its gradients in one SGD step.
//!
//! Tolerance: products, convolutions and reductions agree to
//! `1e-4 * (1 + the largest magnitude in the tensor)` (the 1e-4
//! for reductions and products: the GPU sums in its own order); pooling is
//! exact (the shaders fold each window in the interpreter's order).
//!
//! Where it runs: as tests/gpu.rs (lavapipe in CI; a missing device fails
//! under `CI=true`). Cost: lavapipe compiles each case's shaders; 24 cases
//! a property keep the file to about a minute in a debug build.
#![cfg(feature = "gpu")]

mod support;

use proptest::prelude::*;
use support::backends::gpu_here;
use support::props::{
    close, conv_case, conv_case_sized, conv_program, pool_case, pool_program, printed, product_case, product_program,
    reduce_case, reduce_program,
};
use tfc::backend::BackendKind as Backend;

/// The GPU's and the interpreter's printed tensors of `source`, within `rel`.
fn agrees(source: &str, rel: f32) -> Result<(), TestCaseError> {
    let (gpu, interp) = (printed(source, Backend::Gpu), printed(source, Backend::Interp));
    close(&gpu, &interp, rel).map_err(|e| TestCaseError::fail(format!("{e}\n{source}")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_products_and_their_gradients_match_the_interpreter(case in product_case()) {
        if gpu_here() {
            agrees(&product_program(&case), 1e-4)?;
        }
    }

    #[test]
    fn random_reductions_and_their_gradients_match_the_interpreter(case in reduce_case()) {
        if gpu_here() {
            agrees(&reduce_program(&case), 1e-4)?;
        }
    }

    #[test]
    fn random_convolutions_and_their_gradients_match_the_interpreter(case in conv_case()) {
        if gpu_here() {
            agrees(&conv_program(&case), 1e-4)?;
        }
    }

    /// Images of 12 to 24 pixels a side: filter gradients over hundreds of
    /// positions, each filter element summed by a workgroup.
    #[test]
    fn random_convolutions_of_larger_images_match_the_interpreter(case in conv_case_sized(12..=24)) {
        if gpu_here() {
            agrees(&conv_program(&case), 1e-4)?;
        }
    }

    #[test]
    fn random_pooling_and_its_gradient_match_the_interpreter_exactly(case in pool_case()) {
        if gpu_here() {
            let source = pool_program(&case);
            prop_assert_eq!(printed(&source, Backend::Gpu), printed(&source, Backend::Interp), "{}", source);
        }
    }
}

/// Each float function's values over `xs` (a tensor expression) on the GPU
/// and on the interpreter.
fn swept(function: &str, xs: &str) -> (Vec<f32>, Vec<f32>) {
    // One batch of all of them.
    let source = format!(
        "let xs = {xs}\nprint(collect(from_tensors(xs) |> batch(shape(xs)[0]) |> map(fn(x) = {function})), full = true)\n"
    );
    let (gpu, interp) = (printed(&source, Backend::Gpu), printed(&source, Backend::Interp));
    let one = |text: &str| support::props::values(text).concat();
    (one(&gpu), one(&interp))
}

/// The GPU's math functions are within 1e-6 relative of the interpreter's
/// (glibc's, correctly rounded or within an ulp) over their useful ranges,
/// results smaller than `floor` compared absolutely to `1e-6 * floor`:
/// near a zero of `sin`, `cos` or `log`, where the argument's own
/// rounding dominates.
#[test]
fn elementwise_math_is_within_1e_6_of_the_interpreter() {
    if !gpu_here() {
        return;
    }
    let cases: &[(&str, &str, f32)] = &[
        ("exp(x)", "linspace(-100.0, 88.0, 4096)", 0.0),
        ("log(x)", "exp(linspace(-80.0, 80.0, 4096))", 1.0),
        ("tanh(x)", "linspace(-12.0, 12.0, 4096)", 0.0),
        ("sigmoid(x)", "linspace(-80.0, 80.0, 4096)", 0.0),
        ("sin(x)", "linspace(-100.0, 100.0, 4096)", 1.0),
        ("cos(x)", "linspace(-100.0, 100.0, 4096)", 1.0),
        ("erf(x)", "linspace(-4.0, 4.0, 4096)", 0.0),
        ("log1p(x)", "linspace(-0.99, 10.0, 4096)", 0.0),
        ("log1p(x)", "linspace(-0.001, 0.001, 4096)", 0.0),
        ("expm1(x)", "linspace(-20.0, 20.0, 4096)", 0.0),
        ("expm1(x)", "linspace(-0.001, 0.001, 4096)", 0.0),
        ("sqrt(x)", "linspace(0.0, 1000.0, 4096)", 0.0),
        ("rsqrt(x)", "linspace(0.001, 1000.0, 4096)", 0.0),
        ("pow(x, 2.5)", "linspace(0.0, 100.0, 4096)", 0.0),
        ("pow(x, -3.0)", "linspace(-10.0, 10.0, 4096)", 0.0),
        ("pow(2.0, x)", "linspace(-30.0, 30.0, 4096)", 0.0),
        ("1.0 / x", "linspace(0.5, 1000.0, 4096)", 0.0),
    ];
    // Zeros of both signs, infinities, NaN, huge and tiny values.
    let special = "[0.0, -0.0, 1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0, 1e30, -1e30, 1e-30, -1e-30, 3.0e38, -3.0e38]";
    let functions: Vec<&str> = cases.iter().map(|c| c.0).collect();
    // `sin` and `cos` reduce their argument by pi/4 in f32 pieces, exact to
    // |x| = 8192 only (docs/language.md, the GPU's limits).
    let trig_special = "[0.0, -0.0, 1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0, 8000.0, -8000.0, 1e-30, -1e-30]";
    let specials: Vec<(&str, &str, f32)> = functions
        .iter()
        .map(|&f| (f, if f.starts_with("sin") || f.starts_with("cos") { trig_special } else { special }, 0.0))
        .collect();
    let mut failures = Vec::new();
    for &(function, xs, floor) in cases.iter().chain(&specials) {
        let (gpu, interp) = swept(function, xs);
        assert_eq!(gpu.len(), interp.len(), "{function}");
        let worst = gpu
            .iter()
            .zip(&interp)
            .map(|(&a, &b)| match a == b || (a.is_nan() && b.is_nan()) {
                true => 0.0,
                // A NaN on one side only is as far off as can be.
                false => Some((a - b).abs() / b.abs().max(floor)).filter(|d| !d.is_nan()).unwrap_or(f32::INFINITY),
            })
            .fold(0f32, f32::max);
        eprintln!("{function:>12}: largest relative difference {worst:.2e}");
        if worst > 1e-6 {
            failures.push(format!("{function}: {worst:.2e}"));
        }
    }
    assert!(failures.is_empty(), "beyond 1e-6 of the interpreter: {failures:?}");
}
