//! The instruction templates of `f16` and `bf16` values in compiled code:
//! widening their bits to `f32`, rounding an `f32` to the nearest value of
//! the type, and the bits of a value the type represents — integer and
//! bit operations only, for one `f32` or four (`I32X4`) at a time, since
//! Cranelift has no half-precision conversions on x86.
//!
//! Contract: bit for bit what `crate::half` computes (`round_f16`,
//! `round_bf16`, `f16_bits_to_f32`, `f32_to_f16_bits` of a rounded value,
//! `bf16_bits_to_f32`): ties to even, overflow to infinity, subnormal
//! `f16` values exact, NaN made quiet with its top payload bits; tested on
//! every `f16` bit pattern and a dense sweep of `f32`s (`tests/jit_kernels.rs`).
//! Half bits travel zero-extended in `I32` lanes.
//!
//! Example: `e.round_half(Kind::BF16, x)` emits `x`'s bits plus `0x7fff`
//! plus the lowest kept bit, with the low 16 bits cleared.
//!
//! The `f16` subnormal range (below 2^-14) uses one float addition: adding
//! 0.5, whose unit in the last place is 2^-24 (the `f16` subnormal step),
//! rounds to that step with the machine's ties-to-even, and the sum's low
//! bits are the step count.

use super::poly::Emitter;
use crate::ir::spec::Kind;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{InstBuilder, Value};

/// `f32` bits of 2^-14, the smallest normal `f16`.
pub(super) const F16_MIN_NORMAL: i32 = 0x3880_0000;
/// `f32` bits of 65504, the largest finite `f16`.
pub(super) const F16_MAX: i32 = 0x477f_e000;
/// `f32` bits of 0.5 (see the module docs).
pub(super) const HALF: i32 = 0x3f00_0000;
/// The exponent bias difference of `f32` and `f16` (127 - 15).
pub(super) const REBIAS: i32 = 112;

impl Emitter<'_, '_> {
    fn icmp_const(&mut self, cc: IntCC, x: Value, c: i32) -> Value {
        let c = self.i(c);
        self.b.ins().icmp(cc, x, c)
    }

    fn and_const(&mut self, x: Value, c: i32) -> Value {
        let c = self.i(c);
        self.b.ins().band(x, c)
    }

    fn add_const(&mut self, x: Value, c: i32) -> Value {
        let c = self.i(c);
        self.b.ins().iadd(x, c)
    }

    /// The bits NaN lanes round to: quiet, the payload cut to `keep_mask`.
    fn quiet_nan(&mut self, bits: Value, keep_mask: i32) -> Value {
        let quiet = self.i(0x0040_0000);
        let q = self.b.ins().bor(bits, quiet);
        self.and_const(q, keep_mask)
    }

    /// The `f32` nearest `x` that `kind` (`F16` or `BF16`) represents.
    pub fn round_half(&mut self, kind: Kind, x: Value) -> Value {
        let b = self.bits(x);
        let rounded = match kind {
            Kind::BF16 => {
                let lsb = self.b.ins().ushr_imm_u(b, 16);
                let lsb = self.and_const(lsb, 1);
                let r = self.add_const(b, 0x7fff);
                let r = self.b.ins().iadd(r, lsb);
                let r = self.and_const(r, 0xffff_0000_u32 as i32);
                let q = self.quiet_nan(b, 0xffff_0000_u32 as i32);
                let nan = self.fcmp(FloatCC::Unordered, x, x);
                self.pick(nan, q, r)
            }
            _ => {
                let sign = self.and_const(b, i32::MIN);
                let a = self.and_const(b, i32::MAX);
                // Normal results: 13 bits fewer, to nearest even.
                let lsb = self.b.ins().ushr_imm_u(a, 13);
                let lsb = self.and_const(lsb, 1);
                let n = self.add_const(a, 0xfff);
                let n = self.b.ins().iadd(n, lsb);
                let n = self.and_const(n, !0x1fff);
                let over = self.icmp_const(IntCC::SignedGreaterThan, n, F16_MAX);
                let inf = self.i(0x7f80_0000);
                let n = self.pick(over, inf, n);
                // Subnormal results: multiples of 2^-24 (module docs).
                let af = self.float(a);
                let half = self.f(0.5);
                let s = self.b.ins().fadd(af, half);
                let s = self.b.ins().fsub(s, half);
                let s = self.bits(s);
                let tiny = self.icmp_const(IntCC::SignedLessThan, a, F16_MIN_NORMAL);
                let r = self.pick(tiny, s, n);
                let r = self.b.ins().bor(r, sign);
                let q = self.quiet_nan(b, 0xffff_e000_u32 as i32);
                let nan = self.fcmp(FloatCC::Unordered, x, x);
                self.pick(nan, q, r)
            }
        };
        self.float(rounded)
    }

    /// The `f32` value of `kind` bits `h` (zero-extended integer lanes).
    pub fn widen_half(&mut self, kind: Kind, h: Value) -> Value {
        if kind == Kind::BF16 {
            let b = self.b.ins().ishl_imm_u(h, 16);
            return self.float(b);
        }
        let sign = self.and_const(h, 0x8000);
        let sign = self.b.ins().ishl_imm_u(sign, 16);
        let em = self.and_const(h, 0x7fff);
        let o = self.b.ins().ishl_imm_u(em, 13);
        let o = self.add_const(o, REBIAS << 23);
        // Infinity and NaN: the largest exponent again.
        let special = self.icmp_const(IntCC::SignedGreaterThan, em, 0x7bff);
        let moved = self.add_const(o, REBIAS << 23);
        let o = self.pick(special, moved, o);
        // Zero and subnormals: `em` steps of 2^-24, through 0.5 + em·2^-24.
        let t = self.add_const(em, HALF);
        let t = self.float(t);
        let half = self.f(0.5);
        let t = self.b.ins().fsub(t, half);
        let t = self.bits(t);
        let tiny = self.icmp_const(IntCC::SignedLessThan, em, 0x400);
        let o = self.pick(tiny, t, o);
        let o = self.b.ins().bor(o, sign);
        self.float(o)
    }

    /// The `kind` bits (zero-extended integer lanes) of `x`, a value that
    /// `kind` represents (`round_half`'s result).
    pub fn half_bits(&mut self, kind: Kind, x: Value) -> Value {
        let b = self.bits(x);
        if kind == Kind::BF16 {
            return self.b.ins().ushr_imm_u(b, 16);
        }
        let sign = self.b.ins().ushr_imm_u(b, 16);
        let sign = self.and_const(sign, 0x8000);
        let a = self.and_const(b, i32::MAX);
        let top = self.b.ins().ushr_imm_u(a, 13);
        let normal = self.add_const(top, -(REBIAS << 10));
        // Infinity and NaN keep the top payload bits.
        let payload = self.and_const(top, 0x3ff);
        let all_ones = self.i(0x7c00);
        let special = self.b.ins().bor(payload, all_ones);
        let is_special = self.icmp_const(IntCC::SignedGreaterThan, a, 0x7f7f_ffff);
        let h = self.pick(is_special, special, normal);
        // Subnormals: the step count, as the low bits of 0.5 + x.
        let af = self.float(a);
        let half = self.f(0.5);
        let s = self.b.ins().fadd(af, half);
        let s = self.bits(s);
        let s = self.add_const(s, -HALF);
        let tiny = self.icmp_const(IntCC::SignedLessThan, a, F16_MIN_NORMAL);
        let h = self.pick(tiny, s, h);
        self.b.ins().bor(h, sign)
    }
}
