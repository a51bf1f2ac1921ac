//! Looking at datasets from effects (§8): every element of an epoch,
//! `first`/`collect`, and the example-weighted mean a metric computes. The
//! elements come from the streaming pipeline runtime (`runtime::pipeline`).
//!
//! Contract: with seeds given, the element order and every value are a pure
//! function of the program, the data and the epoch number — the same at any
//! thread count and on every machine. `shuffle(buffer, seed)` follows
//! tf.data (a buffer of `buffer` elements, reshuffled each epoch); `repeat()`
//! without a count is one pass (the training loop repeats epochs itself).

use super::exec::Executor;
use super::pipeline::Share;
use crate::diag::{Code, Diagnostic, Span};
use crate::dist::Communicator;
use crate::ir::plan::{Dataset, ReducePlan};
use crate::ir::{DType, Literal, TensorType};
use crate::tensor::host::stack;
use crate::tensor::Tensor;

pub use super::pipeline::Element;

/// The elements of `d` in epoch `epoch` (0-based).
pub fn elements(ex: &mut Executor, d: &Dataset, epoch: u64) -> Result<Vec<Element>, Diagnostic> {
    super::pipeline::elements(ex, d, epoch)
}

/// A seeded Fisher–Yates permutation of `0..n`.
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = ((crate::rng::uniform_at(seed, i as u64) * (i + 1) as f64) as usize).min(i);
        p.swap(i, j);
    }
    p
}

/// The example-weighted mean of the region's scalar output over all batches.
///
/// In a data-parallel run (`ex.options.world` of several ranks) the ranks
/// share the work: each computes every `world`-th batch (and reads only
/// those from the data files), the per-batch values are gathered, and every
/// rank adds all of them in batch order — bit for bit what one process
/// computes.
pub fn reduce_mean(ex: &mut Executor, plan: &ReducePlan, extra: &[Tensor], span: Span) -> Result<Tensor, Diagnostic> {
    let regions: Vec<(usize, super::exec::CompiledRegion)> =
        plan.regions.iter().map(|(b, r)| Ok((*b, ex.compile_region(r)?))).collect::<Result<_, Diagnostic>>()?;
    let world = ex.options.world.clone().filter(|w| w.size() > 1);
    let share = match (&world, plan.data.len) {
        (Some(w), Some(_)) => Share::batches(&plan.data, w.size(), w.rank()),
        _ => None,
    };
    // Each batch's value and size, in order.
    let mut batches: Vec<Option<(f64, usize)>> = Vec::new();
    super::pipeline::for_each_share(ex, &plan.data, 0, share, |ex, i, b| {
        if !share.is_none_or(|s| s.owns(i)) {
            batches.push(None);
            return Ok(true);
        }
        let mut inputs = b.clone();
        inputs.extend(extra.iter().cloned());
        let size = b.first().and_then(|t| t.shape().first().copied()).unwrap_or(0);
        let r = match regions
            .iter()
            .find(|(s, _)| *s == size)
            .or(regions.first().filter(|_| plan.data.batch_sizes.is_empty()))
        {
            Some((_, r)) => r,
            None => {
                return Err(Diagnostic::internal(format!(
                    "runtime: no metric region was compiled for batches of {size}"
                )))
            }
        };
        let out = ex.run_region(r, &inputs)?;
        let v = out.first().map(|t| t.to_f64_vec()).and_then(|v| v.first().copied()).unwrap_or(f64::NAN);
        let n = b.first().and_then(|t| t.shape().first().copied()).unwrap_or(1);
        batches.push(Some((v, n)));
        Ok(true)
    })?;
    if let (Some(w), Some(_)) = (&world, share) {
        if ex.options.verbose && ex.options.is_primary() {
            let here = batches.iter().flatten().count();
            eprintln!(
                "metric: {here} of {} batches computed here, the rest on the other {} ranks",
                batches.len(),
                w.size() - 1
            );
        }
        batches = gather(w.as_ref(), &batches, ex.options.step_timeout)?;
    }
    let (mut total, mut count) = (0.0f64, 0usize);
    for (v, n) in batches.into_iter().flatten() {
        total += v * n as f64;
        count += n;
    }
    if count == 0 {
        return Err(Diagnostic::new(Code::Runtime, "the dataset is empty, so the metric has no value")
            .label(span, "evaluated here"));
    }
    Tensor::from_literal(&Literal::Float(vec![(total / count as f64) as f32 as f64]), &TensorType::scalar(DType::F32))
}

/// Every rank's per-batch values, each batch computed by one rank: the
/// slots are disjoint, so merging two blocks is the same in either order.
fn gather(
    world: &dyn Communicator,
    mine: &[Option<(f64, usize)>],
    timeout: Option<std::time::Duration>,
) -> Result<Vec<Option<(f64, usize)>>, Diagnostic> {
    const SLOT: usize = 24;
    let mut message = Vec::with_capacity(mine.len() * SLOT);
    for b in mine {
        let (flag, v, n) = b.map_or((0u64, 0u64, 0u64), |(v, n)| (1, v.to_bits(), n as u64));
        [flag, v, n].iter().for_each(|w| message.extend(w.to_le_bytes()));
    }
    let mut union = |into: &mut [u8], other: &[u8], _: bool| {
        if into.len() != other.len() {
            return Err(Diagnostic::internal("metric: the ranks counted different numbers of batches"));
        }
        for (a, b) in into.chunks_exact_mut(SLOT).zip(other.chunks_exact(SLOT)) {
            if a[0] == 0 && b[0] != 0 {
                a.copy_from_slice(b);
            }
        }
        Ok(())
    };
    let timeout = timeout.unwrap_or(std::time::Duration::from_secs(600));
    let all = world.exchange(&message, &mut union, timeout, "the values of a metric")?;
    let word = |s: &[u8], k: usize| u64::from_le_bytes(s[8 * k..8 * k + 8].try_into().unwrap_or_default());
    Ok(all
        .chunks_exact(SLOT)
        .map(|s| (word(s, 0) == 1).then(|| (f64::from_bits(word(s, 1)), word(s, 2) as usize)))
        .collect())
}

/// The first element, or every element stacked.
pub fn collect(ex: &mut Executor, d: &Dataset, all: bool, span: Span) -> Result<Vec<Tensor>, Diagnostic> {
    let mut elems = Vec::new();
    super::pipeline::for_each(ex, d, 0, |_, _, e| {
        elems.push(e);
        Ok(all)
    })?;
    let Some(first) = elems.first() else {
        return Err(Diagnostic::new(Code::Runtime, "the dataset is empty").label(span, "no element to take"));
    };
    if !all {
        return Ok(first.clone());
    }
    (0..first.len()).map(|p| stack(&elems.iter().map(|e| &e[p]).collect::<Vec<_>>())).collect()
}
