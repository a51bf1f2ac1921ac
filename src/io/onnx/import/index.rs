//! ONNX's operators that pick or place elements by position: `Slice`,
//! `Pad`, `Gather`, `GatherElements`, `OneHot` and `Trilu`.
//!
//! Contract: positions that shape the result (a slice's bounds, pads, a
//! one-hot depth, a diagonal offset) must be known while checking; gather
//! indices may be computed at run time, and negative ones count from the
//! end as ONNX says (an index still out of range is a run-time error).
//! `Slice` clamps its bounds as ONNX does, so `ends = INT64_MAX` means "to
//! the end".
//!
//! Example: `Slice(x: f32[10], starts = [-3], ends = [INT64_MAX])` is the
//! IR `slice {start=[7], step=[1], len=[3]}`.

use super::ctx::{Attrs, Ctx, Val};
use crate::diag::{Code, Diagnostic};
use crate::io::onnx::model::Node;
use crate::ir::{BinaryOp as B, DType, Op, TensorType};

pub const OPS: &[&str] = &["Slice", "Pad", "Gather", "GatherElements", "OneHot", "Trilu"];

pub fn import(cx: &mut Ctx, n: &Node, ins: &[Option<Val>]) -> Result<Vec<Val>, Diagnostic> {
    let x = cx.input(ins, 0)?.clone();
    let y = match n.op_type.as_str() {
        "Slice" => slice(cx, n, ins, &x)?,
        "Pad" => pad(cx, n, ins, &x)?,
        "Gather" => {
            let axis = cx.axis(Attrs(n).int(cx, "axis", 0)?, x.rank())?;
            let idx = wrap_negative(cx, cx.input(ins, 1)?.clone(), x.shape()[axis])?;
            cx.add(Op::Gather { axis }, &[&x, &idx])?
        }
        "GatherElements" => {
            let axis = cx.axis(Attrs(n).int(cx, "axis", 0)?, x.rank())?;
            let idx = wrap_negative(cx, cx.input(ins, 1)?.clone(), x.shape()[axis])?;
            let fits = idx.rank() == x.rank() && (0..x.rank()).all(|d| d == axis || idx.shape()[d] <= x.shape()[d]);
            if !fits {
                return Err(cx.invalid(
                    Code::Broadcast,
                    format!("indices {:?} do not fit data {:?} outside axis {axis}", idx.shape(), x.shape()),
                ));
            }
            // Indices smaller than the data outside the axis read its corner.
            let mut corner = x.clone();
            for d in (0..x.rank()).filter(|&d| d != axis && idx.shape()[d] < x.shape()[d]) {
                corner = cx.narrow(&corner, d, 0, idx.shape()[d])?;
            }
            cx.take_along(&corner, &idx, axis)?
        }
        "OneHot" => one_hot(cx, n, ins, &x)?,
        "Trilu" => trilu(cx, n, ins, &x)?,
        other => return Err(cx.unsupported(format!("operator {other}"))),
    };
    Ok(vec![y])
}

/// Integer indices with negative ones moved up by `len`.
fn wrap_negative(cx: &mut Ctx, idx: Val, len: usize) -> Result<Val, Diagnostic> {
    if !idx.dtype().is_int() {
        return Err(cx.invalid(Code::DtypeMismatch, format!("indices of {}", idx.dtype())));
    }
    if let Some(values) = idx.known.as_deref().and_then(|t| t.to_i64_vec()) {
        if values.iter().all(|&v| v >= 0) {
            return Ok(idx);
        }
    }
    let neg = cx.binary_scalar(B::Lt, &idx, 0.0)?;
    let up = cx.binary_scalar(B::Add, &idx, len as f64)?;
    cx.select(&neg, &up, &idx)
}

/// One axis of a slice, clamped as ONNX clamps it: `(start, len)`.
fn clamp(start: i64, end: i64, step: i64, dim: usize) -> (usize, usize) {
    let n = dim as i128;
    let (mut s, mut e, st) = (i128::from(start), i128::from(end), i128::from(step));
    if s < 0 {
        s += n;
    }
    if e < 0 {
        e += n;
    }
    let (s, e) = if st > 0 { (s.clamp(0, n), e.clamp(0, n)) } else { (s.clamp(0, n - 1), e.clamp(-1, n - 1)) };
    let len = if st > 0 { (e - s + st - 1) / st } else { (s - e + (-st) - 1) / (-st) };
    let len = len.max(0) as usize;
    (if len == 0 { 0 } else { s as usize }, len)
}

fn slice(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val) -> Result<Val, Diagnostic> {
    let a = Attrs(n);
    let optional = |cx: &Ctx, i: usize, what: &str| -> Result<Option<Vec<i64>>, Diagnostic> {
        match ins.get(i).and_then(Option::as_ref) {
            Some(v) => Ok(Some(cx.known_ints(v, what)?)),
            None => Ok(None),
        }
    };
    let (starts, ends, axes, steps) = if cx.opset < 10 {
        let need = |name: &str| a.ints(cx, name)?.ok_or_else(|| cx.unsupported(format!("Slice without `{name}`")));
        (need("starts")?, need("ends")?, a.ints(cx, "axes")?, None)
    } else {
        let starts = optional(cx, 1, "the `starts` input")?.ok_or_else(|| cx.unsupported("Slice without starts"))?;
        let ends = optional(cx, 2, "the `ends` input")?.ok_or_else(|| cx.unsupported("Slice without ends"))?;
        (starts, ends, optional(cx, 3, "the `axes` input")?, optional(cx, 4, "the `steps` input")?)
    };
    let rank = x.rank();
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(cx.invalid(Code::BadValue, "starts, ends, axes and steps differ in length"));
    }
    let mut start = vec![0; rank];
    let mut step = vec![1; rank];
    let mut len = x.shape().to_vec();
    for i in 0..starts.len() {
        let d = cx.axis(axes[i], rank)?;
        if steps[i] == 0 {
            return Err(cx.invalid(Code::BadValue, "a slice step of 0"));
        }
        let (s, l) = clamp(starts[i], ends[i], steps[i], x.shape()[d]);
        (start[d], step[d], len[d]) = (s, steps[i], l);
    }
    cx.add(Op::Slice { start, step, len }, &[x])
}

/// `Pad` in `constant` mode (pads from the attribute before opset 11, the
/// input after; `axes` from opset 18); negative pads crop.
fn pad(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val) -> Result<Val, Diagnostic> {
    let a = Attrs(n);
    let mode = a.string(cx, "mode", "constant")?;
    if mode != "constant" {
        return Err(cx.unsupported(format!("Pad with mode \"{mode}\" (only \"constant\")")));
    }
    let rank = x.rank();
    let (pads, value, axes) = if cx.opset < 11 {
        let pads = a.ints(cx, "pads")?.ok_or_else(|| cx.unsupported("Pad without pads"))?;
        (pads, f64::from(a.float(cx, "value", 0.0)?), None)
    } else {
        let p = cx.input(ins, 1)?.clone();
        let pads = cx.known_ints(&p, "the `pads` input")?;
        let value = match ins.get(2).and_then(Option::as_ref) {
            Some(v) => match cx.known_floats(v, "the `constant_value` input")?.as_slice() {
                [] => 0.0,
                [v] => *v,
                _ => return Err(cx.invalid(Code::BadValue, "a constant_value of several elements")),
            },
            None => 0.0,
        };
        let axes = match ins.get(3).and_then(Option::as_ref) {
            Some(v) => Some(cx.known_ints(v, "the `axes` input")?),
            None => None,
        };
        (pads, value, axes)
    };
    let axes: Vec<usize> = match axes {
        Some(axes) => axes.iter().map(|&ax| cx.axis(ax, rank)).collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    let limit = super::ctx::MAX_ELEMENTS as i64;
    if let Some(p) = pads.iter().find(|p| p.unsigned_abs() > limit as u64) {
        return Err(cx.invalid(Code::TooLarge, format!("a pad of {p}")));
    }
    if pads.len() != 2 * axes.len() {
        return Err(cx.invalid(Code::BadValue, format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    let (mut low, mut high) = (vec![0i64; rank], vec![0i64; rank]);
    for (i, &d) in axes.iter().enumerate() {
        (low[d], high[d]) = (pads[i], pads[i + axes.len()]);
    }
    // Crop first (negative pads), then pad.
    let mut start = vec![0; rank];
    let mut len = x.shape().to_vec();
    for d in 0..rank {
        let cut = (-low[d]).max(0) as usize + (-high[d]).max(0) as usize;
        if cut > len[d] {
            return Err(cx.invalid(Code::BadValue, format!("pads crop more than axis {d} holds")));
        }
        start[d] = (-low[d]).max(0) as usize;
        len[d] -= cut;
    }
    let cropped = cx.add(Op::Slice { start, step: vec![1; rank], len }, &[x])?;
    let low: Vec<usize> = low.iter().map(|&p| p.max(0) as usize).collect();
    let high: Vec<usize> = high.iter().map(|&p| p.max(0) as usize).collect();
    if low.iter().chain(&high).all(|&p| p == 0) {
        return Ok(cropped);
    }
    cx.add(Op::Pad { low, high, value }, &[&cropped])
}

/// `OneHot(indices, depth, values)`: `values[1]` where the index (negative
/// counting from `depth`) equals the position along the new `axis`,
/// `values[0]` elsewhere.
fn one_hot(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], idx: &Val) -> Result<Val, Diagnostic> {
    let d = cx.input(ins, 1)?.clone();
    let depth = match cx.known_floats(&d, "the `depth` input")?.as_slice() {
        [v] if *v >= 1.0 => *v as usize,
        other => return Err(cx.invalid(Code::BadValue, format!("a depth of {other:?}"))),
    };
    let values = cx.input(ins, 2)?.clone();
    if values.ty.numel() != 2 {
        return Err(cx.invalid(Code::BadValue, "`values` must hold two elements"));
    }
    let rank = idx.rank() + 1;
    let axis = cx.axis(Attrs(n).int(cx, "axis", -1)?, rank)?;
    let idx = cx.cast(idx, DType::I64)?;
    let idx = wrap_negative(cx, idx, depth)?;
    let mut shape = idx.shape().to_vec();
    shape.insert(axis, 1);
    let idx = cx.reshape(&idx, &shape)?;
    shape[axis] = depth;
    let positions = cx.add(Op::Iota { ty: TensorType::new(DType::I64, shape), axis }, &[])?;
    let hot = cx.binary(B::Eq, &idx, &positions)?;
    let flat = cx.reshape(&values, &[2])?;
    let off = cx.narrow(&flat, 0, 0, 1)?;
    let on = cx.narrow(&flat, 0, 1, 1)?;
    let (off, on) = (cx.reshape(&off, &[])?, cx.reshape(&on, &[])?);
    cx.select(&hot, &on, &off)
}

/// `Trilu`: the upper (or lower) triangle of the last two axes from
/// diagonal `k`, zeros elsewhere.
fn trilu(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val) -> Result<Val, Diagnostic> {
    let upper = Attrs(n).int(cx, "upper", 1)? != 0;
    let k = match ins.get(1).and_then(Option::as_ref) {
        Some(v) => match cx.known_ints(v, "the `k` input")?.as_slice() {
            [k] => *k,
            _ => return Err(cx.invalid(Code::BadValue, "`k` must be one number")),
        },
        None => 0,
    };
    let rank = x.rank();
    if rank < 2 {
        return Err(cx.invalid(Code::Rank, "Trilu needs rank ≥ 2"));
    }
    let ty = TensorType::new(DType::I64, x.shape()[rank - 2..].to_vec());
    let rows = cx.add(Op::Iota { ty: ty.clone(), axis: 0 }, &[])?;
    let cols = cx.add(Op::Iota { ty, axis: 1 }, &[])?;
    let diag = cx.binary(B::Sub, &cols, &rows)?;
    let keep = cx.binary_scalar(if upper { B::Ge } else { B::Le }, &diag, k as f64)?;
    let zero = cx.scalar(0.0, x.dtype())?;
    cx.select(&keep, x, &zero)
}

#[cfg(test)]
mod tests {
    use super::clamp;

    #[test]
    fn slices_clamp_as_onnx_does() {
        assert_eq!(clamp(-3, i64::MAX, 1, 10), (7, 3));
        assert_eq!(clamp(0, -1, 1, 10), (0, 9));
        assert_eq!(clamp(20, 1000, 1, 10), (0, 0));
        assert_eq!(clamp(-1, i64::MIN, -1, 10), (9, 10));
        assert_eq!(clamp(8, 1, -3, 10), (8, 3));
        assert_eq!(clamp(0, 10, 3, 10), (0, 4));
        assert_eq!(clamp(0, 0, 1, 0), (0, 0));
    }
}
