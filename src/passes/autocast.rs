//! Mixed precision as a pass over the training steps (an autocast policy):
//! in a step whose train block says `precision = "bf16"` (or `"f16"`, or
//! whose run says `--precision`), every matrix product and convolution of
//! the forward pass takes its `f32` operands in the low type; everything
//! else stays `f32`.
//!
//! Contract: runs before `autodiff` (it is part of the lowering, like it:
//! `Session::check` runs both, and neither can be disabled), so the
//! gradients are built from the rewritten forward pass. For each step
//! region of a plan with `TrainPlan::precision == Some(low)`, each
//! `matmul` / `conv2d` node (a convolution over at least
//! `ir::MIN_NARROW_CONV_CHANNELS` input channels) that the loss depends on and whose
//! operands are both `f32` becomes `cast(matmul(cast(a, low), cast(b, low)), f32)` for
//! the readers in that step only (an evaluation region sharing the node
//! keeps computing in `f32`). What follows from it:
//! - the product accumulates in `f32` and rounds its result to `low` once
//!   (the interpreter's semantics of a `low` matmul; PyTorch's autocast
//!   does the same), and the `f32` reader widens it exactly;
//! - autodiff turns each cast into a cast back, so both gradient products
//!   of each rewritten node (`dy @ transpose(w)`, `transpose(x) @ dy`) run
//!   on `low` operands too, and the operands saved for the backward pass
//!   are the `low` casts: half the memory of the `f32` activations;
//! - parameters, optimizer states, the updates, reductions, softmax,
//!   normalizations and the loss stay `f32` (they are not products);
//! - the products inside a `scan` body are left as they are (its body is a
//!   program of its own).
//!
//! The pass is idempotent: a rewritten product's operands are no longer
//! `f32`, and the backward products autodiff builds are not ancestors of
//! the loss.
//!
//! Example: `loss = cross_entropy(x @ w + b, y)` with `precision = "bf16"`
//! becomes `cast(cast(x, bf16) @ cast(w, bf16), f32) + b`; `--dump-after
//! autocast` shows it, `--dump-after autodiff` the bf16 gradient products.

use crate::diag::Diagnostic;
use crate::ir::{DType, Effect, Graph, NodeId, Op, Program, TensorType};
use crate::passes::PassCtx;
use rustc_hash::FxHashSet as HashSet;

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    let mut work: Vec<(DType, Vec<NodeId>)> = Vec::new();
    for e in &p.effects {
        if let Effect::Train(t) = e {
            if let Some(low) = t.precision {
                work.extend(loss_regions(t).filter(|r| !r.outputs.is_empty()).map(|r| (low, r.outputs.clone())));
            }
        }
    }
    for (low, outputs) in work {
        cast_products(&mut p.graph, &outputs, low);
    }
    Ok(())
}

/// The regions of a train block that compute its loss (their first
/// output): the steps, or a data-parallel step's gradient halves and
/// fused steps.
fn loss_regions(t: &crate::ir::plan::TrainPlan) -> impl Iterator<Item = &crate::ir::plan::Region> {
    let parallel = t.parallel.iter().flat_map(|p| p.gradients.iter().chain(&p.fused).map(|(_, r)| r));
    t.steps.iter().map(|(_, r)| r).chain(parallel)
}

/// Whether `n` is a product the policy puts in the low type: a matmul, or
/// a forward convolution over at least `ir::MIN_NARROW_CONV_CHANNELS` input
/// channels, of two `f32` operands. (On the bench CNN at bf16 its first
/// layer, over one channel, took 0.58 ms a step against 0.16 ms in `f32`,
/// where the CPU's direct kernel also writes the max pool and records the
/// maxima its gradients read.)
fn is_f32_product(g: &Graph, n: NodeId) -> bool {
    let channels = |w: NodeId| g.node(w).ty.shape.get(2).copied().unwrap_or(0);
    let policy = match g.node(n).op {
        Op::MatMul => true,
        Op::Conv2d { .. } => g.inputs(n).get(1).is_some_and(|&w| channels(w) >= crate::ir::MIN_NARROW_CONV_CHANNELS),
        _ => false,
    };
    policy && g.node(n).ty.dtype == DType::F32 && g.inputs(n).iter().all(|&i| g.node(i).ty.dtype == DType::F32)
}

/// The nodes `roots` depend on (themselves included).
fn ancestors(g: &Graph, roots: &[NodeId]) -> HashSet<NodeId> {
    let mut seen = HashSet::default();
    let mut stack = roots.to_vec();
    while let Some(n) = stack.pop() {
        if seen.insert(n) {
            stack.extend(g.inputs(n));
        }
    }
    seen
}

/// Rewrites the `f32` products the loss (`outputs[0]`) of a step with
/// outputs `outputs` depends on (see the module docs).
fn cast_products(g: &mut Graph, outputs: &[NodeId], low: DType) {
    let forward = ancestors(g, &outputs[..1]);
    // The step's nodes: the readers that take the rewritten product (a
    // model state's update reading a convolution as well as the loss).
    let step = ancestors(g, outputs);
    let products: Vec<NodeId> =
        g.topo_order().into_iter().filter(|&n| forward.contains(&n) && is_f32_product(g, n)).collect();
    for n in products {
        let node = g.node(n).clone();
        let span = node.span;
        let narrowed: Vec<NodeId> = g
            .inputs(n)
            .into_iter()
            .map(|i| {
                let ty = TensorType::new(low, g.node(i).ty.shape.clone());
                g.add(Op::Cast(low), &[i], ty, span)
            })
            .collect();
        let product = g.add(node.op.clone(), &narrowed, TensorType::new(low, node.ty.shape.clone()), span);
        let widened = g.add(Op::Cast(DType::F32), &[product], node.ty.clone(), span);
        // Only this step's readers: another region reading the same node
        // keeps its f32 product.
        for reader in g.users(n).into_iter().filter(|u| step.contains(u)) {
            g.redirect(n, widened, reader);
        }
        // A step's values are read only by its nodes and its outputs (a
        // product is never one), so an f32 product no reader is left to is
        // gone.
        if g.users(n).is_empty() && !outputs.contains(&n) {
            g.remove(n);
        }
    }
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    for e in &p.effects {
        let Effect::Train(t) = e else { continue };
        if t.precision.is_none() {
            continue;
        }
        for r in loss_regions(t) {
            let Some(&loss) = r.outputs.first() else { continue };
            let forward = ancestors(&p.graph, &[loss]);
            if let Some(n) = forward.iter().find(|&&n| is_f32_product(&p.graph, n)) {
                return Err(format!("the f32 product %{} is still on the way to a step's loss", n.index()));
            }
        }
    }
    Ok(())
}
