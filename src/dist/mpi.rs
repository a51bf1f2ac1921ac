//! The MPI world of this process (feature `mpi`, rsmpi over the system's
//! MPI): the `Communicator` of a run that a launcher started on several
//! processes.
//!
//! Contract: `exchange` is point-to-point (recursive doubling: log2 of the
//! ranks rounds of one swap each), with every request polled under a
//! deadline: MPI's own collectives cannot be given up on, and a rank
//! that is alive but stuck would hang the others forever. Past the
//! deadline the rank that noticed prints which ranks did not answer and
//! calls `MPI_Abort`, which ends every process of the job. MPI is
//! initialized at `join` (with `MPI_THREAD_SERIALIZED`: calls come from
//! the training loop's thread only, one at a time, under `lock`) and
//! finalized when the communicator is dropped. When every rank is on this
//! host, `all_reduce_in_place` sums through shared memory instead (`shm`;
//! MPI only names and sizes the segments), under the same deadline.
//!
//! Example: `mpirun -n 2 tfc run prog.tfl` — each process's `join` gives
//! it its rank; `exchange` is their meeting point once per step.

use super::launch::Placement;
use super::shm::{Mapping, Segments, SumError};
use super::{silent_rank_error, Add, Combine, Communicator};
use crate::diag::{Code, Diagnostic};
use mpi::request::{LocalScope, Request};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, Destination, Root, Source};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Mpi {
    rank: usize,
    size: usize,
    /// The ranks on this host (`MPI_Comm_split_type` shared), this one included.
    on_host: usize,
    /// Held while MPI is called (the thread level is `SERIALIZED`); dropping
    /// the universe finalizes MPI.
    lock: Mutex<Held>,
}

/// What `Mpi::lock` guards.
struct Held {
    universe: mpi::environment::Universe,
    /// Where `all_reduce_in_place` receives the partner's block: kept, so
    /// that a step's all-reduces allocate (and fault in) nothing.
    scratch: Vec<u8>,
    /// How in-place all-reduces travel when every rank is on this host.
    shared: Shared,
}

/// Whether the ranks sum through shared memory (`shm`).
enum Shared {
    /// They do not: why not, for `--verbose`.
    Off(String),
    /// They do, through the segments named `{prefix}-{generation}-{rank}`
    /// (`None` until the first all-reduce; new ones when a block outgrows
    /// them).
    On { prefix: String, generation: u32, segments: Option<Segments> },
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
        let on_host = world.split_shared(world.rank()).size() as usize;
        let shared = shared_memory(&world, size, on_host);
        Ok(Mpi { rank, size, on_host, lock: Mutex::new(Held { universe, scratch: Vec::new(), shared }) })
    }
}

/// Whether this job's all-reduces may go through shared memory: every
/// rank on this host (by MPI's own reckoning, so that ranks on hosts
/// simulated by network namespaces still talk through the network), a
/// power of two of them, and not turned off with `TFC_DIST_SHM=0` on rank
/// 0 (to compare the two). The segments' name prefix comes from rank 0.
fn shared_memory(world: &SimpleCommunicator, size: usize, on_host: usize) -> Shared {
    // Rank 0's name prefix and rank 0's `TFC_DIST_SHM` (its last byte):
    // ranks started with other settings still take the same path.
    let mut from_rank_0 = [0u8; 48];
    if world.rank() == 0 {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!("/tfc-{}-{nanos}", std::process::id());
        from_rank_0[..name.len()].copy_from_slice(name.as_bytes());
        from_rank_0[47] = u8::from(std::env::var("TFC_DIST_SHM").is_ok_and(|v| v == "0"));
    }
    world.process_at_rank(0).broadcast_into(&mut from_rank_0[..]);
    let turned_off = from_rank_0[47] == 1;
    let prefix = String::from_utf8_lossy(&from_rank_0[..47]).trim_end_matches('\0').to_string();
    if turned_off {
        Shared::Off("TFC_DIST_SHM=0".into())
    } else if on_host != size {
        Shared::Off(format!("{on_host} of the {size} ranks share this host"))
    } else if !size.is_power_of_two() {
        Shared::Off(format!("{size} ranks, not a power of two"))
    } else {
        Shared::On { prefix, generation: 0, segments: None }
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
        let held = self.held()?;
        let world = held.universe.world();
        let deadline = Instant::now() + timeout;
        // Recursive doubling: in round k this rank's block (the 2^k ranks
        // that agree with it above bit k) swaps its result with the block
        // next to it, and both sides combine the two, lower block first.
        // The partner's block arrives in `theirs`, ours is merged into it
        // (no copy of a large message), and it becomes ours.
        // `None` until the first round: ours is still `mine`.
        let mut acc: Option<Vec<u8>> = None;
        let mut theirs = vec![0u8; mine.len()];
        let wait = Wait { deadline, timeout, what, size: self.size };
        let mut distance = 1;
        while distance < self.size {
            let partner = self.rank ^ distance;
            let ours = acc.as_deref().unwrap_or(mine);
            swap(&world, partner, ours, &mut theirs, &wait);
            combine(&mut theirs, ours, self.rank < partner)?;
            distance *= 2;
            // The old result is the next round's receive buffer (a fresh
            // one after the first round, none after the last).
            let more = distance < self.size;
            theirs = match acc.replace(theirs) {
                Some(old) => old,
                None if more => vec![0u8; mine.len()],
                None => Vec::new(),
            };
        }
        Ok(acc.unwrap_or_else(|| mine.to_vec()))
    }

    fn all_reduce_in_place(&self, data: &mut [u8], add: Add, timeout: Duration, what: &str) -> Result<(), Diagnostic> {
        let mut held = self.held()?;
        let Held { universe, scratch, shared } = &mut *held;
        let world = universe.world();
        let deadline = Instant::now() + timeout;
        let wait = Wait { deadline, timeout, what, size: self.size };
        if let Some(segments) = self.segments(&world, shared, data.len(), &wait) {
            return match segments.all_reduce(data, add, deadline) {
                Ok(()) => Ok(()),
                Err(SumError::Add(d)) => Err(d),
                Err(SumError::Stall(stall)) => abort_silent(&world, stall.rank, self.size, what, timeout),
            };
        }
        if scratch.len() < data.len() {
            scratch.resize(data.len(), 0);
        }
        // Large values on four ranks or more by recursive halving (about
        // twice their bytes sent, whatever the ranks), the rest by
        // recursive doubling (half the rounds; on two ranks halving sends
        // the same bytes in two rounds, and measured no faster); both sum
        // over the same tree.
        if data.len() >= HALVING_FROM_BYTES && self.size >= 4 {
            for round in super::tree::halving_rounds(self.rank, self.size, data.len()) {
                let (send, recv) = (round.send.clone(), round.recv.clone());
                if round.add {
                    let theirs = &mut scratch[..recv.len()];
                    swap(&world, round.partner, &data[send], theirs, &wait);
                    add(&mut data[recv], theirs)?;
                } else {
                    let (ours, theirs) = apart(data, send, recv);
                    swap(&world, round.partner, ours, theirs, &wait);
                }
            }
            return Ok(());
        }
        let theirs = &mut scratch[..data.len()];
        doubling(&world, self.rank, self.size, data, theirs, add, &wait)
    }

    fn transport(&self) -> String {
        match self.lock.lock().as_deref() {
            Ok(Held { shared: Shared::On { .. }, .. }) => "shared memory".into(),
            Ok(Held { shared: Shared::Off(why), .. }) => format!("MPI ({why})"),
            Err(_) => "MPI".into(),
        }
    }

    fn ranks_on_this_host(&self) -> usize {
        self.on_host
    }
}

impl Mpi {
    /// The shared-memory segments that hold blocks of `len` bytes, mapped
    /// on every rank (new ones when these are too small: every rank asks
    /// for the same lengths in the same order); `None` if the ranks do not
    /// share memory, or could not map it (then never again, and
    /// `--verbose` says why).
    fn segments<'a>(
        &self,
        world: &SimpleCommunicator,
        shared: &'a mut Shared,
        len: usize,
        wait: &Wait,
    ) -> Option<&'a mut Segments> {
        let Shared::On { prefix, generation, segments } = shared else { return None };
        if !segments.as_ref().is_some_and(|s| s.fits(len)) {
            *segments = None;
            *generation += 1;
            // Room for this block and more, so that a step's growing
            // blocks map anew a few times at most.
            let capacity = len.next_power_of_two().max(1 << 20);
            let names: Vec<String> = (0..self.size).map(|r| format!("{prefix}-{generation}-{r}")).collect();
            match self.map_segments(world, &names, capacity, wait) {
                Ok(mapped) => *segments = Some(mapped),
                Err(why) => {
                    *shared = Shared::Off(why);
                    return None;
                }
            }
        }
        let Shared::On { segments, .. } = shared else { return None };
        segments.as_mut()
    }

    /// Creates this rank's segment, maps every rank's, and unlinks its own
    /// name once all have mapped them; every rank gets `Ok` or all `Err`.
    fn map_segments(
        &self,
        world: &SimpleCommunicator,
        names: &[String],
        capacity: usize,
        wait: &Wait,
    ) -> Result<Segments, String> {
        let own = Segments::create(&names[self.rank], capacity);
        let created = agree(world, self.rank, self.size, own.is_ok(), wait);
        let joined = match (own, created) {
            (Ok(own), true) => Segments::join(self.rank, own, names, capacity),
            (Ok(_), false) => Err("another rank could not create its shared memory".to_string()),
            (Err(why), _) => Err(why),
        };
        let all = agree(world, self.rank, self.size, joined.is_ok(), wait);
        Mapping::unlink(&names[self.rank]);
        match (joined, all) {
            (Ok(segments), true) => Ok(segments),
            (Ok(_), false) => Err("another rank could not map the shared memory".to_string()),
            (Err(why), _) => Err(why),
        }
    }

    /// The lock on MPI, for an exchange among a power of two of ranks.
    fn held(&self) -> Result<std::sync::MutexGuard<'_, Held>, Diagnostic> {
        if !self.size.is_power_of_two() {
            return Err(Diagnostic::internal(format!(
                "dist: an exchange among {} ranks (not a power of two)",
                self.size
            )));
        }
        self.lock.lock().map_err(|_| Diagnostic::internal("dist: the MPI lock is poisoned"))
    }
}

/// Recursive doubling as in `exchange`, each round adding the partner
/// block's sum (received into `theirs`, as long as `data`) into ours where
/// it lies.
fn doubling(
    world: &SimpleCommunicator,
    rank: usize,
    size: usize,
    data: &mut [u8],
    theirs: &mut [u8],
    add: Add,
    wait: &Wait,
) -> Result<(), Diagnostic> {
    let mut distance = 1;
    while distance < size {
        swap(world, rank ^ distance, data, theirs, wait);
        add(data, theirs)?;
        distance *= 2;
    }
    Ok(())
}

/// Whether every rank says `yes` (`doubling` of one byte each, and-ed).
fn agree(world: &SimpleCommunicator, rank: usize, size: usize, yes: bool, wait: &Wait) -> bool {
    let mut all = [u8::from(yes)];
    let mut both = |into: &mut [u8], other: &[u8]| {
        into[0] &= other[0];
        Ok(())
    };
    doubling(world, rank, size, &mut all, &mut [0u8], &mut both, wait).is_ok() && all[0] == 1
}

/// The size from which an in-place all-reduce among four ranks or more
/// halves its message each round instead of swapping it whole.
const HALVING_FROM_BYTES: usize = 64 << 10;

/// Two disjoint ranges of `data`, the first to read, the second to write.
fn apart(data: &mut [u8], read: std::ops::Range<usize>, write: std::ops::Range<usize>) -> (&[u8], &mut [u8]) {
    match read.start < write.start {
        true => {
            let (low, high) = data.split_at_mut(write.start);
            (&low[read], &mut high[..write.len()])
        }
        false => {
            let (low, high) = data.split_at_mut(read.start);
            (&high[..read.len()], &mut low[write])
        }
    }
}

/// How long a swap may wait, and what its error says (`silent_rank_error`).
struct Wait<'a> {
    deadline: Instant,
    timeout: Duration,
    what: &'a str,
    size: usize,
}

/// Sends `ours` to rank `partner` while receiving its block into `theirs`
/// (of the same length); ends the job, naming the partner, if that takes
/// past the deadline.
fn swap(world: &SimpleCommunicator, partner: usize, ours: &[u8], theirs: &mut [u8], wait: &Wait) {
    let peer = world.process_at_rank(partner as i32);
    mpi::request::scope(|scope| {
        let pending = vec![
            peer.immediate_receive_into_with_tag(scope, theirs, TAG),
            peer.immediate_send_with_tag(scope, ours, TAG),
        ];
        if !poll(pending, wait.deadline) {
            abort_silent(world, partner, wait.size, wait.what, wait.timeout)
        }
    });
}

/// Prints which ranks did not answer and ends every process of the job.
fn abort_silent(world: &SimpleCommunicator, silent: usize, size: usize, what: &str, timeout: Duration) -> ! {
    let d = silent_rank_error(silent, size, what, timeout);
    eprintln!("error[{}]: {}", d.code.as_str(), d.message);
    for note in &d.notes {
        eprintln!("  note: {note}");
    }
    if let Some(help) = &d.help {
        eprintln!("  help: {help}");
    }
    world.abort(1)
}

/// Waits for every request; `false` if some are still pending at
/// `deadline` (they must not be dropped: the caller aborts). Polls with
/// `sched_yield` between tests (ranks sharing a core must not busy-wait),
/// sleeping only after 100 ms.
fn poll<'a, B: ?Sized>(mut pending: Vec<Request<'a, B, &LocalScope<'a>>>, deadline: Instant) -> bool {
    let started = Instant::now();
    while !pending.is_empty() {
        pending = pending.into_iter().filter_map(|request| request.test().err()).collect();
        if pending.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            std::mem::forget(pending);
            return false;
        }
        // MPI moves a large message in fragments, only while it is called:
        // keep calling (yielding the core to any rank that needs it), and
        // sleep only once the wait is long enough that a peer is clearly
        // still computing, where a millisecond more is noise.
        match started.elapsed() < Duration::from_millis(100) {
            true => std::thread::yield_now(),
            false => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    true
}
