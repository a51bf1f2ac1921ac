//! The JIT's worker threads: one rayon pool per thread count, entered once
//! per unit run (independent steps run in it at once, module `schedule`),
//! and the rule for splitting a kernel over it.
//!
//! Contract: work is split only along independent output elements — the
//! rows of an elementwise kernel, the output blocks of a matrix product
//! (see `gemm`) — never along a sum, so every value is computed by the same
//! sequence of float operations at any thread count: results are
//! bit-identical with `--threads 1` and `--threads N`.
//!
//! Example: with `--threads 2`, Adam's update of a `[784, 256]` weight (49
//! rows of 4,096 elements) runs rows 0..24 and 24..49 on the two threads.

use std::sync::{Arc, Mutex, OnceLock};

/// Below this many elements an elementwise kernel runs on one thread: a
/// fork-join inside the pool costs about 0.13 µs, a few thousand elements
/// cost about a microsecond, so smaller kernels would gain nothing.
pub(super) const PARALLEL_MIN_ELEMENTS: usize = 16_384;

/// A flat kernel is compiled over rows of this many elements, so that its
/// rows can be split (see `Spec::in_rows_of`).
pub(super) const ROW_BLOCK: usize = 4096;

/// The pool of `threads` workers (`None` for one thread: everything runs on
/// the calling thread). Pools are created once per count and kept.
pub fn pool(threads: usize) -> Result<Option<Arc<rayon::ThreadPool>>, String> {
    if threads <= 1 {
        return Ok(None);
    }
    /// The pools made so far, with their thread counts.
    type Pools = Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let mut pools = POOLS.get_or_init(|| Mutex::new(Vec::new())).lock().map_err(|_| "the thread pool is poisoned")?;
    if let Some((_, p)) = pools.iter().find(|(n, _)| *n == threads) {
        return Ok(Some(p.clone()));
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("tfc-worker-{i}"))
        .build()
        .map_err(|e| format!("cannot start {threads} worker threads: {e}"))?;
    let p = Arc::new(p);
    pools.push((threads, p.clone()));
    Ok(Some(p))
}

/// `rows` split into at most `parts` contiguous, nearly equal ranges.
pub(super) fn split_rows(rows: usize, parts: usize) -> impl Iterator<Item = (usize, usize)> {
    let parts = parts.clamp(1, rows.max(1));
    (0..parts).map(move |i| (rows * i / parts, rows * (i + 1) / parts))
}

#[cfg(test)]
mod tests {
    use super::split_rows;

    #[test]
    fn row_ranges_cover_every_row_once() {
        assert_eq!(split_rows(49, 2).collect::<Vec<_>>(), vec![(0, 24), (24, 49)]);
        assert_eq!(split_rows(3, 8).collect::<Vec<_>>(), vec![(0, 1), (1, 2), (2, 3)]);
        assert_eq!(split_rows(0, 2).collect::<Vec<_>>(), vec![(0, 0)]);
    }
}
