//! Text form of the optimizer's annotations (`tfc build --emit plan`): per
//! unit, the kernels in schedule order with their kind, device and nodes
//! (numbered like the IR printer), each `scan`'s body plan under its
//! kernel, then the memory plan.

use super::compiled::{Compiled, CompiledUnit};
use super::numbering::Numbering;
use super::program::Program;
use std::fmt::Write;

/// One line: `nodes: N, kernels: K, arena bytes: B` (kernels and arena
/// summed over units; `-` before the optimizer ran).
pub fn print_program_summary(p: &Program) -> String {
    match &p.compiled {
        None => format!("nodes: {}, kernels: -, arena bytes: -", p.graph.node_count()),
        Some(c) => format!(
            "nodes: {}, kernels: {}, arena bytes: {}",
            p.graph.node_count(),
            c.units
                .iter()
                .map(|u| u.kernels.iter().filter(|k| k.kind != super::compiled::KernelKind::Source).count())
                .sum::<usize>(),
            c.units.iter().map(|u| u.arena_bytes).sum::<usize>()
        ),
    }
}

/// The kernels and memory plan of every unit.
pub fn print_compiled(p: &Program) -> String {
    let Some(c) = &p.compiled else { return "(not optimized)\n".into() };
    let numbering = Numbering::of_program(p);
    let mut out = String::new();
    for u in &c.units {
        print_unit(&mut out, u, &numbering, &p.graph);
        if let Some(line) = step_parts(p, u, &numbering) {
            out.push_str(&line);
        }
    }
    let _: &Compiled = c;
    out
}

/// For a training step's unit, the line naming its parts: the loss, each
/// parameter's gradient (as the update reads it) and update, each
/// optimizer state's update, and the global norm when gradients are
/// clipped (`plan::StepParts`).
fn step_parts(p: &Program, u: &CompiledUnit, numbering: &Numbering) -> Option<String> {
    let plans = p.effects.iter().filter_map(|e| match e {
        super::program::Effect::Train(t) => Some(t),
        _ => None,
    });
    for t in plans {
        for ((_, region), parts) in t.steps.iter().zip(&t.parts) {
            if Some(region.id) != u.region {
                continue;
            }
            let named = |names: &mut dyn Iterator<Item = &String>, ids: &[super::graph::NodeId]| {
                names.zip(ids).map(|(n, &id)| format!("{n} {}", numbering.name(id))).collect::<Vec<_>>().join(", ")
            };
            let (params, states) = (&t.params, &t.states);
            let outputs = &region.outputs;
            let loss = outputs.first().map_or("-".into(), |&l| numbering.name(l));
            let updates = outputs.get(1..1 + params.len()).unwrap_or(&[]);
            let new_states = outputs.get(1 + params.len()..).unwrap_or(&[]);
            let new_model_states = new_states.get(states.len()..).unwrap_or(&[]);
            let norm = parts.global_norm.map(|n| format!(" (clipped by the global norm {})", numbering.name(n)));
            let mut states = match states.is_empty() {
                true => String::new(),
                false => format!("; states: {}", named(&mut states.iter().map(|(n, _)| n), new_states)),
            };
            if !t.model_states.is_empty() {
                let names = &mut t.model_states.iter().map(|(n, _)| n);
                states.push_str(&format!("; model states: {}", named(names, new_model_states)));
            }
            return Some(format!(
                "  step: loss {loss}; gradients: {}{}; updates: {}{states}\n",
                named(&mut params.iter().map(|(n, _)| n), &parts.gradients),
                norm.unwrap_or_default(),
                named(&mut params.iter().map(|(n, _)| n), updates),
            ));
        }
    }
    None
}

fn print_unit(out: &mut String, u: &CompiledUnit, numbering: &Numbering, graph: &super::graph::Graph) {
    let _ = writeln!(
        out,
        "unit {}: ops {} -> {}, kernels {}, arena {} bytes (naive {}, lower bound {})",
        u.name,
        u.ops_before,
        u.ops_after,
        u.kernels.len(),
        u.arena_bytes,
        u.naive_bytes,
        u.lower_bound_bytes
    );
    let order: Vec<usize> = if u.order.is_empty() { (0..u.kernels.len()).collect() } else { u.order.clone() };
    for (pos, &k) in order.iter().enumerate() {
        let Some(kernel) = u.kernels.get(k) else { continue };
        let nodes: Vec<String> = kernel.nodes.iter().map(|&n| numbering.name(n)).collect();
        let outs: Vec<String> = kernel.outputs.iter().map(|&n| numbering.name(n)).collect();
        let deps = u.deps.get(k).map(|d| format!(" deps={d}")).unwrap_or_default();
        let mut dtypes: Vec<String> = kernel.outputs.iter().map(|&n| graph.node(n).ty.dtype.to_string()).collect();
        dtypes.dedup();
        let dtypes = match kernel.computes_in {
            Some(wide) => format!("{} (in {wide})", dtypes.join("/")),
            None => dtypes.join("/"),
        };
        let why = match (&kernel.why_host, kernel.device) {
            (Some(w), super::compiled::Device::Host) => format!(" ({w})"),
            (Some(w), _) => format!(" (partly on Host: {w})"),
            (None, _) => String::new(),
        };
        let _ = writeln!(
            out,
            "  [{pos}] k{k} {:?} {} on {:?}{why}{deps}: [{}] -> [{}]{}",
            kernel.kind,
            dtypes,
            kernel.device,
            nodes.join(", "),
            outs.join(", "),
            description(kernel)
        );
        // A scan's body: its own plan, with its own numbering, indented.
        for plan in u.loops.iter().filter(|l| kernel.nodes.contains(&l.node)) {
            let _ = writeln!(out, "    body of {} (run once per step):", numbering.name(plan.node));
            for line in print_compiled(&plan.body).lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    for b in &u.buffers {
        let place = match b.over_input {
            Some(slot) => format!("over {}", numbering.name(slot)),
            None => format!("@{}", b.offset),
        };
        // The GPU's arena is its own (the CPU's is the default).
        let arena = if b.device == super::compiled::Device::Cpu { "" } else { " on Gpu" };
        let _ = writeln!(
            out,
            "  buffer {} {place} +{} live [{}, {}]{arena}",
            numbering.name(b.node),
            b.bytes,
            b.first,
            b.last
        );
    }
    for t in super::transfers::of(graph, u) {
        let when = match t.before < order.len() {
            true => format!("before [{}]", t.before),
            false => "after the run".to_string(),
        };
        let _ = writeln!(out, "  transfer {} to {:?} {when}", numbering.name(t.node), t.to);
    }
    if !u.memory_edges.is_empty() {
        let edges: Vec<String> = u.memory_edges.iter().map(|(a, b)| format!("k{a}->k{b}")).collect();
        let _ = writeln!(out, "  memory edges: {}", edges.join(", "));
    }
}

/// The kernel's description (`ir::kernel_desc`) after its nodes: the
/// anchor with its sizes and element type, the elementwise parts (and
/// whether a loop nest expresses each), and the fusion a pass recorded.
fn description(kernel: &super::compiled::Kernel) -> String {
    use super::kernel_desc::{Fusion, PartRole};
    let mut items = Vec::new();
    if let Some(a) = &kernel.desc.anchor {
        items.push(format!("{} {}", a.op.summary(), a.dtype));
    }
    let role = |r: PartRole| match r {
        PartRole::Body => "body",
        PartRole::Prologue => "prologue",
        PartRole::Epilogue => "epilogue",
    };
    for p in &kernel.desc.parts {
        let ops = if p.nodes.len() == 1 { "op" } else { "ops" };
        let nest = if p.spec.is_some() { "" } else { " (no loop nest)" };
        items.push(format!("{} {} {ops}{nest}", role(p.role), p.nodes.len()));
    }
    match &kernel.fusion {
        Some(Fusion::PoolIntoConv { conv, gradients, pool_only }) => {
            let maxima = match gradients.len() {
                0 => String::new(),
                1 => " (maxima for 1 gradient)".into(),
                n => format!(" (maxima for {n} gradients)"),
            };
            let stored = if *pool_only { ", result not stored" } else { "" };
            items.push(format!("fused: pool into k{conv}{maxima}{stored}"));
        }
        Some(Fusion::AdamUpdate { part }) => {
            let at = kernel.desc.parts.get(*part).map_or("?", |p| role(p.role));
            items.push(format!("fused: adam update ({at})"));
        }
        None => {}
    }
    match items.is_empty() {
        true => String::new(),
        false => format!(" | {}", items.join(", ")),
    }
}
