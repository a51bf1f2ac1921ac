//! `save(model, path)`, `load(model, path)` (safetensors, parameters named
//! by path such as `l1.w`) and `evaluate(ds, f)`: the example-weighted mean
//! of `f` over a dataset's batches, which metrics such as `accuracy` use.

use crate::diag::{Code, Diagnostic, Span};
use crate::ir::plan::{ReducePlan, Region};
use crate::ir::{DType, Effect, Op, TensorType};
use crate::trace::args::BuiltinArgs;
use crate::trace::builtins::{input_range_path, scale_path};
use crate::trace::tensor::Operand;
use crate::trace::value::{ModelInstance, Value};
use crate::trace::{TResult, Tracer};

impl Tracer<'_> {
    pub(crate) fn checkpoint_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let model = match a.get(0) {
            Some((Value::Model(m), _)) => m.clone(),
            _ => return Err(a.bad(0, "a model")),
        };
        let path = match a.get(1) {
            Some((Value::Str(s), _)) => s.clone(),
            _ => return Err(a.bad(1, "a file path string")),
        };
        // The parameters, then the model's tensor states, by path.
        let tensors_of = |paths: Vec<(String, Value)>| {
            paths.into_iter().filter_map(|(name, v)| match v {
                Value::Tensor(id, ty) => Some((name, id, ty)),
                _ => None,
            })
        };
        let params: Vec<_> = tensors_of(model.param_paths()).collect();
        let states: Vec<_> = tensors_of(model.state_paths().into_iter().map(|(p, v, _)| (p, v)).collect()).collect();
        if a.name == "save" {
            let mut tensors = Vec::new();
            for (name, id, _) in params.into_iter().chain(states) {
                // A quantized weight is written as its i8 values and scales.
                match self.quantized.get(&id) {
                    Some(q) => {
                        tensors.extend(q.input_range.map(|r| (input_range_path(&name), r)));
                        tensors.extend([(scale_path(&name), q.scales), (name, q.values)]);
                    }
                    None => tensors.push((name, id)),
                }
            }
            self.effects.push(Effect::Save { tensors, path, span: a.span });
        } else {
            let mut tensors = Vec::new();
            for (name, id, ty) in params {
                if let Some(q) = self.quantized.get(&id).copied() {
                    self.load_quantized(&model, &name, (&ty, q.input_range.is_some()), a.span, &mut tensors)?;
                    continue;
                }
                tensors.push((name.clone(), ty.clone(), self.rebind_to_slot(&model, &name, &ty, a.span)));
            }
            let mut loaded_states = Vec::new();
            for (name, before, ty) in states {
                let slot = self.rebind_to_slot(&model, &name, &ty, a.span);
                loaded_states.push((name, ty, slot, before));
            }
            self.effects.push(Effect::Load { tensors, states: loaded_states, path, span: a.span });
        }
        Ok(Value::Tuple(vec![]))
    }

    /// Rebinds the quantized weight at `path` of `model` (of type `ty`) to
    /// int8 values and scales that the load effect fills, and an input
    /// range when it was `calibrated` (`tensors` gets their names, types
    /// and slots).
    fn load_quantized(
        &mut self,
        model: &ModelInstance,
        path: &str,
        (ty, calibrated): (&TensorType, bool),
        span: Span,
        tensors: &mut Vec<(String, TensorType, usize)>,
    ) -> TResult<()> {
        let mut slot_of = |tracer: &mut Self, name: String, ty: TensorType| {
            let slot = tracer.new_slot();
            let id = tracer.graph.add(Op::Slot { slot, ty: ty.clone() }, &[], ty.clone(), span);
            tensors.push((name, ty.clone(), slot));
            Operand { id, ty, span }
        };
        let values = slot_of(self, path.to_string(), TensorType::new(DType::I8, ty.shape.clone()));
        let columns = ty.shape.last().copied().unwrap_or(0);
        let scales = slot_of(self, scale_path(path), TensorType::new(DType::F32, vec![columns]));
        let range = calibrated.then(|| slot_of(self, input_range_path(path), TensorType::new(DType::F32, vec![2])));
        let deq = self.dequantized_from(&values, &scales, range.map(|r| r.id), span)?;
        model.set_param(path, Value::Tensor(deq.id, deq.ty));
        Ok(())
    }

    /// Rebinds `model`'s parameter or state at `path` to a new slot of type
    /// `ty`, which an effect fills; returns the slot.
    fn rebind_to_slot(&mut self, model: &ModelInstance, path: &str, ty: &TensorType, span: Span) -> usize {
        let slot = self.new_slot();
        let id = self.graph.add(Op::Slot { slot, ty: ty.clone() }, &[], ty.clone(), span);
        model.set_param(path, Value::Tensor(id, ty.clone()));
        slot
    }

    pub(crate) fn evaluate_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let d = self.arg_dataset(a, 0)?;
        let f = a.get(1).map(|(v, _)| v.clone()).ok_or_else(|| a.bad(1, "a function"))?;
        let sizes: Vec<Option<usize>> =
            if d.batch_sizes.is_empty() { vec![None] } else { d.batch_sizes.iter().map(|&b| Some(b)).collect() };
        let mut regions = Vec::new();
        for size in sizes {
            let types: Vec<TensorType> = d
                .element
                .iter()
                .map(|t| match size {
                    Some(b) => TensorType::new(t.dtype, [vec![b], t.shape[1..].to_vec()].concat()),
                    None => t.clone(),
                })
                .collect();
            let (inputs, args) = self.slots_for(&types, a.span);
            let out = self.call_value(f.clone(), a.span_of(1), args, vec![], a.span)?;
            let o = self.operand(&out, None, a.span_of(1))?;
            if o.ty.rank() != 0 || !o.ty.dtype.is_float() {
                return Err(Diagnostic::new(
                    Code::Kind,
                    format!("`evaluate` needs a function returning a float scalar, it returns {}", o.ty),
                )
                .label(a.span_of(1), "this function")
                .into());
            }
            let o = self.cast(&o, DType::F32, a.span)?;
            let id = self.new_region();
            regions.push((size.unwrap_or(0), Region { id, inputs, outputs: vec![o.id] }));
        }
        let plan = ReducePlan { data: (*d).clone(), regions };
        let slot = self.new_slot();
        let ty = TensorType::scalar(DType::F32);
        let id = self.graph.add(Op::Slot { slot, ty: ty.clone() }, &[], ty.clone(), a.span);
        match self.pending_reduce.as_mut() {
            Some(pending) => pending.push(plan),
            None => self.effects.push(Effect::Reduce { plan: Box::new(plan), slot, span: a.span }),
        }
        Ok(Value::Tensor(id, ty))
    }
}
