//! Runs a traced program: performs its effects in order, evaluating each
//! graph node the first time an effect needs it (so a later statement's
//! error never hides an earlier statement's output), and evaluates regions
//! (map functions, training steps) many times with their inputs bound.
//!
//! Contract: every node is evaluated at most once in the main context;
//! inside a region, the nodes that do not depend on the region's inputs are
//! taken from the main context (computed once), the rest are recomputed for
//! every binding. Results are the reference interpreter's.

use super::effects::{assert_close, print_item};
use crate::backend::interp::check_finite;
use crate::backend::{Backend, BackendKind, Prepare, PreparedUnit};
use crate::diag::{Code, Diagnostic};
use crate::ir::plan::Region;
use crate::ir::{Effect, Graph, NodeId, Op, Program};
use crate::tensor::{eval_node, Tensor, Values};
use std::collections::{HashMap, HashSet};

/// A region prepared for repeated evaluation on the selected backend.
pub struct CompiledRegion {
    unit: Box<dyn PreparedUnit>,
}

/// The values a region carries from run to run — a training step's
/// parameters and optimizer states, its last inputs, which its last outputs
/// replace. They stay inside the prepared unit between steps (no copy in
/// or out); `values` is brought up to date only when asked
/// ([`Carry::values`]).
pub struct Carry<'r> {
    values: Vec<Tensor>,
    /// The unit whose copy is newer than `values`.
    holder: Option<&'r dyn PreparedUnit>,
}

impl<'r> Carry<'r> {
    pub fn new(values: Vec<Tensor>) -> Carry<'r> {
        Carry { values, holder: None }
    }

    /// The current values (read back from the unit holding them).
    pub fn values(&mut self) -> Result<&[Tensor], Diagnostic> {
        if let Some(unit) = self.holder.take() {
            self.values = unit.read_carried()?;
        }
        Ok(&self.values)
    }

    /// The current values at positions `which` (read from the unit holding
    /// them, only those).
    pub fn some(&self, which: &[usize]) -> Result<Vec<Tensor>, Diagnostic> {
        match self.holder {
            Some(unit) => unit.read_carried_some(which),
            None => which
                .iter()
                .map(|&i| {
                    self.values.get(i).cloned().ok_or_else(|| Diagnostic::internal("runtime: no such carried value"))
                })
                .collect(),
        }
    }

    /// Replaces the current values (computed outside any unit).
    pub fn replace(&mut self, values: Vec<Tensor>) {
        self.values = values;
        self.holder = None;
    }

    /// The current values, given up.
    pub fn into_values(mut self) -> Result<Vec<Tensor>, Diagnostic> {
        self.values()?;
        Ok(self.values)
    }

    /// Whether `unit` holds the current values.
    fn held_by(&self, unit: &dyn PreparedUnit) -> bool {
        self.holder.is_some_and(|h| std::ptr::addr_eq(h, unit))
    }
}

impl CompiledRegion {
    /// The prepared unit that runs this region.
    pub fn unit(&self) -> &dyn PreparedUnit {
        self.unit.as_ref()
    }
}

/// The state of one program run.
pub struct Executor<'p> {
    pub program: &'p Program,
    /// Position of every node in one fixed topological order.
    rank: rustc_hash::FxHashMap<NodeId, usize>,
    /// Values computed in the main context.
    pub values: Values,
    /// Values of slots filled by effects that already ran.
    pub slots: HashMap<usize, Tensor>,
    /// Where `print` writes.
    pub out: &'p mut dyn std::io::Write,
    /// Options from the command line.
    pub options: RunOptions,
    /// Loaded data sources and `cache()`d passes, shared with pipeline threads.
    pub data_cache: super::pipeline::Caches,
    /// The nodes effects and plans read (`Program::roots`), found at the
    /// first region compiled.
    roots: Option<rustc_hash::FxHashSet<NodeId>>,
}

/// The state an executor carries from one run of a growing program to the
/// next (see `Executor::resume`). The dataset cache is not carried: it is
/// keyed by the address of a plan, which a later run may reuse.
#[derive(Default)]
pub struct Memory {
    values: Values,
    slots: HashMap<usize, Tensor>,
    rank: rustc_hash::FxHashMap<NodeId, usize>,
    /// The graph's node-id bound when this memory was taken: nodes added
    /// since have ids at or above it.
    bound: usize,
}

/// Run-time options (from the command line).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Report the first op producing a NaN or infinity, with its span.
    pub check_numerics: bool,
    /// Directory that relative paths in the program resolve against.
    pub base_dir: std::path::PathBuf,
    /// Report run-time choices (the input pipeline's tuning) on stderr.
    pub verbose: bool,
    /// Which backend evaluates regions (training steps, metrics, `map`s).
    pub backend: BackendKind,
    /// A kernel that the backend would run on the host interpreter is an
    /// error (`--strict`) instead of a planned, reported fallback.
    pub strict: bool,
    /// Worker threads of the JIT backend (0 or 1: the calling thread only).
    pub threads: usize,
    /// The processes of a data-parallel run (`None`: one process, or a
    /// data-parallel run's `--shards` in one process).
    pub world: Option<std::sync::Arc<dyn crate::dist::Communicator>>,
    /// `--step-timeout`: how long a data-parallel step waits for the other
    /// ranks before the watchdog stops the job (`None`: from the measured
    /// step time).
    pub step_timeout: Option<std::time::Duration>,
}

impl RunOptions {
    /// Whether this process prints, logs and writes checkpoints and files:
    /// rank 0 of a data-parallel run, or the only process.
    pub fn is_primary(&self) -> bool {
        self.world.as_ref().is_none_or(|w| w.rank() == 0)
    }
}

/// Runs `program`, writing printed output to `out`.
pub fn execute(program: &Program, out: &mut dyn std::io::Write, options: RunOptions) -> Result<(), Diagnostic> {
    let mut ex = Executor::new(program, out, options)?;
    for effect in &program.effects {
        crate::interrupt::check()?;
        ex.run_effect(effect)?;
    }
    Ok(())
}

impl<'p> Executor<'p> {
    pub fn new(
        program: &'p Program,
        out: &'p mut dyn std::io::Write,
        options: RunOptions,
    ) -> Result<Executor<'p>, Diagnostic> {
        let order = program.graph.topo_order();
        if order.len() != program.graph.node_count() {
            return Err(Diagnostic::internal("runtime: the graph has a cycle"));
        }
        let rank = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        Ok(Executor {
            program,
            rank,
            values: Values::new(),
            slots: HashMap::new(),
            out,
            options,
            data_cache: Default::default(),
            roots: None,
        })
    }

    /// An executor that continues a run from `memory` on a program whose
    /// graph has only grown since (the REPL appends each entry's nodes):
    /// values and filled slots are kept, and the new nodes rank after the
    /// old ones in id order, which is topological because `Graph::add`
    /// only links nodes that already exist.
    pub fn resume(
        program: &'p Program,
        out: &'p mut dyn std::io::Write,
        options: RunOptions,
        memory: Memory,
    ) -> Executor<'p> {
        let Memory { values, slots, mut rank, bound } = memory;
        let g = &program.graph;
        // Only the ids added since (a long session's entry costs what its
        // own nodes do); every node unranked otherwise means a node was
        // removed and its id reused, and then all are looked at.
        let mut new: Vec<NodeId> =
            (bound..g.node_bound()).map(NodeId::new).filter(|&n| g.contains(n) && !rank.contains_key(&n)).collect();
        if rank.len() + new.len() != g.node_count() {
            new = g.node_ids().into_iter().filter(|n| !rank.contains_key(n)).collect();
        }
        new.sort_unstable();
        let base = rank.len();
        rank.extend(new.into_iter().enumerate().map(|(i, n)| (n, base + i)));
        Executor { program, rank, values, slots, out, options, data_cache: Default::default(), roots: None }
    }

    /// What `resume` needs to continue after this run.
    pub fn into_memory(self) -> Memory {
        let bound = self.program.graph.node_bound();
        Memory { values: self.values, slots: self.slots, rank: self.rank, bound }
    }

    /// Runs one effect of the program.
    pub fn run(&mut self, effect: &Effect) -> Result<(), Diagnostic> {
        self.run_effect(effect)
    }

    pub fn graph(&self) -> &'p Graph {
        &self.program.graph
    }

    pub fn run_effect(&mut self, effect: &Effect) -> Result<(), Diagnostic> {
        match effect {
            Effect::Print { item, full, span } => {
                self.demand(&crate::ir::numbering::effect_operands(effect))?;
                // A value that cannot print (a `print_text` value that is
                // not a byte) is reported at the statement.
                let text = print_item(item, *full, &self.values).map_err(|d| {
                    if d.labels.is_empty() {
                        d.label(*span, "while printing this")
                    } else {
                        d
                    }
                })?;
                writeln!(self.out, "{text}").map_err(|e| {
                    Diagnostic::new(Code::Runtime, format!("cannot write the output of print: {e}"))
                        .label(*span, "while printing this")
                })
            }
            Effect::AssertClose { actual, expected, tol, span } => {
                self.demand(&[*actual, *expected])?;
                assert_close(self.value(*actual)?, self.value(*expected)?, *tol, *span)
            }
            Effect::Train(plan) => super::train::run(self, plan),
            Effect::Reduce { plan, slot, span } => {
                let mean = super::dataset::reduce_mean(self, plan, &[], *span)?;
                self.slots.insert(*slot, mean);
                Ok(())
            }
            Effect::Collect { data, all, slots, span } => {
                let parts = super::dataset::collect(self, data, *all, *span)?;
                for (slot, t) in slots.iter().zip(parts) {
                    self.slots.insert(*slot, t);
                }
                Ok(())
            }
            // Written out by `tfc build` (cli/build.rs) once the program ends.
            Effect::Export(_) => Ok(()),
            // One process of a data-parallel run writes the files (every
            // process holds the same values).
            Effect::Save { .. } if !self.options.is_primary() => Ok(()),
            Effect::Save { tensors, path, span } => {
                let ids: Vec<NodeId> = tensors.iter().map(|(_, id)| *id).collect();
                self.demand(&ids)?;
                let named: Vec<(String, &Tensor)> = tensors
                    .iter()
                    .map(|(n, id)| Ok((n.clone(), self.value(*id)?)))
                    .collect::<Result<_, Diagnostic>>()?;
                let path = self.resolve_path(path);
                crate::io::checkpoint::save(&path, &named, &[]).map_err(|d| d.label(*span, "while saving"))
            }
            Effect::Load { tensors, states, path, span } => {
                let path = self.resolve_path(path);
                let mut want: Vec<(String, crate::ir::TensorType)> =
                    tensors.iter().map(|(n, t, _)| (n.clone(), t.clone())).collect();
                want.extend(states.iter().map(|(n, t, _, _)| (n.clone(), t.clone())));
                let (loaded, _) = crate::io::checkpoint::load_optional(&path, &want, tensors.len())
                    .map_err(|d| d.label(*span, "while loading"))?;
                let (params, loaded_states) = loaded.split_at(tensors.len());
                for ((_, _, slot), t) in tensors.iter().zip(params) {
                    self.slots.insert(*slot, t.clone().ok_or_else(|| Diagnostic::internal("a parameter not loaded"))?);
                }
                // A state the file lacks keeps its value.
                for ((_, _, slot, before), t) in states.iter().zip(loaded_states) {
                    let t = match t {
                        Some(t) => t.clone(),
                        None => {
                            self.demand(&[*before])?;
                            self.value(*before)?.clone()
                        }
                    };
                    self.slots.insert(*slot, t);
                }
                Ok(())
            }
        }
    }

    /// A path from the program, resolved against the program's directory.
    pub fn resolve_path(&self, path: &str) -> std::path::PathBuf {
        let p = std::path::Path::new(path);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.options.base_dir.join(p)
        }
    }

    pub fn value(&self, id: NodeId) -> Result<&Tensor, Diagnostic> {
        self.values.get(&id).ok_or_else(|| Diagnostic::internal(format!("runtime: node {id:?} was not evaluated")))
    }

    /// The value of `id` for a dataset that reads it as its source: moved
    /// out when nothing else will read it (every node that reads it has its
    /// value, and no effect, plan or output refers to it), a copy
    /// otherwise. A dataset made from a large tensor (`from_tensors(xs,
    /// ys)`) then holds its rows once instead of twice, and starting its
    /// first pass costs no copy (100 MB took 0.1-0.2 s in fresh pages). A
    /// later statement that reads it after all computes it again.
    pub fn value_for_source(&mut self, id: NodeId) -> Result<Tensor, Diagnostic> {
        let g = self.graph();
        let unread = !matches!(g.node(id).op, Op::Slot { .. })
            && g.users(id).iter().all(|u| self.values.contains_key(u))
            && !self.program.read_besides_sources(id);
        match unread.then(|| self.values.remove(&id)).flatten() {
            Some(moved) => Ok(moved),
            None => self.value(id).cloned(),
        }
    }

    /// Evaluates, in the main context, every node the roots need.
    pub fn demand(&mut self, roots: &[NodeId]) -> Result<(), Diagnostic> {
        let g = self.graph();
        let mut needed = Vec::new();
        let mut seen: HashSet<NodeId> = HashSet::new();
        let mut stack: Vec<NodeId> = roots.iter().copied().filter(|r| !self.values.contains_key(r)).collect();
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            needed.push(n);
            for i in g.inputs(n) {
                if !self.values.contains_key(&i) && !seen.contains(&i) {
                    stack.push(i);
                }
            }
        }
        needed.sort_by_key(|n| self.rank.get(n).copied().unwrap_or(usize::MAX));
        if self.compiles_statements() {
            // The slots first (filled by effects), then the rest at once on
            // the backend when it is worth it (module `statements`).
            let (slots, rest): (Vec<NodeId>, Vec<NodeId>) =
                needed.iter().partition(|&&n| matches!(g.node(n).op, Op::Slot { .. }));
            self.evaluate(&slots)?;
            if self.compute_statements(&rest)? {
                return Ok(());
            }
            return self.evaluate_freeing(&rest);
        }
        self.evaluate_freeing(&needed)
    }

    /// `evaluate`, and for statements with much work (as `statements`
    /// measures it) each value is let go once every node that reads it has
    /// its value, unless an effect or a plan reads it (a root) or a
    /// broadcast does (a compiled region may read a broadcast as its
    /// source): a forward pass interpreted at the top level keeps its live
    /// values, not every intermediate (a GPT's loss printed at batch 16 held
    /// 1.2 GB). A value let go that a later statement needs after all is
    /// computed again (`demand` computes whatever is missing).
    fn evaluate_freeing(&mut self, nodes: &[NodeId]) -> Result<(), Diagnostic> {
        let program = self.program;
        if super::statements::work(program, nodes) < super::statements::MIN_WORK {
            return self.evaluate(nodes);
        }
        let roots = self.roots.get_or_insert_with(|| program.clone().roots().into_iter().collect()).clone();
        let g = self.graph();
        for &n in nodes {
            self.evaluate(&[n])?;
            for i in g.inputs(n) {
                let users = g.users(i);
                let kept = roots.contains(&i)
                    || matches!(g.node(i).op, Op::Slot { .. })
                    || users
                        .iter()
                        .any(|u| !self.values.contains_key(u) || matches!(g.node(*u).op, Op::BroadcastTo { .. }));
                if !kept {
                    self.values.remove(&i);
                }
            }
        }
        Ok(())
    }

    /// Whether top-level statements may run on the backend (module
    /// `statements`): on the CPU backend, unless every op's result is
    /// checked (`--check-numerics`, the interpreter's job).
    fn compiles_statements(&self) -> bool {
        self.options.backend == BackendKind::Jit && !self.options.check_numerics
    }

    /// Computes `nodes` (no slots, topological order) as one prepared unit
    /// of the main unit's plan when `statements::segment` says it applies;
    /// `false` when it does not (nothing was computed).
    fn compute_statements(&mut self, nodes: &[NodeId]) -> Result<bool, Diagnostic> {
        let program = self.program;
        // Most statements are small: decided before anything costs more
        // than a look at their nodes (a REPL entry's executor is new, and
        // its roots take a walk over the whole session's program).
        if super::statements::work(program, nodes) < super::statements::MIN_WORK {
            return Ok(false);
        }
        let roots = self.roots.get_or_insert_with(|| program.clone().roots().into_iter().collect());
        let segment = match super::statements::segment(program, nodes, &self.values, roots) {
            Ok(segment) => segment,
            Err(super::statements::Unplanned(why)) => {
                if self.options.verbose {
                    eprintln!("statements: {} ops interpreted: {why}", nodes.len());
                }
                return Ok(false);
            }
        };
        let region = Region { id: crate::ir::plan::RegionId(usize::MAX), inputs: Vec::new(), outputs: segment.outputs };
        let request = Prepare {
            program,
            region: &region,
            nodes: &segment.nodes,
            slot_pos: &HashMap::new(),
            outside: &self.values,
            carried: 0,
            threads: self.options.threads,
            check_numerics: false,
            strict: false,
            unit: Some(&segment.unit),
            collectives: None,
        };
        let unit = self.backend().prepare(&request)?;
        if self.options.verbose {
            let counts = unit.counts();
            eprintln!(
                "statements: {} ops as {} kernels on the {} backend ({} compiled or native steps, {} interpreted)",
                segment.nodes.len(),
                segment.unit.kernels.len(),
                unit.backend(),
                counts.jit + counts.native + counts.gemm,
                counts.interp
            );
        }
        let outputs = unit.run(&[])?;
        for (n, v) in region.outputs.iter().zip(outputs) {
            self.values.insert(*n, v);
        }
        Ok(true)
    }

    /// Evaluates `nodes` (in topological order) on the interpreter, node by
    /// node.
    fn evaluate(&mut self, nodes: &[NodeId]) -> Result<(), Diagnostic> {
        let g = self.graph();
        for &n in nodes {
            let node = g.node(n);
            let value = match &node.op {
                Op::Slot { slot, .. } => self.slots.get(slot).cloned().ok_or_else(|| {
                    Diagnostic::internal(format!("runtime: slot {slot} is read before the effect that fills it ran"))
                        .label(node.span, "this value")
                })?,
                op => {
                    let inputs = g.inputs(n);
                    let args = inputs.iter().map(|i| self.value(*i)).collect::<Result<Vec<_>, _>>()?;
                    eval_node(op, &args, &node.ty)
                        .map_err(|d| d.label(node.span, format!("while computing this `{}`", op.name())))?
                }
            };
            self.check_numerics(n, &value)?;
            self.values.insert(n, value);
        }
        Ok(())
    }

    /// Splits a region into the part that depends on its inputs (evaluated
    /// per binding) and the rest (evaluated now, once).
    pub fn compile_region(&mut self, region: &Region) -> Result<CompiledRegion, Diagnostic> {
        self.compile_region_carrying(region, 0)
    }

    /// `compile_region` for a region whose last `carried` outputs replace
    /// its last `carried` inputs after each run (run it with `run_carrying`).
    pub fn compile_region_carrying(&mut self, region: &Region, carried: usize) -> Result<CompiledRegion, Diagnostic> {
        self.compile_region_with(region, carried, None)
    }

    /// `compile_region_carrying` for a region whose all-reduces sum over
    /// the processes `collectives` reaches (a fused data-parallel step).
    pub fn compile_region_with(
        &mut self,
        region: &Region,
        carried: usize,
        collectives: Option<&std::sync::Arc<dyn crate::backend::Collectives>>,
    ) -> Result<CompiledRegion, Diagnostic> {
        if carried > region.inputs.len() || carried > region.outputs.len() {
            return Err(Diagnostic::internal("runtime: a region carries more values than it takes or gives"));
        }
        let g = self.graph();
        let slot_pos: HashMap<usize, usize> = region.inputs.iter().enumerate().map(|(i, (s, _))| (*s, i)).collect();
        // The nodes that depend on the inputs, and the splats only they read
        // (the same split the optimizer's compilation units use); everything
        // they read from outside, and any output that does not vary, is
        // computed once now.
        let program = self.program;
        let roots = self.roots.get_or_insert_with(|| program.clone().roots().into_iter().collect());
        let nodes = crate::passes::units::unit_nodes(g, region, &self.rank, roots);
        let varying: HashSet<NodeId> = nodes.iter().copied().collect();
        let mut invariant: Vec<NodeId> =
            nodes.iter().flat_map(|&n| g.inputs(n)).filter(|i| !varying.contains(i)).collect();
        invariant.extend(region.outputs.iter().copied().filter(|o| !varying.contains(o)));
        self.demand(&invariant)?;
        let request = Prepare {
            program,
            region,
            nodes: &nodes,
            slot_pos: &slot_pos,
            outside: &self.values,
            carried,
            threads: self.options.threads,
            check_numerics: self.options.check_numerics,
            strict: self.options.strict,
            unit: None,
            collectives,
        };
        Ok(CompiledRegion { unit: self.backend().prepare(&request)? })
    }

    /// The backend that runs regions: the selected one, or the interpreter
    /// under `--check-numerics` (which checks every op's result).
    fn backend(&self) -> &'static dyn Backend {
        match self.options.check_numerics {
            true => BackendKind::Interp.get(),
            false => self.options.backend.get(),
        }
    }

    /// Runs `r` with `head` as its first inputs and `carry` as the rest;
    /// `carry` then holds the carried outputs and the others are returned.
    pub fn run_carrying<'r>(
        &self,
        r: &'r CompiledRegion,
        head: &[Tensor],
        carry: &mut Carry<'r>,
    ) -> Result<Vec<Tensor>, Diagnostic> {
        crate::interrupt::check()?;
        let unit = r.unit.as_ref();
        if !carry.held_by(unit) {
            unit.load_carried(carry.values()?)?;
            carry.holder = Some(unit);
        }
        unit.run_head(head)
    }

    /// Evaluates a compiled region with its inputs bound.
    pub fn run_region(&self, r: &CompiledRegion, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        crate::interrupt::check()?;
        r.unit.run(inputs)
    }

    /// With `--check-numerics`, the first NaN or infinity is an error at the
    /// op that produced it.
    fn check_numerics(&self, n: NodeId, value: &Tensor) -> Result<(), Diagnostic> {
        if !self.options.check_numerics {
            return Ok(());
        }
        let node = self.graph().node(n);
        check_finite(&node.op, node.span, &node.ty, value)
    }
}
