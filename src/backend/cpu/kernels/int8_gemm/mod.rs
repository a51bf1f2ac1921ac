//! The int8 quantized matrix product — `crate::tensor::quant`'s
//! `quant_matmul` — on the instruction-set tier module `isa` picks: the
//! reference's scalar loops, or AVX-512 VNNI `vpdpbusd` (`u8 × i8` products
//! summed four at a time into `i32`).
//!
//! Contract: `dst = quant_matmul(x, w, w_scale)` for a row-major `m × k`
//! f32 `x`, a row-major `k × n` i8 `w` and per-column scales `w_scale:
//! f32[n]`; `dst` is row-major `m × n`. Every tier gives
//! `crate::tensor::quant::quant_matmul_into`'s result bit for bit: each row
//! of `x` is quantized to `u8` by the shared `RowQuant` (its scale and zero
//! point from `RowQuant::from_range`), the integer sums are exact (wrapping
//! `i32` arithmetic, which is associative, so the grouping of `vpdpbusd`
//! changes nothing), and the epilogue does the reference's two float
//! roundings in its order, `f32(acc − zero · col_sum) · (scale ·
//! w_scale[j])`; a row holding a NaN or an infinity gives NaN (`f32::NAN`)
//! in every column. Work is split only over blocks of output rows and
//! column panels, never over `k`, so the result is also the same at any
//! thread count. The vector code assumes the default floating-point
//! environment (round to nearest even, no flush-to-zero), as Rust does: its
//! products and its `i32 → f32` conversion are then the reference's scalar
//! operations, and the `f32 → i32` rounding of the levels is encoded in the
//! instruction (nearest even, `round_ties_even`'s), not read from MXCSR.
//!
//! - `Portable`: the reference itself, `threads` splitting the rows.
//! - `Avx512` and `Amx`, when the CPU has AVX512_VNNI: the `vpdpbusd`
//!   kernel of module `avx512` (12 rows × 32 columns of `i32`
//!   accumulators). The AMX tier uses it too: AMX-INT8 `tdpbusd` is not
//!   written (no machine here to test it on). Without VNNI (no such CPU
//!   has the `Avx512` tier's AVX512_BF16) they run the portable code.
//!
//! Packing, per call, into buffers each thread keeps for its next product
//! (up to 16 MiB each): `x` is quantized row by row into `m` rows of
//! `quads = ceil(k / 4)` `u32`s, the `u32` at `q` of a row holding its
//! levels of `k = 4q .. 4q + 4` (byte `i` for `k = 4q + i`: the bytes as
//! they come), one broadcast per row and step; `w` into
//! `ceil(n / 32)` panels of `quads` × 128 bytes, the bytes of a step being
//! `[column][i]` = `w[4q + i][column]` (two zmm), with the panel's column
//! sums beside. The padding of `k` (past its end) and of `w` (columns past
//! `n`) is zero, so it adds nothing; the rows of a block past `m` are
//! never computed.
//!
//! A quantized convolution (`Input::patches`) quantizes each image as one
//! row, then multiplies its im2col patches: with input channels a multiple
//! of 4 the micro-kernel reads them in place from the images' levels,
//! padded with each image's zero point (`Gather`); otherwise patch rows are
//! made block by block (`tensor::quant::patch_rows`). The store applies a
//! dense layer's bias and ReLU when asked (`Post`).
//!
//! Example: `quant_gemm(&mut y, x, w, s, [64, 784, 256], 1)` is a
//! quantized dense layer `y = x @ w` of a batch of 64 for row-major `x:
//! f32[64, 784]`, `w: i8[784, 256]` and `s: f32[256]` (6 row blocks, the
//! last of 4 rows, × 8 panels × 196 steps of the micro-kernel).

#[cfg(target_arch = "x86_64")]
mod avx512;

use super::isa::{self, Isa};
use crate::backend::cpu::threads::{for_product, split_rows};
use crate::ir::Patches;
use crate::tensor::quant::{patch_rows, quant_conv_into, quant_matmul_into, RowQuant};

/// What the product's store applies to each output element `y[i, j]`
/// (the epilogue of a dense layer, fused so its own pass goes away):
/// `y + bias[j]`, then ReLU (`0` unless above zero or NaN, as the
/// interpreter's `relu`), each rounded as the separate ops would be.
#[derive(Clone, Copy, Default)]
pub(in crate::backend::cpu) struct Post<'a> {
    /// One value per column (`n`).
    pub bias: Option<&'a [f32]>,
    pub relu: bool,
}

impl Post<'_> {
    /// Applies the epilogue to one output row (`n` elements).
    fn apply(&self, row: &mut [f32]) {
        if let Some(bias) = self.bias {
            row.iter_mut().zip(bias).for_each(|(y, b)| *y += b);
        }
        let relu = crate::tensor::f32_unary(crate::ir::UnaryOp::Relu);
        if let Some(relu) = relu.filter(|_| self.relu) {
            row.iter_mut().for_each(|y| *y = relu(*y));
        }
    }
}

/// The rows a product quantizes: `m × k` row-major `values`, or the im2col
/// rows (`Patches`) of the NHWC input `values` of the given shape (a
/// quantized convolution, `m = N · OH · OW`, `k = KH · KW · C`: each image
/// is quantized as one row, then its levels are laid out as patches, the
/// image's zero point in the padding; `tensor::quant::quant_conv_into`).
#[derive(Clone, Copy)]
pub(in crate::backend::cpu) struct Input {
    pub values: *const f32,
    pub patches: Option<(Patches, [usize; 4])>,
}

impl Input {
    /// `m × k` rows at `values`.
    #[cfg(test)]
    pub fn rows(values: *const f32) -> Input {
        Input { values, patches: None }
    }

    /// The number of `f32`s at `values` for an `m × k` product.
    fn len(&self, [m, k]: [usize; 2]) -> usize {
        match self.patches {
            Some((_, shape)) => shape.iter().product(),
            None => m * k,
        }
    }
}

/// `Input` as a slice.
#[derive(Clone, Copy)]
struct Rows<'a> {
    values: &'a [f32],
    patches: Option<(Patches, [usize; 4])>,
}

/// A quantized layer's weights as stored: `k × n` row-major `i8` values,
/// one `f32` scale per column, and the static range its inputs are
/// quantized with (from calibration; `None`: each row by its own range).
#[derive(Clone, Copy)]
pub(in crate::backend::cpu) struct Int8Matrix {
    pub values: *const i8,
    pub scales: *const f32,
    pub input_range: Option<[f32; 2]>,
}

/// `Int8Matrix` with the values packed once by `pack_weights`.
#[derive(Clone, Copy)]
pub(in crate::backend::cpu) struct PackedMatrix<'a> {
    pub weights: &'a PackedWeights,
    pub scales: *const f32,
    pub input_range: Option<[f32; 2]>,
}

/// `dst = post(quant_matmul(x, w.values, w.scales, w.input_range))`, of
/// `x`'s rows or patches (see the module docs and `crate::tensor::quant`),
/// on the tier `isa::active()`; `mkn` is `[m, k, n]`, and `threads` of the
/// current rayon pool share the work (1: the calling thread only).
///
/// # Safety
/// `x.values` must address `m · k` f32 (with patches, the NHWC input's
/// elements), `w.values` `k · n` i8 (both row-major), `w.scales` `n` f32,
/// and `dst` must hold at least `m · n` elements; `post.bias`, when there
/// is one, `n`.
pub(in crate::backend::cpu) unsafe fn quant_gemm(
    dst: &mut [f32],
    x: Input,
    w: Int8Matrix,
    mkn: [usize; 3],
    post: Post,
    threads: usize,
) {
    // SAFETY: the caller's contract; `active()` is an available tier.
    unsafe { quant_gemm_on(isa::active(), dst, x, w, mkn, post, threads) }
}

/// `quant_gemm` on the tier `isa` (tests and benchmarks compare tiers).
///
/// # Panics
/// If this machine cannot run `isa`.
///
/// # Safety
/// As for `quant_gemm`.
pub(in crate::backend::cpu) unsafe fn quant_gemm_on(
    isa: Isa,
    dst: &mut [f32],
    x: Input,
    w: Int8Matrix,
    mkn: [usize; 3],
    post: Post,
    threads: usize,
) {
    if let Some(why) = isa::Features::detected().lacks(isa) {
        panic!("quant_gemm on {}: {why}", isa.name());
    }
    let [m, k, n] = mkn;
    assert!(dst.len() >= m * n, "quant_gemm: {} elements for a {m}x{n} product", dst.len());
    assert!(post.bias.is_none_or(|b| b.len() == n), "quant_gemm: a bias of the wrong length");
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY (all three): the caller's contract.
    let (values, w_scale) = unsafe { (slice(w.values, k * n), slice(w.scales, n)) };
    // SAFETY: the caller's contract.
    let x = Rows { values: unsafe { slice(x.values, x.len([m, k])) }, patches: x.patches };
    let dst = &mut dst[..m * n];
    if k == 0 {
        // Every sum is 0: the reference's `RowQuant::output(0, 0, s)`.
        quant_matmul_into(&[], values, w_scale, w.input_range, dst, mkn);
        return dst.chunks_exact_mut(n).for_each(|row| post.apply(row));
    }
    let layer = Layer { weights: Weights::RowMajor(values), scales: w_scale, input_range: w.input_range };
    let threads = for_product(mkn, threads);
    #[cfg(target_arch = "x86_64")]
    if runs_vnni(isa) {
        // SAFETY: the CPU has AVX-512 F, BW, VL (the tier) and VNNI.
        return unsafe { tiled(dst, x, layer, mkn, post, threads) };
    }
    portable(dst, x, layer, mkn, post, threads);
}

/// The `len` elements at `p` (none, whatever `p` is, when `len` is 0).
///
/// # Safety
/// When `len > 0`, `p` must address `len` initialized elements that stay
/// unchanged while the slice lives.
unsafe fn slice<'a, T>(p: *const T, len: usize) -> &'a [T] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}

/// Whether the tier `isa` runs the VNNI kernel here: an AVX-512 tier on a
/// CPU with AVX512_VNNI (and AVX-512 BW and VL, which the kernel's byte
/// shuffles need; every tier above `Portable` requires them anyway).
#[cfg(target_arch = "x86_64")]
fn runs_vnni(isa: Isa) -> bool {
    let f = isa::Features::detected();
    isa >= Isa::Avx512 && f.avx512_vnni && f.avx512bw && f.avx512vl
}

/// The portable tier: the reference on contiguous ranges of rows (a row's
/// result depends on that row only, so the split changes nothing).
fn portable(dst: &mut [f32], x: Rows, layer: Layer, [m, k, n]: [usize; 3], post: Post, threads: usize) {
    let Weights::RowMajor(w) = layer.weights else { unreachable!("packed weights exist only for the VNNI kernel") };
    if let Some((p, shape)) = x.patches {
        // The reference itself (images are quantized whole).
        quant_conv_into(x.values, shape, &p, (w, layer.scales, layer.input_range), dst);
        return dst.chunks_exact_mut(n).for_each(|row| post.apply(row));
    }
    let parts: Vec<_> = split_rows(m, threads).zip(pieces(dst, n, m, threads)).collect();
    each_in_parallel(parts, |((lo, hi), out)| {
        let rows = &x.values[lo * k..hi * k];
        quant_matmul_into(rows, w, layer.scales, layer.input_range, out, [hi - lo, k, n]);
        out.chunks_exact_mut(n).for_each(|row| post.apply(row));
    });
}

#[cfg(target_arch = "x86_64")]
/// Rows per packed `x` block (the micro-tile's height).
const MR: usize = 12;
#[cfg(target_arch = "x86_64")]
/// Columns per packed `w` panel (the micro-tile's width: two zmm of `i32`).
const NR: usize = 32;

#[cfg(target_arch = "x86_64")]
/// 64 bytes on a cache line of their own: a packed `w` panel is a run of
/// them, so its loads never straddle two lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

#[cfg(target_arch = "x86_64")]
/// One product, packed, as the micro-kernels see it.
struct Job<'a> {
    /// Quantized `x`: `m` rows of `quads` `u32`s (4 levels each); unused
    /// with `gather`.
    a: &'a [u32],
    /// A convolution's rows read in place from its padded level images.
    gather: Option<Gather<'a>>,
    /// Each row's quantization (`m`).
    quants: &'a [RowQuant],
    /// Packed `w`: `ceil(n / NR)` panels of `quads · 2` lines.
    b: &'a [Line],
    /// `Σ_k w[k, j]` for each column of each panel (`NR` per panel, the
    /// padding 0).
    col_sums: &'a [i32],
    w_scale: &'a [f32],
    post: Post<'a>,
    /// `dst`'s first element (row-major `m × n`).
    dst: super::conv_direct::SendPtr,
    m: usize,
    n: usize,
    /// Steps of 4 along `k` in the packed operands (`ceil(k / 4)`).
    quads: usize,
}

#[cfg(target_arch = "x86_64")]
/// Where a convolution's rows are, when the micro-kernel reads them in
/// place (input channels a multiple of 4, so each step's 4 levels are one
/// `u32` of one pixel): step `q` of row `r` is `levels[rows[r] +
/// steps[q]]`.
#[derive(Clone, Copy)]
struct Gather<'a> {
    /// The images' levels, padded with each image's zero point on every
    /// side by the convolution's padding: `[N, H', W', C / 4]` `u32`s.
    levels: &'a [u32],
    /// Each row's window origin in `levels` (`m`).
    rows: &'a [usize],
    /// Each step's place relative to a window's origin (`quads`).
    steps: &'a [usize],
}

#[cfg(target_arch = "x86_64")]
/// The packing buffers a thread keeps between products.
#[derive(Default)]
struct Buffers {
    a: Vec<u32>,
    quants: Vec<RowQuant>,
    b: Vec<Line>,
    col_sums: Vec<i32>,
    /// A convolution's images quantized (`quads` of each) and their levels
    /// side by side, and their parameters.
    images: Vec<u32>,
    image_levels: Vec<u8>,
    image_quants: Vec<RowQuant>,
    /// For `Gather`: the padded level images, the rows' origins and the
    /// steps' offsets.
    padded: Vec<u32>,
    origins: Vec<usize>,
    steps: Vec<usize>,
}

/// Weights packed once for the VNNI kernel (a quantized model's weights
/// are fixed when a unit is prepared): the panels and column sums that
/// `tiled` would otherwise pack on every call.
pub(in crate::backend::cpu) struct PackedWeights {
    #[cfg(target_arch = "x86_64")]
    b: Vec<Line>,
    #[cfg(target_arch = "x86_64")]
    col_sums: Vec<i32>,
    k: usize,
    n: usize,
}

/// Row-major `k × n` weights `w` packed for `quant_gemm_packed`; `None`
/// when this process does not run the VNNI kernel (or `k` is 0).
pub(in crate::backend::cpu) fn pack_weights(w: &[i8], k: usize, n: usize) -> Option<PackedWeights> {
    #[cfg(target_arch = "x86_64")]
    if runs_vnni(isa::active()) && k > 0 && w.len() >= k * n {
        let (quads, panels) = (k.div_ceil(4), n.div_ceil(NR));
        let mut b = vec![Line([0; 64]); panels * quads * 2];
        let mut col_sums = vec![0; panels * NR];
        // SAFETY: the CPU has the instructions (checked); `b` and
        // `col_sums` hold every panel.
        unsafe { avx512::pack_panels(w, [k, n], 0..panels, quads, &mut b, &mut col_sums) };
        return Some(PackedWeights { b, col_sums, k, n });
    }
    let _ = (w, k, n);
    None
}

/// `quant_gemm` with weights packed by `pack_weights` (of this `k × n`).
///
/// # Safety
/// As for `quant_gemm`.
pub(in crate::backend::cpu) unsafe fn quant_gemm_packed(
    dst: &mut [f32],
    x: Input,
    w: PackedMatrix,
    [m, k, n]: [usize; 3],
    post: Post,
    threads: usize,
) {
    let packed = w.weights;
    assert!(dst.len() >= m * n && packed.k == k && packed.n == n, "quant_gemm_packed: the shapes differ");
    assert!(post.bias.is_none_or(|b| b.len() == n), "quant_gemm_packed: a bias of the wrong length");
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY (both): the caller's contract.
    let (values, w_scale) = unsafe { (slice(x.values, x.len([m, k])), slice(w.scales, n)) };
    let x = Rows { values, patches: x.patches };
    let threads = for_product([m, k, n], threads);
    let layer = Layer { weights: Weights::Packed(packed), scales: w_scale, input_range: w.input_range };
    // SAFETY: `packed` exists only where the VNNI kernel runs, with k > 0.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        tiled(&mut dst[..m * n], x, layer, [m, k, n], post, threads)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, layer, post, threads);
}

/// The weights a product multiplies by: as stored, or packed already.
enum Weights<'a> {
    RowMajor(&'a [i8]),
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Packed(&'a PackedWeights),
}

/// A layer as the tiers see it: its weights, their per-column scales and
/// its static input range (`Int8Matrix`).
struct Layer<'a> {
    weights: Weights<'a>,
    scales: &'a [f32],
    input_range: Option<[f32; 2]>,
}

/// The VNNI tier: packs `x` (and `w`, unless packed), then runs the grid.
///
/// # Safety
/// The CPU has AVX-512 F, BW, VL and VNNI; `x` is `m × k`, `w` `k × n`,
/// `w_scale` `n` and `dst` `m × n`, with `k > 0`.
#[cfg(target_arch = "x86_64")]
unsafe fn tiled(dst: &mut [f32], x: Rows, layer: Layer, [m, k, n]: [usize; 3], post: Post, threads: usize) {
    let (w, w_scale) = (layer.weights, layer.scales);
    let quads = k.div_ceil(4);
    // The packing buffers of this thread's last product, reused: fresh
    // pages cost a fault each, about as long as packing them.
    thread_local! {
        static BUFFERS: std::cell::Cell<Buffers> = const {
            std::cell::Cell::new(Buffers {
                a: Vec::new(),
                quants: Vec::new(),
                b: Vec::new(),
                col_sums: Vec::new(),
                images: Vec::new(),
                image_levels: Vec::new(),
                image_quants: Vec::new(),
                padded: Vec::new(),
                origins: Vec::new(),
                steps: Vec::new(),
            })
        };
    }
    // Keep at most 16 MiB each for the next product.
    fn keep<T>(v: &mut Vec<T>) {
        if v.capacity() * size_of::<T>() > 1 << 24 {
            *v = Vec::new();
        }
    }
    let mut buf = BUFFERS.take();
    // Packing moves gigabytes a second per thread: split only when there
    // are a few hundred thousand elements.
    let split = |elements: usize| if elements >= 1 << 18 { threads } else { 1 };

    let (blocks, a_block) = (m.div_ceil(MR), quads * MR);
    reuse(&mut buf.a, m * quads, 0);
    reuse(&mut buf.quants, m, RowQuant::from_range(0.0, 0.0, false));
    let parts = split(m * k);
    match x.patches {
        None => {
            let items = split_rows(blocks, parts).zip(pieces(&mut buf.a, a_block, blocks, parts));
            let items: Vec<_> = items.zip(pieces(&mut buf.quants, MR, blocks, parts)).collect();
            each_in_parallel(items, |(((lo, hi), a), quants)| {
                let rows = &x.values[lo * MR * k..(hi * MR).min(m) * k];
                // SAFETY: the caller's contract; `rows`, `a` and `quants` are
                // the rows of blocks `lo..hi` (the last piece ends with the
                // last row).
                unsafe { avx512::quantize_rows(rows, k, quads, layer.input_range, a, quants) }
            });
        }
        Some((p, shape)) => {
            // SAFETY: the caller's contract.
            unsafe { conv_rows(&mut buf, x.values, (p, shape), layer.input_range, [m, k], parts) };
        }
    }

    let (b, col_sums) = match w {
        Weights::Packed(p) => (&p.b[..], &p.col_sums[..]),
        Weights::RowMajor(w) => {
            let (panels, b_panel) = (n.div_ceil(NR), quads * 2);
            reuse(&mut buf.b, panels * b_panel, Line([0; 64]));
            reuse(&mut buf.col_sums, panels * NR, 0);
            let parts = split(k * n);
            let items = split_rows(panels, parts).zip(pieces(&mut buf.b, b_panel, panels, parts));
            let items: Vec<_> = items.zip(pieces(&mut buf.col_sums, NR, panels, parts)).collect();
            each_in_parallel(items, |(((lo, hi), b), col_sums)| {
                // SAFETY: as above; panels `lo..hi`.
                unsafe { avx512::pack_panels(w, [k, n], lo..hi, quads, b, col_sums) }
            });
            (&buf.b[..], &buf.col_sums[..])
        }
    };

    let gather = match x.patches {
        Some(_) if !buf.steps.is_empty() => Some(Gather { levels: &buf.padded, rows: &buf.origins, steps: &buf.steps }),
        _ => None,
    };
    let job = Job {
        a: &buf.a,
        gather,
        quants: &buf.quants,
        b,
        col_sums,
        w_scale,
        post,
        dst: super::conv_direct::SendPtr(dst.as_mut_ptr()),
        m,
        n,
        quads,
    };
    // SAFETY: the caller's contract; `job` was packed above.
    unsafe { grid(&job, threads) };
    keep(&mut buf.a);
    keep(&mut buf.padded);
    keep(&mut buf.quants);
    keep(&mut buf.b);
    keep(&mut buf.col_sums);
    BUFFERS.set(buf);
}

/// Runs the grid of row blocks × column panels of `job`, split into tasks
/// for `threads` workers.
///
/// # Safety
/// The CPU has AVX-512 F, BW, VL and VNNI; `job` is packed and its `dst`
/// addresses `m × n` elements no one else touches meanwhile.
#[cfg(target_arch = "x86_64")]
unsafe fn grid(job: &Job, threads: usize) {
    let (row_blocks, panels) = (job.m.div_ceil(MR), job.n.div_ceil(NR));
    crate::backend::cpu::threads::output_grid(row_blocks, panels, threads, |runs| {
        // SAFETY: each worker's blocks belong to it only.
        unsafe { avx512::run(job, runs) }
    });
}

/// A quantized convolution's rows: each image of `x` (NHWC, `shape`)
/// quantized as one row, its levels laid out as the patches `p` (rows
/// `quads` `u32`s apart in `buf.a`, the image's zero point in the padding),
/// and each row's parameters (its image's) in `buf.quants`.
///
/// # Safety
/// AVX-512 F, BW, VL, VNNI; `x` holds the `shape` input; `buf.a` and
/// `buf.quants` are sized for the `m` rows of `k`.
#[cfg(target_arch = "x86_64")]
unsafe fn conv_rows(
    buf: &mut Buffers,
    x: &[f32],
    (p, shape): (Patches, [usize; 4]),
    input_range: Option<[f32; 2]>,
    [m, k]: [usize; 2],
    parts: usize,
) {
    let (images, image) = (shape[0], shape[1] * shape[2] * shape[3]);
    let image_quads = image.div_ceil(4);
    reuse(&mut buf.images, images * image_quads, 0);
    reuse(&mut buf.image_quants, images, RowQuant::from_range(0.0, 0.0, false));
    let items = split_rows(images, parts).zip(pieces(&mut buf.images, image_quads, images, parts));
    let items: Vec<_> = items.zip(pieces(&mut buf.image_quants, 1, images, parts)).collect();
    each_in_parallel(items, |(((lo, hi), levels), quants)| {
        // SAFETY: the caller's contract; images `lo..hi`.
        unsafe { avx512::quantize_rows(&x[lo * image..hi * image], image, image_quads, input_range, levels, quants) }
    });
    // The levels of each image side by side (an image's row in `images` is
    // padded to whole `u32`s).
    reuse(&mut buf.image_levels, images * image, 0);
    // SAFETY: any `u32`s are bytes (`4 ·` as many).
    let bytes = unsafe { std::slice::from_raw_parts(buf.images.as_ptr().cast::<u8>(), 4 * buf.images.len()) };
    for (b, levels) in buf.image_levels.chunks_exact_mut(image.max(1)).enumerate() {
        levels.copy_from_slice(&bytes[4 * b * image_quads..][..image]);
    }
    let per_image = m / images.max(1);
    for (r, q) in buf.quants.iter_mut().enumerate() {
        *q = buf.image_quants[r / per_image.max(1)];
    }
    buf.steps.clear();
    if shape[3] % 4 == 0 {
        return gather_rows(buf, (p, shape), m);
    }
    let quads = k.div_ceil(4);
    let blocks = m.div_ceil(MR);
    let (image_levels, image_quants) = (&buf.image_levels[..], &buf.image_quants[..]);
    let items: Vec<_> = split_rows(blocks, parts).zip(pieces(&mut buf.a, quads * MR, blocks, parts)).collect();
    each_in_parallel(items, |((lo, hi), a)| {
        // SAFETY: `a` is `u32`s, which any bytes make.
        let bytes = unsafe { std::slice::from_raw_parts_mut(a.as_mut_ptr().cast::<u8>(), 4 * a.len()) };
        let zero = |b: usize| image_quants[b].zero as u8;
        patch_rows(image_levels, shape, &p, lo * MR..(hi * MR).min(m), (bytes, 4 * quads), zero);
    });
}

/// `Gather` for a convolution whose input channels are a multiple of 4:
/// the level images of `buf.image_levels` padded with their zero points
/// into `buf.padded`, each row's window origin into `buf.origins` and each
/// step's offset into `buf.steps` (`k / 4` of them, in the taps' order
/// `i`, `j`, `c`).
#[cfg(target_arch = "x86_64")]
fn gather_rows(buf: &mut Buffers, (p, shape): (Patches, [usize; 4]), m: usize) {
    let [n, h, w, c] = shape;
    let words = c / 4;
    let (hp, wp) = (h + p.padding[0] + p.padding[1], w + p.padding[2] + p.padding[3]);
    reuse(&mut buf.padded, n * hp * wp * words, 0);
    for b in 0..n {
        let zero = u32::from_ne_bytes([buf.image_quants[b].zero as u8; 4]);
        let image = &mut buf.padded[b * hp * wp * words..(b + 1) * hp * wp * words];
        image.fill(zero);
        for y in 0..h {
            let from = &buf.image_levels[(b * h + y) * w * c..(b * h + y + 1) * w * c];
            let to = &mut image[((y + p.padding[0]) * wp + p.padding[2]) * words..][..w * words];
            for (to, four) in to.iter_mut().zip(from.chunks_exact(4)) {
                *to = u32::from_ne_bytes([four[0], four[1], four[2], four[3]]);
            }
        }
    }
    let Some([_, oh, ow, _]) = p.rows_shape(&shape) else { return };
    buf.origins.clear();
    buf.origins.extend((0..m).map(|r| {
        let (b, y, x) = (r / (oh * ow), r / ow % oh, r % ow);
        ((b * hp + y * p.stride[0]) * wp + x * p.stride[1]) * words
    }));
    for i in 0..p.kernel[0] {
        for j in 0..p.kernel[1] {
            let tap = (i * p.dilation[0] * wp + j * p.dilation[1]) * words;
            buf.steps.extend((0..words).map(|q| tap + q));
        }
    }
}

/// `v` with `len` elements: the old ones where it had them (packing writes
/// every element the kernel reads: clearing a megabyte first would cost
/// about as much as packing it), else `fill`.
#[cfg(target_arch = "x86_64")]
fn reuse<T: Clone>(v: &mut Vec<T>, len: usize, fill: T) {
    v.truncate(len);
    v.resize(len, fill);
}

/// `buf` cut as `split_rows(units, parts)` cuts `units` units of `unit`
/// elements (the last piece ends with `buf`, so its last unit may be
/// short).
fn pieces<T>(mut buf: &mut [T], unit: usize, units: usize, parts: usize) -> Vec<&mut [T]> {
    split_rows(units, parts)
        .map(|(lo, hi)| {
            let len = ((hi - lo) * unit).min(buf.len());
            let (piece, rest) = std::mem::take(&mut buf).split_at_mut(len);
            buf = rest;
            piece
        })
        .collect()
}

/// Runs `run` on each item, at once on the current pool when there are
/// several (as `threads::in_ranges`, but each with its own mutable piece).
fn each_in_parallel<I: Send>(items: Vec<I>, run: impl Fn(I) + Sync) {
    if items.len() <= 1 {
        return items.into_iter().for_each(run);
    }
    rayon::scope(|s| {
        for item in items {
            let run = &run;
            s.spawn(move |_| run(item));
        }
    });
}

#[cfg(test)]
mod tests;

/// The name of the kernel `quant_gemm` runs on here, for plans and
/// profiles: `vnni` or `portable`.
pub(in crate::backend::cpu) fn tier_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if runs_vnni(isa::active()) {
        return "vnni";
    }
    "portable"
}
