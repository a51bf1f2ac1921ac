//! The pre-pass that runs before the grammar: it decides which newlines end
//! statements, blanks out comments, collects `///` doc comments, and checks
//! that brackets are balanced and nesting is bounded.
//!
//! Contract: `prepare(src)` returns a copy of `src` with the same byte length
//! (so every offset is valid in both) in which
//! - comments are replaced by spaces (newlines inside `/* */` are kept and
//!   treated like any other newline);
//! - tabs and carriage returns between tokens are replaced by spaces (those
//!   inside strings are kept);
//! - every newline that does not end a statement is replaced by a space. A
//!   newline is insignificant when the innermost open bracket is `(` or `[`,
//!   when the previous token is a binary operator, `=`, `,`, `:`, `->`, `|>`
//!   or `.`, or when the next token is `|>`, `.` or `else`.
//!
//! It fails (before pest ever runs) on an unterminated string or block
//! comment, on unbalanced brackets (E0101), and on nesting beyond
//! `MAX_BRACKET_DEPTH` brackets or `MAX_OPERATOR_DEPTH` pending operators
//! (E0102). Those bounds keep the recursive parser, the AST builder and every
//! later recursive walk of the AST well inside a 2 MiB stack.
//!
//! Example: `let d = f()\n    |> g` becomes `let d = f()     |> g`.

use super::scan::{next_token, Kind, Token};
use crate::diag::{Code, Diagnostic, FileId, Span};

/// Most brackets that may be open at once.
pub const MAX_BRACKET_DEPTH: usize = 128;

/// Most nesting operators (prefix, `^`, `.`, calls, `fn`, `if`) on one
/// path of an expression tree, summed over the enclosing brackets (a closed
/// bracket counts as deep as its deepest part). This bounds the
/// depth of the expression tree that really nests, such as `- - - x` and
/// `a ^ b ^ c ...`.
pub const MAX_OPERATOR_DEPTH: usize = 256;

/// Most left-associative binary operators (`a + b + c …`, `x |> f |> g`)
/// on one path of an expression tree, counted the same way. Such a chain
/// is not nesting for the parser (it folds it in a loop), but it is a tree
/// as deep as the chain is long for every later walk of the syntax tree, so
/// it has a bound of its own, far above `MAX_OPERATOR_DEPTH`: at the limit,
/// parsing, name resolution, tracing and dropping the tree fit a 512 KiB
/// stack, and the AST dump the main thread's 8 MiB (`tests/cli.rs` runs a
/// chain at the limit).
pub const MAX_CHAIN_LENGTH: usize = 4096;

/// The pre-pass result.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// The source with comments blanked and insignificant newlines spaced.
    pub text: String,
    /// `(offset of the next token, text)` for each run of `///` lines.
    pub docs: Vec<(usize, String)>,
    /// `(open, close)` byte offsets of every bracket pair.
    pub brackets: Vec<(usize, usize)>,
}

/// One open bracket (or the file itself, `kind == 0`).
struct Frame {
    kind: u8,
    open: usize,
    /// Nesting operators seen since the last `,`, `;` or statement-ending
    /// newline, counting a closed bracket's as its deepest part's.
    ops: usize,
    /// Left-associative binary operators seen since then, counted alike.
    links: usize,
    /// The most `ops` and `links` of the parts before that `,`, `;` or
    /// newline: what the bracket adds to its parent's when it closes (a
    /// tuple or block is as deep as its deepest part).
    deepest: (usize, usize),
}

impl Frame {
    fn new(kind: u8, open: usize) -> Frame {
        Frame { kind, open, ops: 0, links: 0, deepest: (0, 0) }
    }
}

struct State<'a> {
    src: &'a str,
    file: FileId,
    out: Vec<u8>,
    frames: Vec<Frame>,
    pending_ops: usize,
    pending_links: usize,
    gap_newlines: Vec<usize>,
    doc_lines: Vec<String>,
    prev: Option<Token>,
    result: Prepared,
}

/// Runs the pre-pass over a whole file.
pub fn prepare(src: &str, file: FileId) -> crate::diag::Result<Prepared> {
    let mut st = State {
        src,
        file,
        out: src.as_bytes().to_vec(),
        frames: vec![Frame::new(0, 0)],
        pending_ops: 0,
        pending_links: 0,
        gap_newlines: Vec::new(),
        doc_lines: Vec::new(),
        prev: None,
        result: Prepared::default(),
    };
    st.run().map_err(|d| vec![d])?;
    if let Some(frame) = st.frames.get(1..).and_then(|f| f.last()) {
        let open = Span::new(file, frame.open, frame.open + 1);
        // Point at the end of the last text, not past a trailing newline,
        // so the label shows on a line the user can see.
        let last = src.trim_end().len();
        let close = closer(frame.kind);
        return Err(vec![Diagnostic::new(Code::Syntax, format!("unclosed `{}`", frame.kind as char))
            .label(open, "this bracket is never closed")
            .label(Span::new(file, last, last), format!("expected `{close}` by here"))
            .help(format!("add the missing `{close}`"))]);
    }
    // Comments are blanked whole (they start and end on char boundaries), so
    // the copy is still UTF-8; failing here would be a bug in this pass.
    st.result.text =
        String::from_utf8(st.out).map_err(|_| vec![Diagnostic::internal("newline pre-pass broke UTF-8")])?;
    Ok(st.result)
}

fn closer(open: u8) -> char {
    match open {
        b'(' => ')',
        b'[' => ']',
        _ => '}',
    }
}

impl State<'_> {
    fn span(&self, start: usize, end: usize) -> Span {
        Span::new(self.file, start, end)
    }

    fn run(&mut self) -> Result<(), Diagnostic> {
        let bytes = self.src.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b' ' => i += 1,
                b'\t' | b'\r' => {
                    // The grammar's only whitespace is a space.
                    self.out[i] = b' ';
                    i += 1;
                }
                b'\n' => {
                    self.gap_newlines.push(i);
                    i += 1;
                }
                b'/' if bytes.get(i + 1) == Some(&b'/') => i = self.line_comment(i),
                b'/' if bytes.get(i + 1) == Some(&b'*') => i = self.block_comment(i)?,
                _ => {
                    let tok = next_token(self.src, i);
                    self.token(tok)?;
                    i = tok.end.max(i + 1);
                }
            }
        }
        Ok(())
    }

    /// Blanks a `//` comment up to (not including) its newline; a `///`
    /// comment (but not `////`) is also kept as a doc line.
    fn line_comment(&mut self, i: usize) -> usize {
        let bytes = self.src.as_bytes();
        let end = bytes[i..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| i + p);
        if bytes.get(i + 2) == Some(&b'/') && bytes.get(i + 3) != Some(&b'/') {
            let text = self.src.get(i + 3..end).unwrap_or("");
            let text = text.strip_prefix(' ').unwrap_or(text).trim_end();
            self.doc_lines.push(text.to_string());
        }
        self.out[i..end].fill(b' ');
        end
    }

    /// Blanks a `/* */` comment except its newlines.
    fn block_comment(&mut self, i: usize) -> Result<usize, Diagnostic> {
        let Some(len) = self.src.get(i + 2..).and_then(|rest| rest.find("*/")) else {
            return Err(Diagnostic::new(Code::Syntax, "unterminated block comment")
                .label(self.span(i, i + 2), "this comment is never closed")
                .help("close it with `*/`"));
        };
        let end = i + 2 + len + 2;
        for j in i..end {
            if self.out[j] == b'\n' {
                self.gap_newlines.push(j);
            } else {
                self.out[j] = b' ';
            }
        }
        Ok(end)
    }

    fn token(&mut self, tok: Token) -> Result<(), Diagnostic> {
        self.settle_gap(tok);
        if !self.doc_lines.is_empty() {
            self.result.docs.push((tok.start, self.doc_lines.join("\n")));
            self.doc_lines.clear();
        }
        match tok.kind {
            Kind::Open(b) => {
                self.count_op(tok)?;
                if self.frames.len() > MAX_BRACKET_DEPTH {
                    return Err(too_deep(self.span(tok.start, tok.end), MAX_BRACKET_DEPTH, "brackets"));
                }
                self.frames.push(Frame::new(b, tok.start));
            }
            Kind::Close(b) => self.close(tok, b)?,
            Kind::Comma | Kind::Semi => self.reset_ops(),
            Kind::Unterminated => {
                return Err(Diagnostic::new(Code::Syntax, "unterminated string")
                    .label(self.span(tok.start, tok.end), "this string is never closed")
                    .help("strings end on the line they start; close it with `\"` (write `\\n` for a newline)"));
            }
            Kind::Punct | Kind::Word if self.is_chain_link(tok) => self.count_link(tok)?,
            Kind::Punct | Kind::Word if counts(tok.text(self.src)) => self.count_op(tok)?,
            _ => {}
        }
        self.prev = Some(tok);
        Ok(())
    }

    /// Decides whether the newlines since the previous token end a
    /// statement; if not, turns them into spaces.
    fn settle_gap(&mut self, next: Token) {
        if self.gap_newlines.is_empty() {
            return;
        }
        let in_parens = self.frames.last().is_some_and(|f| f.kind == b'(' || f.kind == b'[');
        let after_op = self.prev.is_some_and(|p| continues(p.text(self.src)));
        let before_op = matches!(next.text(self.src), "|>" | "." | "else");
        if in_parens || after_op || before_op {
            for &j in &self.gap_newlines {
                self.out[j] = b' ';
            }
        } else {
            self.reset_ops();
        }
        self.gap_newlines.clear();
    }

    fn close(&mut self, tok: Token, b: u8) -> Result<(), Diagnostic> {
        let here = self.span(tok.start, tok.end);
        let Some(frame) = self.frames.pop().filter(|f| f.kind != 0) else {
            return Err(Diagnostic::new(Code::Syntax, format!("unexpected `{}`", b as char))
                .label(here, "this bracket closes nothing")
                .help("remove it, or add the opening bracket it belongs to"));
        };
        if closer(frame.kind) != b as char {
            return Err(Diagnostic::new(
                Code::Syntax,
                format!("mismatched bracket: expected `{}`, found `{}`", closer(frame.kind), b as char),
            )
            .label(here, format!("expected `{}` here", closer(frame.kind)))
            .label(self.span(frame.open, frame.open + 1), "to close this bracket"));
        }
        self.pending_ops -= frame.ops;
        self.pending_links -= frame.links;
        self.result.brackets.push((frame.open, tok.start));
        // The bracketed expression is an operand of the enclosing one, as
        // deep as its deepest part: the enclosing expression inherits that
        // depth, so the bounds hold for the whole tree, not per bracket.
        let (ops, links) = (frame.ops.max(frame.deepest.0), frame.links.max(frame.deepest.1));
        if let Some(parent) = self.frames.last_mut() {
            parent.ops += ops;
            parent.links += links;
            self.pending_ops += ops;
            self.pending_links += links;
        }
        self.check_depth(tok)
    }

    fn count_op(&mut self, tok: Token) -> Result<(), Diagnostic> {
        if let Some(frame) = self.frames.last_mut() {
            frame.ops += 1;
            self.pending_ops += 1;
        }
        self.check_depth(tok)
    }

    /// A binary operator that folds left (`+`, `|>`, `and` …) between two
    /// operands: `-` after an operand, not after an operator or bracket.
    fn is_chain_link(&self, tok: Token) -> bool {
        let text = tok.text(self.src);
        let after_operand = self.prev.is_some_and(|p| match p.kind {
            Kind::Atom | Kind::Close(_) => true,
            Kind::Word => !is_keyword(p.text(self.src)),
            _ => false,
        });
        after_operand && is_operator(text) && !matches!(text, "^" | "." | "not")
    }

    fn count_link(&mut self, tok: Token) -> Result<(), Diagnostic> {
        if let Some(frame) = self.frames.last_mut() {
            frame.links += 1;
            self.pending_links += 1;
        }
        self.check_depth(tok)
    }

    fn check_depth(&self, tok: Token) -> Result<(), Diagnostic> {
        let here = self.span(tok.start, tok.end);
        if self.pending_ops > MAX_OPERATOR_DEPTH {
            return Err(too_deep(here, MAX_OPERATOR_DEPTH, "operators"));
        }
        if self.pending_links > MAX_CHAIN_LENGTH {
            return Err(Diagnostic::new(
                Code::TooDeep,
                format!("expression too long (limit {MAX_CHAIN_LENGTH} binary operators)"),
            )
            .label(here, format!("more than {MAX_CHAIN_LENGTH} binary operators are open here"))
            .help("split the expression with `let` bindings (or sum a tensor instead of adding terms one by one)"));
        }
        Ok(())
    }

    fn reset_ops(&mut self) {
        if let Some(frame) = self.frames.last_mut() {
            self.pending_ops -= frame.ops;
            self.pending_links -= frame.links;
            frame.deepest = (frame.deepest.0.max(frame.ops), frame.deepest.1.max(frame.links));
            frame.ops = 0;
            frame.links = 0;
        }
    }
}

fn too_deep(span: Span, limit: usize, what: &str) -> Diagnostic {
    Diagnostic::new(Code::TooDeep, format!("nesting too deep (limit {limit})"))
        .label(span, format!("more than {limit} {what} are nested here"))
        .help("split the expression with `let` bindings or helper functions")
}

/// Binary and prefix operators, plus `|>` and `.`: a newline after one
/// continues the statement, and each adds a level to the expression tree.
fn is_operator(text: &str) -> bool {
    matches!(
        text,
        "+" | "-"
            | "*"
            | "/"
            | "%"
            | "^"
            | "@"
            | "=="
            | "!="
            | "<"
            | "<="
            | ">"
            | ">="
            | "|>"
            | "."
            | "and"
            | "or"
            | "not"
    )
}

/// Tokens after which a newline continues the statement.
fn continues(text: &str) -> bool {
    is_operator(text) || matches!(text, "=" | "," | ":" | "->")
}

/// Keywords that do not end an operand (`true` and `false` do).
fn is_keyword(text: &str) -> bool {
    super::parse::KEYWORDS.binary_search(&text).is_ok() && !matches!(text, "true" | "false")
}

/// Tokens that add a level to the expression tree.
fn counts(text: &str) -> bool {
    is_operator(text) || matches!(text, "fn" | "if" | "else")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(src: &str) -> String {
        match prepare(src, FileId(0)) {
            Ok(p) => p.text,
            Err(d) => panic!("unexpected error: {d:?}"),
        }
    }

    fn code(src: &str) -> Code {
        match prepare(src, FileId(0)) {
            Ok(_) => panic!("expected an error for {src:?}"),
            Err(d) => d[0].code,
        }
    }

    #[test]
    fn keeps_statement_newlines_and_offsets() {
        let src = "let a = 1\nlet b = 2\n";
        assert_eq!(text(src), src);
    }

    #[test]
    fn newlines_inside_parens_and_after_operators_are_spaces() {
        assert_eq!(text("f(1,\n2)\n"), "f(1, 2)\n");
        assert_eq!(text("a +\nb\n"), "a + b\n");
        assert_eq!(text("let x =\n 1"), "let x =  1");
        assert_eq!(text("a and\nb"), "a and b");
    }

    #[test]
    fn lines_starting_with_pipe_dot_or_else_continue() {
        assert_eq!(text("x\n  |> f\n  .g()"), "x   |> f   .g()");
        assert_eq!(text("if c { a }\nelse { b }"), "if c { a } else { b }");
    }

    #[test]
    fn newlines_inside_braces_are_significant() {
        assert_eq!(text("f({\na\nb\n})"), "f({\na\nb\n})");
    }

    #[test]
    fn comments_are_blanked_and_docs_collected() {
        let src = "/// adds one\n/// to x\nfn f(x) = x + 1 // tail\n/* a\nb */ g";
        let p = prepare(src, FileId(0)).unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(p.text.len(), src.len());
        assert!(!p.text.contains("tail") && !p.text.contains("adds"));
        assert_eq!(p.docs, vec![(22, "adds one\nto x".to_string())]);
        assert!(p.text.ends_with("\n    \n     g"));
    }

    #[test]
    fn a_comment_between_lines_does_not_block_continuation() {
        let out = text("x // c\n  // d\n  |> f");
        assert_eq!((out.len(), out.split_whitespace().collect::<Vec<_>>()), (20, vec!["x", "|>", "f"]));
    }

    #[test]
    fn unbalanced_brackets_and_strings_are_syntax_errors() {
        assert_eq!(code("f(1"), Code::Syntax);
        assert_eq!(code("f(1]"), Code::Syntax);
        assert_eq!(code(")"), Code::Syntax);
        assert_eq!(code("\"abc\nx"), Code::Syntax);
        assert_eq!(code("/* x"), Code::Syntax);
    }

    #[test]
    fn deep_nesting_is_too_deep() {
        let parens = "(".repeat(100_000);
        assert_eq!(code(&parens), Code::TooDeep);
        let minus = format!("{}x", "- ".repeat(100_000));
        assert_eq!(code(&minus), Code::TooDeep);
        let pow = format!("x{}", " ^ x".repeat(100_000));
        assert_eq!(code(&pow), Code::TooDeep);
        let ok = format!("{}x{}", "(".repeat(MAX_BRACKET_DEPTH), ")".repeat(MAX_BRACKET_DEPTH));
        assert!(prepare(&ok, FileId(0)).is_ok());
    }

    #[test]
    fn long_flat_lists_are_not_deep() {
        let list = format!("[{}]", "-1, ".repeat(100_000));
        assert!(prepare(&list, FileId(0)).is_ok());
        let lines = "let a = -x\n".repeat(10_000);
        assert!(prepare(&lines, FileId(0)).is_ok());
    }
}
