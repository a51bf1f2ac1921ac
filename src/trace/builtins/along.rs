//! Ops along one axis (the last by default): `cumsum`, `argsort`, `sort`,
//! `top_k` and `take_along_axis`.
//!
//! `cumsum` and `argsort` are primitives (`Op::CumSum`, `Op::ArgSort`).
//! The others gather: `take_along_axis(x, indices, axis)` reads `x` at a
//! flat index computed from `indices` and the other dims' positions (one
//! `gather` of the flattened `x`), so its gradient is the gather's
//! scatter-add and needs no rule of its own; `sort(x)` is
//! `take_along_axis(x, argsort(x))` and `top_k(x, k)` takes the first `k`
//! indices of a descending, stable `argsort` along the last axis and
//! returns `(values, indices)`, as `tf.math.top_k` and `jax.lax.top_k` do.
//!
//! Example: `top_k([1.0, 3.0, 2.0], 2)` is `(f32[2] [3, 2], i32[2] [1, 2])`.

use super::tensor;
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{BinaryOp, DType, Op, TensorType};
use crate::trace::args::BuiltinArgs;
use crate::trace::tensor::Operand;
use crate::trace::value::Value;
use crate::trace::{TResult, Tracer};

impl Tracer<'_> {
    pub(crate) fn along_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let x = self.arg_tensor(a, 0, None)?;
        if x.ty.rank() == 0 || x.ty.dtype == DType::Bool {
            return Err(a.bad(0, "a number tensor of rank ≥ 1"));
        }
        let rank = x.ty.rank();
        match a.name {
            "cumsum" => {
                let axis = a.axis(1, rank, -1)?;
                let reverse = a.bool_or(2, false)?;
                Ok(tensor(self.node(Op::CumSum { axis, reverse }, &[&x], a.span)?))
            }
            "argsort" | "sort" => {
                let axis = a.axis(1, rank, -1)?;
                let descending = a.bool_or(2, false)?;
                let order = self.node(Op::ArgSort { axis, descending }, &[&x], a.span)?;
                if a.name == "argsort" {
                    return Ok(tensor(order));
                }
                Ok(tensor(self.take_along(&x, &order, axis, a.span)?))
            }
            "top_k" => {
                let axis = rank - 1;
                let n = x.ty.shape[axis];
                let k = a.int(1)?;
                let k = usize::try_from(k).ok().filter(|&k| (1..=n).contains(&k)).ok_or_else(|| {
                    a.bad_value(1, format!("k must be in 1..={n} (the size of the last axis of {}), not {k}", x.ty))
                })?;
                let order = self.node(Op::ArgSort { axis, descending: true }, &[&x], a.span)?;
                let mut len = x.ty.shape.clone();
                len[axis] = k;
                let slice = Op::Slice { start: vec![0; rank], step: vec![1; rank], len };
                let indices = self.node(slice, &[&order], a.span)?;
                let values = self.take_along(&x, &indices, axis, a.span)?;
                Ok(Value::Tuple(vec![tensor(values), tensor(indices)]))
            }
            _ => {
                let indices = self.arg_tensor(a, 1, Some(DType::I32))?;
                let axis = a.axis(2, rank, -1)?;
                let fits = indices.ty.dtype.is_int()
                    && indices.ty.rank() == rank
                    && (0..rank).all(|d| d == axis || indices.ty.shape[d] == x.ty.shape[d]);
                if !fits {
                    let message = format!(
                        "`take_along_axis` needs integer indices shaped like {} except along axis {axis}, found {}",
                        x.ty, indices.ty
                    );
                    return Err(Diagnostic::new(Code::Broadcast, message)
                        .label(indices.span, indices.ty.to_string())
                        .label(x.span, x.ty.to_string())
                        .into());
                }
                let indices = self.checked_along(&indices, x.ty.shape[axis], axis, a.span)?;
                Ok(tensor(self.take_along(&x, &indices, axis, a.span)?))
            }
        }
    }

    /// `x[.., indices[.., j, ..], ..]` along `axis` (NumPy's
    /// `take_along_axis`) for in-range `indices` shaped like `x` except
    /// along `axis`: one gather of the flattened `x` at
    /// `indices · stride(axis) + Σ position(d) · stride(d)`. An index
    /// outside the axis would read a neighbouring lane's element: indices
    /// that do not come from `argsort` pass through [`Tracer::checked_along`]
    /// first.
    pub(crate) fn take_along(&mut self, x: &Operand, indices: &Operand, axis: usize, span: Span) -> TResult<Operand> {
        let shape = &indices.ty.shape;
        let wide = i32::try_from(x.ty.numel()).is_err();
        let itype = if wide { DType::I64 } else { DType::I32 };
        let mut flat = if indices.ty.dtype == itype { indices.clone() } else { self.cast(indices, itype, span)? };
        let strides = crate::tensor::strides(&x.ty.shape);
        let scaled = |t: &mut Self, v: &Operand, by: usize| -> TResult<Operand> {
            if by == 1 {
                return Ok(v.clone());
            }
            let s = t.int_scalar(by as i64, itype, span)?;
            let s = t.broadcast_to(&s, shape, span)?;
            t.node(Op::Binary(BinaryOp::Mul), &[v, &s], span)
        };
        flat = scaled(self, &flat, strides[axis])?;
        for d in (0..shape.len()).filter(|&d| d != axis && shape[d] > 1) {
            let position = self.node(Op::Iota { ty: TensorType::new(itype, shape.clone()), axis: d }, &[], span)?;
            let offset = scaled(self, &position, strides[d])?;
            flat = self.node(Op::Binary(BinaryOp::Add), &[&flat, &offset], span)?;
        }
        let all = self.node(Op::Reshape { shape: vec![x.ty.numel()] }, &[x], span)?;
        self.node(Op::Gather { axis: 0 }, &[&all, &flat], span)
    }

    /// `indices` unchanged, read through a gather of `0..n` along `axis`
    /// (a table shaped `[1, .., 1, n]`): an index outside the axis stops
    /// the run there (E0402) naming the user's own index, its position in
    /// `indices`, the axis and its size — what a check of the flat index
    /// computed from it could not say.
    fn checked_along(&mut self, indices: &Operand, n: usize, axis: usize, span: Span) -> TResult<Operand> {
        let mut table_shape = vec![1; axis];
        table_shape.push(n);
        let table = self.node(Op::Iota { ty: TensorType::new(indices.ty.dtype, table_shape), axis }, &[], span)?;
        let read = self.node(Op::Gather { axis }, &[&table, indices], span)?;
        self.node(Op::Reshape { shape: indices.ty.shape.clone() }, &[&read], span)
    }
}
