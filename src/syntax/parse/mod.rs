//! Parsing: runs the newline pre-pass, the pest grammar
//! (`grammar/tfl.pest`), and converts the parse tree into the owned AST.
//!
//! Contract: `parse(source, file)` never panics. It returns the program, or
//! diagnostics: E0101 (syntax), E0102 (nesting too deep), E0103 (bad number)
//! or E0104 (bad string escape). A parse tree of an unexpected shape (a bug
//! in the grammar or the builder) becomes an E0999 internal diagnostic.
//!
//! Example: `parse("let y = x |> f(2)\n", FileId(0))` gives one `Let` whose
//! value is `Pipe(Name x, Call(Name f, [2]))`.
//!
//! The builder is split by topic: `items` (statements and items), `expr`
//! (precedence and postfix), `literal` (numbers, strings, types, patterns)
//! and `error` (pest errors in words).

mod error;
mod expr;
mod items;
mod literal;
mod split;

use super::ast::Program;
use super::newlines;
use crate::diag::{Diagnostic, FileId, Span};
use pest::iterators::Pair;
use pest::Parser as _;
use std::cell::Cell;

/// The parser every input goes through first: `tfl.pest` with the silent
/// punctuation and lookahead guards of `fast.pest`.
mod fast {
    #[derive(pest_derive::Parser)]
    #[grammar = "../grammar/tfl.pest"]
    #[grammar = "../grammar/fast.pest"]
    pub(super) struct TflParser;
}

/// The parser that re-reads a failed input to explain the error: the same
/// language, with named punctuation and no guards (`detailed.pest`), so
/// that pest reports every token that could have come next.
mod detailed {
    #[derive(pest_derive::Parser)]
    #[grammar = "../grammar/tfl.pest"]
    #[grammar = "../grammar/detailed.pest"]
    pub(super) struct TflParser;
}

use fast::{Rule, TflParser};

/// A parse-tree node.
type Node<'i> = Pair<'i, Rule>;

/// Parses a whole `.tfl` file.
pub fn parse(source: &str, file: FileId) -> crate::diag::Result<Program> {
    let prepared = newlines::prepare(source, file)?;
    // Parse with the fast grammar and without pest's attempt tracking first
    // (it makes parsing several times slower); only a failed parse is
    // repeated, with the detailed grammar and attempts, which give the
    // tokens pest expected (`)`, `=`) that the error reporter turns into
    // words.
    pest::set_error_detail(false);
    let chunks = split::top_level_chunks(&prepared, split::workers());
    let parsed = if chunks.len() > 1 {
        parse_chunks_in_parallel(&prepared, file, &chunks)
    } else {
        parse_chunk(&prepared, file, 0..prepared.text.len())
    };
    match parsed {
        Some(result) => result,
        None => Err(vec![explain_syntax_error(&prepared, file)]),
    }
}

/// Parses `range` of the prepared text as a program (`None` on a syntax
/// error) and builds its AST with absolute spans.
fn parse_chunk(
    prepared: &newlines::Prepared,
    file: FileId,
    range: std::ops::Range<usize>,
) -> Option<crate::diag::Result<Program>> {
    let text = prepared.text.get(range.clone())?;
    let mut pairs = TflParser::parse(Rule::program, text).ok()?;
    let cx = Cx { file, base: range.start, text, docs: &prepared.docs, keyword_as_name: Cell::new(false) };
    let program = match pairs.next() {
        Some(program) => items::program(&cx, program),
        None => Err(vec![Diagnostic::internal("the parser produced no program")]),
    };
    // A keyword where a name goes is a syntax error the fast grammar lets
    // through (see `Cx::check_not_keyword`).
    if cx.keyword_as_name.get() {
        return None;
    }
    Some(program)
}

/// Parses the chunks (whole top-level statements) on scoped threads and
/// concatenates their statements in order. The result is the one sequential
/// parsing gives: the first chunk's error wins, as the first error in the
/// file would.
fn parse_chunks_in_parallel(
    prepared: &newlines::Prepared,
    file: FileId,
    chunks: &[std::ops::Range<usize>],
) -> Option<crate::diag::Result<Program>> {
    let results: Vec<Option<crate::diag::Result<Program>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks[1..]
            .iter()
            .map(|range| {
                let range = range.clone();
                // The parser recurses per nesting level; the pre-pass bounds
                // the depth for a main-thread-sized stack, so give helpers one.
                std::thread::Builder::new()
                    .stack_size(split::PARSER_STACK_BYTES)
                    .spawn_scoped(scope, move || parse_chunk(prepared, file, range))
            })
            .collect();
        let mut results = vec![parse_chunk(prepared, file, chunks[0].clone())];
        for handle in handles {
            results.push(match handle {
                Ok(h) => h.join().unwrap_or_else(|_| Some(Err(vec![Diagnostic::internal("a parser thread panicked")]))),
                // No thread to spare: parse this chunk here.
                Err(_) => None,
            });
        }
        results
    });
    // A syntax error anywhere is reported as the whole file's (as
    // sequential parsing would, before any AST is built); otherwise the
    // first chunk's error wins.
    let mut programs = Vec::with_capacity(chunks.len());
    for (result, range) in results.into_iter().zip(chunks) {
        programs.push(match result {
            Some(r) => r,
            None => parse_chunk(prepared, file, range.clone())?,
        });
    }
    let mut stmts = Vec::new();
    for program in programs {
        match program {
            Ok(p) => stmts.extend(p.stmts),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(Program { stmts }))
}

/// Re-parses a program that failed with the detailed grammar and pest's
/// attempt tracking, which name the tokens that could have come next.
fn explain_syntax_error(prepared: &newlines::Prepared, file: FileId) -> Diagnostic {
    pest::set_error_detail(true);
    let detailed = detailed::TflParser::parse(detailed::Rule::program, &prepared.text);
    pest::set_error_detail(false);
    match detailed {
        Err(e) => error::convert(&e, prepared, file),
        Ok(_) => Diagnostic::internal("the parser failed once and then succeeded"),
    }
}

/// What the builder needs besides the tree: the file id, the pre-passed
/// text (for trimming spans) and the doc comments.
pub(crate) struct Cx<'a> {
    file: FileId,
    /// Where `text` starts in the prepared file (a chunk may be parsed alone).
    base: usize,
    text: &'a str,
    docs: &'a [(usize, String)],
    /// Set when a name turned out to be a keyword.
    keyword_as_name: Cell<bool>,
}

impl Cx<'_> {
    /// The span of a node, without trailing blanks: pest may include the
    /// whitespace it skipped before a repetition that then matched nothing.
    fn span(&self, node: &Node) -> Span {
        let s = node.as_span();
        let bytes = self.text.as_bytes();
        let mut end = s.end();
        while end > s.start() && matches!(bytes.get(end - 1), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            end -= 1;
        }
        Span::new(self.file, self.base + s.start(), self.base + end)
    }

    /// Notes a keyword used as a name. The fast grammar's `ident` matches
    /// any word (cheaper than excluding the keywords rule by rule); such a
    /// program is then re-parsed by the detailed grammar, whose `ident`
    /// excludes them, to explain the error.
    fn check_not_keyword(&self, word: &str) {
        if KEYWORDS.binary_search(&word).is_ok() {
            self.keyword_as_name.set(true);
        }
    }

    /// The absolute offset of a position in the parsed text.
    fn offset(&self, pos: usize) -> usize {
        self.base + pos
    }

    /// The doc comment written directly before offset `start`, if any.
    fn doc_at(&self, start: usize) -> Option<String> {
        self.docs.iter().find(|(at, _)| *at == start).map(|(_, text)| text.clone())
    }
}

/// The words the `keyword` rule of `grammar/tfl.pest` reserves, sorted.
pub(in crate::syntax) const KEYWORDS: [&str; 24] = [
    "and",
    "checkpoint",
    "const",
    "else",
    "epochs",
    "eval",
    "every",
    "false",
    "fn",
    "for",
    "if",
    "let",
    "model",
    "not",
    "on",
    "optimizer",
    "or",
    "param",
    "state",
    "train",
    "true",
    "update",
    "use",
    "with",
];

/// An internal error: the tree does not have the shape the grammar promises.
fn internal(cx: &Cx, node: &Node, what: &str) -> Vec<Diagnostic> {
    vec![Diagnostic::internal(format!("unexpected parse tree: {what} (rule {:?})", node.as_rule()))
        .label(cx.span(node), "while reading this")]
}

/// Keywords carry no information once the rule around them matched; they
/// are nodes only so that syntax errors can say which one was expected
/// (punctuation and separators are silent in the fast grammar).
fn is_token(rule: Rule) -> bool {
    matches!(
        rule,
        Rule::k_use
            | Rule::k_const
            | Rule::k_fn
            | Rule::k_model
            | Rule::k_param
            | Rule::k_optimizer
            | Rule::k_state
            | Rule::k_update
            | Rule::k_let
            | Rule::k_train
            | Rule::k_on
            | Rule::k_every
            | Rule::k_epochs
            | Rule::k_eval
            | Rule::k_checkpoint
            | Rule::k_if
            | Rule::k_else
            | Rule::k_for
            | Rule::k_in
            | Rule::k_loss
            | Rule::k_log
            | Rule::k_export
            | Rule::k_format
    )
}

/// The children of a node that carry information (see `is_token`).
fn inner<'i>(node: &Node<'i>) -> impl Iterator<Item = Node<'i>> {
    node.clone().into_inner().filter(|n| !is_token(n.as_rule()))
}

type Inner<'i> = std::iter::Filter<pest::iterators::Pairs<'i, Rule>, fn(&Node<'i>) -> bool>;

/// The children of a node, tokens skipped, read in order.
struct Kids<'i> {
    parent: Node<'i>,
    items: std::iter::Peekable<Inner<'i>>,
}

impl<'i> Kids<'i> {
    fn of(node: &Node<'i>) -> Kids<'i> {
        let keep: fn(&Node<'i>) -> bool = |n| !is_token(n.as_rule());
        Kids { parent: node.clone(), items: node.clone().into_inner().filter(keep).peekable() }
    }

    /// The next child, which must be `rule`.
    fn expect(&mut self, cx: &Cx, rule: Rule) -> crate::diag::Result<Node<'i>> {
        match self.items.next() {
            Some(n) if n.as_rule() == rule => Ok(n),
            Some(n) => Err(internal(cx, &n, &format!("expected {rule:?}"))),
            None => Err(internal(cx, &self.parent, &format!("missing {rule:?}"))),
        }
    }

    /// The next child if it is `rule`.
    fn optional(&mut self, rule: Rule) -> Option<Node<'i>> {
        if self.items.peek().is_some_and(|n| n.as_rule() == rule) {
            self.items.next()
        } else {
            None
        }
    }

    /// The next child, whatever it is.
    fn next(&mut self) -> Option<Node<'i>> {
        self.items.next()
    }
}

#[cfg(test)]
mod tests;
