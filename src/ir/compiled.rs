//! What the annotating passes decide, as data a backend follows: per
//! compilation unit (the main graph, each training step, …) the fused
//! kernels with their devices, the execution order with dependency counts,
//! and the memory plan of one arena per device.

use super::graph::{Graph, NodeId};
use super::program::Program;
use super::{DType, Op, PoolKind};
use std::collections::HashMap;

/// Where a kernel runs: the target's device (`ir::target::Target::device`)
/// or the host interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The target's own code (the CPU backend's native kernels).
    Cpu,
    /// A GPU's compute shaders (`backend::gpu`): its own memory, so the
    /// host kernels of a GPU unit read their operands back from it.
    Gpu,
    /// The host interpreter, node by node: a kernel the target has no code
    /// for (`ir::target::Target::host_reason`), or a statement of the main
    /// unit. It shares the CPU's memory, so no transfer is needed.
    Host,
}

impl Device {
    /// The device whose arena holds this device's buffers: the host
    /// interpreter's are in the CPU's (one memory, one arena).
    pub fn arena(self) -> Device {
        match self {
            Device::Cpu | Device::Host => Device::Cpu,
            Device::Gpu => Device::Gpu,
        }
    }

    /// The bytes an element of `dtype` takes in this device's arena: its
    /// own size in the CPU's memory; one 32-bit word on the GPU, which
    /// holds every dtype it computes that way (a half type as the `f32` it
    /// is exactly; a dtype it does not hold never gets a GPU buffer, since
    /// its kernel runs on the host).
    pub fn element_bytes(self, dtype: DType) -> usize {
        match self.arena() {
            Device::Gpu => 4,
            _ => dtype.size_bytes(),
        }
    }

    /// Whether values move between `self` and `other` without a transfer.
    pub fn shares_memory_with(self, other: Device) -> bool {
        self.arena() == other.arena()
    }

    /// Whether a kernel on `self` may read a value a kernel on `producer`
    /// computed: in the same memory, or between a GPU and the host
    /// interpreter, whose operands and results the GPU unit moves itself.
    pub fn reads_from(self, producer: Device) -> bool {
        self.shares_memory_with(producer)
            || matches!((self, producer), (Device::Gpu, Device::Host) | (Device::Host, Device::Gpu))
    }
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
    /// Why the kernel runs wholly (`device` is `Host`) or partly (a product
    /// on the CPU, its epilogue interpreted) on the host interpreter in a
    /// region's unit: what the target answered
    /// (`ir::target::Target::host_reason`), with the node it names.
    pub why_host: Option<String>,
    pub host_node: Option<NodeId>,
    /// The element type the kernel computes in when it is not its outputs'
    /// (f16 outputs computed in f32: `ir::target::Target::arithmetic`).
    pub computes_in: Option<super::types::DType>,
    /// What the kernel computes, as data (`ir::kernel_desc`; filled by
    /// `passes::partition`).
    pub desc: super::kernel_desc::KernelDesc,
    /// A named fusion a pass recorded for this kernel (`Fusion`).
    pub fusion: Option<super::kernel_desc::Fusion>,
}

/// A buffer of the memory plan: a kernel output placed at `offset` in its
/// device's arena, live from the kernel that writes it to the last kernel
/// that reads it (positions in the schedule).
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub node: NodeId,
    /// The device whose arena holds it (`Device::arena` of its kernel's).
    pub device: Device,
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
    /// The region this unit runs (`None`: the main unit, the program's
    /// statements). Backends find a region's unit by this id.
    pub region: Option<super::plan::RegionId>,
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
    /// An `export fn`'s unit: its `f32` products take one fixed summation
    /// order (a backend's ahead-of-time library then computes the same
    /// bits as the in-process call).
    pub export: bool,
    /// `(a, b)`: kernel `b` may start only after kernel `a` finished, because
    /// `b` writes bytes of the arena that `a` reads or writes
    /// (`memory_plan`). Data dependencies are implied by the kernels' nodes.
    pub memory_edges: Vec<(usize, usize)>,
    pub buffers: Vec<Buffer>,
    /// `(view, source)`: values whose readers a backend may serve from
    /// another value instead, which the memory plan keeps alive as long as
    /// the view's readers (`ir::target::Target::views`): a transpose folded
    /// into the products that read it, a 2x2 max pool's gradient computed
    /// from its pooled gradient and the pool's recorded maxima.
    pub views: Vec<(NodeId, NodeId)>,
    pub arena_bytes: usize,
    /// Every buffer offset is a multiple of this (`Target::align`).
    pub align: usize,
    /// The sum of all intermediate buffers without reuse.
    pub naive_bytes: usize,
    /// The most bytes simultaneously live over the schedule.
    pub lower_bound_bytes: usize,
    /// The plan of each `scan`'s body in this unit (`passes::loops`).
    pub loops: Vec<LoopPlan>,
}

/// A `scan` node's body, planned as a program of its own: its graph after
/// the whole pipeline, whose one unit (the main one) runs once per step
/// with the body's slots as its inputs and the body's outputs as its
/// outputs (`program.graph.outputs`).
#[derive(Clone, Debug)]
pub struct LoopPlan {
    /// The `Op::Scan` node.
    pub node: NodeId,
    pub body: std::sync::Arc<Program>,
}

/// Two loop plans are the same when they plan the same node the same way.
impl PartialEq for LoopPlan {
    fn eq(&self, other: &LoopPlan) -> bool {
        self.node == other.node && self.body.compiled == other.body.compiled
    }
}

impl Kernel {
    /// Whether the plan records the kernel's part of `role` as Adam's
    /// update (`passes::adam_update`).
    pub fn fused_adam(&self, role: super::kernel_desc::PartRole) -> bool {
        let Some(super::kernel_desc::Fusion::AdamUpdate { part }) = self.fusion else { return false };
        self.desc.parts.get(part).is_some_and(|p| p.role == role)
    }
}

impl CompiledUnit {
    /// `(transpose, source)` for each 2-D `f32` transpose of this unit that
    /// is a kernel of its own and is read only as an operand of unbatched
    /// matrix products that start `Contraction` kernels — as the left
    /// operand, or as the right operand of a product of one row. A backend
    /// may read such a transpose's source with exchanged strides instead of
    /// materializing it (`gemm` takes any strides); the memory plan keeps
    /// the source alive until the products have run so that it can.
    ///
    /// A transposed right operand of a product of several rows is left to
    /// be materialized: `gemm` packs it far more slowly than a transpose
    /// copies it (measured: `64x256 @ 256x256ᵀ` 127 µs through strides
    /// against 9 + 80 µs transposed first; `32x512 @ 512x512ᵀ` 660 against
    /// 62 + 168 µs), while a transposed left operand costs it nothing.
    /// `matmul_operand_transposes` and `max_pool_grad_operands`: every view
    /// a backend may read through (`Target::views` of the CPU).
    pub fn read_through_views(&self, g: &Graph) -> Vec<(NodeId, NodeId)> {
        let mut views = self.matmul_operand_transposes(g);
        views.extend(self.max_pool_grad_operands(g));
        views
    }

    /// `(gradient, pooled gradient)` of each 2x2, stride-2, unpadded max
    /// pool's gradient a kernel of this unit writes: a backend may compute
    /// the gradient's readers from the pooled gradient and the first maxima
    /// the pool recorded (the CPU backend does for a bias gradient and a
    /// first layer's weight gradient).
    pub fn max_pool_grad_operands(&self, g: &Graph) -> Vec<(NodeId, NodeId)> {
        let pool = MAX_POOL_2X2_GRAD;
        let outputs = self.kernels.iter().filter(|k| k.kind != KernelKind::Source).flat_map(|k| &k.outputs);
        outputs.filter(|&&n| g.node(n).op == pool).filter_map(|&n| Some((n, *g.inputs(n).get(1)?))).collect()
    }

    pub fn matmul_operand_transposes(&self, g: &Graph) -> Vec<(NodeId, NodeId)> {
        let kernel_of: HashMap<NodeId, &Kernel> =
            self.kernels.iter().flat_map(|k| k.nodes.iter().map(move |&n| (n, k))).collect();
        let mut readers: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
        for &n in self.kernels.iter().flat_map(|k| &k.nodes) {
            for i in g.inputs(n) {
                readers.entry(i).or_default().push(n);
            }
        }
        // A bf16 product packs both operands, so it reads either one
        // through strides; an f32 one its left operand, or its right one
        // when it has one row.
        let starts_a_product = |t: NodeId, u: &NodeId| {
            let node = g.node(*u);
            let anchor =
                kernel_of.get(u).is_some_and(|k| k.kind == KernelKind::Contraction && k.nodes.first() == Some(u));
            let strided =
                g.inputs(*u).get(1) != Some(&t) || node.ty.shape.first() == Some(&1) || node.ty.dtype == DType::BF16;
            anchor && matches!(node.op, Op::MatMul) && node.ty.shape.len() == 2 && strided
        };
        let mut found = Vec::new();
        for k in &self.kernels {
            let [t] = k.nodes.as_slice() else { continue };
            let node = g.node(*t);
            let is_transpose = matches!(&node.op, Op::Transpose { perm } if perm == &[1, 0])
                && matches!(node.ty.dtype, DType::F32 | DType::BF16);
            if k.kind != KernelKind::Layout || !is_transpose {
                continue;
            }
            if readers.get(t).is_some_and(|users| users.iter().all(|u| starts_a_product(*t, u))) {
                found.push((*t, g.inputs(*t)[0]));
            }
        }
        found
    }
}

/// The gradient of the 2x2, stride-2, unpadded max pool that a
/// convolution can write with its result (`passes::conv_pool`), whose
/// gradient reads the maxima it records.
pub const MAX_POOL_2X2_GRAD: Op = Op::Pool2dGrad { kind: PoolKind::Max, size: [2, 2], stride: [2, 2], padding: [0; 4] };

/// The annotations of a whole program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compiled {
    pub units: Vec<CompiledUnit>,
}
