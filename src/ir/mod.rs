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

/// Input channels below which a convolution stays `f32` when a program asks
/// for lower precision (`passes::autocast`'s bf16/f16, `quantize`'s int8):
/// the first layer of an image model, over one to three channels, gives
/// each output too few products (9 for a 3x3 kernel over one channel) for
/// the narrow type to pay for converting its input, and saving that small
/// input for the backward pass in two bytes saves little.
pub const MIN_NARROW_CONV_CHANNELS: usize = 4;
