//! Backends that execute IR programs. `interp` is the reference interpreter:
//! the oracle every other backend and every optimization is compared with;
//! `jit` runs the optimizer's kernels as native code.

pub mod interp;
pub mod jit;

/// Which backend evaluates a program's regions (`tfc run --backend`, whose
/// default is `jit`; a library caller gets the interpreter, the oracle,
/// unless it asks for the JIT).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The reference interpreter, node by node.
    #[default]
    Interp,
    /// Compiled kernels (Cranelift, gemm) over the memory plan's arena.
    Jit,
}
