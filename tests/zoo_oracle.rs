//! tfc reproduces the model zoo's loss oracle (benches/zoo/README.md):
//! `examples/zoo/bench/{gpt,resnet,lstm,gru}.tfl` load the peers' initial
//! weights and fixed batch (benches/zoo/make_data.py, numpy's generators)
//! and train with the same Adam, so `tfc bench … --warmup 0 --steps 100`
//! must report the losses JAX and PyTorch give at steps 1 and 100.
//!
//! The oracle is JAX's (jax.jit, 0.10.2, one thread: benches/zoo/bench_jax.py
//! --threads 1 --warmup 100 --steps 0), measured next to PyTorch 2.15 eager
//! (bench_torch.py, same flags) on this machine:
//!
//! | model  | step | JAX            | torch eager    | tfc jit        | JAX vs torch | tfc vs JAX |
//! |--------|------|----------------|----------------|----------------|--------------|------------|
//! | gpt    | 1    | 4.739165306    | 4.739164829    | 4.739164829    | 1.0e-7       | 1.0e-7     |
//! | gpt    | 100  | 0.03895863146  | 0.03895803541  | 0.03895842657  | 1.5e-5       | 5.3e-6     |
//! | resnet | 1    | 4.515439510    | 4.515448570    | 4.515448093    | 2.0e-6       | 1.9e-6     |
//! | resnet | 100  | 0.002649954520 | 0.002646498615 | 0.002648404800 | 1.3e-3       | 5.8e-4     |
//! | lstm   | 1    | 2.311123371    | 2.311123371    | 2.311123848    | 0            | 2.1e-7     |
//! | lstm   | 100  | 0.003987982869 | 0.003988037817 | 0.003987980541 | 1.4e-5       | 5.8e-7     |
//! | gru    | 1    | 2.349724293    | 2.349724293    | 2.349724054    | 0            | 1.0e-7     |
//! | gru    | 100  | 0.007180971094 | 0.007180816960 | 0.007180972956 | 2.1e-5       | 2.6e-7     |
//!
//! (README.md also lists step 10 and the peers at two threads.)
//!
//! Tolerances (relative), from what the peers give among themselves:
//! - `STEP1_REL` = 1e-5: step 1 is one forward pass from identical inputs;
//!   only summation orders differ. The largest gap between two peers is the
//!   ResNet's 2.0e-6 (convolutions, then BatchNorm), the others stay within
//!   a few f32 ulps (1e-7). A wrong layout, a missing bias, the other gelu
//!   or another initialization moves the loss by far more.
//! - `SMOOTH_STEP100_REL` = 1e-4 for the GPT, the LSTM and the GRU: after
//!   99 Adam updates on a falling loss the peers differ by up to 2.1e-5
//!   (the GRU), tfc is within 5.3e-6 of JAX; 1e-4 is about five times the
//!   peers' spread.
//! - `RESNET_STEP100_REL` = 4e-3: BatchNorm divides by each channel's batch
//!   deviation, and the loss falls 1700-fold in 99 steps, so rounding
//!   differences grow: JAX and torch differ by 1.3e-3 (and by 4.8e-4 at
//!   step 10 already; torch alone moves by 7.2e-4 at step 10 between one
//!   and two threads); over every peer run (JAX and torch at one and two
//!   threads, torch.compile) step 100 spans 0.00264741 to 0.00265147,
//!   1.5e-3. The tolerance is about three times the peers' gap,
//!   still far below what a semantic change (BatchNorm's statistics, the
//!   padding, the shortcut) does to the loss after 99 steps.
//!
//! `std_lstm_reproduces_the_oracle` and `std_gru_reproduces_the_oracle` run
//! the LSTM and GRU programs with their inline layer swapped for std.nn's
//! `LSTM` and `GRU` (same parameter names, so the same weights load): the
//! std layers must give the same losses, with the same tolerances.
//!
//! Cost: four `tfc bench` runs of 100 JIT steps through the debug binary
//! (the dev profile builds tfc at opt-level 1, its dependencies at 2),
//! measured one after the other on an idle 2-core machine: gpt 35 s wall
//! (51 s CPU), resnet 19 s (32 s CPU), lstm and gru a few seconds each:
//! about 100 s of CPU, about a minute of wall time on two test threads.

use std::path::PathBuf;
use std::process::Command;

/// Relative tolerance of step 1's loss (see the module header).
const STEP1_REL: f64 = 1e-5;
/// Relative tolerance of step 100's loss for the GPT, LSTM and GRU.
const SMOOTH_STEP100_REL: f64 = 1e-4;
/// Relative tolerance of step 100's loss for the ResNet (BatchNorm).
const RESNET_STEP100_REL: f64 = 4e-3;

/// One zoo model: its program, JAX's losses at steps 1 and 100, and the
/// tolerance of step 100.
struct Model {
    file: &'static str,
    step1: f64,
    step100: f64,
    step100_rel: f64,
}

const GPT: Model = Model {
    file: "examples/zoo/bench/gpt.tfl",
    step1: 4.739165306,
    step100: 0.03895863146,
    step100_rel: SMOOTH_STEP100_REL,
};
const RESNET: Model = Model {
    file: "examples/zoo/bench/resnet.tfl",
    step1: 4.515439510,
    step100: 0.002649954520,
    step100_rel: RESNET_STEP100_REL,
};
const LSTM: Model = Model {
    file: "examples/zoo/bench/lstm.tfl",
    step1: 2.311123371,
    step100: 0.003987982869,
    step100_rel: SMOOTH_STEP100_REL,
};
const GRU: Model = Model {
    file: "examples/zoo/bench/gru.tfl",
    step1: 2.349724293,
    step100: 0.007180971094,
    step100_rel: SMOOTH_STEP100_REL,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tfc bench FILE --warmup 0 --steps N --json` on the JIT: the losses of
/// step 1 and step N.
fn bench(file: &str, steps: usize) -> (f64, f64) {
    let o = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .args(["bench", file, "--backend", "jit", "--warmup", "0", "--steps", &steps.to_string(), "--json"])
        .current_dir(root())
        .output()
        .expect("the tfc binary runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "tfc bench {file} failed:\n{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["steps"], steps, "{stdout}");
    let loss = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no `{k}` in {stdout}"));
    (loss("loss_first"), loss("loss_last"))
}

fn assert_close(what: &str, got: f64, oracle: f64, rel: f64) {
    let err = (got - oracle).abs() / oracle.abs();
    assert!(
        err <= rel,
        "{what}: tfc gives {got:e}, the peers' oracle is {oracle:e} (relative error {err:.2e} > {rel:e})"
    );
}

/// Runs 100 steps of `m` and checks the losses of steps 1 and 100.
fn reproduces_the_oracle(m: &Model) {
    check_oracle(m, m.file);
}

/// Runs 100 steps of the program `file` and checks the losses of `m`'s
/// steps 1 and 100.
fn check_oracle(m: &Model, file: &str) {
    let (first, last) = bench(file, 100);
    assert_close(&format!("{file} step 1"), first, m.step1, STEP1_REL);
    assert_close(&format!("{file} step 100"), last, m.step100, m.step100_rel);
}

/// `m`'s program with its inline recurrent layer `model NAME … }` (the
/// block up to the first line that is just `}`) removed and each `(from,
/// to)` replacement made, data paths made absolute, written into a fresh
/// directory; returns its path. Every replacement must apply, so a change
/// to the zoo file cannot quietly leave the inline layer in use.
fn with_std_layer(m: &Model, name: &str, replacements: &[(&str, &str)]) -> PathBuf {
    let zoo = std::fs::read_to_string(root().join(m.file)).expect("the zoo program is readable");
    let start = zoo.find(&format!("model {name}(")).unwrap_or_else(|| panic!("no `model {name}` in {}", m.file));
    let end = start + zoo[start..].find("\n}\n").expect("the model's closing brace") + 3;
    let mut src = format!("{}{}", &zoo[..start], &zoo[end..]);
    let data = root().join("examples/zoo/bench/data");
    let mut all = replacements.to_vec();
    let data_prefix = format!("\"{}/", data.display());
    all.push(("\"data/", &data_prefix));
    for (from, to) in all {
        assert!(src.contains(from), "`{from}` is not in {}", m.file);
        src = src.replace(from, to);
    }
    assert!(!src.contains(&format!("{name}(")), "the inline `{name}` is still used:\n{src}");
    let dir = std::env::temp_dir().join(format!("tfc-zoo-std-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join(format!("{name}.tfl"));
    std::fs::write(&path, src).expect("the program is written");
    path
}

#[test]
fn gpt_reproduces_the_oracle() {
    reproduces_the_oracle(&GPT);
}

#[test]
fn resnet_reproduces_the_oracle() {
    reproduces_the_oracle(&RESNET);
}

#[test]
fn lstm_reproduces_the_oracle() {
    reproduces_the_oracle(&LSTM);
}

#[test]
fn gru_reproduces_the_oracle() {
    reproduces_the_oracle(&GRU);
}

#[test]
fn std_lstm_reproduces_the_oracle() {
    let file = with_std_layer(
        &LSTM,
        "Lstm",
        &[
            ("use std.nn.{Dense}", "use std.nn.{Dense, LSTM}"),
            ("rnn = Lstm(28, 128)", "rnn = LSTM(28, 128)"),
            ("transpose(x, [1, 0, 2]) |> rnn", "x |> rnn"),
        ],
    );
    check_oracle(&LSTM, &file.to_string_lossy());
}

#[test]
fn std_gru_reproduces_the_oracle() {
    let file = with_std_layer(
        &GRU,
        "Gru",
        &[
            ("use std.nn.{Dense}", "use std.nn.{Dense, GRU}"),
            ("rnn = Gru(28, 128)", "rnn = GRU(28, 128)"),
            ("transpose(x, [1, 0, 2]) |> rnn", "x |> rnn"),
        ],
    );
    check_oracle(&GRU, &file.to_string_lossy());
}
