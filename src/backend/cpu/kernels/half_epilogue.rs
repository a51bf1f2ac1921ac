//! The epilogue of a bf16 product in one pass over its `f32` sums: the
//! product's rounding to bf16, a per-column bias, the ReLU's mask, the
//! ReLU, a kept mask, and the result narrowed to two-byte bf16 storage
//! (what `ir::half_epilogue` recognizes). Why: as compiled code (four
//! lanes) after a rounding pass, this took about 2.4x what the `f32`
//! layer's epilogue takes, 0.1 ms of a 0.9 ms bf16 MLP step.
//!
//! Contract: for every element `i` of the row-major `m × n` sums
//! `product`, with `p = round_bf16(product[i])` and `s = p + bias[i % n]`
//! (`s = p` without a bias): `positive[i] = (s > 0)` (NaN is false), `y =
//! s` where `s > 0` or NaN else `+0` with `relu` (the interpreter's ReLU;
//! `y = s` without), `y = +0` where `keep_where[i] == 0`, `unrounded[i] =
//! y` and `out[i] = f32_to_bf16_bits(y)` — bit for bit what the interpreter computes
//! (`crate::half`), on the AVX-512 path and the scalar one, but for which
//! NaN a NaN is (when both addends are NaN, which payload the sum keeps
//! is the compiler's choice, the interpreter's too). Rows are split
//! over `threads` (elementwise: the bits do not depend on it).
//!
//! Example: `product = [1.00390625, -2.0]`, `bias = [0.5, 0.5]`, `relu`:
//! `p = [1.0, -2.0]` (the tie rounds to even), `out = bits of [1.5, 0.0]`,
//! `positive = [1, 0]`.

use super::SendPtr;
use crate::half::{f32_to_bf16_bits, round_bf16};

/// What the pass applies after rounding the product (see the module docs).
#[derive(Clone, Copy, Default)]
pub(in crate::backend::cpu) struct Epilogue<'a> {
    /// `n` values, one per column.
    pub bias: Option<&'a [f32]>,
    pub relu: bool,
    /// `m · n` bools (0 or 1).
    pub keep_where: Option<&'a [u8]>,
}

/// Where the pass writes: as many elements each as the product has.
pub(in crate::backend::cpu) struct Outputs<'a> {
    /// The result's bf16 bits.
    pub out: Option<&'a mut [u16]>,
    /// `s > 0`, as 0 or 1.
    pub positive: Option<&'a mut [u8]>,
    /// The result before its rounding.
    pub unrounded: Option<&'a mut [f32]>,
}

/// The pass over `m = product.len() / n` rows (see the module docs).
///
/// # Panics
/// If the lengths disagree.
pub(in crate::backend::cpu) fn bf16_epilogue(product: &[f32], n: usize, post: Epilogue, to: Outputs, threads: usize) {
    let len = product.len();
    assert!(n > 0 && len.is_multiple_of(n), "bf16 epilogue: {len} sums in rows of {n}");
    assert!(to.out.as_ref().is_none_or(|o| o.len() == len));
    assert!(post.bias.is_none_or(|b| b.len() == n) && post.keep_where.is_none_or(|k| k.len() == len));
    assert!(
        to.positive.as_ref().is_none_or(|p| p.len() == len) && to.unrounded.as_ref().is_none_or(|u| u.len() == len)
    );
    if threads <= 1 {
        return rows(product, n, post, to);
    }
    let out = to.out.map(|o| SendPtr(o.as_mut_ptr()));
    let positive = to.positive.map(|p| SendPtr(p.as_mut_ptr()));
    let unrounded = to.unrounded.map(|u| SendPtr(u.as_mut_ptr()));
    crate::backend::cpu::threads::in_ranges(len / n, threads, |lo, hi| {
        let (from, end) = (lo * n, hi * n);
        // SAFETY: elements from..end (rows lo..hi) of every output are
        // this worker's only, in bounds by the checks above.
        let to = unsafe {
            Outputs {
                out: out.as_ref().map(|o| o.slice(from, end)),
                positive: positive.as_ref().map(|p| p.slice(from, end)),
                unrounded: unrounded.as_ref().map(|u| u.slice(from, end)),
            }
        };
        let post = Epilogue { keep_where: post.keep_where.map(|k| &k[from..end]), ..post };
        rows(&product[from..end], n, post, to);
    });
}

/// `bf16_epilogue` of whole rows on this thread.
fn rows(product: &[f32], n: usize, post: Epilogue, to: Outputs) {
    #[cfg(target_arch = "x86_64")]
    if crate::backend::cpu::kernels::simd::avx512() {
        // SAFETY: AVX-512 is there; the slices' lengths agree (checked by
        // `bf16_epilogue`).
        return unsafe { avx512::rows(product, n, post, to) };
    }
    scalar(product, n, post, to)
}

/// The definition, one element at a time: the tests' reference, and the
/// path of a CPU without AVX-512 (where the lowering plans no such step).
fn scalar(product: &[f32], n: usize, post: Epilogue, to: Outputs) {
    let Outputs { mut out, mut positive, mut unrounded } = to;
    for (i, &sum) in product.iter().enumerate() {
        let p = round_bf16(sum);
        let s = post.bias.map_or(p, |b| p + b[i % n]);
        if let Some(positive) = positive.as_deref_mut() {
            positive[i] = u8::from(s > 0.0);
        }
        let mut y = if post.relu && !(s > 0.0 || s.is_nan()) { 0.0 } else { s };
        if post.keep_where.is_some_and(|k| k[i] == 0) {
            y = 0.0;
        }
        if let Some(unrounded) = unrounded.as_deref_mut() {
            unrounded[i] = y;
        }
        if let Some(out) = out.as_deref_mut() {
            out[i] = f32_to_bf16_bits(y);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Epilogue, Outputs};
    use crate::backend::cpu::kernels::convert::avx512::{narrow_bf16, round_bf16};
    use crate::backend::cpu::kernels::simd::lanes;
    use std::arch::x86_64::*;

    /// `super::rows` 16 columns at a time, the last ones of a row masked.
    ///
    /// # Safety
    /// AVX-512 F, BW, VL; the lengths as `super::bf16_epilogue` checks them.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn rows(product: &[f32], n: usize, post: Epilogue, to: Outputs) {
        let zero = _mm512_setzero_ps();
        let ones = _mm_set1_epi8(1);
        let positive = to.positive.map(|p| p.as_mut_ptr());
        let unrounded = to.unrounded.map(|u| u.as_mut_ptr());
        let out = to.out.map(|o| o.as_mut_ptr());
        for row in (0..product.len()).step_by(n) {
            for c in (0..n).step_by(16) {
                let lanes = lanes(n - c);
                let i = row + c;
                // SAFETY (loads and stores): elements i.. of the row,
                // masked to the row's end, in bounds of every buffer.
                unsafe {
                    let p = round_bf16(_mm512_maskz_loadu_ps(lanes, product.as_ptr().add(i)));
                    let s = match post.bias {
                        Some(b) => _mm512_add_ps(p, _mm512_maskz_loadu_ps(lanes, b.as_ptr().add(c))),
                        None => p,
                    };
                    if let Some(positive) = positive {
                        let above = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(s, zero);
                        _mm_mask_storeu_epi8(positive.add(i).cast(), lanes, _mm_maskz_mov_epi8(above, ones));
                    }
                    // The interpreter's ReLU keeps what is above zero or NaN.
                    let mut y = match post.relu {
                        true => _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_NLE_UQ>(s, zero), s),
                        false => s,
                    };
                    if let Some(keep) = post.keep_where {
                        let k = _mm_maskz_loadu_epi8(lanes, keep.as_ptr().add(i).cast());
                        y = _mm512_maskz_mov_ps(_mm_test_epi8_mask(k, k), y);
                    }
                    if let Some(unrounded) = unrounded {
                        _mm512_mask_storeu_ps(unrounded.add(i), lanes, y);
                    }
                    if let Some(out) = out {
                        _mm256_mask_storeu_epi16(out.add(i).cast(), lanes, narrow_bf16(y));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::half::bf16_bits_to_f32;

    /// Sums around every interesting bf16 case: ties, values a bias
    /// pushes across zero, signed zeros, subnormals, overflow, NaN and
    /// infinities, in the product and in the bias.
    fn values(len: usize, seed: u32) -> Vec<f32> {
        let special = [
            0.0,
            -0.0,
            1.003_906_3,
            1.011_718_8,
            -0.5,
            0.5,
            1e-40,
            -1e-40,
            3.4e38,
            -3.4e38,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::MIN_POSITIVE,
        ];
        let mut state = seed.wrapping_mul(2_654_435_761).max(1);
        (0..len)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                match i % 3 {
                    0 => special[(state % special.len() as u32) as usize],
                    _ => f32::from_bits(state & 0x807f_ffff | 0x3f00_0000) * 4.0 - 3.0,
                }
            })
            .collect()
    }

    fn widened(bits: &[u16]) -> Vec<f32> {
        bits.iter().map(|&h| bf16_bits_to_f32(h)).collect()
    }

    /// The same bits, or both NaN (see the module docs).
    fn same(got: &[f32], want: &[f32], what: &str) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{what}: element {i}: {g:?} against {w:?}"
            );
        }
        assert_eq!(got.len(), want.len());
    }

    /// Every combination of the parts, ragged rows (n not a multiple of
    /// 16), one and two threads: the pass is the scalar definition bit for
    /// bit, and the definition is the interpreter's (spot checks).
    #[test]
    fn the_pass_is_the_definition_bit_for_bit() {
        let mut checked = 0;
        for (m, n) in [(3, 1), (5, 16), (7, 37), (2, 100)] {
            let product = values(m * n, (m * n) as u32);
            let bias = values(n, 7 + n as u32);
            let keep: Vec<u8> = (0..m * n).map(|i| u8::from(i % 5 != 2)).collect();
            for parts in 0..8 {
                let post = Epilogue {
                    bias: (parts & 1 != 0).then_some(&bias[..]),
                    relu: parts & 2 != 0,
                    keep_where: (parts & 4 != 0).then_some(&keep[..]),
                };
                let (mut want, mut want_positive, mut want_unrounded) =
                    (vec![0u16; m * n], vec![0u8; m * n], vec![0f32; m * n]);
                let outputs = Outputs {
                    out: Some(&mut want),
                    positive: Some(&mut want_positive),
                    unrounded: Some(&mut want_unrounded),
                };
                scalar(&product, n, post, outputs);
                for threads in [1, 2] {
                    let (mut got, mut got_positive, mut got_unrounded) =
                        (vec![7u16; m * n], vec![7u8; m * n], vec![7f32; m * n]);
                    let outputs = Outputs {
                        out: Some(&mut got),
                        positive: Some(&mut got_positive),
                        unrounded: Some(&mut got_unrounded),
                    };
                    bf16_epilogue(&product, n, post, outputs, threads);
                    let what = format!("{m}x{n}, parts {parts}, {threads} threads");
                    same(&widened(&got), &widened(&want), &what);
                    assert_eq!(got_positive, want_positive, "{what}");
                    same(&got_unrounded, &want_unrounded, &what);
                    // Each output alone.
                    let mut alone = vec![7u16; m * n];
                    bf16_epilogue(
                        &product,
                        n,
                        post,
                        Outputs { out: Some(&mut alone), positive: None, unrounded: None },
                        threads,
                    );
                    assert_eq!(alone, got);
                    let mut unrounded_alone = vec![7f32; m * n];
                    let outputs = Outputs { out: None, positive: None, unrounded: Some(&mut unrounded_alone) };
                    bf16_epilogue(&product, n, post, outputs, threads);
                    same(&unrounded_alone, &got_unrounded, &what);
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 64);
        // The definition: a tie rounds to even before the bias, a ReLU
        // keeps NaN and turns -0 into +0, a dropped element is +0.
        let mut out = [0u16; 4];
        let post = Epilogue { bias: Some(&[0.5, 0.5, 0.0, 0.0]), relu: true, keep_where: None };
        scalar(
            &[1.003_906_3, -2.0, f32::NAN, -0.0],
            4,
            post,
            Outputs { out: Some(&mut out), positive: None, unrounded: None },
        );
        assert_eq!(out, [0x3fc0, 0, 0x7fc0, 0]);
    }
}
