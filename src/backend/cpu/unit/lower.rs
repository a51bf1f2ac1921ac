//! Lowering a compiled unit's kernels to steps (module `step`), kernel by
//! kernel in schedule order: which code runs each kernel, and where the
//! values it keeps to itself live.
//!
//! Contract: [`Lowering::kernel`] adds the steps of one kernel:
//! - an `Elementwise` kernel whose [`Spec`] the code generator accepts runs
//!   as Cranelift code, or, when it is exactly Adam's update (and the
//!   machine has AVX-512), as the native loop of module `adam` (same bits);
//! - a `Contraction` over an `f32` matmul is a `gemm` step (its transposed
//!   left operand read through strides, module `fold`) and its epilogue a
//!   compiled step; an `f32` convolution (or one of its gradients) a
//!   `Step::Conv`, which applies a bias / ReLU / mask epilogue in
//!   registers when that is the whole epilogue (`Spec::channel_post_ops`);
//!   the product goes into an output of its epilogue of the same size when
//!   the epilogue only reads it at the index it writes (`in_place_output`),
//!   else to scratch;
//! - a `Reduction`: its prologue compiled into scratch, the reduction
//!   native (module `reduce`), the epilogue compiled;
//! - a 2x2 max pool right after the direct convolution that writes its
//!   input is written by that convolution (`ConvPost::max_pool`), which
//!   records the windows' first maxima when the unit takes the pool's
//!   gradient; that gradient, a bias gradient summing it and a one-channel
//!   weight gradient then read the maxima (while the pooled gradient is
//!   still in place, `still_there`), and a result nothing else reads is not
//!   stored; other `f32` poolings and 2-D transposes run natively;
//! - `f16`/`bf16` kernels run the same way: compiled code widens and
//!   rounds in registers (`ir::spec`); a native `f32` kernel reads a
//!   two-byte operand widened into scratch (`widened`) and writes its
//!   result to `f32` scratch, rounded into place after it (`native_result`,
//!   `settle`), one `Step::Convert` each — except a bf16 product's
//!   epilogue that `Spec::bf16_epilogue` recognizes (its rounding, a bias,
//!   ReLU and masks), which on AVX-512 is one native pass from the `f32`
//!   sums into two-byte storage (`Step::Bf16Epilogue`, module
//!   `half_epilogue`);
//! - `i32` and `f64` values are compiled the same way (an `f64` kernel one
//!   element at a time, as `i64` ones); `i32`, `i64` and `f64` matmuls,
//!   reductions, convolutions (and their gradients), poolings (and their
//!   gradients) and scatter-adds, `bool` matmuls, convolutions and pools,
//!   and `argmax` of every type, run the interpreter's own loops
//!   (`Step::Loop`, module `generic`, `generic_contraction`); a transpose,
//!   slice, pad, concatenation or gather of any type moves words of its
//!   elements' width (`stored_result`);
//! - anything else (what `Spec::analyze` refuses: a `one_hot` of 2^24
//!   classes or more, an `iota` along a longer axis) runs node by node on
//!   the reference interpreter, so every program runs.
//!
//! Scratch (values a kernel keeps to itself) goes after the arena, placed
//! so that sharing bytes adds no wait to the schedule (module `schedule`).
//!
//! Example: an MLP layer's kernel `relu(x @ w + b)` lowers to
//! `Step::Gemm` into the ReLU's buffer and a compiled `add, relu` step that
//! overwrites it in place.

use super::generic::Loop;
use super::internal;
use super::recognize::{
    all_reduce, along_axis, float_conv, float_pool, generic_layout, generic_loop, generic_type, index_op,
    is_float_matmul, is_max_pool_2x2, is_quant_matmul, layout_transpose, layout_window, native_reduce, pooled_shape,
    scan_loop, table_reshape,
};
use super::step::{place, Arg, Code, ConvPost, Fallible, Int8Weights, InterpNode, QuantPost, Ref, Step};
use crate::backend::cpu::kernels::int8_gemm::pack_weights;
use crate::backend::cpu::schedule::{Order, Place, Schedule, Scratch};
use crate::backend::cpu::threads::ROW_BLOCK;
use crate::backend::StepCounts;
use crate::diag::Diagnostic;
use crate::ir::compiled::{CompiledUnit, Device, Kernel, KernelKind, LoopPlan};
use crate::ir::kernel_desc::{part_spec, split_anchor, Fusion, PartRole};
use crate::ir::spec::{computes_as_f32, Kind, Spec};
use crate::ir::{DType, Graph, NodeId, Op, ReduceOp};
use crate::tensor::{Tensor, Values};
use std::collections::{HashMap, HashSet};

/// Where the unit's values live while its steps are built.
pub(super) struct Builder<'a> {
    pub(super) g: &'a Graph,
    /// Each value's storage, as far as known.
    pub(super) loc: HashMap<NodeId, Ref>,
    /// The values fixed at `prepare` (`Ref::Fixed`): constants, and values
    /// computed outside the unit.
    pub(super) fixed: Vec<Tensor>,
    /// How many table entries (`Ref::Table`) are given out.
    pub(super) tables: usize,
    /// The nodes of the unit.
    pub(super) in_unit: rustc_hash::FxHashSet<NodeId>,
    /// The executor's values of nodes outside the unit.
    pub(super) values: &'a Values,
    /// Parts the plan names Adam's update that run as Cranelift code
    /// (`StepCounts::unfused`).
    pub(super) unfused: usize,
    /// The specs of the compiled steps so far (`Code::Pending`), compiled
    /// together when the steps are complete (`Lowering::finish`).
    pub(super) pending: Vec<Spec>,
}

impl Builder<'_> {
    /// `n`'s storage; a value computed outside the unit (by the executor)
    /// is fixed on first use.
    pub(super) fn get(&mut self, n: NodeId) -> Result<Ref, Diagnostic> {
        if let Some(&r) = self.loc.get(&n) {
            return Ok(r);
        }
        if self.in_unit.contains(&n) {
            return Err(internal(format!("node {} has no storage", n.index())));
        }
        let v = self.values.get(&n).ok_or_else(|| internal(format!("outside value {} missing", n.index())))?;
        self.fixed.push(v.clone());
        let r = Ref::Fixed(self.fixed.len() - 1);
        self.loc.insert(n, r);
        Ok(r)
    }

    /// The spec of `nodes`, reading any `broadcast_to` computed outside the
    /// unit as a broadcast of its (smaller) source rather than as the
    /// materialized tensor: the optimizer hoists a broadcast of an invariant
    /// value out of a training step, but streaming its full size every step
    /// would cost more than the few lanes of a splat.
    fn analyze(&mut self, nodes: &[NodeId], outputs: &[NodeId]) -> Result<Option<Spec>, Diagnostic> {
        let Some((spec, absorbed)) = part_spec(self.g, nodes, outputs, &self.in_unit) else { return Ok(None) };
        for a in absorbed {
            self.get(self.g.inputs(a)[0])?;
        }
        Ok(Some(spec))
    }

    /// The arena offset of an output of the compiled epilogue `spec` where
    /// the contraction `product` it reads may be stored: an `f32` output of
    /// the product's size, when every read of the product is at the index
    /// being written (compiled code loads an element's operands before it
    /// stores its results, so the epilogue then overwrites the product in
    /// place). The memory plan never puts an output of a contraction's
    /// kernel over one of the kernel's inputs, so nothing else the step
    /// reads is there. Only `plain` outputs qualify: not a unit output (a
    /// new parameter or state may be written over the old one, which the
    /// epilogue still reads).
    fn in_place_output(
        &mut self,
        spec: &Spec,
        product: NodeId,
        plain: &HashSet<NodeId>,
    ) -> Result<Option<usize>, Diagnostic> {
        let g = self.g;
        let n = g.node(product).ty.numel();
        let reads = spec.loads.iter().filter(|l| l.node == product);
        if spec.numel() != n || !reads.clone().all(|l| spec.reads_at_index(l)) || reads.count() == 0 {
            return Ok(None);
        }
        for &o in &spec.output_nodes {
            let node = g.node(o);
            if node.ty.dtype == DType::F32 && node.ty.numel() == n && plain.contains(&o) {
                if let Ref::Arena(at) = self.get(o)? {
                    return Ok(Some(at));
                }
            }
        }
        Ok(None)
    }

    /// The interpreted steps of `nodes` with `outputs` leaving them.
    fn interp(&mut self, nodes: &[NodeId], outputs: &[NodeId]) -> Result<Step, Diagnostic> {
        let local: HashMap<NodeId, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut out = Vec::with_capacity(nodes.len());
        for &n in nodes {
            let node = self.g.node(n);
            let args = self
                .g
                .inputs(n)
                .into_iter()
                .map(|i| match local.get(&i) {
                    Some(&l) => Ok(Arg::Local(l)),
                    None => self.get(i).map(Arg::Ref),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let arg_tys = self.g.inputs(n).into_iter().map(|i| self.g.node(i).ty.clone()).collect();
            let out_ref = if outputs.contains(&n) { Some(self.get(n)?) } else { None };
            out.push(InterpNode {
                op: node.op.clone(),
                ty: node.ty.clone(),
                span: node.span,
                args,
                arg_tys,
                out: out_ref,
            });
        }
        Ok(Step::Interp(out))
    }

    /// `nodes` (one iteration space) compiled when the code generator takes
    /// them and every output is in the arena, else interpreted.
    fn part(
        &mut self,
        nodes: &[NodeId],
        outputs: &[NodeId],
        adam: bool,
        counts: &mut StepCounts,
    ) -> Result<Step, Diagnostic> {
        let in_arena = outputs.iter().all(|o| self.loc.get(o).is_some_and(|r| r.in_arena().is_some()));
        match self.analyze(nodes, outputs)?.filter(|s| s.numel() > 0 && in_arena) {
            Some(spec) => {
                counts.jit += 1;
                self.jit(&spec, adam)
            }
            None => {
                counts.interp += 1;
                self.interp(nodes, outputs)
            }
        }
    }

    /// The compiled step of `spec` (laid out in rows of `ROW_BLOCK`), or
    /// Adam's native loop when the plan names it Adam's update (`adam`:
    /// `passes::adam_update`, which the CPU's target accepts only where
    /// the loop runs).
    fn jit(&mut self, spec: &Spec, adam: bool) -> Result<Step, Diagnostic> {
        let mut spec = spec.clone().in_rows_of(ROW_BLOCK);
        let mut args = Vec::with_capacity(spec.loads.len() + spec.outputs.len());
        // A half-precision value outside two-byte storage (a tensor, or
        // scratch a native kernel rounded) is read and written as its exact
        // `f32`s.
        let as_stored = |kind: &mut Kind, r: Ref| {
            if matches!(kind, Kind::F16 | Kind::BF16) && !matches!(r, Ref::Half(_)) {
                *kind = Kind::F32;
            }
        };
        for l in &mut spec.loads {
            let r = self.get(l.node)?;
            as_stored(&mut l.kind, r);
            args.push((r, self.g.node(l.node).ty.numel()));
        }
        let numel = spec.numel();
        for (o, kind) in spec.output_nodes.iter().zip(&mut spec.stores) {
            match self.get(*o)? {
                r if r.in_arena().is_some() => {
                    as_stored(kind, r);
                    args.push((r, numel));
                }
                r => return Err(internal(format!("a compiled kernel writes {r:?}"))),
            }
        }
        let spec = &spec;
        // Adam's update runs as a native loop with the same results (module
        // `adam`), its arguments in that loop's order.
        // (A plan made for another target may name it on a machine without
        // AVX-512: Cranelift's code computes the same bits.)
        let native = crate::backend::cpu::kernels::adam::recognize(spec).filter(|_| adam);
        if adam && native.is_none() && crate::backend::cpu::kernels::simd::avx512() {
            self.unfused += 1;
        }
        if let Some((native, order)) = native {
            let loads = order.iter().filter(|&&i| i < spec.loads.len()).count();
            let args = order.iter().map(|&i| args[i]).collect();
            let (rows, inner) = (spec.rows(), spec.inner);
            return Ok(Step::Jit {
                code: Code::Ready(native),
                args,
                loads,
                rows,
                inner,
                kind: "adam update",
                fallible: None,
            });
        }
        let code = Code::Pending(self.pending.len());
        self.pending.push(spec.clone());
        let sites: Vec<_> =
            spec.fallible.iter().map(|&(e, n)| (e, self.g.node(n).span, self.g.node(n).op.name())).collect();
        let fallible = (!sites.is_empty()).then(|| Box::new(Fallible { faults: Default::default(), sites }));
        let (loads, rows, inner) = (spec.loads.len(), spec.rows(), spec.inner);
        Ok(Step::Jit { code, args, loads, rows, inner, kind: "fused", fallible })
    }
}

/// Whether the pooled gradient a max-pool gradient written from recorded
/// maxima read (`(gy, masks, the step)`, see `grads_from_maxima`) still
/// holds it after `steps`, for a later step to read instead of that
/// gradient (of shape `grad`): the plan may reuse its bytes once the
/// pool's gradient ran.
pub(super) fn still_there(steps: &[Step], &(gy, _, at): &(Ref, usize, usize), grad: &[usize]) -> bool {
    let pooled = place(gy, pooled_shape(grad).iter().product());
    let overwrites = |s: &Step| s.access().writes.iter().any(|w| pooled.is_some_and(|p| w.overlaps(p)));
    !steps[at + 1..].iter().any(overwrites)
}

/// The steps of a unit as they are built, kernel by kernel in schedule
/// order, with what later kernels need to know of earlier ones.
pub(super) struct Lowering<'a> {
    pub(super) b: Builder<'a>,
    pub(super) steps: Vec<Step>,
    pub(super) counts: StepCounts,
    /// The places of the steps so far (for placing scratch, then the
    /// schedule); `sync` catches it up with `steps`.
    order: Order,
    /// Values kept inside a kernel go to scratch after the arena, placed
    /// so that sharing scratch bytes adds no wait to the schedule.
    scratch: Scratch,
    /// The largest convolution scratch a step needs (`Conv::cols_len`).
    pub(super) cols: usize,
    /// The transposes read through a matmul's strides (module `fold`).
    folded: HashSet<NodeId>,
    /// Kernel outputs in arena buffers of their own that only this run
    /// reads (where a contraction may leave its product, `in_place_output`).
    plain: HashSet<NodeId>,
    /// The unit's outputs.
    outputs: &'a [NodeId],
    /// Where each fused max pool's first maxima go, by the pooled node.
    first_max_at: HashMap<NodeId, usize>,
    /// The size of the first-maximum buffer so far.
    pub(super) first_max_end: usize,
    /// Convolution results not stored, only their fused pools
    /// (`ConvPost::pool_only`).
    unstored: HashSet<NodeId>,
    /// The pools whose fusion into a convolution the plan records and the
    /// CPU's target accepts (a plan made for another target may record
    /// what this machine cannot run).
    fusable: HashSet<NodeId>,
    /// The max-pool gradients written from recorded maxima, by node: their
    /// pooled gradient, masks (`Step::Reduce::from_maxima`) and step.
    grads_from_maxima: HashMap<NodeId, (Ref, usize, usize)>,
    /// How many steps read each of those gradients from the maxima.
    maxima_readers: HashMap<NodeId, usize>,
    /// The first node of each kernel that runs (partly) on the
    /// interpreter, and whether that was foreseen (the plan's `Host`
    /// device or reason, or the CPU's `host_reason`).
    pub(super) interpreted_kernels: Vec<(Option<NodeId>, bool)>,
    /// The plans of the unit's `scan` bodies (`CompiledUnit::loops`).
    loops: Vec<LoopPlan>,
    /// Worker threads a scan's body may use.
    threads: usize,
    /// `f32` products with a contiguous right operand run in one fixed
    /// order (`CompiledUnit::export`).
    ordered: bool,
    /// The kernels of scan bodies run (partly) on the interpreter, as
    /// `JitUnit::interpreted` lists them.
    pub(super) nested_interpreted: Vec<(String, crate::diag::Span, bool)>,
    /// The other processes the unit's all-reduces sum over.
    collectives: Option<std::sync::Arc<dyn crate::backend::Collectives>>,
}

impl<'a> Lowering<'a> {
    /// Starts lowering `unit` with storage `b` (its values' places so far);
    /// `buffers` are the planned buffers' byte offsets, `arena_floats` the
    /// arena's size, after which scratch goes.
    pub(super) fn new(
        b: Builder<'a>,
        unit: &CompiledUnit,
        outputs: &'a [NodeId],
        buffers: &HashMap<NodeId, usize>,
        arena_floats: usize,
        parallelism: super::Parallelism,
    ) -> Lowering<'a> {
        let super::Parallelism { threads, collectives } = parallelism;
        let folded = crate::backend::cpu::fold::foldable(b.g, unit, outputs, &b.loc, buffers);
        let plain = unit
            .buffers
            .iter()
            .filter(|buf| buf.over_input.is_none() && !outputs.contains(&buf.node))
            .map(|buf| buf.node)
            .collect();
        let fusable = (0..unit.kernels.len())
            .filter(|&k| unit.kernels[k].fusion.as_ref().is_some_and(|f| super::recognize::fuses(b.g, unit, k, f)))
            .map(|k| unit.kernels[k].nodes[0])
            .collect();
        Lowering {
            fusable,
            b,
            steps: Vec::new(),
            counts: StepCounts::default(),
            order: Order::default(),
            scratch: Scratch::new(arena_floats.div_ceil(16) * 16),
            cols: 0,
            folded,
            plain,
            outputs,
            first_max_at: HashMap::new(),
            first_max_end: 0,
            unstored: HashSet::new(),
            grads_from_maxima: HashMap::new(),
            maxima_readers: HashMap::new(),
            interpreted_kernels: Vec::new(),
            loops: unit.loops.clone(),
            threads,
            ordered: unit.export,
            nested_interpreted: Vec::new(),
            collectives,
        }
    }

    /// Adds the steps of kernel `k`: on the interpreter where the plan put
    /// it on the host, else native or compiled code (and the interpreter
    /// for any part that has none, which the CPU's target should have said:
    /// such a kernel counts as `unplanned`).
    pub(super) fn kernel(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        if let Some(last) = self.steps.len().checked_sub(1) {
            self.scratch.release(last);
        }
        if k.device == Device::Host {
            self.interpreted_kernels.push((k.nodes.first().copied(), true));
            return self.interpreted(&k.nodes, &k.outputs);
        }
        let before = self.counts.interp;
        self.native_kernel(k)?;
        if self.counts.interp > before {
            // What the CPU's target answers for this kernel (the plan's
            // answer, when it was made for the CPU; a plan made for another
            // target did not ask).
            let planned = k.why_host.is_some() || super::recognize::host_reason(self.b.g, k).is_some();
            self.counts.unplanned += usize::from(!planned);
            self.interpreted_kernels.push((k.nodes.first().copied(), planned));
        }
        Ok(())
    }

    fn native_kernel(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        if k.kind == KernelKind::Layout && k.nodes.iter().all(|n| self.folded.contains(n)) {
            self.counts.folded += 1;
            return Ok(());
        }
        match k.kind {
            KernelKind::Source => Ok(()),
            KernelKind::Elementwise if self.conversion(k)? => Ok(()),
            KernelKind::Elementwise => match self.b.analyze(&k.nodes, &k.outputs)? {
                Some(spec) if spec.numel() > 0 => {
                    let step = self.b.jit(&spec, k.fused_adam(PartRole::Body))?;
                    self.steps.push(step);
                    self.counts.jit += 1;
                    Ok(())
                }
                _ if table_reshape(g, &k.nodes) => self.reshape(k),
                _ => self.interpreted(&k.nodes, &k.outputs),
            },
            KernelKind::Contraction
                if is_float_matmul(g, k.nodes[0])
                    || is_quant_matmul(g, k.nodes[0])
                    || float_conv(g, k.nodes[0]).is_some() =>
            {
                self.contraction(k)
            }
            KernelKind::Contraction if generic_loop(g, k.nodes[0]).is_some() => self.generic_contraction(k),
            KernelKind::Reduction => self.reduction(k),
            KernelKind::Layout if float_pool(g, &k.nodes).is_some() => self.pool(k),
            KernelKind::Layout if generic_layout(g, &k.nodes).is_some() => self.generic_layout(k),
            KernelKind::Layout if layout_transpose(g, &k.nodes).is_some() => self.transpose(k),
            KernelKind::Layout if index_op(g, &k.nodes) => self.index(k),
            KernelKind::Layout if along_axis(g, &k.nodes).is_some() => self.along(k),
            KernelKind::Layout if layout_window(g, &k.nodes).is_some() => self.window(k),
            KernelKind::Layout if scan_loop(g, &k.nodes) => self.scan(k),
            KernelKind::Layout if all_reduce(g, &k.nodes) => self.all_reduce(k),
            _ => self.interpreted(&k.nodes, &k.outputs),
        }
    }

    /// A kernel that is one cast between `f32` and a two-byte float, from
    /// and to storage: the native conversion loop (`Step::Convert`, module
    /// `convert`, the same bits as compiled code; the vector loops are
    /// several times faster than compiled code's lane-by-lane rounding).
    /// `false` when `k` is not such a kernel.
    fn conversion(&mut self, k: &Kernel) -> Result<bool, Diagnostic> {
        let g = self.b.g;
        let [n] = k.nodes.as_slice() else { return Ok(false) };
        let Op::Cast(to) = g.node(*n).op else { return Ok(false) };
        let input = g.inputs(*n)[0];
        let from = g.node(input).ty.dtype;
        let len = g.node(*n).ty.numel();
        let Some(&dst) = self.b.loc.get(n) else { return Ok(false) };
        let src = self.b.get(input)?;
        let step = match (from, to, src, dst) {
            (DType::F32, DType::F16 | DType::BF16, Ref::Arena(_) | Ref::Input(_) | Ref::Fixed(_), Ref::Half(_)) => {
                Step::Convert { src, dst, len, dtype: to }
            }
            (DType::F16 | DType::BF16, DType::F32, Ref::Half(_), Ref::Arena(_)) => {
                Step::Convert { src, dst, len, dtype: from }
            }
            _ => return Ok(false),
        };
        self.steps.push(step);
        self.counts.native += 1;
        Ok(true)
    }

    /// Ends the lowering: marks the max-pool gradients that every reader
    /// computes from the maxima (they need not be written), and returns the
    /// schedule of the steps and the floats the arena needs with its
    /// scratch.
    /// The schedule and the scratch's end, once every compiled step has its
    /// function: the unit's new kernels compile together here (on all
    /// cores, module `codegen`), not one by one as the steps are built.
    pub(super) fn finish(&mut self) -> Result<(Schedule, usize), Diagnostic> {
        let functions = crate::backend::cpu::with_compiler(|c| c.compile_all(&self.b.pending)).map_err(internal)?;
        for step in &mut self.steps {
            if let Step::Jit { code, .. } = step {
                if let Code::Pending(i) = *code {
                    *code = Code::Compiled(functions[i], i);
                }
            }
        }
        let g = self.b.g;
        for (node, &(_, _, at)) in &self.grads_from_maxima {
            let all = self.maxima_readers.get(node) == Some(&g.users(*node).len()) && !self.outputs.contains(node);
            if let Step::Pool { unread, .. } = &mut self.steps[at] {
                *unread = all;
            }
        }
        self.counts.unfused += std::mem::take(&mut self.b.unfused);
        self.sync();
        Ok((std::mem::take(&mut self.order).finish(), self.scratch.end()))
    }

    /// Catches `order` up with `steps`.
    fn sync(&mut self) {
        while self.order.len() < self.steps.len() {
            self.order.push(self.steps[self.order.len()].access());
        }
    }

    /// `nodes` on the interpreter.
    fn interpreted(&mut self, nodes: &[NodeId], outputs: &[NodeId]) -> Result<(), Diagnostic> {
        // The interpreter's all-reduce is one process's: with other
        // processes it would quietly leave their shares out.
        if self.collectives.is_some() && nodes.iter().any(|&n| self.b.g.node(n).op == Op::AllReduce) {
            return Err(internal("an all-reduce over other processes left to the interpreter"));
        }
        let step = self.b.interp(nodes, outputs)?;
        self.steps.push(step);
        self.counts.interp += 1;
        Ok(())
    }

    /// Operand `n` of a matmul: a folded transpose's readers take its
    /// source, read transposed.
    fn operand(&mut self, n: NodeId) -> Result<(Ref, bool), Diagnostic> {
        match self.folded.contains(&n) {
            true => Ok((self.b.get(self.b.g.inputs(n)[0])?, true)),
            false => Ok((self.b.get(n)?, false)),
        }
    }

    /// The places `nodes` read from outside (a folded transpose: its source).
    fn outside(&self, nodes: &[NodeId]) -> Vec<Place> {
        let g = self.b.g;
        let sources = nodes.iter().flat_map(|&n| g.inputs(n)).filter(|i| !nodes.contains(i));
        sources
            .map(|i| if self.folded.contains(&i) { g.inputs(i)[0] } else { i })
            .filter_map(|i| self.b.loc.get(&i).and_then(|&r| place(r, g.node(i).ty.numel())))
            .collect()
    }

    /// Gives `n` a place in scratch if it has none; the kernel that keeps it
    /// reads `reads` from outside.
    fn scratch_for(&mut self, n: NodeId, reads: &[Place]) {
        let ty = &self.b.g.node(n).ty;
        if self.b.loc.contains_key(&n) {
            return;
        }
        let at = self.scratch.take(ty.numel() * ty.dtype.size_bytes().max(4) / 4, &self.order, reads);
        // Values of two-byte types kept in scratch are their `f32`s.
        let r = match ty.dtype {
            DType::F64 | DType::I64 => Ref::Wide(4 * at),
            DType::I32 | DType::I8 => Ref::Int(4 * at),
            DType::Bool => Ref::Mask(4 * at),
            DType::F32 | DType::F16 | DType::BF16 => Ref::Arena(at),
        };
        self.b.loc.insert(n, r);
    }

    /// Where a native kernel writes an `i32`, `i64`, `f64` or `bool` result
    /// `n`: its arena place, or scratch when the kernel keeps it to itself
    /// (`None`: in no place such a kernel can write).
    fn byte_result(&mut self, n: NodeId, reads: &[Place]) -> Result<Option<Ref>, Diagnostic> {
        if !self.b.loc.contains_key(&n) {
            self.sync();
            self.scratch_for(n, reads);
        }
        Ok(self.b.loc.get(&n).copied().filter(|r| matches!(r, Ref::Int(_) | Ref::Wide(_) | Ref::Mask(_))))
    }

    /// Where a native kernel of any type writes `n`, and where `settle` then
    /// rounds it to: a float kept as `f32`s as `native_result` says, any
    /// other value in its own storage (`byte_result`).
    fn stored_result(&mut self, n: NodeId, reads: &[Place]) -> Result<Option<(Ref, Option<Ref>)>, Diagnostic> {
        match computes_as_f32(self.b.g.node(n).ty.dtype) {
            true => Ok(self.native_result(n, reads)?.map(|(at, to)| (Ref::Arena(at), to))),
            false => Ok(self.byte_result(n, reads)?.map(|r| (r, None))),
        }
    }

    /// `n` as a native `f32` kernel reads it: a half-precision value in
    /// two-byte storage is widened into scratch first (`Step::Convert`);
    /// the kernel being prepared reads `reads` from outside.
    fn widened(&mut self, n: NodeId, reads: &[Place]) -> Result<Ref, Diagnostic> {
        let r = self.b.get(n)?;
        if !matches!(r, Ref::Half(_)) {
            return Ok(r);
        }
        let ty = &self.b.g.node(n).ty;
        let (len, dtype) = (ty.numel(), ty.dtype);
        self.sync();
        let at = self.scratch.take(len, &self.order, reads);
        self.steps.push(Step::Convert { src: r, dst: Ref::Arena(at), len, dtype });
        self.counts.native += 1;
        Ok(Ref::Arena(at))
    }

    /// Where a native `f32` kernel writes `n` (`None`: it has no place
    /// such a kernel can write), and where `settle` then rounds it to: an
    /// `f32` in the arena is written in place; a half-precision value goes
    /// to `f32` scratch first, then is rounded into its two-byte storage,
    /// or in place when the kernel keeps it to itself.
    fn native_result(&mut self, n: NodeId, reads: &[Place]) -> Result<Option<(usize, Option<Ref>)>, Diagnostic> {
        let ty = &self.b.g.node(n).ty;
        let (len, half) = (ty.numel(), ty.dtype != DType::F32);
        Ok(match self.b.loc.get(&n).copied() {
            Some(Ref::Arena(at)) if !half => Some((at, None)),
            Some(home @ Ref::Half(_)) => {
                self.sync();
                Some((self.scratch.take(len, &self.order, reads), Some(home)))
            }
            None => {
                self.sync();
                let at = self.scratch.take(len, &self.order, reads);
                self.b.loc.insert(n, Ref::Arena(at));
                Some((at, half.then_some(Ref::Arena(at))))
            }
            Some(_) => None,
        })
    }

    /// Rounds the native result of `n` at `at` (`native_result`) into
    /// `to`, if it needs it.
    fn settle(&mut self, n: NodeId, at: usize, to: Option<Ref>) {
        self.settle_ref(n, Ref::Arena(at), to);
    }

    /// `settle` of a result at `src` (`stored_result`).
    fn settle_ref(&mut self, n: NodeId, src: Ref, to: Option<Ref>) {
        if let Some(dst) = to {
            let ty = &self.b.g.node(n).ty;
            self.steps.push(Step::Convert { src, dst, len: ty.numel(), dtype: ty.dtype });
            self.counts.native += 1;
        }
    }

    /// A matmul or convolution with its epilogue.
    fn contraction(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let mm = k.nodes[0];
        let epilogue = &k.nodes[1..];
        let outs: Vec<NodeId> = k.outputs.iter().copied().filter(|&o| o != mm).collect();
        let epilogue_spec = match epilogue.is_empty() {
            true => None,
            false => self.b.analyze(epilogue, &outs)?.filter(|spec| spec.numel() > 0),
        };
        let mut in_place = false;
        // A half-precision product: `f32` operands and result (`widened`,
        // `native_result`), rounded once (`settle`).
        let mut rounding = None;
        let half = g.node(mm).ty.dtype != DType::F32;
        let dst = match self.b.loc.get(&mm) {
            _ if half => {
                self.sync();
                let reads = self.outside(&k.nodes);
                let Some((at, to)) = self.native_result(mm, &reads)? else {
                    return self.interpreted(&k.nodes, &k.outputs);
                };
                rounding = Some(to);
                at
            }
            Some(Ref::Arena(off)) => *off,
            _ => {
                let plain = &self.plain;
                match epilogue_spec.as_ref().map(|spec| self.b.in_place_output(spec, mm, plain)).transpose()? {
                    // The product goes where the epilogue writes an output of
                    // its size, which it then overwrites in place: one buffer
                    // in the cache instead of two.
                    Some(Some(at)) => {
                        self.b.loc.insert(mm, Ref::Arena(at));
                        self.counts.in_place += 1;
                        in_place = true;
                        at
                    }
                    _ => {
                        self.sync();
                        let reads = self.outside(&k.nodes);
                        let at = self.scratch.take(g.node(mm).ty.numel(), &self.order, &reads);
                        self.b.loc.insert(mm, Ref::Arena(at));
                        at
                    }
                }
            }
        };
        let ins = g.inputs(mm);
        let (sa, sb) = (&g.node(ins[0]).ty.shape, &g.node(ins[1]).ty.shape);
        if let Some(step) = self.quant_product(mm, dst, epilogue_spec.as_ref().filter(|_| in_place))? {
            let fused = matches!(step, Step::QuantGemm { post, .. } if post.bias.is_some() || post.relu);
            self.steps.push(step);
            self.counts.gemm += 1;
            return match fused {
                true => Ok(()),
                false => self.epilogue(k, epilogue, epilogue_spec, &outs),
            };
        }
        if let Some(mut step) = self.bf16_product(mm, dst)? {
            self.counts.gemm += 1;
            if let Some(post) = self.bf16_epilogue(mm, dst, rounding, epilogue_spec.as_ref())? {
                self.steps.extend([step, post]);
                self.counts.native += 1;
                return Ok(());
            }
            // A product kept to itself is rounded as it is stored.
            if let (Step::Bf16Gemm { round, .. }, Some(Some(Ref::Arena(at)))) = (&mut step, rounding) {
                if at == dst {
                    *round = true;
                    rounding = None;
                }
            }
            self.steps.push(step);
            if let Some(to) = rounding {
                self.settle(mm, dst, to);
            }
            return self.epilogue(k, epilogue, epilogue_spec, &outs);
        }
        let ((a, a_t), (bb, b_t)) = match half {
            true => {
                let reads = self.outside(&k.nodes);
                // A folded transpose's source, widened, read transposed.
                let mut widened_operand = |n: NodeId| match self.folded.contains(&n) {
                    true => Ok((self.widened(g.inputs(n)[0], &reads)?, true)),
                    false => Ok::<_, Diagnostic>((self.widened(n, &reads)?, false)),
                };
                (widened_operand(ins[0])?, widened_operand(ins[1])?)
            }
            false => (self.operand(ins[0])?, self.operand(ins[1])?),
        };
        // A direct convolution applies a bias, ReLU and mask epilogue that
        // writes only the product's place in registers, and the epilogue's
        // own pass goes away.
        let mut post_ops = None;
        match float_conv(g, mm) {
            Some(conv) => {
                self.cols = self.cols.max(conv.cols_len());
                let is_zero = |n: NodeId| crate::tensor::is_positive_zero_constant(g, n);
                post_ops = epilogue_spec
                    .as_ref()
                    .filter(|_| in_place && conv.takes_post_ops())
                    .and_then(|spec| spec.channel_post_ops(mm, conv.out_channels(), is_zero));
                let mut place_of = |n: Option<NodeId>| n.map(|n| self.b.get(n)).transpose();
                let mut post = ConvPost {
                    bias: place_of(post_ops.and_then(|p| p.bias))?,
                    relu: post_ops.is_some_and(|p| p.relu),
                    keep_where_positive: place_of(post_ops.and_then(|p| p.keep_where_positive))?,
                    max_pool: None,
                    first_max: None,
                    pool_only: false,
                    from_maxima: None,
                };
                // A weight gradient whose output gradient is a max pool's
                // gradient written from recorded maxima reads it from those
                // maxima.
                if conv.takes_grad_from_maxima() {
                    let grad = self.grads_from_maxima.get(&ins[1]);
                    let y = conv.forward_out_shape();
                    post.from_maxima = grad.filter(|g| still_there(&self.steps, g, &y)).map(|&(gy, off, _)| (gy, off));
                    if post.from_maxima.is_some() {
                        *self.maxima_readers.entry(ins[1]).or_default() += 1;
                    }
                }
                self.steps.push(Step::Conv { conv, a, b: bb, dst, post });
            }
            None => {
                let r = sa.len();
                self.steps.push(Step::Gemm {
                    a,
                    b: bb,
                    a_t,
                    b_t,
                    dst,
                    batch: sa[..r - 2].iter().product(),
                    m: sa[r - 2],
                    k: sa[r - 1],
                    n: sb[r - 1],
                    ordered: self.ordered && !b_t,
                });
            }
        }
        self.counts.gemm += 1;
        if let Some(post) =
            self.bf16_epilogue(mm, dst, rounding, epilogue_spec.as_ref().filter(|_| post_ops.is_none()))?
        {
            self.steps.push(post);
            self.counts.native += 1;
            return Ok(());
        }
        if let Some(to) = rounding {
            self.settle(mm, dst, to);
        }
        match post_ops {
            Some(_) => Ok(()),
            None => self.epilogue(k, epilogue, epilogue_spec, &outs),
        }
    }

    /// The step of a bf16 product `mm` whose operands are in their two-byte
    /// storage, on the bf16 kernels as they are (summed in f32 into the
    /// f32 scratch `dst` that `native_result` gave it): a matmul, its
    /// folded transposes read through strides; a convolution by im2col in
    /// bf16, when its products are large enough (`Conv::bf16_pays`).
    /// `None` when the product is not such a one.
    fn bf16_product(&mut self, mm: NodeId, dst: usize) -> Result<Option<Step>, Diagnostic> {
        let g = self.b.g;
        if g.node(mm).ty.dtype != DType::BF16 {
            return Ok(None);
        }
        let ins = g.inputs(mm);
        if let Some(conv) = float_conv(g, mm) {
            let (a, b) = (self.b.get(ins[0])?, self.b.get(ins[1])?);
            if !(conv.bf16_pays() && matches!((a, b), (Ref::Half(_), Ref::Half(_)))) {
                return Ok(None);
            }
            self.cols = self.cols.max(conv.bf16_cols_len());
            return Ok(Some(Step::Bf16Conv { conv, a, b, dst }));
        }
        let ((a, a_t), (b, b_t)) = (self.operand(ins[0])?, self.operand(ins[1])?);
        if !matches!((a, b), (Ref::Half(_), Ref::Half(_))) {
            return Ok(None);
        }
        let (sa, sb) = (&g.node(ins[0]).ty.shape, &g.node(ins[1]).ty.shape);
        let r = sa.len();
        let (batch, m, k, n) = (sa[..r - 2].iter().product(), sa[r - 2], sa[r - 1], sb[r - 1]);
        Ok(Some(Step::Bf16Gemm { a, b, a_t, b_t, dst, batch, m, k, n, round: false }))
    }

    /// The one-pass epilogue of the bf16 product `mm` whose `f32` sums are
    /// at `dst` (module `half_epilogue`), when its kernel keeps the product
    /// to itself (`rounding` in place), the epilogue `spec` is one it
    /// applies (`Spec::bf16_epilogue`), its results live in two-byte and
    /// mask storage, and the machine has AVX-512 (elsewhere the compiled
    /// code is as fast). `None` otherwise.
    fn bf16_epilogue(
        &mut self,
        mm: NodeId,
        dst: usize,
        rounding: Option<Option<Ref>>,
        spec: Option<&Spec>,
    ) -> Result<Option<Step>, Diagnostic> {
        let g = self.b.g;
        let shape = &g.node(mm).ty.shape;
        let (Some(spec), Some(Some(Ref::Arena(at))), Some(&n)) = (spec, rounding, shape.last()) else {
            return Ok(None);
        };
        let fits = at == dst && n > 0 && spec.numel() == g.node(mm).ty.numel() && g.node(mm).ty.dtype == DType::BF16;
        if !fits || !crate::backend::cpu::kernels::simd::avx512() {
            return Ok(None);
        }
        let is_zero = |n: NodeId| crate::tensor::is_positive_zero_constant(g, n);
        let Some(post) = spec.bf16_epilogue(mm, n, is_zero) else { return Ok(None) };
        let mut get = |n: Option<NodeId>| n.map(|n| self.b.get(n)).transpose();
        let output = |o: Option<usize>| o.map(|o| spec.output_nodes[o]);
        let (dst_ref, positive, unrounded) =
            (get(output(post.result))?, get(output(post.positive))?, get(output(post.unrounded))?);
        let (keep_where, bias) = (get(post.keep_where)?, get(post.bias)?);
        // The pass writes two-byte results, byte masks and f32s in the arena.
        let half = dst_ref.is_none_or(|r| matches!(r, Ref::Half(_)));
        let masks = [positive, keep_where].iter().all(|r| r.is_none_or(|r| matches!(r, Ref::Mask(_))));
        if !half || !masks || unrounded.is_some_and(|u| !matches!(u, Ref::Arena(_))) {
            return Ok(None);
        }
        let rows = g.node(mm).ty.numel() / n;
        let relu = post.relu;
        Ok(Some(Step::Bf16Epilogue { src: dst, rows, n, bias, relu, keep_where, dst: dst_ref, positive, unrounded }))
    }

    /// The step of a quantized product `mm` into `dst` (module `int8_gemm`);
    /// `None` when `mm` is not one. When `in_place_epilogue` (the epilogue
    /// of a product stored where the epilogue writes) is a bias and/or a
    /// ReLU and nothing else, the step applies it (`QuantPost`) and the
    /// epilogue needs no steps of its own.
    fn quant_product(
        &mut self,
        mm: NodeId,
        dst: usize,
        in_place_epilogue: Option<&Spec>,
    ) -> Result<Option<Step>, Diagnostic> {
        let g = self.b.g;
        if !is_quant_matmul(g, mm) {
            return Ok(None);
        }
        let ins = g.inputs(mm);
        let (x, w, scale) = (self.b.get(ins[0])?, self.b.get(ins[1])?, self.b.get(ins[2])?);
        let (xs, ws) = (&g.node(ins[0]).ty.shape, &g.node(ins[1]).ty.shape);
        // A convolution's rows are its input's patches.
        let patches = match g.node(mm).op {
            Op::QuantMatMul { patches: Some(p) } => {
                let shape = <[usize; 4]>::try_from(&xs[..]).map_err(|_| internal("a quantized convolution's input"))?;
                Some((p, shape))
            }
            _ => None,
        };
        let rows = match patches {
            Some((p, shape)) => {
                p.rows_shape(&shape).ok_or_else(|| internal("a quantized convolution's window"))?.to_vec()
            }
            None => xs.clone(),
        };
        let (n, k_w): (usize, usize) =
            (ws.last().copied().unwrap_or(0), ws[..ws.len().saturating_sub(1)].iter().product());
        let w = match w {
            Ref::Fixed(i) => {
                let values = Int8Weights::narrow(&self.b.fixed[i])?;
                match pack_weights(&values, k_w, n) {
                    Some(packed) => Int8Weights::Packed(packed),
                    None => Int8Weights::Narrowed(values),
                }
            }
            r => Int8Weights::Tensor(r),
        };
        let (&k, rows) = rows.split_last().ok_or_else(|| internal("a quantized product of a scalar"))?;
        let is_zero = |n: NodeId| crate::tensor::is_positive_zero_constant(g, n);
        let post_ops = in_place_epilogue
            .and_then(|spec| spec.channel_post_ops(mm, n, is_zero))
            .filter(|p| p.keep_where_positive.is_none());
        let post = match post_ops {
            Some(p) => QuantPost { bias: p.bias.map(|b| self.b.get(b)).transpose()?, relu: p.relu },
            None => QuantPost::default(),
        };
        let range = ins.get(3).map(|&r| self.b.get(r)).transpose()?;
        Ok(Some(Step::QuantGemm { x, patches, w, scale, range, dst, m: rows.iter().product(), k, n, post }))
    }

    /// The steps of a contraction's epilogue (after its product): compiled
    /// when `spec` expresses it, else interpreted.
    fn epilogue(
        &mut self,
        k: &Kernel,
        epilogue: &[NodeId],
        spec: Option<Spec>,
        outs: &[NodeId],
    ) -> Result<(), Diagnostic> {
        if epilogue.is_empty() {
            return Ok(());
        }
        match spec {
            Some(spec) => {
                let step = self.b.jit(&spec, k.fused_adam(PartRole::Epilogue))?;
                self.steps.push(step);
                self.counts.jit += 1;
                Ok(())
            }
            None => self.interpreted(epilogue, outs),
        }
    }

    /// One node of an `i32`, `i64`, `f64` or `bool` kernel as the interpreter's
    /// generic loop (`generic_loop`, `Step::Loop`); `false` when its result
    /// has no place such a step writes.
    fn generic_step(&mut self, n: NodeId, reads: &[Place]) -> Result<bool, Diagnostic> {
        let g = self.b.g;
        let (Some((dtype, kernel)), Some(dst)) = (generic_loop(g, n), self.byte_result(n, reads)?) else {
            return Ok(false);
        };
        let srcs = g.inputs(n).iter().map(|&i| self.b.get(i)).collect::<Result<Vec<_>, _>>()?;
        self.steps.push(Step::Loop { dtype, kernel, srcs, dst });
        Ok(true)
    }

    /// An `i32`, `i64`, `f64` or `bool` pooling (or gradient): its generic loop.
    fn generic_layout(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let reads = self.outside(&k.nodes);
        if !self.generic_step(k.nodes[0], &reads)? {
            return self.interpreted(&k.nodes, &k.outputs);
        }
        self.counts.native += 1;
        Ok(())
    }

    /// An `i32`, `i64`, `f64` or `bool` matmul or convolution (or gradient)
    /// with its epilogue: the interpreter's loop (`Step::Loop`), the epilogue compiled.
    fn generic_contraction(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let mm = k.nodes[0];
        let reads = self.outside(&k.nodes);
        if !self.generic_step(mm, &reads)? {
            return self.interpreted(&k.nodes, &k.outputs);
        }
        self.counts.gemm += 1;
        let epilogue = &k.nodes[1..];
        if !epilogue.is_empty() {
            let outs: Vec<NodeId> = k.outputs.iter().copied().filter(|&o| o != mm).collect();
            let step = self.b.part(epilogue, &outs, k.fused_adam(PartRole::Epilogue), &mut self.counts)?;
            self.steps.push(step);
        }
        Ok(())
    }

    /// A reduction: its prologue compiled (into scratch), the reduction
    /// native, the epilogue (an optimizer update, a normalization)
    /// compiled; each part falls back to the interpreter.
    fn reduction(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let (head, tail) = split_anchor(g, &k.nodes);
        let Some((&anchor, prologue)) = head.split_last().filter(|_| native_reduce(g, &head)) else {
            return self.interpreted(&k.nodes, &k.outputs);
        };
        let reads = self.outside(&k.nodes);
        let input = g.inputs(anchor)[0];
        if !prologue.is_empty() {
            self.scratch_for(input, &reads);
            let mut outs: Vec<NodeId> = k.outputs.iter().copied().filter(|o| prologue.contains(o)).collect();
            if !outs.contains(&input) {
                outs.push(input);
            }
            let step = self.b.part(prologue, &outs, k.fused_adam(PartRole::Prologue), &mut self.counts)?;
            self.steps.push(step);
        }
        if let Op::ArgMax { axis, .. } = g.node(anchor).op {
            return self.argmax(k, anchor, axis, &tail, &reads);
        }
        if let (Op::Reduce { op, axes, .. }, Some(dtype)) = (&g.node(anchor).op, generic_type(g, anchor)) {
            let Some(dst) = self.byte_result(anchor, &reads)? else {
                return Err(internal(format!("a {dtype} reduction outside the arena")));
            };
            let shape = g.node(input).ty.shape.clone();
            let reduced = (0..shape.len()).map(|d| axes.contains(&d)).collect();
            let srcs = vec![self.b.get(input)?];
            self.steps.push(Step::Loop { dtype, kernel: Loop::Reduce { op: *op, shape, reduced }, srcs, dst });
            self.counts.native += 1;
            return self.tail(k, &tail);
        }
        let Some((dst, rounding)) = self.native_result(anchor, &reads)? else {
            return Err(internal("a reduction outside the arena"));
        };
        let Op::Reduce { op, axes, .. } = &g.node(anchor).op else { unreachable!("native_reduce checked") };
        let shape = g.node(input).ty.shape.clone();
        let reduced: Vec<bool> = (0..shape.len()).map(|d| axes.contains(&d)).collect();
        // The bias gradient of a max-pool gradient written from recorded
        // maxima is summed from that gradient's operands.
        let bias_sums =
            *op == ReduceOp::Sum && prologue.is_empty() && shape.len() == 4 && reduced == [true, true, true, false];
        // Only while the pooled gradient is still there: the plan may reuse
        // its bytes once the pool gradient ran.
        let from_maxima = self
            .grads_from_maxima
            .get(&input)
            .filter(|g| bias_sums && still_there(&self.steps, g, &shape))
            .map(|&(gy, off, _)| (gy, off));
        if from_maxima.is_some() {
            *self.maxima_readers.entry(input).or_default() += 1;
        }
        let src = self.widened(input, &reads)?;
        self.steps.push(Step::Reduce { op: *op, src, dst, shape, reduced, from_maxima });
        self.counts.native += 1;
        self.settle(anchor, dst, rounding);
        if !tail.is_empty() {
            let outs: Vec<NodeId> = k.outputs.iter().copied().filter(|o| tail.contains(o)).collect();
            let step = self.b.part(&tail, &outs, k.fused_adam(PartRole::Epilogue), &mut self.counts)?;
            self.steps.push(step);
        }
        Ok(())
    }

    /// The native `argmax` `anchor` of reduction kernel `k` (its prologue
    /// done) and the kernel's `tail`.
    fn argmax(
        &mut self,
        k: &Kernel,
        anchor: NodeId,
        axis: usize,
        tail: &[NodeId],
        reads: &[Place],
    ) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let input = g.inputs(anchor)[0];
        let shape = &g.node(input).ty.shape;
        let lanes = [shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product()];
        let Some(dst @ Ref::Int(_)) = self.byte_result(anchor, reads)? else {
            return Err(internal("an argmax result outside the arena"));
        };
        let srcs = vec![self.widened(input, reads)?];
        let dtype = g.node(input).ty.dtype;
        self.steps.push(Step::Loop { dtype, kernel: Loop::ArgMax(lanes), srcs, dst });
        self.counts.native += 1;
        self.tail(k, tail)
    }

    /// The `tail` of reduction kernel `k` (after its anchor), compiled.
    fn tail(&mut self, k: &Kernel, tail: &[NodeId]) -> Result<(), Diagnostic> {
        if !tail.is_empty() {
            let outs: Vec<NodeId> = k.outputs.iter().copied().filter(|o| tail.contains(o)).collect();
            let step = self.b.part(tail, &outs, k.fused_adam(PartRole::Epilogue), &mut self.counts)?;
            self.steps.push(step);
        }
        Ok(())
    }

    /// An `f32` pooling or pooling gradient: fused into the convolution
    /// just before when that writes the pooled result, else native.
    fn pool(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let n = k.nodes[0];
        let ins = g.inputs(n);
        let reads = self.outside(&k.nodes);
        let (Some((dst, rounding)), Some(params)) = (self.native_result(n, &reads)?, float_pool(g, &k.nodes)) else {
            if ins.first().is_some_and(|x| self.unstored.contains(x)) {
                return Err(internal("a pooling reads a convolution result that is not stored"));
            }
            return self.interpreted(&k.nodes, &k.outputs);
        };
        let grad = match ins.get(1) {
            Some(&gy) => Some(self.widened(gy, &reads)?),
            None => None,
        };
        let xs = g.node(ins[0]).ty.shape.clone();
        let ys = match ins.get(1) {
            Some(&gy) => g.node(gy).ty.shape.clone(),
            None => g.node(n).ty.shape.clone(),
        };
        let x = self.widened(ins[0], &reads)?;
        // The convolution the plan fuses this pool into (`passes::conv_pool`;
        // `schedule` runs it just before) writes the pool too (it is not yet
        // in `order`, whose copy of its places would be stale).
        let pooled = Place::Bytes(4 * dst, 4 * (dst + ys.iter().product::<usize>()));
        let apart = |step: &Step| {
            let access = step.access();
            !access.reads.iter().chain(&access.writes).any(|p| p.overlaps(pooled))
        };
        let record = match &k.fusion {
            Some(Fusion::PoolIntoConv { gradients, pool_only, .. }) if self.fusable.contains(&n) => {
                Some((gradients.len(), *pool_only))
            }
            _ => None,
        };
        let last = self
            .steps
            .len()
            .checked_sub(1)
            .filter(|&i| record.is_some() && i >= self.order.len() && apart(&self.steps[i]) && rounding.is_none());
        let fused = last.and_then(|i| match &mut self.steps[i] {
            Step::Conv { conv, dst: y, post, .. } => {
                let pools = grad.is_none() && is_max_pool_2x2(&params) && post.max_pool.is_none();
                let ours = x == Ref::Arena(*y) && xs == conv.out_shape() && conv.takes_max_pool();
                (pools && ours).then_some((conv.first_max_len(), post))
            }
            _ => None,
        });
        // The plan's finding and the lowering's storage disagree (which a
        // test rules out for the plans the CPU's target makes): the pool
        // runs on its own, counted.
        self.counts.unfused += usize::from(record.is_some() && fused.is_none());
        // A max pool's gradient later in the unit reads the first maxima the
        // fused pool records, not `x`.
        let pooled_node = ins[0];
        let first_max = match ins.get(1) {
            Some(_) if is_max_pool_2x2(&params) => self.first_max_at.get(&pooled_node).copied(),
            _ => None,
        };
        match fused {
            Some((len, post)) => {
                let (grads, pool_only) = record.unwrap_or_default();
                post.max_pool = Some(dst);
                if grads > 0 {
                    post.first_max = Some(self.first_max_end);
                    self.first_max_at.insert(pooled_node, self.first_max_end);
                    self.first_max_end += len;
                }
                // Nothing else reads the result: the unit keeps only its pool.
                post.pool_only = pool_only;
                if post.pool_only {
                    self.unstored.insert(pooled_node);
                }
            }
            None => {
                if let (Some(off), Some(gy)) = (first_max, grad) {
                    self.grads_from_maxima.insert(n, (gy, off, self.steps.len()));
                }
                self.steps.push(Step::Pool { params, x, grad, dst, xs, ys, first_max, unread: false });
                self.settle(n, dst, rounding);
            }
        }
        self.counts.native += 1;
        Ok(())
    }

    /// A transpose of any rank and type, native when its result is in the
    /// arena.
    fn transpose(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let n = k.nodes[0];
        let reads = self.outside(&k.nodes);
        let (Some(perm), Some((dst, rounding))) = (layout_transpose(g, &k.nodes), self.stored_result(n, &reads)?)
        else {
            return self.interpreted(&k.nodes, &k.outputs);
        };
        let src = g.inputs(n)[0];
        let shape = g.node(src).ty.shape.clone();
        let src = self.widened(src, &reads)?;
        self.steps.push(Step::Transpose { src, dst, shape, perm });
        self.counts.native += 1;
        self.settle_ref(n, dst, rounding);
        Ok(())
    }

    /// A slice, pad or concatenation of any type: native block copies.
    fn window(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let n = k.nodes[0];
        let reads = self.outside(&k.nodes);
        let (Some(window), Some((dst, rounding))) = (layout_window(g, &k.nodes), self.stored_result(n, &reads)?) else {
            return self.interpreted(&k.nodes, &k.outputs);
        };
        let ins = g.inputs(n);
        let srcs = ins.iter().map(|&i| self.widened(i, &reads)).collect::<Result<Vec<_>, _>>()?;
        let src_lens = ins.iter().map(|&i| g.node(i).ty.numel()).collect();
        let (op, shape) = (g.node(n).op.name(), g.node(n).ty.shape.clone());
        self.steps.push(Step::Window { srcs, src_lens, dst, window, op, shape });
        self.counts.native += 1;
        self.settle_ref(n, dst, rounding);
        Ok(())
    }

    /// A reshape of a value kept as a tensor: a native copy.
    fn reshape(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let n = k.nodes[0];
        let (src, dst) = (self.b.get(g.inputs(n)[0])?, self.b.get(n)?);
        let Ref::Table(_) = dst else { return self.interpreted(&k.nodes, &k.outputs) };
        self.steps.push(Step::Reshape { src, dst, ty: g.node(n).ty.clone() });
        self.counts.native += 1;
        Ok(())
    }

    /// A `cumsum` or `argsort` (`along_axis`): the interpreter's lane loop
    /// over the operand (widened if half precision); a `cumsum` result is
    /// rounded into its storage as every native float result is.
    fn along(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let n = k.nodes[0];
        let Some((dtype, kernel)) = along_axis(g, &k.nodes) else {
            return self.interpreted(&k.nodes, &k.outputs);
        };
        let reads = self.outside(&k.nodes);
        let (dst, rounding) = match kernel {
            Loop::ArgSort { .. } => match self.byte_result(n, &reads)? {
                Some(dst @ Ref::Int(_)) => (dst, None),
                _ => return Err(internal("an argsort result outside the arena")),
            },
            _ => match self.stored_result(n, &reads)? {
                Some(place) => place,
                None => return self.interpreted(&k.nodes, &k.outputs),
            },
        };
        let srcs = vec![self.widened(g.inputs(n)[0], &reads)?];
        self.steps.push(Step::Loop { dtype, kernel, srcs, dst });
        self.counts.native += 1;
        self.settle_ref(n, dst, rounding);
        Ok(())
    }

    /// A gather or scatter-add with integer indices, native.
    /// A `scan`: its body's plan (`CompiledUnit::loops`) prepared as a
    /// unit of its own, with the body's slots as its inputs, and the step
    /// that runs it once per iteration. The body's kernels count with this
    /// unit's, and those it interprets are this unit's too (`--strict`).
    fn scan(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let n = k.nodes[0];
        let node = g.node(n);
        let Op::Scan(body) = &node.op else { return Err(internal("a scan step of another op")) };
        let plan = self.loops.iter().find(|l| l.node == n).ok_or_else(|| {
            internal("the plan has no body for a `scan` (`passes::loops` did not run for this target)")
        })?;
        let prepared = super::scan_step::ScanStep::prepare(body, plan, self.threads)?;
        let c = prepared.unit.counts;
        let counts = &mut self.counts;
        counts.jit += c.jit;
        counts.gemm += c.gemm;
        counts.interp += c.interp;
        counts.unplanned += c.unplanned;
        counts.native += c.native + 1;
        counts.unfused += c.unfused;
        counts.folded += c.folded;
        counts.in_place += c.in_place;
        self.nested_interpreted.extend(prepared.unit.interpreted.iter().cloned());
        let operands = g.inputs(n).into_iter().map(|i| Ok((self.b.get(i)?, g.node(i).ty.clone())));
        let operands = operands.collect::<Result<Vec<_>, Diagnostic>>()?;
        let dst = self.b.get(n)?;
        self.steps.push(Step::Scan(Box::new(prepared.at(operands, dst, node.ty.clone(), node.span))));
        Ok(())
    }

    /// An `all_reduce_sum`: its operand copied into its place, which is then
    /// summed there over the processes (`Step::AllReduce`).
    fn all_reduce(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let n = k.nodes[0];
        let reads = self.outside(&k.nodes);
        let dst = match self.stored_result(n, &reads)? {
            Some((dst @ (Ref::Arena(_) | Ref::Wide(_)), None)) => dst,
            _ => return Err(internal("an all-reduce result outside the arena")),
        };
        let src = self.b.get(g.inputs(n)[0])?;
        let with = self.collectives.clone();
        self.steps.push(Step::AllReduce { src, dst, ty: g.node(n).ty.clone(), with });
        self.counts.native += 1;
        Ok(())
    }

    fn index(&mut self, k: &Kernel) -> Result<(), Diagnostic> {
        let g = self.b.g;
        let n = k.nodes[0];
        let node = g.node(n);
        let ins = g.inputs(n);
        let reads = self.outside(&k.nodes);
        let Some((dst, rounding)) = self.stored_result(n, &reads)? else {
            return self.interpreted(&k.nodes, &k.outputs);
        };
        let around = |shape: &[usize], at: usize, width: usize| -> (usize, usize) {
            (shape[..at].iter().product(), shape[at + width..].iter().product())
        };
        let step = match node.op {
            Op::Gather { axis } => {
                let ps = &g.node(ins[0]).ty.shape;
                let (outer, inner) = around(ps, axis, 1);
                let (params, ids) = (self.widened(ins[0], &reads)?, self.b.get(ins[1])?);
                let ids_ty = g.node(ins[1]).ty.clone();
                Step::Gather { params, ids, ids_ty, dst, dims: [outer, ps[axis], inner], axis, span: node.span }
            }
            Op::ScatterAdd { axis, dim } => {
                let (is, us) = (&g.node(ins[0]).ty, &g.node(ins[1]).ty.shape);
                let (outer, inner) = around(us, axis, is.rank());
                let (ids, updates) = (self.b.get(ins[0])?, self.widened(ins[1], &reads)?);
                Step::ScatterAdd {
                    dtype: node.ty.dtype,
                    ids,
                    updates,
                    dst,
                    dims: [outer, dim, inner],
                    ids_ty: is.clone(),
                    axis,
                    span: node.span,
                }
            }
            _ => return self.interpreted(&k.nodes, &k.outputs),
        };
        self.steps.push(step);
        self.counts.native += 1;
        self.settle_ref(n, dst, rounding);
        Ok(())
    }
}
