//! REPL speed (issue 7): start-up, a small statement on a bound tensor
//! compiled for the first time, the same statement again (a cache hit), and
//! the statement on another tensor of the same type (a cache hit whose graph
//! is instantiated for the new value and computed).
//! Prints the median of repeated runs of each.
//!
//! Run: `cargo bench -j2 --bench repl` (numbers go to BENCHMARKS.md, `## REPL`).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tfc::repl::Repl;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// One entry, its output discarded; panics on a diagnostic (a bench bug).
fn entry(repl: &mut Repl, text: &str) -> tfc::repl::Timing {
    repl.run_entry(text, "<bench>", &mut std::io::sink()).unwrap_or_else(|d| panic!("{text}: {d:?}"))
}

fn main() {
    let runs = 51;
    // Start-up in-process: the session with the prelude traced.
    let startup = median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                let _repl = Repl::new().expect("the prelude traces");
                t.elapsed()
            })
            .collect(),
    );
    println!("start-up (Repl::new, prelude traced)            {}", ms(startup));
    // Start-up as a process: `tfc repl` with empty stdin, from exec to exit.
    let exe = std::env::current_exe().ok().and_then(|p| {
        let dir = p.parent()?.parent()?.to_path_buf();
        Some(dir.join("tfc")).filter(|t| t.exists())
    });
    if let Some(exe) = exe {
        let process = median(
            (0..21)
                .map(|_| {
                    let t = Instant::now();
                    let mut child = Command::new(&exe)
                        .arg("repl")
                        .stdin(Stdio::piped())
                        .stdout(Stdio::null())
                        .spawn()
                        .expect("tfc runs");
                    drop(child.stdin.take().map(|mut s| s.write_all(b"")));
                    child.wait().expect("tfc exits");
                    t.elapsed()
                })
                .collect(),
        );
        println!("start-up (process: `tfc repl` < /dev/null)     {}", ms(process));
    }
    for (what, init) in
        [("f32[4]", "let x = [1.0, 2.0, 3.0, 4.0]"), ("f32[256, 256]", "let x = uniform([256, 256], seed = 1)")]
    {
        let mut repl = Repl::new().expect("the prelude traces");
        entry(&mut repl, init);
        entry(&mut repl, "x");
        // First time: each text is new, so it is parsed, traced and run.
        let first: Vec<Duration> = (0..runs)
            .map(|i| {
                let text = format!("x * {}.5", i + 2);
                let t = Instant::now();
                let timing = entry(&mut repl, &text);
                assert!(timing.compile.is_some());
                t.elapsed()
            })
            .collect();
        // Again: the cache hit.
        entry(&mut repl, "x * 2.0");
        let again: Vec<Duration> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                let timing = entry(&mut repl, "x * 2.0");
                assert!(timing.compile.is_none());
                t.elapsed()
            })
            .collect();
        // Another binding of the same type, alternating with `x`: the cached
        // graph is instantiated for the other value and computed again.
        entry(&mut repl, "let y = x * 0.5");
        entry(&mut repl, "y * 2.0");
        let fed: Vec<Duration> = (0..runs)
            .map(|i| {
                let text = if i % 2 == 0 { "x * 2.0" } else { "y * 2.0" };
                let t = Instant::now();
                let timing = entry(&mut repl, text);
                assert!(timing.compile.is_none());
                t.elapsed()
            })
            .collect();
        println!("`x * 2.0`, x: {what:<14} first time            {}", ms(median(first)));
        println!("`x * 2.0`, x: {what:<14} again (cached)        {}", ms(median(again)));
        println!("`x * 2.0` / `y * 2.0`, {what:<14} new values (cached) {}", ms(median(fed)));
    }
}
