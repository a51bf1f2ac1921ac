//! `map(f, parallel = n | auto)`: a feeder thread pulls the upstream and
//! numbers the elements, `n` workers (each with its own executor) run the
//! compiled `f`, and the consumer puts the results back in input order with
//! a reorder buffer.
//!
//! Elements travel in chunks of consecutive elements (one at first, growing
//! to `CHUNK` as the pass goes on), so that a cheap `f` — MNIST's reshape
//! and scale takes microseconds — is not dominated by handing each element
//! from thread to thread, while a short dataset is still spread over every
//! worker.
//!
//! Contract: the output is exactly the sequential map's, element for
//! element, at any worker count. Memory stays bounded: at most `2n` chunks
//! wait for a worker and `2n` for the consumer (plus the out-of-order ones
//! held for reordering, fewer than the chunks in flight). With `auto`, the
//! map starts with one worker and adds one (up to the number of cores) each
//! time the consumer has to wait for the next element; `--verbose` reports
//! every change.

use super::mapfn::MapFn;
use super::stages::stream;
use super::{executor, position, Ctx, Item, Iter};
use crate::diag::Diagnostic;
use crate::ir::plan::{Dataset, Transform};
use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::Scope;

/// Consecutive elements, numbered from the first one's index.
type Job = (usize, Vec<crate::runtime::pipeline::Element>);

/// The most elements in one chunk.
const CHUNK: usize = 64;

/// What the consumer receives: the results of the chunk that starts at an
/// index (ending at its first error), or the number of elements the feeder
/// sent in all.
enum Msg {
    Results(usize, Vec<Item>),
    End(usize),
}

/// The map of transform `k` (a `Map` or `BatchedMap` followed by its
/// `Parallel` marker) on workers.
pub(super) fn map<'s, 'p: 's>(
    s: &'s Scope<'s, 'p>,
    ctx: &Ctx<'p>,
    d: &'p Dataset,
    k: usize,
    workers: Option<usize>,
) -> Result<Iter<'s>, Diagnostic> {
    let transform = &d.transforms[k];
    // A batch is already a worker's portion.
    let most = if matches!(transform, Transform::BatchedMap { .. }) { 1 } else { CHUNK };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let max = workers.unwrap_or(cores).max(1);
    let start = workers.unwrap_or(1).max(1);
    let (job_tx, job_rx) = sync_channel::<Job>(2 * max);
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (out_tx, out_rx) = sync_channel::<Msg>(2 * max);
    // The feeder numbers the upstream elements and cuts them into chunks;
    // an upstream error goes straight to the consumer at its position.
    let (c, feed_out) = (ctx.clone(), out_tx.clone());
    s.spawn(move || {
        let items = match stream(s, &c, d, k) {
            Ok(items) => items,
            Err(e) => {
                let _ = feed_out.send(Msg::Results(0, vec![Err(e)]));
                return;
            }
        };
        let (mut n, mut chunk) = (0, Vec::new());
        for item in items {
            match item {
                Ok(e) => chunk.push(e),
                Err(e) => {
                    let start = n - chunk.len();
                    if !chunk.is_empty() && job_tx.send((start, chunk)).is_err() {
                        return;
                    }
                    let _ = feed_out.send(Msg::Results(n, vec![Err(e)]));
                    return;
                }
            }
            n += 1;
            // Chunks grow with the pass, so the first elements (and all of
            // a short dataset) still spread over the workers.
            if chunk.len() >= (n / (4 * max)).clamp(1, most)
                && job_tx.send((n - chunk.len(), std::mem::take(&mut chunk))).is_err()
            {
                return;
            }
        }
        if !chunk.is_empty() && job_tx.send((n - chunk.len(), chunk)).is_err() {
            return;
        }
        let _ = feed_out.send(Msg::End(n));
    });
    let spawner = Spawner { s, ctx: ctx.clone(), transform, jobs: job_rx, out: out_tx };
    for _ in 0..start {
        spawner.spawn();
    }
    // A map the optimizer moved behind `batch` reports where it now runs.
    let at = match transform {
        Transform::BatchedMap { n, .. } => format!("{} (on batches of {n})", position(d, k)),
        _ => position(d, k).to_string(),
    };
    ctx.report(|| match workers {
        Some(n) => format!("map(parallel = {n}) at transform {at}: {n} workers"),
        None => format!("map(parallel = auto) at transform {at}: starts with 1 worker, at most {max}"),
    });
    Ok(Box::new(Reorder {
        results: out_rx,
        pending: BTreeMap::new(),
        current: Vec::new().into_iter(),
        next: 0,
        end: None,
        workers: start,
        max: if workers.is_some() { start } else { max },
        spawner,
        at,
        failed: false,
    }))
}

/// Starts workers (more of them later, for `auto`).
struct Spawner<'s, 'p> {
    s: &'s Scope<'s, 'p>,
    ctx: Ctx<'p>,
    transform: &'p Transform,
    jobs: Arc<Mutex<Receiver<Job>>>,
    out: SyncSender<Msg>,
}

impl Spawner<'_, '_> {
    fn spawn(&self) {
        let (c, transform, jobs, out) = (self.ctx.clone(), self.transform, self.jobs.clone(), self.out.clone());
        self.s.spawn(move || {
            // Compiled on the first job, so that a failure has an element to name.
            let mut compiled = None;
            loop {
                let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).recv();
                let Ok((start, elems)) = job else { return };
                if compiled.is_none() {
                    match executor(&c).and_then(|mut ex| MapFn::compile(&mut ex, transform).map(|f| (ex, f))) {
                        Ok(x) => compiled = Some(x),
                        Err(d) => {
                            let _ = out.send(Msg::Results(start, vec![Err(d)]));
                            return;
                        }
                    }
                }
                let Some((ex, fun)) = compiled.as_ref() else { return };
                let mut results = Vec::with_capacity(elems.len());
                for (j, e) in elems.into_iter().enumerate() {
                    let result = fun.apply(ex, e, start + j, c.epoch, "map");
                    let failed = result.is_err();
                    results.push(result);
                    if failed {
                        break;
                    }
                }
                let failed = results.last().is_some_and(|r| r.is_err());
                if out.send(Msg::Results(start, results)).is_err() || failed {
                    return;
                }
            }
        });
    }
}

/// Hands results out in input order.
struct Reorder<'s, 'p> {
    results: Receiver<Msg>,
    /// Chunks that arrived before their turn, by the index of their first element.
    pending: BTreeMap<usize, Vec<Item>>,
    /// The chunk being handed out.
    current: std::vec::IntoIter<Item>,
    /// The index of the next element to hand out.
    next: usize,
    /// The number of elements, once the feeder is done.
    end: Option<usize>,
    workers: usize,
    max: usize,
    spawner: Spawner<'s, 'p>,
    at: String,
    failed: bool,
}

impl Iterator for Reorder<'_, '_> {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        if self.failed {
            return None;
        }
        let mut waited = false;
        loop {
            if let Some(item) = self.current.next() {
                self.next += 1;
                self.failed = item.is_err();
                return Some(item);
            }
            if let Some(chunk) = self.pending.remove(&self.next) {
                self.current = chunk.into_iter();
                continue;
            }
            if self.end == Some(self.next) {
                return None;
            }
            let msg = match self.results.try_recv() {
                Ok(m) => m,
                Err(TryRecvError::Empty) => {
                    // Every sender lives as long as the feeder or a worker
                    // that can still deliver, and the feeder always ends with
                    // `End` or an error, so this wait ends.
                    if !waited && self.workers < self.max && self.next > 0 {
                        self.spawner.spawn();
                        self.workers += 1;
                        let (at, w) = (&self.at, self.workers);
                        self.spawner.ctx.report(|| {
                            format!("map(parallel = auto) at transform {at}: the consumer waited; {w} workers")
                        });
                    }
                    waited = true;
                    match self.results.recv() {
                        Ok(m) => m,
                        Err(_) => return Some(Err(Diagnostic::internal("pipeline: a map worker stopped early"))),
                    }
                }
                Err(TryRecvError::Disconnected) => {
                    return Some(Err(Diagnostic::internal("pipeline: a map worker stopped early")))
                }
            };
            match msg {
                Msg::Results(i, items) => {
                    self.pending.insert(i, items);
                }
                Msg::End(n) => self.end = Some(n),
            }
        }
    }
}
