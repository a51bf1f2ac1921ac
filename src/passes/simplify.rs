//! Algebraic simplification: a table of named rewrite rules ([`RULES`]),
//! applied to every node until none matches.
//!
//! Contract: no rule matches any node. Every rule is exact — the rewritten
//! graph computes bit-identical values under the interpreter's semantics,
//! for every input including NaN, ±inf and -0.0 — and no rule grows the
//! graph: a rule either forwards a node's readers to an existing node, or
//! replaces a node by one new node (a shorter chain of shape ops, or `mul`
//! for `pow`).
//!
//! Nodes a rewrite leaves unread (the inner `neg` of `neg(neg(x))`) are
//! removed with it; other dead code is left for `dce`.
//!
//! Rules considered and deliberately not applied (they are not exact, or
//! not expressible):
//! - `x + 0.0 → x` for floats: `-0.0 + 0.0` is `+0.0`, so it would turn a
//!   `-0.0` into a `+0.0` (printing `-0` vs `0`). Only `x + -0.0` and
//!   `x - 0.0` are identities, and those are rules; integer `x + 0` is too.
//! - `x ^ 2.0 → x * x` for floats: libm's `pow` is not correctly rounded, so
//!   it differs from the correctly rounded product in the last bit for some
//!   inputs (with glibc: about 1.5 million of the 2^32 f32 values, e.g.
//!   7.940934e-23, and about one random f64 bit pattern in 2300); only the
//!   integer rule applies.
//! - `exp(log(x)) → x`, `log(exp(x)) → x`: each rounds, so the round trip
//!   differs from `x` (and `log` of a negative is NaN).
//! - `x * 0 → 0`, `x - x → 0`: wrong for NaN and ±inf (and `-0.0`).
//! - `cast(cast(x))` to one cast: a narrowing inner cast changes the value.
//! - `matmul(transpose(a), b)`: `MatMul` has no transpose flags, so a
//!   transpose cannot be absorbed into it.
//! - Splats (`broadcast_to` of a scalar constant) stay as they are: they are
//!   cheap, and backends read them as scalars.
//!
//! Example: `neg(neg(transpose(transpose(x)))) * 1.0` becomes `x`.

use crate::diag::Diagnostic;
use crate::ir::{BinaryOp, DType, Literal, NodeId, Op, Program, UnaryOp};
use crate::passes::const_fold::remove_unused;
use crate::passes::PassCtx;
use crate::tensor::Tensor;

/// What a rule does to the node it matched.
pub enum Rewrite {
    /// Every reader of the node reads this existing node instead.
    Forward(NodeId),
    /// The node is replaced by `op` over `operands` (same type).
    Replace(Op, Vec<NodeId>),
}

/// A named rewrite rule: `apply` returns the rewrite when the rule matches.
pub struct Rule {
    pub name: &'static str,
    /// The rewrite in one line.
    pub doc: &'static str,
    pub apply: fn(&Program, NodeId) -> Option<Rewrite>,
}

/// Every rule, tried in this order on each node.
pub const RULES: &[Rule] = &[
    Rule { name: "mul_by_one", doc: "x * 1 → x and 1 * x → x (exact for every value)", apply: mul_by_one },
    Rule { name: "div_by_one", doc: "x / 1 → x (exact; integer floor division too)", apply: div_by_one },
    Rule {
        name: "add_zero",
        doc: "x + 0 → x for integers; for floats only x + (-0.0) → x (x + 0.0 turns -0.0 into 0.0)",
        apply: add_zero,
    },
    Rule { name: "sub_zero", doc: "x - 0 → x (for floats x - 0.0, exact even for -0.0)", apply: sub_zero },
    Rule {
        name: "int_square",
        doc: "x ^ 2 → x * x for integers (wrapping, like the interpreter's pow)",
        apply: int_square,
    },
    Rule { name: "double_neg", doc: "neg(neg(x)) → x", apply: double_neg },
    Rule { name: "double_not", doc: "not(not(x)) → x", apply: double_not },
    Rule { name: "idempotent_unary", doc: "f(f(x)) → f(x) for abs, relu, floor and sign", apply: idempotent_unary },
    Rule { name: "same_dtype_cast", doc: "cast of x to its own dtype → x", apply: same_dtype_cast },
    Rule { name: "same_shape_reshape", doc: "reshape of x to its own shape → x", apply: same_shape_reshape },
    Rule { name: "reshape_of_reshape", doc: "reshape(reshape(x)) → one reshape of x", apply: reshape_of_reshape },
    Rule { name: "identity_transpose", doc: "transpose with perm [0, 1, …] → x", apply: identity_transpose },
    Rule {
        name: "transpose_of_transpose",
        doc: "transpose(transpose(x, p), q) → transpose(x, p∘q), or x when that is the identity",
        apply: transpose_of_transpose,
    },
    Rule { name: "same_shape_broadcast", doc: "broadcast_to of x to its own shape → x", apply: same_shape_broadcast },
    Rule {
        name: "broadcast_of_broadcast",
        doc: "broadcast_to(broadcast_to(x)) → one broadcast_to of x",
        apply: broadcast_of_broadcast,
    },
    Rule { name: "full_slice", doc: "a slice that takes every element in order → x", apply: full_slice },
    Rule { name: "zero_pad", doc: "a pad of zero width on every side → x", apply: zero_pad },
    Rule { name: "single_concat", doc: "concat of one operand → that operand", apply: single_concat },
    Rule {
        name: "select_constant_condition",
        doc: "select(c, a, b) with c all true → a, all false → b",
        apply: select_constant_condition,
    },
    Rule { name: "select_same_branches", doc: "select(c, a, a) → a", apply: select_same_branches },
];

/// The single value of a constant whose elements are all equal, or of a
/// `broadcast_to` of one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Splat {
    Float(f64),
    Int(i64),
    Bool(bool),
}

pub(super) fn splat(p: &Program, id: NodeId) -> Option<Splat> {
    match &p.graph.node(id).op {
        Op::Constant { value, ty } => match Tensor::from_literal(value, ty).ok()?.to_literal() {
            Literal::Float(v) => {
                let first = *v.first()?;
                v.iter().all(|x| x.to_bits() == first.to_bits()).then_some(Splat::Float(first))
            }
            Literal::Int(v) => {
                let first = *v.first()?;
                v.iter().all(|&x| x == first).then_some(Splat::Int(first))
            }
            Literal::Bool(v) => {
                let first = *v.first()?;
                v.iter().all(|&x| x == first).then_some(Splat::Bool(first))
            }
        },
        Op::BroadcastTo { .. } => splat(p, *p.graph.inputs(id).first()?),
        _ => None,
    }
}

fn is_one(s: Option<Splat>) -> bool {
    matches!(s, Some(Splat::Float(v)) if v == 1.0) || s == Some(Splat::Int(1))
}

/// Zero as a right identity of `+` in `dtype`: integer 0, or float -0.0.
fn is_additive_identity(s: Option<Splat>) -> bool {
    matches!(s, Some(Splat::Float(v)) if v == 0.0 && v.is_sign_negative()) || s == Some(Splat::Int(0))
}

/// Zero as a right identity of `-`: integer 0, or float +0.0.
fn is_subtractive_identity(s: Option<Splat>) -> bool {
    matches!(s, Some(Splat::Float(v)) if v == 0.0 && v.is_sign_positive()) || s == Some(Splat::Int(0))
}

/// The operands of `id` if it is `op`.
fn operands_of(p: &Program, id: NodeId, op: &Op) -> Option<Vec<NodeId>> {
    (&p.graph.node(id).op == op).then(|| p.graph.inputs(id))
}

/// `(a, b)` if `id` is the binary op `op`.
fn binary(p: &Program, id: NodeId, op: BinaryOp) -> Option<(NodeId, NodeId)> {
    match operands_of(p, id, &Op::Binary(op))?.as_slice() {
        [a, b] => Some((*a, *b)),
        _ => None,
    }
}

/// The single operand of `id`.
fn operand(p: &Program, id: NodeId) -> Option<NodeId> {
    match p.graph.inputs(id).as_slice() {
        [x] => Some(*x),
        _ => None,
    }
}

/// `x op e` or `e op x` → `x`, for a commutative `op` whose identity `e` is.
fn identity_on_either_side(
    p: &Program,
    id: NodeId,
    op: BinaryOp,
    is_identity: fn(Option<Splat>) -> bool,
) -> Option<Rewrite> {
    let (a, b) = binary(p, id, op)?;
    if is_identity(splat(p, b)) {
        Some(Rewrite::Forward(a))
    } else if is_identity(splat(p, a)) {
        Some(Rewrite::Forward(b))
    } else {
        None
    }
}

fn mul_by_one(p: &Program, id: NodeId) -> Option<Rewrite> {
    identity_on_either_side(p, id, BinaryOp::Mul, is_one)
}

fn div_by_one(p: &Program, id: NodeId) -> Option<Rewrite> {
    let (a, b) = binary(p, id, BinaryOp::Div)?;
    is_one(splat(p, b)).then_some(Rewrite::Forward(a))
}

fn add_zero(p: &Program, id: NodeId) -> Option<Rewrite> {
    identity_on_either_side(p, id, BinaryOp::Add, is_additive_identity)
}

fn sub_zero(p: &Program, id: NodeId) -> Option<Rewrite> {
    let (a, b) = binary(p, id, BinaryOp::Sub)?;
    is_subtractive_identity(splat(p, b)).then_some(Rewrite::Forward(a))
}

fn int_square(p: &Program, id: NodeId) -> Option<Rewrite> {
    let (a, b) = binary(p, id, BinaryOp::Pow)?;
    let int = matches!(p.graph.node(id).ty.dtype, DType::I32 | DType::I64);
    (int && splat(p, b) == Some(Splat::Int(2))).then(|| Rewrite::Replace(Op::Binary(BinaryOp::Mul), vec![a, a]))
}

/// `x` if `id` is `u(u(x))`.
fn twice(p: &Program, id: NodeId, u: UnaryOp) -> Option<NodeId> {
    let inner = operand(p, id).filter(|_| p.graph.node(id).op == Op::Unary(u))?;
    operand(p, inner).filter(|_| p.graph.node(inner).op == Op::Unary(u))
}

fn double_neg(p: &Program, id: NodeId) -> Option<Rewrite> {
    twice(p, id, UnaryOp::Neg).map(Rewrite::Forward)
}

fn double_not(p: &Program, id: NodeId) -> Option<Rewrite> {
    twice(p, id, UnaryOp::Not).map(Rewrite::Forward)
}

fn idempotent_unary(p: &Program, id: NodeId) -> Option<Rewrite> {
    let Op::Unary(u @ (UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Floor | UnaryOp::Sign)) = p.graph.node(id).op else {
        return None;
    };
    twice(p, id, u)?;
    // The inner application already computes the value.
    operand(p, id).map(Rewrite::Forward)
}

fn same_dtype_cast(p: &Program, id: NodeId) -> Option<Rewrite> {
    let Op::Cast(to) = p.graph.node(id).op else { return None };
    let x = operand(p, id)?;
    (p.graph.node(x).ty.dtype == to).then_some(Rewrite::Forward(x))
}

/// `x` if `id` is `op(x)` of `x`'s own type (a reshape, transpose or broadcast
/// that changes nothing).
fn same_type(p: &Program, id: NodeId) -> Option<NodeId> {
    let x = operand(p, id)?;
    (p.graph.node(x).ty == p.graph.node(id).ty).then_some(x)
}

fn same_shape_reshape(p: &Program, id: NodeId) -> Option<Rewrite> {
    matches!(p.graph.node(id).op, Op::Reshape { .. }).then(|| same_type(p, id)).flatten().map(Rewrite::Forward)
}

fn reshape_of_reshape(p: &Program, id: NodeId) -> Option<Rewrite> {
    let Op::Reshape { shape } = &p.graph.node(id).op else { return None };
    let inner = operand(p, id)?;
    matches!(p.graph.node(inner).op, Op::Reshape { .. }).then_some(())?;
    let x = operand(p, inner)?;
    if p.graph.node(x).ty.shape == *shape {
        Some(Rewrite::Forward(x))
    } else {
        Some(Rewrite::Replace(Op::Reshape { shape: shape.clone() }, vec![x]))
    }
}

fn is_identity(perm: &[usize]) -> bool {
    perm.iter().enumerate().all(|(i, &d)| i == d)
}

fn identity_transpose(p: &Program, id: NodeId) -> Option<Rewrite> {
    let Op::Transpose { perm } = &p.graph.node(id).op else { return None };
    is_identity(perm).then(|| operand(p, id)).flatten().map(Rewrite::Forward)
}

fn transpose_of_transpose(p: &Program, id: NodeId) -> Option<Rewrite> {
    let Op::Transpose { perm: outer } = &p.graph.node(id).op else { return None };
    let inner = operand(p, id)?;
    let Op::Transpose { perm: first } = &p.graph.node(inner).op else { return None };
    let x = operand(p, inner)?;
    // Output dim i is the inner result's dim outer[i], which is x's dim first[outer[i]].
    let perm: Vec<usize> = outer.iter().map(|&d| first[d]).collect();
    if is_identity(&perm) {
        Some(Rewrite::Forward(x))
    } else {
        Some(Rewrite::Replace(Op::Transpose { perm }, vec![x]))
    }
}

fn same_shape_broadcast(p: &Program, id: NodeId) -> Option<Rewrite> {
    matches!(p.graph.node(id).op, Op::BroadcastTo { .. }).then(|| same_type(p, id)).flatten().map(Rewrite::Forward)
}

fn broadcast_of_broadcast(p: &Program, id: NodeId) -> Option<Rewrite> {
    let Op::BroadcastTo { shape } = &p.graph.node(id).op else { return None };
    let inner = operand(p, id)?;
    matches!(p.graph.node(inner).op, Op::BroadcastTo { .. }).then_some(())?;
    // NumPy broadcasting composes: every dim of x is 1 or equal to the
    // matching dim of the middle shape, which is 1 or equal to `shape`'s.
    Some(Rewrite::Replace(Op::BroadcastTo { shape: shape.clone() }, vec![operand(p, inner)?]))
}

fn full_slice(p: &Program, id: NodeId) -> Option<Rewrite> {
    let Op::Slice { start, step, len } = &p.graph.node(id).op else { return None };
    let x = operand(p, id)?;
    let full = start.iter().all(|&s| s == 0) && step.iter().all(|&s| s == 1) && *len == p.graph.node(x).ty.shape;
    full.then_some(Rewrite::Forward(x))
}

fn zero_pad(p: &Program, id: NodeId) -> Option<Rewrite> {
    let Op::Pad { low, high, .. } = &p.graph.node(id).op else { return None };
    let none = low.iter().chain(high).all(|&n| n == 0);
    none.then(|| operand(p, id)).flatten().map(Rewrite::Forward)
}

fn single_concat(p: &Program, id: NodeId) -> Option<Rewrite> {
    matches!(p.graph.node(id).op, Op::Concat { .. }).then(|| operand(p, id)).flatten().map(Rewrite::Forward)
}

fn select_constant_condition(p: &Program, id: NodeId) -> Option<Rewrite> {
    match operands_of(p, id, &Op::Select)?.as_slice() {
        [c, a, b] => match splat(p, *c)? {
            Splat::Bool(true) => Some(Rewrite::Forward(*a)),
            Splat::Bool(false) => Some(Rewrite::Forward(*b)),
            _ => None,
        },
        _ => None,
    }
}

fn select_same_branches(p: &Program, id: NodeId) -> Option<Rewrite> {
    match operands_of(p, id, &Op::Select)?.as_slice() {
        [_, a, b] if a == b => Some(Rewrite::Forward(*a)),
        _ => None,
    }
}

/// The first rule that matches `id`, with its rewrite.
fn first_match(p: &Program, id: NodeId) -> Option<(&'static Rule, Rewrite)> {
    RULES.iter().find_map(|r| (r.apply)(p, id).map(|rw| (r, rw)))
}

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    // Every rewrite removes a node or shortens an operand chain, so this
    // reaches a fixed point.
    let mut changed = true;
    while changed {
        changed = false;
        for id in p.graph.topo_order() {
            if !p.graph.contains(id) {
                continue;
            }
            let Some((_, rewrite)) = first_match(p, id) else { continue };
            let new = match rewrite {
                Rewrite::Forward(x) => x,
                Rewrite::Replace(op, operands) => {
                    let (ty, span) = (p.graph.node(id).ty.clone(), p.graph.node(id).span);
                    p.graph.add(op, &operands, ty, span)
                }
            };
            let operands = p.graph.inputs(id);
            p.replace_uses(id, new);
            p.graph.remove(id);
            remove_unused(p, operands);
            changed = true;
        }
    }
    Ok(())
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    for id in p.graph.node_ids() {
        if let Some((rule, _)) = first_match(p, id) {
            return Err(format!(
                "rule `{}` still matches node {} (`{}`)",
                rule.name,
                id.index(),
                p.graph.node(id).op.name()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Span;
    use crate::ir::infer::infer;
    use crate::ir::{Graph, TensorType};
    use crate::tensor::evaluate;

    fn node(g: &mut Graph, op: Op, inputs: &[NodeId]) -> NodeId {
        let types: Vec<TensorType> = inputs.iter().map(|&i| g.node(i).ty.clone()).collect();
        let refs: Vec<&TensorType> = types.iter().collect();
        let ty = infer(&op, &refs).unwrap_or_else(|e| panic!("ill-typed test graph: {}", e.message));
        g.add(op, inputs, ty, Span::default())
    }

    fn constant(g: &mut Graph, value: Literal, ty: TensorType) -> NodeId {
        g.add(Op::Constant { value, ty: ty.clone() }, &[], ty, Span::default())
    }

    /// `value` (a one-element literal) broadcast to the shape of `like`.
    fn splat_like(g: &mut Graph, like: NodeId, value: Literal) -> NodeId {
        let ty = g.node(like).ty.clone();
        let c = constant(g, value, TensorType::scalar(ty.dtype));
        node(g, Op::BroadcastTo { shape: ty.shape }, &[c])
    }

    fn bits(p: &Program, id: NodeId) -> Vec<u64> {
        let values = evaluate(&p.graph).expect("the test graph evaluates");
        match values[&id].to_literal() {
            Literal::Float(v) => v.iter().map(|x| x.to_bits()).collect(),
            Literal::Int(v) => v.iter().map(|&x| x as u64).collect(),
            Literal::Bool(v) => v.iter().map(|&x| u64::from(x)).collect(),
        }
    }

    /// NaN, ±inf, ±0 and ordinary values, as the input `x`.
    fn specials(g: &mut Graph, dtype: DType) -> NodeId {
        let value = if dtype.is_float() {
            Literal::Float(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 1.5, -2.25, 1e-40])
        } else {
            Literal::Int(vec![i64::from(i32::MIN), i64::from(i32::MAX), -1, 0, 1, 7, -7, 46341])
        };
        constant(g, value, TensorType::new(dtype, vec![2, 4]))
    }

    /// Simplifies `build(x)` for special values of `x`; checks that the value
    /// stays bit-identical, the graph does not grow, the postcondition holds,
    /// and that some rule fired exactly when `fires`.
    fn check(dtype: DType, fires: bool, build: impl Fn(&mut Graph, NodeId) -> NodeId) {
        let mut p = Program::default();
        let x = specials(&mut p.graph, dtype);
        let root = build(&mut p.graph, x);
        p.graph.outputs = vec![root];
        let before = bits(&p, root);
        let (count, text) = (p.graph.node_count(), crate::ir::print_program(&p));
        run(&mut p, &PassCtx::default()).unwrap();
        let root = p.graph.outputs[0];
        assert_eq!(bits(&p, root), before, "value changed:\n{text}");
        assert!(p.graph.node_count() <= count, "the graph grew:\n{text}");
        assert_eq!(postcondition(&p), Ok(()));
        crate::ir::verify_program(&p).unwrap();
        assert_eq!(crate::ir::print_program(&p) != text, fires, "fired or not as expected:\n{text}");
    }

    /// `x op c` for a splat `c` of `value`.
    fn rhs(g: &mut Graph, op: BinaryOp, x: NodeId, value: Literal) -> NodeId {
        let c = splat_like(g, x, value);
        node(g, Op::Binary(op), &[x, c])
    }

    /// `c op x` for a splat `c` of `value`.
    fn lhs(g: &mut Graph, op: BinaryOp, value: Literal, x: NodeId) -> NodeId {
        let c = splat_like(g, x, value);
        node(g, Op::Binary(op), &[c, x])
    }

    #[test]
    fn arithmetic_identities_are_bit_exact_for_special_values() {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let one = || Literal::Float(vec![1.0]);
            check(dtype, true, |g, x| rhs(g, BinaryOp::Mul, x, one()));
            check(dtype, true, |g, x| lhs(g, BinaryOp::Mul, one(), x));
            check(dtype, true, |g, x| rhs(g, BinaryOp::Div, x, one()));
            check(dtype, true, |g, x| rhs(g, BinaryOp::Add, x, Literal::Float(vec![-0.0])));
            check(dtype, true, |g, x| rhs(g, BinaryOp::Sub, x, Literal::Float(vec![0.0])));
            // Not rewritten: +0.0 turns -0.0 into +0.0; pow is not x * x.
            check(dtype, false, |g, x| rhs(g, BinaryOp::Add, x, Literal::Float(vec![0.0])));
            check(dtype, false, |g, x| rhs(g, BinaryOp::Sub, x, Literal::Float(vec![-0.0])));
            check(dtype, false, |g, x| rhs(g, BinaryOp::Pow, x, Literal::Float(vec![2.0])));
        }
        for dtype in [DType::I32, DType::I64] {
            let int = |v: i64| Literal::Int(vec![v]);
            check(dtype, true, |g, x| rhs(g, BinaryOp::Mul, x, int(1)));
            check(dtype, true, |g, x| rhs(g, BinaryOp::Div, x, int(1)));
            check(dtype, true, |g, x| lhs(g, BinaryOp::Add, int(0), x));
            check(dtype, true, |g, x| rhs(g, BinaryOp::Sub, x, int(0)));
            check(dtype, true, |g, x| rhs(g, BinaryOp::Pow, x, int(2)));
            check(dtype, false, |g, x| rhs(g, BinaryOp::Pow, x, int(3)));
        }
    }

    #[test]
    fn unary_rules_are_bit_exact_for_special_values() {
        for dtype in [DType::F32, DType::F16, DType::I32] {
            let mut ops = vec![UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Sign];
            if dtype.is_float() {
                ops.push(UnaryOp::Floor);
            }
            for u in ops {
                check(dtype, true, |g, x| {
                    let once = node(g, Op::Unary(u), &[x]);
                    node(g, Op::Unary(u), &[once])
                });
            }
            check(dtype, true, |g, x| node(g, Op::Cast(dtype), &[x]));
        }
        check(DType::F32, false, |g, x| {
            let l = node(g, Op::Unary(UnaryOp::Log), &[x]);
            node(g, Op::Unary(UnaryOp::Exp), &[l])
        });
        check(DType::F32, true, |g, x| {
            let b = node(g, Op::Cast(DType::Bool), &[x]);
            let n = node(g, Op::Unary(UnaryOp::Not), &[b]);
            node(g, Op::Unary(UnaryOp::Not), &[n])
        });
    }

    #[test]
    fn shape_rules_keep_every_element_in_place() {
        let mut p = Program::default();
        let x = {
            let values: Vec<f64> = (0..24).map(f64::from).collect();
            constant(&mut p.graph, Literal::Float(values), TensorType::new(DType::F32, vec![2, 3, 4]))
        };
        let t1 = node(&mut p.graph, Op::Transpose { perm: vec![1, 2, 0] }, &[x]);
        let t2 = node(&mut p.graph, Op::Transpose { perm: vec![2, 0, 1] }, &[t1]);
        let r1 = node(&mut p.graph, Op::Reshape { shape: vec![6, 4] }, &[t2]);
        let r2 = node(&mut p.graph, Op::Reshape { shape: vec![4, 6] }, &[r1]);
        let b1 = node(&mut p.graph, Op::BroadcastTo { shape: vec![1, 4, 6] }, &[r2]);
        let b2 = node(&mut p.graph, Op::BroadcastTo { shape: vec![3, 4, 6] }, &[b1]);
        let t3 = node(&mut p.graph, Op::Transpose { perm: vec![2, 1, 0] }, &[b2]);
        let t4 = node(&mut p.graph, Op::Transpose { perm: vec![1, 0, 2] }, &[t3]);
        p.graph.outputs = vec![t4];
        let before = bits(&p, t4);
        run(&mut p, &PassCtx::default()).unwrap();
        crate::passes::dce::run(&mut p, &PassCtx::default()).unwrap();
        assert_eq!(bits(&p, p.graph.outputs[0]), before);
        assert_eq!(postcondition(&p), Ok(()));
        crate::ir::verify_program(&p).unwrap();
        // The first two transposes cancel; the reshapes, the broadcasts and
        // the last two transposes each merge into one.
        let text = crate::ir::print_program(&p);
        assert_eq!(text.matches("transpose").count(), 1, "{text}");
        assert_eq!(text.matches("reshape").count(), 1, "{text}");
        assert_eq!(text.matches("broadcast_to").count(), 1, "{text}");
    }

    #[test]
    fn select_rules_pick_the_right_branch() {
        for cond in [true, false] {
            check(DType::F32, true, |g, x| {
                let shape = g.node(x).ty.shape.clone();
                let c = constant(g, Literal::Bool(vec![cond]), TensorType::scalar(DType::Bool));
                let c = node(g, Op::BroadcastTo { shape }, &[c]);
                let y = node(g, Op::Unary(UnaryOp::Sqrt), &[x]);
                node(g, Op::Select, &[c, x, y])
            });
        }
        check(DType::F32, true, |g, x| {
            let c = node(g, Op::Cast(DType::Bool), &[x]);
            node(g, Op::Select, &[c, x, x])
        });
        check(DType::F32, false, |g, x| {
            let c = node(g, Op::Cast(DType::Bool), &[x]);
            let y = node(g, Op::Unary(UnaryOp::Sqrt), &[x]);
            node(g, Op::Select, &[c, x, y])
        });
    }
}
