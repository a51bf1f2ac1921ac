//! The instruction templates of elementwise ops, for one `f32` or four
//! (`F32X4`) at a time, including the inline polynomial `exp`, `log` and
//! `tanh` (Cephes' single-precision approximations).
//!
//! Contract: every template has the reference interpreter's semantics for
//! all inputs, NaN and infinities included; `relu`, `maximum`, `minimum`,
//! `sign` and `select` are exact (compare + bit select, no branches);
//! `exp`, `log`, `tanh` and `sigmoid` differ from libm by a few units in the
//! last place: relative error below 2e-7 for `exp` and `log` on normal
//! results, below 4e-7 for `tanh` and `sigmoid`, measured over a dense sweep
//! in `tests/jit_kernels.rs` (the polynomials use fused multiply-adds
//! where the machine has them). Subnormal results of `exp` (x < -87.3) are
//! exact to within 2^-149 absolutely.
//!
//! `pow`, `sin` and `cos` are no polynomials: they call [`powf`],
//! [`sinf`], [`cosf`] (Rust's `f32` methods, libm's, exactly what the
//! interpreter computes) once per lane; `log1p`, `expm1`, `erf` and `%`
//! call the interpreter's own function ([`f32_unary`], [`f32_binary`]).
//!
//! Masks (comparison results that stay inside a kernel) are `i8` 0/1 in
//! scalar code and all-ones/all-zeros `I32X4` lanes in vector code.
//!
//! Example: `Emitter::new(b, true).unary(UnaryOp::Exp, x)` emits the
//! `F32X4` polynomial exp of `x`.

use crate::ir::spec::Kind;
use crate::ir::{BinaryOp, UnaryOp};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, Endianness, FuncRef, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

/// `exp`'s argument above which the result is +inf (the largest finite
/// result's log) and below which it is +0 (module docs of `exp`).
pub(super) const EXP_MAX: f32 = 88.722_84;
pub(super) const EXP_ZERO_BELOW: f32 = -104.0;
/// `ln 2` in two parts (Cephes' `C1`, `C2`): `n ln 2` exactly to the
/// precision range reduction needs.
pub(super) const LN2_HI: f32 = 0.693_359_4;
pub(super) const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes `expf`'s polynomial of `e^r` (highest degree first).
pub(super) const EXP_POLY: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
/// Cephes `logf`'s polynomial of `log(1 + x)` (highest degree first).
pub(super) const LOG_POLY: [f32; 9] = [
    7.037_683_6e-2,
    -1.151_461e-1,
    1.167_699_9e-1,
    -1.242_014_1e-1,
    1.424_932_3e-1,
    -1.666_805_8e-1,
    2.000_071_4e-1,
    -2.499_999_4e-1,
    3.333_333e-1,
];
/// Cephes `tanhf`'s odd polynomial below |x| = 0.625 (highest degree first).
pub(super) const TANH_POLY: [f32; 5] = [-5.704_988_6e-3, 2.063_909e-2, -5.373_971_6e-2, 1.333_144_2e-1, -3.333_328e-1];
/// Below this magnitude `tanh` is its polynomial.
pub(super) const TANH_SMALL: f32 = 0.625;

/// `x ^ y` as the interpreter computes it, for compiled kernels to call
/// (the code generator links it as `tfc_powf`).
#[export_name = "tfc_powf"]
pub extern "C" fn powf(x: f32, y: f32) -> f32 {
    x.powf(y)
}

/// `sin x` as the interpreter computes it (linked as `tfc_sinf`).
#[export_name = "tfc_sinf"]
pub extern "C" fn sinf(x: f32) -> f32 {
    x.sin()
}

/// `cos x` as the interpreter computes it (linked as `tfc_cosf`).
#[export_name = "tfc_cosf"]
pub extern "C" fn cosf(x: f32) -> f32 {
    x.cos()
}

/// `f32` unary op number `op` of `spec::FLOAT_UNARY` on `x`, by the
/// interpreter's own function (linked as `tfc_f32_unary`): the ops with no
/// inline template (`log1p`, `expm1`, `erf`).
#[export_name = "tfc_f32_unary"]
pub extern "C" fn f32_unary(op: u32, x: f32) -> f32 {
    let f = crate::ir::spec::FLOAT_UNARY.get(op as usize).and_then(|&u| crate::tensor::f32_unary(u));
    f.map_or(f32::NAN, |f| f(x))
}

/// `f32` binary op number `op` of `spec::FLOAT_BINARY` on `x` and `y`, by
/// the interpreter's own function (linked as `tfc_f32_binary`; `%`).
#[export_name = "tfc_f32_binary"]
pub extern "C" fn f32_binary(op: u32, x: f32, y: f32) -> f32 {
    let f = crate::ir::spec::FLOAT_BINARY.get(op as usize).and_then(|&b| crate::tensor::f32_binary(b));
    f.map_or(f32::NAN, |f| f(x, y))
}

/// `f64` unary op number `op` of `spec::FLOAT_UNARY` on `x`, by the
/// interpreter's own function (linked as `tfc_f64_unary`).
#[export_name = "tfc_f64_unary"]
pub extern "C" fn f64_unary(op: u32, x: f64) -> f64 {
    let f = crate::ir::spec::FLOAT_UNARY.get(op as usize).and_then(|&u| crate::tensor::f64_unary(u));
    f.map_or(f64::NAN, |f| f(x))
}

/// `f64` binary op number `op` of `spec::FLOAT_BINARY` on `x` and `y`, by
/// the interpreter's own function (linked as `tfc_f64_binary`).
#[export_name = "tfc_f64_binary"]
pub extern "C" fn f64_binary(op: u32, x: f64, y: f64) -> f64 {
    let f = crate::ir::spec::FLOAT_BINARY.get(op as usize).and_then(|&b| crate::tensor::f64_binary(b));
    f.map_or(f64::NAN, |f| f(x, y))
}

/// `x` as the `f32` rounded to odd, as the interpreter's cast to a half
/// type narrows it (linked as `tfc_f64_to_f32_odd`).
#[export_name = "tfc_f64_to_f32_odd"]
pub extern "C" fn f64_to_f32_odd(x: f64) -> f32 {
    crate::half::f64_to_f32_odd(x)
}

/// `v` as the `f32` rounded to odd (linked as `tfc_i64_to_f32_odd`).
#[export_name = "tfc_i64_to_f32_odd"]
pub extern "C" fn i64_to_f32_odd(v: i64) -> f32 {
    crate::half::i64_to_f32_odd(v)
}

/// Element `index` of a `random` op's stream as the `f32` its value goes
/// through before it is stored (linked as `tfc_random`): exactly the
/// interpreter's (`tensor::random_at`, then `f32` rounding, or for a half
/// dtype rounding to odd so that the kernel's half rounding is the
/// interpreter's single one). `code` is `random_code`'s.
#[export_name = "tfc_random"]
pub extern "C" fn random(code: u32, seed: u64, counter: f32, index: u64) -> f32 {
    let (dtype, v) = random_value(code, seed, counter, index);
    match dtype {
        crate::ir::DType::F32 => v as f32,
        _ => crate::half::f64_to_f32_odd(v),
    }
}

/// `random` for an `f64` stream (linked as `tfc_random_f64`): the
/// interpreter's value itself.
#[export_name = "tfc_random_f64"]
pub extern "C" fn random_f64(code: u32, seed: u64, counter: f32, index: u64) -> f64 {
    random_value(code, seed, counter, index).1
}

/// The dtype `code` names and element `index` of its stream. With a
/// counter, the seed is derived from `seed` and the counter as
/// `ir::random_seed` does, once per thread and counter value, not per
/// element.
fn random_value(code: u32, seed: u64, counter: f32, index: u64) -> (crate::ir::DType, f64) {
    use crate::ir::{DType, Distribution};
    thread_local! {
        static DERIVED: std::cell::Cell<Option<(u64, u32, u64)>> = const { std::cell::Cell::new(None) };
    }
    let seed = match code & 1 {
        0 => seed,
        _ => DERIVED.with(|last| match last.get() {
            Some((s, c, derived)) if s == seed && c == counter.to_bits() => derived,
            _ => {
                let derived = crate::ir::random_seed(seed, Some(f64::from(counter)));
                last.set(Some((seed, counter.to_bits(), derived)));
                derived
            }
        }),
    };
    let dist = if code & 2 == 0 { Distribution::Uniform } else { Distribution::Normal };
    let dtype = [DType::F32, DType::F16, DType::BF16, DType::F64][(code >> 2).min(3) as usize];
    (dtype, crate::tensor::random_at(dtype, dist, seed, index))
}

/// The `code` argument of `random` for a spec's `Expr::Random`.
pub fn random_code(dtype: crate::ir::DType, dist: crate::ir::Distribution, counter: bool) -> u32 {
    let dtype = match dtype {
        crate::ir::DType::F16 => 1,
        crate::ir::DType::BF16 => 2,
        crate::ir::DType::F64 => 3,
        _ => 0,
    };
    (dtype << 2) | (u32::from(dist == crate::ir::Distribution::Normal) << 1) | u32::from(counter)
}

/// The functions compiled code calls, one lane at a time: the
/// interpreter's own, where no inline template is worth its accuracy
/// analysis (`pow`, `sin`/`cos`, whose range reduction is long, and the
/// transcendental `f64` ops, whose scalar code calls them element by
/// element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Libm {
    Pow,
    Sin,
    Cos,
    /// `log1p`, `expm1`, `erf` and `%` on `f32`s (the op's index first).
    F32Unary,
    F32Binary,
    F64Unary,
    F64Binary,
    Random,
    RandomF64,
    /// Integer `/` and `^`, which can fail (module `fault`).
    IntFallible,
    /// An `f64`, and an integer, as the `f32` rounded to odd (`Expr::ToOddF32`).
    F64ToOdd,
    IntToOdd,
}

impl Libm {
    pub const ALL: [Libm; 12] = [
        Libm::Pow,
        Libm::Sin,
        Libm::Cos,
        Libm::F32Unary,
        Libm::F32Binary,
        Libm::F64Unary,
        Libm::F64Binary,
        Libm::Random,
        Libm::RandomF64,
        Libm::IntFallible,
        Libm::F64ToOdd,
        Libm::IntToOdd,
    ];

    /// The linked symbol, its address, its argument types and its result.
    pub fn symbol(self) -> (&'static str, *const u8, &'static [Type], Type) {
        use types::{F32, F64, I32, I64};
        match self {
            Libm::Pow => ("tfc_powf", powf as *const u8, &[F32, F32], F32),
            Libm::Sin => ("tfc_sinf", sinf as *const u8, &[F32], F32),
            Libm::Cos => ("tfc_cosf", cosf as *const u8, &[F32], F32),
            Libm::F32Unary => ("tfc_f32_unary", f32_unary as *const u8, &[I32, F32], F32),
            Libm::F32Binary => ("tfc_f32_binary", f32_binary as *const u8, &[I32, F32, F32], F32),
            Libm::F64Unary => ("tfc_f64_unary", f64_unary as *const u8, &[I32, F64], F64),
            Libm::F64Binary => ("tfc_f64_binary", f64_binary as *const u8, &[I32, F64, F64], F64),
            Libm::Random => ("tfc_random", random as *const u8, &[I32, I64, F32, I64], F32),
            Libm::RandomF64 => ("tfc_random_f64", random_f64 as *const u8, &[I32, I64, F32, I64], F64),
            Libm::IntFallible => {
                let f = super::fault::int_fallible as *const u8;
                ("tfc_int_fallible", f, &[I32, I64, I64, I64, I32, I64], I64)
            }
            Libm::F64ToOdd => ("tfc_f64_to_f32_odd", f64_to_f32_odd as *const u8, &[F64], F32),
            Libm::IntToOdd => ("tfc_i64_to_f32_odd", i64_to_f32_odd as *const u8, &[I64], F32),
        }
    }
}

/// What the emitted code may use beyond plain instructions.
#[derive(Clone, Copy)]
pub struct Support {
    /// The function's references to the `Libm` functions, in `Libm::ALL`
    /// order.
    pub calls: [FuncRef; Libm::ALL.len()],
    /// Whether the machine has fused multiply-add (polynomials use it).
    pub fma: bool,
}

/// Emits ops at the builder's position, scalar or four lanes wide.
pub struct Emitter<'a, 'b> {
    pub(super) b: &'a mut FunctionBuilder<'b>,
    pub(super) vector: bool,
    support: Support,
}

impl<'a, 'b> Emitter<'a, 'b> {
    pub fn new(b: &'a mut FunctionBuilder<'b>, vector: bool, support: Support) -> Emitter<'a, 'b> {
        Emitter { b, vector, support }
    }

    /// `f(args)` by calling the `Libm` function, once per lane of a vector.
    pub(super) fn call(&mut self, f: Libm, args: &[Value]) -> Value {
        self.call_with(f, &[], args)
    }

    /// `f(code, args)`: the `Libm` function that takes the op's index in
    /// `list` (`spec::FLOAT_UNARY` or `FLOAT_BINARY`) first.
    pub(super) fn call_op<T: PartialEq>(&mut self, f: Libm, list: &[T], op: T, args: &[Value]) -> Value {
        let at = list.iter().position(|o| *o == op).map_or(-1, |i| i as i64);
        let code = self.b.ins().iconst(types::I32, at);
        self.call_with(f, &[code], args)
    }

    /// `f(fixed, args)`, once per lane of the vector `args`; `fixed` are
    /// scalars passed to every call.
    fn call_with(&mut self, f: Libm, fixed: &[Value], args: &[Value]) -> Value {
        let func = self.support.calls[f as usize];
        if !self.vector {
            let all: Vec<Value> = fixed.iter().chain(args).copied().collect();
            let inst = self.b.ins().call(func, &all);
            return self.b.inst_results(inst)[0];
        }
        let mut out = args[0];
        for lane in 0..4u8 {
            let mut lanes: Vec<Value> = fixed.to_vec();
            lanes.extend(args.iter().map(|&a| self.b.ins().extractlane(a, lane)));
            let inst = self.b.ins().call(func, &lanes);
            let r = self.b.inst_results(inst)[0];
            out = self.b.ins().insertlane(out, r, lane);
        }
        out
    }

    pub(super) fn fty(&self) -> Type {
        if self.vector {
            types::F32X4
        } else {
            types::F32
        }
    }

    pub(super) fn ity(&self) -> Type {
        if self.vector {
            types::I32X4
        } else {
            types::I32
        }
    }

    /// The constant `x` in every lane.
    pub fn f(&mut self, x: f32) -> Value {
        let s = self.b.ins().f32const(x);
        if self.vector {
            self.b.ins().splat(types::F32X4, s)
        } else {
            s
        }
    }

    pub(super) fn i(&mut self, x: i32) -> Value {
        let s = self.b.ins().iconst(types::I32, x as i64);
        if self.vector {
            self.b.ins().splat(types::I32X4, s)
        } else {
            s
        }
    }

    pub(super) fn bits(&mut self, x: Value) -> Value {
        let ty = self.ity();
        self.b.ins().bitcast(ty, MemFlagsData::new().with_endianness(Endianness::Little), x)
    }

    pub(super) fn float(&mut self, x: Value) -> Value {
        let ty = self.fty();
        self.b.ins().bitcast(ty, MemFlagsData::new().with_endianness(Endianness::Little), x)
    }

    /// The inner positions `c` (`c, c+1, c+2, c+3` in a vector) as `f32`.
    /// Random values at flat indices `index..` (one per lane) by calling
    /// `random` once per lane (`random_f64` for `f64` values, in scalar
    /// code); `counter` is an `f32` (splat) expression.
    pub fn random(&mut self, code: u32, seed: u64, counter: Option<Value>, index: Value, wide: bool) -> Value {
        let func = self.support.calls[if wide { Libm::RandomF64 } else { Libm::Random } as usize];
        let code = self.b.ins().iconst(types::I32, i64::from(code));
        let seed = self.b.ins().iconst(types::I64, seed as i64);
        let zero = self.b.ins().f32const(0.0);
        self.lane_by_lane(types::F32X4, index, |e, lane, at| {
            let c = match counter {
                Some(c) if e.vector => e.b.ins().extractlane(c, lane),
                Some(c) => c,
                None => zero,
            };
            let inst = e.b.ins().call(func, &[code, seed, c, at]);
            e.b.inst_results(inst)[0]
        })
    }

    /// `iota` at flat indices `index..` (one per lane): `i / stride % size`
    /// as lanes of `kind`: `i32`, `f32` (exact below 2^24) or, in scalar
    /// code, `i64`.
    pub fn iota(&mut self, stride: usize, size: usize, kind: Kind, index: Value) -> Value {
        let ty = if kind == Kind::I32 { types::I32X4 } else { types::F32X4 };
        self.lane_by_lane(ty, index, |e, _, at| {
            let q = e.b.ins().udiv_imm_u(at, stride as i64);
            let coordinate = e.b.ins().urem_imm_u(q, size as i64);
            match kind {
                Kind::I32 => e.b.ins().ireduce(types::I32, coordinate),
                Kind::I64 => coordinate,
                _ => e.b.ins().fcvt_from_uint(types::F32, coordinate),
            }
        })
    }

    /// One scalar `lane(emitter, lane, index + lane)` per lane, gathered
    /// into a `vector_ty` vector in vector code (the scalar in scalar code).
    fn lane_by_lane(
        &mut self,
        vector_ty: Type,
        index: Value,
        mut lane: impl FnMut(&mut Self, u8, Value) -> Value,
    ) -> Value {
        let first = lane(self, 0, index);
        if !self.vector {
            return first;
        }
        let mut out = self.b.ins().splat(vector_ty, first);
        for l in 1..4u8 {
            let at = self.b.ins().iadd_imm_u(index, i64::from(l));
            let v = lane(self, l, at);
            out = self.b.ins().insertlane(out, v, l);
        }
        out
    }

    pub fn position(&mut self, c: Value) -> Value {
        let s = self.b.ins().fcvt_from_uint(types::F32, c);
        if !self.vector {
            return s;
        }
        let lanes: Vec<u8> = [0.0f32, 1.0, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let handle = self.b.func.dfg.constants.insert(lanes.into());
        let offsets = self.b.ins().vconst(types::F32X4, handle);
        let base = self.b.ins().splat(types::F32X4, s);
        self.b.ins().fadd(base, offsets)
    }

    pub fn fcmp(&mut self, cc: FloatCC, x: Value, y: Value) -> Value {
        self.b.ins().fcmp(cc, x, y)
    }

    /// `x` where `mask`, else `y`.
    pub fn select(&mut self, mask: Value, x: Value, y: Value) -> Value {
        if self.vector {
            let (xi, yi) = (self.bits(x), self.bits(y));
            let r = self.b.ins().bitselect(mask, xi, yi);
            self.float(r)
        } else {
            self.b.ins().select(mask, x, y)
        }
    }

    /// `a` where `mask`, else `b`, on integer lanes.
    pub(super) fn pick(&mut self, mask: Value, a: Value, b: Value) -> Value {
        if self.vector {
            self.b.ins().bitselect(mask, a, b)
        } else {
            self.b.ins().select(mask, a, b)
        }
    }

    pub fn mask_not(&mut self, m: Value) -> Value {
        if self.vector {
            self.b.ins().bnot(m)
        } else {
            self.b.ins().bxor_imm_u(m, 1)
        }
    }

    pub fn logical(&mut self, op: BinaryOp, x: Value, y: Value) -> Value {
        match op {
            BinaryOp::And => self.b.ins().band(x, y),
            _ => self.b.ins().bor(x, y),
        }
    }

    pub fn compare(&mut self, op: BinaryOp, x: Value, y: Value) -> Value {
        let cc = match op {
            BinaryOp::Eq => FloatCC::Equal,
            BinaryOp::Ne => FloatCC::NotEqual,
            BinaryOp::Lt => FloatCC::LessThan,
            BinaryOp::Le => FloatCC::LessThanOrEqual,
            BinaryOp::Gt => FloatCC::GreaterThan,
            _ => FloatCC::GreaterThanOrEqual,
        };
        self.fcmp(cc, x, y)
    }

    pub fn binary(&mut self, op: BinaryOp, x: Value, y: Value) -> Value {
        match op {
            BinaryOp::Add => self.b.ins().fadd(x, y),
            BinaryOp::Sub => self.b.ins().fsub(x, y),
            BinaryOp::Mul => self.b.ins().fmul(x, y),
            BinaryOp::Div => self.b.ins().fdiv(x, y),
            // NumPy maximum/minimum: NaN if either is NaN, else the first
            // operand on ties (what the interpreter does for ±0).
            BinaryOp::Maximum | BinaryOp::Minimum => {
                let cc = if op == BinaryOp::Maximum { FloatCC::GreaterThan } else { FloatCC::LessThan };
                let pick_y = self.fcmp(cc, y, x);
                let r = self.select(pick_y, y, x);
                let nan = self.fcmp(FloatCC::Unordered, x, y);
                let q = self.f(f32::NAN);
                self.select(nan, q, r)
            }
            BinaryOp::Pow => self.call(Libm::Pow, &[x, y]),
            BinaryOp::Mod => self.call_op(Libm::F32Binary, crate::ir::spec::FLOAT_BINARY, op, &[x, y]),
            _ => unreachable!("spec admits only arithmetic float binaries here"),
        }
    }

    pub fn unary(&mut self, op: UnaryOp, x: Value) -> Value {
        match op {
            UnaryOp::Neg => self.b.ins().fneg(x),
            UnaryOp::Abs => self.b.ins().fabs(x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.f(1.0);
                self.b.ins().fdiv(one, s)
            }
            UnaryOp::Floor => self.b.ins().floor(x),
            UnaryOp::Ceil => self.b.ins().ceil(x),
            // Cranelift's `nearest` rounds halves to even, as NumPy does.
            UnaryOp::Round => self.b.ins().nearest(x),
            UnaryOp::Log1p | UnaryOp::Expm1 | UnaryOp::Erf => {
                self.call_op(Libm::F32Unary, crate::ir::spec::FLOAT_UNARY, op, &[x])
            }
            UnaryOp::Relu => {
                // x > 0 or NaN keeps x (so -0 becomes +0).
                let zero = self.f(0.0);
                let keep = self.fcmp(FloatCC::UnorderedOrGreaterThan, x, zero);
                self.select(keep, x, zero)
            }
            UnaryOp::Sign => {
                let (zero, one, minus) = (self.f(0.0), self.f(1.0), self.f(-1.0));
                let nan = self.fcmp(FloatCC::Unordered, x, x);
                let r = self.select(nan, x, zero);
                let neg = self.fcmp(FloatCC::LessThan, x, zero);
                let r = self.select(neg, minus, r);
                let pos = self.fcmp(FloatCC::GreaterThan, x, zero);
                self.select(pos, one, r)
            }
            UnaryOp::Sin => self.call(Libm::Sin, &[x]),
            UnaryOp::Cos => self.call(Libm::Cos, &[x]),
            UnaryOp::Exp => self.exp(x),
            UnaryOp::Log => self.log(x),
            UnaryOp::Tanh => self.tanh(x),
            UnaryOp::Sigmoid => {
                let nx = self.b.ins().fneg(x);
                let e = self.exp(nx);
                let one = self.f(1.0);
                let d = self.b.ins().fadd(one, e);
                self.b.ins().fdiv(one, d)
            }
            _ => unreachable!("spec admits only the float unaries with templates"),
        }
    }

    /// `p(x)` by Horner's rule, coefficients from the highest degree, each
    /// step one fused multiply-add where the machine has it (one rounding
    /// instead of two: the same or a closer result, in half the
    /// instructions).
    fn horner(&mut self, x: Value, coeffs: &[f32]) -> Value {
        let mut acc = self.f(coeffs[0]);
        for &c in &coeffs[1..] {
            let k = self.f(c);
            acc = match self.support.fma {
                true => self.b.ins().fma(acc, x, k),
                false => {
                    let t = self.b.ins().fmul(acc, x);
                    self.b.ins().fadd(t, k)
                }
            };
        }
        acc
    }

    /// `2^k` for integer lanes `k` in [-126, 127].
    fn pow2(&mut self, k: Value) -> Value {
        let bias = self.i(127);
        let e = self.b.ins().iadd(k, bias);
        let e = self.b.ins().ishl_imm_u(e, 23);
        self.float(e)
    }

    /// Cephes `expf`: `x = n ln2 + r`, `e^r` by a degree-6 polynomial, the
    /// scale `2^n` applied in two halves so subnormal results stay right.
    pub fn exp(&mut self, x: Value) -> Value {
        let (hi, lo) = (self.f(EXP_MAX), self.f(EXP_ZERO_BELOW));
        // Below -104 the result is +0 (exp(-104) is under half the least
        // subnormal). Such lanes compute exp(0) instead and are replaced by
        // the zero at the end: computing exp(-104) itself would make
        // subnormal intermediates, which cost Intel cores a microcode
        // assist each (a causal mask's -1e9 scores made a softmax's exp
        // 5x slower). The results are the same bits either way.
        let zero = self.f(0.0);
        let below = self.fcmp(FloatCC::LessThan, x, lo);
        let xc = self.b.ins().fmin(x, hi);
        let xc = self.select(below, zero, xc);
        let log2e = self.f(std::f32::consts::LOG2_E);
        let t = self.b.ins().fmul(xc, log2e);
        let n = self.b.ins().nearest(t);
        let (c1, c2) = (self.f(LN2_HI), self.f(LN2_LO));
        let a = self.b.ins().fmul(n, c1);
        let r = self.b.ins().fsub(xc, a);
        let a = self.b.ins().fmul(n, c2);
        let r = self.b.ins().fsub(r, a);
        let z = self.b.ins().fmul(r, r);
        let p = self.horner(r, &EXP_POLY);
        let p = self.b.ins().fmul(p, z);
        let p = self.b.ins().fadd(p, r);
        let one = self.f(1.0);
        let p = self.b.ins().fadd(p, one);
        let ity = self.ity();
        let k = self.b.ins().fcvt_to_sint_sat(ity, n);
        let k1 = self.b.ins().sshr_imm_u(k, 1);
        let k2 = self.b.ins().isub(k, k1);
        let s1 = self.pow2(k1);
        let s2 = self.pow2(k2);
        let y = self.b.ins().fmul(p, s1);
        let y = self.b.ins().fmul(y, s2);
        // Above the largest finite result: +inf (NaN stays NaN: the compare is false).
        let inf = self.f(f32::INFINITY);
        let over = self.fcmp(FloatCC::GreaterThan, x, hi);
        let y = self.select(over, inf, y);
        self.select(below, zero, y)
    }

    /// Cephes `logf`: `x = m 2^e` with `m` in [√½, √2), `log(m)` by a
    /// degree-9 polynomial in `m - 1`.
    pub fn log(&mut self, x: Value) -> Value {
        // Subnormals are scaled into the normal range first.
        let tiny = self.f(f32::MIN_POSITIVE);
        let sub = self.fcmp(FloatCC::LessThan, x, tiny);
        let scale = self.f(8_388_608.0);
        let xs = self.b.ins().fmul(x, scale);
        let xn = self.select(sub, xs, x);
        let (m23, z0) = (self.f(-23.0), self.f(0.0));
        let e_adj = self.select(sub, m23, z0);
        let bits = self.bits(xn);
        let exp_bits = self.b.ins().ushr_imm_u(bits, 23);
        let bias = self.i(126);
        let e = self.b.ins().isub(exp_bits, bias);
        let fty = self.fty();
        let e = self.b.ins().fcvt_from_sint(fty, e);
        let e = self.b.ins().fadd(e, e_adj);
        let mant_mask = self.i(0x007f_ffff);
        let half_bits = self.i(0x3f00_0000);
        let mb = self.b.ins().band(bits, mant_mask);
        let mb = self.b.ins().bor(mb, half_bits);
        let m = self.float(mb); // in [0.5, 1)
        let sqrthf = self.f(std::f32::consts::FRAC_1_SQRT_2);
        let small = self.fcmp(FloatCC::LessThan, m, sqrthf);
        let m2 = self.b.ins().fadd(m, m);
        let mm = self.select(small, m2, m);
        let one = self.f(1.0);
        let xr = self.b.ins().fsub(mm, one);
        let e_dec = self.select(small, one, z0);
        let e = self.b.ins().fsub(e, e_dec);
        let z = self.b.ins().fmul(xr, xr);
        let p = self.horner(xr, &LOG_POLY);
        let y = self.b.ins().fmul(p, xr);
        let y = self.b.ins().fmul(y, z);
        let c2 = self.f(LN2_LO);
        let t = self.b.ins().fmul(e, c2);
        let y = self.b.ins().fadd(y, t);
        let h = self.f(-0.5);
        let t = self.b.ins().fmul(z, h);
        let y = self.b.ins().fadd(y, t);
        let r = self.b.ins().fadd(xr, y);
        let c1 = self.f(LN2_HI);
        let t = self.b.ins().fmul(e, c1);
        let r = self.b.ins().fadd(r, t);
        // Special values: log(+inf) = +inf, log(0) = -inf, log(x<0) = NaN, NaN stays NaN.
        let inf = self.f(f32::INFINITY);
        let is_inf = self.fcmp(FloatCC::Equal, x, inf);
        let r = self.select(is_inf, inf, r);
        let ninf = self.f(f32::NEG_INFINITY);
        let is_zero = self.fcmp(FloatCC::Equal, x, z0);
        let r = self.select(is_zero, ninf, r);
        let nan = self.f(f32::NAN);
        let bad = self.fcmp(FloatCC::UnorderedOrLessThan, x, z0);
        self.select(bad, nan, r)
    }

    /// Cephes `tanhf`: an odd polynomial below |x| = 0.625, else
    /// `1 - 2 / (e^{2|x|} + 1)` with the sign of `x`; `±0` stays `±0`.
    pub fn tanh(&mut self, x: Value) -> Value {
        let ax = self.b.ins().fabs(x);
        let two_ax = self.b.ins().fadd(ax, ax);
        let e = self.exp(two_ax);
        let one = self.f(1.0);
        let d = self.b.ins().fadd(e, one);
        let two = self.f(2.0);
        let q = self.b.ins().fdiv(two, d);
        let big = self.b.ins().fsub(one, q);
        let neg_big = self.b.ins().fneg(big);
        let zero = self.f(0.0);
        let negative = self.fcmp(FloatCC::LessThan, x, zero);
        let big = self.select(negative, neg_big, big);
        let z = self.b.ins().fmul(x, x);
        let p = self.horner(z, &TANH_POLY);
        let p = self.b.ins().fmul(p, z);
        let p = self.b.ins().fmul(p, x);
        let small = self.b.ins().fadd(p, x);
        let limit = self.f(TANH_SMALL);
        let is_small = self.fcmp(FloatCC::LessThan, ax, limit);
        let r = self.select(is_small, small, big);
        // `x + p` with `p = +0` turns `-0` into `+0`; tanh(±0) is ±0 (a
        // division by it must give the infinity of the right sign).
        let is_zero = self.fcmp(FloatCC::Equal, x, zero);
        self.select(is_zero, x, r)
    }
}
