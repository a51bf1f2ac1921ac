//! File-name patterns for data sources with many shard files
//! (`load_tfrecord("data/train-*.tfrecord")`): `*` matches any run of
//! characters and `?` any one character, in the last path component only.
//!
//! Contract: the matches are the directory's regular files whose names
//! match, sorted by name (so shards are read in a fixed order on every
//! host); a pattern that matches nothing is an E0001 error naming the
//! directory; a path without `*` or `?` is returned as it is (a missing
//! file is reported by whoever reads it).
//!
//! Example: `expand(Path::new("data"), "train-*.tfrecord")` gives
//! `data/train-00000.tfrecord`, `data/train-00001.tfrecord`, ….

use crate::diag::{Code, Diagnostic};
use std::path::{Path, PathBuf};

/// The files `pattern` (relative to `base` unless absolute) names.
pub fn expand(base: &Path, pattern: &str) -> Result<Vec<PathBuf>, Diagnostic> {
    let full = base.join(pattern);
    let name = full.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = match full.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if dir.to_string_lossy().contains(['*', '?']) {
        return Err(Diagnostic::new(Code::Io, format!("`{pattern}`: only the file name may hold `*` or `?`"))
            .help("name the directory, e.g. `data/train-*.tfrecord`"));
    }
    if !name.contains(['*', '?']) {
        return Ok(vec![full]);
    }
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("`{pattern}` matches no file: there is no directory `{}`", dir.display())
            }
            _ => format!("cannot list `{}` for `{pattern}`: {e}", dir.display()),
        };
        Diagnostic::new(Code::Io, why)
    })?;
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .filter(|e| matches(&name, &e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(Diagnostic::new(Code::Io, format!("`{pattern}` matches no file in `{}`", dir.display()))
            .help("check the directory and the pattern (`*` is any run of characters, `?` one character)"));
    }
    Ok(found)
}

/// Whether `name` matches `pattern` (`*`, `?`, other characters literally).
fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer match with one backtrack point for the last `*`.
    let (mut i, mut j, mut star, mut resume) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            resume = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            resume += 1;
            j = resume;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_and_question_marks_match_like_a_shell() {
        assert!(matches("train-*.tfrecord", "train-00001.tfrecord"));
        assert!(matches("*", "anything"));
        assert!(matches("a?c", "abc"));
        assert!(matches("*-of-*", "x-00001-of-00004"));
        assert!(!matches("train-*.tfrecord", "test-00001.tfrecord"));
        assert!(!matches("a?c", "ac"));
        assert!(!matches("*.gz", "file.gzip"));
    }

    #[test]
    fn matches_are_sorted_and_an_empty_match_is_an_error() {
        let dir = std::env::temp_dir().join(format!("tfc-glob-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["s-2.rec", "s-10.rec", "s-1.rec", "other.txt"] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let found = expand(&dir, "s-*.rec").unwrap();
        let names: Vec<String> = found.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["s-1.rec", "s-10.rec", "s-2.rec"]);
        let e = expand(&dir, "none-*.rec").unwrap_err();
        assert!(e.message.contains("matches no file"), "{}", e.message);
        assert_eq!(expand(&dir, "plain.rec").unwrap(), [dir.join("plain.rec")]);
        assert!(expand(&dir, "*/x.rec").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
