//! ONNX's reductions and ops along an axis: `ReduceSum`/`Mean`/`Max`/
//! `Min`/`Prod` and the composite `ReduceL1`/`L2`/`SumSquare`/`LogSum`/
//! `LogSumExp`, `ArgMax`/`ArgMin`, `CumSum` and `TopK`.
//!
//! Contract: the reduced axes come from the `axes` attribute (before
//! opset 13 for `ReduceSum`, 18 for the others) or the `axes` input, which
//! must be known while checking; no axes reduce everything unless
//! `noop_with_empty_axes` says to pass the input through. Indices come out
//! as `int64`, as ONNX's do.
//!
//! Example: `ReduceL2(x, axes = [1], keepdims = 0)` becomes
//! `sqrt(reduce_sum(mul(x, x), axes = [1]))`.

use super::ctx::{Attrs, Ctx, Val};
use crate::diag::Diagnostic;
use crate::io::onnx::model::Node;
use crate::ir::{BinaryOp as B, DType, Op, ReduceOp, UnaryOp as U};

pub const OPS: &[&str] = &[
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ArgMax",
    "ArgMin",
    "CumSum",
    "TopK",
];

pub fn import(cx: &mut Ctx, n: &Node, ins: &[Option<Val>]) -> Result<Vec<Val>, Diagnostic> {
    let x = cx.input(ins, 0)?.clone();
    match n.op_type.as_str() {
        "ArgMax" | "ArgMin" => Ok(vec![arg_extreme(cx, n, &x)?]),
        "CumSum" => Ok(vec![cumsum(cx, n, ins, &x)?]),
        "TopK" => top_k(cx, n, ins, &x),
        op => Ok(vec![reduce(cx, n, ins, &x, op)?]),
    }
}

fn reduce(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val, op: &str) -> Result<Val, Diagnostic> {
    let a = Attrs(n);
    let keep = a.int(cx, "keepdims", 1)? != 0;
    let axes_as_input = if op == "ReduceSum" { cx.opset >= 13 } else { cx.opset >= 18 };
    let axes = if axes_as_input {
        match ins.get(1).and_then(Option::as_ref) {
            Some(v) => Some(cx.known_ints(v, "the `axes` input")?),
            None => None,
        }
    } else {
        a.ints(cx, "axes")?
    };
    let axes = match axes {
        Some(axes) if !axes.is_empty() => axes,
        _ if a.int(cx, "noop_with_empty_axes", 0)? != 0 => return Ok(x.clone()),
        _ => (0..x.rank() as i64).collect(),
    };
    let axes = axes.iter().map(|&ax| cx.axis(ax, x.rank())).collect::<Result<Vec<usize>, _>>()?;
    let float_only =
        !matches!(op, "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceSumSquare" | "ReduceL1");
    if (float_only && !x.dtype().is_float()) || x.dtype() == DType::Bool {
        return Err(cx.unsupported(format!("{op} of {} (float tensors only)", x.dtype())));
    }
    let simple = match op {
        "ReduceSum" => Some(ReduceOp::Sum),
        "ReduceMean" => Some(ReduceOp::Mean),
        "ReduceMax" => Some(ReduceOp::Max),
        "ReduceMin" => Some(ReduceOp::Min),
        "ReduceProd" => Some(ReduceOp::Prod),
        _ => None,
    };
    if let Some(r) = simple {
        if matches!(r, ReduceOp::Max | ReduceOp::Min) && axes.iter().any(|&ax| x.shape()[ax] == 0) {
            // ONNX defines the extremum of nothing as ∓∞ (opset 18), which
            // an empty reduction of tfc's does not promise.
            return Err(cx.unsupported(format!("{op} over an empty axis")));
        }
        return cx.reduce(r, x, &axes, keep);
    }
    let y = match op {
        "ReduceL1" => {
            let ax = cx.unary(U::Abs, x)?;
            cx.reduce(ReduceOp::Sum, &ax, &axes, keep)?
        }
        "ReduceL2" | "ReduceSumSquare" => {
            let sq = cx.binary(B::Mul, x, x)?;
            let s = cx.reduce(ReduceOp::Sum, &sq, &axes, keep)?;
            if op == "ReduceL2" {
                cx.unary(U::Sqrt, &s)?
            } else {
                s
            }
        }
        "ReduceLogSum" => {
            let s = cx.reduce(ReduceOp::Sum, x, &axes, keep)?;
            cx.unary(U::Log, &s)?
        }
        _ => {
            let e = cx.unary(U::Exp, x)?;
            let s = cx.reduce(ReduceOp::Sum, &e, &axes, keep)?;
            cx.unary(U::Log, &s)?
        }
    };
    Ok(y)
}

/// `ArgMax`/`ArgMin` along `axis`, the first extremum or with
/// `select_last_index` the last, as `int64`.
fn arg_extreme(cx: &mut Ctx, n: &Node, x: &Val) -> Result<Val, Diagnostic> {
    let a = Attrs(n);
    let axis = cx.axis(a.int(cx, "axis", 0)?, x.rank())?;
    let keepdims = a.int(cx, "keepdims", 1)? != 0;
    let last = a.int(cx, "select_last_index", 0)? != 0;
    if x.dtype() == DType::Bool {
        return Err(cx.unsupported(format!("{} of bool", n.op_type)));
    }
    let len = x.shape()[axis];
    let mut v = if n.op_type == "ArgMin" { cx.unary(U::Neg, x)? } else { x.clone() };
    if last {
        v = reversed(cx, &v, axis)?;
    }
    let i = cx.add(Op::ArgMax { axis, keepdims }, &[&v])?;
    let mut i = cx.cast(&i, DType::I64)?;
    if last {
        // Index k of the reversed axis is index len - 1 - k.
        let top = cx.scalar((len as f64) - 1.0, DType::I64)?;
        i = cx.binary(B::Sub, &top, &i)?;
    }
    Ok(i)
}

/// `v` with `axis` in reverse order.
pub fn reversed(cx: &mut Ctx, v: &Val, axis: usize) -> Result<Val, Diagnostic> {
    let rank = v.rank();
    let mut start = vec![0; rank];
    let mut step = vec![1; rank];
    start[axis] = v.shape()[axis].saturating_sub(1);
    step[axis] = -1;
    cx.add(Op::Slice { start, step, len: v.shape().to_vec() }, &[v])
}

/// `CumSum(x, axis)` with `exclusive` (each sum leaves its own element
/// out: the inclusive sums shifted by one) and `reverse`.
fn cumsum(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val) -> Result<Val, Diagnostic> {
    let a = Attrs(n);
    let axis_v = cx.input(ins, 1)?.clone();
    let axis = match cx.known_ints(&axis_v, "the `axis` input")?.as_slice() {
        [ax] => cx.axis(*ax, x.rank())?,
        other => return Err(cx.unsupported(format!("an `axis` of {} values", other.len()))),
    };
    let reverse = a.int(cx, "reverse", 0)? != 0;
    let exclusive = a.int(cx, "exclusive", 0)? != 0;
    if x.dtype() == DType::Bool {
        return Err(cx.unsupported("CumSum of bool"));
    }
    let s = cx.add(Op::CumSum { axis, reverse }, &[x])?;
    if !exclusive {
        return Ok(s);
    }
    let rank = x.rank();
    let len = x.shape()[axis];
    let (mut low, mut high) = (vec![0; rank], vec![0; rank]);
    if reverse {
        high[axis] = 1;
    } else {
        low[axis] = 1;
    }
    let padded = cx.add(Op::Pad { low, high, value: 0.0 }, &[&s])?;
    cx.narrow(&padded, axis, usize::from(reverse), len)
}

/// `TopK`: the `k` largest (or smallest) along `axis`, sorted, with their
/// `int64` indices; ties take the lower index first.
fn top_k(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val) -> Result<Vec<Val>, Diagnostic> {
    let a = Attrs(n);
    let k = if cx.opset >= 10 {
        let kv = cx.input(ins, 1)?.clone();
        match cx.known_ints(&kv, "the `K` input")?.as_slice() {
            [k] => *k,
            other => return Err(cx.unsupported(format!("a `K` of {} values", other.len()))),
        }
    } else {
        a.int(cx, "k", 1)?
    };
    let axis = cx.axis(a.int(cx, "axis", -1)?, x.rank())?;
    let largest = a.int(cx, "largest", 1)? != 0;
    let len = x.shape()[axis];
    let k = usize::try_from(k).ok().filter(|&k| k <= len).ok_or_else(|| {
        cx.invalid(crate::diag::Code::BadValue, format!("K = {k} is not in 0..={len}, the size of axis {axis}"))
    })?;
    if x.dtype() == DType::Bool {
        return Err(cx.unsupported("TopK of bool"));
    }
    let order = cx.add(Op::ArgSort { axis, descending: largest }, &[x])?;
    let indices = cx.narrow(&order, axis, 0, k)?;
    let values = cx.take_along(x, &indices, axis)?;
    let indices = cx.cast(&indices, DType::I64)?;
    Ok(vec![values, indices])
}
