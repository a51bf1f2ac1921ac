//! Map vectorization (tf.data's `map_vectorization`): `map(f) |> … |>
//! batch(n)` becomes `… |> batch(n) |> f over whole batches`, so `f` runs
//! once per batch of `n` — as a few fused kernels over `n` times the data —
//! instead of once per element with the per-run overhead each time.
//!
//! Contract: a `Map` is moved when
//! - its function draws no random numbers (no element key: a key is drawn
//!   per element, so the draws would change);
//! - every node of the function that depends on the element is an op with
//!   an exact batched form (elementwise ops, `where`, casts, reshapes,
//!   transposes and broadcasts), so the batched function computes, bit for
//!   bit, the stack of the function's results on the batch's elements, and
//!   none can fail (integer `/` and `^` can: their errors name the element);
//! - only `shuffle`, `repeat`, `take` and `skip` stand between it and a
//!   `batch(n)`: they move elements without reading them, so applying `f`
//!   before or after them gives the same elements in the same order. A
//!   `prefetch` (which would move the work onto the consumer's thread),
//!   `filter`, `cache`, `split` or another `map` keeps the `Map` in place.
//!
//! The `Map` (and its `parallel` marker) is replaced by a `BatchedMap`
//! right after the `batch`, which keeps the original region for a shorter
//! last batch; the marker follows it, so workers then map whole batches.
//! Postcondition: no `Map` that satisfies the conditions above is left.
//!
//! Example: `load_idx(…) |> map(fn(img, y) = (reshape(img, [784]) / 255.0,
//! y), parallel = auto) |> shuffle(60000) |> batch(64)` becomes
//! `load_idx(…) |> shuffle(60000) |> batch(64) |> batched_map(f32[64, 28,
//! 28] → f32[64, 784]) |> parallel(auto)`.

use crate::diag::{Diagnostic, Span};
use crate::ir::plan::{Dataset, Region, RegionId, Transform};
use crate::ir::{BinaryOp, Effect, Graph, NodeId, Op, Program, TensorType};
use crate::passes::PassCtx;
use rustc_hash::FxHashMap as HashMap;

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    let mut next_slot = max_slot(p) + 1;
    let mut next_region = crate::passes::units::regions(p).iter().map(|r| r.region.id.0).max().unwrap_or(0);
    let Program { graph, effects, .. } = p;
    for d in datasets_mut(effects) {
        // Each rewrite removes a `Map`, so this ends.
        while let Some((at, batch_at, n)) = candidate(graph, d) {
            let Transform::Map(element) = d.transforms[at].clone() else { break };
            next_region += 1;
            let id = RegionId(next_region);
            let Some(batched) = batch_region(graph, &element, n, id, &mut next_slot) else { break };
            let parallel = match d.transforms.get(at + 1) {
                Some(Transform::Parallel(w)) => Some(*w),
                _ => None,
            };
            let mut moved = vec![Transform::BatchedMap { batched, element, n }];
            moved.extend(parallel.map(Transform::Parallel));
            let removed = 1 + usize::from(parallel.is_some());
            d.transforms.splice(batch_at + 1..batch_at + 1, moved);
            d.transforms.drain(at..at + removed);
        }
    }
    Ok(())
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    let mut p = p.clone();
    let Program { graph, effects, .. } = &mut p;
    for d in datasets_mut(effects) {
        if let Some((at, _, _)) = candidate(graph, d) {
            return Err(format!("transform {at} is a `map` that could run on whole batches"));
        }
    }
    Ok(())
}

/// The first `Map` of `d` that can move: its position, the position of the
/// `batch` it moves behind, and the batch size.
fn candidate(g: &Graph, d: &Dataset) -> Option<(usize, usize, usize)> {
    d.transforms.iter().enumerate().find_map(|(at, t)| {
        let Transform::Map(r) = t else { return None };
        let mut j = at + 1;
        if matches!(d.transforms.get(j), Some(Transform::Parallel(_))) {
            j += 1;
        }
        while let Some(t) = d.transforms.get(j) {
            match t {
                Transform::Shuffle { .. } | Transform::Repeat(_) | Transform::Take(_) | Transform::Skip(_) => j += 1,
                Transform::Batch { n, .. } if vectorizable(g, r) => return Some((at, j, *n)),
                _ => return None,
            }
        }
        None
    })
}

/// Whether every node of `r` that depends on its inputs has a batched form
/// and cannot fail. A function that draws random numbers per element reads
/// the element key through a `Random` node, which has no batched form, so it
/// stays per element; so does one that may fail (integer `/` or `^`), whose
/// error must name the element.
fn vectorizable(g: &Graph, r: &Region) -> bool {
    varying_nodes(g, r).iter().all(|&n| {
        let node = g.node(n);
        let may_fail = matches!(node.op, Op::Binary(BinaryOp::Div | BinaryOp::Pow)) && !node.ty.dtype.is_float();
        !may_fail && batched_op(&node.op, 1).is_some()
    })
}

/// The nodes of `r` that depend on its inputs, in topological order.
fn varying_nodes(g: &Graph, r: &Region) -> Vec<NodeId> {
    let rank: HashMap<NodeId, usize> = g.topo_order().into_iter().enumerate().map(|(i, n)| (n, i)).collect();
    super::units::varying(g, r, &rank)
}

/// `op` on values with a new leading axis of `n` elements, when that
/// computes the op on each element (its attributes extended past the new
/// axis). A `broadcast_to` needs its operand at the target's rank first
/// (see `batch_region`).
fn batched_op(op: &Op, n: usize) -> Option<Op> {
    let front = |first: usize, v: &[usize]| std::iter::once(first).chain(v.iter().copied()).collect::<Vec<_>>();
    Some(match op {
        Op::Slot { .. } | Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Cast(_) => op.clone(),
        Op::Reshape { shape } => Op::Reshape { shape: front(n, shape) },
        Op::BroadcastTo { shape } => Op::BroadcastTo { shape: front(n, shape) },
        Op::Transpose { perm } => {
            Op::Transpose { perm: std::iter::once(0).chain(perm.iter().map(|&a| a + 1)).collect() }
        }
        Op::Slice { start, step, len } => Op::Slice {
            start: front(0, start),
            step: std::iter::once(1).chain(step.iter().copied()).collect(),
            len: front(n, len),
        },
        Op::Pad { low, high, value } => Op::Pad { low: front(0, low), high: front(0, high), value: *value },
        Op::Concat { axis } => Op::Concat { axis: axis + 1 },
        _ => return None,
    })
}

/// The batched copy of `element` for batches of `n`: new slots of type
/// `[n, …]` for its inputs, and a batched node for each node that depends
/// on them. Values that do not depend on the element are broadcast.
fn batch_region(g: &mut Graph, element: &Region, n: usize, id: RegionId, next_slot: &mut usize) -> Option<Region> {
    let batched_ty = |t: &TensorType| TensorType::new(t.dtype, std::iter::once(n).chain(t.shape.clone()).collect());
    let mut slots: HashMap<usize, (usize, TensorType)> = HashMap::default();
    let inputs: Vec<(usize, TensorType)> = element
        .inputs
        .iter()
        .map(|(slot, ty)| {
            let new = (*next_slot, batched_ty(ty));
            *next_slot += 1;
            slots.insert(*slot, new.clone());
            new
        })
        .collect();
    let mut batched: HashMap<NodeId, NodeId> = HashMap::default();
    for id in varying_nodes(g, element) {
        let node = g.node(id).clone();
        let span = node.span;
        let ty = batched_ty(&node.ty);
        let new = match &node.op {
            Op::Slot { slot, .. } => {
                let (slot, ty) = slots.get(slot)?.clone();
                g.add(Op::Slot { slot, ty: ty.clone() }, &[], ty, span)
            }
            Op::BroadcastTo { shape } => {
                // NumPy aligns shapes on the right: give the batched operand
                // the target's rank first, so the batch axis stays in front.
                let x = *batched.get(&g.inputs(id)[0])?;
                let x_ty = g.node(x).ty.clone();
                let missing = shape.len() + 1 - x_ty.rank();
                let x = if missing > 0 {
                    let s: Vec<usize> = std::iter::once(n)
                        .chain(std::iter::repeat_n(1, missing))
                        .chain(x_ty.shape[1..].to_vec())
                        .collect();
                    let t = TensorType::new(x_ty.dtype, s.clone());
                    g.add(Op::Reshape { shape: s }, &[x], t, span)
                } else {
                    x
                };
                g.add(batched_op(&node.op, n)?, &[x], ty, span)
            }
            op => {
                let ins: Vec<NodeId> =
                    g.inputs(id).into_iter().map(|i| operand(g, &batched, i, n, span)).collect::<Option<_>>()?;
                g.add(batched_op(op, n)?, &ins, ty, span)
            }
        };
        batched.insert(id, new);
    }
    let outputs = element
        .outputs
        .iter()
        .map(|&o| {
            let span = g.node(o).span;
            operand(g, &batched, o, n, span)
        })
        .collect::<Option<_>>()?;
    Some(Region { id, inputs, outputs })
}

/// The batched value of `id`: its batched node, or — for a value the same
/// for every element — that value broadcast over the batch.
fn operand(g: &mut Graph, batched: &HashMap<NodeId, NodeId>, id: NodeId, n: usize, span: Span) -> Option<NodeId> {
    if let Some(&b) = batched.get(&id) {
        return Some(b);
    }
    let t = g.node(id).ty.clone();
    let shape: Vec<usize> = std::iter::once(n).chain(t.shape.clone()).collect();
    Some(g.add(Op::BroadcastTo { shape: shape.clone() }, &[id], TensorType::new(t.dtype, shape), span))
}

/// Every dataset the effects run.
fn datasets_mut(effects: &mut [Effect]) -> Vec<&mut Dataset> {
    let mut out = Vec::new();
    for e in effects {
        match e {
            Effect::Train(t) => {
                out.push(&mut t.data);
                out.extend(t.evals.iter_mut().map(|ev| &mut ev.reduce.data));
            }
            Effect::Reduce { plan, .. } => out.push(&mut plan.data),
            Effect::Collect { data, .. } => out.push(&mut **data),
            _ => {}
        }
    }
    out
}

/// The largest slot number the program uses (graph slots, region inputs,
/// slots effects fill), so new slots never collide with one.
fn max_slot(p: &Program) -> usize {
    let mut max = 0;
    for id in p.graph.node_ids() {
        if let Op::Slot { slot, .. } = p.graph.node(id).op {
            max = max.max(slot);
        }
    }
    let regions = crate::passes::units::regions(p);
    for r in &regions {
        max = r.region.inputs.iter().map(|(s, _)| *s).fold(max, usize::max);
    }
    for e in &p.effects {
        let filled: Vec<usize> = match e {
            Effect::Train(t) => {
                t.result_slots.iter().chain(t.evals.iter().flat_map(|e| &e.param_slots)).copied().collect()
            }
            Effect::Reduce { slot, .. } => vec![*slot],
            Effect::Collect { slots, .. } => slots.clone(),
            Effect::Load { tensors, states, .. } => {
                tensors.iter().map(|(_, _, s)| *s).chain(states.iter().map(|(_, _, s, _)| *s)).collect()
            }
            _ => Vec::new(),
        };
        max = filled.into_iter().fold(max, usize::max);
    }
    max
}
