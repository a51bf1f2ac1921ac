//! `tfc build FILE --emit lib -o DIR/NAME`: writes the program's `export
//! fn`s as an ahead-of-time C library, `DIR/NAME.o` and `DIR/NAME.h`
//! (module `backend::cpu::library`).
//!
//! Contract: everything that can be checked before the program runs is:
//! the output name (a C identifier), the exports (`--export NAME`,
//! repeatable; all by default), their types (`f32` tensors only), an open
//! size (the batch `B` of `f32[B, 784]`) needs `--batch N,…` and becomes
//! one function per size (`NAME_predict_b64`); a fixed export is one
//! function (`NAME_predict`). Then the program runs as `tfc run` would, so
//! the library holds the weights it ends with; each function is prepared
//! as the in-process call is (same kernels, same bits) and written; a step
//! the library cannot run is E0345, naming it. Both files are written
//! atomically, and only when everything succeeded.
//!
//! Example: `tfc build mnist.tfl --emit lib --batch 1,64 -o out/mnist`
//! trains the model and writes `mnist_predict_b1` and `mnist_predict_b64`.

use super::BuildArgs;
use crate::backend::cpu::library::{header::header, Function, Library};
use crate::backend::BackendKind;
use crate::diag::{Code, Diagnostic, FileId};
use crate::driver::Session;
use crate::ir::plan::{ExportPlan, Region};
use crate::ir::DType;
use std::path::Path;

pub(super) fn write_library(session: &mut Session, id: FileId, args: &BuildArgs) -> Result<(), Vec<Diagnostic>> {
    let Some(prefix) = args.output.as_deref() else {
        return Err(vec![Diagnostic::new(
            Code::BadValue,
            "`--emit lib` writes an object file and a header: give their path and name with `-o DIR/NAME`",
        )]);
    };
    let name = library_name(prefix)?;
    if let Some(zero) = args.batch.iter().find(|&&n| n == 0) {
        return Err(vec![Diagnostic::new(Code::BadValue, format!("`--batch {zero}`: a batch holds at least one row"))]);
    }
    session.export_sizes = args.batch.clone();
    let opts = crate::passes::Options { target: BackendKind::Jit.target(), ..crate::passes::Options::default() };
    let program = session.compile(id, &opts)?;
    let source = args.file.display().to_string();
    // Every function's name, region and declaration, checked before the run.
    let mut planned: Vec<(&Region, Function)> = Vec::new();
    for export in super::exports::chosen(&program, &args.export)? {
        for (c_name, region) in functions(&name, export, &args.batch)? {
            let function = declaration(&program, export, region, c_name, &source)?;
            planned.push((region, function));
        }
    }
    let threads = super::threads_or_cores(args.threads);
    let (object, text) = super::exports::run(session, id, &program, threads, |ex| {
        let mut lib = Library::new(&name)?;
        for (region, function) in planned {
            let compiled = ex.compile_region(region)?;
            let unit =
                compiled.unit().as_cpu().ok_or_else(|| Diagnostic::internal("the library's unit is not the CPU's"))?;
            lib.add(unit, function)?;
        }
        let text = header(&name, &source, lib.functions());
        Ok((lib.finish()?, text))
    })?;
    let write = |ext: &str, bytes: &[u8]| {
        let path = prefix.with_file_name(format!("{name}.{ext}"));
        super::build::write_atomically(&path, bytes)
            .map_err(|e| vec![Diagnostic::new(Code::Io, format!("cannot write `{}`: {e}", path.display()))])
    };
    write("o", &object)?;
    write("h", text.as_bytes())
}

/// The library's name: the last part of `-o DIR/NAME`, which prefixes its
/// C names, so a C identifier.
fn library_name(prefix: &Path) -> Result<String, Vec<Diagnostic>> {
    let name = prefix.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let ident = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident {
        return Err(vec![Diagnostic::new(
            Code::BadValue,
            format!("`-o {}`: the library's name `{name}` must be a C identifier", prefix.display()),
        )
        .help("it names NAME.o and NAME.h and prefixes the functions, e.g. `-o out/mnist` gives `mnist_predict`")]);
    }
    Ok(name.to_string())
}

/// The C names and regions of `export`: itself when its sizes are fixed,
/// else one per `--batch` size.
fn functions<'p>(
    lib: &str,
    export: &'p ExportPlan,
    batch: &[usize],
) -> Result<Vec<(String, &'p Region)>, Vec<Diagnostic>> {
    let base = format!("{lib}_{}", export.name);
    match &export.symbolic {
        None => Ok(vec![(base, &export.region)]),
        Some((size, _)) if batch.is_empty() => Err(vec![Diagnostic::new(
            Code::ExportType,
            format!("exported `{}` leaves `{size}` open; a library function has fixed sizes", export.name),
        )
        .label(export.span, "exported here")
        .help(format!("give the sizes to compile it at, e.g. `--batch 1,64` (one function `{base}_bN` each)"))]),
        Some(_) => Ok(export.sized.iter().map(|(n, r)| (format!("{base}_b{n}"), r)).collect()),
    }
}

/// The declaration of `region` as `c_name`: its parameters and results,
/// which must be `f32` tensors.
fn declaration(
    program: &crate::ir::Program,
    export: &ExportPlan,
    region: &Region,
    c_name: String,
    source: &str,
) -> Result<Function, Vec<Diagnostic>> {
    let results: Vec<_> = region.outputs.iter().map(|&n| program.graph.node(n).ty.clone()).collect();
    let params: Vec<_> = export.params.iter().cloned().zip(region.inputs.iter().map(|(_, ty)| ty.clone())).collect();
    if let Some(ty) = params.iter().map(|(_, ty)| ty).chain(&results).find(|ty| ty.dtype != DType::F32) {
        return Err(vec![Diagnostic::new(
            Code::LibraryExport,
            format!(
                "exported `{}` takes or gives a `{ty}`; library functions take and give `f32` tensors",
                export.name
            ),
        )
        .label(export.span, "exported here")
        .help("cast to `f32` inside the exported function")]);
    }
    Ok(Function {
        name: c_name,
        params,
        results,
        arena_bytes: 0,
        about: format!("`export fn {}` of {source}", export.name),
    })
}
