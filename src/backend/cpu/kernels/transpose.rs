//! Native matrix transposes for the JIT executor, of elements of any type
//! moved as words of their width (`window::Word`).
//!
//! Contract: [`transpose`] writes `to[c * rows + r] = from[r * cols + c]`
//! for a row-major `rows × cols` `from`: a copy, so every element keeps its
//! bits. For four-byte words with AVX-512 (module `simd`) it moves 16-row × 8-column blocks
//! through eight 256-bit registers (unpack, shuffle, lane permute: the
//! usual 8x8 register transpose, twice), so each store fills a whole
//! 64-byte line of `to`, walking 64x64 tiles so that the lines a tile
//! reads and writes stay in L1; the rows and columns that do not fill a
//! block, and machines without AVX-512, take the scalar tiled loop.
//!
//! Why it matters: a transposed right operand is materialized with this
//! before its matrix product rather than read through `gemm`'s strides,
//! because `gemm` packs such an operand far more slowly than this copies
//! it (`CompiledUnit::matmul_operand_transposes`).
//!
//! Example: `transpose(&[1u32, 2, 3, 4, 5, 6], &mut to, 2, 3)` leaves
//! `to = [1, 4, 2, 5, 3, 6]`.

use super::window::Word;

/// `to = fromᵀ` for a row-major `rows × cols` `from` (see the module docs).
pub(in crate::backend::cpu) fn transpose<W: Word>(from: &[W], to: &mut [W], rows: usize, cols: usize) {
    assert!(from.len() >= rows * cols && to.len() >= rows * cols, "transpose operands smaller than {rows}x{cols}");
    let mut done_rows = 0;
    #[cfg(target_arch = "x86_64")]
    if std::mem::size_of::<W>() == 4 && super::simd::avx512() {
        // SAFETY: a four-byte `Word` is a `u32`, whose every bit pattern is
        // an `f32` the shuffles move unchanged; the views cover the same
        // elements. `avx512()` checked the CPU's features (AVX2 comes with
        // them); the sizes were checked above.
        done_rows = unsafe {
            let from = std::slice::from_raw_parts(from.as_ptr().cast::<f32>(), from.len());
            let to = std::slice::from_raw_parts_mut(to.as_mut_ptr().cast::<f32>(), to.len());
            blocks(from, to, rows, cols)
        };
    }
    // The columns right of the last whole block in the block rows, then
    // every remaining row.
    let block_cols = if done_rows > 0 { cols / 8 * 8 } else { 0 };
    scalar(from, to, rows, cols, 0..done_rows, block_cols..cols);
    scalar(from, to, rows, cols, done_rows..rows, 0..cols);
}

/// The scalar loop over `row_range × col_range`, in 32x32 tiles.
fn scalar<W: Word>(
    from: &[W],
    to: &mut [W],
    rows: usize,
    cols: usize,
    row_range: std::ops::Range<usize>,
    col_range: std::ops::Range<usize>,
) {
    const TILE: usize = 32;
    for r0 in row_range.clone().step_by(TILE) {
        for c0 in col_range.clone().step_by(TILE) {
            for r in r0..(r0 + TILE).min(row_range.end) {
                for c in c0..(c0 + TILE).min(col_range.end) {
                    to[c * rows + r] = from[r * cols + c];
                }
            }
        }
    }
}

/// Transposes the whole 16 × 8 blocks of the top `rows / 16 * 16` rows and
/// left `cols / 8 * 8` columns; returns how many rows that covers.
///
/// # Safety
/// The CPU has AVX2; `from` and `to` hold `rows * cols` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn blocks(from: &[f32], to: &mut [f32], rows: usize, cols: usize) -> usize {
    const TILE: usize = 64;
    let (block_rows, block_cols) = (rows / 16 * 16, cols / 8 * 8);
    let (f, t) = (from.as_ptr(), to.as_mut_ptr());
    for tile_r in (0..block_rows).step_by(TILE) {
        for tile_c in (0..block_cols).step_by(TILE) {
            for r in (tile_r..(tile_r + TILE).min(block_rows)).step_by(16) {
                for c in (tile_c..(tile_c + TILE).min(block_cols)).step_by(8) {
                    for half in [r, r + 8] {
                        // SAFETY: rows `half..half + 8` and columns
                        // `c..c + 8` lie inside both matrices.
                        unsafe { block_8x8(f.add(half * cols + c), cols, t.add(c * rows + half), rows) };
                    }
                }
            }
        }
    }
    block_rows
}

/// Transposes the 8x8 block at `from` (row stride `from_stride`) into `to`
/// (row stride `to_stride`).
///
/// # Safety
/// The CPU has AVX2; both blocks lie in readable / writable memory.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_8x8(from: *const f32, from_stride: usize, to: *mut f32, to_stride: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract (eight rows of eight floats each).
    let row = |i: usize| unsafe { _mm256_loadu_ps(from.add(i * from_stride)) };
    let a = [row(0), row(1), row(2), row(3), row(4), row(5), row(6), row(7)];
    // Pairs of rows interleaved, then pairs of pairs: each 128-bit lane
    // holds a 4x4 sub-block's column.
    let lo = |i: usize| _mm256_unpacklo_ps(a[i], a[i + 1]);
    let hi = |i: usize| _mm256_unpackhi_ps(a[i], a[i + 1]);
    let b = [lo(0), hi(0), lo(2), hi(2), lo(4), hi(4), lo(6), hi(6)];
    let c = [
        _mm256_shuffle_ps::<0x44>(b[0], b[2]),
        _mm256_shuffle_ps::<0xEE>(b[0], b[2]),
        _mm256_shuffle_ps::<0x44>(b[1], b[3]),
        _mm256_shuffle_ps::<0xEE>(b[1], b[3]),
        _mm256_shuffle_ps::<0x44>(b[4], b[6]),
        _mm256_shuffle_ps::<0xEE>(b[4], b[6]),
        _mm256_shuffle_ps::<0x44>(b[5], b[7]),
        _mm256_shuffle_ps::<0xEE>(b[5], b[7]),
    ];
    // SAFETY: the caller's contract.
    let store = |i: usize, v: __m256| unsafe { _mm256_storeu_ps(to.add(i * to_stride), v) };
    for i in 0..4 {
        store(i, _mm256_permute2f128_ps::<0x20>(c[i], c[i + 4]));
        store(i + 4, _mm256_permute2f128_ps::<0x31>(c[i], c[i + 4]));
    }
}

#[cfg(test)]
mod tests {
    use super::transpose;

    #[test]
    fn transposes_every_shape_bit_for_bit() {
        // Block-aligned, ragged in rows, in columns and in both; smaller
        // than a block; one row or column; larger than a tile.
        let shapes = [(1, 1), (1, 9), (9, 1), (2, 3), (16, 8), (17, 8), (16, 9), (33, 70), (64, 256), (130, 67)];
        for (rows, cols) in shapes {
            // Distinct bit patterns, NaN payloads and signed zeros included.
            let from: Vec<u32> = (0..rows * cols)
                .map(|i| match i % 5 {
                    0 => (-0.0f32).to_bits(),
                    1 => 0x7fc0_0000 | i as u32,
                    _ => (i as f32 * 0.5 - 3.0).to_bits(),
                })
                .collect();
            let mut to = vec![1u32; rows * cols];
            transpose(&from, &mut to, rows, cols);
            // The same in words of one and eight bytes (the scalar loop).
            let (bytes, wide): (Vec<u8>, Vec<u64>) = from.iter().map(|&v| (v as u8, (u64::from(v) << 20) | 3)).unzip();
            let (mut to_bytes, mut to_wide) = (vec![0u8; rows * cols], vec![0u64; rows * cols]);
            transpose(&bytes, &mut to_bytes, rows, cols);
            transpose(&wide, &mut to_wide, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    let (i, o) = (r * cols + c, c * rows + r);
                    assert_eq!(to[o], from[i], "{rows}x{cols} at ({r}, {c})");
                    assert_eq!((to_bytes[o], to_wide[o]), (bytes[i], wide[i]), "{rows}x{cols} at ({r}, {c})");
                }
            }
        }
    }

    #[test]
    fn documented_example() {
        let mut to = [0u32; 6];
        transpose(&[1u32, 2, 3, 4, 5, 6], &mut to, 2, 3);
        assert_eq!(to, [1, 4, 2, 5, 3, 6]);
    }
}
