//! Transposes that only feed matrix products are not materialized: the
//! product reads the transpose's source with its row and column strides
//! exchanged (`gemm` takes any strides), the way XLA and oneDNN fold a
//! transposed operand into the GEMM call.
//!
//! Contract: [`foldable`] returns the 2-D `f32` transposes of a unit that
//! are one-node `Layout` kernels, are not unit outputs, are read only as an
//! operand of unbatched `f32` matmuls that start a `Contraction` kernel,
//! and whose source keeps its value until the last of those matmuls has
//! run: the source is an input or a fixed value, or it lives in the arena
//! and no buffer sharing its bytes is written between the transpose's
//! position and that matmul's. Skipping such a transpose and reading its
//! source transposed gives the same products.
//!
//! Example: the backward pass of `x @ w` computes `gy @ transpose(w)`; the
//! transpose of a `[256, 256]` weight is 65,536 copied elements per step
//! that folding removes.

use super::unit::Ref;
use crate::ir::compiled::{CompiledUnit, KernelKind};
use crate::ir::{DType, Graph, NodeId, Op};
use std::collections::{HashMap, HashSet};

/// The transposes of `unit` that its matmuls can read through strides
/// (see the module docs). `outputs` are the unit's outputs, `loc` holds
/// each value's storage, `place` the byte offset the backend gives each
/// planned buffer.
pub(super) fn foldable(
    g: &Graph,
    unit: &CompiledUnit,
    outputs: &[NodeId],
    loc: &HashMap<NodeId, Ref>,
    place: &HashMap<NodeId, usize>,
) -> HashSet<NodeId> {
    let position: HashMap<usize, usize> = unit.order.iter().enumerate().map(|(p, &k)| (k, p)).collect();
    let kernel_of: HashMap<NodeId, usize> =
        unit.kernels.iter().enumerate().flat_map(|(ki, k)| k.nodes.iter().map(move |&n| (n, ki))).collect();
    let mut readers: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    for &n in unit.kernels.iter().flat_map(|k| &k.nodes) {
        for i in g.inputs(n) {
            readers.entry(i).or_default().push(n);
        }
    }
    let mut folded = HashSet::new();
    for (ki, k) in unit.kernels.iter().enumerate() {
        let [t] = k.nodes.as_slice() else { continue };
        let node = g.node(*t);
        let is_transpose = matches!(&node.op, Op::Transpose { perm } if perm == &[1, 0]) && node.ty.dtype == DType::F32;
        if k.kind != KernelKind::Layout || !is_transpose || outputs.contains(t) {
            continue;
        }
        let Some(users) = readers.get(t) else { continue };
        let all_matmul_anchors = users.iter().all(|&u| {
            let anchor = kernel_of.get(&u).is_some_and(|&uk| {
                unit.kernels[uk].kind == KernelKind::Contraction && unit.kernels[uk].nodes.first() == Some(&u)
            });
            anchor && matches!(g.node(u).op, Op::MatMul) && g.node(u).ty.shape.len() == 2
        });
        let (Some(&from), Some(last)) =
            (position.get(&ki), users.iter().filter_map(|u| position.get(kernel_of.get(u)?)).max())
        else {
            continue;
        };
        let source = g.inputs(*t)[0];
        if all_matmul_anchors && keeps_value(g, unit, loc, place, source, from, *last) {
            folded.insert(*t);
        }
    }
    folded
}

/// True when `source`'s storage is not written at positions `from + 1 ..= to`.
fn keeps_value(
    g: &Graph,
    unit: &CompiledUnit,
    loc: &HashMap<NodeId, Ref>,
    place: &HashMap<NodeId, usize>,
    source: NodeId,
    from: usize,
    to: usize,
) -> bool {
    match loc.get(&source) {
        Some(Ref::Input(_) | Ref::Fixed(_)) => true,
        Some(Ref::Arena(off)) => {
            let (lo, hi) = (off * 4, off * 4 + g.node(source).ty.numel() * 4);
            unit.buffers.iter().all(|b| {
                let Some(&at) = place.get(&b.node) else { return false };
                let overlaps = at < hi && lo < at + b.bytes;
                b.node == source || !overlaps || b.first <= from || b.first > to
            })
        }
        _ => false,
    }
}
