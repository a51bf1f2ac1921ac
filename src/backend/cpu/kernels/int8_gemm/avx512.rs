//! The `vpdpbusd` tier: quantization of `x` and packing of `w` (module
//! `int8_gemm` gives the layouts), and a micro-kernel of 12 rows by 32
//! columns (24 zmm of `i32` accumulators), each step 4 of `k` — two loads
//! of the packed `w` panel, twelve broadcasts from the quantized `x` rows, 24
//! `vpdpbusd` — with the reference's epilogue.
//!
//! Contract: bit for bit `crate::tensor::quant::quant_matmul_into` (module
//! `int8_gemm`). The accumulators stay in registers for the whole of `k`
//! (no blocking: a 12-row block of `x` is `3 · k` bytes and a panel `32 ·
//! k` bytes, in L1 and L2 for the `k` of dense layers), so each sum is one
//! exact chain. A tile of fewer than 12 rows (the last block) is its own
//! instantiation (`tile::<ROWS>`), which computes no padding rows.
//!
//! Example: for `x = [[1, -1]]` (`k = 2`, one step), the row's scale is
//! `2/255`, its `inv` in f32 just under 127.5, so its zero point is 127,
//! its levels 254 and 0 and its `u32` `254 | 0 << 8` (two padding bytes of
//! 0); a column `w = [2, 3]` packed as `2 | 3 << 8` sums to `508`, less
//! `127 · 5` that is `−127`, times `2/255 · s_w`.

use super::{Job, Line, MR, NR};
use crate::backend::cpu::kernels::simd::lanes;
use crate::tensor::quant::RowQuant;
use std::arch::x86_64::*;
use std::ops::Range;

/// Quantizes rows of `x` (the first `quants.len()` rows of `k` elements),
/// each by its own range or all by `input_range`, into `a` (row `i` at
/// `a[i · quads..]`, its levels as bytes, the bytes past `k` 0), their
/// parameters into `quants`. The levels of a non-finite
/// row are left as they are (its sums are not used).
///
/// # Safety
/// AVX-512 F, BW, VL; `x` holds `quants.len()` rows of `k`, and `a`
/// `quants.len() · quads` `u32`s, `quads = ceil(k / 4)`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn quantize_rows(
    x: &[f32],
    k: usize,
    quads: usize,
    input_range: Option<[f32; 2]>,
    a: &mut [u32],
    quants: &mut [RowQuant],
) {
    let whole = k / 16 * 16;
    // Eight rows at a time (in L1 for the `k` of dense layers): first their
    // ranges, then their levels, so the rows' reductions and `from_range`s
    // (a division, a rounding) overlap instead of each waiting for the one
    // before.
    for group in (0..quants.len()).step_by(8) {
        let rows = group..(group + 8).min(quants.len());
        for i in rows.clone() {
            let row = &x[i * k..(i + 1) * k];
            // The range, starting from 0 as `RowQuant::of` does (a
            // masked-off lane loads 0, which changes neither), and whether
            // some `v - v` is NaN: `v` is a NaN or an infinity.
            let (mut lo, mut hi, mut bad) = (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
            let mut range = |v: __m512| {
                lo = _mm512_min_ps(lo, v);
                hi = _mm512_max_ps(hi, v);
                bad = _mm512_add_ps(bad, _mm512_sub_ps(v, v));
            };
            for c in (0..whole).step_by(16) {
                // SAFETY: elements `c..c + 16` of `row`.
                range(unsafe { _mm512_loadu_ps(row.as_ptr().add(c)) });
            }
            if whole < k {
                // SAFETY: the lanes of `row` from `whole`.
                range(unsafe { _mm512_maskz_loadu_ps(lanes(k - whole), row.as_ptr().add(whole)) });
            }
            let non_finite = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(bad, bad) != 0;
            // A static range replaces the row's own (the row's min and max
            // then go unused: computing them costs two of the loop's ops).
            let [lo, hi] = input_range.unwrap_or_else(|| [_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi)]);
            quants[i] = RowQuant::from_range(lo, hi, non_finite);
        }
        for i in rows {
            // SAFETY: the caller's contract, for row `i`.
            unsafe { store_levels(&x[i * k..(i + 1) * k], &quants[i], &mut a[i * quads..(i + 1) * quads]) };
        }
    }
}

/// The levels of the row `row` (quantized as `q`) into `levels` (`ceil(k /
/// 4)` `u32`s, the bytes past `k` 0); a non-finite row's are left as they
/// are (its output is NaN whatever the levels).
///
/// # Safety
/// AVX-512 F, BW, VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn store_levels(row: &[f32], q: &RowQuant, levels: &mut [u32]) {
    let k = row.len();
    let (whole, quads) = (k / 16 * 16, levels.len());
    if q.non_finite {
        return;
    }
    // The padding bytes of the last quad (the stores below write only
    // the first `k`).
    levels[quads - 1] = 0;
    let (inv, zero) = (_mm512_set1_ps(q.inv), _mm512_set1_epi32(q.zero));
    let bytes = levels.as_mut_ptr().cast::<u8>();
    // The level of elements `c..c + 16` before its clamp to 0..=255 (a
    // finite row has no NaN ratio).
    let shifted_at = |c: usize| {
        // SAFETY: elements `c..c + 16` of `row` (`c + 16 ≤ whole`).
        shifted_ratio(_mm512_mul_ps(unsafe { _mm512_loadu_ps(row.as_ptr().add(c)) }, inv), zero)
    };
    // 64 levels at a time, narrowed in registers (the narrowing stores
    // `vpmovdb m128` are several times slower on AMD cores): the two
    // saturating packs clamp each level to 0..=255 (the first to
    // 0..=767, which the second reads as positive `i16`s) and leave
    // chunk `j`'s 4 bytes of 128-bit lane `L` at dword `4L + j`, which
    // `UNPACK` moves to `4j + L`.
    const UNPACK: [i32; 16] = [0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15];
    let unpack = _mm512_loadu_si512(UNPACK.as_ptr().cast());
    let sixty_fours = k / 64 * 64;
    for c in (0..sixty_fours).step_by(64) {
        let low = _mm512_packus_epi32(shifted_at(c), shifted_at(c + 16));
        let high = _mm512_packus_epi32(shifted_at(c + 32), shifted_at(c + 48));
        let packed = _mm512_permutexvar_epi32(unpack, _mm512_packus_epi16(low, high));
        // SAFETY: bytes `c..c + 64` of the row's `4 · quads ≥ k`.
        unsafe { _mm512_storeu_si512(bytes.add(c).cast(), packed) };
    }
    let level_at = |c: usize| {
        // SAFETY: elements `c..c + 16` of `row` (`c + 16 ≤ whole`).
        level(unsafe { _mm512_loadu_ps(row.as_ptr().add(c)) }, inv, zero)
    };
    for c in (sixty_fours..whole).step_by(16) {
        // SAFETY: bytes `c..c + 16` of the row.
        unsafe { _mm_storeu_si128(bytes.add(c).cast(), _mm512_cvtepi32_epi8(level_at(c))) };
    }
    if whole < k {
        let mask = lanes(k - whole);
        // SAFETY: the lanes of `row` from `whole`, and bytes `whole..k`.
        unsafe {
            let v = _mm512_maskz_loadu_ps(mask, row.as_ptr().add(whole));
            _mm512_mask_cvtepi32_storeu_epi8(bytes.add(whole).cast(), mask, level(v, inv, zero));
        }
    }
}

/// `RowQuant::level` of 16 elements of a finite row: `clamp(clamp(round(v
/// · inv), −512, 512) + zero, 0, 255)`, a NaN ratio (from an infinite
/// `inv`, which `RowQuant::from_range` rules out, or a NaN `v`, whose level
/// nothing reads) counting as 0.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn level(v: __m512, inv: __m512, zero: __m512i) -> __m512i {
    let r = _mm512_mul_ps(v, inv);
    let l = shifted_ratio(r, zero);
    // A NaN ratio counts as 0, as `as i32` makes it.
    let l = _mm512_mask_mov_epi32(l, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(r, r), zero);
    _mm512_min_epi32(_mm512_max_epi32(l, _mm512_setzero_si512()), _mm512_set1_epi32(255))
}

/// `clamp(round(r), −512, 512) + zero` of 16 ratios that are not NaN: a
/// level before its clamp to 0..=255, in −512..=767.
#[inline]
#[target_feature(enable = "avx512f")]
fn shifted_ratio(r: __m512, zero: __m512i) -> __m512i {
    // Clamped to ±512 first (integers, so before or after rounding is the
    // same), then rounded to nearest even, as `round_ties_even`, whatever
    // MXCSR says.
    let c = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-512.0)), _mm512_set1_ps(512.0));
    let t = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(c);
    _mm512_add_epi32(t, zero)
}

/// Packs the panels `panels` of `w` (`k × n`, row-major) into `b` (from its
/// start, `quads · 2` lines a panel) and their column sums into `col_sums`
/// (`NR` a panel), writing every line and sum of them.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI; `b` and `col_sums` hold those panels, `quads
/// ≥ ceil(k / 4)`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn pack_panels(
    w: &[i8],
    [k, n]: [usize; 2],
    panels: Range<usize>,
    quads: usize,
    b: &mut [Line],
    col_sums: &mut [i32],
) {
    // `vpdpbusd` with `u8` ones adds up each column's four bytes.
    let ones = _mm512_set1_epi8(1);
    for (p, jp) in panels.enumerate() {
        let panel = &mut b[p * quads * 2..(p + 1) * quads * 2];
        let mut sums = [_mm512_setzero_si512(); 2];
        for q in 0..quads {
            for (half, sum) in sums.iter_mut().enumerate() {
                let c0 = jp * NR + 16 * half;
                let mask = lanes(n.saturating_sub(c0));
                // SAFETY: the masked lanes of row `4q + i` of `w` from
                // column `c0` (none when `c0 ≥ n`: the address is then
                // never read).
                let row = |i: usize| match 4 * q + i {
                    kk if kk < k => unsafe { _mm_maskz_loadu_epi8(mask, w.as_ptr().wrapping_add(kk * n + c0)) },
                    _ => _mm_setzero_si128(),
                };
                let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
                // Bytes (r0, r1) and (r2, r3) of each column side by side,
                // then the two pairs: 16 columns of 4 bytes.
                let (lo01, hi01) = (_mm_unpacklo_epi8(r0, r1), _mm_unpackhi_epi8(r0, r1));
                let (lo23, hi23) = (_mm_unpacklo_epi8(r2, r3), _mm_unpackhi_epi8(r2, r3));
                // Joined in a register (four 16-byte stores read back as
                // one vector would stall on store forwarding).
                let mut v = _mm512_castsi128_si512(_mm_unpacklo_epi16(lo01, lo23));
                v = _mm512_inserti32x4::<1>(v, _mm_unpackhi_epi16(lo01, lo23));
                v = _mm512_inserti32x4::<2>(v, _mm_unpacklo_epi16(hi01, hi23));
                v = _mm512_inserti32x4::<3>(v, _mm_unpackhi_epi16(hi01, hi23));
                // SAFETY: `Line` is 64 bytes, 64-aligned.
                unsafe { _mm512_store_si512(std::ptr::from_mut(&mut panel[2 * q + half]).cast(), v) };
                *sum = _mm512_dpbusd_epi32(*sum, ones, v);
            }
        }
        for (half, sum) in sums.into_iter().enumerate() {
            // SAFETY: 16 column sums of panel `p`.
            unsafe { _mm512_storeu_si512(col_sums[p * NR + 16 * half..][..16].as_mut_ptr().cast(), sum) };
        }
    }
}

/// Runs the product for each `(row blocks, column panels)` of `runs` on
/// this thread, over the whole of `k`: panel by panel (its packed `w`
/// stays in L1 or L2), the blocks of `x` under it.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI; `job` is packed, and the blocks of `runs` of
/// its `dst` are this thread's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn run(job: &Job, runs: &[(Range<usize>, Range<usize>)]) {
    let b_panel = job.quads * 2;
    for (rows, panels) in runs {
        for jp in panels.clone() {
            let (j, cols) = (jp * NR, NR.min(job.n - jp * NR));
            let b = job.b[jp * b_panel..].as_ptr().cast::<__m512i>();
            let edge = Edge {
                cols,
                sums: &job.col_sums[j..j + NR],
                w_scale: &job.w_scale[j..j + cols],
                bias: job.post.bias.map(|b| &b[j..j + cols]),
                relu: job.post.relu,
                ldc: job.n,
            };
            for ib in rows.clone() {
                let (i, r) = (ib * MR, MR.min(job.m - ib * MR));
                // Where each row's steps start, and where step `q` is from
                // there: `q` for packed rows, `steps[q]` in place.
                let (starts, steps) = match &job.gather {
                    None => {
                        let a = job.a[i * job.quads..].as_ptr();
                        (std::array::from_fn(|r| a.wrapping_add(r * job.quads)), None)
                    }
                    Some(g) => {
                        let at = |r: usize| g.levels.as_ptr().wrapping_add(g.rows[(i + r).min(job.m - 1)]);
                        (std::array::from_fn(at), Some(g.steps.as_ptr()))
                    }
                };
                let quants = &job.quants[i..i + r];
                // SAFETY: rows i..i + r, columns j..j + cols of `dst` are
                // this worker's.
                let c = unsafe { job.dst.0.add(i * job.n + j) };
                macro_rules! by_rows {
                    ($($rows:literal)*) => {
                        match (r, steps) {
                            // SAFETY: block `ib` and panel `jp`, packed
                            // with `quads` steps; `c` as above.
                            $(($rows, None) => unsafe {
                                tile::<$rows, false>(&starts, std::ptr::null(), b, job.quads, c, quants, &edge)
                            },)*
                            $(($rows, Some(steps)) => unsafe {
                                tile::<$rows, true>(&starts, steps, b, job.quads, c, quants, &edge)
                            },)*
                            _ => unreachable!("a block has 1 to {MR} rows"),
                        }
                    };
                }
                by_rows!(1 2 3 4 5 6 7 8 9 10 11 12);
            }
        }
    }
}

/// What the epilogue of a tile needs of its panel.
struct Edge<'a> {
    /// Columns of the panel inside `dst` (1 to 32).
    cols: usize,
    /// The panel's column sums (32).
    sums: &'a [i32],
    /// The scales of its `cols` columns.
    w_scale: &'a [f32],
    /// The bias of its `cols` columns, added to each output.
    bias: Option<&'a [f32]>,
    /// Whether the ReLU follows.
    relu: bool,
    /// `dst`'s row stride.
    ldc: usize,
}

/// The micro-kernel: `c[0..ROWS][0..edge.cols]` (row stride `edge.ldc`) =
/// the reference's outputs for the `quads` steps of `ROWS` quantized rows
/// (quantized as `quants`) and a packed 32-column panel `b`. Step `q` of
/// row `r` is the `u32` at `starts[r] + q`, or, `IN_PLACE` (a
/// convolution's rows read from its level images, `Gather`), at
/// `starts[r] + steps[q]`.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI; those `u32`s exist for the first `ROWS` rows,
/// `steps` holds `quads` offsets when `IN_PLACE`; `b` holds `quads · 2`
/// vectors; `c` addresses `ROWS` rows of `edge.cols` elements; `quants`
/// has `ROWS` elements.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<const ROWS: usize, const IN_PLACE: bool>(
    starts: &[*const u32; MR],
    steps: *const usize,
    b: *const __m512i,
    quads: usize,
    c: *mut f32,
    quants: &[RowQuant],
    edge: &Edge,
) {
    // 24 accumulators in registers, one row at a time through
    // `each_of_12_rows!`; `$r < ROWS` is a constant, so the rows past
    // `ROWS` are not compiled.
    let mut acc = [[_mm512_setzero_si512(); 2]; MR];
    for q in 0..quads {
        // SAFETY: step `q` of the panel: two vectors.
        let (b0, b1) = unsafe { (_mm512_loadu_si512(b.add(2 * q)), _mm512_loadu_si512(b.add(2 * q + 1))) };
        // SAFETY: `steps` has `quads` entries when reading in place.
        let at = if IN_PLACE { unsafe { steps.add(q).read() } } else { q };
        macro_rules! step_row {
            ($r:literal) => {
                if $r < ROWS {
                    // SAFETY: step `q` of row `r` of the block.
                    let av = _mm512_set1_epi32(unsafe { starts[$r].add(at).read() } as i32);
                    acc[$r][0] = _mm512_dpbusd_epi32(acc[$r][0], av, b0);
                    acc[$r][1] = _mm512_dpbusd_epi32(acc[$r][1], av, b1);
                }
            };
        }
        each_of_12_rows!(step_row);
    }
    // The epilogue, as `RowQuant::output`: `f32(acc − zero · col_sum)`
    // (wrapping), times `scale · w_scale[j]` (rounded first).
    let masks = [lanes(edge.cols), lanes(edge.cols.saturating_sub(16))];
    // SAFETY (both): the 32 sums, and the masked lanes of the `cols` scales.
    let sums = unsafe { [0, 16].map(|o| _mm512_loadu_si512(edge.sums[o..].as_ptr().cast())) };
    let w_scale =
        [0, 1].map(|v| unsafe { _mm512_maskz_loadu_ps(masks[v], edge.w_scale.as_ptr().wrapping_add(16 * v)) });
    // SAFETY: the masked lanes of the `cols` biases.
    let bias =
        edge.bias.map(|b| [0, 1].map(|v| unsafe { _mm512_maskz_loadu_ps(masks[v], b.as_ptr().wrapping_add(16 * v)) }));
    macro_rules! store_row {
        ($r:literal) => {
            if $r < ROWS {
                let q = quants[$r];
                for v in 0..2 {
                    let out = if q.non_finite {
                        _mm512_set1_ps(f32::NAN)
                    } else {
                        let shifted =
                            _mm512_sub_epi32(acc[$r][v], _mm512_mullo_epi32(_mm512_set1_epi32(q.zero), sums[v]));
                        _mm512_mul_ps(_mm512_cvtepi32_ps(shifted), _mm512_mul_ps(_mm512_set1_ps(q.scale), w_scale[v]))
                    };
                    let out = match bias {
                        Some(bias) => _mm512_add_ps(out, bias[v]),
                        None => out,
                    };
                    // ReLU keeps lanes above zero or NaN (`!(v <= 0)`) and
                    // zeroes the rest, `-0` included.
                    let out = match edge.relu {
                        true => _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_NLE_UQ>(out, _mm512_setzero_ps()), out),
                        false => out,
                    };
                    // SAFETY: row `r` of `c`, masked to `cols`.
                    unsafe { _mm512_mask_storeu_ps(c.wrapping_add($r * edge.ldc + 16 * v), masks[v], out) };
                }
            }
        };
    }
    each_of_12_rows!(store_row);
}
