//! ONNX's elementwise operators: arithmetic and comparisons with NumPy
//! broadcasting, `Where`, casts, the variadic `Sum`/`Max`/`Min`/`Mean`,
//! and the activations, written with tfc's primitive ops where tfc has no
//! primitive of their own (`LeakyRelu` is a `where`, `Gelu` an `erf`).
//!
//! Contract: each operator computes what ONNX's reference implementation
//! computes, up to rounding: integer `Div` truncates and `Mod` follows the
//! `fmod` attribute (as C's `fmod` with 1, as Python's `%` with 0), where
//! tfc's own `/` and `%` floor. Activations that only make sense for
//! floats refuse other dtypes (E0343).
//!
//! Example: `LeakyRelu(x, alpha = 0.1)` becomes
//! `select(lt(x, 0), mul(x, 0.1), x)`.

use super::ctx::{Attrs, Ctx, Val};
use crate::diag::Diagnostic;
use crate::io::onnx::model::{dtype_of, Node};
use crate::ir::{BinaryOp as B, Op, UnaryOp as U};

pub const OPS: &[&str] = &[
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Tanh",
    "Sigmoid",
    "Relu",
    "Sin",
    "Cos",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Erf",
    "Not",
    "Identity",
    "Clip",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Where",
    "Cast",
    "CastLike",
    "Sum",
    "Max",
    "Min",
    "Mean",
];

/// The operators that only make sense for floats (other dtypes are E0343).
pub const FLOAT_OPS: &[&str] = &[
    "Tan",
    "Reciprocal",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Softplus",
    "Softsign",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "ThresholdedRelu",
    "HardSigmoid",
    "HardSwish",
    "Mish",
    "Gelu",
    "Swish",
    "Shrink",
    "PRelu",
    "IsNaN",
    "IsInf",
];

pub fn import(cx: &mut Ctx, n: &Node, ins: &[Option<Val>]) -> Result<Vec<Val>, Diagnostic> {
    let a = Attrs(n);
    let x = cx.input(ins, 0)?.clone();
    let op = n.op_type.as_str();
    let simple = |u| -> Option<U> { Some(u) };
    let direct = match op {
        "Abs" => simple(U::Abs),
        "Neg" => simple(U::Neg),
        "Exp" => simple(U::Exp),
        "Log" => simple(U::Log),
        "Sqrt" => simple(U::Sqrt),
        "Tanh" => simple(U::Tanh),
        "Sigmoid" => simple(U::Sigmoid),
        "Relu" => simple(U::Relu),
        "Sin" => simple(U::Sin),
        "Cos" => simple(U::Cos),
        "Floor" => simple(U::Floor),
        "Ceil" => simple(U::Ceil),
        "Round" => simple(U::Round),
        "Sign" => simple(U::Sign),
        "Erf" => simple(U::Erf),
        "Not" => simple(U::Not),
        _ => None,
    };
    if let Some(u) = direct {
        return Ok(vec![cx.unary(u, &x)?]);
    }
    if FLOAT_OPS.contains(&op) && !x.dtype().is_float() {
        return Err(cx.unsupported(format!("{op} of {} is not supported (float tensors only)", x.dtype())));
    }
    let y = match op {
        "Identity" => x,
        "Tan" => {
            let (s, c) = (cx.unary(U::Sin, &x)?, cx.unary(U::Cos, &x)?);
            cx.binary(B::Div, &s, &c)?
        }
        "Reciprocal" => {
            let one = cx.scalar(1.0, x.dtype())?;
            cx.binary(B::Div, &one, &x)?
        }
        "IsNaN" => cx.binary(B::Ne, &x, &x)?,
        "IsInf" => {
            let (pos, neg) = (a.int(cx, "detect_positive", 1)?, a.int(cx, "detect_negative", 1)?);
            let p = cx.binary_scalar(B::Eq, &x, f64::INFINITY)?;
            let m = cx.binary_scalar(B::Eq, &x, f64::NEG_INFINITY)?;
            match (pos != 0, neg != 0) {
                (true, true) => cx.binary(B::Or, &p, &m)?,
                (true, false) => p,
                (false, true) => m,
                (false, false) => cx.binary(B::And, &p, &m)?,
            }
        }
        "Sinh" | "Cosh" => {
            let e = cx.unary(U::Exp, &x)?;
            let nx = cx.unary(U::Neg, &x)?;
            let en = cx.unary(U::Exp, &nx)?;
            let s = cx.binary(if op == "Sinh" { B::Sub } else { B::Add }, &e, &en)?;
            cx.binary_scalar(B::Mul, &s, 0.5)?
        }
        "Asinh" | "Acosh" => {
            // log(x + sqrt(x² ± 1))
            let sq = cx.binary(B::Mul, &x, &x)?;
            let inner = cx.binary_scalar(if op == "Asinh" { B::Add } else { B::Sub }, &sq, 1.0)?;
            let r = cx.unary(U::Sqrt, &inner)?;
            let s = cx.binary(B::Add, &x, &r)?;
            cx.unary(U::Log, &s)?
        }
        "Atanh" => {
            let one = cx.scalar(1.0, x.dtype())?;
            let (p, m) = (cx.binary(B::Add, &one, &x)?, cx.binary(B::Sub, &one, &x)?);
            let q = cx.binary(B::Div, &p, &m)?;
            let l = cx.unary(U::Log, &q)?;
            cx.binary_scalar(B::Mul, &l, 0.5)?
        }
        "Softplus" => softplus(cx, &x)?,
        "Softsign" => {
            let ax = cx.unary(U::Abs, &x)?;
            let d = cx.binary_scalar(B::Add, &ax, 1.0)?;
            cx.binary(B::Div, &x, &d)?
        }
        "LeakyRelu" => {
            let alpha = a.float(cx, "alpha", 0.01)?;
            let neg = cx.binary_scalar(B::Lt, &x, 0.0)?;
            let scaled = cx.binary_scalar(B::Mul, &x, f64::from(alpha))?;
            cx.select(&neg, &scaled, &x)?
        }
        "PRelu" => {
            let slope = cx.input(ins, 1)?.clone();
            let neg = cx.binary_scalar(B::Lt, &x, 0.0)?;
            let scaled = cx.binary(B::Mul, &x, &slope)?;
            cx.select(&neg, &scaled, &x)?
        }
        "Elu" => {
            let alpha = a.float(cx, "alpha", 1.0)?;
            elu(cx, &x, f64::from(alpha))?
        }
        "Selu" => {
            let alpha = a.float(cx, "alpha", 1.673_263_2)?;
            let gamma = a.float(cx, "gamma", 1.050_701)?;
            let e = elu(cx, &x, f64::from(alpha))?;
            cx.binary_scalar(B::Mul, &e, f64::from(gamma))?
        }
        "Celu" => {
            // max(0, x) + min(0, alpha · (exp(x / alpha) - 1))
            let alpha = f64::from(a.float(cx, "alpha", 1.0)?);
            let xs = cx.binary_scalar(B::Div, &x, alpha)?;
            let e = cx.unary(U::Expm1, &xs)?;
            let e = cx.binary_scalar(B::Mul, &e, alpha)?;
            let low = cx.binary_scalar(B::Minimum, &e, 0.0)?;
            let high = cx.binary_scalar(B::Maximum, &x, 0.0)?;
            cx.binary(B::Add, &high, &low)?
        }
        "ThresholdedRelu" => {
            let alpha = a.float(cx, "alpha", 1.0)?;
            let keep = cx.binary_scalar(B::Gt, &x, f64::from(alpha))?;
            let zero = cx.scalar(0.0, x.dtype())?;
            cx.select(&keep, &x, &zero)?
        }
        "HardSigmoid" => {
            let (alpha, beta) = (a.float(cx, "alpha", 0.2)?, a.float(cx, "beta", 0.5)?);
            hard_sigmoid(cx, &x, f64::from(alpha), f64::from(beta))?
        }
        "HardSwish" => {
            let h = hard_sigmoid(cx, &x, 1.0 / 6.0, 0.5)?;
            cx.binary(B::Mul, &x, &h)?
        }
        "Mish" => {
            let s = softplus(cx, &x)?;
            let t = cx.unary(U::Tanh, &s)?;
            cx.binary(B::Mul, &x, &t)?
        }
        "Swish" => {
            let alpha = a.float(cx, "alpha", 1.0)?;
            let ax = cx.binary_scalar(B::Mul, &x, f64::from(alpha))?;
            let s = cx.unary(U::Sigmoid, &ax)?;
            cx.binary(B::Mul, &x, &s)?
        }
        "Gelu" => gelu(cx, &x, &a.string(cx, "approximate", "none")?)?,
        "Shrink" => {
            let (lambd, bias) = (f64::from(a.float(cx, "lambd", 0.5)?), f64::from(a.float(cx, "bias", 0.0)?));
            let below = cx.binary_scalar(B::Lt, &x, -lambd)?;
            let above = cx.binary_scalar(B::Gt, &x, lambd)?;
            let up = cx.binary_scalar(B::Add, &x, bias)?;
            let down = cx.binary_scalar(B::Sub, &x, bias)?;
            let zero = cx.scalar(0.0, x.dtype())?;
            let inner = cx.select(&above, &down, &zero)?;
            cx.select(&below, &up, &inner)?
        }
        "Clip" => clip(cx, n, ins, &x)?,
        "Xor" => {
            let y = cx.input(ins, 1)?.clone();
            cx.xor(&x, &y)?
        }
        "Add" | "Sub" | "Mul" | "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" => {
            let b = B_OPS.iter().find(|(name, _)| *name == op).map(|(_, b)| *b).unwrap_or(B::Add);
            let y = cx.input(ins, 1)?.clone();
            if x.dtype() != y.dtype() {
                return Err(cx.unsupported(format!("{op} of {} and {}", x.dtype(), y.dtype())));
            }
            cx.binary(b, &x, &y)?
        }
        "Div" => {
            let y = cx.input(ins, 1)?.clone();
            div(cx, &x, &y)?
        }
        "Pow" => {
            let y = cx.input(ins, 1)?.clone();
            if !x.dtype().is_float() {
                return Err(cx.unsupported(format!("Pow of {} is not supported (float bases only)", x.dtype())));
            }
            let y = cx.cast(&y, x.dtype())?;
            cx.binary(B::Pow, &x, &y)?
        }
        "Mod" => {
            let y = cx.input(ins, 1)?.clone();
            let fmod = a.int(cx, "fmod", 0)?;
            if fmod == 0 && x.dtype().is_float() {
                return Err(cx.unsupported("Mod of floats needs fmod = 1"));
            }
            let r = cx.binary(B::Mod, &x, &y)?;
            if fmod == 0 {
                r
            } else {
                // C's fmod has the dividend's sign: move a floored
                // remainder of the other sign by one divisor.
                let nonzero = cx.binary_scalar(B::Ne, &r, 0.0)?;
                let (rn, xn) = (cx.binary_scalar(B::Lt, &r, 0.0)?, cx.binary_scalar(B::Lt, &x, 0.0)?);
                let differ = cx.xor(&rn, &xn)?;
                let fix = cx.binary(B::And, &nonzero, &differ)?;
                let moved = cx.binary(B::Sub, &r, &y)?;
                cx.select(&fix, &moved, &r)?
            }
        }
        "Where" => {
            let (t, f) = (cx.input(ins, 1)?.clone(), cx.input(ins, 2)?.clone());
            cx.select(&x, &t, &f)?
        }
        "Cast" => {
            let to = a.int_opt(cx, "to")?.ok_or_else(|| cx.unsupported("Cast has no `to`"))?;
            let to = i32::try_from(to).map_err(|_| cx.unsupported(format!("Cast to type {to}")))?;
            let dtype = dtype_of(to).map_err(|e| cx.unsupported(e))?;
            cx.cast(&x, dtype)?
        }
        "CastLike" => {
            let like = cx.input(ins, 1)?.dtype();
            cx.cast(&x, like)?
        }
        "Sum" | "Max" | "Min" | "Mean" => {
            let b = match op {
                "Max" => B::Maximum,
                "Min" => B::Minimum,
                _ => B::Add,
            };
            let mut acc = x;
            for i in 1..ins.len() {
                let v = cx.input(ins, i)?.clone();
                acc = cx.binary(b, &acc, &v)?;
            }
            if op == "Mean" {
                acc = cx.binary_scalar(B::Div, &acc, ins.len() as f64)?;
            }
            acc
        }
        other => return Err(cx.unsupported(format!("operator {other}"))),
    };
    Ok(vec![y])
}

const B_OPS: &[(&str, B)] = &[
    ("Add", B::Add),
    ("Sub", B::Sub),
    ("Mul", B::Mul),
    ("Equal", B::Eq),
    ("Less", B::Lt),
    ("LessOrEqual", B::Le),
    ("Greater", B::Gt),
    ("GreaterOrEqual", B::Ge),
    ("And", B::And),
    ("Or", B::Or),
];

/// ONNX's `Div`: floats divide, integers truncate toward zero (tfc's
/// integer `/` floors, so add one where the remainder is not zero and the
/// signs differ).
fn div(cx: &mut Ctx, x: &Val, y: &Val) -> Result<Val, Diagnostic> {
    let q = cx.binary(B::Div, x, y)?;
    if x.dtype().is_float() {
        return Ok(q);
    }
    let r = cx.binary(B::Mod, x, y)?;
    let inexact = cx.binary_scalar(B::Ne, &r, 0.0)?;
    let (xn, yn) = (cx.binary_scalar(B::Lt, x, 0.0)?, cx.binary_scalar(B::Lt, y, 0.0)?);
    let signs = cx.xor(&xn, &yn)?;
    let fix = cx.binary(B::And, &inexact, &signs)?;
    let one = cx.add(Op::Cast(q.dtype()), &[&fix])?;
    cx.binary(B::Add, &q, &one)
}

/// `log(1 + exp(x))`, as ONNX's reference computes it.
fn softplus(cx: &mut Ctx, x: &Val) -> Result<Val, Diagnostic> {
    let e = cx.unary(U::Exp, x)?;
    cx.unary(U::Log1p, &e)
}

/// `x` where `x ≥ 0`, else `alpha · (exp(x) - 1)`.
fn elu(cx: &mut Ctx, x: &Val, alpha: f64) -> Result<Val, Diagnostic> {
    let neg = cx.binary_scalar(B::Lt, x, 0.0)?;
    let e = cx.unary(U::Expm1, x)?;
    let scaled = cx.binary_scalar(B::Mul, &e, alpha)?;
    cx.select(&neg, &scaled, x)
}

/// `max(0, min(1, alpha · x + beta))`.
fn hard_sigmoid(cx: &mut Ctx, x: &Val, alpha: f64, beta: f64) -> Result<Val, Diagnostic> {
    let ax = cx.binary_scalar(B::Mul, x, alpha)?;
    let s = cx.binary_scalar(B::Add, &ax, beta)?;
    let low = cx.binary_scalar(B::Minimum, &s, 1.0)?;
    cx.binary_scalar(B::Maximum, &low, 0.0)
}

/// `0.5 · x · (1 + erf(x / √2))`, or with `approximate = "tanh"`
/// `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`.
fn gelu(cx: &mut Ctx, x: &Val, approximate: &str) -> Result<Val, Diagnostic> {
    let inner = match approximate {
        "none" => {
            let s = cx.binary_scalar(B::Mul, x, std::f64::consts::FRAC_1_SQRT_2)?;
            cx.unary(U::Erf, &s)?
        }
        "tanh" => {
            let x3 = cx.binary(B::Mul, x, x)?;
            let x3 = cx.binary(B::Mul, &x3, x)?;
            let c = cx.binary_scalar(B::Mul, &x3, 0.044715)?;
            let s = cx.binary(B::Add, x, &c)?;
            let s = cx.binary_scalar(B::Mul, &s, (2.0 / std::f64::consts::PI).sqrt())?;
            cx.unary(U::Tanh, &s)?
        }
        other => return Err(cx.unsupported(format!("Gelu with approximate = \"{other}\""))),
    };
    let one = cx.binary_scalar(B::Add, &inner, 1.0)?;
    let half = cx.binary_scalar(B::Mul, x, 0.5)?;
    cx.binary(B::Mul, &half, &one)
}

/// `Clip`: bounds from attributes before opset 11, optional inputs after.
fn clip(cx: &mut Ctx, n: &Node, ins: &[Option<Val>], x: &Val) -> Result<Val, Diagnostic> {
    let a = Attrs(n);
    let (low, high) = if cx.opset < 11 {
        let low = a.float(cx, "min", f32::MIN)?;
        let high = a.float(cx, "max", f32::MAX)?;
        (Some(cx.scalar(f64::from(low), x.dtype())?), Some(cx.scalar(f64::from(high), x.dtype())?))
    } else {
        (ins.get(1).cloned().flatten(), ins.get(2).cloned().flatten())
    };
    let mut y = x.clone();
    if let Some(low) = low {
        y = cx.binary(B::Maximum, &y, &low)?;
    }
    if let Some(high) = high {
        y = cx.binary(B::Minimum, &y, &high)?;
    }
    // The output keeps the input's shape even where a bound is larger.
    let shape = x.shape().to_vec();
    if y.shape() != shape.as_slice() {
        return Err(cx.unsupported("Clip bounds that broadcast the input to a larger shape"));
    }
    Ok(y)
}
