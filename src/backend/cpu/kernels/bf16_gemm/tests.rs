//! Every tier this machine runs against an f64 sum of the exact bf16
//! products, within `2^-20 · (Σ|a·b| + |dst|)` (f32 sums of up to ~300
//! terms in any order stay well inside it; the values are normal, so the
//! hardware's flushing of denormals never applies), and each tier
//! bit-identical with one and two threads.

use super::*;

/// The tiers to test here, saying which this CPU cannot run.
fn tiers() -> Vec<Isa> {
    let available = isa::available();
    for isa in Isa::ALL.into_iter().filter(|isa| !available.contains(isa)) {
        let why = isa::Features::detected().lacks(isa).unwrap_or("?");
        eprintln!("bf16_gemm: tier {} skipped: {why}", isa.name());
    }
    available
}

/// bf16 values of either sign in `±[2^-4, 2)` and some zeros, from a seed.
fn values(len: usize, seed: u64) -> Vec<u16> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if s.is_multiple_of(17) {
                return 0;
            }
            let sign = ((s >> 20) & 1) as u16;
            let exponent = 123 + ((s >> 24) % 5) as u16; // 2^-4 ..= 2^0
            sign << 15 | exponent << 7 | ((s >> 32) & 0x7f) as u16
        })
        .collect()
}

fn f(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

/// A test matrix: its storage and how to address it.
struct Matrix {
    data: Vec<u16>,
    rows: usize,
    cols: usize,
    /// Stored transposed (column-major).
    transposed: bool,
}

impl Matrix {
    fn new(rows: usize, cols: usize, transposed: bool, seed: u64) -> Matrix {
        Matrix { data: values(rows * cols, seed), rows, cols, transposed }
    }
    fn operand(&self) -> Operand {
        let (rs, cs) = if self.transposed { (1, self.rows) } else { (self.cols, 1) };
        (self.data.as_ptr(), rs, cs)
    }
    fn at(&self, i: usize, j: usize) -> f64 {
        f(self.data[if self.transposed { j * self.rows + i } else { i * self.cols + j }])
    }
}

/// `init + a · b` in f64 and the tolerance of each element.
fn reference(a: &Matrix, b: &Matrix, init: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let mut want = vec![0.0; m * n];
    let mut tol = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut sum, mut abs) = (f64::from(init[i * n + j]), f64::from(init[i * n + j]).abs());
            for p in 0..k {
                let prod = a.at(i, p) * b.at(p, j);
                sum += prod;
                abs += prod.abs();
            }
            want[i * n + j] = sum;
            tol[i * n + j] = abs * 2f64.powi(-20) + 1e-30;
        }
    }
    (want, tol)
}

fn run(isa: Isa, a: &Matrix, b: &Matrix, dst: &mut [f32], threads: usize, accumulate: bool) {
    let mkn = [a.rows, a.cols, b.cols];
    // SAFETY: the matrices are m × k and k × n; `dst` holds m × n.
    unsafe { bf16_gemm_on(isa, dst, a.operand(), b.operand(), mkn, threads, Store { accumulate, round: false }) }
}

#[test]
fn every_tier_sums_the_exact_products() {
    let shapes = [
        [1, 1, 1],
        [12, 1, 32],
        [13, 2, 33],
        [7, 3, 5],
        [31, 31, 31],
        [32, 32, 32],
        [33, 33, 33],
        [64, 64, 64],
        [50, 95, 17],
        [100, 257, 70],
        [1, 300, 300],
        [300, 7, 1],
        [37, 300, 129],
        [299, 65, 45],
    ];
    for isa in tiers() {
        for (s, &[m, k, n]) in shapes.iter().enumerate() {
            for (t, (ta, tb, accumulate)) in
                [(false, false, false), (true, false, true), (false, true, false), (true, true, true)]
                    .into_iter()
                    .enumerate()
            {
                let seed = (s * 4 + t) as u64;
                let (a, b) = (Matrix::new(m, k, ta, 2 * seed + 1), Matrix::new(k, n, tb, 2 * seed + 2));
                let init: Vec<f32> = if accumulate {
                    values(m * n, 1000 + seed).into_iter().map(|v| f(v) as f32).collect()
                } else {
                    vec![0.0; m * n]
                };
                let mut got = if accumulate { init.clone() } else { vec![f32::NAN; m * n] };
                run(isa, &a, &b, &mut got, 1, accumulate);
                let (want, tol) = reference(&a, &b, &init);
                for e in 0..m * n {
                    let err = (f64::from(got[e]) - want[e]).abs();
                    assert!(
                        err <= tol[e],
                        "{}: {m}x{k}x{n} (transposed {ta} {tb}, accumulate {accumulate}) element {e}: {} vs {}",
                        isa.name(),
                        got[e],
                        want[e]
                    );
                }
            }
        }
    }
}

#[test]
fn one_and_two_threads_give_the_same_bits() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
    // Many row blocks (split by rows), few rows (split by columns), and
    // ragged edges; each over a million multiply-adds, so that it splits.
    for (s, &[m, k, n]) in [[256, 200, 100], [12, 1100, 300], [70, 301, 257]].iter().enumerate() {
        let (a, b) = (Matrix::new(m, k, false, 50 + s as u64), Matrix::new(k, n, s == 1, 60 + s as u64));
        for isa in tiers() {
            for accumulate in [false, true] {
                let init: Vec<f32> = values(m * n, 70 + s as u64).into_iter().map(|v| f(v) as f32).collect();
                let (mut one, mut two) = (init.clone(), init.clone());
                run(isa, &a, &b, &mut one, 1, accumulate);
                pool.install(|| run(isa, &a, &b, &mut two, 2, accumulate));
                let same = one.iter().zip(&two).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{}: {m}x{k}x{n}, accumulate {accumulate}", isa.name());
            }
        }
    }
}

#[test]
fn nan_and_infinity_propagate() {
    let [m, k, n] = [20, 40, 40];
    for isa in tiers() {
        let mut a = Matrix::new(m, k, false, 7);
        let b = Matrix::new(k, n, false, 8);
        a.data[3 * k + 5] = 0x7fc0; // NaN in row 3
        a.data[9 * k..10 * k].fill(0);
        a.data[9 * k + 2] = 0x7f80; // +inf alone in row 9
        let mut got = vec![0.0f32; m * n];
        run(isa, &a, &b, &mut got, 1, false);
        assert!(got[3 * n..4 * n].iter().all(|v| v.is_nan()), "{}", isa.name());
        for j in 0..n {
            let want = match b.data[2 * n + j] {
                0 => f32::NAN,
                bits if bits >> 15 == 1 => f32::NEG_INFINITY,
                _ => f32::INFINITY,
            };
            let got = got[9 * n + j];
            assert!(got == want || (got.is_nan() && want.is_nan()), "{}: column {j}: {got}", isa.name());
        }
    }
}

#[test]
fn an_empty_k_writes_zeros_or_keeps_dst() {
    for isa in tiers() {
        let (a, b) = (Matrix::new(3, 0, false, 1), Matrix::new(0, 4, false, 2));
        let mut dst = vec![1.5f32; 12];
        run(isa, &a, &b, &mut dst, 1, true);
        assert_eq!(dst, vec![1.5; 12]);
        run(isa, &a, &b, &mut dst, 1, false);
        assert_eq!(dst, vec![0.0; 12]);
    }
}

/// A rounded product is the product with each sum rounded to bf16, bit for
/// bit, on every tier: `k` within one cache block and across several (the
/// `vdpbf16ps` tier rounds in the last block's store only), ragged sides.
#[test]
fn rounded_products_are_the_products_rounded() {
    let mut checked = 0;
    for isa in tiers() {
        for [m, k, n] in [[5, 7, 9], [13, 64, 33], [12, 600, 32], [30, 1100, 40]] {
            let (a, b) = (Matrix::new(m, k, false, 31), Matrix::new(k, n, true, 32));
            let mut plain = vec![0.0f32; m * n];
            run(isa, &a, &b, &mut plain, 1, false);
            for threads in [1, 2] {
                let mut rounded = vec![7.0f32; m * n];
                let store = Store { accumulate: false, round: true };
                // SAFETY: the matrices are m × k and k × n; `rounded` holds m × n.
                unsafe { bf16_gemm_on(isa, &mut rounded, a.operand(), b.operand(), [m, k, n], threads, store) };
                for (i, (&got, &sum)) in rounded.iter().zip(&plain).enumerate() {
                    let want = crate::half::round_bf16(sum);
                    assert_eq!(got.to_bits(), want.to_bits(), "{}: {m}x{k}x{n}, element {i}", isa.name());
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 8, "{checked}");
}

/// A row-major `lhs` of even `k`, which the `vdpbf16ps` tier reads in
/// place, gives the bits of the same matrix stored column-major, which it
/// packs: the same pairs in the same order. Row counts cover full 12-row
/// blocks, a 4-row remainder and ragged ones; `k` within and across a
/// cache block; with and without accumulating and rounding.
#[test]
fn a_row_major_lhs_read_in_place_is_the_packed_one_bit_for_bit() {
    if !isa::available().contains(&Isa::Avx512) {
        eprintln!("bf16_gemm: the vdpbf16ps tier is not on this CPU; skipped");
        return;
    }
    for (m, k, n) in [(12, 16, 32), (28, 30, 40), (256, 784, 70), (7, 600, 33), (1, 2, 1)] {
        let rows = Matrix::new(m, k, false, 7);
        let columns = Matrix { data: transposed(&rows), rows: m, cols: k, transposed: true };
        let b = Matrix::new(k, n, m % 2 == 0, 8);
        for (accumulate, round) in [(false, false), (true, false), (false, true)] {
            let start: Vec<f32> = (0..m * n).map(|i| i as f32 * 0.25).collect();
            let (mut direct, mut packed) = (start.clone(), start.clone());
            let store = Store { accumulate, round };
            for (lhs, dst) in [(&rows, &mut direct), (&columns, &mut packed)] {
                // SAFETY: the operands address m x k and k x n matrices.
                unsafe { bf16_gemm_on(Isa::Avx512, dst, lhs.operand(), b.operand(), [m, k, n], 1, store) };
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&direct), bits(&packed), "{m}x{k}x{n}, accumulate {accumulate}, round {round}");
        }
    }
}

/// The column-major storage of a row-major test matrix.
fn transposed(a: &Matrix) -> Vec<u16> {
    (0..a.cols).flat_map(|j| (0..a.rows).map(move |i| a.data[i * a.cols + j])).collect()
}
