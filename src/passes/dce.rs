//! Dead-code elimination.
//!
//! Contract: every remaining node is needed by an output, an effect or a
//! plan (a printed value, an initial parameter, a region output, a data
//! source) — directly or through its users.
//!
//! Example: in `let a = exp(x); let b = log(x); print(a)`, the `log` node
//! (and nothing else) is removed.

use crate::diag::Diagnostic;
use crate::ir::{NodeId, Program};
use crate::passes::PassCtx;
use std::collections::HashSet;

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    let live = live_nodes(p);
    for id in p.graph.node_ids() {
        if !live.contains(&id) {
            p.graph.remove(id);
        }
    }
    Ok(())
}

/// Nodes reachable backwards from the program's roots.
pub fn live_nodes(p: &mut Program) -> HashSet<NodeId> {
    let mut live = HashSet::new();
    let mut stack = p.roots();
    while let Some(n) = stack.pop() {
        if p.graph.contains(n) && live.insert(n) {
            stack.extend(p.graph.inputs(n));
        }
    }
    live
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    let mut p = p.clone();
    let live = live_nodes(&mut p);
    match p.graph.node_ids().into_iter().find(|n| !live.contains(n)) {
        Some(dead) => Err(format!("node {} (`{}`) is dead", dead.index(), p.graph.node(dead).op.name())),
        None => Ok(()),
    }
}
