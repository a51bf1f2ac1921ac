//! A unit's storage and one run's view of it.
//!
//! Contract: [`State`] owns what a prepared unit keeps between runs: the
//! arena (64-byte aligned, at the memory plan's offsets), the table of
//! interpreted values, the convolutions' scratch and the fused pools'
//! first maxima. [`Mem`] is that storage as raw parts plus the run's
//! inputs and the unit's fixed values, shared by the steps of one run:
//! each accessor checks bounds, and the `unsafe` ones leave to the caller
//! (the schedule) that no two steps running at once touch the same place
//! unless both only read it.
//!
//! Example: a matmul step takes its operands with `mem.ptr(a, m * k)` and
//! its result with `mem.out(dst, m * n, "a matmul result")`.

use super::internal;
use super::step::Ref;
use crate::diag::Diagnostic;
use crate::ir::{DType, TensorType};
use crate::tensor::{Data, Tensor};

/// 64-byte aligned storage (the memory plan's offsets are 64-byte multiples).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Line(pub(super) [f32; 16]);

/// Plain data whose all-zero bytes are a valid value (zero).
///
/// # Safety
/// Implement it only for types without references, niches or padding
/// that a zero byte would make invalid.
pub(super) unsafe trait ZeroBits: Copy {}
// SAFETY: floats, integers and arrays of floats: zero bytes are 0.0 / 0.
unsafe impl ZeroBits for Line {}
unsafe impl ZeroBits for f32 {}
unsafe impl ZeroBits for u64 {}

/// `n` zeros in pages fresh from the operating system (an anonymous
/// mapping), which it maps and zeroes on first touch.
///
/// Why not a `Vec`: writing zeros (or the allocator's `calloc`, which
/// clears memory it reuses) touches every page of a 15 MB arena at
/// preparation, a third of the transformer's; fresh pages cost nothing
/// until a step writes them, and a part no step reaches costs nothing.
pub(super) struct Zeroed<T: ZeroBits> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: `Zeroed` owns its pages like a `Vec` owns its buffer.
unsafe impl<T: ZeroBits + Send> Send for Zeroed<T> {}
unsafe impl<T: ZeroBits + Sync> Sync for Zeroed<T> {}

impl<T: ZeroBits> Zeroed<T> {
    /// `n` zeros, or an error naming what needed the bytes when the system
    /// has no memory for them (instead of aborting the process).
    pub(super) fn new(n: usize, what: &str) -> Result<Zeroed<T>, Diagnostic> {
        let bytes = n.checked_mul(std::mem::size_of::<T>());
        let out_of_memory = || {
            Diagnostic::new(
                crate::diag::Code::OutOfMemory,
                format!(
                    "cannot allocate the unit's {what}: {:.1} GB, out of memory",
                    n as f64 * std::mem::size_of::<T>() as f64 / 1e9
                ),
            )
        };
        let bytes = bytes.ok_or_else(out_of_memory)?;
        if bytes == 0 {
            return Ok(Zeroed { ptr: std::ptr::NonNull::dangling(), len: 0 });
        }
        // SAFETY: a fresh private anonymous mapping (no address hint, no
        // file); the result is checked below. Its pages are page-aligned,
        // more than any `ZeroBits` type needs (a `Line`: 64 bytes), and
        // zero, which is a valid `T`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(out_of_memory());
        }
        let ptr = std::ptr::NonNull::new(ptr.cast::<T>()).ok_or_else(out_of_memory)?;
        Ok(Zeroed { ptr, len: n })
    }
}

impl<T: ZeroBits> std::ops::Deref for Zeroed<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialized values (zeros or what steps wrote).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: ZeroBits> std::ops::DerefMut for Zeroed<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` is the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: ZeroBits> Drop for Zeroed<T> {
    fn drop(&mut self) {
        let bytes = self.len * std::mem::size_of::<T>();
        if bytes > 0 {
            // SAFETY: the mapping `new` made, of exactly these bytes, unmapped
            // once. A failure would leave the pages mapped (a leak, not
            // unsoundness), so its result is not needed.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), bytes) };
        }
    }
}

pub(super) struct State {
    pub(super) arena: Zeroed<Line>,
    pub(super) table: Vec<Option<Tensor>>,
    /// The convolutions' scratch: an im2col block, or the direct kernels'
    /// padded source and flipped weights (`Conv::cols_len`).
    pub(super) cols: Zeroed<f32>,
    /// The first maxima that fused max pools record for their gradients
    /// (`ConvPost::first_max`).
    pub(super) first_max: Zeroed<u64>,
}

/// The storage of one run as raw parts, so that the steps the schedule
/// runs at once can each borrow the places they touch: no two of them
/// touch overlapping places unless both only read them (module `schedule`).
#[derive(Clone, Copy)]
pub(super) struct Mem<'a> {
    arena: *mut f32,
    floats: usize,
    table: *mut Option<Tensor>,
    tables: usize,
    cols: *mut f32,
    cols_len: usize,
    first_max: *mut u64,
    first_max_len: usize,
    inputs: &'a [Tensor],
    /// The unit's values fixed at `prepare` (`Ref::Fixed`).
    fixed: &'a [Tensor],
}

// SAFETY: a `Mem` is shared only by the steps of one run, while the
// caller holds the unit's state lock, and those steps touch disjoint
// places or only read the same ones (the schedule's contract).
unsafe impl Send for Mem<'_> {}
unsafe impl Sync for Mem<'_> {}

impl<'a> Mem<'a> {
    pub(super) fn of(st: &'a mut State, inputs: &'a [Tensor], fixed: &'a [Tensor]) -> Mem<'a> {
        Mem {
            arena: st.arena.as_mut_ptr().cast::<f32>(),
            // `Line` is `repr(C)` over `[f32; 16]`.
            floats: st.arena.len() * 16,
            table: st.table.as_mut_ptr(),
            tables: st.table.len(),
            cols: st.cols.as_mut_ptr(),
            cols_len: st.cols.len(),
            first_max: st.first_max.as_mut_ptr(),
            first_max_len: st.first_max.len(),
            inputs,
            fixed,
        }
    }

    /// A pointer to the `len` floats at `off`, if they lie in the arena.
    pub(super) fn floats(self, off: usize, len: usize) -> Option<*mut f32> {
        (off.checked_add(len)? <= self.floats).then(|| self.arena.wrapping_add(off))
    }

    /// A pointer to the `len` bytes at `off`, if they lie in the arena.
    pub(super) fn bytes(self, off: usize, len: usize) -> Option<*mut u8> {
        (off.checked_add(len)? <= self.floats * 4).then(|| self.arena.cast::<u8>().wrapping_add(off))
    }

    /// The floats `off..off + len` (`what` names them in the error).
    ///
    /// # Safety
    /// Nothing else reads or writes them while the slice lives.
    pub(super) unsafe fn out(self, off: usize, len: usize, what: &str) -> Result<&'a mut [f32], Diagnostic> {
        let p = self.floats(off, len).ok_or_else(|| internal(format!("{what} does not fit in the arena")))?;
        // SAFETY: in the arena (checked); exclusive by the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// The first `len` floats of the convolutions' scratch.
    ///
    /// # Safety
    /// As for `out`.
    pub(super) unsafe fn cols(self, len: usize) -> Result<&'a mut [f32], Diagnostic> {
        if len > self.cols_len {
            return Err(internal("convolution scratch too small"));
        }
        // SAFETY: `len` floats of the buffer; exclusive by the contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.cols, len) })
    }

    /// Masks `off..off + len` of the first-maximum buffer.
    ///
    /// # Safety
    /// As for `out`.
    pub(super) unsafe fn first_max(self, off: usize, len: usize) -> Result<&'a mut [u64], Diagnostic> {
        if off + len > self.first_max_len {
            return Err(internal("first-maximum buffer too small"));
        }
        // SAFETY: inside the buffer (checked); exclusive by the contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.first_max.add(off), len) })
    }

    /// Table entry `t`.
    ///
    /// # Safety
    /// Nothing writes it while the reference lives.
    pub(super) unsafe fn table(self, t: usize) -> Result<&'a Option<Tensor>, Diagnostic> {
        if t >= self.tables {
            return Err(internal("a table entry out of range"));
        }
        // SAFETY: in range; not written meanwhile (the caller's contract).
        Ok(unsafe { &*self.table.add(t) })
    }

    /// Sets table entry `t`.
    ///
    /// # Safety
    /// Nothing else reads or writes it meanwhile.
    pub(super) unsafe fn set_table(self, t: usize, v: Tensor) -> Result<(), Diagnostic> {
        if t >= self.tables {
            return Err(internal("a table entry out of range"));
        }
        // SAFETY: in range; exclusive by the caller's contract.
        unsafe { *self.table.add(t) = Some(v) };
        Ok(())
    }

    /// The tensor at `r` (not in the arena).
    pub(super) fn tensor(self, r: Ref) -> Result<&'a Tensor, Diagnostic> {
        match r {
            Ref::Input(p) => self.inputs.get(p).ok_or_else(|| internal(format!("input {p} is unbound"))),
            Ref::Fixed(i) => self.fixed.get(i).ok_or_else(|| internal("fixed value")),
            // SAFETY: a step reads a table entry only when the schedule
            // lets no other step write it at the same time.
            Ref::Table(t) => {
                unsafe { self.table(t)? }.as_ref().ok_or_else(|| internal("a value is read before it is computed"))
            }
            _ => Err(internal("an arena value read as a tensor")),
        }
    }

    /// The `len` elements of `r` as an operand slice of `T`: arena
    /// elements of `T`'s width, or a tensor whose storage holds `T`s
    /// (checked, with the length, by `ptr`).
    ///
    /// # Safety
    /// As for `input`.
    pub(super) unsafe fn elems<T: Stored>(self, r: Ref, len: usize) -> Result<&'a [T], Diagnostic> {
        let holds = match r.in_arena() {
            Some((_, width)) => width == std::mem::size_of::<T>(),
            None => T::stores(self.tensor(r)?.data()),
        };
        if !holds {
            return Err(internal(format!("a {} operand in {r:?}", std::any::type_name::<T>())));
        }
        let p = self.ptr(r, len)? as *const T;
        // SAFETY: `ptr` checked that `r` holds `len` elements, of `T`'s
        // storage (checked above; arena offsets are multiples of their
        // elements' width); no writer by the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// The `len` elements of arena value `r` as a result slice of `T` (of
    /// `T`'s width, checked).
    ///
    /// # Safety
    /// As for `out`.
    pub(super) unsafe fn elems_out<T: Stored>(self, r: Ref, len: usize) -> Result<&'a mut [T], Diagnostic> {
        let Some((at, width)) = r.in_arena().filter(|&(_, width)| width == std::mem::size_of::<T>()) else {
            return Err(internal(format!("a {} result in {r:?}", std::any::type_name::<T>())));
        };
        let p = self.bytes(at, width * len).ok_or_else(|| internal("a kernel result lies outside the arena"))?;
        // SAFETY: in the arena (checked; offsets are multiples of the
        // elements' width); exclusive by the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<T>(), len) })
    }

    /// The `len` floats of `r` as an operand slice (checked by `ptr`).
    ///
    /// # Safety
    /// Nothing writes them while the slice lives (the schedule orders every
    /// writer of a place before or after its readers).
    pub(super) unsafe fn input(self, r: Ref, len: usize) -> Result<&'a [f32], Diagnostic> {
        let p = self.ptr(r, len)? as *const f32;
        // SAFETY: `ptr` checked that `r` holds `len` elements; no writer by
        // the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// A pointer to `len` elements of `r`, as compiled code reads them:
    /// `f32` (a half-precision tensor's exact values too), `i32`, `i64`,
    /// `f64`, `bool` as one byte (0 or 1), or two-byte halves.
    pub(super) fn ptr(self, r: Ref, len: usize) -> Result<*mut f32, Diagnostic> {
        let outside = || internal("a kernel operand lies outside the arena");
        match r.in_arena() {
            Some((at, width)) => self.bytes(at, width * len).map(|p| p.cast::<f32>()).ok_or_else(outside),
            None => {
                let t = self.tensor(r)?;
                match t.data() {
                    // A half-precision tensor keeps its exact `f32` values.
                    Data::F32(a) => start(a.as_slice(), len),
                    Data::I32(a) => start(a.as_slice(), len),
                    Data::F64(a) => start(a.as_slice(), len),
                    Data::I64(a) => start(a.as_slice(), len),
                    Data::Bool(a) => start(a.as_slice(), len),
                }
            }
        }
    }
}

/// An element type native steps read and write where values live: as
/// elements of its width in the arena, and in the tensors whose storage
/// `stores` says holds it. The unsigned words stand for any element of
/// their width, for steps that only move bits (copies).
pub(super) trait Stored: Copy + 'static {
    fn stores(data: &Data) -> bool;
}

macro_rules! stored {
    ($($t:ty: $($variant:ident)|+;)*) => {
        $(impl Stored for $t {
            fn stores(data: &Data) -> bool {
                matches!(data, $(Data::$variant(_))|+)
            }
        })*
    };
}
stored! {
    f32: F32;
    f64: F64;
    i32: I32;
    i64: I64;
    u8: Bool;
    u32: F32 | I32;
    u64: F64 | I64;
}

// Two-byte `f16`/`bf16` elements live only in the arena: a tensor keeps
// their exact `f32`s.
impl Stored for u16 {
    fn stores(_: &Data) -> bool {
        false
    }
}

/// The value at `r` of type `ty` as a tensor: arena elements copied out of
/// their storage, anything else the tensor itself.
pub(super) fn read(mem: Mem, r: Ref, ty: &TensorType) -> Result<Tensor, Diagnostic> {
    let n = ty.numel();
    let outside = || internal("an arena value lies outside the arena");
    // SAFETY (each slice): in the arena (checked); the schedule lets no
    // step write these elements while the reading step runs.
    match r {
        Ref::Arena(off) => {
            let p = mem.floats(off, n).ok_or_else(outside)?;
            Tensor::from_vec(DType::F32, &ty.shape, unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
        }
        Ref::Mask(off) => {
            let p = mem.bytes(off, n).ok_or_else(outside)?;
            let v = unsafe { std::slice::from_raw_parts(p, n) };
            Tensor::from_vec(DType::Bool, &ty.shape, v.iter().map(|&b| b != 0).collect())
        }
        Ref::Half(off) => {
            let p = mem.bytes(off, 2 * n).ok_or_else(outside)?.cast::<u16>();
            let bits = unsafe { std::slice::from_raw_parts(p, n) };
            let widen = half_widening(ty.dtype)?;
            Tensor::from_vec(ty.dtype, &ty.shape, bits.iter().map(|&h| widen(h)).collect())
        }
        Ref::Int(off) => {
            let p = mem.bytes(off, 4 * n).ok_or_else(outside)?.cast::<i32>();
            let v = unsafe { std::slice::from_raw_parts(p, n) };
            Tensor::from_vec(DType::I32, &ty.shape, v.to_vec())
        }
        Ref::Wide(off) if ty.dtype == DType::I64 => {
            let p = mem.bytes(off, 8 * n).ok_or_else(outside)?.cast::<i64>();
            let v = unsafe { std::slice::from_raw_parts(p, n) };
            Tensor::from_vec(DType::I64, &ty.shape, v.to_vec())
        }
        Ref::Wide(off) => {
            let p = mem.bytes(off, 8 * n).ok_or_else(outside)?.cast::<f64>();
            let v = unsafe { std::slice::from_raw_parts(p, n) };
            Tensor::from_vec(DType::F64, &ty.shape, v.to_vec())
        }
        r => mem.tensor(r).cloned(),
    }
}

/// Writes `v` at `r`: into the arena in its storage, or as a table entry.
///
/// # Safety
/// Nothing else reads or writes `r`'s place meanwhile.
pub(super) unsafe fn write(mem: Mem, r: Ref, v: &Tensor) -> Result<(), Diagnostic> {
    let n = v.numel();
    let outside = || internal("a kernel output lies outside the arena");
    // SAFETY (each slice): in the arena (checked); exclusive by the
    // caller's contract.
    match (r, v.data()) {
        (Ref::Arena(off), Data::F32(a)) if v.dtype() == DType::F32 => {
            let dst = unsafe { mem.out(off, n, "a kernel output") }?;
            fill(dst, a, |s| s);
        }
        (Ref::Mask(off), Data::Bool(a)) => {
            let dst = unsafe { std::slice::from_raw_parts_mut(mem.bytes(off, n).ok_or_else(outside)?, n) };
            fill(dst, a, u8::from);
        }
        (Ref::Half(off), Data::F32(a)) => {
            let narrow = half_narrowing(v.dtype())?;
            let p = mem.bytes(off, 2 * n).ok_or_else(outside)?.cast::<u16>();
            let dst = unsafe { std::slice::from_raw_parts_mut(p, n) };
            fill(dst, a, narrow);
        }
        (Ref::Int(off), Data::I32(a)) => {
            let p = mem.bytes(off, 4 * n).ok_or_else(outside)?.cast::<i32>();
            let dst = unsafe { std::slice::from_raw_parts_mut(p, n) };
            fill(dst, a, |s| s);
        }
        (Ref::Wide(off), Data::F64(a)) => {
            let p = mem.bytes(off, 8 * n).ok_or_else(outside)?.cast::<f64>();
            let dst = unsafe { std::slice::from_raw_parts_mut(p, n) };
            fill(dst, a, |s| s);
        }
        (Ref::Wide(off), Data::I64(a)) => {
            let p = mem.bytes(off, 8 * n).ok_or_else(outside)?.cast::<i64>();
            let dst = unsafe { std::slice::from_raw_parts_mut(p, n) };
            fill(dst, a, |s| s);
        }
        (Ref::Table(t), _) => unsafe { mem.set_table(t, v.clone())? },
        (r, _) => return Err(internal(format!("a {} value written to {r:?}", v.dtype()))),
    }
    Ok(())
}

/// Writes `f` of each element of `a`, in logical (row-major) order, to
/// `dst`: a plain loop over the slice when `a` is contiguous in that order
/// (values the host made are), ndarray's strided walk otherwise.
fn fill<S: Copy, D>(dst: &mut [D], a: &ndarray::ArrayD<S>, f: impl Fn(S) -> D) {
    match a.as_slice() {
        Some(src) => dst.iter_mut().zip(src).for_each(|(d, &s)| *d = f(s)),
        None => dst.iter_mut().zip(a.iter()).for_each(|(d, &s)| *d = f(s)),
    }
}

/// The `f32` value of `dtype`'s two-byte bits.
fn half_widening(dtype: DType) -> Result<fn(u16) -> f32, Diagnostic> {
    match dtype {
        DType::F16 => Ok(crate::half::f16_bits_to_f32),
        DType::BF16 => Ok(crate::half::bf16_bits_to_f32),
        d => Err(internal(format!("a {d} value in two-byte storage"))),
    }
}

/// The two-byte bits of the `dtype` nearest an `f32`.
fn half_narrowing(dtype: DType) -> Result<fn(f32) -> u16, Diagnostic> {
    match dtype {
        DType::F16 => Ok(crate::half::f32_to_f16_bits),
        DType::BF16 => Ok(crate::half::f32_to_bf16_bits),
        d => Err(internal(format!("a {d} value in two-byte storage"))),
    }
}

/// `Step::Convert`: `dst = round(src)` to `dtype` over `len` elements,
/// each side in its storage (two-byte `Ref::Half`, or `f32`), by the
/// vector loops of `kernels::convert`.
///
/// # Safety
/// Nothing else writes `src` or touches `dst` meanwhile.
pub(super) unsafe fn convert(mem: Mem, src: Ref, dst: Ref, len: usize, dtype: DType) -> Result<(), Diagnostic> {
    use crate::backend::cpu::kernels::convert::{self, Half};
    let half = match dtype {
        DType::F16 => Half::F16,
        DType::BF16 => Half::Bf16,
        d => return Err(internal(format!("a conversion to {d}"))),
    };
    let outside = || internal("a conversion lies outside the arena");
    let halves = |off: usize| mem.bytes(off, 2 * len).map(|p| p.cast::<u16>()).ok_or_else(outside);
    // SAFETY (each slice): the places hold `len` elements (checked), and
    // the caller's contract makes them exclusive; a rounding in place takes
    // its one buffer mutably, never as two slices.
    match (src, dst) {
        (Ref::Half(from), Ref::Arena(to)) => {
            let (s, d) = (halves(from)?, mem.floats(to, len).ok_or_else(outside)?);
            convert::widen(half, unsafe { std::slice::from_raw_parts(s, len) }, unsafe {
                std::slice::from_raw_parts_mut(d, len)
            });
        }
        (src, Ref::Half(to)) => {
            let (s, d) = (mem.ptr(src, len)? as *const f32, halves(to)?);
            convert::narrow(half, unsafe { std::slice::from_raw_parts(s, len) }, unsafe {
                std::slice::from_raw_parts_mut(d, len)
            });
        }
        (src, Ref::Arena(to)) => {
            let (s, d) = (mem.ptr(src, len)? as *const f32, mem.floats(to, len).ok_or_else(outside)?);
            let out = unsafe { std::slice::from_raw_parts_mut(d, len) };
            match std::ptr::eq(s, d) {
                true => convert::round_in_place(half, out),
                false => convert::round(half, unsafe { std::slice::from_raw_parts(s, len) }, out),
            }
        }
        (_, dst) => return Err(internal(format!("a conversion into {dst:?}"))),
    }
    Ok(())
}

/// The first of at least `len` row-major elements, as compiled code's
/// pointer.
fn start<T>(elements: Option<&[T]>, len: usize) -> Result<*mut f32, Diagnostic> {
    let s = elements.ok_or_else(|| internal("a tensor is not row-major"))?;
    if s.len() < len {
        return Err(internal("a kernel operand is smaller than its type"));
    }
    Ok(s.as_ptr() as *mut f32)
}

#[cfg(test)]
mod tests {
    use super::{Line, Zeroed};

    #[test]
    fn zeroed_storage_reads_zero_and_keeps_what_is_written() {
        let mut lines: Zeroed<Line> = Zeroed::new(1000, "arena").unwrap();
        assert_eq!(lines.as_ptr() as usize % 64, 0, "lines are 64-byte aligned");
        assert!(lines.iter().all(|l| l.0.iter().all(|&x| x.to_bits() == 0)));
        lines[999].0[15] = 2.5;
        assert_eq!(lines[999].0[15], 2.5);
        assert_eq!(Zeroed::<u64>::new(0, "maxima").unwrap().len(), 0);
    }

    #[test]
    fn storage_the_system_cannot_give_is_an_error_not_an_abort() {
        for n in [usize::MAX / 4, 1 << 58] {
            let e = Zeroed::<f32>::new(n, "convolution columns").err().expect("no such memory");
            assert_eq!(e.code, crate::diag::Code::OutOfMemory);
            assert!(e.message.contains("cannot allocate the unit's convolution columns"), "{}", e.message);
        }
    }
}
