//! Which nodes a region computes, and giving regions that share computed
//! nodes their own copies of them.
//!
//! Contract: [`varying`] lists the nodes of a region that depend on its
//! input slots — what runs on every evaluation — in the given topological
//! order. [`unshare`] rewrites the graph so that no two regions of a list
//! have a varying node in common: each region after the first gets its own
//! copy of every node it shares with an earlier one (slot nodes included;
//! a copied slot keeps its slot number, so it is bound like the original),
//! and its own nodes and outputs read the copies. Values are unchanged;
//! the optimizer's compilation units can then partition the nodes, one
//! unit per region.
//!
//! Example: an `eval` metric traced once for batches of 256 and of 103
//! reads the same parameter slots in both regions; after `unshare` the
//! region for 103 reads copies of them, so its unit holds its own inputs.

use super::graph::{Graph, NodeId};
use super::op::Op;
use super::plan::Region;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// The nodes of `region` that depend on its input slots, in topological
/// order (`rank` gives each node's position).
pub fn varying(g: &Graph, region: &Region, rank: &HashMap<NodeId, usize>) -> Vec<NodeId> {
    let slots: HashSet<usize> = region.inputs.iter().map(|(s, _)| *s).collect();
    let mut needed: HashSet<NodeId> = HashSet::default();
    let mut stack: Vec<NodeId> = region.outputs.clone();
    while let Some(n) = stack.pop() {
        if g.contains(n) && needed.insert(n) {
            stack.extend(g.inputs(n));
        }
    }
    let mut sorted: Vec<NodeId> = needed.into_iter().collect();
    sorted.sort_by_key(|n| rank.get(n).copied().unwrap_or(usize::MAX));
    let mut vary: HashSet<NodeId> = HashSet::default();
    let mut out = Vec::new();
    for n in sorted {
        let is_input = matches!(&g.node(n).op, Op::Slot { slot, .. } if slots.contains(slot));
        if is_input || g.inputs(n).iter().any(|i| vary.contains(i)) {
            vary.insert(n);
            out.push(n);
        }
    }
    out
}

/// Gives each of `regions` after the first its own copy of the varying
/// nodes it shares with earlier ones (see the module docs).
pub fn unshare(g: &mut Graph, regions: &mut [&mut Region]) {
    let rank: HashMap<NodeId, usize> = g.topo_order().into_iter().enumerate().map(|(i, n)| (n, i)).collect();
    let mut taken: HashSet<NodeId> = HashSet::default();
    for region in regions.iter_mut() {
        let mine = varying(g, region, &rank);
        let mut copy: HashMap<NodeId, NodeId> = HashMap::default();
        for &n in &mine {
            if !taken.contains(&n) {
                continue;
            }
            let node = g.node(n).clone();
            let inputs: Vec<NodeId> = g.inputs(n).into_iter().map(|i| copy.get(&i).copied().unwrap_or(i)).collect();
            copy.insert(n, g.add(node.op, &inputs, node.ty, node.span));
        }
        for &n in mine.iter().filter(|n| !copy.contains_key(n)) {
            for i in g.inputs(n) {
                if let Some(&c) = copy.get(&i) {
                    g.redirect(i, c, n);
                }
            }
        }
        for out in &mut region.outputs {
            *out = copy.get(out).copied().unwrap_or(*out);
        }
        taken.extend(mine.iter().map(|n| copy.get(n).copied().unwrap_or(*n)));
    }
}

#[cfg(test)]
mod tests {
    use super::{unshare, varying};
    use crate::diag::Span;
    use crate::ir::plan::{Region, RegionId};
    use crate::ir::{DType, Graph, Op, TensorType, UnaryOp};
    use rustc_hash::FxHashMap as HashMap;

    #[test]
    fn regions_sharing_a_slot_and_its_users_get_copies() {
        let ty = TensorType::new(DType::F32, vec![2]);
        let mut g = Graph::new();
        let w = g.add(Op::Slot { slot: 1, ty: ty.clone() }, &[], ty.clone(), Span::default());
        let x = g.add(Op::Slot { slot: 2, ty: ty.clone() }, &[], ty.clone(), Span::default());
        let y = g.add(Op::Slot { slot: 3, ty: ty.clone() }, &[], ty.clone(), Span::default());
        let ew = g.add(Op::Unary(UnaryOp::Exp), &[w], ty.clone(), Span::default());
        let a = g.add(Op::Binary(crate::ir::BinaryOp::Add), &[ew, x], ty.clone(), Span::default());
        let b = g.add(Op::Binary(crate::ir::BinaryOp::Mul), &[ew, y], ty.clone(), Span::default());
        let mut first = Region { id: RegionId(1), inputs: vec![(2, ty.clone()), (1, ty.clone())], outputs: vec![a] };
        let mut second =
            Region { id: RegionId(2), inputs: vec![(3, ty.clone()), (1, ty.clone())], outputs: vec![b, ew] };
        unshare(&mut g, &mut [&mut first, &mut second]);
        let rank: HashMap<_, _> = g.topo_order().into_iter().enumerate().map(|(i, n)| (n, i)).collect();
        let (v1, v2) = (varying(&g, &first, &rank), varying(&g, &second, &rank));
        assert_eq!(v1, vec![w, x, ew, a]);
        assert_eq!(v2.len(), 4, "{v2:?}");
        assert!(v2.iter().all(|n| !v1.contains(n)), "{v1:?} {v2:?}");
        // The copies compute the same: a slot of the same number, its exp.
        let [y2, w2, ew2, b2] = v2[..] else { unreachable!() };
        assert_eq!((y2, b2), (y, b));
        assert_ne!((w2, ew2), (w, ew));
        assert_eq!(g.node(w2).op, Op::Slot { slot: 1, ty: ty.clone() });
        assert_eq!((g.inputs(ew2), g.inputs(b)), (vec![w2], vec![ew2, y]));
        assert_eq!(second.outputs, vec![b, ew2]);
    }
}
