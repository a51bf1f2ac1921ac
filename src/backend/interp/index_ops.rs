//! Ops that pick elements by index: slice, pad, gather and one_hot.
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
//! - `one_hot`: an index outside `[0, depth)` gives a row of zeros
//!   (TensorFlow `one_hot`).
//!
//! Example: `slice(f32[5] [0, 1, 2, 3, 4], start [4], step [-2], len [3])` is `f32[3] [4, 2, 0]`.

use super::tensor::{array, array_from, flat, runtime, scalar_for, strides, unravel, Data, Elem, Tensor};
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
    for (j, &i) in idx.iter().enumerate() {
        if i < 0 || i >= n as i64 {
            let at = unravel(j, indices.shape());
            return Err(runtime(format!(
                "gather index {i} is out of range for axis {axis} of size {n} (at indices{at:?} of {})",
                indices.ty()
            ))
            .help(format!("valid indices along axis {axis} are 0 to {}", n as i64 - 1)));
        }
    }
    let outer: usize = p_shape[..axis].iter().product();
    let inner: usize = p_shape[axis + 1..].iter().product();
    let mut out_shape = p_shape[..axis].to_vec();
    out_shape.extend_from_slice(indices.shape());
    out_shape.extend_from_slice(&p_shape[axis + 1..]);
    with_elem!(params.data(), T => {
        let values = flat(array::<T>(params)?);
        let mut out = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &i in &idx {
                let base = (o * n + i as usize) * inner;
                out.extend_from_slice(&values[base..base + inner]);
            }
        }
        Ok(T::wrap(array_from(&out_shape, out)?))
    })
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
    use super::super::testutil::{floats, ints, run, try_run};
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
}
