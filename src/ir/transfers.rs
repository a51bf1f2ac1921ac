//! The values a unit's run moves between memories: what a GPU unit reads
//! back for the kernels the plan leaves to the host interpreter, and what
//! it writes back for the GPU kernels (and the next step) to read.
//!
//! Contract: [`of`] lists, for a planned unit, every value a kernel reads
//! that another kernel of the unit (a source included: a parameter, the
//! batch) holds in another memory (`Device::shares_memory_with`), once per
//! memory, at the position in the unit's order of its first reader there;
//! and every new value of a training step's input (`CompiledUnit::updates`)
//! computed in another memory than its input's, after the last position.
//! Values from outside the unit are the backend's to place before it runs,
//! not transfers. A backend moves exactly these (`backend::gpu::unit`),
//! and `tfc build --emit plan` shows them; a CPU plan has none.
//!
//! Example: on the GPU, an embedding's `gather` of an i64 index runs on the
//! host: the plan shows `transfer %7 to Host before [12]` for the table it
//! reads, and `transfer %9 to Gpu before [13]` for the rows the next
//! product reads.

use super::compiled::{CompiledUnit, Device, KernelKind};
use super::graph::{Graph, NodeId};
use std::collections::HashMap;

/// One value moved into the memory of `to` before the kernel at position
/// `before` of the unit's order (the order's length: after the run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub node: NodeId,
    pub to: Device,
    pub before: usize,
}

/// The transfers of `u` (see the module docs), in order of position.
pub fn of(g: &Graph, u: &CompiledUnit) -> Vec<Transfer> {
    let order: Vec<usize> = if u.order.is_empty() { (0..u.kernels.len()).collect() } else { u.order.clone() };
    let mut holder: HashMap<NodeId, Device> = HashMap::new();
    for k in &u.kernels {
        for &n in &k.outputs {
            holder.entry(n).or_insert(k.device);
        }
    }
    let mut found: Vec<Transfer> = Vec::new();
    let mut add = |node: NodeId, to: Device, before: usize| {
        let moved = holder.get(&node).is_some_and(|from| !from.shares_memory_with(to));
        if moved && !found.iter().any(|t| t.node == node && t.to.shares_memory_with(to)) {
            found.push(Transfer { node, to, before });
        }
    };
    for (pos, &k) in order.iter().enumerate() {
        let kernel = &u.kernels[k];
        if kernel.kind == KernelKind::Source {
            continue;
        }
        for &n in &kernel.nodes {
            for input in g.inputs(n) {
                if !kernel.nodes.contains(&input) {
                    add(input, kernel.device, pos);
                }
            }
        }
    }
    for &(slot, new) in &u.updates {
        if let Some(&to) = holder.get(&slot) {
            add(new, to, order.len());
        }
    }
    found
}
