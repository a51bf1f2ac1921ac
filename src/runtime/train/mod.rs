//! The training loop (§9): runs the compiled step region over the batches
//! of every epoch and, at the points the train block names (`every n
//! epochs`, `every n steps`), evaluates metrics, logs and checkpoints.
//!
//! Contract: the loop is deterministic — the final parameters depend only on
//! the program, its seeds and the data. A checkpoint holds the carried
//! values and the loop's `Position` (`checkpoint.rs`); because the data
//! order of an epoch is a pure function of its seeds and the epoch number,
//! `resume` from a checkpoint written at an epoch's end or inside it ends
//! with bit-identical weights, states, losses and log lines (but the
//! throughput) to an uninterrupted run. A NaN or infinite loss stops
//! training with a diagnostic naming the step (and, with
//! `--check-numerics`, the op).
//!
//! Order at a point: metrics, then the progress and log lines, then the
//! checkpoint (which so records the lines written). After a step: the
//! `every n steps` events; at the end of an epoch: the `every n epochs`
//! ones (metrics of epoch cadence also after the last epoch); when training
//! ends, the metrics of step cadence whose last step was not a point, and
//! a last line for a log of step cadence with steps since its last line.

mod checkpoint;
mod collectives;
mod log;
mod parallel;

use super::pipeline::Share;
mod progress;

use super::dataset::reduce_mean;
use super::exec::{Carry, CompiledRegion, Executor};
use crate::diag::{Code, Diagnostic};
use crate::ir::plan::{Cadence, TrainPlan, LOSS_SCALE_STATES};
use crate::ir::{DType, Literal, TensorType};
use crate::tensor::Tensor;
use checkpoint::Position;
use log::Log;
use progress::Progress;
use std::time::Instant;

pub fn run(ex: &mut Executor, plan: &TrainPlan) -> Result<(), Diagnostic> {
    let init: Vec<_> = plan.carried().map(|(_, id)| *id).collect();
    ex.demand(&init)?;
    // The parameters, the optimizer states and the model states.
    let mut values: Vec<Tensor> = init.iter().map(|id| ex.value(*id).cloned()).collect::<Result<_, _>>()?;
    let mut at = Position::default();
    let mut resumed = None;
    if let Some(path) = &plan.resume {
        let path = ex.resolve_path(path);
        let primary = ex.options.is_primary();
        if path.exists() {
            (values, at) = checkpoint::load(&path, plan, values)?;
            resumed = Some(at);
            let inside =
                if at.batch > 0 { format!(" (batch {} of epoch {})", at.batch, at.epoch + 1) } else { String::new() };
            if primary {
                eprintln!("resuming from {} at epoch {}, step {}{inside}", path.display(), at.epoch, at.step);
            }
        } else if primary {
            eprintln!("no checkpoint at {} yet; training from the start", path.display());
        }
    }
    // The step's parameters, optimizer states and model states are carried
    // from step to step (on the JIT they stay in the step's arena).
    let regions: Vec<(usize, CompiledRegion)> = plan
        .steps
        .iter()
        .map(|(b, r)| Ok((*b, ex.compile_region_carrying(r, plan.carried_len())?)))
        .collect::<Result<_, Diagnostic>>()?;
    // A data-parallel step, whose ranks first check that they agree.
    let parallel = match &plan.parallel {
        Some(p) => Some(parallel::Parallel::new(ex, plan, p, &values)?),
        None => None,
    };
    // Every rank starts where rank 0 does (which read the checkpoint).
    if let Some(p) = &parallel {
        p.broadcast(&mut values, &mut at)?;
    }
    let primary = ex.options.is_primary();
    let mut points = Points {
        plan,
        primary,
        scaled: plan.states.iter().any(|(name, _)| name == LOSS_SCALE_STATES[0]),
        carry: Carry::new(values),
        log: if primary { Log::open(ex, plan, resumed.as_ref())? } else { None },
        progress: Progress::new(plan, !primary),
        started: Instant::now(),
        examples: 0,
    };
    // The next epoch's input pipeline, started while this one trains.
    let mut ahead = pipeline_ahead(ex);
    // A rank of several reads only its share of each batch.
    let share = match (&plan.parallel, &ex.options.world) {
        (Some(p), Some(w)) if w.size() > 1 => match Share::rows(&plan.data, p.shards, w.size(), w.rank()) {
            Ok(share) => Some(share),
            Err(why) => {
                if ex.options.verbose && primary {
                    eprintln!("pipeline: every rank reads whole batches: {why}");
                }
                None
            }
        },
        _ => None,
    };
    let mut stopped = false;
    while !stopped && plan.epochs.is_none_or(|e| at.epoch < e as u64) {
        // Batches a resumed run already trained on in this epoch.
        let done = at.batch;
        let total = plan.data.len.unwrap_or(0) as u64;
        let next = Some(at.epoch + 1).filter(|n| plan.epochs.is_none_or(|e| *n < e as u64));
        super::pipeline::for_each_ahead(ex, &plan.data, at.epoch, next, &mut ahead, share, |ex, i, batch| {
            if (i as u64) < done {
                return Ok(true);
            }
            if plan.max_steps.is_some_and(|m| at.step >= m as u64) {
                stopped = true;
                return Ok(false);
            }
            // A step boundary is a safe point: parameters and the last
            // checkpoint are consistent here.
            crate::interrupt::check()
                .map_err(|d| d.label(plan.span, format!("stopped before step {}", at.step + 1)))?;
            // A rank's compact share holds its rows of a batch of `size`.
            let layout = share.and_then(|s| s.layout(&plan.data, i));
            let size =
                layout.map_or_else(|| batch.first().and_then(|t| t.shape().first().copied()).unwrap_or(0), |l| l.0);
            at.step += 1;
            // A failure inside the step (e.g. `--check-numerics` finding a
            // NaN) points at an op; say which step it happened in, too.
            let in_step = |d: Diagnostic| d.note(format!("in training step {} (epoch {})", at.step, at.epoch + 1));
            let loss = match parallel.as_ref() {
                Some(p) => p.run(ex, batch, layout, at.step, &mut points.carry).map_err(in_step)?,
                None => {
                    let Some((_, region)) = regions.iter().find(|(b, _)| *b == size) else {
                        return Err(Diagnostic::internal(format!(
                            "runtime: no training step was compiled for batches of {size}"
                        )));
                    };
                    let mut inputs = batch;
                    inputs.push(scalar(at.step as f64)?);
                    let out = ex.run_carrying(region, &inputs, &mut points.carry).map_err(in_step)?;
                    out[0].to_f64_vec().first().copied().unwrap_or(f64::NAN)
                }
            };
            // With loss scaling, a step whose loss or gradients overflowed
            // was skipped (it changed nothing but the scale): not an error,
            // and not part of the mean loss.
            if !loss.is_finite() && points.scaled {
                at.batch += 1;
                points.examples += size;
                points.after_step(ex, &mut at)?;
                return Ok(true);
            }
            if !loss.is_finite() {
                return Err(Diagnostic::new(Code::Runtime, format!("the loss became {loss} at step {} (epoch {})", at.step, at.epoch + 1))
                    .label(plan.span, "while training here")
                    .help("run with `--check-numerics` to find the first op that produced a NaN or infinity; a lower learning rate or `clip_grad_norm` often helps"));
            }
            at.batch += 1;
            at.epoch_loss.add(loss);
            at.log_loss.add(loss);
            points.examples += size;
            points.progress.step(at.epoch + 1, i as u64 + 1, total.max(i as u64 + 1), loss, points.rate());
            points.after_step(ex, &mut at)?;
            Ok(true)
        })?;
        if stopped {
            break;
        }
        if at.batch == 0 {
            return Err(Diagnostic::new(Code::Runtime, "the training data has no batches")
                .label(plan.span, "in this train block"));
        }
        // The epoch is over before its events: a checkpoint written there
        // resumes at the start of the next one.
        at.epoch += 1;
        at.batch = 0;
        // Before a checkpoint can save a copy that diverged.
        if let Some(p) = &parallel {
            p.check_replicas(&points.carry, at.epoch)?;
        }
        let epoch_loss = std::mem::take(&mut at.epoch_loss).value();
        points.after_epoch(ex, &mut at, epoch_loss)?;
    }
    points.at_end(ex, &mut at)?;
    if let (Some(p), true) = (&parallel, ex.options.verbose && primary) {
        eprintln!("{}", p.summary(ex.options.threads));
    }
    if let Some(read) = super::pipeline::rows_read(ex, &plan.data).filter(|n| *n > 0 && ex.options.verbose && primary) {
        let whose = if share.is_some() { "this rank" } else { "this process" };
        eprintln!("pipeline: {whose} read {read} elements of the training data from its files");
    }
    for (slot, t) in plan.result_slots.iter().zip(points.carry.into_values()?) {
        ex.slots.insert(*slot, t);
    }
    Ok(())
}

/// Where the input pipeline runs: the next epoch's pass starts ahead on a
/// thread of its own, except for ranks that fill their host's cores (ranks
/// here times threads each). Those ranks meet at every step's all-reduces,
/// so a pipeline thread that preempts one of them holds up every rank at
/// the next meeting: its time counts twice. On its rank's own thread it
/// counts once (MLP b256 on two one-thread ranks on two cores: 303–310k
/// examples/s ahead, 316–324k on the ranks' threads).
fn pipeline_ahead(ex: &Executor) -> super::pipeline::Ahead {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    match &ex.options.world {
        Some(w) if w.size() > 1 && w.ranks_on_this_host() * ex.options.threads >= cores => {
            if ex.options.verbose && ex.options.is_primary() {
                eprintln!(
                    "pipeline: on each rank's own thread ({} ranks of {} thread(s) fill this host's {cores} cores)",
                    w.ranks_on_this_host(),
                    ex.options.threads
                );
            }
            super::pipeline::Ahead::on_this_thread()
        }
        _ => super::pipeline::Ahead::default(),
    }
}

/// What happens at the points of a run: metrics, progress, log lines and
/// checkpoints.
struct Points<'p> {
    plan: &'p TrainPlan,
    /// This process writes the checkpoints (rank 0 of a data-parallel run).
    primary: bool,
    /// The step scales its loss (f16 training, `LOSS_SCALE_STATES`).
    scaled: bool,
    carry: Carry<'p>,
    log: Option<Log>,
    progress: Progress,
    started: Instant,
    examples: usize,
}

impl Points<'_> {
    fn rate(&self) -> f64 {
        self.examples as f64 / self.started.elapsed().as_secs_f64().max(1e-9)
    }

    /// The `every n steps` events after step `at.step`.
    fn after_step(&mut self, ex: &mut Executor, at: &mut Position) -> Result<(), Diagnostic> {
        let step = at.step;
        let due = move |c: Cadence| c.at_step(step);
        let metrics = self.metrics(ex, due)?;
        let log_due = self.log.as_ref().is_some_and(|l| due(l.every));
        if !metrics.is_empty() {
            self.progress.point(at.epoch + 1, at.step, Some(at.epoch_loss.value()), &metrics, self.rate(), true);
        }
        self.line(at, at.epoch + 1, log_due, &metrics)?;
        self.checkpoint_if(ex, at, due)
    }

    /// The `every n epochs` events at the end of epoch `at.epoch`, whose
    /// mean loss was `epoch_loss`.
    fn after_epoch(&mut self, ex: &mut Executor, at: &mut Position, epoch_loss: f64) -> Result<(), Diagnostic> {
        let last = self.plan.epochs == Some(at.epoch as usize);
        let epoch = at.epoch;
        let due = move |c: Cadence| c.at_epoch(epoch);
        let metrics = self.metrics(ex, |e| due(e) || (last && matches!(e, Cadence::Epochs(_))))?;
        self.progress.point(at.epoch, at.step, Some(epoch_loss), &metrics, self.rate(), false);
        let log_due = self.log.as_ref().is_some_and(|l| due(l.every));
        self.line(at, at.epoch, log_due, &metrics)?;
        self.checkpoint_if(ex, at, due)
    }

    /// When training ends: the step-cadence metrics and log line that the
    /// last step did not reach.
    fn at_end(&mut self, ex: &mut Executor, at: &mut Position) -> Result<(), Diagnostic> {
        if at.step == 0 {
            return Ok(());
        }
        let metrics = self.metrics(ex, |e| matches!(e, Cadence::Steps(_)) && !e.at_step(at.step))?;
        let log_due = self.log.as_ref().is_some_and(|l| matches!(l.every, Cadence::Steps(_))) && at.log_loss.count > 0;
        // The epoch a last step belongs to: the one under way, or the one
        // that just ended.
        let epoch = if at.batch > 0 { at.epoch + 1 } else { at.epoch };
        if !metrics.is_empty() {
            self.progress.point(epoch, at.step, None, &metrics, self.rate(), true);
        }
        self.line(at, epoch, log_due, &metrics)
    }

    /// The metrics whose cadence `due` says fall here, by name.
    fn metrics(&mut self, ex: &mut Executor, due: impl Fn(Cadence) -> bool) -> Result<Vec<(String, f64)>, Diagnostic> {
        let n_params = self.plan.params.len();
        let model_states_at = n_params + self.plan.states.len();
        let mut out = Vec::new();
        for e in self.plan.evals.iter().filter(|e| due(e.every)) {
            // A metric reads the parameters and the model states.
            let all = self.carry.values()?;
            let read: Vec<Tensor> = all[..n_params].iter().chain(&all[model_states_at..]).cloned().collect();
            let v = reduce_mean(ex, &e.reduce, &read, self.plan.span)?;
            out.push((e.name.clone(), v.to_f64_vec()[0]));
        }
        Ok(out)
    }

    /// A log line, if this is a log point (`log_due`, which also restarts
    /// the loss window) or metrics were computed here.
    /// With loss scaling, a log point also records the scale and the steps
    /// skipped so far.
    fn line(
        &mut self,
        at: &mut Position,
        epoch: u64,
        log_due: bool,
        metrics: &[(String, f64)],
    ) -> Result<(), Diagnostic> {
        let rate = self.rate();
        let mut values = metrics.to_vec();
        if log_due && self.scaled && self.log.is_some() {
            values.extend(self.loss_scale()?);
        }
        let Some(log) = self.log.as_mut() else { return Ok(()) };
        if log_due || !metrics.is_empty() {
            log.write(at, epoch, log_due.then(|| at.log_loss.value()), &values, rate);
        }
        if log_due {
            at.log_loss = Default::default();
        }
        at.log_lines = Some(log.lines);
        Ok(())
    }

    /// The loss scale and the skipped steps, as the carried states hold them.
    fn loss_scale(&mut self) -> Result<Vec<(String, f64)>, Diagnostic> {
        let first = self.plan.params.len();
        let states = &self.plan.states;
        let at = |name: &str| states.iter().position(|(n, _)| n == name).map(|i| first + i);
        let all = self.carry.values()?;
        let read = |name: &str| at(name).and_then(|i| all.get(i)).and_then(|t| t.to_f64_vec().first().copied());
        let (scale, skipped) = (read(LOSS_SCALE_STATES[0]), read(LOSS_SCALE_STATES[2]));
        Ok([("loss_scale", scale), ("skipped_steps", skipped)]
            .into_iter()
            .filter_map(|(name, v)| Some((name.to_string(), v?)))
            .collect())
    }

    fn checkpoint_if(&mut self, ex: &Executor, at: &Position, due: impl Fn(Cadence) -> bool) -> Result<(), Diagnostic> {
        match &self.plan.checkpoint {
            Some((path, every)) if due(*every) && self.primary => {
                checkpoint::save(&ex.resolve_path(path), self.plan, self.carry.values()?, at)
            }
            _ => Ok(()),
        }
    }
}

fn scalar(x: f64) -> Result<Tensor, Diagnostic> {
    Tensor::from_literal(&Literal::Float(vec![x]), &TensorType::scalar(DType::F32))
}
