//! Importing an ONNX model: its signature (inputs with their declared
//! types, initializers, outputs) and the translation of its graph, node by
//! node, into nodes of a tfc IR graph — what `load_onnx` calls and the
//! node-suite test runs.
//!
//! Contract: [`check_opsets`] accepts ONNX's default operator set from
//! opset 7 through [`MAX_OPSET`] (what onnx 1.23 writes); [`signature`]
//! converts every initializer and refuses inputs that are not tensors of a
//! tfc dtype; [`import`] translates every node (in file order, which ONNX
//! requires to be topological) with the values bound to the graph's inputs
//! and initializers, and returns the graph's outputs. Anything it cannot
//! translate is `E0343` naming the node (`node 3 (`conv1`, Conv)`) and
//! what is missing; it never panics. Initializers that some node needs
//! while checking (a `Reshape`'s shape: [`read_while_checking`]) must be
//! bound with their values known; float initializers read only as data
//! are a model's parameters ([`is_parameter`]).
//!
//! Example: for a model `y = Relu(MatMul(x, w))`, binding `x` to a slot
//! `f32[4, 3]` and `w` to a parameter `f32[3, 2]` adds `matmul` and `relu`
//! nodes and returns the `relu` as the output `y`.

mod conv;
mod create;
mod ctx;
mod elementwise;
mod index;
mod nn;
mod reduce;
mod shape;

pub use ctx::Val;

use super::model::{dtype_of, Dim, Model};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::{DType, Graph};
use crate::tensor::Tensor;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// The newest opset of ONNX's default domain that tfc imports (onnx 1.23).
pub const MAX_OPSET: i64 = 28;
/// The oldest: opset 7 made broadcasting NumPy's, which the importer assumes.
pub const MIN_OPSET: i64 = 7;

/// A graph input the caller binds (one without an initializer).
#[derive(Clone, Debug)]
pub struct Input {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<Dim>,
}

/// What a model takes and gives.
pub struct Signature {
    pub inputs: Vec<Input>,
    /// Every initializer, converted, in file order.
    pub initializers: Vec<(String, Tensor)>,
    pub outputs: Vec<String>,
}

/// The operators tfc imports, sorted.
pub fn supported_ops() -> Vec<&'static str> {
    let mut ops: Vec<&str> = FAMILIES.iter().flat_map(|(ops, _)| ops.iter().copied()).collect();
    ops.sort_unstable();
    ops
}

type Family = fn(&mut ctx::Ctx, &super::model::Node, &[Option<Val>]) -> Result<Vec<Val>, Diagnostic>;

const FAMILIES: &[(&[&str], Family)] = &[
    (elementwise::OPS, elementwise::import),
    (elementwise::FLOAT_OPS, elementwise::import),
    (reduce::OPS, reduce::import),
    (shape::OPS, shape::import),
    (index::OPS, index::import),
    (create::OPS, create::import),
    (nn::OPS, nn::import),
    (conv::OPS, conv::import),
];

fn unsupported(span: Span, message: String) -> Diagnostic {
    Diagnostic::new(Code::OnnxUnsupported, message).label(span, "in the ONNX model loaded here")
}

/// The opset of ONNX's default domain the model imports, checked.
pub fn check_opsets(model: &Model, span: Span) -> Result<i64, Diagnostic> {
    let default = model.opsets.iter().filter(|(d, _)| d.is_empty() || d == "ai.onnx").map(|(_, v)| *v).max();
    match default {
        Some(v) if (MIN_OPSET..=MAX_OPSET).contains(&v) => Ok(v),
        Some(v) => Err(unsupported(
            span,
            format!("the model uses ONNX opset {v}; tfc imports opsets {MIN_OPSET} to {MAX_OPSET}"),
        )),
        None => Err(unsupported(span, "the model imports no opset of ONNX's default domain".into())),
    }
}

/// The model's inputs, initializers and outputs.
pub fn signature(model: &Model, span: Span) -> Result<Signature, Diagnostic> {
    let g = &model.graph;
    if g.sparse_initializers > 0 {
        return Err(unsupported(span, "the model has sparse initializers".into()));
    }
    let mut initializers = Vec::with_capacity(g.initializers.len());
    for t in &g.initializers {
        let value =
            t.to_tensor().map_err(|e| unsupported(span, format!("cannot import initializer `{}`: {e}", t.name)))?;
        initializers.push((t.name.clone(), value));
    }
    let initialized: HashSet<&str> = g.initializers.iter().map(|t| t.name.as_str()).collect();
    let mut inputs = Vec::new();
    for info in g.inputs.iter().filter(|i| !initialized.contains(i.name.as_str())) {
        if let Some(kind) = info.non_tensor {
            return Err(unsupported(span, format!("input `{}` is {kind}, not a tensor", info.name)));
        }
        let elem = info.elem_type.ok_or_else(|| unsupported(span, format!("input `{}` has no type", info.name)))?;
        let dtype = dtype_of(elem).map_err(|e| unsupported(span, format!("input `{}`: {e}", info.name)))?;
        let dims =
            info.shape.clone().ok_or_else(|| unsupported(span, format!("input `{}` has no shape", info.name)))?;
        inputs.push(Input { name: info.name.clone(), dtype, dims });
    }
    if let Some(o) = g.outputs.iter().find(|o| o.non_tensor.is_some()) {
        let kind = o.non_tensor.unwrap_or_default();
        return Err(unsupported(span, format!("output `{}` is {kind}, not a tensor", o.name)));
    }
    let outputs = g.outputs.iter().map(|o| o.name.clone()).collect();
    Ok(Signature { inputs, initializers, outputs })
}

/// Whether input `i` of an `op` node must be known while checking (a
/// shape, axes, sizes, bounds): tfc's IR has them as attributes.
fn needs_known(op: &str, i: usize) -> bool {
    match op {
        "Reshape" | "Expand" | "Tile" | "Squeeze" | "Unsqueeze" | "TopK" | "CumSum" | "Split" | "OneHot" | "Trilu" => {
            i == 1
        }
        "Dropout" => i >= 1,
        "Slice" | "Pad" => i >= 1,
        "ConstantOfShape" => i == 0,
        "Range" => true,
        op if op.starts_with("Reduce") => i == 1,
        _ => false,
    }
}

/// The names of the values some node needs while checking.
pub fn read_while_checking(model: &Model) -> HashSet<String> {
    let mut out = HashSet::default();
    for n in &model.graph.nodes {
        for (i, name) in n.inputs.iter().enumerate() {
            if !name.is_empty() && needs_known(&n.op_type, i) {
                out.insert(name.clone());
            }
        }
    }
    out
}

/// Whether an initializer is a trainable parameter: a float tensor that no
/// node needs while checking.
pub fn is_parameter(name: &str, value: &Tensor, read: &HashSet<String>) -> bool {
    value.dtype().is_float() && !read.contains(name)
}

/// Translates the model's nodes into `g`, with `bound` holding a value for
/// every graph input and initializer; returns the graph's outputs.
pub fn import(model: &Model, g: &mut Graph, bound: &HashMap<String, Val>, span: Span) -> Result<Vec<Val>, Diagnostic> {
    let opset = check_opsets(model, span)?;
    let mut vals: HashMap<String, Val> = bound.clone();
    let mut cx = ctx::Ctx { g, span, opset, label: String::new() };
    for (i, n) in model.graph.nodes.iter().enumerate() {
        crate::interrupt::check()?;
        cx.label = if n.name.is_empty() {
            format!("node {i} ({})", n.op_type)
        } else {
            format!("node {i} (`{}`, {})", n.name, n.op_type)
        };
        if !(n.domain.is_empty() || n.domain == "ai.onnx") {
            return Err(cx.unsupported(format!("operator `{}` of domain `{}` (only ONNX's own)", n.op_type, n.domain)));
        }
        let mut ins = Vec::with_capacity(n.inputs.len());
        for name in &n.inputs {
            if name.is_empty() {
                ins.push(None);
                continue;
            }
            let v = vals.get(name).ok_or_else(|| {
                Diagnostic::new(
                    Code::OnnxParse,
                    format!("ONNX {} reads `{name}`, which no earlier node, input or initializer defines", cx.label),
                )
                .label(span, "in the ONNX model loaded here")
            })?;
            ins.push(Some(v.clone()));
        }
        let family = FAMILIES.iter().find(|(ops, _)| ops.contains(&n.op_type.as_str()));
        let Some((_, translate)) = family else {
            return Err(cx.unsupported(format!("operator `{}` is not supported", n.op_type)));
        };
        let outs = translate(&mut cx, n, &ins)?;
        for (k, name) in n.outputs.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let v = outs.get(k).ok_or_else(|| cx.unsupported(format!("output {k} of {}", n.op_type)))?;
            vals.insert(name.clone(), v.clone());
        }
    }
    model
        .graph
        .outputs
        .iter()
        .map(|o| {
            vals.get(&o.name).cloned().ok_or_else(|| {
                Diagnostic::new(Code::OnnxParse, format!("the graph's output `{}` is never computed", o.name))
                    .label(span, "in the ONNX model loaded here")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::onnx::model::{AttrValue, Attribute, Node, TensorProto, ValueInfo};
    use crate::ir::{Op, TensorType};

    /// A model of one node `op(x, c)` over input `x: f32[2, 3]` and an
    /// int64 initializer `c`, with attributes.
    fn model(op: &str, c: Vec<i64>, attributes: Vec<Attribute>) -> Model {
        let c = TensorProto {
            name: "c".into(),
            dims: vec![c.len() as i64],
            data_type: 7,
            int64_data: c,
            ..Default::default()
        };
        let node = Node {
            op_type: op.into(),
            inputs: vec!["x".into(), "c".into()],
            outputs: vec!["y".into()],
            attributes,
            ..Default::default()
        };
        let x = ValueInfo {
            name: "x".into(),
            elem_type: Some(1),
            shape: Some(vec![Dim::Fixed(2), Dim::Fixed(3)]),
            non_tensor: None,
        };
        let y = ValueInfo { name: "y".into(), ..Default::default() };
        let graph = crate::io::onnx::model::Graph {
            nodes: vec![node],
            initializers: vec![c],
            inputs: vec![x],
            outputs: vec![y],
            ..Default::default()
        };
        Model { ir_version: 8, opsets: vec![(String::new(), 17)], producer: String::new(), graph }
    }

    fn run(m: &Model) -> Result<Vec<Val>, Diagnostic> {
        let span = Span::default();
        let sig = signature(m, span)?;
        let mut g = Graph::new();
        let mut bound = HashMap::default();
        let ty = TensorType::new(DType::F32, vec![2, 3]);
        let x = g.add(Op::Slot { slot: 0, ty: ty.clone() }, &[], ty.clone(), span);
        bound.insert("x".to_string(), Val { id: x, ty, known: None });
        for (name, t) in sig.initializers {
            let ty = t.ty();
            let id = g.add(Op::Constant { value: t.to_literal(), ty: ty.clone() }, &[], ty.clone(), span);
            bound.insert(name, Val { id, ty, known: Some(std::rc::Rc::new(t)) });
        }
        import(m, &mut g, &bound, span)
    }

    #[test]
    fn shapes_from_the_file_are_checked_before_anything_is_built() {
        let ok = run(&model("Expand", vec![4, 2, 3], vec![])).unwrap();
        assert_eq!(ok[0].shape(), [4, 2, 3]);
        let huge = run(&model("Expand", vec![1 << 40, 1 << 40, 2, 3], vec![])).unwrap_err();
        assert_eq!(huge.code, Code::Reshape, "{}", huge.message);
        let big = run(&model("Expand", vec![1 << 30, 1 << 30, 2, 3], vec![])).unwrap_err();
        assert_eq!(big.code, Code::TooLarge, "{}", big.message);
        let tile = run(&model("Tile", vec![1 << 33, 1 << 33], vec![])).unwrap_err();
        assert_eq!(tile.code, Code::TooLarge, "{}", tile.message);
        let pad = run(&model("Pad", vec![0, i64::MIN, 0, 0], vec![])).unwrap_err();
        assert_eq!(pad.code, Code::TooLarge, "{}", pad.message);
        let reshape = run(&model("Reshape", vec![-1, i64::MAX], vec![])).unwrap_err();
        assert_eq!(reshape.code, Code::Reshape, "{}", reshape.message);
    }

    #[test]
    fn unsupported_operators_and_attributes_name_the_node() {
        let d = run(&model("NonMaxSuppression", vec![1], vec![])).unwrap_err();
        assert_eq!(d.code, Code::OnnxUnsupported);
        assert!(d.message.contains("node 0 (NonMaxSuppression)"), "{}", d.message);
        let reflect = Attribute { name: "mode".into(), value: AttrValue::String(b"reflect".to_vec()) };
        let d = run(&model("Pad", vec![0, 1, 0, 1], vec![reflect])).unwrap_err();
        assert!(d.message.contains("mode \"reflect\""), "{}", d.message);
        let mut old = model("Relu", vec![1], vec![]);
        old.opsets = vec![(String::new(), 6)];
        assert!(run(&old).unwrap_err().message.contains("opset 6"));
    }
}
