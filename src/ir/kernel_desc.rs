//! Kernels described as data: what each kernel of a plan computes, in one
//! form that every backend reads, so that a second backend generates code
//! from the same description the CPU does rather than re-deriving it from
//! the graph.
//!
//! A kernel (`compiled::Kernel`, grouped by `passes::fuse`) is at most one
//! *anchor* — a reduction along any axes, an argmax, a contraction (a
//! matrix product of any batch, a convolution or one of its gradients), a
//! layout op (a transpose of any rank and permutation, slice, pad, concat,
//! gather, scatter-add, pooling or its gradient), or a collective — and
//! the elementwise *parts* around it, each one loop nest described by an
//! `ir::spec::Spec`: an elementwise kernel's body, a reduction's prologue
//! (input fusion) and epilogue, a contraction's epilogue. Every anchor
//! records the element type of the data it reads, and every spec the
//! storage kinds of its loads and stores (f32, f16, bf16, i32, f64, bool),
//! so a backend sees the dtypes without looking at nodes.
//!
//! Contract: `describe` is a function of the graph, the kernel and the
//! unit's nodes alone. A part's `spec` is `None` when no loop nest
//! expresses it (`Spec::analyze` refuses it, or an output has no storage
//! kind); a broadcast computed outside the unit from a value outside it is
//! read as a broadcast of its source (`part_spec`), which every backend's
//! lowering does too (the optimizer hoists an invariant broadcast out of a
//! training step; streaming it at full size every step would cost more
//! than the lanes of a splat). Named fusions (`Fusion`) are not found here:
//! passes record them (`passes::conv_pool`, `passes::adam_update`) on the
//! kernel's `fusion`, when the target says it runs them.
//!
//! Example: an MLP layer's kernel `relu(x @ w + b)` over `x: f32[64, 784]`
//! is `anchor: MatMul { batch: 1, m: 64, k: 784, n: 256 }` on f32 with one
//! epilogue part `[broadcast_to, add, relu]` whose spec loads the product
//! and the bias (a broadcast load) and stores the ReLU.

use super::compiled::{Kernel, KernelKind};
use super::graph::{Graph, NodeId};
use super::op::{Op, PoolKind, ReduceOp};
use super::spec::{Kind, Spec};
use super::types::DType;
use rustc_hash::FxHashSet as HashSet;

/// What a kernel computes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelDesc {
    /// The kernel's one non-elementwise node, if any.
    pub anchor: Option<Anchor>,
    /// The elementwise loop nests, in execution order.
    pub parts: Vec<Part>,
}

/// A kernel's anchor: the node, what it computes, and the element type of
/// the data it reads (its first float operand; a gather's table).
#[derive(Clone, Debug, PartialEq)]
pub struct Anchor {
    pub node: NodeId,
    pub op: AnchorOp,
    pub dtype: DType,
}

/// Which gradient of a convolution a contraction computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPass {
    Forward,
    GradInput,
    GradFilter,
}

/// The iteration structure of an anchor, with the shapes it runs over.
#[derive(Clone, Debug, PartialEq)]
pub enum AnchorOp {
    /// `op` over `axes` of a value of `shape`.
    Reduce {
        op: ReduceOp,
        shape: Vec<usize>,
        axes: Vec<usize>,
    },
    /// The first maximum's index along `axis` of a value of `shape`.
    ArgMax {
        shape: Vec<usize>,
        axis: usize,
    },
    /// `batch` products `[m, k] @ [k, n]`.
    MatMul {
        batch: usize,
        m: usize,
        k: usize,
        n: usize,
    },
    /// `[m, k] @ [k, n]` with `u8` rows and `i8` weights (`Op::QuantMatMul`);
    /// `calibrated`: the rows are quantized by a static input range;
    /// `conv`: the rows are a convolution's patches (`Patches`).
    QuantMatMul {
        m: usize,
        k: usize,
        n: usize,
        calibrated: bool,
        conv: bool,
    },
    /// An NHWC/HWIO convolution or one of its gradients, between the
    /// forward convolution's `input`, `filter` and `output` shapes.
    Conv {
        pass: ConvPass,
        input: [usize; 4],
        filter: [usize; 4],
        output: [usize; 4],
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
    },
    /// Output axis `i` is axis `perm[i]` of a value of `shape`.
    Transpose {
        shape: Vec<usize>,
        perm: Vec<usize>,
    },
    Slice {
        shape: Vec<usize>,
        start: Vec<usize>,
        step: Vec<i64>,
        len: Vec<usize>,
    },
    Pad {
        shape: Vec<usize>,
        low: Vec<usize>,
        high: Vec<usize>,
        value: f64,
    },
    Concat {
        shapes: Vec<Vec<usize>>,
        axis: usize,
    },
    /// Rows of `table` picked along `axis` by integer indices of shape
    /// `indices`.
    Gather {
        table: Vec<usize>,
        indices: Vec<usize>,
        axis: usize,
    },
    /// `updates` added into zeros of `dim` rows along `axis` at integer
    /// indices of shape `indices`.
    ScatterAdd {
        indices: Vec<usize>,
        updates: Vec<usize>,
        axis: usize,
        dim: usize,
    },
    /// An NHWC pooling of `input` (`grad`: its gradient).
    Pool {
        grad: bool,
        kind: PoolKind,
        input: [usize; 4],
        size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 4],
    },
    /// A collective across the processes of data-parallel training: every
    /// process's `elements` values combined by `op` (`Op::AllReduce`, a
    /// fused data-parallel step's gradient and loss sums).
    AllReduce {
        op: ReduceOp,
        elements: usize,
    },
}

/// Where an elementwise part sits in its kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartRole {
    /// An elementwise kernel's whole loop.
    Body,
    /// A reduction's input fusion (it writes the reduction's input).
    Prologue,
    /// What follows the anchor (reading its result, or beside it).
    Epilogue,
}

/// One elementwise loop nest of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub role: PartRole,
    pub nodes: Vec<NodeId>,
    /// The values it writes for others: the kernel's outputs among
    /// `nodes` (and a prologue's reduction input).
    pub outputs: Vec<NodeId>,
    /// The loop nest, when one expresses the part (see the module docs).
    pub spec: Option<Spec>,
}

/// A fusion across kernels or of a known computation, recorded by a named
/// pass on the kernel it concerns (`Kernel::fusion`) when the target runs
/// it; a backend that runs the kernels as they are is still correct.
#[derive(Clone, Debug, PartialEq)]
pub enum Fusion {
    /// This 2x2, stride-2, unpadded max pool is written by the forward
    /// convolution kernel `conv` (of the same unit) that computes its
    /// input, in the same pass over the result (`passes::conv_pool`).
    /// `gradients`: the unit's gradients of the pool, which read the first
    /// maxima the convolution records instead of the convolution's result;
    /// `pool_only`: nothing else reads the result, which is not stored.
    PoolIntoConv { conv: usize, gradients: Vec<NodeId>, pool_only: bool },
    /// The kernel's part `part` (an index into `KernelDesc::parts`) is
    /// exactly Adam's parameter update (`passes::adam_update`).
    AdamUpdate { part: usize },
}

/// The description of kernel `k` of a unit whose nodes are `in_unit`.
pub fn describe(g: &Graph, k: &Kernel, in_unit: &HashSet<NodeId>) -> KernelDesc {
    let part = |role: PartRole, nodes: Vec<NodeId>, mut outputs: Vec<NodeId>, extra: Option<NodeId>| {
        outputs.retain(|o| nodes.contains(o));
        outputs.extend(extra.filter(|e| !outputs.contains(e)));
        let spec = part_spec(g, &nodes, &outputs, in_unit).map(|(spec, _)| spec);
        Part { role, nodes, outputs, spec }
    };
    match k.kind {
        KernelKind::Source => KernelDesc::default(),
        KernelKind::Elementwise => {
            KernelDesc { anchor: None, parts: vec![part(PartRole::Body, k.nodes.clone(), k.outputs.clone(), None)] }
        }
        KernelKind::Contraction | KernelKind::Layout => {
            let Some(&first) = k.nodes.first() else { return KernelDesc::default() };
            let epilogue = k.nodes[1..].to_vec();
            let parts = match epilogue.is_empty() {
                true => Vec::new(),
                false => vec![part(PartRole::Epilogue, epilogue, k.outputs.clone(), None)],
            };
            KernelDesc { anchor: anchor(g, first), parts }
        }
        KernelKind::Reduction => {
            let (head, tail) = split_anchor(g, &k.nodes);
            let Some((&a, prologue)) = head.split_last() else {
                return KernelDesc { anchor: None, parts: vec![part(PartRole::Body, tail, k.outputs.clone(), None)] };
            };
            let mut parts = Vec::new();
            if !prologue.is_empty() {
                parts.push(part(
                    PartRole::Prologue,
                    prologue.to_vec(),
                    k.outputs.clone(),
                    g.inputs(a).first().copied(),
                ));
            }
            if !tail.is_empty() {
                parts.push(part(PartRole::Epilogue, tail, k.outputs.clone(), None));
            }
            KernelDesc { anchor: anchor(g, a), parts }
        }
    }
}

/// The spec of `nodes` writing `outputs` (which must all have a storage
/// kind), reading each `broadcast_to` computed outside the unit (`in_unit`)
/// from a value outside it as a broadcast of that source; with the
/// broadcasts so absorbed. Without any to absorb, or when absorbing them
/// gives no spec, the plain spec of `nodes`.
pub fn part_spec(
    g: &Graph,
    nodes: &[NodeId],
    outputs: &[NodeId],
    in_unit: &HashSet<NodeId>,
) -> Option<(Spec, Vec<NodeId>)> {
    if !outputs.iter().all(|&o| Kind::stored(g.node(o).ty.dtype).is_some()) {
        return None;
    }
    let mut absorbed: Vec<NodeId> = Vec::new();
    for &n in nodes {
        for i in g.inputs(n) {
            let widens = matches!(g.node(i).op, Op::BroadcastTo { .. })
                && !in_unit.contains(&i)
                && !absorbed.contains(&i)
                && g.inputs(i).first().is_some_and(|s| !in_unit.contains(s));
            if widens {
                absorbed.push(i);
            }
        }
    }
    if !absorbed.is_empty() {
        let members: Vec<NodeId> = absorbed.iter().chain(nodes).copied().collect();
        if let Some(spec) = Spec::analyze(g, &members, outputs).filter(|s| s.numel() > 0) {
            return Some((spec, absorbed));
        }
    }
    Spec::analyze(g, nodes, outputs).filter(|s| s.numel() > 0).map(|spec| (spec, Vec::new()))
}

/// A reduction kernel's single anchor (reduction or argmax) with its
/// in-kernel ancestors, in kernel order with the anchor last, and the
/// remaining nodes (`head` is empty when there is no anchor).
pub fn split_anchor(g: &Graph, nodes: &[NodeId]) -> (Vec<NodeId>, Vec<NodeId>) {
    let Some(&anchor) = nodes.iter().find(|&&n| matches!(g.node(n).op, Op::Reduce { .. } | Op::ArgMax { .. })) else {
        return (Vec::new(), nodes.to_vec());
    };
    let members: HashSet<NodeId> = nodes.iter().copied().collect();
    let mut before: HashSet<NodeId> = HashSet::default();
    let mut stack = g.inputs(anchor);
    while let Some(n) = stack.pop() {
        if members.contains(&n) && before.insert(n) {
            stack.extend(g.inputs(n));
        }
    }
    let mut head: Vec<NodeId> = nodes.iter().copied().filter(|n| before.contains(n)).collect();
    head.push(anchor);
    let tail = nodes.iter().copied().filter(|n| !before.contains(n) && *n != anchor).collect();
    (head, tail)
}

/// The anchor node `n` describes, if it is one.
fn anchor(g: &Graph, n: NodeId) -> Option<Anchor> {
    let node = g.node(n);
    let ins = g.inputs(n);
    let shape = |i: usize| ins.get(i).map(|&x| g.node(x).ty.shape.clone());
    let dtype_of = |i: usize| ins.get(i).map_or(node.ty.dtype, |&x| g.node(x).ty.dtype);
    let four = |s: &[usize]| <[usize; 4]>::try_from(s).ok();
    let conv =
        |pass, input: &[usize], filter: &[usize], output: &[usize], p: ([usize; 2], [usize; 4], [usize; 2], usize)| {
            Some(AnchorOp::Conv {
                pass,
                input: four(input)?,
                filter: four(filter)?,
                output: four(output)?,
                stride: p.0,
                padding: p.1,
                dilation: p.2,
                groups: p.3,
            })
        };
    let (op, dtype) = match &node.op {
        Op::Reduce { op, axes, .. } => {
            (AnchorOp::Reduce { op: *op, shape: shape(0)?, axes: axes.clone() }, dtype_of(0))
        }
        Op::ArgMax { axis, .. } => (AnchorOp::ArgMax { shape: shape(0)?, axis: *axis }, dtype_of(0)),
        Op::MatMul => {
            let (a, b) = (shape(0)?, shape(1)?);
            let r = a.len().checked_sub(2)?;
            let op = AnchorOp::MatMul { batch: a[..r].iter().product(), m: a[r], k: a[r + 1], n: *b.last()? };
            (op, dtype_of(0))
        }
        Op::QuantMatMul { patches } => {
            let (x, w) = (shape(0)?, shape(1)?);
            let rows = match patches {
                Some(p) => p.rows_shape(&x)?.to_vec(),
                None => x,
            };
            let (&k, lead) = rows.split_last()?;
            let (calibrated, conv) = (ins.len() == 4, patches.is_some());
            (AnchorOp::QuantMatMul { m: lead.iter().product(), k, n: *w.last()?, calibrated, conv }, dtype_of(1))
        }
        Op::Conv2d { stride, padding, dilation, groups } => {
            let p = (*stride, *padding, *dilation, *groups);
            (conv(ConvPass::Forward, &shape(0)?, &shape(1)?, &node.ty.shape, p)?, dtype_of(0))
        }
        Op::Conv2dGradInput { stride, padding, dilation, groups, input_shape } => {
            let p = (*stride, *padding, *dilation, *groups);
            (conv(ConvPass::GradInput, input_shape, &shape(1)?, &shape(0)?, p)?, dtype_of(0))
        }
        Op::Conv2dGradFilter { stride, padding, dilation, groups, filter_shape } => {
            let p = (*stride, *padding, *dilation, *groups);
            (conv(ConvPass::GradFilter, &shape(0)?, filter_shape, &shape(1)?, p)?, dtype_of(0))
        }
        Op::Transpose { perm } => (AnchorOp::Transpose { shape: shape(0)?, perm: perm.clone() }, dtype_of(0)),
        Op::Slice { start, step, len } => {
            let op = AnchorOp::Slice { shape: shape(0)?, start: start.clone(), step: step.clone(), len: len.clone() };
            (op, dtype_of(0))
        }
        Op::Pad { low, high, value } => {
            (AnchorOp::Pad { shape: shape(0)?, low: low.clone(), high: high.clone(), value: *value }, dtype_of(0))
        }
        Op::Concat { axis } => {
            let shapes = ins.iter().map(|&x| g.node(x).ty.shape.clone()).collect();
            (AnchorOp::Concat { shapes, axis: *axis }, dtype_of(0))
        }
        Op::Gather { axis } => (AnchorOp::Gather { table: shape(0)?, indices: shape(1)?, axis: *axis }, dtype_of(0)),
        Op::ScatterAdd { axis, dim } => {
            let op = AnchorOp::ScatterAdd { indices: shape(0)?, updates: shape(1)?, axis: *axis, dim: *dim };
            (op, dtype_of(1))
        }
        Op::Pool2d { kind, size, stride, padding } | Op::Pool2dGrad { kind, size, stride, padding } => {
            let grad = matches!(node.op, Op::Pool2dGrad { .. });
            let input = four(&shape(0)?)?;
            (AnchorOp::Pool { grad, kind: *kind, input, size: *size, stride: *stride, padding: *padding }, dtype_of(0))
        }
        Op::AllReduce => (AnchorOp::AllReduce { op: ReduceOp::Sum, elements: node.ty.numel() }, dtype_of(0)),
        _ => return None,
    };
    Some(Anchor { node: n, op, dtype })
}

impl AnchorOp {
    /// A short text form for plans: the kind and its sizes
    /// (`matmul 64x784x256`, `conv2d_grad_filter 64x28x28x1 * 3x3x1x16`).
    pub fn summary(&self) -> String {
        let dims = |s: &[usize]| s.iter().map(usize::to_string).collect::<Vec<_>>().join("x");
        match self {
            AnchorOp::Reduce { op, shape, axes } => {
                format!("reduce_{op:?} {} axes {axes:?}", dims(shape)).to_lowercase()
            }
            AnchorOp::ArgMax { shape, axis } => format!("argmax {} axis {axis}", dims(shape)),
            AnchorOp::MatMul { batch: 1, m, k, n } => format!("matmul {m}x{k}x{n}"),
            AnchorOp::MatMul { batch, m, k, n } => format!("matmul {batch} of {m}x{k}x{n}"),
            AnchorOp::QuantMatMul { m, k, n, calibrated, conv } => {
                let name = if *conv { "quant_conv2d" } else { "quant_matmul" };
                format!("{name} {m}x{k}x{n}{}", if *calibrated { " static" } else { "" })
            }
            AnchorOp::Conv { pass, input, filter, .. } => {
                let name = match pass {
                    ConvPass::Forward => "conv2d",
                    ConvPass::GradInput => "conv2d_grad_input",
                    ConvPass::GradFilter => "conv2d_grad_filter",
                };
                format!("{name} {} * {}", dims(input), dims(filter))
            }
            AnchorOp::Transpose { shape, perm } => format!("transpose {} {perm:?}", dims(shape)),
            AnchorOp::Slice { shape, .. } => format!("slice {}", dims(shape)),
            AnchorOp::Pad { shape, .. } => format!("pad {}", dims(shape)),
            AnchorOp::Concat { shapes, axis } => format!("concat of {} axis {axis}", shapes.len()),
            AnchorOp::Gather { table, indices, .. } => format!("gather {} by {}", dims(table), dims(indices)),
            AnchorOp::ScatterAdd { updates, dim, .. } => format!("scatter_add {} into {dim}", dims(updates)),
            AnchorOp::Pool { grad, kind, input, size, .. } => {
                let kind = if *kind == PoolKind::Max { "max" } else { "avg" };
                let grad = if *grad { "_grad" } else { "" };
                format!("{kind}_pool{grad} {} {}x{}", dims(input), size[0], size[1])
            }
            AnchorOp::AllReduce { op, elements } => format!("all_reduce_{op:?} {elements}").to_lowercase(),
        }
    }
}
