//! Backends that execute IR programs. `interp` is the reference interpreter:
//! the oracle every other backend and every optimization is compared with.

pub mod interp;
