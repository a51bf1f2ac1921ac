//! The executor of one compilation unit (a training step, a metric over a
//! batch, a `map` function) over one arena, following the optimizer's plan.
//!
//! Contract: [`JitUnit::prepare`] turns a `CompiledUnit` into a list of
//! steps in the unit's schedule order, compiling what it can once:
//! - an `Elementwise` kernel whose [`Spec`] the code generator accepts runs
//!   as Cranelift code, or, when it is exactly Adam's update and the
//!   machine has AVX-512, as the native loop of module `adam` (same bits);
//! - a `Contraction` kernel over a `f32` matmul runs the product through
//!   `gemm` (split over the worker threads by output blocks) and its epilogue as
//!   Cranelift code (or on the interpreter if the epilogue needs it);
//! - a `f32` convolution (or one of its gradients) runs on the direct
//!   AVX-512 kernels or through im2col and `gemm` (modules `conv_direct`,
//!   `conv`); a direct forward convolution (or input gradient) whose
//!   epilogue is only `select(other > 0, relu(y + bias), 0)` (each part
//!   optional, `Spec::channel_post_ops`) applies it in registers before
//!   its store (`conv::PostOps`), with no epilogue step, and when the next
//!   kernel is a 2x2 max pool of that result (of even height and width),
//!   writes the pool too, with no pooling step — and, when the unit also
//!   takes that pool's gradient, records each window's first maximum,
//!   which the gradient then reads instead of the result (as do, while the
//!   pooled gradient is in place, a bias gradient summing it and a
//!   first-layer weight gradient, and then the gradient is not written);
//!   a result nothing else reads is not stored, only its pool; `f32`
//!   pooling with disjoint windows, reductions and matrix transposes run as
//!   native loops (modules `pool`, `reduce`);
//! - a contraction's product that only its epilogue reads is stored in an
//!   output of the epilogue of the same size, which the epilogue then
//!   overwrites in place (compiled code reads an element before it writes
//!   it), else in scratch;
//! - every other kernel (other dtypes, ops without a code template) runs
//!   node by node on the reference interpreter's `eval_node`, so every
//!   program runs, with the interpreter's results for those kernels.
//!
//! Storage: every `f32` and `bool` kernel output lives in the arena at the
//! memory plan's offset (a `bool` as one byte, 0 or 1) (`arena_bytes` plus
//! scratch for the values a kernel keeps to itself, module `schedule`);
//! values of other dtypes are kept as interpreter tensors beside it; region
//! inputs are read in place from the caller's tensors and values computed
//! outside the unit are copied once, at `prepare`. [`JitUnit::run`] binds
//! the inputs, runs the steps and reads the region outputs back as tensors.
//!
//! Threads: with one thread the steps run in schedule order; with a pool,
//! each step runs as soon as the steps it depends on (by the places each
//! reads and writes, module `schedule`) are done — dependency counting
//! inside one rayon scope, the most critical ready step continuing on the
//! same worker — and large kernels are split further (module `threads`);
//! the other workers stay awake for the whole run.
//! Every step computes the same values whatever runs beside it, so results
//! are bit-identical at any thread count.
//!
//! Results equal the interpreter's up to rounding: a different summation
//! order in matmul and the polynomial `exp`/`log`/`tanh` (module `poly`).
//!
//! Profiling: after [`JitUnit::set_profiling`], every step adds its wall
//! time to a counter; [`JitUnit::profile`] reads them with a description
//! of each step (`tfc bench --profile`).
//!
//! Example: `train.rs` prepares one `JitUnit` per batch size of a training
//! step and calls `run` with `[batch…, step, params…, states…]` per batch.

use super::carry::{CarryInputs, Resident};
use super::codegen::KernelFn;
use super::conv::{Conv, MaximaGrad, PostOps, SendMasks, SendPtr};
use super::gemm::sgemm;
use super::pool::first_max_len;
use super::schedule::{Access, Order, Place, Schedule, Scratch};
use super::spec::Spec;
use super::threads::{split_rows, PARALLEL_MIN_ELEMENTS, PARALLEL_MIN_UNIT_WORK, ROW_BLOCK};
use crate::backend::interp::{eval_node, Data, PoolParams, Tensor, Values};
use crate::diag::{Diagnostic, Span};
use crate::ir::compiled::{CompiledUnit, KernelKind};
use crate::ir::{DType, Graph, NodeId, Op, PoolKind, Program, ReduceOp, TensorType};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Where a value is during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ref {
    /// `f32` elements at this element offset of the arena.
    Arena(usize),
    /// `bool` elements (one byte each, 0 or 1) at this byte offset of the arena.
    Mask(usize),
    /// The caller's input at this position.
    Input(usize),
    /// A value fixed at `prepare` (computed outside the unit, or a constant).
    Fixed(usize),
    /// A tensor computed by an interpreted kernel in this run.
    Table(usize),
}

/// An operand of an interpreted node.
#[derive(Clone, Copy, Debug)]
enum Arg {
    /// An earlier node of the same kernel.
    Local(usize),
    Ref(Ref),
}

#[derive(Clone, Debug)]
struct InterpNode {
    op: Op,
    ty: TensorType,
    span: Span,
    args: Vec<Arg>,
    /// The type of each operand (arena values are read back with it).
    arg_tys: Vec<TensorType>,
    /// Where the value goes if it leaves the kernel.
    out: Option<Ref>,
}

enum Step {
    /// A compiled loop nest; `args` are its `loads` loads then its outputs;
    /// `kind` says what made `f` (`fused`: Cranelift, `adam update`: the
    /// native loop of module `adam`), for profiles.
    Jit { f: KernelFn, args: Vec<(Ref, usize)>, loads: usize, rows: usize, inner: usize, kind: &'static str },
    /// `dst = a @ b` (batched over leading dims) through `gemm`.
    /// `a_t`/`b_t`: the operand is stored transposed (a folded transpose's
    /// source; only without batch dims).
    Gemm { a: Ref, b: Ref, a_t: bool, b_t: bool, dst: usize, batch: usize, m: usize, k: usize, n: usize },
    /// A convolution (or one of its gradients) on the direct kernels or
    /// through im2col and `gemm` (module `conv`).
    /// `post`: the epilogue it applies before storing (`conv::PostOps`).
    Conv { conv: Conv, a: Ref, b: Ref, dst: usize, post: ConvPost },
    /// Nodes evaluated by the reference interpreter.
    Interp(Vec<InterpNode>),
    /// A native `f32` reduction of `src` (of `shape`) over the `reduced` dims.
    /// `from_maxima`: `src` is a max-pool gradient written from recorded
    /// first maxima (`Step::Pool`), and the reduction its sums over every
    /// axis but the channels, computed from that pool gradient's operands
    /// (the pooled gradient, the masks' offset) instead of from `src`.
    Reduce {
        op: ReduceOp,
        src: Ref,
        dst: usize,
        shape: Vec<usize>,
        reduced: Vec<bool>,
        from_maxima: Option<(Ref, usize)>,
    },
    /// `f32` pooling (`grad: Some(gy)`: its gradient) over arena slices
    /// (module `pool`).
    /// `first_max`: for a max pool's gradient, where the convolution that
    /// wrote `x` recorded its windows' first maxima (`ConvPost::first_max`),
    /// read instead of `x`.
    Pool {
        params: PoolParams,
        x: Ref,
        grad: Option<Ref>,
        dst: usize,
        xs: Vec<usize>,
        ys: Vec<usize>,
        first_max: Option<usize>,
        /// Every reader of the gradient computes it from the maxima, so the
        /// step writes nothing.
        unread: bool,
    },
    /// `dst = transpose(src)` of a `rows × cols` `f32` matrix.
    Transpose { src: Ref, dst: usize, rows: usize, cols: usize },
}

/// A convolution's post-ops, by where their operands live.
#[derive(Clone, Copy, Debug, Default)]
struct ConvPost {
    /// One value per output channel.
    bias: Option<Ref>,
    relu: bool,
    /// Laid out as the result (`conv::PostOps::keep_where_positive`).
    keep_where_positive: Option<Ref>,
    /// The arena offset of the result's 2x2 max pool, written as well.
    max_pool: Option<usize>,
    /// With `max_pool`, where in the unit's first-maximum buffer the pool's
    /// masks go (`conv::PostOps::first_max`), for its gradient to read.
    first_max: Option<usize>,
    /// With `max_pool`: only the pool is stored (`conv::PostOps::pool_only`).
    pool_only: bool,
    /// For a weight gradient: its output gradient `b` is a max pool's
    /// gradient written from recorded maxima, read instead from that
    /// gradient's pooled gradient and masks' offset
    /// (`conv::PostOps::grad_from_maxima`).
    from_maxima: Option<(Ref, usize)>,
}

/// The place `len` elements of `r` occupy (none for values no step writes).
fn place(r: Ref, len: usize) -> Option<Place> {
    match r {
        Ref::Arena(off) => Some(Place::Bytes(4 * off, 4 * (off + len))),
        Ref::Mask(off) => Some(Place::Bytes(off, off + len)),
        Ref::Table(t) => Some(Place::Table(t)),
        Ref::Input(_) | Ref::Fixed(_) => None,
    }
}

impl Step {
    /// The places this step reads and writes, and its rough cost (about a
    /// nanosecond per unit on one core).
    fn access(&self) -> Access {
        let mut acc = Access::default();
        let (reads, writes, cost) = (&mut acc.reads, &mut acc.writes, &mut acc.cost);
        let arena = |off: usize, len: usize| Place::Bytes(4 * off, 4 * (off + len));
        match self {
            Step::Jit { args, loads, rows, inner, .. } => {
                for (i, &(r, len)) in args.iter().enumerate() {
                    let to = if i < *loads { &mut *reads } else { &mut *writes };
                    to.extend(place(r, len));
                }
                *cost = (rows * inner * args.len() / 8) as u64;
            }
            Step::Gemm { a, b, dst, batch, m, k, n, .. } => {
                reads.extend(place(*a, batch * m * k).into_iter().chain(place(*b, batch * k * n)));
                writes.push(arena(*dst, batch * m * n));
                *cost = (batch * m * k * n / 50) as u64;
            }
            Step::Conv { conv, a, b, dst, post } => {
                let (na, nb, ny) = conv.sizes();
                reads.extend(place(*a, na));
                match post.from_maxima {
                    Some((gy, off)) => {
                        reads.extend(place(gy, nb / 4));
                        reads.push(Place::FirstMax(off, off + first_max_len(&pooled_shape(&conv.forward_out_shape()))));
                    }
                    None => reads.extend(place(*b, nb)),
                }
                reads.extend(post.bias.and_then(|r| place(r, conv.out_channels())));
                reads.extend(post.keep_where_positive.and_then(|r| place(r, ny)));
                writes.extend([arena(*dst, ny), Place::Cols]);
                writes.extend(post.max_pool.map(|off| arena(off, ny / 4)));
                writes.extend(post.first_max.map(|off| Place::FirstMax(off, off + conv.first_max_len())));
                *cost = (4 * (ny + conv.cols_len())) as u64;
            }
            Step::Interp(nodes) => {
                for node in nodes {
                    for (arg, ty) in node.args.iter().zip(&node.arg_tys) {
                        if let Arg::Ref(r) = arg {
                            reads.extend(place(*r, ty.numel()));
                        }
                    }
                    writes.extend(node.out.and_then(|r| place(r, node.ty.numel())));
                    *cost += 8 * node.ty.numel() as u64;
                }
            }
            Step::Reduce { src, dst, shape, reduced, from_maxima, .. } => {
                let n: usize = shape.iter().product();
                let m: usize = shape.iter().zip(reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).product();
                match from_maxima {
                    Some((gy, off)) => {
                        let pooled = pooled_shape(shape);
                        reads.extend(place(*gy, pooled.iter().product()));
                        reads.push(Place::FirstMax(*off, off + first_max_len(&pooled)));
                    }
                    None => reads.extend(place(*src, n)),
                }
                writes.push(arena(*dst, m));
                *cost = (n / 4) as u64;
            }
            Step::Pool { x, grad, dst, xs, ys, first_max, .. } => {
                let (nx, ny) = (xs.iter().product::<usize>(), ys.iter().product::<usize>());
                match first_max {
                    Some(off) => reads.push(Place::FirstMax(*off, off + first_max_len(ys))),
                    None => reads.extend(place(*x, nx)),
                }
                reads.extend(grad.and_then(|g| place(g, ny)));
                writes.push(arena(*dst, if grad.is_some() { nx } else { ny }));
                *cost = nx as u64;
            }
            Step::Transpose { src, dst, rows, cols } => {
                reads.extend(place(*src, rows * cols));
                writes.push(arena(*dst, rows * cols));
                *cost = (rows * cols / 2) as u64;
            }
        }
        acc
    }

    /// What the step computes, for profiles: its kind and sizes, then the
    /// ops of the kernel it comes from (`nodes`), e.g.
    /// `gemm 64x784 @ 784x256: matmul, broadcast_to, add, relu, gt`.
    fn label(&self, g: &Graph, nodes: &[NodeId]) -> String {
        let dims = |d: &[usize]| d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("x");
        let what = match self {
            Step::Jit { rows, inner, kind, .. } => format!("{kind} {rows}x{inner}"),
            Step::Gemm { batch, m, k, n, a_t, b_t, .. } => {
                let t = |on: &bool| if *on { "ᵀ" } else { "" };
                let batch = if *batch > 1 { format!("{batch} x ") } else { String::new() };
                format!("gemm {batch}{m}x{k}{} @ {k}x{n}{}", t(a_t), t(b_t))
            }
            Step::Conv { conv, post, .. } => match (post.max_pool, post.pool_only, post.from_maxima) {
                (Some(_), false, _) => format!("{} and 2x2 max pool", conv.label()),
                (Some(_), true, _) => format!("{} and 2x2 max pool, only the pool stored", conv.label()),
                (None, _, Some(_)) => format!("{} from the recorded maxima", conv.label()),
                (None, _, None) => conv.label(),
            },
            Step::Interp(_) => "interpreted".to_string(),
            Step::Reduce { op, shape, reduced, from_maxima, .. } => {
                let axes: Vec<usize> = (0..shape.len()).filter(|&d| reduced[d]).collect();
                let from = if from_maxima.is_some() { " from the recorded maxima" } else { "" };
                format!("reduce {op:?} {} over {axes:?}{from}", dims(shape))
            }
            Step::Pool { params, grad, xs, first_max, unread, .. } => {
                let grad = if grad.is_some() { " grad" } else { "" };
                let from = match (first_max.is_some(), unread) {
                    (_, true) => " (not needed: its readers use the recorded maxima)",
                    (true, false) => " from the recorded maxima",
                    (false, false) => "",
                };
                format!("{:?} pool{grad} {}{from}", params.kind, dims(xs))
            }
            Step::Transpose { rows, cols, .. } => format!("transpose {rows}x{cols}"),
        };
        let mut ops: Vec<&str> = Vec::new();
        for &n in nodes {
            let name = g.node(n).op.name();
            if !ops.contains(&name) {
                ops.push(name);
            }
        }
        let more = if ops.len() > 6 { ", …" } else { "" };
        format!("{what}: {}{more}", ops[..ops.len().min(6)].join(", "))
    }
}

/// How each kernel of a prepared unit runs (for reports and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCounts {
    pub jit: usize,
    pub gemm: usize,
    pub interp: usize,
    /// Native transposes and reductions.
    pub native: usize,
    /// Transposes read through a matmul's strides instead of run.
    pub folded: usize,
    /// Contraction products stored in their epilogue's output, which the
    /// epilogue then writes in place (`in_place_output`).
    pub in_place: usize,
    /// How often a threaded run can hand a step to another worker: the
    /// steps beyond the first that start the run or that one step's end
    /// makes ready (0: the steps form one chain).
    pub forks: usize,
}

/// 64-byte aligned storage (the memory plan's offsets are 64-byte multiples).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

struct State {
    arena: Vec<Line>,
    table: Vec<Option<Tensor>>,
    /// The convolutions' scratch: an im2col block, or the direct kernels'
    /// padded source and flipped weights (`Conv::cols_len`).
    cols: Vec<f32>,
    /// The first maxima that fused max pools record for their gradients
    /// (`ConvPost::first_max`).
    first_max: Vec<u64>,
}

/// A unit ready to run many times.
pub struct JitUnit {
    pub name: String,
    steps: Vec<Step>,
    /// Which steps wait for which (threaded runs).
    schedule: Schedule,
    fixed: Vec<Tensor>,
    outputs: Vec<(Ref, TensorType)>,
    /// The element types of arena values read back as tensors.
    state: Mutex<State>,
    /// The worker threads (`None`: one thread).
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Homes of the carried values (see `carry`), in carried order.
    residents: Vec<Resident>,
    pub arena_bytes: usize,
    pub counts: StepCounts,
    /// What each step is, for profiles: its kind, sizes and ops.
    labels: Vec<String>,
    /// Whether steps add their wall time to `step_nanos`.
    profiling: AtomicBool,
    step_nanos: Vec<AtomicU64>,
}

/// One step's share of a profile.
#[derive(Clone, Debug, PartialEq)]
pub struct StepTime {
    /// Its position in the schedule.
    pub index: usize,
    /// What it computes, e.g. `gemm 64x784 @ 784x256: matmul, add, relu`.
    pub label: String,
    /// Wall time summed over the runs since profiling started.
    pub seconds: f64,
}

fn internal(msg: impl Into<String>) -> Diagnostic {
    Diagnostic::internal(format!("jit: {}", msg.into()))
}

/// The unit named like `region_name` in the program's compiled annotations.
pub fn find_unit<'a>(p: &'a Program, name: &str) -> Option<&'a CompiledUnit> {
    p.compiled.as_ref()?.units.iter().find(|u| u.name == name)
}

/// Compiles `spec` on this thread's compiler.
fn compile(spec: &Spec) -> Result<KernelFn, Diagnostic> {
    super::with_compiler(|c| c.compile(spec)).map_err(internal)
}

struct Builder<'a> {
    g: &'a Graph,
    loc: HashMap<NodeId, Ref>,
    fixed: Vec<Tensor>,
    tables: usize,
    /// The nodes of the unit.
    in_unit: HashSet<NodeId>,
    /// The executor's values of nodes outside the unit.
    values: &'a Values,
}

impl Builder<'_> {
    /// `n`'s storage; a value computed outside the unit (by the executor)
    /// is fixed on first use.
    fn get(&mut self, n: NodeId) -> Result<Ref, Diagnostic> {
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
        let g = self.g;
        let mut absorbed: Vec<NodeId> = Vec::new();
        for &n in nodes {
            for i in g.inputs(n) {
                let widens = matches!(g.node(i).op, Op::BroadcastTo { .. })
                    && !self.in_unit.contains(&i)
                    && !absorbed.contains(&i)
                    && g.inputs(i).first().is_some_and(|s| self.values.contains_key(s));
                if widens {
                    absorbed.push(i);
                }
            }
        }
        if !absorbed.is_empty() {
            let members: Vec<NodeId> = absorbed.iter().chain(nodes).copied().collect();
            if let Some(spec) = Spec::analyze(g, &members, outputs) {
                for &a in &absorbed {
                    self.get(g.inputs(a)[0])?;
                }
                return Ok(Some(spec));
            }
        }
        Ok(Spec::analyze(g, nodes, outputs))
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
    fn part(&mut self, nodes: &[NodeId], outputs: &[NodeId], counts: &mut StepCounts) -> Result<Step, Diagnostic> {
        let in_arena = outputs.iter().all(|o| matches!(self.loc.get(o), Some(Ref::Arena(_) | Ref::Mask(_))));
        match self.analyze(nodes, outputs)?.filter(|s| s.numel() > 0 && in_arena) {
            Some(spec) => {
                counts.jit += 1;
                self.jit(&spec)
            }
            None => {
                counts.interp += 1;
                self.interp(nodes, outputs)
            }
        }
    }

    fn jit(&mut self, spec: &Spec) -> Result<Step, Diagnostic> {
        let spec = &spec.clone().in_rows_of(ROW_BLOCK);
        let mut args = Vec::with_capacity(spec.loads.len() + spec.outputs.len());
        for l in &spec.loads {
            args.push((self.get(l.node)?, self.g.node(l.node).ty.numel()));
        }
        for &o in &spec.output_nodes {
            match self.get(o)? {
                r @ (Ref::Arena(_) | Ref::Mask(_)) => args.push((r, spec.numel())),
                r => return Err(internal(format!("a compiled kernel writes {r:?}"))),
            }
        }
        // Adam's update runs as a native loop with the same results (module
        // `adam`), its arguments in that loop's order.
        if let Some(order) = super::adam::recognize(spec) {
            let loads = order.iter().filter(|&&i| i < spec.loads.len()).count();
            let args = order.iter().map(|&i| args[i]).collect();
            let (rows, inner) = (spec.rows(), spec.inner);
            return Ok(Step::Jit { f: super::adam::update_rows, args, loads, rows, inner, kind: "adam update" });
        }
        let f = compile(spec)?;
        Ok(Step::Jit { f, args, loads: spec.loads.len(), rows: spec.rows(), inner: spec.inner, kind: "fused" })
    }
}

impl JitUnit {
    /// Prepares `unit` of `program`: `slot_pos` maps each region input slot
    /// to its position in `run`'s inputs; `values` holds every value the
    /// unit reads from outside (the executor computed them already); the
    /// last `carried` inputs are replaced by the last `carried` outputs
    /// after each run and stay in the unit (module `carry`).
    pub fn prepare(
        program: &Program,
        unit: &CompiledUnit,
        slot_pos: &HashMap<usize, usize>,
        values: &Values,
        outputs: &[NodeId],
        carried: usize,
        threads: usize,
    ) -> Result<JitUnit, Diagnostic> {
        let g = &program.graph;
        let in_unit: HashSet<NodeId> = unit.kernels.iter().flat_map(|k| k.nodes.iter().copied()).collect();
        let mut b = Builder { g, loc: HashMap::new(), fixed: Vec::new(), tables: 0, in_unit, values };
        // Region inputs stay in the caller's tensors, so a new parameter the
        // plan writes over its input (`over_input`) gets its own place after
        // the planned arena; the runtime hands it back as an output.
        let mut arena_end = unit.arena_bytes;
        let buffers: HashMap<NodeId, usize> = unit
            .buffers
            .iter()
            .map(|buf| match buf.over_input {
                Some(_) => {
                    let at = arena_end.div_ceil(64) * 64;
                    arena_end = at + buf.bytes;
                    (buf.node, at)
                }
                None => (buf.node, buf.offset),
            })
            .collect();
        let mut slot_at: HashMap<usize, NodeId> = HashMap::new();
        // Storage of every value that leaves a kernel.
        for k in &unit.kernels {
            for &n in &k.nodes {
                let node = g.node(n);
                let r = match &node.op {
                    Op::Slot { slot, .. } if k.kind == KernelKind::Source => match slot_pos.get(slot) {
                        Some(&p) => {
                            slot_at.insert(p, n);
                            Ref::Input(p)
                        }
                        None => return Err(internal(format!("slot {slot} of unit `{}` is not an input", unit.name))),
                    },
                    Op::Constant { .. } if k.kind == KernelKind::Source => {
                        b.fixed.push(eval_node(&node.op, &[], &node.ty)?);
                        Ref::Fixed(b.fixed.len() - 1)
                    }
                    // A contraction's product that only its epilogue reads
                    // goes to scratch (below).
                    _ if !k.outputs.contains(&n) => continue,
                    _ => match buffers.get(&n) {
                        Some(&off) if node.ty.dtype == DType::F32 => Ref::Arena(off / 4),
                        Some(&off) if node.ty.dtype == DType::Bool => Ref::Mask(off),
                        _ => {
                            b.tables += 1;
                            Ref::Table(b.tables - 1)
                        }
                    },
                };
                b.loc.insert(n, r);
            }
        }
        // Values computed outside the unit are fixed when first read (`get`).
        let typed_outputs: Vec<(NodeId, TensorType)> = outputs.iter().map(|&o| (o, g.node(o).ty.clone())).collect();
        for &(o, _) in typed_outputs.iter().rev().take(carried) {
            b.get(o)?;
        }
        let over_input: HashMap<NodeId, NodeId> =
            unit.buffers.iter().filter_map(|buf| Some((buf.node, buf.over_input?))).collect();
        let carry =
            CarryInputs { slot_at: &slot_at, outputs: &typed_outputs, over_input: &over_input, inputs: slot_pos.len() };
        let residents = super::carry::plan(&carry, carried, &mut b.loc, &mut arena_end, &mut b.tables)?;
        let arena_floats = arena_end.div_ceil(4);
        // Values kept inside a kernel go to scratch after the arena, placed
        // so that sharing scratch bytes adds no wait to the schedule.
        let mut scratch = Scratch::new(arena_floats.div_ceil(16) * 16);
        let mut order = Order::default();
        let sync = |order: &mut Order, steps: &[Step]| {
            while order.len() < steps.len() {
                order.push(steps[order.len()].access());
            }
        };
        let mut steps = Vec::new();
        let mut counts = StepCounts::default();
        let mut cols = 0usize;
        let folded = super::fold::foldable(g, unit, outputs, &b.loc, &buffers);
        // A folded transpose's readers take its source, read transposed.
        let operand = |b: &mut Builder, n: NodeId| -> Result<(Ref, bool), Diagnostic> {
            match folded.contains(&n) {
                true => Ok((b.get(g.inputs(n)[0])?, true)),
                false => Ok((b.get(n)?, false)),
            }
        };
        // What `nodes` read from outside (a folded transpose: its source).
        let outside = |b: &Builder, nodes: &[NodeId]| -> Vec<Place> {
            let sources = nodes.iter().flat_map(|&n| g.inputs(n)).filter(|i| !nodes.contains(i));
            sources
                .map(|i| if folded.contains(&i) { g.inputs(i)[0] } else { i })
                .filter_map(|i| b.loc.get(&i).and_then(|&r| place(r, g.node(i).ty.numel())))
                .collect()
        };
        // Kernel outputs in arena buffers of their own that only this run
        // reads (where a contraction may leave its product, `in_place_output`).
        let plain: HashSet<NodeId> = unit
            .buffers
            .iter()
            .filter(|buf| buf.over_input.is_none() && !outputs.contains(&buf.node))
            .map(|buf| buf.node)
            .collect();
        // Where each fused max pool's first maxima go, by the pooled node,
        // and the size of that buffer so far.
        let (mut first_max_at, mut first_max_end) = (HashMap::new(), 0);
        // Convolution results not stored, only their fused pools
        // (`ConvPost::pool_only`).
        let mut unstored = HashSet::new();
        // The max-pool gradients written from recorded maxima, by node: their
        // pooled gradient, masks (`Step::Reduce::from_maxima`) and step.
        let mut grads_from_maxima: HashMap<NodeId, (Ref, usize, usize)> = HashMap::new();
        // How many steps read each of those gradients from the maxima.
        let mut maxima_readers: HashMap<NodeId, usize> = HashMap::new();
        // The kernel each step comes from (for its profile label).
        let mut kernel_of: Vec<usize> = Vec::new();
        let mut current = 0;
        for &ki in &unit.order {
            kernel_of.resize(steps.len(), current);
            current = ki;
            if let Some(last) = steps.len().checked_sub(1) {
                scratch.release(last);
            }
            let k = &unit.kernels[ki];
            if k.kind == KernelKind::Layout && k.nodes.iter().all(|n| folded.contains(n)) {
                counts.folded += 1;
                continue;
            }
            match k.kind {
                KernelKind::Source => {}
                KernelKind::Elementwise => match b.analyze(&k.nodes, &k.outputs)? {
                    Some(spec) if spec.numel() > 0 => {
                        steps.push(b.jit(&spec)?);
                        counts.jit += 1;
                    }
                    _ => {
                        steps.push(b.interp(&k.nodes, &k.outputs)?);
                        counts.interp += 1;
                    }
                },
                KernelKind::Contraction if is_f32_matmul(g, k.nodes[0]) || f32_conv(g, k.nodes[0]).is_some() => {
                    let mm = k.nodes[0];
                    let epilogue = &k.nodes[1..];
                    let outs: Vec<NodeId> = k.outputs.iter().copied().filter(|&o| o != mm).collect();
                    let epilogue_spec = match epilogue.is_empty() {
                        true => None,
                        false => b.analyze(epilogue, &outs)?.filter(|spec| spec.numel() > 0),
                    };
                    let mut in_place = false;
                    let dst = match b.loc.get(&mm) {
                        Some(Ref::Arena(off)) => *off,
                        _ => {
                            match epilogue_spec.as_ref().map(|spec| b.in_place_output(spec, mm, &plain)).transpose()? {
                                // The product goes where the epilogue writes an
                                // output of its size, which it then overwrites in
                                // place: one buffer in the cache instead of two.
                                Some(Some(at)) => {
                                    b.loc.insert(mm, Ref::Arena(at));
                                    counts.in_place += 1;
                                    in_place = true;
                                    at
                                }
                                _ => {
                                    sync(&mut order, &steps);
                                    let at = scratch.take(g.node(mm).ty.numel(), &order, &outside(&b, &k.nodes));
                                    b.loc.insert(mm, Ref::Arena(at));
                                    at
                                }
                            }
                        }
                    };
                    let ins = g.inputs(mm);
                    let (sa, sb) = (&g.node(ins[0]).ty.shape, &g.node(ins[1]).ty.shape);
                    let ((a, a_t), (bb, b_t)) = (operand(&mut b, ins[0])?, operand(&mut b, ins[1])?);
                    // A direct convolution applies a bias, ReLU and mask
                    // epilogue that writes only the product's place in
                    // registers, and the epilogue's own pass goes away.
                    let mut post_ops = None;
                    match f32_conv(g, mm) {
                        Some(conv) => {
                            cols = cols.max(conv.cols_len());
                            let is_zero = |n: NodeId| {
                                let node = g.node(n);
                                let constant = matches!(node.op, Op::Constant { .. });
                                let value = constant.then(|| eval_node(&node.op, &[], &node.ty).ok()).flatten();
                                value.is_some_and(|v| v.to_f64_vec().iter().all(|x| x.to_bits() == 0))
                            };
                            post_ops = epilogue_spec
                                .as_ref()
                                .filter(|_| in_place && conv.takes_post_ops())
                                .and_then(|spec| spec.channel_post_ops(mm, conv.out_channels(), is_zero));
                            let mut place_of = |n: Option<NodeId>| n.map(|n| b.get(n)).transpose();
                            let post = ConvPost {
                                bias: place_of(post_ops.and_then(|p| p.bias))?,
                                relu: post_ops.is_some_and(|p| p.relu),
                                keep_where_positive: place_of(post_ops.and_then(|p| p.keep_where_positive))?,
                                max_pool: None,
                                first_max: None,
                                pool_only: false,
                                from_maxima: None,
                            };
                            // A weight gradient whose output gradient is a max
                            // pool's gradient written from recorded maxima
                            // reads it from those maxima.
                            let mut post = post;
                            if conv.takes_grad_from_maxima() {
                                let grad = grads_from_maxima.get(&ins[1]);
                                let y = conv.forward_out_shape();
                                post.from_maxima =
                                    grad.filter(|g| still_there(&steps, g, &y)).map(|&(gy, off, _)| (gy, off));
                                if post.from_maxima.is_some() {
                                    *maxima_readers.entry(ins[1]).or_default() += 1;
                                }
                            }
                            steps.push(Step::Conv { conv, a, b: bb, dst, post });
                        }
                        None => {
                            let r = sa.len();
                            steps.push(Step::Gemm {
                                a,
                                b: bb,
                                a_t,
                                b_t,
                                dst,
                                batch: sa[..r - 2].iter().product(),
                                m: sa[r - 2],
                                k: sa[r - 1],
                                n: sb[r - 1],
                            });
                        }
                    }
                    counts.gemm += 1;
                    if !epilogue.is_empty() && post_ops.is_none() {
                        match epilogue_spec {
                            Some(spec) => {
                                steps.push(b.jit(&spec)?);
                                counts.jit += 1;
                            }
                            None => {
                                steps.push(b.interp(epilogue, &outs)?);
                                counts.interp += 1;
                            }
                        }
                    }
                }
                KernelKind::Reduction => {
                    // Prologue compiled (into scratch), the reduction native,
                    // the epilogue (an optimizer update, a normalization)
                    // compiled; each part falls back to the interpreter.
                    let (head, tail) = split_anchor(g, &k.nodes);
                    let Some((&anchor, prologue)) = head.split_last().filter(|_| native_reduce(g, &head)) else {
                        steps.push(b.interp(&k.nodes, &k.outputs)?);
                        counts.interp += 1;
                        continue;
                    };
                    sync(&mut order, &steps);
                    let reads = outside(&b, &k.nodes);
                    let mut scratch_for = |b: &mut Builder, n: NodeId| {
                        if let std::collections::hash_map::Entry::Vacant(e) = b.loc.entry(n) {
                            e.insert(Ref::Arena(scratch.take(g.node(n).ty.numel(), &order, &reads)));
                        }
                    };
                    let input = g.inputs(anchor)[0];
                    if !prologue.is_empty() {
                        scratch_for(&mut b, input);
                        let mut outs: Vec<NodeId> =
                            k.outputs.iter().copied().filter(|o| prologue.contains(o)).collect();
                        if !outs.contains(&input) {
                            outs.push(input);
                        }
                        let step = b.part(prologue, &outs, &mut counts)?;
                        steps.push(step);
                    }
                    scratch_for(&mut b, anchor);
                    let Ref::Arena(dst) = b.get(anchor)? else { return Err(internal("a reduction outside the arena")) };
                    let Op::Reduce { op, axes, .. } = &g.node(anchor).op else { unreachable!("native_reduce checked") };
                    let shape = g.node(input).ty.shape.clone();
                    let reduced: Vec<bool> = (0..shape.len()).map(|d| axes.contains(&d)).collect();
                    // The bias gradient of a max-pool gradient written from
                    // recorded maxima is summed from that gradient's operands.
                    let bias_sums = *op == ReduceOp::Sum
                        && prologue.is_empty()
                        && shape.len() == 4
                        && reduced == [true, true, true, false];
                    // Only while the pooled gradient is still there: the
                    // plan may reuse its bytes once the pool gradient ran.
                    let from_maxima = grads_from_maxima
                        .get(&input)
                        .filter(|g| bias_sums && still_there(&steps, g, &shape))
                        .map(|&(gy, off, _)| (gy, off));
                    if from_maxima.is_some() {
                        *maxima_readers.entry(input).or_default() += 1;
                    }
                    steps.push(Step::Reduce { op: *op, src: b.get(input)?, dst, shape, reduced, from_maxima });
                    counts.native += 1;
                    if !tail.is_empty() {
                        let outs: Vec<NodeId> = k.outputs.iter().copied().filter(|o| tail.contains(o)).collect();
                        let step = b.part(&tail, &outs, &mut counts)?;
                        steps.push(step);
                    }
                }
                KernelKind::Layout if f32_pool(g, &k.nodes).is_some() => {
                    let n = k.nodes[0];
                    let ins = g.inputs(n);
                    match (b.get(n)?, f32_pool(g, &k.nodes)) {
                        (Ref::Arena(dst), Some(params)) => {
                            let grad = match ins.get(1) {
                                Some(&gy) => Some(b.get(gy)?),
                                None => None,
                            };
                            let xs = g.node(ins[0]).ty.shape.clone();
                            let ys = match ins.get(1) {
                                Some(&gy) => g.node(gy).ty.shape.clone(),
                                None => g.node(n).ty.shape.clone(),
                            };
                            let x = b.get(ins[0])?;
                            // The convolution just before, whose result this
                            // pools, writes the pool too (not yet in `order`,
                            // whose copy of its places would be stale).
                            let pooled = Place::Bytes(4 * dst, 4 * (dst + ys.iter().product::<usize>()));
                            let apart = |step: &Step| {
                                let access = step.access();
                                !access.reads.iter().chain(&access.writes).any(|p| p.overlaps(pooled))
                            };
                            let last = steps.len().checked_sub(1).filter(|&i| i >= order.len() && apart(&steps[i]));
                            let fused = last.and_then(|i| match &mut steps[i] {
                                Step::Conv { conv, dst: y, post, .. } => {
                                    let pools = grad.is_none() && is_max_pool_2x2(&params) && post.max_pool.is_none();
                                    let ours = x == Ref::Arena(*y) && xs == conv.out_shape() && conv.takes_max_pool();
                                    (pools && ours).then_some((conv.first_max_len(), post))
                                }
                                _ => None,
                            });
                            // A max pool's gradient later in the unit reads the
                            // first maxima the fused pool records, not `x`.
                            let pooled_node = ins[0];
                            let first_max = match ins.get(1) {
                                Some(_) if is_max_pool_2x2(&params) => first_max_at.get(&pooled_node).copied(),
                                _ => None,
                            };
                            match fused {
                                Some((len, post)) => {
                                    post.max_pool = Some(dst);
                                    let grads = max_pool_grads(g, pooled_node, &b.in_unit);
                                    if grads > 0 {
                                        post.first_max = Some(first_max_end);
                                        first_max_at.insert(pooled_node, first_max_end);
                                        first_max_end += len;
                                    }
                                    // Nothing else reads the result: the unit
                                    // keeps only its pool.
                                    let readers = g.users(pooled_node).len();
                                    post.pool_only = readers == grads + 1 && !outputs.contains(&pooled_node);
                                    if post.pool_only {
                                        unstored.insert(pooled_node);
                                    }
                                }
                                None => {
                                    if let (Some(off), Some(gy)) = (first_max, grad) {
                                        grads_from_maxima.insert(n, (gy, off, steps.len()));
                                    }
                                    steps.push(Step::Pool { params, x, grad, dst, xs, ys, first_max, unread: false })
                                }
                            }
                            counts.native += 1;
                        }
                        _ if ins.first().is_some_and(|x| unstored.contains(x)) => {
                            return Err(internal("a pooling reads a convolution result that is not stored"))
                        }
                        _ => {
                            steps.push(b.interp(&k.nodes, &k.outputs)?);
                            counts.interp += 1;
                        }
                    }
                }
                KernelKind::Layout if is_f32_matrix_transpose(g, &k.nodes) => {
                    let n = k.nodes[0];
                    let src = g.inputs(n)[0];
                    let shape = &g.node(src).ty.shape;
                    match b.get(n)? {
                        Ref::Arena(dst) => {
                            steps.push(Step::Transpose { src: b.get(src)?, dst, rows: shape[0], cols: shape[1] });
                            counts.native += 1;
                        }
                        _ => {
                            steps.push(b.interp(&k.nodes, &k.outputs)?);
                            counts.interp += 1;
                        }
                    }
                }
                _ => {
                    steps.push(b.interp(&k.nodes, &k.outputs)?);
                    counts.interp += 1;
                }
            }
        }
        kernel_of.resize(steps.len(), current);
        // A max-pool gradient that every reader computes from the maxima
        // need not be written.
        for (node, &(_, _, at)) in &grads_from_maxima {
            let all = maxima_readers.get(node) == Some(&g.users(*node).len()) && !outputs.contains(node);
            if let Step::Pool { unread, .. } = &mut steps[at] {
                *unread = all;
            }
        }
        let steps_len = steps.len();
        // The steps' estimated work (about a nanosecond a unit): a small unit
        // runs on the calling thread (module `threads`).
        let work: u64 = steps.iter().map(|s| s.access().cost).sum();
        let labels = steps.iter().zip(&kernel_of).map(|(s, &ki)| s.label(g, &unit.kernels[ki].nodes)).collect();
        let outputs = outputs.iter().map(|&o| Ok((b.get(o)?, g.node(o).ty.clone()))).collect::<Result<_, _>>()?;
        let lines = scratch.end().div_ceil(16);
        let state = State {
            arena: vec![Line([0.0; 16]); lines],
            table: vec![None; b.tables],
            cols: vec![0.0; cols],
            first_max: vec![0; first_max_end],
        };
        sync(&mut order, &steps);
        let schedule = order.finish();
        counts.forks = schedule.forks();
        Ok(JitUnit {
            name: unit.name.clone(),
            steps,
            schedule,
            fixed: b.fixed,
            outputs,
            state: Mutex::new(state),
            pool: match work < PARALLEL_MIN_UNIT_WORK {
                true => None,
                false => super::threads::pool(threads).map_err(internal)?,
            },
            residents,
            arena_bytes: unit.arena_bytes,
            counts,
            step_nanos: (0..steps_len).map(|_| AtomicU64::new(0)).collect(),
            labels,
            profiling: AtomicBool::new(false),
        })
    }

    /// Whether runs use worker threads (false for one thread, and for a
    /// unit too small to gain from them: `PARALLEL_MIN_UNIT_WORK`).
    pub fn is_threaded(&self) -> bool {
        self.pool.is_some()
    }

    /// Starts (or stops) adding each step's wall time to its counter;
    /// starting clears the counters.
    pub fn set_profiling(&self, on: bool) {
        if on {
            self.step_nanos.iter().for_each(|n| n.store(0, Ordering::Relaxed));
        }
        self.profiling.store(on, Ordering::Relaxed);
    }

    /// Each step's wall time since profiling started, in schedule order.
    pub fn profile(&self) -> Vec<StepTime> {
        let times = self.labels.iter().zip(&self.step_nanos).enumerate();
        times
            .map(|(index, (label, n))| StepTime {
                index,
                label: label.clone(),
                seconds: n.load(Ordering::Relaxed) as f64 * 1e-9,
            })
            .collect()
    }

    /// Runs one step, timing it when profiling.
    ///
    /// # Safety
    /// As for `step`.
    unsafe fn timed_step(&self, i: usize, mem: Mem, threads: usize) -> Result<(), Diagnostic> {
        if !self.profiling.load(Ordering::Relaxed) {
            // SAFETY: the caller's contract.
            return unsafe { self.step(&self.steps[i], mem, threads) };
        }
        let started = std::time::Instant::now();
        // SAFETY: the caller's contract.
        let result = unsafe { self.step(&self.steps[i], mem, threads) };
        self.step_nanos[i].fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        result
    }

    /// Runs the unit on `inputs` (in region input order); returns the
    /// region's outputs. A unit prepared with carried values takes them from
    /// `inputs` too and returns them, through its residents.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        let head = inputs.len().saturating_sub(self.residents.len());
        if !self.residents.is_empty() {
            self.load_carried(&inputs[head..])?;
        }
        let mut out = self.run_head(&inputs[..head])?;
        out.extend(self.read_carried()?);
        Ok(out)
    }

    /// Runs the unit with its carried values where `load_carried` or the
    /// previous run left them: `head` are the other inputs; returns the
    /// outputs that are not carried.
    pub fn run_head(&self, head: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
        let mut st = self.state()?;
        let mem = Mem::of(&mut st, head);
        match &self.pool {
            // Entered once per run: a fork-join from outside the pool costs
            // ~4.5 µs, inside it ~0.13 µs.
            Some(pool) => pool.install(|| self.execute(mem))?,
            None => self.execute(mem)?,
        }
        for r in &self.residents {
            let Some(from) = r.refresh_from else { continue };
            match r.home {
                Ref::Arena(at) => {
                    let n = r.ty.numel();
                    let src = self.ptr(from, mem, n)? as *const f32;
                    // SAFETY: the steps are done; a home never overlaps the
                    // planned buffers or tensors it is refreshed from, and
                    // `ptr` checked `n` elements at `src`.
                    let dst = unsafe { mem.out(at, n, "a carried value")? };
                    dst.copy_from_slice(unsafe { std::slice::from_raw_parts(src, n) });
                }
                Ref::Table(t) => {
                    let v = self.read(from, mem, &r.ty)?;
                    // SAFETY: the steps are done.
                    unsafe { mem.set_table(t, v)? };
                }
                other => return Err(internal(format!("a carried value lives in {other:?}"))),
            }
        }
        let n = self.outputs.len() - self.residents.len();
        self.outputs[..n].iter().map(|(r, ty)| self.read(*r, mem, ty)).collect()
    }

    /// Puts the carried values (in carried order) into their homes.
    pub fn load_carried(&self, values: &[Tensor]) -> Result<(), Diagnostic> {
        if values.len() != self.residents.len() {
            return Err(internal(format!("{} carried values for {} homes", values.len(), self.residents.len())));
        }
        let mut st = self.state()?;
        let mem = Mem::of(&mut st, &[]);
        for (r, v) in self.residents.iter().zip(values) {
            if v.ty() != r.ty {
                return Err(internal(format!("a carried value of type {} for a home of {}", v.ty(), r.ty)));
            }
            match r.home {
                Ref::Arena(at) => store(mem, at, v)?,
                // SAFETY: nothing runs; the lock is held.
                Ref::Table(t) => unsafe { mem.set_table(t, v.clone())? },
                other => return Err(internal(format!("a carried value lives in {other:?}"))),
            }
        }
        Ok(())
    }

    /// The carried values, as the last run left them.
    pub fn read_carried(&self) -> Result<Vec<Tensor>, Diagnostic> {
        let mut st = self.state()?;
        let mem = Mem::of(&mut st, &[]);
        self.residents.iter().map(|r| self.read(r.home, mem, &r.ty)).collect()
    }

    /// The value at `r` as a tensor of type `ty`.
    fn read(&self, r: Ref, mem: Mem, ty: &TensorType) -> Result<Tensor, Diagnostic> {
        match r {
            Ref::Arena(off) => arena_tensor(mem, off, ty),
            Ref::Mask(off) => mask_tensor(mem, off, ty),
            r => self.tensor(r, mem).cloned(),
        }
    }

    fn state(&self) -> Result<MutexGuard<'_, State>, Diagnostic> {
        self.state.lock().map_err(|_| internal("a previous run of this unit panicked"))
    }

    /// Runs every step: in schedule order on one thread; with worker
    /// threads, each step as soon as the steps it depends on are done
    /// (module `schedule`).
    fn execute(&self, mem: Mem) -> Result<(), Diagnostic> {
        let threads = if self.pool.is_some() { rayon::current_num_threads() } else { 1 };
        // SAFETY (both calls): one step runs at a time.
        let in_order = || (0..self.steps.len()).try_for_each(|i| unsafe { self.timed_step(i, mem, threads) });
        if threads == 1 {
            return in_order();
        }
        if !self.schedule.has_parallel_steps() {
            return super::threads::with_workers_awake(in_order);
        }
        let run = Run {
            unit: self,
            mem,
            threads,
            waits: self.schedule.waits.iter().map(|&w| AtomicU32::new(w)).collect(),
            failed: Mutex::new(None),
            stop: AtomicBool::new(false),
        };
        let run = &run;
        super::threads::with_workers_awake(|| {
            rayon::scope(|s| {
                let (first, rest) = self.schedule.roots.split_first().map_or((None, &[][..]), |(f, r)| (Some(f), r));
                for &r in rest {
                    s.spawn(move |s| run.from(s, r as usize));
                }
                if let Some(&f) = first {
                    run.from(s, f as usize);
                }
            })
        });
        let failed = match run.failed.lock() {
            Ok(mut failed) => failed.take(),
            Err(_) => return Err(internal("a step panicked")),
        };
        failed.map_or(Ok(()), |(_, d)| Err(d))
    }

    /// Runs one step.
    ///
    /// # Safety
    /// No step that runs at the same time writes a place `step` touches or
    /// touches a place `step` writes (the schedule's contract).
    unsafe fn step(&self, step: &Step, mem: Mem, threads: usize) -> Result<(), Diagnostic> {
        match step {
            Step::Jit { f, args, rows, inner, .. } => {
                let ptrs = args.iter().map(|&(r, len)| self.ptr(r, mem, len)).collect::<Result<Vec<_>, _>>()?;
                let (rows, inner) = (*rows, *inner);
                if threads > 1 && rows > 1 && rows * inner >= PARALLEL_MIN_ELEMENTS {
                    let shared = Pointers(ptrs.as_ptr());
                    let f = *f;
                    rayon::scope(|s| {
                        for (lo, hi) in split_rows(rows, threads) {
                            let shared = &shared;
                            // SAFETY: as below; disjoint row ranges write
                            // disjoint output elements, and read-only
                            // loads may be shared.
                            s.spawn(move |_| unsafe { f(shared.0, lo, hi, inner) });
                        }
                    });
                } else {
                    // SAFETY: every pointer addresses at least the
                    // elements the spec reads or writes (checked by
                    // `ptr`), and the compiled function touches nothing
                    // else.
                    unsafe { f(ptrs.as_ptr(), 0, rows, inner) };
                }
            }
            Step::Gemm { a, b, a_t, b_t, dst, batch, m, k, n } => {
                let (m, k, n) = (*m, *k, *n);
                let pa = self.ptr(*a, mem, batch * m * k)?;
                let pb = self.ptr(*b, mem, batch * k * n)?;
                // SAFETY: the caller's contract.
                let out = unsafe { mem.out(*dst, batch * m * n, "a matmul result")? };
                for bt in 0..*batch {
                    let d = &mut out[bt * m * n..(bt + 1) * m * n];
                    let (ma, mb) =
                        (pa.wrapping_add(bt * m * k) as *const f32, pb.wrapping_add(bt * k * n) as *const f32);
                    let lhs = if *a_t { (ma, 1, m) } else { (ma, k, 1) };
                    let rhs = if *b_t { (mb, 1, k) } else { (mb, n, 1) };
                    // SAFETY: `pa`/`pb` hold `batch` m×k and k×n
                    // matrices (checked by `ptr`), row-major or, when
                    // folded, stored transposed; `d` is m×n.
                    unsafe { sgemm(d, lhs, rhs, m, k, n, threads) };
                }
            }
            Step::Conv { conv, a, b, dst, post } => {
                let (na, nb, ny) = conv.sizes();
                let pa = self.ptr(*a, mem, na)?;
                let pb = self.ptr(*b, mem, nb)?;
                // A post-op operand of `len` values (`ptr` checks the length).
                let operand = |r: Option<Ref>, len: usize| -> Result<Option<&[f32]>, Diagnostic> {
                    let Some(r) = r else { return Ok(None) };
                    // SAFETY: `ptr` checked that `r` holds `len` values.
                    Ok(Some(unsafe { std::slice::from_raw_parts(self.ptr(r, mem, len)? as *const f32, len) }))
                };
                let bias = operand(post.bias, conv.out_channels())?;
                // SAFETY: the caller's contract (a convolution writes the
                // convolution scratch too).
                let out = unsafe { mem.out(*dst, ny, "a convolution result")? };
                let cols = unsafe { mem.cols(conv.cols_len())? };
                let max_pool = match post.max_pool {
                    // SAFETY: as for `out` (the plan gives the pool its own place).
                    Some(off) => Some(SendPtr(unsafe { mem.out(off, ny / 4, "a pooled result")? }.as_mut_ptr())),
                    None => None,
                };
                let first_max = match post.first_max {
                    // SAFETY: as for `out` (the schedule orders the readers).
                    Some(off) => Some(SendMasks(unsafe { mem.first_max(off, conv.first_max_len())? }.as_mut_ptr())),
                    None => None,
                };
                let keep_where_positive = operand(post.keep_where_positive, ny)?;
                let grad_from_maxima = match post.from_maxima {
                    Some((gy, off)) => {
                        let pooled = pooled_shape(&conv.forward_out_shape());
                        Some(MaximaGrad {
                            pooled: operand(Some(gy), pooled.iter().product())?.unwrap_or_default(),
                            // SAFETY: the schedule orders the masks' writer before.
                            first_max: unsafe { mem.first_max(off, first_max_len(&pooled))? },
                        })
                    }
                    None => None,
                };
                let (relu, pool_only) = (post.relu, post.pool_only);
                let post =
                    PostOps { bias, relu, keep_where_positive, max_pool, first_max, pool_only, grad_from_maxima };
                // SAFETY: `ptr` checked the operand sizes; `out` and
                // `cols` have the sizes `run` needs.
                unsafe { conv.run(pa, pb, out, cols, post, threads) };
            }
            Step::Reduce { dst, shape, from_maxima: Some((gy, off)), .. } => {
                let pooled = pooled_shape(shape);
                let gy = self.ptr(*gy, mem, pooled.iter().product())? as *const f32;
                // SAFETY: `ptr` checked the size; the caller's contract.
                let gy = unsafe { std::slice::from_raw_parts(gy, pooled.iter().product()) };
                // SAFETY: the caller's contract (the schedule orders the
                // masks' writer before).
                let first_max = unsafe { mem.first_max(*off, first_max_len(&pooled))? };
                // SAFETY: the caller's contract.
                let to = unsafe { mem.out(*dst, shape[3], "a reduction result")? };
                super::pool::max_pool_grad_column_sums(first_max, gy, shape, to)?;
            }
            Step::Reduce { op, src, dst, shape, reduced, from_maxima: None } => {
                let n: usize = shape.iter().product();
                let from = self.ptr(*src, mem, n)? as *const f32;
                // SAFETY: `ptr` checked that `src` holds `n` elements.
                let from = unsafe { std::slice::from_raw_parts(from, n) };
                let m: usize = shape.iter().zip(reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).product();
                // SAFETY: the caller's contract.
                let to = unsafe { mem.out(*dst, m, "a reduction result")? };
                super::reduce::reduce(*op, from, shape, reduced, to);
            }
            Step::Pool { unread: true, .. } => {}
            Step::Pool { params, x, grad, dst, xs, ys, first_max, unread: false } => {
                let (nx, ny) = (xs.iter().product::<usize>(), ys.iter().product::<usize>());
                if let (Some(off), Some(gy)) = (first_max, grad) {
                    let gy = self.ptr(*gy, mem, ny)? as *const f32;
                    // SAFETY: `ptr` checked the size; the caller's contract.
                    let (gy, out) =
                        unsafe { (std::slice::from_raw_parts(gy, ny), mem.out(*dst, nx, "a pooling result")?) };
                    // SAFETY: the schedule orders this read after the
                    // convolution that writes the masks.
                    let first_max = unsafe { mem.first_max(*off, first_max_len(ys))? };
                    return super::pool::max_pool_grad_from_first_max(first_max, gy, xs, out, threads);
                }
                let px = self.ptr(*x, mem, nx)? as *const f32;
                let pg = match grad {
                    Some(gy) => Some(self.ptr(*gy, mem, ny)? as *const f32),
                    None => None,
                };
                let out_len = if grad.is_some() { nx } else { ny };
                // SAFETY: the caller's contract.
                let out = unsafe { mem.out(*dst, out_len, "a pooling result")? };
                // SAFETY: `ptr` checked the sizes; the memory plan never
                // places a kernel's output over its operands.
                let xv = unsafe { std::slice::from_raw_parts(px, nx) };
                match pg {
                    Some(pg) => {
                        let gy = unsafe { std::slice::from_raw_parts(pg, ny) };
                        super::pool::pool_grad(xv, gy, xs, ys, *params, out, threads)?
                    }
                    None => super::pool::pool(xv, xs, ys, *params, out, threads)?,
                }
            }
            Step::Transpose { src, dst, rows, cols } => {
                let (rows, cols) = (*rows, *cols);
                let from = self.ptr(*src, mem, rows * cols)? as *const f32;
                // SAFETY: `ptr` checked that `src` holds rows × cols elements.
                let from = unsafe { std::slice::from_raw_parts(from, rows * cols) };
                // SAFETY: the caller's contract.
                let to = unsafe { mem.out(*dst, rows * cols, "a transpose result")? };
                super::transpose::transpose(from, to, rows, cols);
            }
            Step::Interp(nodes) => {
                let mut local: Vec<Tensor> = Vec::with_capacity(nodes.len());
                for node in nodes {
                    let owned: Vec<Option<Tensor>> = node
                        .args
                        .iter()
                        .zip(&node.arg_tys)
                        .map(|(a, ty)| match a {
                            Arg::Ref(Ref::Arena(off)) => Ok(Some(arena_tensor(mem, *off, ty)?)),
                            Arg::Ref(Ref::Mask(off)) => Ok(Some(mask_tensor(mem, *off, ty)?)),
                            _ => Ok(None),
                        })
                        .collect::<Result<_, Diagnostic>>()?;
                    let args: Vec<&Tensor> = node
                        .args
                        .iter()
                        .zip(&owned)
                        .map(|(a, o)| match (a, o) {
                            (_, Some(t)) => Ok(t),
                            (Arg::Local(l), None) => local.get(*l).ok_or_else(|| internal("local operand")),
                            (Arg::Ref(r), None) => self.tensor(*r, mem),
                        })
                        .collect::<Result<_, _>>()?;
                    let v = eval_node(&node.op, &args, &node.ty)
                        .map_err(|d| d.label(node.span, format!("while computing this `{}`", node.op.name())))?;
                    match node.out {
                        Some(Ref::Arena(off)) => store(mem, off, &v)?,
                        Some(Ref::Mask(off)) => store_mask(mem, off, &v)?,
                        // SAFETY: the caller's contract.
                        Some(Ref::Table(t)) => unsafe { mem.set_table(t, v.clone())? },
                        Some(r) => return Err(internal(format!("an interpreted kernel writes {r:?}"))),
                        None => {}
                    }
                    local.push(v);
                }
            }
        }
        Ok(())
    }

    /// The tensor at `r` (not in the arena).
    fn tensor<'t>(&'t self, r: Ref, mem: Mem<'t>) -> Result<&'t Tensor, Diagnostic> {
        match r {
            Ref::Input(p) => mem.inputs.get(p).ok_or_else(|| internal(format!("input {p} is unbound"))),
            Ref::Fixed(i) => self.fixed.get(i).ok_or_else(|| internal("fixed value")),
            // SAFETY: a step reads a table entry only when the schedule
            // lets no other step write it at the same time.
            Ref::Table(t) => {
                unsafe { mem.table(t)? }.as_ref().ok_or_else(|| internal("a value is read before it is computed"))
            }
            Ref::Arena(_) | Ref::Mask(_) => Err(internal("an arena value read as a tensor")),
        }
    }

    /// A pointer to `len` `f32` elements of `r`.
    fn ptr(&self, r: Ref, mem: Mem, len: usize) -> Result<*mut f32, Diagnostic> {
        match r {
            Ref::Arena(off) => mem.floats(off, len).ok_or_else(|| internal("a kernel operand lies outside the arena")),
            Ref::Mask(off) => mem
                .bytes(off, len)
                .map(|p| p.cast::<f32>())
                .ok_or_else(|| internal("a kernel operand lies outside the arena")),
            r => {
                let t = self.tensor(r, mem)?;
                match t.data() {
                    Data::F32(a) if t.dtype() == DType::F32 => {
                        let s = a.as_slice().ok_or_else(|| internal("a tensor is not row-major"))?;
                        if s.len() < len {
                            return Err(internal("a kernel operand is smaller than its type"));
                        }
                        Ok(s.as_ptr() as *mut f32)
                    }
                    // A one_hot's labels, read as `i32`.
                    Data::I32(a) => {
                        let s = a.as_slice().ok_or_else(|| internal("a tensor is not row-major"))?;
                        if s.len() < len {
                            return Err(internal("a kernel operand is smaller than its type"));
                        }
                        Ok(s.as_ptr() as *mut f32)
                    }
                    // `bool` is one byte, 0 or 1: what compiled code reads.
                    Data::Bool(a) => {
                        let s = a.as_slice().ok_or_else(|| internal("a tensor is not row-major"))?;
                        if s.len() < len {
                            return Err(internal("a kernel operand is smaller than its type"));
                        }
                        Ok(s.as_ptr() as *mut f32)
                    }
                    _ => Err(internal(format!("a compiled kernel reads a {} value", t.dtype()))),
                }
            }
        }
    }
}

/// One threaded run of a unit's steps: each step runs once the steps it
/// waits for are done (`waits` counts down), on whichever worker finishes
/// the last of them.
struct Run<'r> {
    unit: &'r JitUnit,
    mem: Mem<'r>,
    threads: usize,
    waits: Vec<AtomicU32>,
    /// The failure of the earliest failed step (by index), if any.
    failed: Mutex<Option<(usize, Diagnostic)>>,
    /// Set on a failure: no further step starts.
    stop: AtomicBool,
}

impl<'r> Run<'r> {
    /// Runs step `i`, then every step it made ready: the most critical one
    /// (the schedule's highest rank) on this thread, the others spawned
    /// for idle workers to take.
    fn from<'s>(&'s self, s: &rayon::Scope<'s>, mut i: usize)
    where
        'r: 's,
    {
        let sched = &self.unit.schedule;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            // SAFETY: every step that touches a place step `i` writes, or
            // writes a place it reads, is ordered before or after it by the
            // schedule; those before have counted `waits[i]` down to zero.
            if let Err(d) = unsafe { self.unit.timed_step(i, self.mem, self.threads) } {
                self.stop.store(true, Ordering::Relaxed);
                if let Ok(mut failed) = self.failed.lock() {
                    if failed.as_ref().is_none_or(|(j, _)| i < *j) {
                        *failed = Some((i, d));
                    }
                }
                return;
            }
            let mut next = None;
            for &j in &sched.then[i] {
                // Release publishes this step's writes; acquire (by the
                // step that counts to zero) sees every predecessor's.
                if self.waits[j as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                    match next {
                        None => next = Some(j as usize),
                        Some(_) => s.spawn(move |s| self.from(s, j as usize)),
                    }
                }
            }
            match next {
                Some(j) => i = j,
                None => return,
            }
        }
    }
}

/// The argument pointers of a compiled kernel, shared by the threads that
/// run its rows.
struct Pointers(*const *mut f32);

// SAFETY: the pointers are only dereferenced by compiled kernels on
// disjoint row ranges while the owning `execute` call waits for them.
unsafe impl Sync for Pointers {}

/// The kernel's single anchor (reduction) with its in-kernel ancestors,
/// in kernel order with the anchor last, and the remaining nodes.
pub(super) fn split_anchor(g: &Graph, nodes: &[NodeId]) -> (Vec<NodeId>, Vec<NodeId>) {
    let Some(&anchor) = nodes.iter().find(|&&n| matches!(g.node(n).op, Op::Reduce { .. } | Op::ArgMax { .. })) else {
        return (Vec::new(), nodes.to_vec());
    };
    let members: HashSet<NodeId> = nodes.iter().copied().collect();
    let mut before: HashSet<NodeId> = HashSet::new();
    let mut stack = g.inputs(anchor);
    while let Some(n) = stack.pop() {
        if members.contains(&n) && before.insert(n) {
            stack.extend(g.inputs(n));
        }
    }
    let mut head: Vec<NodeId> = nodes.iter().copied().filter(|n| before.contains(n)).collect();
    head.push(anchor);
    let tail = nodes.iter().copied().filter(|n| !before.contains(n) && *n != anchor).collect();
    (head, tail)
}

/// A reduction (the last of `head`) over `f32` values that `reduce.rs` runs.
fn native_reduce(g: &Graph, head: &[NodeId]) -> bool {
    let Some(&a) = head.last() else { return false };
    matches!(g.node(a).op, Op::Reduce { .. })
        && g.node(a).ty.dtype == DType::F32
        && g.inputs(a).iter().all(|&i| g.node(i).ty.dtype == DType::F32)
}

/// Whether the pooled gradient a max-pool gradient written from recorded
/// maxima read (`(gy, masks, the step)`, see `grads_from_maxima`) still
/// holds it after `steps`, for a later step to read instead of that
/// gradient (of shape `grad`): the plan may reuse its bytes once the
/// pool's gradient ran.
fn still_there(steps: &[Step], &(gy, _, at): &(Ref, usize, usize), grad: &[usize]) -> bool {
    let pooled = place(gy, pooled_shape(grad).iter().product());
    let overwrites = |s: &Step| s.access().writes.iter().any(|w| pooled.is_some_and(|p| w.overlaps(p)));
    !steps[at + 1..].iter().any(overwrites)
}

/// The shape of the 2x2 max pool of `[N, H, W, C]` (even `H` and `W`).
fn pooled_shape(shape: &[usize]) -> [usize; 4] {
    match *shape {
        [n, h, w, c] => [n, h / 2, w / 2, c],
        _ => [0; 4],
    }
}

/// How many gradients of a 2x2 max pool of `x` the unit takes (`in_unit`:
/// the unit's nodes): a pool fused into the convolution that writes `x`
/// records its first maxima for them, and they read those instead of `x`.
fn max_pool_grads(g: &Graph, x: NodeId, in_unit: &HashSet<NodeId>) -> usize {
    let is_grad_of_x = |u: &NodeId| {
        let grad = matches!(g.node(*u).op, Op::Pool2dGrad { .. });
        let pool = grad && f32_pool(g, &[*u]).is_some_and(|p| is_max_pool_2x2(&p));
        pool && g.inputs(*u).first() == Some(&x) && in_unit.contains(u)
    };
    g.users(x).iter().filter(|u| is_grad_of_x(u)).count()
}

/// Whether `p` is the 2x2, stride-2, unpadded max pool a convolution can
/// write with its result (`conv::PostOps::max_pool`).
fn is_max_pool_2x2(p: &PoolParams) -> bool {
    p.kind == PoolKind::Max && p.size == [2, 2] && p.stride == [2, 2] && p.padding == [0; 4]
}

/// The parameters of a layout kernel that is one `f32` pooling or pooling
/// gradient.
fn f32_pool(g: &Graph, nodes: &[NodeId]) -> Option<PoolParams> {
    let [n] = nodes else { return None };
    let node = g.node(*n);
    let f32s = node.ty.dtype == DType::F32 && g.inputs(*n).iter().all(|&i| g.node(i).ty.dtype == DType::F32);
    match &node.op {
        Op::Pool2d { kind, size, stride, padding } | Op::Pool2dGrad { kind, size, stride, padding } if f32s => {
            Some(PoolParams { kind: *kind, size: *size, stride: *stride, padding: *padding })
        }
        _ => None,
    }
}

/// A layout kernel that is one `f32` 2-D transpose.
fn is_f32_matrix_transpose(g: &Graph, nodes: &[NodeId]) -> bool {
    let [n] = nodes else { return false };
    let node = g.node(*n);
    matches!(&node.op, Op::Transpose { perm } if perm == &[1, 0]) && node.ty.dtype == DType::F32
}

/// The lowered geometry of an `f32` convolution node.
fn f32_conv(g: &Graph, n: NodeId) -> Option<Conv> {
    let node = g.node(n);
    let ins = g.inputs(n);
    let all_f32 = node.ty.dtype == DType::F32 && ins.iter().all(|&i| g.node(i).ty.dtype == DType::F32);
    let [a, b] = ins.as_slice() else { return None };
    Conv::of(&node.op, &g.node(*a).ty.shape, &g.node(*b).ty.shape, &node.ty.shape).filter(|_| all_f32)
}

fn is_f32_matmul(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    matches!(node.op, Op::MatMul)
        && node.ty.dtype == DType::F32
        && g.inputs(n).iter().all(|&i| g.node(i).ty.dtype == DType::F32 && g.node(i).ty.shape.len() >= 2)
}

/// The storage of one run as raw parts, so that the steps the schedule
/// runs at once can each borrow the places they touch: no two of them
/// touch overlapping places unless both only read them (module `schedule`).
#[derive(Clone, Copy)]
struct Mem<'a> {
    arena: *mut f32,
    floats: usize,
    table: *mut Option<Tensor>,
    tables: usize,
    cols: *mut f32,
    cols_len: usize,
    first_max: *mut u64,
    first_max_len: usize,
    inputs: &'a [Tensor],
}

// SAFETY: a `Mem` is shared only by the steps of one run, while the
// caller holds the unit's state lock, and those steps touch disjoint
// places or only read the same ones (the schedule's contract).
unsafe impl Send for Mem<'_> {}
unsafe impl Sync for Mem<'_> {}

impl<'a> Mem<'a> {
    fn of(st: &'a mut State, inputs: &'a [Tensor]) -> Mem<'a> {
        Mem {
            arena: st.arena.as_mut_ptr().cast::<f32>(),
            // `Line` is `repr(C)` over `[f32; 16]`.
            floats: st.arena.len() * 16,
            table: st.table.as_mut_ptr(),
            tables: st.table.len(),
            cols: st.cols.as_mut_ptr(),
            cols_len: st.cols.len(),
            first_max: st.first_max.as_mut_ptr(),
            first_max_len: st.first_max.len(),
            inputs,
        }
    }

    /// A pointer to the `len` floats at `off`, if they lie in the arena.
    fn floats(self, off: usize, len: usize) -> Option<*mut f32> {
        (off.checked_add(len)? <= self.floats).then(|| self.arena.wrapping_add(off))
    }

    /// A pointer to the `len` bytes at `off`, if they lie in the arena.
    fn bytes(self, off: usize, len: usize) -> Option<*mut u8> {
        (off.checked_add(len)? <= self.floats * 4).then(|| self.arena.cast::<u8>().wrapping_add(off))
    }

    /// The floats `off..off + len` (`what` names them in the error).
    ///
    /// # Safety
    /// Nothing else reads or writes them while the slice lives.
    unsafe fn out(self, off: usize, len: usize, what: &str) -> Result<&'a mut [f32], Diagnostic> {
        let p = self.floats(off, len).ok_or_else(|| internal(format!("{what} does not fit in the arena")))?;
        // SAFETY: in the arena (checked); exclusive by the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// The first `len` floats of the convolutions' scratch.
    ///
    /// # Safety
    /// As for `out`.
    unsafe fn cols(self, len: usize) -> Result<&'a mut [f32], Diagnostic> {
        if len > self.cols_len {
            return Err(internal("convolution scratch too small"));
        }
        // SAFETY: `len` floats of the buffer; exclusive by the contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.cols, len) })
    }

    /// Masks `off..off + len` of the first-maximum buffer.
    ///
    /// # Safety
    /// As for `out`.
    unsafe fn first_max(self, off: usize, len: usize) -> Result<&'a mut [u64], Diagnostic> {
        if off + len > self.first_max_len {
            return Err(internal("first-maximum buffer too small"));
        }
        // SAFETY: inside the buffer (checked); exclusive by the contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.first_max.add(off), len) })
    }

    /// Table entry `t`.
    ///
    /// # Safety
    /// Nothing writes it while the reference lives.
    unsafe fn table(self, t: usize) -> Result<&'a Option<Tensor>, Diagnostic> {
        if t >= self.tables {
            return Err(internal("a table entry out of range"));
        }
        // SAFETY: in range; not written meanwhile (the caller's contract).
        Ok(unsafe { &*self.table.add(t) })
    }

    /// Sets table entry `t`.
    ///
    /// # Safety
    /// Nothing else reads or writes it meanwhile.
    unsafe fn set_table(self, t: usize, v: Tensor) -> Result<(), Diagnostic> {
        if t >= self.tables {
            return Err(internal("a table entry out of range"));
        }
        // SAFETY: in range; exclusive by the caller's contract.
        unsafe { *self.table.add(t) = Some(v) };
        Ok(())
    }
}

/// The `f32` tensor of type `ty` at element `off` of the arena.
fn arena_tensor(mem: Mem, off: usize, ty: &TensorType) -> Result<Tensor, Diagnostic> {
    let n = ty.numel();
    let p = mem.floats(off, n).ok_or_else(|| internal("an arena value lies outside the arena"))?;
    // SAFETY: in the arena; the schedule lets no step write these floats
    // while the reading step runs.
    let v = unsafe { std::slice::from_raw_parts(p, n) };
    Tensor::from_vec(DType::F32, &ty.shape, v.to_vec())
}

/// The `bool` tensor of type `ty` at byte `off` of the arena.
fn mask_tensor(mem: Mem, off: usize, ty: &TensorType) -> Result<Tensor, Diagnostic> {
    let n = ty.numel();
    let p = mem.bytes(off, n).ok_or_else(|| internal("an arena value lies outside the arena"))?;
    // SAFETY: as in `arena_tensor`.
    let v = unsafe { std::slice::from_raw_parts(p, n) };
    Tensor::from_vec(DType::Bool, &ty.shape, v.iter().map(|&b| b != 0).collect())
}

fn store_mask(mem: Mem, off: usize, v: &Tensor) -> Result<(), Diagnostic> {
    let Data::Bool(a) = v.data() else { return Err(internal("a non-bool value stored as a mask")) };
    let p = mem.bytes(off, a.len()).ok_or_else(|| internal("a kernel output lies outside the arena"))?;
    // SAFETY: in the arena; only the writing step touches these bytes.
    let dst = unsafe { std::slice::from_raw_parts_mut(p, a.len()) };
    for (d, &s) in dst.iter_mut().zip(a.iter()) {
        *d = u8::from(s);
    }
    Ok(())
}

fn store(mem: Mem, off: usize, v: &Tensor) -> Result<(), Diagnostic> {
    let Data::F32(a) = v.data() else { return Err(internal("a non-f32 value stored in the arena")) };
    // SAFETY: only the writing step (or a caller holding the lock with no
    // step running) touches these floats.
    let dst = unsafe { mem.out(off, a.len(), "a kernel output") }?;
    for (d, s) in dst.iter_mut().zip(a.iter()) {
        *d = *s;
    }
    Ok(())
}
