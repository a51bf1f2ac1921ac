//! A training `log … format = "tensorboard"` (§9) read back by TensorBoard's
//! own Python reader: the same program is trained twice (training is
//! deterministic), once logging JSON lines and once TensorBoard events, and
//! every tag's steps and values must be the JSON log's (values within f32
//! rounding: an event stores `simple_value` as a float).
//!
//! Needs the test venv (`.venv-tests`, see `support::test_python`); without
//! it the Python half is skipped with a note, except under `CI=true`.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use support::{python, run, scratch, test_python, LOGGED_LINE_FIT};

/// The logged line fit with the log setting `log`.
fn program(log: &str) -> String {
    LOGGED_LINE_FIT.replace("LR", "0.3").replace("LOG", log)
}

/// tag → [(step, value)] from a JSON-lines log, in file order.
fn jsonl_scalars(path: &Path) -> BTreeMap<String, Vec<(u64, f64)>> {
    let text = std::fs::read_to_string(path).expect("the JSON log");
    let mut out: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let step = v["step"].as_u64().expect("a step");
        for (k, x) in v.as_object().expect("an object") {
            if !["step", "epoch", "examples_per_sec"].contains(&k.as_str()) {
                out.entry(k.clone()).or_default().push((step, x.as_f64().expect("a number")));
            }
        }
    }
    out
}

/// Reads the directory with TensorBoard's EventAccumulator and prints, as
/// JSON, the file version of each event file (through the raw loader) and
/// every scalar tag's (step, value) pairs.
const READ_EVENTS: &str = r#"
import json, os, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
d = sys.argv[1]
files = sorted(f for f in os.listdir(d) if 'tfevents' in f)
versions = []
for f in files:
    events = list(EventFileLoader(os.path.join(d, f)).Load())
    versions.append(events[0].file_version)
acc = EventAccumulator(d, size_guidance={'scalars': 0})
acc.Reload()
scalars = {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in acc.Tags()['scalars']}
print(json.dumps({'files': files, 'versions': versions, 'scalars': scalars}))
"#;

#[test]
fn tensorboards_reader_sees_the_steps_and_values_of_the_json_log() {
    let dir = scratch("tensorboard-log");
    let jsonl = run(&dir, &program(r#"log "out/train.jsonl" every 3 steps"#), &[]);
    assert_eq!(jsonl.code, Some(0), "{}", jsonl.stderr);
    let events = run(&dir, &program(r#"log "runs/exp1" every 3 steps format = "tensorboard""#), &[]);
    assert_eq!(events.code, Some(0), "{}", events.stderr);

    let want = jsonl_scalars(&dir.join("out/train.jsonl"));
    assert_eq!(want.keys().collect::<Vec<_>>(), ["line_loss", "loss"], "the JSON log's tags");
    assert_eq!(want["loss"].len(), 8, "24 steps logged every 3: {want:?}");
    let names: Vec<String> = std::fs::read_dir(dir.join("runs/exp1"))
        .expect("the event directory")
        .map(|e| e.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "one event file: {names:?}");
    assert!(names[0].starts_with("events.out.tfevents."), "{names:?}");

    let Some(py) = test_python() else { return };
    let out = python(&py, READ_EVENTS, &[dir.join("runs/exp1").as_os_str()]);
    let got: serde_json::Value = serde_json::from_str(out.trim()).expect("the reader's JSON");
    assert_eq!(got["versions"], serde_json::json!(["brain.Event:2"]), "{got}");
    let scalars = got["scalars"].as_object().expect("scalars by tag");
    assert_eq!(scalars.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{got}");
    for (tag, points) in &want {
        let read = scalars[tag].as_array().expect("points");
        assert_eq!(read.len(), points.len(), "{tag}: {read:?} vs {points:?}");
        for (r, (step, value)) in read.iter().zip(points) {
            assert_eq!(r[0].as_u64(), Some(*step), "{tag}: {read:?} vs {points:?}");
            let v = r[1].as_f64().expect("a value");
            // Compared as f32s: the event holds the f32 nearest the logged
            // value (and serde_json may read Python's shortest decimal one
            // f64 ulp off).
            assert_eq!(v as f32, *value as f32, "{tag} at step {step}: {v} is not {value} as an f32");
        }
    }
}

#[test]
fn a_log_directory_that_cannot_be_made_is_a_clear_error() {
    let dir = scratch("tensorboard-blocked");
    // A file where the log's directory should be.
    support::put(&dir, "runs", b"not a directory");
    let r = run(&dir, &program(r#"log "runs/exp1" format = "tensorboard""#), &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("E0001") && r.stderr.contains("runs/exp1"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

/// TensorBoard's reader over a directory: `{tag: [[step, value]]}`.
fn read_scalars(py: &Path, dir: &Path) -> serde_json::Value {
    let out = python(py, READ_EVENTS, &[dir.as_os_str()]);
    serde_json::from_str::<serde_json::Value>(out.trim()).expect("the reader's JSON")["scalars"].clone()
}

#[test]
fn a_resumed_run_replaces_what_the_stopped_run_logged_after_its_checkpoint() {
    let settings = "log \"runs/exp1\" every 3 steps format = \"tensorboard\"
    checkpoint \"ck.safetensors\" every 2 epochs
    resume = \"ck.safetensors\"";
    // The reference: one run of 24 steps.
    let whole = scratch("tensorboard-whole");
    let r = run(&whole, &program(settings), &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // Stopped at step 10, after logging steps 3, 6, 9 and 10 but with its
    // last checkpoint at step 8; then resumed to the end.
    let dir = scratch("tensorboard-resumed");
    let stopped = program(settings).replace("    epochs = 6\n", "    epochs = 6\n    steps = 10\n");
    let r = run(&dir, &stopped, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let r = run(&dir, &program(settings), &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("resuming from ck.safetensors at epoch 2, step 8"), "{}", r.stderr);
    assert_eq!(std::fs::read_dir(dir.join("runs/exp1")).expect("the event directory").count(), 2, "two event files");

    let Some(py) = test_python() else { return };
    let want = read_scalars(&py, &whole.join("runs/exp1"));
    let got = read_scalars(&py, &dir.join("runs/exp1"));
    let steps = |v: &serde_json::Value| -> Vec<u64> {
        v["loss"].as_array().expect("loss points").iter().filter_map(|p| p[0].as_u64()).collect()
    };
    assert_eq!(steps(&got), [3, 6, 9, 12, 15, 18, 21, 24], "step 10 of the stopped run is dropped: {got}");
    assert_eq!(got, want, "the resumed run's points are the uninterrupted run's");
}
