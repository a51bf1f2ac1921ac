//! The `f16` and `bf16` templates of module `wide`, sixteen lanes at a
//! time: the integer and bit operations of module `half` (Cranelift's), in
//! the same order, so the same bits — not the machine's own conversions,
//! which differ on NaN payloads and, for `bf16`, flush subnormals.
//!
//! Contract: as module `half`'s (`crate::half`'s values bit for bit: ties
//! to even, overflow to infinity, exact `f16` subnormals, quiet NaNs with
//! their top payload bits). Half bits travel zero-extended in `i32` lanes.
//! Scratch: `zmm1`..`zmm5` and `k1` (`zmm0` stays free for the caller's
//! loads and stores).
//!
//! Example: `asm.round_half(Kind::BF16, zmm9, zmm8)` rounds the sixteen
//! `f32` lanes of `zmm8` to their nearest `bf16` values, as `f32`s.

use super::ops::{cc, Asm, R};
use crate::ir::spec::Kind;
use iced_x86::code_asm::*;

/// Module `half`'s constants, as the unsigned bits of `i32` lanes.
const F16_MIN_NORMAL: u32 = super::super::half::F16_MIN_NORMAL as u32;
const F16_MAX: u32 = super::super::half::F16_MAX as u32;
const HALF: u32 = super::super::half::HALF as u32;
const REBIAS: u32 = super::super::half::REBIAS as u32;

/// `vpcmpd` predicates (signed).
const LT: i32 = 1;
const GT: i32 = 6;

impl Asm {
    /// `dst` = the 32-bit constant `bits` where `k1`, else `dst`.
    fn int_where_k1(&mut self, dst: AsmRegisterZmm, bits: u32) -> R {
        let m = self.scalar(f32::from_bits(bits));
        self.a.vpbroadcastd(dst.k1(), m)
    }

    /// The `f32` nearest `x` that `kind` (`F16` or `BF16`) represents.
    pub fn round_half(&mut self, kind: Kind, dst: AsmRegisterZmm, x: AsmRegisterZmm) -> R {
        let (t0, t1, t2, t3) = (zmm1, zmm2, zmm3, zmm4);
        if kind == Kind::BF16 {
            self.a.vpsrld(t0, x, 16)?;
            let one = self.bits(1);
            self.a.vpandd(t0, t0, one)?;
            let c = self.bits(0x7fff);
            self.a.vpaddd(t1, x, c)?;
            self.a.vpaddd(t1, t1, t0)?;
            let high = self.bits(0xffff_0000);
            self.a.vpandd(t1, t1, high)?;
            let quiet = self.bits(0x0040_0000);
            self.a.vpord(t0, x, quiet)?;
            let high = self.bits(0xffff_0000);
            self.a.vpandd(t0, t0, high)?;
            self.a.vcmpps(k1, x, x, cc::UNORD)?;
            return self.a.vpblendmd(dst.k1(), t1, t0);
        }
        let sign = self.bits(0x8000_0000);
        self.a.vpandd(t0, x, sign)?;
        let magnitude = self.bits(0x7fff_ffff);
        self.a.vpandd(t1, x, magnitude)?;
        // Normal results: 13 bits fewer, to nearest even.
        self.a.vpsrld(t2, t1, 13)?;
        let one = self.bits(1);
        self.a.vpandd(t2, t2, one)?;
        let c = self.bits(0xfff);
        self.a.vpaddd(t3, t1, c)?;
        self.a.vpaddd(t2, t3, t2)?;
        let keep = self.bits(!0x1fff);
        self.a.vpandd(t2, t2, keep)?;
        let max = self.bits(F16_MAX);
        self.a.vpcmpd(k1, t2, max, GT)?;
        self.int_where_k1(t2, 0x7f80_0000)?;
        // Subnormal results: multiples of 2^-24.
        let half = self.c(0.5);
        self.a.vaddps(t3, t1, half)?;
        let half = self.c(0.5);
        self.a.vsubps(t3, t3, half)?;
        let min = self.bits(F16_MIN_NORMAL);
        self.a.vpcmpd(k1, t1, min, LT)?;
        self.a.vmovdqa32(t2.k1(), t3)?;
        self.a.vpord(t2, t2, t0)?;
        let quiet = self.bits(0x0040_0000);
        self.a.vpord(t3, x, quiet)?;
        let keep = self.bits(0xffff_e000);
        self.a.vpandd(t3, t3, keep)?;
        self.a.vcmpps(k1, x, x, cc::UNORD)?;
        self.a.vpblendmd(dst.k1(), t2, t3)
    }

    /// The `f32` value of `kind` bits `h` (zero-extended `i32` lanes).
    pub fn widen_half(&mut self, kind: Kind, dst: AsmRegisterZmm, h: AsmRegisterZmm) -> R {
        if kind == Kind::BF16 {
            return self.a.vpslld(dst, h, 16);
        }
        let (sign, em, o, t) = (zmm1, zmm2, zmm3, zmm4);
        let m = self.bits(0x8000);
        self.a.vpandd(sign, h, m)?;
        self.a.vpslld(sign, sign, 16)?;
        let m = self.bits(0x7fff);
        self.a.vpandd(em, h, m)?;
        self.a.vpslld(o, em, 13)?;
        let rebias = self.bits(REBIAS << 23);
        self.a.vpaddd(o, o, rebias)?;
        // Infinity and NaN: the largest exponent again.
        let top = self.bits(0x7bff);
        self.a.vpcmpd(k1, em, top, GT)?;
        let rebias = self.bits(REBIAS << 23);
        self.a.vpaddd(o.k1(), o, rebias)?;
        // Zero and subnormals: `em` steps of 2^-24, through 0.5 + em·2^-24.
        let half = self.bits(HALF);
        self.a.vpaddd(t, em, half)?;
        let half = self.c(0.5);
        self.a.vsubps(t, t, half)?;
        let small = self.bits(0x400);
        self.a.vpcmpd(k1, em, small, LT)?;
        self.a.vmovdqa32(o.k1(), t)?;
        self.a.vpord(dst, o, sign)
    }

    /// The `kind` bits (zero-extended `i32` lanes) of `x`, a value `kind`
    /// represents (`round_half`'s result).
    pub fn half_bits(&mut self, kind: Kind, dst: AsmRegisterZmm, x: AsmRegisterZmm) -> R {
        if kind == Kind::BF16 {
            return self.a.vpsrld(dst, x, 16);
        }
        let (sign, a, top, h, t) = (zmm1, zmm2, zmm3, zmm4, zmm5);
        self.a.vpsrld(sign, x, 16)?;
        let m = self.bits(0x8000);
        self.a.vpandd(sign, sign, m)?;
        let m = self.bits(0x7fff_ffff);
        self.a.vpandd(a, x, m)?;
        self.a.vpsrld(top, a, 13)?;
        let rebias = self.bits((REBIAS << 10).wrapping_neg());
        self.a.vpaddd(h, top, rebias)?;
        // Infinity and NaN keep the top payload bits.
        let m = self.bits(0x3ff);
        self.a.vpandd(t, top, m)?;
        let ones = self.bits(0x7c00);
        self.a.vpord(t, t, ones)?;
        let largest = self.bits(0x7f7f_ffff);
        self.a.vpcmpd(k1, a, largest, GT)?;
        self.a.vmovdqa32(h.k1(), t)?;
        // Subnormals: the step count, as the low bits of 0.5 + x.
        let half = self.c(0.5);
        self.a.vaddps(t, a, half)?;
        let half = self.bits(HALF.wrapping_neg());
        self.a.vpaddd(t, t, half)?;
        let min = self.bits(F16_MIN_NORMAL);
        self.a.vpcmpd(k1, a, min, LT)?;
        self.a.vmovdqa32(h.k1(), t)?;
        self.a.vpord(dst, h, sign)
    }
}
