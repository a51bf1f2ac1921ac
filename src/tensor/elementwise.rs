//! Elementwise ops: unary, binary (arithmetic, comparisons, logic), select
//! and cast.
//!
//! Contract (operands already typed by `ir::infer`: equal shapes and dtypes):
//! - floats compute in their storage type (`f16`/`bf16` in `f32`, rounded
//!   afterwards by `Tensor::new`) with IEEE semantics: `x / 0` is ±inf or NaN;
//!   `maximum`/`minimum` propagate NaN (NumPy); comparisons with NaN are false
//!   except `!=`; `sigmoid(x) = 1 / (1 + exp(-x))`; `rsqrt(x) = 1 / sqrt(x)`;
//!   `relu` keeps NaN and maps -0 to 0; `sign` gives -1, 0 (for ±0) or 1 and
//!   keeps NaN; `pow` is C `pow` (`pow(x, 0) = 1`).
//! - integers wrap on overflow (`+ - *`, `neg`, `abs`, `pow`); `/` is NumPy
//!   `floor_divide` (rounds toward -inf, like Python `//`) and dividing by
//!   zero is a runtime error (E0402); `pow` with a negative exponent is a
//!   runtime error (as in NumPy).
//! - `cast`: float → int truncates toward zero and saturates (NaN → 0);
//!   int → int wraps (NumPy `astype`), but → `i8` saturates from every
//!   type (quantized weights, never wrapped); number → bool is `!= 0` (NaN → true);
//!   bool → number is 0/1; → `f16`/`bf16` rounds once, to nearest even.
//!
//! Example: `binary(BinaryOp::Div, i32 [-7], i32 [2])` is `[-4]`.

use super::value::{array, array_from, floor_div, floor_mod, runtime, Data, Elem, FloorDivInt, OddF32, Tensor};
use crate::diag::Diagnostic;
use crate::ir::{BinaryOp, DType, UnaryOp};
use ndarray::ArrayD;

/// Float functions the unary ops need (std's, so `f16` uses `f32`'s).
trait Float: Elem + std::ops::Neg<Output = Self> + std::ops::Div<Output = Self> + std::ops::Sub<Output = Self> {
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_ties_even(self) -> Self;
    fn ln_1p(self) -> Self;
    fn exp_m1(self) -> Self;
    fn erf(self) -> Self;
    fn abs(self) -> Self;
    fn powf(self, e: Self) -> Self;
    /// The truncated remainder (C's `fmod`, Rust's `%`).
    fn fmod(self, b: Self) -> Self;
    fn copysign(self, sign: Self) -> Self;
}

// The C library's error function (std has none yet); glibc's are correct
// to within an ulp or so.
extern "C" {
    fn erff(x: f32) -> f32;
    fn erf(x: f64) -> f64;
}

macro_rules! float_impl {
    ($t:ty, $erf:ident) => {
        impl Float for $t {
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            fn round_ties_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn exp_m1(self) -> Self {
                <$t>::exp_m1(self)
            }
            fn erf(self) -> Self {
                // SAFETY: a pure libm function of one float.
                unsafe { $erf(self) }
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            fn fmod(self, b: Self) -> Self {
                self % b
            }
            fn copysign(self, sign: Self) -> Self {
                <$t>::copysign(self, sign)
            }
        }
    };
}

float_impl!(f32, erff);
float_impl!(f64, erf);

/// Integer operations the unary and binary ops need.
trait Int: Elem + FloorDivInt + Ord {
    fn wrapping_neg(self) -> Self;
    fn wrapping_abs(self) -> Self;
    fn wrapping_sub(self, other: Self) -> Self;
    fn signum(self) -> Self;
    fn as_i64(self) -> i64;
}

macro_rules! int_impl {
    ($t:ty) => {
        impl Int for $t {
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            fn wrapping_abs(self) -> Self {
                <$t>::wrapping_abs(self)
            }
            fn wrapping_sub(self, other: Self) -> Self {
                <$t>::wrapping_sub(self, other)
            }
            fn signum(self) -> Self {
                <$t>::signum(self)
            }
            fn as_i64(self) -> i64 {
                i64::from(self)
            }
        }
    };
}

int_impl!(i32);
int_impl!(i64);

fn unsupported(what: &str, dtype: DType) -> Diagnostic {
    Diagnostic::internal(format!("interpreter: {what} does not take {dtype} (the type checker should have refused it)"))
}

/// Applies `f` to the same-index elements of `x` and `y` (equal shapes).
fn zip_map<A: Copy, B>(
    x: &ArrayD<A>,
    y: &ArrayD<A>,
    mut f: impl FnMut(A, A) -> Result<B, Diagnostic>,
) -> Result<ArrayD<B>, Diagnostic> {
    if x.shape() != y.shape() {
        return Err(Diagnostic::internal(format!(
            "interpreter: elementwise operands differ in shape: {:?} and {:?}",
            x.shape(),
            y.shape()
        )));
    }
    let values = x.iter().zip(y.iter()).map(|(&a, &b)| f(a, b)).collect::<Result<Vec<B>, _>>()?;
    array_from(x.shape(), values)
}

/// `op` applied to every element of `x`.
pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Data, Diagnostic> {
    match x.data() {
        Data::F32(a) => Ok(Data::F32(a.mapv(float_unary(op).ok_or_else(|| unsupported(op_name(op), x.dtype()))?))),
        Data::F64(a) => Ok(Data::F64(a.mapv(float_unary(op).ok_or_else(|| unsupported(op_name(op), x.dtype()))?))),
        Data::I32(a) => Ok(Data::I32(a.mapv(int_unary(op).ok_or_else(|| unsupported(op_name(op), x.dtype()))?))),
        Data::I64(a) => Ok(Data::I64(a.mapv(int_unary(op).ok_or_else(|| unsupported(op_name(op), x.dtype()))?))),
        Data::Bool(a) if op == UnaryOp::Not => Ok(Data::Bool(a.mapv(|v| !v))),
        Data::Bool(_) => Err(unsupported(op_name(op), x.dtype())),
    }
}

fn op_name(op: UnaryOp) -> &'static str {
    crate::ir::Op::Unary(op).name()
}

/// What `op` computes on one `f64` (`None`: not a float op). The CPU
/// backend's compiled `f64` code calls these very functions.
pub fn f64_unary(op: UnaryOp) -> Option<fn(f64) -> f64> {
    float_unary(op)
}

/// What arithmetic `op` computes on two `f64`s (`None`: not a float
/// arithmetic op), for compiled `f64` code as `f64_unary`.
pub fn f64_binary(op: BinaryOp) -> Option<fn(f64, f64) -> f64> {
    float_binary_fn(op)
}

/// What `op` computes on one `f32` (`None`: not a float op): what compiled
/// code calls for the ops it has no inline template for (`log1p`, `expm1`,
/// `erf`).
pub fn f32_unary(op: UnaryOp) -> Option<fn(f32) -> f32> {
    float_unary(op)
}

/// What arithmetic `op` computes on two `f32`s, as `f32_unary` (`%`).
pub fn f32_binary(op: BinaryOp) -> Option<fn(f32, f32) -> f32> {
    float_binary_fn(op)
}

fn float_unary<T: Float>(op: UnaryOp) -> Option<fn(T) -> T> {
    let f: fn(T) -> T = match op {
        UnaryOp::Neg => |x: T| -x,
        UnaryOp::Abs => |x: T| x.abs(),
        UnaryOp::Exp => |x: T| x.exp(),
        UnaryOp::Log => |x: T| x.ln(),
        UnaryOp::Sqrt => |x: T| x.sqrt(),
        UnaryOp::Rsqrt => |x: T| T::one() / x.sqrt(),
        UnaryOp::Tanh => |x: T| x.tanh(),
        UnaryOp::Sigmoid => |x: T| T::one() / (T::one().add((-x).exp())),
        UnaryOp::Relu => |x: T| if x > T::zero() || x.is_nan() { x } else { T::zero() },
        UnaryOp::Sin => |x: T| x.sin(),
        UnaryOp::Cos => |x: T| x.cos(),
        UnaryOp::Floor => |x: T| x.floor(),
        UnaryOp::Ceil => |x: T| x.ceil(),
        UnaryOp::Round => |x: T| x.round_ties_even(),
        UnaryOp::Log1p => |x: T| x.ln_1p(),
        UnaryOp::Expm1 => |x: T| x.exp_m1(),
        UnaryOp::Erf => |x: T| x.erf(),
        UnaryOp::Sign => |x: T| {
            if x > T::zero() {
                T::one()
            } else if x < T::zero() {
                -T::one()
            } else if x.is_nan() {
                x
            } else {
                T::zero()
            }
        },
        UnaryOp::Not => return None,
    };
    Some(f)
}

fn int_unary<T: Int>(op: UnaryOp) -> Option<fn(T) -> T> {
    match op {
        UnaryOp::Neg => Some(|x: T| x.wrapping_neg()),
        UnaryOp::Abs => Some(|x: T| x.wrapping_abs()),
        UnaryOp::Sign => Some(|x: T| x.signum()),
        UnaryOp::Relu => Some(|x: T| x.max(T::zero())),
        _ => None,
    }
}

/// `op` applied to the same-index elements of `x` and `y`.
pub fn binary(op: BinaryOp, x: &Tensor, y: &Tensor) -> Result<Data, Diagnostic> {
    if op.is_comparison() {
        return with_elem!(x.data(), T => Ok(Data::Bool(compare::<T>(op, array(x)?, array(y)?)?)));
    }
    match x.data() {
        Data::F32(_) => Ok(Data::F32(float_binary(op, array(x)?, array(y)?)?)),
        Data::F64(_) => Ok(Data::F64(float_binary(op, array(x)?, array(y)?)?)),
        Data::I32(_) => Ok(Data::I32(int_binary(op, array(x)?, array(y)?)?)),
        Data::I64(_) => Ok(Data::I64(int_binary(op, array(x)?, array(y)?)?)),
        Data::Bool(a) => {
            let f = match op {
                BinaryOp::And => |p: bool, q: bool| p && q,
                BinaryOp::Or => |p: bool, q: bool| p || q,
                _ => return Err(unsupported(op_name_b(op), DType::Bool)),
            };
            Ok(Data::Bool(zip_map(a, array(y)?, |p, q| Ok(f(p, q)))?))
        }
    }
}

fn op_name_b(op: BinaryOp) -> &'static str {
    crate::ir::Op::Binary(op).name()
}

fn compare<T: Elem>(op: BinaryOp, x: &ArrayD<T>, y: &ArrayD<T>) -> Result<ArrayD<bool>, Diagnostic> {
    let f = match op {
        BinaryOp::Eq => |a: T, b: T| a == b,
        BinaryOp::Ne => |a: T, b: T| a != b,
        BinaryOp::Lt => |a: T, b: T| a < b,
        BinaryOp::Le => |a: T, b: T| a <= b,
        BinaryOp::Gt => |a: T, b: T| a > b,
        BinaryOp::Ge => |a: T, b: T| a >= b,
        _ => return Err(Diagnostic::internal("interpreter: not a comparison")),
    };
    zip_map(x, y, |a, b| Ok(f(a, b)))
}

fn float_binary<T: Float>(op: BinaryOp, x: &ArrayD<T>, y: &ArrayD<T>) -> Result<ArrayD<T>, Diagnostic> {
    let f = float_binary_fn(op).ok_or_else(|| unsupported(op_name_b(op), DType::F32))?;
    zip_map(x, y, |a, b| Ok(f(a, b)))
}

fn float_binary_fn<T: Float>(op: BinaryOp) -> Option<fn(T, T) -> T> {
    let f: fn(T, T) -> T = match op {
        BinaryOp::Add => |a: T, b: T| a.add(b),
        BinaryOp::Sub => |a: T, b: T| a - b,
        BinaryOp::Mul => |a: T, b: T| a.mul(b),
        BinaryOp::Div => |a: T, b: T| a / b,
        BinaryOp::Pow => |a: T, b: T| a.powf(b),
        BinaryOp::Mod => float_mod,
        BinaryOp::Maximum => |a: T, b: T| a.max_nan(b),
        BinaryOp::Minimum => |a: T, b: T| a.min_nan(b),
        _ => return None,
    };
    Some(f)
}

/// `a % b` as NumPy's `mod` (Python's `%` on floats): the truncated
/// remainder moved by `b` when its sign differs from `b`'s, and a zero
/// remainder signed like `b`; `x % 0` is NaN, `x % ±inf` is `x` or `±inf`.
fn float_mod<T: Float>(a: T, b: T) -> T {
    let r = a.fmod(b);
    if r == T::zero() {
        r.copysign(b)
    } else if (r < T::zero()) != (b < T::zero()) {
        r.add(b)
    } else {
        r
    }
}

fn int_binary<T: Int>(op: BinaryOp, x: &ArrayD<T>, y: &ArrayD<T>) -> Result<ArrayD<T>, Diagnostic> {
    match op {
        BinaryOp::Add => zip_map(x, y, |a, b| Ok(a.add(b))),
        BinaryOp::Sub => zip_map(x, y, |a, b| Ok(a.wrapping_sub(b))),
        BinaryOp::Mul => zip_map(x, y, |a, b| Ok(a.mul(b))),
        BinaryOp::Maximum => zip_map(x, y, |a, b| Ok(a.max(b))),
        BinaryOp::Minimum => zip_map(x, y, |a, b| Ok(a.min(b))),
        BinaryOp::Div | BinaryOp::Pow | BinaryOp::Mod => zip_map(x, y, |a, b| checked_int_binary(op, a, b)),
        _ => Err(unsupported(op_name_b(op), DType::I32)),
    }
}

/// `a / b` (floor division), `a % b` or `a ^ b` on integers, the integer
/// ops that can fail: division or modulo by zero and a negative power are
/// run-time errors (E0402).
fn checked_int_binary<T: Int>(op: BinaryOp, a: T, b: T) -> Result<T, Diagnostic> {
    match op {
        BinaryOp::Div => {
            floor_div(a, b).ok_or_else(|| runtime(format!("integer division by zero ({} / 0)", a.as_i64())))
        }
        BinaryOp::Mod => floor_mod(a, b).ok_or_else(|| runtime(format!("integer modulo by zero ({} % 0)", a.as_i64()))),
        BinaryOp::Pow => {
            let e = u64::try_from(b.as_i64())
                .map_err(|_| runtime(format!("integer {} raised to the negative power {}", a.as_i64(), b.as_i64())))?;
            Ok(int_pow(a, e))
        }
        _ => Err(Diagnostic::internal(format!("`{}` cannot fail", op_name_b(op)))),
    }
}

/// [`checked_int_binary`] on `i64`s, or (`wide` false) on the `i32`s that
/// `a` and `b` hold, widened: what compiled code calls element by element
/// (`backend::cpu::codegen::fault`), so both report the same error.
pub fn fallible_int_binary(op: BinaryOp, a: i64, b: i64, wide: bool) -> Result<i64, Diagnostic> {
    match wide {
        true => checked_int_binary(op, a, b),
        // (`a` and `b` are `i32`s: the truncation is exact.)
        false => checked_int_binary(op, a as i32, b as i32).map(i64::from),
    }
}

/// `base^exp` with wrapping multiplication, by repeated squaring.
fn int_pow<T: Int>(base: T, mut exp: u64) -> T {
    let mut result = T::one();
    let mut square = base;
    while exp > 0 {
        if exp & 1 == 1 {
            result = result.mul(square);
        }
        square = square.mul(square);
        exp >>= 1;
    }
    result
}

/// `where(cond, a, b)`: `a` where `cond` is true, else `b`.
pub fn select(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Data, Diagnostic> {
    let c = array::<bool>(cond)?;
    with_elem!(a.data(), T => {
        let (x, y) = (array::<T>(a)?, array::<T>(b)?);
        if c.shape() != x.shape() {
            return Err(Diagnostic::internal("interpreter: where operands differ in shape"));
        }
        let picked = zip_map(x, y, |p, q| Ok((p, q)))?;
        let values = c.iter().zip(picked.iter()).map(|(&k, &(p, q))| if k { p } else { q }).collect();
        Ok(T::wrap(array_from(x.shape(), values)?))
    })
}

/// `x` converted to dtype `to` (see the module doc for the rules).
pub fn cast(x: &Tensor, to: DType) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), S => {
        let a = array::<S>(x)?;
        Ok(match to {
            DType::F32 => Data::F32(a.mapv(|v| v.convert::<f32>())),
            // Round-to-odd first, so that `Tensor::new`'s rounding is the only one that counts.
            DType::F16 | DType::BF16 => Data::F32(a.mapv(|v| v.convert::<OddF32>().0)),
            DType::F64 => Data::F64(a.mapv(|v| v.convert::<f64>())),
            DType::I32 => Data::I32(a.mapv(|v| v.convert::<i32>())),
            // Saturating, from integers too (`Tensor::new` clamps the i64s).
            DType::I8 => Data::I32(a.mapv(|v| v.convert::<i64>().clamp(-128, 127) as i32)),
            DType::I64 => Data::I64(a.mapv(|v| v.convert::<i64>())),
            DType::Bool => Data::Bool(a.mapv(|v| v.convert::<bool>())),
        })
    })
}
