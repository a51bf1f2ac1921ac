//! The instruction templates of `i32`, `i64` and `f64` values and of
//! conversions between expression kinds (`f32`, `f64`, `i32`, `i64`,
//! masks), one lane or four (`I32X4`) at a time (`f64` and `i64`: one,
//! `Spec::scalar_only`).
//!
//! Contract: the interpreter's semantics exactly: integer arithmetic wraps
//! (`i32::MIN.abs()` is `i32::MIN`), comparisons are signed, and a cast
//! `f32 → i32` truncates toward zero and saturates, NaN giving 0 (Rust's
//! `as`; also to `i64`), an integer to a float rounds to nearest even,
//! `i64 → i32` wraps, `bool → number` is 0 or 1
//! and `number → bool` is `x != 0` (NaN is true). Masks are as in `poly`:
//! `i8` 0/1 in scalar code, all-ones/zeros `I32X4` lanes in vector code.
//!
//! Example: `e.int_binary(BinaryOp::Mul, x, y)` emits one `imul` (`pmulld`
//! on four lanes).

use super::fault::int_fallible_code;
use super::poly::{Emitter, Libm};
use crate::ir::spec::{Kind, FLOAT_BINARY, FLOAT_UNARY};
use crate::ir::{BinaryOp, UnaryOp};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};

impl Emitter<'_, '_> {
    pub fn int_unary(&mut self, op: UnaryOp, x: Value) -> Value {
        match op {
            UnaryOp::Neg => self.b.ins().ineg(x),
            UnaryOp::Abs => self.b.ins().iabs(x),
            UnaryOp::Relu => {
                let zero = self.int_zero(x);
                self.b.ins().smax(x, zero)
            }
            // -1, 0 or 1: x clamped to [-1, 1].
            UnaryOp::Sign => {
                let (minus_one, one) = (self.int_const(x, -1), self.int_const(x, 1));
                let low = self.b.ins().smax(x, minus_one);
                self.b.ins().smin(low, one)
            }
            _ => unreachable!("spec admits only the int unaries with templates"),
        }
    }

    pub fn int_binary(&mut self, op: BinaryOp, x: Value, y: Value) -> Value {
        match op {
            BinaryOp::Add => self.b.ins().iadd(x, y),
            BinaryOp::Sub => self.b.ins().isub(x, y),
            BinaryOp::Mul => self.b.ins().imul(x, y),
            BinaryOp::Maximum => self.b.ins().smax(x, y),
            BinaryOp::Minimum => self.b.ins().smin(x, y),
            _ => unreachable!("spec admits only the int binaries with templates"),
        }
    }

    /// Integer `/` or `^` (`spec::INT_FALLIBLE`) on scalars, by the
    /// interpreter's function (module `fault`), which records a failure
    /// of expression `expr` at flat index `index` in the kernel's
    /// `faults` record.
    pub fn int_fallible(
        &mut self,
        op: BinaryOp,
        (x, y): (Value, Value),
        faults: Value,
        expr: usize,
        index: Value,
    ) -> Value {
        let wide = self.b.func.dfg.value_type(x) == types::I64;
        let (a, b) = match wide {
            true => (x, y),
            false => (self.b.ins().sextend(types::I64, x), self.b.ins().sextend(types::I64, y)),
        };
        let code = self.b.ins().iconst(types::I32, i64::from(int_fallible_code(op, wide)));
        let expr = self.b.ins().iconst(types::I32, expr as i64);
        let r = self.call(Libm::IntFallible, &[code, a, b, faults, expr, index]);
        match wide {
            true => r,
            false => self.b.ins().ireduce(types::I32, r),
        }
    }

    /// `x` (an `f64`, `i32` or `i64` scalar of kind `from`) as the `f32`
    /// rounded to odd, by the interpreter's function (`Expr::ToOddF32`).
    pub fn to_odd_f32(&mut self, from: Kind, x: Value) -> Value {
        match from {
            Kind::F64 => self.call(Libm::F64ToOdd, &[x]),
            Kind::I32 => {
                let wide = self.b.ins().sextend(types::I64, x);
                self.call(Libm::IntToOdd, &[wide])
            }
            _ => self.call(Libm::IntToOdd, &[x]),
        }
    }

    /// Zero of `x`'s integer type, in every lane.
    fn int_zero(&mut self, x: Value) -> Value {
        self.int_const(x, 0)
    }

    /// `v` in the integer type of `x` (every lane in vector code).
    fn int_const(&mut self, x: Value, v: i32) -> Value {
        match self.b.func.dfg.value_type(x) {
            types::I64 => self.b.ins().iconst(types::I64, i64::from(v)),
            _ => self.i(v),
        }
    }

    pub fn int_compare(&mut self, op: BinaryOp, x: Value, y: Value) -> Value {
        let cc = match op {
            BinaryOp::Eq => IntCC::Equal,
            BinaryOp::Ne => IntCC::NotEqual,
            BinaryOp::Lt => IntCC::SignedLessThan,
            BinaryOp::Le => IntCC::SignedLessThanOrEqual,
            BinaryOp::Gt => IntCC::SignedGreaterThan,
            _ => IntCC::SignedGreaterThanOrEqual,
        };
        self.b.ins().icmp(cc, x, y)
    }

    /// `x` (of kind `from`) as a value of kind `to` (see the module docs).
    pub fn convert(&mut self, from: Kind, to: Kind, x: Value) -> Value {
        match (from, to) {
            // (`f64` and `i64` code is scalar: `Spec::scalar_only`.)
            (Kind::I64, Kind::I64) | (Kind::F64, Kind::F64) => x,
            (Kind::I64, Kind::I32) => self.b.ins().ireduce(types::I32, x),
            (Kind::I64, Kind::F64) => self.b.ins().fcvt_from_sint(types::F64, x),
            (Kind::I64, Kind::Mask) => self.b.ins().icmp_imm_u(IntCC::NotEqual, x, 0),
            (Kind::I64, _) => self.b.ins().fcvt_from_sint(types::F32, x),
            (Kind::I32, Kind::I64) => self.b.ins().sextend(types::I64, x),
            (Kind::Mask, Kind::I64) => self.b.ins().uextend(types::I64, x),
            (_, Kind::I64) => self.b.ins().fcvt_to_sint_sat(types::I64, x),
            (Kind::F64, Kind::I32) => self.b.ins().fcvt_to_sint_sat(types::I32, x),
            (Kind::F64, Kind::Mask) => {
                let zero = self.b.ins().f64const(0.0);
                self.fcmp(FloatCC::NotEqual, x, zero)
            }
            (Kind::F64, _) => self.b.ins().fdemote(types::F32, x),
            (Kind::I32, Kind::F64) => self.b.ins().fcvt_from_sint(types::F64, x),
            (Kind::Mask, Kind::F64) => {
                let (one, zero) = (self.b.ins().f64const(1.0), self.b.ins().f64const(0.0));
                self.select(x, one, zero)
            }
            (_, Kind::F64) => self.b.ins().fpromote(types::F64, x),
            (Kind::Mask, Kind::I32) => self.mask_to_int(x),
            (Kind::Mask, _) => {
                let (one, zero) = (self.f(1.0), self.f(0.0));
                self.select(x, one, zero)
            }
            (Kind::I32, Kind::Mask) => {
                let zero = self.i(0);
                self.b.ins().icmp(IntCC::NotEqual, x, zero)
            }
            (Kind::I32, _) => {
                let ty = self.fty();
                self.b.ins().fcvt_from_sint(ty, x)
            }
            (_, Kind::Mask) => {
                let zero = self.f(0.0);
                self.fcmp(FloatCC::NotEqual, x, zero)
            }
            (_, Kind::I32) => {
                let ty = self.ity();
                self.b.ins().fcvt_to_sint_sat(ty, x)
            }
            _ => x,
        }
    }

    /// `op` on an `f64`: negation, absolute value and square root inline,
    /// the rest by the interpreter's own function (`poly::f64_unary`).
    pub fn f64_unary(&mut self, op: UnaryOp, x: Value) -> Value {
        match op {
            UnaryOp::Neg => self.b.ins().fneg(x),
            UnaryOp::Abs => self.b.ins().fabs(x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            // (Any other op is NaN: `Spec::analyze` admits none.)
            _ => self.call_op(Libm::F64Unary, FLOAT_UNARY, op, &[x]),
        }
    }

    /// Arithmetic `op` on `f64`s: the four basic operations inline (IEEE,
    /// as the interpreter's), the rest by the interpreter's own function.
    pub fn f64_binary(&mut self, op: BinaryOp, x: Value, y: Value) -> Value {
        match op {
            BinaryOp::Add => self.b.ins().fadd(x, y),
            BinaryOp::Sub => self.b.ins().fsub(x, y),
            BinaryOp::Mul => self.b.ins().fmul(x, y),
            BinaryOp::Div => self.b.ins().fdiv(x, y),
            _ => self.call_op(Libm::F64Binary, FLOAT_BINARY, op, &[x, y]),
        }
    }

    /// 1 where the mask is set, else 0, as `i32` lanes.
    fn mask_to_int(&mut self, m: Value) -> Value {
        if self.vector {
            let one = self.i(1);
            self.b.ins().band(m, one)
        } else {
            self.b.ins().uextend(types::I32, m)
        }
    }
}
