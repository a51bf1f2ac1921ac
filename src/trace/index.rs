//! Indexing and slicing with NumPy semantics: `x[0]`, `x[:, 1:5]`,
//! `x[..., -1]`, `x[::2]`, `x[::-1]`, and integer-tensor indices (a gather).
//! Lowered to one `slice`, a `reshape` dropping indexed axes, and `gather`s.

use super::tensor::Operand;
use super::value::{Scope, Value};
use super::{TResult, Tracer};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::Op;
use crate::syntax::ast::IndexItem;
use std::rc::Rc;

/// A resolved range along one axis: first index, step, number of elements.
pub(crate) type Range = (usize, i64, usize);

/// Python's slice rules for `start:stop:step` on an axis of size `dim`.
/// Returns `None` when `step` is 0.
pub(crate) fn resolve_range(start: Option<i64>, stop: Option<i64>, step: i64, dim: usize) -> Option<Range> {
    if step == 0 {
        return None;
    }
    let d = dim as i64;
    let norm = |i: i64| if i < 0 { i + d } else { i };
    let (first, len) = if step > 0 {
        let s = start.map(norm).unwrap_or(0).clamp(0, d);
        let e = stop.map(norm).unwrap_or(d).clamp(0, d);
        (s, if e > s { (e - s + step - 1) / step } else { 0 })
    } else {
        let s = start.map(norm).unwrap_or(d - 1).clamp(-1, d - 1);
        let e = stop.map(norm).unwrap_or(-1).clamp(-1, d - 1);
        (s, if s > e { (s - e + (-step) - 1) / (-step) } else { 0 })
    };
    Some(if len == 0 { (0, step, 0) } else { (first as usize, step, len as usize) })
}

enum Axis {
    Range(Range),
    Single(usize),
    Gather(Operand),
}

impl Tracer<'_> {
    pub(crate) fn index(
        &mut self,
        v: Value,
        base_span: Span,
        items: &[IndexItem],
        span: Span,
        env: &Rc<Scope>,
    ) -> TResult<Value> {
        if let Value::Tuple(parts) = &v {
            return self.index_tuple(parts, items, span, env);
        }
        let x = self.operand(&v, None, base_span)?;
        let rank = x.ty.rank();
        let ellipses = items.iter().filter(|i| matches!(i, IndexItem::Ellipsis(_))).count();
        let explicit = items.len() - ellipses;
        if ellipses > 1 || explicit > rank {
            // One label: a second one on the base would sit inside this
            // span, which the renderer cannot draw in place.
            return Err(Diagnostic::new(Code::Index, format!("too many indices for {}: {explicit} given", x.ty))
                .label(span, format!("{} has {rank} axes", x.ty))
                .into());
        }
        let mut axes: Vec<Axis> = Vec::new();
        for item in items {
            let dim_index = axes.len();
            match item {
                IndexItem::Ellipsis(_) => {
                    for d in dim_index..dim_index + (rank - explicit) {
                        axes.push(Axis::Range((0, 1, x.ty.shape[d])));
                    }
                }
                IndexItem::Single(e) => {
                    let dim = x.ty.shape[dim_index];
                    match self.eval(e, env)? {
                        Value::Int(i) => {
                            let n = if i < 0 { i + dim as i64 } else { i };
                            if n < 0 || n >= dim as i64 {
                                return Err(Diagnostic::new(
                                    Code::Index,
                                    format!("index {i} is out of bounds for axis {dim_index} of size {dim}"),
                                )
                                .label(e.span, format!("valid indices are -{dim}..{}", dim as i64 - 1))
                                .label(base_span, x.ty.to_string())
                                .into());
                            }
                            axes.push(Axis::Single(n as usize));
                        }
                        t @ Value::Tensor(..) => {
                            let o = self.operand(&t, None, e.span)?;
                            if !o.ty.dtype.is_int() {
                                return Err(Diagnostic::new(
                                    Code::Index,
                                    format!("tensor indices must be integers, found {}", o.ty),
                                )
                                .label(e.span, o.ty.to_string())
                                .into());
                            }
                            axes.push(Axis::Gather(o));
                        }
                        other => {
                            return Err(Diagnostic::new(
                                Code::Index,
                                format!("an index must be an int or an int tensor, found {}", other.describe()),
                            )
                            .label(e.span, "bad index")
                            .into())
                        }
                    }
                }
                IndexItem::Slice { start, stop, step, span: s } => {
                    let mut bound = |e: &Option<crate::syntax::ast::Expr>| -> TResult<Option<i64>> {
                        match e {
                            None => Ok(None),
                            Some(e) => match self.eval(e, env)? {
                                Value::Int(i) => Ok(Some(i)),
                                other => Err(Diagnostic::new(
                                    Code::Index,
                                    format!("slice bounds must be compile-time ints, found {}", other.describe()),
                                )
                                .label(e.span, "bad slice bound")
                                .into()),
                            },
                        }
                    };
                    let (b, e, st) = (bound(start)?, bound(stop)?, bound(step)?);
                    let r = resolve_range(b, e, st.unwrap_or(1), x.ty.shape[dim_index]).ok_or_else(|| {
                        super::Fail::from(Diagnostic::new(Code::Index, "slice step cannot be zero").label(*s, "step 0"))
                    })?;
                    axes.push(Axis::Range(r));
                }
            }
        }
        while axes.len() < rank {
            axes.push(Axis::Range((0, 1, x.ty.shape[axes.len()])));
        }
        let ranges: Vec<Range> = axes
            .iter()
            .enumerate()
            .map(|(d, a)| match a {
                Axis::Range(r) => *r,
                Axis::Single(i) => (*i, 1, 1),
                Axis::Gather(_) => (0, 1, x.ty.shape[d]),
            })
            .collect();
        let mut out = self.slice_node(&x, &ranges, span)?;
        let kept: Vec<usize> =
            axes.iter().zip(&out.ty.shape).filter(|(a, _)| !matches!(a, Axis::Single(_))).map(|(_, &d)| d).collect();
        out = self.reshape(&out, kept, span)?;
        let mut axis = 0;
        for a in &axes {
            match a {
                Axis::Single(_) => {}
                Axis::Gather(idx) => {
                    out = self.node(Op::Gather { axis }, &[&out, idx], span)?;
                    axis += idx.ty.rank();
                }
                Axis::Range(_) => axis += 1,
            }
        }
        Ok(Value::Tensor(out.id, out.ty))
    }

    /// `t[0]` on a tuple picks a part.
    fn index_tuple(&mut self, parts: &[Value], items: &[IndexItem], span: Span, env: &Rc<Scope>) -> TResult<Value> {
        if let [IndexItem::Single(e)] = items {
            if let Value::Int(i) = self.eval(e, env)? {
                let n = if i < 0 { i + parts.len() as i64 } else { i };
                if let Some(v) = usize::try_from(n).ok().and_then(|n| parts.get(n)) {
                    return Ok(v.clone());
                }
                return Err(Diagnostic::new(
                    Code::Index,
                    format!("index {i} is out of range for a tuple of {}", parts.len()),
                )
                .label(e.span, "out of range")
                .into());
            }
        }
        Err(Diagnostic::new(Code::Index, "a tuple can only be indexed by one compile-time int")
            .label(span, "here")
            .into())
    }

    /// One slice node (none when the ranges select everything in order).
    pub(crate) fn slice_node(&mut self, x: &Operand, ranges: &[Range], span: Span) -> TResult<Operand> {
        if ranges.iter().zip(&x.ty.shape).all(|(&(s, st, l), &d)| s == 0 && st == 1 && l == d) {
            return Ok(x.clone());
        }
        let op = Op::Slice {
            start: ranges.iter().map(|r| r.0).collect(),
            step: ranges.iter().map(|r| r.1).collect(),
            len: ranges.iter().map(|r| r.2).collect(),
        };
        self.node(op, &[x], span)
    }
}

#[cfg(test)]
mod tests {
    use super::resolve_range;

    #[test]
    fn slices_follow_python_rules() {
        assert_eq!(resolve_range(Some(1), Some(5), 1, 10), Some((1, 1, 4)));
        assert_eq!(resolve_range(None, None, 2, 5), Some((0, 2, 3)));
        assert_eq!(resolve_range(None, None, -1, 4), Some((3, -1, 4)));
        assert_eq!(resolve_range(Some(-2), None, 1, 4), Some((2, 1, 2)));
        assert_eq!(resolve_range(Some(5), Some(2), 1, 4), Some((0, 1, 0)));
        assert_eq!(resolve_range(Some(-100), Some(100), 1, 3), Some((0, 1, 3)));
        assert_eq!(resolve_range(None, None, 0, 3), None);
    }
}
