//! The graph IR: primitive ops over concretely typed tensors, with a
//! deterministic text printer, Graphviz export, a verifier and the shape
//! rules every op obeys (`infer`), shared by the tracer and the verifier.

mod graph;
pub mod infer;
mod op;
mod program;
mod types;

pub use graph::{Graph, Node, NodeId};
pub use op::{BinaryOp, Distribution, Literal, Op, PoolKind, ReduceOp, UnaryOp};
pub use program::{Effect, PrintItem, Program};
pub use types::{DType, TensorType};
