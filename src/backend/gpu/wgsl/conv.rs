//! Convolutions (NHWC input, HWIO filter) and their two gradients, and 2-D
//! pooling and its gradient, as shaders of one thread per output element
//! (`f32`).
//!
//! Contract: each thread sums its products in the order the interpreter's
//! `ConvGeometry::for_each_tap` and `for_each_window` deliver them to that
//! element — a convolution's output its taps `i`, `j`, `c` ascending; an
//! input gradient its windows (output positions row-major), then the
//! output channels; a filter gradient the batch and output positions
//! row-major — so results differ from the interpreter's only by the
//! device's rounding of products and sums (fused or not). A filter
//! gradient over `SPREAD_FROM` positions or more with few filter elements
//! (`SPREAD_OUTPUTS`: a CNN's first layer) spreads each element over a
//! workgroup (its threads take every `GROUP`-th position, then add in a
//! fixed tree). Taps in the zero
//! padding are skipped. Max pooling's gradient goes to the first maximum
//! of each window (a NaN counting as the maximum), as the interpreter's.
//!
//! Example: the digits CNN's first layer, `[64, 8, 8, 1]` by `[3, 3, 1,
//! 16]` with "same" padding, is 65536 threads each summing 9 products.

use super::{per_element, Place, Shader, GROUP};
use crate::ir::kernel_desc::ConvPass;
use crate::ir::PoolKind;
use std::fmt::Write;

/// The most filter elements whose gradient spreads each over a workgroup:
/// fewer than four workgroups of one thread per element would leave most
/// of a GPU idle, while more keep it busy without the tree's barriers
/// (which cost lavapipe more than they save: a `[3, 3, 16, 32]` filter
/// gradient took 561 ms spread against 417 ms one thread per element).
const SPREAD_OUTPUTS: usize = 4 * GROUP as usize;

/// A convolution's shapes and attributes, as `AnchorOp::Conv` has them.
pub struct Conv {
    pub pass: ConvPass,
    pub input: [usize; 4],
    pub filter: [usize; 4],
    pub output: [usize; 4],
    pub stride: [usize; 2],
    pub padding: [usize; 4],
    pub dilation: [usize; 2],
    pub groups: usize,
}

/// The shader of `conv`, reading its two operands (in the op's order:
/// input and filter, output gradient and filter, input and output
/// gradient) and writing `out`.
pub fn conv(c: &Conv, [a, b, out]: [Place; 3], round: &str, label: &str) -> Option<Shader> {
    let [n, h, w, ch] = c.input;
    let [kh, kw, cg, o] = c.filter;
    let [_, oh, ow, _] = c.output;
    let (s, d, p) = (c.stride, c.dilation, c.padding);
    if c.groups == 0 || o % c.groups != 0 {
        return None;
    }
    let og = o / c.groups;
    let x_at = |iy: &str, ix: &str, chan: &str| format!("((b * {h}u + {iy}) * {w}u + {ix}) * {ch}u + {chan}");
    let w_at = |i: &str, j: &str, ci: &str, oc: &str| format!("(({i} * {kw}u + {j}) * {cg}u + {ci}) * {o}u + {oc}");
    let y_at = |oy: &str, ox: &str, oc: &str| format!("((b * {oh}u + {oy}) * {ow}u + {ox}) * {o}u + {oc}");
    let mut body = String::new();
    let count = match c.pass {
        ConvPass::Forward => {
            // One output element [b, oy, ox, oc].
            let _ = writeln!(
                body,
                "  let oc = i % {o}u;\n  let ox = (i / {o}u) % {ow}u;\n  let oy = (i / ({o}u * {ow}u)) % {oh}u;\n  let b = i / ({o}u * {ow}u * {oh}u);\n  let g = oc / {og}u;\n  var acc = 0.0;"
            );
            let _ = writeln!(body, "  for (var ti = 0u; ti < {kh}u; ti = ti + 1u) {{\n    let iy = i32(oy * {}u + ti * {}u) - {};\n    if (iy < 0 || iy >= {h}) {{ continue; }}", s[0], d[0], p[0]);
            let _ = writeln!(body, "    for (var tj = 0u; tj < {kw}u; tj = tj + 1u) {{\n      let ix = i32(ox * {}u + tj * {}u) - {};\n      if (ix < 0 || ix >= {w}) {{ continue; }}", s[1], d[1], p[2]);
            let _ = writeln!(
                body,
                "      for (var ci = 0u; ci < {cg}u; ci = ci + 1u) {{\n        acc = acc + bitcast<f32>({}) * bitcast<f32>({});\n      }}\n    }}\n  }}",
                a.at(&x_at("u32(iy)", "u32(ix)", &format!("g * {cg}u + ci"))),
                b.at(&w_at("ti", "tj", "ci", "oc"))
            );
            n * oh * ow * o
        }
        ConvPass::GradInput => {
            // One input element [b, iy, ix, chan]: every window it is in.
            let _ = writeln!(
                body,
                "  let chan = i % {ch}u;\n  let ix = (i / {ch}u) % {w}u;\n  let iy = (i / ({ch}u * {w}u)) % {h}u;\n  let b = i / ({ch}u * {w}u * {h}u);\n  let g = chan / {cg}u;\n  let ci = chan % {cg}u;\n  var acc = 0.0;"
            );
            let _ = writeln!(body, "  for (var oy = 0u; oy < {oh}u; oy = oy + 1u) {{\n    let ty = i32(iy) + {} - i32(oy * {}u);\n    if (ty < 0 || ty % {} != 0 || ty / {} >= {kh}) {{ continue; }}\n    let ti = u32(ty / {});", p[0], s[0], d[0], d[0], d[0]);
            let _ = writeln!(body, "    for (var ox = 0u; ox < {ow}u; ox = ox + 1u) {{\n      let tx = i32(ix) + {} - i32(ox * {}u);\n      if (tx < 0 || tx % {} != 0 || tx / {} >= {kw}) {{ continue; }}\n      let tj = u32(tx / {});", p[2], s[1], d[1], d[1], d[1]);
            let _ = writeln!(
                body,
                "      for (var k = 0u; k < {og}u; k = k + 1u) {{\n        let oc = g * {og}u + k;\n        acc = acc + bitcast<f32>({}) * bitcast<f32>({});\n      }}\n    }}\n  }}",
                a.at(&y_at("oy", "ox", "oc")),
                b.at(&w_at("ti", "tj", "ci", "oc"))
            );
            n * h * w * ch
        }
        ConvPass::GradFilter if n * oh * ow >= super::anchors::SPREAD_FROM && kh * kw * cg * o <= SPREAD_OUTPUTS => {
            // One filter element [ti, tj, ci, oc] per workgroup: its
            // threads split the batch and output positions (thread `t`
            // takes positions `t, t + GROUP, …` in row-major order), then
            // sum in a fixed tree.
            let outputs = kh * kw * cg * o;
            body.push_str(&super::workgroup_entry(outputs, "f32"));
            let _ = writeln!(
                body,
                "  let oc = i % {o}u;\n  let ci = (i / {o}u) % {cg}u;\n  let tj = (i / ({o}u * {cg}u)) % {kw}u;\n  let ti = i / ({o}u * {cg}u * {kw}u);\n  let g = oc / {og}u;\n  var acc = 0.0;"
            );
            let _ = writeln!(
                body,
                "  for (var q = t; q < {}u; q = q + {GROUP}u) {{\n    let b = q / {}u;\n    let oy = (q / {ow}u) % {oh}u;\n    let ox = q % {ow}u;\n    let iy = i32(oy * {}u + ti * {}u) - {};\n    let ix = i32(ox * {}u + tj * {}u) - {};\n    if (iy < 0 || iy >= {h} || ix < 0 || ix >= {w}) {{ continue; }}\n    acc = acc + bitcast<f32>({}) * bitcast<f32>({});\n  }}",
                n * oh * ow,
                oh * ow,
                s[0],
                d[0],
                p[0],
                s[1],
                d[1],
                p[2],
                a.at(&x_at("u32(iy)", "u32(ix)", &format!("g * {cg}u + ci"))),
                b.at(&y_at("oy", "ox", "oc"))
            );
            body.push_str(&super::tree(&|x: &str, y: &str| format!("{x} + {y}")));
            let _ = writeln!(body, "  {} = bitcast<u32>({});\n}}", out.at("i"), super::apply(round, "acc"));
            return Some(super::per_workgroup(outputs, &body, label));
        }
        ConvPass::GradFilter => {
            // One filter element [ti, tj, ci, oc]: every batch and output position.
            let _ = writeln!(
                body,
                "  let oc = i % {o}u;\n  let ci = (i / {o}u) % {cg}u;\n  let tj = (i / ({o}u * {cg}u)) % {kw}u;\n  let ti = i / ({o}u * {cg}u * {kw}u);\n  let g = oc / {og}u;\n  var acc = 0.0;"
            );
            let _ = writeln!(body, "  for (var b = 0u; b < {n}u; b = b + 1u) {{\n  for (var oy = 0u; oy < {oh}u; oy = oy + 1u) {{\n    let iy = i32(oy * {}u + ti * {}u) - {};\n    if (iy < 0 || iy >= {h}) {{ continue; }}", s[0], d[0], p[0]);
            let _ = writeln!(body, "    for (var ox = 0u; ox < {ow}u; ox = ox + 1u) {{\n      let ix = i32(ox * {}u + tj * {}u) - {};\n      if (ix < 0 || ix >= {w}) {{ continue; }}", s[1], d[1], p[2]);
            let _ = writeln!(
                body,
                "      acc = acc + bitcast<f32>({}) * bitcast<f32>({});\n    }}\n  }}\n  }}",
                a.at(&x_at("u32(iy)", "u32(ix)", &format!("g * {cg}u + ci"))),
                b.at(&y_at("oy", "ox", "oc"))
            );
            kh * kw * cg * o
        }
    };
    let _ = writeln!(body, "  {} = bitcast<u32>({});\n}}", out.at("i"), super::apply(round, "acc"));
    Some(per_element(count, &body, label))
}

/// A pooling's attributes, as `AnchorOp::Pool` has them.
pub struct Pool {
    pub grad: bool,
    pub kind: PoolKind,
    pub input: [usize; 4],
    pub output: [usize; 2],
    pub size: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 4],
}

/// The shader of a pooling (`x` → `out`) or of its gradient (`x`, the
/// output gradient `gy` → `out`, the input gradient).
pub fn pool(q: &Pool, x: Place, gy: Option<Place>, out: Place, round: &str, label: &str) -> Option<Shader> {
    let [n, h, w, c] = q.input;
    let [oh, ow] = q.output;
    let (k, s, p) = (q.size, q.stride, q.padding);
    // An average over a window wholly in the padding is an error in the
    // interpreter; such pools stay on the host.
    if q.kind == PoolKind::Avg && (p[0] >= k[0] || p[1] >= k[0] || p[2] >= k[1] || p[3] >= k[1]) {
        return None;
    }
    let x_at = |iy: &str, ix: &str| x.at(&format!("((b * {h}u + {iy}) * {w}u + {ix}) * {c}u + ch"));
    // The window of output position (oy, ox) as WGSL statements: its
    // maximum `m` (from -inf, NaN winning), sum and count of taps inside
    // the input, then the first tap equal to `m` (`first`, a flat
    // position; -1 for an empty window), as the interpreter finds them.
    let taps = |oy: &str, ox: &str, inner: &str| {
        format!(
            "    for (var ti = 0u; ti < {}u; ti = ti + 1u) {{\n      let wy = i32({oy} * {}u + ti) - {};\n      if (wy < 0 || wy >= {h}) {{ continue; }}\n      for (var tj = 0u; tj < {}u; tj = tj + 1u) {{\n        let wx = i32({ox} * {}u + tj) - {};\n        if (wx < 0 || wx >= {w}) {{ continue; }}\n        let v = bitcast<f32>({});\n{inner}      }}\n    }}\n",
            k[0], s[0], p[0], k[1], s[1], p[2], x_at("u32(wy)", "u32(wx)")
        )
    };
    let window = |oy: &str, ox: &str| {
        let mut s_ = String::from(
            "    var m = bitcast<f32>(0xff800000u);\n    var sum = 0.0;\n    var count = 0.0;\n    var first = -1;\n",
        );
        s_.push_str(&taps(
            oy,
            ox,
            "        m = max_nan(m, v);\n        sum = sum + v;\n        count = count + 1.0;\n",
        ));
        s_.push_str(&taps(oy, ox, &format!("        let hit = select(v == m, is_nan(v), is_nan(m));\n        if (first < 0 && hit) {{ first = wy * {w} + wx; }}\n")));
        s_
    };
    let mut body = String::new();
    let count = match (q.grad, gy) {
        (false, _) => {
            let _ = writeln!(body, "  let ch = i % {c}u;\n  let ox = (i / {c}u) % {ow}u;\n  let oy = (i / ({c}u * {ow}u)) % {oh}u;\n  let b = i / ({c}u * {ow}u * {oh}u);\n  {{");
            body.push_str(&window("oy", "ox"));
            let result = match q.kind {
                PoolKind::Max => "m",
                PoolKind::Avg => "sum / count",
            };
            let _ = writeln!(body, "    {} = bitcast<u32>({});\n  }}\n}}", out.at("i"), super::apply(round, result));
            n * oh * ow * c
        }
        (true, Some(gy)) => {
            let _ = writeln!(
                body,
                "  let ch = i % {c}u;\n  let ix = (i / {c}u) % {w}u;\n  let iy = (i / ({c}u * {w}u)) % {h}u;\n  let b = i / ({c}u * {w}u * {h}u);\n  var acc = 0.0;\n  for (var oy = 0u; oy < {oh}u; oy = oy + 1u) {{\n  let ty = i32(iy) + {} - i32(oy * {}u);\n  if (ty < 0 || ty >= {}) {{ continue; }}\n  for (var ox = 0u; ox < {ow}u; ox = ox + 1u) {{\n  let tx = i32(ix) + {} - i32(ox * {}u);\n  if (tx < 0 || tx >= {}) {{ continue; }}",
                p[0], s[0], k[0], p[2], s[1], k[1]
            );
            body.push_str(&window("oy", "ox"));
            let g = format!("bitcast<f32>({})", gy.at(&format!("((b * {oh}u + oy) * {ow}u + ox) * {c}u + ch")));
            let _ = match q.kind {
                PoolKind::Max => writeln!(body, "    if (first == i32(iy) * {w} + i32(ix)) {{ acc = acc + {g}; }}"),
                PoolKind::Avg => writeln!(body, "    acc = acc + {g} / count;"),
            };
            let _ = writeln!(body, "  }}\n  }}\n  {} = bitcast<u32>({});\n}}", out.at("i"), super::apply(round, "acc"));
            n * h * w * c
        }
        (true, None) => return None,
    };
    Some(per_element(count, &body, label))
}
