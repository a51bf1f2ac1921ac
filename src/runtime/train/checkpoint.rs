//! Training checkpoints (§9): the carried values (parameters, optimizer
//! states, model states) by name, and the loop's `Position` as metadata.
//!
//! Contract: a checkpoint written after any step — at the end of an epoch
//! or inside one (`checkpoint … every n steps`) — holds everything the rest
//! of the run depends on, so resuming from it gives bit-identical weights,
//! states, losses and log lines. Inside an epoch that includes how many of
//! its batches are done (the resumed run replays the epoch's data order,
//! a pure function of the seeds and the epoch, and skips them) and the
//! running loss sums (as exact decimal `f64`s). Checkpoints of earlier
//! versions, without these keys, resume at an epoch boundary.
//!
//! Example metadata: `{"step": "6", "epoch": "1", "batch": "2",
//! "epoch_loss_sum": "0.8312", "epoch_loss_count": "2", …}`.

use crate::diag::{Code, Diagnostic};
use crate::ir::plan::TrainPlan;
use crate::ir::TensorType;
use crate::tensor::Tensor;
use std::path::Path;

/// A running mean of losses.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Mean {
    pub sum: f64,
    pub count: u64,
}

impl Mean {
    pub fn add(&mut self, x: f64) {
        self.sum += x;
        self.count += 1;
    }

    pub fn value(self) -> f64 {
        self.sum / self.count.max(1) as f64
    }
}

/// Where training stands between two steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Position {
    /// Steps done, counted across epochs.
    pub step: u64,
    /// Epochs completed.
    pub epoch: u64,
    /// Batches done in the epoch under way.
    pub batch: u64,
    /// The losses of the epoch under way.
    pub epoch_loss: Mean,
    /// The losses since the last log point.
    pub log_loss: Mean,
    /// Lines written to the log so far; `None` from a checkpoint that did
    /// not record it.
    pub log_lines: Option<u64>,
}

/// The names of the carried values in a checkpoint: parameters and model
/// states by path (as `save` names them), optimizer states as
/// `optimizer/<path>/<state>`.
fn names(plan: &TrainPlan) -> Vec<String> {
    let mut names: Vec<String> = plan.params.iter().map(|(n, _)| n.clone()).collect();
    names.extend(plan.states.iter().map(|(n, _)| format!("optimizer/{n}")));
    names.extend(plan.model_states.iter().map(|(n, _)| n.clone()));
    names
}

/// Writes the carried `values` (in `TrainPlan::carried` order) and `at`.
pub(super) fn save(path: &Path, plan: &TrainPlan, values: &[Tensor], at: &Position) -> Result<(), Diagnostic> {
    let named: Vec<(String, &Tensor)> = names(plan).into_iter().zip(values).collect();
    let mut meta = vec![
        ("step", at.step.to_string()),
        ("epoch", at.epoch.to_string()),
        ("batch", at.batch.to_string()),
        // `f64`'s `Display` is the shortest text that parses back to the
        // same bits.
        ("epoch_loss_sum", at.epoch_loss.sum.to_string()),
        ("epoch_loss_count", at.epoch_loss.count.to_string()),
        ("log_loss_sum", at.log_loss.sum.to_string()),
        ("log_loss_count", at.log_loss.count.to_string()),
        ("format", "tfc-checkpoint-1".to_string()),
    ];
    if let Some(n) = at.log_lines {
        meta.push(("log_lines", n.to_string()));
    }
    let meta: Vec<(String, String)> = meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    crate::io::checkpoint::save(path, &named, &meta)
        .map_err(|d| d.label(plan.span, "while checkpointing this training"))
}

/// The carried values of a checkpoint and where it was written; `init` (in
/// `TrainPlan::carried` order) gives their types, and the model states a
/// checkpoint of an earlier version lacks (it saved none: they never
/// changed then) keep their values from `init`.
pub(super) fn load(path: &Path, plan: &TrainPlan, init: Vec<Tensor>) -> Result<(Vec<Tensor>, Position), Diagnostic> {
    let want: Vec<(String, TensorType)> = names(plan).into_iter().zip(&init).map(|(n, t)| (n, t.ty())).collect();
    let required = plan.params.len() + plan.states.len();
    let (loaded, meta) = crate::io::checkpoint::load_optional(path, &want, required)
        .map_err(|d| d.label(plan.span, "while resuming this training"))?;
    let values = loaded.into_iter().zip(init).map(|(l, i)| l.unwrap_or(i)).collect();
    let not = |why: String| {
        Diagnostic::new(Code::Io, format!("`{}` is not a training checkpoint: {why}", path.display()))
            .label(plan.span, "resuming here")
    };
    let text = |k: &str, required: bool| -> Result<Option<&String>, Diagnostic> {
        match meta.get(k) {
            None if required => Err(not(format!("its metadata has no `{k}`"))),
            v => Ok(v),
        }
    };
    let whole = |k: &str, required: bool| -> Result<Option<u64>, Diagnostic> {
        text(k, required)?
            .map(|v| v.parse().map_err(|_| not(format!("its `{k}` is `{v}`, not a whole number"))))
            .transpose()
    };
    let real = |k: &str| -> Result<f64, Diagnostic> {
        match text(k, false)? {
            None => Ok(0.0),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(x),
                _ => Err(not(format!("its `{k}` is `{v}`, not a finite number"))),
            },
        }
    };
    let at = Position {
        step: whole("step", true)?.unwrap_or(0),
        epoch: whole("epoch", true)?.unwrap_or(0),
        batch: whole("batch", false)?.unwrap_or(0),
        epoch_loss: Mean { sum: real("epoch_loss_sum")?, count: whole("epoch_loss_count", false)?.unwrap_or(0) },
        log_loss: Mean { sum: real("log_loss_sum")?, count: whole("log_loss_count", false)?.unwrap_or(0) },
        log_lines: whole("log_lines", false)?,
    };
    Ok((values, at))
}
