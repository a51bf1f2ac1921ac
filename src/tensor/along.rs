//! Ops along one axis whose lanes are independent: running sums (`cumsum`)
//! and the sorting permutation (`argsort`, from which `sort` and `top_k`
//! gather their values).
//!
//! Contract:
//! - A tensor of shape `[..a, n, ..b]` along its axis is `outer = Π a`
//!   lanes by `inner = Π b` lanes of `n` elements; both functions work on
//!   that `[outer, n, inner]` view of row-major data, which is what the
//!   interpreter and the CPU backend both call.
//! - `cumsum_lanes` adds in lane order with the element type's addition
//!   (`f16`/`bf16` values in `f32`, rounded once per output by the caller's
//!   storage; integers wrap): element `k` is `x[0] + … + x[k]`, or with
//!   `reverse` `x[k] + … + x[n-1]` added from the end.
//! - `argsort_lanes` is a stable sort: equal elements keep their order in
//!   both directions, so `descending` is not the reverse of ascending.
//!   NaN orders above every number (last ascending, first descending), as
//!   NumPy's `sort` puts it last and `argmax` lets it win; `-0.0` and
//!   `0.0` are equal.
//!
//! Example: `cumsum([1, 2, 3])` is `[1, 3, 6]`, reversed `[6, 5, 3]`;
//! `argsort([3, 1, 3, 2], descending)` is `[0, 2, 3, 1]`.

use super::value::{array, array_from, runtime, Data, Elem, Tensor};
use crate::diag::Diagnostic;
use std::cmp::Ordering;

/// The `[outer, n, inner]` view of `shape` along `axis`.
pub fn lanes(shape: &[usize], axis: usize) -> [usize; 3] {
    [shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product()]
}

/// Running sums of `x` along `axis`.
pub fn cumsum(x: &Tensor, axis: usize, reverse: bool) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => {
        let a = array::<T>(x)?;
        let shape = a.shape().to_vec();
        if axis >= shape.len() {
            return Err(Diagnostic::internal(format!("interpreter: cumsum axis {axis} of {shape:?}")));
        }
        let values: Vec<T> = a.iter().copied().collect();
        let mut out = vec![T::zero(); values.len()];
        cumsum_lanes(&values, lanes(&shape, axis), reverse, &mut out);
        Ok(T::wrap(array_from(&shape, out)?))
    })
}

/// Running sums of `values` viewed as `[outer, n, inner]` along `n`, into
/// `out` (the same length). The interpreter's and the CPU backend's cumsum.
pub fn cumsum_lanes<T: Elem>(values: &[T], [outer, n, inner]: [usize; 3], reverse: bool, out: &mut [T]) {
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            let mut acc = T::zero();
            for step in 0..n {
                let k = if reverse { n - 1 - step } else { step };
                acc = acc.add(values[at(k)]);
                out[at(k)] = acc;
            }
        }
    }
}

/// The permutation that sorts `x` along `axis`, as i32 indices.
pub fn argsort(x: &Tensor, axis: usize, descending: bool) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => {
        let a = array::<T>(x)?;
        let shape = a.shape().to_vec();
        if axis >= shape.len() {
            return Err(Diagnostic::internal(format!("interpreter: argsort axis {axis} of {shape:?}")));
        }
        let n = shape[axis];
        if i32::try_from(n).is_err() {
            return Err(runtime(format!("argsort over {n} elements: an index does not fit in i32")));
        }
        let values: Vec<T> = a.iter().copied().collect();
        let mut out = vec![0; values.len()];
        argsort_lanes(&values, lanes(&shape, axis), descending, &mut out);
        Ok(Data::I32(array_from(&shape, out)?))
    })
}

/// The stable sorting permutation of each lane of `values` viewed as
/// `[outer, n, inner]` along `n` (below 2^31 elements), into `out` (the
/// same length). The interpreter's and the CPU backend's argsort.
pub fn argsort_lanes<T: Elem>(values: &[T], [outer, n, inner]: [usize; 3], descending: bool, out: &mut [i32]) {
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            order.clear();
            order.extend(0..n);
            // `sort_by` is stable: ties keep their index order.
            order.sort_by(|&p, &q| {
                let ord = total_order(values[at(p)], values[at(q)]);
                if descending {
                    ord.reverse()
                } else {
                    ord
                }
            });
            for (k, &from) in order.iter().enumerate() {
                // Below 2^31 (checked by the callers).
                out[at(k)] = from as i32;
            }
        }
    }
}

/// `a` against `b` with NaN above every number and all NaNs equal.
fn total_order<T: Elem>(a: T, b: T) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumsum_adds_in_lane_order_both_ways() {
        // NumPy: np.cumsum([[1, 2, 3], [4, 5, 6]], axis=0) == [[1, 2, 3], [5, 7, 9]];
        // axis=1 == [[1, 3, 6], [4, 9, 15]]; reversed along 1: [[6, 5, 3], [15, 11, 6]].
        let x = [1, 2, 3, 4, 5, 6];
        let mut out = [0; 6];
        cumsum_lanes(&x, [1, 2, 3], false, &mut out);
        assert_eq!(out, [1, 2, 3, 5, 7, 9]);
        cumsum_lanes(&x, [2, 3, 1], false, &mut out);
        assert_eq!(out, [1, 3, 6, 4, 9, 15]);
        cumsum_lanes(&x, [2, 3, 1], true, &mut out);
        assert_eq!(out, [6, 5, 3, 15, 11, 6]);
    }

    #[test]
    fn argsort_is_stable_and_puts_nan_above_numbers() {
        let x = [3.0f32, 1.0, 3.0, 2.0];
        let mut out = [0; 4];
        argsort_lanes(&x, [1, 4, 1], false, &mut out);
        assert_eq!(out, [1, 3, 0, 2]);
        argsort_lanes(&x, [1, 4, 1], true, &mut out);
        assert_eq!(out, [0, 2, 3, 1]);
        // NumPy: np.argsort([nan, 1, -inf], kind="stable") == [2, 1, 0].
        let y = [f32::NAN, 1.0, f32::NEG_INFINITY];
        let mut out = [0; 3];
        argsort_lanes(&y, [1, 3, 1], false, &mut out);
        assert_eq!(out, [2, 1, 0]);
        argsort_lanes(&y, [1, 3, 1], true, &mut out);
        assert_eq!(out, [0, 1, 2]);
        // Along the first of two axes: columns sort independently.
        let z = [2, 9, 1, 8];
        let mut out = [0; 4];
        argsort_lanes(&z, [1, 2, 2], false, &mut out);
        assert_eq!(out, [1, 1, 0, 0]);
    }
}
