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
//! ran. In a training step, the runtime then updates the parameters and
//! optimizer states in place, copying each new value into its input's
//! storage (the old value is dead once the step finished); that storage is
//! not part of the arena and is not counted in `arena_bytes`.
//!
//! Lifetimes: a buffer is live from the position (in `order`) of the kernel
//! that writes it to the position of its last reader; a unit output to the
//! last position.
//!
//! Threaded safety: the threaded runner may run kernels in any order the
//! dependency counts allow, so schedule positions are not enough to decide
//! reuse. Buffer `a` *dies before* buffer `b` when `a` is not a unit output
//! and every kernel that reads `a` (or its producer, if nothing reads it) is
//! a strict ancestor of `b`'s producer ([`Reach`]): then every
//! permitted order finishes with `a` before `b` is written. Two buffers may
//! share bytes only if one dies before the other, or by in-place reuse. In
//! particular, buffers of independent branches never share memory.
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
//! Placement (TFLite's greedy-by-size arena planner): in-place chains form
//! groups sharing one offset; groups are placed largest first (ties: earlier
//! first position, then smaller node id), each at the best-fitting gap
//! (the smallest gap that fits, else the end) between the already-placed
//! groups it conflicts with. Offsets are multiples of 64 bytes. With
//! several devices each device's buffers are planned separately (offsets
//! are per device arena) and `arena_bytes` is the sum of the arenas.
//!
//! `naive_bytes` is the sum of all buffer sizes (no reuse);
//! `lower_bound_bytes` the most bytes live at one schedule position, where
//! an input overwritten in place at that position counts once with its
//! output. No plan of these buffers in the given order can use less.
//!
//! Contract: the buffers are exactly the outputs of computing kernels with
//! the lifetimes above; offsets are 64-byte aligned and every buffer fits in
//! `arena_bytes`; two buffers of one device whose bytes overlap are an
//! allowed in-place pair or one dies before the other (in the threaded
//! sense); `naive_bytes` is the sum and `lower_bound_bytes ≤ arena_bytes`.
//!
//! Example: in `let a = exp(x); let b = a * 2.0; print(sum(b))`, `b` is
//! written over `a` (in place), and `sum(b)`, printed, lives to the end.

use super::partition::{ensure_kernels, KernelGraph, Reach};
use crate::diag::Diagnostic;
use crate::ir::compiled::{Buffer, CompiledUnit, Device, KernelKind};
use crate::ir::{NodeId, Op, Program, TensorType};
use crate::passes::PassCtx;
use std::collections::{HashMap, HashSet};

/// Offsets are multiples of this.
pub const ALIGN: usize = 64;

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    ensure_kernels(p);
    let mut roots = p.clone();
    let roots: HashSet<NodeId> = roots.roots().into_iter().collect();
    let mut compiled = p.compiled.take().unwrap_or_default();
    for u in &mut compiled.units {
        plan_unit(p, u, &roots);
    }
    p.compiled = Some(compiled);
    Ok(())
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
    let mut seen = HashSet::new();
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
            let first = pos[k];
            let last = if to_end { end } else { readers.iter().map(|&r| pos[r]).max().unwrap_or(first).max(first) };
            values.push(Value {
                node,
                kernel: k,
                device: kernel.device,
                bytes: ty.size_bytes(),
                ty,
                readers,
                to_end,
                first,
                last,
            });
        }
    }
    Analysis { reach, values }
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

/// True when kernel `out.kernel` may write `out` over its input `input`.
fn in_place_ok(p: &Program, u: &CompiledUnit, reach: &Reach, input: &Value, out: &Value) -> bool {
    let k = out.kernel;
    let kernel = &u.kernels[k];
    let numel = out.ty.numel();
    let index_preserving = kernel.kind == KernelKind::Elementwise
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
        });
    index_preserving
        && input.device == out.device
        && input.ty.numel() == numel
        && input.ty.dtype.size_bytes() == out.ty.dtype.size_bytes()
        && !input.to_end
        && input.kernel != k
        && input.readers.contains(&k)
        && input.readers.iter().all(|&r| r == k || reach.before(r, k))
}

fn align_up(x: usize) -> usize {
    x.div_ceil(ALIGN) * ALIGN
}

fn plan_unit(p: &Program, u: &mut CompiledUnit, roots: &HashSet<NodeId>) {
    let Analysis { reach, values } = analyze(p, u, roots);
    let index: HashMap<NodeId, usize> = values.iter().enumerate().map(|(i, v)| (v.node, i)).collect();

    // In-place chains: `group[i]` is the group of value `i`.
    let mut group: Vec<usize> = (0..values.len()).collect();
    let mut taken = vec![false; values.len()];
    // Values are listed in schedule order, so a chain's head is grouped first.
    for (i, out) in values.iter().enumerate() {
        let mut inputs: Vec<usize> = Vec::new();
        for &n in &u.kernels[out.kernel].nodes {
            for input in p.graph.inputs(n) {
                if let Some(&j) = index.get(&input) {
                    if !inputs.contains(&j) {
                        inputs.push(j);
                    }
                }
            }
        }
        if let Some(&j) = inputs.iter().find(|&&j| !taken[j] && in_place_ok(p, u, &reach, &values[j], out)) {
            taken[j] = true;
            group[i] = group[j];
        }
    }
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); values.len()];
    for (i, &g) in group.iter().enumerate() {
        members[g].push(i);
    }
    let groups: Vec<usize> = (0..values.len()).filter(|&g| !members[g].is_empty()).collect();
    let conflict = |g: usize, h: usize| {
        members[g].iter().any(|&a| {
            members[h]
                .iter()
                .any(|&b| !dies_before(&reach, &values[a], &values[b]) && !dies_before(&reach, &values[b], &values[a]))
        })
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
                cursor = cursor.max(align_up(stop));
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
        .map(|(i, v)| Buffer { node: v.node, offset: offset[group[i]], bytes: v.bytes, first: v.first, last: v.last })
        .collect();
    u.arena_bytes = arena_bytes;
    u.naive_bytes = values.iter().map(|v| v.bytes).sum();
    u.lower_bound_bytes = lower_bound(&values, &group, u.kernels.len());
}

/// The most bytes live at one position; an in-place group counts once.
fn lower_bound(values: &[Value], group: &[usize], positions: usize) -> usize {
    let mut best = 0;
    for pos in 0..positions {
        let mut live: Vec<usize> =
            values.iter().enumerate().filter(|(_, v)| v.first <= pos && pos <= v.last).map(|(i, _)| group[i]).collect();
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
        let Analysis { reach, values } = analyze(p, u, &roots);
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
        for v in &values {
            let Some(b) = u.buffers.iter().find(|b| b.node == v.node) else {
                return Err(format!("{} has no buffer in unit `{}`", name(v.node), u.name));
            };
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
            if b.offset % ALIGN != 0 || b.offset + b.bytes > u.arena_bytes {
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
                let ordered = dies_before(&reach, a, b) || dies_before(&reach, b, a);
                let same_place = ba.offset == bb.offset;
                let in_place = same_place && (in_place_ok(p, u, &reach, a, b) || in_place_ok(p, u, &reach, b, a));
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
        let bound = lower_bound(&values, &group, u.kernels.len());
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
        let opts = Options { verify: true, disabled: vec!["fuse".into()] };
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
    fn independent_branches_may_not_share_bytes() {
        let p = compile("let xs = [[1.0, 2.0], [3.0, 4.0]]\nprint(collect(from_tensors(xs) |> map(fn(x) = sum(exp(x)) + sum(log(x)))))");
        assert_eq!(postcondition(&p), Ok(()));
        let err = overlay(p, "log", "exp").expect_err("independent branches overlap");
        assert!(err.contains("share bytes but may be live at the same time"), "{err}");
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
