//! The closed set of primitive operations (§10 of the language reference).
//!
//! Every op is plain data: its attributes are fields, its operands are the
//! node's ordered inputs. Composite functions (softmax, layer_norm, …) are
//! written in `std/*.tfl` and lower to these. Anything a later backend needs
//! to know about an op is a method here, never a downcast.

use super::types::{DType, TensorType};

/// Elementwise unary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Relu,
    Sin,
    Cos,
    Floor,
    Sign,
    Ceil,
    /// To the nearest integer, halves to even (NumPy's `round`).
    Round,
    /// `log(1 + x)`, accurate for small `x`.
    Log1p,
    /// `exp(x) - 1`, accurate for small `x`.
    Expm1,
    /// The error function.
    Erf,
    /// Logical not (bool only).
    Not,
}

/// Elementwise binary operations; operands have equal shapes and dtypes (the
/// tracer inserts `BroadcastTo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// The remainder of floor division, `a - floor(a / b) * b`, with the sign
    /// of `b` (Python's and NumPy's `%`); integer `% 0` is a run-time error.
    Mod,
    Pow,
    Maximum,
    Minimum,
    /// Comparisons produce `bool`.
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Logical (bool only).
    And,
    Or,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge)
    }

    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    /// The product (`prod`); 1 over no elements.
    Prod,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Max,
    /// Averages over the window positions inside the input (padding excluded).
    Avg,
}

/// Host literal data of a constant, row-major.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// Any float dtype; f16/bf16 values are already rounded to their type.
    Float(Vec<f64>),
    /// Any integer dtype.
    Int(Vec<i64>),
    Bool(Vec<bool>),
}

impl Literal {
    pub fn len(&self) -> usize {
        match self {
            Literal::Float(v) => v.len(),
            Literal::Int(v) => v.len(),
            Literal::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which random distribution a `Random` op samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Uniform on `[0, 1)`.
    Uniform,
    /// Standard normal.
    Normal,
}

/// The im2col rows of an NHWC convolution's input, which a quantized
/// convolution multiplies (`Op::QuantMatMul`): row `(n, oh, ow)` holds the
/// `kernel[0] · kernel[1] · C` values its window covers, taps `i`, `j`, `c`
/// in that order (HWIO's), 0 where the window is in the `padding` (`[top,
/// bottom, left, right]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Patches {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 4],
    pub dilation: [usize; 2],
}

impl Patches {
    /// The shape of the patches of an NHWC input of shape `x`: `[N, OH,
    /// OW, KH · KW · C]`; `None` when the window does not fit.
    pub fn rows_shape(&self, x: &[usize]) -> Option<[usize; 4]> {
        let &[n, h, w, c] = x else { return None };
        let window = super::infer::window_output;
        let oh = window(h, self.kernel[0], self.stride[0], self.dilation[0], self.padding[0] + self.padding[1])?;
        let ow = window(w, self.kernel[1], self.stride[1], self.dilation[1], self.padding[2] + self.padding[3])?;
        Some([n, oh, ow, self.kernel[0] * self.kernel[1] * c])
    }
}

/// A primitive operation. Output dtype and shape are on the node.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A value supplied by the runtime (0 inputs): a per-step input of a
    /// region (a batch, a parameter inside a training step) or the result of
    /// an effect that ran earlier (trained parameters, a metric).
    Slot {
        slot: usize,
        ty: TensorType,
    },
    /// A literal tensor (0 inputs).
    Constant {
        value: Literal,
        ty: TensorType,
    },
    /// `0, 1, 2, …` along `axis`, broadcast over `ty`'s shape (0 inputs).
    Iota {
        ty: TensorType,
        axis: usize,
    },
    /// Counter-based random numbers: the value at flat index `i` depends only on
    /// `(seed, i)`, so results are identical at any thread count (0 inputs).
    /// With one input, a scalar counter `c` (dropout passes the training
    /// step), the stream is that of `rng::derive_seed(seed, "counter c")`:
    /// a fresh draw for every counter value (see `random_seed`).
    Random {
        ty: TensorType,
        dist: Distribution,
        seed: u64,
    },
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `where(cond, a, b)`: inputs (bool cond, a, b), equal shapes.
    Select,
    Cast(DType),
    /// Reduce over `axes` (sorted, unique); `keepdims` keeps them as size 1.
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keepdims: bool,
    },
    /// Index of the (first) maximum along `axis`, as i32.
    ArgMax {
        axis: usize,
        keepdims: bool,
    },
    /// Running sums along `axis` (`cumsum`): element `k` adds elements
    /// `0..=k` in order; with `reverse`, elements `k..n` from the end.
    CumSum {
        axis: usize,
        reverse: bool,
    },
    /// The permutation (as i32 indices) that sorts each lane along `axis`,
    /// stably: ties keep their order; NaN orders above every number.
    /// `sort` and `top_k` gather their values with it.
    ArgSort {
        axis: usize,
        descending: bool,
    },
    /// Same elements, new shape.
    Reshape {
        shape: Vec<usize>,
    },
    /// Output dim `i` is input dim `perm[i]`.
    Transpose {
        perm: Vec<usize>,
    },
    /// NumPy broadcast of the input to `shape` (input rank ≤ output rank).
    BroadcastTo {
        shape: Vec<usize>,
    },
    /// Concatenate all inputs along `axis`.
    Concat {
        axis: usize,
    },
    /// Per dimension `i`: the `len[i]` elements `start[i] + k·step[i]`; `step`
    /// may be negative but never zero, and every index lies inside the input.
    Slice {
        start: Vec<usize>,
        step: Vec<i64>,
        len: Vec<usize>,
    },
    /// Pad with `value`: `low[i]` before and `high[i]` after dimension `i`.
    Pad {
        low: Vec<usize>,
        high: Vec<usize>,
        value: f64,
    },
    /// `a @ b` over identical batch dims: `[..., m, k] @ [..., k, n]`.
    MatMul,
    /// `x @ w` on int8 (a quantized model's dense layer, §9): operands
    /// `(x: f32[..., k], w: i8[k, n], w_scale: f32[n])` and an optional
    /// static input range `f32[2]`; each row of `x` is quantized to `u8` on
    /// its own (`tensor::quant` defines it exactly). With `patches` it is a
    /// quantized convolution: `x: f32[N, H, W, C]` and `w: i8[KH, KW, C,
    /// O]`, the rows being `x`'s im2col patches (`Patches`).
    QuantMatMul {
        patches: Option<Patches>,
    },
    /// NHWC input, HWIO weights; explicit padding `[top, bottom, left, right]`.
    Conv2d {
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
    },
    /// NHWC pooling with window `size`, explicit padding `[top, bottom, left, right]`.
    Pool2d {
        kind: PoolKind,
        size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 4],
    },
    /// Integer indices → one-hot vectors of `depth` elements of `dtype` on a new last axis.
    OneHot {
        depth: usize,
        dtype: DType,
    },
    /// `gather(params, indices, axis)`: indices (integer) replace dim `axis`.
    Gather {
        axis: usize,
    },
    /// The gradient of `Conv2d` with respect to its input: operands
    /// `(gy, w)`, result of shape `input_shape` (a transposed convolution).
    Conv2dGradInput {
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
        input_shape: [usize; 4],
    },
    /// The gradient of `Conv2d` with respect to its weights: operands
    /// `(x, gy)`, result of shape `filter_shape`.
    Conv2dGradFilter {
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
        filter_shape: [usize; 4],
    },
    /// The gradient of `Pool2d`: operands `(x, gy)`, result shaped like `x`.
    /// Max pooling routes each window's gradient to its first maximum; average
    /// pooling spreads it over the window's in-bounds elements.
    Pool2dGrad {
        kind: PoolKind,
        size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 4],
    },
    /// The gradient of the float scalar operand 0 (a training step's loss)
    /// with respect to operand 1 (a parameter), of operand 1's type: a
    /// request the tracer leaves in the graph and the `autodiff` pass
    /// replaces by the nodes that compute it (`passes::autodiff`), before
    /// anything runs or is optimized.
    Gradient,
    /// Operand 0 unchanged, through which no gradient flows: the value a
    /// write to a model's `state` stores (§6), so that code reading the
    /// state after the write in a training step does not differentiate
    /// through the update. The `autodiff` lowering replaces it by its
    /// operand once the gradients are built (`autodiff::expand_requests`).
    StopGradient,
    /// The sum of operand 0 over the processes of a data-parallel run, on
    /// every process: a training step's gradients and loss, where the
    /// step is one region (`trace::train`'s fused data-parallel step).
    /// Every process must reach its all-reduces in the same order; they
    /// combine over a balanced tree of the ranks in order
    /// (`dist::Communicator`), so every process gets the same bits. In a
    /// process of its own (and wherever no collectives are given) it is
    /// the identity. Never folded, merged or moved across another
    /// all-reduce by a pass: its value depends on the other processes.
    AllReduce,
    /// The gradient of `Gather`: operands `(indices, updates)`; adds each
    /// update slice into zeros of size `dim` along `axis` at its index.
    ScatterAdd {
        axis: usize,
        dim: usize,
    },
    /// A loop of `body.length` steps over axis 0 of its scanned operands,
    /// threading a carry (`ir::scan`): operands are the initial carries, the
    /// scanned tensors and the captured values; the value is the packed
    /// final carries and stacked per-step outputs.
    Scan(std::sync::Arc<super::scan::ScanBody>),
}

impl Op {
    /// The op's name in the text IR.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Slot { .. } => "slot",
            Op::Constant { .. } => "constant",
            Op::Iota { .. } => "iota",
            Op::Random { dist: Distribution::Uniform, .. } => "random_uniform",
            Op::Random { dist: Distribution::Normal, .. } => "random_normal",
            Op::Unary(u) => match u {
                UnaryOp::Neg => "neg",
                UnaryOp::Abs => "abs",
                UnaryOp::Exp => "exp",
                UnaryOp::Log => "log",
                UnaryOp::Sqrt => "sqrt",
                UnaryOp::Rsqrt => "rsqrt",
                UnaryOp::Tanh => "tanh",
                UnaryOp::Sigmoid => "sigmoid",
                UnaryOp::Relu => "relu",
                UnaryOp::Sin => "sin",
                UnaryOp::Cos => "cos",
                UnaryOp::Floor => "floor",
                UnaryOp::Sign => "sign",
                UnaryOp::Ceil => "ceil",
                UnaryOp::Round => "round",
                UnaryOp::Log1p => "log1p",
                UnaryOp::Expm1 => "expm1",
                UnaryOp::Erf => "erf",
                UnaryOp::Not => "not",
            },
            Op::Binary(b) => match b {
                BinaryOp::Add => "add",
                BinaryOp::Sub => "sub",
                BinaryOp::Mul => "mul",
                BinaryOp::Div => "div",
                BinaryOp::Mod => "mod",
                BinaryOp::Pow => "pow",
                BinaryOp::Maximum => "maximum",
                BinaryOp::Minimum => "minimum",
                BinaryOp::Eq => "eq",
                BinaryOp::Ne => "ne",
                BinaryOp::Lt => "lt",
                BinaryOp::Le => "le",
                BinaryOp::Gt => "gt",
                BinaryOp::Ge => "ge",
                BinaryOp::And => "and",
                BinaryOp::Or => "or",
            },
            Op::Select => "select",
            Op::Cast(_) => "cast",
            Op::Reduce { op, .. } => match op {
                ReduceOp::Sum => "reduce_sum",
                ReduceOp::Mean => "reduce_mean",
                ReduceOp::Max => "reduce_max",
                ReduceOp::Min => "reduce_min",
                ReduceOp::Prod => "reduce_prod",
            },
            Op::ArgMax { .. } => "argmax",
            Op::CumSum { .. } => "cumsum",
            Op::ArgSort { .. } => "argsort",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::BroadcastTo { .. } => "broadcast_to",
            Op::Concat { .. } => "concat",
            Op::Slice { .. } => "slice",
            Op::Pad { .. } => "pad",
            Op::MatMul => "matmul",
            Op::QuantMatMul { patches: None } => "quant_matmul",
            Op::QuantMatMul { patches: Some(_) } => "quant_conv2d",
            Op::Conv2d { .. } => "conv2d",
            Op::Pool2d { kind: PoolKind::Max, .. } => "max_pool2d",
            Op::Pool2d { kind: PoolKind::Avg, .. } => "avg_pool2d",
            Op::OneHot { .. } => "one_hot",
            Op::Gather { .. } => "gather",
            Op::Conv2dGradInput { .. } => "conv2d_grad_input",
            Op::Conv2dGradFilter { .. } => "conv2d_grad_filter",
            Op::Pool2dGrad { kind: PoolKind::Max, .. } => "max_pool2d_grad",
            Op::Pool2dGrad { kind: PoolKind::Avg, .. } => "avg_pool2d_grad",
            Op::ScatterAdd { .. } => "scatter_add",
            Op::Gradient => "gradient",
            Op::StopGradient => "stop_gradient",
            Op::AllReduce => "all_reduce_sum",
            Op::Scan(_) => "scan",
        }
    }

    /// True for ops that map each output element from the same-index input
    /// elements (the fusible elementwise family).
    pub fn is_elementwise(&self) -> bool {
        matches!(self, Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Cast(_))
    }
}

/// The stream a `Random` op draws from: its seed, or with a counter operand
/// (the training step, for dropout) a seed derived from both, so that every
/// step draws a different mask while runs stay bit-for-bit reproducible.
pub fn random_seed(seed: u64, counter: Option<f64>) -> u64 {
    match counter {
        None => seed,
        Some(c) => crate::rng::derive_seed(seed, &format!("counter {}", c as u64)),
    }
}
