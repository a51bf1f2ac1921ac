//! The executor of one compilation unit (a training step, a metric over a
//! batch, a `map` function) over one arena, following the optimizer's plan.
//!
//! Contract: [`JitUnit::prepare`] turns a `CompiledUnit` into a list of
//! steps in the unit's schedule order, compiling what it can once: native
//! loops, Cranelift code and `gemm` calls where they apply, the reference
//! interpreter's `eval_node` for every other kernel, so every program runs
//! (module `lower` says which runs what).
//!
//! Layout: `step` (the steps as data: operands, places, labels), `lower`
//! (kernels to steps), `recognize` (which kernels run natively), `generic`
//! (the native steps that run the interpreter's own generic loops), `mem`
//! (the storage and one run's view of it), `execute` (running a step, and
//! all of them on one thread or a pool).
//!
//! Storage: every `f32`, `i32`, `f16`, `bf16` and `bool` kernel output
//! lives in the arena at the memory plan's byte offset (four, two and one
//! bytes an element; a `bool` is 0 or 1) (`arena_bytes` plus scratch for the values
//! a kernel keeps to itself, module `schedule`); values of other dtypes
//! are kept as interpreter tensors beside it; region
//! inputs are read in place from the caller's tensors and values computed
//! outside the unit are copied once, at `prepare`. [`JitUnit::run`] binds
//! the inputs, runs the steps and reads the region outputs back as tensors.
//!
//! Threads: with one thread the steps run in schedule order; with a pool,
//! each step runs as soon as the steps it depends on (by the places each
//! reads and writes, module `schedule`) are done — dependency counting
//! inside one rayon scope, the most critical ready step continuing on the
//! same worker — and large kernels are split further (module `threads`);
//! the other workers stay awake for the whole run.
//! Every step computes the same values whatever runs beside it, so results
//! are bit-identical at any thread count.
//!
//! Results equal the interpreter's up to rounding: a different summation
//! order in matmul and the polynomial `exp`/`log`/`tanh` (module `poly`).
//!
//! Profiling: after [`JitUnit::set_profiling`], every step adds its wall
//! time to a counter; [`JitUnit::profile`] reads them with a description
//! of each step (`tfc bench --profile`).
//!
//! Example: `train.rs` prepares one `JitUnit` per batch size of a training
//! step and calls `run` with `[batch…, step, params…, states…]` per batch.

mod execute;
mod generic;
mod library;
mod lower;
mod mem;
mod recognize;
mod scan_step;
mod step;

pub(super) use recognize::{fuses, host_reason};
pub(super) use step::Ref;

use super::carry::{CarryInputs, Resident};
use super::schedule::Schedule;
use super::threads::PARALLEL_MIN_UNIT_WORK;
use crate::backend::{StepCounts, StepTime};
use crate::diag::Diagnostic;
use crate::ir::compiled::{CompiledUnit, KernelKind};
use crate::ir::{DType, NodeId, Op, Program, TensorType};
use crate::tensor::{eval_node, Tensor, Values};
use lower::{Builder, Lowering};
use mem::{read, write, Mem, State, Zeroed};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use step::Step;

/// A unit ready to run many times.
pub struct JitUnit {
    pub name: String,
    steps: Vec<Step>,
    /// Which steps wait for which (threaded runs).
    schedule: Schedule,
    fixed: Vec<Tensor>,
    outputs: Vec<(Ref, TensorType)>,
    /// The element types of arena values read back as tensors.
    state: Mutex<State>,
    /// The worker threads (`None`: one thread).
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Homes of the carried values (see `carry`), in carried order.
    residents: Vec<Resident>,
    pub arena_bytes: usize,
    pub counts: StepCounts,
    /// What each step is, for profiles: its kind, sizes and ops.
    labels: Vec<String>,
    /// Whether steps add their wall time to `step_nanos`.
    profiling: AtomicBool,
    /// The kernels run (partly) on the interpreter: the op and line of each
    /// one's first node, and whether the plan put it on the host.
    pub interpreted: Vec<(String, crate::diag::Span, bool)>,
    step_nanos: Vec<AtomicU64>,
    /// The specs of the compiled steps (`Code::Compiled`), and the sizes of
    /// the unit's memory: arena floats (with scratch), convolution columns,
    /// max-pool maxima (for ahead-of-time libraries, module `library`).
    specs: Vec<crate::ir::spec::Spec>,
    sizes: [usize; 3],
}

fn internal(msg: impl Into<String>) -> Diagnostic {
    Diagnostic::internal(format!("jit: {}", msg.into()))
}

/// What takes the values of a unit's outputs (or carried values) where
/// they lie: the index of each, and its `f32` values.
pub(super) type TakeValues<'a> = dyn FnMut(usize, &[f32]) -> Result<(), Diagnostic> + 'a;

/// The values of the `f32` value at `r` where they lie.
///
/// # Safety
/// Nothing writes them while the slice lives.
unsafe fn f32_values<'a>(mem: Mem<'a>, r: Ref, ty: &TensorType) -> Result<&'a [f32], Diagnostic> {
    if ty.dtype != DType::F32 {
        return Err(internal(format!("a {} value read as f32", ty.dtype)));
    }
    // SAFETY: `elems` checks the storage; no writer by the contract.
    unsafe { mem.elems::<f32>(r, ty.numel()) }
}

/// How a unit's work is shared: worker threads in this process (0 or 1:
/// the calling thread only), and the other processes of a data-parallel
/// run that its all-reduces sum over (`None`: this process alone).
pub struct Parallelism {
    pub threads: usize,
    pub collectives: Option<std::sync::Arc<dyn crate::backend::Collectives>>,
}

impl JitUnit {
    /// Prepares `unit` of `program`: `slot_pos` maps each region input slot
    /// to its position in `run`'s inputs; `values` holds every value the
    /// unit reads from outside (the executor computed them already); the
    /// last `carried` inputs are replaced by the last `carried` outputs
    /// after each run and stay in the unit (module `carry`).
    pub fn prepare(
        program: &Program,
        unit: &CompiledUnit,
        slot_pos: &HashMap<usize, usize>,
        values: &Values,
        outputs: &[NodeId],
        carried: usize,
        parallelism: Parallelism,
    ) -> Result<JitUnit, Diagnostic> {
        let threads = parallelism.threads;
        let g = &program.graph;
        let in_unit: rustc_hash::FxHashSet<NodeId> =
            unit.kernels.iter().flat_map(|k| k.nodes.iter().copied()).collect();
        let mut b = Builder {
            g,
            loc: HashMap::new(),
            fixed: Vec::new(),
            tables: 0,
            in_unit,
            values,
            unfused: 0,
            pending: Vec::new(),
        };
        // Region inputs stay in the caller's tensors, so a new parameter the
        // plan writes over its input (`over_input`) gets its own place after
        // the planned arena; the runtime hands it back as an output.
        let mut arena_end = unit.arena_bytes;
        let buffers: HashMap<NodeId, usize> = unit
            .buffers
            .iter()
            .map(|buf| match buf.over_input {
                Some(_) => {
                    let at = arena_end.div_ceil(64) * 64;
                    arena_end = at + buf.bytes;
                    (buf.node, at)
                }
                None => (buf.node, buf.offset),
            })
            .collect();
        let mut slot_at: HashMap<usize, NodeId> = HashMap::new();
        // Storage of every value that leaves a kernel.
        for k in &unit.kernels {
            for &n in &k.nodes {
                let node = g.node(n);
                let r = match &node.op {
                    Op::Slot { slot, .. } if k.kind == KernelKind::Source => match slot_pos.get(slot) {
                        Some(&p) => {
                            slot_at.insert(p, n);
                            Ref::Input(p)
                        }
                        None => return Err(internal(format!("slot {slot} of unit `{}` is not an input", unit.name))),
                    },
                    Op::Constant { .. } if k.kind == KernelKind::Source => {
                        b.fixed.push(eval_node(&node.op, &[], &node.ty)?);
                        Ref::Fixed(b.fixed.len() - 1)
                    }
                    // A contraction's product that only its epilogue reads
                    // goes to scratch (below).
                    _ if !k.outputs.contains(&n) => continue,
                    _ => match buffers.get(&n) {
                        Some(&off) if node.ty.dtype == DType::F32 => Ref::Arena(off / 4),
                        Some(&off) if node.ty.dtype == DType::Bool => Ref::Mask(off),
                        Some(&off) if matches!(node.ty.dtype, DType::F16 | DType::BF16) => Ref::Half(off),
                        Some(&off) if node.ty.dtype == DType::I32 => Ref::Int(off),
                        Some(&off) if matches!(node.ty.dtype, DType::F64 | DType::I64) => Ref::Wide(off),
                        _ => {
                            b.tables += 1;
                            Ref::Table(b.tables - 1)
                        }
                    },
                };
                b.loc.insert(n, r);
            }
        }
        // Values computed outside the unit are fixed when first read (`get`).
        let typed_outputs: Vec<(NodeId, TensorType)> = outputs.iter().map(|&o| (o, g.node(o).ty.clone())).collect();
        for &(o, _) in typed_outputs.iter().rev().take(carried) {
            b.get(o)?;
        }
        let over_input: HashMap<NodeId, NodeId> =
            unit.buffers.iter().filter_map(|buf| Some((buf.node, buf.over_input?))).collect();
        let carry =
            CarryInputs { slot_at: &slot_at, outputs: &typed_outputs, over_input: &over_input, inputs: slot_pos.len() };
        let residents = super::carry::plan(&carry, carried, &mut b.loc, &mut arena_end, &mut b.tables)?;
        let arena_floats = arena_end.div_ceil(4);
        let mut lowering = Lowering::new(b, unit, outputs, &buffers, arena_floats, parallelism);
        // The kernel each step comes from (for its profile label).
        let mut kernel_of: Vec<usize> = Vec::new();
        let mut current = 0;
        for &ki in &unit.order {
            kernel_of.resize(lowering.steps.len(), current);
            current = ki;
            lowering.kernel(&unit.kernels[ki])?;
        }
        kernel_of.resize(lowering.steps.len(), current);
        let (schedule, floats) = lowering.finish()?;
        let Lowering { mut b, steps, mut counts, cols, first_max_end, interpreted_kernels, nested_interpreted, .. } =
            lowering;
        let steps_len = steps.len();
        // The steps' estimated work (about a nanosecond a unit): a small unit
        // runs on the calling thread (module `threads`).
        let work: u64 = steps.iter().map(|s| s.access().cost).sum();
        let labels = steps.iter().zip(&kernel_of).map(|(s, &ki)| s.label(g, &unit.kernels[ki].nodes)).collect();
        let outputs = outputs.iter().map(|&o| Ok((b.get(o)?, g.node(o).ty.clone()))).collect::<Result<_, _>>()?;
        let lines = floats.div_ceil(16);
        let specs = std::mem::take(&mut b.pending);
        let state = State {
            arena: Zeroed::new(lines, "arena")?,
            table: vec![None; b.tables],
            cols: Zeroed::new(cols, "convolution columns")?,
            first_max: Zeroed::new(first_max_end, "max-pool maxima")?,
        };
        counts.forks = schedule.forks();
        Ok(JitUnit {
            name: unit.name.clone(),
            steps,
            schedule,
            fixed: b.fixed,
            outputs,
            state: Mutex::new(state),
            pool: match work < PARALLEL_MIN_UNIT_WORK {
                true => None,
                false => super::threads::pool(threads).map_err(internal)?,
            },
            residents,
            arena_bytes: unit.arena_bytes,
            counts,
            step_nanos: (0..steps_len).map(|_| AtomicU64::new(0)).collect(),
            labels,
            profiling: AtomicBool::new(false),
            specs,
            sizes: [lines * 16, cols, first_max_end],
            interpreted: interpreted_kernels
                .into_iter()
                .map(|(n, planned)| {
                    let node = n.map(|n| g.node(n));
                    let op = node.map_or("?", |node| node.op.name()).to_string();
                    (op, node.map(|node| node.span).unwrap_or_default(), planned)
                })
                .chain(nested_interpreted)
                .collect(),
        })
    }

    /// Whether runs use worker threads (false for one thread, and for a
    /// unit too small to gain from them: `PARALLEL_MIN_UNIT_WORK`).
    pub fn is_threaded(&self) -> bool {
        self.pool.is_some()
    }

    /// Starts (or stops) adding each step's wall time to its counter;
    /// starting clears the counters.
    pub fn set_profiling(&self, on: bool) {
        if on {
            self.step_nanos.iter().for_each(|n| n.store(0, Ordering::Relaxed));
        }
        self.profiling.store(on, Ordering::Relaxed);
        for step in &self.steps {
            if let Step::Scan(scan) = step {
                scan.unit.set_profiling(on);
            }
        }
    }

    /// Each step's wall time since profiling started, in schedule order;
    /// after a `scan`'s step, its body's steps (summed over the
    /// iterations), labelled `in #i: …` after the loop's step `#i`.
    pub fn profile(&self) -> Vec<StepTime> {
        let mut out = Vec::with_capacity(self.steps.len());
        for (index, ((label, n), step)) in self.labels.iter().zip(&self.step_nanos).zip(&self.steps).enumerate() {
            let seconds = n.load(Ordering::Relaxed) as f64 * 1e-9;
            out.push(StepTime { index, label: label.clone(), seconds, within: None });
            if let Step::Scan(scan) = step {
                out.extend(scan.unit.profile().into_iter().map(|inner| StepTime {
                    index,
                    label: format!("in #{index}: {}", inner.label),
                    seconds: inner.seconds,
                    within: Some(index),
                }));
            }
        }
        out
    }

    /// Runs the unit on `inputs` (in region input order); returns the
    /// region's outputs. A unit prepared with carried values takes them from
    /// `inputs` too and returns them, through its residents.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        let head = inputs.len().saturating_sub(self.residents.len());
        if !self.residents.is_empty() {
            self.load_carried(&inputs[head..])?;
        }
        let mut out = self.run_head(&inputs[..head])?;
        out.extend(self.read_carried()?);
        Ok(out)
    }

    /// Runs the unit with its carried values where `load_carried` or the
    /// previous run left them: `head` are the other inputs; returns the
    /// outputs that are not carried.
    pub fn run_head(&self, head: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        self.run_then(head, |mem, outputs| outputs.iter().map(|(r, ty)| read(mem, *r, ty)).collect())
    }

    /// `run_head` for a unit whose outputs are `f32`: hands each output
    /// that is not carried to `take`, with its index, as the values where
    /// they lie, instead of returning copies (a loop stacks them straight
    /// into its result).
    pub(super) fn run_head_with(&self, head: &[Tensor], take: &mut TakeValues) -> Result<(), Diagnostic> {
        self.run_then(head, |mem, outputs| {
            for (i, (r, ty)) in outputs.iter().enumerate() {
                // SAFETY: the steps are done; nothing writes the unit's
                // places while the state lock is held.
                take(i, unsafe { f32_values(mem, *r, ty)? })?;
            }
            Ok(())
        })
    }

    /// `read_carried` for `f32` carried values: hands each to `take`, with
    /// its index, where it lies.
    pub(super) fn read_carried_with(&self, take: &mut TakeValues) -> Result<(), Diagnostic> {
        let mut st = self.state()?;
        let mem = Mem::of(&mut st, &[], &self.fixed);
        for (i, r) in self.residents.iter().enumerate() {
            // SAFETY: nothing runs; the lock is held.
            take(i, unsafe { f32_values(mem, r.home, &r.ty)? })?;
        }
        Ok(())
    }

    /// Runs the unit (as `run_head`) and gives `finish` the outputs that
    /// are not carried, before the carried values move to their homes.
    fn run_then<T>(
        &self,
        head: &[Tensor],
        finish: impl FnOnce(Mem, &[(Ref, TensorType)]) -> Result<T, Diagnostic>,
    ) -> Result<T, Diagnostic> {
        let mut st = self.state()?;
        let mem = Mem::of(&mut st, head, &self.fixed);
        match &self.pool {
            // Entered once per run: a fork-join from outside the pool costs
            // ~4.5 µs, inside it ~0.13 µs.
            Some(pool) => pool.install(|| self.execute(mem))?,
            None => self.execute(mem)?,
        }
        // The outputs first: one that is a carried input (a loop's `y` that
        // is the carry entering the step) is this run's, not the next one's.
        let n = self.outputs.len() - self.residents.len();
        let outputs = finish(mem, &self.outputs[..n])?;
        for r in &self.residents {
            let Some(from) = r.refresh_from else { continue };
            // Between two arena places of the same storage, the bytes.
            let same = std::mem::discriminant(&from) == std::mem::discriminant(&r.home);
            if same && !matches!(r.home, Ref::Table(_)) {
                let n = r.ty.numel();
                let (src, dst) = (mem.ptr(from, n)? as *const u8, mem.ptr(r.home, n)?);
                // SAFETY: the steps are done; a home never overlaps the
                // planned buffers it is refreshed from, and `ptr` checked
                // that both places hold `n` elements of this storage.
                unsafe { std::ptr::copy_nonoverlapping(src, dst.cast::<u8>(), r.ty.size_bytes()) };
            } else {
                let v = read(mem, from, &r.ty)?;
                // SAFETY: the steps are done.
                unsafe { write(mem, r.home, &v)? };
            }
        }
        Ok(outputs)
    }

    /// Puts the carried values (in carried order) into their homes.
    pub fn load_carried(&self, values: &[Tensor]) -> Result<(), Diagnostic> {
        if values.len() != self.residents.len() {
            return Err(internal(format!("{} carried values for {} homes", values.len(), self.residents.len())));
        }
        let mut st = self.state()?;
        let mem = Mem::of(&mut st, &[], &self.fixed);
        for (r, v) in self.residents.iter().zip(values) {
            if v.ty() != r.ty {
                return Err(internal(format!("a carried value of type {} for a home of {}", v.ty(), r.ty)));
            }
            match r.home {
                // SAFETY: nothing runs; the lock is held.
                home @ (Ref::Arena(_) | Ref::Half(_) | Ref::Wide(_) | Ref::Table(_)) => unsafe { write(mem, home, v)? },
                other => return Err(internal(format!("a carried value lives in {other:?}"))),
            }
        }
        Ok(())
    }

    /// The carried values, as the last run left them.
    pub fn read_carried(&self) -> Result<Vec<Tensor>, Diagnostic> {
        let all: Vec<usize> = (0..self.residents.len()).collect();
        self.read_carried_some(&all)
    }

    /// The carried values at positions `which`, as the last run left them.
    pub fn read_carried_some(&self, which: &[usize]) -> Result<Vec<Tensor>, Diagnostic> {
        let mut st = self.state()?;
        let mem = Mem::of(&mut st, &[], &self.fixed);
        which
            .iter()
            .map(|&i| match self.residents.get(i) {
                Some(r) => read(mem, r.home, &r.ty),
                None => Err(internal(format!("no carried value {i} of {}", self.residents.len()))),
            })
            .collect()
    }

    /// The value at `r` as a tensor of type `ty`.
    fn state(&self) -> Result<MutexGuard<'_, State>, Diagnostic> {
        self.state.lock().map_err(|_| internal("a previous run of this unit panicked"))
    }
}
