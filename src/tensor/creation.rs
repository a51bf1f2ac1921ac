//! Ops that create tensors from attributes alone: iota and random.
//!
//! Contract:
//! - `iota`: element value = its index along `axis`.
//! - `random`: element `i` (row-major) comes from `rng::uniform_at(seed, i)` or
//!   `rng::normal_at(seed, i)`. Uniform values are truncated (never rounded)
//!   to the dtype's significand width — 53 bits for `f64`, 24 for `f32`, 11
//!   for `f16`, 8 for `bf16` — so they stay in `[0, 1)` and are exact in the
//!   dtype. Normal values are rounded to nearest even.
//!
//! Example: `iota(i32[2, 3], axis 1)` is `[[0, 1, 2], [0, 1, 2]]`.

use super::value::{scalar_for, strides, Tensor};
use crate::diag::Diagnostic;
use crate::ir::{DType, Distribution, TensorType};
use crate::rng;

/// `0, 1, 2, …` along `axis`, repeated over the other axes of `ty`.
pub fn iota(ty: &TensorType, axis: usize) -> Result<Tensor, Diagnostic> {
    if axis >= ty.rank() {
        return Err(Diagnostic::internal(format!("interpreter: iota axis {axis} of {ty}")));
    }
    let (stride, size) = (strides(&ty.shape)[axis], ty.shape[axis]);
    with_dtype!(ty.dtype, T => {
        let values: Vec<T> = (0..ty.numel()).map(|i| scalar_for((i / stride % size) as f64, ty.dtype)).collect();
        Tensor::from_vec(ty.dtype, &ty.shape, values)
    })
}

/// Significand bits (with the implicit one) of a float dtype.
fn significand_bits(dtype: DType) -> i32 {
    match dtype {
        DType::F64 => 53,
        DType::F16 => 11,
        DType::BF16 => 8,
        _ => 24,
    }
}

/// Counter-based random values of type `ty` (a float dtype).
pub fn random(ty: &TensorType, dist: Distribution, seed: u64) -> Result<Tensor, Diagnostic> {
    if !ty.dtype.is_float() {
        return Err(Diagnostic::internal(format!("interpreter: random values of dtype {}", ty.dtype)));
    }
    with_dtype!(ty.dtype, T => {
        let values: Vec<T> =
            (0..ty.numel() as u64).map(|i| scalar_for(random_at(ty.dtype, dist, seed, i), ty.dtype)).collect();
        Tensor::from_vec(ty.dtype, &ty.shape, values)
    })
}

/// Element `index` of a random tensor of `dtype`, before it is stored in
/// the dtype (`scalar_for`); compiled kernels call this too, so that their
/// values are the interpreter's bit for bit.
pub fn random_at(dtype: DType, dist: Distribution, seed: u64, index: u64) -> f64 {
    match dist {
        Distribution::Uniform => {
            // Exact in f64: the uniform value is a multiple of 2^-53 below 1.
            let scale = 2f64.powi(significand_bits(dtype));
            (rng::uniform_at(seed, index) * scale).floor() / scale
        }
        Distribution::Normal => rng::normal_at(seed, index),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::run;
    use crate::ir::{DType, Distribution, Op, TensorType};
    use crate::rng;

    #[test]
    fn iota_counts_along_its_axis() {
        let ty = TensorType::new(DType::I32, vec![2, 3]);
        assert_eq!(run(Op::Iota { ty: ty.clone(), axis: 1 }, &[]).to_f64_vec(), vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
        assert_eq!(run(Op::Iota { ty, axis: 0 }, &[]).to_f64_vec(), vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn random_values_follow_the_counter_stream() {
        let ty = TensorType::new(DType::F64, vec![2, 2]);
        let u = run(Op::Random { ty: ty.clone(), dist: Distribution::Uniform, seed: 5 }, &[]);
        assert_eq!(u.to_f64_vec(), rng::uniform(5, 4));
        let z = run(Op::Random { ty, dist: Distribution::Normal, seed: 5 }, &[]);
        assert_eq!(z.to_f64_vec(), rng::normal(5, 4));
    }

    #[test]
    fn narrow_uniform_values_are_truncated_into_the_unit_interval() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let ty = TensorType::new(dtype, vec![4096]);
            let u = run(Op::Random { ty, dist: Distribution::Uniform, seed: 11 }, &[]).to_f64_vec();
            let wide = rng::uniform(11, 4096);
            assert!(u.iter().zip(&wide).all(|(&v, &w)| (0.0..1.0).contains(&v) && v <= w), "{dtype}");
        }
    }
}
