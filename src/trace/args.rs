//! Argument access for built-ins: each built-in declares its parameter
//! names (with `=` for optional ones), arguments are bound to them like a
//! user function's, and typed getters turn values into what the op needs
//! with a diagnostic at the argument on mismatch.

use super::call::CallArgs;
use super::tensor::Operand;
use super::value::Value;
use super::{Fail, TResult, Tracer};
use crate::diag::{did_you_mean, Code, Diagnostic, Span};
use crate::ir::{DType, Literal, Op};

/// A built-in's bound arguments.
pub(crate) struct BuiltinArgs {
    pub name: &'static str,
    pub params: &'static [&'static str],
    pub vals: Vec<Option<(Value, Span)>>,
    pub span: Span,
}

/// A parameter's name without its `=` (optional) or `..` (rest) marker.
fn plain(p: &str) -> &str {
    let p = p.strip_suffix('=').unwrap_or(p);
    p.strip_suffix("..").unwrap_or(p)
}

/// Binds call arguments to a built-in's parameter list. A parameter written
/// `"axis="` is optional; one written `"xs.."` takes all remaining positional
/// arguments as a tuple.
pub(crate) fn bind(
    name: &'static str,
    params: &'static [&'static str],
    args: CallArgs,
    span: Span,
) -> TResult<BuiltinArgs> {
    let mut vals: Vec<Option<(Value, Span)>> = vec![None; params.len()];
    let given = args.positional.len();
    let mut pos = args.positional.into_iter().peekable();
    for (i, p) in params.iter().enumerate() {
        if p.ends_with("..") {
            let rest: Vec<(Value, Span)> = pos.by_ref().collect();
            if !rest.is_empty() {
                let s = rest[0].1.to(rest[rest.len() - 1].1);
                vals[i] = Some((Value::Tuple(rest.into_iter().map(|(v, _)| v).collect()), s));
            }
            break;
        }
        match pos.next() {
            Some(a) => vals[i] = Some(a),
            None => break,
        }
    }
    if let Some((_, s)) = pos.next() {
        // Say how many were given: with a pipe (`x |> relu(x)`) the count
        // includes the piped value, which is easy to forget.
        let max = params.len();
        return Err(Diagnostic::new(
            Code::Arity,
            format!(
                "`{name}` takes at most {max} positional argument{}, but {given} were given",
                if max == 1 { "" } else { "s" }
            ),
        )
        .label(s, "unexpected argument")
        .help(format!("`{name}` takes: {}", params.iter().map(|p| plain(p)).collect::<Vec<_>>().join(", ")))
        .into());
    }
    for (n, v, s) in args.named {
        match params.iter().position(|p| plain(p) == n) {
            Some(i) if vals[i].is_some() => {
                return Err(Diagnostic::new(Code::Duplicate, format!("argument `{n}` of `{name}` is given twice"))
                    .label(s, "again here")
                    .into())
            }
            Some(i) => vals[i] = Some((v, s)),
            None => {
                let names: Vec<&str> = params.iter().map(|p| plain(p)).collect();
                let mut d = Diagnostic::new(Code::UnknownArgument, format!("`{name}` has no parameter named `{n}`"))
                    .label(s, "unknown argument");
                d = match did_you_mean(n, names.iter().copied()) {
                    Some(m) => d.help(format!("did you mean `{m}`?")),
                    None => d.help(format!("`{name}` takes: {}", names.join(", "))),
                };
                return Err(d.into());
            }
        }
    }
    for (p, v) in params.iter().zip(&vals) {
        if v.is_none() && !p.ends_with('=') && !p.ends_with("..") {
            return Err(Diagnostic::new(Code::MissingArgument, format!("missing argument `{}` of `{name}`", plain(p)))
                .label(span, format!("`{name}` needs `{}`", plain(p)))
                .into());
        }
    }
    for (v, _) in vals.iter().flatten() {
        if matches!(v, Value::Poison) {
            return Err(Fail::Poisoned);
        }
    }
    Ok(BuiltinArgs { name, params, vals, span })
}

impl BuiltinArgs {
    pub fn get(&self, i: usize) -> Option<&(Value, Span)> {
        self.vals.get(i).and_then(|v| v.as_ref())
    }

    pub fn span_of(&self, i: usize) -> Span {
        self.get(i).map(|(_, s)| *s).unwrap_or(self.span)
    }

    fn param_name(&self, i: usize) -> &str {
        self.params.get(i).map(|p| plain(p)).unwrap_or("?")
    }

    pub fn bad(&self, i: usize, expected: &str) -> Fail {
        self.bad_diagnostic(i, expected).into()
    }

    fn bad_diagnostic(&self, i: usize, expected: &str) -> Diagnostic {
        let found = self.get(i).map(|(v, _)| v.describe()).unwrap_or_else(|| "nothing".into());
        Diagnostic::new(
            Code::Kind,
            format!("`{}` expects {expected} for `{}`, found {found}", self.name, self.param_name(i)),
        )
        .label(self.span_of(i), format!("expected {expected}"))
    }

    pub fn bad_value(&self, i: usize, message: String) -> Fail {
        Diagnostic::new(Code::BadValue, format!("`{}`: {message}", self.name))
            .label(self.span_of(i), "this argument")
            .into()
    }

    pub fn int(&self, i: usize) -> TResult<i64> {
        match self.get(i) {
            Some((Value::Int(n), _)) => Ok(*n),
            _ => Err(self.bad(i, "an int")),
        }
    }

    pub fn int_or(&self, i: usize, default: i64) -> TResult<i64> {
        if self.get(i).is_none() {
            return Ok(default);
        }
        self.int(i)
    }

    pub fn float_or(&self, i: usize, default: f64) -> TResult<f64> {
        match self.get(i) {
            None => Ok(default),
            Some((Value::Int(n), _)) => Ok(*n as f64),
            Some((Value::Float(x), _)) => Ok(*x),
            _ => Err(self.bad(i, "a number")),
        }
    }

    pub fn bool_or(&self, i: usize, default: bool) -> TResult<bool> {
        match self.get(i) {
            None => Ok(default),
            Some((Value::Bool(b), _)) => Ok(*b),
            _ => Err(self.bad(i, "a bool")),
        }
    }

    pub fn dtype_or(&self, i: usize, default: DType) -> TResult<DType> {
        match self.get(i) {
            None => Ok(default),
            Some((Value::DType(d), _)) => Ok(*d),
            _ => Err(self.bad(i, "a dtype such as f32")),
        }
    }

    pub fn str_or(&self, i: usize, default: &str) -> TResult<String> {
        match self.get(i) {
            None => Ok(default.to_string()),
            Some((Value::Str(s), _)) => Ok(s.clone()),
            _ => Err(self.bad(i, "a string")),
        }
    }

    /// An axis argument normalized against `rank` (negative counts from the end).
    pub fn axis(&self, i: usize, rank: usize, default: i64) -> TResult<usize> {
        let a = self.int_or(i, default)?;
        normalize_axis(a, rank).ok_or_else(|| self.axis_error(i, a, rank))
    }

    pub fn axis_error(&self, i: usize, a: i64, rank: usize) -> Fail {
        Diagnostic::new(Code::Axis, format!("`{}`: axis {a} is out of range for a tensor of rank {rank}", self.name))
            .label(self.span_of(i), format!("valid axes are -{rank}..{}", rank as i64 - 1))
            .into()
    }
}

/// `axis` in `-rank..rank` → `0..rank`.
pub(crate) fn normalize_axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let n = if a < 0 { a + r } else { a };
    (0..r).contains(&n).then_some(n as usize)
}

impl Tracer<'_> {
    /// A tensor argument; compile-time numbers become tensors of `like`.
    pub(crate) fn arg_tensor(&mut self, a: &BuiltinArgs, i: usize, like: Option<DType>) -> TResult<Operand> {
        match a.get(i) {
            Some((v, s)) => self.operand(v, like, *s),
            None => Err(a.bad(i, "a tensor")),
        }
    }

    /// A list of compile-time ints: a tuple, a single int, or a tensor
    /// literal of ints (whose constant node is dropped again).
    pub(crate) fn static_ints(&mut self, v: &Value) -> Option<Vec<i64>> {
        match v {
            Value::Int(n) => Some(vec![*n]),
            Value::Tuple(items) => items.iter().map(|i| if let Value::Int(n) = i { Some(*n) } else { None }).collect(),
            Value::Tensor(id, ty) if ty.rank() <= 1 => {
                let node = self.graph.node(*id);
                let ints = match &node.op {
                    Op::Constant { value: Literal::Int(v), .. } => Some(v.clone()),
                    // `[]` is an f32[0] literal (floats are the default for an
                    // empty literal), but as a shape it is the empty list: the
                    // scalar shape of `zeros([])` and `reshape(x, [])`.
                    Op::Constant { value: Literal::Float(v), .. } if v.is_empty() => Some(Vec::new()),
                    _ => None,
                };
                let fresh = id.index() >= self.kept_below;
                if ints.is_some() && fresh && self.graph.users(*id).is_empty() && !self.is_referenced(*id) {
                    self.graph.remove(*id);
                }
                ints
            }
            _ => None,
        }
    }

    /// Whether an effect or output still refers to a node.
    fn is_referenced(&self, id: crate::ir::NodeId) -> bool {
        self.graph.outputs.contains(&id)
            || self.effects.iter().any(|e| crate::ir::numbering::effect_operands(e).contains(&id))
    }

    pub(crate) fn arg_ints(&mut self, a: &BuiltinArgs, i: usize) -> TResult<Vec<i64>> {
        let v = a.get(i).map(|(v, _)| v.clone());
        if let Some(ints) = v.as_ref().and_then(|v| self.static_ints(v)) {
            return Ok(ints);
        }
        let mut d = a.bad_diagnostic(i, "a list of compile-time ints such as [2, 3]");
        // The usual way to get here: `d / heads` is a float, and a list
        // holding one is a float tensor.
        let float_literal = |v: &Value| match v {
            Value::Float(_) => true,
            Value::Tuple(items) => items.iter().any(|x| matches!(x, Value::Float(_))),
            Value::Tensor(id, _) => {
                matches!(&self.graph.node(*id).op, Op::Constant { value: Literal::Float(v), .. } if !v.is_empty())
            }
            _ => false,
        };
        if v.as_ref().is_some_and(float_literal) {
            d = d.help("`/` gives a float even for two ints (`7 / 2` is 3.5); divide ints with `floor_div(a, b)`");
        }
        Err(d.into())
    }

    /// A shape argument: non-negative compile-time ints.
    pub(crate) fn arg_shape(&mut self, a: &BuiltinArgs, i: usize) -> TResult<Vec<usize>> {
        let ints = self.arg_ints(a, i)?;
        if let Some(bad) = ints.iter().find(|d| **d < 0) {
            return Err(a.bad_value(i, format!("a shape cannot have the negative dimension {bad}")));
        }
        let shape: Vec<usize> = ints.into_iter().map(|d| d as usize).collect();
        super::tensor::check_size(&shape, a.span_of(i))?;
        Ok(shape)
    }
}
