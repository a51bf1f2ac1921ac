//! Input-pipeline speed (issue 6): the mnist_mlp training step fed by the
//! full pipeline against the same step on batches already in memory, and
//! the pipeline alone. Everything runs in this one process, one setup after
//! the other, so that a busy machine slows both sides of a comparison alike.
//!
//! - full pipeline: `load_idx` of the gzipped files → `map(prepare, parallel
//!   = auto)` → `shuffle(60000)` → `batch(64)` → `prefetch(auto)`;
//! - in memory: the same batches with `cache()` at the end, so that every
//!   epoch after the first replays batches held in memory;
//! - pipeline alone: passes of the full pipeline consumed by a trivial
//!   `evaluate`, after one statement that loads the files.
//!
//! The step time of a setup is the time of epochs 2..N (taken from the
//! train block's log: examples / examples-per-second at the end of each
//! epoch) over their steps, so it includes every wait for input at the start
//! of those epochs; epoch 1 (file loading, the first cache fill) is left out
//! of both sides.
//!
//! The two training setups run alternately, `--rounds` times each, and the
//! medians are compared (with the median of the rounds' ratios), because
//! this machine's speed drifts by tens of percent from one minute to the
//! next.
//!
//! Run: `cargo bench --bench pipeline -- [--backend interp|jit] [--epochs N]
//! [--passes N] [--rounds N]` (default: both backends, 3 epochs, 3 passes,
//! 3 rounds). `--verbose`
//! adds the pipeline's own reports (waits per epoch) on stderr.

use std::path::{Path, PathBuf};
use std::time::Instant;
use tfc::backend::BackendKind as Backend;
use tfc::driver::Session;
use tfc::runtime::exec::{Executor, RunOptions};

const PIPE: &str = "train_set |> shuffle(60000, seed = 1) |> batch(64) |> prefetch(auto)";
const MEM: &str = "train_set |> shuffle(60000, seed = 1) |> batch(64) |> cache()";
const EXAMPLES: usize = 60000;
const STEPS_PER_EPOCH: usize = EXAMPLES.div_ceil(64);

struct Args {
    backends: Vec<Backend>,
    epochs: usize,
    passes: usize,
    rounds: usize,
    verbose: bool,
}

fn args() -> Args {
    let mut a = Args { backends: vec![Backend::Interp, Backend::Jit], epochs: 3, passes: 3, rounds: 3, verbose: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--backend" => {
                a.backends = match it.next().as_deref() {
                    Some("interp") => vec![Backend::Interp],
                    Some("jit") => vec![Backend::Jit],
                    other => panic!("--backend interp|jit, not {other:?}"),
                }
            }
            "--epochs" => {
                a.epochs = it.next().and_then(|n| n.parse().ok()).filter(|&n| n >= 2).expect("--epochs N ≥ 2")
            }
            "--passes" => {
                a.passes = it.next().and_then(|n| n.parse().ok()).filter(|&n| n >= 1).expect("--passes N ≥ 1")
            }
            "--rounds" => {
                a.rounds = it.next().and_then(|n| n.parse().ok()).filter(|&n| n >= 1).expect("--rounds N ≥ 1")
            }
            "--verbose" => a.verbose = true,
            // `cargo bench` passes `--bench`.
            _ => {}
        }
    }
    a
}

fn name(b: Backend) -> &'static str {
    b.name()
}

/// Runs the program in `text` (written to `dir`), returns the seconds each
/// effect took.
fn run(dir: &Path, file: &str, text: &str, backend: Backend, verbose: bool) -> Vec<f64> {
    let path = dir.join(file);
    std::fs::write(&path, text).expect("the temporary directory is writable");
    let mut session = Session::new();
    let id = session.load_file(&path).expect("the benchmark program reads");
    // What `tfc run` runs: the optimized program.
    let program = session
        .compile(id, &tfc::passes::Options::default())
        .unwrap_or_else(|d| panic!("the benchmark program compiles: {d:?}"));
    let options = RunOptions { base_dir: session.base_dir(id), backend, verbose, ..RunOptions::default() };
    let mut sink = std::io::sink();
    let mut ex = Executor::new(&program, &mut sink, options).expect("an executor");
    program
        .effects
        .iter()
        .map(|e| {
            let t = Instant::now();
            ex.run_effect(e).unwrap_or_else(|d| panic!("the benchmark program runs: {d:?}"));
            t.elapsed().as_secs_f64()
        })
        .collect()
}

/// Seconds from the start of training to the end of each epoch, from the
/// log's cumulative examples per second.
fn epoch_ends(log: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(log).expect("the train block wrote its log");
    text.lines()
        .enumerate()
        .map(|(k, line)| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
            let rate = v["examples_per_sec"].as_f64().expect("examples_per_sec");
            ((k + 1) * EXAMPLES) as f64 / rate
        })
        .collect()
}

/// Mean step time (ms) over epochs 2..N of training on `data`.
fn step_ms(dir: &Path, data: &str, a: &Args, backend: Backend, tag: &str) -> (f64, Vec<f64>) {
    let template = include_str!("pipeline/mnist_train.tfl");
    let log = dir.join(format!("{tag}.jsonl"));
    let text = template
        .replace("on DATA {", &format!("on {data} {{"))
        .replace("epochs = EPOCHS", &format!("epochs = {}\n    log {:?}", a.epochs, log.display().to_string()))
        .replace("../../examples", &examples().display().to_string());
    run(dir, &format!("{tag}.tfl"), &text, backend, a.verbose);
    let ends = epoch_ends(&log);
    let epochs: Vec<f64> = std::iter::once(ends[0]).chain(ends.windows(2).map(|w| w[1] - w[0])).collect();
    let later = ends[ends.len() - 1] - ends[0];
    (later * 1e3 / ((ends.len() - 1) * STEPS_PER_EPOCH) as f64, epochs)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

fn main() {
    let a = args();
    let dir = std::env::temp_dir().join(format!("tfc-pipeline-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("input pipeline, mnist_mlp, batches of 64, {cores} cores");
    for &backend in &a.backends {
        let b = name(backend);
        // The pipeline alone: one statement loads the files, then each pass
        // is one `evaluate` over the whole pipeline.
        let mut text = format!(
            "fn prepare(image, label) = (reshape(image, [784]) / 255.0, label)\n\
             let train_set = load_idx(\"{0}/data/mnist/train-images-idx3-ubyte.gz\", \
             \"{0}/data/mnist/train-labels-idx1-ubyte.gz\") |> map(prepare, parallel = auto)\n\
             print(sum(first(train_set |> batch(64))[0]))\n",
            examples().display()
        );
        for _ in 0..a.passes {
            text.push_str(&format!("print(evaluate({PIPE}, fn(x, y) = mean(x)))\n"));
        }
        let times = run(&dir, "alone.tfl", &text, backend, a.verbose);
        // Effects: the first batch, its print, then a pass and its print each.
        let passes: Vec<f64> = times[2..].iter().step_by(2).map(|t| EXAMPLES as f64 / t).collect();
        let best = passes.iter().copied().fold(0.0, f64::max);
        println!(
            "[{b}] pipeline alone: load {:.2} s; passes {} examples/s (best {best:.0})",
            times[0],
            passes.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ")
        );
        let secs = |v: &[f64]| v.iter().map(|t| format!("{t:.2}")).collect::<Vec<_>>().join(", ");
        let (mut pipes, mut mems, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=a.rounds {
            let (pipe, pipe_epochs) = step_ms(&dir, PIPE, &a, backend, &format!("pipe-{b}-{round}"));
            let (mem, mem_epochs) = step_ms(&dir, MEM, &a, backend, &format!("mem-{b}-{round}"));
            println!(
                "[{b}] round {round}: full pipeline {pipe:.3} ms/step (epochs {} s), in memory {mem:.3} ms/step \
                 (epochs {} s), ratio {:.3}",
                secs(&pipe_epochs),
                secs(&mem_epochs),
                pipe / mem
            );
            pipes.push(pipe);
            mems.push(mem);
            ratios.push(pipe / mem);
        }
        let (pipe, mem, ratio) = (median(&mut pipes), median(&mut mems), median(&mut ratios));
        println!("[{b}] full pipeline: {pipe:.3} ms/step (median of {} rounds)", a.rounds);
        println!("[{b}] in memory:     {mem:.3} ms/step");
        let consumed = 64.0 / (pipe / 1e3);
        println!(
            "[{b}] ratio of medians {:.3}x, median ratio {ratio:.3}x (target <= 1.05x); the step consumes \
             {consumed:.0} examples/s, the pipeline alone gives {:.1}x that (target >= 5x); a 1 ms step of 64 \
             consumes 64000 examples/s: {:.2}x",
            pipe / mem,
            best / consumed,
            best / 64000.0
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
