//! Runtime support: value formatting (print, §11) and, later, the scheduler and data pipelines.

pub mod format;
