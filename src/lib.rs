//! tfc: a compiler for deep-learning programs written in `.tfl`.
//!
//! Modules are listed in layers, in the order data flows through them; each
//! uses only the modules of the layers above it (docs/ARCHITECTURE.md has
//! the table, `tests/tidy.rs` enforces it). First the pieces everything
//! shares (diagnostics, rounding, random numbers, the Ctrl-C flag, the
//! embedded standard library); then the graph IR (`ir`) and the values
//! and op semantics on it (`tensor`), with data files (`io`); source text
//! is parsed (`syntax`) and its names resolved (`sema`); the tracer builds
//! the IR from the program with every shape and dtype checked (`trace`,
//! with `autodiff`); the optimizer plans it (`passes`); backends run its
//! regions (`backend`: the reference interpreter and the CPU backend);
//! `dist` joins the processes of a data-parallel run; `runtime` performs the program's effects; `driver` owns a session
//! (source files, the pipeline); `repl` and `cli` face the user.

pub mod diag;
pub mod half;
pub mod rng;
pub mod interrupt;
pub mod stdlib;
pub mod ir;
pub mod tensor;
pub mod io;
pub mod syntax;
pub mod sema;
pub mod autodiff;
pub mod trace;
pub mod passes;
pub mod backend;
pub mod dist;
pub mod runtime;
pub mod driver;
pub mod repl;
pub mod cli;
