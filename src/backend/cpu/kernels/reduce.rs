//! Native reductions (`sum`, `mean`, `prod`, `max`, `min` over any axes) of `f32`,
//! `f64`, `i32` and `i64` values for the JIT executor, bit-identical to the
//! reference interpreter.
//!
//! Contract: each output element accumulates its inputs in the input's
//! row-major order (the interpreter's order) with the interpreter's element
//! operations (`tensor::Elem`: integers wrap), `mean` divides the sum by the
//! count once (integers: floor division, an error over no elements),
//! `max`/`min` propagate NaN and start from the type's lowest / highest
//! value; so the results equal `tensor::reduce` bit for bit.
//!
//! Example: `reduce(Sum, &[1, 2, 3, 4, 5, 6], &[2, 3], &[true, false], &mut out)`
//! leaves `out = [5, 7, 9]`.

use crate::diag::Diagnostic;
use crate::ir::ReduceOp;
use crate::tensor::{reduce_combine as combine, reduce_identity, Elem};

/// Reduces `x` of `shape` over the dims where `reduced` is true into `out`
/// (the kept dims in row-major order); `x` holds `shape`'s elements and
/// `out` the kept dims'.
pub fn reduce<T: Elem>(
    op: ReduceOp,
    x: &[T],
    shape: &[usize],
    reduced: &[bool],
    out: &mut [T],
) -> Result<(), Diagnostic> {
    let kept: usize = shape.iter().zip(reduced).filter(|(_, &r)| !r).map(|(&n, _)| n).product();
    if reduced.len() != shape.len() || x.len() != shape.iter().product::<usize>() || out.len() != kept {
        return Err(Diagnostic::internal(format!("a reduction of {shape:?} into {} elements", out.len())));
    }
    let init = reduce_identity::<T>(op);
    out.fill(init);
    let count: usize = shape.iter().zip(reduced).filter(|(_, &r)| r).map(|(&n, _)| n).product();
    if x.is_empty() || shape.is_empty() {
        if let (Some(o), Some(&v)) = (out.first_mut(), x.first()) {
            *o = combine(op, init, v);
        }
        return finish(op, out, count);
    }
    let k = shape.len();
    // Leading dims summed, trailing dims kept (a bias gradient): column sums.
    let kept_from = reduced.iter().rposition(|&r| r).map_or(0, |d| d + 1);
    if matches!(op, ReduceOp::Sum | ReduceOp::Mean) && reduced[..kept_from].iter().all(|&r| r) {
        column_sums(x, out.len(), out);
        return finish(op, out, count);
    }
    // Only the last dim reduced (softmax's and layer norm's statistics).
    if last_axis_only(reduced) {
        match op {
            ReduceOp::Sum | ReduceOp::Mean => row_reductions(x, shape[k - 1], out, |a: T, v| a.add(v)),
            ReduceOp::Prod => row_reductions(x, shape[k - 1], out, |a: T, v| a.mul(v)),
            ReduceOp::Max => row_reductions(x, shape[k - 1], out, |a: T, v| a.max_nan(v)),
            ReduceOp::Min => row_reductions(x, shape[k - 1], out, |a: T, v| a.min_nan(v)),
        }
        return finish(op, out, count);
    }
    // The output stride of each input dim (0 where reduced), and the
    // odometer over the outer dims: on the stack up to rank 8, so that an
    // ahead-of-time library's call allocates nothing.
    let mut small = [0usize; 16];
    let mut large = Vec::new();
    let words: &mut [usize] = if k <= 8 {
        &mut small[..2 * k]
    } else {
        large.resize(2 * k, 0);
        &mut large
    };
    let (ostride, idx) = words.split_at_mut(k);
    let mut s = 1;
    for d in (0..k).rev() {
        if !reduced[d] {
            ostride[d] = s;
            s *= shape[d];
        }
    }
    let last = shape[k - 1];
    let rows = x.len() / last;
    let idx = &mut idx[..k - 1];
    let mut o = 0usize;
    for r in 0..rows {
        let row = &x[r * last..(r + 1) * last];
        if reduced[k - 1] {
            let mut acc = out[o];
            for &v in row {
                acc = combine(op, acc, v);
            }
            out[o] = acc;
        } else if matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
            // The same additions as `combine`, in a loop the compiler
            // vectorizes (a bias gradient sums rows of a batch this way).
            for (a, &v) in out[o..o + last].iter_mut().zip(row) {
                *a = a.add(v);
            }
        } else {
            for (a, &v) in out[o..o + last].iter_mut().zip(row) {
                *a = combine(op, *a, v);
            }
        }
        // Advance the odometer over the outer dims, keeping `o` in step.
        for d in (0..k - 1).rev() {
            idx[d] += 1;
            o += ostride[d];
            if idx[d] < shape[d] {
                break;
            }
            o -= ostride[d] * shape[d];
            idx[d] = 0;
        }
    }
    finish(op, out, count)
}

/// [`reduce`], on up to `threads` workers when only the last dim is
/// reduced and `x` is large: each worker reduces a contiguous range of
/// rows, every row in its own order, so the result is the same bits at
/// any thread count.
pub fn reduce_on_threads(
    op: ReduceOp,
    x: &[f32],
    shape: &[usize],
    reduced: &[bool],
    out: &mut [f32],
    threads: usize,
) -> Result<(), Diagnostic> {
    let k = shape.len();
    let rows_only = k >= 2 && reduced.len() == k && last_axis_only(reduced);
    let last = shape.last().copied().unwrap_or(0);
    if threads <= 1 || !rows_only || last == 0 || x.len() < crate::backend::cpu::threads::PARALLEL_MIN_ELEMENTS {
        return reduce(op, x, shape, reduced, out);
    }
    if x.len() != out.len() * last {
        return Err(Diagnostic::internal(format!("a reduction of {shape:?} into {} elements", out.len())));
    }
    use rayon::prelude::*;
    let per = out.len().div_ceil(threads);
    out.par_chunks_mut(per)
        .zip(x.par_chunks(per * last))
        .try_for_each(|(out, x)| reduce(op, x, &[out.len(), last], &[false, true], out))
}

/// Whether only the last of `reduced`'s dims is reduced (rows reduced
/// one by one).
fn last_axis_only(reduced: &[bool]) -> bool {
    matches!(reduced.split_last(), Some((true, leading)) if leading.iter().all(|&r| !r))
}

/// `out[r] = combine(… combine(out[r], x[r, 0]) …, x[r, last - 1])` for
/// each row `r` of `last` elements: every row in its own order (the
/// interpreter's), eight rows at a time so that their chains of dependent
/// operations overlap instead of each waiting on the last (one row alone
/// runs at one operation per add latency).
fn row_reductions<T: Elem>(x: &[T], last: usize, out: &mut [T], combine: impl Fn(T, T) -> T) {
    const ROWS: usize = 8;
    let mut rows = x.chunks_exact(last);
    let mut groups = out.chunks_exact_mut(ROWS);
    for group in groups.by_ref() {
        let row: [&[T]; ROWS] = std::array::from_fn(|_| rows.next().unwrap_or(&[]));
        let mut acc = [T::zero(); ROWS];
        acc.copy_from_slice(group);
        for i in 0..last {
            for (a, row) in acc.iter_mut().zip(&row) {
                *a = combine(*a, row[i]);
            }
        }
        group.copy_from_slice(&acc);
    }
    for (o, row) in groups.into_remainder().iter_mut().zip(rows) {
        *o = row.iter().fold(*o, |a, &v| combine(a, v));
    }
}

/// `out[j] += Σ_r x[r · width + j]` over the rows `r` in order (`out` is
/// `width` long): the interpreter's order, with a group of columns kept in
/// registers across all rows rather than in memory (each row's additions
/// are independent, so a group costs one addition latency per row).
fn column_sums<T: Elem>(x: &[T], width: usize, out: &mut [T]) {
    /// Columns summed together.
    const GROUP: usize = 32;
    fn group<T: Elem, const L: usize>(x: &[T], width: usize, c0: usize, out: &mut [T]) {
        let mut acc = [T::zero(); L];
        acc.copy_from_slice(&out[c0..c0 + L]);
        for row in x.chunks_exact(width) {
            for (a, &v) in acc.iter_mut().zip(&row[c0..c0 + L]) {
                *a = a.add(v);
            }
        }
        out[c0..c0 + L].copy_from_slice(&acc);
    }
    if width == 0 {
        return;
    }
    // Each group reads every row once, so the fewer groups the fewer
    // passes over `x`: 32 columns at a time, then 16, 8 and single ones.
    let whole = width / GROUP * GROUP;
    (0..whole).step_by(GROUP).for_each(|c0| group::<T, GROUP>(x, width, c0, out));
    let sixteens = whole + (width - whole) / 16 * 16;
    (whole..sixteens).step_by(16).for_each(|c0| group::<T, 16>(x, width, c0, out));
    let eights = sixteens + (width - sixteens) / 8 * 8;
    (sixteens..eights).step_by(8).for_each(|c0| group::<T, 8>(x, width, c0, out));
    (eights..width).for_each(|c0| group::<T, 1>(x, width, c0, out));
}

/// A mean's division of each sum by the `count` elements it adds.
fn finish<T: Elem>(op: ReduceOp, out: &mut [T], count: usize) -> Result<(), Diagnostic> {
    if op == ReduceOp::Mean {
        for o in out {
            *o = o.div_count(count).ok_or_else(|| crate::tensor::mean_error(count, std::any::type_name::<T>()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Op, TensorType};
    use crate::tensor::{eval_node, Tensor};

    /// Every op over every subset of axes of a few shapes, against the
    /// interpreter, bit for bit (NaN included), in f32, f64, i32 and i64.
    #[test]
    fn native_reductions_equal_the_interpreter_bit_for_bit() {
        // [3, 61] and [2, 3, 41]: leading-axes sums over rows wide enough for
        // the column groups of 32, 16 and 8 and the single columns after them.
        let shapes = [
            vec![],
            vec![7],
            vec![3, 5],
            vec![2, 3, 4],
            vec![4, 1, 6],
            vec![0, 3],
            vec![2, 0],
            vec![3, 61],
            vec![2, 3, 41],
            // Last-axis reductions in groups of eight rows and a remainder.
            vec![11, 5],
            vec![2, 9, 3],
        ];
        for shape in shapes {
            let n: usize = shape.iter().product();
            let mut x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 23) as f32 * 0.37 - 3.1).collect();
            if n > 4 {
                x[4] = f32::NAN;
            }
            let t = Tensor::from_vec(DType::F32, &shape, x.clone()).unwrap();
            for mask in 0..(1usize << shape.len()) {
                let axes: Vec<usize> = (0..shape.len()).filter(|d| mask & (1 << d) != 0).collect();
                let reduced: Vec<bool> = (0..shape.len()).map(|d| mask & (1 << d) != 0).collect();
                let out_shape: Vec<usize> = shape.iter().zip(&reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).collect();
                for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
                    let ty = TensorType::new(DType::F32, out_shape.clone());
                    let want = eval_node(&Op::Reduce { op, axes: axes.clone(), keepdims: false }, &[&t], &ty).unwrap();
                    let mut got = vec![0.0; ty.numel()];
                    reduce(op, &x, &shape, &reduced, &mut got).unwrap();
                    let want: Vec<u32> = want.to_f64_vec().iter().map(|&v| (v as f32).to_bits()).collect();
                    let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                    let same = want
                        .iter()
                        .zip(&got)
                        .all(|(a, b)| a == b || (f32::from_bits(*a).is_nan() && f32::from_bits(*b).is_nan()));
                    assert!(same && want.len() == got.len(), "{op:?} over {axes:?} of {shape:?}");
                    // The same in f64.
                    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v) * 1.000_000_1).collect();
                    let t64 = Tensor::from_vec(DType::F64, &shape, x64.clone()).unwrap();
                    let ty = TensorType::new(DType::F64, out_shape.clone());
                    let want =
                        eval_node(&Op::Reduce { op, axes: axes.clone(), keepdims: false }, &[&t64], &ty).unwrap();
                    let mut got = vec![0.0f64; ty.numel()];
                    reduce(op, &x64, &shape, &reduced, &mut got).unwrap();
                    let same = want
                        .to_f64_vec()
                        .iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                    assert!(same, "f64 {op:?} over {axes:?} of {shape:?}");
                    // And in i32 and i64, with values large enough that sums wrap.
                    let x32: Vec<i32> = (0..n).map(|i| (i as i32 * 7919 % 23 - 11).wrapping_mul(0x0fff_ffff)).collect();
                    let t32 = Tensor::from_vec(DType::I32, &shape, x32.clone()).unwrap();
                    let x64: Vec<i64> = x32.iter().map(|&v| i64::from(v) << 31).collect();
                    let t64 = Tensor::from_vec(DType::I64, &shape, x64.clone()).unwrap();
                    let reduce_op = Op::Reduce { op, axes: axes.clone(), keepdims: false };
                    let ty = TensorType::new(DType::I32, out_shape.clone());
                    let want = eval_node(&reduce_op, &[&t32], &ty).map(|t| t.to_i64_vec());
                    let mut got = vec![0i32; ty.numel()];
                    let got = reduce(op, &x32, &shape, &reduced, &mut got)
                        .map(|()| Some(got.iter().map(|&v| i64::from(v)).collect::<Vec<_>>()));
                    assert_eq!(got.ok(), want.ok(), "i32 {op:?} over {axes:?} of {shape:?}");
                    let ty = TensorType::new(DType::I64, out_shape.clone());
                    let want = eval_node(&reduce_op, &[&t64], &ty).map(|t| t.to_i64_vec());
                    let mut got = vec![0i64; ty.numel()];
                    let got = reduce(op, &x64, &shape, &reduced, &mut got).map(|()| Some(got));
                    assert_eq!(got.ok(), want.ok(), "i64 {op:?} over {axes:?} of {shape:?}");
                }
            }
        }
    }

    /// An integer mean over no elements fails, as in the interpreter.
    /// Rows split over workers: the same bits as one worker, for every op.
    #[test]
    fn last_axis_reductions_on_threads_equal_one_thread() {
        let shape = [37, 600];
        let mut x: Vec<f32> = (0..37 * 600).map(|i| ((i * 7919) % 101) as f32 * 0.013 - 0.6).collect();
        x[1234] = f32::NAN;
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
            let mut one = vec![0.0; 37];
            reduce(op, &x, &shape, &[false, true], &mut one).unwrap();
            for threads in [2, 3, 8] {
                let mut many = vec![0.0; 37];
                reduce_on_threads(op, &x, &shape, &[false, true], &mut many, threads).unwrap();
                let same = one.iter().zip(&many).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{op:?} on {threads} threads");
            }
        }
    }

    #[test]
    fn an_integer_mean_over_no_elements_is_an_error() {
        let mut out = [0i32; 3];
        let e = reduce(ReduceOp::Mean, &[], &[0, 3], &[true, false], &mut out).unwrap_err();
        assert!(e.message.contains("mean over 0 elements of i32"), "{}", e.message);
    }
}
