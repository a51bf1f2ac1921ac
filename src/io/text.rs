//! `load_text(path, window = none, stride = window)`: a UTF-8 text file
//! (optionally gzipped) as its bytes, for character-level models.
//!
//! Contract: the file must be readable, valid UTF-8 and not empty. Without
//! a window there is one element per byte, an `i32` scalar holding the byte
//! value (0–255: a character outside ASCII is several elements). With
//! `window = (w, s)` the element `i` is the `i32[w]` of bytes
//! `i·s .. i·s + w`, for every `i` whose window ends inside the file (a
//! shorter tail is dropped); a file shorter than one window is an error.
//! Every problem is an E0001 diagnostic naming the file (and, for bad
//! UTF-8, the line). The windows are materialized: `count · w` values,
//! at most [`MAX_VALUES`].
//!
//! Example: the text `"abcde"` with `window = (3, 2)` gives the elements
//! `[97, 98, 99]` and `[99, 100, 101]`.

use super::csv::read_text;
use super::loaders::fail;
use crate::diag::Diagnostic;
use crate::ir::plan::HostColumns;
use crate::ir::{DType, Literal, TensorType};
use std::path::Path;

/// The most values the windows may hold: they are built while checking,
/// 8 bytes each (2 GiB here), and a small `stride` multiplies the file.
pub const MAX_VALUES: usize = 1 << 28;

/// The bytes of the text file at `path`, cut into windows of `window.0`
/// bytes every `window.1` bytes when `window` is given (both positive).
pub fn load_text(path: &Path, window: Option<(usize, usize)>) -> Result<HostColumns, Diagnostic> {
    let bytes = read_text(path)?.into_bytes();
    if bytes.is_empty() {
        return Err(fail(path, None, "the file is empty"));
    }
    let n = bytes.len();
    let value = |b: &u8| i64::from(*b);
    let column = match window {
        None => (TensorType::new(DType::I32, vec![n]), Literal::Int(bytes.iter().map(value).collect())),
        Some((w, s)) => {
            if n < w {
                return Err(fail(path, None, format!("the file holds {n} bytes, fewer than one window of {w}")));
            }
            let count = (n - w) / s + 1;
            if count.saturating_mul(w) > MAX_VALUES {
                return Err(fail(
                    path,
                    None,
                    format!(
                        "{count} windows of {w} bytes are {} values, more than the {MAX_VALUES} allowed; use a larger stride",
                        count as u128 * w as u128
                    ),
                ));
            }
            let values = (0..count).flat_map(|i| &bytes[i * s..i * s + w]).map(value).collect();
            (TensorType::new(DType::I32, vec![count, w]), Literal::Int(values))
        }
    };
    Ok(HostColumns { columns: vec![column] })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tfc-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn ints(h: &HostColumns) -> (Vec<usize>, Vec<i64>) {
        match &h.columns[0] {
            (ty, Literal::Int(v)) => (ty.shape.clone(), v.clone()),
            other => panic!("not ints: {other:?}"),
        }
    }

    #[test]
    fn bytes_and_windows() {
        let p = file("abcde.txt", "abcdé".as_bytes());
        assert_eq!(ints(&load_text(&p, None).unwrap()), (vec![6], vec![97, 98, 99, 100, 0xC3, 0xA9]));
        // Windows of 3 every 2 bytes: 0..3, 2..5; the tail 4..6 is too short.
        assert_eq!(ints(&load_text(&p, Some((3, 2))).unwrap()), (vec![2, 3], vec![97, 98, 99, 99, 100, 0xC3]));
        assert_eq!(ints(&load_text(&p, Some((6, 1))).unwrap()).0, vec![1, 6]);
    }

    #[test]
    fn bad_files_are_errors() {
        let msg = |p: &Path, w| load_text(p, w).unwrap_err().message;
        assert!(msg(&file("empty.txt", b""), None).contains("the file is empty"));
        assert!(msg(&file("short.txt", b"abc"), Some((4, 1))).contains("3 bytes, fewer than one window of 4"));
        assert!(msg(&file("latin1.txt", b"ok\ncaf\xe9\n"), None).contains("latin1.txt:2: the file is not valid UTF-8"));
        assert!(msg(Path::new("/nonexistent/x.txt"), None).contains("no such file"));
        let big = file("big.txt", &[b'a'; 1 << 16]);
        assert!(msg(&big, Some((1 << 13, 1))).contains("more than the 268435456 allowed; use a larger stride"));
    }
}
