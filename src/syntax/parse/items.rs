//! Statements and items: `use`, `const`, `fn`, `model`, `optimizer`, `let`,
//! `train`, expression statements, and the shared pieces (parameter lists,
//! blocks).
//!
//! Contract: each function takes the node of the grammar rule it is named
//! after and returns the AST for it; top-level statements get the `///` doc
//! comment written directly before them.
//!
//! Example: `optimizer sgd(lr = 0.1) { update { param - lr * grad } }` →
//! `OptimizerDef { name: sgd, params: [lr = 0.1], states: [], update }`.

use super::expr::{body, expr};
use super::literal::{ident, pattern, type_expr};
use super::{inner, internal, Cx, Kids, Node, Rule};
use crate::diag::{Code, Diagnostic, Result};
use crate::syntax::ast::*;

pub(super) fn program(cx: &Cx, node: Node) -> Result<Program> {
    let mut stmts = Vec::new();
    for kid in inner(&node) {
        match kid.as_rule() {
            Rule::stmt => stmts.push(stmt(cx, &kid)?),
            Rule::EOI => {}
            _ => return Err(internal(cx, &kid, "expected a statement")),
        }
    }
    Ok(Program { stmts })
}

fn stmt(cx: &Cx, node: &Node) -> Result<Stmt> {
    let span = cx.span(node);
    let item = Kids::of(node).next().ok_or_else(|| internal(cx, node, "empty statement"))?;
    let kind = match item.as_rule() {
        Rule::use_stmt => use_stmt(cx, &item)?,
        Rule::const_stmt => {
            let (name, ty, value) = named_value(cx, &item)?;
            StmtKind::Const { name, ty, value }
        }
        Rule::let_stmt => {
            let (pattern, ty, value) = let_parts(cx, &item)?;
            StmtKind::Let { pattern, ty, value }
        }
        Rule::fn_def => StmtKind::Fn(std::sync::Arc::new(fn_def(cx, &item)?)),
        Rule::export_def => {
            let def = Kids::of(&item).expect(cx, Rule::fn_def)?;
            StmtKind::Export(std::sync::Arc::new(fn_def(cx, &def)?))
        }
        Rule::model_def => StmtKind::Model(model_def(cx, &item)?),
        Rule::optimizer_def => StmtKind::Optimizer(optimizer_def(cx, &item)?),
        Rule::train_stmt => StmtKind::Train(train(cx, &item)?),
        Rule::for_stmt => StmtKind::For(for_loop(cx, &item)?),
        Rule::expr => StmtKind::Expr(expr(cx, &item)?),
        _ => return Err(internal(cx, &item, "expected a statement")),
    };
    Ok(Stmt { kind, span, doc: cx.doc_at(span.start) })
}

fn use_stmt(cx: &Cx, node: &Node) -> Result<StmtKind> {
    let mut path = Vec::new();
    let mut group = None;
    for kid in inner(node) {
        match kid.as_rule() {
            Rule::ident => path.push(ident(cx, &kid)),
            Rule::use_group => group = Some(inner(&kid).map(|i| ident(cx, &i)).collect()),
            _ => return Err(internal(cx, &kid, "expected a module path")),
        }
    }
    Ok(StmtKind::Use { path, group })
}

/// `name (: type)? = value`, shared by `const` and `state`.
fn named_value(cx: &Cx, node: &Node) -> Result<(Ident, Option<TypeExpr>, Expr)> {
    let mut kids = Kids::of(node);
    let name = ident(cx, &kids.expect(cx, Rule::ident)?);
    let ty = kids.optional(Rule::type_expr).map(|t| type_expr(cx, &t)).transpose()?;
    let value = expr(cx, &kids.expect(cx, Rule::expr)?)?;
    Ok((name, ty, value))
}

/// `let pattern (: type)? = value`, at top level or in a block.
fn let_parts(cx: &Cx, node: &Node) -> Result<(Pattern, Option<TypeExpr>, Expr)> {
    let mut kids = Kids::of(node);
    let pat = pattern(cx, &kids.expect(cx, Rule::pattern)?)?;
    let ty = kids.optional(Rule::type_expr).map(|t| type_expr(cx, &t)).transpose()?;
    let value = expr(cx, &kids.expect(cx, Rule::expr)?)?;
    Ok((pat, ty, value))
}

fn fn_def(cx: &Cx, node: &Node) -> Result<FnDef> {
    let mut kids = Kids::of(node);
    let name = ident(cx, &kids.expect(cx, Rule::ident)?);
    let params = params(cx, &kids.expect(cx, Rule::params)?)?;
    let ret = kids.optional(Rule::type_expr).map(|t| type_expr(cx, &t)).transpose()?;
    let body = body(cx, node, &mut kids)?;
    Ok(FnDef { name, params, ret, body, span: cx.span(node) })
}

/// A `params` node: `(a, b: f32[B], c = 1)`.
pub(super) fn params(cx: &Cx, node: &Node) -> Result<Vec<Param>> {
    let mut out = Vec::new();
    for p in inner(node) {
        let mut kids = Kids::of(&p);
        let name = ident(cx, &kids.expect(cx, Rule::ident)?);
        let ty = kids.optional(Rule::type_expr).map(|t| type_expr(cx, &t)).transpose()?;
        let default = kids.optional(Rule::expr).map(|e| expr(cx, &e)).transpose()?;
        out.push(Param { name, ty, default, span: cx.span(&p) });
    }
    Ok(out)
}

fn model_def(cx: &Cx, node: &Node) -> Result<ModelDef> {
    let mut kids = Kids::of(node);
    let name = ident(cx, &kids.expect(cx, Rule::ident)?);
    let params = kids.optional(Rule::params).map(|p| params(cx, &p)).transpose()?.unwrap_or_default();
    let mut members = Vec::new();
    while let Some(m) = kids.next() {
        let span = cx.span(&m);
        members.push(match m.as_rule() {
            Rule::member_param => {
                let mut k = Kids::of(&m);
                let name = ident(cx, &k.expect(cx, Rule::ident)?);
                let ty = type_expr(cx, &k.expect(cx, Rule::type_expr)?)?;
                let init = expr(cx, &k.expect(cx, Rule::expr)?)?;
                ModelMember::Param { name, ty, init, span }
            }
            Rule::member_state => {
                let (name, ty, init) = named_value(cx, &m)?;
                ModelMember::State { name, ty, init, span }
            }
            Rule::member_field => {
                let (name, _, value) = named_value(cx, &m)?;
                ModelMember::Field { name, value, span }
            }
            Rule::fn_def => ModelMember::Method(std::sync::Arc::new(fn_def(cx, &m)?)),
            _ => return Err(internal(cx, &m, "expected a model member")),
        });
    }
    Ok(ModelDef { name, params, members, span: cx.span(node) })
}

fn optimizer_def(cx: &Cx, node: &Node) -> Result<OptimizerDef> {
    let mut kids = Kids::of(node);
    let name = ident(cx, &kids.expect(cx, Rule::ident)?);
    let params = kids.optional(Rule::params).map(|p| params(cx, &p)).transpose()?.unwrap_or_default();
    let mut states = Vec::new();
    let mut update: Option<Block> = None;
    while let Some(m) = kids.next() {
        match m.as_rule() {
            Rule::opt_state => {
                let (name, _, value) = named_value(cx, &m)?;
                states.push((name, value));
            }
            Rule::opt_update => {
                let b = block(cx, &Kids::of(&m).expect(cx, Rule::block)?)?;
                if let Some(first) = &update {
                    return Err(vec![Diagnostic::new(Code::Syntax, "an optimizer has exactly one `update` block")
                        .label(cx.span(&m), "second `update` block")
                        .label(first.span, "first `update` block")]);
                }
                update = Some(b);
            }
            _ => return Err(internal(cx, &m, "expected `state` or `update`")),
        }
    }
    let Some(update) = update else {
        return Err(vec![Diagnostic::new(Code::Syntax, format!("optimizer `{}` has no `update` block", name.name))
            .label(name.span, "this optimizer")
            .help("add `update { ... }` whose value is the new parameter, e.g. `update { param - lr * grad }`")]);
    };
    Ok(OptimizerDef { name, params, states, update, span: cx.span(node) })
}

fn train(cx: &Cx, node: &Node) -> Result<TrainDef> {
    let mut kids = Kids::of(node);
    let model = expr(cx, &kids.expect(cx, Rule::expr)?)?;
    let data = expr(cx, &kids.expect(cx, Rule::expr)?)?;
    let mut fields = Vec::new();
    while let Some(f) = kids.next() {
        let span = cx.span(&f);
        let mut k = Kids::of(&f);
        fields.push(match f.as_rule() {
            Rule::tf_loss => {
                let params = params(cx, &k.expect(cx, Rule::params)?)?;
                TrainField::Loss { params, body: expr(cx, &k.expect(cx, Rule::expr)?)?, span }
            }
            Rule::tf_set => {
                // `optimizer` and `epochs` are keywords, yet name fields here.
                let node = k.expect(cx, Rule::set_name)?;
                let name = match node.as_str() {
                    "optimizer" | "epochs" => Ident { name: node.as_str().to_string(), span: cx.span(&node) },
                    _ => ident(cx, &node),
                };
                TrainField::Set { name, value: expr(cx, &k.expect(cx, Rule::expr)?)?, span }
            }
            Rule::tf_eval => {
                let metric = expr(cx, &k.expect(cx, Rule::expr)?)?;
                let data = expr(cx, &k.expect(cx, Rule::expr)?)?;
                TrainField::Eval { metric, data, every: every(cx, &mut k)?, span }
            }
            Rule::tf_checkpoint => {
                let path = expr(cx, &k.expect(cx, Rule::expr)?)?;
                TrainField::Checkpoint { path, every: every(cx, &mut k)?, span }
            }
            Rule::tf_log => {
                let path = expr(cx, &k.expect(cx, Rule::expr)?)?;
                // `format = …` may come before or after the cadence.
                let mut format = log_format(cx, &mut k)?;
                let every = every(cx, &mut k)?;
                if format.is_none() {
                    format = log_format(cx, &mut k)?;
                }
                TrainField::Log { path, every, format, span }
            }
            _ => return Err(internal(cx, &f, "expected a training field")),
        });
    }
    Ok(TrainDef { model, data, fields, span: cx.span(node) })
}

/// An optional `format = expr` of a `log` setting: the expression.
fn log_format(cx: &Cx, kids: &mut Kids) -> Result<Option<Expr>> {
    let Some(node) = kids.optional(Rule::log_format) else { return Ok(None) };
    Ok(Some(expr(cx, &Kids::of(&node).expect(cx, Rule::expr)?)?))
}

/// An optional trailing `every N epochs|steps`.
fn every(cx: &Cx, kids: &mut Kids) -> Result<Option<Every>> {
    let Some(node) = kids.optional(Rule::every) else { return Ok(None) };
    let mut k = Kids::of(&node);
    let count = expr(cx, &k.expect(cx, Rule::expr)?)?;
    let unit = k.expect(cx, Rule::every_unit)?;
    let unit = if unit.as_str() == "epochs" { EveryUnit::Epochs } else { EveryUnit::Steps };
    Ok(Some(Every { count, unit, span: cx.span(&node) }))
}

/// A `for_stmt` node: `for pattern in iter { body }`.
fn for_loop(cx: &Cx, node: &Node) -> Result<ForLoop> {
    let mut kids = Kids::of(node);
    let head = for_head(cx, &kids.expect(cx, Rule::for_head)?)?;
    let body = block(cx, &kids.expect(cx, Rule::block)?)?;
    Ok(ForLoop { head, body, span: cx.span(node) })
}

/// A `for_head` node: `pattern in a..b` or `pattern in list`, shared by
/// `for` loops and comprehensions.
pub(super) fn for_head(cx: &Cx, node: &Node) -> Result<ForHead> {
    let mut kids = Kids::of(node);
    let var = pattern(cx, &kids.expect(cx, Rule::pattern)?)?;
    let first = expr(cx, &kids.expect(cx, Rule::expr)?)?;
    let iter = match kids.optional(Rule::expr) {
        Some(end) => ForIter::Range(first, expr(cx, &end)?),
        None => ForIter::Each(first),
    };
    Ok(ForHead { var, iter, span: cx.span(node) })
}

/// A `block` node: statements, the last of which, if an expression, is
/// the block's value.
pub(super) fn block(cx: &Cx, node: &Node) -> Result<Block> {
    let mut stmts = Vec::new();
    for item in inner(node) {
        let span = cx.span(&item);
        stmts.push(match item.as_rule() {
            Rule::let_stmt => {
                let (pattern, ty, value) = let_parts(cx, &item)?;
                BlockStmt::Let { pattern, ty, value, span }
            }
            Rule::assign => {
                let (name, _, value) = named_value(cx, &item)?;
                BlockStmt::Assign { name, value, span }
            }
            Rule::for_stmt => BlockStmt::For(for_loop(cx, &item)?),
            Rule::expr => BlockStmt::Expr(expr(cx, &item)?),
            _ => return Err(internal(cx, &item, "expected a block statement")),
        });
    }
    let result = match stmts.pop() {
        Some(BlockStmt::Expr(e)) => Some(Box::new(e)),
        Some(other) => {
            stmts.push(other);
            None
        }
        None => None,
    };
    Ok(Block { stmts, result, span: cx.span(node) })
}
