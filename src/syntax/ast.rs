//! The abstract syntax tree: owned, with a byte span on every node.
//!
//! The parser (`syntax::parse`) is the only code that sees pest types; every
//! later stage works on these types. Sugar is kept as written (pipes, method
//! calls) so diagnostics can point at what the user typed; the tracer
//! desugars it.

use crate::diag::Span;

/// An identifier with its span.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// A whole `.tfl` file: items and statements in source order.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub stmts: Vec<Stmt>,
}

/// A top-level item or statement.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
    /// Text of the `///` doc comments directly before the item, if any.
    pub doc: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `use std.nn.{Dense, Conv2d}` (group), `use std.loss.mse` (path only).
    Use {
        path: Vec<Ident>,
        group: Option<Vec<Ident>>,
    },
    /// `const N = 10`
    Const {
        name: Ident,
        ty: Option<TypeExpr>,
        value: Expr,
    },
    /// Shared (`Arc`) so that the tracer's closures and methods refer to
    /// the definition instead of copying its body at every definition and call.
    Fn(std::sync::Arc<FnDef>),
    /// `export fn …`: a function that is also written out by `tfc build`
    /// (`--emit onnx`), traced at the end of the program over its
    /// parameters' annotated types.
    Export(std::sync::Arc<FnDef>),
    Model(ModelDef),
    Optimizer(OptimizerDef),
    /// `let (a, b): T = value`
    Let {
        pattern: Pattern,
        ty: Option<TypeExpr>,
        value: Expr,
    },
    Train(TrainDef),
    /// `for i in 0..n { … }` at top level.
    For(ForLoop),
    /// Any expression statement, including `print(...)`, `save(...)`,
    /// `load(...)` and `assert_close(...)`, which are calls of built-ins.
    Expr(Expr),
}

/// `fn name(params) -> ret = body` or `fn name(params) -> ret { ... }`.
#[derive(Clone, Debug, PartialEq)]
pub struct FnDef {
    pub name: Ident,
    pub params: Vec<Param>,
    pub ret: Option<TypeExpr>,
    pub body: Expr,
    pub span: Span,
}

/// A parameter of a function, lambda, model or optimizer.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub default: Option<Expr>,
    pub span: Span,
}

/// `model Name(ctor params) { members }`
#[derive(Clone, Debug, PartialEq)]
pub struct ModelDef {
    pub name: Ident,
    pub params: Vec<Param>,
    pub members: Vec<ModelMember>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ModelMember {
    /// `param w: f32[inputs, outputs] = glorot_uniform()`
    Param { name: Ident, ty: TypeExpr, init: Expr, span: Span },
    /// `state running_mean: f32[C] = zeros()`
    State { name: Ident, ty: Option<TypeExpr>, init: Expr, span: Span },
    /// `l1 = Dense(64, 128, act = relu)` (a sub-model or any other value)
    Field { name: Ident, value: Expr, span: Span },
    /// `fn forward(x) = ...` (shared like `StmtKind::Fn`)
    Method(std::sync::Arc<FnDef>),
}

/// `optimizer adam(lr = 1e-3, ...) { state m = ...; update { ... } }`
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerDef {
    pub name: Ident,
    pub params: Vec<Param>,
    pub states: Vec<(Ident, Expr)>,
    pub update: Block,
    pub span: Span,
}

/// `train MODEL on DATA { fields }`
#[derive(Clone, Debug, PartialEq)]
pub struct TrainDef {
    pub model: Expr,
    pub data: Expr,
    pub fields: Vec<TrainField>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TrainField {
    /// `loss(x, y) = expr`
    Loss { params: Vec<Param>, body: Expr, span: Span },
    /// `optimizer = adam(lr = 1e-3)`, `epochs = 30`, `steps = 100`,
    /// `clip_grad_norm = 1.0`, `workers = 2`, `resume = "path"`
    Set { name: Ident, value: Expr, span: Span },
    /// `eval accuracy on test_set |> batch(256) every 5 epochs`
    Eval { metric: Expr, data: Expr, every: Option<Every>, span: Span },
    /// `checkpoint "out/mlp.safetensors" every 10 epochs`
    Checkpoint { path: Expr, every: Option<Every>, span: Span },
    /// `log "out/train.jsonl" every 100 steps`, `log "runs/a" format =
    /// "tensorboard"`
    Log { path: Expr, every: Option<Every>, format: Option<Expr>, span: Span },
}

/// `every N epochs` / `every N steps`
#[derive(Clone, Debug, PartialEq)]
pub struct Every {
    pub count: Expr,
    pub unit: EveryUnit,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EveryUnit {
    Epochs,
    Steps,
}

/// A binding pattern: `x`, `_`, `(a, (b, _))`.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    Name(Ident),
    Wildcard(Span),
    Tuple(Vec<Pattern>, Span),
}

impl Pattern {
    /// The names the pattern binds, left to right.
    pub fn names(&self) -> Vec<&str> {
        match self {
            Pattern::Name(i) => vec![i.name.as_str()],
            Pattern::Wildcard(_) => vec![],
            Pattern::Tuple(parts, _) => parts.iter().flat_map(Pattern::names).collect(),
        }
    }

    pub fn span(&self) -> Span {
        match self {
            Pattern::Name(i) => i.span,
            Pattern::Wildcard(s) | Pattern::Tuple(_, s) => *s,
        }
    }
}

/// A type annotation.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeExpr {
    pub kind: TypeKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TypeKind {
    /// `f32[B, 784]`; `f32` alone and `f32[]` are scalars (empty dims).
    Tensor {
        dtype: crate::ir::DType,
        dims: Vec<DimExpr>,
    },
    Int,
    Float,
    Bool,
    Str,
    Tuple(Vec<TypeExpr>),
}

/// One dimension in a tensor type.
#[derive(Clone, Debug, PartialEq)]
pub enum DimExpr {
    Known(i64, Span),
    Symbol(Ident),
    Infer(Span),
    /// `4 * hidden`, `floor_div(d, heads)`: an int computed from names
    /// already known where the type is read (`text` as written).
    Computed {
        expr: Box<Expr>,
        text: String,
    },
}

impl std::fmt::Display for DimExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DimExpr::Known(n, _) => write!(f, "{n}"),
            DimExpr::Symbol(id) => f.write_str(&id.name),
            DimExpr::Infer(_) => f.write_str("_"),
            DimExpr::Computed { text, .. } => f.write_str(text),
        }
    }
}

/// An expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// `3`, `2i64`; the suffix picks a dtype.
    Int(i64, Option<crate::ir::DType>),
    /// `1.5`, `1e-3`, `0.5f16`, `2bf16`.
    Float(f64, Option<crate::ir::DType>),
    Bool(bool),
    Str(String),
    Name(String),
    /// `[[1.0, 2.0], [3.0, 4.0]]`
    Tensor(Vec<Expr>),
    /// `(a, b)`; `()` is the empty tuple. `(a)` is just `a`.
    Tuple(Vec<Expr>),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `lhs |> rhs`: `rhs` is a callee or a call whose arguments get `lhs` first.
    Pipe(Box<Expr>, Box<Expr>),
    Call {
        callee: Box<Expr>,
        args: Vec<Arg>,
    },
    /// `base.name`: a model field, or (when called) method sugar `name(base, ...)`.
    Field {
        base: Box<Expr>,
        name: Ident,
    },
    /// `x[0, 1:5, ..., ::2]`
    Index {
        base: Box<Expr>,
        items: Vec<IndexItem>,
    },
    /// `fn(x, y) = x + y`
    Lambda {
        params: Vec<Param>,
        body: Box<Expr>,
    },
    Block(Block),
    /// `if c { a } else { b }`; `else_` is a block or another `if`.
    If {
        cond: Box<Expr>,
        then: Block,
        else_: Option<Box<Expr>>,
    },
    /// `[elem for i in 0..n]`: a list (of models, functions …) or a tensor.
    Comprehension {
        elem: Box<Expr>,
        head: Box<ForHead>,
    },
}

/// `for pattern in 0..n` or `for pattern in list`: what a `for` loop and a
/// comprehension run over.
#[derive(Clone, Debug, PartialEq)]
pub struct ForHead {
    pub var: Pattern,
    pub iter: ForIter,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ForIter {
    /// `start..end`: compile-time ints, `end` excluded.
    Range(Expr, Expr),
    /// A list or tuple, element by element.
    Each(Expr),
}

/// `for i in 0..n { body }`, unrolled while tracing.
#[derive(Clone, Debug, PartialEq)]
pub struct ForLoop {
    pub head: ForHead,
    pub body: Block,
    pub span: Span,
}

/// A call argument, positional or named.
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
// A slice holds three optional bounds inline; index lists are short, so
// boxing them would cost more code than the bytes it saves.
#[allow(clippy::large_enum_variant)]
pub enum IndexItem {
    Single(Expr),
    Slice { start: Option<Expr>, stop: Option<Expr>, step: Option<Expr>, span: Span },
    Ellipsis(Span),
}

/// `{ stmts; result }`
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<BlockStmt>,
    pub result: Option<Box<Expr>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum BlockStmt {
    Let {
        pattern: Pattern,
        ty: Option<TypeExpr>,
        value: Expr,
        span: Span,
    },
    /// `m = beta1 * m + ...` (re-binds an optimizer state or local)
    Assign {
        name: Ident,
        value: Expr,
        span: Span,
    },
    For(ForLoop),
    Expr(Expr),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// `%`: the remainder of floor division (the sign of the divisor).
    Rem,
    Pow,
    MatMul,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
            BinaryOp::Pow => "^",
            BinaryOp::MatMul => "@",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
        }
    }
}
