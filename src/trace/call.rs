//! Calls: binding arguments to parameters (positional, named, defaults),
//! inlining user functions and methods, and checking type annotations by
//! unification (`f32[B, 64]` binds `B` at each call).

use super::value::{ModelInstance, Scope, Value};
use super::{TResult, Tracer, MAX_CALL_DEPTH};
use crate::diag::{did_you_mean, Code, Diagnostic, Span};
use crate::syntax::ast::{self, Arg, DimExpr, Expr, ExprKind, TypeKind};
use std::rc::Rc;
use std::sync::Arc;

pub use super::value::Closure;

/// The closure value of a named function definition.
pub fn closure_of(def: &Arc<ast::FnDef>, env: &Rc<Scope>) -> Closure {
    Closure { def: def.clone(), env: env.clone() }
}

impl Closure {
    pub fn lambda(params: &[ast::Param], body: &Expr, env: &Rc<Scope>, span: Span) -> Closure {
        let name = ast::Ident { name: "<lambda>".into(), span };
        let def = ast::FnDef { name, params: params.to_vec(), ret: None, body: body.clone(), span };
        Closure { def: Arc::new(def), env: env.clone() }
    }
}

/// Evaluated call arguments.
/// Named arguments borrow their names from the call's syntax (no copy per
/// call); their lifetime is the call's.
pub(crate) struct CallArgs<'a> {
    pub positional: Vec<(Value, Span)>,
    pub named: Vec<(&'a str, Value, Span)>,
}

impl Tracer<'_> {
    /// Evaluates `callee(args)`, with `piped` (from `|>`) as the first argument.
    pub(crate) fn eval_call(
        &mut self,
        callee: &Expr,
        args: &[Arg],
        piped: Option<(Value, Span)>,
        span: Span,
        env: &Rc<Scope>,
    ) -> TResult<Value> {
        let mut call = CallArgs { positional: Vec::new(), named: Vec::new() };
        // Method sugar: `x.f(a)` is `f(x, a)` unless `x` is a model or module
        // that has a member `f`.
        let f = match &callee.kind {
            ExprKind::Field { base, name } => {
                let b = self.eval(base, env)?;
                match self.member(&b, name)? {
                    Some(member) => member,
                    // `net.forwrd(x)`: on a model, a name that is neither a
                    // member nor a function in scope is a misspelt member
                    // (E0208 with the model's members), not an unknown name.
                    None => match &b {
                        Value::Model(m) if !name_resolves(&name.name, env) => {
                            return Err(super::model::unknown_member(m, name))
                        }
                        _ => {
                            call.positional.push((b, base.span));
                            self.lookup(&name.name, name.span, env)?
                        }
                    },
                }
            }
            _ => self.eval(callee, env)?,
        };
        if let Some(p) = piped {
            call.positional.push(p);
        }
        // Inside a model's field, a model made in an argument of a model's
        // instantiation (`r = Residual(Dense(4, 4))`) is the sub-model
        // `r.body` of the instance (`model::instantiate` registers it), so
        // it is seeded from that path.
        let field_path = match &f {
            Value::ModelDef(_) => self.model_path.take(),
            _ => None,
        };
        for a in args {
            if let (Some((seed, prefix)), Value::ModelDef(def)) = (&field_path, &f) {
                let param = match &a.name {
                    Some(n) => Some(n.name.as_str()),
                    None => def.def.params.get(call.positional.len()).map(|p| p.name.name.as_str()),
                };
                self.model_path = param.map(|p| (*seed, format!("{prefix}.{p}")));
            }
            let v = self.eval(&a.value, env);
            self.model_path = None;
            let v = v?;
            match &a.name {
                Some(n) => {
                    if call.named.iter().any(|(m, _, _)| *m == n.name) {
                        return Err(Diagnostic::new(Code::Duplicate, format!("argument `{}` is given twice", n.name))
                            .label(a.span, "again here")
                            .into());
                    }
                    call.named.push((&n.name, v, a.span));
                }
                None => {
                    if !call.named.is_empty() {
                        return Err(Diagnostic::new(Code::Syntax, "positional arguments must come before named ones")
                            .label(a.span, "positional after named")
                            .into());
                    }
                    call.positional.push((v, a.value.span));
                }
            }
        }
        // A built-in's errors about its operands point at its name (see
        // `narrow_primary`); for method sugar that is the method's name.
        self.model_path = field_path;
        let at = match &callee.kind {
            ExprKind::Field { name, .. } => name.span,
            _ => callee.span,
        };
        self.call_value(f, callee.span, call.positional, call.named, span)
            .map_err(|f| super::narrow_primary(f, span, at))
    }

    /// Calls any callable value.
    pub(crate) fn call_value(
        &mut self,
        f: Value,
        f_span: Span,
        positional: Vec<(Value, Span)>,
        named: Vec<(&str, Value, Span)>,
        span: Span,
    ) -> TResult<Value> {
        let args = CallArgs { positional, named };
        match f {
            Value::Func(c) => self.call_closure(&c, args, None, span),
            Value::Builtin(name) => self.call_builtin(name, args, span),
            Value::ModelDef(def) => self.instantiate(&def, args, span),
            Value::Model(m) if m.onnx.is_some() => self.call_onnx(&m, args, f_span, span),
            Value::Model(m) => {
                let forward = m.def.members.iter().find_map(|mm| match mm {
                    ast::ModelMember::Method(d) if d.name.name == "forward" => Some(d.clone()),
                    _ => None,
                });
                match forward {
                    Some(d) => self.call_method(&m, &d, args, span),
                    None => Err(Diagnostic::new(
                        Code::NotCallable,
                        format!("model `{}` has no `forward` method", m.def.name.name),
                    )
                    .label(f_span, "called here")
                    .label(m.def.name.span, "defined here")
                    .into()),
                }
            }
            Value::Method(m, d) => self.call_method(&m, &d, args, span),
            Value::Grad(g) => self.call_grad(&g, args, f_span, span),
            Value::OptimizerDef(d) => self.instantiate_optimizer(&d, args, span),
            Value::Poison => Err(super::Fail::Poisoned),
            other => Err(Diagnostic::new(Code::NotCallable, format!("{} cannot be called", other.describe()))
                .label(f_span, "not a function")
                .into()),
        }
    }

    pub(crate) fn call_method(
        &mut self,
        m: &Rc<ModelInstance>,
        def: &Arc<ast::FnDef>,
        args: CallArgs,
        span: Span,
    ) -> TResult<Value> {
        let c = closure_of(def, &m.scope);
        self.call_closure(&c, args, Some(&m.def.name.name), span)
    }

    /// Inlines a user function: binds arguments, checks annotations, traces
    /// the body in a fresh scope.
    pub(crate) fn call_closure(
        &mut self,
        c: &Closure,
        args: CallArgs,
        owner: Option<&str>,
        span: Span,
    ) -> TResult<Value> {
        if self.depth >= MAX_CALL_DEPTH {
            return Err(Diagnostic::new(
                Code::TooDeep,
                format!("calls nest deeper than {MAX_CALL_DEPTH} (is `{}` recursive?)", c.name()),
            )
            .label(span, "this call")
            .into());
        }
        // A safe point for Ctrl-C: a long trace is long because of calls.
        crate::interrupt::check()?;
        let scope = self.scopes.child(&c.env);
        // The name used in messages; a plain function's is borrowed, as
        // nearly every call succeeds and never prints it.
        let fname: std::borrow::Cow<str> = match owner {
            Some(o) => format!("{o}.{}", c.name()).into(),
            None => c.name().into(),
        };
        let def = &*c.def;
        let bound = bind_args(&fname, &def.params, args, span, c.span())?;
        for (param, arg) in def.params.iter().zip(bound) {
            let (v, arg_span) = match arg {
                Some(a) => a,
                None => match &param.default {
                    Some(d) => (self.eval(d, &scope)?, d.span),
                    None => unreachable_missing(&fname, param, span)?,
                },
            };
            let v = match &param.ty {
                Some(ty) => self.check_annotation(&v, ty, arg_span, &scope)?,
                None => v,
            };
            scope.set(&param.name.name, v);
        }
        self.depth += 1;
        let result = self.eval(&def.body, &scope);
        self.depth -= 1;
        let v = result.map_err(|f| at_call_site(f, c.span().file, format!("in this call to `{fname}`"), span))?;
        let v = match &def.ret {
            Some(ty) => self.check_annotation(&v, ty, def.body.span, &scope),
            None => Ok(v),
        };
        super::scopes::release_if_unreachable(scope);
        v
    }

    /// Checks a value against an annotation, binding unbound symbolic
    /// dimensions in `scope`; returns the value (numbers become tensors when
    /// annotated as tensors).
    pub(crate) fn check_annotation(
        &mut self,
        v: &Value,
        ty: &ast::TypeExpr,
        span: Span,
        scope: &Rc<Scope>,
    ) -> TResult<Value> {
        let mismatch = |found: String| -> super::Fail {
            Diagnostic::new(Code::Annotation, format!("expected {}, found {found}", type_text(ty)))
                .label(span, found.clone())
                .label(ty.span, "declared here")
                .into()
        };
        match (&ty.kind, v) {
            (_, Value::Poison) => Err(super::Fail::Poisoned),
            (TypeKind::Int, Value::Int(_)) | (TypeKind::Bool, Value::Bool(_)) | (TypeKind::Str, Value::Str(_)) => {
                Ok(v.clone())
            }
            (TypeKind::Float, Value::Float(_)) => Ok(v.clone()),
            (TypeKind::Float, Value::Int(i)) => Ok(Value::Float(*i as f64)),
            (TypeKind::Tuple(parts), Value::Tuple(items)) if parts.len() == items.len() => {
                let vals = parts
                    .iter()
                    .zip(items)
                    .map(|(p, i)| self.check_annotation(i, p, span, scope))
                    .collect::<TResult<Vec<_>>>()?;
                Ok(Value::Tuple(vals))
            }
            (TypeKind::Tensor { dtype, dims }, _) => {
                let o = match v {
                    Value::Int(_) | Value::Float(_) | Value::Bool(_) if dims.is_empty() => {
                        self.operand(v, Some(*dtype), span)?
                    }
                    Value::Tensor(..) => self.operand(v, None, span)?,
                    other => return Err(mismatch(other.describe())),
                };
                if o.ty.dtype != *dtype || o.ty.rank() != dims.len() {
                    return Err(mismatch(o.ty.to_string()));
                }
                // Computed dimensions come last, so that `f32[2 * N, N]`
                // reads the `N` its second axis binds.
                let computed_last = |(d, _): &(&DimExpr, &usize)| matches!(d, DimExpr::Computed { .. });
                let (computed, plain): (Vec<_>, Vec<_>) = dims.iter().zip(&o.ty.shape).partition(computed_last);
                for (dim, &actual) in plain.into_iter().chain(computed) {
                    match dim {
                        DimExpr::Known(n, _) if *n as usize != actual => return Err(mismatch(o.ty.to_string())),
                        DimExpr::Symbol(id) => match scope.get(&id.name) {
                            Some(Value::Int(bound)) if bound as usize != actual => {
                                return Err(Diagnostic::new(
                                    Code::SymbolicDim,
                                    format!("dimension `{}` is {bound} here but {actual} in {}", id.name, o.ty),
                                )
                                .label(span, o.ty.to_string())
                                .label(id.span, format!("`{}` = {bound}", id.name))
                                .into())
                            }
                            Some(Value::Int(_)) => {}
                            _ => scope.set(&id.name, Value::Int(actual as i64)),
                        },
                        DimExpr::Computed { expr, text } => {
                            let want = self.computed_dim(expr, text, scope)?;
                            if want != actual as i64 {
                                return Err(Diagnostic::new(
                                    Code::SymbolicDim,
                                    format!("dimension `{text}` is {want} here but {actual} in {}", o.ty),
                                )
                                .label(span, o.ty.to_string())
                                .label(expr.span, format!("`{text}` = {want}"))
                                .into());
                            }
                        }
                        _ => {}
                    }
                }
                Ok(Value::Tensor(o.id, o.ty))
            }
            (_, other) => Err(mismatch(other.describe())),
        }
    }
}

impl Tracer<'_> {
    /// The value of a computed dimension (`4 * hidden`) in `scope`: an
    /// int, from names known where the type is read (E0313 otherwise).
    pub(crate) fn computed_dim(&mut self, expr: &Expr, text: &str, scope: &Rc<Scope>) -> TResult<i64> {
        match self.eval(expr, scope)? {
            Value::Int(n) => Ok(n),
            other => Err(Diagnostic::new(Code::NotStatic, format!("dimension `{text}` is not an int"))
                .label(expr.span, other.describe())
                .help("a dimension computes an int from ints known here: constructor arguments, consts, dimensions bound before it (`floor_div(d, heads)` divides ints; `/` gives a float)")
                .into()),
        }
    }
}

/// Matches arguments to parameters: `result[i]` is the argument for
/// parameter `i`, or `None` when its default applies.
pub(crate) fn bind_args(
    fname: &str,
    params: &[ast::Param],
    args: CallArgs,
    span: Span,
    def_span: Span,
) -> TResult<Vec<Option<(Value, Span)>>> {
    let mut bound: Vec<Option<(Value, Span)>> = vec![None; params.len()];
    let n_pos = args.positional.len();
    for (i, (v, s)) in args.positional.into_iter().enumerate() {
        if i >= params.len() {
            return Err(Diagnostic::new(
                Code::Arity,
                format!("`{fname}` takes {} argument{}, but {n_pos} were given", params.len(), plural(params.len())),
            )
            .label(s, "unexpected argument")
            .label(def_span, "defined here")
            .into());
        }
        bound[i] = Some((v, s));
    }
    for (name, v, s) in args.named {
        match params.iter().position(|p| p.name.name == name) {
            Some(i) if bound[i].is_some() => {
                return Err(Diagnostic::new(Code::Duplicate, format!("argument `{name}` of `{fname}` is given twice"))
                    .label(s, "given again here")
                    .into())
            }
            Some(i) => bound[i] = Some((v, s)),
            None => {
                let mut d =
                    Diagnostic::new(Code::UnknownArgument, format!("`{fname}` has no parameter named `{name}`"))
                        .label(s, "unknown argument")
                        .label(def_span, "defined here");
                if let Some(s) = did_you_mean(name, params.iter().map(|p| p.name.name.as_str())) {
                    d = d.help(format!("did you mean `{s}`?"));
                }
                return Err(d.into());
            }
        }
    }
    for (p, b) in params.iter().zip(&bound) {
        if b.is_none() && p.default.is_none() {
            return Err(unreachable_missing::<()>(fname, p, span).err().unwrap_or(super::Fail::Poisoned));
        }
    }
    Ok(bound)
}

/// Whether `name` resolves in `env` (a binding, dtype or built-in).
fn name_resolves(name: &str, env: &Rc<Scope>) -> bool {
    env.get(name).is_some() || crate::ir::DType::from_name(name).is_some() || super::builtins::lookup(name).is_some()
}

/// An error inside a function defined in another file (a std module) is
/// reported at the user's call: its primary span becomes the call, and the
/// library location stays as a secondary label (rendered as a note with
/// file:line:col). The user cannot edit the library, and `softmax(x, axis =
/// 2)` should point at their `softmax(…)`, not at a `max` inside std/math.tfl.
/// The same holds for a model built from another file (`Dense(-1, 3)`).
pub(crate) fn at_call_site(
    fail: super::Fail,
    defined_in: crate::diag::FileId,
    what: String,
    call: Span,
) -> super::Fail {
    match fail {
        super::Fail::Diag(mut d) if call.file != defined_in && d.span().is_some_and(|s| s.file == defined_in) => {
            d.labels.insert(0, crate::diag::Label { span: call, message: what });
            super::Fail::Diag(d)
        }
        f => f,
    }
}

fn unreachable_missing<T>(fname: &str, p: &ast::Param, span: Span) -> TResult<T> {
    Err(Diagnostic::new(Code::MissingArgument, format!("missing argument `{}` of `{fname}`", p.name.name))
        .label(span, format!("`{}` is not given", p.name.name))
        .label(p.span, "parameter declared here")
        .into())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// An annotation as the user wrote it, e.g. `f32[B, 64]`.
pub(crate) fn type_text(ty: &ast::TypeExpr) -> String {
    match &ty.kind {
        TypeKind::Tensor { dtype, dims } => {
            let dims: Vec<String> = dims.iter().map(DimExpr::to_string).collect();
            format!("{dtype}[{}]", dims.join(", "))
        }
        TypeKind::Int => "int".into(),
        TypeKind::Float => "float".into(),
        TypeKind::Bool => "bool".into(),
        TypeKind::Str => "str".into(),
        TypeKind::Tuple(parts) => format!("({})", parts.iter().map(type_text).collect::<Vec<_>>().join(", ")),
    }
}
