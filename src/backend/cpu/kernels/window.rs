//! Native slices, pads and concatenations for the CPU backend: each is one
//! or more strided block copies ([`BlockCopy`]) into a result that a pad
//! first fills with its value.
//!
//! Contract: [`Copies::apply`] writes what the interpreter's `slice`, `pad`
//! and `concat` write, element for element (copies and one fill value, so
//! every bit is kept), over elements of any type moved as [`Word`]s of
//! their width (`f32`, `i32`: `u32`; `f64`, `i64`: `u64`; `bool`: `u8`). A [`BlockCopy`] walks an index space `shape` and moves
//! `src[src_base + Σ i·src_strides] → dst[dst_base + Σ i·dst_strides]`
//! (source strides may be negative: a slice with a negative step); when both
//! innermost strides are 1 the innermost run is one `copy_from_slice`.
//!
//! Example: `pad(x: f32[2, 2], low = [1, 0], high = [0, 1])` is a fill of
//! nine zeros then one copy of shape `[2, 2]` from `x` (strides `[2, 1]`)
//! to offset 3 of the `[3, 3]` result (strides `[3, 1]`).

/// The unsigned word an element of its width moves as: copies only move
/// bits, so one loop serves every element type of that width.
pub(in crate::backend::cpu) trait Word: Copy + 'static {
    /// The word of the low bits of `bits` (a pad's value, `Copies::fill`).
    fn from_bits(bits: u64) -> Self;
}

macro_rules! word {
    ($($t:ty),*) => {
        $(impl Word for $t {
            fn from_bits(bits: u64) -> Self {
                // The low bits: the value's own bits at its width.
                bits as $t
            }
        })*
    };
}
word!(u8, u32, u64);

/// One strided block copy (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub(in crate::backend::cpu) struct BlockCopy {
    /// Which operand of the step it reads.
    pub(in crate::backend::cpu) operand: usize,
    pub(in crate::backend::cpu) shape: Vec<usize>,
    pub(in crate::backend::cpu) src_base: usize,
    pub(in crate::backend::cpu) src_strides: Vec<isize>,
    pub(in crate::backend::cpu) dst_base: usize,
    pub(in crate::backend::cpu) dst_strides: Vec<usize>,
}

/// A whole slice, pad or concatenation: an optional fill, then the copies.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::backend::cpu) struct Copies {
    /// A pad's value: the bits of one element, in the low bits.
    pub(in crate::backend::cpu) fill: Option<u64>,
    pub(in crate::backend::cpu) copies: Vec<BlockCopy>,
    /// The result's element count.
    pub(in crate::backend::cpu) len: usize,
}

/// Row-major strides of `shape`.
pub(in crate::backend::cpu) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

impl Copies {
    /// `slice(x, start, step, len)` of `x` of `shape`.
    pub(in crate::backend::cpu) fn slice(shape: &[usize], start: &[usize], step: &[i64], len: &[usize]) -> Copies {
        let from = strides(shape);
        let src_base = start.iter().zip(&from).map(|(s, f)| s * f).sum();
        let src_strides = step.iter().zip(&from).map(|(&s, &f)| s as isize * f as isize).collect();
        let copy = BlockCopy {
            operand: 0,
            shape: len.to_vec(),
            src_base,
            src_strides,
            dst_base: 0,
            dst_strides: strides(len),
        };
        Copies { fill: None, copies: vec![copy], len: len.iter().product() }
    }

    /// `pad(x, low, high, value)` of `x` of `shape`, `value` the bits of
    /// one element (`Copies::fill`).
    pub(in crate::backend::cpu) fn pad(shape: &[usize], low: &[usize], high: &[usize], value: u64) -> Copies {
        let out: Vec<usize> = shape.iter().zip(low.iter().zip(high)).map(|(n, (l, h))| n + l + h).collect();
        let to = strides(&out);
        let copy = BlockCopy {
            operand: 0,
            shape: shape.to_vec(),
            src_base: 0,
            src_strides: strides(shape).into_iter().map(|s| s as isize).collect(),
            dst_base: low.iter().zip(&to).map(|(l, t)| l * t).sum(),
            dst_strides: to,
        };
        Copies { fill: Some(value), copies: vec![copy], len: out.iter().product() }
    }

    /// `concat(xs, axis)` of operands of `shapes`.
    pub(in crate::backend::cpu) fn concat(shapes: &[Vec<usize>], axis: usize) -> Copies {
        let mut out = shapes.first().cloned().unwrap_or_default();
        if let Some(d) = out.get_mut(axis) {
            *d = shapes.iter().map(|s| s.get(axis).copied().unwrap_or(0)).sum();
        }
        let to = strides(&out);
        let mut at = 0;
        let copies = shapes
            .iter()
            .enumerate()
            .map(|(operand, shape)| {
                let copy = BlockCopy {
                    operand,
                    shape: shape.clone(),
                    src_base: 0,
                    src_strides: strides(shape).into_iter().map(|s| s as isize).collect(),
                    dst_base: at * to.get(axis).copied().unwrap_or(1),
                    dst_strides: to.clone(),
                };
                at += shape.get(axis).copied().unwrap_or(0);
                copy
            })
            .collect();
        Copies { fill: None, copies, len: out.iter().product() }
    }

    /// Writes the result into `dst` from the operands `srcs`.
    pub(in crate::backend::cpu) fn apply<W: Word>(&self, srcs: &[&[W]], dst: &mut [W]) {
        if let Some(v) = self.fill {
            dst[..self.len].fill(W::from_bits(v));
        }
        for c in &self.copies {
            c.run(srcs[c.operand], dst);
        }
    }
}

impl BlockCopy {
    /// Moves the block from `src` to `dst`.
    pub(in crate::backend::cpu) fn run<W: Copy>(&self, src: &[W], dst: &mut [W]) {
        let rank = self.shape.len();
        if self.shape.contains(&0) {
            return;
        }
        if rank == 0 {
            dst[self.dst_base] = src[self.src_base];
            return;
        }
        let last = self.shape[rank - 1];
        let contiguous = self.src_strides[rank - 1] == 1 && self.dst_strides[rank - 1] == 1;
        let mut index = vec![0usize; rank - 1];
        let (mut s, mut d) = (self.src_base as isize, self.dst_base);
        loop {
            if contiguous {
                let s0 = s as usize;
                dst[d..d + last].copy_from_slice(&src[s0..s0 + last]);
            } else {
                for j in 0..last {
                    dst[d + j * self.dst_strides[rank - 1]] =
                        src[(s + j as isize * self.src_strides[rank - 1]) as usize];
                }
            }
            // Advance the odometer over the outer axes.
            let mut a = rank - 1;
            loop {
                if a == 0 {
                    return;
                }
                a -= 1;
                index[a] += 1;
                s += self.src_strides[a];
                d += self.dst_strides[a];
                if index[a] < self.shape[a] {
                    break;
                }
                s -= self.src_strides[a] * self.shape[a] as isize;
                d -= self.dst_strides[a] * self.shape[a];
                index[a] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Copies;
    use crate::ir::{DType, Literal, Op, TensorType};
    use crate::tensor::{eval_node, Tensor};

    /// A tensor of `shape` and its elements' bits (as a native step moves them).
    fn tensor(shape: &[usize]) -> (Vec<u32>, Tensor) {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| if i % 5 == 2 { -0.0 } else { i as f32 * 0.25 - 1.0 }).collect();
        let ty = TensorType::new(DType::F32, shape.to_vec());
        let t = Tensor::from_literal(&Literal::Float(v.iter().map(|&x| x as f64).collect()), &ty).unwrap();
        (bits(&v), t)
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn interpreted(op: &Op, inputs: &[&Tensor], shape: &[usize]) -> Vec<f32> {
        let ty = TensorType::new(DType::F32, shape.to_vec());
        eval_node(op, inputs, &ty).unwrap().to_f64_vec().iter().map(|&x| x as f32).collect()
    }

    #[test]
    fn slices_pads_and_concats_match_the_interpreter_bit_for_bit() {
        // Slices: whole, strided, reversed (negative steps), of size 0 and 1.
        let (x, t) = tensor(&[4, 5, 3]);
        let cases: &[(&[usize], &[i64], &[usize])] = &[
            (&[0, 0, 0], &[1, 1, 1], &[4, 5, 3]),
            (&[1, 0, 2], &[2, 2, -1], &[2, 3, 3]),
            (&[3, 4, 0], &[-1, -2, 1], &[4, 3, 2]),
            (&[0, 2, 1], &[1, 1, 1], &[4, 0, 2]),
            (&[2, 1, 1], &[1, 1, 1], &[1, 1, 1]),
        ];
        for &(start, step, len) in cases {
            let w = Copies::slice(&[4, 5, 3], start, step, len);
            let mut out = vec![7u32; w.len];
            w.apply(&[&x], &mut out);
            let op = Op::Slice { start: start.to_vec(), step: step.to_vec(), len: len.to_vec() };
            assert_eq!(out, bits(&interpreted(&op, &[&t], len)), "slice {start:?} {step:?} {len:?}");
        }
        // Pads on every side, with a value and with -0.
        for (low, high, value) in
            [([1, 0, 2], [0, 3, 1], 0.0), ([0, 0, 0], [0, 0, 0], 1.5), ([2, 1, 0], [1, 0, 0], -0.0)]
        {
            let w = Copies::pad(&[4, 5, 3], &low, &high, u64::from((value as f32).to_bits()));
            let mut out = vec![7u32; w.len];
            w.apply(&[&x], &mut out);
            let shape: Vec<usize> = [4, 5, 3].iter().zip(low.iter().zip(&high)).map(|(n, (l, h))| n + l + h).collect();
            let op = Op::Pad { low: low.to_vec(), high: high.to_vec(), value };
            assert_eq!(out, bits(&interpreted(&op, &[&t], &shape)), "pad {low:?} {high:?}");
        }
        // Concatenations along each axis, one part empty.
        let (y, u) = tensor(&[4, 2, 3]);
        let (z, v) = tensor(&[4, 0, 3]);
        let w = Copies::concat(&[vec![4, 5, 3], vec![4, 2, 3], vec![4, 0, 3]], 1);
        let mut out = vec![7u32; w.len];
        w.apply(&[&x, &y, &z], &mut out);
        assert_eq!(out, bits(&interpreted(&Op::Concat { axis: 1 }, &[&t, &u, &v], &[4, 7, 3])));
        let (a, at) = tensor(&[2, 5, 3]);
        let w = Copies::concat(&[vec![4, 5, 3], vec![2, 5, 3]], 0);
        let mut out = vec![7u32; w.len];
        w.apply(&[&x, &a], &mut out);
        assert_eq!(out, bits(&interpreted(&Op::Concat { axis: 0 }, &[&t, &at], &[6, 5, 3])));
    }
}
