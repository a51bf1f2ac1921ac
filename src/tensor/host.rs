//! Host-side tensor plumbing for the runtime: splitting a tensor into its
//! elements along the first axis, stacking elements into a batch, and
//! gathering a batch of rows.

use super::value::{Data, Tensor};
use crate::diag::Diagnostic;
use ndarray::{ArrayD, Axis};

macro_rules! each_data {
    ($data:expr, $a:ident => $body:expr) => {
        match $data {
            Data::F32($a) => Data::F32($body),
            Data::F64($a) => Data::F64($body),
            Data::I32($a) => Data::I32($body),
            Data::I64($a) => Data::I64($body),
            Data::Bool($a) => Data::Bool($body),
        }
    };
}

/// Element `i` along the first axis (one rank lower).
pub fn index_first(t: &Tensor, i: usize) -> Result<Tensor, Diagnostic> {
    if t.shape().first().is_none_or(|&n| i >= n) {
        return Err(Diagnostic::internal(format!("runtime: element {i} of a tensor of shape {:?}", t.shape())));
    }
    let data = each_data!(t.data(), a => a.index_axis(Axis(0), i).to_owned());
    Tensor::new(t.dtype(), data)
}

/// The elements `rows` of `t` along the first axis, stacked: a batch
/// gathered straight from a source's columns.
pub fn take_rows(t: &Tensor, rows: &[usize]) -> Result<Tensor, Diagnostic> {
    take_rows_within(t, rows, 0..rows.len())
}

/// [`take_rows`] where only the positions in `real` are copied and the
/// others are zeros: a data-parallel rank's share of a batch. The zeros
/// are fresh zeroed memory, which costs nothing until touched.
pub fn take_rows_within(t: &Tensor, rows: &[usize], real: std::ops::Range<usize>) -> Result<Tensor, Diagnostic> {
    let n = t.shape().first().copied().unwrap_or(0);
    let real = real.start.min(rows.len())..real.end.min(rows.len());
    if let Some(i) = rows[real.clone()].iter().find(|&&i| i >= n) {
        return Err(Diagnostic::internal(format!("runtime: element {i} of a tensor of shape {:?}", t.shape())));
    }
    let mut shape = t.shape().to_vec();
    let row: usize = shape[1..].iter().product();
    shape[0] = rows.len();
    // A contiguous column (the usual case) is one copy per row.
    let data = each_data!(t.data(), a => match a.as_slice() {
        Some(flat) => {
            let mut out = vec![Default::default(); rows.len() * row];
            for (p, &r) in rows.iter().enumerate().take(real.end).skip(real.start) {
                out[p * row..(p + 1) * row].copy_from_slice(&flat[r * row..(r + 1) * row]);
            }
            ArrayD::from_shape_vec(shape.clone(), out).map_err(|e| Diagnostic::internal(e.to_string()))?
        }
        None => {
            let picked: Vec<usize> = rows.iter().enumerate().map(|(p, &r)| if real.contains(&p) { r } else { 0 }).collect();
            let mut all = a.select(Axis(0), &picked);
            for p in (0..rows.len()).filter(|p| !real.contains(p)) {
                all.index_axis_mut(Axis(0), p).fill(Default::default());
            }
            all
        }
    });
    Tensor::new(t.dtype(), data)
}

/// Stacks equally shaped tensors along a new first axis.
pub fn stack(parts: &[&Tensor]) -> Result<Tensor, Diagnostic> {
    let Some(first) = parts.first() else {
        return Err(Diagnostic::internal("runtime: stacking no tensors"));
    };
    let mut shape = vec![parts.len()];
    shape.extend_from_slice(first.shape());
    joined(parts, shape, |s| s == first.shape())
}

/// Joins tensors along their first axis (their other axes must agree): a
/// batch assembled from runs of rows read separately.
pub fn concat_rows(parts: &[&Tensor]) -> Result<Tensor, Diagnostic> {
    let Some(first) = parts.first() else {
        return Err(Diagnostic::internal("runtime: joining no tensors"));
    };
    let rest = first.shape().get(1..).unwrap_or(&[]);
    let mut shape = vec![parts.iter().map(|p| p.shape().first().copied().unwrap_or(0)).sum()];
    shape.extend_from_slice(rest);
    joined(parts, shape, |s| !s.is_empty() && &s[1..] == rest)
}

/// The values of `parts` one after another, as a tensor of `shape`; each
/// part's shape must satisfy `fits`.
fn joined(parts: &[&Tensor], shape: Vec<usize>, fits: impl Fn(&[usize]) -> bool) -> Result<Tensor, Diagnostic> {
    let Some(first) = parts.first() else {
        return Err(Diagnostic::internal("runtime: joining no tensors"));
    };
    macro_rules! gather {
        ($variant:ident) => {{
            let mut flat = Vec::with_capacity(shape.iter().product());
            for p in parts {
                match p.data() {
                    // A contiguous part (the usual case) is one copy, not an
                    // element-by-element walk over dynamic dimensions.
                    Data::$variant(a) if fits(a.shape()) => match a.as_slice() {
                        Some(s) => flat.extend_from_slice(s),
                        None => flat.extend(a.iter().cloned()),
                    },
                    _ => return Err(Diagnostic::internal("runtime: joining tensors of different types or shapes")),
                }
            }
            Data::$variant(ArrayD::from_shape_vec(shape, flat).map_err(|e| Diagnostic::internal(e.to_string()))?)
        }};
    }
    let data = match first.data() {
        Data::F32(_) => gather!(F32),
        Data::F64(_) => gather!(F64),
        Data::I32(_) => gather!(I32),
        Data::I64(_) => gather!(I64),
        Data::Bool(_) => gather!(Bool),
    };
    Tensor::new(first.dtype(), data)
}

/// A tensor of zeros (`false` for bool).
pub fn zeros(ty: &crate::ir::TensorType) -> Result<Tensor, Diagnostic> {
    Tensor::from_literal(&crate::ir::Literal::Float(vec![0.0; ty.numel()]), ty)
}
