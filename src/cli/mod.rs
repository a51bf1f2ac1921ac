//! The command line: `tfc check|run|build|repl|bench|plot`. Exit codes: 0 success, 1 a
//! program error (diagnostics on stderr), 2 a usage error. Standard output
//! carries only what the program prints (or what `--emit` asks for).

mod bench;
mod build;
mod distributed;
mod exports;
mod library;
mod onnx;
mod plot;

use crate::diag::{render, Diagnostic};
use crate::driver::Session;
use clap::{Parser, Subcommand};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tfc",
    version,
    disable_version_flag = true,
    arg_required_else_help = true,
    about = "A compiler for deep-learning programs written in .tfl"
)]
struct Cli {
    /// Print the version (with `--verbose`: also the CPU features and the kernels' instruction-set tier).
    #[arg(short = 'V', long)]
    version: bool,
    /// With `--version`: what this machine's CPU offers and which kernels run.
    #[arg(long)]
    verbose: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and check a program (names, dtypes, shapes) without running it.
    Check {
        /// The .tfl file.
        file: PathBuf,
    },
    /// Check and run a program; its output goes to stdout.
    Run {
        /// The .tfl file.
        file: PathBuf,
        /// Stop at the first op that produces a NaN or infinity, naming its source line.
        #[arg(long)]
        check_numerics: bool,
        /// Report run-time choices on stderr (the input pipeline's buffer sizes and workers).
        #[arg(long)]
        verbose: bool,
        /// Run without the graph optimizer.
        #[arg(short = 'O', value_name = "LEVEL", value_parser = ["0"], num_args = 1)]
        opt_level: Option<String>,
        #[command(flatten)]
        compute: Compute,
        /// Refuse to run a training step, metric or map function with a kernel the backend would leave to the host interpreter.
        #[arg(long)]
        strict: bool,
        /// Mixed precision for every training step, over the train blocks' `precision`: bf16, f16 or f32 (none).
        #[arg(long, value_name = "TYPE")]
        precision: Option<String>,
        /// Data-parallel training on N processes on this machine (through `mpirun`; needs a build with feature `mpi`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=4096))]
        workers: Option<u16>,
        /// Data-parallel training on these hosts and slots, e.g. `h1:2,h2:2`.
        #[arg(long, value_name = "HOST:N,...")]
        hosts: Option<String>,
        /// Data-parallel training on the hosts of an Open MPI hostfile (`name slots=N` lines).
        #[arg(long, value_name = "FILE")]
        hostfile: Option<PathBuf>,
        /// Data-parallel training: the virtual shards of each global batch (a power of two; the result depends on it, not on the number of processes) [default: up to 8].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
        shards: Option<u16>,
        /// Data-parallel training: seconds a rank waits for the others before the watchdog stops the job [default: from the measured step time, at least 10].
        #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
        step_timeout: Option<f64>,
    },
    /// Compile a program (parse, check, optimize) and print a summary or an intermediate form.
    Build(BuildArgs),
    /// An interactive session: run statements one at a time (reads stdin when it is not a terminal).
    Repl {
        /// A .tfl file to load first; its bindings stay available.
        file: Option<PathBuf>,
        #[command(flatten)]
        compute: Compute,
    },
    /// Time the training steps and the inference (metrics over a dataset:
    /// `evaluate`, `accuracy`, `mean_loss`) of a program, one fixed batch reused.
    Bench {
        /// The .tfl file.
        file: PathBuf,
        /// Timed steps per train block.
        #[arg(long, default_value_t = 100)]
        steps: usize,
        /// Untimed steps before them.
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        #[command(flatten)]
        compute: Compute,
        /// Print one JSON object per train block (else one line of text).
        #[arg(long)]
        json: bool,
        /// Also time every step of the training step and list them, slowest first.
        #[arg(long)]
        profile: bool,
        /// Refuse to run a training step with a kernel the backend would leave to the host interpreter.
        #[arg(long)]
        strict: bool,
        /// Mixed precision for every training step, over the train blocks' `precision`: bf16, f16 or f32 (none).
        #[arg(long, value_name = "TYPE")]
        precision: Option<String>,
    },
    /// Draw training logs (the JSON lines of a train block's `log`): loss and
    /// each metric against steps or epochs, one line per log, as SVG or PNG.
    Plot(plot::PlotArgs),
}

#[derive(clap::Args, Clone)]
struct BuildArgs {
    /// The .tfl file.
    file: PathBuf,
    /// Print an intermediate form instead of the summary.
    #[arg(long, value_enum)]
    emit: Option<build::Emit>,
    /// Write the output to this file instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// With `--emit onnx|lib`: which `export fn` to write (onnx: needed when there are several; lib: repeatable, default all).
    #[arg(long, value_name = "NAME")]
    export: Vec<String>,
    /// With `--emit lib`: the sizes an export's open size (its batch) is compiled at, e.g. `--batch 1,64`.
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    batch: Vec<usize>,
    /// With `--emit onnx|lib`: worker threads for running the program (default: all cores).
    #[arg(long)]
    threads: Option<u16>,
    /// Print the IR (and plan) after this pass to stderr; repeatable.
    #[arg(long, value_name = "PASS")]
    dump_after: Vec<String>,
    /// Skip this pass; repeatable.
    #[arg(long, value_name = "PASS")]
    disable_pass: Vec<String>,
    /// No optimization.
    #[arg(short = 'O', value_name = "LEVEL", value_parser = ["0"], num_args = 1)]
    opt_level: Option<String>,
    #[arg(skip)]
    no_opt: bool,
    /// Print the time each stage and pass took to stderr.
    #[arg(long)]
    time_passes: bool,
    /// Print one JSON object with per-graph sizes and compile times.
    #[arg(long = "report", value_name = "FORMAT", value_parser = ["json"])]
    report: Option<String>,
    #[arg(skip)]
    report_json: bool,
    /// Reject programs whose planned memory exceeds this many bytes (default: the machine's available memory).
    #[arg(long, value_name = "BYTES")]
    memory_limit: Option<u64>,
    /// Mixed precision for every training step, over the train blocks' `precision`: bf16, f16 or f32 (none).
    #[arg(long, value_name = "TYPE")]
    precision: Option<String>,
    /// Plan the data-parallel training steps of N processes, as `tfc run --workers N` runs them (nothing is launched).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=4096))]
    workers: Option<u16>,
    /// Plan data-parallel training steps with N virtual shards per global batch, as `tfc run --shards N`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    shards: Option<u16>,
    /// Plan for this device (`--emit plan`, `--emit wgsl`): `cpu` or `gpu` [default: cpu].
    #[arg(long, value_enum, value_name = "DEVICE")]
    device: Option<DeviceArg>,
}

/// Where and how `run`, `bench` and `repl` compute: the backend, the device
/// and the worker threads.
#[derive(clap::Args, Debug)]
struct Compute {
    /// Which backend runs training steps, metrics and `map` functions (`jit`: compiled kernels).
    #[arg(long, value_enum, default_value_t = crate::backend::BackendKind::Jit)]
    backend: crate::backend::BackendKind,
    /// Where training steps, metrics and `map` functions run: `cpu`, `gpu` (a build with feature `gpu`), or `auto` (a GPU if there is one) [default: cpu].
    #[arg(long, value_enum, value_name = "DEVICE")]
    device: Option<DeviceArg>,
    /// Worker threads of the JIT backend [default: the machine's cores]; results are the same for any count.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
}

/// `--device`: where the compiled regions run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    /// The CPU backend (`--backend` picks jit or interp).
    Cpu,
    /// The GPU backend (wgpu compute shaders; a build with feature `gpu`).
    Gpu,
    /// The GPU when one is there (the adapter is named on stderr), else the CPU.
    Auto,
}

/// The backend `--device` asks for, over `--backend`: `gpu` needs an
/// adapter (an error naming what is missing, never a quiet CPU run), and
/// `auto` says on stderr which device it picked.
pub(crate) fn backend_for(
    device: Option<DeviceArg>,
    backend: crate::backend::BackendKind,
    check_numerics: bool,
) -> Result<crate::backend::BackendKind, Diagnostic> {
    // Flags that would take the run off the GPU are refused, not obeyed
    // in silence.
    if matches!(device, Some(DeviceArg::Gpu | DeviceArg::Auto)) {
        let conflict = match (backend, check_numerics) {
            (crate::backend::BackendKind::Interp, _) => Some("`--backend interp` runs the reference interpreter"),
            (_, true) => Some("`--check-numerics` runs the reference interpreter, which checks every op's result"),
            _ => None,
        };
        if let Some(why) = conflict {
            return Err(Diagnostic::new(
                crate::diag::Code::BadValue,
                format!("`--device` cannot be combined with it: {why}"),
            )
            .help("drop one of the two flags"));
        }
    }
    match device {
        None | Some(DeviceArg::Cpu) => Ok(backend),
        #[cfg(feature = "gpu")]
        Some(DeviceArg::Gpu) => crate::backend::gpu::device::gpu().map(|_| crate::backend::BackendKind::Gpu),
        #[cfg(feature = "gpu")]
        Some(DeviceArg::Auto) => Ok(match crate::backend::gpu::device::gpu() {
            Ok(gpu) => {
                eprintln!("tfc: --device auto: running on the GPU {}", gpu.describe());
                crate::backend::BackendKind::Gpu
            }
            Err(d) => {
                eprintln!("tfc: --device auto: running on the CPU ({})", d.message);
                backend
            }
        }),
        #[cfg(not(feature = "gpu"))]
        Some(DeviceArg::Gpu) => {
            Err(Diagnostic::new(crate::diag::Code::Unsupported, "this tfc was built without the GPU backend")
                .help("build it with `cargo build --release --features gpu`, or run with `--device cpu`"))
        }
        #[cfg(not(feature = "gpu"))]
        Some(DeviceArg::Auto) => {
            eprintln!("tfc: --device auto: running on the CPU (this tfc was built without the GPU backend)");
            Ok(backend)
        }
    }
}

/// Runs the CLI with the process arguments.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let Some(command) = cli.command.as_ref().filter(|_| !cli.version) else {
        println!("tfc {}", env!("CARGO_PKG_VERSION"));
        if cli.verbose {
            println!("{}", crate::backend::cpu::isa::describe());
        }
        return ExitCode::SUCCESS;
    };
    let mut session = Session::new();
    // A tier forced with `TFC_ISA` that this machine cannot run is an
    // error before anything runs, not a silent portable fallback.
    if let Err(why) = crate::backend::cpu::isa::chosen() {
        report(
            &session,
            &[Diagnostic::new(crate::diag::Code::Isa, why)
                .help("TFC_ISA is one of portable, avx512, amx; `tfc --version --verbose` shows what this CPU has")],
        );
        return ExitCode::from(1);
    }
    if let Command::Repl { file, compute: Compute { backend, device, threads } } = command {
        let backend = match backend_for(*device, *backend, false) {
            Ok(b) => b,
            Err(d) => {
                report(&session, &[d]);
                return ExitCode::from(1);
            }
        };
        let options =
            crate::runtime::exec::RunOptions { backend, threads: threads_or_cores(*threads), ..Default::default() };
        return crate::repl::main(file.as_deref(), options);
    }
    let precision = match command {
        Command::Run { precision, .. } | Command::Bench { precision, .. } => precision.as_deref(),
        Command::Build(args) => args.precision.as_deref(),
        _ => None,
    };
    if let Some(name) = precision {
        match crate::trace::precision_named(name) {
            Ok(dtype) => session.precision = Some(dtype.unwrap_or(crate::ir::DType::F32)),
            Err(d) => {
                report(&session, &[d.note("from `--precision`")]);
                return ExitCode::from(1);
            }
        }
    }
    let result = match command {
        Command::Check { file } => check(&mut session, file),
        Command::Run {
            file,
            check_numerics,
            verbose,
            opt_level,
            compute: Compute { backend, device, threads },
            strict,
            workers,
            hosts,
            hostfile,
            shards,
            step_timeout,
            ..
        } => {
            let spread = distributed::Spread {
                workers: workers.map(usize::from),
                hosts: hosts.as_deref(),
                hostfile: hostfile.as_ref(),
            };
            // Started by a launcher: this process's rank, and its world.
            let joined = match distributed::launch_if_asked(&spread) {
                Ok(Some(status)) => return status,
                Ok(None) => {
                    distributed::placement().and_then(|p| p.map(|p| Ok((p, distributed::join(p)?))).transpose())
                }
                Err(d) => Err(d),
            };
            let (placement, world) = match joined {
                Ok(Some((p, w))) => (Some(p), Some(w)),
                Ok(None) => (None, None),
                Err(d) => {
                    report(&session, &[d]);
                    return ExitCode::from(1);
                }
            };
            if placement.is_some() || shards.is_some() {
                let world = placement.map_or(1, |p| p.size);
                session.data_parallel = Some(crate::ir::plan::DataParallel { shards: shards.map(usize::from), world });
            }
            let backend = match backend_for(*device, *backend, *check_numerics) {
                Ok(b) => b,
                Err(d) => {
                    report(&session, &[d]);
                    return ExitCode::from(1);
                }
            };
            let options = crate::runtime::exec::RunOptions {
                check_numerics: *check_numerics,
                // Rank 0 reports for all.
                verbose: *verbose && placement.is_none_or(|p| p.rank == 0),
                backend,
                threads: rank_threads(*threads, world.as_ref()),
                strict: *strict,
                world: world.clone(),
                step_timeout: step_timeout.map(std::time::Duration::from_secs_f64),
                ..Default::default()
            };
            let result = run(&mut session, file, options, opt_level.is_none());
            match (result, placement) {
                // A failed rank leaves MPI without finalizing, which makes
                // the launcher stop the other ranks at once; each error
                // names the rank it happened on.
                (Err(diags), Some(p)) if p.size > 1 => {
                    std::mem::forget(world);
                    let on = |d: Diagnostic| d.note(format!("on rank {} of {}", p.rank, p.size));
                    Err(diags.into_iter().map(on).collect())
                }
                (result, _) => result,
            }
        }
        Command::Bench {
            file,
            steps,
            warmup,
            compute: Compute { threads, backend, device },
            json,
            profile,
            strict,
            ..
        } => {
            let backend = match backend_for(*device, *backend, false) {
                Ok(b) => b,
                Err(d) => {
                    report(&session, &[d]);
                    return ExitCode::from(1);
                }
            };
            let args = bench::BenchArgs {
                file,
                steps: *steps,
                warmup: *warmup,
                threads: threads_or_cores(*threads),
                backend,
                json: *json,
                profile: *profile,
                strict: *strict,
            };
            bench::bench(&mut session, &args)
        }
        Command::Build(args) => {
            let mut args = args.clone();
            args.no_opt = args.opt_level.is_some();
            args.report_json = args.report.is_some();
            if args.workers.is_some() || args.shards.is_some() {
                let world = args.workers.map_or(1, usize::from);
                let shards = args.shards.map(usize::from);
                session.data_parallel = Some(crate::ir::plan::DataParallel { shards, world });
            }
            build::build(&mut session, &args)
        }
        Command::Plot(args) => plot::plot(args),
        Command::Repl { .. } => Ok(()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(diags) => {
            report(&session, &diags);
            // 130 = 128 + SIGINT, what shells report for a run stopped by Ctrl-C.
            let interrupted = diags.iter().any(|d| d.code == crate::diag::Code::Interrupted);
            ExitCode::from(if interrupted { 130 } else { 1 })
        }
    }
}

/// The optimizer passes `tfc run` uses. `-O0` rewrites nothing; the JIT
/// still needs kernels, a schedule and a memory plan, so with it `-O0` keeps
/// the annotating passes except fusion (one kernel per node).
fn run_passes(optimize: bool, backend: crate::backend::BackendKind) -> crate::passes::Options {
    match optimize {
        true => crate::passes::Options { target: backend.target(), ..crate::passes::Options::default() },
        false => crate::passes::Options::unoptimized(backend.target(), backend != crate::backend::BackendKind::Interp),
    }
}

/// Prints diagnostics on stderr, colored on a terminal.
fn report(session: &Session, diags: &[Diagnostic]) {
    let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let text = render(diags, &session.sources, color);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let n = diags.len();
    let _ = writeln!(err, "error: {n} error{} found", if n == 1 { "" } else { "s" });
}

fn check(session: &mut Session, file: &std::path::Path) -> Result<(), Vec<Diagnostic>> {
    let id = session.load_file(file)?;
    session.check(id)?;
    Ok(())
}

fn run(
    session: &mut Session,
    file: &std::path::Path,
    options: crate::runtime::exec::RunOptions,
    optimize: bool,
) -> Result<(), Vec<Diagnostic>> {
    let id = session.load_file(file)?;
    let program = session.compile(id, &run_passes(optimize, options.backend))?;
    refuse_host_kernels(&program, &options)?;
    let options = crate::runtime::exec::RunOptions { base_dir: session.base_dir(id), ..options };
    crate::interrupt::install();
    let stdout = std::io::stdout();
    // Rank 0 of a data-parallel run prints; the others compute the same.
    let mut out: Box<dyn Write> = match options.is_primary() {
        true => Box::new(std::io::LineWriter::new(stdout.lock())),
        false => Box::new(std::io::sink()),
    };
    let result = crate::runtime::exec::execute(&program, &mut out, options).map_err(|d| vec![d]);
    let _ = out.flush();
    result
}

/// Under `--strict`, every kernel of a region that the plan leaves to the
/// host interpreter is an error at its line, before anything runs.
pub(crate) fn refuse_host_kernels(
    program: &crate::ir::Program,
    options: &crate::runtime::exec::RunOptions,
) -> Result<(), Vec<Diagnostic>> {
    let found = match options.strict {
        true => crate::passes::partition::host_kernels(program),
        false => Vec::new(),
    };
    if found.is_empty() {
        Ok(())
    } else {
        Err(found)
    }
}

/// `--step-timeout`: a positive, finite number of seconds.
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() => Ok(s),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

/// `--threads`; without it, a rank of a data-parallel run shares its
/// host's cores with the other ranks there (as MPI counts them), and a
/// single process runs the machine's cores.
fn rank_threads(threads: Option<u16>, world: Option<&std::sync::Arc<dyn crate::dist::Communicator>>) -> usize {
    match (threads, world.filter(|w| w.size() > 1)) {
        (None, Some(w)) => crate::dist::launch::threads_per_rank(threads_or_cores(None), w.ranks_on_this_host()),
        _ => threads_or_cores(threads),
    }
}

/// `--threads`, or the machine's cores when it is not given.
pub(super) fn threads_or_cores(threads: Option<u16>) -> usize {
    threads.map_or_else(|| std::thread::available_parallelism().map_or(1, usize::from), usize::from)
}
