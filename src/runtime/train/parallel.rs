//! A data-parallel training step (`ir::plan::ParallelStep`): this process
//! runs the gradient half for each of its virtual shards of the global
//! batch, the processes exchange their sums (`dist::Communicator`), and
//! every process runs the update half on the total.
//!
//! Contract: the new parameters, optimizer states and model states, and
//! the step's mean loss, are bit-identical on every rank and for any
//! number of ranks that divides the shards: each rank sums its aligned
//! block of shards with `dist::tree::tree_sum`, the exchange sums the
//! blocks' sums over the same balanced tree (so the rounding is that of
//! one process summing all shards), and the update is the same compiled
//! code on the same inputs.
//! The new model states (a BatchNorm's running statistics) are the first
//! shard's. Before the first step the ranks compare a fingerprint of the
//! program, the shards and the kernels' instruction set (a rank that
//! differs stops every rank with E0412), then take rank 0's parameters,
//! states and data position; after every epoch they compare checksums of
//! their parameters and states (E0412 naming a rank that diverged).
//!
//! Where the plan fused the step (`ParallelStep::fused`: one shard per
//! rank), a rank runs that one region on its shard instead: the
//! all-reduces inside it sum the gradients over the same tree
//! (`collectives`), so the bits are the two halves'.
//!
//! Example: 8 shards on 2 ranks — rank 0 computes `(g0+g1)+(g2+g3)`,
//! rank 1 `(g4+g5)+(g6+g7)`, both add the two in that order, as one
//! process would.

use super::super::exec::{Carry, CompiledRegion, Executor};
use super::checkpoint::Position;
use super::collectives::StepCollectives;
use crate::diag::{Code, Diagnostic};
use crate::dist::{tree::tree_sum, wire, Communicator, Local};
use crate::ir::plan::{ParallelStep, TrainPlan, LOSS_SCALE_STATES};
use crate::ir::{DType, Literal, TensorType};
use crate::tensor::{eval_node, Tensor};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct Parallel<'p> {
    plan: &'p TrainPlan,
    step: &'p ParallelStep,
    /// The gradient half, by shard rows.
    gradients: Vec<(usize, CompiledRegion)>,
    update: Option<CompiledRegion>,
    /// The fused steps, by shard rows, and what their all-reduces call.
    fused: Vec<(usize, CompiledRegion)>,
    collectives: Arc<StepCollectives>,
    world: Arc<dyn Communicator>,
    watchdog: Watchdog,
    /// The carried values the gradient half reads (by position): the
    /// parameters, a loss scale's states, the model states.
    read: Vec<usize>,
    grad_types: Vec<TensorType>,
    model_state_types: Vec<TensorType>,
    /// Each step's time in its three parts — gradients, exchange, update —
    /// the time since the previous step ended (input, metrics, logs), and
    /// of the exchange, a fused step's first all-reduce (a faster rank
    /// waiting for the slower ones).
    times: std::cell::RefCell<Vec<[Duration; 5]>>,
    /// When the previous step ended.
    last_end: std::cell::Cell<Option<Instant>>,
    /// How many steps ran fused.
    fused_steps: std::cell::Cell<usize>,
}

/// How long an exchange may wait for the other ranks.
struct Watchdog {
    /// `--step-timeout`, over the default.
    fixed: Option<Duration>,
    /// The longest step so far (exchange included).
    slowest: std::cell::Cell<Duration>,
}

impl Watchdog {
    /// The deadline of the next exchange: `--step-timeout`, else twenty
    /// times the slowest step so far and at least 10 s (a rank may be
    /// writing a checkpoint), or 120 s before the first step (the ranks
    /// compile at their own pace).
    fn timeout(&self) -> Duration {
        match self.fixed {
            Some(t) => t,
            None if self.slowest.get().is_zero() => Duration::from_secs(120),
            None => (self.slowest.get() * 20).max(Duration::from_secs(10)),
        }
    }
}

impl<'p> Parallel<'p> {
    pub(super) fn new(
        ex: &mut Executor,
        plan: &'p TrainPlan,
        step: &'p ParallelStep,
        initial: &[Tensor],
    ) -> Result<Parallel<'p>, Diagnostic> {
        let gradients = step
            .gradients
            .iter()
            .map(|(rows, r)| Ok((*rows, ex.compile_region(r)?)))
            .collect::<Result<_, Diagnostic>>()?;
        let update = match &step.update {
            Some(r) => Some(ex.compile_region_carrying(r, plan.carried_len())?),
            None => None,
        };
        let world: Arc<dyn Communicator> = ex.options.world.clone().unwrap_or_else(|| Arc::new(Local));
        let collectives = Arc::new(StepCollectives::new(world.clone()));
        let reach: Arc<dyn crate::backend::Collectives> = collectives.clone();
        let fused = step
            .fused
            .iter()
            .map(|(rows, r)| Ok((*rows, ex.compile_region_with(r, plan.carried_len(), Some(&reach))?)))
            .collect::<Result<_, Diagnostic>>()?;
        let watchdog = Watchdog { fixed: ex.options.step_timeout, slowest: Duration::ZERO.into() };
        let (n_params, n_states) = (plan.params.len(), plan.states.len());
        let scaled = plan.states.iter().any(|(name, _)| name == LOSS_SCALE_STATES[0]);
        let scale_states = if scaled { n_params + n_states - LOSS_SCALE_STATES.len() } else { n_params + n_states };
        let read = (0..n_params).chain(scale_states..plan.carried_len()).collect();
        let grad_types = initial[..n_params].iter().map(Tensor::ty).collect();
        let model_state_types = initial[n_params + n_states..].iter().map(Tensor::ty).collect();
        let (times, last_end, fused_steps) = Default::default();
        let parallel = Parallel {
            plan,
            step,
            gradients,
            update,
            fused,
            collectives,
            world,
            watchdog,
            read,
            grad_types,
            model_state_types,
            times,
            last_end,
            fused_steps,
        };
        parallel.agree(ex)?;
        Ok(parallel)
    }

    /// Checks that every rank runs the same step.
    fn agree(&self, ex: &Executor) -> Result<(), Diagnostic> {
        use std::hash::{Hash, Hasher};
        let mut program = std::hash::DefaultHasher::new();
        crate::ir::print::print_program(ex.program).hash(&mut program);
        (self.step.shards, self.world.size(), format!("{:?}", crate::backend::cpu::isa::active())).hash(&mut program);
        format!("{:?}", ex.options.backend).hash(&mut program);
        let timeout = self.watchdog.fixed.unwrap_or(Duration::from_secs(120)).max(Duration::from_secs(120));
        match self.first_difference(program.finish(), timeout, "the fingerprints of the training step")? {
            None => Ok(()),
            Some((bad, other)) => Err(Diagnostic::new(
                Code::RankMismatch,
                format!("rank {bad} of {} compiled a different training step than rank {other}", self.world.size()),
            )
            .label(self.plan.span, "this train block")
            .help("every rank must run the same program on data of the same shapes, with the same `--shards`, `--precision` and `TFC_ISA` (the kernels' instruction set)")),
        }
    }

    /// Gives every rank rank 0's starting point — the parameters, optimizer
    /// and model states and the position in the data — as DDP broadcasts
    /// its module at start: only rank 0 needs to read a `resume`
    /// checkpoint (the other hosts may not have it), and ranks whose data
    /// files differ start from the same weights all the same.
    pub(super) fn broadcast(&self, values: &mut [Tensor], at: &mut Position) -> Result<(), Diagnostic> {
        if self.world.size() == 1 {
            return Ok(());
        }
        let mut message: Vec<u8> = [at.epoch, at.step, at.batch].iter().flat_map(|w| w.to_le_bytes()).collect();
        values.iter().for_each(|t| wire::put(t, &mut message));
        // After every round each side holds the lower block's bytes: in
        // the end, rank 0's.
        let mut lowest = |into: &mut [u8], other: &[u8], other_is_lower: bool| {
            if other_is_lower {
                into.copy_from_slice(other);
            }
            Ok(())
        };
        let timeout = self.watchdog.fixed.unwrap_or(Duration::from_secs(120)).max(Duration::from_secs(120));
        let reply = self.world.exchange(&message, &mut lowest, timeout, "rank 0's parameters")?;
        (at.epoch, at.step, at.batch) = (word(&reply, 0)?, word(&reply, 8)?, word(&reply, 16)?);
        let mut offset = 24;
        for t in values.iter_mut() {
            *t = wire::take(&t.ty(), &reply, &mut offset)?;
        }
        Ok(())
    }

    /// Checks that every rank still holds the same parameters and states
    /// (`carry`), as the fixed order of the sums promises: a rank whose
    /// hardware or memory corrupted its copy is named instead of silently
    /// training a model that differs from the others.
    pub(super) fn check_replicas(&self, carry: &Carry<'_>, epoch: u64) -> Result<(), Diagnostic> {
        use std::hash::{Hash, Hasher};
        if self.world.size() == 1 {
            return Ok(());
        }
        let all: Vec<usize> = (0..self.plan.carried_len()).collect();
        // Megabytes an epoch: a word at a time (SipHash took a step's time).
        let mut hash = rustc_hash::FxHasher::default();
        let mut bytes = Vec::new();
        for t in carry.some(&all)? {
            bytes.clear();
            wire::put(&t, &mut bytes);
            bytes.hash(&mut hash);
        }
        match self.first_difference(hash.finish(), self.watchdog.timeout(), "the checksums of the parameters")? {
            None => Ok(()),
            Some((bad, other)) => Err(Diagnostic::new(
                Code::RankMismatch,
                format!(
                    "rank {bad} of {} holds other parameters than rank {other} after epoch {epoch}",
                    self.world.size()
                ),
            )
            .label(self.plan.span, "this train block")
            .help("the ranks' copies of the model diverged, which the fixed order of the gradient sums rules out: a fault in that rank's host (memory, a changed binary) is likely")),
        }
    }

    /// Compares `hash` across the ranks: the lowest rank whose hash
    /// differs from a lower rank's, with that rank, or `None`.
    fn first_difference(&self, hash: u64, timeout: Duration, what: &str) -> Result<Option<(u64, u64)>, Diagnostic> {
        // A block's message: its lowest rank, that rank's hash, and the
        // first pair found to differ (rank + 1, 0 if none).
        let words = |m: &[u8]| -> Vec<u64> {
            m.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default())).collect()
        };
        let rank = self.world.rank() as u64;
        let mine: Vec<u8> = [rank, hash, 0, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut combine = |into: &mut [u8], other: &[u8], other_is_lower: bool| {
            let (lo, up) = match other_is_lower {
                true => (words(other), words(into)),
                false => (words(into), words(other)),
            };
            let mut out = lo.clone();
            if lo[2] == 0 {
                if up[2] != 0 {
                    (out[2], out[3]) = (up[2], up[3]);
                } else if up[1] != lo[1] {
                    (out[2], out[3]) = (up[0] + 1, lo[0]);
                }
            }
            into.copy_from_slice(&out.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
            Ok(())
        };
        let reply = words(&self.world.exchange(&mine, &mut combine, timeout, what)?);
        Ok(match (reply.get(2), reply.get(3)) {
            (Some(&bad), Some(&other)) if bad > 0 => Some((bad - 1, other)),
            _ => None,
        })
    }

    /// Runs step `number` on the global `batch` — or on this rank's rows
    /// of it, when `layout` gives the batch's size and where those rows
    /// start — : updates `carry` (held by the update half's unit) and
    /// returns the batch's mean loss.
    pub(super) fn run<'r>(
        &'r self,
        ex: &Executor,
        batch: Vec<Tensor>,
        layout: Option<(usize, usize)>,
        number: u64,
        carry: &mut Carry<'r>,
    ) -> Result<f64, Diagnostic> {
        let started = Instant::now();
        let (shards, size, rank) = (self.step.shards, self.world.size(), self.world.rank());
        let held = batch.first().and_then(|t| t.shape().first().copied()).unwrap_or(0);
        let mut batch = batch;
        let (examples, offset) = layout.unwrap_or((held, 0));
        let rows = ParallelStep::shard_rows(examples, shards);
        let step = scalar(number as f64)?;
        let fused = match (shards == size, rows.iter().all(|&r| r > 0)) {
            (true, true) => self.fused.iter().find(|(r, _)| *r == rows[rank]).map(|(_, region)| region),
            _ => None,
        };
        if let Some(region) = fused {
            let start = rows[..rank].iter().sum::<usize>() - offset;
            let shard = Shard { batch, held, start, rows: rows[rank], examples };
            return self.run_fused(ex, region, shard, number, carry, started);
        }
        // What the gradient half reads of the carried values.
        let read = carry.some(&self.read)?;
        let n_params = self.plan.params.len();
        // This rank's aligned block of shards.
        let per_rank = shards / size;
        let mut partials: Vec<Option<Result<Partial, Diagnostic>>> = Vec::with_capacity(per_rank);
        let mut first_model_states = None;
        for s in rank * per_rank..(rank + 1) * per_rank {
            if rows[s] == 0 {
                partials.push(None);
                continue;
            }
            let start = rows[..s].iter().sum::<usize>() - offset;
            let mut inputs = shard_rows_of(&mut batch, held, start, rows[s])?;
            inputs.push(scalar(rows[s] as f64 * shards as f64 / examples as f64)?);
            inputs.push(step.clone());
            inputs.extend(read.iter().cloned());
            let mut out = ex.run_region(self.gradients_for(rows[s])?, &inputs)?.into_iter();
            let loss = out.next().map(|l| l.to_f64_vec()[0]).unwrap_or(f64::NAN);
            let grads: Vec<Tensor> = out.by_ref().take(n_params).collect();
            if first_model_states.is_none() {
                first_model_states = Some(out.collect::<Vec<_>>());
            }
            partials.push(Some(Ok(Partial { loss, grads })));
        }
        let mine = tree_sum(partials, &mut Partial::add).transpose()?;
        let t_grad = started.elapsed();
        let (total, model_states) = match size {
            // One process: nothing to exchange.
            1 => (mine, first_model_states.unwrap_or_default()),
            _ => self.exchange(mine, first_model_states, number)?,
        };
        let Some(total) = total else {
            return Err(Diagnostic::internal(format!("runtime: step {number} has no examples")));
        };
        let mut head = total.grads;
        head.extend(model_states);
        head.push(step);
        let t_exchange = started.elapsed();
        let Some(update) = &self.update else {
            return Err(Diagnostic::internal(format!("runtime: step {number} has no update half")));
        };
        ex.run_carrying(update, &head, carry)?;
        let took = started.elapsed();
        self.record(started, [t_grad, t_exchange - t_grad, took - t_exchange], Duration::ZERO);
        Ok(total.loss / shards as f64)
    }

    /// Runs the fused step `region` as step `number` on this rank's
    /// `shard` and returns the batch's mean loss.
    fn run_fused<'r>(
        &'r self,
        ex: &Executor,
        region: &'r CompiledRegion,
        shard: Shard,
        number: u64,
        carry: &mut Carry<'r>,
        started: Instant,
    ) -> Result<f64, Diagnostic> {
        let shards = self.step.shards;
        let Shard { mut batch, held, start, rows, examples } = shard;
        let mut head = shard_rows_of(&mut batch, held, start, rows)?;
        head.push(scalar(rows as f64 * shards as f64 / examples as f64)?);
        head.push(scalar(number as f64)?);
        self.collectives.start_step(number, self.watchdog.timeout());
        let out = ex.run_carrying(region, &head, carry)?;
        let loss = out.first().and_then(|l| l.to_f64_vec().first().copied()).unwrap_or(f64::NAN);
        let (took, exchange) = (started.elapsed(), self.collectives.spent());
        self.record(started, [took.saturating_sub(exchange), exchange, Duration::ZERO], self.collectives.first());
        self.fused_steps.set(self.fused_steps.get() + 1);
        Ok(loss / shards as f64)
    }

    /// Records a step that began at `started` and took `parts` (gradients,
    /// exchange, update), of whose exchange the first all-reduce took
    /// `first`.
    fn record(&self, started: Instant, parts: [Duration; 3], first: Duration) {
        let took = parts.iter().sum();
        self.watchdog.slowest.set(self.watchdog.slowest.get().max(took));
        let between = self.last_end.replace(Some(Instant::now())).map_or(Duration::ZERO, |end| started - end);
        self.times.borrow_mut().push([parts[0], parts[1], parts[2], between, first]);
    }

    /// Sends this rank's sum (and, from rank 0, the first shard's model
    /// states) and returns the total over all ranks with those states.
    fn exchange(
        &self,
        mine: Option<Partial>,
        first_model_states: Option<Vec<Tensor>>,
        number: u64,
    ) -> Result<(Option<Partial>, Vec<Tensor>), Diagnostic> {
        let grad_types = &self.grad_types;
        let model_states = match first_model_states {
            Some(states) => states,
            // A rank whose shards are all empty sends zeros in their place.
            None => self.model_state_types.iter().map(crate::tensor::host::zeros).collect::<Result<_, _>>()?,
        };
        let message = encode(mine.as_ref(), grad_types, &model_states);
        // Each round adds the other block's gradient bytes to ours where
        // they lie (turning them into tensors first took longer than the
        // transfer); the lower block's model states (finally rank 0's, the
        // first shard's) are kept.
        let grads_end = 16 + grad_types.iter().map(wire::size_of).sum::<usize>();
        let mut combine = |into: &mut [u8], other: &[u8], other_is_lower: bool| {
            let (flag_into, flag_other) = (word(into, 0)?, word(other, 0)?);
            match (flag_into, flag_other) {
                (_, 0) => {}
                (0, _) => into[..grads_end].copy_from_slice(&other[..grads_end]),
                _ => {
                    // Two operands: the same bits in either order.
                    let loss = f64::from_bits(word(into, 8)?) + f64::from_bits(word(other, 8)?);
                    into[8..16].copy_from_slice(&loss.to_le_bytes());
                    let mut at = 16;
                    for ty in grad_types {
                        let n = wire::size_of(ty);
                        wire::add_into(ty.dtype, &mut into[at..at + n], &other[at..at + n])?;
                        at += n;
                    }
                }
            }
            if other_is_lower {
                into[grads_end..].copy_from_slice(&other[grads_end..]);
            }
            Ok(())
        };
        let timeout = self.watchdog.timeout();
        let what = format!("the gradients of step {number}");
        let reply = self.world.exchange(&message, &mut combine, timeout, &what)?;
        let (total, mut at) = decode(&reply, grad_types)?;
        let states =
            self.model_state_types.iter().map(|ty| wire::take(ty, &reply, &mut at)).collect::<Result<_, _>>()?;
        Ok((total.transpose()?, states))
    }

    /// One line for `--verbose`: the median time of each part of a step,
    /// how the sums travel, and the `threads` each rank runs.
    pub(super) fn summary(&self, threads: usize) -> String {
        let times = self.times.borrow();
        let median = |part: usize| {
            let mut t: Vec<Duration> = times.iter().map(|s| s[part]).collect();
            t.sort_unstable();
            t.get(t.len() / 2).copied().unwrap_or_default().as_secs_f64() * 1e3
        };
        let mean =
            |part: usize| times.iter().map(|s| s[part].as_secs_f64()).sum::<f64>() * 1e3 / times.len().max(1) as f64;
        format!(
            "data-parallel steps on {} rank(s), {} shards: median (mean) gradients {:.3} ({:.3}) ms, exchange {:.3} ({:.3}) ms, update {:.3} ({:.3}) ms, between steps {:.3} ({:.3}) ms ({} steps; {} of {} steps fused with their all-reduces, whose gradients count the update; their first all-reduce, where a rank waits for the slower ones, {:.3} ({:.3}) ms); sums through {}; {} thread(s) per rank",
            self.world.size(),
            self.step.shards,
            median(0),
            mean(0),
            median(1),
            mean(1),
            median(2),
            mean(2),
            median(3),
            mean(3),
            times.len(),
            self.fused_steps.get(),
            times.len(),
            median(4),
            mean(4),
            self.world.transport(),
            threads
        )
    }

    fn gradients_for(&self, rows: usize) -> Result<&CompiledRegion, Diagnostic> {
        self.gradients
            .iter()
            .find(|(r, _)| *r == rows)
            .map(|(_, region)| region)
            .ok_or_else(|| Diagnostic::internal(format!("runtime: no gradient step was compiled for shards of {rows}")))
    }
}

/// A rank's shard of a global batch of `examples`: `rows` of the `held`
/// rows of `batch` (the rank's part of the batch, or all of it), from
/// `start`.
struct Shard {
    batch: Vec<Tensor>,
    held: usize,
    start: usize,
    rows: usize,
    examples: usize,
}

/// The `rows` rows from `start` of the `held` rows of `batch`: the batch
/// itself (taken, not copied) when they are all of it.
fn shard_rows_of(batch: &mut Vec<Tensor>, held: usize, start: usize, rows: usize) -> Result<Vec<Tensor>, Diagnostic> {
    if start == 0 && rows == held {
        return Ok(std::mem::take(batch));
    }
    let take: Vec<usize> = (start..start + rows).collect();
    batch.iter().map(|t| crate::tensor::host::take_rows(t, &take)).collect()
}

/// A sum over shards: of their weighted losses (in f64) and gradients.
struct Partial {
    loss: f64,
    grads: Vec<Tensor>,
}

impl Partial {
    fn add(a: Result<Partial, Diagnostic>, b: Result<Partial, Diagnostic>) -> Result<Partial, Diagnostic> {
        let (a, b) = (a?, b?);
        // The interpreter's `+`, which the exchange's byte sums match.
        let plus = crate::ir::Op::Binary(crate::ir::BinaryOp::Add);
        let grads =
            a.grads.iter().zip(&b.grads).map(|(x, y)| eval_node(&plus, &[x, y], &x.ty())).collect::<Result<_, _>>()?;
        Ok(Partial { loss: a.loss + b.loss, grads })
    }
}

/// A message: a flag (1: it holds a sum), the loss sum, the gradients (or
/// zeros: every message has the same length), then `model_states`.
fn encode(partial: Option<&Partial>, grad_types: &[TensorType], model_states: &[Tensor]) -> Vec<u8> {
    // Sized once: growing a megabyte message by doubling copied it twice.
    let size = 16
        + grad_types.iter().map(wire::size_of).sum::<usize>()
        + model_states.iter().map(|t| wire::size_of(&t.ty())).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend(u64::from(partial.is_some()).to_le_bytes());
    out.extend(partial.map_or(0.0, |p| p.loss).to_le_bytes());
    match partial {
        Some(p) => p.grads.iter().for_each(|g| wire::put(g, &mut out)),
        None => out.resize(out.len() + grad_types.iter().map(wire::size_of).sum::<usize>(), 0),
    }
    model_states.iter().for_each(|t| wire::put(t, &mut out));
    out
}

/// The little-endian word at `at` of a message.
fn word(message: &[u8], at: usize) -> Result<u64, Diagnostic> {
    let bytes = message.get(at..at + 8).and_then(|w| w.try_into().ok());
    bytes.map(u64::from_le_bytes).ok_or_else(|| Diagnostic::internal("dist: a short message"))
}

/// The sum a message holds, and where its model states start.
fn decode(
    message: &[u8],
    grad_types: &[TensorType],
) -> Result<(Option<Result<Partial, Diagnostic>>, usize), Diagnostic> {
    let has = word(message, 0)? == 1;
    let loss = f64::from_bits(word(message, 8)?);
    let mut at = 16;
    let grads = grad_types.iter().map(|ty| wire::take(ty, message, &mut at)).collect::<Result<Vec<_>, _>>()?;
    Ok((has.then_some(Ok(Partial { loss, grads })), at))
}

fn scalar(x: f64) -> Result<Tensor, Diagnostic> {
    Tensor::from_literal(&Literal::Float(vec![x]), &TensorType::scalar(DType::F32))
}
