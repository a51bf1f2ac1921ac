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
//! Compiled entries are cached by their text and the identity of every
//! session binding they read (directly or through the bodies of user
//! functions and models): nodes are immutable, so the same text over the
//! same bindings traces to the same graph and the cached effects can run
//! again without parsing or tracing. Only entries whose effects are `print`
//! and `assert_close` and whose bindings are plain values are cached (a
//! model is changed in place by `train`, so re-binding it is not a replay).
//!
//! Example: `let x = [1.0, 2.0]` then `x * 2.0` prints `[2, 4]`; a second
//! `x * 2.0` is a cache hit (`Timing::compile == None`).

use crate::diag::{Diagnostic, FileId, SourceMap};
use crate::driver::Session;
use crate::ir::{Effect, Program};
use crate::runtime::exec::{Executor, Memory, RunOptions};
use crate::runtime::interrupt;
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
}

/// A compiled entry: its effects, the values it binds, its definitions'
/// text (for `:save`), and the values its key refers to (kept alive).
struct Cached {
    effects: Vec<Effect>,
    bindings: Vec<(String, Value)>,
    defs: Vec<String>,
    _deps: Vec<Value>,
}

/// How long an entry took to compile (`None`: a cache hit) and to run.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub compile: Option<Duration>,
    pub run: Duration,
}

impl Repl {
    /// A session with the prelude loaded.
    pub fn new() -> Result<Repl, Vec<Diagnostic>> {
        let mut session = Session::new();
        let live = Live::new(&mut session.sources)?;
        Ok(Repl {
            session,
            live,
            memory: Some(Memory::default()),
            cache: HashMap::new(),
            compiled: HashMap::new(),
            defs: Vec::new(),
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
        let (key, deps) = self.cache_key(text);
        if let Some(c) = self.cache.get(&key) {
            let traced = Traced::replay(&self.live, c.effects.clone(), &c.bindings);
            let defs = c.defs.clone();
            let ran = Instant::now();
            self.execute(traced, Path::new(""), out)?;
            self.defs.extend(defs);
            return Ok(Timing { compile: None, run: ran.elapsed() });
        }
        let file = self.session.add_source(name, text);
        let stmts = self.parse(file)?;
        let traced = self.live.trace(&stmts, &mut self.session.sources, Path::new(""), true)?;
        let compile = started.elapsed();
        let bindings = traced.bindings();
        let cacheable = traced.effects.iter().all(|e| matches!(e, Effect::Print { .. } | Effect::AssertClose { .. }))
            && bindings.iter().all(|(_, v)| is_plain(v));
        let defs = self.definitions(file, &stmts);
        let record =
            cacheable.then(|| Cached { effects: traced.effects.clone(), bindings, defs: defs.clone(), _deps: deps });
        let ran = Instant::now();
        self.execute(traced, Path::new(""), out)?;
        let run = ran.elapsed();
        if let Some(c) = record {
            if self.cache.len() >= MAX_CACHED {
                self.cache.clear();
            }
            self.cache.insert(key, c);
        }
        self.defs.extend(defs);
        Ok(Timing { compile: Some(compile), run })
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
        let defs = self.definitions(file, &stmts);
        self.defs.extend(defs);
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
        let known = self.live.session_names();
        crate::sema::resolve_in(&program, &known)?;
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
        let options = RunOptions { base_dir: PathBuf::from(base_dir), ..RunOptions::default() };
        let effects = traced.effects.clone();
        let mut kept = None;
        let (result, _) = self.live.with_program(effects, |program| {
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

    /// The text of the entry's items and bindings (not its bare
    /// expressions), for `:save`.
    fn definitions(&self, file: FileId, stmts: &[ast::Stmt]) -> Vec<String> {
        let text = self.session.sources.text(file);
        stmts
            .iter()
            .filter(|s| !matches!(s.kind, ast::StmtKind::Expr(_)))
            .map(|s| {
                let mut def = String::new();
                if let Some(doc) = &s.doc {
                    doc.lines().for_each(|l| def.push_str(&format!("/// {l}\n")));
                }
                def.push_str(text.get(s.span.start..s.span.end).unwrap_or_default());
                def
            })
            .collect()
    }

    /// The cache key of an entry: its text and the identities of the
    /// session bindings it can read.
    /// The values the key refers to come with it (see `Live::binding_key`).
    pub(super) fn cache_key(&self, text: &str) -> (String, Vec<Value>) {
        let ids = identifiers(text);
        let names: Vec<&str> = ids.iter().map(String::as_str).collect();
        let (bindings, deps) = self.live.binding_key(&names, &self.session.sources);
        (format!("{}\u{0}{bindings}", text.trim()), deps)
    }
}
