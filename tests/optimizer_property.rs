//! Property test of the graph optimizer: random well-typed programs (from
//! a small generator of elementwise, broadcast, reduction, reshape,
//! transpose, matmul and constant nodes, with repeated subexpressions so CSE
//! and folding have work) print exactly the same values optimized and
//! unoptimized. The tolerance is zero: every rewrite must be exact.

use proptest::prelude::*;
use tfc::ir::infer::infer;
use tfc::ir::{BinaryOp, DType, Effect, Graph, Literal, NodeId, Op, PrintItem, Program, ReduceOp, TensorType, UnaryOp};

/// One generator step: which op to add and which earlier nodes it reads.
#[derive(Clone, Debug)]
enum Step {
    Unary(u8, usize),
    Binary(u8, usize, usize),
    Reduce(usize, bool),
    Transpose(usize),
    Reshape(usize),
    MatMul(usize, usize),
    Constant(Vec<i8>),
    Repeat(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..6, any::<usize>()).prop_map(|(o, a)| Step::Unary(o, a)),
        (0u8..6, any::<usize>(), any::<usize>()).prop_map(|(o, a, b)| Step::Binary(o, a, b)),
        (any::<usize>(), any::<bool>()).prop_map(|(a, k)| Step::Reduce(a, k)),
        any::<usize>().prop_map(Step::Transpose),
        any::<usize>().prop_map(Step::Reshape),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Step::MatMul(a, b)),
        proptest::collection::vec(-4i8..5, 6).prop_map(Step::Constant),
        any::<usize>().prop_map(Step::Repeat),
    ]
}

fn add(g: &mut Graph, op: Op, inputs: &[NodeId]) -> Option<NodeId> {
    let types: Vec<TensorType> = inputs.iter().map(|&i| g.node(i).ty.clone()).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty = infer(&op, &refs).ok()?;
    Some(g.add(op, inputs, ty, Default::default()))
}

fn constant(g: &mut Graph, values: &[i8], shape: Vec<usize>) -> NodeId {
    let n: usize = shape.iter().product();
    let vals = (0..n).map(|i| f64::from(values[i % values.len()]) * 0.5).collect();
    let ty = TensorType::new(DType::F32, shape);
    g.add(Op::Constant { value: Literal::Float(vals), ty: ty.clone() }, &[], ty, Default::default())
}

/// Builds a program from the steps; every value of shape [2, 3] or [3, 2]
/// or a scalar, so most combinations type-check; ill-typed steps are skipped.
fn build(steps: &[Step]) -> Program {
    let mut g = Graph::new();
    let mut nodes = vec![constant(&mut g, &[1, -2, 3], vec![2, 3]), constant(&mut g, &[2, 1], vec![3])];
    for s in steps {
        let pick = |i: usize| nodes[i % nodes.len()];
        let made = match s {
            Step::Unary(o, a) => {
                let op = [UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Relu, UnaryOp::Abs, UnaryOp::Sigmoid]
                    [*o as usize % 6];
                add(&mut g, Op::Unary(op), &[pick(*a)])
            }
            Step::Binary(o, a, b) => {
                let op =
                    [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Div]
                        [*o as usize % 6];
                let (x, y) = (pick(*a), pick(*b));
                let shape = g.node(x).ty.shape.clone();
                let y =
                    if g.node(y).ty.shape != shape { add(&mut g, Op::BroadcastTo { shape }, &[y]) } else { Some(y) };
                y.and_then(|y| add(&mut g, Op::Binary(op), &[x, y]))
            }
            Step::Reduce(a, keep) => {
                let x = pick(*a);
                let rank = g.node(x).ty.rank();
                (rank > 0)
                    .then(|| add(&mut g, Op::Reduce { op: ReduceOp::Sum, axes: vec![rank - 1], keepdims: *keep }, &[x]))
                    .flatten()
            }
            Step::Transpose(a) => {
                let x = pick(*a);
                let rank = g.node(x).ty.rank();
                add(&mut g, Op::Transpose { perm: (0..rank).rev().collect() }, &[x])
            }
            Step::Reshape(a) => {
                let x = pick(*a);
                let n = g.node(x).ty.numel();
                add(&mut g, Op::Reshape { shape: vec![n] }, &[x])
            }
            Step::MatMul(a, b) => add(&mut g, Op::MatMul, &[pick(*a), pick(*b)]),
            Step::Constant(v) => Some(constant(&mut g, v, vec![2, 3])),
            // The same op on the same operand again: work for CSE.
            Step::Repeat(a) => {
                let x = pick(*a);
                let op = g.node(x).op.clone();
                let inputs = g.inputs(x);
                if matches!(op, Op::Constant { .. }) {
                    None
                } else {
                    add(&mut g, op, &inputs)
                }
            }
        };
        if let Some(n) = made {
            nodes.push(n);
        }
    }
    let shown: Vec<NodeId> = nodes.iter().rev().take(3).copied().collect();
    let effects = shown
        .into_iter()
        .map(|n| Effect::Print { item: PrintItem::Tensor(n), full: true, span: Default::default() })
        .collect();
    Program { graph: g, effects, compiled: None }
}

fn output(p: &Program) -> String {
    let mut out = Vec::new();
    match tfc::runtime::exec::execute(p, &mut out, Default::default()) {
        Ok(()) => String::from_utf8_lossy(&out).into_owned(),
        Err(d) => format!("error: {}", d.message),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn optimized_programs_print_exactly_what_unoptimized_ones_print(steps in proptest::collection::vec(step(), 1..24)) {
        let program = build(&steps);
        let expected = output(&program);
        let mut optimized = program.clone();
        let opts = tfc::passes::Options { verify: true, ..Default::default() };
        tfc::passes::optimize(&mut optimized, &opts, &mut |_, _| {}).map_err(|d| TestCaseError::fail(d.message))?;
        prop_assert_eq!(expected, output(&optimized));
    }
}
