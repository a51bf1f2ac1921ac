//! What the `print` and `assert_close` effects do with computed values.
//!
//! Contract:
//! - `print` writes exactly one line: the item in §11 format
//!   (`runtime::format`), tuples as `(a, b)`, text items as they are.
//! - `print_text` writes the text that a tensor of byte values encodes: a
//!   rank-1 tensor as one line, a rank-2 one a line per row (a row holding
//!   a newline spans several); invalid UTF-8 becomes U+FFFD, and a value
//!   outside 0–255 is an E0402 diagnostic naming its index.
//! - `assert_close(actual, expected, tol)` passes when the shapes are equal
//!   and every element satisfies `a == b` or `|a - b| <= tol · (1 + |b|)`
//!   (the `==` lets equal infinities pass; any NaN fails). A failure is an
//!   E0401 diagnostic labelled at the statement's span, naming the first
//!   differing index, both values, and the largest difference.
//!
//! Example: `print_item(&PrintItem::Tensor(id), false, &values)?` is the
//! line `print(x)` writes.

use super::format::{format_float, format_tensor};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{NodeId, PrintItem};
use crate::tensor::{Tensor, Values};

fn value(values: &Values, id: NodeId) -> Result<&Tensor, Diagnostic> {
    values.get(&id).ok_or_else(|| Diagnostic::internal(format!("interpreter: node {id:?} has no value")))
}

/// The §11 text of one print item.
pub fn print_item(item: &PrintItem, full: bool, values: &Values) -> Result<String, Diagnostic> {
    Ok(match item {
        PrintItem::Tensor(id) => {
            let t = value(values, *id)?;
            format_tensor(&t.ty(), &t.to_literal(), full)
        }
        PrintItem::Text(text) => text.clone(),
        PrintItem::Bytes(id) => text_of_bytes(value(values, *id)?)?,
        PrintItem::Tuple(items) => {
            let parts = items.iter().map(|i| print_item(i, full, values)).collect::<Result<Vec<_>, _>>()?;
            format!("({})", parts.join(", "))
        }
        PrintItem::Line(items) => {
            let parts = items.iter().map(|i| print_item(i, full, values)).collect::<Result<Vec<_>, _>>()?;
            parts.join(" ")
        }
    })
}

/// The text of a rank-1 or rank-2 tensor of byte values, a line per row,
/// decoded lossily (see the module doc).
fn text_of_bytes(t: &Tensor) -> Result<String, Diagnostic> {
    let values = t.to_i64_vec().ok_or_else(|| Diagnostic::internal("print_text: not an integer tensor"))?;
    let bytes = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            u8::try_from(v).map_err(|_| {
                let index = crate::tensor::unravel(i, t.shape());
                Diagnostic::new(
                    Code::Runtime,
                    format!("print_text: the value {v} at index {index:?} is not a byte value (0 to 255)"),
                )
            })
        })
        .collect::<Result<Vec<u8>, _>>()?;
    let rows = if t.shape().len() == 2 { t.shape()[0] } else { 1 };
    let width = bytes.len().checked_div(rows).unwrap_or(0);
    let lines: Vec<String> =
        (0..rows).map(|r| String::from_utf8_lossy(&bytes[r * width..(r + 1) * width]).into_owned()).collect();
    Ok(lines.join("\n"))
}

/// Checks `|a - b| <= tol · (1 + |b|)` elementwise (see the module doc).
pub fn assert_close(actual: &Tensor, expected: &Tensor, tol: f64, span: Span) -> Result<(), Diagnostic> {
    let fail = |message: String| Diagnostic::new(Code::AssertFailed, message).label(span, "this assertion failed");
    if actual.shape() != expected.shape() {
        return Err(fail(format!("assert_close: shapes differ: {} and {}", actual.ty(), expected.ty())));
    }
    let (a, b) = (actual.to_f64_vec(), expected.to_f64_vec());
    let close = |x: f64, y: f64| x == y || (x - y).abs() <= tol * (1.0 + y.abs());
    let Some(first) = (0..a.len()).find(|&i| !close(a[i], b[i])) else {
        return Ok(());
    };
    let mismatches = (0..a.len()).filter(|&i| !close(a[i], b[i])).count();
    // f64::max ignores NaN, so the largest difference is over the comparable elements.
    let largest = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    let index = crate::tensor::unravel(first, actual.shape());
    let at = if index.is_empty() { String::new() } else { format!(" at index {index:?}") };
    Err(fail(format!(
        "assert_close failed{at}: actual {} but expected {} (tolerance {tol} · (1 + |expected|))",
        format_float(actual.dtype(), a[first]),
        format_float(expected.dtype(), b[first]),
    ))
    .note(format!("{mismatches} of {} elements differ; the largest difference is {largest}", a.len())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::FileId;
    use crate::ir::{infer::infer, BinaryOp, DType, Effect, Literal, Op, Program, TensorType};

    fn execute(p: &Program, out: &mut dyn std::io::Write) -> Result<(), Diagnostic> {
        crate::runtime::exec::execute(p, out, Default::default())
    }

    /// A program: x = [1, 2.5], y = x + x; print y, (y, "ok"); assert_close(y, expected).
    fn program(expected: Vec<f64>) -> (Program, Span) {
        let mut p = Program::default();
        let g = &mut p.graph;
        let ty = TensorType::new(DType::F32, vec![2]);
        let constant = |v: Vec<f64>| Op::Constant { value: Literal::Float(v), ty: ty.clone() };
        let x = g.add(constant(vec![1.0, 2.5]), &[], ty.clone(), Span::default());
        let add = Op::Binary(BinaryOp::Add);
        let yty = infer(&add, &[&ty, &ty]).unwrap();
        let y = g.add(add, &[x, x], yty, Span::default());
        let e = g.add(constant(expected), &[], ty.clone(), Span::default());
        let span = Span::new(FileId(0), 10, 30);
        p.effects.push(Effect::Print { item: PrintItem::Tensor(y), full: false, span: Span::default() });
        let tuple = PrintItem::Tuple(vec![PrintItem::Tensor(y), PrintItem::Text("ok".into())]);
        p.effects.push(Effect::Print { item: tuple, full: false, span: Span::default() });
        p.effects.push(Effect::AssertClose { actual: y, expected: e, tol: 1e-5, span });
        (p, span)
    }

    #[test]
    fn executes_prints_and_a_passing_assertion() {
        let (p, _) = program(vec![2.0, 5.000001]);
        let mut out = Vec::new();
        execute(&p, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "f32[2] [2, 5]\n(f32[2] [2, 5], ok)\n");
    }

    #[test]
    fn a_failing_assertion_reports_index_values_and_span() {
        let (p, span) = program(vec![2.0, 4.5]);
        let mut out = Vec::new();
        let e = execute(&p, &mut out).unwrap_err();
        assert_eq!(e.code, Code::AssertFailed);
        assert_eq!(e.span(), Some(span));
        assert!(
            e.message.contains("index [1]") && e.message.contains("actual 5") && e.message.contains("expected 4.5")
        );
        assert!(e.notes[0].contains("largest difference is 0.5"), "{:?}", e.notes);
        // The prints before the assertion still happened.
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 2);
    }

    #[test]
    fn nan_and_shape_mismatches_fail_but_equal_infinities_pass() {
        let t = |v: &[f64]| {
            Tensor::from_literal(&Literal::Float(v.to_vec()), &TensorType::new(DType::F64, vec![v.len()])).unwrap()
        };
        let s = Span::default();
        assert!(assert_close(&t(&[f64::INFINITY]), &t(&[f64::INFINITY]), 0.0, s).is_ok());
        assert!(assert_close(&t(&[f64::NAN]), &t(&[f64::NAN]), 1.0, s).is_err());
        assert!(assert_close(&t(&[1.0]), &t(&[1.0, 2.0]), 1.0, s).unwrap_err().message.contains("shapes differ"));
        // The tolerance is relative to 1 + |expected|: 100 vs 100.5 passes with tol 0.005.
        assert!(assert_close(&t(&[100.5]), &t(&[100.0]), 0.005, s).is_ok());
    }
}
