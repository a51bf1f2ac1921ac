//! AVX-512 packing of one block in the `vdpbf16ps` layout
//! (`pack::Layout::Pairs`): the same words as the scalar `pack::pack_block`,
//! 16 at a time.
//!
//! Contract: [`pairs_from_rows`] packs a block whose source columns are
//! contiguous (`c_stride == 1`: two rows of `k` interleave into a row of
//! pairs); [`pairs_from_columns`] one whose source rows of `k` are
//! contiguous (`k_stride == 1`: each row or column of the block already
//! holds its pairs, and 16 × 16 tiles of pairs are transposed in
//! registers). Both write every word of the block's `ceil(k / 2)` pairs ×
//! `cols` (a missing odd element as `+0`) and leave the rest of `out` (the
//! padding, zeroed by `pack`) alone. Why: the scalar loops took ~18% of a
//! bf16 MLP training step (a `[256, 784]` operand packed in ~40 µs).
//!
//! Example: `x: [256, 784]` as the `lhs` of `x @ w` (`k_stride == 1`,
//! width 12) packs as 49 × 1 tiles per block of 12 rows.

use crate::backend::cpu::kernels::simd::lanes;
use std::arch::x86_64::*;

/// `out[p · width + c] = src[2p · k_stride + c] | src[(2p + 1) · k_stride +
/// c] << 16` for every pair `p` and column `c < cols`.
///
/// # Safety
/// AVX-512 F/BW/VL; `src` addresses `k` rows of `cols` elements `k_stride`
/// apart; `out` holds `ceil(k / 2) · width` words, `cols ≤ width`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pairs_from_rows(
    out: &mut [u32],
    src: *const u16,
    k_stride: usize,
    [k, cols]: [usize; 2],
    width: usize,
) {
    debug_assert!(cols <= width && out.len() >= k.div_ceil(2) * width);
    for p in 0..k.div_ceil(2) {
        let even = src.wrapping_add(2 * p * k_stride);
        let odd = (2 * p + 1 < k).then(|| src.wrapping_add((2 * p + 1) * k_stride));
        for c0 in (0..cols).step_by(16) {
            let mask = lanes(cols - c0);
            // SAFETY: columns c0.. of rows 2p and 2p + 1, masked to `cols`;
            // the block's pair row `p` in `out` (checked above).
            unsafe {
                let e = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, even.add(c0).cast()));
                let o = match odd {
                    Some(odd) => _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, odd.add(c0).cast())),
                    None => _mm512_setzero_si512(),
                };
                let pairs = _mm512_or_si512(e, _mm512_slli_epi32::<16>(o));
                _mm512_mask_storeu_epi32(out.as_mut_ptr().add(p * width + c0).cast(), mask, pairs);
            }
        }
    }
}

/// `out[p · width + c] = src[c · c_stride + 2p] | src[c · c_stride + 2p +
/// 1] << 16` (the second half `+0` past `k`) for every pair `p` and row or
/// column `c < cols`.
///
/// # Safety
/// AVX-512 F/BW/VL; `src` addresses `cols` rows of `k` contiguous elements
/// `c_stride` apart; `out` holds `ceil(k / 2) · width` words, `cols ≤
/// width`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pairs_from_columns(
    out: &mut [u32],
    src: *const u16,
    c_stride: usize,
    [k, cols]: [usize; 2],
    width: usize,
) {
    debug_assert!(cols <= width && out.len() >= k.div_ceil(2) * width);
    let whole = k / 2;
    let zero = _mm512_setzero_si512();
    for c0 in (0..cols).step_by(16) {
        let rows = 16.min(cols - c0);
        for p0 in (0..whole).step_by(16) {
            let pairs = 16.min(whole - p0);
            let mut tile = [zero; 16];
            for (r, row) in tile.iter_mut().enumerate().take(rows) {
                // SAFETY: pairs p0.. of row or column c0 + r, masked to
                // the whole pairs.
                *row = unsafe { _mm512_maskz_loadu_epi32(lanes(pairs), src.add((c0 + r) * c_stride + 2 * p0).cast()) };
            }
            let tile = transpose(tile);
            for (j, pair) in tile.iter().enumerate().take(pairs) {
                // SAFETY: pair row p0 + j, columns c0.. of the block.
                unsafe {
                    _mm512_mask_storeu_epi32(out.as_mut_ptr().add((p0 + j) * width + c0).cast(), lanes(rows), *pair)
                };
            }
        }
        if k % 2 == 1 {
            for c in c0..c0 + rows {
                // SAFETY: the last element of row or column c.
                out[whole * width + c] = u32::from(unsafe { *src.add(c * c_stride + k - 1) });
            }
        }
    }
}

/// The 16 × 16 transpose of 32-bit lanes: `t[j][i] = r[i][j]`.
#[target_feature(enable = "avx512f")]
fn transpose(r: [__m512i; 16]) -> [__m512i; 16] {
    // Rows interleaved in pairs, then in fours: `b[4i + c]`'s 128-bit lane
    // `l` is column `4l + c` of rows 4i..4i + 4.
    let mut a = r;
    for i in 0..8 {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    let mut b = a;
    for i in 0..4 {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    // Then the lanes: column `4l + c` gathers lane `l` of b[c], b[4 + c],
    // b[8 + c], b[12 + c].
    let mut t = b;
    for c in 0..4 {
        let low = _mm512_shuffle_i32x4::<0x44>(b[c], b[4 + c]);
        let high = _mm512_shuffle_i32x4::<0xEE>(b[c], b[4 + c]);
        let low2 = _mm512_shuffle_i32x4::<0x44>(b[8 + c], b[12 + c]);
        let high2 = _mm512_shuffle_i32x4::<0xEE>(b[8 + c], b[12 + c]);
        t[c] = _mm512_shuffle_i32x4::<0x88>(low, low2);
        t[4 + c] = _mm512_shuffle_i32x4::<0xDD>(low, low2);
        t[8 + c] = _mm512_shuffle_i32x4::<0x88>(high, high2);
        t[12 + c] = _mm512_shuffle_i32x4::<0xDD>(high, high2);
    }
    t
}
