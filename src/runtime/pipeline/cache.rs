//! `cache()` and `cache(path)`: the first complete pass over the upstream is
//! kept — in memory for the rest of the run, or in a safetensors file that
//! later passes and later runs read instead of recomputing.
//!
//! Contract: a pass that stops early (a `take` downstream, an error) caches
//! nothing, so a cache is always complete. A cache file records a
//! fingerprint of the upstream plan; a file written for a different plan,
//! or one that cannot be read, is recomputed and rewritten (atomically, by
//! `checkpoint::save`), never trusted.

use super::stages::stream;
use super::{Ctx, Element, Item, Iter};
use crate::diag::Diagnostic;
use crate::ir::plan::Dataset;
use crate::ir::NodeId;
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::Scope;

/// The elements of `d` after transform `k` (a `Cache`).
pub(super) fn stage<'s, 'p: 's>(
    s: &'s Scope<'s, 'p>,
    ctx: &Ctx<'p>,
    d: &'p Dataset,
    k: usize,
    path: Option<&Path>,
) -> Result<Iter<'s>, Diagnostic> {
    let key = format!("{:p} {k}", d as *const Dataset);
    let hit = ctx.store.caches.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
    if let Some(elems) = hit {
        return Ok(replay(elems));
    }
    let fingerprint = fingerprint(ctx, d, k);
    if let Some(p) = path {
        if let Some(elems) = read(p, &fingerprint) {
            let elems = Arc::new(elems);
            ctx.store.caches.lock().unwrap_or_else(|e| e.into_inner()).insert(key, elems.clone());
            ctx.report(|| format!("cache at transform {k}: read {} elements from {}", elems.len(), p.display()));
            return Ok(replay(elems));
        }
    }
    Ok(Box::new(Filling {
        up: stream(s, ctx, d, k - 1)?,
        kept: Vec::new(),
        key,
        ctx: ctx.clone(),
        file: path.map(|p| (p.to_path_buf(), fingerprint)),
        broken: false,
    }))
}

fn replay<'s>(elems: Arc<Vec<Element>>) -> Iter<'s> {
    Box::new((0..elems.len()).map(move |i| Ok(elems[i].clone())))
}

/// Passes the upstream through, keeping a copy; stores it at the end.
struct Filling<'p, 'a> {
    up: Iter<'a>,
    kept: Vec<Element>,
    key: String,
    ctx: Ctx<'p>,
    file: Option<(PathBuf, String)>,
    broken: bool,
}

impl Iterator for Filling<'_, '_> {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        if self.broken {
            return None;
        }
        match self.up.next() {
            Some(Ok(e)) => {
                self.kept.push(e.clone());
                Some(Ok(e))
            }
            Some(Err(d)) => {
                self.broken = true;
                Some(Err(d))
            }
            None => {
                self.broken = true;
                // Sources also end when the pass is cancelled (its consumer
                // stopped): then this pass may be incomplete.
                if self.ctx.cancel.load(std::sync::atomic::Ordering::Relaxed) {
                    return None;
                }
                let elems = Arc::new(std::mem::take(&mut self.kept));
                if let Some((path, fingerprint)) = &self.file {
                    if let Err(d) = write(path, fingerprint, &elems) {
                        return Some(Err(d));
                    }
                    self.ctx.report(|| format!("cache: wrote {} elements to {}", elems.len(), path.display()));
                }
                self.ctx.store.caches.lock().unwrap_or_else(|e| e.into_inner()).insert(self.key.clone(), elems);
                None
            }
        }
    }
}

/// A hash of the upstream plan — its source, its transforms and the graph
/// of every region they run (ops, attributes, types, in a numbering of
/// their own) — so a file cache written by another program or for other
/// data is not reused.
fn fingerprint(ctx: &Ctx, d: &Dataset, k: usize) -> String {
    let g = &ctx.program.graph;
    let mut text = format!("{:?}", d.source);
    for t in &d.transforms[..k - 1] {
        text.push_str(&format!(" | {t:?}"));
        for r in t.regions() {
            // Post-order from the outputs, each node named by its position.
            let mut local: HashMap<NodeId, usize> = HashMap::new();
            let mut stack: Vec<(NodeId, bool)> = r.outputs.iter().rev().map(|&o| (o, false)).collect();
            while let Some((n, expanded)) = stack.pop() {
                if local.contains_key(&n) {
                    continue;
                }
                if !expanded {
                    stack.push((n, true));
                    stack.extend(g.inputs(n).into_iter().rev().map(|i| (i, false)));
                    continue;
                }
                let node = g.node(n);
                let ins: Vec<usize> = g.inputs(n).iter().filter_map(|i| local.get(i).copied()).collect();
                text.push_str(&format!(" {:?}:{}:{ins:?}", node.op, node.ty));
                // A value filled by an earlier effect (trained weights) is
                // part of what the region computes.
                if let crate::ir::Op::Slot { slot, .. } = &node.op {
                    if let Some(t) = ctx.slots.get(slot) {
                        let bits: Vec<u64> = t.to_f64_vec().iter().map(|v| v.to_bits()).collect();
                        text.push_str(&format!("={:016x}", fnv(format!("{bits:?}").as_bytes())));
                    }
                }
                local.insert(n, local.len());
            }
        }
    }
    format!("{:016x}", fnv(text.as_bytes()))
}

/// FNV-1a, 64 bits: stable across runs and platforms.
fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn write(path: &Path, fingerprint: &str, elems: &[Element]) -> Result<(), Diagnostic> {
    let named: Vec<(String, &Tensor)> = elems
        .iter()
        .enumerate()
        .flat_map(|(i, e)| e.iter().enumerate().map(move |(j, t)| (format!("{i}/{j}"), t)))
        .collect();
    let parts = elems.first().map(|e| e.len()).unwrap_or(0);
    let meta = vec![
        ("format".to_string(), "tfc-cache-1".to_string()),
        ("plan".to_string(), fingerprint.to_string()),
        ("elements".to_string(), elems.len().to_string()),
        ("parts".to_string(), parts.to_string()),
    ];
    crate::io::checkpoint::save(path, &named, &meta)
}

/// The cached elements, if `path` is a complete cache of this plan.
fn read(path: &Path, fingerprint: &str) -> Option<Vec<Element>> {
    let file = crate::io::checkpoint::SafeFile::read(path).ok()?;
    let meta = file.metadata();
    if meta.get("format").map(String::as_str) != Some("tfc-cache-1")
        || meta.get("plan").map(String::as_str) != Some(fingerprint)
    {
        return None;
    }
    let n: usize = meta.get("elements")?.parse().ok()?;
    let parts: usize = meta.get("parts")?.parse().ok()?;
    (0..n)
        .map(|i| (0..parts).map(|j| file.tensor(&format!("{i}/{j}"), true).ok().and_then(|(_, t)| t)).collect())
        .collect()
}
