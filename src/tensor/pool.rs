//! 2-D max and average pooling over NHWC input, and its gradient.
//!
//! Contract: window `size`, `stride`, explicit padding `[top, bottom, left, right]`.
//! Padding positions never take part: max pooling takes the maximum of the
//! in-bounds window elements (so padding never wins, NaN propagates), and
//! average pooling divides the sum of the in-bounds elements by their count
//! (TensorFlow's `SAME` behavior; PyTorch's `count_include_pad=False`).
//! Sums accumulate in the storage type in row-major window order. Integer
//! averages use floor division; averaging `bool` is a runtime error.
//! `pool2d_grad` is the adjoint: max pooling routes each window's gradient
//! to the window's first maximal element (the one the forward fold keeps),
//! average pooling spreads `gy / count` over the in-bounds elements;
//! overlapping windows accumulate.
//!
//! Example: max pooling `-[[1, 2, 3], [4, 5, 6], [7, 8, 9]]` with a 2x2 window,
//! stride 2 and padding `[0, 1, 0, 1]` gives `[[-1, -3], [-7, -9]]`.

use super::value::{array, array_from, flat, runtime, Data, Elem, Tensor};
use crate::diag::Diagnostic;
use crate::ir::infer::window_output;
use crate::ir::PoolKind;

/// Pooling attributes, as on `Op::Pool2d`.
#[derive(Clone, Copy, Debug)]
pub struct PoolParams {
    pub kind: PoolKind,
    pub size: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 4],
}

/// Calls `f(out_position, window)` for every output position `(n, y, x)`
/// of pooling `x` of shape `xs` into `ys`, in row-major order, with the
/// flat positions of channel 0 of the window's in-bounds input elements in
/// row-major window order; channel `ch` of the output at `out_position + ch`
/// reads `window[k] + ch`. Forward pooling and its gradient share this walk;
/// each output element folds its window in the same order as a walk over
/// single elements would, so the results do not depend on the grouping.
fn for_each_window(
    xs: &[usize],
    ys: &[usize],
    p: PoolParams,
    mut f: impl FnMut(usize, &[usize]),
) -> Result<(), Diagnostic> {
    let fits = xs.len() == 4
        && ys.len() == 4
        && ys[0] == xs[0]
        && ys[3] == xs[3]
        && window_output(xs[1], p.size[0], p.stride[0], 1, p.padding[0] + p.padding[1]) == Some(ys[1])
        && window_output(xs[2], p.size[1], p.stride[1], 1, p.padding[2] + p.padding[3]) == Some(ys[2]);
    if !fits {
        return Err(Diagnostic::internal(format!("interpreter: pooling {xs:?} into {ys:?} ({p:?})")));
    }
    let [n, h, w, c] = [xs[0], xs[1], xs[2], xs[3]];
    let (oh, ow) = (ys[1], ys[2]);
    let mut window = Vec::with_capacity(p.size[0] * p.size[1]);
    let mut at = 0;
    for b in 0..n {
        for y in 0..oh {
            for xo in 0..ow {
                window.clear();
                for i in 0..p.size[0] {
                    let Some(iy) = (y * p.stride[0] + i).checked_sub(p.padding[0]).filter(|&r| r < h) else {
                        continue;
                    };
                    for j in 0..p.size[1] {
                        let Some(ix) = (xo * p.stride[1] + j).checked_sub(p.padding[2]).filter(|&q| q < w) else {
                            continue;
                        };
                        window.push(((b * h + iy) * w + ix) * c);
                    }
                }
                f(at, &window);
                at += c;
            }
        }
    }
    Ok(())
}

/// Pools `x` (`[N, H, W, C]`) into `out_shape` (`[N, OH, OW, C]`).
pub fn pool2d(x: &Tensor, p: PoolParams, out_shape: &[usize]) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => {
        let xv = flat(array::<T>(x)?);
        let mut out = vec![T::zero(); out_shape.iter().product()];
        pool_slices(&xv, x.shape(), out_shape, p, &mut out).map_err(|e| e.diagnostic("avg_pool2d", x.dtype()))?;
        Ok(T::wrap(array_from(out_shape, out)?))
    })
}

/// `pool2d` over row-major slices (`out` has `ys`'s element count); shared
/// with the JIT.
pub fn pool_slices<T: Elem>(
    xv: &[T],
    xs: &[usize],
    ys: &[usize],
    p: PoolParams,
    out: &mut [T],
) -> Result<(), PoolError> {
    let c = xs.get(3).copied().unwrap_or(0);
    let mut failed = false;
    for_each_window(xs, ys, p, |o, window| {
        let acc = &mut out[o..o + c];
        // Taps outermost, channels innermost: each output element still
        // folds its taps in window order.
        match p.kind {
            PoolKind::Max => {
                acc.fill(T::lowest());
                for &i in window {
                    for (a, &x) in acc.iter_mut().zip(&xv[i..i + c]) {
                        *a = a.max_nan(x);
                    }
                }
            }
            PoolKind::Avg => {
                acc.fill(T::zero());
                for &i in window {
                    for (a, &x) in acc.iter_mut().zip(&xv[i..i + c]) {
                        *a = a.add(x);
                    }
                }
                for a in acc.iter_mut() {
                    match a.div_count(window.len()) {
                        Some(v) => *a = v,
                        None => failed = true,
                    }
                }
            }
        }
    })
    .map_err(PoolError::Shapes)?;
    if failed {
        return Err(PoolError::CannotAverage);
    }
    Ok(())
}

/// Why pooling over slices failed.
#[derive(Debug)]
pub enum PoolError {
    /// The shapes do not fit the window (an internal error).
    Shapes(Diagnostic),
    /// Averaging a type without division (`bool`).
    CannotAverage,
}

impl PoolError {
    /// The diagnostic of `op` failing on `dtype` values.
    pub fn diagnostic(self, op: &str, dtype: crate::ir::DType) -> Diagnostic {
        match self {
            PoolError::Shapes(d) => d,
            PoolError::CannotAverage => runtime(format!("{op} cannot average {dtype} values")),
        }
    }
}

/// The gradient of `pool2d` with respect to `x`, given the gradient `gy` of
/// its result: max pooling sends each window's gradient to the window's first
/// element (row-major) equal to its maximum — the first NaN if the maximum is
/// NaN, and the element the forward fold keeps on ties; average pooling adds
/// `gy / count` to each of the window's `count` in-bounds elements.
/// Overlapping windows accumulate.
pub fn pool2d_grad(x: &Tensor, gy: &Tensor, p: PoolParams) -> Result<Data, Diagnostic> {
    with_elem!(x.data(), T => {
        let (xv, gv) = (flat(array::<T>(x)?), flat(array::<T>(gy)?));
        let mut gx = vec![T::zero(); xv.len()];
        pool_grad_slices(&xv, &gv, x.shape(), gy.shape(), p, &mut gx)
            .map_err(|e| e.diagnostic("avg_pool2d_grad", x.dtype()))?;
        Ok(T::wrap(array_from(x.shape(), gx)?))
    })
}

/// `pool2d_grad` over row-major slices into `gx` (zeroed first, `xs`'s
/// element count); shared with the JIT.
pub fn pool_grad_slices<T: Elem>(
    xv: &[T],
    gv: &[T],
    xs: &[usize],
    ys: &[usize],
    p: PoolParams,
    gx: &mut [T],
) -> Result<(), PoolError> {
    gx.fill(T::zero());
    let c = xs.get(3).copied().unwrap_or(0);
    let mut failed = false;
    // Per channel of one output position: the window's maximum, and the
    // window position of its first maximal element.
    let (mut max, mut first) = (vec![T::lowest(); c], vec![0usize; c]);
    for_each_window(xs, ys, p, |o, window| {
        let g = &gv[o..o + c];
        match p.kind {
            PoolKind::Max if !window.is_empty() => {
                max.fill(T::lowest());
                for &i in window {
                    for (m, &x) in max.iter_mut().zip(&xv[i..i + c]) {
                        *m = m.max_nan(x);
                    }
                }
                // Walking the window backwards, the last hit is the first
                // one in window order; every channel has one (its maximum
                // is one of its elements), and the loop has no branch.
                for (t, &i) in window.iter().enumerate().rev() {
                    for ((f, &m), &v) in first.iter_mut().zip(&max).zip(&xv[i..i + c]) {
                        let hit = if m.is_nan() { v.is_nan() } else { v == m };
                        *f = if hit { t } else { *f };
                    }
                }
                for ch in 0..c {
                    let i = window[first[ch]] + ch;
                    gx[i] = gx[i].add(g[ch]);
                }
            }
            PoolKind::Max => {}
            PoolKind::Avg => {
                for ch in 0..c {
                    match g[ch].div_count(window.len()) {
                        Some(share) => {
                            for &i in window {
                                gx[i + ch] = gx[i + ch].add(share);
                            }
                        }
                        None => failed = true,
                    }
                }
            }
        }
    })
    .map_err(PoolError::Shapes)?;
    if failed {
        return Err(PoolError::CannotAverage);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_near, dot, floats, normal, run};
    use crate::ir::{DType, Op, PoolKind};

    fn pool(kind: PoolKind, padding: [usize; 4]) -> Op {
        Op::Pool2d { kind, size: [2, 2], stride: [2, 2], padding }
    }

    /// `-[[1, 2, 3], [4, 5, 6], [7, 8, 9]]`: all negative, so a padding zero would win a max if counted.
    fn negative_nine() -> super::Tensor {
        floats(DType::F32, &[1, 3, 3, 1], &[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0, -9.0])
    }

    #[test]
    fn max_pool_padding_never_wins() {
        // Windows: {-1,-2,-4,-5} {-3,-6} {-7,-8} {-9}.
        let y = run(pool(PoolKind::Max, [0, 1, 0, 1]), &[&negative_nine()]);
        assert_eq!((y.shape(), y.to_f64_vec()), (&[1, 2, 2, 1][..], vec![-1.0, -3.0, -7.0, -9.0]));
        let y = run(pool(PoolKind::Max, [0; 4]), &[&negative_nine()]);
        assert_eq!(y.to_f64_vec(), vec![-1.0]);
    }

    #[test]
    fn avg_pool_divides_by_in_bounds_count() {
        // Same windows: -12/4, -9/2, -15/2, -9/1.
        let y = run(pool(PoolKind::Avg, [0, 1, 0, 1]), &[&negative_nine()]);
        assert_eq!(y.to_f64_vec(), vec![-3.0, -4.5, -7.5, -9.0]);
        // Padding at the top-left: windows {-1} {-2,-3} {-4,-7} {-5,-6,-8,-9}.
        let y = run(pool(PoolKind::Avg, [1, 0, 1, 0]), &[&negative_nine()]);
        assert_eq!(y.to_f64_vec(), vec![-1.0, -2.5, -5.5, -7.0]);
    }

    fn grad(kind: PoolKind, size: usize, stride: usize, padding: [usize; 4]) -> Op {
        Op::Pool2dGrad { kind, size: [size; 2], stride: [stride; 2], padding }
    }

    #[test]
    fn max_pool_grad_goes_to_the_first_maximum_and_accumulates() {
        // x = [[1, 5, 2], [3, 5, 0], [4, 1, 6]], 2x2 windows at stride 1:
        // {1,5,3,5} and {5,2,5,0} both pick the 5 at (0, 1) (the first of the
        // tie, as the forward fold keeps it); {3,5,4,1} picks (1, 1), {5,0,1,6} (2, 2).
        let x = floats(DType::F64, &[1, 3, 3, 1], &[1.0, 5.0, 2.0, 3.0, 5.0, 0.0, 4.0, 1.0, 6.0]);
        let gy = floats(DType::F64, &[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]);
        let gx = run(grad(PoolKind::Max, 2, 1, [0; 4]), &[&x, &gy]);
        assert_eq!(
            (gx.shape(), gx.to_f64_vec()),
            (&[1, 3, 3, 1][..], vec![0.0, 3.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 4.0])
        );
        // With padding, padded positions never receive anything: windows
        // {-1,-2,-4,-5} {-3,-6} {-7,-8} {-9} pick -1, -3, -7, -9.
        let gy = floats(DType::F32, &[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]);
        let gx = run(grad(PoolKind::Max, 2, 2, [0, 1, 0, 1]), &[&negative_nine(), &gy]);
        assert_eq!(gx.to_f64_vec(), vec![1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0, 0.0, 4.0]);
        // A NaN is the maximum (it propagates forward), so it takes the gradient.
        let x = floats(DType::F64, &[1, 2, 2, 1], &[1.0, f64::NAN, 3.0, f64::NAN]);
        let gx = run(grad(PoolKind::Max, 2, 1, [0; 4]), &[&x, &floats(DType::F64, &[1, 1, 1, 1], &[7.0])]);
        assert_eq!(gx.to_f64_vec(), vec![0.0, 7.0, 0.0, 0.0]);
    }

    #[test]
    fn avg_pool_grad_divides_by_the_in_bounds_count() {
        // Padding at the top-left: windows {(0,0)} {(0,1),(0,2)} {(1,0),(2,0)}
        // {(1,1),(1,2),(2,1),(2,2)} get 1/1, 2/2, 3/2 and 4/4 each.
        let gy = floats(DType::F32, &[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]);
        let gx = run(grad(PoolKind::Avg, 2, 2, [1, 0, 1, 0]), &[&negative_nine(), &gy]);
        assert_eq!(gx.to_f64_vec(), vec![1.0, 1.0, 1.0, 1.5, 1.0, 1.0, 1.5, 1.0, 1.0]);
        // Overlapping 2x1 windows {0, 1} {1, 2} at stride 1: the middle gets both halves.
        let x = floats(DType::F64, &[1, 3, 1, 1], &[0.0; 3]);
        let gy = floats(DType::F64, &[1, 2, 1, 1], &[2.0, 4.0]);
        let op = Op::Pool2dGrad { kind: PoolKind::Avg, size: [2, 1], stride: [1, 1], padding: [0; 4] };
        assert_eq!(run(op, &[&x, &gy]).to_f64_vec(), vec![1.0, 3.0, 2.0]);
    }

    #[test]
    fn pool_grads_are_the_adjoints_of_pooling() {
        // Average pooling is linear; max pooling is linear with its argmax
        // held fixed (y = S·x for the selection S the forward op picks), so
        // <pool(x), gy> = <x, pool_grad(x, gy)> holds for both.
        // (x shape, size, stride, padding)
        let cases: [([usize; 4], usize, usize, [usize; 4]); 5] = [
            ([1, 4, 4, 1], 2, 2, [0; 4]),
            ([2, 5, 4, 3], 3, 1, [1, 1, 1, 1]),
            ([1, 5, 5, 2], 3, 2, [1, 1, 0, 2]),
            ([1, 6, 7, 1], 2, 3, [1, 0, 0, 1]),
            ([1, 3, 3, 2], 3, 1, [2, 2, 2, 2]),
        ];
        for (k, (xs, size, stride, padding)) in cases.into_iter().enumerate() {
            for kind in [PoolKind::Avg, PoolKind::Max] {
                let x = normal(&xs, 10 * k as u64);
                let y = run(Op::Pool2d { kind, size: [size; 2], stride: [stride; 2], padding }, &[&x]);
                let gy = normal(y.shape(), 10 * k as u64 + 1);
                let gx = run(grad(kind, size, stride, padding), &[&x, &gy]);
                assert_near(dot(&y, &gy), dot(&x, &gx), &format!("case {k}, {kind:?}"));
            }
        }
    }
}
