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
//!   order (for a gradient of few tiles, in four fixed parts of the
//!   positions, each in order, then added in order: `filter`).
//!
//! The sums are chains of fused multiply-adds in that fixed order, so the
//! results do not depend on the thread count (threads split output rows,
//! the weight gradient's tiles or its fixed parts, never a chain); they
//! equal the interpreter's up to rounding. A stride-1 input gradient is a forward
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
//! Layout: this file holds the geometry (`Window`), the padding and flipped
//! weights, the tiling, the post-ops and the kernels' shared loads;
//! `forward` the forward kernels and the fused pool, `filter` the weight
//! gradient's.
//!
//! Example: the second convolution of the bench CNN, `[64, 14, 14, 16]` by
//! `[3, 3, 16, 32]`, runs as 896 output rows of one 14-position tile, each
//! 144 steps of 2 loads, 14 broadcasts and 28 multiply-adds; the first,
//! `[64, 28, 28, 1]` by `[3, 3, 1, 16]` into 16 channels, as 896 pairs of
//! rows of two 14-position tiles, each pair then pooled into a row of the
//! `[64, 14, 14, 16]` the next layer reads.

/// A convolution's shapes over its padded source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) struct Window {
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
/// left out); `threads` share the images (a copy: the same bytes at any
/// count).
pub(in crate::backend::cpu) fn pad_into<T: Copy + Default + Send + Sync>(
    x: &[T],
    dims: [usize; 4],
    [top, left]: [usize; 2],
    dst: &mut [T],
    [hp, wp]: [usize; 2],
    threads: usize,
) {
    let [n, h, w, c] = dims;
    let (image, padded) = (h * w * c, hp * wp * c);
    if padded == 0 {
        return;
    }
    let pad_images = |first: usize, to: &mut [T]| {
        for (i, to) in to.chunks_exact_mut(padded).enumerate() {
            pad_image(&x[(first + i) * image..(first + i + 1) * image], [h, w, c], [top, left], to, wp);
        }
    };
    if threads > 1 && n > 1 {
        let mut rest = &mut dst[..n * padded];
        rayon::scope(|s| {
            for (lo, hi) in crate::backend::cpu::threads::split_rows(n, threads) {
                let (part, tail) = std::mem::take(&mut rest).split_at_mut((hi - lo) * padded);
                rest = tail;
                let pad_images = &pad_images;
                s.spawn(move |_| pad_images(lo, part));
            }
        });
    } else {
        pad_images(0, &mut dst[..n * padded]);
    }
}

/// One image of `pad_into`: `x: [h, w, c]` into `to: [hp, wp, c]`.
fn pad_image<T: Copy + Default>(x: &[T], [h, w, c]: [usize; 3], [top, left]: [usize; 2], to: &mut [T], wp: usize) {
    let cols = w.min(wp.saturating_sub(left));
    for (r, to) in to.chunks_exact_mut(wp * c).enumerate() {
        match r.checked_sub(top).filter(|&sr| sr < h) {
            Some(sr) if cols > 0 => {
                to[..left * c].fill(T::default());
                to[left * c..(left + cols) * c].copy_from_slice(&x[sr * w * c..(sr * w + cols) * c]);
                to[(left + cols) * c..].fill(T::default());
            }
            _ => to.fill(T::default()),
        }
    }
}

/// `dst[i, j, o, c] = w[KH-1-i, KW-1-j, c, o]`: the weights of a stride-1
/// input gradient as a forward convolution.
pub(in crate::backend::cpu) fn flip_transpose(w: &[f32], [kh, kw, c, o]: [usize; 4], dst: &mut [f32]) {
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

/// The bf16 weights `w: [KH, KW, C, O]` (flipped and transposed first,
/// `flip_transpose`'s `[KH, KW, O, C]`, when `flip`) in the pair layout of
/// `forward_bf16`: for each kernel tap and pair of input channels `(2p,
/// 2p + 1)`, each output channel's two weights side by side, so that one
/// 32-bit lane holds what `vdpbf16ps` multiplies by one broadcast input
/// pair. The window's input channels (`C`, or `O` when flipped) must be
/// even.
pub(in crate::backend::cpu) fn pair_weights(w: &[u16], [kh, kw, c, o]: [usize; 4], flip: bool, dst: &mut [u16]) {
    // The convolution's own input and output channels.
    let (ci, co) = if flip { (o, c) } else { (c, o) };
    debug_assert!(ci.is_multiple_of(2) && dst.len() >= w.len());
    let weight = |i: usize, j: usize, from: usize, to: usize| match flip {
        true => w[(((kh - 1 - i) * kw + (kw - 1 - j)) * c + to) * o + from],
        false => w[((i * kw + j) * c + from) * o + to],
    };
    let mut at = 0;
    for i in 0..kh {
        for j in 0..kw {
            for p in 0..ci / 2 {
                for to in 0..co {
                    dst[at] = weight(i, j, 2 * p, to);
                    dst[at + 1] = weight(i, j, 2 * p + 1, to);
                    at += 2;
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
pub(in crate::backend::cpu) struct PostOps<'a> {
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
pub(in crate::backend::cpu) struct MaximaGrad<'a> {
    pub pooled: &'a [f32],
    pub first_max: &'a [u64],
}

/// The first-maximum masks shared by the threads of one `forward`.
#[derive(Clone, Copy, Debug)]
pub(in crate::backend::cpu) struct SendMasks(pub *mut u64);
// SAFETY: the threads write disjoint masks while the caller waits.
unsafe impl Sync for SendMasks {}

/// A raw output pointer shared by the threads that write disjoint parts.
#[derive(Clone, Copy, Debug)]
pub(in crate::backend::cpu) struct SendPtr(pub *mut f32);
// SAFETY: the threads write disjoint elements while the caller waits.
unsafe impl Sync for SendPtr {}

/// Whether a tile's `vectors` channel vectors have lanes masked off.
fn masks_lanes(masks: [u16; 2], vectors: usize) -> bool {
    masks.iter().take(vectors).any(|&m| m != u16::MAX)
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

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m512, _mm512_loadu_ps, _mm512_maskz_loadu_ps};

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

/// Kernel height and `KW·C` of the convolutions whose weight gradient takes
/// every weight row in one tile (`filter_kernel_split` with `SPLIT = 3`): 3x3
/// kernels over one input channel (the first layer of a grayscale-image
/// CNN). Tiles of one kernel row would hold three accumulators, and three
/// chains of dependent multiply-adds leave the FMA units waiting on their
/// latency; one tile of nine keeps them busy.
const WHOLE_KERNEL: (usize, usize) = (3, 3);

// After the `masked!`/`dispatch!` macros they use: `macro_rules!` scoping
// is textual.
mod filter;
mod filter_bf16;
mod forward;
mod forward_bf16;

pub(in crate::backend::cpu) use filter::grad_filter;
pub(in crate::backend::cpu) use filter_bf16::{grad_filter_bf16, pair_images};
pub(in crate::backend::cpu) use forward::forward;
pub(in crate::backend::cpu) use forward_bf16::{forward_bf16, has_bf16_kernels};

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
