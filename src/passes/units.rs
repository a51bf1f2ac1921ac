//! Compilation units: the pieces of a program that run as one graph. The
//! main unit holds every value computed once (statements, initial
//! parameters, captured constants); each region (a training step, a metric
//! over a batch, a `map` function) is a unit of the nodes that depend on its
//! inputs and are recomputed per evaluation, and of the broadcasts of
//! scalars that only those nodes read (`unit_nodes`).
//!
//! Contract: units partition the nodes; a unit's nodes are listed in a
//! deterministic topological order; a node outside a unit that a unit node
//! reads is one of the unit's inputs.

use super::splat_copies::is_splat;
use crate::ir::plan::{Region, RegionId, Source, Transform};
use crate::ir::{Effect, Graph, NodeId, Op, Program};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// One graph that runs as a whole.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    pub name: String,
    /// The region it runs (`None`: the main unit).
    pub region: Option<RegionId>,
    /// The unit's nodes in execution order.
    pub nodes: Vec<NodeId>,
    /// Values the unit reads from outside (captured values, region slots).
    pub inputs: Vec<NodeId>,
    /// Values read outside the unit (by effects, plans or other units).
    pub outputs: Vec<NodeId>,
    /// `(slot node, output)`: the output is the next value of that input,
    /// which the runtime then no longer needs (a training step's new
    /// parameters and optimizer states), so it may be written over it.
    pub updates: Vec<(NodeId, NodeId)>,
    /// An `export fn`'s unit (`ir::compiled::CompiledUnit::export`).
    pub export: bool,
}

pub use crate::ir::regions::varying;

/// The nodes of the unit of `region`: its `varying` nodes, plus every
/// broadcast of a one-element value (a splat) that only those nodes read
/// and that no effect or plan reads (`roots`). Computed once outside the
/// unit, a splat would be a dense buffer that every run reads element by
/// element (Adam's `beta1` broadcast to a `[784, 256]` weight: 800 KB per
/// step); inside it, it fuses into its readers, which read it as a scalar.
pub fn unit_nodes(g: &Graph, region: &Region, rank: &HashMap<NodeId, usize>, roots: &HashSet<NodeId>) -> Vec<NodeId> {
    let mut nodes = varying(g, region, rank);
    let vary: HashSet<NodeId> = nodes.iter().copied().collect();
    let mut splats: Vec<NodeId> = nodes.iter().flat_map(|&n| g.inputs(n)).filter(|&i| !vary.contains(&i)).collect();
    splats.sort_unstable();
    splats.dedup();
    splats.retain(|&i| is_splat(g, i) && !roots.contains(&i) && g.users(i).iter().all(|u| vary.contains(u)));
    if !splats.is_empty() {
        nodes.extend(splats);
        nodes.sort_by_key(|n| rank.get(n).copied().unwrap_or(usize::MAX));
    }
    nodes
}

/// A region with a readable name, and which of its outputs replace which
/// of its input slots (`(slot, output index)`).
pub struct NamedRegion<'a> {
    pub name: String,
    pub region: &'a Region,
    pub updates: Vec<(usize, usize)>,
    /// An `export fn`'s region.
    pub export: bool,
}

/// Every region of the program with a readable name.
pub fn regions<'a>(p: &'a Program) -> Vec<NamedRegion<'a>> {
    fn plain(name: String, region: &Region) -> NamedRegion<'_> {
        NamedRegion { name, region, updates: Vec::new(), export: false }
    }
    fn data<'a>(d: &'a crate::ir::plan::Dataset, what: &str, out: &mut Vec<NamedRegion<'a>>) {
        let _ = &d.source as &Source;
        for (i, t) in d.transforms.iter().enumerate() {
            match t {
                Transform::BatchedMap { batched, element, n } => {
                    out.push(plain(format!("{what} transform {i} (batch {n})"), batched));
                    out.push(plain(format!("{what} transform {i} (element)"), element));
                }
                Transform::BySize { regions, .. } => {
                    for (size, r) in regions {
                        out.push(plain(format!("{what} transform {i} (batch {size})"), r));
                    }
                }
                _ => t.regions().into_iter().for_each(|r| out.push(plain(format!("{what} transform {i}"), r))),
            }
        }
    }
    let mut out = Vec::new();
    for (e, effect) in p.effects.iter().enumerate() {
        match effect {
            Effect::Train(t) => {
                data(&t.data, &format!("train {e} data"), &mut out);
                // Inputs end with the parameters and states, outputs start
                // with the loss and then their new values.
                let step = |name: String, r: &'a Region| {
                    let first = r.inputs.len().saturating_sub(t.carried_len());
                    let updates = r.inputs[first..].iter().enumerate().map(|(j, (slot, _))| (*slot, 1 + j)).collect();
                    NamedRegion { name, region: r, updates, export: false }
                };
                for (b, r) in &t.steps {
                    out.push(step(format!("train {e} step (batch {b})"), r));
                }
                if let Some(p) = &t.parallel {
                    for (rows, r) in &p.gradients {
                        out.push(plain(format!("train {e} step gradients (shard of {rows})"), r));
                    }
                    // Inputs: the summed gradients, the first shard's model
                    // states, the step number, then the carried parameters,
                    // optimizer states and model states, which its outputs
                    // replace.
                    if let Some(r) = &p.update {
                        let first = t.params.len() + t.model_states.len() + 1;
                        let updates = r.inputs[first..].iter().enumerate().map(|(j, (slot, _))| (*slot, j)).collect();
                        out.push(NamedRegion {
                            name: format!("train {e} step update"),
                            region: r,
                            updates,
                            export: false,
                        });
                    }
                    for (rows, r) in &p.fused {
                        out.push(step(format!("train {e} step with all-reduce (shard of {rows})"), r));
                    }
                }
                for (k, ev) in t.evals.iter().enumerate() {
                    data(&ev.reduce.data, &format!("train {e} eval {k} data"), &mut out);
                    for (b, r) in &ev.reduce.regions {
                        out.push(plain(format!("train {e} eval {} (batch {b})", ev.name), r));
                    }
                }
            }
            Effect::Reduce { plan, .. } => {
                data(&plan.data, &format!("metric {e} data"), &mut out);
                for (b, r) in &plan.regions {
                    out.push(plain(format!("metric {e} (batch {b})"), r));
                }
            }
            Effect::Collect { data: d, .. } => data(d, &format!("collect {e} data"), &mut out),
            Effect::Export(x) => {
                out.push(NamedRegion { export: true, ..plain(format!("export {}", x.name), &x.region) });
                if let Some((size, probe)) = &x.symbolic {
                    out.push(NamedRegion {
                        export: true,
                        ..plain(format!("export {} (probe of {size})", x.name), probe)
                    });
                }
                for (n, r) in &x.sized {
                    out.push(NamedRegion { export: true, ..plain(format!("export {} (at {n})", x.name), r) });
                }
            }
            _ => {}
        }
    }
    out
}

/// Splits the program into units: the main unit first, then one per region.
pub fn units(p: &Program) -> Vec<Unit> {
    let g = &p.graph;
    let order = g.topo_order();
    let rank: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut roots = p.clone();
    let roots: HashSet<NodeId> = roots.roots().into_iter().collect();
    let mut owner: HashMap<NodeId, usize> = HashMap::default();
    let mut units = vec![Unit {
        name: "main".into(),
        region: None,
        nodes: vec![],
        inputs: vec![],
        outputs: vec![],
        updates: vec![],
        export: false,
    }];
    for NamedRegion { name, region, updates, export } in regions(p) {
        // Copies of one region (a `map` behind two datasets) are one unit.
        if units.iter().any(|u| u.region == Some(region.id)) {
            continue;
        }
        let nodes = unit_nodes(g, region, &rank, &roots);
        let idx = units.len();
        for &n in &nodes {
            owner.entry(n).or_insert(idx);
        }
        let slot_node = |slot: usize| {
            nodes.iter().copied().find(|&n| matches!(&g.node(n).op, Op::Slot { slot: s, .. } if *s == slot))
        };
        let updates =
            updates.iter().filter_map(|&(slot, out)| Some((slot_node(slot)?, *region.outputs.get(out)?))).collect();
        let mut outputs = region.outputs.clone();
        outputs.dedup();
        units.push(Unit { name, region: Some(region.id), nodes: vec![], inputs: vec![], outputs, updates, export });
    }
    for &n in &order {
        let u = owner.get(&n).copied().unwrap_or(0);
        units[u].nodes.push(n);
    }
    for (ui, unit) in units.iter_mut().enumerate() {
        let mine: HashSet<NodeId> = unit.nodes.iter().copied().collect();
        let mut inputs: Vec<NodeId> = Vec::new();
        for &n in &unit.nodes {
            for i in g.inputs(n) {
                if !mine.contains(&i) && !inputs.contains(&i) {
                    inputs.push(i);
                }
            }
        }
        unit.inputs = inputs;
        if ui == 0 {
            let mut outs: Vec<NodeId> = Vec::new();
            for &n in &unit.nodes {
                let read_outside = roots.contains(&n) || g.users(n).iter().any(|u| !mine.contains(u));
                if read_outside {
                    outs.push(n);
                }
            }
            unit.outputs = outs;
        }
    }
    units
}
