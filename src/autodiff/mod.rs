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
mod scan;

use crate::diag::Diagnostic;
use crate::ir::{Graph, NodeId, Op, Program};
use builder::Builder;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Gradients of `output` (weighted by `seed`, or ones when `None`) with
/// respect to each node in `wrt`.
pub fn gradients(
    g: &mut Graph,
    output: NodeId,
    seed: Option<NodeId>,
    wrt: &[NodeId],
) -> Result<Vec<Option<NodeId>>, Diagnostic> {
    let order = g.topo_order();
    let active = active(g, &order, output, wrt);

    let mut adjoint: HashMap<NodeId, NodeId> = HashMap::default();
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

/// The nodes that carry a gradient from `wrt` to `output`: float values
/// that depend on some `wrt` node and that `output` depends on.
fn active(g: &Graph, order: &[NodeId], output: NodeId, wrt: &[NodeId]) -> HashSet<NodeId> {
    let mut from_wrt: HashSet<NodeId> = wrt.iter().copied().collect();
    for &n in order {
        if g.inputs(n).iter().any(|i| from_wrt.contains(i)) {
            from_wrt.insert(n);
        }
    }
    let mut to_output: HashSet<NodeId> = HashSet::from_iter([output]);
    for &n in order.iter().rev() {
        if to_output.contains(&n) {
            to_output.extend(g.inputs(n));
        }
    }
    let carries = |n: &NodeId| from_wrt.contains(n) && to_output.contains(n) && g_is_float(g, *n);
    order.iter().copied().filter(carries).collect()
}

/// Whether `output` has a gradient with respect to each `wrt` node (what
/// `gradients` would return `Some` for), without building any.
pub fn has_gradients(g: &Graph, output: NodeId, wrt: &[NodeId]) -> Vec<bool> {
    let active = active(g, &g.topo_order(), output, wrt);
    // Adjoints flow from `output` along active nodes only (every rule gives
    // an active operand its contribution).
    let mut reached: HashSet<NodeId> = HashSet::default();
    let mut stack: Vec<NodeId> = active.contains(&output).then_some(output).into_iter().collect();
    while let Some(n) = stack.pop() {
        if reached.insert(n) {
            stack.extend(g.inputs(n).into_iter().filter(|i| active.contains(i)));
        }
    }
    wrt.iter().map(|w| reached.contains(w)).collect()
}

/// A gradient request of the graph (`Op::Gradient`) and the node that
/// computes it.
pub type Expanded = (NodeId, NodeId);

/// Builds the gradients every `Op::Gradient` request of `g` asks for, one
/// reverse pass per loss (its requests together), and returns each request
/// with its gradient; the caller replaces the requests' uses. A request
/// without a gradient is an internal error: the tracer reports those
/// (E0305) when it makes the request.
pub fn expand(g: &mut Graph) -> Result<Vec<Expanded>, Diagnostic> {
    let mut by_loss: Vec<(NodeId, Vec<NodeId>)> = Vec::new();
    for n in g.topo_order() {
        if !matches!(g.node(n).op, Op::Gradient) {
            continue;
        }
        let loss = g.inputs(n)[0];
        match by_loss.iter_mut().find(|(l, _)| *l == loss) {
            Some((_, requests)) => requests.push(n),
            None => by_loss.push((loss, vec![n])),
        }
    }
    let mut expanded = Vec::new();
    for (loss, requests) in by_loss {
        let wrt: Vec<NodeId> = requests.iter().map(|&r| g.inputs(r)[1]).collect();
        for (r, grad) in requests.iter().zip(gradients(g, loss, None, &wrt)?) {
            let grad = grad.ok_or_else(|| Diagnostic::internal("a gradient request without a gradient"))?;
            expanded.push((*r, grad));
        }
    }
    Ok(expanded)
}

/// Replaces every gradient request of `p` by its gradient (`expand`): its
/// users, the effects and plans that refer to it (a step's recorded
/// gradients) read the gradient, and the request is removed. Then every
/// stop-gradient is replaced by its operand.
pub fn expand_requests(p: &mut Program) -> Result<(), Diagnostic> {
    for (request, gradient) in expand(&mut p.graph)? {
        p.replace_uses(request, gradient);
        p.graph.remove(request);
    }
    // With every gradient built, a stop-gradient is its operand: nothing
    // after this differentiates, and no pass or backend sees one.
    for n in p.graph.node_ids() {
        if matches!(p.graph.node(n).op, Op::StopGradient) {
            let x = p.graph.inputs(n)[0];
            p.replace_uses(n, x);
            p.graph.remove(n);
        }
    }
    Ok(())
}
