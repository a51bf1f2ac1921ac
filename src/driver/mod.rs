//! The session: the only code that reads source files. It owns the source
//! map (user files and embedded std modules) and runs the pipeline stages
//! in order, stopping at the first stage that reports errors.

use crate::diag::{Code, Diagnostic, FileId, SourceMap};
use crate::ir::Program;
use crate::syntax::ast;
use std::path::Path;

/// Largest source file accepted (a guard against feeding tfc a data file).
const MAX_SOURCE_BYTES: u64 = 16 << 20;

#[derive(Default)]
pub struct Session {
    pub sources: SourceMap,
    /// How long the last `check` spent in each front-end stage.
    pub timings: StageTimings,
    /// The sizes an `export fn`'s open size is also traced at
    /// (`ir::plan::ExportPlan::sized`: `tfc build --emit lib --batch`).
    pub export_sizes: Vec<usize>,
    /// `--precision`: the precision every training step runs in, over what
    /// its train block says (`None`: as the program says; `Some(F32)`: no
    /// mixed precision).
    pub precision: Option<crate::ir::DType>,
    /// A data-parallel run (`tfc run --workers`, under an MPI launcher, or
    /// `--shards`): how its training steps are split.
    pub data_parallel: Option<crate::ir::plan::DataParallel>,
}

/// Wall-clock time of each compilation stage.
#[derive(Clone, Debug, Default)]
pub struct StageTimings {
    pub parse: std::time::Duration,
    pub check: std::time::Duration,
    pub lower: std::time::Duration,
    pub optimize: std::time::Duration,
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// Reads a source file: unreadable (E0001) and non-UTF-8 (E0002) files
    /// are diagnostics, not panics.
    pub fn load_file(&mut self, path: &Path) -> Result<FileId, Vec<Diagnostic>> {
        let name = path.display().to_string();
        let too_big = std::fs::metadata(path).map(|m| m.len() > MAX_SOURCE_BYTES).unwrap_or(false);
        if too_big {
            return Err(vec![Diagnostic::new(
                Code::Io,
                format!("`{name}` is larger than {} MiB; is it a source file?", MAX_SOURCE_BYTES >> 20),
            )]);
        }
        let bytes = std::fs::read(path)
            .map_err(|e| vec![Diagnostic::new(Code::Io, format!("cannot read `{name}`: {}", io_reason(&e)))])?;
        match String::from_utf8(bytes) {
            Ok(text) => Ok(self.sources.add(name, text)),
            Err(e) => {
                let at = e.utf8_error().valid_up_to();
                let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
                Err(vec![Diagnostic::new(
                    Code::NotUtf8,
                    format!("`{name}` is not valid UTF-8 (first bad byte at offset {at}, line {line})"),
                )])
            }
        }
    }

    /// Adds source text that did not come from a file (tests, the REPL).
    pub fn add_source(&mut self, name: &str, text: &str) -> FileId {
        self.sources.add(name, text)
    }

    /// Parses a loaded file; an empty program is an error (E0003).
    pub fn parse(&mut self, file: FileId) -> Result<ast::Program, Vec<Diagnostic>> {
        let program = crate::syntax::parse(self.sources.text(file), file)?;
        if program.stmts.is_empty() {
            let name = self.sources.name(file).to_string();
            return Err(vec![Diagnostic::new(Code::EmptyProgram, format!("`{name}` contains no items or statements"))
                .help("a program is a list of items and statements, e.g. `print([1.0, 2.0] * 2.0)`")]);
        }
        Ok(program)
    }

    /// Parses and traces a file into a checked IR program, its training
    /// steps in their precision (the `autocast` pass), its gradients built
    /// (the `autodiff` pass) and summed over the processes where a step
    /// asks for it (the `all_reduce` pass).
    pub fn check(&mut self, file: FileId) -> Result<Program, Vec<Diagnostic>> {
        let mut program = self.trace(file)?;
        // The lowering ends with the `autocast` and `autodiff` passes, so
        // that the program runs without the optimizer; `trace` leaves the
        // requests in.
        let ctx = crate::passes::PassCtx::default();
        crate::passes::autocast::run(&mut program, &ctx).map_err(|d| vec![d])?;
        crate::autodiff::expand_requests(&mut program).map_err(|d| vec![d])?;
        crate::passes::all_reduce::run(&mut program, &ctx).map_err(|d| vec![d])?;
        Ok(program)
    }

    /// `check` without its last step: the program as traced, with the
    /// training steps' gradient requests in it (`Op::Gradient`; `tfc build
    /// --emit ir`, the `autodiff` pass's snapshots).
    ///
    /// Tracing runs on its own thread with a large stack: the tracer recurses
    /// once per nested expression and per inlined call (about 20–45 KiB per
    /// inlined call in debug builds), so the 200 nested calls it allows
    /// before E0102 would overflow a 2 MiB thread (a test thread, an
    /// embedder's worker) instead of reporting E0102. Untouched stack pages
    /// cost no memory.
    pub fn trace(&mut self, file: FileId) -> Result<Program, Vec<Diagnostic>> {
        const TRACE_STACK_BYTES: usize = 64 << 20;
        let t0 = std::time::Instant::now();
        let ast = self.parse(file)?;
        let t1 = std::time::Instant::now();
        crate::sema::resolve(&ast)?;
        let t2 = std::time::Instant::now();
        self.timings.parse = t1 - t0;
        self.timings.check = t2 - t1;
        let base = self.base_dir(file);
        let options = crate::trace::TraceOptions {
            export_sizes: self.export_sizes.clone(),
            precision: self.precision,
            data_parallel: self.data_parallel,
        };
        let sources = &mut self.sources;
        let on_thread = std::thread::scope(|scope| {
            let spawned = std::thread::Builder::new()
                .name("tfc-trace".into())
                .stack_size(TRACE_STACK_BYTES)
                .spawn_scoped(scope, || crate::trace::trace_program_in(&ast, sources, &base, &options));
            spawned.ok().map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        });
        let result = match on_thread {
            Some(result) => result,
            // No thread could be started: trace on this one.
            None => crate::trace::trace_program_in(&ast, &mut self.sources, &base, &options),
        };
        self.timings.lower = t2.elapsed();
        result
    }
}

impl Session {
    /// Checks a file and runs the graph optimizer on it.
    pub fn compile(&mut self, file: FileId, opts: &crate::passes::Options) -> Result<Program, Vec<Diagnostic>> {
        let mut program = self.check(file)?;
        let t = std::time::Instant::now();
        crate::passes::optimize(&mut program, opts, &mut |_, _| {}).map_err(|d| vec![d])?;
        self.timings.optimize = t.elapsed();
        Ok(program)
    }

    /// The directory relative paths in `file` resolve against (§8): the
    /// file's own directory.
    pub fn base_dir(&self, file: FileId) -> std::path::PathBuf {
        Path::new(self.sources.name(file)).parent().map(Path::to_path_buf).unwrap_or_default()
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
