//! The direct forward convolution on `bf16` operands: the `f32` kernel's
//! tiling (module `forward`) with each multiply-add over one input channel
//! replaced by one `vdpbf16ps` over a pair of them, so a tile does half the
//! steps for the same sums (AVX512-BF16).
//!
//! Contract: over a padded source `src: [N, HP, WP, C]` and weights in the
//! pair layout of `pair_weights` (both `bf16` bit patterns, `C` even),
//! `forward_bf16` writes the `f32` sums `y[n, oy, ox, o] = Σ_{i, j, c}
//! src[…]·w[i, j, c, o]`, each a chain over `i`, then `j`, then the channel
//! pairs: `vdpbf16ps` adds each pair's two exact products to the
//! accumulator (rounding between them and flushing denormals, as the
//! `bf16_gemm` tier does), so the sums equal the interpreter's within that
//! tier's tolerance, and do not depend on the thread count (threads split
//! output rows, never a chain). No post-ops and no pool: a `bf16` product
//! is rounded and finished by the passes after it.
//!
//! Why: the input gradient of the bench CNN's second convolution (32 channels
//! into 16) is too narrow for im2col and the `bf16` GEMM to pay, so it ran
//! on the `f32` direct kernel from widened copies of its operands; here it
//! runs on the `bf16` units from the two-byte values where they lie.
//!
//! Example: `[64, 16, 16, 32]` (the padded output gradient) by the paired,
//! flipped weights into `[64, 14, 14, 16]`: 896 output rows of one
//! 14-position tile, each 3 kernel rows of 48 pair steps of one weight load,
//! 14 broadcasts and 14 `vdpbf16ps`.

use super::{channel_blocks, masks_lanes, tile_len, tile_starts, SendPtr, Window};
use crate::backend::cpu::kernels::isa::{self, Isa};
#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::kernels::simd::bh;
use crate::backend::cpu::threads::in_ranges;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512i, _mm512_dpbf16_ps, _mm512_loadu_si512, _mm512_mask_storeu_ps, _mm512_maskz_loadu_epi32, _mm512_set1_epi32,
    _mm512_setzero_ps, _mm512_setzero_si512,
};

/// Whether `forward_bf16` runs here: the low-precision tier is one with
/// AVX512-BF16 (`TFC_ISA=portable` turns it off, as for the products).
pub(in crate::backend::cpu) fn has_bf16_kernels() -> bool {
    crate::backend::cpu::kernels::simd::avx512() && isa::active() != Isa::Portable
}

/// `y = conv(src, w)` in `f32` sums of `bf16` pairs (the module docs);
/// `threads` share the output rows.
///
/// # Safety
/// `has_bf16_kernels()` must hold; `src` must hold `win`'s source and `w`
/// its weights in the pair layout, `y` its output elements; `win.fits()`
/// and `win.c` is even.
pub(in crate::backend::cpu) unsafe fn forward_bf16(
    win: &Window,
    src: &[u16],
    w: &[u16],
    y: &mut [f32],
    threads: usize,
) {
    debug_assert!(has_bf16_kernels() && win.fits() && win.c.is_multiple_of(2));
    debug_assert!(src.len() >= win.src_len() && w.len() >= win.w_len() && y.len() >= win.y_len());
    let out = SendPtr(y.as_mut_ptr());
    let run = |lo: usize, hi: usize| {
        let out = &out;
        // SAFETY: the caller's contract; the rows are disjoint.
        unsafe { rows(win, src.as_ptr(), w.as_ptr(), out.0, lo, hi) }
    };
    in_ranges(win.n * win.oh, threads, run);
}

/// Where one tile reads and writes.
struct Tile {
    /// The first position's window.
    src: *const u16,
    /// The pairs of the tile's first output channel.
    w: *const u16,
    /// The first position's first output channel.
    dst: *mut f32,
    masks: [u16; 2],
}

/// Output rows `lo..hi` (counted over the images) of `forward_bf16`.
///
/// # Safety
/// As for `forward_bf16`.
unsafe fn rows(win: &Window, src: *const u16, w: *const u16, y: *mut f32, lo: usize, hi: usize) {
    for (o0, vectors, masks) in channel_blocks(win.o) {
        // Two vectors of 14 positions are 28 accumulators, which with the
        // two weight vectors and a broadcast fit the 32 registers.
        let r = tile_len(win.ow, if vectors == 1 { 16 } else { 14 });
        for row in lo..hi {
            let (n, oy) = (row / win.oh, row % win.oh);
            for ox in tile_starts(win.ow, r) {
                let t = Tile {
                    src: src.wrapping_add(win.origin(n, oy, ox)),
                    w: w.wrapping_add(2 * o0),
                    dst: y.wrapping_add(((n * win.oh + oy) * win.ow + ox) * win.o + o0),
                    masks,
                };
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the caller's contract (`has_bf16_kernels`).
                unsafe {
                    dispatch!(row_kernel, r, vectors, masks_lanes(masks, vectors), (win, &t))
                }
                #[cfg(not(target_arch = "x86_64"))]
                unreachable!("no bf16 kernels off x86_64: {win:?} {r} {}", t.masks[0])
            }
        }
    }
}

/// One tile of `R` consecutive positions of an output row × `B` vectors of
/// 16 output channels: for each kernel row, each pair of its `KW·C` inputs
/// (a kernel column's two channels) is broadcast to every position's
/// accumulators, times the `B` weight vectors of the pair.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::needless_range_loop)] // Counted loops over constants, so that they unroll.
unsafe fn row_kernel<const R: usize, const B: usize, const MASKED: bool>(win: &Window, t: &Tile) {
    let (pairs, o) = (win.kw * win.c / 2, win.o);
    let step = win.stride[1] * win.c;
    let mut acc = [[_mm512_setzero_ps(); B]; R];
    for i in 0..win.kh {
        let src = t.src.wrapping_add(i * win.wp * win.c);
        let w = t.w.wrapping_add(i * pairs * 2 * o);
        for q in 0..pairs {
            let mut wv = [_mm512_setzero_si512(); B];
            for b in 0..B {
                let at = w.wrapping_add(q * 2 * o + 32 * b);
                // SAFETY: inside the weights (the masked-off lanes are not read).
                wv[b] = unsafe {
                    match MASKED {
                        true => _mm512_maskz_loadu_epi32(t.masks[b], at.cast::<i32>()),
                        false => _mm512_loadu_si512(at.cast::<__m512i>()),
                    }
                };
            }
            for p in 0..R {
                // SAFETY: `fits()`: every window lies inside the source, and
                // a pair never crosses a kernel column (`C` is even).
                let x = bh(_mm512_set1_epi32(unsafe { src.add(p * step + 2 * q).cast::<i32>().read_unaligned() }));
                for b in 0..B {
                    acc[p][b] = _mm512_dpbf16_ps(acc[p][b], x, bh(wv[b]));
                }
            }
        }
    }
    for (p, acc) in acc.iter().enumerate() {
        for (b, &v) in acc.iter().enumerate() {
            // SAFETY: inside the output (the masked-off lanes are not written).
            unsafe { _mm512_mask_storeu_ps(t.dst.wrapping_add(p * o + 16 * b), t.masks[b], v) };
        }
    }
}
