//! Training progress on standard error (§9): a line rewritten in place on a
//! terminal, otherwise about twenty lines per run, plus every point where a
//! metric was computed. Standard output carries only what the program
//! prints.

use crate::ir::plan::TrainPlan;
use std::io::IsTerminal;

pub(super) struct Progress {
    /// Not the printing process (a data-parallel run's rank other than 0).
    quiet: bool,
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
    pub(super) fn new(plan: &TrainPlan, quiet: bool) -> Progress {
        Progress { quiet, tty: std::io::stderr().is_terminal(), epochs: plan.epochs, bar_shown: false.into() }
    }

    pub(super) fn step(&self, epoch: u64, batch: u64, batches: u64, loss: f64, rate: f64) {
        if self.tty && !self.quiet {
            let total = self.epochs.map(|e| format!("/{e}")).unwrap_or_default();
            let width = 24;
            let done = (width * batch / batches.max(1)).min(width) as usize;
            let bar: String = "█".repeat(done) + &"·".repeat(width as usize - done);
            eprint!("\repoch {epoch}{total} {bar} {batch}/{batches}  loss {loss:.4}  {rate:.0} ex/s ");
            self.bar_shown.set(true);
        }
    }

    /// The end of epoch `epoch` (1-based), or (`inside`) a step inside it
    /// where metrics were computed; `loss` is the mean over the epoch's
    /// steps so far (none after the last step).
    pub(super) fn point(
        &self,
        epoch: u64,
        step: u64,
        loss: Option<f64>,
        metrics: &[(String, f64)],
        rate: f64,
        inside: bool,
    ) {
        // Off a terminal, about twenty epoch lines per run: every k-th
        // epoch, the last one, and every point with metrics.
        let every = self.epochs.map(|e| (e / 20).max(1) as u64).unwrap_or(1);
        let last = !inside && self.epochs == Some(epoch as usize);
        if self.quiet {
            return;
        }
        if !self.tty && !last && metrics.is_empty() && (inside || !epoch.is_multiple_of(every)) {
            return;
        }
        let total = self.epochs.map(|e| format!("/{e}")).unwrap_or_default();
        let metrics: String = metrics.iter().map(|(n, v)| format!("  {n} {v:.4}")).collect();
        let loss = loss.map(|l| format!("  loss {l:.4}")).unwrap_or_default();
        if self.tty {
            eprint!("\r\x1b[K");
        }
        self.bar_shown.set(false);
        eprintln!("epoch {epoch}{total}  step {step}{loss}{metrics}  {rate:.0} ex/s");
    }
}
