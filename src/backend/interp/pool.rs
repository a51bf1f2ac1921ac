//! 2-D max and average pooling over NHWC input.
//!
//! Contract: window `size`, `stride`, explicit padding `[top, bottom, left, right]`.
//! Padding positions never take part: max pooling takes the maximum of the
//! in-bounds window elements (so padding never wins, NaN propagates), and
//! average pooling divides the sum of the in-bounds elements by their count
//! (TensorFlow's `SAME` behavior; PyTorch's `count_include_pad=False`).
//! Sums accumulate in the storage type in row-major window order. Integer
//! averages use floor division; averaging `bool` is a runtime error.
//!
//! Example: max pooling `-[[1, 2, 3], [4, 5, 6], [7, 8, 9]]` with a 2x2 window,
//! stride 2 and padding `[0, 1, 0, 1]` gives `[[-1, -3], [-7, -9]]`.

use super::tensor::{array, array_from, flat, runtime, Data, Elem, Tensor};
use crate::diag::Diagnostic;
use crate::ir::PoolKind;

/// Pooling attributes, as on `Op::Pool2d`.
#[derive(Clone, Copy, Debug)]
pub struct PoolParams {
    pub kind: PoolKind,
    pub size: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 4],
}

/// Pools `x` (`[N, H, W, C]`) into `out_shape` (`[N, OH, OW, C]`).
pub fn pool2d(x: &Tensor, p: PoolParams, out_shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => pool2d_t::<T>(x, p, out_shape))
}

fn pool2d_t<T: Elem>(x: &Tensor, p: PoolParams, out_shape: &[usize]) -> Result<Data, Diagnostic> {
    let xs = x.shape();
    if xs.len() != 4 || out_shape.len() != 4 || out_shape[0] != xs[0] || out_shape[3] != xs[3] {
        return Err(Diagnostic::internal(format!("interpreter: pooling {xs:?} into {out_shape:?}")));
    }
    let [n, h, w, c] = [xs[0], xs[1], xs[2], xs[3]];
    let (oh, ow) = (out_shape[1], out_shape[2]);
    let xv = flat(array::<T>(x)?);
    let mut out = Vec::with_capacity(n * oh * ow * c);
    for b in 0..n {
        for y in 0..oh {
            for xo in 0..ow {
                for ch in 0..c {
                    let mut acc = match p.kind {
                        PoolKind::Max => T::lowest(),
                        PoolKind::Avg => T::zero(),
                    };
                    let mut count = 0;
                    for i in 0..p.size[0] {
                        let Some(iy) = (y * p.stride[0] + i).checked_sub(p.padding[0]).filter(|&r| r < h) else {
                            continue;
                        };
                        for j in 0..p.size[1] {
                            let Some(ix) = (xo * p.stride[1] + j).checked_sub(p.padding[2]).filter(|&q| q < w) else {
                                continue;
                            };
                            let v = xv[((b * h + iy) * w + ix) * c + ch];
                            acc = match p.kind {
                                PoolKind::Max => acc.max_nan(v),
                                PoolKind::Avg => acc.add(v),
                            };
                            count += 1;
                        }
                    }
                    if p.kind == PoolKind::Avg {
                        acc = acc
                            .div_count(count)
                            .ok_or_else(|| runtime(format!("avg_pool2d cannot average {} values", x.dtype())))?;
                    }
                    out.push(acc);
                }
            }
        }
    }
    Ok(T::wrap(array_from(out_shape, out)?))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{floats, run};
    use crate::ir::{DType, Op, PoolKind};

    fn pool(kind: PoolKind, padding: [usize; 4]) -> Op {
        Op::Pool2d { kind, size: [2, 2], stride: [2, 2], padding }
    }

    /// `-[[1, 2, 3], [4, 5, 6], [7, 8, 9]]`: all negative, so a padding zero would win a max if counted.
    fn negative_nine() -> super::Tensor {
        floats(DType::F32, &[1, 3, 3, 1], &[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0, -9.0])
    }

    #[test]
    fn max_pool_padding_never_wins() {
        // Windows: {-1,-2,-4,-5} {-3,-6} {-7,-8} {-9}.
        let y = run(pool(PoolKind::Max, [0, 1, 0, 1]), &[&negative_nine()]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[1, 2, 2, 1][..], vec![-1.0, -3.0, -7.0, -9.0]));
        let y = run(pool(PoolKind::Max, [0; 4]), &[&negative_nine()]);
        assert_eq!(y.to_f64_vec(), vec![-1.0]);
    }

    #[test]
    fn avg_pool_divides_by_in_bounds_count() {
        // Same windows: -12/4, -9/2, -15/2, -9/1.
        let y = run(pool(PoolKind::Avg, [0, 1, 0, 1]), &[&negative_nine()]);
        assert_eq!(y.to_f64_vec(), vec![-3.0, -4.5, -7.5, -9.0]);
        // Padding at the top-left: windows {-1} {-2,-3} {-4,-7} {-5,-6,-8,-9}.
        let y = run(pool(PoolKind::Avg, [1, 0, 1, 0]), &[&negative_nine()]);
        assert_eq!(y.to_f64_vec(), vec![-1.0, -2.5, -5.5, -7.0]);
    }
}
