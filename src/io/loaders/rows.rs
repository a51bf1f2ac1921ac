//! Rows of a dataset's source, read when a pipeline asks for them: the
//! files of `load_npy`, `load_idx` and `load_tfrecord` stream instead of
//! being read whole, so a dataset may be far larger than memory.
//!
//! Contract:
//! - [`RowSource::gather`] gives the elements at the requested rows (in
//!   that order), one tensor per part, bit for bit what reading the whole
//!   file would give. Only the positions in `real` are read; the others are
//!   zeros (a data-parallel rank reads only its share of every batch).
//! - A shard (one file, or an IDX images and labels pair) is opened the
//!   first time one of its rows is wanted, never before, and its header is
//!   checked against what the program was checked with. Uncompressed `.npy`
//!   (C order), IDX and TFRecord files are read row by row (`pread`, runs
//!   of consecutive rows in one read); `.gz` files, `.npz` archives,
//!   Fortran-ordered arrays and safetensors files are read whole into
//!   memory when first touched.
//! - Memory: the open files, each TFRecord file's record index (16 bytes a
//!   record) and the shards read whole; never the rows of a stream.
//!
//! Example: `open(&src)?.gather(&[7, 3], 0..2)` reads rows 7 and 3 of the
//! source (two `pread`s for an npy file) and stacks them.

use super::raw::{decode, Layout};
use super::{fail, idx, npy, tfrecord};
use crate::diag::Diagnostic;
use crate::ir::plan::{FileFormat, FileSource};
use crate::ir::{DType, TensorType};
use crate::tensor::host::{concat_rows, take_rows, take_rows_within, zeros};
use crate::tensor::Tensor;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Elements by row number.
pub trait RowSource: Send + Sync {
    /// The number of elements.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements at `rows`, stacked (`[rows.len(), …]` per part). Only
    /// the positions in `real` are read; the others hold zeros.
    fn gather(&self, rows: &[usize], real: Range<usize>) -> Result<Vec<Tensor>, Diagnostic>;

    /// How many elements were read from files so far (for `--verbose`).
    fn rows_read(&self) -> usize {
        0
    }
}

/// Columns already in memory (a CSV file, tensors, `range`).
pub struct MemoryRows(pub Vec<Tensor>);

impl RowSource for MemoryRows {
    fn len(&self) -> usize {
        self.0.first().and_then(|c| c.shape().first().copied()).unwrap_or(0)
    }

    fn gather(&self, rows: &[usize], real: Range<usize>) -> Result<Vec<Tensor>, Diagnostic> {
        self.0.iter().map(|c| take_rows_within(c, rows, real.clone())).collect()
    }
}

/// The shards of a file source, each opened on first use.
pub struct FileRows {
    source: Arc<FileSource>,
    /// The first row of each shard, then the total.
    starts: Vec<usize>,
    shards: Vec<OnceLock<Result<Shard, Diagnostic>>>,
    read: AtomicUsize,
}

/// How one shard's rows are read.
enum Shard {
    /// One file per column with rows of a fixed size.
    Fixed(Vec<Fixed>),
    /// A TFRecord file: its records and the features to decode.
    Records { path: PathBuf, file: File, records: Vec<tfrecord::Record>, features: Vec<(String, TensorType)> },
    /// Read whole.
    Memory(Vec<Tensor>),
}

/// A column stored as consecutive rows of `layout.row_bytes()` bytes.
struct Fixed {
    path: PathBuf,
    file: File,
    layout: Layout,
}

/// Opens `source` for reading by rows (no file is opened yet).
pub fn open(source: Arc<FileSource>) -> FileRows {
    let mut starts = vec![0];
    for c in &source.counts {
        starts.push(starts.last().copied().unwrap_or(0) + c);
    }
    let shards = source.shards.iter().map(|_| OnceLock::new()).collect();
    FileRows { source, starts, shards, read: AtomicUsize::new(0) }
}

impl RowSource for FileRows {
    fn len(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    fn gather(&self, rows: &[usize], real: Range<usize>) -> Result<Vec<Tensor>, Diagnostic> {
        let parts = self.source.columns.len();
        let mut pieces: Vec<Vec<Tensor>> = vec![Vec::new(); parts];
        let mut at = 0;
        while at < rows.len() {
            // The longest run from `at` that is one read: zeros outside
            // `real`, else consecutive rows of one shard.
            let inside = real.contains(&at);
            let end = if inside {
                real.end.min(rows.len())
            } else if at < real.start {
                real.start
            } else {
                rows.len()
            };
            let run = if inside {
                let shard = self.shard_of(rows[at])?;
                let mut stop = at + 1;
                while stop < end && rows[stop] == rows[stop - 1] + 1 && rows[stop] < self.starts[shard + 1] {
                    stop += 1;
                }
                for (part, t) in self.read_run(shard, &rows[at..stop])?.into_iter().enumerate() {
                    pieces[part].push(t);
                }
                stop
            } else {
                for (part, ty) in self.source.columns.iter().enumerate() {
                    let mut shape = ty.shape.clone();
                    shape[0] = end - at;
                    pieces[part].push(zeros(&TensorType::new(ty.dtype, shape))?);
                }
                end
            };
            at = run;
        }
        if rows.is_empty() {
            return self.source.columns.iter().map(|ty| zeros(&TensorType::new(ty.dtype, empty_rows(ty)))).collect();
        }
        pieces.iter().map(|p| concat_rows(&p.iter().collect::<Vec<_>>())).collect()
    }

    fn rows_read(&self) -> usize {
        self.read.load(Ordering::Relaxed)
    }
}

/// The shape of no rows of a column of type `ty`.
fn empty_rows(ty: &TensorType) -> Vec<usize> {
    let mut shape = ty.shape.clone();
    shape[0] = 0;
    shape
}

impl FileRows {
    /// The shard that holds `row`.
    fn shard_of(&self, row: usize) -> Result<usize, Diagnostic> {
        if row >= self.len() {
            return Err(Diagnostic::internal(format!("loaders: row {row} of a source of {}", self.len())));
        }
        Ok(self.starts.partition_point(|&s| s <= row) - 1)
    }

    /// Consecutive `rows` of shard `s`, one tensor per part.
    fn read_run(&self, s: usize, rows: &[usize]) -> Result<Vec<Tensor>, Diagnostic> {
        let shard = self.shards[s].get_or_init(|| self.open_shard(s)).as_ref().map_err(Clone::clone)?;
        let first = rows[0] - self.starts[s];
        self.read.fetch_add(rows.len(), Ordering::Relaxed);
        match shard {
            Shard::Fixed(columns) => columns
                .iter()
                .map(|c| {
                    let row = c.layout.row_bytes();
                    let mut bytes = vec![0u8; row * rows.len()];
                    let at = (c.layout.offset + first * row) as u64;
                    c.file.read_exact_at(&mut bytes, at).map_err(|e| changed(&c.path, &e))?;
                    let mut shape = c.layout.ty.shape.clone();
                    shape[0] = rows.len();
                    decode(&bytes, c.layout.scalar, c.layout.big, c.layout.ty.dtype, &shape)
                })
                .collect(),
            Shard::Records { path, file, records, features } => {
                let picked = &records[first..first + rows.len()];
                let mut buffers = Vec::with_capacity(picked.len());
                for r in picked {
                    let mut bytes = vec![0u8; r.framed_len()];
                    file.read_exact_at(&mut bytes, r.at).map_err(|e| changed(path, &e))?;
                    buffers.push(bytes);
                }
                let framed: Vec<(usize, u64, &[u8])> =
                    buffers.iter().zip(picked).enumerate().map(|(i, (b, r))| (first + i, r.at, &b[..])).collect();
                tfrecord::decode_records(path, &framed, features)
            }
            Shard::Memory(columns) => {
                let local: Vec<usize> = (first..first + rows.len()).collect();
                columns.iter().map(|c| take_rows(c, &local)).collect()
            }
        }
    }

    /// Opens shard `s` and checks it still holds what the program was checked with.
    fn open_shard(&self, s: usize) -> Result<Shard, Diagnostic> {
        let paths = &self.source.shards[s];
        let count = self.source.counts[s];
        let want = |part: usize| {
            let ty = &self.source.columns[part];
            let mut shape = ty.shape.clone();
            shape[0] = count;
            TensorType::new(ty.dtype, shape)
        };
        let shard = open_shard(self.source.format, paths, &self.source.keys)?;
        let types: Vec<TensorType> = match &shard {
            Shard::Fixed(columns) => columns.iter().map(|c| c.layout.ty.clone()).collect(),
            Shard::Records { features, .. } => features
                .iter()
                .map(|(_, ty)| {
                    let mut shape = vec![count];
                    shape.extend(&ty.shape);
                    TensorType::new(ty.dtype, shape)
                })
                .collect(),
            Shard::Memory(columns) => columns.iter().map(|c| c.ty()).collect(),
        };
        let records = match &shard {
            Shard::Records { records, .. } => Some(records.len()),
            _ => None,
        };
        for (part, ty) in types.iter().enumerate() {
            let expected = want(part);
            if *ty != expected || records.is_some_and(|n| n != count) {
                let path = paths.get(part.min(paths.len() - 1)).map_or(Path::new(""), |p| p.as_path());
                let now = records.map_or(ty.to_string(), |n| format!("{n} records"));
                let then = records.map_or(expected.to_string(), |_| format!("{count} records"));
                return Err(fail(
                    path,
                    None,
                    format!("the file changed since the program was checked: it now holds {now}, not {then}"),
                ));
            }
        }
        Ok(shard)
    }
}

/// A read that failed after the file was checked: it shrank or vanished.
fn changed(path: &Path, e: &std::io::Error) -> Diagnostic {
    fail(path, None, format!("cannot read the file (did it change since the program was checked?): {e}"))
}

/// The bytes of an IDX or npy header, at most: enough for every real file
/// (a longer npy header is read whole).
const HEAD: usize = 1 << 16;

/// The first bytes of an uncompressed file and its length.
pub(super) fn head(path: &Path, file: &File) -> Result<(Vec<u8>, usize), Diagnostic> {
    let total = file.metadata().map_err(|e| fail(path, None, format!("cannot read the file: {e}")))?.len() as usize;
    let mut bytes = vec![0u8; total.min(HEAD)];
    file.read_exact_at(&mut bytes, 0).map_err(|e| fail(path, None, format!("cannot read the file: {e}")))?;
    Ok((bytes, total))
}

/// Opens a file for reading.
pub(super) fn open_file(path: &Path) -> Result<File, Diagnostic> {
    File::open(path).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::NotFound { "no such file".to_string() } else { e.to_string() };
        fail(path, None, format!("cannot read the file: {why}"))
    })
}

/// How shard `paths` of `format` is read: streamed when its files allow,
/// else whole.
fn open_shard(format: FileFormat, paths: &[PathBuf], keys: &[String]) -> Result<Shard, Diagnostic> {
    let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    let streamable = paths.iter().all(|p| !super::is_gz(p)) && format != FileFormat::Safetensors;
    if streamable {
        match format {
            FileFormat::Idx => {
                let mut columns = Vec::new();
                for (i, path) in paths.iter().enumerate() {
                    let file = open_file(path)?;
                    let (bytes, total) = head(path, &file)?;
                    let dtype = if i == 0 { DType::F32 } else { DType::I32 };
                    let layout = idx::header(path, &bytes, total, dtype)?;
                    columns.push(Fixed { path: path.clone(), file, layout });
                }
                return Ok(Shard::Fixed(columns));
            }
            FileFormat::Npy => {
                let path = &paths[0];
                let file = open_file(path)?;
                let (bytes, total) = head(path, &file)?;
                // An archive, a column-major array or an outsized header: whole.
                if !bytes.starts_with(b"PK") {
                    if let Ok(layout) = npy::header(path, "", &bytes, total) {
                        if !layout.fortran {
                            return Ok(Shard::Fixed(vec![Fixed { path: path.clone(), file, layout }]));
                        }
                    }
                }
            }
            FileFormat::TfRecord => {
                let path = &paths[0];
                let file = open_file(path)?;
                let total = file.metadata().map_err(|e| fail(path, None, format!("cannot read the file: {e}")))?.len();
                let records = tfrecord::index(path, &file, total)?;
                let Some(&first) = records.first() else {
                    return Ok(Shard::Memory(Vec::new()));
                };
                let mut bytes = vec![0u8; first.framed_len()];
                file.read_exact_at(&mut bytes, first.at).map_err(|e| changed(path, &e))?;
                let features = tfrecord::features(path, (0, first.at), &bytes, keys)?;
                return Ok(Shard::Records { path: path.clone(), file, records, features });
            }
            FileFormat::Safetensors => {}
        }
    }
    let columns = super::read(format, &refs, keys, true)?;
    columns
        .into_iter()
        .map(|c| c.tensor.ok_or_else(|| Diagnostic::internal("loaders: data requested but not decoded")))
        .collect::<Result<_, _>>()
        .map(Shard::Memory)
}
