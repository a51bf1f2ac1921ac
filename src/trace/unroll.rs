//! Compile-time loops (§4): `for` statements and comprehensions, unrolled
//! while tracing.
//!
//! Contract: what a loop runs over is known at compile time: a range `a..b`
//! of ints (`b` excluded; empty when `b <= a`) or the elements of a list (a
//! tuple, such as a model's list of blocks), at most `MAX_UNROLL` of them.
//! Anything else is a diagnostic at the user's text: E0313 for a tensor
//! (known only when the program runs), E0309 for another kind of value,
//! E0320 for too many iterations. An error inside the body says in which
//! iteration it happened.
//!
//! The body runs once per element, in a fresh scope that binds the loop
//! variable. A name the body assigns (`h = f(h)`, directly in the body or
//! in a loop nested in it) and does not declare with `let` is *carried*:
//! the next iteration reads the new value, and after the loop the name is
//! rebound in the scope around it, as an assignment in that scope would.
//! This is a fold, written the way a Python loop is. (An assignment inside
//! an `if` block stays in that block, as everywhere in the language.)
//!
//! A comprehension `[elem for i in 0..n]` is the literal of its elements
//! (`Tracer::literal_value`): a list when they are models, functions or
//! other compile-time values, a tensor when they are numbers or tensors.
//! Inside a model, the models of element k get the path `field.k`
//! (`blocks.0.w`), which seeds their parameters and names them in
//! checkpoints, like a field's name does.
//!
//! Example: `let h = x` then `for i in 0..3 { h = h * 2.0 }` leaves `h`
//! bound to `((x * 2) * 2) * 2`: three `mul` nodes.

use super::value::{Scope, Value};
use super::{Fail, TResult, Tracer};
use crate::diag::{Code, Diagnostic, Span};
use crate::syntax::ast::{self, BlockStmt, Expr, ForIter, Pattern};
use std::rc::Rc;

/// The most iterations one loop or comprehension unrolls: each iteration
/// traces its body again, so a larger count is almost surely a mistake (a
/// size where a count was meant), and it would build a graph too large to
/// compile quickly.
pub(crate) const MAX_UNROLL: usize = 10_000;

/// The names a loop carries: those its body assigns directly or carries
/// out of a loop nested directly in it, except the loop variable and the
/// names the body declares with `let`.
pub(crate) fn carried_names(f: &ast::ForLoop) -> Vec<&str> {
    let mut locals = f.head.var.names();
    let mut carried: Vec<&str> = Vec::new();
    for s in &f.body.stmts {
        match s {
            BlockStmt::Let { pattern, .. } => locals.extend(pattern.names()),
            BlockStmt::Assign { name, .. } => carried.push(&name.name),
            BlockStmt::For(inner) => carried.extend(carried_names(inner)),
            BlockStmt::Expr(_) => {}
        }
    }
    let mut out: Vec<&str> = Vec::new();
    for name in carried {
        if !locals.contains(&name) && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

impl Tracer<'_> {
    /// `for pattern in iter { body }`: the body once per element, carrying
    /// the names it assigns (see the module header) into `env`.
    pub(crate) fn for_loop(&mut self, f: &ast::ForLoop, env: &Rc<Scope>) -> TResult<()> {
        let carried = carried_names(f);
        self.unroll(&f.head, env, |t, scope, _| {
            t.block_in(&f.body, scope)?;
            for name in &carried {
                if let Some(v) = scope.get_local(name) {
                    env.set(name, v);
                }
            }
            Ok(())
        })
    }

    /// `[elem for pattern in iter]`: a list or a tensor (see the header).
    pub(crate) fn comprehension(
        &mut self,
        elem: &Expr,
        head: &ast::ForHead,
        span: Span,
        env: &Rc<Scope>,
    ) -> TResult<Value> {
        self.with_element_paths(|t, path| {
            let mut values = Vec::new();
            t.unroll(head, env, |t, scope, k| {
                values.push((t.eval_element(elem, scope, path, k)?, elem.span));
                Ok(())
            })?;
            // No element says what kind the elements are: an empty list (a
            // model with no blocks then runs none).
            if values.is_empty() {
                return Ok(Value::Tuple(vec![]));
            }
            let n = values.len();
            t.literal_value(values, &[n], span)
        })
    }

    /// Runs `each` once per element of `head`'s iterable, in a fresh child
    /// scope of `env` binding the loop variable, with the element's index.
    fn unroll(
        &mut self,
        head: &ast::ForHead,
        env: &Rc<Scope>,
        mut each: impl FnMut(&mut Self, &Rc<Scope>, usize) -> TResult<()>,
    ) -> TResult<()> {
        let elements = self.iterations(head, env)?;
        for (k, v) in elements.into_iter().enumerate() {
            crate::interrupt::check()?;
            let at = match (&head.var, &v, &head.iter) {
                (Pattern::Name(id), Value::Int(i), ForIter::Range(..)) => format!("`{} = {i}`", id.name),
                _ => format!("element {k} (counting from 0)"),
            };
            let scope = self.scopes.child(env);
            let done = self.bind_pattern(&head.var, v, &scope).and_then(|()| each(self, &scope, k));
            super::scopes::release_if_unreachable(scope);
            done.map_err(|fail| match fail {
                Fail::Diag(d) => Fail::from((*d).note(format!("while unrolling the loop at {at}"))),
                Fail::Poisoned => Fail::Poisoned,
            })?;
        }
        Ok(())
    }

    /// The values the loop variable takes, in order.
    fn iterations(&mut self, head: &ast::ForHead, env: &Rc<Scope>) -> TResult<Vec<Value>> {
        match &head.iter {
            ForIter::Range(a, b) => {
                let start = self.range_bound(a, env)?;
                let end = self.range_bound(b, env)?;
                let count = i128::from(end) - i128::from(start);
                if count > MAX_UNROLL as i128 {
                    return Err(too_many(count, a.span.to(b.span)));
                }
                Ok((start..end).map(Value::Int).collect())
            }
            ForIter::Each(e) => match self.eval(e, env)? {
                Value::Tuple(items) if items.len() > MAX_UNROLL => Err(too_many(items.len() as i128, e.span)),
                Value::Tuple(items) => Ok(items),
                Value::Tensor(_, ty) => Err(Diagnostic::new(
                    Code::NotStatic,
                    format!(
                        "a `for` loop cannot run over a tensor ({ty}): its values are only known when the program runs"
                    ),
                )
                .label(e.span, format!("{ty}"))
                .help("loop over a range of indices instead: `for i in 0..shape(x)[0] { … x[i] … }`")
                .into()),
                other => Err(Diagnostic::new(
                    Code::Kind,
                    format!("a `for` loop runs over a range or a list, not over {}", other.describe()),
                )
                .label(e.span, "not a range or a list")
                .help("write a range of ints `0..n`, or a list such as `[Block(d) for i in 0..n]`")
                .into()),
            },
        }
    }

    /// A bound of a range: a compile-time int.
    fn range_bound(&mut self, e: &Expr, env: &Rc<Scope>) -> TResult<i64> {
        match self.eval(e, env)? {
            Value::Int(i) => Ok(i),
            Value::Tensor(_, ty) => Err(Diagnostic::new(
                Code::NotStatic,
                format!("the bounds of a range must be known at compile time, found a tensor {ty}"),
            )
            .label(e.span, "known only when the program runs")
            .help("a loop is unrolled while the program is traced: use an int such as a constructor argument, a `const` or `shape(x)[0]`")
            .into()),
            other => Err(Diagnostic::new(
                Code::Kind,
                format!("the bounds of a range must be ints, found {}", other.describe()),
            )
            .label(e.span, "not an int")
            .into()),
        }
    }
}

/// E0320: a loop longer than `MAX_UNROLL`.
fn too_many(count: i128, span: Span) -> Fail {
    Diagnostic::new(
        Code::LoopTooLong,
        format!("this loop would unroll {count} iterations, more than the limit of {MAX_UNROLL}"),
    )
    .label(span, format!("{count} iterations"))
    .help("a `for` loop is unrolled into the graph; loop over fewer elements, or compute with whole tensors (a reduction, a matrix product) instead of element by element")
    .into()
}
