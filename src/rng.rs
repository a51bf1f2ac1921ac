//! Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//!
//! Contract: the value at flat index `i` depends only on `(seed, i)` (and the
//! distribution), never on how many values were drawn before it or on the
//! thread that draws it. So `uniform(s, 10)[..5] == uniform(s, 5)`, and any
//! backend can compute element `i` independently.
//!
//! Exact mapping, which every backend must reproduce bit for bit:
//! - key = `[seed as u32, (seed >> 32) as u32]`;
//! - counter of element `i` = `[i as u32, (i >> 32) as u32, stream, 0]`,
//!   with `stream` 0 for uniform and 1 for normal (so the two distributions
//!   drawn with one seed are not correlated);
//! - Philox4x32-10 turns the counter into four words `x0..x3`;
//! - uniform: `((x0 << 32 | x1) >> 11) · 2^-53`, a multiple of 2^-53 in `[0, 1)`;
//! - normal (Box–Muller, cosine branch): `u1 = (((x0 << 32 | x1) >> 11) + 1) · 2^-53`
//!   in `(0, 1]`, `u2 = ((x2 << 32 | x3) >> 11) · 2^-53`, value
//!   `sqrt(-2 ln u1) · cos(2π u2)`. The integer steps are exact everywhere;
//!   `ln` and `cos` are Rust std's (the platform libm), whose last bit may
//!   in principle differ between platforms — the only non-exact step.
//!
//! Example: `uniform(42, 3)` returns three values in `[0, 1)`;
//! `derive_seed(42, "l1.w")` gives the seed of parameter `l1.w` of a model
//! instantiated with `seed = 42`.

/// Philox multipliers and Weyl key increments (Random123 `philox.h`).
const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Counter stream of each distribution (the third counter word).
const STREAM_UNIFORM: u32 = 0;
const STREAM_NORMAL: u32 = 1;

/// 2^-53: the spacing of the 53-bit uniform grid.
const TWO_POW_M53: f64 = 1.0 / (1u64 << 53) as f64;

/// The Philox4x32 bijection with 10 rounds: the key is bumped by the Weyl
/// constants before every round but the first, as in Random123.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = ctr;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let p0 = u64::from(M0) * u64::from(c[0]);
        let p1 = u64::from(M1) * u64::from(c[2]);
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
    }
    c
}

fn block(seed: u64, index: u64, stream: u32) -> [u32; 4] {
    philox4x32_10([index as u32, (index >> 32) as u32, stream, 0], [seed as u32, (seed >> 32) as u32])
}

/// The top 53 bits of two words taken as one 64-bit number.
fn bits53(hi: u32, lo: u32) -> u64 {
    ((u64::from(hi) << 32) | u64::from(lo)) >> 11
}

/// Element `index` of the uniform stream of `seed`, in `[0, 1)`.
pub fn uniform_at(seed: u64, index: u64) -> f64 {
    let x = block(seed, index, STREAM_UNIFORM);
    // Exact: a 53-bit integer times a power of two.
    bits53(x[0], x[1]) as f64 * TWO_POW_M53
}

/// Element `index` of the standard-normal stream of `seed`.
pub fn normal_at(seed: u64, index: u64) -> f64 {
    let x = block(seed, index, STREAM_NORMAL);
    // `u1` is in (0, 1] so that its logarithm is finite.
    let u1 = (bits53(x[0], x[1]) + 1) as f64 * TWO_POW_M53;
    let u2 = bits53(x[2], x[3]) as f64 * TWO_POW_M53;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// `n` uniform values in `[0, 1)`: element `i` is `uniform_at(seed, i)`.
pub fn uniform(seed: u64, n: usize) -> Vec<f64> {
    (0..n as u64).map(|i| uniform_at(seed, i)).collect()
}

/// `n` standard-normal values: element `i` is `normal_at(seed, i)`.
pub fn normal(seed: u64, n: usize) -> Vec<f64> {
    (0..n as u64).map(|i| normal_at(seed, i)).collect()
}

/// 64-bit FNV-1a over `bytes`, continuing from `hash`.
fn fnv1a64(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
    }
    hash
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;

/// One SplitMix64 step from state `x` (add the golden gamma, then mix).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable per-name seed: FNV-1a 64 over the seed's 8 little-endian bytes
/// followed by the UTF-8 bytes of `path`, finished with SplitMix64 so that
/// nearby inputs give unrelated seeds. Stable across versions and platforms.
pub fn derive_seed(seed: u64, path: &str) -> u64 {
    let h = fnv1a64(FNV_OFFSET, &seed.to_le_bytes());
    splitmix64(fnv1a64(h, path.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known-answer vectors from Random123's `tests/kat_vectors` (the three
    /// `philox4x32 10` lines: counter, key, expected output).
    #[test]
    fn philox_matches_random123_known_answers() {
        let cases: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            ([0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
            ([u32::MAX; 4], [u32::MAX; 2], [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (ctr, key, want) in cases {
            assert_eq!(philox4x32_10(ctr, key), want);
        }
    }

    #[test]
    fn uniform_of_seed_zero_index_zero_is_the_known_answer_mapped() {
        // From the first known answer: (0x6627e8d5 << 32 | 0xe169c58d) >> 11, times 2^-53.
        let bits = ((0x6627e8d5u64 << 32) | 0xe169c58d) >> 11;
        assert_eq!(uniform_at(0, 0), bits as f64 / (1u64 << 53) as f64);
    }

    #[test]
    fn values_depend_only_on_seed_and_index() {
        assert_eq!(uniform(7, 10)[..5], uniform(7, 5)[..]);
        assert_eq!(normal(7, 10)[..5], normal(7, 5)[..]);
        assert_ne!(uniform(7, 4), uniform(8, 4));
        assert_ne!(uniform(7, 4), normal(7, 4));
    }

    #[test]
    fn uniform_lies_in_the_unit_interval_with_the_right_moments() {
        let v = uniform(123, 20_000);
        assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        // Standard error of the mean is about 0.002; of the variance about 0.0006.
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.003, "variance {var}");
    }

    #[test]
    fn normal_has_zero_mean_and_unit_variance() {
        let v = normal(99, 20_000);
        assert!(v.iter().all(|x| x.is_finite()));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.04, "variance {var}");
    }

    #[test]
    fn fnv_and_splitmix_match_their_published_values() {
        // FNV-1a 64 test vectors (Fowler/Noll/Vo reference) and the first
        // output of SplitMix64 seeded with 0 (Vigna's reference implementation).
        assert_eq!(fnv1a64(FNV_OFFSET, b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(FNV_OFFSET, b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(FNV_OFFSET, b"foobar"), 0x85944171f73967e8);
        assert_eq!(splitmix64(0), 0xe220a8397b1dcdaf);
    }

    #[test]
    fn derived_seeds_are_stable_and_distinct() {
        let expected = splitmix64(fnv1a64(fnv1a64(FNV_OFFSET, &42u64.to_le_bytes()), b"l1.w"));
        assert_eq!(derive_seed(42, "l1.w"), expected);
        assert_ne!(derive_seed(42, "l1.w"), derive_seed(42, "l1.b"));
        assert_ne!(derive_seed(42, "l1.w"), derive_seed(43, "l1.w"));
    }
}
