//! The model zoo's training examples (`examples/zoo/*.tfl`: the ResNet, LSTM
//! and GRU on MNIST) run from a fresh clone on the CPU backend in strict
//! mode (no kernel on the host interpreter), shortened to a few steps on a
//! few hundred images so that a debug build takes seconds: each prints its
//! test accuracy, a fraction, the same at one and at two threads. Their
//! full runs (the accuracies their headers quote) are benchmarks, not
//! tests: minutes each.

use std::path::{Path, PathBuf};
use tfc::backend::BackendKind;
use tfc::driver::Session;
use tfc::runtime::exec::{execute, RunOptions};

fn zoo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/zoo")
}

/// `source` with every dataset read by `load_idx` cut to its first 256
/// elements and training to one epoch.
fn shortened(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        let line = match line.trim().strip_prefix("epochs = ") {
            Some(_) => "    epochs = 1".to_string(),
            None => line.to_string(),
        };
        match line.find("load_idx(") {
            Some(at) => {
                let close = at + line[at..].find(')').expect("a load_idx call closes on its line");
                out.push_str(&format!("{} |> take(256){}\n", &line[..=close], &line[close + 1..]));
            }
            None => out.push_str(&format!("{line}\n")),
        }
    }
    out
}

/// The test accuracy a shortened zoo example prints (strict), the same at
/// one and two threads.
fn accuracy_of(name: &str) -> f64 {
    let one = accuracy_at(name, 1);
    let two = accuracy_at(name, 2);
    assert_eq!(one.to_bits(), two.to_bits(), "{name}: {one} at one thread, {two} at two");
    one
}

fn accuracy_at(name: &str, threads: usize) -> f64 {
    let path = zoo().join(name);
    let source = shortened(&std::fs::read_to_string(&path).unwrap());
    assert!(source.contains("|> take(256)") && source.contains("epochs = 1"), "{name} was not shortened");
    let mut session = Session::new();
    let file = session.add_source(&path.to_string_lossy(), &source);
    let program = session.compile(file, &tfc::passes::Options::default()).unwrap_or_else(|d| panic!("{name}: {d:?}"));
    let mut out = Vec::new();
    let options = RunOptions {
        base_dir: session.base_dir(file),
        backend: BackendKind::Jit,
        strict: true,
        threads,
        ..RunOptions::default()
    };
    execute(&program, &mut out, options).unwrap_or_else(|d| panic!("{name}: {}", d.message));
    let text = String::from_utf8(out).unwrap();
    let value = text.trim().strip_prefix("f32 ").unwrap_or_else(|| panic!("{name} printed {text:?}"));
    value.parse().unwrap_or_else(|_| panic!("{name} printed {text:?}"))
}

/// Every zoo example is tested: the MNIST ones here, the GPT in
/// `tests/zoo_gpt.rs`.
#[test]
fn every_zoo_example_is_tested() {
    let mut names: Vec<String> = std::fs::read_dir(zoo())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tfl"))
        .collect();
    names.sort();
    assert_eq!(names, ["gpt.tfl", "gru_mnist.tfl", "lstm_mnist.tfl", "resnet_mnist.tfl"]);
}

#[test]
fn the_resnet_trains_and_evaluates_compiled() {
    let a = accuracy_of("resnet_mnist.tfl");
    assert!((0.0..=1.0).contains(&a), "{a}");
}

#[test]
fn the_lstm_trains_and_evaluates_compiled() {
    let a = accuracy_of("lstm_mnist.tfl");
    assert!((0.0..=1.0).contains(&a), "{a}");
}

#[test]
fn the_gru_trains_and_evaluates_compiled() {
    let a = accuracy_of("gru_mnist.tfl");
    assert!((0.0..=1.0).contains(&a), "{a}");
}
