//! `tfc build --emit clif|asm`: the Cranelift IR, or the machine code, of
//! every kernel the JIT compiles, per unit, in schedule order.
//!
//! Contract: lists each `Elementwise` kernel, contraction epilogue and
//! reduction epilogue the code generator accepts, with its nodes and its
//! function (a reduction's prologue too, listed before it); kernels
//! without one (gemm alone, native transposes and reductions, the
//! interpreter) are named, so the listing accounts for every kernel. Two
//! kinds of kernel are listed with the function they fall back to: an Adam
//! update that runs as the native loop of module `adam` (its listing says
//! so) and a convolution's epilogue (bias, ReLU, a ReLU mask) that the
//! direct kernels apply themselves (`conv::PostOps`). A kernel that module
//! `wide` compiles to AVX-512 code on this machine says so: `asm` lists
//! that code, `clif` Cranelift's function, which runs where AVX-512 is
//! missing.
//!
//! Example: for `print(relu(x * 2.0))` the main unit has one elementwise
//! kernel, printed as `kernel 1 (elementwise, nodes %1 %2 %3)` followed by a
//! `function u0:0(i64) system_v { … }` with an `f32x4` loop.

use crate::ir::compiled::KernelKind;
use crate::ir::kernel_desc::PartRole;
use crate::ir::numbering::Numbering;
use crate::ir::spec::Spec;
use crate::ir::Program;
use std::fmt::Write;

/// What a listing shows of each kernel's function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// The Cranelift IR the code generator builds.
    Clif,
    /// The x64 instructions Cranelift emits for it.
    Asm,
}

/// The listing of every kernel of `p` (which must be optimized or at least
/// have kernels).
pub fn emit_kernels(p: &Program, listing: Listing) -> Result<String, String> {
    let Some(compiled) = &p.compiled else { return Err("the program has no kernels".into()) };
    let names = Numbering::of_program(p);
    let g = &p.graph;
    let mut out = String::new();
    for u in &compiled.units {
        let _ = writeln!(out, "; unit `{}`", u.name);
        let in_unit = u.kernels.iter().flat_map(|k| k.nodes.iter().copied()).collect();
        for &k in &u.order {
            let kernel = &u.kernels[k];
            let nodes: Vec<String> = kernel.nodes.iter().map(|&n| names.name(n)).collect();
            let nodes = nodes.join(" ");
            if kernel.kind == KernelKind::Reduction {
                let desc = crate::ir::kernel_desc::describe(g, kernel, &in_unit);
                if let Some(prologue) = desc.parts.iter().find(|p| p.role == PartRole::Prologue) {
                    if let Some(spec) = &prologue.spec {
                        let text = listed(spec, listing)?;
                        let note = wide_note(spec, listing);
                        let _ = writeln!(out, "; kernel {k} (reduction prologue, nodes {nodes})\n{note}{text}");
                    }
                }
            }
            let (spec, how) = match kernel.kind {
                KernelKind::Source => continue,
                KernelKind::Elementwise => (Spec::analyze(g, &kernel.nodes, &kernel.outputs), "elementwise"),
                KernelKind::Contraction if kernel.nodes.len() > 1 => {
                    let outs: Vec<_> = kernel.outputs.iter().copied().filter(|&o| o != kernel.nodes[0]).collect();
                    (Spec::analyze(g, &kernel.nodes[1..], &outs), "gemm + epilogue")
                }
                KernelKind::Contraction => (None, "gemm"),
                KernelKind::Reduction => {
                    let (_, tail) = crate::ir::kernel_desc::split_anchor(g, &kernel.nodes);
                    let outs: Vec<_> = kernel.outputs.iter().copied().filter(|o| tail.contains(o)).collect();
                    let spec = if tail.is_empty() { None } else { Spec::analyze(g, &tail, &outs) };
                    (spec, "reduction epilogue")
                }
                KernelKind::Layout => (None, "layout"),
            };
            match spec {
                Some(spec) => {
                    let text = listed(&spec, listing)?;
                    let native = match crate::backend::cpu::kernels::adam::recognize(&spec) {
                        Some(_) => {
                            "; runs as the native AVX-512 Adam loop on this machine (module `adam`); its fallback:\n"
                        }
                        None => wide_note(&spec, listing),
                    };
                    let _ = writeln!(out, "; kernel {k} ({how}, nodes {nodes})\n{native}{text}");
                }
                None => {
                    let _ = writeln!(
                        out,
                        "; kernel {k} ({how}, nodes {nodes}): no Cranelift function (gemm, native or interpreter)\n"
                    );
                }
            }
        }
    }
    Ok(out)
}

/// The line above a kernel that runs as module `wide`'s AVX-512 code on
/// this machine: its machine code follows (`Asm`), or Cranelift's IR, which
/// runs where AVX-512 is missing (`Clif`); nothing for other kernels.
fn wide_note(spec: &Spec, listing: Listing) -> &'static str {
    match (super::wide::available() && super::wide::accepts(spec), listing) {
        (true, Listing::Asm) => "; AVX-512 code of module `wide`, what this machine runs:\n",
        (true, Listing::Clif) => {
            "; runs as AVX-512 code on this machine (module `wide`, the same operations); Cranelift's:\n"
        }
        (false, _) => "",
    }
}

/// The Cranelift IR or machine code of `spec`.
fn listed(spec: &Spec, listing: Listing) -> Result<String, String> {
    crate::backend::cpu::with_compiler(|c| match listing {
        Listing::Clif => Ok(c.clif(spec)),
        Listing::Asm => c.asm(spec),
    })
}
