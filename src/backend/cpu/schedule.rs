//! Which steps of a unit may run at the same time: the dependency graph
//! of its steps, from the storage each one reads and writes.
//!
//! Contract: [`Order`] takes every step's [`Access`] (in the unit's
//! schedule order, which is one valid sequential order) and orders step
//! `j` after an earlier step `i` when their places overlap and either of
//! them writes: a read after a write (the value), a write after a read and
//! a write after a write (the memory plan reuses arena bytes for values
//! whose lives do not overlap, and a later value must not land under a
//! reader or writer of the earlier one). Steps with no path between them
//! touch disjoint storage or only read the same, so running them in any
//! order, or at once, gives each one the same operands as the sequential
//! order: results stay bit-identical at any thread count. Edges implied by
//! a longer path are dropped (fewer counters to update per run).
//!
//! [`Order::finish`] gives the [`Schedule`]; its `rank` is each step's
//! estimated cost to the end of the unit along its longest path, so an
//! executor can prefer the critical path. [`Scratch`] places the values a
//! kernel keeps to itself so that reusing scratch bytes adds no edge.
//!
//! Example: in an MLP's backward pass the weight gradient `h1ᵀ · g2` and
//! the input gradient `g2 · w2ᵀ` both only read `g2`, so neither depends
//! on the other; the Adam update of `w2` (which overwrites `w2` in place)
//! waits for the input gradient that reads `w2`.

/// A piece of storage a step touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// Bytes `lo..hi` of the arena.
    Bytes(usize, usize),
    /// One entry of the table of interpreter tensors.
    Table(usize),
    /// The convolutions' shared scratch (im2col block or padded source).
    Cols,
    /// Masks `lo..hi` of the first maxima fused max pools record.
    FirstMax(usize, usize),
    /// The other processes: every all-reduce writes it, so they run one
    /// at a time, in order (each process must reach them in one order).
    Collectives,
}

impl Place {
    pub(super) fn overlaps(self, other: Place) -> bool {
        match (self, other) {
            (Place::Bytes(a, b), Place::Bytes(c, d)) => a < d && c < b && a < b && c < d,
            (Place::Table(a), Place::Table(b)) => a == b,
            (Place::Cols, Place::Cols) | (Place::Collectives, Place::Collectives) => true,
            (Place::FirstMax(a, b), Place::FirstMax(c, d)) => a < d && c < b,
            _ => false,
        }
    }
}

/// What one step reads and writes, and a rough cost of running it (in
/// any unit, only compared with other steps' costs).
#[derive(Clone, Debug, Default)]
pub(super) struct Access {
    pub reads: Vec<Place>,
    pub writes: Vec<Place>,
    pub cost: u64,
}

impl Access {
    /// Whether `later` must wait for `self` (see the module docs).
    fn orders(&self, later: &Access) -> bool {
        let touches = |p: &Place, qs: &[Place]| qs.iter().any(|q| p.overlaps(*q));
        self.writes.iter().any(|w| touches(w, &later.reads) || touches(w, &later.writes))
            || self.reads.iter().any(|r| touches(r, &later.writes))
    }
}

/// The steps' dependency graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Schedule {
    /// How many steps each step waits for.
    pub waits: Vec<u32>,
    /// The steps that wait for each step, highest `rank` first.
    pub then: Vec<Vec<u32>>,
    /// The steps that wait for nothing, highest `rank` first.
    pub roots: Vec<u32>,
    /// Each step's cost plus the largest `rank` among the steps after it.
    pub rank: Vec<u64>,
}

/// The steps so far and what each waits for, built one step at a time
/// (so that `prepare` can ask what a step about to be added would wait for).
#[derive(Debug, Default)]
pub(super) struct Order {
    access: Vec<Access>,
    /// Every step each step waits for, transitively, as a bit set.
    after: Vec<Vec<u64>>,
    /// The steps each step waits for directly (none implied by another).
    before: Vec<Vec<u32>>,
}

fn has(bits: &[u64], i: usize) -> bool {
    bits.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
}

impl Order {
    pub fn len(&self) -> usize {
        self.access.len()
    }

    /// What a next step with `access` would wait for: transitively (a bit
    /// set over the steps so far) and directly.
    fn waits_of(&self, access: &Access) -> (Vec<u64>, Vec<u32>) {
        let n = self.access.len();
        let mut after = vec![0u64; n.div_ceil(64)];
        let mut before = Vec::new();
        // Later steps first: an earlier one reached through them is
        // already waited for.
        for i in (0..n).rev() {
            if has(&after, i) || !self.access[i].orders(access) {
                continue;
            }
            before.push(i as u32);
            for (w, x) in after.iter_mut().zip(&self.after[i]) {
                *w |= x;
            }
            after[i / 64] |= 1 << (i % 64);
        }
        (after, before)
    }

    /// Adds the next step.
    pub fn push(&mut self, access: Access) {
        let (after, before) = self.waits_of(&access);
        self.access.push(access);
        self.after.push(after);
        self.before.push(before);
    }

    /// Whether step `i` is done before a next step that reads `reads` can
    /// start.
    pub fn done_before(&self, i: usize, reads: &[Place]) -> bool {
        has(&self.waits_of(&Access { reads: reads.to_vec(), ..Access::default() }).0, i)
    }

    /// The dependency graph of the steps.
    pub fn finish(self) -> Schedule {
        let Order { access, before, .. } = self;
        let n = access.len();
        let mut rank = vec![0u64; n];
        let mut then: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (j, b) in before.iter().enumerate() {
            for &i in b {
                then[i as usize].push(j as u32);
            }
        }
        for i in (0..n).rev() {
            rank[i] = access[i].cost.max(1) + then[i].iter().map(|&j| rank[j as usize]).max().unwrap_or(0);
        }
        let by_rank = |v: &mut Vec<u32>| v.sort_by_key(|&j| (std::cmp::Reverse(rank[j as usize]), j));
        then.iter_mut().for_each(by_rank);
        let mut roots: Vec<u32> = (0..n as u32).filter(|&j| before[j as usize].is_empty()).collect();
        by_rank(&mut roots);
        Schedule { waits: before.iter().map(|b| b.len() as u32).collect(), then, roots, rank }
    }
}

impl Schedule {
    /// The dependency graph of steps with the given accesses, in a valid
    /// sequential order.
    #[cfg(test)]
    pub fn of(access: &[Access]) -> Schedule {
        let mut order = Order::default();
        for a in access {
            order.push(a.clone());
        }
        order.finish()
    }

    /// Whether some steps may run at the same time (else the steps form
    /// one chain and a sequential run is as fast).
    pub fn has_parallel_steps(&self) -> bool {
        self.forks() > 0
    }

    /// The steps beyond the first among the roots and among each step's
    /// followers: how often a run can hand a step to another worker.
    pub fn forks(&self) -> usize {
        std::iter::once(&self.roots).chain(&self.then).map(|t| t.len().saturating_sub(1)).sum()
    }
}

/// Scratch floats after the arena for values that stay inside one kernel
/// (a matrix product its epilogue reads, a reduction's operand and
/// result). Bytes are reused only when every earlier user of them is done
/// before all the kernel's inputs are ready anyway, so sharing scratch
/// adds (almost) no wait to the schedule — at most a step of the kernel
/// that reads only some of those inputs starts later — while scratch stays
/// small and warm in cache. (Fresh bytes for every value would grow the
/// MLP step's storage past the L2 cache: 3% slower on one thread.)
#[derive(Debug)]
pub(super) struct Scratch {
    regions: Vec<Region>,
    end: usize,
}

#[derive(Debug)]
struct Region {
    at: usize,
    floats: usize,
    /// The last step that touches it (`None`: the kernel being prepared
    /// holds it).
    last: Option<usize>,
}

impl Scratch {
    /// Scratch that starts at float `start` (a multiple of 16).
    pub fn new(start: usize) -> Scratch {
        Scratch { regions: Vec::new(), end: start }
    }

    /// The offset of `floats` floats for the kernel being prepared, which
    /// reads `reads` from outside; `order` holds the steps so far.
    pub fn take(&mut self, floats: usize, order: &Order, reads: &[Place]) -> usize {
        let floats = floats.div_ceil(16) * 16;
        let free = self
            .regions
            .iter_mut()
            .filter(|r| r.floats >= floats && r.last.is_some_and(|l| order.done_before(l, reads)))
            .min_by_key(|r| r.floats);
        if let Some(r) = free {
            r.last = None;
            return r.at;
        }
        let at = self.end;
        self.end += floats;
        self.regions.push(Region { at, floats, last: None });
        at
    }

    /// The kernel being prepared ends with step `last`.
    pub fn release(&mut self, last: usize) {
        for r in self.regions.iter_mut().filter(|r| r.last.is_none()) {
            r.last = Some(last);
        }
    }

    /// The first float after the scratch.
    pub fn end(&self) -> usize {
        self.end
    }
}

#[cfg(test)]
mod tests {
    use super::{Access, Order, Place, Schedule, Scratch};

    fn step(reads: &[Place], writes: &[Place]) -> Access {
        Access { reads: reads.to_vec(), writes: writes.to_vec(), cost: 1 }
    }

    const A: Place = Place::Bytes(0, 64);
    const B: Place = Place::Bytes(64, 128);
    const C: Place = Place::Bytes(128, 192);
    /// Overlaps the end of `A` and the start of `B`.
    const AB: Place = Place::Bytes(32, 96);

    #[test]
    fn readers_of_one_value_are_independent() {
        // 0 writes A; 1 and 2 only read it.
        let s = Schedule::of(&[step(&[], &[A]), step(&[A], &[B]), step(&[A], &[C])]);
        assert_eq!(s.waits, vec![0, 1, 1]);
        assert_eq!(s.roots, vec![0]);
        assert_eq!(s.then[0].len(), 2);
        assert!(s.has_parallel_steps());
        assert_eq!(s.forks(), 1);
    }

    #[test]
    fn reused_bytes_order_write_after_read_and_write_after_write() {
        // 0 writes A, 1 reads A into B, then the plan reuses A's bytes: 2
        // writes a value over part of them (write after read: after 1;
        // write after write: after 0, implied through 1).
        let s = Schedule::of(&[step(&[], &[A]), step(&[A], &[B]), step(&[C], &[AB])]);
        assert_eq!(s.waits, vec![0, 1, 1]);
        assert_eq!(s.then[0], vec![1]);
        // 2 also overwrites part of B, which 1 wrote.
        assert_eq!(s.then[1], vec![2]);
        // A write over bytes nobody else touched depends on nothing.
        let s = Schedule::of(&[step(&[], &[A]), step(&[A], &[B]), step(&[], &[C])]);
        assert_eq!(s.waits, vec![0, 1, 0]);
        assert_eq!(s.roots.len(), 2);
    }

    #[test]
    fn a_write_over_a_value_still_read_waits_for_the_reader() {
        // 1 reads A; 2 writes A in place (an optimizer update) and must
        // wait for 1 even though it shares no written bytes with it.
        let s = Schedule::of(&[step(&[], &[B]), step(&[A, B], &[C]), step(&[A], &[A])]);
        assert_eq!(s.waits, vec![0, 1, 1]);
        assert_eq!(s.then[1], vec![2]);
        assert_eq!(s.roots, vec![0]);
    }

    #[test]
    fn adjacent_ranges_and_other_places_do_not_conflict() {
        let s = Schedule::of(&[step(&[], &[A]), step(&[], &[B]), step(&[], &[Place::Table(0)])]);
        assert_eq!(s.waits, vec![0, 0, 0]);
        let s = Schedule::of(&[step(&[], &[Place::Table(1)]), step(&[Place::Table(1)], &[Place::Table(2)])]);
        assert_eq!(s.waits, vec![0, 1]);
        // Two convolutions share the convolution scratch.
        let s = Schedule::of(&[step(&[], &[A, Place::Cols]), step(&[], &[B, Place::Cols])]);
        assert_eq!(s.waits, vec![0, 1]);
        // An empty range overlaps nothing.
        let s = Schedule::of(&[step(&[], &[Place::Bytes(8, 8)]), step(&[A], &[B])]);
        assert_eq!(s.waits, vec![0, 0]);
    }

    #[test]
    fn implied_edges_are_dropped_and_the_chain_is_sequential() {
        // A chain 0 -> 1 -> 2 where 2 also reads 0's output: the edge
        // 0 -> 2 is implied.
        let s = Schedule::of(&[step(&[], &[A]), step(&[A], &[B]), step(&[A, B], &[C])]);
        assert_eq!(s.then, vec![vec![1], vec![2], vec![]]);
        assert!(!s.has_parallel_steps());
        assert_eq!(s.rank, vec![3, 2, 1]);
    }

    #[test]
    fn the_critical_path_comes_first() {
        // 0 feeds a cheap step 1 and an expensive step 2.
        let mut steps = vec![step(&[], &[A]), step(&[A], &[B]), step(&[A], &[C])];
        steps[2].cost = 100;
        let s = Schedule::of(&steps);
        assert_eq!(s.then[0], vec![2, 1]);
        assert_eq!(s.rank[0], 101);
    }

    #[test]
    fn scratch_is_reused_only_after_a_step_the_reader_waits_for() {
        let mut order = Order::default();
        let mut scratch = Scratch::new(1024);
        // Kernel 1 (steps 0, 1): reads A, keeps a value in scratch.
        let s1 = scratch.take(100, &order, &[A]);
        assert_eq!(s1, 1024);
        let mid = Place::Bytes(4 * s1, 4 * (s1 + 112));
        order.push(step(&[A], &[mid]));
        order.push(step(&[mid], &[B]));
        scratch.release(1);
        // Kernel 2 reads A too but not B: it does not wait for step 1, so
        // it gets new bytes (after the first 112 floats).
        assert_eq!(scratch.take(50, &order, &[A]), 1024 + 112);
        order.push(step(&[A], &[C]));
        scratch.release(2);
        // Kernel 3 reads B, written by step 1: the first bytes are free.
        assert!(order.done_before(1, &[B]) && !order.done_before(2, &[B]));
        assert_eq!(scratch.take(64, &order, &[B]), 1024);
        // A second value of the same kernel gets other bytes, and one too
        // large for any free region gets new ones.
        assert_ne!(scratch.take(64, &order, &[B]), 1024);
        assert_eq!(scratch.take(500, &order, &[B, C]), 1024 + 112 + 64 + 64);
        assert_eq!(scratch.end(), 1024 + 112 + 64 + 64 + 512);
    }
}
