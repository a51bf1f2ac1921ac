//! What runs beside the graph: datasets (sources and transforms), regions
//! (subgraphs the runtime evaluates many times: a `map` function per element,
//! a training step per batch) and training plans. All are plain data over
//! node ids of the program's one graph.
//!
//! A region's inputs are `Slot` nodes bound by the runtime on every
//! evaluation; nodes of the region that do not depend on any input (captured
//! values, such as a weight read by a `map` function) are computed once.

use super::graph::NodeId;
use super::types::TensorType;
use crate::diag::Span;
use std::sync::Arc;

/// A subgraph evaluated repeatedly: bind `inputs` (slot numbers, with their
/// types), read `outputs`.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    /// Which region this is: the optimizer's compilation unit of the region
    /// carries the same id (`CompiledUnit::region`), which is how a backend
    /// finds the plan of the region it runs. Copies of one region (a `map`
    /// behind two datasets) share it, and so share one unit.
    pub id: RegionId,
    pub inputs: Vec<(usize, TensorType)>,
    pub outputs: Vec<NodeId>,
}

/// `export fn name(params)`: a function that `tfc build` writes out (as
/// ONNX), traced once at the end of the program over its parameters'
/// annotated types. Its region's inputs are the parameters in order, its
/// outputs the function's results (a tuple's parts in order); the values it
/// captures (a model's parameters) are those the program ends with.
///
/// A parameter type may have one symbolic size (`x: f32[B, 784]`, the
/// batch): then `region` is the function at `B = EXPORT_SIZE` and `probe`
/// the same function traced again at `B = EXPORT_PROBE_SIZE`, which ONNX
/// export compares with it to find every size that scales with `B`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportPlan {
    pub name: String,
    pub params: Vec<String>,
    pub region: Region,
    pub span: Span,
    /// The symbolic size's name and its second trace, if there is one.
    pub symbolic: Option<(String, Region)>,
    /// The function traced at each size an ahead-of-time library asks for
    /// (`tfc build --emit lib --batch 1,64`; none otherwise), by size.
    pub sized: Vec<(usize, Region)>,
}

/// The size a symbolic dimension of an `export fn` is traced at (what
/// `tfc bench` times), and the size of its second trace.
pub const EXPORT_SIZE: usize = 8;
pub const EXPORT_PROBE_SIZE: usize = 5;

/// A region's identity, unique in its program (the tracer numbers regions
/// as it creates them; `vectorize_maps` numbers its batched regions after
/// the largest id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub usize);

/// Host data whose first axis enumerates elements, one tensor per part of
/// the element (e.g. features and labels of a CSV file).
#[derive(Clone, Debug, PartialEq)]
pub struct HostColumns {
    pub columns: Vec<(TensorType, super::op::Literal)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Data read while checking (a CSV file), shared by every use.
    Host(Arc<HostColumns>),
    /// Tensors computed by the graph; element `i` is index `i` of each.
    Nodes(Vec<NodeId>),
    /// `range(n)`: the i32 scalars `0..n`.
    Range(usize),
    /// A binary data file whose header was read while checking; the
    /// runtime reads the data (`io::loaders`).
    File(Arc<FileSource>),
}

/// The binary formats `load_idx`, `load_npy`, `load_safetensors` and
/// `load_tfrecord` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    Idx,
    Npy,
    Safetensors,
    /// TFRecord shards of `tf.train.Example`s, read in order.
    TfRecord,
}

/// Data files read as one sequence of elements: shards in order, each one
/// file (or, for IDX, an images file and a labels file), and the columns
/// found in them while checking; each column's first axis enumerates the
/// elements of all shards.
#[derive(Clone, Debug, PartialEq)]
pub struct FileSource {
    pub format: FileFormat,
    /// Each shard's files, in the order their elements come.
    pub shards: Vec<Vec<std::path::PathBuf>>,
    /// For safetensors: the tensors to read, in order (empty: all, by name);
    /// for TFRecord: the features.
    pub keys: Vec<String>,
    pub columns: Vec<TensorType>,
    /// The number of elements of each shard (they add up to the columns'
    /// first axis).
    pub counts: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Transform {
    /// Applies a region to each element (inputs: the element's parts).
    Map(Region),
    /// `map(f, parallel = n)`: the `Map` just before this runs on `n` worker
    /// threads (`None`: `auto`, as many as keep the consumer fed), with the
    /// element order preserved.
    Parallel(Option<usize>),
    /// Keeps elements whose region output (a bool scalar) is true.
    Filter(Region),
    /// tf.data's shuffle: a buffer of `buffer` elements, reshuffled each epoch
    /// with a seed derived from `seed` and the epoch.
    Shuffle {
        buffer: usize,
        seed: u64,
    },
    /// Stacks `n` consecutive elements along a new first axis.
    Batch {
        n: usize,
        drop_remainder: bool,
    },
    /// `Some(n)`: the elements `n` times. `None` (`repeat()`): one pass — a
    /// training loop repeats its data every epoch by itself.
    Repeat(Option<usize>),
    Take(usize),
    Skip(usize),
    /// A permutation by `seed`, then the first `count` elements (or the rest).
    Split {
        seed: u64,
        count: usize,
        first: bool,
    },
    /// Keep computed elements after the first pass: in memory, or in the
    /// given file (reused by later runs while the element types match).
    Cache(Option<std::path::PathBuf>),
    /// Overlap input preparation with training (`None` = auto).
    Prefetch(Option<usize>),
    /// tf.data's `interleave` over the shards of a file source (the first
    /// transform): `cycle` shards are read at once, `block` elements from
    /// each in turn, a finished shard's place taken by the next. With
    /// `parallel`, rows are read on that many threads (`Some(None)`: one
    /// per core).
    Interleave {
        cycle: usize,
        block: usize,
        parallel: Option<Option<usize>>,
    },
    /// A `map` moved behind the `batch(n)` that followed it, by the
    /// `vectorize_maps` pass (tf.data's map vectorization): `batched`
    /// computes the function for a whole batch of `n` elements in one run;
    /// a shorter last batch is split into its elements, which go through
    /// `element` (the original function) and are stacked again.
    BatchedMap {
        batched: Region,
        element: Region,
        n: usize,
    },
    /// A `map` (or, with `filter`, a `filter`) after a `batch` that leaves a
    /// shorter last batch: the function traced once per batch size, full
    /// batches first.
    BySize {
        filter: bool,
        regions: Vec<(usize, Region)>,
    },
}

impl Transform {
    /// The regions this transform runs.
    pub fn regions(&self) -> Vec<&Region> {
        match self {
            Transform::Map(r) | Transform::Filter(r) => vec![r],
            Transform::BatchedMap { batched, element, .. } => vec![batched, element],
            Transform::BySize { regions, .. } => regions.iter().map(|(_, r)| r).collect(),
            _ => Vec::new(),
        }
    }

    /// [`Transform::regions`], mutably.
    pub fn regions_mut(&mut self) -> Vec<&mut Region> {
        match self {
            Transform::Map(r) | Transform::Filter(r) => vec![r],
            Transform::BatchedMap { batched, element, .. } => vec![batched, element],
            Transform::BySize { regions, .. } => regions.iter_mut().map(|(_, r)| r).collect(),
            _ => Vec::new(),
        }
    }
}

/// A lazy pipeline of elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub source: Source,
    pub transforms: Vec<Transform>,
    /// The type of each part of an element.
    pub element: Vec<TensorType>,
    /// The number of elements, when known before running.
    pub len: Option<usize>,
    /// Batch sizes the elements can have: after `batch(n)`, `n` and the size
    /// of a last partial batch (when the length is known); empty before.
    pub batch_sizes: Vec<usize>,
}

/// One compiled training step per batch shape, and everything the loop needs.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainPlan {
    pub data: Dataset,
    /// Step regions, one per distinct batch size. Inputs, in order: the batch
    /// parts, the step number (f32 scalar, 1-based), the parameters, the
    /// optimizer states, the model states. Outputs: the loss, the new
    /// parameters, the new optimizer states, the new model states.
    pub steps: Vec<(usize, Region)>,
    /// The structure of each step region (in `steps` order) beyond its
    /// inputs and outputs, for passes and plans to see.
    pub parts: Vec<StepParts>,
    /// Parameter names (paths such as `l1.w`) and their initial values.
    pub params: Vec<(String, NodeId)>,
    /// Optimizer states (`l1.w/m`) and their initial values.
    pub states: Vec<(String, NodeId)>,
    /// The model's tensor `state`s (`bn1.running_mean`) and their values
    /// before training; a step may write them (§6).
    pub model_states: Vec<(String, NodeId)>,
    pub epochs: Option<usize>,
    pub max_steps: Option<usize>,
    pub evals: Vec<EvalPlan>,
    pub checkpoint: Option<(String, Cadence)>,
    pub log: Option<LogPlan>,
    pub resume: Option<String>,
    /// `precision = "bf16"|"f16"`: the type the step's matrix products and
    /// convolutions take their operands in (`passes::autocast`); `None`:
    /// all `f32`.
    pub precision: Option<super::types::DType>,
    /// Slots that receive the trained parameters, optimizer states and
    /// model states afterwards.
    pub result_slots: Vec<usize>,
    /// A data-parallel run's step, in two halves (then `steps` is empty).
    pub parallel: Option<ParallelStep>,
    pub span: Span,
}

/// How a data-parallel run splits its global batches: into `shards`
/// virtual shards (`None`: the default, `ParallelStep::default_shards`),
/// spread over `world` processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataParallel {
    pub shards: Option<usize>,
    pub world: usize,
}

/// A data-parallel training step. Every global batch is split into
/// `shards` virtual shards, whatever the number of processes; each process
/// runs a `gradients` region for each of its shards, the shards' outputs
/// are summed over a fixed binary tree (`dist::tree`) and every process
/// runs `update` on the sum. So the result depends on the global batch and
/// `shards`, never on how many processes share the work.
///
/// `gradients` has one region per distinct shard size (rows). Inputs: the
/// shard's batch parts, its weight (f32 scalar: `rows · shards / batch`,
/// 1 when the batch splits evenly), the step number, the parameters, the
/// loss scale's states (f16 training only: `LOSS_SCALE_STATES`) and the
/// model states. Outputs: the weighted loss, each parameter's gradient of
/// it, the new model states.
///
/// `update` inputs: the gradients summed over all shards, the first
/// shard's new model states, the step number, then what it carries from
/// step to step — the parameters, the optimizer states and the model
/// states; outputs: the new parameters, optimizer states and model states
/// (the first shard's, as PyTorch's DDP takes rank 0's buffers).
///
/// `fused`: where every process computes one shard (`shards` = the
/// processes) and the model has no states, one region per distinct shard
/// size does the whole step: the shard's gradients, their
/// `all_reduce_sum` over the processes (the same balanced tree, so the
/// same bits), their mean and the update, with the parameters and
/// optimizer states carried in the region like a plain step's — no copies
/// between two halves, and the gradients summed where they lie. Inputs:
/// the shard's batch parts, its weight, the step number, then the carried
/// parameters and optimizer states; outputs: the loss summed over the
/// shards (f64, all-reduced like the gradients), then the carried values.
/// The tracer records in `to_sum` (one list per fused region) what the
/// `all_reduce` pass sums: the loss as an `f64`, then each parameter's
/// gradient; the pass inserts the sums and empties the lists.
/// Batches that leave some shard empty (a short last batch) still run the
/// two halves, which `gradients` and `update` then hold (`update` is
/// `None` when every batch is fused).
#[derive(Clone, Debug, PartialEq)]
pub struct ParallelStep {
    pub shards: usize,
    pub gradients: Vec<(usize, Region)>,
    pub update: Option<Region>,
    pub fused: Vec<(usize, Region)>,
    pub to_sum: Vec<Vec<NodeId>>,
}

impl ParallelStep {
    /// The virtual shards of a batch of `batch` examples when none are
    /// asked for: the largest power of two up to 8 that divides it.
    pub fn default_shards(batch: usize) -> usize {
        [8, 4, 2].into_iter().find(|v| batch.is_multiple_of(*v)).unwrap_or(1)
    }

    /// The rows of each shard of a batch of `batch` examples: as even as
    /// possible, the larger ones first (a ragged last batch).
    pub fn shard_rows(batch: usize, shards: usize) -> Vec<usize> {
        (0..shards).map(|s| batch / shards + usize::from(s < batch % shards)).collect()
    }

    /// The gradient region for shards of `rows` examples.
    pub fn gradients_for(&self, rows: usize) -> Option<&Region> {
        self.gradients.iter().find(|(r, _)| *r == rows).map(|(_, region)| region)
    }

    /// Every region of the step.
    pub fn regions(&self) -> impl Iterator<Item = &Region> {
        let halves = self.gradients.iter().map(|(_, r)| r).chain(self.update.as_ref());
        halves.chain(self.fused.iter().map(|(_, r)| r))
    }

    /// [`ParallelStep::regions`], mutably.
    pub fn regions_mut(&mut self) -> impl Iterator<Item = &mut Region> {
        let halves = self.gradients.iter_mut().map(|(_, r)| r).chain(self.update.as_mut());
        halves.chain(self.fused.iter_mut().map(|(_, r)| r))
    }
}

impl TrainPlan {
    /// What a step carries to the next, in the order of its last inputs
    /// and its outputs after the loss: the parameters, the optimizer
    /// states, the model states, each with its initial value.
    pub fn carried(&self) -> impl Iterator<Item = &(String, NodeId)> {
        self.params.iter().chain(&self.states).chain(&self.model_states)
    }

    pub fn carried_len(&self) -> usize {
        self.params.len() + self.states.len() + self.model_states.len()
    }
}

/// The names of the states f16 training carries after the optimizer's
/// (`TrainPlan::states`) for its loss scaling: the scale, the clean steps
/// in a row since it last changed, and the steps skipped so far (their
/// gradients overflowed). Checkpoints hold them like any state.
pub const LOSS_SCALE_STATES: [&str; 3] = ["loss_scale", "loss_scale/clean_steps", "loss_scale/skipped_steps"];

/// What the nodes of a training step region are, beyond its outputs (the
/// loss first, then the new parameters, then the new optimizer states, in
/// `TrainPlan::params` and `states` order): the gradient of the loss with
/// respect to each parameter, as the optimizer's update reads it (after
/// clipping), and the global norm when the gradients are clipped.
///
/// These are records, not roots: the optimizer keeps them pointing at the
/// nodes that compute the values (`Program::replace_uses`) but does not keep
/// a node alive for them, so a gradient the optimizer folds away is shown
/// as missing.
#[derive(Clone, Debug, PartialEq)]
pub struct StepParts {
    pub gradients: Vec<NodeId>,
    pub global_norm: Option<NodeId>,
}

/// `eval METRIC on DATA every n epochs`: a reduction over a dataset whose
/// region also reads the current parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalPlan {
    pub name: String,
    pub reduce: ReducePlan,
    /// Slots the region reads for each parameter, in `TrainPlan::params`
    /// order, then for each model state (`TrainPlan::model_states`).
    pub param_slots: Vec<usize>,
    pub every: Cadence,
}

/// A train block's `log "path" every … format = …` (§9).
#[derive(Clone, Debug, PartialEq)]
pub struct LogPlan {
    /// The file (JSON lines) or directory (TensorBoard events) as written.
    pub path: String,
    pub every: Cadence,
    pub format: LogFormat,
}

/// What a training log writes: JSON lines (the default) or TensorBoard
/// event files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Jsonl,
    TensorBoard,
}

impl LogFormat {
    /// The names `format = "…"` accepts, in the order the docs list them.
    pub const NAMES: [&'static str; 2] = ["jsonl", "tensorboard"];

    pub fn from_name(name: &str) -> Option<LogFormat> {
        match name {
            "jsonl" => Some(LogFormat::Jsonl),
            "tensorboard" => Some(LogFormat::TensorBoard),
            _ => None,
        }
    }
}

/// How often something happens during training: `every n epochs` (at the
/// end of every `n`-th epoch) or `every n steps` (after every `n`-th step,
/// counted from 1 across epochs). `n` is positive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cadence {
    Epochs(u64),
    Steps(u64),
}

impl Cadence {
    /// Whether it falls at the end of epoch `epoch` (1-based).
    pub fn at_epoch(self, epoch: u64) -> bool {
        matches!(self, Cadence::Epochs(n) if epoch.is_multiple_of(n))
    }

    /// Whether it falls right after step `step` (1-based).
    pub fn at_step(self, step: u64) -> bool {
        matches!(self, Cadence::Steps(n) if step.is_multiple_of(n))
    }
}

/// The example-weighted mean of a scalar region output over every batch of a
/// dataset (how metrics such as accuracy are computed).
#[derive(Clone, Debug, PartialEq)]
pub struct ReducePlan {
    pub data: Dataset,
    /// One region per batch size; inputs: the batch parts, then any extra
    /// inputs (the current parameters, inside training).
    pub regions: Vec<(usize, Region)>,
}
