//! The stages of a pipeline as iterators: a source, then one adapter per
//! transform. `stream(…, k)` builds the pipeline up to transform `k` on the
//! calling thread; `prefetch` and a parallel `map` spawn threads that build
//! (and run) their upstream part themselves, so nothing that holds an
//! executor ever crosses a thread.
//!
//! Contract: each adapter passes an upstream error through at the position
//! where it occurred and then ends; a `map` or `filter` failure names the
//! index of the element (counted at the input of that transform).

use super::mapfn::MapFn;
use super::queue::Queue;
use super::{executor, position, source_key, Ctx, Element, Item, Iter};
use crate::diag::Diagnostic;
use crate::io::loaders::{MemoryRows, RowSource};
use crate::ir::plan::{Dataset, Source, Transform};
use crate::ir::{DType, Literal, TensorType};
use crate::tensor::host::{index_first, stack};
use crate::tensor::Tensor;
use std::sync::Arc;
use std::thread::Scope;

/// The elements of `d` after its first `k` transforms.
pub(super) fn stream<'s, 'p: 's>(
    s: &'s Scope<'s, 'p>,
    ctx: &Ctx<'p>,
    d: &'p Dataset,
    k: usize,
) -> Result<Iter<'s>, Diagnostic> {
    // Up to here only rows of the source are picked: build each element
    // when it leaves, not before (a shuffle buffer then holds row numbers).
    if let Some((source, rows)) = rows(ctx, d, k)? {
        return Ok(Box::new(rows.map(move |r| {
            let r = r?;
            source.gather(&[r], 0..1)?.iter().map(|c| index_first(c, 0)).collect()
        })));
    }
    let t = &d.transforms[k - 1];
    Ok(match t {
        Transform::Map(_) | Transform::BatchedMap { .. } | Transform::BySize { filter: false, .. } => {
            if let Some(Transform::Parallel(workers)) = d.transforms.get(k) {
                // This map runs on workers (its `Parallel` marker follows it).
                return super::parallel::map(s, ctx, d, k - 1, *workers);
            }
            Box::new(RegionStage::new(ctx, t, stream(s, ctx, d, k - 1)?, false)?)
        }
        // The map before it already ran on workers.
        Transform::Parallel(_) => stream(s, ctx, d, k - 1)?,
        Transform::Filter(_) | Transform::BySize { filter: true, .. } => {
            Box::new(RegionStage::new(ctx, t, stream(s, ctx, d, k - 1)?, true)?)
        }
        Transform::Shuffle { buffer, seed } => {
            Box::new(Shuffle::new(stream(s, ctx, d, k - 1)?, *buffer, *seed, ctx.epoch))
        }
        Transform::Batch { n, drop_remainder } => match rows(ctx, d, k - 1)? {
            // A batch of source rows is gathered in one read per column
            // (of a rank's share of it, in data-parallel training).
            Some((source, rows)) => {
                let share = ctx.share.filter(|s| s.batch == k - 1);
                let index = std::cell::Cell::new(0);
                Box::new(Batch::new(
                    rows,
                    *n,
                    *drop_remainder,
                    Box::new(move |picked: Vec<usize>| {
                        let real = share.map_or(0..picked.len(), |s| s.real(index.get(), picked.len()));
                        index.set(index.get() + 1);
                        match share {
                            Some(s) if s.compact => source.gather(&picked[real.clone()], 0..real.len()),
                            _ => source.gather(&picked, real),
                        }
                    }),
                ))
            }
            None => Box::new(Batch::new(
                stream(s, ctx, d, k - 1)?,
                *n,
                *drop_remainder,
                Box::new(|chunk: Vec<Element>| {
                    let parts = chunk[0].len();
                    (0..parts).map(|p| stack(&chunk.iter().map(|e| &e[p]).collect::<Vec<_>>())).collect()
                }),
            )),
        },
        Transform::Repeat(Some(times)) => {
            let (ctx, times) = (ctx.clone(), *times);
            // Each repetition rebuilds the upstream: the same epoch gives the same elements.
            Box::new((0..times).flat_map(move |_| match stream(s, &ctx, d, k - 1) {
                Ok(it) => it,
                Err(e) => Box::new(std::iter::once(Err(e))),
            }))
        }
        Transform::Repeat(None) => stream(s, ctx, d, k - 1)?,
        // Row orders are `rows`' work.
        Transform::Interleave { .. } => {
            return Err(Diagnostic::internal("pipeline: `interleave` after a transform of the elements"))
        }
        Transform::Take(n) => Box::new(stream(s, ctx, d, k - 1)?.take(*n)),
        Transform::Skip(n) => Box::new(Skip { up: stream(s, ctx, d, k - 1)?, left: *n }),
        Transform::Split { seed, count, first } => {
            // A permutation of the whole input: this stage needs all of it.
            let all: Vec<Element> = stream(s, ctx, d, k - 1)?.collect::<Result<_, _>>()?;
            let order = crate::runtime::dataset::permutation(all.len(), *seed);
            let cut = (*count).min(order.len());
            let picked = if *first { order[..cut].to_vec() } else { order[cut..].to_vec() };
            let mut slots: Vec<Option<Element>> = all.into_iter().map(Some).collect();
            Box::new(picked.into_iter().filter_map(move |i| slots[i].take()).map(Ok))
        }
        Transform::Cache(path) => super::cache::stage(s, ctx, d, k, path.as_deref())?,
        Transform::Prefetch(size) => prefetch(s, ctx, d, k, *size),
    })
}

/// The source's rows, opened once per run (a file source reads them as
/// they are asked for).
fn source_rows(ctx: &Ctx<'_>, src: &Source) -> Result<Arc<dyn RowSource>, Diagnostic> {
    let key = source_key(src);
    let cached = ctx.store.sources.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
    if let Some(c) = cached {
        return Ok(c);
    }
    let rows: Arc<dyn RowSource> = match src {
        Source::Host(h) => Arc::new(MemoryRows(
            h.columns.iter().map(|(ty, lit)| Tensor::from_literal(lit, ty)).collect::<Result<_, _>>()?,
        )),
        Source::File(f) => Arc::new(crate::io::loaders::open(f.clone())),
        Source::Range(n) => {
            let lit = Literal::Int((0..*n as i64).collect());
            Arc::new(MemoryRows(vec![Tensor::from_literal(&lit, &TensorType::new(DType::I32, vec![*n]))?]))
        }
        Source::Nodes(_) => return Err(Diagnostic::internal("pipeline: a graph source was not prepared")),
    };
    ctx.store.sources.lock().unwrap_or_else(|e| e.into_inner()).insert(key, rows.clone());
    Ok(rows)
}

/// Row numbers of the source, in the order the pipeline's elements have.
type Rows<'a> = Box<dyn Iterator<Item = Result<usize, Diagnostic>> + 'a>;

/// A source and the rows picked from it.
type Picked<'a> = (Arc<dyn RowSource>, Rows<'a>);

/// `rows` until the pass is cancelled; Ctrl-C is an error in their place.
fn cancellable<'a>(ctx: &Ctx<'_>, rows: impl Iterator<Item = usize> + 'a) -> Rows<'a> {
    let cancel = ctx.cancel.clone();
    Box::new(rows.map_while(move |i| {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        Some(crate::interrupt::check().map(|()| i))
    }))
}

/// When the first `k` transforms only pick and reorder elements
/// (`interleave`, `shuffle`, `take`, `skip`), the source's columns and the rows those transforms
/// pick, in order; `None` otherwise. The rows are exactly the elements the
/// transforms would give, as each reads its input only by position.
fn rows<'a>(ctx: &Ctx<'_>, d: &Dataset, k: usize) -> Result<Option<Picked<'a>>, Diagnostic> {
    if k == 0 {
        let source = source_rows(ctx, &d.source)?;
        let n = source.len();
        return Ok(Some((source, cancellable(ctx, 0..n))));
    }
    let picked = |up: Option<Picked<'a>>, f: &dyn Fn(Rows<'a>) -> Rows<'a>| up.map(|(c, r)| (c, f(r)));
    Ok(match &d.transforms[k - 1] {
        Transform::Shuffle { buffer, seed } => {
            let (buffer, seed, epoch) = (*buffer, *seed, ctx.epoch);
            picked(rows(ctx, d, k - 1)?, &|r| Box::new(Shuffle::new(r, buffer, seed, epoch)))
        }
        Transform::Interleave { cycle, block, parallel } => {
            let Source::File(file) = &d.source else {
                return Err(Diagnostic::internal("pipeline: `interleave` of a source without shards"));
            };
            let source = source_rows(ctx, &d.source)?;
            let source: Arc<dyn RowSource> = match parallel {
                None => source,
                Some(threads) => {
                    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                    Arc::new(super::interleave::Threaded { inner: source, threads: threads.unwrap_or(cores) })
                }
            };
            Some((source, cancellable(ctx, super::interleave::order(&file.counts, *cycle, *block).into_iter())))
        }
        Transform::Take(n) => picked(rows(ctx, d, k - 1)?, &|r| Box::new(r.take(*n))),
        Transform::Skip(n) => picked(rows(ctx, d, k - 1)?, &|r| Box::new(Skip { up: r, left: *n })),
        _ => None,
    })
}

/// A `map` (or `filter`) on the calling thread, with its own executor.
struct RegionStage<'p, 'a> {
    up: Iter<'a>,
    epoch: u64,
    ex: super::super::exec::Executor<'p>,
    fun: MapFn,
    filter: bool,
    index: usize,
    failed: bool,
}

impl<'p, 'a> RegionStage<'p, 'a> {
    fn new(ctx: &Ctx<'p>, t: &Transform, up: Iter<'a>, filter: bool) -> Result<Self, Diagnostic> {
        let mut ex = executor(ctx)?;
        let fun = MapFn::compile(&mut ex, t)?;
        Ok(RegionStage { up, epoch: ctx.epoch, ex, fun, filter, index: 0, failed: false })
    }
}

/// The key random ops in a `map` draw from: a distinct f32 integer per
/// element and epoch (exact below 2^24, where it wraps around).
pub(super) fn element_key(index: usize, epoch: u64) -> Result<Tensor, Diagnostic> {
    let key = (epoch.wrapping_mul(1_000_003).wrapping_add(index as u64) % (1 << 24)) + 1;
    Tensor::from_literal(&Literal::Float(vec![key as f64]), &TensorType::scalar(DType::F32))
}

impl Iterator for RegionStage<'_, '_> {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        if self.failed {
            return None;
        }
        loop {
            let mut e = match self.up.next()? {
                Ok(e) => e,
                Err(d) => {
                    self.failed = true;
                    return Some(Err(d));
                }
            };
            let i = self.index;
            self.index += 1;
            let what = if self.filter { "filter" } else { "map" };
            // A map consumes its element; a filter passes it on.
            let input = if self.filter { e.clone() } else { std::mem::take(&mut e) };
            let out = match self.fun.apply(&self.ex, input, i, self.epoch, what) {
                Ok(out) => out,
                Err(d) => {
                    self.failed = true;
                    return Some(Err(d));
                }
            };
            if !self.filter {
                return Some(Ok(out));
            }
            if out.first().and_then(|k| k.to_f64_vec().first().copied()).is_some_and(|k| k != 0.0) {
                return Some(Ok(e));
            }
        }
    }
}

/// tf.data's buffered shuffle with a counter-based random stream.
struct Shuffle<'a, T> {
    up: Box<dyn Iterator<Item = Result<T, Diagnostic>> + 'a>,
    buf: Vec<T>,
    size: usize,
    seed: u64,
    draw: u64,
    input: Input,
}

/// How far a shuffle has read its input.
#[derive(PartialEq)]
enum Input {
    /// The buffer is not filled yet.
    NotRead,
    /// Elements are left upstream.
    Left,
    /// Upstream is exhausted: the buffer drains.
    Exhausted,
}

impl<'a, T> Shuffle<'a, T> {
    /// Shuffles `up` in epoch `epoch` with a buffer of `size`.
    fn new(up: Box<dyn Iterator<Item = Result<T, Diagnostic>> + 'a>, size: usize, seed: u64, epoch: u64) -> Self {
        let seed = crate::rng::derive_seed(seed, &format!("epoch {epoch}"));
        Shuffle { up, buf: Vec::new(), size, seed, draw: 0, input: Input::NotRead }
    }
}

impl<T> Iterator for Shuffle<'_, T> {
    type Item = Result<T, Diagnostic>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.input == Input::NotRead {
            self.input = Input::Left;
            while self.buf.len() < self.size.max(1) {
                match self.up.next() {
                    Some(Ok(e)) => self.buf.push(e),
                    Some(Err(d)) => return Some(Err(d)),
                    None => {
                        self.input = Input::Exhausted;
                        break;
                    }
                }
            }
        }
        if self.buf.is_empty() {
            return None;
        }
        let i =
            ((crate::rng::uniform_at(self.seed, self.draw) * self.buf.len() as f64) as usize).min(self.buf.len() - 1);
        self.draw += 1;
        if self.input == Input::Left {
            match self.up.next() {
                Some(Ok(next)) => return Some(Ok(std::mem::replace(&mut self.buf[i], next))),
                Some(Err(d)) => {
                    self.buf.clear();
                    return Some(Err(d));
                }
                None => self.input = Input::Exhausted,
            }
        }
        Some(Ok(self.buf.swap_remove(i)))
    }
}

/// Groups `n` consecutive inputs (elements, or source rows) and makes
/// each group one batch with `stack`.
struct Batch<'a, T> {
    up: Box<dyn Iterator<Item = Result<T, Diagnostic>> + 'a>,
    n: usize,
    drop: bool,
    done: bool,
    stack: Box<dyn Fn(Vec<T>) -> Item + 'a>,
}

impl<'a, T> Batch<'a, T> {
    fn new(
        up: Box<dyn Iterator<Item = Result<T, Diagnostic>> + 'a>,
        n: usize,
        drop: bool,
        stack: Box<dyn Fn(Vec<T>) -> Item + 'a>,
    ) -> Self {
        Batch { up, n, drop, done: false, stack }
    }
}

impl<T> Iterator for Batch<'_, T> {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        if self.done {
            return None;
        }
        let mut chunk: Vec<T> = Vec::with_capacity(self.n);
        while chunk.len() < self.n {
            match self.up.next() {
                Some(Ok(e)) => chunk.push(e),
                Some(Err(d)) => {
                    self.done = true;
                    return Some(Err(d));
                }
                None => {
                    self.done = true;
                    break;
                }
            }
        }
        if chunk.is_empty() || (chunk.len() < self.n && self.drop) {
            return None;
        }
        Some((self.stack)(chunk))
    }
}

/// Drops the first `left` elements but passes errors through.
struct Skip<'a, T> {
    up: Box<dyn Iterator<Item = Result<T, Diagnostic>> + 'a>,
    left: usize,
}

impl<T> Iterator for Skip<'_, T> {
    type Item = Result<T, Diagnostic>;
    fn next(&mut self) -> Option<Self::Item> {
        while self.left > 0 {
            match self.up.next()? {
                Ok(_) => self.left -= 1,
                Err(d) => return Some(Err(d)),
            }
        }
        self.up.next()
    }
}

/// The most elements `prefetch(auto)` buffers.
const AUTO_MAX: usize = 64;

/// Pushes `items` (or the error that kept them from starting) into `q`,
/// up to the first error or until the consumer has gone.
pub(super) fn feed(q: &Queue<Item>, items: Result<Iter<'_>, Diagnostic>) {
    match items {
        Ok(items) => {
            for item in items {
                let failed = item.is_err();
                if !q.push(item) || failed {
                    break;
                }
            }
        }
        Err(e) => {
            q.push(Err(e));
        }
    }
}

/// Runs the upstream on its own thread, `size` elements ahead (`None`:
/// auto — start at 2 and double whenever the consumer had to wait).
fn prefetch<'s, 'p: 's>(
    s: &'s Scope<'s, 'p>,
    ctx: &Ctx<'p>,
    d: &'p Dataset,
    k: usize,
    size: Option<usize>,
) -> Iter<'s> {
    let queue = Arc::new(Queue::<Item>::new(size.unwrap_or(2)));
    let (q, c) = (queue.clone(), ctx.clone());
    s.spawn(move || {
        feed(&q, stream(s, &c, d, k - 1));
        q.finish();
    });
    let at = position(d, k - 1);
    if size.is_none() {
        ctx.report(|| format!("prefetch(auto) at transform {at}: starts with a buffer of 2 elements"));
    }
    Box::new(Prefetched { queue, auto: size.is_none(), seen: 0, ctx: ctx.clone(), at })
}

struct Prefetched<'p> {
    queue: Arc<Queue<Item>>,
    auto: bool,
    seen: u64,
    ctx: Ctx<'p>,
    at: usize,
}

impl Iterator for Prefetched<'_> {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        let item = self.queue.pop();
        if self.auto {
            // The consumer waited: the producer is slower in bursts, so let
            // it run further ahead (bounded, so memory stays bounded).
            let (starved, _) = self.queue.starvation();
            let cap = self.queue.capacity();
            if starved > self.seen + 1 && cap < AUTO_MAX {
                self.queue.set_capacity(cap * 2);
                self.ctx.report(|| {
                    format!("prefetch(auto) at transform {}: the consumer waited; buffer {cap} → {}", self.at, cap * 2)
                });
                self.seen = starved;
            }
        }
        item
    }
}

impl Drop for Prefetched<'_> {
    fn drop(&mut self) {
        if self.auto {
            let (starved, waited) = self.queue.starvation();
            self.ctx.report(|| {
                format!(
                    "prefetch(auto) at transform {}: buffer {} elements; the consumer waited {starved} times, {:.1} ms in all",
                    self.at,
                    self.queue.capacity(),
                    waited.as_secs_f64() * 1e3
                )
            });
        }
        self.queue.abandon();
    }
}
