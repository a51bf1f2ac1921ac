//! Reading a training log (the JSON lines a `log "path"` setting writes,
//! §9) into the points `tfc plot` draws.
//!
//! Contract: every line that is a JSON object with a numeric `step` and
//! `epoch` is a point; each of its other numeric keys but the throughput
//! (`examples_per_sec`) is a value of the series of that name (`loss`, or a
//! metric), and a `null` (a value that was not finite) is a gap. Blank lines
//! are ignored. Any other line (not JSON, not an object, a missing or
//! non-numeric `step` or `epoch`, a value that is neither a number nor
//! `null`) is *malformed*: skipped and counted, the first one remembered
//! with its line number and what is wrong with it. Reading never fails on
//! the content; only an unreadable file is an error.
//!
//! Example: `{"step": 20, "epoch": 5, "loss": 0.25, "acc": 0.9,
//! "examples_per_sec": 1000.0}` is the point step 20, epoch 5 with values
//! `loss` 0.25 and `acc` 0.9.

use crate::diag::{Code, Diagnostic};
use std::path::Path;

/// The keys of a line that are not plotted values.
const NOT_VALUES: [&str; 3] = ["step", "epoch", "examples_per_sec"];

/// One line of a log.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub step: f64,
    pub epoch: f64,
    /// `(name, value)` by name; `None` for a `null`.
    pub values: Vec<(String, Option<f64>)>,
}

/// A log as read: its points in file order and the lines skipped.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainLog {
    pub points: Vec<Point>,
    pub malformed: usize,
    /// The first malformed line: its 1-based number and what is wrong.
    pub first_malformed: Option<(usize, String)>,
}

impl TrainLog {
    /// Reads the log at `path` (E0001 when it cannot be read).
    pub fn read(path: &Path) -> Result<TrainLog, Diagnostic> {
        let bytes = std::fs::read(path).map_err(|e| {
            let what = if path.is_dir() { "is a directory".to_string() } else { e.to_string() };
            Diagnostic::new(Code::Io, format!("cannot read the log `{}`: {what}", path.display()))
        })?;
        Ok(TrainLog::parse(&String::from_utf8_lossy(&bytes)))
    }

    /// Reads the lines of a log's text.
    pub fn parse(text: &str) -> TrainLog {
        let mut log = TrainLog { points: Vec::new(), malformed: 0, first_malformed: None };
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match point(line) {
                Ok(p) => log.points.push(p),
                Err(why) => {
                    log.malformed += 1;
                    log.first_malformed.get_or_insert((i + 1, why));
                }
            }
        }
        log
    }

    /// Whether any point has a value to draw.
    pub fn has_values(&self) -> bool {
        self.points.iter().any(|p| p.values.iter().any(|(_, v)| v.is_some()))
    }
}

/// One line as a point, or what is wrong with it.
fn point(line: &str) -> Result<Point, String> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e})"))?;
    let serde_json::Value::Object(fields) = value else { return Err("not a JSON object".into()) };
    let number = |key: &str| match fields.get(key) {
        Some(v) => v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| format!("`{key}` is not a number")),
        None => Err(format!("no `{key}`")),
    };
    let (step, epoch) = (number("step")?, number("epoch")?);
    let mut values = Vec::new();
    for (key, v) in &fields {
        if NOT_VALUES.contains(&key.as_str()) {
            continue;
        }
        let v = match v {
            serde_json::Value::Null => None,
            v => Some(v.as_f64().ok_or_else(|| format!("`{key}` is neither a number nor null"))?),
        };
        values.push((key.clone(), v));
    }
    Ok(Point { step, epoch, values })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_points_with_their_values() {
        let log = TrainLog::parse(
            "{\"step\": 3, \"epoch\": 1, \"loss\": 2.5, \"examples_per_sec\": 10.0}\n\n\
             {\"step\": 4, \"epoch\": 1, \"acc\": null, \"examples_per_sec\": 10.0}\n",
        );
        assert_eq!(log.malformed, 0);
        assert_eq!(log.points.len(), 2);
        assert_eq!(log.points[0].values, [("loss".to_string(), Some(2.5))]);
        assert_eq!(log.points[1].values, [("acc".to_string(), None)]);
        assert!(log.has_values());
    }

    #[test]
    fn malformed_lines_are_counted_and_the_first_is_named() {
        let log = TrainLog::parse(
            "{\"step\": 1, \"epoch\": 1, \"loss\": 1.0}\nnot json\n{\"epoch\": 1, \"loss\": 1.0}\n[1, 2]\n\
             {\"step\": 2, \"epoch\": 1, \"loss\": \"low\"}\n{\"step\": 3, \"epoch\": 1, \"loss\": 0.5}\n",
        );
        assert_eq!(log.points.len(), 2);
        assert_eq!(log.malformed, 4);
        let (line, why) = log.first_malformed.expect("a first malformed line");
        assert_eq!(line, 2);
        assert!(why.starts_with("not JSON"), "{why}");
        assert_eq!(point("{\"epoch\": 1}").unwrap_err(), "no `step`");
        assert_eq!(
            point("{\"step\": 1, \"epoch\": 1, \"loss\": \"x\"}").unwrap_err(),
            "`loss` is neither a number nor null"
        );
    }

    #[test]
    fn a_log_of_only_throughput_has_no_values() {
        let log = TrainLog::parse("{\"step\": 1, \"epoch\": 1, \"examples_per_sec\": 5.0}\n");
        assert!(!log.has_values());
        assert!(!TrainLog::parse("").has_values());
    }
}
