//! Building typed nodes: constants, broadcasting, elementwise binary ops
//! between tensors and compile-time numbers. Every node's type comes from
//! `ir::infer`; its errors become diagnostics that show each operand's span
//! and type.

use super::value::Value;
use super::{Fail, TResult, Tracer};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::infer::{broadcast_shapes, infer};
use crate::ir::{BinaryOp, DType, Literal, NodeId, Op, TensorType};

/// Largest number of elements a traced tensor may have (2^34, 64 GiB of f32):
/// shapes beyond it are rejected before anything is allocated.
pub const MAX_ELEMENTS: u128 = 1 << 34;

/// A tensor operand: node, type and the span of the expression it came from.
#[derive(Clone, Debug)]
pub struct Operand {
    pub id: NodeId,
    pub ty: TensorType,
    pub span: Span,
}

impl Tracer<'_> {
    /// Adds a node whose type `infer` computes; a type error becomes a
    /// diagnostic labelled at every operand.
    pub(crate) fn node(&mut self, op: Op, inputs: &[&Operand], span: Span) -> TResult<Operand> {
        // Nearly every op has at most four operands: their types go in an
        // array on the stack rather than a fresh Vec per node.
        static PAD: TensorType = TensorType { dtype: DType::Bool, shape: Vec::new() };
        let mut small = [&PAD; 4];
        let heap: Vec<&TensorType>;
        let types: &[&TensorType] = if inputs.len() <= small.len() {
            for (slot, o) in small.iter_mut().zip(inputs) {
                *slot = &o.ty;
            }
            &small[..inputs.len()]
        } else {
            heap = inputs.iter().map(|o| &o.ty).collect();
            &heap
        };
        match infer(&op, types) {
            Ok(ty) => {
                check_size(&ty.shape, span)?;
                let id = self.graph.add_from(op, inputs.iter().map(|o| o.id), ty.clone(), span);
                Ok(Operand { id, ty, span })
            }
            Err(e) => {
                let mut d = Diagnostic::new(e.code, e.message).label(span, format!("in this {}", op.name()));
                // Operands that share a span (the parts of one tuple argument,
                // `concat((a, b))`) get one label listing their types, rather
                // than several labels stacked on the same text.
                let mut seen: Vec<Span> = Vec::new();
                for o in inputs {
                    if o.span != span && !seen.contains(&o.span) {
                        seen.push(o.span);
                        let types: Vec<String> =
                            inputs.iter().filter(|p| p.span == o.span).map(|p| p.ty.to_string()).collect();
                        d = d.label(o.span, types.join(", "));
                    }
                }
                Err(d.into())
            }
        }
    }

    /// A constant tensor.
    pub(crate) fn constant(&mut self, value: Literal, ty: TensorType, span: Span) -> TResult<Operand> {
        self.node(Op::Constant { value, ty }, &[], span)
    }

    /// A scalar constant of `dtype` holding `x`.
    pub(crate) fn scalar(&mut self, x: f64, dtype: DType, span: Span) -> TResult<Operand> {
        let value = match dtype {
            d if d.is_float() => Literal::Float(vec![d.round(x)]),
            DType::Bool => Literal::Bool(vec![x != 0.0]),
            _ => return self.int_scalar(x as i64, dtype, span),
        };
        self.constant(value, TensorType::scalar(dtype), span)
    }

    /// A scalar constant of the integer `dtype` holding `i` exactly (no trip
    /// through f64, which would round i64 values beyond 2^53).
    pub(crate) fn int_scalar(&mut self, i: i64, dtype: DType, span: Span) -> TResult<Operand> {
        check_int_fits(i, dtype, span)?;
        self.constant(Literal::Int(vec![i]), TensorType::scalar(dtype), span)
    }

    /// Converts a value to a tensor operand. Compile-time numbers take the
    /// dtype `like` (the tensor they meet), else the literal defaults
    /// (f32 for floats, i32 for ints).
    pub(crate) fn operand(&mut self, v: &Value, like: Option<DType>, span: Span) -> TResult<Operand> {
        match v {
            Value::Tensor(id, ty) => Ok(Operand { id: *id, ty: ty.clone(), span }),
            Value::Int(i) => {
                let dtype = like.unwrap_or(DType::I32);
                if dtype == DType::Bool {
                    return Err(literal_dtype_error("int", &i.to_string(), dtype, span));
                }
                if dtype.is_int() {
                    return self.int_scalar(*i, dtype, span);
                }
                self.scalar(*i as f64, dtype, span)
            }
            Value::Float(x) => {
                let dtype = like.unwrap_or(DType::F32);
                if !dtype.is_float() {
                    return Err(literal_dtype_error("float", &x.to_string(), dtype, span));
                }
                self.scalar(*x, dtype, span)
            }
            Value::Bool(b) => {
                let dtype = like.unwrap_or(DType::Bool);
                if dtype != DType::Bool {
                    return Err(literal_dtype_error("bool", &b.to_string(), dtype, span));
                }
                self.scalar(f64::from(u8::from(*b)), dtype, span)
            }
            Value::Poison => Err(Fail::Poisoned),
            other => Err(Diagnostic::new(Code::Kind, format!("expected a tensor, found {}", other.describe()))
                .label(span, "this is not a tensor")
                .into()),
        }
    }

    /// Broadcasts `o` to `shape` (no node if it already has that shape).
    pub(crate) fn broadcast_to(&mut self, o: &Operand, shape: &[usize], span: Span) -> TResult<Operand> {
        if o.ty.shape == shape {
            return Ok(o.clone());
        }
        let mut out = self.node(Op::BroadcastTo { shape: shape.to_vec() }, &[o], span)?;
        out.span = o.span;
        Ok(out)
    }

    /// Brings operands to one shape by NumPy broadcasting, or reports which
    /// operands do not fit.
    pub(crate) fn broadcast_all(&mut self, ops: &[Operand], what: &str, span: Span) -> TResult<Vec<Operand>> {
        let mut shape: Vec<usize> = Vec::new();
        for o in ops {
            shape = match broadcast_shapes(&shape, &o.ty.shape) {
                Some(s) => s,
                None => {
                    // The primary span is the whole operation (`a + b`,
                    // `where(…)`): the error is the operation's, and each
                    // operand gets its own label with its shape.
                    let mut d = Diagnostic::new(
                        Code::Broadcast,
                        format!(
                            "{what}: shapes cannot be broadcast together: {}",
                            ops.iter().map(|o| o.ty.to_string()).collect::<Vec<_>>().join(" and ")
                        ),
                    )
                    .label(span, "incompatible shapes");
                    for o in ops {
                        d = d.label(o.span, o.ty.to_string());
                    }
                    return Err(d.help("dimensions must be equal or 1, aligned from the right").into());
                }
            };
        }
        ops.iter().map(|o| self.broadcast_to(o, &shape, span)).collect()
    }

    /// Requires all operands to share a dtype (no implicit promotion). The
    /// primary span is the whole operation `span`; each operand is labelled.
    pub(crate) fn same_dtype(&mut self, ops: &[Operand], what: &str, span: Span) -> TResult<()> {
        if let Some(first) = ops.first() {
            if let Some(bad) = ops.iter().find(|o| o.ty.dtype != first.ty.dtype) {
                let mut d = Diagnostic::new(
                    Code::DtypeMismatch,
                    format!("{what}: operands have different dtypes: {} and {}", first.ty.dtype, bad.ty.dtype),
                )
                .label(span, "different dtypes");
                for o in ops {
                    d = d.label(o.span, o.ty.to_string());
                }
                return Err(d
                    .help(format!(
                        "there is no implicit promotion; convert one side with `cast(x, {})`",
                        first.ty.dtype
                    ))
                    .into());
            }
        }
        Ok(())
    }

    /// Converts values to tensors that share a dtype: compile-time numbers
    /// take the dtype of the first tensor among them.
    pub(crate) fn operands(&mut self, vals: &[(&Value, Span)]) -> TResult<Vec<Operand>> {
        let like = vals.iter().find_map(|(v, s)| match v {
            Value::Tensor(_, t) => Some((t, *s)),
            _ => None,
        });
        let mut out = Vec::with_capacity(vals.len());
        for (v, s) in vals {
            match self.operand(v, like.as_ref().map(|(t, _)| t.dtype), *s) {
                Ok(o) => out.push(o),
                // A literal that cannot take the tensor's dtype: also point at
                // the tensor it met, so both sides of the mismatch are shown.
                Err(Fail::Diag(mut d)) if d.code == Code::DtypeMismatch => {
                    if let Some((t, ts)) = &like {
                        d.labels.push(crate::diag::Label { span: *ts, message: t.to_string() });
                    }
                    return Err(Fail::Diag(d));
                }
                Err(f) => return Err(f),
            }
        }
        Ok(out)
    }

    /// An elementwise binary op between values, with broadcasting. Two
    /// compile-time numbers are combined at compile time.
    pub(crate) fn binary(&mut self, op: BinaryOp, a: (&Value, Span), b: (&Value, Span), span: Span) -> TResult<Value> {
        if let Some(v) = fold_numbers(op, a.0, b.0) {
            return v.map_err(|msg| Diagnostic::new(Code::BadValue, msg).label(span, "here").into());
        }
        let ops = self.operands(&[a, b])?;
        let what = binary_symbol(op);
        self.same_dtype(&ops, what, span)?;
        let dtype = ops[0].ty.dtype;
        if op.is_logical() != (dtype == DType::Bool) {
            let need = if op.is_logical() { "bool" } else { "numeric" };
            let mut d = Diagnostic::new(Code::DtypeMismatch, format!("{what} takes {need} operands, not {dtype}"))
                .label(span, format!("needs {need} operands"));
            d = if op.is_logical() {
                d.help("compare to get a bool mask first, e.g. `(a > 0.0) and (b > 0.0)`")
            } else {
                d.help(format!("convert the operands with `cast(…, f32)` to use {what}"))
            };
            return Err(d.label(ops[0].span, ops[0].ty.to_string()).label(ops[1].span, ops[1].ty.to_string()).into());
        }
        let ops = self.broadcast_all(&ops, what, span)?;
        let out = self.node(Op::Binary(op), &[&ops[0], &ops[1]], span)?;
        Ok(Value::Tensor(out.id, out.ty))
    }

    /// Casts an operand to `dtype` (no node if it already has it).
    pub(crate) fn cast(&mut self, o: &Operand, dtype: DType, span: Span) -> TResult<Operand> {
        if o.ty.dtype == dtype {
            return Ok(o.clone());
        }
        self.node(Op::Cast(dtype), &[o], span)
    }

    /// Reshapes (no node if the shape is unchanged).
    pub(crate) fn reshape(&mut self, o: &Operand, shape: Vec<usize>, span: Span) -> TResult<Operand> {
        if o.ty.shape == shape {
            return Ok(o.clone());
        }
        self.node(Op::Reshape { shape }, &[o], span)
    }
}

/// Rejects shapes whose element count is too large to ever allocate.
pub(crate) fn check_size(shape: &[usize], span: Span) -> TResult<()> {
    let mut n: u128 = 1;
    for &d in shape {
        n = n.saturating_mul(d as u128);
    }
    if n > MAX_ELEMENTS {
        return Err(Diagnostic::new(Code::TooLarge, format!("a tensor of shape {shape:?} has {n} elements"))
            .label(span, "this tensor is too large")
            .help(format!("the limit is {MAX_ELEMENTS} elements"))
            .into());
    }
    Ok(())
}

/// An integer constant must fit its dtype: an i32 literal beyond the i32
/// range is an error (E0103), as in NumPy (`np.array([2**40], np.int32)`
/// raises), rather than silently wrapping to another number.
pub(crate) fn check_int_fits(i: i64, dtype: DType, span: Span) -> TResult<()> {
    if dtype == DType::I32 && i32::try_from(i).is_err() {
        return Err(Diagnostic::new(Code::BadNumber, format!("the integer {i} does not fit i32"))
            .label(span, "out of range for i32")
            .help(format!("i32 holds {}..={}; write `{i}i64` for an i64", i32::MIN, i32::MAX))
            .into());
    }
    Ok(())
}

/// A plain number or bool literal met a tensor whose dtype it cannot take
/// (`counts * 0.5` with `counts: i32[3]`). `operands` adds a label at the
/// tensor; the help says how to write it, since there is no promotion.
fn literal_dtype_error(kind: &str, lit: &str, dtype: DType, span: Span) -> Fail {
    let help = match (kind, dtype) {
        (_, DType::Bool) => "a bool tensor takes `true` or `false`; compare to get a mask, e.g. `x > 0`".to_string(),
        ("bool", _) => format!("use a number, or convert a bool mask with `cast(mask, {dtype})`"),
        _ => "a literal takes the dtype of the tensor it meets, and there is no implicit promotion: \
              write an integer, or convert the tensor first with `cast(…, f32)`"
            .to_string(),
    };
    Diagnostic::new(Code::DtypeMismatch, format!("the {kind} literal `{lit}` cannot take the dtype {dtype}"))
        .label(span, format!("a {kind} literal"))
        .help(help)
        .into()
}

/// The operator as messages quote it, backquotes included (a constant, so
/// that the hot path of every binary op formats nothing).
fn binary_symbol(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "`+`",
        BinaryOp::Sub => "`-`",
        BinaryOp::Mul => "`*`",
        BinaryOp::Div => "`/`",
        BinaryOp::Mod => "`%`",
        BinaryOp::Pow => "`^`",
        BinaryOp::Maximum => "`maximum`",
        BinaryOp::Minimum => "`minimum`",
        BinaryOp::Eq => "`==`",
        BinaryOp::Ne => "`!=`",
        BinaryOp::Lt => "`<`",
        BinaryOp::Le => "`<=`",
        BinaryOp::Gt => "`>`",
        BinaryOp::Ge => "`>=`",
        BinaryOp::And => "`and`",
        BinaryOp::Or => "`or`",
    }
}

/// Compile-time arithmetic on numbers: ints stay ints (except `/`, which
/// gives a float, as in Python), floats win over ints.
fn fold_numbers(op: BinaryOp, a: &Value, b: &Value) -> Option<Result<Value, String>> {
    use BinaryOp::*;
    let r = match (a, b) {
        (Value::Int(x), Value::Int(y)) => {
            let (x, y) = (*x, *y);
            match op {
                Add => x.checked_add(y).map(Value::Int).ok_or("integer overflow".to_string()),
                Sub => x.checked_sub(y).map(Value::Int).ok_or("integer overflow".to_string()),
                Mul => x.checked_mul(y).map(Value::Int).ok_or("integer overflow".to_string()),
                Div if y == 0 => Err("division by zero".to_string()),
                Div => Ok(Value::Float(x as f64 / y as f64)),
                Mod => crate::tensor::floor_mod(x, y).map(Value::Int).ok_or("modulo by zero".to_string()),
                // A non-negative power of an int is an int, or an overflow
                // (as `+`, `-` and `*`); a negative power is a float.
                Pow if y >= 0 => match x {
                    0 | 1 => Ok(Value::Int(if y == 0 { 1 } else { x })),
                    -1 => Ok(Value::Int(if y % 2 == 0 { 1 } else { -1 })),
                    _ => u32::try_from(y)
                        .ok()
                        .and_then(|e| x.checked_pow(e))
                        .map(Value::Int)
                        .ok_or("integer overflow".into()),
                },
                Pow => Ok(Value::Float((x as f64).powf(y as f64))),
                Maximum => Ok(Value::Int(x.max(y))),
                Minimum => Ok(Value::Int(x.min(y))),
                Eq => Ok(Value::Bool(x == y)),
                Ne => Ok(Value::Bool(x != y)),
                Lt => Ok(Value::Bool(x < y)),
                Le => Ok(Value::Bool(x <= y)),
                Gt => Ok(Value::Bool(x > y)),
                Ge => Ok(Value::Bool(x >= y)),
                And | Or => Err("`and`/`or` take bools".to_string()),
            }
        }
        (Value::Int(_) | Value::Float(_), Value::Int(_) | Value::Float(_)) => {
            let x = number(a)?;
            let y = number(b)?;
            Ok(match op {
                Add => Value::Float(x + y),
                Sub => Value::Float(x - y),
                Mul => Value::Float(x * y),
                Div => Value::Float(x / y),
                Mod => Value::Float(crate::tensor::f64_binary(Mod).map_or(f64::NAN, |f| f(x, y))),
                Pow => Value::Float(x.powf(y)),
                Maximum => Value::Float(x.max(y)),
                Minimum => Value::Float(x.min(y)),
                Eq => Value::Bool(x == y),
                Ne => Value::Bool(x != y),
                Lt => Value::Bool(x < y),
                Le => Value::Bool(x <= y),
                Gt => Value::Bool(x > y),
                Ge => Value::Bool(x >= y),
                And | Or => return Some(Err("`and`/`or` take bools".to_string())),
            })
        }
        (Value::Bool(x), Value::Bool(y)) => match op {
            And => Ok(Value::Bool(*x && *y)),
            Or => Ok(Value::Bool(*x || *y)),
            Eq => Ok(Value::Bool(x == y)),
            Ne => Ok(Value::Bool(x != y)),
            _ => Err(format!("{} does not take bools", binary_symbol(op))),
        },
        (Value::Str(x), Value::Str(y)) => match op {
            Add => Ok(Value::Str(format!("{x}{y}"))),
            Eq => Ok(Value::Bool(x == y)),
            Ne => Ok(Value::Bool(x != y)),
            _ => Err(format!("{} does not take strings", binary_symbol(op))),
        },
        _ => return None,
    };
    Some(r)
}

/// A compile-time number as f64.
pub(crate) fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(x) => Some(*x),
        _ => None,
    }
}
