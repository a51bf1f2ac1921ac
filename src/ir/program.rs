//! A traced program: one graph plus the ordered side effects of its
//! statements (`print`, `assert_close`), which read graph values.

use super::graph::{Graph, NodeId};
use super::types::TensorType;
use crate::diag::Span;

/// One printed item: a tensor (by node) or a compile-time value already
/// formatted as text (ints, strings, …).
#[derive(Clone, Debug, PartialEq)]
pub enum PrintItem {
    Tensor(NodeId),
    Text(String),
    /// `print_text(ids)`: an integer tensor of byte values (rank 1 or 2)
    /// printed as the text it encodes, a line per row.
    Bytes(NodeId),
    /// `(a, b)`: a tuple of items.
    Tuple(Vec<PrintItem>),
    /// `print(a, b)`: items on one line, separated by spaces.
    Line(Vec<PrintItem>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// `print(x)`; `full` turns off summarizing of large tensors.
    Print { item: PrintItem, full: bool, span: Span },
    /// `assert_close(a, b, tol)`: fails the run if any |a - b| > tol·(1 + |b|).
    AssertClose { actual: NodeId, expected: NodeId, tol: f64, span: Span },
    /// `train … { … }`: runs the loop, then fills `result_slots`.
    Train(Box<super::plan::TrainPlan>),
    /// A reduction over a dataset (a metric); fills `slot` with the f32 mean.
    Reduce { plan: Box<super::plan::ReducePlan>, slot: usize, span: Span },
    /// `first(ds)` / `collect(ds)`: fills `slots` with the first element or
    /// with all elements stacked.
    Collect { data: Box<super::plan::Dataset>, all: bool, slots: Vec<usize>, span: Span },
    /// `save(model, path)`: writes the named tensors as safetensors.
    Save { tensors: Vec<(String, NodeId)>, path: String, span: Span },
    /// `load(model, path)`: reads named tensors of the given types into
    /// slots: the parameters, which the file must hold, and the model
    /// states, each with its value before the load, which its slot keeps
    /// when the file has no such tensor (files written before states were
    /// saved).
    Load { tensors: Vec<(String, TensorType, usize)>, states: Vec<LoadState>, path: String, span: Span },
    /// `export fn …`: nothing happens when the program runs; `tfc build`
    /// writes the function out once every other effect has run.
    Export(Box<super::plan::ExportPlan>),
}

/// A model state `load` reads if the file holds it: its name, type and
/// slot, and the node of its value before the load.
pub type LoadState = (String, TensorType, usize, NodeId);

/// What `tfc run` executes: evaluate the graph, then perform the effects in
/// order.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub graph: Graph,
    pub effects: Vec<Effect>,
    /// Kernels, order and memory plan, once the optimizer has run.
    pub compiled: Option<super::compiled::Compiled>,
}

impl Effect {
    /// A short description for the text IR and DOT export, e.g.
    /// `train epochs=30 steps_per_shape=[64, 29]`.
    pub fn summary(&self) -> String {
        match self {
            Effect::Print { full, .. } => {
                if *full {
                    "print {full=true}".into()
                } else {
                    "print".into()
                }
            }
            Effect::AssertClose { .. } => "assert_close".into(),
            Effect::Train(t) => {
                let shapes: Vec<usize> = t.steps.iter().map(|(b, _)| *b).collect();
                let parallel = match &t.parallel {
                    Some(p) => {
                        let rows: Vec<usize> = p.gradients.iter().map(|(r, _)| *r).collect();
                        let fused: Vec<usize> = p.fused.iter().map(|(r, _)| *r).collect();
                        format!(" shards={} shard_rows={rows:?} fused_rows={fused:?}", p.shards)
                    }
                    None => String::new(),
                };
                format!(
                    "train params={} batches={shapes:?}{parallel} results=slots{:?}",
                    t.params.len(),
                    t.result_slots
                )
            }
            Effect::Reduce { slot, .. } => format!("reduce_mean -> slot {slot}"),
            Effect::Collect { all, slots, .. } => {
                format!("{} -> slots {slots:?}", if *all { "collect" } else { "first" })
            }
            Effect::Save { path, tensors, .. } => format!("save {} tensors to {path:?}", tensors.len()),
            Effect::Load { path, tensors, states, .. } => {
                format!("load {} tensors from {path:?}", tensors.len() + states.len())
            }
            Effect::Export(x) => format!("export {}({})", x.name, x.params.join(", ")),
        }
    }

    /// The graph nodes a plan-carrying effect reads (sources, initial values,
    /// region outputs), in a fixed order.
    pub fn plan_operands(&self) -> Vec<NodeId> {
        fn dataset(d: &super::plan::Dataset, out: &mut Vec<NodeId>) {
            if let super::plan::Source::Nodes(ids) = &d.source {
                out.extend(ids);
            }
            for r in d.transforms.iter().flat_map(|t| t.regions()) {
                out.extend(&r.outputs);
            }
        }
        let mut out = Vec::new();
        match self {
            Effect::Print { .. } | Effect::AssertClose { .. } | Effect::Load { .. } => {}
            Effect::Train(t) => {
                dataset(&t.data, &mut out);
                out.extend(t.carried().map(|(_, id)| *id));
                for r in t.steps.iter().map(|(_, r)| r).chain(t.parallel.iter().flat_map(|p| p.regions())) {
                    out.extend(&r.outputs);
                }
                for e in &t.evals {
                    dataset(&e.reduce.data, &mut out);
                    e.reduce.regions.iter().for_each(|(_, r)| out.extend(&r.outputs));
                }
            }
            Effect::Reduce { plan, .. } => {
                dataset(&plan.data, &mut out);
                plan.regions.iter().for_each(|(_, r)| out.extend(&r.outputs));
            }
            Effect::Collect { data, .. } => dataset(data, &mut out),
            Effect::Save { tensors, .. } => out.extend(tensors.iter().map(|(_, id)| *id)),
            Effect::Export(x) => {
                out.extend(&x.region.outputs);
                out.extend(x.symbolic.iter().flat_map(|(_, r)| &r.outputs));
                out.extend(x.sized.iter().flat_map(|(_, r)| &r.outputs));
            }
        }
        out
    }
}

impl Program {
    /// Calls `f` on every node id the effects and their plans refer to
    /// (printed values, initial parameters, region outputs, data sources),
    /// so passes can rewrite them when they replace a node.
    pub fn for_each_ref(&mut self, f: &mut dyn FnMut(&mut NodeId)) {
        fn item(i: &mut PrintItem, f: &mut dyn FnMut(&mut NodeId)) {
            match i {
                PrintItem::Tensor(id) | PrintItem::Bytes(id) => f(id),
                PrintItem::Text(_) => {}
                PrintItem::Tuple(items) | PrintItem::Line(items) => items.iter_mut().for_each(|i| item(i, f)),
            }
        }
        fn dataset(d: &mut super::plan::Dataset, f: &mut dyn FnMut(&mut NodeId)) {
            if let super::plan::Source::Nodes(ids) = &mut d.source {
                ids.iter_mut().for_each(&mut *f);
            }
            for r in d.transforms.iter_mut().flat_map(|t| t.regions_mut()) {
                r.outputs.iter_mut().for_each(&mut *f);
            }
        }
        for out in &mut self.graph.outputs {
            f(out);
        }
        for e in &mut self.effects {
            match e {
                Effect::Print { item: i, .. } => item(i, f),
                Effect::AssertClose { actual, expected, .. } => {
                    f(actual);
                    f(expected);
                }
                Effect::Train(t) => {
                    dataset(&mut t.data, f);
                    t.params.iter_mut().for_each(|(_, id)| f(id));
                    t.states.iter_mut().for_each(|(_, id)| f(id));
                    t.model_states.iter_mut().for_each(|(_, id)| f(id));
                    t.steps.iter_mut().for_each(|(_, r)| r.outputs.iter_mut().for_each(&mut *f));
                    for r in t.parallel.iter_mut().flat_map(|p| p.regions_mut()) {
                        r.outputs.iter_mut().for_each(&mut *f);
                    }
                    for ev in &mut t.evals {
                        dataset(&mut ev.reduce.data, f);
                        ev.reduce.regions.iter_mut().for_each(|(_, r)| r.outputs.iter_mut().for_each(&mut *f));
                    }
                }
                Effect::Reduce { plan, .. } => {
                    dataset(&mut plan.data, f);
                    plan.regions.iter_mut().for_each(|(_, r)| r.outputs.iter_mut().for_each(&mut *f));
                }
                Effect::Collect { data, .. } => dataset(data, f),
                Effect::Save { tensors, .. } => tensors.iter_mut().for_each(|(_, id)| f(id)),
                Effect::Load { states, .. } => states.iter_mut().for_each(|(_, _, _, id)| f(id)),
                Effect::Export(x) => {
                    x.region.outputs.iter_mut().for_each(&mut *f);
                    x.symbolic.iter_mut().for_each(|(_, r)| r.outputs.iter_mut().for_each(&mut *f));
                    x.sized.iter_mut().for_each(|(_, r)| r.outputs.iter_mut().for_each(&mut *f));
                }
            }
        }
    }

    /// Whether anything besides datasets' sources refers to `id`: a graph
    /// output, an effect, a plan's region.
    pub fn read_besides_sources(&self, id: NodeId) -> bool {
        let mut refs = 0usize;
        self.clone().for_each_ref(&mut |r| refs += usize::from(*r == id));
        let datasets = self.effects.iter().flat_map(|e| match e {
            Effect::Train(t) => std::iter::once(&t.data).chain(t.evals.iter().map(|ev| &ev.reduce.data)).collect(),
            Effect::Reduce { plan, .. } => vec![&plan.data],
            Effect::Collect { data, .. } => vec![&**data],
            _ => Vec::new(),
        });
        let as_source = datasets
            .map(|d| match &d.source {
                super::plan::Source::Nodes(ids) => ids.iter().filter(|r| **r == id).count(),
                _ => 0,
            })
            .sum::<usize>();
        refs > as_source
    }

    /// Every node the program's effects and outputs read directly.
    pub fn roots(&mut self) -> Vec<NodeId> {
        let mut out = Vec::new();
        self.for_each_ref(&mut |id| out.push(*id));
        out
    }

    /// Makes every reader of `old` — nodes, effects, plans — read `new`,
    /// and every record of it (`plan::StepParts`) name `new`.
    pub fn replace_uses(&mut self, old: NodeId, new: NodeId) {
        self.graph.replace_uses(old, new);
        let mut renamed = |id: &mut NodeId| {
            if *id == old {
                *id = new;
            }
        };
        self.for_each_ref(&mut renamed);
        for e in &mut self.effects {
            if let Effect::Train(t) = e {
                for parts in &mut t.parts {
                    parts.gradients.iter_mut().chain(parts.global_norm.as_mut()).for_each(&mut renamed);
                }
                for sums in t.parallel.iter_mut().flat_map(|p| &mut p.to_sum) {
                    sums.iter_mut().for_each(&mut renamed);
                }
            }
        }
    }
}
