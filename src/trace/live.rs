//! A tracer that stays alive between entries: the compile-time state of an
//! interactive session (`tfc repl`).
//!
//! A file is traced in one go into one graph; a session is traced one entry
//! at a time into one *growing* graph. `Live` keeps what the tracer needs to
//! continue — the graph, the loaded std modules, the slot counter, the CSV
//! cache, the quantized models' weights and the session scope with every
//! binding — and `trace` runs one
//! entry's statements with a fresh `Tracer` built around that state, so an
//! entry costs only its own statements (no re-tracing of earlier ones) and
//! later entries see earlier bindings, models and their trained parameters
//! exactly as later statements of a file would.
//!
//! Contract: entries are atomic. `trace` runs the statements in a child of
//! the session scope and returns a `Traced`; `commit` copies its bindings
//! into the session scope (a new binding of an old name shadows it),
//! `abandon` drops them and undoes what tracing did to existing models
//! (`train` and `load` rebind parameters while tracing). Nodes of an
//! abandoned entry stay in the graph, unused. The graph only grows, through
//! `Graph::add`, so node id order is a topological order (the runtime's
//! `Executor::resume` relies on it).
//!
//! Example (what the REPL does for `let y = x * 2.0` then `y`):
//! `live.trace(&stmts, sources, dir, true)` → `Traced { effects: [], value: None }`,
//! `live.commit(t)`; then for `y` the effects are `[print %y]`.

use super::scopes::Scopes;
use super::value::{ModelInstance, Scope, Value};
use super::Tracer;
use crate::diag::{Code, Diagnostic, SourceMap, Span};
use crate::ir::{Effect, Graph, NodeId, Op, Program, TensorType};
use crate::syntax::ast;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The parameters of models, by instance, as they were before an entry.
type Snapshot = Vec<(Rc<ModelInstance>, Vec<(String, Value)>)>;

type CsvCache = HashMap<(PathBuf, Option<i64>), std::sync::Arc<crate::ir::plan::HostColumns>>;

/// The tracer state kept between entries.
pub struct Live {
    graph: Graph,
    modules: rustc_hash::FxHashMap<String, Rc<Scope>>,
    next_slot: usize,
    next_region: usize,
    csv_cache: CsvCache,
    /// The weights of quantized models (`Tracer::quantized`), so that an
    /// entry's `q(x)` on a model quantized earlier runs on int8 too.
    quantized: rustc_hash::FxHashMap<NodeId, super::builtins::QuantizedWeight>,
    /// The session's own bindings; its parent is the prelude.
    session: Rc<Scope>,
    /// Every scope the session made, emptied when the session ends.
    scopes: Scopes,
}

/// One traced entry, not yet committed.
pub struct Traced {
    /// The effects to run, in order.
    pub effects: Vec<Effect>,
    /// The value of a trailing bare expression, if the entry ends with one.
    pub value: Option<Value>,
    scope: Rc<Scope>,
    snapshot: Snapshot,
}

impl Live {
    /// Loads the prelude; its diagnostics (an internal error) are returned.
    pub fn new(sources: &mut SourceMap) -> Result<Live, Vec<Diagnostic>> {
        let mut tracer = Tracer::new(sources, Path::new("."));
        let prelude = tracer.prelude_scope();
        if !tracer.diags.is_empty() {
            return Err(tracer.diags);
        }
        Ok(Live {
            graph: tracer.graph,
            modules: tracer.modules,
            next_slot: tracer.next_slot,
            next_region: tracer.next_region,
            csv_cache: tracer.csv_cache,
            quantized: std::mem::take(&mut tracer.quantized),
            session: tracer.scopes.child(&prelude),
            scopes: std::mem::take(&mut tracer.scopes),
        })
    }

    /// Traces one entry. With `show`, a trailing bare expression whose value
    /// is not `()` gets a `print` effect, as if it were `print(expr)`.
    pub fn trace(
        &mut self,
        stmts: &[ast::Stmt],
        sources: &mut SourceMap,
        base_dir: &Path,
        show: bool,
    ) -> Result<Traced, Vec<Diagnostic>> {
        self.trace_with_inputs(stmts, sources, base_dir, show, &[]).map(|(t, _)| t)
    }

    /// Like `trace`, with each of the session names in `inputs` read as a
    /// fresh placeholder node of the given type (an `Op::Slot` that is never
    /// filled, slot `usize::MAX`) instead of its value, so that the entry's graph is a function
    /// of those inputs; the placeholders are returned in the order of
    /// `inputs`. The REPL's entry cache instantiates the graph for the
    /// actual values (see `repl::template`).
    pub fn trace_with_inputs(
        &mut self,
        stmts: &[ast::Stmt],
        sources: &mut SourceMap,
        base_dir: &Path,
        show: bool,
        inputs: &[(String, TensorType)],
    ) -> Result<(Traced, Vec<NodeId>), Vec<Diagnostic>> {
        let snapshot = self.snapshot();
        let mut parent = self.session.clone();
        let mut placeholders = Vec::with_capacity(inputs.len());
        if !inputs.is_empty() {
            parent = self.scopes.child(&self.session);
            for (name, ty) in inputs {
                // Never filled and never numbered: placeholders are replaced
                // before anything runs, and the session's slot numbers (shown
                // by `:opt` and `:plan`) stay as they would be without them.
                let op = Op::Slot { slot: usize::MAX, ty: ty.clone() };
                let id = self.graph.add(op, &[], ty.clone(), Span::default());
                parent.set(name, Value::Tensor(id, ty.clone()));
                placeholders.push(id);
            }
        }
        let scope = self.scopes.child(&parent);
        let mut tracer = Tracer::new(sources, base_dir);
        tracer.scopes = std::mem::take(&mut self.scopes);
        tracer.graph = std::mem::take(&mut self.graph);
        tracer.modules = std::mem::take(&mut self.modules);
        tracer.csv_cache = std::mem::take(&mut self.csv_cache);
        tracer.quantized = std::mem::take(&mut self.quantized);
        tracer.next_slot = self.next_slot;
        tracer.next_region = self.next_region;
        tracer.kept_below = tracer.graph.node_bound();
        let (last, init) = match stmts.split_last() {
            Some((last, init)) if matches!(last.kind, ast::StmtKind::Expr(_)) => (Some(last), init),
            _ => (None, stmts),
        };
        // Statement by statement, so that Ctrl-C stops a long entry between
        // two statements (calls are safe points too, see `call_closure`).
        for stmt in init {
            if interrupted(&mut tracer.diags) {
                break;
            }
            tracer.run_stmts(std::slice::from_ref(stmt), &scope);
        }
        let mut value = None;
        let last = last.filter(|_| !interrupted(&mut tracer.diags));
        if let Some(ast::Stmt { kind: ast::StmtKind::Expr(e), .. }) = last {
            match tracer.eval(e, &scope) {
                Ok(v) => {
                    let unit = matches!(&v, Value::Tuple(items) if items.is_empty());
                    if show && !unit {
                        match tracer.print_item(&v, e.span) {
                            Ok(item) => tracer.effects.push(Effect::Print { item, full: false, span: e.span }),
                            Err(f) => tracer.report(f),
                        }
                    }
                    value = Some(v);
                }
                Err(f) => tracer.report(f),
            }
        }
        self.graph = tracer.graph;
        self.modules = tracer.modules;
        self.scopes = std::mem::take(&mut tracer.scopes);
        self.csv_cache = tracer.csv_cache;
        self.quantized = std::mem::take(&mut tracer.quantized);
        self.next_slot = tracer.next_slot;
        self.next_region = tracer.next_region;
        let traced = Traced { effects: tracer.effects, value, scope, snapshot };
        let mut diags = tracer.diags;
        if diags.is_empty() {
            Ok((traced, placeholders))
        } else {
            self.abandon(traced);
            // An interrupted entry reports the interruption alone: the
            // errors after it (if any) are its consequences.
            if let Some(i) = diags.iter().position(|d| d.code == Code::Interrupted) {
                diags = vec![diags.swap_remove(i)];
            }
            Err(diags)
        }
    }

    /// How many scopes the session keeps alive: its bindings' and the
    /// functions' they close over (what a long session holds on to).
    pub fn scopes_alive(&self) -> usize {
        self.scopes.alive()
    }

    /// Makes the entry's bindings part of the session.
    pub fn commit(&mut self, traced: Traced) {
        for name in traced.scope.local_names() {
            if let Some(v) = traced.scope.get_local(&name) {
                self.session.set(&name, v);
            }
        }
    }

    /// Drops the entry's bindings and restores the parameters and states
    /// of the session's models to what they were before the entry.
    pub fn abandon(&mut self, traced: Traced) {
        for (model, params) in traced.snapshot {
            for (path, v) in params {
                model.set_param(&path, v);
            }
        }
    }

    /// The parameters and states of every model bound in the session, by
    /// instance.
    fn snapshot(&self) -> Snapshot {
        fn walk(v: &Value, out: &mut Snapshot) {
            match v {
                Value::Model(m) if !out.iter().any(|(o, _)| Rc::ptr_eq(o, m)) => {
                    out.push((m.clone(), m.tensor_paths()))
                }
                Value::Tuple(items) => items.iter().for_each(|i| walk(i, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        self.session.for_each_local(|v| walk(v, &mut out));
        out
    }

    /// Runs `f` on the session graph with `effects`, as one program. `f`
    /// may annotate the program (`compiled`) or add nodes, never remove any:
    /// the session graph only grows.
    pub fn with_program<R>(&mut self, effects: Vec<Effect>, f: impl FnOnce(&mut Program) -> R) -> (R, Vec<Effect>) {
        let mut program = Program { graph: std::mem::take(&mut self.graph), effects, compiled: None };
        let r = f(&mut program);
        self.graph = program.graph;
        (r, program.effects)
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The session graph, to add nodes that only read existing ones (an
    /// instance of a cached entry); it must keep only growing.
    pub fn graph_mut(&mut self) -> &mut Graph {
        &mut self.graph
    }

    /// The value bound to `name` by the session itself (not the prelude).
    pub fn binding(&self, name: &str) -> Option<Value> {
        self.session.get_local(name)
    }

    /// The value bound to `name` in the session or the prelude.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.session.get(name)
    }

    /// Names bound by the session itself, sorted.
    pub fn session_names(&self) -> Vec<String> {
        self.session.local_names()
    }
}

/// The session's bindings for name resolution, looked up one name at a
/// time (an entry costs the same however long the session is).
impl crate::sema::Known for Live {
    fn contains(&self, name: &str) -> bool {
        self.session.has_local(name)
    }

    fn names(&self) -> Vec<String> {
        self.session.local_names()
    }
}

impl Live {
    /// Every name visible at the prompt (session and prelude), sorted.
    pub fn visible_names(&self) -> Vec<String> {
        self.session.visible_names()
    }

    /// The members of every session binding that has them — a model's
    /// fields and methods, a module's items — for completion after `name.`.
    pub fn members(&self) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for name in self.session.local_names() {
            let members = match self.session.get_local(&name) {
                Some(Value::Model(m)) => {
                    let mut names = m.scope.local_names();
                    names.extend(m.def.members.iter().filter_map(|member| match member {
                        ast::ModelMember::Method(f) => Some(f.name.name.clone()),
                        _ => None,
                    }));
                    names
                }
                Some(Value::Module(scope)) => scope.local_names(),
                _ => continue,
            };
            out.push((name, members));
        }
        out
    }

    /// A key that changes whenever the meaning of code reading `names`
    /// could: the identity of each session binding among `names` and,
    /// transitively, of the session bindings the bodies of user functions
    /// and models among them read. Names the session does not bind (the
    /// prelude, built-ins, locals) never change meaning, so they add nothing.
    ///
    /// Identities are node ids (never reused: the graph only grows) and the
    /// addresses of shared values; the values are returned with the key, and
    /// whoever stores the key must keep them, so that no address in a stored
    /// key can be reused by a later value.
    pub fn binding_key(&self, names: &[&str], sources: &SourceMap) -> (String, Vec<Value>) {
        let mut key = String::new();
        let mut deps = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        let mut todo: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        while let Some(name) = todo.pop() {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name.clone());
            let Some(v) = self.session.get_local(&name) else { continue };
            key.push_str(&name);
            key.push('=');
            identity(&v, &mut key, &mut |span| {
                todo.extend(identifiers(sources.text(span.file).get(span.start..span.end).unwrap_or("")))
            });
            key.push(';');
            deps.push(v);
        }
        (key, deps)
    }
}

/// Whether Ctrl-C was pressed; records E0403 unless an error already says so.
fn interrupted(diags: &mut Vec<Diagnostic>) -> bool {
    if diags.iter().any(|d| d.code == Code::Interrupted) {
        return true;
    }
    match crate::interrupt::check() {
        Ok(()) => false,
        Err(d) => {
            diags.push(d);
            true
        }
    }
}

/// Appends a text that identifies `v` (a node, an address, a number) and
/// reports the source spans whose free names `v` depends on.
fn identity(v: &Value, key: &mut String, body: &mut dyn FnMut(crate::diag::Span)) {
    use std::fmt::Write as _;
    let _ = match v {
        Value::Int(i) => write!(key, "i{i}"),
        Value::Float(x) => write!(key, "f{}", x.to_bits()),
        Value::Bool(b) => write!(key, "b{b}"),
        Value::Str(s) => write!(key, "s{s:?}"),
        Value::DType(d) => write!(key, "d{d}"),
        Value::Tensor(id, _) => write!(key, "n{}", id.index()),
        Value::Builtin(name) => write!(key, "B{name}"),
        Value::Poison => write!(key, "P"),
        Value::Tuple(items) => {
            key.push('(');
            for i in items {
                identity(i, key, body);
                key.push(',');
            }
            write!(key, ")")
        }
        Value::Func(f) => {
            // A closure's span is its name; its body may lie after it.
            body(f.span().to(f.def.body.span));
            write!(key, "F{:p}", Rc::as_ptr(f))
        }
        Value::ModelDef(m) => {
            body(m.def.span);
            write!(key, "M{:p}", Rc::as_ptr(m))
        }
        Value::Model(m) => {
            body(m.def.span);
            let _ = write!(key, "m{:p}[", Rc::as_ptr(m));
            for (_, p) in m.tensor_paths() {
                identity(&p, key, body);
            }
            write!(key, "]")
        }
        Value::Method(m, f) => {
            body(f.span);
            identity(&Value::Model(m.clone()), key, body);
            write!(key, ".{}", f.name.name)
        }
        Value::Grad(g) => {
            identity(&g.f, key, body);
            write!(key, "g{:?}{}{}", g.wrt, g.single, g.with_value)
        }
        Value::OptimizerDef(o) => {
            body(o.def.span);
            write!(key, "O{:p}", Rc::as_ptr(o))
        }
        Value::Optimizer(o) => {
            body(o.def.span);
            write!(key, "o{:p}", Rc::as_ptr(o))
        }
        Value::Module(m) => write!(key, "U{:p}", Rc::as_ptr(m)),
        Value::Dataset(d) => write!(key, "D{:p}", Rc::as_ptr(d)),
    };
}

/// The identifiers in a piece of source text (a superset of its free names).
pub fn identifiers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() || c == '_' {
            cur.push(c);
        } else if !cur.is_empty() {
            if !cur.starts_with(|c: char| c.is_ascii_digit()) {
                out.push(std::mem::take(&mut cur));
            }
            cur.clear();
        }
    }
    out
}

/// `:type`: a tensor's dtype and shape, a function's signature with its
/// annotations (symbolic dimensions as written), or the kind of value.
pub fn type_text(v: &Value, sources: &SourceMap) -> String {
    let text = |s: crate::diag::Span| sources.text(s.file).get(s.start..s.end).unwrap_or("").to_string();
    match v {
        Value::Tensor(_, ty) => ty.to_string(),
        Value::Float(_) => "float (f32[] in a tensor context)".into(),
        Value::Int(_) => "int (i32[] in a tensor context)".into(),
        Value::Tuple(items) => {
            format!("({})", items.iter().map(|i| type_text(i, sources)).collect::<Vec<_>>().join(", "))
        }
        Value::Func(f) => {
            let params: Vec<String> = f.def.params.iter().map(|p| text(p.span)).collect();
            let ret = f.def.ret.as_ref().map(|r| format!(" -> {}", text(r.span))).unwrap_or_default();
            format!("fn {}({}){ret}", f.name(), params.join(", "))
        }
        Value::Method(_, f) => {
            let params: Vec<String> = f.params.iter().map(|p| text(p.span)).collect();
            let ret = f.ret.as_ref().map(|r| format!(" -> {}", text(r.span))).unwrap_or_default();
            format!("fn {}({}){ret}", f.name.name, params.join(", "))
        }
        Value::ModelDef(m) => {
            let params: Vec<String> = m.def.params.iter().map(|p| text(p.span)).collect();
            format!("model {}({})", m.def.name.name, params.join(", "))
        }
        Value::Model(m) => {
            let count: usize =
                params_of(v).unwrap_or_default().iter().map(|(_, t)| t.shape.iter().product::<usize>()).sum();
            format!("model {} ({count} parameter{})", m.def.name.name, if count == 1 { "" } else { "s" })
        }
        other => other.describe(),
    }
}

/// `:params`: the parameter paths of a model and their types, depth first.
pub fn params_of(v: &Value) -> Option<Vec<(String, TensorType)>> {
    let Value::Model(m) = v else { return None };
    Some(
        m.param_paths()
            .into_iter()
            .filter_map(|(p, v)| match v {
                Value::Tensor(_, ty) => Some((p, ty)),
                _ => None,
            })
            .collect(),
    )
}

/// Whether re-binding `v` later is the same as tracing its definition again:
/// plain data and tensors (immutable nodes), not models, which `train` and
/// `load` change in place.
pub fn is_plain(v: &Value) -> bool {
    match v {
        Value::Int(_) | Value::Float(_) | Value::Bool(_) | Value::Str(_) | Value::DType(_) | Value::Tensor(..) => true,
        Value::Tuple(items) => items.iter().all(is_plain),
        _ => false,
    }
}

impl Traced {
    /// The names the entry binds, with their values.
    pub fn bindings(&self) -> Vec<(String, Value)> {
        self.scope.local_names().into_iter().filter_map(|n| self.scope.get_local(&n).map(|v| (n, v))).collect()
    }

    /// A traced entry that re-binds `bindings` and runs `effects` (a cache hit).
    pub fn replay(live: &mut Live, effects: Vec<Effect>, bindings: &[(String, Value)]) -> Traced {
        let scope = live.scopes.child(&live.session);
        for (n, v) in bindings {
            scope.set(n, v.clone());
        }
        Traced { effects, value: None, scope, snapshot: Vec::new() }
    }
}
