//! Shape ops that move elements without computing: reshape, transpose,
//! broadcast_to and concat.
//!
//! Contract: layout is row-major; `reshape` keeps the row-major element
//! order; `transpose` output dim `i` is input dim `perm[i]`; `broadcast_to`
//! follows NumPy (leading dims added, size-1 dims repeated); `concat` joins
//! its operands in order along `axis`.
//!
//! Example: `transpose(f32[2, 3] [[1, 2, 3], [4, 5, 6]], [1, 0])` is
//! `f32[3, 2] [[1, 4], [2, 5], [3, 6]]`.

use super::value::{array, array_from, flat, Data, Elem, Tensor};
use crate::diag::Diagnostic;
use ndarray::{ArrayView, Axis, IxDyn};

/// The elements of `x` in a new `shape` with the same element count.
pub fn reshape(x: &Tensor, shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => Ok(T::wrap(array_from(shape, flat(array::<T>(x)?))?)))
}

/// `x` with its axes permuted: output dim `i` is input dim `perm[i]`.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Data, Diagnostic> {
    let mut sorted = perm.to_vec();
    sorted.sort_unstable();
    if sorted != (0..x.shape().len()).collect::<Vec<_>>() {
        return Err(Diagnostic::internal(format!("interpreter: {perm:?} is not a permutation of {:?}", x.shape())));
    }
    with_elem!(x.data(), T => {
        let permuted = array::<T>(x)?.view().permuted_axes(IxDyn(perm));
        Ok(T::wrap(permuted.as_standard_layout().into_owned()))
    })
}

/// `x` broadcast to `shape` (NumPy rules).
pub fn broadcast_to(x: &Tensor, shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => {
        let a = array::<T>(x)?;
        let cannot = || Diagnostic::internal(format!("interpreter: cannot broadcast {:?} to {shape:?}", a.shape()));
        let b = a.broadcast(IxDyn(shape)).ok_or_else(cannot)?;
        // Row-major copies: a splat is one fill, and otherwise each run of
        // the source's trailing (unbroadcast) dims is one slice copy.
        let out = match a.as_slice() {
            Some([v]) => vec![*v; shape.iter().product()],
            Some(src) => broadcast_rows(src, a.shape(), shape),
            None => b.iter().copied().collect(),
        };
        Ok(T::wrap(array_from(shape, out)?))
    })
}

/// The row-major elements of `src` (of shape `from`) broadcast to `to`,
/// copying the longest contiguous run of trailing dims at a time.
fn broadcast_rows<T: Copy>(src: &[T], from: &[usize], to: &[usize]) -> Vec<T> {
    let rank = to.len();
    let padded: Vec<usize> = std::iter::repeat_n(1, rank - from.len()).chain(from.iter().copied()).collect();
    let mut outer = rank;
    let mut run = 1;
    while outer > 0 && padded[outer - 1] == to[outer - 1] {
        run *= to[outer - 1];
        outer -= 1;
    }
    // Source strides of the outer dims, 0 along broadcast ones.
    let full = super::value::strides(&padded);
    let step: Vec<usize> = (0..outer).map(|d| if padded[d] == 1 { 0 } else { full[d] }).collect();
    let blocks: usize = to[..outer].iter().product();
    let mut out = Vec::with_capacity(blocks * run);
    let mut index = vec![0; outer];
    for _ in 0..blocks {
        let at: usize = index.iter().zip(&step).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&src[at..at + run]);
        // The next outer multi-index, last dim fastest.
        for d in (0..outer).rev() {
            index[d] += 1;
            if index[d] < to[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// The inputs joined along `axis`, in order.
pub fn concat(inputs: &[&Tensor], axis: usize) -> Result<Data, Diagnostic> {
    let first = inputs.first().ok_or_else(|| Diagnostic::internal("interpreter: concat of nothing"))?;
    if axis >= first.shape().len() {
        return Err(Diagnostic::internal(format!("interpreter: concat axis {axis} of {:?}", first.shape())));
    }
    with_elem!(first.data(), T => {
        let views = inputs.iter().map(|t| array::<T>(t).map(|a| a.view())).collect::<Result<Vec<ArrayView<T, IxDyn>>, _>>()?;
        let joined = ndarray::concatenate(Axis(axis), &views)
            .map_err(|e| Diagnostic::internal(format!("interpreter: concat along axis {axis}: {e}")))?;
        Ok(T::wrap(joined.as_standard_layout().into_owned()))
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{bools, floats, ints, run};
    use crate::ir::{DType, Op};

    #[test]
    fn reshape_keeps_row_major_order() {
        let x = ints(DType::I64, &[2, 3], &[1, 2, 3, 4, 5, 6]);
        let y = run(Op::Reshape { shape: vec![3, 1, 2] }, &[&x]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[3, 1, 2][..], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    }

    #[test]
    fn transposes_by_permutation() {
        let x = floats(DType::F32, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let y = run(Op::Transpose { perm: vec![1, 0] }, &[&x]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[3, 2][..], vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
        // NumPy: arange(24).reshape(2, 3, 4).transpose(2, 0, 1)[1] == [[1, 5, 9], [13, 17, 21]].
        let v: Vec<f64> = (0..24).map(f64::from).collect();
        let z = run(Op::Transpose { perm: vec![2, 0, 1] }, &[&floats(DType::F64, &[2, 3, 4], &v)]);
        assert_eq!(z.shape(), &[4, 2, 3]);
        assert_eq!(z.to_f64_vec()[6..12], [1.0, 5.0, 9.0, 13.0, 17.0, 21.0]);
    }

    #[test]
    fn broadcasts_like_numpy() {
        // [3] → [2, 3] repeats the row; [2, 1] → [2, 3] repeats each value.
        let row = floats(DType::F32, &[3], &[1.0, 2.0, 3.0]);
        let y = run(Op::BroadcastTo { shape: vec![2, 3] }, &[&row]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        let col = bools(&[2, 1], &[true, false]);
        let y = run(Op::BroadcastTo { shape: vec![2, 3] }, &[&col]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
        let s = floats(DType::F64, &[], &[7.0]);
        assert_eq!(run(Op::BroadcastTo { shape: vec![2, 2] }, &[&s]).to_f64_vec(), vec![7.0; 4]);
    }

    #[test]
    fn broadcast_copies_rows_in_numpy_order() {
        // The row-copying path against ndarray's element walk, for sources
        // broadcast along leading, middle and trailing dims.
        for (from, to) in [
            (vec![2, 1, 3], vec![4, 2, 5, 3]),
            (vec![3, 1], vec![2, 3, 4]),
            (vec![1, 4], vec![3, 4]),
            (vec![2, 3], vec![2, 3]),
            (vec![5, 1, 1], vec![5, 2, 2]),
        ] {
            let n: usize = from.iter().product();
            let src: Vec<f64> = (0..n).map(|i| i as f64).collect();
            let a = ndarray::ArrayD::from_shape_vec(from.clone(), src.clone()).unwrap();
            let expected: Vec<f64> = a.broadcast(ndarray::IxDyn(&to)).unwrap().iter().copied().collect();
            assert_eq!(super::broadcast_rows(&src, &from, &to), expected, "{from:?} -> {to:?}");
        }
    }

    #[test]
    fn concatenates_along_axis_one() {
        let a = floats(DType::F32, &[2, 1], &[1.0, 2.0]);
        let b = floats(DType::F32, &[2, 2], &[3.0, 4.0, 5.0, 6.0]);
        let y = run(Op::Concat { axis: 1 }, &[&a, &b]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[2, 3][..], vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]));
        let y = run(Op::Concat { axis: 0 }, &[&b, &b, &b]);
        assert_eq!(y.shape(), &[6, 2]);
    }
}
