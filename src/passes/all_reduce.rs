//! Gradient all-reduce: in every fused data-parallel step
//! (`ParallelStep::fused`), puts an `all_reduce_sum` (`Op::AllReduce`)
//! between each value the step records for summing (`ParallelStep::to_sum`:
//! the loss as an `f64`, then each parameter's gradient) and every reader of
//! it, so the mean, clipping, loss scaling and the optimizer see the sum
//! over the processes, and the step's loss output is the global loss.
//!
//! A pass over the structured step, not the tracer's job: the tracer
//! records which nodes are the gradients, `autodiff` builds them (and keeps
//! the records pointing at them), and this pass inserts the collective. It
//! completes the lowering (it runs on unoptimized programs too and cannot
//! be disabled): without it, the processes of a fused step would each
//! train on their own shard.
//!
//! Contract: afterwards every `to_sum` list is empty, and each recorded
//! value is read only by its new `all_reduce_sum` (which the region's
//! outputs name in its place). Running the pass again changes nothing.
//!
//! Tested in tests/distributed_cli.rs (the lowered step; `tfc build --emit
//! plan --workers 2 --shards 2`) and tests/distributed.rs (the bits).
//!
//! Example: a fused step records `%g = …` (the gradient of `w`) read by
//! `%m = mul %g, 0.5`; after the pass, `%s = all_reduce_sum %g` and
//! `%m = mul %s, 0.5`.

use crate::diag::Diagnostic;
use crate::ir::{Effect, NodeId, Op, Program};
use crate::passes::PassCtx;

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    for e in &mut p.effects {
        let Effect::Train(t) = e else { continue };
        let Some(step) = t.parallel.as_mut() else { continue };
        for ((_, region), sums) in step.fused.iter_mut().zip(&mut step.to_sum) {
            for n in std::mem::take(sums) {
                let sum = sum_over_processes(&mut p.graph, n);
                region.outputs.iter_mut().filter(|o| **o == n).for_each(|o| *o = sum);
            }
        }
    }
    Ok(())
}

/// A new `all_reduce_sum` of `n`, which every earlier reader of `n` reads
/// instead.
fn sum_over_processes(g: &mut crate::ir::Graph, n: NodeId) -> NodeId {
    let readers = g.users(n);
    let node = g.node(n);
    let (ty, span) = (node.ty.clone(), node.span);
    let sum = g.add(Op::AllReduce, &[n], ty, span);
    for r in readers {
        g.redirect(n, sum, r);
    }
    sum
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    for e in &p.effects {
        let Effect::Train(t) = e else { continue };
        let Some(step) = &t.parallel else { continue };
        if let Some(n) = step.to_sum.iter().flatten().next() {
            return Err(format!("node {} is still recorded to be summed over the processes", n.index()));
        }
    }
    Ok(())
}
