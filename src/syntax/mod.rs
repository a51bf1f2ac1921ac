//! Surface syntax: the pest grammar (`grammar/tfl.pest`) and the conversion
//! of its parse tree into the owned AST. Nothing outside this module sees pest.
//!
//! Contract: `parse(source, file)` returns the `Program` or diagnostics
//! (E0101–E0104) and never panics, whatever the input; `dump(&program)`
//! renders the AST deterministically for snapshot tests.
//!
//! Example:
//! ```
//! let program = tfc::syntax::parse("let y = 1 + 2 * x\n", tfc::diag::FileId(0)).unwrap();
//! assert!(tfc::syntax::dump(&program).contains("(binary + (int 1) (binary * (int 2) (name x)))"));
//! ```

pub mod ast;
mod dump;
mod newlines;
mod parse;
mod scan;

pub use dump::dump;
pub use newlines::{MAX_BRACKET_DEPTH, MAX_CHAIN_LENGTH, MAX_OPERATOR_DEPTH};
pub use parse::parse;
