//! ONNX's operators that move elements without computing: `Reshape`,
//! `Flatten`, `Transpose`, `Squeeze`, `Unsqueeze`, `Expand`, `Concat`,
//! `Split`, `Tile`, `DepthToSpace` and `SpaceToDepth`.
//!
//! Contract: target shapes, axes and split sizes must be known while
//! checking (attributes, or inputs that are constants, initializers or
//! computed from shapes); `Reshape`'s `0` copies the input's dimension
//! unless `allowzero` is set, and `-1` is inferred. Axes may be negative.
//!
//! Example: `Flatten(x: f32[2, 3, 4], axis = 1)` is `reshape [2, 12]`.

use super::ctx::{Attrs, Ctx, Val};
use crate::diag::{Code, Diagnostic};
use crate::io::onnx::model::Node;
use crate::ir::Op;

pub const OPS: &[&str] = &[
    "Reshape",
    "Flatten",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Expand",
    "Concat",
    "Split",
    "Tile",
    "DepthToSpace",
    "SpaceToDepth",
];

pub fn import(cx: &mut Ctx, n: &Node, ins: &[Option<Val>]) -> Result<Vec<Val>, Diagnostic> {
    let a = Attrs(n);
    let x = cx.input(ins, 0)?.clone();
    let rank = x.rank();
    let y = match n.op_type.as_str() {
        "Reshape" => {
            let s = cx.input(ins, 1)?.clone();
            let target = cx.known_ints(&s, "the target shape")?;
            let shape = reshape_target(cx, x.shape(), &target, a.int(cx, "allowzero", 0)? != 0)?;
            cx.reshape(&x, &shape)?
        }
        "Flatten" => {
            let axis = a.int(cx, "axis", 1)?;
            let axis = if axis == rank as i64 { rank } else { cx.axis(axis, rank)? };
            let outer: usize = x.shape()[..axis].iter().product();
            let inner: usize = x.shape()[axis..].iter().product();
            cx.reshape(&x, &[outer, inner])?
        }
        "Transpose" => {
            let perm = match a.ints(cx, "perm")? {
                Some(p) => p.iter().map(|&p| cx.axis(p, rank)).collect::<Result<Vec<_>, _>>()?,
                None => (0..rank).rev().collect(),
            };
            cx.transpose(&x, &perm)?
        }
        "Squeeze" => {
            let axes = axes_of(cx, n, ins, 13)?;
            let axes: Vec<usize> = match axes {
                Some(axes) => axes.iter().map(|&ax| cx.axis(ax, rank)).collect::<Result<_, _>>()?,
                None => (0..rank).filter(|&d| x.shape()[d] == 1).collect(),
            };
            if let Some(&d) = axes.iter().find(|&&d| x.shape()[d] != 1) {
                return Err(cx.invalid(Code::Reshape, format!("axis {d} of {:?} is not of size 1", x.shape())));
            }
            let shape: Vec<usize> = (0..rank).filter(|d| !axes.contains(d)).map(|d| x.shape()[d]).collect();
            cx.reshape(&x, &shape)?
        }
        "Unsqueeze" => {
            let axes = axes_of(cx, n, ins, 13)?.ok_or_else(|| cx.unsupported("Unsqueeze without axes"))?;
            let out_rank = rank + axes.len();
            let mut at: Vec<usize> = axes.iter().map(|&ax| cx.axis(ax, out_rank)).collect::<Result<_, _>>()?;
            at.sort_unstable();
            at.dedup();
            if at.len() != axes.len() {
                return Err(cx.invalid(Code::BadValue, "Unsqueeze names an axis twice"));
            }
            let mut dims = x.shape().iter();
            let shape: Vec<usize> =
                (0..out_rank).map(|d| if at.contains(&d) { 1 } else { dims.next().copied().unwrap_or(1) }).collect();
            cx.reshape(&x, &shape)?
        }
        "Expand" => {
            let s = cx.input(ins, 1)?.clone();
            let target = cx.known_ints(&s, "the target shape")?;
            let target = dims(cx, &target)?;
            let shape = crate::ir::infer::broadcast_shapes(x.shape(), &target).ok_or_else(|| {
                cx.invalid(Code::Broadcast, format!("{:?} does not broadcast to {target:?}", x.shape()))
            })?;
            cx.broadcast(&x, &shape)?
        }
        "Concat" => {
            let axis = cx.axis(a.int(cx, "axis", 0)?, rank)?;
            let vals: Vec<Val> = (0..ins.len()).map(|i| cx.input(ins, i).cloned()).collect::<Result<_, _>>()?;
            let refs: Vec<&Val> = vals.iter().collect();
            if refs.len() == 1 {
                x
            } else {
                cx.add(Op::Concat { axis }, &refs)?
            }
        }
        "Split" => return split(cx, n, ins, &x),
        "Tile" => {
            let r = cx.input(ins, 1)?.clone();
            let repeats = cx.known_ints(&r, "the `repeats` input")?;
            if repeats.len() != rank {
                return Err(cx.invalid(Code::Rank, format!("{} repeats for rank {rank}", repeats.len())));
            }
            let repeats = dims(cx, &repeats)?;
            // [d0, d1] → [1, d0, 1, d1] → [r0, d0, r1, d1] → [r0·d0, r1·d1]
            let spread: Vec<usize> = x.shape().iter().flat_map(|&d| [1, d]).collect();
            let wide: Vec<usize> = x.shape().iter().zip(&repeats).flat_map(|(&d, &r)| [r, d]).collect();
            let out: Vec<usize> = x.shape().iter().zip(&repeats).map(|(&d, &r)| d.saturating_mul(r)).collect();
            let s = cx.reshape(&x, &spread)?;
            let b = cx.broadcast(&s, &wide)?;
            cx.reshape(&b, &out)?
        }
        "DepthToSpace" | "SpaceToDepth" => space_depth(cx, n, &x)?,
        other => return Err(cx.unsupported(format!("operator {other}"))),
    };
    Ok(vec![y])
}

/// Sizes from a file: negative ones, or ones beyond any tensor's, are errors.
fn dims(cx: &Ctx, v: &[i64]) -> Result<Vec<usize>, Diagnostic> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .ok()
                .filter(|&d| d <= super::ctx::MAX_ELEMENTS)
                .ok_or_else(|| cx.invalid(Code::Reshape, format!("a dimension of {d}")))
        })
        .collect()
}

/// The `axes` of `Squeeze`/`Unsqueeze`: an attribute before `since`, an
/// optional input from then on.
fn axes_of(cx: &Ctx, n: &Node, ins: &[Option<Val>], since: i64) -> Result<Option<Vec<i64>>, Diagnostic> {
    if cx.opset < since {
        return Attrs(n).ints(cx, "axes");
    }
    match ins.get(1).and_then(Option::as_ref) {
        Some(v) => Ok(Some(cx.known_ints(v, "the `axes` input")?)),
        None => Ok(None),
    }
}

/// A `Reshape` target: `0` keeps the input's dimension (unless
/// `allowzero`), one `-1` takes what is left.
fn reshape_target(cx: &Ctx, input: &[usize], target: &[i64], allowzero: bool) -> Result<Vec<usize>, Diagnostic> {
    let numel: usize = input.iter().product();
    let mut shape = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &d) in target.iter().enumerate() {
        shape.push(match d {
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                cx.invalid(Code::Reshape, format!("target dimension {i} copies an input dimension that is not there"))
            })?,
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            d if d >= 0 && d as u64 <= super::ctx::MAX_ELEMENTS as u64 => d as usize,
            d => return Err(cx.invalid(Code::Reshape, format!("target dimension {i} is {d}"))),
        });
    }
    let known: usize = shape.iter().fold(1usize, |n, &d| n.saturating_mul(d));
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(cx.invalid(Code::Reshape, format!("cannot reshape {input:?} to {target:?}")));
        }
        shape[i] = numel / known;
    }
    if shape.iter().fold(1usize, |n, &d| n.saturating_mul(d)) != numel {
        return Err(cx.invalid(Code::Reshape, format!("cannot reshape {input:?} ({numel} elements) to {target:?}")));
    }
    Ok(shape)
}

/// `Split` into the node's outputs: sizes from the `split` attribute
/// (before opset 13) or input, `num_outputs` (opset 18), or equal parts.
fn split(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val) -> Result<Vec<Val>, Diagnostic> {
    let a = Attrs(n);
    let axis = cx.axis(a.int(cx, "axis", 0)?, x.rank())?;
    let len = x.shape()[axis];
    let given = if cx.opset < 13 {
        a.ints(cx, "split")?
    } else {
        match ins.get(1).and_then(Option::as_ref) {
            Some(v) => Some(cx.known_ints(v, "the `split` input")?),
            None => None,
        }
    };
    let sizes: Vec<usize> = match given {
        Some(s) => dims(cx, &s)?,
        None => {
            let parts = match a.int_opt(cx, "num_outputs")? {
                Some(k) => usize::try_from(k).ok().filter(|&k| k > 0).ok_or_else(|| cx.unsupported("num_outputs"))?,
                None => n.outputs.len().max(1),
            };
            let each = len.div_ceil(parts);
            (0..parts).map(|i| each.min(len.saturating_sub(i * each))).collect()
        }
    };
    if sizes.iter().fold(0usize, |n, &d| n.saturating_add(d)) != len {
        return Err(cx.invalid(Code::BadValue, format!("split sizes {sizes:?} do not add up to {len}")));
    }
    let mut out = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for s in sizes {
        out.push(cx.narrow(x, axis, start, s)?);
        start += s;
    }
    Ok(out)
}

/// `DepthToSpace` (modes DCR and CRD) and `SpaceToDepth` on NCHW.
fn space_depth(cx: &mut Ctx, n: &Node, x: &Val) -> Result<Val, Diagnostic> {
    let a = Attrs(n);
    let b = a.int(cx, "blocksize", 0)?;
    let b = usize::try_from(b).ok().filter(|&b| b > 0).ok_or_else(|| cx.unsupported(format!("blocksize {b}")))?;
    let &[nb, c, h, w] = x.shape() else {
        return Err(cx.invalid(Code::Rank, format!("{} needs a rank-4 input", n.op_type)));
    };
    if n.op_type == "SpaceToDepth" {
        if h % b != 0 || w % b != 0 {
            return Err(cx.invalid(Code::Reshape, format!("{h}x{w} is not a multiple of the block {b}")));
        }
        let t = cx.reshape(x, &[nb, c, h / b, b, w / b, b])?;
        let perm = match a.string(cx, "mode", "DCR")?.as_str() {
            "DCR" => [0, 3, 5, 1, 2, 4],
            "CRD" => [0, 1, 3, 5, 2, 4],
            other => return Err(cx.unsupported(format!("mode \"{other}\""))),
        };
        let t = cx.transpose(&t, &perm)?;
        return cx.reshape(&t, &[nb, c * b * b, h / b, w / b]);
    }
    if c % (b * b) != 0 {
        return Err(cx.invalid(Code::Reshape, format!("{c} channels are not a multiple of {}", b * b)));
    }
    let oc = c / (b * b);
    let t = match a.string(cx, "mode", "DCR")?.as_str() {
        "DCR" => {
            let t = cx.reshape(x, &[nb, b, b, oc, h, w])?;
            cx.transpose(&t, &[0, 3, 4, 1, 5, 2])?
        }
        "CRD" => {
            let t = cx.reshape(x, &[nb, oc, b, b, h, w])?;
            cx.transpose(&t, &[0, 1, 4, 2, 5, 3])?
        }
        other => return Err(cx.unsupported(format!("mode \"{other}\""))),
    };
    cx.reshape(&t, &[nb, oc, h * b, w * b])
}
