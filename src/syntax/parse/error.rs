//! Turns a pest error into a diagnostic that says, in words, what was
//! expected and what was found.
//!
//! Contract: the result is always E0101 (or E0102 when pest stopped at its
//! own stack guard), labelled at the offending token; raw rule names never
//! reach the user. The expected things come from pest's `positives` (the
//! named rules tried at the furthest position), mapped by `want` to a small
//! vocabulary and simplified so that the message names what matters.
//!
//! Example: `f(1 2)` → "expected `,` or `)` after an argument, found `2`".

use super::detailed::Rule;
use super::KEYWORDS;
use crate::diag::{Code, Diagnostic, FileId, Span};
use crate::syntax::newlines::Prepared;
use crate::syntax::scan::{next_token, Kind};
use pest::error::{ErrorVariant, InputLocation};
use std::collections::BTreeSet;

/// What the parser could have accepted, in the order messages list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Want {
    Expr,
    Statement,
    Member,
    OptMember,
    TrainField,
    Pattern,
    Name,
    Param,
    Type,
    Dim,
    EndOfStmt,
    Word(&'static str),
    Comma,
    Tok(&'static str),
    Operator,
}

impl Want {
    fn phrase(self) -> String {
        match self {
            Want::Expr => "an expression".into(),
            Want::Statement => "a statement".into(),
            Want::Member => "a model member (`param`, `state`, `fn` or `name = value`)".into(),
            Want::OptMember => "an optimizer member (`state` or `update`)".into(),
            Want::TrainField => {
                "a training field (`loss(...) = ...`, `name = value`, `eval`, `checkpoint` or `log`)".into()
            }
            Want::Pattern => "a pattern".into(),
            Want::Name => "a name".into(),
            Want::Param => "a parameter".into(),
            Want::Type => "a type".into(),
            Want::Dim => "a dimension (a number, a name, an int expression or `_`)".into(),
            Want::Word(w) => w.into(),
            Want::Comma => "`,`".into(),
            Want::Tok(t) => format!("`{t}`"),
            Want::Operator => "an operator".into(),
            Want::EndOfStmt => "the end of the statement".into(),
        }
    }
}

const EVERY_UNIT: &str = "`epochs` or `steps`";

/// The vocabulary word for a rule pest tried, if it means anything to a user.
fn want(rule: Rule) -> Option<Want> {
    use Rule::*;
    Some(match rule {
        expr | lambda | if_expr | block | number | string | bool_lit | paren | tensor_lit | neg | not | arg
        | param_ref | named_arg | slice | indexed | slice_stop | slice_step | ellipsis => Want::Expr,
        ident | set_name => Want::Name,
        pipe | or | and | eq | ne | le | ge | lt | gt | add | sub | mul | div | matmul | pow | call_args | field
        | index => Want::Operator,
        sep | EOI => Want::EndOfStmt,
        stmt | use_stmt | const_stmt | fn_def | export_def | model_def | optimizer_def | let_stmt | train_stmt
        | for_stmt => Want::Statement,
        member_param | member_state | member_field => Want::Member,
        opt_state | opt_update => Want::OptMember,
        tf_loss | tf_eval | tf_checkpoint | tf_log | tf_set => Want::TrainField,
        pattern | pat_wild | pat_tuple => Want::Pattern,
        param => Want::Param,
        type_expr | tensor_type | dtype | prim_type | tuple_type => Want::Type,
        dim_expr | dim_infer => Want::Dim,
        every | k_every => Want::Word("`every`"),
        log_format | k_format => Want::Word("`format = …`"),
        every_unit => Want::Word(EVERY_UNIT),
        k_on => Want::Word("`on`"),
        k_in => Want::Word("`in`"),
        dotdot => Want::Tok(".."),
        k_param => Want::Member,
        k_update => Want::OptMember,
        k_eval | k_checkpoint | k_loss | k_log => Want::TrainField,
        k_state => Want::Word("`state`"),
        k_fn => Want::Word("`fn`"),
        k_export => Want::Word("`export`"),
        lparen | params => Want::Tok("("),
        rparen => Want::Tok(")"),
        lbracket => Want::Tok("["),
        rbracket => Want::Tok("]"),
        lbrace | use_group => Want::Tok("{"),
        rbrace => Want::Tok("}"),
        comma | trailing_comma => Want::Comma,
        colon | slice_colon => Want::Tok(":"),
        arrow => Want::Tok("->"),
        assign_eq => Want::Tok("="),
        _ => return None,
    })
}

/// Drops alternatives that are implied by others or only add noise.
fn simplify(wants: &mut BTreeSet<Want>) {
    // A `(` or `[` tried after an operand starts a call or an index: it is
    // one of the operators, not a bracket the user forgot.
    if wants.contains(&Want::Operator) {
        wants.remove(&Want::Tok("("));
        wants.remove(&Want::Tok("["));
    }
    let closes = [Want::Tok(")"), Want::Tok("]"), Want::Tok("}"), Want::Comma, Want::EndOfStmt];
    if closes.iter().any(|w| wants.contains(w)) {
        wants.remove(&Want::Operator);
    }
    if wants.contains(&Want::Word(EVERY_UNIT)) {
        wants.remove(&Want::Operator);
    }
    if wants.contains(&Want::Expr) {
        for w in [Want::Name, Want::Tok("("), Want::Tok("["), Want::Tok("{"), Want::Statement, Want::Word("`fn`")] {
            wants.remove(&w);
        }
    }
    // Where a new member or field could start, a missing newline is not
    // the problem, and the words that start one are named by the phrase.
    if [Want::Member, Want::OptMember, Want::TrainField].iter().any(|w| wants.contains(w)) {
        for w in [Want::Statement, Want::Name, Want::Word("`state`"), Want::Word("`fn`"), Want::EndOfStmt] {
            wants.remove(&w);
        }
    }
    if wants.contains(&Want::Expr) || wants.contains(&Want::Statement) {
        wants.remove(&Want::EndOfStmt);
    }
    if wants.contains(&Want::Pattern) || wants.contains(&Want::Dim) || wants.contains(&Want::Param) {
        wants.remove(&Want::Name);
    }
    // A dimension is an expression; the phrase for a dimension says so.
    if wants.contains(&Want::Dim) {
        wants.remove(&Want::Expr);
    }
}

fn join(phrases: &[String]) -> String {
    match phrases {
        [] => "something else".into(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// Converts a pest error at a position in `prepared.text` into a diagnostic.
pub(super) fn convert(e: &pest::error::Error<Rule>, prepared: &Prepared, file: FileId) -> Diagnostic {
    let pos = match e.location {
        InputLocation::Pos(p) | InputLocation::Span((p, _)) => p,
    };
    let positives = match &e.variant {
        ErrorVariant::ParsingError { positives, .. } => positives,
        ErrorVariant::CustomError { message } => {
            return Diagnostic::new(Code::TooDeep, "nesting too deep (the parser ran out of stack)")
                .label(Span::new(file, pos, pos), message.clone())
                .help("split the expression with `let` bindings or helper functions");
        }
    };
    let mut wants: BTreeSet<Want> = positives.iter().filter_map(|r| want(*r)).collect();
    simplify(&mut wants);

    let text = prepared.text.as_str();
    let (found, span, keyword) = found_at(text, pos, file);
    if let Some(word) = keyword {
        if wants.iter().any(|w| matches!(w, Want::Pattern | Want::Name | Want::Param)) && !wants.contains(&Want::Expr) {
            return Diagnostic::new(Code::Syntax, format!("`{word}` is a keyword and cannot be used as a name"))
                .label(span, "keyword used as a name")
                .help(format!("choose another name, such as `{word}_`"));
        }
    }
    let phrases: Vec<String> = wants.iter().map(|w| w.phrase()).collect();
    let expected = format!("expected {}{}", join(&phrases), context(&wants, prepared, pos));
    let mut d = Diagnostic::new(Code::Syntax, format!("{expected}, found {found}")).label(span, expected);
    let starts_statement = ["use", "const", "fn", "model", "optimizer", "let", "train"];
    if wants.iter().all(|w| *w == Want::EndOfStmt) && found == "`=`" {
        d = d.help("to bind a name, write `let name = value`");
    } else if wants.iter().all(|w| *w == Want::EndOfStmt) && !found.starts_with("the end") {
        d = d.help("each statement ends at a newline; write `;` to put two statements on one line");
    } else if let Some(word) = keyword.filter(|w| !starts_statement.contains(w)) {
        d = d.help(format!("`{word}` is a keyword and cannot be used as a name"));
    }
    d
}

/// What stands at `pos`: a description, its span, and the word if it is a keyword.
fn found_at(text: &str, mut pos: usize, file: FileId) -> (String, Span, Option<&'static str>) {
    while matches!(text.as_bytes().get(pos), Some(b' ' | b'\t' | b'\r')) {
        pos += 1;
    }
    if text.get(pos..).is_none_or(|rest| rest.trim().is_empty()) {
        return ("the end of the file".into(), Span::new(file, pos, pos), None);
    }
    if text.as_bytes().get(pos) == Some(&b'\n') {
        return ("the end of the line".into(), Span::new(file, pos, pos), None);
    }
    let tok = next_token(text, pos);
    let span = Span::new(file, tok.start, tok.end);
    let word = tok.text(text);
    if tok.kind == Kind::Word {
        if let Some(k) = KEYWORDS.iter().find(|k| **k == word) {
            return (format!("keyword `{word}`"), span, Some(k));
        }
    }
    let shown: String = word.chars().take(24).collect();
    let more = if shown.len() < word.len() { "..." } else { "" };
    (format!("`{shown}{more}`"), span, None)
}

/// " after an argument" and the like, when the parser wanted the separator
/// or closer of the innermost bracket list around `pos`.
fn context(wants: &BTreeSet<Want>, prepared: &Prepared, pos: usize) -> &'static str {
    let closers = [Want::Tok(")"), Want::Tok("]")];
    if !wants.iter().any(|w| closers.contains(w)) || !wants.iter().all(|w| closers.contains(w) || *w == Want::Comma) {
        return "";
    }
    let Some(&(open, _)) = prepared.brackets.iter().filter(|(o, c)| *o < pos && pos <= *c).max_by_key(|(o, _)| *o)
    else {
        return "";
    };
    let text = prepared.text.as_str();
    let before = text.get(..open).unwrap_or("").trim_end();
    let (last, rest) = last_word(before);
    let (second, _) = last_word(rest.trim_end());
    let is_params = last == "fn" || matches!(second, "fn" | "model" | "optimizer");
    let callee = (!last.is_empty() && !KEYWORDS.contains(&last)) || before.ends_with([')', ']']);
    match text.as_bytes().get(open) {
        Some(b'(') if is_params => " after a parameter",
        Some(b'(') if callee => " after an argument",
        Some(b'[') if callee => " after an index",
        _ => " after an element",
    }
}

/// The identifier-like word at the end of `s`, and what comes before it.
fn last_word(s: &str) -> (&str, &str) {
    let start = s.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
    (s.get(start..).unwrap_or(""), s.get(..start).unwrap_or(""))
}
