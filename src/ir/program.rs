//! A traced program: one graph plus the ordered side effects of its
//! statements (`print`, `assert_close`), which read graph values.

use super::graph::{Graph, NodeId};
use crate::diag::Span;

/// One printed item: a tensor (by node) or a compile-time value already
/// formatted as text (ints, strings, …).
#[derive(Clone, Debug, PartialEq)]
pub enum PrintItem {
    Tensor(NodeId),
    Text(String),
    /// `(a, b)`: a tuple of items.
    Tuple(Vec<PrintItem>),
    /// `print(a, b)`: items on one line, separated by spaces.
    Line(Vec<PrintItem>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// `print(x)`; `full` turns off summarizing of large tensors.
    Print { item: PrintItem, full: bool, span: Span },
    /// `assert_close(a, b, tol)`: fails the run if any |a - b| > tol·(1 + |b|).
    AssertClose { actual: NodeId, expected: NodeId, tol: f64, span: Span },
}

/// What `tfc run` executes: evaluate the graph, then perform the effects in
/// order.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub graph: Graph,
    pub effects: Vec<Effect>,
}
