//! The IR verifier: checks the invariants every pass must preserve, so a
//! broken pass is caught where it broke the graph, not three passes later.
//!
//! Contract: `verify` returns `Ok` exactly when
//! 1. every output is a node of the graph (rule `outputs exist`);
//! 2. the graph is acyclic (rule `acyclic`);
//! 3. each node's operand edges carry positions `0..n`, each once (rule
//!    `operand positions`);
//! 4. each node's recorded type equals `infer(op, operand types)` (rule
//!    `node type`).
//!
//! Otherwise it returns one `Code::Internal` diagnostic, labelled with the
//! offending node's span, whose message names the rule and the node in its
//! printed form, e.g.
//!
//! ```text
//! IR verifier: node type: `%2 = add %0, %1 : f32[3]` records f32[3], but infer gives f32[2]
//! ```
//!
//! Checks run in the order above, and per node in `Numbering` order, so the
//! first problem reported is deterministic.

use super::graph::{Graph, NodeId};
use super::infer::infer;
use super::numbering::{effect_operands, Numbering};
use super::print::print_node;
use super::program::Program;
use super::types::TensorType;
use crate::diag::{Code, Diagnostic};
use petgraph::Direction;
use std::collections::{HashMap, HashSet};

/// Checks the invariants listed in the module docs.
pub fn verify(g: &Graph) -> Result<(), Diagnostic> {
    let numbering = Numbering::of_graph(g);
    for (i, &out) in g.outputs.iter().enumerate() {
        if !g.contains(out) {
            return Err(broken(
                "outputs exist",
                format!("output {i} refers to {}, not a node of the graph", numbering.name(out)),
            ));
        }
    }
    check_acyclic(g, &numbering)?;
    for &id in numbering.order() {
        check_operand_positions(g, &numbering, id)?;
        check_type(g, &numbering, id)?;
    }
    Ok(())
}

/// `verify`, plus: every node an effect reads is in the graph.
pub fn verify_program(p: &Program) -> Result<(), Diagnostic> {
    verify(&p.graph)?;
    let numbering = Numbering::of_program(p);
    for (i, e) in p.effects.iter().enumerate() {
        for id in effect_operands(e) {
            if !p.graph.contains(id) {
                let msg = format!("effect {i} reads {}, not a node of the graph", numbering.name(id));
                return Err(broken("effect operands exist", msg));
            }
        }
    }
    Ok(())
}

fn broken(rule: &str, detail: String) -> Diagnostic {
    Diagnostic::new(Code::Internal, format!("IR verifier: {rule}: {detail}"))
}

fn broken_at(g: &Graph, numbering: &Numbering, id: NodeId, rule: &str, detail: String) -> Diagnostic {
    let line = print_node(g, numbering, id);
    broken(rule, format!("`{line}` {detail}")).label(g.node(id).span, "this node")
}

fn check_acyclic(g: &Graph, numbering: &Numbering) -> Result<(), Diagnostic> {
    let sorted: HashSet<NodeId> = g.topo_order().into_iter().collect();
    if sorted.len() == g.node_count() {
        return Ok(());
    }
    // A node the topological sort never reached has an unreached operand;
    // walking back along unreached operands must revisit a node, and the walk
    // from that node's first visit is a cycle.
    let Some(&start) = numbering.order().iter().find(|id| !sorted.contains(id)) else {
        return Ok(());
    };
    let mut path = vec![start];
    let mut position: HashMap<NodeId, usize> = HashMap::from([(start, 0)]);
    let mut last = start;
    while let Some(prev) = g.inputs(last).into_iter().find(|i| !sorted.contains(i)) {
        if let Some(&at) = position.get(&prev) {
            // `path` runs against the dataflow (each entry reads the next), so
            // the cycle in dataflow order is `prev`, the rest reversed, `prev`.
            let mut cycle = vec![numbering.name(prev)];
            cycle.extend(path[at + 1..].iter().rev().map(|&n| numbering.name(n)));
            cycle.push(numbering.name(prev));
            let detail = format!("lies on a cycle: {}", cycle.join(" -> "));
            return Err(broken_at(g, numbering, prev, "acyclic", detail));
        }
        position.insert(prev, path.len());
        path.push(prev);
        last = prev;
    }
    Err(broken_at(g, numbering, start, "acyclic", "is not reached by a topological sort".into()))
}

fn check_operand_positions(g: &Graph, numbering: &Numbering, id: NodeId) -> Result<(), Diagnostic> {
    let mut positions: Vec<usize> = g.petgraph().edges_directed(id, Direction::Incoming).map(|e| *e.weight()).collect();
    positions.sort_unstable();
    for (expected, &pos) in positions.iter().enumerate() {
        if pos != expected {
            let what = if expected > 0 && positions[expected - 1] == pos { "repeated" } else { "missing" };
            let which = if what == "repeated" { pos } else { expected };
            let detail = format!("has operand positions {positions:?}: position {which} is {what}");
            return Err(broken_at(g, numbering, id, "operand positions", detail));
        }
    }
    Ok(())
}

fn check_type(g: &Graph, numbering: &Numbering, id: NodeId) -> Result<(), Diagnostic> {
    let types: Vec<&TensorType> = g.inputs(id).into_iter().map(|i| &g.node(i).ty).collect();
    let recorded = &g.node(id).ty;
    match infer(&g.node(id).op, &types) {
        Ok(inferred) if &inferred == recorded => Ok(()),
        Ok(inferred) => {
            let detail = format!("records {recorded}, but infer gives {inferred}");
            Err(broken_at(g, numbering, id, "node type", detail))
        }
        Err(e) => {
            let detail = format!("does not type-check: {} ({})", e.message, e.code.as_str());
            Err(broken_at(g, numbering, id, "node type", detail))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Span;
    use crate::ir::test_graphs::{constant, f32s, node};
    use crate::ir::{BinaryOp, Effect, Op, PrintItem, UnaryOp};

    fn message(r: Result<(), Diagnostic>) -> String {
        match r {
            Ok(()) => panic!("the verifier accepted a broken graph"),
            Err(d) => {
                assert_eq!(d.code, Code::Internal);
                d.message
            }
        }
    }

    /// `exp(a - b)` with output.
    fn good() -> (Graph, [NodeId; 4]) {
        let mut g = Graph::new();
        let a = constant(&mut g, &[1.0, 2.0], &[2]);
        let b = constant(&mut g, &[3.0, 4.0], &[2]);
        let s = node(&mut g, Op::Binary(BinaryOp::Sub), &[a, b]);
        let e = node(&mut g, Op::Unary(UnaryOp::Exp), &[s]);
        g.outputs.push(e);
        (g, [a, b, s, e])
    }

    #[test]
    fn accepts_a_well_formed_graph() {
        let (g, _) = good();
        assert_eq!(verify(&g), Ok(()));
        assert_eq!(verify(&Graph::new()), Ok(()));
    }

    #[test]
    fn reports_a_recorded_type_that_differs_from_infer() {
        let (mut g, [a, b, ..]) = good();
        g.add(Op::Binary(BinaryOp::Add), &[a, b], f32s(&[3]), Span::new(Default::default(), 4, 9));
        let err = verify(&g).err();
        assert_eq!(err.as_ref().and_then(|d| d.span()), Some(Span::new(Default::default(), 4, 9)));
        let msg = message(err.map_or(Ok(()), Err));
        assert_eq!(msg, "IR verifier: node type: `%4 = add %0, %1 : f32[3]` records f32[3], but infer gives f32[2]");
    }

    #[test]
    fn reports_operands_that_do_not_fit_the_op() {
        let (mut g, [a, ..]) = good();
        let m = constant(&mut g, &[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        g.add(Op::MatMul, &[a, m], f32s(&[2]), Span::default());
        let msg = message(verify(&g));
        assert!(msg.starts_with("IR verifier: node type: `%5 = matmul %0, %4 : f32[2]` does not type-check"), "{msg}");
        assert!(msg.contains("E0303"), "{msg}");
    }

    #[test]
    fn reports_a_gap_in_operand_positions() {
        let (mut g, [a, _, s, _]) = good();
        // Removing the first operand of `sub` leaves only position 1.
        g.remove(a);
        let msg = message(verify(&g));
        assert!(msg.starts_with("IR verifier: operand positions: `%1 = sub %0 : f32[2]`"), "{msg}");
        assert!(msg.ends_with("has operand positions [1]: position 0 is missing"), "{msg}");
        let _ = s;
    }

    #[test]
    fn reports_a_cycle_with_its_path() {
        let (mut g, [a, _, s, _]) = good();
        // Every reader of `a` (the `sub`) now reads `exp`, which reads `sub`.
        let e = g.outputs[0];
        g.replace_uses(a, e);
        let msg = message(verify(&g));
        assert!(msg.starts_with("IR verifier: acyclic: `%"), "{msg}");
        // `%0` is `b`; `sub` (%1) reads `exp` (%2), which reads `sub`.
        assert_eq!(msg, "IR verifier: acyclic: `%1 = sub %2, %0 : f32[2]` lies on a cycle: %1 -> %2 -> %1");
        let _ = s;
    }

    #[test]
    fn reports_a_node_that_reads_itself() {
        let (mut g, [_, _, s, e]) = good();
        g.replace_uses(s, e);
        let msg = message(verify(&g));
        assert_eq!(msg, "IR verifier: acyclic: `%0 = exp %0 : f32[2]` lies on a cycle: %0 -> %0");
    }

    #[test]
    fn reports_an_output_that_is_not_in_the_graph() {
        let (mut g, [_, _, _, e]) = good();
        g.outputs.push(e);
        g.remove(e);
        let msg = message(verify(&g));
        assert!(msg.starts_with("IR verifier: outputs exist: output 0 refers to %missing("), "{msg}");
    }

    #[test]
    fn reports_an_effect_that_reads_a_removed_node() {
        let (g, [a, _, _, e]) = good();
        let mut p = Program { graph: g, effects: Vec::new(), compiled: None };
        p.effects.push(Effect::Print { item: PrintItem::Tensor(a), full: false, span: Span::default() });
        assert_eq!(verify_program(&p), Ok(()));
        p.effects.push(Effect::AssertClose { actual: e, expected: e, tol: 0.0, span: Span::default() });
        let b = constant(&mut p.graph, &[0.0], &[1]);
        p.effects.push(Effect::Print { item: PrintItem::Tensor(b), full: false, span: Span::default() });
        p.graph.remove(b);
        let msg = message(verify_program(&p));
        assert!(msg.starts_with("IR verifier: effect operands exist: effect 2 reads %missing("), "{msg}");
    }
}
