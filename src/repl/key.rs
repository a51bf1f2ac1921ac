//! The cache key of a REPL entry: everything its compiled graph depends on,
//! and nothing it does not.
//!
//! Contract: two entries get the same key only if tracing them gives the
//! same graph up to the values of the session tensors they name — the
//! entry's *inputs*. The key is the entry's text with each input's name
//! replaced by its position (`f(a)` and `f(b)` are both `f(#0)`), the dtype
//! and shape of each input, and the identity of every other session binding
//! the entry reads, directly or through the bodies of user functions and
//! models (`Live::binding_key`). So rebinding `a` to another `f32[4, 4]`
//! keeps the key, while a new shape, a redefined `fn f` or a changed
//! compile-time number changes it.
//!
//! A name is an input only when the session binds it to a tensor and every
//! occurrence of it in the entry is a plain name: not after `.` (a field),
//! not before a single `=` (a named argument or a binding), not in a string
//! or a comment. Renaming such a name throughout the text changes which
//! session value it reads and nothing else, which is what makes entries
//! with the same key interchangeable.
//!
//! `Marks` relate the texts of two entries with the same key: they differ
//! only inside their marks (surrounding whitespace and input names), so a
//! position in one maps to the other (spans of a cached graph are moved to
//! the text the user typed this time).
//!
//! Example: after `let a = zeros([4, 4])` and `fn f(v) = v * 2.0`, the entry
//! `f(a)` has the key text `f(#0)`, one input `a: f32[4, 4]`, and the
//! identity of `f`; `f(b)` for another `f32[4, 4]` named `b` has the same key.

use crate::diag::SourceMap;
use crate::ir::{NodeId, TensorType};
use crate::trace::{Live, Value};
use std::collections::HashMap;

/// A session tensor the entry reads by name, fed to its graph at run time.
#[derive(Clone, Debug)]
pub struct Input {
    pub name: String,
    pub node: NodeId,
    pub ty: TensorType,
}

/// The key of an entry and what comes with it.
pub struct EntryKey {
    pub key: String,
    /// In order of first occurrence (the `#0`, `#1`, … of the key).
    pub inputs: Vec<Input>,
    pub marks: Marks,
    /// The values whose addresses the key contains (see `Live::binding_key`).
    pub deps: Vec<Value>,
}

/// Byte ranges of an entry's text that may differ between entries with the
/// same key, in order: the leading whitespace, every occurrence of an input
/// name, the trailing whitespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marks(Vec<(usize, usize)>);

impl Marks {
    /// Where byte `pos` of the text these marks belong to lies in the text
    /// that `to` belongs to (an entry with the same key).
    pub fn map(&self, to: &Marks, pos: usize) -> usize {
        let i = self.0.partition_point(|m| m.0 <= pos);
        let (Some(&(s, e)), Some(&(s2, e2))) = (self.0.get(i.wrapping_sub(1)), to.0.get(i.wrapping_sub(1))) else {
            return pos;
        };
        if pos >= e {
            e2 + (pos - e)
        } else {
            s2 + (pos - s).min(e2 - s2)
        }
    }
}

/// The key of `text` in the current session.
pub fn of(text: &str, live: &Live, sources: &SourceMap) -> EntryKey {
    let words = words(text);
    let mut plain: HashMap<&str, bool> = HashMap::new();
    for w in &words {
        *plain.entry(&text[w.start..w.end]).or_insert(true) &= w.plain;
    }
    // Each distinct name once, in order of first occurrence: an input's
    // position, or `None` for a name read by identity.
    let mut position: HashMap<&str, Option<usize>> = HashMap::new();
    let mut inputs = Vec::new();
    let mut others = Vec::new();
    for w in &words {
        let name = &text[w.start..w.end];
        if position.contains_key(name) {
            continue;
        }
        let input = match live.binding(name) {
            Some(Value::Tensor(node, ty)) if plain[name] => Some((node, ty)),
            _ => None,
        };
        match input {
            Some((node, ty)) => {
                position.insert(name, Some(inputs.len()));
                inputs.push(Input { name: name.to_string(), node, ty });
            }
            None => {
                position.insert(name, None);
                others.push(name);
            }
        }
    }
    let start = text.len() - text.trim_start().len();
    let end = text.trim_end().len().max(start);
    let mut marks = vec![(0, start)];
    let mut key = String::with_capacity(text.len() + 32);
    let mut at = start;
    for w in &words {
        if let Some(Some(i)) = position.get(&text[w.start..w.end]) {
            key.push_str(&text[at..w.start]);
            key.push_str(&format!("\u{1}#{i}"));
            marks.push((w.start, w.end));
            at = w.end;
        }
    }
    key.push_str(&text[at..end]);
    marks.push((end, text.len()));
    key.push('\u{0}');
    for i in &inputs {
        key.push_str(&format!("{};", i.ty));
    }
    let (identities, deps) = live.binding_key(&others, sources);
    key.push('\u{0}');
    key.push_str(&identities);
    EntryKey { key, inputs, marks: Marks(marks), deps }
}

/// An identifier in an entry's text.
#[derive(Debug, PartialEq)]
struct Word {
    start: usize,
    end: usize,
    /// Used as a plain name (see the module header).
    plain: bool,
}

/// The identifiers of `text` outside strings and comments (numbers, with
/// their suffixes, are skipped).
fn words(text: &str) -> Vec<Word> {
    let b = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
        } else if c.is_ascii_digit() {
            while i < b.len() && (ident(b[i]) || (b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))) {
                let exponent_sign = matches!(b[i], b'e' | b'E') && matches!(b.get(i + 1), Some(b'+' | b'-'));
                i += if exponent_sign { 2 } else { 1 };
            }
        } else if ident(c) {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let before = text[..start].trim_end().as_bytes().last().copied();
            let after = text[i..].trim_start().as_bytes();
            let assigned = after.first() == Some(&b'=') && after.get(1) != Some(&b'=');
            out.push(Word { start, end: i, plain: before != Some(b'.') && !assigned });
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<(&str, bool)> {
        words(text).iter().map(|w| (&text[w.start..w.end], w.plain)).collect()
    }

    #[test]
    fn words_skip_strings_comments_and_numbers() {
        assert_eq!(names("f(a, \"b c\") // d\n/* e */ 1.5e-3 2i g"), vec![("f", true), ("a", true), ("g", true)]);
        assert_eq!(names(r#""a\"b" c"#), vec![("c", true)]);
    }

    #[test]
    fn fields_and_assigned_names_are_not_plain() {
        assert_eq!(
            names("let y = net.w + normal([2], seed = s) == k"),
            vec![
                ("let", true),
                ("y", false),
                ("net", true),
                ("w", false),
                ("normal", true),
                ("seed", false),
                ("s", true),
                ("k", true)
            ]
        );
    }

    #[test]
    fn marks_map_positions_between_texts() {
        // `  f(a) + a` and `f(bb) + bb`: leading space, two names, no trailing.
        let one = Marks(vec![(0, 2), (4, 5), (9, 10), (10, 10)]);
        let two = Marks(vec![(0, 0), (2, 4), (8, 10), (10, 10)]);
        assert_eq!(one.map(&two, 2), 0, "`f`");
        assert_eq!(one.map(&two, 4), 2, "start of the first name");
        assert_eq!(one.map(&two, 5), 4, "end of the first name");
        assert_eq!(one.map(&two, 7), 6, "`+`");
        assert_eq!(one.map(&two, 10), 10, "the end");
    }
}
