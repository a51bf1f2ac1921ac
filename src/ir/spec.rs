//! Kernels described as data, for every backend: an elementwise kernel (or
//! the epilogue of a contraction, the prologue or epilogue of a reduction)
//! reduced to a loop nest over its iteration space, the loads it performs
//! with their storage kinds, one expression per member node and the stores
//! of its outputs. The CPU backend compiles a `Spec` with Cranelift
//! (`backend::cpu::codegen`); a GPU backend would emit a shader from the
//! same description.
//!
//! Contract: [`Spec::analyze`] accepts a group of member nodes that share one
//! flat iteration space of `N` elements (what `fuse` guarantees for an
//! `Elementwise` kernel and a contraction's epilogue) and returns `None`
//! when the group uses something no template covers (a cast that would
//! round twice, broadcasts into two different shapes); the backend then
//! runs the group on the reference interpreter. Every expression computes what the interpreter computes:
//! `f16`/`bf16` values compute in `f32` registers — a load widens them
//! (exact), every member of a half type rounds its result to that type
//! (`Expr::Round`, the interpreter's rounding after every op) and a store
//! narrows it (exact, as it is rounded already); `i32` and `i64`
//! arithmetic wraps; integer `/` and `^`, which can fail (division by zero,
//! a negative power), are listed in `Spec::fallible` and report the
//! interpreter's error; casts follow the interpreter's (`Expr::Convert`);
//! `f64` and `i64` values and fallible ops make the kernel one element at
//! a time (`Spec::scalar_only`). The loop nest is
//! `outer` dims (any number, their index computed once per row) around one
//! contiguous `inner` extent: every load is, over the inner extent, either
//! contiguous (`Inner::Contig`) or one value (`Inner::Splat`, a broadcast
//! along those dims), so the inner loop can run several lanes at a time
//! with a scalar tail.
//!
//! Example: `relu(h + broadcast_to(b, [64, 256]))` with `h: f32[64, 256]`,
//! `b: f32[256]` is `outer = [64]`, `inner = 256`, loads `h` (contiguous,
//! outer stride 256) and `b` (contiguous, outer stride 0), expressions
//! `load 0`, `load 1`, `add`, `relu`.

use crate::ir::{BinaryOp, DType, Graph, NodeId, Op, UnaryOp};
use std::collections::HashMap;

/// How a load advances along the inner extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Inner {
    /// One element per inner index.
    Contig,
    /// The same element for the whole inner extent.
    Splat,
}

/// One buffer read of the kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// The value read (a node outside the group).
    pub node: NodeId,
    /// Element stride of each outer dim.
    pub outer: Vec<usize>,
    pub inner: Inner,
    /// How the value is stored: `F32` (four bytes an element, also an
    /// `f16`/`bf16` value kept as its exact `f32`), `Mask` (a `bool`, one
    /// byte), `I32`, or `F16`/`BF16` (two bytes, widened on load).
    pub kind: Kind,
}

/// How an expression's value is represented: an `f32`, an `i32` (integer
/// arithmetic wraps, as the interpreter's) or a lane mask (a `bool` that
/// never leaves the kernel). `F16` and `BF16` are memory kinds of loads
/// and stores (two bytes an element, computed as `f32`), and the types
/// `Expr::Round` rounds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    F32,
    Mask,
    I32,
    F16,
    BF16,
    /// An `f64` (eight bytes): a kernel with one computes one element at a
    /// time (`Spec::scalar_only`).
    F64,
    /// An `i64` (eight bytes, wrapping arithmetic), scalar as `F64`.
    I64,
}

impl Kind {
    /// The memory kind of a value of `dtype` stored by its type, if the
    /// code generator reads and writes it.
    pub fn stored(dtype: DType) -> Option<Kind> {
        match dtype {
            DType::F32 => Some(Kind::F32),
            DType::Bool => Some(Kind::Mask),
            DType::I32 => Some(Kind::I32),
            DType::F16 => Some(Kind::F16),
            DType::BF16 => Some(Kind::BF16),
            DType::F64 => Some(Kind::F64),
            DType::I64 => Some(Kind::I64),
            // Quantized weights: read only by the int8 product kernels.
            DType::I8 => None,
        }
    }

    /// Whether values of this kind are integers (`i32`, `i64`).
    pub fn is_int(self) -> bool {
        matches!(self, Kind::I32 | Kind::I64)
    }
}

/// Whether `dtype` computes as `f32` in compiled code (`f32`, or a half
/// type rounded after every op).
pub fn computes_as_f32(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// One member's computation; operands are indices of earlier expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    Load(usize),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    Select(usize, usize, usize),
    /// The operand converted to this kind, as the interpreter casts:
    /// `bool → f32 | i32` is 1 where true, `f32 | i32 → bool` is `x != 0`
    /// (NaN is true), `i32 → f32` rounds to nearest, `f32 → i32` truncates
    /// and saturates (NaN is 0).
    Convert(Kind, usize),
    /// `one_hot`: 1.0 where the label (an `f32` expression) equals the
    /// position along the inner extent, which is exactly the class axis.
    OneHot(usize),
    /// The `f32` nearest the operand that `F16` or `BF16` represents (ties
    /// to even, overflow to infinity: `crate::half`).
    Round(Kind, usize),
    /// The operand (an `f64`, `i32` or `i64`) as an `f32` rounded to odd
    /// (`crate::half::f64_to_f32_odd`), so that the `Round` to a half type
    /// that follows is the only rounding that counts, as in the
    /// interpreter's cast; scalar code (`Spec::scalar_only`).
    ToOddF32(usize),
    /// Element `i` (the flat index) of a `random` op's stream, as the `f32`
    /// its dtype's value goes through (`poly::random`); with a counter
    /// operand (an `f32` expression: dropout's training step), the stream
    /// of the seed derived from both (`ir::random_seed`).
    Random {
        dtype: DType,
        dist: crate::ir::Distribution,
        seed: u64,
        counter: Option<usize>,
    },
    /// `iota`: the flat index's coordinate along an axis, `i / stride %
    /// size`, as an `F32` (exact: `size` is at most 2^24) or an `I32`.
    Iota {
        stride: usize,
        size: usize,
    },
}

/// A convolution epilogue its kernel applies in registers
/// (`Spec::channel_post_ops`): `select(other > 0, relu(y + bias), 0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelPostOps {
    /// The per-channel bias added first.
    pub bias: Option<NodeId>,
    pub relu: bool,
    /// `other`: where it is not above zero (or NaN), the result is `+0`.
    pub keep_where_positive: Option<NodeId>,
}

/// A compilable elementwise loop nest.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub outer: Vec<usize>,
    pub inner: usize,
    pub loads: Vec<Load>,
    pub exprs: Vec<(Expr, Kind)>,
    /// Expression index of each output, in the order of `output_nodes`.
    pub outputs: Vec<usize>,
    pub output_nodes: Vec<NodeId>,
    /// How each output is stored (`F32`, `Mask`, `F16`, `BF16`).
    pub stores: Vec<Kind>,
    /// The expressions that can fail at run time (integer `/` and `^`,
    /// `INT_FALLIBLE`), with the node each computes, in expression order:
    /// the first failing one (then the first failing index) is the error
    /// the interpreter reports.
    pub fallible: Vec<(usize, NodeId)>,
}

fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The element strides of `input` broadcast (NumPy rules, right-aligned)
/// to `out`.
fn broadcast_strides(input: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    let shift = out.len().checked_sub(input.len())?;
    let rm = row_major(input);
    Some((0..out.len()).map(|d| if d < shift || input[d - shift] == 1 { 0 } else { rm[d - shift] }).collect())
}

/// The `f32` unary ops with a code template.
pub const FLOAT_UNARY: &[UnaryOp] = &[
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Relu,
    UnaryOp::Floor,
    UnaryOp::Sign,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Ceil,
    UnaryOp::Round,
    UnaryOp::Log1p,
    UnaryOp::Expm1,
    UnaryOp::Erf,
];

/// The integer unary ops with a code template (wrapping, as the interpreter's).
pub const INT_UNARY: &[UnaryOp] = &[UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Sign];

/// The integer binary ops with a code template (wrapping).
pub const INT_BINARY: &[BinaryOp] =
    &[BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::Minimum];

/// The integer binary ops that can fail (floor division by zero, a
/// negative power): compiled code computes them by the interpreter's own
/// function and reports its error (`Spec::fallible`).
pub const INT_FALLIBLE: &[BinaryOp] = &[BinaryOp::Div, BinaryOp::Pow, BinaryOp::Mod];

/// The `f32` arithmetic binary ops with a code template (`pow` calls the
/// same libm `powf` the interpreter does, lane by lane, as `sin` and `cos`
/// call theirs).
pub const FLOAT_BINARY: &[BinaryOp] = &[
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
    BinaryOp::Pow,
    BinaryOp::Mod,
];

impl Spec {
    /// The spec of `members` (in topological order) writing `outputs`, or
    /// `None` when the group needs the interpreter (see the module docs).
    pub fn analyze(g: &Graph, members: &[NodeId], outputs: &[NodeId]) -> Option<Spec> {
        let n = g.node(*members.first()?).ty.numel();
        let inside: HashMap<NodeId, usize> = members.iter().enumerate().map(|(i, &m)| (m, i)).collect();
        // The iteration shape: the shape every broadcast load is relative to.
        let mut shape: Option<&[usize]> = None;
        for &m in members {
            let node = g.node(m);
            if node.ty.numel() != n {
                return None;
            }
            // A one_hot's labels are broadcast along its class axis, so its
            // shape is the iteration shape.
            if let Op::OneHot { .. } = node.op {
                match shape {
                    Some(s) if s != node.ty.shape.as_slice() => return None,
                    _ => shape = Some(&node.ty.shape),
                }
            }
            if let Op::BroadcastTo { .. } = node.op {
                let src = g.inputs(m)[0];
                // (A scalar's broadcast reads one value in any shape.)
                let numel = g.node(src).ty.numel();
                if !inside.contains_key(&src) && numel != n && numel != 1 {
                    match shape {
                        Some(s) if s != node.ty.shape.as_slice() => return None,
                        _ => shape = Some(&node.ty.shape),
                    }
                }
            }
        }
        let shape: Vec<usize> = shape.map(<[usize]>::to_vec).unwrap_or_else(|| vec![n]);
        let contiguous = row_major(&shape);
        let mut loads: Vec<(NodeId, Vec<usize>)> = Vec::new();
        let mut exprs: Vec<(Expr, Kind)> = Vec::new();
        let mut value: HashMap<NodeId, usize> = HashMap::new();
        let mut one_hot_depth: Option<usize> = None;
        let mut fallible = Vec::new();
        let mut load = |exprs: &mut Vec<(Expr, Kind)>, node: NodeId, strides: Vec<usize>| -> Option<usize> {
            let kind = match Kind::stored(g.node(node).ty.dtype)? {
                k @ (Kind::Mask | Kind::I32 | Kind::F64 | Kind::I64) => k,
                _ => Kind::F32,
            };
            let li = match loads.iter().position(|(l, s)| *l == node && *s == strides) {
                Some(i) => i,
                None => {
                    loads.push((node, strides));
                    loads.len() - 1
                }
            };
            exprs.push((Expr::Load(li), kind));
            Some(exprs.len() - 1)
        };
        for &m in members {
            let node = g.node(m);
            let ins = g.inputs(m);
            let mut operand = |exprs: &mut Vec<(Expr, Kind)>, i: NodeId| -> Option<usize> {
                match value.get(&i) {
                    Some(&e) => Some(e),
                    None => load(exprs, i, contiguous.clone()),
                }
            };
            let kind_of = |exprs: &Vec<(Expr, Kind)>, e: usize| exprs[e].1;
            let dtype = node.ty.dtype;
            let e = match &node.op {
                Op::BroadcastTo { .. } | Op::Reshape { .. } => {
                    let src = ins[0];
                    match value.get(&src) {
                        Some(&e) => e,
                        None if g.node(src).ty.numel() == n || matches!(node.op, Op::Reshape { .. }) => {
                            load(&mut exprs, src, contiguous.clone())?
                        }
                        None if g.node(src).ty.numel() == 1 => load(&mut exprs, src, vec![0; shape.len()])?,
                        None => load(&mut exprs, src, broadcast_strides(&g.node(src).ty.shape, &shape)?)?,
                    }
                }
                Op::Unary(u) => {
                    let x = operand(&mut exprs, ins[0])?;
                    let kind = match (kind_of(&exprs, x), u) {
                        (Kind::F32, u) if FLOAT_UNARY.contains(u) && computes_as_f32(dtype) => Kind::F32,
                        (Kind::Mask, UnaryOp::Not) => Kind::Mask,
                        (k, u) if INT_UNARY.contains(u) && k.is_int() && Kind::stored(dtype) == Some(k) => k,
                        (Kind::F64, u) if FLOAT_UNARY.contains(u) => Kind::F64,
                        _ => return None,
                    };
                    exprs.push((Expr::Unary(*u, x), kind));
                    exprs.len() - 1
                }
                Op::Binary(b) => {
                    let x = operand(&mut exprs, ins[0])?;
                    let y = operand(&mut exprs, ins[1])?;
                    let kind = match (kind_of(&exprs, x), kind_of(&exprs, y)) {
                        (Kind::F32, Kind::F32) if FLOAT_BINARY.contains(b) && computes_as_f32(dtype) => Kind::F32,
                        (Kind::F32, Kind::F32) if b.is_comparison() => Kind::Mask,
                        (Kind::Mask, Kind::Mask) if b.is_logical() => Kind::Mask,
                        (k, l) if k.is_int() && k == l && b.is_comparison() => Kind::Mask,
                        (k, l) if k.is_int() && k == l && Kind::stored(dtype) == Some(k) => {
                            if INT_FALLIBLE.contains(b) {
                                fallible.push((exprs.len(), m));
                            } else if !INT_BINARY.contains(b) {
                                return None;
                            }
                            k
                        }
                        (Kind::F64, Kind::F64) if FLOAT_BINARY.contains(b) => Kind::F64,
                        (Kind::F64, Kind::F64) if b.is_comparison() => Kind::Mask,
                        _ => return None,
                    };
                    exprs.push((Expr::Binary(*b, x, y), kind));
                    exprs.len() - 1
                }
                Op::OneHot { depth, dtype: to } => {
                    // Labels computed outside the kernel, one per row of
                    // classes; the class axis is the last one, and alone
                    // the inner extent (checked below).
                    let labels = ins[0];
                    let int_labels = matches!(g.node(labels).ty.dtype, DType::I32 | DType::I64);
                    if value.contains_key(&labels) || !int_labels || *depth >= 1 << 24 {
                        return None;
                    }
                    let mut strides = row_major(&g.node(labels).ty.shape);
                    strides.push(0);
                    one_hot_depth = Some(*depth);
                    let x = load(&mut exprs, labels, strides)?;
                    exprs.push((Expr::Convert(Kind::F32, x), Kind::F32));
                    exprs.push((Expr::OneHot(exprs.len() - 1), Kind::F32));
                    // Its 1.0 and 0.0 convert exactly to any other dtype.
                    match Kind::stored(*to)? {
                        Kind::F32 | Kind::F16 | Kind::BF16 => {}
                        k => exprs.push((Expr::Convert(k, exprs.len() - 1), k)),
                    }
                    exprs.len() - 1
                }
                Op::Iota { ty, axis } if *axis < ty.rank() && ty.shape[*axis] <= 1 << 24 => {
                    let kind = match ty.dtype {
                        DType::I32 => Kind::I32,
                        DType::I64 => Kind::I64,
                        d if computes_as_f32(d) => Kind::F32,
                        _ => return None,
                    };
                    let stride = row_major(&ty.shape)[*axis];
                    exprs.push((Expr::Iota { stride, size: ty.shape[*axis] }, kind));
                    exprs.len() - 1
                }
                Op::Random { ty, dist, seed } if computes_as_f32(ty.dtype) || ty.dtype == DType::F64 => {
                    // The counter is a scalar: read at every index.
                    let counter = match ins.first() {
                        Some(&c) => {
                            let e = match value.get(&c) {
                                Some(&e) => e,
                                None => load(&mut exprs, c, broadcast_strides(&g.node(c).ty.shape, &shape)?)?,
                            };
                            Some(e).filter(|&e| kind_of(&exprs, e) == Kind::F32)
                        }
                        None => None,
                    };
                    if counter.is_none() && !ins.is_empty() {
                        return None;
                    }
                    let kind = if ty.dtype == DType::F64 { Kind::F64 } else { Kind::F32 };
                    exprs.push((Expr::Random { dtype: ty.dtype, dist: *dist, seed: *seed, counter }, kind));
                    exprs.len() - 1
                }
                Op::Select => {
                    let c = operand(&mut exprs, ins[0])?;
                    let x = operand(&mut exprs, ins[1])?;
                    let y = operand(&mut exprs, ins[2])?;
                    let kind = match (kind_of(&exprs, c), kind_of(&exprs, x), kind_of(&exprs, y)) {
                        (Kind::Mask, Kind::F32, Kind::F32) if computes_as_f32(dtype) => Kind::F32,
                        (Kind::Mask, k, l) if k.is_int() && k == l && Kind::stored(dtype) == Some(k) => k,
                        (Kind::Mask, Kind::F64, Kind::F64) => Kind::F64,
                        (Kind::Mask, Kind::Mask, Kind::Mask) => Kind::Mask,
                        _ => return None,
                    };
                    exprs.push((Expr::Select(c, x, y), kind));
                    exprs.len() - 1
                }
                Op::Cast(to) => {
                    let x = operand(&mut exprs, ins[0])?;
                    let from = g.node(ins[0]).ty.dtype;
                    let to_kind = match to {
                        DType::Bool => Kind::Mask,
                        DType::I32 => Kind::I32,
                        DType::I64 => Kind::I64,
                        DType::F64 => Kind::F64,
                        _ => Kind::F32,
                    };
                    match (kind_of(&exprs, x), to) {
                        (k, _) if k == to_kind && (*to == from || computes_as_f32(from)) => {
                            // The same type, or widening to `f32`: exact;
                            // narrowing: the member's rounding below.
                            x
                        }
                        // An integer to `bf16`, or an `f64` to a half type,
                        // would round twice through a nearest `f32`; through
                        // the `f32` rounded to odd, the member's rounding
                        // below is the only one. (An integer to `f16`
                        // rounds once either way: its `f32` is exact up to
                        // 2^24, and every value from 65,520 on is `inf` in
                        // `f16`.)
                        (Kind::I32 | Kind::I64, DType::BF16) | (Kind::F64, DType::F16 | DType::BF16) => {
                            exprs.push((Expr::ToOddF32(x), Kind::F32));
                            exprs.len() - 1
                        }
                        (Kind::F32 | Kind::I32 | Kind::I64 | Kind::Mask | Kind::F64, _) => {
                            exprs.push((Expr::Convert(to_kind, x), to_kind));
                            exprs.len() - 1
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            };
            let expect = match dtype {
                DType::Bool => Kind::Mask,
                DType::I32 => Kind::I32,
                DType::I64 => Kind::I64,
                DType::F64 => Kind::F64,
                d if computes_as_f32(d) => Kind::F32,
                _ => return None,
            };
            if kind_of(&exprs, e) != expect {
                return None;
            }
            // A half-precision result is rounded as the interpreter rounds
            // after every op; moving a value (a reshape, a broadcast, the
            // cast of a value of the same type) keeps its exact bits.
            let same_type = |n: NodeId| g.node(n).ty.dtype == dtype;
            // (A member whose value is a load moves its first operand.)
            let moved = match exprs[e].0 {
                Expr::Load(_) => same_type(ins[0]),
                _ => ins.iter().any(|&i| value.get(&i) == Some(&e) && same_type(i)),
            };
            let e = match Kind::stored(dtype) {
                Some(k @ (Kind::F16 | Kind::BF16)) if !moved => {
                    exprs.push((Expr::Round(k, e), Kind::F32));
                    exprs.len() - 1
                }
                _ => e,
            };
            value.insert(m, e);
        }
        let mut outs = Vec::new();
        for o in outputs {
            outs.push(*value.get(o)?);
        }
        let (outer, inner, mut loads) = split(&shape, loads);
        if one_hot_depth.is_some_and(|d| d != inner) {
            return None;
        }
        for l in &mut loads {
            l.kind = Kind::stored(g.node(l.node).ty.dtype)?;
        }
        let stores = outputs.iter().map(|&o| Kind::stored(g.node(o).ty.dtype)).collect::<Option<Vec<_>>>()?;
        let output_nodes = outputs.to_vec();
        Some(Spec { outer, inner, loads, exprs, outputs: outs, output_nodes, stores, fallible })
    }

    /// Whether the kernel computes one element at a time: it has `f64` or
    /// `i64` values (the vector code is four 32-bit lanes wide), ops that
    /// can fail (each element's call reports its own index) or casts
    /// rounded to odd (one call an element).
    pub fn scalar_only(&self) -> bool {
        let wide = |k: &Kind| matches!(k, Kind::F64 | Kind::I64);
        self.exprs.iter().any(|(e, k)| wide(k) || matches!(e, Expr::ToOddF32(_)))
            || self.loads.iter().any(|l| wide(&l.kind))
            || self.stores.iter().any(wide)
            || !self.fallible.is_empty()
    }

    /// The elements of the iteration space.
    pub fn numel(&self) -> usize {
        self.rows() * self.inner
    }

    /// The rows of the outer dims (one when there are none).
    pub fn rows(&self) -> usize {
        self.outer.iter().product()
    }

    /// The same kernel over rows of `block` elements when it has no outer
    /// dims and `block` divides its extent: rows are what a threaded run
    /// splits, and a flat kernel has only one. Unchanged otherwise.
    pub fn in_rows_of(mut self, block: usize) -> Spec {
        if !self.outer.is_empty() || block == 0 || self.inner <= block || !self.inner.is_multiple_of(block) {
            return self;
        }
        // A one_hot's inner extent is its class axis; it stays whole.
        if self.exprs.iter().any(|(e, _)| matches!(e, Expr::OneHot(_))) {
            return self;
        }
        self.outer = vec![self.inner / block];
        self.inner = block;
        for l in &mut self.loads {
            l.outer = vec![if l.inner == Inner::Contig { block } else { 0 }];
        }
        self
    }

    /// Whether element `i` of the iteration reads element `i` of `load`.
    pub fn reads_at_index(&self, load: &Load) -> bool {
        let mut stride = self.inner;
        let mut ok = load.inner == Inner::Contig || self.inner == 1;
        for (&s, &d) in load.outer.iter().zip(&self.outer).rev() {
            ok &= s == stride || d == 1;
            stride *= d;
        }
        ok
    }

    /// The spec as `select(other > 0, relu(product + bias), 0)`, each part
    /// optional, with one bias value per position of an inner extent of
    /// `channels` (a layer's bias along its channel axis), `other` another
    /// value read at the output's index (a ReLU's mask, `pool_mask`; not the
    /// product, which the kernel reads before storing it) and no other
    /// output: what a kernel computing `product` can apply before its store
    /// (`conv_direct::PostOps`). `is_zero(node)`: whether a load's node is
    /// `+0` everywhere. `None` for any other epilogue. Other expressions
    /// feed no output, so they do not matter.
    pub fn channel_post_ops(
        &self,
        product: NodeId,
        channels: usize,
        is_zero: impl Fn(NodeId) -> bool,
    ) -> Option<ChannelPostOps> {
        let [out] = self.outputs[..] else { return None };
        let at_index = |e: usize| self.load_of(e).filter(|l| l.kind == Kind::F32 && self.reads_at_index(l));
        let is_product = |e: usize| at_index(e).is_some_and(|l| l.node == product);
        let zero = |e: usize| self.load_of(e).is_some_and(|l| is_zero(l.node));
        let (kept, keep_where_positive) = match self.exprs[out].0 {
            Expr::Select(condition, kept, otherwise) if zero(otherwise) => match self.exprs[condition].0 {
                Expr::Binary(BinaryOp::Gt, other, z) if zero(z) && !is_product(other) => {
                    (kept, Some(at_index(other)?.node))
                }
                _ => return None,
            },
            _ => (out, None),
        };
        let (_, relu, bias) = self.biased_relu(kept, is_product, channels)?;
        Some(ChannelPostOps { bias, relu, keep_where_positive })
    }

    /// The load expression `e` reads, if it is one.
    pub fn load_of(&self, e: usize) -> Option<&Load> {
        match self.exprs[e].0 {
            Expr::Load(l) => Some(&self.loads[l]),
            _ => None,
        }
    }

    /// Expression `e` as `relu(s)` or `s`, with `s = p + bias` (either
    /// order) or `p`, where `p` is the product (`is_product`) and `bias`
    /// an `f32` load with one value per position of an inner extent of
    /// `channels`: `(s, relu, bias)`, or `None`. (A product's epilogue
    /// that a kernel applies as it stores, `channel_post_ops` and
    /// `bf16_epilogue`.)
    pub fn biased_relu(
        &self,
        e: usize,
        is_product: impl Fn(usize) -> bool,
        channels: usize,
    ) -> Option<(usize, bool, Option<NodeId>)> {
        let per_channel = |e: usize| {
            let along_channels = |l: &&Load| l.inner == Inner::Contig && l.outer.iter().all(|&s| s == 0);
            self.load_of(e).filter(|l| l.kind == Kind::F32 && self.inner == channels && along_channels(l))
        };
        let (sum, relu) = match self.exprs[e].0 {
            Expr::Unary(UnaryOp::Relu, x) => (x, true),
            _ => (e, false),
        };
        let bias = match self.exprs[sum].0 {
            Expr::Binary(BinaryOp::Add, x, y) => {
                let (p, b) = if is_product(x) { (x, y) } else { (y, x) };
                Some(per_channel(b).filter(|_| is_product(p))?.node)
            }
            _ if is_product(sum) => None,
            _ => return None,
        };
        Some((sum, relu, bias))
    }

    /// A key equal for two specs exactly when they compile to the same code
    /// (node ids do not matter, strides and expressions do).
    pub fn signature(&self) -> String {
        let loads: Vec<(&Vec<usize>, Inner, Kind)> = self.loads.iter().map(|l| (&l.outer, l.inner, l.kind)).collect();
        // The row count and the inner extent are arguments of the compiled
        // function, so kernels that differ only in size share code.
        format!("{:?}|{:?}|{:?}|{:?}|{:?}", self.outer.get(1..), loads, self.exprs, self.outputs, self.stores)
    }
}

/// Splits `shape` into outer dims and the longest inner suffix over which
/// every load is contiguous or constant.
fn split(shape: &[usize], loads: Vec<(NodeId, Vec<usize>)>) -> (Vec<usize>, usize, Vec<Load>) {
    let k = shape.len();
    let contiguous = row_major(shape);
    let mut p = k;
    // The inner mode each load has over dims p..k (None: not decided yet).
    let mut modes: Vec<Option<Inner>> = vec![None; loads.len()];
    while p > 0 {
        let d = p - 1;
        let mut next = modes.clone();
        let ok = loads.iter().zip(next.iter_mut()).all(|((_, s), mode)| {
            if shape[d] == 1 {
                return true;
            }
            let here = if s[d] == 0 {
                Inner::Splat
            } else if s[d] == contiguous[d] {
                Inner::Contig
            } else {
                return false;
            };
            match mode {
                Some(m) if *m != here => false,
                _ => {
                    *mode = Some(here);
                    true
                }
            }
        });
        // A contiguous load must be contiguous from the innermost dim on.
        if !ok {
            break;
        }
        modes = next;
        p = d;
    }
    let inner = shape[p..].iter().product();
    let mut loads: Vec<Load> = loads
        .into_iter()
        .zip(modes)
        .map(|((node, s), mode)| Load {
            node,
            outer: s[..p].to_vec(),
            inner: mode.unwrap_or(Inner::Splat),
            kind: Kind::F32,
        })
        .collect();
    let outer = merge_outer(shape[..p].to_vec(), &mut loads);
    (outer, inner, loads)
}

/// Merges adjacent outer dims that every load steps through as one (its
/// stride of the first is the second's times the second's extent, zero
/// included), so that a row's offsets need fewer divisions: the rows of a
/// bias added to a `[64, 28, 28, 16]` product are one dim of 50,176.
fn merge_outer(mut outer: Vec<usize>, loads: &mut [Load]) -> Vec<usize> {
    let mut d = outer.len();
    while d >= 2 {
        d -= 1;
        let one = loads.iter().all(|l| l.outer[d - 1] == l.outer[d] * outer[d]);
        if one {
            outer[d - 1] *= outer[d];
            outer.remove(d);
            for l in loads.iter_mut() {
                l.outer.remove(d - 1);
            }
        }
    }
    outer
}

#[cfg(test)]
mod tests {
    use super::{split, ChannelPostOps, Expr, Inner, Kind, Load, Spec};
    use crate::ir::{BinaryOp, NodeId, UnaryOp};

    /// `select(other > zero, relu(product + bias), zero)` over `[6, 4]`
    /// (nodes: product 0, bias 1, other 2, zero 3), with `other` replaced
    /// by `mask_of` when given.
    fn epilogue(mask_of: usize) -> Spec {
        let load = |node: usize, outer: usize, inner: Inner| Load {
            node: NodeId::new(node),
            outer: vec![outer],
            inner,
            kind: Kind::F32,
        };
        let loads = vec![
            load(0, 4, Inner::Contig),
            load(1, 0, Inner::Contig),
            load(mask_of, 4, Inner::Contig),
            load(3, 0, Inner::Splat),
        ];
        use Expr::{Binary as B, Load as L};
        let exprs = [L(0), L(1), B(BinaryOp::Add, 0, 1), Expr::Unary(UnaryOp::Relu, 2), L(2), L(3)];
        let mut exprs: Vec<(Expr, Kind)> = exprs.into_iter().map(|e| (e, Kind::F32)).collect();
        exprs.push((B(BinaryOp::Gt, 4, 5), Kind::Mask));
        exprs.push((Expr::Select(6, 3, 5), Kind::F32));
        let stores = vec![Kind::F32];
        let output_nodes = vec![NodeId::new(9)];
        Spec { outer: vec![6], inner: 4, loads, exprs, outputs: vec![7], output_nodes, stores, fallible: vec![] }
    }

    /// The convolution post-ops are recognized with their operands; the
    /// mask must be another value than the product (which the kernel reads
    /// before storing it), its zeros `+0`, and the bias along the channels.
    #[test]
    fn channel_post_ops_take_bias_relu_and_a_mask_of_another_value() {
        let (product, zero) = (NodeId::new(0), |n: NodeId| n == NodeId::new(3));
        let full = ChannelPostOps { bias: Some(NodeId::new(1)), relu: true, keep_where_positive: Some(NodeId::new(2)) };
        assert_eq!(epilogue(2).channel_post_ops(product, 4, zero), Some(full));
        assert_eq!(epilogue(0).channel_post_ops(product, 4, zero), None);
        assert_eq!(epilogue(2).channel_post_ops(product, 4, |_| false), None);
        assert_eq!(epilogue(2).channel_post_ops(product, 8, zero), None);
        // The ReLU and bias alone (the select's operand as the output).
        let mut relu_only = epilogue(2);
        relu_only.outputs = vec![3];
        let plain = ChannelPostOps { keep_where_positive: None, ..full };
        assert_eq!(relu_only.channel_post_ops(product, 4, zero), Some(plain));
    }

    /// A bias broadcast over a `[64, 28, 28, 16]` product: the three outer
    /// dims are one for both loads (strides 16 and 0), so a row's offsets
    /// need no division; a load that steps through the middle dim on its
    /// own keeps the dims apart.
    #[test]
    fn outer_dims_merge_only_when_every_load_steps_through_them_as_one() {
        let (z, b) = (NodeId::new(0), NodeId::new(1));
        let (outer, inner, loads) = split(&[64, 28, 28, 16], vec![(z, vec![12544, 448, 16, 1]), (b, vec![0, 0, 0, 1])]);
        assert_eq!((outer, inner), (vec![50176], 16));
        assert_eq!((loads[0].outer.clone(), loads[0].inner), (vec![16], Inner::Contig));
        assert_eq!((loads[1].outer.clone(), loads[1].inner), (vec![0], Inner::Contig));
        let (outer, inner, loads) = split(&[2, 3, 5], vec![(z, vec![15, 5, 1]), (b, vec![0, 1, 0])]);
        assert_eq!((outer, inner), (vec![2, 3], 5));
        assert_eq!((loads[0].outer.clone(), loads[1].outer.clone()), (vec![15, 5], vec![0, 1]));
    }
}
