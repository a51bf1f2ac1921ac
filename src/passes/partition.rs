//! Device placement: every kernel of every unit gets the device it runs on,
//! and the pass finds which kernels are independent of each other (no path
//! between them), so they may run concurrently.
//!
//! The kernels normally come from `fuse`. When `p.compiled` is still `None`
//! (fusion disabled, or run before `fuse` existed), the pass starts from
//! [`trivial_kernels`]: one kernel per node.
//!
//! Loops: the body of every `scan` kernel the target runs is planned as a
//! program of its own (`passes::loops`, recorded in `CompiledUnit::loops`);
//! the kernels of the body that the target leaves to the host make the
//! scan's kernel partly interpreted (its `why_host` names the first).
//!
//! Devices: a kernel runs on the target's device (`Target::device`: the
//! CPU, or a GPU) unless the target leaves it to the host interpreter
//! (`Device::Host`). On the CPU the host shares the arena, so no value
//! moves; in a GPU unit, the unit itself reads a host kernel's operands
//! back from the device and writes its results there
//! (`backend::gpu::unit`), so those edges need no transfer kernel either
//! (`Device::reads_from`). Explicit transfer kernels — a `Transfer` kind on
//! the reading device, with the transferred buffer in that device's arena
//! — are what a plan over several devices at once will need.
//!
//! Descriptions: before asking the target where a kernel runs, the pass
//! describes it as data (`Kernel::desc`, `ir::kernel_desc::describe`: its
//! anchor with sizes and element type, its elementwise parts with their
//! loop nests), which the target's `host_reason` reads and a backend
//! lowers from.
//!
//! Independent branches: [`Reach`] is the transitive closure of the kernel
//! graph; two kernels are independent when neither reaches the other, and
//! [`independent_branches`] groups the kernels into maximal linear chains and
//! lists which chains are mutually independent. `schedule` turns the graph
//! into dependency counts (`deps`) with which the threaded runner starts
//! independent kernels concurrently; `memory_plan` uses [`Reach`] so that
//! buffers of kernels that may run concurrently never share memory.
//!
//! Contract: every kernel of every unit has a device; every kernel reads
//! only values its device reaches (`Device::reads_from`); every node is in at most one kernel, and every
//! node that computes something (not a slot or constant) is in one.
//!
//! Example: `let a = exp(x); let b = log(x); print(a + b)` — the kernels
//! `exp` and `log` are independent (one branch each) and both run on the CPU.

use crate::diag::Diagnostic;
use crate::ir::compiled::{Compiled, CompiledUnit, Device, Kernel, KernelKind};
use crate::ir::target::HostPart;
use crate::ir::{DType, NodeId, Op, Program};
use crate::passes::PassCtx;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

pub fn run(p: &mut Program, ctx: &PassCtx) -> Result<(), Diagnostic> {
    ensure_kernels(p);
    let g = &p.graph;
    if let Some(c) = p.compiled.as_mut() {
        for u in &mut c.units {
            let main = u.region.is_none();
            let in_unit: HashSet<NodeId> = u.kernels.iter().flat_map(|k| k.nodes.iter().copied()).collect();
            u.loops.clear();
            for k in &mut u.kernels {
                k.desc = crate::ir::kernel_desc::describe(g, k, &in_unit);
                let on_host = main && ctx.target.statements_on_host;
                let mut host = match on_host {
                    true => None,
                    false => (ctx.target.host_reason)(g, k),
                };
                // A scan's loop is the target's; what its body leaves to
                // the host is the part of this kernel that is interpreted.
                if let (false, None, [n]) = (on_host, &host, k.nodes.as_slice()) {
                    if let Op::Scan(body) = &g.node(*n).op {
                        let plan = super::loops::plan(*n, body, ctx)?;
                        let partly = ctx.target.loops_partly_on_host;
                        host = super::loops::host_part(&plan).map(|h| HostPart { whole: !partly, ..h });
                        u.loops.push(plan);
                    }
                }
                k.device = match (main && ctx.target.statements_on_host) || host.as_ref().is_some_and(|h| h.whole) {
                    true => Device::Host,
                    false => ctx.target.device,
                };
                k.host_node = host.as_ref().map(|h| h.node);
                k.why_host = host.map(|h| h.why);
                k.computes_in = match (k.device, k.kind) {
                    (Device::Host, _) | (_, KernelKind::Source) => None,
                    _ => computes_in(g, k, ctx.target.arithmetic),
                };
            }
        }
    }
    Ok(())
}

/// The one element type the device computes `k`'s outputs in, when that
/// is not theirs (an f16 kernel computed in f32).
fn computes_in(g: &crate::ir::Graph, k: &Kernel, arithmetic: fn(DType) -> DType) -> Option<DType> {
    let mut wider = k.outputs.iter().map(|&o| g.node(o).ty.dtype).filter(|&d| arithmetic(d) != d).map(arithmetic);
    let first = wider.next()?;
    wider.all(|d| d == first).then_some(first)
}

/// Every kernel of a region's unit that the plan puts (wholly or partly)
/// on the host interpreter, as an error at its first node's line naming
/// why: what `--strict` reports before anything runs.
pub fn host_kernels(p: &Program) -> Vec<Diagnostic> {
    let Some(c) = &p.compiled else { return Vec::new() };
    let mut found = Vec::new();
    for u in c.units.iter().filter(|u| u.region.is_some()) {
        for k in u.kernels.iter().filter(|k| k.why_host.is_some() && k.kind != KernelKind::Source) {
            let Some(&first) = k.host_node.as_ref().or(k.nodes.first()) else { continue };
            let node = p.graph.node(first);
            let why = k.why_host.as_deref().unwrap_or("the plan puts it on the host");
            found.push(
                Diagnostic::new(
                    crate::diag::Code::Unsupported,
                    format!("`{}` would run on the host interpreter in `{}`: {why}", node.op.name(), u.name),
                )
                .label(node.span, format!("{} runs only on the host interpreter", node.ty))
                .help("run without `--strict` to let the host interpreter run it, or use `--backend interp`"),
            );
        }
    }
    found
}

/// Gives `p` kernels when no earlier pass did: [`trivial_kernels`].
pub fn ensure_kernels(p: &mut Program) {
    if p.compiled.is_none() {
        p.compiled = Some(trivial_kernels(p));
    }
}

/// One kernel per node of each unit (`units::units`), on the CPU, with no
/// schedule or memory plan yet. `fuse` normally provides the kernels; this
/// is the fallback when it did not run.
pub fn trivial_kernels(p: &Program) -> Compiled {
    let units = crate::passes::units::units(p)
        .into_iter()
        .map(|unit| CompiledUnit {
            name: unit.name,
            region: unit.region,
            updates: unit.updates,
            export: unit.export,
            ops_before: unit.nodes.len(),
            ops_after: unit.nodes.len(),
            kernels: unit
                .nodes
                .iter()
                .map(|&n| Kernel {
                    kind: kernel_kind(&p.graph.node(n).op),
                    nodes: vec![n],
                    outputs: vec![n],
                    device: Device::Cpu,
                    why_host: None,
                    host_node: None,
                    computes_in: None,
                    desc: Default::default(),
                    fusion: None,
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    Compiled { units }
}

/// The kernel kind of a single op.
pub fn kernel_kind(op: &Op) -> KernelKind {
    match op {
        Op::Slot { .. } | Op::Constant { .. } => KernelKind::Source,
        Op::Iota { .. }
        | Op::Random { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::Cast(_)
        | Op::Reshape { .. }
        | Op::BroadcastTo { .. } => KernelKind::Elementwise,
        Op::Reduce { .. } | Op::ArgMax { .. } | Op::Pool2d { .. } | Op::Pool2dGrad { .. } => KernelKind::Reduction,
        Op::MatMul
        | Op::QuantMatMul { .. }
        | Op::Conv2d { .. }
        | Op::Conv2dGradInput { .. }
        | Op::Conv2dGradFilter { .. } => KernelKind::Contraction,
        Op::Transpose { .. }
        | Op::CumSum { .. }
        | Op::ArgSort { .. }
        | Op::Concat { .. }
        | Op::Slice { .. }
        | Op::Pad { .. }
        | Op::OneHot { .. }
        | Op::Gather { .. }
        | Op::ScatterAdd { .. }
        | Op::Scan(_)
        | Op::Gradient
        | Op::StopGradient
        | Op::AllReduce => KernelKind::Layout,
    }
}

/// The dependencies between the kernels of one unit.
#[derive(Clone, Debug, Default)]
pub struct KernelGraph {
    /// The kernel that computes each node of the unit.
    pub kernel_of: HashMap<NodeId, usize>,
    /// For each kernel, the distinct kernels it waits for, ascending: those
    /// whose outputs it reads, and those before it on a memory edge.
    pub preds: Vec<Vec<usize>>,
    /// For each kernel, the distinct kernels that wait for it, ascending.
    pub succs: Vec<Vec<usize>>,
    /// For each node of the unit, the distinct other kernels that read it, ascending.
    pub readers: HashMap<NodeId, Vec<usize>>,
    /// Nodes of the unit read after it runs: by the program's effects and
    /// plans (printed values, region outputs such as new parameters) or by
    /// nodes of other units.
    pub live_out: HashSet<NodeId>,
}

impl KernelGraph {
    pub fn new(p: &Program, u: &CompiledUnit) -> KernelGraph {
        let mut roots = p.clone();
        let roots: HashSet<NodeId> = roots.roots().into_iter().collect();
        KernelGraph::with_roots(p, u, &roots)
    }

    /// Like [`KernelGraph::new`] with the program's roots already computed.
    pub fn with_roots(p: &Program, u: &CompiledUnit, roots: &HashSet<NodeId>) -> KernelGraph {
        let n = u.kernels.len();
        let mut kernel_of = HashMap::default();
        for (k, kernel) in u.kernels.iter().enumerate() {
            for &node in &kernel.nodes {
                kernel_of.entry(node).or_insert(k);
            }
        }
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut readers: HashMap<NodeId, Vec<usize>> = HashMap::default();
        let mut live_out = HashSet::default();
        for (k, kernel) in u.kernels.iter().enumerate() {
            for &node in &kernel.nodes {
                if !p.graph.contains(node) {
                    continue;
                }
                for input in p.graph.inputs(node) {
                    if let Some(&from) = kernel_of.get(&input) {
                        if from != k {
                            preds[k].push(from);
                            succs[from].push(k);
                            readers.entry(input).or_default().push(k);
                        }
                    }
                }
                if roots.contains(&node) || p.graph.users(node).iter().any(|user| !kernel_of.contains_key(user)) {
                    live_out.insert(node);
                }
            }
        }
        // Memory edges order kernels that reuse each other's arena bytes:
        // for scheduling they are dependencies like any other.
        for &(from, to) in &u.memory_edges {
            if from < n && to < n && from != to {
                preds[to].push(from);
                succs[from].push(to);
            }
        }
        for list in preds.iter_mut().chain(succs.iter_mut()).chain(readers.values_mut()) {
            list.sort_unstable();
            list.dedup();
        }
        KernelGraph { kernel_of, preds, succs, readers, live_out }
    }

    /// Some topological order of the kernels (Kahn's algorithm, smallest
    /// index first); `None` if the kernel graph has a cycle.
    pub fn topo(&self) -> Option<Vec<usize>> {
        let mut pending: Vec<usize> = self.preds.iter().map(Vec::len).collect();
        let mut ready: std::collections::BTreeSet<usize> = (0..pending.len()).filter(|&k| pending[k] == 0).collect();
        let mut order = Vec::with_capacity(pending.len());
        while let Some(k) = ready.pop_first() {
            order.push(k);
            for &s in &self.succs[k] {
                pending[s] -= 1;
                if pending[s] == 0 {
                    ready.insert(s);
                }
            }
        }
        (order.len() == pending.len()).then_some(order)
    }
}

/// Reachability between the kernels of one unit (the transitive closure of
/// [`KernelGraph`]), as one ancestor bit set per kernel.
#[derive(Clone, Debug)]
pub struct Reach {
    ancestors: Vec<Vec<u64>>,
}

impl Reach {
    pub fn new(g: &KernelGraph) -> Reach {
        let n = g.preds.len();
        let words = n.div_ceil(64);
        let mut ancestors = vec![vec![0u64; words]; n];
        // A cyclic graph (rejected by the postconditions) gets no closure.
        let order = g.topo().unwrap_or_default();
        for k in order {
            let mut set = vec![0u64; words];
            for &p in &g.preds[k] {
                for (w, a) in set.iter_mut().zip(&ancestors[p]) {
                    *w |= a;
                }
                set[p / 64] |= 1 << (p % 64);
            }
            ancestors[k] = set;
        }
        Reach { ancestors }
    }

    /// True when kernel `a` must finish before kernel `b` starts (there is a
    /// path `a → … → b`; false for `a == b`).
    pub fn before(&self, a: usize, b: usize) -> bool {
        (self.ancestors[b][a / 64] >> (a % 64)) & 1 == 1
    }

    /// True when neither kernel waits for the other: they may run at once.
    pub fn independent(&self, a: usize, b: usize) -> bool {
        a != b && !self.before(a, b) && !self.before(b, a)
    }
}

/// The kernels grouped into maximal linear chains (a kernel continues its
/// predecessor's chain when each is the other's only neighbour on that
/// side), in order of their first kernel, and for each chain the later
/// chains it is independent of (no kernel of one reaches a kernel of the
/// other): the units of inter-op parallelism.
pub fn independent_branches(g: &KernelGraph, reach: &Reach) -> (Vec<Vec<usize>>, Vec<(usize, usize)>) {
    let order = g.topo().unwrap_or_default();
    let mut chain_of: Vec<Option<usize>> = vec![None; g.preds.len()];
    let mut chains: Vec<Vec<usize>> = Vec::new();
    for k in order {
        let continues = match g.preds[k].as_slice() {
            [p] if g.succs[*p].len() == 1 => chain_of[*p],
            _ => None,
        };
        let c = continues.unwrap_or_else(|| {
            chains.push(Vec::new());
            chains.len() - 1
        });
        chains[c].push(k);
        chain_of[k] = Some(c);
    }
    let mut pairs = Vec::new();
    for a in 0..chains.len() {
        for b in a + 1..chains.len() {
            let free = chains[a].iter().all(|&x| chains[b].iter().all(|&y| reach.independent(x, y)));
            if free {
                pairs.push((a, b));
            }
        }
    }
    (chains, pairs)
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    let Some(c) = &p.compiled else { return Err("the program has no kernels".into()) };
    let mut roots = p.clone();
    let roots: HashSet<NodeId> = roots.roots().into_iter().collect();
    let mut covered: HashSet<NodeId> = HashSet::default();
    for u in &c.units {
        let g = KernelGraph::with_roots(p, u, &roots);
        if g.topo().is_none() {
            return Err(format!("the kernels of unit `{}` depend on each other in a cycle", u.name));
        }
        for (k, kernel) in u.kernels.iter().enumerate() {
            for &n in &kernel.nodes {
                if !covered.insert(n) {
                    return Err(format!("node {} is in two kernels (unit `{}`, kernel {k})", n.index(), u.name));
                }
            }
            for &pred in &g.preds[k] {
                if !kernel.device.reads_from(u.kernels[pred].device) {
                    return Err(format!(
                        "kernel {k} of unit `{}` on {:?} reads kernel {pred} on {:?} without a transfer",
                        u.name, kernel.device, u.kernels[pred].device
                    ));
                }
            }
        }
    }
    for n in p.graph.node_ids() {
        let source = matches!(p.graph.node(n).op, Op::Slot { .. } | Op::Constant { .. });
        if !source && !covered.contains(&n) {
            return Err(format!("node {} (`{}`) is in no kernel", n.index(), p.graph.node(n).op.name()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_branches_of_one_input_are_independent() {
        let mut session = crate::driver::Session::new();
        let source =
            "let xs = [[1.0, 2.0], [3.0, 4.0]]\nprint(collect(from_tensors(xs) |> map(fn(x) = exp(x) + log(x))))";
        let file = session.add_source("case.tfl", source);
        // One kernel per node (`fuse` off), so `exp` and `log` are kernels of their own.
        let opts = crate::passes::Options { disabled: vec!["fuse".into()], ..Default::default() };
        let p = session.compile(file, &opts).unwrap_or_else(|_| panic!("compiles"));
        let u = p.compiled.as_ref().and_then(|c| c.units.last()).expect("the map's unit");
        let g = KernelGraph::new(&p, u);
        let reach = Reach::new(&g);
        let kernel =
            |name: &str| u.kernels.iter().position(|k| p.graph.node(k.nodes[0]).op.name() == name).expect("a kernel");
        let (slot, exp, log, add) = (kernel("slot"), kernel("exp"), kernel("log"), kernel("add"));
        assert!(reach.independent(exp, log));
        assert!(reach.before(slot, add) && reach.before(exp, add) && !reach.before(add, exp));
        let (chains, pairs) = independent_branches(&g, &reach);
        let chain_of = |k: usize| chains.iter().position(|c| c.contains(&k)).expect("in a chain");
        let (a, b) = (chain_of(exp).min(chain_of(log)), chain_of(exp).max(chain_of(log)));
        assert!(a != b && pairs.contains(&(a, b)), "{chains:?} {pairs:?}");
    }
}
