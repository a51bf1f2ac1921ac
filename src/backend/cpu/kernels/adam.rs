//! Adam's parameter update as one native AVX-512 loop, for the compiled
//! kernels that are exactly `std.optim.adam`'s update (PyTorch's
//! `Adam(fused=True)`, recognized from the kernel's expressions).
//!
//! Why: the update divides three times and takes a square root per
//! element, and on Cranelift's 128-bit vectors the divider is its
//! bottleneck. Two of the divisions are by one value for the whole kernel
//! (the bias corrections `1 - beta^step`); here they are products with
//! that value's `f64` reciprocal, which give the correctly rounded `f32`
//! quotient (argued below), and 512-bit conversions make them cheap.
//!
//! Contract: [`recognize`] accepts a [`Spec`] that is Adam's update
//! (`ir::adam_pattern::adam_roles`), on a machine with AVX-512, and
//! returns the argument order [`update_rows`] takes; `update_rows` then
//! computes, element by element, the same float operations in the same
//! order as the Cranelift function of that spec (no fused multiply-add),
//! so the results are bit-identical. The lowering runs it only for the
//! parts the plan names (`passes::adam_update`); the rest is Cranelift's.
//!
//! Exactness of `f32(f64(x) · r)` with `r = 1 / f64(k)` for `x / k`: the
//! product is within `2^-52` (relative) of the real quotient `q`. Rounding
//! it to `f32` differs from rounding `q` only if an `f32` rounding boundary
//! `μ` (25 significant bits, the last one set) lies between them. `q` is
//! never such a boundary (`x = μ·k` would give the 24-bit `x` an odd factor
//! of 25 bits), and otherwise `|x - μ·k|` is a nonzero multiple of the
//! smaller of the operands' last-bit weights, which puts `q` at least
//! `2^-50` (relative) from `μ`, four times the error; likewise at subnormal
//! boundaries and the overflow threshold. Zeros, infinities and NaN follow
//! the product's IEEE rules, which match the quotient's (`1/±0 = ±inf`,
//! `1/±inf = ±0`). A test compares both on many random pairs.
//!
//! Example: the bench MLP's first weight (`[784, 256]`, 49 rows of 4,096)
//! is updated by `update_rows::<false>(ptrs, 0, 49, 4096)`.

use crate::ir::adam_pattern::{adam_roles, B1, B2, C, D, EPS, G, K1, K2, LR, M, M1, P, P1, SCALE, V, V1};
use crate::ir::spec::Spec;

/// The native loop for `spec` and the order in which it takes `spec`'s
/// arguments (indices into its loads, then its outputs, as `Step::Jit`
/// lists them), when `spec` is Adam's update (`ir::adam_pattern`) and this
/// machine has AVX-512: `update_rows`, scaling the gradient when the spec
/// reads it times a scalar.
pub(in crate::backend::cpu) fn recognize(spec: &Spec) -> Option<(crate::backend::cpu::codegen::KernelFn, Vec<usize>)> {
    let (order, scaled) = super::simd::avx512().then(|| adam_roles(spec)).flatten()?;
    let native: crate::backend::cpu::codegen::KernelFn = match scaled {
        true => update_rows::<true>,
        false => update_rows::<false>,
    };
    Some((native, order))
}

/// Adam's update of rows `lo..hi` of `inner` elements, its gradient read
/// times the `SCALE` argument when `SCALED` (a data-parallel step's mean
/// of the ranks' sums: `g · scale` first, one rounding, as the compiled
/// kernel computes it): the compiled kernel's calling convention
/// (`codegen::KernelFn`), arguments in `recognize`'s order.
///
/// # Safety
/// As for a compiled kernel: every pointer addresses the elements of rows
/// `lo..hi` (a scalar, one element), and `simd::avx512()` holds.
pub(in crate::backend::cpu) unsafe extern "C" fn update_rows<const SCALED: bool>(
    args: *const *mut f32,
    lo: usize,
    hi: usize,
    inner: usize,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract.
    unsafe {
        update::<SCALED>(args, lo * inner, hi * inner)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("`recognize` needs AVX-512: {args:?} {lo} {hi} {inner}")
}

/// Elements `from..to` of Adam's update (see `update_rows`), the gradient
/// times `SCALE` when `SCALED`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn update<const SCALED: bool>(args: *const *mut f32, from: usize, to: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract: one pointer per argument.
    let arg = |i: usize| unsafe { *args.add(i) };
    // SAFETY: a scalar argument addresses one element.
    let scalar = |i: usize| unsafe { *arg(i) };
    let splat = |i: usize| _mm512_set1_ps(scalar(i));
    let (b1, c, b2, d, lr, eps) = (splat(B1), splat(C), splat(B2), splat(D), splat(LR), splat(EPS));
    // Read only when the kernel scales its gradient (otherwise the role
    // names another scalar).
    let scale = if SCALED { splat(SCALE) } else { _mm512_set1_ps(1.0) };
    let (r1, r2) = (_mm512_set1_pd(1.0 / scalar(K1) as f64), _mm512_set1_pd(1.0 / scalar(K2) as f64));
    // `x / k` as `f32(f64(x) · (1 / f64(k)))`, eight lanes at a time.
    let divide = |x: __m512, r: __m512d| {
        let low = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), r));
        let high = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps::<1>(x)), r));
        _mm512_insertf32x8::<1>(_mm512_castps256_ps512(low), high)
    };
    let (m, g, v, p) = (arg(M), arg(G), arg(V), arg(P));
    let (out_m, out_v, out_p) = (arg(M1), arg(V1), arg(P1));
    let mut at = from;
    while at < to {
        // Sixteen lanes, the last block masked (the masked-off lanes are
        // neither read nor written).
        let mask: __mmask16 = if to - at >= 16 { u16::MAX } else { (1u16 << (to - at)) - 1 };
        // SAFETY: inside rows `lo..hi` of every tensor (the caller's
        // contract); all loads happen before the stores, so a result may
        // share its buffer with an input.
        unsafe {
            let load = |ptr: *mut f32| _mm512_maskz_loadu_ps(mask, ptr.add(at));
            let (mv, gv, vv, pv) = (load(m), load(g), load(v), load(p));
            let gv = if SCALED { _mm512_mul_ps(gv, scale) } else { gv };
            let m1 = _mm512_add_ps(_mm512_mul_ps(b1, mv), _mm512_mul_ps(c, gv));
            let v1 = _mm512_add_ps(_mm512_mul_ps(b2, vv), _mm512_mul_ps(_mm512_mul_ps(d, gv), gv));
            let step = _mm512_mul_ps(lr, divide(m1, r1));
            let denominator = _mm512_add_ps(_mm512_sqrt_ps(divide(v1, r2)), eps);
            let p1 = _mm512_sub_ps(pv, _mm512_div_ps(step, denominator));
            _mm512_mask_storeu_ps(out_m.add(at), mask, m1);
            _mm512_mask_storeu_ps(out_v.add(at), mask, v1);
            _mm512_mask_storeu_ps(out_p.add(at), mask, p1);
        }
        at += 16;
    }
}

#[cfg(test)]
mod tests {
    use super::recognize;
    use crate::backend::cpu::codegen::Compiler;
    use crate::ir::spec::{Expr, Inner, Kind, Load, Spec};
    use crate::ir::{BinaryOp, NodeId, UnaryOp};

    /// A xorshift generator of 64-bit patterns.
    fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// Adam's update of `[3, 37]` tensors as the fusion lays it out (the
    /// bench MLP's, with `lr` and `1 - beta2` one splat): loads `lr b1 m
    /// c g b2 v k1 k2 eps p`.
    fn adam_spec() -> Spec {
        use BinaryOp::{Add, Div, Mul, Sub};
        use Expr::{Binary as B, Load as L};
        let load = |node: usize, splat: bool| Load {
            node: NodeId::new(node),
            outer: vec![if splat { 0 } else { 37 }],
            inner: if splat { Inner::Splat } else { Inner::Contig },
            kind: Kind::F32,
        };
        let splats = [true, true, false, true, false, true, false, true, true, true, false];
        #[rustfmt::skip]
        let exprs = vec![
            L(0), L(1), L(2), B(Mul, 1, 2), L(3), L(4), B(Mul, 4, 5), B(Add, 3, 6), // m'
            L(5), L(6), B(Mul, 8, 9), L(0), L(4), B(Mul, 11, 12), L(4), B(Mul, 13, 14), B(Add, 10, 15), // v'
            L(7), B(Div, 7, 17), L(8), B(Div, 16, 19), B(Mul, 0, 18), Expr::Unary(UnaryOp::Sqrt, 20),
            L(9), B(Add, 22, 23), B(Div, 21, 24), L(10), B(Sub, 26, 25), // p'
        ];
        Spec {
            outer: vec![3],
            inner: 37,
            loads: splats.iter().enumerate().map(|(i, &s)| load(i, s)).collect(),
            exprs: exprs.into_iter().map(|e| (e, Kind::F32)).collect(),
            outputs: vec![7, 16, 27],
            output_nodes: (20..23).map(NodeId::new).collect(),
            stores: vec![Kind::F32; 3],
            fallible: vec![],
        }
    }

    /// `adam_spec` with its gradient read times a splat scalar (load 11),
    /// as a data-parallel step's mean of the summed gradients is: every
    /// read of `g` becomes `g · s`.
    fn scaled_spec() -> Spec {
        use Expr::{Binary as B, Load as L};
        let mut spec = adam_spec();
        let shift = |e: usize| e + 3;
        let mut exprs = vec![(L(4), Kind::F32), (L(11), Kind::F32), (B(BinaryOp::Mul, 0, 1), Kind::F32)];
        for &(e, kind) in &spec.exprs {
            exprs.push(match e {
                L(4) => (B(BinaryOp::Mul, 0, 1), kind),
                L(l) => (L(l), kind),
                B(op, x, y) => (B(op, shift(x), shift(y)), kind),
                Expr::Unary(op, x) => (Expr::Unary(op, shift(x)), kind),
                other => panic!("not in adam_spec: {other:?}"),
            });
        }
        spec.exprs = exprs;
        spec.outputs = spec.outputs.iter().map(|&o| shift(o)).collect();
        let mut scale = spec.loads[0].clone();
        scale.node = NodeId::new(11);
        spec.loads.push(scale);
        spec
    }

    /// The native update writes the same bits as the Cranelift function of
    /// the same spec, over ordinary values and zeros, infinities, NaN and
    /// subnormals, with the results written over their inputs; also with
    /// the gradient read times a scalar.
    #[test]
    fn the_native_update_equals_the_compiled_kernel_bit_for_bit() {
        native_equals_compiled(adam_spec(), None);
        native_equals_compiled(scaled_spec(), Some(0.5));
        native_equals_compiled(scaled_spec(), Some(0.3));
    }

    fn native_equals_compiled(spec: Spec, scale: Option<f32>) {
        let Some((native, order)) = recognize(&spec) else {
            // No AVX-512 here: nothing runs natively.
            assert!(!crate::backend::cpu::kernels::simd::avx512());
            return;
        };
        let scaled = crate::ir::adam_pattern::adam_roles(&spec).map(|(_, scaled)| scaled);
        assert_eq!(scaled, Some(scale.is_some()), "the scaled loop for a scaled gradient, and only then");
        let f = Compiler::new().and_then(|mut c| c.compile(&spec)).expect("the kernel compiles");
        let values = || {
            let mut bits = xorshift(0x9e37_79b9_7f4a_7c15);
            move || (bits() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        };
        let specials = [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40, -3e-39, f32::MAX];
        let tensor = |next: &mut dyn FnMut() -> f32, i: usize| -> Vec<f32> {
            (0..111)
                .map(|j| {
                    if (j + i).is_multiple_of(13) {
                        specials[(j / 13 + i) % specials.len()]
                    } else {
                        next() * (i + 1) as f32
                    }
                })
                .collect()
        };
        // lr, b1, c, b2, k1, k2, eps (bias corrections of step 3), and the
        // gradient's scale.
        let scalars = [1e-3f32, 0.9, 0.1, 0.999, 1.0 - 0.9f32.powi(3), 1.0 - 0.999f32.powi(3), 1e-8];
        let scalar_loads = [0usize, 1, 3, 5, 7, 8, 9];
        let run = |native_loop: bool, next: &mut dyn FnMut() -> f32| -> Vec<Vec<f32>> {
            let mut data: Vec<Vec<f32>> = (0..spec.loads.len()).map(|l| tensor(next, l)).collect();
            for (&l, &v) in scalar_loads.iter().zip(&scalars) {
                data[l] = vec![v];
            }
            if let Some(s) = scale {
                data[11] = vec![s];
            }
            // The results go over m, v and p, as the memory plan places them.
            let mut ptrs: Vec<*mut f32> = data.iter_mut().map(|d| d.as_mut_ptr()).collect();
            ptrs.extend([ptrs[2], ptrs[6], ptrs[10]]);
            // SAFETY: every pointer addresses the elements the kernel reads
            // or writes (a scalar, one).
            unsafe {
                if native_loop {
                    let args: Vec<*mut f32> = order.iter().map(|&i| ptrs[i]).collect();
                    native(args.as_ptr(), 0, 3, 37);
                } else {
                    f(ptrs.as_ptr(), 0, 3, 37);
                }
            }
            vec![data[2].clone(), data[6].clone(), data[10].clone()]
        };
        let (native, compiled) = (run(true, &mut values()), run(false, &mut values()));
        for (a, b) in native.iter().zip(&compiled) {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
            assert_eq!(bits(a), bits(b));
        }
    }

    /// The plan finds the update in a part's spec as `describe` builds it;
    /// the lowering checks the spec it lays out in rows of `ROW_BLOCK`: both
    /// give the same roles, so what the plan names the lowering runs.
    #[test]
    fn the_roles_are_the_same_before_and_after_the_rows_are_laid_out() {
        // One flat row of two blocks, as a parameter of 8,192 elements is.
        let block = crate::backend::cpu::threads::ROW_BLOCK;
        let mut spec = adam_spec();
        spec.outer.clear();
        spec.inner = 2 * block;
        for load in &mut spec.loads {
            load.outer.clear();
        }
        let roles = crate::ir::adam_pattern::adam_roles(&spec);
        assert!(roles.is_some());
        let laid_out = spec.clone().in_rows_of(block);
        assert_eq!(laid_out.outer, [2], "the spec is laid out in rows");
        assert_eq!(crate::ir::adam_pattern::adam_roles(&laid_out), roles);
    }

    /// Another operand order (here `p' = update - p`) is not Adam's update.
    #[test]
    fn other_expressions_are_left_to_cranelift() {
        let mut spec = adam_spec();
        spec.exprs[27] = (Expr::Binary(BinaryOp::Sub, 25, 26), Kind::F32);
        assert_eq!(crate::ir::adam_pattern::adam_roles(&spec), None);
    }

    /// `f32(f64(x) · (1 / f64(k)))` is `x / k` for random and special
    /// operands (the module's exactness argument, checked).
    #[test]
    fn reciprocal_products_are_correctly_rounded_quotients() {
        let mut bits = xorshift(0x2545_f491_4f6c_dd1d);
        let mut next = || f32::from_bits((bits() >> 32) as u32);
        let specials =
            [0.0, -0.0, 1.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, 1e-45, 3.0];
        // Random bit patterns (all ranges, many results overflow or
        // underflow) and operands of nearby magnitudes (normal quotients,
        // the bias-correction case).
        let mut pairs: Vec<(f32, f32)> = (0..1_000_000).map(|_| (next(), next())).collect();
        pairs.extend((0..1_000_000).map(|_| (next().abs() % 16.0 + 1e-3, next().abs() % 2.0 + 1e-3)));
        pairs.extend(specials.iter().flat_map(|&x| specials.map(|k| (x, k))));
        for (x, k) in pairs {
            let want = x / k;
            let got = (x as f64 * (1.0 / k as f64)) as f32;
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{x:e} / {k:e}: {got:e}, not {want:e}"
            );
        }
    }
}
