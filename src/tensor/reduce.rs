//! Reductions (`sum`, `mean`, `prod`, `max`, `min` over axes) and `argmax`.
//!
//! Contract:
//! - Accumulation is in the storage type (`f16`/`bf16` in `f32`, rounded
//!   once at the end; integers wrap) and in a fixed order: the input's
//!   row-major order, so each output element sums its inputs in row-major
//!   order of the reduced axes. `mean` is that sum divided by the count.
//! - `max`/`min` propagate NaN (NumPy `np.max`). Over an empty axis they
//!   give their identity (`-inf`/`inf`, or the integer type's min/max), as
//!   TensorFlow and JAX do; `sum` gives 0, `prod` 1 and `mean` NaN.
//! - `argmax` gives the first index of the maximum along the axis, as i32; a
//!   NaN counts as the maximum (the first NaN wins), as in NumPy.
//!
//! Example: `reduce(Sum, f32[2, 3] [[1, 2, 3], [4, 5, 6]], axes [1])` is `f32[2] [6, 15]`.

use super::value::{array, array_from, runtime, strides, unravel, Data, Elem, Tensor};
use crate::diag::Diagnostic;
use crate::ir::ReduceOp;

/// Reduces `x` over `axes`; the result has shape `out_shape` (the op's type,
/// with or without the kept size-1 axes — the element order is the same).
pub fn reduce(op: ReduceOp, x: &Tensor, axes: &[usize], out_shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => reduce_t::<T>(op, x, axes, out_shape))
}

fn reduce_t<T: Elem>(op: ReduceOp, x: &Tensor, axes: &[usize], out_shape: &[usize]) -> Result<Data, Diagnostic> {
    let a = array::<T>(x)?;
    let shape = a.shape().to_vec();
    if axes.iter().any(|&ax| ax >= shape.len()) {
        return Err(Diagnostic::internal(format!("interpreter: reduce axes {axes:?} out of range for {shape:?}")));
    }
    // The kept shape: reduced axes become size 1; its strides place each input element.
    let kept: Vec<usize> = shape.iter().enumerate().map(|(d, &n)| if axes.contains(&d) { 1 } else { n }).collect();
    let kept_strides = strides(&kept);
    let out_len: usize = kept.iter().product();
    let count: usize = axes.iter().map(|&ax| shape[ax]).product();
    let mut acc = vec![reduce_identity::<T>(op); out_len];
    for (i, &v) in a.iter().enumerate() {
        let idx = unravel(i, &shape);
        let o: usize =
            idx.iter().zip(&kept).zip(&kept_strides).map(|((&j, &k), &s)| if k == 1 { 0 } else { j * s }).sum();
        acc[o] = reduce_combine(op, acc[o], v);
    }
    if op == ReduceOp::Mean {
        acc = acc
            .into_iter()
            .map(|s| s.div_count(count).ok_or_else(|| mean_error(count, x.dtype())))
            .collect::<Result<_, _>>()?;
    }
    Ok(T::wrap(array_from(out_shape, acc)?))
}

/// The value a reduction starts from (and gives over no elements, before a
/// mean's division).
pub fn reduce_identity<T: Elem>(op: ReduceOp) -> T {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => T::zero(),
        ReduceOp::Prod => T::one(),
        ReduceOp::Max => T::lowest(),
        ReduceOp::Min => T::highest(),
    }
}

/// The accumulator `acc` of a reduction with one more element `v`.
pub fn reduce_combine<T: Elem>(op: ReduceOp, acc: T, v: T) -> T {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => acc.add(v),
        ReduceOp::Prod => acc.mul(v),
        ReduceOp::Max => acc.max_nan(v),
        ReduceOp::Min => acc.min_nan(v),
    }
}

/// The failure of a mean over `count` elements of `dtype` that has no
/// division by it (an integer mean over no elements); the CPU backend's
/// native reductions report it too.
pub fn mean_error(count: usize, dtype: impl std::fmt::Display) -> Diagnostic {
    runtime(format!("mean over {count} elements of {dtype}"))
}

/// Index of the first maximum of `x` along `axis`, as i32, in shape `out_shape`.
pub fn argmax(x: &Tensor, axis: usize, out_shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => argmax_t::<T>(x, axis, out_shape))
}

fn argmax_t<T: Elem>(x: &Tensor, axis: usize, out_shape: &[usize]) -> Result<Data, Diagnostic> {
    let a = array::<T>(x)?;
    let shape = a.shape();
    if axis >= shape.len() || shape[axis] == 0 {
        return Err(Diagnostic::internal(format!("interpreter: argmax axis {axis} of {shape:?}")));
    }
    let values: Vec<T> = a.iter().copied().collect();
    let n = shape[axis];
    if i32::try_from(n).is_err() {
        return Err(runtime(format!("argmax over {n} elements: an index does not fit in i32")));
    }
    let lanes = [shape[..axis].iter().product::<usize>(), n, shape[axis + 1..].iter().product()];
    let mut out = vec![0; lanes[0] * lanes[2]];
    argmax_lanes(&values, lanes, &mut out);
    Ok(Data::I32(array_from(out_shape, out)?))
}

/// `argmax` of `values` viewed as `[outer, n, inner]` along the `n` axis,
/// into `out` (`[outer, inner]`; `n` is at least one and below 2^31): the
/// first index of the maximum, a NaN counting as the maximum (the first
/// NaN wins). The interpreter's and the CPU backend's argmax.
pub fn argmax_lanes<T: Elem>(values: &[T], [outer, n, inner]: [usize; 3], out: &mut [i32]) {
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| values[(o * n + k) * inner + i];
            let mut best = 0;
            for k in 1..n {
                if at(best).is_nan() {
                    break;
                }
                if at(k).is_nan() || at(k) > at(best) {
                    best = k;
                }
            }
            out[o * inner + i] = best as i32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{floats, ints, run};
    use crate::ir::{DType, Op, ReduceOp};

    fn reduce(op: ReduceOp, axes: &[usize], keepdims: bool) -> Op {
        Op::Reduce { op, axes: axes.to_vec(), keepdims }
    }

    #[test]
    fn sums_over_one_axis_with_and_without_keepdims() {
        let x = floats(DType::F32, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        // NumPy: x.sum(axis=1) == [6, 15]; x.sum(axis=0, keepdims=True) == [[5, 7, 9]].
        let s = run(reduce(ReduceOp::Sum, &[1], false), &[&x]);
        assert_eq!((s.shape(), s.to_f64_vec()), (&[2][..], vec![6.0, 15.0]));
        let s = run(reduce(ReduceOp::Sum, &[0], true), &[&x]);
        assert_eq!((s.shape(), s.to_f64_vec()), (&[1, 3][..], vec![5.0, 7.0, 9.0]));
    }

    #[test]
    fn reduces_over_several_axes() {
        // x = arange(24).reshape(2, 3, 4): sum over axes (0, 2) is
        // [0+1+2+3+12+13+14+15, 4..7 + 16..19, 8..11 + 20..23] = [60, 92, 124].
        let v: Vec<f64> = (0..24).map(f64::from).collect();
        let x = floats(DType::F64, &[2, 3, 4], &v);
        let s = run(reduce(ReduceOp::Sum, &[0, 2], false), &[&x]);
        assert_eq!(s.to_f64_vec(), vec![60.0, 92.0, 124.0]);
        let m = run(reduce(ReduceOp::Mean, &[0, 2], true), &[&x]);
        assert_eq!((m.shape(), m.to_f64_vec()), (&[1, 3, 1][..], vec![7.5, 11.5, 15.5]));
        let mx = run(reduce(ReduceOp::Max, &[1, 2], false), &[&x]);
        assert_eq!(mx.to_f64_vec(), vec![11.0, 23.0]);
        let mn = run(reduce(ReduceOp::Min, &[0, 1, 2], false), &[&x]);
        assert_eq!((mn.shape(), mn.to_f64_vec()), (&[][..], vec![0.0]));
    }

    #[test]
    fn integer_reductions_and_nan_propagation() {
        let x = ints(DType::I32, &[2, 2], &[3, -1, 7, 2]);
        assert_eq!(run(reduce(ReduceOp::Sum, &[0, 1], false), &[&x]).to_f64_vec(), vec![11.0]);
        assert_eq!(run(reduce(ReduceOp::Min, &[1], false), &[&x]).to_f64_vec(), vec![-1.0, 2.0]);
        let y = floats(DType::F32, &[3], &[1.0, f64::NAN, 3.0]);
        assert!(run(reduce(ReduceOp::Max, &[0], false), &[&y]).to_f64_vec()[0].is_nan());
        // An empty axis gives the identity: sum 0, max -inf.
        let e = floats(DType::F32, &[2, 0], &[]);
        assert_eq!(run(reduce(ReduceOp::Sum, &[1], false), &[&e]).to_f64_vec(), vec![0.0, 0.0]);
        assert_eq!(run(reduce(ReduceOp::Max, &[1], false), &[&e]).to_f64_vec(), vec![f64::NEG_INFINITY; 2]);
    }

    #[test]
    fn argmax_takes_the_first_maximum() {
        // NumPy: argmax([[1, 3, 3], [5, 5, 0]], axis=1) == [1, 0]; axis=0 == [1, 1, 0].
        let x = floats(DType::F32, &[2, 3], &[1.0, 3.0, 3.0, 5.0, 5.0, 0.0]);
        let a = run(Op::ArgMax { axis: 1, keepdims: false }, &[&x]);
        assert_eq!((a.dtype(), a.to_f64_vec()), (DType::I32, vec![1.0, 0.0]));
        let a = run(Op::ArgMax { axis: 0, keepdims: true }, &[&x]);
        assert_eq!((a.shape(), a.to_f64_vec()), (&[1, 3][..], vec![1.0, 1.0, 0.0]));
        let n = floats(DType::F32, &[4], &[1.0, f64::NAN, 9.0, f64::NAN]);
        assert_eq!(run(Op::ArgMax { axis: 0, keepdims: false }, &[&n]).to_f64_vec(), vec![1.0]);
    }
}
