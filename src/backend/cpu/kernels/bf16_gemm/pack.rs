//! The packed operands of the `vdpbf16ps` and AMX tiers: `lhs` in blocks
//! of rows and `rhs` in panels of 32 columns, both as pairs of
//! consecutive-`k` bf16 values (the "VNNI" layout both instructions read),
//! zero-padded to whole blocks and to the tier's multiple of pairs.
//!
//! Contract: element `(kk, c)` of a block — `kk` along `k`, `c` the row of
//! an `lhs` block or the column of an `rhs` panel — is half `kk % 2` (the
//! low half for even `kk`) of the `u32` at `block · block_len +
//! layout.offset(kk / 2, c)`, where `block_len = pairs · width`. Padding
//! (rows past `m`, columns past `n`, `k` past its end) holds `+0`, so it
//! adds `+0` products. The source is read along whichever of its strides
//! is 1, so row-major and transposed operands both pack at memory speed.
//!
//! Example: the `vdpbf16ps` tier packs `rhs` with `Layout::Pairs`: pair
//! `p` of a panel is 32 `u32`s (`B[2p][j] | B[2p+1][j] << 16` for its 32
//! columns `j`), two zmm registers.

use super::Operand;
use crate::backend::cpu::kernels::SendPtr;

/// Where pair `p` of row or column `c` of a block goes (in pairs, `u32`s).
#[derive(Clone, Copy, Debug)]
pub(super) enum Layout {
    /// `[p][c]`: one pair of each of the block's `width` rows or columns
    /// after another, pair after pair (`vdpbf16ps`: a broadcast per `lhs`
    /// row, a zmm per 16 `rhs` columns).
    Pairs { width: usize },
    /// AMX tiles of 16 rows by 64 bytes, one step of 16 pairs (32 `k`)
    /// after another: `lhs` (32 rows) as `[step][row / 16][row % 16][pair
    /// % 16]` — a tile's row is 32 `k` of one row; `rhs` (32 columns) as
    /// `[step][col / 16][pair % 16][col % 16]` — a tile's row is one pair
    /// of 16 columns.
    Tiles { lhs: bool },
}

impl Layout {
    /// Rows or columns per block.
    pub(super) fn width(self) -> usize {
        match self {
            Layout::Pairs { width } => width,
            Layout::Tiles { .. } => 32,
        }
    }

    /// The offset of pair `p` of row or column `c` within a block.
    #[inline(always)]
    fn offset(self, p: usize, c: usize) -> usize {
        match self {
            Layout::Pairs { width } => p * width + c,
            Layout::Tiles { lhs: true } => (p / 16) * 512 + (c / 16) * 256 + (c % 16) * 16 + p % 16,
            Layout::Tiles { lhs: false } => (p / 16) * 512 + (c / 16) * 256 + (p % 16) * 16 + c % 16,
        }
    }

    /// How far the offset moves per pair and per row or column, within an
    /// aligned group of 16 of them (the layouts are linear there).
    fn steps(self) -> (usize, usize) {
        match self {
            Layout::Pairs { width } => (width, 1),
            Layout::Tiles { lhs: true } => (1, 16),
            Layout::Tiles { lhs: false } => (16, 1),
        }
    }
}

/// Packs `src`, a `k × extent` matrix addressed as `(first, k stride,
/// extent stride)`, into `ceil(extent / width)` blocks of `pairs` pairs
/// (`pairs ≥ ceil(k / 2)`), `threads` of the current pool sharing the
/// blocks, into `out` (its old contents replaced, its memory reused: the
/// blocks write every word, the padding as zeros, so the buffer is not
/// cleared first — that took a fifth of the packing). `lhs` is its own
/// transpose here: `(a, a_cs, a_rs)`.
///
/// # Safety
/// `src` must address every element `(kk, c)`, `kk < k`, `c < extent`.
pub(super) unsafe fn pack(
    out: &mut Vec<u32>,
    (src, k_stride, c_stride): (*const u16, usize, usize),
    [k, extent]: [usize; 2],
    pairs: usize,
    layout: Layout,
    threads: usize,
) {
    let width = layout.width();
    let blocks = extent.div_ceil(width);
    let block_len = pairs * width;
    out.resize(blocks * block_len, 0);
    let (dst, src) = (SendPtr(out.as_mut_ptr()), SendPtr(src.cast_mut()));
    // Packing moves gigabytes a second per thread: split only when there
    // are a few hundred thousand elements.
    let threads = if k * extent >= 1 << 18 { threads } else { 1 };
    crate::backend::cpu::threads::in_ranges(blocks, threads, |lo, hi| {
        let (dst, src) = (&dst, &src);
        for block in lo..hi {
            let c0 = block * width;
            // SAFETY: block `block` of `out` is its own `block_len`
            // elements, written by this worker only; the caller's contract
            // for `src` (the block's columns from `c0`).
            unsafe {
                let out = std::slice::from_raw_parts_mut(dst.0.add(block * block_len), block_len);
                let src = (src.0.add(c0 * c_stride).cast_const(), k_stride, c_stride);
                let cols = width.min(extent - c0);
                pack_block(out, src, [k, cols], layout);
                zero_padding(out, [k, cols], pairs, layout);
            }
        }
    });
}

/// Zeros the words of a block past its `cols` rows or columns and past
/// its `ceil(k / 2)` pairs (up to `pairs`).
fn zero_padding(out: &mut [u32], [k, cols]: [usize; 2], pairs: usize, layout: Layout) {
    for p in 0..pairs {
        let from = if p < k.div_ceil(2) { cols } else { 0 };
        for c in from..layout.width() {
            out[layout.offset(p, c)] = 0;
        }
    }
}

/// One block: `cols` rows or columns of `k`, read along whichever stride
/// is 1; the `vdpbf16ps` layout with AVX-512 (module `pack_avx512`), the
/// rest by `pack_block_scalar`.
///
/// # Safety
/// As for `pack`, for the block's `cols` columns; `out` is the block.
unsafe fn pack_block(
    out: &mut [u32],
    (src, k_stride, c_stride): (*const u16, usize, usize),
    [k, cols]: [usize; 2],
    layout: Layout,
) {
    #[cfg(target_arch = "x86_64")]
    if let (Layout::Pairs { width }, true) = (layout, crate::backend::cpu::kernels::simd::avx512()) {
        // SAFETY (both): AVX-512 is there; the caller's contract.
        if c_stride == 1 {
            return unsafe { super::pack_avx512::pairs_from_rows(out, src, k_stride, [k, cols], width) };
        }
        if k_stride == 1 {
            return unsafe { super::pack_avx512::pairs_from_columns(out, src, c_stride, [k, cols], width) };
        }
    }
    // SAFETY: the caller's contract.
    unsafe { pack_block_scalar(out, (src, k_stride, c_stride), [k, cols], layout) }
}

/// `pack_block` in plain code: whole pairs, or one row of `k` at a time,
/// written in groups of 16 that the layouts keep at a fixed step.
///
/// # Safety
/// As for `pack_block`.
unsafe fn pack_block_scalar(
    out: &mut [u32],
    (src, k_stride, c_stride): (*const u16, usize, usize),
    [k, cols]: [usize; 2],
    layout: Layout,
) {
    let (step_p, step_c) = layout.steps();
    // SAFETY (`at`): element (kk, c) of the block, by the caller's contract.
    let at = |kk: usize, c: usize| u32::from(unsafe { *src.add(kk * k_stride + c * c_stride) });
    let whole = k / 2;
    if k_stride == 1 {
        // Pairs are adjacent: one `u32` each.
        for c in 0..cols {
            // SAFETY: the `whole` pairs of row or column `c`.
            let row = unsafe { std::slice::from_raw_parts(src.add(c * c_stride).cast::<[u8; 4]>(), whole) };
            for p0 in (0..whole).step_by(16) {
                let (base, len) = (layout.offset(p0, c), 16.min(whole - p0));
                let pairs = row[p0..p0 + len].iter().map(|&pair| u32::from_ne_bytes(pair));
                if step_p == 1 {
                    out[base..base + len].iter_mut().zip(pairs).for_each(|(o, v)| *o = v);
                } else {
                    out[base..].iter_mut().step_by(step_p).zip(pairs).for_each(|(o, v)| *o = v);
                }
            }
            if k % 2 == 1 {
                out[layout.offset(whole, c)] = at(k - 1, c);
            }
        }
    } else if c_stride == 1 {
        // Rows of `k` are contiguous: two rows make a row of pairs.
        let zeros = vec![0u16; cols];
        for p in 0..k.div_ceil(2) {
            // SAFETY: rows 2p and, when `2p + 1 < k`, 2p + 1 of the block.
            let even = unsafe { std::slice::from_raw_parts(src.add(2 * p * k_stride), cols) };
            let odd = if 2 * p + 1 < k {
                // SAFETY: as above.
                unsafe { std::slice::from_raw_parts(src.add((2 * p + 1) * k_stride), cols) }
            } else {
                &zeros
            };
            for c0 in (0..cols).step_by(16) {
                let (base, len) = (layout.offset(p, c0), 16.min(cols - c0));
                let pairs = even[c0..c0 + len].iter().zip(&odd[c0..c0 + len]);
                let pairs = pairs.map(|(&e, &o)| u32::from(e) | u32::from(o) << 16);
                if step_c == 1 {
                    out[base..base + len].iter_mut().zip(pairs).for_each(|(o, v)| *o = v);
                } else {
                    out[base..].iter_mut().step_by(step_c).zip(pairs).for_each(|(o, v)| *o = v);
                }
            }
        }
    } else {
        out.fill(0);
        for c in 0..cols {
            for kk in 0..k {
                out[layout.offset(kk / 2, c)] |= at(kk, c) << (16 * (kk % 2));
            }
        }
    }
}

/// `lhs` (`m × k`) in blocks of rows.
///
/// # Safety
/// As for `pack`: `lhs` addresses an `m × k` matrix.
pub(super) unsafe fn pack_lhs(
    out: &mut Vec<u32>,
    (a, rs, cs): Operand,
    [m, k]: [usize; 2],
    pairs: usize,
    layout: Layout,
    threads: usize,
) {
    // SAFETY: the caller's contract, with the roles of the strides swapped.
    unsafe { pack(out, (a, cs, rs), [k, m], pairs, layout, threads) }
}

/// `rhs` (`k × n`) in panels of columns.
///
/// # Safety
/// As for `pack`: `rhs` addresses a `k × n` matrix.
pub(super) unsafe fn pack_rhs(
    out: &mut Vec<u32>,
    rhs: Operand,
    [k, n]: [usize; 2],
    pairs: usize,
    layout: Layout,
    threads: usize,
) {
    // SAFETY: the caller's contract.
    unsafe { pack(out, rhs, [k, n], pairs, layout, threads) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element lands where the layouts say, the padding is zero,
    /// whichever stride of the source is 1 (or neither).
    #[test]
    fn the_layouts_place_each_pair() {
        let (k, n) = (35, 40);
        let b: Vec<u16> = (0..k * n).map(|e| e as u16 + 1).collect();
        let bt: Vec<u16> = (0..k * n).map(|e| b[(e % k) * n + e / k]).collect();
        let spread: Vec<u16> = (0..4 * k * n).map(|e| if e % 2 == 0 { b[e / 4] } else { 0 }).collect();
        let layouts = [Layout::Pairs { width: 32 }, Layout::Tiles { lhs: false }, Layout::Tiles { lhs: true }];
        let sources = [(b.as_ptr(), n, 1), (bt.as_ptr(), 1, k), (spread.as_ptr(), 4 * n, 4)];
        for (layout, source) in layouts.into_iter().flat_map(|l| sources.map(|s| (l, s))) {
            let pairs = 32;
            // SAFETY: each source addresses a k × n matrix.
            let mut packed = vec![7; 5];
            // SAFETY: as above.
            unsafe { pack_rhs(&mut packed, source, [k, n], pairs, layout, 1) };
            assert_eq!(packed.len(), 2 * pairs * 32);
            let mut seen = 0;
            for kk in 0..2 * pairs {
                for j in 0..64 {
                    let pair = packed[(j / 32) * pairs * 32 + layout.offset(kk / 2, j % 32)];
                    let got = (pair >> (16 * (kk % 2))) as u16;
                    let want = if kk < k && j < n { b[kk * n + j] } else { 0 };
                    assert_eq!(got, want, "{layout:?} {source:?} ({kk}, {j})");
                    seen += usize::from(got != 0);
                }
            }
            assert_eq!(seen, k * n);
        }
    }

    /// A buffer reused from a larger product keeps none of its old words:
    /// the padding of a smaller one is zero, whatever the layout.
    #[test]
    fn a_reused_buffer_is_padded_with_zeros() {
        let (k, n) = (7, 5);
        let b: Vec<u16> = (0..k * n).map(|e| e as u16 + 1).collect();
        for layout in [Layout::Pairs { width: 32 }, Layout::Pairs { width: 12 }, Layout::Tiles { lhs: true }] {
            let pairs = 16;
            let mut packed = vec![u32::MAX; 4 * pairs * 32];
            // SAFETY: `b` is a row-major k × n matrix.
            unsafe { pack_rhs(&mut packed, (b.as_ptr(), n, 1), [k, n], pairs, layout, 1) };
            assert_eq!(packed.len(), pairs * layout.width());
            let nonzero = packed.iter().filter(|&&w| w != 0).count();
            // Each of the n columns holds ceil(k / 2) nonzero pairs.
            assert_eq!(nonzero, n * k.div_ceil(2), "{layout:?}");
        }
    }

    /// The AVX-512 blocks are the scalar ones, word for word: odd and even
    /// `k`, partial tiles of 16 rows and pairs, both contiguous strides.
    #[test]
    fn the_vector_blocks_are_the_scalar_ones() {
        if !crate::backend::cpu::kernels::simd::avx512() {
            eprintln!("skipped: this CPU has no AVX-512");
            return;
        }
        let mut tried = 0;
        for (k, cols, width) in [
            (1usize, 1usize, 12usize),
            (2, 12, 12),
            (35, 12, 12),
            (784, 7, 12),
            (64, 32, 32),
            (33, 17, 32),
            (3, 32, 32),
        ] {
            let pairs = k.div_ceil(2) + 1;
            // Rows of `k` contiguous (`k_stride == 1`), then columns (`c_stride == 1`), with spare room.
            let (len, strides) = (k * cols + 2 * k + 2 * cols + 8, [(1, k + 3), (cols + 5, 1)]);
            let src: Vec<u16> = (0..len * 3).map(|e| (e as u16).wrapping_mul(40503) | 1).collect();
            for (k_stride, c_stride) in strides {
                let mut vector = vec![0u32; pairs * width];
                let mut scalar = vector.clone();
                let source = (src.as_ptr(), k_stride, c_stride);
                // SAFETY: `src` holds every element (kk, c) of the block.
                unsafe { pack_block(&mut vector, source, [k, cols], Layout::Pairs { width }) };
                // SAFETY: as above.
                unsafe { pack_block_scalar(&mut scalar, source, [k, cols], Layout::Pairs { width }) };
                assert_eq!(vector, scalar, "k {k}, cols {cols}, width {width}, strides ({k_stride}, {c_stride})");
                tried += 1;
            }
        }
        assert_eq!(tried, 14);
    }
}
