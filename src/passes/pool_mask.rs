//! Moves a ReLU gradient's mask through a max-pool gradient, from the
//! pooled input's shape to the pooled output's (four times fewer elements
//! for a 2x2 pool).
//!
//! The backward pass of `max_pool2d(relu(z))` is
//! `select(z > 0, max_pool2d_grad(relu(z), gy), 0)`: a full-size mask, kept
//! from the forward pass, applied to a full-size gradient. A max-pool
//! gradient routes each window's `gy` to the window's first maximal element
//! and writes `+0` everywhere else, and that element's `relu(z)` is the
//! window's pooled value `y`; so `z > 0` there exactly when `y > 0`. The
//! pass rewrites the pattern to
//! `max_pool2d_grad(relu(z), select(y > 0, gy, 0))`, reusing the forward
//! pass's `y = max_pool2d(relu(z))`. The full-size mask and select are then
//! dead (`dce`): the forward pass no longer writes the mask and the
//! backward pass makes one pass fewer over the pool's input.
//!
//! Exactness, element by element (`E` is the select's `+0.0`): an element
//! that receives no window's gradient is `+0` before (`+0` or `E`) and
//! after; one that is the first maximum of windows `w` gets `Σ (0 + gy[w])`
//! before when `z > 0`, else `E`, and after `Σ (0 + (y[w] > 0 ? gy[w] : E))`
//! with `y[w] = relu(z)` at that element — the same values, since
//! `0 + E = E` for `E = +0.0` (and NaN, not `> 0`, is masked both ways).
//! Overlapping or padded windows do not change the argument.
//!
//! Contract: no `select(z > 0, max_pool2d_grad(relu(z), gy), +0.0)` remains
//! whose pool gradient has no other reader while the graph holds the
//! matching `max_pool2d(relu(z))` (same window, stride and padding).
//!
//! Example (the bench CNN's first block, batch 64): the mask and select
//! over `[64, 28, 28, 16]` (802,816 elements) become a select over
//! `[64, 14, 14, 16]` (200,704).

use super::simplify::{splat, Splat};
use crate::diag::{Code, Diagnostic};
use crate::ir::infer::infer;
use crate::ir::{BinaryOp, DType, Literal, NodeId, Op, PoolKind, Program, TensorType, UnaryOp};
use crate::passes::const_fold::remove_unused;
use crate::passes::PassCtx;

/// A matched pattern: the select to replace, the ReLU output, the pooled
/// forward value, the pooled gradient and the max-pool gradient's op.
struct Match {
    select: NodeId,
    relu: NodeId,
    pooled: NodeId,
    gy: NodeId,
    grad_op: Op,
}

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    for id in p.graph.topo_order() {
        if !p.graph.contains(id) {
            continue;
        }
        let Some(m) = matches(p, id) else { continue };
        let (span, pooled_ty) = (p.graph.node(id).span, p.graph.node(m.pooled).ty.clone());
        let add = |p: &mut Program, op: Op, operands: &[NodeId]| -> Result<NodeId, Diagnostic> {
            let types: Vec<TensorType> = operands.iter().map(|&i| p.graph.node(i).ty.clone()).collect();
            let refs: Vec<&TensorType> = types.iter().collect();
            let ty = infer(&op, &refs).map_err(|e| Diagnostic::new(Code::Internal, e.message))?;
            Ok(p.graph.add(op, operands, ty, span))
        };
        let zero_ty = TensorType::scalar(pooled_ty.dtype);
        let zero = add(p, Op::Constant { value: Literal::Float(vec![0.0]), ty: zero_ty }, &[])?;
        let zeros = add(p, Op::BroadcastTo { shape: pooled_ty.shape.clone() }, &[zero])?;
        let positive = add(p, Op::Binary(BinaryOp::Gt), &[m.pooled, zeros])?;
        let masked = add(p, Op::Select, &[positive, m.gy, zeros])?;
        let grad = add(p, m.grad_op, &[m.relu, masked])?;
        let operands = p.graph.inputs(m.select);
        p.replace_uses(m.select, grad);
        p.graph.remove(m.select);
        remove_unused(p, operands);
    }
    Ok(())
}

/// The pattern rooted at `select`, if it is one (see the module docs).
fn matches(p: &Program, select: NodeId) -> Option<Match> {
    let g = &p.graph;
    if !matches!(g.node(select).op, Op::Select) {
        return None;
    }
    let [cond, grad, other] = <[NodeId; 3]>::try_from(g.inputs(select)).ok()?;
    if !is_positive_zero(p, other) || g.users(grad).len() != 1 {
        return None;
    }
    let grad_op = g.node(grad).op.clone();
    let Op::Pool2dGrad { kind: PoolKind::Max, size, stride, padding } = &grad_op else { return None };
    let [relu, gy] = <[NodeId; 2]>::try_from(g.inputs(grad)).ok()?;
    if !matches!(g.node(relu).op, Op::Unary(UnaryOp::Relu)) || g.node(relu).ty.dtype != DType::F32 {
        return None;
    }
    let z = g.inputs(relu)[0];
    let [cz, czero] = <[NodeId; 2]>::try_from(g.inputs(cond)).ok()?;
    let is_mask = matches!(g.node(cond).op, Op::Binary(BinaryOp::Gt)) && cz == z && is_zero(p, czero);
    if !is_mask {
        return None;
    }
    let pooled = g.users(relu).into_iter().find(|&u| {
        matches!(&g.node(u).op, Op::Pool2d { kind: PoolKind::Max, size: s, stride: t, padding: q }
            if s == size && t == stride && q == padding)
    })?;
    Some(Match { select, relu, pooled, gy, grad_op })
}

/// A splat of `+0.0`.
fn is_positive_zero(p: &Program, id: NodeId) -> bool {
    matches!(splat(p, id), Some(Splat::Float(v)) if v == 0.0 && v.is_sign_positive())
}

/// A splat of `±0.0` (`z > -0.0` and `z > +0.0` agree).
fn is_zero(p: &Program, id: NodeId) -> bool {
    matches!(splat(p, id), Some(Splat::Float(v)) if v == 0.0)
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    match p.graph.node_ids().into_iter().find(|&id| matches(p, id).is_some()) {
        Some(id) => Err(format!("node {} (`select`) still masks a max-pool gradient at full size", id.index())),
        None => Ok(()),
    }
}
