//! Which sizes of an exported function grow with its open size (`B` in
//! `export fn predict(x: f32[B, 784])`): the function is traced at
//! `B = EXPORT_SIZE` and again at `B = EXPORT_PROBE_SIZE`
//! (`ir::plan::ExportPlan::symbolic`), and the two graphs are walked side by
//! side from their outputs.
//!
//! Contract: [`compare`] succeeds when the two traces are the same graph up
//! to sizes, and every size that differs is `k · B` for one whole `k` in
//! both traces; it then gives each node of the first trace its dimensions
//! as fixed sizes or multiples of `B`. Anything else — a different graph, a
//! size such as `B + 1` or `B · B`, a constant whose value depends on `B`
//! or whose size does other than by repeating one row — is E0341 at the node, since the ONNX model could not compute it
//! for every `B`.
//!
//! Example: an MLP at batches 8 and 5 gives `[B, 784] @ [784, 10]` →
//! `[B, 10]`; a flatten `reshape(x, [B, 7 * 7 * 64])` keeps one `B` entry,
//! which ONNX export writes as `-1`.

use crate::diag::{Code, Diagnostic, Span};
use crate::ir::plan::{Region, EXPORT_PROBE_SIZE, EXPORT_SIZE};
use crate::ir::{Graph, Literal, NodeId, Op, TensorType};
use crate::tensor::{eval_node, Tensor};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// One dimension of a node of an export with an open size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    Fixed(usize),
    /// `k · B`.
    Scaled(usize),
}

/// The dimensions of every node of the first trace that depends on `B`
/// (nodes that are not listed have fixed sizes).
pub type Scaling = HashMap<NodeId, Vec<Dim>>;

/// What [`compare`] found.
pub struct Comparison {
    pub scaling: Scaling,
    /// Constants of `B` rows that repeat one row (the optimizer folds a
    /// broadcast of a constant into one): that row, which ONNX expands.
    pub repeated: HashMap<NodeId, Tensor>,
}

/// Compares `region` (at `B = EXPORT_SIZE`) with `probe` (at
/// `EXPORT_PROBE_SIZE`); `name` is the open size, `at` the export.
pub fn compare(g: &Graph, region: &Region, probe: &Region, name: &str, at: Span) -> Result<Comparison, Diagnostic> {
    let refuse = |n: NodeId, why: String| {
        Diagnostic::new(Code::OnnxExport, format!("the exported function cannot keep `{name}` open: {why}"))
            .label(g.node(n).span, "here")
            .label(at, "exported here")
            .help(format!(
                "give `{name}` a fixed value (`const {name} = 64`), or keep this outside the exported function"
            ))
    };
    let mut scaling = Scaling::default();
    let mut repeated = HashMap::default();
    let mut seen: HashSet<NodeId> = HashSet::default();
    let mut stack: Vec<(NodeId, NodeId)> = region.outputs.iter().copied().zip(probe.outputs.iter().copied()).collect();
    if region.outputs.len() != probe.outputs.len() {
        return Err(refuse(region.outputs[0], "it returns a different number of results for other sizes".into()));
    }
    while let Some((a, b)) = stack.pop() {
        if a == b || !seen.insert(a) {
            continue;
        }
        let (na, nb) = (g.node(a), g.node(b));
        if !same_up_to_sizes(&na.op, &nb.op) || na.ty.dtype != nb.ty.dtype || na.ty.rank() != nb.ty.rank() {
            return Err(refuse(a, format!("`{}` is computed differently for other sizes", na.op.name())));
        }
        let mut dims = Vec::with_capacity(na.ty.rank());
        for (&da, &db) in na.ty.shape.iter().zip(&nb.ty.shape) {
            if da == db {
                dims.push(Dim::Fixed(da));
            } else if da % EXPORT_SIZE == 0 && db % EXPORT_PROBE_SIZE == 0 && da / EXPORT_SIZE == db / EXPORT_PROBE_SIZE
            {
                dims.push(Dim::Scaled(da / EXPORT_SIZE));
            } else {
                return Err(refuse(a, format!("a size here is not a multiple of `{name}` ({da} at {name} = {EXPORT_SIZE}, {db} at {EXPORT_PROBE_SIZE})")));
            }
        }
        let scaled = dims.iter().any(|d| matches!(d, Dim::Scaled(_)));
        let is_value = matches!(na.op, Op::Constant { .. } | Op::Iota { .. } | Op::Random { .. });
        let row = match &na.op {
            Op::Constant { value, ty } if scaled && same_up_to_sizes(&na.op, &nb.op) => one_row(value, ty, &dims),
            _ => None,
        };
        if let Some(row) = row {
            repeated.insert(a, row);
        } else if is_value && (scaled || na.op != nb.op) {
            return Err(refuse(a, format!("this `{}` depends on `{name}`", na.op.name())));
        }
        if scaled {
            scaling.insert(a, dims);
        }
        let (ia, ib) = (g.inputs(a), g.inputs(b));
        if ia.len() != ib.len() {
            return Err(refuse(a, format!("`{}` has other operands for other sizes", na.op.name())));
        }
        stack.extend(ia.into_iter().zip(ib));
    }
    Ok(Comparison { scaling, repeated })
}

/// The one row a constant repeats along each axis of size `B` (`dims`
/// `Scaled(1)` there), if it does: its value with those axes cut to 1.
fn one_row(value: &Literal, ty: &TensorType, dims: &[Dim]) -> Option<Tensor> {
    if dims.iter().any(|d| matches!(d, Dim::Scaled(k) if *k != 1)) {
        return None;
    }
    let whole = Tensor::from_literal(value, ty).ok()?;
    let scaled = |i: usize| matches!(dims[i], Dim::Scaled(_));
    let len: Vec<usize> = (0..dims.len()).map(|i| if scaled(i) { 1 } else { ty.shape[i] }).collect();
    let slice = Op::Slice { start: vec![0; dims.len()], step: vec![1; dims.len()], len: len.clone() };
    let row = eval_node(&slice, &[&whole], &TensorType::new(ty.dtype, len)).ok()?;
    let back = eval_node(&Op::BroadcastTo { shape: ty.shape.clone() }, &[&row], ty).ok()?;
    (back == whole).then_some(row)
}

/// Whether two ops are the same apart from the sizes their node types
/// already carry (a reshape's or broadcast's target, a slice's lengths, a
/// slot's number and type).
fn same_up_to_sizes(a: &Op, b: &Op) -> bool {
    match (a, b) {
        (Op::Slot { .. }, Op::Slot { .. }) => true,
        (Op::Reshape { shape: x }, Op::Reshape { shape: y })
        | (Op::BroadcastTo { shape: x }, Op::BroadcastTo { shape: y }) => x.len() == y.len(),
        (Op::Slice { start: s1, step: t1, len: l1 }, Op::Slice { start: s2, step: t2, len: l2 }) => {
            s1 == s2 && t1 == t2 && l1.len() == l2.len()
        }
        (Op::Constant { ty: t1, .. }, Op::Constant { ty: t2, .. })
        | (Op::Iota { ty: t1, .. }, Op::Iota { ty: t2, .. })
        | (Op::Random { ty: t1, .. }, Op::Random { ty: t2, .. }) => t1.rank() == t2.rank(),
        _ => a == b,
    }
}
