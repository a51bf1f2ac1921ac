//! `load_onnx(path)`: an ONNX model file as a model. The file is read and
//! decoded while the program is checked (types must be known before
//! anything runs; the path is relative to the program's file, as the data
//! loaders' are); each float initializer a node reads as data becomes a
//! parameter named by its ONNX name, so `train`, `save` and `load` see it;
//! calling the model checks the arguments against the graph's declared
//! inputs and traces the graph into the program's graph op by op
//! (`io::onnx::import`).
//!
//! Contract: an input's fixed dimensions must match the argument's (E0308
//! at the argument); a named dimension (`batch`) binds like `B` in
//! `f32[B, 784]` — the same size wherever it appears in one call (E0316);
//! a file that cannot be read is E0001, one that does not parse E0342, an
//! operator, attribute, opset or dtype tfc cannot import E0343 naming the
//! node. One output is the call's result, several a tuple.
//!
//! Example: `let net = load_onnx("mlp.onnx")` then `net(x)` for
//! `x: f32[64, 784]` when the file declares its input `f32[batch, 784]`.

use crate::diag::{Code, Diagnostic, Span};
use crate::io::onnx::import::{self, Input, Val};
use crate::io::onnx::model::{Dim, Model};
use crate::ir::Op;
use crate::syntax::ast;
use crate::tensor::Tensor;
use crate::trace::args::BuiltinArgs;
use crate::trace::call::CallArgs;
use crate::trace::value::{ModelInstance, Scope, Value};
use crate::trace::{TResult, Tracer};
use rustc_hash::FxHashMap as HashMap;
use std::rc::Rc;

/// A decoded ONNX model behind a model value.
#[derive(Debug)]
pub struct OnnxModel {
    model: Model,
    inputs: Vec<Input>,
    /// Initializers that are not parameters (shapes, axes, integer
    /// tables): bound as constants the importer can read.
    constants: Vec<(String, Tensor)>,
}

impl Tracer<'_> {
    pub(crate) fn load_onnx(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let path = match a.get(0) {
            Some((Value::Str(s), _)) => s.clone(),
            _ => return Err(a.bad(0, "a file path string")),
        };
        let at = a.span_of(0);
        let file_note = |d: Diagnostic| d.note(format!("while loading `{path}`"));
        let bytes = std::fs::read(self.base_dir.join(&path)).map_err(|e| {
            Diagnostic::new(Code::Io, format!("cannot read the ONNX model `{path}`: {e}")).label(at, "this file")
        })?;
        let model = crate::io::onnx::read::decode_model(&bytes).map_err(|d| file_note(d.label(at, "this file")))?;
        import::check_opsets(&model, at).map_err(file_note)?;
        let sig = import::signature(&model, at).map_err(file_note)?;
        let read = import::read_while_checking(&model);
        let scope = Rc::new(Scope::default());
        let (mut params, mut constants) = (Vec::new(), Vec::new());
        for (name, t) in sig.initializers {
            if import::is_parameter(&name, &t, &read) {
                let ty = t.ty();
                let id = self.graph.add(Op::Constant { value: t.to_literal(), ty: ty.clone() }, &[], ty.clone(), at);
                scope.set(&name, Value::Tensor(id, ty));
                params.push(name);
            } else {
                constants.push((name, t));
            }
        }
        let stem = std::path::Path::new(&path).file_stem().map(|s| s.to_string_lossy().into_owned());
        let name = ast::Ident { name: stem.unwrap_or_else(|| "onnx".into()), span: at };
        let def = ast::ModelDef { name, params: vec![], members: vec![], span: a.span };
        let onnx = Rc::new(OnnxModel { model, inputs: sig.inputs, constants });
        let instance = ModelInstance { def, scope, params, states: vec![], submodels: vec![], onnx: Some(onnx) };
        Ok(Value::Model(Rc::new(instance)))
    }

    /// Calls a model loaded by `load_onnx` on `args`.
    pub(crate) fn call_onnx(&mut self, m: &ModelInstance, args: CallArgs, f_span: Span, span: Span) -> TResult<Value> {
        let Some(onnx) = m.onnx.clone() else {
            return Err(Diagnostic::internal("call_onnx on a model without a graph").into());
        };
        let name = &m.def.name.name;
        if let Some((arg, _, s)) = args.named.first() {
            return Err(Diagnostic::new(
                Code::UnknownArgument,
                format!("the ONNX model `{name}` takes its inputs by position, not `{arg}`"),
            )
            .label(*s, "named here")
            .into());
        }
        let want: Vec<String> = onnx.inputs.iter().map(|i| format!("{}: {}", i.name, input_type(i))).collect();
        if args.positional.len() != onnx.inputs.len() {
            let code = if args.positional.len() > onnx.inputs.len() { Code::Arity } else { Code::MissingArgument };
            return Err(Diagnostic::new(
                code,
                format!(
                    "the ONNX model `{name}` takes {} inputs ({}), given {}",
                    onnx.inputs.len(),
                    want.join(", "),
                    args.positional.len()
                ),
            )
            .label(span, "this call")
            .label(f_span, "the model")
            .into());
        }
        let mut bound: HashMap<String, Val> = HashMap::default();
        let mut sizes: HashMap<&str, (usize, Span)> = HashMap::default();
        for (input, (v, s)) in onnx.inputs.iter().zip(&args.positional) {
            let o = self.operand(v, Some(input.dtype), *s)?;
            let mismatch = || {
                Diagnostic::new(
                    Code::Annotation,
                    format!(
                        "input `{}` of the ONNX model `{name}` is {}, found {}",
                        input.name,
                        input_type(input),
                        o.ty
                    ),
                )
                .label(*s, o.ty.to_string())
            };
            if o.ty.dtype != input.dtype || o.ty.rank() != input.dims.len() {
                return Err(mismatch().into());
            }
            for (dim, &actual) in input.dims.iter().zip(&o.ty.shape) {
                match dim {
                    Dim::Fixed(d) if *d != actual as i64 => return Err(mismatch().into()),
                    Dim::Named(n) => match sizes.get(n.as_str()) {
                        Some(&(before, at)) if before != actual => {
                            return Err(Diagnostic::new(
                                Code::SymbolicDim,
                                format!(
                                    "dimension `{n}` of the ONNX model `{name}` is {before} here but {actual} in {}",
                                    o.ty
                                ),
                            )
                            .label(*s, o.ty.to_string())
                            .label(at, format!("`{n}` = {before}"))
                            .into())
                        }
                        Some(_) => {}
                        None => drop(sizes.insert(n, (actual, *s))),
                    },
                    _ => {}
                }
            }
            bound.insert(input.name.clone(), Val { id: o.id, ty: o.ty, known: None });
        }
        for p in &m.params {
            if let Some(Value::Tensor(id, ty)) = m.scope.get_local(p) {
                bound.insert(p.clone(), Val { id, ty, known: None });
            }
        }
        for (n, t) in &onnx.constants {
            let ty = t.ty();
            let id = self.graph.add(Op::Constant { value: t.to_literal(), ty: ty.clone() }, &[], ty.clone(), span);
            bound.insert(n.clone(), Val { id, ty, known: Some(Rc::new(t.clone())) });
        }
        let outs = import::import(&onnx.model, &mut self.graph, &bound, span)
            .map_err(|d| d.note(format!("in the ONNX model `{name}`")))?;
        let mut values: Vec<Value> = outs.into_iter().map(|v| Value::Tensor(v.id, v.ty)).collect();
        Ok(if values.len() == 1 { values.remove(0) } else { Value::Tuple(values) })
    }
}

/// An input's declared type as tfc writes types: `f32[batch, 784]`.
fn input_type(i: &Input) -> String {
    let dims: Vec<String> = i
        .dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => n.to_string(),
            Dim::Named(s) => s.clone(),
            Dim::Open => "?".into(),
        })
        .collect();
    format!("{}[{}]", i.dtype, dims.join(", "))
}
