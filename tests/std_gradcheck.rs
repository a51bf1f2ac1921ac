//! Finite-difference checks of the std library's layers, losses and
//! `std.math` functions, differentiated *through the language*.
//!
//! What: every case is a `.tfl` expression over a few `f64` inputs — a std
//! loss (`mse mae softmax_cross_entropy binary_cross_entropy
//! sigmoid_cross_entropy`), a `std.math` function (`softmax log_softmax
//! logsumexp variance normalize layer_norm gelu silu softplus elu leaky_relu
//! logit clip square`), or the computation of a std layer (`Dense`:
//! `act(x @ w + b)`; `Conv2d`: `conv2d(x, w, stride, padding) + b`;
//! `LayerNorm`: `layer_norm(x, gamma, beta)`; `BatchNorm` while training:
//! `batch_norm(x, gamma, beta)` of `std.nn`; `Embedding`:
//! `embedding(table, ids)`; `MultiHeadAttention`: `multi_head_attention`
//! and `attention` of `std.nn`, with and without the causal mask; `LSTM` and
//! `GRU`: `lstm` and `gru` of `std.nn`, their cells over a few steps of
//! `scan`; `GlobalAvgPool`, which has no parameters, itself), with respect
//! to every float input (weights and biases included). The layer models
//! declare `f32` parameters, so their *math* is checked here in `f64` (the
//! models' `forward`s call exactly these functions);
//! `tests/cases/run/layer_gradients_in_training_match_grad.tfl` checks that
//! training the models themselves applies exactly these gradients.
//!
//! How: `check` writes one program per case. The objective is
//! `f(inputs) = sum(sin(EXPR))` (the `sin` weights every output element
//! differently, so a gradient that is wrong in one element, or a softmax
//! whose outputs sum to a constant, cannot hide). The program prints
//! `grad(f, wrt = k)(inputs)` for each float input `k`, then `f` at every
//! input perturbed by `±h` in one element (`h = 1e-6`), all in `f64` and in
//! Rust's shortest round-trip form, so the printed numbers are exact. The
//! central difference `(f(x + h·e_i) − f(x − h·e_i)) / (x_i⁺ − x_i⁻)` (the
//! denominator is the exact spacing of the two `f64` literals) is compared
//! with the printed gradient.
//!
//! Tolerance: `|analytic − numeric| ≤ 1e-6 · (1 + |numeric|)`, as in
//! `tests/gradcheck.rs`: in `f64` the central difference is accurate to
//! about `1e-9` here (truncation `O(h²)`, rounding `O(ε·|f|/h)`). Inputs are
//! drawn away from kinks: values lie in `±[0.2, 2]`, probabilities in
//! `[0.1, 0.9]`, and kinked cases (`mae`, `leaky_relu`, `elu`, `clip`) use
//! inputs whose distance to the kink is far larger than `h`.
//!
//! A std function that quietly computed in `f32` (a literal or a built-in
//! forcing the dtype) would fail to check or be off by about `1e-7` relative
//! (far above the tolerance), so these cases also prove the functions are
//! dtype-generic.

use tfc::diag::render;
use tfc::driver::Session;

const H: f64 = 1e-6;
const TOL: f64 = 1e-6;

/// How an input's values are chosen.
#[derive(Clone, Copy)]
enum Vals {
    /// Pseudo-random values in `±[0.2, 2]`.
    Signed,
    /// Pseudo-random values in `[0.1, 0.9]` (probabilities).
    Prob,
    /// These values.
    Given(&'static [f64]),
}

/// A float input of a case: its name in the expression, its shape, its values.
struct Input {
    name: &'static str,
    shape: &'static [usize],
    vals: Vals,
}

const fn input(name: &'static str, shape: &'static [usize], vals: Vals) -> Input {
    Input { name, shape, vals }
}

/// One check: `uses` (items put before the function), the float inputs and
/// the expression over them (which may name constants such as integer
/// labels in place).
struct Case {
    name: &'static str,
    uses: &'static str,
    inputs: &'static [Input],
    expr: &'static str,
}

use Vals::{Given, Prob, Signed};

const CASES: &[Case] = &[
    // ---- std.loss ----
    Case {
        name: "mse",
        uses: "use std.loss.mse",
        inputs: &[input("p", &[2, 3], Signed), input("t", &[2, 3], Signed)],
        expr: "mse(p, t)",
    },
    Case {
        name: "mae",
        uses: "use std.loss.mae",
        // p - t is at least 0.3 away from the kink at 0.
        inputs: &[
            input("p", &[2, 3], Given(&[0.5, -1.0, 2.0, 0.1, -0.7, 1.3])),
            input("t", &[2, 3], Given(&[-0.2, 0.4, 1.1, 0.9, -0.3, 0.2])),
        ],
        expr: "mae(p, t)",
    },
    Case {
        name: "softmax_cross_entropy",
        uses: "use std.loss.softmax_cross_entropy",
        inputs: &[input("z", &[3, 4], Signed)],
        expr: "softmax_cross_entropy(z, [2, 0, 3])",
    },
    Case {
        name: "binary_cross_entropy",
        uses: "use std.loss.binary_cross_entropy",
        inputs: &[input("p", &[2, 3], Prob)],
        expr: "binary_cross_entropy(p, [[1.0f64, 0.0f64, 1.0f64], [0.0f64, 0.0f64, 1.0f64]])",
    },
    Case {
        name: "binary_cross_entropy_wrt_soft_targets",
        uses: "use std.loss.binary_cross_entropy",
        inputs: &[input("p", &[4], Prob), input("t", &[4], Prob)],
        expr: "binary_cross_entropy(p, t)",
    },
    Case {
        name: "sigmoid_cross_entropy",
        uses: "use std.loss.sigmoid_cross_entropy",
        inputs: &[input("z", &[2, 3], Signed), input("t", &[2, 3], Prob)],
        expr: "sigmoid_cross_entropy(z, t)",
    },
    // ---- std.math ----
    Case { name: "square", uses: "", inputs: &[input("x", &[2, 3], Signed)], expr: "square(x)" },
    Case {
        name: "clip",
        uses: "",
        // Every value is at least 0.2 away from the bounds -1 and 1.
        inputs: &[input("x", &[5], Given(&[-1.7, -0.6, 0.3, 0.8, 1.4]))],
        expr: "clip(x, -1.0, 1.0)",
    },
    Case { name: "softmax", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "softmax(x)" },
    Case { name: "softmax_axis_0", uses: "", inputs: &[input("x", &[3, 2], Signed)], expr: "softmax(x, axis = 0)" },
    Case { name: "log_softmax", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "log_softmax(x)" },
    Case { name: "logsumexp", uses: "", inputs: &[input("x", &[3, 4], Signed)], expr: "logsumexp(x)" },
    Case {
        name: "logsumexp_axes_tuple_keepdims",
        uses: "",
        inputs: &[input("x", &[2, 2, 3], Signed)],
        expr: "logsumexp(x, axis = (0, 2), keepdims = true)",
    },
    Case { name: "variance", uses: "", inputs: &[input("x", &[2, 5], Signed)], expr: "variance(x)" },
    Case { name: "normalize", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "normalize(x)" },
    Case {
        name: "layer_norm",
        uses: "",
        inputs: &[input("x", &[3, 4], Signed), input("g", &[4], Signed), input("b", &[4], Signed)],
        expr: "layer_norm(x, g, b)",
    },
    Case { name: "gelu", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "gelu(x)" },
    Case { name: "gelu_exact", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "gelu(x, approximate = false)" },
    // ---- reductions, scans and sorts along an axis (built-ins) ----
    Case { name: "prod", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "prod(x, axis = 1)" },
    Case {
        name: "prod_with_zeros",
        uses: "",
        // Rows with one zero, two zeros and none: the partials are the
        // products of the others, never a division by zero.
        inputs: &[input("x", &[3, 3], Given(&[0.0, 1.5, -2.0, 0.0, 0.0, 0.7, 1.2, -0.4, 0.9]))],
        expr: "prod(x, axis = 1) + prod(x)",
    },
    Case {
        name: "cumsum",
        uses: "",
        inputs: &[input("x", &[3, 4], Signed)],
        expr: "cumsum(x, axis = 0) * cumsum(x, reverse = true)",
    },
    // Sorting is piecewise linear: `Signed` values differ by far more than `h`.
    Case {
        name: "sort",
        uses: "",
        inputs: &[input("x", &[3, 4], Signed)],
        expr: "sort(x, axis = 0) * [1.0f64, 2.0f64, 3.0f64, 4.0f64] + sort(x, descending = true)",
    },
    Case {
        name: "top_k",
        uses: "",
        inputs: &[input("x", &[2, 5], Signed)],
        expr: "{ let (v, i) = top_k(x, 3); v * [1.0f64, 2.0f64, 3.0f64] }",
    },
    Case {
        name: "take_along_axis",
        uses: "",
        inputs: &[input("x", &[2, 3], Signed)],
        expr: "take_along_axis(x, [[2, 0, 2, 2], [1, 1, 0, 2]], axis = 1)",
    },
    Case { name: "silu", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "silu(x)" },
    Case { name: "softplus", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "softplus(x)" },
    // elu and leaky_relu: `Signed` values are at least 0.2 away from the kink at 0.
    Case { name: "elu", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "elu(x, alpha = 0.7)" },
    Case { name: "leaky_relu", uses: "", inputs: &[input("x", &[2, 4], Signed)], expr: "leaky_relu(x, alpha = 0.1)" },
    Case { name: "logit", uses: "", inputs: &[input("x", &[5], Prob)], expr: "logit(x)" },
    // ---- the computations of the std.nn layers ----
    Case {
        name: "dense",
        uses: "",
        inputs: &[input("x", &[2, 3], Signed), input("w", &[3, 4], Signed), input("b", &[4], Signed)],
        expr: "identity(x @ w + b)",
    },
    Case {
        name: "dense_tanh",
        uses: "",
        inputs: &[input("x", &[2, 3], Signed), input("w", &[3, 2], Signed), input("b", &[2], Signed)],
        expr: "tanh(x @ w + b)",
    },
    Case {
        name: "conv2d_same",
        uses: "",
        inputs: &[input("x", &[1, 4, 4, 2], Signed), input("w", &[3, 3, 2, 2], Signed), input("b", &[2], Signed)],
        expr: "conv2d(x, w, stride = 1, padding = \"same\") + b",
    },
    Case {
        name: "conv2d_stride_2_valid",
        uses: "",
        inputs: &[input("x", &[2, 5, 5, 1], Signed), input("w", &[3, 3, 1, 2], Signed), input("b", &[2], Signed)],
        expr: "conv2d(x, w, stride = 2, padding = \"valid\") + b",
    },
    Case {
        name: "layer_norm_eps",
        uses: "",
        inputs: &[input("x", &[2, 3], Signed), input("g", &[3], Signed), input("b", &[3], Signed)],
        expr: "layer_norm(x, g, b, eps = 1e-3)",
    },
    // BatchNorm while training (`std.nn.batch_norm`, which its `forward`
    // calls): the batch statistics depend on every input, so the gradient
    // of one input mixes the whole channel.
    Case {
        name: "batch_norm_over_rows",
        uses: "use std.nn.{batch_norm}",
        inputs: &[input("x", &[4, 3], Signed), input("g", &[3], Signed), input("b", &[3], Signed)],
        expr: "batch_norm(x, g, b)",
    },
    Case {
        name: "batch_norm_over_nhwc",
        uses: "use std.nn.{batch_norm}",
        inputs: &[input("x", &[2, 2, 2, 3], Signed), input("g", &[3], Signed), input("b", &[3], Signed)],
        expr: "batch_norm(x, g, b, eps = 1e-3)",
    },
    // Attention over [B, heads, T, dh]: the causal mask's -1e9 scores get
    // exactly zero weight, so the masked keys' gradients come only from the
    // positions that see them.
    Case {
        name: "attention",
        uses: "use std.nn.{attention}",
        inputs: &[
            input("q", &[2, 2, 3, 2], Signed),
            input("k", &[2, 2, 3, 2], Signed),
            input("v", &[2, 2, 3, 2], Signed),
        ],
        expr: "attention(q, k, v)",
    },
    Case {
        name: "attention_causal",
        uses: "use std.nn.{attention}",
        inputs: &[
            input("q", &[1, 2, 4, 2], Signed),
            input("k", &[1, 2, 4, 2], Signed),
            input("v", &[1, 2, 4, 2], Signed),
        ],
        expr: "attention(q, k, v, causal = true)",
    },
    // MultiHeadAttention's forward with its projections written out (the
    // Dense biases add nothing the weights do not already check).
    Case {
        name: "multi_head_attention_causal",
        uses: "use std.nn.{multi_head_attention}",
        inputs: &[
            input("x", &[2, 3, 4], Signed),
            input("wq", &[4, 4], Signed),
            input("wk", &[4, 4], Signed),
            input("wv", &[4, 4], Signed),
            input("wo", &[4, 4], Signed),
            input("bq", &[4], Signed),
        ],
        expr: "multi_head_attention(x @ wq + bq, x @ wk, x @ wv, 2, causal = true) @ wo",
    },
    Case {
        name: "multi_head_attention",
        uses: "use std.nn.{multi_head_attention}",
        inputs: &[input("x", &[1, 3, 4], Signed), input("wq", &[4, 4], Signed), input("wo", &[4, 4], Signed)],
        expr: "multi_head_attention(x @ wq, x, x, 2) @ wo",
    },
    // The recurrences over three steps of `scan` (time-major [T, B, inputs],
    // hidden 3): every step's h, so each step's gradient is checked.
    Case {
        name: "lstm_three_steps",
        uses: "use std.nn.{lstm}",
        inputs: &[
            input("xs", &[3, 2, 2], Signed),
            input("wx", &[2, 12], Signed),
            input("wh", &[3, 12], Signed),
            input("b", &[12], Signed),
        ],
        expr: "lstm(xs, wx, wh, b)[1]",
    },
    Case {
        name: "lstm_last_h",
        uses: "use std.nn.{lstm}",
        inputs: &[
            input("xs", &[4, 1, 2], Signed),
            input("wx", &[2, 8], Signed),
            input("wh", &[2, 8], Signed),
            input("b", &[8], Signed),
        ],
        expr: "lstm(xs, wx, wh, b)[0]",
    },
    Case {
        name: "gru_three_steps",
        uses: "use std.nn.{gru}",
        inputs: &[
            input("xs", &[3, 2, 2], Signed),
            input("wx", &[2, 9], Signed),
            input("wh", &[3, 9], Signed),
            input("bx", &[9], Signed),
            input("bh", &[9], Signed),
        ],
        expr: "gru(xs, wx, wh, bx, bh)[1]",
    },
    Case {
        name: "global_avg_pool",
        uses: "use std.nn.{GlobalAvgPool}",
        inputs: &[input("x", &[2, 3, 2, 2], Signed)],
        expr: "GlobalAvgPool()(x) * [1.0f64, -2.0f64]",
    },
    Case {
        name: "embedding_with_repeated_ids",
        uses: "",
        // Row 2 is looked up three times, row 3 never: its gradient is zero.
        inputs: &[input("table", &[4, 3], Signed)],
        expr: "embedding(table, [[0, 2], [2, 1], [2, 0]])",
    },
];

/// Deterministic values for `vals` (a 64-bit LCG seeded per case and input).
fn values(vals: Vals, n: usize, seed: u64) -> Vec<f64> {
    if let Given(v) = vals {
        assert_eq!(v.len(), n, "given values do not match the shape");
        return v.to_vec();
    }
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| match vals {
            Prob => 0.1 + 0.8 * next(),
            _ => {
                let m = 0.2 + 1.8 * next();
                if next() < 0.5 {
                    -m
                } else {
                    m
                }
            }
        })
        .collect()
}

/// `reshape([v0f64, v1f64, …], [shape])`: exact `f64` literals.
fn literal(shape: &[usize], v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("{x:?}f64")).collect();
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("reshape([{}], [{}])", items.join(", "), dims.join(", "))
}

/// Runs `source`, returning its printed lines (panics with the rendered
/// diagnostics if it does not check or run).
fn run(name: &str, source: &str) -> Vec<String> {
    let mut session = Session::new();
    let file = session.add_source("gradcheck.tfl", source);
    let program = session.check(file).unwrap_or_else(|d| {
        panic!("{name}: the program does not check:\n{}\n{source}", render(&d, &session.sources, false))
    });
    let mut out = Vec::new();
    if let Err(d) = tfc::runtime::exec::execute(&program, &mut out, Default::default()) {
        panic!("{name}: the program failed:\n{}", render(&[d], &session.sources, false));
    }
    String::from_utf8(out).expect("utf-8 output").lines().map(str::to_string).collect()
}

/// The numbers of one printed `f64` tensor or scalar (`f64[2] [1, 2]`).
fn parse_f64s(name: &str, line: &str) -> Vec<f64> {
    let body = if line.starts_with("f64[") {
        &line[line.find("] ").unwrap_or_else(|| panic!("{name}: cannot parse `{line}`")) + 2..]
    } else {
        line.strip_prefix("f64 ").unwrap_or_else(|| panic!("{name}: not an f64 value: `{line}`"))
    };
    body.split(['[', ']', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or_else(|_| panic!("{name}: not a number `{s}` in `{line}`")))
        .collect()
}

fn check(case: &Case, index: usize) {
    let inputs: Vec<Vec<f64>> = case
        .inputs
        .iter()
        .enumerate()
        .map(|(k, i)| values(i.vals, i.shape.iter().product(), (index * 16 + k) as u64))
        .collect();
    let params: Vec<&str> = case.inputs.iter().map(|i| i.name).collect();
    let mut src = format!("{}\nfn f({}) = sum(sin({}))\n", case.uses, params.join(", "), case.expr);
    let args = |vals: &[Vec<f64>]| -> String {
        case.inputs.iter().zip(vals).map(|(i, v)| literal(i.shape, v)).collect::<Vec<_>>().join(", ")
    };
    let base = args(&inputs);
    for k in 0..case.inputs.len() {
        src.push_str(&format!("print(grad(f, wrt = {k})({base}), full = true)\n"));
    }
    // (input, element, x⁺ − x⁻) for each pair of perturbed evaluations.
    let mut probes = Vec::new();
    for (k, x) in inputs.iter().enumerate() {
        for i in 0..x.len() {
            let (plus, minus) = (x[i] + H, x[i] - H);
            for v in [plus, minus] {
                let mut p = inputs.clone();
                p[k][i] = v;
                src.push_str(&format!("print(f({}), full = true)\n", args(&p)));
            }
            probes.push((k, i, plus - minus));
        }
    }
    let lines = run(case.name, &src);
    assert_eq!(lines.len(), case.inputs.len() + 2 * probes.len(), "{}: unexpected output", case.name);
    let grads: Vec<Vec<f64>> = lines[..case.inputs.len()].iter().map(|l| parse_f64s(case.name, l)).collect();
    for (k, g) in grads.iter().enumerate() {
        assert_eq!(g.len(), inputs[k].len(), "{}: the gradient of `{}` has the wrong size", case.name, params[k]);
    }
    let mut worst: f64 = 0.0;
    for (j, &(k, i, dx)) in probes.iter().enumerate() {
        let fp = parse_f64s(case.name, &lines[case.inputs.len() + 2 * j])[0];
        let fm = parse_f64s(case.name, &lines[case.inputs.len() + 2 * j + 1])[0];
        let numeric = (fp - fm) / dx;
        let analytic = grads[k][i];
        let err = (analytic - numeric).abs() / (1.0 + numeric.abs());
        worst = worst.max(err);
        assert!(
            err <= TOL,
            "{}: d f / d {}[{i}] is {analytic} by grad but {numeric} numerically (f = sum(sin({})), {} = {:?})",
            case.name,
            params[k],
            case.expr,
            params[k],
            inputs[k]
        );
    }
    assert!(worst.is_finite(), "{}: non-finite error", case.name);
    eprintln!("{}: {} probes, worst relative error {worst:.1e}", case.name, probes.len());
}

#[test]
fn std_functions_match_central_differences() {
    // Every case runs; the failures are listed together.
    let failed: Vec<&str> = CASES
        .iter()
        .enumerate()
        .filter(|(index, case)| std::panic::catch_unwind(|| check(case, *index)).is_err())
        .map(|(_, case)| case.name)
        .collect();
    assert!(failed.is_empty(), "gradient checks failed (messages above): {failed:?}");
}

#[test]
fn parse_f64s_reads_scalars_and_nested_tensors() {
    assert_eq!(parse_f64s("t", "f64 0.125"), vec![0.125]);
    assert_eq!(parse_f64s("t", "f64[2, 2] [[1, -2.5], [3e-7, 4]]"), vec![1.0, -2.5, 3e-7, 4.0]);
}
