//! Optimizers (§7) and the `train` statement (§9).
//!
//! A train block compiles one step region per batch size: the batch, the
//! step number, every parameter, optimizer state and model state are
//! region inputs; the loss, the new parameters, the new optimizer states
//! and the new model states are its outputs. Inside, the loss is traced
//! with the model's parameters and states rebound to the step's inputs
//! (a write to a state rebinds it again: `state.rs`), `grad` of the loss
//! comes from the autodiff pass, gradient clipping and the optimizer's
//! `update` block (one per parameter) follow. Afterwards the model's
//! parameters and states are rebound to the trained values (slots the
//! runtime fills when training ends), so later statements see the trained
//! model.
//!
//! Example: `train net on data { loss(x, y) = mse(net(x), y); optimizer = sgd(lr = 0.1); epochs = 5 }`.

use super::call::CallArgs;
use super::state::{bind_states, carried_states, StateInfo};
use super::value::{ModelInstance, OptimizerValue, Scope, Value};
use super::{TResult, Tracer};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::plan::{
    Cadence, DataParallel, Dataset, EvalPlan, LogFormat, LogPlan, ParallelStep, Region, StepParts, TrainPlan,
    LOSS_SCALE_STATES,
};
use crate::ir::{BinaryOp, DType, Effect, NodeId, Op, ReduceOp, TensorType, UnaryOp};
use crate::syntax::ast::{self, TrainField};
use std::rc::Rc;

/// A parameter during step tracing: its path, its value outside the step.
struct ParamInfo {
    path: String,
    init: NodeId,
    ty: TensorType,
}

impl Tracer<'_> {
    /// `adam(lr = 1e-3)`: binds the optimizer's hyper-parameters.
    pub(crate) fn instantiate_optimizer(
        &mut self,
        def: &Rc<super::value::OptimizerDefValue>,
        args: CallArgs,
        span: Span,
    ) -> TResult<Value> {
        let scope = self.scopes.child(&def.env);
        let bound = super::call::bind_args(&def.def.name.name, &def.def.params, args, span, def.def.name.span)?;
        for (param, arg) in def.def.params.iter().zip(bound) {
            let v = match arg {
                Some((v, _)) => v,
                None => match &param.default {
                    Some(d) => self.eval(d, &scope)?,
                    None => return Err(Diagnostic::internal("missing optimizer argument").into()),
                },
            };
            scope.set(&param.name.name, v);
        }
        Ok(Value::Optimizer(Rc::new(OptimizerValue { def: def.def.clone(), scope })))
    }

    pub(crate) fn train(&mut self, t: &ast::TrainDef, env: &Rc<Scope>) -> TResult<()> {
        let model = match self.eval(&t.model, env)? {
            Value::Model(m) => m,
            other => return Err(kind_error(t.model.span, "a model", &other)),
        };
        let data = match self.eval(&t.data, env)? {
            Value::Dataset(d) => d,
            other => return Err(kind_error(t.data.span, "a batched dataset", &other)),
        };
        if data.batch_sizes.is_empty() {
            return Err(Diagnostic::new(Code::Kind, "training needs a batched dataset")
                .label(t.data.span, format!("a dataset of {} (not batched)", super::data_elements_text(&data)))
                .help("add `|> batch(64)`")
                .into());
        }
        let mut fields = Fields::read(self, t, env)?;
        // `--precision` over the block's own setting.
        if let Some(dtype) = self.precision {
            fields.precision = (dtype != DType::F32).then_some((dtype, t.span));
        }
        let params: Vec<ParamInfo> = model
            .param_paths()
            .into_iter()
            .filter_map(|(path, v)| match v {
                Value::Tensor(id, ty) => Some(ParamInfo { path, init: id, ty }),
                _ => None,
            })
            .collect();
        if params.is_empty() {
            return Err(Diagnostic::new(
                Code::Kind,
                format!("model `{}` has no parameters to train", model.def.name.name),
            )
            .label(t.model.span, "this model")
            .into());
        }
        if params.iter().any(|p| self.quantized.contains_key(&p.init)) {
            return Err(Diagnostic::new(
                Code::Quantize,
                format!("model `{}` is quantized: its int8 products have no gradient", model.def.name.name),
            )
            .label(t.model.span, "a quantized model")
            .help("train the f32 model, then `quantize` it for inference")
            .into());
        }
        // Initial optimizer states, computed outside the step from each
        // parameter's initial value.
        let mut states: Vec<(String, NodeId, TensorType)> = Vec::new();
        for p in &params {
            let scope = self.scopes.child(&fields.optimizer.scope);
            scope.set("param", Value::Tensor(p.init, p.ty.clone()));
            for (name, init) in &fields.optimizer.def.states {
                let v = self.eval(init, &scope)?;
                let o = self.operand(&v, Some(p.ty.dtype), init.span)?;
                let o = self.broadcast_to(&o, &p.ty.shape.clone(), init.span)?;
                states.push((format!("{}/{}", p.path, name.name), o.id, o.ty.clone()));
                scope.set(&name.name, Value::Tensor(o.id, o.ty));
            }
        }
        if let Some((dtype, span)) = fields.precision {
            if !params.iter().any(|p| p.ty.dtype == DType::F32) {
                return Err(no_f32_parameters(dtype, &model.def.name.name, span).into());
            }
        }
        // f16 training scales its loss (`LOSS_SCALE_STATES`): the scale
        // and its counters are carried and checkpointed like the
        // optimizer's states, after them.
        if fields.precision.is_some_and(|(dtype, _)| dtype == DType::F16) {
            for (name, init) in LOSS_SCALE_STATES.iter().zip([INITIAL_LOSS_SCALE, 0.0, 0.0]) {
                let o = self.scalar(init, DType::F32, t.span)?;
                states.push((name.to_string(), o.id, o.ty));
            }
        }
        let model_states = carried_states(&model);
        let carried = Carried { params: &params, states: &states, model_states: &model_states };
        let source = StepSource { t, model: &model, data: &data, carried, fields: &fields, env };
        let (mut steps, mut parts, mut parallel) = (Vec::new(), Vec::new(), None);
        match self.data_parallel {
            Some(dp) => {
                let shards = shards_of(dp, &data, t.data.span)?;
                // One shard per process, and nothing but the parameters'
                // sums to agree on: the step can be one region.
                let fusable = shards == dp.world
                    && model_states.is_empty()
                    && params.iter().all(|p| matches!(p.ty.dtype, DType::F32 | DType::F64));
                // The shard sizes of the batches that run as one region,
                // and of those that run as two halves.
                let (mut fused_rows, mut split_rows) = (Vec::new(), Vec::new());
                for &b in &data.batch_sizes {
                    let rows = ParallelStep::shard_rows(b, shards);
                    let to = if fusable && b >= shards { &mut fused_rows } else { &mut split_rows };
                    to.extend(rows.into_iter().filter(|&r| r > 0));
                }
                let by_size = |rows: &mut Vec<usize>| {
                    rows.sort_unstable_by(|a, b| b.cmp(a));
                    rows.dedup();
                    std::mem::take(rows)
                };
                let (mut gradients, mut fused, mut to_sum) = (Vec::new(), Vec::new(), Vec::new());
                for r in by_size(&mut split_rows) {
                    gradients.push((r, self.gradient_region(source, r)?));
                }
                for r in by_size(&mut fused_rows) {
                    let (region, sums) = self.fused_region(source, r, shards)?;
                    fused.push((r, region));
                    to_sum.push(sums);
                }
                let update = match gradients.is_empty() {
                    true => None,
                    false => Some(self.update_region(&carried, &fields, shards, t.span)?),
                };
                parallel = Some(ParallelStep { shards, gradients, update, fused, to_sum });
            }
            None => {
                for &b in &data.batch_sizes {
                    let (region, step_parts) = self.step_region(source, b)?;
                    steps.push((b, region));
                    parts.push(step_parts);
                }
            }
        }
        let mut evals = Vec::new();
        for (metric, eval_data, every, name) in &fields.evals {
            evals.push(self.eval_plan(&model, &params, &model_states, metric, eval_data, *every, name, env)?);
        }
        // Later statements see the trained parameters.
        let mut result_slots = Vec::new();
        for p in &params {
            let slot = self.new_slot();
            let id = self.graph.add(Op::Slot { slot, ty: p.ty.clone() }, &[], p.ty.clone(), t.span);
            model.set_param(&p.path, Value::Tensor(id, p.ty.clone()));
            result_slots.push(slot);
        }
        for (_, _, ty) in &states {
            let slot = self.new_slot();
            self.graph.add(Op::Slot { slot, ty: ty.clone() }, &[], ty.clone(), t.span);
            result_slots.push(slot);
        }
        let types: Vec<TensorType> = model_states.iter().map(|s| s.ty.clone()).collect();
        let (trained, values) = self.slots_for(&types, t.span);
        bind_states(&model_states, &values.into_iter().map(|(v, _)| v).collect::<Vec<_>>());
        result_slots.extend(trained.iter().map(|(s, _)| *s));
        let plan = TrainPlan {
            data: (*data).clone(),
            steps,
            parts,
            params: params.iter().map(|p| (p.path.clone(), p.init)).collect(),
            states: states.iter().map(|(n, id, _)| (n.clone(), *id)).collect(),
            model_states: model_states.iter().map(|s| (s.path.clone(), s.init)).collect(),
            epochs: fields.epochs,
            max_steps: fields.steps,
            evals,
            checkpoint: fields.checkpoint.clone(),
            log: fields.log.clone(),
            resume: fields.resume.clone(),
            precision: fields.precision.map(|(dtype, _)| dtype),
            result_slots,
            parallel,
            span: t.span,
        };
        self.effects.push(Effect::Train(Box::new(plan)));
        Ok(())
    }

    /// The monolithic step for batches of `b`: loss, gradients and
    /// updates in one region (module header).
    fn step_region(&mut self, source: StepSource, b: usize) -> TResult<(Region, StepParts)> {
        let StepSource { t, model, data, carried, fields, env } = source;
        let io = self.step_inputs(t, model, data, b, &carried, false);
        let traced = self.step_gradients(&io, &carried, fields, env, t.span)?;
        let updated = self.step_updates(&io.update, carried.params, traced.gradients, fields, t.span)?;
        let mut outputs = vec![traced.loss];
        outputs.extend(updated.params);
        outputs.extend(updated.states);
        outputs.extend(traced.model_states);
        let parts = StepParts { gradients: updated.gradients, global_norm: updated.global_norm };
        let inputs = [io.batch_inputs, io.step_input, io.param_inputs, io.state_inputs, io.model_state_inputs].concat();
        Ok((Region { id: self.new_region(), inputs, outputs }, parts))
    }

    /// A data-parallel step's first half for one virtual shard of `rows`
    /// examples (`plan::ParallelStep::gradients`): inputs the shard's batch
    /// parts, its weight, the step number, the parameters, optimizer states
    /// and model states; outputs the weighted loss, each parameter's
    /// gradient of it (scaled when the loss is) and the new model states.
    fn gradient_region(&mut self, source: StepSource, rows: usize) -> TResult<Region> {
        let StepSource { t, model, data, carried, fields, env } = source;
        let io = self.step_inputs(t, model, data, rows, &carried, true);
        let traced = self.step_gradients(&io, &carried, fields, env, t.span)?;
        let mut outputs = vec![traced.loss];
        outputs.extend(traced.gradients);
        outputs.extend(traced.model_states);
        // Of the optimizer's states, only a loss scale's are read here.
        let scale_states = match scale_inputs(fields, &io.update.states) {
            Some(_) => io.state_inputs[io.state_inputs.len() - LOSS_SCALE_STATES.len()..].to_vec(),
            None => Vec::new(),
        };
        let inputs =
            [io.batch_inputs, io.weight_input, io.step_input, io.param_inputs, scale_states, io.model_state_inputs]
                .concat();
        Ok(Region { id: self.new_region(), inputs, outputs })
    }

    /// A data-parallel step as one region, for a process that computes one
    /// shard of `rows` examples of the `shards` (`plan::ParallelStep::fused`):
    /// the shard's gradients, their mean, then the update as `update_region`
    /// applies it; the loss goes out as an `f64`, as the two halves sum it.
    /// Also returns what the `all_reduce` pass sums over the processes (the
    /// loss, then each gradient: `ParallelStep::to_sum`).
    fn fused_region(&mut self, source: StepSource, rows: usize, shards: usize) -> TResult<(Region, Vec<NodeId>)> {
        let StepSource { t, model, data, carried, fields, env } = source;
        let span = t.span;
        let io = self.step_inputs(t, model, data, rows, &carried, true);
        let traced = self.step_gradients(&io, &carried, fields, env, span)?;
        let wide = TensorType::scalar(DType::F64);
        let loss = self.graph.add(Op::Cast(DType::F64), &[traced.loss], wide, span);
        // The `all_reduce` pass puts each gradient's sum before its mean.
        let gradients = traced.gradients.iter().map(|&g| Value::Tensor(g, self.graph.node(g).ty.clone()));
        let gradients: Vec<Value> = gradients.collect();
        let means = self.mean_over_shards(gradients.into_iter(), shards, span)?;
        let updated = self.step_updates(&io.update, carried.params, means, fields, span)?;
        let outputs = [vec![loss], updated.params, updated.states].concat();
        let inputs = [io.batch_inputs, io.weight_input, io.step_input, io.param_inputs, io.state_inputs].concat();
        let to_sum = [vec![loss], traced.gradients].concat();
        Ok((Region { id: self.new_region(), inputs, outputs }, to_sum))
    }

    /// The mean of each of `sums` over the `shards` virtual shards (a
    /// product with `1 / shards`, the same in both forms of the step).
    fn mean_over_shards(
        &mut self,
        sums: impl Iterator<Item = Value>,
        shards: usize,
        span: Span,
    ) -> TResult<Vec<NodeId>> {
        let share = Value::Float(1.0 / shards as f64);
        sums.map(|sum| Ok(tensor_id(&self.binary(BinaryOp::Mul, (&sum, span), (&share, span), span)?))).collect()
    }

    /// A data-parallel step's second half (`plan::ParallelStep::update`):
    /// inputs the gradients summed over the `shards` virtual shards, the
    /// step number, the parameters and the optimizer states; it takes
    /// their mean and applies unscaling, clipping and the optimizer, so
    /// those see the global gradient. Outputs the new parameters and
    /// optimizer states.
    fn update_region(&mut self, carried: &Carried, fields: &Fields, shards: usize, span: Span) -> TResult<Region> {
        let param_types: Vec<TensorType> = carried.params.iter().map(|p| p.ty.clone()).collect();
        let model_state_types: Vec<TensorType> = carried.model_states.iter().map(|s| s.ty.clone()).collect();
        let (mut inputs, sums) = self.slots_for(&param_types, span);
        let (new_model_state_inputs, new_model_states) = self.slots_for(&model_state_types, span);
        inputs.extend(new_model_state_inputs);
        let (step_input, step) = self.slots_for(&[TensorType::scalar(DType::F32)], span);
        inputs.extend(step_input);
        let (param_inputs, params) = self.slots_for(&param_types, span);
        inputs.extend(param_inputs);
        let state_types: Vec<TensorType> = carried.states.iter().map(|(_, _, ty)| ty.clone()).collect();
        let (state_inputs, states) = self.slots_for(&state_types, span);
        inputs.extend(state_inputs);
        // The model states are carried too, and replaced by the first
        // shard's (given as inputs).
        let (model_state_inputs, _) = self.slots_for(&model_state_types, span);
        inputs.extend(model_state_inputs);
        let means = self.mean_over_shards(sums.into_iter().map(|(sum, _)| sum), shards, span)?;
        let io = UpdateInputs { step: step[0].0.clone(), params, states };
        let updated = self.step_updates(&io, carried.params, means, fields, span)?;
        let mut outputs = updated.params;
        outputs.extend(updated.states);
        outputs.extend(new_model_states.iter().map(|(v, _)| tensor_id(v)));
        Ok(Region { id: self.new_region(), inputs, outputs })
    }

    /// Makes the slots of a step's inputs — the batch parts (`rows`
    /// examples), a shard's weight when `weighted`, the step number, the
    /// parameters, optimizer states and model states — and binds the
    /// model's parameters and states to them.
    fn step_inputs(
        &mut self,
        t: &ast::TrainDef,
        model: &Rc<ModelInstance>,
        data: &Dataset,
        rows: usize,
        carried: &Carried,
        weighted: bool,
    ) -> StepInputs {
        let Carried { params, states, model_states } = *carried;
        let span = t.span;
        let batch_types: Vec<TensorType> = data
            .element
            .iter()
            .map(|e| TensorType::new(e.dtype, [vec![rows], e.shape[1..].to_vec()].concat()))
            .collect();
        let (batch_inputs, batch) = self.slots_for(&batch_types, span);
        let (mut weight_input, mut weight) = (Vec::new(), None);
        if weighted {
            let (input, arg) = self.slots_for(&[TensorType::scalar(DType::F32)], span);
            (weight_input, weight) = (input, Some(arg[0].0.clone()));
        }
        let (step_input, step_arg) = self.slots_for(&[TensorType::scalar(DType::F32)], span);
        let param_types: Vec<TensorType> = params.iter().map(|p| p.ty.clone()).collect();
        let (param_inputs, param_args) = self.slots_for(&param_types, span);
        let state_types: Vec<TensorType> = states.iter().map(|(_, _, ty)| ty.clone()).collect();
        let (state_inputs, state_args) = self.slots_for(&state_types, span);
        for (p, (v, _)) in params.iter().zip(&param_args) {
            model.set_param(&p.path, v.clone());
        }
        let model_state_types: Vec<TensorType> = model_states.iter().map(|s| s.ty.clone()).collect();
        let (model_state_inputs, model_state_args) = self.slots_for(&model_state_types, span);
        bind_states(model_states, &model_state_args.into_iter().map(|(v, _)| v).collect::<Vec<_>>());
        let update = UpdateInputs { step: step_arg[0].0.clone(), params: param_args, states: state_args };
        StepInputs {
            batch_inputs,
            weight_input,
            step_input,
            param_inputs,
            state_inputs,
            model_state_inputs,
            batch,
            weight,
            update,
        }
    }

    /// Traces the loss of a step (in training mode, which may write the
    /// model's states) and asks for each parameter's gradient of it — of
    /// `loss · weight` for a shard, and of `loss · scale` with loss scaling.
    fn step_gradients(
        &mut self,
        io: &StepInputs,
        carried: &Carried,
        fields: &Fields,
        env: &Rc<Scope>,
        span: Span,
    ) -> TResult<TracedLoss> {
        let Carried { params, model_states, .. } = *carried;
        let param_nodes: Vec<NodeId> = io.update.params.iter().map(|(v, _)| tensor_id(v)).collect();
        let saved = std::mem::replace(&mut self.training, true);
        let saved_counter = self.step_counter.replace(tensor_id(&io.update.step));
        let writable = model_states.iter().map(|s| s.owner.clone()).collect();
        let saved_models = std::mem::replace(&mut self.step_models, writable);
        let loss = self.loss_value(fields, io.batch.clone(), env);
        self.training = saved;
        self.step_counter = saved_counter;
        self.step_models = saved_models;
        let mut loss = loss?;
        if let Some(weight) = &io.weight {
            let v = Value::Tensor(loss.id, loss.ty.clone());
            let weighted = self.binary(BinaryOp::Mul, (&v, span), (weight, span), span)?;
            loss = self.operand(&weighted, None, span)?;
        }
        // With loss scaling, the gradients are taken of `loss · scale` (so
        // that small f16 gradients do not flush to zero) and divided by it.
        let differentiated = match scale_inputs(fields, &io.update.states) {
            Some(s) => {
                let v = Value::Tensor(loss.id, loss.ty.clone());
                tensor_id(&self.binary(BinaryOp::Mul, (&v, span), (&s.scale, span), span)?)
            }
            None => loss.id,
        };
        // The states as the loss left them: written, or the step's inputs.
        let mut new_model_states = Vec::with_capacity(model_states.len());
        for s in model_states {
            match s.owner.get_local(&s.name) {
                Some(Value::Tensor(id, _)) => new_model_states.push(id),
                _ => return Err(Diagnostic::internal(format!("state `{}` is unbound after the loss", s.path)).into()),
            }
        }
        // One gradient request per parameter, which the `autodiff` pass
        // builds (`Op::Gradient`: the traced step shows what it asks for),
        // or the gradients themselves (`defer_gradients`).
        let found: Vec<Option<NodeId>> = match self.defer_gradients {
            true => {
                let has = crate::autodiff::has_gradients(&self.graph, differentiated, &param_nodes);
                let mut found = Vec::with_capacity(params.len());
                for ((p, &w), has) in params.iter().zip(&param_nodes).zip(has) {
                    let span = fields.loss_span;
                    found.push(has.then(|| self.graph.add(Op::Gradient, &[differentiated, w], p.ty.clone(), span)));
                }
                found
            }
            false => crate::autodiff::gradients(&mut self.graph, differentiated, None, &param_nodes)?,
        };
        let mut gradients = Vec::new();
        for (p, g) in params.iter().zip(found) {
            match g {
                Some(g) => gradients.push(g),
                None => {
                    return Err(Diagnostic::new(
                        Code::NoGradient,
                        format!("parameter `{}` gets no gradient from the loss", p.path),
                    )
                    .label(fields.loss_span, "this loss does not depend on it")
                    .help("use the parameter in `forward`, or remove it from the model")
                    .into())
                }
            }
        }
        Ok(TracedLoss { loss: loss.id, gradients, model_states: new_model_states })
    }

    /// The end of a step: unscaling (with loss scaling), clipping and each
    /// parameter's optimizer update, from the gradients `grads`.
    fn step_updates(
        &mut self,
        io: &UpdateInputs,
        params: &[ParamInfo],
        mut grads: Vec<NodeId>,
        fields: &Fields,
        span: Span,
    ) -> TResult<Updated> {
        let scaling = scale_inputs(fields, &io.states);
        let finite = match &scaling {
            Some(s) => {
                let (unscaled, finite) = self.unscale(&grads, &s.scale, span)?;
                grads = unscaled;
                Some(finite)
            }
            None => None,
        };
        let mut global_norm = None;
        if let Some(max_norm) = fields.clip {
            let (clipped, norm) = self.clip_by_global_norm(&grads, max_norm, span)?;
            (grads, global_norm) = (clipped, Some(norm));
        }
        // The optimizer's `step` counts the updates applied: a skipped
        // step is not one (as PyTorch's Adam under `GradScaler`, whose
        // skipped `optimizer.step()` leaves its step count as it was).
        let step = match &scaling {
            Some(s) => self.binary(BinaryOp::Sub, (&io.step, span), (&s.skipped, span), span)?,
            None => io.step.clone(),
        };
        let mut new_params = Vec::new();
        let mut new_states = Vec::new();
        let per_param = fields.optimizer.def.states.len();
        for (i, p) in params.iter().enumerate() {
            let mine = &io.states[i * per_param..(i + 1) * per_param];
            let (np, ns) = self.update(&fields.optimizer, p, &io.params[i].0, grads[i], &step, mine, span)?;
            match &finite {
                // A step whose gradients overflowed changes nothing.
                Some(finite) => {
                    new_params.push(self.keep_unless(finite, np, tensor_id(&io.params[i].0), span)?);
                    for (new, (old, _)) in ns.into_iter().zip(mine) {
                        new_states.push(self.keep_unless(finite, new, tensor_id(old), span)?);
                    }
                }
                None => {
                    new_params.push(np);
                    new_states.extend(ns);
                }
            }
        }
        if let (Some(s), Some(finite)) = (&scaling, &finite) {
            new_states.extend(self.next_loss_scale(s, finite, span)?);
        }
        Ok(Updated { params: new_params, states: new_states, gradients: grads, global_norm })
    }

    fn loss_value(
        &mut self,
        fields: &Fields,
        batch: Vec<(Value, Span)>,
        env: &Rc<Scope>,
    ) -> TResult<super::tensor::Operand> {
        let scope = self.scopes.child(env);
        if fields.loss_params.len() != batch.len() {
            return Err(Diagnostic::new(
                Code::Arity,
                format!(
                    "the loss takes {} argument(s) but each batch has {} part(s)",
                    fields.loss_params.len(),
                    batch.len()
                ),
            )
            .label(fields.loss_span, "this loss")
            .into());
        }
        for (p, (v, s)) in fields.loss_params.iter().zip(batch) {
            let v = match &p.ty {
                Some(ty) => self.check_annotation(&v, ty, s, &scope)?,
                None => v,
            };
            scope.set(&p.name.name, v);
        }
        let v = self.eval(&fields.loss_body, &scope)?;
        match &v {
            Value::Tensor(id, ty) if ty.rank() == 0 && ty.dtype.is_float() => {
                Ok(super::tensor::Operand { id: *id, ty: ty.clone(), span: fields.loss_body.span })
            }
            other => Err(Diagnostic::new(
                Code::LossNotScalar,
                format!("the loss must be a float scalar, but it is {}", other.describe()),
            )
            .label(fields.loss_body.span, other.describe())
            .help("reduce it, e.g. with `mean(...)`; the std losses already return the batch mean")
            .into()),
        }
    }

    /// Scales all gradients by `min(1, max_norm / (‖g‖ + 1e-6))`, `‖g‖` the
    /// global norm over all of them (PyTorch's `clip_grad_norm_`); returns
    /// the scaled gradients and the norm.
    fn clip_by_global_norm(&mut self, grads: &[NodeId], max_norm: f64, span: Span) -> TResult<(Vec<NodeId>, NodeId)> {
        // The squares are taken and summed in f32 (in f16 or bf16 they would
        // overflow or round away), or in f64 when a gradient is f64 (so f64
        // training keeps its precision; it used to be rounded to f32).
        let acc =
            if grads.iter().any(|&g| self.graph.node(g).ty.dtype == DType::F64) { DType::F64 } else { DType::F32 };
        let mut total: Option<Value> = None;
        for &g in grads {
            let ty = self.graph.node(g).ty.clone();
            let g = self.operand(&Value::Tensor(g, ty), None, span)?;
            let g = self.cast(&g, acc, span)?;
            let v = Value::Tensor(g.id, g.ty);
            let sq = self.binary(BinaryOp::Mul, (&v, span), (&v, span), span)?;
            let o = self.operand(&sq, None, span)?;
            let axes: Vec<usize> = (0..o.ty.rank()).collect();
            let s = self.node(Op::Reduce { op: ReduceOp::Sum, axes, keepdims: false }, &[&o], span)?;
            let sv = Value::Tensor(s.id, s.ty);
            total = Some(match total {
                None => sv,
                Some(t) => self.binary(BinaryOp::Add, (&t, span), (&sv, span), span)?,
            });
        }
        let total = total.unwrap_or(Value::Float(0.0));
        let norm = self.unary_op(UnaryOp::Sqrt, &total, span, span)?;
        let denom = self.binary(BinaryOp::Add, (&norm, span), (&Value::Float(1e-6), span), span)?;
        let ratio = self.binary(BinaryOp::Div, (&Value::Float(max_norm), span), (&denom, span), span)?;
        let scale = self.binary(BinaryOp::Minimum, (&ratio, span), (&Value::Float(1.0), span), span)?;
        let mut out = Vec::new();
        for &g in grads {
            let ty = self.graph.node(g).ty.clone();
            let s = self.operand(&scale, None, span)?;
            let s = self.cast(&s, ty.dtype, span)?;
            let gv = Value::Tensor(g, ty);
            let r = self.binary(BinaryOp::Mul, (&gv, span), (&Value::Tensor(s.id, s.ty), span), span)?;
            out.push(tensor_id(&r));
        }
        let norm = self.operand(&norm, None, span)?.id;
        Ok((out, norm))
    }

    /// One parameter's optimizer update: evaluates the `update` block with
    /// `param`, `grad`, `step` and the states bound; returns the new
    /// parameter and the new states.
    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        opt: &OptimizerValue,
        p: &ParamInfo,
        param: &Value,
        grad: NodeId,
        step: &Value,
        states: &[(Value, Span)],
        span: Span,
    ) -> TResult<(NodeId, Vec<NodeId>)> {
        let scope = self.scopes.child(&opt.scope);
        // The step number is an f32 region input; the update sees it in the
        // parameter's float dtype, so that `beta ^ step` or a schedule's
        // rate meets an f64 (or f16) parameter without a dtype error.
        let step = if p.ty.dtype.is_float() {
            let o = self.operand(step, None, span)?;
            let o = self.cast(&o, p.ty.dtype, span)?;
            Value::Tensor(o.id, o.ty)
        } else {
            step.clone()
        };
        let step = &step;
        // A hyper-parameter given as a function is a schedule of the step.
        for hp in &opt.def.params {
            if let Some(f @ (Value::Func(_) | Value::Builtin(_))) = opt.scope.get_local(&hp.name.name) {
                let v = self.call_value(f, hp.span, vec![(step.clone(), span)], vec![], span)?;
                scope.set(&hp.name.name, v);
            }
        }
        scope.set("param", param.clone());
        scope.set("grad", Value::Tensor(grad, p.ty.clone()));
        scope.set("step", step.clone());
        for ((name, _), (v, _)) in opt.def.states.iter().zip(states) {
            scope.set(&name.name, v.clone());
        }
        let result = self.block_in(&opt.def.update, &scope)?;
        let new_param = self.fit(&result, &p.ty, opt.def.update.span, &format!("the update of `{}`", p.path))?;
        let mut new_states = Vec::new();
        for (name, _) in &opt.def.states {
            let v = scope.get_local(&name.name).unwrap_or(Value::Poison);
            new_states.push(self.fit(
                &v,
                &p.ty,
                name.span,
                &format!("optimizer state `{}` of `{}`", name.name, p.path),
            )?);
        }
        Ok((new_param, new_states))
    }

    /// Converts `v` to exactly type `ty` (numbers broadcast; a different
    /// dtype or shape is an error naming `what`).
    pub(crate) fn fit(&mut self, v: &Value, ty: &TensorType, span: Span, what: &str) -> TResult<NodeId> {
        let o = self.operand(v, Some(ty.dtype), span)?;
        if o.ty.dtype != ty.dtype
            || crate::ir::infer::broadcast_shapes(&o.ty.shape, &ty.shape).as_deref() != Some(&ty.shape[..])
        {
            return Err(Diagnostic::new(Code::Annotation, format!("{what} must be {ty}, but it is {}", o.ty))
                .label(span, o.ty.to_string())
                .into());
        }
        Ok(self.broadcast_to(&o, &ty.shape, span)?.id)
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_plan(
        &mut self,
        model: &Rc<ModelInstance>,
        params: &[ParamInfo],
        model_states: &[StateInfo],
        metric: &ast::Expr,
        data: &ast::Expr,
        every: Cadence,
        name: &str,
        env: &Rc<Scope>,
    ) -> TResult<EvalPlan> {
        let span = metric.span;
        // The metric reads the current parameters and model states (a
        // BatchNorm's running statistics), then inputs of its regions.
        let types: Vec<TensorType> =
            params.iter().map(|p| p.ty.clone()).chain(model_states.iter().map(|s| s.ty.clone())).collect();
        let (param_inputs, args) = self.slots_for(&types, span);
        let args: Vec<Value> = args.into_iter().map(|(v, _)| v).collect();
        let (param_args, state_args) = args.split_at(params.len());
        for (p, v) in params.iter().zip(param_args) {
            model.set_param(&p.path, v.clone());
        }
        bind_states(model_states, state_args);
        let f = self.eval(metric, env)?;
        let d = self.eval(data, env)?;
        let saved = self.pending_reduce.replace(Vec::new());
        let r = self.call_value(f, span, vec![(Value::Model(model.clone()), span), (d, data.span)], vec![], span);
        let pending = std::mem::replace(&mut self.pending_reduce, saved).unwrap_or_default();
        r?;
        let Some(mut reduce) = pending.into_iter().next() else {
            return Err(Diagnostic::new(
                Code::Kind,
                "an `eval` metric must evaluate the model over the dataset (e.g. `accuracy` from std.metrics)",
            )
            .label(span, "this metric computes no dataset reduction")
            .into());
        };
        for (_, region) in &mut reduce.regions {
            region.inputs.extend(param_inputs.iter().cloned());
        }
        // The metric was traced once for every batch size, so its regions
        // read the same parameter slots: each gets its own copies, so that
        // each is one compilation unit of its own.
        let mut regions: Vec<&mut Region> = reduce.regions.iter_mut().map(|(_, r)| r).collect();
        crate::ir::regions::unshare(&mut self.graph, &mut regions);
        Ok(EvalPlan {
            name: name.to_string(),
            reduce,
            param_slots: param_inputs.iter().map(|(s, _)| *s).collect(),
            every,
        })
    }
}

/// What every step region of a train block is traced from: the block, its
/// model and data, what the step carries, the block's settings and scope.
#[derive(Clone, Copy)]
struct StepSource<'a> {
    t: &'a ast::TrainDef,
    model: &'a Rc<ModelInstance>,
    data: &'a Dataset,
    carried: Carried<'a>,
    fields: &'a Fields,
    env: &'a Rc<Scope>,
}

/// What a step carries from one step to the next, in the order of its
/// inputs after the batch and the step number.
#[derive(Clone, Copy)]
struct Carried<'a> {
    params: &'a [ParamInfo],
    states: &'a [(String, NodeId, TensorType)],
    model_states: &'a [StateInfo],
}

/// The virtual shards a data-parallel run splits this block's global
/// batches into: `--shards`, or the default for its full batch; checked
/// against the batch and the number of processes (E0411 says what to
/// change).
fn shards_of(dp: DataParallel, data: &Dataset, span: Span) -> TResult<usize> {
    let batch = data.batch_sizes.first().copied().unwrap_or(1);
    let shards = dp.shards.unwrap_or_else(|| ParallelStep::default_shards(batch));
    let error = |message: String| Diagnostic::new(Code::Shards, message).label(span, format!("batches of {batch}"));
    if !shards.is_power_of_two() {
        return Err(error(format!("{shards} virtual shards: the number must be a power of two"))
            .help("pass `--shards` 1, 2, 4, 8, …: the shards' gradients are summed over a binary tree")
            .into());
    }
    if shards > batch {
        return Err(error(format!("a batch of {batch} examples cannot be split into {shards} shards"))
            .help(format!("pass `--shards {}` or less, or make the batch larger", 1usize << batch.max(1).ilog2()))
            .into());
    }
    if !shards.is_multiple_of(dp.world) {
        let multiple = dp.world.next_power_of_two();
        let help = match batch.is_multiple_of(multiple) {
            true => format!("pass `--shards {multiple}` (a multiple of the {} workers; the result then depends on it, not on the workers), or run on a number of workers that divides {shards}", dp.world),
            false => format!("run on a number of workers that divides {shards}, or make the batch a multiple of {multiple} and pass `--shards {multiple}`"),
        };
        return Err(error(format!(
            "{} workers cannot share the {shards} virtual shards of each global batch of {batch}",
            dp.world
        ))
        .help(help)
        .into());
    }
    Ok(shards)
}

/// The bound inputs of a step region (`Tracer::step_inputs`).
struct StepInputs {
    batch_inputs: Vec<(usize, TensorType)>,
    weight_input: Vec<(usize, TensorType)>,
    step_input: Vec<(usize, TensorType)>,
    param_inputs: Vec<(usize, TensorType)>,
    state_inputs: Vec<(usize, TensorType)>,
    model_state_inputs: Vec<(usize, TensorType)>,
    batch: Vec<(Value, Span)>,
    /// A virtual shard's weight (data-parallel gradient regions only).
    weight: Option<Value>,
    update: UpdateInputs,
}

/// What an optimizer update reads besides the gradients.
struct UpdateInputs {
    step: Value,
    params: Vec<(Value, Span)>,
    states: Vec<(Value, Span)>,
}

/// A traced loss: its node, each parameter's gradient (of the weighted,
/// scaled loss) and the model states the loss left.
struct TracedLoss {
    loss: NodeId,
    gradients: Vec<NodeId>,
    model_states: Vec<NodeId>,
}

/// The end of a step: new parameters and optimizer states, and the
/// gradients and global norm the updates read (`StepParts`).
struct Updated {
    params: Vec<NodeId>,
    states: Vec<NodeId>,
    gradients: Vec<NodeId>,
    global_norm: Option<NodeId>,
}

/// With f16 loss scaling, the carried scale states (the last optimizer
/// states, `LOSS_SCALE_STATES`).
fn scale_inputs(fields: &Fields, states: &[(Value, Span)]) -> Option<ScaleInputs> {
    match fields.precision {
        Some((DType::F16, _)) => Some(ScaleInputs::of(&states[states.len() - LOSS_SCALE_STATES.len()..])),
        _ => None,
    }
}

/// The settings of a train block, read and checked.
struct Fields {
    loss_params: Vec<ast::Param>,
    loss_body: ast::Expr,
    loss_span: Span,
    optimizer: Rc<OptimizerValue>,
    epochs: Option<usize>,
    steps: Option<usize>,
    clip: Option<f64>,
    checkpoint: Option<(String, Cadence)>,
    log: Option<LogPlan>,
    resume: Option<String>,
    precision: Option<(DType, Span)>,
    evals: Vec<(ast::Expr, ast::Expr, Cadence, String)>,
}

impl Fields {
    fn read(tr: &mut Tracer, t: &ast::TrainDef, env: &Rc<Scope>) -> TResult<Fields> {
        let mut loss = None;
        let mut optimizer = None;
        let (mut epochs, mut steps, mut clip, mut checkpoint, mut log, mut resume) =
            (None, None, None, None, None, None);
        let mut precision = None;
        let mut evals = Vec::new();
        for f in &t.fields {
            match f {
                TrainField::Loss { params, body, span } => loss = Some((params.clone(), body.clone(), *span)),
                TrainField::Set { name, value, span } => {
                    let v = tr.eval(value, env)?;
                    match (name.name.as_str(), v) {
                        ("optimizer", Value::Optimizer(o)) => optimizer = Some(o),
                        ("optimizer", Value::OptimizerDef(d)) => {
                            let args = CallArgs { positional: vec![], named: vec![] };
                            if let Value::Optimizer(o) = tr.instantiate_optimizer(&d, args, *span)? {
                                optimizer = Some(o);
                            }
                        }
                        ("epochs", Value::Int(n)) if n > 0 => epochs = Some(n as usize),
                        ("steps", Value::Int(n)) if n > 0 => steps = Some(n as usize),
                        ("clip_grad_norm", Value::Int(n)) if n > 0 => clip = Some(n as f64),
                        ("clip_grad_norm", Value::Float(x)) if x > 0.0 => clip = Some(x),
                        ("resume", Value::Str(s)) => resume = Some(s),
                        ("precision", Value::Str(s)) => {
                            let dtype = precision_named(&s).map_err(|d| d.label(value.span, "here"))?;
                            precision = dtype.map(|d| (d, value.span));
                        }
                        ("workers", Value::Int(1)) => {}
                        ("workers", _) => {
                            return Err(Diagnostic::new(
                                Code::Unsupported,
                                "data-parallel training (`workers`) is not supported yet",
                            )
                            .label(*span, "here")
                            .into())
                        }
                        (n @ ("optimizer" | "epochs" | "steps" | "clip_grad_norm" | "resume" | "precision"), other) => {
                            let want = match n {
                                "optimizer" => "an optimizer such as `adam(lr = 1e-3)`",
                                "resume" => "a checkpoint path string",
                                "precision" => "a precision string (\"bf16\", \"f16\" or \"f32\")",
                                "clip_grad_norm" => "a positive number",
                                _ => "a positive int",
                            };
                            return Err(Diagnostic::new(
                                Code::Kind,
                                format!("`{n}` must be {want}, found {}", found(&other)),
                            )
                            .label(value.span, "here")
                            .into());
                        }
                        (other, _) => {
                            let known =
                                ["optimizer", "epochs", "steps", "clip_grad_norm", "resume", "workers", "precision"];
                            let mut d =
                                Diagnostic::new(Code::UnknownField, format!("`{other}` is not a train setting"))
                                    .label(name.span, "unknown setting");
                            if let Some(s) = crate::diag::did_you_mean(other, known) {
                                d = d.help(format!("did you mean `{s}`?"));
                            }
                            return Err(d.into());
                        }
                    }
                }
                TrainField::Eval { metric, data, every, .. } => {
                    let n = cadence(tr, every.as_ref(), env)?;
                    let name = match &metric.kind {
                        ast::ExprKind::Name(n) => n.clone(),
                        _ => "metric".into(),
                    };
                    evals.push((metric.clone(), data.clone(), n, name));
                }
                TrainField::Checkpoint { path, every, .. } => {
                    let p = match tr.eval(path, env)? {
                        Value::Str(s) => s,
                        other => return Err(kind_error(path.span, "a path string", &other)),
                    };
                    checkpoint = Some((p, cadence(tr, every.as_ref(), env)?));
                }
                TrainField::Log { path, every, format, .. } => {
                    let p = match tr.eval(path, env)? {
                        Value::Str(s) => s,
                        other => return Err(kind_error(path.span, "a path string", &other)),
                    };
                    let every = cadence(tr, every.as_ref(), env)?;
                    let format = match format {
                        Some(f) => log_format(tr, f, env)?,
                        None => LogFormat::Jsonl,
                    };
                    log = Some(LogPlan { path: p, every, format });
                }
            }
        }
        let Some((loss_params, loss_body, loss_span)) = loss else {
            return Err(Diagnostic::new(Code::MissingArgument, "a train block needs a loss: `loss(x, y) = …`")
                .label(t.span, "no loss here")
                .into());
        };
        let Some(optimizer) = optimizer else {
            return Err(Diagnostic::new(
                Code::MissingArgument,
                "a train block needs an optimizer: `optimizer = adam(lr = 1e-3)`",
            )
            .label(t.span, "no optimizer here")
            .into());
        };
        if epochs.is_none() && steps.is_none() {
            epochs = Some(1);
        }
        Ok(Fields {
            loss_params,
            loss_body,
            loss_span,
            optimizer,
            epochs,
            steps,
            clip,
            checkpoint,
            log,
            resume,
            precision,
            evals,
        })
    }
}

/// f16 loss scaling (PyTorch's `GradScaler` defaults): the scale starts at
/// 2^15, halves on a step whose gradients are not all finite (which then
/// changes no parameter or optimizer state), and doubles after this many
/// clean steps in a row.
const INITIAL_LOSS_SCALE: f64 = 32768.0;
const LOSS_SCALE_GROWTH_INTERVAL: f64 = 2000.0;

/// A step's loss-scaling inputs: the scale, the clean steps since it last
/// changed, and the steps skipped so far (`LOSS_SCALE_STATES`).
struct ScaleInputs {
    scale: Value,
    clean: Value,
    skipped: Value,
}

impl ScaleInputs {
    fn of(args: &[(Value, Span)]) -> ScaleInputs {
        ScaleInputs { scale: args[0].0.clone(), clean: args[1].0.clone(), skipped: args[2].0.clone() }
    }
}

impl Tracer<'_> {
    /// The gradients divided by `scale`, and whether all of them are finite
    /// (a bool scalar): the magnitude of the sum of all their elements is
    /// below infinity. A NaN or an infinity anywhere makes the sum NaN or
    /// infinite (opposite infinities make NaN); finite gradients would
    /// need a sum beyond 3e38 to look infinite, and a step with such
    /// gradients is better skipped anyway. One sum is the cheapest
    /// reduction there is (a largest magnitude took ten times as long).
    fn unscale(&mut self, grads: &[NodeId], scale: &Value, span: Span) -> TResult<(Vec<NodeId>, Value)> {
        let mut unscaled = Vec::with_capacity(grads.len());
        let mut total: Option<Value> = None;
        for &g in grads {
            let ty = self.graph.node(g).ty.clone();
            let v = self.binary(BinaryOp::Div, (&Value::Tensor(g, ty), span), (scale, span), span)?;
            unscaled.push(tensor_id(&v));
            let o = self.operand(&v, None, span)?;
            let o = self.cast(&o, DType::F32, span)?;
            let axes: Vec<usize> = (0..o.ty.rank()).collect();
            let sum = self.node(Op::Reduce { op: ReduceOp::Sum, axes, keepdims: false }, &[&o], span)?;
            let sum = Value::Tensor(sum.id, sum.ty);
            total = Some(match total {
                None => sum,
                Some(t) => self.binary(BinaryOp::Add, (&t, span), (&sum, span), span)?,
            });
        }
        let total = total.unwrap_or(Value::Float(0.0));
        let magnitude = self.unary_op(UnaryOp::Abs, &total, span, span)?;
        let finite = self.binary(BinaryOp::Lt, (&magnitude, span), (&Value::Float(f64::INFINITY), span), span)?;
        Ok((unscaled, finite))
    }

    /// `where(finite, new, old)` over `new`'s shape (`finite` a bool scalar).
    fn keep_unless(&mut self, finite: &Value, new: NodeId, old: NodeId, span: Span) -> TResult<NodeId> {
        let ty = self.graph.node(new).ty.clone();
        let c = self.operand(finite, Some(DType::Bool), span)?;
        let c = self.broadcast_to(&c, &ty.shape, span)?;
        let new = self.operand(&Value::Tensor(new, ty.clone()), None, span)?;
        let old = self.operand(&Value::Tensor(old, self.graph.node(old).ty.clone()), None, span)?;
        Ok(self.node(Op::Select, &[&c, &new, &old], span)?.id)
    }

    /// The scale, clean-step count and skipped-step count after a step
    /// (see `INITIAL_LOSS_SCALE`).
    fn next_loss_scale(&mut self, s: &ScaleInputs, finite: &Value, span: Span) -> TResult<Vec<NodeId>> {
        let f = |x: f64| Value::Float(x);
        let clean = self.binary(BinaryOp::Add, (&s.clean, span), (&f(1.0), span), span)?;
        let grow = self.binary(BinaryOp::Ge, (&clean, span), (&f(LOSS_SCALE_GROWTH_INTERVAL), span), span)?;
        let doubled = self.binary(BinaryOp::Mul, (&s.scale, span), (&f(2.0), span), span)?;
        let halved = self.binary(BinaryOp::Mul, (&s.scale, span), (&f(0.5), span), span)?;
        let skipped = self.binary(BinaryOp::Add, (&s.skipped, span), (&f(1.0), span), span)?;
        let zero = self.scalar(0.0, DType::F32, span)?.id;
        let id = tensor_id;
        let grown = self.keep_unless(&grow, id(&doubled), id(&s.scale), span)?;
        let scale = self.keep_unless(finite, grown, id(&halved), span)?;
        let counted = self.keep_unless(&grow, zero, id(&clean), span)?;
        let clean = self.keep_unless(finite, counted, zero, span)?;
        let skipped = self.keep_unless(finite, id(&s.skipped), id(&skipped), span)?;
        Ok(vec![scale, clean, skipped])
    }
}

/// The low type a `precision` name asks for: `"bf16"` and `"f16"`, or
/// `None` for `"f32"` (no mixed precision); E0323 for any other name.
pub fn precision_named(name: &str) -> Result<Option<DType>, Diagnostic> {
    match name {
        "bf16" => Ok(Some(DType::BF16)),
        "f16" => Ok(Some(DType::F16)),
        "f32" => Ok(None),
        _ => Err(Diagnostic::new(Code::Precision, format!("there is no precision named `{name}`"))
            .help("the precisions are \"bf16\", \"f16\" and \"f32\" (no mixed precision)")),
    }
}

/// E0323: mixed precision asked of a model that has no `f32` parameter.
fn no_f32_parameters(dtype: DType, model: &str, span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::Precision,
        format!("precision {dtype} has nothing to apply to: model `{model}` has no f32 parameters"),
    )
    .label(span, "asked for here")
    .help("mixed precision runs the products of f32 parameters in the low type; train in the parameters' own type")
}

/// A `log` setting's `format = "jsonl"|"tensorboard"`.
fn log_format(tr: &mut Tracer, f: &ast::Expr, env: &Rc<Scope>) -> TResult<LogFormat> {
    let name = match tr.eval(f, env)? {
        Value::Str(s) => s,
        other => return Err(kind_error(f.span, "a log format string such as \"tensorboard\"", &other)),
    };
    if let Some(format) = LogFormat::from_name(&name) {
        return Ok(format);
    }
    let list = LogFormat::NAMES.map(|n| format!("\"{n}\"")).join(" or ");
    let mut d = Diagnostic::new(Code::BadValue, format!("`{name}` is not a log format: use {list}"))
        .label(f.span, "unknown format");
    if let Some(s) = crate::diag::did_you_mean(&name, LogFormat::NAMES) {
        d = d.help(format!("did you mean \"{s}\"?"));
    }
    Err(d.into())
}

/// `every n epochs|steps`; without one, every epoch.
fn cadence(tr: &mut Tracer, every: Option<&ast::Every>, env: &Rc<Scope>) -> TResult<Cadence> {
    let Some(e) = every else { return Ok(Cadence::Epochs(1)) };
    let n = match tr.eval(&e.count, env)? {
        Value::Int(n) if n > 0 => n as u64,
        other => return Err(kind_error(e.count.span, "a positive int", &other)),
    };
    Ok(match e.unit {
        ast::EveryUnit::Epochs => Cadence::Epochs(n),
        ast::EveryUnit::Steps => Cadence::Steps(n),
    })
}

fn kind_error(span: Span, want: &str, value: &Value) -> super::Fail {
    Diagnostic::new(Code::Kind, format!("expected {want}, found {}", found(value))).label(span, value.describe()).into()
}

/// What a setting was given, its value when it is a number (`-1`, not
/// just "an int": the kind alone does not say what is wrong with it).
fn found(value: &Value) -> String {
    match value {
        Value::Int(n) => n.to_string(),
        Value::Float(x) => x.to_string(),
        other => other.describe(),
    }
}

fn tensor_id(v: &Value) -> NodeId {
    match v {
        Value::Tensor(id, _) => *id,
        _ => NodeId::end(),
    }
}
