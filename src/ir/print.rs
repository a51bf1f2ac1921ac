//! The text IR: a deterministic, readable dump of a graph or a program, used
//! by `--dump-after`, pass snapshots and the verifier's messages.
//!
//! Contract: the text depends only on the graph's structure (see
//! `numbering` for exactly when two graphs print the same), never on petgraph
//! indices, hashing or spans. Spans are left out on purpose: a snapshot must
//! not change when a comment above the code moves it.
//!
//! Format, one line per node in `Numbering` order, then the effects in
//! statement order, then the outputs:
//!
//! ```text
//! %0 = constant [[1, 2], [3, 4]] : f32[2, 2]
//! %1 = constant <120 values> : f32[2, 60]
//! %2 = matmul %0, %1 : f32[2, 60]
//! %3 = reduce_sum %2 {axes=[1], keepdims=false} : f32[2]
//! print %3
//! assert_close %3, %0 tol=1e-5
//! output %3
//! ```
//!
//! A `scan` node's body follows its line, indented by four spaces and
//! numbered on its own from `%0` (its slots are the body's inputs).
//!
//! Attributes follow the operands in braces, in the op's field order. Types
//! of `constant`, `iota` and `random_*` are the result type, so they are not
//! repeated as attributes. Floats use Rust's shortest round-trip form
//! (`{}`), switching to exponent form (`1e-5`) for magnitudes below 1e-4 or
//! from 1e16 up, where the plain form would be a long run of zeros.

use super::graph::{Graph, NodeId};
use super::numbering::Numbering;
use super::op::{Literal, Op};
use super::program::{Effect, PrintItem, Program};
use std::fmt::Write as _;

/// Constants with at most this many elements show their values.
const MAX_SHOWN_VALUES: usize = 8;

/// The nodes and outputs of `g`, one per line.
pub fn print_graph(g: &Graph) -> String {
    let numbering = Numbering::of_graph(g);
    let mut out = print_nodes(g, &numbering);
    print_outputs(g, &numbering, &mut out);
    out
}

/// The nodes of the program's graph, then its effects, then its outputs.
pub fn print_program(p: &Program) -> String {
    let numbering = Numbering::of_program(p);
    let mut out = print_nodes(&p.graph, &numbering);
    for e in &p.effects {
        out.push_str(&print_effect(e, &numbering));
        out.push('\n');
    }
    print_outputs(&p.graph, &numbering, &mut out);
    out
}

/// One line of statistics for the end of a pass snapshot: `nodes: 12`.
pub fn print_summary(g: &Graph) -> String {
    format!("nodes: {}", g.node_count())
}

fn print_nodes(g: &Graph, numbering: &Numbering) -> String {
    let mut out = String::new();
    for &id in numbering.order() {
        out.push_str(&print_node(g, numbering, id));
        out.push('\n');
        // A scan's body follows it, indented (its own numbering from %0).
        if let Op::Scan(body) = &g.node(id).op {
            out.push_str(&body.body_text("    "));
        }
    }
    out
}

fn print_outputs(g: &Graph, numbering: &Numbering, out: &mut String) {
    for &id in &g.outputs {
        let _ = writeln!(out, "output {}", numbering.name(id));
    }
}

/// One node as a line without its newline: `%3 = matmul %1, %2 : f32[64, 10]`.
pub fn print_node(g: &Graph, numbering: &Numbering, id: NodeId) -> String {
    if !g.contains(id) {
        return numbering.name(id);
    }
    let node = g.node(id);
    let mut line = format!("{} = {}", numbering.name(id), node.op.name());
    let operands: Vec<String> = g.inputs(id).into_iter().map(|i| numbering.name(i)).collect();
    if !operands.is_empty() {
        let _ = write!(line, " {}", operands.join(", "));
    }
    if let Op::Constant { value, ty } = &node.op {
        let _ = write!(line, " {}", literal(value, &ty.shape));
    }
    let attrs = attributes(&node.op);
    if !attrs.is_empty() {
        let _ = write!(line, " {{{}}}", attrs.join(", "));
    }
    let _ = write!(line, " : {}", node.ty);
    line
}

/// `print %3`, `print (%1, "loss") {full=true}`, `assert_close %3, %5 tol=1e-5`.
pub fn print_effect(e: &Effect, numbering: &Numbering) -> String {
    match e {
        Effect::Print { item, full, .. } => {
            let suffix = if *full { " {full=true}" } else { "" };
            format!("print {}{suffix}", print_item(item, numbering))
        }
        Effect::AssertClose { actual, expected, tol, .. } => {
            format!("assert_close {}, {} tol={}", numbering.name(*actual), numbering.name(*expected), float(*tol))
        }
        other => {
            let reads: Vec<String> = other.plan_operands().iter().map(|&id| numbering.name(id)).collect();
            format!("{} reads [{}]", other.summary(), reads.join(", "))
        }
    }
}

fn print_item(item: &PrintItem, numbering: &Numbering) -> String {
    match item {
        PrintItem::Tensor(id) => numbering.name(*id),
        PrintItem::Bytes(id) => format!("text({})", numbering.name(*id)),
        // Debug quoting keeps quotes and newlines inside the text on one line.
        PrintItem::Text(s) => format!("{s:?}"),
        PrintItem::Tuple(items) => {
            let parts: Vec<String> = items.iter().map(|i| print_item(i, numbering)).collect();
            format!("({})", parts.join(", "))
        }
        PrintItem::Line(items) => items.iter().map(|i| print_item(i, numbering)).collect::<Vec<_>>().join(" "),
    }
}

/// `name=value` pairs of an op's attributes, in field order.
pub(crate) fn attributes(op: &Op) -> Vec<String> {
    let list = |v: &[usize]| format!("{v:?}");
    match op {
        Op::Constant { .. } | Op::Unary(_) | Op::Binary(_) | Op::Select | Op::MatMul => Vec::new(),
        Op::QuantMatMul { patches: None } => Vec::new(),
        Op::QuantMatMul { patches: Some(p) } => vec![
            format!("kernel={}", list(&p.kernel)),
            format!("stride={}", list(&p.stride)),
            format!("padding={}", list(&p.padding)),
            format!("dilation={}", list(&p.dilation)),
        ],
        Op::Iota { axis, .. } => vec![format!("axis={axis}")],
        Op::Slot { slot, .. } => vec![format!("slot={slot}")],
        Op::Random { seed, .. } => vec![format!("seed={seed}")],
        Op::Cast(to) => vec![format!("to={to}")],
        Op::Reduce { axes, keepdims, .. } => vec![format!("axes={}", list(axes)), format!("keepdims={keepdims}")],
        Op::ArgMax { axis, keepdims } => vec![format!("axis={axis}"), format!("keepdims={keepdims}")],
        Op::CumSum { axis, reverse } => vec![format!("axis={axis}"), format!("reverse={reverse}")],
        Op::ArgSort { axis, descending } => vec![format!("axis={axis}"), format!("descending={descending}")],
        Op::Reshape { shape } | Op::BroadcastTo { shape } => vec![format!("shape={}", list(shape))],
        Op::Transpose { perm } => vec![format!("perm={}", list(perm))],
        Op::Concat { axis } | Op::Gather { axis } => vec![format!("axis={axis}")],
        Op::Slice { start, step, len } => {
            vec![format!("start={}", list(start)), format!("step={step:?}"), format!("len={}", list(len))]
        }
        Op::Pad { low, high, value } => {
            vec![format!("low={}", list(low)), format!("high={}", list(high)), format!("value={}", float(*value))]
        }
        Op::Conv2d { stride, padding, dilation, groups } => vec![
            format!("stride={}", list(stride)),
            format!("padding={}", list(padding)),
            format!("dilation={}", list(dilation)),
            format!("groups={groups}"),
        ],
        Op::Pool2d { size, stride, padding, .. } => vec![
            format!("size={}", list(size)),
            format!("stride={}", list(stride)),
            format!("padding={}", list(padding)),
        ],
        Op::OneHot { depth, dtype } => vec![format!("depth={depth}"), format!("dtype={dtype}")],
        Op::Conv2dGradInput { stride, padding, dilation, groups, input_shape } => vec![
            format!("stride={stride:?}"),
            format!("padding={padding:?}"),
            format!("dilation={dilation:?}"),
            format!("groups={groups}"),
            format!("input_shape={input_shape:?}"),
        ],
        Op::Conv2dGradFilter { stride, padding, dilation, groups, filter_shape } => vec![
            format!("stride={stride:?}"),
            format!("padding={padding:?}"),
            format!("dilation={dilation:?}"),
            format!("groups={groups}"),
            format!("filter_shape={filter_shape:?}"),
        ],
        Op::Pool2dGrad { size, stride, padding, .. } => {
            vec![format!("size={size:?}"), format!("stride={stride:?}"), format!("padding={padding:?}")]
        }
        Op::ScatterAdd { axis, dim } => vec![format!("axis={axis}"), format!("dim={dim}")],
        Op::Gradient | Op::StopGradient | Op::AllReduce => vec![],
        Op::Scan(body) => body.attributes(),
    }
}

/// A constant's values nested by `shape` (`[[1, 2], [3, 4]]`, a bare `0.5`
/// for a scalar), or `<N values>` when there are too many to be readable.
pub(crate) fn literal(value: &Literal, shape: &[usize]) -> String {
    let items: Vec<String> = match value {
        Literal::Float(v) => v.iter().map(|x| float(*x)).collect(),
        Literal::Int(v) => v.iter().map(|x| x.to_string()).collect(),
        Literal::Bool(v) => v.iter().map(|x| x.to_string()).collect(),
    };
    if items.len() > MAX_SHOWN_VALUES {
        return format!("<{} values>", items.len());
    }
    // Checked: a corrupt shape must print, not overflow.
    let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if numel != Some(items.len()) {
        // A malformed constant (the verifier reports it): show it flat.
        return format!("[{}]", items.join(", "));
    }
    let mut out = String::new();
    nest(&items, shape, &mut out);
    out
}

fn nest(items: &[String], shape: &[usize], out: &mut String) {
    let Some((&dim, inner)) = shape.split_first() else {
        out.push_str(items.first().map(String::as_str).unwrap_or(""));
        return;
    };
    let step: usize = inner.iter().product();
    out.push('[');
    for i in 0..dim {
        if i > 0 {
            out.push_str(", ");
        }
        nest(&items[i * step..(i + 1) * step], inner, out);
    }
    out.push(']');
}

/// Shortest round-trip form; exponent form for very small or large magnitudes.
pub(crate) fn float(x: f64) -> String {
    let a = x.abs();
    if x != 0.0 && a.is_finite() && !(1e-4..1e16).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Span;
    use crate::ir::test_graphs::{constant, counting, node};
    use crate::ir::{BinaryOp, ReduceOp, UnaryOp};

    /// `sum(relu(x @ w + b), axis = 1)` with small and large constants.
    fn mlp_layer(g: &mut Graph) -> NodeId {
        let x = constant(g, &[1.0, 2.5, -3.0, 0.125], &[2, 2]);
        let w = counting(g, &[2, 10]);
        let xw = node(g, Op::MatMul, &[x, w]);
        let b = counting(g, &[2, 10]);
        let sum = node(g, Op::Binary(BinaryOp::Add), &[xw, b]);
        let act = node(g, Op::Unary(UnaryOp::Relu), &[sum]);
        node(g, Op::Reduce { op: ReduceOp::Sum, axes: vec![1], keepdims: false }, &[act])
    }

    #[test]
    fn prints_one_line_per_node_with_attributes_constants_and_outputs() {
        let mut g = Graph::new();
        let out = mlp_layer(&mut g);
        g.outputs.push(out);
        let expected = "\
%0 = constant [[1, 2.5], [-3, 0.125]] : f32[2, 2]
%1 = constant <20 values> : f32[2, 10]
%2 = matmul %0, %1 : f32[2, 10]
%3 = constant <20 values> : f32[2, 10]
%4 = add %2, %3 : f32[2, 10]
%5 = relu %4 : f32[2, 10]
%6 = reduce_sum %5 {axes=[1], keepdims=false} : f32[2]
output %6
";
        assert_eq!(print_graph(&g), expected);
        assert_eq!(print_summary(&g), "nodes: 7");
    }

    #[test]
    fn prints_effects_in_statement_order_before_outputs() {
        let mut p = Program::default();
        let a = constant(&mut p.graph, &[0.5], &[]);
        let b = constant(&mut p.graph, &[1e-7, 2e20, 3.0], &[3]);
        let s = node(&mut p.graph, Op::Unary(UnaryOp::Exp), &[a]);
        p.effects.push(Effect::Print { item: PrintItem::Tensor(b), full: false, span: Span::default() });
        let tuple = PrintItem::Tuple(vec![PrintItem::Text("loss \"x\"".into()), PrintItem::Tensor(s)]);
        p.effects.push(Effect::Print { item: tuple, full: true, span: Span::default() });
        p.effects.push(Effect::AssertClose { actual: s, expected: a, tol: 1e-5, span: Span::default() });
        p.graph.outputs.push(s);
        let expected = "\
%0 = constant [1e-7, 2e20, 3] : f32[3]
%1 = constant 0.5 : f32[]
%2 = exp %1 : f32[]
print %0
print (\"loss \\\"x\\\"\", %2) {full=true}
assert_close %2, %1 tol=1e-5
output %2
";
        assert_eq!(print_program(&p), expected);
    }

    #[test]
    fn numbering_ignores_insertion_order_of_reachable_nodes() {
        // The same expression `exp(a) * (a - b)` built in two different orders.
        let mut g1 = Graph::new();
        let a = constant(&mut g1, &[1.0, 2.0], &[2]);
        let b = constant(&mut g1, &[3.0, 4.0], &[2]);
        let e = node(&mut g1, Op::Unary(UnaryOp::Exp), &[a]);
        let d = node(&mut g1, Op::Binary(BinaryOp::Sub), &[a, b]);
        let m = node(&mut g1, Op::Binary(BinaryOp::Mul), &[e, d]);
        g1.outputs.push(m);

        let mut g2 = Graph::new();
        let b = constant(&mut g2, &[3.0, 4.0], &[2]);
        let a = constant(&mut g2, &[1.0, 2.0], &[2]);
        let d = node(&mut g2, Op::Binary(BinaryOp::Sub), &[a, b]);
        let e = node(&mut g2, Op::Unary(UnaryOp::Exp), &[a]);
        let m = node(&mut g2, Op::Binary(BinaryOp::Mul), &[e, d]);
        g2.outputs.push(m);

        assert_eq!(print_graph(&g1), print_graph(&g2));
        assert!(print_graph(&g1).starts_with("%0 = constant [1, 2] : f32[2]\n%1 = exp %0"));
    }

    #[test]
    fn numbering_does_not_depend_on_petgraph_indices_after_removal() {
        let mut g = Graph::new();
        let dead = constant(&mut g, &[9.0], &[1]);
        let out = mlp_layer(&mut g);
        g.outputs.push(out);
        g.remove(dead);
        let mut fresh = Graph::new();
        let out = mlp_layer(&mut fresh);
        fresh.outputs.push(out);
        assert_eq!(print_graph(&g), print_graph(&fresh));
    }

    #[test]
    fn unreachable_nodes_follow_the_reachable_ones() {
        let mut g = Graph::new();
        let a = constant(&mut g, &[1.0], &[1]);
        let _dead = node(&mut g, Op::Unary(UnaryOp::Neg), &[a]);
        let live = node(&mut g, Op::Unary(UnaryOp::Exp), &[a]);
        g.outputs.push(live);
        assert_eq!(
            print_graph(&g),
            "%0 = constant [1] : f32[1]\n%1 = exp %0 : f32[1]\n%2 = neg %0 : f32[1]\noutput %1\n"
        );
    }

    #[test]
    fn floats_use_the_shortest_round_trip_form() {
        assert_eq!(float(1.0), "1");
        assert_eq!(float(-2.5), "-2.5");
        assert_eq!(float(0.1), "0.1");
        assert_eq!(float(1e-5), "1e-5");
        assert_eq!(float(0.0001), "0.0001");
        assert_eq!(float(1.5e16), "1.5e16");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(f64::NEG_INFINITY), "-inf");
        for x in [0.1f64, 1.0 / 3.0, 6.02e23, -1e-300, 123456.789] {
            assert_eq!(float(x).parse::<f64>().ok(), Some(x));
        }
    }

    #[test]
    fn every_op_prints_its_attributes_in_braces() {
        let pad = Op::Pad { low: vec![1, 0], high: vec![0, 2], value: 0.5 };
        assert_eq!(attributes(&pad), ["low=[1, 0]", "high=[0, 2]", "value=0.5"]);
        let conv = Op::Conv2d { stride: [2, 2], padding: [1, 1, 0, 0], dilation: [1, 1], groups: 1 };
        assert_eq!(attributes(&conv).join(", "), "stride=[2, 2], padding=[1, 1, 0, 0], dilation=[1, 1], groups=1");
        let slice = Op::Slice { start: vec![3], step: vec![-1], len: vec![2] };
        assert_eq!(attributes(&slice).join(", "), "start=[3], step=[-1], len=[2]");
        assert_eq!(attributes(&Op::Cast(crate::ir::DType::F16)), ["to=f16"]);
    }

    #[test]
    fn integer_and_bool_constants_nest_by_rank() {
        assert_eq!(literal(&Literal::Int(vec![1, 2, 3, 4, 5, 6]), &[2, 3]), "[[1, 2, 3], [4, 5, 6]]");
        assert_eq!(literal(&Literal::Bool(vec![true]), &[]), "true");
        assert_eq!(literal(&Literal::Int(vec![]), &[0, 3]), "[]");
    }
}
