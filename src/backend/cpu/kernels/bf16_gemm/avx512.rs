//! The `vdpbf16ps` tier: a micro-kernel of 12 rows by 32 columns (24 zmm
//! accumulators), each step a pair of `k` — two loads of the packed `rhs`
//! panel, twelve broadcasts of the packed `lhs` rows, 24 `vdpbf16ps`.
//!
//! Contract: as the module `bf16_gemm` says for `Avx512` (a row-major
//! `lhs` of even `k` read where it lies, `Job::lhs_rows`); `k` is taken in
//! blocks of `KC` pairs (the `lhs` block's 12 KiB stay in L1, the panels'
//! 32 KiB in L2), the accumulators stored to `dst` between blocks and
//! reloaded exactly, so the sums are those of one unblocked chain; with
//! `Job::round` the last block's store rounds them to bf16.
//!
//! Example: a 1024³ product runs 86 row blocks × 32 panels × 2 blocks of
//! `k` (256 pairs each) of this micro-kernel.

use super::pack::Layout;
use super::{Job, Kernel, NR};
use crate::backend::cpu::kernels::convert::avx512::round_bf16;
use crate::backend::cpu::kernels::simd::bh;
use crate::backend::cpu::kernels::simd::lanes;
use std::arch::x86_64::*;
use std::ops::Range;

/// Rows per micro-tile.
const MR: usize = 12;
/// Pairs of `k` per cache block.
const KC: usize = 256;

/// The `vdpbf16ps` tier.
pub(super) struct Kernel512;

impl Kernel for Kernel512 {
    const MR: usize = MR;
    const LHS: Layout = Layout::Pairs { width: MR };
    const RHS: Layout = Layout::Pairs { width: NR };
    const PAIR_ALIGN: usize = 1;
    const ROUNDS: bool = true;
    const READS_ROWS: bool = true;

    unsafe fn run(job: &Job, runs: &[(Range<usize>, Range<usize>)]) {
        // SAFETY: the caller's contract (the CPU has AVX512_BF16).
        unsafe { run(job, runs) }
    }
}

/// `Kernel::run` with the instructions enabled.
///
/// # Safety
/// As for `Kernel::run`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")]
unsafe fn run(job: &Job, runs: &[(Range<usize>, Range<usize>)]) {
    let (a_block, b_panel) = (job.pairs * MR, job.pairs * NR);
    for (rows, panels) in runs {
        for p0 in (0..job.pairs).step_by(KC) {
            let pairs = KC.min(job.pairs - p0);
            let load = job.accumulate || p0 > 0;
            let round = job.round && p0 + KC >= job.pairs;
            for ib in rows.clone() {
                let (i, r) = (ib * MR, MR.min(job.m - ib * MR));
                // Pair `p` of row `r` of the block: a word of the packed
                // block, or of the row itself (`row_bytes` apart).
                let (a, row_bytes) = match &job.lhs_rows {
                    // SAFETY: rows i.. of `lhs`, from pair `p0`.
                    Some((first, stride)) => {
                        (unsafe { first.0.add(i * stride + 2 * p0) }.cast_const().cast(), 2 * stride)
                    }
                    // SAFETY: block `ib` of the packed `lhs`, from pair `p0`.
                    None => (unsafe { job.a.as_ptr().add(ib * a_block + p0 * MR) }.cast::<i32>(), 0),
                };
                let direct = job.lhs_rows.is_some();
                for jp in panels.clone() {
                    let (j, c) = (jp * NR, NR.min(job.n - jp * NR));
                    // SAFETY: panel `jp` of the packed `rhs`, from `p0`.
                    let b = unsafe { job.b.as_ptr().add(jp * b_panel + p0 * NR) }.cast::<__m512i>();
                    // SAFETY: rows i..i + r, columns j..j + c of `dst`
                    // are this worker's; the packed blocks hold `pairs`
                    // pairs from `p0`.
                    unsafe {
                        let (c0, shape, how) = (job.dst.0.add(i * job.n + j), [r, c], [load, round]);
                        match (direct, r <= 4) {
                            (false, true) => tile_of_4::<false>(a, row_bytes, b, pairs, c0, job.n, shape, how),
                            (false, false) => tile::<MR, false>(a, row_bytes, b, pairs, c0, job.n, shape, how),
                            (true, true) => tile_of_4::<true>(a, row_bytes, b, pairs, c0, job.n, shape, how),
                            (true, false) => tile::<MR, true>(a, row_bytes, b, pairs, c0, job.n, shape, how),
                        }
                    };
                }
            }
        }
    }
}

/// The micro-kernel: `c[0..rows][0..cols]` (row stride `ldc`) = (`load`:
/// `c` +) the product of `pairs` pairs of a 12-row `lhs` block (packed;
/// with `DIRECT`, rows `row_bytes` apart, each pair a word) and a packed
/// 32-column `rhs` panel, each sum rounded to bf16 when `round`.
///
/// # Safety
/// AVX512_BF16; `a` holds `pairs · 12` words (`DIRECT`: `rows` rows of
/// `pairs` words) and `b` `pairs · 2` vectors; `c` addresses `rows ≤ 12`
/// rows of `cols ≤ 32` elements.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const ROWS: usize, const DIRECT: bool>(
    a: *const i32,
    row_bytes: usize,
    b: *const __m512i,
    pairs: usize,
    c: *mut f32,
    ldc: usize,
    [rows, cols]: [usize; 2],
    [load, round]: [bool; 2],
) {
    let masks = [lanes(cols), lanes(cols.saturating_sub(16))];
    // 24 accumulators in registers, one row at a time through
    // `each_of_12_rows!`.
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    if load {
        macro_rules! load_row {
            ($r:literal) => {
                if $r < rows {
                    for v in 0..2 {
                        // SAFETY: row `r` of `c`, masked to `cols`.
                        acc[$r][v] = unsafe { _mm512_maskz_loadu_ps(masks[v], c.wrapping_add($r * ldc + 16 * v)) };
                    }
                }
            };
        }
        each_of_12_rows!(load_row);
    }
    // With `DIRECT`, a row past `rows` reads a row of the block again (its
    // results are not stored), so every address read is in the block.
    // Three bases four rows apart and three row offsets address all twelve.
    let row = |r: usize| match r < rows {
        true => r * row_bytes,
        false => 0,
    };
    let bases = [0, 4, 8].map(|r| a.cast::<u8>().wrapping_add(row(r)));
    let offsets = |r: usize| match r < rows {
        true => (r % 4) * row_bytes,
        false => 0,
    };
    for p in 0..pairs {
        // SAFETY: pair `p` of the panel: two vectors.
        let (b0, b1) = unsafe { (_mm512_loadu_si512(b.add(2 * p)), _mm512_loadu_si512(b.add(2 * p + 1))) };
        let (b0, b1) = (bh(b0), bh(b1));
        let a = a.wrapping_add(p * MR);
        macro_rules! step_row {
            ($r:literal) => {
                if $r < ROWS {
                    let at = match DIRECT {
                        true => bases[$r / 4].wrapping_add(offsets($r) + 4 * p).cast::<i32>(),
                        false => a.wrapping_add($r),
                    };
                    // SAFETY: pair `p` of row `r` of the block.
                    let av = bh(_mm512_set1_epi32(unsafe { at.read_unaligned() }));
                    acc[$r][0] = _mm512_dpbf16_ps(acc[$r][0], av, b0);
                    acc[$r][1] = _mm512_dpbf16_ps(acc[$r][1], av, b1);
                }
            };
        }
        each_of_12_rows!(step_row);
    }
    macro_rules! store_row {
        ($r:literal) => {
            if $r < rows {
                for v in 0..2 {
                    let value = if round { round_bf16(acc[$r][v]) } else { acc[$r][v] };
                    // SAFETY: row `r` of `c`, masked to `cols`.
                    unsafe { _mm512_mask_storeu_ps(c.wrapping_add($r * ldc + 16 * v), masks[v], value) };
                }
            }
        };
    }
    each_of_12_rows!(store_row);
}

/// `tile` of a block's last rows when there are at most 4 of them (a
/// 256-row product's last block): a third of the work of 12 rows.
///
/// # Safety
/// As for `tile`, with `rows ≤ 4`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")]
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn tile_of_4<const DIRECT: bool>(
    a: *const i32,
    row_bytes: usize,
    b: *const __m512i,
    pairs: usize,
    c: *mut f32,
    ldc: usize,
    shape: [usize; 2],
    how: [bool; 2],
) {
    // SAFETY: the caller's contract.
    unsafe { tile::<4, DIRECT>(a, row_bytes, b, pairs, c, ldc, shape, how) }
}
