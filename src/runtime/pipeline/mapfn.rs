//! A compiled `map` (or `filter`) function, as a stage runs it: once per
//! element; for a function over batches of two sizes, the one compiled for
//! the batch's size; or — for a map the `vectorize_maps` pass moved behind
//! `batch(n)` — once per batch of `n`, with a shorter last batch split into
//! its elements, mapped one by one and stacked again.
//!
//! Contract: `apply` returns exactly what the original per-element function
//! gives for the element (or, batched, the stack of what it gives for each
//! element of the batch); an error names the element or batch index.
//!
//! Example: `batch(64) |> batched_map` over 100 elements runs the batched
//! region once (elements 0..64) and the element region 36 times.

use super::stages::element_key;
use super::Element;
use crate::diag::Diagnostic;
use crate::ir::plan::Transform;
use crate::runtime::exec::{CompiledRegion, Executor};
use crate::tensor::host::{index_first, stack};
use crate::tensor::Tensor;

pub(super) struct MapFn {
    /// The function, on each element (or, batched, on whole batches).
    region: CompiledRegion,
    /// For a function over batches of several sizes: the shorter sizes and
    /// their functions (`region` is the one for full batches).
    shorter: Vec<(usize, CompiledRegion)>,
    /// For a map moved behind `batch(n)`: `n`, and the function on one
    /// element for a shorter last batch.
    per_element: Option<(usize, Box<CompiledRegion>)>,
}

impl MapFn {
    /// Compiles the function of a `Map`, `Filter` or `BatchedMap` transform.
    pub(super) fn compile(ex: &mut Executor, t: &Transform) -> Result<MapFn, Diagnostic> {
        match t {
            Transform::Map(r) | Transform::Filter(r) => {
                Ok(MapFn { region: ex.compile_region(r)?, shorter: Vec::new(), per_element: None })
            }
            Transform::BatchedMap { batched, element, n } => Ok(MapFn {
                region: ex.compile_region(batched)?,
                shorter: Vec::new(),
                per_element: Some((*n, Box::new(ex.compile_region(element)?))),
            }),
            Transform::BySize { regions, .. } => {
                let mut compiled = regions.iter().map(|(n, r)| Ok((*n, ex.compile_region(r)?)));
                let (_, region) = compiled.next().ok_or_else(|| Diagnostic::internal("pipeline: no function"))??;
                Ok(MapFn { region, shorter: compiled.collect::<Result<_, Diagnostic>>()?, per_element: None })
            }
            _ => Err(Diagnostic::internal("pipeline: a transform without a function")),
        }
    }

    /// The function's outputs for element (or batch) `index` of epoch
    /// `epoch`; `what` (`map`, `filter`) names the transform in errors.
    pub(super) fn apply(
        &self,
        ex: &Executor,
        input: Element,
        index: usize,
        epoch: u64,
        what: &str,
    ) -> Result<Vec<Tensor>, Diagnostic> {
        let len = input.first().and_then(|p| p.shape().first().copied()).unwrap_or(0);
        let Some((n, element)) = &self.per_element else {
            let region = self.shorter.iter().find(|(n, _)| *n == len).map_or(&self.region, |(_, r)| r);
            return run(ex, region, input, index, epoch)
                .map_err(|d| d.note(format!("while computing `{what}` on element {index} of the dataset")));
        };
        let batch_note = |d: Diagnostic| d.note(format!("while computing `{what}` on batch {index} of the dataset"));
        if len == *n {
            return run(ex, &self.region, input, index, epoch).map_err(batch_note);
        }
        let mut outs: Vec<Vec<Tensor>> = Vec::with_capacity(len);
        for i in 0..len {
            let parts = input.iter().map(|p| index_first(p, i)).collect::<Result<_, _>>()?;
            outs.push(run(ex, element, parts, i, epoch).map_err(batch_note)?);
        }
        let width = outs.first().map_or(0, Vec::len);
        (0..width).map(|k| stack(&outs.iter().map(|o| &o[k]).collect::<Vec<_>>())).collect()
    }
}

/// Runs a region on one input; its last input is the element's key, which
/// random ops in the function draw from.
fn run(
    ex: &Executor,
    r: &CompiledRegion,
    mut inputs: Element,
    index: usize,
    epoch: u64,
) -> Result<Vec<Tensor>, Diagnostic> {
    inputs.push(element_key(index, epoch)?);
    ex.run_region(r, &inputs)
}
