//! A compiled entry as a function of its inputs: the graph of an entry
//! traced with placeholders for the session tensors it names (see `key`),
//! instantiated for the values those names have each time it runs.
//!
//! Contract: `Template::new` takes a traced entry whose inputs were
//! placeholders (`Live::trace_with_inputs`); `instantiate` adds to the
//! session graph a copy of the nodes that depend on a placeholder, reading
//! the actual input nodes instead, and returns the entry's effects and
//! bindings rewritten to the copy. Nodes that do not depend on an input
//! (constants, a function's captured tensors, anything computed earlier)
//! are shared by every instance, so they are evaluated once. Spans in the
//! entry's own text are moved to the text typed this time (`Marks::map`),
//! so a run-time error points at what the user wrote. An instance computes
//! exactly what tracing the entry again would: the same ops on the same
//! values, evaluated by the same runtime.
//!
//! Example: `f(a)` with `fn f(v) = v * 2.0` traces to `%p = slot`,
//! `%c = constant 2`, `%b = broadcast_to %c`, `%m = mul %p, %b`,
//! `print %m`; the instance for `b` adds `%m' = mul %b_node, %b` and prints
//! `%m'`.

use super::key::{Input, Marks};
use crate::diag::{FileId, Span};
use crate::ir::{Effect, Graph, NodeId, Program};
use crate::trace::Value;
use std::collections::{HashMap, HashSet};

pub struct Template {
    placeholders: Vec<NodeId>,
    /// The nodes the effects and bindings need that depend on a
    /// placeholder, in topological order (their copies are added in it).
    nodes: Vec<NodeId>,
    effects: Vec<Effect>,
    bindings: Vec<(String, Value)>,
    /// The input names of the text traced (a binding may be named by one).
    names: Vec<String>,
    /// The source of the text traced.
    file: FileId,
}

/// What one run of a cached entry does: its effects and the values it
/// binds, for the input nodes it was made for.
#[derive(Clone)]
pub struct Instance {
    pub inputs: Vec<NodeId>,
    /// The input names its bindings are named with.
    pub names: Vec<String>,
    pub effects: Vec<Effect>,
    pub bindings: Vec<(String, Value)>,
}

impl Template {
    pub fn new(
        g: &Graph,
        placeholders: Vec<NodeId>,
        effects: Vec<Effect>,
        bindings: Vec<(String, Value)>,
        inputs: &[Input],
        file: FileId,
    ) -> Template {
        // Everything downstream of a placeholder…
        let mut varying: HashSet<NodeId> = placeholders.iter().copied().collect();
        let mut stack = placeholders.clone();
        while let Some(n) = stack.pop() {
            for u in g.users(n) {
                if varying.insert(u) {
                    stack.push(u);
                }
            }
        }
        // …that the entry needs, inputs before users (an iterative
        // depth-first search, emitting a node once its inputs are out).
        let mut roots = Vec::new();
        let mut probe = Program { graph: Graph::default(), effects: effects.clone(), compiled: None };
        probe.for_each_ref(&mut |id| roots.push(*id));
        bindings.iter().for_each(|(_, v)| tensors(v, &mut roots));
        let mut nodes = Vec::new();
        let mut done: HashSet<NodeId> = placeholders.iter().copied().collect();
        let mut stack: Vec<(NodeId, bool)> = roots.into_iter().rev().map(|r| (r, false)).collect();
        while let Some((n, expanded)) = stack.pop() {
            if !varying.contains(&n) || done.contains(&n) {
                continue;
            }
            if expanded {
                done.insert(n);
                nodes.push(n);
            } else {
                stack.push((n, true));
                stack.extend(g.inputs(n).into_iter().rev().map(|i| (i, false)));
            }
        }
        let names = inputs.iter().map(|i| i.name.clone()).collect();
        Template { placeholders, nodes, effects, bindings, names, file }
    }

    /// The entry run on `inputs`, typed as a text with `marks` in `file`
    /// (the template's own text has `own`).
    pub fn instantiate(&self, g: &mut Graph, inputs: &[Input], own: &Marks, marks: &Marks, file: FileId) -> Instance {
        let span = |s: Span| {
            if s.file == self.file {
                Span::new(file, own.map(marks, s.start), own.map(marks, s.end))
            } else {
                s
            }
        };
        let mut map: HashMap<NodeId, NodeId> =
            self.placeholders.iter().zip(inputs).map(|(p, input)| (*p, input.node)).collect();
        for &n in &self.nodes {
            let operands: Vec<NodeId> = g.inputs(n).iter().map(|i| map.get(i).copied().unwrap_or(*i)).collect();
            let node = g.node(n);
            let (op, ty, at) = (node.op.clone(), node.ty.clone(), span(node.span));
            map.insert(n, g.add(op, &operands, ty, at));
        }
        let mut program = Program { graph: Graph::default(), effects: self.effects.clone(), compiled: None };
        program.for_each_ref(&mut |id| {
            if let Some(new) = map.get(id) {
                *id = *new;
            }
        });
        for e in &mut program.effects {
            if let Effect::Print { span: s, .. } | Effect::AssertClose { span: s, .. } = e {
                *s = span(*s);
            }
        }
        let bindings = self.bindings.iter().map(|(name, v)| (name.clone(), remap(v, &map))).collect();
        let instance = Instance {
            inputs: inputs.iter().map(|i| i.node).collect(),
            names: self.names.clone(),
            effects: program.effects,
            bindings,
        };
        instance.renamed(inputs)
    }
}

impl Instance {
    /// The instance with its bindings named as the input names of another
    /// text with the same key: `let (a, c) = …` binds the input name typed
    /// this time.
    pub fn renamed(mut self, inputs: &[Input]) -> Instance {
        for (name, _) in &mut self.bindings {
            if let Some(input) = self.names.iter().position(|n| n == name).and_then(|i| inputs.get(i)) {
                *name = input.name.clone();
            }
        }
        self.names = inputs.iter().map(|i| i.name.clone()).collect();
        self
    }
}

/// The tensor nodes in a plain value.
fn tensors(v: &Value, out: &mut Vec<NodeId>) {
    match v {
        Value::Tensor(id, _) => out.push(*id),
        Value::Tuple(items) => items.iter().for_each(|i| tensors(i, out)),
        _ => {}
    }
}

/// A plain value with its tensor nodes replaced through `map`.
fn remap(v: &Value, map: &HashMap<NodeId, NodeId>) -> Value {
    match v {
        Value::Tensor(id, ty) => Value::Tensor(map.get(id).copied().unwrap_or(*id), ty.clone()),
        Value::Tuple(items) => Value::Tuple(items.iter().map(|i| remap(i, map)).collect()),
        other => other.clone(),
    }
}
