//! AVX-512 machine code for elementwise [`Spec`]s: sixteen `f32` lanes a
//! step, where Cranelift (whose x86 backend stops at 128-bit vectors) runs
//! four.
//!
//! Contract: [`accepts`] says whether a spec lies in the subset this
//! emitter compiles: `f32` and `bool` values (loaded, computed and stored),
//! the float ops with inline templates (no calls to libm), comparisons,
//! logic, `select`, conversions between the two kinds and `one_hot`, and
//! `f16`/`bf16` loads, stores and roundings (module `half`); no integers,
//! `f64`, `random` or `iota` (those kernels stay on Cranelift). [`assemble`] returns position-independent code with
//! `KernelFn`'s signature and the semantics of `codegen::emit`'s function
//! for the same spec, computed by the same operations in the same order
//! (module `ops`), so both give the same bits (NaN payloads aside). A
//! row's last `inner % 16` elements run the same code under a lane mask:
//! the missing lanes' loads and stores are suppressed. Every load of an
//! index happens before its stores (outputs may share an input's buffer).
//! The caller runs this code only where [`available`] holds.
//!
//! Code shape: System V arguments (`rdi` pointers, `rsi` first row, `rdx`
//! end row, `rcx` inner). Each row's load and output addresses go to the
//! stack frame; the inner loop keeps `c` in `r8`, the expressions' values
//! in `zmm8`..`zmm31` (a value spills to its own frame slot when more are
//! live, the one used last going first), templates' scratch in
//! `zmm0`..`zmm7`, and the tail mask in `k7`.
//!
//! Example: `print(sigmoid(x) * y)` over `f32[4, 1000]` compiles to a
//! function whose inner loop runs 62 full steps of one 512-bit load of
//! each operand, the polynomial `exp`, a division, a multiply and a
//! store, then one masked step for the last 8 elements.

mod exec;
mod half;
mod ops;

pub use exec::place;

use super::width;
use crate::ir::spec::{Expr, Inner, Kind, Spec};
use crate::ir::{BinaryOp, UnaryOp};
use iced_x86::code_asm::*;
use ops::{Asm, R, Z};

/// Larger specs stay on Cranelift (the frame holds a spill slot per value).
const MAX_EXPRS: usize = 1024;
/// The first register that holds values (`zmm0`..`zmm7` are scratch).
const FIRST_VALUE_REGISTER: usize = 8;
/// Lanes per step.
const LANES: usize = 16;

/// Whether this machine runs the code (AVX-512 F, BW, VL, DQ, not turned
/// off by `TFC_NO_AVX512` or `TFC_ISA=portable`; module `simd`).
pub fn available() -> bool {
    crate::backend::cpu::kernels::simd::avx512()
}

/// Whether [`assemble`] compiles `spec` (see the module docs).
pub fn accepts(spec: &Spec) -> bool {
    let value = |k: Kind| matches!(k, Kind::F32 | Kind::Mask);
    // Halves are memory kinds: loaded and stored, computed as `f32`.
    let stored = |k: Kind| value(k) || matches!(k, Kind::F16 | Kind::BF16);
    let expr = |e: &Expr, k: Kind| {
        value(k)
            && match *e {
                Expr::Load(_) | Expr::Select(..) | Expr::OneHot(_) => true,
                Expr::Unary(_, _) if k == Kind::Mask => true,
                Expr::Unary(op, _) => matches!(
                    op,
                    UnaryOp::Neg
                        | UnaryOp::Abs
                        | UnaryOp::Sqrt
                        | UnaryOp::Rsqrt
                        | UnaryOp::Floor
                        | UnaryOp::Ceil
                        | UnaryOp::Round
                        | UnaryOp::Relu
                        | UnaryOp::Sign
                        | UnaryOp::Exp
                        | UnaryOp::Log
                        | UnaryOp::Tanh
                        | UnaryOp::Sigmoid
                ),
                Expr::Binary(op, x, _) if op.is_comparison() => spec.exprs[x].1 == Kind::F32,
                Expr::Binary(op, _, _) if op.is_logical() => true,
                Expr::Binary(op, _, _) => matches!(
                    op,
                    BinaryOp::Add
                        | BinaryOp::Sub
                        | BinaryOp::Mul
                        | BinaryOp::Div
                        | BinaryOp::Maximum
                        | BinaryOp::Minimum
                ),
                Expr::Convert(_, x) => value(spec.exprs[x].1),
                Expr::Round(to, _) => matches!(to, Kind::F16 | Kind::BF16),
                _ => false,
            }
    };
    !spec.scalar_only()
        && spec.exprs.len() <= MAX_EXPRS
        && spec.loads.iter().all(|l| stored(l.kind))
        && spec.stores.iter().all(|&k| stored(k))
        && spec.exprs.iter().all(|(e, k)| expr(e, *k))
}

/// The machine code of `spec`, which [`accepts`] admits.
pub fn assemble(spec: &Spec) -> Result<Vec<u8>, String> {
    emit(spec).map_err(|e| format!("cannot assemble the AVX-512 kernel: {e}"))
}

/// The instructions of `spec`'s code in Intel syntax, one per line with
/// its offset (`tfc build --emit asm`), then a line counting the constant
/// pool's bytes after the final `ret`.
pub fn listing(spec: &Spec) -> Result<String, String> {
    use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter, Mnemonic};
    use std::fmt::Write;
    let code = assemble(spec)?;
    let mut decoder = Decoder::with_ip(64, &code, 0, DecoderOptions::NONE);
    let mut formatter = IntelFormatter::new();
    let (mut out, mut text) = (String::new(), String::new());
    while decoder.can_decode() {
        let instruction = decoder.decode();
        text.clear();
        formatter.format(&instruction, &mut text);
        let _ = writeln!(out, "  {:5x}  {text}", instruction.ip());
        if instruction.mnemonic() == Mnemonic::Ret {
            let pool = code.len() - instruction.next_ip() as usize;
            let _ = writeln!(out, "  ; then {pool} bytes of constants");
            break;
        }
    }
    Ok(out)
}

/// The frame: each row's addresses (loads, then outputs), then one
/// 64-byte spill slot per expression.
struct Frame {
    spill_at: usize,
    size: usize,
}

impl Frame {
    fn of(spec: &Spec) -> Frame {
        let addresses = 8 * (spec.loads.len() + spec.outputs.len());
        let spill_at = addresses.div_ceil(64) * 64;
        Frame { spill_at, size: spill_at + 64 * spec.exprs.len() }
    }

    fn address(i: usize) -> AsmMemoryOperand {
        qword_ptr(rsp + 8 * i as i32)
    }

    fn spill(&self, value: usize) -> AsmMemoryOperand {
        zmmword_ptr(rsp + (self.spill_at + 64 * value) as i32)
    }
}

fn emit(spec: &Spec) -> Result<Vec<u8>, IcedError> {
    let frame = Frame::of(spec);
    let mut asm = Asm::new()?;
    let a = &mut asm.a;
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    a.and(rsp, -64)?;
    a.sub(rsp, frame.size as i32)?;
    a.mov(r11, rdx)?; // the end row (`div` takes rdx)
    let mut row = a.create_label();
    let mut exit = a.create_label();
    let mut steps = a.create_label();
    let mut tail = a.create_label();
    let mut next_row = a.create_label();
    a.set_label(&mut row)?;
    a.cmp(rsi, r11)?;
    a.jae(exit)?;
    row_addresses(a, spec)?;
    a.xor(r8d, r8d)?;
    // Full steps while `c + 16 <= inner`.
    a.set_label(&mut steps)?;
    a.lea(rax, qword_ptr(r8 + LANES as i32))?;
    a.cmp(rax, rcx)?;
    a.ja(tail)?;
    body(&mut asm, spec, &frame, false)?;
    let a = &mut asm.a;
    a.add(r8, LANES as i32)?;
    a.jmp(steps)?;
    // The tail: `k7` = the first `inner - c` lanes.
    a.set_label(&mut tail)?;
    a.cmp(r8, rcx)?;
    a.jae(next_row)?;
    a.mov(rax, rcx)?;
    a.sub(rax, r8)?;
    a.mov(r9, -1i64)?;
    a.bzhi(r9, r9, rax)?;
    a.kmovw(k7, r9d)?;
    body(&mut asm, spec, &frame, true)?;
    let a = &mut asm.a;
    a.set_label(&mut next_row)?;
    a.inc(rsi)?;
    a.jmp(row)?;
    a.set_label(&mut exit)?;
    a.mov(rsp, rbp)?;
    a.pop(rbp)?;
    a.vzeroupper()?;
    a.ret()?;
    asm.finish()
}

/// Row `rsi`'s address of each load and output, into the frame: a load's
/// is its base plus the row's coordinate along each outer dim times that
/// dim's stride; an output's is its base plus the row times its row's
/// bytes.
fn row_addresses(a: &mut CodeAssembler, spec: &Spec) -> R {
    let n_loads = spec.loads.len();
    for l in 0..n_loads {
        a.mov(rax, qword_ptr(rdi + 8 * l as i32))?;
        a.mov(Frame::address(l), rax)?;
    }
    // Add `coordinate * stride * width` of each outer dim, innermost first
    // (the first dim needs no remainder: a row is below the row count).
    let add_strides = |a: &mut CodeAssembler, d: usize, coordinate: AsmRegister64| -> R {
        for (l, load) in spec.loads.iter().enumerate() {
            let stride = load.outer[d] * width(load.kind);
            if stride != 0 {
                a.mov(r9, stride as u64)?;
                a.imul_2(r9, coordinate)?;
                a.add(Frame::address(l), r9)?;
            }
        }
        Ok(())
    };
    if !spec.outer.is_empty() {
        a.mov(rax, rsi)?;
        for d in (1..spec.outer.len()).rev() {
            a.xor(edx, edx)?;
            a.mov(r10, spec.outer[d] as u64)?;
            a.div(r10)?;
            add_strides(a, d, rdx)?;
        }
        add_strides(a, 0, rax)?;
    }
    for (o, &kind) in spec.stores.iter().enumerate() {
        a.mov(rax, rsi)?;
        a.imul_2(rax, rcx)?;
        match width(kind) {
            4 => a.shl(rax, 2)?,
            2 => a.shl(rax, 1)?,
            _ => {}
        }
        a.add(rax, qword_ptr(rdi + 8 * (n_loads + o) as i32))?;
        a.mov(Frame::address(n_loads + o), rax)?;
    }
    Ok(())
}

/// Where each value lives while one step's code is emitted.
struct Registers {
    /// The register holding each value, if any.
    home: Vec<Option<usize>>,
    /// Whether each value has a copy in its spill slot.
    spilled: Vec<bool>,
    /// The value each register holds.
    owner: [Option<usize>; 32],
    /// The last expression that reads each value (`usize::MAX`: an output).
    last_use: Vec<usize>,
}

impl Registers {
    fn new(spec: &Spec) -> Registers {
        let n = spec.exprs.len();
        let mut last_use: Vec<usize> = (0..n).collect();
        for (i, (e, _)) in spec.exprs.iter().enumerate() {
            for x in operands(e) {
                last_use[x] = last_use[x].max(i);
            }
        }
        for &x in &spec.outputs {
            last_use[x] = usize::MAX;
        }
        Registers { home: vec![None; n], spilled: vec![false; n], owner: [None; 32], last_use }
    }

    /// A free value register; when none is, the value read last (not one
    /// of `pinned`) goes to its spill slot.
    fn take(&mut self, a: &mut CodeAssembler, frame: &Frame, pinned: &[usize]) -> Result<usize, IcedError> {
        if let Some(r) = (FIRST_VALUE_REGISTER..32).find(|&r| self.owner[r].is_none()) {
            return Ok(r);
        }
        let (r, victim) = (FIRST_VALUE_REGISTER..32)
            .filter_map(|r| self.owner[r].map(|v| (r, v)))
            .filter(|(_, v)| !pinned.contains(v))
            .max_by_key(|&(r, v)| (self.last_use[v], r))
            .expect("more value registers than operands");
        if !self.spilled[victim] {
            a.vmovups(frame.spill(victim), Z[r])?;
            self.spilled[victim] = true;
        }
        self.home[victim] = None;
        self.owner[r] = None;
        Ok(r)
    }

    /// The register of value `x`, reloaded from its slot if it was spilled.
    fn get(&mut self, a: &mut CodeAssembler, frame: &Frame, x: usize, pinned: &[usize]) -> Result<usize, IcedError> {
        if let Some(r) = self.home[x] {
            return Ok(r);
        }
        let r = self.take(a, frame, pinned)?;
        a.vmovups(Z[r], frame.spill(x))?;
        self.bind(x, r);
        Ok(r)
    }

    fn bind(&mut self, x: usize, r: usize) {
        self.home[x] = Some(r);
        self.owner[r] = Some(x);
    }

    fn release(&mut self, x: usize) {
        if let Some(r) = self.home[x].take() {
            self.owner[r] = None;
        }
    }
}

/// The values expression `e` reads.
fn operands(e: &Expr) -> Vec<usize> {
    match *e {
        Expr::Unary(_, x) | Expr::Convert(_, x) | Expr::OneHot(x) | Expr::Round(_, x) | Expr::ToOddF32(x) => vec![x],
        Expr::Binary(_, x, y) => vec![x, y],
        Expr::Select(m, x, y) => vec![m, x, y],
        Expr::Random { counter, .. } => counter.into_iter().collect(),
        Expr::Load(_) | Expr::Iota { .. } => Vec::new(),
    }
}

/// One step: sixteen elements at inner position `r8` (`masked`: the
/// lanes of `k7`), every expression in order, then the stores.
fn body(asm: &mut Asm, spec: &Spec, frame: &Frame, masked: bool) -> R {
    let mut regs = Registers::new(spec);
    for (i, (expr, kind)) in spec.exprs.iter().enumerate() {
        let reads = operands(expr);
        let mut at = Vec::with_capacity(reads.len());
        for &x in &reads {
            at.push(Z[regs.get(&mut asm.a, frame, x, &reads)?]);
        }
        for &x in &reads {
            if regs.last_use[x] == i {
                regs.release(x);
            }
        }
        let r = regs.take(&mut asm.a, frame, &reads)?;
        let dst = Z[r];
        match *expr {
            Expr::Load(l) => load(asm, spec, l, dst, masked)?,
            Expr::Unary(_, _) if *kind == Kind::Mask => asm.a.vpternlogd(dst, at[0], at[0], 0x55)?,
            Expr::Unary(op, _) => asm.unary(op, dst, at[0])?,
            Expr::Binary(op, _, _) if op.is_comparison() => asm.compare(op, dst, at[0], at[1])?,
            Expr::Binary(BinaryOp::And, _, _) => asm.a.vpandd(dst, at[0], at[1])?,
            Expr::Binary(BinaryOp::Or, _, _) => asm.a.vpord(dst, at[0], at[1])?,
            Expr::Binary(op, _, _) => asm.binary(op, dst, at[0], at[1])?,
            Expr::Select(..) => {
                asm.a.vpmovd2m(k1, at[0])?;
                asm.a.vpblendmd(dst.k1(), at[2], at[1])?;
            }
            Expr::Convert(to, x) => match (spec.exprs[x].1, to) {
                (Kind::Mask, Kind::F32) => {
                    let one = asm.c(1.0);
                    asm.a.vandps(dst, at[0], one)?;
                }
                (Kind::F32, Kind::Mask) => {
                    let zero = asm.c(0.0);
                    asm.a.vcmpps(k1, at[0], zero, ops::cc::NE)?;
                    asm.a.vpmovm2d(dst, k1)?;
                }
                _ => asm.a.vmovaps(dst, at[0])?,
            },
            Expr::OneHot(_) => asm.one_hot(dst, at[0])?,
            Expr::Round(to, _) => asm.round_half(to, dst, at[0])?,
            _ => unreachable!("`accepts` admits no other expression"),
        }
        regs.bind(i, r);
        if regs.last_use[i] <= i {
            regs.release(i);
        }
    }
    let n_loads = spec.loads.len();
    for (o, &x) in spec.outputs.iter().enumerate() {
        let v = Z[regs.get(&mut asm.a, frame, x, &[])?];
        if let kind @ (Kind::F16 | Kind::BF16) = spec.stores[o] {
            asm.half_bits(kind, zmm0, v)?;
            let a = &mut asm.a;
            a.mov(rax, Frame::address(n_loads + o))?;
            match masked {
                false => a.vpmovdw(ymmword_ptr(rax + r8 * 2), zmm0)?,
                true => a.vpmovdw(ymmword_ptr(rax + r8 * 2).k7(), zmm0)?,
            }
            continue;
        }
        let a = &mut asm.a;
        a.mov(rax, Frame::address(n_loads + o))?;
        match (spec.stores[o], masked) {
            (Kind::F32, false) => a.vmovups(zmmword_ptr(rax + r8 * 4), v)?,
            (Kind::F32, true) => a.vmovups(zmmword_ptr(rax + r8 * 4).k7(), v)?,
            // Lanes of -1/0 to bytes of 1/0.
            (_, false) => {
                a.vpsrld(zmm0, v, 31)?;
                a.vpmovdb(xmmword_ptr(rax + r8), zmm0)?;
            }
            (_, true) => {
                a.vpsrld(zmm0, v, 31)?;
                a.vpmovdb(xmmword_ptr(rax + r8).k7(), zmm0)?;
            }
        }
    }
    Ok(())
}

/// Load `l`'s sixteen lanes at `r8` into `dst`.
fn load(asm: &mut Asm, spec: &Spec, l: usize, dst: AsmRegisterZmm, masked: bool) -> R {
    let load = &spec.loads[l];
    let a = &mut asm.a;
    a.mov(rax, Frame::address(l))?;
    if let kind @ (Kind::F16 | Kind::BF16) = load.kind {
        // Two bytes an element, zero-extended into `zmm0`, then widened.
        match (load.inner, masked) {
            (Inner::Splat, _) => {
                a.movzx(r9d, word_ptr(rax))?;
                a.vpbroadcastd(zmm0, r9d)?;
            }
            (Inner::Contig, false) => a.vpmovzxwd(zmm0, ymmword_ptr(rax + r8 * 2))?,
            (Inner::Contig, true) => {
                a.vmovdqu16(ymm0.k7().z(), ymmword_ptr(rax + r8 * 2))?;
                a.vpmovzxwd(zmm0, ymm0)?;
            }
        }
        return asm.widen_half(kind, dst, zmm0);
    }
    let a = &mut asm.a;
    match (load.kind, load.inner, masked) {
        (Kind::F32, Inner::Splat, _) => a.vbroadcastss(dst, dword_ptr(rax)),
        (Kind::F32, Inner::Contig, false) => a.vmovups(dst, zmmword_ptr(rax + r8 * 4)),
        (Kind::F32, Inner::Contig, true) => a.vmovups(dst.k7().z(), zmmword_ptr(rax + r8 * 4)),
        // A bool: bytes, nonzero is true, as all-ones lanes.
        (_, Inner::Splat, _) => {
            a.xor(r9d, r9d)?;
            a.cmp(byte_ptr(rax), 0)?;
            a.setne(r9b)?;
            a.neg(r9d)?;
            a.vpbroadcastd(dst, r9d)
        }
        (_, Inner::Contig, masked) => {
            match masked {
                false => a.vpmovzxbd(zmm0, xmmword_ptr(rax + r8))?,
                true => {
                    a.vmovdqu8(xmm0.k7().z(), xmmword_ptr(rax + r8))?;
                    a.vpmovzxbd(zmm0, xmm0)?;
                }
            }
            a.vptestmd(k1, zmm0, zmm0)?;
            a.vpmovm2d(dst, k1)
        }
    }
}

#[cfg(test)]
mod tests;
