//! tfc: a compiler for deep-learning programs written in `.tfl`.
//!
//! Modules are listed in the order data flows through them: source text is
//! parsed (`syntax`), names are resolved (`sema`), the program is traced into
//! the graph IR with every shape and dtype checked (`trace`, `ir`), and the
//! reference interpreter executes it (`backend::interp`). `driver` owns the
//! session (source files, std modules), `repl` the interactive session and
//! `cli` the command line.

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
pub mod trace;
