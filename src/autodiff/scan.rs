//! The vector–Jacobian product of `scan` (`ir::scan`): a reverse scan over
//! the body's own VJP, JAX's scan transpose.
//!
//! Contract: for `y = scan(body)(init, xs, captured)` with adjoint `gy`
//! (the packed adjoint of final carries and stacked outputs), the rule
//! emits a forward scan that also saves the carry entering each step, and
//! a backward scan running the other way whose carry is the carry's
//! adjoint plus, for each captured float value that is wanted, the sum of
//! its per-step gradients; its per-step outputs are the slices' gradients
//! of the wanted scanned values. The backward body is the forward body
//! (copied) followed by its reverse-mode gradient (`autodiff::gradients`
//! on the body graph), so anything the body may hold — a nested scan
//! included — is differentiated by the same rules. A forward scan that
//! already saves its carries is differentiated as the scan whose outputs
//! include them (their adjoint reaches the carries), so gradients of
//! gradients stay correct. Gradients are only taken in the scan's own
//! dtype: a wanted operand of another float dtype is E0901.
//!
//! The original forward scan is left in place: the saving one computes
//! the same loop once more, and `passes::cse` makes the original's readers
//! read the saving one's leading part (`ir::scan::ScanBody::saving`), so an
//! optimized training step runs the forward loop once.
//!
//! Example: for `h_t = tanh(x_t @ w + h_{t-1} @ u)` the backward body gets
//! `gh` (carry), `gu`, `gw` (accumulated) and reads the saved `h_{t-1}`,
//! `x_t` and `gy_t`; it returns `gh_{t-1}`, `gu + dh/du`, `gw + dh/dw`.

use super::builder::{BResult, Builder};
use crate::diag::{Code, Diagnostic};
use crate::ir::scan::{copy_nodes, part_ops, Part, ScanBody};
use crate::ir::{Graph, NodeId, Op, TensorType};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

pub(crate) fn vjp(
    b: &mut Builder,
    body: &ScanBody,
    operands: &[NodeId],
    gy: NodeId,
    wanted: &[bool],
) -> BResult<Vec<Option<NodeId>>> {
    let plain = body.as_plain();
    let (c, nx) = (plain.carries, plain.xs);
    let dtype = b.ty(gy).dtype;
    let float = |b: &Builder, i: usize| b.ty(operands[i]).dtype.is_float();
    for (i, &n) in operands.iter().enumerate() {
        if wanted[i] && float(b, i) && b.ty(n).dtype != dtype {
            return Err(Diagnostic::new(
                Code::Unsupported,
                format!("gradients through a {dtype} `scan` with respect to a {} value are not supported", b.ty(n)),
            )
            .label(b.span, "this scan")
            .help(format!("cast the value to {dtype} before the scan")));
        }
    }
    let grad_x: Vec<usize> = (0..nx).filter(|&j| wanted[c + j] && float(b, c + j)).collect();
    let grad_k: Vec<usize> = (c + nx..operands.len()).filter(|&i| wanted[i] && float(b, i)).collect();

    let saving = plain.saving();
    let forward = b.node(Op::Scan(Arc::new(saving.clone())), operands)?;
    let fparts = saving.parts();
    let gparts = plain.parts();
    let ny = plain.graph.outputs.len() - c;

    let backward = backward_body(&plain, &grad_x, &grad_k)?;
    let mut ops: Vec<NodeId> = Vec::new();
    for part in &gparts[..c] {
        ops.push(take(b, gy, part)?);
    }
    for &i in &grad_k {
        let ty = b.ty(operands[i]);
        ops.push(b.full(0.0, &ty)?);
    }
    for part in &fparts[c + ny..] {
        ops.push(take(b, forward, part)?);
    }
    ops.extend_from_slice(&operands[c..c + nx]);
    for part in &gparts[c..] {
        ops.push(take(b, gy, part)?);
    }
    ops.extend_from_slice(&operands[c + nx..]);
    let bparts = backward.parts();
    let back = b.node(Op::Scan(Arc::new(backward)), &ops)?;

    let mut grads: Vec<Option<NodeId>> = vec![None; operands.len()];
    for i in (0..c).filter(|&i| wanted[i]) {
        grads[i] = Some(take(b, back, &bparts[i])?);
    }
    for (m, &i) in grad_k.iter().enumerate() {
        grads[i] = Some(take(b, back, &bparts[c + m])?);
    }
    for (m, &j) in grad_x.iter().enumerate() {
        grads[c + j] = Some(take(b, back, &bparts[c + grad_k.len() + m])?);
    }
    Ok(grads)
}

/// Part `part` of the packed value `packed`.
fn take(b: &mut Builder, packed: NodeId, part: &Part) -> BResult<NodeId> {
    let [slice, reshape] = part_ops(part);
    let s = b.node(slice, &[packed])?;
    b.node(reshape, &[s])
}

/// The body of the backward scan. Slots: the carry adjoints and the
/// accumulated gradients of the captured values `grad_k` (its carry); the
/// saved carries, the slices and the outputs' adjoints (scanned); the
/// captured values. Outputs: the carry adjoints one step back, the
/// accumulated gradients, and the gradients of the slices `grad_x`.
fn backward_body(plain: &ScanBody, grad_x: &[usize], grad_k: &[usize]) -> BResult<ScanBody> {
    let (c, nx) = (plain.carries, plain.xs);
    let outs = plain.output_types();
    let ins = &plain.inputs;
    let mut types: Vec<TensorType> = ins[..c].to_vec();
    types.extend(grad_k.iter().map(|&i| ins[i].clone()));
    let carries = types.len();
    types.extend(ins[..c].iter().cloned());
    types.extend(ins[c..c + nx].iter().cloned());
    types.extend(outs[c..].iter().cloned());
    let xs = types.len() - carries;
    types.extend(ins[c + nx..].iter().cloned());

    let span = plain.graph.outputs.first().map(|&o| plain.graph.node(o).span).unwrap_or_default();
    let mut g = Graph::new();
    let slots: Vec<NodeId> = types
        .iter()
        .enumerate()
        .map(|(slot, ty)| g.add(Op::Slot { slot, ty: ty.clone() }, &[], ty.clone(), span))
        .collect();
    let (g_carry, g_acc) = (&slots[..c], &slots[c..carries]);
    let saved = &slots[carries..carries + c];
    let x_slices = &slots[carries + c..carries + c + nx];
    let g_ys = &slots[carries + c + nx..carries + xs];
    let captured = &slots[carries + xs..];

    // The forward step again, on the saved carry of this step.
    let mut map: HashMap<NodeId, NodeId> = HashMap::default();
    let mut order = Vec::new();
    for n in plain.graph.topo_order() {
        match plain.graph.node(n).op {
            Op::Slot { slot, .. } => {
                let to = match slot {
                    s if s < c => saved[s],
                    s if s < c + nx => x_slices[s - c],
                    s => captured[s - c - nx],
                };
                map.insert(n, to);
            }
            _ => order.push(n),
        }
    }
    copy_nodes(&plain.graph, &order, &mut g, &mut map).map_err(Diagnostic::internal)?;
    let step_outs: Vec<NodeId> = plain
        .graph
        .outputs
        .iter()
        .map(|o| map.get(o).copied().ok_or_else(|| Diagnostic::internal("scan: an output was not copied")))
        .collect::<Result<_, _>>()?;

    let mut b = Builder { g: &mut g, span };
    let out = flat_join(&mut b, &step_outs)?;
    let seed_parts: Vec<NodeId> = g_carry.iter().chain(g_ys).copied().collect();
    let seed = flat_join(&mut b, &seed_parts)?;
    let mut wrt: Vec<NodeId> = saved.to_vec();
    wrt.extend(grad_x.iter().map(|&j| x_slices[j]));
    wrt.extend(grad_k.iter().map(|&i| captured[i - c - nx]));
    let grads = super::gradients(b.g, out, Some(seed), &wrt)?;
    let mut b = Builder { g: &mut g, span };
    let mut outputs = Vec::with_capacity(wrt.len());
    for (&w, grad) in wrt.iter().zip(&grads) {
        outputs.push(match grad {
            Some(n) => *n,
            None => b.zeros_like(w)?,
        });
    }
    // Accumulate the captured values' gradients in the carry.
    for (m, acc) in g_acc.iter().enumerate() {
        let at = c + grad_x.len() + m;
        outputs[at] = b.binary(crate::ir::BinaryOp::Add, *acc, outputs[at])?;
    }
    // Outputs in carry order: carry adjoints, accumulators, then the slices' gradients.
    let (carry_grads, rest) = outputs.split_at(c);
    let (x_grads, acc_grads) = rest.split_at(grad_x.len());
    g.outputs = carry_grads.iter().chain(acc_grads).chain(x_grads).copied().collect();
    Ok(ScanBody {
        graph: g,
        inputs: types,
        carries,
        xs,
        length: plain.length,
        reverse: !plain.reverse,
        saves_carries: false,
    })
}

/// The nodes flattened and joined into one rank-1 value.
fn flat_join(b: &mut Builder, nodes: &[NodeId]) -> BResult<NodeId> {
    let mut flat = Vec::with_capacity(nodes.len());
    for &n in nodes {
        let numel = b.ty(n).numel();
        flat.push(b.reshape(n, &[numel])?);
    }
    match flat.as_slice() {
        [one] => Ok(*one),
        _ => b.node(Op::Concat { axis: 0 }, &flat),
    }
}
