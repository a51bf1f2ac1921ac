//! `export fn`: functions that `tfc build` writes out.
//!
//! Contract: an `export fn` is an ordinary function where the program uses
//! it; in addition, once every statement has been traced, it is traced once
//! more over fresh slots of its parameters' annotated types, which must be
//! tensor types of fixed sizes (ints, consts, or int expressions of them:
//! E0340 otherwise). What it computes becomes an [`ExportPlan`] effect after
//! every other effect, so the values it captures — a model's parameters —
//! are the ones the program ends with (trained, loaded). Its results must be
//! tensors or tuples of tensors, and a result annotation is checked.
//!
//! Example: `export fn predict(x: f32[64, 784]) = net(x)` after `train net
//! …` gives a plan `export predict(x)` whose region reads one slot of type
//! `f32[64, 784]` and the trained weights.

use super::value::{Scope, Value};
use super::{TResult, Tracer};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::plan::{ExportPlan, EXPORT_PROBE_SIZE, EXPORT_SIZE};
use crate::ir::{Effect, TensorType};
use crate::syntax::ast::{self, DimExpr, TypeKind};
use std::rc::Rc;
use std::sync::Arc;

/// An `export fn` seen while tracing, with the scope it was defined in.
pub(crate) struct PendingExport {
    pub def: Arc<ast::FnDef>,
    pub env: Rc<Scope>,
}

impl Tracer<'_> {
    /// Defines the function like `fn` and remembers it for
    /// [`Tracer::trace_exports`]; a second export of the same name is E0203.
    pub(crate) fn declare_export(&mut self, def: &Arc<ast::FnDef>, env: &Rc<Scope>) -> TResult<()> {
        let Some(exports) = &self.exports else {
            return Err(Diagnostic::new(Code::Unsupported, "`export fn` is for programs in a file")
                .label(def.name.span, "exported here")
                .help("`tfc build FILE --emit onnx -o FILE.onnx` writes a file's exported functions; here, use `fn`")
                .into());
        };
        if let Some(earlier) = exports.iter().find(|e| e.def.name.name == def.name.name) {
            return Err(Diagnostic::new(Code::Duplicate, format!("`{}` is exported twice", def.name.name))
                .label(def.name.span, "exported again here")
                .label(earlier.def.name.span, "first exported here")
                .into());
        }
        env.set(&def.name.name, Value::Func(Rc::new(super::call::closure_of(def, env))));
        self.exports.get_or_insert_with(Vec::new).push(PendingExport { def: def.clone(), env: env.clone() });
        Ok(())
    }

    /// Traces every pending export over its parameters' types, appending
    /// one `Effect::Export` each, in the order they were declared.
    pub(crate) fn trace_exports(&mut self) {
        for pending in self.exports.take().unwrap_or_default() {
            match self.trace_export(&pending) {
                Ok(plan) => self.effects.push(Effect::Export(Box::new(plan))),
                Err(fail) => self.report(fail),
            }
        }
    }

    fn trace_export(&mut self, pending: &PendingExport) -> TResult<ExportPlan> {
        let def = &pending.def;
        let symbol = self.export_symbol(def, &pending.env)?;
        let region = self.trace_export_at(pending, symbol.as_ref().map(|s| (s.as_str(), EXPORT_SIZE)))?;
        let symbolic = match symbol {
            Some(name) => {
                let probe = self.trace_export_at(pending, Some((name.as_str(), EXPORT_PROBE_SIZE)))?;
                Some((name, probe))
            }
            None => None,
        };
        let mut sized = Vec::new();
        if let Some((name, _)) = &symbolic {
            for &n in &self.export_sizes.clone() {
                sized.push((n, self.trace_export_at(pending, Some((name.as_str(), n)))?));
            }
        }
        let params = def.params.iter().map(|p| p.name.name.clone()).collect();
        Ok(ExportPlan { name: def.name.name.clone(), params, region, span: def.name.span, symbolic, sized })
    }

    /// The one size name the parameters' types leave open (`B` in
    /// `f32[B, 784]` when no `const B` exists), if any; two are E0340.
    fn export_symbol(&mut self, def: &ast::FnDef, env: &Rc<Scope>) -> TResult<Option<String>> {
        let mut found: Option<&ast::Ident> = None;
        for p in &def.params {
            let Some(ast::TypeExpr { kind: TypeKind::Tensor { dims, .. }, .. }) = &p.ty else { continue };
            for dim in dims {
                let DimExpr::Symbol(id) = dim else { continue };
                if matches!(env.get(&id.name), Some(Value::Int(_))) {
                    continue;
                }
                match found {
                    Some(first) if first.name != id.name => {
                        return Err(Diagnostic::new(
                            Code::ExportType,
                            format!(
                                "exported `{}` leaves two sizes open, `{}` and `{}`",
                                def.name.name, first.name, id.name
                            ),
                        )
                        .label(id.span, "a second open size")
                        .label(first.span, "the first")
                        .help("one size may stay open (the batch); give the others values, e.g. `const T = 128`")
                        .into())
                    }
                    _ => found = Some(id),
                }
            }
        }
        Ok(found.map(|id| id.name.clone()))
    }

    /// The export's region with its open size (if any) at `size`.
    fn trace_export_at(
        &mut self,
        pending: &PendingExport,
        size: Option<(&str, usize)>,
    ) -> TResult<crate::ir::plan::Region> {
        let def = &pending.def;
        let env = match size {
            Some((name, n)) => {
                let scope = self.scopes.child(&pending.env);
                scope.set(name, Value::Int(n as i64));
                scope
            }
            None => pending.env.clone(),
        };
        let mut types = Vec::with_capacity(def.params.len());
        for p in &def.params {
            types.push(self.fixed_type(def, p, &env)?);
        }
        let (inputs, args) = self.slots_for(&types, def.span);
        let f = Value::Func(Rc::new(super::call::closure_of(def, &pending.env)));
        let out = self.call_value(f, def.name.span, args, vec![], def.span)?;
        let parts = match out {
            Value::Tuple(items) => items,
            v => vec![v],
        };
        let mut outputs = Vec::with_capacity(parts.len());
        for part in parts {
            match part {
                Value::Tensor(id, _) => outputs.push(id),
                Value::Poison => return Err(super::Fail::Poisoned),
                other => {
                    return Err(Diagnostic::new(
                        Code::ExportType,
                        format!(
                            "an exported function returns tensors, but `{}` returns {}",
                            def.name.name,
                            other.describe()
                        ),
                    )
                    .label(def.body.span, "this result")
                    .help("return a tensor, or a tuple of tensors")
                    .into())
                }
            }
        }
        Ok(crate::ir::plan::Region { id: self.new_region(), inputs, outputs })
    }

    /// The fixed tensor type a parameter of an export is annotated with.
    fn fixed_type(&mut self, def: &ast::FnDef, p: &ast::Param, env: &Rc<Scope>) -> TResult<TensorType> {
        let refuse = |span: Span, why: String| -> super::Fail {
            Diagnostic::new(
                Code::ExportType,
                format!("parameter `{}` of exported `{}` {why}", p.name.name, def.name.name),
            )
            .label(span, "here")
            .help("an exported function's parameters need tensor types of fixed sizes, e.g. `x: f32[64, 784]`")
            .into()
        };
        let Some(ty) = &p.ty else { return Err(refuse(p.span, "has no type annotation".into())) };
        let TypeKind::Tensor { dtype, dims } = &ty.kind else {
            return Err(refuse(ty.span, "is not a tensor".into()));
        };
        let mut shape = Vec::with_capacity(dims.len());
        for dim in dims {
            let size = match dim {
                DimExpr::Known(n, _) => *n,
                DimExpr::Symbol(id) => match env.get(&id.name) {
                    Some(Value::Int(n)) => n,
                    _ => return Err(Diagnostic::internal(format!("export: the size `{}` is unbound", id.name)).into()),
                },
                DimExpr::Computed { expr, text } => self.computed_dim(expr, text, env)?,
                DimExpr::Infer(span) => return Err(refuse(*span, "has a size `_` that is not known".into())),
            };
            if size < 0 {
                return Err(refuse(ty.span, format!("has a negative size {size}")));
            }
            shape.push(size as usize);
        }
        Ok(TensorType::new(*dtype, shape))
    }
}
