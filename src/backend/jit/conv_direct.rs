//! Direct convolutions on AVX-512: the forward product and the weight
//! gradient computed straight from the (zero-padded) input, with no im2col
//! buffer, the way oneDNN's direct kernels work.
//!
//! Contract: over a source `src: [N, HP, WP, C]` that already holds the
//! padding as zeros (`pad_into`), weights `w: [KH, KW, C, O]` and strides
//! `(SY, SX)` (no dilation),
//! - `forward` writes `y[n, oy, ox, o] = Σ_{i, j, c} src[n, oy·SY + i,
//!   ox·SX + j, c] · w[i, j, c, o]`, summed over `i`, then `j`, then `c`;
//! - `grad_filter` writes `gw[i, j, c, o] = Σ_{n, oy, ox} src[n, oy·SY + i,
//!   ox·SX + j, c] · gy[n, oy, ox, o]`, summed over the output positions in
//!   order.
//!
//! The sums are chains of fused multiply-adds in that fixed order, so the
//! results do not depend on the thread count (threads split output rows,
//! or the weight gradient's tiles, never a sum); they equal the
//! interpreter's up to rounding. A stride-1 input gradient is a forward
//! convolution of the padded output gradient with the flipped, transposed
//! weights (`flip_transpose`), see `conv`.
//!
//! `forward` can finish each output vector with a layer's bias and ReLU
//! before storing it ([`PostOps`]), the same float operations as the
//! separate epilogue, so one pass over the output instead of three.
//!
//! `forward` can also write the 2x2, stride-2 max pool of its result
//! ([`PostOps::max_pool`]): it then works in pairs of output rows and pools
//! each pair right after writing it, from the L1 cache, so no pooling pass
//! reads the result back from memory; it can record where each window's
//! first maximum lies ([`PostOps::first_max`]), so that the pool's gradient
//! need not read the result either.
//!
//! The kernels keep a tile of `R` positions (or weight rows) × `B` vectors
//! of 16 output channels in registers: each step loads `B` weight (or
//! gradient) vectors and broadcasts `R` inputs for `R·B` multiply-adds. A
//! forward tile of one vector spans two output rows (`tile_rows`), each
//! broadcast input multiplying the weights of both rows' kernel rows.
//!
//! Example: the second convolution of the bench CNN, `[64, 14, 14, 16]` by
//! `[3, 3, 16, 32]`, runs as 896 output rows of one 14-position tile, each
//! 144 steps of 2 loads, 14 broadcasts and 28 multiply-adds; the first,
//! `[64, 28, 28, 1]` by `[3, 3, 1, 16]` into 16 channels, as 896 pairs of
//! rows of two 14-position tiles, each pair then pooled into a row of the
//! `[64, 14, 14, 16]` the next layer reads.

use super::threads::split_rows;

/// A convolution's shapes over its padded source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Window {
    /// The padded source `[n, hp, wp, c]`.
    pub n: usize,
    pub hp: usize,
    pub wp: usize,
    pub c: usize,
    /// Kernel rows and columns and output channels (`w: [kh, kw, c, o]`).
    pub kh: usize,
    pub kw: usize,
    pub o: usize,
    /// The output `[n, oh, ow, o]`.
    pub oh: usize,
    pub ow: usize,
    pub stride: [usize; 2],
}

impl Window {
    pub fn src_len(&self) -> usize {
        self.n * self.hp * self.wp * self.c
    }

    pub fn w_len(&self) -> usize {
        self.kh * self.kw * self.c * self.o
    }

    fn y_len(&self) -> usize {
        self.n * self.oh * self.ow * self.o
    }

    /// Whether every window lies inside the source.
    pub fn fits(&self) -> bool {
        // The source rows (or columns) the last output's window reaches.
        let reach = |out: usize, stride: usize, k: usize| if out == 0 { 0 } else { (out - 1) * stride + k };
        let ([sy, sx], ok) = (self.stride, self.kh > 0 && self.kw > 0);
        ok && sy > 0 && sx > 0 && reach(self.oh, sy, self.kh) <= self.hp && reach(self.ow, sx, self.kw) <= self.wp
    }

    /// Output rows one `forward` tile spans: two when each source row
    /// serves two output rows' windows (stride 1 down, a kernel taller than
    /// one row) and the channels fit one vector, else one. With one vector,
    /// one row makes a load (a weight vector or a broadcast input) per
    /// multiply-add; two rows share each broadcast between two weight
    /// vectors, as two vectors of one row do (measured on the bench CNN:
    /// its input gradient 1.07 → 1.00 ms, its first convolution 0.26 →
    /// 0.22 ms; two rows of two vectors, 7 positions wide, ran no faster).
    fn tile_rows(&self) -> usize {
        if self.stride[0] == 1 && self.kh > 1 && self.o <= 16 {
            2
        } else {
            1
        }
    }

    /// The positions of `forward`'s tiles of `vectors` channel vectors.
    fn tile_len(&self, vectors: usize) -> usize {
        tile_len(self.ow, if vectors == 1 && self.tile_rows() == 1 { 16 } else { 14 })
    }

    /// Whether `forward` can also write the 2x2, stride-2 max pool of its
    /// output (`PostOps::max_pool`): the output has even height and width,
    /// so every pair of rows holds whole pooling windows.
    pub fn pools(&self) -> bool {
        self.oh.is_multiple_of(2) && self.ow.is_multiple_of(2)
    }

    /// How many first-maximum masks a pooling `forward` records
    /// (`PostOps::first_max`): one per pooled position and channel vector.
    pub fn first_max_len(&self) -> usize {
        super::pool::first_max_len(&[self.n, self.oh / 2, self.ow / 2, self.o])
    }

    /// Whether `grad_filter` can read its output gradient from a max pool's
    /// recorded maxima (`PostOps::grad_from_maxima`): the output has even
    /// height and width, and the weight gradient takes every weight row in
    /// one tile (`WHOLE_KERNEL`, the first layer of a grayscale CNN).
    pub fn filter_reads_maxima(&self) -> bool {
        self.pools() && (self.kh, self.kw * self.c) == WHOLE_KERNEL
    }

    /// The offset in the source of output position `(n, oy, ox)`'s window.
    fn origin(&self, n: usize, oy: usize, ox: usize) -> usize {
        ((n * self.hp + oy * self.stride[0]) * self.wp + ox * self.stride[1]) * self.c
    }
}

/// Copies `x: [n, h, w, c]` into `dst: [n, hp, wp, c]` at row `top` and
/// column `left`, zero everywhere else (the parts of `x` beyond `dst` are
/// left out).
pub(super) fn pad_into(
    x: &[f32],
    [n, h, w, c]: [usize; 4],
    top: usize,
    left: usize,
    dst: &mut [f32],
    hp: usize,
    wp: usize,
) {
    let cols = w.min(wp.saturating_sub(left));
    for b in 0..n {
        for r in 0..hp {
            let to = &mut dst[((b * hp + r) * wp) * c..((b * hp + r + 1) * wp) * c];
            match r.checked_sub(top).filter(|&sr| sr < h) {
                Some(sr) if cols > 0 => {
                    let from = &x[((b * h + sr) * w) * c..((b * h + sr) * w + cols) * c];
                    to[..left * c].fill(0.0);
                    to[left * c..(left + cols) * c].copy_from_slice(from);
                    to[(left + cols) * c..].fill(0.0);
                }
                _ => to.fill(0.0),
            }
        }
    }
}

/// `dst[i, j, o, c] = w[KH-1-i, KW-1-j, c, o]`: the weights of a stride-1
/// input gradient as a forward convolution.
pub(super) fn flip_transpose(w: &[f32], [kh, kw, c, o]: [usize; 4], dst: &mut [f32]) {
    for i in 0..kh {
        for j in 0..kw {
            let from = &w[((kh - 1 - i) * kw + (kw - 1 - j)) * c * o..][..c * o];
            let to = &mut dst[(i * kw + j) * o * c..][..o * c];
            for ci in 0..c {
                for oi in 0..o {
                    to[oi * c + ci] = from[ci * o + oi];
                }
            }
        }
    }
}

/// Tile lengths the kernels are compiled for.
const TILES: [usize; 11] = [1, 2, 3, 4, 6, 7, 8, 10, 12, 14, 16];

/// The tile length for `len` positions with at most `max` per tile: the
/// one with the least work (the last tile overlaps the one before it when
/// `len` is not a multiple), counting two steps of overhead per tile.
fn tile_len(len: usize, max: usize) -> usize {
    let cost = |r: usize| len.div_ceil(r) * (r + 2);
    TILES.iter().copied().filter(|&r| r <= len.min(max)).min_by_key(|&r| (cost(r), usize::MAX - r)).unwrap_or(1)
}

/// The starts of the tiles of `r` covering `0..len` (the last one moved back
/// to end at `len`).
fn tile_starts(len: usize, r: usize) -> impl Iterator<Item = usize> {
    (0..len.div_ceil(r)).map(move |t| (t * r).min(len - r))
}

/// Disjoint tiles covering `0..len`: as many of `r` as fit, then the rest
/// in the largest compiled lengths (the weight gradient adds into its
/// output, so its tiles must not overlap). `(start, length)` pairs.
fn exact_tiles(len: usize, r: usize) -> Vec<(usize, usize)> {
    let mut tiles: Vec<(usize, usize)> = (0..len / r).map(|t| (t * r, r)).collect();
    let mut at = len / r * r;
    while at < len {
        let size = TILES.iter().copied().filter(|&t| t <= len - at).max().unwrap_or(1);
        tiles.push((at, size));
        at += size;
    }
    tiles
}

/// Output-channel blocks of up to 32: `(first channel, vectors, lane masks)`.
fn channel_blocks(o: usize) -> impl Iterator<Item = (usize, usize, [u16; 2])> {
    let mask = |lanes: usize| if lanes >= 16 { u16::MAX } else { ((1u32 << lanes) - 1) as u16 };
    (0..o).step_by(32).map(move |o0| {
        let width = (o - o0).min(32);
        (o0, width.div_ceil(16), [mask(width), mask(width.saturating_sub(16))])
    })
}

/// What `forward` applies to each output vector in registers before
/// storing it: `select(other > 0, relu(y + bias[o]), 0)`, each part
/// optional — a convolution layer's epilogue, or in its input gradient the
/// previous layer's ReLU mask (oneDNN's "post-ops"). These are the float
/// operations the separate epilogue kernel would perform on the stored
/// sum, so the values are the same; the output is written once instead of
/// written, read and written again.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PostOps<'a> {
    /// One value per output channel (`[O]`), added first.
    pub bias: Option<&'a [f32]>,
    /// Then `max(y, 0)` with the interpreter's rules: NaN stays, `-0` becomes `+0`.
    pub relu: bool,
    /// Then `select(other > 0, y, 0)` with `other` laid out as the result
    /// (a ReLU's mask moved to a pooled shape, in a gradient).
    pub keep_where_positive: Option<&'a [f32]>,
    /// Where to write the 2x2, stride-2 max pool of the result as well
    /// (`[N, OH/2, OW/2, O]`; only where `Window::pools`): the
    /// interpreter's fold (`max_nan` from `-inf` over the window in
    /// row-major order) of the values stored, computed from each pair of
    /// rows just written, while they are in the L1 cache, so no pooling
    /// pass reads the result back from memory.
    pub max_pool: Option<SendPtr>,
    /// With `max_pool`: where to record, for each pooled vector of 16
    /// channels, which of its window's four taps (in row-major order) holds
    /// the first maximal element of each lane — where the interpreter's
    /// max-pool gradient goes (`simd::is_max_16`) — as four 16-bit lane
    /// masks, tap `t` in bits `16t..16t + 16`. Vectors are ordered by pooled
    /// position, then channel vector (`Window::first_max_len` of them), so
    /// the gradient (`pool::max_pool_grad_from_first_max`) need not read
    /// the result again.
    pub first_max: Option<SendMasks>,
    /// With `max_pool`: nothing reads the result itself (only its pool,
    /// and the pool's gradient through `first_max`), so it is not stored —
    /// each pair of rows goes to a small buffer that the pool reads while
    /// it is in the L1 cache.
    pub pool_only: bool,
    /// For a weight gradient (`grad_filter`): its output gradient is a 2x2
    /// max pool's gradient that is not stored, read instead as `0 + gy` of
    /// the pooled gradient where the recorded first maxima say and `0`
    /// elsewhere (the values `pool::max_pool_grad_from_first_max` writes).
    pub grad_from_maxima: Option<MaximaGrad<'a>>,
}

/// A 2x2 max pool's gradient given by its pooled gradient `pooled` (`[N,
/// OH/2, OW/2, O]`) and the first maxima its forward pool recorded
/// (`PostOps::first_max`).
#[derive(Clone, Copy, Debug)]
pub(super) struct MaximaGrad<'a> {
    pub pooled: &'a [f32],
    pub first_max: &'a [u64],
}

/// The first-maximum masks shared by the threads of one `forward`.
#[derive(Clone, Copy, Debug)]
pub(super) struct SendMasks(pub *mut u64);
// SAFETY: the threads write disjoint masks while the caller waits.
unsafe impl Sync for SendMasks {}

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
pub(super) unsafe fn forward(win: &Window, src: &[f32], w: &[f32], y: &mut [f32], post: PostOps, threads: usize) {
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
    if threads > 1 && units > 1 {
        rayon::scope(|s| {
            for (lo, hi) in split_rows(units, threads) {
                let run = &run;
                s.spawn(move |_| run(lo, hi));
            }
        });
    } else {
        run(0, units);
    }
}

/// `gw = Σ src ⊗ gy` (see the module docs); `threads` share the tiles.
///
/// # Safety
/// As for `forward`, with `gy` holding the output's elements and `gw` the
/// weights'.
pub(super) unsafe fn grad_filter(
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
    // A tile: kernel row `i`, weight rows `q0..q0+r` of that kernel row's
    // `KW·C`, one channel block.
    let run_len = win.kw * win.c;
    let mut tiles = Vec::new();
    if (win.kh, run_len) == WHOLE_KERNEL {
        // One tile takes every weight row (`WHOLE_KERNEL`).
        tiles.extend(channel_blocks(win.o).map(|(o0, vectors, masks)| (0, 0, win.kh * run_len, o0, vectors, masks)));
    } else {
        for i in 0..win.kh {
            for (o0, vectors, masks) in channel_blocks(win.o) {
                let r = tile_len(run_len, if vectors == 1 { 16 } else { 12 });
                tiles.extend(exact_tiles(run_len, r).into_iter().map(|(q0, r)| (i, q0, r, o0, vectors, masks)));
            }
        }
    }
    // Output rows in blocks that keep their sources and gradients in the
    // L2 cache across the tiles; every tile sums the blocks in order.
    let per_row = win.ow * win.o + win.kh * win.wp * win.c;
    let block = (65_536 / per_row.max(1)).clamp(1, (win.n * win.oh).max(1));
    let out = SendPtr(gw.as_mut_ptr());
    let run = |lo: usize, hi: usize| {
        let out = &out;
        for r0 in (0..win.n * win.oh).step_by(block) {
            let rows = r0..(r0 + block).min(win.n * win.oh);
            for &(i, q0, r, o0, vectors, masks) in &tiles[lo..hi] {
                let tile = FilterTile {
                    src: src.as_ptr().wrapping_add(i * win.wp * win.c + q0),
                    gy: from_maxima.map_or(gy.as_ptr(), |m| m.pooled.as_ptr()).wrapping_add(o0),
                    first_max: from_maxima.map(|m| m.first_max.as_ptr().wrapping_add(o0 / 16)),
                    dst: out.0.wrapping_add((i * run_len + q0) * win.o + o0),
                    masks,
                };
                // SAFETY: the caller's contract; the tiles write disjoint
                // weight rows or channels.
                unsafe { filter_tile(win, &tile, rows.clone(), r, vectors) };
            }
        }
    };
    if threads > 1 && tiles.len() > 1 {
        rayon::scope(|s| {
            for (lo, hi) in split_rows(tiles.len(), threads) {
                let run = &run;
                s.spawn(move |_| run(lo, hi));
            }
        });
    } else {
        run(0, tiles.len());
    }
}

/// A raw output pointer shared by the threads that write disjoint parts.
#[derive(Clone, Copy, Debug)]
pub(super) struct SendPtr(pub *mut f32);
// SAFETY: the threads write disjoint elements while the caller waits.
unsafe impl Sync for SendPtr {}

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
    // Where a unit's rows go when only their pool is kept (`pool_only`).
    let mut rows_buffer = vec![0.0f32; if post.pool_only { per_unit * win.ow * win.o } else { 0 }];
    let rows_buffer = rows_buffer.as_mut_ptr();
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
            let row = |oy: usize| match post.pool_only {
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

/// Whether a tile's `vectors` channel vectors have lanes masked off.
fn masks_lanes(masks: [u16; 2], vectors: usize) -> bool {
    masks.iter().take(vectors).any(|&m| m != u16::MAX)
}

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

/// Calls `$kernel::<consts…, MASKED>` for the runtime `$masked`.
macro_rules! masked {
    ($kernel:ident, $masked:expr, $($c:literal),*, ($($arg:expr),*)) => {
        if $masked {
            $kernel::<$($c),*, true>($($arg),*)
        } else {
            $kernel::<$($c),*, false>($($arg),*)
        }
    };
}

/// Calls `$kernel::<R, B, MASKED>` for the runtime tile length `$r`,
/// vector count `$b` (1 or 2) and whether lanes are masked off.
macro_rules! dispatch {
    ($kernel:ident, $r:expr, $b:expr, $masked:expr, ($($arg:expr),*)) => {
        // Two vectors take at most 14 positions (`tile_len`'s `max`).
        match ($r, $b) {
            (1, 1) => masked!($kernel, $masked, 1, 1, ($($arg),*)),
            (2, 1) => masked!($kernel, $masked, 2, 1, ($($arg),*)),
            (3, 1) => masked!($kernel, $masked, 3, 1, ($($arg),*)),
            (4, 1) => masked!($kernel, $masked, 4, 1, ($($arg),*)),
            (6, 1) => masked!($kernel, $masked, 6, 1, ($($arg),*)),
            (7, 1) => masked!($kernel, $masked, 7, 1, ($($arg),*)),
            (8, 1) => masked!($kernel, $masked, 8, 1, ($($arg),*)),
            (10, 1) => masked!($kernel, $masked, 10, 1, ($($arg),*)),
            (12, 1) => masked!($kernel, $masked, 12, 1, ($($arg),*)),
            (14, 1) => masked!($kernel, $masked, 14, 1, ($($arg),*)),
            (16, 1) => masked!($kernel, $masked, 16, 1, ($($arg),*)),
            (1, _) => masked!($kernel, $masked, 1, 2, ($($arg),*)),
            (2, _) => masked!($kernel, $masked, 2, 2, ($($arg),*)),
            (3, _) => masked!($kernel, $masked, 3, 2, ($($arg),*)),
            (4, _) => masked!($kernel, $masked, 4, 2, ($($arg),*)),
            (6, _) => masked!($kernel, $masked, 6, 2, ($($arg),*)),
            (7, _) => masked!($kernel, $masked, 7, 2, ($($arg),*)),
            (8, _) => masked!($kernel, $masked, 8, 2, ($($arg),*)),
            (10, _) => masked!($kernel, $masked, 10, 2, ($($arg),*)),
            (12, _) => masked!($kernel, $masked, 12, 2, ($($arg),*)),
            _ => masked!($kernel, $masked, 14, 2, ($($arg),*)),
        }
    };
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

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512, _mm512_add_ps, _mm512_cmp_ps_mask, _mm512_fmadd_ps, _mm512_kunpackw, _mm512_loadu_ps,
    _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_maskz_mov_ps, _mm512_set1_ps, _mm512_setzero_ps, _CMP_EQ_OQ,
    _CMP_GT_OQ, _CMP_NLE_UQ, _CMP_UNORD_Q,
};

/// A vector at `p`: the lanes of `mask` (the rest zero) when `MASKED`,
/// else all sixteen with a plain load. Masked loads in the inner loops made
/// the bench CNN's convolutions about 8% slower than plain ones (measured
/// on its second convolution's kernel alone: 0.70 -> 0.76 ms), so full
/// channel blocks take the plain load.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load<const MASKED: bool>(mask: u16, p: *const f32) -> __m512 {
    // SAFETY: the caller's contract: the lanes read are inside the buffer.
    unsafe {
        if MASKED {
            _mm512_maskz_loadu_ps(mask, p)
        } else {
            _mm512_loadu_ps(p)
        }
    }
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
            let m = super::simd::window_max_16(taps);
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
            let hit = super::simd::is_max_16(v, m, m_is_nan);
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

/// Kernel height and `KW·C` of the convolutions whose weight gradient takes
/// every weight row in one tile (`filter_kernel_split` with `SPLIT = 3`): 3x3
/// kernels over one input channel (the first layer of a grayscale-image
/// CNN). Tiles of one kernel row would hold three accumulators, and three
/// chains of dependent multiply-adds leave the FMA units waiting on their
/// latency; one tile of nine keeps them busy.
const WHOLE_KERNEL: (usize, usize) = (3, 3);

#[cfg(test)]
mod tests {
    use super::{channel_blocks, exact_tiles, tile_len, tile_starts};

    #[test]
    fn tiles_cover_every_position_with_little_overlap() {
        assert_eq!(tile_len(28, 16), 14);
        assert_eq!(tile_len(14, 12), 7);
        assert_eq!(tile_len(14, 14), 14);
        assert_eq!(tile_len(48, 12), 12);
        assert_eq!(tile_len(3, 16), 3);
        for len in 1..40 {
            for max in [12, 16] {
                let r = tile_len(len, max);
                assert!(r <= len && r <= max);
                let mut seen = vec![false; len];
                for s in tile_starts(len, r) {
                    seen[s..s + r].iter_mut().for_each(|v| *v = true);
                }
                assert!(seen.iter().all(|&v| v), "{len} {max}");
            }
        }
        assert_eq!(exact_tiles(5, 3), vec![(0, 3), (3, 2)]);
        assert_eq!(exact_tiles(11, 4), vec![(0, 4), (4, 4), (8, 3)]);
        assert_eq!(exact_tiles(9, 8), vec![(0, 8), (8, 1)]);
        let blocks: Vec<_> = channel_blocks(50).collect();
        assert_eq!(blocks, vec![(0, 2, [u16::MAX, u16::MAX]), (32, 2, [u16::MAX, 0b11])]);
        assert_eq!(channel_blocks(10).collect::<Vec<_>>(), vec![(0, 1, [0x3ff, 0])]);
    }
}
