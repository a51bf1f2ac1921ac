//! A `Spec` (an elementwise loop nest: a kernel's body, a reduction's
//! prologue or epilogue, a product's epilogue) as one WGSL shader, one
//! thread per element of its iteration space.
//!
//! Contract: `shader` returns `None` for what WGSL here does not compute
//! as the interpreter does: 64-bit values, the round-to-odd narrowing
//! before a half type, random streams, and integer ops that can fail (`/`, `^`,
//! `%` of integers, which the interpreter reports as errors). The thread
//! of flat index `i` splits `i` into the outer coordinates and the inner
//! one, loads each operand at its strides, evaluates the expressions in
//! order and stores each output at `i` of its value.
//!
//! Example: `relu(h + broadcast_to(b, [64, 256]))` is `outer = [64]`,
//! `inner = 256`: `o0 = i / 256`, `j = i % 256`, `e0 = h[o0 * 256 + j]`,
//! `e1 = b[j]`, `e2 = e0 + e1`, `e3 = relu_f(e2)`, stored at `i`.

use super::{per_element, Place, Shader};
use crate::ir::spec::{Expr, Inner, Kind, Spec};
use crate::ir::{BinaryOp, NodeId, UnaryOp};
use std::fmt::Write;

/// The shader of `spec`, reading and writing values where `place` says,
/// or `None` when it uses something without a WGSL template.
pub fn shader(spec: &Spec, place: &dyn Fn(NodeId) -> Option<Place>, label: &str) -> Option<Shader> {
    let n = spec.outer.iter().product::<usize>() * spec.inner;
    if !spec.fallible.is_empty() || !spec.stores.iter().all(|&k| word_kind(k)) {
        return None;
    }
    let mut body = String::new();
    let _ = writeln!(body, "  let j = i % {}u;", spec.inner.max(1));
    // The outer coordinates, last dim first.
    let _ = writeln!(body, "  var r = i / {}u;", spec.inner.max(1));
    for (d, &size) in spec.outer.iter().enumerate().rev() {
        let _ = writeln!(body, "  let o{d} = r % {}u; r = r / {}u;", size.max(1), size.max(1));
    }
    for (e, (expr, kind)) in spec.exprs.iter().enumerate() {
        let value = expression(spec, expr, *kind, place)?;
        let _ = writeln!(body, "  let e{e}: {} = {value};", wgsl_type(*kind)?);
    }
    for ((&e, &node), &kind) in spec.outputs.iter().zip(&spec.output_nodes).zip(&spec.stores) {
        let at = place(node)?.at("i");
        let _ = writeln!(body, "  {at} = {};", to_word(&format!("e{e}"), kind)?);
    }
    body.push_str("}\n");
    Some(per_element(n, &body, label))
}

/// Whether values of this kind are one word in the unit's buffers (a half
/// type as its exact `f32`).
fn word_kind(kind: Kind) -> bool {
    matches!(kind, Kind::F32 | Kind::I32 | Kind::Mask | Kind::F16 | Kind::BF16)
}

fn wgsl_type(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::F32 => Some("f32"),
        Kind::I32 => Some("i32"),
        Kind::Mask => Some("bool"),
        _ => None,
    }
}

/// The word that stores `value` of `kind`.
fn to_word(value: &str, kind: Kind) -> Option<String> {
    match kind {
        Kind::F32 | Kind::I32 | Kind::F16 | Kind::BF16 => Some(format!("bitcast<u32>({value})")),
        Kind::Mask => Some(format!("select(0u, 1u, {value})")),
        _ => None,
    }
}

/// The value of the word `word` as `kind`.
fn from_word(word: &str, kind: Kind) -> Option<String> {
    match kind {
        Kind::F32 | Kind::F16 | Kind::BF16 => Some(format!("bitcast<f32>({word})")),
        Kind::I32 => Some(format!("bitcast<i32>({word})")),
        Kind::Mask => Some(format!("({word} != 0u)")),
        _ => None,
    }
}

fn expression(spec: &Spec, expr: &Expr, kind: Kind, place: &dyn Fn(NodeId) -> Option<Place>) -> Option<String> {
    let e = |x: &usize| format!("e{x}");
    let operand_kind = |x: &usize| spec.exprs.get(*x).map(|(_, k)| *k);
    Some(match expr {
        Expr::Load(l) => {
            let load = spec.loads.get(*l)?;
            if !word_kind(load.kind) {
                return None;
            }
            let mut index: Vec<String> =
                load.outer.iter().enumerate().filter(|(_, &s)| s != 0).map(|(d, s)| format!("o{d} * {s}u")).collect();
            if load.inner == Inner::Contig {
                index.push("j".into());
            }
            let index = if index.is_empty() { "0u".to_string() } else { index.join(" + ") };
            from_word(&place(load.node)?.at(&index), load.kind)?
        }
        Expr::Unary(op, x) => unary(*op, &e(x), kind)?,
        Expr::Binary(op, a, b) => binary(*op, &e(a), &e(b), operand_kind(a)?)?,
        Expr::Select(c, a, b) => format!("select({}, {}, {})", e(b), e(a), e(c)),
        Expr::Convert(to, x) => convert(&e(x), operand_kind(x)?, *to)?,
        Expr::OneHot(label) => format!("select(0.0, 1.0, {} == f32(j))", e(label)),
        Expr::Iota { stride, size } => {
            let coordinate = format!("((i / {}u) % {}u)", (*stride).max(1), (*size).max(1));
            match kind {
                Kind::F32 => format!("f32{coordinate}"),
                Kind::I32 => format!("i32{coordinate}"),
                _ => return None,
            }
        }
        Expr::Round(Kind::F16, x) => format!("round_f16({})", e(x)),
        Expr::Round(Kind::BF16, x) => format!("round_bf16({})", e(x)),
        Expr::Round(..) | Expr::ToOddF32(_) | Expr::Random { .. } => return None,
    })
}

fn unary(op: UnaryOp, x: &str, kind: Kind) -> Option<String> {
    Some(match (kind, op) {
        (Kind::F32, UnaryOp::Neg) => format!("-{x}"),
        (Kind::F32, UnaryOp::Abs) => format!("abs({x})"),
        (Kind::F32, UnaryOp::Exp) => format!("exp_f({x})"),
        (Kind::F32, UnaryOp::Log) => format!("log_f({x})"),
        (Kind::F32, UnaryOp::Sqrt) => format!("sqrt({x})"),
        (Kind::F32, UnaryOp::Rsqrt) => format!("1.0 / sqrt({x})"),
        (Kind::F32, UnaryOp::Tanh) => format!("tanh_f({x})"),
        (Kind::F32, UnaryOp::Sigmoid) => format!("sigmoid_f({x})"),
        (Kind::F32, UnaryOp::Relu) => format!("relu_f({x})"),
        (Kind::F32, UnaryOp::Sin) => format!("sin_f({x})"),
        (Kind::F32, UnaryOp::Cos) => format!("cos_f({x})"),
        (Kind::F32, UnaryOp::Floor) => format!("floor({x})"),
        (Kind::F32, UnaryOp::Ceil) => format!("ceil({x})"),
        // WGSL's `round` takes halves to even, as NumPy's.
        (Kind::F32, UnaryOp::Round) => format!("round({x})"),
        (Kind::F32, UnaryOp::Sign) => format!("sign_f({x})"),
        (Kind::F32, UnaryOp::Log1p) => format!("log1p_f({x})"),
        (Kind::F32, UnaryOp::Expm1) => format!("expm1_f({x})"),
        (Kind::F32, UnaryOp::Erf) => format!("erf_f({x})"),
        (Kind::Mask, UnaryOp::Not) => format!("!{x}"),
        // Integer arithmetic wraps in WGSL, as in the interpreter.
        (Kind::I32, UnaryOp::Neg) => format!("-{x}"),
        (Kind::I32, UnaryOp::Abs) => format!("abs({x})"),
        (Kind::I32, UnaryOp::Relu) => format!("max({x}, 0)"),
        (Kind::I32, UnaryOp::Sign) => format!("sign_i({x})"),
        _ => return None,
    })
}

/// `a op b` for operands of `kind` (a comparison's result is a mask).
fn binary(op: BinaryOp, a: &str, b: &str, kind: Kind) -> Option<String> {
    let infix = |sym: &str| format!("({a} {sym} {b})");
    Some(match (kind, op) {
        (Kind::F32 | Kind::I32, BinaryOp::Add) => infix("+"),
        (Kind::F32 | Kind::I32, BinaryOp::Sub) => infix("-"),
        (Kind::F32 | Kind::I32, BinaryOp::Mul) => infix("*"),
        (Kind::F32, BinaryOp::Div) => infix("/"),
        (Kind::F32, BinaryOp::Maximum) => format!("max_nan({a}, {b})"),
        (Kind::F32, BinaryOp::Minimum) => format!("min_nan({a}, {b})"),
        (Kind::F32, BinaryOp::Pow) => format!("pow_f({a}, {b})"),
        (Kind::F32, BinaryOp::Mod) => format!("mod_f({a}, {b})"),
        (Kind::I32, BinaryOp::Maximum) => format!("max({a}, {b})"),
        (Kind::I32, BinaryOp::Minimum) => format!("min({a}, {b})"),
        (_, BinaryOp::Eq) => infix("=="),
        (_, BinaryOp::Ne) => infix("!="),
        (_, BinaryOp::Lt) => infix("<"),
        (_, BinaryOp::Le) => infix("<="),
        (_, BinaryOp::Gt) => infix(">"),
        (_, BinaryOp::Ge) => infix(">="),
        (Kind::Mask, BinaryOp::And) => infix("&&"),
        (Kind::Mask, BinaryOp::Or) => infix("||"),
        _ => return None,
    })
}

/// `x` of kind `from` as `to`, as the interpreter casts.
fn convert(x: &str, from: Kind, to: Kind) -> Option<String> {
    Some(match (from, to) {
        (a, b) if a == b => x.to_string(),
        (Kind::Mask, Kind::F32) => format!("select(0.0, 1.0, {x})"),
        (Kind::Mask, Kind::I32) => format!("select(0, 1, {x})"),
        // NaN is true: its bits are not those of a zero.
        (Kind::F32, Kind::Mask) => format!("((bitcast<u32>({x}) & 0x7fffffffu) != 0u)"),
        (Kind::I32, Kind::Mask) => format!("({x} != 0)"),
        (Kind::I32, Kind::F32) => format!("f32({x})"),
        (Kind::F32, Kind::I32) => format!("to_i32({x})"),
        _ => return None,
    })
}
