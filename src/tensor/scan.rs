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
    let mut stepper = Bound::new(body, operands, |bound: &[Tensor]| run_body(body, &order, bound))?;
    let xs = &operands[body.carries..body.carries + body.xs];
    drive(body, &mut |t| xs.iter().map(|x| row(x, t)).collect(), ty, &mut stepper)
}

/// How a loop's body runs, step after step (the interpreter's node by
/// node [`Bound`], a backend's compiled unit): it holds the carries
/// between steps.
pub trait Stepper {
    /// Runs one step on this step's `rows` (one slice of each scanned
    /// tensor) with the carries the previous step left (or the initial
    /// ones); keeps the new carries and returns the step's `y`s.
    fn step(&mut self, rows: Vec<Tensor>) -> Result<Vec<Tensor>, Diagnostic>;
    /// The carries as they are now.
    fn carries(&mut self) -> Result<Vec<Tensor>, Diagnostic>;
}

/// A stepper over a function of all the body's inputs (carries, slices,
/// captured values, in one vector for the whole loop: the captured values
/// are copied into it once, each step replaces the carries and slices).
pub struct Bound<F> {
    bound: Vec<Tensor>,
    carries: usize,
    run: F,
}

impl<F: FnMut(&[Tensor]) -> Result<Vec<Tensor>, Diagnostic>> Bound<F> {
    /// `run` over the body's inputs, starting from `operands` (the loop's:
    /// initial carries, scanned tensors, captured values).
    pub fn new(body: &ScanBody, operands: &[&Tensor], run: F) -> Result<Bound<F>, Diagnostic> {
        if operands.len() != body.inputs.len() || body.carries + body.xs > operands.len() {
            return Err(Diagnostic::internal(format!(
                "scan: {} operands for {} inputs",
                operands.len(),
                body.inputs.len()
            )));
        }
        let (c, nx) = (body.carries, body.xs);
        let slices = operands[c..c + nx].iter().map(|x| first_row(x));
        let bound = operands[..c].iter().map(|&t| Ok(t.clone())).chain(slices);
        let bound = bound.chain(operands[c + nx..].iter().map(|&t| Ok(t.clone())));
        Ok(Bound { bound: bound.collect::<Result<_, Diagnostic>>()?, carries: c, run })
    }
}

impl<F: FnMut(&[Tensor]) -> Result<Vec<Tensor>, Diagnostic>> Stepper for Bound<F> {
    fn step(&mut self, rows: Vec<Tensor>) -> Result<Vec<Tensor>, Diagnostic> {
        let c = self.carries;
        for (place, row) in self.bound[c..].iter_mut().zip(rows) {
            *place = row;
        }
        let mut outs = (self.run)(&self.bound)?;
        if outs.len() < c {
            return Err(Diagnostic::internal(format!("scan: a step gave {} outputs for {c} carries", outs.len())));
        }
        let ys = outs.split_off(c);
        self.bound.splice(..c, outs);
        Ok(ys)
    }

    fn carries(&mut self) -> Result<Vec<Tensor>, Diagnostic> {
        Ok(self.bound[..self.carries].to_vec())
    }
}

/// The rows of the scanned tensors a step reads: `rows(t)` is row `t` of
/// each (a backend may read them where the tensors lie, without a copy of
/// the whole).
pub type Rows<'a> = dyn FnMut(usize) -> Result<Vec<Tensor>, Diagnostic> + 'a;

/// The loop of `body` over the scanned tensors whose rows `rows` gives,
/// each step run by `stepper`. Returns the packed value of type `ty`.
pub fn drive(body: &ScanBody, rows: &mut Rows, ty: &TensorType, stepper: &mut dyn Stepper) -> Result<Data, Diagnostic> {
    let c = body.carries;
    let ny = body.graph.outputs.len().saturating_sub(c);
    // Per step: its y parts (and the carries that entered it), by index t.
    let mut ys: Vec<Vec<Tensor>> = vec![Vec::with_capacity(body.length); ny + c];
    let steps: Vec<usize> = match body.reverse {
        false => (0..body.length).collect(),
        true => (0..body.length).rev().collect(),
    };
    for &t in &steps {
        if body.saves_carries {
            for (stack, entered) in ys[ny..].iter_mut().zip(stepper.carries()?) {
                stack.push(entered);
            }
        }
        let y = stepper.step(rows(t)?).map_err(|d| d.note(format!("in step {t} of {} of this scan", body.length)))?;
        if y.len() != ny {
            return Err(Diagnostic::internal(format!("scan: a step gave {} outputs for {ny}", y.len())));
        }
        for (stack, y) in ys.iter_mut().zip(y) {
            stack.push(y);
        }
    }
    if body.reverse {
        ys.iter_mut().for_each(|s| s.reverse());
    }
    let parts = body.parts();
    let stacks = if body.saves_carries { ys.len() } else { ny };
    let mut pieces: Vec<Tensor> = stepper.carries()?;
    for (stack, part) in ys.iter().take(stacks).zip(&parts[c..]) {
        pieces.push(stacked(stack, &part.ty)?);
    }
    pack(&pieces, ty)
}

/// What holds a slice's place among a body's inputs until the first step
/// binds its row: the first row (the tensor itself when it has none),
/// not a copy of the whole scanned tensor.
pub fn first_row(x: &Tensor) -> Result<Tensor, Diagnostic> {
    match x.shape().first() {
        Some(&n) if n > 0 => row(x, 0),
        _ => Ok(x.clone()),
    }
}

/// Row `t` of `x` along axis 0.
pub fn row(x: &Tensor, t: usize) -> Result<Tensor, Diagnostic> {
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
