//! Matrix product, 2-D convolution and the convolution's adjoints.
//!
//! Contract:
//! - `matmul`: `[..., m, k] @ [..., k, n]` over identical batch dims.
//! - `conv2d`: NHWC input `[N, H, W, C]`, HWIO weights `[KH, KW, C/groups, O]`,
//!   explicit padding `[top, bottom, left, right]` (zeros), stride and
//!   dilation per spatial dim; output channel `o` belongs to group
//!   `o / (O/groups)` and reads that group's `C/groups` input channels:
//!   `out[n, y, x, o] = Σ_{i, j, c} in[n, y·sh + i·dh - top, x·sw + j·dw - left, g·C/groups + c] · w[i, j, c, o]`.
//! - `conv2d_grad_input(gy, w)` and `conv2d_grad_filter(x, gy)`: the exact
//!   adjoints of `conv2d` with respect to its input and its weights. They
//!   walk the same taps as the forward op (`ConvGeometry::for_each_tap`) and
//!   accumulate each product into the input / weight position it came from:
//!   `gx[xi] += gy[yi]·w[wi]`, `gw[wi] += x[xi]·gy[yi]`.
//! - Each op has a slice-level form (`matmul_into`, `conv2d_into`,
//!   `conv2d_grad_input_into`, `conv2d_grad_filter_into`) over row-major
//!   element slices, which the tensor-level op calls and the CPU backend
//!   runs natively for the element types it has no faster kernel for.
//! - Accumulation is in the storage type (`f32` for `f32`/`f16`/`bf16`, `f64`
//!   for `f64`; integers wrap; `bool` is or-of-ands), starting from zero, in a
//!   fixed order: `k` ascending for matmul; `i`, `j`, `c` ascending (row-major
//!   over the window) for conv2d. `f16`/`bf16` results are rounded once.
//!
//! Example: `matmul(i32[2, 2] [[1, 2], [3, 4]], i32[2, 2] [[5, 6], [7, 8]])` is `[[19, 22], [43, 50]]`.

use super::value::{array, array_from, flat, Data, Elem, Tensor};
use crate::diag::Diagnostic;
use crate::ir::infer::window_output;

/// Batched `a @ b`.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Data, Diagnostic> {
    with_elem!(a.data(), T => matmul_t::<T>(a, b))
}

/// `out = x @ y` for `batch` row-major `m × k` and `k × n` matrices (`out`
/// zeroed, `batch · m · n` long): the interpreter's matmul, which the CPU
/// backend also runs for `f64`.
pub fn matmul_into<T: Elem>(x: &[T], y: &[T], out: &mut [T], [batch, m, k, n]: [usize; 4]) {
    // Each output element is `0 + x[i, 0]·y[0, j] + x[i, 1]·y[1, j] + …` in
    // order of `p` (the reference summation order). The loops run `p`
    // outside `j` so that a row of `y` is read contiguously and a whole row
    // of sums advances by one term at a time: the same operations on each
    // element, in the same order, as a dot product per element.
    for bt in 0..batch {
        let (xa, yb) = (&x[bt * m * k..], &y[bt * k * n..]);
        for (i, row) in out[bt * m * n..(bt + 1) * m * n].chunks_exact_mut(n.max(1)).enumerate().take(m) {
            for p in 0..k {
                let (a, yp) = (xa[i * k + p], &yb[p * n..(p + 1) * n]);
                for (acc, &b) in row.iter_mut().zip(yp) {
                    *acc = acc.add(a.mul(b));
                }
            }
        }
    }
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
    let mut out = vec![T::zero(); batch * m * n];
    matmul_into(&x, &y, &mut out, [batch, m, k, n]);
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

/// The index geometry of one convolution: `x` `[N, H, W, C]`, `w`
/// `[KH, KW, C/groups, O]`, `y` `[N, OH, OW, O]`. The forward op and both of
/// its adjoints walk exactly the same taps (`for_each_tap`), so each adjoint
/// is the forward loop with the roles of the three tensors exchanged.
struct ConvGeometry {
    x: [usize; 4],
    w: [usize; 4],
    y: [usize; 4],
    p: ConvParams,
}

impl ConvGeometry {
    /// Checks that the three shapes fit together under `p` (as `ir::infer` does).
    fn new(xs: &[usize], ws: &[usize], ys: &[usize], p: ConvParams) -> Result<ConvGeometry, Diagnostic> {
        let bad = || Diagnostic::internal(format!("interpreter: conv2d of {xs:?} and {ws:?} into {ys:?} ({p:?})"));
        let four = |s: &[usize]| <[usize; 4]>::try_from(s).map_err(|_| bad());
        let (x, w, y) = (four(xs)?, four(ws)?, four(ys)?);
        let g = p.groups;
        let fits = g > 0
            && x[3] == w[2] * g
            && w[3] % g == 0
            && y[0] == x[0]
            && y[3] == w[3]
            && window_output(x[1], w[0], p.stride[0], p.dilation[0], p.padding[0] + p.padding[1]) == Some(y[1])
            && window_output(x[2], w[1], p.stride[1], p.dilation[1], p.padding[2] + p.padding[3]) == Some(y[2]);
        if !fits {
            return Err(bad());
        }
        Ok(ConvGeometry { x, w, y, p })
    }

    /// Calls `f(xi, wi, yi, n)` for every run of `n` products
    /// `x[xi] · w[wi + k]` contributing to `y[yi + k]` (`k` in `0..n`): the
    /// flat (row-major) positions of the input element, weights and output
    /// elements that meet. A run is one input element against the output
    /// channels of its group, which are contiguous in both `w` and `y`, so
    /// the callers' inner loops are over slices (this is several times
    /// faster than one call per product, which made CNN training slow).
    /// Order: output positions row-major, then the group, taps `i`, `j`, `c`
    /// ascending, then the output channel; taps in the zero padding are
    /// skipped. For any single `y`, `x` or `w` element the products arrive
    /// in the same order as in a walk over output elements then taps (each
    /// output element sums its taps `i`, `j`, `c` ascending), so the
    /// accumulations are the same sequence of float operations.
    fn for_each_tap(&self, mut f: impl FnMut(usize, usize, usize, usize)) {
        let ([n, h, wd, c], [kh, kw, cg, o], [_, oh, ow, _]) = (self.x, self.w, self.y);
        let p = self.p;
        let og = o / p.groups;
        for b in 0..n {
            for y in 0..oh {
                for xo in 0..ow {
                    let ybase = ((b * oh + y) * ow + xo) * o;
                    for g in 0..p.groups {
                        for i in 0..kh {
                            // The input row, or none if this tap falls in the zero padding.
                            let Some(iy) =
                                (y * p.stride[0] + i * p.dilation[0]).checked_sub(p.padding[0]).filter(|&r| r < h)
                            else {
                                continue;
                            };
                            for j in 0..kw {
                                let Some(ix) = (xo * p.stride[1] + j * p.dilation[1])
                                    .checked_sub(p.padding[2])
                                    .filter(|&q| q < wd)
                                else {
                                    continue;
                                };
                                for ci in 0..cg {
                                    let xi = ((b * h + iy) * wd + ix) * c + g * cg + ci;
                                    let wi = ((i * kw + j) * cg + ci) * o + g * og;
                                    f(xi, wi, ybase + g * og, og);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// NHWC × HWIO convolution producing `out_shape` (`[N, OH, OW, O]`).
pub fn conv2d(x: &Tensor, w: &Tensor, p: ConvParams, out_shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => {
        let (xv, wv) = (flat(array::<T>(x)?), flat(array::<T>(w)?));
        let mut out = vec![T::zero(); out_shape.iter().product()];
        conv2d_into(&xv, &wv, [x.shape(), w.shape(), out_shape], p, &mut out)?;
        Ok(T::wrap(array_from(out_shape, out)?))
    })
}

/// The adjoint of `conv2d` with respect to its input: every product
/// `x[xi] · w[wi]` of the forward op sends `gy[yi] · w[wi]` back to `xi`.
/// `input_shape` is the shape of the forward input (and of the result).
pub fn conv2d_grad_input(gy: &Tensor, w: &Tensor, p: ConvParams, input_shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(gy.data(), T => {
        let (gv, wv) = (flat(array::<T>(gy)?), flat(array::<T>(w)?));
        let mut gx = vec![T::zero(); input_shape.iter().product()];
        conv2d_grad_input_into(&gv, &wv, [input_shape, w.shape(), gy.shape()], p, &mut gx)?;
        Ok(T::wrap(array_from(input_shape, gx)?))
    })
}

/// The adjoint of `conv2d` with respect to its weights: every product
/// `x[xi] · w[wi]` of the forward op sends `x[xi] · gy[yi]` back to `wi`.
/// `filter_shape` is the shape of the forward weights (and of the result).
pub fn conv2d_grad_filter(x: &Tensor, gy: &Tensor, p: ConvParams, filter_shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => {
        let (xv, gv) = (flat(array::<T>(x)?), flat(array::<T>(gy)?));
        let mut gw = vec![T::zero(); filter_shape.iter().product()];
        conv2d_grad_filter_into(&xv, &gv, [x.shape(), filter_shape, gy.shape()], p, &mut gw)?;
        Ok(T::wrap(array_from(filter_shape, gw)?))
    })
}

/// The geometry of a convolution of the `[x, w, y]` shapes `shapes`, after
/// checking that the three row-major slices hold those shapes' elements.
fn geometry<T>(shapes: [&[usize]; 3], p: ConvParams, slices: [&[T]; 3]) -> Result<ConvGeometry, Diagnostic> {
    let geo = ConvGeometry::new(shapes[0], shapes[1], shapes[2], p)?;
    let lens = [geo.x, geo.w, geo.y].map(|s| s.iter().product::<usize>());
    if slices.iter().zip(lens).any(|(s, n)| s.len() != n) {
        return Err(Diagnostic::internal(format!("interpreter: conv2d slices do not hold {shapes:?}")));
    }
    Ok(geo)
}

/// `out = conv2d(x, w)` over row-major slices of the `[x, w, out]` shapes
/// `shapes` (`out` overwritten): the interpreter's convolution, which the
/// CPU backend also runs for `i32`, `i64` and `f64`.
pub fn conv2d_into<T: Elem>(
    xv: &[T],
    wv: &[T],
    shapes: [&[usize]; 3],
    p: ConvParams,
    out: &mut [T],
) -> Result<(), Diagnostic> {
    let geo = geometry(shapes, p, [xv, wv, &*out])?;
    out.fill(T::zero());
    geo.for_each_tap(|xi, wi, yi, n| {
        let a = xv[xi];
        for (o, &w) in out[yi..yi + n].iter_mut().zip(&wv[wi..wi + n]) {
            *o = o.add(a.mul(w));
        }
    });
    Ok(())
}

/// `gx = conv2d_grad_input(gy, w)` over row-major slices of the forward
/// `[x, w, y]` shapes `shapes` (`gx` overwritten), as `conv2d_into`.
pub fn conv2d_grad_input_into<T: Elem>(
    gv: &[T],
    wv: &[T],
    shapes: [&[usize]; 3],
    p: ConvParams,
    gx: &mut [T],
) -> Result<(), Diagnostic> {
    let geo = geometry(shapes, p, [&*gx, wv, gv])?;
    gx.fill(T::zero());
    geo.for_each_tap(|xi, wi, yi, n| {
        let mut acc = gx[xi];
        for (&g, &w) in gv[yi..yi + n].iter().zip(&wv[wi..wi + n]) {
            acc = acc.add(g.mul(w));
        }
        gx[xi] = acc;
    });
    Ok(())
}

/// `gw = conv2d_grad_filter(x, gy)` over row-major slices of the forward
/// `[x, w, y]` shapes `shapes` (`gw` overwritten), as `conv2d_into`.
pub fn conv2d_grad_filter_into<T: Elem>(
    xv: &[T],
    gv: &[T],
    shapes: [&[usize]; 3],
    p: ConvParams,
    gw: &mut [T],
) -> Result<(), Diagnostic> {
    let geo = geometry(shapes, p, [xv, &*gw, gv])?;
    gw.fill(T::zero());
    geo.for_each_tap(|xi, wi, yi, n| {
        let a = xv[xi];
        for (w, &g) in gw[wi..wi + n].iter_mut().zip(&gv[yi..yi + n]) {
            *w = w.add(a.mul(g));
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_near, dot, floats, ints, normal, run};
    use crate::ir::{DType, Op};

    #[test]
    fn multiplies_matrices() {
        let a = ints(DType::I32, &[2, 2], &[1, 2, 3, 4]);
        let b = ints(DType::I32, &[2, 2], &[5, 6, 7, 8]);
        assert_eq!(run(Op::MatMul, &[&a, &b]).to_f64_vec(), vec![19.0, 22.0, 43.0, 50.0]);
    }

    /// Every `f32` sum is `0 + x[i, 0]·y[0, j] + …` in order: bit for bit a
    /// dot product per element, whatever the loop order.
    #[test]
    fn sums_each_product_in_order_of_the_inner_index() {
        let (m, k, n) = (5, 37, 19);
        let (xs, ys) = (crate::rng::normal(3, m * k), crate::rng::normal(4, k * n));
        let (a, b) = (floats(DType::F32, &[m, k], &xs), floats(DType::F32, &[k, n], &ys));
        let got = run(Op::MatMul, &[&a, &b]).to_f64_vec();
        let (x32, y32): (Vec<f32>, Vec<f32>) =
            (xs.iter().map(|&v| v as f32).collect(), ys.iter().map(|&v| v as f32).collect());
        for i in 0..m {
            for j in 0..n {
                let want = (0..k).fold(0.0f32, |acc, p| acc + x32[i * k + p] * y32[p * n + j]);
                assert_eq!((got[i * n + j] as f32).to_bits(), want.to_bits(), "element ({i}, {j})");
            }
        }
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

    fn grad_input(stride: usize, padding: [usize; 4], dilation: usize, groups: usize, input_shape: [usize; 4]) -> Op {
        Op::Conv2dGradInput { stride: [stride; 2], padding, dilation: [dilation; 2], groups, input_shape }
    }

    fn grad_filter(stride: usize, padding: [usize; 4], dilation: usize, groups: usize, filter_shape: [usize; 4]) -> Op {
        Op::Conv2dGradFilter { stride: [stride; 2], padding, dilation: [dilation; 2], groups, filter_shape }
    }

    #[test]
    fn conv2d_grad_input_sends_each_output_back_through_the_kernel() {
        // Taps w[i, j] = 1, 10, 100, 1000 over the 3x3 input, VALID: output (0, 0)
        // reads x[0..2, 0..2] and output (1, 1) reads x[1..3, 1..3], so
        // gy = [1, 0, 0, 2] gives w at the top-left plus 2·w at the bottom-right.
        let w = floats(DType::F64, &[2, 2, 1, 1], &[1.0, 10.0, 100.0, 1000.0]);
        let gy = floats(DType::F64, &[1, 2, 2, 1], &[1.0, 0.0, 0.0, 2.0]);
        let gx = run(grad_input(1, [0; 4], 1, 1, [1, 3, 3, 1]), &[&gy, &w]);
        assert_eq!(gx.shape(), &[1, 3, 3, 1]);
        assert_eq!(gx.to_f64_vec(), vec![1.0, 10.0, 0.0, 100.0, 1002.0, 20.0, 0.0, 200.0, 2000.0]);
        // Stride 2, padding [0, 1, 0, 1], 2x2 ones: windows {(0..2, 0..2)} {(0..2, 2)}
        // {(2, 0..2)} {(2, 2)}; taps in the padding send nothing anywhere.
        let ones = floats(DType::F64, &[2, 2, 1, 1], &[1.0; 4]);
        let gy = floats(DType::F64, &[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]);
        let gx = run(grad_input(2, [0, 1, 0, 1], 1, 1, [1, 3, 3, 1]), &[&gy, &ones]);
        assert_eq!(gx.to_f64_vec(), vec![1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0]);
        // Dilation 2: the one output reads the four corners.
        let gy = floats(DType::F64, &[1, 1, 1, 1], &[1.0]);
        let gx = run(grad_input(1, [0; 4], 2, 1, [1, 3, 3, 1]), &[&gy, &w]);
        assert_eq!(gx.to_f64_vec(), vec![1.0, 0.0, 10.0, 0.0, 0.0, 0.0, 100.0, 0.0, 1000.0]);
    }

    #[test]
    fn conv2d_grad_filter_correlates_input_and_output_gradient() {
        // x = [[1, 2, 3], [4, 5, 6], [7, 8, 9]], gy = [1, 0, 0, 2] (VALID, 2x2):
        // gw[i, j] = x[i, j] + 2·x[1 + i, 1 + j] = [1 + 10, 2 + 12, 4 + 16, 5 + 18].
        let gy = floats(DType::F64, &[1, 2, 2, 1], &[1.0, 0.0, 0.0, 2.0]);
        let x = floats(DType::F64, &[1, 3, 3, 1], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        let gw = run(grad_filter(1, [0; 4], 1, 1, [2, 2, 1, 1]), &[&x, &gy]);
        assert_eq!((gw.shape(), gw.to_f64_vec()), (&[2, 2, 1, 1][..], vec![11.0, 14.0, 20.0, 23.0]));
        // Dilation 2: the kernel taps are the corners 1, 3, 7, 9.
        let gy = floats(DType::F64, &[1, 1, 1, 1], &[1.0]);
        let gw = run(grad_filter(1, [0; 4], 2, 1, [2, 2, 1, 1]), &[&x, &gy]);
        assert_eq!(gw.to_f64_vec(), vec![1.0, 3.0, 7.0, 9.0]);
    }

    #[test]
    fn conv2d_grads_keep_groups_apart() {
        // Two groups of one input channel and two outputs each (as in the
        // forward test): outputs 0, 1 read channel 0, outputs 2, 3 channel 1.
        let x = floats(DType::F64, &[1, 1, 1, 2], &[1.0, 2.0]);
        let w = floats(DType::F64, &[1, 1, 1, 4], &[10.0, 20.0, 30.0, 40.0]);
        let gy = floats(DType::F64, &[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
        // gx = [1·10 + 2·20, 3·30 + 4·40]; gw = [1·1, 1·2, 2·3, 2·4].
        let gx = run(grad_input(1, [0; 4], 1, 2, [1, 1, 1, 2]), &[&gy, &w]);
        assert_eq!(gx.to_f64_vec(), vec![50.0, 250.0]);
        let gw = run(grad_filter(1, [0; 4], 1, 2, [1, 1, 1, 4]), &[&x, &gy]);
        assert_eq!(gw.to_f64_vec(), vec![1.0, 2.0, 6.0, 8.0]);
    }

    #[test]
    fn conv2d_grads_are_the_adjoints_of_conv2d() {
        // <conv2d(x, w), gy> = <x, grad_input(gy, w)> = <w, grad_filter(x, gy)>
        // for random x, w, gy: conv2d is bilinear, and the adjoint of a linear
        // map is the unique map satisfying this identity.
        // (x shape, w shape, stride, padding, dilation, groups)
        type Case = ([usize; 4], [usize; 4], usize, [usize; 4], usize, usize);
        let cases: [Case; 7] = [
            ([1, 4, 4, 1], [3, 3, 1, 1], 1, [0; 4], 1, 1),
            ([2, 5, 4, 3], [3, 2, 3, 2], 1, [1, 1, 0, 1], 1, 1),
            ([1, 6, 5, 2], [3, 3, 2, 3], 2, [1, 1, 1, 1], 1, 1),
            ([1, 7, 6, 2], [2, 3, 2, 2], 2, [0, 1, 2, 0], 2, 1),
            ([2, 5, 5, 4], [3, 3, 2, 4], 1, [1, 1, 1, 1], 1, 2),
            ([1, 6, 6, 6], [2, 2, 2, 3], 3, [2, 0, 0, 2], 2, 3),
            ([1, 3, 3, 2], [3, 3, 2, 1], 1, [2, 2, 2, 2], 1, 1),
        ];
        for (k, (xs, ws, stride, padding, dilation, groups)) in cases.into_iter().enumerate() {
            let seed = 10 * k as u64;
            let (x, w) = (normal(&xs, seed), normal(&ws, seed + 1));
            let y = run(conv(stride, padding, dilation, groups), &[&x, &w]);
            let gy = normal(y.shape(), seed + 2);
            let gx = run(grad_input(stride, padding, dilation, groups, xs), &[&gy, &w]);
            let gw = run(grad_filter(stride, padding, dilation, groups, ws), &[&x, &gy]);
            let what = format!("case {k}");
            assert_near(dot(&y, &gy), dot(&x, &gx), &what);
            assert_near(dot(&y, &gy), dot(&w, &gw), &what);
        }
    }
}
