//! Tensors as the bytes a data-parallel step exchanges between processes,
//! and the one arithmetic the exchange needs (adding two gradients).
//!
//! Contract: `put` then `take` with the same type gives back the same
//! tensor bit for bit (each storage's raw little-endian elements; `f16`
//! and `bf16` travel as the `f32` values that hold them exactly).
//! `add_into` sums such bytes in place, rounding like the interpreter's
//! `+` of two tensors of their dtype.
//!
//! Example: `put(&t, &mut bytes); take(&t.ty(), &bytes, &mut 0)` is `t`.

use crate::diag::Diagnostic;
use crate::ir::TensorType;
use crate::tensor::{Data, Tensor};
use ndarray::ArrayD;

/// Appends `t`'s elements to `out`.
pub fn put(t: &Tensor, out: &mut Vec<u8>) {
    /// Each element's bytes into place (a loop the compiler vectorizes;
    /// extending the vector element by element is ten times slower).
    fn each<T: Copy, const N: usize>(values: &ArrayD<T>, out: &mut Vec<u8>, bytes: fn(T) -> [u8; N]) {
        let start = out.len();
        out.resize(start + N * values.len(), 0);
        let slots = out[start..].chunks_exact_mut(N);
        // Tensors are in standard layout (`Tensor`'s contract): a slice,
        // whose iterator is far faster than a many-axis one.
        match values.as_slice() {
            Some(flat) => slots.zip(flat).for_each(|(slot, &v)| slot.copy_from_slice(&bytes(v))),
            None => slots.zip(values.iter()).for_each(|(slot, &v)| slot.copy_from_slice(&bytes(v))),
        }
    }
    // Standard layout on a little-endian machine: the bytes as they lie.
    if let (Some(bytes), true) = (plain_bytes(t.data()), cfg!(target_endian = "little")) {
        out.extend_from_slice(bytes);
        return;
    }
    match t.data() {
        Data::F32(a) => each(a, out, f32::to_le_bytes),
        Data::F64(a) => each(a, out, f64::to_le_bytes),
        Data::I32(a) => each(a, out, i32::to_le_bytes),
        Data::I64(a) => each(a, out, i64::to_le_bytes),
        Data::Bool(a) => each(a, out, |v| [u8::from(v)]),
    }
}

/// The bytes of a standard-layout float or integer array, as they lie in
/// memory (`None` for bools, whose bytes are not all valid).
fn plain_bytes(data: &Data) -> Option<&[u8]> {
    fn raw<T>(values: &[T]) -> &[u8] {
        // SAFETY: `T` is a primitive number (no padding); reading its
        // bytes is always valid.
        unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
    }
    match data {
        Data::F32(a) => a.as_slice().map(raw),
        Data::F64(a) => a.as_slice().map(raw),
        Data::I32(a) => a.as_slice().map(raw),
        Data::I64(a) => a.as_slice().map(raw),
        Data::Bool(_) => None,
    }
}

/// Numbers copied from their little-endian bytes on a little-endian
/// machine: one `memcpy`.
fn copied<T: Copy + Default>(raw: &[u8]) -> Vec<T> {
    let mut out = vec![T::default(); raw.len() / std::mem::size_of::<T>()];
    // SAFETY: `out` holds exactly the bytes copied (a whole number of
    // `T`s, all bit patterns of which are valid: f32 or f64).
    unsafe {
        std::ptr::copy_nonoverlapping(raw.as_ptr(), out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(&out[..]))
    };
    out
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
    let little = cfg!(target_endian = "little");
    let data = match ty.dtype {
        F32 | F16 | BF16 if little => Data::F32(
            ArrayD::from_shape_vec(ty.shape.clone(), copied(raw)).map_err(|e| Diagnostic::internal(e.to_string()))?,
        ),
        F64 if little => Data::F64(
            ArrayD::from_shape_vec(ty.shape.clone(), copied(raw)).map_err(|e| Diagnostic::internal(e.to_string()))?,
        ),
        F32 | F16 | BF16 => Data::F32(array(&ty.shape, raw, f32::from_le_bytes)?),
        F64 => Data::F64(array(&ty.shape, raw, f64::from_le_bytes)?),
        I32 | I8 => Data::I32(array(&ty.shape, raw, i32::from_le_bytes)?),
        I64 => Data::I64(array(&ty.shape, raw, i64::from_le_bytes)?),
        Bool => Data::Bool(array(&ty.shape, raw, |[b]: [u8; 1]| b != 0)?),
    };
    Tensor::new(ty.dtype, data)
}

/// Adds the elements of a tensor of type `dtype` that `put` wrote to
/// `src` into those at `dst`, rounding like the interpreter's `+`.
pub fn add_into(dtype: crate::ir::DType, dst: &mut [u8], src: &[u8]) -> Result<(), Diagnostic> {
    use crate::half::{round_bf16, round_f16};
    use crate::ir::DType::*;
    fn each<const N: usize, T>(
        dst: &mut [u8],
        src: &[u8],
        from: fn([u8; N]) -> T,
        to: fn(T) -> [u8; N],
        add: impl Fn(T, T) -> T,
    ) {
        for (d, s) in dst.chunks_exact_mut(N).zip(src.chunks_exact(N)) {
            let (a, b) = (from(d.try_into().unwrap_or([0; N])), from(s.try_into().unwrap_or([0; N])));
            d.copy_from_slice(&to(add(a, b)));
        }
    }
    // f32 elements that start 4-aligned are added as f32s (a loop the
    // compiler vectorizes); otherwise byte-wise below.
    if dtype == F32
        && cfg!(target_endian = "little")
        && (dst.as_ptr() as usize).is_multiple_of(4)
        && src.len() == dst.len()
    {
        // SAFETY: every bit pattern is an f32, and `dst` starts aligned, so
        // the prefix is empty and the elements line up.
        let (_, body, tail) = unsafe { dst.align_to_mut::<f32>() };
        let (src_body, src_tail) = src.split_at(4 * body.len());
        for (d, s) in body.iter_mut().zip(src_body.chunks_exact(4)) {
            *d += f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        }
        each(tail, src_tail, f32::from_le_bytes, f32::to_le_bytes, |a, b| a + b);
        return Ok(());
    }
    match dtype {
        F32 => each(dst, src, f32::from_le_bytes, f32::to_le_bytes, |a, b| a + b),
        BF16 => each(dst, src, f32::from_le_bytes, f32::to_le_bytes, |a, b| round_bf16(a + b)),
        F16 => each(dst, src, f32::from_le_bytes, f32::to_le_bytes, |a, b| round_f16(a + b)),
        F64 => each(dst, src, f64::from_le_bytes, f64::to_le_bytes, |a, b| a + b),
        _ => return Err(Diagnostic::internal(format!("dist: gradients of {dtype} cannot be summed"))),
    }
    Ok(())
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
    fn sums_of_bytes_equal_the_interpreters_sums() {
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
            let ty = TensorType::new(dtype, vec![3]);
            let a = Tensor::from_literal(&Literal::Float(vec![1.0, 1e-3, -2.5]), &ty).unwrap();
            let b = Tensor::from_literal(&Literal::Float(vec![1.0 / 3.0, 7.0, 2.5]), &ty).unwrap();
            let (mut x, mut y) = (Vec::new(), Vec::new());
            put(&a, &mut x);
            put(&b, &mut y);
            add_into(dtype, &mut x, &y).unwrap();
            let sum = crate::tensor::eval_node(&crate::ir::Op::Binary(crate::ir::BinaryOp::Add), &[&a, &b], &ty);
            assert_eq!(take(&ty, &x, &mut 0).unwrap(), sum.unwrap(), "{dtype}");
        }
    }

    #[test]
    fn sums_round_to_the_gradient_dtype() {
        let ty = TensorType::new(DType::BF16, vec![1]);
        let scalar = |v: f64| Tensor::from_literal(&Literal::Float(vec![v]), &ty).unwrap();
        let (one, tiny) = (scalar(1.0), scalar(1.0 / 512.0));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        put(&one, &mut x);
        put(&tiny, &mut y);
        add_into(DType::BF16, &mut x, &y).unwrap();
        assert_eq!(take(&ty, &x, &mut 0).unwrap(), one);
        assert!(add_into(DType::I32, &mut x, &y).is_err());
    }
}
