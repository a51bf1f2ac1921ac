//! Finite-difference checks of reverse-mode autodiff (`tfc::autodiff`).
//!
//! What: every differentiable primitive op — unary, arithmetic binary,
//! select, cast, reductions, shape ops, slice, pad, matmul, conv2d,
//! pooling and gather — has its VJP rule (and, for conv/pool/gather, the
//! interpreter's gradient ops) checked against numerical derivatives.
//!
//! How: `check_op` builds a small `f64` graph with `Graph::add` (typed by
//! `ir::infer`): the inputs are constant nodes, the output is
//! `y = sum(op(inputs) * r)` for a fixed random tensor `r`, so every output
//! element influences `y` with its own weight. `autodiff::gradients` appends
//! the gradient nodes, the interpreter evaluates them, and each element of
//! each gradient is compared with the central difference
//! `(f(x + h·e_i) − f(x − h·e_i)) / 2h`, `h = 1e-6`, where `f` re-evaluates
//! the forward graph with that constant's literal perturbed.
//!
//! Tolerance: `|analytic − numeric| ≤ 1e-6 · (1 + |numeric|)`. With `h = 1e-6`
//! in `f64` the central difference is accurate to about `1e-9` for the value
//! ranges used here (truncation `O(h²)`, rounding `O(ε·|f|/h)`).
//!
//! Inputs are sampled away from kinks and singularities: values lie in
//! `±[0.2, 2]` (never near 0, where abs/relu kink and log/div/rsqrt blow
//! up), `maximum`/`minimum` operands differ by at least 0.05, and inputs
//! to max/min reductions and max pooling are distinct by at least 0.2, so
//! no perturbation of size `h` flips a comparison (the choices made at
//! kinks, such as max pooling's first maximum, are not differentiable and
//! are left to the interpreter's and autodiff's unit tests). Proptest draws random
//! shapes (dims 1..=4) and values for the elementwise, reduction and shape
//! families; conv2d and pooling use fixed geometries with random values.

use proptest::collection::vec;
use proptest::prelude::*;
use tfc::autodiff::gradients;
use tfc::diag::Span;
use tfc::ir::infer::infer;
use tfc::ir::{BinaryOp, DType, Graph, Literal, NodeId, Op, PoolKind, ReduceOp, TensorType, UnaryOp};
use tfc::tensor::evaluate;

const H: f64 = 1e-6;
const TOL: f64 = 1e-6;

/// An input of `check_op`: its shape and row-major `f64` values.
type Input = (Vec<usize>, Vec<f64>);

/// Adds `op` on `inputs`, typed by `infer` as the tracer would type it.
fn add(g: &mut Graph, op: Op, inputs: &[NodeId]) -> NodeId {
    let types: Vec<TensorType> = inputs.iter().map(|&i| g.node(i).ty.clone()).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty =
        infer(&op, &refs).unwrap_or_else(|e| panic!("test graph: {} does not type-check: {}", op.name(), e.message));
    g.add(op, inputs, ty, Span::default())
}

fn constant(g: &mut Graph, value: Literal, ty: TensorType) -> NodeId {
    g.add(Op::Constant { value, ty: ty.clone() }, &[], ty, Span::default())
}

fn f64_const(g: &mut Graph, shape: &[usize], values: &[f64]) -> NodeId {
    constant(g, Literal::Float(values.to_vec()), TensorType::new(DType::F64, shape.to_vec()))
}

/// The scalar `y = sum(out * r)` for a fixed pseudo-random `r` shaped like `out`.
fn weighted_sum(g: &mut Graph, out: NodeId) -> NodeId {
    let shape = g.node(out).ty.shape.clone();
    let r = tfc::rng::normal(7, shape.iter().product());
    let r = f64_const(g, &shape, &r);
    let prod = add(g, Op::Binary(BinaryOp::Mul), &[out, r]);
    add(g, Op::Reduce { op: ReduceOp::Sum, axes: (0..shape.len()).collect(), keepdims: false }, &[prod])
}

/// The value of scalar node `y` in `g`.
fn eval_scalar(g: &Graph, y: NodeId) -> f64 {
    let values = evaluate(g).unwrap_or_else(|e| panic!("evaluation failed: {}", e.message));
    values[&y].to_f64_vec()[0]
}

/// Checks the gradients autodiff builds for `y = sum(build(inputs) * r)`
/// with respect to every input against central differences (see the file
/// doc). `build` receives the input constants in order; it may add other
/// (non-differentiated) constants such as indices or conditions.
fn check_op(build: impl Fn(&mut Graph, &[NodeId]) -> NodeId, inputs: Vec<Input>) {
    let mut g = Graph::new();
    let xs: Vec<NodeId> = inputs.iter().map(|(s, v)| f64_const(&mut g, s, v)).collect();
    let out = build(&mut g, &xs);
    let name = g.node(out).op.name();
    let y = weighted_sum(&mut g, out);
    // Finite differences re-evaluate the forward graph only.
    let forward = g.clone();
    let grads = gradients(&mut g, y, None, &xs).unwrap_or_else(|e| panic!("{name}: autodiff failed: {}", e.message));
    let values = evaluate(&g).unwrap_or_else(|e| panic!("{name}: evaluating the gradients failed: {}", e.message));
    for (k, ((shape, x), grad)) in inputs.iter().zip(grads).enumerate() {
        let grad = grad.unwrap_or_else(|| panic!("{name}: no gradient for input {k}"));
        assert_eq!(g.node(grad).ty, g.node(xs[k]).ty, "{name}: the gradient of input {k} has the wrong type");
        let analytic = values[&grad].to_f64_vec();
        for i in 0..x.len() {
            let f = |delta: f64| {
                let mut p = forward.clone();
                let mut v = x.clone();
                v[i] += delta;
                p.node_mut(xs[k]).op =
                    Op::Constant { value: Literal::Float(v), ty: TensorType::new(DType::F64, shape.clone()) };
                eval_scalar(&p, y)
            };
            let numeric = (f(H) - f(-H)) / (2.0 * H);
            assert!(
                (analytic[i] - numeric).abs() <= TOL * (1.0 + numeric.abs()),
                "{name}: d y / d input{k}[{i}] is {} by autodiff but {numeric} numerically (input {k}: {shape:?} {x:?})",
                analytic[i]
            );
        }
    }
}

// ---- strategies ----

/// A value in `±[0.2, 2]`: away from zero.
fn away() -> impl Strategy<Value = f64> {
    (0.2..2.0f64, any::<bool>()).prop_map(|(m, neg)| if neg { -m } else { m })
}

fn shape(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    vec(1usize..=4, ranks)
}

/// A shape of rank in `ranks` and values in `±[0.2, 2]`.
fn tensor(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Input> {
    shape(ranks).prop_flat_map(|s| {
        let n: usize = s.iter().product();
        (Just(s), vec(away(), n))
    })
}

/// `n` values at least 0.2 apart, in random order (no ties for max/min).
fn distinct(n: usize) -> impl Strategy<Value = Vec<f64>> {
    (Just((0..n).collect::<Vec<usize>>()).prop_shuffle(), vec(0.0..0.05f64, n))
        .prop_map(move |(order, jitter)| order.iter().zip(jitter).map(|(&i, j)| 0.25 * i as f64 - 1.0 + j).collect())
}

/// A shape of rank in `ranks` with distinct values.
fn distinct_tensor(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Input> {
    shape(ranks).prop_flat_map(|s| {
        let n: usize = s.iter().product();
        (Just(s), distinct(n))
    })
}

/// Two tensors of one shape with values in `±[0.2, 2]`.
fn pair() -> impl Strategy<Value = (Vec<usize>, Vec<f64>, Vec<f64>)> {
    shape(0..=3).prop_flat_map(|s| {
        let n: usize = s.iter().product();
        (Just(s), vec(away(), n), vec(away(), n))
    })
}

fn un(op: UnaryOp) -> impl Fn(&mut Graph, &[NodeId]) -> NodeId {
    move |g, xs| add(g, Op::Unary(op), xs)
}

fn bin(op: BinaryOp) -> impl Fn(&mut Graph, &[NodeId]) -> NodeId {
    move |g, xs| add(g, Op::Binary(op), xs)
}

/// A single-op builder.
fn op(o: Op) -> impl Fn(&mut Graph, &[NodeId]) -> NodeId {
    move |g, xs| add(g, o.clone(), xs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn unary_ops((s, x) in tensor(0..=3)) {
        let abs: Vec<f64> = x.iter().map(|v| v.abs()).collect();
        for u in [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Relu,
                  UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Expm1, UnaryOp::Erf] {
            check_op(un(u), vec![(s.clone(), x.clone())]);
        }
        // Positive domain only.
        for u in [UnaryOp::Log, UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::Log1p] {
            check_op(un(u), vec![(s.clone(), abs.clone())]);
        }
    }

    #[test]
    fn binary_ops((s, a, b) in pair()) {
        for o in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            check_op(bin(o), vec![(s.clone(), a.clone()), (s.clone(), b.clone())]);
        }
        // pow: a positive base (the exponent gradient is log(base)).
        let base: Vec<f64> = a.iter().map(|v| v.abs()).collect();
        check_op(bin(BinaryOp::Pow), vec![(s.clone(), base), (s.clone(), b.clone())]);
        // maximum/minimum: operands at least 0.05 apart, so no tie.
        let near: Vec<f64> = a.iter().zip(&b).map(|(x, d)| x + 0.25 * d).collect();
        for o in [BinaryOp::Maximum, BinaryOp::Minimum] {
            check_op(bin(o), vec![(s.clone(), a.clone()), (s.clone(), near.clone())]);
        }
        // %: divisors in ±[3.2, 5], so a / b stays in ±[0.04, 0.63], away
        // from the integers where floor(a / b) (and the result) jumps.
        let wide: Vec<f64> = b.iter().map(|v| v + 3.0 * v.signum()).collect();
        check_op(bin(BinaryOp::Mod), vec![(s.clone(), a.clone()), (s.clone(), wide)]);
    }

    #[test]
    fn select_and_cast((s, a, b) in pair(), seed in any::<u64>()) {
        let n: usize = s.iter().product();
        let cond: Vec<bool> = tfc::rng::uniform(seed, n).into_iter().map(|u| u < 0.5).collect();
        let ty = TensorType::new(DType::Bool, s.clone());
        check_op(
            |g, xs| {
                let c = constant(g, Literal::Bool(cond.clone()), ty.clone());
                add(g, Op::Select, &[c, xs[0], xs[1]])
            },
            vec![(s.clone(), a.clone()), (s.clone(), b)],
        );
        // f64 → f64 is the only cast that keeps f64 precision (a no-op).
        check_op(op(Op::Cast(DType::F64)), vec![(s, a)]);
    }

    #[test]
    fn reductions((s, x) in distinct_tensor(1..=3), mask in vec(any::<bool>(), 3), keepdims in any::<bool>()) {
        let axes: Vec<usize> = (0..s.len()).filter(|&i| mask[i]).collect();
        for r in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            check_op(op(Op::Reduce { op: r, axes: axes.clone(), keepdims }), vec![(s.clone(), x.clone())]);
        }
    }

    // Products of up to 16 values in ±[0.2, 2] (larger ones would make the
    // central difference's rounding error exceed the tolerance).
    #[test]
    fn products((s, x) in tensor(1..=2), mask in vec(any::<bool>(), 2), keepdims in any::<bool>()) {
        let axes: Vec<usize> = (0..s.len()).filter(|&i| mask[i]).collect();
        check_op(op(Op::Reduce { op: ReduceOp::Prod, axes, keepdims }), vec![(s, x)]);
    }

    #[test]
    fn cumulative_sums((s, x) in tensor(1..=3), axis in 0usize..3, reverse in any::<bool>()) {
        let axis = axis % s.len();
        check_op(op(Op::CumSum { axis, reverse }), vec![(s, x)]);
    }

    #[test]
    fn reshape_and_transpose((s, x) in tensor(0..=3), perm in Just(vec![0usize, 1, 2]).prop_shuffle()) {
        let n = x.len();
        let mut reversed = s.clone();
        reversed.reverse();
        reversed.insert(0, 1);
        for shape in [vec![n], reversed] {
            check_op(op(Op::Reshape { shape }), vec![(s.clone(), x.clone())]);
        }
        let perm: Vec<usize> = perm.into_iter().filter(|&p| p < s.len()).collect();
        check_op(op(Op::Transpose { perm }), vec![(s, x)]);
    }

    #[test]
    fn broadcast_to(target in shape(1..=3), ones in vec(any::<bool>(), 3), lead in 0usize..=2) {
        // The input: `target` without up to `lead` leading dims, some dims set to 1.
        let lead = lead.min(target.len() - 1);
        let s: Vec<usize> = target[lead..].iter().zip(&ones).map(|(&d, &one)| if one { 1 } else { d }).collect();
        let x = tfc::rng::normal(3, s.iter().product());
        check_op(op(Op::BroadcastTo { shape: target }), vec![(s, x)]);
    }

    #[test]
    fn concat((s, x) in tensor(1..=3), axis in 0usize..3, extra in vec(1usize..=3, 2), seed in any::<u64>()) {
        let axis = axis % s.len();
        let mut inputs = vec![(s.clone(), x)];
        for (k, &len) in extra.iter().enumerate() {
            let mut si = s.clone();
            si[axis] = len;
            let v = tfc::rng::normal(seed.wrapping_add(k as u64), si.iter().product());
            inputs.push((si, v));
        }
        check_op(op(Op::Concat { axis }), inputs);
    }

    #[test]
    fn slice((s, x) in tensor(1..=3), picks in vec((any::<u32>(), -3i64..=3, any::<u32>()), 3)) {
        // Per dim: a start, a nonzero step (negative reverses) and a length
        // that stays inside the dim.
        let (mut start, mut step, mut len) = (vec![], vec![], vec![]);
        for (&n, &(a, st, l)) in s.iter().zip(&picks) {
            let st = if st == 0 { 1 } else { st };
            let first = a as usize % n;
            let room = if st > 0 { (n - 1 - first) / st as usize } else { first / st.unsigned_abs() as usize };
            start.push(first);
            step.push(st);
            // Mostly the longest slices (the ones that exercise steps), sometimes empty.
            len.push((room + 1).saturating_sub(l as usize % 3));
        }
        check_op(op(Op::Slice { start, step, len }), vec![(s, x)]);
    }

    #[test]
    fn pad((s, x) in tensor(1..=3), widths in vec((0usize..=2, 0usize..=2), 3)) {
        let (low, high) = widths[..s.len()].iter().copied().unzip();
        check_op(op(Op::Pad { low, high, value: 0.5 }), vec![(s, x)]);
    }

    #[test]
    fn matmul(batch in shape(0..=2), m in 1usize..=4, k in 1usize..=4, n in 1usize..=4, seed in any::<u64>()) {
        let sa: Vec<usize> = batch.iter().copied().chain([m, k]).collect();
        let sb: Vec<usize> = batch.iter().copied().chain([k, n]).collect();
        let a = tfc::rng::normal(seed, sa.iter().product());
        let b = tfc::rng::normal(seed ^ 1, sb.iter().product());
        check_op(op(Op::MatMul), vec![(sa, a), (sb, b)]);
    }

    #[test]
    fn gather(params in tensor(2..=3), axis in 0usize..=1, is in shape(0..=2), picks in vec(any::<u32>(), 16)) {
        // Indices (with repeats) are a constant operand; only params is differentiated.
        let (ps, p) = params;
        let dim = ps[axis];
        let n: usize = is.iter().product();
        let idx: Vec<i64> = picks[..n].iter().map(|&v| i64::from(v) % dim as i64).collect();
        let ity = TensorType::new(DType::I32, is);
        check_op(
            |g, xs| {
                let i = constant(g, Literal::Int(idx.clone()), ity.clone());
                add(g, Op::Gather { axis }, &[xs[0], i])
            },
            vec![(ps, p)],
        );
    }
}

/// Conv2d geometries: (x shape, w shape, stride, padding, dilation, groups).
type ConvCase = ([usize; 4], [usize; 4], usize, [usize; 4], usize, usize);
const CONV_CASES: [ConvCase; 6] = [
    // stride 1, VALID
    ([2, 4, 4, 2], [3, 3, 2, 2], 1, [0; 4], 1, 1),
    // stride 1, SAME for a 3x3 kernel
    ([1, 4, 3, 2], [3, 3, 2, 3], 1, [1, 1, 1, 1], 1, 1),
    // stride 2, SAME for a 3x3 kernel on 5x5 (total padding 2)
    ([1, 5, 5, 1], [3, 3, 1, 2], 2, [1, 1, 1, 1], 1, 1),
    // stride 2, SAME for a 2x2 kernel on 4x5 (TensorFlow pads bottom/right)
    ([1, 4, 5, 2], [2, 2, 2, 1], 2, [0, 0, 0, 1], 1, 1),
    // dilation 2
    ([1, 5, 5, 1], [2, 2, 1, 2], 1, [1, 0, 0, 1], 2, 1),
    // groups 2: four input channels, two per group
    ([1, 3, 4, 4], [2, 2, 2, 4], 1, [0, 1, 1, 0], 1, 2),
];

/// Pool2d geometries: (x shape, size, stride, padding).
type PoolCase = ([usize; 4], usize, usize, [usize; 4]);
const POOL_CASES: [PoolCase; 4] = [
    ([1, 4, 4, 2], 2, 2, [0; 4]),
    ([2, 3, 4, 1], 2, 1, [0; 4]),
    ([1, 5, 5, 1], 3, 2, [1, 1, 1, 1]),
    ([1, 3, 4, 2], 2, 2, [0, 1, 1, 1]),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn conv2d(seed in any::<u64>()) {
        for (k, (xs, ws, stride, padding, dilation, groups)) in CONV_CASES.into_iter().enumerate() {
            let seed = seed.wrapping_add(2 * k as u64);
            let x = tfc::rng::normal(seed, xs.iter().product());
            let w = tfc::rng::normal(seed + 1, ws.iter().product());
            let conv = Op::Conv2d { stride: [stride; 2], padding, dilation: [dilation; 2], groups };
            check_op(op(conv), vec![(xs.to_vec(), x), (ws.to_vec(), w)]);
        }
    }

    #[test]
    fn pool2d(x in distinct(50)) {
        // Distinct values: no window has a tied maximum.
        for (xs, size, stride, padding) in POOL_CASES {
            let x = x[..xs.iter().product()].to_vec();
            for kind in [PoolKind::Max, PoolKind::Avg] {
                let pool = Op::Pool2d { kind, size: [size; 2], stride: [stride; 2], padding };
                check_op(op(pool), vec![(xs.to_vec(), x.clone())]);
            }
        }
    }
}

#[test]
fn a_node_used_twice_accumulates_both_uses() {
    // y = x·x + sin(x): x reaches the output along three edges.
    let x = tfc::rng::normal(11, 6);
    check_op(
        |g, xs| {
            let sq = add(g, Op::Binary(BinaryOp::Mul), &[xs[0], xs[0]]);
            let s = add(g, Op::Unary(UnaryOp::Sin), &[xs[0]]);
            add(g, Op::Binary(BinaryOp::Add), &[sq, s])
        },
        vec![(vec![2, 3], x)],
    );
}

#[test]
fn unrelated_and_integer_inputs_get_no_gradient() {
    let mut g = Graph::new();
    let x = f64_const(&mut g, &[2], &[1.0, 2.0]);
    let unused = f64_const(&mut g, &[2], &[3.0, 4.0]);
    // An integer input converted to f64 still carries no gradient.
    let i = constant(&mut g, Literal::Int(vec![5, 6]), TensorType::new(DType::I32, vec![2]));
    let fi = add(&mut g, Op::Cast(DType::F64), &[i]);
    let prod = add(&mut g, Op::Binary(BinaryOp::Mul), &[x, fi]);
    let y = weighted_sum(&mut g, prod);
    let grads = gradients(&mut g, y, None, &[x, unused, i]).unwrap();
    assert!(grads[0].is_some(), "x feeds y");
    assert_eq!(grads[1], None, "y does not depend on `unused`");
    assert_eq!(grads[2], None, "integer values carry no gradient");
}

#[test]
fn slice_with_negative_and_strided_steps() {
    // A fixed case besides the random ones: m[3::-2, 4::-3] and m[0::3, 1::2] of a 4x5 matrix.
    let m = tfc::rng::normal(5, 20);
    for (start, step, len) in [([3, 4], [-2, -3], [2, 2]), ([0, 1], [3, 2], [2, 2])] {
        let slice = Op::Slice { start: start.to_vec(), step: step.to_vec(), len: len.to_vec() };
        check_op(op(slice), vec![(vec![4, 5], m.clone())]);
    }
}

// ---- scan ----

/// A scan body built by `step` on slots of `inputs` (carries, one slice of
/// each scanned operand, captured values), returning its outputs.
fn scan_body(
    inputs: &[TensorType],
    carries: usize,
    xs: usize,
    length: usize,
    reverse: bool,
    step: impl Fn(&mut Graph, &[NodeId]) -> Vec<NodeId>,
) -> tfc::ir::scan::ScanBody {
    let mut g = Graph::new();
    let slots: Vec<NodeId> = inputs
        .iter()
        .enumerate()
        .map(|(slot, ty)| g.add(Op::Slot { slot, ty: ty.clone() }, &[], ty.clone(), Span::default()))
        .collect();
    g.outputs = step(&mut g, &slots);
    tfc::ir::scan::ScanBody { graph: g, inputs: inputs.to_vec(), carries, xs, length, reverse, saves_carries: false }
}

fn f64_ty(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F64, shape.to_vec())
}

/// Values of `shape` from a normal draw scaled by `scale` (tanh and the
/// sigmoid stay out of saturation).
fn scaled(seed: u64, shape: &[usize], scale: f64) -> Input {
    let n = shape.iter().product();
    (shape.to_vec(), tfc::rng::normal(seed, n).into_iter().map(|v| v * scale).collect())
}

/// `tanh(x @ w + h @ u)`, the step of a tanh RNN.
fn rnn_cell(g: &mut Graph, h: NodeId, x: NodeId, w: NodeId, u: NodeId) -> NodeId {
    let xw = add(g, Op::MatMul, &[x, w]);
    let hu = add(g, Op::MatMul, &[h, u]);
    let z = add(g, Op::Binary(BinaryOp::Add), &[xw, hu]);
    add(g, Op::Unary(UnaryOp::Tanh), &[z])
}

#[test]
fn scan_of_a_tanh_rnn_cell_forward_and_reverse() {
    // h: [B=2, H=3], xs: [T=4, 2, 2], w: [2, 3], u: [3, 3]; the packed value
    // (final h, then every step's h) is what y weighs.
    let (b, h, i, t) = (2, 3, 2, 4);
    for reverse in [false, true] {
        let types = [f64_ty(&[b, h]), f64_ty(&[b, i]), f64_ty(&[i, h]), f64_ty(&[h, h])];
        let body = scan_body(&types, 1, 1, t, reverse, |g, s| {
            let next = rnn_cell(g, s[0], s[1], s[2], s[3]);
            vec![next, next]
        });
        check_op(
            move |g, xs| add(g, Op::Scan(std::sync::Arc::new(body.clone())), xs),
            vec![scaled(1, &[b, h], 0.5), scaled(2, &[t, b, i], 1.0), scaled(3, &[i, h], 0.6), scaled(4, &[h, h], 0.6)],
        );
    }
}

#[test]
fn scan_of_an_lstm_like_cell_with_a_tuple_carry() {
    // Carry (h, c); gates i, f, g from x and h; c' = f * c + i * g,
    // h' = i * tanh(c'); y = h'. Operands: h0, c0, xs, then the six weights.
    let (b, h, n, t) = (2, 2, 3, 3);
    let mut types = vec![f64_ty(&[b, h]), f64_ty(&[b, h]), f64_ty(&[b, n])];
    for _ in 0..3 {
        types.extend([f64_ty(&[n, h]), f64_ty(&[h, h])]);
    }
    let body = scan_body(&types, 2, 1, t, false, |g, s| {
        let (hp, cp, x) = (s[0], s[1], s[2]);
        let pre = |g: &mut Graph, k: usize| {
            let xw = add(g, Op::MatMul, &[x, s[3 + 2 * k]]);
            let hu = add(g, Op::MatMul, &[hp, s[4 + 2 * k]]);
            add(g, Op::Binary(BinaryOp::Add), &[xw, hu])
        };
        let (zi, zf, zg) = (pre(g, 0), pre(g, 1), pre(g, 2));
        let ig = add(g, Op::Unary(UnaryOp::Sigmoid), &[zi]);
        let fg = add(g, Op::Unary(UnaryOp::Sigmoid), &[zf]);
        let gg = add(g, Op::Unary(UnaryOp::Tanh), &[zg]);
        let fc = add(g, Op::Binary(BinaryOp::Mul), &[fg, cp]);
        let ic = add(g, Op::Binary(BinaryOp::Mul), &[ig, gg]);
        let c = add(g, Op::Binary(BinaryOp::Add), &[fc, ic]);
        let tc = add(g, Op::Unary(UnaryOp::Tanh), &[c]);
        let hn = add(g, Op::Binary(BinaryOp::Mul), &[ig, tc]);
        vec![hn, c, hn]
    });
    let mut inputs = vec![scaled(5, &[b, h], 0.5), scaled(6, &[b, h], 0.5), scaled(7, &[t, b, n], 1.0)];
    for k in 0..6 {
        let shape = if k % 2 == 0 { vec![n, h] } else { vec![h, h] };
        inputs.push(scaled(8 + k as u64, &shape, 0.6));
    }
    check_op(move |g, xs| add(g, Op::Scan(std::sync::Arc::new(body.clone())), xs), inputs);
}

#[test]
fn a_scan_that_saves_its_carries_is_differentiated_through_them() {
    // A running product c' = c * x (y = c'), as the forward scan of a
    // gradient saves it: y also weighs the saved carries, whose adjoint
    // must reach init and xs (what a gradient of a gradient needs).
    let body = scan_body(&[f64_ty(&[2]), f64_ty(&[2])], 1, 1, 3, false, |g, s| {
        let c = add(g, Op::Binary(BinaryOp::Mul), &[s[0], s[1]]);
        vec![c, c]
    });
    check_op(
        move |g, xs| {
            let saving = body.saving();
            add(g, Op::Scan(std::sync::Arc::new(saving)), xs)
        },
        vec![scaled(20, &[2], 1.0), scaled(21, &[3, 2], 1.0)],
    );
}
