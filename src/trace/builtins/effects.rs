//! Effect built-ins: `print`, `print_text` and `assert_close` record
//! effects that run after the graph is evaluated, in program order.

use crate::diag::{Code, Diagnostic};
use crate::ir::{DType, Effect, PrintItem};
use crate::trace::args::BuiltinArgs;
use crate::trace::value::Value;
use crate::trace::{Fail, TResult, Tracer};

impl Tracer<'_> {
    pub(crate) fn effect_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        if a.name == "print" {
            // `print(a, b)` prints its arguments separated by spaces.
            let (v, s) = a.get(0).cloned().unwrap_or((Value::Tuple(vec![]), a.span));
            let Value::Tuple(parts) = v else { return Err(a.bad(0, "values")) };
            let items = parts.iter().map(|p| self.print_item(p, s)).collect::<TResult<Vec<_>>>()?;
            let item = match <[PrintItem; 1]>::try_from(items) {
                Ok([one]) => one,
                Err(items) => PrintItem::Line(items),
            };
            let full = a.bool_or(1, false)?;
            self.effects.push(Effect::Print { item, full, span: a.span });
            return Ok(Value::Tuple(vec![]));
        }
        if a.name == "print_text" {
            return self.print_text(a);
        }
        let tol = a.float_or(2, 1e-5)?;
        let (x, xs) = a.get(0).cloned().ok_or_else(|| a.bad(0, "a tensor"))?;
        let (y, ys) = a.get(1).cloned().ok_or_else(|| a.bad(1, "a tensor"))?;
        let ops = self.operands(&[(&x, xs), (&y, ys)])?;
        self.same_dtype(&ops, "`assert_close`", a.span)?;
        if ops[0].ty.shape != ops[1].ty.shape {
            return Err(Diagnostic::new(
                Code::Broadcast,
                format!("`assert_close`: shapes differ: {} and {}", ops[0].ty, ops[1].ty),
            )
            .label(xs, ops[0].ty.to_string())
            .label(ys, ops[1].ty.to_string())
            .into());
        }
        self.effects.push(Effect::AssertClose { actual: ops[0].id, expected: ops[1].id, tol, span: a.span });
        Ok(Value::Tuple(vec![]))
    }

    /// `print_text(ids)`: an integer tensor of byte values, rank 1 (one
    /// line) or 2 (a line per row), printed as text; the values are checked
    /// when it prints (`runtime::effects`).
    fn print_text(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let ids = self.arg_tensor(a, 0, Some(DType::I32))?;
        let span = a.span_of(0);
        if !matches!(ids.ty.dtype, DType::I32 | DType::I64) {
            return Err(Diagnostic::new(
                Code::DtypeMismatch,
                format!("`print_text` needs an integer tensor of byte values, found {}", ids.ty),
            )
            .label(span, ids.ty.to_string())
            .help("`cast(x, i32)` converts a float tensor of byte values")
            .into());
        }
        if !matches!(ids.ty.rank(), 1 | 2) {
            return Err(Diagnostic::new(
                Code::Rank,
                format!(
                    "`print_text` prints a rank-1 tensor (one line) or a rank-2 one (a line per row), found {}",
                    ids.ty
                ),
            )
            .label(span, ids.ty.to_string())
            .into());
        }
        self.effects.push(Effect::Print { item: PrintItem::Bytes(ids.id), full: false, span: a.span });
        Ok(Value::Tuple(vec![]))
    }

    pub(crate) fn print_item(&mut self, v: &Value, span: crate::diag::Span) -> TResult<PrintItem> {
        Ok(match v {
            Value::Tensor(id, _) => PrintItem::Tensor(*id),
            // A float is an f32 scalar by default (§3), so it prints as one.
            Value::Float(_) => {
                let o = self.operand(v, None, span)?;
                PrintItem::Tensor(o.id)
            }
            Value::Int(i) => PrintItem::Text(i.to_string()),
            Value::Bool(b) => PrintItem::Text(b.to_string()),
            Value::Str(s) => PrintItem::Text(s.clone()),
            Value::DType(d) => PrintItem::Text(d.to_string()),
            Value::Tuple(items) => {
                PrintItem::Tuple(items.iter().map(|i| self.print_item(i, span)).collect::<TResult<_>>()?)
            }
            Value::Model(m) => PrintItem::Text(format!("{}(…)", m.def.name.name)),
            Value::Poison => return Err(Fail::Poisoned),
            other => PrintItem::Text(format!("<{}>", other.describe())),
        })
    }
}
