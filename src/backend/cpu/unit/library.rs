//! A prepared unit written as a function of an ahead-of-time library
//! (module `backend::cpu::library`): its steps as straight-line code that
//! calls the unit's compiled loops and the runtime's native kernels with
//! the places the memory plan gave them. It returns 0, or 1 when a runtime
//! call reports that this CPU cannot run a step as the building machine
//! did (then the outputs are not written).
//!
//! Contract: [`JitUnit::write_function`] emits `int NAME(inputs…,
//! outputs…, arena)` into the library, the steps in the order `execute`
//! runs them on one thread, each with the arguments `Step::run` would pass:
//! a compiled step's pointer table built on the stack, a product of the
//! fixed-order kernel, a reduction or convolution by the runtime; then each
//! result copied to the caller's output. The unit's constants are the
//! object's read-only data. It refuses, naming the step (E0345), what has
//! no such code: a step on the interpreter, a product through the `gemm`
//! crate, a native loop of a training step, a carried value. It returns
//! the bytes of the arena a call needs: the plan's arena with its scratch,
//! then the convolutions' columns.
//!
//! Example: an MLP's `predict` at batch 1 is a call of `tfc_rt_sgemm`, a
//! call of the compiled `add, relu` step over a table of two pointers, and
//! so on, then one 40-byte copy of the logits.

use super::step::{Code, Ref, Step};
use super::JitUnit;
use crate::backend::cpu::kernels::conv::ConvKind;
use crate::backend::cpu::library::runtime::REDUCE_OPS;
use crate::backend::cpu::library::{Function, Library, ALIGN};
use crate::diag::{Code as ErrorCode, Diagnostic};
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, StackSlotData, StackSlotKind, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{Linkage, Module};

/// What a library cannot run (E0345), naming the step.
fn refused(unit: &JitUnit, i: usize, why: &str) -> Diagnostic {
    Diagnostic::new(
        ErrorCode::LibraryExport,
        format!("`{}` cannot go into a library: its step `{}` {why}", unit.name, unit.labels[i]),
    )
    .help("keep the exported function to inference: products, convolutions, pools, reductions, elementwise math")
}

fn failed(what: &str, e: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(ErrorCode::LibraryExport, format!("cannot write the library: {what}: {e}"))
}

/// The words `sizes` as the runtime reads them (native-endian `usize`s).
fn words(sizes: &[usize]) -> Vec<u8> {
    sizes.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// A constant's elements as the native steps read them in memory.
fn stored_bytes(t: &crate::tensor::Tensor) -> Vec<u8> {
    use crate::tensor::Data;
    match t.data() {
        Data::F32(a) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Data::I32(a) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Data::F64(a) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Data::I64(a) => a.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Data::Bool(a) => a.iter().map(|&v| u8::from(v)).collect(),
    }
}

impl JitUnit {
    /// Writes this unit into `lib` as `f` (see the module docs); returns
    /// the arena bytes a call needs.
    pub(in crate::backend::cpu) fn write_function(&self, lib: &mut Library, f: &Function) -> Result<usize, Diagnostic> {
        if !self.residents.is_empty() {
            return Err(Diagnostic::new(
                ErrorCode::LibraryExport,
                format!("`{}` carries values from call to call, which a library function cannot", self.name),
            ));
        }
        let [floats, cols, _] = self.sizes;
        let cols_at = (floats * 4).next_multiple_of(ALIGN);
        let arena_bytes = (cols_at + cols * 4).max(1);
        let fixed: Vec<usize> = self.fixed.iter().map(|t| lib.constant(&stored_bytes(t))).collect();
        // The compiled loops, one function each.
        let mut kernels = Vec::with_capacity(self.specs.len());
        for (i, spec) in self.specs.iter().enumerate() {
            let mut func = cranelift_codegen::ir::Function::new();
            crate::backend::cpu::codegen::build_kernel(
                &mut lib.module,
                &mut func,
                &mut lib.fctx,
                &lib.libm,
                lib.fma,
                spec,
            );
            let name = format!("{}__k{i}", f.name);
            let id =
                lib.module.declare_function(&name, Linkage::Local, &func.signature).map_err(|e| failed(&name, e))?;
            let mut ctx = cranelift_codegen::Context::for_function(func);
            lib.module.define_function(id, &mut ctx).map_err(|e| failed(&name, e))?;
            kernels.push(id);
        }
        // Every step's arguments that live in the data, before the code.
        let mut words_at = Vec::with_capacity(self.steps.len());
        for (i, step) in self.steps.iter().enumerate() {
            words_at.push(match step {
                Step::Reduce { shape, .. } => Some(lib.constant(&words(shape))),
                Step::Conv { conv, .. } => Some(lib.constant(&words(&conv.words()))),
                _ => None,
            });
            // (Every other step that records or reads maxima is refused below.)
            if matches!(step, Step::Conv { post, .. } if post.first_max.is_some() || post.from_maxima.is_some()) {
                return Err(refused(self, i, "records or reads a max pool's maxima (a gradient's)"));
            }
        }
        // The function itself.
        let ptr = lib.module.target_config().pointer_type();
        let mut func = cranelift_codegen::ir::Function::new();
        let params = f.params.len() + f.results.len() + 1;
        func.signature.params.extend((0..params).map(|_| AbiParam::new(ptr)));
        func.signature.returns.push(AbiParam::new(types::I32));
        let id =
            lib.module.declare_function(&f.name, Linkage::Export, &func.signature).map_err(|e| failed(&f.name, e))?;
        let runtime = lib.runtime.map(|r| lib.module.declare_func_in_func(r, &mut func));
        let kernel_refs: Vec<_> = kernels.iter().map(|&k| lib.module.declare_func_in_func(k, &mut func)).collect();
        let data_gv = lib.module.declare_data_in_func(lib.data_id, &mut func);
        let config = lib.module.target_config();
        let mut b = FunctionBuilder::new(&mut func, &mut lib.fctx);
        // A runtime call that reports a failure (a convolution this CPU's
        // kernels cannot run as the building machine's did) returns 1.
        let failure = b.create_block();
        let checked = |b: &mut FunctionBuilder, call: cranelift_codegen::ir::Inst| {
            let status = b.inst_results(call)[0];
            let next = b.create_block();
            b.ins().brif(status, failure, &[], next, &[]);
            b.switch_to_block(next);
        };
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let args: Vec<Value> = b.block_params(entry).to_vec();
        let (inputs, outputs, arena) = (&args[..f.params.len()], &args[f.params.len()..params - 1], args[params - 1]);
        let data_base = b.ins().symbol_value(ptr, data_gv);
        let place = |b: &mut FunctionBuilder, r: Ref| -> Option<Value> {
            match r {
                Ref::Input(i) => inputs.get(i).copied(),
                Ref::Fixed(i) => Some(b.ins().iadd_imm_u(data_base, fixed[i] as i64)),
                Ref::Table(_) => None,
                r => r.in_arena().map(|(at, _)| b.ins().iadd_imm_u(arena, at as i64)),
            }
        };
        let imm = |b: &mut FunctionBuilder, v: usize| b.ins().iconst(ptr, v as i64);
        for (i, step) in self.steps.iter().enumerate() {
            let missing = || refused(self, i, "reads a value computed on the interpreter");
            match step {
                Step::Jit { code: Code::Compiled(_, spec), args, rows, inner, fallible: None, .. } => {
                    let slot = b.create_sized_stack_slot(StackSlotData::new(
                        StackSlotKind::ExplicitSlot,
                        (8 * args.len().max(1)) as u32,
                        3,
                    ));
                    for (j, &(r, _)) in args.iter().enumerate() {
                        let p = place(&mut b, r).ok_or_else(missing)?;
                        b.ins().stack_store(ptr, p, slot, (8 * j) as i32);
                    }
                    let table = b.ins().stack_addr(ptr, slot, 0);
                    let (lo, hi, inner) = (imm(&mut b, 0), imm(&mut b, *rows), imm(&mut b, *inner));
                    b.ins().call(kernel_refs[*spec], &[table, lo, hi, inner]);
                }
                Step::Jit { fallible: Some(_), .. } => {
                    return Err(refused(self, i, "can fail at run time (integer `/` or `^`)"));
                }
                Step::Jit { .. } => return Err(refused(self, i, "is a training step's native loop")),
                Step::Gemm { a, b: rhs, a_t, dst, batch, m, k, n, ordered: true, .. } => {
                    let (pa, pb) = (place(&mut b, *a).ok_or_else(missing)?, place(&mut b, *rhs).ok_or_else(missing)?);
                    let (m, k, n) = (*m, *k, *n);
                    let (a_rs, a_cs) = if *a_t { (1, m) } else { (k, 1) };
                    for bt in 0..*batch {
                        let d = b.ins().iadd_imm_u(arena, (4 * (dst + bt * m * n)) as i64);
                        let ma = b.ins().iadd_imm_u(pa, (4 * bt * m * k) as i64);
                        let mb = b.ins().iadd_imm_u(pb, (4 * bt * k * n) as i64);
                        let sizes = [a_rs, a_cs, n, m, k, n].map(|v| imm(&mut b, v));
                        let [a_rs, a_cs, b_rs, m, k, n] = sizes;
                        b.ins().call(runtime[0], &[d, ma, a_rs, a_cs, mb, b_rs, m, k, n]);
                    }
                }
                Step::Gemm { .. } => {
                    return Err(refused(self, i, "runs on the `gemm` crate (a transposed right operand)"))
                }
                Step::Reduce { op, src, dst, shape, reduced, from_maxima: None } => {
                    let code = REDUCE_OPS.iter().position(|o| o == op).ok_or_else(|| refused(self, i, "is unknown"))?;
                    if shape.len() > 64 {
                        return Err(refused(self, i, "has more than 64 dims"));
                    }
                    let bits = reduced.iter().enumerate().fold(0u64, |acc, (d, &r)| acc | (u64::from(r) << d));
                    let code = b.ins().iconst(types::I32, code as i64);
                    let from = place(&mut b, *src).ok_or_else(missing)?;
                    let to = b.ins().iadd_imm_u(arena, (4 * dst) as i64);
                    let shape_at = b.ins().iadd_imm_u(data_base, words_at[i].unwrap_or_default() as i64);
                    let rank = imm(&mut b, shape.len());
                    let bits = b.ins().iconst(types::I64, bits as i64);
                    let call = b.ins().call(runtime[1], &[code, from, to, shape_at, rank, bits]);
                    checked(&mut b, call);
                }
                Step::Conv { conv, a, b: w, dst, post }
                    if conv.kind == ConvKind::Forward && conv.is_direct() && post.keep_where_positive.is_none() =>
                {
                    let (x, w) = (place(&mut b, *a).ok_or_else(missing)?, place(&mut b, *w).ok_or_else(missing)?);
                    let geometry = b.ins().iadd_imm_u(data_base, words_at[i].unwrap_or_default() as i64);
                    let to = b.ins().iadd_imm_u(arena, (4 * dst) as i64);
                    let scratch = b.ins().iadd_imm_u(arena, cols_at as i64);
                    let bias = match post.bias {
                        Some(r) => place(&mut b, r).ok_or_else(missing)?,
                        None => imm(&mut b, 0),
                    };
                    let pooled = match post.max_pool {
                        Some(off) => b.ins().iadd_imm_u(arena, (4 * off) as i64),
                        None => imm(&mut b, 0),
                    };
                    let relu = b.ins().iconst(types::I32, i64::from(post.relu));
                    let pool_only = b.ins().iconst(types::I32, i64::from(post.pool_only));
                    let call = b.ins().call(runtime[2], &[geometry, x, w, to, scratch, bias, relu, pooled, pool_only]);
                    checked(&mut b, call);
                }
                Step::Conv { .. } => {
                    return Err(refused(self, i, "is a convolution the direct kernels do not run here"));
                }
                Step::Transpose { src, dst, perm, .. } => {
                    let four = dst.in_arena().is_some_and(|(_, width)| width == 4);
                    let Some((batch, rows, cols)) = perm.as_matrices().filter(|_| four) else {
                        return Err(refused(self, i, "moves axes other than the last two"));
                    };
                    let from = place(&mut b, *src).ok_or_else(missing)?;
                    let to = place(&mut b, *dst).ok_or_else(missing)?;
                    let sizes = [batch, rows, cols].map(|v| imm(&mut b, v));
                    b.ins().call(runtime[3], &[from, to, sizes[0], sizes[1], sizes[2]]);
                }
                Step::Pool { unread: true, .. } => {}
                Step::Interp(_) => return Err(refused(self, i, "runs on the interpreter")),
                Step::QuantGemm { .. } => {
                    let why = "is an int8 product: quantized models run in process only (tfc run, bench, repl)";
                    return Err(refused(self, i, why).help("export the f32 model to the library"));
                }
                _ => return Err(refused(self, i, "has no library code yet")),
            }
        }
        for ((r, ty), &out) in self.outputs.iter().zip(outputs) {
            let from = place(&mut b, *r).ok_or_else(|| {
                Diagnostic::new(
                    ErrorCode::LibraryExport,
                    format!("a result of `{}` is computed on the interpreter", self.name),
                )
            })?;
            let bytes = imm(&mut b, ty.numel() * ty.dtype.size_bytes());
            b.call_memcpy(config, out, from, bytes);
        }
        let ok = b.ins().iconst(types::I32, 0);
        b.ins().return_(&[ok]);
        b.switch_to_block(failure);
        let one = b.ins().iconst(types::I32, 1);
        b.ins().return_(&[one]);
        b.seal_all_blocks();
        b.finalize(config);
        let mut ctx = cranelift_codegen::Context::for_function(func);
        lib.module.define_function(id, &mut ctx).map_err(|e| failed(&f.name, e))?;
        Ok(arena_bytes)
    }
}
