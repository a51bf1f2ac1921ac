//! Shape built-ins: `reshape transpose broadcast_to concat stack slice pad
//! squeeze expand_dims shape`.

use super::tensor;
use crate::diag::{Code, Diagnostic};
use crate::ir::Op;
use crate::trace::args::{normalize_axis, BuiltinArgs};
use crate::trace::tensor::Operand;
use crate::trace::value::Value;
use crate::trace::{TResult, Tracer};

impl Tracer<'_> {
    pub(crate) fn shape_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        match a.name {
            "concat" | "stack" => return self.concat(a),
            _ => {}
        }
        let x = self.arg_tensor(a, 0, None)?;
        let rank = x.ty.rank();
        let out = match a.name {
            "shape" => return Ok(Value::Tuple(x.ty.shape.iter().map(|&d| Value::Int(d as i64)).collect())),
            "reshape" => {
                let target = self.arg_ints(a, 1)?;
                // The target shape is the primary span: it is what the
                // message is about, and usually what needs fixing.
                let shape = resolve_reshape(&target, x.ty.numel()).map_err(|m| {
                    Diagnostic::new(Code::Reshape, format!("cannot reshape {} to {target:?}: {m}", x.ty))
                        .label(a.span_of(1), "target shape")
                        .label(x.span, format!("{} ({} elements)", x.ty, x.ty.numel()))
                })?;
                self.reshape(&x, shape, a.span)?
            }
            "transpose" => {
                let perm: Vec<usize> = match a.get(1) {
                    None => (0..rank).rev().collect(),
                    Some(_) => {
                        // Checked here so the error points at the permutation
                        // and says what is wrong with it (`infer` only knows
                        // that it is not a permutation).
                        let ints = self.arg_ints(a, 1)?;
                        if ints.len() != rank {
                            return Err(a.bad_value(
                                1,
                                format!(
                                    "the permutation {} has {} entries, but {} has {rank} axes",
                                    tuple_text(&ints),
                                    ints.len(),
                                    x.ty
                                ),
                            ));
                        }
                        let perm: Vec<usize> = ints
                            .iter()
                            .map(|&i| normalize_axis(i, rank).ok_or_else(|| a.axis_error(1, i, rank)))
                            .collect::<TResult<_>>()?;
                        if let Some(missing) = (0..rank).find(|d| !perm.contains(d)) {
                            return Err(a.bad_value(
                                1,
                                format!(
                                    "{} is not a permutation of the axes of {}: axis {missing} is missing",
                                    tuple_text(&ints),
                                    x.ty
                                ),
                            ));
                        }
                        perm
                    }
                };
                self.node(Op::Transpose { perm }, &[&x], a.span)?
            }
            "broadcast_to" => {
                let shape = self.arg_shape(a, 1)?;
                self.node(Op::BroadcastTo { shape }, &[&x], a.span)?
            }
            "squeeze" => {
                let axes: Vec<usize> = match a.get(1) {
                    None => (0..rank).filter(|&i| x.ty.shape[i] == 1).collect(),
                    Some(_) => {
                        let ints = self.arg_ints(a, 1)?;
                        ints.iter()
                            .map(|&i| normalize_axis(i, rank).ok_or_else(|| a.axis_error(1, i, rank)))
                            .collect::<TResult<_>>()?
                    }
                };
                if let Some(&bad) = axes.iter().find(|&&ax| x.ty.shape[ax] != 1) {
                    return Err(a.bad_value(
                        1,
                        format!("cannot squeeze axis {bad} of {}: its size is {}, not 1", x.ty, x.ty.shape[bad]),
                    ));
                }
                let shape = x.ty.shape.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
                self.reshape(&x, shape, a.span)?
            }
            "expand_dims" => {
                let ax = a.int(1)?;
                let axis = normalize_axis(ax, rank + 1).ok_or_else(|| a.axis_error(1, ax, rank + 1))?;
                let mut shape = x.ty.shape.clone();
                shape.insert(axis, 1);
                self.reshape(&x, shape, a.span)?
            }
            "slice" => {
                let start = self.arg_ints(a, 1)?;
                let stop = self.arg_ints(a, 2)?;
                let step = match a.get(3) {
                    None => vec![1; start.len()],
                    Some(_) => self.arg_ints(a, 3)?,
                };
                if start.len() != rank || stop.len() != rank || step.len() != rank {
                    return Err(a.bad_value(1, format!("start, stop and step need one entry per axis of {}", x.ty)));
                }
                let mut dims = Vec::new();
                for d in 0..rank {
                    let r = crate::trace::index::resolve_range(Some(start[d]), Some(stop[d]), step[d], x.ty.shape[d])
                        .ok_or_else(|| a.bad_value(3, "a slice step cannot be 0".into()))?;
                    dims.push(r);
                }
                self.slice_node(&x, &dims, a.span)?
            }
            _ => {
                // pad
                let widths = self.arg_ints(a, 1)?;
                if widths.len() != 2 * rank || widths.iter().any(|w| *w < 0) {
                    return Err(a.bad_value(
                        1,
                        format!(
                            "pad widths must be {} non-negative ints ([before, after] per axis of {}), found {widths:?}",
                            2 * rank,
                            x.ty,
                        ),
                    ));
                }
                let value = a.float_or(2, 0.0)?;
                let low = widths.iter().step_by(2).map(|&w| w as usize).collect();
                let high = widths.iter().skip(1).step_by(2).map(|&w| w as usize).collect();
                self.node(Op::Pad { low, high, value }, &[&x], a.span)?
            }
        };
        Ok(tensor(out))
    }

    fn concat(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let parts: Vec<(Value, crate::diag::Span)> = match a.get(0) {
            Some((Value::Tuple(items), s)) => items.iter().map(|v| (v.clone(), *s)).collect(),
            // One tensor would come back unchanged: most likely `[a, b]`,
            // a list literal, which is one stacked tensor, not two.
            Some((Value::Tensor(_, ty), s)) => {
                let name = a.name;
                return Err(Diagnostic::new(
                    Code::Kind,
                    format!("`{name}` takes a tuple of tensors, found one tensor ({ty})"),
                )
                .label(*s, "one tensor")
                .help(format!(
                    "write `{name}((a, b), …)` with parentheses: `[a, b]` is a list literal, which builds one \
                     tensor from its rows"
                ))
                .into());
            }
            _ => return Err(a.bad(0, "a tuple of tensors")),
        };
        if parts.is_empty() {
            return Err(a.bad_value(0, "needs at least one tensor".into()));
        }
        let refs: Vec<(&Value, crate::diag::Span)> = parts.iter().map(|(v, s)| (v, *s)).collect();
        let mut ops = self.operands(&refs)?;
        self.same_dtype(&ops, &format!("`{}`", a.name), a.span)?;
        let rank = ops[0].ty.rank();
        if a.name == "stack" {
            let ax = a.int_or(1, 0)?;
            let axis = normalize_axis(ax, rank + 1).ok_or_else(|| a.axis_error(1, ax, rank + 1))?;
            if let Some(bad) = ops.iter().find(|o| o.ty.shape != ops[0].ty.shape) {
                return Err(Diagnostic::new(
                    Code::Concat,
                    format!("`stack`: shapes differ: {} and {}", ops[0].ty, bad.ty),
                )
                .label(a.span_of(0), "these tensors")
                .into());
            }
            let mut shape = ops[0].ty.shape.clone();
            shape.insert(axis, 1);
            ops = ops.iter().map(|o| self.reshape(o, shape.clone(), o.span)).collect::<TResult<_>>()?;
            let refs: Vec<&Operand> = ops.iter().collect();
            return Ok(tensor(self.node(Op::Concat { axis }, &refs, a.span)?));
        }
        let ax = a.int_or(1, 0)?;
        let axis = normalize_axis(ax, rank).ok_or_else(|| a.axis_error(1, ax, rank))?;
        let refs: Vec<&Operand> = ops.iter().collect();
        Ok(tensor(self.node(Op::Concat { axis }, &refs, a.span)?))
    }
}

/// Ints as the user writes a tuple of them: `(0, 0)`.
fn tuple_text(ints: &[i64]) -> String {
    let parts: Vec<String> = ints.iter().map(i64::to_string).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

/// Resolves a reshape target with at most one `-1` against `numel`.
pub(crate) fn resolve_reshape(target: &[i64], numel: usize) -> Result<Vec<usize>, String> {
    let unknown: Vec<usize> = target.iter().enumerate().filter(|(_, &d)| d == -1).map(|(i, _)| i).collect();
    if unknown.len() > 1 {
        return Err("only one dimension may be -1".into());
    }
    if let Some(bad) = target.iter().find(|&&d| d < -1) {
        return Err(format!("{bad} is not a valid dimension"));
    }
    let known: u128 = target.iter().filter(|&&d| d >= 0).map(|&d| d as u128).product();
    let mut shape: Vec<usize> = target.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(&i) = unknown.first() {
        if known == 0 || !(numel as u128).is_multiple_of(known) {
            return Err(format!("{numel} elements cannot be split into {known}-element parts"));
        }
        shape[i] = (numel as u128 / known) as usize;
    } else if known != numel as u128 {
        return Err(format!("it has {numel} elements, the target {known}"));
    }
    Ok(shape)
}
