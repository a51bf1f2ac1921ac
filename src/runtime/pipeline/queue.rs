//! A bounded queue between two pipeline threads whose capacity can grow
//! while it runs (what `prefetch(auto)` tunes), with shutdown from either
//! end: a consumer that goes away makes the producer's `push` fail, a
//! producer that finishes makes the consumer's `pop` return `None` once the
//! queue is drained.
//!
//! Contract: `push` blocks while the queue is full; `pop` blocks while it is
//! empty and open. Neither blocks after `close`. The consumer's waits are
//! counted so the caller can see whether the producer keeps up.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct State<T> {
    items: VecDeque<T>,
    cap: usize,
    /// The producer is done (no more pushes).
    finished: bool,
    /// The consumer is gone (pushes fail).
    abandoned: bool,
    /// Pops that found the queue empty, and the time they waited.
    starved: u64,
    waited: Duration,
}

pub struct Queue<T> {
    state: Mutex<State<T>>,
    changed: Condvar,
}

impl<T> Queue<T> {
    pub fn new(cap: usize) -> Queue<T> {
        Queue {
            state: Mutex::new(State {
                items: VecDeque::new(),
                cap: cap.max(1),
                finished: false,
                abandoned: false,
                starved: 0,
                waited: Duration::ZERO,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A thread that panicked while holding the lock cannot leave the
        // queue in a torn state (every update is one assignment), so a
        // poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `item`, waiting for room; `false` when the consumer is gone.
    pub fn push(&self, item: T) -> bool {
        let mut s = self.lock();
        while s.items.len() >= s.cap && !s.abandoned {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.abandoned {
            return false;
        }
        s.items.push_back(item);
        self.changed.notify_all();
        true
    }

    /// The next item, waiting for one; `None` when the producer is done and
    /// the queue is empty.
    pub fn pop(&self) -> Option<T> {
        let mut s = self.lock();
        if s.items.is_empty() && !s.finished {
            s.starved += 1;
            let start = Instant::now();
            while s.items.is_empty() && !s.finished {
                s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            s.waited += start.elapsed();
        }
        let item = s.items.pop_front();
        self.changed.notify_all();
        item
    }

    /// The producer is done.
    pub fn finish(&self) {
        self.lock().finished = true;
        self.changed.notify_all();
    }

    /// The consumer is gone.
    pub fn abandon(&self) {
        let mut s = self.lock();
        s.abandoned = true;
        s.items.clear();
        self.changed.notify_all();
    }

    pub fn capacity(&self) -> usize {
        self.lock().cap
    }

    pub fn set_capacity(&self, cap: usize) {
        self.lock().cap = cap.max(1);
        self.changed.notify_all();
    }

    /// (pops that had to wait, total time waited).
    pub fn starvation(&self) -> (u64, Duration) {
        let s = self.lock();
        (s.starved, s.waited)
    }
}
