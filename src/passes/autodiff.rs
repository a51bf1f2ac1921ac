//! Reverse-mode differentiation of the training steps, as a pass: every
//! gradient request the tracer leaves in a step (`Op::Gradient`: the loss,
//! a parameter) becomes the nodes that compute it (`autodiff::expand`),
//! and the request is gone.
//!
//! Contract: runs first, before any other pass or anything runs
//! (`Session::check` runs it as the last step of lowering, and it cannot
//! be disabled); afterwards no `Op::Gradient` node is left (nor an
//! `Op::StopGradient`: each is its operand then) and every user of a
//! request — the clipping, the optimizer's update, the step's
//! recorded gradients (`TrainPlan::parts`) — reads its gradient instead.
//! `--emit ir` shows the requests (the IR as traced), `--dump-after
//! autodiff` their expansion.
//!
//! Example: a step with `loss = mean(square(x @ w - y))` traces
//! `%g = gradient %loss, %w` and `%w2 = sub %w, (mul %lr, %g)`; after the
//! pass `%w2` reads `2/n · transpose(x) @ (x @ w - y)`'s nodes instead.

use crate::diag::Diagnostic;
use crate::ir::{Op, Program};
use crate::passes::PassCtx;

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    crate::autodiff::expand_requests(p)
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    let left = |n: &crate::ir::NodeId| matches!(p.graph.node(*n).op, Op::Gradient | Op::StopGradient);
    match p.graph.node_ids().into_iter().find(left) {
        Some(n) => Err(format!("{} %{} is still in the graph", p.graph.node(n).op.name(), n.index())),
        None => Ok(()),
    }
}
