//! Writes to a model's `state` (§6), and the states a training step
//! carries from one step to the next.
//!
//! Contract: inside a model's methods, `name = value` where `name` is one
//! of the model's declared states (and no local or argument of that name
//! hides it) *writes* the state. A write is allowed only while the loss of
//! a `train` block is traced (`training` is true) and only to a state of
//! the model being trained (E0321 otherwise, at the assignment). The value
//! must have the state's dtype and broadcast to its shape (E0308, as an
//! optimizer state's), and only a tensor state can be written. The stored
//! value passes through `Op::StopGradient`, so code that reads the state
//! after the write does not differentiate through the update. It is bound
//! in the model's scope: every later read in the step sees it, a second
//! write replaces it (the last one wins), and the value bound when the loss
//! is traced is the step's new state (`Tracer::step_region` carries it).
//!
//! Example: with `model Count { state n: f32[] = zeros(); fn forward(x) {
//! if training { n = n + 1.0 }; x } }`, every training step adds one to
//! `n`, and after `train` the model's `n` is the number of steps.

use super::value::{ModelInstance, Scope, Value};
use super::{TResult, Tracer};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{NodeId, Op, TensorType};
use crate::syntax::ast;
use std::rc::Rc;

/// A tensor state of the trained model: where it is bound, and its value
/// before training.
pub(crate) struct StateInfo {
    /// Its path from the trained model (`bn1.running_mean`), its name in
    /// checkpoints and `save`.
    pub path: String,
    /// The scope of the model that declares it, and its name there.
    pub owner: Rc<Scope>,
    pub name: String,
    pub init: NodeId,
    pub ty: TensorType,
}

/// Every tensor state of `model` and its sub-models, in `state_paths`
/// order. A state that is not a tensor (`state n = 3`) cannot change, so
/// it is not carried.
pub(crate) fn carried_states(model: &ModelInstance) -> Vec<StateInfo> {
    model
        .state_paths()
        .into_iter()
        .filter_map(|(path, v, owner)| match v {
            Value::Tensor(init, ty) => {
                let name = path.rsplit('.').next().unwrap_or(&path).to_string();
                Some(StateInfo { path, owner, name, init, ty })
            }
            _ => None,
        })
        .collect()
}

/// Binds each state to `values` (a step's or an eval's input slots, or the
/// trained values after training).
pub(crate) fn bind_states(states: &[StateInfo], values: &[Value]) {
    for (s, v) in states.iter().zip(values) {
        s.owner.set(&s.name, v.clone());
    }
}

impl Tracer<'_> {
    /// `name = v` where `name` is a state declared by the model whose scope
    /// is `owner` (see the module header).
    pub(crate) fn write_state(&mut self, owner: &Rc<Scope>, name: &ast::Ident, v: Value, span: Span) -> TResult<()> {
        let state = &name.name;
        let ty = match owner.get_local(state) {
            Some(Value::Tensor(_, ty)) => ty,
            Some(Value::Poison) => return Err(super::Fail::Poisoned),
            other => {
                let what = other.map_or("nothing".to_string(), |o| o.describe());
                return Err(Diagnostic::new(Code::Kind, format!("state `{state}` is {what}, not a tensor"))
                    .label(name.span, "written here")
                    .help("only a state with a tensor type, such as `state n: f32[] = zeros()`, can be written")
                    .into());
            }
        };
        if !self.training {
            return Err(Diagnostic::new(Code::StateWrite, format!("state `{state}` is written outside a training step"))
                .label(span, "this write")
                .note("a model's state changes only while the loss of a `train` block is traced (`training` is true); `print(net(x))`, `eval` metrics and inference read it")
                .help("guard the write with `if training { … }`")
                .into());
        }
        if !self.step_models.iter().any(|m| Rc::ptr_eq(m, owner)) {
            return Err(Diagnostic::new(
                Code::StateWrite,
                format!("state `{state}` belongs to a model that this `train` block does not train"),
            )
            .label(span, "this write")
            .note("a training step carries the states of the model it trains, and of its sub-models, only")
            .into());
        }
        let fitted = self.fit(&v, &ty, span, &format!("the value written to state `{state}`"))?;
        let o = super::tensor::Operand { id: fitted, ty: ty.clone(), span };
        let stopped = self.node(Op::StopGradient, &[&o], span)?;
        owner.set(state, Value::Tensor(stopped.id, ty));
        Ok(())
    }
}
