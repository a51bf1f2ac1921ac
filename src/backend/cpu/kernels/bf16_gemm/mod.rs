//! bf16 matrix products summed in f32 — the CPU backend's low-precision
//! GEMM — on the instruction-set tier module `isa` picks: portable code,
//! AVX-512 `vdpbf16ps`, or AMX `tdpbf16ps` tiles.
//!
//! Contract: `dst = lhs · rhs`, or `dst += lhs · rhs` when `accumulate`,
//! for an `m × k` `lhs` and a `k × n` `rhs` of bf16 bit patterns addressed
//! by (row, column) element strides (a transposed operand costs nothing);
//! `dst` is row-major `m × n` f32. Every product of two bf16 values is
//! exact in f32; what differs between tiers is how the products are summed:
//!
//! - `Portable`: both operands widened to f32 (`bits << 16`, exact) and
//!   multiplied by `gemm::sgemm_into`, in the `gemm` crate's order; with
//!   `accumulate` it adds the product to `dst` (one more rounding).
//! - `Avx512`: each output element is one `f32` accumulator, starting from
//!   `+0` (from `dst`'s value with `accumulate`), to which each pair
//!   `p = 0, 1, …` of `k` is added by `vdpbf16ps`: per the SDM,
//!   `acc = (acc + a[2p+1]·b[2p+1]) + a[2p]·b[2p]`, each addition rounded
//!   to nearest even. An odd `k` gets a zero last element.
//! - `Amx`: likewise one accumulator per element, from `+0` or `dst`, with
//!   `tdpbf16ps` adding the pairs in order (per the SDM's pseudocode the
//!   even product first, then the odd one; nothing here relies on it); `k`
//!   is padded with zeros to a multiple of 32.
//!
//! The accumulator of the two hardware tiers goes through `dst` between
//! blocks of `k` (stored and reloaded exactly), so the sum per element does
//! not depend on the blocking. Work is split only over blocks of output
//! rows and columns, never over `k`: on a given tier the result is
//! bit-identical at any thread count. NaN and infinities propagate as in
//! f32 arithmetic. `vdpbf16ps` and `tdpbf16ps` treat denormal inputs as
//! zero and flush denormal results to zero (whatever MXCSR says), and they
//! round between the two products of a pair, so the hardware tiers match
//! the portable f32 reference only within a tolerance (the tests allow
//! `2^-20 · (Σ|a·b| + |dst|)`), not bit for bit. The hardware tiers pack
//! the operands first (module `pack`), into buffers each thread keeps for
//! its next product (up to 16 MiB each) — except a row-major `lhs` of even
//! `k` on the `vdpbf16ps` tier, whose pairs already lie as its micro-kernel
//! broadcasts them: it reads that `lhs` in place (the same bits as packed;
//! packing a 256x784 `lhs` took 20 µs of a 240 µs product).
//!
//! With `Store::round` every result is rounded to the nearest bf16 value
//! (still stored as `f32`): a bf16 product's value, which the `vdpbf16ps`
//! tier rounds in its last store of each tile and the others in a pass
//! after.
//!
//! Example: `bf16_gemm(&mut y, (x, 784, 1), (w, 1, 784), [64, 784, 256],
//! 1, Store::default())` is `y = x @ wᵀ` for row-major bf16 `x: [64, 784]` and `w:
//! [256, 784]`.

mod pack;
#[cfg(target_arch = "x86_64")]
mod pack_avx512;

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx512;

use super::isa::{self, Isa};
use super::SendPtr;

/// A bf16 matrix operand: its first element (bf16 bit patterns) and its
/// (row, column) element strides.
pub(in crate::backend::cpu) type Operand = (*const u16, usize, usize);

/// `dst = lhs · rhs`, or `dst += lhs · rhs` when `store.accumulate`, each
/// result rounded to bf16 when `store.round`, summed in f32 on the tier
/// `isa::active()` (see the module docs); `mkn` is `[m, k, n]`, and
/// `threads` of the current rayon pool share the work (1: the calling
/// thread only).
///
/// # Safety
/// `lhs` must address an `m × k` and `rhs` a `k × n` matrix through their
/// strides, and `dst` must hold at least `m × n` elements.
pub(in crate::backend::cpu) unsafe fn bf16_gemm(
    dst: &mut [f32],
    lhs: Operand,
    rhs: Operand,
    mkn: [usize; 3],
    threads: usize,
    store: Store,
) {
    // SAFETY: the caller's contract; `active()` is an available tier.
    unsafe { bf16_gemm_on(isa::active(), dst, lhs, rhs, mkn, threads, store) }
}

/// How a product meets `dst`.
#[derive(Clone, Copy, Debug, Default)]
pub(in crate::backend::cpu) struct Store {
    /// Add to `dst` instead of overwriting it.
    pub accumulate: bool,
    /// Round each result to the nearest bf16 value.
    pub round: bool,
}

/// `bf16_gemm` on the tier `isa` (tests and benchmarks compare tiers).
///
/// # Panics
/// If this machine cannot run `isa`.
///
/// # Safety
/// As for `bf16_gemm`.
pub(in crate::backend::cpu) unsafe fn bf16_gemm_on(
    isa: Isa,
    dst: &mut [f32],
    lhs: Operand,
    rhs: Operand,
    mkn: [usize; 3],
    threads: usize,
    store: Store,
) {
    if let Some(why) = isa::Features::detected().lacks(isa) {
        panic!("bf16_gemm on {}: {why}", isa.name());
    }
    let [m, k, n] = mkn;
    assert!(dst.len() >= m * n, "bf16_gemm: {} elements for a {m}x{n} product", dst.len());
    if m == 0 || n == 0 {
        return;
    }
    let threads = crate::backend::cpu::threads::for_product(mkn, threads);
    let rounded_in_store = match (isa, k) {
        (_, 0) => {
            if !store.accumulate {
                dst[..m * n].fill(0.0);
            }
            false
        }
        // SAFETY: the CPU has the tier's instructions (checked above); the
        // caller's contract.
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, _) => unsafe { tiled::<avx512::Kernel512>(dst, lhs, rhs, mkn, threads, store) },
        // SAFETY: as above (the tile data was granted by `isa`).
        #[cfg(target_arch = "x86_64")]
        (Isa::Amx, _) => unsafe { tiled::<amx::KernelAmx>(dst, lhs, rhs, mkn, threads, store) },
        // SAFETY: the caller's contract.
        (Isa::Portable, _) => unsafe { portable(dst, lhs, rhs, mkn, threads, store.accumulate) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("only the portable tier exists off x86_64"),
    };
    if store.round && !rounded_in_store {
        super::convert::round_in_place(super::convert::Half::Bf16, &mut dst[..m * n]);
    }
}

/// The portable tier: both operands widened to f32 (exact) and multiplied
/// by `gemm::sgemm_into`; `false` (the results are not rounded).
///
/// # Safety
/// As for `bf16_gemm`.
unsafe fn portable(
    dst: &mut [f32],
    lhs: Operand,
    rhs: Operand,
    mkn: [usize; 3],
    threads: usize,
    accumulate: bool,
) -> bool {
    let [m, k, n] = mkn;
    // SAFETY (both): the caller's contract.
    let a = unsafe { widen(lhs, m, k) };
    let b = unsafe { widen(rhs, k, n) };
    // SAFETY: `a` is m × k and `b` k × n, row-major.
    unsafe { super::gemm::sgemm_into(dst, (a.as_ptr(), k, 1), (b.as_ptr(), n, 1), mkn, threads, accumulate) };
    false
}

/// The `rows × cols` matrix `x` as row-major f32.
///
/// # Safety
/// `x` must address a `rows × cols` matrix through its strides.
unsafe fn widen((x, rs, cs): Operand, rows: usize, cols: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        // SAFETY: element (i, j) of the matrix, by the caller's contract.
        out.extend((0..cols).map(|j| f32::from_bits(u32::from(unsafe { *x.add(i * rs + j * cs) }) << 16)));
    }
    out
}

/// A hardware tier's blocking and micro-kernels, run by `tiled`.
trait Kernel {
    /// Rows of `lhs` per packed block (the micro-tile's height).
    const MR: usize;
    /// How `lhs` and `rhs` are packed.
    const LHS: pack::Layout;
    const RHS: pack::Layout;
    /// `k` is padded with zeros to a multiple of this many pairs.
    const PAIR_ALIGN: usize;
    /// Whether `run` rounds the results to bf16 when `Job::round` says so.
    const ROUNDS: bool;
    /// Whether it reads a row-major `lhs` of even `k` in place
    /// (`Job::lhs_rows`) instead of its packed blocks.
    const READS_ROWS: bool;

    /// Runs the product for each `(row blocks, column panels)` of `runs`
    /// on this thread, over the whole of `k`.
    ///
    /// # Safety
    /// The CPU has the tier's instructions; `job` describes valid packed
    /// operands and output, and no other thread writes these blocks.
    unsafe fn run(job: &Job, runs: &[(std::ops::Range<usize>, std::ops::Range<usize>)]);
}

/// Columns per packed `rhs` panel (the micro-tile's width) for both
/// hardware tiers.
const NR: usize = 32;

/// One product, packed, as the micro-kernels see it.
struct Job {
    /// Packed `lhs`: `ceil(m / MR)` blocks of `pairs · MR` pairs; empty
    /// when the kernel reads `lhs` where it is (`lhs_rows`).
    a: Vec<u32>,
    /// A row-major `lhs` of even `k` that a `Kernel::READS_ROWS` kernel
    /// reads in place: its first element and its row stride (elements).
    /// Its pairs already lie as the kernel broadcasts them (two bf16 of a
    /// row in one 32-bit word), so packing it would only copy it.
    lhs_rows: Option<(SendPtr<u16>, usize)>,
    /// Packed `rhs`: `ceil(n / NR)` panels of `pairs · NR` pairs.
    b: Vec<u32>,
    /// `dst`'s first element (row-major `m × n`).
    dst: SendPtr<f32>,
    m: usize,
    n: usize,
    /// Pairs of `k` in the packed operands (padded).
    pairs: usize,
    /// Whether the accumulators start from `dst`.
    accumulate: bool,
    /// Whether the last store of each element rounds it to bf16.
    round: bool,
}

/// A hardware tier's product: packs both operands, then runs the grid;
/// whether it rounded the results (`K::ROUNDS`).
///
/// # Safety
/// The CPU has `K`'s instructions; as for `bf16_gemm` (with `k > 0`).
unsafe fn tiled<K: Kernel>(
    dst: &mut [f32],
    lhs: Operand,
    rhs: Operand,
    [m, k, n]: [usize; 3],
    threads: usize,
    store: Store,
) -> bool {
    let pairs = k.div_ceil(2).next_multiple_of(K::PAIR_ALIGN);
    // The packing buffers of this thread's last product, reused: fresh
    // pages cost a fault each, about as long as packing them.
    thread_local! {
        static BUFFERS: std::cell::Cell<(Vec<u32>, Vec<u32>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
    }
    let (mut a, mut b) = BUFFERS.take();
    let (first, row_stride, column_stride) = lhs;
    let lhs_rows = (K::READS_ROWS && column_stride == 1 && k % 2 == 0 && pairs == k / 2)
        .then_some((SendPtr(first.cast_mut()), row_stride));
    if lhs_rows.is_none() {
        // SAFETY: the caller's contract.
        unsafe { pack::pack_lhs(&mut a, lhs, [m, k], pairs, K::LHS, threads) };
    }
    // SAFETY: the caller's contract.
    unsafe { pack::pack_rhs(&mut b, rhs, [k, n], pairs, K::RHS, threads) };
    let (accumulate, round) = (store.accumulate, store.round && K::ROUNDS);
    let job = Job { a, b, lhs_rows, dst: SendPtr(dst.as_mut_ptr()), m, n, pairs, accumulate, round };
    // SAFETY: the caller's contract; `K` describes the packing.
    unsafe { grid::<K>(&job, threads) };
    // Keep at most 16 MiB each for the next product.
    let keep = |v: Vec<u32>| if v.capacity() <= 1 << 22 { v } else { Vec::new() };
    BUFFERS.set((keep(job.a), keep(job.b)));
    round
}

/// Runs the grid of row blocks × column panels of `job`, split into tasks
/// for `threads` workers.
///
/// # Safety
/// The CPU has `K`'s instructions; `job` was packed for `K`.
unsafe fn grid<K: Kernel>(job: &Job, threads: usize) {
    let (m, n) = (job.m, job.n);
    let (row_blocks, panels) = (m.div_ceil(K::MR), n.div_ceil(NR));
    crate::backend::cpu::threads::output_grid(row_blocks, panels, threads, |runs| {
        // SAFETY: each worker's blocks belong to it only.
        unsafe { K::run(job, runs) }
    });
}

#[cfg(test)]
mod tests;
