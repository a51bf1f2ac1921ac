//! IDX files (MNIST's format): two zero bytes, a dtype byte (0x08 u8, 0x09
//! i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64), the number of dimensions,
//! each dimension as a big-endian u32, then the values, big-endian,
//! row-major. The first dimension enumerates the elements.
//!
//! Contract: the file must hold exactly the bytes its header announces; a
//! wrong magic, an unknown dtype byte, a short or long file is an error at
//! the byte where the problem is.

use super::raw::{decode, Layout, Scalar};
use super::{fail, Path};
use crate::diag::Diagnostic;
use crate::ir::{DType, TensorType};
use crate::tensor::Tensor;

/// The type of the file's data as `dtype` (and the data when `data`).
/// `b` is the file, or (when only the type is wanted) a prefix of it that
/// holds the whole header; `total` is the file's length.
pub fn read(
    path: &Path,
    b: &[u8],
    total: usize,
    dtype: DType,
    data: bool,
) -> Result<(TensorType, Option<Tensor>), Diagnostic> {
    let layout = header(path, b, total, dtype)?;
    let tensor =
        if data { Some(decode(&b[layout.offset..], layout.scalar, true, dtype, &layout.ty.shape)?) } else { None };
    Ok((layout.ty, tensor))
}

/// Where the values of the IDX file `b` (a prefix holding the header; the
/// file is `total` bytes long) lie, read as `dtype`.
pub fn header(path: &Path, b: &[u8], total: usize, dtype: DType) -> Result<Layout, Diagnostic> {
    if b.len() < 4 {
        return Err(fail(
            path,
            Some(b.len()),
            format!("the file ends inside the 4-byte IDX magic number ({} bytes)", b.len()),
        ));
    }
    if b[0] != 0 || b[1] != 0 {
        return Err(fail(
            path,
            Some(0),
            format!("not an IDX file: it starts with {:02x} {:02x}, not 00 00", b[0], b[1]),
        ));
    }
    let scalar = match b[2] {
        0x08 => Scalar::U8,
        0x09 => Scalar::I8,
        0x0B => Scalar::I16,
        0x0C => Scalar::I32,
        0x0D => Scalar::F32,
        0x0E => Scalar::F64,
        other => {
            return Err(fail(
                path,
                Some(2),
                format!("unknown IDX dtype byte 0x{other:02x} (expected 08, 09, 0b, 0c, 0d or 0e)"),
            ))
        }
    };
    if dtype == DType::I32 && scalar.is_float() {
        return Err(fail(path, Some(2), "a label file must hold integers, this IDX file holds floats"));
    }
    let rank = b[3] as usize;
    if rank == 0 {
        return Err(fail(path, Some(3), "the IDX header declares 0 dimensions; a dataset needs at least one"));
    }
    let start = 4 + 4 * rank;
    if b.len() < start {
        return Err(fail(
            path,
            Some(b.len()),
            format!("the file ends inside the header ({rank} dimensions need {start} bytes)"),
        ));
    }
    let shape: Vec<usize> =
        b[4..start].chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize).collect();
    let want = super::element_count(&shape)
        .and_then(|n| n.checked_mul(scalar.size()))
        .ok_or_else(|| fail(path, Some(4), format!("the dimensions {shape:?} are too large")))?;
    let have = total.saturating_sub(start);
    if have != want {
        let what = if have < want { "truncated" } else { "longer than its header says" };
        return Err(fail(
            path,
            Some(total.min(start + want)),
            format!(
                "the file is {what}: dimensions {shape:?} of {}-byte values need {want} data bytes after the {start}-byte header, found {have}",
                scalar.size()
            ),
        ));
    }
    Ok(Layout { ty: TensorType::new(dtype, shape), scalar, big: true, offset: start, fortran: false })
}
