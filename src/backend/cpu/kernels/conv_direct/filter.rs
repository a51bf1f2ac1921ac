//! The direct weight gradient (module docs of `conv_direct`): tiles of
//! weight rows × channel vectors over the threads, each summing the output
//! positions in order, in blocks of rows that stay in the L2 cache.
//!
//! Contract: `grad_filter` writes `gw` as the module docs say. Its sums do
//! not depend on the thread count: the threads split the tiles, and a
//! gradient of fewer tiles than `POSITION_PARTS` sums that many fixed parts
//! of the positions separately (each one chain, in order) and adds them in
//! order. A one-channel 3x3 kernel (`WHOLE_KERNEL`) takes every weight row
//! in one tile and can read its output gradient from a max pool's recorded
//! maxima (`MaximaGrad`).
//!
//! Example: the bench CNN's first-layer weight gradient, `3x3x1x16`, is one
//! tile of 9 weight rows × one channel vector over 50,176 positions, summed
//! in four parts of 12,544 (which two threads share), then added.

use super::{channel_blocks, exact_tiles, load, masks_lanes, tile_len, MaximaGrad, SendPtr, Window, WHOLE_KERNEL};
use crate::backend::cpu::threads::in_ranges;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512, _mm512_add_ps, _mm512_fmadd_ps, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_maskz_mov_ps,
    _mm512_set1_ps, _mm512_setzero_ps,
};

/// `gw = Σ src ⊗ gy` (see the module docs); `threads` share the tiles.
///
/// # Safety
/// As for `forward`, with `gy` holding the output's elements and `gw` the
/// weights'.
pub(in crate::backend::cpu) unsafe fn grad_filter(
    win: &Window,
    src: &[f32],
    gy: &[f32],
    from_maxima: Option<MaximaGrad>,
    gw: &mut [f32],
    threads: usize,
) {
    debug_assert!(win.fits() && src.len() >= win.src_len() && gy.len() >= win.y_len() && gw.len() >= win.w_len());
    debug_assert!(from_maxima.is_none_or(|m| {
        let sizes = m.pooled.len() >= win.y_len() / 4 && m.first_max.len() >= win.first_max_len();
        sizes && win.filter_reads_maxima()
    }));
    gw[..win.w_len()].fill(0.0);
    let run_len = win.kw * win.c;
    let tiles = match (win.kh, run_len) == WHOLE_KERNEL {
        // One tile takes every weight row (`WHOLE_KERNEL`).
        true => {
            channel_blocks(win.o).map(|(o0, vectors, masks)| (0, 0, win.kh * run_len, o0, vectors, masks)).collect()
        }
        false => kernel_row_tiles(win),
    };
    let (rows, block) = (win.n * win.oh, row_block(win));
    // Fewer tiles than `POSITION_PARTS` (the whole-kernel tile of a first
    // layer) would leave threads idle: the output rows are then summed in
    // that many fixed parts, the first into `gw`, the others into copies
    // added to it in order at the end. The parts depend on the shapes
    // only, so the sums are the same at any thread count.
    let parts = if tiles.len() < POSITION_PARTS { POSITION_PARTS.min(rows).max(1) } else { 1 };
    let w_len = win.w_len();
    let mut partial = vec![0.0f32; (parts - 1) * w_len];
    let (out, partial_out) = (SendPtr(gw.as_mut_ptr()), SendPtr(partial.as_mut_ptr()));
    // Work item `k`: tile `k % tiles.len()` over part `k / tiles.len()`;
    // within a part, the row blocks outermost.
    let t = tiles.len();
    if t == 0 {
        return;
    }
    let run = |lo: usize, hi: usize| {
        let (out, partial_out) = (&out, &partial_out);
        for part in lo / t..hi.div_ceil(t) {
            let base = match part {
                0 => out.0,
                _ => partial_out.0.wrapping_add((part - 1) * w_len),
            };
            let (first, last) = (rows * part / parts, rows * (part + 1) / parts);
            for r0 in (first..last).step_by(block) {
                for k in lo.max(part * t)..hi.min((part + 1) * t) {
                    let (i, q0, r, o0, vectors, masks) = tiles[k % t];
                    let tile = FilterTile {
                        src: src.as_ptr().wrapping_add(i * win.wp * win.c + q0),
                        gy: from_maxima.map_or(gy.as_ptr(), |m| m.pooled.as_ptr()).wrapping_add(o0),
                        first_max: from_maxima.map(|m| m.first_max.as_ptr().wrapping_add(o0 / 16)),
                        dst: base.wrapping_add((i * run_len + q0) * win.o + o0),
                        masks,
                    };
                    // SAFETY: the caller's contract; the items write
                    // disjoint weight rows or channels, or different
                    // parts' copies.
                    unsafe { filter_tile(win, &tile, r0..(r0 + block).min(last), r, vectors) };
                }
            }
        }
    };
    in_ranges(t * parts, threads, run);
    for copy in partial.chunks_exact(w_len.max(1)) {
        for (g, p) in gw[..w_len].iter_mut().zip(copy) {
            *g += p;
        }
    }
}

/// A weight-gradient tile: kernel row `i`, weight rows `q0..q0 + r` of
/// that kernel row's `KW·C`, and one channel block `(o0, vectors, masks)`
/// (`channel_blocks`): `(i, q0, r, o0, vectors, masks)`.
pub(super) type TileSpan = (usize, usize, usize, usize, usize, [u16; 2]);

/// The tiles of every kernel row, up to 16 weight rows for one channel
/// vector and 12 for two (the accumulators, gradient vectors and broadcast
/// fit the 32 registers).
pub(super) fn kernel_row_tiles(win: &Window) -> Vec<TileSpan> {
    let run_len = win.kw * win.c;
    let mut tiles = Vec::new();
    for i in 0..win.kh {
        for (o0, vectors, masks) in channel_blocks(win.o) {
            let r = tile_len(run_len, if vectors == 1 { 16 } else { 12 });
            tiles.extend(exact_tiles(run_len, r).into_iter().map(|(q0, r)| (i, q0, r, o0, vectors, masks)));
        }
    }
    tiles
}

/// Output rows per block of a weight gradient: blocks that keep their
/// sources and gradients (four-byte elements) in the L2 cache across the
/// tiles; every tile sums the blocks in order.
pub(super) fn row_block(win: &Window) -> usize {
    let per_row = win.ow * win.o + win.kh * win.wp * win.c;
    (65_536 / per_row.max(1)).clamp(1, (win.n * win.oh).max(1))
}

/// How many parts of the output rows a weight gradient of fewer tiles sums
/// separately, so that up to this many threads share it (`grad_filter`).
const POSITION_PARTS: usize = 4;

/// Where one weight-gradient tile reads and writes.
struct FilterTile {
    /// The tile's first weight row within the window of position 0.
    src: *const f32,
    /// The output gradient's first channel of the tile, at position 0 (or
    /// with `first_max`, the pooled gradient's).
    gy: *const f32,
    /// The first maxima of the tile's first channel vector at pooled
    /// position 0, when the output gradient is a max pool's gradient read
    /// from them (`PostOps::grad_from_maxima`).
    first_max: Option<*const u64>,
    /// The tile's first weight row and channel.
    dst: *mut f32,
    masks: [u16; 2],
}

/// One weight-gradient tile of `r` weight rows × `vectors` channel vectors
/// over output rows `rows`.
///
/// # Safety
/// As for `grad_filter`.
unsafe fn filter_tile(win: &Window, t: &FilterTile, rows: std::ops::Range<usize>, r: usize, vectors: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract (`simd::avx512()` checked AVX-512F).
    unsafe {
        // A tile longer than a kernel row is a `WHOLE_KERNEL` tile.
        if r > win.kw * win.c {
            const ROWS: usize = WHOLE_KERNEL.0 * WHOLE_KERNEL.1;
            const SPLIT: usize = WHOLE_KERNEL.1;
            return match (vectors, masks_lanes(t.masks, vectors), t.first_max.is_some()) {
                (1, false, false) => filter_kernel_split::<ROWS, 1, SPLIT, false, false>(win, t, rows),
                (1, true, false) => filter_kernel_split::<ROWS, 1, SPLIT, true, false>(win, t, rows),
                (_, false, false) => filter_kernel_split::<ROWS, 2, SPLIT, false, false>(win, t, rows),
                (_, true, false) => filter_kernel_split::<ROWS, 2, SPLIT, true, false>(win, t, rows),
                (1, false, true) => filter_kernel_split::<ROWS, 1, SPLIT, false, true>(win, t, rows),
                (1, true, true) => filter_kernel_split::<ROWS, 1, SPLIT, true, true>(win, t, rows),
                (_, false, true) => filter_kernel_split::<ROWS, 2, SPLIT, false, true>(win, t, rows),
                (_, true, true) => filter_kernel_split::<ROWS, 2, SPLIT, true, true>(win, t, rows),
            };
        }
        dispatch!(filter_kernel, r, vectors, masks_lanes(t.masks, vectors), (win, t, rows.clone()))
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("`simd::avx512()` is false off x86_64: {win:?} {rows:?} {r} {vectors} {:?}", t.masks)
}

/// `R` weight rows × `B` vectors of output channels, continued over output
/// rows `rows`: each position adds its `R` inputs (broadcast) times its
/// output-gradient vectors. The weight rows are consecutive elements of one
/// source row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn filter_kernel<const R: usize, const B: usize, const MASKED: bool>(
    win: &Window,
    t: &FilterTile,
    rows: std::ops::Range<usize>,
) {
    // SAFETY: the caller's contract.
    unsafe { filter_kernel_split::<R, B, 0, MASKED, false>(win, t, rows) }
}

/// `filter_kernel` for weight rows that span source rows: with `SPLIT > 0`,
/// weight row `p` reads element `p % SPLIT` of source row `p / SPLIT` of
/// each position's window (every weight row of a kernel whose `KW·C` is
/// `SPLIT`); with `SPLIT = 0`, element `p` of its first row. Each weight
/// element is one chain of multiply-adds over the positions in order. With
/// `FROM_MAXIMA` it reads the output gradient from a max pool's maxima
/// (`FilterTile::first_max`): the same values, so the same sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn filter_kernel_split<
    const R: usize,
    const B: usize,
    const SPLIT: usize,
    const MASKED: bool,
    const FROM_MAXIMA: bool,
>(
    win: &Window,
    t: &FilterTile,
    rows: std::ops::Range<usize>,
) {
    let (step, o, source_row) = (win.stride[1] * win.c, win.o, win.wp * win.c);
    let offset = |p: usize| p.checked_div(SPLIT).map_or(p, |line| line * source_row + p % SPLIT);
    let mut acc = [[_mm512_setzero_ps(); B]; R];
    for (p, acc) in acc.iter_mut().enumerate() {
        for (b, v) in acc.iter_mut().enumerate() {
            // SAFETY: inside the weight gradient.
            *v = unsafe { _mm512_maskz_loadu_ps(t.masks[b], t.dst.wrapping_add(p * o + 16 * b)) };
        }
    }
    // With `FROM_MAXIMA`: the first maxima of each pooled position, and
    // their pooled gradient, as `gy` and `first_max` advance by a pooled row.
    let (pooled_row, vectors) = (win.ow / 2 * o, o.div_ceil(16));
    let first_max = t.first_max.unwrap_or(std::ptr::null());
    for row in rows {
        let (n, oy) = (row / win.oh, row % win.oh);
        let src = t.src.wrapping_add(win.origin(n, oy, 0));
        let gy = match FROM_MAXIMA {
            // `oh` is even: image row `row` lies in pooled row `row / 2`.
            true => t.gy.wrapping_add(row / 2 * pooled_row),
            false => t.gy.wrapping_add(row * win.ow * o),
        };
        let taps = first_max.wrapping_add(row / 2 * (win.ow / 2) * vectors);
        for ox in 0..win.ow {
            let mut gv: [__m512; B] = [_mm512_setzero_ps(); B];
            for (b, v) in gv.iter_mut().enumerate() {
                *v = match FROM_MAXIMA {
                    true => {
                        // SAFETY: inside the pooled gradient and its masks.
                        let pooled = unsafe { load::<MASKED>(t.masks[b], gy.wrapping_add(ox / 2 * o + 16 * b)) };
                        let window = unsafe { *taps.add(ox / 2 * vectors + b) };
                        let first = (window >> (16 * (2 * (oy % 2) + ox % 2))) as u16;
                        _mm512_maskz_mov_ps(first, _mm512_add_ps(_mm512_setzero_ps(), pooled))
                    }
                    // SAFETY: inside the output gradient.
                    false => unsafe { load::<MASKED>(t.masks[b], gy.wrapping_add(ox * o + 16 * b)) },
                };
            }
            let src = src.wrapping_add(ox * step);
            for (p, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `fits()`: every window lies inside the source.
                let x = _mm512_set1_ps(unsafe { *src.add(offset(p)) });
                for b in 0..B {
                    acc[b] = _mm512_fmadd_ps(x, gv[b], acc[b]);
                }
            }
        }
    }
    for (p, acc) in acc.iter().enumerate() {
        for (b, &v) in acc.iter().enumerate() {
            // SAFETY: inside the weight gradient.
            unsafe { _mm512_mask_storeu_ps(t.dst.wrapping_add(p * o + 16 * b), t.masks[b], v) };
        }
    }
}
