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
//! the CPU backend runs on VNNI. Rank-4 `f32` parameters (HWIO filters)
//! of 4 or more input channels are quantized the same way per output
//! channel, and `conv2d` with one (`groups = 1`) becomes `Op::QuantMatMul`
//! with `Patches`. The original model is untouched.
//! The quantized weights are graph values of the program like any other, so
//! they are computed once; `save` writes each as `path` (`I8`) plus
//! `path.scale` (`F32`), and `load` reads them back.
//!
//! With `calibration = x` (a tensor of example inputs, or a batched
//! dataset, whose first batch's inputs are taken), the products
//! quantize their inputs statically, as ONNX Runtime's `quantize_static`
//! with its MinMax calibration: the float model runs on `x` while tracing,
//! each quantized weight's products record the inputs they see, and the
//! smallest and largest of them become that layer's input range (an
//! `f32[2]` operand of its `QuantMatMul`, saved as `path.input_range`).
//!
//! Example: `let q = quantize(net)` then `accuracy(q, test)` next to
//! `accuracy(net, test)`; `quantize(net, calibration = images[0:512])`.

use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{BinaryOp, DType, NodeId, Op, Patches, ReduceOp, UnaryOp};
use crate::trace::args::BuiltinArgs;
use crate::trace::tensor::Operand;
use crate::trace::value::{ModelInstance, Value};
use crate::trace::{TResult, Tracer};
use rustc_hash::FxHashMap;
use std::rc::Rc;

/// The int8 form of one weight matrix: the `i8` values and the per-column
/// scales (nodes), which `Tracer::quantized` keys by the dequantized node,
/// and the static range of its products' inputs when it was calibrated.
#[derive(Clone, Copy, Debug)]
pub struct QuantizedWeight {
    pub values: NodeId,
    pub scales: NodeId,
    pub input_range: Option<NodeId>,
}

/// What a calibration run records (`Tracer::calibration`).
#[derive(Debug, Default)]
pub struct Calibration {
    /// The float weights being quantized → their dequantized copies.
    targets: FxHashMap<NodeId, NodeId>,
    /// The `scan` nesting the run started at: a product inside a loop's
    /// body sees one step's value, which the loop's graph keeps to itself,
    /// so its weight keeps per-row ranges.
    depth: usize,
    /// Each product's input, by the dequantized copy of its weight.
    seen: Vec<(NodeId, Operand)>,
}

/// The name `save` and `load` give a quantized weight's scales.
pub fn scale_path(path: &str) -> String {
    format!("{path}.scale")
}

/// The name `save` and `load` give a calibrated weight's input range.
pub fn input_range_path(path: &str) -> String {
    format!("{path}.input_range")
}

impl Tracer<'_> {
    pub(crate) fn quantize_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let model = match a.get(0) {
            Some((Value::Model(m), _)) => m.clone(),
            _ => return Err(a.bad(0, "a model")),
        };
        let mut weights = Vec::new();
        let copy = self.quantized_copy(&model, a.span, &mut weights)?;
        if weights.is_empty() {
            let name = &model.def.name.name;
            return Err(Diagnostic::new(
                Code::Quantize,
                format!("model `{name}` has no f32 weight matrix to quantize"),
            )
            .label(a.span_of(0), "this model")
            .note("`quantize` stores dense layers' weights (rank-2 f32) and convolution filters of 4 or more input channels as int8")
            .into());
        }
        if let Some((data, at)) = a.get(1) {
            self.calibrate(&model, &weights, (data, *at), a.span)?;
        }
        Ok(Value::Model(copy))
    }

    /// Runs the float `model` on the calibration `data` (at the caller's
    /// `span`) and gives each of `weights` (float weight, dequantized copy)
    /// whose products saw inputs the static range of those inputs.
    fn calibrate(
        &mut self,
        model: &Rc<ModelInstance>,
        weights: &[(NodeId, NodeId)],
        (data, at): (&Value, Span),
        span: Span,
    ) -> TResult<()> {
        let name = &model.def.name.name;
        // A batched dataset gives its first batch's inputs (the first part
        // of an `(x, y)` element).
        let first_batch;
        let data = match data {
            Value::Dataset(d) if !d.batch_sizes.is_empty() => {
                first_batch = match self.collected(d, &d.element, false, at)? {
                    Value::Tuple(parts) => parts.into_iter().next().unwrap_or(Value::Tuple(Vec::new())),
                    v => v,
                };
                &first_batch
            }
            Value::Dataset(_) => {
                return Err(Diagnostic::new(Code::Quantize, "a calibration dataset must be batched")
                    .label(at, "an unbatched dataset")
                    .help("calibrate on its first batch: `calibration = ds |> batch(512)`")
                    .into());
            }
            v => v,
        };
        let fits = |v: &Value| matches!(v, Value::Tensor(_, ty) if ty.dtype == DType::F32 && ty.rank() >= 1);
        if !fits(data) {
            return Err(Diagnostic::new(
                Code::Quantize,
                format!("calibration data must be an f32 tensor of example inputs, not {}", data.describe()),
            )
            .label(at, "not an f32 tensor")
            .help("pass a batch of inputs (`calibration = images[0:512]`) or a batched dataset (`train |> batch(512)`)")
            .into());
        }
        let targets = weights.iter().copied().collect();
        let depth = self.scan_counters.len();
        let before = self.calibration.replace(Calibration { targets, depth, seen: Vec::new() });
        let out = self.call_value(Value::Model(model.clone()), at, vec![(data.clone(), at)], Vec::new(), span);
        let seen = std::mem::replace(&mut self.calibration, before).map(|c| c.seen).unwrap_or_default();
        if let Err(crate::trace::Fail::Diag(d)) = out {
            return Err(Diagnostic::new(Code::Quantize, format!("the calibration data does not fit model `{name}`"))
                .label(at, format!("calibration data: {}", data.describe()))
                .note(format!("running `{name}` on it: {}", d.message))
                .into());
        }
        out?;
        // Per dequantized weight: the smallest and largest input over
        // every product with it (in the order the products ran).
        let mut ranges: FxHashMap<NodeId, (Operand, Operand)> = FxHashMap::default();
        for (deq, x) in seen {
            let axes: Vec<usize> = (0..x.ty.rank()).collect();
            let mut lo =
                self.node(Op::Reduce { op: ReduceOp::Min, axes: axes.clone(), keepdims: false }, &[&x], span)?;
            let mut hi = self.node(Op::Reduce { op: ReduceOp::Max, axes, keepdims: false }, &[&x], span)?;
            if let Some((lo0, hi0)) = ranges.get(&deq) {
                lo = self.node(Op::Binary(BinaryOp::Minimum), &[lo0, &lo], span)?;
                hi = self.node(Op::Binary(BinaryOp::Maximum), &[hi0, &hi], span)?;
            }
            ranges.insert(deq, (lo, hi));
        }
        if ranges.is_empty() {
            return Err(Diagnostic::new(Code::Quantize, format!("calibrating `{name}` ran none of its int8 products"))
                .label(at, "calibration data")
                .note("only `x @ w` with a quantized weight `w` on the right runs on int8")
                .into());
        }
        for (_, deq) in weights {
            let Some((lo, hi)) = ranges.get(deq) else { continue };
            let (lo, hi) = (self.reshape(lo, vec![1], span)?, self.reshape(hi, vec![1], span)?);
            let range = self.node(Op::Concat { axis: 0 }, &[&lo, &hi], span)?;
            if let Some(q) = self.quantized.get_mut(deq) {
                q.input_range = Some(range.id);
            }
        }
        Ok(())
    }

    /// Records the input `x` of `x @ w` (or of a convolution, with
    /// `patches`) while calibrating, when `w` is a weight being quantized
    /// and the product would run on int8.
    pub(crate) fn observe_for_calibration(&mut self, x: &Operand, w: &Operand, patches: Option<Patches>) {
        let depth = self.scan_counters.len();
        let Some(c) = self.calibration.as_mut().filter(|c| c.depth == depth) else { return };
        let Some(&deq) = c.targets.get(&w.id) else { return };
        if runs_on_int8(x, w, patches) {
            c.seen.push((deq, x.clone()));
        }
    }

    /// A copy of `m` (sub-models copied too) whose rank-2 f32 parameters
    /// are quantized; `weights` gets each one's (float, dequantized) nodes.
    fn quantized_copy(
        &mut self,
        m: &Rc<ModelInstance>,
        span: Span,
        weights: &mut Vec<(NodeId, NodeId)>,
    ) -> TResult<Rc<ModelInstance>> {
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
                Value::Tensor(id, ty) if m.params.contains(&name) && ty.dtype == DType::F32 && quantizes(&ty.shape) => {
                    let w = Operand { id, ty, span };
                    let deq = self.quantized_weight(&w, span)?;
                    weights.push((id, deq.id));
                    Value::Tensor(deq.id, deq.ty)
                }
                v if m.submodels.contains(&name) => self.quantized_value(&v, span, weights)?,
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
    fn quantized_value(&mut self, v: &Value, span: Span, weights: &mut Vec<(NodeId, NodeId)>) -> TResult<Value> {
        Ok(match v {
            Value::Model(m) => Value::Model(self.quantized_copy(m, span, weights)?),
            Value::Tuple(items) => {
                Value::Tuple(items.iter().map(|i| self.quantized_value(i, span, weights)).collect::<TResult<_>>()?)
            }
            v => v.clone(),
        })
    }

    /// `w`'s int8 form (module docs); returns the dequantized weight that
    /// the copy binds, registered in `Tracer::quantized`.
    pub(crate) fn quantized_weight(&mut self, w: &Operand, span: Span) -> TResult<Operand> {
        let magnitude = self.node(Op::Unary(UnaryOp::Abs), &[w], span)?;
        // One scale per column (per output channel of an HWIO filter).
        let axes = (0..w.ty.rank() - 1).collect();
        let max = self.node(Op::Reduce { op: ReduceOp::Max, axes, keepdims: false }, &[&magnitude], span)?;
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
        self.dequantized_from(&values, scales, None, span)
    }

    /// The f32 weight that int8 `values` with per-column `scales` stand
    /// for, registered so that products with it run on int8 (with the
    /// static `input_range` when there is one).
    pub(crate) fn dequantized_from(
        &mut self,
        values: &Operand,
        scales: &Operand,
        input_range: Option<NodeId>,
        span: Span,
    ) -> TResult<Operand> {
        let wide = self.broadcast_to(scales, &values.ty.shape, span)?;
        let float = self.cast(values, DType::F32, span)?;
        let deq = self.node(Op::Binary(BinaryOp::Mul), &[&float, &wide], span)?;
        self.quantized.insert(deq.id, QuantizedWeight { values: values.id, scales: scales.id, input_range });
        Ok(deq)
    }

    /// `x @ w` on int8 (a convolution of `x` by `w` with `patches`) when
    /// `w` is a quantized weight that fits `x` (`runs_on_int8`); `None`
    /// when the product is an ordinary one.
    pub(crate) fn quantized_product(
        &mut self,
        x: &Operand,
        w: &Operand,
        patches: Option<Patches>,
        span: Span,
    ) -> TResult<Option<Operand>> {
        let Some(q) = self.quantized.get(&w.id).copied() else { return Ok(None) };
        if !runs_on_int8(x, w, patches) {
            return Ok(None);
        }
        let values = Operand { id: q.values, ty: self.graph.node(q.values).ty.clone(), span: w.span };
        let scales = Operand { id: q.scales, ty: self.graph.node(q.scales).ty.clone(), span: w.span };
        let mut operands = vec![x, &values, &scales];
        let range = q.input_range.map(|id| Operand { id, ty: self.graph.node(id).ty.clone(), span: w.span });
        operands.extend(range.as_ref());
        Ok(Some(self.node(Op::QuantMatMul { patches }, &operands, span)?))
    }
}

/// Whether a parameter of this shape is stored as int8: a dense layer's
/// `[k, n]` weights, or an HWIO filter that sees at least 4 input channels
/// (a first layer's 1 or 3 channels give each output too few products for
/// int8 to pay for quantizing its input: it stays `f32`).
fn quantizes(shape: &[usize]) -> bool {
    match shape {
        [_, _] => true,
        [_, _, channels, _] => *channels >= crate::ir::MIN_NARROW_CONV_CHANNELS,
        _ => false,
    }
}

/// Whether `x @ w` (a convolution with `patches`) with a quantized `w`
/// runs on int8: an f32 `x` of rank ≥ 1 whose last dimension is `w`'s row
/// count, or an NHWC `x` with the HWIO filter's input channels.
fn runs_on_int8(x: &Operand, w: &Operand, patches: Option<Patches>) -> bool {
    let (x, w) = (&x.ty, &w.ty);
    x.dtype == DType::F32
        && match patches {
            None => x.rank() > 0 && w.rank() == 2 && x.shape.last() == w.shape.first(),
            Some(_) => x.rank() == 4 && w.rank() == 4 && x.shape[3] == w.shape[2],
        }
}
