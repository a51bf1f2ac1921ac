//! Data-file sources of §8 besides CSV: `load_idx` (MNIST's IDX format),
//! `load_npy` (NumPy `.npy`, and `.npz` archives), `load_safetensors` and
//! `load_tfrecord` (TFRecord shards of `tf.train.Example`s).
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
mod rows;
mod tfrecord;
mod zip;

use crate::diag::{Code, Diagnostic};
use crate::ir::plan::{FileFormat, FileSource};
use crate::ir::{DType, TensorType};
use crate::tensor::Tensor;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use raw::{decode, Scalar};
pub use rows::{MemoryRows, RowSource};
pub use tfrecord::{crc32c, masked_crc};

/// An E0001 error about `path`, at byte `at` when given.
pub fn fail(path: &Path, at: Option<usize>, msg: impl Into<String>) -> Diagnostic {
    let place = match at {
        Some(b) => format!("{}: at byte {b}", path.display()),
        None => path.display().to_string(),
    };
    Diagnostic::new(Code::Io, format!("{place}: {}", msg.into()))
}

/// The number of elements of an array of `shape`, or `None` when no array
/// can have it: the product of its non-zero sizes (a zero size still makes
/// an empty array of the others) must fit an `isize`, as array storage
/// requires. Every loader checks a file's declared shape with this before
/// trusting it (a fuzzed IDX header `[0, 3372220617, 3376684897]` found it).
pub fn element_count(shape: &[usize]) -> Option<usize> {
    let nonzero = shape.iter().filter(|&&d| d != 0).try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
    if nonzero > isize::MAX as usize {
        return None;
    }
    Some(if shape.contains(&0) { 0 } else { nonzero })
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

/// What checking a file source finds: each column's type over all shards
/// (first axis: the elements) and each shard's number of elements.
pub struct Probed {
    pub columns: Vec<TensorType>,
    pub counts: Vec<usize>,
}

/// The columns of the shards of a data file source, from their headers
/// alone where the format allows (the data is read when running): every
/// shard's columns need the same element types and, within a shard, the
/// same count.
pub fn probe(format: FileFormat, shards: &[Vec<PathBuf>], keys: &[String]) -> Result<Probed, Diagnostic> {
    let mut first: Option<(Vec<TensorType>, &Path)> = None;
    let mut counts = Vec::with_capacity(shards.len());
    for shard in shards {
        let refs: Vec<&Path> = shard.iter().map(|p| p.as_path()).collect();
        let cols = read(format, &refs, keys, false)?;
        let Some(head) = cols.first() else {
            // An empty TFRecord shard, which has no first record to type it.
            counts.push(0);
            continue;
        };
        counts.push(head.ty.shape[0]);
        let rows: Vec<TensorType> = cols.iter().map(|c| element_of(&c.ty)).collect();
        match &first {
            None => first = Some((rows, refs[0])),
            Some((want, path)) if *want != rows => {
                let text = |t: &[TensorType]| t.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
                return Err(fail(
                    refs[0],
                    None,
                    format!(
                        "holds elements of ({}), but the first shard `{}` holds ({}): every shard of a dataset must hold the same",
                        text(&rows),
                        path.display(),
                        text(want)
                    ),
                ));
            }
            _ => {}
        }
    }
    let total: usize = counts.iter().sum();
    let Some((rows, _)) = first else {
        let what = if shards.len() == 1 { "the file holds" } else { "the files hold" };
        let path = shards.first().and_then(|s| s.first()).map_or(Path::new(""), |p| p.as_path());
        return Err(fail(path, None, format!("{what} no records")));
    };
    let columns = rows
        .into_iter()
        .map(|t| {
            let mut shape = vec![total];
            shape.extend(t.shape);
            TensorType::new(t.dtype, shape)
        })
        .collect();
    Ok(Probed { columns, counts })
}

/// One element's type: `ty` without its first axis.
fn element_of(ty: &TensorType) -> TensorType {
    TensorType::new(ty.dtype, ty.shape[1..].to_vec())
}

/// The source's rows, read as they are asked for.
pub fn open(src: std::sync::Arc<FileSource>) -> rows::FileRows {
    rows::open(src)
}

/// One column of a shard: its type and, when decoded, its values.
struct Column {
    path: std::path::PathBuf,
    ty: TensorType,
    tensor: Option<Tensor>,
}

/// The columns of one shard (its files `paths`); only the types, from the
/// headers, unless `data`.
fn read(format: FileFormat, paths: &[&Path], keys: &[String], data: bool) -> Result<Vec<Column>, Diagnostic> {
    let mut cols = Vec::new();
    let p = paths.first().ok_or_else(|| Diagnostic::internal("loaders: no path"))?;
    match format {
        FileFormat::Idx => {
            // The first file holds the features (f32), a second the class labels (i32).
            for (i, p) in paths.iter().enumerate() {
                let dtype = if i == 0 { DType::F32 } else { DType::I32 };
                // Checking needs only the header and the length; MNIST's
                // gzipped files would take most of a second to inflate.
                let (bytes, total) = match (data, gz_head(p, IDX_HEADER_MAX)?) {
                    (true, _) => whole(p)?,
                    (false, Some(head)) => head,
                    (false, None) => rows::head(p, &rows::open_file(p)?)?,
                };
                let probed = idx::read(p, &bytes, total, dtype, data);
                // A gzip trailer gives the length modulo 4 GiB: confirm a
                // mismatch on the whole file before reporting it.
                let (ty, tensor) = match probed {
                    Err(_) if !data && is_gz(p) && bytes.len() < total.max(1) => {
                        let (bytes, total) = whole(p)?;
                        idx::read(p, &bytes, total, dtype, data)?
                    }
                    other => other?,
                };
                cols.push(Column { path: p.to_path_buf(), ty, tensor });
            }
        }
        FileFormat::Npy => {
            // An uncompressed array is checked from its header and length.
            let header = match (data || is_gz(p), rows::head(p, &rows::open_file(p)?)?) {
                (false, (bytes, total)) if !bytes.starts_with(b"PK") => {
                    npy::header(p, "", &bytes, total).ok().filter(|_| bytes.len() == total || total > bytes.len())
                }
                _ => None,
            };
            match header {
                Some(layout) => cols.push(Column { path: p.to_path_buf(), ty: layout.ty, tensor: None }),
                None => {
                    for (ty, tensor) in npy_arrays(p, &read_bytes(p)?, data)? {
                        cols.push(Column { path: p.to_path_buf(), ty, tensor });
                    }
                }
            }
        }
        FileFormat::Safetensors => {
            let file = super::checkpoint::SafeFile::read(p)?;
            for (ty, tensor) in safetensors_arrays(p, &file, keys, data)? {
                cols.push(Column { path: p.to_path_buf(), ty, tensor });
            }
        }
        FileFormat::TfRecord => {
            let probed = if data || is_gz(p) { None } else { Some(tfrecord_types(p, keys)?) };
            match probed {
                Some(types) => {
                    cols.extend(types.into_iter().map(|ty| Column { path: p.to_path_buf(), ty, tensor: None }))
                }
                None => {
                    for (ty, tensor) in tfrecord::read(paths, keys, data)? {
                        cols.push(Column { path: p.to_path_buf(), ty, tensor });
                    }
                }
            }
        }
    }
    check_counts(&cols)?;
    Ok(cols)
}

/// The columns' types of an uncompressed TFRecord file: its records from
/// the framing, the features from its first record.
fn tfrecord_types(p: &Path, keys: &[String]) -> Result<Vec<TensorType>, Diagnostic> {
    let file = rows::open_file(p)?;
    let total = file.metadata().map_err(|e| fail(p, None, format!("cannot read the file: {e}")))?.len();
    let records = tfrecord::index(p, &file, total)?;
    let Some(&first) = records.first() else {
        // An empty shard: the other shards give the columns.
        return Ok(Vec::new());
    };
    let mut bytes = vec![0u8; first.framed_len()];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, first.at)
        .map_err(|e| fail(p, None, format!("cannot read the file: {e}")))?;
    let features = tfrecord::features(p, (0, first.at), &bytes, keys)?;
    Ok(features
        .into_iter()
        .map(|(_, t)| {
            let mut shape = vec![records.len()];
            shape.extend(t.shape);
            TensorType::new(t.dtype, shape)
        })
        .collect())
}

/// The arrays of a `.npy` file or an `.npz` archive (a zip of `.npy`
/// members, which must hold at least one).
fn npy_arrays(p: &Path, bytes: &[u8], data: bool) -> Result<Vec<(TensorType, Option<Tensor>)>, Diagnostic> {
    if !bytes.starts_with(b"PK") {
        return Ok(vec![npy::read(p, "", bytes, data)?]);
    }
    let members = zip::members(p, bytes)?;
    if members.is_empty() {
        return Err(fail(p, None, "the archive holds no `.npy` arrays"));
    }
    members.iter().map(|(name, member)| npy::read(p, &format!("`{name}` in "), member, data)).collect()
}

/// The tensors `keys` names in a safetensors file (all, by name, when
/// `keys` is empty; the file must hold at least one).
fn safetensors_arrays(
    p: &Path,
    file: &super::checkpoint::SafeFile,
    keys: &[String],
    data: bool,
) -> Result<Vec<(TensorType, Option<Tensor>)>, Diagnostic> {
    let names: Vec<String> = if keys.is_empty() { file.names() } else { keys.to_vec() };
    if names.is_empty() {
        return Err(fail(p, None, "the file holds no tensors"));
    }
    names.iter().map(|name| file.tensor(name, data)).collect()
}

/// Every array that a data file of `format` holds, decoded from its bytes
/// (IDX as f32; uncompressed): the loaders' parsers over untrusted input,
/// each problem a diagnostic. The fuzz targets (`fuzz/`) drive this.
pub fn decode_bytes(format: FileFormat, bytes: &[u8]) -> Result<Vec<Tensor>, Diagnostic> {
    let p = Path::new("<bytes>");
    let arrays = match format {
        FileFormat::Idx => vec![idx::read(p, bytes, bytes.len(), DType::F32, true)?],
        FileFormat::Npy => npy_arrays(p, bytes, true)?,
        FileFormat::Safetensors => {
            let file = super::checkpoint::SafeFile::parse(p, bytes.to_vec())?;
            safetensors_arrays(p, &file, &[], true)?
        }
        FileFormat::TfRecord => tfrecord::decode(p, bytes)?,
    };
    arrays
        .into_iter()
        .map(|(_, t)| t.ok_or_else(|| Diagnostic::internal("loaders: data requested but not decoded")))
        .collect()
}

/// The columns of TFRecord bytes read the way a streamed shard is — its
/// record index from the framing, the features from the first record, each
/// record decoded on its own — for the fuzz target to hold against
/// [`decode_bytes`]: both accept the same files and give the same tensors.
pub fn decode_streamed_tfrecord(bytes: &[u8]) -> Result<Vec<Tensor>, Diagnostic> {
    let p = Path::new("<bytes>");
    let records = tfrecord::index(p, std::io::Cursor::new(bytes), bytes.len() as u64)?;
    let Some(first) = records.first() else {
        return Err(fail(p, None, "the file holds no records"));
    };
    let framed = |r: &tfrecord::Record| &bytes[r.at as usize..r.at as usize + r.framed_len()];
    let features = tfrecord::features(p, (0, first.at), framed(first), &[])?;
    let all: Vec<(usize, u64, &[u8])> = records.iter().enumerate().map(|(i, r)| (i, r.at, framed(r))).collect();
    tfrecord::decode_records(p, &all, &features)
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

#[cfg(test)]
mod tests {
    use super::decode_bytes;
    use crate::diag::Code;
    use crate::ir::plan::FileFormat;

    fn npy_2x3() -> Vec<u8> {
        npy_with("<f4")
    }

    fn npy_with(descr: &str) -> Vec<u8> {
        let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (2, 3), }}");
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h.as_bytes());
        (1..=6).for_each(|v: i32| b.extend((v as f32).to_le_bytes()));
        b
    }

    #[test]
    fn bytes_decode_like_files_and_damage_is_a_diagnostic() {
        let t = decode_bytes(FileFormat::Npy, &npy_2x3()).unwrap();
        assert_eq!((t.len(), t[0].shape(), t[0].to_f64_vec()), (1, &[2, 3][..], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        // Every prefix of a valid file is refused with a message, never a panic.
        let whole = npy_2x3();
        for n in 0..whole.len() {
            let e = decode_bytes(FileFormat::Npy, &whole[..n]).unwrap_err();
            assert_ne!(e.code, Code::Internal, "{e:?}");
        }
        // Found by the fuzz target: a dtype that starts with a multi-byte
        // character (the byte order must be one ASCII character).
        let e = decode_bytes(FileFormat::Npy, &npy_with("ě8")).unwrap_err();
        assert!(e.message.contains("unsupported dtype `ě8`"), "{e:?}");
        let json = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let mut st = (json.len() as u64).to_le_bytes().to_vec();
        st.extend(json);
        st.extend([0, 0, 128, 63, 0, 0, 0, 64]);
        assert_eq!(decode_bytes(FileFormat::Safetensors, &st).unwrap()[0].to_f64_vec(), vec![1.0, 2.0]);
        assert!(decode_bytes(FileFormat::Safetensors, &st[..st.len() - 1]).is_err());
        let idx = [0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 1, 7, 9];
        assert_eq!(decode_bytes(FileFormat::Idx, &idx).unwrap()[0].to_f64_vec(), vec![7.0, 9.0]);
        assert!(decode_bytes(FileFormat::Idx, &idx[..13]).is_err());
        // Found by the fuzz target: a zero size beside sizes whose product
        // overflows is refused like any other impossible shape.
        let huge = [0, 0, 8, 3, 0, 0, 0, 0, 0xc9, 0, 0, 0xc9, 0xc9, 0x44, 0x1f, 0x61];
        let e = decode_bytes(FileFormat::Idx, &huge).unwrap_err();
        assert!(e.code != Code::Internal && e.message.contains("too large"), "{e:?}");
    }
}
