//! The MPI world of this process (feature `mpi`, rsmpi over the system's
//! MPI): the `Communicator` of a run that a launcher started on several
//! processes.
//!
//! Contract: `exchange` is point-to-point (each rank sends to rank 0,
//! rank 0 sends the reply to each), with every request polled under a
//! deadline: MPI's own collectives cannot be given up on, and a rank
//! that is alive but stuck would hang the others forever. Past the
//! deadline the rank that noticed prints which ranks did not answer and
//! calls `MPI_Abort`, which ends every process of the job. MPI is
//! initialized at `join` (with `MPI_THREAD_SERIALIZED`: calls come from
//! the training loop's thread only, one at a time, under `lock`) and
//! finalized when the communicator is dropped.
//!
//! Example: `mpirun -n 2 tfc run prog.tfl` — each process's `join` gives
//! it its rank; `exchange` is their meeting point once per step.

use super::launch::Placement;
use super::{silent_rank_error, Combine, Communicator};
use crate::diag::{Code, Diagnostic};
use mpi::request::{LocalScope, Request};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, Destination, Source};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Mpi {
    rank: usize,
    size: usize,
    /// Held while MPI is called (the thread level is `SERIALIZED`); dropping
    /// the universe finalizes MPI.
    lock: Mutex<mpi::environment::Universe>,
}

// SAFETY: MPI was initialized with `MPI_THREAD_SERIALIZED`, which allows
// calls from any thread as long as no two overlap; every call goes through
// `lock`.
unsafe impl Send for Mpi {}
unsafe impl Sync for Mpi {}

impl Mpi {
    pub fn join(placement: Placement) -> Result<Mpi, Diagnostic> {
        let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Serialized) else {
            return Err(Diagnostic::internal("dist: MPI was initialized twice"));
        };
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        if (rank, size) != (placement.rank, placement.size) {
            return Err(Diagnostic::new(
                Code::Launch,
                format!(
                    "the launcher says rank {} of {}, but MPI says rank {rank} of {size}",
                    placement.rank, placement.size
                ),
            )
            .help("start tfc with the MPI it was built against (`ldd $(which tfc) | grep mpi`)"));
        }
        Ok(Mpi { rank, size, lock: Mutex::new(universe) })
    }
}

/// The message tag of exchanges (messages between two ranks arrive in the
/// order they were sent, and every exchange completes before the next).
const TAG: i32 = 7301;

impl Communicator for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn exchange(&self, mine: &[u8], combine: Combine, timeout: Duration, what: &str) -> Result<Vec<u8>, Diagnostic> {
        let universe = self.lock.lock().map_err(|_| Diagnostic::internal("dist: the MPI lock is poisoned"))?;
        let world = universe.world();
        let deadline = Instant::now() + timeout;
        let fail = |silent: &[usize]| abort_silent(&world, silent, self.size, what, timeout);
        if self.rank == 0 {
            let mut inboxes: Vec<Vec<u8>> = (1..self.size).map(|_| vec![0u8; mine.len()]).collect();
            mpi::request::scope(|scope| {
                let pending = inboxes
                    .iter_mut()
                    .enumerate()
                    .map(|(i, inbox)| {
                        (
                            i + 1,
                            world.process_at_rank(i as i32 + 1).immediate_receive_into_with_tag(
                                scope,
                                &mut inbox[..],
                                TAG,
                            ),
                        )
                    })
                    .collect();
                if let Err(silent) = poll(pending, deadline) {
                    fail(&silent)
                }
            });
            let mut all: Vec<&[u8]> = vec![mine];
            all.extend(inboxes.iter().map(|b| &b[..]));
            let reply = combine(&all)?;
            if reply.len() != mine.len() {
                return Err(Diagnostic::internal("dist: a reply differs in length from the messages"));
            }
            mpi::request::scope(|scope| {
                let pending = (1..self.size)
                    .map(|r| (r, world.process_at_rank(r as i32).immediate_send_with_tag(scope, &reply[..], TAG)))
                    .collect();
                if let Err(silent) = poll(pending, deadline) {
                    fail(&silent)
                }
            });
            Ok(reply)
        } else {
            let mut reply = vec![0u8; mine.len()];
            let root = world.process_at_rank(0);
            mpi::request::scope(|scope| {
                let pending = vec![
                    (0, root.immediate_send_with_tag(scope, mine, TAG)),
                    (0, root.immediate_receive_into_with_tag(scope, &mut reply[..], TAG)),
                ];
                if let Err(silent) = poll(pending, deadline) {
                    fail(&silent)
                }
            });
            Ok(reply)
        }
    }
}

/// Prints which ranks did not answer and ends every process of the job.
fn abort_silent(world: &SimpleCommunicator, silent: &[usize], size: usize, what: &str, timeout: Duration) -> ! {
    let d = silent_rank_error(silent, size, what, timeout);
    eprintln!("error[{}]: {}", d.code.as_str(), d.message);
    if let Some(help) = &d.help {
        eprintln!("  help: {help}");
    }
    world.abort(1)
}

/// Waits for every request (tagged with its peer's rank); at `deadline`,
/// returns the peers still pending (their requests must not be dropped:
/// the caller aborts). Spins politely for the first
/// millisecond (an exchange between ranks on idle cores takes microseconds),
/// then sleeps between polls (ranks sharing a core must not busy-wait).
fn poll<'a, B: ?Sized>(
    mut pending: Vec<(usize, Request<'a, B, &LocalScope<'a>>)>,
    deadline: Instant,
) -> Result<(), Vec<usize>> {
    let started = Instant::now();
    while !pending.is_empty() {
        pending = pending
            .into_iter()
            .filter_map(|(peer, request)| request.test().err().map(|request| (peer, request)))
            .collect();
        if pending.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let mut silent: Vec<usize> = pending.iter().map(|(peer, _)| *peer).collect();
            silent.dedup();
            std::mem::forget(pending);
            return Err(silent);
        }
        match started.elapsed() < Duration::from_millis(1) {
            true => std::thread::yield_now(),
            false => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    Ok(())
}
