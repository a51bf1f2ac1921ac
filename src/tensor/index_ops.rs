//! Ops that pick elements by index: slice, pad, gather, scatter_add and one_hot.
//!
//! Contract:
//! - `slice`: output element `k` of dim `d` is input element
//!   `start[d] + k·step[d]`; `step` may be negative (reversal).
//! - `pad`: `low[d]` copies of `value` before and `high[d]` after dim `d`
//!   (the value is converted to the dtype with cast rules).
//! - `gather(params, indices, axis)`: `out[o.., i.., r..] = params[o.., indices[i..], r..]`
//!   (TensorFlow `gather`, NumPy `take`). Every index must lie in
//!   `[0, size)`; a negative or too-large index is a runtime error (E0402),
//!   as on TensorFlow's CPU — no wrap-around.
//! - `scatter_add(indices, updates, axis, dim)`: the adjoint of `gather`:
//!   `out[o.., indices[i..], r..] += updates[o.., i.., r..]` into zeros with
//!   `dim` elements along `axis`; repeated indices accumulate (in row-major
//!   index order) and an index outside `[0, dim)` is a runtime error (E0402).
//! - `one_hot`: an index outside `[0, depth)` gives a row of zeros
//!   (TensorFlow `one_hot`).
//!
//! Example: `slice(f32[5] [0, 1, 2, 3, 4], start [4], step [-2], len [3])` is `f32[3] [4, 2, 0]`.

use super::value::{array, array_from, flat, runtime, scalar_for, strides, unravel, Data, Elem, Tensor};
use crate::diag::Diagnostic;
use crate::ir::DType;

/// The strided selection of `x` (see the module doc).
pub fn slice(x: &Tensor, start: &[usize], step: &[i64], len: &[usize]) -> Result<Data, Diagnostic> {
    let shape = x.shape().to_vec();
    let rank = shape.len();
    if start.len() != rank || step.len() != rank || len.len() != rank {
        return Err(Diagnostic::internal("interpreter: slice attributes do not match the rank"));
    }
    let in_strides = strides(&shape);
    let count: usize = len.iter().product();
    // The input position of every output element, checked against the bounds.
    let mut positions = Vec::with_capacity(count);
    for o in 0..count {
        let mut at = 0;
        for (d, k) in unravel(o, len).into_iter().enumerate() {
            let i = start[d] as i64 + k as i64 * step[d];
            if i < 0 || i >= shape[d] as i64 {
                return Err(Diagnostic::internal(format!("interpreter: slice index {i} outside dim {d} of {shape:?}")));
            }
            at += i as usize * in_strides[d];
        }
        positions.push(at);
    }
    with_elem!(x.data(), T => {
        let values = flat(array::<T>(x)?);
        Ok(T::wrap(array_from(len, positions.iter().map(|&p| values[p]).collect())?))
    })
}

/// `x` padded with `value` (see the module doc).
pub fn pad(x: &Tensor, low: &[usize], high: &[usize], value: f64) -> Result<Data, Diagnostic> {
    let shape = x.shape().to_vec();
    if low.len() != shape.len() || high.len() != shape.len() {
        return Err(Diagnostic::internal("interpreter: pad widths do not match the rank"));
    }
    let out_shape: Vec<usize> = shape.iter().zip(low.iter().zip(high)).map(|(n, (l, h))| n + l + h).collect();
    let in_strides = strides(&shape);
    let dtype = x.dtype();
    with_elem!(x.data(), T => {
        let values = flat(array::<T>(x)?);
        let fill: T = scalar_for(value, dtype);
        let count: usize = out_shape.iter().product();
        let mut out = Vec::with_capacity(count);
        for o in 0..count {
            let idx = unravel(o, &out_shape);
            // The input position, or `None` if this output element lies in the padding.
            let inside = idx.iter().enumerate().try_fold(0, |at, (d, &j)| {
                let i = j.checked_sub(low[d]).filter(|&i| i < shape[d])?;
                Some(at + i * in_strides[d])
            });
            out.push(inside.map_or(fill, |p| values[p]));
        }
        Ok(T::wrap(array_from(&out_shape, out)?))
    })
}

/// `params` indexed by `indices` along `axis` (see the module doc).
pub fn gather(params: &Tensor, indices: &Tensor, axis: usize) -> Result<Data, Diagnostic> {
    let p_shape = params.shape().to_vec();
    if axis >= p_shape.len() {
        return Err(Diagnostic::internal(format!("interpreter: gather axis {axis} of {p_shape:?}")));
    }
    let idx = indices
        .to_i64_vec()
        .ok_or_else(|| Diagnostic::internal(format!("interpreter: gather indices of dtype {}", indices.dtype())))?;
    let n = p_shape[axis];
    check_indices(&idx, indices, axis, n, "gather")?;
    let outer: usize = p_shape[..axis].iter().product();
    let inner: usize = p_shape[axis + 1..].iter().product();
    let mut out_shape = p_shape[..axis].to_vec();
    out_shape.extend_from_slice(indices.shape());
    out_shape.extend_from_slice(&p_shape[axis + 1..]);
    with_elem!(params.data(), T => {
        let values = flat(array::<T>(params)?);
        let mut out = vec![T::zero(); outer * idx.len() * inner];
        gather_rows(&values, &idx, [outer, n, inner], &mut out);
        Ok(T::wrap(array_from(&out_shape, out)?))
    })
}

/// The loops of `gather` over flat data viewed as `[outer, n, inner]`:
/// `out[o, p, ..] = values[o, idx[p], ..]`. The indices must be in range
/// (`check_indices`). Shared with the CPU backend's native gather.
pub fn gather_rows<T: Copy>(values: &[T], idx: &[i64], [outer, n, inner]: [usize; 3], out: &mut [T]) {
    let mut at = 0;
    for o in 0..outer {
        for &i in idx {
            let base = (o * n + i as usize) * inner;
            out[at..at + inner].copy_from_slice(&values[base..base + inner]);
            at += inner;
        }
    }
}

/// The loops of `scatter_add` over flat updates viewed as `[outer,
/// idx.len(), inner]` into `out` of `[outer, dim, inner]`: zeros, then
/// every update row added at its index, in index order (so the sums are
/// the same at every run). Shared with the CPU backend's native scatter.
pub fn scatter_add_rows<T: Elem>(values: &[T], idx: &[i64], [outer, dim, inner]: [usize; 3], out: &mut [T]) {
    out.fill(T::zero());
    for o in 0..outer {
        for (p, &i) in idx.iter().enumerate() {
            let (to, from) = ((o * dim + i as usize) * inner, (o * idx.len() + p) * inner);
            for k in 0..inner {
                out[to + k] = out[to + k].add(values[from + k]);
            }
        }
    }
}

/// The adjoint of `gather` along `axis` (see the module doc): zeros of
/// shape `updates.shape[..axis] ++ [dim] ++ updates.shape[axis + indices.rank..]`,
/// then every update slice added at its index.
pub fn scatter_add(indices: &Tensor, updates: &Tensor, axis: usize, dim: usize) -> Result<Data, Diagnostic> {
    let (i_shape, u_shape) = (indices.shape(), updates.shape());
    let ir = i_shape.len();
    if u_shape.len() < axis + ir || u_shape[axis..axis + ir] != *i_shape {
        return Err(Diagnostic::internal(format!(
            "interpreter: scatter_add of updates {u_shape:?} at axis {axis} with indices {i_shape:?}"
        )));
    }
    let idx = indices.to_i64_vec().ok_or_else(|| {
        Diagnostic::internal(format!("interpreter: scatter_add indices of dtype {}", indices.dtype()))
    })?;
    check_indices(&idx, indices, axis, dim, "scatter_add")?;
    let outer: usize = u_shape[..axis].iter().product();
    let inner: usize = u_shape[axis + ir..].iter().product();
    let mut out_shape = u_shape[..axis].to_vec();
    out_shape.push(dim);
    out_shape.extend_from_slice(&u_shape[axis + ir..]);
    with_elem!(updates.data(), T => {
        let values = flat(array::<T>(updates)?);
        let mut out = vec![T::zero(); outer * dim * inner];
        scatter_add_rows(&values, &idx, [outer, dim, inner], &mut out);
        Ok(T::wrap(array_from(&out_shape, out)?))
    })
}

/// A runtime error (E0402) for the first index outside `[0, n)`.
pub fn check_indices(idx: &[i64], indices: &Tensor, axis: usize, n: usize, op: &str) -> Result<(), Diagnostic> {
    for (j, &i) in idx.iter().enumerate() {
        if i < 0 || i >= n as i64 {
            let at = unravel(j, indices.shape());
            return Err(runtime(format!(
                "{op} index {i} is out of range for axis {axis} of size {n} (at indices{at:?} of {})",
                indices.ty()
            ))
            .help(format!("valid indices along axis {axis} are 0 to {}", n as i64 - 1)));
        }
    }
    Ok(())
}

/// One-hot rows of `depth` elements of `dtype` for integer `indices`.
pub fn one_hot(indices: &Tensor, depth: usize, dtype: DType) -> Result<Data, Diagnostic> {
    let idx = indices
        .to_i64_vec()
        .ok_or_else(|| Diagnostic::internal(format!("interpreter: one_hot labels of dtype {}", indices.dtype())))?;
    let mut out_shape = indices.shape().to_vec();
    out_shape.push(depth);
    with_dtype!(dtype, T => {
        let mut out = vec![T::zero(); idx.len() * depth];
        for (j, &i) in idx.iter().enumerate() {
            if i >= 0 && (i as u64) < depth as u64 {
                out[j * depth + i as usize] = T::one();
            }
        }
        Ok(T::wrap(array_from(&out_shape, out)?))
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_near, dot, floats, ints, normal, run, try_run};
    use crate::diag::Code;
    use crate::ir::{DType, Op};

    #[test]
    fn slices_with_positive_and_negative_steps() {
        let x = floats(DType::F32, &[5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
        // NumPy: x[4::-2] == [4, 2, 0]; x[1:4] == [1, 2, 3].
        let y = run(Op::Slice { start: vec![4], step: vec![-2], len: vec![3] }, &[&x]);
        assert_eq!(y.to_f64_vec(), vec![4.0, 2.0, 0.0]);
        let y = run(Op::Slice { start: vec![1], step: vec![1], len: vec![3] }, &[&x]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 2.0, 3.0]);
        // m = arange(12).reshape(3, 4); m[::-1, 1::2] == [[9, 11], [5, 7], [1, 3]].
        let m = ints(DType::I32, &[3, 4], &(0..12).collect::<Vec<_>>());
        let y = run(Op::Slice { start: vec![2, 1], step: vec![-1, 2], len: vec![3, 2] }, &[&m]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[3, 2][..], vec![9.0, 11.0, 5.0, 7.0, 1.0, 3.0]));
    }

    #[test]
    fn pads_with_a_value() {
        // NumPy: np.pad([[1, 2], [3, 4]], ((1, 0), (0, 2)), constant_values=9).
        let x = floats(DType::F32, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let y = run(Op::Pad { low: vec![1, 0], high: vec![0, 2], value: 9.0 }, &[&x]);
        assert_eq!(y.shape(), &[3, 4]);
        assert_eq!(y.to_f64_vec(), vec![9.0, 9.0, 9.0, 9.0, 1.0, 2.0, 9.0, 9.0, 3.0, 4.0, 9.0, 9.0]);
    }

    #[test]
    fn gathers_along_axis_zero_and_one() {
        let p = floats(DType::F32, &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        // NumPy: np.take(p, [[2, 0]], axis=0) == [[[5, 6], [1, 2]]].
        let i = ints(DType::I32, &[1, 2], &[2, 0]);
        let y = run(Op::Gather { axis: 0 }, &[&p, &i]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[1, 2, 2][..], vec![5.0, 6.0, 1.0, 2.0]));
        // np.take(p, [1, 1, 0], axis=1) == [[2, 2, 1], [4, 4, 3], [6, 6, 5]].
        let i = ints(DType::I64, &[3], &[1, 1, 0]);
        let y = run(Op::Gather { axis: 1 }, &[&p, &i]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[3, 3][..], vec![2.0, 2.0, 1.0, 4.0, 4.0, 3.0, 6.0, 6.0, 5.0]));
    }

    #[test]
    fn gather_out_of_range_is_a_runtime_error() {
        let p = floats(DType::F32, &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        for bad in [3, -1] {
            let i = ints(DType::I32, &[2], &[0, bad]);
            let e = try_run(Op::Gather { axis: 0 }, &[&p, &i]).unwrap_err();
            assert_eq!(e.code, Code::Runtime);
            assert!(e.message.contains(&format!("index {bad}")), "{}", e.message);
            assert!(e.message.contains("size 3"), "{}", e.message);
        }
    }

    #[test]
    fn one_hot_rows_ignore_out_of_range_labels() {
        // TensorFlow: tf.one_hot([0, 2, -1, 3], 3) == [[1,0,0], [0,0,1], [0,0,0], [0,0,0]].
        let i = ints(DType::I32, &[4], &[0, 2, -1, 3]);
        let y = run(Op::OneHot { depth: 3, dtype: DType::F32 }, &[&i]);
        assert_eq!(y.shape(), &[4, 3]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let y = run(Op::OneHot { depth: 2, dtype: DType::Bool }, &[&ints(DType::I64, &[1], &[1])]);
        assert_eq!((y.dtype(), y.to_f64_vec()), (DType::Bool, vec![0.0, 1.0]));
    }

    #[test]
    fn scatter_add_accumulates_repeated_indices() {
        // Rows of [[1, 2], [3, 4], [5, 6]] go to rows 2, 0, 2 of zeros[3, 2].
        let i = ints(DType::I32, &[3], &[2, 0, 2]);
        let u = floats(DType::F64, &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let y = run(Op::ScatterAdd { axis: 0, dim: 3 }, &[&i, &u]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[3, 2][..], vec![3.0, 4.0, 0.0, 0.0, 6.0, 8.0]));
        // Axis 1 with 2-D indices [[1, 1]]: updates [2, 1, 2] → [2, 3], each row's
        // two updates summed into column 1.
        let i = ints(DType::I64, &[1, 2], &[1, 1]);
        let u = floats(DType::F64, &[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
        let y = run(Op::ScatterAdd { axis: 1, dim: 3 }, &[&i, &u]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[2, 3][..], vec![0.0, 3.0, 0.0, 0.0, 7.0, 0.0]));
    }

    #[test]
    fn scatter_add_out_of_range_is_a_runtime_error() {
        let u = floats(DType::F32, &[2], &[1.0, 2.0]);
        for bad in [3, -1] {
            let i = ints(DType::I32, &[2], &[0, bad]);
            let e = try_run(Op::ScatterAdd { axis: 0, dim: 3 }, &[&i, &u]).unwrap_err();
            assert_eq!(e.code, Code::Runtime);
            assert!(e.message.contains(&format!("scatter_add index {bad}")), "{}", e.message);
        }
    }

    #[test]
    fn scatter_add_is_the_adjoint_of_gather() {
        // <gather(p, i), u> = <p, scatter_add(i, u)>, repeated indices included.
        // (params shape, axis, indices shape)
        let cases: [(&[usize], usize, &[usize]); 4] =
            [(&[5], 0, &[7]), (&[4, 3], 0, &[2, 3]), (&[3, 4, 2], 1, &[5]), (&[2, 3, 4], 2, &[2, 2])];
        for (k, (ps, axis, is)) in cases.into_iter().enumerate() {
            let p = normal(ps, 10 * k as u64);
            let n: usize = is.iter().product();
            let idx: Vec<i64> = (0..n).map(|j| (j * 7 + k) as i64 % ps[axis] as i64).collect();
            let i = ints(DType::I32, is, &idx);
            let y = run(Op::Gather { axis }, &[&p, &i]);
            let u = normal(y.shape(), 10 * k as u64 + 1);
            let g = run(Op::ScatterAdd { axis, dim: ps[axis] }, &[&i, &u]);
            assert_near(dot(&y, &u), dot(&p, &g), &format!("case {k}"));
        }
    }
}
