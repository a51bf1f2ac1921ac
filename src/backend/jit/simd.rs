//! The wide vector instructions the native kernels use when the machine has
//! them: AVX-512 on x86_64 (conv_direct's kernels require it; pooling and
//! reductions merely run faster with it).
//!
//! Contract: [`avx512`] is true only on a machine with AVX-512F (and BW,
//! VL, DQ), and never when the environment variable `TFC_NO_AVX512` is set,
//! which runs and tests the portable paths. [`wide`] runs a closure
//! compiled for those instructions when [`avx512`] holds, else as it is;
//! only code the compiler can inline into it (the closure, and helpers
//! marked `#[inline(always)]`) gains them. It changes no result: Rust never
//! fuses or reorders float operations, so a loop computes the same values
//! at any vector width.
//!
//! Example: `pool` runs each batch element as
//! `wide(|| pool_batch(&d, &p, x, b, out))`, so its max over four taps of
//! 16 channels is one 512-bit `vmaxps` per tap instead of four 128-bit ones.

/// Whether this machine has AVX-512 (F, BW, VL, DQ) and `TFC_NO_AVX512` is
/// unset. Read once.
pub(super) fn avx512() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        let avx512 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq");
        #[cfg(not(target_arch = "x86_64"))]
        let avx512 = false;
        avx512 && std::env::var_os("TFC_NO_AVX512").is_none()
    })
}

/// Runs `f`, compiled for AVX-512 when [`avx512`] holds (see the module
/// docs).
#[inline(always)]
pub(super) fn wide<R>(f: impl FnOnce() -> R) -> R {
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
pub(super) fn max_nan_16(m: std::arch::x86_64::__m512, v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
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
pub(super) fn is_max_16(
    v: std::arch::x86_64::__m512,
    m: std::arch::x86_64::__m512,
    m_is_nan: std::arch::x86_64::__mmask16,
) -> std::arch::x86_64::__mmask16 {
    use std::arch::x86_64::{_mm512_cmp_ps_mask, _CMP_EQ_OQ, _CMP_UNORD_Q};
    _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(v, m) | (m_is_nan & _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v))
}
