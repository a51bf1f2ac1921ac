//! The AMX tier: a micro-kernel of 32 rows by 32 columns held in four f32
//! tiles (tmm0-3), each step 32 of `k`: two 16-row `lhs` tiles (tmm4-5)
//! and two 16-column `rhs` tiles (tmm6-7) loaded from the packed operands,
//! four `tdpbf16ps`.
//!
//! Contract: as the module `bf16_gemm` says for `Amx`. Each worker loads
//! the tile configuration (palette 1, eight tiles of 16 rows × 64 bytes)
//! before its first tile instruction and releases the tiles after its
//! last. `k` is taken in blocks of `KC` steps (the `lhs` block's 16 KiB
//! stay in L1 across the panels, which stay in L2); the accumulator tiles
//! go through `dst` between blocks, exactly. A micro-tile that `dst` holds
//! whole is loaded from and stored to it directly; an edge one goes
//! through a 32 × 32 scratch of which only the valid part is copied.
//! The tile instructions are written with `asm!` (their intrinsics are not
//! stable); the module `isa` has asked Linux for the tile data before any
//! of them runs.
//!
//! Example: a 1024³ product runs 32 row blocks × 32 panels × 4 blocks of
//! `k` of this micro-kernel, each 8 steps of 4 `tdpbf16ps`.

use super::pack::Layout;
use super::{Job, Kernel, NR};
use std::arch::asm;
use std::ops::Range;

/// Rows per micro-tile (two tiles).
const MR: usize = 32;
/// Steps of 32 `k` (16 pairs) per cache block.
const KC: usize = 8;
/// Bytes of one step of a packed block: two tiles of 16 × 64 bytes.
const STEP_BYTES: usize = 2048;

/// The AMX tier.
pub(super) struct KernelAmx;

impl Kernel for KernelAmx {
    const MR: usize = MR;
    const LHS: Layout = Layout::Tiles { lhs: true };
    const RHS: Layout = Layout::Tiles { lhs: false };
    const PAIR_ALIGN: usize = 16;
    const ROUNDS: bool = false;
    const READS_ROWS: bool = false;

    unsafe fn run(job: &Job, runs: &[(Range<usize>, Range<usize>)]) {
        /// The 64-byte tile configuration: palette 1, tiles 0-7 of 16 rows
        /// of 64 bytes.
        #[repr(C, align(64))]
        struct Config {
            palette: u8,
            start_row: u8,
            reserved: [u8; 14],
            colsb: [u16; 16],
            rows: [u8; 16],
        }
        let mut config = Config { palette: 1, start_row: 0, reserved: [0; 14], colsb: [0; 16], rows: [0; 16] };
        config.colsb[..8].fill(64);
        config.rows[..8].fill(16);
        // SAFETY: `config` is a valid palette-1 configuration of 64
        // aligned bytes; the CPU has AMX and the OS granted the tile data
        // (the caller's contract, checked by module `isa`).
        unsafe { asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly, preserves_flags)) };
        // SAFETY: the tiles are configured; the caller's contract.
        unsafe { blocks(job, runs) };
        // SAFETY: releases this thread's tile state (configured above).
        unsafe { asm!("tilerelease", options(nostack, nomem, preserves_flags)) };
    }
}

/// The product's micro-tiles for `runs`, blocked over `k`.
///
/// # Safety
/// The tiles are configured as in `Kernel::run`; as for `Kernel::run`.
unsafe fn blocks(job: &Job, runs: &[(Range<usize>, Range<usize>)]) {
    let steps = job.pairs / 16;
    let mut scratch = Scratch([0.0; MR * NR]);
    for (rows, panels) in runs {
        for s0 in (0..steps).step_by(KC) {
            let count = KC.min(steps - s0);
            let load = job.accumulate || s0 > 0;
            for ib in rows.clone() {
                let (i, r) = (ib * MR, MR.min(job.m - ib * MR));
                // SAFETY: block `ib` of the packed `lhs`, from step `s0`.
                let a = unsafe { job.a.as_ptr().cast::<u8>().add((ib * steps + s0) * STEP_BYTES) };
                for jp in panels.clone() {
                    let (j, c) = (jp * NR, NR.min(job.n - jp * NR));
                    // SAFETY: panel `jp` of the packed `rhs`, from `s0`.
                    let b = unsafe { job.b.as_ptr().cast::<u8>().add((jp * steps + s0) * STEP_BYTES) };
                    // SAFETY: rows i..i + r, columns j..j + c of `dst` are
                    // this worker's.
                    let out = unsafe { job.dst.0.add(i * job.n + j) };
                    if r == MR && c == NR {
                        // SAFETY: `dst` holds the whole 32 × 32 micro-tile
                        // with row stride `n`; the blocks hold `count`
                        // steps.
                        unsafe { tile(a, b, count, out, job.n * 4, load) };
                        continue;
                    }
                    let edge = &mut scratch.0;
                    if load {
                        for row in 0..r {
                            // SAFETY: row `row` of the micro-tile, `c` valid
                            // columns.
                            let from = unsafe { std::slice::from_raw_parts(out.add(row * job.n), c) };
                            edge[row * NR..row * NR + c].copy_from_slice(from);
                        }
                    }
                    // SAFETY: the scratch is 32 × 32 with row stride 128
                    // bytes; as above.
                    unsafe { tile(a, b, count, edge.as_mut_ptr(), NR * 4, load) };
                    for row in 0..r {
                        // SAFETY: as above.
                        let to = unsafe { std::slice::from_raw_parts_mut(out.add(row * job.n), c) };
                        to.copy_from_slice(&edge[row * NR..row * NR + c]);
                    }
                }
            }
        }
    }
}

/// A 32 × 32 f32 micro-tile, aligned for the tile loads and stores.
#[repr(C, align(64))]
struct Scratch([f32; MR * NR]);

/// The micro-kernel: the 32 × 32 f32 block at `c` (row stride `ldc`
/// bytes) = (`load`: itself +) the product of `steps` steps of a packed
/// 32-row `lhs` block `a` and a packed 32-column `rhs` panel `b`.
///
/// # Safety
/// The tiles are configured as in `Kernel::run`; `a` and `b` hold `steps`
/// steps of `STEP_BYTES`; `c` addresses 32 rows of 32 f32 at stride `ldc`.
#[inline(always)]
unsafe fn tile(a: *const u8, b: *const u8, steps: usize, c: *mut f32, ldc: usize, load: bool) {
    let c_low = c.wrapping_add(16 * ldc / 4);
    if load {
        // SAFETY: four 16 × 16 f32 tiles of `c` (the caller's contract).
        unsafe {
            asm!(
                "tileloadd tmm0, [{c} + {ldc}*1]",
                "tileloadd tmm1, [{c} + {ldc}*1 + 64]",
                "tileloadd tmm2, [{d} + {ldc}*1]",
                "tileloadd tmm3, [{d} + {ldc}*1 + 64]",
                c = in(reg) c,
                d = in(reg) c_low,
                ldc = in(reg) ldc,
                options(nostack, readonly, preserves_flags),
            )
        };
    } else {
        // SAFETY: zeroes the accumulator tiles.
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem, preserves_flags)
            )
        };
    }
    // SAFETY: `steps ≥ 1` steps of two `lhs` and two `rhs` tiles of 1 KiB
    // each (row stride 64 bytes) at `a` and `b` (the caller's contract).
    unsafe {
        asm!(
            "2:",
            "tileloadd tmm4, [{a} + {s}*1]",
            "tileloadd tmm6, [{b} + {s}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b} + {s}*1 + 1024]",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{a} + {s}*1 + 1024]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a}, 2048",
            "add {b}, 2048",
            "dec {n}",
            "jnz 2b",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            n = inout(reg) steps => _,
            s = in(reg) 64usize,
            options(nostack, readonly),
        )
    };
    // SAFETY: the four tiles back to `c` (the caller's contract).
    unsafe {
        asm!(
            "tilestored [{c} + {ldc}*1], tmm0",
            "tilestored [{c} + {ldc}*1 + 64], tmm1",
            "tilestored [{d} + {ldc}*1], tmm2",
            "tilestored [{d} + {ldc}*1 + 64], tmm3",
            c = in(reg) c,
            d = in(reg) c_low,
            ldc = in(reg) ldc,
            options(nostack, preserves_flags),
        )
    };
}
