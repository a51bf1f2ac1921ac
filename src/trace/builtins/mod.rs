//! The built-in operations (§10 of the language reference): their
//! parameter lists and how each lowers to primitive IR ops.

mod along;
mod create;
mod data;
pub use data::elements_text;
mod effects;
mod grad;
mod io;
mod nn;
mod onnx;
pub use onnx::OnnxModel;
mod quantize;
pub use quantize::{input_range_path, scale_path, Calibration, QuantizedWeight};
mod reduce;
pub(crate) mod scan;
mod shape;
mod static_assert;

use super::args::{bind, BuiltinArgs};
use super::call::CallArgs;
use super::value::Value;
use super::{TResult, Tracer};
use crate::diag::Span;
use crate::ir::{BinaryOp, DType, Literal, Op, TensorType, UnaryOp};

/// Every built-in with its parameters (`name=` optional, `name..` variadic).
const TABLE: &[(&str, &[&str])] = &[
    ("neg", &["x"]),
    ("abs", &["x"]),
    ("exp", &["x"]),
    ("log", &["x"]),
    ("sqrt", &["x"]),
    ("rsqrt", &["x"]),
    ("tanh", &["x"]),
    ("sigmoid", &["x"]),
    ("relu", &["x"]),
    ("sin", &["x"]),
    ("cos", &["x"]),
    ("floor", &["x"]),
    ("ceil", &["x"]),
    ("round", &["x"]),
    ("log1p", &["x"]),
    ("expm1", &["x"]),
    ("erf", &["x"]),
    ("sign", &["x"]),
    ("isnan", &["x"]),
    ("isinf", &["x"]),
    ("isfinite", &["x"]),
    ("floor_div", &["a", "b"]),
    ("maximum", &["a", "b"]),
    ("minimum", &["a", "b"]),
    ("pow", &["a", "b"]),
    ("where", &["cond", "a", "b"]),
    ("cast", &["x", "dtype"]),
    ("sum", &["x", "axis=", "keepdims="]),
    ("mean", &["x", "axis=", "keepdims="]),
    ("max", &["x", "axis=", "keepdims="]),
    ("min", &["x", "axis=", "keepdims="]),
    ("prod", &["x", "axis=", "keepdims="]),
    ("argmax", &["x", "axis=", "keepdims="]),
    ("argmin", &["x", "axis=", "keepdims="]),
    ("any", &["x", "axis=", "keepdims="]),
    ("all", &["x", "axis=", "keepdims="]),
    ("cumsum", &["x", "axis=", "reverse="]),
    ("argsort", &["x", "axis=", "descending="]),
    ("sort", &["x", "axis=", "descending="]),
    ("top_k", &["x", "k"]),
    ("take_along_axis", &["x", "indices", "axis="]),
    ("reshape", &["x", "shape"]),
    ("transpose", &["x", "perm="]),
    ("broadcast_to", &["x", "shape"]),
    ("concat", &["xs", "axis="]),
    ("stack", &["xs", "axis="]),
    ("slice", &["x", "start", "stop", "step="]),
    ("pad", &["x", "widths", "value="]),
    ("squeeze", &["x", "axis="]),
    ("expand_dims", &["x", "axis"]),
    ("shape", &["x"]),
    ("dtype", &["x"]),
    ("fans", &[]),
    ("matmul", &["a", "b"]),
    ("conv2d", &["x", "w", "stride=", "padding=", "dilation=", "groups="]),
    ("max_pool2d", &["x", "size", "stride=", "padding="]),
    ("avg_pool2d", &["x", "size", "stride=", "padding="]),
    ("one_hot", &["labels", "depth", "dtype="]),
    ("gather", &["params", "indices", "axis="]),
    ("embedding", &["table", "ids"]),
    ("dropout", &["x", "rate", "seed="]),
    ("categorical", &["logits", "seed="]),
    ("zeros", &["shape=", "dtype="]),
    ("ones", &["shape=", "dtype="]),
    ("full", &["shape", "value", "dtype="]),
    ("arange", &["n", "dtype="]),
    ("linspace", &["start", "stop", "num", "dtype="]),
    ("eye", &["n", "dtype="]),
    ("zeros_like", &["x"]),
    ("ones_like", &["x"]),
    ("uniform", &["shape=", "seed=", "low=", "high=", "dtype="]),
    ("normal", &["shape=", "seed=", "mean=", "std=", "dtype="]),
    ("print", &["xs..", "full="]),
    ("print_text", &["ids"]),
    ("assert_close", &["actual", "expected", "tol="]),
    ("static_assert", &["cond", "message"]),
    // Parsed and resolved now; executed by later versions.
    ("grad", &["f", "wrt="]),
    ("value_and_grad", &["f", "wrt="]),
    ("scan", &["f", "init", "xs", "reverse="]),
    ("save", &["model", "path"]),
    ("load", &["model", "path"]),
    ("load_csv", &["path", "label="]),
    ("load_npy", &["path"]),
    ("load_idx", &["images", "labels="]),
    ("load_safetensors", &["path", "keys.."]),
    ("load_tfrecord", &["paths", "features.."]),
    ("load_text", &["path", "window=", "stride="]),
    ("load_onnx", &["path"]),
    ("quantize", &["model", "calibration="]),
    ("range", &["n"]),
    ("from_tensors", &["xs.."]),
    ("map", &["ds", "f", "parallel="]),
    ("filter", &["ds", "f"]),
    ("shuffle", &["ds", "buffer", "seed="]),
    ("batch", &["ds", "n", "drop_remainder="]),
    ("repeat", &["ds", "n="]),
    ("take", &["ds", "n"]),
    ("skip", &["ds", "n"]),
    ("cache", &["ds", "path="]),
    ("prefetch", &["ds", "k="]),
    ("interleave", &["ds", "cycle_length", "block_length=", "parallel="]),
    ("split", &["ds", "fraction", "seed="]),
    ("first", &["ds"]),
    ("evaluate", &["ds", "f"]),
    ("count", &["ds"]),
    ("collect", &["ds"]),
];

/// Every built-in name, for did-you-mean suggestions.
pub const NAMES: &[&str] = &{
    let mut names = [""; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        names[i] = TABLE[i].0;
        i += 1;
    }
    names
};

/// The built-in called `name`, if any.
pub fn lookup(name: &str) -> Option<&'static str> {
    TABLE.iter().find(|(n, _)| *n == name).map(|(n, _)| *n)
}

fn params_of(name: &str) -> &'static [&'static str] {
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, p)| *p).unwrap_or(&[])
}

fn unary_of(name: &str) -> Option<UnaryOp> {
    Some(match name {
        "neg" => UnaryOp::Neg,
        "abs" => UnaryOp::Abs,
        "exp" => UnaryOp::Exp,
        "log" => UnaryOp::Log,
        "sqrt" => UnaryOp::Sqrt,
        "rsqrt" => UnaryOp::Rsqrt,
        "tanh" => UnaryOp::Tanh,
        "sigmoid" => UnaryOp::Sigmoid,
        "relu" => UnaryOp::Relu,
        "sin" => UnaryOp::Sin,
        "cos" => UnaryOp::Cos,
        "floor" => UnaryOp::Floor,
        "ceil" => UnaryOp::Ceil,
        "round" => UnaryOp::Round,
        "log1p" => UnaryOp::Log1p,
        "expm1" => UnaryOp::Expm1,
        "erf" => UnaryOp::Erf,
        "sign" => UnaryOp::Sign,
        _ => return None,
    })
}

impl Tracer<'_> {
    pub(crate) fn call_builtin(&mut self, name: &'static str, args: CallArgs, span: Span) -> TResult<Value> {
        let a = bind(name, params_of(name), args, span)?;
        if let Some(op) = unary_of(name) {
            let (v, s) = a.get(0).cloned().ok_or_else(|| a.bad(0, "a tensor"))?;
            return self.unary_op(op, &v, s, span);
        }
        match name {
            "maximum" | "minimum" | "pow" => {
                let op = match name {
                    "maximum" => BinaryOp::Maximum,
                    "minimum" => BinaryOp::Minimum,
                    _ => BinaryOp::Pow,
                };
                let (x, xs) = a.get(0).cloned().ok_or_else(|| a.bad(0, "a tensor"))?;
                let (y, ys) = a.get(1).cloned().ok_or_else(|| a.bad(1, "a tensor"))?;
                self.binary(op, (&x, xs), (&y, ys), span)
            }
            "floor_div" => self.floor_div(&a),
            "isnan" | "isinf" | "isfinite" => self.float_class(&a),
            "where" => self.select(&a),
            "cast" => {
                let x = self.arg_tensor(&a, 0, None)?;
                let d = match a.get(1) {
                    Some((Value::DType(d), _)) => *d,
                    _ => return Err(a.bad(1, "a dtype such as f16")),
                };
                let out = self.cast(&x, d, span)?;
                Ok(tensor(out))
            }
            "sum" | "mean" | "max" | "min" | "prod" | "argmax" | "argmin" | "any" | "all" => self.reduce(&a),
            "cumsum" | "argsort" | "sort" | "top_k" | "take_along_axis" => self.along_builtin(&a),
            "reshape" | "transpose" | "broadcast_to" | "concat" | "stack" | "slice" | "pad" | "squeeze"
            | "expand_dims" | "shape" => self.shape_builtin(&a),
            "matmul" => {
                let x = a.get(0).cloned().ok_or_else(|| a.bad(0, "a tensor"))?;
                let y = a.get(1).cloned().ok_or_else(|| a.bad(1, "a tensor"))?;
                self.matmul((&x.0, x.1), (&y.0, y.1), span)
            }
            "conv2d" | "max_pool2d" | "avg_pool2d" | "one_hot" | "gather" | "embedding" | "dropout" | "categorical" => {
                self.nn_builtin(&a)
            }
            "zeros" | "ones" | "full" | "arange" | "linspace" | "eye" | "zeros_like" | "ones_like" | "uniform"
            | "normal" => self.create_builtin(&a),
            "print" | "print_text" | "assert_close" => self.effect_builtin(&a),
            "dtype" => Ok(Value::DType(self.arg_tensor(&a, 0, None)?.ty.dtype)),
            "fans" => self.fans(&a),
            "grad" | "value_and_grad" => self.grad_builtin(&a),
            "scan" => self.scan_builtin(&a),
            "save" | "load" => self.checkpoint_builtin(&a),
            "static_assert" => self.static_assert(&a),
            "evaluate" => self.evaluate_builtin(&a),
            "load_onnx" => self.load_onnx(&a),
            "quantize" => self.quantize_builtin(&a),
            _ => self.data_builtin(&a),
        }
    }

    /// `floor_div(a, b)`: `floor(a / b)`, Python's `//`. Integer tensors
    /// divide so already (`/`); two ints give an int; anything else is the
    /// float quotient, floored.
    fn floor_div(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let (x, xs) = a.get(0).cloned().ok_or_else(|| a.bad(0, "a tensor or a number"))?;
        let (y, ys) = a.get(1).cloned().ok_or_else(|| a.bad(1, "a tensor or a number"))?;
        if let (Value::Int(p), Value::Int(q)) = (&x, &y) {
            return match crate::tensor::floor_div(*p, *q) {
                Some(r) => Ok(Value::Int(r)),
                None => Err(a.bad_value(1, "division by zero".to_string())),
            };
        }
        let q = self.binary(BinaryOp::Div, (&x, xs), (&y, ys), a.span)?;
        match &q {
            Value::Tensor(_, ty) if !ty.dtype.is_float() => Ok(q),
            _ => self.unary_op(UnaryOp::Floor, &q, a.span, a.span),
        }
    }

    /// `isnan(x)`, `isinf(x)`, `isfinite(x)`: bool tensors of `x`'s shape,
    /// built from IEEE comparisons that no rewrite folds (`x != x` is true
    /// exactly for NaN; `abs(x) == inf` for the infinities; `abs(x) < inf`
    /// for everything else). Integers are always finite and never NaN.
    fn float_class(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let x = self.arg_tensor(a, 0, None)?;
        let span = a.span;
        if x.ty.dtype == DType::Bool {
            return Err(a.bad(0, "a number tensor"));
        }
        if !x.ty.dtype.is_float() {
            let answer = a.name == "isfinite";
            let c = self.constant(Literal::Bool(vec![answer]), TensorType::scalar(DType::Bool), span)?;
            return Ok(tensor(self.broadcast_to(&c, &x.ty.shape, span)?));
        }
        if a.name == "isnan" {
            return Ok(tensor(self.node(Op::Binary(BinaryOp::Ne), &[&x, &x], span)?));
        }
        let magnitude = self.node(Op::Unary(UnaryOp::Abs), &[&x], span)?;
        let inf = self.scalar(f64::INFINITY, x.ty.dtype, span)?;
        let inf = self.broadcast_to(&inf, &x.ty.shape, span)?;
        let test = if a.name == "isinf" { BinaryOp::Eq } else { BinaryOp::Lt };
        Ok(tensor(self.node(Op::Binary(test), &[&magnitude, &inf], span)?))
    }

    fn select(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let (c, cs) = a.get(0).cloned().ok_or_else(|| a.bad(0, "a bool tensor"))?;
        let (x, xs) = a.get(1).cloned().ok_or_else(|| a.bad(1, "a tensor"))?;
        let (y, ys) = a.get(2).cloned().ok_or_else(|| a.bad(2, "a tensor"))?;
        let cond = self.operand(&c, Some(DType::Bool), cs)?;
        if cond.ty.dtype != DType::Bool {
            return Err(crate::diag::Diagnostic::new(
                crate::diag::Code::DtypeMismatch,
                format!("`where` needs a bool condition, found {}", cond.ty),
            )
            .label(cs, cond.ty.to_string())
            .help("compare to get a mask, e.g. `where(x > 0.0, x, 0.0)`")
            .into());
        }
        let ops = self.operands(&[(&x, xs), (&y, ys)])?;
        self.same_dtype(&ops, "`where`", a.span)?;
        let all = self.broadcast_all(&[cond, ops[0].clone(), ops[1].clone()], "`where`", a.span)?;
        let out = self.node(Op::Select, &[&all[0], &all[1], &all[2]], a.span)?;
        Ok(tensor(out))
    }
}

/// A tensor operand as a value.
pub(crate) fn tensor(o: super::tensor::Operand) -> Value {
    Value::Tensor(o.id, o.ty)
}
