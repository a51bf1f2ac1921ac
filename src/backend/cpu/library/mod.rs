//! Ahead-of-time libraries: prepared units written as functions of a
//! relocatable object file that a C, C++ or Rust program links, with a C
//! header (`header`) and the runtime they call (`runtime`).
//!
//! Contract: [`Library::add`] writes one prepared unit (an `export fn` at
//! fixed sizes) as the C function `int NAME(const T *in..., T *out...,
//! void *arena)` (0 when done; 1 on a CPU that cannot run its kernels as
//! the building machine did, e.g. without AVX-512 for a convolution, rather
//! than other bits): its steps in the order the in-process backend runs them
//! on one thread, the compiled loops as Cranelift code in the object, the
//! native ones as calls of `runtime`'s entry points, the unit's constants
//! (the trained weights) as read-only data in the object. So a call
//! computes exactly the in-process call's bits and allocates nothing: the
//! caller passes the arena (`ARENA_BYTES`, 64-byte aligned, its contents
//! anything). A unit with a step the library cannot write (one on the
//! interpreter, a product through the `gemm` crate, a gradient's kernel)
//! is refused with a diagnostic naming the step, before any file is
//! written. The code is for the building machine's instruction set (as
//! the JIT's), position independent.
//!
//! Example: `tfc build mlp.tfl -o out/mlp` adds `export fn predict(x:
//! f32[1, 784])` as `int mlp_predict(const float *x, float *out0, void
//! *arena)` and `#define MLP_PREDICT_ARENA_BYTES 4416` in `out/mlp.h`.

pub mod header;
pub mod runtime;

use crate::backend::cpu::codegen::{declare_libm, has_fma, host_isa};
use crate::backend::cpu::JitUnit;
use crate::diag::{Code, Diagnostic};
use crate::ir::TensorType;
use cranelift_codegen::ir::{types, AbiParam};
use cranelift_frontend::FunctionBuilderContext;
use cranelift_module::{FuncId, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};

/// One function of a library, as its header declares it.
#[derive(Clone, Debug)]
pub struct Function {
    /// The C name.
    pub name: String,
    /// The parameters' names and types, in order.
    pub params: Vec<(String, TensorType)>,
    /// The results' types, in order (written through `out0`, `out1`, …).
    pub results: Vec<TensorType>,
    /// The bytes of the arena a call needs.
    pub arena_bytes: usize,
    /// What the function is, for the header (the export and its line).
    pub about: String,
}

/// A library being written.
pub struct Library {
    pub(in crate::backend::cpu) module: ObjectModule,
    /// The `poly::Libm` imports compiled kernels call.
    pub(in crate::backend::cpu) libm: Vec<FuncId>,
    pub(in crate::backend::cpu) fma: bool,
    pub(in crate::backend::cpu) fctx: FunctionBuilderContext,
    /// `tfc_rt_sgemm`, `tfc_rt_reduce_f32`, `tfc_rt_conv2d`,
    /// `tfc_rt_transpose32`, as imports.
    pub(in crate::backend::cpu) runtime: [FuncId; 4],
    functions: Vec<Function>,
    /// The read-only data all functions share (`constant`), and its symbol.
    data: Vec<u8>,
    pub(in crate::backend::cpu) data_id: cranelift_module::DataId,
    /// Where each distinct constant already lies in `data`.
    placed: std::collections::HashMap<Vec<u8>, usize>,
}

/// The alignment of each constant in the library's data.
pub(in crate::backend::cpu) const ALIGN: usize = 64;

fn failed(what: &str, e: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(Code::LibraryExport, format!("cannot write the library: {what}: {e}"))
}

impl Library {
    /// An empty library; `name` names its object file's contents.
    pub fn new(name: &str) -> Result<Library, Diagnostic> {
        let isa = host_isa(true).map_err(|e| failed("no code generator", e))?;
        let fma = has_fma(&*isa);
        let builder = ObjectBuilder::new(isa, name.as_bytes().to_vec(), cranelift_module::default_libcall_names())
            .map_err(|e| failed("no object writer", e))?;
        let mut module = ObjectModule::new(builder);
        let libm = declare_libm(&mut module).map_err(|e| failed("no math functions", e))?;
        let ptr = module.target_config().pointer_type();
        let mut import = |name: &str, params: &[types::Type], result: Option<types::Type>| {
            let mut sig = module.make_signature();
            sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
            sig.returns.extend(result.map(AbiParam::new));
            module.declare_function(name, Linkage::Import, &sig).map_err(|e| failed(name, e))
        };
        let i32 = types::I32;
        let runtime = [
            import("tfc_rt_sgemm", &[ptr; 9], None)?,
            import("tfc_rt_reduce_f32", &[i32, ptr, ptr, ptr, ptr, types::I64], Some(i32))?,
            import("tfc_rt_conv2d", &[ptr, ptr, ptr, ptr, ptr, ptr, i32, ptr, i32], Some(i32))?,
            import("tfc_rt_transpose32", &[ptr; 5], None)?,
        ];
        let data_id = module
            .declare_data(&format!("{name}__data"), Linkage::Local, false, false)
            .map_err(|e| failed("the constants", e))?;
        Ok(Library {
            module,
            libm,
            fma,
            fctx: FunctionBuilderContext::new(),
            runtime,
            functions: Vec::new(),
            data: Vec::new(),
            data_id,
            placed: Default::default(),
        })
    }

    /// The offset of `bytes` in the library's read-only data, a multiple
    /// of `ALIGN`: a constant every function shares (the weights of a
    /// function compiled at several batch sizes are stored once).
    pub(in crate::backend::cpu) fn constant(&mut self, bytes: &[u8]) -> usize {
        if let Some(&at) = self.placed.get(bytes) {
            return at;
        }
        let at = self.data.len().next_multiple_of(ALIGN);
        self.data.resize(at, 0);
        self.data.extend_from_slice(bytes);
        self.placed.insert(bytes.to_vec(), at);
        at
    }

    /// Writes `unit` as the function `f` (see the module docs); `f`'s
    /// arena size is the unit's.
    pub fn add(&mut self, unit: &JitUnit, mut f: Function) -> Result<(), Diagnostic> {
        if self.functions.iter().any(|g| g.name == f.name) {
            return Err(Diagnostic::new(Code::LibraryExport, format!("the library has two functions `{}`", f.name)));
        }
        f.arena_bytes = unit.write_function(self, &f)?;
        self.functions.push(f);
        Ok(())
    }

    /// The functions so far.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The object file's bytes.
    pub fn finish(mut self) -> Result<Vec<u8>, Diagnostic> {
        let mut desc = cranelift_module::DataDescription::new();
        desc.define(std::mem::take(&mut self.data).into_boxed_slice());
        desc.set_align(ALIGN as u64);
        self.module.define_data(self.data_id, &desc).map_err(|e| failed("the constants", e))?;
        self.module.finish().emit().map_err(|e| failed("the object file", e))
    }
}
