//! The streaming input-pipeline runtime (§8): a dataset plan becomes a chain
//! of iterators, and `prefetch` and `map(…, parallel = n)` put the stages
//! before them on background threads connected by bounded queues, so input
//! preparation overlaps the training step that consumes it.
//!
//! Contract:
//! - Determinism: the elements and their order are a pure function of the
//!   program, the data and the epoch — the same with or without `prefetch`,
//!   at any `parallel` setting (a parallel map delivers in input order
//!   through a reorder buffer) and at any thread count.
//! - Coordination: every thread lives in one `std::thread::scope` per pass
//!   over the data, so all are joined before the pass returns. The first
//!   error of any stage (a bad file, a failing `map`, Ctrl-C) travels
//!   downstream in element order, is returned as one diagnostic naming the
//!   element index where it applies, and stops every other stage: the
//!   consumer abandons its queues and a shared cancel flag ends the
//!   sources, so nothing hangs and nothing is lost.
//! - Regions run in per-thread `Executor`s over the same program (the
//!   values they read once, such as a weight a `map` closes over, are
//!   computed per thread; slots filled by earlier effects are copied in).
//! - Source data (files, tensors) is loaded once per run; `cache()` keeps a
//!   complete pass in memory (or in a file) and replays it afterwards.
//! - A training loop starts each next epoch's pass ahead of time
//!   (`for_each_ahead`, in ahead.rs): that pass runs on a thread owned by an
//!   [`Ahead`], which joins it when dropped.
//!
//! Example: `ds |> map(f, parallel = 4) |> shuffle(1000, seed = 1) |>
//! batch(32) |> prefetch(auto)` runs `f` on four workers, shuffles and
//! batches on the prefetch thread, and the training loop pops batches.

mod ahead;
mod cache;
mod interleave;
mod mapfn;
mod parallel;
mod queue;
mod stages;

pub use ahead::{for_each_ahead, Ahead};

use super::exec::{Executor, RunOptions};
use crate::diag::Diagnostic;
use crate::io::loaders::{MemoryRows, RowSource};
use crate::ir::plan::{Dataset, Source, Transform};
use crate::ir::Program;
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One element: a tensor per part.
pub type Element = Vec<Tensor>;
type Item = Result<Element, Diagnostic>;
type Iter<'a> = Box<dyn Iterator<Item = Item> + 'a>;

/// What a run keeps between passes: loaded source columns and `cache()`d
/// passes, shared by every thread.
#[derive(Default)]
pub struct Store {
    sources: Mutex<HashMap<String, Arc<dyn RowSource>>>,
    caches: Mutex<HashMap<String, Arc<Vec<Element>>>>,
}

/// The run's store (held by the executor).
pub type Caches = Arc<Store>;

/// Everything a stage needs, cheap to clone into a thread.
#[derive(Clone)]
struct Ctx<'p> {
    program: &'p Program,
    options: RunOptions,
    slots: Arc<HashMap<usize, Tensor>>,
    store: Caches,
    epoch: u64,
    /// Set when the consumer stops: sources end early.
    cancel: Arc<AtomicBool>,
    /// A data-parallel rank's share of the training batches.
    share: Option<Share>,
}

/// What one rank of a data-parallel run reads of the batches of transform
/// `batch` (a `Batch`): the rows of its aligned block of each batch's
/// virtual shards (training), or every `world`-th whole batch (a metric).
/// The rest are zeros, never read, which the rank does not use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    batch: usize,
    world: usize,
    rank: usize,
    /// `Some(shards)`: rows of every batch; `None`: whole batches.
    shards: Option<usize>,
    /// Rows only, without the zeros around them: nothing after the batch
    /// needs the whole batch's shape (see [`Share::layout`]).
    compact: bool,
}

impl Share {
    /// This rank's rows of each of `d`'s batches, or why every rank reads
    /// whole batches instead: the transforms after the last `batch` must
    /// keep each row apart (a `map` moved behind the batch by map
    /// vectorization computes each row on its own; a user's `map` over
    /// batches need not).
    pub fn rows(d: &Dataset, shards: usize, world: usize, rank: usize) -> Result<Share, String> {
        let batch = last_batch(d, true)?;
        // A batch that only travels on (no vectorized map traced for the
        // whole batch's shape, no reordering of batches) can hold just the
        // rank's rows.
        let compact = d.transforms[batch + 1..]
            .iter()
            .all(|t| matches!(t, Transform::Parallel(_) | Transform::Prefetch(_) | Transform::Repeat(None)));
        Ok(Share { batch, world, rank, shards: Some(shards), compact })
    }

    /// For a compact share of `d`'s batches: batch `index`'s number of
    /// examples and the position of this rank's first row in it; `None`
    /// when the batches keep their full shape.
    pub fn layout(&self, d: &Dataset, index: usize) -> Option<(usize, usize)> {
        if !self.compact {
            return None;
        }
        let last = d.len.is_some_and(|len| index + 1 == len);
        let m = match d.batch_sizes.as_slice() {
            [_, ragged] if last => *ragged,
            [n, ..] => *n,
            [] => return None,
        };
        Some((m, self.real(index, m).start))
    }

    /// Every `world`-th batch of `d`, from batch `rank` on, for a metric
    /// the ranks compute together; `None` when only the row transforms
    /// (as for [`Share::rows`]) and nothing that moves batches follow the
    /// last `batch`.
    pub fn batches(d: &Dataset, world: usize, rank: usize) -> Option<Share> {
        let batch = last_batch(d, false).ok()?;
        Some(Share { batch, world, rank, shards: None, compact: false })
    }

    /// Whether this rank reads batch `index` (all of them for rows).
    pub fn owns(&self, index: usize) -> bool {
        self.shards.is_some() || index % self.world == self.rank
    }

    /// The positions this rank reads of batch `index`, of `m` elements.
    fn real(&self, index: usize, m: usize) -> std::ops::Range<usize> {
        let Some(shards) = self.shards else {
            return if self.owns(index) { 0..m } else { 0..0 };
        };
        let rows = crate::ir::plan::ParallelStep::shard_rows(m, shards);
        let per_rank = shards / self.world;
        let start: usize = rows[..self.rank * per_rank].iter().sum();
        let len: usize = rows[self.rank * per_rank..(self.rank + 1) * per_rank].iter().sum();
        start..start + len
    }
}

/// The last `batch` of `d`, when what follows it keeps rows apart (and,
/// unless `moves`, keeps batches where they are) and what precedes it only
/// picks source rows.
fn last_batch(d: &Dataset, moves: bool) -> Result<usize, String> {
    let Some(batch) = d.transforms.iter().rposition(|t| matches!(t, Transform::Batch { .. })) else {
        return Err("the training data has no `batch`".into());
    };
    let keeps = |t: &Transform| match t {
        Transform::BatchedMap { .. } | Transform::Parallel(_) | Transform::Prefetch(_) | Transform::Repeat(None) => {
            true
        }
        Transform::Shuffle { .. } | Transform::Take(_) | Transform::Skip(_) => moves,
        _ => false,
    };
    if let Some(t) = d.transforms[batch + 1..].iter().find(|t| !keeps(t)) {
        let what = match t {
            Transform::Map(_) | Transform::BySize { filter: false, .. } => "a `map` over whole batches",
            Transform::Filter(_) | Transform::BySize { .. } => "a `filter` of batches",
            Transform::Cache(_) => "a `cache` of batches",
            _ => "a transform of batches",
        };
        return Err(format!("{what} follows the `batch`"));
    }
    let picks = |t: &Transform| {
        matches!(t, Transform::Interleave { .. } | Transform::Shuffle { .. } | Transform::Take(_) | Transform::Skip(_))
    };
    if !d.transforms[..batch].iter().all(picks) {
        return Err("the elements are transformed before the `batch`".into());
    }
    Ok(batch)
}

impl Ctx<'_> {
    /// A `--verbose` report on stderr.
    fn report(&self, text: impl FnOnce() -> String) {
        if self.options.verbose {
            eprintln!("pipeline: {}", text());
        }
    }
}

/// Feeds the elements of `d` in epoch `epoch` (0-based) to `f` in order,
/// until they end or `f` returns `false`. The pipeline's threads run while
/// `f` does; all of them are joined before this returns.
pub fn for_each(
    ex: &mut Executor,
    d: &Dataset,
    epoch: u64,
    f: impl FnMut(&mut Executor, usize, Element) -> Result<bool, Diagnostic>,
) -> Result<(), Diagnostic> {
    for_each_share(ex, d, epoch, None, f)
}

/// [`for_each`] over a data-parallel rank's `share` of the batches.
pub fn for_each_share(
    ex: &mut Executor,
    d: &Dataset,
    epoch: u64,
    share: Option<Share>,
    mut f: impl FnMut(&mut Executor, usize, Element) -> Result<bool, Diagnostic>,
) -> Result<(), Diagnostic> {
    prepare_source(ex, &d.source)?;
    let ctx = Ctx {
        program: ex.program,
        options: ex.options.clone(),
        slots: Arc::new(ex.slots.clone()),
        store: ex.data_cache.clone(),
        epoch,
        cancel: Arc::new(AtomicBool::new(false)),
        share,
    };
    let cancel = ctx.cancel.clone();
    std::thread::scope(|s| {
        let result = (|| {
            let items = stages::stream(s, &ctx, d, d.transforms.len())?;
            for (i, item) in items.enumerate() {
                if !f(ex, i, item?)? {
                    break;
                }
            }
            Ok(())
        })();
        // Every exit — the end, an early stop, an error — stops the sources;
        // dropping the iterator (above) abandoned the queues.
        cancel.store(true, Ordering::Relaxed);
        result
    })
}

/// Every element of `d` in epoch `epoch`.
pub fn elements(ex: &mut Executor, d: &Dataset, epoch: u64) -> Result<Vec<Element>, Diagnostic> {
    let mut out = Vec::new();
    for_each(ex, d, epoch, |_, _, e| {
        out.push(e);
        Ok(true)
    })?;
    Ok(out)
}

/// Sources computed by the graph are evaluated here, in the main context,
/// before any thread starts.
fn prepare_source(ex: &mut Executor, s: &Source) -> Result<(), Diagnostic> {
    if let Source::Nodes(ids) = s {
        let key = source_key(s);
        if ex.data_cache.sources.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&key) {
            return Ok(());
        }
        ex.demand(ids)?;
        let mut cols: Vec<Tensor> = Vec::with_capacity(ids.len());
        for (k, id) in ids.iter().enumerate() {
            // The same tensor twice (`from_tensors(xs, xs)`): moved once.
            let col = match ids[..k].iter().position(|e| e == id) {
                Some(first) => cols[first].clone(),
                None => ex.value_for_source(*id)?,
            };
            cols.push(col);
        }
        let rows: Arc<dyn RowSource> = Arc::new(MemoryRows(cols));
        ex.data_cache.sources.lock().unwrap_or_else(|e| e.into_inner()).insert(key, rows);
    }
    Ok(())
}

fn source_key(s: &Source) -> String {
    match s {
        Source::Host(h) => format!("host {:p}", Arc::as_ptr(h)),
        Source::File(f) => format!("file {:p}", Arc::as_ptr(f)),
        Source::Nodes(ids) => format!("nodes {ids:?}"),
        Source::Range(n) => format!("range {n}"),
    }
}

/// The 1-based position of transform `i` as the user wrote it (the
/// `Parallel` markers are part of their `map`).
fn position(d: &Dataset, i: usize) -> usize {
    1 + d.transforms[..i].iter().filter(|t| !matches!(t, Transform::Parallel(_))).count()
}

/// How many elements of `d`'s source were read from files so far in this
/// run (`None` before its first pass, or for a source in memory: 0).
pub fn rows_read(ex: &Executor, d: &Dataset) -> Option<usize> {
    let key = source_key(&d.source);
    ex.data_cache.sources.lock().unwrap_or_else(|e| e.into_inner()).get(&key).map(|s| s.rows_read())
}

/// A fresh executor for running regions on this thread. Its output sink is
/// never written (regions have no effects).
fn executor<'p>(ctx: &Ctx<'p>) -> Result<Executor<'p>, Diagnostic> {
    let sink: &'p mut std::io::Sink = Box::leak(Box::new(std::io::sink()));
    let mut ex = Executor::new(ctx.program, sink, ctx.options.clone())?;
    ex.slots = (*ctx.slots).clone();
    Ok(ex)
}
