//! Decoding packed binary numbers (the payload of IDX, npy and safetensors
//! files) straight into an interpreter tensor of the requested dtype.
//!
//! Contract: `raw` holds exactly `shape.product() * scalar.size()` bytes
//! (callers check and report sizes with the file's position); values are
//! converted with cast semantics (floats to ints truncate, ints to floats
//! round to nearest), so `decode(bytes_of_u8_pixels, U8, false, F32, ..)`
//! gives the pixel values as floats.

use crate::diag::Diagnostic;
use crate::ir::{DType, TensorType};
use crate::tensor::Tensor;

/// Where an array's values lie in its file and how they are stored: what a
/// file's header says, enough to read any of its rows later.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    /// The array as tfc reads it (stored values converted to `ty.dtype`).
    pub ty: TensorType,
    pub scalar: Scalar,
    /// Big-endian values.
    pub big: bool,
    /// The byte position of the first value.
    pub offset: usize,
    /// Column-major values (a Fortran-ordered npy array of rank ≥ 2).
    pub fortran: bool,
}

impl Layout {
    /// The bytes of one element (one index of the first axis).
    pub fn row_bytes(&self) -> usize {
        self.ty.shape[1..].iter().product::<usize>() * self.scalar.size()
    }
}

/// A stored number type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    BF16,
    F32,
    F64,
    Bool,
}

impl Scalar {
    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            Scalar::U8 | Scalar::I8 | Scalar::Bool => 1,
            Scalar::U16 | Scalar::I16 | Scalar::F16 | Scalar::BF16 => 2,
            Scalar::U32 | Scalar::I32 | Scalar::F32 => 4,
            Scalar::U64 | Scalar::I64 | Scalar::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Scalar::F16 | Scalar::BF16 | Scalar::F32 | Scalar::F64)
    }

    /// The tfc dtype that holds every value of this type.
    pub fn natural(self) -> DType {
        match self {
            Scalar::U8 | Scalar::I8 | Scalar::U16 | Scalar::I16 | Scalar::I32 => DType::I32,
            Scalar::U32 | Scalar::U64 | Scalar::I64 => DType::I64,
            Scalar::F16 => DType::F16,
            Scalar::BF16 => DType::BF16,
            Scalar::F32 => DType::F32,
            Scalar::F64 => DType::F64,
            Scalar::Bool => DType::Bool,
        }
    }
}

fn word<const N: usize>(b: &[u8], big: bool) -> [u8; N] {
    let mut w = [0u8; N];
    w.copy_from_slice(&b[..N]);
    if big {
        w.reverse();
    }
    w
}

/// The value at the start of `b` as a float.
fn float_at(b: &[u8], s: Scalar, big: bool) -> f64 {
    match s {
        Scalar::F16 => crate::half::f16_bits_to_f32(u16::from_le_bytes(word(b, big))) as f64,
        Scalar::BF16 => crate::half::bf16_bits_to_f32(u16::from_le_bytes(word(b, big))) as f64,
        Scalar::F32 => f32::from_le_bytes(word(b, big)) as f64,
        Scalar::F64 => f64::from_le_bytes(word(b, big)),
        Scalar::U64 => u64::from_le_bytes(word(b, big)) as f64,
        _ => int_at(b, s, big) as f64,
    }
}

/// The value at the start of `b` as an integer (floats truncate, saturating).
fn int_at(b: &[u8], s: Scalar, big: bool) -> i64 {
    match s {
        Scalar::U8 => b[0] as i64,
        Scalar::I8 => b[0] as i8 as i64,
        Scalar::Bool => i64::from(b[0] != 0),
        Scalar::U16 => u16::from_le_bytes(word(b, big)) as i64,
        Scalar::I16 => i16::from_le_bytes(word(b, big)) as i64,
        Scalar::U32 => u32::from_le_bytes(word(b, big)) as i64,
        Scalar::I32 => i32::from_le_bytes(word(b, big)) as i64,
        Scalar::U64 => u64::from_le_bytes(word(b, big)) as i64,
        Scalar::I64 => i64::from_le_bytes(word(b, big)),
        _ => float_at(b, s, big) as i64,
    }
}

/// The tensor of `dtype` and `shape` stored in `raw` as `scalar`s.
pub fn decode(raw: &[u8], scalar: Scalar, big: bool, dtype: DType, shape: &[usize]) -> Result<Tensor, Diagnostic> {
    let n: usize = shape.iter().product();
    let size = scalar.size();
    if raw.len() != n * size {
        return Err(Diagnostic::internal(format!("loaders: {} bytes for {n} values of {size} bytes", raw.len())));
    }
    let values = raw.chunks_exact(size);
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => {
            Tensor::from_vec(dtype, shape, values.map(|b| float_at(b, scalar, big) as f32).collect::<Vec<f32>>())
        }
        DType::F64 => Tensor::from_vec(dtype, shape, values.map(|b| float_at(b, scalar, big)).collect::<Vec<f64>>()),
        DType::I32 | DType::I8 => {
            Tensor::from_vec(dtype, shape, values.map(|b| int_at(b, scalar, big) as i32).collect::<Vec<i32>>())
        }
        DType::I64 => Tensor::from_vec(dtype, shape, values.map(|b| int_at(b, scalar, big)).collect::<Vec<i64>>()),
        DType::Bool => {
            Tensor::from_vec(dtype, shape, values.map(|b| int_at(b, scalar, big) != 0).collect::<Vec<bool>>())
        }
    }
}
