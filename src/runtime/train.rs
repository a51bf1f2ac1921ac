//! The training loop (§9): runs the compiled step region over the batches
//! of every epoch, evaluates metrics, logs, checkpoints and resumes.
//!
//! Contract: the loop is deterministic — the final parameters depend only on
//! the program, its seeds and the data. A checkpoint written at the end of
//! epoch k holds the parameters, the optimizer states, the model states
//! (a BatchNorm's running statistics), the step and the epoch; because the
//! data order of an epoch is a pure function of its seeds and the epoch
//! number, `resume` from it ends with bit-identical weights and states to
//! an uninterrupted run. A NaN or infinite loss stops training
//! with a diagnostic naming the step (and, with `--check-numerics`, the op).

use super::dataset::reduce_mean;
use super::exec::{Carry, CompiledRegion, Executor};
use crate::diag::{Code, Diagnostic};
use crate::ir::plan::TrainPlan;
use crate::ir::{DType, Literal, TensorType};
use crate::tensor::Tensor;
use std::io::{IsTerminal, Write};
use std::time::Instant;

pub fn run(ex: &mut Executor, plan: &TrainPlan) -> Result<(), Diagnostic> {
    let init: Vec<_> = plan.carried().map(|(_, id)| *id).collect();
    ex.demand(&init)?;
    // The parameters, the optimizer states and the model states.
    let mut values: Vec<Tensor> = init.iter().map(|id| ex.value(*id).cloned()).collect::<Result<_, _>>()?;
    let (mut step, mut epoch) = (0u64, 0u64);
    let mut resumed = false;
    if let Some(path) = &plan.resume {
        let path = ex.resolve_path(path);
        if path.exists() {
            let (v, st, ep) = load_checkpoint(&path, plan, values)?;
            (values, step, epoch) = (v, st, ep);
            resumed = true;
            eprintln!("resuming from {} at epoch {epoch}, step {step}", path.display());
        } else {
            eprintln!("no checkpoint at {} yet; training from the start", path.display());
        }
    }
    // The step's parameters, optimizer states and model states are carried
    // from step to step (on the JIT they stay in the step's arena).
    let n_params = plan.params.len();
    let model_states_at = n_params + plan.states.len();
    let regions: Vec<(usize, CompiledRegion)> = plan
        .steps
        .iter()
        .map(|(b, r)| Ok((*b, ex.compile_region_carrying(r, plan.carried_len())?)))
        .collect::<Result<_, Diagnostic>>()?;
    let mut carry = Carry::new(values);
    let evals: Vec<_> = plan.evals.iter().collect();
    let mut log = match &plan.log {
        Some(p) => {
            let path = ex.resolve_path(p);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                let _ = std::fs::create_dir_all(dir);
            }
            // A run that starts from scratch starts a fresh log (appending
            // would interleave the epochs of earlier runs); a resumed run
            // continues the log of the run it resumes.
            let mut options = std::fs::OpenOptions::new();
            options.create(true);
            if resumed {
                options.append(true);
            } else {
                options.write(true).truncate(true);
            }
            let f = options.open(&path).map_err(|e| {
                Diagnostic::new(Code::Io, format!("cannot open the log `{}`: {e}", path.display()))
                    .label(plan.span, "in this train block")
            })?;
            Some(f)
        }
        None => None,
    };
    let progress = Progress::new(plan);
    let started = Instant::now();
    let mut examples = 0usize;
    // The next epoch's input pipeline, started while this one trains.
    let mut ahead = super::pipeline::Ahead::default();
    'epochs: while plan.epochs.is_none_or(|e| epoch < e as u64) {
        let mut loss_sum = 0.0;
        let mut loss_n = 0usize;
        let mut stop = false;
        // Batches stream from the input pipeline's threads while steps run.
        let total = plan.data.len.unwrap_or(0);
        let next = Some(epoch + 1).filter(|n| plan.epochs.is_none_or(|e| *n < e as u64));
        super::pipeline::for_each_ahead(ex, &plan.data, epoch, next, &mut ahead, |ex, i, batch| {
            if plan.max_steps.is_some_and(|m| step >= m as u64) {
                stop = true;
                return Ok(false);
            }
            // A step boundary is a safe point: parameters and the last
            // checkpoint are consistent here.
            crate::interrupt::check().map_err(|d| d.label(plan.span, format!("stopped before step {}", step + 1)))?;
            let size = batch.first().and_then(|t| t.shape().first().copied()).unwrap_or(0);
            let Some((_, region)) = regions.iter().find(|(b, _)| *b == size) else {
                return Err(Diagnostic::internal(format!(
                    "runtime: no training step was compiled for batches of {size}"
                )));
            };
            step += 1;
            let mut inputs = batch;
            inputs.push(scalar(step as f64)?);
            // A failure inside the step (e.g. `--check-numerics` finding a
            // NaN) points at an op; say which step it happened in, too.
            let out = ex
                .run_carrying(region, &inputs, &mut carry)
                .map_err(|d| d.note(format!("in training step {step} (epoch {})", epoch + 1)))?;
            let loss = out[0].to_f64_vec().first().copied().unwrap_or(f64::NAN);
            if !loss.is_finite() {
                return Err(Diagnostic::new(Code::Runtime, format!("the loss became {loss} at step {step} (epoch {})", epoch + 1))
                    .label(plan.span, "while training here")
                    .help("run with `--check-numerics` to find the first op that produced a NaN or infinity; a lower learning rate or `clip_grad_norm` often helps"));
            }
            loss_sum += loss;
            loss_n += 1;
            examples += size;
            progress.step(
                epoch + 1,
                i + 1,
                total.max(i + 1),
                loss,
                examples as f64 / started.elapsed().as_secs_f64().max(1e-9),
            );
            Ok(true)
        })?;
        if stop {
            break 'epochs;
        }
        if loss_n == 0 {
            return Err(Diagnostic::new(Code::Runtime, "the training data has no batches")
                .label(plan.span, "in this train block"));
        }
        epoch += 1;
        let mean_loss = loss_sum / loss_n.max(1) as f64;
        let mut metrics = Vec::new();
        for e in &evals {
            if epoch % e.every as u64 == 0 || plan.epochs == Some(epoch as usize) {
                // A metric reads the parameters and the model states.
                let all = carry.values()?;
                let read: Vec<Tensor> = all[..n_params].iter().chain(&all[model_states_at..]).cloned().collect();
                let v = reduce_mean(ex, &e.reduce, &read, plan.span)?;
                metrics.push((e.name.clone(), v.to_f64_vec()[0]));
            }
        }
        let rate = examples as f64 / started.elapsed().as_secs_f64().max(1e-9);
        progress.epoch_done(epoch, step, mean_loss, &metrics, rate);
        if let Some(f) = log.as_mut() {
            let mut line = format!("{{\"step\": {step}, \"epoch\": {epoch}, \"loss\": {}", json_number(mean_loss));
            for (name, v) in &metrics {
                line.push_str(&format!(", {}: {}", serde_json::Value::from(name.clone()), json_number(*v)));
            }
            line.push_str(&format!(", \"examples_per_sec\": {}}}\n", json_number(rate)));
            let _ = f.write_all(line.as_bytes());
        }
        if let Some((path, every)) = &plan.checkpoint {
            if epoch % *every as u64 == 0 {
                let path = ex.resolve_path(path);
                save_checkpoint(&path, plan, carry.values()?, step, epoch)?;
            }
        }
    }
    for (slot, t) in plan.result_slots.iter().zip(carry.into_values()?) {
        ex.slots.insert(*slot, t);
    }
    Ok(())
}

fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

fn scalar(x: f64) -> Result<Tensor, Diagnostic> {
    Tensor::from_literal(&Literal::Float(vec![x]), &TensorType::scalar(DType::F32))
}

/// The names of the carried values in a checkpoint: parameters and model
/// states by path (as `save` names them), optimizer states as
/// `optimizer/<path>/<state>`.
fn checkpoint_names(plan: &TrainPlan) -> Vec<String> {
    let mut names: Vec<String> = plan.params.iter().map(|(n, _)| n.clone()).collect();
    names.extend(plan.states.iter().map(|(n, _)| format!("optimizer/{n}")));
    names.extend(plan.model_states.iter().map(|(n, _)| n.clone()));
    names
}

/// Writes the carried `values` (in `TrainPlan::carried` order).
fn save_checkpoint(
    path: &std::path::Path,
    plan: &TrainPlan,
    values: &[Tensor],
    step: u64,
    epoch: u64,
) -> Result<(), Diagnostic> {
    let named: Vec<(String, &Tensor)> = checkpoint_names(plan).into_iter().zip(values).collect();
    let meta = vec![
        ("step".to_string(), step.to_string()),
        ("epoch".to_string(), epoch.to_string()),
        ("format".to_string(), "tfc-checkpoint-1".to_string()),
    ];
    crate::io::checkpoint::save(path, &named, &meta)
        .map_err(|d| d.label(plan.span, "while checkpointing this training"))
}

type Restored = (Vec<Tensor>, u64, u64);

/// The carried values of a checkpoint, with its step and epoch; `init` (in
/// `TrainPlan::carried` order) gives their types, and the model states a
/// checkpoint of an earlier version lacks (it saved none: they never
/// changed then) keep their values from `init`.
fn load_checkpoint(path: &std::path::Path, plan: &TrainPlan, init: Vec<Tensor>) -> Result<Restored, Diagnostic> {
    let want: Vec<(String, TensorType)> =
        checkpoint_names(plan).into_iter().zip(&init).map(|(n, t)| (n, t.ty())).collect();
    let required = plan.params.len() + plan.states.len();
    let (loaded, meta) = crate::io::checkpoint::load_optional(path, &want, required)
        .map_err(|d| d.label(plan.span, "while resuming this training"))?;
    let values = loaded.into_iter().zip(init).map(|(l, i)| l.unwrap_or(i)).collect();
    let number = |k: &str| -> Result<u64, Diagnostic> {
        let not = |why: String| {
            Diagnostic::new(Code::Io, format!("`{}` is not a training checkpoint: {why}", path.display()))
                .label(plan.span, "resuming here")
        };
        match meta.get(k) {
            None => Err(not(format!("its metadata has no `{k}`"))),
            Some(v) => v.parse().map_err(|_| not(format!("its `{k}` is `{v}`, not a whole number"))),
        }
    };
    let (step, epoch) = (number("step")?, number("epoch")?);
    Ok((values, step, epoch))
}

/// Progress on stderr: a line rewritten in place on a terminal, one line
/// per epoch otherwise.
struct Progress {
    tty: bool,
    epochs: Option<usize>,
    /// A bar is on the terminal's current line (cleared by the next epoch
    /// line, or when training stops, so that an error starts a line).
    bar_shown: std::cell::Cell<bool>,
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.bar_shown.get() {
            eprint!("\r\x1b[K");
        }
    }
}

impl Progress {
    fn new(plan: &TrainPlan) -> Progress {
        Progress { tty: std::io::stderr().is_terminal(), epochs: plan.epochs, bar_shown: false.into() }
    }

    fn step(&self, epoch: u64, batch: usize, batches: usize, loss: f64, rate: f64) {
        if self.tty {
            let total = self.epochs.map(|e| format!("/{e}")).unwrap_or_default();
            let width = 24;
            let done = width * batch / batches.max(1);
            let bar: String = "█".repeat(done) + &"·".repeat(width - done);
            eprint!("\repoch {epoch}{total} {bar} {batch}/{batches}  loss {loss:.4}  {rate:.0} ex/s ");
            self.bar_shown.set(true);
        }
    }

    fn epoch_done(&self, epoch: u64, step: u64, loss: f64, metrics: &[(String, f64)], rate: f64) {
        // Off a terminal, about twenty lines per run: every k-th epoch, the
        // last one, and every epoch with metrics.
        let every = self.epochs.map(|e| (e / 20).max(1) as u64).unwrap_or(1);
        let last = self.epochs == Some(epoch as usize);
        if !self.tty && !last && metrics.is_empty() && !epoch.is_multiple_of(every) {
            return;
        }
        let total = self.epochs.map(|e| format!("/{e}")).unwrap_or_default();
        let metrics: String = metrics.iter().map(|(n, v)| format!("  {n} {v:.4}")).collect();
        if self.tty {
            eprint!("\r\x1b[K");
        }
        self.bar_shown.set(false);
        eprintln!("epoch {epoch}{total}  step {step}  loss {loss:.4}{metrics}  {rate:.0} ex/s");
    }
}
