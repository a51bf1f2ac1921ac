//! Module `wide`'s code against Cranelift's for the same specs, bit for
//! bit: a spec with more live values than registers (spills), rows with
//! strided and broadcast loads, bool loads and stores. (tests/jit_kernels.rs
//! compares random kernels the same way, and both against the interpreter.)

use super::*;
use crate::backend::cpu::codegen::{Compiler, KernelFn};
use crate::ir::spec::Load;
use crate::ir::NodeId;

fn load(outer: Vec<usize>, inner: Inner, kind: Kind) -> Load {
    Load { node: NodeId::new(0), outer, inner, kind }
}

fn spec(outer: Vec<usize>, inner: usize, loads: Vec<Load>, exprs: Vec<(Expr, Kind)>, outputs: Vec<usize>) -> Spec {
    let stores = outputs.iter().map(|&o| exprs[o].1).collect();
    let output_nodes = outputs.iter().map(|_| NodeId::new(0)).collect();
    Spec { outer, inner, loads, exprs, outputs, output_nodes, stores, fallible: Vec::new() }
}

/// Values with every special case, then a spread of ordinary ones.
fn inputs(n: usize, salt: u32) -> Vec<f32> {
    let special = [0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-40, -1e-40, 90.0, -110.0, 0.625];
    (0..n)
        .map(|i| match i % 23 {
            k if k < special.len() => special[k],
            _ => ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(salt) % 2000) as f32 / 100.0 - 10.0,
        })
        .collect()
}

/// Runs `f` over buffers of the given sizes; the output buffers' bytes.
fn run(f: KernelFn, s: &Spec, ins: &[Vec<u8>], out_bytes: &[usize]) -> Vec<Vec<u8>> {
    let mut outs: Vec<Vec<u8>> = out_bytes.iter().map(|&n| vec![0xa5; n]).collect();
    let mut ptrs: Vec<*mut f32> = ins.iter().map(|b| b.as_ptr() as *mut f32).collect();
    ptrs.extend(outs.iter_mut().map(|b| b.as_mut_ptr().cast::<f32>()));
    // SAFETY: every buffer holds what the spec reads or writes.
    unsafe { f(ptrs.as_ptr(), 0, s.rows(), s.inner) };
    outs
}

/// Compiles `s` both ways, runs both, and compares every output's bytes
/// (f32 NaNs compare as NaN).
fn same_as_cranelift(s: &Spec, ins: &[Vec<u8>]) {
    assert!(accepts(s), "the spec is in the subset");
    if !available() {
        return;
    }
    let mut wide = Compiler::new().expect("the code generator");
    assert!(wide.runs_wide(s));
    let mut cranelift = Compiler::new().expect("the code generator").cranelift_only();
    let out_bytes: Vec<usize> = s.stores.iter().map(|&k| s.numel() * width(k)).collect();
    let a = run(wide.compile(s).unwrap(), s, ins, &out_bytes);
    let b = run(cranelift.compile(s).unwrap(), s, ins, &out_bytes);
    for (o, (a, b)) in a.iter().zip(&b).enumerate() {
        if s.stores[o] == Kind::F32 {
            for (i, (x, y)) in a.chunks(4).zip(b.chunks(4)).enumerate() {
                let (x, y) = (f32::from_le_bytes(x.try_into().unwrap()), f32::from_le_bytes(y.try_into().unwrap()));
                assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "output {o}[{i}]: {x} vs {y}");
            }
        } else {
            assert_eq!(a, b, "{:?} output {o}", s.stores[o]);
        }
    }
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn more_live_values_than_registers_spill_and_reload() {
    use UnaryOp::*;
    let ops = [Neg, Abs, Exp, Tanh, Sigmoid, Relu, Sign, Floor, Ceil, Round, Log, Sqrt, Rsqrt];
    let mut exprs = vec![(Expr::Load(0), Kind::F32)];
    // 40 values computed from x, all live until the sum at the end.
    for i in 0..40 {
        exprs.push((Expr::Unary(ops[i % ops.len()], 0), Kind::F32));
    }
    let mut acc = 1;
    for i in 2..=40 {
        exprs.push((Expr::Binary(BinaryOp::Add, acc, i), Kind::F32));
        acc = exprs.len() - 1;
    }
    let s = spec(vec![3], 37, vec![load(vec![37], Inner::Contig, Kind::F32)], exprs, vec![acc, 3]);
    same_as_cranelift(&s, &[bytes(&inputs(3 * 37, 1))]);
}

#[test]
fn strided_broadcast_and_bool_loads_and_stores() {
    // out[r, c] = select(m[c] & (x[r, c] > b[r]), max(x, b), min(x, y)) over
    // rows of a [2, 3] outer shape, a bool output of the mask too.
    let loads = vec![
        load(vec![3 * 21, 21], Inner::Contig, Kind::F32), // x
        load(vec![3, 1], Inner::Splat, Kind::F32),        // b: one per row
        load(vec![0, 0], Inner::Contig, Kind::Mask),      // m: one row for all
        load(vec![0, 21], Inner::Contig, Kind::F32),      // y: broadcast over dim 0
        load(vec![0, 0], Inner::Splat, Kind::Mask),       // a bool scalar
    ];
    let exprs = vec![
        (Expr::Load(0), Kind::F32),
        (Expr::Load(1), Kind::F32),
        (Expr::Load(2), Kind::Mask),
        (Expr::Binary(BinaryOp::Gt, 0, 1), Kind::Mask),
        (Expr::Binary(BinaryOp::And, 2, 3), Kind::Mask),
        (Expr::Binary(BinaryOp::Maximum, 0, 1), Kind::F32),
        (Expr::Load(3), Kind::F32),
        (Expr::Binary(BinaryOp::Minimum, 0, 6), Kind::F32),
        (Expr::Select(4, 5, 7), Kind::F32),
        (Expr::Load(4), Kind::Mask),
        (Expr::Unary(UnaryOp::Not, 9), Kind::Mask),
        (Expr::Binary(BinaryOp::Or, 4, 10), Kind::Mask),
        (Expr::Convert(Kind::F32, 11), Kind::F32),
        (Expr::OneHot(1), Kind::F32),
        (Expr::Binary(BinaryOp::Mul, 8, 12), Kind::F32),
        (Expr::Binary(BinaryOp::Add, 14, 13), Kind::F32),
    ];
    let s = spec(vec![2, 3], 21, loads, exprs, vec![15, 4]);
    let m: Vec<u8> = (0..21).map(|i| [0, 1, 7][i % 3]).collect();
    let b: Vec<f32> = vec![0.0, 3.0, -1.0, 5.0, 20.0, f32::NAN];
    let ins = [bytes(&inputs(6 * 21, 2)), bytes(&b), m, bytes(&inputs(3 * 21, 3)), vec![1]];
    same_as_cranelift(&s, &ins);
}

#[test]
fn half_loads_roundings_and_stores() {
    // y = round_to(kind, x * s + h) stored as `kind`, `h` a half input, `s`
    // a half scalar, over every f16 bit pattern's f32 value and specials.
    for kind in [Kind::F16, Kind::BF16] {
        let loads = vec![
            load(vec![40], Inner::Contig, Kind::F32),
            load(vec![0], Inner::Splat, kind),
            load(vec![40], Inner::Contig, kind),
        ];
        let exprs = vec![
            (Expr::Load(0), Kind::F32),
            (Expr::Load(1), Kind::F32),
            (Expr::Binary(BinaryOp::Mul, 0, 1), Kind::F32),
            (Expr::Load(2), Kind::F32),
            (Expr::Binary(BinaryOp::Add, 2, 3), Kind::F32),
            (Expr::Round(kind, 4), Kind::F32),
            (Expr::Round(kind, 0), Kind::F32),
        ];
        let mut s = spec(vec![65536 / 40 + 1], 40, loads, exprs, vec![5, 6, 4]);
        s.stores = vec![kind, Kind::F32, kind];
        let n = s.numel();
        let x: Vec<f32> = (0..n).map(|i| crate::half::f16_bits_to_f32(i as u16) * 1.0001).collect();
        let halves: Vec<u8> = (0..n).flat_map(|i| ((i as u32).wrapping_mul(40503) as u16).to_le_bytes()).collect();
        same_as_cranelift(&s, &[bytes(&x), 0x3c01u16.to_le_bytes().to_vec(), halves]);
    }
}

#[test]
fn only_the_subset_is_accepted() {
    let x = || vec![load(vec![], Inner::Contig, Kind::F32)];
    let with = |e: Expr| spec(vec![], 8, x(), vec![(Expr::Load(0), Kind::F32), (e, Kind::F32)], vec![1]);
    assert!(accepts(&with(Expr::Unary(UnaryOp::Tanh, 0))));
    assert!(!accepts(&with(Expr::Unary(UnaryOp::Sin, 0))), "sin calls libm");
    assert!(!accepts(&with(Expr::Binary(BinaryOp::Pow, 0, 0))), "pow calls libm");
    assert!(!accepts(&with(Expr::Iota { stride: 1, size: 8 })));
    let int = spec(vec![], 8, vec![load(vec![], Inner::Contig, Kind::I32)], vec![(Expr::Load(0), Kind::I32)], vec![0]);
    assert!(!accepts(&int), "integers stay on Cranelift");
}
