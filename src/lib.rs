//! tfc: a compiler for deep-learning programs written in `.tfl`.
//!
//! Modules are listed in the order data flows through them, each using only
//! the ones above it (docs/ARCHITECTURE.md has the table; `tests/tidy.rs`
//! enforces it): diagnostics and the small shared pieces first; then source
//! text is parsed (`syntax`) and its names resolved (`sema`); the graph IR
//! (`ir`) and the values and op semantics on it (`tensor`); the tracer
//! builds the IR from the program with every shape and dtype checked
//! (`trace`, with `autodiff` and the embedded `stdlib`); the optimizer
//! plans it (`passes`); backends run its regions (`backend`: the reference
//! interpreter and the CPU backend); `runtime` performs the program's
//! effects; `driver` owns a session (source files, the pipeline); `repl`
//! and `cli` face the user.

pub mod autodiff;
pub mod backend;
pub mod cli;
pub mod diag;
pub mod driver;
pub mod half;
pub mod ir;
pub mod passes;
pub mod repl;
pub mod rng;
pub mod runtime;
pub mod sema;
pub mod stdlib;
pub mod syntax;
pub mod tensor;
pub mod trace;
