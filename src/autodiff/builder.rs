//! A small typed node builder for gradient graphs: every node is typed by
//! `ir::infer`, and a typing failure is an internal error (a wrong VJP rule
//! is a bug in tfc, never the user's fault).

use crate::diag::{Diagnostic, Span};
use crate::ir::{infer::infer, BinaryOp, DType, Graph, Literal, NodeId, Op, ReduceOp, TensorType, UnaryOp};

pub(crate) struct Builder<'g> {
    pub g: &'g mut Graph,
    /// The span of the forward node whose gradient is being built.
    pub span: Span,
}

pub(crate) type BResult<T> = Result<T, Diagnostic>;

impl Builder<'_> {
    pub fn ty(&self, id: NodeId) -> TensorType {
        self.g.node(id).ty.clone()
    }

    pub fn node(&mut self, op: Op, inputs: &[NodeId]) -> BResult<NodeId> {
        let types: Vec<TensorType> = inputs.iter().map(|&i| self.ty(i)).collect();
        let refs: Vec<&TensorType> = types.iter().collect();
        match infer(&op, &refs) {
            Ok(ty) => Ok(self.g.add(op, inputs, ty, self.span)),
            Err(e) => Err(Diagnostic::internal(format!("autodiff built an ill-typed {}: {}", op.name(), e.message))
                .label(self.span, "while differentiating this")),
        }
    }

    /// A tensor of `ty` filled with `value`.
    pub fn full(&mut self, value: f64, ty: &TensorType) -> BResult<NodeId> {
        let lit = if ty.dtype.is_float() {
            Literal::Float(vec![ty.dtype.round(value)])
        } else {
            Literal::Int(vec![value as i64])
        };
        let c = self.node(Op::Constant { value: lit, ty: TensorType::scalar(ty.dtype) }, &[])?;
        self.broadcast(c, &ty.shape)
    }

    pub fn broadcast(&mut self, x: NodeId, shape: &[usize]) -> BResult<NodeId> {
        if self.ty(x).shape == shape {
            return Ok(x);
        }
        self.node(Op::BroadcastTo { shape: shape.to_vec() }, &[x])
    }

    pub fn reshape(&mut self, x: NodeId, shape: &[usize]) -> BResult<NodeId> {
        if self.ty(x).shape == shape {
            return Ok(x);
        }
        self.node(Op::Reshape { shape: shape.to_vec() }, &[x])
    }

    pub fn unary(&mut self, op: UnaryOp, x: NodeId) -> BResult<NodeId> {
        self.node(Op::Unary(op), &[x])
    }

    pub fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> BResult<NodeId> {
        self.node(Op::Binary(op), &[a, b])
    }

    pub fn mul(&mut self, a: NodeId, b: NodeId) -> BResult<NodeId> {
        self.binary(BinaryOp::Mul, a, b)
    }

    /// `x * c` for a number `c`.
    pub fn scale(&mut self, x: NodeId, c: f64) -> BResult<NodeId> {
        let ty = self.ty(x);
        let k = self.full(c, &ty)?;
        self.mul(x, k)
    }

    pub fn select(&mut self, cond: NodeId, a: NodeId, b: NodeId) -> BResult<NodeId> {
        self.node(Op::Select, &[cond, a, b])
    }

    pub fn zeros_like(&mut self, x: NodeId) -> BResult<NodeId> {
        let ty = self.ty(x);
        self.full(0.0, &ty)
    }

    /// Sums `x` down to `shape` (the reverse of NumPy broadcasting).
    pub fn sum_to(&mut self, x: NodeId, shape: &[usize]) -> BResult<NodeId> {
        let xs = self.ty(x).shape;
        if xs == shape {
            return Ok(x);
        }
        let lead = xs.len() - shape.len();
        let mut axes: Vec<usize> = (0..lead).collect();
        for (i, &d) in shape.iter().enumerate() {
            if d == 1 && xs[lead + i] != 1 {
                axes.push(lead + i);
            }
        }
        let s =
            if axes.is_empty() { x } else { self.node(Op::Reduce { op: ReduceOp::Sum, axes, keepdims: false }, &[x])? };
        self.reshape(s, shape)
    }

    pub fn cast(&mut self, x: NodeId, dtype: DType) -> BResult<NodeId> {
        if self.ty(x).dtype == dtype {
            return Ok(x);
        }
        self.node(Op::Cast(dtype), &[x])
    }
}
