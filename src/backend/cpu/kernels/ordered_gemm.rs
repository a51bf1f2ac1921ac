//! tfc's own single-precision matrix product, for exported functions: one
//! fixed summation order, no allocation, and the same code in process and
//! in the ahead-of-time libraries `tfc build -o` writes (module `aot`).
//!
//! Contract: `dst[i·n + j] = fma(a[i][k-1], b[k-1][j], … fma(a[i][0],
//! b[0][j], +0) …)`: every output element is one chain of fused
//! multiply-adds over `k` in order, starting from `+0`. So the result does
//! not depend on how the rows and columns are blocked, on the vector
//! width, on the thread count or on the batch size (a row of a batch of 64
//! equals the same row alone), and the portable path (`f32::mul_add`)
//! equals the AVX-512 one bit for bit. `a` is addressed by (row, column)
//! element strides, so a transposed left operand costs nothing; `b` must be
//! row-major with row stride `b_rs` (its columns contiguous). Nothing is
//! allocated, nothing is packed: the accumulators of a block of rows and
//! columns stay in registers over the whole of `k`.
//!
//! Example: `ordered_sgemm(y, (x, 784, 1), (w, 256), [64, 784, 256], 0..64)`
//! is `y = x @ w` for row-major `x: [64, 784]`, `w: [784, 256]`.

/// The left operand: its first element and its (row, column) strides.
pub(in crate::backend::cpu) type Lhs = (*const f32, usize, usize);
/// The right operand: its first element and its row stride (its columns
/// are contiguous).
pub(in crate::backend::cpu) type Rhs = (*const f32, usize);

/// `dst = a · b` for the output rows `rows` (see the module docs);
/// `mkn` is `[m, k, n]` and `dst` is row-major `m × n`.
///
/// # Safety
/// `a` must address an `m × k` and `b` a `k × n` matrix through their
/// strides, and `dst` must hold `m × n` elements; `rows` lies in `0..m`.
pub(in crate::backend::cpu) unsafe fn ordered_sgemm(
    dst: *mut f32,
    a: Lhs,
    b: Rhs,
    mkn: [usize; 3],
    rows: std::ops::Range<usize>,
) {
    #[cfg(target_arch = "x86_64")]
    if super::simd::avx512() {
        // SAFETY: the CPU has AVX-512 (checked); the caller's contract.
        return unsafe { wide::rows(dst, a, b, mkn, rows) };
    }
    // SAFETY: the caller's contract.
    unsafe { portable(dst, a, b, mkn, rows) }
}

/// `ordered_sgemm` over all `m` rows, split into blocks of rows over
/// `threads` workers of the current pool (the same bits at any count).
///
/// # Safety
/// As for `ordered_sgemm`.
pub(in crate::backend::cpu) unsafe fn ordered_sgemm_all(
    dst: &mut [f32],
    a: Lhs,
    b: Rhs,
    mkn: [usize; 3],
    threads: usize,
) {
    let [m, _, n] = mkn;
    debug_assert!(dst.len() >= m * n);
    /// Rows a worker takes at least (one register block).
    const ROWS: usize = 8;
    let threads = crate::backend::cpu::threads::for_product(mkn, threads);
    let out = SendPtr(dst.as_mut_ptr());
    let (pa, pb) = (SendPtr(a.0.cast_mut()), SendPtr(b.0.cast_mut()));
    crate::backend::cpu::threads::in_ranges(m.div_ceil(ROWS), threads, |lo, hi| {
        let (out, pa, pb) = (&out, &pa, &pb);
        // SAFETY: the caller's contract; workers write disjoint rows.
        unsafe { ordered_sgemm(out.0, (pa.0, a.1, a.2), (pb.0, b.1), mkn, lo * ROWS..(hi * ROWS).min(m)) }
    });
}

/// A pointer the workers share (each writes its own rows).
struct SendPtr(*mut f32);
// SAFETY: workers write disjoint rows and only read the operands.
unsafe impl Sync for SendPtr {}

/// The portable path: the same chains as the AVX-512 one, one element at
/// a time.
///
/// # Safety
/// As for `ordered_sgemm`.
unsafe fn portable(
    dst: *mut f32,
    (a, a_rs, a_cs): Lhs,
    (b, b_rs): Rhs,
    [_, k, n]: [usize; 3],
    rows: std::ops::Range<usize>,
) {
    for i in rows {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                // SAFETY: in bounds by the caller's contract.
                acc = unsafe { (*a.add(i * a_rs + p * a_cs)).mul_add(*b.add(p * b_rs + j), acc) };
            }
            // SAFETY: as above.
            unsafe { *dst.add(i * n + j) = acc };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod wide {
    use super::{Lhs, Rhs};
    use crate::backend::cpu::kernels::simd::lanes;
    use std::arch::x86_64::*;

    /// The rows `rows` in register blocks of MR rows by NV vectors of 16
    /// columns: for wide products six rows by four vectors while six rows
    /// are left (24 accumulators; the loads of `b` and broadcasts of `a`
    /// stay under the multiply-adds, which run at 96-98% of the core's
    /// peak), then four by four, two by eight and one by sixteen, so that
    /// few rows read whole rows of `b` in order (a batch of one streams the
    /// weights, which bounds its time, as one sequence); products of at
    /// most 32 or 16 columns take blocks of that width, so that masked
    /// lanes waste little. Columns go in blocks of the block's vectors, the
    /// last one masked.
    ///
    /// # Safety
    /// AVX-512F; as for `ordered_sgemm`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows(dst: *mut f32, a: Lhs, b: Rhs, mkn: [usize; 3], rows: std::ops::Range<usize>) {
        let mut i = rows.start;
        let vectors = mkn[2].div_ceil(16);
        while i < rows.end {
            let left = rows.end - i;
            // SAFETY (each): the caller's contract; `i + MR <= rows.end`.
            i += unsafe {
                match (vectors, left) {
                    (1, 8..) => columns::<8, 1>(dst, a, b, mkn, i),
                    (1, 4..) => columns::<4, 1>(dst, a, b, mkn, i),
                    (1, _) => columns::<1, 1>(dst, a, b, mkn, i),
                    (2, 8..) => columns::<8, 2>(dst, a, b, mkn, i),
                    (2, 4..) => columns::<4, 2>(dst, a, b, mkn, i),
                    (2, _) => columns::<1, 2>(dst, a, b, mkn, i),
                    (_, 6..) => columns::<6, 4>(dst, a, b, mkn, i),
                    (_, 4 | 5) => columns::<4, 4>(dst, a, b, mkn, i),
                    (_, 2 | 3) => columns::<2, 8>(dst, a, b, mkn, i),
                    (_, _) => columns::<1, 16>(dst, a, b, mkn, i),
                }
            };
        }
    }

    /// Rows `i..i + MR` of the product, in column blocks of `NV` vectors;
    /// returns `MR`.
    ///
    /// # Safety
    /// As for `rows`.
    #[target_feature(enable = "avx512f")]
    unsafe fn columns<const MR: usize, const NV: usize>(
        dst: *mut f32,
        (a, a_rs, a_cs): Lhs,
        (b, b_rs): Rhs,
        [_, k, n]: [usize; 3],
        i: usize,
    ) -> usize {
        let mut j = 0;
        while j < n {
            let masks: [u16; NV] = std::array::from_fn(|v| lanes(n.saturating_sub(j + 16 * v)));
            let mut acc = [[_mm512_setzero_ps(); NV]; MR];
            for p in 0..k {
                // SAFETY: row `p` of `b` from column `j`, masked to `n`.
                let row = unsafe { b.add(p * b_rs + j) };
                let bv: [__m512; NV] =
                    std::array::from_fn(|v| unsafe { _mm512_maskz_loadu_ps(masks[v], row.wrapping_add(16 * v)) });
                for (r, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: element (i + r, p) of `a`.
                    let av = _mm512_set1_ps(unsafe { *a.add((i + r) * a_rs + p * a_cs) });
                    for v in 0..NV {
                        acc[v] = _mm512_fmadd_ps(av, bv[v], acc[v]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for v in 0..NV {
                    // SAFETY: row `i + r` of `dst`, masked to `n`.
                    unsafe { _mm512_mask_storeu_ps(dst.wrapping_add((i + r) * n + j + 16 * v), masks[v], acc[v]) };
                }
            }
            j += 16 * NV;
        }
        MR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each element as the contract's chain, in the plainest code.
    fn chains(a: &[f32], b: &[f32], [m, k, n]: [usize; 3]) -> Vec<f32> {
        let mut out = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).fold(0.0f32, |acc, p| a[i * k + p].mul_add(b[p * n + j], acc));
            }
        }
        out
    }

    fn ramp(len: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    #[test]
    fn every_shape_gives_the_chains_bit_for_bit() {
        for &[m, k, n] in &[[1, 784, 256], [64, 784, 256], [13, 7, 10], [9, 1, 33], [3, 0, 5], [8, 16, 16], [2, 5, 129]]
        {
            let (a, b) = (ramp(m * k, 1), ramp(k * n, 2));
            let want = chains(&a, &b, [m, k, n]);
            for threads in [1, 2] {
                let mut got = vec![f32::NAN; m * n];
                // SAFETY: the sizes match.
                unsafe { ordered_sgemm_all(&mut got, (a.as_ptr(), k, 1), (b.as_ptr(), n), [m, k, n], threads) };
                let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{m}x{k}x{n} with {threads} threads");
            }
            let mut portable_out = vec![f32::NAN; m * n];
            // SAFETY: the sizes match.
            unsafe { portable(portable_out.as_mut_ptr(), (a.as_ptr(), k, 1), (b.as_ptr(), n), [m, k, n], 0..m) };
            assert!(portable_out.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }

    #[test]
    fn a_row_does_not_depend_on_the_batch() {
        let [m, k, n] = [64, 100, 40];
        let (a, b) = (ramp(m * k, 3), ramp(k * n, 4));
        let mut all = vec![0.0f32; m * n];
        // SAFETY: the sizes match.
        unsafe { ordered_sgemm_all(&mut all, (a.as_ptr(), k, 1), (b.as_ptr(), n), [m, k, n], 1) };
        for i in [0, 5, 63] {
            let mut one = vec![0.0f32; n];
            // SAFETY: one row of `a`.
            unsafe { ordered_sgemm_all(&mut one, (a[i * k..].as_ptr(), k, 1), (b.as_ptr(), n), [1, k, n], 1) };
            assert_eq!(one, all[i * n..(i + 1) * n]);
        }
    }

    #[test]
    fn a_transposed_left_operand_reads_through_strides() {
        let [m, k, n] = [5, 6, 7];
        let (at, b) = (ramp(k * m, 5), ramp(k * n, 6));
        let a: Vec<f32> = (0..m * k).map(|e| at[(e % k) * m + e / k]).collect();
        let mut got = vec![0.0f32; m * n];
        // SAFETY: `at` is k × m, read as its transpose.
        unsafe { ordered_sgemm_all(&mut got, (at.as_ptr(), 1, m), (b.as_ptr(), n), [m, k, n], 1) };
        assert_eq!(got, chains(&a, &b, [m, k, n]));
    }
}
