//! A minimal tokenizer used by the newline pre-pass (`newlines`) and by the
//! syntax-error reporter, which both need to know where tokens start and end
//! but not what they mean in the grammar.
//!
//! Contract: `next_token(src, i)` is called at a byte offset that is not
//! whitespace or a comment, and returns the token starting there. It never
//! panics and always makes progress (every token is at least one character
//! long, and ends on a char boundary). Strings are returned as one token; an
//! unterminated string is reported as `Kind::Unterminated`.
//!
//! Example: in `x |> f(1e-3)` the tokens are `x`, `|>`, `f`, `(`, `1e-3`, `)`.

/// The class of a token, as far as the pre-pass cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `(`, `[` or `{` (the byte is kept).
    Open(u8),
    /// `)`, `]` or `}`.
    Close(u8),
    Comma,
    Semi,
    /// An identifier or keyword.
    Word,
    /// A number or a complete string.
    Atom,
    /// A string that reaches the end of its line or of the file.
    Unterminated,
    /// An operator or other punctuation (`+`, `|>`, `...`, `=`, `:`, ...).
    Punct,
    /// Anything else (a stray character); one char long.
    Other,
}

/// A token: its class and byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

impl Token {
    pub fn text<'a>(&self, src: &'a str) -> &'a str {
        src.get(self.start..self.end).unwrap_or("")
    }
}

/// Length of the punctuation token at `i` (longest match, so that `|>`
/// wins over `|`): `...`, the two-byte operators `|>` `->` `==` `!=` `<=`
/// `>=`, or one of `+ - * / ^ @ < > = . : ! | & % ?`. Matched on bytes: this
/// runs for every operator of every file.
fn punct_len(bytes: &[u8], i: usize) -> Option<usize> {
    let at = |j: usize| bytes.get(j).copied().unwrap_or(0);
    match (at(i), at(i + 1)) {
        (b'.', b'.') if at(i + 2) == b'.' => Some(3),
        (b'|', b'>') | (b'-', b'>') | (b'=', b'=') | (b'!', b'=') | (b'<', b'=') | (b'>', b'=') => Some(2),
        (
            b'+' | b'-' | b'*' | b'/' | b'^' | b'@' | b'<' | b'>' | b'=' | b'.' | b':' | b'!' | b'|' | b'&' | b'%'
            | b'?',
            _,
        ) => Some(1),
        _ => None,
    }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The token that starts at byte `i` (which must be below `src.len()`).
pub fn next_token(src: &str, i: usize) -> Token {
    let bytes = src.as_bytes();
    let at = |j: usize| bytes.get(j).copied().unwrap_or(0);
    let tok = |kind, end| Token { kind, start: i, end };
    let b = at(i);
    match b {
        b'(' | b'[' | b'{' => tok(Kind::Open(b), i + 1),
        b')' | b']' | b'}' => tok(Kind::Close(b), i + 1),
        b',' => tok(Kind::Comma, i + 1),
        b';' => tok(Kind::Semi, i + 1),
        b'"' => string(src, i),
        _ if is_ident_start(b) => {
            let mut j = i + 1;
            while is_ident_char(at(j)) {
                j += 1;
            }
            tok(Kind::Word, j)
        }
        _ if b.is_ascii_digit() => tok(Kind::Atom, number_end(bytes, i)),
        _ => match punct_len(bytes, i) {
            Some(len) => tok(Kind::Punct, i + len),
            None => {
                let len = src.get(i..).and_then(|rest| rest.chars().next()).map_or(1, char::len_utf8);
                tok(Kind::Other, i + len)
            }
        },
    }
}

/// End of the number starting at `i`: digits, an optional fraction and
/// exponent, then any identifier characters (a dtype suffix such as `bf16`;
/// the parser validates it).
fn number_end(bytes: &[u8], i: usize) -> usize {
    let at = |j: usize| bytes.get(j).copied().unwrap_or(0);
    let mut j = i;
    while at(j).is_ascii_digit() {
        j += 1;
    }
    if at(j) == b'.' && at(j + 1).is_ascii_digit() {
        j += 1;
        while at(j).is_ascii_digit() {
            j += 1;
        }
    }
    if matches!(at(j), b'e' | b'E') {
        let k = if matches!(at(j + 1), b'+' | b'-') { j + 2 } else { j + 1 };
        if at(k).is_ascii_digit() {
            j = k;
            while at(j).is_ascii_digit() {
                j += 1;
            }
        }
    }
    while is_ident_char(at(j)) {
        j += 1;
    }
    j
}

/// A string token starting at the `"` at `i`. Strings end at the next
/// unescaped `"`; reaching a newline or the end of the file first makes the
/// token `Unterminated` (ending just before the newline).
fn string(src: &str, i: usize) -> Token {
    let bytes = src.as_bytes();
    let mut j = i + 1;
    loop {
        match bytes.get(j) {
            None | Some(b'\n') => return Token { kind: Kind::Unterminated, start: i, end: j },
            Some(b'"') => return Token { kind: Kind::Atom, start: i, end: j + 1 },
            Some(b'\\') if bytes.get(j + 1).is_some_and(|&c| c != b'\n') => j += 2,
            Some(_) => j += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Skips spaces, tabs, carriage returns and (when `newlines`) line feeds.
    fn skip_blank(src: &str, mut i: usize, newlines: bool) -> usize {
        let bytes = src.as_bytes();
        while let Some(&b) = bytes.get(i) {
            if b == b' ' || b == b'\t' || b == b'\r' || (newlines && b == b'\n') {
                i += 1;
            } else {
                break;
            }
        }
        i
    }

    fn texts(src: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut i = skip_blank(src, 0, true);
        while i < src.len() {
            let t = next_token(src, i);
            out.push(t.text(src));
            i = skip_blank(src, t.end, true);
        }
        out
    }

    #[test]
    fn splits_operators_numbers_and_strings() {
        assert_eq!(texts("x |> f(1e-3, 2bf16)"), ["x", "|>", "f", "(", "1e-3", ",", "2bf16", ")"]);
        assert_eq!(
            texts(r#"a[..., 1:5] "s\"t" -> b"#),
            ["a", "[", "...", ",", "1", ":", "5", "]", r#""s\"t""#, "->", "b"]
        );
    }

    #[test]
    fn every_punctuation_is_one_token_and_the_longest_wins() {
        let all = [
            "...", "|>", "->", "==", "!=", "<=", ">=", "+", "-", "*", "/", "^", "@", "<", ">", "=", ".", ":", "!", "|",
            "&", "%", "?",
        ];
        for p in all {
            let t = next_token(p, 0);
            assert_eq!((t.kind, t.end), (Kind::Punct, p.len()), "{p}");
        }
        assert_eq!(texts(".. |>> =="), [".", ".", "|>", ">", "=="]);
        assert_eq!(next_token("#", 0).kind, Kind::Other);
    }

    #[test]
    fn strings_stop_at_the_end_of_the_line() {
        let t = next_token("\"abc\ndef\"", 0);
        assert_eq!((t.kind, t.end), (Kind::Unterminated, 4));
        assert_eq!(next_token("\"ab\\", 0).kind, Kind::Unterminated);
    }

    #[test]
    fn stray_characters_are_one_char_long() {
        let t = next_token("é", 0);
        assert_eq!((t.kind, t.end), (Kind::Other, 2));
    }
}
