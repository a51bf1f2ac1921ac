//! `scan`: a loop over axis 0 of some tensors whose body is a sub-graph,
//! run `length` times without being unrolled (`Op::Scan`).
//!
//! Contract: the body is an ordinary `Graph` whose `Slot { slot: i }` nodes
//! are its inputs, in this order: the `carries` carry parts, then one slice
//! of each of the `xs` scanned operands (its row `t`, the operand without
//! its leading axis), then the captured values (loop invariants: weights the
//! step function closes over), which enter every step unchanged. Its
//! `outputs` are the new carry parts (of exactly the carry types), then the
//! per-step outputs `y`. A scan node's operands are the initial carries, the
//! scanned tensors (`[length, …]`) and the captured values, and its value is
//! *packed*: one rank-1 tensor of the outputs' one dtype holding, flattened
//! and in order, the final carries, the stacked `y`s (`[length, …y]`) and,
//! for a scan that `saves_carries` (the forward scan of a gradient), the
//! stacked carries that entered each step. The tracer slices the parts out
//! (`ScanBody::parts`); a single packed value keeps the IR's one value per
//! node, so every pass, the memory plan and autodiff see one ordinary
//! buffer.
//!
//! With `reverse`, step `t` runs for `t = length - 1` down to `0`; its
//! slices and outputs still sit at index `t` (JAX's `reverse=True`).
//!
//! Example: a running sum `scan(fn(c, x) = (c + x, c), 0.0, xs)` over
//! `xs: f32[3]` has a body of three nodes (`slot 0`, `slot 1`, `add`) with
//! outputs `[add, slot 0]`, and its packed value is `f32[4]`: the total,
//! then the three partial sums before each step.

use super::graph::Graph;
use super::types::{DType, TensorType};
use std::fmt::Write as _;

/// The body and the shape of the loop of one `Op::Scan`.
#[derive(Clone)]
pub struct ScanBody {
    pub graph: Graph,
    /// The types of the body's slots: carries, slices, captured values.
    pub inputs: Vec<TensorType>,
    /// How many carry parts lead `inputs` and the body's outputs.
    pub carries: usize,
    /// How many scanned operands follow the carries.
    pub xs: usize,
    /// The number of steps (the scanned operands' leading dimension).
    pub length: usize,
    pub reverse: bool,
    /// Whether the packed value also holds the carries entering each step.
    pub saves_carries: bool,
}

/// One part of a scan's packed value: where it starts and its type.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub offset: usize,
    pub ty: TensorType,
}

impl ScanBody {
    /// The types of the body's outputs (new carries, then `y`s).
    pub fn output_types(&self) -> Vec<TensorType> {
        self.graph.outputs.iter().map(|&o| self.graph.node(o).ty.clone()).collect()
    }

    /// The one dtype of the packed value (that of every output).
    pub fn dtype(&self) -> Option<DType> {
        let types = self.output_types();
        let first = types.first()?.dtype;
        types.iter().all(|t| t.dtype == first).then_some(first)
    }

    /// The parts of the packed value, in order: final carries, stacked
    /// `y`s, then (if saved) the stacked carries entering each step.
    pub fn parts(&self) -> Vec<Part> {
        let stacked = |t: &TensorType| TensorType::new(t.dtype, [vec![self.length], t.shape.clone()].concat());
        let outs = self.output_types();
        let mut types: Vec<TensorType> = outs[..self.carries.min(outs.len())].to_vec();
        types.extend(outs.iter().skip(self.carries).map(stacked));
        if self.saves_carries {
            types.extend(self.inputs[..self.carries].iter().map(stacked));
        }
        let mut offset = 0;
        types
            .into_iter()
            .map(|ty| {
                let part = Part { offset, ty };
                offset += part.ty.numel();
                part
            })
            .collect()
    }

    /// The same loop with any saved carries as ordinary per-step outputs
    /// (the body returns its carry slots as extra `y`s): the packed value
    /// is unchanged, and the saved carries are now outputs like any other.
    pub fn as_plain(&self) -> ScanBody {
        let mut plain = self.clone();
        if self.saves_carries {
            plain.saves_carries = false;
            for i in 0..self.carries {
                let slot = self
                    .graph
                    .node_ids()
                    .into_iter()
                    .find(|&n| matches!(self.graph.node(n).op, super::op::Op::Slot { slot, .. } if slot == i));
                let slot = match slot {
                    Some(n) => n,
                    None => {
                        let ty = self.inputs[i].clone();
                        plain.graph.add(super::op::Op::Slot { slot: i, ty: ty.clone() }, &[], ty, Default::default())
                    }
                };
                plain.graph.outputs.push(slot);
            }
        }
        plain
    }

    /// This loop (as `as_plain`), also saving the carries entering each
    /// step: its packed value starts with this one's.
    pub fn saving(&self) -> ScanBody {
        ScanBody { saves_carries: true, ..self.as_plain() }
    }

    /// A one-line summary for the text IR: `length=28, carries=2, xs=1`.
    pub fn attributes(&self) -> Vec<String> {
        let captured = self.inputs.len().saturating_sub(self.carries + self.xs);
        let mut attrs = vec![
            format!("length={}", self.length),
            format!("carries={}", self.carries),
            format!("xs={}", self.xs),
            format!("captured={captured}"),
        ];
        if self.reverse {
            attrs.push("reverse=true".into());
        }
        if self.saves_carries {
            attrs.push("saves_carries=true".into());
        }
        attrs
    }

    /// The body's text, every line of `ir::print_graph` indented.
    pub fn body_text(&self, indent: &str) -> String {
        let mut out = String::new();
        for line in super::print::print_graph(&self.graph).lines() {
            let _ = writeln!(out, "{indent}{line}");
        }
        out
    }
}

/// Bodies compare by what they compute: their printed graph (structural,
/// see `ir::numbering`) and loop shape, so CSE merges two scans only when
/// they are the same loop over the same operands.
impl PartialEq for ScanBody {
    fn eq(&self, other: &ScanBody) -> bool {
        self.inputs == other.inputs
            && (self.carries, self.xs, self.length, self.reverse, self.saves_carries)
                == (other.carries, other.xs, other.length, other.reverse, other.saves_carries)
            && self.body_text("") == other.body_text("")
    }
}

/// The debug form is the attributes and the printed body: CSE keys ops by
/// their debug text, so it must tell different bodies apart.
impl std::fmt::Debug for ScanBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inputs: Vec<String> = self.inputs.iter().map(|t| t.to_string()).collect();
        write!(f, "Scan {{ {} inputs=[{}]\n{}}}", self.attributes().join(", "), inputs.join(", "), self.body_text("  "))
    }
}

/// The result type of a scan over operands of types `operands`, or why they
/// do not fit its body (an internal error: the tracer builds both).
pub fn infer(body: &ScanBody, operands: &[&TensorType]) -> Result<TensorType, String> {
    if operands.len() != body.inputs.len() || body.carries + body.xs > body.inputs.len() {
        return Err(format!("scan takes {} operands, got {}", body.inputs.len(), operands.len()));
    }
    for (i, (given, want)) in operands.iter().zip(&body.inputs).enumerate() {
        let scanned = i >= body.carries && i < body.carries + body.xs;
        let fits = match scanned {
            true => {
                given.dtype == want.dtype
                    && given.shape.first() == Some(&body.length)
                    && given.shape[1..] == want.shape[..]
            }
            false => *given == want,
        };
        if !fits {
            let what = if scanned { format!("[{}, …{want}]", body.length) } else { want.to_string() };
            return Err(format!("scan operand {i} is {given}, its body takes {what}"));
        }
    }
    let outs = body.output_types();
    if outs.len() < body.carries || outs.is_empty() {
        return Err(format!("scan body has {} outputs for {} carries", outs.len(), body.carries));
    }
    if outs[..body.carries] != body.inputs[..body.carries] {
        return Err("scan body's new carries differ from its carries".into());
    }
    let dtype = body.dtype().ok_or("scan body's outputs differ in dtype")?;
    let total: usize = body.parts().iter().map(|p| p.ty.numel()).sum();
    Ok(TensorType::new(dtype, vec![total]))
}

/// The two ops that take part `part` out of a packed value: a slice of its
/// elements, then a reshape to its type.
pub fn part_ops(part: &Part) -> [super::op::Op; 2] {
    use super::op::Op;
    let numel = part.ty.numel();
    [
        Op::Slice { start: vec![part.offset], step: vec![1], len: vec![numel] },
        Op::Reshape { shape: part.ty.shape.clone() },
    ]
}

/// Copies `nodes` of `from` (listed in a topological order) into `into`,
/// where each operand `n` is read as `map[n]` (filled beforehand with the
/// values the copies read from outside `nodes`), and records each copy in
/// `map`. Fails, naming the node, if an operand is neither copied nor
/// mapped.
pub fn copy_nodes(
    from: &Graph,
    nodes: &[super::graph::NodeId],
    into: &mut Graph,
    map: &mut rustc_hash::FxHashMap<super::graph::NodeId, super::graph::NodeId>,
) -> Result<(), String> {
    for &n in nodes {
        let node = from.node(n);
        let inputs = from
            .inputs(n)
            .iter()
            .map(|i| {
                map.get(i).copied().ok_or_else(|| format!("scan body: operand of `{}` not copied", node.op.name()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let copy = into.add(node.op.clone(), &inputs, node.ty.clone(), node.span);
        map.insert(n, copy);
    }
    Ok(())
}
