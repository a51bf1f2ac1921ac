//! Checkpoints in the safetensors format: an 8-byte little-endian header
//! length, a JSON header (`{"name": {"dtype", "shape", "data_offsets"}, …,
//! "__metadata__": {…}}`) and the raw little-endian data.
//!
//! Contract: `save` is atomic — it writes a temporary file in the same
//! directory, fsyncs it, renames it over the target and fsyncs the
//! directory, so a crash at any moment leaves either the previous complete
//! file or the new one. `load` checks every requested name, dtype and shape
//! and reports all differences at once; it never accepts a truncated file.

use super::loaders::{decode, Scalar};
use crate::diag::{Code, Diagnostic};
use crate::ir::{DType, TensorType};
use crate::tensor::Tensor;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I32 => "I32",
        DType::I64 => "I64",
        DType::I8 => "I8",
        DType::Bool => "BOOL",
    }
}

fn encode(t: &Tensor, out: &mut Vec<u8>) {
    let values = t.to_f64_vec();
    for v in values {
        match t.dtype() {
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::F64 => out.extend(v.to_le_bytes()),
            DType::F16 => out.extend(crate::half::f32_to_f16_bits(v as f32).to_le_bytes()),
            DType::BF16 => out.extend(crate::half::f32_to_bf16_bits(v as f32).to_le_bytes()),
            DType::I32 => out.extend((v as i32).to_le_bytes()),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::I8 => out.push(v as i8 as u8),
            DType::Bool => out.push(u8::from(v != 0.0)),
        }
    }
}

fn io_error(path: &Path, what: &str, e: std::io::Error) -> Diagnostic {
    Diagnostic::new(Code::Io, format!("cannot {what} `{}`: {e}", path.display()))
}

/// Writes `tensors` (and string `metadata`) to `path` atomically.
pub fn save(path: &Path, tensors: &[(String, &Tensor)], metadata: &[(String, String)]) -> Result<(), Diagnostic> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, t) in tensors {
        let start = data.len();
        encode(t, &mut data);
        let mut entry = serde_json::Map::new();
        entry.insert("dtype".into(), dtype_name(t.dtype()).into());
        entry.insert("shape".into(), t.shape().iter().map(|&d| serde_json::Value::from(d)).collect());
        entry.insert(
            "data_offsets".into(),
            vec![serde_json::Value::from(start), serde_json::Value::from(data.len())].into(),
        );
        header.insert(name.clone(), entry.into());
    }
    let meta: serde_json::Map<String, serde_json::Value> =
        metadata.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
    header.insert("__metadata__".into(), meta.into());
    let mut json = serde_json::Value::Object(header).to_string().into_bytes();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    write_atomic(path, &[&(json.len() as u64).to_le_bytes(), &json, &data])
}

/// Writes `chunks` to `path` atomically: into a temporary beside it,
/// synced, then renamed over it, so an interrupted write leaves either the
/// old file or the new one.
pub fn write_atomic(path: &Path, chunks: &[&[u8]]) -> Result<(), Diagnostic> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, "create the directory", e))?;
    }
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        for chunk in chunks {
            f.write_all(chunk)?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error(path, "write", e)
    })?;
    remove_stale_temporaries(path);
    Ok(())
}

/// Removes the temporaries `.<name>.tmp-<pid>` beside `path` that a process
/// which no longer runs left behind (killed while writing a checkpoint);
/// another live writer's are left alone. Best effort: where processes
/// cannot be looked up (no `/proc`), nothing is removed.
fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file.to_str().and_then(|f| f.strip_prefix(&prefix)).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A safetensors file in memory: its parsed header and its bytes.
pub struct SafeFile {
    path: std::path::PathBuf,
    header: serde_json::Map<String, serde_json::Value>,
    metadata: BTreeMap<String, String>,
    bytes: Vec<u8>,
    /// Where the data section starts in `bytes`.
    data_start: usize,
}

/// One tensor entry of a safetensors header.
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    offsets: Vec<usize>,
}

impl SafeFile {
    /// Reads `path` and parses its header; a short file or bad JSON is an error.
    pub fn read(path: &Path) -> Result<SafeFile, Diagnostic> {
        let bytes = std::fs::read(path).map_err(|e| io_error(path, "read", e))?;
        SafeFile::parse(path, bytes)
    }

    /// Parses the header of `bytes`, the contents of `path`.
    pub fn parse(path: &Path, bytes: Vec<u8>) -> Result<SafeFile, Diagnostic> {
        let bad = |msg: String| {
            Diagnostic::new(Code::Io, format!("`{}` is not a valid safetensors file: {msg}", path.display()))
        };
        if bytes.len() < 8 {
            return Err(bad("it is shorter than its 8-byte header length".into()));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&bytes[..8]);
        let n = u64::from_le_bytes(len8);
        if n > (bytes.len() - 8) as u64 {
            return Err(bad(format!(
                "the header claims {n} bytes but only {} follow its 8-byte length (the file has {})",
                bytes.len() - 8,
                bytes.len()
            )));
        }
        let n = n as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n])
            .map_err(|e| bad(format!("bad JSON header at byte {} ({e})", 8 + e.column().saturating_sub(1))))?;
        let serde_json::Value::Object(header) = header else {
            return Err(bad("the header is not a JSON object".into()));
        };
        let mut metadata = BTreeMap::new();
        if let Some(serde_json::Value::Object(m)) = header.get("__metadata__") {
            for (k, v) in m {
                if let Some(s) = v.as_str() {
                    metadata.insert(k.clone(), s.to_string());
                }
            }
        }
        Ok(SafeFile { path: path.to_path_buf(), header, metadata, bytes, data_start: 8 + n })
    }

    /// The string metadata (`__metadata__`).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The tensor names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.header.keys().filter(|k| *k != "__metadata__").cloned().collect()
    }

    fn entry(&self, name: &str) -> Result<Option<Entry>, String> {
        let Some(entry) = self.header.get(name) else { return Ok(None) };
        let ints = |key: &str| -> Option<Vec<usize>> {
            entry.get(key)?.as_array()?.iter().map(|d| d.as_u64().map(|d| d as usize)).collect()
        };
        let dtype = entry.get("dtype").and_then(|d| d.as_str()).unwrap_or("?").to_string();
        match (ints("shape"), ints("data_offsets")) {
            (Some(shape), Some(offsets)) => Ok(Some(Entry { dtype, shape, offsets })),
            _ => Err(format!("`{name}` has a malformed entry")),
        }
    }

    /// The bytes of `e` if its offsets fit the file and hold `size` bytes.
    fn data_of(&self, name: &str, e: &Entry, size: usize) -> Result<&[u8], String> {
        let data = &self.bytes[self.data_start..];
        match e.offsets.as_slice() {
            [s, end] if s <= end && *end <= data.len() && end - s == size => Ok(&data[*s..*end]),
            _ => Err(format!(
                "`{name}` has data offsets {:?} that do not fit the file ({} data bytes; truncated?)",
                e.offsets,
                data.len()
            )),
        }
    }

    /// Tensor `name` with its natural tfc type (and its values when `data`),
    /// for `load_safetensors`.
    pub fn tensor(&self, name: &str, data: bool) -> Result<(TensorType, Option<Tensor>), Diagnostic> {
        let bad = |msg: String| Diagnostic::new(Code::Io, format!("{}: {msg}", self.path.display()));
        let e = self.entry(name).map_err(bad)?.ok_or_else(|| {
            let names = self.names();
            let mut d = bad(format!("there is no tensor `{name}` in the file"));
            d = d.note(format!("it holds: {}", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")));
            if let Some(m) = crate::diag::did_you_mean(name, names.iter().map(String::as_str)) {
                d = d.help(format!("did you mean `{m}`?"));
            }
            d
        })?;
        let scalar =
            scalar_of(&e.dtype).ok_or_else(|| bad(format!("`{name}` has the unsupported dtype `{}`", e.dtype)))?;
        let size = crate::io::loaders::element_count(&e.shape)
            .and_then(|n| n.checked_mul(scalar.size()))
            .ok_or_else(|| bad(format!("`{name}` has the shape {:?}, too large for any array", e.shape)))?;
        let ty = TensorType::new(scalar.natural(), e.shape.clone());
        let raw = self.data_of(name, &e, size).map_err(bad)?;
        let tensor = if data { Some(decode(raw, scalar, false, ty.dtype, &ty.shape)?) } else { None };
        Ok((ty, tensor))
    }
}

/// The stored type of a safetensors dtype name.
fn scalar_of(name: &str) -> Option<Scalar> {
    Some(match name {
        "F32" => Scalar::F32,
        "F64" => Scalar::F64,
        "F16" => Scalar::F16,
        "BF16" => Scalar::BF16,
        "I8" => Scalar::I8,
        "U8" => Scalar::U8,
        "I16" => Scalar::I16,
        "U16" => Scalar::U16,
        "I32" => Scalar::I32,
        "U32" => Scalar::U32,
        "I64" => Scalar::I64,
        "U64" => Scalar::U64,
        "BOOL" => Scalar::Bool,
        _ => return None,
    })
}

/// Reads the requested tensors (by name, with their expected types) and
/// the metadata. Every mismatch is listed in one diagnostic.
pub fn load(path: &Path, want: &[(String, TensorType)]) -> Result<(Vec<Tensor>, BTreeMap<String, String>), Diagnostic> {
    let (found, meta) = load_optional(path, want, want.len())?;
    let all = found.into_iter().collect::<Option<Vec<Tensor>>>();
    Ok((all.ok_or_else(|| Diagnostic::internal("a required tensor was not loaded"))?, meta))
}

/// What `load_optional` reads: each requested tensor if the file has it,
/// and the metadata.
pub type Loaded = (Vec<Option<Tensor>>, BTreeMap<String, String>);

/// `load` where only the first `required` tensors must be in the file: a
/// later one that is missing is `None` (one that is there must match).
/// Model states are optional: files written before they were saved lack
/// them.
pub fn load_optional(path: &Path, want: &[(String, TensorType)], required: usize) -> Result<Loaded, Diagnostic> {
    let file = SafeFile::read(path)?;
    let mut problems = Vec::new();
    // An i8 weight on one side only: a quantized model and an f32 file, or
    // the reverse.
    let mut quantized_mismatch = false;
    let mut out = Vec::new();
    for (k, (name, ty)) in want.iter().enumerate() {
        let e = match file.entry(name) {
            Ok(Some(e)) => e,
            Ok(None) if k >= required => {
                out.push(None);
                continue;
            }
            Ok(None) => {
                problems.push(format!("`{name}` is missing (expected {ty})"));
                continue;
            }
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        if e.dtype != dtype_name(ty.dtype) || e.shape != ty.shape {
            quantized_mismatch |= (e.dtype == "I8") != (ty.dtype == DType::I8);
            // Lower-case the file's dtype so both sides read like tfc types (`f32[4, 8]`).
            problems.push(format!(
                "`{name}` is {}{:?} in the file but the model expects {ty}",
                e.dtype.to_lowercase(),
                e.shape
            ));
            continue;
        }
        match (file.data_of(name, &e, ty.size_bytes()), scalar_of(&e.dtype)) {
            (Ok(raw), Some(scalar)) => out.push(Some(decode(raw, scalar, false, ty.dtype, &ty.shape)?)),
            (Err(p), _) => problems.push(p),
            (_, None) => problems.push(format!("`{name}` has the unsupported dtype `{}`", e.dtype)),
        }
    }
    let expected: std::collections::HashSet<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    let extra: Vec<String> = file.names().into_iter().filter(|k| !expected.contains(k.as_str())).collect();
    if !problems.is_empty() {
        let mut d = Diagnostic::new(Code::Io, format!("`{}` does not match the model:", path.display()));
        for p in &problems {
            d = d.note(p.clone());
        }
        if !extra.is_empty() {
            d = d.note(format!(
                "the file also holds {} tensor(s) the model does not have: {}",
                extra.len(),
                extra.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            ));
        }
        if quantized_mismatch {
            d = d.help(
                "a quantized model (`quantize`) stores its weight matrices as i8 plus `.scale` tensors: load an \
                 f32 file into the f32 model and quantize that, and a quantized file into `quantize(Model(…))`",
            );
        }
        return Err(d);
    }
    Ok((out, file.metadata))
}
