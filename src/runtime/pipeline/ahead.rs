//! Passes started ahead of time: while a training loop runs epoch `e`, the
//! pipeline of epoch `e + 1` is already running on a background thread, so
//! that the next epoch does not begin with a stall (a large shuffle buffer
//! filling, files decoding) but with its first batches waiting.
//!
//! Contract:
//! - The elements of every epoch are exactly those `for_each` gives for the
//!   same `(program, data, epoch)`: a pass started ahead runs the very same
//!   stages, only earlier and on another thread.
//! - A pass started ahead reads the program's slots as they were when it
//!   started; the caller promises they do not change before that epoch is
//!   consumed (the training loop fills its result slots only after its last
//!   epoch).
//! - Nothing outlives the [`Ahead`] that holds it: dropping it — an early
//!   stop, an error, Ctrl-C, the end of training — cancels the pass (its
//!   sources end, its queues are abandoned) and joins its thread. The first
//!   error of a pass travels to the consumer in element order, as in
//!   `for_each`, when that epoch is consumed.
//! - A plan with `cache()` is not started ahead (its first pass must be
//!   complete before later epochs replay it), nor is a dataset that is not
//!   part of the program's effects, nor any pass of an
//!   [`Ahead::on_this_thread`]: these run as `for_each` does.
//!
//! Example: the training loop calls `for_each_ahead(ex, &plan.data, epoch,
//! Some(epoch + 1), &mut ahead, step)`; once epoch `epoch` has delivered its
//! first batch, epoch `epoch + 1` starts filling its shuffle buffer.

use super::queue::Queue;
use super::{prepare_source, Ctx, Element, Item, Share};
use crate::diag::Diagnostic;
use crate::ir::plan::{Dataset, Transform};
use crate::ir::{Effect, Program};
use crate::runtime::exec::Executor;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Room for this many elements between a pass started ahead and its consumer
/// (the pass's own `prefetch` and shuffle buffers come before it).
const HANDOFF: usize = 4;

/// What a training loop keeps between epochs: the next epoch's pass, if one
/// was started, and the owned copy of the program its thread runs.
#[derive(Default)]
pub struct Ahead {
    program: Option<Arc<Program>>,
    pending: Option<Pending>,
    /// Every pass runs on the consumer's thread, as `for_each` does.
    inline: bool,
}

impl Ahead {
    /// Passes that all run on the consumer's thread: for a consumer with no
    /// core to spare, where a thread running ahead could only preempt it.
    pub fn on_this_thread() -> Ahead {
        Ahead { inline: true, ..Ahead::default() }
    }
}

/// One pass running on its own thread into a queue.
struct Pending {
    /// The dataset it is a pass over (its address in the caller's program).
    data: usize,
    epoch: u64,
    queue: Arc<Queue<Item>>,
    cancel: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.queue.abandon();
        if let Some(t) = self.thread.take() {
            // The thread ends promptly: its sources see `cancel`, its pushes
            // fail. A panic in it has already been reported on stderr.
            let _ = t.join();
        }
    }
}

/// Where a dataset sits among a program's effects, so that the same dataset
/// can be found in an owned copy of the program, which the thread running
/// ahead borrows its dataset (and the dataset's regions) from.
#[derive(Clone, Copy)]
enum Place {
    Train(usize),
    Eval(usize, usize),
    Reduce(usize),
    Collect(usize),
}

fn place(p: &Program, d: &Dataset) -> Option<Place> {
    p.effects.iter().enumerate().find_map(|(i, e)| match e {
        Effect::Train(t) if std::ptr::eq(&t.data, d) => Some(Place::Train(i)),
        Effect::Train(t) => t.evals.iter().position(|ev| std::ptr::eq(&ev.reduce.data, d)).map(|k| Place::Eval(i, k)),
        Effect::Reduce { plan, .. } if std::ptr::eq(&plan.data, d) => Some(Place::Reduce(i)),
        Effect::Collect { data, .. } if std::ptr::eq(&**data, d) => Some(Place::Collect(i)),
        _ => None,
    })
}

fn at(p: &Program, place: Place) -> Option<&Dataset> {
    match (place, place_effect(p, place)?) {
        (Place::Train(_), Effect::Train(t)) => Some(&t.data),
        (Place::Eval(_, k), Effect::Train(t)) => t.evals.get(k).map(|ev| &ev.reduce.data),
        (Place::Reduce(_), Effect::Reduce { plan, .. }) => Some(&plan.data),
        (Place::Collect(_), Effect::Collect { data, .. }) => Some(&**data),
        _ => None,
    }
}

fn place_effect(p: &Program, place: Place) -> Option<&Effect> {
    let (Place::Train(i) | Place::Eval(i, _) | Place::Reduce(i) | Place::Collect(i)) = place;
    p.effects.get(i)
}

/// Like `for_each` for epoch `epoch`, and once this epoch has delivered its
/// first element, starts epoch `next` (when given) on a background thread,
/// kept in `ahead` for the next call. A call for an epoch that `ahead`
/// already started consumes that pass instead of starting one.
pub fn for_each_ahead(
    ex: &mut Executor,
    d: &Dataset,
    epoch: u64,
    next: Option<u64>,
    ahead: &mut Ahead,
    share: Option<Share>,
    mut f: impl FnMut(&mut Executor, usize, Element) -> Result<bool, Diagnostic>,
) -> Result<(), Diagnostic> {
    let data = d as *const Dataset as usize;
    let started = ahead.pending.take().filter(|p| p.data == data && p.epoch == epoch);
    let cached = d.transforms.iter().any(|t| matches!(t, Transform::Cache(_)));
    let Some(place) = place(ex.program, d).filter(|_| !cached && !ahead.inline) else {
        return super::for_each_share(ex, d, epoch, share, f);
    };
    let waiting = Instant::now();
    let current = match started {
        Some(p) => p,
        None => start(ex, place, d, epoch, ahead, share)?,
    };
    let mut i = 0;
    while let Some(item) = current.queue.pop() {
        if i == 0 && ex.options.verbose {
            eprintln!(
                "pipeline: epoch {}: the first element was ready after {:.1} ms",
                epoch + 1,
                waiting.elapsed().as_secs_f64() * 1e3
            );
        }
        if !f(ex, i, item?)? {
            break;
        }
        if i == 0 {
            if let Some(n) = next {
                ahead.pending = Some(start(ex, place, d, n, ahead, share)?);
            }
        }
        i += 1;
    }
    if ex.options.verbose {
        let (times, waited) = current.queue.starvation();
        eprintln!(
            "pipeline: epoch {}: the consumer waited for input {times} times, {:.1} ms in all",
            epoch + 1,
            waited.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// Starts the pass of epoch `epoch` over `d` on a thread of its own.
fn start(
    ex: &mut Executor,
    place: Place,
    d: &Dataset,
    epoch: u64,
    ahead: &mut Ahead,
    share: Option<Share>,
) -> Result<Pending, Diagnostic> {
    prepare_source(ex, &d.source)?;
    let program = ahead.program.get_or_insert_with(|| Arc::new(ex.program.clone())).clone();
    let queue = Arc::new(Queue::new(HANDOFF));
    let cancel = Arc::new(AtomicBool::new(false));
    let slots: Arc<HashMap<_, _>> = Arc::new(ex.slots.clone());
    let (options, store, q, c) = (ex.options.clone(), ex.data_cache.clone(), queue.clone(), cancel.clone());
    let thread = std::thread::Builder::new()
        .name(format!("tfc pipeline epoch {}", epoch + 1))
        .spawn(move || {
            let Some(d) = at(&program, place) else {
                q.push(Err(Diagnostic::internal("pipeline: a dataset is missing from the program's copy")));
                q.finish();
                return;
            };
            let ctx = Ctx { program: &program, options, slots, store, epoch, cancel: c.clone(), share };
            std::thread::scope(|s| {
                super::stages::feed(&q, super::stages::stream(s, &ctx, d, d.transforms.len()));
                // As in `for_each`: every exit stops the sources.
                c.store(true, Ordering::Relaxed);
            });
            q.finish();
        })
        .map_err(|e| Diagnostic::internal(format!("pipeline: cannot start a thread: {e}")))?;
    Ok(Pending { data: d as *const Dataset as usize, epoch, queue, cancel, thread: Some(thread) })
}
