//! Reductions: `sum mean max min argmax` over an axis, a tuple of axes, or
//! all axes (the default), with `keepdims`.

use super::tensor;
use crate::diag::{Code, Diagnostic};
use crate::ir::{Op, ReduceOp};
use crate::trace::args::{normalize_axis, BuiltinArgs};
use crate::trace::value::Value;
use crate::trace::{TResult, Tracer};

impl Tracer<'_> {
    pub(crate) fn reduce(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let x = self.arg_tensor(a, 0, None)?;
        let rank = x.ty.rank();
        let keepdims = a.bool_or(2, false)?;
        if a.name == "argmax" {
            let axis = a.axis(1, rank.max(1), -1)?;
            if rank == 0 {
                return Err(Diagnostic::new(Code::Rank, "`argmax` needs a tensor of rank ≥ 1, found a scalar")
                    .label(x.span, x.ty.to_string())
                    .into());
            }
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
        let op = match a.name {
            "sum" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "max" => ReduceOp::Max,
            _ => ReduceOp::Min,
        };
        if axes.iter().any(|&ax| x.ty.shape[ax] == 0) && matches!(op, ReduceOp::Max | ReduceOp::Min) {
            return Err(a.bad_value(0, format!("cannot take the {} of an empty axis of {}", a.name, x.ty)));
        }
        let out = self.node(Op::Reduce { op, axes, keepdims }, &[&x], a.span)?;
        Ok(tensor(out))
    }
}
