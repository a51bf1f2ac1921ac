//! Run-time errors of compiled code: integer floor division by zero and an
//! integer raised to a negative power (`spec::INT_FALLIBLE`).
//!
//! Contract: compiled code computes each such op by calling
//! [`int_fallible`] (linked as `tfc_int_fallible`) with the kernel's
//! [`Faults`] record, the expression's index and the element's flat index.
//! The call returns the interpreter's result (`tensor::fallible_int_binary`)
//! or, when the op fails, 0, and records the interpreter's error. Of all
//! the failures of a run the record keeps the one with the smallest
//! expression index, then the smallest flat index: the error the
//! interpreter, which computes the kernel's members one after the other
//! in flat order, reports first. So the error is the same at any thread
//! count (row ranges running at once share the record). The executor takes
//! it after the kernel ran (`Faults::take`) and reports it at the failing
//! node's source line.
//!
//! Example: `a / b` with `b = [1, 0, 2, 0]` records, at index 1, "integer
//! division by zero (7 / 0)" for `a = [5, 7, 9, 11]`.

use crate::diag::Diagnostic;
use crate::ir::spec::INT_FALLIBLE;
use crate::ir::BinaryOp;
use std::sync::Mutex;

/// The first failure of a compiled kernel's run (see the module docs).
#[derive(Default)]
pub struct Faults {
    first: Mutex<Option<Failure>>,
}

struct Failure {
    expr: u32,
    index: u64,
    error: Diagnostic,
}

impl Faults {
    /// The expression index and error of the first failure since the last
    /// `take`, if any.
    pub fn take(&self) -> Option<(usize, Diagnostic)> {
        let first = self.first.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()?;
        Some((first.expr as usize, first.error))
    }

    fn record(&self, expr: u32, index: u64, error: Diagnostic) {
        let mut first = self.first.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if first.as_ref().is_none_or(|f| (expr, index) < (f.expr, f.index)) {
            *first = Some(Failure { expr, index, error });
        }
    }
}

/// The `code` argument of [`int_fallible`]: `op`'s position in
/// `INT_FALLIBLE`, plus 256 for `i64` operands (`i32` otherwise).
pub fn int_fallible_code(op: BinaryOp, wide: bool) -> u32 {
    let at = INT_FALLIBLE.iter().position(|&o| o == op).unwrap_or(INT_FALLIBLE.len());
    at as u32 | u32::from(wide) << 8
}

/// The integer op of `code` on `a` and `b` (`i32`s sign-extended, for a
/// code without the `i64` bit), as the interpreter computes it; a failure
/// is recorded in `faults` as expression `expr` at flat index `index`.
///
/// # Safety
/// `faults` points to a live `Faults` (the compiled step's).
#[export_name = "tfc_int_fallible"]
pub unsafe extern "C" fn int_fallible(code: u32, a: i64, b: i64, faults: *const Faults, expr: u32, index: u64) -> i64 {
    let op = INT_FALLIBLE.get((code & 0xff) as usize).copied().unwrap_or(BinaryOp::Add);
    match crate::tensor::fallible_int_binary(op, a, b, code & 256 != 0) {
        Ok(v) => v,
        Err(error) => {
            // SAFETY: the caller's contract.
            unsafe { &*faults }.record(expr, index, error);
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record keeps the failure of the earliest expression, then of the
    /// smallest index, whatever order the calls come in.
    #[test]
    fn the_first_failure_in_expression_then_index_order_is_kept() {
        let faults = Faults::default();
        let (div, pow) = (int_fallible_code(BinaryOp::Div, false), int_fallible_code(BinaryOp::Pow, true));
        // SAFETY: `faults` lives for every call.
        let call = |code, a, b, expr, index| unsafe { int_fallible(code, a, b, &faults, expr, index) };
        assert_eq!(call(div, -7, 2, 0, 0), -4);
        assert_eq!(call(pow, 3, 40, 0, 0), 3i64.wrapping_pow(40));
        assert_eq!(call(div, 9, 0, 3, 5), 0);
        assert_eq!(call(pow, 2, -1, 1, 9), 0);
        assert_eq!(call(div, 7, 0, 1, 4), 0);
        assert_eq!(call(div, 8, 0, 1, 6), 0);
        let (expr, error) = faults.take().expect("a failure");
        assert_eq!(expr, 1);
        assert!(error.message.contains("integer division by zero (7 / 0)"), "{}", error.message);
        assert!(faults.take().is_none(), "take empties the record");
        // `i32` operands wrap as `i32`s: 2^31 is `i32::MIN`.
        assert_eq!(call(int_fallible_code(BinaryOp::Pow, false), 2, 31, 0, 0), i64::from(i32::MIN));
    }
}
