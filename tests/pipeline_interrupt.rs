//! Ctrl-C during training with a threaded input pipeline (a parallel `map`
//! and `prefetch(auto)`): the run stops at a step boundary with E0403 and
//! exit status 130, every pipeline thread ends (the process exits), the
//! checkpoint on disk is complete and no temporary file is left behind, and
//! resuming from it ends with exactly the weights of an uninterrupted run.

mod support;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const PROGRAM: &str = r#"
use std.nn.{Dense}
use std.loss.mse
use std.optim.adam
model Net { l1 = Dense(4, 16, act = relu); l2 = Dense(16, 1); fn forward(x) = x |> l1 |> l2 }
let data = range(512)
    |> map(fn(i) = (sin(cast(i, f32) * ones([4]) * [0.1, 0.2, 0.3, 0.4]), cos(cast(i, f32) * 0.05) * ones([1])), parallel = 2)
let net = Net(seed = 3)
train net on data |> shuffle(128, seed = 1) |> batch(32) |> prefetch(auto) {
    loss(x, y) = mse(net(x), y)
    optimizer = adam(lr = 0.01)
    epochs = 40
    checkpoint "ck.safetensors" every 1 epochs
    resume = "ck.safetensors"
}
print(net.l2.w)
"#;

fn checkpoint_epoch(path: &std::path::Path) -> Option<u64> {
    let file = tfc::io::checkpoint::SafeFile::read(path).ok()?;
    file.metadata().get("epoch")?.parse().ok()
}

#[test]
fn ctrl_c_stops_training_cleanly_and_the_checkpoint_resumes() {
    let whole = scratch("sigint-reference");
    let reference = ok(&whole, PROGRAM);

    let d = scratch("sigint");
    put(&d, "main.tfl", PROGRAM.as_bytes());
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfc"))
        .current_dir(&*d)
        .args(["run", "main.tfl"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tfc");
    let ck = d.join("ck.safetensors");
    let deadline = Instant::now() + Duration::from_secs(120);
    while checkpoint_epoch(&ck).is_none_or(|e| e < 2) {
        assert!(Instant::now() < deadline, "no checkpoint appeared in 120 s");
        assert!(child.try_wait().expect("poll tfc").is_none(), "tfc finished before it could be interrupted");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("run kill");
    assert!(status.success(), "kill -INT failed");
    // The run must end on its own, promptly: no thread may keep it alive.
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("poll tfc").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tfc did not stop within 30 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("reap tfc");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("E0403") && stderr.contains("interrupted"), "{stderr}");
    assert!(out.stdout.is_empty(), "the interrupted run must not print the final weights");

    // Only the complete checkpoint is on disk, and it is a finished epoch.
    let names: Vec<String> = std::fs::read_dir(&*d)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    for n in &names {
        assert!(n == "main.tfl" || n == "ck.safetensors", "unexpected file `{n}` after Ctrl-C");
    }
    let epoch = checkpoint_epoch(&ck).expect("a readable checkpoint");
    assert!((2..40).contains(&epoch), "epoch {epoch}");

    // Resuming finishes with the uninterrupted run's weights, bit for bit.
    let r = run(&d, PROGRAM, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("resuming from ck.safetensors at epoch {epoch}")), "{}", r.stderr);
    assert_eq!(r.stdout, reference);
}
