//! `tfc bench FILE`: times the training steps and the inference of a
//! program. Every `train` block runs `--warmup` untimed and `--steps` timed
//! steps on its first batch (one fixed batch reused, as the peer benchmarks
//! do), and so does every metric over a dataset (`evaluate`, `accuracy`,
//! `mean_loss`: the model's forward pass and the metric on one batch, the
//! inference a user runs); the other statements run as usual with their
//! output discarded. Prints one JSON object per train block:
//!
//! `{"name": "train 2 step (batch 64)", "kind": "train", "backend": "jit",
//!   "compile_ms": …, "step_ms": {"median": …, "p90": …}, "steps": 100,
//!   "threads": 1, "arena_bytes": …, "peak_rss_bytes": …, "loss_first": …,
//!   "loss_last": …}`
//!
//! and one per metric, with `"kind": "inference"` and the metric's `"value"`
//! on the batch (after the training the bench ran) instead of the losses;
//! and one per `export fn`, with `"kind": "export"`, timed as a user's
//! program would call it in process (fixed inputs of its parameter types,
//! the weights the program ends with), its first output's first element
//! as `"value"`.
//!
//! With `--profile`, each step of the compiled training step (a fused
//! kernel, a matrix product, a convolution…) is timed during the timed
//! steps: the JSON gains `"profile": [{"step": i, "label": …, "ms": …}]`
//! (milliseconds per training step, slowest first) and the text output a
//! table. With several threads, steps that run side by side both count.
//! The steps of a `scan`'s body follow as `in #i: …` (`"within": true`),
//! summed over the loop's iterations: they are part of step `#i`'s time.
//!
//! `compile_ms` is the front end and optimizer (once per file) plus the
//! preparation of that step (JIT code generation); `loss_first` is the loss
//! of the first (warm-up or timed) step, `loss_last` of the last one.
//!
//! Contract: deterministic losses (the same numbers every run, and at any
//! `--threads`).

use crate::backend::BackendKind;
use crate::diag::{Code, Diagnostic};
use crate::driver::Session;
use crate::ir::plan::{ReducePlan, TrainPlan};
use crate::ir::{DType, Effect, Literal, TensorType};
use crate::runtime::exec::{Carry, Executor, RunOptions};
use crate::tensor::Tensor;
use std::path::Path;
use std::time::Instant;

/// What `tfc bench` was asked.
pub struct BenchArgs<'a> {
    pub file: &'a Path,
    pub steps: usize,
    pub warmup: usize,
    pub threads: usize,
    pub backend: BackendKind,
    pub json: bool,
    /// Time each step of the compiled unit (`"profile"` in the JSON).
    pub profile: bool,
    /// Host-interpreted kernels are errors (`--strict`).
    pub strict: bool,
}

pub fn bench(session: &mut Session, args: &BenchArgs) -> Result<(), Vec<Diagnostic>> {
    if args.steps == 0 {
        return Err(vec![Diagnostic::new(Code::BadValue, "`--steps` must be at least 1")]);
    }
    let started = Instant::now();
    let id = session.load_file(args.file)?;
    let passes = crate::passes::Options { target: args.backend.target(), ..crate::passes::Options::default() };
    let program = session.compile(id, &passes)?;
    let front_ms = started.elapsed().as_secs_f64() * 1e3;
    let options = RunOptions {
        base_dir: session.base_dir(id),
        backend: args.backend,
        threads: args.threads,
        strict: args.strict,
        ..RunOptions::default()
    };
    super::refuse_host_kernels(&program, &options)?;
    crate::interrupt::install();
    let mut sink = std::io::sink();
    let mut ex = Executor::new(&program, &mut sink, options).map_err(|d| vec![d])?;
    for effect in &program.effects {
        crate::interrupt::check().map_err(|d| vec![d])?;
        match effect {
            Effect::Train(plan) => {
                let r = bench_train(&mut ex, plan, args, front_ms).map_err(|d| vec![d])?;
                let losses = format!("loss {} -> {}", r["loss_first"], r["loss_last"]);
                print_result(&r, args, "step", "steps", &losses);
            }
            Effect::Reduce { plan, span, .. } => {
                let r = bench_metric(&mut ex, plan, *span, args, front_ms).map_err(|d| vec![d])?;
                print_result(&r, args, "batch", "runs", &format!("value {}", r["value"]));
                // Later statements read the metric.
                ex.run_effect(effect).map_err(|d| vec![d])?;
            }
            Effect::Export(x) => {
                let r = bench_export(&mut ex, x, args, front_ms).map_err(|d| vec![d])?;
                print_result(&r, args, "call", "calls", &format!("output[0] {}", r["value"]));
            }
            other => ex.run_effect(other).map_err(|d| vec![d])?,
        }
    }
    Ok(())
}

fn bench_train(
    ex: &mut Executor,
    plan: &TrainPlan,
    args: &BenchArgs,
    front_ms: f64,
) -> Result<serde_json::Value, Diagnostic> {
    let init: Vec<_> = plan.carried().map(|(_, id)| *id).collect();
    ex.demand(&init)?;
    let mut carried: Vec<Tensor> = init.iter().map(|id| ex.value(*id).cloned()).collect::<Result<_, _>>()?;
    let batch = first_batch(ex, &plan.data, "the training data", plan.span)?;
    let size = batch.first().and_then(|t| t.shape().first().copied()).unwrap_or(0);
    let (_, region) = plan
        .steps
        .iter()
        .find(|(b, _)| *b == size)
        .ok_or_else(|| Diagnostic::internal(format!("no training step was compiled for batches of {size}")))?;
    let t = Instant::now();
    let compiled = ex.compile_region_carrying(region, carried.len())?;
    let mut carry = Carry::new(std::mem::take(&mut carried));
    let compile_ms = front_ms + t.elapsed().as_secs_f64() * 1e3;
    let step_at = batch.len();
    let mut head = batch;
    head.push(Tensor::from_literal(&Literal::Float(vec![0.0]), &TensorType::scalar(DType::F32))?);
    let timed = time_runs(args, compiled.unit(), |step| {
        // The batch is one fixed input reused every step (as in the peer
        // benchmarks); only the step number is new.
        head[step_at] = Tensor::from_literal(&Literal::Float(vec![step as f64]), &TensorType::scalar(DType::F32))?;
        let out = ex.run_carrying(&compiled, &head, &mut carry)?;
        Ok(out.first().and_then(|t| t.to_f64_vec().first().copied()).unwrap_or(f64::NAN))
    })?;
    for (slot, t) in plan.result_slots.iter().zip(carry.into_values()?) {
        ex.slots.insert(*slot, t);
    }
    let mut json = timed.json(ex, region, "train", compiled.unit(), compile_ms, args);
    json["loss_first"] = timed.first.into();
    json["loss_last"] = timed.last.into();
    Ok(json)
}

/// Times a metric's region (an inference over a dataset: `evaluate`,
/// `accuracy`, …) on the dataset's first batch, as `bench_train` times a
/// step: the forward pass and the metric, without the reduction over
/// batches.
fn bench_metric(
    ex: &mut Executor,
    plan: &ReducePlan,
    span: crate::diag::Span,
    args: &BenchArgs,
    front_ms: f64,
) -> Result<serde_json::Value, Diagnostic> {
    let batch = first_batch(ex, &plan.data, "the metric's data", span)?;
    let size = batch.first().and_then(|t| t.shape().first().copied()).unwrap_or(0);
    let (_, region) = plan
        .regions
        .iter()
        .find(|(b, _)| *b == size)
        .or(plan.regions.first())
        .ok_or_else(|| Diagnostic::internal(format!("no metric region was compiled for batches of {size}")))?;
    let t = Instant::now();
    let compiled = ex.compile_region(region)?;
    let compile_ms = front_ms + t.elapsed().as_secs_f64() * 1e3;
    let timed = time_runs(args, compiled.unit(), |_| {
        let out = ex.run_region(&compiled, &batch)?;
        Ok(out.first().and_then(|t| t.to_f64_vec().first().copied()).unwrap_or(f64::NAN))
    })?;
    let mut json = timed.json(ex, region, "inference", compiled.unit(), compile_ms, args);
    json["value"] = timed.last.into();
    Ok(json)
}

/// Times an `export fn` called in process on fixed inputs of its
/// parameters' types (a ramp in [-0.5, 0.5) for floats, zeros for ints and
/// bools), with the values the program ended with: the inference a user of
/// the exported function runs.
fn bench_export(
    ex: &mut Executor,
    export: &crate::ir::plan::ExportPlan,
    args: &BenchArgs,
    front_ms: f64,
) -> Result<serde_json::Value, Diagnostic> {
    let inputs: Vec<Tensor> = export
        .region
        .inputs
        .iter()
        .map(|(_, ty)| {
            let n = ty.numel();
            let lit = match ty.dtype {
                DType::I32 | DType::I64 => Literal::Int(vec![0; n]),
                DType::Bool => Literal::Bool(vec![false; n]),
                _ => Literal::Float((0..n).map(|i| ((i * 7919) % 1000) as f64 / 1000.0 - 0.5).collect()),
            };
            Tensor::from_literal(&lit, ty)
        })
        .collect::<Result<_, _>>()?;
    let t = Instant::now();
    let compiled = ex.compile_region(&export.region)?;
    let compile_ms = front_ms + t.elapsed().as_secs_f64() * 1e3;
    let timed = time_runs(args, compiled.unit(), |_| {
        let out = ex.run_region(&compiled, &inputs)?;
        Ok(out.first().and_then(|t| t.to_f64_vec().first().copied()).unwrap_or(f64::NAN))
    })?;
    let mut json = timed.json(ex, &export.region, "export", compiled.unit(), compile_ms, args);
    json["value"] = timed.last.into();
    Ok(json)
}

/// The first batch of `data` (`what` names it in the error when there is
/// none).
fn first_batch(
    ex: &mut Executor,
    data: &crate::ir::plan::Dataset,
    what: &str,
    span: crate::diag::Span,
) -> Result<Vec<Tensor>, Diagnostic> {
    let batches = crate::runtime::dataset::elements(ex, data, 0)?;
    batches
        .into_iter()
        .next()
        .ok_or_else(|| Diagnostic::new(Code::Runtime, format!("{what} has no batches")).label(span, "here"))
}

/// What `time_runs` measured.
struct Timed {
    /// Run times in ms, sorted.
    times: Vec<f64>,
    /// The region's first output (a loss, a metric) at the first and last run.
    first: f64,
    last: f64,
    /// Each step's time per run, slowest first (`--profile`).
    profile: Option<Vec<serde_json::Value>>,
}

/// Runs `run` (given the run's number, from 1) `args.warmup + args.steps`
/// times and times the last `args.steps`, profiling `unit` over those when
/// `--profile` asks.
fn time_runs(
    args: &BenchArgs,
    unit: &dyn crate::backend::PreparedUnit,
    mut run: impl FnMut(usize) -> Result<f64, Diagnostic>,
) -> Result<Timed, Diagnostic> {
    let mut times = Vec::with_capacity(args.steps);
    let (mut first, mut last) = (None, f64::NAN);
    for step in 1..=args.warmup + args.steps {
        crate::interrupt::check()?;
        if step == args.warmup + 1 && args.profile {
            unit.set_profiling(true);
        }
        let t = Instant::now();
        let value = run(step)?;
        let elapsed = t.elapsed().as_secs_f64() * 1e3;
        if step > args.warmup {
            times.push(elapsed);
        }
        first.get_or_insert(value);
        last = value;
    }
    let profile = args.profile.then(|| {
        unit.set_profiling(false);
        let mut steps = unit.profile();
        steps.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        let per_run = 1e3 / args.steps as f64;
        steps
            .iter()
            .map(|t| match t.within {
                None => serde_json::json!({"step": t.index, "label": t.label, "ms": t.seconds * per_run}),
                Some(_) => {
                    serde_json::json!({"step": t.index, "label": t.label, "ms": t.seconds * per_run, "within": true})
                }
            })
            .collect()
    });
    times.sort_by(f64::total_cmp);
    Ok(Timed { times, first: first.unwrap_or(f64::NAN), last, profile })
}

impl Timed {
    /// The JSON object of a timed region: its name, what it is, the medians
    /// and the unit's facts.
    fn json(
        &self,
        ex: &Executor,
        region: &crate::ir::plan::Region,
        kind: &str,
        unit: &dyn crate::backend::PreparedUnit,
        compile_ms: f64,
        args: &BenchArgs,
    ) -> serde_json::Value {
        let name = crate::passes::units::regions(ex.program)
            .into_iter()
            .find(|r| r.region.id == region.id)
            .map_or_else(|| format!("{kind} region"), |r| r.name);
        let pick = |q: f64| self.times[((self.times.len() - 1) as f64 * q).round() as usize];
        let mut json = serde_json::json!({
            "name": name,
            "kind": kind,
            "backend": unit.backend(),
            "compile_ms": compile_ms,
            "step_ms": {"median": pick(0.5), "p90": pick(0.9)},
            "steps": args.steps,
            "threads": args.threads,
            "arena_bytes": unit.arena_bytes(),
            "peak_rss_bytes": peak_rss_bytes(),
        });
        if let Some(profile) = &self.profile {
            json["profile"] = profile.clone().into();
        }
        json
    }
}

/// A bench result: its JSON line with `--json`, else one line of text
/// (`what` median, p90 over `args.steps` `runs`, compile time, `tail`) and
/// the profile table.
fn print_result(r: &serde_json::Value, args: &BenchArgs, what: &str, runs: &str, tail: &str) {
    if args.json {
        println!("{r}");
        return;
    }
    println!(
        "{}: {what} median {:.3} ms, p90 {:.3} ms over {} {runs}; compile {:.1} ms; {tail}",
        r["name"].as_str().unwrap_or_default(),
        r["step_ms"]["median"].as_f64().unwrap_or(f64::NAN),
        r["step_ms"]["p90"].as_f64().unwrap_or(f64::NAN),
        args.steps,
        r["compile_ms"].as_f64().unwrap_or(f64::NAN),
    );
    print_profile(r);
}

/// The `"profile"` of a bench result as a table: each step's time per
/// training step, its share of the steps' sum (a loop's body steps, `in
/// #i: …`, are part of their loop's step `#i` and not summed again), and
/// its label.
fn print_profile(r: &serde_json::Value) {
    let Some(rows) = r["profile"].as_array() else { return };
    let outer = rows.iter().filter(|row| row["within"].as_bool() != Some(true));
    let total: f64 = outer.filter_map(|row| row["ms"].as_f64()).sum();
    println!("{:>9} {:>6}  step", "ms/step", "share");
    for row in rows {
        let ms = row["ms"].as_f64().unwrap_or(0.0);
        let share = if total > 0.0 { 100.0 * ms / total } else { 0.0 };
        println!("{ms:>9.4} {share:>5.1}%  #{} {}", row["step"], row["label"].as_str().unwrap_or_default());
    }
}

/// The process's peak resident set (`VmHWM`), 0 where /proc is unavailable.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
