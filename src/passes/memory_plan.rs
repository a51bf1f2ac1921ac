//! Memory planning: per unit, one arena per device, and an offset in it for
//! every buffer.
//!
//! Buffers: every output of a computing kernel (not `Source`) gets one.
//! Unit inputs (captured values, region slots such as the batch, the
//! parameters and optimizer states of a training step) and constants live
//! outside the arena, in storage the runtime owns. Unit outputs (printed
//! values, values read by other units or plans, the loss and the new
//! parameters and states of a training step) do get arena buffers, live until
//! the end of the unit: the runtime reads them from the arena after the unit
//! ran — except the new parameters and optimizer states of a training step
//! that can be written over their old values ("Updates in place" below).
//! The others the runtime copies into the input's storage after the step
//! (the old value is dead by then); that storage is not part of the arena
//! and is not counted in `arena_bytes`.
//!
//! Lifetimes: a buffer is live from the position (in `order`) of the kernel
//! that writes it to the position of its last reader; a unit output to the
//! last position. The target names views (`Target::views`, recorded as
//! `CompiledUnit::views`): a transpose that only feeds matrix products
//! (`CompiledUnit::matmul_operand_transposes`, not a unit output), whose
//! source a backend can hand the products with exchanged strides instead,
//! and a 2x2 max pool's gradient, whose readers a backend may compute from
//! the pooled gradient and the pool's recorded maxima; a view's source is
//! also read by the view's readers.
//!
//! Sharing and threads: placement follows the sequential schedule — two
//! buffers may share bytes when their lifetimes (positions in `order`) are
//! disjoint. The threaded runner may run kernels in any order the
//! dependency counts allow, so for every such pair that the data
//! dependencies do not already order (buffer `a` *dies before* `b` when
//! every kernel that reads `a`, or its producer if nothing reads it, is a
//! strict ancestor of `b`'s producer: [`Reach`]), the plan adds *memory
//! edges* from `a`'s readers to `b`'s producer (`memory_edges`, counted in
//! `deps`). They point forward in `order`, so `order` stays valid and no
//! cycle can appear; they cost some inter-op parallelism between branches
//! that reuse each other's bytes, and buy an arena close to the lower bound.
//!
//! In-place reuse: an elementwise kernel may write an output over one of its
//! input buffers (same offset) when the input has as many elements as the
//! output and elements of the same width (so element `i` of both occupies
//! the same bytes), is not a unit output, and every other reader of it is a
//! strict ancestor of the kernel (so the kernel is its last reader in every
//! order). The kernel must consist of index-preserving ops only
//! (elementwise, reshape, broadcast, generators) with no node larger than
//! the output, so element `i` of the output depends only on element `i` of
//! that input and is written after it is read. Equal byte sizes alone are
//! not enough: an `f64[2]` broadcast and cast to `f32[2, 2]` in one kernel
//! has 16 bytes either way, but reads element 0 after element 1 of the
//! output overwrote it; an `f32 → f16` cast halves the width.
//! Never in place: an input still read later (or possibly concurrently),
//! or a unit output. An input takes at most one in-place output.
//!
//! Updates in place: a training step's new parameters and optimizer states
//! (`CompiledUnit::updates`, from `Unit::updates`) are written straight over the storage of the input they
//! replace (`Buffer::over_input`) when the kernel computing one reads the old
//! value only elementwise, at the output's index (in an elementwise kernel
//! or in the epilogue of a contraction or reduction, where optimizer updates
//! are fused), and every other reader of the old value is a strict ancestor
//! of it. Such a buffer takes no arena bytes. A backend keeps a product it
//! computes before the epilogue in scratch, never in such a buffer.
//!
//! Placement (TFLite's greedy-by-size arena planner): in-place chains form
//! groups sharing one offset; groups are placed largest first (ties: earlier
//! first position, then smaller node id), each at the best-fitting gap
//! (the smallest gap that fits, else the end) between the already-placed
//! groups whose lifetimes overlap its own. Offsets are multiples of the
//! target's alignment. With several devices each device's buffers are
//! planned separately (offsets are per device arena, elements of the size
//! that device stores them in: `Device::element_bytes`) and `arena_bytes`
//! is the sum of the arenas.
//!
//! `naive_bytes` is the sum of all buffer sizes (every kernel output in a
//! fresh buffer, as an executor without reuse allocates them);
//! `lower_bound_bytes` the most arena bytes live at one schedule position,
//! where an input overwritten in place at that position counts once with
//! its output. No plan of these arena buffers in the given order can use
//! less.
//!
//! Contract: the buffers are exactly the outputs of computing kernels with
//! the lifetimes above; an `over_input` buffer is an allowed update in
//! place; the others have 64-byte aligned offsets and fit in `arena_bytes`;
//! two arena buffers of one device whose bytes overlap are an allowed
//! in-place pair or one dies before the other in every order the data
//! dependencies and memory edges allow; `naive_bytes` is the sum and
//! `lower_bound_bytes ≤ arena_bytes`.
//!
//! Example: in `let a = exp(x); let b = a * 2.0; print(sum(b))`, `b` is
//! written over `a` (in place), and `sum(b)`, printed, lives to the end.

use super::partition::{ensure_kernels, KernelGraph, Reach};
use crate::diag::Diagnostic;
use crate::ir::compiled::{Buffer, CompiledUnit, Device, KernelKind};
use crate::ir::kernel_desc::Fusion;
use crate::ir::{NodeId, Op, Program, TensorType};
use crate::passes::PassCtx;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

pub fn run(p: &mut Program, ctx: &PassCtx) -> Result<(), Diagnostic> {
    ensure_kernels(p);
    let mut roots = p.clone();
    let roots: HashSet<NodeId> = roots.roots().into_iter().collect();
    let mut compiled = p.compiled.take().unwrap_or_default();
    for u in &mut compiled.units {
        u.views = (ctx.target.views)(u, &p.graph);
        u.align = ctx.target.align.max(1);
        plan_unit(p, u, &roots);
    }
    let fits = fits_the_device(p, &compiled, ctx);
    p.compiled = Some(compiled);
    fits
}

/// Every unit's arena is prepared when the program runs, and its sources
/// (constants, captured values, slots) are held beside it, so together they
/// must fit the device's memory (`Target::memory_bytes`); else E0902 before
/// anything runs, at the largest value, instead of a failed allocation.
fn fits_the_device(p: &Program, c: &crate::ir::compiled::Compiled, ctx: &PassCtx) -> Result<(), Diagnostic> {
    let Some(memory) = (ctx.target.memory_bytes)() else { return Ok(()) };
    let bytes = |n: NodeId| p.graph.node(n).ty.size_bytes() as u64;
    let sources: HashSet<NodeId> = c
        .units
        .iter()
        .flat_map(|u| &u.kernels)
        .filter(|k| k.kind == KernelKind::Source)
        .flat_map(|k| k.outputs.iter().copied())
        .collect();
    let arenas: u64 = c.units.iter().map(|u| u.arena_bytes as u64).sum();
    let needed = arenas + sources.iter().map(|&n| bytes(n)).sum::<u64>();
    if needed <= memory {
        return Ok(());
    }
    let gb = |b: u64| format!("{:.1} GB", b as f64 / 1e9);
    let mut d = Diagnostic::new(
        crate::diag::Code::OutOfMemory,
        format!("the plan needs {} of {} memory, and the device has {}", gb(needed), ctx.target.name, gb(memory)),
    )
    .help("use smaller shapes or batches; `tfc build --emit plan` lists every buffer");
    let buffers = c.units.iter().flat_map(|u| &u.buffers).filter(|b| b.over_input.is_none()).map(|b| b.node);
    if let Some(largest) = buffers.chain(sources.iter().copied()).max_by_key(|&n| bytes(n)) {
        let node = p.graph.node(largest);
        d = d.label(node.span, format!("the largest value: {} ({})", node.ty, gb(bytes(largest))));
    }
    Err(d)
}

/// A value that needs a buffer.
#[derive(Clone, Debug)]
struct Value {
    node: NodeId,
    kernel: usize,
    device: Device,
    ty: TensorType,
    bytes: usize,
    /// Kernels that read it (never its producer).
    readers: Vec<usize>,
    /// Read after the unit: lives to the end.
    to_end: bool,
    first: usize,
    last: usize,
}

/// What the planner needs about a unit, computed from its kernels alone.
struct Analysis {
    graph: KernelGraph,
    reach: Reach,
    values: Vec<Value>,
}

fn analyze(p: &Program, u: &CompiledUnit, roots: &HashSet<NodeId>) -> Analysis {
    let g = KernelGraph::with_roots(p, u, roots);
    let reach = Reach::new(&g);
    let n = u.kernels.len();
    let order: Vec<usize> = if is_permutation(&u.order, n) {
        u.order.clone()
    } else {
        super::schedule::order(u, &g).unwrap_or_else(|| (0..n).collect())
    };
    let mut pos = vec![0; n];
    for (i, &k) in order.iter().enumerate() {
        pos[k] = i;
    }
    let end = n.saturating_sub(1);
    let mut values = Vec::new();
    let mut seen = HashSet::default();
    for &k in &order {
        let kernel = &u.kernels[k];
        if kernel.kind == KernelKind::Source {
            continue;
        }
        for &node in &kernel.outputs {
            if !p.graph.contains(node) || !seen.insert(node) {
                continue;
            }
            let ty = p.graph.node(node).ty.clone();
            let readers = g.readers.get(&node).cloned().unwrap_or_default();
            let to_end = g.live_out.contains(&node);
            // A pool the plan fuses into the convolution before it is
            // written by that convolution's kernel (`passes::conv_pool`).
            let producer = match &kernel.fusion {
                Some(Fusion::PoolIntoConv { conv, .. }) if *conv < n => *conv,
                _ => k,
            };
            let first = pos[producer].min(pos[k]);
            let last = if to_end { end } else { readers.iter().map(|&r| pos[r]).max().unwrap_or(first).max(first) };
            values.push(Value {
                node,
                kernel: k,
                device: kernel.device.arena(),
                bytes: ty.numel() * kernel.device.element_bytes(ty.dtype),
                ty,
                readers,
                to_end,
                first,
                last,
            });
        }
    }
    extend_through_views(&u.views, &mut values);
    Analysis { graph: g, reach, values }
}

/// A view of a source (`(view, source)`, `CompiledUnit::views`) that a
/// backend may read through instead of the view itself — a transpose folded
/// into the matrix products reading it, a max pool's gradient computed from
/// the pooled gradient — makes the view's readers read its source: the
/// source takes the view's readers, and lives as long.
fn extend_through_views(views: &[(NodeId, NodeId)], values: &mut [Value]) {
    let index: HashMap<NodeId, usize> = values.iter().enumerate().map(|(i, v)| (v.node, i)).collect();
    for &(t, source) in views {
        let (Some(&ti), Some(&si)) = (index.get(&t), index.get(&source)) else { continue };
        if values[ti].to_end {
            continue;
        }
        let (readers, last) = (values[ti].readers.clone(), values[ti].last);
        let s = &mut values[si];
        for r in readers {
            if !s.readers.contains(&r) {
                s.readers.push(r);
            }
        }
        s.last = s.last.max(last);
    }
}

fn is_permutation(order: &[usize], n: usize) -> bool {
    let mut seen = vec![false; n];
    order.len() == n && order.iter().all(|&k| k < n && !std::mem::replace(&mut seen[k], true))
}

/// True when `a` is dead before `b` is written in every order the
/// dependencies allow.
fn dies_before(reach: &Reach, a: &Value, b: &Value) -> bool {
    if a.to_end {
        return false;
    }
    if a.readers.is_empty() {
        return reach.before(a.kernel, b.kernel);
    }
    a.readers.iter().all(|&r| reach.before(r, b.kernel))
}

/// True when every node of kernel `k` is index-preserving (elementwise,
/// reshape, broadcast, generators) and no larger than `numel` elements, so
/// element `i` of its outputs depends only on element `i` of its inputs.
fn index_preserving(p: &Program, u: &CompiledUnit, k: usize, numel: usize) -> bool {
    let kernel = &u.kernels[k];
    kernel.kind == KernelKind::Elementwise
        && kernel.nodes.iter().all(|&n| {
            let node = p.graph.node(n);
            let op_ok = node.op.is_elementwise()
                || matches!(
                    node.op,
                    Op::Reshape { .. }
                        | Op::BroadcastTo { .. }
                        | Op::Constant { .. }
                        | Op::Iota { .. }
                        | Op::Random { .. }
                );
            op_ok && node.ty.numel() <= numel
        })
}

/// True when kernel `out.kernel` may write `out` over its input `input`.
fn in_place_ok(p: &Program, u: &CompiledUnit, reach: &Reach, input: &Value, out: &Value) -> bool {
    let k = out.kernel;
    index_preserving(p, u, k, out.ty.numel())
        && input.device == out.device
        && same_layout(&input.ty, &out.ty)
        && !input.to_end
        && input.kernel != k
        && input.readers.contains(&k)
        && input.readers.iter().all(|&r| r == k || reach.before(r, k))
}

/// Same element count and element width: element `i` of both occupies the same bytes.
fn same_layout(a: &TensorType, b: &TensorType) -> bool {
    a.numel() == b.numel() && a.dtype.size_bytes() == b.dtype.size_bytes()
}

/// True when, inside kernel `k`, everything computed from `input` is
/// index-preserving and of `numel` elements: the kernel reads element `i`
/// of `input` only to compute element `i` of its outputs (in an
/// elementwise kernel, or the elementwise epilogue of a contraction or
/// reduction — e.g. the optimizer update fused after a gradient's matmul).
fn reads_only_elementwise(p: &Program, u: &CompiledUnit, k: usize, input: NodeId, numel: usize) -> bool {
    let nodes = &u.kernels[k].nodes;
    let mut tainted: HashSet<NodeId> = HashSet::from_iter([input]);
    for &n in nodes {
        if p.graph.inputs(n).iter().any(|i| tainted.contains(i)) {
            let node = p.graph.node(n);
            let elementwise =
                node.op.is_elementwise() || matches!(node.op, Op::Reshape { .. } | Op::BroadcastTo { .. });
            if !elementwise || node.ty.numel() != numel {
                return false;
            }
            tainted.insert(n);
        }
    }
    true
}

/// True when `out` may be written over the storage of the unit input
/// `slot` whose next value it is.
fn over_input_ok(p: &Program, u: &CompiledUnit, a: &Analysis, slot: NodeId, out: &Value) -> bool {
    let k = out.kernel;
    p.graph.contains(slot)
        && a.graph.kernel_of.get(&slot).is_some_and(|&s| u.kernels[s].kind == KernelKind::Source)
        && reads_only_elementwise(p, u, k, slot, out.ty.numel())
        && same_layout(&p.graph.node(slot).ty, &out.ty)
        && a.graph.readers.get(&slot).is_none_or(|rs| rs.iter().all(|&r| r == k || a.reach.before(r, k)))
}

/// Which values are written over a unit input: `result[i]` is the input
/// slot node value `i` replaces in place, if allowed.
fn over_inputs(p: &Program, u: &CompiledUnit, a: &Analysis) -> Vec<Option<NodeId>> {
    let mut result = vec![None; a.values.len()];
    for &(slot, out) in &u.updates {
        let Some(i) = a.values.iter().position(|v| v.node == out) else { continue };
        if result[i].is_none() && over_input_ok(p, u, a, slot, &a.values[i]) {
            result[i] = Some(slot);
        }
    }
    result
}

/// True when the lifetimes of `a` and `b` (positions in `order`) overlap.
fn lifetimes_overlap(a: &Value, b: &Value) -> bool {
    a.first <= b.last && b.first <= a.last
}

fn align_up(x: usize, align: usize) -> usize {
    x.div_ceil(align) * align
}

fn plan_unit(p: &Program, u: &mut CompiledUnit, roots: &HashSet<NodeId>) {
    let align = u.align;
    // Planning starts from the data dependencies alone.
    u.memory_edges.clear();
    let analysis = analyze(p, u, roots);
    let over = over_inputs(p, u, &analysis);
    let Analysis { reach, values, .. } = &analysis;
    let index: HashMap<NodeId, usize> = values.iter().enumerate().map(|(i, v)| (v.node, i)).collect();

    // In-place chains: `group[i]` is the group of value `i`.
    let mut group: Vec<usize> = (0..values.len()).collect();
    let mut taken = vec![false; values.len()];
    // Values are listed in schedule order, so a chain's head is grouped first.
    for (i, out) in values.iter().enumerate() {
        if over[i].is_some() {
            continue;
        }
        let mut inputs: Vec<usize> = Vec::new();
        for &n in &u.kernels[out.kernel].nodes {
            for input in p.graph.inputs(n) {
                if let Some(&j) = index.get(&input) {
                    if !inputs.contains(&j) && over[j].is_none() {
                        inputs.push(j);
                    }
                }
            }
        }
        if let Some(&j) = inputs.iter().find(|&&j| !taken[j] && in_place_ok(p, u, reach, &values[j], out)) {
            taken[j] = true;
            group[i] = group[j];
        }
    }
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); values.len()];
    for (i, &g) in group.iter().enumerate() {
        if over[i].is_none() {
            members[g].push(i);
        }
    }
    let groups: Vec<usize> = (0..values.len()).filter(|&g| !members[g].is_empty()).collect();
    let conflict = |g: usize, h: usize| {
        members[g].iter().any(|&a| members[h].iter().any(|&b| lifetimes_overlap(&values[a], &values[b])))
    };

    // Greedy by size, best fit, per device.
    let mut offset = vec![0usize; values.len()];
    let mut arena_bytes = 0;
    let mut devices: Vec<Device> = values.iter().map(|v| v.device).collect();
    devices.dedup();
    let mut seen_devices = Vec::new();
    for d in devices {
        if seen_devices.contains(&d) {
            continue;
        }
        seen_devices.push(d);
        let mut todo: Vec<usize> = groups.iter().copied().filter(|&g| values[g].device == d).collect();
        todo.sort_by_key(|&g| {
            let v = &values[g];
            (std::cmp::Reverse(v.bytes), v.first, v.node.index())
        });
        let mut placed: Vec<usize> = Vec::new();
        let mut arena = 0;
        for g in todo {
            let bytes = values[g].bytes;
            let mut busy: Vec<(usize, usize)> =
                placed.iter().filter(|&&h| conflict(g, h)).map(|&h| (offset[h], offset[h] + values[h].bytes)).collect();
            busy.sort_unstable();
            let mut cursor = 0;
            let mut best: Option<(usize, usize)> = None;
            for (start, stop) in busy {
                if start >= cursor {
                    let gap = start - cursor;
                    if gap >= bytes && best.is_none_or(|(size, _)| gap < size) {
                        best = Some((gap, cursor));
                    }
                }
                cursor = cursor.max(align_up(stop, align));
            }
            let at = best.map_or(cursor, |(_, at)| at);
            offset[g] = at;
            arena = arena.max(at + bytes);
            placed.push(g);
        }
        arena_bytes += arena;
    }

    u.buffers = values
        .iter()
        .enumerate()
        .map(|(i, v)| Buffer {
            node: v.node,
            device: v.device,
            over_input: over[i],
            offset: if over[i].is_some() { 0 } else { offset[group[i]] },
            bytes: v.bytes,
            first: v.first,
            last: v.last,
        })
        .collect();
    u.memory_edges = memory_edges(values, &group, &u.buffers, reach);
    u.deps = KernelGraph::with_roots(p, u, roots).preds.iter().map(Vec::len).collect();
    u.arena_bytes = arena_bytes;
    u.naive_bytes = values.iter().map(|v| v.bytes).sum();
    u.lower_bound_bytes = lower_bound(values, &group, &u.buffers, u.kernels.len());
}

/// The edges that make every sharing of arena bytes safe under the threaded
/// runner: for two buffers of different groups whose bytes overlap (their
/// lifetimes are disjoint, `a` first), each reader of `a` (or its producer)
/// that is not already an ancestor of `b`'s producer must finish before it.
fn memory_edges(values: &[Value], group: &[usize], buffers: &[Buffer], reach: &Reach) -> Vec<(usize, usize)> {
    let mut edges = std::collections::BTreeSet::new();
    for i in 0..values.len() {
        for j in i + 1..values.len() {
            let (bi, bj) = (&buffers[i], &buffers[j]);
            let in_arena = bi.over_input.is_none() && bj.over_input.is_none();
            let overlap = bi.offset < bj.offset + bj.bytes && bj.offset < bi.offset + bi.bytes;
            if !in_arena || !overlap || group[i] == group[j] || values[i].device != values[j].device {
                continue;
            }
            let (a, b) =
                if values[i].last < values[j].first { (&values[i], &values[j]) } else { (&values[j], &values[i]) };
            if dies_before(reach, a, b) {
                continue;
            }
            let finishers = if a.readers.is_empty() { vec![a.kernel] } else { a.readers.clone() };
            for r in finishers {
                if r != b.kernel && !reach.before(r, b.kernel) {
                    edges.insert((r, b.kernel));
                }
            }
        }
    }
    edges.into_iter().collect()
}

/// The most arena bytes live at one position; an in-place group counts once.
fn lower_bound(values: &[Value], group: &[usize], buffers: &[Buffer], positions: usize) -> usize {
    let mut best = 0;
    for pos in 0..positions {
        let mut live: Vec<usize> = values
            .iter()
            .enumerate()
            .filter(|(i, v)| buffers[*i].over_input.is_none() && v.first <= pos && pos <= v.last)
            .map(|(i, _)| group[i])
            .collect();
        live.sort_unstable();
        live.dedup();
        best = best.max(live.iter().map(|&g| values[g].bytes).sum());
    }
    best
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    let Some(c) = &p.compiled else { return Err("the program has no kernels".into()) };
    let mut roots = p.clone();
    let roots: HashSet<NodeId> = roots.roots().into_iter().collect();
    for u in &c.units {
        let analysis = analyze(p, u, &roots);
        let Analysis { reach, values, .. } = &analysis;
        let name = |n: NodeId| format!("node {} (`{}`)", n.index(), p.graph.node(n).op.name());
        if u.buffers.len() != values.len() {
            return Err(format!(
                "unit `{}` has {} buffers for {} kernel outputs",
                u.name,
                u.buffers.len(),
                values.len()
            ));
        }
        let mut placed: Vec<(&Value, &Buffer)> = Vec::new();
        for v in values {
            let Some(b) = u.buffers.iter().find(|b| b.node == v.node) else {
                return Err(format!("{} has no buffer in unit `{}`", name(v.node), u.name));
            };
            if let Some(slot) = b.over_input {
                if !u.updates.contains(&(slot, v.node)) || !over_input_ok(p, u, &analysis, slot, v) {
                    return Err(format!(
                        "in unit `{}`, {} is written over input {} without being its update or while it is read",
                        u.name,
                        name(v.node),
                        name(slot)
                    ));
                }
                continue;
            }
            if (b.bytes, b.first, b.last) != (v.bytes, v.first, v.last) {
                return Err(format!(
                    "the buffer of {} is {} bytes live [{}, {}], expected {} bytes live [{}, {}]",
                    name(v.node),
                    b.bytes,
                    b.first,
                    b.last,
                    v.bytes,
                    v.first,
                    v.last
                ));
            }
            if b.offset % u.align.max(1) != 0 || b.offset + b.bytes > u.arena_bytes {
                return Err(format!(
                    "the buffer of {} at {} (+{}) is unaligned or outside the {}-byte arena",
                    name(v.node),
                    b.offset,
                    b.bytes,
                    u.arena_bytes
                ));
            }
            placed.push((v, b));
        }
        // Same offset and bytes: possibly one of the allowed in-place pairs.
        let mut group: Vec<usize> = (0..placed.len()).collect();
        for (i, (a, ba)) in placed.iter().enumerate() {
            for (j, (b, bb)) in placed.iter().enumerate().skip(i + 1) {
                let overlap =
                    a.device == b.device && ba.offset < bb.offset + bb.bytes && bb.offset < ba.offset + ba.bytes;
                if !overlap {
                    continue;
                }
                let ordered = dies_before(reach, a, b) || dies_before(reach, b, a);
                let same_place = ba.offset == bb.offset;
                let in_place = same_place && (in_place_ok(p, u, reach, a, b) || in_place_ok(p, u, reach, b, a));
                if in_place && a.last == b.first {
                    group[j] = group[i];
                }
                if !ordered && !in_place {
                    return Err(format!(
                        "in unit `{}`, the buffers of {} and {} share bytes but may be live at the same time",
                        u.name,
                        name(a.node),
                        name(b.node)
                    ));
                }
            }
        }
        let naive: usize = values.iter().map(|v| v.bytes).sum();
        if u.naive_bytes != naive {
            return Err(format!("unit `{}` says naive_bytes = {}, the buffers sum to {naive}", u.name, u.naive_bytes));
        }
        let placed_values: Vec<Value> = placed.iter().map(|(v, _)| (*v).clone()).collect();
        let placed_buffers: Vec<Buffer> = placed.iter().map(|(_, b)| (*b).clone()).collect();
        let bound = lower_bound(&placed_values, &group, &placed_buffers, u.kernels.len());
        if u.lower_bound_bytes != bound || bound > u.arena_bytes {
            return Err(format!(
                "unit `{}` says lower_bound_bytes = {} (recomputed {bound}) with a {}-byte arena",
                u.name, u.lower_bound_bytes, u.arena_bytes
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::Options;

    /// The optimized program for `source`, checked after every pass, with
    /// one kernel per node (`fuse` off), so each op has its own buffer to
    /// move around.
    pub(crate) fn compile(source: &str) -> Program {
        let mut session = crate::driver::Session::new();
        let file = session.add_source("case.tfl", source);
        let opts = Options { verify: true, disabled: vec!["fuse".into()], ..Options::default() };
        match session.compile(file, &opts) {
            Ok(p) => p,
            Err(d) => panic!("{}", crate::diag::render(&d, &session.sources, false)),
        }
    }

    /// Moves the buffer of the node computed by op `moved` onto the buffer
    /// of op `onto` (in the last unit) and returns the postcondition's verdict.
    fn overlay(mut p: Program, moved: &str, onto: &str) -> Result<(), String> {
        let find = |p: &Program, name: &str| {
            p.graph.node_ids().into_iter().find(|&n| p.graph.node(n).op.name() == name).expect("op in the graph")
        };
        let (m, o) = (find(&p, moved), find(&p, onto));
        let u = p.compiled.as_mut().and_then(|c| c.units.last_mut()).expect("a unit");
        let at = u.buffers.iter().find(|b| b.node == o).expect("a buffer").offset;
        u.buffers.iter_mut().filter(|b| b.node == m).for_each(|b| b.offset = at);
        postcondition(&p)
    }

    #[test]
    fn independent_branches_may_not_share_bytes_without_a_memory_edge() {
        let mut p = compile("let xs = [[1.0, 2.0], [3.0, 4.0]]\nprint(collect(from_tensors(xs) |> map(fn(x) = sum(exp(x)) + sum(log(x)))))");
        assert_eq!(postcondition(&p), Ok(()));
        // Without the planner's memory edges, `exp` and `log` run in
        // either order or at once.
        for u in &mut p.compiled.as_mut().expect("kernels").units {
            u.memory_edges.clear();
        }
        let err = overlay(p, "log", "exp").expect_err("independent branches overlap");
        assert!(err.contains("share bytes but may be live at the same time"), "{err}");
    }

    #[test]
    fn every_planned_sharing_is_ordered_by_data_or_memory_edges() {
        // The planner's own plan for two branches that reuse each other's
        // bytes passes the threaded check only thanks to its memory edge.
        let src =
            include_str!("../../tests/cases/passes/memory_plan/reused_bytes_across_branches_get_a_memory_edge.tfl");
        let mut p = compile(src);
        assert_eq!(postcondition(&p), Ok(()));
        let edges: usize = p.compiled.as_ref().map_or(0, |c| c.units.iter().map(|u| u.memory_edges.len()).sum());
        assert!(edges > 0, "the case is meant to need a memory edge");
        for u in &mut p.compiled.as_mut().expect("kernels").units {
            u.memory_edges.clear();
        }
        assert!(postcondition(&p).is_err(), "without its memory edges the plan must be rejected");
    }

    #[test]
    fn a_value_read_later_may_not_be_overwritten_in_place() {
        let p = compile("let xs = [[1.0, 2.0], [3.0, 4.0]]\nprint(collect(from_tensors(xs) |> map(fn(x) = { let a = exp(x); let b = a * 2.0; sum(b + a) })))");
        assert_eq!(postcondition(&p), Ok(()));
        let err = overlay(p, "mul", "exp").expect_err("`a` is still read by `b + a`");
        assert!(err.contains("share bytes"), "{err}");
    }

    #[test]
    fn a_unit_output_may_not_be_overwritten() {
        let p = compile("let xs = [[1.0, 2.0], [3.0, 4.0]]\nprint(collect(from_tensors(xs) |> map(fn(x) = { let e = exp(x); (e, e * 2.0) })))");
        let err = overlay(p, "mul", "exp").expect_err("`e` is printed");
        assert!(err.contains("share bytes"), "{err}");
    }
}
