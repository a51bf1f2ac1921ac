//! The CPU backend (`--backend jit`, the default): runs the optimizer's
//! compiled units (fused kernels over one arena, in schedule order) with
//! Cranelift-generated code for elementwise kernels and contraction
//! epilogues, `gemm` for matrix products and hand-written native kernels,
//! and the reference interpreter for the kernels its target leaves to the
//! host (`TARGET`, `unit::recognize::host_reason`: the plan shows them ahead
//! of time, `--strict` refuses them; any other fallback is an error).
//!
//! Contract: results equal the reference interpreter's up to floating-point
//! rounding (matmul summation order, polynomial `exp`/`log`/`tanh`; see
//! `codegen::poly`). Execution is deterministic: the same program and
//! inputs give bit-identical results on every run and at any thread count
//! (`schedule` runs independent steps at once, `threads` splits large
//! kernels along independent outputs only). Compiled functions are cached
//! per thread by kernel signature, so a kernel that occurs in several units
//! (or runs) is compiled once.
//!
//! Layout, along the backend's three seams:
//! - code generation, `codegen/`: `spec` (which kernels compile, their loop
//!   nest), `poly` (op templates, polynomial math), the Cranelift functions
//!   (`codegen`), `clif` (the `--emit clif|asm` listings);
//! - native kernels, `kernels/`: products, convolutions, pooling,
//!   reductions, transposes (gathers and scatter-adds run the loops of
//!   `tensor::index_ops`), Adam's update;
//! - the executor: `unit/` (one unit's kernels lowered to steps and run),
//!   `schedule` (which steps may run at once), `threads` (the worker pool,
//!   kernel splits), `carry` (parameters kept in the arena between steps),
//!   `fold` (transposes read through a product's strides).
//!
//! Example: `tfc run --backend jit prog.tfl` runs every training step,
//! metric and `map` region of `prog.tfl` through [`JitUnit`].

mod carry;
pub mod codegen;
mod fold;
mod kernels;
pub mod library;
mod schedule;
mod threads;
mod unit;

pub use codegen::clif::{emit_kernels, Listing};
pub use codegen::{Compiler, KernelFn};
pub use kernels::isa;
pub use unit::JitUnit;

use crate::backend::{Backend, Prepare, PreparedUnit, StepCounts, StepTime};
use crate::diag::Diagnostic;
use crate::tensor::Tensor;

use std::cell::RefCell;

thread_local! {
    static COMPILER: RefCell<Option<Compiler>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's compiler, creating it on first use.
pub fn with_compiler<T>(f: impl FnOnce(&mut Compiler) -> Result<T, String>) -> Result<T, String> {
    COMPILER.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(Compiler::new()?);
        }
        match c.as_mut() {
            Some(compiler) => f(compiler),
            None => Err("the code generator is unavailable".into()),
        }
    })
}

/// The CPU backend.
pub struct CpuBackend;

/// What the optimizer plans for when the CPU backend runs the program.
pub const TARGET: crate::ir::target::Target = crate::ir::target::Target {
    name: "cpu",
    device: crate::ir::compiled::Device::Cpu,
    host_reason: unit::host_reason,
    statements_on_host: false,
    loops_partly_on_host: true,
    // Products read transposed operands through strides (module `fold`);
    // gradients of fused 2x2 max pools read the recorded maxima (`unit`).
    views: crate::ir::compiled::CompiledUnit::read_through_views,
    // A cache line, and one AVX-512 register (the arena is made of 64-byte
    // lines, `unit::Line`).
    align: 64,
    memory_bytes: crate::backend::host_memory_bytes,
    // Halves are stored as halves and computed in f32 (widened in the
    // kernel, rounded when stored); real half arithmetic is issue 20's.
    arithmetic: |dtype| match dtype {
        crate::ir::DType::F16 | crate::ir::DType::BF16 => crate::ir::DType::F32,
        other => other,
    },
    fuses: unit::fuses,
};

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "jit"
    }

    /// Prepares the region's compilation unit, found by the region's id;
    /// a program without one (not optimized) or a unit of other nodes than
    /// the region's is an error, never a quiet run on the interpreter.
    fn prepare(&self, r: &Prepare<'_>) -> Result<Box<dyn PreparedUnit>, Diagnostic> {
        let id = r.region.id.0;
        let unit = r.plan().ok_or_else(|| {
            Diagnostic::internal(format!(
                "jit: the plan has no compilation unit for region {id} (the program was not optimized, or its \
                 plan belongs to another program)"
            ))
        })?;
        let planned: std::collections::HashSet<_> = unit.kernels.iter().flat_map(|k| k.nodes.iter().copied()).collect();
        let wanted: std::collections::HashSet<_> = r.nodes.iter().copied().collect();
        if planned != wanted {
            return Err(Diagnostic::internal(format!(
                "jit: unit `{}` plans {} nodes but region {id} runs {} others",
                unit.name,
                planned.len(),
                wanted.len()
            )));
        }
        let parallelism = unit::Parallelism { threads: r.threads, collectives: r.collectives.cloned() };
        let prepared =
            JitUnit::prepare(r.program, unit, r.slot_pos, r.outside, &r.region.outputs, r.carried, parallelism)?;
        // The plan said ahead of time which kernels the interpreter runs
        // (`host_reason`); a kernel it placed here that the lowering could
        // not compile after all is a disagreement, never a quiet fallback.
        if let Some((op, span, _)) = prepared.interpreted.iter().find(|(_, _, planned)| !planned) {
            return Err(Diagnostic::internal(format!(
                "jit: `{op}` in `{}` fell back to the interpreter although the plan has it on the CPU",
                unit.name
            ))
            .label(*span, "here"));
        }
        if let Some((op, span, _)) = prepared.interpreted.first().filter(|_| r.strict) {
            return Err(Diagnostic::new(
                crate::diag::Code::Unsupported,
                format!("`{op}` would run on the host interpreter in `{}`", unit.name),
            )
            .label(*span, "runs only on the host interpreter")
            .help("run without `--strict` to let the host interpreter run it, or use `--backend interp`"));
        }
        Ok(Box::new(prepared))
    }
}

impl PreparedUnit for JitUnit {
    fn backend(&self) -> &'static str {
        "jit"
    }

    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        JitUnit::run(self, inputs)
    }

    fn run_head(&self, head: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        JitUnit::run_head(self, head)
    }

    fn load_carried(&self, values: &[Tensor]) -> Result<(), Diagnostic> {
        JitUnit::load_carried(self, values)
    }

    fn read_carried(&self) -> Result<Vec<Tensor>, Diagnostic> {
        JitUnit::read_carried(self)
    }

    fn read_carried_some(&self, which: &[usize]) -> Result<Vec<Tensor>, Diagnostic> {
        JitUnit::read_carried_some(self, which)
    }

    fn counts(&self) -> StepCounts {
        self.counts
    }

    fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    fn is_threaded(&self) -> bool {
        JitUnit::is_threaded(self)
    }

    fn set_profiling(&self, on: bool) {
        JitUnit::set_profiling(self, on)
    }

    fn as_cpu(&self) -> Option<&JitUnit> {
        Some(self)
    }

    fn profile(&self) -> Vec<StepTime> {
        JitUnit::profile(self)
    }
}
