//! Values and the meaning of every op: the host tensor type (`value`) and
//! `eval_node`, which computes one op with plain, obviously correct loops.
//! Every layer may use it — the passes fold constants with it, the
//! reference interpreter (`backend::interp`) runs whole regions with it,
//! the CPU backend runs it for the kernels it has no native code for — so
//! it is the definition of what each op computes, and clarity wins over
//! speed.
//!
//! Contract:
//! - `eval_node` computes one op; its result has exactly the type `ir::infer`
//!   gives (anything else is an internal error). Failures that depend on
//!   data (an out-of-range gather index, integer division by zero) are
//!   `Code::Runtime` (E0402) diagnostics, never panics.
//! - `evaluate` runs a whole graph in `Graph::topo_order` and labels runtime
//!   diagnostics with the span of the failing node.
//!
//! Semantic choices where the op docs are silent (each module's doc gives
//! details): floats compute in their storage type, `f16`/`bf16` in `f32`
//! and rounded (nearest even) after every op; integer arithmetic wraps and
//! `/` is floor division (NumPy `floor_divide`) with division by zero an
//! error; float → int casts truncate and saturate; reductions, matmul and
//! conv2d accumulate in the storage type in a fixed row-major order; pooling
//! ignores padded positions.
//!
//! Example:
//! ```
//! use tfc::tensor::{eval_node, Tensor};
//! use tfc::ir::{DType, Literal, Op, TensorType, UnaryOp};
//! let ty = TensorType::new(DType::F32, vec![2]);
//! let x = Tensor::from_literal(&Literal::Float(vec![-1.0, 2.0]), &ty).unwrap();
//! let y = eval_node(&Op::Unary(UnaryOp::Relu), &[&x], &ty).unwrap();
//! assert_eq!(y.to_f64_vec(), vec![0.0, 2.0]);
//! ```

#[macro_use]
mod value;
pub mod along;
mod creation;
mod elementwise;
pub mod host;

pub mod index_ops;
pub mod quant;
mod linalg;
mod pool;
mod reduce;
pub mod scan;
pub mod shape_ops;
#[cfg(test)]
mod testutil;

pub use creation::random_at;
pub use elementwise::{f32_binary, f32_unary, f64_binary, f64_unary, fallible_int_binary};
pub use linalg::{conv2d_grad_filter_into, conv2d_grad_input_into, conv2d_into, matmul_into, ConvParams};
pub use pool::{pool_grad_slices, pool_slices, PoolParams};
pub use reduce::{argmax_lanes, mean_error, reduce_combine, reduce_identity};
pub(crate) use value::with_dtype;
pub use value::{flat, floor_div, floor_mod, scalar_for, strides, unravel, Data, Elem, FromScalar, Tensor};

use crate::diag::Diagnostic;
use crate::ir::{Graph, NodeId, Op, TensorType};
use std::collections::HashMap;

/// The value of every node of a graph after `evaluate`.
pub type Values = HashMap<NodeId, Tensor>;

/// Whether node `n` of `g` is a constant whose every element is `+0.0`
/// (a ReLU's or a mask's zero, which a convolution's post-ops apply).
pub fn is_positive_zero_constant(g: &crate::ir::Graph, n: crate::ir::NodeId) -> bool {
    let node = g.node(n);
    let value = matches!(node.op, Op::Constant { .. }).then(|| eval_node(&node.op, &[], &node.ty).ok()).flatten();
    value.is_some_and(|v| v.to_f64_vec().iter().all(|x| x.to_bits() == 0))
}

/// Computes `op` on `inputs` (in operand order); the result has type `ty`.
pub fn eval_node(op: &Op, inputs: &[&Tensor], ty: &TensorType) -> Result<Tensor, Diagnostic> {
    let arity = crate::ir::infer::arity(op, inputs.len());
    if inputs.len() != arity {
        return Err(Diagnostic::internal(format!("{} takes {arity} operands, got {}", op.name(), inputs.len())));
    }
    let data = match op {
        Op::Constant { value, ty: cty } => Tensor::from_literal(value, cty)?.data().clone(),
        Op::Iota { ty: ity, axis } => creation::iota(ity, *axis)?.data().clone(),
        Op::Random { ty: rty, dist, seed } => {
            let counter = inputs.first().and_then(|c| c.to_f64_vec().first().copied());
            creation::random(rty, *dist, crate::ir::random_seed(*seed, counter))?.data().clone()
        }
        Op::Unary(u) => elementwise::unary(*u, inputs[0])?,
        Op::Binary(b) => elementwise::binary(*b, inputs[0], inputs[1])?,
        Op::Select => elementwise::select(inputs[0], inputs[1], inputs[2])?,
        Op::Cast(to) => elementwise::cast(inputs[0], *to)?,
        // One process's sum over the processes (a backend given the
        // other processes' collectives runs them instead).
        Op::StopGradient | Op::AllReduce => return Ok(inputs[0].clone()),
        Op::Reduce { op, axes, .. } => reduce::reduce(*op, inputs[0], axes, &ty.shape)?,
        Op::ArgMax { axis, .. } => reduce::argmax(inputs[0], *axis, &ty.shape)?,
        Op::CumSum { axis, reverse } => along::cumsum(inputs[0], *axis, *reverse)?,
        Op::ArgSort { axis, descending } => along::argsort(inputs[0], *axis, *descending)?,
        Op::Reshape { shape } => shape_ops::reshape(inputs[0], shape)?,
        Op::Transpose { perm } => shape_ops::transpose(inputs[0], perm)?,
        Op::BroadcastTo { shape } => shape_ops::broadcast_to(inputs[0], shape)?,
        Op::Concat { axis } => shape_ops::concat(inputs, *axis)?,
        Op::Slice { start, step, len } => index_ops::slice(inputs[0], start, step, len)?,
        Op::Pad { low, high, value } => index_ops::pad(inputs[0], low, high, *value)?,
        Op::MatMul => linalg::matmul(inputs[0], inputs[1])?,
        Op::QuantMatMul { patches } => {
            quant::quant_matmul(inputs[0], inputs[1], inputs[2], inputs.get(3).copied(), patches.as_ref())?
        }
        Op::Conv2d { stride, padding, dilation, groups } => {
            let params =
                linalg::ConvParams { stride: *stride, padding: *padding, dilation: *dilation, groups: *groups };
            linalg::conv2d(inputs[0], inputs[1], params, &ty.shape)?
        }
        Op::Pool2d { kind, size, stride, padding } => {
            let params = pool::PoolParams { kind: *kind, size: *size, stride: *stride, padding: *padding };
            pool::pool2d(inputs[0], params, &ty.shape)?
        }
        Op::OneHot { depth, dtype } => index_ops::one_hot(inputs[0], *depth, *dtype)?,
        Op::Gather { axis } => index_ops::gather(inputs[0], inputs[1], *axis)?,
        Op::Slot { slot, .. } => {
            return Err(Diagnostic::internal(format!(
                "interpreter: slot {slot} has no value (it is bound by the runtime)"
            )))
        }
        Op::Conv2dGradInput { stride, padding, dilation, groups, input_shape } => {
            let params =
                linalg::ConvParams { stride: *stride, padding: *padding, dilation: *dilation, groups: *groups };
            linalg::conv2d_grad_input(inputs[0], inputs[1], params, input_shape)?
        }
        Op::Conv2dGradFilter { stride, padding, dilation, groups, filter_shape } => {
            let params =
                linalg::ConvParams { stride: *stride, padding: *padding, dilation: *dilation, groups: *groups };
            linalg::conv2d_grad_filter(inputs[0], inputs[1], params, filter_shape)?
        }
        Op::Pool2dGrad { kind, size, stride, padding } => {
            let params = pool::PoolParams { kind: *kind, size: *size, stride: *stride, padding: *padding };
            pool::pool2d_grad(inputs[0], inputs[1], params)?
        }
        Op::ScatterAdd { axis, dim } => index_ops::scatter_add(inputs[0], inputs[1], *axis, *dim)?,
        Op::Scan(body) => scan::scan(body, inputs, ty)?,
        // Replaced before anything runs (the `autodiff` pass).
        Op::Gradient => return Err(Diagnostic::internal("a gradient request reached the interpreter")),
    };
    let out = Tensor::new(ty.dtype, data)?;
    if out.shape() != ty.shape.as_slice() {
        return Err(Diagnostic::internal(format!(
            "interpreter: {} produced shape {:?} instead of {ty}",
            op.name(),
            out.shape()
        )));
    }
    Ok(out)
}

/// Evaluates every node of `graph` in topological order. A failing node's
/// diagnostic is labelled with that node's span.
pub fn evaluate(graph: &Graph) -> Result<Values, Diagnostic> {
    let order = graph.topo_order();
    if order.len() != graph.node_count() {
        return Err(Diagnostic::internal("interpreter: the graph has a cycle"));
    }
    let mut values = Values::with_capacity(order.len());
    for id in order {
        let node = graph.node(id);
        let operands = graph.inputs(id);
        let inputs = operands
            .iter()
            .map(|i| {
                values.get(i).ok_or_else(|| Diagnostic::internal(format!("interpreter: operand {i:?} has no value")))
            })
            .collect::<Result<Vec<&Tensor>, _>>()?;
        let value = eval_node(&node.op, &inputs, &node.ty)
            .map_err(|d| d.label(node.span, format!("while computing this `{}`", node.op.name())))?;
        values.insert(id, value);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::testutil::{bools, floats, ints, run, try_run};
    use super::*;
    use crate::diag::{Code, Span};
    use crate::ir::{infer::infer, BinaryOp, DType, Literal, UnaryOp};

    fn unary(op: UnaryOp, x: &Tensor) -> Vec<f64> {
        run(Op::Unary(op), &[x]).to_f64_vec()
    }

    fn binary(op: BinaryOp, x: &Tensor, y: &Tensor) -> Vec<f64> {
        run(Op::Binary(op), &[x, y]).to_f64_vec()
    }

    #[test]
    fn float_unary_ops() {
        let x = floats(DType::F64, &[4], &[-2.0, -0.5, 0.0, 4.0]);
        assert_eq!(unary(UnaryOp::Neg, &x), vec![2.0, 0.5, 0.0, -4.0]);
        assert_eq!(unary(UnaryOp::Abs, &x), vec![2.0, 0.5, 0.0, 4.0]);
        assert_eq!(unary(UnaryOp::Relu, &x), vec![0.0, 0.0, 0.0, 4.0]);
        assert_eq!(unary(UnaryOp::Sign, &x), vec![-1.0, -1.0, 0.0, 1.0]);
        assert_eq!(unary(UnaryOp::Floor, &x), vec![-2.0, -1.0, 0.0, 4.0]);
        let p = floats(DType::F64, &[2], &[4.0, 0.25]);
        assert_eq!(unary(UnaryOp::Sqrt, &p), vec![2.0, 0.5]);
        assert_eq!(unary(UnaryOp::Rsqrt, &p), vec![0.5, 2.0]);
        let z = floats(DType::F64, &[1], &[0.0]);
        assert_eq!(unary(UnaryOp::Sigmoid, &z), vec![0.5]);
        assert_eq!(unary(UnaryOp::Exp, &z), vec![1.0]);
        assert_eq!(unary(UnaryOp::Cos, &z), vec![1.0]);
        assert_eq!(unary(UnaryOp::Sin, &z), vec![0.0]);
        assert_eq!(unary(UnaryOp::Tanh, &z), vec![0.0]);
        assert_eq!(unary(UnaryOp::Log, &floats(DType::F64, &[1], &[1.0])), vec![0.0]);
        // sigmoid(2) = 1 / (1 + e^-2) = 0.8807970779778823 (f64).
        assert_eq!(unary(UnaryOp::Sigmoid, &floats(DType::F64, &[1], &[2.0])), vec![0.8807970779778823]);
        // Large negative inputs saturate to 0 rather than producing NaN.
        assert_eq!(unary(UnaryOp::Sigmoid, &floats(DType::F32, &[1], &[-1000.0])), vec![0.0]);
        let n = unary(UnaryOp::Relu, &floats(DType::F32, &[1], &[f64::NAN]));
        assert!(n[0].is_nan());
    }

    #[test]
    fn integer_and_bool_unary_ops() {
        let x = ints(DType::I32, &[3], &[-3, 0, i32::MIN as i64]);
        assert_eq!(unary(UnaryOp::Neg, &x), vec![3.0, 0.0, i32::MIN as f64]);
        assert_eq!(unary(UnaryOp::Sign, &x), vec![-1.0, 0.0, -1.0]);
        assert_eq!(unary(UnaryOp::Relu, &x), vec![0.0, 0.0, 0.0]);
        assert_eq!(unary(UnaryOp::Abs, &ints(DType::I64, &[1], &[-5])), vec![5.0]);
        assert_eq!(unary(UnaryOp::Not, &bools(&[2], &[true, false])), vec![0.0, 1.0]);
    }

    #[test]
    fn binary_arithmetic_and_nan_propagating_extrema() {
        let x = floats(DType::F32, &[4], &[1.0, -2.0, f64::NAN, 3.0]);
        let y = floats(DType::F32, &[4], &[2.0, 5.0, 1.0, 0.0]);
        assert_eq!(binary(BinaryOp::Add, &x, &y)[..2], [3.0, 3.0]);
        assert_eq!(binary(BinaryOp::Sub, &x, &y)[..2], [-1.0, -7.0]);
        assert_eq!(binary(BinaryOp::Mul, &x, &y)[..2], [2.0, -10.0]);
        assert_eq!(binary(BinaryOp::Div, &x, &y)[3], f64::INFINITY);
        assert_eq!(binary(BinaryOp::Pow, &x, &y)[..2], [1.0, -32.0]);
        let mx = binary(BinaryOp::Maximum, &x, &y);
        assert_eq!((mx[0], mx[1], mx[3]), (2.0, 5.0, 3.0));
        assert!(mx[2].is_nan());
        let mn = binary(BinaryOp::Minimum, &x, &y);
        assert_eq!((mn[0], mn[1], mn[3]), (1.0, -2.0, 0.0));
        assert!(mn[2].is_nan());
    }

    #[test]
    fn comparisons_give_bool_and_nan_compares_false() {
        let x = floats(DType::F64, &[3], &[1.0, 2.0, f64::NAN]);
        let y = floats(DType::F64, &[3], &[2.0, 2.0, f64::NAN]);
        let cmp = |op| {
            let t = run(Op::Binary(op), &[&x, &y]);
            assert_eq!(t.dtype(), DType::Bool);
            t.to_f64_vec()
        };
        assert_eq!(cmp(BinaryOp::Eq), vec![0.0, 1.0, 0.0]);
        assert_eq!(cmp(BinaryOp::Ne), vec![1.0, 0.0, 1.0]);
        assert_eq!(cmp(BinaryOp::Lt), vec![1.0, 0.0, 0.0]);
        assert_eq!(cmp(BinaryOp::Le), vec![1.0, 1.0, 0.0]);
        assert_eq!(cmp(BinaryOp::Gt), vec![0.0, 0.0, 0.0]);
        assert_eq!(cmp(BinaryOp::Ge), vec![0.0, 1.0, 0.0]);
        let (p, q) = (bools(&[4], &[true, true, false, false]), bools(&[4], &[true, false, true, false]));
        assert_eq!(binary(BinaryOp::And, &p, &q), vec![1.0, 0.0, 0.0, 0.0]);
        assert_eq!(binary(BinaryOp::Or, &p, &q), vec![1.0, 1.0, 1.0, 0.0]);
    }

    #[test]
    fn integer_division_floors_and_pow_wraps() {
        // NumPy: np.floor_divide([7, -7, 7, -7], [2, 2, -2, -2]) == [3, -4, -4, 3].
        let x = ints(DType::I32, &[4], &[7, -7, 7, -7]);
        let y = ints(DType::I32, &[4], &[2, 2, -2, -2]);
        assert_eq!(binary(BinaryOp::Div, &x, &y), vec![3.0, -4.0, -4.0, 3.0]);
        assert_eq!(
            binary(BinaryOp::Pow, &ints(DType::I64, &[2], &[3, 2]), &ints(DType::I64, &[2], &[4, 0])),
            vec![81.0, 1.0]
        );
        // Overflow wraps: 2^31 in i32 is i32::MIN.
        assert_eq!(
            binary(BinaryOp::Pow, &ints(DType::I32, &[1], &[2]), &ints(DType::I32, &[1], &[31])),
            vec![-2147483648.0]
        );
        assert_eq!(
            binary(BinaryOp::Add, &ints(DType::I32, &[1], &[i32::MAX as i64]), &ints(DType::I32, &[1], &[1])),
            vec![i32::MIN as f64]
        );
    }

    #[test]
    fn integer_division_by_zero_is_a_runtime_error() {
        let x = ints(DType::I64, &[2], &[1, 5]);
        let y = ints(DType::I64, &[2], &[1, 0]);
        let e = try_run(Op::Binary(BinaryOp::Div), &[&x, &y]).unwrap_err();
        assert_eq!(e.code, Code::Runtime);
        assert!(e.message.contains("division by zero"), "{}", e.message);
        let e = try_run(Op::Binary(BinaryOp::Pow), &[&x, &ints(DType::I64, &[2], &[1, -1])]).unwrap_err();
        assert_eq!(e.code, Code::Runtime);
    }

    #[test]
    fn select_picks_by_condition() {
        let c = bools(&[3], &[true, false, true]);
        let a = ints(DType::I32, &[3], &[1, 2, 3]);
        let b = ints(DType::I32, &[3], &[-1, -2, -3]);
        assert_eq!(run(Op::Select, &[&c, &a, &b]).to_f64_vec(), vec![1.0, -2.0, 3.0]);
    }

    #[test]
    fn casts_truncate_saturate_and_round() {
        let x = floats(DType::F32, &[6], &[2.7, -2.7, 1e10, -1e10, f64::NAN, 0.0]);
        // Float → int truncates toward zero and saturates; NaN becomes 0.
        let i = run(Op::Cast(DType::I32), &[&x]);
        assert_eq!(i.to_f64_vec(), vec![2.0, -2.0, i32::MAX as f64, i32::MIN as f64, 0.0, 0.0]);
        // Number → bool is `!= 0`, NaN included.
        assert_eq!(run(Op::Cast(DType::Bool), &[&x]).to_f64_vec(), vec![1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
        assert_eq!(run(Op::Cast(DType::F32), &[&bools(&[2], &[true, false])]).to_f64_vec(), vec![1.0, 0.0]);
        // Int → int wraps: 2^32 + 5 in i32 is 5.
        assert_eq!(run(Op::Cast(DType::I32), &[&ints(DType::I64, &[1], &[(1 << 32) + 5])]).to_f64_vec(), vec![5.0]);
        // f64 → f32 rounds to nearest: 0.1 becomes 0.1f32.
        let d = run(Op::Cast(DType::F32), &[&floats(DType::F64, &[1], &[0.1])]);
        assert_eq!(d.to_f64_vec(), vec![f64::from(0.1f32)]);
    }

    #[test]
    fn half_precision_results_are_rounded_after_every_op() {
        // 2049 is not an f16 (spacing 2 above 2048): the cast ties to even, 2048.
        let x = ints(DType::I32, &[2], &[2049, 2051]);
        let h = run(Op::Cast(DType::F16), &[&x]);
        assert_eq!(h.to_f64_vec(), vec![2048.0, 2052.0]);
        // 2048 + 1 in f16 rounds back to 2048 (computed in f32, then rounded).
        let one = floats(DType::F16, &[2], &[1.0, 1.0]);
        assert_eq!(binary(BinaryOp::Add, &h, &one), vec![2048.0, 2052.0]);
        // bf16 keeps 8 significant bits: 257 → 256, 1/3 → 0.333984375.
        let b = run(Op::Cast(DType::BF16), &[&floats(DType::F64, &[2], &[257.0, 1.0 / 3.0])]);
        assert_eq!(b.to_f64_vec(), vec![256.0, 0.333984375]);
        // f64 → f16 rounds once: 1 + 2^-11 + 2^-40 lies just above a tie.
        let c = run(Op::Cast(DType::F16), &[&floats(DType::F64, &[1], &[1.0 + 2f64.powi(-11) + 2f64.powi(-40)])]);
        assert_eq!(c.to_f64_vec(), vec![1.0 + 2f64.powi(-10)]);
    }

    #[test]
    fn evaluate_labels_runtime_errors_with_the_node_span() {
        let mut g = Graph::new();
        let ity = TensorType::new(DType::I32, vec![1]);
        let x =
            g.add(Op::Constant { value: Literal::Int(vec![1]), ty: ity.clone() }, &[], ity.clone(), Span::default());
        let z =
            g.add(Op::Constant { value: Literal::Int(vec![0]), ty: ity.clone() }, &[], ity.clone(), Span::default());
        let op = Op::Binary(BinaryOp::Div);
        let ty = infer(&op, &[&ity, &ity]).unwrap();
        let span = Span::new(crate::diag::FileId(0), 4, 9);
        g.add(op, &[x, z], ty, span);
        let e = evaluate(&g).unwrap_err();
        assert_eq!((e.code, e.span()), (Code::Runtime, Some(span)));
    }
}
