//! The layout of `tfc plot`'s chart: training logs in, a `Scene` out.
//!
//! Contract: one panel per series name (`loss` first, then the metrics in
//! the order the logs first name them), stacked, all over the same x range
//! (steps or epochs) and each with its own y axis (linear, or logarithmic
//! where `YScale` asks for it or, by default, where every value is positive
//! and they span two decades or more — a loss usually does). In each panel,
//! one `Shape::Series` per run that has values of that name (a `null` value
//! is a gap), in the run's colour, with dots on the points when there are
//! few (at most 16 panels; a note names the series left out); tick labels on both axes, the panel's name above it, the title on
//! top and a legend naming each run below. The layout depends only on its
//! inputs, so pictures are reproducible.
//!
//! Example: two logs with `loss` and `acc` give a title, two panels of two
//! series each, and a legend of two entries.

use super::scene::{text_width, Anchor, Color, Scene, Shape};
use super::ticks::Axis;
use super::trainlog::TrainLog;

/// What the x axis counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    Step,
    Epoch,
}

impl XAxis {
    /// Epochs when every line of every log is at another epoch (a log of
    /// epoch cadence), else steps.
    pub fn auto(logs: &[&TrainLog]) -> XAxis {
        let per_epoch = logs.iter().all(|l| {
            let mut epochs: Vec<f64> = l.points.iter().map(|p| p.epoch).collect();
            let n = epochs.len();
            epochs.sort_by(f64::total_cmp);
            epochs.dedup();
            epochs.len() == n
        });
        if per_epoch {
            XAxis::Epoch
        } else {
            XAxis::Step
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            XAxis::Step => "step",
            XAxis::Epoch => "epoch",
        }
    }
}

/// How the y axes scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YScale {
    /// Logarithmic where every value is positive and they span two decades.
    Auto,
    Linear,
    /// Logarithmic where every value is positive (else linear, with a note).
    Log,
}

/// One log to draw and the name its legend entry shows.
pub struct Run<'a> {
    pub name: String,
    pub log: &'a TrainLog,
}

/// The colours of the runs, in order (then again from the first).
const PALETTE: [Color; 10] = [
    Color(31, 119, 180),
    Color(255, 127, 14),
    Color(44, 160, 44),
    Color(214, 39, 40),
    Color(148, 103, 189),
    Color(140, 86, 75),
    Color(227, 119, 194),
    Color(127, 127, 127),
    Color(188, 189, 34),
    Color(23, 190, 207),
];

const WIDTH: f64 = 900.0;
const TITLE_H: f64 = 48.0;
const NAME_H: f64 = 26.0;
const PLOT_H: f64 = 200.0;
const TICKS_H: f64 = 22.0;
const GAP: f64 = 14.0;
const RIGHT: f64 = 28.0;
const TICK_SIZE: f64 = 11.0;
const LEGEND_SIZE: f64 = 15.0;
/// The panels one picture holds (a log of hundreds of keys would make a
/// picture too tall to draw or to look at).
const MAX_PANELS: usize = 16;
/// Runs with at most this many points in a panel get a dot on each.
const DOTS_UP_TO: usize = 40;

/// The chart of `runs`, and notes on what it could not do as asked.
pub fn chart(runs: &[Run], x: XAxis, y: YScale, title: &str) -> (Scene, Vec<String>) {
    let mut notes = Vec::new();
    let mut names = series_names(runs);
    if names.len() > MAX_PANELS {
        let left: Vec<String> = names.split_off(MAX_PANELS);
        notes.push(format!("only the first {MAX_PANELS} series are drawn; not: {}", left.join(", ")));
    }
    let xs = points(runs, x, None).map(|(_, px, _)| px);
    let x_axis = range(xs).map_or(Axis::new(0.0, 1.0, false), |(lo, hi)| Axis::new(lo, hi, false).padded(0.02));
    let mut panels = Vec::new();
    for name in &names {
        let values: Vec<f64> = points(runs, x, Some(name)).map(|(_, _, v)| v).collect();
        let (lo, hi) = range(values.iter().copied()).unwrap_or((0.0, 1.0));
        let positive = lo > 0.0;
        let log = match y {
            YScale::Linear => false,
            YScale::Auto => positive && hi / lo >= 100.0,
            YScale::Log => {
                if !positive {
                    notes.push(format!("`{name}` has values at or below 0, so its axis is linear"));
                }
                positive
            }
        };
        panels.push((name, Axis::new(lo, hi, log).padded(0.05)));
    }
    // The left margin fits the widest y tick label.
    let widest = panels
        .iter()
        .flat_map(|(_, a)| a.ticks().into_iter().map(|t| text_width(&a.label(t), TICK_SIZE)))
        .fold(0.0, f64::max);
    let left = (widest + 18.0).max(56.0).round();
    let (x0, x1) = (left, WIDTH - RIGHT);
    let mut shapes = Vec::new();
    shapes.push(Shape::Text {
        x: WIDTH / 2.0,
        y: TITLE_H / 2.0,
        text: title.to_string(),
        size: 20.0,
        anchor: Anchor::Middle,
        color: Color::INK,
    });
    let mut top = TITLE_H;
    for (name, y_axis) in &panels {
        let (y0, y1) = (top + NAME_H, top + NAME_H + PLOT_H);
        shapes.push(Shape::Text {
            x: x0,
            y: top + NAME_H / 2.0,
            text: name.to_string(),
            size: 16.0,
            anchor: Anchor::Start,
            color: Color::INK,
        });
        let to_px = |px: f64, v: f64| (x0 + x_axis.frac(px) * (x1 - x0), y1 - y_axis.frac(v) * (y1 - y0));
        for t in y_axis.ticks() {
            let py = to_px(0.0, t).1.round();
            shapes.push(Shape::Rect { x: x0, y: py, w: x1 - x0, h: 1.0, fill: Color::GRID });
            shapes.push(Shape::Rect { x: x0 - 5.0, y: py, w: 5.0, h: 1.0, fill: Color::AXIS });
            let label = y_axis.label(t);
            shapes.push(tick_label(x0 - 8.0, py, label, Anchor::End));
        }
        for t in x_axis.ticks() {
            let px = to_px(t, 1.0).0.round();
            shapes.push(Shape::Rect { x: px, y: y0, w: 1.0, h: y1 - y0, fill: Color::GRID });
            shapes.push(Shape::Rect { x: px, y: y1, w: 1.0, h: 5.0, fill: Color::AXIS });
            shapes.push(tick_label(px, y1 + 13.0, x_axis.label(t), Anchor::Middle));
        }
        frame(&mut shapes, x0, y0, x1, y1);
        for (i, run) in runs.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let Some(parts) = series(run, x, name) else { continue };
            let parts: Vec<Vec<(f64, f64)>> =
                parts.iter().map(|part| part.iter().map(|(px, v)| to_px(*px, *v)).collect()).collect();
            let count: usize = parts.iter().map(Vec::len).sum();
            let dots: Vec<Shape> = match count <= DOTS_UP_TO {
                true => parts.iter().flatten().map(|at| Shape::Dot { at: *at, r: 2.5, color }).collect(),
                false => Vec::new(),
            };
            shapes.push(Shape::Series { parts, color, width: 1.8 });
            shapes.extend(dots);
        }
        top = y1 + TICKS_H + GAP;
    }
    shapes.push(Shape::Text {
        x: (x0 + x1) / 2.0,
        y: top - GAP + 4.0,
        text: x.name().to_string(),
        size: 15.0,
        anchor: Anchor::Middle,
        color: Color::INK,
    });
    let bottom = legend(&mut shapes, runs, x0, x1, top + 18.0);
    (Scene { width: WIDTH as u32, height: bottom.ceil() as u32, shapes }, notes)
}

fn tick_label(x: f64, y: f64, text: String, anchor: Anchor) -> Shape {
    Shape::Text { x, y, text, size: TICK_SIZE, anchor, color: Color::AXIS }
}

/// The plot area's border, as four one-pixel rectangles.
fn frame(shapes: &mut Vec<Shape>, x0: f64, y0: f64, x1: f64, y1: f64) {
    let fill = Color::AXIS;
    shapes.push(Shape::Rect { x: x0, y: y0, w: x1 - x0, h: 1.0, fill });
    shapes.push(Shape::Rect { x: x0, y: y1, w: x1 - x0 + 1.0, h: 1.0, fill });
    shapes.push(Shape::Rect { x: x0, y: y0, w: 1.0, h: y1 - y0, fill });
    shapes.push(Shape::Rect { x: x1, y: y0, w: 1.0, h: y1 - y0, fill });
}

/// One entry per run: a short line in its colour and its name, in rows
/// that wrap at the plot's width. Returns the bottom of the last row.
fn legend(shapes: &mut Vec<Shape>, runs: &[Run], x0: f64, x1: f64, top: f64) -> f64 {
    const ROW: f64 = 24.0;
    let (mut x, mut y) = (x0, top + ROW / 2.0);
    for (i, run) in runs.iter().enumerate() {
        let name = fit(&run.name, x1 - x0 - 50.0);
        let w = 30.0 + text_width(&name, LEGEND_SIZE) + 20.0;
        if x > x0 && x + w > x1 {
            (x, y) = (x0, y + ROW);
        }
        let color = PALETTE[i % PALETTE.len()];
        shapes.push(Shape::Line { from: (x, y), to: (x + 24.0, y), color, width: 2.5 });
        shapes.push(Shape::Text {
            x: x + 30.0,
            y,
            text: name,
            size: LEGEND_SIZE,
            anchor: Anchor::Start,
            color: Color::INK,
        });
        x += w;
    }
    y + ROW / 2.0 + 8.0
}

/// `name`, or `...` and its end (the file name) where it is wider than
/// `width` at the legend's size.
fn fit(name: &str, width: f64) -> String {
    let chars: Vec<char> = name.chars().collect();
    let keep = ((width / text_width("x", LEGEND_SIZE)) as usize).max(4);
    match chars.len() > keep {
        true => format!("...{}", chars[chars.len() - (keep - 3)..].iter().collect::<String>()),
        false => name.to_string(),
    }
}

/// The series names of all runs: `loss` first, then by first appearance.
fn series_names(runs: &[Run]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for run in runs {
        for p in &run.log.points {
            for (name, v) in &p.values {
                if v.is_some() && !names.contains(name) {
                    names.push(name.clone());
                }
            }
        }
    }
    names.sort_by_key(|n| n != "loss");
    names
}

/// `(run, x, value)` of every value (of series `name`, or of any).
fn points<'a>(runs: &'a [Run], x: XAxis, name: Option<&'a str>) -> impl Iterator<Item = (usize, f64, f64)> + 'a {
    runs.iter().enumerate().flat_map(move |(i, run)| {
        run.log.points.iter().flat_map(move |p| {
            let px = if x == XAxis::Step { p.step } else { p.epoch };
            p.values
                .iter()
                .filter(move |(n, _)| name.is_none_or(|want| n == want))
                .filter_map(move |(_, v)| v.filter(|v| v.is_finite()).map(|v| (i, px, v)))
        })
    })
}

/// The smallest and largest of `values`, if any.
fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |r, v| Some(r.map_or((v, v), |(lo, hi): (f64, f64)| (lo.min(v), hi.max(v)))))
}

/// A run's `(x, value)` pieces for series `name`, by x; a `null` ends a
/// piece. `None` when the run has no value of that name.
fn series(run: &Run, x: XAxis, name: &str) -> Option<Vec<Vec<(f64, f64)>>> {
    let mut at: Vec<(f64, Option<f64>)> = run
        .log
        .points
        .iter()
        .filter_map(|p| {
            let v = p.values.iter().find(|(n, _)| n == name)?.1;
            Some((if x == XAxis::Step { p.step } else { p.epoch }, v.filter(|v| v.is_finite())))
        })
        .collect();
    at.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut parts = vec![Vec::new()];
    for (px, v) in at {
        match v {
            Some(v) => parts.last_mut().expect("one part at least").push((px, v)),
            None if parts.last().is_some_and(|p| !p.is_empty()) => parts.push(Vec::new()),
            None => {}
        }
    }
    parts.retain(|p| !p.is_empty());
    (!parts.is_empty()).then_some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str) -> TrainLog {
        TrainLog::parse(text)
    }

    #[test]
    fn one_panel_per_series_and_one_shape_per_run_in_each() {
        let a = log("{\"step\":1,\"epoch\":1,\"loss\":2.0,\"acc\":0.5}\n{\"step\":2,\"epoch\":1,\"loss\":1.0}\n");
        let b = log("{\"step\":1,\"epoch\":1,\"loss\":3.0}\n{\"step\":2,\"epoch\":1,\"acc\":0.7}\n");
        let runs = [Run { name: "a.jsonl".into(), log: &a }, Run { name: "b.jsonl".into(), log: &b }];
        let (scene, notes) = chart(&runs, XAxis::Step, YScale::Auto, "t");
        assert!(notes.is_empty());
        let series = scene.shapes.iter().filter(|s| matches!(s, Shape::Series { .. })).count();
        assert_eq!(series, 4);
        let texts: Vec<&str> = scene
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let (loss, acc) = (texts.iter().position(|t| *t == "loss"), texts.iter().position(|t| *t == "acc"));
        assert!(loss < acc && acc.is_some(), "loss comes first: {texts:?}");
        assert!(texts.contains(&"a.jsonl") && texts.contains(&"b.jsonl") && texts.contains(&"step"));
        // Every shape lies inside the picture.
        for s in &scene.shapes {
            if let Shape::Series { parts, .. } = s {
                for (x, y) in parts.iter().flatten() {
                    assert!(*x > 0.0 && *x < scene.width as f64 && *y > 0.0 && *y < scene.height as f64);
                }
            }
        }
    }

    /// Junk, extreme values and odd names draw without a panic, in both
    /// formats.
    #[test]
    fn any_log_text_draws_without_a_panic() {
        let pieces = [
            "{\"step\":1,\"epoch\":1,\"loss\":1e308}",
            "{\"step\":2,\"epoch\":1,\"loss\":-1e308}",
            "{\"step\":3,\"epoch\":1,\"loss\":1e-320,\"a<b&\":5e-324}",
            "{\"step\":-1e300,\"epoch\":0,\"x\":null}",
            "{\"step\":1e300,\"epoch\":0,\"x\":0}",
            "{\"step\":4,\"epoch\":2,\"é中\":1}",
            "{\"step\":5,\"epoch\":2,\"loss\":0}",
            "{\"step\"",
            "\u{0}\u{7f}",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..40 {
            let mut text = String::new();
            for _ in 0..6 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push_str(pieces[(seed % pieces.len() as u64) as usize]);
                text.push('\n');
            }
            let l = log(&text);
            let runs = [Run { name: "r".into(), log: &l }];
            for y in [YScale::Auto, YScale::Linear, YScale::Log] {
                for x in [XAxis::Step, XAxis::Epoch] {
                    let (scene, _) = chart(&runs, x, y, "t");
                    assert!(scene.height < 10_000, "{text}");
                    super::super::Format::Png.encode(&scene);
                    super::super::Format::Svg.encode(&scene);
                }
            }
        }
    }

    #[test]
    fn many_series_are_capped_and_long_names_shortened() {
        let keys: Vec<String> = (0..20).map(|k| format!("\"m{k:02}\": {k}")).collect();
        let l = log(&format!("{{\"step\": 1, \"epoch\": 1, {}}}\n", keys.join(", ")));
        let name = format!("{}/train.jsonl", "deep/".repeat(40));
        let runs = [Run { name: name.clone(), log: &l }];
        let (scene, notes) = chart(&runs, XAxis::Step, YScale::Auto, "t");
        assert_eq!(notes, ["only the first 16 series are drawn; not: m16, m17, m18, m19"]);
        assert_eq!(scene.shapes.iter().filter(|s| matches!(s, Shape::Series { .. })).count(), 16);
        let legend = scene.shapes.iter().find_map(|s| match s {
            Shape::Text { text, .. } if text.ends_with("train.jsonl") => Some(text.clone()),
            _ => None,
        });
        let legend = legend.expect("a legend entry");
        assert!(legend.starts_with("...") && text_width(&legend, LEGEND_SIZE) <= 900.0, "{legend}");
        assert_eq!(fit("a.jsonl", 500.0), "a.jsonl");
    }

    #[test]
    fn a_null_splits_a_series_and_epoch_logs_plot_by_epoch() {
        let l = log(
            "{\"step\":4,\"epoch\":1,\"loss\":2.0}\n{\"step\":8,\"epoch\":2,\"loss\":null}\n{\"step\":12,\"epoch\":3,\"loss\":1.0}\n{\"step\":16,\"epoch\":4,\"loss\":0.5}\n",
        );
        let run = Run { name: "l".into(), log: &l };
        assert_eq!(series(&run, XAxis::Epoch, "loss"), Some(vec![vec![(1.0, 2.0)], vec![(3.0, 1.0), (4.0, 0.5)]]));
        assert_eq!(XAxis::auto(&[&l]), XAxis::Epoch);
        let by_step = log("{\"step\":1,\"epoch\":1,\"loss\":2.0}\n{\"step\":2,\"epoch\":1,\"loss\":1.0}\n");
        assert_eq!(XAxis::auto(&[&l, &by_step]), XAxis::Step);
    }

    #[test]
    fn a_loss_over_decades_gets_a_log_axis_and_log_is_refused_below_zero() {
        let l = log("{\"step\":1,\"epoch\":1,\"loss\":2.0,\"delta\":-1.0}\n{\"step\":2,\"epoch\":1,\"loss\":0.001,\"delta\":1.0}\n");
        let runs = [Run { name: "l".into(), log: &l }];
        let (scene, notes) = chart(&runs, XAxis::Step, YScale::Log, "t");
        assert_eq!(notes, ["`delta` has values at or below 0, so its axis is linear"]);
        let has = |label: &str| scene.shapes.iter().any(|s| matches!(s, Shape::Text { text, .. } if text == label));
        assert!(has("0.01") && has("0.1") && has("1"), "log ticks on the loss panel");
    }
}
