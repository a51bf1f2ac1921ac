//! Decoding an ONNX model file (`ModelProto`) from untrusted bytes into
//! [`Model`]: the graph, its nodes and attributes, initializers (raw or
//! typed data), inputs and outputs with their declared types, and the
//! operator sets imported.
//!
//! Contract: [`decode_model`] and [`decode_tensor`] never panic; bytes that
//! are not a well-formed message are `E0342` naming what is wrong and
//! where (`graph.node[3].attribute[1]: …`). Graphs nest (an `If`'s
//! branches are attributes) at most [`MAX_DEPTH`] deep. Every allocation
//! is bounded by the bytes actually present (`io::proto_reader`). Unknown
//! fields are skipped, as protobuf readers do.
//!
//! Example: `decode_model(&std::fs::read("mlp.onnx")?)` gives a `Model`
//! whose `graph.nodes[0].op_type` is `"MatMul"` for an MLP tfc exported.

use super::model::{AttrValue, Attribute, Dim, Graph, Model, Node, TensorProto, ValueInfo};
use crate::diag::{Code, Diagnostic};
use crate::io::proto_reader::{fixed32s, fixed64s, varints, Fields, Value, WireError};

/// How deeply graphs may nest inside attributes.
pub const MAX_DEPTH: usize = 16;

/// Why decoding failed: a message and the path to the part that failed.
struct Failure {
    path: Vec<String>,
    message: String,
}

type R<T> = Result<T, Failure>;

fn fail<T>(message: impl Into<String>) -> R<T> {
    Err(Failure { path: Vec::new(), message: message.into() })
}

impl From<WireError> for Failure {
    fn from(e: WireError) -> Failure {
        Failure { path: Vec::new(), message: e.to_string() }
    }
}

/// Adds `part` to the path of a failure from inside it.
fn within<T>(part: impl FnOnce() -> String, r: R<T>) -> R<T> {
    r.map_err(|mut f| {
        f.path.insert(0, part());
        f
    })
}

fn into_diagnostic(what: &str, f: Failure) -> Diagnostic {
    let at = if f.path.is_empty() { String::new() } else { format!(" (in {})", f.path.join(".")) };
    Diagnostic::new(Code::OnnxParse, format!("{what} does not parse as ONNX: {}{at}", f.message))
}

/// Decodes a model file's bytes.
pub fn decode_model(bytes: &[u8]) -> Result<Model, Diagnostic> {
    model(bytes).map_err(|f| into_diagnostic("the model", f))
}

/// Decodes a lone `TensorProto` (a test data set's `input_0.pb`).
pub fn decode_tensor(bytes: &[u8]) -> Result<TensorProto, Diagnostic> {
    tensor(bytes).map_err(|f| into_diagnostic("the tensor", f))
}

fn model(bytes: &[u8]) -> R<Model> {
    let mut m = Model::default();
    let mut graph = None;
    for field in Fields::new(bytes) {
        match field? {
            (1, Value::Varint(v)) => m.ir_version = v as i64,
            (2, v) => m.producer = text(v)?,
            (7, v) => graph = Some(within(|| "graph".into(), self::graph(bytes_of(v)?, 0))?),
            (8, v) => {
                let i = m.opsets.len();
                m.opsets.push(within(|| format!("opset_import[{i}]"), opset(bytes_of(v)?))?);
            }
            (1, _) => return fail("`ir_version` is not a varint"),
            _ => {}
        }
    }
    m.graph = match graph {
        Some(g) => g,
        None => return fail("the model has no graph"),
    };
    Ok(m)
}

fn opset(bytes: &[u8]) -> R<(String, i64)> {
    let (mut domain, mut version) = (String::new(), 0);
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => domain = text(v)?,
            (2, Value::Varint(v)) => version = v as i64,
            (2, _) => return fail("`version` is not a varint"),
            _ => {}
        }
    }
    Ok((domain, version))
}

fn graph(bytes: &[u8], depth: usize) -> R<Graph> {
    if depth >= MAX_DEPTH {
        return fail(format!("graphs nest more than {MAX_DEPTH} deep"));
    }
    let mut g = Graph::default();
    for field in Fields::new(bytes) {
        let (number, v) = field?;
        match number {
            1 => {
                let i = g.nodes.len();
                g.nodes.push(within(|| format!("node[{i}]"), node(bytes_of(v)?, depth))?);
            }
            2 => g.name = text(v)?,
            5 => {
                let i = g.initializers.len();
                g.initializers.push(within(|| format!("initializer[{i}]"), tensor(bytes_of(v)?))?);
            }
            11 => {
                let i = g.inputs.len();
                g.inputs.push(within(|| format!("input[{i}]"), value_info(bytes_of(v)?))?);
            }
            12 => {
                let i = g.outputs.len();
                g.outputs.push(within(|| format!("output[{i}]"), value_info(bytes_of(v)?))?);
            }
            15 => g.sparse_initializers += 1,
            _ => {}
        }
    }
    Ok(g)
}

fn node(bytes: &[u8], depth: usize) -> R<Node> {
    let mut n = Node::default();
    for field in Fields::new(bytes) {
        let (number, v) = field?;
        match number {
            1 => n.inputs.push(text(v)?),
            2 => n.outputs.push(text(v)?),
            3 => n.name = text(v)?,
            4 => n.op_type = text(v)?,
            5 => {
                let i = n.attributes.len();
                n.attributes.push(within(|| format!("attribute[{i}]"), attribute(bytes_of(v)?, depth))?);
            }
            7 => n.domain = text(v)?,
            _ => {}
        }
    }
    Ok(n)
}

fn attribute(bytes: &[u8], depth: usize) -> R<Attribute> {
    let mut name = String::new();
    let mut declared: Option<u64> = None;
    let (mut f, mut i, mut s, mut t, mut g) = (None, None, None, None, None);
    let (mut floats, mut ints, mut strings) = (Vec::new(), Vec::new(), Vec::new());
    let mut other: Option<&'static str> = None;
    for field in Fields::new(bytes) {
        let (number, v) = field?;
        match number {
            1 => name = text(v)?,
            2 => match v {
                Value::Fixed32(bits) => f = Some(f32::from_bits(bits)),
                _ => return fail("`f` is not a float"),
            },
            3 => match v {
                Value::Varint(x) => i = Some(x as i64),
                _ => return fail("`i` is not a varint"),
            },
            4 => s = Some(bytes_of(v)?.to_vec()),
            5 => t = Some(within(|| "t".into(), tensor(bytes_of(v)?))?),
            6 => g = Some(Box::new(within(|| "g".into(), graph(bytes_of(v)?, depth + 1))?)),
            7 => {
                let mut bits = Vec::new();
                fixed32s(v, &mut bits)?;
                floats.extend(bits.into_iter().map(f32::from_bits));
            }
            8 => {
                let mut raw = Vec::new();
                varints(v, &mut raw)?;
                ints.extend(raw.into_iter().map(|x| x as i64));
            }
            9 => strings.push(bytes_of(v)?.to_vec()),
            10 => other = Some("TENSORS"),
            11 => other = Some("GRAPHS"),
            14 => other = Some("TYPE_PROTO"),
            15 => other = Some("TYPE_PROTOS"),
            22 => other = Some("SPARSE_TENSOR"),
            23 => other = Some("SPARSE_TENSORS"),
            20 => match v {
                Value::Varint(x) => declared = Some(x),
                _ => return fail("`type` is not a varint"),
            },
            _ => {}
        }
    }
    // The declared type decides; files from before it existed say it by
    // the field they set.
    let value = match declared {
        Some(1) => f.map(AttrValue::Float),
        Some(2) => i.map(AttrValue::Int),
        Some(3) => s.map(AttrValue::String),
        Some(4) => t.map(AttrValue::Tensor),
        Some(5) => g.map(AttrValue::Graph),
        Some(6) => Some(AttrValue::Floats(floats)),
        Some(7) => Some(AttrValue::Ints(ints)),
        Some(8) => Some(AttrValue::Strings(strings)),
        Some(9..=14) => Some(AttrValue::Other(other.unwrap_or("TENSORS"))),
        Some(other) => return within(|| format!("`{name}`"), fail(format!("unknown attribute type {other}"))),
        None => f
            .map(AttrValue::Float)
            .or(i.map(AttrValue::Int))
            .or(s.map(AttrValue::String))
            .or(t.map(AttrValue::Tensor))
            .or(g.map(AttrValue::Graph))
            .or((!floats.is_empty()).then_some(AttrValue::Floats(floats)))
            .or((!ints.is_empty()).then_some(AttrValue::Ints(ints)))
            .or((!strings.is_empty()).then_some(AttrValue::Strings(strings)))
            .or(other.map(AttrValue::Other)),
    };
    match value {
        Some(value) => Ok(Attribute { name, value }),
        None => within(|| format!("`{name}`"), fail("the attribute has no value of its declared type")),
    }
}

fn tensor(bytes: &[u8]) -> R<TensorProto> {
    let mut t = TensorProto::default();
    for field in Fields::new(bytes) {
        let (number, v) = field?;
        match number {
            1 => {
                let mut raw = Vec::new();
                varints(v, &mut raw)?;
                t.dims.extend(raw.into_iter().map(|x| x as i64));
            }
            2 => t.data_type = int32(v)?,
            4 => {
                let mut bits = Vec::new();
                fixed32s(v, &mut bits)?;
                t.float_data.extend(bits.into_iter().map(f32::from_bits));
            }
            5 => {
                let mut raw = Vec::new();
                varints(v, &mut raw)?;
                t.int32_data.extend(raw.into_iter().map(|x| x as i64));
            }
            6 => t.string_count += 1,
            7 => {
                let mut raw = Vec::new();
                varints(v, &mut raw)?;
                t.int64_data.extend(raw.into_iter().map(|x| x as i64));
            }
            8 => t.name = text(v)?,
            9 => t.raw_data = Some(bytes_of(v)?.to_vec()),
            10 => {
                let mut bits = Vec::new();
                fixed64s(v, &mut bits)?;
                t.double_data.extend(bits.into_iter().map(f64::from_bits));
            }
            11 => varints(v, &mut t.uint64_data)?,
            14 => t.external = int32(v)? == 1,
            _ => {}
        }
    }
    Ok(t)
}

fn value_info(bytes: &[u8]) -> R<ValueInfo> {
    let mut info = ValueInfo::default();
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => info.name = text(v)?,
            (2, v) => within(|| "type".into(), type_proto(bytes_of(v)?, &mut info))?,
            _ => {}
        }
    }
    Ok(info)
}

/// A `TypeProto`: a tensor's element type and shape, or which other kind
/// of value it is.
fn type_proto(bytes: &[u8], info: &mut ValueInfo) -> R<()> {
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => {
                for inner in Fields::new(bytes_of(v)?) {
                    match inner? {
                        (1, v) => info.elem_type = Some(int32(v)?),
                        (2, v) => info.shape = Some(within(|| "shape".into(), shape(bytes_of(v)?))?),
                        _ => {}
                    }
                }
            }
            (4, _) => info.non_tensor = Some("a sequence"),
            (5, _) => info.non_tensor = Some("a map"),
            (8, _) => info.non_tensor = Some("a sparse tensor"),
            (9, _) => info.non_tensor = Some("an optional"),
            _ => {}
        }
    }
    Ok(())
}

fn shape(bytes: &[u8]) -> R<Vec<Dim>> {
    let mut dims = Vec::new();
    for field in Fields::new(bytes) {
        if let (1, v) = field? {
            let mut dim = Dim::Open;
            for inner in Fields::new(bytes_of(v)?) {
                match inner? {
                    (1, Value::Varint(x)) => dim = Dim::Fixed(x as i64),
                    (2, v) => dim = Dim::Named(text(v)?),
                    _ => {}
                }
            }
            dims.push(dim);
        }
    }
    Ok(dims)
}

fn bytes_of(v: Value<'_>) -> R<&[u8]> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => fail("a string, bytes or message field is not length-delimited"),
    }
}

fn text(v: Value<'_>) -> R<String> {
    match std::str::from_utf8(bytes_of(v)?) {
        Ok(s) => Ok(s.to_string()),
        Err(e) => fail(format!("a string is not UTF-8 ({e})")),
    }
}

/// An `int32`/enum field (negative values are sign-extended varints).
fn int32(v: Value<'_>) -> R<i32> {
    match v {
        Value::Varint(x) => match i32::try_from(x as i64) {
            Ok(i) => Ok(i),
            Err(_) => fail(format!("{} does not fit an int32", x as i64)),
        },
        _ => fail("an int32 field is not a varint"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::proto::Message;

    fn small_model() -> Vec<u8> {
        let dim = Message::new().int(1, 2);
        let named = Message::new().text(2, "batch");
        let shape = Message::new().message(1, &named).message(1, &dim);
        let tensor_type = Message::new().int(1, 1).message(2, &shape);
        let ty = Message::new().message(1, &tensor_type);
        let input = Message::new().text(1, "x").message(2, &ty);
        let w = Message::new().packed_ints(1, &[2]).int(2, 1).text(8, "w").bytes(9, &[0, 0, 128, 63, 0, 0, 0, 64]);
        let attr = Message::new().text(1, "alpha").float(2, 0.5).int(20, 1);
        let node = Message::new().text(1, "x").text(1, "w").text(2, "y").text(3, "n0").text(4, "Add").message(5, &attr);
        let out = Message::new().text(1, "y").message(2, &ty);
        let graph = Message::new().message(1, &node).text(2, "g").message(5, &w).message(11, &input).message(12, &out);
        let opset = Message::new().text(1, "").int(2, 17);
        Message::new().int(1, 8).message(7, &graph).message(8, &opset).into_bytes()
    }

    #[test]
    fn decodes_a_small_model() {
        let m = decode_model(&small_model()).unwrap();
        assert_eq!(m.ir_version, 8);
        assert_eq!(m.opsets, [("".to_string(), 17)]);
        let g = &m.graph;
        assert_eq!(g.nodes[0].op_type, "Add");
        assert_eq!(g.nodes[0].inputs, ["x", "w"]);
        assert!(matches!(g.nodes[0].attr("alpha"), Some(AttrValue::Float(v)) if *v == 0.5));
        assert_eq!(g.initializers[0].to_tensor().unwrap().to_f64_vec(), [1.0, 2.0]);
        assert_eq!(g.inputs[0].shape, Some(vec![Dim::Named("batch".into()), Dim::Fixed(2)]));
        assert_eq!(g.inputs[0].elem_type, Some(1));
    }

    #[test]
    fn every_truncation_is_an_error_naming_the_part() {
        let bytes = small_model();
        for n in 0..bytes.len() {
            // Some prefixes are themselves well-formed messages; none panics.
            if let Err(d) = decode_model(&bytes[..n]) {
                assert_eq!(d.code, Code::OnnxParse);
            }
        }
        let d = decode_model(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(d.message.contains("does not parse as ONNX"), "{}", d.message);
    }

    #[test]
    fn graphs_nest_only_so_deep() {
        let mut g = Message::new().text(2, "leaf");
        for _ in 0..MAX_DEPTH + 1 {
            let attr = Message::new().text(1, "then_branch").message(6, &g).int(20, 5);
            let node = Message::new().text(4, "If").message(5, &attr);
            g = Message::new().message(1, &node);
        }
        let m = Message::new().message(7, &g).into_bytes();
        assert!(decode_model(&m).unwrap_err().message.contains("nest more than"));
    }
}
