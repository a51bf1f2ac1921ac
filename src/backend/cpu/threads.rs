//! The JIT's worker threads: one rayon pool per thread count, entered once
//! per unit run (independent steps run in it at once, module `schedule`),
//! with the other workers kept awake for the run (`with_workers_awake`),
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

/// Below this much estimated work (about a nanosecond a unit, see
/// `unit::Step::access`) a whole unit runs on the calling thread: entering
/// the pool and waking a worker cost tens of microseconds each on a virtual
/// machine, more than a small training step (a 64-128-10 MLP's) takes.
/// With two threads such a step ran 8x slower than with one.
pub(super) const PARALLEL_MIN_UNIT_WORK: u64 = 200_000;

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

/// Runs `f` on the current worker while every other worker of the pool
/// keeps looking for work (running whatever `f` spawns) instead of going
/// to sleep between the forks of a step: waking a sleeping thread costs
/// more than a mid-sized split saves (on a virtual machine, a sleeping
/// core must be woken by the hypervisor). The workers go back to rayon's
/// usual idling when `f` returns (or panics).
///
/// A worker that has found no work for a while yields its core to the
/// operating system between polls, so that other runnable threads (the
/// input pipeline's, or more workers than cores) still get it.
///
/// A spinner that ends up on `f`'s own thread (popped there while `f`
/// waits for its forks) returns at once: spinning there would wait for
/// `f`, which waits for it.
pub(super) fn with_workers_awake<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Sets the flag when `f` is over, however it ends.
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let done = AtomicBool::new(false);
    let (done, owner) = (&done, rayon::current_thread_index());
    rayon::scope(|s| {
        for _ in 1..rayon::current_num_threads() {
            s.spawn(move |_| {
                if rayon::current_thread_index() == owner {
                    return;
                }
                let mut idle = 0u32;
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() == Some(rayon::Yield::Executed) {
                        idle = 0;
                    } else if idle < 64 {
                        idle += 1;
                        std::hint::spin_loop();
                    } else {
                        // Let other threads of this process (the input
                        // pipeline's workers, more threads than cores) run.
                        std::thread::yield_now();
                    }
                }
            });
        }
        let _done = Done(done);
        f()
    })
}

/// The workers for an `m × k × n` matrix product given `threads`: one below
/// about a million multiply-adds, where a worker's wake-up costs more than
/// it saves.
pub(super) fn for_product([m, k, n]: [usize; 3], threads: usize) -> usize {
    if m * k * n >= 1 << 20 {
        threads.max(1)
    } else {
        1
    }
}

/// The blocks of one row and column run of a product's output grid.
pub(super) type GridRun = (std::ops::Range<usize>, std::ops::Range<usize>);

/// Runs a blocked product's grid of `row_blocks × panels` output blocks:
/// all of it as one `run` call for one thread, else split into tasks for
/// `threads` workers — one row block of one group of panels each, the
/// groups enough to give every thread a few tasks when there are few row
/// blocks; a worker's contiguous tasks share their group, so they reach
/// `run` as one range of row blocks (reusing the panels' packed operand).
/// `run` gets each worker's `(row blocks, panels)` runs; the blocks are
/// disjoint, and the split never cuts the sum of one block.
pub(super) fn output_grid(row_blocks: usize, panels: usize, threads: usize, run: impl Fn(&[GridRun]) + Sync) {
    if threads <= 1 {
        return run(&[(0..row_blocks, 0..panels)]);
    }
    let groups = (4 * threads).div_ceil(row_blocks).clamp(1, panels);
    let group = |g: usize| panels * g / groups..panels * (g + 1) / groups;
    in_ranges(row_blocks * groups, threads, |lo, hi| {
        let mut runs = Vec::new();
        let mut t = lo;
        while t < hi {
            let (g, first) = (t / row_blocks, t % row_blocks);
            let last = (first + hi - t).min(row_blocks);
            runs.push((first..last, group(g)));
            t += last - first;
        }
        run(&runs)
    });
}

/// Runs `run(lo, hi)` over `0..items` split into `threads` contiguous
/// ranges (`split_rows`) at once on the current pool, or as one call on
/// this thread for one thread or one item. `run` must give each range's
/// results whatever the split (the callers' ranges write disjoint outputs).
pub(super) fn in_ranges(items: usize, threads: usize, run: impl Fn(usize, usize) + Sync) {
    if threads <= 1 || items <= 1 {
        return run(0, items);
    }
    rayon::scope(|s| {
        for (lo, hi) in split_rows(items, threads) {
            let run = &run;
            s.spawn(move |_| run(lo, hi));
        }
    });
}

/// `rows` split into at most `parts` contiguous, nearly equal ranges.
pub(super) fn split_rows(rows: usize, parts: usize) -> impl Iterator<Item = (usize, usize)> {
    let parts = parts.clamp(1, rows.max(1));
    (0..parts).map(move |i| (rows * i / parts, rows * (i + 1) / parts))
}

#[cfg(test)]
mod tests {
    use super::{in_ranges, split_rows, with_workers_awake};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn row_ranges_cover_every_row_once() {
        assert_eq!(split_rows(49, 2).collect::<Vec<_>>(), vec![(0, 24), (24, 49)]);
        assert_eq!(split_rows(3, 8).collect::<Vec<_>>(), vec![(0, 1), (1, 2), (2, 3)]);
        assert_eq!(split_rows(0, 2).collect::<Vec<_>>(), vec![(0, 0)]);
    }

    #[test]
    fn ranges_run_every_item_once_at_any_thread_count() {
        for (items, threads) in [(0, 1), (1, 3), (7, 1), (7, 2), (49, 3), (2, 8)] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
            let seen: Vec<AtomicUsize> = (0..items).map(|_| AtomicUsize::new(0)).collect();
            pool.install(|| {
                in_ranges(items, threads, |lo, hi| (lo..hi).for_each(|i| _ = seen[i].fetch_add(1, Ordering::Relaxed)))
            });
            assert!(seen.iter().all(|n| n.load(Ordering::Relaxed) == 1), "{items} items, {threads} threads");
        }
    }

    /// The workers kept awake run the forks of `f` (nested too), and all
    /// return when `f` does, however many threads there are; a panic in
    /// `f` reaches the caller instead of leaving the workers spinning.
    #[test]
    fn awake_workers_run_the_forks_and_stop_with_f() {
        for threads in [2, 3, 5] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
            let count = AtomicUsize::new(0);
            for _ in 0..20 {
                let total = pool.install(|| {
                    with_workers_awake(|| {
                        rayon::scope(|s| {
                            for _ in 0..8 {
                                s.spawn(|_| {
                                    rayon::join(
                                        || count.fetch_add(1, Ordering::Relaxed),
                                        || count.fetch_add(1, Ordering::Relaxed),
                                    );
                                });
                            }
                        });
                        count.load(Ordering::Relaxed)
                    })
                });
                assert_eq!(total % 16, 0);
            }
            assert_eq!(count.load(Ordering::Relaxed), 20 * 16);
            let caught = pool.install(|| std::panic::catch_unwind(|| with_workers_awake(|| panic!("a step failed"))));
            assert!(caught.is_err());
        }
    }
}
