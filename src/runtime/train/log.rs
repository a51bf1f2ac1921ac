//! The training log (`log "path" every … format = …`, §9): one JSON line
//! per log point, and one for every other point where a metric was
//! computed; with `format = "tensorboard"`, one TensorBoard event with the
//! same values at the same points, in an event file in the log's directory
//! (`io::tensorboard`).
//!
//! Contract: a run from scratch starts a fresh file; a resumed run keeps
//! the lines its checkpoint had seen (the lines a crashed run wrote after
//! its last checkpoint are dropped, so that the resumed run's are not
//! written twice) and appends. Rewriting the kept lines is atomic. A
//! resumed TensorBoard log starts a new event file in the directory whose
//! first event is a restart (`SessionLog` START) at the step after the
//! checkpoint's, which makes TensorBoard drop the stopped run's events from
//! that step on (its "purge" of orphaned data).
//!
//! Example line: `{"step": 20, "epoch": 5, "loss": 0.00024, "line_loss":
//! 0.0000254, "examples_per_sec": 186555.4}`.

use super::Position;
use crate::diag::{Code, Diagnostic};
use crate::io::tensorboard::EventWriter;
use crate::ir::plan::{Cadence, LogFormat, TrainPlan};
use std::io::Write;

pub(super) struct Log {
    sink: Sink,
    /// Lines in the file.
    pub lines: u64,
    pub every: Cadence,
}

/// Where the lines go.
enum Sink {
    Jsonl(std::fs::File),
    Events(EventWriter),
}

impl Log {
    /// Opens the plan's log, if it has one; `resumed` is where a resumed run
    /// starts.
    pub fn open(ex: &super::Executor, plan: &TrainPlan, resumed: Option<&Position>) -> Result<Option<Log>, Diagnostic> {
        let Some(log) = &plan.log else { return Ok(None) };
        let (every, path) = (log.every, ex.resolve_path(&log.path));
        let failed = |what: &str, e: std::io::Error| {
            Diagnostic::new(Code::Io, format!("cannot {what} the log `{}`: {e}", path.display()))
                .label(plan.span, "in this train block")
        };
        if log.format == LogFormat::TensorBoard {
            let mut events = EventWriter::create(&path).map_err(|e| failed("create an event file in", e))?;
            if let Some(at) = resumed {
                events.restart(at.step + 1, wall_time()).map_err(|e| failed("write to", e))?;
            }
            let lines = resumed.and_then(|at| at.log_lines).unwrap_or(0);
            return Ok(Some(Log { sink: Sink::Events(events), lines, every }));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| failed("create the directory of", e))?;
        }
        let mut lines = 0;
        if let Some(at) = resumed {
            let old = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(failed("read", e)),
            };
            let ends: Vec<usize> = old.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
            let keep = at.log_lines.map_or(ends.len(), |n| (n as usize).min(ends.len()));
            lines = keep as u64;
            let kept = ends.get(keep.wrapping_sub(1)).copied().unwrap_or(0);
            if kept < old.len() {
                crate::io::checkpoint::write_atomic(&path, &[&old[..kept]])
                    .map_err(|d| d.label(plan.span, "while resuming this training"))?;
            }
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true);
        if resumed.is_some() {
            options.append(true);
        } else {
            options.write(true).truncate(true);
        }
        let file = options.open(&path).map_err(|e| failed("open", e))?;
        Ok(Some(Log { sink: Sink::Jsonl(file), lines, every }))
    }

    /// One line: the training `loss` since the last log point (absent on a
    /// line that only reports metrics), then the metrics.
    pub fn write(&mut self, at: &Position, epoch: u64, loss: Option<f64>, metrics: &[(String, f64)], rate: f64) {
        self.lines += 1;
        let file = match &mut self.sink {
            Sink::Jsonl(file) => file,
            Sink::Events(events) => {
                // The same tags as the JSON line's keys; the step is the x
                // axis TensorBoard plots.
                let values: Vec<(&str, f64)> = loss
                    .map(|l| ("loss", l))
                    .into_iter()
                    .chain(metrics.iter().map(|(n, v)| (n.as_str(), *v)))
                    .collect();
                // A side channel, like the JSON lines below.
                let _ = events.scalars(at.step, wall_time(), &values);
                return;
            }
        };
        let mut line = format!("{{\"step\": {}, \"epoch\": {epoch}", at.step);
        if let Some(l) = loss {
            line.push_str(&format!(", \"loss\": {}", json_number(l)));
        }
        for (name, v) in metrics {
            line.push_str(&format!(", {}: {}", serde_json::Value::from(name.clone()), json_number(*v)));
        }
        line.push_str(&format!(", \"examples_per_sec\": {}}}\n", json_number(rate)));
        // A log is a side channel: a full disk must not stop the training.
        let _ = file.write_all(line.as_bytes());
    }
}

/// Seconds since the Unix epoch, an event's `wall_time`.
fn wall_time() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}
