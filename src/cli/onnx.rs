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
use crate::backend::BackendKind;
use crate::diag::{Code, Diagnostic, FileId};
use crate::driver::Session;
use crate::io::onnx::{export::value_names, OnnxPlan};

pub(super) fn write_onnx(session: &mut Session, id: FileId, args: &BuildArgs) -> Result<(), Vec<Diagnostic>> {
    let Some(path) = args.output.as_deref() else {
        return Err(vec![Diagnostic::new(
            Code::BadValue,
            "`--emit onnx` writes a binary file: give it `-o FILE.onnx`",
        )]);
    };
    let opts = crate::passes::Options { target: BackendKind::Jit.target(), ..crate::passes::Options::default() };
    let program = session.compile(id, &opts)?;
    let export = match super::exports::chosen(&program, &args.export)?.as_slice() {
        [one] => *one,
        _ => {
            let names = super::exports::exports(&program).iter().map(|x| format!("`{}`", x.name)).collect::<Vec<_>>();
            return Err(vec![Diagnostic::new(Code::BadValue, "the program exports several functions")
                .help(format!("choose one with `--export NAME`: {}", names.join(", ")))]);
        }
    };
    let plan = OnnxPlan::new(&program.graph, export).map_err(|d| vec![d])?;
    let values = super::exports::run(session, id, &program, super::threads_or_cores(args.threads), |ex| {
        ex.demand(plan.leaves())?;
        plan.leaves().iter().map(|&n| Ok((n, ex.value(n)?.clone()))).collect::<Result<rustc_hash::FxHashMap<_, _>, _>>()
    })?;
    let bytes = plan.write(&values, &value_names(&program)).map_err(|d| vec![d])?;
    super::build::write_atomically(path, bytes)
        .map_err(|e| vec![Diagnostic::new(Code::Io, format!("cannot write `{}`: {e}", path.display()))])
}
