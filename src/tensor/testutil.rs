//! Test helpers: build tensors from plain values and run one op on them the
//! way a program does — a graph whose operands are constants, typed by
//! `ir::infer` as the tracer would, evaluated by `evaluate`.

use super::evaluate;
use super::value::Tensor;
use crate::diag::{Diagnostic, Span};
use crate::ir::{infer::infer, DType, Graph, Literal, Op, TensorType};

pub fn floats(dtype: DType, shape: &[usize], values: &[f64]) -> Tensor {
    Tensor::from_literal(&Literal::Float(values.to_vec()), &TensorType::new(dtype, shape.to_vec())).unwrap()
}

pub fn ints(dtype: DType, shape: &[usize], values: &[i64]) -> Tensor {
    Tensor::from_literal(&Literal::Int(values.to_vec()), &TensorType::new(dtype, shape.to_vec())).unwrap()
}

pub fn bools(shape: &[usize], values: &[bool]) -> Tensor {
    Tensor::from_literal(&Literal::Bool(values.to_vec()), &TensorType::new(DType::Bool, shape.to_vec())).unwrap()
}

/// `op` on `inputs` (each a constant node), typed by `infer` (which must accept it).
pub fn try_run(op: Op, inputs: &[&Tensor]) -> Result<Tensor, Diagnostic> {
    let mut graph = Graph::new();
    let operands: Vec<_> = inputs
        .iter()
        .map(|t| graph.add(Op::Constant { value: t.to_literal(), ty: t.ty() }, &[], t.ty(), Span::default()))
        .collect();
    let types: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty = infer(&op, &refs).unwrap_or_else(|e| panic!("{} does not type-check: {}", op.name(), e.message));
    let name = op.name();
    let id = graph.add(op, &operands, ty.clone(), Span::default());
    let mut values = evaluate(&graph)?;
    let out = values.remove(&id).expect("the op's node has a value");
    assert_eq!(out.ty(), ty, "{name} must produce its inferred type");
    // Constants reproduce their values bit for bit (NaN included).
    let bits = |t: &Tensor| (t.ty(), t.to_f64_vec().into_iter().map(f64::to_bits).collect::<Vec<_>>());
    for (t, id) in inputs.iter().zip(&operands) {
        assert_eq!(bits(&values[id]), bits(t), "constants reproduce their value exactly");
    }
    Ok(out)
}

pub fn run(op: Op, inputs: &[&Tensor]) -> Tensor {
    let name = op.name();
    try_run(op, inputs).unwrap_or_else(|e| panic!("{name} failed: {}", e.message))
}

/// An `f64` tensor of `shape` with standard normal values drawn from `seed`.
pub fn normal(shape: &[usize], seed: u64) -> Tensor {
    floats(DType::F64, shape, &crate::rng::normal(seed, shape.iter().product()))
}

/// The inner product `<a, b>` of two tensors of equal shape, in `f64`.
pub fn dot(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape(), "dot of tensors of different shapes");
    a.to_f64_vec().iter().zip(b.to_f64_vec()).map(|(x, y)| x * y).sum()
}

/// Asserts `a ≈ b` relative to their magnitude (for identities of sums of products).
pub fn assert_near(a: f64, b: f64, what: &str) {
    assert!((a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs())), "{what}: {a} vs {b}");
}
