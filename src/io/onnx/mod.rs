//! ONNX, the interchange format for trained models: writing a program's
//! `export fn`s as ONNX models (export.rs, in the protocol-buffer wire
//! format of `io::proto`), keeping one size open (symbolic.rs); reading
//! model files (read.rs, into the plain data of model.rs) and translating
//! their graphs into tfc's IR (import/), which `load_onnx` does.

pub mod export;
pub mod import;
pub mod model;
pub mod read;
pub mod symbolic;

pub use export::OnnxPlan;
