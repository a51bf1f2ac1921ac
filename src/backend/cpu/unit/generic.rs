//! Native steps that run the interpreter's own generic loops over slices of
//! a unit's storage (`Step::Loop`): matrix products, reductions, `argmax`,
//! convolutions and their two gradients, poolings and their gradients, for
//! the element types the CPU backend has no faster kernel for (`i32`,
//! `i64`, `f64`, and `bool` products, convolutions and max pools, which are
//! or-of-ands and ors; and `argmax`, `cumsum` and `argsort` of every type).
//!
//! Contract: [`Loop::run`] reads its operands and writes its result as
//! slices of the value's element type and calls the slice function the
//! interpreter itself calls for that op (`tensor::matmul_into`,
//! `conv2d_into`, `pool_slices`, …, and the reductions of
//! `kernels::reduce`, which equal `tensor::reduce` bit for bit), so every
//! result has the interpreter's bits. [`Loop::operand_lens`] and
//! [`Loop::result_len`] are the elements it reads of each operand and
//! writes, which `Step::access` reports to the schedule.
//!
//! Example: `i32[8, 8] @ i32[8, 8]` inside a `map` is
//! `Step::Loop { dtype: I32, kernel: Loop::MatMul([1, 8, 8, 8]), srcs: [a, b], dst: Ref::Int(..) }`,
//! which runs `tensor::matmul_into::<i32>` (wrapping, as the interpreter).

use super::internal;
use super::mem::{Mem, Stored};
use super::step::Ref;
use crate::diag::Diagnostic;
use crate::ir::{DType, ReduceOp};
use crate::tensor::{ConvParams, Elem, PoolParams};

/// Which of a convolution's loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConvPass {
    /// `conv2d(x, w)`.
    Forward,
    /// `conv2d_grad_input(gy, w)`.
    GradInput,
    /// `conv2d_grad_filter(x, gy)`.
    GradFilter,
}

/// A kernel that runs the interpreter's generic loop (see the module docs).
#[derive(Clone, Debug)]
pub(super) enum Loop {
    /// `a @ b` of `[batch, m, k, n]` matrices.
    MatMul([usize; 4]),
    /// A reduction of `shape` over the `reduced` dims.
    Reduce { op: ReduceOp, shape: Vec<usize>, reduced: Vec<bool> },
    /// `argmax` of `[outer, n, inner]` along `n`, into `i32`s.
    ArgMax([usize; 3]),
    /// Running sums of `[outer, n, inner]` along `n`.
    CumSum { lanes: [usize; 3], reverse: bool },
    /// The sorting permutation of `[outer, n, inner]` along `n`, into `i32`s.
    ArgSort { lanes: [usize; 3], descending: bool },
    /// A convolution pass over the forward `[x, w, y]` shapes; its operands
    /// are the pass's (`x, w`; `gy, w`; `x, gy`).
    Conv { pass: ConvPass, params: ConvParams, shapes: [[usize; 4]; 3] },
    /// Pooling `x` of `xs` into `ys`, or with `grad`, its gradient from
    /// `x` and `gy` (into `xs`'s elements).
    Pool { params: PoolParams, xs: Vec<usize>, ys: Vec<usize>, grad: bool },
}

/// `$body` with `$T` the element type native loops compute `dtype` in:
/// `f32` for the float types kept as `f32`s (half-precision values widened,
/// module `lower`), else the type itself; `bool` has no arithmetic.
macro_rules! typed {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::tensor::with_dtype!($dtype, $T => $body, bool => {
            Err($crate::backend::cpu::unit::internal("a native loop over bool values"))
        })
    };
}
pub(super) use typed;

impl Loop {
    /// The elements read of each operand, in operand order.
    pub(super) fn operand_lens(&self) -> Vec<usize> {
        let n = |s: &[usize]| s.iter().product::<usize>();
        match self {
            Loop::MatMul([batch, m, k, n]) => vec![batch * m * k, batch * k * n],
            Loop::Reduce { shape, .. } => vec![n(shape)],
            Loop::ArgMax([outer, len, inner])
            | Loop::CumSum { lanes: [outer, len, inner], .. }
            | Loop::ArgSort { lanes: [outer, len, inner], .. } => vec![outer * len * inner],
            Loop::Conv { pass, shapes: [x, w, y], .. } => match pass {
                ConvPass::Forward => vec![n(x), n(w)],
                ConvPass::GradInput => vec![n(y), n(w)],
                ConvPass::GradFilter => vec![n(x), n(y)],
            },
            Loop::Pool { xs, grad: false, .. } => vec![n(xs)],
            Loop::Pool { xs, ys, grad: true, .. } => vec![n(xs), n(ys)],
        }
    }

    /// The elements of the result.
    pub(super) fn result_len(&self) -> usize {
        let n = |s: &[usize]| s.iter().product::<usize>();
        match self {
            Loop::MatMul([batch, m, _, n]) => batch * m * n,
            Loop::Reduce { shape, reduced, .. } => {
                shape.iter().zip(reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).product()
            }
            Loop::ArgMax([outer, _, inner]) => outer * inner,
            Loop::CumSum { lanes, .. } | Loop::ArgSort { lanes, .. } => lanes.iter().product(),
            Loop::Conv { pass, shapes: [x, w, y], .. } => match pass {
                ConvPass::Forward => n(y),
                ConvPass::GradInput => n(x),
                ConvPass::GradFilter => n(w),
            },
            Loop::Pool { xs, ys, grad, .. } => n(if *grad { xs } else { ys }),
        }
    }

    /// The step's rough cost (about a nanosecond per unit on one core).
    pub(super) fn cost(&self) -> u64 {
        let work = match self {
            Loop::MatMul([batch, m, k, n]) => batch * m * k * n,
            Loop::Conv { shapes: [_, w, y], .. } => y.iter().product::<usize>() * w[0] * w[1] * w[2],
            Loop::Pool { params, xs, ys, .. } => {
                xs.iter().product::<usize>() + ys.iter().product::<usize>() * params.size[0] * params.size[1]
            }
            Loop::Reduce { .. } | Loop::ArgMax(_) | Loop::CumSum { .. } => self.operand_lens()[0],
            // A comparison sort: about n log n comparisons per lane.
            Loop::ArgSort { lanes: [outer, n, inner], .. } => {
                outer * inner * n * (usize::BITS - n.leading_zeros()) as usize
            }
        };
        work as u64
    }

    /// What the loop computes, for profiles (`dtype` is its element type).
    pub(super) fn label(&self, dtype: DType) -> String {
        let dims = |d: &[usize]| d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("x");
        match self {
            Loop::MatMul([batch, m, k, n]) => format!("{dtype} matmul {batch} x {m}x{k} @ {k}x{n}"),
            Loop::Reduce { op, shape, reduced } => {
                let axes: Vec<usize> = (0..shape.len()).filter(|&d| reduced[d]).collect();
                format!("{dtype} reduce {op:?} {} over {axes:?}", dims(shape))
            }
            Loop::ArgMax(lanes) => format!("{dtype} argmax {} along axis 1", dims(lanes)),
            Loop::CumSum { lanes, reverse } => {
                format!("{dtype} cumsum {} along axis 1{}", dims(lanes), if *reverse { " reversed" } else { "" })
            }
            Loop::ArgSort { lanes, descending } => {
                let order = if *descending { "descending" } else { "ascending" };
                format!("{dtype} argsort {} along axis 1, {order}", dims(lanes))
            }
            Loop::Conv { pass, shapes: [x, w, _], .. } => {
                let what = match pass {
                    ConvPass::Forward => "conv2d",
                    ConvPass::GradInput => "conv2d_grad_input",
                    ConvPass::GradFilter => "conv2d_grad_filter",
                };
                format!("{dtype} {what} {} * {}", dims(x), dims(w))
            }
            Loop::Pool { params, xs, grad, .. } => {
                format!("{dtype} {:?} pool{} {}", params.kind, if *grad { " grad" } else { "" }, dims(xs))
            }
        }
    }

    /// Runs the loop over `dtype` values: operands `srcs`, result `dst`.
    ///
    /// # Safety
    /// Nothing else writes `srcs` or touches `dst` meanwhile (the
    /// schedule's contract).
    pub(super) unsafe fn run(&self, mem: Mem, dtype: DType, srcs: &[Ref], dst: Ref) -> Result<(), Diagnostic> {
        if dtype == DType::Bool {
            // SAFETY: the caller's contract.
            return unsafe { self.run_masks(mem, srcs, dst) };
        }
        // SAFETY: the caller's contract.
        typed!(dtype, T => unsafe { self.run_as::<T>(mem, dtype, srcs, dst) })
    }

    /// `run` with the element type `T`.
    ///
    /// # Safety
    /// As for `run`.
    unsafe fn run_as<T: Elem + Stored>(
        &self,
        mem: Mem,
        dtype: DType,
        srcs: &[Ref],
        dst: Ref,
    ) -> Result<(), Diagnostic> {
        // SAFETY (operands and result): the caller's contract.
        let ins = unsafe { self.operands::<T>(mem, srcs)? };
        let len = self.result_len();
        match self {
            Loop::ArgMax(lanes) => {
                // SAFETY: the caller's contract.
                let out = unsafe { mem.elems_out::<i32>(dst, len)? };
                crate::tensor::argmax_lanes(ins[0], *lanes, out);
                return Ok(());
            }
            Loop::ArgSort { lanes, descending } => {
                // SAFETY: the caller's contract.
                let out = unsafe { mem.elems_out::<i32>(dst, len)? };
                crate::tensor::along::argsort_lanes(ins[0], *lanes, *descending, out);
                return Ok(());
            }
            _ => {}
        }
        // SAFETY: the caller's contract.
        self.compute(dtype, &ins, unsafe { mem.elems_out::<T>(dst, len)? })
    }

    /// `run` over `bool` values. The arena holds them as bytes, any nonzero
    /// byte true (as `mem::read` reads them), so they are copied into
    /// `bool`s, which must be 0 or 1, and the result is stored back as 0/1.
    ///
    /// # Safety
    /// As for `run`.
    unsafe fn run_masks(&self, mem: Mem, srcs: &[Ref], dst: Ref) -> Result<(), Diagnostic> {
        // SAFETY (operands and result): the caller's contract.
        let bytes = unsafe { self.operands::<u8>(mem, srcs)? };
        let masks: Vec<Vec<bool>> = bytes.iter().map(|s| s.iter().map(|&b| b != 0).collect()).collect();
        let mut out = vec![false; self.result_len()];
        self.compute(DType::Bool, &masks.iter().map(Vec::as_slice).collect::<Vec<_>>(), &mut out)?;
        // SAFETY: the caller's contract.
        let dst = unsafe { mem.elems_out::<u8>(dst, out.len())? };
        dst.iter_mut().zip(out).for_each(|(d, b)| *d = u8::from(b));
        Ok(())
    }

    /// The operand slices, as `T`s, checked against `operand_lens`.
    ///
    /// # Safety
    /// As for `run`.
    unsafe fn operands<'a, T: Stored>(&self, mem: Mem<'a>, srcs: &[Ref]) -> Result<Vec<&'a [T]>, Diagnostic> {
        let lens = self.operand_lens();
        if srcs.len() != lens.len() {
            return Err(internal(format!("a native loop of {} operands given {}", lens.len(), srcs.len())));
        }
        // SAFETY: the caller's contract.
        srcs.iter().zip(&lens).map(|(&r, &n)| unsafe { mem.elems::<T>(r, n) }).collect()
    }

    /// The loop itself over operand slices `ins`, writing `out` (all but
    /// `argmax`, whose result is `i32`s whatever its operand's type).
    fn compute<T: Elem>(&self, dtype: DType, ins: &[&[T]], out: &mut [T]) -> Result<(), Diagnostic> {
        match self {
            Loop::ArgMax(_) | Loop::ArgSort { .. } => {
                return Err(internal("an index result computed into its operand's type"))
            }
            Loop::CumSum { lanes, reverse } => crate::tensor::along::cumsum_lanes(ins[0], *lanes, *reverse, out),
            Loop::MatMul(dims) => {
                out.fill(T::zero());
                crate::tensor::matmul_into(ins[0], ins[1], out, *dims);
            }
            Loop::Reduce { op, shape, reduced } => {
                crate::backend::cpu::kernels::reduce::reduce(*op, ins[0], shape, reduced, out)?
            }
            Loop::Conv { pass, params, shapes } => {
                let (shapes, (a, b), p) = (shapes.each_ref().map(|s| s.as_slice()), (ins[0], ins[1]), *params);
                match pass {
                    ConvPass::Forward => crate::tensor::conv2d_into(a, b, shapes, p, out)?,
                    ConvPass::GradInput => crate::tensor::conv2d_grad_input_into(a, b, shapes, p, out)?,
                    ConvPass::GradFilter => crate::tensor::conv2d_grad_filter_into(a, b, shapes, p, out)?,
                }
            }
            Loop::Pool { params, xs, ys, grad: false } => crate::tensor::pool_slices(ins[0], xs, ys, *params, out)
                .map_err(|e| e.diagnostic("avg_pool2d", dtype))?,
            Loop::Pool { params, xs, ys, grad: true } => {
                crate::tensor::pool_grad_slices(ins[0], ins[1], xs, ys, *params, out)
                    .map_err(|e| e.diagnostic("avg_pool2d_grad", dtype))?
            }
        }
        Ok(())
    }
}
