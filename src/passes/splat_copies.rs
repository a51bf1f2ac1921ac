//! Gives every reader of a splat (a `broadcast_to` of a one-element value)
//! a copy of its own.
//!
//! A splat costs nothing inside a fused kernel: a backend reads it as a
//! scalar. But kernels partition the nodes, so a splat shared by two
//! readers must live in one kernel, and the other reader either joins that
//! kernel (gluing unrelated work together: two parameters' updates that
//! share a learning rate) or reads the splat as a dense buffer. With one
//! copy per reader, `fuse` puts each copy in its reader's kernel, and
//! `units::unit_nodes` can keep the copies a training step reads inside the
//! step, instead of a dense buffer computed once and read every step. `cse`
//! would merge the copies again, so the pass runs after it.
//!
//! Contract: every splat has at most one reader node (effects and plans
//! may read it too); the values are unchanged.
//!
//! Example: Adam's `broadcast_to(0.001, [784, 256])`, read as `1 - beta2`
//! and as the learning rate by the update of one weight, becomes two
//! splats, each fused into that update.

use crate::diag::Diagnostic;
use crate::ir::{Graph, NodeId, Op, Program};
use crate::passes::PassCtx;

/// Whether `n` is a splat: a `broadcast_to` of a one-element value.
pub fn is_splat(g: &Graph, n: NodeId) -> bool {
    matches!(g.node(n).op, Op::BroadcastTo { .. }) && g.inputs(n).iter().all(|&i| g.node(i).ty.numel() == 1)
}

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    for n in p.graph.topo_order() {
        if !is_splat(&p.graph, n) {
            continue;
        }
        // The first reader keeps the original.
        for reader in p.graph.users(n).into_iter().skip(1) {
            let node = p.graph.node(n).clone();
            let copy = p.graph.add(node.op, &p.graph.inputs(n), node.ty, node.span);
            p.graph.redirect(n, copy, reader);
        }
    }
    Ok(())
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    for n in p.graph.node_ids() {
        let readers = p.graph.users(n).len();
        if is_splat(&p.graph, n) && readers > 1 {
            return Err(format!("splat node {} has {readers} readers", n.index()));
        }
    }
    Ok(())
}
