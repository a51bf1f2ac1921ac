//! The IR graph: a petgraph `StableGraph` of primitive ops. Each node holds
//! its op, its result type and the source span it came from; each edge is one
//! operand, weighted by its operand position.

use super::op::Op;
use super::types::TensorType;
use crate::diag::Span;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::collections::BinaryHeap;

/// Identifies a node; stable across node removal.
pub type NodeId = NodeIndex<u32>;

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub ty: TensorType,
    pub span: Span,
}

/// A dataflow graph of primitive ops plus the values it must produce.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    graph: StableDiGraph<Node, usize>,
    /// Values that callers read after running the graph, in order.
    pub outputs: Vec<NodeId>,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Adds a node whose operands are `inputs`, in order.
    pub fn add(&mut self, op: Op, inputs: &[NodeId], ty: TensorType, span: Span) -> NodeId {
        self.add_from(op, inputs.iter().copied(), ty, span)
    }

    /// Like `add`, taking the operands from an iterator (no slice to build).
    pub fn add_from(&mut self, op: Op, inputs: impl IntoIterator<Item = NodeId>, ty: TensorType, span: Span) -> NodeId {
        let id = self.graph.add_node(Node { op, ty, span });
        for (pos, input) in inputs.into_iter().enumerate() {
            self.graph.add_edge(input, id, pos);
        }
        id
    }

    /// Makes room for `nodes` nodes and `edges` edges, so that a graph built
    /// in one go grows without repeated reallocation and copying.
    /// Only a graph that never held a node is given the room (petgraph 0.6's
    /// stable graph takes a capacity only when made, and replacing one that
    /// had nodes removed would renumber later nodes).
    pub fn reserve(&mut self, nodes: usize, edges: usize) {
        if self.graph.capacity() == (0, 0) {
            self.graph = StableDiGraph::with_capacity(nodes, edges);
        }
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.graph[id]
    }

    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.graph[id]
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.graph.contains_node(id)
    }

    /// The operands of `id` in operand order.
    pub fn inputs(&self, id: NodeId) -> Vec<NodeId> {
        let mut edges: Vec<(usize, NodeId)> =
            self.graph.edges_directed(id, Direction::Incoming).map(|e| (*e.weight(), e.source())).collect();
        edges.sort_unstable();
        edges.into_iter().map(|(_, n)| n).collect()
    }

    /// The distinct nodes that read `id`, in id order.
    pub fn users(&self, id: NodeId) -> Vec<NodeId> {
        let mut users: Vec<NodeId> = self.graph.neighbors_directed(id, Direction::Outgoing).collect();
        users.sort_unstable();
        users.dedup();
        users
    }

    /// One more than the highest node index in use (ids below it may be
    /// vacant).
    pub fn node_bound(&self) -> usize {
        petgraph::visit::NodeIndexable::node_bound(&self.graph)
    }

    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    /// All node ids in ascending id order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = self.graph.node_indices().collect();
        ids.sort_unstable();
        ids
    }

    /// Removes a node and its edges.
    pub fn remove(&mut self, id: NodeId) {
        self.graph.remove_node(id);
    }

    /// Makes every reader of `old` (and every output) read `new` instead.
    pub fn replace_uses(&mut self, old: NodeId, new: NodeId) {
        let uses: Vec<(NodeId, usize)> =
            self.graph.edges_directed(old, Direction::Outgoing).map(|e| (e.target(), *e.weight())).collect();
        for (user, pos) in uses {
            if let Some(edge) = self.graph.find_edge(old, user) {
                self.graph.remove_edge(edge);
            }
            self.graph.add_edge(new, user, pos);
        }
        for out in &mut self.outputs {
            if *out == old {
                *out = new;
            }
        }
    }

    /// Makes `user` read `new` wherever it reads `old` (its other readers
    /// keep reading `old`).
    pub fn redirect(&mut self, old: NodeId, new: NodeId, user: NodeId) {
        let uses: Vec<(petgraph::stable_graph::EdgeIndex, usize)> =
            self.graph.edges_connecting(old, user).map(|e| (e.id(), *e.weight())).collect();
        for (edge, pos) in uses {
            self.graph.remove_edge(edge);
            self.graph.add_edge(new, user, pos);
        }
    }

    /// A deterministic topological order: among ready nodes, the smallest id
    /// goes first, so the order depends only on the graph, never on hashing.
    pub fn topo_order(&self) -> Vec<NodeId> {
        let mut pending: rustc_hash::FxHashMap<NodeId, usize> = rustc_hash::FxHashMap::default();
        let mut ready = BinaryHeap::new();
        for id in self.graph.node_indices() {
            let n = self.graph.edges_directed(id, Direction::Incoming).count();
            if n == 0 {
                ready.push(std::cmp::Reverse(id));
            } else {
                pending.insert(id, n);
            }
        }
        let mut order = Vec::with_capacity(self.graph.node_count());
        while let Some(std::cmp::Reverse(id)) = ready.pop() {
            order.push(id);
            for e in self.graph.edges_directed(id, Direction::Outgoing) {
                if let Some(n) = pending.get_mut(&e.target()) {
                    *n -= 1;
                    if *n == 0 {
                        ready.push(std::cmp::Reverse(e.target()));
                    }
                }
            }
        }
        order
    }

    /// The underlying petgraph graph, for algorithms and DOT export.
    pub fn petgraph(&self) -> &StableDiGraph<Node, usize> {
        &self.graph
    }
}
