//! A compact, deterministic dump of the AST for snapshot tests and
//! debugging.
//!
//! Contract: every node kind prints distinctly, as an S-expression, so that
//! precedence and sugar are visible; lists that fit in 100 columns stay on one
//! line, longer ones put each child on its own indented line. Top-level
//! statements are prefixed with their span `@start..end` and preceded by
//! their doc comment; inner spans are omitted to keep snapshots readable.
//!
//! Example: `a + b * c` dumps as `(binary + (name a) (binary * (name b) (name c)))`.

use super::ast::*;
use std::fmt::Write as _;

/// Renders a whole program, one top-level statement per entry.
pub fn dump(program: &Program) -> String {
    let mut out = String::new();
    for stmt in &program.stmts {
        if let Some(doc) = &stmt.doc {
            for line in doc.lines() {
                let _ = writeln!(out, "/// {line}");
            }
        }
        let _ = write!(out, "@{}..{} ", stmt.span.start, stmt.span.end);
        write_sexp(&stmt_sexp(&stmt.kind), 0, &mut out);
        out.push('\n');
    }
    out
}

/// An S-expression: an atom or a parenthesized list.
enum S {
    Atom(String),
    List(Vec<S>),
}

fn atom(s: impl Into<String>) -> S {
    S::Atom(s.into())
}

fn list(head: &str, rest: impl IntoIterator<Item = S>) -> S {
    S::List(std::iter::once(atom(head)).chain(rest).collect())
}

const WIDTH: usize = 100;

/// The one-line width of `s`, or `None` once it exceeds `limit`.
fn flat_width(s: &S, limit: usize) -> Option<usize> {
    match s {
        S::Atom(a) => Some(a.len()).filter(|w| *w <= limit),
        S::List(items) => {
            let mut w = 1 + items.len();
            for item in items {
                w += flat_width(item, limit.saturating_sub(w))?;
            }
            Some(w).filter(|w| *w <= limit)
        }
    }
}

fn write_flat(s: &S, out: &mut String) {
    match s {
        S::Atom(a) => out.push_str(a),
        S::List(items) => {
            out.push('(');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_flat(item, out);
            }
            out.push(')');
        }
    }
}

fn write_sexp(s: &S, indent: usize, out: &mut String) {
    match s {
        S::List(items) if flat_width(s, WIDTH.saturating_sub(indent)).is_none() => {
            // The head and the atoms right after it (names, operators) stay
            // on the first line; each list after them gets its own line.
            out.push('(');
            let lead = items.iter().take_while(|i| matches!(i, S::Atom(_))).count().max(1);
            for (i, item) in items[..lead.min(items.len())].iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_flat(item, out);
            }
            for item in items.iter().skip(lead) {
                out.push('\n');
                out.push_str(&" ".repeat(indent + 2));
                write_sexp(item, indent + 2, out);
            }
            out.push(')');
        }
        _ => write_flat(s, out),
    }
}

fn stmt_sexp(kind: &StmtKind) -> S {
    match kind {
        StmtKind::Use { path, group } => {
            let path = path.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(".");
            let group = group.as_ref().map(|g| list("group", g.iter().map(|i| atom(&i.name))));
            list("use", std::iter::once(atom(path)).chain(group))
        }
        StmtKind::Const { name, ty, value } => list("const", [typed(&name.name, ty.as_ref()), expr(value)]),
        StmtKind::Fn(f) => fn_sexp(f),
        StmtKind::Export(f) => list("export", [fn_sexp(f)]),
        StmtKind::Model(m) => model_sexp(m),
        StmtKind::Optimizer(o) => {
            let states = o.states.iter().map(|(n, v)| list("state", [atom(&n.name), expr(v)]));
            let update = list("update", [block_sexp(&o.update)]);
            list("optimizer", [atom(&o.name.name), params_sexp(&o.params)].into_iter().chain(states).chain([update]))
        }
        StmtKind::Let { pattern, ty, value } => let_sexp(pattern, ty.as_ref(), value),
        StmtKind::Train(t) => {
            let fields = t.fields.iter().map(train_field_sexp);
            list("train", [expr(&t.model), list("on", [expr(&t.data)])].into_iter().chain(fields))
        }
        StmtKind::For(f) => for_sexp(f),
        StmtKind::Expr(e) => expr(e),
    }
}

/// `(for i (range a b) (block …))` or `(for b (each xs) (block …))`.
fn for_sexp(f: &ForLoop) -> S {
    list("for", head_sexp(&f.head).into_iter().chain([block_sexp(&f.body)]))
}

/// The variable and what it runs over, shared by loops and comprehensions.
fn head_sexp(h: &ForHead) -> [S; 2] {
    let iter = match &h.iter {
        ForIter::Range(a, b) => list("range", [expr(a), expr(b)]),
        ForIter::Each(e) => list("each", [expr(e)]),
    };
    [atom(pattern_text(&h.var)), iter]
}

fn let_sexp(pattern: &Pattern, ty: Option<&TypeExpr>, value: &Expr) -> S {
    list("let", [typed(&pattern_text(pattern), ty), expr(value)])
}

/// `name` or `name: type`, as one atom.
fn typed(name: &str, ty: Option<&TypeExpr>) -> S {
    match ty {
        Some(t) => atom(format!("{name}: {}", ty_text(t))),
        None => atom(name),
    }
}

fn fn_sexp(f: &FnDef) -> S {
    let ret = f.ret.as_ref().map(|t| atom(format!("-> {}", ty_text(t))));
    list("fn", [atom(&f.name.name), params_sexp(&f.params)].into_iter().chain(ret).chain([expr(&f.body)]))
}

fn model_sexp(m: &ModelDef) -> S {
    let members = m.members.iter().map(|member| match member {
        ModelMember::Param { name, ty, init, .. } => list("param", [typed(&name.name, Some(ty)), expr(init)]),
        ModelMember::State { name, ty, init, .. } => list("state", [typed(&name.name, ty.as_ref()), expr(init)]),
        ModelMember::Field { name, value, .. } => list("member", [atom(&name.name), expr(value)]),
        ModelMember::Method(f) => fn_sexp(f),
    });
    list("model", [atom(&m.name.name), params_sexp(&m.params)].into_iter().chain(members))
}

fn train_field_sexp(field: &TrainField) -> S {
    let every = |e: &Option<Every>| {
        e.as_ref().map(|e| {
            let unit = if e.unit == EveryUnit::Epochs { "epochs" } else { "steps" };
            list("every", [expr(&e.count), atom(unit)])
        })
    };
    match field {
        TrainField::Loss { params, body, .. } => list("loss", [params_sexp(params), expr(body)]),
        TrainField::Set { name, value, .. } => list("set", [atom(&name.name), expr(value)]),
        TrainField::Eval { metric, data, every: e, .. } => {
            list("eval", [expr(metric), list("on", [expr(data)])].into_iter().chain(every(e)))
        }
        TrainField::Checkpoint { path, every: e, .. } => list("checkpoint", [expr(path)].into_iter().chain(every(e))),
        TrainField::Log { path, every: e, format, .. } => list(
            "log",
            [expr(path)].into_iter().chain(every(e)).chain(format.iter().map(|f| list("format", [expr(f)]))),
        ),
    }
}

fn params_sexp(params: &[Param]) -> S {
    list(
        "params",
        params.iter().map(|p| {
            let name = typed(&p.name.name, p.ty.as_ref());
            match &p.default {
                Some(d) => S::List(vec![name, atom("="), expr(d)]),
                None => name,
            }
        }),
    )
}

fn ty_text(t: &TypeExpr) -> String {
    match &t.kind {
        TypeKind::Tensor { dtype, dims } if dims.is_empty() => dtype.name().to_string(),
        TypeKind::Tensor { dtype, dims } => {
            let dims: Vec<String> = dims.iter().map(DimExpr::to_string).collect();
            format!("{}[{}]", dtype.name(), dims.join(", "))
        }
        TypeKind::Int => "int".into(),
        TypeKind::Float => "float".into(),
        TypeKind::Bool => "bool".into(),
        TypeKind::Str => "str".into(),
        TypeKind::Tuple(parts) => tuple_text(parts.iter().map(ty_text).collect()),
    }
}

/// `(a, b)`, with the trailing comma of a one-element tuple: `(a,)`.
fn tuple_text(parts: Vec<String>) -> String {
    match parts.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", parts.join(", ")),
    }
}

fn pattern_text(p: &Pattern) -> String {
    match p {
        Pattern::Name(i) => i.name.clone(),
        Pattern::Wildcard(_) => "_".into(),
        Pattern::Tuple(parts, _) => tuple_text(parts.iter().map(pattern_text).collect()),
    }
}

fn block_sexp(b: &Block) -> S {
    let stmts = b.stmts.iter().map(|s| match s {
        BlockStmt::Let { pattern, ty, value, .. } => let_sexp(pattern, ty.as_ref(), value),
        BlockStmt::Assign { name, value, .. } => list("assign", [atom(&name.name), expr(value)]),
        BlockStmt::For(f) => for_sexp(f),
        BlockStmt::Expr(e) => expr(e),
    });
    let result = b.result.as_ref().map(|r| list("result", [expr(r)]));
    list("block", stmts.chain(result))
}

fn dtype_suffix(d: &Option<crate::ir::DType>) -> Option<S> {
    d.map(|d| atom(d.name()))
}

fn expr(e: &Expr) -> S {
    match &e.kind {
        ExprKind::Int(v, d) => list("int", [atom(v.to_string())].into_iter().chain(dtype_suffix(d))),
        ExprKind::Float(v, d) => list("float", [atom(format!("{v:?}"))].into_iter().chain(dtype_suffix(d))),
        ExprKind::Bool(b) => list("bool", [atom(b.to_string())]),
        ExprKind::Str(s) => list("str", [atom(format!("{s:?}"))]),
        ExprKind::Name(n) => list("name", [atom(n)]),
        ExprKind::Tensor(items) => list("tensor", items.iter().map(expr)),
        ExprKind::Tuple(items) => list("tuple", items.iter().map(expr)),
        ExprKind::Unary(op, x) => {
            let op = if *op == UnaryOp::Neg { "-" } else { "not" };
            list("unary", [atom(op), expr(x)])
        }
        ExprKind::Binary(op, a, b) => list("binary", [atom(op.symbol()), expr(a), expr(b)]),
        ExprKind::Pipe(a, b) => list("pipe", [expr(a), expr(b)]),
        ExprKind::Call { callee, args } => list(
            "call",
            std::iter::once(expr(callee)).chain(args.iter().map(|a| match &a.name {
                Some(n) => list("named", [atom(&n.name), expr(&a.value)]),
                None => expr(&a.value),
            })),
        ),
        ExprKind::Field { base, name } => list("field", [expr(base), atom(&name.name)]),
        ExprKind::Index { base, items } => {
            list("index", std::iter::once(expr(base)).chain(items.iter().map(index_item)))
        }
        ExprKind::Lambda { params, body } => list("lambda", [params_sexp(params), expr(body)]),
        ExprKind::Block(b) => block_sexp(b),
        ExprKind::If { cond, then, else_ } => {
            list("if", [expr(cond), block_sexp(then)].into_iter().chain(else_.as_ref().map(|e| expr(e))))
        }
        ExprKind::Comprehension { elem, head } => {
            list("comprehension", [expr(elem)].into_iter().chain(head_sexp(head)))
        }
    }
}

fn index_item(item: &IndexItem) -> S {
    let part = |p: &Option<Expr>| p.as_ref().map_or_else(|| atom("_"), expr);
    match item {
        IndexItem::Single(e) => expr(e),
        IndexItem::Slice { start, stop, step, .. } => list("slice", [part(start), part(stop), part(step)]),
        IndexItem::Ellipsis(_) => atom("..."),
    }
}
