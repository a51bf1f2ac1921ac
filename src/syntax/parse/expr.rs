//! Expressions: operator precedence, postfix operations and primaries.
//!
//! Contract: the grammar hands over an `expr` as a flat sequence
//! `prefix* primary postfix* (infix prefix* primary postfix*)*`; this module
//! applies the precedence table of LANGUAGE.md §4 with a Pratt loop:
//! `^` (right-assoc) > unary `-`/`not` > `@` > `* / %` > `+ -` > comparisons >
//! `and` > `or` > `|>`, all binary operators but `^` left-associative.
//! Recursion depth is bounded by the pre-pass (`MAX_OPERATOR_DEPTH`).
//!
//! Example: `-x ^ 2 + a |> f(b)` → `Pipe(Add(Neg(Pow(x, 2)), a), Call(f, [b]))`.

use super::literal::{ident, number, string};
use super::{inner, internal, items, Cx, Kids, Node, Rule};
use crate::diag::{Code, Diagnostic, Result};
use crate::syntax::ast::{Arg, BinaryOp, Expr, ExprKind, IndexItem, UnaryOp};

/// One element of the flattened operator sequence.
enum Tok {
    Prefix(UnaryOp, crate::diag::Span),
    Operand(Expr),
    Infix(Infix),
}

#[derive(Clone, Copy)]
enum Infix {
    Binary(BinaryOp),
    Pipe,
}

/// Binding power of the operand of a prefix operator: above `@`, below `^`.
const PREFIX_BP: u8 = 16;

/// `(left, right)` binding powers; left < right means left-associative.
fn binding(op: Infix) -> (u8, u8) {
    use BinaryOp::*;
    let level = match op {
        Infix::Pipe => 1,
        Infix::Binary(Or) => 2,
        Infix::Binary(And) => 3,
        Infix::Binary(Eq | Ne | Lt | Le | Gt | Ge) => 4,
        Infix::Binary(Add | Sub) => 5,
        Infix::Binary(Mul | Div | Rem) => 6,
        Infix::Binary(MatMul) => 7,
        Infix::Binary(Pow) => return (19, 18),
    };
    (2 * level, 2 * level + 1)
}

fn infix_op(rule: Rule) -> Option<Infix> {
    use BinaryOp::*;
    Some(Infix::Binary(match rule {
        Rule::pipe => return Some(Infix::Pipe),
        Rule::or => Or,
        Rule::and => And,
        Rule::eq => Eq,
        Rule::ne => Ne,
        Rule::le => Le,
        Rule::ge => Ge,
        Rule::lt => Lt,
        Rule::gt => Gt,
        Rule::add => Add,
        Rule::sub => Sub,
        Rule::mul => Mul,
        Rule::div => Div,
        Rule::rem => Rem,
        Rule::matmul => MatMul,
        Rule::pow => Pow,
        _ => return None,
    }))
}

/// An `expr` node.
pub(super) fn expr(cx: &Cx, node: &Node) -> Result<Expr> {
    let mut toks: Vec<Tok> = Vec::new();
    let mut current: Option<Expr> = None;
    for kid in inner(node) {
        let rule = kid.as_rule();
        if let Some(op) = infix_op(rule) {
            toks.extend(current.take().map(Tok::Operand));
            toks.push(Tok::Infix(op));
        } else if rule == Rule::neg || rule == Rule::not {
            let op = if rule == Rule::neg { UnaryOp::Neg } else { UnaryOp::Not };
            toks.push(Tok::Prefix(op, cx.span(&kid)));
        } else if let Some(base) = current.take() {
            current = Some(postfix(cx, base, &kid)?);
        } else {
            current = Some(primary(cx, &kid)?);
        }
    }
    toks.extend(current.map(Tok::Operand));
    // Most expressions (arguments, list elements) are a single operand.
    if let [Tok::Operand(_)] = toks.as_slice() {
        if let Some(Tok::Operand(e)) = toks.pop() {
            return Ok(e);
        }
    }
    let mut pratt = Pratt { toks: toks.into_iter().peekable() };
    let e = pratt.parse(cx, node, 0)?;
    match pratt.toks.next() {
        None => Ok(e),
        Some(_) => Err(internal(cx, node, "operators left over")),
    }
}

struct Pratt {
    toks: std::iter::Peekable<std::vec::IntoIter<Tok>>,
}

impl Pratt {
    fn parse(&mut self, cx: &Cx, node: &Node, min_bp: u8) -> Result<Expr> {
        let mut lhs = match self.toks.next() {
            Some(Tok::Operand(e)) => e,
            Some(Tok::Prefix(op, span)) => {
                let operand = self.parse(cx, node, PREFIX_BP)?;
                let span = span.to(operand.span);
                Expr { kind: ExprKind::Unary(op, Box::new(operand)), span }
            }
            _ => return Err(internal(cx, node, "expected an operand")),
        };
        while let Some(Tok::Infix(op)) = self.toks.peek() {
            let op = *op;
            let (left, right) = binding(op);
            if left < min_bp {
                break;
            }
            self.toks.next();
            let rhs = self.parse(cx, node, right)?;
            let span = lhs.span.to(rhs.span);
            let kind = match op {
                Infix::Pipe => ExprKind::Pipe(Box::new(lhs), Box::new(rhs)),
                Infix::Binary(b) => ExprKind::Binary(b, Box::new(lhs), Box::new(rhs)),
            };
            lhs = Expr { kind, span };
        }
        Ok(lhs)
    }
}

/// Applies one postfix operation (call, field, index) to `base`.
fn postfix(cx: &Cx, base: Expr, node: &Node) -> Result<Expr> {
    let span = base.span.to(cx.span(node));
    let base = Box::new(base);
    let kind = match node.as_rule() {
        Rule::call_args => ExprKind::Call { callee: base, args: args(cx, node)? },
        Rule::field => ExprKind::Field { base, name: ident(cx, &Kids::of(node).expect(cx, Rule::ident)?) },
        Rule::index => {
            let items = inner(node).map(|i| index_item(cx, &i)).collect::<Result<Vec<_>>>()?;
            ExprKind::Index { base, items }
        }
        _ => return Err(internal(cx, node, "expected a call, field or index")),
    };
    Ok(Expr { kind, span })
}

/// Call arguments: positional ones first, then named ones.
fn args(cx: &Cx, node: &Node) -> Result<Vec<Arg>> {
    let mut out: Vec<Arg> = Vec::new();
    for arg in inner(node) {
        let span = cx.span(&arg);
        let item = Kids::of(&arg).next().ok_or_else(|| internal(cx, &arg, "empty argument"))?;
        if item.as_rule() == Rule::named_arg {
            let mut kids = Kids::of(&item);
            let name = ident(cx, &kids.expect(cx, Rule::ident)?);
            let value = expr(cx, &kids.expect(cx, Rule::expr)?)?;
            out.push(Arg { name: Some(name), value, span });
        } else {
            if let Some(named) = out.iter().find(|a| a.name.is_some()) {
                return Err(vec![Diagnostic::new(Code::Syntax, "positional argument after a named argument")
                    .label(span, "this positional argument")
                    .label(named.span, "comes after this named argument")
                    .help("pass positional arguments first, then named ones")]);
            }
            out.push(Arg { name: None, value: expr(cx, &item)?, span });
        }
    }
    Ok(out)
}

fn index_item(cx: &Cx, node: &Node) -> Result<IndexItem> {
    match node.as_rule() {
        Rule::ellipsis => Ok(IndexItem::Ellipsis(cx.span(node))),
        // `a`, or a slice from `a` when a `:` follows it.
        Rule::indexed => {
            let mut parts = inner(node);
            let first = parts.next().ok_or_else(|| internal(cx, node, "an index without an expression"))?;
            let first = expr(cx, &first)?;
            match parts.next() {
                None => Ok(IndexItem::Single(first)),
                Some(_colon) => slice(cx, node, Some(first), parts),
            }
        }
        Rule::slice => slice(cx, node, None, inner(node)),
        _ => Err(internal(cx, node, "expected an index")),
    }
}

/// A slice from `start`, with its stop and step among `parts`.
fn slice<'i>(
    cx: &Cx,
    node: &Node<'i>,
    start: Option<Expr>,
    parts: impl Iterator<Item = Node<'i>>,
) -> Result<IndexItem> {
    let (mut stop, mut step) = (None, None);
    for part in parts {
        let value = Some(expr(cx, &Kids::of(&part).expect(cx, Rule::expr)?)?);
        match part.as_rule() {
            Rule::slice_stop => stop = value,
            _ => step = value,
        }
    }
    Ok(IndexItem::Slice { start, stop, step, span: cx.span(node) })
}

fn primary(cx: &Cx, node: &Node) -> Result<Expr> {
    let span = cx.span(node);
    let kind = match node.as_rule() {
        Rule::number => number(cx, node)?,
        Rule::string => ExprKind::Str(string(cx, node)?),
        Rule::bool_lit => ExprKind::Bool(node.as_str() == "true"),
        Rule::ident => ExprKind::Name(ident(cx, node).name),
        Rule::param_ref => ExprKind::Name(node.as_str().to_string()),
        Rule::block => ExprKind::Block(items::block(cx, node)?),
        Rule::tensor_lit => match inner(node).find(|n| n.as_rule() == Rule::for_head) {
            Some(head) => {
                let elem = Kids::of(node).expect(cx, Rule::expr)?;
                ExprKind::Comprehension {
                    elem: Box::new(expr(cx, &elem)?),
                    head: Box::new(items::for_head(cx, &head)?),
                }
            }
            None => ExprKind::Tensor(exprs(cx, node)?),
        },
        Rule::paren => {
            let parts = exprs(cx, node)?;
            let trailing = inner(node).any(|n| n.as_rule() == Rule::trailing_comma);
            match <[Expr; 1]>::try_from(parts) {
                // `(a)` is `a` itself, but spans the parentheses so that
                // diagnostics underline what the user wrote.
                Ok([inner]) if !trailing => return Ok(Expr { span, ..inner }),
                Ok([inner]) => ExprKind::Tuple(vec![inner]),
                Err(parts) => ExprKind::Tuple(parts),
            }
        }
        Rule::lambda => {
            let mut kids = Kids::of(node);
            let params = items::params(cx, &kids.expect(cx, Rule::params)?)?;
            let body = body(cx, node, &mut kids)?;
            ExprKind::Lambda { params, body: Box::new(body) }
        }
        Rule::if_expr => return if_expr(cx, node),
        _ => return Err(internal(cx, node, "expected an expression")),
    };
    Ok(Expr { kind, span })
}

/// The body of a `fn` or lambda: `= expr` or a block.
pub(super) fn body(cx: &Cx, parent: &Node, kids: &mut Kids) -> Result<Expr> {
    match kids.next() {
        Some(n) if n.as_rule() == Rule::expr => expr(cx, &n),
        Some(n) if n.as_rule() == Rule::block => {
            Ok(Expr { span: cx.span(&n), kind: ExprKind::Block(items::block(cx, &n)?) })
        }
        Some(n) => Err(internal(cx, &n, "expected a body")),
        None => Err(internal(cx, parent, "missing body")),
    }
}

fn if_expr(cx: &Cx, node: &Node) -> Result<Expr> {
    let mut kids = Kids::of(node);
    let cond = expr(cx, &kids.expect(cx, Rule::expr)?)?;
    let then = items::block(cx, &kids.expect(cx, Rule::block)?)?;
    let else_ = match kids.next() {
        None => None,
        Some(n) if n.as_rule() == Rule::if_expr => Some(Box::new(if_expr(cx, &n)?)),
        Some(n) if n.as_rule() == Rule::block => {
            Some(Box::new(Expr { span: cx.span(&n), kind: ExprKind::Block(items::block(cx, &n)?) }))
        }
        Some(n) => return Err(internal(cx, &n, "expected `else` branch")),
    };
    Ok(Expr { kind: ExprKind::If { cond: Box::new(cond), then, else_ }, span: cx.span(node) })
}

/// The `expr` children of a bracketed list.
fn exprs(cx: &Cx, node: &Node) -> Result<Vec<Expr>> {
    inner(node).filter(|n| n.as_rule() == Rule::expr).map(|n| expr(cx, &n)).collect()
}
