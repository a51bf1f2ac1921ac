//! `save(model, path)`, `load(model, path)` (safetensors, parameters named
//! by path such as `l1.w`) and `evaluate(ds, f)`: the example-weighted mean
//! of `f` over a dataset's batches, which metrics such as `accuracy` use.

use crate::diag::{Code, Diagnostic, Span};
use crate::ir::plan::{ReducePlan, Region};
use crate::ir::{DType, Effect, Op, TensorType};
use crate::trace::args::BuiltinArgs;
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
            let tensors = params.into_iter().chain(states).map(|(n, id, _)| (n, id)).collect();
            self.effects.push(Effect::Save { tensors, path, span: a.span });
        } else {
            let mut tensors = Vec::new();
            for (name, _, ty) in params {
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
