//! Where a GPU unit's computed values lie in its `vals` buffer: the memory
//! plan's GPU arena first (`passes::memory_plan`: values whose lifetimes do
//! not overlap share words, an elementwise kernel may write over its
//! operand), then the words the plan leaves to the backend.
//!
//! Contract: [`Arena::of`] reads the plan of one unit. `word(n)` is the
//! word of a GPU kernel's output the plan placed in the GPU arena (its
//! offset in 4-byte words: the plan sizes GPU elements as one word,
//! `Device::element_bytes`); `over_input(n)` the unit input that output
//! replaces in place (a parameter or optimizer state of a training step).
//! Words after `words()` are the backend's own, taken with [`Words`]: the
//! results of host kernels the GPU reads, the values of checked kernels
//! (each followed by its error flag, which the plan does not size), the
//! carried values' scratch, and each kernel's inner values
//! (an anchor's result before its epilogue), which live only while that
//! kernel's shaders run and so share one region (`Inner`). A unit the plan
//! did not place (no memory plan, or no fixed order) gets no arena: every
//! value then takes words of its own.
//!
//! Example: the MLP's training step: the first layer's activations and
//! their gradient share words once the former is dead, and Adam's new
//! moments are written over the old ones in `io`; the new weights, whose
//! old values a branch of the backward pass may still read (the plan's
//! rule holds in any order), are copied there after the step.

use super::wgsl::{Buf, Place};
use crate::diag::Diagnostic;
use crate::ir::compiled::{CompiledUnit, Device};
use crate::ir::NodeId;
use std::collections::HashMap;

/// The plan's GPU arena of one unit.
#[derive(Default)]
pub struct Arena {
    planned: HashMap<NodeId, Planned>,
    words: u32,
}

#[derive(Clone, Copy)]
enum Planned {
    At(u32),
    OverInput(NodeId),
}

impl Arena {
    /// The GPU arena the memory plan gave `unit`, when it ran in `order`.
    pub fn of(unit: &CompiledUnit, order: &[usize]) -> Result<Arena, Diagnostic> {
        // The plan's lifetimes are positions in the unit's order: only
        // that order may share words.
        if unit.buffers.is_empty() || unit.order.as_slice() != order {
            return Ok(Arena::default());
        }
        let mut arena = Arena::default();
        for b in unit.buffers.iter().filter(|b| b.device == Device::Gpu) {
            let planned = match b.over_input {
                Some(slot) => Planned::OverInput(slot),
                None => {
                    let (word, words) = (b.offset / 4, b.bytes.div_ceil(4));
                    let end = u32::try_from(word + words)
                        .map_err(|_| Diagnostic::internal("gpu: a GPU arena of more than 2^32 words"))?;
                    if b.offset % 4 != 0 {
                        return Err(Diagnostic::internal("gpu: the plan placed a GPU buffer off a word"));
                    }
                    arena.words = arena.words.max(end);
                    Planned::At(word as u32)
                }
            };
            arena.planned.insert(b.node, planned);
        }
        Ok(arena)
    }

    /// The words the plan's arena takes at the start of `vals`.
    pub fn words(&self) -> u32 {
        self.words
    }

    /// The place the plan gave GPU kernel output `n`.
    pub fn word(&self, n: NodeId) -> Option<Place> {
        match self.planned.get(&n) {
            Some(Planned::At(word)) => Some(Place { buf: Buf::Vals, word: *word }),
            _ => None,
        }
    }

    /// The unit input GPU kernel output `n` is written over.
    pub fn over_input(&self, n: NodeId) -> Option<NodeId> {
        match self.planned.get(&n) {
            Some(Planned::OverInput(slot)) => Some(*slot),
            _ => None,
        }
    }
}

/// Allocates words in one buffer, from `next` on.
pub struct Words {
    pub buf: Buf,
    pub next: u32,
}

impl Words {
    pub fn take(&mut self, words: usize) -> Result<Place, Diagnostic> {
        let place = Place { buf: self.buf, word: self.next };
        let words = u32::try_from(words.max(1)).ok().and_then(|w| self.next.checked_add(w));
        self.next = words.ok_or_else(|| Diagnostic::internal("gpu: a unit of more than 2^32 words"))?;
        Ok(place)
    }
}

/// The kernels' inner values, each kernel's from the start of one region
/// that all kernels share (their shaders run one kernel after another).
#[derive(Default)]
pub struct Inner {
    /// Per kernel, its inner values and their words.
    values: Vec<Vec<(NodeId, usize)>>,
}

impl Inner {
    /// The inner values of the next kernel.
    pub fn kernel(&mut self, values: Vec<(NodeId, usize)>) {
        self.values.push(values);
    }

    /// Places every inner value from `words.next` on and takes the region.
    pub fn place(self, words: &mut Words) -> Result<Vec<(NodeId, Place)>, Diagnostic> {
        let base = words.next;
        let mut placed = Vec::new();
        let mut end = base;
        for kernel in self.values {
            words.next = base;
            for (n, size) in kernel {
                placed.push((n, words.take(size)?));
            }
            end = end.max(words.next);
        }
        words.next = end;
        Ok(placed)
    }
}
