//! Names Adam's parameter update: every elementwise part of a kernel
//! (`ir::kernel_desc::Part`) whose loop nest is exactly `std.optim.adam`'s
//! update (`ir::adam_pattern`) is recorded as `Fusion::AdamUpdate` on its
//! kernel, when the target runs the update as one fused loop (the CPU's
//! native AVX-512 loop, PyTorch's `Adam(fused=True)`).
//!
//! Why a pass: the update is found in elementwise kernels and also in the
//! epilogues of weight-gradient products and the tails of bias-gradient
//! reductions, where `fuse` joined it; recording it in the plan lets
//! `--dump-after adam_update` and `tfc build --emit plan` show where it
//! runs fused, and lets another backend inherit the finding.
//!
//! Contract: annotates only (`Kernel::fusion`), after `partition`; a
//! recorded part exists and its spec is Adam's update
//! (`adam_update_with_half_gradient`: a mixed-precision step's gradient
//! may be a `bf16`/`f16` product).
//!
//! Example: the bench MLP's step (two layers, Adam) records it on 4
//! kernels: each weight's update joined to its gradient's product, each
//! bias's joined to its gradient's sum.

use crate::diag::Diagnostic;
use crate::ir::adam_pattern::adam_update_with_half_gradient;
use crate::ir::kernel_desc::Fusion;
use crate::ir::Program;
use crate::passes::PassCtx;

pub fn run(p: &mut Program, ctx: &PassCtx) -> Result<(), Diagnostic> {
    let g = &p.graph;
    let Some(c) = p.compiled.as_mut() else { return Ok(()) };
    for u in &mut c.units {
        for k in 0..u.kernels.len() {
            let kernel = &u.kernels[k];
            let part = kernel
                .desc
                .parts
                .iter()
                .position(|part| part.spec.as_ref().is_some_and(adam_update_with_half_gradient));
            let Some(fusion) = part.map(|part| Fusion::AdamUpdate { part }) else { continue };
            if kernel.fusion.is_none() && (ctx.target.fuses)(g, u, k, &fusion) {
                u.kernels[k].fusion = Some(fusion);
            }
        }
    }
    Ok(())
}

/// Every recorded part is Adam's update.
pub fn postcondition(p: &Program) -> Result<(), String> {
    let Some(c) = &p.compiled else { return Ok(()) };
    for u in &c.units {
        for (k, kernel) in u.kernels.iter().enumerate() {
            let Some(Fusion::AdamUpdate { part }) = kernel.fusion else { continue };
            let spec = kernel.desc.parts.get(part).and_then(|p| p.spec.as_ref());
            if spec.is_none_or(|s| !adam_update_with_half_gradient(s)) {
                return Err(format!("part {part} of kernel k{k} of unit `{}` is recorded as Adam's update", u.name));
            }
        }
    }
    Ok(())
}
