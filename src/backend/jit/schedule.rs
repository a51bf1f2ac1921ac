//! Which steps of a unit may run at the same time: the dependency graph
//! of its steps, from the storage each one reads and writes.
//!
//! Contract: [`Schedule::of`] takes every step's [`Access`] (in the unit's
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
//! [`Schedule::rank`] is each step's estimated cost to the end of the unit
//! along its longest path, so an executor can prefer the critical path.
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
    /// The convolutions' shared im2col buffer.
    Cols,
}

impl Place {
    fn overlaps(self, other: Place) -> bool {
        match (self, other) {
            (Place::Bytes(a, b), Place::Bytes(c, d)) => a < d && c < b && a < b && c < d,
            (Place::Table(a), Place::Table(b)) => a == b,
            (Place::Cols, Place::Cols) => true,
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

impl Schedule {
    /// The dependency graph of steps with the given accesses, in a valid
    /// sequential order.
    pub fn of(access: &[Access]) -> Schedule {
        let n = access.len();
        // `after[j]`: every step that must finish before `j` (transitively),
        // as a bit set, to drop edges a longer path implies.
        let words = n.div_ceil(64);
        let mut after = vec![vec![0u64; words]; n];
        let mut before: Vec<Vec<u32>> = vec![Vec::new(); n];
        for j in 0..n {
            // Later predecessors first: an earlier one reached through them
            // is already ordered.
            for i in (0..j).rev() {
                let implied = after[j][i / 64] >> (i % 64) & 1 == 1;
                if implied || !access[i].orders(&access[j]) {
                    continue;
                }
                before[j].push(i as u32);
                let (head, tail) = after.split_at_mut(j);
                let (aj, ai) = (&mut tail[0], &head[i]);
                for (w, x) in aj.iter_mut().zip(ai) {
                    *w |= x;
                }
                aj[i / 64] |= 1 << (i % 64);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::{Access, Place, Schedule};

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
        // Two convolutions share the im2col buffer.
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
}
