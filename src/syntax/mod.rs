//! Surface syntax: the pest grammar (`grammar/tfl.pest`) and the conversion
//! of its parse tree into the owned AST. Nothing outside this module sees pest.

pub mod ast;
