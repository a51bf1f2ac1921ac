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
use crate::diag::{Code, Diagnostic, Span};
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
pub fn reduce_mean(ex: &mut Executor, plan: &ReducePlan, extra: &[Tensor], span: Span) -> Result<Tensor, Diagnostic> {
    let regions: Vec<(usize, super::exec::CompiledRegion)> =
        plan.regions.iter().map(|(b, r)| Ok((*b, ex.compile_region(r)?))).collect::<Result<_, Diagnostic>>()?;
    let (mut total, mut count) = (0.0f64, 0usize);
    super::pipeline::for_each(ex, &plan.data, 0, |ex, _, b| {
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
        total += v * n as f64;
        count += n;
        Ok(true)
    })?;
    if count == 0 {
        return Err(Diagnostic::new(Code::Runtime, "the dataset is empty, so the metric has no value")
            .label(span, "evaluated here"));
    }
    Tensor::from_literal(&Literal::Float(vec![(total / count as f64) as f32 as f64]), &TensorType::scalar(DType::F32))
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
