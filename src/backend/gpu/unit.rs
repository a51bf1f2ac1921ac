//! One region's unit on the GPU: the plan's kernels as compute shaders
//! over two device buffers, the kernels the plan leaves to the host run by
//! the reference interpreter between them.
//!
//! Contract: `GpuUnit::prepare` lays out every value the unit reads or
//! computes — the region's inputs and the values it reads from outside in
//! `io`, each kernel's stored values (`kernels::stored`) in `vals`, one
//! word an element, where the memory plan's GPU arena puts them
//! (`arena`: values whose lifetimes do not overlap share words; a
//! training step's new parameters and optimizer states are written over
//! the old ones in `io`), the rest in words of the unit's own after it —
//! and builds one pipeline per shader. A run uploads the inputs, records
//! every shader in order into one command buffer and reads back only the
//! outputs; carried values (a training step's parameters and optimizer
//! states) stay in `io` between runs: those the step did not write in
//! place are copied there at the end of each run (a carried input passed
//! through goes by scratch words first, so that any permutation is safe).
//! A `scan` is a unit of its own for its body, whose shaders are recorded
//! once per step with copies between the two units' buffers. A gather or
//! scatter-add that meets an index out of range sets its error flag (a
//! word after its value, outside the plan's arena); the run then stops
//! before its updates land, with the interpreter's error. A host kernel
//! (`Device::Host` in the plan, which says why) ends the command buffer:
//! the values the plan moves to the host for it (`ir::transfers`) are read
//! back, the interpreter computes its nodes and those the plan moves to
//! the GPU are written back. Values of dtypes the GPU does
//! not hold (`kernels::on_device`) live on the host.
//!
//! Example: the MLP's training step on the GPU is one pass of ~60 shaders
//! (products, epilogues, reductions, Adam's update), one upload of the
//! batch and one read-back of the loss.

use super::arena::{Arena, Inner, Words};
use super::device::{gpu, Gpu};
use super::kernels::{checked, on_device, scan_of, shaders, stored};
use super::wgsl::{anchors, Buf, Place, Shader};
use crate::backend::{StepCounts, StepTime};
use crate::diag::{Diagnostic, Span};
use crate::ir::compiled::{CompiledUnit, Device, KernelKind};
use crate::ir::{DType, NodeId, Op, Program, TensorType};
use crate::tensor::{eval_node, flat, Data, Tensor};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A unit ready to run on the GPU.
pub struct GpuUnit {
    gpu: &'static Gpu,
    io: wgpu::Buffer,
    vals: wgpu::Buffer,
    /// Where a copy within one buffer goes through (wgpu copies only
    /// between two buffers): as large as the largest value of this unit
    /// and of its loops' bodies.
    scratch: wgpu::Buffer,
    scratch_words: u64,
    bind: wgpu::BindGroup,
    bytes: usize,
    steps: Vec<Step>,
    /// Where each value lives, and its type.
    homes: HashMap<NodeId, Home>,
    types: HashMap<NodeId, TensorType>,
    /// Values from outside the unit that host kernels read, kept on the
    /// host as well as uploaded.
    host_copies: HashMap<NodeId, Tensor>,
    /// Each region input, by position.
    inputs: Vec<Input>,
    /// The region's outputs.
    outputs: Vec<(NodeId, TensorType)>,
    carried: usize,
    /// After a run that carries: the copies of the carried values not
    /// written in place to their inputs' words (an input passed through by
    /// scratch words, so that any permutation is safe).
    carry: Vec<Arc<wgpu::ComputePipeline>>,
    carry_shaders: Vec<Shader>,
    /// The kernels that check their indices: each one's error flag, and
    /// its anchor to evaluate on the host for the interpreter's error.
    checks: Vec<(Place, HostNode)>,
    state: Mutex<State>,
    counts: StepCounts,
    profiling: AtomicBool,
    nanos: Vec<AtomicU64>,
}

/// A region input: its slot node (none when the unit does not read it),
/// type and where it lives.
struct Input {
    node: Option<NodeId>,
    ty: TensorType,
    home: Home,
}

/// What a run keeps: the carried values the GPU does not hold, by input
/// position.
#[derive(Default)]
struct State {
    host_carried: HashMap<usize, Tensor>,
}

/// Where a value lives.
#[derive(Clone, Debug)]
enum Home {
    Device(Place),
    /// A value of a dtype the GPU does not hold: a host input by position,
    /// a value from outside, or one a host kernel computes each run.
    HostInput,
    HostFixed(Tensor),
    HostComputed,
}

enum Step {
    Shader {
        pipeline: Arc<wgpu::ComputePipeline>,
        shader: Shader,
        gemm: bool,
    },
    /// A host kernel: its nodes, what the plan reads back for it and which
    /// of its values it writes back.
    Host {
        label: String,
        nodes: Vec<HostNode>,
        reads: Vec<NodeId>,
        writes: Vec<NodeId>,
    },
    Scan(Box<Loop>),
}

/// A `scan` on the GPU: its body prepared as a unit of its own (no host
/// kernels: the plan puts such a loop on the host), run once per step,
/// with copies between the two units' buffers around it.
struct Loop {
    body: GpuUnit,
    /// The scan's operands in this unit: initial carries, scanned values,
    /// captured values.
    operands: Vec<Place>,
    /// Its packed value in this unit: the current carries (the final ones
    /// in the end), the stacked outputs, the carries entering each step.
    packed: Place,
    /// Words of each carry, each slice of a scanned value, each output.
    carry_words: Vec<u32>,
    slice_words: Vec<u32>,
    output_words: Vec<u32>,
    length: usize,
    reverse: bool,
    saves_carries: bool,
    label: String,
}

impl Loop {
    /// The loop of scan node `n` of `unit`, whose values lie where `place` says.
    fn prepare(
        g: &crate::ir::Graph,
        unit: &CompiledUnit,
        n: NodeId,
        place: &dyn Fn(NodeId) -> Option<Place>,
    ) -> Result<Loop, Diagnostic> {
        let Op::Scan(scan) = &g.node(n).op else { return Err(Diagnostic::internal("gpu: a loop that is not a scan")) };
        let plan = unit
            .loops
            .iter()
            .find(|l| l.node == n)
            .ok_or_else(|| Diagnostic::internal("gpu: a scan without the plan of its body"))?;
        let body_unit = plan
            .body
            .compiled
            .as_ref()
            .and_then(|c| c.units.first())
            .ok_or_else(|| Diagnostic::internal("gpu: a scan body without a unit"))?;
        let region = crate::ir::plan::Region {
            id: crate::ir::plan::RegionId(usize::MAX),
            inputs: scan.inputs.iter().cloned().enumerate().collect(),
            outputs: scan.graph.outputs.clone(),
        };
        let slot_pos: HashMap<usize, usize> = (0..scan.inputs.len()).map(|i| (i, i)).collect();
        let body = GpuUnit::prepare(&plan.body, body_unit, &region, &slot_pos, &HashMap::new(), 0)?;
        let missing = || Diagnostic::internal("gpu: a scan's operand is not on the GPU");
        let operands = g.inputs(n).iter().map(|&i| place(i).ok_or_else(missing)).collect::<Result<_, _>>()?;
        let words = |t: &TensorType| t.numel() as u32;
        Ok(Loop {
            operands,
            packed: place(n).ok_or_else(missing)?,
            carry_words: scan.inputs[..scan.carries].iter().map(words).collect(),
            slice_words: scan.inputs[scan.carries..scan.carries + scan.xs].iter().map(words).collect(),
            output_words: scan.output_types().iter().map(words).collect(),
            length: scan.length,
            reverse: scan.reverse,
            saves_carries: scan.saves_carries,
            label: format!("gpu: scan of {} steps over a body of {} shaders", scan.length, body.shaders().len()),
            body,
        })
    }
}

/// One command of a run, recorded into the step's command buffer: a
/// shader over a unit's bind group, or a copy between two buffers.
enum Command<'a> {
    Dispatch(&'a wgpu::ComputePipeline, &'a wgpu::BindGroup, [u32; 3]),
    Copy { from: (&'a wgpu::Buffer, Place), to: (&'a wgpu::Buffer, Place), words: u32 },
}

struct HostNode {
    node: NodeId,
    op: Op,
    ty: TensorType,
    span: Span,
    args: Vec<NodeId>,
}

impl GpuUnit {
    pub fn prepare(
        program: &Program,
        unit: &CompiledUnit,
        region: &crate::ir::plan::Region,
        slot_pos: &HashMap<usize, usize>,
        outside: &HashMap<NodeId, Tensor>,
        carried: usize,
    ) -> Result<GpuUnit, Diagnostic> {
        let gpu = gpu()?;
        let g = &program.graph;
        let mut io = Words { buf: Buf::Io, next: 0 };
        let mut homes: HashMap<NodeId, Home> = HashMap::new();
        let mut uploads: Vec<(Place, Tensor)> = Vec::new();
        // The region's inputs, by position.
        let all_nodes: Vec<NodeId> = unit.kernels.iter().flat_map(|k| k.nodes.iter().copied()).collect();
        let mut slot_nodes: HashMap<usize, NodeId> = HashMap::new();
        for &n in &all_nodes {
            if let Op::Slot { slot, .. } = g.node(n).op {
                let &p = slot_pos
                    .get(&slot)
                    .ok_or_else(|| Diagnostic::internal(format!("gpu: region input slot {slot} is unbound")))?;
                slot_nodes.insert(p, n);
            }
        }
        let mut inputs = Vec::with_capacity(region.inputs.len());
        for (p, (_, ty)) in region.inputs.iter().enumerate() {
            let node = slot_nodes.get(&p).copied();
            // (An input the unit does not read keeps words all the same: a
            // carried one is kept for the next run, a loop body's is copied in.)
            let home = match on_device(ty.dtype) {
                true => Home::Device(io.take(ty.numel())?),
                false => Home::HostInput,
            };
            if let Some(n) = node {
                homes.insert(n, home.clone());
            }
            inputs.push(Input { node, ty: ty.clone(), home });
        }
        // What the plan moves between the host and the GPU (`ir::transfers`),
        // and the values from outside the unit a host kernel reads (kept on
        // the host too: the plan moves only what the unit computes or holds).
        let transfers = crate::ir::transfers::of(g, unit);
        let in_unit: std::collections::HashSet<NodeId> = all_nodes.iter().copied().collect();
        let host_kernel_nodes = unit.kernels.iter().filter(|k| k.device == Device::Host).flat_map(|k| &k.nodes);
        let host_reads: std::collections::HashSet<NodeId> =
            host_kernel_nodes.flat_map(|&n| g.inputs(n)).filter(|i| !in_unit.contains(i)).collect();
        let mut host_copies: HashMap<NodeId, Tensor> = HashMap::new();
        // Values from outside the unit, and constants: uploaded once.
        let mut fixed = |n: NodeId, homes: &mut HashMap<NodeId, Home>| -> Result<(), Diagnostic> {
            if homes.contains_key(&n) {
                return Ok(());
            }
            let node = g.node(n);
            let value = match outside.get(&n) {
                Some(v) => v.clone(),
                None => eval_node(&node.op, &[], &node.ty)
                    .map_err(|_| Diagnostic::internal(format!("gpu: value {n:?} read by the unit was not computed")))?,
            };
            let home = match on_device(node.ty.dtype) {
                true => {
                    let place = io.take(node.ty.numel())?;
                    if host_reads.contains(&n) {
                        host_copies.insert(n, value.clone());
                    }
                    uploads.push((place, value));
                    Home::Device(place)
                }
                false => Home::HostFixed(value),
            };
            homes.insert(n, home);
            Ok(())
        };
        for &n in &all_nodes {
            let node = g.node(n);
            if !matches!(node.op, Op::Slot { .. })
                && unit.kernels.iter().any(|k| k.kind == KernelKind::Source && k.nodes.contains(&n))
            {
                fixed(n, &mut homes)?;
            }
            for i in g.inputs(n) {
                if !in_unit.contains(&i) {
                    fixed(i, &mut homes)?;
                }
            }
        }
        // A part reads a broadcast made outside the unit from its source
        // (`kernel_desc::part_spec`).
        let loads =
            unit.kernels.iter().flat_map(|k| &k.desc.parts).filter_map(|p| p.spec.as_ref()).flat_map(|s| &s.loads);
        let read = loads.map(|l| l.node).chain(region.outputs.iter().copied());
        for n in read.collect::<Vec<_>>() {
            if !in_unit.contains(&n) {
                fixed(n, &mut homes)?;
            }
        }
        // Every kernel's stored values: where the memory plan put them, else
        // in words of the unit's own after the plan's arena.
        let mut checks = Vec::new();
        let order: Vec<usize> =
            if unit.order.is_empty() { (0..unit.kernels.len()).collect() } else { unit.order.clone() };
        let arena = Arena::of(unit, &order)?;
        let mut vals = Words { buf: Buf::Vals, next: arena.words() };
        // A training step's updates land in its inputs while it runs unless
        // a checked kernel could still stop it (a bad index stops the step
        // before its updates land), so then they are copied after it. An
        // input that is also an output is read after the step: never
        // written over.
        let updates_in_place = unit.kernels.iter().filter(|k| k.device == Device::Gpu).all(|k| checked(k).is_none());
        let mut inner = Inner::default();
        for &k in &order {
            let kernel = &unit.kernels[k];
            if kernel.kind == KernelKind::Source {
                continue;
            }
            let on_host = kernel.device == Device::Host;
            let values = if on_host { kernel.outputs.clone() } else { stored(kernel) };
            let check = if on_host { None } else { checked(kernel) };
            let mut inner_values = Vec::new();
            for n in values {
                let ty = &g.node(n).ty;
                let over_input = arena
                    .over_input(n)
                    .filter(|slot| updates_in_place && !region.outputs.contains(slot))
                    .and_then(|slot| match homes.get(&slot) {
                        Some(Home::Device(place)) => Some(*place),
                        _ => None,
                    });
                if check == Some(n) {
                    // The shader sets the error flag in the word after the
                    // value, which the plan does not size: words of its own.
                    let place = vals.take(ty.numel() + 1)?;
                    let node = g.node(n);
                    let host = HostNode {
                        node: n,
                        op: node.op.clone(),
                        ty: node.ty.clone(),
                        span: node.span,
                        args: g.inputs(n),
                    };
                    checks.push((Place { buf: place.buf, word: place.word + ty.numel() as u32 }, host));
                    homes.entry(n).or_insert(Home::Device(place));
                    continue;
                }
                let to_gpu = || transfers.iter().any(|t| t.node == n && t.to == Device::Gpu);
                let home = match (on_device(ty.dtype), on_host, arena.word(n).or(over_input)) {
                    (false, ..) => Home::HostComputed,
                    (true, true, _) if !to_gpu() => Home::HostComputed,
                    (true, false, Some(place)) => Home::Device(place),
                    // A value only the kernel's own shaders read.
                    (true, false, None) if !kernel.outputs.contains(&n) => {
                        inner_values.push((n, ty.numel()));
                        continue;
                    }
                    _ => Home::Device(vals.take(ty.numel())?),
                };
                homes.entry(n).or_insert(home);
            }
            inner.kernel(inner_values);
        }
        for (n, place) in inner.place(&mut vals)? {
            homes.entry(n).or_insert(Home::Device(place));
        }
        // The carried values' copies to their inputs.
        let outputs: Vec<(NodeId, TensorType)> = region.outputs.iter().map(|&o| (o, g.node(o).ty.clone())).collect();
        let place_of = |homes: &HashMap<NodeId, Home>, n: NodeId| match homes.get(&n) {
            Some(Home::Device(p)) => Some(*p),
            _ => None,
        };
        let mut carry_shaders = Vec::new();
        let first_carried = outputs.len().saturating_sub(carried);
        let input_base = inputs.len().saturating_sub(carried);
        let mut second = Vec::new();
        for j in 0..carried {
            let (out, ty) = &outputs[first_carried + j];
            let to = match inputs[input_base + j].home {
                Home::Device(place) => Some(place),
                _ => None,
            };
            let (Some(from), Some(to)) = (place_of(&homes, *out), to) else { continue };
            if from == to {
                continue;
            }
            // A value computed in `vals` goes straight to its input; one
            // that is itself an input (passed through) first to scratch,
            // before any input is written.
            if from.buf == Buf::Vals {
                second.push(anchors::copy(ty.numel(), [from, to], "carry to input"));
                continue;
            }
            let scratch = vals.take(ty.numel())?;
            carry_shaders.push(anchors::copy(ty.numel(), [from, scratch], "carry to scratch"));
            second.push(anchors::copy(ty.numel(), [scratch, to], "carry to input"));
        }
        carry_shaders.extend(second);
        // The steps.
        let mut steps = Vec::new();
        let mut counts = StepCounts::default();
        for &k in &order {
            let kernel = &unit.kernels[k];
            if kernel.kind == KernelKind::Source {
                continue;
            }
            if kernel.device == Device::Host {
                let nodes = kernel
                    .nodes
                    .iter()
                    .map(|&n| {
                        let node = g.node(n);
                        HostNode {
                            node: n,
                            op: node.op.clone(),
                            ty: node.ty.clone(),
                            span: node.span,
                            args: g.inputs(n),
                        }
                    })
                    .collect();
                let why = kernel.why_host.clone().unwrap_or_default();
                let pos = order.iter().position(|&o| o == k).unwrap_or(usize::MAX);
                let reads = transfers.iter().filter(|t| t.before == pos && t.to == Device::Host).map(|t| t.node);
                let writes = transfers.iter().filter(|t| t.to == Device::Gpu && kernel.outputs.contains(&t.node));
                steps.push(Step::Host {
                    label: format!("host k{k}: {why}"),
                    nodes,
                    reads: reads.collect(),
                    writes: writes.map(|t| t.node).collect(),
                });
                counts.interp += 1;
                continue;
            }
            if let Some(n) = scan_of(g, kernel) {
                steps.push(Step::Scan(Box::new(Loop::prepare(g, unit, n, &|n| place_of(&homes, n))?)));
                continue;
            }
            let place = |n: NodeId| place_of(&homes, n);
            let kernel_shaders = shaders(g, kernel, &place).map_err(|(why, n)| {
                Diagnostic::internal(format!("gpu: the plan has kernel k{k} of `{}` on the GPU, but {why}", unit.name))
                    .label(g.node(n).span, "here")
            })?;
            for shader in kernel_shaders {
                let gemm = shader.label.starts_with("matmul");
                match gemm {
                    true => counts.gemm += 1,
                    false => counts.jit += 1,
                }
                steps.push(Step::Shader { pipeline: pipeline(gpu, &shader)?, shader, gemm });
            }
        }
        let carry = carry_shaders.iter().map(|s| pipeline(gpu, s)).collect::<Result<_, _>>()?;
        let (io_bytes, vals_bytes) = (io.next as u64 * 4, vals.next as u64 * 4);
        let limit = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
        if io_bytes.max(vals_bytes) > limit {
            let too_large = Diagnostic::new(
                crate::diag::Code::Unsupported,
                format!(
                    "`{}` needs {} MiB of GPU memory in one buffer, but `{}` binds at most {} MiB",
                    unit.name,
                    io_bytes.max(vals_bytes) >> 20,
                    gpu.info.name,
                    limit >> 20
                ),
            )
            .help("use a smaller batch, or `--device cpu` (the GPU backend does not yet split a unit's values over several buffers)");
            // The value that weighs most, at its line.
            let on_gpu = homes.iter().filter(|(_, h)| matches!(h, Home::Device(_))).map(|(&n, _)| n);
            let largest = on_gpu.max_by_key(|&n| (g.node(n).ty.numel(), std::cmp::Reverse(n.index())));
            return Err(match largest {
                Some(n) => {
                    let node = g.node(n);
                    let mib = (node.ty.numel() as u64 * 4) >> 20;
                    too_large
                        .label(node.span, format!("the largest value: `{}` {} ({mib} MiB)", node.op.name(), node.ty))
                }
                None => too_large,
            });
        }
        let buffer = |label: &str, bytes: u64| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes.max(16).next_multiple_of(16),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let (io_buf, vals_buf) = (buffer("tfc io", io_bytes), buffer("tfc vals", vals_bytes));
        let largest = homes.keys().map(|&n| g.node(n).ty.numel() as u64).max().unwrap_or(1);
        let nested = steps.iter().filter_map(|s| match s {
            Step::Scan(l) => Some(l.body.scratch_words),
            _ => None,
        });
        let scratch_words = nested.fold(largest, u64::max);
        let scratch = buffer("tfc scratch", scratch_words * 4);
        let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tfc unit"),
            layout: &gpu.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: io_buf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: vals_buf.as_entire_binding() },
            ],
        });
        let nanos = (0..steps.len()).map(|_| AtomicU64::new(0)).collect();
        let types = homes.keys().map(|&n| (n, g.node(n).ty.clone())).collect();
        let unit = GpuUnit {
            gpu,
            io: io_buf,
            vals: vals_buf,
            scratch,
            scratch_words,
            bind,
            bytes: (io_bytes + vals_bytes) as usize,
            steps,
            homes,
            types,
            host_copies,
            inputs,
            outputs,
            carried,
            carry,
            carry_shaders,
            checks,
            state: Mutex::new(State::default()),
            counts,
            profiling: AtomicBool::new(false),
            nanos,
        };
        for (place, value) in &uploads {
            unit.upload(*place, value)?;
        }
        Ok(unit)
    }

    /// The shaders of the unit, in run order (`tfc build --emit wgsl`).
    pub fn shaders(&self) -> Vec<&Shader> {
        let steps = self.steps.iter().filter_map(|s| match s {
            Step::Shader { shader, .. } => Some(shader),
            Step::Host { .. } | Step::Scan(_) => None,
        });
        steps.chain(&self.carry_shaders).collect()
    }

    fn buffer(&self, buf: Buf) -> &wgpu::Buffer {
        match buf {
            Buf::Io => &self.io,
            Buf::Vals => &self.vals,
        }
    }

    fn upload(&self, place: Place, value: &Tensor) -> Result<(), Diagnostic> {
        let words = to_words(value)?;
        self.gpu.queue.write_buffer(self.buffer(place.buf), place.word as u64 * 4, &words);
        Ok(())
    }

    /// Reads back values (each a place and a type), waiting for the GPU.
    fn download(&self, values: &[(Place, &TensorType)]) -> Result<Vec<Tensor>, Diagnostic> {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        let sizes: Vec<u64> = values.iter().map(|(_, ty)| ty.numel().max(1) as u64 * 4).collect();
        let total: u64 = sizes.iter().sum();
        let staging = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tfc read-back"),
            size: total,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.gpu.device.create_command_encoder(&Default::default());
        let mut at = 0;
        for ((place, _), &size) in values.iter().zip(&sizes) {
            encoder.copy_buffer_to_buffer(self.buffer(place.buf), place.word as u64 * 4, &staging, at, size);
            at += size;
        }
        self.gpu.queue.submit([encoder.finish()]);
        super::device::check()?;
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.gpu
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| super::device::failed(format!("gpu: waiting for the device failed: {e}")))?;
        rx.recv()
            .map_err(|_| super::device::failed("gpu: the read-back was dropped".into()))?
            .map_err(|e| super::device::failed(format!("gpu: the read-back failed: {e}")))?;
        let mapped = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| super::device::failed(format!("gpu: the read-back could not be mapped: {e}")))?;
        let mut out = Vec::with_capacity(values.len());
        let mut at = 0usize;
        for ((_, ty), &size) in values.iter().zip(&sizes) {
            let words = &mapped[at..at + (ty.numel() * 4)];
            out.push(from_words(words, ty)?);
            at += size as usize;
        }
        Ok(out)
    }

    /// Records `commands` into one command buffer — consecutive shaders in
    /// one compute pass — and submits it.
    fn dispatch(&self, commands: &[Command<'_>]) -> Result<(), Diagnostic> {
        if commands.is_empty() {
            return Ok(());
        }
        let mut encoder = self.gpu.device.create_command_encoder(&Default::default());
        let mut at = 0;
        while at < commands.len() {
            match &commands[at] {
                Command::Copy { from, to, words } => {
                    let (from_at, to_at, bytes) = (from.1.word as u64 * 4, to.1.word as u64 * 4, *words as u64 * 4);
                    match from.0 == to.0 {
                        true => {
                            encoder.copy_buffer_to_buffer(from.0, from_at, &self.scratch, 0, bytes);
                            encoder.copy_buffer_to_buffer(&self.scratch, 0, to.0, to_at, bytes);
                        }
                        false => encoder.copy_buffer_to_buffer(from.0, from_at, to.0, to_at, bytes),
                    }
                    at += 1;
                }
                Command::Dispatch(..) => {
                    let mut pass = encoder.begin_compute_pass(&Default::default());
                    while let Some(Command::Dispatch(pipeline, bind, [x, y, z])) = commands.get(at) {
                        pass.set_bind_group(0, *bind, &[]);
                        pass.set_pipeline(pipeline);
                        pass.dispatch_workgroups(*x, *y, *z);
                        at += 1;
                    }
                }
            }
        }
        self.gpu.queue.submit([encoder.finish()]);
        super::device::check()
    }

    /// The commands of a unit without host kernels (a loop's body), for
    /// one run: its shaders, its loops' steps.
    fn commands<'a>(&'a self, out: &mut Vec<Command<'a>>) -> Result<(), Diagnostic> {
        for step in &self.steps {
            match step {
                Step::Shader { pipeline, shader, .. } => {
                    out.push(Command::Dispatch(pipeline, &self.bind, shader.groups))
                }
                Step::Scan(l) => self.loop_commands(l, out)?,
                Step::Host { .. } => return Err(Diagnostic::internal("gpu: a loop's body has a host kernel")),
            }
        }
        Ok(())
    }

    /// The commands of loop `l` of this unit: its carries and captured
    /// values into the body's inputs, then per step the step's slices in,
    /// the body's commands, and its new carries and outputs out.
    fn loop_commands<'a>(&'a self, l: &'a Loop, out: &mut Vec<Command<'a>>) -> Result<(), Diagnostic> {
        let body = &l.body;
        let here = |p: Place| (self.buffer(p.buf), p);
        let there = |p: Place| (body.buffer(p.buf), p);
        let offset = |p: Place, words: u32| Place { buf: p.buf, word: p.word + words };
        let carries = l.carry_words.len();
        let xs = l.slice_words.len();
        let body_input = |k: usize| match body.inputs.get(k).map(|i| &i.home) {
            Some(Home::Device(p)) => Ok(*p),
            _ => Err(Diagnostic::internal("gpu: a loop's body input is not on the GPU")),
        };
        let body_output = |k: usize| match body.outputs.get(k).and_then(|(n, _)| body.homes.get(n)) {
            Some(Home::Device(p)) => Ok(*p),
            _ => Err(Diagnostic::internal("gpu: a loop's body output is not on the GPU")),
        };
        // The current carries live at the start of the packed value.
        let mut current = Vec::with_capacity(carries);
        let mut at = 0;
        for (k, &words) in l.carry_words.iter().enumerate() {
            current.push(offset(l.packed, at));
            out.push(Command::Copy { from: here(l.operands[k]), to: here(offset(l.packed, at)), words });
            at += words;
        }
        for k in carries + xs..l.operands.len() {
            let words = body.inputs[k].ty.numel() as u32;
            out.push(Command::Copy { from: here(l.operands[k]), to: there(body_input(k)?), words });
        }
        let outputs_at = at;
        let stacked: u32 = l.output_words.iter().skip(carries).map(|w| w * l.length as u32).sum();
        let saved_at = outputs_at + stacked;
        let steps: Vec<usize> = match l.reverse {
            true => (0..l.length).rev().collect(),
            false => (0..l.length).collect(),
        };
        for t in steps {
            let t32 = t as u32;
            let mut saved = saved_at;
            for (k, &words) in l.carry_words.iter().enumerate() {
                if l.saves_carries {
                    out.push(Command::Copy {
                        from: here(current[k]),
                        to: here(offset(l.packed, saved + t32 * words)),
                        words,
                    });
                    saved += words * l.length as u32;
                }
                out.push(Command::Copy { from: here(current[k]), to: there(body_input(k)?), words });
            }
            for (j, &words) in l.slice_words.iter().enumerate() {
                let from = offset(l.operands[carries + j], t32 * words);
                out.push(Command::Copy { from: here(from), to: there(body_input(carries + j)?), words });
            }
            body.commands(out)?;
            for (k, &words) in l.carry_words.iter().enumerate() {
                out.push(Command::Copy { from: there(body_output(k)?), to: here(current[k]), words });
            }
            let mut y_at = outputs_at;
            for (k, &words) in l.output_words.iter().enumerate().skip(carries) {
                out.push(Command::Copy {
                    from: there(body_output(k)?),
                    to: here(offset(l.packed, y_at + t32 * words)),
                    words,
                });
                y_at += words * l.length as u32;
            }
        }
        Ok(())
    }

    /// Runs the steps on `inputs` (all of them, or the head with the
    /// carried values in place) and returns the outputs `wanted`.
    fn execute(&self, head: &[Tensor], all: bool, wanted: std::ops::Range<usize>) -> Result<Vec<Tensor>, Diagnostic> {
        let mut state = self.state.lock().map_err(|_| Diagnostic::internal("gpu: a previous run panicked"))?;
        let given = if all { self.inputs.len() } else { self.inputs.len() - self.carried };
        // (A caller may bind more inputs than the region reads.)
        if head.len() < given || (!all && head.len() != given) {
            return Err(Diagnostic::internal(format!("gpu: {} inputs for {given}", head.len())));
        }
        let mut host: HashMap<NodeId, Tensor> = HashMap::new();
        for (input, value) in self.inputs.iter().zip(head) {
            match (&input.home, input.node) {
                (Home::Device(place), _) => self.upload(*place, value)?,
                (_, Some(node)) => {
                    host.insert(node, value.clone());
                }
                (_, None) => {}
            }
        }
        if !all {
            for (p, input) in self.inputs.iter().enumerate().skip(given) {
                if let (Some(node), Some(value)) = (input.node, state.host_carried.get(&p)) {
                    host.insert(node, value.clone());
                }
            }
        }
        for (flag, _) in &self.checks {
            self.gpu.queue.write_buffer(self.buffer(flag.buf), flag.word as u64 * 4, &[0; 4]);
        }
        let profiling = self.profiling.load(Ordering::Relaxed);
        let mut pending: Vec<Command<'_>> = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            crate::interrupt::check()?;
            let started = std::time::Instant::now();
            match step {
                Step::Shader { pipeline, shader, .. } => {
                    pending.push(Command::Dispatch(pipeline, &self.bind, shader.groups));
                    if profiling {
                        self.dispatch(&std::mem::take(&mut pending))?;
                        self.wait()?;
                    }
                }
                Step::Scan(l) => {
                    self.loop_commands(l, &mut pending)?;
                    if profiling {
                        self.dispatch(&std::mem::take(&mut pending))?;
                        self.wait()?;
                    }
                }
                Step::Host { nodes, reads, writes, .. } => {
                    self.dispatch(&std::mem::take(&mut pending))?;
                    self.check_indices()?;
                    self.run_host(nodes, reads, writes, &mut host)?;
                }
            }
            if profiling {
                self.nanos[i].fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
        if !all {
            let carry = self.carry.iter().zip(&self.carry_shaders);
            pending.extend(carry.map(|(p, s)| Command::Dispatch(p.as_ref(), &self.bind, s.groups)));
        }
        // Outputs are read before the carried copies overwrite inputs they
        // may be (an output that is a carried input passed through).
        let read: Vec<usize> = wanted.collect();
        let mut from_device: Vec<(Place, &TensorType)> = Vec::new();
        for &o in &read {
            let (node, ty) = &self.outputs[o];
            if let (Some(Home::Device(place)), false) = (self.homes.get(node), host.contains_key(node)) {
                from_device.push((*place, ty));
            }
        }
        let mut device_values = match pending.is_empty() {
            true => {
                self.check_indices()?;
                self.download(&from_device)?
            }
            false if self.carry.is_empty() => {
                self.dispatch(&pending)?;
                self.check_indices()?;
                self.download(&from_device)?
            }
            false => {
                let before = &pending[..pending.len() - self.carry.len()];
                self.dispatch(before)?;
                // A bad index stops the step before its updates land.
                self.check_indices()?;
                let values = self.download(&from_device)?;
                self.dispatch(&pending[pending.len() - self.carry.len()..])?;
                values
            }
        }
        .into_iter();
        // The carried values the GPU does not hold stay here.
        let first_carried = self.outputs.len() - self.carried;
        let base = self.inputs.len() - self.carried;
        for j in 0..self.carried {
            let (out, _) = &self.outputs[first_carried + j];
            if let Some(value) = host.get(out).cloned().or_else(|| match self.homes.get(out) {
                Some(Home::HostFixed(t)) => Some(t.clone()),
                _ => None,
            }) {
                if !matches!(self.inputs[base + j].home, Home::Device(_)) {
                    state.host_carried.insert(base + j, value);
                }
            }
        }
        let mut out = Vec::with_capacity(read.len());
        for &o in &read {
            let (node, _) = &self.outputs[o];
            let value = match (host.get(node), self.homes.get(node)) {
                (Some(v), _) => v.clone(),
                (None, Some(Home::Device(_))) => {
                    device_values.next().ok_or_else(|| Diagnostic::internal("gpu: an output was not read back"))?
                }
                (None, Some(Home::HostFixed(t))) => t.clone(),
                _ => return Err(Diagnostic::internal(format!("gpu: output {o} was not computed"))),
            };
            out.push(value);
        }
        Ok(out)
    }

    /// Fails with the interpreter's error when a gather or scatter-add met
    /// an index out of range (its flag is set): the first such kernel's
    /// operands, read back, evaluated on the host.
    fn check_indices(&self) -> Result<(), Diagnostic> {
        if self.checks.is_empty() {
            return Ok(());
        }
        let flag_type = TensorType::scalar(DType::I32);
        let flags: Vec<(Place, &TensorType)> = self.checks.iter().map(|(p, _)| (*p, &flag_type)).collect();
        let set = self.download(&flags)?.iter().position(|f| f.to_f64_vec().first() != Some(&0.0));
        let Some((_, node)) = set.map(|k| &self.checks[k]) else { return Ok(()) };
        let mut host = HashMap::new();
        let reads = node.args.iter().map(|&a| match self.homes.get(&a) {
            Some(Home::Device(place)) => Ok((*place, self.type_of(a)?)),
            _ => Err(Diagnostic::internal("gpu: a checked kernel reads a value the GPU does not hold")),
        });
        let reads = reads.collect::<Result<Vec<_>, _>>()?;
        for (&a, value) in node.args.iter().zip(self.download(&reads)?) {
            host.insert(a, value);
        }
        let args: Vec<&Tensor> = node.args.iter().filter_map(|a| host.get(a)).collect();
        match eval_node(&node.op, &args, &node.ty) {
            Err(d) => Err(d.label(node.span, format!("while computing this `{}`", node.op.name()))),
            Ok(_) => {
                Err(Diagnostic::internal(format!("gpu: `{}` flagged an index the interpreter accepts", node.op.name())))
            }
        }
    }

    fn wait(&self) -> Result<(), Diagnostic> {
        self.gpu
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| super::device::failed(format!("gpu: waiting for the device failed: {e}")))
    }

    /// Runs a host kernel's `nodes` on the interpreter: reads back the
    /// values the plan moves to the host for it (`reads`), takes the rest
    /// of its operands from the host's values, and writes back the values
    /// the plan moves to the GPU (`writes`).
    fn run_host(
        &self,
        nodes: &[HostNode],
        reads: &[NodeId],
        writes: &[NodeId],
        host: &mut HashMap<NodeId, Tensor>,
    ) -> Result<(), Diagnostic> {
        let places = reads.iter().map(|&a| match self.homes.get(&a) {
            Some(Home::Device(place)) => Ok((*place, self.type_of(a)?)),
            _ => Err(Diagnostic::internal(format!("gpu: the plan reads back {a:?}, which the GPU does not hold"))),
        });
        let places = places.collect::<Result<Vec<_>, Diagnostic>>()?;
        for (&a, value) in reads.iter().zip(self.download(&places)?) {
            host.insert(a, value);
        }
        for n in nodes {
            for &a in &n.args {
                if host.contains_key(&a) {
                    continue;
                }
                let kept = match self.homes.get(&a) {
                    Some(Home::HostFixed(t)) => Some(t),
                    _ => self.host_copies.get(&a),
                };
                if let Some(t) = kept {
                    host.insert(a, t.clone());
                }
            }
            let args = n
                .args
                .iter()
                .map(|a| host.get(a).ok_or_else(|| Diagnostic::internal(format!("gpu: operand {a:?} is missing"))))
                .collect::<Result<Vec<&Tensor>, _>>()?;
            let value = eval_node(&n.op, &args, &n.ty)
                .map_err(|d| d.label(n.span, format!("while computing this `{}`", n.op.name())))?;
            if writes.contains(&n.node) {
                match self.homes.get(&n.node) {
                    Some(Home::Device(place)) => self.upload(*place, &value)?,
                    _ => {
                        return Err(Diagnostic::internal(format!("gpu: the plan writes back {:?} to no place", n.node)))
                    }
                }
            }
            host.insert(n.node, value);
        }
        Ok(())
    }

    fn type_of(&self, n: NodeId) -> Result<&TensorType, Diagnostic> {
        self.types.get(&n).ok_or_else(|| Diagnostic::internal(format!("gpu: value {n:?} has no type")))
    }

    /// The position of the first carried input.
    fn carried_base(&self) -> usize {
        self.inputs.len() - self.carried
    }
}

impl crate::backend::PreparedUnit for GpuUnit {
    fn backend(&self) -> &'static str {
        "gpu"
    }

    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        self.execute(inputs, true, 0..self.outputs.len())
    }

    fn run_head(&self, head: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        self.execute(head, false, 0..self.outputs.len() - self.carried)
    }

    fn load_carried(&self, values: &[Tensor]) -> Result<(), Diagnostic> {
        if values.len() != self.carried {
            return Err(Diagnostic::internal(format!("gpu: {} carried values for {}", values.len(), self.carried)));
        }
        let mut state = self.state.lock().map_err(|_| Diagnostic::internal("gpu: a previous run panicked"))?;
        let base = self.carried_base();
        for (j, value) in values.iter().enumerate() {
            match self.inputs[base + j].home {
                Home::Device(place) => self.upload(place, value)?,
                _ => {
                    state.host_carried.insert(base + j, value.clone());
                }
            }
        }
        Ok(())
    }

    fn read_carried(&self) -> Result<Vec<Tensor>, Diagnostic> {
        let state = self.state.lock().map_err(|_| Diagnostic::internal("gpu: a previous run panicked"))?;
        let base = self.carried_base();
        let carried = &self.inputs[base..];
        let on_device: Vec<(Place, &TensorType)> = carried
            .iter()
            .filter_map(|i| match i.home {
                Home::Device(p) => Some((p, &i.ty)),
                _ => None,
            })
            .collect();
        let mut read = self.download(&on_device)?.into_iter();
        let lost = || Diagnostic::internal("gpu: a carried value was never loaded");
        carried
            .iter()
            .enumerate()
            .map(|(j, i)| match i.home {
                Home::Device(_) => read.next().ok_or_else(lost),
                _ => state.host_carried.get(&(base + j)).cloned().ok_or_else(lost),
            })
            .collect()
    }

    fn counts(&self) -> StepCounts {
        self.counts
    }

    fn arena_bytes(&self) -> usize {
        self.bytes
    }

    fn is_threaded(&self) -> bool {
        false
    }

    fn set_profiling(&self, on: bool) {
        if on {
            self.nanos.iter().for_each(|n| n.store(0, Ordering::Relaxed));
        }
        self.profiling.store(on, Ordering::Relaxed);
    }

    /// With profiling on, every shader is submitted and waited for alone:
    /// its time is the device's for it plus one submission.
    fn profile(&self) -> Vec<StepTime> {
        let steps = self.steps.iter().zip(&self.nanos).enumerate();
        steps
            .map(|(index, (step, n))| StepTime {
                index,
                label: match step {
                    Step::Shader { shader, gemm: true, .. } => format!("gpu product: {}", shader.label),
                    Step::Shader { shader, .. } => format!("gpu: {}", shader.label),
                    Step::Host { label, .. } => label.clone(),
                    Step::Scan(l) => l.label.clone(),
                },
                seconds: n.load(Ordering::Relaxed) as f64 * 1e-9,
                within: None,
            })
            .collect()
    }
}

/// The pipeline of `shader`, compiled once per process for each source.
fn pipeline(gpu: &Gpu, shader: &Shader) -> Result<Arc<wgpu::ComputePipeline>, Diagnostic> {
    static CACHE: Mutex<Option<HashMap<String, Arc<wgpu::ComputePipeline>>>> = Mutex::new(None);
    let mut cache = CACHE.lock().map_err(|_| Diagnostic::internal("gpu: the pipeline cache is poisoned"))?;
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(p) = cache.get(&shader.source) {
        return Ok(p.clone());
    }
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(&shader.label),
        source: wgpu::ShaderSource::Wgsl(shader.source.as_str().into()),
    });
    let made = gpu.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(&shader.label),
        layout: Some(&gpu.pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    if let Some(error) = pollster::block_on(scope.pop()) {
        return Err(Diagnostic::internal(format!("gpu: the shader of `{}` did not compile: {error}", shader.label)));
    }
    let made = Arc::new(made);
    cache.insert(shader.source.clone(), made.clone());
    Ok(made)
}

/// The words of a value the GPU holds (`kernels::on_device`).
fn to_words(t: &Tensor) -> Result<Vec<u8>, Diagnostic> {
    Ok(match t.data() {
        Data::F32(a) => flat(a).iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::I32(a) => flat(a).iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::Bool(a) => flat(a).iter().flat_map(|&x| u32::from(x).to_le_bytes()).collect(),
        _ => return Err(Diagnostic::internal(format!("gpu: {} values are not kept on the GPU", t.dtype()))),
    })
}

/// A value of type `ty` from its words.
fn from_words(bytes: &[u8], ty: &TensorType) -> Result<Tensor, Diagnostic> {
    let words = bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    match ty.dtype {
        // A half type is kept as the f32 it is exactly.
        DType::F32 | DType::F16 | DType::BF16 => {
            Tensor::from_vec(ty.dtype, &ty.shape, words.map(f32::from_bits).collect::<Vec<f32>>())
        }
        DType::I32 => Tensor::from_vec(ty.dtype, &ty.shape, words.map(|w| w as i32).collect::<Vec<i32>>()),
        DType::Bool => Tensor::from_vec(ty.dtype, &ty.shape, words.map(|w| w != 0).collect::<Vec<bool>>()),
        d => Err(Diagnostic::internal(format!("gpu: {d} values are not kept on the GPU"))),
    }
}
