//! Tracing: runs the compile-time part of a checked program and records
//! every tensor operation as a node of the graph IR.
//!
//! Contract: on success every node carries a span and a type computed by
//! `ir::infer`, so no shape or dtype error can arise later; every problem is
//! a diagnostic pointing at the user's text with the shapes involved.
//! Functions and model methods are inlined at each call, which specializes
//! them per call shape (like templates); symbolic dimensions in annotations
//! are bound by unification at each call.
//!
//! Example: `let x = [1.0, 2.0]; print(x * 2.0)` traces to
//! `%0 = constant [1, 2] : f32[2]`, `%1 = constant [2] : f32[]`,
//! `%2 = broadcast_to %1 : f32[2]`, `%3 = mul %0, %2 : f32[2]`, `print %3`.

mod args;
mod builtins;
mod call;
mod eval;
mod export;
mod index;
pub mod live;
mod model;
mod modules;
mod scopes;
mod state;
mod tensor;
mod train;
mod unroll;
mod value;

pub use builtins::elements_text as data_elements_text;
pub use live::{Live, Traced};
pub use train::precision_named;
pub use value::Value;

/// Names of every built-in operation.
pub fn builtin_names() -> &'static [&'static str] {
    builtins::NAMES
}

use crate::diag::{Diagnostic, SourceMap, Span};
use crate::ir::{DType, Effect, Graph, Program};
use crate::syntax::ast;
use std::rc::Rc;
use value::Scope;

/// Why evaluation of an expression stopped.
#[derive(Debug)]
pub(crate) enum Fail {
    /// A new error to report.
    Diag(Box<Diagnostic>),
    /// An error already reported (a poisoned binding was used).
    Poisoned,
}

impl From<Diagnostic> for Fail {
    fn from(d: Diagnostic) -> Fail {
        Fail::Diag(Box::new(d))
    }
}

pub(crate) type TResult<T> = Result<T, Fail>;

/// Deepest call nesting while inlining (guards against runaway recursion).
const MAX_CALL_DEPTH: usize = 200;

/// The tracer's state: the graph being built and the effects recorded.
pub struct Tracer<'s> {
    pub(crate) graph: Graph,
    pub(crate) effects: Vec<Effect>,
    pub(crate) sources: &'s mut SourceMap,
    pub(crate) diags: Vec<Diagnostic>,
    pub(crate) depth: usize,
    /// The models being instantiated, outermost first (for the message of
    /// a model that instantiates itself without end).
    pub(crate) instantiating: Vec<String>,
    /// Loaded std modules by dotted path, so each is traced once.
    pub(crate) modules: rustc_hash::FxHashMap<String, Rc<Scope>>,
    /// The declared type and seed of the `param` being initialized, which
    /// `zeros()`, `uniform()` … use when called without a shape.
    pub(crate) param_context: Option<(crate::ir::TensorType, u64)>,
    /// The seed and path prefix for the model instantiated by the member
    /// expression being evaluated (`l1 = Dense(…)` inside a model).
    pub(crate) model_path: Option<(u64, String)>,
    /// The last slot number handed out (slots are unique per program).
    pub(crate) next_slot: usize,
    /// The last region id handed out (`Tracer::new_region`).
    pub(crate) next_region: usize,
    /// Directory that relative data paths resolve against.
    pub(crate) base_dir: std::path::PathBuf,
    /// CSV files already read while checking, by path and label column.
    pub(crate) csv_cache:
        std::collections::HashMap<(std::path::PathBuf, Option<i64>), std::sync::Arc<crate::ir::plan::HostColumns>>,
    /// The value of the built-in `training` (true inside a train step).
    pub(crate) training: bool,
    /// Inside a train step: the step number (an f32 scalar node), which
    /// `dropout` mixes into its seed so that every step draws a new mask.
    pub(crate) step_counter: Option<crate::ir::NodeId>,
    /// While `scan` functions are traced (innermost last): the counters
    /// their random ops use, each made on first use (`builtins/scan.rs`).
    pub(crate) scan_counters: Vec<builtins::scan::ScanCounter>,
    /// While a step's loss is traced: the scopes of the trained model and
    /// its sub-models, whose `state`s the step may write (`state.rs`).
    pub(crate) step_models: Vec<Rc<Scope>>,
    /// Whether a training step's gradients are left as requests for the
    /// `autodiff` pass (`Op::Gradient`; a file's program) or built at once
    /// (the REPL's live graph, whose node ids must stay a topological order
    /// for `runtime::exec::Executor::resume`).
    pub(crate) defer_gradients: bool,
    /// While tracing a `map`/`filter` function: its element-key slot
    /// (slot number and node), created by the first random op that needs it.
    pub(crate) element_key: Option<Option<(usize, crate::ir::NodeId)>>,
    /// While tracing `eval` metrics of a train block: reductions are
    /// collected here instead of becoming effects.
    pub(crate) pending_reduce: Option<Vec<crate::ir::plan::ReducePlan>>,
    /// Nodes with a lower index were there before this trace (earlier REPL
    /// entries, whose bindings may hold them): they are never removed.
    pub(crate) kept_below: usize,
    /// Every scope made by this trace, emptied when the tracer is dropped
    /// (which frees the function values that close over their own scope).
    pub(crate) scopes: scopes::Scopes,
    /// `export fn`s seen so far, traced at the end of a file's program
    /// (`None` in the REPL, which has no end: there `export` is E0901).
    pub(crate) exports: Option<Vec<export::PendingExport>>,
    /// The sizes an `export fn`'s open size is also traced at
    /// (`ExportPlan::sized`).
    pub(crate) export_sizes: Vec<usize>,
    /// `TraceOptions::precision`.
    pub(crate) precision: Option<DType>,
    /// `TraceOptions::data_parallel`.
    pub(crate) data_parallel: Option<crate::ir::plan::DataParallel>,
    /// The weights of quantized models (`quantize`), by the node a model
    /// binds (their dequantized value): `@` with one runs on int8.
    pub(crate) quantized: rustc_hash::FxHashMap<crate::ir::NodeId, builtins::QuantizedWeight>,
    /// While `quantize(…, calibration = …)` runs the float model: the
    /// inputs its products with the weights being quantized see.
    pub(crate) calibration: Option<builtins::Calibration>,
}

/// What a session asks of tracing beyond the program itself.
#[derive(Clone, Debug, Default)]
pub struct TraceOptions {
    /// The sizes an `export fn`'s open size is also traced at
    /// (`ExportPlan::sized`: `tfc build --emit lib --batch`).
    pub export_sizes: Vec<usize>,
    /// `--precision`: every train block's precision, over what it says
    /// (`Some(F32)`: none).
    pub precision: Option<DType>,
    /// A data-parallel run: every train block's step is split in two
    /// halves over virtual shards (`plan::ParallelStep`).
    pub data_parallel: Option<crate::ir::plan::DataParallel>,
}

/// Traces a parsed program into an IR program, or returns every diagnostic.
pub fn trace_program(program: &ast::Program, sources: &mut SourceMap) -> crate::diag::Result<Program> {
    trace_program_in(program, sources, std::path::Path::new("."), &TraceOptions::default())
}

/// Like `trace_program`, resolving relative data paths against `base_dir`,
/// with `options`.
pub fn trace_program_in(
    program: &ast::Program,
    sources: &mut SourceMap,
    base_dir: &std::path::Path,
    options: &TraceOptions,
) -> crate::diag::Result<Program> {
    let mut tracer = Tracer::new(sources, base_dir);
    tracer.export_sizes = options.export_sizes.clone();
    tracer.precision = options.precision;
    tracer.data_parallel = options.data_parallel;
    // The front-end bench's program traces to about one node per 11 bytes
    // of source: reserving one per 10 up front (proportional to the
    // program) saves the repeated copying of a growing graph; programs that
    // trace more (loops, big std calls) simply grow it.
    let text_len = program.stmts.last().map_or(0, |s| s.span.end);
    tracer.graph.reserve(text_len / 10, text_len / 8);
    let env = tracer.prelude_scope();
    tracer.defer_gradients = true;
    tracer.exports = Some(Vec::new());
    tracer.run_stmts(&program.stmts, &env);
    tracer.trace_exports();
    if tracer.diags.is_empty() {
        Ok(Program { graph: tracer.graph, effects: tracer.effects, compiled: None })
    } else {
        Err(tracer.diags)
    }
}

impl<'s> Tracer<'s> {
    /// A tracer with an empty graph, no modules loaded and no diagnostics.
    pub(crate) fn new(sources: &'s mut SourceMap, base_dir: &std::path::Path) -> Tracer<'s> {
        Tracer {
            graph: Graph::new(),
            effects: Vec::new(),
            sources,
            diags: Vec::new(),
            depth: 0,
            instantiating: Vec::new(),
            modules: Default::default(),
            param_context: None,
            model_path: None,
            next_slot: 0,
            next_region: 0,
            base_dir: base_dir.to_path_buf(),
            csv_cache: Default::default(),
            training: false,
            step_counter: None,
            scan_counters: Vec::new(),
            step_models: Vec::new(),
            defer_gradients: false,
            element_key: None,
            pending_reduce: None,
            kept_below: 0,
            scopes: Default::default(),
            exports: None,
            export_sizes: Vec::new(),
            precision: None,
            data_parallel: None,
            quantized: Default::default(),
            calibration: None,
        }
    }
}

impl Tracer<'_> {
    /// Runs top-level statements in order; an error in one is recorded and
    /// its bindings are poisoned, and the rest still run to find more errors.
    pub(crate) fn run_stmts(&mut self, stmts: &[ast::Stmt], env: &Rc<Scope>) {
        for stmt in stmts {
            if let Err(fail) = self.run_stmt(stmt, env) {
                self.report(fail);
                if let ast::StmtKind::Let { pattern, .. } = &stmt.kind {
                    bind_poison(pattern, env);
                }
                if let ast::StmtKind::Const { name, .. } = &stmt.kind {
                    env.set(&name.name, Value::Poison);
                }
                // A failed loop leaves the names it carries half updated.
                if let ast::StmtKind::For(f) = &stmt.kind {
                    unroll::carried_names(f).into_iter().for_each(|n| env.set(n, Value::Poison));
                }
            }
        }
    }

    pub(crate) fn report(&mut self, fail: Fail) {
        if let Fail::Diag(d) = fail {
            self.diags.push(*d);
        }
    }

    fn run_stmt(&mut self, stmt: &ast::Stmt, env: &Rc<Scope>) -> TResult<()> {
        match &stmt.kind {
            ast::StmtKind::Use { path, group } => self.import(path, group.as_deref(), env),
            ast::StmtKind::Const { name, ty, value } => {
                let v = self.eval(value, env)?;
                if let Some(ty) = ty {
                    self.check_annotation(&v, ty, value.span, env)?;
                }
                env.set(&name.name, v);
                Ok(())
            }
            ast::StmtKind::Fn(def) => {
                env.set(&def.name.name, Value::Func(Rc::new(call::closure_of(def, env))));
                Ok(())
            }
            ast::StmtKind::Export(def) => self.declare_export(def, env),
            ast::StmtKind::Model(def) => {
                let v = value::ModelDefValue { def: def.clone(), env: env.clone() };
                env.set(&def.name.name, Value::ModelDef(Rc::new(v)));
                Ok(())
            }
            ast::StmtKind::Optimizer(def) => {
                let v = value::OptimizerDefValue { def: def.clone(), env: env.clone() };
                env.set(&def.name.name, Value::OptimizerDef(Rc::new(v)));
                Ok(())
            }
            ast::StmtKind::Train(def) => self.train(def, env),
            ast::StmtKind::Let { pattern, ty, value } => {
                let v = self.eval(value, env)?;
                if let Some(ty) = ty {
                    self.check_annotation(&v, ty, value.span, env)?;
                }
                self.bind_pattern(pattern, v, env)
            }
            ast::StmtKind::For(f) => self.for_loop(f, env),
            ast::StmtKind::Expr(e) => self.eval(e, env).map(|_| ()),
        }
    }

    /// Binds a (possibly nested tuple) pattern to a value.
    pub(crate) fn bind_pattern(&mut self, pattern: &ast::Pattern, v: Value, env: &Rc<Scope>) -> TResult<()> {
        match pattern {
            ast::Pattern::Name(id) => {
                env.set(&id.name, v);
                Ok(())
            }
            ast::Pattern::Wildcard(_) => Ok(()),
            ast::Pattern::Tuple(parts, span) => match v {
                Value::Tuple(items) if items.len() == parts.len() => {
                    for (p, item) in parts.iter().zip(items) {
                        self.bind_pattern(p, item, env)?;
                    }
                    Ok(())
                }
                Value::Poison => {
                    bind_poison(pattern, env);
                    Ok(())
                }
                other => Err(Diagnostic::new(
                    crate::diag::Code::Destructure,
                    format!("cannot destructure {} into a tuple of {}", other.describe(), parts.len()),
                )
                .label(*span, format!("this pattern has {} parts", parts.len()))
                .into()),
            },
        }
    }
}

fn bind_poison(pattern: &ast::Pattern, env: &Rc<Scope>) {
    pattern.names().into_iter().for_each(|n| env.set(n, Value::Poison));
}

/// Moves a diagnostic's primary span from a whole operation (`a + b`,
/// `conv2d(x, w)`) to its operator or callee name (`+`, `conv2d`) when other
/// labels lie inside the operation. The operands keep their labels, and
/// nothing overlaps: the renderer cannot draw a label inside another one on
/// the same line (it moves the inner labels to the end of the outer span).
pub(crate) fn narrow_primary(fail: Fail, whole: Span, at: Span) -> Fail {
    let Fail::Diag(mut d) = fail else { return fail };
    let inside = |s: Span| s.file == whole.file && s.start >= whole.start && s.end <= whole.end;
    if at != whole && d.span() == Some(whole) && d.labels[1..].iter().any(|l| inside(l.span)) {
        d.labels[0].span = at;
    }
    Fail::Diag(d)
}
