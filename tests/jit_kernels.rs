//! The JIT's generated elementwise code against the reference interpreter:
//! random fused kernels (shapes, broadcasts, every op with a template) and
//! the accuracy of the inline polynomial `exp`, `log`, `tanh`, `sigmoid`.
//!
//! Where the machine has AVX-512, kernels run as module `wide`'s code;
//! the random kernels are also run as Cranelift's, and the two must agree
//! bit for bit (NaN payloads aside).
//!
//! Tolerance: values agree when both are NaN, or when `|jit - interp| <=
//! 1e-5 * (1 + the largest magnitude any node of the kernel reaches)`: the
//! polynomials differ from libm by a few ulps, and a chain of ops can carry
//! that absolute error into a small result (`exp(a) - exp(b)`).

use proptest::prelude::*;
use tfc::backend::cpu::codegen::{Compiler, KernelFn};
use tfc::backend::cpu::with_compiler;
use tfc::diag::Span;
use tfc::ir::infer::infer;
use tfc::ir::spec::Spec;
use tfc::ir::{BinaryOp, DType, Graph, NodeId, Op, TensorType, UnaryOp};
use tfc::tensor::{eval_node, Tensor};

fn add(g: &mut Graph, op: Op, inputs: &[NodeId]) -> NodeId {
    let types: Vec<TensorType> = inputs.iter().map(|&i| g.node(i).ty.clone()).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty = infer(&op, &refs).unwrap_or_else(|e| panic!("ill-typed test kernel: {}", e.message));
    g.add(op, inputs, ty, Span::default())
}

fn slot(g: &mut Graph, i: usize, shape: &[usize]) -> NodeId {
    let ty = TensorType::new(DType::F32, shape.to_vec());
    g.add(Op::Slot { slot: i, ty: ty.clone() }, &[], ty, Span::default())
}

/// Runs the kernel `members -> out` of `g` compiled and on the interpreter;
/// `inputs` bind the slots `0..`.
fn both(
    g: &Graph,
    slots: &[NodeId],
    inputs: &[Vec<f32>],
    members: &[NodeId],
    out: NodeId,
) -> (Vec<f32>, Vec<f32>, f32) {
    let tensors: Vec<Tensor> = slots
        .iter()
        .zip(inputs)
        .map(|(&s, v)| Tensor::from_vec(DType::F32, &g.node(s).ty.shape, v.clone()).unwrap())
        .collect();
    // The interpreter, node by node.
    let mut values: std::collections::HashMap<NodeId, Tensor> = slots.iter().copied().zip(tensors.clone()).collect();
    let mut largest = 0f32;
    for &m in members {
        let args: Vec<&Tensor> = g.inputs(m).iter().map(|i| &values[i]).collect();
        let v = eval_node(&g.node(m).op, &args, &g.node(m).ty).unwrap();
        if v.dtype() == DType::F32 {
            largest =
                v.to_f64_vec().iter().fold(largest, |a, &x| if x.is_finite() { a.max(x.abs() as f32) } else { a });
        }
        values.insert(m, v);
    }
    let expected: Vec<f32> = values[&out].to_f64_vec().iter().map(|&x| x as f32).collect();
    // The JIT, as this machine runs it and as Cranelift's code.
    let spec = Spec::analyze(g, members, &[out]).expect("the kernel compiles");
    let f = with_compiler(|c| c.compile(&spec)).unwrap();
    let result = run_kernel(f, &spec, slots, inputs, expected.len());
    let cranelift = CRANELIFT.with(|c| c.borrow_mut().compile(&spec)).unwrap();
    let reference = run_kernel(cranelift, &spec, slots, inputs, expected.len());
    for (i, (a, b)) in result.iter().zip(&reference).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "element {i}: {a} against Cranelift's {b} in {spec:?}"
        );
    }
    (result, expected, largest)
}

thread_local! {
    static CRANELIFT: std::cell::RefCell<Compiler> =
        std::cell::RefCell::new(Compiler::new().expect("the code generator").cranelift_only());
}

/// `f`, the compiled `spec`, over `inputs` (one per slot): its output.
fn run_kernel(f: KernelFn, spec: &Spec, slots: &[NodeId], inputs: &[Vec<f32>], len: usize) -> Vec<f32> {
    let mut result = vec![f32::from_bits(0x7fc0_1234); len];
    let mut ptrs: Vec<*mut f32> = spec
        .loads
        .iter()
        .map(|l| {
            let k = slots.iter().position(|&s| s == l.node).expect("loads read slots");
            inputs[k].as_ptr() as *mut f32
        })
        .collect();
    ptrs.push(result.as_mut_ptr());
    // SAFETY: every load pointer holds its slot's elements, the output the
    // iteration space's.
    unsafe { f(ptrs.as_ptr(), 0, spec.rows(), spec.inner) };
    result
}

fn agree(jit: &[f32], interp: &[f32], largest: f32) -> Result<(), String> {
    let tol = 1e-5 * (1.0 + largest);
    for (i, (&a, &b)) in jit.iter().zip(interp).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol;
        if !ok {
            return Err(format!("element {i}: jit {a} vs interpreter {b} (tolerance {tol})"));
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Step {
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    SelectCmp(BinaryOp, usize, usize, usize, usize),
    CastRoundTrip(usize),
}

use tfc::ir::spec::{FLOAT_BINARY as BINARY, FLOAT_UNARY as UNARY};
const CMP: &[BinaryOp] = &[BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge];

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..UNARY.len(), any::<usize>()).prop_map(|(u, a)| Step::Unary(UNARY[u], a)),
        (0..BINARY.len(), any::<usize>(), any::<usize>()).prop_map(|(b, x, y)| Step::Binary(BINARY[b], x, y)),
        (0..CMP.len(), any::<usize>(), any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(c, a, b, x, y)| Step::SelectCmp(CMP[c], a, b, x, y)),
        any::<usize>().prop_map(Step::CastRoundTrip),
    ]
}

/// A shape, and for the broadcast operand which dims it keeps (else 1) and
/// how many leading dims it drops.
fn shapes() -> impl Strategy<Value = (Vec<usize>, Vec<bool>, usize)> {
    prop::collection::vec(prop_oneof![3 => 1usize..10, 1 => 14usize..40], 1..4).prop_flat_map(|s| {
        let r = s.len();
        (Just(s), prop::collection::vec(any::<bool>(), r), 0..r)
    })
}

fn value() -> impl Strategy<Value = f32> {
    prop_oneof![8 => -4.0f32..4.0, 1 => Just(0.0f32), 1 => Just(-0.0f32), 1 => Just(f32::NAN), 1 => Just(f32::INFINITY)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_elementwise_kernels_match_the_interpreter(
        (shape, keep, drop) in shapes(),
        steps in prop::collection::vec(step(), 1..7),
        seed_values in prop::collection::vec(value(), 3 * 729),
    ) {
        let mut g = Graph::new();
        let n: usize = shape.iter().product();
        let bshape: Vec<usize> =
            shape.iter().zip(&keep).skip(drop).map(|(&d, &k)| if k { d } else { 1 }).collect();
        let x = slot(&mut g, 0, &shape);
        let y = slot(&mut g, 1, &shape);
        let b = slot(&mut g, 2, &bshape);
        let bn: usize = bshape.iter().product();
        let mut members = Vec::new();
        let bb = add(&mut g, Op::BroadcastTo { shape: shape.clone() }, &[b]);
        members.push(bb);
        let mut pool = vec![x, y, bb];
        for s in &steps {
            let pick = |i: usize| pool[i % pool.len()];
            let node = match *s {
                Step::Unary(u, a) => add(&mut g, Op::Unary(u), &[pick(a)]),
                Step::Binary(op, a, c) => add(&mut g, Op::Binary(op), &[pick(a), pick(c)]),
                Step::SelectCmp(op, a, c, t, f) => {
                    let m = add(&mut g, Op::Binary(op), &[pick(a), pick(c)]);
                    members.push(m);
                    add(&mut g, Op::Select, &[m, pick(t), pick(f)])
                }
                Step::CastRoundTrip(a) => {
                    let m = add(&mut g, Op::Cast(DType::Bool), &[pick(a)]);
                    members.push(m);
                    add(&mut g, Op::Cast(DType::F32), &[m])
                }
            };
            members.push(node);
            pool.push(node);
        }
        let out = *members.last().unwrap();
        // The seed values, repeated where a shape has more than 729 elements.
        let tiled = |from: usize, len: usize| (0..len).map(|i| seed_values[from + i % 729]).collect::<Vec<f32>>();
        let inputs = vec![tiled(0, n), tiled(729, n), tiled(1458, bn)];
        let (jit, interp, largest) = both(&g, &[x, y, b], &inputs, &members, out);
        prop_assert!(agree(&jit, &interp, largest).is_ok(), "{}", agree(&jit, &interp, largest).unwrap_err());
    }
}

/// The largest relative error of the compiled `op` against the
/// interpreter over `xs` (results below `floor` in magnitude are compared
/// absolutely against `floor`).
fn max_rel_error(op: UnaryOp, xs: &[f32], floor: f32) -> f32 {
    let mut g = Graph::new();
    let x = slot(&mut g, 0, &[xs.len()]);
    let y = add(&mut g, Op::Unary(op), &[x]);
    let (jit, interp, _) = both(&g, &[x], &[xs.to_vec()], &[y], y);
    let mut worst = 0f32;
    for ((&a, &b), &x) in jit.iter().zip(&interp).zip(xs) {
        if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{op:?}({x}): jit {a}, libm {b}");
            continue;
        }
        let err = (a - b).abs() / b.abs().max(floor);
        worst = worst.max(err);
    }
    worst
}

fn sweep(lo: f32, hi: f32, n: usize) -> Vec<f32> {
    (0..=n).map(|i| lo + (hi - lo) * i as f32 / n as f32).collect()
}

#[test]
fn polynomial_exp_is_accurate_to_2e_7() {
    let mut xs = sweep(-87.0, 88.7, 200_003);
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 88.8, 89.0, 1e30]);
    let e = max_rel_error(UnaryOp::Exp, &xs, f32::MIN_POSITIVE);
    assert!(e < 2e-7, "exp relative error {e}");
    // Subnormal results: absolutely within a few multiples of the smallest subnormal.
    let tiny = sweep(-104.0, -87.5, 10_001);
    let e = max_rel_error(UnaryOp::Exp, &tiny, 1.0);
    assert!(e <= 4.0 * 1.4e-45, "subnormal exp absolute error {e}");
    // Below -104 the result is exactly +0 (a causal mask's -1e9 scores),
    // computed without subnormal intermediates.
    let mut g = Graph::new();
    let x = slot(&mut g, 0, &[5]);
    let y = add(&mut g, Op::Unary(UnaryOp::Exp), &[x]);
    let (jit, _, _) = both(&g, &[x], &[vec![-104.01, -200.0, -1e9, f32::NEG_INFINITY, -f32::MAX]], &[y], y);
    assert!(jit.iter().all(|v| v.to_bits() == 0), "{jit:?}");
}

#[test]
fn polynomial_log_is_accurate_to_2e_7() {
    // Every 4099th positive float bit pattern, subnormals and special values.
    let mut xs: Vec<f32> = (1u32..0x7f80_0000).step_by(4099).map(f32::from_bits).collect();
    xs.extend([0.0, -0.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0, f32::MIN_POSITIVE, 1e-45]);
    // log is near 0 around 1; relative error there is measured against 1e-7.
    let e = max_rel_error(UnaryOp::Log, &xs, 1e-7);
    assert!(e < 2e-7, "log relative error {e}");
}

#[test]
fn polynomial_tanh_and_sigmoid_are_accurate_to_4e_7() {
    let mut xs = sweep(-12.0, 12.0, 200_001);
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-30, -1e-30, 50.0, -50.0]);
    let e = max_rel_error(UnaryOp::Tanh, &xs, f32::MIN_POSITIVE);
    assert!(e < 4e-7, "tanh relative error {e}");
    // tanh(±0) is ±0: a division by it gives the infinity of that sign.
    let mut g = Graph::new();
    let x = slot(&mut g, 0, &[2]);
    let y = add(&mut g, Op::Unary(UnaryOp::Tanh), &[x]);
    let (jit, _, _) = both(&g, &[x], &[vec![0.0, -0.0]], &[y], y);
    assert_eq!(jit.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), [0.0f32.to_bits(), (-0.0f32).to_bits()]);
    let mut xs = sweep(-30.0, 30.0, 200_001);
    xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -90.0, 90.0]);
    let e = max_rel_error(UnaryOp::Sigmoid, &xs, f32::MIN_POSITIVE);
    assert!(e < 4e-7, "sigmoid relative error {e}");
}

#[test]
fn relu_max_min_and_sign_are_exact_on_special_values() {
    let specials = [0.0f32, -0.0, 1.5, -2.5, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3.0, -0.0, 7.0];
    for op in [UnaryOp::Relu, UnaryOp::Sign, UnaryOp::Abs, UnaryOp::Neg, UnaryOp::Floor] {
        let mut g = Graph::new();
        let x = slot(&mut g, 0, &[specials.len()]);
        let y = add(&mut g, Op::Unary(op), &[x]);
        let (jit, interp, _) = both(&g, &[x], &[specials.to_vec()], &[y], y);
        for (a, b) in jit.iter().zip(&interp) {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{op:?}: jit {a} vs {b}");
        }
    }
    let other: Vec<f32> = specials.iter().rev().copied().collect();
    for op in [BinaryOp::Maximum, BinaryOp::Minimum] {
        let mut g = Graph::new();
        let x = slot(&mut g, 0, &[specials.len()]);
        let y = slot(&mut g, 1, &[specials.len()]);
        let z = add(&mut g, Op::Binary(op), &[x, y]);
        let (jit, interp, _) = both(&g, &[x, y], &[specials.to_vec(), other.clone()], &[z], z);
        for (a, b) in jit.iter().zip(&interp) {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{op:?}: jit {a} vs {b}");
        }
    }
}

#[test]
fn rounding_remainder_and_library_ops_are_bit_exact() {
    // Halves (round to even), signed zeros, tiny and huge values, and the
    // specials; `%` against divisors of both signs, zero and infinity.
    let xs: Vec<f32> = [
        0.5f32,
        1.5,
        2.5,
        -0.5,
        -1.5,
        -2.5,
        0.0,
        -0.0,
        1e-8,
        -3e-30,
        1e30,
        -7.25,
        8388609.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]
    .into_iter()
    .chain((0..48).map(|i| (i as f32 - 24.0) * 0.37))
    .collect();
    let divisors: Vec<f32> =
        xs.iter().enumerate().map(|(i, _)| [2.0f32, -2.0, 0.75, -0.3, 0.0, f32::INFINITY, -1e-3][i % 7]).collect();
    let bits_equal = |a: &f32, b: &f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    for op in [UnaryOp::Ceil, UnaryOp::Round, UnaryOp::Log1p, UnaryOp::Expm1, UnaryOp::Erf] {
        let mut g = Graph::new();
        let x = slot(&mut g, 0, &[xs.len()]);
        let y = add(&mut g, Op::Unary(op), &[x]);
        let (jit, interp, _) = both(&g, &[x], std::slice::from_ref(&xs), &[y], y);
        for (i, (a, b)) in jit.iter().zip(&interp).enumerate() {
            assert!(bits_equal(a, b), "{op:?}({}): jit {a} vs {b}", xs[i]);
        }
    }
    let mut g = Graph::new();
    let x = slot(&mut g, 0, &[xs.len()]);
    let d = slot(&mut g, 1, &[xs.len()]);
    let z = add(&mut g, Op::Binary(BinaryOp::Mod), &[x, d]);
    let (jit, interp, _) = both(&g, &[x, d], &[xs.clone(), divisors.clone()], &[z], z);
    for (i, (a, b)) in jit.iter().zip(&interp).enumerate() {
        assert!(bits_equal(a, b), "{} % {}: jit {a} vs {b}", xs[i], divisors[i]);
    }
    // NumPy's `np.mod` on these float32 pairs: the sign of the divisor,
    // a zero signed like it, NaN for a zero divisor, `x % inf` for x < 0 inf.
    let numpy = [(1, -0.5f32), (2, 0.25), (5, f32::INFINITY), (6, -0.0), (7, 0.0)];
    for (i, want) in numpy {
        assert_eq!(interp[i].to_bits(), want.to_bits(), "{} % {}", xs[i], divisors[i]);
    }
    assert!(interp[4].is_nan(), "x % 0 is NaN");
}

/// The compiled kernel of `members -> out` over one input slot of `n`
/// elements held at `input` (in the slot's storage), writing `out`'s
/// storage to `output`.
fn run_raw<I, O>(g: &Graph, members: &[NodeId], out: NodeId, input: &[I], output: &mut [O]) {
    let spec = Spec::analyze(g, members, &[out]).expect("the kernel compiles");
    assert_eq!(spec.loads.len(), 1, "one load");
    let f = with_compiler(|c| c.compile(&spec)).unwrap();
    let ptrs = [input.as_ptr() as *mut f32, output.as_mut_ptr() as *mut f32];
    // SAFETY: both buffers hold the `n` elements of the iteration space.
    unsafe { f(ptrs.as_ptr(), 0, spec.rows(), spec.inner) };
}

/// `f32`s to test half-precision rounding on: every `f16` value and the
/// midpoints beside it (the ties), a dense sweep of `f32` bit patterns, and
/// the specials.
fn rounding_probes() -> Vec<f32> {
    let mut xs = Vec::new();
    for h in 0..=u16::MAX {
        let v = tfc::half::f16_bits_to_f32(h);
        let b = v.to_bits();
        xs.extend([v, f32::from_bits(b.wrapping_add(0x1000)), f32::from_bits(b.wrapping_add(0x1001))]);
        xs.push(f32::from_bits(b.wrapping_add(0x8000)));
    }
    xs.extend((0..200_000u32).map(|i| f32::from_bits(i.wrapping_mul(21_475))));
    xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, f32::MAX, f32::MIN_POSITIVE, 65504.0, 65520.0]);
    // A whole number of vector lanes plus a scalar tail.
    xs.truncate(xs.len() / 4 * 4 + 3);
    xs
}

/// Compiled `f16`/`bf16` loads, roundings and stores give exactly the bits
/// of `tfc::half` (what the interpreter computes) on every `f16` bit
/// pattern, every tie and a dense sweep of `f32`s: narrowing an `f32`
/// (stored as two bytes), rounding it in a register (read back as an
/// `f32`), and widening every two-byte pattern.
#[test]
fn half_precision_loads_roundings_and_stores_are_bit_exact() {
    use tfc::half::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, round_bf16, round_f16};
    let xs = rounding_probes();
    let n = xs.len();
    for (dtype, to_bits, round) in [
        (DType::F16, f32_to_f16_bits as fn(f32) -> u16, round_f16 as fn(f32) -> f32),
        (DType::BF16, f32_to_bf16_bits, round_bf16),
    ] {
        // Narrowing stores.
        let mut g = Graph::new();
        let x = slot(&mut g, 0, &[n]);
        let h = add(&mut g, Op::Cast(dtype), &[x]);
        let mut stored = vec![0u16; n];
        run_raw(&g, &[h], h, &xs, &mut stored);
        for (i, (&x, &s)) in xs.iter().zip(&stored).enumerate() {
            assert_eq!(s, to_bits(x), "{dtype} store of {x:e} ({:#010x}) at {i}", x.to_bits());
        }
        // Rounding in a register, read back as f32.
        let back = add(&mut g, Op::Cast(DType::F32), &[h]);
        let mut rounded = vec![0f32; n];
        run_raw(&g, &[h, back], back, &xs, &mut rounded);
        for (&x, &r) in xs.iter().zip(&rounded) {
            assert_eq!(r.to_bits(), round(x).to_bits(), "{dtype} rounding of {x:e} ({:#010x})", x.to_bits());
        }
        // Widening loads of every bit pattern (a half-typed slot).
        let mut g = Graph::new();
        let ty = TensorType::new(dtype, vec![1 << 16]);
        let s = g.add(Op::Slot { slot: 0, ty: ty.clone() }, &[], ty, Span::default());
        let wide = add(&mut g, Op::Cast(DType::F32), &[s]);
        let patterns: Vec<u16> = (0..=u16::MAX).collect();
        let mut widened = vec![0f32; 1 << 16];
        run_raw(&g, &[wide], wide, &patterns, &mut widened);
        for (&p, &w) in patterns.iter().zip(&widened) {
            let want = if dtype == DType::F16 { f16_bits_to_f32(p) } else { bf16_bits_to_f32(p) };
            assert_eq!(w.to_bits(), want.to_bits(), "{dtype} widening of {p:#06x}");
        }
    }
}

/// Runs the one-output kernel `members -> out` compiled: `inputs` are the
/// raw storage of slots `0..` (as compiled code reads them), the result
/// comes back as `out`'s storage bytes.
fn run_bytes(g: &Graph, slots: &[NodeId], inputs: &[&[u8]], members: &[NodeId], out: NodeId) -> Vec<u8> {
    let spec = Spec::analyze(g, members, &[out]).expect("the kernel compiles");
    let f = with_compiler(|c| c.compile(&spec)).unwrap();
    let ty = &g.node(out).ty;
    let mut result = vec![0u8; ty.numel() * ty.dtype.size_bytes()];
    let mut ptrs: Vec<*mut f32> = spec
        .loads
        .iter()
        .map(|l| inputs[slots.iter().position(|&s| s == l.node).expect("loads read slots")].as_ptr() as *mut f32)
        .collect();
    ptrs.push(result.as_mut_ptr() as *mut f32);
    // SAFETY: every pointer holds its value's elements in its storage.
    unsafe { f(ptrs.as_ptr(), 0, spec.rows(), spec.inner) };
    result
}

/// The bytes of a tensor as the CPU backend stores it (`bool`: one byte).
fn storage(t: &Tensor) -> Vec<u8> {
    match t.data() {
        tfc::tensor::Data::I32(a) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
        tfc::tensor::Data::F32(a) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
        tfc::tensor::Data::Bool(a) => a.iter().map(|&b| u8::from(b)).collect(),
        _ => panic!("no compiled storage for {}", t.dtype()),
    }
}

/// Compiled `i32` arithmetic, comparisons, selects and the casts between
/// `i32`, `f32` and `bool` give exactly the interpreter's values: wrapping
/// at the extremes, signed comparisons, truncating saturating float → int
/// casts with NaN as 0, and int → float rounding to nearest.
#[test]
fn integer_kernels_and_casts_match_the_interpreter_exactly() {
    let ints: Vec<i32> = [i32::MIN, i32::MAX, 0, -1, 1, 7, -7, 46341, -65536, 16_777_217, -16_777_219]
        .into_iter()
        .chain((0..41).map(|i: i32| i.wrapping_mul(104_729).wrapping_sub(1_000_000)))
        .collect();
    let n = ints.len();
    let other: Vec<i32> = ints.iter().rev().copied().collect();
    let floats: Vec<f32> = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3e9, -3e9, 2.5, -2.5, -0.75, 0.0, 1e-30]
        .into_iter()
        .chain((0..n as i32 - 10).map(|i| i as f32 * 1.37e5 - 2e6))
        .collect();
    let int_t = |v: &[i32]| Tensor::from_vec(DType::I32, &[n], v.to_vec()).unwrap();
    let inputs = [int_t(&ints), int_t(&other), Tensor::from_vec(DType::F32, &[n], floats).unwrap()];
    type Build = Box<dyn Fn(&mut Graph, &[NodeId]) -> Vec<NodeId>>;
    let cases: Vec<(&str, Build)> = vec![
        ("neg", Box::new(|g, s| vec![add(g, Op::Unary(UnaryOp::Neg), &[s[0]])])),
        ("abs", Box::new(|g, s| vec![add(g, Op::Unary(UnaryOp::Abs), &[s[0]])])),
        ("relu", Box::new(|g, s| vec![add(g, Op::Unary(UnaryOp::Relu), &[s[0]])])),
        ("f32 to i32", Box::new(|g, s| vec![add(g, Op::Cast(DType::I32), &[s[2]])])),
        ("i32 to f32", Box::new(|g, s| vec![add(g, Op::Cast(DType::F32), &[s[0]])])),
        (
            "bool to i32",
            Box::new(|g, s| {
                let m = add(g, Op::Cast(DType::Bool), &[s[0]]);
                vec![m, add(g, Op::Cast(DType::I32), &[m])]
            }),
        ),
        (
            "select",
            Box::new(|g, s| {
                let gt = add(g, Op::Binary(BinaryOp::Gt), &[s[0], s[1]]);
                vec![gt, add(g, Op::Select, &[gt, s[1], s[0]])]
            }),
        ),
    ];
    let mut kernels: Vec<(String, Graph, Vec<NodeId>, Vec<NodeId>)> = Vec::new();
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::Minimum]
        .into_iter()
        .chain(CMP.iter().copied())
    {
        let mut g = Graph::new();
        let s = int_slots(&mut g, n);
        let m = vec![add(&mut g, Op::Binary(op), &[s[0], s[1]])];
        kernels.push((format!("{op:?}"), g, s, m));
    }
    for (name, build) in &cases {
        let mut g = Graph::new();
        let s = int_slots(&mut g, n);
        let m = build(&mut g, &s);
        kernels.push((name.to_string(), g, s, m));
    }
    for (name, g, s, members) in kernels {
        let out = *members.last().unwrap();
        let values = interpret(&g, &s, &inputs, &members);
        let raw: Vec<Vec<u8>> = inputs.iter().map(storage).collect();
        let raw: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
        assert_eq!(run_bytes(&g, &s, &raw, &members, out), storage(&values[&out]), "{name}");
    }
}

/// The interpreter's value of every node of `members`, with `inputs` bound
/// to `slots`.
fn interpret(
    g: &Graph,
    slots: &[NodeId],
    inputs: &[Tensor],
    members: &[NodeId],
) -> std::collections::HashMap<NodeId, Tensor> {
    let mut values: std::collections::HashMap<NodeId, Tensor> = slots.iter().copied().zip(inputs.to_vec()).collect();
    for &m in members {
        let args: Vec<&Tensor> = g.inputs(m).iter().map(|i| &values[i]).collect();
        let v = eval_node(&g.node(m).op, &args, &g.node(m).ty).unwrap();
        values.insert(m, v);
    }
    values
}

/// Slots `i32[n]`, `i32[n]`, `f32[n]`.
fn int_slots(g: &mut Graph, n: usize) -> Vec<NodeId> {
    [DType::I32, DType::I32, DType::F32]
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            let ty = TensorType::new(d, vec![n]);
            g.add(Op::Slot { slot: i, ty: ty.clone() }, &[], ty, Span::default())
        })
        .collect()
}

/// Compiled `f64` kernels (one element at a time) give exactly the
/// interpreter's values: every unary and binary float op (the
/// transcendental ones call the interpreter's own functions), comparisons,
/// selects and the casts between `f64`, `f32`, `i32` and `bool`.
#[test]
fn f64_kernels_match_the_interpreter_bit_for_bit() {
    let xs: Vec<f64> = [f64::NAN, f64::INFINITY, -0.0, 0.0, 1e-310, 3e9, -2.5, 0.1, 7.0, -1e300]
        .into_iter()
        .chain((0..23).map(|i| (i as f64 * 0.731).sin() * 40.0))
        .collect();
    let n = xs.len();
    let ys: Vec<f64> = xs.iter().rev().map(|v| v * 0.5 + 0.25).collect();
    let f64_t = |v: &[f64]| Tensor::from_vec(DType::F64, &[n], v.to_vec()).unwrap();
    let inputs = [f64_t(&xs), f64_t(&ys)];
    let slots = |g: &mut Graph| -> Vec<NodeId> {
        (0..2)
            .map(|i| {
                let ty = TensorType::new(DType::F64, vec![n]);
                g.add(Op::Slot { slot: i, ty: ty.clone() }, &[], ty, Span::default())
            })
            .collect()
    };
    let mut kernels: Vec<(String, Graph, Vec<NodeId>, Vec<NodeId>)> = Vec::new();
    let mut kernel = |name: String, build: &dyn Fn(&mut Graph, &[NodeId]) -> Vec<NodeId>| {
        let mut g = Graph::new();
        let s = slots(&mut g);
        let m = build(&mut g, &s);
        kernels.push((name, g, s, m));
    };
    for &u in UNARY {
        kernel(format!("{u:?}"), &|g, s| vec![add(g, Op::Unary(u), &[s[0]])]);
    }
    for &b in BINARY.iter().chain(CMP) {
        kernel(format!("{b:?}"), &|g, s| vec![add(g, Op::Binary(b), &[s[0], s[1]])]);
    }
    for to in [DType::F32, DType::I32, DType::Bool] {
        kernel(format!("cast to {to} and back"), &|g, s| {
            let c = add(g, Op::Cast(to), &[s[0]]);
            vec![c, add(g, Op::Cast(DType::F64), &[c])]
        });
    }
    kernel("select".into(), &|g, s| {
        let lt = add(g, Op::Binary(BinaryOp::Lt), &[s[0], s[1]]);
        vec![lt, add(g, Op::Select, &[lt, s[0], s[1]])]
    });
    for (name, g, s, members) in kernels {
        let out = *members.last().unwrap();
        let values = interpret(&g, &s, &inputs, &members);
        let raw: Vec<Vec<u8>> =
            inputs.iter().map(|t| t.to_f64_vec().iter().flat_map(|v| v.to_le_bytes()).collect()).collect();
        let raw: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
        let got = run_bytes(&g, &s, &raw, &members, out);
        let want = &values[&out];
        if want.dtype() != DType::F64 {
            assert_eq!(got, storage(want), "{name}");
            continue;
        }
        // NaN payloads aside, every bit agrees.
        let got: Vec<f64> = got.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
        let want = want.to_f64_vec();
        let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
        assert!(same && got.len() == want.len(), "{name}: {got:?} vs {want:?}");
    }
}

/// Compiled `iota`, `random_uniform` and `random_normal` give exactly the
/// interpreter's values in every dtype they compile for (random values
/// with and without a counter operand, dropout's step), over vector lanes
/// and the scalar tail, and for any split of the rows (threads).
#[test]
fn creation_kernels_match_the_interpreter_bit_for_bit() {
    use tfc::half::{f32_to_bf16_bits, f32_to_f16_bits};
    use tfc::ir::Distribution;
    let shape = [5usize, 37];
    let n: usize = shape.iter().product();
    let mut cases: Vec<(String, DType, Op, Option<f32>)> = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let ty = TensorType::new(dtype, shape.to_vec());
        for dist in [Distribution::Uniform, Distribution::Normal] {
            for counter in [None, Some(7.0f32)] {
                let op = Op::Random { ty: ty.clone(), dist, seed: 42 };
                cases.push((format!("{dtype} {dist:?} counter {counter:?}"), dtype, op, counter));
            }
        }
    }
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        for axis in 0..2 {
            let op = Op::Iota { ty: TensorType::new(dtype, shape.to_vec()), axis };
            cases.push((format!("{dtype} iota axis {axis}"), dtype, op, None));
        }
    }
    for (name, dtype, op, counter) in cases {
        let mut g = Graph::new();
        let c = slot(&mut g, 0, &[]);
        let operands = if counter.is_some() { vec![c] } else { vec![] };
        let r = g.add(op, &operands, TensorType::new(dtype, shape.to_vec()), Span::default());
        let spec = Spec::analyze(&g, &[r], &[r]).unwrap_or_else(|| panic!("{name} compiles"));
        let f = with_compiler(|comp| comp.compile(&spec)).unwrap();
        let count = Tensor::from_vec(DType::F32, &[], vec![counter.unwrap_or(0.0)]).unwrap();
        let args: Vec<&Tensor> = if counter.is_some() { vec![&count] } else { Vec::new() };
        let want = eval_node(&g.node(r).op, &args, &g.node(r).ty).unwrap().to_f64_vec();
        let width = dtype.size_bytes();
        let count_in = [counter.unwrap_or(0.0)];
        // All rows at once, then row by row (as threads split them).
        for split in [spec.rows(), 1] {
            let mut got = vec![0u8; n * width];
            let mut first = 0;
            while first < spec.rows() {
                let end = (first + split).min(spec.rows());
                let mut ptrs: Vec<*mut f32> = spec.loads.iter().map(|_| count_in.as_ptr() as *mut f32).collect();
                ptrs.push(got.as_mut_ptr() as *mut f32);
                // SAFETY: the counter is one f32 and `got` holds every
                // element of the output's storage.
                unsafe { f(ptrs.as_ptr(), first, end, spec.inner) };
                first = end;
            }
            for (i, &w) in want.iter().enumerate() {
                let bytes = &got[i * width..(i + 1) * width];
                let half = || u32::from(u16::from_le_bytes(bytes.try_into().unwrap()));
                let (got_bits, want_bits) = match dtype {
                    DType::F32 => (u32::from_le_bytes(bytes.try_into().unwrap()), (w as f32).to_bits()),
                    DType::I32 => (u32::from_le_bytes(bytes.try_into().unwrap()), (w as i32) as u32),
                    DType::F16 => (half(), u32::from(f32_to_f16_bits(w as f32))),
                    _ => (half(), u32::from(f32_to_bf16_bits(w as f32))),
                };
                assert_eq!(got_bits, want_bits, "{name}: element {i} (rows of {split})");
            }
        }
    }
}
