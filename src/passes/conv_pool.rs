//! Names the max pools that a convolution can write in the same pass over
//! its result: a 2x2, stride-2, unpadded max pool whose input is computed
//! by a forward convolution kernel (with a bias / ReLU / mask epilogue, or
//! none) is recorded as `Fusion::PoolIntoConv` on the pool's kernel, with
//! the pool's gradients in the unit (which then read the maxima the
//! convolution records, not its result) and whether anything else reads
//! the result (else it need not be stored).
//!
//! Why a pass: the fusion crosses kernels, so it is a decision about the
//! plan, which `--dump-after conv_pool` and `tfc build --emit plan` show;
//! a backend fuses what the plan records and a second backend inherits the
//! finding. The target decides whether it runs the fusion
//! (`Target::fuses`: the CPU does for direct `f32` convolutions).
//!
//! Contract: annotates only (`Kernel::fusion`), after `partition`; every
//! recorded pool kernel is one 2x2/2 unpadded max pool whose input is an
//! output of the recorded kernel, a forward convolution of the same unit,
//! whose epilogue (if any) applies per-channel post-ops only
//! (`Spec::channel_post_ops`: the convolution writes its final result in
//! one pass, and the pool reads it there); `schedule` runs the pool right
//! after it.
//!
//! Example: the bench CNN's `max_pool2d(relu(conv2d(x, w) + b))` — the
//! pool's kernel gets `pool into k13 (maxima for 1 gradient)`.

use crate::diag::Diagnostic;
use crate::ir::compiled::{CompiledUnit, KernelKind, MAX_POOL_2X2_GRAD};
use crate::ir::kernel_desc::{AnchorOp, ConvPass, Fusion};
use crate::ir::{Graph, NodeId, PoolKind, Program};
use crate::passes::PassCtx;
use crate::tensor::is_positive_zero_constant;
use std::collections::{HashMap, HashSet};

pub fn run(p: &mut Program, ctx: &PassCtx) -> Result<(), Diagnostic> {
    let pools = |u: &CompiledUnit| (0..u.kernels.len()).any(|k| is_max_pool_2x2(u, k));
    if !p.compiled.as_ref().is_some_and(|c| c.units.iter().any(pools)) {
        return Ok(());
    }
    // Which values each unit's outside reads (computing the units again
    // costs milliseconds: only for programs with a candidate pool).
    let outputs: HashMap<String, Vec<NodeId>> =
        super::units::units(p).into_iter().map(|u| (u.name, u.outputs)).collect();
    let g = &p.graph;
    let Some(c) = p.compiled.as_mut() else { return Ok(()) };
    for u in &mut c.units {
        let read_outside = outputs.get(&u.name).cloned().unwrap_or_default();
        for k in 0..u.kernels.len() {
            let Some(fusion) = find(g, u, k, &read_outside) else { continue };
            if (ctx.target.fuses)(g, u, k, &fusion) {
                u.kernels[k].fusion = Some(fusion);
            }
        }
    }
    Ok(())
}

/// Whether kernel `k` is a lone 2x2/2 unpadded max pool (not a gradient).
fn is_max_pool_2x2(u: &CompiledUnit, k: usize) -> bool {
    let kernel = &u.kernels[k];
    let pool = kernel.desc.anchor.as_ref().map(|a| &a.op);
    let ok = matches!(
        pool,
        Some(AnchorOp::Pool {
            grad: false,
            kind: PoolKind::Max,
            size: [2, 2],
            stride: [2, 2],
            padding: [0, 0, 0, 0],
            ..
        })
    );
    ok && kernel.kind == KernelKind::Layout && kernel.nodes.len() == 1
}

/// The fusion of pool kernel `k` into the convolution before it, if the
/// graph allows it (`read_outside`: the unit's values others read).
fn find(g: &Graph, u: &CompiledUnit, k: usize, read_outside: &[NodeId]) -> Option<Fusion> {
    if !is_max_pool_2x2(u, k) {
        return None;
    }
    let pool = u.kernels[k].nodes[0];
    let x = *g.inputs(pool).first()?;
    let conv = u.kernels.iter().position(|c| c.kind == KernelKind::Contraction && c.outputs.contains(&x))?;
    let kernel = &u.kernels[conv];
    let anchor = kernel.desc.anchor.as_ref()?;
    let AnchorOp::Conv { pass: ConvPass::Forward, output, .. } = &anchor.op else { return None };
    // The convolution writes `x` itself: it is the product, or the one
    // result of a per-channel epilogue (bias, ReLU, a mask).
    // (A result others read is not a buffer of its own epilogue's making:
    // the product then goes to scratch, and the epilogue's own pass writes
    // it.)
    if x != anchor.node {
        if read_outside.contains(&x) {
            return None;
        }
        let [part] = kernel.desc.parts.as_slice() else { return None };
        let spec = part.spec.as_ref()?;
        if part.outputs != [x]
            || spec.channel_post_ops(anchor.node, output[3], |n| is_positive_zero_constant(g, n)).is_none()
        {
            return None;
        }
    }
    let in_unit: HashSet<NodeId> = u.kernels.iter().flat_map(|k| k.nodes.iter().copied()).collect();
    let gradients: Vec<NodeId> = g
        .users(x)
        .into_iter()
        .filter(|&d| in_unit.contains(&d) && g.node(d).op == MAX_POOL_2X2_GRAD && g.inputs(d).first() == Some(&x))
        .collect();
    let pool_only = g.users(x).len() == gradients.len() + 1 && !read_outside.contains(&x);
    Some(Fusion::PoolIntoConv { conv, gradients, pool_only })
}

/// Every recorded pool is a 2x2 max pool reading an output of the forward
/// convolution kernel named.
pub fn postcondition(p: &Program) -> Result<(), String> {
    let Some(c) = &p.compiled else { return Ok(()) };
    for u in &c.units {
        for (k, kernel) in u.kernels.iter().enumerate() {
            let Some(Fusion::PoolIntoConv { conv, .. }) = &kernel.fusion else { continue };
            let x = p.graph.inputs(kernel.nodes[0]).first().copied();
            let conv_ok = u.kernels.get(*conv).is_some_and(|c| {
                let forward = matches!(
                    c.desc.anchor.as_ref().map(|a| &a.op),
                    Some(AnchorOp::Conv { pass: ConvPass::Forward, .. })
                );
                forward && x.is_some_and(|x| c.outputs.contains(&x))
            });
            if !is_max_pool_2x2(u, k) || !conv_ok {
                return Err(format!(
                    "kernel k{k} of unit `{}` is recorded as a pool into k{conv}, which it is not",
                    u.name
                ));
            }
        }
    }
    Ok(())
}
