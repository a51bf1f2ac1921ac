//! The fixed order in which a data-parallel step sums its virtual shards.
//!
//! Contract: `tree_sum` adds its items over a balanced binary tree — the
//! left half's sum plus the right half's, recursively — so the sum of
//! `2^k` leaves equals the sum of the sums of any aligned blocks of
//! `2^j` of them, summed again by `tree_sum`. That is what makes a run's
//! result independent of how many processes share the shards: each
//! process sums its own aligned block, the first process sums the blocks'
//! sums, and floating-point rounding happens at the same places as in one
//! process. Absent leaves (shards of a short last batch with no example)
//! are skipped: `a + absent = a`.
//!
//! Example: `tree_sum(vec![Some(a), Some(b), Some(c), Some(d)], add)` is
//! `(a + b) + (c + d)`, as is `tree_sum` of `[tree_sum([a, b]), tree_sum([c, d])]`.

/// One round of an in-place all-reduce of `len` bytes by recursive halving
/// (`halving_rounds`): swap with `partner`, sending bytes `send` of ours and
/// receiving the partner's bytes `recv`, which are added into ours
/// (`add`) or, once summed, simply taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Round {
    pub partner: usize,
    pub send: std::ops::Range<usize>,
    pub recv: std::ops::Range<usize>,
    pub add: bool,
}

/// The rounds by which rank `rank` of `size` (a power of two) takes part in
/// an all-reduce of `len` bytes that moves about twice the bytes whatever
/// the number of ranks (recursive doubling moves `log2 size` times them):
/// a reduce-scatter — in round k the ranks 2^k apart split the part they
/// share, each sending the half it gives up and adding the other's sums of
/// the half it keeps — then an all-gather in reverse order. Round k pairs
/// the same ranks as recursive doubling, so every element is summed over
/// the same balanced tree of the ranks: the same bits. Parts end on
/// multiples of 8 bytes (whole elements of any type), so some may be empty.
pub fn halving_rounds(rank: usize, size: usize, len: usize) -> Vec<Round> {
    let rounds = size.trailing_zeros() as usize;
    let bound = |i: usize| bound(i, size, len);
    // The parts rank `r` holds after its first `k` rounds.
    let parts_after = |r: usize, k: usize| {
        let (mut lo, mut hi) = (0, size);
        for j in 0..k {
            let mid = (lo + hi) / 2;
            if r >> j & 1 == 0 {
                hi = mid
            } else {
                lo = mid
            }
        }
        (lo, hi)
    };
    let bytes = |(lo, hi): (usize, usize)| bound(lo)..bound(hi);
    let mut out = Vec::with_capacity(2 * rounds);
    for k in 0..rounds {
        let partner = rank ^ (1 << k);
        let (mine, theirs) = (parts_after(rank, k + 1), parts_after(partner, k + 1));
        out.push(Round { partner, send: bytes(theirs), recv: bytes(mine), add: true });
    }
    for k in (0..rounds).rev() {
        let partner = rank ^ (1 << k);
        let (mine, theirs) = (parts_after(rank, k + 1), parts_after(partner, k + 1));
        out.push(Round { partner, send: bytes(mine), recv: bytes(theirs), add: false });
    }
    out
}

/// The bytes of part `i` of `size` of a block of `len` bytes, as the
/// all-reduces split it: parts end on multiples of 8 bytes (whole elements
/// of any type), so some may be empty.
pub fn part(i: usize, size: usize, len: usize) -> std::ops::Range<usize> {
    bound(i, size, len)..bound(i + 1, size, len)
}

/// The byte offset where part `i` of `size` starts (`part`).
fn bound(i: usize, size: usize, len: usize) -> usize {
    match i >= size {
        true => len,
        false => (len * i / size) / 8 * 8,
    }
}

/// The sum of `items` over a balanced binary tree; `None` if all are absent.
pub fn tree_sum<T>(mut items: Vec<Option<T>>, add: &mut dyn FnMut(T, T) -> T) -> Option<T> {
    fn go<T>(items: &mut [Option<T>], add: &mut dyn FnMut(T, T) -> T) -> Option<T> {
        match items.len() {
            0 => None,
            1 => items[0].take(),
            n => {
                let (left, right) = items.split_at_mut(n / 2);
                match (go(left, add), go(right, add)) {
                    (Some(a), Some(b)) => Some(add(a, b)),
                    (a, b) => a.or(b),
                }
            }
        }
    }
    go(&mut items, add)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sum that records its bracketing.
    fn shown(items: &[&str]) -> Option<String> {
        let items = items.iter().map(|s| (!s.is_empty()).then(|| s.to_string())).collect();
        tree_sum(items, &mut |a, b| format!("({a}+{b})"))
    }

    #[test]
    fn sums_over_a_balanced_tree() {
        assert_eq!(shown(&["a", "b", "c", "d"]).unwrap(), "((a+b)+(c+d))");
        assert_eq!(shown(&["a", "b", "c"]).unwrap(), "(a+(b+c))");
        assert_eq!(shown(&["a"]).unwrap(), "a");
        assert_eq!(shown(&[]), None);
    }

    #[test]
    fn blocks_summed_apart_give_the_same_bracketing() {
        let leaves = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let whole = shown(&leaves).unwrap();
        for block in [1, 2, 4, 8] {
            let parts: Vec<Option<String>> = leaves.chunks(block).map(shown).collect();
            assert_eq!(tree_sum(parts, &mut |a, b| format!("({a}+{b})")).unwrap(), whole, "blocks of {block}");
        }
    }

    #[test]
    fn absent_leaves_are_skipped() {
        assert_eq!(shown(&["a", "", "c", ""]).unwrap(), "(a+c)");
        assert_eq!(shown(&["", ""]), None);
    }

    /// Every rank's values after running `halving_rounds` in lockstep.
    fn halved(values: &[Vec<f32>]) -> Vec<Vec<f32>> {
        let size = values.len();
        let len = 4 * values[0].len();
        let mut data: Vec<Vec<u8>> = values.iter().map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
        let plans: Vec<Vec<Round>> = (0..size).map(|r| halving_rounds(r, size, len)).collect();
        // Round by round, every rank's.
        let steps: Vec<Vec<&Round>> = (0..plans[0].len()).map(|s| plans.iter().map(|p| &p[s]).collect()).collect();
        for (step, now) in steps.iter().enumerate() {
            let before = data.clone();
            for (r, round) in now.iter().enumerate() {
                let theirs = now[round.partner];
                assert_eq!(theirs.partner, r, "round {step} pairs {r} with {}", round.partner);
                assert_eq!(theirs.send, round.recv, "what {} sends is what {r} receives", round.partner);
                for (i, at) in round.recv.clone().step_by(4).enumerate() {
                    let from = theirs.send.start + 4 * i;
                    let other = f32::from_le_bytes(before[round.partner][from..from + 4].try_into().unwrap());
                    let ours = f32::from_le_bytes(data[r][at..at + 4].try_into().unwrap());
                    let new = if round.add { ours + other } else { other };
                    data[r][at..at + 4].copy_from_slice(&new.to_le_bytes());
                }
            }
        }
        data.iter().map(|d| d.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()).collect()
    }

    #[test]
    fn halving_gives_every_rank_the_trees_sum_bit_for_bit() {
        for (size, n) in [(2, 7), (4, 1), (4, 2), (4, 13), (8, 100), (8, 3)] {
            let values: Vec<Vec<f32>> = (0..size)
                .map(|r| (0..n).map(|i| ((r * 31 + i * 7) % 13) as f32 * 0.1 + 1e4 * (r % 3) as f32).collect())
                .collect();
            let tree: Vec<f32> = (0..n)
                .map(|i| tree_sum(values.iter().map(|v| Some(v[i])).collect(), &mut |a, b| a + b).unwrap())
                .collect();
            for (r, got) in halved(&values).iter().enumerate() {
                let same = got.iter().zip(&tree).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{size} ranks, {n} values: rank {r} has {got:?}, the tree {tree:?}");
            }
        }
    }

    #[test]
    fn halving_moves_about_twice_the_bytes_whatever_the_ranks() {
        for size in [2, 4, 8, 16] {
            let sent: usize = halving_rounds(0, size, 1 << 20).iter().map(|r| r.send.len()).sum();
            let whole = 2 * (size - 1) * (1 << 20) / size;
            assert!(sent.abs_diff(whole) <= 8 * size, "{size} ranks: {sent} bytes against {whole}");
        }
    }

    #[test]
    fn floats_sum_to_the_same_bits_in_blocks() {
        let xs: Vec<f32> = (0..16).map(|i| 1.0 / (i as f32 + 3.0) * if i % 3 == 0 { 1e4 } else { 1e-3 }).collect();
        let whole = tree_sum(xs.iter().map(|&x| Some(x)).collect(), &mut |a, b| a + b).unwrap();
        for block in [2, 4, 8] {
            let parts = xs.chunks(block).map(|c| tree_sum(c.iter().map(|&x| Some(x)).collect(), &mut |a, b| a + b));
            let sum = tree_sum(parts.collect(), &mut |a, b| a + b).unwrap();
            assert_eq!(sum.to_bits(), whole.to_bits());
        }
    }
}
