//! Convolutions on the JIT: NHWC input, HWIO weights, lowered to one matrix
//! product over an im2col buffer (the layout TensorFlow's CPU kernels and
//! oneDNN's reference path use).
//!
//! Contract: with `m = N·OH·OW` output positions and `k = KH·KW·C` taps,
//! - forward: `cols[m, k]` holds each output position's input window (zero
//!   where a tap falls in the padding), and `y[m, O] = cols · w[k, O]`;
//! - gradient with respect to the weights: `gw[k, O] = colsᵀ · gy[m, O]`;
//! - gradient with respect to the input: `cols = gy · wᵀ`, then each
//!   window's column is added back into `gx` (col2im), skipping padding.
//!
//! The `m` output positions go in blocks whose im2col rows fit in the L2
//! cache (`block_rows`): each block's columns are built and multiplied (or,
//! for the input gradient, multiplied and scattered) before the next, and
//! the weight gradient adds the blocks' products in order. im2col and
//! col2im move whole kernel-row runs of `KW·C` contiguous elements.
//!
//! On a machine with AVX-512 the undilated convolutions run on the direct
//! kernels instead (module `conv_direct`), with the padding copied into the
//! scratch buffer: the forward product and the weight gradient straight
//! from the input, and a stride-1 input gradient as the forward convolution
//! of the padded output gradient with the flipped, transposed weights.
//!
//! Only `groups = 1` is lowered (grouped convolutions stay on the
//! interpreter). Results equal the interpreter's up to the summation order
//! of the product; they do not depend on the thread count (the blocks
//! depend on the geometry only; see `gemm`).
//!
//! Example: a 3x3 SAME convolution of `[64, 28, 28, 1]` into 16 channels is
//! `cols[50176, 9] · w[9, 16]`.

use super::bf16_gemm::{bf16_gemm, Store};
use super::conv_direct::{self as direct, Window};
pub(in crate::backend::cpu) use super::conv_direct::{MaximaGrad, PostOps, SendMasks, SendPtr};
use super::gemm::{sgemm, sgemm_into};

/// The im2col block size in elements (1 MiB, half a core's L2 here), see `Conv::block_rows`.
const BLOCK_FLOATS: usize = 1 << 18;
use crate::ir::Op;

/// Which of the three convolution ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) enum ConvKind {
    /// `(x, w) → y`
    Forward,
    /// `(gy, w) → gx`
    GradInput,
    /// `(x, gy) → gw`
    GradFilter,
}

/// The words of `Conv::words`.
pub(in crate::backend::cpu) const CONV_WORDS: usize = 21;

/// One convolution's geometry.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::backend::cpu) struct Conv {
    pub kind: ConvKind,
    /// Input `[N, H, W, C]`, weights `[KH, KW, C, O]`, output `[N, OH, OW, O]`.
    x: [usize; 4],
    w: [usize; 4],
    y: [usize; 4],
    stride: [usize; 2],
    padding: [usize; 4],
    dilation: [usize; 2],
}

impl Conv {
    /// The geometry of `op` with operand shapes `a`, `b` and result shape
    /// `out`, or `None` for what is not lowered (not a convolution, groups,
    /// shapes that are not 4-D).
    pub fn of(op: &Op, a: &[usize], b: &[usize], out: &[usize]) -> Option<Conv> {
        let four = |s: &[usize]| <[usize; 4]>::try_from(s).ok();
        let (kind, stride, padding, dilation, groups, x, w, y) = match op {
            Op::Conv2d { stride, padding, dilation, groups } => {
                (ConvKind::Forward, stride, padding, dilation, groups, four(a)?, four(b)?, four(out)?)
            }
            Op::Conv2dGradInput { stride, padding, dilation, groups, .. } => {
                (ConvKind::GradInput, stride, padding, dilation, groups, four(out)?, four(b)?, four(a)?)
            }
            Op::Conv2dGradFilter { stride, padding, dilation, groups, .. } => {
                (ConvKind::GradFilter, stride, padding, dilation, groups, four(a)?, four(out)?, four(b)?)
            }
            _ => return None,
        };
        let fits = *groups == 1 && x[3] == w[2] && y[3] == w[3] && y[0] == x[0];
        fits.then_some(Conv { kind, x, w, y, stride: *stride, padding: *padding, dilation: *dilation })
    }

    /// The geometry as words (kind, then the input, weight and output
    /// shapes, stride, padding and dilation), for an ahead-of-time
    /// library to pass to `from_words`.
    pub fn words(&self) -> [usize; CONV_WORDS] {
        let kind = match self.kind {
            ConvKind::Forward => 0,
            ConvKind::GradInput => 1,
            ConvKind::GradFilter => 2,
        };
        let mut w = [0; CONV_WORDS];
        w[0] = kind;
        let parts: [&[usize]; 6] = [&self.x, &self.w, &self.y, &self.stride, &self.padding, &self.dilation];
        let mut at = 1;
        for part in parts {
            w[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        w
    }

    /// The convolution `words` describes (`None` for an unknown kind).
    pub fn from_words(w: &[usize; CONV_WORDS]) -> Option<Conv> {
        let kind = [ConvKind::Forward, ConvKind::GradInput, ConvKind::GradFilter].get(w[0]).copied()?;
        let four = |at: usize| [w[at], w[at + 1], w[at + 2], w[at + 3]];
        Some(Conv {
            kind,
            x: four(1),
            w: four(5),
            y: four(9),
            stride: [w[13], w[14]],
            padding: four(15),
            dilation: [w[19], w[20]],
        })
    }

    /// Whether it runs on the direct kernels (im2col's products go through
    /// the `gemm` crate instead).
    pub fn is_direct(&self) -> bool {
        self.direct().is_some()
    }

    /// The kind, shapes and kernels, for profiles: `conv2d grad-input
    /// 64x14x14x16 <- 64x14x14x32 (3x3 kernel, direct)`.
    pub fn label(&self) -> String {
        self.label_with(if self.direct().is_some() { "direct" } else { "im2col" })
    }

    /// `label` with `how` it runs in the brackets.
    pub fn label_with(&self, how: &str) -> String {
        let dims = |d: &[usize; 4]| d.map(|x| x.to_string()).join("x");
        let [kh, kw, _, _] = self.w;
        let (what, to, from) = match self.kind {
            ConvKind::Forward => ("conv2d", &self.y, &self.x),
            ConvKind::GradInput => ("conv2d grad-input", &self.x, &self.y),
            ConvKind::GradFilter => ("conv2d grad-filter", &self.w, &self.x),
        };
        format!("{what} {} <- {} ({kh}x{kw} kernel, {how})", dims(to), dims(from))
    }

    /// The result's channels (its last axis): `O`, or `C` for the input
    /// gradient.
    pub fn out_channels(&self) -> usize {
        self.out_shape()[3]
    }

    /// Output positions and taps: the im2col buffer is `m × k`.
    fn m_k(&self) -> (usize, usize) {
        (self.y[0] * self.y[1] * self.y[2], self.w[0] * self.w[1] * self.w[2])
    }

    /// Output positions per block: im2col fills `rows × k` elements at a
    /// time, a buffer that stays in the core's L2 cache between being
    /// written and being multiplied (or, for col2im, between the product
    /// and the scatter), rather than a full `m × k` one streamed through
    /// the last-level cache twice. Depends on the geometry only, never on
    /// the thread count.
    fn block_rows(&self) -> usize {
        let (m, k) = self.m_k();
        (BLOCK_FLOATS / k.max(1)).clamp(1, m.max(1))
    }

    /// Elements of the scratch buffer: one im2col block, or the direct
    /// kernels' padded source and flipped weights.
    pub fn cols_len(&self) -> usize {
        match self.direct() {
            Some(d) => d.scratch_len(),
            None => self.block_rows() * self.m_k().1,
        }
    }

    /// How the direct kernels run this convolution, when this machine has
    /// them and the geometry suits them (no dilation; for the input
    /// gradient, stride 1 and padding below the kernel size).
    fn direct(&self) -> Option<Direct> {
        if self.dilation != [1, 1] || !super::simd::avx512() {
            return None;
        }
        let ([n, h, w, c], [kh, kw, _, o], [_, oh, ow, _]) = (self.x, self.w, self.y);
        let [top, bottom, left, right] = self.padding;
        let plan = match self.kind {
            ConvKind::Forward | ConvKind::GradFilter => {
                let padded = self.padding != [0; 4];
                let (hp, wp) = if padded {
                    ((oh.max(1) - 1) * self.stride[0] + kh, (ow.max(1) - 1) * self.stride[1] + kw)
                } else {
                    (h, w)
                };
                let win = Window { n, hp, wp, c, kh, kw, o, oh, ow, stride: self.stride };
                Direct { win, pad: padded.then_some([top, left]), flip: false }
            }
            ConvKind::GradInput => {
                let fits = top < kh && bottom < kh && left < kw && right < kw;
                if self.stride != [1, 1] || !fits {
                    return None;
                }
                // The output gradient, padded, convolved into `c` channels.
                let win =
                    Window { n, hp: h + kh - 1, wp: w + kw - 1, c: o, kh, kw, o: c, oh: h, ow: w, stride: [1, 1] };
                Direct { win, pad: Some([kh - 1 - top, kw - 1 - left]), flip: true }
            }
        };
        plan.win.fits().then_some(plan)
    }

    /// Elements of each operand and of the result.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let (x, w, y) = (self.x.iter().product(), self.w.iter().product(), self.y.iter().product());
        match self.kind {
            ConvKind::Forward => (x, w, y),
            ConvKind::GradInput => (y, w, x),
            ConvKind::GradFilter => (x, y, w),
        }
    }

    /// Calls `f(row, tap, taps, x_offset)` for every run of `taps`
    /// consecutive window positions of one kernel row: `row` is the output
    /// position (counted from `rows.start`), `tap` the run's first window
    /// position (`i·KW + j`); `x_offset` is the flat offset in `x` of the
    /// run's `taps·C` contiguous elements, or `None` for a run in the
    /// padding. Without dilation along the width a kernel row is at most
    /// three runs (padding, input, padding) and one run away from the
    /// borders, so im2col and col2im move `KW·C` elements at a time rather
    /// than one tap's `C`.
    ///
    /// Order: per output row `(b, oy)`, kernel rows `i` outermost, then the
    /// output positions, then the taps. An input row `iy` meets each output
    /// row through one kernel row only, so every element of `x` is visited
    /// in (output position, tap) order, as a walk over each position's
    /// whole window would visit it: col2im's sums do not depend on it.
    fn for_each_run(&self, rows: std::ops::Range<usize>, mut f: impl FnMut(usize, usize, usize, Option<usize>)) {
        let ([_, h, wd, c], [kh, kw, _, _], [_, oh, ow, _]) = (self.x, self.w, self.y);
        let ([sy, sx], [dy, dx]) = (self.stride, self.dilation);
        let left = self.padding[2];
        // Output columns `inner` have every tap inside the input.
        let inner_lo = left.div_ceil(sx).min(ow);
        let inner_hi = ((wd + left).checked_sub((kw - 1) * dx + 1)).map_or(0, |last| last / sx + 1).clamp(inner_lo, ow);
        let mut at = rows.start;
        while at < rows.end {
            // One output row `(b, oy)`, columns `ox0..ox1`.
            let (b, oy, ox0) = (at / (oh * ow), at / ow % oh, at % ow);
            let ox1 = ow.min(ox0 + rows.end - at);
            let first = at - rows.start;
            for i in 0..kh {
                let iy = (oy * sy + i * dy).checked_sub(self.padding[0]).filter(|&r| r < h);
                let Some(iy) = iy else {
                    (0..ox1 - ox0).for_each(|r| f(first + r, i * kw, kw, None));
                    continue;
                };
                let base = (b * h + iy) * wd;
                for ox in ox0..ox1 {
                    let row = first + ox - ox0;
                    // Input column of tap `j` is `ox·SX + j·DX - left`.
                    let origin = ox * sx;
                    if dx == 1 && (inner_lo..inner_hi).contains(&ox) {
                        f(row, i * kw, kw, Some((base + origin - left) * c));
                    } else if dx == 1 {
                        // Taps `lo..hi` fall inside the input.
                        let lo = left.saturating_sub(origin).min(kw);
                        let hi = (wd + left).saturating_sub(origin).clamp(lo, kw);
                        if lo > 0 {
                            f(row, i * kw, lo, None);
                        }
                        if hi > lo {
                            f(row, i * kw + lo, hi - lo, Some((base + origin + lo - left) * c));
                        }
                        if kw > hi {
                            f(row, i * kw + hi, kw - hi, None);
                        }
                    } else {
                        for j in 0..kw {
                            let ix = (origin + j * dx).checked_sub(left).filter(|&q| q < wd);
                            f(row, i * kw + j, 1, ix.map(|ix| (base + ix) * c));
                        }
                    }
                }
            }
            at += ox1 - ox0;
        }
    }

    /// Whether `run` applies post-ops: a direct forward convolution, or an
    /// input gradient, which runs as one.
    pub fn takes_post_ops(&self) -> bool {
        self.kind != ConvKind::GradFilter && self.direct().is_some()
    }

    /// Whether `run` can also write the 2x2, stride-2 max pool of its result
    /// (`PostOps::max_pool`): a direct forward convolution whose output has
    /// even height and width (`Window::pools`).
    pub fn takes_max_pool(&self) -> bool {
        self.kind == ConvKind::Forward && self.direct().is_some_and(|d| d.win.pools())
    }

    /// How many first-maximum masks `run` records with a max pool
    /// (`PostOps::first_max`; 0 unless `takes_max_pool`).
    pub fn first_max_len(&self) -> usize {
        match self.direct() {
            Some(d) if self.takes_max_pool() => d.win.first_max_len(),
            _ => 0,
        }
    }

    /// Whether `run` can read a weight gradient's output gradient from a
    /// max pool's recorded maxima (`PostOps::grad_from_maxima`).
    pub fn takes_grad_from_maxima(&self) -> bool {
        self.kind == ConvKind::GradFilter && self.direct().is_some_and(|d| d.win.filter_reads_maxima())
    }

    /// The forward convolution's output shape `[N, OH, OW, O]` (its
    /// gradient's, for the gradients).
    pub fn forward_out_shape(&self) -> [usize; 4] {
        self.y
    }

    /// The result's shape (`[N, OH, OW, O]` for the forward convolution).
    pub fn out_shape(&self) -> [usize; 4] {
        match self.kind {
            ConvKind::Forward => self.y,
            ConvKind::GradInput => self.x,
            ConvKind::GradFilter => self.w,
        }
    }

    /// Runs the convolution and then `post` on its result (`post` must be
    /// empty unless `takes_post_ops`, its pool unless `takes_max_pool`):
    /// `a`, `b` are the op's operands, `dst` its result, `cols` scratch of
    /// `cols_len()` elements; `threads` share the matrix product.
    ///
    /// # Safety
    /// `a` and `b` must address `sizes()` elements each; `dst` must hold the
    /// result's and `cols` `cols_len()` elements; a bias holds one value per
    /// output channel, `keep_where_positive` as many as the result; a
    /// pooled output holds a quarter of the result's elements and overlaps
    /// no operand.
    pub unsafe fn run(
        &self,
        a: *const f32,
        b: *const f32,
        dst: &mut [f32],
        cols: &mut [f32],
        post: PostOps,
        threads: usize,
    ) {
        debug_assert!(
            self.takes_post_ops() || (post.bias.is_none() && !post.relu && post.keep_where_positive.is_none())
        );
        debug_assert!(self.takes_max_pool() || post.max_pool.is_none());
        debug_assert!(self.takes_grad_from_maxima() || post.grad_from_maxima.is_none());
        match self.direct() {
            // SAFETY: the caller's contract.
            Some(d) => unsafe { self.run_direct(&d, [a, b], dst, cols, post, threads) },
            // SAFETY: the caller's contract.
            None => unsafe { self.run_in_blocks(a, b, dst, cols, threads, self.block_rows()) },
        }
    }

    /// `run` on the direct kernels, planned by `direct` (`[a, b]`: the operands).
    ///
    /// # Safety
    /// As for `run`.
    unsafe fn run_direct(
        &self,
        d: &Direct,
        [a, b]: [*const f32; 2],
        dst: &mut [f32],
        cols: &mut [f32],
        post: PostOps,
        threads: usize,
    ) {
        let (na, nb, _) = self.sizes();
        // SAFETY: the caller's contract on `a` and `b`.
        let (a, b) = unsafe { (std::slice::from_raw_parts(a, na), std::slice::from_raw_parts(b, nb)) };
        let (src, rest) = self.direct_source(d, a, cols, threads);
        // SAFETY: `direct` checked AVX-512F and that every window fits; the
        // buffers have the window's sizes.
        unsafe {
            match self.kind {
                ConvKind::Forward => direct::forward(&d.win, src, b, dst, post, threads),
                ConvKind::GradFilter => direct::grad_filter(&d.win, src, b, post.grad_from_maxima, dst, threads),
                ConvKind::GradInput => {
                    let flipped = &mut rest[..d.win.w_len()];
                    direct::flip_transpose(b, self.w, flipped);
                    direct::forward(&d.win, src, flipped, dst, post, threads)
                }
            }
        }
    }

    /// `run` with blocks of `rows` output positions (`cols` holds
    /// `rows × k` elements).
    ///
    /// # Safety
    /// As for `run`.
    unsafe fn run_in_blocks(
        &self,
        a: *const f32,
        b: *const f32,
        dst: &mut [f32],
        cols: &mut [f32],
        threads: usize,
        rows: usize,
    ) {
        let (m, k) = self.m_k();
        let (na, nb, _) = self.sizes();
        let o = self.w[3];
        // SAFETY: the caller's contract on `a` and `b`.
        let (a, b) = unsafe { (std::slice::from_raw_parts(a, na), std::slice::from_raw_parts(b, nb)) };
        let rows = rows.max(1);
        let gx_len = self.x.iter().product::<usize>();
        self.clear_sums(dst);
        // Blocks of output positions, in order: col2im adds every term of an
        // element of `gx` in (position, tap) order as one pass would, and
        // the weight gradient sums its blocks in order.
        for r0 in (0..m).step_by(rows) {
            let r1 = (r0 + rows).min(m);
            let cols = &mut cols[..(r1 - r0) * k];
            match self.kind {
                ConvKind::Forward | ConvKind::GradFilter => {
                    self.im2col(a, cols, r0..r1, copy_run);
                    // SAFETY: `cols` is (r1 - r0) × k row-major; `b` is
                    // k × o (weights) or m × o (the output gradient, of
                    // which rows r0..r1), row-major.
                    unsafe {
                        if self.kind == ConvKind::Forward {
                            let y = &mut dst[r0 * o..r1 * o];
                            sgemm(y, (cols.as_ptr(), k, 1), (b.as_ptr(), o, 1), r1 - r0, k, o, threads)
                        } else {
                            let gy = (b[r0 * o..].as_ptr(), o, 1);
                            sgemm_into(dst, (cols.as_ptr(), 1, k), gy, [k, r1 - r0, o], threads, r0 > 0)
                        }
                    }
                }
                ConvKind::GradInput => {
                    // SAFETY: `a` (gy) is m × o row-major, of which rows
                    // r0..r1; `b` (w) is k × o row-major, read transposed
                    // as o × k.
                    let gy = (a[r0 * o..].as_ptr(), o, 1);
                    unsafe { sgemm(cols, gy, (b.as_ptr(), 1, o), r1 - r0, o, k, threads) };
                    self.col2im(cols, &mut dst[..gx_len], r0..r1);
                }
            }
        }
    }

    /// Zeroes what the blocks add into: the input gradient (col2im adds
    /// every block's terms), and the weight gradient when there are no
    /// output positions (no block writes it).
    fn clear_sums(&self, dst: &mut [f32]) {
        let (m, k) = self.m_k();
        match self.kind {
            ConvKind::GradInput => dst[..self.x.iter().product::<usize>()].fill(0.0),
            ConvKind::GradFilter if m == 0 => dst[..k * self.w[3]].fill(0.0),
            _ => {}
        }
    }

    /// Fills `cols` with the im2col rows of output positions `rows` (`rows
    /// × k` elements) from `x`, copying each run with `copy`.
    fn im2col<T: Copy + Default>(
        &self,
        x: &[T],
        cols: &mut [T],
        rows: std::ops::Range<usize>,
        copy: fn(&mut [T], &[T]),
    ) {
        let (k, c) = (self.m_k().1, self.x[3]);
        self.for_each_run(rows, |row, tap, taps, at| {
            let to = &mut cols[row * k + tap * c..row * k + (tap + taps) * c];
            match at {
                Some(at) => copy(to, &x[at..at + taps * c]),
                None => to.fill(T::default()),
            }
        });
    }

    /// Adds the im2col rows `cols` of output positions `rows` into the
    /// input gradient `gx`, in (position, tap) order.
    fn col2im(&self, cols: &[f32], gx: &mut [f32], rows: std::ops::Range<usize>) {
        let (k, c) = (self.m_k().1, self.x[3]);
        self.for_each_run(rows, |row, tap, taps, at| {
            if let Some(at) = at {
                let from = &cols[row * k + tap * c..row * k + (tap + taps) * c];
                for (g, &v) in gx[at..at + taps * c].iter_mut().zip(from) {
                    *g += v;
                }
            }
        });
    }

    /// Whether `run_bf16`'s products are large enough for the bf16 units
    /// to pay: the direct forward kernel (a forward product or input
    /// gradient) tiles output positions, so any size does; the GEMM's tiles
    /// are 16 or 32 wide and its steps 32 deep, and the direct weight
    /// gradient's tiles are weight rows, so a product with few rows, taps
    /// or channels (a first layer's one input channel, its weight gradient
    /// of 9 taps) pads or starves its tiles, and the widened operands on
    /// the `f32` kernels are faster. Either way the result is the `f32` sum
    /// of the `bf16` products.
    pub fn bf16_pays(&self) -> bool {
        if self.kind != ConvKind::GradFilter && self.bf16_direct().is_some() {
            return true;
        }
        let (m, k) = self.m_k();
        let o = self.w[3];
        let (rows, inner, cols) = match self.kind {
            ConvKind::Forward => (m, k, o),
            ConvKind::GradFilter => (k, m, o),
            ConvKind::GradInput => (m, o, k),
        };
        rows >= 32 && inner >= 64 && cols >= 16
    }

    /// Scratch `f32`s `run_bf16` needs: one block of im2col rows (as
    /// `f32`, the input gradient's products; the `bf16` rows take half).
    pub fn bf16_cols_len(&self) -> usize {
        match self.bf16_direct() {
            // The padded source and the paired weights, two bytes each;
            // for the weight gradient also both operands paired by images
            // (`Window::n` counts the pairs), a word each.
            Some(d) if self.kind == ConvKind::GradFilter => {
                let [n, oh, ow, o] = self.y;
                let pairs = n.div_ceil(2);
                d.win.src_len().div_ceil(2) + pairs * (d.win.hp * d.win.wp * d.win.c + oh * ow * o)
            }
            Some(d) => (d.win.src_len() + d.win.w_len()).div_ceil(2),
            None => self.block_rows() * self.m_k().1,
        }
    }

    /// How `run_bf16` runs it, for profiles: `bf16 direct` or `bf16 im2col`.
    pub fn bf16_how(&self) -> &'static str {
        match self.bf16_direct() {
            Some(_) => "bf16 direct",
            None => "bf16 im2col",
        }
    }

    /// The direct `bf16` kernel's plan (`conv_direct::forward_bf16`): a
    /// direct forward convolution or stride-1 input gradient over an even
    /// number of channels, on a machine with AVX512-BF16.
    fn bf16_direct(&self) -> Option<Direct> {
        // The forward kernel pairs channels (an even number); the weight
        // gradient's pairs images.
        let direct = self.direct().filter(|d| self.kind == ConvKind::GradFilter || d.win.c.is_multiple_of(2))?;
        direct::has_bf16_kernels().then_some(direct)
    }

    /// `run` for `bf16` operands in their two-byte storage, into an `f32`
    /// `dst` (summed in `f32`): on the direct `bf16` kernel where it applies
    /// (`bf16_direct`), else im2col in `bf16` and the products on
    /// `bf16_gemm`, in the same blocks and order as `run_in_blocks`; no
    /// post-ops.
    ///
    /// # Safety
    /// `a` and `b` must address `sizes()` elements each; `dst` must hold the
    /// result's and `cols` `bf16_cols_len()` elements.
    pub unsafe fn run_bf16(&self, a: *const u16, b: *const u16, dst: &mut [f32], cols: &mut [f32], threads: usize) {
        let (m, k) = self.m_k();
        let (na, nb, _) = self.sizes();
        let o = self.w[3];
        // SAFETY: the caller's contract on `a` and `b`.
        let (a, b) = unsafe { (std::slice::from_raw_parts(a, na), std::slice::from_raw_parts(b, nb)) };
        if let Some(d) = self.bf16_direct() {
            // SAFETY: the scratch holds `bf16_cols_len()` f32s, so the
            // padded source and the paired weights as u16s; it is ours
            // alone meanwhile.
            let halves = unsafe { std::slice::from_raw_parts_mut(cols.as_mut_ptr().cast::<u16>(), 2 * cols.len()) };
            let (src, rest) = self.direct_source(&d, a, halves, threads);
            if self.kind == ConvKind::GradFilter {
                // The words after the padded source (`bf16_cols_len`).
                // SAFETY: any two bytes are a valid u16 and any four a u32.
                let (_, words, _) = unsafe { rest.align_to_mut::<u32>() };
                let per_image = d.win.hp * d.win.wp * d.win.c;
                let pairs = d.win.n.div_ceil(2);
                let (src_pairs, gy_pairs) = words.split_at_mut(pairs * per_image);
                direct::pair_images(src, d.win.n, per_image, src_pairs);
                let [_, oh, ow, o] = self.y;
                direct::pair_images(b, d.win.n, oh * ow * o, gy_pairs);
                let win = Window { n: pairs, ..d.win };
                // SAFETY: `bf16_direct` checked the kernels and the window;
                // the paired buffers have its sizes.
                unsafe { direct::grad_filter_bf16(&win, src_pairs, gy_pairs, dst, threads) };
                return;
            }
            let paired = &mut rest[..d.win.w_len()];
            direct::pair_weights(b, self.w, d.flip, paired);
            // SAFETY: `bf16_direct` checked the kernels and the window;
            // the buffers have its sizes.
            unsafe { direct::forward_bf16(&d.win, src, paired, dst, threads) };
            return;
        }
        let rows = self.block_rows();
        let gx_len = self.x.iter().product::<usize>();
        self.clear_sums(dst);
        for r0 in (0..m).step_by(rows) {
            let r1 = (r0 + rows).min(m);
            match self.kind {
                ConvKind::Forward | ConvKind::GradFilter => {
                    // SAFETY: the scratch holds `rows × k` f32s, so twice
                    // as many u16s; it is ours alone meanwhile.
                    let halves =
                        unsafe { std::slice::from_raw_parts_mut(cols.as_mut_ptr().cast::<u16>(), (r1 - r0) * k) };
                    self.im2col(a, halves, r0..r1, <[u16]>::copy_from_slice);
                    // SAFETY: as in `run_in_blocks`, over bf16 elements.
                    unsafe {
                        if self.kind == ConvKind::Forward {
                            let y = &mut dst[r0 * o..r1 * o];
                            bf16_gemm(
                                y,
                                (halves.as_ptr(), k, 1),
                                (b.as_ptr(), o, 1),
                                [r1 - r0, k, o],
                                threads,
                                Store::default(),
                            )
                        } else {
                            let gy = (b[r0 * o..].as_ptr(), o, 1);
                            bf16_gemm(
                                dst,
                                (halves.as_ptr(), 1, k),
                                gy,
                                [k, r1 - r0, o],
                                threads,
                                Store { accumulate: r0 > 0, round: false },
                            )
                        }
                    }
                }
                ConvKind::GradInput => {
                    let block = &mut cols[..(r1 - r0) * k];
                    // SAFETY: as in `run_in_blocks`, over bf16 elements.
                    let gy = (a[r0 * o..].as_ptr(), o, 1);
                    unsafe { bf16_gemm(block, gy, (b.as_ptr(), 1, o), [r1 - r0, o, k], threads, Store::default()) };
                    self.col2im(block, &mut dst[..gx_len], r0..r1);
                }
            }
        }
    }

    /// The direct kernels' source — the input, or for the input gradient
    /// the output gradient `a` — padded into the front of `scratch` when
    /// the plan `d` pads it, and the rest of the scratch.
    fn direct_source<'s, T: Copy + Default + Send + Sync>(
        &self,
        d: &Direct,
        a: &'s [T],
        scratch: &'s mut [T],
        threads: usize,
    ) -> (&'s [T], &'s mut [T]) {
        let (padded, rest) = scratch.split_at_mut(if d.pad.is_some() { d.win.src_len() } else { 0 });
        let src = match d.pad {
            Some([top, left]) => {
                let dims = if self.kind == ConvKind::GradInput { self.y } else { self.x };
                direct::pad_into(a, dims, [top, left], padded, [d.win.hp, d.win.wp], threads);
                &*padded
            }
            None => a,
        };
        (src, rest)
    }
}

/// A convolution on the direct kernels: its window over the source, where
/// the source goes in the padded scratch copy (`None`: read in place), and
/// whether the weights are flipped and transposed (an input gradient).
struct Direct {
    win: Window,
    pad: Option<[usize; 2]>,
    flip: bool,
}

impl Direct {
    /// Scratch elements: the padded source, then the flipped weights.
    fn scratch_len(&self) -> usize {
        let src = if self.pad.is_some() { self.win.src_len() } else { 0 };
        src + if self.flip { self.win.w_len() } else { 0 }
    }
}

/// `to = from` for the short runs of im2col: whole 4-element chunks and a
/// remainder of up to 3, copied inline, since a call to `memcpy` per run of
/// a few elements costs more than the copy; long runs take `memcpy`.
#[inline(always)]
fn copy_run(to: &mut [f32], from: &[f32]) {
    if to.len() >= 64 {
        return to.copy_from_slice(from);
    }
    let (mut t, mut f) = (to.chunks_exact_mut(4), from.chunks_exact(4));
    for (t, f) in (&mut t).zip(&mut f) {
        t.copy_from_slice(f);
    }
    let (t, f) = (t.into_remainder(), f.remainder());
    if t.len() >= 2 {
        t[..2].copy_from_slice(&f[..2]);
    }
    if t.len() % 2 == 1 {
        t[t.len() - 1] = f[t.len() - 1];
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::{max_pool_grad_column_sums, max_pool_grad_from_first_max};
    use super::super::reduce::reduce;
    use super::{Conv, PostOps, SendMasks, SendPtr};
    use crate::ir::{DType, Op, ReduceOp, TensorType};
    use crate::tensor::{eval_node, Tensor};

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    #[test]
    fn every_block_size_gives_the_interpreters_results() {
        // (x, w, stride, padding, dilation): SAME, strided, dilated, VALID,
        // two one-channel 3x3 kernels (one weight-gradient tile of nine
        // rows, over one and two channel vectors, the last masked), a row
        // of 14 outputs in one forward tile of two channel vectors, two
        // whole channel vectors (plain loads, no lanes masked off), and no
        // output channels at all (no weight-gradient tiles).
        type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 4], [usize; 2]);
        let cases: [Case; 9] = [
            ([2, 6, 5, 3], [3, 3, 3, 4], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 7, 7, 2], [3, 2, 2, 3], [2, 3], [2, 0, 1, 2], [1, 1]),
            ([2, 5, 6, 1], [2, 3, 1, 2], [1, 2], [1, 1, 2, 0], [2, 2]),
            ([3, 4, 4, 5], [1, 1, 5, 2], [1, 1], [0; 4], [1, 1]),
            ([2, 6, 7, 1], [3, 3, 1, 16], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 5, 9, 1], [3, 3, 1, 20], [1, 2], [0, 1, 1, 0], [1, 1]),
            ([1, 3, 14, 2], [3, 3, 2, 20], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 4, 5, 3], [3, 3, 3, 32], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([2, 4, 4, 1], [3, 3, 1, 0], [1, 1], [1, 1, 1, 1], [1, 1]),
        ];
        for (case, (xs, ws, stride, padding, dilation)) in cases.into_iter().enumerate() {
            let fwd = Op::Conv2d { stride, padding, dilation, groups: 1 };
            let f32s = |shape: &[usize], seed| {
                Tensor::from_vec(DType::F32, shape, values(shape.iter().product(), seed)).expect("a tensor")
            };
            let (x, w) = (f32s(&xs, 1 + case as u64), f32s(&ws, 11 + case as u64));
            let y_ty = crate::ir::infer::infer(&fwd, &[&x.ty(), &w.ty()]).expect("a valid convolution");
            let gy = f32s(&y_ty.shape, 21 + case as u64);
            let grad_input = Op::Conv2dGradInput { stride, padding, dilation, groups: 1, input_shape: xs };
            let grad_filter = Op::Conv2dGradFilter { stride, padding, dilation, groups: 1, filter_shape: ws };
            let runs: [(Op, &Tensor, &Tensor, TensorType); 3] =
                [(fwd, &x, &w, y_ty.clone()), (grad_input, &gy, &w, x.ty()), (grad_filter, &x, &gy, w.ty())];
            for (op, a, b, ty) in runs {
                let expected: Vec<f64> = eval_node(&op, &[a, b], &ty).expect("the interpreter runs it").to_f64_vec();
                let conv = Conv::of(&op, a.shape(), b.shape(), &ty.shape).expect("lowered");
                let (m, k) = conv.m_k();
                let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
                let (av, bv): (Vec<f32>, Vec<f32>) =
                    (av.iter().map(|&v| v as f32).collect(), bv.iter().map(|&v| v as f32).collect());
                // im2col in blocks of several sizes, then `run` (the direct
                // kernels where this machine has them) at one, two and three
                // threads, bit for bit the same at each.
                let blocks = [1, 3, 7, m].map(|rows| (Some(rows), 1));
                let mut one_thread: Option<Vec<u32>> = None;
                for (rows, threads) in blocks.into_iter().chain([(None, 1), (None, 2), (None, 3)]) {
                    let mut dst = vec![f32::NAN; expected.len()];
                    let mut cols = vec![f32::NAN; rows.map_or(conv.cols_len(), |r| r * k)];
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
                    // SAFETY: the operands and buffers have the sizes `run` needs.
                    pool.install(|| unsafe {
                        match rows {
                            Some(rows) => conv.run_in_blocks(av.as_ptr(), bv.as_ptr(), &mut dst, &mut cols, 1, rows),
                            None => {
                                conv.run(av.as_ptr(), bv.as_ptr(), &mut dst, &mut cols, PostOps::default(), threads)
                            }
                        }
                    });
                    for (i, (&got, &want)) in dst.iter().zip(&expected).enumerate() {
                        let ok = (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs());
                        assert!(
                            ok,
                            "case {case}, {:?}, {rows:?} rows, {threads} threads: element {i} is {got}, not {want}",
                            conv.kind
                        );
                    }
                    if rows.is_none() {
                        let bits: Vec<u32> = dst.iter().map(|v| v.to_bits()).collect();
                        let first = one_thread.get_or_insert_with(|| bits.clone());
                        assert!(*first == bits, "case {case}, {:?}: {threads} threads differ from one", conv.kind);
                    }
                }
            }
        }
    }

    /// `run_bf16` (bf16 im2col and `bf16_gemm`) gives the interpreter's
    /// `f32` convolution of the same bf16 values, within the hardware
    /// tiers' summation (pairs added before the sum, `1e-5` relative), and
    /// the same bits at one and two threads.
    #[test]
    fn bf16_convolutions_sum_the_bf16_products_in_f32() {
        type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 4]);
        // With AVX512-BF16 the even-channel forward convolutions and
        // stride-1 input gradients run on the direct bf16 kernel (tiles of
        // one and two vectors, masked channel blocks, a stride, a 2x3
        // kernel), the rest by im2col.
        let cases: [Case; 5] = [
            ([2, 6, 5, 3], [3, 3, 3, 4], [1, 1], [1, 1, 1, 1]),
            ([1, 7, 7, 2], [3, 2, 2, 3], [2, 3], [2, 0, 1, 2]),
            ([2, 9, 9, 16], [3, 3, 16, 32], [1, 1], [1, 1, 1, 1]),
            ([1, 4, 5, 3], [3, 3, 3, 33], [1, 1], [0; 4]),
            ([1, 5, 6, 4], [2, 3, 4, 34], [1, 1], [1, 0, 2, 0]),
        ];
        let bits = |v: &[f32]| -> Vec<u16> { v.iter().map(|&x| crate::half::f32_to_bf16_bits(x)).collect() };
        for (case, (xs, ws, stride, padding)) in cases.into_iter().enumerate() {
            let fwd = Op::Conv2d { stride, padding, dilation: [1, 1], groups: 1 };
            let rounded = |shape: &[usize], seed| {
                let v: Vec<f32> =
                    values(shape.iter().product(), seed).into_iter().map(crate::half::round_bf16).collect();
                Tensor::from_vec(DType::F32, shape, v).expect("a tensor")
            };
            let (x, w) = (rounded(&xs, 1 + case as u64), rounded(&ws, 11 + case as u64));
            let y_ty = crate::ir::infer::infer(&fwd, &[&x.ty(), &w.ty()]).expect("a valid convolution");
            let gy = rounded(&y_ty.shape, 21 + case as u64);
            let p = (stride, padding, [1, 1], 1);
            let grad_input =
                Op::Conv2dGradInput { stride: p.0, padding: p.1, dilation: p.2, groups: p.3, input_shape: xs };
            let grad_filter =
                Op::Conv2dGradFilter { stride: p.0, padding: p.1, dilation: p.2, groups: p.3, filter_shape: ws };
            let runs: [(Op, &Tensor, &Tensor, TensorType); 3] =
                [(fwd, &x, &w, y_ty.clone()), (grad_input, &gy, &w, x.ty()), (grad_filter, &x, &gy, w.ty())];
            for (op, a, b, ty) in runs {
                let expected: Vec<f64> = eval_node(&op, &[a, b], &ty).expect("the interpreter runs it").to_f64_vec();
                let conv = Conv::of(&op, a.shape(), b.shape(), &ty.shape).expect("lowered");
                let f32s = |t: &Tensor| t.to_f64_vec().iter().map(|&v| v as f32).collect::<Vec<f32>>();
                let (av, bv) = (bits(&f32s(a)), bits(&f32s(b)));
                let mut first: Option<Vec<u32>> = None;
                for threads in [1, 2] {
                    let mut dst = vec![f32::NAN; expected.len()];
                    let mut cols = vec![f32::NAN; conv.bf16_cols_len()];
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
                    // SAFETY: the operands and buffers have the sizes `run_bf16` needs.
                    pool.install(|| unsafe { conv.run_bf16(av.as_ptr(), bv.as_ptr(), &mut dst, &mut cols, threads) });
                    for (i, (&got, &want)) in dst.iter().zip(&expected).enumerate() {
                        let ok = (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs());
                        assert!(
                            ok,
                            "case {case}, {:?}, {threads} threads: element {i} is {got}, not {want}",
                            conv.kind
                        );
                    }
                    let got: Vec<u32> = dst.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(first.get_or_insert_with(|| got.clone()), &got, "case {case}: threads differ");
                }
            }
        }
    }

    /// The 2x2 max pool a direct forward convolution writes with its result
    /// equals the interpreter's pooling of that result bit for bit (NaN
    /// lanes and ties included), at one and two threads; so do the pool's
    /// gradient computed from the first maxima it records (ReLU zeros make
    /// ties, the output gradient holds `-0`, NaN and infinities), that
    /// gradient's column sums computed from the maxima, and a weight
    /// gradient that reads it from the maxima.
    #[test]
    fn max_pool_written_with_the_result_equals_pooling_it() {
        // (x, w, whether it pools): tiles of two rows, of one row and two
        // channel vectors (the second masked); not for an odd output
        // height or width.
        let cases = [
            ([2, 6, 8, 3], [3, 3, 3, 4], true),
            ([1, 4, 28, 1], [3, 3, 1, 16], true),
            ([1, 4, 6, 2], [3, 3, 2, 20], true),
            ([2, 6, 4, 1], [3, 3, 1, 20], true),
            ([3, 2, 4, 2], [2, 2, 2, 5], false),
            ([1, 4, 5, 2], [3, 3, 2, 4], false),
        ];
        for (xs, ws, pools) in cases {
            let op = Op::Conv2d { stride: [1, 1], padding: [1, 1, 1, 1], dilation: [1, 1], groups: 1 };
            let mut xv = values(xs.iter().product(), 9);
            // A NaN input makes NaN outputs (and pool windows) around it.
            xv[5] = f32::NAN;
            let wv = values(ws.iter().product(), 4);
            let (x_ty, w_ty) = (TensorType::new(DType::F32, xs.to_vec()), TensorType::new(DType::F32, ws.to_vec()));
            let ty = crate::ir::infer::infer(&op, &[&x_ty, &w_ty]).expect("a valid convolution");
            let conv = Conv::of(&op, &xs, &ws, &ty.shape).expect("lowered");
            assert_eq!(conv.takes_max_pool(), pools && super::super::simd::avx512(), "{xs:?} {ws:?}");
            if !conv.takes_max_pool() {
                continue;
            }
            let bias = vec![0.0; ws[3]];
            let mut gy = values(ty.numel() / 4, 5);
            gy[..4].copy_from_slice(&[-0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
            // The result, then its pool and the pool's gradient, as the
            // interpreter computes them.
            let mut y = vec![f32::NAN; ty.numel()];
            let mut cols = vec![f32::NAN; conv.cols_len()];
            let layer = PostOps { bias: Some(&bias), relu: true, ..PostOps::default() };
            // SAFETY: the operands and buffers have the sizes `run` needs.
            unsafe { conv.run(xv.as_ptr(), wv.as_ptr(), &mut y, &mut cols, layer, 1) };
            let y = Tensor::from_vec(DType::F32, &ty.shape, y).expect("a tensor");
            let [pool_op, grad_op] = [false, true].map(|grad| {
                let (kind, size, stride, padding) = (crate::ir::PoolKind::Max, [2, 2], [2, 2], [0; 4]);
                match grad {
                    false => Op::Pool2d { kind, size, stride, padding },
                    true => Op::Pool2dGrad { kind, size, stride, padding },
                }
            });
            let pooled_ty = crate::ir::infer::infer(&pool_op, &[&y.ty()]).expect("a valid pool");
            let want_pooled = eval_node(&pool_op, &[&y], &pooled_ty).expect("the interpreter pools").to_f64_vec();
            let gy_t = Tensor::from_vec(DType::F32, &pooled_ty.shape, gy.clone()).expect("a tensor");
            let want_grad =
                eval_node(&grad_op, &[&y, &gy_t], &y.ty()).expect("the interpreter's gradient").to_f64_vec();
            let same = |got: &[f32], want: &[f64], what: &str| {
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert_eq!(g.to_bits(), (*w as f32).to_bits(), "{xs:?} {ws:?} {what} element {i}");
                }
            };
            for (threads, pool_only) in [(1, false), (2, false), (1, true), (2, true)] {
                let mut out = vec![f32::NAN; ty.numel()];
                let mut pooled = vec![f32::NAN; ty.numel() / 4];
                let mut first_max = vec![u64::MAX; conv.first_max_len()];
                let max_pool = Some(SendPtr(pooled.as_mut_ptr()));
                let first_max_at = Some(SendMasks(first_max.as_mut_ptr()));
                let post = PostOps { max_pool, first_max: first_max_at, pool_only, ..layer };
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
                // SAFETY: the operands and buffers have the sizes `run` needs.
                pool.install(|| unsafe { conv.run(xv.as_ptr(), wv.as_ptr(), &mut out, &mut cols, post, threads) });
                let what = format!("{threads} threads, pool only {pool_only}:");
                match pool_only {
                    true => assert!(out.iter().all(|v| v.is_nan()), "{what} the result was stored"),
                    false => same(&out, &y.to_f64_vec(), &format!("{what} result")),
                }
                same(&pooled, &want_pooled, &format!("{what} pooled"));
                let mut gx = vec![f32::NAN; ty.numel()];
                pool.install(|| max_pool_grad_from_first_max(&first_max, &gy, &ty.shape, &mut gx, threads))
                    .expect("the gradient from the recorded maxima");
                same(&gx, &want_grad, &format!("{what} gradient"));
                // Its bias gradient summed from the masks and `gy`, as the
                // reduction sums the gradient written above.
                let channels = ty.shape[3];
                let mut want_sums = vec![f32::NAN; channels];
                reduce(ReduceOp::Sum, &gx, &ty.shape, &[true, true, true, false], &mut want_sums).unwrap();
                let mut sums = vec![f32::NAN; channels];
                max_pool_grad_column_sums(&first_max, &gy, &ty.shape, &mut sums).expect("the column sums");
                let want_sums: Vec<f64> = want_sums.iter().map(|&v| f64::from(v)).collect();
                same(&sums, &want_sums, &format!("{what} column sums"));
                // The weight gradient that reads this gradient from the
                // maxima equals the one that reads it written out.
                let grad_filter = Op::Conv2dGradFilter {
                    stride: [1, 1],
                    padding: [1, 1, 1, 1],
                    dilation: [1, 1],
                    groups: 1,
                    filter_shape: ws,
                };
                let filter = Conv::of(&grad_filter, &xs, &ty.shape, &ws).expect("lowered");
                assert_eq!(filter.takes_grad_from_maxima(), xs[3] == 1, "{xs:?} {ws:?}");
                if filter.takes_grad_from_maxima() {
                    let from_maxima = super::MaximaGrad { pooled: &gy, first_max: &first_max };
                    let [mut stored, mut read] = [0, 1].map(|_| vec![f32::NAN; ws.iter().product()]);
                    let mut cols = vec![f32::NAN; filter.cols_len()];
                    // SAFETY: the operands and buffers have the sizes `run` needs.
                    pool.install(|| unsafe {
                        filter.run(xv.as_ptr(), gx.as_ptr(), &mut stored, &mut cols, PostOps::default(), threads);
                        let post = PostOps { grad_from_maxima: Some(from_maxima), ..PostOps::default() };
                        filter.run(xv.as_ptr(), gx.as_ptr(), &mut read, &mut cols, post, threads)
                    });
                    let stored: Vec<f64> = stored.iter().map(|&v| f64::from(v)).collect();
                    same(&read, &stored, &format!("{what} weight gradient"));
                }
            }
        }
    }

    /// The direct forward convolution's (and input gradient's) post-ops
    /// give exactly the values of the epilogue run after it: the bias
    /// added, then the interpreter's ReLU (NaN kept), then zero where the
    /// other tensor is not above zero (NaN, `-0` and `0` included), bit for
    /// bit, over masked channel blocks too.
    #[test]
    fn post_ops_equal_the_epilogue_run_after_the_product() {
        let cases = [
            ([2, 6, 5, 3], [3, 3, 3, 4], [1, 1], false),
            ([1, 5, 9, 1], [3, 3, 1, 20], [1, 2], false),
            ([1, 4, 6, 2], [3, 3, 2, 40], [1, 1], false),
            ([2, 6, 5, 20], [3, 3, 20, 4], [1, 1], true),
            ([1, 4, 7, 3], [3, 3, 3, 8], [1, 1], true),
        ];
        for (xs, ws, stride, grad_input) in cases {
            let padding = [1, 1, 1, 1];
            let fwd = Op::Conv2d { stride, padding, dilation: [1, 1], groups: 1 };
            let (x_ty, w_ty) = (TensorType::new(DType::F32, xs.to_vec()), TensorType::new(DType::F32, ws.to_vec()));
            let y_ty = crate::ir::infer::infer(&fwd, &[&x_ty, &w_ty]).expect("a valid convolution");
            // The operands and result: `(x, w) -> y`, or `(gy, w) -> gx`.
            let (op, a_len, ty, channels) = match grad_input {
                false => (fwd, x_ty.numel(), y_ty.clone(), ws[3]),
                true => {
                    let op = Op::Conv2dGradInput { stride, padding, dilation: [1, 1], groups: 1, input_shape: xs };
                    (op, y_ty.numel(), x_ty.clone(), ws[2])
                }
            };
            let conv = Conv::of(&op, if grad_input { &y_ty.shape } else { &xs }, &ws, &ty.shape).expect("lowered");
            assert_eq!(conv.out_channels(), channels, "{op:?}");
            if !conv.takes_post_ops() {
                continue;
            }
            let (av, wv) = (values(a_len, 3), values(ws.iter().product(), 5));
            let mut bias = values(channels, 7);
            bias[0] = f32::NAN;
            bias[1] = -0.0;
            let mut other = values(ty.numel(), 8);
            other[..4].copy_from_slice(&[f32::NAN, -0.0, 0.0, f32::INFINITY]);
            let run = |post: PostOps| {
                let mut dst = vec![f32::NAN; ty.numel()];
                let mut cols = vec![f32::NAN; conv.cols_len()];
                // SAFETY: the operands and buffers have the sizes `run` needs.
                unsafe { conv.run(av.as_ptr(), wv.as_ptr(), &mut dst, &mut cols, post, 1) };
                dst
            };
            let plain = run(PostOps::default());
            for (with_bias, relu, keep) in
                [(true, true, false), (true, false, true), (false, true, false), (false, false, true)]
            {
                let keep_where_positive = keep.then_some(&other[..]);
                let got = run(PostOps {
                    bias: with_bias.then_some(&bias[..]),
                    relu,
                    keep_where_positive,
                    ..PostOps::default()
                });
                let want = plain.iter().enumerate().map(|(i, &y)| {
                    let y = if with_bias { y + bias[i % channels] } else { y };
                    let y = if relu && !(y > 0.0 || y.is_nan()) { 0.0 } else { y };
                    let positive = other[i] > 0.0;
                    if keep && !positive {
                        0.0
                    } else {
                        y
                    }
                });
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    let what = format!("{op:?} bias {with_bias} relu {relu} keep {keep}");
                    assert_eq!(g.to_bits(), w.to_bits(), "{xs:?} {ws:?} {what}: element {i}");
                }
            }
        }
    }
}
