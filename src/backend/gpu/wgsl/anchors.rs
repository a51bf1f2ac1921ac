//! The shaders of kernel anchors: matrix products (workgroup-memory tiles,
//! a register block of outputs per thread), reductions (one thread an
//! output, or a workgroup an output with a fixed tree), argmax (one thread
//! an output, in index order), layout ops (transposes, slices,
//! pads, concatenations), gathers and scatter-adds (with an error flag),
//! and word copies (a training step's carried values).
//!
//! Contract: each returns `None` for what it has no template for (the
//! target then leaves the kernel to the host); values are `f32` unless a
//! function says otherwise. A product sums `k` in ascending order per
//! output; a reduction in an order fixed by the shape (`reduce`); argmax
//! takes the first maximum, a NaN counting as the maximum (the first NaN
//! wins), as the interpreter's `argmax_lanes`.
//!
//! Example: `matmul(1, 64, 784, 256, …)` is a grid of 4 x 1 x 1
//! workgroups of 16 x 16 threads, each thread summing a 4 x 4 block of the
//! product in registers while stepping through `k` by tiles of 16.

use super::{per_element, Place, Shader, GROUP, PRELUDE};
use crate::ir::ReduceOp;
use std::fmt::Write;

/// A product's threads per workgroup along each side, and the depth of
/// its tiles along `k`.
const TILE: usize = 16;
/// The side of the square of the product one workgroup computes (each
/// thread a `BLOCK / TILE` square of it).
const BLOCK: usize = 64;

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// `batch` products `[m, k] @ [k, n]` of `f32` values; `a_batch` and
/// `b_batch` are each operand's words between products (0: one matrix for
/// every product).
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    [a, b, c]: [Place; 3],
    [a_batch, b_batch]: [usize; 2],
    round: &str,
    label: &str,
) -> Option<Shader> {
    // More products than a grid has along z share it: each z slice takes
    // `products` of them, side by side along x (`bz` from both).
    let most = super::MAX_GROUPS as usize;
    let tiles = [n.div_ceil(BLOCK).max(1), m.div_ceil(BLOCK).max(1)];
    let products = batch.div_ceil(most).max(1);
    if tiles[0] * products > most || tiles[1] > most {
        return None;
    }
    let a_at = a.at(&format!("bz * {a_batch}u + row * {k}u + ka"));
    let b_at = b.at(&format!("bz * {b_batch}u + kb * {n}u + col"));
    let c_at = c.at(&format!("bz * {}u + row * {n}u + col", m * n));
    // Each workgroup computes a BLOCK x BLOCK tile of the product, each of
    // its TILE x TILE threads a PER x PER block of it in registers, over
    // BLOCK x TILE tiles of `a` and TILE x BLOCK tiles of `b` in workgroup
    // memory (every thread loads PER * PER elements of each).
    let (bz, tx) = match products {
        1 => ("  let bz = wg.z;".to_string(), "wg.x".to_string()),
        // The early return is the whole workgroup's, before any barrier.
        _ => (
            format!("  let bz = wg.z * {products}u + wg.x / {t}u;\n  if (bz >= {batch}u) {{ return; }}", t = tiles[0]),
            format!("(wg.x % {}u)", tiles[0]),
        ),
    };
    let (tile, block, per) = (TILE, BLOCK, BLOCK / TILE);
    let area = block * tile;
    let loads = area / (tile * tile);
    let acc = |i: &str, j: &str| format!("acc[{i} * {per}u + {j}]");
    let lines = [
        format!("var<workgroup> ta: array<f32, {area}>;"),
        format!("var<workgroup> tb: array<f32, {area}>;"),
        format!("@compute @workgroup_size({tile}, {tile})"),
        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {".into(),
        format!("  let row0 = wg.y * {block}u + l.y * {per}u;"),
        format!("  let col0 = {tx} * {block}u + l.x * {per}u;"),
        bz,
        format!("  let lid = l.y * {tile}u + l.x;"),
        format!("  var acc: array<f32, {}>;", per * per),
        format!("  for (var t = 0u; t < {k}u; t = t + {tile}u) {{"),
        format!("    for (var e = 0u; e < {loads}u; e = e + 1u) {{"),
        format!("      let idx = lid + e * {}u;", tile * tile),
        format!("      let row = wg.y * {block}u + idx / {tile}u;"),
        format!("      let ka = t + idx % {tile}u;"),
        "      var x = 0.0;".into(),
        format!("      if (row < {m}u && ka < {k}u) {{ x = bitcast<f32>({a_at}); }}"),
        "      ta[idx] = x;".into(),
        format!("      let kb = t + idx / {block}u;"),
        format!("      let col = {tx} * {block}u + idx % {block}u;"),
        "      var y = 0.0;".into(),
        format!("      if (kb < {k}u && col < {n}u) {{ y = bitcast<f32>({b_at}); }}"),
        "      tb[idx] = y;".into(),
        "    }".into(),
        "    workgroupBarrier();".into(),
        format!("    let last = min({tile}u, {k}u - t);"),
        "    for (var q = 0u; q < last; q = q + 1u) {".into(),
        format!("      for (var i = 0u; i < {per}u; i = i + 1u) {{"),
        format!("        let x = ta[(l.y * {per}u + i) * {tile}u + q];"),
        format!("        for (var j = 0u; j < {per}u; j = j + 1u) {{"),
        format!("          {} = {} + x * tb[q * {block}u + l.x * {per}u + j];", acc("i", "j"), acc("i", "j")),
        "        }".into(),
        "      }".into(),
        "    }".into(),
        "    workgroupBarrier();".into(),
        "  }".into(),
        format!("  for (var i = 0u; i < {per}u; i = i + 1u) {{"),
        format!("    for (var j = 0u; j < {per}u; j = j + 1u) {{"),
        "      let row = row0 + i;".into(),
        "      let col = col0 + j;".into(),
        format!(
            "      if (row < {m}u && col < {n}u) {{ {c_at} = bitcast<u32>({}); }}",
            super::apply(round, &acc("i", "j"))
        ),
        "    }".into(),
        "  }".into(),
        "}".into(),
    ];
    let source = format!("{PRELUDE}{}\n", lines.join("\n"));
    let groups = [(tiles[0] * products) as u32, tiles[1] as u32, batch.div_ceil(products).max(1) as u32];
    Some(Shader { label: label.to_string(), source, groups })
}

/// Reduced elements per output from which a reduction spreads each
/// output over a workgroup's threads (below it, one thread an output).
pub const SPREAD_FROM: usize = 256;

/// `op` over `axes` of an `f32` (or, with `int`, `i32`: wrapping sums and
/// products, no mean) value of `shape` at `x`, into `out`.
///
/// Short reductions take one thread an output, folding its elements in
/// row-major order. From `SPREAD_FROM` reduced elements an output takes a
/// workgroup of `GROUP` threads: thread `t` folds elements `t, t + GROUP,
/// …` in order, then the partial results meet in a fixed tree (`t` takes
/// `t + 128`, then `t + 64`, …), an order that depends on nothing the
/// device decides (not its subgroup size), so the same bits every run.
pub fn reduce(
    op: ReduceOp,
    int: bool,
    shape: &[usize],
    axes: &[usize],
    [x, out]: [Place; 2],
    round: &str,
    label: &str,
) -> Option<Shader> {
    let s = strides(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    let outputs: usize = kept.iter().map(|&d| shape[d]).product();
    let count: usize = axes.iter().map(|&d| shape[d]).product();
    let (init, combine) = match (op, int) {
        // An integer mean divides with the floor: not here.
        (ReduceOp::Mean, true) => return None,
        (ReduceOp::Sum | ReduceOp::Mean, _) => (if int { "0" } else { "0.0" }, "$a + $b"),
        (ReduceOp::Prod, _) => (if int { "1" } else { "1.0" }, "$a * $b"),
        (ReduceOp::Max, false) => ("bitcast<f32>(0xff800000u)", "max_nan($a, $b)"),
        (ReduceOp::Min, false) => ("bitcast<f32>(0x7f800000u)", "min_nan($a, $b)"),
        (ReduceOp::Max, true) => ("-2147483647 - 1", "max($a, $b)"),
        (ReduceOp::Min, true) => ("2147483647", "min($a, $b)"),
    };
    // `$a` and `$b` never occur in WGSL.
    let fold = |a: &str, b: &str| combine.replace("$a", a).replace("$b", b);
    let ty = if int { "i32" } else { "f32" };
    let spread = count >= SPREAD_FROM;
    // `i`: the output; `base`: its first element (kept dims, last first).
    let mut body = String::new();
    if spread {
        body.push_str(&super::workgroup_entry(outputs, ty));
    }
    let _ = writeln!(body, "  var r = i;\n  var base = 0u;");
    for &d in kept.iter().rev() {
        let _ = writeln!(body, "  base = base + (r % {}u) * {}u; r = r / {}u;", shape[d].max(1), s[d], shape[d].max(1));
    }
    let (first, by) = if spread { ("t", GROUP) } else { ("0u", 1) };
    let _ = writeln!(
        body,
        "  var acc: {ty} = {init};\n  for (var q = {first}; q < {count}u; q = q + {by}u) {{\n    var rq = q;\n    var at = base;"
    );
    for &d in axes.iter().rev() {
        let _ =
            writeln!(body, "    at = at + (rq % {}u) * {}u; rq = rq / {}u;", shape[d].max(1), s[d], shape[d].max(1));
    }
    let _ = writeln!(body, "    acc = {};\n  }}", fold("acc", &format!("bitcast<{ty}>({})", x.at("at"))));
    if spread {
        body.push_str(&super::tree(&fold));
    }
    if op == ReduceOp::Mean {
        let _ = writeln!(body, "  acc = acc / {};", super::f32_literal(count as f32));
    }
    let _ = writeln!(body, "  {} = bitcast<u32>({});\n}}", out.at("i"), super::apply(round, "acc"));
    Some(match spread {
        true => super::per_workgroup(outputs, &body, label),
        false => per_element(outputs, &body, label),
    })
}

/// The first maximum's index (`i32`) along `axis` of an `f32` (or, with
/// `int`, `i32`) value of `shape` at `x`, into `out`.
pub fn argmax(shape: &[usize], axis: usize, int: bool, [x, out]: [Place; 2], label: &str) -> Option<Shader> {
    let n = *shape.get(axis)?;
    if n == 0 || i32::try_from(n).is_err() {
        return None;
    }
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let value = |word: String| if int { format!("bitcast<i32>({word})") } else { format!("bitcast<f32>({word})") };
    let mut body = String::new();
    let _ = writeln!(
        body,
        "  let base = (i / {inner}u) * {n}u * {inner}u + i % {inner}u;\n  var best = 0u;\n  var top = {};\n  for (var q = 1u; q < {n}u; q = q + 1u) {{\n    if ({}) {{ break; }}\n    let v = {};\n    if ({} || v > top) {{ best = q; top = v; }}\n  }}\n  {} = bitcast<u32>(i32(best));\n}}",
        value(x.at("base")),
        if int { "false" } else { "is_nan(top)" },
        value(x.at(&format!("base + q * {inner}u"))),
        if int { "false" } else { "is_nan(v)" },
        out.at("i")
    );
    Some(per_element(outer * inner, &body, label))
}

/// The transpose of a one-word-per-element value of `shape` at `x`
/// (output axis `d` is input axis `perm[d]`), into `out`.
pub fn transpose(shape: &[usize], perm: &[usize], [x, out]: [Place; 2], label: &str) -> Option<Shader> {
    if perm.len() != shape.len() {
        return None;
    }
    let s = strides(shape);
    let n: usize = shape.iter().product();
    let mut body = String::new();
    let _ = writeln!(body, "  var r = i;\n  var at = 0u;");
    for d in (0..perm.len()).rev() {
        let size = shape[perm[d]].max(1);
        let _ = writeln!(body, "  at = at + (r % {size}u) * {}u; r = r / {size}u;", s[perm[d]]);
    }
    let _ = writeln!(body, "  {} = {};\n}}", out.at("i"), x.at("at"));
    Some(per_element(n, &body, label))
}

/// Copies `words` words from `from` to `to` (which must not overlap).
pub fn copy(words: usize, [from, to]: [Place; 2], label: &str) -> Shader {
    per_element(words, &format!("  {} = {};\n}}\n", to.at("i"), from.at("i")), label)
}

/// Which input element an output element of a layout op reads: WGSL that
/// sets `at` (and, for `pad` and `concat`, which value) from the output
/// coordinates `c0, c1, …` of the flat index `i` in `out_shape`.
fn coordinates(out_shape: &[usize]) -> String {
    let mut s = String::from("  var r = i;\n");
    for d in (0..out_shape.len()).rev() {
        let size = out_shape[d].max(1);
        let _ = writeln!(s, "  let c{d} = r % {size}u; r = r / {size}u;");
    }
    s
}

/// `x[start + k * step]` of a one-word-per-element value of `shape`, for
/// output coordinates `k` over `len` (a step may be negative).
pub fn slice(
    shape: &[usize],
    start: &[usize],
    step: &[i64],
    len: &[usize],
    [x, out]: [Place; 2],
    label: &str,
) -> Option<Shader> {
    let s = strides(shape);
    let n: usize = len.iter().product();
    let mut body = String::new();
    body.push_str(&coordinates(len));
    let terms: Vec<String> = (0..shape.len())
        .map(|d| {
            let (from, by) = (i32::try_from(start[d]).ok()?, i32::try_from(step[d]).ok()?);
            Some(format!("u32({from} + i32(c{d}) * {by}) * {}u", s[d]))
        })
        .collect::<Option<_>>()?;
    let at = if terms.is_empty() { "0u".to_string() } else { terms.join(" + ") };
    let _ = writeln!(body, "  {} = {};\n}}", out.at("i"), x.at(&at));
    Some(per_element(n, &body, label))
}

/// `x` of `shape` padded by `low` and `high` with the word `fill`.
pub fn pad(
    shape: &[usize],
    low: &[usize],
    high: &[usize],
    fill: u32,
    [x, out]: [Place; 2],
    label: &str,
) -> Option<Shader> {
    let s = strides(shape);
    let out_shape: Vec<usize> = (0..shape.len()).map(|d| shape[d] + low[d] + high[d]).collect();
    let n: usize = out_shape.iter().product();
    let mut body = String::new();
    body.push_str(&coordinates(&out_shape));
    let _ = writeln!(body, "  var inside = true;\n  var at = 0u;");
    for d in 0..shape.len() {
        let _ = writeln!(
            body,
            "  if (c{d} < {}u || c{d} >= {}u) {{ inside = false; }} else {{ at = at + (c{d} - {}u) * {}u; }}",
            low[d],
            low[d] + shape[d],
            low[d],
            s[d]
        );
    }
    let _ = writeln!(body, "  var v = {fill}u;\n  if (inside) {{ v = {}; }}\n  {} = v;\n}}", x.at("at"), out.at("i"));
    Some(per_element(n, &body, label))
}

/// The values `parts` (of `shapes`) joined along `axis`.
pub fn concat(shapes: &[Vec<usize>], axis: usize, parts: &[Place], out: Place, label: &str) -> Option<Shader> {
    let first = shapes.first()?;
    let mut out_shape = first.clone();
    *out_shape.get_mut(axis)? = shapes.iter().map(|s| s.get(axis).copied().unwrap_or(0)).sum();
    let n: usize = out_shape.iter().product();
    let mut body = String::new();
    body.push_str(&coordinates(&out_shape));
    let mut offset = 0;
    for (k, (shape, part)) in shapes.iter().zip(parts).enumerate() {
        let s = strides(shape);
        let at: Vec<String> = (0..shape.len())
            .map(|d| match d == axis {
                true => format!("(c{d} - {offset}u) * {}u", s[d]),
                false => format!("c{d} * {}u", s[d]),
            })
            .collect();
        let at = if at.is_empty() { "0u".to_string() } else { at.join(" + ") };
        let end = offset + shape[axis];
        let keyword = if k == 0 { "if" } else { "else if" };
        let _ = writeln!(body, "  {keyword} (c{axis} < {end}u) {{ {} = {}; }}", out.at("i"), part.at(&at));
        offset = end;
    }
    body.push_str("}\n");
    Some(per_element(n, &body, label))
}

/// `table` (of `shape`, one word an element) indexed along `axis` by the
/// `i32` `indices` (`count` of them). An index outside `[0, n)` reads as
/// zero and sets the word after `out` (the kernel's error flag, which the
/// unit clears before and reads after every run, and then asks the
/// interpreter for its error).
pub fn gather(
    shape: &[usize],
    axis: usize,
    count: usize,
    [table, indices, out]: [Place; 3],
    label: &str,
) -> Option<Shader> {
    let n = *shape.get(axis)?;
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let total = outer * count * inner;
    let mut body = String::new();
    let _ = writeln!(
        body,
        "  let k = i % {inner}u;\n  let p = (i / {inner}u) % {count}u;\n  let o = i / ({inner}u * {count}u);\n  let at = bitcast<i32>({});\n  if (at < 0 || at >= {n}) {{\n    {} = 1u;\n    {} = 0u;\n    return;\n  }}\n  {} = {};\n}}",
        indices.at("p"),
        out.at(&format!("{total}u")),
        out.at("i"),
        out.at("i"),
        table.at(&format!("(o * {n}u + u32(at)) * {inner}u + k"))
    );
    Some(per_element(total, &body, label))
}

/// Zeros of `[outer, dim, inner]` with every `f32` row of `updates`
/// (`[outer, count, inner]`) added at its `i32` index, in index order; an
/// index outside `[0, dim)` sets the word after `out`, as `gather`.
pub fn scatter_add(
    [outer, dim, inner]: [usize; 3],
    count: usize,
    [indices, updates, out]: [Place; 3],
    round: &str,
    label: &str,
) -> Option<Shader> {
    let total = outer * dim * inner;
    let mut body = String::new();
    let _ = writeln!(
        body,
        "  let k = i % {inner}u;\n  let d = (i / {inner}u) % {dim}u;\n  let o = i / ({inner}u * {dim}u);\n  var acc = 0.0;\n  for (var p = 0u; p < {count}u; p = p + 1u) {{\n    let at = bitcast<i32>({});\n    if (at < 0 || at >= {dim}) {{ {} = 1u; }}\n    if (at == i32(d)) {{ acc = acc + bitcast<f32>({}); }}\n  }}\n  {} = bitcast<u32>({});\n}}",
        indices.at("p"),
        out.at(&format!("{total}u")),
        updates.at(&format!("(o * {count}u + p) * {inner}u + k")),
        out.at("i"),
        super::apply(round, "acc")
    );
    Some(per_element(total, &body, label))
}
