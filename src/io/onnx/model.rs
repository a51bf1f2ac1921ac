//! An ONNX model as read from a file (read.rs decodes it): the graph's
//! nodes, initializers, inputs and outputs, with the attributes and
//! tensors in the form ONNX's schema gives them, and the conversion of a
//! `TensorProto` to a tfc [`Tensor`].
//!
//! Contract: these are plain data, as permissive as the schema (an
//! attribute of any type, a tensor of any ONNX dtype); what tfc can import
//! is decided by the importer (import/), which names what it refuses.
//! [`TensorProto::to_tensor`] checks the element count against the data
//! present before it allocates, so a tensor claiming billions of elements
//! costs nothing.
//!
//! Example: a `TensorProto` with `dims = [2]`, `data_type = 1` (FLOAT) and
//! `float_data = [1, 2]` becomes the tensor `f32[2]` `[1, 2]`.

use crate::ir::DType;
use crate::tensor::Tensor;

/// A decoded `ModelProto`.
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub ir_version: i64,
    /// The operator sets it imports: (domain, version); `""` is ONNX's own.
    pub opsets: Vec<(String, i64)>,
    pub producer: String,
    pub graph: Graph,
}

/// A decoded `GraphProto`.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub initializers: Vec<TensorProto>,
    /// Sparse initializers are counted, not decoded (tfc refuses them).
    pub sparse_initializers: usize,
    pub inputs: Vec<ValueInfo>,
    pub outputs: Vec<ValueInfo>,
}

/// A decoded `NodeProto`.
#[derive(Clone, Debug, Default)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    /// Value names; an empty name is an optional input left out.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attributes: Vec<Attribute>,
}

impl Node {
    /// The attribute called `name`, if the node has it.
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attributes.iter().find(|a| a.name == name).map(|a| &a.value)
    }
}

/// A decoded `AttributeProto`.
#[derive(Clone, Debug)]
pub struct Attribute {
    pub name: String,
    pub value: AttrValue,
}

/// An attribute's value, by its declared type.
#[derive(Clone, Debug)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(TensorProto),
    Graph(Box<Graph>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    /// Types tfc never reads (tensors, graphs, sparse tensors, type protos
    /// as values): the type's name.
    Other(&'static str),
}

impl AttrValue {
    /// The attribute type's name in ONNX's schema, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            AttrValue::Float(_) => "FLOAT",
            AttrValue::Int(_) => "INT",
            AttrValue::String(_) => "STRING",
            AttrValue::Tensor(_) => "TENSOR",
            AttrValue::Graph(_) => "GRAPH",
            AttrValue::Floats(_) => "FLOATS",
            AttrValue::Ints(_) => "INTS",
            AttrValue::Strings(_) => "STRINGS",
            AttrValue::Other(name) => name,
        }
    }
}

/// One dimension of a declared shape.
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    Fixed(i64),
    /// A named size (`batch`), the same wherever the name appears.
    Named(String),
    /// A size the file leaves open without a name.
    Open,
}

/// A decoded `ValueInfoProto` (a graph input or output).
#[derive(Clone, Debug, Default)]
pub struct ValueInfo {
    pub name: String,
    /// The tensor element type, or `None` when the value is not a tensor
    /// (a sequence, a map, an optional) or the file does not say.
    pub elem_type: Option<i32>,
    /// The shape, when the file gives one.
    pub shape: Option<Vec<Dim>>,
    /// Not a tensor type: which kind it is (`sequence`, `map`, …).
    pub non_tensor: Option<&'static str>,
}

/// A decoded `TensorProto`: its data in whichever field the writer used.
#[derive(Clone, Debug, Default)]
pub struct TensorProto {
    pub name: String,
    pub dims: Vec<i64>,
    pub data_type: i32,
    pub raw_data: Option<Vec<u8>>,
    pub float_data: Vec<f32>,
    /// `int32_data`: also holds bool, 8- and 16-bit integers and the bits
    /// of f16/bf16 values.
    pub int32_data: Vec<i64>,
    pub int64_data: Vec<i64>,
    pub double_data: Vec<f64>,
    pub uint64_data: Vec<u64>,
    pub string_count: usize,
    /// The data lives in another file (`data_location = EXTERNAL`).
    pub external: bool,
}

/// Largest number of elements a tensor of a model may have (as the
/// tracer's limit).
const MAX_ELEMENTS: u64 = 1 << 34;

/// ONNX's name for a `TensorProto.DataType`.
pub fn dtype_name(t: i32) -> &'static str {
    match t {
        1 => "FLOAT",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        6 => "INT32",
        7 => "INT64",
        8 => "STRING",
        9 => "BOOL",
        10 => "FLOAT16",
        11 => "DOUBLE",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        16 => "BFLOAT16",
        17..=20 => "FLOAT8",
        21 => "UINT4",
        22 => "INT4",
        23 => "FLOAT4E2M1",
        _ => "an unknown type",
    }
}

/// The tfc dtype of an ONNX element type, or why there is none.
pub fn dtype_of(t: i32) -> Result<DType, String> {
    Ok(match t {
        1 => DType::F32,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        16 => DType::BF16,
        _ => return Err(format!("element type {} ({t}) has no tfc dtype", dtype_name(t))),
    })
}

/// ONNX's `TensorProto.DataType` of a tfc dtype.
pub fn onnx_dtype(d: DType) -> i32 {
    match d {
        DType::F32 => 1,
        DType::I8 => 3,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::BF16 => 16,
    }
}

impl TensorProto {
    /// The shape, checked: no negative dimension and at most
    /// `MAX_ELEMENTS` elements.
    pub fn shape(&self) -> Result<Vec<usize>, String> {
        let mut n: u64 = 1;
        let mut shape = Vec::with_capacity(self.dims.len().min(64));
        for &d in &self.dims {
            let d = u64::try_from(d).map_err(|_| format!("tensor `{}` has a negative dimension {d}", self.name))?;
            n = n.saturating_mul(d);
            shape.push(d as usize);
        }
        if n > MAX_ELEMENTS {
            return Err(format!("tensor `{}` has {n} elements, more than tfc allows", self.name));
        }
        Ok(shape)
    }

    /// The tensor as a tfc value, or why it cannot be one: a dtype tfc
    /// lacks, data stored elsewhere, or fewer or more elements than the
    /// shape needs.
    pub fn to_tensor(&self) -> Result<Tensor, String> {
        let shape = self.shape()?;
        let dtype = dtype_of(self.data_type)?;
        if self.external {
            return Err(format!("tensor `{}` keeps its data in an external file, which tfc does not read", self.name));
        }
        let n: usize = shape.iter().product();
        let wrong = |found: usize, unit: &str| {
            format!("tensor `{}` of shape {shape:?} needs {n} elements, its {unit} holds {found}", self.name)
        };
        let t = if let Some(raw) = &self.raw_data {
            let width = match dtype {
                DType::Bool | DType::I8 => 1,
                DType::F16 | DType::BF16 => 2,
                DType::F32 | DType::I32 => 4,
                DType::F64 | DType::I64 => 8,
            };
            if raw.len() != n.saturating_mul(width) {
                return Err(wrong(raw.len() / width, "raw_data"));
            }
            from_raw(dtype, &shape, raw)
        } else {
            let count = match dtype {
                DType::F32 => self.float_data.len(),
                DType::I64 => self.int64_data.len(),
                DType::F64 => self.double_data.len(),
                _ => self.int32_data.len(),
            };
            if count != n {
                return Err(wrong(count, "data field"));
            }
            match dtype {
                DType::F32 => Tensor::from_vec(dtype, &shape, self.float_data.clone()),
                DType::F64 => Tensor::from_vec(dtype, &shape, self.double_data.clone()),
                DType::I64 => Tensor::from_vec(dtype, &shape, self.int64_data.clone()),
                DType::I32 | DType::I8 => {
                    Tensor::from_vec(dtype, &shape, self.int32_data.iter().map(|&v| v as i32).collect())
                }
                DType::Bool => Tensor::from_vec(dtype, &shape, self.int32_data.iter().map(|&v| v != 0).collect()),
                DType::F16 => Tensor::from_vec(
                    dtype,
                    &shape,
                    self.int32_data.iter().map(|&v| crate::half::f16_bits_to_f32(v as u16)).collect(),
                ),
                DType::BF16 => Tensor::from_vec(
                    dtype,
                    &shape,
                    self.int32_data.iter().map(|&v| crate::half::bf16_bits_to_f32(v as u16)).collect(),
                ),
            }
        };
        t.map_err(|d| d.message)
    }
}

/// Little-endian elements of `dtype` (their count already checked).
fn from_raw(dtype: DType, shape: &[usize], raw: &[u8]) -> Result<Tensor, crate::diag::Diagnostic> {
    fn words<const N: usize, T>(raw: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        raw.chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect()
    }
    match dtype {
        DType::F32 => Tensor::from_vec(dtype, shape, words(raw, f32::from_le_bytes)),
        DType::F64 => Tensor::from_vec(dtype, shape, words(raw, f64::from_le_bytes)),
        DType::I32 => Tensor::from_vec(dtype, shape, words(raw, i32::from_le_bytes)),
        DType::I64 => Tensor::from_vec(dtype, shape, words(raw, i64::from_le_bytes)),
        DType::Bool => Tensor::from_vec(dtype, shape, raw.iter().map(|&b| b != 0).collect()),
        DType::I8 => Tensor::from_vec(dtype, shape, raw.iter().map(|&b| i32::from(b as i8)).collect()),
        DType::F16 => {
            Tensor::from_vec(dtype, shape, words(raw, |b| crate::half::f16_bits_to_f32(u16::from_le_bytes(b))))
        }
        DType::BF16 => {
            Tensor::from_vec(dtype, shape, words(raw, |b| crate::half::bf16_bits_to_f32(u16::from_le_bytes(b))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_convert_from_each_data_field() {
        let t = TensorProto { dims: vec![2], data_type: 1, float_data: vec![1.0, 2.0], ..Default::default() };
        assert_eq!(t.to_tensor().unwrap().to_f64_vec(), [1.0, 2.0]);
        let raw = [3i64, -4].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = TensorProto { dims: vec![2, 1], data_type: 7, raw_data: Some(raw), ..Default::default() };
        assert_eq!(t.to_tensor().unwrap().to_i64_vec(), Some(vec![3, -4]));
        let t = TensorProto { dims: vec![], data_type: 10, int32_data: vec![0x3c00], ..Default::default() };
        assert_eq!(t.to_tensor().unwrap().to_f64_vec(), [1.0]);
    }

    #[test]
    fn wrong_counts_and_types_are_errors() {
        let huge = TensorProto { dims: vec![1 << 40, 1 << 40], data_type: 1, ..Default::default() };
        assert!(huge.to_tensor().unwrap_err().contains("more than tfc allows"));
        let short = TensorProto { dims: vec![3], data_type: 1, float_data: vec![1.0], ..Default::default() };
        assert!(short.to_tensor().unwrap_err().contains("needs 3 elements"));
        let u8s = TensorProto { dims: vec![1], data_type: 2, raw_data: Some(vec![1]), ..Default::default() };
        assert!(u8s.to_tensor().unwrap_err().contains("UINT8"));
        let neg = TensorProto { dims: vec![-1], data_type: 1, ..Default::default() };
        assert!(neg.to_tensor().unwrap_err().contains("negative"));
    }
}
