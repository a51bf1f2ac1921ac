//! `tfc build FILE --emit onnx -o model.onnx`: writes one of the program's
//! `export fn`s as an ONNX model.
//!
//! Contract: the export is chosen (`--export NAME`, or the only one) and
//! checked for an ONNX form before anything runs; then the program runs as
//! `tfc run` would (its output on stdout), so the model's weights are the
//! ones it ends with; then the file is written atomically (no partial file
//! on any error). Every problem is a diagnostic and a non-zero exit.
//!
//! Example: `tfc build mnist.tfl --emit onnx -o mnist.onnx` trains the
//! program's model and writes `export fn predict(x: f32[64, 784])` with the
//! trained weights as initializers.

use super::BuildArgs;
use crate::diag::{Code, Diagnostic, FileId};
use crate::driver::Session;
use crate::io::onnx::{export::value_names, OnnxPlan};
use crate::ir::plan::ExportPlan;
use crate::ir::Effect;
use std::io::Write;

pub(super) fn write_onnx(session: &mut Session, id: FileId, args: &BuildArgs) -> Result<(), Vec<Diagnostic>> {
    let Some(path) = args.output.as_deref() else {
        return Err(vec![Diagnostic::new(
            Code::BadValue,
            "`--emit onnx` writes a binary file: give it `-o FILE.onnx`",
        )]);
    };
    let backend = crate::backend::BackendKind::Jit;
    let opts = crate::passes::Options { target: backend.target(), ..crate::passes::Options::default() };
    let program = session.compile(id, &opts)?;
    let export = choose(&program, args.export.as_deref())?;
    let plan = OnnxPlan::new(&program.graph, export).map_err(|d| vec![d])?;
    let options = crate::runtime::exec::RunOptions {
        base_dir: session.base_dir(id),
        backend,
        threads: super::threads_or_cores(args.threads),
        ..Default::default()
    };
    crate::interrupt::install();
    let stdout = std::io::stdout();
    let mut out = std::io::LineWriter::new(stdout.lock());
    let values = {
        let mut ex = crate::runtime::exec::Executor::new(&program, &mut out, options).map_err(|d| vec![d])?;
        for effect in &program.effects {
            crate::interrupt::check().map_err(|d| vec![d])?;
            ex.run_effect(effect).map_err(|d| vec![d])?;
        }
        ex.demand(plan.leaves()).map_err(|d| vec![d])?;
        plan.leaves()
            .iter()
            .map(|&n| Ok((n, ex.value(n)?.clone())))
            .collect::<Result<rustc_hash::FxHashMap<_, _>, Diagnostic>>()
            .map_err(|d| vec![d])?
    };
    let _ = out.flush();
    let bytes = plan.write(&values, &value_names(&program)).map_err(|d| vec![d])?;
    super::build::write_atomically(path, bytes)
        .map_err(|e| vec![Diagnostic::new(Code::Io, format!("cannot write `{}`: {e}", path.display()))])
}

/// The export `--export` names, or the program's only one.
fn choose<'p>(program: &'p crate::ir::Program, name: Option<&str>) -> Result<&'p ExportPlan, Vec<Diagnostic>> {
    let exports: Vec<&ExportPlan> = program
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Export(x) => Some(x.as_ref()),
            _ => None,
        })
        .collect();
    let names = || exports.iter().map(|x| format!("`{}`", x.name)).collect::<Vec<_>>().join(", ");
    match (name, exports.as_slice()) {
        (_, []) => Err(vec![Diagnostic::new(Code::ExportType, "the program exports no function")
            .help("mark the function to write with `export`, e.g. `export fn predict(x: f32[64, 784]) = net(x)`")]),
        (None, [only]) => Ok(only),
        (None, _) => Err(vec![Diagnostic::new(Code::BadValue, "the program exports several functions")
            .help(format!("choose one with `--export NAME`: {}", names()))]),
        (Some(n), _) => exports.iter().copied().find(|x| x.name == n).ok_or_else(|| {
            vec![Diagnostic::new(Code::BadValue, format!("the program exports no function `{n}`"))
                .help(format!("it exports {}", names()))]
        }),
    }
}
