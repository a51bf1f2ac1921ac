//! NumPy `.npy` arrays: the magic `\x93NUMPY`, a version, a little-endian
//! header length (2 bytes in version 1, 4 in versions 2 and 3), a Python
//! dict literal `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`
//! and the raw values.
//!
//! Contract: numeric and bool dtypes of either byte order are read (`f2 f4
//! f8 i1 i2 i4 i8 u1 u2 u4 u8 b1`; small integers widen to i32, u4/u8 to
//! i64); strings, objects and complex numbers are an error naming the
//! dtype. Fortran-ordered arrays are reordered to row-major. The data must
//! have exactly the size the header announces.

use super::raw::{decode, Layout, Scalar};
use super::{fail, Path};
use crate::diag::Diagnostic;
use crate::ir::TensorType;
use crate::tensor::Tensor;

/// The array in `b` (`what` prefixes positions: "`x.npy` in " for an archive member).
pub fn read(path: &Path, what: &str, b: &[u8], data: bool) -> Result<(TensorType, Option<Tensor>), Diagnostic> {
    let layout = header(path, what, b, b.len())?;
    if !data {
        return Ok((layout.ty, None));
    }
    let (ty, payload) = (&layout.ty, &b[layout.offset..]);
    let tensor = if layout.fortran {
        decode(&to_row_major(payload, &ty.shape, layout.scalar.size()), layout.scalar, layout.big, ty.dtype, &ty.shape)?
    } else {
        decode(payload, layout.scalar, layout.big, ty.dtype, &ty.shape)?
    };
    Ok((layout.ty, Some(tensor)))
}

/// Where the values of the array in `b` (a prefix holding the header; the
/// array's bytes are `total` long) lie.
pub fn header(path: &Path, what: &str, b: &[u8], total: usize) -> Result<Layout, Diagnostic> {
    let err = |at: usize, msg: String| fail(path, Some(at), format!("{what}{msg}"));
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(err(0, "not a .npy file: it does not start with the magic `\\x93NUMPY`".into()));
    }
    let (len, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10usize),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(err(6, format!("unsupported .npy version {v}"))),
    };
    let end = start
        .checked_add(len)
        .filter(|&e| e <= b.len())
        .ok_or_else(|| err(b.len(), format!("the file ends inside its {len}-byte header")))?;
    let header = std::str::from_utf8(&b[start..end])
        .map_err(|e| err(start + e.valid_up_to(), "the header is not valid text".into()))?;
    let dict = Dict::parse(header).map_err(|(off, msg)| err(start + off, format!("bad .npy header: {msg}")))?;
    let (big, scalar) = parse_descr(&dict.descr).map_err(|msg| err(start, msg))?;
    let want = super::element_count(&dict.shape)
        .and_then(|n| n.checked_mul(scalar.size()))
        .ok_or_else(|| err(start, format!("the shape {:?} is too large", dict.shape)))?;
    let have = total.saturating_sub(end);
    if have != want {
        let how = if have < want { "truncated" } else { "longer than its header says" };
        return Err(err(
            total.min(end + want),
            format!("the data is {how}: shape {:?} of `{}` needs {want} bytes, found {have}", dict.shape, dict.descr),
        ));
    }
    let fortran = dict.fortran && dict.shape.len() > 1;
    Ok(Layout { ty: TensorType::new(scalar.natural(), dict.shape), scalar, big, offset: end, fortran })
}

/// Reorders column-major values of `shape` into row-major order.
fn to_row_major(b: &[u8], shape: &[usize], size: usize) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(b.len());
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        // Column-major offset of the row-major index `idx`.
        let (mut off, mut stride) = (0, 1);
        for (d, &i) in idx.iter().enumerate() {
            off += i * stride;
            stride *= shape[d];
        }
        out.extend_from_slice(&b[off * size..(off + 1) * size]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// `'<f4'` → (big-endian?, scalar type).
fn parse_descr(d: &str) -> Result<(bool, Scalar), String> {
    // The byte order is one ASCII character; anything else (a multi-byte
    // character from a damaged header included) is refused, not split.
    let (big, rest) = match d.as_bytes().first() {
        Some(b'>') => (true, &d[1..]),
        Some(b'<' | b'|' | b'=') => (false, &d[1..]),
        _ => return Err(format!("unsupported dtype `{d}`")),
    };
    let scalar = match rest {
        "f2" => Scalar::F16,
        "f4" => Scalar::F32,
        "f8" => Scalar::F64,
        "i1" => Scalar::I8,
        "i2" => Scalar::I16,
        "i4" => Scalar::I32,
        "i8" => Scalar::I64,
        "u1" => Scalar::U8,
        "u2" => Scalar::U16,
        "u4" => Scalar::U32,
        "u8" => Scalar::U64,
        "b1" => Scalar::Bool,
        _ => return Err(format!("unsupported dtype `{d}` (numbers and bools only: f2 f4 f8 i1..i8 u1..u8 b1)")),
    };
    Ok((big, scalar))
}

/// The three keys of an npy header.
struct Dict {
    descr: String,
    fortran: bool,
    shape: Vec<usize>,
}

impl Dict {
    /// Parses the header dict; errors carry the byte offset in the header.
    fn parse(h: &str) -> Result<Dict, (usize, String)> {
        let find = |key: &str| -> Result<usize, (usize, String)> {
            ["'", "\""]
                .iter()
                .find_map(|q| h.find(&format!("{q}{key}{q}")).map(|i| i + key.len() + 2))
                .ok_or((0, format!("no `{key}` key")))
        };
        let value_at = |i: usize| -> Result<usize, (usize, String)> {
            let rest = &h[i..];
            let colon = rest.find(':').ok_or((i, "a key without a value".to_string()))?;
            let after = &rest[colon + 1..];
            Ok(i + colon + 1 + (after.len() - after.trim_start().len()))
        };
        let d = value_at(find("descr")?)?;
        let q =
            h[d..].chars().next().filter(|c| *c == '\'' || *c == '"').ok_or((d, "`descr` is not a string".into()))?;
        let close = h[d + 1..].find(q).ok_or((d, "unterminated `descr` string".to_string()))?;
        let descr = h[d + 1..d + 1 + close].to_string();
        let f = value_at(find("fortran_order")?)?;
        let fortran = if h[f..].starts_with("True") {
            true
        } else if h[f..].starts_with("False") {
            false
        } else {
            return Err((f, "`fortran_order` is neither True nor False".into()));
        };
        let s = value_at(find("shape")?)?;
        if !h[s..].starts_with('(') {
            return Err((s, "`shape` is not a tuple".into()));
        }
        let close = h[s..].find(')').ok_or((s, "unterminated `shape` tuple".to_string()))?;
        let mut shape = Vec::new();
        for part in h[s + 1..s + close].split(',').map(str::trim).filter(|p| !p.is_empty()) {
            shape.push(
                part.trim_end_matches('L')
                    .parse::<usize>()
                    .map_err(|_| (s, format!("`{part}` in `shape` is not a dimension")))?,
            );
        }
        Ok(Dict { descr, fortran, shape })
    }
}
