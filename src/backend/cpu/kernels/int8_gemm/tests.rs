//! Every tier this machine runs against `quant_matmul_into`, bit for bit
//! (NaN equal to NaN), on many shapes and on rows of every kind the
//! quantization treats apart, and each tier bit-identical with one and two
//! threads.

use super::*;
use crate::tensor::quant::quant_matmul_into;

/// The tiers to test here, saying which this CPU cannot run (and which
/// run the portable code for want of VNNI).
fn tiers() -> Vec<Isa> {
    let available = isa::available();
    for isa in Isa::ALL.into_iter().filter(|isa| !available.contains(isa)) {
        let why = isa::Features::detected().lacks(isa).unwrap_or("?");
        eprintln!("int8_gemm: tier {} skipped: {why}", isa.name());
    }
    if !isa::Features::detected().avx512_vnni && available.len() > 1 {
        eprintln!("int8_gemm: no AVX512_VNNI: the hardware tiers run the portable code");
    }
    available
}

/// A tiny deterministic generator (an LCG's high bits).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 32
    }
    /// In `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// In `[-1, 1)`.
    fn unit(&mut self) -> f32 {
        self.below(1 << 24) as f32 / (1 << 23) as f32 - 1.0
    }
}

/// Row `len` of kind `kind % 16`: mixed signs at several magnitudes, one
/// sign only, zeros, NaN or infinities, exact ties of the rounding, tiny
/// and huge ranges.
fn row(rng: &mut Rng, len: usize, kind: usize) -> Vec<f32> {
    let magnitude = [1e-3, 0.1, 1.0, 7.0, 300.0, 1e6][rng.below(6)];
    let mut row: Vec<f32> = (0..len).map(|_| rng.unit() * magnitude).collect();
    let at = rng.below(len);
    match kind % 16 {
        0..=3 => {}
        4 => row.iter_mut().for_each(|v| *v = -v.abs()),
        5 => row.iter_mut().for_each(|v| *v = v.abs()),
        6 => row.fill(0.0),
        7 => row[at] = f32::NAN,
        8 => row[at] = f32::INFINITY,
        9 => row[at] = f32::NEG_INFINITY,
        10 => {
            // Range [0, 255]: scale 1, zero 0, and halves that round to even.
            row.iter_mut().for_each(|v| *v = rng.below(255) as f32 + 0.5);
            row[0] = 0.0;
            row[len - 1] = 255.0;
        }
        11 => {
            // Range [-127.5, 127.5]: scale 1, zero 128 (127.5 to even).
            row.iter_mut().for_each(|v| *v = rng.below(255) as f32 - 127.0 - 0.5);
            row[len - 1] = 127.5;
        }
        12 => {
            row.fill(0.0);
            row[at] = -magnitude;
        }
        // Subnormal and tiny values: `1 / scale` is infinite, `0 · inv` NaN.
        13 => row.iter_mut().for_each(|v| *v = v.abs() * 1e-38),
        14 => row.iter_mut().for_each(|v| *v *= 1e-39),
        // A range past `f32::MAX` (scale 1), or just under it.
        15 if rng.below(2) == 0 => {
            row.iter_mut().for_each(|v| *v *= 3.4e38 / magnitude);
            row[at] = 3.4e38;
            row[0] = -3.4e38;
        }
        _ => {
            row.iter_mut().for_each(|v| *v = v.abs() * 3.4e38 / magnitude);
            row[at] = f32::MAX;
        }
    }
    row
}

/// A product's operands: `x` with rows of every kind, `w` over all of `i8`
/// (-128 and 127 included), scales of either sign (a zero among them).
fn operands(rng: &mut Rng, [m, k, n]: [usize; 3]) -> (Vec<f32>, Vec<i8>, Vec<f32>) {
    let x: Vec<f32> = (0..m)
        .flat_map(|i| {
            let kind = i + rng.below(16);
            row(rng, k, kind)
        })
        .collect();
    let mut w: Vec<i8> = (0..k * n).map(|_| rng.next() as i8).collect();
    w[0] = -128;
    w[k * n - 1] = 127;
    let mut s: Vec<f32> = (0..n).map(|_| rng.unit() * 0.05).collect();
    s[rng.below(n)] = 0.0;
    (x, w, s)
}

fn run(isa: Isa, ops: &(Vec<f32>, Vec<i8>, Vec<f32>), mkn: [usize; 3], threads: usize) -> Vec<f32> {
    run_with(isa, ops, mkn, (None, Post::default()), threads)
}

/// The product on `isa` with a static input range (or none) and an
/// epilogue.
fn run_with(
    isa: Isa,
    (x, w, s): &(Vec<f32>, Vec<i8>, Vec<f32>),
    mkn: [usize; 3],
    (input_range, post): (Option<[f32; 2]>, Post),
    threads: usize,
) -> Vec<f32> {
    let mut dst = vec![-7.0f32; mkn[0] * mkn[2]];
    let w = Int8Matrix { values: w.as_ptr(), scales: s.as_ptr(), input_range };
    // SAFETY: the operands are m × k, k × n and n; `dst` m × n, the bias n.
    unsafe { quant_gemm_on(isa, &mut dst, Input::rows(x.as_ptr()), w, mkn, post, threads) };
    dst
}

/// The same with the weights packed once, when this machine packs them.
fn run_packed(
    ops: &(Vec<f32>, Vec<i8>, Vec<f32>),
    mkn: [usize; 3],
    (input_range, post): (Option<[f32; 2]>, Post),
    threads: usize,
) -> Option<Vec<f32>> {
    let weights = pack_weights(&ops.1, mkn[1], mkn[2])?;
    let mut dst = vec![-7.0f32; mkn[0] * mkn[2]];
    let w = PackedMatrix { weights: &weights, scales: ops.2.as_ptr(), input_range };
    // SAFETY: the operands are m × k and n, `weights` k × n; `dst` m × n.
    unsafe { quant_gemm_packed(&mut dst, Input::rows(ops.0.as_ptr()), w, mkn, post, threads) };
    Some(dst)
}

fn matrix(values: &[i8], scales: &[f32]) -> Int8Matrix {
    Int8Matrix { values: values.as_ptr(), scales: scales.as_ptr(), input_range: None }
}

fn reference(ops: &(Vec<f32>, Vec<i8>, Vec<f32>), mkn: [usize; 3]) -> Vec<f32> {
    reference_with(ops, mkn, None)
}

fn reference_with(
    (x, w, s): &(Vec<f32>, Vec<i8>, Vec<f32>),
    [m, k, n]: [usize; 3],
    range: Option<[f32; 2]>,
) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    quant_matmul_into(x, w, s, range, &mut out, [m, k, n]);
    out
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// The first element where `got` and `want` differ, for the message.
fn first_difference(got: &[f32], want: &[f32], n: usize) -> Option<String> {
    let e = got.iter().zip(want).position(|(&g, &w)| !same(g, w))?;
    Some(format!(
        "element ({}, {}): {:e} ({:#x}) vs {:e} ({:#x})",
        e / n,
        e % n,
        got[e],
        got[e].to_bits(),
        want[e],
        want[e].to_bits()
    ))
}

#[test]
fn every_tier_gives_the_reference_bits() {
    let mut rng = Rng::new(1);
    let mut shapes = vec![
        [1, 1, 1],
        [1, 3, 1],
        [12, 4, 32],
        [13, 5, 33],
        [11, 1, 16],
        [24, 2, 17],
        [40, 300, 100],
        [25, 299, 64],
        [3, 8, 31],
    ];
    shapes.extend((0..80).map(|_| [1 + rng.below(40), 1 + rng.below(300), 1 + rng.below(100)]));
    let (mut checked, mut nans, mut zeros) = (0, 0, 0);
    let tiers = tiers();
    for &isa in &tiers {
        for (s, &mkn) in shapes.iter().enumerate() {
            let ops = operands(&mut Rng::new(100 + s as u64), mkn);
            let want = reference(&ops, mkn);
            let got = run(isa, &ops, mkn, 1);
            if let Some(diff) = first_difference(&got, &want, mkn[2]) {
                panic!("{}: {mkn:?} {diff}", isa.name());
            }
            checked += got.len();
            nans += want.iter().filter(|v| v.is_nan()).count();
            zeros += want.iter().filter(|&&v| v == 0.0).count();
        }
    }
    // Every tier checked every element (98321 of them), and the rows of
    // every kind were there: NaN rows, zero rows. A machine without AVX2
    // or AVX-512 has one tier, the portable code.
    assert!(checked >= 98_000 * tiers.len() && nans > 1000 && zeros > 1000, "{checked} {nans} {zeros}");
}

#[test]
fn one_and_two_threads_give_the_same_bits() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
    // Many row blocks (split by rows), few rows (split by column panels),
    // and ragged edges; each over a million multiply-adds, so that it
    // splits (and packs `x` and `w` in pieces).
    for (s, &mkn) in [[64, 784, 512], [3, 1100, 700], [100, 301, 70]].iter().enumerate() {
        let ops = operands(&mut Rng::new(50 + s as u64), mkn);
        let want = reference(&ops, mkn);
        for isa in tiers() {
            let one = run(isa, &ops, mkn, 1);
            let two = pool.install(|| run(isa, &ops, mkn, 2));
            let same_bits = one.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same_bits, "{}: {mkn:?}", isa.name());
            if let Some(diff) = first_difference(&two, &want, mkn[2]) {
                panic!("{}: {mkn:?} {diff}", isa.name());
            }
        }
    }
}

#[test]
fn weights_packed_once_give_the_reference_bits() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
    for (s, &mkn) in [[13, 37, 19], [64, 784, 256], [5, 3, 70]].iter().enumerate() {
        let ops = operands(&mut Rng::new(90 + s as u64), mkn);
        let want = reference(&ops, mkn);
        for threads in [1, 2] {
            let Some(got) = pool.install(|| run_packed(&ops, mkn, (None, Post::default()), threads)) else {
                eprintln!("no VNNI kernel on this machine: packed weights not tested");
                return;
            };
            if let Some(diff) = first_difference(&got, &want, mkn[2]) {
                panic!("{mkn:?} at {threads} threads: {diff}");
            }
        }
    }
}

/// Calibrated layers (a static input range for every row): every tier,
/// packed or not, at 1 and 2 threads, against the reference with that
/// range, for ranges that hold the rows, cut them (saturating levels),
/// miss 0, are tiny or huge, or are not finite.
#[test]
fn static_input_ranges_give_the_reference_bits() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
    let ranges = [[-1.0, 1.0], [0.25, 3.0], [-0.002, -0.001], [-5e5, 7e5], [-1e-39, 1e-39], [f32::NAN, 2.0]];
    for (s, &mkn) in [[13, 37, 19], [40, 300, 100], [5, 3, 33], [64, 129, 10]].iter().enumerate() {
        let ops = operands(&mut Rng::new(50 + s as u64), mkn);
        for range in ranges {
            let want = reference_with(&ops, mkn, Some(range));
            for threads in [1, 2] {
                for isa in tiers() {
                    let got = pool.install(|| run_with(isa, &ops, mkn, (Some(range), Post::default()), threads));
                    if let Some(diff) = first_difference(&got, &want, mkn[2]) {
                        panic!("{} {mkn:?} range {range:?}: {diff}", isa.name());
                    }
                }
                let packed = pool.install(|| run_packed(&ops, mkn, (Some(range), Post::default()), threads));
                if let Some(diff) = packed.and_then(|got| first_difference(&got, &want, mkn[2])) {
                    panic!("packed {mkn:?} range {range:?}: {diff}");
                }
            }
        }
    }
}

/// Quantized convolutions (each image quantized whole, its levels laid out
/// as patches, or read in place when the channels are a multiple of 4):
/// against `quant_conv_into`, on every tier, packed or not,
/// at 1 and 2 threads, with and without a static range, for padded and
/// unpadded windows, strides, dilations, one input channel, channel counts
/// that are not multiples of 4 (ragged `k`) and images whose size is not
/// either, with a non-finite image among them.
#[test]
fn convolutions_by_patches_give_the_reference_bits() {
    use crate::tensor::quant::quant_conv_into;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
    let p = |kernel: [usize; 2], stride: [usize; 2], padding: [usize; 4], dilation: [usize; 2]| Patches {
        kernel,
        stride,
        padding,
        dilation,
    };
    let cases = [
        ([3, 12, 12, 1], p([3, 3], [1, 1], [1, 1, 1, 1], [1, 1]), 16),
        ([2, 9, 7, 5], p([3, 3], [2, 2], [1, 1, 1, 1], [1, 1]), 33),
        ([4, 8, 8, 16], p([3, 3], [1, 1], [0, 0, 0, 0], [1, 1]), 32),
        ([3, 9, 7, 8], p([3, 2], [2, 1], [1, 1, 0, 1], [1, 2]), 40),
        ([1, 10, 11, 3], p([2, 3], [1, 2], [0, 1, 2, 0], [2, 1]), 7),
    ];
    for (s, &(shape, patches, n)) in cases.iter().enumerate() {
        let mut rng = Rng::new(30 + s as u64);
        let [_, oh, ow, k] = patches.rows_shape(&shape).expect("the window fits");
        let m = shape[0] * oh * ow;
        let mut x: Vec<f32> = (0..shape.iter().product::<usize>()).map(|_| rng.unit() * 3.0).collect();
        if shape[0] > 2 {
            x[shape[1] * shape[2] * shape[3] + 5] = f32::NAN;
        }
        let w: Vec<i8> = (0..k * n).map(|_| rng.next() as i8).collect();
        let scales: Vec<f32> = (0..n).map(|_| rng.unit() * 0.05).collect();
        let input = || Input { values: x.as_ptr(), patches: Some((patches, shape)) };
        for range in [None, Some([-1.0, 2.0])] {
            let mut want = vec![0.0f32; m * n];
            quant_conv_into(&x, shape, &patches, (&w, &scales, range), &mut want);
            let packed = pack_weights(&w, k, n);
            for threads in [1, 2] {
                for isa in tiers() {
                    let mut got = vec![-7.0f32; m * n];
                    pool.install(|| {
                        let matrix = Int8Matrix { values: w.as_ptr(), scales: scales.as_ptr(), input_range: range };
                        // SAFETY: `x` is the NHWC input, `w` k × n, `scales` n; `got` m × n.
                        unsafe { quant_gemm_on(isa, &mut got, input(), matrix, [m, k, n], Post::default(), threads) }
                    });
                    if let Some(diff) = first_difference(&got, &want, n) {
                        panic!("{} {shape:?} {patches:?} range {range:?}: {diff}", isa.name());
                    }
                }
                if let Some(weights) = &packed {
                    let mut got = vec![-7.0f32; m * n];
                    pool.install(|| {
                        let matrix = PackedMatrix { weights, scales: scales.as_ptr(), input_range: range };
                        // SAFETY: as above, the weights packed.
                        unsafe { quant_gemm_packed(&mut got, input(), matrix, [m, k, n], Post::default(), threads) }
                    });
                    if let Some(diff) = first_difference(&got, &want, n) {
                        panic!("packed {shape:?} {patches:?} range {range:?}: {diff}");
                    }
                }
            }
        }
    }
}

/// A dense layer's epilogue applied as the product is stored (`Post`):
/// the reference product, then `+ bias` and ReLU as the interpreter's
/// ops, on every tier, with and without packed weights, at 1 and 2
/// threads; biases of every sign with NaN, infinities and `-0` among
/// them.
#[test]
fn the_fused_bias_and_relu_are_the_interpreters_ops() {
    let relu = crate::tensor::f32_unary(crate::ir::UnaryOp::Relu).expect("relu");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
    for (s, &mkn) in [[13, 37, 19], [64, 300, 70], [5, 3, 33], [24, 1, 5]].iter().enumerate() {
        let ops = operands(&mut Rng::new(70 + s as u64), mkn);
        let mut rng = Rng::new(7 + s as u64);
        let mut bias: Vec<f32> = (0..mkn[2]).map(|_| rng.unit() * 4.0).collect();
        for (i, special) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0].into_iter().enumerate() {
            if i < bias.len() {
                bias[i] = special;
            }
        }
        let plain = reference(&ops, mkn);
        for (with_bias, with_relu) in [(true, false), (false, true), (true, true)] {
            let post = Post { bias: with_bias.then_some(&bias[..]), relu: with_relu };
            let want: Vec<f32> = plain
                .iter()
                .enumerate()
                .map(|(i, &y)| if with_bias { y + bias[i % mkn[2]] } else { y })
                .map(|y| if with_relu { relu(y) } else { y })
                .collect();
            for threads in [1, 2] {
                for isa in tiers() {
                    let got = pool.install(|| run_with(isa, &ops, mkn, (None, post), threads));
                    if let Some(diff) = first_difference(&got, &want, mkn[2]) {
                        panic!("{} {mkn:?} bias {with_bias} relu {with_relu}: {diff}", isa.name());
                    }
                }
                let packed = pool.install(|| run_packed(&ops, mkn, (None, post), threads));
                if let Some(diff) = packed.and_then(|got| first_difference(&got, &want, mkn[2])) {
                    panic!("packed {mkn:?} bias {with_bias} relu {with_relu}: {diff}");
                }
            }
        }
    }
}

#[test]
fn the_reference_example_and_empty_shapes() {
    for isa in tiers() {
        // `x = [[1, -1]]`, `w = [[2], [3]]`: in f32 `1 / (2/255)` is just
        // under 127.5, so the zero point is 127 and the levels 254 and 0.
        let ops = (vec![1.0, -1.0], vec![2, 3], vec![0.5]);
        let q = RowQuant::of(&ops.0);
        assert_eq!((q.zero, q.level(1.0), q.level(-1.0)), (127, 254, 0));
        let want = -127.0 * ((2.0f32 / 255.0) * 0.5);
        assert_eq!(reference(&ops, [1, 2, 1]), vec![want]);
        assert_eq!(run(isa, &ops, [1, 2, 1], 1), vec![want], "{}", isa.name());
        // k = 0: every sum is 0.
        let ops = (vec![], vec![], vec![1.0, -2.0, 3.0]);
        assert_eq!(run(isa, &ops, [2, 0, 3], 1), vec![0.0; 6], "{}", isa.name());
        // m = 0 or n = 0: nothing is written.
        let mut dst = [5.0f32; 2];
        // SAFETY: empty operands; `dst` holds the 0 elements of each.
        unsafe {
            quant_gemm_on(
                isa,
                &mut dst,
                Input::rows([1.0].as_ptr()),
                matrix(&[1], &[1.0]),
                [0, 1, 1],
                Post::default(),
                1,
            )
        };
        unsafe {
            quant_gemm_on(isa, &mut dst, Input::rows([1.0].as_ptr()), matrix(&[1], &[]), [1, 1, 0], Post::default(), 1)
        };
        assert_eq!(dst, [5.0; 2]);
    }
}

/// The vector `level` against `RowQuant::level` on ranges from tiny to
/// huge and elements from anywhere in them, the range's ends and 0
/// included.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_vector_levels_are_the_reference_levels() {
    use std::arch::x86_64::*;
    if !runs_vnni(Isa::Avx512) {
        return eprintln!("int8_gemm: no AVX512_VNNI: the vector levels are not tested");
    }
    /// 16 levels with the instructions enabled.
    #[target_feature(enable = "avx512f")]
    fn levels(v: &[f32; 16], q: &RowQuant) -> [i32; 16] {
        // SAFETY: 16 elements each.
        let v = unsafe { _mm512_loadu_ps(v.as_ptr()) };
        let l = avx512::level(v, _mm512_set1_ps(q.inv), _mm512_set1_epi32(q.zero));
        let mut out = [0i32; 16];
        // SAFETY: as above.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), l) };
        out
    }
    let mut rng = Rng::new(9);
    let mut checked = 0;
    for t in 0..20_000 {
        // Ends from 10^-45 to 10^38 (and 0), either sign.
        let end = |rng: &mut Rng| match rng.below(8) {
            0 => 0.0,
            _ => rng.unit() * 10f32.powi(rng.below(84) as i32 - 45),
        };
        let (a, b) = (end(&mut rng), end(&mut rng));
        let (lo, hi) = (a.min(b), a.max(b));
        let q = RowQuant::from_range(lo, hi, false);
        let v: [f32; 16] = std::array::from_fn(|i| match (i + t) % 5 {
            0 => lo,
            1 => hi,
            2 => 0.0,
            _ => lo + (hi - lo) * (rng.unit() * 0.5 + 0.5),
        });
        // SAFETY: `runs_vnni` checked AVX-512.
        let got = unsafe { levels(&v, &q) };
        for (e, (&g, &v)) in got.iter().zip(&v).enumerate() {
            assert_eq!(g, i32::from(q.level(v)), "{q:?}: lane {e}: {v:e}");
        }
        checked += 1;
    }
    assert!(checked > 10_000, "{checked}");
}
