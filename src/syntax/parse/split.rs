//! Splits a prepared file into chunks of whole top-level statements, so
//! that large files are parsed on several threads.
//!
//! Contract: the chunks are consecutive, cover the whole text, and every
//! boundary is a newline outside every bracket pair — after the newline
//! pre-pass such a newline always ends a top-level statement, so each chunk
//! is a program of its own and the statements of all chunks, in order, are
//! the file's. Small files (or one worker) give a single chunk.
//!
//! Example: `"let a = 1\nlet b = { 2\n3 }\n"` split in two breaks only at
//! the first newline; the one inside `{ }` separates block items.

use crate::syntax::newlines::Prepared;
use std::ops::Range;

/// Chunks smaller than this are not worth a thread (spawning one costs tens
/// of microseconds; parsing runs at a few hundred nanoseconds per byte).
const MIN_CHUNK_BYTES: usize = 16 * 1024;

/// The stack of a parser thread: what the main thread guarantees, for
/// which the pre-pass's nesting limits were chosen.
pub(super) const PARSER_STACK_BYTES: usize = 8 * 1024 * 1024;

/// How many threads parsing may use: the machine's cores.
pub(super) fn workers() -> usize {
    static WORKERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WORKERS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Up to `workers` chunks of about equal size.
pub(super) fn top_level_chunks(prepared: &Prepared, workers: usize) -> Vec<Range<usize>> {
    let len = prepared.text.len();
    let n = workers.min(len / MIN_CHUNK_BYTES).max(1);
    if n == 1 {
        return std::iter::once(0..len).collect();
    }
    let outer = outermost(&prepared.brackets);
    let bytes = prepared.text.as_bytes();
    let mut chunks = Vec::with_capacity(n);
    let mut start = 0;
    for k in 1..n {
        let Some(cut) = boundary_at_or_after(bytes, &outer, (len * k / n).max(start)) else { break };
        chunks.push(start..cut);
        start = cut + 1;
    }
    chunks.push(start..len);
    chunks
}

/// The bracket pairs not nested in another, sorted by position.
fn outermost(brackets: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut pairs = brackets.to_vec();
    pairs.sort_unstable();
    let mut outer: Vec<(usize, usize)> = Vec::new();
    for (open, close) in pairs {
        match outer.last() {
            Some(&(_, last_close)) if open < last_close => {}
            _ => outer.push((open, close)),
        }
    }
    outer
}

/// The first newline at or after `from` that is outside every bracket pair.
fn boundary_at_or_after(bytes: &[u8], outer: &[(usize, usize)], from: usize) -> Option<usize> {
    let mut pos = from;
    loop {
        pos += bytes.get(pos..)?.iter().position(|&b| b == b'\n')?;
        // The outer pair that opens last at or before `pos`, if it is still open there.
        let i = outer.partition_point(|&(open, _)| open <= pos);
        match i.checked_sub(1).map(|i| outer[i]) {
            Some((_, close)) if pos < close => pos = close,
            _ => return Some(pos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::FileId;
    use crate::syntax::newlines::prepare;

    fn chunks_of(source: &str, workers: usize) -> Vec<String> {
        let prepared = prepare(source, FileId(0)).expect("test source prepares");
        let text = prepared.text.clone();
        top_level_chunks(&prepared, workers).into_iter().map(|r| text[r].to_string()).collect()
    }

    #[test]
    fn small_files_are_one_chunk() {
        assert_eq!(chunks_of("let a = 1\nlet b = 2\n", 4).len(), 1);
    }

    #[test]
    fn chunks_cover_the_file_and_break_only_between_top_level_statements() {
        // Each line holds a block whose inner newlines must never be cut.
        let line = "let v = { let t = 1\n t + [1.0,\n 2.0] }\n";
        let source = line.repeat(4 * MIN_CHUNK_BYTES / line.len());
        let chunks = chunks_of(&source, 3);
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks.join("\n").len(), source.len());
        for c in &chunks {
            assert!(c.starts_with("let v = {"), "chunk starts mid-statement: {:?}", &c[..20]);
        }
    }
}
