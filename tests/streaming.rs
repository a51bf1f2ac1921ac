//! Data sources that stream (§8): `load_idx`, `load_npy` and `load_tfrecord`
//! read their files by rows while running, so a dataset larger than memory
//! trains in memory that does not grow with it; shard files given by a
//! pattern are one dataset, equal to the same data in one file.

mod support;
use std::io::Write;
use support::*;

/// Rows of the big dataset: 256 f32 features each, 1 KiB a row.
const ROWS: usize = 262_144;
const FEATURES: usize = 256;

/// Writes the images (f32, IDX) and labels (u8) files of `rows` rows a
/// chunk at a time, so the test itself never holds the data either.
fn write_big(dir: &std::path::Path, rows: usize) {
    let mut images = std::io::BufWriter::new(std::fs::File::create(dir.join("big-images.idx")).unwrap());
    images.write_all(&idx(0x0D, &[rows as u32, FEATURES as u32], &[])).unwrap();
    let mut row = Vec::with_capacity(FEATURES * 4);
    for r in 0..rows {
        row.clear();
        for j in 0..FEATURES {
            // A learnable signal: feature `label` is large.
            let v = if j % 10 == r % 10 { 1.0f32 } else { ((r * 7 + j * 3) % 13) as f32 / 26.0 };
            row.extend(v.to_be_bytes());
        }
        images.write_all(&row).unwrap();
    }
    images.flush().unwrap();
    let labels: Vec<u8> = (0..rows).map(|r| (r % 10) as u8).collect();
    put(dir, "big-labels.idx", &idx(0x08, &[rows as u32], &labels));
}

/// Runs `tfc run main.tfl` and returns the run and its peak resident set in
/// KiB (the kernel's `ru_maxrss` of the child, measured from outside).
// The child is reaped by `wait4`, which also gives its own peak (the
// process-wide `RUSAGE_CHILDREN` would mix in other tests' children).
#[allow(clippy::zombie_processes)]
fn run_measured(dir: &std::path::Path, program: &str) -> (Run, u64) {
    use std::io::Read;
    put(dir, "main.tfl", program.as_bytes());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tfc"))
        .current_dir(dir)
        .args(["run", "main.tfl", "--verbose", "--threads", "1"])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tfc");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, once; `status` and `usage` outlive the call.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4 failed");
    let code = if libc::WIFEXITED(status) { Some(libc::WEXITSTATUS(status)) } else { None };
    (Run { code, stdout, stderr }, usage.ru_maxrss as u64)
}

/// Trains one epoch of a linear classifier on the first `rows` rows of
/// the big dataset, globally shuffled (the buffer holds row numbers);
/// returns the accuracy it reaches and the peak RSS in KiB.
fn train_streamed(d: &std::path::Path, rows: usize) -> (f64, u64) {
    let program = format!(
        "use std.nn.{{Dense}}\nuse std.loss.softmax_cross_entropy\nuse std.optim.sgd\n\
         model Lin {{\n    l = Dense({FEATURES}, 10)\n    fn forward(x: f32[B, {FEATURES}]) -> f32[B, 10] = l(x)\n}}\n\
         let net = Lin(seed = 0)\n\
         let data = load_idx(\"big-images.idx\", \"big-labels.idx\") |> take({rows})\n\
         print(count(data))\n\
         train net on data |> shuffle({rows}, seed = 1) |> batch(1024) {{\n    loss(x, y) = softmax_cross_entropy(net(x), y)\n    optimizer = sgd(lr = 0.1)\n    epochs = 1\n}}\n\
         let (x, y) = first(data |> batch(1000))\n\
         print(mean(cast(argmax(net(x), axis = 1) == y, f32)))\n"
    );
    let (run, peak_kib) = run_measured(d, &program);
    assert_eq!(run.code, Some(0), "tfc failed:\n{}", run.stderr);
    let mut lines = run.stdout.lines();
    assert_eq!(lines.next(), Some(rows.to_string().as_str()));
    let accuracy: f64 = lines.next().and_then(|l| l.trim_start_matches("f32 ").parse().ok()).expect("an accuracy");
    assert!(
        run.stderr.contains(&format!("this process read {rows} elements of the training data")),
        "every row is read once:\n{}",
        run.stderr
    );
    (accuracy, peak_kib)
}

#[test]
fn a_dataset_four_times_the_memory_limit_trains_in_bounded_memory() {
    let d = scratch("stream_big");
    write_big(&d, ROWS);
    let data_mib = (ROWS * FEATURES * 4) >> 20;
    let limit_mib = data_mib as u64 / 4;
    let (accuracy, peak_kib) = train_streamed(&d, ROWS);
    assert!(accuracy > 0.9, "the model did not learn from the streamed data: accuracy {accuracy}");
    assert!(
        peak_kib < limit_mib << 10,
        "peak RSS {} MiB over the limit of {limit_mib} MiB for {data_mib} MiB of data",
        peak_kib >> 10
    );
    // An eighth of the data takes as much memory, give or take (16 MiB of
    // allocator noise, against the 224 MiB more data): the peak does not
    // grow with the dataset.
    let (_, small_kib) = train_streamed(&d, ROWS / 8);
    assert!(
        peak_kib < small_kib + (16 << 10),
        "peak RSS grew with the data: {} MiB for {data_mib} MiB, {} MiB for an eighth of it",
        peak_kib >> 10,
        small_kib >> 10
    );
}

#[test]
fn shards_by_pattern_are_the_data_of_one_file() {
    let d = scratch("stream_shards");
    // 10 rows of 3 values, as one file and as shards of 4, 0, 5 and 1 rows.
    let values: Vec<f32> = (0..30).map(|v| v as f32 * 0.5).collect();
    put(&d, "all.npy", &npy("<f4", &[10, 3], false, &f32s(&values)));
    let mut at = 0;
    for (i, n) in [4usize, 0, 5, 1].iter().enumerate() {
        put(&d, &format!("part-{i}.npy"), &npy("<f4", &[*n, 3], false, &f32s(&values[at * 3..(at + n) * 3])));
        at += n;
    }
    let labels: Vec<u8> = (0..10).collect();
    put(&d, "all-images.idx", &idx(0x08, &[10, 1], &labels));
    put(&d, "all-labels.idx", &idx(0x08, &[10], &labels));
    put(&d, "p0-images.idx", &idx(0x08, &[6, 1], &labels[..6]));
    put(&d, "p0-labels.idx", &idx(0x08, &[6], &labels[..6]));
    put(&d, "p1-images.idx", &idx(0x08, &[4, 1], &labels[6..]));
    put(&d, "p1-labels.idx", &idx(0x08, &[4], &labels[6..]));
    let program = "\
        let one = load_npy(\"all.npy\") |> shuffle(10, seed = 3) |> batch(4)\n\
        let many = load_npy(\"part-*.npy\") |> shuffle(10, seed = 3) |> batch(4)\n\
        print(count(many))\n\
        print(collect(one |> map(fn(x) = sum(x))) == collect(many |> map(fn(x) = sum(x))))\n\
        print(collect(load_npy((\"part-2.npy\", \"part-0.npy\")) |> take(2)))\n\
        let pairs = load_idx(\"p?-images.idx\", \"p?-labels.idx\") |> skip(4) |> batch(3)\n\
        print(collect(pairs |> map(fn(x, y) = sum(x) + cast(sum(y), f32))))\n";
    assert_eq!(
        ok(&d, program),
        "3\nbool[3] [true, true, true]\nf32[2, 3] [[6, 6.5, 7], [7.5, 8, 8.5]]\nf32[2] [30, 48]\n"
    );
}

#[test]
fn shards_that_disagree_are_refused_while_checking() {
    let d = scratch("stream_bad_shards");
    put(&d, "a-0.npy", &npy("<f4", &[2, 3], false, &f32s(&[0.0; 6])));
    put(&d, "a-1.npy", &npy("<f4", &[2, 4], false, &f32s(&[0.0; 8])));
    fails(
        &d,
        "print(count(load_npy(\"a-*.npy\")))\n",
        &["a-1.npy", "holds elements of (f32[4])", "the first shard", "a-0.npy", "holds (f32[3])"],
    );
    put(&d, "i-0.idx", &idx(0x08, &[1], &[1]));
    put(&d, "i-1.idx", &idx(0x08, &[1], &[1]));
    put(&d, "l-0.idx", &idx(0x08, &[1], &[1]));
    fails(&d, "print(count(load_idx(\"i-*.idx\", \"l-*.idx\")))\n", &["2 images files but 1 labels files"]);
    fails(&d, "print(count(load_npy(\"none-*.npy\")))\n", &["`none-*.npy` matches no file"]);
}

#[test]
fn a_damaged_shard_is_named() {
    let d = scratch("stream_damaged");
    let good = npy("<f4", &[4, 2], false, &f32s(&[1.0; 8]));
    put(&d, "s-0.npy", &good);
    put(&d, "s-1.npy", &good[..good.len() - 4]);
    fails(&d, "print(count(load_npy(\"s-*.npy\")))\n", &["s-1.npy", "the data is truncated"]);
}

#[test]
fn interleave_reads_shards_in_turn_as_tf_data_does() {
    let d = scratch("stream_interleave");
    // Shards of 4, 0, 5 and 1 rows; row r holds [1.5 r, 1.5 r + 0.5, 1.5 r + 1].
    let values: Vec<f32> = (0..30).map(|v| v as f32 * 0.5).collect();
    let mut at = 0;
    for (i, n) in [4usize, 0, 5, 1].iter().enumerate() {
        put(&d, &format!("part-{i}.npy"), &npy("<f4", &[*n, 3], false, &f32s(&values[at * 3..(at + n) * 3])));
        at += n;
    }
    // The orders TensorFlow 2.21's `interleave` gives for these shard sizes.
    let program = "\
        print(collect(load_npy(\"part-*.npy\") |> interleave(2) |> map(fn(x) = x[0] / 1.5)))\n\
        print(collect(load_npy(\"part-*.npy\") |> interleave(3, block_length = 2) |> map(fn(x) = x[0] / 1.5)))\n";
    assert_eq!(ok(&d, program), "f32[10] [0, 1, 4, 2, 5, 3, 6, 7, 9, 8]\nf32[10] [0, 1, 4, 5, 2, 3, 9, 6, 7, 8]\n");
    // Read on several threads, a batch is the same.
    let rows: Vec<f32> = (0..150 * 8).map(|v| (v % 97) as f32).collect();
    for (i, (from, to)) in [(0, 50), (50, 120), (120, 150)].iter().enumerate() {
        put(&d, &format!("big-{i}.npy"), &npy("<f4", &[to - from, 8], false, &f32s(&rows[from * 8..to * 8])));
    }
    let program = "\
        let plain = load_npy(\"big-*.npy\") |> interleave(2) |> batch(75)\n\
        let threaded = load_npy(\"big-*.npy\") |> interleave(2, parallel = 2) |> batch(75)\n\
        let auto = load_npy(\"big-*.npy\") |> interleave(2, parallel = auto) |> shuffle(150, seed = 4) |> batch(75)\n\
        let shuffled = load_npy(\"big-*.npy\") |> interleave(2) |> shuffle(150, seed = 4) |> batch(75)\n\
        print(all(collect(plain |> map(fn(x) = x[:, 0] * 1.0 + x[:, 7])) == collect(threaded |> map(fn(x) = x[:, 0] * 1.0 + x[:, 7]))))\n\
        print(all(collect(auto |> map(fn(x) = x[:, 0] * 1.0 + x[:, 7])) == collect(shuffled |> map(fn(x) = x[:, 0] * 1.0 + x[:, 7]))))\n";
    assert_eq!(ok(&d, program), "bool true\nbool true\n");
    fails(&d, "print(count(range(10) |> interleave(2)))\n", &["`interleave` reads the shard files of a source"]);
    fails(
        &d,
        "print(count(load_npy(\"big-*.npy\") |> take(3) |> interleave(2)))\n",
        &["put it right after `load_tfrecord`, `load_npy` or `load_idx`"],
    );
    fails(&d, "print(count(load_npy(\"big-*.npy\") |> interleave(0)))\n", &["`cycle_length` must be positive, not 0"]);
}
