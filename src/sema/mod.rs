//! Static checks on the AST before tracing. `resolve` binds every name or
//! reports it with a did-you-mean, in all code, including functions that are
//! never called. Shape and dtype checking happen while tracing (`trace`),
//! where every call is specialized to its argument shapes.

mod resolve;

pub use resolve::{resolve, resolve_in, Known};
