//! The value printer of §11: `f32[2, 3] [[1, 2.5, 3], [4, 5, 6]]`.
//!
//! Contract:
//! - a tensor prints as its type, a space, then its values nested by rank,
//!   elements separated by `, `; a scalar prints as `f32 0.125` (dtype only);
//!   an empty tensor as `f32[0] []` (`f32[2, 0] [[], []]`);
//! - floats use Rust's shortest round-trip `Display` of the dtype's own width
//!   (`f32` for `f32`/`f16`/`bf16`, whose values are exact in `f32`; `f64`
//!   for `f64`), so `0.1` prints as `0.1`, `1.0` as `1`, `-0.0` as `-0`; NaN
//!   prints as `nan`, infinities as `inf` and `-inf`; bools as `true`/`false`;
//! - a tensor of more than 1000 elements is summarized unless `full`: along
//!   every axis longer than 6, only the first 3 and last 3 entries print,
//!   with `...` between (NumPy's `threshold=1000, edgeitems=3`).
//!
//! Input is plain data — a `TensorType` and a row-major `ir::Literal` —
//! so every backend can print with it. Missing values (a literal shorter
//! than the type) print as `?` rather than panicking.
//!
//! Example: `format_tensor(&TensorType::new(DType::I32, vec![2]), &Literal::Int(vec![1, 2]), false)`
//! is `"i32[2] [1, 2]"`.

use crate::ir::{DType, Literal, TensorType};

/// Tensors with more elements than this are summarized (unless `full`).
pub const SUMMARY_THRESHOLD: usize = 1000;
/// Entries kept at each end of a summarized axis.
pub const EDGE_ITEMS: usize = 3;

/// The §11 text of a tensor of type `ty` with row-major `values`.
pub fn format_tensor(ty: &TensorType, values: &Literal, full: bool) -> String {
    if ty.rank() == 0 {
        return format!("{} {}", ty.dtype, element(ty.dtype, values, 0));
    }
    let summarize = !full && ty.numel() > SUMMARY_THRESHOLD;
    let mut out = format!("{ty} ");
    write_axis(&mut out, ty, values, 0, 0, summarize);
    out
}

/// Writes the sub-tensor at `offset` whose first axis is `dim`.
fn write_axis(out: &mut String, ty: &TensorType, values: &Literal, dim: usize, offset: usize, summarize: bool) {
    let n = ty.shape[dim];
    let stride: usize = ty.shape[dim + 1..].iter().product();
    let shown: Vec<Option<usize>> = if summarize && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS).map(Some).chain([None]).chain((n - EDGE_ITEMS..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    };
    out.push('[');
    for (k, entry) in shown.into_iter().enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        match entry {
            None => out.push_str("..."),
            Some(i) if dim + 1 == ty.rank() => out.push_str(&element(ty.dtype, values, offset + i)),
            Some(i) => write_axis(out, ty, values, dim + 1, offset + i * stride, summarize),
        }
    }
    out.push(']');
}

/// The text of element `i`.
fn element(dtype: DType, values: &Literal, i: usize) -> String {
    let text = match values {
        Literal::Float(v) => v.get(i).map(|&x| format_float(dtype, x)),
        Literal::Int(v) => v.get(i).map(i64::to_string),
        Literal::Bool(v) => v.get(i).map(bool::to_string),
    };
    text.unwrap_or_else(|| "?".to_string())
}

/// Shortest round-trip text of a float of `dtype` (or of an integer or bool
/// element of that dtype, given as an f64).
pub fn format_float(dtype: DType, x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else if dtype == DType::F64 {
        format!("{x}")
    } else if dtype.is_int() {
        // Integer values (as `assert_close` reports them) print as integers,
        // not through f32, which would round 1099511627776 to 1099511600000.
        format!("{}", x as i64)
    } else if dtype == DType::Bool {
        (x != 0.0).to_string()
    } else {
        // f32, f16 and bf16 values are exact in f32, whose shortest form is the right one.
        format!("{}", x as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: &[usize], v: &[f64]) -> String {
        format_tensor(&TensorType::new(DType::F32, shape.to_vec()), &Literal::Float(v.to_vec()), false)
    }

    #[test]
    fn format_float_prints_integer_and_bool_dtypes_exactly() {
        assert_eq!(format_float(DType::I64, 1099511627776.0), "1099511627776");
        assert_eq!(format_float(DType::I32, -7.0), "-7");
        assert_eq!(format_float(DType::Bool, 1.0), "true");
    }

    #[test]
    fn prints_scalars_vectors_and_matrices() {
        assert_eq!(f32s(&[], &[0.125]), "f32 0.125");
        assert_eq!(f32s(&[3], &[1.0, 2.5, f64::from(0.1f32)]), "f32[3] [1, 2.5, 0.1]");
        assert_eq!(f32s(&[2, 3], &[1.0, 2.5, 3.0, 4.0, 5.0, 6.0]), "f32[2, 3] [[1, 2.5, 3], [4, 5, 6]]");
        let ty = TensorType::new(DType::F64, vec![2]);
        assert_eq!(format_tensor(&ty, &Literal::Float(vec![0.1, 1e-7]), false), "f64[2] [0.1, 0.0000001]");
    }

    #[test]
    fn prints_rank_three_empty_bool_int_and_special_values() {
        let v: Vec<f64> = (0..8).map(f64::from).collect();
        assert_eq!(f32s(&[2, 2, 2], &v), "f32[2, 2, 2] [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]");
        assert_eq!(f32s(&[0], &[]), "f32[0] []");
        assert_eq!(f32s(&[2, 0], &[]), "f32[2, 0] [[], []]");
        let b = TensorType::new(DType::Bool, vec![2]);
        assert_eq!(format_tensor(&b, &Literal::Bool(vec![true, false]), false), "bool[2] [true, false]");
        let i = TensorType::scalar(DType::I64);
        assert_eq!(format_tensor(&i, &Literal::Int(vec![-3]), false), "i64 -3");
        assert_eq!(f32s(&[4], &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0]), "f32[4] [nan, inf, -inf, -0]");
        let h = TensorType::new(DType::F16, vec![1]);
        assert_eq!(format_tensor(&h, &Literal::Float(vec![0.0999755859375]), false), "f16[1] [0.099975586]");
    }

    #[test]
    fn summarizes_large_tensors_unless_full() {
        let v: Vec<f64> = (0..1001).map(f64::from).collect();
        assert_eq!(f32s(&[1001], &v), "f32[1001] [0, 1, 2, ..., 998, 999, 1000]");
        assert!(format_tensor(&TensorType::new(DType::F32, vec![1001]), &Literal::Float(v.clone()), true)
            .ends_with("999, 1000]"));
        assert_eq!(
            format_tensor(&TensorType::new(DType::F32, vec![1001]), &Literal::Float(v), true).matches(", ").count(),
            1000
        );
        // Exactly 1000 elements print in full.
        let v: Vec<f64> = (0..1000).map(f64::from).collect();
        assert!(!f32s(&[1000], &v).contains("..."));
        // A 2-D summary: every long axis keeps three entries at each end; short axes stay whole.
        let v: Vec<f64> = (0..2000).map(f64::from).collect();
        assert_eq!(
            f32s(&[2, 1000], &v),
            "f32[2, 1000] [[0, 1, 2, ..., 997, 998, 999], [1000, 1001, 1002, ..., 1997, 1998, 1999]]"
        );
        let v: Vec<f64> = (0..1100).map(f64::from).collect();
        assert_eq!(
            f32s(&[100, 11], &v),
            "f32[100, 11] [[0, 1, 2, ..., 8, 9, 10], [11, 12, 13, ..., 19, 20, 21], [22, 23, 24, ..., 30, 31, 32], \
             ..., [1067, 1068, 1069, ..., 1075, 1076, 1077], [1078, 1079, 1080, ..., 1086, 1087, 1088], \
             [1089, 1090, 1091, ..., 1097, 1098, 1099]]"
        );
    }
}
