//! The runtime of ahead-of-time libraries: the C entry points (`tfc_rt_*`)
//! that the code `tfc build -o` writes calls for the steps it does not
//! compile itself — matrix products, convolutions, reductions — and the
//! same native kernels the in-process backend runs, so a library computes
//! the in-process call's bits.
//!
//! Contract: each entry point runs one step on the calling thread with the
//! operands the library's code passes (addresses in the caller's arena, the
//! library's constant data, or the caller's tensors, all of the sizes the
//! step was planned for); none allocates memory or keeps state. They are
//! exported under these names from `libtfc.a` (the crate built as a static
//! library), which a C program links.
//!
//! Example: a library's `y = x @ w` with `x: f32[1, 784]`, `w: f32[784, 256]`
//! is `tfc_rt_sgemm(y, x, 784, 1, w, 256, 1, 784, 256)`.

use crate::backend::cpu::kernels::conv::{Conv, PostOps, SendPtr, CONV_WORDS};
use crate::backend::cpu::kernels::ordered_gemm::ordered_sgemm;
use crate::ir::ReduceOp;

/// The reductions `tfc_rt_reduce_f32` takes, by their number.
pub(in crate::backend::cpu) const REDUCE_OPS: [ReduceOp; 5] =
    [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

/// `dst = a · b` (module `ordered_gemm`) for row-major `dst: [m, n]`, `a`
/// with row and column strides `a_rs`, `a_cs`, and `b` with row stride
/// `b_rs` (its columns contiguous).
///
/// # Safety
/// The operands hold the matrices their strides address; `dst` `m·n` floats.
#[export_name = "tfc_rt_sgemm"]
pub unsafe extern "C" fn sgemm(
    dst: *mut f32,
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b: *const f32,
    b_rs: usize,
    m: usize,
    k: usize,
    n: usize,
) {
    // SAFETY: the caller's contract.
    unsafe { ordered_sgemm(dst, (a, a_rs, a_cs), (b, b_rs), [m, k, n], 0..m) }
}

/// Reduces `src` of `shape` (`rank` dims) over the dims whose bit is set in
/// `reduced` with reduction number `op` of `REDUCE_OPS` into `dst` (module
/// `kernels::reduce`); returns 0, or 1 for an operation or rank (at most 64)
/// it does not know.
///
/// # Safety
/// `shape` holds `rank` sizes, `src` their product of floats, `dst` the
/// product of the kept sizes.
#[export_name = "tfc_rt_reduce_f32"]
pub unsafe extern "C" fn reduce_f32(
    op: u32,
    src: *const f32,
    dst: *mut f32,
    shape: *const usize,
    rank: usize,
    reduced: u64,
) -> i32 {
    let Some(&op) = REDUCE_OPS.get(op as usize) else { return 1 };
    if rank > 64 {
        return 1;
    }
    // SAFETY: the caller's contract.
    let shape = unsafe { std::slice::from_raw_parts(shape, rank) };
    let mut flags = [false; 64];
    for (d, flag) in flags[..rank].iter_mut().enumerate() {
        *flag = reduced >> d & 1 == 1;
    }
    let (n, kept): (usize, usize) =
        (shape.iter().product(), shape.iter().enumerate().filter(|&(d, _)| !flags[d]).map(|(_, &s)| s).product());
    // SAFETY: the caller's contract.
    let (x, out) = unsafe { (std::slice::from_raw_parts(src, n), std::slice::from_raw_parts_mut(dst, kept)) };
    match crate::backend::cpu::kernels::reduce::reduce(op, x, shape, &flags[..rank], out) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// `batch` transposes of `rows × cols` matrices of four-byte elements
/// from `src` to `dst` (module `kernels::transpose`).
///
/// # Safety
/// Both hold `batch · rows · cols` elements and do not overlap.
#[export_name = "tfc_rt_transpose32"]
pub unsafe extern "C" fn transpose32(src: *const u32, dst: *mut u32, batch: usize, rows: usize, cols: usize) {
    let n = rows * cols;
    // SAFETY: the caller's contract.
    let (from, to) =
        unsafe { (std::slice::from_raw_parts(src, batch * n), std::slice::from_raw_parts_mut(dst, batch * n)) };
    if n > 0 {
        for (f, t) in from.chunks_exact(n).zip(to.chunks_exact_mut(n)) {
            crate::backend::cpu::kernels::transpose::transpose(f, t, rows, cols);
        }
    }
}

/// The convolution `geometry` describes (`Conv::words`) of `x` and `w`
/// into `dst`, with `cols` as its scratch (`Conv::cols_len` floats), then
/// its epilogue: `bias` (one per output channel, or null), a ReLU when
/// `relu` is 1, and when `pooled` is not null the 2x2 max pool of the
/// result written there too (`pool_only`: the result itself is not
/// needed). Returns 0, or 1 for a geometry it cannot run, or one the
/// direct kernels cannot run on this CPU (no AVX-512): `tfc build` wrote
/// the library for the direct kernels, and another way would compute
/// other bits (and allocate).
///
/// # Safety
/// The pointers hold what the geometry says; `dst` and `pooled` are
/// written only.
#[export_name = "tfc_rt_conv2d"]
pub unsafe extern "C" fn conv2d(
    geometry: *const usize,
    x: *const f32,
    w: *const f32,
    dst: *mut f32,
    cols: *mut f32,
    bias: *const f32,
    relu: u32,
    pooled: *mut f32,
    pool_only: u32,
) -> i32 {
    // SAFETY: the caller's contract.
    let words: &[usize; CONV_WORDS] = unsafe { &*geometry.cast() };
    let Some(conv) = Conv::from_words(words).filter(Conv::is_direct) else { return 1 };
    let (_, _, ny) = conv.sizes();
    // SAFETY: the caller's contract.
    let (out, cols, bias) = unsafe {
        (
            std::slice::from_raw_parts_mut(dst, ny),
            std::slice::from_raw_parts_mut(cols, conv.cols_len()),
            (!bias.is_null()).then(|| std::slice::from_raw_parts(bias, conv.out_channels())),
        )
    };
    let post = PostOps {
        bias,
        relu: relu == 1,
        keep_where_positive: None,
        max_pool: (!pooled.is_null()).then_some(SendPtr(pooled)),
        first_max: None,
        pool_only: pool_only == 1,
        grad_from_maxima: None,
    };
    // SAFETY: the caller's contract; one thread.
    unsafe { conv.run(x, w, out, cols, post, 1) };
    0
}
