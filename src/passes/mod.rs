//! The ahead-of-time graph optimizer: named passes run in a fixed order
//! over the whole program (every statement's values and every training
//! step at once).
//!
//! Contract: every pass is a function `fn(&mut Program, &PassCtx) ->
//! Result<(), Diagnostic>` in its own file, whose `//!` header states what it
//! does, its postcondition and an example. After every pass, in debug builds
//! and tests, the IR verifier and the pass's postcondition run; a violation
//! is an internal-error diagnostic naming the pass and the node. The
//! optimized program computes the same values as the unoptimized one (the
//! reference interpreter runs both in the differential tests).
//!
//! Order: `autocast → autodiff → all_reduce → vectorize_maps → const_fold → simplify → cse → dce → pool_mask → splat_copies →
//! fuse → partition → conv_pool → adam_update → schedule → memory_plan`. `autocast` (a training step's mixed
//! precision), `autodiff` and `all_reduce` (a fused data-parallel step's gradient sums) complete the lowering (they
//! run even on an unoptimized program: `Session::check`, and cannot be disabled). The rewriting passes change the graph;
//! the last six annotate it (`Program::compiled`) with kernels (described as data, `ir::kernel_desc`), devices, the
//! named fusions the target runs, an order and a memory plan that backends follow.

pub mod autocast;
pub mod autodiff;
pub mod adam_update;
pub mod all_reduce;
pub mod const_fold;
pub mod conv_pool;
pub mod cse;
pub mod dce;
pub mod fuse;
pub mod loops;
pub mod memory_plan;
pub mod partition;
pub mod pool_mask;
pub mod schedule;
pub mod simplify;
pub mod splat_copies;
pub mod units;
pub mod vectorize_maps;

use crate::diag::{Code, Diagnostic};
use crate::ir::Program;
use std::time::{Duration, Instant};

/// What a pass may consult besides the program.
#[derive(Clone, Debug, Default)]
pub struct PassCtx {
    /// Check the verifier and postconditions after every pass.
    pub verify: bool,
    /// The machine the plan is for (`partition` asks it where kernels run).
    pub target: crate::ir::target::Target,
}

/// A pass: its name (also the `--dump-after`/`--disable-pass` value and the
/// snapshot folder), the transformation and its postcondition.
pub struct Pass {
    pub name: &'static str,
    pub run: fn(&mut Program, &PassCtx) -> Result<(), Diagnostic>,
    /// Checks the pass's contract on its output; `Err` names the offending node.
    pub postcondition: fn(&Program) -> Result<(), String>,
}

/// Every pass, in pipeline order.
pub const PIPELINE: &[Pass] = &[
    Pass { name: "autocast", run: autocast::run, postcondition: autocast::postcondition },
    Pass { name: "autodiff", run: autodiff::run, postcondition: autodiff::postcondition },
    Pass { name: "all_reduce", run: all_reduce::run, postcondition: all_reduce::postcondition },
    Pass { name: "vectorize_maps", run: vectorize_maps::run, postcondition: vectorize_maps::postcondition },
    Pass { name: "const_fold", run: const_fold::run, postcondition: const_fold::postcondition },
    Pass { name: "simplify", run: simplify::run, postcondition: simplify::postcondition },
    Pass { name: "cse", run: cse::run, postcondition: cse::postcondition },
    Pass { name: "dce", run: dce::run, postcondition: dce::postcondition },
    Pass { name: "pool_mask", run: pool_mask::run, postcondition: pool_mask::postcondition },
    Pass { name: "splat_copies", run: splat_copies::run, postcondition: splat_copies::postcondition },
    Pass { name: "fuse", run: fuse::run, postcondition: fuse::postcondition },
    Pass { name: "partition", run: partition::run, postcondition: partition::postcondition },
    Pass { name: "conv_pool", run: conv_pool::run, postcondition: conv_pool::postcondition },
    Pass { name: "adam_update", run: adam_update::run, postcondition: adam_update::postcondition },
    Pass { name: "schedule", run: schedule::run, postcondition: schedule::postcondition },
    Pass { name: "memory_plan", run: memory_plan::run, postcondition: memory_plan::postcondition },
];

/// The passes that always run: they complete the lowering (a step runs in
/// the precision its program asks for, no program runs with gradient
/// requests in it, and a fused data-parallel step sums its gradients over
/// the processes). The last of them ends the lowering.
pub const REQUIRED: &[&str] = &["autocast", "autodiff", "all_reduce"];

/// Options of one optimizer run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Pass names to skip.
    pub disabled: Vec<String>,
    /// Verify after every pass (always on in debug builds and tests).
    pub verify: bool,
    /// The machine to plan for (default: one that runs every kernel).
    pub target: crate::ir::target::Target,
}

impl Options {
    /// An unoptimized run's passes for `target` (`tfc run -O0`, the REPL):
    /// the lowering, and for a compiled backend (`compiled`) the passes that
    /// only annotate the program with the kernels, order and memory plan
    /// its backend follows; none that rewrites the graph.
    pub fn unoptimized(target: crate::ir::target::Target, compiled: bool) -> Options {
        let keep: &[&str] = if compiled { &["partition", "schedule", "memory_plan"] } else { &[] };
        let disabled = names().into_iter().filter(|n| !keep.contains(n)).map(String::from).collect();
        Options { disabled, target, ..Options::default() }
    }
}

/// How long each pass took.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    pub passes: Vec<(&'static str, Duration)>,
}

/// Runs the pipeline; `after` is called with each pass's name and output
/// (for `--dump-after`).
pub fn optimize(p: &mut Program, opts: &Options, after: &mut dyn FnMut(&str, &Program)) -> Result<Timings, Diagnostic> {
    let ctx = PassCtx { verify: opts.verify || cfg!(debug_assertions), target: opts.target };
    let mut timings = Timings::default();
    // Ops per unit before any rewrite (after the lowering's `autodiff`,
    // which runs first), for the report (`ops_before`).
    let mut before: Vec<(String, usize)> = Vec::new();
    for pass in PIPELINE {
        // Between passes is a safe point for Ctrl-C (E0403).
        crate::interrupt::check()?;
        if opts.disabled.iter().any(|d| d == pass.name) && !REQUIRED.contains(&pass.name) {
            continue;
        }
        let start = Instant::now();
        (pass.run)(p, &ctx).map_err(|d| d.note(format!("in the `{}` pass", pass.name)))?;
        timings.passes.push((pass.name, start.elapsed()));
        if Some(&pass.name) == REQUIRED.last() {
            before = units::units(p).into_iter().map(|u| (u.name, u.nodes.len())).collect();
        }
        if let Some(c) = p.compiled.as_mut() {
            for u in &mut c.units {
                u.ops_before = before.iter().find(|(n, _)| *n == u.name).map(|(_, n)| *n).unwrap_or(u.ops_after);
            }
        }
        if ctx.verify {
            check(pass, p)?;
        }
        after(pass.name, p);
    }
    Ok(timings)
}

/// The verifier and the pass's postcondition on its output.
fn check(pass: &Pass, p: &Program) -> Result<(), Diagnostic> {
    crate::ir::verify_program(p).map_err(|d| d.note(format!("the IR is invalid after the `{}` pass", pass.name)))?;
    (pass.postcondition)(p).map_err(|why| {
        Diagnostic::new(Code::Internal, format!("the `{}` pass broke its contract: {why}", pass.name))
            .help("this is a bug in tfc; `--disable-pass` skips the pass meanwhile")
    })
}

/// The names of all passes, for the command line.
pub fn names() -> Vec<&'static str> {
    PIPELINE.iter().map(|p| p.name).collect()
}
