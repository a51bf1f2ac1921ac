//! ONNX's operators whose values are known while checking: `Constant`,
//! `ConstantOfShape`, `Shape`, `Size`, `Range` and `EyeLike`.
//!
//! Contract: each result is a constant node whose elements the importer
//! knows, so later operators can read it as a shape or an axis;
//! `ConstantOfShape` is a broadcast scalar (no large literal), `Range`
//! holds at most 2^24 elements.
//!
//! Example: `Shape(x: f32[2, 3])` is the `int64` constant `[2, 3]`.

use super::ctx::{Attrs, Ctx, Val};
use crate::diag::{Code, Diagnostic};
use crate::io::onnx::model::{AttrValue, Node};
use crate::ir::{DType, Literal, TensorType};
use crate::tensor::Tensor;

pub const OPS: &[&str] = &["Constant", "ConstantOfShape", "Shape", "Size", "Range", "EyeLike"];

/// Most elements `Range` may make.
const MAX_RANGE: f64 = (1u64 << 24) as f64;

pub fn import(cx: &mut Ctx, n: &Node, ins: &[Option<Val>]) -> Result<Vec<Val>, Diagnostic> {
    let a = Attrs(n);
    let y = match n.op_type.as_str() {
        "Constant" => constant(cx, n)?,
        "ConstantOfShape" => {
            let s = cx.input(ins, 0)?.clone();
            let shape = cx.known_ints(&s, "the shape")?;
            let shape = shape
                .iter()
                .map(|&d| {
                    usize::try_from(d)
                        .ok()
                        .filter(|&d| d <= super::ctx::MAX_ELEMENTS)
                        .ok_or_else(|| cx.invalid(Code::BadValue, format!("a dimension of {d}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let value = match n.attr("value") {
                Some(AttrValue::Tensor(t)) => t.to_tensor().map_err(|e| cx.unsupported(e))?,
                Some(other) => return Err(cx.unsupported(format!("a `value` of type {}", other.type_name()))),
                None => Tensor::from_vec(DType::F32, &[1], vec![0.0f32])?,
            };
            if value.numel() != 1 {
                return Err(cx.invalid(Code::BadValue, "`value` must hold one element"));
            }
            let scalar = cx.constant(Tensor::from_literal(&value.to_literal(), &TensorType::scalar(value.dtype()))?)?;
            cx.broadcast(&scalar, &shape)?
        }
        "Shape" => {
            let x = cx.input(ins, 0)?;
            let rank = x.rank() as i64;
            let bound = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
            let start = bound(a.int(cx, "start", 0)?);
            let end = bound(a.int(cx, "end", rank)?).max(start);
            let dims: Vec<i64> = x.shape()[start..end].iter().map(|&d| d as i64).collect();
            cx.ints(&dims)?
        }
        "Size" => {
            let numel = cx.input(ins, 0)?.ty.numel();
            cx.scalar(numel as f64, DType::I64)?
        }
        "Range" => {
            let mut ends = [0.0; 3];
            for (i, end) in ends.iter_mut().enumerate() {
                let v = cx.input(ins, i)?.clone();
                *end = match cx.known_floats(&v, "a bound of Range")?.as_slice() {
                    [x] => *x,
                    _ => return Err(cx.invalid(Code::BadValue, "Range's inputs must be scalars")),
                };
            }
            let [start, limit, delta] = ends;
            let dtype = cx.input(ins, 0)?.dtype();
            let count = ((limit - start) / delta).ceil().max(0.0);
            if delta == 0.0 || !count.is_finite() || count > MAX_RANGE {
                return Err(cx.unsupported(format!("a Range of {count} elements")));
            }
            let count = count as usize;
            let lit = if dtype.is_float() {
                Literal::Float((0..count).map(|i| start + i as f64 * delta).collect())
            } else {
                Literal::Int((0..count).map(|i| start as i64 + i as i64 * delta as i64).collect())
            };
            cx.constant(Tensor::from_literal(&lit, &TensorType::new(dtype, vec![count]))?)?
        }
        "EyeLike" => {
            let x = cx.input(ins, 0)?.clone();
            let &[rows, cols] = x.shape() else {
                return Err(cx.invalid(Code::Rank, "EyeLike needs a rank-2 input"));
            };
            let dtype = match a.int_opt(cx, "dtype")? {
                Some(t) => crate::io::onnx::model::dtype_of(t as i32).map_err(|e| cx.unsupported(e))?,
                None => x.dtype(),
            };
            let k = a.int(cx, "k", 0)?;
            let ones: Vec<bool> = (0..rows * cols).map(|i| (i % cols) as i64 - (i / cols) as i64 == k).collect();
            let mask = Tensor::from_vec(DType::Bool, &[rows, cols], ones)?;
            let mask = cx.constant(mask)?;
            cx.cast(&mask, dtype)?
        }
        other => return Err(cx.unsupported(format!("operator {other}"))),
    };
    Ok(vec![y])
}

/// `Constant`: a tensor, or one float or int (or a list of them).
fn constant(cx: &mut Ctx, n: &Node) -> Result<Val, Diagnostic> {
    let Some(attr) = n.attributes.first() else {
        return Err(cx.unsupported("a Constant without a value"));
    };
    let t = match (attr.name.as_str(), &attr.value) {
        ("value", AttrValue::Tensor(t)) => t.to_tensor().map_err(|e| cx.unsupported(e))?,
        ("value_float", AttrValue::Float(f)) => Tensor::from_vec(DType::F32, &[], vec![*f])?,
        ("value_floats", AttrValue::Floats(f)) => Tensor::from_vec(DType::F32, &[f.len()], f.clone())?,
        ("value_int", AttrValue::Int(i)) => Tensor::from_vec(DType::I64, &[], vec![*i])?,
        ("value_ints", AttrValue::Ints(i)) => Tensor::from_vec(DType::I64, &[i.len()], i.clone())?,
        (name, v) => return Err(cx.unsupported(format!("a Constant given as `{name}` ({})", v.type_name()))),
    };
    cx.constant(t)
}
