//! The step that runs a `scan` (`Step::Scan`): the loop's body, planned as
//! a program of its own (`passes::loops`), prepared once as a `JitUnit`
//! and run once per iteration by the loop driver the interpreter shares
//! (`tensor::scan::drive`, which slices the scanned tensors, stacks the
//! outputs and packs the result).
//!
//! Contract: the step's value is the interpreter's (`tensor::scan`) up to
//! the body's rounding (its kernels' summation order); a failing
//! iteration is the body's error, naming the iteration and the scan.
//!
//! The carries stay in the body's unit between iterations: the unit is
//! prepared with the carries as its carried values (module `carry`), so an
//! iteration binds only its slices and the captured values (read in place,
//! bound once per run of the scan) and reads back only its `y`s; the
//! carries are read out only where the loop needs them (the final carries,
//! and the carries entering each step of a scan that saves them). A body
//! whose new carry *is* one of its inputs (a carry passed through
//! unchanged, or two carries swapped) is bound afresh every iteration
//! instead, carries included (`tensor::scan::Bound`). A resident body's
//! scanned tensors in the arena are read a row at a time where they lie.
//!
//! Example: an LSTM's forward scan over 28 rows binds each row `[B, 4h]`
//! of the precomputed input projections and the captured `wh`, runs the
//! body's `h @ wh` product and gates, and reads back the step's `h`; `(h,
//! c)` stay in the body's arena from the first iteration to the last.

use super::mem::{read, write, Mem};
use super::step::Ref;
use super::{JitUnit, Parallelism};
use crate::diag::{Diagnostic, Span};
use crate::ir::compiled::LoopPlan;
use crate::ir::scan::ScanBody;
use crate::ir::{DType, Op, TensorType};
use crate::tensor::scan::{drive, row, Bound, Rows, Stepper};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// A prepared `scan`: its body's unit, and where the loop's operands and
/// value live in the enclosing unit.
pub(in crate::backend::cpu) struct ScanStep {
    pub(super) body: Arc<ScanBody>,
    pub(super) unit: JitUnit,
    /// Whether the carries stay in `unit` between iterations (module docs).
    resident: bool,
    /// Carries, scanned tensors and captured values, with their types.
    operands: Vec<(Ref, TensorType)>,
    dst: Ref,
    ty: TensorType,
    span: Span,
}

impl ScanStep {
    /// Prepares the body of `body` from its plan, for `threads` workers.
    /// The step's places come with [`ScanStep::at`].
    pub(super) fn prepare(body: &Arc<ScanBody>, plan: &LoopPlan, threads: usize) -> Result<ScanStep, Diagnostic> {
        let program = &plan.body;
        let unit = program.compiled.as_ref().and_then(|c| c.units.iter().find(|u| u.region.is_none()));
        let unit = unit.ok_or_else(|| super::internal("a scan body's plan has no unit"))?;
        let g = &program.graph;
        let c = body.carries;
        let (new_carries, ys) = g.outputs.split_at(c.min(g.outputs.len()));
        let resident = !new_carries.iter().any(|&o| matches!(g.node(o).op, Op::Slot { .. }));
        let n = body.inputs.len();
        let (slot_pos, outputs): (HashMap<usize, usize>, Vec<_>) = match resident {
            // Carries last, in inputs and outputs: they are the carried values.
            true => ((0..n).map(|s| (s, if s < c { n - c + s } else { s - c })).collect(), [ys, new_carries].concat()),
            false => ((0..n).map(|s| (s, s)).collect(), g.outputs.clone()),
        };
        let carried = if resident { c } else { 0 };
        let values = crate::tensor::Values::new();
        let unit = JitUnit::prepare(
            program,
            unit,
            &slot_pos,
            &values,
            &outputs,
            carried,
            Parallelism { threads, collectives: None },
        )?;
        Ok(ScanStep {
            body: body.clone(),
            unit,
            resident,
            operands: Vec::new(),
            dst: Ref::Fixed(usize::MAX),
            ty: TensorType::scalar(crate::ir::DType::F32),
            span: Span::default(),
        })
    }

    /// This step reading `operands` and writing its value of type `ty` to
    /// `dst` (in the enclosing unit); `span` is the scan's.
    pub(super) fn at(self, operands: Vec<(Ref, TensorType)>, dst: Ref, ty: TensorType, span: Span) -> ScanStep {
        ScanStep { operands, dst, ty, span, ..self }
    }

    /// The places it reads: its operands'.
    pub(super) fn operands(&self) -> &[(Ref, TensorType)] {
        &self.operands
    }

    /// The place it writes and its type.
    pub(super) fn result(&self) -> (Ref, &TensorType) {
        (self.dst, &self.ty)
    }

    /// Its rough cost: the body's, once per iteration.
    pub(super) fn cost(&self) -> u64 {
        let body: u64 = self.unit.steps.iter().map(|s| s.access().cost).sum();
        body * self.body.length as u64
    }

    /// Its label in profiles.
    pub(super) fn label(&self) -> String {
        format!("scan {} iterations of a body of {} steps", self.body.length, self.unit.steps.len())
    }

    /// Runs the loop.
    ///
    /// # Safety
    /// As for `Step::run`.
    pub(super) unsafe fn run(&self, mem: Mem) -> Result<(), Diagnostic> {
        let (c, nx) = (self.body.carries, self.body.xs);
        // A resident body's scanned tensors in the arena are read a row at
        // a time where they lie, not copied out whole first.
        let streamed = |i: usize| {
            self.resident && self.body.length > 0 && (c..c + nx).contains(&i) && self.operands[i].0.in_arena().is_some()
        };
        let owned: Vec<Option<Tensor>> = self
            .operands
            .iter()
            .enumerate()
            .map(|(i, (r, ty))| match r.in_arena() {
                Some(_) if !streamed(i) => read(mem, *r, ty).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_, Diagnostic>>()?;
        let operand = |i: usize| owned[i].as_ref().map_or_else(|| mem.tensor(self.operands[i].0), Ok);
        // The type of one row of each scanned tensor, once per run.
        let row_types: Vec<TensorType> = self.operands[c..c + nx]
            .iter()
            .map(|(_, ty)| TensorType::new(ty.dtype, ty.shape.get(1..).unwrap_or_default().to_vec()))
            .collect();
        let mut rows = |t: usize| -> Result<Vec<Tensor>, Diagnostic> {
            (c..c + nx)
                .zip(&row_types)
                .map(|(i, row_ty)| {
                    if !streamed(i) {
                        return row(operand(i)?, t);
                    }
                    let at = self.operands[i].0.advanced(t * row_ty.numel());
                    read(mem, at.ok_or_else(|| super::internal("a scanned row outside the arena"))?, row_ty)
                })
                .collect()
        };
        let data = match self.resident {
            true => {
                let carries = (0..c).map(|i| operand(i).cloned()).collect::<Result<Vec<_>, _>>()?;
                self.unit.load_carried(&carries)?;
                let first = match self.body.length {
                    0 => (c..c + nx).map(|i| operand(i).cloned()).collect::<Result<Vec<_>, _>>()?,
                    _ => rows(0)?,
                };
                let captured = (c + nx..self.operands.len()).map(operand).collect::<Result<Vec<_>, _>>()?;
                let mut stepper = Resident::new(&self.unit, first, &captured);
                if let (Ref::Arena(off), DType::F32) = (self.dst, self.ty.dtype) {
                    // SAFETY: the caller's contract: this step alone writes
                    // its value, which no operand shares.
                    let dst = unsafe { mem.out(off, self.ty.numel(), "a scan's value")? };
                    return self
                        .stack_into(dst, &mut rows, &mut stepper)
                        .map_err(|d| d.label(self.span, "while computing this `scan`"));
                }
                drive(&self.body, &mut rows, &self.ty, &mut stepper)
            }
            false => {
                let operands = (0..self.operands.len()).map(operand).collect::<Result<Vec<_>, _>>()?;
                let mut stepper = Bound::new(&self.body, &operands, |bound: &[Tensor]| self.unit.run(bound))?;
                drive(&self.body, &mut rows, &self.ty, &mut stepper)
            }
        };
        let data = data.map_err(|d| d.label(self.span, "while computing this `scan`"))?;
        let v = Tensor::new(self.ty.dtype, data)?;
        // SAFETY: the caller's contract.
        unsafe { write(mem, self.dst, &v) }
    }
}

impl ScanStep {
    /// The loop of an `f32` scan whose carries stay in the body's unit,
    /// writing each step's outputs (and the carries entering it, for a
    /// scan that saves them) straight into their rows of the packed value
    /// `dst`, and the final carries at its start: the layout and order of
    /// `tensor::scan::drive`, without a copy per row.
    fn stack_into(&self, dst: &mut [f32], rows: &mut Rows, stepper: &mut Resident) -> Result<(), Diagnostic> {
        let body = &*self.body;
        let c = body.carries;
        let ny = body.graph.outputs.len().saturating_sub(c);
        let parts = body.parts();
        let place = |dst: &mut [f32], part: usize, t: usize, values: &[f32]| -> Result<(), Diagnostic> {
            let at = parts.get(part).map(|p| p.offset + t * values.len());
            let room = at.and_then(|at| dst.get_mut(at..at + values.len()));
            room.ok_or_else(|| super::internal("a scan's row outside its value"))?.copy_from_slice(values);
            Ok(())
        };
        for step in 0..body.length {
            let t = if body.reverse { body.length - 1 - step } else { step };
            if body.saves_carries {
                self.unit.read_carried_with(&mut |i, v| place(dst, c + ny + i, t, v))?;
            }
            stepper.bind(rows(t)?);
            let mut outputs = 0;
            self.unit
                .run_head_with(&stepper.head, &mut |o, v| {
                    outputs += 1;
                    place(dst, c + o, t, v)
                })
                .map_err(|d| d.note(format!("in step {t} of {} of this scan", body.length)))?;
            if outputs != ny {
                return Err(super::internal(format!("a scan step gave {outputs} outputs for {ny}")));
            }
        }
        self.unit.read_carried_with(&mut |i, v| place(dst, i, 0, v))
    }
}

/// A body whose carries stay in its unit: an iteration binds its slices
/// and the captured values (`head`) and returns the `y`s.
struct Resident<'a> {
    unit: &'a JitUnit,
    head: Vec<Tensor>,
    xs: usize,
}

impl<'a> Resident<'a> {
    /// `first` holds the places of the slices until the first step binds
    /// its rows (the first rows themselves).
    fn new(unit: &'a JitUnit, first: Vec<Tensor>, captured: &[&Tensor]) -> Resident<'a> {
        let xs = first.len();
        let mut head = first;
        head.extend(captured.iter().map(|&t| t.clone()));
        Resident { unit, head, xs }
    }
}

impl Resident<'_> {
    /// Binds the rows of this iteration's slices.
    fn bind(&mut self, rows: Vec<Tensor>) {
        for (place, row) in self.head[..self.xs].iter_mut().zip(rows) {
            *place = row;
        }
    }
}

impl Stepper for Resident<'_> {
    fn step(&mut self, rows: Vec<Tensor>) -> Result<Vec<Tensor>, Diagnostic> {
        self.bind(rows);
        self.unit.run_head(&self.head)
    }

    fn carries(&mut self) -> Result<Vec<Tensor>, Diagnostic> {
        self.unit.read_carried()
    }
}
