//! The processes of a data-parallel run as the backends see them
//! (`backend::Collectives`): each `all_reduce_sum` of a fused step is one
//! `dist::Communicator::all_reduce_in_place` over the values where the
//! step keeps them, under the step's watchdog.
//!
//! Contract: the sums round as the interpreter's `+` of two tensors
//! (`dist::wire::add_into`, which the two-halves exchange uses too), over
//! the communicator's balanced tree of the ranks, so a fused step gives
//! the bits of the two halves. A rank that stops answering ends the job
//! with an error naming it (`Communicator`'s contract).
//!
//! Example: a fused MLP step on 2 ranks calls `all_reduce_sum` seven
//! times (six gradients, the loss); each is one swap with the other rank
//! and one add.

use crate::backend::{Collectives, Summand};
use crate::diag::Diagnostic;
use crate::dist::{wire, Communicator};
use crate::ir::DType;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct StepCollectives {
    world: Arc<dyn Communicator>,
    /// The watchdog's deadline for one all-reduce, in nanoseconds.
    timeout: AtomicU64,
    /// The step under way, for the message naming a silent rank.
    step: AtomicU64,
    /// Nanoseconds spent in all-reduces since the step started.
    spent: AtomicU64,
    /// Nanoseconds the step's first all-reduce took: where a rank that
    /// finished its first gradient early waits for the slower ranks.
    first: AtomicU64,
}

impl StepCollectives {
    pub(super) fn new(world: Arc<dyn Communicator>) -> StepCollectives {
        let zero = || AtomicU64::new(0);
        StepCollectives { world, timeout: zero(), step: zero(), spent: zero(), first: zero() }
    }

    /// Before step `number`, whose all-reduces may each wait `timeout`.
    pub(super) fn start_step(&self, number: u64, timeout: Duration) {
        self.step.store(number, Ordering::Relaxed);
        self.timeout.store(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.spent.store(0, Ordering::Relaxed);
        self.first.store(0, Ordering::Relaxed);
    }

    /// The time spent in all-reduces since the step started.
    pub(super) fn spent(&self) -> Duration {
        Duration::from_nanos(self.spent.load(Ordering::Relaxed))
    }

    /// The time the step's first all-reduce took (zero before it).
    pub(super) fn first(&self) -> Duration {
        Duration::from_nanos(self.first.load(Ordering::Relaxed))
    }
}

impl Collectives for StepCollectives {
    fn all_reduce_sum(&self, values: Summand<'_>) -> Result<(), Diagnostic> {
        let started = Instant::now();
        let timeout = Duration::from_nanos(self.timeout.load(Ordering::Relaxed));
        let what = format!("the gradients of step {}", self.step.load(Ordering::Relaxed));
        let (dtype, bytes) = match values {
            Summand::F32(v) => (DType::F32, bytes_of(v)),
            Summand::F64(v) => (DType::F64, bytes_of(v)),
        };
        let mut add = |into: &mut [u8], other: &[u8]| wire::add_into(dtype, into, other);
        let result = self.world.all_reduce_in_place(bytes, &mut add, timeout, &what);
        let took = started.elapsed().as_nanos() as u64;
        // Calls are serialized (one schedule place): a zero is the first.
        let _ = self.first.compare_exchange(0, took.max(1), Ordering::Relaxed, Ordering::Relaxed);
        self.spent.fetch_add(took, Ordering::Relaxed);
        result
    }
}

/// The element types an all-reduce sums.
trait Number: Copy {}
impl Number for f32 {}
impl Number for f64 {}

/// The bytes of `values` as they lie in memory: the little-endian bytes
/// `wire` adds, on the x86-64 machines tfc builds for.
fn bytes_of<T: Number>(values: &mut [T]) -> &mut [u8] {
    // SAFETY: `T` is `f32` or `f64` (no padding, every bit pattern valid),
    // and the bytes cover exactly `values`, borrowed mutably for as long.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
}
