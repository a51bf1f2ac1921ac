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
//! bits on every run); NaN is tested by its bits, never by `x != x`, which
//! WGSL lets a compiler fold away. The math functions are the shaders' own
//! (`prelude`), within 1e-6 of the interpreter's libm on any device. A
//! reduction folds in an order fixed by the shader alone (one thread an
//! output, or a workgroup's threads and then a fixed tree), so it is
//! deterministic whatever the device's subgroup size. What has no
//! template here (`emit` returns `None`) the target leaves to the host
//! (`super::target`), so the plan says so before anything runs.
//!
//! Layout: `prelude` (the buffers, helpers and math library every shader
//! starts with), `elementwise` (a `Spec`'s loop nest), `anchors` (products,
//! reductions, argmax, transposes, slices, pads, concatenations, copies),
//! `conv` (convolutions and pooling, with their gradients).
//!
//! Example: the epilogue `relu(p + b)` of a `64x784 @ 784x256` product is
//! one shader of 16384 threads loading `p` from `vals` and `b` (a splat
//! along the rows) from `io`, and storing `bitcast<u32>(max)` to `vals`.

pub mod anchors;
pub mod conv;
pub mod elementwise;
mod prelude;

pub use prelude::PRELUDE;

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
    grid((n as u64).div_ceil(GROUP as u64) as usize)
}

/// A grid of `groups` workgroups (at least one), two-dimensional beyond
/// 65535: a shader numbers its workgroup `wg.y * nwg.x + wg.x` and returns
/// past the end.
pub fn grid(groups: usize) -> [u32; 3] {
    let groups = (groups as u64).max(1);
    let x = groups.min(MAX_GROUPS as u64);
    [x as u32, groups.div_ceil(x) as u32, 1]
}

/// The entry point of a shader with one workgroup per output of
/// `outputs`: the output `i` (the workgroup's, over a grid that may be
/// two-dimensional), the thread `t`, and `partial`, the workgroup's
/// `GROUP` values of type `ty` for `tree`.
pub fn workgroup_entry(outputs: usize, ty: &str) -> String {
    format!(
        "var<workgroup> partial: array<{ty}, {GROUP}>;\n@compute @workgroup_size({GROUP})\nfn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{\n  let i = wg.y * nwg.x + wg.x;\n  if (i >= {outputs}u) {{ return; }}\n"
    )
}

/// Statements that fold each thread's `acc` over the workgroup in a fixed
/// tree (`t` takes `t + GROUP / 2`, then `t + GROUP / 4`, …), leaving the
/// result in `acc` of thread 0 and returning from the others. `fold(a, b)`
/// is the WGSL of combining two values. Every thread reaches each barrier:
/// a `workgroup_entry` returns early only for a whole workgroup.
pub fn tree(fold: &dyn Fn(&str, &str) -> String) -> String {
    let mut s = String::from("  partial[t] = acc;\n  workgroupBarrier();\n");
    let mut half = GROUP / 2;
    while half > 0 {
        s.push_str(&format!(
            "  if (t < {half}u) {{ partial[t] = {}; }}\n  workgroupBarrier();\n",
            fold("partial[t]", &format!("partial[t + {half}u]"))
        ));
        half /= 2;
    }
    s.push_str("  if (t != 0u) { return; }\n  acc = partial[0];\n");
    s
}

/// A shader of one workgroup per output: the prelude and `body`, which
/// starts with a `workgroup_entry`.
pub fn per_workgroup(outputs: usize, body: &str, label: &str) -> Shader {
    Shader { label: label.to_string(), source: format!("{PRELUDE}{body}"), groups: grid(outputs) }
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
