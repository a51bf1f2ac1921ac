//! Values of the tracer: compile-time values (numbers, strings, functions,
//! models) and tensors, which are nodes of the graph being built.

use crate::diag::Span;
use crate::ir::{DType, NodeId, TensorType};
use crate::syntax::ast;
use rustc_hash::FxHashMap as HashMap;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// A value during tracing.
#[derive(Clone, Debug)]
pub enum Value {
    /// A compile-time integer (`int`): shape arithmetic, axes, counts. In a
    /// tensor context it takes the dtype of the tensor it meets (i32 alone).
    Int(i64),
    /// A compile-time float (`float`); in a tensor context it takes the
    /// tensor's dtype (f32 alone).
    Float(f64),
    Bool(bool),
    Str(String),
    /// A dtype used as a value: `cast(x, f16)`, `zeros([2], dtype = i32)`.
    DType(DType),
    /// A tensor: a node of the graph, with its type.
    Tensor(NodeId, TensorType),
    Tuple(Vec<Value>),
    /// A user function or lambda, with the scope it closes over.
    Func(Rc<Closure>),
    /// A built-in operation, by name.
    Builtin(&'static str),
    /// A model definition (calling it makes an instance).
    ModelDef(Rc<ModelDefValue>),
    /// A model instance: its fields (params, sub-models, settings).
    Model(Rc<ModelInstance>),
    /// A method bound to its model instance: `net.forward`.
    Method(Rc<ModelInstance>, Arc<ast::FnDef>),
    /// An imported module used as a namespace (`use std.nn` then `nn.Dense`).
    Module(Rc<Scope>),
    /// A dataset pipeline (§8).
    Dataset(Rc<crate::ir::plan::Dataset>),
    /// An `optimizer` item (calling it binds its hyper-parameters).
    OptimizerDef(Rc<OptimizerDefValue>),
    /// An optimizer with its hyper-parameters bound: `adam(lr = 1e-3)`.
    Optimizer(Rc<OptimizerValue>),
    /// `grad(f, wrt)` or `value_and_grad(f, wrt)`: calling it traces `f`
    /// and differentiates the result.
    Grad(Rc<GradFn>),
    /// The value of a binding whose definition failed: using it reports
    /// nothing new, so one mistake gives one diagnostic.
    Poison,
}

impl Value {
    /// A short description of the value's kind, for diagnostics.
    pub fn describe(&self) -> String {
        match self {
            Value::Int(_) => "an int".into(),
            Value::Float(_) => "a float".into(),
            Value::Bool(_) => "a bool".into(),
            Value::Str(_) => "a string".into(),
            Value::DType(_) => "a dtype".into(),
            Value::Tensor(_, t) => format!("a tensor {t}"),
            Value::Tuple(v) => format!("a tuple of {}", v.len()),
            Value::Func(_) | Value::Builtin(_) | Value::Method(..) | Value::Grad(_) => "a function".into(),
            Value::ModelDef(_) => "a model definition".into(),
            Value::Model(m) => format!("a model `{}`", m.def.name.name),
            Value::Module(_) => "a module".into(),
            Value::Poison => "an erroneous value".into(),
            Value::Dataset(d) => format!("a dataset of {}", crate::trace::data_elements_text(d)),
            Value::OptimizerDef(_) => "an optimizer definition".into(),
            Value::Optimizer(_) => "an optimizer".into(),
        }
    }
}

/// A function value: the definition plus the scope it was defined in. The
/// definition is shared with the AST (a lambda gets one of its own), so
/// making a closure copies no syntax tree.
#[derive(Debug)]
pub struct Closure {
    pub def: Arc<ast::FnDef>,
    pub env: Rc<Scope>,
}

impl Closure {
    /// The function's name (`<lambda>` for a lambda).
    pub fn name(&self) -> &str {
        &self.def.name.name
    }

    /// Where the function is named (a lambda: the whole lambda).
    pub fn span(&self) -> Span {
        self.def.name.span
    }
}

#[derive(Debug)]
pub struct OptimizerDefValue {
    pub def: ast::OptimizerDef,
    pub env: Rc<Scope>,
}

/// An optimizer whose hyper-parameters are bound in `scope`.
#[derive(Debug)]
pub struct OptimizerValue {
    pub def: ast::OptimizerDef,
    pub scope: Rc<Scope>,
}

/// A function transformed by `grad` or `value_and_grad`.
#[derive(Debug)]
pub struct GradFn {
    pub f: Value,
    /// Positions of the differentiated arguments.
    pub wrt: Vec<usize>,
    /// `wrt` was a single int (the gradient is returned bare, not in a tuple).
    pub single: bool,
    /// `value_and_grad`: return `(value, gradients)`.
    pub with_value: bool,
}

#[derive(Debug)]
pub struct ModelDefValue {
    pub def: ast::ModelDef,
    pub env: Rc<Scope>,
}

/// An instantiated model: constructor arguments, parameters (as tensors),
/// sub-models and other fields, by name in declaration order.
#[derive(Debug)]
pub struct ModelInstance {
    pub def: ast::ModelDef,
    /// Constructor arguments and fields, visible by bare name in methods.
    pub scope: Rc<Scope>,
    /// Names of the trainable parameters declared directly by this model.
    pub params: Vec<String>,
    /// Names of the `state`s declared directly by this model (§6): what a
    /// training step may write, carried and checkpointed like parameters.
    pub states: Vec<String>,
    /// Names of the sub-model fields: a model, or a list (a tuple) that
    /// holds models (`blocks = [Block(d) for i in 0..n]`).
    pub submodels: Vec<String>,
    /// A model loaded by `load_onnx`: calling it traces the ONNX graph
    /// (its parameters are the initializers, by their ONNX names).
    pub onnx: Option<Rc<crate::trace::builtins::OnnxModel>>,
}

impl ModelInstance {
    /// Rebinds the parameter or state at `path` (`l1.w`, `blocks.0.w`,
    /// `bn.running_mean`) to `value`.
    pub fn set_param(&self, path: &str, value: Value) {
        // A parameter's own name may hold dots (an ONNX initializer `l1.w`).
        if self.params.iter().chain(&self.states).any(|p| p == path) {
            return self.scope.set(path, value);
        }
        match path.split_once('.') {
            Some((sub, rest)) => {
                if let Some(v) = self.scope.get_local(sub) {
                    set_in(&v, rest, value);
                }
            }
            None => self.scope.set(path, value),
        }
    }

    /// `l1.w`-style paths of every parameter, depth first in declaration
    /// order; the models of a list are numbered (`blocks.0.w`).
    pub fn param_paths(&self) -> Vec<(String, Value)> {
        self.paths(&|m| &m.params).into_iter().map(|(p, v, _)| (p, v)).collect()
    }

    /// `bn1.running_mean`-style paths of every state, in the order of
    /// `param_paths`, each with its value and the model scope that binds
    /// it (which a write in a training step rebinds).
    pub fn state_paths(&self) -> Vec<(String, Value, Rc<Scope>)> {
        self.paths(&|m| &m.states)
    }

    /// Every parameter, then every state, by path: what `save` writes,
    /// `load` reads, and a REPL entry that trains or loads changes.
    pub fn tensor_paths(&self) -> Vec<(String, Value)> {
        let mut out = self.param_paths();
        out.extend(self.state_paths().into_iter().map(|(p, v, _)| (p, v)));
        out
    }

    /// The members `which` names, here and in every sub-model, by path.
    fn paths(&self, which: &dyn Fn(&ModelInstance) -> &[String]) -> Vec<(String, Value, Rc<Scope>)> {
        let mut out = Vec::new();
        for name in which(self) {
            if let Some(v) = self.scope.get_local(name) {
                out.push((name.clone(), v, self.scope.clone()));
            }
        }
        for sub in &self.submodels {
            if let Some(v) = self.scope.get_local(sub) {
                paths_in(&v, sub, which, &mut out);
            }
        }
        out
    }
}

/// True for a model, or a list that holds one (at any depth).
pub fn holds_models(v: &Value) -> bool {
    match v {
        Value::Model(_) => true,
        Value::Tuple(items) => items.iter().any(holds_models),
        _ => false,
    }
}

/// The paths under `prefix` of the members `which` names in the models of `v`.
fn paths_in(
    v: &Value,
    prefix: &str,
    which: &dyn Fn(&ModelInstance) -> &[String],
    out: &mut Vec<(String, Value, Rc<Scope>)>,
) {
    match v {
        Value::Model(m) => out.extend(m.paths(which).into_iter().map(|(p, v, s)| (format!("{prefix}.{p}"), v, s))),
        Value::Tuple(items) => {
            items.iter().enumerate().for_each(|(k, i)| paths_in(i, &format!("{prefix}.{k}"), which, out))
        }
        _ => {}
    }
}

/// Rebinds the parameter at `path` inside the model or list `v`.
fn set_in(v: &Value, path: &str, value: Value) {
    match v {
        Value::Model(m) => m.set_param(path, value),
        Value::Tuple(items) => {
            let (k, rest) = path.split_once('.').unwrap_or((path, ""));
            if let Some(item) = k.parse::<usize>().ok().and_then(|k| items.get(k)) {
                set_in(item, rest, value);
            }
        }
        _ => {}
    }
}

/// A lexical scope: names bound here, then the parent's.
#[derive(Debug, Default)]
pub struct Scope {
    vars: RefCell<HashMap<String, Value>>,
    parent: Option<Rc<Scope>>,
    /// In a model's scope: the names of its `state`s, which an assignment
    /// in its methods writes (§6) instead of rebinding locally.
    states: std::cell::OnceCell<Box<[String]>>,
}

impl Scope {
    /// A scope whose names fall back to `parent`'s; the tracer makes scopes
    /// through `Scopes::child`, which tears them down when it is done.
    pub(super) fn child(parent: &Rc<Scope>) -> Rc<Scope> {
        Rc::new(Scope {
            vars: RefCell::new(HashMap::default()),
            parent: Some(parent.clone()),
            states: Default::default(),
        })
    }

    /// The scope names fall back to.
    pub fn parent(&self) -> Option<&Rc<Scope>> {
        self.parent.as_ref()
    }

    /// Marks this scope as a model's, whose `states` an assignment writes.
    pub fn declare_states(&self, states: &[String]) {
        let _ = self.states.set(states.into());
    }

    /// True if `name` is a state this (model) scope declares.
    pub fn declares_state(&self, name: &str) -> bool {
        self.states.get().is_some_and(|s| s.iter().any(|n| n == name))
    }

    /// The scope that binds `name`: this one or the nearest parent.
    pub fn binder(self: &Rc<Scope>, name: &str) -> Option<Rc<Scope>> {
        let mut s = self;
        loop {
            if s.has_local(name) {
                return Some(s.clone());
            }
            s = s.parent.as_ref()?;
        }
    }

    /// Empties the scope, returning what was bound (see `scopes`).
    pub(super) fn take_vars(&self) -> HashMap<String, Value> {
        std::mem::take(&mut *self.vars.borrow_mut())
    }

    pub fn set(&self, name: &str, value: Value) {
        self.vars.borrow_mut().insert(name.to_string(), value);
    }

    pub fn get(&self, name: &str) -> Option<Value> {
        if let Some(v) = self.vars.borrow().get(name) {
            return Some(v.clone());
        }
        self.parent.as_ref().and_then(|p| p.get(name))
    }

    pub fn get_local(&self, name: &str) -> Option<Value> {
        self.vars.borrow().get(name).cloned()
    }

    /// Calls `f` on every value bound in this scope itself, in no
    /// particular order (no copy, no sort: cheap for a long session).
    pub fn for_each_local(&self, mut f: impl FnMut(&Value)) {
        self.vars.borrow().values().for_each(&mut f);
    }

    /// True if `name` is bound in this scope itself (not a parent).
    pub fn has_local(&self, name: &str) -> bool {
        self.vars.borrow().contains_key(name)
    }

    /// The names bound in this scope itself (not a parent), sorted.
    pub fn local_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.vars.borrow().keys().cloned().collect();
        names.sort();
        names
    }

    /// Every name visible from here, for did-you-mean suggestions.
    pub fn visible_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.vars.borrow().keys().cloned().collect();
        if let Some(p) = &self.parent {
            names.extend(p.visible_names());
        }
        names.sort();
        names.dedup();
        names
    }
}
