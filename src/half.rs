//! IEEE binary16 (`f16`) and bfloat16 (`bf16`) rounding by bit manipulation.
//!
//! The interpreter stores `f16`/`bf16` tensors as `f32` values that are
//! always exactly representable in the narrow type; every op computes in
//! `f32` and rounds its result with `round_f16` / `round_bf16`
//! (round to nearest, ties to even; overflow goes to infinity; NaN stays a
//! quiet NaN). Values that start wider than `f32` (`f64`, `i64`) are first
//! narrowed with round-to-odd (`f64_to_f32_odd`, `i64_to_f32_odd`), which
//! makes the following rounding to 16 bits exactly as if done in one step.
//!
//! Example: `round_f16(1.0 + 2f32.powi(-11)) == 1.0` (a tie goes to even),
//! `round_bf16(1.0 + 2f32.powi(-8)) == 1.0`.

/// Bits of the `f16` nearest to `x` (ties to even).
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x007f_ffff;
    if exp == 0xff {
        // Infinity stays infinity; NaN keeps its top payload bits and is made quiet.
        return if man == 0 { sign | 0x7c00 } else { sign | 0x7e00 | (man >> 13) as u16 };
    }
    // The exponent re-biased for f16 (bias 15 instead of 127).
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // The result is an f16 subnormal (or zero): its unit is 2^-24, and
        // the f32 significand (with its implicit bit) is shifted down to it.
        if e < -10 {
            return sign;
        }
        let m = man | 0x0080_0000;
        let shift = (14 - e) as u32;
        let kept = m >> shift;
        let rest = m & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        let rounded = if rest > half || (rest == half && kept & 1 == 1) { kept + 1 } else { kept };
        // A carry out of the subnormal range lands exactly on the smallest normal.
        return sign | rounded as u16;
    }
    let h = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    // A carry may ripple into the exponent, up to infinity, which is correct.
    let rounded = if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) { h + 1 } else { h };
    sign | rounded as u16
}

/// The `f32` value of `f16` bits (exact).
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x03ff);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: man · 2^-24, exact in f32.
            let v = man as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Bits of the `bf16` nearest to `x` (ties to even).
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16) | 0x0040;
    }
    // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even;
    // a carry into the exponent (up to infinity) is the correct result.
    let bias = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(bias) >> 16) as u16
}

/// The `f32` value of `bf16` bits (exact).
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// `x` rounded to the nearest `f16`, as an `f32`.
pub fn round_f16(x: f32) -> f32 {
    f16_bits_to_f32(f32_to_f16_bits(x))
}

/// `x` rounded to the nearest `bf16`, as an `f32`.
pub fn round_bf16(x: f32) -> f32 {
    bf16_bits_to_f32(f32_to_bf16_bits(x))
}

/// Makes an inexact truncation odd: moves `t` (the nearest-even result of
/// narrowing `x`) one step toward zero if it overshot, then sets its last bit.
fn to_odd(t: f32, overshot: bool) -> f32 {
    let mut bits = t.to_bits();
    if overshot {
        // Decrementing the magnitude bits moves one ulp toward zero (from
        // infinity to the largest finite value, too).
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// `x` narrowed to `f32` with round-to-odd: exact values stay, inexact ones
/// become the truncation with its last bit set.
pub fn f64_to_f32_odd(x: f64) -> f32 {
    let t = x as f32;
    if x.is_nan() || f64::from(t) == x {
        return t;
    }
    to_odd(t, f64::from(t).abs() > x.abs())
}

/// `v` converted to `f32` with round-to-odd (see `f64_to_f32_odd`).
pub fn i64_to_f32_odd(v: i64) -> f32 {
    let t = v as f32;
    // An f32 holding a converted i64 is an integer of magnitude ≤ 2^63, so
    // the comparison in i128 is exact.
    let back = t as f64 as i128;
    if back == i128::from(v) {
        return t;
    }
    to_odd(t, back.abs() > i128::from(v).abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_rounds_to_nearest_even() {
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even 1.
        assert_eq!(round_f16(1.0 + 2f32.powi(-11)), 1.0);
        // 1 + 3·2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
        assert_eq!(round_f16(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        // Just above a tie rounds up.
        assert_eq!(round_f16(1.0 + 2f32.powi(-11) + 2f32.powi(-20)), 1.0 + 2f32.powi(-10));
        // 0.1 in f16 is 0x2e66 = 0.0999755859375 (IEEE half-precision tables).
        assert_eq!(f32_to_f16_bits(0.1), 0x2e66);
        assert_eq!(round_f16(0.1), 0.099_975_586);
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
    }

    #[test]
    fn f16_handles_the_edges_of_its_range() {
        assert_eq!(round_f16(65504.0), 65504.0);
        // 65520 is the midpoint between 65504 and the next step (65536): ties
        // to even go up, which overflows to infinity.
        assert_eq!(round_f16(65519.0), 65504.0);
        assert_eq!(round_f16(65520.0), f32::INFINITY);
        assert_eq!(round_f16(-1e10), f32::NEG_INFINITY);
        // The smallest subnormal is 2^-24; half of it ties to zero, more rounds up.
        assert_eq!(round_f16(2f32.powi(-24)), 2f32.powi(-24));
        assert_eq!(round_f16(2f32.powi(-25)), 0.0);
        assert_eq!(round_f16(1.5 * 2f32.powi(-25)), 2f32.powi(-24));
        assert_eq!(round_f16(3.0 * 2f32.powi(-25)), 2.0 * 2f32.powi(-24));
        // The largest subnormal rounds up into the smallest normal, 2^-14.
        assert_eq!(round_f16(2f32.powi(-14) - 2f32.powi(-26)), 2f32.powi(-14));
        assert_eq!(f32_to_f16_bits(-0.0), 0x8000);
        assert!(round_f16(f32::NAN).is_nan());
        assert_eq!(round_f16(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn f16_round_trips_every_finite_bit_pattern() {
        for h in 0..=u16::MAX {
            let x = f16_bits_to_f32(h);
            if x.is_nan() {
                assert!(round_f16(x).is_nan());
            } else {
                assert_eq!(f32_to_f16_bits(x), h, "bits {h:#06x}");
            }
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8)), 1.0);
        assert_eq!(round_bf16(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 1.0 + 2f32.powi(-7));
        // 0.1f32 is 0x3dcccccd; bf16 keeps 0x3dcd (the dropped 0xcccd > 0x8000 rounds up).
        assert_eq!(f32_to_bf16_bits(0.1), 0x3dcd);
        assert_eq!(round_bf16(f32::MAX), f32::INFINITY);
        assert!(round_bf16(f32::NAN).is_nan());
        for h in 0..=u16::MAX {
            let x = bf16_bits_to_f32(h);
            if !x.is_nan() {
                assert_eq!(f32_to_bf16_bits(x), h);
            }
        }
    }

    proptest::proptest! {
        /// The rounded value is at least as close as either f16 neighbor, and
        /// on a tie it has an even significand.
        #[test]
        fn f16_rounding_is_nearest(x in -65000.0f32..65000.0) {
            let h = f32_to_f16_bits(x);
            let d = |bits: u16| (f64::from(f16_bits_to_f32(bits)) - f64::from(x)).abs();
            for n in [h.wrapping_add(1), h.wrapping_sub(1)] {
                if f16_bits_to_f32(n).is_finite() && (n ^ h) & 0x8000 == 0 {
                    proptest::prop_assert!(d(h) < d(n) || (d(h) == d(n) && h & 1 == 0));
                }
            }
        }
    }

    #[test]
    fn round_to_odd_avoids_double_rounding() {
        // 1 + 2^-11 + 2^-40 lies just above an f16 tie; narrowing to f32 with
        // nearest-even would land on the tie and then round down.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(round_f16(x as f32), 1.0);
        assert_eq!(round_f16(f64_to_f32_odd(x)), 1.0 + 2f32.powi(-10));
        assert_eq!(f64_to_f32_odd(0.5), 0.5);
        assert_eq!(f64_to_f32_odd(-1e300), -f32::MAX);
        // At 2^40 the bf16 step is 2^33, so 2^40 + 2^32 is a tie; one more
        // is below the f32 step (2^17), so nearest-even f32 lands on the tie.
        let v: i64 = (1 << 40) + (1 << 32) + 1;
        assert_eq!(round_bf16(v as f32), 2f32.powi(40));
        assert_eq!(round_bf16(i64_to_f32_odd(v)), 2f32.powi(40) + 2f32.powi(33));
        assert_eq!(i64_to_f32_odd(-7), -7.0);
    }
}
