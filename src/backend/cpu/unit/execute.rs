//! How a prepared unit's steps run: each step on its native loop, compiled
//! code, `gemm` or the interpreter (`Step::run`), and all of them in
//! schedule order on one thread or by dependency counting on a pool
//! (`JitUnit::execute`, `Run`).
//!
//! Contract: `Step::run` touches only the places `Step::access` lists
//! and computes the same values whatever runs beside it; a threaded run
//! starts a step only when every step it waits for (module `schedule`) is
//! done, continues on the same worker with the most critical step that
//! this one made ready, and reports the failure of the earliest failed
//! step. So a run's results are bit-identical at any thread count.
//!
//! Example: with two threads, the MLP's weight and input gradients of a
//! layer (disjoint places) run at once, each as a `gemm` call.

use super::generic::typed;
use super::mem::{convert, read, write, Mem};
use super::recognize::pooled_shape;
use super::step::{Arg, Code, Int8Weights, Ref, Step};
use super::{internal, JitUnit};
use crate::backend::cpu::kernels::bf16_gemm::{bf16_gemm, Store};
use crate::backend::cpu::kernels::conv::{MaximaGrad, PostOps, SendMasks, SendPtr};
use crate::backend::cpu::kernels::gemm::sgemm;
use crate::backend::cpu::kernels::half_epilogue::{bf16_epilogue, Epilogue, Outputs};
use crate::backend::cpu::kernels::int8_gemm::{quant_gemm, quant_gemm_packed, Input, Int8Matrix, PackedMatrix, Post};
use crate::backend::cpu::kernels::ordered_gemm::ordered_sgemm_all;
use crate::backend::cpu::kernels::pool::first_max_len;
use crate::backend::cpu::threads::{in_ranges, PARALLEL_MIN_ELEMENTS};
use crate::diag::Diagnostic;
use crate::ir::DType;
use crate::tensor::{eval_node, Tensor};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

/// `$body` with `$W` the word (`kernels::window::Word`) of the width of
/// the elements at arena place `$dst`, for steps that only move bits.
macro_rules! words {
    ($dst:expr, $W:ident => $body:expr) => {
        match $dst.in_arena().map(|(_, width)| width) {
            Some(1) => {
                type $W = u8;
                $body
            }
            Some(4) => {
                type $W = u32;
                $body
            }
            Some(8) => {
                type $W = u64;
                $body
            }
            _ => return Err(internal(format!("a copy into {:?}", $dst))),
        }
    };
}

impl JitUnit {
    /// Runs one step, timing it when profiling.
    ///
    /// # Safety
    /// As for `Step::run`.
    unsafe fn timed_step(&self, i: usize, mem: Mem, threads: usize) -> Result<(), Diagnostic> {
        if !self.profiling.load(Ordering::Relaxed) {
            // SAFETY: the caller's contract.
            return unsafe { self.steps[i].run(mem, threads) };
        }
        let started = std::time::Instant::now();
        // SAFETY: the caller's contract.
        let result = unsafe { self.steps[i].run(mem, threads) };
        self.step_nanos[i].fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        result
    }

    /// Runs every step: in schedule order on one thread; with worker
    /// threads, each step as soon as the steps it depends on are done
    /// (module `schedule`).
    pub(super) fn execute(&self, mem: Mem) -> Result<(), Diagnostic> {
        let threads = if self.pool.is_some() { rayon::current_num_threads() } else { 1 };
        // SAFETY (both calls): one step runs at a time.
        let in_order = || (0..self.steps.len()).try_for_each(|i| unsafe { self.timed_step(i, mem, threads) });
        if threads == 1 {
            return in_order();
        }
        if !self.schedule.has_parallel_steps() {
            return crate::backend::cpu::threads::with_workers_awake(in_order);
        }
        let run = Run {
            unit: self,
            mem,
            threads,
            waits: self.schedule.waits.iter().map(|&w| AtomicU32::new(w)).collect(),
            failed: Mutex::new(None),
            stop: AtomicBool::new(false),
        };
        let run = &run;
        crate::backend::cpu::threads::with_workers_awake(|| {
            rayon::scope(|s| {
                let (first, rest) = self.schedule.roots.split_first().map_or((None, &[][..]), |(f, r)| (Some(f), r));
                for &r in rest {
                    s.spawn(move |s| run.from(s, r as usize));
                }
                if let Some(&f) = first {
                    run.from(s, f as usize);
                }
            })
        });
        let failed = match run.failed.lock() {
            Ok(mut failed) => failed.take(),
            Err(_) => return Err(internal("a step panicked")),
        };
        failed.map_or(Ok(()), |(_, d)| Err(d))
    }
}

impl Step {
    /// Runs this step on `threads` workers of the current pool.
    ///
    /// # Safety
    /// No step that runs at the same time writes a place this step touches
    /// or touches a place this step writes (the schedule's contract).
    pub(super) unsafe fn run(&self, mem: Mem, threads: usize) -> Result<(), Diagnostic> {
        match self {
            Step::Jit { code, args, rows, inner, fallible, .. } => {
                let (Code::Ready(f) | Code::Compiled(f, _)) = *code else {
                    return Err(internal("a compiled step runs before its kernel was compiled"));
                };
                let mut ptrs = args.iter().map(|&(r, len)| mem.ptr(r, len)).collect::<Result<Vec<_>, _>>()?;
                if let Some(record) = fallible {
                    ptrs.push(std::ptr::from_ref(&record.faults).cast_mut().cast());
                }
                let (rows, inner) = (*rows, *inner);
                let shared = Pointers(ptrs.as_ptr());
                let threads = if rows * inner >= PARALLEL_MIN_ELEMENTS { threads } else { 1 };
                in_ranges(rows, threads, |lo, hi| {
                    // The whole `Sync` wrapper, not its raw field.
                    let shared = &shared;
                    // SAFETY: every pointer addresses at least the elements
                    // the spec reads or writes (checked by `ptr`), and the
                    // compiled function touches nothing else; disjoint row
                    // ranges write disjoint output elements, and read-only
                    // loads may be shared.
                    unsafe { f(shared.0, lo, hi, inner) }
                });
                if let Some((expr, error)) = fallible.as_ref().and_then(|r| r.faults.take()) {
                    let sites = &fallible.as_ref().map_or(&[][..], |r| &r.sites);
                    return Err(match sites.iter().find(|s| s.0 == expr) {
                        Some(&(_, span, op)) => error.label(span, format!("while computing this `{op}`")),
                        None => error,
                    });
                }
            }
            Step::Gemm { a, b, a_t, b_t, dst, batch, m, k, n, ordered } => {
                let (m, k, n) = (*m, *k, *n);
                let pa = mem.ptr(*a, batch * m * k)?;
                let pb = mem.ptr(*b, batch * k * n)?;
                // SAFETY: the caller's contract.
                let out = unsafe { mem.out(*dst, batch * m * n, "a matmul result")? };
                for bt in 0..*batch {
                    let d = &mut out[bt * m * n..(bt + 1) * m * n];
                    let (ma, mb) =
                        (pa.wrapping_add(bt * m * k) as *const f32, pb.wrapping_add(bt * k * n) as *const f32);
                    let lhs = if *a_t { (ma, 1, m) } else { (ma, k, 1) };
                    if *ordered {
                        // SAFETY: as below; `ordered` only with `b` row-major.
                        unsafe { ordered_sgemm_all(d, lhs, (mb, n), [m, k, n], threads) };
                        continue;
                    }
                    let rhs = if *b_t { (mb, 1, k) } else { (mb, n, 1) };
                    // SAFETY: `pa`/`pb` hold `batch` m×k and k×n
                    // matrices (checked by `ptr`), row-major or, when
                    // folded, stored transposed; `d` is m×n.
                    unsafe { sgemm(d, lhs, rhs, m, k, n, threads) };
                }
            }
            Step::Bf16Gemm { a, b, a_t, b_t, dst, batch, m, k, n, round } => {
                let (m, k, n) = (*m, *k, *n);
                let (pa, pb) = (mem.ptr(*a, batch * m * k)? as *const u16, mem.ptr(*b, batch * k * n)? as *const u16);
                // SAFETY: the caller's contract.
                let out = unsafe { mem.out(*dst, batch * m * n, "a bf16 matmul result")? };
                for bt in 0..*batch {
                    let d = &mut out[bt * m * n..(bt + 1) * m * n];
                    let (ma, mb) = (pa.wrapping_add(bt * m * k), pb.wrapping_add(bt * k * n));
                    let lhs = if *a_t { (ma, 1, m) } else { (ma, k, 1) };
                    let rhs = if *b_t { (mb, 1, k) } else { (mb, n, 1) };
                    // SAFETY: `pa`/`pb` hold `batch` m×k and k×n matrices
                    // of two-byte elements (`ptr` checked the bytes of the
                    // `Ref::Half` places), row-major or, when folded,
                    // stored transposed; `d` is m×n.
                    unsafe { bf16_gemm(d, lhs, rhs, [m, k, n], threads, Store { accumulate: false, round: *round }) };
                }
            }
            Step::QuantGemm { x, patches, w, scale, range, dst, m, k, n, post } => {
                let (m, k, n) = (*m, *k, *n);
                let x_len = patches.map_or(m * k, |(_, shape)| shape.iter().product());
                let (px, ps) = (mem.ptr(*x, x_len)? as *const f32, mem.ptr(*scale, n)? as *const f32);
                let px = Input { values: px, patches: *patches };
                let input_range = match range {
                    Some(r) => {
                        let p = mem.ptr(*r, 2)? as *const f32;
                        // SAFETY: `ptr` checked that the range holds 2 floats.
                        Some(unsafe { [p.read(), p.add(1).read()] })
                    }
                    None => None,
                };
                let bias = match post.bias {
                    // SAFETY: `ptr` checked that the bias holds n floats,
                    // which no step writes while this one runs.
                    Some(b) => Some(unsafe { std::slice::from_raw_parts(mem.ptr(b, n)? as *const f32, n) }),
                    None => None,
                };
                let post = Post { bias, relu: post.relu };
                // SAFETY: the caller's contract.
                let out = unsafe { mem.out(*dst, m * n, "a quantized product")? };
                // SAFETY (each): `ptr` checked that `x` holds m·k floats
                // (the NHWC input's, with patches) and `scale` n; the
                // weights are k × n (the step's shape).
                match w {
                    Int8Weights::Packed(weights) => unsafe {
                        let w = PackedMatrix { weights, scales: ps, input_range };
                        quant_gemm_packed(out, px, w, [m, k, n], post, threads)
                    },
                    Int8Weights::Narrowed(values) => unsafe {
                        let w = Int8Matrix { values: values.as_ptr(), scales: ps, input_range };
                        quant_gemm(out, px, w, [m, k, n], post, threads)
                    },
                    Int8Weights::Tensor(r) => {
                        let values = Int8Weights::narrow(mem.tensor(*r)?)?;
                        let w = Int8Matrix { values: values.as_ptr(), scales: ps, input_range };
                        unsafe { quant_gemm(out, px, w, [m, k, n], post, threads) }
                    }
                }
            }
            Step::Bf16Conv { conv, a, b, dst } => {
                let (na, nb, ny) = conv.sizes();
                let (pa, pb) = (mem.ptr(*a, na)? as *const u16, mem.ptr(*b, nb)? as *const u16);
                // SAFETY: the caller's contract (the step writes the
                // convolution scratch too).
                let out = unsafe { mem.out(*dst, ny, "a bf16 convolution result")? };
                let cols = unsafe { mem.cols(conv.bf16_cols_len())? };
                // SAFETY: `ptr` checked that the two-byte operands hold
                // `sizes()` elements; `out` and `cols` have their lengths.
                unsafe { conv.run_bf16(pa, pb, out, cols, threads) };
            }
            Step::Conv { conv, a, b, dst, post } => {
                let (na, nb, ny) = conv.sizes();
                let pa = mem.ptr(*a, na)?;
                let pb = mem.ptr(*b, nb)?;
                // A post-op operand of `len` values (`ptr` checks the length).
                let operand = |r: Option<Ref>, len: usize| -> Result<Option<&[f32]>, Diagnostic> {
                    let Some(r) = r else { return Ok(None) };
                    // SAFETY: `ptr` checked that `r` holds `len` values.
                    Ok(Some(unsafe { std::slice::from_raw_parts(mem.ptr(r, len)? as *const f32, len) }))
                };
                let bias = operand(post.bias, conv.out_channels())?;
                // SAFETY: the caller's contract (a convolution writes the
                // convolution scratch too).
                let out = unsafe { mem.out(*dst, ny, "a convolution result")? };
                let cols = unsafe { mem.cols(conv.cols_len())? };
                let max_pool = match post.max_pool {
                    // SAFETY: as for `out` (the plan gives the pool its own place).
                    Some(off) => Some(SendPtr(unsafe { mem.out(off, ny / 4, "a pooled result")? }.as_mut_ptr())),
                    None => None,
                };
                let first_max = match post.first_max {
                    // SAFETY: as for `out` (the schedule orders the readers).
                    Some(off) => Some(SendMasks(unsafe { mem.first_max(off, conv.first_max_len())? }.as_mut_ptr())),
                    None => None,
                };
                let keep_where_positive = operand(post.keep_where_positive, ny)?;
                let grad_from_maxima = match post.from_maxima {
                    Some((gy, off)) => {
                        let pooled = pooled_shape(&conv.forward_out_shape());
                        Some(MaximaGrad {
                            pooled: operand(Some(gy), pooled.iter().product())?.unwrap_or_default(),
                            // SAFETY: the schedule orders the masks' writer before.
                            first_max: unsafe { mem.first_max(off, first_max_len(&pooled))? },
                        })
                    }
                    None => None,
                };
                let (relu, pool_only) = (post.relu, post.pool_only);
                let post =
                    PostOps { bias, relu, keep_where_positive, max_pool, first_max, pool_only, grad_from_maxima };
                // SAFETY: `ptr` checked the operand sizes; `out` and
                // `cols` have the sizes `run` needs.
                unsafe { conv.run(pa, pb, out, cols, post, threads) };
            }
            Step::Reduce { dst, shape, from_maxima: Some((gy, off)), .. } => {
                let pooled = pooled_shape(shape);
                let gy = mem.ptr(*gy, pooled.iter().product())? as *const f32;
                // SAFETY: `ptr` checked the size; the caller's contract.
                let gy = unsafe { std::slice::from_raw_parts(gy, pooled.iter().product()) };
                // SAFETY: the caller's contract (the schedule orders the
                // masks' writer before).
                let first_max = unsafe { mem.first_max(*off, first_max_len(&pooled))? };
                // SAFETY: the caller's contract.
                let to = unsafe { mem.out(*dst, shape[3], "a reduction result")? };
                crate::backend::cpu::kernels::pool::max_pool_grad_column_sums(first_max, gy, shape, to)?;
            }
            Step::Reduce { op, src, dst, shape, reduced, from_maxima: None } => {
                let n: usize = shape.iter().product();
                // SAFETY: the caller's contract.
                let from = unsafe { mem.input(*src, n)? };
                let m: usize = shape.iter().zip(reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).product();
                // SAFETY: the caller's contract.
                let to = unsafe { mem.out(*dst, m, "a reduction result")? };
                crate::backend::cpu::kernels::reduce::reduce_on_threads(*op, from, shape, reduced, to, threads)?;
            }
            Step::Pool { unread: true, .. } => {}
            Step::Pool { params, x, grad, dst, xs, ys, first_max, unread: false } => {
                let (nx, ny) = (xs.iter().product::<usize>(), ys.iter().product::<usize>());
                if let (Some(off), Some(gy)) = (first_max, grad) {
                    let gy = mem.ptr(*gy, ny)? as *const f32;
                    // SAFETY: `ptr` checked the size; the caller's contract.
                    let (gy, out) =
                        unsafe { (std::slice::from_raw_parts(gy, ny), mem.out(*dst, nx, "a pooling result")?) };
                    // SAFETY: the schedule orders this read after the
                    // convolution that writes the masks.
                    let first_max = unsafe { mem.first_max(*off, first_max_len(ys))? };
                    return crate::backend::cpu::kernels::pool::max_pool_grad_from_first_max(
                        first_max, gy, xs, out, threads,
                    );
                }
                let px = mem.ptr(*x, nx)? as *const f32;
                let pg = match grad {
                    Some(gy) => Some(mem.ptr(*gy, ny)? as *const f32),
                    None => None,
                };
                let out_len = if grad.is_some() { nx } else { ny };
                // SAFETY: the caller's contract.
                let out = unsafe { mem.out(*dst, out_len, "a pooling result")? };
                // SAFETY: `ptr` checked the sizes; the memory plan never
                // places a kernel's output over its operands.
                let xv = unsafe { std::slice::from_raw_parts(px, nx) };
                match pg {
                    Some(pg) => {
                        let gy = unsafe { std::slice::from_raw_parts(pg, ny) };
                        crate::backend::cpu::kernels::pool::pool_grad(xv, gy, xs, ys, *params, out, threads)?
                    }
                    None => crate::backend::cpu::kernels::pool::pool(xv, xs, ys, *params, out, threads)?,
                }
            }
            Step::Window { srcs, src_lens, dst, window, .. } => words!(*dst, W => {
                let from = srcs
                    .iter()
                    .zip(src_lens)
                    // SAFETY: the caller's contract.
                    .map(|(&r, &n)| unsafe { mem.elems::<W>(r, n) })
                    .collect::<Result<Vec<&[W]>, _>>()?;
                // SAFETY: the caller's contract.
                window.apply(&from, unsafe { mem.elems_out::<W>(*dst, window.len)? });
            }),
            Step::Reshape { src, dst: Ref::Table(t), ty } => {
                let data = crate::tensor::shape_ops::reshape(mem.tensor(*src)?, &ty.shape)?;
                // SAFETY: the caller's contract.
                unsafe { mem.set_table(*t, Tensor::new(ty.dtype, data)?)? };
            }
            Step::Reshape { dst, .. } => return Err(internal(format!("a reshaped tensor goes to {dst:?}"))),
            Step::Gather { params, ids, ids_ty, dst, dims, axis, span } => words!(*dst, W => {
                let ([outer, n, inner], count) = (*dims, ids_ty.numel());
                let idx = indices(mem, *ids, ids_ty, *axis, n, "gather", *span)?;
                // SAFETY: the caller's contract.
                let from = unsafe { mem.elems::<W>(*params, outer * n * inner)? };
                // SAFETY: the caller's contract.
                let to = unsafe { mem.elems_out::<W>(*dst, outer * count * inner)? };
                crate::tensor::index_ops::gather_rows(from, &idx, *dims, to);
            }),
            Step::ScatterAdd { dtype, ids, ids_ty, updates, dst, dims, axis, span } => typed!(*dtype, T => {
                let ([outer, dim, inner], count) = (*dims, ids_ty.numel());
                let idx = indices(mem, *ids, ids_ty, *axis, dim, "scatter_add", *span)?;
                // SAFETY: the caller's contract.
                let from = unsafe { mem.elems::<T>(*updates, outer * count * inner)? };
                // SAFETY: the caller's contract.
                let to = unsafe { mem.elems_out::<T>(*dst, outer * dim * inner)? };
                crate::tensor::index_ops::scatter_add_rows(from, &idx, *dims, to);
                Ok(())
            })?,
            Step::AllReduce { src, dst, ty, with } => {
                use crate::backend::Summand;
                let n = ty.numel();
                words!(*dst, W => {
                    if src != dst {
                        // SAFETY: the caller's contract.
                        let (from, to) = unsafe { (mem.elems::<W>(*src, n)?, mem.elems_out::<W>(*dst, n)?) };
                        to.copy_from_slice(from);
                    }
                });
                let Some(with) = with else { return Ok(()) };
                // SAFETY (each): the caller's contract.
                match (ty.dtype, dst) {
                    (DType::F32, Ref::Arena(_)) => {
                        with.all_reduce_sum(Summand::F32(unsafe { mem.elems_out::<f32>(*dst, n)? }))?
                    }
                    (DType::F64, Ref::Wide(_)) => {
                        with.all_reduce_sum(Summand::F64(unsafe { mem.elems_out::<f64>(*dst, n)? }))?
                    }
                    _ => return Err(internal(format!("an all-reduce of {ty} into {dst:?}"))),
                }
            }
            Step::Transpose { src, dst, perm, .. } => words!(*dst, W => {
                let n = perm.numel();
                // SAFETY (both slices): the caller's contract.
                perm.apply(unsafe { mem.elems::<W>(*src, n)? }, unsafe { mem.elems_out::<W>(*dst, n)? });
            }),
            // SAFETY: the caller's contract.
            Step::Loop { dtype, kernel, srcs, dst } => unsafe { kernel.run(mem, *dtype, srcs, *dst)? },
            // SAFETY: the caller's contract.
            Step::Convert { src, dst, len, dtype } => unsafe { convert(mem, *src, *dst, *len, *dtype)? },
            Step::Bf16Epilogue { src, rows, n, bias, relu, keep_where, dst, positive, unrounded } => {
                let (n, len) = (*n, rows * n);
                // SAFETY (each slice): `elems` and `elems_out` check the
                // places' widths and lengths; the caller's contract makes
                // the written ones this step's only.
                unsafe {
                    let sums = mem.elems::<f32>(Ref::Arena(*src), len)?;
                    let bias = bias.map(|b| mem.elems::<f32>(b, n)).transpose()?;
                    let keep_where = keep_where.map(|k| mem.elems::<u8>(k, len)).transpose()?;
                    let out = dst.map(|d| mem.elems_out::<u16>(d, len)).transpose()?;
                    let positive = positive.map(|p| mem.elems_out::<u8>(p, len)).transpose()?;
                    let unrounded = unrounded.map(|u| mem.elems_out::<f32>(u, len)).transpose()?;
                    let post = Epilogue { bias, relu: *relu, keep_where };
                    bf16_epilogue(sums, n, post, Outputs { out, positive, unrounded }, threads);
                }
            }
            // SAFETY: the caller's contract.
            Step::Scan(scan) => unsafe { scan.run(mem)? },
            Step::Interp(nodes) => {
                let mut local: Vec<Tensor> = Vec::with_capacity(nodes.len());
                for node in nodes {
                    let owned: Vec<Option<Tensor>> = node
                        .args
                        .iter()
                        .zip(&node.arg_tys)
                        .map(|(a, ty)| match a {
                            Arg::Ref(r) if r.in_arena().is_some() => Ok(Some(read(mem, *r, ty)?)),
                            _ => Ok(None),
                        })
                        .collect::<Result<_, Diagnostic>>()?;
                    let args: Vec<&Tensor> = node
                        .args
                        .iter()
                        .zip(&owned)
                        .map(|(a, o)| match (a, o) {
                            (_, Some(t)) => Ok(t),
                            (Arg::Local(l), None) => local.get(*l).ok_or_else(|| internal("local operand")),
                            (Arg::Ref(r), None) => mem.tensor(*r),
                        })
                        .collect::<Result<_, _>>()?;
                    let v = eval_node(&node.op, &args, &node.ty)
                        .map_err(|d| d.label(node.span, format!("while computing this `{}`", node.op.name())))?;
                    match node.out {
                        Some(r @ (Ref::Input(_) | Ref::Fixed(_))) => {
                            return Err(internal(format!("an interpreted kernel writes {r:?}")))
                        }
                        // SAFETY: the caller's contract.
                        Some(r) => unsafe { write(mem, r, &v)? },
                        None => {}
                    }
                    local.push(v);
                }
            }
        }
        Ok(())
    }
}

/// One threaded run of a unit's steps: each step runs once the steps it
/// waits for are done (`waits` counts down), on whichever worker finishes
/// the last of them.
struct Run<'r> {
    unit: &'r JitUnit,
    mem: Mem<'r>,
    threads: usize,
    waits: Vec<AtomicU32>,
    /// The failure of the earliest failed step (by index), if any.
    failed: Mutex<Option<(usize, Diagnostic)>>,
    /// Set on a failure: no further step starts.
    stop: AtomicBool,
}

impl<'r> Run<'r> {
    /// Runs step `i`, then every step it made ready: the most critical one
    /// (the schedule's highest rank) on this thread, the others spawned
    /// for idle workers to take.
    fn from<'s>(&'s self, s: &rayon::Scope<'s>, mut i: usize)
    where
        'r: 's,
    {
        let sched = &self.unit.schedule;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            // SAFETY: every step that touches a place step `i` writes, or
            // writes a place it reads, is ordered before or after it by the
            // schedule; those before have counted `waits[i]` down to zero.
            if let Err(d) = unsafe { self.unit.timed_step(i, self.mem, self.threads) } {
                self.stop.store(true, Ordering::Relaxed);
                if let Ok(mut failed) = self.failed.lock() {
                    if failed.as_ref().is_none_or(|(j, _)| i < *j) {
                        *failed = Some((i, d));
                    }
                }
                return;
            }
            let mut next = None;
            for &j in &sched.then[i] {
                // Release publishes this step's writes; acquire (by the
                // step that counts to zero) sees every predecessor's.
                if self.waits[j as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                    match next {
                        None => next = Some(j as usize),
                        Some(_) => s.spawn(move |s| self.from(s, j as usize)),
                    }
                }
            }
            match next {
                Some(j) => i = j,
                None => return,
            }
        }
    }
}

/// The argument pointers of a compiled kernel, shared by the threads that
/// run its rows.
struct Pointers(*const *mut f32);

// SAFETY: the pointers are only dereferenced by compiled kernels on
// disjoint row ranges while the owning `execute` call waits for them.
unsafe impl Sync for Pointers {}

/// The integer indices of a gather or scatter at `ids`, each checked to lie
/// in `[0, n)` (an error at `span` otherwise, as the interpreter reports).
fn indices(
    mem: Mem,
    ids: Ref,
    ids_ty: &crate::ir::TensorType,
    axis: usize,
    n: usize,
    op: &str,
    span: crate::diag::Span,
) -> Result<Vec<i64>, Diagnostic> {
    let t = &read(mem, ids, ids_ty)?;
    let idx = t.to_i64_vec().ok_or_else(|| internal(format!("{op} indices of dtype {}", t.dtype())))?;
    crate::tensor::index_ops::check_indices(&idx, t, axis, n, op)
        .map_err(|d| d.label(span, format!("while computing this `{op}`")))?;
    Ok(idx)
}
