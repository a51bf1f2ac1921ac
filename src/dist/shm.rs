//! The in-place all-reduce of ranks that share one host, through memory
//! they all map (feature `mpi`: MPI finds the ranks and names the
//! segments; the sums then bypass it).
//!
//! Why: between two local ranks Open MPI moves a message with one kernel
//! copy (CMA, `process_vm_readv`) per round, under its own progress
//! engine. Here each rank publishes its block in its own segment and reads
//! the others' blocks where they lie: no system call, and the ranks meet
//! on counters in shared memory. On two ranks (and for blocks under 64
//! KiB) every rank sums the whole block and the call ends there: one
//! meeting per call. Otherwise each rank sums its part of every block (a
//! reduce-scatter with no message), publishes it, and after a second
//! meeting copies the others' summed parts (an all-gather), so that no
//! rank reads every block whole. On the MLP's 800 KB gradient between two
//! ranks, the whole exchange went from 0.21-0.31 ms a step (MPI) to
//! 0.06-0.08 (two meetings), and one meeting per call cut the mean further
//! (the mean holds the steps where a rank waits for a preempted one).
//!
//! Contract: [`Segments::all_reduce`] leaves in `data` the sum over every
//! rank's `data`, each element summed over the balanced binary tree of
//! the ranks in order — the tree of [`super::tree`] and of MPI's recursive
//! doubling — so the bits equal the MPI path's (`add` must be
//! commutative). It waits at most until `deadline` for the others, and
//! otherwise names the first rank that did not arrive ([`Stall`]).
//! Every rank must call it with the same lengths in the same order, as a
//! step's all-reduces are. A segment is unlinked as soon as every rank
//! has mapped it, so a job that dies leaves nothing in `/dev/shm`.
//!
//! Layout of each rank's segment: one cache line per counter, then two
//! buffers of `capacity` bytes, used by alternate calls (double
//! buffering): a rank writes a buffer again two calls later, when every
//! other rank has arrived at the call in between, so has finished reading
//! it.
//!
//! Example: two ranks each all-reduce an 800 KB gradient: each copies it
//! into its segment, waits for the other's, and adds the other's block
//! into its own `data`.

use super::Add;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A rank that had not arrived at an all-reduce by the deadline.
#[derive(Debug)]
pub(super) struct Stall {
    pub rank: usize,
}

/// Bytes before a segment's buffers: the two counters, a cache line each
/// (one rank writes them, every other polls them).
const HEADER: usize = 128;
/// Offsets of the counters: the number of the call whose block this rank
/// has published, and the call whose part it has summed.
const ARRIVED: usize = 0;
const SUMMED: usize = 64;

/// Blocks below this many bytes are summed whole by every rank.
const WHOLE_BELOW: usize = 64 << 10;

/// The mapped segments of every rank of the host, this rank's included.
pub(super) struct Segments {
    rank: usize,
    maps: Vec<Mapping>,
    /// Bytes of each of a segment's two buffers.
    capacity: usize,
    /// Calls made so far; the buffer of call `c` is `c % 2`.
    calls: u64,
    /// Partial sums of subtrees that are not this rank's part's own.
    scratch: Vec<Vec<u8>>,
}

impl Segments {
    /// Creates and maps this rank's segment, named `name`, with room for
    /// blocks of `capacity` bytes (its pages reserved now, so that a full
    /// `/dev/shm` is an error here and not a `SIGBUS` later).
    pub(super) fn create(name: &str, capacity: usize) -> Result<Mapping, String> {
        Mapping::open(name, HEADER + 2 * capacity, true)
    }

    /// Maps the segments of all ranks, `own` being this rank's (from
    /// `create`), the others opened by their names.
    pub(super) fn join(rank: usize, own: Mapping, names: &[String], capacity: usize) -> Result<Segments, String> {
        let mut own = Some(own);
        let maps = names
            .iter()
            .enumerate()
            .map(|(r, name)| match r == rank {
                true => Ok(own.take().expect("one own segment")),
                false => Mapping::open(name, HEADER + 2 * capacity, false),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Segments { rank, maps, capacity, calls: 0, scratch: Vec::new() })
    }

    /// Whether blocks of `len` bytes fit.
    pub(super) fn fits(&self, len: usize) -> bool {
        len <= self.capacity
    }

    /// Sums `data` over every rank in place (the module's contract).
    pub(super) fn all_reduce(&mut self, data: &mut [u8], add: Add, deadline: Instant) -> Result<(), SumError> {
        debug_assert!(self.fits(data.len()));
        self.calls += 1;
        let call = self.calls;
        let size = self.maps.len();
        let buffer = HEADER + (call % 2) as usize * self.capacity;
        let len = data.len();
        // SAFETY (every `bytes`/`bytes_mut` below): the buffer of this call
        // lies inside each mapping (`HEADER + 2 * capacity` bytes, `len <=
        // capacity`); a rank writes only its own segment's buffer, and the
        // counters order every write before the reads of it (release
        // stores, acquire loads).
        unsafe { self.maps[self.rank].bytes_mut(buffer, len) }.copy_from_slice(data);
        self.maps[self.rank].counter(ARRIVED).store(call, Ordering::Release);
        self.wait_all(ARRIVED, call, deadline)?;

        let part = |r: usize| super::tree::part(r, size, len);
        // Two ranks, or a small block: each rank sums the whole block, and
        // the call ends with no second meeting (each meeting is where a
        // rank that was held up a moment holds the others up). Otherwise
        // each sums its part, and the ranks meet again to copy the others'.
        let whole = size == 2 || len < WHOLE_BELOW;
        let mine = if whole { 0..len } else { part(self.rank) };
        let sources: Vec<&[u8]> =
            self.maps.iter().map(|m| unsafe { m.bytes(buffer + mine.start, mine.len()) }).collect();
        let depth = size.trailing_zeros() as usize;
        self.scratch.resize_with(depth, Vec::new);
        // Grown, never shrunk: a step's blocks alternate between sizes.
        for s in self.scratch.iter_mut().filter(|s| s.len() < mine.len()) {
            s.resize(mine.len(), 0);
        }
        sum_tree(&mut data[mine.clone()], 0..size, Some(self.rank), &sources, &mut self.scratch, add)
            .map_err(SumError::Add)?;
        if whole {
            // The other ranks read this call's buffer before they arrive
            // at the next call, and this rank writes it again only in the
            // call after that, once they all have (double buffering).
            return Ok(());
        }
        // Only this rank reads its own part of its buffer: the sum goes
        // over its own block there.
        unsafe { self.maps[self.rank].bytes_mut(buffer + mine.start, mine.len()) }.copy_from_slice(&data[mine]);
        self.maps[self.rank].counter(SUMMED).store(call, Ordering::Release);
        self.wait_all(SUMMED, call, deadline)?;
        for r in (0..size).filter(|r| *r != self.rank) {
            let theirs = part(r);
            data[theirs.clone()].copy_from_slice(unsafe { self.maps[r].bytes(buffer + theirs.start, theirs.len()) });
        }
        Ok(())
    }

    /// Waits until every rank's counter at `at` reaches `call`.
    fn wait_all(&self, at: usize, call: u64, deadline: Instant) -> Result<(), SumError> {
        for (r, map) in self.maps.iter().enumerate() {
            let counter = map.counter(at);
            let mut spins = 0u32;
            let started = Instant::now();
            while counter.load(Ordering::Acquire) < call {
                if Instant::now() > deadline {
                    return Err(SumError::Stall(Stall { rank: r }));
                }
                // Spin briefly (the other rank is usually microseconds
                // away), then yield the core (ranks may share cores), and
                // sleep once the wait is long enough that the other rank
                // is clearly still computing.
                spins += 1;
                match (spins < 64, started.elapsed() < Duration::from_millis(100)) {
                    (true, _) => std::hint::spin_loop(),
                    (false, true) => std::thread::yield_now(),
                    (false, false) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }
        Ok(())
    }
}

/// Why an all-reduce through shared memory did not finish.
#[derive(Debug)]
pub(super) enum SumError {
    Stall(Stall),
    Add(crate::diag::Diagnostic),
}

/// Writes into `out` the sum of the ranks `ranks`' parts (`sources`) over
/// the balanced tree of those ranks; `holds` is the rank whose part `out`
/// already holds, if any (its copy is skipped). Each node adds its two
/// subtrees' sums in either order (`add` is commutative): the half with
/// `holds` is summed into `out`, the other into scratch, or read straight
/// from its segment when it is one rank.
fn sum_tree(
    out: &mut [u8],
    ranks: std::ops::Range<usize>,
    holds: Option<usize>,
    sources: &[&[u8]],
    scratch: &mut [Vec<u8>],
    add: Add,
) -> Result<(), crate::diag::Diagnostic> {
    if ranks.len() == 1 {
        if holds != Some(ranks.start) {
            out.copy_from_slice(sources[ranks.start]);
        }
        return Ok(());
    }
    let mid = ranks.start + ranks.len() / 2;
    let (near, far) = match holds.is_some_and(|h| h >= mid) {
        true => (mid..ranks.end, ranks.start..mid),
        false => (ranks.start..mid, mid..ranks.end),
    };
    sum_tree(out, near, holds, sources, scratch, add)?;
    if far.len() == 1 {
        return add(out, sources[far.start]);
    }
    let (level, deeper) = scratch.split_first_mut().expect("one scratch buffer per level of the tree");
    let level = &mut level[..out.len()];
    sum_tree(level, far, None, sources, deeper, add)?;
    add(out, level)
}

/// A shared-memory segment mapped into this process.
pub(super) struct Mapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; concurrent
// access goes through the counters' ordering (`Segments`).
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps the POSIX shared-memory object `name` of `len` bytes, creating
    /// it (exclusively, its pages reserved) or opening one that exists.
    fn open(name: &str, len: usize, create: bool) -> Result<Mapping, String> {
        let c_name = std::ffi::CString::new(name).map_err(|_| format!("a segment name with a NUL: {name:?}"))?;
        let flags = match create {
            true => libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            false => libc::O_RDWR,
        };
        let fail = |what: &str| format!("{what} {name}: {}", std::io::Error::last_os_error());
        // SAFETY: a NUL-terminated name; the descriptor is closed below.
        let fd = unsafe { libc::shm_open(c_name.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(fail("cannot open shared memory"));
        }
        let sized = match create {
            // SAFETY: `fd` is open for writing.
            true => match unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) } {
                0 => Ok(()),
                e => Err(format!(
                    "cannot reserve {len} bytes of shared memory for {name}: {}",
                    std::io::Error::from_raw_os_error(e)
                )),
            },
            false => {
                // SAFETY: `st` is plain data that `fstat` fills.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                match unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size as usize >= len {
                    true => Ok(()),
                    false => Err(format!("the shared memory {name} is smaller than {len} bytes")),
                }
            }
        };
        let ptr = sized.and_then(|()| {
            // SAFETY: a shared mapping of `len` bytes of the object, checked.
            let ptr = unsafe {
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
            };
            match ptr == libc::MAP_FAILED {
                true => Err(fail("cannot map shared memory")),
                false => Ok(ptr),
            }
        });
        // SAFETY: `fd` is ours; the mapping outlives it.
        unsafe { libc::close(fd) };
        let ptr = ptr?;
        Ok(Mapping { ptr: std::ptr::NonNull::new(ptr.cast()).ok_or_else(|| fail("null mapping of"))?, len })
    }

    /// Removes the name `name` (the mappings stay until unmapped).
    pub(super) fn unlink(name: &str) {
        if let Ok(c_name) = std::ffi::CString::new(name) {
            // SAFETY: a NUL-terminated name.
            unsafe { libc::shm_unlink(c_name.as_ptr()) };
        }
    }

    /// The counter at byte `at` of the header.
    fn counter(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at + 8 <= HEADER && at.is_multiple_of(8));
        // SAFETY: inside the mapping (page-aligned, so 8-aligned at `at`),
        // and only ever accessed as an atomic by every process.
        unsafe { &*self.ptr.as_ptr().add(at).cast::<AtomicU64>() }
    }

    /// # Safety
    /// `at..at + len` lies inside the mapping and no other process writes
    /// it while the slice lives.
    unsafe fn bytes(&self, at: usize, len: usize) -> &[u8] {
        assert!(at + len <= self.len);
        std::slice::from_raw_parts(self.ptr.as_ptr().add(at), len)
    }

    /// # Safety
    /// As `bytes`, and nothing else reads it while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self, at: usize, len: usize) -> &mut [u8] {
        assert!(at + len <= self.len);
        std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(at), len)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
