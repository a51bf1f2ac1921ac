//! ONNX's neural-network operators: `MatMul` (NumPy's broadcasting
//! product), `Gemm`, the normalizations (batch for inference, instance,
//! layer, RMS, Lp, mean-variance), `Softmax`/`LogSoftmax`/`Hardmax` and
//! `Dropout` at inference. Convolution and pooling are in conv.rs.
//!
//! Contract: the normalizations compute as ONNX's reference does
//! (`(x - mean) / sqrt(var + epsilon) * scale + bias`), layer and RMS
//! normalization in `float32` when `stash_type` asks for it; before opset
//! 13 `Softmax` and its kin work on the input flattened to 2-D at `axis`,
//! as that opset defines. `Dropout` in training mode is refused (E0343).
//!
//! Example: `Gemm(a, b, c, transB = 1)` is `matmul(a, transpose(b)) + c`.

use super::ctx::{Attrs, Ctx, Val};
use crate::diag::{Code, Diagnostic};
use crate::io::onnx::model::Node;
use crate::ir::{BinaryOp as B, DType, Op, ReduceOp, TensorType, UnaryOp as U};

pub const OPS: &[&str] = &[
    "MatMul",
    "Gemm",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "RMSNormalization",
    "LpNormalization",
    "MeanVarianceNormalization",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "Dropout",
];

pub fn import(cx: &mut Ctx, n: &Node, ins: &[Option<Val>]) -> Result<Vec<Val>, Diagnostic> {
    let a = Attrs(n);
    let x = cx.input(ins, 0)?.clone();
    let y = match n.op_type.as_str() {
        "MatMul" => {
            let b = cx.input(ins, 1)?.clone();
            matmul(cx, &x, &b)?
        }
        "Gemm" => {
            let b = cx.input(ins, 1)?.clone();
            let (ta, tb) = (a.int(cx, "transA", 0)? != 0, a.int(cx, "transB", 0)? != 0);
            let (alpha, beta) = (f64::from(a.float(cx, "alpha", 1.0)?), f64::from(a.float(cx, "beta", 1.0)?));
            if x.rank() != 2 || b.rank() != 2 {
                return Err(cx.invalid(Code::Rank, "Gemm needs matrices"));
            }
            let xa = if ta { cx.transpose(&x, &[1, 0])? } else { x.clone() };
            let xb = if tb { cx.transpose(&b, &[1, 0])? } else { b };
            let mut y = cx.add(Op::MatMul, &[&xa, &xb])?;
            if alpha != 1.0 {
                y = cx.binary_scalar(B::Mul, &y, alpha)?;
            }
            if let Some(c) = ins.get(2).and_then(Option::as_ref) {
                let c = if beta != 1.0 { cx.binary_scalar(B::Mul, c, beta)? } else { c.clone() };
                y = cx.binary(B::Add, &y, &c)?;
            }
            y
        }
        "BatchNormalization" => {
            if a.int(cx, "training_mode", 0)? != 0 || n.outputs.iter().skip(1).any(|o| !o.is_empty()) {
                return Err(cx.unsupported("BatchNormalization in training mode (inference only)"));
            }
            if a.int(cx, "spatial", 1)? == 0 {
                return Err(cx.unsupported("BatchNormalization with spatial = 0"));
            }
            let eps = f64::from(a.float(cx, "epsilon", 1e-5)?);
            let per_channel = |cx: &mut Ctx, i: usize| -> Result<Val, Diagnostic> {
                let v = cx.input(ins, i)?.clone();
                channel_view(cx, &v, x.rank())
            };
            let (scale, bias, mean, var) =
                (per_channel(cx, 1)?, per_channel(cx, 2)?, per_channel(cx, 3)?, per_channel(cx, 4)?);
            let d = cx.binary(B::Sub, &x, &mean)?;
            let ve = cx.binary_scalar(B::Add, &var, eps)?;
            let sd = cx.unary(U::Sqrt, &ve)?;
            let nrm = cx.binary(B::Div, &d, &sd)?;
            let s = cx.binary(B::Mul, &nrm, &scale)?;
            cx.binary(B::Add, &s, &bias)?
        }
        "InstanceNormalization" => {
            let eps = f64::from(a.float(cx, "epsilon", 1e-5)?);
            let axes: Vec<usize> = (2..x.rank()).collect();
            let scale = cx.input(ins, 1)?.clone();
            let bias = cx.input(ins, 2)?.clone();
            let (scale, bias) = (channel_view(cx, &scale, x.rank())?, channel_view(cx, &bias, x.rank())?);
            let (d, sd) = centered(cx, &x, &axes, eps)?;
            let nrm = cx.binary(B::Div, &d, &sd)?;
            let s = cx.binary(B::Mul, &nrm, &scale)?;
            cx.binary(B::Add, &s, &bias)?
        }
        "LayerNormalization" => return layer_norm(cx, n, ins, &x, false),
        "RMSNormalization" => return layer_norm(cx, n, ins, &x, true),
        "LpNormalization" => {
            let axis = cx.axis(a.int(cx, "axis", -1)?, x.rank())?;
            let norm = match a.int(cx, "p", 2)? {
                1 => {
                    let ax = cx.unary(U::Abs, &x)?;
                    cx.reduce(ReduceOp::Sum, &ax, &[axis], true)?
                }
                2 => {
                    let sq = cx.binary(B::Mul, &x, &x)?;
                    let s = cx.reduce(ReduceOp::Sum, &sq, &[axis], true)?;
                    cx.unary(U::Sqrt, &s)?
                }
                p => return Err(cx.unsupported(format!("LpNormalization with p = {p}"))),
            };
            // A zero norm gives zeros, not 0/0, as ONNX's reference does.
            let q = cx.binary(B::Div, &x, &norm)?;
            let zero_norm = cx.binary_scalar(B::Eq, &norm, 0.0)?;
            let zero = cx.scalar(0.0, x.dtype())?;
            cx.select(&zero_norm, &zero, &q)?
        }
        "MeanVarianceNormalization" => {
            let axes = a.ints(cx, "axes")?.unwrap_or_else(|| vec![0, 2, 3]);
            let axes: Vec<usize> = axes.iter().map(|&ax| cx.axis(ax, x.rank())).collect::<Result<_, _>>()?;
            // As ONNX's function body: (x - E[x]) / (sqrt(E[x²] - E[x]²) + 1e-9).
            let mean = cx.reduce(ReduceOp::Mean, &x, &axes, true)?;
            let sq = cx.binary(B::Mul, &x, &x)?;
            let mean_sq = cx.reduce(ReduceOp::Mean, &sq, &axes, true)?;
            let m2 = cx.binary(B::Mul, &mean, &mean)?;
            let var = cx.binary(B::Sub, &mean_sq, &m2)?;
            let sd = cx.unary(U::Sqrt, &var)?;
            let sd = cx.binary_scalar(B::Add, &sd, 1e-9)?;
            let d = cx.binary(B::Sub, &x, &mean)?;
            cx.binary(B::Div, &d, &sd)?
        }
        "Softmax" | "LogSoftmax" | "Hardmax" => softmax(cx, n, &x)?,
        "Dropout" => {
            let training = match ins.get(2).and_then(Option::as_ref) {
                Some(t) => cx.known_floats(t, "the `training_mode` input")?.iter().any(|&v| v != 0.0),
                None => false,
            };
            if training {
                return Err(cx.unsupported("Dropout in training mode (inference only)"));
            }
            let mut out = vec![x.clone()];
            if n.outputs.get(1).is_some_and(|o| !o.is_empty()) {
                let yes = cx.scalar(1.0, DType::Bool)?;
                out.push(cx.broadcast(&yes, x.shape())?);
            }
            return Ok(out);
        }
        other => return Err(cx.unsupported(format!("operator {other}"))),
    };
    Ok(vec![y])
}

/// NumPy's `matmul`: a vector operand gains a unit axis (dropped from the
/// result), and the batch axes broadcast.
pub fn matmul(cx: &mut Ctx, a: &Val, b: &Val) -> Result<Val, Diagnostic> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err(cx.invalid(Code::MatmulShape, "MatMul of a scalar"));
    }
    let (a_vec, b_vec) = (a.rank() == 1, b.rank() == 1);
    let a2 = if a_vec { cx.reshape(a, &[1, a.shape()[0]])? } else { a.clone() };
    let b2 = if b_vec { cx.reshape(b, &[b.shape()[0], 1])? } else { b.clone() };
    let (ra, rb) = (a2.rank(), b2.rank());
    let batch = crate::ir::infer::broadcast_shapes(&a2.shape()[..ra - 2], &b2.shape()[..rb - 2]).ok_or_else(|| {
        cx.invalid(Code::MatmulShape, format!("batch axes of {:?} and {:?} do not broadcast", a.shape(), b.shape()))
    })?;
    let full = |v: &Val, r: usize| [batch.clone(), v.shape()[r - 2..].to_vec()].concat();
    let (fa, fb) = (full(&a2, ra), full(&b2, rb));
    let a3 = cx.broadcast(&a2, &fa)?;
    let b3 = cx.broadcast(&b2, &fb)?;
    let y = cx.add(Op::MatMul, &[&a3, &b3])?;
    let mut shape = y.shape().to_vec();
    if b_vec {
        shape.pop();
    }
    if a_vec {
        shape.remove(shape.len() - if b_vec { 1 } else { 2 });
    }
    cx.reshape(&y, &shape)
}

/// A per-channel vector `[C]` shaped to broadcast along axis 1 of a
/// rank-`rank` NCHW value.
fn channel_view(cx: &mut Ctx, v: &Val, rank: usize) -> Result<Val, Diagnostic> {
    if v.rank() != 1 || rank < 2 {
        return Err(cx.invalid(Code::Rank, format!("a per-channel input of shape {:?}", v.shape())));
    }
    let mut shape = vec![1; rank];
    shape[1] = v.shape()[0];
    cx.reshape(v, &shape)
}

/// `x - mean` and `sqrt(var + eps)` over `axes` (kept as size 1).
fn centered(cx: &mut Ctx, x: &Val, axes: &[usize], eps: f64) -> Result<(Val, Val), Diagnostic> {
    let mean = cx.reduce(ReduceOp::Mean, x, axes, true)?;
    let d = cx.binary(B::Sub, x, &mean)?;
    let sq = cx.binary(B::Mul, &d, &d)?;
    let var = cx.reduce(ReduceOp::Mean, &sq, axes, true)?;
    let ve = cx.binary_scalar(B::Add, &var, eps)?;
    Ok((d, cx.unary(U::Sqrt, &ve)?))
}

/// `LayerNormalization` (outputs `Y`, `Mean`, `InvStdDev`) or, with
/// `rms`, `RMSNormalization`, over the axes from `axis` on.
fn layer_norm(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val, rms: bool) -> Result<Vec<Val>, Diagnostic> {
    let a = Attrs(n);
    let axis = cx.axis(a.int(cx, "axis", -1)?, x.rank())?;
    let eps = f64::from(a.float(cx, "epsilon", 1e-5)?);
    let stash = match a.int(cx, "stash_type", 1)? {
        1 => DType::F32,
        t => crate::io::onnx::model::dtype_of(t as i32).map_err(|e| cx.unsupported(e))?,
    };
    if !x.dtype().is_float() {
        return Err(cx.unsupported(format!("{} of {}", n.op_type, x.dtype())));
    }
    let axes: Vec<usize> = (axis..x.rank()).collect();
    let xs = cx.cast(x, stash)?;
    let (d, sd) = if rms {
        let sq = cx.binary(B::Mul, &xs, &xs)?;
        let ms = cx.reduce(ReduceOp::Mean, &sq, &axes, true)?;
        let ve = cx.binary_scalar(B::Add, &ms, eps)?;
        (xs.clone(), cx.unary(U::Sqrt, &ve)?)
    } else {
        centered(cx, &xs, &axes, eps)?
    };
    let nrm = cx.binary(B::Div, &d, &sd)?;
    let scale = cx.input(ins, 1)?.clone();
    let scale = cx.cast(&scale, stash)?;
    let mut y = cx.binary(B::Mul, &nrm, &scale)?;
    if let Some(bias) = ins.get(2).and_then(Option::as_ref) {
        let bias = cx.cast(bias, stash)?;
        y = cx.binary(B::Add, &y, &bias)?;
    }
    if y.shape() != x.shape() {
        return Err(cx.invalid(Code::Broadcast, "scale or bias broadcast the input to a larger shape"));
    }
    let mut out = vec![cx.cast(&y, x.dtype())?];
    if !rms && n.outputs.len() > 1 {
        out.push(cx.reduce(ReduceOp::Mean, &xs, &axes, true)?);
        let one = cx.scalar(1.0, stash)?;
        out.push(cx.binary(B::Div, &one, &sd)?);
    }
    Ok(out)
}

/// `Softmax`, `LogSoftmax` or `Hardmax` along `axis` (from opset 13), or
/// on the input flattened to 2-D at `axis` (before).
fn softmax(cx: &mut Ctx, n: &Node, x: &Val) -> Result<Val, Diagnostic> {
    if !x.dtype().is_float() {
        return Err(cx.unsupported(format!("{} of {}", n.op_type, x.dtype())));
    }
    let legacy = cx.opset < 13;
    let axis = Attrs(n).int(cx, "axis", if legacy { 1 } else { -1 })?;
    let rank = x.rank();
    let (v, axis) = if legacy {
        let axis = if axis == rank as i64 { rank } else { cx.axis(axis, rank)? };
        let outer: usize = x.shape()[..axis].iter().product();
        (cx.reshape(x, &[outer, x.shape()[axis..].iter().product()])?, 1)
    } else {
        (x.clone(), cx.axis(axis, rank)?)
    };
    let y = if n.op_type == "Hardmax" {
        let i = cx.add(Op::ArgMax { axis, keepdims: true }, &[&v])?;
        let positions = cx.add(Op::Iota { ty: TensorType::new(DType::I32, v.shape().to_vec()), axis }, &[])?;
        let hot = cx.binary(B::Eq, &i, &positions)?;
        cx.cast(&hot, v.dtype())?
    } else {
        let m = cx.reduce(ReduceOp::Max, &v, &[axis], true)?;
        let d = cx.binary(B::Sub, &v, &m)?;
        let e = cx.unary(U::Exp, &d)?;
        let s = cx.reduce(ReduceOp::Sum, &e, &[axis], true)?;
        if n.op_type == "Softmax" {
            cx.binary(B::Div, &e, &s)?
        } else {
            let l = cx.unary(U::Log, &s)?;
            cx.binary(B::Sub, &d, &l)?
        }
    };
    cx.reshape(&y, x.shape())
}
