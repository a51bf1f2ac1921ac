//! The graph IR: primitive ops over concretely typed tensors, with a
//! deterministic text printer, Graphviz export, a verifier and the shape
//! rules every op obeys (`infer`), shared by the tracer and the verifier.

pub mod adam_pattern;
pub mod compiled;
pub mod half_epilogue;
pub mod dot;
mod graph;
pub mod infer;
pub mod kernel_desc;
pub mod numbering;
mod op;
pub mod plan;
pub mod plan_print;
pub mod print;
mod program;
pub mod regions;
pub mod scan;
pub mod spec;
pub mod target;
pub mod transfers;
#[cfg(test)]
mod test_graphs;
mod types;
pub mod verify;

pub use dot::to_dot;
pub use graph::{Graph, Node, NodeId};
pub use numbering::Numbering;
pub use op::{random_seed, BinaryOp, Distribution, Literal, Op, Patches, PoolKind, ReduceOp, UnaryOp};
pub use print::{print_graph, print_program, print_summary};
pub use program::{Effect, PrintItem, Program};
pub use types::{DType, TensorType};
pub use verify::{verify, verify_program};
