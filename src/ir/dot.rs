//! Graphviz export of a program: `tfc build --emit dot | dot -Tsvg`.
//!
//! Contract: the output is a valid `digraph`, deterministic, and uses the
//! text printer's numbering (`n3` is `%3`), so a picture and a dump of the
//! same program can be read side by side. One box per node (op, attributes,
//! type); edges point from operand to user and carry the operand position
//! when the user takes more than one operand; effects are notes and outputs
//! are double octagons.
//!
//! Example: `%2 = add %0, %1 : f32[2]` becomes
//! `n2 [label="%2 add\nf32[2]"];` with edges `n0 -> n2 [label="0"];` and
//! `n1 -> n2 [label="1"];`.

use super::graph::{Graph, NodeId};
use super::numbering::{effect_operands, Numbering};
use super::op::Op;
use super::print::{attributes, float, literal};
use super::program::{Effect, Program};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::fmt::Write as _;

/// The program as a Graphviz digraph.
pub fn to_dot(p: &Program) -> String {
    let g = &p.graph;
    let numbering = Numbering::of_program(p);
    let mut out = String::from("digraph program {\n  node [shape=box, fontname=\"monospace\"];\n");
    for &id in numbering.order() {
        let _ = writeln!(out, "  {} [label=\"{}\"];", dot_id(&numbering, id), escape(&node_label(g, &numbering, id)));
    }
    for &id in numbering.order() {
        // The real edges, not `inputs()`, so a broken graph draws as it is.
        let mut edges: Vec<(usize, usize, NodeId)> = g
            .petgraph()
            .edges_directed(id, Direction::Incoming)
            .map(|e| (*e.weight(), numbering.number(e.source()).unwrap_or(usize::MAX), e.source()))
            .collect();
        edges.sort_unstable();
        let labelled = edges.len() > 1;
        for (pos, _, src) in edges {
            edge(&mut out, &dot_id(&numbering, src), &dot_id(&numbering, id), labelled.then_some(pos));
        }
    }
    for (i, e) in p.effects.iter().enumerate() {
        let label = match e {
            Effect::AssertClose { tol, .. } => format!("assert_close tol={}", float(*tol)),
            other => other.summary(),
        };
        let _ = writeln!(out, "  effect{i} [shape=note, label=\"{}\"];", escape(&label));
        let operands = effect_operands(e);
        let labelled = operands.len() > 1;
        for (pos, src) in operands.into_iter().enumerate() {
            if g.contains(src) {
                edge(&mut out, &dot_id(&numbering, src), &format!("effect{i}"), labelled.then_some(pos));
            }
        }
    }
    for (i, &src) in g.outputs.iter().enumerate() {
        let _ = writeln!(out, "  output{i} [shape=doubleoctagon, label=\"output {i}\"];");
        if g.contains(src) {
            edge(&mut out, &dot_id(&numbering, src), &format!("output{i}"), None);
        }
    }
    out.push_str("}\n");
    out
}

fn dot_id(numbering: &Numbering, id: NodeId) -> String {
    match numbering.number(id) {
        Some(n) => format!("n{n}"),
        None => format!("missing{}", id.index()),
    }
}

fn edge(out: &mut String, from: &str, to: &str, pos: Option<usize>) {
    match pos {
        Some(pos) => {
            let _ = writeln!(out, "  {from} -> {to} [label=\"{pos}\"];");
        }
        None => {
            let _ = writeln!(out, "  {from} -> {to};");
        }
    }
}

/// `%3 reduce_sum {axes=[1], keepdims=false}` over the type, on two lines.
fn node_label(g: &Graph, numbering: &Numbering, id: NodeId) -> String {
    let node = g.node(id);
    let mut label = format!("{} {}", numbering.name(id), node.op.name());
    if let Op::Constant { value, ty } = &node.op {
        let _ = write!(label, " {}", literal(value, &ty.shape));
    }
    let attrs = attributes(&node.op);
    if !attrs.is_empty() {
        let _ = write!(label, " {{{}}}", attrs.join(", "));
    }
    let _ = write!(label, "\n{}", node.ty);
    label
}

/// Escapes text for a double-quoted DOT string; newlines become `\n`.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Span;
    use crate::ir::test_graphs::{constant, node};
    use crate::ir::{BinaryOp, PrintItem, UnaryOp};

    fn program() -> Program {
        let mut p = Program::default();
        let a = constant(&mut p.graph, &[1.0, 2.0], &[2]);
        let b = constant(&mut p.graph, &[3.0, 4.0], &[2]);
        let s = node(&mut p.graph, Op::Binary(BinaryOp::Sub), &[a, b]);
        let e = node(&mut p.graph, Op::Unary(UnaryOp::Exp), &[s]);
        p.effects.push(Effect::Print { item: PrintItem::Tensor(e), full: false, span: Span::default() });
        p.effects.push(Effect::AssertClose { actual: e, expected: a, tol: 1e-5, span: Span::default() });
        p.graph.outputs.push(s);
        p
    }

    #[test]
    fn draws_every_node_and_every_edge_with_operand_positions() {
        let dot = to_dot(&program());
        assert!(dot.starts_with("digraph program {\n"));
        assert!(dot.ends_with("}\n"));
        for n in 0..4 {
            assert!(dot.contains(&format!("  n{n} [label=\"%{n} ")), "node n{n} missing:\n{dot}");
        }
        // numbering: the print reads exp(sub(a, b)) first: a=%0, b=%1, sub=%2, exp=%3.
        assert!(dot.contains("n0 [label=\"%0 constant [1, 2]\\nf32[2]\"];"), "{dot}");
        assert!(dot.contains("  n0 -> n2 [label=\"0\"];\n  n1 -> n2 [label=\"1\"];\n"), "{dot}");
        assert!(dot.contains("  n2 -> n3;\n"), "{dot}");
        assert!(dot.contains("effect0 [shape=note, label=\"print\"]"));
        assert!(dot.contains("  n3 -> effect0;\n"));
        assert!(dot.contains("effect1 [shape=note, label=\"assert_close tol=1e-5\"]"));
        assert!(dot.contains("  n3 -> effect1 [label=\"0\"];\n  n0 -> effect1 [label=\"1\"];\n"), "{dot}");
        assert!(dot.contains("output0 [shape=doubleoctagon"));
        assert!(dot.contains("  n2 -> output0;\n"));
        let edges = dot.matches(" -> ").count();
        assert_eq!(edges, 3 + 3 + 1);
    }

    #[test]
    fn is_deterministic_and_balanced() {
        let dot = to_dot(&program());
        assert_eq!(dot, to_dot(&program()));
        assert_eq!(dot.matches('{').count(), dot.matches('}').count());
        // Every quote is paired once escaped quotes are taken out.
        assert_eq!(dot.replace("\\\"", "").matches('"').count() % 2, 0);
    }

    #[test]
    fn escapes_quotes_and_newlines() {
        assert_eq!(escape("a \"b\"\\\nc"), "a \\\"b\\\"\\\\\\nc");
    }
}
