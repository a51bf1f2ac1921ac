//! `grad(f, wrt = 0)` and `value_and_grad(f, wrt = 0)` (§5): calling the
//! transformed function traces `f` on the arguments, then appends the
//! reverse-mode gradient graph (`crate::autodiff`) of its scalar result.

use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{NodeId, Op};
use crate::trace::args::BuiltinArgs;
use crate::trace::call::CallArgs;
use crate::trace::value::{GradFn, Value};
use crate::trace::{TResult, Tracer};
use std::rc::Rc;

impl Tracer<'_> {
    pub(crate) fn grad_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let f = a.get(0).map(|(v, _)| v.clone()).ok_or_else(|| a.bad(0, "a function"))?;
        let (wrt, single) = match a.get(1) {
            None => (vec![0], true),
            Some((Value::Int(i), _)) if *i >= 0 => (vec![*i as usize], true),
            Some(_) => {
                let ints = self.arg_ints(a, 1)?;
                if ints.iter().any(|&i| i < 0) || ints.is_empty() {
                    return Err(a.bad_value(1, "`wrt` positions must be non-negative ints".into()));
                }
                (ints.into_iter().map(|i| i as usize).collect(), false)
            }
        };
        Ok(Value::Grad(Rc::new(GradFn { f, wrt, single, with_value: a.name == "value_and_grad" })))
    }

    pub(crate) fn call_grad(&mut self, g: &GradFn, mut args: CallArgs, f_span: Span, span: Span) -> TResult<Value> {
        // Each differentiated argument enters `f` through a fresh node, so
        // that only paths through this argument count (another argument
        // computed from the same tensor is held constant).
        let mut wrt_nodes: Vec<NodeId> = Vec::new();
        for &pos in &g.wrt {
            let Some((v, s)) = args.positional.get(pos).cloned() else {
                return Err(Diagnostic::new(
                    Code::Arity,
                    format!("`wrt` names argument {pos}, but only {} were given", args.positional.len()),
                )
                .label(span, "this call")
                .into());
            };
            let o = self.operand(&v, None, s)?;
            if !o.ty.dtype.is_float() {
                return Err(Diagnostic::new(
                    Code::DtypeMismatch,
                    format!("cannot differentiate with respect to {}, an integer or bool tensor", o.ty),
                )
                .label(s, o.ty.to_string())
                .into());
            }
            let fresh = self.graph.add(Op::Reshape { shape: o.ty.shape.clone() }, &[o.id], o.ty.clone(), s);
            wrt_nodes.push(fresh);
            args.positional[pos] = (Value::Tensor(fresh, o.ty), s);
        }
        let out = self.call_value(g.f.clone(), f_span, args.positional, args.named, span)?;
        let y = match &out {
            Value::Tensor(id, ty) if ty.rank() == 0 && ty.dtype.is_float() => *id,
            other => {
                return Err(Diagnostic::new(
                    Code::Kind,
                    format!("`grad` needs a function returning a float scalar, but it returned {}", other.describe()),
                )
                .label(f_span, "this function")
                .help("reduce the result first, e.g. with `sum` or `mean`")
                .into())
            }
        };
        let grads = crate::autodiff::gradients(&mut self.graph, y, None, &wrt_nodes)?;
        let mut values = Vec::new();
        for (node, grad) in wrt_nodes.iter().zip(grads) {
            let ty = self.graph.node(*node).ty.clone();
            let id = match grad {
                Some(id) => id,
                // The result does not depend on this argument: its gradient is zero.
                None => self.zeros(&ty, span)?,
            };
            values.push(Value::Tensor(id, ty));
        }
        let grads = if g.single { values.remove(0) } else { Value::Tuple(values) };
        Ok(if g.with_value { Value::Tuple(vec![out, grads]) } else { grads })
    }

    fn zeros(&mut self, ty: &crate::ir::TensorType, span: Span) -> TResult<NodeId> {
        let c = self.scalar(0.0, ty.dtype, span)?;
        Ok(self.broadcast_to(&c, &ty.shape, span)?.id)
    }
}
