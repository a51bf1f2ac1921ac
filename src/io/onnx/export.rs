//! ONNX export of an `export fn`: the nodes of its region become ONNX
//! operators (opset 17), its parameters the graph's inputs, its results the
//! graph's outputs, and every value it captures (a model's weights) an
//! initializer.
//!
//! Contract: [`OnnxPlan::new`] checks, before anything runs, that every op
//! the function computes has an ONNX form (E0341 at the op's line
//! otherwise) and lists the captured values it needs ([`OnnxPlan::leaves`]);
//! [`OnnxPlan::write`] takes their values and returns the model's bytes.
//! The exported model computes what the region computes, up to the
//! rounding of a different summation order: tfc's NHWC convolutions and
//! pools become ONNX's NCHW ones between transposes (ONNX Runtime folds
//! them), broadcasts that an operator's own broadcasting covers are left
//! out, `log1p`/`expm1`/`rsqrt` become two operators, float `%` is written
//! as `a - floor(a / b) * b`, integer `/` (floor division) as ONNX's
//! truncating `Div` corrected where the signs differ, and `argsort` as a
//! `TopK` over the whole axis (NaNs may order differently).
//!
//! Example: `export fn predict(x: f32[64, 784]) = net(x)` for a two-layer
//! MLP writes `MatMul, Add, Relu, MatMul, Add, Identity` over input `x`
//! `[64, 784]`, initializers `l1.w`, `l1.b`, `l2.w`, `l2.b` and output
//! `output`.

use super::symbolic::{Dim, Scaling};
use crate::diag::{Code, Diagnostic};
use crate::io::proto::Message;
use crate::ir::plan::ExportPlan;
use crate::ir::{BinaryOp, DType, Graph, NodeId, Op, PoolKind, ReduceOp, TensorType, UnaryOp};
use crate::tensor::{Data, Tensor};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// The ONNX operator set the export targets, and the IR version that goes
/// with it.
pub const OPSET: i64 = 17;
const IR_VERSION: i64 = 8;

/// What an export writes, worked out from the graph alone.
pub struct OnnxPlan<'g> {
    graph: &'g Graph,
    export: &'g ExportPlan,
    /// Nodes written as operators, in topological order.
    ops: Vec<NodeId>,
    /// Nodes written as initializers, in topological order.
    leaves: Vec<NodeId>,
    /// The region's parameter slots: node → parameter index.
    inputs: HashMap<NodeId, usize>,
    /// Each operator node's operands, after leaving out broadcasts that
    /// ONNX's broadcasting operators do themselves.
    operands: HashMap<NodeId, Vec<NodeId>>,
    /// With an open size: its name, the dimensions that scale with it, and
    /// a parameter axis that is exactly it (for shapes computed at run time).
    open: Option<OpenSize>,
}

/// An export's open size (`B`) and where ONNX finds its value.
struct OpenSize {
    name: String,
    scaling: Scaling,
    /// A parameter and axis whose size is `B`.
    source: (String, usize),
    /// Constants that repeat one row along `B`: that row.
    repeated: HashMap<NodeId, Tensor>,
}

impl<'g> OnnxPlan<'g> {
    /// Plans the export of `export` from `graph` (E0341 at the first op
    /// that has no ONNX form).
    pub fn new(graph: &'g Graph, export: &'g ExportPlan) -> Result<OnnxPlan<'g>, Diagnostic> {
        let order = graph.topo_order();
        let rank: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let vary: HashSet<NodeId> = crate::ir::regions::varying(graph, &export.region, &rank).into_iter().collect();
        let slot_index: HashMap<usize, usize> =
            export.region.inputs.iter().enumerate().map(|(i, (slot, _))| (*slot, i)).collect();
        let mut plan = OnnxPlan {
            graph,
            export,
            ops: Vec::new(),
            leaves: Vec::new(),
            inputs: HashMap::default(),
            operands: HashMap::default(),
            open: None,
        };
        if let Some((name, probe)) = &export.symbolic {
            let super::symbolic::Comparison { scaling, repeated } =
                super::symbolic::compare(graph, &export.region, probe, name, export.span)?;
            let source = export.region.inputs.iter().enumerate().find_map(|(i, (slot, _))| {
                let node = order.iter().copied().find(|&n| {
                    matches!(&graph.node(n).op, Op::Slot { slot: s, .. } if s == slot) && vary.contains(&n)
                })?;
                let axis = scaling.get(&node)?.iter().position(|d| *d == Dim::Scaled(1))?;
                Some((export.params[i].clone(), axis))
            });
            let source = source.ok_or_else(|| {
                Diagnostic::new(
                    Code::ExportType,
                    format!("no parameter of `{}` has the size `{name}` itself", export.name),
                )
                .label(export.span, "exported here")
            })?;
            plan.open = Some(OpenSize { name: name.clone(), scaling, source, repeated });
        }
        let mut seen: HashSet<NodeId> = HashSet::default();
        let mut stack: Vec<NodeId> = export.region.outputs.clone();
        while let Some(n) = stack.pop() {
            if !seen.insert(n) {
                continue;
            }
            let node = graph.node(n);
            match &node.op {
                Op::Slot { slot, .. } if vary.contains(&n) && slot_index.contains_key(slot) => {
                    plan.inputs.insert(n, slot_index[slot]);
                }
                // A captured broadcast is written as the small value it
                // expands, so a bias does not become a batch-sized initializer.
                Op::BroadcastTo { .. } => plan.operator(n, &mut stack)?,
                _ if vary.contains(&n) => plan.operator(n, &mut stack)?,
                _ => plan.leaves.push(n),
            }
        }
        plan.ops.sort_by_key(|n| rank[n]);
        plan.leaves.sort_by_key(|n| rank[n]);
        Ok(plan)
    }

    /// A node's dimensions: fixed, or with an open size those that scale.
    fn dims_of(&self, n: NodeId) -> Vec<Dim> {
        match self.open.as_ref().and_then(|o| o.scaling.get(&n)) {
            Some(dims) => dims.clone(),
            None => self.graph.node(n).ty.shape.iter().map(|&d| Dim::Fixed(d)).collect(),
        }
    }

    /// The captured values whose data [`OnnxPlan::write`] needs.
    pub fn leaves(&self) -> &[NodeId] {
        &self.leaves
    }

    fn operator(&mut self, n: NodeId, stack: &mut Vec<NodeId>) -> Result<(), Diagnostic> {
        let node = self.graph.node(n);
        if let Some(why) = unsupported(&node.op, &self.graph.inputs(n), self.graph) {
            return Err(Diagnostic::new(
                Code::OnnxExport,
                format!("`{}` cannot be exported to ONNX: {why}", self.export.name),
            )
            .label(node.span, format!("this `{}`", node.op.name()))
            .label(self.export.span, "exported here"));
        }
        if let (Some(open), Op::Slice { start, step, len }) = (&self.open, &node.op) {
            let dims = &self.graph.node(self.graph.inputs(n)[0]).ty.shape;
            let scaled = open.scaling.get(&n).cloned().unwrap_or_default();
            let partial = |d: usize| !(start[d] == 0 && step[d] == 1 && len[d] == dims[d]);
            if let Some(d) = (0..len.len()).find(|&d| matches!(scaled.get(d), Some(Dim::Scaled(_))) && partial(d)) {
                return Err(Diagnostic::new(
                    Code::OnnxExport,
                    format!(
                        "`{}` cannot keep `{}` open: it slices part of axis {d}, which grows with it",
                        self.export.name, open.name
                    ),
                )
                .label(node.span, "this slice")
                .label(self.export.span, "exported here"));
            }
        }
        let operands = self.effective_operands(n);
        stack.extend(operands.iter().copied());
        self.operands.insert(n, operands);
        self.ops.push(n);
        Ok(())
    }

    /// The operands of `n`, where a broadcasting ONNX operator reads the
    /// source of a `broadcast_to` operand directly as long as the result
    /// keeps its shape.
    fn effective_operands(&self, n: NodeId) -> Vec<NodeId> {
        let g = self.graph;
        let mut ops = g.inputs(n);
        if !matches!(g.node(n).op, Op::Binary(_) | Op::Select) {
            return ops;
        }
        let out = &g.node(n).ty.shape;
        for i in 0..ops.len() {
            while let Op::BroadcastTo { .. } = g.node(ops[i]).op {
                let source = g.inputs(ops[i])[0];
                let mut trial = ops.clone();
                trial[i] = source;
                let shapes: Vec<&[usize]> = trial.iter().map(|&o| g.node(o).ty.shape.as_slice()).collect();
                if broadcast_shape(&shapes).as_deref() != Some(out.as_slice()) {
                    break;
                }
                ops = trial;
            }
        }
        ops
    }

    /// The model: `values` holds the data of every node of
    /// [`OnnxPlan::leaves`]; `names` optionally names some of them (a
    /// model's parameters by path).
    pub fn write(
        &self,
        values: &HashMap<NodeId, Tensor>,
        names: &HashMap<NodeId, String>,
    ) -> Result<Vec<u8>, Diagnostic> {
        let mut b = Builder::default();
        let mut name: HashMap<NodeId, String> = HashMap::default();
        let mut used: HashSet<String> = HashSet::default();
        for (&n, &i) in &self.inputs {
            name.insert(n, self.export.params[i].clone());
            used.insert(self.export.params[i].clone());
        }
        for &n in &self.leaves {
            if let Some((open, row)) = self.open.as_ref().and_then(|o| Some((o, o.repeated.get(&n)?))) {
                // A constant of `B` rows: one row, expanded to the batch.
                let row_name = format!("c{}_row", n.index());
                b.initializers.push(tensor_proto(&row_name, row));
                let shape = b.shape(&self.graph.node(n).ty.shape, Some((open, &open.scaling[&n])), false);
                let label = format!("c{}", n.index());
                b.node("Expand", &[&row_name, &shape], &label, vec![]);
                name.insert(n, label);
                continue;
            }
            let t = values.get(&n).ok_or_else(|| Diagnostic::internal(format!("onnx: no value for {n:?}")))?;
            let mut label = names.get(&n).cloned().unwrap_or_else(|| format!("c{}", n.index()));
            if !used.insert(label.clone()) {
                label = format!("{label}_{}", n.index());
                used.insert(label.clone());
            }
            b.initializers.push(tensor_proto(&label, t));
            name.insert(n, label);
        }
        for &n in &self.ops {
            let ins: Vec<String> = self.operands[&n].iter().map(|o| name[o].clone()).collect();
            let out = format!("t{}", n.index());
            emit(self.graph, n, &ins, &out, &mut b, self.open.as_ref())?;
            name.insert(n, out);
        }
        let outputs = &self.export.region.outputs;
        let out_name = |i: usize| if outputs.len() == 1 { "output".to_string() } else { format!("output_{i}") };
        let mut graph_outputs = Vec::new();
        for (i, &o) in outputs.iter().enumerate() {
            b.node("Identity", &[name[&o].as_str()], &out_name(i), vec![]);
            let ty = &self.graph.node(o).ty;
            graph_outputs.push(value_info(&out_name(i), ty, &self.dims_of(o), self.open.as_ref()));
        }
        let mut graph = Message::new();
        for node in &b.nodes {
            graph = graph.message(1, node);
        }
        graph = graph.text(2, &self.export.name);
        for init in &b.initializers {
            graph = graph.message(5, init);
        }
        for (i, (_, ty)) in self.export.region.inputs.iter().enumerate() {
            let dims = match &self.export.symbolic {
                Some((_, probe)) => scaled_dims(&ty.shape, &probe.inputs[i].1.shape),
                None => ty.shape.iter().map(|&d| Dim::Fixed(d)).collect(),
            };
            graph = graph.message(11, &value_info(&self.export.params[i], ty, &dims, self.open.as_ref()));
        }
        for o in &graph_outputs {
            graph = graph.message(12, o);
        }
        let opset = Message::new().text(1, "").int(2, OPSET);
        let model = Message::new()
            .int(1, IR_VERSION)
            .text(2, "tfc")
            .text(3, env!("CARGO_PKG_VERSION"))
            .message(7, &graph)
            .message(8, &opset);
        Ok(model.into_bytes())
    }
}

/// Names for the values a program's exports may capture: each trained,
/// loaded or initial parameter (and state) by its path in the model
/// (`l1.w`), so initializers read like the model.
pub fn value_names(program: &crate::ir::Program) -> HashMap<NodeId, String> {
    let mut by_slot: HashMap<usize, String> = HashMap::default();
    let mut names: HashMap<NodeId, String> = HashMap::default();
    for e in &program.effects {
        match e {
            crate::ir::Effect::Train(t) => {
                for ((name, initial), slot) in t.carried().zip(&t.result_slots) {
                    names.entry(*initial).or_insert_with(|| name.clone());
                    by_slot.insert(*slot, name.clone());
                }
            }
            crate::ir::Effect::Load { tensors, states, .. } => {
                tensors.iter().for_each(|(name, _, slot)| drop(by_slot.insert(*slot, name.clone())));
                states.iter().for_each(|(name, _, slot, _)| drop(by_slot.insert(*slot, name.clone())));
            }
            _ => {}
        }
    }
    for n in program.graph.node_ids() {
        if let Op::Slot { slot, .. } = &program.graph.node(n).op {
            if let Some(name) = by_slot.get(slot) {
                names.insert(n, name.clone());
            }
        }
    }
    names
}

/// Why `op` has no ONNX form here, or `None` when it has one.
fn unsupported(op: &Op, inputs: &[NodeId], g: &Graph) -> Option<String> {
    let dtype = |i: usize| inputs.get(i).map(|&n| g.node(n).ty.dtype);
    match op {
        Op::MatMul if dtype(0) == Some(DType::Bool) => Some("a matrix product of bools has no ONNX operator".into()),
        Op::Scan(_) => Some("`scan` loops are not exported yet".into()),
        Op::QuantMatMul { .. } => Some("int8 products of quantized models are not exported yet".into()),
        Op::Random { .. } => Some("random numbers drawn on every call have no ONNX form here".into()),
        Op::ScatterAdd { .. }
        | Op::Conv2dGradInput { .. }
        | Op::Conv2dGradFilter { .. }
        | Op::Pool2dGrad { .. }
        | Op::Gradient => Some("gradients are not exported".into()),
        _ => None,
    }
}

/// The NumPy broadcast of `shapes`, if they broadcast.
fn broadcast_shape(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1; rank];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + i];
            match (*o, d) {
                (a, b) if a == b => {}
                (1, b) => *o = b,
                (_, 1) => {}
                _ => return None,
            }
        }
    }
    Some(out)
}

/// ONNX's `TensorProto.DataType` for a dtype.
fn onnx_dtype(d: DType) -> i64 {
    i64::from(super::model::onnx_dtype(d))
}

/// A `ValueInfoProto`: a name and a tensor type whose dimensions are fixed
/// sizes or, with an open size `B`, named by it (`B`, `2*B`).
fn value_info(name: &str, ty: &TensorType, dims: &[Dim], open: Option<&OpenSize>) -> Message {
    let mut shape = Message::new();
    for d in dims {
        let dim = match (d, open) {
            (Dim::Scaled(1), Some(o)) => Message::new().text(2, &o.name),
            (Dim::Scaled(k), Some(o)) => Message::new().text(2, &format!("{k}*{}", o.name)),
            (Dim::Fixed(n), _) | (Dim::Scaled(n), None) => Message::new().int(1, *n as i64),
        };
        shape = shape.message(1, &dim);
    }
    let tensor = Message::new().int(1, onnx_dtype(ty.dtype)).message(2, &shape);
    Message::new().text(1, name).message(2, &Message::new().message(1, &tensor))
}

/// The dimensions of a type traced at both sizes: equal sizes are fixed,
/// the others `k · B` (as `symbolic::compare` checked for every node).
fn scaled_dims(first: &[usize], probe: &[usize]) -> Vec<Dim> {
    first
        .iter()
        .zip(probe)
        .map(|(&a, &b)| if a == b { Dim::Fixed(a) } else { Dim::Scaled(a / crate::ir::plan::EXPORT_SIZE) })
        .collect()
}

/// A `TensorProto` holding `t`'s elements as little-endian raw data.
fn tensor_proto(name: &str, t: &Tensor) -> Message {
    let mut raw = Vec::new();
    match (t.dtype(), t.data()) {
        (DType::F16, Data::F32(a)) => a.iter().for_each(|&v| raw.extend(crate::half::f32_to_f16_bits(v).to_le_bytes())),
        (DType::BF16, Data::F32(a)) => {
            a.iter().for_each(|&v| raw.extend(crate::half::f32_to_bf16_bits(v).to_le_bytes()))
        }
        (_, Data::F32(a)) => a.iter().for_each(|&v| raw.extend(v.to_le_bytes())),
        (_, Data::F64(a)) => a.iter().for_each(|&v| raw.extend(v.to_le_bytes())),
        (_, Data::I32(a)) => a.iter().for_each(|&v| raw.extend(v.to_le_bytes())),
        (_, Data::I64(a)) => a.iter().for_each(|&v| raw.extend(v.to_le_bytes())),
        (_, Data::Bool(a)) => a.iter().for_each(|&v| raw.push(u8::from(v))),
    }
    let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    Message::new().packed_ints(1, &dims).int(2, onnx_dtype(t.dtype())).text(8, name).bytes(9, &raw)
}

/// An ONNX attribute (`AttributeProto`).
enum Attr {
    Int(&'static str, i64),
    Ints(&'static str, Vec<i64>),
}

impl Attr {
    fn proto(&self) -> Message {
        match self {
            Attr::Int(name, v) => Message::new().text(1, name).int(3, *v).int(20, 2),
            Attr::Ints(name, v) => Message::new().text(1, name).packed_ints(8, v).int(20, 7),
        }
    }
}

/// The nodes and initializers being written, and fresh names for the
/// intermediate values and constants the translation adds.
#[derive(Default)]
struct Builder {
    nodes: Vec<Message>,
    initializers: Vec<Message>,
    fresh: usize,
}

impl Builder {
    fn node(&mut self, op: &str, ins: &[&str], out: &str, attrs: Vec<Attr>) {
        self.node_outputs(op, ins, &[out], attrs)
    }

    /// A node with several outputs (`TopK`'s values and indices).
    fn node_outputs(&mut self, op: &str, ins: &[&str], outs: &[&str], attrs: Vec<Attr>) {
        let mut m = Message::new();
        for i in ins {
            m = m.text(1, i);
        }
        for o in outs {
            m = m.text(2, o);
        }
        m = m.text(3, &format!("{op}_{}", self.nodes.len())).text(4, op);
        for a in &attrs {
            m = m.message(5, &a.proto());
        }
        self.nodes.push(m);
    }

    fn temp(&mut self) -> String {
        self.fresh += 1;
        format!("tmp{}", self.fresh)
    }

    /// An `int64` constant of rank 1 (shapes, axes, pads), or of rank 0
    /// when `scalar`.
    fn ints(&mut self, values: &[i64], scalar: bool) -> String {
        let name = self.temp();
        let shape = if scalar { vec![] } else { vec![values.len()] };
        let t = Tensor::from_vec(DType::I64, &shape, values.to_vec()).expect("the shape fits the values");
        self.initializers.push(tensor_proto(&name, &t));
        name
    }

    /// A shape operand (`Reshape`, `Expand`): `fixed`, or with dimensions
    /// that scale with an open size, computed from it at run time — as
    /// `-1` when `infer` allows it and one dimension scales (a reshape
    /// infers it), else as `shape(param)[axis] · k` joined with the fixed
    /// sizes.
    fn shape(&mut self, fixed: &[usize], open: Option<(&OpenSize, &Vec<Dim>)>, infer: bool) -> String {
        let Some((open, dims)) = open else {
            return self.ints(&fixed.iter().map(|&d| d as i64).collect::<Vec<_>>(), false);
        };
        let scaled = dims.iter().filter(|d| matches!(d, Dim::Scaled(_))).count();
        if infer && scaled == 1 {
            let v: Vec<i64> = dims.iter().map(|d| if let Dim::Fixed(n) = d { *n as i64 } else { -1 }).collect();
            return self.ints(&v, false);
        }
        let (param, axis) = &open.source;
        let whole = self.step("Shape", &[param], vec![]);
        let at = self.ints(&[*axis as i64], false);
        let size = self.step("Gather", &[&whole, &at], vec![Attr::Int("axis", 0)]);
        let pieces: Vec<String> = dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => self.ints(&[*n as i64], false),
                Dim::Scaled(1) => size.clone(),
                Dim::Scaled(k) => {
                    let k = self.ints(&[*k as i64], false);
                    self.step("Mul", &[&size, &k], vec![])
                }
            })
            .collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        self.step("Concat", &refs, vec![Attr::Int("axis", 0)])
    }

    /// A scalar of `dtype`.
    fn scalar(&mut self, v: f64, dtype: DType) -> Result<String, Diagnostic> {
        let name = self.temp();
        let lit = match dtype {
            DType::I32 | DType::I64 => crate::ir::Literal::Int(vec![v as i64]),
            DType::Bool => crate::ir::Literal::Bool(vec![v != 0.0]),
            _ => crate::ir::Literal::Float(vec![dtype.round(v)]),
        };
        let t = Tensor::from_literal(&lit, &TensorType::scalar(dtype))?;
        self.initializers.push(tensor_proto(&name, &t));
        Ok(name)
    }

    /// `op` on `ins` into a fresh intermediate name.
    fn step(&mut self, op: &str, ins: &[&str], attrs: Vec<Attr>) -> String {
        let out = self.temp();
        self.node(op, ins, &out, attrs);
        out
    }
}

/// Writes the ONNX operators computing node `n` from `ins` into `out`.
fn emit(
    g: &Graph,
    n: NodeId,
    ins: &[String],
    out: &str,
    b: &mut Builder,
    open: Option<&OpenSize>,
) -> Result<(), Diagnostic> {
    let node = g.node(n);
    let ty = &node.ty;
    let i: Vec<&str> = ins.iter().map(String::as_str).collect();
    let in_dtype = g.inputs(n).first().map(|&x| g.node(x).ty.dtype);
    let to_ints = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<i64>>();
    match &node.op {
        Op::Unary(u) => {
            let simple = match u {
                UnaryOp::Neg => "Neg",
                UnaryOp::Abs => "Abs",
                UnaryOp::Exp => "Exp",
                UnaryOp::Log => "Log",
                UnaryOp::Sqrt => "Sqrt",
                UnaryOp::Tanh => "Tanh",
                UnaryOp::Sigmoid => "Sigmoid",
                UnaryOp::Relu => "Relu",
                UnaryOp::Sin => "Sin",
                UnaryOp::Cos => "Cos",
                UnaryOp::Floor => "Floor",
                UnaryOp::Sign => "Sign",
                UnaryOp::Ceil => "Ceil",
                UnaryOp::Round => "Round",
                UnaryOp::Erf => "Erf",
                UnaryOp::Not => "Not",
                UnaryOp::Rsqrt => {
                    let s = b.step("Sqrt", &i, vec![]);
                    b.node("Reciprocal", &[&s], out, vec![]);
                    return Ok(());
                }
                UnaryOp::Log1p => {
                    let one = b.scalar(1.0, ty.dtype)?;
                    let s = b.step("Add", &[i[0], &one], vec![]);
                    b.node("Log", &[&s], out, vec![]);
                    return Ok(());
                }
                UnaryOp::Expm1 => {
                    let one = b.scalar(1.0, ty.dtype)?;
                    let e = b.step("Exp", &i, vec![]);
                    b.node("Sub", &[&e, &one], out, vec![]);
                    return Ok(());
                }
            };
            b.node(simple, &i, out, vec![]);
        }
        Op::Binary(op) => {
            let simple = match op {
                BinaryOp::Div if matches!(in_dtype, Some(DType::I32 | DType::I64)) => {
                    // Floor division: ONNX's `Div` truncates, so subtract one
                    // where the remainder is not zero and the signs differ.
                    let q = b.step("Div", &i, vec![]);
                    let r = b.step("Mod", &i, vec![Attr::Int("fmod", 1)]);
                    let zero = b.scalar(0.0, ty.dtype)?;
                    let exact = b.step("Equal", &[&r, &zero], vec![]);
                    let inexact = b.step("Not", &[&exact], vec![]);
                    let (na, nb) = (b.step("Less", &[i[0], &zero], vec![]), b.step("Less", &[i[1], &zero], vec![]));
                    let signs = b.step("Xor", &[&na, &nb], vec![]);
                    let fix = b.step("And", &[&inexact, &signs], vec![]);
                    let one = b.step("Cast", &[&fix], vec![Attr::Int("to", onnx_dtype(ty.dtype))]);
                    b.node("Sub", &[&q, &one], out, vec![]);
                    return Ok(());
                }
                BinaryOp::Add => "Add",
                BinaryOp::Sub => "Sub",
                BinaryOp::Mul => "Mul",
                BinaryOp::Div => "Div",
                BinaryOp::Pow => "Pow",
                BinaryOp::Maximum => "Max",
                BinaryOp::Minimum => "Min",
                BinaryOp::Eq => "Equal",
                BinaryOp::Lt => "Less",
                BinaryOp::Le => "LessOrEqual",
                BinaryOp::Gt => "Greater",
                BinaryOp::Ge => "GreaterOrEqual",
                BinaryOp::And => "And",
                BinaryOp::Or => "Or",
                BinaryOp::Ne => {
                    let e = b.step("Equal", &i, vec![]);
                    b.node("Not", &[&e], out, vec![]);
                    return Ok(());
                }
                BinaryOp::Mod if matches!(in_dtype, Some(DType::I32 | DType::I64)) => {
                    b.node("Mod", &i, out, vec![Attr::Int("fmod", 0)]);
                    return Ok(());
                }
                BinaryOp::Mod => {
                    // Floored: the sign of the divisor, as Python's `%`.
                    let q = b.step("Div", &i, vec![]);
                    let f = b.step("Floor", &[&q], vec![]);
                    let m = b.step("Mul", &[&f, i[1]], vec![]);
                    b.node("Sub", &[i[0], &m], out, vec![]);
                    return Ok(());
                }
            };
            // Max and Min broadcast like the others since opset 8.
            b.node(simple, &i, out, vec![]);
        }
        Op::Select => b.node("Where", &i, out, vec![]),
        Op::Cast(to) => b.node("Cast", &i, out, vec![Attr::Int("to", onnx_dtype(*to))]),
        Op::Reduce { op, axes, keepdims } => {
            let keep = Attr::Int("keepdims", i64::from(*keepdims));
            let axes = to_ints(axes);
            match op {
                ReduceOp::Sum => {
                    let a = b.ints(&axes, false);
                    b.node("ReduceSum", &[i[0], &a], out, vec![keep]);
                }
                ReduceOp::Mean => b.node("ReduceMean", &i, out, vec![Attr::Ints("axes", axes), keep]),
                ReduceOp::Max => b.node("ReduceMax", &i, out, vec![Attr::Ints("axes", axes), keep]),
                ReduceOp::Min => b.node("ReduceMin", &i, out, vec![Attr::Ints("axes", axes), keep]),
                ReduceOp::Prod => b.node("ReduceProd", &i, out, vec![Attr::Ints("axes", axes), keep]),
            }
        }
        Op::ArgMax { axis, keepdims } => {
            let attrs = vec![Attr::Int("axis", *axis as i64), Attr::Int("keepdims", i64::from(*keepdims))];
            let a = b.step("ArgMax", &i, attrs);
            b.node("Cast", &[&a], out, vec![Attr::Int("to", onnx_dtype(ty.dtype))]);
        }
        Op::CumSum { axis, reverse } => {
            let a = b.ints(&[*axis as i64], true);
            b.node("CumSum", &[i[0], &a], out, vec![Attr::Int("reverse", i64::from(*reverse))]);
        }
        Op::Reshape { shape } => {
            let s = b.shape(shape, open.and_then(|o| Some((o, o.scaling.get(&n)?))), true);
            b.node("Reshape", &[i[0], &s], out, vec![]);
        }
        Op::BroadcastTo { shape } => {
            let s = b.shape(shape, open.and_then(|o| Some((o, o.scaling.get(&n)?))), false);
            b.node("Expand", &[i[0], &s], out, vec![]);
        }
        Op::Transpose { perm } => b.node("Transpose", &i, out, vec![Attr::Ints("perm", to_ints(perm))]),
        Op::Concat { axis } => b.node("Concat", &i, out, vec![Attr::Int("axis", *axis as i64)]),
        Op::Slice { start, step, len } => {
            let dims = &g.node(g.inputs(n)[0]).ty.shape;
            let (mut starts, mut ends, mut axes, mut steps) = (vec![], vec![], vec![], vec![]);
            for d in 0..dims.len() {
                if start[d] == 0 && step[d] == 1 && len[d] == dims[d] {
                    continue;
                }
                let end = start[d] as i64 + len[d] as i64 * step[d];
                starts.push(start[d] as i64);
                // A negative end would count from the back: past the front
                // of a backward slice is written as the lowest int.
                ends.push(if end < 0 { i64::MIN } else { end });
                axes.push(d as i64);
                steps.push(step[d]);
            }
            if axes.is_empty() {
                b.node("Identity", &i, out, vec![]);
            } else {
                let parts = [b.ints(&starts, false), b.ints(&ends, false), b.ints(&axes, false), b.ints(&steps, false)];
                b.node("Slice", &[i[0], &parts[0], &parts[1], &parts[2], &parts[3]], out, vec![]);
            }
        }
        Op::Pad { low, high, value } => {
            let pads: Vec<i64> = low.iter().chain(high).map(|&p| p as i64).collect();
            let p = b.ints(&pads, false);
            let v = b.scalar(*value, ty.dtype)?;
            b.node("Pad", &[i[0], &p, &v], out, vec![]);
        }
        Op::MatMul => b.node("MatMul", &i, out, vec![]),
        Op::Conv2d { stride, padding, dilation, groups } => {
            let w_shape = &g.node(g.inputs(n)[1]).ty.shape;
            let x = b.step("Transpose", &[i[0]], vec![Attr::Ints("perm", vec![0, 3, 1, 2])]);
            let w = b.step("Transpose", &[i[1]], vec![Attr::Ints("perm", vec![3, 2, 0, 1])]);
            let [top, bottom, left, right] = padding.map(|p| p as i64);
            let attrs = vec![
                Attr::Ints("kernel_shape", to_ints(&w_shape[..2])),
                Attr::Ints("strides", to_ints(stride)),
                Attr::Ints("pads", vec![top, left, bottom, right]),
                Attr::Ints("dilations", to_ints(dilation)),
                Attr::Int("group", *groups as i64),
            ];
            let y = b.step("Conv", &[&x, &w], attrs);
            b.node("Transpose", &[&y], out, vec![Attr::Ints("perm", vec![0, 2, 3, 1])]);
        }
        Op::Pool2d { kind, size, stride, padding } => {
            let x = b.step("Transpose", &[i[0]], vec![Attr::Ints("perm", vec![0, 3, 1, 2])]);
            let [top, bottom, left, right] = padding.map(|p| p as i64);
            let mut attrs = vec![
                Attr::Ints("kernel_shape", to_ints(size)),
                Attr::Ints("strides", to_ints(stride)),
                Attr::Ints("pads", vec![top, left, bottom, right]),
            ];
            let op = match kind {
                PoolKind::Max => "MaxPool",
                PoolKind::Avg => {
                    attrs.push(Attr::Int("count_include_pad", 0));
                    "AveragePool"
                }
            };
            let y = b.step(op, &[&x], attrs);
            b.node("Transpose", &[&y], out, vec![Attr::Ints("perm", vec![0, 2, 3, 1])]);
        }
        Op::OneHot { depth, dtype } => {
            // `indices[..., None] == arange(depth)`: ONNX's own OneHot has
            // kernels in ONNX Runtime for only some index and value types.
            let index_dtype = in_dtype.unwrap_or(DType::I32);
            let classes = b.temp();
            let range: Vec<i64> = (0..*depth as i64).collect();
            let t = Tensor::from_literal(&crate::ir::Literal::Int(range), &TensorType::new(index_dtype, vec![*depth]))?;
            b.initializers.push(tensor_proto(&classes, &t));
            let axis = b.ints(&[-1], false);
            let u = b.step("Unsqueeze", &[i[0], &axis], vec![]);
            if *dtype == DType::Bool {
                b.node("Equal", &[&u, &classes], out, vec![]);
            } else {
                let e = b.step("Equal", &[&u, &classes], vec![]);
                b.node("Cast", &[&e], out, vec![Attr::Int("to", onnx_dtype(*dtype))]);
            }
        }
        Op::Gather { axis } => b.node("Gather", &i, out, vec![Attr::Int("axis", *axis as i64)]),
        Op::ArgSort { axis, descending } => {
            // TopK over the whole axis, sorted; on ties it takes the lower
            // index first, which is tfc's stable order both ways.
            let k = b.ints(&[g.node(g.inputs(n)[0]).ty.shape[*axis] as i64], false);
            let (values, indices) = (b.temp(), b.temp());
            let attrs = vec![
                Attr::Int("axis", *axis as i64),
                Attr::Int("largest", i64::from(*descending)),
                Attr::Int("sorted", 1),
            ];
            b.node_outputs("TopK", &[i[0], &k], &[&values, &indices], attrs);
            b.node("Cast", &[&indices], out, vec![Attr::Int("to", onnx_dtype(ty.dtype))]);
        }
        Op::StopGradient => b.node("Identity", &i, out, vec![]),
        other => {
            return Err(Diagnostic::new(Code::OnnxExport, format!("`{}` has no ONNX form here", other.name()))
                .label(node.span, "this op"))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::broadcast_shape;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shape(&[&[2, 3], &[3]]), Some(vec![2, 3]));
        assert_eq!(broadcast_shape(&[&[2, 1], &[1, 3]]), Some(vec![2, 3]));
        assert_eq!(broadcast_shape(&[&[2, 3], &[]]), Some(vec![2, 3]));
        assert_eq!(broadcast_shape(&[&[2, 3], &[2]]), None);
    }
}
