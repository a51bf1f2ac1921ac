//! Front-end speed: parse, resolve and trace (check) a generated program of
//! about 2,000 lines; prints the median of repeated runs per stage.
//!
//! Run: `cargo bench --bench frontend` (numbers go to BENCHMARKS.md).

use std::time::{Duration, Instant};
use tfc::driver::Session;

/// A program of `blocks` × 4 lines: a function with annotations and
/// symbolic dimensions, a random weight, a call, and a reduction.
pub fn generate(blocks: usize) -> String {
    let mut s = String::from("let h0 = normal([32, 16], seed = 1)\n");
    for k in 1..=blocks {
        s.push_str(&format!(
            "fn f{k}(x: f32[B, 16], w: f32[16, 16]) -> f32[B, 16] = softmax(tanh(x @ w) + x, axis = -1)\n"
        ));
        s.push_str(&format!("let w{k} = uniform([16, 16], seed = {k}, low = -0.25, high = 0.25)\n"));
        s.push_str(&format!("let h{k} = f{k}(h{}, w{k})\n", k - 1));
        s.push_str(&format!("let s{k} = sum(h{k}[:, 1:8], axis = 1, keepdims = true) * 0.5\n"));
    }
    s.push_str(&format!("print(mean(h{blocks}))\n"));
    s
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let source = generate(500);
    let lines = source.lines().count();
    let runs = 21;
    let (mut parse, mut resolve, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let mut session = Session::new();
        let file = session.add_source("gen.tfl", &source);
        let t0 = Instant::now();
        let ast = session.parse(file).expect("generated program parses");
        let t1 = Instant::now();
        tfc::sema::resolve(&ast).expect("generated program resolves");
        let t2 = Instant::now();
        let program = tfc::trace::trace_program(&ast, &mut session.sources).expect("generated program checks");
        let t3 = Instant::now();
        std::hint::black_box(program);
        parse.push(t1 - t0);
        resolve.push(t2 - t1);
        total.push(t3 - t0);
    }
    println!("front end on a generated program of {lines} lines ({runs} runs, medians):");
    println!("  parse    {:>8.2} ms", median(parse).as_secs_f64() * 1e3);
    println!("  resolve  {:>8.2} ms", median(resolve).as_secs_f64() * 1e3);
    println!("  total    {:>8.2} ms (parse + resolve + trace with shape checks)", median(total).as_secs_f64() * 1e3);
}
