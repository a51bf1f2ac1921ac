//! Reductions: `sum mean prod max min any all` over an axis, a tuple of
//! axes, or all axes (the default), and `argmax argmin` along one axis (the
//! last by default), with `keepdims`.
//!
//! `argmin`, `any` and `all` are composites: `argmin(x)` is the `argmax`
//! of the order-reversed values (`-x` for floats, which keeps NaN the
//! winner as NumPy does; `-x - 1`, i.e. bitwise not, for integers, which
//! never overflows), and `any`/`all` count true (or nonzero) elements:
//! `any(x) = sum(x != 0) > 0`, `all(x) = sum(x == 0) == 0`, so over no
//! elements `any` is false and `all` is true, as in NumPy.
//!
//! Example: `argmin([3, 1, 1])` is `i32 1`; `all([true, false], axis = 0)` is `bool false`.

use super::tensor;
use crate::diag::{Code, Diagnostic};
use crate::ir::{BinaryOp, DType, Op, ReduceOp, UnaryOp};
use crate::trace::args::{normalize_axis, BuiltinArgs};
use crate::trace::tensor::Operand;
use crate::trace::value::Value;
use crate::trace::{TResult, Tracer};

impl Tracer<'_> {
    pub(crate) fn reduce(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let x = self.arg_tensor(a, 0, None)?;
        let rank = x.ty.rank();
        let keepdims = a.bool_or(2, false)?;
        if matches!(a.name, "argmax" | "argmin") {
            let axis = a.axis(1, rank.max(1), -1)?;
            if rank == 0 {
                let message = format!("`{}` needs a tensor of rank ≥ 1, found a scalar", a.name);
                return Err(Diagnostic::new(Code::Rank, message).label(x.span, x.ty.to_string()).into());
            }
            let x = if a.name == "argmin" { self.reversed_order(&x, a)? } else { x };
            let out = self.node(Op::ArgMax { axis, keepdims }, &[&x], a.span)?;
            return Ok(tensor(out));
        }
        let mut axes = match a.get(1) {
            None => (0..rank).collect(),
            Some((v, _)) => {
                let v = v.clone();
                let ints = self.static_ints(&v).ok_or_else(|| a.bad(1, "an int or a tuple of ints"))?;
                let axes = ints
                    .iter()
                    .map(|&i| normalize_axis(i, rank).ok_or_else(|| a.axis_error(1, i, rank)))
                    .collect::<TResult<Vec<usize>>>()?;
                // A repeated axis is an axis error (E0305, as documented),
                // and names both spellings: `(1, -1)` is axis 1 twice.
                if let Some(j) = (1..axes.len()).find(|&j| axes[..j].contains(&axes[j])) {
                    let i = axes[..j].iter().position(|&x| x == axes[j]).unwrap_or(0);
                    return Err(Diagnostic::new(
                        Code::Axis,
                        format!(
                            "`{}`: axes {} and {} both name axis {} of a tensor of rank {rank}",
                            a.name, ints[i], ints[j], axes[j]
                        ),
                    )
                    .label(a.span_of(1), "each axis may appear once")
                    .into());
                }
                axes
            }
        };
        axes.sort_unstable();
        if matches!(a.name, "any" | "all") {
            return self.any_all(&x, axes, keepdims, a);
        }
        let op = match a.name {
            "sum" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "prod" => ReduceOp::Prod,
            "max" => ReduceOp::Max,
            _ => ReduceOp::Min,
        };
        if axes.iter().any(|&ax| x.ty.shape[ax] == 0) && matches!(op, ReduceOp::Max | ReduceOp::Min) {
            return Err(a.bad_value(0, format!("cannot take the {} of an empty axis of {}", a.name, x.ty)));
        }
        let out = self.node(Op::Reduce { op, axes, keepdims }, &[&x], a.span)?;
        Ok(tensor(out))
    }

    /// `x` with its order reversed, for `argmin`: `-x` for floats, `-x - 1`
    /// (which wraps to bitwise not, so the minimum integer is no problem)
    /// for integers; `bool` has no order here.
    fn reversed_order(&mut self, x: &Operand, a: &BuiltinArgs) -> TResult<Operand> {
        if x.ty.dtype == DType::Bool {
            return Err(Diagnostic::new(Code::DtypeMismatch, "`argmin` does not take bool")
                .label(x.span, x.ty.to_string())
                .help("cast it first, e.g. `argmin(cast(x, i32))`")
                .into());
        }
        let neg = self.node(Op::Unary(UnaryOp::Neg), &[x], a.span)?;
        if x.ty.dtype.is_float() {
            return Ok(neg);
        }
        let one = self.int_scalar(1, x.ty.dtype, a.span)?;
        let one = self.broadcast_to(&one, &x.ty.shape, a.span)?;
        self.node(Op::Binary(BinaryOp::Sub), &[&neg, &one], a.span)
    }

    /// `any(x)` or `all(x)` over `axes`: counts the true (nonzero) elements
    /// of `x` (or, for `all`, the false ones) and compares with zero.
    fn any_all(&mut self, x: &Operand, axes: Vec<usize>, keepdims: bool, a: &BuiltinArgs) -> TResult<Value> {
        let span = a.span;
        let hits = if x.ty.dtype == DType::Bool {
            if a.name == "any" {
                x.clone()
            } else {
                self.node(Op::Unary(UnaryOp::Not), &[x], span)?
            }
        } else {
            let zero = self.scalar(0.0, x.ty.dtype, span)?;
            let zero = self.broadcast_to(&zero, &x.ty.shape, span)?;
            let test = if a.name == "any" { BinaryOp::Ne } else { BinaryOp::Eq };
            self.node(Op::Binary(test), &[x, &zero], span)?
        };
        let counts = self.cast(&hits, DType::I32, span)?;
        let count = self.node(Op::Reduce { op: ReduceOp::Sum, axes, keepdims }, &[&counts], span)?;
        let zero = self.int_scalar(0, DType::I32, span)?;
        let zero = self.broadcast_to(&zero, &count.ty.shape, span)?;
        let test = if a.name == "any" { BinaryOp::Gt } else { BinaryOp::Eq };
        Ok(tensor(self.node(Op::Binary(test), &[&count, &zero], span)?))
    }
}
