//! `tfc build FILE --emit ast|ir|dot [-o OUT]`.

use super::Emit;
use crate::diag::{Code, Diagnostic};
use crate::driver::Session;
use std::path::Path;

pub(super) fn build(
    session: &mut Session,
    file: &Path,
    emit: Emit,
    output: Option<&Path>,
) -> Result<(), Vec<Diagnostic>> {
    let id = session.load_file(file)?;
    let text = match emit {
        Emit::Ast => crate::syntax::dump(&session.parse(id)?),
        Emit::Ir => crate::ir::print::print_program(&session.check(id)?),
        Emit::Dot => crate::ir::dot::to_dot(&session.check(id)?),
    };
    match output {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(path) => write_atomically(path, &text)
            .map_err(|e| vec![Diagnostic::new(Code::Io, format!("cannot write `{}`: {e}", path.display()))]),
    }
}

/// Writes through a temporary file and a rename, so an interrupted write
/// never leaves a truncated output behind.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp-tfc");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
