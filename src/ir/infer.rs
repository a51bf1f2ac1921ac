//! Shape and dtype rules of every primitive op: given the operand types,
//! the result type or why the operands do not fit.
//!
//! Contract: `infer` is total (never panics) and is the single definition of
//! op typing. The tracer calls it to type new nodes (wrapping errors with the
//! user's spans), and the verifier calls it to re-check every node after
//! every pass.

use super::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use super::types::{DType, TensorType};
use crate::diag::Code;

/// Why operands do not fit an op: a stable code and a sentence.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeError {
    pub code: Code,
    pub message: String,
}

fn err<T>(code: Code, message: impl Into<String>) -> Result<T, TypeError> {
    Err(TypeError { code, message: message.into() })
}

/// The NumPy broadcast of two shapes, or `None` if they are incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Output size of a windowed op along one spatial dimension.
pub fn window_output(input: usize, window: usize, stride: usize, dilation: usize, pad: usize) -> Option<usize> {
    let effective = dilation.checked_mul(window.checked_sub(1)?)?.checked_add(1)?;
    let padded = input.checked_add(pad)?;
    if stride == 0 || padded < effective {
        return None;
    }
    Some((padded - effective) / stride + 1)
}

/// How many operands `op` takes when given `given` (concat takes any
/// number ≥ 1; random takes an optional counter).
pub fn arity(op: &Op, given: usize) -> usize {
    match op {
        Op::Constant { .. } | Op::Iota { .. } | Op::Slot { .. } => 0,
        // An optional counter operand (see `Op::Random`).
        Op::Random { .. } => given.min(1),
        Op::Binary(_)
        | Op::MatMul
        | Op::Conv2d { .. }
        | Op::Gather { .. }
        | Op::Conv2dGradInput { .. }
        | Op::Conv2dGradFilter { .. }
        | Op::Pool2dGrad { .. }
        | Op::ScatterAdd { .. }
        | Op::Gradient => 2,
        Op::Select => 3,
        // An optional static input range (see `tensor::quant`).
        Op::QuantMatMul { .. } => given.clamp(3, 4),
        Op::Concat { .. } => given.max(1),
        Op::Scan(body) => body.inputs.len(),
        _ => 1,
    }
}

/// The result type of `op` applied to operands of types `inputs`.
pub fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, TypeError> {
    let arity = arity(op, inputs.len());
    if inputs.len() != arity {
        return err(Code::Internal, format!("{} takes {arity} operands, got {}", op.name(), inputs.len()));
    }
    // `i8` holds quantized weights: it converts and feeds int8 products
    // (also inside a `scan`, which carries it into its body), and nothing
    // else computes with it (no kernel wraps i8 arithmetic).
    if !matches!(op, Op::Cast(_) | Op::QuantMatMul { .. } | Op::Scan(_)) && inputs.iter().any(|t| t.dtype == DType::I8)
    {
        return err(
            Code::DtypeMismatch,
            format!("{} of an i8 tensor: i8 values (quantized weights) only convert with `cast`", op.name()),
        );
    }
    match op {
        Op::Slot { ty, .. } => Ok(ty.clone()),
        Op::Constant { value, ty } => {
            if value.len() != ty.numel() {
                return err(Code::Internal, format!("constant has {} values for {ty}", value.len()));
            }
            Ok(ty.clone())
        }
        Op::Iota { ty, axis } => {
            if *axis >= ty.rank() {
                return err(Code::Axis, format!("iota axis {axis} out of range for {ty}"));
            }
            Ok(ty.clone())
        }
        Op::Random { ty, .. } => {
            if !ty.dtype.is_float() {
                return err(Code::DtypeMismatch, format!("random values must be a float dtype, not {}", ty.dtype));
            }
            if let Some(c) = inputs.first().filter(|c| c.rank() != 0) {
                return err(Code::Internal, format!("the counter of a random op must be a scalar, not {c}"));
            }
            Ok(ty.clone())
        }
        Op::Unary(u) => {
            let t = inputs[0];
            match u {
                UnaryOp::Not if t.dtype != DType::Bool => {
                    err(Code::DtypeMismatch, format!("`not` takes bool, got {}", t.dtype))
                }
                UnaryOp::Not => Ok(t.clone()),
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Relu if t.dtype != DType::Bool => Ok(t.clone()),
                _ if t.dtype.is_float() => Ok(t.clone()),
                _ => err(Code::DtypeMismatch, format!("{} takes a float tensor, got {}", op.name(), t.dtype)),
            }
        }
        Op::Binary(b) => {
            let (x, y) = (inputs[0], inputs[1]);
            if x.dtype != y.dtype {
                return err(Code::DtypeMismatch, format!("{} operands differ in dtype: {x} and {y}", op.name()));
            }
            if x.shape != y.shape {
                return err(Code::Broadcast, format!("{} operands differ in shape: {x} and {y}", op.name()));
            }
            if b.is_logical() != (x.dtype == DType::Bool) {
                return err(Code::DtypeMismatch, format!("{} does not take {} operands", op.name(), x.dtype));
            }
            let dtype = if b.is_comparison() { DType::Bool } else { x.dtype };
            Ok(TensorType::new(dtype, x.shape.clone()))
        }
        Op::Select => {
            let (c, a, b) = (inputs[0], inputs[1], inputs[2]);
            if c.dtype != DType::Bool {
                return err(Code::DtypeMismatch, format!("where: the condition must be bool, got {}", c.dtype));
            }
            if a.dtype != b.dtype {
                return err(Code::DtypeMismatch, format!("where: branches differ in dtype: {a} and {b}"));
            }
            if c.shape != a.shape || a.shape != b.shape {
                return err(Code::Broadcast, format!("where: shapes differ: {c}, {a}, {b}"));
            }
            Ok(a.clone())
        }
        Op::Cast(to) => Ok(TensorType::new(*to, inputs[0].shape.clone())),
        Op::StopGradient => Ok(inputs[0].clone()),
        Op::AllReduce if !matches!(inputs[0].dtype, DType::F32 | DType::F64) => {
            err(Code::DtypeMismatch, format!("all_reduce_sum of {}: sums of f32 or f64 only", inputs[0]))
        }
        Op::AllReduce => Ok(inputs[0].clone()),
        Op::Reduce { op: r, axes, keepdims } => {
            let t = inputs[0];
            check_axes(axes, t.rank())?;
            if t.dtype == DType::Bool || (*r == ReduceOp::Mean && !t.dtype.is_float()) {
                return err(Code::DtypeMismatch, format!("{} does not take {}", op.name(), t.dtype));
            }
            Ok(TensorType::new(t.dtype, reduced_shape(&t.shape, axes, *keepdims)))
        }
        Op::ArgMax { axis, keepdims } => {
            let t = inputs[0];
            check_axes(&[*axis], t.rank())?;
            if t.shape[*axis] == 0 {
                return err(Code::BadValue, format!("argmax over an empty axis of {t}"));
            }
            if t.dtype == DType::Bool {
                return err(Code::DtypeMismatch, "argmax does not take bool");
            }
            Ok(TensorType::new(DType::I32, reduced_shape(&t.shape, &[*axis], *keepdims)))
        }
        Op::CumSum { axis, .. } | Op::ArgSort { axis, .. } => {
            let t = inputs[0];
            check_axes(&[*axis], t.rank())?;
            if t.dtype == DType::Bool {
                return err(Code::DtypeMismatch, format!("{} does not take bool", op.name()));
            }
            let dtype = if matches!(op, Op::ArgSort { .. }) { DType::I32 } else { t.dtype };
            Ok(TensorType::new(dtype, t.shape.clone()))
        }
        Op::Reshape { shape } => {
            let t = inputs[0];
            if shape.iter().product::<usize>() != t.numel() {
                return err(Code::Reshape, format!("cannot reshape {t} ({} elements) to {shape:?}", t.numel()));
            }
            Ok(TensorType::new(t.dtype, shape.clone()))
        }
        Op::Transpose { perm } => {
            let t = inputs[0];
            let mut seen = perm.clone();
            seen.sort_unstable();
            if seen != (0..t.rank()).collect::<Vec<_>>() {
                return err(Code::BadValue, format!("{perm:?} is not a permutation of the {} axes of {t}", t.rank()));
            }
            Ok(TensorType::new(t.dtype, perm.iter().map(|&p| t.shape[p]).collect()))
        }
        Op::BroadcastTo { shape } => {
            let t = inputs[0];
            match broadcast_shapes(&t.shape, shape) {
                Some(s) if &s == shape => Ok(TensorType::new(t.dtype, shape.clone())),
                _ => err(Code::Broadcast, format!("cannot broadcast {t} to {shape:?}")),
            }
        }
        Op::Concat { axis } => {
            let first = inputs[0];
            check_axes(&[*axis], first.rank())?;
            let mut shape = first.shape.clone();
            shape[*axis] = 0;
            for t in inputs {
                let same_outside = t.rank() == first.rank()
                    && t.shape.iter().zip(&first.shape).enumerate().all(|(i, (a, b))| i == *axis || a == b);
                if t.dtype != first.dtype {
                    return err(Code::DtypeMismatch, format!("concat operands differ in dtype: {first} and {t}"));
                }
                if !same_outside {
                    return err(
                        Code::Concat,
                        format!("concat along axis {axis}: {first} and {t} differ outside the axis"),
                    );
                }
                shape[*axis] += t.shape[*axis];
            }
            Ok(TensorType::new(first.dtype, shape))
        }
        Op::Slice { .. } | Op::Pad { .. } => infer_window(op, inputs[0]),
        Op::MatMul => {
            let (a, b) = (inputs[0], inputs[1]);
            if a.dtype != b.dtype {
                return err(Code::DtypeMismatch, format!("matmul operands differ in dtype: {a} and {b}"));
            }
            if a.rank() < 2 || b.rank() < 2 || a.rank() != b.rank() {
                return err(Code::MatmulShape, format!("matmul needs operands of equal rank ≥ 2: {a} @ {b}"));
            }
            let r = a.rank();
            if a.shape[..r - 2] != b.shape[..r - 2] {
                return err(Code::MatmulShape, format!("matmul batch dimensions differ: {a} @ {b}"));
            }
            if a.shape[r - 1] != b.shape[r - 2] {
                return err(
                    Code::MatmulShape,
                    format!("inner dimensions differ: {a} @ {b} ({} ≠ {})", a.shape[r - 1], b.shape[r - 2]),
                );
            }
            let mut shape = a.shape.clone();
            shape[r - 1] = b.shape[r - 1];
            Ok(TensorType::new(a.dtype, shape))
        }
        Op::QuantMatMul { patches } => {
            let (x, w, s) = (inputs[0], inputs[1], inputs[2]);
            let range_fits = inputs.get(3).is_none_or(|r| r.dtype == DType::F32 && r.shape == [2]);
            // The rows the product quantizes (`x`'s, or its patches') and
            // the weights as a `[k, n]` matrix.
            let product = match patches {
                None if x.rank() >= 1 && w.rank() == 2 => Some((x.shape.clone(), [w.shape[0], w.shape[1]])),
                Some(p) if x.rank() == 4 && w.rank() == 4 && w.shape[..3] == [p.kernel[0], p.kernel[1], x.shape[3]] => {
                    p.rows_shape(&x.shape).map(|rows| (rows.to_vec(), [w.shape[..3].iter().product(), w.shape[3]]))
                }
                _ => None,
            };
            let fits = |(rows, [k, n]): &(Vec<usize>, [usize; 2])| {
                x.dtype == DType::F32
                    && w.dtype == DType::I8
                    && s.dtype == DType::F32
                    && rows.last() == Some(k)
                    && s.shape == [*n]
                    && range_fits
            };
            let Some((rows, [_, n])) = product.filter(fits) else {
                let want = match patches {
                    None => "f32[..., k], i8[k, n], f32[n]",
                    Some(_) => "f32[N, H, W, C], i8[KH, KW, C, O] (the window's size), f32[O]",
                };
                return err(
                    Code::MatmulShape,
                    format!(
                        "a quantized product needs {want} and an optional f32[2]: {}",
                        inputs.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
                    ),
                );
            };
            let mut shape = rows[..rows.len() - 1].to_vec();
            shape.push(n);
            Ok(TensorType::new(DType::F32, shape))
        }
        Op::Conv2d { stride, padding, dilation, groups } => {
            let (x, w) = (inputs[0], inputs[1]);
            if x.dtype != w.dtype {
                return err(Code::DtypeMismatch, format!("conv2d operands differ in dtype: {x} and {w}"));
            }
            if x.rank() != 4 || w.rank() != 4 {
                return err(Code::Rank, format!("conv2d takes NHWC input and HWIO weights (rank 4): {x}, {w}"));
            }
            let g = *groups;
            if g == 0 || x.shape[3] % g != 0 || w.shape[3] % g != 0 || x.shape[3] / g != w.shape[2] {
                return err(
                    Code::ConvShape,
                    format!(
                        "conv2d: input channels {} / groups {g} must equal the weights' input channels {}",
                        x.shape[3], w.shape[2]
                    ),
                );
            }
            let h = window_output(x.shape[1], w.shape[0], stride[0], dilation[0], padding[0] + padding[1]);
            let wd = window_output(x.shape[2], w.shape[1], stride[1], dilation[1], padding[2] + padding[3]);
            match (h, wd) {
                (Some(h), Some(wd)) => Ok(TensorType::new(x.dtype, vec![x.shape[0], h, wd, w.shape[3]])),
                _ => err(
                    Code::ConvShape,
                    format!("conv2d: the {}x{} window does not fit the input {x}", w.shape[0], w.shape[1]),
                ),
            }
        }
        Op::Pool2d { size, stride, padding, .. } => {
            let x = inputs[0];
            if x.rank() != 4 {
                return err(Code::Rank, format!("pooling takes NHWC input (rank 4), got {x}"));
            }
            let h = window_output(x.shape[1], size[0], stride[0], 1, padding[0] + padding[1]);
            let w = window_output(x.shape[2], size[1], stride[1], 1, padding[2] + padding[3]);
            match (h, w) {
                (Some(h), Some(w)) if size[0] > padding[0].max(padding[1]) && size[1] > padding[2].max(padding[3]) => {
                    Ok(TensorType::new(x.dtype, vec![x.shape[0], h, w, x.shape[3]]))
                }
                _ => err(
                    Code::ConvShape,
                    format!("pooling: the {}x{} window does not fit the input {x}", size[0], size[1]),
                ),
            }
        }
        Op::OneHot { depth, dtype } => {
            let t = inputs[0];
            if !t.dtype.is_int() {
                return err(Code::DtypeMismatch, format!("one_hot takes integer labels, got {t}"));
            }
            let mut shape = t.shape.clone();
            shape.push(*depth);
            Ok(TensorType::new(*dtype, shape))
        }
        Op::Gather { axis } => {
            let (p, i) = (inputs[0], inputs[1]);
            check_axes(&[*axis], p.rank())?;
            if !i.dtype.is_int() {
                return err(Code::DtypeMismatch, format!("gather indices must be integers, got {i}"));
            }
            let mut shape = p.shape[..*axis].to_vec();
            shape.extend_from_slice(&i.shape);
            shape.extend_from_slice(&p.shape[axis + 1..]);
            Ok(TensorType::new(p.dtype, shape))
        }
        Op::Conv2dGradInput { stride, padding, dilation, groups, input_shape } => {
            let (gy, w) = (inputs[0], inputs[1]);
            let x = TensorType::new(gy.dtype, input_shape.to_vec());
            let forward = Op::Conv2d { stride: *stride, padding: *padding, dilation: *dilation, groups: *groups };
            expect_forward(&forward, &[&x, w], gy, x.clone())
        }
        Op::Conv2dGradFilter { stride, padding, dilation, groups, filter_shape } => {
            let (x, gy) = (inputs[0], inputs[1]);
            let w = TensorType::new(x.dtype, filter_shape.to_vec());
            let forward = Op::Conv2d { stride: *stride, padding: *padding, dilation: *dilation, groups: *groups };
            expect_forward(&forward, &[x, &w], gy, w.clone())
        }
        Op::Pool2dGrad { kind, size, stride, padding } => {
            let (x, gy) = (inputs[0], inputs[1]);
            let forward = Op::Pool2d { kind: *kind, size: *size, stride: *stride, padding: *padding };
            expect_forward(&forward, &[x], gy, x.clone())
        }
        Op::Gradient => {
            let (loss, wrt) = (inputs[0], inputs[1]);
            if loss.rank() != 0 || !loss.dtype.is_float() || !wrt.dtype.is_float() {
                return err(Code::Internal, format!("the gradient of {loss} with respect to {wrt}"));
            }
            Ok(wrt.clone())
        }
        Op::ScatterAdd { axis, dim } => {
            let (i, u) = (inputs[0], inputs[1]);
            if !i.dtype.is_int() {
                return err(Code::DtypeMismatch, format!("scatter_add indices must be integers, got {i}"));
            }
            if u.rank() < axis + i.rank() || u.shape[*axis..axis + i.rank()] != i.shape[..] {
                return err(Code::Internal, format!("scatter_add updates {u} do not match indices {i} at axis {axis}"));
            }
            let mut shape = u.shape[..*axis].to_vec();
            shape.push(*dim);
            shape.extend_from_slice(&u.shape[axis + i.rank()..]);
            Ok(TensorType::new(u.dtype, shape))
        }
        Op::Scan(body) => super::scan::infer(body, inputs).map_err(|m| TypeError { code: Code::Internal, message: m }),
    }
}

/// For a gradient op: checks that the forward op on `forward_inputs` has the
/// type of the incoming gradient `gy`, and returns `result`.
fn expect_forward(
    forward: &Op,
    forward_inputs: &[&TensorType],
    gy: &TensorType,
    result: TensorType,
) -> Result<TensorType, TypeError> {
    let y = infer(forward, forward_inputs)?;
    if &y != gy {
        return err(
            Code::Internal,
            format!("gradient {gy} does not match the forward result {y} of {}", forward.name()),
        );
    }
    Ok(result)
}

fn infer_window(op: &Op, t: &TensorType) -> Result<TensorType, TypeError> {
    match op {
        Op::Slice { start, step, len } => {
            if start.len() != t.rank() || step.len() != t.rank() || len.len() != t.rank() || step.contains(&0) {
                return err(Code::Index, format!("slice attributes do not match {t}"));
            }
            for d in 0..t.rank() {
                let last = start[d] as i64 + (len[d] as i64 - 1) * step[d];
                let inside = |i: i64| i >= 0 && i < t.shape[d] as i64;
                if len[d] > 0 && !(inside(start[d] as i64) && inside(last)) {
                    return err(Code::Index, format!("slice of dimension {d} leaves the bounds of {t}"));
                }
            }
            Ok(TensorType::new(t.dtype, len.clone()))
        }
        Op::Pad { low, high, .. } => {
            if low.len() != t.rank() || high.len() != t.rank() {
                return err(Code::BadValue, format!("pad widths do not match the rank of {t}"));
            }
            let shape = t.shape.iter().zip(low.iter().zip(high)).map(|(d, (l, h))| d + l + h).collect();
            Ok(TensorType::new(t.dtype, shape))
        }
        _ => err(Code::Internal, "not a window op"),
    }
}

fn check_axes(axes: &[usize], rank: usize) -> Result<(), TypeError> {
    for (i, &a) in axes.iter().enumerate() {
        if a >= rank {
            return err(Code::Axis, format!("axis {a} is out of range for a tensor of rank {rank}"));
        }
        if axes[..i].contains(&a) {
            return err(Code::Axis, format!("axis {a} is repeated"));
        }
    }
    Ok(())
}

fn reduced_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// True if the binary op is defined for `dtype` (used for early, friendly errors).
pub fn binary_accepts(op: BinaryOp, dtype: DType) -> bool {
    op.is_logical() == (dtype == DType::Bool)
}
