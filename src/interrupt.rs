//! Ctrl-C as data: a process-wide flag that the SIGINT handler sets and the
//! runtime polls at safe points (between effects, between training steps,
//! between the ops of a region), so an interrupted run stops at a boundary
//! and never leaves a half-written file behind.
//!
//! Contract: `install` is idempotent; after it, the first Ctrl-C only sets
//! the flag (the run stops at its next safe point with E0403), a second
//! Ctrl-C while the flag is still set exits the process at once with status
//! 130, the shell convention for SIGINT. `clear` re-arms the flag (the REPL
//! does so before each statement).

use crate::diag::{Code, Diagnostic};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn flag() -> &'static Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Installs the SIGINT handler (once per process).
pub fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let flag = flag().clone();
        // The conditional shutdown is registered first so that it sees the
        // flag as it was before this signal: set means "second Ctrl-C".
        let _ = signal_hook::flag::register_conditional_shutdown(signal_hook::consts::SIGINT, 130, flag.clone());
        let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, flag);
    });
}

/// Whether Ctrl-C was pressed since the last `clear`.
pub fn requested() -> bool {
    flag().load(Ordering::Relaxed)
}

/// Marks the run as interrupted (what the signal handler does; also for tests).
pub fn request() {
    flag().store(true, Ordering::Relaxed);
}

/// Re-arms the flag.
pub fn clear() {
    flag().store(false, Ordering::Relaxed);
}

/// `Err(E0403)` if Ctrl-C was pressed: the call sites are the safe points.
pub fn check() -> Result<(), Diagnostic> {
    if requested() {
        Err(Diagnostic::new(Code::Interrupted, "interrupted (Ctrl-C)"))
    } else {
        Ok(())
    }
}
