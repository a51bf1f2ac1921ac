//! Which shaders compute a planned kernel on the GPU: one function that
//! both the target (`host_reason`, when planning) and the unit (when
//! preparing) call, so that the plan and the backend always agree.
//!
//! Contract: `shaders(g, kernel, place)` gives the kernel's shaders in
//! the order they run — a reduction's prologue, its anchor, its epilogue;
//! a product or transpose, then its epilogue; an elementwise body — or
//! the reason there is none (the kernel then runs on the host). A value a
//! shader reads or writes lies where `place` says; `stored(kernel)` lists
//! the kernel's values that get a place of their own (its outputs, its
//! anchor's result, what each part writes), and a part that would read
//! any other value of the kernel has no shader (it was never stored).
//!
//! Example: `sum(exp(x - m), axis = 1)` as a reduction kernel with a
//! prologue is two shaders: the prologue's loop writing `exp(x - m)`, and
//! the sum of its rows.

use super::wgsl::{anchors, conv, elementwise, Place, Shader};
use crate::ir::compiled::{Kernel, KernelKind};
use crate::ir::kernel_desc::{AnchorOp, Part};
use crate::ir::{DType, Graph, NodeId};

/// Whether values of `dtype` live on the GPU (one 32-bit word an element;
/// a half type as the `f32` it is exactly).
pub fn on_device(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::I32 | DType::Bool | DType::F16 | DType::BF16)
}

/// Whether values of `dtype` compute as `f32` on the GPU.
fn float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// The node of `kernel` when it is one `scan`.
pub fn scan_of(g: &Graph, kernel: &Kernel) -> Option<NodeId> {
    match kernel.nodes.as_slice() {
        [n] if matches!(g.node(*n).op, crate::ir::Op::Scan(_)) => Some(*n),
        _ => None,
    }
}

/// The anchor of `kernel` when it checks its indices (a gather or a
/// scatter-add): its result gets one more word, the error flag its shader
/// sets for an index out of range.
pub fn checked(kernel: &Kernel) -> Option<NodeId> {
    let anchor = kernel.desc.anchor.as_ref()?;
    matches!(anchor.op, AnchorOp::Gather { .. } | AnchorOp::ScatterAdd { .. }).then_some(anchor.node)
}

/// The values of `kernel` that get a place: its outputs, its anchor's
/// result and what each of its parts writes.
pub fn stored(kernel: &Kernel) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = kernel.outputs.clone();
    let more =
        kernel.desc.anchor.iter().map(|a| a.node).chain(kernel.desc.parts.iter().flat_map(|p| p.outputs.clone()));
    for n in more {
        if !nodes.contains(&n) {
            nodes.push(n);
        }
    }
    nodes
}

/// The shaders of `kernel`, or why there are none (naming the node).
pub fn shaders(
    g: &Graph,
    kernel: &Kernel,
    place: &dyn Fn(NodeId) -> Option<Place>,
) -> Result<Vec<Shader>, (String, NodeId)> {
    let first = kernel.nodes.first().copied().unwrap_or(NodeId::new(0));
    let refuse = |n: NodeId| {
        let node = g.node(n);
        (format!("no GPU kernel for `{}` on {}", node.op.name(), node.ty), n)
    };
    if let Some(&n) = stored(kernel).iter().find(|&&n| !on_device(g.node(n).ty.dtype)) {
        return Err(refuse(n));
    }
    // A loop has no shaders of its own: the unit records its body's for
    // every step (the plan puts it on the host when its body needs that).
    if let Some(n) = scan_of(g, kernel) {
        return match g.inputs(n).iter().all(|&i| on_device(g.node(i).ty.dtype)) {
            true => Ok(Vec::new()),
            false => Err(refuse(n)),
        };
    }
    // A value of the kernel that is not stored has no place.
    let inside: Vec<NodeId> = kernel.nodes.clone();
    let kept = stored(kernel);
    let place = |n: NodeId| match inside.contains(&n) && !kept.contains(&n) {
        true => None,
        false => place(n),
    };
    let part = |p: &Part| -> Result<Shader, (String, NodeId)> {
        let label = format!("{:?} of {}", p.role, g.node(first).op.name()).to_lowercase();
        let spec = p.spec.as_ref().ok_or_else(|| refuse(p.nodes.first().copied().unwrap_or(first)))?;
        elementwise::shader(spec, &place, &label).ok_or_else(|| refuse(p.nodes.first().copied().unwrap_or(first)))
    };
    use crate::ir::kernel_desc::PartRole;
    let mut out = Vec::new();
    for p in kernel.desc.parts.iter().filter(|p| p.role == PartRole::Prologue) {
        out.push(part(p)?);
    }
    match (&kernel.kind, &kernel.desc.anchor) {
        (KernelKind::Source, _) => return Ok(Vec::new()),
        (KernelKind::Elementwise, _) | (KernelKind::Reduction, None) => {}
        (_, None) => return Err(refuse(first)),
        (_, Some(anchor)) => out
            .push(anchor_shader(g, &anchor.op, anchor.node, anchor.dtype, &place).ok_or_else(|| refuse(anchor.node))?),
    }
    for p in kernel.desc.parts.iter().filter(|p| p.role != PartRole::Prologue) {
        out.push(part(p)?);
    }
    Ok(out)
}

fn anchor_shader(
    g: &Graph,
    op: &AnchorOp,
    node: NodeId,
    dtype: DType,
    place: &dyn Fn(NodeId) -> Option<Place>,
) -> Option<Shader> {
    let inputs = g.inputs(node);
    let label = format!("{} {}", g.node(node).op.name(), g.node(node).ty);
    let operand = |i: usize| place(*inputs.get(i)?);
    let value_type = |i: usize| inputs.get(i).map(|&n| g.node(n).ty.dtype);
    let index_type = |i: usize| value_type(i) == Some(DType::I32);
    let out = place(node)?;
    let round = super::wgsl::rounding(g.node(node).ty.dtype);
    match op {
        AnchorOp::MatMul { batch, m, k, n } if float(dtype) => {
            let (a, b) = (&g.node(inputs[0]).ty.shape, &g.node(*inputs.get(1)?).ty.shape);
            // Each operand's batch dims are the product's, or it has none.
            let stride = |shape: &[usize], words: usize| match shape.len() {
                2 => Some(0),
                r if r >= 2 && shape[..r - 2].iter().product::<usize>() == *batch => Some(words),
                _ => None,
            };
            let words = [stride(a, m * k)?, stride(b, k * n)?];
            anchors::matmul(*batch, *m, *k, *n, [operand(0)?, operand(1)?, out], words, round, &label)
        }
        AnchorOp::Reduce { op, shape, axes } if value_type(0).is_some_and(|d| float(d) || d == DType::I32) => {
            anchors::reduce(*op, index_type(0), shape, axes, [operand(0)?, out], round, &label)
        }
        AnchorOp::ArgMax { shape, axis } if value_type(0).is_some_and(|d| float(d) || d == DType::I32) => {
            anchors::argmax(shape, *axis, index_type(0), [operand(0)?, out], &label)
        }
        AnchorOp::Transpose { shape, perm } if on_device(dtype) => {
            anchors::transpose(shape, perm, [operand(0)?, out], &label)
        }
        AnchorOp::Slice { shape, start, step, len } if on_device(dtype) => {
            anchors::slice(shape, start, step, len, [operand(0)?, out], &label)
        }
        AnchorOp::Pad { shape, low, high, value } if on_device(dtype) => {
            let fill = match dtype {
                DType::F32 => (*value as f32).to_bits(),
                DType::F16 => crate::half::round_f16(*value as f32).to_bits(),
                DType::BF16 => crate::half::round_bf16(*value as f32).to_bits(),
                DType::I32 => (*value as i32) as u32,
                _ => u32::from(*value != 0.0),
            };
            anchors::pad(shape, low, high, fill, [operand(0)?, out], &label)
        }
        AnchorOp::Concat { shapes, axis } if on_device(dtype) => {
            let parts = (0..shapes.len()).map(operand).collect::<Option<Vec<_>>>()?;
            anchors::concat(shapes, *axis, &parts, out, &label)
        }
        AnchorOp::Gather { table, indices, axis } if on_device(dtype) && index_type(1) => {
            anchors::gather(table, *axis, indices.iter().product(), [operand(0)?, operand(1)?, out], &label)
        }
        AnchorOp::ScatterAdd { indices, updates, axis, dim } if index_type(0) && value_type(1).is_some_and(float) => {
            let outer = updates.get(..*axis)?.iter().product();
            let inner = updates.get(axis + indices.len()..)?.iter().product();
            let count = indices.iter().product();
            anchors::scatter_add([outer, *dim, inner], count, [operand(0)?, operand(1)?, out], round, &label)
        }
        AnchorOp::Conv { pass, input, filter, output, stride, padding, dilation, groups } if float(dtype) => {
            let c = conv::Conv {
                pass: *pass,
                input: *input,
                filter: *filter,
                output: *output,
                stride: *stride,
                padding: *padding,
                dilation: *dilation,
                groups: *groups,
            };
            conv::conv(&c, [operand(0)?, operand(1)?, out], round, &label)
        }
        AnchorOp::Pool { grad, kind, input, size, stride, padding } if float(dtype) => {
            // The pooled size, from the forward result's shape (a gradient
            // reads it as its second operand).
            let pooled = match grad {
                false => g.node(node).ty.shape.clone(),
                true => g.node(*inputs.get(1)?).ty.shape.clone(),
            };
            let q = conv::Pool {
                grad: *grad,
                kind: *kind,
                input: *input,
                output: [*pooled.get(1)?, *pooled.get(2)?],
                size: *size,
                stride: *stride,
                padding: *padding,
            };
            let gy = if *grad { Some(operand(1)?) } else { None };
            conv::pool(&q, operand(0)?, gy, out, round, &label)
        }
        _ => None,
    }
}

/// Every shader of every GPU kernel of `program`'s regions, unit by unit
/// (`tfc build --emit wgsl`): the shaders the unit would compile, with each
/// value placed in order of first use (a unit's inputs and the values it
/// reads from outside in `io`, what it computes in `vals`); the words a
/// prepared unit uses differ only in those offsets.
pub fn listing(program: &crate::ir::Program) -> String {
    use super::wgsl::Buf;
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};
    use std::fmt::Write;
    let g = &program.graph;
    let mut out = String::new();
    let units = program.compiled.iter().flat_map(|c| &c.units).filter(|u| u.region.is_some());
    for unit in units {
        let in_unit: HashSet<NodeId> = unit.kernels.iter().flat_map(|k| k.nodes.iter().copied()).collect();
        let checks: Vec<NodeId> = unit.kernels.iter().filter_map(checked).collect();
        let placed: RefCell<(HashMap<NodeId, Place>, [u32; 2])> = RefCell::new((HashMap::new(), [0, 0]));
        let place = |n: NodeId| {
            let mut placed = placed.borrow_mut();
            let (known, next) = &mut *placed;
            if let Some(p) = known.get(&n) {
                return Some(*p);
            }
            let outside = !in_unit.contains(&n) || matches!(g.node(n).op, crate::ir::Op::Slot { .. });
            let (buf, at) = if outside { (Buf::Io, 0) } else { (Buf::Vals, 1) };
            let p = Place { buf, word: next[at] };
            // A checked anchor's error flag follows its value.
            let flag = u32::from(checks.contains(&n));
            next[at] += g.node(n).ty.numel().max(1) as u32 + flag;
            known.insert(n, p);
            Some(p)
        };
        let _ = writeln!(out, "// unit {}", unit.name);
        let order: Vec<usize> =
            if unit.order.is_empty() { (0..unit.kernels.len()).collect() } else { unit.order.clone() };
        for k in order {
            let kernel = &unit.kernels[k];
            if kernel.device != crate::ir::compiled::Device::Gpu {
                continue;
            }
            // What the kernel stores is placed first, in its order.
            stored(kernel).into_iter().for_each(|n| {
                place(n);
            });
            match shaders(g, kernel, &place) {
                Ok(list) => {
                    for s in list {
                        let _ = writeln!(
                            out,
                            "// k{k}: {} ({} x {} x {} workgroups)\n{}",
                            s.label,
                            s.groups[0],
                            s.groups[1],
                            s.groups[2],
                            body(&s.source)
                        );
                    }
                }
                Err((why, _)) => {
                    let _ = writeln!(out, "// k{k}: {why}");
                }
            }
        }
    }
    out
}

/// A shader without the prelude every shader shares (`wgsl::PRELUDE`).
fn body(source: &str) -> &str {
    source.strip_prefix(super::wgsl::PRELUDE).unwrap_or(source)
}
