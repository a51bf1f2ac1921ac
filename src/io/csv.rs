//! `load_csv(path, label = -1)`: numeric CSV files (optionally gzipped).
//!
//! Contract: every row has the same number of numeric columns; the label
//! column (negative counts from the end; none when `label` is not given)
//! holds integers and becomes an i32 part, the other columns an f32 part.
//! A header line is skipped when its first field is not a number. Every
//! problem names the file and line: a missing file, bad gzip, bad UTF-8, a
//! ragged row, a non-number, a fractional label, an empty file.

use crate::diag::{Code, Diagnostic};
use crate::ir::plan::HostColumns;
use crate::ir::{DType, Literal, TensorType};
use std::path::Path;

fn fail(path: &Path, line: Option<usize>, msg: impl Into<String>) -> Diagnostic {
    let place = match line {
        Some(l) => format!("{}:{l}", path.display()),
        None => path.display().to_string(),
    };
    Diagnostic::new(Code::Io, format!("{place}: {}", msg.into()))
}

/// Reads a whole file as text, decompressing `.gz` transparently.
pub fn read_text(path: &Path) -> Result<String, Diagnostic> {
    let bytes = super::loaders::read_bytes(path)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        fail(path, Some(line), "the file is not valid UTF-8")
    })
}

/// Parses the CSV at `path` into (features f32[N, C], labels i32[N]) or,
/// without a label column, features alone.
pub fn load_csv(path: &Path, label: Option<i64>) -> Result<HostColumns, Diagnostic> {
    let text = read_text(path)?;
    // Each data row with its 1-based line number in the file.
    let mut rows: Vec<(usize, Vec<f64>)> = Vec::new();
    let mut width = None;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let parsed: Vec<Option<f64>> = fields.iter().map(|f| f.parse::<f64>().ok()).collect();
        if rows.is_empty() && width.is_none() && parsed.first().is_some_and(|p| p.is_none()) {
            // A header row: remember its width, skip it.
            width = Some(fields.len());
            continue;
        }
        if let Some(col) = parsed.iter().position(|p| p.is_none()) {
            return Err(fail(path, Some(line_no), format!("column {} is not a number: `{}`", col + 1, fields[col])));
        }
        let values: Vec<f64> = parsed.into_iter().flatten().collect();
        match width {
            Some(w) if w != values.len() => {
                return Err(fail(
                    path,
                    Some(line_no),
                    format!("this row has {} columns, earlier rows have {w}", values.len()),
                ))
            }
            _ => width = Some(values.len()),
        }
        rows.push((line_no, values));
    }
    let Some(width) = width.filter(|_| !rows.is_empty()) else {
        return Err(fail(path, None, "the file has no data rows"));
    };
    let label_col = match label {
        None => None,
        Some(l) => {
            let c = if l < 0 { l + width as i64 } else { l };
            if c < 0 || c >= width as i64 {
                return Err(fail(path, None, format!("label column {l} is out of range for {width} columns")));
            }
            Some(c as usize)
        }
    };
    let n = rows.len();
    let mut features = Vec::with_capacity(n * width);
    let mut labels = Vec::with_capacity(n);
    for (line_no, row) in &rows {
        for (c, &v) in row.iter().enumerate() {
            if Some(c) == label_col {
                if v.fract() != 0.0 || v.abs() > i32::MAX as f64 {
                    return Err(fail(path, Some(*line_no), format!("the label `{v}` is not an integer class")));
                }
                labels.push(v as i64);
            } else {
                features.push(v as f32 as f64);
            }
        }
    }
    let f = width - usize::from(label_col.is_some());
    let mut columns = vec![(TensorType::new(DType::F32, vec![n, f]), Literal::Float(features))];
    if label_col.is_some() {
        columns.push((TensorType::new(DType::I32, vec![n]), Literal::Int(labels)));
    }
    Ok(HostColumns { columns })
}
