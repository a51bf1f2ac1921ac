//! Dense, structural node numbers (`%0, %1, …`) shared by the text printer,
//! the DOT export and the verifier's messages.
//!
//! Contract: the numbering is a topological order (operands before users) of
//! every node reachable from the roots, and it depends only on structure, not
//! on petgraph indices or insertion order. Two graphs that differ only in the
//! order their nodes were added therefore get the same numbers, as long as
//! every node is reachable from a root.
//!
//! How: a depth-first post-order from the roots (a program's effect operands
//! in statement order, then the graph's outputs), visiting each node's
//! operands in operand order. That is also the order a reader evaluates the
//! source in: `x @ w + b` numbers `x, w, x @ w, b, +`.
//!
//! Nodes no root reaches (dead code, before `dce`) follow, in the graph's own
//! smallest-id-first topological order, so for them only relative insertion
//! order matters. Nodes on or after a cycle (a broken graph) come last, in id
//! order, so that the verifier can still name them.
//!
//! Example: outputs `[%add]`, `add(matmul(x, w), b)` numbers
//! `%0 = x, %1 = w, %2 = matmul, %3 = b, %4 = add`.

use super::graph::{Graph, NodeId};
use super::program::{Effect, PrintItem, Program};
use std::collections::HashMap;

/// A dense renumbering of a graph's nodes. See the module docs for the order.
#[derive(Clone, Debug, Default)]
pub struct Numbering {
    order: Vec<NodeId>,
    index: HashMap<NodeId, usize>,
}

#[derive(Clone, Copy, PartialEq)]
enum Visit {
    Open,
    Done,
}

impl Numbering {
    /// Numbers `g`'s nodes starting from `roots` (ids not in `g` are skipped).
    pub fn new(g: &Graph, roots: &[NodeId]) -> Numbering {
        let mut n = Numbering::default();
        let mut state: HashMap<NodeId, Visit> = HashMap::new();
        // An explicit stack, not recursion: training graphs are deep chains.
        // `(id, true)` means "all operands are done, number it now".
        let mut stack: Vec<(NodeId, bool)> = Vec::new();
        for &root in roots {
            if !g.contains(root) {
                continue;
            }
            stack.push((root, false));
            while let Some((id, operands_done)) = stack.pop() {
                if operands_done {
                    state.insert(id, Visit::Done);
                    n.push(id);
                    continue;
                }
                if state.contains_key(&id) {
                    // Already numbered, or open (a back edge of a cycle).
                    continue;
                }
                state.insert(id, Visit::Open);
                stack.push((id, true));
                // Reversed so that operand 0 is popped (and numbered) first.
                for input in g.inputs(id).into_iter().rev() {
                    if !state.contains_key(&input) {
                        stack.push((input, false));
                    }
                }
            }
        }
        debug_assert!(state.values().all(|v| *v == Visit::Done));
        for id in g.topo_order() {
            n.push(id);
        }
        for id in g.node_ids() {
            n.push(id);
        }
        n
    }

    /// Roots: the graph's outputs.
    pub fn of_graph(g: &Graph) -> Numbering {
        Numbering::new(g, &g.outputs)
    }

    /// Roots: the nodes the effects read, in statement order, then the outputs.
    pub fn of_program(p: &Program) -> Numbering {
        let mut roots: Vec<NodeId> = p.effects.iter().flat_map(effect_operands).collect();
        roots.extend_from_slice(&p.graph.outputs);
        Numbering::new(&p.graph, &roots)
    }

    fn push(&mut self, id: NodeId) {
        if !self.index.contains_key(&id) {
            self.index.insert(id, self.order.len());
            self.order.push(id);
        }
    }

    /// Every node, in numbering order.
    pub fn order(&self) -> &[NodeId] {
        &self.order
    }

    /// The dense number of `id`, if it is a node of the numbered graph.
    pub fn number(&self, id: NodeId) -> Option<usize> {
        self.index.get(&id).copied()
    }

    /// `%3`, or `%missing(n7)` (the raw index) for an id not in the graph, so
    /// that a dangling reference is visible instead of a panic.
    pub fn name(&self, id: NodeId) -> String {
        match self.number(id) {
            Some(n) => format!("%{n}"),
            None => format!("%missing(n{})", id.index()),
        }
    }
}

/// The nodes an effect reads, in order (a print of a tuple reads several).
pub fn effect_operands(e: &Effect) -> Vec<NodeId> {
    fn walk(item: &PrintItem, out: &mut Vec<NodeId>) {
        match item {
            PrintItem::Tensor(id) | PrintItem::Bytes(id) => out.push(*id),
            PrintItem::Text(_) => {}
            PrintItem::Tuple(items) | PrintItem::Line(items) => items.iter().for_each(|i| walk(i, out)),
        }
    }
    let mut out = Vec::new();
    match e {
        Effect::Print { item, .. } => walk(item, &mut out),
        Effect::AssertClose { actual, expected, .. } => out.extend([*actual, *expected]),
        other => out = other.plan_operands(),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Span;
    use crate::ir::test_graphs::{constant, node};
    use crate::ir::{BinaryOp, Op, UnaryOp};

    #[test]
    fn numbers_every_node_once_with_operands_before_users() {
        let mut g = Graph::new();
        let a = constant(&mut g, &[1.0], &[1]);
        let dead = node(&mut g, Op::Unary(UnaryOp::Neg), &[a]);
        let b = constant(&mut g, &[2.0], &[1]);
        let s = node(&mut g, Op::Binary(BinaryOp::Add), &[b, a]);
        let _dead_user = node(&mut g, Op::Binary(BinaryOp::Mul), &[dead, s]);
        let out = node(&mut g, Op::Binary(BinaryOp::Mul), &[s, s]);
        g.outputs.push(out);
        let n = Numbering::of_graph(&g);
        assert_eq!(n.order().len(), g.node_count());
        for id in g.node_ids() {
            let Some(user) = n.number(id) else { panic!("{id:?} has no number") };
            for input in g.inputs(id) {
                assert!(n.number(input) < Some(user), "operand numbered after its user");
            }
        }
        // Reachable first, in operand order: b, a, add, mul; then the dead ones.
        assert_eq!(n.number(b), Some(0));
        assert_eq!(n.number(a), Some(1));
        assert_eq!(n.number(out), Some(3));
    }

    #[test]
    fn a_program_numbers_effect_operands_before_outputs() {
        let mut p = Program::default();
        let a = constant(&mut p.graph, &[1.0], &[1]);
        let b = constant(&mut p.graph, &[2.0], &[1]);
        p.graph.outputs.push(a);
        p.effects.push(Effect::Print { item: PrintItem::Tensor(b), full: false, span: Span::default() });
        let n = Numbering::of_program(&p);
        assert_eq!(n.order(), [b, a]);
        assert_eq!(n.name(b), "%0");
    }
}
