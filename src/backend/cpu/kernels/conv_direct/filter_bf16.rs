//! The direct weight gradient on `bf16` operands: the `f32` kernel's tiles
//! (module `filter`: weight rows × channel vectors, summing the output
//! positions) with each multiply-add over one image replaced by one
//! `vdpbf16ps` over a pair of images (AVX512-BF16).
//!
//! Why pairs of images: `vdpbf16ps` sums pairs along the reduced
//! dimension, here the output positions. Two neighbouring positions of one
//! image read inputs `C` elements apart, and a kernel column further on
//! they pair up differently; the same position of two images reads the
//! same place of each, so interleaving the images two by two
//! (`pair_images`, once per call) makes every input pair one 32-bit word
//! and every output-gradient pair of 16 channels one vector.
//!
//! Contract: over the image-paired padded source (`[⌈N/2⌉, HP, WP, C]`
//! words, each image `2n` in the low half and `2n + 1` in the high half,
//! zeros for a missing last image) and output gradient (`[⌈N/2⌉, OH, OW,
//! O]` words alike), `grad_filter_bf16` writes the `f32` sums `gw[i, j, c,
//! o] = Σ src·gy` over the positions, each element one chain over the
//! image pairs and positions in order (`vdpbf16ps` adds a pair's two exact
//! products, rounding between them and flushing denormals, as the
//! `bf16_gemm` tier does). The threads split the tiles, never a chain, so
//! the sums do not depend on their count.
//!
//! Example: the bench CNN's second weight gradient, `3x3x16x32` over 64
//! images of `14x14`: 12 tiles of 12 weight rows × 2 channel vectors, each
//! summing 32 image pairs × 196 positions.

use super::filter::{kernel_row_tiles, row_block};
use super::{masks_lanes, SendPtr, Window};
#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::kernels::simd::bh;
use crate::backend::cpu::threads::in_ranges;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512i, _mm512_dpbf16_ps, _mm512_loadu_si512, _mm512_mask_storeu_ps, _mm512_maskz_loadu_epi32,
    _mm512_maskz_loadu_ps, _mm512_set1_epi32, _mm512_setzero_ps, _mm512_setzero_si512,
};

/// `images` images of `per` elements each from `x`, interleaved two by two
/// into 32-bit words (`dst` holds `⌈images/2⌉ · per`): word `k` of pair
/// `n` is image `2n`'s element `k` in its low half and image `2n + 1`'s in
/// its high half, zero past the last image.
pub(in crate::backend::cpu) fn pair_images(x: &[u16], images: usize, per: usize, dst: &mut [u32]) {
    for (n, to) in dst.chunks_exact_mut(per.max(1)).take(images.div_ceil(2)).enumerate() {
        let low = &x[2 * n * per..(2 * n + 1) * per];
        match x.get((2 * n + 1) * per..(2 * n + 2) * per).filter(|_| 2 * n + 1 < images) {
            Some(high) => {
                for ((t, &l), &h) in to.iter_mut().zip(low).zip(high) {
                    *t = u32::from(l) | u32::from(h) << 16;
                }
            }
            None => to.iter_mut().zip(low).for_each(|(t, &l)| *t = u32::from(l)),
        }
    }
}

/// `gw = Σ src ⊗ gy` over image pairs (the module docs); `win` is the
/// convolution's window with `n` image pairs; `threads` share the tiles.
///
/// # Safety
/// `has_bf16_kernels()` must hold; `src` must hold `win`'s source and `gy`
/// its output elements (words of image pairs), `gw` its weight elements;
/// `win.fits()`.
pub(in crate::backend::cpu) unsafe fn grad_filter_bf16(
    win: &Window,
    src: &[u32],
    gy: &[u32],
    gw: &mut [f32],
    threads: usize,
) {
    debug_assert!(super::has_bf16_kernels() && win.fits());
    debug_assert!(src.len() >= win.src_len() && gy.len() >= win.y_len() && gw.len() >= win.w_len());
    gw[..win.w_len()].fill(0.0);
    let (tiles, run_len) = (kernel_row_tiles(win), win.kw * win.c);
    let (rows, block) = (win.n * win.oh, row_block(win));
    let out = SendPtr(gw.as_mut_ptr());
    let run = |lo: usize, hi: usize| {
        let out = &out;
        for r0 in (0..rows).step_by(block) {
            for &(i, q0, r, o0, vectors, masks) in &tiles[lo..hi] {
                let tile = PairTile {
                    src: src.as_ptr().wrapping_add(i * win.wp * win.c + q0),
                    gy: gy.as_ptr().wrapping_add(o0),
                    dst: out.0.wrapping_add((i * run_len + q0) * win.o + o0),
                    masks,
                };
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the caller's contract; the tiles write disjoint
                // weight rows or channels.
                unsafe {
                    let rows = r0..(r0 + block).min(rows);
                    dispatch!(pair_filter_kernel, r, vectors, masks_lanes(masks, vectors), (win, &tile, rows))
                }
                #[cfg(not(target_arch = "x86_64"))]
                unreachable!("no bf16 kernels off x86_64: {win:?} {r} {vectors} {:?}", tile.masks)
            }
        }
    };
    in_ranges(tiles.len(), threads, run);
}

/// Where one weight-gradient tile reads and writes.
struct PairTile {
    /// The tile's first weight row within the window of position 0.
    src: *const u32,
    /// The output gradient's first channel of the tile, at position 0.
    gy: *const u32,
    /// The tile's first weight row and channel.
    dst: *mut f32,
    masks: [u16; 2],
}

/// `R` weight rows × `B` vectors of output channels, continued over output
/// rows `rows` (of image pairs): each position adds its `R` input pairs
/// (broadcast) times its output-gradient pairs. The weight rows are
/// consecutive elements of one source row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::needless_range_loop)] // Counted loops over constants, so that they unroll.
unsafe fn pair_filter_kernel<const R: usize, const B: usize, const MASKED: bool>(
    win: &Window,
    t: &PairTile,
    rows: std::ops::Range<usize>,
) {
    let (step, o) = (win.stride[1] * win.c, win.o);
    let mut acc = [[_mm512_setzero_ps(); B]; R];
    for p in 0..R {
        for b in 0..B {
            // SAFETY: inside the weight gradient.
            acc[p][b] = unsafe { _mm512_maskz_loadu_ps(t.masks[b], t.dst.wrapping_add(p * o + 16 * b)) };
        }
    }
    for row in rows {
        let (n, oy) = (row / win.oh, row % win.oh);
        let src = t.src.wrapping_add(win.origin(n, oy, 0));
        let gy = t.gy.wrapping_add(row * win.ow * o);
        for ox in 0..win.ow {
            let mut gv = [_mm512_setzero_si512(); B];
            for b in 0..B {
                let at = gy.wrapping_add(ox * o + 16 * b);
                // SAFETY: inside the output gradient (the masked-off lanes are not read).
                gv[b] = unsafe {
                    match MASKED {
                        true => _mm512_maskz_loadu_epi32(t.masks[b], at.cast::<i32>()),
                        false => _mm512_loadu_si512(at.cast::<__m512i>()),
                    }
                };
            }
            let src = src.wrapping_add(ox * step);
            for p in 0..R {
                // SAFETY: `fits()`: every window lies inside the source.
                let x = bh(_mm512_set1_epi32(unsafe { *src.add(p) } as i32));
                for b in 0..B {
                    acc[p][b] = _mm512_dpbf16_ps(acc[p][b], x, bh(gv[b]));
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
