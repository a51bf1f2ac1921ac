//! Kernel fusion: groups each compilation unit's nodes into kernels, the
//! units of code a backend generates (one loop nest, one library call with
//! an epilogue, one data-movement routine).
//!
//! Contract: per unit of `units::units`, the kernels partition the unit's
//! nodes; every kernel is convex and the kernel graph is acyclic; every
//! kernel has one iteration space; every value read outside its kernel
//! (by another kernel, another unit or the program) is an output of it.
//!
//! Requires nothing but a verified graph; annotates `Program::compiled`
//! without changing the graph.
//!
//! Node classes:
//! - *sources* — `slot` and `constant` — are one `Source` kernel each (a
//!   buffer, no code);
//! - *pointwise* nodes compute output element `i` from at most one element
//!   of each operand at an index known from `i`: the elementwise ops, the
//!   generators `iota` and `random_*` (their value depends only on the
//!   index), and the index maps `broadcast_to`, `reshape` and `one_hot`;
//! - *anchors* are reductions (`reduce_*`, `argmax`) and contractions
//!   (`matmul`, `conv2d` and its two gradients);
//! - *layout* ops (transpose, slice, pad, concat, gather, scatter_add,
//!   pooling and its gradient) are one `Layout` kernel each: they are not
//!   trivially indexable in a loop over their consumer's output.
//!
//! Rules (`classify` checks them, for the pass and for its postcondition):
//! - The *iteration space* of a kernel is a flat index `0..N`. Every
//!   pointwise member of an `Elementwise` kernel has `N` elements; a member
//!   reads an operand computed inside the kernel at its own flat index
//!   (`reshape`, and `broadcast_to`/`one_hot` that keep the element count,
//!   are identities on it), and any other operand from a buffer through
//!   its index map (so a broadcast bias is a load, not a second space).
//! - A `Reduction` kernel has one reduction, a *prologue* (the members it
//!   depends on, all with the reduction input's element count: input
//!   fusion, as in `sum(exp(x - m))`) and an *epilogue* (the other members,
//!   all with the reduction output's element count, as in `rsqrt(var +
//!   eps)`); the epilogue never reads the prologue.
//! - A `Contraction` kernel has one matmul or convolution and an epilogue
//!   of its output's element count (bias add through a broadcast,
//!   activation, residual add, an optimizer update of a weight gradient);
//!   no prologue: its operands are buffers the library routine reads.
//! - A kernel holds at most one reduction or contraction, so a reduction or
//!   contraction result used by another kernel is an output, never
//!   recomputed. Since kernels partition the nodes, no value is computed
//!   twice.
//! - Merging two groups is refused when a path leaves one and re-enters the
//!   other through a third kernel, so kernels stay convex and schedulable.
//!
//! How: in topological order, each non-source, non-layout node tries to
//! join the kernels of its operands, in operand order, keeping each merge
//! whose result still satisfies the rules and keeps the kernel graph
//! acyclic. Then anchor-free (Elementwise) kernels that read a common value
//! of their unit and share an iteration space merge the same way (sibling
//! fusion: Adam's two bias corrections are one scalar kernel). Kernels are
//! listed in a topological order of the kernel graph (ties by first node),
//! their nodes and outputs in unit order, except that a `Contraction`
//! kernel lists its matmul or convolution first (it reads nothing inside
//! the kernel; epilogue members that do not read it, such as a mask of
//! another value, may precede it in unit order).
//!
//! Example: in a training step with `x: f32[4, 3]`, `w: f32[3, 2]` and
//! `b: f32[2]` its slots, `relu(x @ w + b)`
//!
//! ```text
//! %0 = slot {slot=1} : f32[4, 3]          Source
//! %1 = slot {slot=2} : f32[3, 2]          Source
//! %2 = matmul %0, %1 : f32[4, 2]          Contraction K
//! %3 = slot {slot=3} : f32[2]             Source
//! %4 = broadcast_to %3 {shape=[4, 2]}     K (a broadcast load)
//! %5 = add %2, %4 : f32[4, 2]             K
//! %6 = relu %5 : f32[4, 2]                K, its output
//! ```
//!
//! is three `Source` kernels and one `Contraction` kernel K `[%2, %4, %5,
//! %6] -> [%6]`. The optimizer update of one parameter (new `m`, new `v`, new
//! value) is one kernel, joined to the epilogue of the gradient's matmul or
//! reduction.

use crate::diag::Diagnostic;
use crate::ir::compiled::{Compiled, CompiledUnit, Device, Kernel, KernelKind};
use crate::ir::{Graph, NodeId, Op, Program};
use crate::passes::units::{self, Unit};
use crate::passes::PassCtx;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeSet;

/// How fusion treats a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Source,
    Pointwise,
    Reduction,
    Contraction,
    Layout,
}

fn class(op: &Op) -> Class {
    match op {
        Op::Slot { .. } | Op::Constant { .. } => Class::Source,
        Op::Iota { .. } | Op::Random { .. } | Op::BroadcastTo { .. } | Op::Reshape { .. } | Op::OneHot { .. } => {
            Class::Pointwise
        }
        op if op.is_elementwise() => Class::Pointwise,
        Op::Reduce { .. } | Op::ArgMax { .. } => Class::Reduction,
        Op::MatMul
        | Op::QuantMatMul { .. }
        | Op::Conv2d { .. }
        | Op::Conv2dGradInput { .. }
        | Op::Conv2dGradFilter { .. } => Class::Contraction,
        _ => Class::Layout,
    }
}

fn numel(g: &Graph, n: NodeId) -> usize {
    g.node(n).ty.numel()
}

/// The kind of kernel `nodes` form, or why they cannot form one (the rules
/// of the module docs; convexity is checked separately).
fn classify(g: &Graph, nodes: &[NodeId]) -> Result<KernelKind, String> {
    let name = |n: NodeId| format!("node {} (`{}`)", n.index(), g.node(n).op.name());
    match nodes {
        [] => return Err("a kernel is empty".into()),
        [n] => {
            return Ok(match class(&g.node(*n).op) {
                Class::Source => KernelKind::Source,
                Class::Pointwise => KernelKind::Elementwise,
                Class::Reduction => KernelKind::Reduction,
                Class::Contraction => KernelKind::Contraction,
                Class::Layout => KernelKind::Layout,
            })
        }
        _ => {}
    }
    let members: HashSet<NodeId> = nodes.iter().copied().collect();
    let mut anchor = None;
    for &n in nodes {
        match class(&g.node(n).op) {
            Class::Source | Class::Layout => return Err(format!("{} cannot share a kernel", name(n))),
            Class::Pointwise => {}
            Class::Reduction | Class::Contraction => {
                if let Some(a) = anchor {
                    return Err(format!("{} and {} are two anchors of one kernel", name(a), name(n)));
                }
                anchor = Some(n);
            }
        }
    }
    let Some(a) = anchor else {
        let n0 = numel(g, nodes[0]);
        return match nodes.iter().find(|&&n| numel(g, n) != n0) {
            Some(&n) => Err(format!("{} leaves the iteration space of {n0} elements", name(n))),
            None => Ok(KernelKind::Elementwise),
        };
    };
    // The prologue: members the anchor depends on (inside the kernel).
    let mut before: HashSet<NodeId> = HashSet::default();
    let mut stack = g.inputs(a);
    while let Some(n) = stack.pop() {
        if members.contains(&n) && before.insert(n) {
            stack.extend(g.inputs(n));
        }
    }
    let contraction = class(&g.node(a).op) == Class::Contraction;
    if contraction {
        if let Some(&n) = before.iter().min() {
            return Err(format!("{} is a prologue of contraction {}", name(n), name(a)));
        }
    }
    let in_space = g.inputs(a).first().map(|&i| numel(g, i)).unwrap_or(0);
    let out_space = numel(g, a);
    for &n in nodes {
        if n == a {
            continue;
        }
        let (space, side) = if before.contains(&n) { (in_space, "prologue") } else { (out_space, "epilogue") };
        if numel(g, n) != space {
            return Err(format!("{} leaves the {side} space of {space} elements of {}", name(n), name(a)));
        }
        if !before.contains(&n) {
            if let Some(&i) = g.inputs(n).iter().find(|i| before.contains(i)) {
                return Err(format!("epilogue {} reads prologue {} of {}", name(n), name(i), name(a)));
            }
        }
    }
    Ok(if contraction { KernelKind::Contraction } else { KernelKind::Reduction })
}

/// Disjoint groups of nodes, with each node's readers.
struct Groups {
    of: HashMap<NodeId, usize>,
    members: Vec<Vec<NodeId>>,
    users: HashMap<NodeId, Vec<NodeId>>,
    /// The first and last topological position of each group's members.
    first: Vec<usize>,
    last: Vec<usize>,
}

impl Groups {
    fn new(g: &Graph, order: &[NodeId]) -> Groups {
        Groups {
            of: order.iter().enumerate().map(|(i, &n)| (n, i)).collect(),
            members: order.iter().map(|&n| vec![n]).collect(),
            users: order.iter().map(|&n| (n, g.users(n))).collect(),
            first: (0..order.len()).collect(),
            last: (0..order.len()).collect(),
        }
    }

    /// True when a path leaves `a ∪ b` and comes back through another group
    /// (merging them would make the kernel graph cyclic). The search runs
    /// over groups, not nodes: a group is one kernel, so reaching any of its
    /// members reaches all its successors. A path that comes back ends at a
    /// member of `a ∪ b`, after every node on it in topological order, so
    /// a group whose members all come after the last of `a ∪ b` cannot be
    /// on one and is not searched (the same answer, without walking the
    /// rest of the graph for every candidate merge).
    fn path_through_other(&self, a: usize, b: usize) -> bool {
        let end = self.last[a].max(self.last[b]);
        let mut seen: HashSet<usize> = HashSet::default();
        let mut stack: Vec<usize> = vec![a, b];
        while let Some(x) = stack.pop() {
            for m in &self.members[x] {
                for u in &self.users[m] {
                    let gu = self.of[u];
                    if gu == a || gu == b {
                        if x != a && x != b {
                            return true;
                        }
                    } else if self.first[gu] < end && seen.insert(gu) {
                        stack.push(gu);
                    }
                }
            }
        }
        false
    }

    /// Merges `b` into `a`.
    fn merge(&mut self, a: usize, b: usize) {
        let moved = std::mem::take(&mut self.members[b]);
        for &n in &moved {
            self.of.insert(n, a);
        }
        self.members[a].extend(moved);
        self.first[a] = self.first[a].min(self.first[b]);
        self.last[a] = self.last[a].max(self.last[b]);
    }
}

/// Nodes read outside the node set that holds them: by effects, plans or
/// the graph's outputs.
fn program_roots(p: &Program) -> HashSet<NodeId> {
    let mut refs = Program { effects: p.effects.clone(), ..Program::default() };
    refs.graph.outputs = p.graph.outputs.clone();
    refs.roots().into_iter().collect()
}

/// The kernels of one unit, given a grouping of all of the graph's nodes.
fn unit_kernels(
    g: &Graph,
    unit: &Unit,
    group_of: &dyn Fn(NodeId) -> usize,
    roots: &HashSet<NodeId>,
) -> Result<Vec<Kernel>, String> {
    let rank: HashMap<NodeId, usize> = unit.nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut by_group: Vec<(usize, Vec<NodeId>)> = Vec::new();
    let mut index: HashMap<usize, usize> = HashMap::default();
    for &n in &unit.nodes {
        let gr = group_of(n);
        let k = *index.entry(gr).or_insert_with(|| {
            by_group.push((gr, Vec::new()));
            by_group.len() - 1
        });
        by_group[k].1.push(n);
    }
    // Kernel dependencies, then a topological order (smallest first node first).
    let kernel_of: HashMap<NodeId, usize> =
        by_group.iter().enumerate().flat_map(|(k, (_, ns))| ns.iter().map(move |&n| (n, k))).collect();
    let mut preds: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); by_group.len()];
    for (k, (_, ns)) in by_group.iter().enumerate() {
        for &n in ns {
            for i in g.inputs(n) {
                if let Some(&ki) = kernel_of.get(&i) {
                    if ki != k {
                        preds[k].insert(ki);
                    }
                }
            }
        }
    }
    let mut placed = vec![false; by_group.len()];
    let mut order = Vec::with_capacity(by_group.len());
    while order.len() < by_group.len() {
        let next = (0..by_group.len()).find(|&k| !placed[k] && preds[k].iter().all(|&q| placed[q]));
        let Some(k) = next else {
            return Err(format!("the kernels of unit `{}` depend on each other in a cycle", unit.name));
        };
        placed[k] = true;
        order.push(k);
    }
    let mut kernels = Vec::with_capacity(order.len());
    for k in order {
        let mut nodes = by_group[k].1.clone();
        nodes.sort_by_key(|n| rank[n]);
        let kind = classify(g, &nodes)?;
        if kind == KernelKind::Contraction {
            // The anchor first: it reads nothing inside its kernel (no
            // prologue), and backends emit the product, then the epilogue.
            if let Some(at) = nodes.iter().position(|&n| class(&g.node(n).op) == Class::Contraction) {
                nodes[..=at].rotate_right(1);
            }
        }
        let inside: HashSet<NodeId> = nodes.iter().copied().collect();
        let outputs: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|&n| roots.contains(&n) || g.users(n).iter().any(|u| !inside.contains(u)))
            .collect();
        kernels.push(Kernel {
            kind,
            nodes,
            outputs,
            device: Device::Cpu,
            why_host: None,
            host_node: None,
            computes_in: None,
            desc: Default::default(),
            fusion: None,
        });
    }
    Ok(kernels)
}

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    let g = &p.graph;
    let order = g.topo_order();
    let mut groups = Groups::new(g, &order);
    let units = units::units(p);
    let unit_of: HashMap<NodeId, usize> =
        units.iter().enumerate().flat_map(|(u, unit)| unit.nodes.iter().map(move |&n| (n, u))).collect();
    for &n in &order {
        if matches!(class(&g.node(n).op), Class::Source | Class::Layout) {
            continue;
        }
        for i in g.inputs(n) {
            let (gn, gi) = (groups.of[&n], groups.of[&i]);
            if gn == gi || unit_of.get(&i) != unit_of.get(&n) {
                continue;
            }
            let mut merged = groups.members[gn].clone();
            merged.extend(&groups.members[gi]);
            if classify(g, &merged).is_ok() && !groups.path_through_other(gn, gi) {
                groups.merge(gn, gi);
            }
        }
    }
    // Sibling fusion: anchor-free loops over the same space that read a
    // common value of their own unit run as one loop (one pass over the
    // shared input); a captured value is no reason to merge.
    let anchor_free =
        |groups: &Groups, gr: usize| groups.members[gr].iter().all(|&m| class(&g.node(m).op) == Class::Pointwise);
    for &n in &order {
        let mut siblings: Vec<usize> = Vec::new();
        for u in g.users(n) {
            let gu = groups.of[&u];
            if unit_of.get(&u) == unit_of.get(&n) && !siblings.contains(&gu) && anchor_free(&groups, gu) {
                siblings.push(gu);
            }
        }
        let mut kept: Vec<usize> = Vec::new();
        for gu in siblings {
            let joined = kept.iter().copied().find(|&gk| {
                let mut merged = groups.members[gk].clone();
                merged.extend(&groups.members[gu]);
                classify(g, &merged).is_ok() && !groups.path_through_other(gk, gu)
            });
            match joined {
                Some(gk) => groups.merge(gk, gu),
                None => kept.push(gu),
            }
        }
    }
    let roots = program_roots(p);
    let mut compiled = Vec::with_capacity(units.len());
    for unit in &units {
        let kernels = unit_kernels(g, unit, &|n| groups.of[&n], &roots)
            .map_err(|why| Diagnostic::new(crate::diag::Code::Internal, format!("fusion failed: {why}")))?;
        compiled.push(CompiledUnit {
            name: unit.name.clone(),
            region: unit.region,
            ops_after: unit.nodes.len(),
            kernels,
            updates: unit.updates.clone(),
            export: unit.export,
            ..CompiledUnit::default()
        });
    }
    p.compiled = Some(Compiled { units: compiled });
    Ok(())
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    let Some(c) = &p.compiled else { return Err("no kernels were recorded".into()) };
    let g = &p.graph;
    let units = units::units(p);
    if c.units.len() != units.len() {
        return Err(format!("{} units have kernels, but the program has {}", c.units.len(), units.len()));
    }
    let roots = program_roots(p);
    for (cu, unit) in c.units.iter().zip(&units) {
        if cu.name != unit.name {
            return Err(format!("unit `{}` is recorded as `{}`", unit.name, cu.name));
        }
        // A partition of the unit's nodes.
        let mut kernel_of: HashMap<NodeId, usize> = HashMap::default();
        for (k, kernel) in cu.kernels.iter().enumerate() {
            for &n in &kernel.nodes {
                if let Some(other) = kernel_of.insert(n, k) {
                    return Err(format!("node {} is in kernels {other} and {k} of `{}`", n.index(), unit.name));
                }
            }
        }
        let mine: HashSet<NodeId> = unit.nodes.iter().copied().collect();
        if let Some(n) = unit.nodes.iter().find(|n| !kernel_of.contains_key(n)) {
            return Err(format!("node {} of `{}` is in no kernel", n.index(), unit.name));
        }
        if let Some(n) = kernel_of.keys().find(|n| !mine.contains(n)) {
            return Err(format!("node {} is in a kernel of `{}` but not in that unit", n.index(), unit.name));
        }
        // Recomputing the kernels from this grouping checks every kernel's
        // rules, the acyclic kernel graph (hence convexity) and the outputs.
        let group_of = |n: NodeId| kernel_of.get(&n).copied().unwrap_or(usize::MAX);
        let expected = unit_kernels(g, unit, &group_of, &roots)?;
        for kernel in &cu.kernels {
            let Some(e) = expected.iter().find(|e| e.nodes.first() == kernel.nodes.first()) else {
                return Err(format!("a kernel of `{}` is missing", unit.name));
            };
            if e.kind != kernel.kind {
                return Err(format!("a kernel of `{}` is {:?} but recorded as {:?}", unit.name, e.kind, kernel.kind));
            }
            let recorded: HashSet<NodeId> = kernel.outputs.iter().copied().collect();
            if let Some(n) = e.outputs.iter().find(|n| !recorded.contains(n)) {
                return Err(format!("node {} is read outside its kernel but is no output of it", n.index()));
            }
            if let Some(n) = kernel.outputs.iter().find(|n| !e.outputs.contains(n)) {
                return Err(format!("node {} is an output of its kernel but nothing outside reads it", n.index()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Span;
    use crate::ir::{BinaryOp, DType, ReduceOp, TensorType, UnaryOp};

    fn f32s(shape: &[usize]) -> TensorType {
        TensorType::new(DType::F32, shape.to_vec())
    }

    #[test]
    fn an_epilogue_may_not_read_the_prologue() {
        let mut g = Graph::new();
        let s = Span::default();
        let x = g.add(Op::Slot { slot: 0, ty: f32s(&[4]) }, &[], f32s(&[4]), s);
        let e = g.add(Op::Unary(UnaryOp::Exp), &[x], f32s(&[4]), s);
        let r = g.add(Op::Reduce { op: ReduceOp::Sum, axes: vec![0], keepdims: false }, &[e], f32s(&[]), s);
        let b = g.add(Op::BroadcastTo { shape: vec![4] }, &[r], f32s(&[4]), s);
        let d = g.add(Op::Binary(BinaryOp::Div), &[e, b], f32s(&[4]), s);
        assert_eq!(classify(&g, &[e, r]), Ok(KernelKind::Reduction));
        assert!(classify(&g, &[e, r, b, d]).is_err());
        assert!(classify(&g, &[x, e]).is_err());
        assert_eq!(classify(&g, &[b, d]), Ok(KernelKind::Elementwise));
    }

    #[test]
    fn a_contraction_has_no_prologue() {
        let mut g = Graph::new();
        let s = Span::default();
        let x = g.add(Op::Slot { slot: 0, ty: f32s(&[2, 2]) }, &[], f32s(&[2, 2]), s);
        let e = g.add(Op::Unary(UnaryOp::Exp), &[x], f32s(&[2, 2]), s);
        let m = g.add(Op::MatMul, &[e, x], f32s(&[2, 2]), s);
        let r = g.add(Op::Unary(UnaryOp::Relu), &[m], f32s(&[2, 2]), s);
        assert!(classify(&g, &[e, m]).is_err());
        assert_eq!(classify(&g, &[m, r]), Ok(KernelKind::Contraction));
    }

    /// The training step of `examples/digits_mlp.tfl` runs in at most a
    /// third as many kernels (not counting sources) as it had ops before
    /// optimization.
    #[test]
    fn digits_mlp_training_step_needs_a_third_as_many_kernels_as_ops() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/digits_mlp.tfl");
        let mut session = crate::driver::Session::new();
        let file = session.load_file(&path).expect("the example is readable");
        let opts = crate::passes::Options { verify: true, ..Default::default() };
        let p = session.compile(file, &opts).expect("the example compiles");
        let units = &p.compiled.as_ref().expect("fused").units;
        let steps: Vec<&CompiledUnit> = units.iter().filter(|u| u.name.contains(" step ")).collect();
        assert!(!steps.is_empty());
        for u in steps {
            let kernels = u.kernels.iter().filter(|k| k.kind != KernelKind::Source).count();
            eprintln!(
                "{}: ops {} -> {}, kernels {kernels} ({} with sources)",
                u.name,
                u.ops_before,
                u.ops_after,
                u.kernels.len()
            );
            assert!(3 * kernels <= u.ops_before, "{}: {kernels} kernels for {} ops", u.name, u.ops_before);
        }
    }

    /// The postcondition rejects a kernel that a path leaves and re-enters,
    /// and a value read across kernels that is no output.
    #[test]
    fn the_postcondition_catches_a_cycle_and_a_missing_output() {
        let mut p = Program::default();
        let s = Span::default();
        let g = &mut p.graph;
        let x = g.add(Op::Slot { slot: 0, ty: f32s(&[2, 2]) }, &[], f32s(&[2, 2]), s);
        let e = g.add(Op::Unary(UnaryOp::Exp), &[x], f32s(&[2, 2]), s);
        let t = g.add(Op::Transpose { perm: vec![1, 0] }, &[e], f32s(&[2, 2]), s);
        let a = g.add(Op::Binary(BinaryOp::Add), &[e, t], f32s(&[2, 2]), s);
        g.outputs.push(a);
        run(&mut p, &PassCtx::default()).expect("fuses");
        assert_eq!(postcondition(&p), Ok(()));
        let kinds: Vec<KernelKind> = p.compiled.as_ref().unwrap().units[0].kernels.iter().map(|k| k.kind).collect();
        assert_eq!(kinds, [KernelKind::Source, KernelKind::Elementwise, KernelKind::Layout, KernelKind::Elementwise]);
        // `exp` and `add` in one kernel: the transpose leaves and re-enters it.
        let mut cyclic = p.clone();
        let unit = &mut cyclic.compiled.as_mut().unwrap().units[0];
        unit.kernels.retain(|k| k.nodes != [a]);
        unit.kernels[1].nodes.push(a);
        unit.kernels[1].outputs.push(a);
        assert!(postcondition(&cyclic).unwrap_err().contains("cycle"));
        // `exp` is read by the transpose's kernel.
        let mut hidden = p.clone();
        hidden.compiled.as_mut().unwrap().units[0].kernels[1].outputs.clear();
        assert!(postcondition(&hidden).unwrap_err().contains("no output"));
    }
}
