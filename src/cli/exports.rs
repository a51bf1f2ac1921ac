//! What `tfc build --emit onnx` and `--emit lib` share: choosing the
//! program's `export fn`s, and running the program (as `tfc run` would,
//! its output on stdout) so that the exports capture the weights it ends
//! with.
//!
//! Contract: [`chosen`] returns the exports `--export` names (all of them
//! without it), or a diagnostic listing the program's exports; [`run`]
//! performs every effect in order, then hands the executor to `finish`.
//!
//! Example: `run(session, id, &program, threads, |ex| ex.compile_region(r))`.

use crate::diag::{Code, Diagnostic, FileId};
use crate::driver::Session;
use crate::ir::plan::ExportPlan;
use crate::ir::{Effect, Program};
use crate::runtime::exec::Executor;
use std::io::Write;

/// The program's exports, in order.
pub(super) fn exports(program: &Program) -> Vec<&ExportPlan> {
    program
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Export(x) => Some(x.as_ref()),
            _ => None,
        })
        .collect()
}

/// The exports named in `names` (every export when empty); none at all is
/// E0340, an unknown name E0003.
pub(super) fn chosen<'p>(program: &'p Program, names: &[String]) -> Result<Vec<&'p ExportPlan>, Vec<Diagnostic>> {
    let all = exports(program);
    let listed = || all.iter().map(|x| format!("`{}`", x.name)).collect::<Vec<_>>().join(", ");
    if all.is_empty() {
        return Err(vec![Diagnostic::new(Code::ExportType, "the program exports no function")
            .help("mark the function to write with `export`, e.g. `export fn predict(x: f32[64, 784]) = net(x)`")]);
    }
    if names.is_empty() {
        return Ok(all);
    }
    names
        .iter()
        .map(|n| {
            all.iter().copied().find(|x| &x.name == n).ok_or_else(|| {
                vec![Diagnostic::new(Code::BadValue, format!("the program exports no function `{n}`"))
                    .help(format!("it exports {}", listed()))]
            })
        })
        .collect()
}

/// Runs `program` (every effect, in order) with `threads` workers, then
/// `finish` with its executor.
pub(super) fn run<T>(
    session: &Session,
    id: FileId,
    program: &Program,
    threads: usize,
    finish: impl FnOnce(&mut Executor) -> Result<T, Diagnostic>,
) -> Result<T, Vec<Diagnostic>> {
    let options = crate::runtime::exec::RunOptions {
        base_dir: session.base_dir(id),
        backend: crate::backend::BackendKind::Jit,
        threads,
        ..Default::default()
    };
    crate::interrupt::install();
    let stdout = std::io::stdout();
    let mut out = std::io::LineWriter::new(stdout.lock());
    let result = {
        let mut ex = Executor::new(program, &mut out, options).map_err(|d| vec![d])?;
        for effect in &program.effects {
            crate::interrupt::check().map_err(|d| vec![d])?;
            ex.run_effect(effect).map_err(|d| vec![d])?;
        }
        finish(&mut ex).map_err(|d| vec![d])
    };
    let _ = out.flush();
    result
}
