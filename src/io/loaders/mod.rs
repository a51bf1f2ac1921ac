//! Data-file sources of §8 besides CSV: `load_idx` (MNIST's IDX format),
//! `load_npy` (NumPy `.npy`, and `.npz` archives) and `load_safetensors`.
//! Each format has a header that gives the element types and count, so the
//! tracer calls [`probe`] while checking (a wrong shape is a check error)
//! and the runtime calls [`load`] for the data.
//!
//! Contract: `.gz` files are decompressed transparently. Every problem is an
//! E0001 diagnostic that names the file and, for a malformed file, the byte
//! position (in the decompressed data for `.gz`): a missing file, a wrong
//! magic number, an unknown dtype, counts that disagree, a short or over-long
//! file, a truncated gzip stream, a bad JSON or npy header. Never a panic
//! and never silently truncated data: every size is checked exactly.
//!
//! Example: `load_idx("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")`
//! probes to the parts `f32[28, 28]` and `i32[]` with 60000 elements.

mod idx;
mod npy;
mod raw;
mod zip;

use crate::diag::{Code, Diagnostic};
use crate::ir::plan::{FileFormat, FileSource};
use crate::ir::{DType, TensorType};
use crate::tensor::Tensor;
use std::io::Read;
use std::path::Path;

pub use raw::{decode, Scalar};

/// An E0001 error about `path`, at byte `at` when given.
pub fn fail(path: &Path, at: Option<usize>, msg: impl Into<String>) -> Diagnostic {
    let place = match at {
        Some(b) => format!("{}: at byte {b}", path.display()),
        None => path.display().to_string(),
    };
    Diagnostic::new(Code::Io, format!("{place}: {}", msg.into()))
}

/// Reads a whole file, decompressing `.gz` transparently.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, Diagnostic> {
    let raw = read_raw(path)?;
    if !is_gz(path) {
        return Ok(raw);
    }
    let mut out = Vec::new();
    let mut dec = flate2::read::GzDecoder::new(&raw[..]);
    dec.read_to_end(&mut out).map_err(|e| gzip_error(path, &e, out.len()))?;
    Ok(out)
}

fn is_gz(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// The file's bytes as stored.
fn read_raw(path: &Path) -> Result<Vec<u8>, Diagnostic> {
    std::fs::read(path).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::NotFound { "no such file".to_string() } else { e.to_string() };
        fail(path, None, format!("cannot read the file: {why}"))
    })
}

/// A failed gzip decompression, after `done` decompressed bytes.
fn gzip_error(path: &Path, e: &std::io::Error, done: usize) -> Diagnostic {
    let why = if e.kind() == std::io::ErrorKind::UnexpectedEof {
        "the gzip stream is truncated".to_string()
    } else {
        format!("not a valid gzip file: {e}")
    };
    fail(path, None, format!("{why} (after {done} decompressed bytes)"))
}

/// The longest IDX header: the magic, then 255 dimensions of 4 bytes.
const IDX_HEADER_MAX: usize = 4 + 4 * 255;

/// A whole (decompressed) file and its length.
fn whole(path: &Path) -> Result<(Vec<u8>, usize), Diagnostic> {
    let bytes = read_bytes(path)?;
    let n = bytes.len();
    Ok((bytes, n))
}

/// For a `.gz` file: its first `n` decompressed bytes and its decompressed
/// length, from the gzip trailer (modulo 4 GiB) unless the stream is shorter
/// than `n`. `None` for other files.
fn gz_head(path: &Path, n: usize) -> Result<Option<(Vec<u8>, usize)>, Diagnostic> {
    if !is_gz(path) {
        return Ok(None);
    }
    let raw = read_raw(path)?;
    let mut head = Vec::with_capacity(n);
    let mut dec = flate2::read::GzDecoder::new(&raw[..]).take(n as u64 + 1);
    dec.read_to_end(&mut head).map_err(|e| gzip_error(path, &e, head.len()))?;
    if head.len() <= n {
        let total = head.len();
        return Ok(Some((head, total)));
    }
    let trailer = raw.len().checked_sub(4).and_then(|at| raw.get(at..)).unwrap_or(&[0, 0, 0, 0]);
    let total = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]) as usize;
    head.truncate(n);
    Ok(Some((head, total.max(n))))
}

/// The types of the columns (first axis: the elements) of a data file
/// source, checking that every column holds the same number of elements.
pub fn probe(format: FileFormat, paths: &[&Path], keys: &[String]) -> Result<Vec<TensorType>, Diagnostic> {
    Ok(read(format, paths, keys, false)?.into_iter().map(|c| c.ty).collect())
}

/// The columns of `src`, which must still have the types found while checking.
pub fn load(src: &FileSource) -> Result<Vec<Tensor>, Diagnostic> {
    let paths: Vec<&Path> = src.paths.iter().map(|p| p.as_path()).collect();
    let cols = read(src.format, &paths, &src.keys, true)?;
    let mut out = Vec::with_capacity(cols.len());
    for (c, want) in cols.into_iter().zip(&src.columns) {
        if c.ty != *want {
            return Err(fail(
                &c.path,
                None,
                format!("the file changed since the program was checked: it now holds {}, not {want}", c.ty),
            ));
        }
        out.push(c.tensor.ok_or_else(|| Diagnostic::internal("loaders: data requested but not decoded"))?);
    }
    Ok(out)
}

/// One column of a source: its type and, when decoded, its values.
struct Column {
    path: std::path::PathBuf,
    ty: TensorType,
    tensor: Option<Tensor>,
}

fn read(format: FileFormat, paths: &[&Path], keys: &[String], data: bool) -> Result<Vec<Column>, Diagnostic> {
    let mut cols = Vec::new();
    match format {
        FileFormat::Idx => {
            // The first file holds the features (f32), a second the class labels (i32).
            for (i, p) in paths.iter().enumerate() {
                let dtype = if i == 0 { DType::F32 } else { DType::I32 };
                // Checking needs only the header and the length; MNIST's
                // gzipped files would take most of a second to inflate.
                let (bytes, total) =
                    if data { whole(p)? } else { gz_head(p, IDX_HEADER_MAX)?.map_or_else(|| whole(p), Ok)? };
                let probed = idx::read(p, &bytes, total, dtype, data);
                // A gzip trailer gives the length modulo 4 GiB: confirm a
                // mismatch on the whole file before reporting it.
                let (ty, tensor) = match probed {
                    Err(_) if !data && bytes.len() < total.max(1) => {
                        let (bytes, total) = whole(p)?;
                        idx::read(p, &bytes, total, dtype, data)?
                    }
                    other => other?,
                };
                cols.push(Column { path: p.to_path_buf(), ty, tensor });
            }
        }
        FileFormat::Npy => {
            let p = paths.first().ok_or_else(|| Diagnostic::internal("loaders: no path"))?;
            let bytes = read_bytes(p)?;
            if bytes.starts_with(b"PK") {
                for (name, member) in zip::members(p, &bytes)? {
                    let (ty, tensor) = npy::read(p, &format!("`{name}` in "), &member, data)?;
                    cols.push(Column { path: p.to_path_buf(), ty, tensor });
                }
                if cols.is_empty() {
                    return Err(fail(p, None, "the archive holds no `.npy` arrays"));
                }
            } else {
                let (ty, tensor) = npy::read(p, "", &bytes, data)?;
                cols.push(Column { path: p.to_path_buf(), ty, tensor });
            }
        }
        FileFormat::Safetensors => {
            let p = paths.first().ok_or_else(|| Diagnostic::internal("loaders: no path"))?;
            let file = super::checkpoint::SafeFile::read(p)?;
            let names: Vec<String> = if keys.is_empty() { file.names() } else { keys.to_vec() };
            if names.is_empty() {
                return Err(fail(p, None, "the file holds no tensors"));
            }
            for name in &names {
                let (ty, tensor) = file.tensor(name, data)?;
                cols.push(Column { path: p.to_path_buf(), ty, tensor });
            }
        }
    }
    check_counts(&cols)?;
    Ok(cols)
}

/// Every column needs rank ≥ 1 and the same length along its first axis.
fn check_counts(cols: &[Column]) -> Result<(), Diagnostic> {
    let mut n = None;
    for c in cols {
        let Some(&len) = c.ty.shape.first() else {
            return Err(fail(&c.path, None, format!("holds a scalar ({}); a dataset needs rank ≥ 1", c.ty)));
        };
        match n {
            Some((m, p)) if m != len => {
                return Err(fail(
                    &c.path,
                    None,
                    format!(
                        "holds {len} elements but `{}` holds {m}: the columns of a dataset must have equal counts",
                        Path::display(p)
                    ),
                ))
            }
            None => n = Some((len, &c.path)),
            _ => {}
        }
    }
    Ok(())
}
