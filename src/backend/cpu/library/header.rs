//! The C header of an ahead-of-time library: one prototype per function,
//! with its arena size and its tensors' sizes as macros, usable from C, C++
//! (`extern "C"`) and Rust's FFI.
//!
//! Contract: [`header`] declares exactly the functions of the library, in
//! order, each as `int NAME(const float *param..., float *out0...,
//! void *arena)` (0: done), preceded by a comment giving its types and the export it
//! comes from, `NAME_ARENA_BYTES` (upper-cased) and the element count of
//! each tensor (`NAME_PARAM_ELEMENTS`, `NAME_OUT0_ELEMENTS`); a parameter
//! named like a C keyword gets a trailing `_`. The text says how to link.
//!
//! Example: for `mnist_predict` it declares
//! `#define MNIST_PREDICT_ARENA_BYTES 4416` and
//! `int mnist_predict(const float *x, float *out0, void *arena);`.

use super::Function;

/// Words a C or C++ compiler reserves, which a parameter may not be named.
const RESERVED: &[&str] = &[
    "auto",
    "bool",
    "break",
    "case",
    "char",
    "class",
    "const",
    "continue",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "new",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "typedef",
    "union",
    "unsigned",
    "virtual",
    "void",
    "volatile",
    "while",
    "arena",
];

/// The C name of parameter `name`.
fn c_param(name: &str) -> String {
    if RESERVED.contains(&name) {
        format!("{name}_")
    } else {
        name.to_string()
    }
}

/// The header of a library named `name` (its object `name.o`) holding
/// `functions`, written from `source`.
pub fn header(name: &str, source: &str, functions: &[Function]) -> String {
    let guard = format!("TFC_{}_H", name.to_uppercase());
    let about = [
        format!("{name}.h: written by `tfc build` from {source}; do not edit."),
        String::new(),
        "Each function computes one `export fn` of the program at fixed sizes,".into(),
        format!("with the weights the program ended with (in {name}.o), on the calling"),
        "thread, and writes the same bits as the program's own call. Tensors".into(),
        "are row-major arrays of `float`. A call allocates no memory: the caller".into(),
        "passes `arena`, at least NAME_ARENA_BYTES bytes aligned to 64 bytes,".into(),
        "whose contents need not be set; calls may reuse it one after another,".into(),
        "but concurrent calls need one arena each. The code is for the CPU of".into(),
        "the machine that built it: a call returns 0, or 1 (its outputs unset)".into(),
        "on a CPU that cannot run its kernels as that machine did.".into(),
        String::new(),
        "Link with tfc's runtime (`cargo build --release` in tfc's checkout".into(),
        "builds target/release/libtfc.a):".into(),
        format!("  cc main.c {name}.o -L<tfc>/target/release -ltfc -lm -lpthread -ldl -Wl,--gc-sections"),
    ];
    let mut h = String::from("/*");
    for line in about {
        h.push_str(&format!(" {line}\n *").replace(" \n", "\n"));
    }
    h.push_str(&format!("/\n#ifndef {guard}\n#define {guard}\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n"));
    for f in functions {
        let upper = f.name.to_uppercase();
        let params: Vec<String> = f.params.iter().map(|(p, ty)| format!("{p}: {ty}")).collect();
        let results: Vec<String> = f.results.iter().map(|ty| ty.to_string()).collect();
        h.push_str(&format!("\n/* {}({}) -> {}\n * {} */\n", f.name, params.join(", "), results.join(", "), f.about));
        h.push_str(&format!("#define {upper}_ARENA_BYTES {}\n", f.arena_bytes));
        let mut args = Vec::new();
        for (p, ty) in &f.params {
            let p = c_param(p);
            h.push_str(&format!("#define {upper}_{}_ELEMENTS {}\n", p.to_uppercase(), ty.numel()));
            args.push(format!("const float *{p}"));
        }
        for (i, ty) in f.results.iter().enumerate() {
            h.push_str(&format!("#define {upper}_OUT{i}_ELEMENTS {}\n", ty.numel()));
            args.push(format!("float *out{i}"));
        }
        args.push("void *arena".into());
        h.push_str(&format!("int {}({});\n", f.name, args.join(", ")));
    }
    h.push_str(&format!("\n#ifdef __cplusplus\n}}\n#endif\n\n#endif /* {guard} */\n"));
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, TensorType};

    #[test]
    fn declares_each_function_with_its_sizes() {
        let f = Function {
            name: "m_predict".into(),
            params: vec![
                ("x".into(), TensorType::new(DType::F32, vec![1, 784])),
                ("int".into(), TensorType::new(DType::F32, vec![2])),
            ],
            results: vec![TensorType::new(DType::F32, vec![1, 10])],
            arena_bytes: 4416,
            about: "export fn predict (m.tfl:3)".into(),
        };
        let h = header("m", "m.tfl", &[f]);
        assert!(h.contains("#define M_PREDICT_ARENA_BYTES 4416\n"), "{h}");
        assert!(h.contains("#define M_PREDICT_X_ELEMENTS 784\n"), "{h}");
        assert!(h.contains("#define M_PREDICT_OUT0_ELEMENTS 10\n"), "{h}");
        assert!(h.contains("int m_predict(const float *x, const float *int_, float *out0, void *arena);"), "{h}");
        assert!(h.contains("#ifndef TFC_M_H") && h.contains("extern \"C\""), "{h}");
    }
}
