//! A data-parallel training step (`ir::plan::ParallelStep`): this process
//! runs the gradient half for each of its virtual shards of the global
//! batch, the processes exchange their sums (`dist::Communicator`), and
//! every process runs the update half on the total.
//!
//! Contract: the new parameters, optimizer states and model states, and
//! the step's mean loss, are bit-identical on every rank and for any
//! number of ranks that divides the shards: each rank sums its aligned
//! block of shards with `dist::tree::tree_sum`, rank 0 sums the blocks'
//! sums the same way (so the rounding is that of one process summing all
//! shards), and the update is the same compiled code on the same inputs.
//! The new model states (a BatchNorm's running statistics) are the first
//! shard's. Before the first step the ranks compare a fingerprint of the
//! program, the shards, the kernels' instruction set and the initial
//! values: a rank that differs stops every rank with E0412.
//!
//! Example: 8 shards on 2 ranks — rank 0 computes `(g0+g1)+(g2+g3)`,
//! rank 1 `(g4+g5)+(g6+g7)`, rank 0 adds the two, as one process would.

use super::super::exec::{Carry, CompiledRegion, Executor};
use crate::diag::{Code, Diagnostic};
use crate::dist::{tree::tree_sum, wire, Communicator, Local};
use crate::ir::plan::{ParallelStep, TrainPlan};
use crate::ir::{DType, Literal, TensorType};
use crate::tensor::Tensor;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct Parallel<'p> {
    plan: &'p TrainPlan,
    step: &'p ParallelStep,
    /// The gradient half, by shard rows.
    gradients: Vec<(usize, CompiledRegion)>,
    update: CompiledRegion,
    world: Arc<dyn Communicator>,
    watchdog: Watchdog,
}

/// How long an exchange may wait for the other ranks.
struct Watchdog {
    /// `--step-timeout`, over the default.
    fixed: Option<Duration>,
    /// The longest step so far (exchange included).
    slowest: Duration,
}

impl Watchdog {
    /// The deadline of the next exchange: `--step-timeout`, else twenty
    /// times the slowest step so far and at least 10 s (a rank may be
    /// writing a checkpoint), or 120 s before the first step (the ranks
    /// compile at their own pace).
    fn timeout(&self) -> Duration {
        match self.fixed {
            Some(t) => t,
            None if self.slowest.is_zero() => Duration::from_secs(120),
            None => (self.slowest * 20).max(Duration::from_secs(10)),
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
        let update = ex.compile_region(&step.update)?;
        let world: Arc<dyn Communicator> = ex.options.world.clone().unwrap_or_else(|| Arc::new(Local));
        let watchdog = Watchdog { fixed: ex.options.step_timeout, slowest: Duration::ZERO };
        let parallel = Parallel { plan, step, gradients, update, world, watchdog };
        parallel.agree(ex, initial)?;
        Ok(parallel)
    }

    /// Checks that every rank runs the same step from the same values.
    fn agree(&self, ex: &Executor, initial: &[Tensor]) -> Result<(), Diagnostic> {
        use std::hash::{Hash, Hasher};
        let mut program = std::hash::DefaultHasher::new();
        crate::ir::print::print_program(ex.program).hash(&mut program);
        (self.step.shards, self.world.size(), format!("{:?}", crate::backend::cpu::isa::active())).hash(&mut program);
        format!("{:?}", ex.options.backend).hash(&mut program);
        let mut values = std::hash::DefaultHasher::new();
        let mut bytes = Vec::new();
        for t in initial {
            bytes.clear();
            wire::put(t, &mut bytes);
            bytes.hash(&mut values);
        }
        let mine = [program.finish().to_le_bytes(), values.finish().to_le_bytes()].concat();
        // Rank 0 replies with the first rank that differs (+1) in the
        // program and in the values, or zeros.
        let mut combine = |all: &[&[u8]]| {
            let first = |range: std::ops::Range<usize>| {
                let differs = all.iter().position(|m| m[range.clone()] != all[0][range.clone()]);
                differs.map_or(0, |r| r as u64 + 1).to_le_bytes()
            };
            Ok([first(0..8), first(8..16)].concat())
        };
        let timeout = self.watchdog.fixed.unwrap_or(Duration::from_secs(120)).max(Duration::from_secs(120));
        let reply = self.world.exchange(&mine, &mut combine, timeout, "the fingerprints of the training step")?;
        let rank_at = |at: usize| u64::from_le_bytes(reply[at..at + 8].try_into().unwrap_or_default());
        let size = self.world.size();
        if let Some(r) = Some(rank_at(0)).filter(|&r| r > 0) {
            return Err(Diagnostic::new(
                Code::RankMismatch,
                format!("rank {} of {size} compiled a different training step than rank 0", r - 1),
            )
            .label(self.plan.span, "this train block")
            .help("every rank must run the same program on data of the same shapes, with the same `--shards`, `--precision` and `TFC_ISA` (the kernels' instruction set)"));
        }
        if let Some(r) = Some(rank_at(8)).filter(|&r| r > 0) {
            return Err(Diagnostic::new(
                Code::RankMismatch,
                format!("rank {} of {size} starts training from other parameters or states than rank 0", r - 1),
            )
            .label(self.plan.span, "this train block")
            .help("a data file or checkpoint (`resume`) differs between the hosts: give every rank the same files"));
        }
        Ok(())
    }

    /// Runs step `number` on the global `batch`: updates `carry` and returns
    /// the batch's mean loss.
    pub(super) fn run(
        &mut self,
        ex: &Executor,
        batch: &[Tensor],
        number: u64,
        carry: &mut Carry,
    ) -> Result<f64, Diagnostic> {
        let started = Instant::now();
        let (shards, size, rank) = (self.step.shards, self.world.size(), self.world.rank());
        let examples = batch.first().and_then(|t| t.shape().first().copied()).unwrap_or(0);
        let rows = ParallelStep::shard_rows(examples, shards);
        let step = scalar(number as f64)?;
        let values = carry.values()?.to_vec();
        let (n_params, n_states) = (self.plan.params.len(), self.plan.states.len());
        let (params, rest) = values.split_at(n_params);
        let (states, model_states) = rest.split_at(n_states);
        // This rank's aligned block of shards.
        let per_rank = shards / size;
        let mut partials: Vec<Option<Result<Partial, Diagnostic>>> = Vec::with_capacity(per_rank);
        let mut first_model_states = None;
        for s in rank * per_rank..(rank + 1) * per_rank {
            if rows[s] == 0 {
                partials.push(None);
                continue;
            }
            let start: usize = rows[..s].iter().sum();
            let take: Vec<usize> = (start..start + rows[s]).collect();
            let mut inputs =
                batch.iter().map(|t| crate::tensor::host::take_rows(t, &take)).collect::<Result<Vec<_>, _>>()?;
            inputs.push(scalar(rows[s] as f64 * shards as f64 / examples as f64)?);
            inputs.push(step.clone());
            inputs.extend(values.iter().cloned());
            let region = self.gradients_for(rows[s])?;
            let mut out = ex.run_region(region, &inputs)?.into_iter();
            let loss = out.next().map(|l| l.to_f64_vec()[0]).unwrap_or(f64::NAN);
            let grads: Vec<Tensor> = out.by_ref().take(n_params).collect();
            if first_model_states.is_none() {
                first_model_states = Some(out.collect::<Vec<_>>());
            }
            partials.push(Some(Ok(Partial { loss, grads })));
        }
        let mine = tree_sum(partials, &mut Partial::add).transpose()?;
        let model_state_types: Vec<TensorType> = model_states.iter().map(Tensor::ty).collect();
        let grad_types: Vec<TensorType> = params.iter().map(Tensor::ty).collect();
        let message = encode(mine.as_ref(), &grad_types, first_model_states.as_deref().unwrap_or(model_states));
        let mut combine = |all: &[&[u8]]| {
            let parts = all.iter().map(|m| decode(m, &grad_types).map(|(p, _)| p)).collect::<Result<Vec<_>, _>>()?;
            let total = tree_sum(parts, &mut Partial::add).transpose()?;
            // The first shard's model states, which rank 0 computed.
            let (_, states_at) = decode(all[0], &grad_types)?;
            let mut reply = encode(total.as_ref(), &grad_types, &[]);
            reply.extend_from_slice(&all[0][states_at..]);
            Ok(reply)
        };
        let timeout = self.watchdog.timeout();
        let reply = self.world.exchange(&message, &mut combine, timeout, &format!("the gradients of step {number}"))?;
        let (total, mut at) = decode(&reply, &grad_types)?;
        let new_model_states =
            model_state_types.iter().map(|ty| wire::take(ty, &reply, &mut at)).collect::<Result<Vec<_>, _>>()?;
        let Some(total) = total.transpose()? else {
            return Err(Diagnostic::internal(format!("runtime: step {number} has no examples")));
        };
        let mut inputs = total.grads;
        inputs.push(step);
        inputs.extend(params.iter().cloned());
        inputs.extend(states.iter().cloned());
        let mut next = ex.run_region(&self.update, &inputs)?;
        next.extend(new_model_states);
        carry.replace(next);
        self.watchdog.slowest = self.watchdog.slowest.max(started.elapsed());
        Ok(total.loss / shards as f64)
    }

    fn gradients_for(&self, rows: usize) -> Result<&CompiledRegion, Diagnostic> {
        self.gradients
            .iter()
            .find(|(r, _)| *r == rows)
            .map(|(_, region)| region)
            .ok_or_else(|| Diagnostic::internal(format!("runtime: no gradient step was compiled for shards of {rows}")))
    }
}

/// A sum over shards: of their weighted losses (in f64) and gradients.
struct Partial {
    loss: f64,
    grads: Vec<Tensor>,
}

impl Partial {
    fn add(a: Result<Partial, Diagnostic>, b: Result<Partial, Diagnostic>) -> Result<Partial, Diagnostic> {
        let (a, b) = (a?, b?);
        let grads = a.grads.into_iter().zip(&b.grads).map(|(x, y)| wire::add(x, y)).collect::<Result<_, _>>()?;
        Ok(Partial { loss: a.loss + b.loss, grads })
    }
}

/// A message: a flag (1: it holds a sum), the loss sum, the gradients (or
/// zeros: every message has the same length), then `model_states`.
fn encode(partial: Option<&Partial>, grad_types: &[TensorType], model_states: &[Tensor]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(u64::from(partial.is_some()).to_le_bytes());
    out.extend(partial.map_or(0.0, |p| p.loss).to_le_bytes());
    match partial {
        Some(p) => p.grads.iter().for_each(|g| wire::put(g, &mut out)),
        None => out.resize(out.len() + grad_types.iter().map(wire::size_of).sum::<usize>(), 0),
    }
    model_states.iter().for_each(|t| wire::put(t, &mut out));
    out
}

/// The sum a message holds, and where its model states start.
fn decode(
    message: &[u8],
    grad_types: &[TensorType],
) -> Result<(Option<Result<Partial, Diagnostic>>, usize), Diagnostic> {
    let word = |at: usize| -> Result<[u8; 8], Diagnostic> {
        message
            .get(at..at + 8)
            .and_then(|w| w.try_into().ok())
            .ok_or_else(|| Diagnostic::internal("dist: a short message"))
    };
    let has = u64::from_le_bytes(word(0)?) == 1;
    let loss = f64::from_le_bytes(word(8)?);
    let mut at = 16;
    let grads = grad_types.iter().map(|ty| wire::take(ty, message, &mut at)).collect::<Result<Vec<_>, _>>()?;
    Ok((has.then_some(Ok(Partial { loss, grads })), at))
}

fn scalar(x: f64) -> Result<Tensor, Diagnostic> {
    Tensor::from_literal(&Literal::Float(vec![x]), &TensorType::scalar(DType::F32))
}
