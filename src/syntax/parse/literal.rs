//! Leaves of the tree: identifiers, number and string literals, type
//! annotations and binding patterns.
//!
//! Contract: numbers that do not fit (`i64` overflow, an infinite float) or
//! carry an unknown or mismatched suffix are E0103; a string escape other
//! than `\n \t \" \\` is E0104, labelled at the escape itself.
//!
//! Example: `0.5f16` → `Float(0.5, Some(F16))`; `2bf16` → `Float(2.0,
//! Some(BF16))`; `3i64` → `Int(3, Some(I64))`; `"a\tb"` → `Str("a\tb")`.

use super::{inner, internal, Cx, Kids, Node, Rule};
use crate::diag::{Code, Diagnostic, Result, Span};
use crate::ir::DType;
use crate::syntax::ast::{DimExpr, ExprKind, Ident, Pattern, TypeExpr, TypeKind};

pub(super) fn ident(cx: &Cx, node: &Node) -> Ident {
    cx.check_not_keyword(node.as_str());
    Ident { name: node.as_str().to_string(), span: cx.span(node) }
}

/// A `number` node: `num_body` and an optional `num_suffix`.
pub(super) fn number(cx: &Cx, node: &Node) -> Result<ExprKind> {
    let mut kids = Kids::of(node);
    let body = kids.expect(cx, Rule::num_body)?;
    let suffix = kids.optional(Rule::num_suffix);
    let text = body.as_str();
    let is_float = text.contains(['.', 'e', 'E']);
    let dtype = match &suffix {
        None => None,
        Some(s) => match DType::from_name(s.as_str()).filter(|d| *d != DType::Bool) {
            Some(d) => Some(d),
            None => {
                return Err(bad_number(
                    cx.span(node),
                    format!("unknown number suffix `{}`", s.as_str()),
                    "a suffix names a dtype: `f32`, `f64`, `f16`, `bf16`, `i32` or `i64`",
                ))
            }
        },
    };
    if is_float || dtype.is_some_and(DType::is_float) {
        if dtype.is_some_and(DType::is_int) {
            return Err(bad_number(
                cx.span(node),
                format!("`{text}` has a fraction or exponent but an integer suffix"),
                "drop the fraction, or use a float suffix such as `f32`",
            ));
        }
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(ExprKind::Float(v, dtype)),
            _ => Err(bad_number(
                cx.span(node),
                format!("float literal `{text}` is out of range"),
                "use a smaller number",
            )),
        }
    } else {
        match text.parse::<i64>() {
            Ok(v) => Ok(ExprKind::Int(v, dtype)),
            Err(_) => Err(bad_number(
                cx.span(node),
                format!("integer literal `{text}` does not fit in 64 bits"),
                "the largest integer is 9223372036854775807; write a float such as `1e20` for larger values",
            )),
        }
    }
}

fn bad_number(span: Span, message: String, help: &str) -> Vec<Diagnostic> {
    vec![Diagnostic::new(Code::BadNumber, message).label(span, "this number").help(help)]
}

/// A `string` node: decodes escapes.
pub(super) fn string(cx: &Cx, node: &Node) -> Result<String> {
    let body = Kids::of(node).expect(cx, Rule::str_inner)?;
    let base = cx.offset(body.as_span().start());
    let raw = body.as_str();
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some((_, 'n')) => out.push('\n'),
            Some((_, 't')) => out.push('\t'),
            Some((_, '"')) => out.push('"'),
            Some((_, '\\')) => out.push('\\'),
            other => {
                let end = other.map_or(i + 1, |(j, e)| j + e.len_utf8());
                let shown = raw.get(i..end).unwrap_or("\\");
                return Err(vec![Diagnostic::new(Code::BadEscape, format!("unknown escape `{shown}` in string"))
                    .label(Span::new(cx.file, base + i, base + end), "this escape")
                    .help("the escapes are `\\n`, `\\t`, `\\\"` and `\\\\`")]);
            }
        }
    }
    Ok(out)
}

/// A `type_expr` node.
pub(super) fn type_expr(cx: &Cx, node: &Node) -> Result<TypeExpr> {
    let span = cx.span(node);
    let Some(kid) = Kids::of(node).next() else {
        return Err(internal(cx, node, "empty type"));
    };
    let kind = match kid.as_rule() {
        Rule::prim_type => match kid.as_str() {
            "int" => TypeKind::Int,
            "float" => TypeKind::Float,
            _ => TypeKind::Str,
        },
        Rule::tuple_type => {
            let parts = inner(&kid).map(|t| type_expr(cx, &t)).collect::<Result<Vec<_>>>()?;
            TypeKind::Tuple(parts)
        }
        Rule::tensor_type => tensor_type(cx, &kid)?,
        _ => return Err(internal(cx, &kid, "expected a type")),
    };
    Ok(TypeExpr { kind, span })
}

fn tensor_type(cx: &Cx, node: &Node) -> Result<TypeKind> {
    let mut kids = Kids::of(node);
    let dt = kids.expect(cx, Rule::dtype)?;
    let dtype = DType::from_name(dt.as_str()).ok_or_else(|| internal(cx, &dt, "unknown dtype"))?;
    let Some(dims) = kids.optional(Rule::dims) else {
        // `bool` alone is the plain boolean type; `f32` alone is a scalar.
        return Ok(if dtype == DType::Bool { TypeKind::Bool } else { TypeKind::Tensor { dtype, dims: Vec::new() } });
    };
    let mut out = Vec::new();
    for d in inner(&dims) {
        let span = cx.span(&d);
        out.push(match d.as_rule() {
            Rule::dim_infer => DimExpr::Infer(span),
            Rule::dim_expr => {
                let e = super::expr::expr(cx, &Kids::of(&d).expect(cx, Rule::expr)?)?;
                match e.kind {
                    ExprKind::Int(n, None) => DimExpr::Known(n, span),
                    ExprKind::Name(name) => DimExpr::Symbol(Ident { name, span }),
                    _ => DimExpr::Computed { expr: Box::new(e), text: d.as_str().trim().to_string() },
                }
            }
            _ => return Err(internal(cx, &d, "expected a dimension")),
        });
    }
    Ok(TypeKind::Tensor { dtype, dims: out })
}

/// A `pattern` node.
pub(super) fn pattern(cx: &Cx, node: &Node) -> Result<Pattern> {
    let Some(kid) = Kids::of(node).next() else {
        return Err(internal(cx, node, "empty pattern"));
    };
    match kid.as_rule() {
        Rule::pat_wild => Ok(Pattern::Wildcard(cx.span(&kid))),
        Rule::ident => Ok(Pattern::Name(ident(cx, &kid))),
        Rule::pat_tuple => {
            let parts = inner(&kid).map(|p| pattern(cx, &p)).collect::<Result<Vec<_>>>()?;
            Ok(Pattern::Tuple(parts, cx.span(&kid)))
        }
        _ => Err(internal(cx, &kid, "expected a pattern")),
    }
}
