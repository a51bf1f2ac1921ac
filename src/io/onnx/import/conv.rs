//! ONNX's convolution and pooling (`Conv`, `MaxPool`, `AveragePool`,
//! `GlobalAveragePool`, `GlobalMaxPool`) on tfc's NHWC ops: the NCHW input
//! is transposed to NHWC (a 1-D input gains a unit height first), the
//! OIHW weights to HWIO, and the result back.
//!
//! Contract: 1-D and 2-D windows, explicit pads or `auto_pad`
//! (`SAME_UPPER`, `SAME_LOWER`, `VALID`), strides, dilations and groups
//! for `Conv`; `ceil_mode` and `count_include_pad` for pooling (a window
//! that `ceil_mode` adds past the end counts only the elements inside, as
//! ONNX's reference does). 3-D windows, pooling dilations and `MaxPool`'s
//! indices output are refused (E0343).
//!
//! Example: `Conv(x: f32[1, 3, 8, 8], w: f32[4, 3, 3, 3], pads = [1, 1, 1, 1])`
//! is `transpose(conv2d(transpose(x, [0, 2, 3, 1]), transpose(w, [2, 3, 1, 0]),
//! padding = [1, 1, 1, 1]), [0, 3, 1, 2])`.

use super::ctx::{Attrs, Ctx, Val};
use crate::diag::{Code, Diagnostic};
use crate::io::onnx::model::Node;
use crate::ir::{BinaryOp as B, Op, PoolKind, ReduceOp};

pub const OPS: &[&str] = &["Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"];

pub fn import(cx: &mut Ctx, n: &Node, ins: &[Option<Val>]) -> Result<Vec<Val>, Diagnostic> {
    let x = cx.input(ins, 0)?.clone();
    if x.rank() < 3 {
        return Err(cx.invalid(Code::Rank, format!("{} needs an input of rank ≥ 3, not {:?}", n.op_type, x.shape())));
    }
    let y = match n.op_type.as_str() {
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let op = if n.op_type == "GlobalMaxPool" { ReduceOp::Max } else { ReduceOp::Mean };
            let axes: Vec<usize> = (2..x.rank()).collect();
            cx.reduce(op, &x, &axes, true)?
        }
        "Conv" => conv(cx, n, ins, &x)?,
        _ => pool(cx, n, &x)?,
    };
    Ok(vec![y])
}

/// A node's window geometry, lifted to 2-D.
struct Window {
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    /// `[top, bottom, left, right]`, tfc's order.
    padding: [usize; 4],
}

/// The spatial sizes of an NCHW (or NCW) value, lifted to 2-D.
fn spatial(cx: &Ctx, x: &Val, op: &str) -> Result<[usize; 2], Diagnostic> {
    match x.shape() {
        [_, _, w] => Ok([1, *w]),
        [_, _, h, w] => Ok([*h, *w]),
        s => Err(cx.unsupported(format!("{op} over {} spatial axes (1 or 2 only)", s.len().saturating_sub(2)))),
    }
}

/// The attributes of a windowed op for an input of spatial size `size`
/// and a window of `kernel` (1-D lists are lifted to a unit height).
fn window(cx: &Ctx, n: &Node, size: [usize; 2], kernel: &[i64], one_d: bool) -> Result<Window, Diagnostic> {
    let a = Attrs(n);
    let sp = if one_d { 1 } else { 2 };
    let list = |name: &str, default: i64, len: usize| -> Result<Vec<usize>, Diagnostic> {
        let v = a.ints(cx, name)?.unwrap_or_else(|| vec![default; len]);
        if v.len() != len {
            return Err(cx.invalid(Code::ConvShape, format!("`{name}` has {} values, not {len}", v.len())));
        }
        // Bounded, so that window arithmetic cannot overflow.
        v.iter()
            .map(|&x| {
                usize::try_from(x)
                    .ok()
                    .filter(|&x| x <= 1 << 24)
                    .ok_or_else(|| cx.invalid(Code::ConvShape, format!("`{name}` holds {x}")))
            })
            .collect()
    };
    if kernel.len() != sp {
        return Err(cx.invalid(Code::ConvShape, format!("a kernel of {} axes for {sp} spatial axes", kernel.len())));
    }
    let lift = |v: Vec<usize>, pad: usize| if one_d { [pad, v[0]] } else { [v[0], v[1]] };
    if let Some(k) = kernel.iter().find(|&&k| !(1..=1 << 24).contains(&k)) {
        return Err(cx.invalid(Code::ConvShape, format!("a kernel size of {k}")));
    }
    let kernel = lift(kernel.iter().map(|&k| k as usize).collect(), 1);
    let stride = lift(list("strides", 1, sp)?, 1);
    let dilation = lift(list("dilations", 1, sp)?, 1);
    if stride.contains(&0) || dilation.contains(&0) || kernel.contains(&0) {
        return Err(cx.invalid(Code::ConvShape, "a stride, dilation or kernel size of 0"));
    }
    let (begin, end) = match a.string(cx, "auto_pad", "NOTSET")?.as_str() {
        "NOTSET" => {
            let p = list("pads", 0, 2 * sp)?;
            (lift(p[..sp].to_vec(), 0), lift(p[sp..].to_vec(), 0))
        }
        "VALID" => ([0, 0], [0, 0]),
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let mut begin = [0; 2];
            let mut end = [0; 2];
            for d in 0..2 {
                let out = size[d].div_ceil(stride[d]);
                let span = (kernel[d] - 1) * dilation[d] + 1;
                let total = ((out.max(1) - 1) * stride[d] + span).saturating_sub(size[d]);
                let small = total / 2;
                (begin[d], end[d]) = if mode == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
            }
            (begin, end)
        }
        other => return Err(cx.unsupported(format!("auto_pad = \"{other}\""))),
    };
    Ok(Window { kernel, stride, dilation, padding: [begin[0], end[0], begin[1], end[1]] })
}

/// NCHW (or NCW) → NHWC.
fn to_nhwc(cx: &mut Ctx, x: &Val) -> Result<Val, Diagnostic> {
    let x4 = match x.shape() {
        &[n, c, w] => cx.reshape(x, &[n, c, 1, w])?,
        _ => x.clone(),
    };
    cx.transpose(&x4, &[0, 2, 3, 1])
}

/// NHWC → NCHW, or NCW for a 1-D op.
fn from_nhwc(cx: &mut Ctx, y: &Val, one_d: bool) -> Result<Val, Diagnostic> {
    let t = cx.transpose(y, &[0, 3, 1, 2])?;
    match (one_d, t.shape()) {
        (true, &[n, c, _, w]) => cx.reshape(&t, &[n, c, w]),
        _ => Ok(t),
    }
}

fn conv(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val) -> Result<Val, Diagnostic> {
    let w = cx.input(ins, 1)?.clone();
    let size = spatial(cx, x, "Conv")?;
    let one_d = x.rank() == 3;
    if w.rank() != x.rank() {
        return Err(cx.invalid(Code::ConvShape, format!("weights {:?} for input {:?}", w.shape(), x.shape())));
    }
    let kernel: Vec<i64> = w.shape()[2..].iter().map(|&d| d as i64).collect();
    if let Some(k) = Attrs(n).ints(cx, "kernel_shape")? {
        if k != kernel {
            return Err(cx.invalid(Code::ConvShape, format!("kernel_shape {k:?} but weights {:?}", w.shape())));
        }
    }
    let win = window(cx, n, size, &kernel, one_d)?;
    let groups = Attrs(n).int(cx, "group", 1)?;
    let groups =
        usize::try_from(groups).ok().filter(|&g| g > 0).ok_or_else(|| cx.unsupported(format!("group {groups}")))?;
    let xh = to_nhwc(cx, x)?;
    let w4 = match w.shape() {
        &[o, i, k] => cx.reshape(&w, &[o, i, 1, k])?,
        _ => w.clone(),
    };
    let wh = cx.transpose(&w4, &[2, 3, 1, 0])?;
    let op = Op::Conv2d { stride: win.stride, padding: win.padding, dilation: win.dilation, groups };
    let y = cx.add(op, &[&xh, &wh])?;
    let mut y = from_nhwc(cx, &y, one_d)?;
    if let Some(b) = ins.get(2).and_then(Option::as_ref) {
        let mut shape = vec![1; y.rank()];
        shape[1] = b.ty.numel();
        let b = cx.reshape(b, &shape)?;
        y = cx.binary(B::Add, &y, &b)?;
    }
    Ok(y)
}

fn pool(cx: &mut Ctx, n: &Node, x: &Val) -> Result<Val, Diagnostic> {
    let a = Attrs(n);
    let max = n.op_type == "MaxPool";
    if max && n.outputs.get(1).is_some_and(|o| !o.is_empty()) {
        return Err(cx.unsupported("MaxPool's `Indices` output"));
    }
    let size = spatial(cx, x, &n.op_type)?;
    let one_d = x.rank() == 3;
    let kernel = a.ints(cx, "kernel_shape")?.ok_or_else(|| cx.unsupported("a pool without kernel_shape"))?;
    let mut win = window(cx, n, size, &kernel, one_d)?;
    if win.dilation != [1, 1] {
        return Err(cx.unsupported("pooling with dilations"));
    }
    if !x.dtype().is_float() {
        return Err(cx.unsupported(format!("{} of {}", n.op_type, x.dtype())));
    }
    let mut xh = to_nhwc(cx, x)?;
    let mut extra = [0; 2];
    if a.int(cx, "ceil_mode", 0)? != 0 {
        // More windows at the end: as many as rounding up gives, less one
        // that would start past the input and its leading pad, as ONNX's
        // reference counts them; tfc reaches them by padding the end.
        let sizes = [xh.shape()[1], xh.shape()[2]];
        for d in 0..2 {
            let (begin, end) = (win.padding[2 * d], win.padding[2 * d + 1]);
            let padded = sizes[d] + begin + end;
            if padded < win.kernel[d] {
                continue;
            }
            let mut out = (padded - win.kernel[d]).div_ceil(win.stride[d]) + 1;
            if (out - 1) * win.stride[d] >= sizes[d] + begin {
                out -= 1;
            }
            let needed = (out - 1) * win.stride[d] + win.kernel[d];
            extra[d] = needed.saturating_sub(padded);
        }
    }
    if !max && a.int(cx, "count_include_pad", 0)? != 0 {
        // The pads count as zeros: pad explicitly, pool without padding.
        let [t, b, l, r] = win.padding;
        xh = cx.add(Op::Pad { low: vec![0, t, l, 0], high: vec![0, b, r, 0], value: 0.0 }, &[&xh])?;
        win.padding = [0; 4];
    }
    win.padding[1] += extra[0];
    win.padding[3] += extra[1];
    let kind = if max { PoolKind::Max } else { PoolKind::Avg };
    let op = Op::Pool2d { kind, size: win.kernel, stride: win.stride, padding: win.padding };
    let y = cx.add(op, &[&xh])?;
    from_nhwc(cx, &y, one_d)
}
