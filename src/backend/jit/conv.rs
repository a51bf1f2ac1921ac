//! Convolutions on the JIT: NHWC input, HWIO weights, lowered to one matrix
//! product over an im2col buffer (the layout TensorFlow's CPU kernels and
//! oneDNN's reference path use).
//!
//! Contract: with `m = N·OH·OW` output positions and `k = KH·KW·C` taps,
//! - forward: `cols[m, k]` holds each output position's input window (zero
//!   where a tap falls in the padding), and `y[m, O] = cols · w[k, O]`;
//! - gradient with respect to the weights: `gw[k, O] = colsᵀ · gy[m, O]`;
//! - gradient with respect to the input: `cols = gy · wᵀ`, then each
//!   window's column is added back into `gx` (col2im), skipping padding.
//!
//! Only `groups = 1` is lowered (grouped convolutions stay on the
//! interpreter). Results equal the interpreter's up to the summation order
//! of the product; they do not depend on the thread count (see `gemm`).
//!
//! Example: a 3x3 SAME convolution of `[64, 28, 28, 1]` into 16 channels is
//! `cols[50176, 9] · w[9, 16]`.

use super::gemm::sgemm;
use crate::ir::Op;

/// Which of the three convolution ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConvKind {
    /// `(x, w) → y`
    Forward,
    /// `(gy, w) → gx`
    GradInput,
    /// `(x, gy) → gw`
    GradFilter,
}

/// One convolution's geometry.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Conv {
    pub kind: ConvKind,
    /// Input `[N, H, W, C]`, weights `[KH, KW, C, O]`, output `[N, OH, OW, O]`.
    x: [usize; 4],
    w: [usize; 4],
    y: [usize; 4],
    stride: [usize; 2],
    padding: [usize; 4],
    dilation: [usize; 2],
}

impl Conv {
    /// The geometry of `op` with operand shapes `a`, `b` and result shape
    /// `out`, or `None` for what is not lowered (not a convolution, groups,
    /// shapes that are not 4-D).
    pub fn of(op: &Op, a: &[usize], b: &[usize], out: &[usize]) -> Option<Conv> {
        let four = |s: &[usize]| <[usize; 4]>::try_from(s).ok();
        let (kind, stride, padding, dilation, groups, x, w, y) = match op {
            Op::Conv2d { stride, padding, dilation, groups } => {
                (ConvKind::Forward, stride, padding, dilation, groups, four(a)?, four(b)?, four(out)?)
            }
            Op::Conv2dGradInput { stride, padding, dilation, groups, .. } => {
                (ConvKind::GradInput, stride, padding, dilation, groups, four(out)?, four(b)?, four(a)?)
            }
            Op::Conv2dGradFilter { stride, padding, dilation, groups, .. } => {
                (ConvKind::GradFilter, stride, padding, dilation, groups, four(a)?, four(out)?, four(b)?)
            }
            _ => return None,
        };
        let fits = *groups == 1 && x[3] == w[2] && y[3] == w[3] && y[0] == x[0];
        fits.then_some(Conv { kind, x, w, y, stride: *stride, padding: *padding, dilation: *dilation })
    }

    /// Output positions and taps: the im2col buffer is `m × k`.
    fn m_k(&self) -> (usize, usize) {
        (self.y[0] * self.y[1] * self.y[2], self.w[0] * self.w[1] * self.w[2])
    }

    /// Elements of the im2col buffer.
    pub fn cols_len(&self) -> usize {
        let (m, k) = self.m_k();
        m * k
    }

    /// Elements of each operand and of the result.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let (x, w, y) = (self.x.iter().product(), self.w.iter().product(), self.y.iter().product());
        match self.kind {
            ConvKind::Forward => (x, w, y),
            ConvKind::GradInput => (y, w, x),
            ConvKind::GradFilter => (x, y, w),
        }
    }

    /// Calls `f(row, tap, taps, x_offset)` for every run of `taps`
    /// consecutive window positions of one kernel row, in row-major window
    /// order per output position: `row` is the output position, `tap` the
    /// run's first window position (`i·KW + j`); `x_offset` is the flat
    /// offset in `x` of the run's `taps·C` contiguous elements, or `None`
    /// for a run in the padding. Without dilation along the width a kernel
    /// row is at most three runs (padding, input, padding), so im2col and
    /// col2im move `KW·C` elements at a time rather than one tap's `C`.
    fn for_each_run(&self, mut f: impl FnMut(usize, usize, usize, Option<usize>)) {
        let ([n, h, wd, c], [kh, kw, _, _], [_, oh, ow, _]) = (self.x, self.w, self.y);
        let ([sy, sx], [dy, dx]) = (self.stride, self.dilation);
        let mut row = 0;
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    // Input column of tap `j` is `ox·SX + j·DX - left`.
                    let origin = ox * sx;
                    for i in 0..kh {
                        let iy = (oy * sy + i * dy).checked_sub(self.padding[0]).filter(|&r| r < h);
                        let Some(iy) = iy else {
                            f(row, i * kw, kw, None);
                            continue;
                        };
                        let at = |ix: usize| ((b * h + iy) * wd + ix) * c;
                        if dx == 1 {
                            // Taps `lo..hi` fall inside the input.
                            let lo = self.padding[2].saturating_sub(origin).min(kw);
                            let hi = (wd + self.padding[2]).saturating_sub(origin).clamp(lo, kw);
                            if lo > 0 {
                                f(row, i * kw, lo, None);
                            }
                            if hi > lo {
                                f(row, i * kw + lo, hi - lo, Some(at(origin + lo - self.padding[2])));
                            }
                            if kw > hi {
                                f(row, i * kw + hi, kw - hi, None);
                            }
                        } else {
                            for j in 0..kw {
                                let ix = (origin + j * dx).checked_sub(self.padding[2]).filter(|&q| q < wd);
                                f(row, i * kw + j, 1, ix.map(at));
                            }
                        }
                    }
                    row += 1;
                }
            }
        }
    }

    /// Runs the convolution: `a`, `b` are the op's operands, `dst` its
    /// result, `cols` scratch of `cols_len()` elements; `threads` share the
    /// matrix product.
    ///
    /// # Safety
    /// `a` and `b` must address `sizes()` elements each; `dst` must hold the
    /// result's and `cols` `cols_len()` elements.
    pub unsafe fn run(&self, a: *const f32, b: *const f32, dst: &mut [f32], cols: &mut [f32], threads: usize) {
        let (m, k) = self.m_k();
        let (na, nb, _) = self.sizes();
        let c = self.x[3];
        let o = self.w[3];
        // SAFETY: the caller's contract on `a` and `b`.
        let (a, b) = unsafe { (std::slice::from_raw_parts(a, na), std::slice::from_raw_parts(b, nb)) };
        match self.kind {
            ConvKind::Forward | ConvKind::GradFilter => {
                self.for_each_run(|row, tap, taps, at| {
                    let to = &mut cols[row * k + tap * c..row * k + (tap + taps) * c];
                    match at {
                        Some(at) => copy_run(to, &a[at..at + taps * c]),
                        None => to.fill(0.0),
                    }
                });
                // SAFETY: `cols` is m × k row-major; `b` is k × o (weights)
                // or m × o (the output gradient), row-major.
                unsafe {
                    if self.kind == ConvKind::Forward {
                        sgemm(dst, (cols.as_ptr(), k, 1), (b.as_ptr(), o, 1), m, k, o, threads)
                    } else {
                        sgemm(dst, (cols.as_ptr(), 1, k), (b.as_ptr(), o, 1), k, m, o, threads)
                    }
                }
            }
            ConvKind::GradInput => {
                // SAFETY: `a` (gy) is m × o row-major; `b` (w) is k × o
                // row-major, read transposed as o × k.
                unsafe { sgemm(cols, (a.as_ptr(), o, 1), (b.as_ptr(), 1, o), m, o, k, threads) };
                let gx = &mut dst[..self.x.iter().product::<usize>()];
                gx.fill(0.0);
                // Runs are visited in the order taps were, so every element
                // of `gx` adds its terms in the same order.
                self.for_each_run(|row, tap, taps, at| {
                    if let Some(at) = at {
                        let from = &cols[row * k + tap * c..row * k + (tap + taps) * c];
                        for (g, &v) in gx[at..at + taps * c].iter_mut().zip(from) {
                            *g += v;
                        }
                    }
                });
            }
        }
    }
}

/// `to = from` for the short runs of im2col: whole 4-element chunks and a
/// remainder of up to 3, copied inline, since a call to `memcpy` per run of
/// a few elements costs more than the copy; long runs take `memcpy`.
#[inline(always)]
fn copy_run(to: &mut [f32], from: &[f32]) {
    if to.len() >= 64 {
        return to.copy_from_slice(from);
    }
    let (mut t, mut f) = (to.chunks_exact_mut(4), from.chunks_exact(4));
    for (t, f) in (&mut t).zip(&mut f) {
        t.copy_from_slice(f);
    }
    let (t, f) = (t.into_remainder(), f.remainder());
    if t.len() >= 2 {
        t[..2].copy_from_slice(&f[..2]);
    }
    if t.len() % 2 == 1 {
        t[t.len() - 1] = f[t.len() - 1];
    }
}
