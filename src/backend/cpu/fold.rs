//! Transposes that only feed matrix products as their left operand are not
//! materialized: the product reads the transpose's source with its row and
//! column strides exchanged (`gemm` takes any strides), the way XLA and
//! oneDNN fold a transposed operand into the GEMM call.
//!
//! Contract: [`foldable`] returns the transposes of a unit that
//! `CompiledUnit::matmul_operand_transposes` lists and the memory plan
//! kept as views (`CompiledUnit::views`, from the CPU's `Target::views`)
//! (2-D `f32` transposes
//! read only as the left operand of unbatched matmuls that start a
//! `Contraction` kernel, or as the right operand of one-row products;
//! 2-D `bf16` transposes read as either operand of such a `bf16` product,
//! whose kernel packs both),
//! are not unit outputs, and whose source keeps its value until
//! the last of those matmuls has run: the source is an input or a fixed
//! value, or it lives in the arena and no buffer sharing its bytes is
//! written between the transpose's position and that matmul's (the memory
//! plan keeps it alive that long). Skipping such a transpose and reading
//! its source transposed gives the same products.
//!
//! Example: the backward pass of `x @ w` computes `transpose(x) @ gy`; the
//! transpose of a `[64, 784]` batch is 50,176 copied elements per step that
//! folding removes. Its other product, `gy @ transpose(w)`, reads a
//! materialized transpose (module `transpose`): `gemm` packs a transposed
//! right operand more slowly than the copy costs.

use super::unit::Ref;
use crate::ir::compiled::CompiledUnit;
use crate::ir::{Graph, NodeId};
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
    let at = |n: &NodeId| kernel_of.get(n).and_then(|k| position.get(k)).copied();
    let mut folded = HashSet::new();
    // Only the transposes the memory plan kept the sources alive for.
    let planned: HashSet<(NodeId, NodeId)> = unit.views.iter().copied().collect();
    for (t, source) in unit.matmul_operand_transposes(g).into_iter().filter(|v| planned.contains(v)) {
        if outputs.contains(&t) {
            continue;
        }
        let readers = unit.kernels.iter().flat_map(|k| &k.nodes).filter(|&&n| g.inputs(n).contains(&t));
        let (Some(from), Some(last)) = (at(&t), readers.filter_map(at).max()) else { continue };
        if keeps_value(g, unit, loc, place, source, from, last) {
            folded.insert(t);
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
        Some(&Ref::Arena(off) | &Ref::Half(off)) => {
            let bytes = g.node(source).ty.size_bytes();
            let lo = if matches!(loc.get(&source), Some(Ref::Half(_))) { off } else { off * 4 };
            let hi = lo + bytes;
            unit.buffers.iter().all(|b| {
                let Some(&at) = place.get(&b.node) else { return false };
                let overlaps = at < hi && lo < at + b.bytes;
                b.node == source || !overlaps || b.first <= from || b.first > to
            })
        }
        _ => false,
    }
}
