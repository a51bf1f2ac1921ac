//! Constant folding: computes at compile time every value that depends only
//! on constants, with the reference interpreter, so a folded value is
//! bit-equal to what the interpreter would compute at run time.
//!
//! Shape arithmetic (`shape(x)[0] * 2`, `reshape` targets, axis numbers) is
//! already done by the tracer, which runs compile-time code; this pass folds
//! tensor values.
//!
//! What folds (nodes are visited in topological order, so chains fold whole):
//! - A node whose operands are all constant-valued — a `constant`, or a
//!   *splat*: a `broadcast_to` of a one-element constant (or of another
//!   splat) — becomes a `constant` holding the interpreter's result, when the
//!   result and every operand have at most [`MAX_FOLDED_ELEMENTS`] elements.
//!   Larger values are never materialized or read at compile time, so a
//!   program's size and compile time stay bounded (`sum(zeros([1000,
//!   1000]))` is left to run time).
//! - 0-operand `iota` and `random_*` nodes fold under the same size limit
//!   (the generator is counter-based and seeded, so the values are fixed).
//! - An elementwise op (unary, binary, select, cast) whose operands are all
//!   splats becomes a splat of the op applied to the scalars, at any size:
//!   elementwise ops compute each element alone, so this is exact.
//!
//! What never folds: `slot`s (runtime values) and anything that reads them;
//! `scan`s (their work grows with their length, not their sizes);
//! `all_reduce_sum` (its value is a sum over other processes);
//! splats themselves (a scalar-constant `broadcast_to` costs nothing, and
//! backends read it as a scalar); a node whose evaluation fails (integer
//! division by zero, an out-of-range gather index): it stays, so the error
//! is reported at run time, where the unoptimized program reports it.
//!
//! Operands that a fold leaves unread are removed with it (see
//! [`remove_unused`]); other dead code is left for `dce`.
//!
//! Contract: no node other than a constant, a slot or a splat remains whose
//! fold (as above) would succeed.
//!
//! Example: the graph
//! ```text
//! %0 = constant 2 : f32[]
//! %1 = constant 3 : f32[]
//! %2 = mul %0, %1 : f32[]
//! %3 = broadcast_to %2 {shape=[3]} : f32[3]
//! %4 = constant 0 : f32[]
//! %5 = broadcast_to %4 {shape=[3]} : f32[3]
//! %6 = add %3, %5 : f32[3]
//! print %6
//! ```
//! and folds to
//! ```text
//! %0 = constant 6 : f32[]
//! %1 = broadcast_to %0 {shape=[3]} : f32[3]
//! print %1
//! ```

use crate::diag::Diagnostic;
use crate::ir::{NodeId, Op, Program, TensorType};
use crate::passes::PassCtx;
use crate::tensor::{eval_node, Tensor};
use std::collections::HashSet;

/// The largest value (in elements) the pass creates or reads.
pub const MAX_FOLDED_ELEMENTS: usize = 4096;

/// What a node folds to.
enum Folded {
    /// A constant of the node's type.
    Constant(Tensor),
    /// A scalar, broadcast to the node's shape.
    Splat(Tensor),
}

/// A `broadcast_to` of a one-element constant or of another splat.
fn is_splat(p: &Program, id: NodeId) -> bool {
    let node = p.graph.node(id);
    if !matches!(node.op, Op::BroadcastTo { .. }) {
        return false;
    }
    match p.graph.inputs(id).as_slice() {
        [x] => is_scalar(p, *x),
        _ => false,
    }
}

/// A one-element constant or a splat: a value with a single distinct element.
fn is_scalar(p: &Program, id: NodeId) -> bool {
    match &p.graph.node(id).op {
        Op::Constant { ty, .. } => ty.numel() == 1,
        _ => is_splat(p, id),
    }
}

fn is_constant_valued(p: &Program, id: NodeId) -> bool {
    matches!(p.graph.node(id).op, Op::Constant { .. }) || is_splat(p, id)
}

/// The single element of a scalar (see `is_scalar`), as a rank-0 tensor.
fn scalar_value(p: &Program, id: NodeId) -> Option<Tensor> {
    match &p.graph.node(id).op {
        Op::Constant { value, ty } => Tensor::from_literal(value, &TensorType::scalar(ty.dtype)).ok(),
        Op::BroadcastTo { .. } => scalar_value(p, *p.graph.inputs(id).first()?),
        _ => None,
    }
}

/// The full value of a constant-valued node.
fn value(p: &Program, id: NodeId) -> Option<Tensor> {
    let node = p.graph.node(id);
    match &node.op {
        Op::Constant { value, ty } => Tensor::from_literal(value, ty).ok(),
        op @ Op::BroadcastTo { .. } => {
            let x = value(p, *p.graph.inputs(id).first()?)?;
            eval_node(op, &[&x], &node.ty).ok()
        }
        _ => None,
    }
}

/// What `id` folds to, if anything (see the module docs).
fn fold(p: &Program, id: NodeId) -> Option<Folded> {
    let node = p.graph.node(id);
    // A scan's work is its length times its body's, which no size limit
    // on its operands bounds: it is left to run time.
    if matches!(node.op, Op::Slot { .. } | Op::Constant { .. } | Op::Scan(_) | Op::AllReduce) || is_splat(p, id) {
        return None;
    }
    let inputs = p.graph.inputs(id);
    if !inputs.iter().all(|&i| is_constant_valued(p, i)) {
        return None;
    }
    if node.op.is_elementwise() && node.ty.numel() > 1 && inputs.iter().all(|&i| is_splat(p, i)) {
        let scalars = inputs.iter().map(|&i| scalar_value(p, i)).collect::<Option<Vec<Tensor>>>()?;
        let refs: Vec<&Tensor> = scalars.iter().collect();
        return eval_node(&node.op, &refs, &TensorType::scalar(node.ty.dtype)).ok().map(Folded::Splat);
    }
    let small = |ty: &TensorType| ty.numel() <= MAX_FOLDED_ELEMENTS;
    if !small(&node.ty) || !inputs.iter().all(|&i| small(&p.graph.node(i).ty)) {
        return None;
    }
    let values = inputs.iter().map(|&i| value(p, i)).collect::<Option<Vec<Tensor>>>()?;
    let refs: Vec<&Tensor> = values.iter().collect();
    eval_node(&node.op, &refs, &node.ty).ok().map(Folded::Constant)
}

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    for id in p.graph.topo_order() {
        let Some(folded) = fold(p, id) else { continue };
        let (ty, span) = (p.graph.node(id).ty.clone(), p.graph.node(id).span);
        let new = match folded {
            Folded::Constant(t) => p.graph.add(Op::Constant { value: t.to_literal(), ty: ty.clone() }, &[], ty, span),
            Folded::Splat(s) => {
                let scalar = TensorType::scalar(ty.dtype);
                let c = p.graph.add(Op::Constant { value: s.to_literal(), ty: scalar.clone() }, &[], scalar, span);
                p.graph.add(Op::BroadcastTo { shape: ty.shape.clone() }, &[c], ty, span)
            }
        };
        let operands = p.graph.inputs(id);
        p.replace_uses(id, new);
        p.graph.remove(id);
        remove_unused(p, operands);
    }
    Ok(())
}

/// Removes each of `ids` that nothing reads any more (no node, effect or
/// plan), then the operands that it alone read, and so on. A rewriting pass
/// calls it with the operands of a node it replaced, so that its output has
/// no leftovers of its own rewrites; dead code it did not create is left
/// for `dce`.
pub fn remove_unused(p: &mut Program, ids: Vec<NodeId>) {
    let mut roots: Option<HashSet<NodeId>> = None;
    let mut stack = ids;
    while let Some(id) = stack.pop() {
        if !p.graph.contains(id) || !p.graph.users(id).is_empty() {
            continue;
        }
        let roots = roots.get_or_insert_with(|| p.roots().into_iter().collect());
        if roots.contains(&id) {
            continue;
        }
        stack.extend(p.graph.inputs(id));
        p.graph.remove(id);
    }
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    match p.graph.node_ids().into_iter().find(|&id| fold(p, id).is_some()) {
        Some(id) => Err(format!("node {} (`{}`) can still be folded", id.index(), p.graph.node(id).op.name())),
        None => Ok(()),
    }
}
