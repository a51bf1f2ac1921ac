//! One interactive session: runs entries (items and statements, exactly as
//! in a file) against state that lives as long as the session.
//!
//! Contract: an entry is parsed, name-checked against the session's
//! bindings, traced into the session graph by `trace::Live` (only the new
//! statements are traced), and its effects are run by an executor resumed
//! from the previous entry's values and slots, so trained parameters, loaded
//! checkpoints and computed tensors stay available. An entry either succeeds
//! and its bindings join the session, or fails (a diagnostic, a run-time
//! error, Ctrl-C) and leaves the session as it was before it (models keep
//! their parameters; output already printed stays printed).
//!
//! Compiled entries are cached by their key (`key`): the entry's text with
//! the session tensors it names as numbered inputs, their dtypes and
//! shapes, and the identity of every other session binding it reads
//! (directly or through the bodies of user functions and models). On a miss
//! an entry that only binds and prints is traced with placeholders for its
//! inputs (`template`), and every run instantiates that graph for the input
//! values of the moment: `f(a)` then `f(b)` for another tensor of `a`'s type
//! traces `f` once. Running an entry again on the same input nodes replays
//! the instance it made last. Only entries whose effects are `print` and
//! `assert_close` and whose bindings are plain values are cached (a model
//! is changed in place by `train`, so re-binding it is not a replay); an
//! entry whose trace needs its inputs' values (a shape given as a bound
//! tensor) is cached for those input nodes alone.
//!
//! Example: `let x = [1.0, 2.0]` then `x * 2.0` prints `[2, 4]`; a second
//! `x * 2.0` is a cache hit (`Timing::compile == None`), and so is `y * 2.0`
//! after `let y = [5.0, 6.0]`.

use super::key::{self, Marks};
use super::template::{Instance, Template};
use crate::diag::{Code, Diagnostic, FileId, SourceMap};
use crate::driver::Session;
use crate::interrupt;
use crate::ir::{Effect, NodeId, Program};
use crate::runtime::exec::{Executor, Memory, RunOptions};
use crate::syntax::ast;
use crate::trace::live::{identifiers, is_plain};
use crate::trace::{Live, Traced, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Most compiled entries kept; the cache starts over when it is full.
pub(super) const MAX_CACHED: usize = 512;

pub struct Repl {
    session: Session,
    pub(super) live: Live,
    memory: Option<Memory>,
    cache: HashMap<String, Cached>,
    /// Optimized programs for `:opt` and `:plan`, by the same key, with the
    /// values the key refers to.
    pub(super) compiled: HashMap<String, (Program, Vec<Value>)>,
    /// The text of every successful item and binding, for `:save`.
    pub(super) defs: Vec<String>,
    /// How entries run: the backend (`--backend`, `--device`) and threads
    /// (`--threads`); each entry's base directory is its own.
    options: RunOptions,
}

/// A compiled entry: the graph of its inputs (`None` when its trace needs
/// their values), the instance that ran last, where its definitions lie in
/// the text first traced (for `:save`), that text's marks, and the values
/// its key refers to (kept alive).
struct Cached {
    template: Option<Template>,
    last: Instance,
    defs: Vec<Definition>,
    marks: Marks,
    _deps: Vec<Value>,
}

/// An item or binding of an entry: its doc comment and its byte range.
struct Definition {
    doc: Option<String>,
    start: usize,
    end: usize,
}

/// How long an entry took to compile (`None`: a cache hit) and to run.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub compile: Option<Duration>,
    pub run: Duration,
}

impl Repl {
    /// A session with the prelude loaded, whose entries run on the
    /// reference interpreter.
    pub fn new() -> Result<Repl, Vec<Diagnostic>> {
        Repl::with_options(RunOptions::default())
    }

    /// A session with the prelude loaded, whose entries run with `options`
    /// (as `tfc run` gives them: a backend, a device, threads).
    pub fn with_options(options: RunOptions) -> Result<Repl, Vec<Diagnostic>> {
        let mut session = Session::new();
        let live = Live::new(&mut session.sources)?;
        Ok(Repl {
            session,
            live,
            memory: Some(Memory::default()),
            cache: HashMap::new(),
            compiled: HashMap::new(),
            defs: Vec::new(),
            options,
        })
    }

    pub fn sources(&self) -> &SourceMap {
        &self.session.sources
    }

    /// Runs one entry typed at the prompt (`name` labels it in diagnostics);
    /// relative paths resolve against the current directory.
    pub fn run_entry(
        &mut self,
        text: &str,
        name: &str,
        out: &mut dyn std::io::Write,
    ) -> Result<Timing, Vec<Diagnostic>> {
        let started = Instant::now();
        let key = key::of(text, &self.live, &self.session.sources);
        let inputs: Vec<NodeId> = key.inputs.iter().map(|i| i.node).collect();
        if let Some(c) = self.cache.get_mut(&key.key) {
            let instance = if c.last.inputs == inputs {
                Some(c.last.clone().renamed(&key.inputs))
            } else if let Some(t) = &c.template {
                let file = self.session.sources.add(name, text);
                c.last = t.instantiate(self.live.graph_mut(), &key.inputs, &c.marks, &key.marks, file);
                Some(c.last.clone())
            } else {
                None
            };
            if let Some(instance) = instance {
                let defs = render(text, &c.defs, |p| c.marks.map(&key.marks, p));
                let traced = Traced::replay(&mut self.live, instance.effects, &instance.bindings);
                let ran = Instant::now();
                self.execute(traced, Path::new(""), out)?;
                self.defs.extend(defs);
                return Ok(Timing { compile: None, run: ran.elapsed() });
            }
        }
        let file = self.session.add_source(name, text);
        let stmts = self.parse(file)?;
        let (traced, template) = self.trace_entry(&stmts, &key, file)?;
        let compile = started.elapsed();
        let bindings = traced.bindings();
        let cacheable = is_cacheable(&traced.effects, &bindings);
        let defs: Vec<Definition> = stmts
            .iter()
            .filter(|s| !matches!(s.kind, ast::StmtKind::Expr(_)))
            .map(|s| Definition { doc: s.doc.clone(), start: s.span.start, end: s.span.end })
            .collect();
        let texts = render(text, &defs, |p| p);
        let record = cacheable.then(|| Cached {
            template,
            last: Instance {
                inputs,
                names: key.inputs.iter().map(|i| i.name.clone()).collect(),
                effects: traced.effects.clone(),
                bindings,
            },
            defs,
            marks: key.marks,
            _deps: key.deps,
        });
        let ran = Instant::now();
        self.execute(traced, Path::new(""), out)?;
        let run = ran.elapsed();
        if let Some(c) = record {
            if self.cache.len() >= MAX_CACHED {
                self.cache.clear();
            }
            self.cache.insert(key.key, c);
        }
        self.defs.extend(texts);
        Ok(Timing { compile: Some(compile), run })
    }

    /// Traces a new entry. One that only binds and prints and names session
    /// tensors is traced with placeholders for them, and the template is
    /// returned with its instance for the current inputs; if that trace
    /// fails or does something else, the entry is traced again on the
    /// inputs' values, so its diagnostics and effects are the usual ones.
    fn trace_entry(
        &mut self,
        stmts: &[ast::Stmt],
        key: &key::EntryKey,
        file: FileId,
    ) -> Result<(Traced, Option<Template>), Vec<Diagnostic>> {
        use ast::StmtKind::{Const, Expr, Let};
        let eligible =
            !key.inputs.is_empty() && stmts.iter().all(|s| matches!(s.kind, Let { .. } | Expr(_) | Const { .. }));
        if eligible {
            let types: Vec<(String, crate::ir::TensorType)> =
                key.inputs.iter().map(|i| (i.name.clone(), i.ty.clone())).collect();
            match self.live.trace_with_inputs(stmts, &mut self.session.sources, Path::new(""), true, &types) {
                Ok((traced, placeholders)) => {
                    let bindings = traced.bindings();
                    if is_cacheable(&traced.effects, &bindings) {
                        let effects = traced.effects.clone();
                        self.live.abandon(traced);
                        let g = self.live.graph_mut();
                        let template = Template::new(g, placeholders, effects, bindings, &key.inputs, file);
                        let instance = template.instantiate(g, &key.inputs, &key.marks, &key.marks, file);
                        let traced = Traced::replay(&mut self.live, instance.effects, &instance.bindings);
                        return Ok((traced, Some(template)));
                    }
                    self.live.abandon(traced);
                }
                Err(diags) if diags.iter().any(|d| d.code == Code::Interrupted) => return Err(diags),
                Err(_) => {}
            }
        }
        let traced = self.live.trace(stmts, &mut self.session.sources, Path::new(""), true)?;
        Ok((traced, None))
    }

    /// `:load FILE` (and `tfc repl FILE`): runs a file as one entry, its
    /// relative paths resolved against its directory, bare expressions not
    /// shown (as with `tfc run`).
    pub fn load(&mut self, path: &Path, out: &mut dyn std::io::Write) -> Result<(), Vec<Diagnostic>> {
        let file = self.session.load_file(path)?;
        let stmts = self.parse(file)?;
        let base = self.session.base_dir(file);
        let traced = self.live.trace(&stmts, &mut self.session.sources, &base, false)?;
        self.execute(traced, &base, out)?;
        let text = self.session.sources.text(file);
        let defs = stmts.iter().filter(|s| !matches!(s.kind, ast::StmtKind::Expr(_))).map(|s| Definition {
            doc: s.doc.clone(),
            start: s.span.start,
            end: s.span.end,
        });
        let texts = render(text, &defs.collect::<Vec<_>>(), |p| p);
        self.defs.extend(texts);
        Ok(())
    }

    /// Traces an entry without running or keeping it (`:type`, `:ir`, …):
    /// its effects and the value of its trailing expression.
    pub(super) fn trace_only(
        &mut self,
        text: &str,
        name: &str,
    ) -> Result<(Vec<Effect>, Option<Value>), Vec<Diagnostic>> {
        let file = self.session.add_source(name, text);
        let stmts = self.parse(file)?;
        let traced = self.live.trace(&stmts, &mut self.session.sources, Path::new(""), false)?;
        let result = (traced.effects.clone(), traced.value.clone());
        self.live.abandon(traced);
        Ok(result)
    }

    /// Parses an entry and checks its names against the session's bindings.
    fn parse(&mut self, file: FileId) -> Result<Vec<ast::Stmt>, Vec<Diagnostic>> {
        let program = crate::syntax::parse(self.session.sources.text(file), file)?;
        crate::sema::resolve_in(&program, &self.live)?;
        Ok(program.stmts)
    }

    /// Runs the effects of a traced entry, then keeps or drops its bindings.
    fn execute(
        &mut self,
        traced: Traced,
        base_dir: &Path,
        out: &mut dyn std::io::Write,
    ) -> Result<(), Vec<Diagnostic>> {
        let memory = self.memory.take().unwrap_or_default();
        let options = RunOptions { base_dir: PathBuf::from(base_dir), ..self.options.clone() };
        let effects = traced.effects.clone();
        let mut kept = None;
        let (result, _) = self.live.with_program(effects, |program| {
            // A compiled backend follows the plan of an unoptimized run
            // (`tfc run -O0`): kernels, order and arena annotate the
            // session graph, which no pass rewrites, so the values of
            // earlier entries keep their nodes. Only entries with regions
            // to compile (training, metrics, datasets) are planned: the
            // plan covers the whole session graph, and the top-level values
            // of other entries run on the interpreter anyway (8 ms an entry
            // in a session of 600, against 0.3 ms unplanned).
            let backend = options.backend;
            if backend != crate::backend::BackendKind::Interp && has_regions(&program.effects) {
                let passes = crate::passes::Options::unoptimized(backend.target(), true);
                if let Err(d) = crate::passes::optimize(program, &passes, &mut |_, _| {}) {
                    kept = Some(memory);
                    return Err(d);
                }
            }
            let mut ex = Executor::resume(program, out, options, memory);
            let result = program.effects.iter().try_for_each(|e| {
                interrupt::check()?;
                ex.run(e)
            });
            kept = Some(ex.into_memory());
            result
        });
        self.memory = kept;
        let _ = out.flush();
        match result {
            Ok(()) => {
                self.live.commit(traced);
                Ok(())
            }
            Err(d) => {
                self.live.abandon(traced);
                Err(vec![d])
            }
        }
    }

    /// The key of `:ir`, `:opt` and `:plan` output: the text and the
    /// identities of the session bindings it can read (the graph shown
    /// contains their nodes, so a new value is a new graph). The values the
    /// key refers to come with it (see `Live::binding_key`).
    pub(super) fn exact_key(&self, text: &str) -> (String, Vec<Value>) {
        let ids = identifiers(text);
        let names: Vec<&str> = ids.iter().map(String::as_str).collect();
        let (bindings, deps) = self.live.binding_key(&names, &self.session.sources);
        (format!("{}\u{0}{bindings}", text.trim()), deps)
    }
}

/// Whether `effects` run regions, which a compiled backend compiles from
/// the program's plan: a training step, a metric, a dataset's `map`, an
/// exported function.
fn has_regions(effects: &[Effect]) -> bool {
    effects
        .iter()
        .any(|e| matches!(e, Effect::Train(_) | Effect::Reduce { .. } | Effect::Collect { .. } | Effect::Export(_)))
}

/// Whether a traced entry can run again from the cache (see the header).
fn is_cacheable(effects: &[Effect], bindings: &[(String, Value)]) -> bool {
    effects.iter().all(|e| matches!(e, Effect::Print { .. } | Effect::AssertClose { .. }))
        && bindings.iter().all(|(_, v)| is_plain(v))
}

/// The text of definitions (for `:save`), from `text`, whose position of
/// each byte of the text they were found in is `at`.
fn render(text: &str, defs: &[Definition], at: impl Fn(usize) -> usize) -> Vec<String> {
    defs.iter()
        .map(|d| {
            let mut def = String::new();
            if let Some(doc) = &d.doc {
                doc.lines().for_each(|l| def.push_str(&format!("/// {l}\n")));
            }
            def.push_str(text.get(at(d.start)..at(d.end)).unwrap_or_default());
            def
        })
        .collect()
}
