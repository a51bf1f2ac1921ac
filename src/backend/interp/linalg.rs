//! Matrix product and 2-D convolution.
//!
//! Contract:
//! - `matmul`: `[..., m, k] @ [..., k, n]` over identical batch dims.
//! - `conv2d`: NHWC input `[N, H, W, C]`, HWIO weights `[KH, KW, C/groups, O]`,
//!   explicit padding `[top, bottom, left, right]` (zeros), stride and
//!   dilation per spatial dim; output channel `o` belongs to group
//!   `o / (O/groups)` and reads that group's `C/groups` input channels:
//!   `out[n, y, x, o] = Σ_{i, j, c} in[n, y·sh + i·dh - top, x·sw + j·dw - left, g·C/groups + c] · w[i, j, c, o]`.
//! - Accumulation is in the storage type (`f32` for `f32`/`f16`/`bf16`, `f64`
//!   for `f64`; integers wrap; `bool` is or-of-ands), starting from zero, in a
//!   fixed order: `k` ascending for matmul; `i`, `j`, `c` ascending (row-major
//!   over the window) for conv2d. `f16`/`bf16` results are rounded once.
//!
//! Example: `matmul(i32[2, 2] [[1, 2], [3, 4]], i32[2, 2] [[5, 6], [7, 8]])` is `[[19, 22], [43, 50]]`.

use super::tensor::{array, array_from, flat, Data, Elem, Tensor};
use crate::diag::Diagnostic;

/// Batched `a @ b`.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Data, Diagnostic> {
    with_elem!(a.data(), T => matmul_t::<T>(a, b))
}

fn matmul_t<T: Elem>(a: &Tensor, b: &Tensor) -> Result<Data, Diagnostic> {
    let (sa, sb) = (a.shape(), b.shape());
    let r = sa.len();
    if r < 2 || sb.len() != r || sa[..r - 2] != sb[..r - 2] || sa[r - 1] != sb[r - 2] {
        return Err(Diagnostic::internal(format!("interpreter: matmul of {sa:?} and {sb:?}")));
    }
    let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
    let batch: usize = sa[..r - 2].iter().product();
    let (x, y) = (flat(array::<T>(a)?), flat(array::<T>(b)?));
    let mut out = Vec::with_capacity(batch * m * n);
    for bt in 0..batch {
        let (xa, yb) = (&x[bt * m * k..], &y[bt * k * n..]);
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::zero();
                for p in 0..k {
                    acc = acc.add(xa[i * k + p].mul(yb[p * n + j]));
                }
                out.push(acc);
            }
        }
    }
    let mut shape = sa.to_vec();
    shape[r - 1] = n;
    Ok(T::wrap(array_from(&shape, out)?))
}

/// Convolution attributes, as on `Op::Conv2d`.
#[derive(Clone, Copy, Debug)]
pub struct ConvParams {
    pub stride: [usize; 2],
    pub padding: [usize; 4],
    pub dilation: [usize; 2],
    pub groups: usize,
}

/// NHWC × HWIO convolution producing `out_shape` (`[N, OH, OW, O]`).
pub fn conv2d(x: &Tensor, w: &Tensor, p: ConvParams, out_shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => conv2d_t::<T>(x, w, p, out_shape))
}

fn conv2d_t<T: Elem>(x: &Tensor, w: &Tensor, p: ConvParams, out_shape: &[usize]) -> Result<Data, Diagnostic> {
    let (xs, ws) = (x.shape(), w.shape());
    let bad = || Diagnostic::internal(format!("interpreter: conv2d of {xs:?} and {ws:?} into {out_shape:?}"));
    if xs.len() != 4 || ws.len() != 4 || out_shape.len() != 4 || p.groups == 0 {
        return Err(bad());
    }
    let [n, h, wd, c] = [xs[0], xs[1], xs[2], xs[3]];
    let [kh, kw, cg, o] = [ws[0], ws[1], ws[2], ws[3]];
    let [on, oh, ow, oc] = [out_shape[0], out_shape[1], out_shape[2], out_shape[3]];
    if c != cg * p.groups || o % p.groups != 0 || on != n || oc != o {
        return Err(bad());
    }
    let og = o / p.groups;
    let (xv, wv) = (flat(array::<T>(x)?), flat(array::<T>(w)?));
    let mut out = Vec::with_capacity(n * oh * ow * o);
    for b in 0..n {
        for y in 0..oh {
            for xo in 0..ow {
                for oc in 0..o {
                    let g = oc / og;
                    let mut acc = T::zero();
                    for i in 0..kh {
                        // The input row, or none if this tap falls in the zero padding.
                        let Some(iy) =
                            (y * p.stride[0] + i * p.dilation[0]).checked_sub(p.padding[0]).filter(|&r| r < h)
                        else {
                            continue;
                        };
                        for j in 0..kw {
                            let Some(ix) =
                                (xo * p.stride[1] + j * p.dilation[1]).checked_sub(p.padding[2]).filter(|&q| q < wd)
                            else {
                                continue;
                            };
                            for ci in 0..cg {
                                let xin = xv[((b * h + iy) * wd + ix) * c + g * cg + ci];
                                let wt = wv[((i * kw + j) * cg + ci) * o + oc];
                                acc = acc.add(xin.mul(wt));
                            }
                        }
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
    use super::super::testutil::{floats, ints, run};
    use crate::ir::{DType, Op};

    #[test]
    fn multiplies_matrices() {
        let a = ints(DType::I32, &[2, 2], &[1, 2, 3, 4]);
        let b = ints(DType::I32, &[2, 2], &[5, 6, 7, 8]);
        assert_eq!(run(Op::MatMul, &[&a, &b]).to_f64_vec(), vec![19.0, 22.0, 43.0, 50.0]);
    }

    #[test]
    fn multiplies_batches_independently() {
        // Batch 0: [[1,2,3],[4,5,6]] @ [[1],[0],[-1]] = [[-2],[-2]];
        // batch 1: [[1,0,0],[0,1,0]] @ [[7],[8],[9]] = [[7],[8]].
        let a = floats(DType::F32, &[2, 2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let b = floats(DType::F32, &[2, 3, 1], &[1.0, 0.0, -1.0, 7.0, 8.0, 9.0]);
        let y = run(Op::MatMul, &[&a, &b]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[2, 2, 1][..], vec![-2.0, -2.0, 7.0, 8.0]));
    }

    fn conv(stride: usize, padding: [usize; 4], dilation: usize, groups: usize) -> Op {
        Op::Conv2d { stride: [stride; 2], padding, dilation: [dilation; 2], groups }
    }

    /// `x[1, 3, 3, 1] = 1..9` and a 2x2 kernel of ones: each output is a window sum.
    fn nine() -> super::Tensor {
        floats(DType::F32, &[1, 3, 3, 1], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    }

    #[test]
    fn conv2d_valid_and_same_padding() {
        let w = floats(DType::F32, &[2, 2, 1, 1], &[1.0; 4]);
        // VALID: windows {1,2,4,5} {2,3,5,6} {4,5,7,8} {5,6,8,9}.
        let y = run(conv(1, [0; 4], 1, 1), &[&nine(), &w]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[1, 2, 2, 1][..], vec![12.0, 16.0, 24.0, 28.0]));
        // SAME for a 2x2 kernel pads one row at the bottom and one column at the right (TensorFlow).
        let y = run(conv(1, [0, 1, 0, 1], 1, 1), &[&nine(), &w]);
        assert_eq!(y.shape(), &[1, 3, 3, 1]);
        assert_eq!(y.to_f64_vec(), vec![12.0, 16.0, 9.0, 24.0, 28.0, 15.0, 15.0, 17.0, 9.0]);
    }

    #[test]
    fn conv2d_stride_two_and_dilation_two() {
        let w = floats(DType::F32, &[2, 2, 1, 1], &[1.0; 4]);
        let x: Vec<f64> = (0..16).map(f64::from).collect();
        let x = floats(DType::F32, &[1, 4, 4, 1], &x);
        // Windows at (0,0) (0,2) (2,0) (2,2) of arange(16).reshape(4, 4).
        let y = run(conv(2, [0; 4], 1, 1), &[&x, &w]);
        assert_eq!(y.to_f64_vec(), vec![10.0, 18.0, 42.0, 50.0]);
        // Dilation 2 spreads the 2x2 kernel over the corners of the 3x3 input: 1 + 3 + 7 + 9.
        let y = run(conv(1, [0; 4], 2, 1), &[&nine(), &w]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[1, 1, 1, 1][..], vec![20.0]));
    }

    #[test]
    fn conv2d_is_a_cross_correlation_over_hwio_weights() {
        // Like TensorFlow, the kernel is not flipped: [1, 2, 3] with taps [1, 10]
        // gives [1·1 + 2·10, 2·1 + 3·10]; the batch of two is handled per image.
        let x = floats(DType::F32, &[2, 1, 3, 1], &[1.0, 2.0, 3.0, -1.0, 0.0, 1.0]);
        let w = floats(DType::F32, &[1, 2, 1, 1], &[1.0, 10.0]);
        let y = run(conv(1, [0; 4], 1, 1), &[&x, &w]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[2, 1, 2, 1][..], vec![21.0, 32.0, -1.0, 10.0]));
    }

    #[test]
    fn conv2d_mixes_channels_and_splits_groups() {
        let x = floats(DType::F64, &[1, 1, 1, 2], &[1.0, 2.0]);
        // One group: 1·3 + 2·4.
        let w = floats(DType::F64, &[1, 1, 2, 1], &[3.0, 4.0]);
        assert_eq!(run(conv(1, [0; 4], 1, 1), &[&x, &w]).to_f64_vec(), vec![11.0]);
        // Two groups of one input channel and two outputs each: outputs 0, 1
        // read channel 0 (value 1), outputs 2, 3 read channel 1 (value 2).
        let w = floats(DType::F64, &[1, 1, 1, 4], &[10.0, 20.0, 30.0, 40.0]);
        assert_eq!(run(conv(1, [0; 4], 1, 2), &[&x, &w]).to_f64_vec(), vec![10.0, 20.0, 60.0, 80.0]);
    }
}
