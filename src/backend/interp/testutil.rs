//! Test helpers: build tensors from plain values and run one op on them,
//! with the result type computed by `ir::infer` as the tracer would.

use super::eval_node;
use super::tensor::Tensor;
use crate::diag::Diagnostic;
use crate::ir::{infer::infer, DType, Literal, Op, TensorType};

pub fn floats(dtype: DType, shape: &[usize], values: &[f64]) -> Tensor {
    Tensor::from_literal(&Literal::Float(values.to_vec()), &TensorType::new(dtype, shape.to_vec())).unwrap()
}

pub fn ints(dtype: DType, shape: &[usize], values: &[i64]) -> Tensor {
    Tensor::from_literal(&Literal::Int(values.to_vec()), &TensorType::new(dtype, shape.to_vec())).unwrap()
}

pub fn bools(shape: &[usize], values: &[bool]) -> Tensor {
    Tensor::from_literal(&Literal::Bool(values.to_vec()), &TensorType::new(DType::Bool, shape.to_vec())).unwrap()
}

/// `op` on `inputs`, typed by `infer` (which must accept it).
pub fn try_run(op: Op, inputs: &[&Tensor]) -> Result<Tensor, Diagnostic> {
    let types: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty = infer(&op, &refs).unwrap_or_else(|e| panic!("{} does not type-check: {}", op.name(), e.message));
    let out = eval_node(&op, inputs, &ty)?;
    assert_eq!(out.ty(), ty, "{} must produce its inferred type", op.name());
    Ok(out)
}

pub fn run(op: Op, inputs: &[&Tensor]) -> Tensor {
    let name = op.name();
    try_run(op, inputs).unwrap_or_else(|e| panic!("{name} failed: {}", e.message))
}
