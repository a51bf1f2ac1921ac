//! Whole-buffer conversions between `f32` and the half-precision types
//! (`f16`, `bf16`): the loops behind the CPU backend's `Step::Convert`,
//! which widens two-byte storage for the native `f32` kernels and rounds or
//! narrows their results back.
//!
//! Contract: element by element, [`widen`], [`narrow`], [`round`] and
//! [`round_in_place`] give bit for bit what `crate::half`'s
//! `f16_bits_to_f32` / `bf16_bits_to_f32`, `f32_to_f16_bits` /
//! `f32_to_bf16_bits` and `round_f16` / `round_bf16` give, for every input:
//! NaN payloads (signaling ones too), infinities, signed zeros, `f32` and
//! `f16` subnormals, overflow and ties. Source and destination must have
//! the same length; the functions panic otherwise. The path is chosen once
//! per process: AVX-512 (F, BW, VL; off under `TFC_NO_AVX512`, see
//! `simd::avx512`), else AVX2 with F16C, else a scalar loop over
//! `crate::half`. The tests compare every path the machine runs with
//! `crate::half` on every half bit pattern, the `f32` values next to every
//! half value and tie, and a dense sweep of `f32` bit patterns.
//!
//! How the hardware matches `crate::half`:
//! - `f16` narrowing is `vcvtps2ph` with round-to-nearest-even in its
//!   immediate (MXCSR's rounding mode does not matter). Like `crate::half`
//!   it overflows to infinity and turns a NaN into the quiet NaN with the
//!   same sign and top payload bits.
//! - `f16` widening is `vcvtph2ps`, which is exact but quiets a signaling
//!   NaN (sets `f32` bit 22), where `crate::half` keeps it signaling. Lanes
//!   with an all-ones exponent and a clear quiet bit get bit 22 cleared
//!   again (a compare and a masked and). Rounding narrows and widens
//!   without that fix-up, because a narrowed NaN is always quiet.
//! - `bf16` is integer arithmetic: widening is a 16-bit shift; narrowing
//!   adds `0x7fff` plus the lowest kept bit (to nearest, ties to even; a
//!   carry into the exponent up to infinity is right) and keeps the top 16
//!   bits, and a NaN lane takes its top 16 bits with the quiet bit set.
//!   AVX512-BF16's `vcvtneps2bf16` is not used: it flushes subnormal inputs
//!   to zero, which `crate::half` does not.
//!
//! Example: `narrow(Half::Bf16, &[1.0, 0.1], &mut out)` leaves
//! `out == [0x3f80, 0x3dcd]`, and `widen(Half::F16, &[0x3c00, 0x7c01], &mut
//! out)` leaves `1.0` and the signaling NaN with bits `0x7f80_2000`.

use crate::half::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, round_bf16, round_f16};

/// Which half type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) enum Half {
    F16,
    Bf16,
}

/// `dst[i]` = the `f32` value of the half bits `src[i]` (exact). Panics if
/// the lengths differ.
pub(in crate::backend::cpu) fn widen(half: Half, src: &[u16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "widening {} halves into {} floats", src.len(), dst.len());
    // SAFETY: `best` runs on this machine; the slices hold `len` elements
    // each and, one shared and one exclusive, do not overlap.
    unsafe { widen_on(Path::best(), half, src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// `dst[i]` = the half bits nearest `src[i]` (ties to even, overflow to
/// infinity, NaN to a quiet NaN). Panics if the lengths differ.
pub(in crate::backend::cpu) fn narrow(half: Half, src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "narrowing {} floats into {} halves", src.len(), dst.len());
    // SAFETY: as in `widen`.
    unsafe { narrow_on(Path::best(), half, src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// `dst[i]` = the `f32` nearest `src[i]` that the half type represents
/// (`round_f16` / `round_bf16`). Panics if the lengths differ; for a
/// buffer rounded where it is, see [`round_in_place`].
pub(in crate::backend::cpu) fn round(half: Half, src: &[f32], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "rounding {} floats into {} floats", src.len(), dst.len());
    // SAFETY: as in `widen`.
    unsafe { round_on(Path::best(), half, src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// `buf[i]` = the `f32` nearest `buf[i]` that the half type represents.
pub(in crate::backend::cpu) fn round_in_place(half: Half, buf: &mut [f32]) {
    let p = buf.as_mut_ptr();
    // SAFETY: `best` runs on this machine; the buffer holds `len` elements,
    // and `round_on` allows its source to be its destination.
    unsafe { round_on(Path::best(), half, p, p, buf.len()) }
}

/// The instructions a conversion runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Path {
    /// Every path, for the tests.
    #[cfg(test)]
    const ALL: &[Path] = &[
        Path::Scalar,
        #[cfg(target_arch = "x86_64")]
        Path::Avx2,
        #[cfg(target_arch = "x86_64")]
        Path::Avx512,
    ];

    /// The fastest path this machine runs (AVX-512 only where
    /// `simd::avx512` allows it). Read once.
    fn best() -> Path {
        static BEST: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if super::simd::avx512() && Path::Avx512.runs() {
                    return Path::Avx512;
                }
                if Path::Avx2.runs() {
                    return Path::Avx2;
                }
            }
            Path::Scalar
        })
    }

    /// Whether this machine has the path's instructions.
    fn runs(self) -> bool {
        match self {
            Path::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c"),
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            }
        }
    }
}

/// `widen` of `len` halves at `src` into `dst` on `path`.
///
/// # Safety
/// `path.runs()`; `src` is readable and `dst` writable for `len` elements,
/// and they do not overlap.
unsafe fn widen_on(path: Path, half: Half, src: *const u16, dst: *mut f32, len: usize) {
    // SAFETY (each arm): the caller's contract.
    match path {
        Path::Scalar => unsafe { widen_scalar(half, src, dst, len) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { avx2::widen(half, src, dst, len) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => unsafe { avx512::widen(half, src, dst, len) },
    }
}

/// `narrow` of `len` floats at `src` into `dst` on `path`.
///
/// # Safety
/// As for `widen_on`.
unsafe fn narrow_on(path: Path, half: Half, src: *const f32, dst: *mut u16, len: usize) {
    // SAFETY (each arm): the caller's contract.
    match path {
        Path::Scalar => unsafe { narrow_scalar(half, src, dst, len) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { avx2::narrow(half, src, dst, len) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => unsafe { avx512::narrow(half, src, dst, len) },
    }
}

/// `round` of `len` floats at `src` into `dst` on `path`. Every path reads
/// each element (or vector of them) before it writes it, so `dst` may be
/// `src` itself.
///
/// # Safety
/// `path.runs()`; `src` is readable and `dst` writable for `len` elements,
/// and they are the same place or do not overlap.
unsafe fn round_on(path: Path, half: Half, src: *const f32, dst: *mut f32, len: usize) {
    // SAFETY (each arm): the caller's contract.
    match path {
        Path::Scalar => unsafe { round_scalar(half, src, dst, len) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { avx2::round(half, src, dst, len) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => unsafe { avx512::round(half, src, dst, len) },
    }
}

/// The portable `widen`: `crate::half` element by element.
///
/// # Safety
/// As for `widen_on`.
unsafe fn widen_scalar(half: Half, src: *const u16, dst: *mut f32, len: usize) {
    // SAFETY (each arm): the caller's contract.
    match half {
        Half::F16 => unsafe { map(src, dst, len, f16_bits_to_f32) },
        Half::Bf16 => unsafe { map(src, dst, len, bf16_bits_to_f32) },
    }
}

/// The portable `narrow`: `crate::half` element by element.
///
/// # Safety
/// As for `widen_on`.
unsafe fn narrow_scalar(half: Half, src: *const f32, dst: *mut u16, len: usize) {
    // SAFETY (each arm): the caller's contract.
    match half {
        Half::F16 => unsafe { map(src, dst, len, f32_to_f16_bits) },
        Half::Bf16 => unsafe { map(src, dst, len, f32_to_bf16_bits) },
    }
}

/// The portable `round`: `crate::half` element by element.
///
/// # Safety
/// As for `round_on`.
unsafe fn round_scalar(half: Half, src: *const f32, dst: *mut f32, len: usize) {
    // SAFETY (each arm): the caller's contract.
    match half {
        Half::F16 => unsafe { map(src, dst, len, round_f16) },
        Half::Bf16 => unsafe { map(src, dst, len, round_bf16) },
    }
}

/// `dst[i] = f(src[i])` for `i < len`, each element read before it is
/// written (so `dst` may be `src`). Generic, so each `f` is inlined.
///
/// # Safety
/// `src` is readable and `dst` writable for `len` elements.
unsafe fn map<T: Copy, U>(src: *const T, dst: *mut U, len: usize, f: impl Fn(T) -> U) {
    for i in 0..len {
        // SAFETY: `i < len`.
        unsafe { dst.add(i).write(f(src.add(i).read())) };
    }
}

/// The AVX-512 path: 16 lanes a vector, the last vector masked.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::Half;
    use std::arch::x86_64::*;

    /// Lanes a vector.
    const LANES: usize = 16;

    /// See `super::widen_on`.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL; `super::widen_on`'s pointer contract.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn widen(half: Half, src: *const u16, dst: *mut f32, len: usize) {
        // SAFETY (each arm): the caller's contract.
        match half {
            Half::F16 => unsafe { from_halves(src, dst, len, |h| widen_f16(h)) },
            Half::Bf16 => unsafe { from_halves(src, dst, len, |h| widen_bf16(h)) },
        }
    }

    /// See `super::narrow_on`.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL; `super::narrow_on`'s pointer contract.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn narrow(half: Half, src: *const f32, dst: *mut u16, len: usize) {
        // SAFETY (each arm): the caller's contract.
        match half {
            Half::F16 => unsafe { to_halves(src, dst, len, |x| narrow_f16(x)) },
            Half::Bf16 => unsafe { to_halves(src, dst, len, |x| narrow_bf16(x)) },
        }
    }

    /// See `super::round_on`.
    ///
    /// # Safety
    /// AVX-512 F, BW and VL; `super::round_on`'s pointer contract.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn round(half: Half, src: *const f32, dst: *mut f32, len: usize) {
        // SAFETY (each arm): the caller's contract.
        match half {
            Half::F16 => unsafe { floats(src, dst, len, |x| _mm512_cvtph_ps(narrow_f16(x))) },
            Half::Bf16 => unsafe { floats(src, dst, len, |x| round_bf16(x)) },
        }
    }

    /// The mask of the first `n` lanes (`n < LANES`).
    #[inline]
    fn first(n: usize) -> __mmask16 {
        ((1u32 << n) - 1) as __mmask16
    }

    /// `dst = op(src)` over `len` halves, a vector at a time.
    ///
    /// # Safety
    /// As for `widen`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn from_halves(src: *const u16, dst: *mut f32, len: usize, op: impl Fn(__m256i) -> __m512) {
        let mut i = 0;
        while i + LANES <= len {
            // SAFETY: elements `i..i + LANES` lie in both buffers.
            unsafe { _mm512_storeu_ps(dst.add(i), op(_mm256_loadu_si256(src.add(i).cast()))) };
            i += LANES;
        }
        if i < len {
            let lanes = first(len - i);
            // SAFETY: the lanes past `len` are neither read nor written.
            unsafe { _mm512_mask_storeu_ps(dst.add(i), lanes, op(_mm256_maskz_loadu_epi16(lanes, src.add(i).cast()))) };
        }
    }

    /// `dst = op(src)` over `len` floats into halves, a vector at a time.
    ///
    /// # Safety
    /// As for `narrow`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn to_halves(src: *const f32, dst: *mut u16, len: usize, op: impl Fn(__m512) -> __m256i) {
        let mut i = 0;
        while i + LANES <= len {
            // SAFETY: elements `i..i + LANES` lie in both buffers.
            unsafe { _mm256_storeu_si256(dst.add(i).cast(), op(_mm512_loadu_ps(src.add(i)))) };
            i += LANES;
        }
        if i < len {
            let lanes = first(len - i);
            // SAFETY: the lanes past `len` are neither read nor written.
            unsafe { _mm256_mask_storeu_epi16(dst.add(i).cast(), lanes, op(_mm512_maskz_loadu_ps(lanes, src.add(i)))) };
        }
    }

    /// `dst = op(src)` over `len` floats, a vector at a time; each vector
    /// is loaded before it is stored, so `dst` may be `src`.
    ///
    /// # Safety
    /// As for `round`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn floats(src: *const f32, dst: *mut f32, len: usize, op: impl Fn(__m512) -> __m512) {
        let mut i = 0;
        while i + LANES <= len {
            // SAFETY: elements `i..i + LANES` lie in both buffers.
            unsafe { _mm512_storeu_ps(dst.add(i), op(_mm512_loadu_ps(src.add(i)))) };
            i += LANES;
        }
        if i < len {
            let lanes = first(len - i);
            // SAFETY: the lanes past `len` are neither read nor written.
            unsafe { _mm512_mask_storeu_ps(dst.add(i), lanes, op(_mm512_maskz_loadu_ps(lanes, src.add(i)))) };
        }
    }

    /// 16 `f16` widened exactly, signaling NaNs kept signaling (see the
    /// module docs).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    fn widen_f16(h: __m256i) -> __m512 {
        let x = _mm512_castps_si512(_mm512_cvtph_ps(h));
        // An all-ones exponent with a clear quiet bit: a signaling NaN, or
        // an infinity, whose bit 22 is clear anyway.
        let exponent_and_quiet = _mm256_and_si256(h, _mm256_set1_epi16(0x7e00));
        let signaling = _mm256_cmpeq_epi16_mask(exponent_and_quiet, _mm256_set1_epi16(0x7c00));
        let quiet_bit = _mm512_set1_epi32(1 << 22);
        _mm512_castsi512_ps(_mm512_mask_andnot_epi32(x, signaling, quiet_bit, x))
    }

    /// 16 `bf16` widened: the bits moved to the top half.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    fn widen_bf16(h: __m256i) -> __m512 {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }

    /// 16 floats narrowed to the nearest `f16` (ties to even).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    fn narrow_f16(x: __m512) -> __m256i {
        _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x)
    }

    /// 16 floats narrowed to the nearest `bf16` (ties to even).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    pub(in crate::backend::cpu::kernels) fn narrow_bf16(x: __m512) -> __m256i {
        _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(bf16_on_top(x)))
    }

    /// 16 floats rounded to the nearest `bf16` value.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    pub(in crate::backend::cpu::kernels) fn round_bf16(x: __m512) -> __m512 {
        _mm512_castsi512_ps(_mm512_and_si512(bf16_on_top(x), _mm512_set1_epi32(0xffff_0000_u32 as i32)))
    }

    /// 16 floats with their nearest `bf16` in the top 16 bits of each lane
    /// (the bottom ones are to be dropped): `crate::half::f32_to_bf16_bits`'
    /// biased add, and for NaN the bits with the quiet bit set.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    fn bf16_on_top(x: __m512) -> __m512i {
        let b = _mm512_castps_si512(x);
        let lowest_kept = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
        let rounded = _mm512_add_epi32(b, _mm512_add_epi32(lowest_kept, _mm512_set1_epi32(0x7fff)));
        let magnitude = _mm512_and_si512(b, _mm512_set1_epi32(0x7fff_ffff));
        let nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f80_0000));
        _mm512_mask_or_epi32(rounded, nan, b, _mm512_set1_epi32(0x0040_0000))
    }
}

/// The AVX2 + F16C path: 8 lanes a vector; the last few elements go
/// through one vector in a stack buffer.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::Half;
    use std::arch::x86_64::*;

    /// Lanes a vector.
    const LANES: usize = 8;

    /// See `super::widen_on`.
    ///
    /// # Safety
    /// AVX2 and F16C; `super::widen_on`'s pointer contract.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn widen(half: Half, src: *const u16, dst: *mut f32, len: usize) {
        // SAFETY (each arm): the caller's contract.
        match half {
            Half::F16 => unsafe { from_halves(src, dst, len, |h| widen_f16(h)) },
            Half::Bf16 => unsafe { from_halves(src, dst, len, |h| widen_bf16(h)) },
        }
    }

    /// See `super::narrow_on`.
    ///
    /// # Safety
    /// AVX2 and F16C; `super::narrow_on`'s pointer contract.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn narrow(half: Half, src: *const f32, dst: *mut u16, len: usize) {
        // SAFETY (each arm): the caller's contract.
        match half {
            Half::F16 => unsafe { to_halves(src, dst, len, |x| narrow_f16(x)) },
            Half::Bf16 => unsafe { to_halves(src, dst, len, |x| narrow_bf16(x)) },
        }
    }

    /// See `super::round_on`.
    ///
    /// # Safety
    /// AVX2 and F16C; `super::round_on`'s pointer contract.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn round(half: Half, src: *const f32, dst: *mut f32, len: usize) {
        // SAFETY (each arm): the caller's contract.
        match half {
            Half::F16 => unsafe { floats(src, dst, len, |x| _mm256_cvtph_ps(narrow_f16(x))) },
            Half::Bf16 => unsafe { floats(src, dst, len, |x| round_bf16(x)) },
        }
    }

    /// `dst = op(src)` over `len` halves, a vector at a time.
    ///
    /// # Safety
    /// As for `widen`.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn from_halves(src: *const u16, dst: *mut f32, len: usize, op: impl Fn(__m128i) -> __m256) {
        let whole = len / LANES * LANES;
        for i in (0..whole).step_by(LANES) {
            // SAFETY: elements `i..i + LANES` lie in both buffers.
            unsafe { _mm256_storeu_ps(dst.add(i), op(_mm_loadu_si128(src.add(i).cast()))) };
        }
        let (mut from, mut to) = ([0u16; LANES], [0f32; LANES]);
        let rest = len - whole;
        if rest == 0 {
            return;
        }
        // SAFETY: the last `rest` elements lie in both buffers; the stack
        // buffers hold a vector each.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(whole), from.as_mut_ptr(), rest);
            _mm256_storeu_ps(to.as_mut_ptr(), op(_mm_loadu_si128(from.as_ptr().cast())));
            std::ptr::copy_nonoverlapping(to.as_ptr(), dst.add(whole), rest);
        }
    }

    /// `dst = op(src)` over `len` floats into halves, a vector at a time.
    ///
    /// # Safety
    /// As for `narrow`.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn to_halves(src: *const f32, dst: *mut u16, len: usize, op: impl Fn(__m256) -> __m128i) {
        let whole = len / LANES * LANES;
        for i in (0..whole).step_by(LANES) {
            // SAFETY: elements `i..i + LANES` lie in both buffers.
            unsafe { _mm_storeu_si128(dst.add(i).cast(), op(_mm256_loadu_ps(src.add(i)))) };
        }
        let (mut from, mut to) = ([0f32; LANES], [0u16; LANES]);
        let rest = len - whole;
        if rest == 0 {
            return;
        }
        // SAFETY: as in `from_halves`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(whole), from.as_mut_ptr(), rest);
            _mm_storeu_si128(to.as_mut_ptr().cast(), op(_mm256_loadu_ps(from.as_ptr())));
            std::ptr::copy_nonoverlapping(to.as_ptr(), dst.add(whole), rest);
        }
    }

    /// `dst = op(src)` over `len` floats, a vector at a time; each vector
    /// is loaded before it is stored, so `dst` may be `src`.
    ///
    /// # Safety
    /// As for `round`.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn floats(src: *const f32, dst: *mut f32, len: usize, op: impl Fn(__m256) -> __m256) {
        let whole = len / LANES * LANES;
        for i in (0..whole).step_by(LANES) {
            // SAFETY: elements `i..i + LANES` lie in both buffers.
            unsafe { _mm256_storeu_ps(dst.add(i), op(_mm256_loadu_ps(src.add(i)))) };
        }
        let mut lanes = [0f32; LANES];
        let rest = len - whole;
        if rest == 0 {
            return;
        }
        // SAFETY: as in `from_halves`; the tail is copied out before it is
        // written, so `dst` may be `src`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(whole), lanes.as_mut_ptr(), rest);
            _mm256_storeu_ps(lanes.as_mut_ptr(), op(_mm256_loadu_ps(lanes.as_ptr())));
            std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst.add(whole), rest);
        }
    }

    /// 8 `f16` widened exactly, signaling NaNs kept signaling (see the
    /// module docs).
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn widen_f16(h: __m128i) -> __m256 {
        let x = _mm256_cvtph_ps(h);
        // An all-ones exponent with a clear quiet bit: a signaling NaN, or
        // an infinity, whose bit 22 is clear anyway. The 16-bit lane masks
        // sign-extend to 32-bit ones.
        let exponent_and_quiet = _mm_and_si128(h, _mm_set1_epi16(0x7e00));
        let signaling = _mm256_cvtepi16_epi32(_mm_cmpeq_epi16(exponent_and_quiet, _mm_set1_epi16(0x7c00)));
        let clear = _mm256_and_si256(signaling, _mm256_set1_epi32(1 << 22));
        _mm256_andnot_ps(_mm256_castsi256_ps(clear), x)
    }

    /// 8 `bf16` widened: the bits moved to the top half.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn widen_bf16(h: __m128i) -> __m256 {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    /// 8 floats narrowed to the nearest `f16` (ties to even). The VEX
    /// form takes three immediate bits and no exception suppression; the
    /// exceptions only set MXCSR's (masked) flags.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn narrow_f16(x: __m256) -> __m128i {
        _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)
    }

    /// 8 floats narrowed to the nearest `bf16` (ties to even). The shifted
    /// lanes are at most `0xffff`, so the saturating pack keeps them.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn narrow_bf16(x: __m256) -> __m128i {
        let b = _mm256_srli_epi32::<16>(bf16_on_top(x));
        _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b))
    }

    /// 8 floats rounded to the nearest `bf16` value.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn round_bf16(x: __m256) -> __m256 {
        _mm256_castsi256_ps(_mm256_and_si256(bf16_on_top(x), _mm256_set1_epi32(0xffff_0000_u32 as i32)))
    }

    /// 8 floats with their nearest `bf16` in the top 16 bits of each lane
    /// (see `avx512::bf16_on_top`). The magnitudes compared are below
    /// `2^31`, so the signed compare orders them.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn bf16_on_top(x: __m256) -> __m256i {
        let b = _mm256_castps_si256(x);
        let lowest_kept = _mm256_and_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(1));
        let rounded = _mm256_add_epi32(b, _mm256_add_epi32(lowest_kept, _mm256_set1_epi32(0x7fff)));
        let magnitude = _mm256_and_si256(b, _mm256_set1_epi32(0x7fff_ffff));
        let nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f80_0000));
        let quieted = _mm256_or_si256(b, _mm256_set1_epi32(0x0040_0000));
        _mm256_blendv_epi8(rounded, quieted, nan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paths this machine runs.
    fn paths() -> impl Iterator<Item = Path> {
        Path::ALL.iter().copied().filter(|p| p.runs())
    }

    /// Windows of `n` elements: all of them, all but a misaligned head and
    /// a ragged tail, and short runs of every length up to three vectors
    /// at odd offsets (tails of every size).
    fn windows(n: usize) -> Vec<std::ops::Range<usize>> {
        let mut w = vec![0..n, 1..n - 5];
        w.extend((0..=48).map(|len| 7 * len + 3..8 * len + 3));
        w
    }

    /// Panics at the first element where `got` and `want` differ in bits.
    fn same_bits<I: std::fmt::Debug, O: Copy + PartialEq + std::fmt::Debug>(
        what: &str,
        inputs: &[I],
        got: &[O],
        want: &[O],
    ) {
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            panic!("{what}: input {:#x?} gave {:#x?}, crate::half {:#x?}", inputs[i], got[i], want[i]);
        }
    }

    /// Every half pattern.
    fn every_half() -> Vec<u16> {
        (0..=u16::MAX).collect()
    }

    /// `f32` bit patterns around every rounding decision: each `f16` and
    /// `bf16` value and its neighbors, each tie between two `f16` (the
    /// subnormal ones included) or two `bf16` and its neighbors, a dense
    /// sweep, and special values.
    fn float_bits() -> Vec<u32> {
        let mut bits = Vec::new();
        let around = |b: u32, offsets: &[u32], bits: &mut Vec<u32>| {
            bits.extend(offsets.iter().map(|&d| b.wrapping_add(d)));
        };
        for h in 0..=u16::MAX {
            let f16 = f16_bits_to_f32(h);
            around(f16.to_bits(), &[0, 1, u32::MAX, 0x0fff, 0x1000, 0x1001], &mut bits);
            let next = f16_bits_to_f32(h.wrapping_add(1));
            if f16.is_finite() && next.is_finite() && (h ^ h.wrapping_add(1)) & 0x8000 == 0 {
                // Two adjacent f16 values have 11 significant bits, so their
                // mean (12) is exact in f32.
                let tie = ((f64::from(f16) + f64::from(next)) / 2.0) as f32;
                around(tie.to_bits(), &[0, 1, u32::MAX], &mut bits);
            }
            around(u32::from(h) << 16, &[0, 1, u32::MAX, 0x7fff, 0x8000, 0x8001], &mut bits);
        }
        bits.extend((0..200_000u32).map(|i| i.wrapping_mul(21_475)));
        let specials = [
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-40,
            -1e-40,
            f32::from_bits(1),
            65504.0,
            65519.99,
            65520.0,
            -65520.0,
            65536.0,
            2f32.powi(-24),
            2f32.powi(-25),
            -2f32.powi(-25),
        ];
        bits.extend(specials.iter().map(|x| x.to_bits()));
        let nans = [0x7fc0_0000, 0xffc0_0000, 0x7f80_0001, 0xff81_2345, 0x7fbf_ffff, 0x7fff_ffff, 0xffff_ffff];
        bits.extend(nans.iter().chain(&[0x7f80_2000, 0x7fc0_1fff, 0xff80_0040, 0x7f80_8000]));
        // An odd count, so the whole buffer ends in a ragged vector too.
        if bits.len() % 2 == 0 {
            bits.push(0x3f80_0001);
        }
        bits
    }

    /// Both half types.
    const HALVES: [Half; 2] = [Half::F16, Half::Bf16];

    /// `crate::half`'s widening of `h`.
    fn widened(half: Half, h: u16) -> f32 {
        match half {
            Half::F16 => f16_bits_to_f32(h),
            Half::Bf16 => bf16_bits_to_f32(h),
        }
    }

    /// `crate::half`'s narrowing of `x`.
    fn narrowed(half: Half, x: f32) -> u16 {
        match half {
            Half::F16 => f32_to_f16_bits(x),
            Half::Bf16 => f32_to_bf16_bits(x),
        }
    }

    /// `crate::half`'s rounding of `x`.
    fn rounded(half: Half, x: f32) -> f32 {
        match half {
            Half::F16 => round_f16(x),
            Half::Bf16 => round_bf16(x),
        }
    }

    #[test]
    fn widening_matches_crate_half_on_every_pattern() {
        let src = every_half();
        for half in HALVES {
            let want: Vec<u32> = src.iter().map(|&h| widened(half, h).to_bits()).collect();
            for path in paths() {
                for w in windows(src.len()) {
                    let mut dst = vec![f32::from_bits(0xdead_beef); w.len()];
                    // SAFETY: the path runs here; the buffers hold the window.
                    unsafe { widen_on(path, half, src[w.clone()].as_ptr(), dst.as_mut_ptr(), w.len()) };
                    let got: Vec<u32> = dst.iter().map(|x| x.to_bits()).collect();
                    same_bits(&format!("{path:?} widen {half:?}"), &src[w.clone()], &got, &want[w]);
                }
            }
        }
    }

    #[test]
    fn narrowing_matches_crate_half_around_every_decision() {
        let bits = float_bits();
        let src: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        for half in HALVES {
            let want: Vec<u16> = src.iter().map(|&x| narrowed(half, x)).collect();
            for path in paths() {
                for w in windows(src.len()) {
                    let mut dst = vec![0xdead; w.len()];
                    // SAFETY: the path runs here; the buffers hold the window.
                    unsafe { narrow_on(path, half, src[w.clone()].as_ptr(), dst.as_mut_ptr(), w.len()) };
                    same_bits(&format!("{path:?} narrow {half:?}"), &bits[w.clone()], &dst, &want[w]);
                }
            }
        }
    }

    #[test]
    fn rounding_matches_crate_half_around_every_decision_in_place_or_not() {
        let bits = float_bits();
        let src: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        for half in HALVES {
            let want: Vec<u32> = src.iter().map(|&x| rounded(half, x).to_bits()).collect();
            for path in paths() {
                for w in windows(src.len()) {
                    let mut apart = vec![f32::from_bits(0xdead_beef); w.len()];
                    let mut in_place = src[w.clone()].to_vec();
                    let p = in_place.as_mut_ptr();
                    // SAFETY: the path runs here; the buffers hold the
                    // window, and `round_on` allows `dst == src`.
                    unsafe {
                        round_on(path, half, src[w.clone()].as_ptr(), apart.as_mut_ptr(), w.len());
                        round_on(path, half, p, p, w.len());
                    }
                    for (how, dst) in [("round", &apart), ("round in place", &in_place)] {
                        let got: Vec<u32> = dst.iter().map(|x| x.to_bits()).collect();
                        same_bits(&format!("{path:?} {how} {half:?}"), &bits[w.clone()], &got, &want[w.clone()]);
                    }
                }
            }
        }
    }

    #[test]
    fn public_functions_take_the_best_path() {
        let src = [1.0, 0.1, f32::from_bits(0xff81_2345), 65520.0, 1e-40];
        let mut halves = [0; 5];
        narrow(Half::Bf16, &src, &mut halves);
        assert_eq!(halves, src.map(f32_to_bf16_bits));
        narrow(Half::F16, &src, &mut halves);
        assert_eq!(halves, src.map(f32_to_f16_bits));
        let mut floats = [0.0; 2];
        widen(Half::F16, &[0x3c00, 0x7c01], &mut floats);
        assert_eq!(floats.map(f32::to_bits), [0x3f80_0000, 0x7f80_2000]);
        let mut rounded = [0.0; 5];
        round(Half::F16, &src, &mut rounded);
        assert_eq!(rounded.map(f32::to_bits), src.map(|x| round_f16(x).to_bits()));
        let mut buf = src;
        round_in_place(Half::Bf16, &mut buf);
        assert_eq!(buf.map(f32::to_bits), src.map(|x| round_bf16(x).to_bits()));
    }

    #[test]
    fn documented_example() {
        let mut out = [0; 2];
        narrow(Half::Bf16, &[1.0, 0.1], &mut out);
        assert_eq!(out, [0x3f80, 0x3dcd]);
        let mut out = [0.0; 2];
        widen(Half::F16, &[0x3c00, 0x7c01], &mut out);
        assert_eq!((out[0], out[1].to_bits()), (1.0, 0x7f80_2000));
    }

    #[test]
    #[should_panic(expected = "narrowing 2 floats into 1 halves")]
    fn unequal_lengths_panic() {
        narrow(Half::F16, &[1.0, 2.0], &mut [0]);
    }
}
