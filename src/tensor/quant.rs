//! The int8 quantized matrix product (`Op::QuantMatMul`): what a dense
//! layer of a quantized model computes, defined with scalar loops that the
//! CPU backend's VNNI kernels match bit for bit.
//!
//! Contract, for `x: f32[m, k]` (leading dims flattened), `w: i8[k, n]` and
//! per-column weight scales `s_w: f32[n]`:
//! - Each row of `x` is quantized on its own to `u8` (asymmetric, dynamic:
//!   ONNX Runtime's `DynamicQuantizeLinear`, per row instead of per
//!   tensor, so a row's result never depends on the other rows of the
//!   batch): `lo = min(0, min x)`, `hi = max(0, max x)`,
//!   `s = (hi − lo) / 255` (`1` when that is `0` or not finite),
//!   (`1` also when `1 / s` is not finite), `inv = 1 / s`,
//!   `z = clamp(round(−lo · inv), 0, 255)` and
//!   `q = clamp(clamp(round(x · inv), −512, 512) + z, 0, 255)`, rounding
//!   half to even.
//! - `acc[n] = Σ_k q[k] · w[k, n] − z · Σ_k w[k, n]` exactly, in `i32`
//!   (`k` below 2^16 keeps it in range).
//! - `y[n] = f32(acc[n]) · (s · s_w[n])`: one rounding for the integer,
//!   one for the scale product, one for the multiplication.
//! - A row holding a NaN or an infinity gives NaN in every column (its
//!   scale would be meaningless).
//! - With a static input range `[lo, hi]` (a fourth operand, `f32[2]`,
//!   from calibration: ONNX Runtime's `quantize_static`), every row is
//!   quantized with `RowQuant::from_range(lo, hi, …)` instead of its own
//!   min and max; elements outside the range saturate at level 0 or 255
//!   (the clamps above). A non-finite row still gives NaN.
//!
//! - A quantized convolution (`Op::QuantMatMul` with `Patches`) quantizes
//!   each image (`[H, W, C]`) as one row, as above, and multiplies the im2col
//!   rows of those levels (`patch_rows`: one row per output position, the
//!   image's zero point `z` (the level of 0.0) in the padding) by the `[KH ·
//!   KW · C, O]` weights, each output with its image's scale.
//!
//! `RowQuant` is shared with the CPU kernels so the quantization
//! parameters cannot drift; the kernels' own vector code is
//! compared against `quant_matmul_into` in their tests.
//!
//! Example: `x = [[1, -1]]`, `w = [[2], [3]]`, `s_w = [0.5]`: `s = 2/255`,
//! whose f32 inverse is just below 127.5, so `z = 127`, `q = [254, 0]`,
//! `acc = 254·2 + 0·3 − 127·5 = −127` and `y = −127 · (2/255 · 0.5) ≈
//! −0.498` (the exact product is −0.5).

use super::value::{array_from, Data, Tensor};
use crate::diag::Diagnostic;
use crate::ir::Patches;

/// How one row of activations is quantized to `u8`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowQuant {
    /// The step between two `u8` levels.
    pub scale: f32,
    /// `1 / scale`, which every element is multiplied by.
    pub inv: f32,
    /// The level that stands for `0.0`.
    pub zero: i32,
    /// The row holds a NaN or an infinity.
    pub non_finite: bool,
}

impl RowQuant {
    /// The parameters for a row whose smallest and largest elements are
    /// `min` and `max` (`non_finite`: it holds a NaN or an infinity).
    pub fn from_range(min: f32, max: f32, non_finite: bool) -> RowQuant {
        let lo = min.min(0.0);
        let hi = max.max(0.0);
        let mut scale = (hi - lo) / 255.0;
        // A range too small for `1 / scale` to be finite, or too large to
        // have a finite scale, gets 1 (its levels then barely differ).
        if !(scale > 0.0 && scale.is_finite() && (1.0 / scale).is_finite()) {
            scale = 1.0;
        }
        let inv = 1.0 / scale;
        let zero = ((-lo * inv).round_ties_even() as i32).clamp(0, 255);
        RowQuant { scale, inv, zero, non_finite }
    }

    /// The quantization of `row`: from its own min and max, or from the
    /// static input range `range` when there is one.
    pub fn for_row(row: &[f32], range: Option<[f32; 2]>) -> RowQuant {
        match range {
            Some([lo, hi]) => RowQuant::from_range(lo, hi, row.iter().any(|v| !v.is_finite())),
            None => RowQuant::of(row),
        }
    }

    /// The quantization of `row` from its own min and max.
    pub fn of(row: &[f32]) -> RowQuant {
        let (mut min, mut max, mut non_finite) = (0.0f32, 0.0f32, false);
        for &v in row {
            non_finite |= !v.is_finite();
            min = min.min(v);
            max = max.max(v);
        }
        RowQuant::from_range(min, max, non_finite)
    }

    /// The `u8` level of `v` (a finite element of the row). The rounded
    /// ratio is clamped to ±512 before it becomes an integer (a level is
    /// 0..=255 anyway), so no sum overflows; a NaN ratio counts as 0.
    pub fn level(&self, v: f32) -> u8 {
        ((v * self.inv).round_ties_even().clamp(-512.0, 512.0) as i32 + self.zero).clamp(0, 255) as u8
    }

    /// The output element for the exact integer sum `acc = Σ q·w` of a
    /// column whose weights sum to `col_sum` and whose scale is `w_scale`.
    pub fn output(&self, acc: i32, col_sum: i32, w_scale: f32) -> f32 {
        if self.non_finite {
            return f32::NAN;
        }
        (acc.wrapping_sub(self.zero.wrapping_mul(col_sum))) as f32 * (self.scale * w_scale)
    }
}

/// `out = quant_matmul(x, w, w_scale)` for row-major `x: [m, k]` and
/// `w: [k, n]` (`out`: `m · n`), by the definition in the module docs;
/// `range` is the static input range, if any.
pub fn quant_matmul_into(
    x: &[f32],
    w: &[i8],
    w_scale: &[f32],
    range: Option<[f32; 2]>,
    out: &mut [f32],
    [m, k, n]: [usize; 3],
) {
    let mut levels = vec![0u8; m * k];
    let quants = quantize_rows(x, [m, k], range, &mut levels);
    quantized_rows_into(&levels, &quants, w, w_scale, out, [m, k, n]);
}

/// Each `k`-element row of `x` quantized (by its own range, or `range`):
/// its levels into `levels` (0 for a non-finite element), its parameters
/// returned.
fn quantize_rows(x: &[f32], [m, k]: [usize; 2], range: Option<[f32; 2]>, levels: &mut [u8]) -> Vec<RowQuant> {
    (0..m)
        .map(|i| {
            let (row, levels) = (&x[i * k..(i + 1) * k], &mut levels[i * k..(i + 1) * k]);
            let q = RowQuant::for_row(row, range);
            for (l, &v) in levels.iter_mut().zip(row) {
                *l = if v.is_finite() { q.level(v) } else { 0 };
            }
            q
        })
        .collect()
}

/// The integer product and its scaling: `out[i, j] = quants[i].output(Σ_p
/// levels[i, p] · w[p, j], Σ_p w[p, j], w_scale[j])` for `m × k` levels.
fn quantized_rows_into(
    levels: &[u8],
    quants: &[RowQuant],
    w: &[i8],
    w_scale: &[f32],
    out: &mut [f32],
    [m, k, n]: [usize; 3],
) {
    let col_sums = column_sums(w, k, n);
    let mut acc = vec![0i32; n];
    for i in 0..m {
        acc.fill(0);
        for (p, &l) in levels[i * k..(i + 1) * k].iter().enumerate() {
            for (a, &wv) in acc.iter_mut().zip(&w[p * n..(p + 1) * n]) {
                *a += i32::from(l) * i32::from(wv);
            }
        }
        for j in 0..n {
            out[i * n + j] = quants[i].output(acc[j], col_sums[j], w_scale[j]);
        }
    }
}

/// The quantized convolution of the NHWC input `x` of shape `shape` by
/// `w: i8[KH, KW, C, n]` (module docs): `out` is `[N, OH, OW, n]`.
pub fn quant_conv_into(
    x: &[f32],
    shape: [usize; 4],
    p: &Patches,
    (w, w_scale, range): (&[i8], &[f32], Option<[f32; 2]>),
    out: &mut [f32],
) {
    let Some([_, oh, ow, k]) = p.rows_shape(&shape) else { return };
    let image = shape[1] * shape[2] * shape[3];
    let mut levels = vec![0u8; x.len()];
    let images = quantize_rows(x, [shape[0], image], range, &mut levels);
    let m = shape[0] * oh * ow;
    let mut cols = vec![0u8; m * k];
    patch_rows(&levels, shape, p, 0..m, (&mut cols, k), |b| images[b].zero as u8);
    let quants: Vec<RowQuant> = (0..m).map(|r| images[r / (oh * ow)]).collect();
    quantized_rows_into(&cols, &quants, w, w_scale, out, [m, k, w_scale.len()]);
}

/// `Σ_k w[k, j]` for each column `j` of row-major `w: [k, n]`.
pub fn column_sums(w: &[i8], k: usize, n: usize) -> Vec<i32> {
    let mut sums = vec![0i32; n];
    for p in 0..k {
        for (s, &v) in sums.iter_mut().zip(&w[p * n..(p + 1) * n]) {
            *s += i32::from(v);
        }
    }
    sums
}

/// Rows `rows` of the im2col patches (`Patches`) of the NHWC levels `x`
/// of shape `shape` into `out` (rows `stride` apart, each starting with
/// its `KH · KW · C` levels): the window's taps `i`, `j`, `c` in order,
/// `padding(image)` where a tap is in the padding.
///
/// Output row by output row (`b`, `y`): where a window row lies inside the
/// input it is one run of `KW · C` levels (without dilation), copied as
/// such; the edges go tap by tap.
pub fn patch_rows(
    x: &[u8],
    shape: [usize; 4],
    p: &Patches,
    rows: std::ops::Range<usize>,
    (out, stride): (&mut [u8], usize),
    padding: impl Fn(usize) -> u8,
) {
    let [_, h, w, c] = shape;
    let Some([_, oh, ow, _]) = p.rows_shape(&shape) else { return };
    let ([kh, kw], line, [sy, sx]) = (p.kernel, p.kernel[1] * c, p.stride);
    let (pad_top, pad_left) = (p.padding[0], p.padding[2]);
    // The columns whose window rows are whole runs inside the input.
    let first_inside = pad_left.div_ceil(sx);
    let past_inside = match p.dilation[1] {
        1 if w + pad_left >= kw => ((w + pad_left - kw) / sx + 1).min(ow),
        _ => 0,
    };
    let mut row = rows.start;
    while row < rows.end {
        let (b, y, first) = (row / (oh * ow), row / ow % oh, row % ow);
        let last = (first + rows.end - row).min(ow);
        let pad = padding(b);
        // Each kernel row's input row (its first level), or none in the
        // padding.
        let input_rows: Vec<Option<usize>> = (0..kh)
            .map(|i| {
                (y * sy + i * p.dilation[0]).checked_sub(pad_top).filter(|&r| r < h).map(|iy| (b * h + iy) * w * c)
            })
            .collect();
        // Output rows and their kernel rows in order: a copy may spill past
        // its run into the next one (rewritten after it) or the row's
        // unused tail, never into a row already made.
        for xo in first..last {
            let out = &mut out[(row - rows.start + xo - first) * stride..];
            let inside = (first_inside..past_inside).contains(&xo);
            for (i, input_row) in input_rows.iter().enumerate() {
                let dst = &mut out[i * line..];
                match input_row {
                    None => dst[..line].fill(pad),
                    Some(start) if inside => copy_run(dst, &x[start + (xo * sx - pad_left) * c..], line),
                    Some(start) => {
                        for j in 0..kw {
                            let ix = (xo * sx + j * p.dilation[1]).checked_sub(pad_left).filter(|&q| q < w);
                            match ix {
                                Some(ix) => copy_run(&mut dst[j * c..], &x[start + ix * c..], c),
                                None => dst[j * c..(j + 1) * c].fill(pad),
                            }
                        }
                    }
                }
            }
        }
        row += last - first;
    }
}

/// The first `len` bytes of `src` to the start of `dst`, in whole 8-byte
/// words where both have room for them (then bytes past `len` in `dst` are
/// overwritten too): a `memcpy` call per window row of a few bytes cost
/// more than the copy.
fn copy_run(dst: &mut [u8], src: &[u8], len: usize) {
    let words = len.div_ceil(8);
    if dst.len() < 8 * words || src.len() < 8 * words {
        return dst[..len].copy_from_slice(&src[..len]);
    }
    for (d, s) in dst.chunks_exact_mut(8).zip(src.chunks_exact(8)).take(words) {
        let mut word = [0u8; 8];
        word.copy_from_slice(s);
        d.copy_from_slice(&word);
    }
}

/// `x @ w` quantized: `x: f32[..., k]`, `w: i8[k, n]` (kept as `i32`
/// storage holding `i8` values), `w_scale: f32[n]`, and the static input
/// range `range: f32[2]` when there is one; with `patches`, `x` is an
/// NHWC input whose im2col rows are multiplied, and `w` HWIO.
pub fn quant_matmul(
    x: &Tensor,
    w: &Tensor,
    w_scale: &Tensor,
    range: Option<&Tensor>,
    patches: Option<&Patches>,
) -> Result<Data, Diagnostic> {
    let (Data::F32(xa), Data::I32(wa), Data::F32(sa)) = (x.data(), w.data(), w_scale.data()) else {
        return Err(Diagnostic::internal("quant_matmul: operands of the wrong storage"));
    };
    let xs: Vec<f32> = xa.iter().copied().collect();
    let n = w.shape().last().copied().unwrap_or(0);
    let ws: Vec<i8> = wa.iter().map(|&v| v as i8).collect();
    let ss: Vec<f32> = sa.iter().copied().collect();
    let range = match range.map(Tensor::data) {
        Some(Data::F32(r)) if r.len() == 2 => {
            let v: Vec<f32> = r.iter().copied().collect();
            Some([v[0], v[1]])
        }
        Some(_) => return Err(Diagnostic::internal("quant_matmul: a range that is not f32[2]")),
        None => None,
    };
    let (out, mut shape) = match patches {
        Some(p) => {
            let shape =
                <[usize; 4]>::try_from(x.shape()).map_err(|_| Diagnostic::internal("quant_conv2d: x not NHWC"))?;
            let rows = p.rows_shape(&shape).ok_or_else(|| Diagnostic::internal("quant_conv2d: the window"))?;
            let mut out = vec![0.0f32; rows[..3].iter().product::<usize>() * n];
            quant_conv_into(&xs, shape, p, (&ws, &ss, range), &mut out);
            (out, rows[..3].to_vec())
        }
        None => {
            let (&k, lead) = x.shape().split_last().ok_or_else(|| Diagnostic::internal("quant_matmul: scalar x"))?;
            let m: usize = lead.iter().product();
            let mut out = vec![0.0f32; m * n];
            quant_matmul_into(&xs, &ws, &ss, range, &mut out, [m, k, n]);
            (out, lead.to_vec())
        }
    };
    shape.push(n);
    Ok(Data::F32(array_from(&shape, out)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_static_range_saturates_and_keeps_non_finite_rows_nan() {
        // Range [-1, 1]: scale 2/255, zero 127 (as the module example);
        // 5.0 saturates at level 255 and -3.0 at level 0.
        let mut out = [0.0f32; 3];
        let x = [5.0, -3.0, 0.5, 0.5, f32::INFINITY, 0.0];
        quant_matmul_into(&x, &[1, 1], &[1.0], Some([-1.0, 1.0]), &mut out, [3, 2, 1]);
        let q = RowQuant::from_range(-1.0, 1.0, false);
        assert_eq!((q.zero, q.level(5.0), q.level(-3.0)), (127, 255, 0));
        // Levels 255 and 0: 255 − 127 · 2 = 1 level.
        assert_eq!(out[0], q.scale);
        let half = f32::from(q.level(0.5)) - 127.0;
        assert_eq!(out[1], (2.0 * half) * q.scale);
        assert!(out[2].is_nan());
    }

    #[test]
    fn the_module_example() {
        let mut out = [0.0f32];
        quant_matmul_into(&[1.0, -1.0], &[2, 3], &[0.5], None, &mut out, [1, 2, 1]);
        let q = RowQuant::of(&[1.0, -1.0]);
        assert_eq!((q.zero, q.level(1.0), q.level(-1.0)), (127, 254, 0));
        assert_eq!(out[0], -127.0 * ((2.0f32 / 255.0) * 0.5));
    }

    #[test]
    fn a_row_of_zeros_and_a_non_finite_row() {
        let mut out = [1.0f32; 4];
        quant_matmul_into(&[0.0, 0.0, f32::NAN, 1.0], &[1, 2, 3, 4], &[1.0, 1.0], None, &mut out, [2, 2, 2]);
        assert_eq!(&out[..2], &[0.0, 0.0]);
        assert!(out[2].is_nan() && out[3].is_nan());
    }

    #[test]
    fn close_to_the_f32_product() {
        // Levels 1/255 of the row's range apart: the error per product is
        // at most half a level times |w|.
        let (m, k, n) = (3, 37, 5);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 97) as f32 / 48.0 - 1.0).collect();
        let w: Vec<i8> = (0..k * n).map(|i| ((i * 31) % 255) as i8).collect();
        let s: Vec<f32> = (0..n).map(|j| 0.01 * (j + 1) as f32).collect();
        let mut out = vec![0.0; m * n];
        quant_matmul_into(&x, &w, &s, None, &mut out, [m, k, n]);
        for i in 0..m {
            let q = RowQuant::of(&x[i * k..(i + 1) * k]);
            for j in 0..n {
                let exact: f32 = (0..k).map(|p| x[i * k + p] * f32::from(w[p * n + j]) * s[j]).sum();
                let bound: f32 = (0..k).map(|p| 0.5 * q.scale * f32::from(w[p * n + j]).abs() * s[j]).sum();
                assert!((out[i * n + j] - exact).abs() <= bound * 1.01 + 1e-5, "{i},{j}");
            }
        }
    }
}
