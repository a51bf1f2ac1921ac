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
