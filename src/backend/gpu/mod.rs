//! The GPU backend (`--device gpu`, feature `gpu`): every kernel of the
//! optimizer's plan that has a WGSL template runs as a compute shader
//! through wgpu (Vulkan: a real GPU, or Mesa's lavapipe on machines
//! without one); the plan leaves the rest to the host interpreter, ahead
//! of time (`TARGET.host_reason`, shown by `tfc build --emit plan --device
//! gpu`, refused by `--strict`).
//!
//! Contract: results equal the reference interpreter's up to the rounding
//! of the device's math (`exp`, `log`, …) and of sums in another order;
//! the same program and inputs give the same bits on every run (one thread
//! per output, sums in index order). Parameters and optimizer states stay
//! on the device between training steps; a step uploads its batch and
//! reads back only its loss.
//!
//! Layout: `device` (the adapter and device, found once), `wgsl` (shader
//! text from the kernel description), `kernels` (which shaders compute a
//! planned kernel: what the plan and the unit both ask), `unit` (a region
//! on the GPU: buffers, passes, host kernels between them).
//!
//! Example: `tfc run examples/digits_mlp.tfl --device gpu` trains the MLP
//! with its products, epilogues, reductions and Adam's update on the GPU.

pub mod arena;
pub mod device;
pub mod kernels;
pub mod unit;
pub mod wgsl;

use crate::backend::{Backend, Prepare, PreparedUnit};
use crate::diag::Diagnostic;
use crate::ir::compiled::{Device, Kernel};
use crate::ir::target::{HostPart, Target};
use crate::ir::Graph;
pub use unit::GpuUnit;
use wgsl::{Buf, Place};

/// The GPU backend.
pub struct GpuBackend;

/// What the optimizer plans for when the GPU runs the program.
pub const TARGET: Target = Target {
    name: "gpu",
    device: Device::Gpu,
    host_reason,
    // The program's statements run once, on the host.
    statements_on_host: true,
    // A loop runs wholly on the GPU or wholly on the host.
    loops_partly_on_host: false,
    // Every value a kernel reads is materialized.
    views: |_, _| Vec::new(),
    align: 16,
    memory_bytes: || None,
    arithmetic: |dtype| dtype,
    fuses: |_, _, _, _| false,
};

/// The part of `k` the GPU leaves to the host: all of it, when it has no
/// shaders (`kernels::shaders`, which the unit then compiles).
fn host_reason(g: &Graph, k: &Kernel) -> Option<HostPart> {
    let anywhere = |_| Some(Place { buf: Buf::Vals, word: 0 });
    match kernels::shaders(g, k, &anywhere) {
        Ok(_) => None,
        Err((why, node)) => Some(HostPart { whole: true, why, node }),
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn prepare(&self, r: &Prepare<'_>) -> Result<Box<dyn PreparedUnit>, Diagnostic> {
        let id = r.region.id.0;
        let unit = r
            .plan()
            .ok_or_else(|| Diagnostic::internal(format!("gpu: the plan has no compilation unit for region {id}")))?;
        if r.collectives.is_some() {
            return Err(Diagnostic::new(
                crate::diag::Code::Unsupported,
                "data-parallel training does not run on the GPU yet",
            )
            .help("use `--device cpu` with `--workers`"));
        }
        if let (true, Some(k)) = (
            r.strict,
            unit.kernels.iter().find(|k| k.device == Device::Host && k.kind != crate::ir::compiled::KernelKind::Source),
        ) {
            let first = k.host_node.or(k.nodes.first().copied());
            let mut d = Diagnostic::new(
                crate::diag::Code::Unsupported,
                format!("a kernel of `{}` would run on the host: {}", unit.name, k.why_host.as_deref().unwrap_or("")),
            )
            .help("run without `--strict` to let the host interpreter run it");
            if let Some(n) = first {
                d = d.label(r.program.graph.node(n).span, "runs only on the host interpreter");
            }
            return Err(d);
        }
        let prepared = GpuUnit::prepare(r.program, unit, r.region, r.slot_pos, r.outside, r.carried)?;
        Ok(Box::new(prepared))
    }
}
