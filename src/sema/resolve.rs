//! Name resolution.
//!
//! Contract: after `resolve` succeeds, every bare name in the program refers
//! to a binding in scope (a local, parameter, item, import, prelude function,
//! built-in or dtype); each failure is an E0201 diagnostic at the name, with
//! a did-you-mean from the names in scope.
//!
//! Example: `fn f(x) = sofmax(x)` reports
//! `unknown name `sofmax`` with help `did you mean `softmax`?`.
//!
//! Top-level items are visible everywhere (a function may call one defined
//! further down, as long as the call runs after both definitions); `let`
//! bindings inside blocks are visible from the next statement on.

use crate::diag::{did_you_mean, Code, Diagnostic, Span};
use crate::syntax::ast::*;
use rustc_hash::FxHashSet as HashSet;
use std::sync::OnceLock;

/// Names every program can use without defining them, computed once per
/// process (they include the top-level names of `std/math.tfl`, which takes
/// a parse).
fn global_names() -> &'static HashSet<String> {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    NAMES.get_or_init(compute_global_names)
}

fn compute_global_names() -> HashSet<String> {
    let mut names: HashSet<String> = crate::trace::builtin_names().iter().map(|s| s.to_string()).collect();
    names.extend(crate::ir::DType::ALL.iter().map(|d| d.name().to_string()));
    names.extend(["training", "auto"].map(String::from));
    if let Some(src) = crate::stdlib::source("std.math") {
        if let Ok(p) = crate::syntax::parse(src, crate::diag::FileId(u32::MAX)) {
            names.extend(top_level_names(&p).into_iter().map(String::from));
        }
    }
    names
}

/// The top-level names of the std module `module` (`std.nn`), parsed once
/// per process; `None` for a module that is not in the std library.
fn std_module_names(module: &str) -> Option<&'static HashSet<String>> {
    static NAMES: OnceLock<Vec<(&'static str, HashSet<String>)>> = OnceLock::new();
    let all = NAMES.get_or_init(|| {
        let parsed = crate::stdlib::MODULES.iter().filter_map(|&(name, src)| {
            let p = crate::syntax::parse(src, crate::diag::FileId(u32::MAX)).ok()?;
            Some((name, top_level_names(&p).into_iter().map(String::from).collect()))
        });
        parsed.collect()
    });
    all.iter().find(|(name, _)| *name == module).map(|(_, names)| names)
}

fn top_level_names(p: &Program) -> Vec<&str> {
    let mut out = Vec::new();
    for s in &p.stmts {
        match &s.kind {
            StmtKind::Use { path, group } => match group {
                Some(items) => out.extend(items.iter().map(|i| i.name.as_str())),
                None => out.extend(path.last().map(|i| i.name.as_str())),
            },
            StmtKind::Const { name, .. } => out.push(&name.name),
            StmtKind::Fn(f) | StmtKind::Export(f) => out.push(&f.name.name),
            StmtKind::Model(m) => out.push(&m.name.name),
            StmtKind::Optimizer(o) => out.push(&o.name.name),
            StmtKind::Let { pattern, .. } => out.extend(pattern.names()),
            StmtKind::Train(_) | StmtKind::For(_) | StmtKind::Expr(_) => {}
        }
    }
    out
}

/// Checks that every name in `program` is bound.
pub fn resolve(program: &Program) -> crate::diag::Result<()> {
    resolve_in(program, &Vec::new())
}

/// Names bound before a program starts (the bindings of earlier REPL
/// entries), asked one at a time so that a long session costs nothing per
/// entry; the whole list only for a did-you-mean.
pub trait Known {
    fn contains(&self, name: &str) -> bool;
    fn names(&self) -> Vec<String>;
}

impl Known for Vec<String> {
    fn contains(&self, name: &str) -> bool {
        self.iter().any(|n| n == name)
    }
    fn names(&self) -> Vec<String> {
        self.to_vec()
    }
}

/// Like `resolve`, with `known` names bound before the program starts.
pub fn resolve_in<'a>(program: &'a Program, known: &'a dyn Known) -> crate::diag::Result<()> {
    let mut r = Resolver { globals: global_names(), scopes: Vec::new(), diags: Vec::new(), known };
    let top: HashSet<&'a str> = top_level_names(program).into_iter().collect();
    r.scopes.push(top);
    for s in &program.stmts {
        r.stmt(s);
    }
    if r.diags.is_empty() {
        Ok(())
    } else {
        Err(r.diags)
    }
}

/// Scopes borrow their names from the program.
struct Resolver<'a> {
    /// The outermost scope, shared by every run.
    globals: &'static HashSet<String>,
    scopes: Vec<HashSet<&'a str>>,
    diags: Vec<Diagnostic>,
    known: &'a dyn Known,
}

impl<'a> Resolver<'a> {
    fn bind(&mut self, name: &'a str) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name);
        }
    }

    fn bind_pattern(&mut self, p: &'a Pattern) {
        p.names().into_iter().for_each(|n| self.bind(n));
    }

    fn use_name(&mut self, name: &str, span: Span) {
        if self.globals.contains(name) || self.scopes.iter().any(|s| s.contains(name)) || self.known.contains(name) {
            return;
        }
        let mut d =
            Diagnostic::new(Code::UnknownName, format!("unknown name `{name}`")).label(span, "not found in this scope");
        let known = self.known.names();
        let candidates: Vec<&str> = self
            .globals
            .iter()
            .map(String::as_str)
            .chain(self.scopes.iter().flat_map(|s| s.iter().copied()))
            .chain(known.iter().map(String::as_str))
            .collect();
        if let Some(s) = did_you_mean(name, candidates) {
            d = d.help(format!("did you mean `{s}`?"));
        }
        self.diags.push(d);
    }

    /// Runs `f` in a new scope.
    /// `use std.m.{a, b}`: every item must be one of the std module's
    /// (or a built-in), reported here with the program's other unknown
    /// names (the tracer, which loads modules, would stop at the first).
    /// Other modules are files the tracer reads.
    fn std_imports(&mut self, path: &[Ident], items: &[Ident]) {
        let dotted: Vec<&str> = path.iter().map(|i| i.name.as_str()).collect();
        let Some(names) = std_module_names(&dotted.join(".")) else { return };
        for item in items {
            if names.contains(&item.name) || global_names().contains(&item.name) {
                continue;
            }
            let mut d = Diagnostic::new(Code::UnknownModule, format!("the module has no item `{}`", item.name))
                .label(item.span, "not found in the module");
            if let Some(s) = did_you_mean(&item.name, names.iter().map(String::as_str)) {
                d = d.help(format!("did you mean `{s}`?"));
            }
            self.diags.push(d);
        }
    }

    fn scoped(&mut self, f: impl FnOnce(&mut Resolver<'a>)) {
        self.scopes.push(HashSet::default());
        f(self);
        self.scopes.pop();
    }

    fn stmt(&mut self, s: &'a Stmt) {
        match &s.kind {
            StmtKind::Use { path, group: Some(items) } => self.std_imports(path, items),
            StmtKind::Use { .. } => {}
            StmtKind::Const { ty, value, .. } => {
                self.expr(value);
                if let Some(t) = ty {
                    self.ty(t);
                }
            }
            StmtKind::Fn(f) | StmtKind::Export(f) => self.func(f),
            StmtKind::Model(m) => self.scoped(|r| {
                r.params(&m.params);
                for mm in &m.members {
                    match mm {
                        ModelMember::Param { name, .. }
                        | ModelMember::State { name, .. }
                        | ModelMember::Field { name, .. } => r.bind(&name.name),
                        ModelMember::Method(f) => r.bind(&f.name.name),
                    }
                }
                for mm in &m.members {
                    match mm {
                        ModelMember::Param { ty, init, .. } => {
                            r.ty(ty);
                            r.expr(init);
                        }
                        ModelMember::State { ty, init, .. } => {
                            if let Some(t) = ty {
                                r.ty(t);
                            }
                            r.expr(init);
                        }
                        ModelMember::Field { value, .. } => r.expr(value),
                        ModelMember::Method(f) => r.func(f),
                    }
                }
            }),
            StmtKind::Optimizer(o) => self.scoped(|r| {
                r.params(&o.params);
                for (name, init) in &o.states {
                    r.bind("param");
                    r.expr(init);
                    r.bind(&name.name);
                }
                for n in ["param", "grad", "step"] {
                    r.bind(n);
                }
                r.block(&o.update);
            }),
            StmtKind::Let { pattern, ty, value } => {
                self.expr(value);
                if let Some(t) = ty {
                    self.ty(t);
                }
                self.bind_pattern(pattern);
            }
            StmtKind::Train(t) => {
                self.expr(&t.model);
                self.expr(&t.data);
                for f in &t.fields {
                    match f {
                        TrainField::Loss { params, body, .. } => self.scoped(|r| {
                            r.params(params);
                            r.expr(body);
                        }),
                        TrainField::Set { value, .. } => self.expr(value),
                        TrainField::Eval { metric, data, every, .. } => {
                            self.expr(metric);
                            self.expr(data);
                            if let Some(e) = every {
                                self.expr(&e.count);
                            }
                        }
                        TrainField::Checkpoint { path, every, .. } => {
                            self.expr(path);
                            if let Some(e) = every {
                                self.expr(&e.count);
                            }
                        }
                        TrainField::Log { path, every, format, .. } => {
                            self.expr(path);
                            if let Some(e) = every {
                                self.expr(&e.count);
                            }
                            if let Some(f) = format {
                                self.expr(f);
                            }
                        }
                    }
                }
            }
            StmtKind::For(f) => self.for_head(&f.head, |r| r.block(&f.body)),
            StmtKind::Expr(e) => self.expr(e),
        }
    }

    /// What a `for` loop or comprehension runs over is read outside it;
    /// `inside` (the body, or the element) sees the loop variable too.
    fn for_head(&mut self, head: &'a ForHead, inside: impl FnOnce(&mut Resolver<'a>)) {
        match &head.iter {
            ForIter::Range(a, b) => {
                self.expr(a);
                self.expr(b);
            }
            ForIter::Each(e) => self.expr(e),
        }
        self.scoped(|r| {
            r.bind_pattern(&head.var);
            inside(r);
        });
    }

    fn func(&mut self, f: &'a FnDef) {
        self.scoped(|r| {
            r.params(&f.params);
            if let Some(t) = &f.ret {
                r.ty(t);
            }
            r.expr(&f.body);
        });
    }

    /// Binds parameters (and the symbolic dimensions of their annotations,
    /// which are ints in the body); defaults may use earlier parameters.
    fn params(&mut self, params: &'a [Param]) {
        for p in params {
            if let Some(d) = &p.default {
                self.expr(d);
            }
            if let Some(t) = &p.ty {
                self.bind_dims(t);
            }
            self.bind(&p.name.name);
        }
    }

    fn bind_dims(&mut self, t: &'a TypeExpr) {
        match &t.kind {
            TypeKind::Tensor { dims, .. } => {
                for d in dims {
                    if let DimExpr::Symbol(id) = d {
                        self.bind(&id.name);
                    }
                }
                // `f32[B, 2 * B]`: a computed dimension reads names bound
                // before it, the type's own symbols included.
                for d in dims {
                    if let DimExpr::Computed { expr, .. } = d {
                        self.expr(expr);
                    }
                }
            }
            TypeKind::Tuple(parts) => parts.iter().for_each(|p| self.bind_dims(p)),
            _ => {}
        }
    }

    /// Symbolic dimensions in a return or parameter type bind on use, so
    /// annotations never report unknown names; `ty` only recurses.
    fn ty(&mut self, t: &'a TypeExpr) {
        self.bind_dims(t);
    }

    fn block(&mut self, b: &'a Block) {
        self.scoped(|r| {
            for s in &b.stmts {
                match s {
                    BlockStmt::Let { pattern, ty, value, .. } => {
                        r.expr(value);
                        if let Some(t) = ty {
                            r.ty(t);
                        }
                        r.bind_pattern(pattern);
                    }
                    BlockStmt::Assign { name, value, .. } => {
                        r.expr(value);
                        r.use_name(&name.name, name.span);
                    }
                    BlockStmt::For(f) => r.for_head(&f.head, |r| r.block(&f.body)),
                    BlockStmt::Expr(e) => r.expr(e),
                }
            }
            if let Some(e) = &b.result {
                r.expr(e);
            }
        });
    }

    fn expr(&mut self, e: &'a Expr) {
        match &e.kind {
            ExprKind::Int(..) | ExprKind::Float(..) | ExprKind::Bool(_) | ExprKind::Str(_) => {}
            ExprKind::Name(n) => self.use_name(n, e.span),
            ExprKind::Tensor(items) | ExprKind::Tuple(items) => items.iter().for_each(|i| self.expr(i)),
            ExprKind::Unary(_, x) => self.expr(x),
            ExprKind::Binary(_, a, b) | ExprKind::Pipe(a, b) => {
                self.expr(a);
                self.expr(b);
            }
            ExprKind::Call { callee, args } => {
                match &callee.kind {
                    // `x.f(a)`: `f` is a member of `x` or, by method sugar, a
                    // function in scope; only the base is checked here.
                    ExprKind::Field { base, .. } => self.expr(base),
                    _ => self.expr(callee),
                }
                args.iter().for_each(|a| self.expr(&a.value));
            }
            ExprKind::Field { base, .. } => self.expr(base),
            ExprKind::Index { base, items } => {
                self.expr(base);
                for i in items {
                    match i {
                        IndexItem::Single(x) => self.expr(x),
                        IndexItem::Slice { start, stop, step, .. } => {
                            [start, stop, step].into_iter().flatten().for_each(|x| self.expr(x))
                        }
                        IndexItem::Ellipsis(_) => {}
                    }
                }
            }
            ExprKind::Lambda { params, body } => self.scoped(|r| {
                r.params(params);
                r.expr(body);
            }),
            ExprKind::Block(b) => self.block(b),
            ExprKind::If { cond, then, else_ } => {
                self.expr(cond);
                self.block(then);
                if let Some(e) = else_ {
                    self.expr(e);
                }
            }
            ExprKind::Comprehension { elem, head } => self.for_head(head, |r| r.expr(elem)),
        }
    }
}
