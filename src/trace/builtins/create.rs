//! Creation built-ins: `zeros ones full arange linspace eye zeros_like
//! ones_like uniform normal`. Inside a `param` declaration, `zeros()`,
//! `ones()`, `uniform()` and `normal()` take their shape and dtype from the
//! declared type and their seed from the model's seed and the parameter path.

use super::tensor;
use crate::diag::{Code, Diagnostic};
use crate::ir::{BinaryOp, DType, Distribution, Literal, Op, TensorType};
use crate::trace::args::BuiltinArgs;
use crate::trace::value::Value;
use crate::trace::{TResult, Tracer};

impl Tracer<'_> {
    pub(crate) fn create_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let span = a.span;
        match a.name {
            "zeros_like" | "ones_like" => {
                let x = self.arg_tensor(a, 0, None)?;
                let v = if a.name == "zeros_like" { 0.0 } else { 1.0 };
                let c = self.scalar(v, x.ty.dtype, span)?;
                Ok(tensor(self.broadcast_to(&c, &x.ty.shape, span)?))
            }
            "zeros" | "ones" | "full" => {
                let (shape, ctx_dtype) = self.shape_or_param(a, 0)?;
                let (value, default_dtype) = match a.name {
                    "zeros" => (Value::Float(0.0), ctx_dtype.unwrap_or(DType::F32)),
                    "ones" => (Value::Float(1.0), ctx_dtype.unwrap_or(DType::F32)),
                    _ => {
                        let v = a.get(1).map(|(v, _)| v.clone()).ok_or_else(|| a.bad(1, "a number"))?;
                        let d = match v {
                            Value::Int(_) => DType::I32,
                            Value::Bool(_) => DType::Bool,
                            Value::Float(_) => DType::F32,
                            _ => return Err(a.bad(1, "a compile-time number")),
                        };
                        (v, d)
                    }
                };
                let dtype_i = if a.name == "full" { 2 } else { 1 };
                let dtype = a.dtype_or(dtype_i, default_dtype)?;
                // The fill value converts to an explicit dtype as NumPy's
                // `np.full(shape, v, dtype)` does: numbers to bool are `!= 0`
                // (so `ones([3], dtype = bool)` is all true), bools to
                // numbers 0 / 1, whole floats to ints.
                let value = match (value, dtype) {
                    (Value::Float(x), DType::Bool) => Value::Bool(x != 0.0),
                    (Value::Int(i), DType::Bool) => Value::Bool(i != 0),
                    (Value::Bool(b), d) if d != DType::Bool => Value::Int(i64::from(b)),
                    (Value::Float(x), d) if !d.is_float() && x.fract() == 0.0 => Value::Int(x as i64),
                    (v, _) => v,
                };
                let c = self.operand(&value, Some(dtype), a.span_of(1))?;
                Ok(tensor(self.broadcast_to(&c, &shape, span)?))
            }
            "arange" => {
                let n = a.int(0)?;
                if n < 0 {
                    return Err(a.bad_value(0, format!("the length cannot be negative ({n})")));
                }
                let dtype = a.dtype_or(1, DType::I32)?;
                if dtype == DType::Bool {
                    return Err(a.bad_value(1, "arange cannot produce bool".into()));
                }
                Ok(tensor(self.node(Op::Iota { ty: TensorType::new(dtype, vec![n as usize]), axis: 0 }, &[], span)?))
            }
            "eye" => {
                let n = a.int(0)?;
                if n < 0 {
                    return Err(a.bad_value(0, format!("the size cannot be negative ({n})")));
                }
                let n = n as usize;
                let dtype = a.dtype_or(1, DType::F32)?;
                let rows = self.node(Op::Iota { ty: TensorType::new(DType::I32, vec![n, n]), axis: 0 }, &[], span)?;
                let cols = self.node(Op::Iota { ty: TensorType::new(DType::I32, vec![n, n]), axis: 1 }, &[], span)?;
                let diag = self.node(Op::Binary(BinaryOp::Eq), &[&rows, &cols], span)?;
                Ok(tensor(self.cast(&diag, dtype, span)?))
            }
            "linspace" => {
                let start = a.float_or(0, 0.0)?;
                let stop = a.float_or(1, 0.0)?;
                let num = a.int(2)?;
                if num < 0 {
                    return Err(a.bad_value(2, format!("num cannot be negative ({num})")));
                }
                let dtype = a.dtype_or(3, DType::F32)?;
                if !dtype.is_float() {
                    return Err(a.bad_value(3, "linspace produces floats".into()));
                }
                let n = num as usize;
                let step = if n > 1 { (stop - start) / (n - 1) as f64 } else { 0.0 };
                let values = (0..n).map(|i| dtype.round(start + step * i as f64)).collect();
                Ok(tensor(self.constant(Literal::Float(values), TensorType::new(dtype, vec![n]), span)?))
            }
            _ => self.random(a),
        }
    }

    /// `uniform(shape, seed, low, high)` / `normal(shape, seed, mean, std)`.
    fn random(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let span = a.span;
        let (shape, ctx_dtype) = self.shape_or_param(a, 0)?;
        let dtype = a.dtype_or(4, ctx_dtype.unwrap_or(DType::F32))?;
        if !dtype.is_float() {
            return Err(a.bad_value(4, format!("random values must be floats, not {dtype}")));
        }
        let seed = match (a.get(1), self.param_context.as_ref()) {
            (Some(_), _) => a.int(1)? as u64,
            (None, Some((_, s))) => *s,
            (None, None) => 0,
        };
        let (dist, lo, hi) = if a.name == "uniform" {
            (Distribution::Uniform, a.float_or(2, 0.0)?, a.float_or(3, 1.0)?)
        } else {
            (Distribution::Normal, a.float_or(2, 0.0)?, a.float_or(3, 1.0)?)
        };
        let ty = TensorType::new(dtype, shape.clone());
        let r = self.node(Op::Random { ty, dist, seed }, &[], span)?;
        // uniform: low + (high - low) * u;  normal: mean + std * z.
        let scale = if dist == Distribution::Uniform { hi - lo } else { hi };
        let mut out = r;
        if scale != 1.0 {
            let s = self.scalar(scale, dtype, span)?;
            let s = self.broadcast_to(&s, &shape, span)?;
            out = self.node(Op::Binary(BinaryOp::Mul), &[&out, &s], span)?;
        }
        if lo != 0.0 {
            let l = self.scalar(lo, dtype, span)?;
            let l = self.broadcast_to(&l, &shape, span)?;
            out = self.node(Op::Binary(BinaryOp::Add), &[&out, &l], span)?;
        }
        Ok(tensor(out))
    }

    /// `fans()`: the (fan_in, fan_out) of the parameter being initialized.
    pub(crate) fn fans(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let Some((ty, _)) = &self.param_context else {
            return Err(Diagnostic::new(Code::NotStatic, "`fans()` is only known while initializing a `param`")
                .label(a.span, "not inside a param declaration")
                .into());
        };
        let s = &ty.shape;
        let (fan_in, fan_out) = match s.len() {
            0 => (1, 1),
            1 => (s[0], s[0]),
            r => {
                let field: usize = s[..r - 2].iter().product();
                (s[r - 2] * field, s[r - 1] * field)
            }
        };
        Ok(Value::Tuple(vec![Value::Int(fan_in as i64), Value::Int(fan_out as i64)]))
    }

    /// The shape argument, or the declared shape of the `param` being
    /// initialized when the argument is omitted.
    fn shape_or_param(&mut self, a: &BuiltinArgs, i: usize) -> TResult<(Vec<usize>, Option<DType>)> {
        if a.get(i).is_some() {
            return Ok((self.arg_shape(a, i)?, None));
        }
        match &self.param_context {
            Some((ty, _)) => Ok((ty.shape.clone(), Some(ty.dtype))),
            None => Err(Diagnostic::new(Code::MissingArgument, format!("`{}` needs a shape here", a.name))
                .label(a.span, "no shape given")
                .help("a shape can be omitted only when initializing a `param`, whose type gives it")
                .into()),
        }
    }
}
