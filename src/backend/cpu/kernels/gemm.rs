//! Single-precision matrix products through the `gemm` crate, for matmul
//! and the convolutions lowered to it.
//!
//! Contract: `dst = lhs · rhs` for an `m × k` `lhs` and a `k × n` `rhs`
//! addressed by element strides (row stride, column stride), so a
//! transposed operand costs nothing; `dst` is row-major `m × n` and is
//! overwritten. The crate splits work over blocks of the output, never
//! over `k`, so every output element is summed in the same order whatever
//! the parallelism: results are bit-identical at any thread count.
//!
//! Example: `sgemm(&mut y, (x, 784, 1), (w, 256, 1), 64, 784, 256, 1)` is
//! `y = x @ w` for row-major `x: [64, 784]`, `w: [784, 256]`.

/// A matrix operand: its first element and its (row, column) strides.
pub(in crate::backend::cpu) type Operand = (*const f32, usize, usize);

/// `dst = lhs · rhs` (see the module docs).
///
/// # Safety
/// `lhs` must address an `m × k` and `rhs` a `k × n` matrix through their
/// strides, and `dst` must hold at least `m × n` elements.
/// `threads` of the current pool share the work (1: the calling thread).
pub(in crate::backend::cpu) unsafe fn sgemm(
    dst: &mut [f32],
    lhs: Operand,
    rhs: Operand,
    m: usize,
    k: usize,
    n: usize,
    threads: usize,
) {
    // SAFETY: the caller's contract.
    unsafe { sgemm_into(dst, lhs, rhs, [m, k, n], threads, false) }
}

/// `dst = lhs · rhs`, or `dst += lhs · rhs` when `accumulate` (a sum over
/// blocks of `k`, as a convolution's weight gradient takes it); `mkn` is
/// `[m, k, n]`.
///
/// # Safety
/// As for `sgemm`.
pub(in crate::backend::cpu) unsafe fn sgemm_into(
    dst: &mut [f32],
    lhs: Operand,
    rhs: Operand,
    mkn: [usize; 3],
    threads: usize,
    accumulate: bool,
) {
    let [m, k, n] = mkn;
    debug_assert!(dst.len() >= m * n);
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    let (a, a_rs, a_cs) = lhs;
    let (b, b_rs, b_cs) = rhs;
    // SAFETY: the caller's contract; the crate reads `a`/`b` only at the
    // strided positions of the m × k and k × n matrices and writes `dst`'s
    // m × n row-major elements.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a,
            a_cs as isize,
            a_rs as isize,
            b,
            b_cs as isize,
            b_rs as isize,
            // dst = alpha · dst + beta · lhs · rhs (alpha is read only with
            // `accumulate`).
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            // Always the rayon mode, even for one thread: the crate picks
            // its blocking by mode, so one mode keeps every thread count
            // on the same blocks (and the same sums).
            gemm::Parallelism::Rayon(threads.max(1)),
        )
    }
}
