//! Runtime: executes traced programs — effects in order, regions per
//! element or batch, dataset pipelines, the training loop, checkpoints —
//! and formats printed values (§11).

pub mod dataset;
pub mod effects;
pub mod exec;
pub mod format;
pub mod pipeline;
pub mod statements;
pub mod train;
