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
//! Residuals: the backward body does not compute the forward step again.
//! The values of the forward step its gradient reads (an LSTM's gates,
//! `tanh(c)`) are *residuals*, which the forward scan stacks as extra
//! per-step outputs after its own and the backward scan reads row by row,
//! as JAX's linearized scan does: the loop's products run once, not twice.
//! A value read through a reshape, broadcast, transpose or slice is saved
//! before it (the cheap op runs again); a value of another dtype than the
//! scan's (a comparison's mask) and one that does not vary over the loop
//! are computed again in the backward body from what it reads.
//!
//! The original forward scan is left in place: the saving one computes
//! the same loop once more, and `passes::cse` makes the original's readers
//! read the saving one's leading part (`ir::scan::ScanBody::saving`; its
//! residuals come after the original's outputs), so an optimized training
//! step runs the forward loop once.
//!
//! Example: for `h_t = tanh(x_t @ w + h_{t-1} @ u)` the forward scan also
//! stacks `h_t` itself (tanh's gradient reads its result), and the
//! backward body gets `gh` (carry), `gu`, `gw` (accumulated) and reads the
//! saved `h_{t-1}`, `x_t`, `h_t` and `gy_t`; it returns `gh_{t-1}`,
//! `gu + dh/du`, `gw + dh/dw`.

use super::builder::{BResult, Builder};
use crate::diag::{Code, Diagnostic};
use crate::ir::scan::{copy_nodes, part_ops, Part, ScanBody};
use crate::ir::{Graph, NodeId, Op, TensorType};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
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

    let gparts = plain.parts();
    let ny = plain.graph.outputs.len() - c;
    let (backward, residuals) = backward_body(&plain, &grad_x, &grad_k)?;
    // The forward loop, saving its carries and the residuals (as outputs
    // after its own).
    let mut with_residuals = plain.clone();
    with_residuals.graph.outputs.extend(&residuals);
    let saving = with_residuals.saving();
    let forward = b.node(Op::Scan(Arc::new(saving.clone())), operands)?;
    let fparts = saving.parts();
    let r = residuals.len();

    let mut ops: Vec<NodeId> = Vec::new();
    for part in &gparts[..c] {
        ops.push(take(b, gy, part)?);
    }
    for &i in &grad_k {
        let ty = b.ty(operands[i]);
        ops.push(b.full(0.0, &ty)?);
    }
    for part in &fparts[c + ny + r..] {
        ops.push(take(b, forward, part)?);
    }
    ops.extend_from_slice(&operands[c..c + nx]);
    for part in &gparts[c..] {
        ops.push(take(b, gy, part)?);
    }
    for part in &fparts[c + ny..c + ny + r] {
        ops.push(take(b, forward, part)?);
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

/// The body of the backward scan, and the residuals it reads (nodes of
/// `plain`'s body, see the module docs). Slots: the carry adjoints and the
/// accumulated gradients of the captured values `grad_k` (its carry); the
/// saved carries, the slices, the outputs' adjoints and the residuals
/// (scanned); the captured values. Outputs: the carry adjoints one step
/// back, the accumulated gradients, and the gradients of the slices
/// `grad_x`.
fn backward_body(plain: &ScanBody, grad_x: &[usize], grad_k: &[usize]) -> BResult<(ScanBody, Vec<NodeId>)> {
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

    // The forward step's values the gradient reads become scanned slots.
    let forward_of: HashMap<NodeId, NodeId> = map
        .iter()
        .filter(|(p, _)| !matches!(plain.graph.node(**p).op, Op::Slot { .. }))
        .map(|(&p, &n)| (n, p))
        .collect();
    let varying = depends_on(&g, saved.iter().chain(x_slices));
    let cut = residual_cut(&g, &forward_of, &varying, dtype_of(plain));
    let residual_types: Vec<TensorType> = cut.iter().map(|&n| g.node(n).ty.clone()).collect();
    let mut new_types = types[..carries + xs].to_vec();
    new_types.extend(residual_types.iter().cloned());
    new_types.extend(types[carries + xs..].iter().cloned());
    let mut body = Graph::new();
    let mut remap: HashMap<NodeId, NodeId> = HashMap::default();
    for (slot, ty) in new_types.iter().enumerate() {
        let id = body.add(Op::Slot { slot, ty: ty.clone() }, &[], ty.clone(), span);
        let old = match slot {
            s if s < carries + xs => Some(slots[s]),
            s if s < carries + xs + cut.len() => Some(cut[s - carries - xs]),
            s => slots.get(s - cut.len()).copied(),
        };
        remap.insert(old.ok_or_else(|| Diagnostic::internal("scan: a slot out of range"))?, id);
    }
    let order = needed_order(&g, &remap);
    copy_nodes(&g, &order, &mut body, &mut remap).map_err(Diagnostic::internal)?;
    body.outputs = g
        .outputs
        .iter()
        .map(|o| remap.get(o).copied().ok_or_else(|| Diagnostic::internal("scan: an output was not copied")))
        .collect::<Result<_, _>>()?;
    let residuals = cut.iter().map(|n| forward_of[n]).collect();
    let body = ScanBody {
        graph: body,
        inputs: new_types,
        carries,
        xs: xs + cut.len(),
        length: plain.length,
        reverse: !plain.reverse,
        saves_carries: false,
    };
    Ok((body, residuals))
}

/// The one dtype of the loop's outputs (that of its packed value).
fn dtype_of(plain: &ScanBody) -> Option<crate::ir::DType> {
    plain.dtype()
}

/// The nodes of `g` computed from `roots` (them included).
fn depends_on<'a>(g: &Graph, roots: impl Iterator<Item = &'a NodeId>) -> HashSet<NodeId> {
    let mut seen: HashSet<NodeId> = HashSet::default();
    let mut stack: Vec<NodeId> = roots.copied().collect();
    while let Some(n) = stack.pop() {
        if seen.insert(n) {
            stack.extend(g.users(n));
        }
    }
    seen
}

/// The residuals of a backward body `g` (module docs): the forward nodes
/// (`forward_of`'s keys) that the rest of what `g`'s outputs need reads,
/// each saved in place of the views, other-typed values and loop
/// invariants the gradient reads through it, in a fixed order.
fn residual_cut(
    g: &Graph,
    forward_of: &HashMap<NodeId, NodeId>,
    varying: &HashSet<NodeId>,
    dtype: Option<crate::ir::DType>,
) -> Vec<NodeId> {
    let needed = needed_order(g, &HashMap::default());
    let needed_set: HashSet<NodeId> = needed.iter().copied().collect();
    let is_forward = |n: &NodeId| forward_of.contains_key(n);
    // Forward nodes the gradient part reads directly.
    let mut stack: Vec<NodeId> = needed
        .iter()
        .filter(|n| !is_forward(n))
        .flat_map(|&n| g.inputs(n))
        .filter(|i| is_forward(i) && needed_set.contains(i))
        .collect();
    let mut cut: HashSet<NodeId> = HashSet::default();
    let mut seen: HashSet<NodeId> = HashSet::default();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        let node = g.node(n);
        let view =
            matches!(node.op, Op::Reshape { .. } | Op::BroadcastTo { .. } | Op::Transpose { .. } | Op::Slice { .. });
        let recomputed = view || Some(node.ty.dtype) != dtype || !varying.contains(&n);
        if recomputed {
            stack.extend(g.inputs(n).into_iter().filter(|i| is_forward(i)));
        } else {
            cut.insert(n);
        }
    }
    needed.into_iter().filter(|n| cut.contains(n)).collect()
}

/// The nodes `g`'s outputs need, in a topological order, not looking past
/// the nodes `given` already supplies (they are not listed).
fn needed_order(g: &Graph, given: &HashMap<NodeId, NodeId>) -> Vec<NodeId> {
    let mut needed: HashSet<NodeId> = HashSet::default();
    let mut stack: Vec<NodeId> = g.outputs.iter().copied().filter(|o| !given.contains_key(o)).collect();
    while let Some(n) = stack.pop() {
        if needed.insert(n) {
            stack.extend(g.inputs(n).into_iter().filter(|i| !given.contains_key(i)));
        }
    }
    g.topo_order().into_iter().filter(|n| needed.contains(n)).collect()
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
