//! Execution order: per unit, a deterministic topological order of the
//! kernels (`order`) and, for each kernel, the number of distinct kernels it
//! waits for (`deps`).
//!
//! The order is Kahn's algorithm over the kernel graph
//! ([`partition::KernelGraph`](super::partition::KernelGraph)); among the
//! kernels that are ready, the one whose first node has the smallest id
//! runs first (then the smallest kernel index), except that a pool the plan
//! fuses into a convolution (`passes::conv_pool`) runs right after it, so the same program always
//! gets the same order, independent of hashing or thread count. A
//! sequential backend runs `order`; the threaded runner starts every kernel
//! whose `deps` count reached zero and decrements the counts of its
//! successors when it finishes, so independent kernels run concurrently and
//! `order` is just one of the orders it may produce.
//!
//! Contract: `order` is a permutation of the kernels that respects every
//! dependency and equals the tie-broken order above; `deps[k]` is the number
//! of distinct kernels kernel `k` waits for: those whose outputs it reads
//! (and those before it on a memory edge, which `memory_plan` adds later,
//! always forward in `order`).
//!
//! Example: for `print(exp(x) + log(x))` with one kernel per node, `x`
//! (a source) comes first, then `exp` and `log` in node order (both have
//! `deps=1`), then `add` with `deps=2`.

use super::partition::{ensure_kernels, KernelGraph};
use crate::diag::{Code, Diagnostic};
use crate::ir::compiled::CompiledUnit;
use crate::ir::kernel_desc::Fusion;
use crate::ir::{NodeId, Program};
use crate::passes::PassCtx;
use rustc_hash::FxHashSet as HashSet;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub fn run(p: &mut Program, _: &PassCtx) -> Result<(), Diagnostic> {
    ensure_kernels(p);
    let mut roots = p.clone();
    let roots: HashSet<NodeId> = roots.roots().into_iter().collect();
    let mut compiled = p.compiled.take().unwrap_or_default();
    let mut result = Ok(());
    for u in &mut compiled.units {
        let g = KernelGraph::with_roots(p, u, &roots);
        match order(u, &g) {
            Some(o) => u.order = o,
            None => {
                result = Err(Diagnostic::new(
                    Code::Internal,
                    format!("the kernels of unit `{}` depend on each other in a cycle", u.name),
                ));
                break;
            }
        }
        u.deps = g.preds.iter().map(Vec::len).collect();
    }
    p.compiled = Some(compiled);
    result
}

/// The deterministic topological order of a unit's kernels: ready kernels
/// by smallest first node id, then smallest index. `None` on a cycle.
pub fn order(u: &CompiledUnit, g: &KernelGraph) -> Option<Vec<usize>> {
    let key = |k: usize| (u.kernels[k].nodes.first().map_or(usize::MAX, |n| n.index()), k);
    let mut pending: Vec<usize> = g.preds.iter().map(Vec::len).collect();
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> =
        (0..pending.len()).filter(|&k| pending[k] == 0).map(|k| Reverse(key(k))).collect();
    // A pool fused into the convolution before it runs right after it
    // (`passes::conv_pool`): the convolution writes it.
    let fused_after =
        |k: usize, s: usize| matches!(u.kernels[s].fusion, Some(Fusion::PoolIntoConv { conv, .. }) if conv == k);
    let mut out = Vec::with_capacity(pending.len());
    let mut next = None;
    while let Some(k) = next.take().or_else(|| ready.pop().map(|Reverse((_, k))| k)) {
        out.push(k);
        for &s in &g.succs[k] {
            pending[s] -= 1;
            match pending[s] == 0 {
                true if fused_after(k, s) && next.is_none() => next = Some(s),
                true => ready.push(Reverse(key(s))),
                false => {}
            }
        }
    }
    (out.len() == pending.len()).then_some(out)
}

pub fn postcondition(p: &Program) -> Result<(), String> {
    let Some(c) = &p.compiled else { return Err("the program has no kernels".into()) };
    let mut roots = p.clone();
    let roots: HashSet<NodeId> = roots.roots().into_iter().collect();
    for u in &c.units {
        let n = u.kernels.len();
        let mut pos = vec![usize::MAX; n];
        for (i, &k) in u.order.iter().enumerate() {
            if k >= n || pos[k] != usize::MAX {
                return Err(format!("the order of unit `{}` is not a permutation (kernel {k})", u.name));
            }
            pos[k] = i;
        }
        if u.order.len() != n {
            return Err(format!("the order of unit `{}` lists {} of {n} kernels", u.name, u.order.len()));
        }
        let g = KernelGraph::with_roots(p, u, &roots);
        for k in 0..n {
            if let Some(&pred) = g.preds[k].iter().find(|&&pr| pos[pr] > pos[k]) {
                return Err(format!(
                    "in unit `{}`, kernel {k} runs before kernel {pred}, whose output it reads",
                    u.name
                ));
            }
        }
        if u.deps.len() != n || (0..n).any(|k| u.deps[k] != g.preds[k].len()) {
            let k = (0..n).find(|&k| u.deps.get(k) != Some(&g.preds[k].len())).unwrap_or(0);
            return Err(format!(
                "in unit `{}`, kernel {k} waits for {} kernels but deps says {:?}",
                u.name,
                g.preds.get(k).map_or(0, Vec::len),
                u.deps.get(k)
            ));
        }
        if order(u, &g).as_ref() != Some(&u.order) {
            return Err(format!("the order of unit `{}` is not the deterministic (smallest first node) one", u.name));
        }
    }
    Ok(())
}
