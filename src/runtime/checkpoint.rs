//! Checkpoints in the safetensors format: an 8-byte little-endian header
//! length, a JSON header (`{"name": {"dtype", "shape", "data_offsets"}, …,
//! "__metadata__": {…}}`) and the raw little-endian data.
//!
//! Contract: `save` is atomic — it writes a temporary file in the same
//! directory, fsyncs it, renames it over the target and fsyncs the
//! directory, so a crash at any moment leaves either the previous complete
//! file or the new one. `load` checks every requested name, dtype and shape
//! and reports all differences at once; it never accepts a truncated file.

use crate::backend::interp::Tensor;
use crate::diag::{Code, Diagnostic};
use crate::ir::{DType, Literal, TensorType};
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
        f.write_all(&(json.len() as u64).to_le_bytes())?;
        f.write_all(&json)?;
        f.write_all(&data)?;
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
    })
}

/// Reads the requested tensors (by name, with their expected types) and
/// the metadata. Every mismatch is listed in one diagnostic.
pub fn load(path: &Path, want: &[(String, TensorType)]) -> Result<(Vec<Tensor>, BTreeMap<String, String>), Diagnostic> {
    let bytes = std::fs::read(path).map_err(|e| io_error(path, "read", e))?;
    let bad =
        |msg: String| Diagnostic::new(Code::Io, format!("`{}` is not a valid safetensors file: {msg}", path.display()));
    if bytes.len() < 8 {
        return Err(bad("it is shorter than its 8-byte header length".into()));
    }
    let mut len8 = [0u8; 8];
    len8.copy_from_slice(&bytes[..8]);
    let n = u64::from_le_bytes(len8);
    if n > (bytes.len() - 8) as u64 {
        return Err(bad(format!("the header claims {n} bytes but the file has {}", bytes.len())));
    }
    let n = n as usize;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes[8..8 + n]).map_err(|e| bad(format!("bad JSON header ({e})")))?;
    let serde_json::Value::Object(header) = header else { return Err(bad("the header is not a JSON object".into())) };
    let data = &bytes[8 + n..];
    let mut metadata = BTreeMap::new();
    if let Some(serde_json::Value::Object(m)) = header.get("__metadata__") {
        for (k, v) in m {
            if let Some(s) = v.as_str() {
                metadata.insert(k.clone(), s.to_string());
            }
        }
    }
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for (name, ty) in want {
        let Some(entry) = header.get(name) else {
            problems.push(format!("`{name}` is missing (expected {ty})"));
            continue;
        };
        let dtype = entry.get("dtype").and_then(|d| d.as_str()).unwrap_or("?");
        let shape: Option<Vec<usize>> = entry
            .get("shape")
            .and_then(|s| s.as_array())
            .map(|a| a.iter().filter_map(|d| d.as_u64().map(|d| d as usize)).collect());
        let offsets: Option<Vec<usize>> = entry
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .map(|a| a.iter().filter_map(|d| d.as_u64().map(|d| d as usize)).collect());
        let (Some(shape), Some(offsets)) = (shape, offsets) else {
            problems.push(format!("`{name}` has a malformed entry"));
            continue;
        };
        if dtype != dtype_name(ty.dtype) || shape != ty.shape {
            // Lower-case the file's dtype so both sides read like tfc types (`f32[4, 8]`).
            problems
                .push(format!("`{name}` is {}{shape:?} in the file but the model expects {ty}", dtype.to_lowercase()));
            continue;
        }
        let (start, end) = match offsets.as_slice() {
            [s, e] if s <= e && *e <= data.len() && e - s == ty.size_bytes() => (*s, *e),
            _ => {
                problems.push(format!("`{name}` has data offsets {offsets:?} that do not fit the file (truncated?)"));
                continue;
            }
        };
        out.push(decode(&data[start..end], ty)?);
    }
    let expected: std::collections::HashSet<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    let extra: Vec<&String> =
        header.keys().filter(|k| *k != "__metadata__" && !expected.contains(k.as_str())).collect();
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
        return Err(d);
    }
    Ok((out, metadata))
}

fn decode(raw: &[u8], ty: &TensorType) -> Result<Tensor, Diagnostic> {
    let lit = match ty.dtype {
        DType::F32 => {
            Literal::Float(raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect())
        }
        DType::F64 => {
            Literal::Float(raw.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
        }
        DType::F16 => Literal::Float(
            raw.chunks_exact(2)
                .map(|c| crate::half::f16_bits_to_f32(u16::from_le_bytes([c[0], c[1]])) as f64)
                .collect(),
        ),
        DType::BF16 => Literal::Float(
            raw.chunks_exact(2)
                .map(|c| crate::half::bf16_bits_to_f32(u16::from_le_bytes([c[0], c[1]])) as f64)
                .collect(),
        ),
        DType::I32 => {
            Literal::Int(raw.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).collect())
        }
        DType::I64 => {
            Literal::Int(raw.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
        }
        DType::Bool => Literal::Bool(raw.iter().map(|&b| b != 0).collect()),
    };
    Tensor::from_literal(&lit, ty)
}
