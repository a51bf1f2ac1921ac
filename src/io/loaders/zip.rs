//! The part of the ZIP format that `.npz` archives use: the central
//! directory (with ZIP64 sizes), stored or deflated members, CRC-32 checks.
//! Written here rather than pulled in as a crate because it is small and
//! flate2 (already a dependency) does the decompression.
//!
//! Contract: returns the `.npy` members in archive order, as
//! (name without `.npy`, decompressed bytes); anything else in the archive
//! is skipped. A truncated archive, an unknown compression method, an
//! encrypted member or a CRC mismatch is an error naming the member and the
//! byte position in the archive.

use super::{fail, Path};
use crate::diag::Diagnostic;
use std::io::Read;

fn u16_at(b: &[u8], i: usize) -> Option<u64> {
    b.get(i..i + 2).map(|s| u16::from_le_bytes([s[0], s[1]]) as u64)
}

fn u32_at(b: &[u8], i: usize) -> Option<u64> {
    b.get(i..i + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as u64)
}

fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    b.get(i..i + 8).and_then(|s| s.try_into().ok()).map(u64::from_le_bytes)
}

/// The `.npy` members of the archive `b`.
pub fn members(path: &Path, b: &[u8]) -> Result<Vec<(String, Vec<u8>)>, Diagnostic> {
    let short = |at: usize| fail(path, Some(at), "the zip archive is truncated or malformed");
    // The end-of-central-directory record is in the last 64 KiB + 22 bytes.
    let lowest = b.len().saturating_sub(22 + 65535);
    let eocd =
        (lowest..b.len().saturating_sub(21)).rev().find(|&i| u32_at(b, i) == Some(0x0605_4b50)).ok_or_else(|| {
            fail(path, Some(b.len()), "not a zip archive: no end-of-central-directory record (truncated?)")
        })?;
    let mut entries = u16_at(b, eocd + 10).ok_or_else(|| short(eocd))?;
    let mut cd = u32_at(b, eocd + 16).ok_or_else(|| short(eocd))?;
    if (entries == 0xFFFF || cd == 0xFFFF_FFFF) && eocd >= 20 && u32_at(b, eocd - 20) == Some(0x0706_4b50) {
        // ZIP64: the locator points at the ZIP64 end record with the real values.
        let rec = u64_at(b, eocd - 12).ok_or_else(|| short(eocd - 20))? as usize;
        if u32_at(b, rec) != Some(0x0606_4b50) {
            return Err(fail(path, Some(rec), "bad ZIP64 end-of-central-directory record"));
        }
        entries = u64_at(b, rec + 32).ok_or_else(|| short(rec))?;
        cd = u64_at(b, rec + 48).ok_or_else(|| short(rec))?;
    }
    let mut out = Vec::new();
    let mut at = cd as usize;
    for _ in 0..entries {
        if u32_at(b, at) != Some(0x0201_4b50) {
            return Err(fail(path, Some(at), "bad zip central directory entry"));
        }
        let field = |off: usize, len: usize| -> Result<u64, Diagnostic> {
            (if len == 2 { u16_at(b, at + off) } else { u32_at(b, at + off) }).ok_or_else(|| short(at))
        };
        let (flags, method, crc) = (field(8, 2)?, field(10, 2)?, field(16, 4)?);
        let (mut csize, mut usize_, mut local) = (field(20, 4)?, field(24, 4)?, field(42, 4)?);
        let (name_len, extra_len, comment_len) =
            (field(28, 2)? as usize, field(30, 2)? as usize, field(32, 2)? as usize);
        let name_bytes = b.get(at + 46..at + 46 + name_len).ok_or_else(|| short(at))?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        let extra = b.get(at + 46 + name_len..at + 46 + name_len + extra_len).ok_or_else(|| short(at))?;
        zip64_sizes(extra, &mut usize_, &mut csize, &mut local);
        at += 46 + name_len + extra_len + comment_len;
        let Some(stem) = name.strip_suffix(".npy") else { continue };
        let member = |msg: String| fail(path, Some(local as usize), format!("member `{name}`: {msg}"));
        if flags & 1 != 0 {
            return Err(member("encrypted members are not supported".into()));
        }
        let l = local as usize;
        if u32_at(b, l) != Some(0x0403_4b50) {
            return Err(member("bad local header".into()));
        }
        let skip = 30
            + u16_at(b, l + 26).ok_or_else(|| short(l))? as usize
            + u16_at(b, l + 28).ok_or_else(|| short(l))? as usize;
        let start = l + skip;
        let data = b
            .get(start..start.saturating_add(csize as usize))
            .ok_or_else(|| member(format!("the archive is truncated: {csize} compressed bytes do not fit")))?;
        let bytes = match method {
            0 => data.to_vec(),
            8 => {
                let mut v = Vec::with_capacity(usize_ as usize);
                flate2::read::DeflateDecoder::new(data)
                    .read_to_end(&mut v)
                    .map_err(|e| member(format!("bad deflate data ({e})")))?;
                v
            }
            m => return Err(member(format!("unsupported compression method {m} (only stored and deflate)"))),
        };
        if bytes.len() as u64 != usize_ {
            return Err(member(format!("{} bytes after decompression, the directory says {usize_}", bytes.len())));
        }
        let mut c = flate2::Crc::new();
        c.update(&bytes);
        if c.sum() as u64 != crc {
            return Err(member("CRC-32 mismatch (the data is corrupted)".into()));
        }
        out.push((stem.rsplit('/').next().unwrap_or(stem).to_string(), bytes));
    }
    Ok(out)
}

/// Replaces 0xFFFFFFFF sizes and offsets by their ZIP64 extra-field values.
fn zip64_sizes(extra: &[u8], usize_: &mut u64, csize: &mut u64, local: &mut u64) {
    let mut i = 0;
    while i + 4 <= extra.len() {
        let (id, len) = (u16_at(extra, i).unwrap_or(0), u16_at(extra, i + 2).unwrap_or(0) as usize);
        if id == 1 {
            let mut j = i + 4;
            for v in [&mut *usize_, &mut *csize, &mut *local] {
                if *v == 0xFFFF_FFFF {
                    if let Some(x) = u64_at(extra, j) {
                        *v = x;
                    }
                    j += 8;
                }
            }
        }
        i += 4 + len;
    }
}
