//! Reading and writing data files: CSV (read by the tracer while checking,
//! so a wrong feature count is a check error), the binary formats of
//! `load_idx`, `load_npy` and `load_safetensors` (headers and sizes checked
//! by the tracer, data read at run time), text files as bytes
//! (`load_text`, read by the tracer like CSV), safetensors checkpoints
//! written atomically, shard file patterns (`glob`), TensorBoard event files (a training log's
//! `format = "tensorboard"`), and pictures of training logs (`tfc plot`:
//! SVG, or PNG drawn here). Below the tracer and the runtime, which both
//! use it.

pub mod checkpoint;
pub mod csv;
pub mod glob;
pub mod loaders;
pub mod onnx;
pub mod plot;
pub mod proto;
pub mod proto_reader;
pub mod tensorboard;
pub mod text;
