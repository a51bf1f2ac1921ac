//! Common-subexpression elimination.
//!
//! Contract: no two nodes share (op, attributes, operands) — after the pass,
//! each computation exists once. Random ops with equal seeds and types are
//! equal values (the generator is counter-based), so they merge too; slots
//! never merge with each other (each is a distinct runtime input).
//!
//! Example: `softmax(x) + softmax(x)` computes `exp(x - max(x))` once.

use crate::diag::Diagnostic;
use crate::ir::{NodeId, Op, Program};
use crate::passes::PassCtx;
use std::collections::HashMap;

/// A node's identity for merging: op text (with attributes and literal
/// values), result type and operands.
fn key(p: &Program, id: NodeId) -> String {
    let node = p.graph.node(id);
    let inputs: Vec<usize> = p.graph.inputs(id).iter().map(|i| i.index()).collect();
    format!("{:?}|{}|{inputs:?}", node.op, node.ty)
}

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    let mut seen: HashMap<String, NodeId> = HashMap::new();
    for id in p.graph.topo_order() {
        if matches!(p.graph.node(id).op, Op::Slot { .. }) {
            continue;
        }
        let k = key(p, id);
        match seen.get(&k) {
            Some(&first) => {
                p.replace_uses(id, first);
                p.graph.remove(id);
            }
            None => {
                seen.insert(k, id);
            }
        }
    }
    Ok(())
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    let mut seen: HashMap<String, NodeId> = HashMap::new();
    for id in p.graph.node_ids() {
        if matches!(p.graph.node(id).op, Op::Slot { .. }) {
            continue;
        }
        if let Some(first) = seen.insert(key(p, id), id) {
            return Err(format!(
                "nodes {} and {} compute the same `{}`",
                first.index(),
                id.index(),
                p.graph.node(id).op.name()
            ));
        }
    }
    Ok(())
}
