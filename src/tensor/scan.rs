//! The meaning of `scan` (`ir::scan`): the body evaluated once per step,
//! node by node with `eval_node`, its carry threaded from step to step.
//!
//! Contract: `scan(body, operands)` returns the packed value `ir::scan`
//! describes — the final carries, the stacked per-step outputs (row `t` is
//! step `t`'s, also for a reverse scan) and, if the body saves them, the
//! stacked carries entering each step — with the result type `infer`
//! gives. A step's failure (an integer division by zero inside the body)
//! is the body's diagnostic, naming the step. Zero steps return the initial
//! carries and empty stacks.
//!
//! Example: a running sum over `[1, 2, 3]` from `0` whose `y` is the carry
//! before each step packs `[6, 0, 1, 3]`.

use super::value::{array, flat, Tensor};
use super::{eval_node, Data, Elem};
use crate::diag::Diagnostic;
use crate::ir::scan::ScanBody;
use crate::ir::{NodeId, Op, TensorType};
use ndarray::Axis;

/// Runs the loop of `body` over `operands` (carries, scanned tensors,
/// captured values) into its packed value of type `ty`.
pub fn scan(body: &ScanBody, operands: &[&Tensor], ty: &TensorType) -> Result<Data, Diagnostic> {
    let order = body.graph.topo_order();
    drive(body, operands, ty, &mut |bound| run_body(body, &order, bound))
}

/// One step of a loop body: its inputs to its outputs.
pub type BodyStep<'a> = dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>, Diagnostic> + 'a;

/// The loop of `body` with each step computed by `step`, which maps the
/// body's inputs (carries, this step's slices, captured values) to its
/// outputs (new carries, then `y`s): the interpreter's `run_body`, or a
/// backend's compiled body. Returns the packed value of type `ty`.
///
/// The inputs live in one vector for the whole loop: the captured values
/// are copied into it once, each step replaces only the carries and the
/// slices.
pub fn drive(
    body: &ScanBody,
    operands: &[&Tensor],
    ty: &TensorType,
    step: &mut BodyStep<'_>,
) -> Result<Data, Diagnostic> {
    let (c, nx) = (body.carries, body.xs);
    if operands.len() != body.inputs.len() || c + nx > operands.len() {
        return Err(Diagnostic::internal(format!(
            "scan: {} operands for {} inputs",
            operands.len(),
            body.inputs.len()
        )));
    }
    let ny = body.graph.outputs.len().saturating_sub(c);
    // Per step: its y parts (and the carries that entered it), by index t.
    let mut ys: Vec<Vec<Tensor>> = vec![Vec::with_capacity(body.length); ny + c];
    let steps: Vec<usize> = match body.reverse {
        false => (0..body.length).collect(),
        true => (0..body.length).rev().collect(),
    };
    let mut bound: Vec<Tensor> = operands.iter().map(|&t| t.clone()).collect();
    // Before the first step the slice places hold whole operands; each
    // step overwrites them with its rows.
    for &t in &steps {
        for (place, x) in bound[c..c + nx].iter_mut().zip(&operands[c..c + nx]) {
            *place = row(x, t)?;
        }
        let outs = step(&bound).map_err(|d| d.note(format!("in step {t} of {} of this scan", body.length)))?;
        if outs.len() != c + ny {
            return Err(Diagnostic::internal(format!("scan: a step gave {} outputs for {}", outs.len(), c + ny)));
        }
        let mut outs = outs.into_iter();
        let entered: Vec<Tensor> = bound.splice(..c, outs.by_ref().take(c)).collect();
        for (stack, y) in ys.iter_mut().zip(outs) {
            stack.push(y);
        }
        if body.saves_carries {
            for (stack, entered) in ys[ny..].iter_mut().zip(entered) {
                stack.push(entered);
            }
        }
    }
    if body.reverse {
        ys.iter_mut().for_each(|s| s.reverse());
    }
    let parts = body.parts();
    let stacks = if body.saves_carries { ys.len() } else { ny };
    bound.truncate(c);
    let mut pieces: Vec<Tensor> = bound;
    for (stack, part) in ys.iter().take(stacks).zip(&parts[c..]) {
        pieces.push(stacked(stack, &part.ty)?);
    }
    pack(&pieces, ty)
}

/// Row `t` of `x` along axis 0.
fn row(x: &Tensor, t: usize) -> Result<Tensor, Diagnostic> {
    let data = with_elem!(x.data(), T => T::wrap(array::<T>(x)?.index_axis(Axis(0), t).to_owned()));
    Tensor::new(x.dtype(), data)
}

/// The rows of `stack` stacked along a new axis 0, of type `ty` (also when
/// there are no rows).
fn stacked(stack: &[Tensor], ty: &TensorType) -> Result<Tensor, Diagnostic> {
    with_dtype!(ty.dtype, T => {
        let mut values: Vec<T> = Vec::with_capacity(ty.numel());
        for r in stack {
            values.extend(flat(array::<T>(r)?));
        }
        Tensor::from_vec(ty.dtype, &ty.shape, values)
    })
}

/// The pieces flattened and joined into one rank-1 tensor of type `ty`.
fn pack(pieces: &[Tensor], ty: &TensorType) -> Result<Data, Diagnostic> {
    with_dtype!(ty.dtype, T => {
        let mut values: Vec<T> = Vec::with_capacity(ty.numel());
        for p in pieces {
            values.extend(flat(array::<T>(p)?));
        }
        Ok(Tensor::from_vec(ty.dtype, &ty.shape, values)?.data().clone())
    })
}

/// One step: the body's nodes in `order` with its slots bound to `bound`;
/// returns its outputs.
fn run_body(body: &ScanBody, order: &[NodeId], bound: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
    let g = &body.graph;
    let mut values: Vec<Option<Tensor>> = vec![None; g.node_bound()];
    for &id in order {
        let node = g.node(id);
        let value = match &node.op {
            Op::Slot { slot, .. } => bound
                .get(*slot)
                .cloned()
                .ok_or_else(|| Diagnostic::internal(format!("scan: body slot {slot} has no value")))?,
            op => {
                let operands = g.inputs(id);
                let inputs = operands
                    .iter()
                    .map(|i| values[i.index()].as_ref().ok_or_else(|| Diagnostic::internal("scan: operand order")))
                    .collect::<Result<Vec<&Tensor>, _>>()?;
                eval_node(op, &inputs, &node.ty)
                    .map_err(|d| d.label(node.span, format!("while computing this `{}`", op.name())))?
            }
        };
        values[id.index()] = Some(value);
    }
    g.outputs
        .iter()
        .map(|o| values[o.index()].clone().ok_or_else(|| Diagnostic::internal("scan: an output was not computed")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{floats, ints, run, try_run};
    use crate::diag::{Code, Span};
    use crate::ir::scan::ScanBody;
    use crate::ir::{infer::infer, BinaryOp, DType, Graph, Op, TensorType};
    use std::sync::Arc;

    /// The body `c' = c op x`, `y = c` (the carry entering the step).
    fn running(op: BinaryOp, dtype: DType, length: usize, reverse: bool, saves_carries: bool) -> Op {
        let ty = TensorType::scalar(dtype);
        let mut g = Graph::new();
        let c = g.add(Op::Slot { slot: 0, ty: ty.clone() }, &[], ty.clone(), Span::default());
        let x = g.add(Op::Slot { slot: 1, ty: ty.clone() }, &[], ty.clone(), Span::default());
        let t = infer(&Op::Binary(op), &[&ty, &ty]).unwrap();
        let next = g.add(Op::Binary(op), &[c, x], t, Span::default());
        g.outputs = vec![next, c];
        let inputs = vec![ty.clone(), ty];
        Op::Scan(Arc::new(ScanBody { graph: g, inputs, carries: 1, xs: 1, length, reverse, saves_carries }))
    }

    #[test]
    fn a_running_sum_packs_the_total_then_the_carries_before_each_step() {
        let xs = floats(DType::F32, &[3], &[1.0, 2.0, 3.0]);
        let zero = floats(DType::F32, &[], &[0.0]);
        let y = run(running(BinaryOp::Add, DType::F32, 3, false, false), &[&zero, &xs]);
        assert_eq!(y.to_f64_vec(), vec![6.0, 0.0, 1.0, 3.0]);
        // Reverse: steps 2, 1, 0; row t is still step t's output.
        let y = run(running(BinaryOp::Add, DType::F32, 3, true, false), &[&zero, &xs]);
        assert_eq!(y.to_f64_vec(), vec![6.0, 5.0, 3.0, 0.0]);
        // Saving the carries appends the carries entering each step.
        let y = run(running(BinaryOp::Add, DType::F32, 3, false, true), &[&zero, &xs]);
        assert_eq!(y.to_f64_vec(), vec![6.0, 0.0, 1.0, 3.0, 0.0, 1.0, 3.0]);
    }

    #[test]
    fn zero_steps_give_the_initial_carry_and_empty_stacks() {
        let xs = floats(DType::F64, &[0], &[]);
        let init = floats(DType::F64, &[], &[2.5]);
        let y = run(running(BinaryOp::Mul, DType::F64, 0, false, false), &[&init, &xs]);
        assert_eq!(y.to_f64_vec(), vec![2.5]);
    }

    #[test]
    fn a_failing_step_is_a_runtime_error_naming_the_step() {
        // 12 / 3 = 4, 4 / 2 = 2, then 2 / 0.
        let xs = ints(DType::I32, &[3], &[3, 2, 0]);
        let init = ints(DType::I32, &[], &[12]);
        let e = try_run(running(BinaryOp::Div, DType::I32, 3, false, false), &[&init, &xs]).unwrap_err();
        assert_eq!(e.code, Code::Runtime);
        assert!(e.notes.iter().any(|n| n.contains("step 2 of 3")), "{:?}", e.notes);
    }
}
