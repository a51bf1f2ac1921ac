//! The processes of a data-parallel run (`tfc run --workers N`, or `tfc
//! run` under `mpirun`, `srun` or another MPI launcher).
//!
//! Every process runs the whole program; a train block's steps are split
//! into virtual shards of each global batch (`ir::plan::ParallelStep`),
//! each process computes the gradients of its shards, and the processes
//! meet once per step in [`Communicator::exchange`]: their partial sums
//! are combined over a binary tree of the ranks in order (`tree`), by
//! recursive doubling, so all hold the same total. The rest is
//! bookkeeping for that one call: how the job was launched (`launch`),
//! how tensors travel (`wire`), and the watchdog every exchange runs under
//! (a rank that does not answer in time stops the whole job with an error
//! naming it, instead of a hang).
//!
//! Contract: `exchange` returns the same bytes on every rank, or does not
//! return (the job is aborted with a message naming the silent rank). One
//! process alone (`Local`) needs no MPI; `Mpi` (feature `mpi`) is the
//! MPI world of the process.
//!
//! Example: `tfc run --workers 2 examples/digits_mlp.tfl` trains on two
//! processes and ends with the same weights, bit for bit, as `tfc run
//! --workers 1` (and `--workers 4`).

pub mod launch;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "mpi")]
mod shm;
pub mod tree;
pub mod wire;

use crate::diag::{Code, Diagnostic};
use std::time::Duration;

/// Combines the messages of two adjacent blocks of ranks into one, in
/// place: `combine(into, other, other_is_lower)` merges `other` into
/// `into`, where `other_is_lower` says which is the lower block's (whose
/// parts win where the two are not summed). Sums must be commutative
/// (floating-point `+` of two operands is), so that both sides of a round
/// get the same bytes. Runs on every rank.
pub type Combine<'a> = &'a mut dyn FnMut(&mut [u8], &[u8], bool) -> Result<(), Diagnostic>;

/// One process's view of the processes of a run.
pub trait Communicator: Send + Sync {
    /// This process's place, from 0 (which prints, logs and checkpoints).
    fn rank(&self) -> usize;
    /// How many processes the run has.
    fn size(&self) -> usize;
    /// Combines every rank's `mine` over a balanced binary tree of the
    /// ranks in order — `(m0 ∘ m1) ∘ (m2 ∘ m3)` for four — and returns the
    /// result on every rank (by recursive doubling: in round k each rank
    /// swaps its block's result with the rank 2^k away; both combine the
    /// two in rank order, so all get the same bytes). The number of ranks
    /// must be a power of two. A rank that sends nothing for `timeout`
    /// aborts the job with an error naming it (`what` says what was
    /// exchanged, e.g. `the gradients of step 12`).
    fn exchange(&self, mine: &[u8], combine: Combine, timeout: Duration, what: &str) -> Result<Vec<u8>, Diagnostic>;

    /// `exchange` of a sum, in place: `data` becomes the sum over every
    /// rank's `data`, combined over the same tree, where `add(into, other)`
    /// adds `other` into `into` and must be commutative (the two sides of
    /// a round add the same two blocks in either order). A training step's
    /// gradients go straight from and back to where the step keeps them.
    fn all_reduce_in_place(&self, data: &mut [u8], add: Add, timeout: Duration, what: &str) -> Result<(), Diagnostic>;

    /// How `all_reduce_in_place` moves the bytes, for `--verbose`: e.g.
    /// `shared memory`, or `MPI (1 of the 2 ranks share this host)`.
    fn transport(&self) -> String;

    /// How many of the run's ranks run on this host (this one included),
    /// by MPI's reckoning.
    fn ranks_on_this_host(&self) -> usize;
}

/// Adds a block's sum into another's, in place (`all_reduce_in_place`).
pub type Add<'a> = &'a mut dyn FnMut(&mut [u8], &[u8]) -> Result<(), Diagnostic>;

/// A run of one process.
pub struct Local;

impl Communicator for Local {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn exchange(&self, mine: &[u8], _: Combine, _: Duration, _: &str) -> Result<Vec<u8>, Diagnostic> {
        Ok(mine.to_vec())
    }

    fn all_reduce_in_place(&self, _: &mut [u8], _: Add, _: Duration, _: &str) -> Result<(), Diagnostic> {
        Ok(())
    }

    fn transport(&self) -> String {
        "nothing (one process)".into()
    }

    fn ranks_on_this_host(&self) -> usize {
        1
    }
}

/// The communicator of this process when a launcher started it as one of
/// `placement.size` ranks: MPI's world, or an error if this tfc was built
/// without MPI.
pub fn join(placement: launch::Placement) -> Result<Box<dyn Communicator>, Diagnostic> {
    if placement.size == 1 {
        return Ok(Box::new(Local));
    }
    #[cfg(feature = "mpi")]
    {
        Ok(Box::new(mpi::Mpi::join(placement)?))
    }
    #[cfg(not(feature = "mpi"))]
    {
        Err(without_mpi(format!("this process is rank {} of {}", placement.rank, placement.size)))
    }
}

/// Whether this build can run on several processes.
pub const HAS_MPI: bool = cfg!(feature = "mpi");

/// The error for a multi-process run in a build without MPI.
pub fn without_mpi(what: String) -> Diagnostic {
    Diagnostic::new(Code::Launch, format!("{what}, but this tfc was built without MPI"))
        .help("build it with `cargo build --release --features mpi` (Debian: `apt-get install libopenmpi-dev openmpi-bin libclang-dev`)")
}

/// The message and exit of a job whose rank `silent` stopped answering:
/// printed by the rank that noticed, which then aborts every rank.
pub fn silent_rank_error(silent: usize, size: usize, what: &str, timeout: Duration) -> Diagnostic {
    let d = Diagnostic::new(
        Code::RankSilent,
        format!("rank {silent} of {size} stopped answering: no reply within {:.1} s while exchanging {what}", timeout.as_secs_f64()),
    )
    .help("the rank is stuck or too slow; `--step-timeout SECONDS` sets the watchdog (default: from the measured step time)");
    match size > 2 {
        // With more than two ranks, it may itself be waiting for another.
        true => d.note("or it waits for a rank that stopped answering it"),
        false => d,
    }
}

impl std::fmt::Debug for dyn Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} of {}", self.rank(), self.size())
    }
}
