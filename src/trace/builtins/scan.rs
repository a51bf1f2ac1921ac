//! `scan(f, init, xs, reverse = false)` (§10): a loop over axis 0 of `xs`
//! that threads a carry through `f(carry, x) -> (new_carry, y)` and stacks
//! the `y`s, traced once into one `Op::Scan` node (`ir::scan`) instead of
//! unrolled.
//!
//! Contract: `f` is traced once, on fresh slot nodes standing for the
//! carry and one slice of each scanned tensor. Every node of that trace
//! that depends on them becomes the body (and leaves the program's graph);
//! every other value the body reads — a model's weights `f` closes over, a
//! constant — is a captured operand of the scan node, so gradients reach
//! it. The result is `(final_carry, ys)`, each with the structure (tensor or
//! nested tuple) of `init` and of `f`'s `y`. Bad input is a diagnostic at
//! the user's text: scanned tensors of different lengths (E0331), a step
//! function that does not return a pair, returns a carry of another
//! structure or type than `init`, or mixes dtypes in its carry and outputs
//! (E0330), one with the wrong number of parameters (E0205/E0206), one that
//! prints (E0901).
//!
//! Random ops in `f` (`dropout`, `categorical`) draw afresh at every step
//! of the loop: the first one makes the loop's step index an extra scanned
//! input (`iota` over the length, f32), and their counter is
//! `outer · length + t`, `outer` being the counter they would use outside
//! the loop (a training step's number, a nested loop's counter) or just
//! `t` without one ([`ScanCounter`]). Like the step counter it is an f32:
//! distinct up to 2^24.
//!
//! Example: `scan(fn(h, x) = (tanh(x @ w + h @ u), h), h0, xs)` over
//! `xs: f32[28, B, 4]` gives `(h_28, hs)` with `hs: f32[28, B, H]`, the
//! state before each step.

use super::super::args::BuiltinArgs;
use super::super::tensor::Operand;
use super::super::value::Value;
use super::super::{TResult, Tracer};
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::scan::{copy_nodes, part_ops, ScanBody};
use crate::ir::{BinaryOp, DType, Graph, NodeId, Op, TensorType};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;

/// The tuple structure of a carry or of the scanned values: a tensor, or
/// a tuple of such structures.
#[derive(Clone, Debug, PartialEq)]
enum Tree {
    Leaf,
    Tuple(Vec<Tree>),
}

impl Tree {
    /// Rebuilds a value of this structure from its leaves, in order.
    fn rebuild(&self, leaves: &mut impl Iterator<Item = Value>) -> Value {
        match self {
            Tree::Leaf => leaves.next().unwrap_or(Value::Poison),
            Tree::Tuple(parts) => Value::Tuple(parts.iter().map(|p| p.rebuild(leaves)).collect()),
        }
    }
}

/// The leaves of a traced carry with its structure, in the order `Tree`
/// lists them.
struct Flat {
    tree: Tree,
    leaves: Vec<Operand>,
}

/// The random counter of a `scan`'s function while it is traced.
pub(crate) struct ScanCounter {
    /// The loop's number of steps.
    length: usize,
    /// Once a random op asked: the slot standing for the step index, and
    /// the counter computed from it.
    made: Option<(NodeId, NodeId)>,
}

fn scan_error(code: Code, message: String, span: Span, label: String) -> Diagnostic {
    Diagnostic::new(code, message).label(span, label)
}

fn types_text(leaves: &[Operand]) -> String {
    match leaves {
        [one] => one.ty.to_string(),
        many => format!("({})", many.iter().map(|o| o.ty.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

impl Tracer<'_> {
    pub(crate) fn scan_builtin(&mut self, a: &BuiltinArgs) -> TResult<Value> {
        let f = a.get(0).map(|(v, _)| v.clone()).ok_or_else(|| a.bad(0, "a function"))?;
        let init = self.flatten(a.get(1).map(|(v, _)| v), &|_| None, a.span_of(1))?;
        let xs = self.flatten(a.get(2).map(|(v, _)| v), &|_| None, a.span_of(2))?;
        let reverse = match a.get(3) {
            None => false,
            Some((Value::Bool(b), _)) => *b,
            Some(_) => return Err(a.bad(3, "`true` or `false`")),
        };
        let length = self.scan_length(&xs.leaves, a.span_of(2))?;

        // Trace `f` once on slots standing for the carry and one row of each `xs`.
        let effects_before = self.effects.len();
        let mut slot_nodes = Vec::new();
        let mut inputs: Vec<TensorType> = init.leaves.iter().map(|o| o.ty.clone()).collect();
        inputs.extend(xs.leaves.iter().map(|o| TensorType::new(o.ty.dtype, o.ty.shape[1..].to_vec())));
        for ty in &inputs {
            let slot = self.new_slot();
            slot_nodes.push(self.graph.add(Op::Slot { slot, ty: ty.clone() }, &[], ty.clone(), a.span));
        }
        let mut values = slot_nodes.iter().zip(&inputs).map(|(&id, ty)| Value::Tensor(id, ty.clone()));
        let carry = init.tree.rebuild(&mut values);
        let x = xs.tree.rebuild(&mut values);
        let args = vec![(carry, a.span_of(1)), (x, a.span_of(2))];
        self.scan_counters.push(ScanCounter { length, made: None });
        let out = self.call_value(f, a.span_of(0), args, Vec::new(), a.span);
        let counter = self.scan_counters.pop();
        let out = out.map_err(|fail| match fail {
            super::super::Fail::Diag(d) if matches!(d.code, Code::Arity | Code::MissingArgument) => {
                d.note("`scan` calls its function as `f(carry, x)`: two parameters").into()
            }
            other => other,
        })?;
        if self.effects.len() != effects_before {
            return Err(scan_error(
                Code::Unsupported,
                "the function of `scan` cannot print or assert: it runs once per step, inside the loop".into(),
                a.span_of(0),
                "this function has an effect".into(),
            )
            .into());
        }
        let (new_carry, ys) = self.step_result(out, &init, a)?;
        let mut xs = xs;
        if let Some((step_slot, _)) = counter.and_then(|c| c.made) {
            // The step index, scanned like the user's `xs`, after them.
            let steps = TensorType::new(DType::F32, vec![length]);
            xs.leaves.push(self.node(Op::Iota { ty: steps, axis: 0 }, &[], a.span)?);
            inputs.push(TensorType::scalar(DType::F32));
            slot_nodes.push(step_slot);
        }

        // The body: what depends on the slots; the rest of what it reads is captured.
        let outputs: Vec<&Operand> = new_carry.leaves.iter().chain(&ys.leaves).collect();
        let (body_graph, captured) = self.extract_body(&slot_nodes, &outputs)?;
        inputs.extend(captured.iter().map(|&c| self.graph.node(c).ty.clone()));
        let body = ScanBody {
            graph: body_graph,
            inputs,
            carries: init.leaves.len(),
            xs: xs.leaves.len(),
            length,
            reverse,
            saves_carries: false,
        };
        let mut operands: Vec<Operand> = init.leaves.iter().chain(&xs.leaves).cloned().collect();
        operands.extend(captured.iter().map(|&id| Operand { id, ty: self.graph.node(id).ty.clone(), span: a.span }));
        let parts = body.parts();
        let refs: Vec<&Operand> = operands.iter().collect();
        let packed = self.node(Op::Scan(Arc::new(body)), &refs, a.span)?;
        let mut results = Vec::with_capacity(parts.len());
        for part in &parts {
            let [slice, reshape] = part_ops(part);
            let s = self.node(slice, &[&packed], a.span)?;
            results.push(tensor_value(self.node(reshape, &[&s], a.span)?));
        }
        let mut results = results.into_iter();
        let carry = init.tree.rebuild(&mut results);
        let ys = ys.tree.rebuild(&mut results);
        Ok(Value::Tuple(vec![carry, ys]))
    }

    /// The random counter inside the `scan` at `level` of those being
    /// traced (see the module docs), made on the first call.
    pub(crate) fn scan_random_counter(&mut self, level: usize, span: Span) -> TResult<NodeId> {
        let Some(ScanCounter { length, made }) = self.scan_counters.get(level) else {
            return Err(Diagnostic::internal("scan: a step counter outside a scan").into());
        };
        if let Some((_, counter)) = made {
            return Ok(*counter);
        }
        let length = *length;
        // Outside this loop's function, the counter is the enclosing one.
        let outer = match level.checked_sub(1) {
            Some(up) => Some(self.scan_random_counter(up, span)?),
            None => self.outer_random_counter(span),
        };
        let f32_scalar = TensorType::scalar(DType::F32);
        let slot = self.new_slot();
        let step = self.graph.add(Op::Slot { slot, ty: f32_scalar.clone() }, &[], f32_scalar.clone(), span);
        let counter = match outer {
            None => step,
            Some(outer) => {
                let outer = Operand { id: outer, ty: self.graph.node(outer).ty.clone(), span };
                let outer = match outer.ty.dtype {
                    DType::F32 => outer,
                    _ => self.node(Op::Cast(DType::F32), &[&outer], span)?,
                };
                let length = self.scalar(length as f64, DType::F32, span)?;
                let base = self.node(Op::Binary(BinaryOp::Mul), &[&outer, &length], span)?;
                let step = Operand { id: step, ty: f32_scalar, span };
                self.node(Op::Binary(BinaryOp::Add), &[&base, &step], span)?.id
            }
        };
        self.scan_counters[level].made = Some((step, counter));
        Ok(counter)
    }

    /// The leaves of a carry or of scanned values (tensors, numbers as
    /// tensors of the dtype `like` gives leaf `i`, or tuples of them).
    fn flatten(&mut self, v: Option<&Value>, like: &dyn Fn(usize) -> Option<DType>, span: Span) -> TResult<Flat> {
        let mut leaves = Vec::new();
        let tree = self.flatten_into(v, like, span, &mut leaves)?;
        Ok(Flat { tree, leaves })
    }

    fn flatten_into(
        &mut self,
        v: Option<&Value>,
        like: &dyn Fn(usize) -> Option<DType>,
        span: Span,
        leaves: &mut Vec<Operand>,
    ) -> TResult<Tree> {
        match v {
            Some(Value::Tuple(items)) if !items.is_empty() => {
                let parts =
                    items.iter().map(|i| self.flatten_into(Some(i), like, span, leaves)).collect::<TResult<_>>()?;
                Ok(Tree::Tuple(parts))
            }
            Some(v @ (Value::Tensor(..) | Value::Int(_) | Value::Float(_) | Value::Bool(_))) => {
                leaves.push(self.operand(v, like(leaves.len()), span)?);
                Ok(Tree::Leaf)
            }
            Some(Value::Poison) => Err(super::super::Fail::Poisoned),
            other => {
                let found = other.map(|v| v.describe()).unwrap_or_else(|| "nothing".into());
                Err(scan_error(
                    Code::Kind,
                    format!("`scan` needs a tensor or a tuple of tensors here, found {found}"),
                    span,
                    "expected a tensor or a tuple of tensors".into(),
                )
                .into())
            }
        }
    }

    /// The one length of the scanned tensors along axis 0.
    fn scan_length(&self, xs: &[Operand], span: Span) -> TResult<usize> {
        if let Some(scalar) = xs.iter().find(|o| o.ty.rank() == 0) {
            let message = format!("`scan` steps along axis 0 of `xs`, but it holds the scalar {}", scalar.ty);
            return Err(scan_error(Code::Rank, message, span, "a scalar has no axis 0".into()).into());
        }
        let length = xs[0].ty.shape[0];
        if xs.iter().any(|o| o.ty.shape[0] != length) {
            let lengths: Vec<String> = xs.iter().map(|o| o.ty.shape[0].to_string()).collect();
            return Err(scan_error(
                Code::ScanLength,
                format!("the tensors `scan` steps through have different lengths along axis 0: {}", lengths.join(", ")),
                span,
                types_text(xs),
            )
            .help("every tensor of `xs` needs the same leading dimension (the number of steps)")
            .into());
        }
        Ok(length)
    }

    /// Checks `f`'s result: a pair of a carry of `init`'s structure and
    /// types, and outputs, all of one dtype.
    fn step_result(&mut self, out: Value, init: &Flat, a: &BuiltinArgs) -> TResult<(Flat, Flat)> {
        let f_span = a.span_of(0);
        let Value::Tuple(mut pair) = out else {
            return Err(self.not_a_pair(&out, f_span));
        };
        if pair.len() != 2 {
            return Err(self.not_a_pair(&Value::Tuple(pair), f_span));
        }
        let (c, y) = (pair.remove(0), pair.remove(0));
        let init_types: Vec<DType> = init.leaves.iter().map(|o| o.ty.dtype).collect();
        let new_carry = self.flatten(Some(&c), &|i| init_types.get(i).copied(), f_span)?;
        let same_types = new_carry.leaves.iter().map(|o| &o.ty).eq(init.leaves.iter().map(|o| &o.ty));
        if new_carry.tree != init.tree || !same_types {
            return Err(scan_error(
                Code::ScanCarry,
                format!(
                    "the function of `scan` returns a carry of type {}, but the carry it is given is {}",
                    types_text(&new_carry.leaves),
                    types_text(&init.leaves)
                ),
                f_span,
                format!("returns the carry {}", types_text(&new_carry.leaves)),
            )
            .label(a.span_of(1), format!("the initial carry is {}", types_text(&init.leaves)))
            .note("the carry must keep its structure, shape and dtype from step to step")
            .into());
        }
        let ys = self.flatten(Some(&y), &|_| init_types.first().copied(), f_span)?;
        let dtype = init.leaves[0].ty.dtype;
        if let Some(odd) = new_carry.leaves.iter().chain(&ys.leaves).find(|o| o.ty.dtype != dtype) {
            return Err(scan_error(
                Code::ScanCarry,
                format!("`scan` needs its carry and outputs of one dtype, but they hold {dtype} and {}", odd.ty.dtype),
                f_span,
                format!("returns ({}, {})", types_text(&new_carry.leaves), types_text(&ys.leaves)),
            )
            .help("cast the odd part (`cast(y, f32)`) inside the function")
            .into());
        }
        Ok((new_carry, ys))
    }

    fn not_a_pair(&self, out: &Value, f_span: Span) -> super::super::Fail {
        scan_error(
            Code::ScanCarry,
            format!("the function of `scan` must return a pair `(carry, y)`, but it returned {}", out.describe()),
            f_span,
            "this function".into(),
        )
        .help("return the new carry and this step's output: `fn(c, x) = (c + x, c)`")
        .into()
    }

    /// Moves the nodes that depend on `slots` and that `outputs` read into a
    /// body graph (slots numbered as `ScanBody` says), and returns it with
    /// the captured values: the other nodes the body reads, in order.
    fn extract_body(&mut self, slots: &[NodeId], outputs: &[&Operand]) -> TResult<(Graph, Vec<NodeId>)> {
        let g = &self.graph;
        // Everything computed from a slot: the loop's own work.
        let mut varying: HashSet<NodeId> = slots.iter().copied().collect();
        let mut stack = slots.to_vec();
        while let Some(n) = stack.pop() {
            for u in g.users(n) {
                if varying.insert(u) {
                    stack.push(u);
                }
            }
        }
        // Of that, what the outputs need.
        let mut needed: HashSet<NodeId> = HashSet::default();
        let mut stack: Vec<NodeId> = outputs.iter().map(|o| o.id).filter(|id| varying.contains(id)).collect();
        while let Some(n) = stack.pop() {
            if needed.insert(n) {
                stack.extend(g.inputs(n).into_iter().filter(|i| varying.contains(i)));
            }
        }
        let order: Vec<NodeId> =
            g.topo_order().into_iter().filter(|n| needed.contains(n) && !slots.contains(n)).collect();
        let mut captured: Vec<NodeId> = Vec::new();
        for &n in &order {
            for i in g.inputs(n) {
                if !varying.contains(&i) && !captured.contains(&i) {
                    captured.push(i);
                }
            }
        }
        for o in outputs {
            if !varying.contains(&o.id) && !captured.contains(&o.id) {
                captured.push(o.id);
            }
        }
        let mut body = Graph::new();
        let mut map: HashMap<NodeId, NodeId> = HashMap::default();
        for (i, &n) in slots.iter().chain(&captured).enumerate() {
            let ty = g.node(n).ty.clone();
            map.insert(n, body.add(Op::Slot { slot: i, ty: ty.clone() }, &[], ty, g.node(n).span));
        }
        // Every operand is a slot, a capture or an earlier copy.
        copy_nodes(g, &order, &mut body, &mut map).map_err(Diagnostic::internal)?;
        body.outputs = outputs
            .iter()
            .map(|o| map.get(&o.id).copied().ok_or_else(|| Diagnostic::internal("scan: an output was not copied")))
            .collect::<Result<_, _>>()?;
        // A file's graph drops the loop's nodes; the REPL's live graph keeps
        // them, unused, so that its node ids stay a topological order (a
        // removed id is reused by the next node).
        if self.defer_gradients {
            for n in varying {
                self.graph.remove(n);
            }
        }
        Ok((body, captured))
    }
}

fn tensor_value(o: Operand) -> Value {
    Value::Tensor(o.id, o.ty)
}
