//! The AVX-512 instruction templates of elementwise ops, sixteen `f32`
//! lanes at a time: the same operations, in the same order, as the
//! Cranelift templates of module `poly` (Cephes' `expf`, `logf`, `tanhf`
//! polynomials, each Horner step one fused multiply-add), so the two give
//! the same bits.
//!
//! Contract: a template reads its operands before it writes its
//! destination, which may therefore be one of them; it uses the scratch
//! registers `zmm0`..`zmm7` and `k1`..`k3` freely (values live in `zmm8`
//! and up, the tail mask in `k7`). Masks are all-ones / all-zeros `i32`
//! lanes, as in Cranelift's vector code. Constants are broadcast from a
//! pool placed after the code ([`Asm::finish`]).
//!
//! Example: `asm.exp(zmm9, zmm8)` emits the polynomial `exp` of the
//! sixteen lanes of `zmm8` into `zmm9`.

use super::super::poly::{EXP_MAX, EXP_POLY, EXP_ZERO_BELOW, LN2_HI, LN2_LO, LOG_POLY, TANH_POLY, TANH_SMALL};
use crate::ir::{BinaryOp, UnaryOp};
use iced_x86::code_asm::*;
use std::collections::BTreeMap;

/// `vcmpps` predicates, as Cranelift's `FloatCC` lowers them.
pub(super) mod cc {
    pub const EQ: i32 = 0x00; // ordered, equal
    pub const LT: i32 = 0x01; // ordered, less
    pub const LE: i32 = 0x02; // ordered, less or equal
    pub const UNORD: i32 = 0x03;
    pub const NE: i32 = 0x04; // unordered or not equal
    pub const NLE: i32 = 0x06; // unordered or greater
    pub const NGE: i32 = 0x09; // unordered or less
    pub const GE: i32 = 0x0d; // ordered, greater or equal
    pub const GT: i32 = 0x0e; // ordered, greater
}

/// `vrndscaleps` immediates: the rounding mode, precision exceptions
/// suppressed.
const NEAREST: i32 = 0x08;
const FLOOR: i32 = 0x09;
const CEIL: i32 = 0x0a;

/// The 32 vector registers by number.
pub(super) const Z: [AsmRegisterZmm; 32] = [
    zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13, zmm14, zmm15, zmm16, zmm17,
    zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26, zmm27, zmm28, zmm29, zmm30, zmm31,
];

pub(super) type R = Result<(), IcedError>;

/// The assembler and its constant pool.
pub(super) struct Asm {
    pub a: CodeAssembler,
    /// Each 32-bit constant's label, by its bits.
    consts: BTreeMap<u32, CodeLabel>,
    /// The 16 lane positions `0.0..16.0` (`OneHot`), when used.
    lanes: Option<CodeLabel>,
}

impl Asm {
    pub fn new() -> Result<Asm, IcedError> {
        Ok(Asm { a: CodeAssembler::new(64)?, consts: BTreeMap::new(), lanes: None })
    }

    /// The pool's label of the constant with these bits.
    fn label(&mut self, bits: u32) -> CodeLabel {
        let a = &mut self.a;
        *self.consts.entry(bits).or_insert_with(|| a.create_label())
    }

    /// The constant with these bits, broadcast to every lane (an operand
    /// of an arithmetic instruction).
    pub fn bits(&mut self, bits: u32) -> AsmMemoryOperand {
        let label = self.label(bits);
        dword_bcst(label)
    }

    /// The `f32` constant `x` as one element in memory (`vbroadcastss`'s
    /// source).
    pub(super) fn scalar(&mut self, x: f32) -> AsmMemoryOperand {
        let label = self.label(x.to_bits());
        dword_ptr(label)
    }

    /// The `f32` constant `x`, broadcast.
    pub fn c(&mut self, x: f32) -> AsmMemoryOperand {
        self.bits(x.to_bits())
    }

    /// Ends the function's code with the constant pool; the machine code,
    /// position independent (every reference to the pool is relative).
    pub fn finish(mut self) -> Result<Vec<u8>, IcedError> {
        if let Some(mut label) = self.lanes.take() {
            self.a.zero_bytes()?;
            self.a.set_label(&mut label)?;
            let lanes: Vec<u32> = (0..16).map(|i| (i as f32).to_bits()).collect();
            self.a.dd(&lanes)?;
        }
        for (bits, mut label) in std::mem::take(&mut self.consts) {
            self.a.set_label(&mut label)?;
            self.a.dd(&[bits])?;
        }
        self.a.assemble(0)
    }

    /// `dst = bcst(x)`: every lane the constant `x`.
    fn splat(&mut self, dst: AsmRegisterZmm, x: f32) -> R {
        let m = self.scalar(x);
        self.a.vbroadcastss(dst, m)
    }

    /// `dst = x` where `k1`, else `dst` unchanged.
    fn set_where_k1(&mut self, dst: AsmRegisterZmm, x: f32) -> R {
        let m = self.scalar(x);
        self.a.vbroadcastss(dst.k1(), m)
    }

    /// `acc = p(x)` by Horner's rule, coefficients from the highest degree.
    fn horner(&mut self, acc: AsmRegisterZmm, x: AsmRegisterZmm, coeffs: &[f32]) -> R {
        self.splat(acc, coeffs[0])?;
        for &k in &coeffs[1..] {
            let m = self.c(k);
            self.a.vfmadd213ps(acc, x, m)?;
        }
        Ok(())
    }

    /// Cephes `expf` (module `poly`'s `exp`); scratch `zmm0`..`zmm3`, `k1`,
    /// `k2`.
    pub fn exp(&mut self, dst: AsmRegisterZmm, x: AsmRegisterZmm) -> R {
        const HI: f32 = EXP_MAX;
        let (xc, n, t, p) = (zmm0, zmm1, zmm2, zmm3);
        let lo = self.c(EXP_ZERO_BELOW);
        self.a.vcmpps(k1, x, lo, cc::LT)?; // below
        self.splat(xc, HI)?;
        self.a.vminps(xc, xc, x)?; // NaN in x stays NaN
        self.a.vxorps(xc.k1(), xc, xc)?;
        let log2e = self.c(std::f32::consts::LOG2_E);
        self.a.vmulps(n, xc, log2e)?;
        self.a.vrndscaleps(n, n, NEAREST)?;
        let c1 = self.c(LN2_HI);
        self.a.vmulps(t, n, c1)?;
        self.a.vsubps(xc, xc, t)?;
        let c2 = self.c(LN2_LO);
        self.a.vmulps(t, n, c2)?;
        self.a.vsubps(xc, xc, t)?; // r
        self.a.vmulps(t, xc, xc)?; // z
        self.horner(p, xc, &EXP_POLY)?;
        self.a.vmulps(p, p, t)?;
        self.a.vaddps(p, p, xc)?;
        let one = self.c(1.0);
        self.a.vaddps(p, p, one)?;
        // 2^n in two halves: k1 = n >> 1, k2 = n - k1.
        self.a.vcvttps2dq(n, n)?;
        self.a.vpsrad(t, n, 1)?;
        self.a.vpsubd(n, n, t)?;
        let bias = self.bits(127);
        self.a.vpaddd(t, t, bias)?;
        self.a.vpslld(t, t, 23)?;
        let bias = self.bits(127);
        self.a.vpaddd(n, n, bias)?;
        self.a.vpslld(n, n, 23)?;
        self.a.vmulps(p, p, t)?;
        self.a.vmulps(p, p, n)?;
        let hi = self.c(HI);
        self.a.vcmpps(k2, x, hi, cc::GT)?;
        let inf = self.scalar(f32::INFINITY);
        self.a.vbroadcastss(p.k2(), inf)?;
        self.a.vxorps(p.k1(), p, p)?;
        self.a.vmovaps(dst, p)
    }

    /// Cephes `logf` (module `poly`'s `log`); scratch `zmm0`..`zmm4`, `k1`,
    /// `k2`.
    pub fn log(&mut self, dst: AsmRegisterZmm, x: AsmRegisterZmm) -> R {
        let (e, xn, m, p, t) = (zmm0, zmm1, zmm2, zmm3, zmm4);
        let tiny = self.c(f32::MIN_POSITIVE);
        self.a.vcmpps(k1, x, tiny, cc::LT)?; // subnormal (or below)
        let scale = self.c(8_388_608.0);
        self.a.vmulps(t, x, scale)?;
        self.a.vmovaps(xn, x)?;
        self.a.vmovaps(xn.k1(), t)?;
        self.a.vxorps(m, m, m)?;
        let m23 = self.scalar(-23.0);
        self.a.vbroadcastss(m.k1(), m23)?; // the exponent's adjustment
        self.a.vpsrld(e, xn, 23)?;
        let bias = self.bits(126);
        self.a.vpsubd(e, e, bias)?;
        self.a.vcvtdq2ps(e, e)?;
        self.a.vaddps(e, e, m)?;
        let mant = self.bits(0x007f_ffff);
        self.a.vpandd(m, xn, mant)?;
        let half = self.bits(0x3f00_0000);
        self.a.vpord(m, m, half)?; // in [0.5, 1)
        let sqrthf = self.c(std::f32::consts::FRAC_1_SQRT_2);
        self.a.vcmpps(k2, m, sqrthf, cc::LT)?;
        self.a.vaddps(xn, m, m)?;
        self.a.vmovaps(m.k2(), xn)?;
        let one = self.c(1.0);
        self.a.vsubps(m, m, one)?; // xr
        self.a.vxorps(xn, xn, xn)?;
        let one = self.scalar(1.0);
        self.a.vbroadcastss(xn.k2(), one)?;
        self.a.vsubps(e, e, xn)?;
        self.a.vmulps(xn, m, m)?; // z
        self.horner(p, m, &LOG_POLY)?;
        self.a.vmulps(p, p, m)?;
        self.a.vmulps(p, p, xn)?;
        let c2 = self.c(LN2_LO);
        self.a.vmulps(t, e, c2)?;
        self.a.vaddps(p, p, t)?;
        let h = self.c(-0.5);
        self.a.vmulps(t, xn, h)?;
        self.a.vaddps(p, p, t)?;
        self.a.vaddps(p, m, p)?;
        let c1 = self.c(LN2_HI);
        self.a.vmulps(t, e, c1)?;
        self.a.vaddps(p, p, t)?;
        let inf = self.c(f32::INFINITY);
        self.a.vcmpps(k1, x, inf, cc::EQ)?;
        self.set_where_k1(p, f32::INFINITY)?;
        let zero = self.c(0.0);
        self.a.vcmpps(k1, x, zero, cc::EQ)?;
        self.set_where_k1(p, f32::NEG_INFINITY)?;
        let zero = self.c(0.0);
        self.a.vcmpps(k1, x, zero, cc::NGE)?;
        self.set_where_k1(p, f32::NAN)?;
        self.a.vmovaps(dst, p)
    }

    /// Cephes `tanhf` (module `poly`'s `tanh`); scratch `zmm0`..`zmm7`,
    /// `k1`..`k3`.
    pub fn tanh(&mut self, dst: AsmRegisterZmm, x: AsmRegisterZmm) -> R {
        let (abs_x, big, q, p) = (zmm4, zmm5, zmm6, zmm7);
        let abs = self.bits(0x7fff_ffff);
        self.a.vandps(abs_x, x, abs)?;
        self.a.vaddps(big, abs_x, abs_x)?;
        self.exp(big, big)?;
        let one = self.c(1.0);
        self.a.vaddps(big, big, one)?;
        self.splat(q, 2.0)?;
        self.a.vdivps(q, q, big)?;
        self.splat(big, 1.0)?;
        self.a.vsubps(big, big, q)?;
        let sign = self.bits(0x8000_0000);
        self.a.vxorps(q, big, sign)?;
        let zero = self.c(0.0);
        self.a.vcmpps(k3, x, zero, cc::LT)?;
        self.a.vmovaps(big.k3(), q)?;
        self.a.vmulps(q, x, x)?; // z
        self.horner(p, q, &TANH_POLY)?;
        self.a.vmulps(p, p, q)?;
        self.a.vmulps(p, p, x)?;
        self.a.vaddps(p, p, x)?; // small
        let limit = self.c(TANH_SMALL);
        self.a.vcmpps(k3, abs_x, limit, cc::LT)?;
        self.a.vmovaps(big.k3(), p)?;
        let zero = self.c(0.0);
        self.a.vcmpps(k3, x, zero, cc::EQ)?; // tanh(±0) is ±0
        self.a.vmovaps(big.k3(), x)?;
        self.a.vmovaps(dst, big)
    }

    /// `1 / (1 + e^-x)`; scratch `zmm0`..`zmm5`, `k1`, `k2`.
    pub fn sigmoid(&mut self, dst: AsmRegisterZmm, x: AsmRegisterZmm) -> R {
        let (nx, d) = (zmm4, zmm5);
        let sign = self.bits(0x8000_0000);
        self.a.vxorps(nx, x, sign)?;
        self.exp(d, nx)?;
        self.splat(nx, 1.0)?;
        self.a.vaddps(d, nx, d)?;
        self.a.vdivps(dst, nx, d)
    }

    /// An `f32` unary op (`accepts` admits these).
    pub fn unary(&mut self, op: UnaryOp, dst: AsmRegisterZmm, x: AsmRegisterZmm) -> R {
        match op {
            UnaryOp::Neg => {
                let sign = self.bits(0x8000_0000);
                self.a.vxorps(dst, x, sign)
            }
            UnaryOp::Abs => {
                let abs = self.bits(0x7fff_ffff);
                self.a.vandps(dst, x, abs)
            }
            UnaryOp::Sqrt => self.a.vsqrtps(dst, x),
            UnaryOp::Rsqrt => {
                self.a.vsqrtps(zmm0, x)?;
                self.splat(zmm1, 1.0)?;
                self.a.vdivps(dst, zmm1, zmm0)
            }
            UnaryOp::Floor => self.a.vrndscaleps(dst, x, FLOOR),
            UnaryOp::Ceil => self.a.vrndscaleps(dst, x, CEIL),
            UnaryOp::Round => self.a.vrndscaleps(dst, x, NEAREST),
            UnaryOp::Relu => {
                // x > 0 or NaN keeps x (so -0 becomes +0).
                let zero = self.c(0.0);
                self.a.vcmpps(k1, x, zero, cc::NLE)?;
                self.a.vmovaps(dst.k1().z(), x)
            }
            UnaryOp::Sign => {
                self.a.vcmpps(k1, x, x, cc::UNORD)?;
                self.a.vmovaps(zmm0.k1().z(), x)?;
                let zero = self.c(0.0);
                self.a.vcmpps(k1, x, zero, cc::LT)?;
                self.set_where_k1(zmm0, -1.0)?;
                let zero = self.c(0.0);
                self.a.vcmpps(k1, x, zero, cc::GT)?;
                self.set_where_k1(zmm0, 1.0)?;
                self.a.vmovaps(dst, zmm0)
            }
            UnaryOp::Exp => self.exp(dst, x),
            UnaryOp::Log => self.log(dst, x),
            UnaryOp::Tanh => self.tanh(dst, x),
            UnaryOp::Sigmoid => self.sigmoid(dst, x),
            _ => unreachable!("`accepts` admits only the unaries with templates"),
        }
    }

    /// An `f32` arithmetic binary op (`accepts` admits these).
    pub fn binary(&mut self, op: BinaryOp, dst: AsmRegisterZmm, x: AsmRegisterZmm, y: AsmRegisterZmm) -> R {
        match op {
            BinaryOp::Add => self.a.vaddps(dst, x, y),
            BinaryOp::Sub => self.a.vsubps(dst, x, y),
            BinaryOp::Mul => self.a.vmulps(dst, x, y),
            BinaryOp::Div => self.a.vdivps(dst, x, y),
            // NumPy maximum/minimum: NaN if either is NaN, else the first
            // operand on ties.
            BinaryOp::Maximum | BinaryOp::Minimum => {
                let pick_y = if op == BinaryOp::Maximum { cc::GT } else { cc::LT };
                self.a.vcmpps(k1, y, x, pick_y)?;
                self.a.vblendmps(zmm0.k1(), x, y)?;
                self.a.vcmpps(k1, x, y, cc::UNORD)?;
                self.set_where_k1(zmm0, f32::NAN)?;
                self.a.vmovaps(dst, zmm0)
            }
            _ => unreachable!("`accepts` admits only these arithmetic binaries"),
        }
    }

    /// A comparison of `f32` lanes, as mask lanes.
    pub fn compare(&mut self, op: BinaryOp, dst: AsmRegisterZmm, x: AsmRegisterZmm, y: AsmRegisterZmm) -> R {
        let predicate = match op {
            BinaryOp::Eq => cc::EQ,
            BinaryOp::Ne => cc::NE,
            BinaryOp::Lt => cc::LT,
            BinaryOp::Le => cc::LE,
            BinaryOp::Gt => cc::GT,
            _ => cc::GE,
        };
        self.a.vcmpps(k1, x, y, predicate)?;
        self.a.vpmovm2d(dst, k1)
    }

    /// 1.0 where the label equals the lane's position `c + lane` along the
    /// inner extent (`c` in `r8`), else 0.0.
    pub fn one_hot(&mut self, dst: AsmRegisterZmm, label: AsmRegisterZmm) -> R {
        self.a.vcvtsi2ss(xmm0, xmm0, r8)?;
        self.a.vbroadcastss(zmm0, xmm0)?;
        let a = &mut self.a;
        let lanes = *self.lanes.get_or_insert_with(|| a.create_label());
        self.a.vaddps(zmm0, zmm0, zmmword_ptr(lanes))?;
        self.a.vcmpps(k1, label, zmm0, cc::EQ)?;
        let one = self.scalar(1.0);
        self.a.vbroadcastss(dst.k1().z(), one)
    }
}
