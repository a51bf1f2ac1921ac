//! Loop bodies planned as programs of their own: the body of every `scan`
//! in a unit (`Op::Scan`, `ir::scan`) goes through the whole pipeline once,
//! whatever the loop's length, so a backend compiles it once and runs it
//! `length` times (the CPU backend: `backend::cpu`'s scan step).
//!
//! Contract: [`plan`] returns the body as an optimized [`Program`] whose
//! graph outputs are the body's outputs and whose one unit (the main unit,
//! no regions) computes them from the body's slots (`Op::Slot { slot: i }`
//! is the loop's `i`-th input: carries, slices, captured values). Called by
//! `partition` for every scan kernel; a scan inside a body is planned when
//! that body is (the recursion ends with the innermost loop). [`host_part`]
//! says which of the body's kernels the target leaves to the host
//! interpreter, which `partition` records on the scan's kernel (the loop
//! itself is the target's, its body partly interpreted), so the plan shows
//! it ahead of time and `--strict` refuses it.
//!
//! Every pass runs on the body, whichever ones the outer run disabled: the
//! body is a graph no pass has seen yet (the outer passes treat a scan as
//! one opaque op).
//!
//! Example: an LSTM's scan over 28 rows has a body of one `[B, h] @ [h, 4h]`
//! product, the gates' elementwise ops and two outputs; its plan is one
//! `Contraction` kernel with a fused epilogue and a few elementwise kernels
//! over a small arena, prepared once and run 28 times per training step.

use crate::diag::Diagnostic;
use crate::ir::compiled::{Device, KernelKind, LoopPlan};
use crate::ir::scan::ScanBody;
use crate::ir::target::HostPart;
use crate::ir::{NodeId, Program};
use crate::passes::PassCtx;
use std::sync::Arc;

/// The plan of the body of the scan `node`.
pub fn plan(node: NodeId, body: &ScanBody, ctx: &PassCtx) -> Result<LoopPlan, Diagnostic> {
    let mut graph = body.graph.clone();
    graph.outputs = body.graph.outputs.clone();
    let mut program = Program { graph, effects: Vec::new(), compiled: None };
    // The body runs on the target's device whatever the target does with a
    // program's statements (the GPU leaves those to the host).
    let target = crate::ir::target::Target { statements_on_host: false, ..ctx.target };
    let opts = crate::passes::Options { disabled: Vec::new(), verify: ctx.verify, target };
    crate::passes::optimize(&mut program, &opts, &mut |_, _| {})
        .map_err(|d| d.note("while planning the body of a `scan`"))?;
    // Its one unit is the program's main unit; in plans and errors it is
    // the body.
    if let Some(c) = program.compiled.as_mut() {
        c.units.iter_mut().for_each(|u| u.name = "scan body".into());
    }
    Ok(LoopPlan { node, body: Arc::new(program) })
}

/// The first kernel of the body (searching nested loops too) that runs
/// wholly or partly on the host interpreter, as the part of the scan's
/// kernel that does: named by the scan node, since the body's nodes are
/// not in the outer graph.
pub fn host_part(plan: &LoopPlan) -> Option<HostPart> {
    let body = plan.body.compiled.as_ref()?;
    for u in &body.units {
        for k in u.kernels.iter().filter(|k| k.kind != KernelKind::Source) {
            if let Some(why) = &k.why_host {
                let op = k.host_node.or(k.nodes.first().copied()).map(|n| plan.body.graph.node(n).op.name());
                let whole = if k.device == Device::Host { "" } else { "partly " };
                return Some(HostPart {
                    whole: false,
                    why: format!("its body runs `{}` {whole}on the host: {why}", op.unwrap_or("?")),
                    node: plan.node,
                });
            }
        }
    }
    None
}
