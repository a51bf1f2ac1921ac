//! Test-only helpers for building small graphs by hand: nodes typed by
//! `infer`, so a test states only the ops and their operands.

use super::infer::infer;
use super::{DType, Graph, Literal, NodeId, Op, TensorType};
use crate::diag::Span;

pub fn f32s(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

/// A float constant of the given shape holding `values`.
pub fn constant(g: &mut Graph, values: &[f64], shape: &[usize]) -> NodeId {
    let ty = f32s(shape);
    let op = Op::Constant { value: Literal::Float(values.to_vec()), ty: ty.clone() };
    g.add(op, &[], ty, Span::default())
}

/// A float constant of `shape` filled with `0, 1, 2, …`.
pub fn counting(g: &mut Graph, shape: &[usize]) -> NodeId {
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n).map(|i| i as f64).collect();
    constant(g, &values, shape)
}

/// Adds `op` typed by `infer`; panics (in a test) if the operands do not fit.
pub fn node(g: &mut Graph, op: Op, inputs: &[NodeId]) -> NodeId {
    let types: Vec<TensorType> = inputs.iter().map(|&i| g.node(i).ty.clone()).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty = match infer(&op, &refs) {
        Ok(ty) => ty,
        Err(e) => panic!("test graph is ill-typed: {}", e.message),
    };
    g.add(op, inputs, ty, Span::default())
}
