//! Common-subexpression elimination.
//!
//! Contract: no two nodes share (op, attributes, operands) — after the pass,
//! each computation exists once. Random ops with equal seeds and types are
//! equal values (the generator is counter-based), so they merge too; slots
//! never merge with each other (each is a distinct runtime input).
//!
//! A scan and its twin that also saves its carries (the forward loop of
//! its gradient, `autodiff`, with any residuals it stacks after the scan's
//! outputs) over the same operands merge too: the scan's readers read the
//! twin's leading part.
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
    share_scans(p);
    Ok(())
}

/// A scan whose twin saving its carries (`ScanBody::saving`, the forward
/// of its gradient, which may stack residuals after the scan's own
/// outputs) runs over the same operands is read as the twin's leading
/// part, so the loop runs once.
fn share_scans(p: &mut Program) {
    let scans: Vec<NodeId> =
        p.graph.topo_order().into_iter().filter(|&n| matches!(p.graph.node(n).op, Op::Scan(_))).collect();
    for &s in &scans {
        let Op::Scan(body) = &p.graph.node(s).op else { continue };
        if body.saves_carries {
            continue;
        }
        let (saving, inputs) = (body.saving(), p.graph.inputs(s));
        let outputs = body.graph.outputs.len();
        let twin = scans.iter().copied().find(|&t| {
            t != s
                && p.graph.contains(t)
                && matches!(&p.graph.node(t).op, Op::Scan(b) if saves_the_same(b, &saving, outputs))
                && p.graph.inputs(t) == inputs
        });
        let Some(twin) = twin else { continue };
        let node = p.graph.node(s);
        let (ty, span) = (node.ty.clone(), node.span);
        let slice = Op::Slice { start: vec![0], step: vec![1], len: vec![ty.numel()] };
        let lead = p.graph.add(slice, &[twin], ty, span);
        p.replace_uses(s, lead);
        p.graph.remove(s);
    }
}

/// Whether `twin` is `saving` with more per-step outputs after its first
/// `outputs` (the residuals a gradient saves): its packed value then starts
/// with the final carries and stacked outputs of the loop `saving` saves.
fn saves_the_same(twin: &crate::ir::scan::ScanBody, saving: &crate::ir::scan::ScanBody, outputs: usize) -> bool {
    if twin.graph.outputs.len() < outputs || !twin.saves_carries {
        return false;
    }
    let mut lead = twin.clone();
    lead.graph.outputs.truncate(outputs);
    lead == *saving
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
