//! Executable memory for the machine code module `wide` assembles.
//!
//! Contract: [`place`] copies position-independent code into fresh pages,
//! makes them read-only and executable (never writable and executable at
//! once) and returns each function's address. The pages are never
//! unmapped, as Cranelift's JIT memory is not: a compiled unit keeps its
//! kernels' addresses after the (thread-local) `Compiler` that made them
//! is gone. Kernels are cached by signature, so this memory is bounded by
//! the distinct kernels a process compiles.
//!
//! Example: `place(&[code_a, code_b])?` returns two addresses in one
//! mapping, each function starting on a 64-byte boundary.

/// Functions start on cache-line boundaries.
const ALIGN: usize = 64;

/// Places `codes` side by side in one new mapping; their addresses, in
/// order.
pub fn place(codes: &[Vec<u8>]) -> Result<Vec<*const u8>, String> {
    let mut offsets = Vec::with_capacity(codes.len());
    let mut end = 0;
    for code in codes {
        offsets.push(end);
        end = (end + code.len()).div_ceil(ALIGN) * ALIGN;
    }
    if end == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(ALIGN);
    let len = end.div_ceil(page) * page;
    // SAFETY: a fresh private anonymous mapping; the result is checked.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(format!("cannot map {len} bytes for machine code: {}", std::io::Error::last_os_error()));
    }
    for (code, &at) in codes.iter().zip(&offsets) {
        // SAFETY: `at + code.len() <= end <= len`, inside the mapping
        // just made writable; the source is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), base.cast::<u8>().add(at), code.len()) };
    }
    // SAFETY: the whole mapping made above.
    if unsafe { libc::mprotect(base, len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
        return Err(format!("cannot make machine code executable: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: every offset lies inside the mapping.
    Ok(offsets.iter().map(|&at| unsafe { base.cast::<u8>().add(at).cast_const() }).collect())
}
