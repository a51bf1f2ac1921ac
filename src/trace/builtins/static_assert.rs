//! `static_assert(cond, message)`: a check of a compile-time condition
//! while tracing, for code in the language (a std layer) to reject what it
//! cannot compute with a diagnostic of its own.
//!
//! Contract: `cond` must be a compile-time `bool` (a comparison of shapes,
//! ints, settings; a tensor is E0313); when it is false, tracing stops with
//! E0322 and `message`. Raised inside a function of another file (a std
//! module), the diagnostic points first at the user's call. The value is
//! `()`.
//!
//! Example: `static_assert(shape(x)[0] > 1, "needs more than one row")`.

use crate::diag::{Code, Diagnostic};
use crate::trace::args::BuiltinArgs;
use crate::trace::value::Value;
use crate::trace::{TResult, Tracer};

impl Tracer<'_> {
    pub(crate) fn static_assert(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let message = match a.get(1) {
            Some((Value::Str(s), _)) => s.clone(),
            _ => return Err(a.bad(1, "a message string")),
        };
        match a.get(0) {
            Some((Value::Bool(true), _)) => Ok(Value::Tuple(vec![])),
            Some((Value::Bool(false), s)) => {
                Err(Diagnostic::new(Code::StaticAssert, message).label(*s, "this condition is false").into())
            }
            Some((Value::Tensor(..), s)) => Err(Diagnostic::new(
                Code::NotStatic,
                "`static_assert` needs a condition known at compile time, not a tensor",
            )
            .label(*s, "a tensor: known only when the program runs")
            .help("compare shapes, ints or settings, e.g. `shape(x)[0] > 1`")
            .into()),
            _ => Err(a.bad(0, "a compile-time bool")),
        }
    }
}
