//! The wide vector instructions the native kernels use when the machine has
//! them: AVX-512 on x86_64 (conv_direct's kernels require it; pooling and
//! reductions merely run faster with it).
//!
//! Contract: [`avx512`] is true only on a machine with AVX-512F (and BW,
//! VL, DQ), and never when the environment variable `TFC_NO_AVX512` is set
//! or `TFC_ISA` is `portable` (module `isa`), which run and test the
//! portable paths. [`wide`] runs a closure
//! compiled for those instructions when [`avx512`] holds, else as it is;
//! only code the compiler can inline into it (the closure, and helpers
//! marked `#[inline(always)]`) gains them. It changes no result: Rust never
//! fuses or reorders float operations, so a loop computes the same values
//! at any vector width.
//!
//! Example: `pool` runs each batch element as
//! `wide(|| pool_batch(&d, &p, x, b, out))`, so its max over four taps of
//! 16 channels is one 512-bit `vmaxps` per tap instead of four 128-bit ones.

/// The mask of the first `min(count, 16)` lanes of a 16-lane vector.
pub(in crate::backend::cpu) fn lanes(count: usize) -> u16 {
    if count >= 16 {
        u16::MAX
    } else {
        (1u16 << count) - 1
    }
}

/// Whether this machine has AVX-512 (F, BW, VL, DQ) and `TFC_NO_AVX512` is
/// unset. Read once.
pub(in crate::backend::cpu) fn avx512() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        let avx512 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq");
        #[cfg(not(target_arch = "x86_64"))]
        let avx512 = false;
        // `getenv` rather than `std::env`, which copies the value: an
        // ahead-of-time library's first call allocates nothing either.
        // SAFETY: a NUL-terminated name; the result is only compared.
        let no_avx512 = !unsafe { libc::getenv(c"TFC_NO_AVX512".as_ptr()) }.is_null();
        // `TFC_ISA=portable` (module `isa`) runs every kernel's portable path.
        // SAFETY: as above; a non-null result is a NUL-terminated string
        // that lives while the environment is not changed (it is not).
        let isa = unsafe { libc::getenv(c"TFC_ISA".as_ptr()) };
        let portable = !isa.is_null()
            && unsafe { std::ffi::CStr::from_ptr(isa) }.to_bytes().trim_ascii().eq_ignore_ascii_case(b"portable");
        avx512 && !no_avx512 && !portable
    })
}

/// Runs `f`, compiled for AVX-512 when [`avx512`] holds (see the module
/// docs).
#[inline(always)]
pub(in crate::backend::cpu) fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: `avx512()` checked that the CPU has these features.
        return unsafe { with_avx512(f) };
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// One step of the interpreter's `max_nan` fold on 16 lanes: `v` where it
/// is larger than `m` (`m` on ties), NaN where either is NaN. Shared by the
/// max-pool gradient and the max pool a convolution writes, which must
/// agree with the interpreter (and each other) bit for bit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(in crate::backend::cpu) fn max_nan_16(
    m: std::arch::x86_64::__m512,
    v: std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::{_mm512_cmp_ps_mask, _mm512_mask_mov_ps, _mm512_set1_ps, _CMP_GT_OQ, _CMP_UNORD_Q};
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(m, v);
    let m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, m), v);
    _mm512_mask_mov_ps(m, nan, _mm512_set1_ps(f32::NAN))
}

/// The lanes where `v` is a window's maximum `m` (the result of the
/// `max_nan_16` fold; `m_is_nan`: its NaN lanes): equal to it, or NaN where
/// it is NaN. The first such tap of a window is where the interpreter's
/// max-pool gradient goes, so the pool gradient and the maxima a fused pool
/// records agree on it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(in crate::backend::cpu) fn is_max_16(
    v: std::arch::x86_64::__m512,
    m: std::arch::x86_64::__m512,
    m_is_nan: std::arch::x86_64::__mmask16,
) -> std::arch::x86_64::__mmask16 {
    use std::arch::x86_64::{_mm512_cmp_ps_mask, _CMP_EQ_OQ, _CMP_UNORD_Q};
    _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(v, m) | (m_is_nan & _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v))
}

/// The `max_nan_16` fold from `-inf` over a 2x2 window's four vectors, in
/// row-major order. Without NaN among them, three `vmaxps`: `max_ps(v, m)`
/// is `v` where `v > m` and `m` otherwise (ties and signed zeros
/// included), which is the fold's step; a NaN anywhere takes the fold.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(in crate::backend::cpu) fn window_max_16(taps: [std::arch::x86_64::__m512; 4]) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::{_mm512_cmp_ps_mask, _mm512_max_ps, _mm512_set1_ps, _CMP_UNORD_Q};
    let [a, b, c, d] = taps;
    if _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(c, d) == 0 {
        return _mm512_max_ps(d, _mm512_max_ps(c, _mm512_max_ps(b, a)));
    }
    taps.into_iter().fold(_mm512_set1_ps(f32::NEG_INFINITY), |m, v| max_nan_16(m, v))
}

/// 32 bf16 values from their bits (`vdpbf16ps`'s operand type).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(in crate::backend::cpu) fn bh(v: std::arch::x86_64::__m512i) -> std::arch::x86_64::__m512bh {
    // SAFETY: both are 64 bytes of plain bits.
    unsafe { std::mem::transmute::<std::arch::x86_64::__m512i, std::arch::x86_64::__m512bh>(v) }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::{avx512, max_nan_16, window_max_16};
    use std::arch::x86_64::{_mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps};

    /// The window maximum equals the `max_nan` fold bit for bit on every
    /// ordering of signed zeros, ties, infinities and NaN.
    #[test]
    fn window_max_is_the_max_nan_fold() {
        if !avx512() {
            return;
        }
        let values = [0.0, -0.0, 1.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 2.5];
        // Every window of four values from `values`, one per lane, 16 at a
        // time; those without NaN first, so that whole vectors of them take
        // the `vmaxps` path.
        let mut windows: Vec<[f32; 4]> = (0..values.len().pow(4))
            .map(|i| [0, 1, 2, 3].map(|t| values[i / values.len().pow(t) % values.len()]))
            .collect();
        windows.sort_by_key(|w| w.iter().any(|v| v.is_nan()));
        for chunk in windows.chunks(16) {
            let lanes = |t: usize| {
                let mut v = [0.0f32; 16];
                chunk.iter().enumerate().for_each(|(l, w)| v[l] = w[t]);
                v
            };
            let [a, b, c, d] = [0, 1, 2, 3].map(lanes);
            let (mut got, mut want) = ([0.0f32; 16], [0.0f32; 16]);
            // SAFETY: `avx512()` holds; the arrays hold 16 lanes.
            unsafe {
                let taps = [a, b, c, d].map(|v| _mm512_loadu_ps(v.as_ptr()));
                _mm512_storeu_ps(got.as_mut_ptr(), window_max_16(taps));
                let fold = taps.into_iter().fold(_mm512_set1_ps(f32::NEG_INFINITY), |m, v| max_nan_16(m, v));
                _mm512_storeu_ps(want.as_mut_ptr(), fold);
            }
            for (l, w) in chunk.iter().enumerate() {
                assert_eq!(got[l].to_bits(), want[l].to_bits(), "window {w:?}");
            }
        }
    }
}
