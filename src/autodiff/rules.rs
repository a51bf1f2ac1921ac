//! The vector–Jacobian product of every differentiable primitive: given
//! the forward node `y = op(x…)` and the adjoint `gy` of `y`, the adjoint
//! contribution for each operand (only for operands that are `wanted`).
//! Ops whose output is piecewise constant (floor, sign, comparisons,
//! argmax, argsort, one_hot) contribute nothing.

use super::builder::{BResult, Builder};
use crate::ir::{BinaryOp as B, NodeId, Op, ReduceOp, UnaryOp as U};

pub(crate) fn vjp(
    b: &mut Builder,
    y: NodeId,
    xs: &[NodeId],
    gy: NodeId,
    wanted: &[bool],
) -> BResult<Vec<Option<NodeId>>> {
    let op = b.g.node(y).op.clone();
    let x = xs.first().copied().unwrap_or(y);
    let one = |v: NodeId| Ok(vec![Some(v)]);
    match op {
        Op::Slot { .. }
        | Op::Constant { .. }
        | Op::Iota { .. }
        | Op::Random { .. }
        | Op::ArgMax { .. }
        | Op::ArgSort { .. }
        | Op::OneHot { .. }
        | Op::StopGradient => Ok(vec![None; xs.len()]),
        // Every process's loss reads the sum, so a process's share gets
        // the sum of the cotangents (JAX's `psum` transposes to `psum`).
        Op::AllReduce => one(b.node(Op::AllReduce, &[gy])?),
        // The adjoint of running sums is running sums the other way.
        Op::CumSum { axis, reverse } => one(b.node(Op::CumSum { axis, reverse: !reverse }, &[gy])?),
        Op::Unary(u) => {
            let g = match u {
                U::Neg => b.unary(U::Neg, gy)?,
                U::Abs => {
                    let s = b.unary(U::Sign, x)?;
                    b.mul(gy, s)?
                }
                U::Exp => b.mul(gy, y)?,
                U::Log => b.binary(B::Div, gy, x)?,
                U::Sqrt => {
                    let half = b.scale(gy, 0.5)?;
                    b.binary(B::Div, half, y)?
                }
                U::Rsqrt => {
                    // d/dx x^-1/2 = -1/2 · y³
                    let y2 = b.mul(y, y)?;
                    let y3 = b.mul(y2, y)?;
                    let t = b.mul(gy, y3)?;
                    b.scale(t, -0.5)?
                }
                U::Tanh => {
                    let y2 = b.mul(y, y)?;
                    let ty = b.ty(y);
                    let ones = b.full(1.0, &ty)?;
                    let d = b.binary(B::Sub, ones, y2)?;
                    b.mul(gy, d)?
                }
                U::Sigmoid => {
                    let ty = b.ty(y);
                    let ones = b.full(1.0, &ty)?;
                    let d = b.binary(B::Sub, ones, y)?;
                    let d = b.mul(y, d)?;
                    b.mul(gy, d)?
                }
                U::Relu => {
                    let zeros = b.zeros_like(x)?;
                    let pos = b.binary(B::Gt, x, zeros)?;
                    b.select(pos, gy, zeros)?
                }
                U::Sin => {
                    let c = b.unary(U::Cos, x)?;
                    b.mul(gy, c)?
                }
                U::Cos => {
                    let s = b.unary(U::Sin, x)?;
                    let t = b.mul(gy, s)?;
                    b.unary(U::Neg, t)?
                }
                U::Log1p => {
                    // d/dx log(1 + x) = 1 / (1 + x)
                    let ty = b.ty(x);
                    let ones = b.full(1.0, &ty)?;
                    let d = b.binary(B::Add, ones, x)?;
                    b.binary(B::Div, gy, d)?
                }
                U::Expm1 => {
                    // d/dx (exp(x) - 1) = exp(x) = y + 1
                    let ty = b.ty(y);
                    let ones = b.full(1.0, &ty)?;
                    let d = b.binary(B::Add, y, ones)?;
                    b.mul(gy, d)?
                }
                U::Erf => {
                    // d/dx erf(x) = 2/√π · exp(-x²)
                    let x2 = b.mul(x, x)?;
                    let nx2 = b.unary(U::Neg, x2)?;
                    let e = b.unary(U::Exp, nx2)?;
                    let t = b.mul(gy, e)?;
                    b.scale(t, std::f64::consts::FRAC_2_SQRT_PI)?
                }
                U::Floor | U::Ceil | U::Round | U::Sign | U::Not => return Ok(vec![None]),
            };
            one(g)
        }
        Op::Binary(op) => binary(b, op, y, xs[0], xs[1], gy, wanted),
        Op::Select => {
            let zeros = b.zeros_like(gy)?;
            let ga = if wanted[1] { Some(b.select(xs[0], gy, zeros)?) } else { None };
            let gb = if wanted[2] { Some(b.select(xs[0], zeros, gy)?) } else { None };
            Ok(vec![None, ga, gb])
        }
        Op::Cast(_) => {
            let dt = b.ty(x).dtype;
            one(b.cast(gy, dt)?)
        }
        Op::Reduce { op, axes, keepdims } => {
            let xt = b.ty(x);
            let kept: Vec<usize> =
                xt.shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
            let gk = b.reshape(gy, &kept)?;
            let gb = b.broadcast(gk, &xt.shape)?;
            let _ = keepdims;
            match op {
                ReduceOp::Sum => one(gb),
                ReduceOp::Mean => {
                    let count: usize = axes.iter().map(|&a| xt.shape[a]).product();
                    one(b.scale(gb, 1.0 / count.max(1) as f64)?)
                }
                ReduceOp::Max | ReduceOp::Min => {
                    // Ties share the gradient equally, as in JAX.
                    let yk = b.reshape(y, &kept)?;
                    let yb = b.broadcast(yk, &xt.shape)?;
                    let hit = b.binary(B::Eq, x, yb)?;
                    let ones = b.full(1.0, &xt)?;
                    let zeros = b.zeros_like(x)?;
                    let mask = b.select(hit, ones, zeros)?;
                    let count =
                        b.node(Op::Reduce { op: ReduceOp::Sum, axes: axes.clone(), keepdims: true }, &[mask])?;
                    let count = b.broadcast(count, &xt.shape)?;
                    let share = b.binary(B::Div, mask, count)?;
                    one(b.mul(gb, share)?)
                }
                ReduceOp::Prod => one(prod_grad(b, x, &axes, &kept, gb)?),
            }
        }
        Op::Reshape { .. } => {
            let s = b.ty(x).shape;
            one(b.reshape(gy, &s)?)
        }
        Op::Transpose { perm } => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            one(b.node(Op::Transpose { perm: inv }, &[gy])?)
        }
        Op::BroadcastTo { .. } => {
            let s = b.ty(x).shape;
            one(b.sum_to(gy, &s)?)
        }
        Op::Concat { axis } => {
            let mut out = Vec::new();
            let mut offset = 0;
            let gshape = b.ty(gy).shape;
            for (i, &xi) in xs.iter().enumerate() {
                let len = b.ty(xi).shape[axis];
                if wanted[i] {
                    let mut start = vec![0; gshape.len()];
                    start[axis] = offset;
                    let mut lens = gshape.clone();
                    lens[axis] = len;
                    let step = vec![1; gshape.len()];
                    out.push(Some(b.node(Op::Slice { start, step, len: lens }, &[gy])?));
                } else {
                    out.push(None);
                }
                offset += len;
            }
            Ok(out)
        }
        Op::Slice { start, step, len } => one(slice_grad(b, gy, &b.ty(x).shape.clone(), &start, &step, &len)?),
        Op::Pad { low, .. } => {
            let s = b.ty(x).shape;
            let step = vec![1; s.len()];
            one(b.node(Op::Slice { start: low, step, len: s }, &[gy])?)
        }
        Op::MatMul => {
            let (a, w) = (xs[0], xs[1]);
            let r = b.ty(a).shape.len();
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 1, r - 2);
            let ga = if wanted[0] {
                let wt = b.node(Op::Transpose { perm: perm.clone() }, &[w])?;
                Some(b.node(Op::MatMul, &[gy, wt])?)
            } else {
                None
            };
            let gw = if wanted[1] {
                let at = b.node(Op::Transpose { perm }, &[a])?;
                Some(b.node(Op::MatMul, &[at, gy])?)
            } else {
                None
            };
            Ok(vec![ga, gw])
        }
        Op::Conv2d { stride, padding, dilation, groups } => {
            let (xi, w) = (xs[0], xs[1]);
            let gx = if wanted[0] {
                let s = b.ty(xi).shape;
                let input_shape = [s[0], s[1], s[2], s[3]];
                Some(b.node(Op::Conv2dGradInput { stride, padding, dilation, groups, input_shape }, &[gy, w])?)
            } else {
                None
            };
            let gw = if wanted[1] {
                let s = b.ty(w).shape;
                let filter_shape = [s[0], s[1], s[2], s[3]];
                Some(b.node(Op::Conv2dGradFilter { stride, padding, dilation, groups, filter_shape }, &[xi, gy])?)
            } else {
                None
            };
            Ok(vec![gx, gw])
        }
        Op::Pool2d { kind, size, stride, padding } => {
            one(b.node(Op::Pool2dGrad { kind, size, stride, padding }, &[x, gy])?)
        }
        Op::Gather { axis } => {
            let dim = b.ty(xs[0]).shape[axis];
            let g = b.node(Op::ScatterAdd { axis, dim }, &[xs[1], gy])?;
            Ok(vec![Some(g), None])
        }
        Op::Gradient => {
            Err(crate::diag::Diagnostic::internal("a gradient request differentiated before it is expanded"))
        }
        Op::Scan(body) => super::scan::vjp(b, &body, xs, gy, wanted),
        Op::QuantMatMul { .. } => Err(crate::diag::Diagnostic::new(
            crate::diag::Code::Unsupported,
            "a quantized model's int8 products have no gradient",
        )
        .label(b.span, "differentiated here")
        .help("train the f32 model, then `quantize` it for inference")),
        Op::Conv2dGradInput { .. } | Op::Conv2dGradFilter { .. } | Op::Pool2dGrad { .. } | Op::ScatterAdd { .. } => {
            Err(crate::diag::Diagnostic::new(
                crate::diag::Code::Unsupported,
                "second-order gradients through convolution, pooling or gather are not supported yet",
            )
            .label(b.span, "differentiated twice here"))
        }
    }
}

/// The adjoint of `prod(x, axes)` given `gb`, the output adjoint broadcast
/// back over `x`: each element's partial is the product of the *other*
/// elements of its slice. `prod / x` would divide by zero, so (as
/// TensorFlow does, without its cumulative products) the zeros of each
/// slice are counted: with none the partial is `p / x` where `p` is the
/// slice's product; with exactly one it is the product of the nonzero
/// elements at the zero and 0 elsewhere; with two or more it is 0.
fn prod_grad(b: &mut Builder, x: NodeId, axes: &[usize], kept: &[usize], gb: NodeId) -> BResult<NodeId> {
    let xt = b.ty(x);
    let zero = b.zeros_like(x)?;
    let one = b.full(1.0, &xt)?;
    let is_zero = b.binary(B::Eq, x, zero)?;
    let zero_count = b.cast(is_zero, xt.dtype)?;
    let reduce = |b: &mut Builder, op, v| -> BResult<NodeId> {
        let r = b.node(Op::Reduce { op, axes: axes.to_vec(), keepdims: true }, &[v])?;
        let r = b.reshape(r, kept)?;
        b.broadcast(r, &xt.shape)
    };
    let zeros = reduce(b, ReduceOp::Sum, zero_count)?;
    let nonzero = b.select(is_zero, one, x)?;
    let others = reduce(b, ReduceOp::Prod, nonzero)?;
    let no_zero = b.binary(B::Eq, zeros, zero)?;
    let one_zero = b.binary(B::Eq, zeros, one)?;
    let the_zero = b.binary(B::And, one_zero, is_zero)?;
    let at_zero = b.select(the_zero, others, zero)?;
    let quotient = b.binary(B::Div, others, nonzero)?;
    let partial = b.select(no_zero, quotient, at_zero)?;
    b.mul(gb, partial)
}

#[allow(clippy::too_many_arguments)]
fn binary(
    b: &mut Builder,
    op: B,
    y: NodeId,
    l: NodeId,
    r: NodeId,
    gy: NodeId,
    wanted: &[bool],
) -> BResult<Vec<Option<NodeId>>> {
    let (gl, gr) = match op {
        B::Add => (Some(gy), Some(gy)),
        B::Sub => (Some(gy), if wanted[1] { Some(b.unary(U::Neg, gy)?) } else { None }),
        B::Mul => {
            (if wanted[0] { Some(b.mul(gy, r)?) } else { None }, if wanted[1] { Some(b.mul(gy, l)?) } else { None })
        }
        B::Div => {
            let gl = if wanted[0] { Some(b.binary(B::Div, gy, r)?) } else { None };
            // d(l/r)/dr = -l/r² = -y/r
            let gr = if wanted[1] {
                let t = b.mul(gy, y)?;
                let t = b.unary(U::Neg, t)?;
                Some(b.binary(B::Div, t, r)?)
            } else {
                None
            };
            (gl, gr)
        }
        B::Pow => {
            // d(l^r)/dl = r·l^(r-1) (so x^2 has gradient 0 at 0).
            let gl = if wanted[0] {
                let ty = b.ty(r);
                let one = b.full(1.0, &ty)?;
                let rm1 = b.binary(B::Sub, r, one)?;
                let p = b.binary(B::Pow, l, rm1)?;
                let d = b.mul(r, p)?;
                Some(b.mul(gy, d)?)
            } else {
                None
            };
            // d(l^r)/dr = y·log(l), defined as 0 where l ≤ 0.
            let gr = if wanted[1] {
                let zeros = b.zeros_like(l)?;
                let pos = b.binary(B::Gt, l, zeros)?;
                let ones = b.full(1.0, &b.ty(l))?;
                let safe = b.select(pos, l, ones)?;
                let lg = b.unary(U::Log, safe)?;
                let lg = b.select(pos, lg, zeros)?;
                let d = b.mul(y, lg)?;
                Some(b.mul(gy, d)?)
            } else {
                None
            };
            (gl, gr)
        }
        B::Mod => {
            // l % r = l - floor(l / r)·r: d/dl = 1, d/dr = -floor(l / r)
            // (almost everywhere; the jumps have measure zero).
            let gr = if wanted[1] {
                let q = b.binary(B::Div, l, r)?;
                let q = b.unary(U::Floor, q)?;
                let t = b.mul(gy, q)?;
                Some(b.unary(U::Neg, t)?)
            } else {
                None
            };
            (Some(gy), gr)
        }
        B::Maximum | B::Minimum => {
            // The left operand wins ties, matching the forward choice.
            let cmp = if op == B::Maximum { B::Ge } else { B::Le };
            let pick = b.binary(cmp, l, r)?;
            let zeros = b.zeros_like(gy)?;
            (Some(b.select(pick, gy, zeros)?), Some(b.select(pick, zeros, gy)?))
        }
        B::Eq | B::Ne | B::Lt | B::Le | B::Gt | B::Ge | B::And | B::Or => (None, None),
    };
    Ok(vec![gl.filter(|_| wanted[0]), gr.filter(|_| wanted[1])])
}

/// The adjoint of a strided slice: scatter `gy` back into zeros of the
/// input's shape, one axis at a time (reverse negative steps, interleave
/// zeros for steps > 1, then pad to the original extent).
fn slice_grad(
    b: &mut Builder,
    gy: NodeId,
    in_shape: &[usize],
    start: &[usize],
    step: &[i64],
    len: &[usize],
) -> BResult<NodeId> {
    if len.contains(&0) {
        let dt = b.ty(gy).dtype;
        return b.full(0.0, &crate::ir::TensorType::new(dt, in_shape.to_vec()));
    }
    let mut g = gy;
    for d in 0..in_shape.len() {
        let (l, s) = (len[d], step[d]);
        let mut first = start[d];
        if s < 0 {
            // Reverse the axis so the step is positive.
            let shape = b.ty(g).shape;
            let mut st = vec![0; shape.len()];
            st[d] = l - 1;
            let mut steps = vec![1; shape.len()];
            steps[d] = -1;
            g = b.node(Op::Slice { start: st, step: steps, len: shape }, &[g])?;
            first = (start[d] as i64 + (l as i64 - 1) * s) as usize;
        }
        let k = s.unsigned_abs() as usize;
        if k > 1 {
            // [.., l, ..] → [.., l, 1, ..] → pad → [.., l, k, ..] → [.., l·k, ..] → first (l-1)·k+1.
            let shape = b.ty(g).shape;
            let mut with_one = shape.clone();
            with_one.insert(d + 1, 1);
            let r = b.reshape(g, &with_one)?;
            let low = vec![0; with_one.len()];
            let mut high = vec![0; with_one.len()];
            high[d + 1] = k - 1;
            let p = b.node(Op::Pad { low, high, value: 0.0 }, &[r])?;
            let mut merged = shape.clone();
            merged[d] = l * k;
            let m = b.reshape(p, &merged)?;
            let mut lens = merged.clone();
            lens[d] = (l - 1) * k + 1;
            g = b.node(Op::Slice { start: vec![0; merged.len()], step: vec![1; merged.len()], len: lens }, &[m])?;
        }
        let extent = b.ty(g).shape[d];
        let shape_len = b.ty(g).shape.len();
        if first > 0 || first + extent < in_shape[d] {
            let mut low = vec![0; shape_len];
            let mut high = vec![0; shape_len];
            low[d] = first;
            high[d] = in_shape[d] - first - extent;
            g = b.node(Op::Pad { low, high, value: 0.0 }, &[g])?;
        }
    }
    Ok(g)
}
