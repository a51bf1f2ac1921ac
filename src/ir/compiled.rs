//! What the annotating passes decide, as data a backend follows: per
//! compilation unit (the main graph, each training step, …) the fused
//! kernels with their devices, the execution order with dependency counts,
//! and the memory plan of one arena per device.

use super::graph::NodeId;

/// Where a kernel runs. Only the CPU exists today; the GPU backend adds a
/// variant, and `partition` places kernels and inserts transfers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
}

/// The iteration structure of a kernel (what code a backend generates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// Values supplied from outside or known at compile time (slots,
    /// constants, captured inputs): no code, just a buffer.
    Source,
    /// One loop nest over the output shape: elementwise ops, broadcasts,
    /// reshapes.
    Elementwise,
    /// A reduction with its elementwise producers and consumers.
    Reduction,
    /// A matrix product or convolution with a fused epilogue.
    Contraction,
    /// Data movement that is not elementwise (transpose, slice, concat,
    /// pad, gather, …).
    Layout,
}

/// A group of nodes computed by one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub kind: KernelKind,
    /// The nodes, in topological order.
    pub nodes: Vec<NodeId>,
    /// The nodes whose values leave the kernel (read by other kernels or by
    /// the program); each gets a buffer.
    pub outputs: Vec<NodeId>,
    pub device: Device,
}

/// A buffer of the memory plan: a kernel output placed at `offset` in its
/// device's arena, live from the kernel that writes it to the last kernel
/// that reads it (positions in the schedule).
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub node: NodeId,
    /// `Some(slot)`: the kernel writes this value straight over the storage
    /// of that unit input (a parameter or optimizer state updated in place
    /// by a training step), so it takes no arena bytes and `offset` is 0.
    /// The kernel reads the old value only in its elementwise part, at the
    /// index it writes; a backend must keep any product or partial result
    /// it computes before that part in scratch, not in this buffer.
    pub over_input: Option<NodeId>,
    pub offset: usize,
    pub bytes: usize,
    pub first: usize,
    pub last: usize,
}

/// One compilation unit after optimization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompiledUnit {
    pub name: String,
    /// Primitive ops in the unit before optimization.
    pub ops_before: usize,
    /// Primitive ops in the unit after the rewriting passes.
    pub ops_after: usize,
    pub kernels: Vec<Kernel>,
    /// Kernel indices in execution order (`schedule`).
    pub order: Vec<usize>,
    /// For each kernel, how many kernels it waits for (`schedule`; counts
    /// the memory edges too).
    pub deps: Vec<usize>,
    /// `(slot node, output)`: the output is the next value of that unit
    /// input, which may be written over it (`passes::units::Unit::updates`).
    pub updates: Vec<(NodeId, NodeId)>,
    /// `(a, b)`: kernel `b` may start only after kernel `a` finished, because
    /// `b` writes bytes of the arena that `a` reads or writes
    /// (`memory_plan`). Data dependencies are implied by the kernels' nodes.
    pub memory_edges: Vec<(usize, usize)>,
    pub buffers: Vec<Buffer>,
    pub arena_bytes: usize,
    /// The sum of all intermediate buffers without reuse.
    pub naive_bytes: usize,
    /// The most bytes simultaneously live over the schedule.
    pub lower_bound_bytes: usize,
}

/// The annotations of a whole program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compiled {
    pub units: Vec<CompiledUnit>,
}
