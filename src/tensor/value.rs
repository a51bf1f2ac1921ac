//! The interpreter's tensor: a dtype plus row-major `ndarray` storage.
//!
//! Contract: `f32`, `f64`, `i32`, `i64` and `bool` tensors store their own
//! element type; `f16` and `bf16` tensors store `f32` values that are always
//! exactly representable in the narrow type (`Tensor::new` rounds them, so
//! every op computes in `f32` and rounds once at the end); `i8` tensors
//! store `i32` values that `Tensor::new` saturates to `-128..=127`. Every array is in
//! standard (row-major) layout.
//!
//! Generic kernels are written once over `T: Elem` and dispatched on the
//! storage with `with_elem!` (by a tensor's storage) or `with_dtype!` (by a
//! dtype), which bind a local type alias in each match arm.
//!
//! Example: `Tensor::from_literal(&Literal::Float(vec![1.0, 2.5]), &TensorType::new(DType::F32, vec![2]))`
//! is the `f32[2]` tensor `[1, 2.5]`.

use crate::diag::{Code, Diagnostic};
use crate::half::{f64_to_f32_odd, i64_to_f32_odd, round_bf16, round_f16};
use crate::ir::{DType, Literal, TensorType};
use ndarray::{ArrayD, IxDyn};
use std::fmt::Debug;

/// Storage of a tensor's elements, one variant per storage type.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// `f32`, and `f16`/`bf16` values kept exactly in `f32`.
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    Bool(ArrayD<bool>),
}

impl Data {
    pub fn shape(&self) -> &[usize] {
        match self {
            Data::F32(a) => a.shape(),
            Data::F64(a) => a.shape(),
            Data::I32(a) => a.shape(),
            Data::I64(a) => a.shape(),
            Data::Bool(a) => a.shape(),
        }
    }

    /// The dtypes this storage can hold.
    fn holds(&self, dtype: DType) -> bool {
        matches!(
            (self, dtype),
            (Data::F32(_), DType::F32 | DType::F16 | DType::BF16)
                | (Data::F64(_), DType::F64)
                | (Data::I32(_), DType::I32 | DType::I8)
                | (Data::I64(_), DType::I64)
                | (Data::Bool(_), DType::Bool)
        )
    }
}

/// Runs `$body` with `$T` bound to the element type of storage `$data`.
macro_rules! with_elem {
    ($data:expr, $T:ident => $body:expr) => {
        match $data {
            $crate::tensor::Data::F32(_) => {
                type $T = f32;
                $body
            }
            $crate::tensor::Data::F64(_) => {
                type $T = f64;
                $body
            }
            $crate::tensor::Data::I32(_) => {
                type $T = i32;
                $body
            }
            $crate::tensor::Data::I64(_) => {
                type $T = i64;
                $body
            }
            $crate::tensor::Data::Bool(_) => {
                type $T = bool;
                $body
            }
        }
    };
}

/// Runs `$body` with `$T` bound to the storage type of dtype `$dtype`; with
/// a `bool => $other` arm, `$other` instead for `bool` (code whose element
/// types have arithmetic, such as the CPU backend's native loops).
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::tensor::with_dtype!($dtype, $T => $body, bool => {
            type $T = bool;
            $body
        })
    };
    ($dtype:expr, $T:ident => $body:expr, bool => $other:expr) => {
        match $dtype {
            $crate::ir::DType::F32 | $crate::ir::DType::F16 | $crate::ir::DType::BF16 => {
                type $T = f32;
                $body
            }
            $crate::ir::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::ir::DType::I32 | $crate::ir::DType::I8 => {
                type $T = i32;
                $body
            }
            $crate::ir::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::ir::DType::Bool => $other,
        }
    };
}
pub(crate) use with_dtype;

/// Conversion into a storage type from each kind of source value, with the
/// semantics of `cast` (see `elementwise::cast`).
pub trait FromScalar: Sized {
    fn from_f32(v: f32) -> Self;
    fn from_f64(v: f64) -> Self;
    fn from_i64(v: i64) -> Self;
    fn from_bool(v: bool) -> Self;
}

/// An element type of tensor storage, with the arithmetic generic kernels
/// need. Integer arithmetic wraps; `bool` adds with `or` and multiplies with
/// `and` (as NumPy's boolean matmul does).
pub trait Elem: FromScalar + Copy + PartialEq + PartialOrd + Debug + 'static {
    /// The array of `data` if it has this storage type.
    fn of(data: &Data) -> Option<&ArrayD<Self>>;
    fn wrap(a: ArrayD<Self>) -> Data;
    /// This value converted to another storage type (cast semantics).
    fn convert<D: FromScalar>(self) -> D;
    /// The nearest `f64` (exact except for `i64` beyond 2^53).
    fn to_f64(self) -> f64;
    fn zero() -> Self;
    fn one() -> Self;
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    /// The larger value; NaN if either is NaN (NumPy `maximum`).
    fn max_nan(self, other: Self) -> Self;
    /// The smaller value; NaN if either is NaN (NumPy `minimum`).
    fn min_nan(self, other: Self) -> Self;
    /// The identity of `max_nan` (`-inf`, the type's minimum, `false`).
    fn lowest() -> Self;
    /// The identity of `min_nan`.
    fn highest() -> Self;
    /// `self / n` for means and averages: float division, integer floor
    /// division; `None` where undefined (`bool`, or an integer and `n == 0`).
    fn div_count(self, n: usize) -> Option<Self>;
    fn is_nan(self) -> bool;
}

macro_rules! float_elem {
    ($t:ty, $variant:ident, $from:ident) => {
        impl FromScalar for $t {
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn from_i64(v: i64) -> Self {
                // Rust's int-to-float `as` rounds to nearest, ties to even, in one step.
                v as $t
            }
            fn from_bool(v: bool) -> Self {
                if v {
                    1.0
                } else {
                    0.0
                }
            }
        }

        impl Elem for $t {
            fn of(data: &Data) -> Option<&ArrayD<Self>> {
                match data {
                    Data::$variant(a) => Some(a),
                    _ => None,
                }
            }
            fn wrap(a: ArrayD<Self>) -> Data {
                Data::$variant(a)
            }
            fn convert<D: FromScalar>(self) -> D {
                D::$from(self)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn zero() -> Self {
                0.0
            }
            fn one() -> Self {
                1.0
            }
            fn add(self, other: Self) -> Self {
                self + other
            }
            fn mul(self, other: Self) -> Self {
                self * other
            }
            fn max_nan(self, other: Self) -> Self {
                if self.is_nan() || other.is_nan() {
                    <$t>::NAN
                } else if other > self {
                    other
                } else {
                    self
                }
            }
            fn min_nan(self, other: Self) -> Self {
                if self.is_nan() || other.is_nan() {
                    <$t>::NAN
                } else if other < self {
                    other
                } else {
                    self
                }
            }
            fn lowest() -> Self {
                <$t>::NEG_INFINITY
            }
            fn highest() -> Self {
                <$t>::INFINITY
            }
            fn div_count(self, n: usize) -> Option<Self> {
                Some(self / n as $t)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}

float_elem!(f32, F32, from_f32);
float_elem!(f64, F64, from_f64);

macro_rules! int_elem {
    ($t:ty, $variant:ident) => {
        impl FromScalar for $t {
            fn from_f32(v: f32) -> Self {
                // Truncates toward zero, saturates at the type's range, NaN → 0.
                v as $t
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn from_i64(v: i64) -> Self {
                // Integer narrowing wraps (two's complement), as NumPy's astype does.
                v as $t
            }
            fn from_bool(v: bool) -> Self {
                <$t>::from(v)
            }
        }

        impl Elem for $t {
            fn of(data: &Data) -> Option<&ArrayD<Self>> {
                match data {
                    Data::$variant(a) => Some(a),
                    _ => None,
                }
            }
            fn wrap(a: ArrayD<Self>) -> Data {
                Data::$variant(a)
            }
            fn convert<D: FromScalar>(self) -> D {
                D::from_i64(i64::from(self))
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn zero() -> Self {
                0
            }
            fn one() -> Self {
                1
            }
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn mul(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
            fn max_nan(self, other: Self) -> Self {
                self.max(other)
            }
            fn min_nan(self, other: Self) -> Self {
                self.min(other)
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
            fn div_count(self, n: usize) -> Option<Self> {
                let n = <$t>::try_from(n).ok()?;
                floor_div(self, n)
            }
            fn is_nan(self) -> bool {
                false
            }
        }
    };
}

int_elem!(i32, I32);
int_elem!(i64, I64);

/// Integer division rounding toward negative infinity (NumPy `floor_divide`,
/// Python `//`); `None` when dividing by zero. `MIN // -1` wraps to `MIN`.
pub fn floor_div<T>(a: T, b: T) -> Option<T>
where
    T: Copy + PartialOrd + PartialEq + FloorDivInt,
{
    if b == T::ZERO {
        return None;
    }
    let q = a.wrapping_div_(b);
    let r = a.wrapping_rem_(b);
    // Truncation rounded toward zero; step down when the exact quotient was negative and inexact.
    if r != T::ZERO && ((r < T::ZERO) != (b < T::ZERO)) {
        Some(q.wrapping_sub_one())
    } else {
        Some(q)
    }
}

/// The remainder of [`floor_div`] (NumPy `mod`, Python `%`): it has the
/// sign of `b`, and `floor_div(a, b) * b + floor_mod(a, b) == a`; `None`
/// for a zero `b`. `MIN % -1` is 0.
pub fn floor_mod<T>(a: T, b: T) -> Option<T>
where
    T: Copy + PartialOrd + PartialEq + FloorDivInt,
{
    if b == T::ZERO {
        return None;
    }
    let r = a.wrapping_rem_(b);
    // A truncated remainder of the other sign moves by one `b` (it cannot
    // overflow: |r| < |b| and they differ in sign).
    Some(if r != T::ZERO && ((r < T::ZERO) != (b < T::ZERO)) { r.wrapping_add_(b) } else { r })
}

/// The integer operations `floor_div` and `floor_mod` need.
pub trait FloorDivInt: Sized {
    const ZERO: Self;
    fn wrapping_div_(self, b: Self) -> Self;
    fn wrapping_rem_(self, b: Self) -> Self;
    fn wrapping_add_(self, b: Self) -> Self;
    fn wrapping_sub_one(self) -> Self;
}

macro_rules! floor_div_int {
    ($t:ty) => {
        impl FloorDivInt for $t {
            const ZERO: Self = 0;
            fn wrapping_div_(self, b: Self) -> Self {
                self.wrapping_div(b)
            }
            fn wrapping_rem_(self, b: Self) -> Self {
                self.wrapping_rem(b)
            }
            fn wrapping_add_(self, b: Self) -> Self {
                self.wrapping_add(b)
            }
            fn wrapping_sub_one(self) -> Self {
                self.wrapping_sub(1)
            }
        }
    };
}

floor_div_int!(i32);
floor_div_int!(i64);

impl FromScalar for bool {
    fn from_f32(v: f32) -> Self {
        // NaN is nonzero, so it converts to true (as in NumPy).
        v != 0.0
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    fn from_bool(v: bool) -> Self {
        v
    }
}

impl Elem for bool {
    fn of(data: &Data) -> Option<&ArrayD<Self>> {
        match data {
            Data::Bool(a) => Some(a),
            _ => None,
        }
    }
    fn wrap(a: ArrayD<Self>) -> Data {
        Data::Bool(a)
    }
    fn convert<D: FromScalar>(self) -> D {
        D::from_bool(self)
    }
    fn to_f64(self) -> f64 {
        f64::from(u8::from(self))
    }
    fn zero() -> Self {
        false
    }
    fn one() -> Self {
        true
    }
    fn add(self, other: Self) -> Self {
        self || other
    }
    fn mul(self, other: Self) -> Self {
        self && other
    }
    fn max_nan(self, other: Self) -> Self {
        self || other
    }
    fn min_nan(self, other: Self) -> Self {
        self && other
    }
    fn lowest() -> Self {
        false
    }
    fn highest() -> Self {
        true
    }
    fn div_count(self, _n: usize) -> Option<Self> {
        None
    }
    fn is_nan(self) -> bool {
        false
    }
}

/// An `f32` produced with round-to-odd from wider sources, the first step of
/// a correctly rounded conversion to `f16`/`bf16`.
pub struct OddF32(pub f32);

impl FromScalar for OddF32 {
    fn from_f32(v: f32) -> Self {
        OddF32(v)
    }
    fn from_f64(v: f64) -> Self {
        OddF32(f64_to_f32_odd(v))
    }
    fn from_i64(v: i64) -> Self {
        OddF32(i64_to_f32_odd(v))
    }
    fn from_bool(v: bool) -> Self {
        OddF32(f32::from(u8::from(v)))
    }
}

/// `v` as a storage value of `dtype` (which `T` must store): for `f16`/`bf16`
/// the narrowing to `f32` rounds to odd, so that `Tensor::new`'s final
/// rounding is correct.
pub fn scalar_for<T: Elem>(v: f64, dtype: DType) -> T {
    match dtype {
        DType::F16 | DType::BF16 => T::from_f32(f64_to_f32_odd(v)),
        _ => T::from_f64(v),
    }
}

/// A runtime failure (E0402).
pub fn runtime(message: impl Into<String>) -> Diagnostic {
    Diagnostic::new(Code::Runtime, message)
}

/// The storage of `t` as `T`, or an internal error naming the mismatch.
pub fn array<T: Elem>(t: &Tensor) -> Result<&ArrayD<T>, Diagnostic> {
    T::of(&t.data)
        .ok_or_else(|| Diagnostic::internal(format!("interpreter: a {} tensor has unexpected storage", t.dtype)))
}

/// An array of `shape` holding `values` in row-major order.
pub fn array_from<T>(shape: &[usize], values: Vec<T>) -> Result<ArrayD<T>, Diagnostic> {
    ArrayD::from_shape_vec(IxDyn(shape), values)
        .map_err(|e| Diagnostic::internal(format!("interpreter: cannot build an array of shape {shape:?}: {e}")))
}

/// The elements of `a` in row-major order.
pub fn flat<T: Clone>(a: &ArrayD<T>) -> Vec<T> {
    match a.as_slice() {
        Some(s) => s.to_vec(),
        None => a.iter().cloned().collect(),
    }
}

/// Row-major strides (in elements) of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The multi-index of row-major position `flat` in `shape`.
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    idx
}

/// A tensor value of the interpreter.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    dtype: DType,
    data: Data,
}

impl Tensor {
    /// A tensor of `dtype` over `data`; rounds `f16`/`bf16` values to their
    /// type. Fails (internally) if the storage cannot hold `dtype`.
    pub fn new(dtype: DType, data: Data) -> Result<Tensor, Diagnostic> {
        if !data.holds(dtype) {
            return Err(Diagnostic::internal(format!("interpreter: {dtype} values in the wrong storage")));
        }
        let data = match (dtype, data) {
            (DType::F16, Data::F32(a)) => Data::F32(a.mapv(round_f16)),
            (DType::BF16, Data::F32(a)) => Data::F32(a.mapv(round_bf16)),
            (DType::I8, Data::I32(a)) => Data::I32(a.mapv(|v| v.clamp(-128, 127))),
            (_, d) => d,
        };
        Ok(Tensor { dtype, data })
    }

    /// A tensor of `dtype` and `shape` from row-major `values` of its storage type.
    pub fn from_vec<T: Elem>(dtype: DType, shape: &[usize], values: Vec<T>) -> Result<Tensor, Diagnostic> {
        Tensor::new(dtype, T::wrap(array_from(shape, values)?))
    }

    /// The tensor of type `ty` holding literal `value` (any literal kind is
    /// converted to `ty.dtype` with cast semantics).
    pub fn from_literal(value: &Literal, ty: &TensorType) -> Result<Tensor, Diagnostic> {
        if value.len() != ty.numel() {
            return Err(Diagnostic::internal(format!("constant has {} values for {ty}", value.len())));
        }
        let half = matches!(ty.dtype, DType::F16 | DType::BF16);
        with_dtype!(ty.dtype, T => {
            let values: Vec<T> = match value {
                Literal::Float(v) => v.iter().map(|&x| scalar_for::<T>(x, ty.dtype)).collect(),
                Literal::Int(v) if half => v.iter().map(|&x| T::from_f32(x.convert::<OddF32>().0)).collect(),
                Literal::Int(v) => v.iter().map(|&x| T::from_i64(x)).collect(),
                Literal::Bool(v) => v.iter().map(|&x| T::from_bool(x)).collect(),
            };
            Tensor::from_vec(ty.dtype, &ty.shape, values)
        })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        self.data.shape()
    }

    /// The tensor's type.
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.dtype, self.shape().to_vec())
    }

    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    pub fn data(&self) -> &Data {
        &self.data
    }

    /// The elements in row-major order as `f64` (bools as 0/1; `i64` beyond
    /// 2^53 rounds).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_elem!(&self.data, T => match T::of(&self.data) {
            Some(a) => a.iter().map(|&v| v.to_f64()).collect(),
            None => Vec::new(),
        })
    }

    /// The elements as a literal of the matching kind (exact for every dtype).
    pub fn to_literal(&self) -> Literal {
        match &self.data {
            Data::F32(a) => Literal::Float(a.iter().map(|&v| f64::from(v)).collect()),
            Data::F64(a) => Literal::Float(flat(a)),
            Data::I32(a) => Literal::Int(a.iter().map(|&v| i64::from(v)).collect()),
            Data::I64(a) => Literal::Int(flat(a)),
            Data::Bool(a) => Literal::Bool(flat(a)),
        }
    }

    /// The elements as `i64` if this is an integer tensor.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        match &self.data {
            Data::I32(a) => Some(a.iter().map(|&v| i64::from(v)).collect()),
            Data::I64(a) => Some(flat(a)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_convert_to_their_dtype_and_round_halves() {
        let t = Tensor::from_literal(&Literal::Float(vec![0.1, 1.0]), &TensorType::new(DType::F16, vec![2])).unwrap();
        assert_eq!(t.to_f64_vec(), vec![f64::from(round_f16(0.1)), 1.0]);
        let t = Tensor::from_literal(&Literal::Int(vec![1, -2]), &TensorType::new(DType::I32, vec![2, 1])).unwrap();
        assert_eq!(t.shape(), &[2, 1]);
        assert_eq!(t.to_literal(), Literal::Int(vec![1, -2]));
        assert!(Tensor::from_literal(&Literal::Int(vec![1]), &TensorType::new(DType::I32, vec![2])).is_err());
    }

    #[test]
    fn floor_division_rounds_toward_negative_infinity() {
        // Python: 7 // 2 == 3, -7 // 2 == -4, 7 // -2 == -4, -7 // -2 == 3.
        assert_eq!(floor_div(7, 2), Some(3));
        assert_eq!(floor_div(-7, 2), Some(-4));
        assert_eq!(floor_div(7, -2), Some(-4));
        assert_eq!(floor_div(-7, -2), Some(3));
        assert_eq!(floor_div(-6, 2), Some(-3));
        assert_eq!(floor_div(i32::MIN, -1), Some(i32::MIN));
        assert_eq!(floor_div(1i64, 0), None);
        assert_eq!(floor_mod(7, 3), Some(1));
        assert_eq!(floor_mod(-7, 3), Some(2));
        assert_eq!(floor_mod(7, -3), Some(-2));
        assert_eq!(floor_mod(-7, -3), Some(-1));
        assert_eq!(floor_mod(-6, 3), Some(0));
        assert_eq!(floor_mod(i32::MIN, -1), Some(0));
        assert_eq!(floor_mod(5i64, 0), None);
    }

    #[test]
    fn index_helpers_are_row_major() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
        assert_eq!(unravel(0, &[]), Vec::<usize>::new());
    }
}
