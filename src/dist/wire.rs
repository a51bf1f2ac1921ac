//! Tensors as the bytes a data-parallel step exchanges between processes,
//! and the one arithmetic the exchange needs (adding two gradients).
//!
//! Contract: `put` then `take` with the same type gives back the same
//! tensor bit for bit (each storage's raw little-endian elements; `f16`
//! and `bf16` travel as the `f32` values that hold them exactly). `add`
//! rounds like the interpreter's `+` of two tensors of their dtype.
//!
//! Example: `put(&t, &mut bytes); take(&t.ty(), &bytes, &mut 0)` is `t`.

use crate::diag::Diagnostic;
use crate::ir::TensorType;
use crate::tensor::{Data, Tensor};
use ndarray::ArrayD;

/// Appends `t`'s elements to `out`.
pub fn put(t: &Tensor, out: &mut Vec<u8>) {
    match t.data() {
        Data::F32(a) => a.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Data::F64(a) => a.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Data::I32(a) => a.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Data::I64(a) => a.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Data::Bool(a) => a.iter().for_each(|&v| out.push(u8::from(v))),
    }
}

/// The bytes `put` writes for a tensor of type `ty`.
pub fn size_of(ty: &TensorType) -> usize {
    use crate::ir::DType::*;
    let each = match ty.dtype {
        F32 | F16 | BF16 | I32 | I8 => 4,
        F64 | I64 => 8,
        Bool => 1,
    };
    each * ty.numel()
}

/// The tensor of type `ty` whose elements start at `bytes[*at]`; moves
/// `at` past them.
pub fn take(ty: &TensorType, bytes: &[u8], at: &mut usize) -> Result<Tensor, Diagnostic> {
    use crate::ir::DType::*;
    let end = *at + size_of(ty);
    let Some(raw) = bytes.get(*at..end) else {
        return Err(Diagnostic::internal(format!("dist: a message ends before its {ty} tensor")));
    };
    *at = end;
    fn array<T, const N: usize>(shape: &[usize], raw: &[u8], f: fn([u8; N]) -> T) -> Result<ArrayD<T>, Diagnostic> {
        let values = raw.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect();
        ArrayD::from_shape_vec(shape.to_vec(), values).map_err(|e| Diagnostic::internal(e.to_string()))
    }
    let data = match ty.dtype {
        F32 | F16 | BF16 => Data::F32(array(&ty.shape, raw, f32::from_le_bytes)?),
        F64 => Data::F64(array(&ty.shape, raw, f64::from_le_bytes)?),
        I32 | I8 => Data::I32(array(&ty.shape, raw, i32::from_le_bytes)?),
        I64 => Data::I64(array(&ty.shape, raw, i64::from_le_bytes)?),
        Bool => Data::Bool(array(&ty.shape, raw, |[b]: [u8; 1]| b != 0)?),
    };
    Tensor::new(ty.dtype, data)
}

/// `a + b` for two float tensors of one type (gradients).
pub fn add(a: Tensor, b: &Tensor) -> Result<Tensor, Diagnostic> {
    let dtype = a.dtype();
    if b.ty() != a.ty() {
        return Err(Diagnostic::internal(format!("dist: adding {} and {}", a.ty(), b.ty())));
    }
    let data = match (a.data().clone(), b.data()) {
        (Data::F32(x), Data::F32(y)) => Data::F32(x + y),
        (Data::F64(x), Data::F64(y)) => Data::F64(x + y),
        _ => return Err(Diagnostic::internal(format!("dist: gradients of {dtype} cannot be summed"))),
    };
    // Rounds f16 and bf16 sums to their type, as the interpreter does.
    Tensor::new(dtype, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Literal};

    #[test]
    fn tensors_travel_bit_for_bit() {
        let cases = [
            (DType::F32, Literal::Float(vec![1.5, -0.0, f64::from(f32::MIN_POSITIVE), 3e38])),
            (DType::F64, Literal::Float(vec![0.1, -2.0, 1e300, 5e-324])),
            (DType::BF16, Literal::Float(vec![1.0, 0.1])),
            (DType::I64, Literal::Int(vec![i64::MAX, -1, 0, 7])),
            (DType::Bool, Literal::Bool(vec![true, false, true, true])),
        ];
        for (dtype, lit) in cases {
            let ty = TensorType::new(dtype, vec![lit.len()]);
            let t = Tensor::from_literal(&lit, &ty).unwrap();
            let mut bytes = vec![9];
            put(&t, &mut bytes);
            assert_eq!(bytes.len(), 1 + size_of(&ty));
            let mut at = 1;
            assert_eq!(take(&ty, &bytes, &mut at).unwrap(), t);
            assert_eq!(at, bytes.len());
            assert!(take(&ty, &bytes, &mut at).is_err(), "reads past the end");
        }
    }

    #[test]
    fn sums_round_to_the_gradient_dtype() {
        let ty = TensorType::new(DType::BF16, vec![1]);
        let one = Tensor::from_literal(&Literal::Float(vec![1.0]), &ty).unwrap();
        let tiny = Tensor::from_literal(&Literal::Float(vec![1.0 / 512.0]), &ty).unwrap();
        assert_eq!(add(one.clone(), &tiny).unwrap(), one);
        let i = Tensor::from_literal(&Literal::Int(vec![1]), &TensorType::new(DType::I32, vec![1])).unwrap();
        assert!(add(i.clone(), &i).is_err());
    }
}
