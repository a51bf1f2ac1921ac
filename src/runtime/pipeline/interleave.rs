//! `interleave` over a file source's shards (tf.data's
//! `Dataset.interleave` of one reader per file, deterministic order), and
//! reading a batch's rows on several threads.
//!
//! Contract: [`order`] gives the source's row numbers in the order tf.data
//! gives the elements of `list_files(…, shuffle=False).interleave(reader,
//! cycle_length, block_length)`: `cycle` slots, visited in turn; a slot
//! gives up to `block` elements of its shard; an empty slot takes the next
//! shard and reads from it at once; a shard that ends frees its slot and
//! the turn moves on. [`Threaded`] gives exactly its source's rows, read by
//! up to `threads` threads, each a contiguous part of the batch.
//!
//! Example: shards of 3, 1 and 2 rows (rows 0–2, 3, 4–5) with cycle 2 and
//! block 1 give 0, 3, 1, 2, 4, 5 (the second shard ends, the first
//! finishes, then the third takes the freed slot).

use crate::diag::Diagnostic;
use crate::io::loaders::RowSource;
use crate::tensor::host::concat_rows;
use crate::tensor::Tensor;
use std::ops::Range;
use std::sync::Arc;

/// The row order of `interleave(cycle, block)` over shards of `counts` rows.
pub(super) fn order(counts: &[usize], cycle: usize, block: usize) -> Vec<usize> {
    let mut starts = Vec::with_capacity(counts.len());
    let mut total = 0;
    for c in counts {
        starts.push(total);
        total += c;
    }
    // Each slot: the shard's next row and its end.
    let mut slots: Vec<Option<(usize, usize)>> = vec![None; cycle];
    let (mut next_shard, mut open, mut at, mut taken) = (0, 0, 0, 0);
    let mut out = Vec::with_capacity(total);
    while next_shard < counts.len() || open > 0 {
        match slots[at] {
            Some((row, end)) if row < end => {
                out.push(row);
                slots[at] = Some((row + 1, end));
                taken += 1;
                if taken == block {
                    (at, taken) = ((at + 1) % cycle, 0);
                }
            }
            Some(_) => {
                // The shard ended: its slot frees and the turn moves on.
                slots[at] = None;
                open -= 1;
                (at, taken) = ((at + 1) % cycle, 0);
            }
            None if next_shard < counts.len() => {
                slots[at] = Some((starts[next_shard], starts[next_shard] + counts[next_shard]));
                next_shard += 1;
                open += 1;
            }
            None => (at, taken) = ((at + 1) % cycle, 0),
        }
    }
    out
}

/// A source whose batches are read on several threads.
pub(super) struct Threaded {
    pub inner: Arc<dyn RowSource>,
    pub threads: usize,
}

/// The fewest rows worth a thread of their own.
const ROWS_PER_THREAD: usize = 16;

impl RowSource for Threaded {
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn gather(&self, rows: &[usize], real: Range<usize>) -> Result<Vec<Tensor>, Diagnostic> {
        let real = real.start.min(rows.len())..real.end.min(rows.len());
        let threads = self.threads.min(real.len() / ROWS_PER_THREAD).max(1);
        if threads == 1 {
            return self.inner.gather(rows, real);
        }
        // Contiguous parts of the real rows, then the zeros around them.
        let step = real.len().div_ceil(threads);
        let parts: Vec<Range<usize>> =
            (real.start..real.end).step_by(step).map(|s| s..(s + step).min(real.end)).collect();
        let read: Vec<Result<Vec<Tensor>, Diagnostic>> = std::thread::scope(|s| {
            let handles: Vec<_> =
                parts.iter().map(|p| s.spawn(|| self.inner.gather(&rows[p.clone()], 0..p.len()))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Diagnostic::internal("pipeline: a reading thread panicked"))))
                .collect()
        });
        let read = read.into_iter().collect::<Result<Vec<_>, _>>()?;
        let before = self.inner.gather(&rows[..real.start], 0..0)?;
        let after = self.inner.gather(&rows[real.end..], 0..0)?;
        (0..before.len())
            .map(|part| {
                let mut pieces = vec![&before[part]];
                pieces.extend(read.iter().map(|r| &r[part]));
                pieces.push(&after[part]);
                concat_rows(&pieces)
            })
            .collect()
    }

    fn rows_read(&self) -> usize {
        self.inner.rows_read()
    }
}

#[cfg(test)]
mod tests {
    use super::order;

    #[test]
    fn the_order_is_tf_datas() {
        // Each expected order is what TensorFlow 2.21's
        // `Dataset.interleave` gave for shards of these sizes.
        assert_eq!(order(&[3, 1, 2], 2, 1), vec![0, 3, 1, 2, 4, 5]);
        // Blocks of 2: two from the first shard, its one row from the
        // second (which ends), the third shard takes the freed slot.
        assert_eq!(order(&[3, 1, 2], 2, 2), vec![0, 1, 3, 2, 4, 5]);
        // One slot reads the shards one after another.
        assert_eq!(order(&[3, 1, 2], 1, 1), vec![0, 1, 2, 3, 4, 5]);
        // More slots than shards, and empty shards.
        assert_eq!(order(&[2, 0, 2], 4, 1), vec![0, 2, 1, 3]);
        assert_eq!(order(&[5, 3, 4, 1, 2], 3, 2), vec![0, 1, 5, 6, 8, 9, 2, 3, 7, 10, 11, 4, 12, 13, 14]);
    }
}
