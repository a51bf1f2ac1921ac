//! Top-level statements computed on the backend: when an effect needs
//! values of the main unit (a `print(net(x))`, a model's initialization,
//! an inference over a large batch) whose work is large, the executor runs
//! the main unit's planned kernels that compute exactly those values as one
//! prepared unit, at the plan's places, instead of node by node on the
//! interpreter.
//!
//! Contract: the executor asks only when the work is large ([`work`] at
//! least [`MIN_WORK`]: below it, preparing a unit costs more than
//! interpreting). [`segment`] then returns the part of the main unit's plan
//! that computes `needed` (the nodes an effect needs that are not computed
//! yet, slots excluded), or why it does not apply ([`Unplanned`], which
//! `--verbose` reports), and the interpreter computes them as before: the
//! program has no plan, or a planned kernel computes some nodes of `needed`
//! and some that are not (fused across statements whose values are needed
//! at different times).
//!
//! The segment's kernels keep the plan's devices (the interpreter runs the
//! ones the target has no code for, as in a training step) and buffers: the
//! memory plan gives values alive at the same time disjoint bytes over the
//! whole main unit's order, so also over a part of it in the same order;
//! but a value the segment hands out may be read outside the main unit's
//! kernels too, so one whose bytes a later kernel of the segment reuses
//! gets bytes of its own after the plan's arena.
//! Values are the backend's (the interpreter's up to rounding: the matmul
//! summation order, polynomial `exp`).
//!
//! Example: `print(net(x))` for a `[10000, 64]` `x`: the products run on
//! `gemm` and the activations as compiled code.

use crate::ir::compiled::CompiledUnit;
use crate::ir::{NodeId, Op, Program};
use crate::tensor::Values;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// The estimated work (about an element or a multiply-add each) from which
/// statements run on the backend: about a millisecond interpreted.
pub const MIN_WORK: u64 = 1 << 21;

/// A part of the main unit's plan, ready to prepare.
pub struct Segment {
    pub unit: CompiledUnit,
    /// Its nodes, in the plan's order.
    pub nodes: Vec<NodeId>,
    /// The values read after it (by later statements, effects or plans).
    pub outputs: Vec<NodeId>,
}

/// Why statements with much work stay on the interpreter: the plan does
/// not cover exactly their values (the reason, for `--verbose`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unplanned(pub &'static str);

/// The part of the main unit's plan that computes `needed` (see the module
/// docs); `roots` are the nodes effects and plans read.
pub fn segment(p: &Program, needed: &[NodeId], values: &Values, roots: &HashSet<NodeId>) -> Result<Segment, Unplanned> {
    let units = p.compiled.as_ref().map(|c| c.units.as_slice()).unwrap_or_default();
    let main = units.iter().find(|u| u.region.is_none()).ok_or(Unplanned("the program has no plan"))?;
    let wanted: HashSet<NodeId> = needed.iter().copied().collect();
    let mut index: HashMap<usize, usize> = HashMap::default();
    let mut kernels = Vec::new();
    for (ki, k) in main.kernels.iter().enumerate() {
        let inside = k.nodes.iter().filter(|n| wanted.contains(n)).count();
        if inside == 0 {
            continue;
        }
        if inside < k.nodes.len() {
            return Err(Unplanned("a planned kernel also computes values needed later"));
        }
        index.insert(ki, kernels.len());
        kernels.push(k.clone());
    }
    let nodes: Vec<NodeId> =
        main.order.iter().filter_map(|k| index.get(k)).flat_map(|&k| kernels[k].nodes.clone()).collect();
    if nodes.len() != wanted.len() {
        return Err(Unplanned("some values are outside the main unit's plan"));
    }
    let computed: HashSet<NodeId> = nodes.iter().copied().collect();
    let g = &p.graph;
    let read_later = |n: &NodeId| roots.contains(n) || g.users(*n).iter().any(|u| !computed.contains(u));
    // A unit that reads a `broadcast_to` computed here may read it as a
    // broadcast of its source (`ir::kernel_desc::part_spec`): the source
    // leaves the segment too.
    let widened_later = |n: &NodeId| {
        g.users(*n)
            .iter()
            .any(|u| matches!(g.node(*u).op, Op::BroadcastTo { .. }) && computed.contains(u) && read_later(u))
    };
    let read_later = |n: &NodeId| read_later(n) || widened_later(n);
    let outputs: Vec<NodeId> = nodes.iter().copied().filter(|n| read_later(n) && !values.contains_key(n)).collect();
    let produced: HashSet<NodeId> = kernels.iter().flat_map(|k| k.outputs.iter().copied()).collect();
    let mut buffers: Vec<_> = main.buffers.iter().filter(|b| produced.contains(&b.node)).cloned().collect();
    let mut arena_bytes = buffers.iter().map(|b| b.offset + b.bytes).max().unwrap_or(0);
    // The main plan lets a value's bytes go once its last reader *in the
    // main unit* ran; a value this segment hands out may have readers
    // elsewhere (a region, a later statement), so one whose bytes a later
    // kernel of the segment takes moves to bytes of its own after the rest.
    let kept: HashSet<NodeId> = outputs.iter().copied().collect();
    let overlap = |a: &crate::ir::compiled::Buffer, b: &crate::ir::compiled::Buffer| {
        a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes
    };
    let clobbered: Vec<usize> = (0..buffers.len())
        .filter(|&i| {
            let o = &buffers[i];
            kept.contains(&o.node) && buffers.iter().any(|b| b.node != o.node && b.first > o.first && overlap(o, b))
        })
        .collect();
    for i in clobbered {
        let at = arena_bytes.next_multiple_of(main.align.max(1));
        buffers[i].offset = at;
        arena_bytes = at + buffers[i].bytes;
    }
    let unit = CompiledUnit {
        name: "statements".into(),
        region: None,
        ops_before: nodes.len(),
        ops_after: nodes.len(),
        order: main.order.iter().filter_map(|k| index.get(k).copied()).collect(),
        kernels,
        buffers,
        arena_bytes,
        align: main.align,
        loops: main.loops.iter().filter(|l| computed.contains(&l.node)).cloned().collect(),
        ..CompiledUnit::default()
    };
    Ok(Segment { unit, nodes, outputs })
}

/// About how many elements and multiply-adds computing `nodes` takes.
pub fn work(p: &Program, nodes: &[NodeId]) -> u64 {
    graph_work(&p.graph, nodes)
}

/// [`work`] of `nodes` of `g` (a scan's: its body's, once per step).
fn graph_work(g: &crate::ir::Graph, nodes: &[NodeId]) -> u64 {
    let size = |n: NodeId| g.node(n).ty.numel() as u64;
    nodes
        .iter()
        .map(|&n| {
            let ins = g.inputs(n);
            match &g.node(n).op {
                Op::MatMul | Op::QuantMatMul { .. } => {
                    size(n) * ins.first().and_then(|&a| g.node(a).ty.shape.last().copied()).unwrap_or(1) as u64
                }
                // Each output element of a convolution sums a window of
                // `weights / output channels` products.
                Op::Conv2d { .. } => {
                    let w = ins.get(1).map(|&w| &g.node(w).ty);
                    let per_output = w.map_or(1, |w| w.numel() / w.shape.last().copied().unwrap_or(1).max(1));
                    size(n) * per_output as u64
                }
                Op::Scan(body) => body.length as u64 * graph_work(&body.graph, &body.graph.node_ids()),
                _ => size(n),
            }
        })
        .sum()
}
