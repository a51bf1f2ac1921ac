//! `tfc bench FILE`: times the training steps of a program. Every `train`
//! block runs `--warmup` untimed and `--steps` timed steps on its first
//! batch (one fixed batch reused, as the peer benchmarks do); the other
//! statements run as usual with their output discarded. Prints one JSON
//! object per train block:
//!
//! `{"name": "train 2 step (batch 64)", "backend": "jit", "compile_ms": …,
//!   "step_ms": {"median": …, "p90": …}, "steps": 100, "threads": 1,
//!   "arena_bytes": …, "peak_rss_bytes": …, "loss_first": …, "loss_last": …}`
//!
//! With `--profile`, each step of the compiled training step (a fused
//! kernel, a matrix product, a convolution…) is timed during the timed
//! steps: the JSON gains `"profile": [{"step": i, "label": …, "ms": …}]`
//! (milliseconds per training step, slowest first) and the text output a
//! table. With several threads, steps that run side by side both count.
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
use crate::ir::plan::TrainPlan;
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
                if args.json {
                    println!("{r}");
                } else {
                    println!(
                        "{}: step median {:.3} ms, p90 {:.3} ms over {} steps; compile {:.1} ms; loss {} -> {}",
                        r["name"].as_str().unwrap_or_default(),
                        r["step_ms"]["median"].as_f64().unwrap_or(f64::NAN),
                        r["step_ms"]["p90"].as_f64().unwrap_or(f64::NAN),
                        args.steps,
                        r["compile_ms"].as_f64().unwrap_or(f64::NAN),
                        r["loss_first"],
                        r["loss_last"],
                    );
                    print_profile(&r);
                }
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
    let init: Vec<_> = plan.params.iter().chain(&plan.states).map(|(_, id)| *id).collect();
    ex.demand(&init)?;
    let mut carried: Vec<Tensor> =
        plan.params.iter().chain(&plan.states).map(|(_, id)| ex.value(*id).cloned()).collect::<Result<_, _>>()?;
    let batches = crate::runtime::dataset::elements(ex, &plan.data, 0)?;
    let batch = batches
        .first()
        .cloned()
        .ok_or_else(|| Diagnostic::new(Code::Runtime, "the training data has no batches").label(plan.span, "here"))?;
    let size = batch.first().and_then(|t| t.shape().first().copied()).unwrap_or(0);
    let (_, region) = plan
        .steps
        .iter()
        .find(|(b, _)| *b == size)
        .ok_or_else(|| Diagnostic::internal(format!("no training step was compiled for batches of {size}")))?;
    let name = crate::passes::units::regions(ex.program)
        .into_iter()
        .find(|r| std::ptr::eq(r.region, region))
        .map(|r| r.name)
        .unwrap_or_else(|| format!("train step (batch {size})"));
    let t = Instant::now();
    let compiled = ex.compile_region_carrying(region, carried.len())?;
    let mut carry = Carry::new(std::mem::take(&mut carried));
    let compile_ms = front_ms + t.elapsed().as_secs_f64() * 1e3;
    let arena_bytes = compiled.unit().arena_bytes();
    let mut times = Vec::with_capacity(args.steps);
    let step_at = batch.len();
    let mut head = batch;
    head.push(Tensor::from_literal(&Literal::Float(vec![0.0]), &TensorType::scalar(DType::F32))?);
    let (mut loss_first, mut loss_last) = (None, f64::NAN);
    let profiled = Some(compiled.unit()).filter(|_| args.profile);
    for step in 1..=args.warmup + args.steps {
        crate::interrupt::check()?;
        if step == args.warmup + 1 {
            profiled.inspect(|unit| unit.set_profiling(true));
        }
        let t = Instant::now();
        // The batch is one fixed input reused every step (as in the peer
        // benchmarks); only the step number is new.
        head[step_at] = Tensor::from_literal(&Literal::Float(vec![step as f64]), &TensorType::scalar(DType::F32))?;
        let out = ex.run_carrying(&compiled, &head, &mut carry)?;
        let loss = out.first().and_then(|t| t.to_f64_vec().first().copied()).unwrap_or(f64::NAN);
        let elapsed = t.elapsed().as_secs_f64() * 1e3;
        if step > args.warmup {
            times.push(elapsed);
        }
        loss_first.get_or_insert(loss);
        loss_last = loss;
    }
    let profile = profiled.map(|unit| {
        unit.set_profiling(false);
        let mut times = unit.profile();
        times.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        let per_step = 1e3 / args.steps as f64;
        let rows =
            times.iter().map(|t| serde_json::json!({"step": t.index, "label": t.label, "ms": t.seconds * per_step}));
        rows.collect::<Vec<_>>()
    });
    for (slot, t) in plan.result_slots.iter().zip(carry.into_values()?) {
        ex.slots.insert(*slot, t);
    }
    times.sort_by(f64::total_cmp);
    let pick = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let backend = compiled.unit().backend();
    let mut json = serde_json::json!({
        "name": name,
        "backend": backend,
        "compile_ms": compile_ms,
        "step_ms": {"median": pick(0.5), "p90": pick(0.9)},
        "steps": args.steps,
        "threads": args.threads,
        "arena_bytes": arena_bytes,
        "peak_rss_bytes": peak_rss_bytes(),
        "loss_first": loss_first.unwrap_or(f64::NAN),
        "loss_last": loss_last,
    });
    if let Some(profile) = profile {
        json["profile"] = profile.into();
    }
    Ok(json)
}

/// The `"profile"` of a bench result as a table: each step's time per
/// training step, its share of their sum, and its label.
fn print_profile(r: &serde_json::Value) {
    let Some(rows) = r["profile"].as_array() else { return };
    let total: f64 = rows.iter().filter_map(|row| row["ms"].as_f64()).sum();
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
