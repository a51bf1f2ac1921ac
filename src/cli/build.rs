//! `tfc build FILE`: compiles the whole program (parse, check, lower,
//! optimize) and prints a short summary, or what `--emit` asks for; `--report
//! json` prints one JSON object with per-graph numbers and stage times.

use super::BuildArgs;
use crate::backend::cpu::Listing;
use crate::diag::{Code, Diagnostic, Span};
use crate::driver::Session;
use crate::ir::Program;
use std::path::Path;

/// What `--emit` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// The syntax tree.
    Ast,
    /// The IR as traced, before optimization.
    Ir,
    /// The IR after the optimizer.
    Opt,
    /// The optimized IR as Graphviz DOT.
    Dot,
    /// The kernels, schedule and memory plan.
    Plan,
    /// The Cranelift IR of every kernel the JIT backend compiles.
    Clif,
    /// The x64 machine code Cranelift emits for every such kernel.
    Asm,
    /// The WGSL compute shaders of every kernel the GPU runs (plans for `--device gpu`).
    Wgsl,
    /// An `export fn` as an ONNX model (runs the program first for its weights; needs `-o`).
    Onnx,
    /// The `export fn`s as a C library: `-o DIR/NAME` writes NAME.o and NAME.h (runs the program first).
    Lib,
}

pub(super) fn build(session: &mut Session, args: &BuildArgs) -> Result<(), Vec<Diagnostic>> {
    let id = session.load_file(&args.file)?;
    if args.emit == Some(Emit::Ast) {
        return write(args.output.as_deref(), &crate::syntax::dump(&session.parse(id)?));
    }
    if args.emit == Some(Emit::Onnx) {
        return super::onnx::write_onnx(session, id, args);
    }
    if args.emit == Some(Emit::Lib) {
        return super::library::write_library(session, id, args);
    }
    let started = std::time::Instant::now();
    // As traced: the optimizer's first pass (`autodiff`) builds the
    // training steps' gradients, which `--emit ir` shows as requests.
    let mut program = session.trace(id)?;
    if args.emit == Some(Emit::Ir) {
        return write(args.output.as_deref(), &crate::ir::print::print_program(&program));
    }
    let unknown: Vec<&String> = args
        .disable_pass
        .iter()
        .chain(&args.dump_after)
        .filter(|n| !crate::passes::names().contains(&n.as_str()))
        .collect();
    if let Some(bad) = unknown.first() {
        return Err(vec![Diagnostic::new(Code::BadValue, format!("there is no pass named `{bad}`"))
            .help(format!("the passes are: {}", crate::passes::names().join(", ")))]);
    }
    if let Some(required) = args.disable_pass.iter().find(|n| crate::passes::REQUIRED.contains(&n.as_str())) {
        let why = match required.as_str() {
            "autocast" => "it puts a training step in the precision its program asks for",
            "all_reduce" => "it sums a fused data-parallel step's gradients over the processes",
            _ => "it builds the training steps' gradients, without which they cannot run",
        };
        return Err(vec![
            Diagnostic::new(Code::BadValue, format!("the `{required}` pass cannot be disabled")).help(why)
        ]);
    }
    // Planned for the CPU unless `--device gpu` (planning needs no GPU).
    let gpu_wanted = args.device == Some(super::DeviceArg::Gpu) || args.emit == Some(Emit::Wgsl);
    let target = match args.device {
        #[cfg(feature = "gpu")]
        _ if gpu_wanted => crate::backend::BackendKind::Gpu.target(),
        #[cfg(not(feature = "gpu"))]
        _ if gpu_wanted => {
            let gpu = super::backend_for(Some(super::DeviceArg::Gpu), crate::backend::BackendKind::Jit, false);
            return Err(vec![gpu.err().unwrap_or_else(|| Diagnostic::internal("no GPU backend"))]);
        }
        _ => crate::backend::BackendKind::Jit.target(),
    };
    let mut opts = crate::passes::Options { disabled: args.disable_pass.clone(), verify: false, target };
    if args.no_opt {
        opts.disabled = crate::passes::names().iter().map(|s| s.to_string()).collect();
    }
    let t = std::time::Instant::now();
    let mut dumps = String::new();
    let timings = crate::passes::optimize(&mut program, &opts, &mut |name, p| {
        if args.dump_after.iter().any(|d| d == name) {
            dumps.push_str(&format!("--- after {name}\n{}", crate::ir::print::print_program(p)));
            if p.compiled.is_some() {
                dumps.push_str(&crate::ir::plan_print::print_compiled(p));
            }
        }
    })
    .map_err(|d| vec![d])?;
    session.timings.optimize = t.elapsed();
    let total = started.elapsed();
    check_memory(&program, args.memory_limit)?;
    if !dumps.is_empty() {
        eprint!("{dumps}");
    }
    if args.time_passes {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        eprintln!("parse     {:8.3} ms", ms(session.timings.parse));
        eprintln!("check     {:8.3} ms", ms(session.timings.check));
        eprintln!("lower     {:8.3} ms", ms(session.timings.lower));
        for (name, d) in &timings.passes {
            eprintln!("  {name:<12}{:8.3} ms", ms(*d));
        }
        eprintln!("optimize  {:8.3} ms", ms(session.timings.optimize));
        eprintln!("total     {:8.3} ms", ms(total));
    }
    let text = match (args.report_json, args.emit) {
        (true, _) => report_json(&program, session, total),
        (false, Some(Emit::Opt)) => crate::ir::print::print_program(&program),
        (false, Some(Emit::Dot)) => crate::ir::to_dot(&program),
        (false, Some(Emit::Plan)) => crate::ir::plan_print::print_compiled(&program),
        (false, Some(form @ (Emit::Clif | Emit::Asm))) => {
            let listing = if form == Emit::Clif { Listing::Clif } else { Listing::Asm };
            crate::backend::cpu::emit_kernels(&program, listing).map_err(|why| {
                vec![Diagnostic::new(Code::BadValue, format!("cannot emit the kernels' code: {why}"))
                    .help("`--emit clif` and `--emit asm` need the optimizer's kernels; drop `-O0`")]
            })?
        }
        #[cfg(feature = "gpu")]
        (false, Some(Emit::Wgsl)) => crate::backend::gpu::kernels::listing(&program),
        (false, _) => summary(&program, &args.file, total),
    };
    write(args.output.as_deref(), &text)
}

fn summary(p: &Program, file: &Path, total: std::time::Duration) -> String {
    let mut s = format!("{}: compiled in {:.1} ms\n", file.display(), total.as_secs_f64() * 1e3);
    if let Some(c) = &p.compiled {
        for u in &c.units {
            let kernels = u.kernels.iter().filter(|k| k.kind != crate::ir::compiled::KernelKind::Source).count();
            s.push_str(&format!(
                "  {}: {} ops -> {} ops, {} kernels, arena {} bytes (naive {}, lower bound {})\n",
                u.name, u.ops_before, u.ops_after, kernels, u.arena_bytes, u.naive_bytes, u.lower_bound_bytes
            ));
        }
    } else {
        s.push_str(&format!("  {} ops (not optimized)\n", p.graph.node_count()));
    }
    s
}

fn report_json(p: &Program, session: &Session, total: std::time::Duration) -> String {
    let ms = |d: std::time::Duration| serde_json::Value::from((d.as_secs_f64() * 1e6).round() / 1e3);
    let graphs: Vec<serde_json::Value> = match &p.compiled {
        Some(c) => c
            .units
            .iter()
            .map(|u| {
                serde_json::json!({
                    "name": u.name,
                    "ops_before": u.ops_before,
                    "ops_after": u.ops_after,
                    "kernels": u.kernels.iter().filter(|k| k.kind != crate::ir::compiled::KernelKind::Source).count(),
                    "arena_bytes": u.arena_bytes,
                    "naive_bytes": u.naive_bytes,
                    "lower_bound_bytes": u.lower_bound_bytes,
                })
            })
            .collect(),
        None => vec![
            serde_json::json!({"name": "main", "ops_before": p.graph.node_count(), "ops_after": p.graph.node_count(),
            "kernels": p.graph.node_count(), "arena_bytes": 0, "naive_bytes": 0, "lower_bound_bytes": 0}),
        ],
    };
    let t = &session.timings;
    let report = serde_json::json!({
        "graphs": graphs,
        "compile_ms": {
            "parse": ms(t.parse),
            "check": ms(t.check),
            "lower": ms(t.lower),
            "optimize": ms(t.optimize),
            "codegen": 0.0,
            "total": ms(total),
        }
    });
    format!("{report}\n")
}

/// Rejects a program whose planned memory exceeds the limit, naming the
/// largest buffers and where they come from.
fn check_memory(p: &Program, limit: Option<u64>) -> Result<(), Vec<Diagnostic>> {
    let Some(c) = &p.compiled else { return Ok(()) };
    let limit = limit.unwrap_or_else(available_memory);
    let planned: u64 = c.units.iter().map(|u| u.arena_bytes as u64).sum();
    if planned <= limit {
        return Ok(());
    }
    let mut buffers: Vec<(usize, Span, String)> = c
        .units
        .iter()
        .flat_map(|u| {
            u.buffers.iter().map(|b| (b.bytes, p.graph.node(b.node).span, p.graph.node(b.node).ty.to_string()))
        })
        .collect();
    buffers.sort_by_key(|b| std::cmp::Reverse(b.0));
    let mut d = Diagnostic::new(
        Code::TooLarge,
        format!("the program plans {planned} bytes of tensor memory, more than the limit of {limit} bytes"),
    );
    for (bytes, span, ty) in buffers.into_iter().take(3) {
        d = d.label(span, format!("{ty}: {bytes} bytes"));
    }
    Err(vec![d.help("use smaller shapes or batches, or raise `--memory-limit`")])
}

/// The machine's available memory (`MemAvailable`), or no limit if unknown.
fn available_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(u64::MAX)
}

fn write(output: Option<&Path>, text: &str) -> Result<(), Vec<Diagnostic>> {
    match output {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(path) => write_atomically(path, text)
            .map_err(|e| vec![Diagnostic::new(Code::Io, format!("cannot write `{}`: {e}", path.display()))]),
    }
}

/// Writes through a temporary file and a rename, so an interrupted write
/// never leaves a truncated output behind.
pub(super) fn write_atomically(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp-tfc");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
