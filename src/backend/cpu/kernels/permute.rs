//! Native transposes of any rank and permutation for the JIT executor
//! (`transpose(x, perm)`: output axis `i` is input axis `perm[i]`), of
//! elements of any type moved as words of their width (`window::Word`).
//!
//! Contract: [`Permutation::apply`] writes exactly what the interpreter's
//! `transpose` writes, as a copy, so every element keeps its bits. The
//! permutation is first reduced to its essential form ([`Permutation::of`]):
//! size-1 axes are dropped and runs of input axes that stay adjacent and in
//! order in the output are merged, so `[B, T, H, D] → [B, H, T, D]` becomes
//! `[B, T, H, D]` with perm `[0, 2, 1, 3]` and `[B, H, T, D] → [B, H, D, T]`
//! becomes `[B·H, T, D]` with perm `[0, 2, 1]`. Then one of three loops runs:
//! - nothing left to move (one axis): a plain copy;
//! - only the last two axes swap: a batch of matrix transposes on the
//!   register-blocked kernel of module `transpose` (the transposed keys of
//!   attention, `k^T`);
//! - anything else: a strided block copy of module `window` over the
//!   output, which copies whole rows when the last axis stays last
//!   (attention's head split and merge) and reads one element at a time
//!   otherwise.
//!
//! Example: `Permutation::of(&[2, 3, 4], &[0, 2, 1])` is a batch of two
//! `3x4` matrix transposes; `apply` on `0..24` gives `[0, 4, 8, 1, 5, 9, …]`.

use super::transpose::transpose;
use super::window::{strides, BlockCopy, Word};

/// A transpose reduced to its essential axes (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) struct Permutation {
    /// The sizes of the merged input axes.
    dims: Vec<usize>,
    /// Output axis `i` is merged input axis `perm[i]`.
    perm: Vec<usize>,
}

impl Permutation {
    /// The essential form of transposing a row-major `shape` by `perm`.
    pub(in crate::backend::cpu) fn of(shape: &[usize], perm: &[usize]) -> Permutation {
        // Drop size-1 axes (they move no data), renumbering the others.
        let kept: Vec<usize> = perm.iter().copied().filter(|&a| shape[a] != 1).collect();
        let mut order: Vec<usize> = kept.clone();
        order.sort_unstable();
        let rank_of = |a: usize| order.iter().position(|&o| o == a).unwrap_or(0);
        let perm: Vec<usize> = kept.iter().map(|&a| rank_of(a)).collect();
        let dims: Vec<usize> = order.iter().map(|&a| shape[a]).collect();
        // Merge output-adjacent runs `a, a + 1, …` of input axes.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for &a in &perm {
            match groups.last_mut() {
                Some(run) if run.last() == Some(&(a.wrapping_sub(1))) => run.push(a),
                _ => groups.push(vec![a]),
            }
        }
        let mut starts: Vec<usize> = groups.iter().map(|run| run[0]).collect();
        starts.sort_unstable();
        let merged_dims = starts
            .iter()
            .map(|&s| groups.iter().find(|run| run[0] == s).map_or(1, |run| run.iter().map(|&a| dims[a]).product()))
            .collect();
        let merged_perm = groups.iter().map(|run| starts.iter().position(|&s| s == run[0]).unwrap_or(0)).collect();
        Permutation { dims: merged_dims, perm: merged_perm }
    }

    /// The number of elements moved.
    pub(in crate::backend::cpu) fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// `(batch, rows, cols)` when this is a batch of matrix transposes
    /// (the last two merged axes swapped, or a plain copy: one row), which
    /// `apply` runs without allocating.
    pub(in crate::backend::cpu) fn as_matrices(&self) -> Option<(usize, usize, usize)> {
        let rank = self.dims.len();
        if rank <= 1 {
            return Some((1, 1, self.numel()));
        }
        let batched = self.perm[..rank - 2].iter().enumerate().all(|(i, &a)| a == i) && self.perm[rank - 2] == rank - 1;
        batched.then(|| (self.dims[..rank - 2].iter().product(), self.dims[rank - 2], self.dims[rank - 1]))
    }

    /// `to = transpose(from)` (see the module docs).
    pub(in crate::backend::cpu) fn apply<W: Word>(&self, from: &[W], to: &mut [W]) {
        let n = self.numel();
        assert!(from.len() >= n && to.len() >= n, "permutation operands smaller than {n} elements");
        let rank = self.dims.len();
        if n == 0 {
            return;
        }
        if rank <= 1 {
            to[..n].copy_from_slice(&from[..n]);
        } else if let Some((_, rows, cols)) = self.as_matrices() {
            for (f, t) in from[..n].chunks_exact(rows * cols).zip(to[..n].chunks_exact_mut(rows * cols)) {
                transpose(f, t, rows, cols);
            }
        } else {
            // A walk over the output reading the input through permuted
            // strides; when the last axis stays last, its rows are
            // contiguous on both sides and copied whole.
            let in_strides = strides(&self.dims);
            let out_dims: Vec<usize> = self.perm.iter().map(|&a| self.dims[a]).collect();
            let copy = BlockCopy {
                operand: 0,
                src_base: 0,
                src_strides: self.perm.iter().map(|&a| in_strides[a] as isize).collect(),
                dst_base: 0,
                dst_strides: strides(&out_dims),
                shape: out_dims,
            };
            copy.run(from, to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Permutation;

    /// The interpreter's definition: output index `o` reads input index
    /// `i` with `i[perm[k]] = o[k]`.
    fn reference(from: &[u32], shape: &[usize], perm: &[usize]) -> Vec<u32> {
        let rank = shape.len();
        let out_shape: Vec<usize> = perm.iter().map(|&a| shape[a]).collect();
        let n: usize = shape.iter().product();
        let mut out = Vec::with_capacity(n);
        for flat in 0..n {
            let mut rest = flat;
            let mut o = vec![0; rank];
            for k in (0..rank).rev() {
                o[k] = rest % out_shape[k];
                rest /= out_shape[k];
            }
            let mut i = vec![0; rank];
            for k in 0..rank {
                i[perm[k]] = o[k];
            }
            let src = i.iter().zip(shape).fold(0, |acc, (&x, &d)| acc * d + x);
            out.push(from[src]);
        }
        out
    }

    /// Every permutation of `0..rank`.
    fn permutations(rank: usize) -> Vec<Vec<usize>> {
        if rank == 0 {
            return vec![vec![]];
        }
        let mut all = Vec::new();
        for p in permutations(rank - 1) {
            for at in 0..rank {
                let mut q = p.clone();
                q.insert(at, rank - 1);
                all.push(q);
            }
        }
        all
    }

    #[test]
    fn every_permutation_matches_the_definition_bit_for_bit() {
        // Ragged sizes, size-1 axes, an empty axis, and whole 16x8 blocks.
        let shapes: &[&[usize]] = &[
            &[5],
            &[3, 7],
            &[16, 24],
            &[2, 3, 4],
            &[1, 5, 1],
            &[3, 0, 2],
            &[2, 3, 4, 5],
            &[2, 17, 1, 9],
            &[2, 2, 3, 2, 3],
        ];
        for shape in shapes {
            let n: usize = shape.iter().product();
            let from: Vec<u32> =
                (0..n).map(|i| if i % 7 == 3 { 0x7fc0_0000 | i as u32 } else { (i as f32 - 0.5).to_bits() }).collect();
            for perm in permutations(shape.len()) {
                let p = Permutation::of(shape, &perm);
                let mut to = vec![1u32; n];
                p.apply(&from, &mut to);
                let want = reference(&from, shape, &perm);
                assert_eq!(to, want, "shape {shape:?} perm {perm:?} (as {p:?})");
                // The same in bytes (`bool`s), whose matrix transposes take the scalar loop.
                let bytes: Vec<u8> = from.iter().map(|&v| v as u8).collect();
                let mut to = vec![0u8; n];
                p.apply(&bytes, &mut to);
                assert!(to.iter().zip(&want).all(|(&t, &w)| t == w as u8), "bytes of {shape:?} perm {perm:?}");
            }
        }
    }

    #[test]
    fn merges_axes_that_move_together() {
        let heads = Permutation::of(&[16, 32, 4, 16], &[0, 2, 1, 3]);
        assert_eq!((heads.dims.as_slice(), heads.perm.as_slice()), (&[16, 32, 4, 16][..], &[0, 2, 1, 3][..]));
        let keys = Permutation::of(&[16, 4, 32, 16], &[0, 1, 3, 2]);
        assert_eq!((keys.dims.as_slice(), keys.perm.as_slice()), (&[64, 32, 16][..], &[0, 2, 1][..]));
        let squeezed = Permutation::of(&[1, 6, 1, 4], &[2, 3, 0, 1]);
        assert_eq!((squeezed.dims.as_slice(), squeezed.perm.as_slice()), (&[6, 4][..], &[1, 0][..]));
    }

    #[test]
    fn documented_example() {
        let from: Vec<u32> = (0..24).collect();
        let mut to = vec![0; 24];
        Permutation::of(&[2, 3, 4], &[0, 2, 1]).apply(&from, &mut to);
        assert_eq!(&to[..6], &[0, 4, 8, 1, 5, 9]);
    }
}
