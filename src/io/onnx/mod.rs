//! ONNX, the interchange format for trained models: writing a program's
//! `export fn`s as ONNX models (export.rs, in the protocol-buffer wire
//! format of `io::proto`), keeping one size open (symbolic.rs).

pub mod export;
pub mod symbolic;

pub use export::OnnxPlan;
