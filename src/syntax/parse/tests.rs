//! Unit tests of the parser: precedence, spans, and the guarantees that
//! hold for any input (no panic, bounded depth).

use super::parse;
use crate::diag::{Code, FileId};
use crate::syntax::dump;

fn ok(src: &str) -> String {
    match parse(src, FileId(0)) {
        Ok(p) => dump(&p),
        Err(d) => panic!("unexpected errors for {src:?}: {d:#?}"),
    }
}

fn err(src: &str) -> (Code, String) {
    match parse(src, FileId(0)) {
        Ok(p) => panic!("expected an error for {src:?}, got {}", dump(&p)),
        Err(d) => (d[0].code, d[0].message.clone()),
    }
}

#[test]
fn precedence_follows_the_table() {
    assert!(ok("a + b * c").contains("(binary + (name a) (binary * (name b) (name c)))"));
    assert!(ok("-x ^ 2").contains("(unary - (binary ^ (name x) (int 2)))"));
    assert!(ok("a ^ b ^ c").contains("(binary ^ (name a) (binary ^ (name b) (name c)))"));
    assert!(ok("a - b - c").contains("(binary - (binary - (name a) (name b)) (name c))"));
    assert!(ok("-a @ b").contains("(binary @ (unary - (name a)) (name b))"));
    assert!(ok("not a and b or c").contains("(binary or (binary and (unary not (name a)) (name b)) (name c))"));
    assert!(ok("x |> f |> g(1)").contains("(pipe (pipe (name x) (name f)) (call (name g) (int 1)))"));
    assert!(ok("a < b + 1 == c").contains("(binary == (binary < (name a) (binary + (name b) (int 1))) (name c))"));
}

#[test]
fn statement_spans_exclude_trailing_blanks() {
    assert!(ok("let a = 1   // note\nlet b = 2\n").starts_with("@0..9 (let a (int 1))\n@20..29 "));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    // Runs on a thread with the default 2 MiB test stack on purpose.
    let handle = std::thread::Builder::new().stack_size(2 * 1024 * 1024).spawn(|| {
        for src in [
            "(".repeat(100_000),
            format!("let x = {}", "[".repeat(100_000)),
            format!("let x = {}y", "- ".repeat(100_000)),
            format!("let x = {}y", "not ".repeat(100_000)),
            format!("let x = y{}", " ^ y".repeat(100_000)),
            format!("let x = y{}", " + y".repeat(100_000)),
            format!("let x = f{}", "(1)".repeat(100_000)),
            format!("let x = y{}", ".a".repeat(100_000)),
            format!("let f = {}1", "fn(x) = ".repeat(100_000)),
            // Nesting that closes before more comes: each bracket is under
            // the limits, the tree is not.
            format!(
                "let x = {}y{}",
                "(".repeat(100),
                " ^ y)".repeat(100).replace(')', &format!("{})", " ^ y".repeat(10)))
            ),
            format!("let x = {}y{}", "(".repeat(100), format!("{})", " + y".repeat(100)).repeat(100)),
        ] {
            assert_eq!(err(&src).0, Code::TooDeep, "{}", &src[..20]);
        }
    });
    assert!(handle.is_ok_and(|h| h.join().is_ok()));
}

#[test]
fn nesting_at_the_limits_parses_and_dumps() {
    let handle = std::thread::Builder::new().stack_size(2 * 1024 * 1024).spawn(|| {
        let depth = crate::syntax::MAX_BRACKET_DEPTH - 1;
        let parens = format!("let x = {}y{}", "(".repeat(depth), ")".repeat(depth));
        assert!(ok(&parens).contains("(let x (name y))"));
        let calls = format!("let x = {}y{}", "f(".repeat(depth), ")".repeat(depth));
        assert_eq!(ok(&calls).matches("(call").count(), depth);
        let minus = format!("let x = {}y", "-".repeat(crate::syntax::MAX_OPERATOR_DEPTH));
        assert_eq!(ok(&minus).matches("(unary").count(), crate::syntax::MAX_OPERATOR_DEPTH);
        let pow = format!("let x = y{}", " ^ y".repeat(crate::syntax::MAX_OPERATOR_DEPTH));
        assert_eq!(ok(&pow).matches("(binary").count(), crate::syntax::MAX_OPERATOR_DEPTH);
        // A flat chain is not nesting.
        let chain = format!("let x = 0.0{}", " + 1.0".repeat(257));
        assert_eq!(ok(&chain).matches("(binary +").count(), 257);
        let mixed = format!("let x = {}y{}", "[-(".repeat(42), ")]".repeat(42));
        assert_eq!(ok(&mixed).matches("(tensor").count(), 42);
    });
    assert!(handle.is_ok_and(|h| h.join().is_ok()));
}

#[test]
fn flat_chains_up_to_their_limit_parse_and_dump() {
    // A chain's syntax tree is as deep as the chain is long; parsing and
    // dropping it fit a 2 MiB stack, the dump needs the main thread's 8 MiB
    // (the depth of `tfc build --emit ast`).
    let limit = crate::syntax::MAX_CHAIN_LENGTH;
    let handle = std::thread::Builder::new().stack_size(8 * 1024 * 1024).spawn(move || {
        let chain = format!("let x = y{}", " |> f - y".repeat(limit / 2));
        assert_eq!(ok(&chain).matches("(binary -").count(), limit / 2);
        let nested_chain = format!("let x = -({})", vec!["y"; limit + 1].join(" * "));
        assert!(ok(&nested_chain).contains("(unary -"));
        // A bracket is as deep as its deepest part, and counts so outside.
        let too_long = format!("let x = -(y, {}) + y + y", vec!["y"; limit].join(" * "));
        assert_eq!(err(&too_long).0, Code::TooDeep);
        let wide = format!("let x = ({0}, {0}) + y", vec!["y"; limit].join(" * "));
        assert!(ok(&wide).contains("(binary +"));
        let too_deep = format!("let x = {}y{}", "(y - ".repeat(limit / 100), " * y)".repeat(limit / 100));
        assert!(ok(&too_deep).contains("(binary -"));
    });
    assert!(handle.is_ok_and(|h| h.join().is_ok()));
}

/// A failed `if` or `fn` expression is not parsed again as a name: the
/// fast parser used to retry the rest of the statement after each one,
/// which doubled the work per `if` (the fuzzer's slowest inputs). With 40
/// of them this test would never finish; now each is an error at once.
#[test]
fn failed_if_and_fn_expressions_are_not_parsed_again() {
    for src in [
        format!("let x = {}y", "if--".repeat(40)),
        format!("let x = {}", "--if".repeat(40)),
        format!("let x = {}", "---fn-if".repeat(40)),
        format!("let x = {}", "-if-true".repeat(40)),
    ] {
        assert_eq!(err(&src).0, Code::Syntax, "{}", &src[..24]);
    }
}

/// An index is parsed once, whether or not it turns out to start a slice:
/// trying a slice and then a plain index parsed every nested index twice
/// (`y[y[y[0]]]`: 7.5 s at 24 levels). At 40 levels this would not finish.
#[test]
fn nested_indices_and_slice_starts_are_parsed_once() {
    let nested = format!("let x = {}0{}", "y[".repeat(40), "]".repeat(40));
    assert_eq!(ok(&nested).matches("(index").count(), 40);
    let slices = format!("let x = {}0{}", "y[".repeat(40), ":]".repeat(40));
    assert_eq!(ok(&slices).matches("(slice").count(), 40);
    assert!(ok("let x = y[1:, :2, 1:2:3, ::2, ...]").contains("(slice"));
}

#[test]
fn arbitrary_bytes_never_panic() {
    let samples = [
        "",
        "\n\n;;",
        "let",
        "fn",
        "model M {",
        "}",
        "\"",
        "x.",
        "1e",
        "9223372036854775808",
        "é",
        "f(,)",
        "let (a, = 1",
        "train",
        "a |>",
        "x[::]",
        "x[]",
        "-",
        "optimizer o { }",
        "use a.{",
        "\u{0}",
    ];
    for s in samples {
        let _ = parse(s, FileId(0));
    }
}

#[test]
fn syntax_errors_are_described_in_words() {
    assert_eq!(err("f(1 2)"), (Code::Syntax, "expected `,` or `)` after an argument, found `2`".into()));
    assert_eq!(err("let x = )").1, "unexpected `)`");
    assert_eq!(err("let x = f(a = )").1, "expected an expression, found `)`");
    assert_eq!(
        err("let x: f32[B, +] = 1").1,
        "expected a dimension (a number, a name, an int expression or `_`) or `]`, found `+`"
    );
    assert_eq!(err("fn f(x 5)").1, "expected `,`, `)`, `:` or `=`, found `5`");
    assert_eq!(err("let x = if a { 1 } else 2").1, "expected `{`, found `2`");
    assert_eq!(err("let x = a +\n").1, "expected an expression, found the end of the file");
    assert_eq!(err("let x = 1 2").1, "expected the end of the statement, found `2`");
    assert_eq!(err("let on = 1").1, "`on` is a keyword and cannot be used as a name");
    assert_eq!(err("let x = 99999999999999999999").0, Code::BadNumber);
    assert_eq!(err("let s = \"a\\qb\"").0, Code::BadEscape);
}

#[test]
fn random_token_soup_never_panics() {
    const VOCAB: [&str; 48] = [
        "let",
        "fn",
        "model",
        "optimizer",
        "train",
        "on",
        "every",
        "epochs",
        "steps",
        "eval",
        "checkpoint",
        "log",
        "loss",
        "param",
        "state",
        "update",
        "use",
        "if",
        "else",
        "not",
        "and",
        "x",
        "f",
        "1",
        "2.5e-3",
        "0.5f16",
        "\"s\\n\"",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ",",
        ";",
        "\n",
        "=",
        ":",
        "->",
        "|>",
        ".",
        "...",
        "+",
        "-",
        "^",
        "@",
        "/* c */",
        "// c\n",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let len = next() % 24;
        let src: Vec<&str> = (0..len).map(|_| VOCAB[(next() % VOCAB.len() as u64) as usize]).collect();
        let src = src.join(" ");
        if let Err(diags) = parse(&src, FileId(0)) {
            assert!(diags.iter().all(|d| d.code != Code::Internal), "internal error for {src:?}: {diags:?}");
        }
    }
}

/// The fast grammar (silent punctuation, guards) and the detailed one that
/// explains errors must accept exactly the same inputs: a mismatch would
/// turn a syntax error into an internal one, or accept a bad program.
#[test]
fn fast_and_detailed_grammars_accept_the_same_inputs() {
    use super::{detailed, newlines};
    use pest::Parser as _;
    let mut corpus: Vec<String> = crate::stdlib::MODULES.iter().map(|(_, src)| src.to_string()).collect();
    corpus.push(include_str!("../../../examples/digits_mlp.tfl").to_string());
    corpus.push(include_str!("../../../examples/basics.tfl").to_string());
    corpus.push("let x = - not a |> f(b = 1)[..., 1:, ::2].c ^ -2 <= 3 or x != y\n".to_string());
    // Tokens whose insertion exercises every guard and keyword.
    let inserts = [
        "-", "not ", "(", ")", "[", "]", ".", ",", ":", "=", "==", "->", "|>", "and ", "or ", "if ", "else ", "fn ",
        "param ", "true ", "\n", ";", "}", "{", "x ", "1 ", "@", "^", "<", ">=", "!=", "on ", "every ",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rand = |n: usize| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize % n
    };
    let mut checked = 0;
    for src in &corpus {
        for round in 0..150 {
            let mut text = src.clone();
            if round > 0 {
                let mut at = rand(text.len());
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                if round % 2 == 0 {
                    text.insert_str(at, inserts[rand(inserts.len())]);
                } else {
                    let end = (at + 1 + rand(3)).min(text.len());
                    if text.is_char_boundary(end) {
                        text.replace_range(at..end, "");
                    }
                }
            }
            let Ok(prepared) = newlines::prepare(&text, FileId(0)) else { continue };
            pest::set_error_detail(false);
            // The fast half accepts keywords as names; the builder's check
            // (`parse_chunk` gives `None`) completes it.
            let quick = super::parse_chunk(&prepared, FileId(0), 0..prepared.text.len()).is_some();
            let slow = detailed::TflParser::parse(detailed::Rule::program, &prepared.text).is_ok();
            assert_eq!(quick, slow, "the grammars disagree on:\n{text}");
            checked += 1;
        }
    }
    assert!(checked > 500, "only {checked} inputs got past the pre-pass");
}

/// A file large enough to be split: doc comments, strings with escapes,
/// blocks with inner newlines, and errors placed in a late chunk.
fn large_program(tail: &str) -> String {
    let mut s = String::new();
    for k in 0..1500 {
        s.push_str(&format!(
            "/// doc {k}\nfn f{k}(x: f32[B, 4]) -> f32[B, 4] = {{\n  let t = x * {k}.5\n  t + x\n}}\n"
        ));
        s.push_str(&format!("let s{k} = \"tab\\there {k}\" // comment\n"));
    }
    s.push_str(tail);
    s
}

#[test]
fn parallel_parsing_gives_the_sequential_ast_and_errors() {
    let source = large_program("print(s1)\n");
    let prepared = super::newlines::prepare(&source, FileId(0)).expect("prepares");
    assert!(super::split::top_level_chunks(&prepared, 2).len() == 2, "the test file must be split");
    let whole = super::parse_chunk(&prepared, FileId(0), 0..prepared.text.len());
    let whole = whole.expect("parses").expect("builds");
    let split = parse(&source, FileId(0)).expect("parses");
    assert_eq!(split, whole, "spans, docs and statements must not depend on the split");
    // A syntax error in the last chunk is reported as in a sequential parse.
    let (code, message) = err(&large_program("let = 3\n"));
    assert_eq!(code, Code::Syntax);
    assert!(message.contains("expected"), "{message}");
    // A builder error (bad escape) in the last chunk is found too.
    assert_eq!(err(&large_program("let q = \"\\q\"\n")).0, Code::BadEscape);
}

/// `format = …` of a `log` setting goes before or after its cadence, and
/// `format` stays an ordinary name everywhere else.
#[test]
fn a_log_format_comes_before_or_after_the_cadence() {
    let train = |log: &str| ok(&format!("train m on d {{\n    {log}\n}}\n"));
    let after = train("log \"runs/a\" every 2 steps format = \"tensorboard\"");
    let before = train("log \"runs/a\" format = \"tensorboard\" every 2 steps");
    assert!(after.contains("(log (str \"runs/a\") (every (int 2) steps) (format (str \"tensorboard\")))"), "{after}");
    assert_eq!(after.split_once(' ').map(|p| p.1), before.split_once(' ').map(|p| p.1));
    assert!(train("log \"a.jsonl\" format = f").contains("(format (name f))"));
    assert!(ok("let format = 1\nprint(format)").contains("(let format (int 1))"));
    assert_eq!(err("train m on d {\n    log \"a\" format \"x\"\n}\n").0, Code::Syntax);
}
