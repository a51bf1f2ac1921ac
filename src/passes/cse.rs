//! Common-subexpression elimination.
//!
//! Contract: no two nodes share (op, attributes, operands) — after the pass,
//! each computation exists once. Random ops with equal seeds and types are
//! equal values (the generator is counter-based), so they merge too; slots
//! never merge with each other (each is a distinct runtime input).
//!
//! Example: `softmax(x) + softmax(x)` computes `exp(x - max(x))` once.

use crate::diag::Diagnostic;
use crate::ir::Literal;
use crate::ir::{NodeId, Op, Program};
use crate::passes::PassCtx;
use rustc_hash::FxHashMap as HashMap;

/// A node's identity for merging: op text (with attributes), a constant's
/// values as bits, result type and operands.
#[derive(PartialEq, Eq, Hash)]
struct Key {
    op: String,
    /// A constant's values, bit for bit (formatting them as text cost a
    /// fifth of the transformer's optimizer).
    values: Vec<u64>,
    ty: String,
    inputs: Vec<usize>,
}

fn key(p: &Program, id: NodeId) -> Key {
    let node = p.graph.node(id);
    let inputs: Vec<usize> = p.graph.inputs(id).iter().map(|i| i.index()).collect();
    let (op, values) = match &node.op {
        Op::Constant { value, ty } => {
            let values = match value {
                Literal::Float(v) => v.iter().map(|x| x.to_bits()).collect(),
                Literal::Int(v) => v.iter().map(|&x| x as u64).collect(),
                Literal::Bool(v) => v.iter().map(|&x| u64::from(x)).collect(),
            };
            let kind = match value {
                Literal::Float(_) => "float",
                Literal::Int(_) => "int",
                Literal::Bool(_) => "bool",
            };
            (format!("constant {kind} {ty}"), values)
        }
        op => (format!("{op:?}"), Vec::new()),
    };
    Key { op, values, ty: node.ty.to_string(), inputs }
}

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    let mut seen: HashMap<Key, NodeId> = HashMap::default();
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
    let mut seen: HashMap<Key, NodeId> = HashMap::default();
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
