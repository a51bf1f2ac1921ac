//! The steps a prepared unit runs, described as data: what each computes,
//! where its operands and results live (`Ref`), which places it reads and
//! writes (for the schedule) and its label in profiles.
//!
//! Contract: [`Step::access`] lists every place a step's run touches
//! (module `execute` runs them): the schedule orders two steps exactly
//! when one writes a place the other reads or writes, so a place missing
//! here would be a data race. [`Step::label`] names the step's kind and
//! sizes, then its kernel's ops.
//!
//! Example: the first layer of a training step's MLP is
//! `Step::Gemm { a: Ref::Input(0), b: Ref::Arena(w), dst, m: 64, k: 784, n: 256, .. }`,
//! which reads the batch (an input) and the first weight (carried in the
//! arena, module `carry`) and writes `64 * 256` floats of the arena at
//! `dst`, labelled `gemm 64x784 @ 784x256: matmul, …`.

use super::generic::Loop;
use super::recognize::pooled_shape;
use crate::backend::cpu::codegen::KernelFn;
use crate::backend::cpu::kernels::conv::Conv;
use crate::backend::cpu::kernels::permute::Permutation;
use crate::backend::cpu::kernels::pool::first_max_len;
use crate::backend::cpu::kernels::window::Copies;
use crate::backend::cpu::schedule::{Access, Place};
use crate::diag::Span;
use crate::ir::{DType, Graph, NodeId, Op, ReduceOp, TensorType};
use crate::tensor::PoolParams;

/// Where a value is during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) enum Ref {
    /// `f32` elements at this element offset of the arena.
    Arena(usize),
    /// `bool` elements (one byte each, 0 or 1) at this byte offset of the arena.
    Mask(usize),
    /// `f16` or `bf16` elements (two bytes each, the value's type says
    /// which) at this byte offset of the arena.
    Half(usize),
    /// `i32` elements at this byte offset of the arena.
    Int(usize),
    /// `f64` or `i64` elements (eight bytes each, the value's type says
    /// which) at this byte offset of the arena.
    Wide(usize),
    /// The caller's input at this position.
    Input(usize),
    /// A value fixed at `prepare` (computed outside the unit, or a constant).
    Fixed(usize),
    /// A tensor computed by an interpreted kernel in this run.
    Table(usize),
}

/// A compiled step's record of failures (integer `/` and `^`), and for
/// each expression that can fail, the op and source line an error names.
pub(super) struct Fallible {
    pub(super) faults: crate::backend::cpu::codegen::fault::Faults,
    /// `(expression index, span, op name)`, as `Spec::fallible` lists them.
    pub(super) sites: Vec<(usize, Span, &'static str)>,
}

/// An operand of an interpreted node.
#[derive(Clone, Copy, Debug)]
pub(super) enum Arg {
    /// An earlier node of the same kernel.
    Local(usize),
    Ref(Ref),
}

/// A node the reference interpreter evaluates inside a `Step::Interp`.
#[derive(Clone, Debug)]
pub(super) struct InterpNode {
    pub(super) op: Op,
    pub(super) ty: TensorType,
    pub(super) span: Span,
    pub(super) args: Vec<Arg>,
    /// The type of each operand (arena values are read back with it).
    pub(super) arg_tys: Vec<TensorType>,
    /// Where the value goes if it leaves the kernel.
    pub(super) out: Option<Ref>,
}

/// A compiled step's native function: `Ready`, a native loop's;
/// `Compiled`, Cranelift's code of the unit's spec at that index (kept for
/// ahead-of-time libraries, module `library`); `Pending` (that index) only
/// while the unit's steps are built: the unit's kernels compile together
/// once all are known (`Lowering::finish`).
#[derive(Clone, Copy)]
pub(super) enum Code {
    Ready(KernelFn),
    Compiled(KernelFn, usize),
    Pending(usize),
}

/// The `i8` weights of a quantized product. The host keeps `i8` values in
/// `i32` storage: weights fixed at `prepare` (a quantized model's, the
/// usual case) are narrowed, and packed for the VNNI kernel, once then;
/// any others on each run.
pub(super) enum Int8Weights {
    /// Packed for the VNNI kernel.
    Packed(crate::backend::cpu::kernels::int8_gemm::PackedWeights),
    /// Narrowed, where this process runs the portable kernel.
    Narrowed(Box<[i8]>),
    /// Read from the unit's values on each run.
    Tensor(Ref),
}

impl Int8Weights {
    /// The `i8` values of an `i8` tensor (kept in `i32` storage).
    pub(super) fn narrow(t: &crate::tensor::Tensor) -> Result<Box<[i8]>, crate::diag::Diagnostic> {
        match t.data() {
            crate::tensor::Data::I32(a) if t.dtype() == DType::I8 => Ok(a.iter().map(|&v| v as i8).collect()),
            _ => Err(super::internal(format!("quantized weights of type {}", t.dtype()))),
        }
    }
}

/// One step of a prepared unit, in schedule order.
pub(super) enum Step {
    /// A compiled loop nest; `args` are its `loads` loads then its outputs;
    /// `kind` says what made `f` (`fused`: Cranelift, `adam update`: the
    /// native loop of module `adam`), for profiles.
    /// `fallible`: for a spec with ops that can fail, its record of
    /// failures, passed after the arguments (`codegen::fault`).
    Jit {
        code: Code,
        args: Vec<(Ref, usize)>,
        loads: usize,
        rows: usize,
        inner: usize,
        kind: &'static str,
        fallible: Option<Box<Fallible>>,
    },
    /// `dst = a @ b` (batched over leading dims) through `gemm`.
    /// `a_t`/`b_t`: the operand is stored transposed (a folded transpose's
    /// source; only without batch dims). `ordered`: on tfc's own product
    /// of one fixed summation order (module `ordered_gemm`: an exported
    /// function's, whose ahead-of-time library calls the same code).
    Gemm { a: Ref, b: Ref, a_t: bool, b_t: bool, dst: usize, batch: usize, m: usize, k: usize, n: usize, ordered: bool },
    /// `dst = a @ b` (batched over leading dims) of `bf16` operands in
    /// their two-byte storage (`Ref::Half`), summed in `f32` into `f32`
    /// scratch at `dst` (module `bf16_gemm`, on the tier module `isa`
    /// picks), rounded to bf16 there when `round`, else by a
    /// `Step::Convert` into the result's place. `a_t`/`b_t` as for `Gemm`.
    Bf16Gemm {
        a: Ref,
        b: Ref,
        a_t: bool,
        b_t: bool,
        dst: usize,
        batch: usize,
        m: usize,
        k: usize,
        n: usize,
        round: bool,
    },
    /// `dst = quant_matmul(x, w, scale)` (`Op::QuantMatMul`, `m` rows of
    /// `x` by `k`, `n` columns) on module `int8_gemm`, then `+ bias` (one
    /// value per column) and ReLU when `post` says so (the epilogue's own
    /// pass then goes away).
    /// `range`: the static input range (`f32[2]`) of a calibrated layer;
    /// `patches`: the rows are the im2col patches of `x`, an NHWC input of
    /// that shape (a quantized convolution).
    QuantGemm {
        x: Ref,
        patches: Option<(crate::ir::Patches, [usize; 4])>,
        w: Int8Weights,
        scale: Ref,
        range: Option<Ref>,
        dst: usize,
        m: usize,
        k: usize,
        n: usize,
        post: QuantPost,
    },
    /// A convolution (or one of its gradients) of `bf16` operands in their
    /// two-byte storage into `f32` scratch at `dst` (`Conv::run_bf16`: im2col
    /// and `bf16_gemm`); a `Step::Convert` rounds it into place.
    Bf16Conv { conv: Conv, a: Ref, b: Ref, dst: usize },
    /// `dst = kernel(srcs)` over `dtype` values: the interpreter's own
    /// generic loop over slices (module `generic`: matmuls, reductions,
    /// `argmax`, convolutions and poolings of the types without a faster
    /// kernel).
    Loop { dtype: DType, kernel: Loop, srcs: Vec<Ref>, dst: Ref },
    /// A convolution (or one of its gradients) on the direct kernels or
    /// through im2col and `gemm` (module `conv`).
    /// `post`: the epilogue it applies before storing (`conv::PostOps`).
    Conv { conv: Conv, a: Ref, b: Ref, dst: usize, post: ConvPost },
    /// Nodes evaluated by the reference interpreter.
    Interp(Vec<InterpNode>),
    /// A `scan`: its body, prepared once as a unit of its own, run once per
    /// step (module `scan_step`).
    Scan(Box<super::scan_step::ScanStep>),
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
    /// `dst = transpose(src, perm)` of a tensor of shape `shape` (`perm` in
    /// its essential form, module `permute`), its elements moved as words
    /// of the width of `dst`'s storage (`kernels::window::Word`).
    Transpose { src: Ref, dst: Ref, shape: Vec<usize>, perm: Permutation },
    /// `dst = slice | pad | concat(srcs)` (of `src_lens` elements), as block
    /// copies of words of the width of `dst`'s storage (`kernels::window`);
    /// `shape` is the result's, for the label.
    Window { srcs: Vec<Ref>, src_lens: Vec<usize>, dst: Ref, window: Copies, op: &'static str, shape: Vec<usize> },
    /// `dst = reshape(src)` of a value kept as a tensor (`Ref::Table`): a
    /// copy of its elements under the new shape.
    Reshape { src: Ref, dst: Ref, ty: TensorType },
    /// `dst = gather(params, ids, axis)` of params viewed as
    /// `[outer, n, inner]` around the axis, with integer ids of type `ids_ty`
    /// (`tensor::index_ops::gather_rows`, over words of the width of `dst`'s
    /// storage); an id out of range is an error at `span`.
    Gather { params: Ref, ids: Ref, ids_ty: TensorType, dst: Ref, dims: [usize; 3], axis: usize, span: Span },
    /// `dst = round(src)` to `dtype` (`f16` or `bf16`) over `len` elements:
    /// widening two-byte `src` into `f32` `dst`, or rounding `f32` `src`
    /// into two-byte `dst` or into `f32` `dst` (in place when they are the
    /// same), so that native `f32` kernels read and write half-precision
    /// values (`tensor`: what the interpreter rounds).
    Convert { src: Ref, dst: Ref, len: usize, dtype: DType },
    /// The epilogue of a bf16 product in one pass (module
    /// `half_epilogue`): the `f32` sums at `src` (`rows` of `n`) rounded to
    /// bf16, `+ bias` (one value per column), their `> 0` mask into
    /// `positive`, ReLU, `+0` where `keep_where` is false, into `unrounded`
    /// as `f32` and narrowed into the two-byte `dst` (either may be absent).
    Bf16Epilogue {
        src: usize,
        rows: usize,
        n: usize,
        bias: Option<Ref>,
        relu: bool,
        keep_where: Option<Ref>,
        dst: Option<Ref>,
        positive: Option<Ref>,
        unrounded: Option<Ref>,
    },
    /// `dst = scatter_add(ids, updates, axis, dim)`: `dtype` updates viewed as
    /// `[outer, count, inner]` added into `[outer, dim, inner]` (`count`:
    /// the elements of `ids_ty`)
    /// (`tensor::index_ops::scatter_add_rows`).
    ScatterAdd {
        dtype: DType,
        ids: Ref,
        ids_ty: TensorType,
        updates: Ref,
        dst: Ref,
        dims: [usize; 3],
        axis: usize,
        span: Span,
    },
    /// `dst = all_reduce_sum(src)` of `ty` (`f32` or `f64`, in the
    /// arena): `src` copied to `dst`, which `with` then sums over the
    /// processes in place (the identity without `with`: one process).
    /// Every all-reduce also writes `Place::Collectives`, so that they run
    /// in the order the lowering gave them, the same on every process.
    AllReduce { src: Ref, dst: Ref, ty: TensorType, with: Option<std::sync::Arc<dyn crate::backend::Collectives>> },
}

/// A convolution's post-ops, by where their operands live.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ConvPost {
    /// One value per output channel.
    pub(super) bias: Option<Ref>,
    pub(super) relu: bool,
    /// Laid out as the result (`conv::PostOps::keep_where_positive`).
    pub(super) keep_where_positive: Option<Ref>,
    /// The arena offset of the result's 2x2 max pool, written as well.
    pub(super) max_pool: Option<usize>,
    /// With `max_pool`, where in the unit's first-maximum buffer the pool's
    /// masks go (`conv::PostOps::first_max`), for its gradient to read.
    pub(super) first_max: Option<usize>,
    /// With `max_pool`: only the pool is stored (`conv::PostOps::pool_only`).
    pub(super) pool_only: bool,
    /// For a weight gradient: its output gradient `b` is a max pool's
    /// gradient written from recorded maxima, read instead from that
    /// gradient's pooled gradient and masks' offset
    /// (`conv::PostOps::grad_from_maxima`).
    pub(super) from_maxima: Option<(Ref, usize)>,
}

/// The epilogue a `Step::QuantGemm` applies as it stores.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct QuantPost {
    /// One value per column.
    pub(super) bias: Option<Ref>,
    pub(super) relu: bool,
}

impl Ref {
    /// For a value in the arena, its byte offset and bytes per element;
    /// `None` for a tensor (an input, a fixed value, a table entry).
    pub(super) fn in_arena(self) -> Option<(usize, usize)> {
        match self {
            Ref::Arena(off) => Some((4 * off, 4)),
            Ref::Mask(off) => Some((off, 1)),
            Ref::Half(off) => Some((off, 2)),
            Ref::Int(off) => Some((off, 4)),
            Ref::Wide(off) => Some((off, 8)),
            Ref::Input(_) | Ref::Fixed(_) | Ref::Table(_) => None,
        }
    }

    /// The place `n` elements further on, for a value in the arena (the
    /// row `t` of a tensor is `n = t · row length` on); `None` otherwise.
    pub(super) fn advanced(self, n: usize) -> Option<Ref> {
        Some(match self {
            Ref::Arena(off) => Ref::Arena(off + n),
            Ref::Mask(off) => Ref::Mask(off + n),
            Ref::Half(off) => Ref::Half(off + 2 * n),
            Ref::Int(off) => Ref::Int(off + 4 * n),
            Ref::Wide(off) => Ref::Wide(off + 8 * n),
            Ref::Input(_) | Ref::Fixed(_) | Ref::Table(_) => return None,
        })
    }
}

/// The place `len` elements of `r` occupy (none for values no step writes).
pub(super) fn place(r: Ref, len: usize) -> Option<Place> {
    match (r, r.in_arena()) {
        (_, Some((at, width))) => Some(Place::Bytes(at, at + width * len)),
        (Ref::Table(t), None) => Some(Place::Table(t)),
        _ => None,
    }
}

impl Step {
    /// The places this step reads and writes, and its rough cost (about a
    /// nanosecond per unit on one core).
    pub(super) fn access(&self) -> Access {
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
            Step::Gemm { a, b, dst, batch, m, k, n, .. } | Step::Bf16Gemm { a, b, dst, batch, m, k, n, .. } => {
                reads.extend(place(*a, batch * m * k).into_iter().chain(place(*b, batch * k * n)));
                writes.push(arena(*dst, batch * m * n));
                *cost = (batch * m * k * n / 50) as u64;
            }
            Step::QuantGemm { x, patches, w, scale, range, dst, m, k, n, post } => {
                let x_len = patches.map_or(m * k, |(_, shape)| shape.iter().product());
                reads.extend(place(*x, x_len).into_iter().chain(place(*scale, *n)));
                reads.extend(range.and_then(|r| place(r, 2)));
                reads.extend(post.bias.and_then(|b| place(b, *n)));
                if let Int8Weights::Tensor(w) = w {
                    reads.extend(place(*w, k * n));
                }
                writes.push(arena(*dst, m * n));
                *cost = (m * k * n / 200) as u64;
            }
            Step::Loop { kernel, srcs, dst, .. } => {
                reads.extend(srcs.iter().zip(kernel.operand_lens()).filter_map(|(&r, n)| place(r, n)));
                writes.extend(place(*dst, kernel.result_len()));
                *cost = kernel.cost();
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
            Step::Bf16Conv { conv, a, b, dst } => {
                let (na, nb, ny) = conv.sizes();
                reads.extend(place(*a, na).into_iter().chain(place(*b, nb)));
                writes.extend([arena(*dst, ny), Place::Cols]);
                *cost = (4 * (ny + conv.bf16_cols_len())) as u64;
            }
            Step::Scan(scan) => {
                reads.extend(scan.operands().iter().filter_map(|(r, ty)| place(*r, ty.numel())));
                let (dst, ty) = scan.result();
                writes.extend(place(dst, ty.numel()));
                *cost = scan.cost();
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
            Step::Window { srcs, src_lens, dst, window, .. } => {
                reads.extend(srcs.iter().zip(src_lens).filter_map(|(&r, &n)| place(r, n)));
                writes.extend(place(*dst, window.len));
                *cost = window.len as u64 / 4;
            }
            Step::Reshape { src, dst, ty } => {
                reads.extend(place(*src, ty.numel()));
                writes.extend(place(*dst, ty.numel()));
                *cost = ty.numel() as u64 / 4;
            }
            Step::Gather { params, ids, ids_ty, dst, dims: [outer, n, inner], .. } => {
                let count = &ids_ty.numel();
                reads.extend(place(*params, outer * n * inner).into_iter().chain(place(*ids, *count)));
                writes.extend(place(*dst, outer * count * inner));
                *cost = (outer * count * inner / 4) as u64;
            }
            Step::ScatterAdd { ids, ids_ty, updates, dst, dims: [outer, dim, inner], .. } => {
                let count = &ids_ty.numel();
                reads.extend(place(*updates, outer * count * inner).into_iter().chain(place(*ids, *count)));
                writes.extend(place(*dst, outer * dim * inner));
                *cost = (outer * (count + dim) * inner / 2) as u64;
            }
            Step::Convert { src, dst, len, .. } => {
                reads.extend(place(*src, *len));
                writes.extend(place(*dst, *len));
                *cost = (*len / 4) as u64;
            }
            Step::Bf16Epilogue { src, rows, n, bias, keep_where, dst, positive, unrounded, .. } => {
                let len = rows * n;
                reads.push(arena(*src, len));
                reads.extend(bias.and_then(|b| place(b, *n)).into_iter().chain(keep_where.and_then(|k| place(k, len))));
                writes.extend(dst.and_then(|d| place(d, len)).into_iter().chain(positive.and_then(|p| place(p, len))));
                writes.extend(unrounded.and_then(|u| place(u, len)));
                *cost = (len / 4) as u64;
            }
            Step::Transpose { src, dst, perm, .. } => {
                let n = perm.numel();
                reads.extend(place(*src, n));
                writes.extend(place(*dst, n));
                *cost = (n / 2) as u64;
            }
            Step::AllReduce { src, dst, ty, .. } => {
                reads.extend(place(*src, ty.numel()));
                writes.extend(place(*dst, ty.numel()).into_iter().chain([Place::Collectives]));
                *cost = ty.numel() as u64;
            }
        }
        acc
    }

    /// What the step computes, for profiles: its kind and sizes, then the
    /// ops of the kernel it comes from (`nodes`), e.g.
    /// `gemm 64x784 @ 784x256: matmul, broadcast_to, add, relu, gt`.
    pub(super) fn label(&self, g: &Graph, nodes: &[NodeId]) -> String {
        let dims = |d: &[usize]| d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("x");
        let what = match self {
            Step::Jit { rows, inner, kind, .. } => format!("{kind} {rows}x{inner}"),
            Step::Gemm { batch, m, k, n, a_t, b_t, ordered, .. } => {
                let kind = if *ordered { "ordered gemm" } else { "gemm" };
                gemm_label(kind, [*batch, *m, *k, *n], [*a_t, *b_t])
            }
            Step::Bf16Gemm { batch, m, k, n, a_t, b_t, .. } => {
                let kind = format!("bf16 gemm ({})", crate::backend::cpu::kernels::isa::active().name());
                gemm_label(&kind, [*batch, *m, *k, *n], [*a_t, *b_t])
            }
            Step::QuantGemm { m, k, n, post, patches, .. } => {
                let tier = crate::backend::cpu::kernels::int8_gemm::tier_name();
                let tier = if patches.is_some() { format!("{tier}, im2col") } else { tier.to_string() };
                let post = match (post.bias.is_some(), post.relu) {
                    (true, true) => ", bias and relu applied",
                    (true, false) => ", bias applied",
                    (false, true) => ", relu applied",
                    (false, false) => "",
                };
                format!("int8 gemm {m}x{k}x{n} ({tier}{post})")
            }
            Step::Bf16Conv { conv, .. } => {
                conv.label_with(&format!("{}, {}", conv.bf16_how(), crate::backend::cpu::kernels::isa::active().name()))
            }
            Step::Conv { conv, post, .. } => match (post.max_pool, post.pool_only, post.from_maxima) {
                (Some(_), false, _) => format!("{} and 2x2 max pool", conv.label()),
                (Some(_), true, _) => format!("{} and 2x2 max pool, only the pool stored", conv.label()),
                (None, _, Some(_)) => format!("{} from the recorded maxima", conv.label()),
                (None, _, None) => conv.label(),
            },
            Step::Interp(_) => "interpreted".to_string(),
            Step::Scan(scan) => scan.label(),
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
            Step::Transpose { shape, .. } => format!("transpose {}", dims(shape)),
            Step::Loop { dtype, kernel, .. } => kernel.label(*dtype),
            Step::Reshape { ty, .. } => format!("copy {ty} (reshape)"),
            Step::Convert { src: Ref::Half(_), len, dtype, .. } => format!("widen {dtype}[{len}] to f32"),
            Step::Convert { len, dtype, .. } => format!("round f32[{len}] to {dtype}"),
            Step::Bf16Epilogue { rows, n, bias, relu, keep_where, dst, positive, unrounded, .. } => {
                let parts = [
                    (bias.is_some(), "bias"),
                    (*relu, "relu"),
                    (positive.is_some(), "its mask"),
                    (keep_where.is_some(), "a mask"),
                    (dst.is_none(), "kept in f32"),
                    (dst.is_some() && unrounded.is_some(), "also kept in f32"),
                ];
                let parts: Vec<&str> = parts.iter().filter(|(on, _)| *on).map(|&(_, what)| what).collect();
                format!(
                    "bf16 epilogue {rows}x{n} (rounded, {})",
                    if parts.is_empty() { "narrowed".to_string() } else { parts.join(", ") }
                )
            }
            Step::Window { op, shape, .. } => format!("{op} {}", dims(shape)),
            Step::Gather { dims: [outer, n, inner], ids_ty, .. } => {
                format!("gather {} of {} rows", ids_ty.numel(), dims(&[*outer, *n, *inner]))
            }
            Step::ScatterAdd { dims: [outer, dim, inner], ids_ty, .. } => {
                format!("scatter_add {} rows into {}", ids_ty.numel(), dims(&[*outer, *dim, *inner]))
            }
            Step::AllReduce { ty, with: Some(_), .. } => format!("all-reduce {ty} over the processes"),
            Step::AllReduce { ty, with: None, .. } => format!("copy {ty} (an all-reduce in one process)"),
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

/// A matrix product's label: `gemm 64x784 @ 784x256`, `ᵀ` after an
/// operand read transposed, the batch before the shapes when there is one.
fn gemm_label(kind: &str, [batch, m, k, n]: [usize; 4], [a_t, b_t]: [bool; 2]) -> String {
    let t = |on: bool| if on { "ᵀ" } else { "" };
    let batch = if batch > 1 { format!("{batch} x ") } else { String::new() };
    format!("{kind} {batch}{m}x{k}{} @ {k}x{n}{}", t(a_t), t(b_t))
}
