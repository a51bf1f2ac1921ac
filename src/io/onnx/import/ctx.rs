//! The importer's workbench: the values of an ONNX graph as typed IR nodes
//! ([`Val`]), and the node builders every operator's translation uses
//! (NumPy broadcasting, casts, reshapes, constants, gathers along an axis),
//! with errors that name the ONNX node being translated.
//!
//! Contract: every node goes through [`Ctx::add`], so its type comes from
//! `ir::infer`; an op whose operands are all known while checking (shapes,
//! axes, small constants) is computed at once by `tensor::eval_node`, the
//! same code that would run it later, so values such as a `Reshape`'s
//! target shape computed by `Shape → Gather → Concat` are known as the IR
//! needs them. An operand the IR needs as a number (an axis, a shape) that
//! is only known at run time is `E0343`.
//!
//! Example: `cx.binary(BinaryOp::Add, &x, &bias)` with `x: f32[2, 3]` and
//! `bias: f32[3]` adds a `broadcast_to [2, 3]` of the bias, then the `add`.

use crate::diag::{Code, Diagnostic, Span};
use crate::io::onnx::model::{AttrValue, Node};
use crate::ir::infer::{broadcast_shapes, infer};
use crate::ir::{BinaryOp, DType, Graph, Literal, NodeId, Op, TensorType, UnaryOp};
use crate::tensor::{eval_node, Tensor};
use std::rc::Rc;

/// Ops whose operands are all known are computed while importing when
/// their result has at most this many elements (shapes, axes, masks).
const FOLD_LIMIT: usize = 1 << 16;

/// Most elements a value may have (as the tracer's limit): a larger shape
/// from a file (`Expand` to `[2^40]`) is E0317 before anything is built.
pub const MAX_ELEMENTS: usize = 1 << 34;

/// The element count of `shape`, if it is at most `MAX_ELEMENTS`.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).filter(|&n| n <= MAX_ELEMENTS)
}

/// One ONNX value: its IR node and type, and its elements when they are
/// known while checking (an initializer that is not a parameter, a
/// `Constant`, a `Shape`, or an op computed from such values).
#[derive(Clone, Debug)]
pub struct Val {
    pub id: NodeId,
    pub ty: TensorType,
    pub known: Option<Rc<Tensor>>,
}

impl Val {
    pub fn rank(&self) -> usize {
        self.ty.rank()
    }

    pub fn shape(&self) -> &[usize] {
        &self.ty.shape
    }

    pub fn dtype(&self) -> DType {
        self.ty.dtype
    }
}

/// Translating one graph into `g`: where errors point, the opset, and the
/// node being translated.
pub struct Ctx<'g> {
    pub g: &'g mut Graph,
    pub span: Span,
    pub opset: i64,
    /// The node being translated, for messages: "node 3 (`conv1`, Conv)".
    pub label: String,
}

impl Ctx<'_> {
    /// E0343: the node uses something tfc cannot import.
    pub fn unsupported(&self, why: impl std::fmt::Display) -> Diagnostic {
        Diagnostic::new(Code::OnnxUnsupported, format!("cannot import ONNX {}: {why}", self.label))
            .label(self.span, "in the ONNX model loaded here")
    }

    /// A diagnostic of `code` about the node (a model whose shapes or
    /// attributes do not fit together).
    pub fn invalid(&self, code: Code, why: impl std::fmt::Display) -> Diagnostic {
        Diagnostic::new(code, format!("ONNX {}: {why}", self.label)).label(self.span, "in the ONNX model loaded here")
    }

    /// A node of `op` over `ins`, typed by `infer`; computed at once when
    /// every operand is known and the result is small.
    pub fn add(&mut self, op: Op, ins: &[&Val]) -> Result<Val, Diagnostic> {
        let types: Vec<&TensorType> = ins.iter().map(|v| &v.ty).collect();
        let ty = infer(&op, &types).map_err(|e| self.invalid(e.code, format!("{} ({})", e.message, op.name())))?;
        let numel = checked_numel(&ty.shape).ok_or_else(|| {
            self.invalid(Code::TooLarge, format!("{} of shape {:?} has too many elements", op.name(), ty.shape))
        })?;
        let known: Option<Vec<&Tensor>> = ins.iter().map(|v| v.known.as_deref()).collect();
        if let Some(values) = known.filter(|_| !ins.is_empty() && numel <= FOLD_LIMIT) {
            if let Ok(t) = eval_node(&op, &values, &ty) {
                return self.constant(t);
            }
        }
        let id = self.g.add_from(op, ins.iter().map(|v| v.id), ty.clone(), self.span);
        Ok(Val { id, ty, known: None })
    }

    /// A constant node holding `t`.
    pub fn constant(&mut self, t: Tensor) -> Result<Val, Diagnostic> {
        let ty = t.ty();
        let op = Op::Constant { value: t.to_literal(), ty: ty.clone() };
        let id = self.g.add(op, &[], ty.clone(), self.span);
        Ok(Val { id, ty, known: Some(Rc::new(t)) })
    }

    /// A scalar of `dtype` holding `v` (rounded to the dtype).
    pub fn scalar(&mut self, v: f64, dtype: DType) -> Result<Val, Diagnostic> {
        let lit = match dtype {
            DType::Bool => Literal::Bool(vec![v != 0.0]),
            d if d.is_int() => Literal::Int(vec![v as i64]),
            d => Literal::Float(vec![d.round(v)]),
        };
        self.constant(Tensor::from_literal(&lit, &TensorType::scalar(dtype))?)
    }

    /// A rank-1 `i64` constant.
    pub fn ints(&mut self, v: &[i64]) -> Result<Val, Diagnostic> {
        self.constant(Tensor::from_vec(DType::I64, &[v.len()], v.to_vec())?)
    }

    pub fn unary(&mut self, op: UnaryOp, x: &Val) -> Result<Val, Diagnostic> {
        self.add(Op::Unary(op), &[x])
    }

    /// `a op b` with NumPy broadcasting (operands of one dtype).
    pub fn binary(&mut self, op: BinaryOp, a: &Val, b: &Val) -> Result<Val, Diagnostic> {
        let [a, b] = self.broadcast_all([a, b])?;
        self.add(Op::Binary(op), &[&a, &b])
    }

    /// `a op s` for a number `s` of `a`'s dtype.
    pub fn binary_scalar(&mut self, op: BinaryOp, a: &Val, s: f64) -> Result<Val, Diagnostic> {
        let s = self.scalar(s, a.dtype())?;
        self.binary(op, a, &s)
    }

    /// `a != b` for bools (tfc's `ne` compares numbers): `(a or b) and not (a and b)`.
    pub fn xor(&mut self, a: &Val, b: &Val) -> Result<Val, Diagnostic> {
        let either = self.binary(BinaryOp::Or, a, b)?;
        let both = self.binary(BinaryOp::And, a, b)?;
        let not_both = self.unary(UnaryOp::Not, &both)?;
        self.binary(BinaryOp::And, &either, &not_both)
    }

    /// `where(c, a, b)` with NumPy broadcasting.
    pub fn select(&mut self, c: &Val, a: &Val, b: &Val) -> Result<Val, Diagnostic> {
        let [c, a, b] = self.broadcast_all([c, a, b])?;
        self.add(Op::Select, &[&c, &a, &b])
    }

    /// The operands broadcast to their common shape.
    pub fn broadcast_all<const N: usize>(&mut self, vals: [&Val; N]) -> Result<[Val; N], Diagnostic> {
        let mut shape: Vec<usize> = Vec::new();
        for v in vals {
            shape = broadcast_shapes(&shape, v.shape()).ok_or_else(|| {
                let shapes: Vec<String> = vals.iter().map(|v| format!("{:?}", v.shape())).collect();
                self.invalid(Code::Broadcast, format!("shapes {} do not broadcast", shapes.join(", ")))
            })?;
        }
        let mut out = Vec::with_capacity(N);
        for v in vals {
            out.push(self.broadcast(v, &shape)?);
        }
        out.try_into().map_err(|_| Diagnostic::internal("broadcast_all: count"))
    }

    /// `v` broadcast to `shape` (nothing when it has that shape).
    pub fn broadcast(&mut self, v: &Val, shape: &[usize]) -> Result<Val, Diagnostic> {
        if v.shape() == shape {
            return Ok(v.clone());
        }
        self.add(Op::BroadcastTo { shape: shape.to_vec() }, &[v])
    }

    /// `v` as `dtype` (nothing when it is one).
    pub fn cast(&mut self, v: &Val, dtype: DType) -> Result<Val, Diagnostic> {
        if v.dtype() == dtype {
            return Ok(v.clone());
        }
        self.add(Op::Cast(dtype), &[v])
    }

    pub fn reshape(&mut self, v: &Val, shape: &[usize]) -> Result<Val, Diagnostic> {
        if v.shape() == shape {
            return Ok(v.clone());
        }
        self.add(Op::Reshape { shape: shape.to_vec() }, &[v])
    }

    pub fn transpose(&mut self, v: &Val, perm: &[usize]) -> Result<Val, Diagnostic> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(v.clone());
        }
        self.add(Op::Transpose { perm: perm.to_vec() }, &[v])
    }

    /// `v` with every `axes` reduced by `op`, keeping them as size 1 or not.
    pub fn reduce(&mut self, op: crate::ir::ReduceOp, v: &Val, axes: &[usize], keep: bool) -> Result<Val, Diagnostic> {
        let mut axes = axes.to_vec();
        axes.sort_unstable();
        axes.dedup();
        self.add(Op::Reduce { op, axes, keepdims: keep }, &[v])
    }

    /// The slice `start..start + len` along `axis` (step 1).
    pub fn narrow(&mut self, v: &Val, axis: usize, start: usize, len: usize) -> Result<Val, Diagnostic> {
        let rank = v.rank();
        let mut starts = vec![0; rank];
        let mut lens = v.shape().to_vec();
        starts[axis] = start;
        lens[axis] = len;
        self.add(Op::Slice { start: starts, step: vec![1; rank], len: lens }, &[v])
    }

    /// `x` read at `indices` along `axis` (NumPy's `take_along_axis`;
    /// `indices` shaped like `x` except along `axis`, each in range): one
    /// gather from the flattened `x` at the flat index of each element.
    pub fn take_along(&mut self, x: &Val, indices: &Val, axis: usize) -> Result<Val, Diagnostic> {
        let rank = x.rank();
        let strides = crate::tensor::strides(x.shape());
        let out_ty = TensorType::new(DType::I64, indices.shape().to_vec());
        let mut flat = self.cast(indices, DType::I64)?;
        flat = self.binary_scalar(BinaryOp::Mul, &flat, strides[axis] as f64)?;
        for (d, &stride) in strides.iter().enumerate().take(rank) {
            if d == axis || indices.shape()[d] == 1 {
                continue;
            }
            let iota = self.add(Op::Iota { ty: out_ty.clone(), axis: d }, &[])?;
            let part = self.binary_scalar(BinaryOp::Mul, &iota, stride as f64)?;
            flat = self.binary(BinaryOp::Add, &flat, &part)?;
        }
        let whole = self.reshape(x, &[x.ty.numel()])?;
        self.add(Op::Gather { axis: 0 }, &[&whole, &flat])
    }

    /// Input `i` of the node, which it must have.
    pub fn input<'a>(&self, ins: &'a [Option<Val>], i: usize) -> Result<&'a Val, Diagnostic> {
        ins.get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.invalid(Code::MissingArgument, format!("input {i} is missing")))
    }

    /// An axis of a rank-`rank` value, negative counting from the end.
    pub fn axis(&self, a: i64, rank: usize) -> Result<usize, Diagnostic> {
        let r = rank as i64;
        if a < -r || a >= r.max(1) {
            return Err(self.invalid(Code::Axis, format!("axis {a} is out of range for rank {rank}")));
        }
        Ok(if a < 0 { (a + r) as usize } else { a as usize })
    }

    /// The elements of `v` as integers, which the IR needs while checking.
    pub fn known_ints(&self, v: &Val, what: &str) -> Result<Vec<i64>, Diagnostic> {
        match v.known.as_deref() {
            Some(t) => t.to_i64_vec().ok_or_else(|| self.unsupported(format!("{what} must be an integer tensor"))),
            None => Err(self.unsupported(format!(
                "{what} is computed at run time, but tfc needs it while checking (a constant or an initializer)"
            ))),
        }
    }

    /// The elements of `v` as numbers, which the IR needs while checking.
    pub fn known_floats(&self, v: &Val, what: &str) -> Result<Vec<f64>, Diagnostic> {
        match v.known.as_deref() {
            Some(t) => Ok(t.to_f64_vec()),
            None => Err(self.unsupported(format!(
                "{what} is computed at run time, but tfc needs it while checking (a constant or an initializer)"
            ))),
        }
    }
}

/// Reading a node's attributes with the types ONNX's schema gives them.
pub struct Attrs<'n>(pub &'n Node);

impl Attrs<'_> {
    fn wrong(&self, cx: &Ctx, name: &str, want: &str, v: &AttrValue) -> Diagnostic {
        cx.unsupported(format!("attribute `{name}` should be {want}, it is {}", v.type_name()))
    }

    pub fn int(&self, cx: &Ctx, name: &str, default: i64) -> Result<i64, Diagnostic> {
        Ok(self.int_opt(cx, name)?.unwrap_or(default))
    }

    pub fn int_opt(&self, cx: &Ctx, name: &str) -> Result<Option<i64>, Diagnostic> {
        match self.0.attr(name) {
            None => Ok(None),
            Some(AttrValue::Int(i)) => Ok(Some(*i)),
            Some(v) => Err(self.wrong(cx, name, "an INT", v)),
        }
    }

    pub fn float(&self, cx: &Ctx, name: &str, default: f32) -> Result<f32, Diagnostic> {
        match self.0.attr(name) {
            None => Ok(default),
            Some(AttrValue::Float(f)) => Ok(*f),
            Some(v) => Err(self.wrong(cx, name, "a FLOAT", v)),
        }
    }

    pub fn ints(&self, cx: &Ctx, name: &str) -> Result<Option<Vec<i64>>, Diagnostic> {
        match self.0.attr(name) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v.clone())),
            Some(v) => Err(self.wrong(cx, name, "INTS", v)),
        }
    }

    pub fn string(&self, cx: &Ctx, name: &str, default: &str) -> Result<String, Diagnostic> {
        match self.0.attr(name) {
            None => Ok(default.to_string()),
            Some(AttrValue::String(s)) => Ok(String::from_utf8_lossy(s).into_owned()),
            Some(v) => Err(self.wrong(cx, name, "a STRING", v)),
        }
    }
}
