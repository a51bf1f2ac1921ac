//! A GPU lost mid-run (a driver reset, a removed card): the run stops with
//! its own diagnostic, not an internal error or a panic, and the last
//! checkpoint is whole. The device is destroyed from another thread while
//! a training loop runs on it (`wgpu::Device::destroy` reports the loss
//! as a real one does). Its own test binary: the device is the process's.
#![cfg(feature = "gpu")]

mod support;

use support::backends::gpu_here;
use tfc::backend::BackendKind as Backend;
use tfc::driver::Session;
use tfc::runtime::exec::{execute, RunOptions};

#[test]
fn a_gpu_lost_mid_run_is_a_clear_error_and_the_checkpoint_stays_whole() {
    if !gpu_here() {
        return;
    }
    let dir = support::scratch("gpu-lost");
    let program = r#"use std.nn.{Dense}
use std.loss.mse
use std.optim.sgd
model M {
    l = Dense(8, 8)
    fn forward(x) = l(x)
}
let xs = normal([64, 8], seed = 1)
let net = M(seed = 0)
train net on from_tensors(xs, xs) |> batch(8) {
    loss(x, y) = mse(net(x), y)
    optimizer = sgd(lr = 1e-3)
    checkpoint "ck.bin" every 1 epochs
    epochs = 100000
}
"#;
    let path = support::put(&dir, "lost.tfl", program.as_bytes());
    let mut session = Session::new();
    let file = session.add_source(&path.to_string_lossy(), program);
    let opts = tfc::passes::Options { target: Backend::Gpu.target(), ..Default::default() };
    let compiled = session.compile(file, &opts).expect("compiles");
    // Lose the device once the first checkpoints are written.
    let checkpoint = dir.join("ck.bin");
    let watched = checkpoint.clone();
    let destroyer = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        while !watched.exists() && started.elapsed().as_secs() < 120 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        tfc::backend::gpu::device::gpu().expect("the GPU").device.destroy();
    });
    let mut out = Vec::new();
    let options = RunOptions { base_dir: session.base_dir(file), backend: Backend::Gpu, ..RunOptions::default() };
    let result = execute(&compiled, &mut out, options);
    destroyer.join().unwrap();
    let d = result.expect_err("training on a destroyed device must fail");
    assert_eq!(d.code, tfc::diag::Code::Runtime, "{}", d.message);
    assert!(d.message.contains("was lost mid-run"), "{}", d.message);
    // The checkpoint is whole: a CPU run resumes from it.
    assert!(checkpoint.exists());
    let resumed = program
        .replace("    epochs = 100000", "    resume = \"ck.bin\"\n    epochs = 100000")
        .replace("checkpoint \"ck.bin\" every 1 epochs\n", "");
    let resumed = resumed.replace("epochs = 100000", "epochs = 1");
    let run = support::run(&dir, &resumed, &["--device", "cpu"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stderr.contains("resuming from ck.bin"), "{}", run.stderr);
}
