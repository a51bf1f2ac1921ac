//! The direct forward convolution (module docs of `conv_direct`): output
//! rows split into units over the threads, each a sequence of register
//! tiles of positions × channel vectors, finished with the post-ops and,
//! with a fused max pool, pooled pair by pair from the L1 cache.
//!
//! Contract: `forward` writes `y` (and the pool and its first-maximum
//! masks) as the module docs say, with every sum a chain of multiply-adds
//! over `i`, `j`, `c` in that order, whatever the thread count.
//!
//! Example: the bench CNN's second convolution runs 896 output rows of one
//! 14-position tile, each 144 steps of 2 loads, 14 broadcasts and 28
//! multiply-adds.

use super::{channel_blocks, load, masks_lanes, tile_starts, PostOps, SendPtr, Window};
use crate::backend::cpu::threads::in_ranges;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512, _mm512_add_ps, _mm512_cmp_ps_mask, _mm512_fmadd_ps, _mm512_kunpackw, _mm512_mask_storeu_ps,
    _mm512_maskz_loadu_ps, _mm512_maskz_mov_ps, _mm512_set1_ps, _mm512_setzero_ps, _CMP_EQ_OQ, _CMP_GT_OQ, _CMP_NLE_UQ,
    _CMP_UNORD_Q,
};

/// `y = post(conv(src, w))` (see the module docs and [`PostOps`]);
/// `threads` share the output rows.
///
/// # Safety
/// `simd::avx512()` must hold; `src`, `w` and `y` must hold `win`'s source,
/// weight and output elements and `win.fits()`; a bias holds `win.o` values,
/// `keep_where_positive` as many as `y`;
/// a pooled output holds a quarter of `y`'s elements, overlaps nothing else
/// and is given only where `win.pools()`; first-maximum masks are given
/// only with it and hold `win.first_max_len()` masks.
pub(in crate::backend::cpu) unsafe fn forward(
    win: &Window,
    src: &[f32],
    w: &[f32],
    y: &mut [f32],
    post: PostOps,
    threads: usize,
) {
    debug_assert!(win.fits() && src.len() >= win.src_len() && w.len() >= win.w_len() && y.len() >= win.y_len());
    debug_assert!(post.bias.is_none_or(|b| b.len() >= win.o));
    debug_assert!(post.keep_where_positive.is_none_or(|k| k.len() >= win.y_len()));
    debug_assert!(post.max_pool.is_none() || win.pools());
    debug_assert!((post.first_max.is_none() && !post.pool_only) || post.max_pool.is_some());
    let units = win.n * win.oh.div_ceil(unit_rows(win, &post));
    let out = SendPtr(y.as_mut_ptr());
    let run = |lo: usize, hi: usize| {
        let out = &out;
        // SAFETY: the caller's contract; the units' rows are disjoint.
        unsafe { forward_units(win, src.as_ptr(), w.as_ptr(), out.0, post, lo, hi) }
    };
    in_ranges(units, threads, run);
}

/// The output rows of one unit of `forward`'s work (the threads split
/// units): two when it pools or its tiles span two rows
/// (`Window::tile_rows`), else one.
fn unit_rows(win: &Window, post: &PostOps) -> usize {
    if post.max_pool.is_some() {
        2
    } else {
        win.tile_rows()
    }
}

/// Units `lo..hi` of `forward`: each unit is `unit_rows` output rows
/// of one image (the last of an image may be shorter).
///
/// # Safety
/// As for `forward`.
unsafe fn forward_units(
    win: &Window,
    src: *const f32,
    w: *const f32,
    y: *mut f32,
    post: PostOps,
    lo: usize,
    hi: usize,
) {
    let (per_unit, pair_tiles) = (unit_rows(win, &post), win.tile_rows() == 2);
    let per_image = win.oh.div_ceil(per_unit);
    // Where a unit's rows go when only their pool is kept (`pool_only`):
    // a buffer on the stack, which stays in the L1 cache, when they fit
    // it, else their own places in `y` (the plan gives it the whole
    // result). Nothing is allocated: an ahead-of-time library's call
    // allocates nothing.
    const ROWS_ON_STACK: usize = 8192;
    let mut stack_rows = std::mem::MaybeUninit::<[f32; ROWS_ON_STACK]>::uninit();
    let on_stack = post.pool_only && per_unit * win.ow * win.o <= ROWS_ON_STACK;
    let rows_buffer = stack_rows.as_mut_ptr().cast::<f32>();
    for (o0, vectors, masks) in channel_blocks(win.o) {
        let bias = post.bias.map(|b| b[o0..].as_ptr());
        // Two vectors of 14 positions are 28 accumulators, which with the
        // two weight vectors and a broadcast still fit the 32 registers: a
        // 14-wide row in one tile ran 7% faster than in two tiles of 7.
        // One vector takes two rows of up to 14 (`forward_pair_tile`).
        let r = win.tile_len(vectors);
        for unit in lo..hi {
            let (n, first) = (unit / per_image, unit % per_image * per_unit);
            let rows = per_unit.min(win.oh - first);
            // Output row `oy` of this unit at channel `o0`.
            // (Every row is written whole before its pool reads it.)
            let row = |oy: usize| match on_stack {
                true => rows_buffer.wrapping_add((oy - first) * win.ow * win.o + o0),
                false => y.wrapping_add((n * win.oh + oy) * win.ow * win.o + o0),
            };
            for ox in tile_starts(win.ow, r) {
                let tile = |oy: usize| {
                    let at = ((n * win.oh + oy) * win.ow + ox) * win.o + o0;
                    ForwardTile {
                        src: src.wrapping_add(win.origin(n, oy, ox)),
                        w: w.wrapping_add(o0),
                        dst: row(oy).wrapping_add(ox * win.o),
                        masks,
                        bias,
                        relu: post.relu,
                        keep: post.keep_where_positive.map(|k| k.as_ptr().wrapping_add(at)),
                    }
                };
                // SAFETY: the caller's contract.
                unsafe {
                    if rows == 2 && pair_tiles {
                        forward_pair_tile(win, &tile(first), r)
                    } else {
                        (first..first + rows).for_each(|oy| forward_tile(win, &tile(oy), r, vectors))
                    }
                }
            }
            if let Some(pooled) = post.max_pool {
                let pooled_row = (n * win.oh / 2 + first / 2) * win.ow / 2;
                let to = pooled.0.wrapping_add(pooled_row * win.o + o0);
                let first_max = post.first_max.map(|m| m.0.wrapping_add(pooled_row * win.o.div_ceil(16) + o0 / 16));
                // SAFETY: the caller's contract (`pools()`: both rows exist).
                unsafe { max_pool_pair(win, [row(first), row(first + 1)], to, first_max, vectors, masks) };
            }
        }
    }
}

/// Writes the 2x2, stride-2 max pool of two output rows (`rows`, at a
/// channel block of `vectors` vectors) into the pooled row `to`, and the
/// row's first-maximum masks at `first_max` (`PostOps::first_max`, at the
/// block's first vector) if given.
///
/// # Safety
/// As for `forward`; both rows are inside the output, `to` holds the
/// pooled row and `first_max` its masks.
unsafe fn max_pool_pair(
    win: &Window,
    rows: [*const f32; 2],
    to: *mut f32,
    first_max: Option<*mut u64>,
    vectors: usize,
    masks: [u16; 2],
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract (`simd::avx512()` checked AVX-512F).
    unsafe {
        match first_max {
            Some(at) => max_pool_pair_kernel::<true>(win, rows, to, at, vectors, masks),
            None => max_pool_pair_kernel::<false>(win, rows, to, std::ptr::null_mut(), vectors, masks),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("`simd::avx512()` is false off x86_64: {win:?} {rows:?} {to:?} {first_max:?} {vectors} {masks:?}")
}

/// Where one forward tile reads and writes.
struct ForwardTile {
    /// The first position's window.
    src: *const f32,
    /// The weights of the tile's first output channel.
    w: *const f32,
    /// The first position's first output channel.
    dst: *mut f32,
    masks: [u16; 2],
    /// The post-ops (`PostOps`), the bias from the tile's first channel,
    /// `keep_where_positive` at the first position's first channel.
    bias: Option<*const f32>,
    relu: bool,
    keep: Option<*const f32>,
}

/// One forward tile of `r` positions × `vectors` channel vectors.
///
/// # Safety
/// As for `forward`.
unsafe fn forward_tile(win: &Window, t: &ForwardTile, r: usize, vectors: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract (`simd::avx512()` checked AVX-512F).
    unsafe {
        dispatch!(forward_row_kernel, r, vectors, masks_lanes(t.masks, vectors), (win, t))
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("`simd::avx512()` is false off x86_64: {win:?} {r} {vectors} {:?}", t.masks)
}

/// One forward tile of two rows of `r` positions × one channel vector
/// (`Window::tile_rows`), at most 14 positions.
///
/// # Safety
/// As for `forward`, with both rows inside the output.
unsafe fn forward_pair_tile(win: &Window, t: &ForwardTile, r: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract (`simd::avx512()` checked AVX-512F).
    unsafe {
        let masked = masks_lanes(t.masks, 1);
        match r {
            1 => masked!(forward_kernel, masked, 1, 1, 2, (win, t)),
            2 => masked!(forward_kernel, masked, 2, 1, 2, (win, t)),
            3 => masked!(forward_kernel, masked, 3, 1, 2, (win, t)),
            4 => masked!(forward_kernel, masked, 4, 1, 2, (win, t)),
            6 => masked!(forward_kernel, masked, 6, 1, 2, (win, t)),
            7 => masked!(forward_kernel, masked, 7, 1, 2, (win, t)),
            8 => masked!(forward_kernel, masked, 8, 1, 2, (win, t)),
            10 => masked!(forward_kernel, masked, 10, 1, 2, (win, t)),
            12 => masked!(forward_kernel, masked, 12, 1, 2, (win, t)),
            _ => masked!(forward_kernel, masked, 14, 1, 2, (win, t)),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("`simd::avx512()` is false off x86_64: {win:?} {r} {:?}", t.masks)
}

/// `forward_kernel` for one output row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn forward_row_kernel<const R: usize, const B: usize, const MASKED: bool>(win: &Window, t: &ForwardTile) {
    // SAFETY: the caller's contract.
    unsafe { forward_kernel::<R, B, 1, MASKED>(win, t) }
}

/// `ROWS` output rows (stride 1 down when two) of `R` consecutive positions
/// × `B` vectors of output channels. Source row `s` of the tile meets
/// output row `k` through kernel row `s - k`: each of its `KW·C` inputs is
/// broadcast once and multiplied by the weight vectors of every row it
/// meets. Output row `k` still sums its kernel rows in order, so each
/// element is the same chain of multiply-adds with one row or two.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn forward_kernel<const R: usize, const B: usize, const ROWS: usize, const MASKED: bool>(
    win: &Window,
    t: &ForwardTile,
) {
    let kernel_row = win.kw * win.c * win.o;
    let mut acc = [[[_mm512_setzero_ps(); B]; R]; ROWS];
    for s in 0..win.kh + ROWS - 1 {
        let meets = |k: usize| s >= k && s - k < win.kh;
        // Kernel row `s - k` of the rows met (any pointer for the others, never read).
        let w: [*const f32; ROWS] = std::array::from_fn(|k| match meets(k) {
            true => t.w.wrapping_add((s - k) * kernel_row),
            false => t.w,
        });
        let src = t.src.wrapping_add(s * win.wp * win.c);
        // SAFETY: the caller's contract; `meets` picks the weights read.
        unsafe {
            match (meets(0), ROWS > 1 && meets(1)) {
                (true, false) => accumulate::<R, B, ROWS, 0b01, MASKED>(win, t, src, w, &mut acc),
                (false, true) => accumulate::<R, B, ROWS, 0b10, MASKED>(win, t, src, w, &mut acc),
                _ => accumulate::<R, B, ROWS, 0b11, MASKED>(win, t, src, w, &mut acc),
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { store_tile(win, t, acc) }
}

/// Applies the post-ops to a tile's sums and stores them. Apart from
/// `forward_kernel` (and handed the sums by value), so that the registers
/// the post-ops need do not make the compiler spill accumulators inside
/// the multiply-add loop (measured: the input gradient ran 2.4x slower
/// with the mask post-op inlined).
///
/// # Safety
/// As for `forward_kernel`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn store_tile<const R: usize, const B: usize, const ROWS: usize>(
    win: &Window,
    t: &ForwardTile,
    acc: [[[__m512; B]; R]; ROWS],
) {
    let o = win.o;
    let mut bias = [_mm512_setzero_ps(); B];
    if let Some(from) = t.bias {
        for (b, v) in bias.iter_mut().enumerate() {
            // SAFETY: inside the bias (the masked-off lanes are not read).
            *v = unsafe { _mm512_maskz_loadu_ps(t.masks[b], from.wrapping_add(16 * b)) };
        }
    }
    for (k, acc) in acc.iter().enumerate() {
        for (p, acc) in acc.iter().enumerate() {
            for (b, &v) in acc.iter().enumerate() {
                let v = if t.bias.is_some() { _mm512_add_ps(v, bias[b]) } else { v };
                // ReLU keeps lanes that are above zero or NaN (`!(v <= 0)`) and
                // zeroes the rest, so `-0` becomes `+0`.
                let v = if t.relu {
                    _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_NLE_UQ>(v, _mm512_setzero_ps()), v)
                } else {
                    v
                };
                let at = k * win.ow * o + p * o + 16 * b;
                // `other > 0` is false for NaN, as the interpreter's `gt`.
                let v = match t.keep {
                    // SAFETY: laid out as the output (the masked-off lanes are not read).
                    Some(other) => _mm512_maskz_mov_ps(
                        _mm512_cmp_ps_mask::<_CMP_GT_OQ>(
                            unsafe { _mm512_maskz_loadu_ps(t.masks[b], other.wrapping_add(at)) },
                            _mm512_setzero_ps(),
                        ),
                        v,
                    ),
                    None => v,
                };
                // SAFETY: inside the output (the masked-off lanes are not written).
                unsafe { _mm512_mask_storeu_ps(t.dst.wrapping_add(at), t.masks[b], v) };
            }
        }
    }
}

/// `max_pool_pair` on AVX-512: each pooled vector folds its window's four
/// vectors in row-major order the way the interpreter's `max_nan` does —
/// the larger (the earlier on ties), NaN if either is; with `FIRST_MAX` it
/// then records, for each tap, the lanes where that tap is the first
/// maximal one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn max_pool_pair_kernel<const FIRST_MAX: bool>(
    win: &Window,
    [top, bottom]: [*const f32; 2],
    to: *mut f32,
    first_max: *mut u64,
    vectors: usize,
    masks: [u16; 2],
) {
    let (o, per_position) = (win.o, win.o.div_ceil(16));
    for px in 0..win.ow / 2 {
        for (b, &mask) in masks.iter().enumerate().take(vectors) {
            let at = 2 * px * o + 16 * b;
            let taps =
                [top.wrapping_add(at), top.wrapping_add(at + o), bottom.wrapping_add(at), bottom.wrapping_add(at + o)]
                    // SAFETY: inside the output (the masked-off lanes are not read).
                    .map(|from| unsafe { _mm512_maskz_loadu_ps(mask, from) });
            let m = crate::backend::cpu::kernels::simd::window_max_16(taps);
            // SAFETY: inside the pooled row (the masked-off lanes are not written).
            unsafe { _mm512_mask_storeu_ps(to.wrapping_add(px * o + 16 * b), mask, m) };
            if FIRST_MAX {
                // SAFETY: the pooled row's masks (the caller's contract).
                unsafe { first_max.add(px * per_position + b).write_unaligned(first_max_of(taps, m)) };
            }
        }
    }
}

/// Which of a window's `taps` holds the first maximal element of each
/// lane, given their `max_nan` fold `m`, as four 16-bit lane masks (see
/// `PostOps::first_max`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn first_max_of(taps: [__m512; 4], m: __m512) -> u64 {
    let m_is_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(m, m);
    let [first, second, third, fourth] = if m_is_nan == 0 {
        // Without NaN every lane's maximum is one of its taps, so the
        // lanes no earlier tap took are the last tap's; three comparisons.
        let [a, b, c] = [0, 1, 2].map(|t| _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(taps[t], m));
        [a, b & !a, c & !(a | b), !(a | b | c)]
    } else {
        let mut taken = 0;
        taps.map(|v| {
            let hit = crate::backend::cpu::kernels::simd::is_max_16(v, m, m_is_nan);
            let first = hit & !taken;
            taken |= hit;
            first
        })
    };
    let low = _mm512_kunpackw(u32::from(second), u32::from(first)) as u64;
    let high = _mm512_kunpackw(u32::from(fourth), u32::from(third)) as u64;
    low | high << 32
}

/// One source row of `forward_kernel`: adds its `KW·C` inputs of each of
/// the `R` positions times the weight vectors `w[k]` into the accumulators
/// of each output row `k` in `ACTIVE` (a bit set).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::needless_range_loop)] // Counted loops, see the body.
unsafe fn accumulate<const R: usize, const B: usize, const ROWS: usize, const ACTIVE: u8, const MASKED: bool>(
    win: &Window,
    t: &ForwardTile,
    src: *const f32,
    w: [*const f32; ROWS],
    acc: &mut [[[__m512; B]; R]; ROWS],
) {
    let (run, step, o) = (win.kw * win.c, win.stride[1] * win.c, win.o);
    // Plain counted loops over constants, so that they unroll and the
    // accumulators stay in registers (iterator adaptors kept them on the stack).
    let active = |k: usize| ACTIVE & (1 << k) != 0;
    for q in 0..run {
        let mut wv = [[_mm512_setzero_ps(); B]; ROWS];
        for k in 0..ROWS {
            for b in 0..B {
                if active(k) {
                    // SAFETY: inside the weights (the masked-off lanes are not read).
                    wv[k][b] = unsafe { load::<MASKED>(t.masks[b], w[k].wrapping_add(q * o + 16 * b)) };
                }
            }
        }
        for p in 0..R {
            // SAFETY: `fits()`: every window lies inside the source.
            let x = _mm512_set1_ps(unsafe { *src.add(p * step + q) });
            for k in 0..ROWS {
                for b in 0..B {
                    if active(k) {
                        acc[k][p][b] = _mm512_fmadd_ps(x, wv[k][b], acc[k][p][b]);
                    }
                }
            }
        }
    }
}
