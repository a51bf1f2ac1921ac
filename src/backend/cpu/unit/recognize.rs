//! Which kernels a unit runs on native code: predicates over the graph
//! that pick a kernel's step (module `lower`).
//!
//! Contract: each predicate is true only for kernels whose native step
//! computes what the interpreter would: float operands of one type (`f32`,
//! or `f16`/`bf16`, which the native `f32` loops read widened and whose
//! results they round once, as the interpreter does) of the shapes and
//! parameters the native loops take; `i32`, `i64` and `f64` operands of one
//! type (and `bool` products, convolutions and pools), which run the
//! interpreter's own generic loops (module `generic`);
//! layout copies of any type, which move bits. Anything else is compiled as
//! a fused loop or interpreted.
//!
//! Example: `float_pool(g, &[n])` is `Some(params)` for a lone float
//! `pool2d` node `n`, which then runs on module `pool`.

use super::generic::{ConvPass, Loop};
use crate::backend::cpu::kernels::conv::Conv;
use crate::backend::cpu::kernels::permute::Permutation;
use crate::backend::cpu::kernels::window::Copies;
use crate::ir::compiled::{CompiledUnit, Kernel, KernelKind};
use crate::ir::kernel_desc::{describe, Fusion, KernelDesc, PartRole};
use crate::ir::spec::{computes_as_f32, Spec};
use crate::ir::target::HostPart;
use crate::ir::{DType, Graph, NodeId, Op, PoolKind};
use crate::tensor::{scalar_for, ConvParams, PoolParams};

/// The type of node `n` when all its operands are of that type too.
fn one_type(g: &Graph, n: NodeId) -> Option<DType> {
    let dtype = g.node(n).ty.dtype;
    g.inputs(n).iter().all(|&i| g.node(i).ty.dtype == dtype).then_some(dtype)
}

/// Whether node `n` and all its operands are floats of one type that
/// native `f32` loops compute (`spec::computes_as_f32`).
fn one_float_type(g: &Graph, n: NodeId) -> bool {
    one_type(g, n).is_some_and(computes_as_f32)
}

/// Whether values of `dtype` run the interpreter's own generic loops
/// (module `generic`) where the float types have faster kernels.
fn generic(dtype: DType) -> bool {
    matches!(dtype, DType::I32 | DType::I64 | DType::F64)
}

/// The type of node `n` when it and all its operands are of one type whose
/// kernels run the interpreter's generic loops (`i32`, `i64`, `f64`).
pub(super) fn generic_type(g: &Graph, n: NodeId) -> Option<DType> {
    one_type(g, n).filter(|&dtype| generic(dtype))
}

/// A reduction (the last of `head`) that runs natively: over float values
/// on `reduce.rs`, over `i32`, `i64` or `f64` values as a generic loop; or
/// an `argmax` along an axis of fewer than 2^31 elements.
pub(super) fn native_reduce(g: &Graph, head: &[NodeId]) -> bool {
    let Some(&a) = head.last() else { return false };
    match g.node(a).op {
        Op::Reduce { .. } => one_float_type(g, a) || generic_type(g, a).is_some(),
        Op::ArgMax { axis, .. } => {
            let x = &g.node(g.inputs(a)[0]).ty;
            let typed = computes_as_f32(x.dtype) || generic(x.dtype);
            typed && x.shape.get(axis).is_some_and(|&n| n > 0 && i32::try_from(n).is_ok())
        }
        _ => false,
    }
}

/// A layout kernel that is one `all_reduce_sum` of `f32` or `f64` values
/// (module `lower`'s `all_reduce`).
pub(super) fn all_reduce(g: &Graph, nodes: &[NodeId]) -> bool {
    let dtype = |n: NodeId| g.node(n).ty.dtype;
    matches!(nodes, [n] if g.node(*n).op == Op::AllReduce && matches!(dtype(*n), DType::F32 | DType::F64))
}

/// A layout kernel that is one `scan`: the loop runs natively, its body
/// as a unit of its own (`passes::loops`, module `lower`'s `scan`).
pub(super) fn scan_loop(g: &Graph, nodes: &[NodeId]) -> bool {
    matches!(nodes, [n] if matches!(g.node(*n).op, Op::Scan(_)))
}

/// A layout kernel that is one `cumsum` or `argsort` of numbers (floats
/// computed as `f32`, or `i32`, `i64`, `f64`) along an axis of fewer than
/// 2^31 elements, as the loop that runs it over its operand's type.
pub(super) fn along_axis(g: &Graph, nodes: &[NodeId]) -> Option<(DType, Loop)> {
    let [n] = nodes else { return None };
    let x = &g.node(*g.inputs(*n).first()?).ty;
    let numbers = computes_as_f32(x.dtype) || generic(x.dtype);
    let lanes = |axis: usize| crate::tensor::along::lanes(&x.shape, axis);
    let kernel = match g.node(*n).op {
        Op::CumSum { axis, reverse } => Loop::CumSum { lanes: lanes(axis), reverse },
        Op::ArgSort { axis, descending } if i32::try_from(x.shape[axis]).is_ok() => {
            Loop::ArgSort { lanes: lanes(axis), descending }
        }
        _ => return None,
    };
    numbers.then_some((x.dtype, kernel))
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

/// A layout kernel that is one transpose (any rank, any type: its elements
/// move as words of their width), as the permutation module `permute` runs.
pub(super) fn layout_transpose(g: &Graph, nodes: &[NodeId]) -> Option<Permutation> {
    let [n] = nodes else { return None };
    let Op::Transpose { perm } = &g.node(*n).op else { return None };
    Some(Permutation::of(&g.node(*g.inputs(*n).first()?).ty.shape, perm))
}

/// An elementwise kernel that is one reshape of a value kept as a tensor
/// (not a float or `bool`, so not in the arena: integer labels), which
/// runs as a native copy (`Step::Reshape`).
pub(super) fn table_reshape(g: &Graph, nodes: &[NodeId]) -> bool {
    let [n] = nodes else { return false };
    let node = g.node(*n);
    matches!(node.op, Op::Reshape { .. }) && !(computes_as_f32(node.ty.dtype) || node.ty.dtype == DType::Bool)
}

/// The bits of `value` as one element of a `dtype` pad (`Copies::fill`):
/// the interpreter's conversion (`tensor::scalar_for`), a half-precision
/// value as the `f32` that rounds to it (native `f32` loops compute those).
fn fill_bits(value: f64, dtype: DType) -> u64 {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => u64::from(scalar_for::<f32>(value, dtype).to_bits()),
        DType::F64 => scalar_for::<f64>(value, dtype).to_bits(),
        // Two's complement bits, at the element's width.
        DType::I32 => u64::from(scalar_for::<i32>(value, dtype) as u32),
        DType::I64 => scalar_for::<i64>(value, dtype) as u64,
        DType::I8 => u64::from(scalar_for::<i32>(value, dtype).clamp(-128, 127) as u8),
        DType::Bool => u64::from(scalar_for::<bool>(value, dtype)),
    }
}

/// A layout kernel that is one slice, pad or concatenation (of any type:
/// its elements move as words of their width), as the block copies module
/// `kernels::window` runs.
pub(super) fn layout_window(g: &Graph, nodes: &[NodeId]) -> Option<Copies> {
    let [n] = nodes else { return None };
    let node = g.node(*n);
    let ins = g.inputs(*n);
    let one_type = one_type(g, *n).is_some();
    let shape = |i: usize| ins.get(i).map(|&x| g.node(x).ty.shape.clone());
    match &node.op {
        Op::Slice { start, step, len } if one_type => Some(Copies::slice(&shape(0)?, start, step, len)),
        Op::Pad { low, high, value } if one_type => {
            Some(Copies::pad(&shape(0)?, low, high, fill_bits(*value, node.ty.dtype)))
        }
        Op::Concat { axis } if one_type => {
            Some(Copies::concat(&ins.iter().map(|&x| g.node(x).ty.shape.clone()).collect::<Vec<_>>(), *axis))
        }
        _ => None,
    }
}

/// A layout kernel that is one gather (of any type: rows move as words of
/// their width) or one scatter-add (of a type with native arithmetic) with
/// integer indices, which run natively (`Step::Gather`, `Step::ScatterAdd`).
pub(super) fn index_op(g: &Graph, nodes: &[NodeId]) -> bool {
    let [n] = nodes else { return false };
    let node = g.node(*n);
    let ins = g.inputs(*n);
    let same = |i: usize| ins.get(i).is_some_and(|&x| g.node(x).ty.dtype == node.ty.dtype);
    let ints = |i: usize| ins.get(i).is_some_and(|&x| matches!(g.node(x).ty.dtype, DType::I32 | DType::I64));
    match node.op {
        Op::Gather { .. } => same(0) && ints(1),
        Op::ScatterAdd { .. } => (computes_as_f32(node.ty.dtype) || generic(node.ty.dtype)) && ints(0) && same(1),
        _ => false,
    }
}

/// A layout kernel that is one pooling or pooling gradient of `i32`, `i64`,
/// `f64` or `bool` values, as its generic loop (`generic_loop`).
pub(super) fn generic_layout(g: &Graph, nodes: &[NodeId]) -> Option<(DType, Loop)> {
    let [n] = nodes else { return None };
    generic_loop(g, *n).filter(|(_, kernel)| matches!(kernel, Loop::Pool { .. }))
}

/// The lowered geometry of a float convolution node.
pub(super) fn float_conv(g: &Graph, n: NodeId) -> Option<Conv> {
    let node = g.node(n);
    let ins = g.inputs(n);
    let all_f32 = one_float_type(g, n);
    let [a, b] = ins.as_slice() else { return None };
    Conv::of(&node.op, &g.node(*a).ty.shape, &g.node(*b).ty.shape, &node.ty.shape).filter(|_| all_f32)
}

/// A matmul, convolution (or gradient), pooling (or gradient) node `n` of
/// `i32`, `i64`, `f64` or `bool` values, as the generic loop that runs it
/// (`Step::Loop`), with its element type.
pub(super) fn generic_loop(g: &Graph, n: NodeId) -> Option<(DType, Loop)> {
    // (`bool` has no reductions, and its products, convolutions and
    // pools are or-of-ands and ors.)
    let dtype = one_type(g, n).filter(|&dtype| generic(dtype) || dtype == DType::Bool)?;
    let node = g.node(n);
    let ins = g.inputs(n);
    let shape = |i: usize| ins.get(i).map(|&x| g.node(x).ty.shape.clone());
    let four = |s: &[usize]| <[usize; 4]>::try_from(s).ok();
    let conv = |pass, x: &[usize], w: &[usize], y: &[usize], p| {
        Some(Loop::Conv { pass, params: p, shapes: [four(x)?, four(w)?, four(y)?] })
    };
    let kernel = match &node.op {
        Op::MatMul => {
            let (sa, sb) = (shape(0)?, shape(1)?);
            let r = sa.len();
            if r < 2 || sb.len() != r {
                return None;
            }
            Loop::MatMul([sa[..r - 2].iter().product(), sa[r - 2], sa[r - 1], sb[r - 1]])
        }
        &Op::Conv2d { stride, padding, dilation, groups } => {
            let p = ConvParams { stride, padding, dilation, groups };
            conv(ConvPass::Forward, &shape(0)?, &shape(1)?, &node.ty.shape, p)?
        }
        &Op::Conv2dGradInput { stride, padding, dilation, groups, input_shape } => {
            let p = ConvParams { stride, padding, dilation, groups };
            conv(ConvPass::GradInput, &input_shape, &shape(1)?, &shape(0)?, p)?
        }
        &Op::Conv2dGradFilter { stride, padding, dilation, groups, filter_shape } => {
            let p = ConvParams { stride, padding, dilation, groups };
            conv(ConvPass::GradFilter, &shape(0)?, &filter_shape, &shape(1)?, p)?
        }
        &Op::Pool2d { kind, size, stride, padding } => {
            let params = PoolParams { kind, size, stride, padding };
            Loop::Pool { params, xs: shape(0)?, ys: node.ty.shape.clone(), grad: false }
        }
        &Op::Pool2dGrad { kind, size, stride, padding } => {
            let params = PoolParams { kind, size, stride, padding };
            Loop::Pool { params, xs: shape(0)?, ys: shape(1)?, grad: true }
        }
        _ => return None,
    };
    Some((dtype, kernel))
}

pub(super) fn is_float_matmul(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    matches!(node.op, Op::MatMul) && one_float_type(g, n) && g.inputs(n).iter().all(|&i| g.node(i).ty.shape.len() >= 2)
}

/// Whether `n` is a quantized product (`Op::QuantMatMul`, module `int8_gemm`).
pub(super) fn is_quant_matmul(g: &Graph, n: NodeId) -> bool {
    matches!(g.node(n).op, Op::QuantMatMul { .. })
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
                || is_quant_matmul(g, k.nodes[0])
                || generic_loop(g, k.nodes[0]).is_some()
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
                || generic_layout(g, &k.nodes).is_some()
                || layout_transpose(g, &k.nodes).is_some()
                || index_op(g, &k.nodes)
                || along_axis(g, &k.nodes).is_some()
                || layout_window(g, &k.nodes).is_some()
                || scan_loop(g, &k.nodes)
                || all_reduce(g, &k.nodes);
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
