//! Expression evaluation: literals, names, operators, pipes, blocks, `if`,
//! lambdas and tensor literals (and lists: `[Dense(4, 8), Dense(8, 2)]`).
//! Calls, indexing, models and loops live in their own files.

use super::value::{Scope, Value};
use super::{call, Fail, TResult, Tracer};
use crate::diag::{did_you_mean, Code, Diagnostic, Span};
use crate::ir::{BinaryOp, DType, Literal, Op, TensorType, UnaryOp};
use crate::syntax::ast::{self, Expr, ExprKind};
use std::rc::Rc;

impl Tracer<'_> {
    pub(crate) fn eval(&mut self, e: &Expr, env: &Rc<Scope>) -> TResult<Value> {
        match &e.kind {
            ExprKind::Int(i, None) => Ok(Value::Int(*i)),
            ExprKind::Float(x, None) => Ok(Value::Float(*x)),
            ExprKind::Int(i, Some(d)) if d.is_int() => {
                let o = self.int_scalar(*i, *d, e.span)?;
                Ok(Value::Tensor(o.id, o.ty))
            }
            ExprKind::Int(i, Some(d)) => self.typed_literal(*i as f64, *d, e.span),
            ExprKind::Float(x, Some(d)) => self.typed_literal(*x, *d, e.span),
            ExprKind::Bool(b) => Ok(Value::Bool(*b)),
            ExprKind::Str(s) => Ok(Value::Str(s.clone())),
            ExprKind::Name(n) => self.lookup(n, e.span, env),
            ExprKind::Tuple(items) => {
                // Like a list's, the models of element k of a model's field
                // get the path `field.k`.
                self.with_element_paths(|t, path| {
                    let vals = items.iter().enumerate().map(|(k, i)| t.eval_element(i, env, path, k));
                    Ok(Value::Tuple(vals.collect::<TResult<Vec<_>>>()?))
                })
            }
            ExprKind::Tensor(items) => self.tensor_literal(e, items, env),
            ExprKind::Unary(op, x) => {
                let v = self.eval(x, env)?;
                let at = self.token_between(e.span.start, x.span.start, e.span);
                self.unary(*op, v, x.span, e.span).map_err(|f| super::narrow_primary(f, e.span, at))
            }
            ExprKind::Binary(op, a, b) => {
                let va = self.eval(a, env)?;
                let vb = self.eval(b, env)?;
                let at = self.operator_span(*op, a.span, b.span).unwrap_or(e.span);
                self.binary_expr(*op, (&va, a.span), (&vb, b.span), e.span)
                    .map_err(|f| super::narrow_primary(f, e.span, at))
            }
            ExprKind::Pipe(lhs, rhs) => {
                let v = self.eval(lhs, env)?;
                self.pipe(v, lhs.span, rhs, env)
            }
            ExprKind::Call { callee, args } => self.eval_call(callee, args, None, e.span, env),
            ExprKind::Field { base, name } => self.field(base, name, env),
            ExprKind::Index { base, items } => {
                let v = self.eval(base, env)?;
                self.index(v, base.span, items, e.span, env)
            }
            ExprKind::Lambda { params, body } => {
                Ok(Value::Func(Rc::new(call::Closure::lambda(params, body, env, e.span))))
            }
            ExprKind::Block(b) => self.block(b, env),
            ExprKind::If { cond, then, else_ } => match self.eval(cond, env)? {
                Value::Bool(true) => self.block(then, env),
                Value::Bool(false) => match else_ {
                    Some(e) => self.eval(e, env),
                    None => Ok(Value::Tuple(vec![])),
                },
                other => Err(Diagnostic::new(
                    Code::NotStatic,
                    format!("the condition of `if` must be a compile-time bool, found {}", other.describe()),
                )
                .label(cond.span, "not known at compile time")
                .help("use `where(mask, a, b)` to choose between tensors elementwise")
                .into()),
            },
            ExprKind::Comprehension { elem, head } => self.comprehension(elem, head, e.span, env),
        }
    }

    /// The span of the operator token of `a op b`, found in the source text
    /// between the operands (the AST keeps only the whole expression's span).
    fn operator_span(&self, op: ast::BinaryOp, a: Span, b: Span) -> Option<Span> {
        let symbol = op.symbol();
        if a.file != b.file || a.end > b.start {
            return None;
        }
        let i = self.sources.text(a.file).get(a.end..b.start)?.find(symbol)?;
        Some(Span::new(a.file, a.end + i, a.end + i + symbol.len()))
    }

    /// The text from `start` to `end` without trailing whitespace (a prefix
    /// operator such as `not`), or `fallback` if that is empty.
    fn token_between(&self, start: usize, end: usize, fallback: Span) -> Span {
        match self.sources.text(fallback.file).get(start..end).map(str::trim_end) {
            Some(t) if !t.is_empty() => Span::new(fallback.file, start, start + t.len()),
            _ => fallback,
        }
    }

    pub(crate) fn lookup(&mut self, name: &str, span: Span, env: &Rc<Scope>) -> TResult<Value> {
        if let Some(v) = env.get(name) {
            return match v {
                Value::Poison => Err(Fail::Poisoned),
                v => Ok(v),
            };
        }
        if name == "training" {
            return Ok(Value::Bool(self.training));
        }
        if let Some(d) = DType::from_name(name) {
            return Ok(Value::DType(d));
        }
        if let Some(b) = super::builtins::lookup(name) {
            return Ok(Value::Builtin(b));
        }
        let names = env.visible_names();
        let candidates = names.iter().map(String::as_str).chain(super::builtins::NAMES.iter().copied());
        let mut d =
            Diagnostic::new(Code::UnknownName, format!("unknown name `{name}`")).label(span, "not found in this scope");
        if let Some(s) = did_you_mean(name, candidates) {
            d = d.help(format!("did you mean `{s}`?"));
        }
        Err(d.into())
    }

    fn typed_literal(&mut self, x: f64, dtype: DType, span: Span) -> TResult<Value> {
        let o = self.scalar(x, dtype, span)?;
        Ok(Value::Tensor(o.id, o.ty))
    }

    pub(crate) fn block(&mut self, b: &ast::Block, env: &Rc<Scope>) -> TResult<Value> {
        let scope = self.scopes.child(env);
        let v = self.block_in(b, &scope);
        super::scopes::release_if_unreachable(scope);
        v
    }

    /// Evaluates a block's statements directly in `scope`, so that the
    /// caller can read the final values of names the block assigned (the
    /// optimizer states of an `update` block).
    pub(crate) fn block_in(&mut self, b: &ast::Block, scope: &Rc<Scope>) -> TResult<Value> {
        let scope = scope.clone();
        for stmt in &b.stmts {
            match stmt {
                ast::BlockStmt::Let { pattern, ty, value, .. } => {
                    let v = self.eval(value, &scope)?;
                    if let Some(ty) = ty {
                        self.check_annotation(&v, ty, value.span, &scope)?;
                    }
                    self.bind_pattern(pattern, v, &scope)?;
                }
                ast::BlockStmt::Assign { name, value, span } => {
                    if scope.get(&name.name).is_none() {
                        self.lookup(&name.name, name.span, &scope)?;
                    }
                    let v = self.eval(value, &scope)?;
                    // A model's state, seen from its methods, is written
                    // (§6); any other name is rebound in this block.
                    match scope.binder(&name.name).filter(|s| s.declares_state(&name.name)) {
                        Some(owner) => self.write_state(&owner, name, v, *span)?,
                        None => scope.set(&name.name, v),
                    }
                }
                ast::BlockStmt::For(f) => self.for_loop(f, &scope)?,
                ast::BlockStmt::Expr(e) => {
                    self.eval(e, &scope)?;
                }
            }
        }
        match &b.result {
            Some(r) => self.eval(r, &scope),
            None => Ok(Value::Tuple(vec![])),
        }
    }

    fn unary(&mut self, op: ast::UnaryOp, v: Value, arg_span: Span, span: Span) -> TResult<Value> {
        match (op, &v) {
            (ast::UnaryOp::Neg, Value::Int(i)) => Ok(Value::Int(i.checked_neg().ok_or_else(|| {
                Fail::from(Diagnostic::new(Code::BadNumber, "integer overflow").label(span, "here"))
            })?)),
            (ast::UnaryOp::Neg, Value::Float(x)) => Ok(Value::Float(-x)),
            (ast::UnaryOp::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
            (ast::UnaryOp::Neg, _) => self.unary_op(UnaryOp::Neg, &v, arg_span, span),
            (ast::UnaryOp::Not, _) => self.unary_op(UnaryOp::Not, &v, arg_span, span),
        }
    }

    /// A unary primitive on a value; compile-time numbers are computed now.
    pub(crate) fn unary_op(&mut self, op: UnaryOp, v: &Value, arg_span: Span, span: Span) -> TResult<Value> {
        if let Some(x) = super::tensor::number(v) {
            if let Some(r) = fold_unary(op, x) {
                return Ok(Value::Float(r));
            }
        }
        let o = self.operand(v, None, arg_span)?;
        let out = self.node(Op::Unary(op), &[&o], span)?;
        Ok(Value::Tensor(out.id, out.ty))
    }

    fn binary_expr(&mut self, op: ast::BinaryOp, a: (&Value, Span), b: (&Value, Span), span: Span) -> TResult<Value> {
        use ast::BinaryOp as A;
        let ir = match op {
            A::Add => BinaryOp::Add,
            A::Sub => BinaryOp::Sub,
            A::Mul => BinaryOp::Mul,
            A::Div => BinaryOp::Div,
            A::Rem => BinaryOp::Mod,
            A::Pow => BinaryOp::Pow,
            A::Eq => BinaryOp::Eq,
            A::Ne => BinaryOp::Ne,
            A::Lt => BinaryOp::Lt,
            A::Le => BinaryOp::Le,
            A::Gt => BinaryOp::Gt,
            A::Ge => BinaryOp::Ge,
            A::And => BinaryOp::And,
            A::Or => BinaryOp::Or,
            A::MatMul => return self.matmul(a, b, span),
        };
        // `x ^ 2` with a literal exponent is the common case; keep it a pow
        // node (the optimizer rewrites it), but give int tensors a clear error.
        self.binary(ir, a, b, span)
    }

    /// `x |> f` is `f(x)`; `x |> f(a)` is `f(x, a)`.
    fn pipe(&mut self, v: Value, v_span: Span, rhs: &Expr, env: &Rc<Scope>) -> TResult<Value> {
        match &rhs.kind {
            ExprKind::Call { callee, args } => {
                self.eval_call(callee, args, Some((v, v_span)), rhs.span.to(v_span), env)
            }
            _ => {
                let f = self.eval(rhs, env)?;
                self.call_value(f, rhs.span, vec![(v, v_span)], vec![], rhs.span.to(v_span))
            }
        }
    }

    /// Evaluates a tuple, list or comprehension with `f`, which evaluates
    /// its elements with `eval_element` under the pending model path. A
    /// result that holds no model gives the path back, for the model a
    /// later part of the same field expression makes (`l = Dense((3, 3))`).
    pub(crate) fn with_element_paths(
        &mut self,
        f: impl FnOnce(&mut Self, Option<&(u64, String)>) -> TResult<Value>,
    ) -> TResult<Value> {
        let path = self.model_path.take();
        let v = f(self, path.as_ref())?;
        if !super::value::holds_models(&v) {
            self.model_path = path;
        }
        Ok(v)
    }

    /// Evaluates element `k` of a tuple, list or comprehension. Inside a
    /// model's field (`path` = its seed and path), a model the element makes
    /// gets the path `field.k`, so each element's parameters have their
    /// own seeds and checkpoint names (`blocks.0.w`).
    pub(crate) fn eval_element(
        &mut self,
        item: &Expr,
        env: &Rc<Scope>,
        path: Option<&(u64, String)>,
        k: usize,
    ) -> TResult<Value> {
        self.model_path = path.map(|(seed, prefix)| (*seed, format!("{prefix}.{k}")));
        let v = self.eval(item, env);
        self.model_path = None;
        v
    }

    /// `[[1, 2], [3, 4]]`: numbers become one constant; tensors (including
    /// suffixed literals such as `1f16`) are stacked; models, functions and
    /// other compile-time values make a list (`literal_value`). Inside a
    /// model, the models of element k get the path `field.k`.
    fn tensor_literal(&mut self, e: &Expr, items: &[Expr], env: &Rc<Scope>) -> TResult<Value> {
        self.with_element_paths(|t, path| {
            let mut out = Flattened::default();
            t.flatten_literal(e, items, env, 0, &mut out, path)?;
            if let Some(l) = out.leaf_depth {
                out.shape.truncate(l);
            }
            t.literal_value(out.leaves, &out.shape, e.span)
        })
    }

    /// The value of a literal or comprehension with these leaves: a list
    /// (a tuple) when it is flat and no leaf is a number, bool or tensor,
    /// else a tensor of `shape` (stacked when a leaf is a tensor).
    pub(crate) fn literal_value(&mut self, flat: Vec<(Value, Span)>, shape: &[usize], span: Span) -> TResult<Value> {
        let is_number = |v: &Value| matches!(v, Value::Int(_) | Value::Float(_) | Value::Bool(_) | Value::Tensor(..));
        if shape.len() == 1 && !flat.is_empty() && !flat.iter().any(|(v, _)| is_number(v)) {
            return Ok(Value::Tuple(flat.into_iter().map(|(v, _)| v).collect()));
        }
        if flat.iter().any(|(v, _)| matches!(v, Value::Tensor(..))) {
            return self.stack_literal(&flat, shape, span);
        }
        let dtype = if flat.is_empty() || flat.iter().any(|(v, _)| matches!(v, Value::Float(_))) {
            DType::F32
        } else if flat.iter().all(|(v, _)| matches!(v, Value::Bool(_))) {
            DType::Bool
        } else {
            DType::I32
        };
        let mut floats = Vec::new();
        let mut ints = Vec::new();
        let mut bools = Vec::new();
        for (v, span) in &flat {
            match (v, dtype) {
                (Value::Bool(b), DType::Bool) => bools.push(*b),
                (Value::Int(i), DType::F32) => floats.push(dtype.round(*i as f64)),
                (Value::Float(x), DType::F32) => floats.push(dtype.round(*x)),
                (Value::Int(i), DType::I32) => {
                    super::tensor::check_int_fits(*i, dtype, *span)?;
                    ints.push(*i)
                }
                (other, d) => {
                    return Err(Diagnostic::new(
                        Code::Ragged,
                        format!("a {d} tensor literal cannot hold {}", other.describe()),
                    )
                    .label(*span, "this element")
                    .into())
                }
            }
        }
        let value = match dtype {
            DType::Bool => Literal::Bool(bools),
            DType::F32 => Literal::Float(floats),
            _ => Literal::Int(ints),
        };
        let o = self.constant(value, TensorType::new(dtype, shape.to_vec()), span)?;
        Ok(Value::Tensor(o.id, o.ty))
    }

    /// Walks nested brackets, checking that rows are rectangular and that
    /// every leaf sits at the same depth. The elements of the outermost
    /// brackets are evaluated under the model paths `path.k`.
    fn flatten_literal(
        &mut self,
        e: &Expr,
        items: &[Expr],
        env: &Rc<Scope>,
        depth: usize,
        out: &mut Flattened,
        path: Option<&(u64, String)>,
    ) -> TResult<()> {
        if out.shape.len() == depth {
            out.shape.push(items.len());
        } else if out.shape[depth] != items.len() {
            return Err(Diagnostic::new(
                Code::Ragged,
                format!(
                    "ragged tensor literal: this row has {} element{}, the first has {}",
                    items.len(),
                    if items.len() == 1 { "" } else { "s" },
                    out.shape[depth]
                ),
            )
            .label(e.span, format!("{} element{}", items.len(), if items.len() == 1 { "" } else { "s" }))
            .into());
        }
        for (k, item) in items.iter().enumerate() {
            if let ExprKind::Tensor(inner) = &item.kind {
                self.flatten_literal(item, inner, env, depth + 1, out, None)?;
                continue;
            }
            match out.leaf_depth {
                None => out.leaf_depth = Some(depth + 1),
                Some(l) if l != depth + 1 => {
                    return Err(Diagnostic::new(Code::Ragged, "ragged tensor literal: rows and numbers are mixed")
                        .label(item.span, "this element is at a different nesting depth")
                        .into())
                }
                Some(_) => {}
            }
            let v = self.eval_element(item, env, path, k)?;
            out.leaves.push((v, item.span));
        }
        Ok(())
    }

    /// Stacks scalar-or-tensor elements into one tensor of `shape ++ elem`.
    fn stack_literal(&mut self, flat: &[(Value, Span)], shape: &[usize], span: Span) -> TResult<Value> {
        let vals: Vec<(&Value, Span)> = flat.iter().map(|(v, s)| (v, *s)).collect();
        let ops = self.operands(&vals)?;
        self.same_dtype(&ops, "tensor literal", span)?;
        let elem = ops[0].ty.shape.clone();
        if let Some(bad) = ops.iter().find(|o| o.ty.shape != elem) {
            return Err(Diagnostic::new(
                Code::Ragged,
                format!("stacked elements differ in shape: {} and {}", ops[0].ty, bad.ty),
            )
            .label(ops[0].span, ops[0].ty.to_string())
            .label(bad.span, bad.ty.to_string())
            .into());
        }
        let mut one = vec![1];
        one.extend_from_slice(&elem);
        let parts = ops.iter().map(|o| self.reshape(o, one.clone(), o.span)).collect::<TResult<Vec<_>>>()?;
        let refs: Vec<&super::tensor::Operand> = parts.iter().collect();
        let cat = self.node(Op::Concat { axis: 0 }, &refs, span)?;
        let mut full = shape.to_vec();
        full.extend_from_slice(&elem);
        let out = self.reshape(&cat, full, span)?;
        Ok(Value::Tensor(out.id, out.ty))
    }
}

/// What `flatten_literal` collects: the literal's shape so far, its leaves
/// in order, and the depth at which they sit.
#[derive(Default)]
struct Flattened {
    shape: Vec<usize>,
    leaves: Vec<(Value, Span)>,
    leaf_depth: Option<usize>,
}

/// Unary math on a compile-time number, where it stays a number.
fn fold_unary(op: UnaryOp, x: f64) -> Option<f64> {
    Some(match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Log1p | UnaryOp::Expm1 | UnaryOp::Erf => {
            crate::tensor::f64_unary(op)?(x)
        }
        UnaryOp::Not => return None,
    })
}
