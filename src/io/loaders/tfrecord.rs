//! TensorFlow's TFRecord files of `tf.train.Example` records. A file is a
//! sequence of records, each `u64` length (little-endian), the masked
//! CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the data;
//! each record's data is an `Example`: a map from feature names to a
//! `Feature`, which holds a `bytes_list`, a `float_list` or an `int64_list`.
//!
//! Contract: [`read`] gives one column per feature, `[N, ...]` over every
//! record of every shard; the first record fixes each feature's kind and
//! length (a float_list of n values is `f32[n]`, an int64_list `i32[n]`, one
//! value a scalar) and every later record must agree. Both CRCs of every
//! record are checked when the data is read. Bytes features, int64 values
//! outside i32, damaged framing or protobuf are E0001 diagnostics naming the
//! file, the byte, the record index within the file and the feature. Never
//! a panic, and no allocation sized by an unchecked length.
//!
//! Example: 1000 records each holding `image` (784 floats) and `label` (one
//! int64) read as the columns `f32[1000, 784]` and `i32[1000]`.

use super::{element_count, fail, read_bytes, Path};
use crate::diag::Diagnostic;
use crate::io::proto_reader::{fixed32s, varints, Fields, Value, WireError};
use crate::ir::{DType, TensorType};
use crate::tensor::Tensor;

/// The framing around each record's data: length and its CRC before, the
/// data's CRC after.
const HEADER: usize = 12;
const FOOTER: usize = 4;

/// What [`records`] calls with each record's index (within its file) and data.
pub(super) type OnRecord<'a> = dyn FnMut(usize, &[u8]) -> Result<(), Diagnostic> + 'a;

/// Every record of TFRecord bytes `bytes` (read from `path`, already
/// decompressed), in order: checks each length's and data's CRC; calls
/// `each(record_index, payload)`. Returns the number of records. With
/// `check_data = false` the data CRC is skipped (checking a file's shape
/// only needs the lengths).
pub(super) fn records(
    path: &Path,
    bytes: &[u8],
    check_data: bool,
    each: &mut OnRecord<'_>,
) -> Result<usize, Diagnostic> {
    let (mut at, mut index) = (0usize, 0usize);
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < HEADER {
            let msg = format!(
                "record {index}: the file ends {} bytes into the record's {HEADER}-byte header: the file is truncated",
                rest.len()
            );
            return Err(fail(path, Some(at), msg));
        }
        let length = u64::from_le_bytes(le_bytes(&rest[..8]));
        let (stored, actual) = (u32::from_le_bytes(le_bytes(&rest[8..HEADER])), masked_crc(&rest[..8]));
        if stored != actual {
            let msg = format!(
                "record {index}: the length's CRC is {actual:#010x}, the record says {stored:#010x}: \
                 the file is corrupted or not a TFRecord file"
            );
            return Err(fail(path, Some(at + 8), msg));
        }
        // The length is untrusted: it must fit what is left before it is used.
        let left = rest.len() - HEADER;
        let Some(len) = usize::try_from(length).ok().filter(|&n| n <= left.saturating_sub(FOOTER)) else {
            let msg = format!(
                "record {index}: the header announces {length} bytes of data, but only {left} bytes \
                 (for the data and its {FOOTER}-byte CRC) are left: the file is truncated"
            );
            return Err(fail(path, Some(at), msg));
        };
        let payload = &rest[HEADER..HEADER + len];
        if check_data {
            checked_payload(path, index, (at + HEADER) as u64, &rest[HEADER..HEADER + len + FOOTER])?;
        }
        each(index, payload)?;
        at += HEADER + len + FOOTER;
        index += 1;
    }
    Ok(index)
}

/// The array of a slice whose length the caller has fixed.
fn le_bytes<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(b);
    out
}

/// TFRecord's CRC: rotated and offset, because a CRC of data that embeds
/// CRCs is otherwise weak (TensorBoard's event files use it too).
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// CRC-32C (Castagnoli), eight bytes a step ("slicing by 8"): a shard of
/// gigabytes is checked at several times the speed of a byte-wise table.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = CRC_TABLES[7][(lo & 0xff) as usize]
            ^ CRC_TABLES[6][((lo >> 8) & 0xff) as usize]
            ^ CRC_TABLES[5][((lo >> 16) & 0xff) as usize]
            ^ CRC_TABLES[4][(lo >> 24) as usize]
            ^ CRC_TABLES[3][c[4] as usize]
            ^ CRC_TABLES[2][c[5] as usize]
            ^ CRC_TABLES[1][c[6] as usize]
            ^ CRC_TABLES[0][c[7] as usize];
    }
    for &b in chunks.remainder() {
        crc = CRC_TABLES[0][((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// `CRC_TABLES[0]` is the byte-wise table of the reflected polynomial
/// 0x82F63B78; `CRC_TABLES[k][b]` is the CRC of `b` followed by k zero bytes.
const CRC_TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            bit += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = t[0][(prev & 0xff) as usize] ^ (prev >> 8);
            i += 1;
        }
        k += 1;
    }
    t
};

/// The value lists of a `Feature`: its oneof's field numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Bytes = 1,
    Float = 2,
    Int64 = 3,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Bytes => "a bytes_list",
            Kind::Float => "a float_list",
            Kind::Int64 => "an int64_list",
        }
    }
}

/// One `Feature` decoded, into buffers reused from record to record.
#[derive(Default)]
struct Values {
    kind: Option<Kind>,
    floats: Vec<u32>,
    ints: Vec<u64>,
    bytes: usize,
}

impl Values {
    fn parse(&mut self, feature: &[u8]) -> Result<(), WireError> {
        self.set(None);
        for field in Fields::new(feature) {
            let (number, value) = field?;
            let kind = match number {
                1 => Kind::Bytes,
                2 => Kind::Float,
                3 => Kind::Int64,
                _ => continue, // Unknown fields are skipped, as protobuf does.
            };
            let Value::Bytes(list) = value else {
                return Err(WireError { offset: 0, message: format!("{} is not a message", kind.name()) });
            };
            // A later member of the oneof replaces an earlier one; a
            // repeated one merges with it (its values are appended).
            if self.kind != Some(kind) {
                self.set(Some(kind));
            }
            for item in Fields::new(list) {
                match item? {
                    (1, v) if kind == Kind::Float => fixed32s(v, &mut self.floats)?,
                    (1, v) if kind == Kind::Int64 => varints(v, &mut self.ints)?,
                    (1, _) => self.bytes += 1,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn set(&mut self, kind: Option<Kind>) {
        (self.kind, self.bytes) = (kind, 0);
        self.floats.clear();
        self.ints.clear();
    }

    fn len(&self) -> usize {
        match self.kind {
            Some(Kind::Float) => self.floats.len(),
            Some(Kind::Int64) => self.ints.len(),
            Some(Kind::Bytes) => self.bytes,
            None => 0,
        }
    }
}

/// A feature of an `Example`: its name and its `Feature` message.
type Entry<'a> = (&'a [u8], &'a [u8]);

/// The features of one `Example`, in file order.
fn entries(example: &[u8]) -> Result<Vec<Entry<'_>>, WireError> {
    let mut out = Vec::new();
    for field in Fields::new(example) {
        let (1, Value::Bytes(features)) = field? else { continue };
        for entry in Fields::new(features) {
            let (1, Value::Bytes(entry)) = entry? else { continue };
            let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
            for part in Fields::new(entry) {
                match part? {
                    (1, Value::Bytes(k)) => key = k,
                    (2, Value::Bytes(v)) => value = v,
                    _ => {}
                }
            }
            out.push((key, value));
        }
    }
    Ok(out)
}

/// The `Feature` named `key`: the last entry wins, as in a protobuf map.
fn lookup<'a>(entries: &[Entry<'a>], key: &str) -> Option<&'a [u8]> {
    entries.iter().rev().find(|(k, _)| *k == key.as_bytes()).map(|&(_, v)| v)
}

/// One requested feature: its type from the first record and, when the
/// data is read, its values over all records.
struct Column {
    key: String,
    kind: Kind,
    len: usize,
    floats: Vec<f32>,
    ints: Vec<i32>,
}

/// The columns of the records of `paths` (TFRecord shards read in order,
/// `.gz` allowed), one per feature: `keys` in that order, or, when `keys` is
/// empty, every feature of the first record sorted by name. With `data =
/// false` only the types and the record count are computed and the tensors
/// are `None`.
pub(super) fn read(
    paths: &[&Path],
    keys: &[String],
    data: bool,
) -> Result<Vec<(TensorType, Option<Tensor>)>, Diagnostic> {
    let shards = paths.iter().map(|&p| Ok((p, read_bytes(p)?)));
    read_shards(shards, paths.len(), keys, data)
}

/// Every feature of the records in `bytes` (one shard, as read from
/// `path`), decoded: the fuzz target's entry (`loaders::decode_bytes`).
pub(super) fn decode(path: &Path, bytes: &[u8]) -> Result<Vec<(TensorType, Option<Tensor>)>, Diagnostic> {
    read_shards(std::iter::once(Ok((path, bytes.to_vec()))), 1, &[], true)
}

/// [`read`] over `n` shards given as their path and bytes.
fn read_shards<'p>(
    shards: impl Iterator<Item = Result<(&'p Path, Vec<u8>), Diagnostic>>,
    n: usize,
    keys: &[String],
    data: bool,
) -> Result<Vec<(TensorType, Option<Tensor>)>, Diagnostic> {
    let mut first_path: Option<&Path> = None;
    let mut columns: Option<Vec<Column>> = None;
    let mut values = Values::default();
    let mut count = 0usize;
    for shard in shards {
        let (path, bytes) = shard?;
        first_path.get_or_insert(path);
        // Records are contiguous, so each payload's offset follows from the
        // previous one's length.
        let mut next = 0usize;
        count += records(path, &bytes, data, &mut |index, payload| {
            let at = next + HEADER;
            next = at + payload.len() + FOOTER;
            let record = |msg: String| fail(path, Some(at), format!("record {index}: {msg}"));
            if columns.is_some() && !data {
                return Ok(());
            }
            let entries = entries(payload).map_err(|e| record(format!("not a tf.train.Example: {e}")))?;
            let cols = match &mut columns {
                Some(cols) => cols,
                None => columns.insert(schema(&entries, keys, &mut values).map_err(record)?),
            };
            for col in cols.iter_mut() {
                take(col, &entries, &mut values, data)
                    .map_err(|msg| record(format!("feature `{}`: {msg}", col.key)))?;
            }
            Ok(())
        })?;
    }
    let first_path = first_path.ok_or_else(|| Diagnostic::internal("tfrecord: no path"))?;
    let columns = match columns {
        Some(c) if count > 0 => c,
        _ => {
            let what = if n == 1 { "the file holds" } else { "the files hold" };
            return Err(fail(first_path, None, format!("{what} no records")));
        }
    };
    let mut out = Vec::with_capacity(columns.len());
    for col in columns {
        let mut shape = vec![count];
        if col.len != 1 {
            shape.push(col.len);
        }
        if element_count(&shape).is_none() {
            return Err(fail(first_path, None, format!("feature `{}`: the shape {shape:?} is too large", col.key)));
        }
        let (dtype, tensor) = match col.kind {
            Kind::Float => (DType::F32, data.then(|| Tensor::from_vec(DType::F32, &shape, col.floats))),
            _ => (DType::I32, data.then(|| Tensor::from_vec(DType::I32, &shape, col.ints))),
        };
        out.push((TensorType::new(dtype, shape), tensor.transpose()?));
    }
    Ok(out)
}

/// The columns that the first record's `entries` give to `keys`.
fn schema(entries: &[Entry<'_>], keys: &[String], values: &mut Values) -> Result<Vec<Column>, String> {
    let mut names = Vec::new();
    for (k, _) in entries {
        let name = std::str::from_utf8(k).map_err(|_| "a feature name is not valid UTF-8".to_string())?;
        names.push(name.to_string());
    }
    names.sort();
    names.dedup();
    let wanted = if keys.is_empty() { names.clone() } else { keys.to_vec() };
    if wanted.is_empty() {
        return Err("the first record holds no features".into());
    }
    let mut columns = Vec::with_capacity(wanted.len());
    for key in wanted {
        let Some(feature) = lookup(entries, &key) else {
            let listed: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
            return Err(format!("there is no feature `{key}`; the first record holds {}", listed.join(", ")));
        };
        values.parse(feature).map_err(|e| format!("feature `{key}`: bad protobuf: {e}"))?;
        let kind = match values.kind {
            Some(Kind::Bytes) => {
                let hint = if keys.is_empty() { "; or name the numeric features to read only those" } else { "" };
                return Err(format!(
                    "feature `{key}` is a bytes_list: bytes features are not supported \
                     (decode them to numbers before writing, or store them as int64{hint})"
                ));
            }
            Some(kind) => kind,
            None => return Err(format!("feature `{key}` holds no value list")),
        };
        columns.push(Column { key, kind, len: values.len(), floats: Vec::new(), ints: Vec::new() });
    }
    Ok(columns)
}

/// Checks one record's `col` feature against the first record's, and
/// appends its values when `keep`.
fn take(col: &mut Column, entries: &[Entry<'_>], values: &mut Values, keep: bool) -> Result<(), String> {
    let feature = lookup(entries, &col.key).ok_or("missing from this record (the first record has it)")?;
    values.parse(feature).map_err(|e| format!("bad protobuf: {e}"))?;
    match values.kind {
        Some(kind) if kind == col.kind => {}
        Some(kind) => return Err(format!("is {}, but the first record's is {}", kind.name(), col.kind.name())),
        None => return Err(format!("holds no value list, but the first record's is {}", col.kind.name())),
    }
    if values.len() != col.len {
        return Err(format!("holds {} values, but the first record's holds {}", values.len(), col.len));
    }
    match col.kind {
        Kind::Float if keep => col.floats.extend(values.floats.iter().map(|&bits| f32::from_bits(bits))),
        Kind::Int64 => {
            // int64 varints are two's complement; tfc's integers are i32.
            for &v in &values.ints {
                let v = i32::try_from(v as i64).map_err(|_| {
                    format!("the int64 value {} does not fit i32 (tfc reads int64 features as i32)", v as i64)
                })?;
                if keep {
                    col.ints.push(v);
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// One record of a file: where its data starts and how long it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Record {
    pub at: u64,
    pub len: usize,
}

impl Record {
    /// The bytes to read for it: its data and the data's CRC.
    pub fn framed_len(self) -> usize {
        self.len + FOOTER
    }
}

/// Where every record of the uncompressed TFRecord file `file` (`total`
/// bytes, at `path`) lies, from its framing alone: each length and its CRC
/// is read and checked, the data is skipped (its CRC is checked when the
/// record is read). A file of a million records takes a million small
/// reads through one buffer, not a read of the data.
pub(super) fn index(
    path: &Path,
    file: impl std::io::Read + std::io::Seek,
    total: u64,
) -> Result<Vec<Record>, Diagnostic> {
    use std::io::{Read, Seek};
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    reader.rewind().map_err(|e| fail(path, None, format!("cannot read the file: {e}")))?;
    let (mut at, mut out) = (0u64, Vec::new());
    while at < total {
        let index = out.len();
        let mut head = [0u8; HEADER];
        let left = total - at;
        if left < HEADER as u64 || reader.read_exact(&mut head).is_err() {
            let msg = format!(
                "record {index}: the file ends {left} bytes into the record's {HEADER}-byte header: the file is truncated"
            );
            return Err(fail(path, Some(at as usize), msg));
        }
        let length = u64::from_le_bytes(le_bytes(&head[..8]));
        let (stored, actual) = (u32::from_le_bytes(le_bytes(&head[8..])), masked_crc(&head[..8]));
        if stored != actual {
            let msg = format!(
                "record {index}: the length's CRC is {actual:#010x}, the record says {stored:#010x}: \
                 the file is corrupted or not a TFRecord file"
            );
            return Err(fail(path, Some(at as usize + 8), msg));
        }
        let room = left - HEADER as u64;
        let Some(len) = usize::try_from(length).ok().filter(|&n| (n as u64) <= room.saturating_sub(FOOTER as u64))
        else {
            let msg = format!(
                "record {index}: the header announces {length} bytes of data, but only {room} bytes \
                 (for the data and its {FOOTER}-byte CRC) are left: the file is truncated"
            );
            return Err(fail(path, Some(at as usize), msg));
        };
        let data = at + HEADER as u64;
        out.push(Record { at: data, len });
        let skip = (len + FOOTER) as i64;
        reader
            .seek_relative(skip)
            .map_err(|e| fail(path, Some(data as usize), format!("cannot read the file: {e}")))?;
        at = data + skip as u64;
    }
    Ok(out)
}

/// The element type of each feature `keys` names (every feature, by name,
/// when empty) as the record `framed` (its data and CRC; record `index`
/// of `path`, data at byte `at`) fixes them, with the names.
pub(super) fn features(
    path: &Path,
    (index, at): (usize, u64),
    framed: &[u8],
    keys: &[String],
) -> Result<Vec<(String, TensorType)>, Diagnostic> {
    let payload = checked_payload(path, index, at, framed)?;
    let record = |msg: String| fail(path, Some(at as usize), format!("record {index}: {msg}"));
    let entries = entries(payload).map_err(|e| record(format!("not a tf.train.Example: {e}")))?;
    let columns = schema(&entries, keys, &mut Values::default()).map_err(record)?;
    Ok(columns
        .into_iter()
        .map(|c| {
            let dtype = if c.kind == Kind::Float { DType::F32 } else { DType::I32 };
            let shape = if c.len == 1 { vec![] } else { vec![c.len] };
            (c.key, TensorType::new(dtype, shape))
        })
        .collect())
}

/// The records `framed` (each its index in the file, the position of its
/// data, and its data and CRC, as [`Record::framed_len`] gives), decoded
/// into one tensor per feature of `features` (`[records, …]`): each data
/// CRC is checked and every feature must have the kind and length given.
pub(super) fn decode_records(
    path: &Path,
    framed: &[(usize, u64, &[u8])],
    features: &[(String, TensorType)],
) -> Result<Vec<Tensor>, Diagnostic> {
    let mut columns: Vec<Column> = features
        .iter()
        .map(|(key, ty)| Column {
            key: key.clone(),
            kind: if ty.dtype == DType::F32 { Kind::Float } else { Kind::Int64 },
            len: ty.shape.iter().product(),
            floats: Vec::new(),
            ints: Vec::new(),
        })
        .collect();
    let mut values = Values::default();
    for &(index, at, bytes) in framed {
        let payload = checked_payload(path, index, at, bytes)?;
        let record = |msg: String| fail(path, Some(at as usize), format!("record {index}: {msg}"));
        let entries = entries(payload).map_err(|e| record(format!("not a tf.train.Example: {e}")))?;
        for col in columns.iter_mut() {
            take(col, &entries, &mut values, true).map_err(|msg| record(format!("feature `{}`: {msg}", col.key)))?;
        }
    }
    columns
        .into_iter()
        .zip(features)
        .map(|(col, (_, ty))| {
            let mut shape = vec![framed.len()];
            shape.extend(&ty.shape);
            match col.kind {
                Kind::Float => Tensor::from_vec(DType::F32, &shape, col.floats),
                _ => Tensor::from_vec(DType::I32, &shape, col.ints),
            }
        })
        .collect()
}

/// A record's data after checking its CRC (`framed` is the data and the CRC).
fn checked_payload<'a>(path: &Path, index: usize, at: u64, framed: &'a [u8]) -> Result<&'a [u8], Diagnostic> {
    let Some(len) = framed.len().checked_sub(FOOTER) else {
        return Err(Diagnostic::internal("tfrecord: a record without its CRC"));
    };
    let (payload, crc) = framed.split_at(len);
    let (stored, actual) = (u32::from_le_bytes(le_bytes(crc)), masked_crc(payload));
    if stored != actual {
        let msg = format!(
            "record {index}: the data's CRC is {actual:#010x}, the record says {stored:#010x}: the file is corrupted"
        );
        return Err(fail(path, Some(at as usize + len), msg));
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::{crc32c, decode, masked_crc, read, records};
    use crate::diag::{Code, Diagnostic};
    use crate::io::proto::Message;
    use crate::ir::{DType, TensorType};
    use crate::tensor::Tensor;
    use std::path::{Path, PathBuf};

    /// A feature to write, packed or not.
    enum F {
        Floats(Vec<f32>, bool),
        Ints(Vec<i64>, bool),
        Bytes(Vec<&'static [u8]>),
    }

    fn example(features: &[(&str, F)]) -> Vec<u8> {
        let mut map = Message::new();
        for (name, f) in features {
            let feature = match f {
                F::Floats(v, true) => {
                    let le: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    Message::new().message(2, &Message::new().bytes(1, &le))
                }
                F::Floats(v, false) => Message::new().message(2, &v.iter().fold(Message::new(), |m, &x| m.float(1, x))),
                F::Ints(v, true) => Message::new().message(3, &Message::new().packed_ints(1, v)),
                F::Ints(v, false) => Message::new().message(3, &v.iter().fold(Message::new(), |m, &x| m.int(1, x))),
                F::Bytes(v) => Message::new().message(1, &v.iter().fold(Message::new(), |m, x| m.bytes(1, x))),
            };
            map = map.message(1, &Message::new().text(1, name).message(2, &feature));
        }
        Message::new().message(1, &map).into_bytes()
    }

    /// TFRecord framing around each payload.
    fn frame(payloads: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            let len = (p.len() as u64).to_le_bytes();
            out.extend(len);
            out.extend(masked_crc(&len).to_le_bytes());
            out.extend(p);
            out.extend(masked_crc(p).to_le_bytes());
        }
        out
    }

    /// A scratch file, removed when dropped.
    struct Temp(PathBuf);

    impl Temp {
        fn new(name: &str, bytes: &[u8]) -> Temp {
            let path = std::env::temp_dir().join(format!("tfc-tfrecord-{}-{name}", std::process::id()));
            std::fs::write(&path, bytes).expect("write a scratch file");
            Temp(path)
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    type Columns = Vec<(TensorType, Option<Tensor>)>;

    fn read_files(files: &[&Temp], keys: &[&str], data: bool) -> Result<Columns, Diagnostic> {
        let paths: Vec<&Path> = files.iter().map(|t| t.0.as_path()).collect();
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        read(&paths, &keys, data)
    }

    fn read_one(name: &str, bytes: &[u8], keys: &[&str], data: bool) -> Result<Columns, Diagnostic> {
        read_files(&[&Temp::new(name, bytes)], keys, data)
    }

    fn error(name: &str, bytes: &[u8], keys: &[&str], data: bool) -> String {
        let e = read_one(name, bytes, keys, data).expect_err("the file should be refused");
        assert_eq!(e.code, Code::Io, "{e:?}");
        e.message
    }

    fn values(col: &(TensorType, Option<Tensor>)) -> Vec<f64> {
        col.1.as_ref().expect("data was requested").to_f64_vec()
    }

    fn xy(x: Vec<f32>, y: Vec<i64>) -> Vec<u8> {
        example(&[("x", F::Floats(x, true)), ("y", F::Ints(y, true))])
    }

    #[test]
    fn crc_32c_matches_the_published_test_vectors() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        // RFC 3720's iSCSI vectors: 32 bytes each, through the 8-byte path.
        assert_eq!(crc32c(&[0; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xff; 32]), 0x62A8_AB43);
        assert_eq!(crc32c(&(0..32).collect::<Vec<u8>>()), 0x46DD_794E);
        assert_eq!(crc32c(&(0..32).rev().collect::<Vec<u8>>()), 0x113F_DB5C);
        // Every length and alignment agrees with the bitwise definition.
        let data: Vec<u8> = (0..100u32).map(|i| (i * 37 + 11) as u8).collect();
        for n in 0..data.len() {
            let mut crc = !0u32;
            for &b in &data[3..3 + n.min(data.len() - 3)] {
                crc ^= u32::from(b);
                (0..8).for_each(|_| crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 });
            }
            assert_eq!(crc32c(&data[3..3 + n.min(data.len() - 3)]), !crc);
        }
    }

    #[test]
    fn floats_and_ints_packed_or_not_read_back_in_order() {
        let file = frame(&[
            example(&[
                ("x", F::Floats(vec![1.0, 2.0, 3.0], true)),
                ("y", F::Ints(vec![7], true)),
                ("z", F::Ints(vec![-1, 2], false)),
            ]),
            example(&[
                ("z", F::Ints(vec![3, -4], true)),
                ("y", F::Ints(vec![-5], false)),
                ("x", F::Floats(vec![4.0, 5.0, 6.0], false)),
            ]),
            example(&[
                ("x", F::Floats(vec![7.0, 8.0, 9.5], true)),
                ("y", F::Ints(vec![i32::MIN as i64], true)),
                ("z", F::Ints(vec![5, i32::MAX as i64], false)),
            ]),
        ]);
        let cols = read_one("roundtrip", &file, &[], true).unwrap();
        let types: Vec<String> = cols.iter().map(|c| c.0.to_string()).collect();
        assert_eq!(types, ["f32[3, 3]", "i32[3]", "i32[3, 2]"]);
        assert_eq!(values(&cols[0]), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.5]);
        assert_eq!(values(&cols[1]), [7.0, -5.0, i32::MIN as f64]);
        assert_eq!(values(&cols[2]), [-1.0, 2.0, 3.0, -4.0, 5.0, i32::MAX as f64]);
        assert_eq!(cols[0].1.as_ref().map(|t| t.dtype()), Some(DType::F32));
        // Named features come in the order asked, and may repeat.
        let cols = read_one("named", &file, &["z", "x", "z"], true).unwrap();
        let types: Vec<String> = cols.iter().map(|c| c.0.to_string()).collect();
        assert_eq!(types, ["i32[3, 2]", "f32[3, 3]", "i32[3, 2]"]);
    }

    #[test]
    fn shards_concatenate_in_order_and_gzip_is_read() {
        let a = Temp::new("shard-a", &frame(&[xy(vec![1.0], vec![1]), xy(vec![2.0], vec![2])]));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, &frame(&[xy(vec![3.0], vec![3])])).unwrap();
        let b = Temp::new("shard-b.tfrecord.gz", &gz.finish().unwrap());
        let cols = read_files(&[&a, &b], &[], true).unwrap();
        assert_eq!((cols[0].0.to_string(), values(&cols[0])), ("f32[3]".to_string(), vec![1.0, 2.0, 3.0]));
        assert_eq!(values(&cols[1]), [1.0, 2.0, 3.0]);
        // An error in a later shard names that shard and its own record index.
        let c = Temp::new("shard-c", &frame(&[xy(vec![4.0], vec![4]), example(&[("x", F::Floats(vec![5.0], true))])]));
        let e = read_files(&[&a, &c], &[], true).unwrap_err().message;
        assert!(e.starts_with(&c.0.display().to_string()) && e.contains("record 1: feature `y`: missing"), "{e}");
    }

    #[test]
    fn a_flipped_data_byte_is_a_crc_error_naming_the_record() {
        let mut file = frame(&[xy(vec![1.0], vec![1]), xy(vec![2.0], vec![2])]);
        let second = file.len() / 2;
        file[second + 14] ^= 0x10;
        let e = error("flipped", &file, &[], true);
        assert!(e.contains("record 1: the data's CRC is 0x") && e.ends_with("the file is corrupted"), "{e}");
        assert!(e.contains(&format!("at byte {}", file.len() - 4)), "{e}");
        // A damaged length is caught by its own CRC.
        file[0] ^= 1;
        let e = error("flipped-length", &file, &[], true);
        assert!(e.contains("at byte 8: record 0: the length's CRC is 0x"), "{e}");
    }

    #[test]
    fn a_truncated_or_overlong_record_is_refused_without_a_panic() {
        let file = frame(&[xy(vec![1.0, 2.0], vec![1]), xy(vec![3.0, 4.0], vec![2])]);
        let boundary = file.len() / 2;
        for n in (1..file.len()).filter(|&n| n != boundary) {
            let e = error(&format!("cut-{n}"), &file[..n], &[], true);
            assert!(e.contains("the file is truncated"), "{n}: {e}");
            assert!(e.contains(if n < boundary { "record 0" } else { "record 1" }), "{n}: {e}");
        }
        assert!(error("empty", &[], &[], true).ends_with("the file holds no records"));
        // A length of 2^60 with a valid CRC is compared with the bytes left, not allocated.
        let len = (1u64 << 60).to_le_bytes();
        let mut huge = len.to_vec();
        huge.extend(masked_crc(&len).to_le_bytes());
        huge.extend([0; 8]);
        let e = error("huge", &huge, &[], false);
        assert!(e.contains("announces 1152921504606846976 bytes of data, but only 8 bytes"), "{e}");
    }

    #[test]
    fn every_flipped_bit_of_a_payload_is_an_error_or_a_decoding_never_a_panic() {
        // The Example inside a record is untrusted protobuf: flip each bit
        // of the payloads and re-frame them with valid CRCs, so that the
        // protobuf reader (not the CRC) meets the damage.
        let payloads = [xy(vec![1.0, -2.5, 3.0], vec![7]), xy(vec![0.5, 0.25, 4.0], vec![-3])];
        for i in 0..payloads[0].len() * 8 {
            let mut damaged = payloads.to_vec();
            damaged[0][i / 8] ^= 1 << (i % 8);
            if let Err(d) = decode(Path::new("<bytes>"), &frame(&damaged)) {
                assert_eq!(d.code, Code::Io, "bit {i}: {d:?}");
            }
        }
    }

    #[test]
    fn a_later_record_must_hold_each_feature_with_its_kind_and_length() {
        let first = xy(vec![1.0, 2.0], vec![1]);
        let cases = [
            (example(&[("y", F::Ints(vec![2], true))]), "record 1: feature `x`: missing from this record"),
            (xy(vec![1.0, 2.0, 3.0], vec![2]), "record 1: feature `x`: holds 3 values, but the first record's holds 2"),
            (
                example(&[("x", F::Ints(vec![1, 2], true)), ("y", F::Ints(vec![2], true))]),
                "record 1: feature `x`: is an int64_list, but the first record's is a float_list",
            ),
            (b"\x0a\x05\x01".to_vec(), "record 1: not a tf.train.Example"),
        ];
        for (i, (second, want)) in cases.into_iter().enumerate() {
            let e = error(&format!("later-{i}"), &frame(&[first.clone(), second]), &[], true);
            assert!(e.contains(want), "{e}");
        }
        // Extra features in later records are ignored.
        let extra = example(&[
            ("y", F::Ints(vec![2], true)),
            ("w", F::Bytes(vec![b"a"])),
            ("x", F::Floats(vec![0.0; 2], false)),
        ]);
        assert_eq!(read_one("extra", &frame(&[first, extra]), &[], true).unwrap().len(), 2);
    }

    #[test]
    fn an_int64_outside_i32_is_refused() {
        let file = frame(&[xy(vec![1.0], vec![1]), xy(vec![2.0], vec![1 << 40])]);
        let e = error("wide", &file, &[], true);
        assert!(e.contains("record 1: feature `y`: the int64 value 1099511627776 does not fit i32"), "{e}");
        let e = error("narrow", &frame(&[xy(vec![1.0], vec![-(1 << 31) - 1])]), &[], false);
        assert!(e.contains("record 0: feature `y`: the int64 value -2147483649 does not fit i32"), "{e}");
    }

    #[test]
    fn bytes_features_are_refused_unless_left_out() {
        let file = frame(&[example(&[("image", F::Bytes(vec![b"\x89PNG"])), ("label", F::Ints(vec![3], true))])]);
        let e = error("bytes", &file, &[], true);
        assert!(e.contains("feature `image` is a bytes_list: bytes features are not supported"), "{e}");
        let e = error("bytes-named", &file, &["image"], true);
        assert!(e.contains("store them as int64)"), "{e}");
        let cols = read_one("bytes-skipped", &file, &["label"], true).unwrap();
        assert_eq!((cols[0].0.to_string(), values(&cols[0])), ("i32[1]".to_string(), vec![3.0]));
    }

    #[test]
    fn an_unknown_key_lists_the_features_of_the_first_record() {
        let file = frame(&[xy(vec![1.0], vec![1])]);
        let e = error("unknown", &file, &["x", "label"], true);
        assert!(e.contains("record 0: there is no feature `label`; the first record holds `x`, `y`"), "{e}");
        let e = error("featureless", &frame(&[Vec::new()]), &[], true);
        assert!(e.contains("the first record holds no features"), "{e}");
    }

    #[test]
    fn without_data_only_the_types_and_the_count_are_computed() {
        // Later records are framed but neither parsed nor CRC-checked.
        let mut file = frame(&[xy(vec![1.0, 2.0, 3.0], vec![1]), b"not an example".to_vec(), xy(vec![0.0], vec![2])]);
        let last = file.len() - 1;
        file[last] ^= 0xff;
        let cols = read_one("probe", &file, &[], false).unwrap();
        let types: Vec<String> = cols.iter().map(|c| c.0.to_string()).collect();
        assert_eq!(types, ["f32[3, 3]", "i32[3]"]);
        assert!(cols.iter().all(|c| c.1.is_none()));
        let mut seen = Vec::new();
        let n = records(Path::new("probe"), &file, false, &mut |i, payload| {
            seen.push((i, payload.len()));
            Ok(())
        });
        assert_eq!((n.unwrap(), seen.len(), seen[1]), (3, 3, (1, 14)));
    }
}
