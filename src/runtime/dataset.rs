//! Running dataset pipelines (§8): sources, then transforms in order. An
//! epoch's elements are computed eagerly; everything before the first
//! `shuffle` does not depend on the epoch and is computed once per run.
//!
//! Contract: with seeds given, the element order and every value are a pure
//! function of the program, the data and the epoch number — the same at any
//! thread count and on every machine. `shuffle(buffer, seed)` follows
//! tf.data (a buffer of `buffer` elements, reshuffled each epoch); `repeat()`
//! without a count is one pass (the training loop repeats epochs itself).

use super::exec::Executor;
use crate::backend::interp::host::{index_first, stack};
use crate::backend::interp::Tensor;
use crate::diag::{Code, Diagnostic, Span};
use crate::ir::plan::{Dataset, ReducePlan, Source, Transform};
use crate::ir::{DType, Literal, TensorType};
use std::rc::Rc;

/// One element: a tensor per part.
pub type Element = Vec<Tensor>;

/// The elements of `d` in epoch `epoch` (0-based).
pub fn elements(ex: &mut Executor, d: &Dataset, epoch: u64) -> Result<Rc<Vec<Element>>, Diagnostic> {
    let split = d.transforms.iter().position(|t| matches!(t, Transform::Shuffle { .. })).unwrap_or(d.transforms.len());
    let key = d as *const Dataset as usize;
    let prefix = match ex.data_cache.get(&key) {
        Some(p) => p.clone(),
        None => {
            let mut elems = source(ex, &d.source)?;
            for t in &d.transforms[..split] {
                elems = apply(ex, t, elems, epoch)?;
            }
            let p = Rc::new(elems);
            ex.data_cache.insert(key, p.clone());
            p
        }
    };
    if split == d.transforms.len() {
        return Ok(prefix);
    }
    let mut elems: Vec<Element> = prefix.as_ref().clone();
    for t in &d.transforms[split..] {
        elems = apply(ex, t, elems, epoch)?;
    }
    Ok(Rc::new(elems))
}

fn source(ex: &mut Executor, s: &Source) -> Result<Vec<Element>, Diagnostic> {
    let columns: Vec<Tensor> = match s {
        Source::Host(h) => h.columns.iter().map(|(ty, lit)| Tensor::from_literal(lit, ty)).collect::<Result<_, _>>()?,
        Source::Nodes(ids) => {
            ex.demand(ids)?;
            ids.iter().map(|id| ex.value(*id).cloned()).collect::<Result<_, _>>()?
        }
        Source::File(f) => super::loaders::load(f)?,
        Source::Range(n) => {
            let lit = Literal::Int((0..*n as i64).collect());
            vec![Tensor::from_literal(&lit, &TensorType::new(DType::I32, vec![*n]))?]
        }
    };
    let n = columns.first().and_then(|c| c.shape().first().copied()).unwrap_or(0);
    (0..n).map(|i| columns.iter().map(|c| index_first(c, i)).collect()).collect()
}

fn apply(ex: &mut Executor, t: &Transform, elems: Vec<Element>, epoch: u64) -> Result<Vec<Element>, Diagnostic> {
    Ok(match t {
        Transform::Map(region) => {
            let r = ex.compile_region(region)?;
            elems.iter().map(|e| ex.run_region(&r, e)).collect::<Result<_, _>>()?
        }
        Transform::Filter(region) => {
            let r = ex.compile_region(region)?;
            let mut kept = Vec::new();
            for e in elems {
                let keep = ex.run_region(&r, &e)?;
                if keep.first().map(|k| k.to_f64_vec().first().copied().unwrap_or(0.0) != 0.0).unwrap_or(false) {
                    kept.push(e);
                }
            }
            kept
        }
        Transform::Shuffle { buffer, seed } => {
            shuffle(elems, *buffer, crate::rng::derive_seed(*seed, &format!("epoch {epoch}")))
        }
        Transform::Batch { n, drop_remainder } => {
            let mut out = Vec::new();
            for chunk in elems.chunks(*n) {
                if chunk.len() < *n && *drop_remainder {
                    break;
                }
                let parts = (0..chunk[0].len())
                    .map(|p| stack(&chunk.iter().map(|e| &e[p]).collect::<Vec<_>>()))
                    .collect::<Result<Vec<_>, _>>()?;
                out.push(parts);
            }
            out
        }
        Transform::Repeat(Some(k)) => {
            let mut out = Vec::with_capacity(elems.len() * k);
            for _ in 0..*k {
                out.extend(elems.iter().cloned());
            }
            out
        }
        Transform::Repeat(None) | Transform::Cache | Transform::Prefetch(_) => elems,
        Transform::Take(n) => elems.into_iter().take(*n).collect(),
        Transform::Skip(n) => elems.into_iter().skip(*n).collect(),
        Transform::Split { seed, count, first } => {
            let order = permutation(elems.len(), *seed);
            let picked: Vec<usize> = if *first {
                order[..(*count).min(order.len())].to_vec()
            } else {
                order[(*count).min(order.len())..].to_vec()
            };
            picked.into_iter().map(|i| elems[i].clone()).collect()
        }
    })
}

/// tf.data's buffered shuffle with a counter-based random stream.
fn shuffle(elems: Vec<Element>, buffer: usize, seed: u64) -> Vec<Element> {
    let mut input = elems.into_iter();
    let mut buf: Vec<Element> = input.by_ref().take(buffer.max(1)).collect();
    let mut out = Vec::new();
    let mut draw = 0u64;
    while !buf.is_empty() {
        let i = (crate::rng::uniform_at(seed, draw) * buf.len() as f64) as usize;
        draw += 1;
        let i = i.min(buf.len() - 1);
        match input.next() {
            Some(next) => out.push(std::mem::replace(&mut buf[i], next)),
            None => out.push(buf.swap_remove(i)),
        }
    }
    out
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
    let batches = elements(ex, &plan.data, 0)?;
    let regions: Vec<(usize, super::exec::CompiledRegion)> =
        plan.regions.iter().map(|(b, r)| Ok((*b, ex.compile_region(r)?))).collect::<Result<_, Diagnostic>>()?;
    let (mut total, mut count) = (0.0f64, 0usize);
    for b in batches.iter() {
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
    }
    if count == 0 {
        return Err(Diagnostic::new(Code::Runtime, "the dataset is empty, so the metric has no value")
            .label(span, "evaluated here"));
    }
    Tensor::from_literal(&Literal::Float(vec![(total / count as f64) as f32 as f64]), &TensorType::scalar(DType::F32))
}

/// The first element, or every element stacked.
pub fn collect(ex: &mut Executor, d: &Dataset, all: bool, span: Span) -> Result<Vec<Tensor>, Diagnostic> {
    let elems = elements(ex, d, 0)?;
    let Some(first) = elems.first() else {
        return Err(Diagnostic::new(Code::Runtime, "the dataset is empty").label(span, "no element to take"));
    };
    if !all {
        return Ok(first.clone());
    }
    (0..first.len()).map(|p| stack(&elems.iter().map(|e| &e[p]).collect::<Vec<_>>())).collect()
}
