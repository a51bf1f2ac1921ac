//! `quantize(model)`: a copy of a model for int8 inference (§9,
//! *Quantized inference*), ONNX Runtime's `quantize_dynamic` done natively.
//!
//! Contract: the copy has the same members, but each rank-2 `f32`
//! parameter `w: f32[k, n]` (a dense layer's weight matrix) is replaced by
//! its int8 form: per-column symmetric scales `s = max|w[:, j]| / 127`
//! (`1` for a column of zeros), `q = i8(round(w / s))`, and the parameter
//! reads as `f32(q) · s` wherever it is used. A product `x @ w` with such a
//! weight on the right becomes `Op::QuantMatMul` (each row of `x`
//! quantized to `u8` on the fly, integer sums, see `tensor::quant`), which
//! the CPU backend runs on VNNI. The original model is untouched.
//! The quantized weights are graph values of the program like any other, so
//! they are computed once; `save` writes each as `path` (`I8`) plus
//! `path.scale` (`F32`), and `load` reads them back.
//!
//! Example: `let q = quantize(net)` then `accuracy(q, test)` next to
//! `accuracy(net, test)`.

use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{BinaryOp, DType, NodeId, Op, ReduceOp, UnaryOp};
use crate::trace::args::BuiltinArgs;
use crate::trace::tensor::Operand;
use crate::trace::value::{ModelInstance, Value};
use crate::trace::{TResult, Tracer};
use std::rc::Rc;

/// The int8 form of one weight matrix: the `i8` values and the per-column
/// scales (nodes), which `Tracer::quantized` keys by the dequantized node.
#[derive(Clone, Copy, Debug)]
pub struct QuantizedWeight {
    pub values: NodeId,
    pub scales: NodeId,
}

/// The name `save` and `load` give a quantized weight's scales.
pub fn scale_path(path: &str) -> String {
    format!("{path}.scale")
}

impl Tracer<'_> {
    pub(crate) fn quantize_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let model = match a.get(0) {
            Some((Value::Model(m), _)) => m.clone(),
            _ => return Err(a.bad(0, "a model")),
        };
        let mut count = 0;
        let copy = self.quantized_copy(&model, a.span, &mut count)?;
        if count == 0 {
            let name = &model.def.name.name;
            return Err(Diagnostic::new(
                Code::Quantize,
                format!("model `{name}` has no f32 weight matrix to quantize"),
            )
            .label(a.span_of(0), "this model")
            .note("`quantize` stores rank-2 f32 parameters (dense layers' weights) as int8")
            .into());
        }
        Ok(Value::Model(copy))
    }

    /// A copy of `m` (sub-models copied too) whose rank-2 f32 parameters
    /// are quantized; `count` grows by the number quantized.
    fn quantized_copy(&mut self, m: &Rc<ModelInstance>, span: Span, count: &mut usize) -> TResult<Rc<ModelInstance>> {
        if m.onnx.is_some() {
            return Err(Diagnostic::new(Code::Quantize, "models loaded with `load_onnx` cannot be quantized yet")
                .label(span, "this model")
                .into());
        }
        let parent = m.scope.parent().ok_or_else(|| Diagnostic::internal("a model scope without a parent"))?;
        let scope = self.scopes.child(parent);
        scope.declare_states(&m.states);
        for name in m.scope.local_names() {
            let Some(v) = m.scope.get_local(&name) else { continue };
            let v = match v {
                Value::Tensor(id, ty) if m.params.contains(&name) && ty.dtype == DType::F32 && ty.rank() == 2 => {
                    *count += 1;
                    let w = Operand { id, ty, span };
                    let deq = self.quantized_weight(&w, span)?;
                    Value::Tensor(deq.id, deq.ty)
                }
                v if m.submodels.contains(&name) => self.quantized_value(&v, span, count)?,
                v => v,
            };
            scope.set(&name, v);
        }
        Ok(Rc::new(ModelInstance {
            def: m.def.clone(),
            scope,
            params: m.params.clone(),
            states: m.states.clone(),
            submodels: m.submodels.clone(),
            onnx: None,
        }))
    }

    /// A sub-model field's copy: a model, or a list holding models.
    fn quantized_value(&mut self, v: &Value, span: Span, count: &mut usize) -> TResult<Value> {
        Ok(match v {
            Value::Model(m) => Value::Model(self.quantized_copy(m, span, count)?),
            Value::Tuple(items) => {
                Value::Tuple(items.iter().map(|i| self.quantized_value(i, span, count)).collect::<TResult<_>>()?)
            }
            v => v.clone(),
        })
    }

    /// `w`'s int8 form (module docs); returns the dequantized weight that
    /// the copy binds, registered in `Tracer::quantized`.
    pub(crate) fn quantized_weight(&mut self, w: &Operand, span: Span) -> TResult<Operand> {
        let magnitude = self.node(Op::Unary(UnaryOp::Abs), &[w], span)?;
        let max = self.node(Op::Reduce { op: ReduceOp::Max, axes: vec![0], keepdims: false }, &[&magnitude], span)?;
        let levels = self.scalar(127.0, DType::F32, span)?;
        let levels = self.broadcast_to(&levels, &max.ty.shape, span)?;
        let scale = self.node(Op::Binary(BinaryOp::Div), &[&max, &levels], span)?;
        let scales = self.nonzero(&scale, span)?;
        self.dequantized(w, &scales, span)
    }

    /// `s`, with `1` where it is `0` (a column of zero weights).
    fn nonzero(&mut self, s: &Operand, span: Span) -> TResult<Operand> {
        let zero = self.scalar(0.0, DType::F32, span)?;
        let zero = self.broadcast_to(&zero, &s.ty.shape, span)?;
        let one = self.scalar(1.0, DType::F32, span)?;
        let one = self.broadcast_to(&one, &s.ty.shape, span)?;
        let is_zero = self.node(Op::Binary(BinaryOp::Eq), &[s, &zero], span)?;
        self.node(Op::Select, &[&is_zero, &one, s], span)
    }

    /// `i8(round(w / scales))` and the weight it stands for, `f32(q) ·
    /// scales`, registered as quantized.
    fn dequantized(&mut self, w: &Operand, scales: &Operand, span: Span) -> TResult<Operand> {
        let wide = self.broadcast_to(scales, &w.ty.shape, span)?;
        let ratio = self.node(Op::Binary(BinaryOp::Div), &[w, &wide], span)?;
        let rounded = self.node(Op::Unary(UnaryOp::Round), &[&ratio], span)?;
        let values = self.cast(&rounded, DType::I8, span)?;
        self.dequantized_from(&values, scales, span)
    }

    /// The f32 weight that int8 `values` with per-column `scales` stand
    /// for, registered so that products with it run on int8.
    pub(crate) fn dequantized_from(&mut self, values: &Operand, scales: &Operand, span: Span) -> TResult<Operand> {
        let wide = self.broadcast_to(scales, &values.ty.shape, span)?;
        let float = self.cast(values, DType::F32, span)?;
        let deq = self.node(Op::Binary(BinaryOp::Mul), &[&float, &wide], span)?;
        self.quantized.insert(deq.id, QuantizedWeight { values: values.id, scales: scales.id });
        Ok(deq)
    }

    /// `x @ w` on int8 when `w` is a quantized weight and `x` is f32 of
    /// rank ≥ 1 with `w`'s row count as its last dimension; `None` when
    /// the product is an ordinary one.
    pub(crate) fn quantized_product(&mut self, x: &Operand, w: &Operand, span: Span) -> TResult<Option<Operand>> {
        let Some(q) = self.quantized.get(&w.id).copied() else { return Ok(None) };
        if x.ty.dtype != DType::F32 || x.ty.rank() == 0 || x.ty.shape.last() != w.ty.shape.first() {
            return Ok(None);
        }
        let values = Operand { id: q.values, ty: self.graph.node(q.values).ty.clone(), span: w.span };
        let scales = Operand { id: q.scales, ty: self.graph.node(q.scales).ty.clone(), span: w.span };
        Ok(Some(self.node(Op::QuantMatMul, &[x, &values, &scales], span)?))
    }
}
