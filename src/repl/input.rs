//! When an entry is complete: the line editor and the stdin reader both ask
//! `is_complete` after each line, and keep reading while it says no.
//!
//! Contract: an entry is incomplete exactly when parsing it fails *at its
//! end* — an unclosed bracket or block, or an operator, `=` or `,` still
//! waiting for its operand — so more text could still make it valid. Any
//! other syntax error (and every `:command`) is complete: it is submitted
//! and reported at once rather than swallowing the following lines.
//!
//! A `///` doc comment waits for its item too.
//!
//! Example: `fn f(x) =` and `model M {` are incomplete; `print(1))` and
//! `let = 3` are complete (and fail with E0101 when run).

use crate::diag::FileId;

/// Whether `text` is a whole entry (see the module header).
pub fn is_complete(text: &str) -> bool {
    let trimmed = text.trim_end();
    if trimmed.trim_start().is_empty() || trimmed.trim_start().starts_with(':') {
        return true;
    }
    // A `///` doc comment belongs to the item that follows it.
    if trimmed.lines().last().is_some_and(|l| l.trim_start().starts_with("///")) {
        return false;
    }
    match crate::syntax::parse(text, FileId(u32::MAX)) {
        Ok(_) => true,
        Err(diags) => !diags.iter().any(|d| d.labels.iter().any(|l| l.span.start >= trimmed.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::is_complete;

    #[test]
    fn open_brackets_blocks_and_operators_wait_for_more() {
        for text in ["fn f(x) =", "let y = 1 +", "print([1.0,", "model M {", "let x = (1", "f(1,\n  2", "/// Doc.\n"] {
            assert!(!is_complete(text), "{text:?} should be incomplete");
        }
    }

    #[test]
    fn whole_entries_errors_and_commands_are_complete() {
        for text in ["print(1)", "let x = 1\n", "print(1))", "let = 3", ":type x", "", "  \n", "fn f(x) = x * 2"] {
            assert!(is_complete(text), "{text:?} should be complete");
        }
    }
}
