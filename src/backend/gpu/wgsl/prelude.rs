//! The text every shader starts with: the unit's two storage buffers, the
//! helpers that give the interpreter's semantics (NaN tested by its bits,
//! NaN-propagating max/min, floor-mod, saturating casts, the roundings to
//! f16 and bf16), and a math library of its own.
//!
//! Contract: `exp_f`, `log_f`, `tanh_f`, `sigmoid_f`, `sin_f`, `cos_f`,
//! `erf_f` are within about 1e-6 relative of the interpreter's libm on any
//! device (tests/gpu_props.rs measures each), because they are the CPU
//! backend's Cephes polynomials (`backend::cpu::codegen::poly`) in plain
//! arithmetic, not the device's `exp` and `sin`, whose precision Vulkan
//! leaves loose and each driver picks.
//!
//! Example: `exp_f(1.0)` reduces `1 = 1 * ln 2 + r` and evaluates a
//! degree-6 polynomial of `r`, scaled by `2^1`.

/// The declarations every shader starts with: the two buffers, the
/// helpers that give the interpreter's semantics, and the math library.
pub const PRELUDE: &str = r#"@group(0) @binding(0) var<storage, read_write> io: array<u32>;
@group(0) @binding(1) var<storage, read_write> vals: array<u32>;
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn max_nan(a: f32, b: f32) -> f32 { if (is_nan(a) || is_nan(b)) { return nan(); } return select(a, b, b > a); }
fn min_nan(a: f32, b: f32) -> f32 { if (is_nan(a) || is_nan(b)) { return nan(); } return select(a, b, b < a); }
fn relu_f(x: f32) -> f32 { return select(0.0, x, x > 0.0 || is_nan(x)); }
fn sign_f(x: f32) -> f32 { if (x > 0.0) { return 1.0; } if (x < 0.0) { return -1.0; } return x; }
fn mod_f(a: f32, b: f32) -> f32 {
  let r = a - b * trunc(a / b);
  if (r == 0.0) { return select(0.0, -0.0, b < 0.0); }
  if ((r < 0.0) != (b < 0.0)) { return r + b; }
  return r;
}
// C's `powf` for every sign and special value: a negative base takes an
// integer exponent (the sign from its parity), else NaN (but -inf has
// every power, as -0 has); -0 is a negative base for the sign.
fn pow_f(a: f32, b: f32) -> f32 {
  if (b == 0.0 || a == 1.0) { return 1.0; }
  if (is_nan(a) || is_nan(b)) { return nan(); }
  let integer = trunc(b) == b;
  let odd = integer && abs(b % 2.0) == 1.0;
  let negative = (bitcast<u32>(a) >> 31u) == 1u;
  if (negative && !integer && a != 0.0 && a != bitcast<f32>(0xff800000u)) { return nan(); }
  let m = pow_positive(abs(a), b);
  return select(m, -m, negative && odd);
}
// `a^b` for `a >= 0` as `2^(b log2 a)` with `log2 a = e + log2 m`: the
// integer parts of `b e` and `b log2 m` split off and each product's
// rounding error (exact by `fma`) kept, so the fraction left for `exp`
// is accurate whatever the size of `b log2 a` (a plain `exp(b log a)`
// loses `|b log a|` ulps).
fn pow_positive(a: f32, b: f32) -> f32 {
  if (is_nan(a) || is_nan(b)) { return nan(); }
  let inf = bitcast<f32>(0x7f800000u);
  if (a == 1.0) { return 1.0; }
  if (a == 0.0) { return select(0.0, inf, b < 0.0); }
  if (a == inf) { return select(0.0, inf, b > 0.0); }
  if (abs(b) == inf) { return select(0.0, inf, (a > 1.0) == (b > 0.0)); }
  var x = a;
  var e = 0.0;
  if (x < 1.1754944e-38) { x = x * 8388608.0; e = -23.0; }
  let bits = bitcast<u32>(x);
  e = e + f32(i32(bits >> 23u) - 127);
  var m = bitcast<f32>((bits & 0x007fffffu) | 0x3f800000u);
  if (m > 1.4142135) { m = m * 0.5; e = e + 1.0; }
  let lg = log_f(m) * 1.442695;
  let t1 = b * e;
  let t2 = b * lg;
  let whole = t1 + t2;
  if (whole > 300.0) { return inf; }
  if (whole < -300.0) { return 0.0; }
  let n1 = round(t1);
  let n2 = round(t2);
  let f = ((t1 - n1) + (t2 - n2)) + (fma(b, e, -t1) + fma(b, lg, -t2));
  return ldexp(exp_f(f * 0.6931472), i32(n1 + n2));
}
fn to_i32(x: f32) -> i32 {
  if (is_nan(x)) { return 0; }
  if (x >= 2147483648.0) { return 2147483647; }
  if (x <= -2147483648.0) { return -2147483647 - 1; }
  return i32(x);
}
fn sign_i(x: i32) -> i32 { return select(select(0, -1, x < 0), 1, x > 0); }
fn round_bf16(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  if (is_nan(x)) { return bitcast<f32>((b & 0xffff0000u) | 0x00400000u); }
  return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
fn round_f16(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  let sign = (b >> 16u) & 0x8000u;
  let exp = i32((b >> 23u) & 0xffu);
  let man = b & 0x007fffffu;
  var h = 0u;
  if (exp == 0xff) {
    h = select(sign | 0x7e00u | (man >> 13u), sign | 0x7c00u, man == 0u);
  } else {
    let e = exp - 127 + 15;
    if (e >= 0x1f) {
      h = sign | 0x7c00u;
    } else if (e <= 0) {
      if (e < -10) {
        h = sign;
      } else {
        let m = man | 0x00800000u;
        let shift = u32(14 - e);
        let kept = m >> shift;
        let rest = m & ((1u << shift) - 1u);
        let half = 1u << (shift - 1u);
        h = sign | select(kept, kept + 1u, rest > half || (rest == half && (kept & 1u) == 1u));
      }
    } else {
      let k = (u32(e) << 10u) | (man >> 13u);
      let rest = man & 0x1fffu;
      h = sign | select(k, k + 1u, rest > 0x1000u || (rest == 0x1000u && (k & 1u) == 1u));
    }
  }
  // Back to f32, exactly.
  let hs = (h & 0x8000u) << 16u;
  let he = (h >> 10u) & 0x1fu;
  let hm = h & 0x03ffu;
  if (he == 0u) {
    let v = f32(hm) * bitcast<f32>(0x33800000u);
    return select(v, -v, hs != 0u);
  }
  if (he == 0x1fu) { return bitcast<f32>(hs | 0x7f800000u | (hm << 13u)); }
  return bitcast<f32>(hs | ((he + 127u - 15u) << 23u) | (hm << 13u));
}
// The math library: the CPU backend's polynomials (Cephes' `expf`,
// `logf`, `tanhf`, `sinf`, `cosf`, fused multiply-adds in each Horner
// step), so a result does not depend on the device's own `exp` or `sin`,
// whose Vulkan precision is loose (`sin` is only absolutely accurate, to
// 2^-11) and differs from driver to driver.
fn exp_f(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  if (x > 88.72284) { return bitcast<f32>(0x7f800000u); }
  if (x < -104.0) { return 0.0; }
  let n = round(x * 1.442695);
  let r = (x - n * 0.6933594) - n * -2.1219444e-4;
  var p = 1.9875691e-4;
  p = fma(p, r, 1.3981999e-3);
  p = fma(p, r, 8.333452e-3);
  p = fma(p, r, 4.1665796e-2);
  p = fma(p, r, 0.16666665);
  p = fma(p, r, 0.5);
  let y = p * (r * r) + r + 1.0;
  // 2^n in two halves, so a subnormal result is scaled once.
  let k = i32(n);
  let k1 = k >> 1u;
  return y * bitcast<f32>(u32(k1 + 127) << 23u) * bitcast<f32>(u32(k - k1 + 127) << 23u);
}
fn log_f(x0: f32) -> f32 {
  if (is_nan(x0)) { return x0; }
  if (x0 < 0.0) { return nan(); }
  if (x0 == 0.0) { return bitcast<f32>(0xff800000u); }
  if (x0 == bitcast<f32>(0x7f800000u)) { return x0; }
  var x = x0;
  var e = 0.0;
  // Subnormals (where the device keeps them) into the normal range first.
  if (x < 1.1754944e-38) { x = x * 8388608.0; e = -23.0; }
  let bits = bitcast<u32>(x);
  e = e + f32(i32(bits >> 23u) - 126);
  var m = bitcast<f32>((bits & 0x007fffffu) | 0x3f000000u);
  if (m < 0.70710677) { m = m + m; e = e - 1.0; }
  let xr = m - 1.0;
  let z = xr * xr;
  var p = 7.0376836e-2;
  p = fma(p, xr, -1.1514610e-1);
  p = fma(p, xr, 1.1676999e-1);
  p = fma(p, xr, -1.2420141e-1);
  p = fma(p, xr, 1.4249323e-1);
  p = fma(p, xr, -1.6668057e-1);
  p = fma(p, xr, 2.0000714e-1);
  p = fma(p, xr, -2.4999994e-1);
  p = fma(p, xr, 3.3333331e-1);
  var y = p * xr * z;
  y = y + e * -2.1219444e-4;
  y = y + z * -0.5;
  return (xr + y) + e * 0.6933594;
}
fn tanh_f(x: f32) -> f32 {
  if (is_nan(x) || x == 0.0) { return x; }
  let ax = abs(x);
  if (ax < 0.625) {
    let z = x * x;
    var p = -5.7049886e-3;
    p = fma(p, z, 2.063909e-2);
    p = fma(p, z, -5.3739716e-2);
    p = fma(p, z, 1.3331442e-1);
    p = fma(p, z, -3.333328e-1);
    return p * z * x + x;
  }
  let big = 1.0 - 2.0 / (exp_f(ax + ax) + 1.0);
  return select(big, -big, x < 0.0);
}
fn sigmoid_f(x: f32) -> f32 { return 1.0 / (1.0 + exp_f(-x)); }
// log1p and expm1 by series near 0, not by the classic `(1 + x) - 1`
// corrections: a driver may reassociate floats (lavapipe folds
// `(1.0 + x) - 1.0` to `x`), which would undo them.
fn log1p_f(x: f32) -> f32 {
  if (!(abs(x) < 0.25)) { return log_f(1.0 + x); }
  if (x == 0.0) { return x; }
  // 2 atanh(s) with s = x / (2 + x): odd powers of s to s^13.
  let s = x / (2.0 + x);
  let z = s * s;
  var p = 7.69230769e-02;
  p = fma(p, z, 9.09090909e-02);
  p = fma(p, z, 1.11111111e-01);
  p = fma(p, z, 1.42857143e-01);
  p = fma(p, z, 2.00000000e-01);
  p = fma(p, z, 3.33333333e-01);
  let t = s + s;
  return fma(t * z, p, t);
}
fn expm1_f(x: f32) -> f32 {
  if (!(abs(x) < 0.5)) { return exp_f(x) - 1.0; }
  if (x == 0.0) { return x; }
  // x + x^2 (1/2! + x/3! + ... + x^9/11!).
  var p = 2.50521084e-08;
  p = fma(p, x, 2.75573192e-07);
  p = fma(p, x, 2.75573192e-06);
  p = fma(p, x, 2.48015873e-05);
  p = fma(p, x, 1.98412698e-04);
  p = fma(p, x, 1.38888889e-03);
  p = fma(p, x, 8.33333333e-03);
  p = fma(p, x, 4.16666667e-02);
  p = fma(p, x, 1.66666667e-01);
  p = fma(p, x, 5.00000000e-01);
  return fma(x * x, p, x);
}
fn erf_f(x: f32) -> f32 {
  let ax = abs(x);
  if (ax < 0.5) {
    // The Maclaurin series, to x^15 (the next term is below 1e-9 of it).
    let z = x * x;
    var p = -1.4925650e-05;
    p = fma(p, z, 1.2055333e-04);
    p = fma(p, z, -8.5483270e-04);
    p = fma(p, z, 5.2239776e-03);
    p = fma(p, z, -2.6866171e-02);
    p = fma(p, z, 1.1283792e-01);
    p = fma(p, z, -3.7612639e-01);
    p = fma(p, z, 1.1283792);
    return p * x;
  }
  // Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7, relative
  // below 3e-7 from 0.5 up).
  let t = 1.0 / (1.0 + 0.3275911 * ax);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp_f(-x * x);
  return select(-y, y, x >= 0.0);
}
// Cephes' `sinf`/`cosf`: the argument reduced by pi/4 in three parts (exact
// products), then an odd or even polynomial by octant. Accurate to about
// an ulp up to |x| = 8192; beyond, the reduction loses digits (the device's
// `sin` is no better there).
fn sincos_octant(ax: f32) -> vec2<f32> {
  var j = u32(ax * 1.2732395);
  var y = f32(j);
  if ((j & 1u) == 1u) { j = j + 1u; y = y + 1.0; }
  let r = ((ax - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
  return vec2<f32>(r, f32(j & 7u));
}
fn sin_poly(r: f32) -> f32 {
  let z = r * r;
  var p = -1.9515296e-4;
  p = fma(p, z, 8.3321609e-3);
  p = fma(p, z, -1.6666655e-1);
  return p * z * r + r;
}
fn cos_poly(r: f32) -> f32 {
  let z = r * r;
  var p = 2.4433157e-5;
  p = fma(p, z, -1.3887316e-3);
  p = fma(p, z, 4.1666646e-2);
  return p * z * z - 0.5 * z + 1.0;
}
fn sin_f(x: f32) -> f32 {
  if (is_nan(x) || abs(x) == bitcast<f32>(0x7f800000u)) { return nan(); }
  if (abs(x) > 8192.0) { return sin(x); }
  let o = sincos_octant(abs(x));
  var j = u32(o.y);
  var negative = x < 0.0;
  if (j > 3u) { negative = !negative; j = j - 4u; }
  var y = select(sin_poly(o.x), cos_poly(o.x), j == 1u || j == 2u);
  if (x == 0.0) { return x; }
  return select(y, -y, negative);
}
fn cos_f(x: f32) -> f32 {
  if (is_nan(x) || abs(x) == bitcast<f32>(0x7f800000u)) { return nan(); }
  if (abs(x) > 8192.0) { return cos(x); }
  let o = sincos_octant(abs(x));
  var j = u32(o.y);
  var negative = false;
  if (j > 3u) { j = j - 4u; negative = true; }
  if (j > 1u) { negative = !negative; }
  let y = select(cos_poly(o.x), sin_poly(o.x), j == 1u || j == 2u);
  return select(y, -y, negative);
}
"#;
