//! `tfc plot` as a user meets it: real training logs drawn as SVG and PNG,
//! each picture checked with independent readers (Python's `xml.etree` for
//! the SVG, Pillow for the PNG), and every bad input — a missing log, an
//! unknown output extension, a log with nothing to draw, malformed lines —
//! answered with a clear message, the right exit code, and no output file
//! (nor a leftover temporary) where it failed.
//!
//! The Python half needs the test venv (`support::test_python`); without
//! it that half is skipped with a note, except under `CI=true`.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use support::{put, python, run, scratch, test_python, LOGGED_LINE_FIT};

/// The logged line fit with `lr` and a log of `path` every 3 steps.
fn program(lr: &str, path: &str) -> String {
    LOGGED_LINE_FIT.replace("LR", lr).replace("LOG", &format!("log \"{path}\" every 3 steps"))
}

fn plot(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tfc"))
        .current_dir(dir)
        .arg("plot")
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run tfc plot")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The files in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the scratch directory")
        .map(|e| e.expect("an entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Two training runs' logs in `dir`: `fast.jsonl` and `slow.jsonl`.
fn two_logs(dir: &Path) {
    for (lr, log) in [("0.3", "fast.jsonl"), ("0.1", "slow.jsonl")] {
        let r = run(dir, &program(lr, log), &[]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
    }
}

/// Prints the SVG's size, its `path` count and its texts, as JSON; fails
/// if the file is not well-formed XML.
const READ_SVG: &str = r#"
import json, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = '{http://www.w3.org/2000/svg}'
assert root.tag == ns + 'svg', root.tag
print(json.dumps({
    'width': int(root.get('width')), 'height': int(root.get('height')),
    'paths': len(root.findall(ns + 'path')),
    'texts': [t.text for t in root.iter(ns + 'text')],
}))
"#;

/// Prints the PNG's size and mode, how many pixels are not the white
/// background, and how many have each run's colour, as JSON.
const READ_PNG: &str = r#"
import json, sys
from PIL import Image
im = Image.open(sys.argv[1])
im.load()
px = list(im.convert('RGB').getdata())
print(json.dumps({
    'size': list(im.size), 'mode': im.mode,
    'ink': sum(1 for p in px if p != (255, 255, 255)),
    'blue': sum(1 for p in px if p == (31, 119, 180)),
    'orange': sum(1 for p in px if p == (255, 127, 14)),
}))
"#;

#[test]
fn two_training_logs_draw_as_svg_and_png() {
    let dir = scratch("plot-two-logs");
    two_logs(&dir);
    for out in ["runs.svg", "runs.png"] {
        let o = plot(&dir, &["fast.jsonl", "slow.jsonl", "-o", out]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(o.stdout.is_empty(), "plot prints nothing on stdout");
        assert!(stderr(&o).is_empty(), "no warnings for good logs: {}", stderr(&o));
    }
    let svg = std::fs::read_to_string(dir.join("runs.svg")).expect("the SVG");
    assert!(svg.starts_with("<?xml") && svg.contains("<svg"), "{}", &svg[..svg.len().min(200)]);
    let png = std::fs::read(dir.join("runs.png")).expect("the PNG");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(files(&dir).iter().filter(|f| f.contains(".tmp")).count(), 0, "{:?}", files(&dir));

    let Some(py) = test_python() else { return };
    let s: serde_json::Value =
        serde_json::from_str(python(&py, READ_SVG, &[dir.join("runs.svg").as_os_str()]).trim()).expect("JSON");
    // Two panels (loss, line_loss), one path per run in each.
    assert_eq!(s["paths"], 4, "{s}");
    let texts: Vec<&str> = s["texts"].as_array().expect("texts").iter().filter_map(|t| t.as_str()).collect();
    for want in ["fast.jsonl", "slow.jsonl", "loss", "line_loss", "step"] {
        assert!(texts.contains(&want), "the SVG lacks the text `{want}`: {texts:?}");
    }
    assert!(texts.iter().filter(|t| t.parse::<f64>().is_ok()).count() >= 8, "tick labels: {texts:?}");
    let p: serde_json::Value =
        serde_json::from_str(python(&py, READ_PNG, &[dir.join("runs.png").as_os_str()]).trim()).expect("JSON");
    assert_eq!(p["size"], serde_json::json!([s["width"], s["height"]]), "the PNG has the SVG's size: {p} {s}");
    assert_eq!(p["mode"], "RGB");
    assert!(p["ink"].as_u64().unwrap_or(0) > 5000, "{p}");
    assert!(p["blue"].as_u64().unwrap_or(0) > 100 && p["orange"].as_u64().unwrap_or(0) > 100, "both runs show: {p}");
}

#[test]
fn a_log_of_epoch_lines_plots_against_epochs() {
    let dir = scratch("plot-epochs");
    let program = LOGGED_LINE_FIT.replace("LR", "0.3").replace("LOG", "log \"epochs.jsonl\"");
    let r = run(&dir, &program, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let o = plot(&dir, &["epochs.jsonl", "-o", "e.svg"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(dir.join("e.svg")).expect("the SVG");
    assert!(svg.contains(">epoch</text>") && !svg.contains(">step</text>"), "x axis by epoch");
    let o = plot(&dir, &["epochs.jsonl", "--x", "step", "-o", "s.svg"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(dir.join("s.svg")).expect("the SVG").contains(">step</text>"));
}

#[test]
fn malformed_lines_are_skipped_counted_and_the_first_named() {
    let dir = scratch("plot-malformed");
    put(
        &dir,
        "mixed.jsonl",
        b"{\"step\": 1, \"epoch\": 1, \"loss\": 2.0}\n{\"step\": 2, \"epoch\": 1, \"loss\": 1.0}\n\
          {\"step\": 3, \"loss\": 0.5}\ntruncated {\"step\n{\"step\": 4, \"epoch\": 1, \"loss\": 0.25}\n",
    );
    let o = plot(&dir, &["mixed.jsonl", "-o", "m.svg"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("skipped 2 malformed lines"), "{err}");
    assert!(err.contains("mixed.jsonl:3: no `epoch`"), "{err}");
    let svg = std::fs::read_to_string(dir.join("m.svg")).expect("the SVG");
    assert_eq!(svg.matches("<path ").count(), 1);
    // Three good points, each with a dot.
    assert_eq!(svg.matches("<circle ").count(), 3);
}

#[test]
fn a_missing_log_is_e0001_and_leaves_the_old_picture() {
    let dir = scratch("plot-missing");
    put(&dir, "good.jsonl", b"{\"step\": 1, \"epoch\": 1, \"loss\": 2.0}\n");
    put(&dir, "out.svg", b"old");
    let o = plot(&dir, &["good.jsonl", "missing.jsonl", "-o", "out.svg"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("E0001") && err.contains("missing.jsonl"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(std::fs::read(dir.join("out.svg")).expect("out.svg"), b"old");
    let o = plot(&dir, &[".", "-o", "dir.svg"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
    assert_eq!(files(&dir), ["good.jsonl", "out.svg"]);
}

#[test]
fn an_unknown_output_extension_is_a_usage_error() {
    let dir = scratch("plot-extension");
    put(&dir, "good.jsonl", b"{\"step\": 1, \"epoch\": 1, \"loss\": 2.0}\n");
    for out in ["out.jpg", "out", "out.svg.txt"] {
        let o = plot(&dir, &["good.jsonl", "-o", out]);
        assert_eq!(o.status.code(), Some(2), "{out}: {}", stderr(&o));
        assert!(stderr(&o).contains("use .svg or .png"), "{}", stderr(&o));
    }
    // Upper case is the same format.
    let o = plot(&dir, &["good.jsonl", "-o", "OUT.PNG"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(files(&dir), ["OUT.PNG", "good.jsonl"]);
}

#[test]
fn a_log_with_nothing_to_draw_is_e0005() {
    let dir = scratch("plot-empty");
    put(&dir, "empty.jsonl", b"");
    put(&dir, "junk.jsonl", b"not json\n{\"step\": 1}\n");
    put(&dir, "good.jsonl", b"{\"step\": 1, \"epoch\": 1, \"loss\": 2.0}\n");
    let o = plot(&dir, &["good.jsonl", "empty.jsonl", "-o", "out.png"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("E0005") && stderr(&o).contains("empty.jsonl"), "{}", stderr(&o));
    let o = plot(&dir, &["junk.jsonl", "-o", "out.png"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("E0005") && err.contains("all 2 of its lines are malformed"), "{err}");
    assert!(err.contains("junk.jsonl:1: not JSON"), "{err}");
    assert_eq!(files(&dir), ["empty.jsonl", "good.jsonl", "junk.jsonl"], "no output, no temporary");
}
