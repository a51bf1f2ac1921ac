//! Values a unit carries from one run to the next — a training step's
//! parameters and optimizer states — kept inside the unit between runs, so
//! a step neither copies them in nor reads them back.
//!
//! Contract: with `carried = c`, the last `c` region inputs are replaced
//! after every run by the last `c` region outputs, in order (the training
//! step's `[params…, states…]`). [`plan`] gives each pair a resident home
//! and points the input's slot at it:
//! - an `f32` output that the memory plan writes over its input
//!   (`Buffer::over_input`) is its own home: the kernels read the old value
//!   there and write the new one in place, nothing is copied;
//! - another `f32` output gets a home after the arena, filled from the
//!   output's arena place after each run;
//! - any other value lives in a table entry, refreshed after each run.
//!
//! `JitUnit::load_carried` fills the homes, `JitUnit::run_head` runs with the
//! other inputs only, `JitUnit::read_carried` reads the homes back.
//!
//! Example: Adam's update of `w1` is planned `over %w1`; with the step's
//! parameters carried, `w1` lives at one arena place for the whole training
//! run and each step updates it there.

use super::unit::Ref;
use crate::diag::Diagnostic;
use crate::ir::{DType, NodeId, TensorType};
use std::collections::HashMap;

/// Where one carried value lives between runs.
#[derive(Clone, Debug)]
pub(super) struct Resident {
    /// Its home (`Ref::Arena`, `Ref::Half` or `Ref::Table`).
    pub home: Ref,
    /// Where a run leaves the next value when that is not the home.
    pub refresh_from: Option<Ref>,
    pub ty: TensorType,
}

/// What [`plan`] needs to know of the prepared unit.
pub(super) struct CarryInputs<'a> {
    /// The slot node of each region input position read by the unit.
    pub slot_at: &'a HashMap<usize, NodeId>,
    /// The node and type of every region output.
    pub outputs: &'a [(NodeId, TensorType)],
    /// Output nodes the plan writes over the given slot node.
    pub over_input: &'a HashMap<NodeId, NodeId>,
    pub inputs: usize,
}

/// Homes for the last `carried` input/output pairs. `loc` maps nodes to
/// storage and is updated (each carried slot now reads its home);
/// `arena_end` (bytes) and `tables` grow by the homes allocated.
pub(super) fn plan(
    c: &CarryInputs,
    carried: usize,
    loc: &mut HashMap<NodeId, Ref>,
    arena_end: &mut usize,
    tables: &mut usize,
) -> Result<Vec<Resident>, Diagnostic> {
    if carried > c.inputs || carried > c.outputs.len() {
        return Err(Diagnostic::internal("jit: more carried values than region inputs or outputs"));
    }
    let mut residents = Vec::with_capacity(carried);
    for j in 0..carried {
        let input = c.inputs - carried + j;
        let (out_node, ty) = &c.outputs[c.outputs.len() - carried + j];
        let slot = c.slot_at.get(&input).copied();
        let out_ref = loc.get(out_node).copied();
        let in_place = slot.is_some() && c.over_input.get(out_node) == slot.as_ref();
        let (home, refresh_from) = match out_ref {
            Some(r @ (Ref::Arena(_) | Ref::Half(_) | Ref::Wide(_))) if in_place => (r, None),
            _ if matches!(ty.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) => {
                let at = arena_end.div_ceil(64) * 64;
                *arena_end = at + ty.size_bytes();
                let home = match ty.dtype {
                    DType::F32 => Ref::Arena(at / 4),
                    DType::F64 => Ref::Wide(at),
                    _ => Ref::Half(at),
                };
                (home, out_ref.filter(|r| *r != Ref::Input(input)))
            }
            _ => {
                *tables += 1;
                (Ref::Table(*tables - 1), out_ref.filter(|r| *r != Ref::Input(input)))
            }
        };
        if let Some(s) = slot {
            loc.insert(s, home);
        }
        // An output that is the input itself (a value the step leaves as it
        // is) reads its home too.
        if out_ref == Some(Ref::Input(input)) {
            loc.insert(*out_node, home);
        }
        residents.push(Resident { home, refresh_from, ty: ty.clone() });
    }
    Ok(residents)
}
