//! The instruction templates of `i32` values and of conversions between
//! expression kinds (`f32`, `i32`, masks), one lane or four (`I32X4`) at
//! a time.
//!
//! Contract: the interpreter's semantics exactly: integer arithmetic wraps
//! (`i32::MIN.abs()` is `i32::MIN`), comparisons are signed, and a cast
//! `f32 → i32` truncates toward zero and saturates, NaN giving 0 (Rust's
//! `as`), `i32 → f32` rounds to nearest even, `bool → number` is 0 or 1
//! and `number → bool` is `x != 0` (NaN is true). Masks are as in `poly`:
//! `i8` 0/1 in scalar code, all-ones/zeros `I32X4` lanes in vector code.
//!
//! Example: `e.int_binary(BinaryOp::Mul, x, y)` emits one `imul` (`pmulld`
//! on four lanes).

use super::poly::Emitter;
use super::spec::Kind;
use crate::ir::{BinaryOp, UnaryOp};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};

impl Emitter<'_, '_> {
    pub fn int_unary(&mut self, op: UnaryOp, x: Value) -> Value {
        match op {
            UnaryOp::Neg => self.b.ins().ineg(x),
            UnaryOp::Abs => self.b.ins().iabs(x),
            UnaryOp::Relu => {
                let zero = self.i(0);
                self.b.ins().smax(x, zero)
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
