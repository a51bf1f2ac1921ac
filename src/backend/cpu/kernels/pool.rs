//! Native `f32` pooling and its gradient on the JIT: a fast path for
//! disjoint windows (no padding, `stride >= size` on both axes — the
//! `max_pool2d(x, 2)` of every CNN), the interpreter's code otherwise.
//!
//! Contract: results are bit-identical with the interpreter's
//! (`interp::pool_slices` / `pool_grad_slices`): each output element folds
//! its window in row-major window order with the same operations (`max_nan`
//! from `-inf`; a sum from `0` divided by the count), and the max-pool
//! gradient goes to each window's FIRST maximal element (the first NaN when
//! the maximum is NaN) as `0 + gy`, every other input element being `0`.
//! Because the windows are disjoint, each input element receives at most one
//! gradient, so the gradient is written once instead of zero-filled and
//! accumulated, and only elements no window covers are zeroed. The loops run
//! over the contiguous channels of each tap in lanes of 16 so that they
//! vectorize. Where the machine has AVX-512 (`simd`), the gradient of a max
//! pool over whole groups of 16 channels is written with intrinsics:
//! one register per tap and lane masks for "larger", "NaN" and "already
//! taken" (the portable gradient loop, even compiled for AVX-512, spent
//! most of its time blending 128-bit lanes: 0.70 -> 0.45 ms on the bench
//! CNN's first pool); the forward loops are compiled for AVX-512
//! (`simd::wide`; intrinsics measured no faster there). The gradient of a
//! 2x2 max pool that a convolution fused and recorded the first maxima of
//! (`conv_direct::PostOps::first_max`) is written from those masks
//! (`max_pool_grad_from_first_max`), without reading the input. Work is
//! split over the batch (disjoint outputs), so results do not depend on
//! the thread count.
//!
//! Example: `max_pool2d` of `[64, 28, 28, 16]` with a 2x2 window reads four
//! 16-channel runs per output position and writes one 16-channel run; its
//! gradient writes the four runs, `0 + gy` in the first maximal one per
//! channel and `0` elsewhere.

use super::simd::wide;
use crate::diag::Diagnostic;
use crate::ir::infer::window_output;
use crate::ir::DType;
use crate::ir::PoolKind;
use crate::tensor::{pool_grad_slices, pool_slices, PoolParams};

/// Channels processed together; a multiple of every vector width.
const LANES: usize = 16;

/// The geometry of a disjoint-window pooling, in elements.
struct Disjoint {
    /// Input `[N, H, W, C]` and output height and width.
    x: [usize; 4],
    oh: usize,
    ow: usize,
    size: [usize; 2],
    stride: [usize; 2],
}

impl Disjoint {
    /// The fast-path geometry of pooling `xs` into `ys`, or `None` when the
    /// windows may overlap or be padded (or the shapes do not fit).
    fn of(xs: &[usize], ys: &[usize], p: &PoolParams) -> Option<Disjoint> {
        let ([n, h, w, c], [yn, oh, ow, yc]) = (<[usize; 4]>::try_from(xs).ok()?, <[usize; 4]>::try_from(ys).ok()?);
        let fits = p.padding == [0; 4]
            && p.stride[0] >= p.size[0]
            && p.stride[1] >= p.size[1]
            && yn == n
            && yc == c
            && window_output(h, p.size[0], p.stride[0], 1, 0) == Some(oh)
            && window_output(w, p.size[1], p.stride[1], 1, 0) == Some(ow);
        fits.then_some(Disjoint { x: [n, h, w, c], oh, ow, size: p.size, stride: p.stride })
    }

    /// Whether every input element lies in a window.
    fn covers(&self) -> bool {
        self.size == self.stride && self.oh * self.stride[0] == self.x[1] && self.ow * self.stride[1] == self.x[2]
    }

    /// Calls `f(out_offset, taps)` for every output position of batch
    /// element `b`, with the offsets of channel 0 of the window's elements
    /// in row-major window order (all in bounds: there is no padding).
    #[inline(always)]
    fn for_each_window(&self, b: usize, taps: &mut Vec<usize>, mut f: impl FnMut(usize, &[usize])) {
        let [_, h, w, c] = self.x;
        for oy in 0..self.oh {
            for ox in 0..self.ow {
                taps.clear();
                for i in 0..self.size[0] {
                    let row = (b * h + oy * self.stride[0] + i) * w + ox * self.stride[1];
                    taps.extend((0..self.size[1]).map(|j| (row + j) * c));
                }
                f(((b * self.oh + oy) * self.ow + ox) * c, taps);
            }
        }
    }
}

/// Pools `x` (shape `xs`) into `out` (shape `ys`); `threads` share the
/// batch.
pub(in crate::backend::cpu) fn pool(
    x: &[f32],
    xs: &[usize],
    ys: &[usize],
    p: PoolParams,
    out: &mut [f32],
    threads: usize,
) -> Result<(), Diagnostic> {
    let Some(d) = Disjoint::of(xs, ys, &p) else {
        return pool_slices(x, xs, ys, p, out).map_err(|e| e.diagnostic("pooling", DType::F32));
    };
    let per = d.oh * d.ow * d.x[3];
    for_each_batch(out, per, threads, |b, out| wide(|| pool_batch(&d, &p, x, b, out)));
    Ok(())
}

/// Pools batch element `b` into `out` (its `oh × ow × c` outputs).
#[inline(always)]
fn pool_batch(d: &Disjoint, p: &PoolParams, x: &[f32], b: usize, out: &mut [f32]) {
    let (c, per) = (d.x[3], d.oh * d.ow * d.x[3]);
    let count = (p.size[0] * p.size[1]) as f32;
    let mut taps = Vec::with_capacity(p.size[0] * p.size[1]);
    d.for_each_window(b, &mut taps, |o, taps| {
        let y = &mut out[o - b * per..o - b * per + c];
        match p.kind {
            PoolKind::Max => groups(c, |c0, whole| match whole {
                true => max_lanes::<LANES>(x, taps, c0, y),
                false => max_lanes::<1>(x, taps, c0, y),
            }),
            PoolKind::Avg => groups(c, |c0, whole| match whole {
                true => avg_lanes::<LANES>(x, taps, c0, y, count),
                false => avg_lanes::<1>(x, taps, c0, y, count),
            }),
        }
    });
}

/// The gradient of `pool` with respect to `x` (shape `xs`) into `gx`, given
/// the gradient `gy` of its result (shape `ys`); `threads` share the batch.
pub(in crate::backend::cpu) fn pool_grad(
    x: &[f32],
    gy: &[f32],
    xs: &[usize],
    ys: &[usize],
    p: PoolParams,
    gx: &mut [f32],
    threads: usize,
) -> Result<(), Diagnostic> {
    let Some(d) = Disjoint::of(xs, ys, &p) else {
        return pool_grad_slices(x, gy, xs, ys, p, gx).map_err(|e| e.diagnostic("pooling", DType::F32));
    };
    let per = d.x[1] * d.x[2] * d.x[3];
    let avx512 = super::simd::avx512();
    for_each_batch(gx, per, threads, |b, gx| pool_grad_batch(&d, &p, x, gy, b, gx, avx512));
    Ok(())
}

/// How many first-maximum masks a 2x2 max pool into `pooled` (`[N, OH, OW,
/// C]`) records (`conv_direct::PostOps::first_max`): one per pooled
/// position and vector of 16 channels, in that order.
pub(in crate::backend::cpu) fn first_max_len(pooled: &[usize]) -> usize {
    match pooled.split_last() {
        Some((c, positions)) => positions.iter().product::<usize>() * c.div_ceil(LANES),
        None => 0,
    }
}

/// The lanes of vector `v` (channels `16v..16v + 16`) among `c` channels.
fn lanes_of(v: usize, c: usize) -> u16 {
    match c - v * LANES {
        whole if whole >= LANES => u16::MAX,
        part => (1 << part) - 1,
    }
}

/// The geometry of a 2x2 max pool's gradient computed from recorded first
/// maxima: its input `x` (`[N, H, W, C]`, even `H` and `W`) and the masks
/// per pooled position (one per vector of 16 channels).
struct FromMaxima {
    x: [usize; 4],
    vectors: usize,
}

impl FromMaxima {
    /// The geometry of `xs`, once the masks and the pooled gradient `gy`
    /// are checked to cover it, `gx_len` (if given) to hold the input's
    /// gradient, and the machine to have AVX-512 (the masks' only writer).
    fn check(first_max: &[u64], gy: &[f32], xs: &[usize], gx_len: Option<usize>) -> Result<FromMaxima, Diagnostic> {
        let internal =
            |what: &str| Diagnostic::internal(format!("jit: a max-pool gradient from recorded maxima {what}"));
        let [n, h, w, c] = <[usize; 4]>::try_from(xs).map_err(|_| internal("needs a 4-d input"))?;
        let pooled = [n, h / 2, w / 2, c];
        let fits = h % 2 == 0
            && w % 2 == 0
            && first_max.len() >= first_max_len(&pooled)
            && gy.len() >= pooled.iter().product()
            && gx_len.is_none_or(|len| len >= n * h * w * c);
        if !fits || !super::simd::avx512() {
            return Err(internal("got buffers of the wrong sizes, or runs without AVX-512"));
        }
        Ok(FromMaxima { x: [n, h, w, c], vectors: c.div_ceil(LANES) })
    }
}

/// The gradient of a 2x2, stride-2, unpadded max pool of `x: xs` (even
/// height and width) into `gx`, given the gradient `gy` of its result and
/// the first-maximum masks a convolution recorded while pooling `x`
/// (`conv_direct::PostOps::first_max`): the same values as `pool_grad`
/// (`0 + gy` at each window's first maximal element, `0` elsewhere)
/// without reading `x` again, which for the bench CNN's first layer is 3.2
/// MB against 0.1 MB of masks. `threads` share the batch.
pub(in crate::backend::cpu) fn max_pool_grad_from_first_max(
    first_max: &[u64],
    gy: &[f32],
    xs: &[usize],
    gx: &mut [f32],
    threads: usize,
) -> Result<(), Diagnostic> {
    let FromMaxima { x: [n, h, w, c], vectors } = FromMaxima::check(first_max, gy, xs, Some(gx.len()))?;
    let (ph, pw) = (h / 2, w / 2);
    #[cfg(target_arch = "x86_64")]
    for_each_batch(&mut gx[..n * h * w * c], h * w * c, threads, |b, gx| {
        let (first_max, gy) = (&first_max[b * ph * pw * vectors..], &gy[b * ph * pw * c..]);
        // SAFETY: `avx512()` holds, and the slices hold batch element `b`'s
        // masks, pooled gradient and input gradient (checked above).
        unsafe { max_grad_from_first_max_batch(first_max, gy, [h, w, c], gx) }
    });
    #[cfg(not(target_arch = "x86_64"))]
    let _ = threads;
    Ok(())
}

/// `max_pool_grad_from_first_max` for one batch element (`hwc`: its input's
/// height, width and channels).
///
/// # Safety
/// The CPU must have AVX-512F; the slices hold the batch element's masks,
/// pooled gradient and input gradient.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn max_grad_from_first_max_batch(first_max: &[u64], gy: &[f32], [h, w, c]: [usize; 3], gx: &mut [f32]) {
    use std::arch::x86_64::*;
    let vectors = c.div_ceil(LANES);
    let (gy, gx) = (gy.as_ptr(), gx.as_mut_ptr());
    for py in 0..h / 2 {
        for px in 0..w / 2 {
            let pooled = py * (w / 2) + px;
            for v in 0..vectors {
                let lanes = lanes_of(v, c);
                // SAFETY (every load and store): inside the batch element's
                // buffers, the masked-off lanes neither read nor written.
                let g = unsafe { _mm512_maskz_loadu_ps(lanes, gy.add(pooled * c + v * LANES)) };
                let g = _mm512_add_ps(_mm512_setzero_ps(), g);
                let taps = first_max[pooled * vectors + v];
                for t in 0..4 {
                    let at = ((2 * py + t / 2) * w + 2 * px + t % 2) * c + v * LANES;
                    let first = (taps >> (16 * t)) as __mmask16;
                    unsafe { _mm512_mask_storeu_ps(gx.add(at), lanes, _mm512_maskz_mov_ps(first, g)) };
                }
            }
        }
    }
}

/// The sums over every axis but the channels (a bias gradient) of the
/// max-pool gradient `max_pool_grad_from_first_max` writes, into `out`
/// (`c` values), computed from the pooled gradient `gy` and the first
/// maxima alone: bit for bit the column sums `reduce` takes of the written
/// gradient. That sum adds the gradient's elements in row-major order from
/// `+0`; the zeros it adds leave every partial sum as it is (a sum that
/// starts at `+0` and adds no `-0` is never `-0`), so adding, for each
/// image row, each window's `0 + gy` in the lanes where the row holds the
/// window's first maximum, window by window, adds the same values in the
/// same order. It reads a quarter of the gradient's bytes.
pub(in crate::backend::cpu) fn max_pool_grad_column_sums(
    first_max: &[u64],
    gy: &[f32],
    xs: &[usize],
    out: &mut [f32],
) -> Result<(), Diagnostic> {
    let FromMaxima { x: [n, h, w, c], .. } = FromMaxima::check(first_max, gy, xs, None)?;
    if out.len() < c {
        return Err(Diagnostic::internal("jit: column sums from recorded maxima into too few values"));
    }
    let (ph, pw) = (h / 2, w / 2);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `avx512()` holds and the sizes were checked above.
    unsafe {
        max_grad_column_sums(first_max, gy, [n * ph, pw, c], out)
    };
    Ok(())
}

/// `max_pool_grad_column_sums` over `rows` pooled rows (of every image) of
/// `pw` windows and `c` channels.
///
/// # Safety
/// The CPU must have AVX-512F; the slices hold the masks, the pooled
/// gradient and `c` sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn max_grad_column_sums(first_max: &[u64], gy: &[f32], [rows, pw, c]: [usize; 3], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let vectors = c.div_ceil(LANES);
    for v in 0..vectors {
        let lanes = lanes_of(v, c);
        let mut sum = _mm512_setzero_ps();
        for row in 0..rows {
            // The image rows of this pooled row: taps 0 and 1, then 2 and 3.
            for dy in 0..2 {
                for px in 0..pw {
                    let window = row * pw + px;
                    // SAFETY: inside `gy` (the masked-off lanes are not read).
                    let g = unsafe { _mm512_maskz_loadu_ps(lanes, gy.as_ptr().add(window * c + v * LANES)) };
                    let g = _mm512_add_ps(_mm512_setzero_ps(), g);
                    let taps = (first_max[window * vectors + v] >> (32 * dy)) as u32;
                    let in_row = (taps as u16) | ((taps >> 16) as u16);
                    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(in_row, g));
                }
            }
        }
        // SAFETY: inside `out` (the masked-off lanes are not written).
        unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(v * LANES), lanes, sum) };
    }
}

/// The input gradient of batch element `b` into `gx` (its `h × w × c`
/// elements).
#[inline(always)]
fn pool_grad_batch(d: &Disjoint, p: &PoolParams, x: &[f32], gy: &[f32], b: usize, gx: &mut [f32], avx512: bool) {
    let [_, h, w, c] = d.x;
    let base = b * h * w * c;
    let count = (p.size[0] * p.size[1]) as f32;
    if !d.covers() {
        gx.fill(0.0);
    }
    let mut taps = Vec::with_capacity(p.size[0] * p.size[1]);
    d.for_each_window(b, &mut taps, |o, taps| {
        let g = &gy[o..o + c];
        match p.kind {
            PoolKind::Max => groups(c, |c0, whole| match whole {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `avx512` is `simd::avx512()`.
                true if avx512 => unsafe { max_grad_16(x, g, taps, c0, base, gx) },
                true => max_grad_lanes::<LANES>(x, g, taps, c0, base, gx),
                false => max_grad_lanes::<1>(x, g, taps, c0, base, gx),
            }),
            PoolKind::Avg => groups(c, |c0, whole| match whole {
                true => avg_grad_lanes::<LANES>(g, taps, c0, base, gx, count),
                false => avg_grad_lanes::<1>(g, taps, c0, base, gx, count),
            }),
        }
    });
}

/// `Elem::max_nan` for `f32` (NaN if either is NaN, else the larger, the
/// first on ties), written without branches so that loops over it
/// vectorize.
#[inline(always)]
fn max_nan(a: f32, b: f32) -> f32 {
    let larger = if b > a { b } else { a };
    if a.is_nan() | b.is_nan() {
        f32::NAN
    } else {
        larger
    }
}

/// Calls `f(c0, true)` for each whole group of `LANES` channels starting
/// at `c0`, then `f(c0, false)` for each remaining channel, so that the
/// loops over a whole group have a constant trip count.
#[inline(always)]
fn groups(c: usize, mut f: impl FnMut(usize, bool)) {
    let whole = c / LANES * LANES;
    (0..whole).step_by(LANES).for_each(|c0| f(c0, true));
    (whole..c).for_each(|c0| f(c0, false));
}

/// `y[c0..c0 + L] = max over taps` (folded from `-inf` in tap order).
#[inline(always)]
fn max_lanes<const L: usize>(x: &[f32], taps: &[usize], c0: usize, y: &mut [f32]) {
    let mut m = [f32::NEG_INFINITY; L];
    for &t in taps {
        for (m, &v) in m.iter_mut().zip(&x[t + c0..t + c0 + L]) {
            *m = max_nan(*m, v);
        }
    }
    y[c0..c0 + L].copy_from_slice(&m);
}

/// `y[c0..c0 + L] = (sum over taps, from 0 in tap order) / count`.
#[inline(always)]
fn avg_lanes<const L: usize>(x: &[f32], taps: &[usize], c0: usize, y: &mut [f32], count: f32) {
    let mut s = [0.0f32; L];
    for &t in taps {
        for (s, &v) in s.iter_mut().zip(&x[t + c0..t + c0 + L]) {
            *s += v;
        }
    }
    for (y, s) in y[c0..c0 + L].iter_mut().zip(&s) {
        *y = s / count;
    }
}

/// Writes one window's max-pool gradient for channels `c0..c0 + L`: `0 + g`
/// at each channel's first maximal tap, `0` at its other taps. `gx` holds
/// the batch element's input gradient from flat offset `base` on.
#[inline(always)]
fn max_grad_lanes<const L: usize>(x: &[f32], g: &[f32], taps: &[usize], c0: usize, base: usize, gx: &mut [f32]) {
    let mut m = [f32::NEG_INFINITY; L];
    for &t in taps {
        for (m, &v) in m.iter_mut().zip(&x[t + c0..t + c0 + L]) {
            *m = max_nan(*m, v);
        }
    }
    let g = &g[c0..c0 + L];
    // 1 where a channel's maximum was met at an earlier tap (`u32` rather
    // than `bool` so that the loop vectorizes).
    let mut taken = [0u32; L];
    for &t in taps {
        let (v, out) = (&x[t + c0..t + c0 + L], &mut gx[t - base + c0..t - base + c0 + L]);
        for l in 0..L {
            // Equal to the maximum, or both NaN; `&`/`|` rather than
            // `&&`/`||` keep the loop free of branches.
            let hit = ((v[l] == m[l]) | (m[l].is_nan() & v[l].is_nan())) as u32;
            // All ones at the first hit: the bits of `0 + g`, else `+0`.
            let first = (hit & !taken[l]).wrapping_neg();
            out[l] = f32::from_bits((0.0 + g[l]).to_bits() & first);
            taken[l] |= hit;
        }
    }
}

/// `max_grad_lanes::<16>` in AVX-512 registers: the 16 channels of a tap
/// are one vector, and "maximal", "NaN" and "taken" are lane masks, so a
/// tap costs a few instructions where the portable loop (even compiled for
/// AVX-512) spends dozens on blends of 128-bit lanes. The same comparisons
/// and the same `0 + g`, so the same bits.
///
/// # Safety
/// The CPU must have AVX-512F (`simd::avx512()`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn max_grad_16(x: &[f32], g: &[f32], taps: &[usize], c0: usize, base: usize, gx: &mut [f32]) {
    use std::arch::x86_64::*;
    // SAFETY (every load and store below): each slice is 16 elements long.
    let lanes = |t: usize| unsafe { _mm512_loadu_ps(x[t + c0..t + c0 + 16].as_ptr()) };
    // `max_nan` folded from `-inf`: each tap replaces the lanes where it is
    // larger, then NaN replaces the lanes where either is NaN.
    let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
    for &t in taps {
        m = super::simd::max_nan_16(m, lanes(t));
    }
    let g = _mm512_add_ps(_mm512_setzero_ps(), unsafe { _mm512_loadu_ps(g[c0..c0 + 16].as_ptr()) });
    let max_is_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(m, m);
    let mut taken: __mmask16 = 0;
    for &t in taps {
        let v = lanes(t);
        let hit = super::simd::is_max_16(v, m, max_is_nan);
        let out = &mut gx[t - base + c0..t - base + c0 + 16];
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), _mm512_maskz_mov_ps(hit & !taken, g)) };
        taken |= hit;
    }
}

/// Writes one window's average-pool gradient for channels `c0..c0 + L`:
/// `0 + g / count` at every tap.
#[inline(always)]
fn avg_grad_lanes<const L: usize>(g: &[f32], taps: &[usize], c0: usize, base: usize, gx: &mut [f32], count: f32) {
    let mut share = [0.0f32; L];
    for (s, &g) in share.iter_mut().zip(&g[c0..c0 + L]) {
        *s = g / count;
    }
    for &t in taps {
        for (out, &s) in gx[t - base + c0..t - base + c0 + L].iter_mut().zip(&share) {
            *out = 0.0 + s;
        }
    }
}

/// Runs `f(b, chunk)` for every batch element `b` and its `per`-element
/// chunk of `out`, the batch split over `threads` of the current pool.
fn for_each_batch(out: &mut [f32], per: usize, threads: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    if per == 0 {
        return;
    }
    if threads > 1 && out.len() >= crate::backend::cpu::threads::PARALLEL_MIN_ELEMENTS {
        use rayon::prelude::*;
        out.par_chunks_mut(per).enumerate().for_each(|(b, c)| f(b, c));
    } else {
        out.chunks_mut(per).enumerate().for_each(|(b, c)| f(b, c));
    }
}

#[cfg(test)]
mod tests {
    use super::{pool, pool_grad_batch, Disjoint};
    use crate::ir::PoolKind;
    use crate::tensor::{pool_grad_slices, pool_slices, PoolParams};

    /// The native max pool and its gradient against the interpreter's, bit
    /// for bit, over 16-channel groups and a remainder, with ties, signed
    /// zeros and NaN in the windows; the gradient both on the portable
    /// loop and, where the machine has it, on AVX-512.
    #[test]
    fn max_pool_and_its_gradient_equal_the_interpreter_bit_for_bit() {
        let (xs, ys) = ([2, 6, 4, 35], [2, 3, 2, 35]);
        let n: usize = xs.iter().product();
        let specials = [f32::NAN, -0.0, 0.0, 1.5, 1.5, -2.0, f32::NEG_INFINITY];
        let x: Vec<f32> = (0..n)
            .map(|i| if i % 7 < 3 { specials[i % specials.len()] } else { ((i * 37) % 11) as f32 - 5.0 })
            .collect();
        let gy: Vec<f32> = (0..ys.iter().product())
            .map(|i: usize| if i.is_multiple_of(5) { -0.0 } else { i as f32 * 0.25 - 3.0 })
            .collect();
        let p = PoolParams { kind: PoolKind::Max, size: [2, 2], stride: [2, 2], padding: [0; 4] };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        let mut want = vec![0.0; gy.len()];
        pool_slices(&x, &xs, &ys, p, &mut want).expect("the interpreter pools");
        let mut got = vec![7.0; gy.len()];
        pool(&x, &xs, &ys, p, &mut got, 1).expect("pools");
        assert_eq!(bits(&got), bits(&want));
        let mut want = vec![0.0; n];
        pool_grad_slices(&x, &gy, &xs, &ys, p, &mut want).expect("the interpreter's gradient");
        let d = Disjoint::of(&xs, &ys, &p).expect("disjoint windows");
        let per = n / xs[0];
        for avx512 in [false, crate::backend::cpu::kernels::simd::avx512()] {
            let mut got = vec![7.0; n];
            for (b, gx) in got.chunks_mut(per).enumerate() {
                pool_grad_batch(&d, &p, &x, &gy, b, gx, avx512);
            }
            assert_eq!(bits(&got), bits(&want), "AVX-512: {avx512}");
        }
    }
}
