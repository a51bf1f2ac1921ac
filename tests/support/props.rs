//! Random programs for property tests of a backend against the reference
//! interpreter (tests/jit_conv_props.rs, tests/gpu_props.rs): each case is
//! one SGD step (`lr = 1`) of a model whose parameters are an op's
//! operands, so the step runs the op forward and its gradients, and the
//! updated parameters print as shortest round-trip text on each backend.
//! The loss `sum(y * y * g)` for a fixed random `g` makes the gradient
//! that flows back depend on the forward result as well.
//!
//! Geometry: convolutions (batch 1–2, height and width 1–8, 1–3 input and
//! output channels, kernels 1–3, stride 1–3, dilation 1–2, padding up to
//! the window's extent minus one per side), pooling (max or average, up to
//! 20 channels, disjoint windows half the time), matrix products (ragged
//! sides across a GPU tile of 64 and a depth tile of 16, a batch on one or
//! both operands) and reductions (every op, any set of axes, one axis
//! sometimes hundreds long).

use proptest::prelude::*;
use tfc::backend::BackendKind as Backend;
use tfc::driver::Session;
use tfc::runtime::exec::{execute, RunOptions};

/// The tensors `source` prints on `backend` (without the training progress
/// lines, whose throughput varies).
pub fn printed(source: &str, backend: Backend) -> String {
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

/// The values of each printed tensor (one per line: `f32[…] [[…]]`).
pub fn values(printed: &str) -> Vec<Vec<f32>> {
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

/// Two backends' printed tensors agree: each value within
/// `rel * (1 + the largest magnitude in that tensor)` (NaN matching NaN).
pub fn close(jit: &str, interp: &str, rel: f32) -> Result<(), String> {
    let (a, b) = (values(jit), values(interp));
    if a.len() != b.len() || a.iter().zip(&b).any(|(x, y)| x.len() != y.len()) {
        return Err(format!("different shapes:\n--- backend\n{jit}\n--- interp\n{interp}"));
    }
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        let largest = y.iter().fold(0f32, |m, v| m.max(v.abs()));
        let tol = rel * (1.0 + largest);
        for (i, (&p, &q)) in x.iter().zip(y).enumerate() {
            if !((p - q).abs() <= tol || (p.is_nan() && q.is_nan())) {
                return Err(format!("tensor {k}, element {i}: {p} vs the interpreter's {q} (tolerance {tol})"));
            }
        }
    }
    Ok(())
}

/// A convolution's geometry.
#[derive(Clone, Debug)]
pub struct ConvCase {
    pub n: usize,
    pub hw: [usize; 2],
    pub c: usize,
    pub o: usize,
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub padding: [usize; 4],
}

/// Along one axis: the padded length minus the window's extent (`None` when
/// the window does not fit), so the output size is `span / stride + 1`.
pub fn span(input: usize, window: usize, dilation: usize, pad: usize) -> Option<usize> {
    let extent = dilation * (window - 1) + 1;
    (input + pad >= extent).then(|| input + pad - extent)
}

pub fn conv_case() -> impl Strategy<Value = ConvCase> {
    conv_case_sized(1..=8)
}

/// `conv_case` with height and width in `hw` (larger images: more output
/// positions than a GPU spreads a filter gradient over).
pub fn conv_case_sized(hw: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = ConvCase> {
    (1..=2usize, [hw.clone(), hw], 1..=3usize, 1..=3usize, [1..=3usize, 1..=3usize])
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

pub fn list(v: &[usize]) -> String {
    format!("[{}]", v.iter().map(usize::to_string).collect::<Vec<_>>().join(", "))
}

/// The program's end after its model `M`: one SGD step (`lr = 1`) over
/// the batch `xs` (an expression) with the loss `sum(y * y * g)` for a
/// random `g` of `y`'s shape `g_shape`, then the parameters `printed`.
pub fn one_sgd_step(n: usize, xs: &str, g_shape: &[usize], printed: &[&str]) -> String {
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
        g = list(g_shape),
    )
}

pub fn conv_program(k: &ConvCase) -> String {
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
    model + &one_sgd_step(n, &xs, &[n, out(0), out(1), o], &["u", "w"])
}

/// A pooling's geometry.
#[derive(Clone, Debug)]
pub struct PoolCase {
    pub max: bool,
    pub n: usize,
    pub hw: [usize; 2],
    pub c: usize,
    pub size: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 4],
}

pub fn pool_case() -> impl Strategy<Value = PoolCase> {
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

pub fn pool_program(k: &PoolCase) -> String {
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
    model + &one_sgd_step(n, &xs, &[n, out(0), out(1), c], &["u"])
}

/// A matrix product's geometry: `batch` products `[m, k] @ [k, n]`; the
/// right operand is one matrix for every product unless `batched`.
#[derive(Clone, Debug)]
pub struct ProductCase {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub batched: bool,
}

pub fn product_case() -> impl Strategy<Value = ProductCase> {
    (1..=3usize, 1..=70usize, 1..=40usize, 1..=70usize, any::<bool>())
        .prop_map(|(batch, m, k, n, batched)| ProductCase { batch, m, k, n, batched })
}

pub fn product_program(p: &ProductCase) -> String {
    let (batch, m, k, n) = (p.batch, p.m, p.k, p.n);
    let b_shape = if p.batched { format!("{batch}, {k}, {n}") } else { format!("{k}, {n}") };
    let model = format!(
        "use std.optim.sgd\n\
         model M {{\n\
           param a: f32[{m}, {k}] = normal(seed = 1)\n\
           param b: f32[{b_shape}] = normal(seed = 2)\n\
           fn forward(x) = (x + a) @ b\n\
         }}\n"
    );
    let xs = format!("normal([{batch}, {m}, {k}], seed = 3)");
    model + &one_sgd_step(batch, &xs, &[batch, m, n], &["a", "b"])
}

/// A reduction's geometry: `op` over `axes` of a batch of `shape` (axis 0
/// of the reduced value is the batch of `batch`).
#[derive(Clone, Debug)]
pub struct ReduceCase {
    pub op: &'static str,
    pub batch: usize,
    pub shape: Vec<usize>,
    pub axes: Vec<usize>,
}

pub fn reduce_case() -> impl Strategy<Value = ReduceCase> {
    // Mostly short axes, sometimes one of hundreds (a reduction long
    // enough to be split over a workgroup's threads).
    let dim = prop_oneof![4 => 1..=9usize, 1 => 100..=700usize];
    let ops = prop::sample::select(vec!["sum", "mean", "max", "min", "prod"]);
    (ops, 1..=3usize, prop::collection::vec(dim, 1..=3))
        .prop_flat_map(|(op, batch, shape)| {
            let rank = shape.len() + 1;
            (Just((op, batch, shape)), prop::sample::subsequence((0..rank).collect::<Vec<_>>(), 1..=rank))
        })
        .prop_map(|((op, batch, shape), axes)| ReduceCase { op, batch, shape, axes })
        .prop_filter("at most 200k elements", |r| r.batch * r.shape.iter().product::<usize>() <= 200_000)
}

pub fn reduce_program(r: &ReduceCase) -> String {
    let mut full = vec![r.batch];
    full.extend(&r.shape);
    let kept: Vec<usize> = (0..full.len()).filter(|d| !r.axes.contains(d)).map(|d| full[d]).collect();
    let axes = format!("({})", r.axes.iter().map(|a| format!("{a}, ")).collect::<String>());
    // Products of hundreds of values stay finite near 1.
    let init = if r.op == "prod" { "1.0 + 0.05 * normal(seed = 1)" } else { "normal(seed = 1)" };
    let model = format!(
        "use std.optim.sgd\n\
         model M {{\n\
           param u: f32[{}] = {init}\n\
           fn forward(x) = {}(x + u, axis = {axes})\n\
         }}\n",
        r.shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
        r.op,
    );
    let xs = if r.op == "prod" {
        format!("0.05 * normal({}, seed = 3)", list(&full))
    } else {
        format!("normal({}, seed = 3)", list(&full))
    };
    model + &one_sgd_step(r.batch, &xs, &kept, &["u"])
}
