//! Which kernels a unit runs on native code: predicates over the graph
//! that pick a kernel's step (module `lower`).
//!
//! Contract: each predicate is true only for kernels whose native step
//! computes what the interpreter would (float operands of one type: `f32`,
//! or `f16`/`bf16`, which the native `f32` loops read widened and whose
//! results they round once, as the interpreter does; the shapes and
//! parameters the native loops take); anything else is compiled as a
//! fused loop or interpreted.
//!
//! Example: `float_pool(g, &[n])` is `Some(params)` for a lone float
//! `pool2d` node `n`, which then runs on module `pool`.

use crate::backend::cpu::kernels::conv::Conv;
use crate::backend::cpu::kernels::permute::Permutation;
use crate::backend::cpu::kernels::window::Copies;
use crate::ir::compiled::{CompiledUnit, Kernel, KernelKind};
use crate::ir::kernel_desc::{describe, Fusion, KernelDesc, PartRole};
use crate::ir::spec::{computes_as_f32, Spec};
use crate::ir::target::HostPart;
use crate::ir::{DType, Graph, NodeId, Op, PoolKind};
use crate::tensor::PoolParams;

/// Whether node `n` and all its operands are floats of one type that
/// native `f32` loops compute (`spec::computes_as_f32`).
fn one_float_type(g: &Graph, n: NodeId) -> bool {
    let dtype = g.node(n).ty.dtype;
    computes_as_f32(dtype) && g.inputs(n).iter().all(|&i| g.node(i).ty.dtype == dtype)
}

/// Whether node `n` and all its operands are `f64`.
pub(super) fn all_f64(g: &Graph, n: NodeId) -> bool {
    g.node(n).ty.dtype == DType::F64 && g.inputs(n).iter().all(|&i| g.node(i).ty.dtype == DType::F64)
}

/// A reduction (the last of `head`) over float values that `reduce.rs`
/// runs, or an `argmax` of float values along an axis of fewer than 2^31.
pub(super) fn native_reduce(g: &Graph, head: &[NodeId]) -> bool {
    let Some(&a) = head.last() else { return false };
    match g.node(a).op {
        Op::Reduce { .. } => one_float_type(g, a) || all_f64(g, a),
        Op::ArgMax { axis, .. } => {
            let x = &g.node(g.inputs(a)[0]).ty;
            computes_as_f32(x.dtype) && x.shape.get(axis).is_some_and(|&n| n > 0 && i32::try_from(n).is_ok())
        }
        _ => false,
    }
}

/// The shape of the 2x2 max pool of `[N, H, W, C]` (even `H` and `W`).
pub(super) fn pooled_shape(shape: &[usize]) -> [usize; 4] {
    match *shape {
        [n, h, w, c] => [n, h / 2, w / 2, c],
        _ => [0; 4],
    }
}

/// Whether `p` is the 2x2, stride-2, unpadded max pool a convolution can
/// write with its result (`conv::PostOps::max_pool`).
pub(super) fn is_max_pool_2x2(p: &PoolParams) -> bool {
    p.kind == PoolKind::Max && p.size == [2, 2] && p.stride == [2, 2] && p.padding == [0; 4]
}

/// The parameters of a layout kernel that is one float pooling or pooling
/// gradient.
pub(super) fn float_pool(g: &Graph, nodes: &[NodeId]) -> Option<PoolParams> {
    let [n] = nodes else { return None };
    let node = g.node(*n);
    let f32s = one_float_type(g, *n);
    match &node.op {
        Op::Pool2d { kind, size, stride, padding } | Op::Pool2dGrad { kind, size, stride, padding } if f32s => {
            Some(PoolParams { kind: *kind, size: *size, stride: *stride, padding: *padding })
        }
        _ => None,
    }
}

/// A layout kernel that is one float transpose (any rank), as the
/// permutation module `permute` runs.
pub(super) fn float_transpose(g: &Graph, nodes: &[NodeId]) -> Option<Permutation> {
    let [n] = nodes else { return None };
    let node = g.node(*n);
    let Op::Transpose { perm } = &node.op else { return None };
    let source = &g.node(*g.inputs(*n).first()?).ty;
    if all_f64(g, *n) {
        // `f64`s move as pairs of `f32` words (`Step::Transpose::wide`).
        let shape = [source.shape.as_slice(), &[2]].concat();
        return Some(Permutation::of(&shape, &[perm.as_slice(), &[perm.len()]].concat()));
    }
    one_float_type(g, *n).then(|| Permutation::of(&source.shape, perm))
}

/// An elementwise kernel that is one reshape of a value kept as a tensor
/// (not a float or `bool`, so not in the arena: integer labels), which
/// runs as a native copy (`Step::Reshape`).
pub(super) fn table_reshape(g: &Graph, nodes: &[NodeId]) -> bool {
    let [n] = nodes else { return false };
    let node = g.node(*n);
    matches!(node.op, Op::Reshape { .. }) && !(computes_as_f32(node.ty.dtype) || node.ty.dtype == DType::Bool)
}

/// A layout kernel that is one float slice, pad or concatenation, as the
/// block copies module `kernels::window` runs.
pub(super) fn float_window(g: &Graph, nodes: &[NodeId]) -> Option<Copies> {
    let [n] = nodes else { return None };
    let node = g.node(*n);
    let ins = g.inputs(*n);
    let f32s = one_float_type(g, *n);
    let shape = |i: usize| ins.get(i).map(|&x| g.node(x).ty.shape.clone());
    match &node.op {
        Op::Slice { start, step, len } if f32s => Some(Copies::slice(&shape(0)?, start, step, len)),
        Op::Pad { low, high, value } if f32s => Some(Copies::pad(&shape(0)?, low, high, *value as f32)),
        Op::Concat { axis } if f32s => {
            Some(Copies::concat(&ins.iter().map(|&x| g.node(x).ty.shape.clone()).collect::<Vec<_>>(), *axis))
        }
        _ => None,
    }
}

/// A layout kernel that is one float gather or scatter-add with integer
/// indices, which run natively (`Step::Gather`, `Step::ScatterAdd`).
pub(super) fn float_index_op(g: &Graph, nodes: &[NodeId]) -> bool {
    let [n] = nodes else { return false };
    let node = g.node(*n);
    let ins = g.inputs(*n);
    let f32s = |i: usize| ins.get(i).is_some_and(|&x| g.node(x).ty.dtype == node.ty.dtype);
    let ints = |i: usize| ins.get(i).is_some_and(|&x| matches!(g.node(x).ty.dtype, DType::I32 | DType::I64));
    computes_as_f32(node.ty.dtype)
        && match node.op {
            Op::Gather { .. } => f32s(0) && ints(1),
            Op::ScatterAdd { .. } => ints(0) && f32s(1),
            _ => false,
        }
}

/// The lowered geometry of a float convolution node.
pub(super) fn float_conv(g: &Graph, n: NodeId) -> Option<Conv> {
    let node = g.node(n);
    let ins = g.inputs(n);
    let all_f32 = one_float_type(g, n);
    let [a, b] = ins.as_slice() else { return None };
    Conv::of(&node.op, &g.node(*a).ty.shape, &g.node(*b).ty.shape, &node.ty.shape).filter(|_| all_f32)
}

/// An `f64` matmul (`Step::MatMul64`).
pub(super) fn is_f64_matmul(g: &Graph, n: NodeId) -> bool {
    matches!(g.node(n).op, Op::MatMul) && all_f64(g, n) && g.inputs(n).iter().all(|&i| g.node(i).ty.shape.len() >= 2)
}

pub(super) fn is_float_matmul(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    matches!(node.op, Op::MatMul) && one_float_type(g, n) && g.inputs(n).iter().all(|&i| g.node(i).ty.shape.len() >= 2)
}

/// Why the CPU backend runs kernel `k` (or a part of it) on the host
/// interpreter, or `None` when every part has native or compiled code —
/// the same choices `lower` makes, from the graph alone, so that the
/// plan's devices (`ir::target::Target::host_reason`) say ahead of time
/// what the lowering then does.
pub(in crate::backend::cpu) fn host_reason(g: &Graph, k: &Kernel) -> Option<HostPart> {
    // The parts as the plan describes them (`ir::kernel_desc`), which the
    // lowering splits the same way: compiled when a spec expresses them.
    // A plan made without `partition` has no descriptions: describe the
    // kernel here as that pass would.
    let described;
    let desc = match k.desc == KernelDesc::default() && k.kind != KernelKind::Source {
        true => {
            let nodes = k.nodes.iter().copied().collect();
            described = describe(g, k, &nodes);
            &described
        }
        false => &k.desc,
    };
    let nodes_of = |role: PartRole| -> Vec<NodeId> {
        let parts = desc.parts.iter().filter(|p| p.role == role && p.spec.is_none());
        parts.flat_map(|p| p.nodes.iter().copied()).collect()
    };
    // The nodes left to the interpreter, and whether that is all of them.
    let (host, whole): (Vec<NodeId>, bool) = match k.kind {
        KernelKind::Source => (Vec::new(), false),
        KernelKind::Elementwise => {
            let native = nodes_of(PartRole::Body).is_empty() || table_reshape(g, &k.nodes);
            (if native { vec![] } else { k.nodes.clone() }, true)
        }
        KernelKind::Contraction
            if is_float_matmul(g, k.nodes[0])
                || is_f64_matmul(g, k.nodes[0])
                || float_conv(g, k.nodes[0]).is_some() =>
        {
            (nodes_of(PartRole::Epilogue), false)
        }
        KernelKind::Reduction => match desc.anchor.as_ref().is_some_and(|a| native_reduce(g, &[a.node])) {
            true => ([nodes_of(PartRole::Prologue), nodes_of(PartRole::Epilogue)].concat(), false),
            false => (k.nodes.clone(), true),
        },
        KernelKind::Layout => {
            let native = float_pool(g, &k.nodes).is_some()
                || float_transpose(g, &k.nodes).is_some()
                || float_index_op(g, &k.nodes)
                || float_window(g, &k.nodes).is_some();
            (if native { vec![] } else { k.nodes.clone() }, true)
        }
        KernelKind::Contraction => (k.nodes.clone(), true),
    };
    // Name the op most likely to be the cause: the first that has no code
    // even on its own, else the first that is not a plain f32 op, else the
    // first left to the interpreter.
    let alone = |n: &&NodeId| Spec::analyze(g, &[**n], &[**n]).is_none();
    let odd = host.iter().find(alone).or(host.iter().find(|&&n| g.node(n).ty.dtype != DType::F32)).or(host.first())?;
    let node = g.node(*odd);
    Some(HostPart { whole, why: format!("no CPU kernel for `{}` on {}", node.op.name(), node.ty), node: *odd })
}

/// Whether the CPU backend runs `fusion` of kernel `k` of `unit`: a 2x2
/// max pool written by a direct `f32` convolution whose output it pools
/// (`conv::PostOps::max_pool`), and Adam's update as the native AVX-512
/// loop (module `adam`), on machines that have AVX-512.
pub(in crate::backend::cpu) fn fuses(g: &Graph, unit: &CompiledUnit, _k: usize, fusion: &Fusion) -> bool {
    match fusion {
        Fusion::PoolIntoConv { conv, .. } => unit.kernels.get(*conv).is_some_and(|c| {
            let node = c.nodes[0];
            g.node(node).ty.dtype == DType::F32 && float_conv(g, node).is_some_and(|conv| conv.takes_max_pool())
        }),
        Fusion::AdamUpdate { .. } => crate::backend::cpu::kernels::simd::avx512(),
    }
}
