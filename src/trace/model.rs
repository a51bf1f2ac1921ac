//! Models (§6): instantiation initializes every parameter from the
//! counter-based generator with a seed derived from the model's seed and the
//! parameter's path (`l1.w`), so weights are identical on every machine;
//! fields and methods are reached with `net.l1.w` and `net(x)`.

use super::call::{bind_args, CallArgs};
use super::value::{ModelDefValue, ModelInstance, Scope, Value};
use super::{TResult, Tracer, MAX_CALL_DEPTH};
use crate::diag::{did_you_mean, Code, Diagnostic, Span};
use crate::ir::TensorType;
use crate::syntax::ast::{self, DimExpr, ModelMember, TypeKind};
use std::rc::Rc;

impl Tracer<'_> {
    /// `Model(args…, seed = s)`: evaluates the members in order. Models
    /// nest at most `MAX_CALL_DEPTH` deep, counted with calls (a model that
    /// instantiates itself without a base case is E0102, with the chain).
    pub(crate) fn instantiate(&mut self, def: &Rc<ModelDefValue>, args: CallArgs, span: Span) -> TResult<Value> {
        let name = &def.def.name.name;
        if self.depth >= MAX_CALL_DEPTH {
            let mut chain: Vec<&str> = self.instantiating.iter().rev().take(4).map(String::as_str).collect();
            chain.reverse();
            return Err(Diagnostic::new(
                Code::TooDeep,
                format!("models nest deeper than {MAX_CALL_DEPTH} (does `{name}` instantiate itself?)"),
            )
            .label(span, "this instantiation")
            .note(format!("the innermost instantiations: … → {} → {name}", chain.join(" → ")))
            .help("give the recursion a base case (a parameter that shrinks, and an `if` that stops it)")
            .into());
        }
        crate::interrupt::check()?;
        self.depth += 1;
        self.instantiating.push(name.clone());
        let result = self.instantiate_members(def, args, span).map_err(|f| {
            super::call::at_call_site(f, def.def.name.span.file, format!("in this instantiation of `{name}`"), span)
        });
        self.instantiating.pop();
        self.depth -= 1;
        result
    }

    fn instantiate_members(&mut self, def: &Rc<ModelDefValue>, mut args: CallArgs, span: Span) -> TResult<Value> {
        let (seed, prefix) = self.model_path.take().unwrap_or_default();
        let has_seed_param = def.def.params.iter().any(|p| p.name.name == "seed");
        let mut seed = seed;
        if !has_seed_param {
            if let Some(i) = args.named.iter().position(|(n, _, _)| *n == "seed") {
                let (_, v, s) = args.named.remove(i);
                seed = match v {
                    Value::Int(n) => n as u64,
                    other => {
                        return Err(Diagnostic::new(
                            Code::Kind,
                            format!("`seed` must be an int, found {}", other.describe()),
                        )
                        .label(s, "not an int")
                        .into())
                    }
                };
            }
        }
        let name = def.def.name.name.clone();
        let scope = self.scopes.child(&def.env);
        let bound = bind_args(&name, &def.def.params, args, span, def.def.name.span)?;
        let mut submodels = Vec::new();
        for (param, arg) in def.def.params.iter().zip(bound) {
            let (v, s) = match arg {
                Some(a) => a,
                None => match &param.default {
                    Some(d) => (self.eval(d, &scope)?, d.span),
                    None => return Err(Diagnostic::internal("missing model argument").into()),
                },
            };
            let v = match &param.ty {
                Some(ty) => self.check_annotation(&v, ty, s, &scope)?,
                None => v,
            };
            // A model passed in (`Residual(Dense(4, 4))`) is a sub-model
            // under the parameter's name, as a PyTorch module's child is.
            if super::value::holds_models(&v) {
                submodels.push(param.name.name.clone());
            }
            scope.set(&param.name.name, v);
        }
        let mut params = Vec::new();
        let mut states = Vec::new();
        for member in &def.def.members {
            match member {
                ModelMember::Param { name: n, ty, init, .. }
                | ModelMember::State { name: n, ty: Some(ty), init, .. } => {
                    let path = join(&prefix, &n.name);
                    let tty = self.resolve_type(ty, &scope)?;
                    let saved = self.param_context.replace((tty, crate::rng::derive_seed(seed, &path)));
                    let v = self.eval(init, &scope);
                    self.param_context = saved;
                    let v = self.check_annotation(&v?, ty, init.span, &scope)?;
                    scope.set(&n.name, v);
                    match member {
                        ModelMember::Param { .. } => params.push(n.name.clone()),
                        _ => states.push(n.name.clone()),
                    }
                }
                ModelMember::State { name: n, ty: None, init, .. } => {
                    let v = self.eval(init, &scope)?;
                    scope.set(&n.name, v);
                    states.push(n.name.clone());
                }
                ModelMember::Field { name: n, value, .. } => {
                    self.model_path = Some((seed, join(&prefix, &n.name)));
                    let v = self.eval(value, &scope);
                    self.model_path = None;
                    let v = v?;
                    // A field that renames a model passed in (`inner =
                    // body`) is not a second copy of its parameters.
                    let passed_in = |s: &String| scope.get_local(s).is_some_and(|a| same_models(&a, &v));
                    if super::value::holds_models(&v) && !submodels.iter().any(passed_in) {
                        submodels.push(n.name.clone());
                    }
                    scope.set(&n.name, v);
                }
                ModelMember::Method(_) => {}
            }
        }
        // Assignments to a state in the methods write it (trace/state.rs).
        scope.declare_states(&states);
        let instance = Rc::new(ModelInstance {
            def: def.def.clone(),
            scope: scope.clone(),
            params,
            states,
            submodels,
            onnx: None,
        });
        // Methods can call each other by bare name (`helper(x)` in `forward`).
        for member in &def.def.members {
            if let ModelMember::Method(d) = member {
                if !scope.has_local(&d.name.name) {
                    scope.set(&d.name.name, Value::Method(instance.clone(), d.clone()));
                }
            }
        }
        Ok(Value::Model(instance))
    }

    /// A declared tensor type with every dimension known in `scope`.
    fn resolve_type(&mut self, ty: &ast::TypeExpr, scope: &Rc<Scope>) -> TResult<TensorType> {
        let TypeKind::Tensor { dtype, dims } = &ty.kind else {
            return Err(Diagnostic::new(Code::Annotation, "a parameter must have a tensor type such as f32[4, 8]")
                .label(ty.span, "not a tensor type")
                .into());
        };
        let mut shape = Vec::new();
        for d in dims {
            shape.push(match d {
                DimExpr::Known(n, s) if *n >= 0 => (*n as usize, *s).0,
                DimExpr::Symbol(id) => match scope.get(&id.name) {
                    Some(Value::Int(n)) if n >= 0 => n as usize,
                    Some(Value::Int(n)) => {
                        return Err(Diagnostic::new(
                            Code::NotStatic,
                            format!("dimension `{}` is {n}; a parameter's dimensions must be non-negative", id.name),
                        )
                        .label(id.span, format!("`{}` = {n}", id.name))
                        .into())
                    }
                    // A name bound nowhere is a misspelling (E0201), with a
                    // suggestion among the ints in scope (constructor
                    // arguments, constants); a bound non-int is E0313 below.
                    None => {
                        let ints: Vec<String> = scope
                            .visible_names()
                            .into_iter()
                            .filter(|n| matches!(scope.get(n), Some(Value::Int(_))))
                            .collect();
                        let mut d = Diagnostic::new(Code::UnknownName, format!("unknown dimension `{}`", id.name))
                            .label(id.span, "not found in this scope");
                        d = match did_you_mean(&id.name, ints.iter().map(String::as_str)) {
                            Some(s) => d.help(format!("did you mean `{s}`?")),
                            None => d.help("a parameter's dimensions are ints known when the model is built, such as constructor arguments"),
                        };
                        return Err(d.into());
                    }
                    _ => return Err(Diagnostic::new(
                        Code::NotStatic,
                        format!("dimension `{}` is not a known int here", id.name),
                    )
                    .label(id.span, "unknown dimension")
                    .help(
                        "a parameter's shape must be known when the model is built (e.g. from a constructor argument)",
                    )
                    .into()),
                },
                DimExpr::Computed { expr, text } => match self.computed_dim(expr, text, scope)? {
                    n if n >= 0 => n as usize,
                    n => {
                        return Err(Diagnostic::new(
                            Code::NotStatic,
                            format!("dimension `{text}` is {n}; a parameter's dimensions must be non-negative"),
                        )
                        .label(expr.span, format!("{n}"))
                        .into())
                    }
                },
                DimExpr::Known(_, s) | DimExpr::Infer(s) => {
                    return Err(Diagnostic::new(
                        Code::NotStatic,
                        "a parameter's dimensions must be non-negative and known",
                    )
                    .label(*s, "here")
                    .into())
                }
            });
        }
        super::tensor::check_size(&shape, ty.span)?;
        Ok(TensorType::new(*dtype, shape))
    }

    /// A model's or module's member `name`, if it has one.
    pub(crate) fn member(&mut self, v: &Value, name: &ast::Ident) -> TResult<Option<Value>> {
        Ok(match v {
            Value::Model(m) => {
                if let Some(f) = m.scope.get_local(&name.name) {
                    Some(f)
                } else {
                    m.def.members.iter().find_map(|mm| match mm {
                        ModelMember::Method(d) if d.name.name == name.name => Some(Value::Method(m.clone(), d.clone())),
                        _ => None,
                    })
                }
            }
            Value::Module(scope) => match scope.get_local(&name.name) {
                Some(v) => Some(v),
                None => {
                    return Err(Diagnostic::new(Code::UnknownName, format!("the module has no item `{}`", name.name))
                        .label(name.span, "not in this module")
                        .into())
                }
            },
            Value::Poison => return Err(super::Fail::Poisoned),
            _ => None,
        })
    }

    /// `base.name` without a call: a model field, a module item, or method
    /// sugar with no further arguments (`x.relu` is `relu(x)`).
    pub(crate) fn field(&mut self, base: &ast::Expr, name: &ast::Ident, env: &Rc<Scope>) -> TResult<Value> {
        let v = self.eval(base, env)?;
        if let Some(m) = self.member(&v, name)? {
            return Ok(m);
        }
        if let Value::Model(m) = &v {
            return Err(unknown_member(m, name));
        }
        let f = self.lookup(&name.name, name.span, env)?;
        let span = base.span.to(name.span);
        self.call_value(f, name.span, vec![(v, base.span)], vec![], span)
    }
}

/// E0208 for `net.name` when the model has no such member. Suggestions
/// come from every member (constructor arguments, params, state, sub-models
/// and methods); without a close match the help lists them, as the docs say.
pub(crate) fn unknown_member(m: &ModelInstance, name: &ast::Ident) -> super::Fail {
    let mut members = m.scope.local_names();
    for mm in &m.def.members {
        if let ModelMember::Method(d) = mm {
            members.push(d.name.name.clone());
        }
    }
    let d = Diagnostic::new(
        Code::UnknownField,
        format!("model `{}` has no field or method `{}`", m.def.name.name, name.name),
    )
    .label(name.span, "unknown field or method");
    match did_you_mean(&name.name, members.iter().map(String::as_str)) {
        Some(s) => d.help(format!("did you mean `{s}`?")),
        None if members.is_empty() => d,
        None => d.help(format!("`{}` has: {}", m.def.name.name, members.join(", "))),
    }
    .into()
}

/// Whether `a` and `b` are the same model instances (not equal copies).
fn same_models(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Model(x), Value::Model(y)) => Rc::ptr_eq(x, y),
        (Value::Tuple(x), Value::Tuple(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_models(a, b)),
        _ => false,
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}
