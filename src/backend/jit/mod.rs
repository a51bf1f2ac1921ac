//! The JIT backend: runs the optimizer's compiled units (fused kernels over
//! one arena, in schedule order) with Cranelift-generated code for
//! elementwise kernels and contraction epilogues, `gemm` for matrix
//! products, and the reference interpreter for every kernel the code
//! generator does not cover yet (so every program runs on it).
//!
//! Contract: results equal the reference interpreter's up to floating-point
//! rounding (matmul summation order, polynomial `exp`/`log`/`tanh`; see
//! `poly`). Execution is deterministic: the same program and inputs give
//! bit-identical results on every run and at any thread count (`schedule`
//! runs independent steps at once, `threads` splits large kernels along
//! independent outputs only). Compiled functions
//! are cached per thread by kernel signature, so a kernel that occurs in
//! several units (or runs) is compiled once.
//!
//! Layout: `spec` (which kernels compile, their loop nest), `poly` (op
//! templates, polynomial math), `codegen` (Cranelift functions), `reduce` (native
//! reductions), `conv` and `pool` (native convolutions and pooling),
//! `transpose` (native matrix transposes), `permute` (transposes of
//! any rank), `adam`
//! (Adam's update as a native AVX-512 loop), `unit`
//! (the executor of one unit), `schedule` (which steps may run at once),
//! `threads` (the worker pool, kernel splits), `clif` (the `--emit clif|asm`
//! listings).
//!
//! Example: `tfc run --backend jit prog.tfl` runs every training step,
//! metric and `map` region of `prog.tfl` through [`JitUnit`].

mod adam;
mod carry;
mod clif;
mod codegen;
mod conv;
mod conv_direct;
mod fold;
mod gemm;
mod permute;
mod poly;
mod pool;
mod reduce;
mod schedule;
mod simd;
pub mod spec;
mod threads;
mod transpose;
mod unit;

pub use clif::{emit_kernels, Listing};
pub use codegen::{Compiler, KernelFn};
pub use unit::{find_unit, JitUnit, StepCounts};

use std::cell::RefCell;

thread_local! {
    static COMPILER: RefCell<Option<Compiler>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's compiler, creating it on first use.
pub fn with_compiler<T>(f: impl FnOnce(&mut Compiler) -> Result<T, String>) -> Result<T, String> {
    COMPILER.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(Compiler::new()?);
        }
        match c.as_mut() {
            Some(compiler) => f(compiler),
            None => Err("the code generator is unavailable".into()),
        }
    })
}
