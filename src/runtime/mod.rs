//! Runtime: executes traced programs — effects in order, regions per
//! element or batch, dataset pipelines, the training loop, checkpoints —
//! and formats printed values (§11).

pub mod checkpoint;
pub mod csv;
pub mod dataset;
pub mod exec;
pub mod format;
pub mod interrupt;
pub mod loaders;
pub mod pipeline;
pub mod train;
