//! Cranelift code generation for [`Spec`]s: one native function per
//! elementwise loop nest, cached by the spec's signature.
//!
//! Contract: a compiled function has the C signature `fn(ptrs: *const *mut
//! f32, first_row: usize, end_row: usize, inner: usize)`; `ptrs` holds one pointer per load
//! (in `Spec::loads` order), then one per output, then, for a spec with
//! ops that can fail (`Spec::fallible`), one to the step's
//! `fault::Faults` record; `f32` and `i32` values take four bytes an
//! element, `f64` and `i64` values eight, halves two and `bool` values one
//! byte (0 or 1). It computes rows
//! `first_row..end_row` of the outer dims (all of them: `0..spec.rows()`;
//! disjoint row ranges may run on different threads, and give the same
//! values as one call) of `inner` elements each (`spec.inner`), for every
//! flat index exactly the expressions of
//! the spec, with the reference interpreter's semantics except that `exp`,
//! `log`, `tanh` and `sigmoid` are inline polynomials (see [`super::poly`];
//! relative error below 2e-7 on normal results) instead of libm calls.
//! All loads of one index happen before its stores, so an output may share
//! its buffer with a same-sized contiguous input (the memory plan's
//! in-place reuse).
//!
//! Code shape: a row loop over the outer dims computes each load's base
//! offset (and loads each `Splat` value once); the inner loop runs an `F32X4`
//! body while four elements remain and a scalar tail after it. Every loop
//! header branches *to the exit* when the loop is done (`brif i >= n, exit,
//! body`), the form in which Cranelift keeps loop-invariant values hoisted.
//!
//! Where the machine has AVX-512, `Compiler` compiles the kernels module
//! [`wide`] accepts to its own 512-bit code instead (same signature, same
//! operations in the same order, so the same bits); the others, and every
//! kernel of an ahead-of-time library (`build_kernel`), are Cranelift's.
//!
//! Example: `Compiler::new()?.compile(&spec)?` returns a function pointer;
//! `Compiler::clif(&spec)` the Cranelift IR text (`tfc build --emit clif`).

pub mod clif;
pub mod fault;
mod half;
mod int;
pub mod poly;
pub mod wide;

use crate::ir::spec::{Expr, Inner, Kind, Spec, INT_FALLIBLE};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, Block, Endianness, InstBuilder, MemFlagsData, UserFuncName, Value};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use poly::{Emitter, Libm, Support};
use std::collections::HashMap;

/// A compiled kernel: `(pointers, first row, end row, inner extent)`.
pub type KernelFn = unsafe extern "C" fn(*const *mut f32, usize, usize, usize);

/// The JIT: one Cranelift module and the functions compiled so far.
pub struct Compiler {
    module: JITModule,
    /// The imported `poly::Libm` functions, in `Libm::ALL` order.
    calls: Vec<cranelift_module::FuncId>,
    /// Whether the host has fused multiply-add.
    fma: bool,
    ctx: Context,
    fctx: FunctionBuilderContext,
    cache: HashMap<String, KernelFn>,
    /// Whether kernels that module `wide` accepts run as its code (where
    /// the machine has AVX-512); off: every kernel is Cranelift's.
    use_wide: bool,
}

fn isa_error(e: impl std::fmt::Display) -> String {
    format!("cannot set up the native code generator: {e}")
}

/// The host's code generator: optimizing for speed, for this machine's
/// instruction set; `pic` for code a C program links (an object file),
/// else for code that runs where it is made (the JIT).
pub fn host_isa(pic: bool) -> Result<cranelift_codegen::isa::OwnedTargetIsa, String> {
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(isa_error)?;
    flags.set("use_colocated_libcalls", "false").map_err(isa_error)?;
    flags.set("is_pic", if pic { "true" } else { "false" }).map_err(isa_error)?;
    // Cranelift checks every function it is given; the test builds
    // (debug assertions) keep that, release builds skip it (about a
    // tenth of code generation).
    flags.set("enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" }).map_err(isa_error)?;
    cranelift_native::builder().map_err(isa_error)?.finish(settings::Flags::new(flags)).map_err(isa_error)
}

/// Whether `isa` has fused multiply-add.
pub fn has_fma(isa: &dyn cranelift_codegen::isa::TargetIsa) -> bool {
    isa.isa_flags().iter().any(|f| f.name == "has_fma" && f.as_bool() == Some(true))
}

/// Declares the `poly::Libm` functions kernels call, as imports of
/// `module`, in `Libm::ALL` order.
pub fn declare_libm(module: &mut impl Module) -> Result<Vec<cranelift_module::FuncId>, String> {
    let mut calls = Vec::with_capacity(Libm::ALL.len());
    for f in Libm::ALL {
        let (name, _, params, result) = f.symbol();
        let mut sig = module.make_signature();
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        sig.returns.push(AbiParam::new(result));
        calls.push(module.declare_function(name, Linkage::Import, &sig).map_err(isa_error)?);
    }
    Ok(calls)
}

/// Builds the function of `spec` (`KernelFn`'s signature) into `func` of
/// `module`, whose `calls` are `declare_libm`'s.
pub fn build_kernel(
    module: &mut impl Module,
    func: &mut cranelift_codegen::ir::Function,
    fctx: &mut FunctionBuilderContext,
    calls: &[cranelift_module::FuncId],
    fma: bool,
    spec: &Spec,
) {
    let target = module.target_config();
    let ptr = target.pointer_type();
    for _ in 0..4 {
        func.signature.params.push(AbiParam::new(ptr));
    }
    let mut refs = calls.iter().map(|&id| module.declare_func_in_func(id, func));
    let calls = std::array::from_fn(|_| refs.next().expect("one id per Libm function"));
    let support = Support { calls, fma };
    let mut b = FunctionBuilder::new(func, fctx);
    emit(&mut b, spec, ptr, support);
    b.seal_all_blocks();
    b.finalize(target);
}

impl Compiler {
    pub fn new() -> Result<Compiler, String> {
        let isa = host_isa(false)?;
        let fma = has_fma(&*isa);
        let mut jit = JITBuilder::with_isa(isa, default_libcall_names());
        for f in Libm::ALL {
            let (name, address, _, _) = f.symbol();
            jit.symbol(name, address);
        }
        let mut module = JITModule::new(jit);
        let calls = declare_libm(&mut module)?;
        let ctx = module.make_context();
        Ok(Compiler {
            module,
            calls,
            fma,
            ctx,
            fctx: FunctionBuilderContext::new(),
            cache: HashMap::new(),
            use_wide: true,
        })
    }

    /// This compiler with every kernel left to Cranelift (tests compare
    /// module `wide`'s code with it).
    pub fn cranelift_only(mut self) -> Compiler {
        self.use_wide = false;
        self
    }

    /// How many distinct kernels were compiled.
    pub fn compiled(&self) -> usize {
        self.cache.len()
    }

    /// The native function of `spec`, compiled on first use.
    pub fn compile(&mut self, spec: &Spec) -> Result<KernelFn, String> {
        Ok(self.compile_all(std::slice::from_ref(spec))?[0])
    }

    /// Whether `spec` runs as AVX-512 code from module `wide` on this
    /// machine (else as Cranelift's).
    pub fn runs_wide(&self, spec: &Spec) -> bool {
        self.use_wide && self.fma && wide::available() && wide::accepts(spec)
    }

    /// The native functions of `specs`, in order, each compiled on first
    /// use: the new ones (one per distinct signature) are built here:
    /// those module `wide` accepts as its AVX-512 code where the machine
    /// has it, the others turned into machine code by Cranelift side by
    /// side on the machine's cores (Cranelift compiles each function on
    /// its own; the code does not depend on which thread made it) and
    /// linked together.
    pub fn compile_all(&mut self, specs: &[Spec]) -> Result<Vec<KernelFn>, String> {
        let keys: Vec<String> = specs.iter().map(Spec::signature).collect();
        let mut new: Vec<(usize, cranelift_module::FuncId, cranelift_codegen::ir::Function)> = Vec::new();
        let mut building: std::collections::HashSet<&str> = std::collections::HashSet::new();
        // Specs module `wide` compiles: their index, and their code.
        let (mut wide_at, mut wide_codes): (Vec<usize>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
        for (i, spec) in specs.iter().enumerate() {
            if self.cache.contains_key(&keys[i]) || !building.insert(&keys[i]) {
                continue;
            }
            if self.runs_wide(spec) {
                wide_at.push(i);
                wide_codes.push(wide::assemble(spec)?);
                continue;
            }
            let name = format!("k{}", self.cache.len() + new.len());
            self.module.clear_context(&mut self.ctx);
            self.build(spec);
            let sig = self.ctx.func.signature.clone();
            let id = self
                .module
                .declare_function(&name, Linkage::Local, &sig)
                .map_err(|e| format!("cannot declare kernel {name}: {e}"))?;
            self.ctx.func.name = UserFuncName::user(0, id.as_u32());
            new.push((i, id, std::mem::replace(&mut self.ctx.func, cranelift_codegen::ir::Function::new())));
        }
        self.module.clear_context(&mut self.ctx);
        let isa = self.module.isa();
        let machine_code = |(i, id, func): (usize, cranelift_module::FuncId, cranelift_codegen::ir::Function)| {
            let mut ctx = Context::for_function(func);
            ctx.compile(isa, &mut cranelift_codegen::control::ControlPlane::default())
                .map_err(|e| format!("cannot compile kernel k{}: {:?}", id.as_u32(), e.inner))?;
            let code = ctx.compiled_code().ok_or("Cranelift kept no code")?;
            let relocs: Vec<cranelift_module::ModuleReloc> = code
                .buffer
                .relocs()
                .iter()
                .map(|r| cranelift_module::ModuleReloc::from_mach_reloc(r, &ctx.func, id))
                .collect();
            let (bytes, align) = (code.code_buffer().to_vec(), u64::from(code.buffer.alignment));
            Ok::<_, String>((i, id, bytes, align, relocs))
        };
        use rayon::prelude::*;
        for (i, ptr) in wide_at.iter().zip(wide::place(&wide_codes)?) {
            // SAFETY: `wide::assemble` gave the code exactly `KernelFn`'s
            // signature (System V, four pointer-sized arguments, no results).
            let f: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(ptr) };
            self.cache.insert(keys[*i].clone(), f);
        }
        let compiled: Vec<_> = match new.len() {
            0 | 1 => new.into_iter().map(machine_code).collect::<Result<_, _>>()?,
            _ => new.into_par_iter().map(machine_code).collect::<Result<_, _>>()?,
        };
        for (_, id, bytes, align, relocs) in &compiled {
            self.module
                .define_function_bytes(*id, *align, bytes, relocs)
                .map_err(|e| format!("cannot compile kernel k{}: {e}", id.as_u32()))?;
        }
        self.module.finalize_definitions().map_err(|e| format!("cannot link the kernels: {e}"))?;
        for (i, id, ..) in compiled {
            let ptr = self.module.get_finalized_function(id);
            // SAFETY: `build` gave the function exactly `KernelFn`'s
            // signature (four pointer-sized arguments, no results).
            let f: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(ptr) };
            self.cache.insert(keys[i].clone(), f);
        }
        Ok(keys.iter().map(|k| self.cache[k]).collect())
    }

    /// The Cranelift IR of `spec`'s function, as compiled (before lowering).
    pub fn clif(&mut self, spec: &Spec) -> String {
        self.module.clear_context(&mut self.ctx);
        self.build(spec);
        let text = self.ctx.func.display().to_string();
        self.module.clear_context(&mut self.ctx);
        text
    }

    /// The machine code of `spec`'s function as Cranelift prints it after
    /// register allocation (its VCode listing: x64 instructions with their
    /// registers), without linking it.
    /// A kernel that runs as module `wide`'s code lists that code instead.
    pub fn asm(&mut self, spec: &Spec) -> Result<String, String> {
        if self.runs_wide(spec) {
            return wide::listing(spec);
        }
        self.module.clear_context(&mut self.ctx);
        self.build(spec);
        self.ctx.set_disasm(true);
        let isa = self.module.isa();
        let text = match self.ctx.compile(isa, &mut cranelift_codegen::control::ControlPlane::default()) {
            Ok(code) => code.vcode.clone().unwrap_or_default(),
            Err(e) => return Err(format!("cannot compile the kernel: {:?}", e.inner)),
        };
        self.module.clear_context(&mut self.ctx);
        Ok(text)
    }

    /// Builds the function of `spec` into `self.ctx.func`.
    fn build(&mut self, spec: &Spec) {
        build_kernel(&mut self.module, &mut self.ctx.func, &mut self.fctx, &self.calls, self.fma, spec);
    }
}

/// One loop: its header (taking the counter) and body blocks.
struct Loop {
    header: Block,
    body: Block,
}

fn new_loop(b: &mut FunctionBuilder, ptr: types::Type) -> Loop {
    let header = b.create_block();
    b.append_block_param(header, ptr);
    Loop { header, body: b.create_block() }
}

fn emit(b: &mut FunctionBuilder, spec: &Spec, ptr: types::Type, support: Support) {
    let flags = MemFlagsData::new().with_notrap();
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let (args, first_row, end_row, inner) = {
        let p = b.block_params(entry);
        (p[0], p[1], p[2], p[3])
    };
    let n_loads = spec.loads.len();
    let bases: Vec<Value> = (0..n_loads + spec.outputs.len())
        .map(|i| b.ins().load(ptr, MemFlagsData::trusted(), args, (i * 8) as i32))
        .collect();
    let at_faults = (8 * (n_loads + spec.outputs.len())) as i32;
    let faults = (!spec.fallible.is_empty()).then(|| b.ins().load(ptr, MemFlagsData::trusted(), args, at_faults));
    let exit = b.create_block();
    let row = new_loop(b, ptr);
    let zero = b.ins().iconst(ptr, 0);
    b.ins().jump(row.header, &[first_row.into()]);

    // Row header: `brif r >= end_row, exit, body`.
    b.switch_to_block(row.header);
    let r = b.block_params(row.header)[0];
    let done = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, r, end_row);
    b.ins().brif(done, exit, &[], row.body, &[]);

    // Row body: base addresses and splat values of this row.
    b.switch_to_block(row.body);
    let mut coords = Vec::with_capacity(spec.outer.len());
    let mut rest = r;
    // The first outer dim needs no remainder (a row index is below the
    // row count), so a kernel's code does not depend on it.
    for &d in spec.outer.iter().skip(1).rev() {
        coords.push(b.ins().urem_imm_u(rest, d as i64));
        rest = b.ins().udiv_imm_u(rest, d as i64);
    }
    if !spec.outer.is_empty() {
        coords.push(rest);
    }
    coords.reverse();
    let mut row_ptr = Vec::with_capacity(n_loads + spec.outputs.len());
    for (l, load) in spec.loads.iter().enumerate() {
        let mut off = b.ins().iconst(ptr, 0);
        for (c, &s) in coords.iter().zip(&load.outer) {
            if s != 0 {
                let t = b.ins().imul_imm_u(*c, (s * width(load.kind)) as i64);
                off = b.ins().iadd(off, t);
            }
        }
        row_ptr.push(b.ins().iadd(bases[l], off));
    }
    for (o, _) in spec.outputs.iter().enumerate() {
        let row_len = b.ins().imul_imm_u(inner, width(spec.stores[o]) as i64);
        let out_off = b.ins().imul(r, row_len);
        row_ptr.push(b.ins().iadd(bases[n_loads + o], out_off));
    }
    // The flat index of the row's first element (`Expr::Random` reads it).
    let row_start = b.ins().imul(r, inner);
    let mut splat_scalar: Vec<Option<Value>> = vec![None; n_loads];
    let mut splat_vector: Vec<Option<Value>> = vec![None; n_loads];
    for (l, load) in spec.loads.iter().enumerate() {
        if load.inner == Inner::Splat && load.kind == Kind::F32 {
            let s = b.ins().load(types::F32, flags, row_ptr[l], 0);
            splat_scalar[l] = Some(s);
            splat_vector[l] = Some(b.ins().splat(types::F32X4, s));
        } else if load.inner == Inner::Splat && matches!(load.kind, Kind::F64 | Kind::I64) {
            // Scalar-only code (`Spec::scalar_only`): no vector splat.
            let ty = if load.kind == Kind::F64 { types::F64 } else { types::I64 };
            splat_scalar[l] = Some(b.ins().load(ty, flags, row_ptr[l], 0));
        } else if load.inner == Inner::Splat && load.kind == Kind::I32 {
            let i = b.ins().load(types::I32, flags, row_ptr[l], 0);
            splat_scalar[l] = Some(i);
            splat_vector[l] = Some(b.ins().splat(types::I32X4, i));
        } else if load.inner == Inner::Splat && matches!(load.kind, Kind::F16 | Kind::BF16) {
            let h = b.ins().uload16(types::I32, flags, row_ptr[l], 0);
            let s = Emitter::new(b, false, support).widen_half(load.kind, h);
            splat_scalar[l] = Some(s);
            splat_vector[l] = Some(b.ins().splat(types::F32X4, s));
        } else if load.inner == Inner::Splat {
            // A bool: an `i8` 0/1 mask, and all-ones/zeros lanes.
            let byte = b.ins().uload8(types::I32, flags, row_ptr[l], 0);
            let m = b.ins().icmp_imm_u(IntCC::NotEqual, byte, 0);
            splat_scalar[l] = Some(m);
            let w = b.ins().uextend(types::I32, m);
            let lanes = b.ins().ineg(w);
            splat_vector[l] = Some(b.ins().splat(types::I32X4, lanes));
        }
    }
    let tail = new_loop(b, ptr);
    let next_row = b.create_block();
    if spec.scalar_only() {
        b.ins().jump(tail.header, &[zero.into()]);
    } else {
        let vec = new_loop(b, ptr);
        b.ins().jump(vec.header, &[zero.into()]);
        // Vector header: `brif c + 4 > inner, tail, body`.
        b.switch_to_block(vec.header);
        let c = b.block_params(vec.header)[0];
        let c4 = b.ins().iadd_imm_u(c, 4);
        let past = b.ins().icmp(IntCC::UnsignedGreaterThan, c4, inner);
        b.ins().brif(past, tail.header, &[c.into()], vec.body, &[]);
        b.switch_to_block(vec.body);
        body(b, spec, &row_ptr, &splat_vector, (row_start, c), (true, faults), support);
        b.ins().jump(vec.header, &[c4.into()]);
    }

    // Scalar tail: `brif c >= inner, next_row, body`.
    b.switch_to_block(tail.header);
    let c = b.block_params(tail.header)[0];
    let end = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, c, inner);
    b.ins().brif(end, next_row, &[], tail.body, &[]);
    b.switch_to_block(tail.body);
    body(b, spec, &row_ptr, &splat_scalar, (row_start, c), (false, faults), support);
    let c1 = b.ins().iadd_imm_u(c, 1);
    b.ins().jump(tail.header, &[c1.into()]);

    b.switch_to_block(next_row);
    let r1 = b.ins().iadd_imm_u(r, 1);
    b.ins().jump(row.header, &[r1.into()]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
}

/// The computation of one index (`vector`: four) at inner position `c` of
/// the row whose first flat index is `row_start`: every load first, then
/// the expressions, then the stores. `faults`: the step's record of
/// failures, for a spec with fallible ops (scalar code).
fn body(
    b: &mut FunctionBuilder,
    spec: &Spec,
    row_ptr: &[Value],
    splat: &[Option<Value>],
    (row_start, c): (Value, Value),
    (vector, faults): (bool, Option<Value>),
    support: Support,
) {
    let flags = MemFlagsData::new().with_notrap();
    let ty = if vector { types::F32X4 } else { types::F32 };
    let le = MemFlagsData::new().with_endianness(Endianness::Little);
    let byte = b.ins().imul_imm_u(c, 4);
    let half_byte = b.ins().imul_imm_u(c, 2);
    let wide_byte = b.ins().imul_imm_u(c, 8);
    let mut loaded: Vec<Option<Value>> = splat.to_vec();
    for (l, load) in spec.loads.iter().enumerate() {
        if load.inner != Inner::Contig {
            continue;
        }
        loaded[l] = Some(match (load.kind, vector) {
            (Kind::F32, _) => {
                let addr = b.ins().iadd(row_ptr[l], byte);
                b.ins().load(ty, flags, addr, 0)
            }
            (Kind::I32, _) => {
                let addr = b.ins().iadd(row_ptr[l], byte);
                let int = if vector { types::I32X4 } else { types::I32 };
                b.ins().load(int, flags, addr, 0)
            }
            (Kind::F64, _) => {
                let addr = b.ins().iadd(row_ptr[l], wide_byte);
                b.ins().load(types::F64, flags, addr, 0)
            }
            (Kind::I64, _) => {
                let addr = b.ins().iadd(row_ptr[l], wide_byte);
                b.ins().load(types::I64, flags, addr, 0)
            }
            (Kind::F16 | Kind::BF16, _) => {
                let addr = b.ins().iadd(row_ptr[l], half_byte);
                let h = match vector {
                    true => b.ins().uload16x4(flags, addr, 0),
                    false => b.ins().uload16(types::I32, flags, addr, 0),
                };
                Emitter::new(b, vector, support).widen_half(load.kind, h)
            }
            (Kind::Mask, false) => {
                let addr = b.ins().iadd(row_ptr[l], c);
                let v = b.ins().uload8(types::I32, flags, addr, 0);
                b.ins().icmp_imm_u(IntCC::NotEqual, v, 0)
            }
            (Kind::Mask, true) => {
                // Four bytes widened to four lanes, compared with zero.
                let addr = b.ins().iadd(row_ptr[l], c);
                let v = b.ins().load(types::I32, flags, addr, 0);
                let v = b.ins().scalar_to_vector(types::I32X4, v);
                let v = b.ins().bitcast(types::I8X16, le, v);
                let v = b.ins().uwiden_low(v);
                let v = b.ins().uwiden_low(v);
                let zero = b.ins().iconst(types::I32, 0);
                let zero = b.ins().splat(types::I32X4, zero);
                b.ins().icmp(IntCC::NotEqual, v, zero)
            }
        });
    }
    let mut e = Emitter::new(b, vector, support);
    let mut values: Vec<Value> = Vec::with_capacity(spec.exprs.len());
    for (at, (expr, kind)) in spec.exprs.iter().enumerate() {
        let v = match *expr {
            Expr::Load(l) => loaded[l].expect("every load is loaded before use"),
            Expr::Unary(_, x) if *kind == Kind::Mask => e.mask_not(values[x]),
            Expr::Unary(op, x) if kind.is_int() => e.int_unary(op, values[x]),
            Expr::Unary(op, x) if *kind == Kind::F64 => e.f64_unary(op, values[x]),
            Expr::Unary(op, x) => e.unary(op, values[x]),
            Expr::Binary(op, x, y) if op.is_comparison() && spec.exprs[x].1.is_int() => {
                e.int_compare(op, values[x], values[y])
            }
            Expr::Binary(op, x, y) if op.is_comparison() => e.compare(op, values[x], values[y]),
            Expr::Binary(op, x, y) if op.is_logical() => e.logical(op, values[x], values[y]),
            Expr::Binary(op, x, y) if kind.is_int() && INT_FALLIBLE.contains(&op) => {
                let faults = faults.expect("a spec with fallible ops passes its record");
                let index = e.b.ins().iadd(row_start, c);
                e.int_fallible(op, (values[x], values[y]), faults, at, index)
            }
            Expr::Binary(op, x, y) if kind.is_int() => e.int_binary(op, values[x], values[y]),
            Expr::Binary(op, x, y) if *kind == Kind::F64 => e.f64_binary(op, values[x], values[y]),
            Expr::Binary(op, x, y) => e.binary(op, values[x], values[y]),
            // (Integer and mask lanes select bits as they are.)
            Expr::Select(m, x, y) if kind.is_int() || *kind == Kind::Mask => e.pick(values[m], values[x], values[y]),
            Expr::Select(m, x, y) => e.select(values[m], values[x], values[y]),
            Expr::Convert(to, x) => e.convert(spec.exprs[x].1, to, values[x]),
            Expr::OneHot(label) => {
                let class = e.position(c);
                let hit = e.fcmp(FloatCC::Equal, values[label], class);
                let (one, zero) = (e.f(1.0), e.f(0.0));
                e.select(hit, one, zero)
            }
            Expr::Round(to, x) => e.round_half(to, values[x]),
            Expr::ToOddF32(x) => e.to_odd_f32(spec.exprs[x].1, values[x]),
            Expr::Iota { stride, size } => {
                let index = e.b.ins().iadd(row_start, c);
                e.iota(stride, size, *kind, index)
            }
            Expr::Random { dtype, dist, seed, counter } => {
                let index = e.b.ins().iadd(row_start, c);
                let code = poly::random_code(dtype, dist, counter.is_some());
                e.random(code, seed, counter.map(|x| values[x]), index, *kind == Kind::F64)
            }
        };
        values.push(v);
    }
    let n_loads = spec.loads.len();
    for (o, &x) in spec.outputs.iter().enumerate() {
        match (spec.stores[o], vector) {
            // (`Spec::analyze` stores no `I32` output.)
            (Kind::F32 | Kind::I32, _) => {
                let addr = b.ins().iadd(row_ptr[n_loads + o], byte);
                b.ins().store(flags, values[x], addr, 0);
            }
            (Kind::F64 | Kind::I64, _) => {
                let addr = b.ins().iadd(row_ptr[n_loads + o], wide_byte);
                b.ins().store(flags, values[x], addr, 0);
            }
            (kind @ (Kind::F16 | Kind::BF16), _) => {
                let h = Emitter::new(b, vector, support).half_bits(kind, values[x]);
                let addr = b.ins().iadd(row_ptr[n_loads + o], half_byte);
                if vector {
                    // Four 16-bit lanes, stored as one 64-bit word.
                    let packed = b.ins().unarrow(h, h);
                    let words = b.ins().bitcast(types::I64X2, le, packed);
                    let word = b.ins().extractlane(words, 0);
                    b.ins().store(flags, word, addr, 0);
                } else {
                    b.ins().istore16(flags, h, addr, 0);
                }
            }
            (Kind::Mask, false) => {
                let addr = b.ins().iadd(row_ptr[n_loads + o], c);
                b.ins().store(flags, values[x], addr, 0);
            }
            (Kind::Mask, true) => {
                // Lanes of -1/0 to bytes of 1/0, stored as one 32-bit word.
                let one = b.ins().iconst(types::I32, 1);
                let one = b.ins().splat(types::I32X4, one);
                let v = b.ins().band(values[x], one);
                let v = b.ins().snarrow(v, v);
                let v = b.ins().snarrow(v, v);
                let v = b.ins().bitcast(types::I32X4, le, v);
                let word = b.ins().extractlane(v, 0);
                let addr = b.ins().iadd(row_ptr[n_loads + o], c);
                b.ins().store(flags, word, addr, 0);
            }
        }
    }
}

/// Bytes per element of a value kind in memory.
fn width(kind: Kind) -> usize {
    match kind {
        Kind::F64 | Kind::I64 => 8,
        Kind::F32 | Kind::I32 => 4,
        Kind::F16 | Kind::BF16 => 2,
        Kind::Mask => 1,
    }
}
