//! `tfc plot LOG... -o FILE.svg|FILE.png`: draws training logs (the JSON
//! lines of a train block's `log`, §9) — loss and every metric against
//! steps or epochs, one panel per series and one line per log, with a
//! legend naming each log.
//!
//! Contract: the output format is the extension of `-o` (an unknown one is
//! a usage error, before anything is read). Every log must be readable
//! (E0001) and have a point to draw (E0005); malformed lines are skipped,
//! and a warning on stderr counts them and names the first as `file:line`.
//! The picture is written atomically (a temporary file beside it, then a
//! rename), so a failure never leaves a partial file. Nothing goes to
//! stdout.
//!
//! Example: `tfc plot runs/a.jsonl runs/b.jsonl -o compare.png`.

use crate::diag::{Code, Diagnostic};
use crate::io::plot::{chart, Format, Run, TrainLog, XAxis, YScale};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Clone)]
pub struct PlotArgs {
    /// Training logs: the JSON-lines files a train block's `log` setting writes.
    #[arg(required = true, value_name = "LOG")]
    logs: Vec<PathBuf>,
    /// The picture to write; its extension picks the format: .svg or .png.
    #[arg(short, long, value_name = "FILE", value_parser = output_path)]
    output: PathBuf,
    /// The x axis [default: epochs when every line of every log is at another epoch, else steps].
    #[arg(long, value_enum)]
    x: Option<XChoice>,
    /// The y axes: logarithmic where every value is positive (`log`), never (`linear`), or where the values also span two decades (`auto`).
    #[arg(long, value_enum, default_value_t = YChoice::Auto)]
    y_scale: YChoice,
    /// The title [default: the logs' names].
    #[arg(long)]
    title: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum XChoice {
    Step,
    Epoch,
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum YChoice {
    Auto,
    Linear,
    Log,
}

/// `-o`'s value, refused unless its extension names a format.
fn output_path(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    match Format::of(&path) {
        Some(_) => Ok(path),
        None => Err("the extension names no format tfc plot writes: use .svg or .png".into()),
    }
}

pub fn plot(args: &PlotArgs) -> Result<(), Vec<Diagnostic>> {
    let format = Format::of(&args.output).ok_or_else(|| vec![Diagnostic::internal("plot: -o was not checked")])?;
    let (mut logs, mut errors) = (Vec::new(), Vec::new());
    for path in &args.logs {
        match TrainLog::read(path).and_then(|log| usable(path, log)) {
            Ok(log) => logs.push(log),
            Err(d) => errors.push(d),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let runs: Vec<Run> =
        args.logs.iter().zip(&logs).map(|(p, log)| Run { name: p.display().to_string(), log }).collect();
    let x = match args.x {
        Some(XChoice::Step) => XAxis::Step,
        Some(XChoice::Epoch) => XAxis::Epoch,
        None => XAxis::auto(&logs.iter().collect::<Vec<_>>()),
    };
    let y = match args.y_scale {
        YChoice::Auto => YScale::Auto,
        YChoice::Linear => YScale::Linear,
        YChoice::Log => YScale::Log,
    };
    let title = args.title.clone().unwrap_or_else(|| default_title(&runs));
    let (scene, notes) = chart(&runs, x, y, &title);
    for n in notes {
        eprintln!("note: {n}");
    }
    crate::io::checkpoint::write_atomic(&args.output, &[&format.encode(&scene)]).map_err(|d| vec![d])
}

/// The log if it has a point to draw (else E0005), after warning about its
/// malformed lines.
fn usable(path: &Path, log: TrainLog) -> Result<TrainLog, Diagnostic> {
    let first = log.first_malformed.as_ref().map(|(line, why)| format!("{}:{line}: {why}", path.display()));
    if !log.has_values() {
        let mut d = Diagnostic::new(Code::NoPoints, format!("the log `{}` has no points to plot", path.display()));
        d = match &first {
            Some(f) => d.note(format!("all {} of its lines are malformed; the first: {f}", log.malformed)),
            None => d.help("a train block's `log \"path\"` setting writes one JSON line per log point"),
        };
        return Err(d);
    }
    if let Some(f) = first {
        let n = log.malformed;
        eprintln!(
            "warning: skipped {n} malformed line{} of `{}`; the first: {f}",
            if n == 1 { "" } else { "s" },
            path.display()
        );
    }
    Ok(log)
}

/// The logs' names, or their number when the names would not fit.
fn default_title(runs: &[Run]) -> String {
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    let joined = names.join(", ");
    if joined.chars().count() <= 70 {
        joined
    } else {
        format!("{} training logs", runs.len())
    }
}
