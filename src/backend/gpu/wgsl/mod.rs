//! WGSL from the shared kernel description (`ir::kernel_desc`): each part
//! and anchor of a kernel becomes one compute shader over the unit's two
//! storage buffers — `io` (the unit's inputs, which a training step's
//! parameters and optimizer states stay in between steps) and `vals`
//! (every value the unit computes) — both `array<u32>`, each value at a
//! word offset baked into the shader (`Place`). `f32` and `i32` values are
//! their bits, a `bool` one word (0 or 1), an `f16` or `bf16` value the
//! bits of the `f32` it is exactly (as the interpreter keeps it), rounded
//! to its type by every op that computes one (`round_f16`, `round_bf16`:
//! the interpreter's `crate::half`, bit for bit).
//!
//! Contract: a shader computes what the reference interpreter computes, up
//! to the rounding of the device's `exp`, `log`, `tanh`, … and the order
//! of a product's sums (ascending `k` for each output, so the same
//! bits on every run and any device with the same math library); NaN is
//! tested by its bits, never by `x != x`, which WGSL lets a compiler fold
//! away. Every reduction sums in index order in one thread per output
//! (deterministic on any device whatever its subgroup size). What has no
//! template here (`emit` returns `None`) the target leaves to the host
//! (`super::target`), so the plan says so before anything runs.
//!
//! Layout: `elementwise` (a `Spec`'s loop nest), `anchors` (products,
//! reductions, argmax, transposes, slices, pads, concatenations, copies),
//! `conv` (convolutions and pooling, with their gradients).
//!
//! Example: the epilogue `relu(p + b)` of a `64x784 @ 784x256` product is
//! one shader of 16384 threads loading `p` from `vals` and `b` (a splat
//! along the rows) from `io`, and storing `bitcast<u32>(max)` to `vals`.

pub mod anchors;
pub mod conv;
pub mod elementwise;

/// Which buffer of the unit holds a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    Io,
    Vals,
}

/// Where a value lies: its buffer and its first word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    pub buf: Buf,
    pub word: u32,
}

impl Place {
    /// The WGSL array expression of word `index` (an expression) of this
    /// value.
    pub fn at(&self, index: &str) -> String {
        let buf = match self.buf {
            Buf::Io => "io",
            Buf::Vals => "vals",
        };
        format!("{buf}[{}u + {index}]", self.word)
    }
}

/// One compute shader and how many threads it runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Shader {
    /// What it computes (profiles, `--emit wgsl`).
    pub label: String,
    pub source: String,
    /// Workgroups along x, y, z.
    pub groups: [u32; 3],
}

/// Threads per workgroup of the one-thread-per-element shaders.
pub const GROUP: u32 = 256;
/// The most workgroups along one dimension (WebGPU's limit).
const MAX_GROUPS: u32 = 65535;

/// The declarations every shader starts with: the two buffers and the
/// helpers that give the interpreter's semantics.
pub const PRELUDE: &str = r#"@group(0) @binding(0) var<storage, read_write> io: array<u32>;
@group(0) @binding(1) var<storage, read_write> vals: array<u32>;
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn max_nan(a: f32, b: f32) -> f32 { if (is_nan(a) || is_nan(b)) { return nan(); } return select(a, b, b > a); }
fn min_nan(a: f32, b: f32) -> f32 { if (is_nan(a) || is_nan(b)) { return nan(); } return select(a, b, b < a); }
fn relu_f(x: f32) -> f32 { return select(0.0, x, x > 0.0 || is_nan(x)); }
fn sign_f(x: f32) -> f32 { if (x > 0.0) { return 1.0; } if (x < 0.0) { return -1.0; } return x; }
fn sigmoid_f(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }
fn tanh_f(x: f32) -> f32 { if (is_nan(x)) { return x; } return tanh(clamp(x, -15.0, 15.0)); }
fn log1p_f(x: f32) -> f32 { let u = 1.0 + x; if (u == 1.0) { return x; } return log(u) * x / (u - 1.0); }
fn expm1_f(x: f32) -> f32 {
  let u = exp(x);
  if (u == 1.0) { return x; }
  let um1 = u - 1.0;
  if (um1 == -1.0) { return -1.0; }
  if (u > 3.0e38) { return u; }
  return um1 * x / log(u);
}
fn erf_f(x: f32) -> f32 {
  // Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7).
  let t = 1.0 / (1.0 + 0.3275911 * abs(x));
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
  return select(-y, y, x >= 0.0);
}
fn mod_f(a: f32, b: f32) -> f32 {
  let r = a - b * trunc(a / b);
  if (r == 0.0) { return select(0.0, -0.0, b < 0.0); }
  if ((r < 0.0) != (b < 0.0)) { return r + b; }
  return r;
}
fn pow_f(a: f32, b: f32) -> f32 {
  if (b == 0.0) { return 1.0; }
  if (a < 0.0 && trunc(b) == b) {
    let m = pow(-a, b);
    return select(m, -m, abs(b % 2.0) == 1.0);
  }
  if (a == 0.0) { return select(0.0, bitcast<f32>(0x7f800000u), b < 0.0); }
  return pow(a, b);
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
"#;

/// A shader of one thread per element of `n`: the prelude, the entry point
/// (`element_entry`: the flat index `i`) and `body`, the statements after
/// it up to the entry's closing brace.
pub fn per_element(n: usize, body: &str, label: &str) -> Shader {
    Shader {
        label: label.to_string(),
        source: format!("{PRELUDE}{}{body}", element_entry(n)),
        groups: element_groups(n),
    }
}

/// The entry point of a shader with one thread per element of `n`: the
/// flat index `i` over a grid that may be two-dimensional (more than
/// 65535 workgroups), returning past the end.
fn element_entry(n: usize) -> String {
    format!(
        "@compute @workgroup_size({GROUP})\nfn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{\n  let i = (wg.y * nwg.x + wg.x) * {GROUP}u + li;\n  if (i >= {n}u) {{ return; }}\n"
    )
}

/// The workgroups of an `element_entry` shader over `n` elements.
fn element_groups(n: usize) -> [u32; 3] {
    let groups = (n as u64).div_ceil(GROUP as u64).max(1);
    let x = groups.min(MAX_GROUPS as u64);
    [x as u32, groups.div_ceil(x) as u32, 1]
}

/// The WGSL function that rounds an `f32` result to `dtype` when it is a
/// half type, else the empty string (a call of it is then the identity).
pub fn rounding(dtype: crate::ir::DType) -> &'static str {
    match dtype {
        crate::ir::DType::F16 => "round_f16",
        crate::ir::DType::BF16 => "round_bf16",
        _ => "",
    }
}

/// `f(x)`, or `x` when `f` is empty (no rounding).
pub fn apply(f: &str, x: &str) -> String {
    match f.is_empty() {
        true => x.to_string(),
        false => format!("{f}({x})"),
    }
}

/// An `f32` literal in WGSL, by its bits (exact, and infinities too).
pub fn f32_literal(x: f32) -> String {
    format!("bitcast<f32>({}u)", x.to_bits())
}
