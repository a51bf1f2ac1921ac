//! Reverse-mode automatic differentiation as a graph transformation.
//!
//! `gradients(g, y, wrt)` appends to `g` the nodes that compute
//! `d sum(y ⊙ seed) / d w` for every `w` in `wrt` (the vector–Jacobian
//! product), walking the nodes between `wrt` and `y` in reverse topological
//! order and applying each op's VJP rule (`rules.rs`). The result is an
//! ordinary graph: it is printed, optimized and compiled like any other.
//!
//! Contract: every returned gradient has exactly the type of its `wrt`
//! node; a `wrt` node that `y` does not depend on gets `None`; integer and
//! bool values carry no gradient. Rules are checked against central finite
//! differences in f64 (tests/gradcheck.rs).
//!
//! Example: for `y = sum(tanh(x @ w))`, the gradient with respect to `w` is
//! `x^T @ (1 - tanh(x @ w)^2)`, built from `transpose`, `mul`, `sub` and
//! `matmul` nodes.

mod builder;
mod rules;

use crate::diag::Diagnostic;
use crate::ir::{Graph, NodeId};
use builder::Builder;
use std::collections::{HashMap, HashSet};

/// Gradients of `output` (weighted by `seed`, or ones when `None`) with
/// respect to each node in `wrt`.
pub fn gradients(
    g: &mut Graph,
    output: NodeId,
    seed: Option<NodeId>,
    wrt: &[NodeId],
) -> Result<Vec<Option<NodeId>>, Diagnostic> {
    let order = g.topo_order();
    // Nodes that depend on some `wrt` node ...
    let mut from_wrt: HashSet<NodeId> = wrt.iter().copied().collect();
    for &n in &order {
        if g.inputs(n).iter().any(|i| from_wrt.contains(i)) {
            from_wrt.insert(n);
        }
    }
    // ... and that `output` depends on: only these need adjoints.
    let mut to_output: HashSet<NodeId> = HashSet::from([output]);
    for &n in order.iter().rev() {
        if to_output.contains(&n) {
            to_output.extend(g.inputs(n));
        }
    }
    let active = |n: &NodeId| from_wrt.contains(n) && to_output.contains(n) && g_is_float(g, *n);
    let active: HashSet<NodeId> = order.iter().copied().filter(|n| active(n)).collect();

    let mut adjoint: HashMap<NodeId, NodeId> = HashMap::new();
    if active.contains(&output) {
        let span = g.node(output).span;
        let mut b = Builder { g, span };
        let s = match seed {
            Some(s) => s,
            None => {
                let ty = b.ty(output);
                b.full(1.0, &ty)?
            }
        };
        adjoint.insert(output, s);
    }
    let wrt_set: HashSet<NodeId> = wrt.iter().copied().collect();
    for &n in order.iter().rev() {
        if !active.contains(&n) || (wrt_set.contains(&n) && g.inputs(n).iter().all(|i| !active.contains(i))) {
            continue;
        }
        let Some(&gy) = adjoint.get(&n) else { continue };
        let inputs = g.inputs(n);
        let wanted: Vec<bool> = inputs.iter().map(|i| active.contains(i)).collect();
        if !wanted.contains(&true) {
            continue;
        }
        let span = g.node(n).span;
        let mut b = Builder { g, span };
        let contributions = rules::vjp(&mut b, n, &inputs, gy, &wanted)?;
        for ((input, want), c) in inputs.iter().zip(&wanted).zip(contributions) {
            let (true, Some(c)) = (*want, c) else { continue };
            let total = match adjoint.get(input) {
                Some(&prev) => b.binary(crate::ir::BinaryOp::Add, prev, c)?,
                None => c,
            };
            adjoint.insert(*input, total);
        }
    }
    Ok(wrt.iter().map(|w| adjoint.get(w).copied()).collect())
}

fn g_is_float(g: &Graph, n: NodeId) -> bool {
    g.node(n).ty.dtype.is_float()
}
