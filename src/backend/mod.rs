//! Backends that execute IR programs, behind one interface: a [`Backend`]
//! prepares a region of the program (a training step, a metric over a
//! batch, a `map` function) into a [`PreparedUnit`], which the runtime runs
//! many times. The runtime holds only these traits, never a concrete
//! backend type.
//!
//! - `interp` — the reference interpreter, node by node: the oracle every
//!   other backend and every optimization is compared with.
//! - `cpu` — the CPU backend (`--backend jit`): the optimizer's kernels as native code
//!   (Cranelift loops, `gemm`, AVX-512 kernels) over one arena per unit.
//! - `gpu` — the GPU backend (`--device gpu`, feature `gpu`): the kernels as
//!   WGSL compute shaders through wgpu.
//!
//! Contract: a backend finds the optimizer's plan for a region by the
//! region's id (`Region::id` = `CompiledUnit::region`); a backend that needs
//! a plan and finds none, or finds one that covers other nodes than the
//! region's, fails with an internal error — it never quietly runs the
//! region some other way. Kernels a backend runs on the host interpreter
//! are decided before anything runs (`passes::partition`, shown by
//! `tfc build --emit plan`), and with `strict` they are an error.
//!
//! Example: `BackendKind::Jit.get().prepare(&request)?.run(&inputs)?`.

pub mod interp;
pub mod cpu;
#[cfg(feature = "gpu")]
pub mod gpu;

use crate::diag::Diagnostic;
use crate::ir::compiled::CompiledUnit;
use crate::ir::plan::Region;
use crate::ir::{NodeId, Program};
use crate::tensor::Tensor;
use std::collections::HashMap;

/// Which backend evaluates a program's regions (`tfc run --backend`, whose
/// default is `jit`; a library caller gets the interpreter, the oracle,
/// unless it asks for the JIT).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The reference interpreter, node by node.
    #[default]
    Interp,
    /// Compiled kernels (Cranelift, gemm) over the memory plan's arena.
    Jit,
    /// Compute shaders on a GPU (`--device gpu`; a build with feature `gpu`).
    #[cfg(feature = "gpu")]
    Gpu,
}

impl BackendKind {
    /// The backend itself.
    pub fn get(self) -> &'static dyn Backend {
        match self {
            BackendKind::Interp => &interp::InterpBackend,
            BackendKind::Jit => &cpu::CpuBackend,
            #[cfg(feature = "gpu")]
            BackendKind::Gpu => &gpu::GpuBackend,
        }
    }

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        self.get().name()
    }

    /// What the optimizer plans for when this backend runs the program
    /// (the interpreter follows no plan, so any will do for it).
    pub fn target(self) -> crate::ir::target::Target {
        match self {
            // Any plan will do, but it must fit the machine's memory.
            BackendKind::Interp => crate::ir::target::Target {
                name: "host",
                memory_bytes: host_memory_bytes,
                // It runs node by node: no fusion.
                fuses: |_, _, _, _| false,
                ..crate::ir::target::Target::ANY
            },
            BackendKind::Jit => cpu::TARGET,
            #[cfg(feature = "gpu")]
            BackendKind::Gpu => gpu::TARGET,
        }
    }
}

/// The machine's physical memory (`MemTotal` of /proc/meminfo), when the
/// system says: the memory of the host backends' device.
pub fn host_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.trim_start_matches("MemTotal:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// What a backend needs to prepare one region.
pub struct Prepare<'a> {
    pub program: &'a Program,
    pub region: &'a Region,
    /// The region's nodes that depend on its inputs, in a topological
    /// order (`passes::units::unit_nodes`): what runs on every evaluation.
    pub nodes: &'a [NodeId],
    /// Region input slot → its position in the bound inputs.
    pub slot_pos: &'a HashMap<usize, usize>,
    /// Every value the region reads from outside, already computed.
    pub outside: &'a HashMap<NodeId, Tensor>,
    /// The last `carried` outputs replace the last `carried` inputs after
    /// each run (a training step's parameters and optimizer states); the
    /// unit may keep them between runs (`PreparedUnit::run_head`).
    pub carried: usize,
    /// Worker threads (0 or 1: the calling thread only).
    pub threads: usize,
    /// Stop at the first NaN or infinity an op produces.
    pub check_numerics: bool,
    /// Any kernel that would run on the host interpreter is an error.
    pub strict: bool,
    /// The plan to follow when it is not the optimizer's plan of `region`:
    /// a part of the main unit (statements computed at once, see
    /// `runtime::statements`).
    pub unit: Option<&'a CompiledUnit>,
    /// The other processes of a data-parallel run, which the region's
    /// `all_reduce_sum` nodes sum over; `None`: this process alone, where
    /// such a node is the identity.
    pub collectives: Option<&'a std::sync::Arc<dyn Collectives>>,
}

impl Prepare<'_> {
    /// The plan of this region: `unit`, else the optimizer's plan of the
    /// region (joined by its id), if the optimizer annotated the program.
    pub fn plan(&self) -> Option<&CompiledUnit> {
        if let Some(u) = self.unit {
            return Some(u);
        }
        let units = &self.program.compiled.as_ref()?.units;
        units.iter().find(|u| u.region == Some(self.region.id))
    }
}

/// How a backend reaches the other processes of a data-parallel run: what
/// runs `Op::AllReduce`. The runtime implements it over `dist` (a later
/// layer), so that no backend depends on how processes talk.
///
/// Contract: `all_reduce_sum` replaces `values` by the sum of every
/// process's `values` (rounded as the interpreter's `+` of their type),
/// the same bits on every process; every process calls it for the same
/// values in the same order. It fails (or ends the job) rather than
/// return anything else.
pub trait Collectives: Send + Sync {
    fn all_reduce_sum(&self, values: Summand<'_>) -> Result<(), Diagnostic>;
}

/// The elements an all-reduce sums, in place (`Op::AllReduce` sums `f32`
/// or `f64` values).
pub enum Summand<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
}

/// A backend: prepares regions to run.
pub trait Backend: Sync {
    /// Its name, as `--backend` spells it.
    fn name(&self) -> &'static str;
    /// Prepares `request.region`, compiling what it runs once.
    fn prepare(&self, request: &Prepare<'_>) -> Result<Box<dyn PreparedUnit>, Diagnostic>;
}

/// A region ready to run many times.
pub trait PreparedUnit: Send + Sync {
    /// The backend that prepared it.
    fn backend(&self) -> &'static str;
    /// Runs the region on all its inputs (in region input order, carried
    /// values last) and returns all its outputs.
    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic>;
    /// Runs the region with its carried values where `load_carried` or the
    /// previous run left them: `head` are the other inputs; returns the
    /// outputs that are not carried.
    fn run_head(&self, head: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic>;
    /// Puts the carried values (in carried order) in place.
    fn load_carried(&self, values: &[Tensor]) -> Result<(), Diagnostic>;
    /// The carried values, as the last run left them.
    fn read_carried(&self) -> Result<Vec<Tensor>, Diagnostic>;
    /// The carried values at positions `which` (in carried order), as the
    /// last run left them: what another unit reads of them each step.
    fn read_carried_some(&self, which: &[usize]) -> Result<Vec<Tensor>, Diagnostic> {
        let all = self.read_carried()?;
        which
            .iter()
            .map(|&i| all.get(i).cloned().ok_or_else(|| Diagnostic::internal(format!("no carried value {i}"))))
            .collect()
    }
    /// How its kernels run.
    fn counts(&self) -> StepCounts;
    /// The bytes of its arena (0 for a backend without one).
    fn arena_bytes(&self) -> usize;
    /// Whether runs use worker threads (a unit too small to gain from them
    /// runs on the calling thread even when threads were asked for).
    fn is_threaded(&self) -> bool;
    /// Starts (or stops) adding each step's wall time to its counter;
    /// starting clears the counters.
    fn set_profiling(&self, on: bool);
    /// Each step's wall time since profiling started, in run order.
    fn profile(&self) -> Vec<StepTime>;
    /// The CPU backend's unit, which an ahead-of-time library can hold
    /// (`cpu::library`); `None` for other backends.
    fn as_cpu(&self) -> Option<&cpu::JitUnit> {
        None
    }
}

/// How the kernels of a prepared unit run (for reports and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCounts {
    pub jit: usize,
    pub gemm: usize,
    /// Kernels run (wholly or partly) node by node on the host interpreter.
    pub interp: usize,
    /// Of those, the kernels the backend's own target did not foresee: a
    /// disagreement between the plan (`ir::target`) and the backend, which
    /// the CPU backend refuses as an internal error.
    pub unplanned: usize,
    /// Native transposes and reductions.
    pub native: usize,
    /// Named fusions the plan records (`ir::kernel_desc::Fusion`) that the
    /// lowering could not apply: the kernels then run one by one (same
    /// values, one more pass over memory). Zero for plans made for the
    /// backend; a test checks it.
    pub unfused: usize,
    /// Transposes read through a matmul's strides instead of run.
    pub folded: usize,
    /// Contraction products stored in their epilogue's output, which the
    /// epilogue then writes in place (`in_place_output`).
    pub in_place: usize,
    /// How often a threaded run can hand a step to another worker: the
    /// steps beyond the first that start the run or that one step's end
    /// makes ready (0: the steps form one chain).
    pub forks: usize,
}

/// One step's share of a profile.
#[derive(Clone, Debug, PartialEq)]
pub struct StepTime {
    /// Its position in the run order.
    pub index: usize,
    /// What it computes, e.g. `gemm 64x784 @ 784x256: matmul, add, relu`.
    pub label: String,
    /// Wall time summed over the runs since profiling started.
    pub seconds: f64,
    /// For a step of a loop's body: the position of the loop's step, whose
    /// time includes this one's.
    pub within: Option<usize>,
}
