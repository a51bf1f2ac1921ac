//! The CPU backend's native kernels: the loops that are not generated but
//! written by hand (with AVX-512 where the machine has it, module `simd`),
//! each with the interpreter's results — bit for bit where the module says
//! so, else to float rounding — and each tested against it.
//!
//! `gemm` (matrix products through the `gemm` crate), `conv` and
//! `conv_direct` (convolutions: im2col + gemm, and direct AVX-512 kernels
//! with fused post-ops and 2x2 max pool), `pool` (pooling and its
//! gradients), `reduce` (reductions), `transpose` (register-blocked matrix
//! transposes) and `permute` (transposes of any rank), `window` (slices,
//! pads, concatenations), `adam` (Adam's
//! update as one loop), `convert` (`f32` to and from `f16` and `bf16`,
//! bit for bit `crate::half`), `simd` (the shared AVX-512 helpers),
//! `bf16_gemm` (bf16 matrix products summed in f32: portable, `vdpbf16ps`
//! and AMX tiles), `int8_gemm` (int8 quantized matrix products, bit for
//! bit `crate::tensor::quant`: portable and `vpdpbusd`), `half_epilogue`
//! (a bf16 product's rounding, bias, ReLU and masks in one pass) and `isa` (which of
//! those tiers this machine runs, picked once per process or forced with
//! `TFC_ISA`).

/// `$body!(r)` for each row `r` of a 12-row micro-kernel (bf16 and int8
/// products), written out so that its 24 accumulators stay in registers
/// whatever the optimization level: a loop over rows indexes the
/// accumulator array at run time, which keeps it in memory.
macro_rules! each_of_12_rows {
    ($body:ident) => {
        $body!(0);
        $body!(1);
        $body!(2);
        $body!(3);
        $body!(4);
        $body!(5);
        $body!(6);
        $body!(7);
        $body!(8);
        $body!(9);
        $body!(10);
        $body!(11);
    };
}

/// A pointer the workers of one kernel share, each writing its own part
/// and only reading the rest.
pub(super) struct SendPtr<T>(pub *mut T);
// SAFETY: the workers write disjoint parts (each user's contract).
unsafe impl<T> Sync for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Send for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// Elements `from..end` from the pointer on.
    ///
    /// # Safety
    /// They are in bounds, and nothing else touches them while the slice
    /// lives.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice<'a>(&self, from: usize, end: usize) -> &'a mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(from), end - from) }
    }
}

pub(super) mod adam;
pub(super) mod bf16_gemm;
pub(super) mod conv;
pub(super) mod conv_direct;
pub(super) mod convert;
pub(super) mod gemm;
pub(super) mod half_epilogue;
pub(super) mod int8_gemm;
pub mod isa;
pub(super) mod ordered_gemm;
pub(super) mod permute;
pub(super) mod pool;
pub(super) mod reduce;
pub(super) mod simd;
pub(super) mod transpose;
pub(super) mod window;
