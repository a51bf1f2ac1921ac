//! What the optimizer knows of the machine it plans for: the facts of a
//! backend that shape the plan, as data in the pass context
//! (`passes::PassCtx::target`), so that passes depend on no backend.
//!
//! Contract: `host_reason(graph, kernel)` is `None` when the target's
//! device computes the kernel with its own code, or the part of it that
//! must run on the host interpreter and why — `passes::partition` then
//! places a wholly interpreted kernel on `Device::Host` and records the
//! reason on a partly interpreted one (a product on the CPU whose epilogue
//! is interpreted), `tfc build --emit plan` shows both, and `--strict`
//! refuses both. A backend's answer must agree with what it then
//! does (the CPU backend counts any kernel it interprets that the plan put
//! on its own device, and `--strict` fails on it).
//!
//! `views(unit, graph)` names the values whose readers the backend may
//! serve from another value (a folded transpose's source, a max pool
//! gradient's pooled operand); `passes::memory_plan` keeps those sources
//! alive for them and records the pairs (`CompiledUnit::views`), which is
//! all a backend may rely on.
//!
//! The rest are plain facts: the alignment its kernels want of every
//! buffer (`passes::memory_plan` places them so, and records it in
//! `CompiledUnit::align`), the memory the device has (a plan whose arenas
//! do not fit is refused ahead of time, E0902, naming its largest buffer),
//! and the element type its kernels compute each dtype's arithmetic in (the
//! CPU stores f16/bf16 but computes in f32: `Kernel::computes_in`, shown by
//! `tfc build --emit plan`).
//!
//! `fuses(graph, unit, kernel, fusion)` says whether the backend runs a
//! named fusion a pass found (a 2x2 max pool written by the convolution
//! before it, Adam's update as one loop); the pass records only those it
//! accepts, and the backend fuses only what the plan records.
//!
//! Example: the CPU backend's target (`backend::cpu::TARGET`) answers
//! `Some(HostPart { whole: true, why: "no CPU kernel for `gather` on
//! f32[16, 32, 64]" })` for an embedding lookup.

use super::compiled::{CompiledUnit, Kernel};
use super::graph::{Graph, NodeId};
use super::kernel_desc::Fusion;
use super::types::DType;

/// A machine the optimizer plans for.
#[derive(Clone, Copy)]
pub struct Target {
    /// Its name in plans and diagnostics (`cpu`).
    pub name: &'static str,
    /// The device of the kernels it runs itself (`Device::Cpu`, or
    /// `Device::Gpu`).
    pub device: super::compiled::Device,
    /// Which part of a kernel cannot run on the target's device, and why
    /// (see the module docs).
    pub host_reason: fn(&Graph, &Kernel) -> Option<HostPart>,
    /// Whether the main unit (the program's statements, run once) runs
    /// wholly on the host interpreter rather than on the target's device
    /// (the CPU backend runs large statements' kernels itself:
    /// `runtime::statements`).
    pub statements_on_host: bool,
    /// Whether a loop (`scan`) whose body has kernels the target leaves to
    /// the host still runs on the target, its body partly interpreted (the
    /// CPU's scan step), rather than wholly on the host (the GPU, whose
    /// loops record their steps into one pass).
    pub loops_partly_on_host: bool,
    /// The values whose readers the target's backend may serve from another
    /// value (`CompiledUnit::views`), which the memory plan then keeps
    /// alive for them.
    pub views: fn(&CompiledUnit, &Graph) -> Vec<(NodeId, NodeId)>,
    /// Every buffer's offset in an arena is a multiple of this many bytes.
    pub align: usize,
    /// The bytes of memory the device has, when known (read when planning).
    pub memory_bytes: fn() -> Option<u64>,
    /// The element type the device's kernels compute a dtype's arithmetic
    /// in; values are still stored in their own dtype.
    pub arithmetic: fn(DType) -> DType,
    /// Whether the target's backend runs the named fusion `fusion` of
    /// kernel `kernel` of `unit` (`ir::kernel_desc::Fusion`); the passes
    /// that find fusions record only those (`passes::conv_pool`,
    /// `passes::adam_update`).
    pub fuses: fn(&Graph, &CompiledUnit, usize, &Fusion) -> bool,
}

/// The part of a kernel a target leaves to the host interpreter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPart {
    /// The whole kernel (else only some of its nodes, the rest native).
    pub whole: bool,
    /// Why, naming the op (`no CPU kernel for `gather` on f32[16, 64]`).
    pub why: String,
    /// The node named.
    pub node: crate::ir::NodeId,
}

impl Target {
    /// A target that claims every kernel: what a plan made without a
    /// backend in mind (library callers, the pass tests) assumes.
    pub const ANY: Target = Target {
        name: "any",
        device: super::compiled::Device::Cpu,
        host_reason: |_, _| None,
        statements_on_host: false,
        loops_partly_on_host: true,
        views: CompiledUnit::read_through_views,
        align: 64,
        memory_bytes: || None,
        arithmetic: |dtype| dtype,
        fuses: |_, _, _, _| true,
    };
}

impl Default for Target {
    fn default() -> Target {
        Target::ANY
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Target({})", self.name)
    }
}
