//! Data-parallel training on several processes (feature `mpi`, Open MPI's
//! `mpirun`): the same bits on 1, 2 and 4 ranks, checkpoints that resume
//! on any number of ranks, and jobs that fail fast — a killed rank, a
//! stuck rank, ranks that compiled different programs — instead of
//! hanging. Under `CI=true` a missing `mpirun` fails these tests; elsewhere
//! they say they were skipped.
#![cfg(feature = "mpi")]

mod support;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{digits_trained, put, run_with, scratch, Run};

/// Whether `mpirun` is there (under CI it must be).
fn has_mpirun() -> bool {
    let found = std::env::var("PATH").unwrap_or_default().split(':').any(|dir| Path::new(dir).join("mpirun").is_file());
    if !found {
        assert!(std::env::var("CI").is_err(), "CI=true but there is no mpirun: .ci/run installs openmpi-bin");
        eprintln!("skipped: no mpirun on PATH (apt-get install openmpi-bin)");
    }
    found
}

/// The digits MLP trained for `epochs`, saved to `w.safetensors`.
fn digits(epochs: usize, settings: &str) -> String {
    digits_trained(epochs, settings) + "save(net, \"w.safetensors\")\n"
}

fn trained(dir: &Path, program: &str, args: &[&str]) -> Vec<u8> {
    let r = run_with(dir, program, args, &[]);
    assert_eq!(r.code, Some(0), "tfc run {args:?} failed:\n{}", r.stderr);
    saved_weights(dir)
}

/// The weights a run in `dir` saved.
fn saved_weights(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("w.safetensors")).expect("the saved weights")
}

/// Asserts that a run's standard error says `text`.
fn says(stderr: &str, text: &str) {
    assert!(stderr.contains(text), "expected `{text}`:\n{stderr}");
}

#[test]
fn two_and_four_ranks_end_with_the_weights_of_one_process_bit_for_bit() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-bits");
    let program = digits(3, "");
    // Batches of 64 split into 8 virtual shards by default; one process
    // with `--shards 8` sums them in the same order.
    let alone = trained(&dir, &program, &["--shards", "8", "--threads", "2"]);
    for workers in ["1", "2", "4"] {
        let spread = trained(&dir, &program, &["--workers", workers, "--threads", "1"]);
        assert!(spread == alone, "{workers} ranks end with other weights than one process");
    }
    // With another number of shards the sums round differently: the
    // comparison above can fail.
    let other = trained(&dir, &program, &["--shards", "4", "--threads", "1"]);
    assert!(other != alone, "4 and 8 shards gave the same bits");
}

/// The checkpoint settings of the resume tests, and the weights of four
/// uninterrupted epochs on 2 ranks with them (trained in `dir`).
fn uninterrupted_resumable(dir: &str) -> (&'static str, Vec<u8>) {
    let settings = "checkpoint \"ck.safetensors\" every 1 epochs\n    resume = \"ck.safetensors\"";
    (settings, trained(&scratch(dir), &digits(4, settings), &["--workers", "2", "--threads", "1"]))
}

/// One job of two ranks in Open MPI's MPMD form, started in `dir`: rank 0
/// runs `tfc run` with `first` (a program and flags), rank 1 with `second`.
fn two_programs(dir: &Path, first: &[&OsStr], second: &[&OsStr]) -> std::process::Child {
    two_programs_with(dir, [&[], &[]], first, second)
}

/// `two_programs`, each side also given `mpirun` options (e.g. `-x VAR=1`).
fn two_programs_with(dir: &Path, options: [&[&str]; 2], first: &[&OsStr], second: &[&OsStr]) -> std::process::Child {
    let tfc = env!("CARGO_BIN_EXE_tfc");
    Command::new("mpirun")
        .current_dir(dir)
        .args(["--oversubscribe", "-n", "1"])
        .args(options[0])
        .args([tfc, "run"])
        .args(first)
        .args([":", "-n", "1"])
        .args(options[1])
        .args([tfc, "run"])
        .args(second)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mpirun")
}

/// Ranks started with different `TFC_DIST_SHM` (an MPMD launch with `-x`
/// on one side) all take rank 0's choice: their sums meet, and the weights
/// are one process's.
#[test]
fn ranks_take_rank_0s_choice_of_how_sums_travel() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-shm-choice");
    let program = digits(1, "");
    put(&dir, "main.tfl", program.as_bytes());
    let alone = trained(&dir, &program, &["--shards", "2", "--threads", "1"]);
    let run = ["main.tfl", "--shards", "2", "--threads", "1", "--verbose"].map(OsStr::new);
    for (first, second, through) in
        [("1", "0", "sums through shared memory"), ("0", "1", "sums through MPI (TFC_DIST_SHM=0)")]
    {
        let (first_env, second_env) = (format!("TFC_DIST_SHM={first}"), format!("TFC_DIST_SHM={second}"));
        let job = two_programs_with(&dir, [&["-x", &first_env], &["-x", &second_env]], &run, &run);
        let (r, _) = finish(job, Duration::from_secs(60));
        assert_eq!(r.code, Some(0), "rank 0 {first}, rank 1 {second}:\n{}", r.stderr);
        says(&r.stderr, through);
        let spread = saved_weights(&dir);
        assert!(spread == alone, "rank 0 {first}, rank 1 {second}: other weights than one process");
    }
}

/// Without `--threads`, each of two ranks on this host runs half its cores
/// (at least one), not all of them.
#[test]
fn a_rank_runs_its_share_of_the_host_cores_by_default() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-threads");
    let r = run_with(&dir, &digits(1, ""), &["--workers", "2", "--shards", "2", "--verbose"], &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = format!("; {} thread(s) per rank", (cores / 2).max(1));
    says(&r.stderr, &share);
    // Ranks that fill the cores run their input pipelines on their own
    // threads (a pipeline thread would preempt one and hold up both).
    let filled = 2 * (cores / 2).max(1) >= cores;
    let inline = r.stderr.contains("pipeline: on each rank's own thread");
    assert_eq!(inline, filled, "{} cores:\n{}", cores, r.stderr);
}

#[test]
fn a_two_rank_checkpoint_resumes_on_one_and_on_four_ranks() {
    if !has_mpirun() {
        return;
    }
    let (settings, uninterrupted) = uninterrupted_resumable("dp-resume-whole");
    for workers in ["1", "4"] {
        let dir = scratch(&format!("dp-resume-{workers}"));
        trained(&dir, &digits(2, settings), &["--workers", "2", "--threads", "1"]);
        let r = run_with(&dir, &digits(4, settings), &["--workers", workers, "--threads", "1"], &[]);
        assert_eq!(r.code, Some(0), "the resumed run failed:\n{}", r.stderr);
        assert!(r.stderr.contains("resuming from"), "{}", r.stderr);
        let resumed = saved_weights(&dir);
        assert!(resumed == uninterrupted, "resumed on {workers} ranks: other weights than uninterrupted");
    }
}

/// Starts `tfc run --workers 2` on a long training in `dir` (with `args`),
/// marked so that its ranks can be found.
fn long_job(dir: &Path, mark: &str, args: &[&str]) -> std::process::Child {
    put(dir, "main.tfl", digits(100_000, "").as_bytes());
    Command::new(env!("CARGO_BIN_EXE_tfc"))
        .current_dir(dir)
        .args(["run", "--workers", "2", "--threads", "1"])
        .args(args)
        .arg("main.tfl")
        .env("NO_COLOR", "1")
        .env("TFC_TEST_MARK", mark)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tfc")
}

/// The pid of rank `rank` of the job marked `mark`, once it has trained
/// for a moment.
fn rank_pid(mark: &str, rank: usize) -> u32 {
    let started = Instant::now();
    loop {
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(env) = std::fs::read(entry.path().join("environ")) else { continue };
            let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
            let has = |v: String| vars.contains(&v.as_bytes());
            if has(format!("TFC_TEST_MARK={mark}")) && has(format!("OMPI_COMM_WORLD_RANK={rank}")) {
                if let Ok(pid) = entry.file_name().to_string_lossy().parse() {
                    // Past start-up: the ranks compile, then train.
                    std::thread::sleep(Duration::from_secs(2));
                    return pid;
                }
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "rank {rank} never started");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for `child` to exit (at most `limit`), then returns its output
/// and how long it took.
fn finish(child: std::process::Child, limit: Duration) -> (Run, Duration) {
    let started = Instant::now();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().expect("wait for tfc"));
    while !waiter.is_finished() {
        if started.elapsed() > limit {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the job still runs after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = waiter.join().expect("the waiter");
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    (run, started.elapsed())
}

/// Starts a long 2-rank job (with `args`), sends rank 1 `signal` once it
/// trains, and waits for the job to end (at most `limit`).
fn signal_rank_one(test: &str, signal: &str, args: &[&str], limit: Duration) -> (Run, Duration) {
    let dir = scratch(test);
    let mark = format!("{test}-{}", std::process::id());
    let job = long_job(&dir, &mark, args);
    let pid = rank_pid(&mark, 1).to_string();
    assert!(Command::new("kill").args([signal, &pid]).status().expect("kill").success());
    let ended = finish(job, limit);
    // A stopped rank is still there: end it (a killed one is gone).
    let _ = Command::new("kill").args(["-9", &pid]).stderr(Stdio::null()).status();
    ended
}

#[test]
fn a_killed_rank_stops_the_job_within_seconds_naming_it() {
    if !has_mpirun() {
        return;
    }
    // Steps as two halves (8 shards), and fused with sums through shared
    // memory (2 shards).
    for shards in ["8", "2"] {
        let (r, took) =
            signal_rank_one(&format!("dp-killed-{shards}"), "-9", &["--shards", shards], Duration::from_secs(30));
        assert!(took < Duration::from_secs(10), "the job took {took:?} to stop");
        assert_ne!(r.code, Some(0));
        assert!(r.stderr.contains("rank 1"), "the error does not name rank 1:\n{}", r.stderr);
    }
}

#[test]
fn a_stuck_rank_is_named_by_the_watchdog() {
    if !has_mpirun() {
        return;
    }
    // Alive but not answering: stopped.
    // Steps as two halves (8 shards), and fused with sums through shared
    // memory (2 shards), where the other rank waits on a counter.
    for shards in ["8", "2"] {
        let args = ["--step-timeout", "2", "--shards", shards];
        let (r, took) = signal_rank_one(&format!("dp-stuck-{shards}"), "-STOP", &args, Duration::from_secs(60));
        assert!(took < Duration::from_secs(30), "the job took {took:?} to stop");
        assert_ne!(r.code, Some(0));
        assert!(r.stderr.contains("rank 1 of 2 stopped answering"), "{}", r.stderr);
    }
}

#[test]
fn ranks_that_compiled_different_programs_all_fail_fast() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-mismatch");
    put(&dir, "a.tfl", digits(2, "").as_bytes());
    put(
        &dir,
        "b.tfl",
        digits(2, "").replace("Dense(64, 128", "Dense(64, 96").replace("Dense(128", "Dense(96").as_bytes(),
    );
    let job = two_programs(&dir, &[OsStr::new("a.tfl")], &[OsStr::new("b.tfl")]);
    let (r, took) = finish(job, Duration::from_secs(60));
    assert_ne!(r.code, Some(0));
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(r.stderr.contains("E0412"), "{}", r.stderr);
    assert!(r.stderr.contains("rank 1 of 2 compiled a different training step"), "{}", r.stderr);
}

#[test]
fn three_ranks_cannot_share_eight_shards_and_are_told_what_to_change() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-three");
    let r = run_with(&dir, &digits(1, ""), &["--workers", "3", "--threads", "1"], &[]);
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("E0411"), "{}", r.stderr);
    assert!(r.stderr.contains("3 workers cannot share the 8 virtual shards"), "{}", r.stderr);
    assert!(r.stderr.contains("on rank"), "{}", r.stderr);
}

#[test]
fn batch_norm_states_are_the_first_shards_on_any_number_of_ranks() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-batchnorm");
    let program = digits_trained(2, "")
        .replace("use std.nn.{Dense}", "use std.nn.{Dense, BatchNorm}")
        .replace("l1 = Dense(64, 128, act = relu)", "l1 = Dense(64, 128)\n    bn = BatchNorm(128)")
        .replace("x |> l1 |> l2", "relu(bn(l1(x))) |> l2")
        + "save(net, \"w.safetensors\")\nprint(accuracy(net, test_set |> batch(256)))\n";
    let alone = trained(&dir, &program, &["--shards", "8", "--threads", "1"]);
    let text = String::from_utf8_lossy(&alone[..alone.len().min(4096)]).into_owned();
    assert!(text.contains("bn.running_mean"), "the checkpoint holds the running statistics: {text}");
    for workers in ["2", "4"] {
        let spread = trained(&dir, &program, &["--workers", workers, "--threads", "1"]);
        assert!(spread == alone, "{workers} ranks end with other weights or statistics than one process");
    }
}

/// Two "hosts" on this machine: network namespaces on a bridge, each with
/// its own address and host name; removed when dropped.
struct TwoHosts {
    names: [String; 2],
    bridge: String,
    subnet: String,
}

impl TwoHosts {
    /// `None` (with a note) where namespaces cannot be made: not root, or
    /// no `ip` (under CI both must work).
    fn make() -> Option<TwoHosts> {
        let ip = |args: &[&str]| Command::new("ip").args(args).status().is_ok_and(|s| s.success());
        let id = std::process::id() % 200 + 20;
        let hosts = TwoHosts {
            names: [format!("tfc{id}h1"), format!("tfc{id}h2")],
            bridge: format!("tfc{id}br"),
            subnet: format!("10.77.{id}"),
        };
        let mut ok = ip(&["netns", "add", &hosts.names[0]]) && ip(&["netns", "add", &hosts.names[1]]);
        ok = ok && ip(&["link", "add", &hosts.bridge, "type", "bridge"]);
        ok = ok && ip(&["addr", "add", &format!("{}.254/24", hosts.subnet), "dev", &hosts.bridge]);
        ok = ok && ip(&["link", "set", &hosts.bridge, "up"]);
        for (i, ns) in hosts.names.iter().enumerate() {
            let veth = format!("{}v{i}", hosts.bridge);
            ok = ok && ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", ns]);
            ok = ok && ip(&["link", "set", &veth, "master", &hosts.bridge, "up"]);
            let address = format!("{}/24", hosts.address(i));
            ok = ok && ip(&["netns", "exec", ns, "ip", "addr", "add", &address, "dev", "eth0"]);
            ok = ok && ip(&["netns", "exec", ns, "ip", "link", "set", "eth0", "up"]);
            ok = ok && ip(&["netns", "exec", ns, "ip", "link", "set", "lo", "up"]);
        }
        if !ok {
            assert!(
                std::env::var("CI").is_err(),
                "CI=true but network namespaces cannot be made (root and iproute2 are needed)"
            );
            eprintln!("skipped: cannot make network namespaces here (not root, or no iproute2)");
            return None;
        }
        Some(hosts)
    }

    fn address(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, i + 1)
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).status();
    }
}

#[test]
fn two_hosts_joined_by_a_network_train_to_the_bits_of_one_process() {
    if !has_mpirun() {
        return;
    }
    let Some(hosts) = TwoHosts::make() else { return };
    let dir = scratch("dp-two-hosts");
    // Open MPI's launch agent (instead of ssh): runs the remote command in
    // that host's namespace, under its own host name, and notes where.
    let ran = dir.join("ran");
    let agent = format!(
        "#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n  {}) ns={} ;;\n  {}) ns={} ;;\n  *) echo \"unknown host $host\" >&2; exit 1 ;;\nesac\necho \"$ns\" >> {}\nexec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $ns; $*\"\n",
        hosts.address(0),
        hosts.names[0],
        hosts.address(1),
        hosts.names[1],
        ran.display()
    );
    let agent_path = put(&dir, "agent.sh", agent.as_bytes());
    assert!(Command::new("chmod").args(["+x"]).arg(&agent_path).status().expect("chmod").success());
    let program = digits(2, "");
    let alone = trained(&dir, &program, &["--shards", "8", "--threads", "1"]);
    let subnet = format!("{}.0/24", hosts.subnet);
    let spec = format!("{}:1,{}:1", hosts.address(0), hosts.address(1));
    let agent_text = agent_path.display().to_string();
    // Over TCP between the namespaces (no shared memory between hosts).
    let env = [
        ("OMPI_MCA_plm_rsh_agent", agent_text.as_str()),
        ("OMPI_MCA_oob_tcp_if_include", subnet.as_str()),
        ("OMPI_MCA_btl_tcp_if_include", subnet.as_str()),
        ("OMPI_MCA_btl", "tcp,self"),
    ];
    std::fs::remove_file(dir.join("w.safetensors")).expect("remove the weights");
    let r = run_with(&dir, &program, &["--hosts", &spec, "--threads", "1", "--verbose"], &env);
    assert_eq!(r.code, Some(0), "the two-host run failed:\n{}", r.stderr);
    // MPI sees two hosts: their sums do not go through shared memory.
    let through = "sums through MPI (1 of the 2 ranks share this host)";
    says(&r.stderr, through);
    let mut where_ran: Vec<String> =
        std::fs::read_to_string(&ran).expect("the agent ran").lines().map(String::from).collect();
    where_ran.sort();
    assert_eq!(where_ran, hosts.names.to_vec(), "one rank per host");
    let spread = saved_weights(&dir);
    assert!(spread == alone, "two hosts end with other weights than one process");
}

#[test]
fn a_tf_config_cluster_spec_starts_its_workers() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-tf-config");
    let program = digits(2, "");
    let alone = trained(&dir, &program, &["--shards", "8", "--threads", "1"]);
    let config =
        r#"{"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}}"#;
    let r = run_with(&dir, &program, &["--threads", "1"], &[("TF_CONFIG", config)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let spread = saved_weights(&dir);
    assert!(spread == alone, "TF_CONFIG's two workers end with other weights than one process");
}

#[test]
fn a_host_that_cannot_be_reached_fails_with_a_message() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-unreachable");
    let r = run_with(&dir, &digits(1, ""), &["--hosts", "nosuchhost.invalid:1", "--threads", "1"], &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("E0410") && r.stderr.contains("the job of 1 ranks failed"), "{}", r.stderr);
    assert!(!dir.join("w.safetensors").exists());
}

#[test]
fn f16_loss_scaling_and_clipping_see_the_global_gradient_on_any_number_of_ranks() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-f16-clip");
    let program = digits(2, "precision = \"f16\"\n    clip_grad_norm = 0.5");
    let alone = trained(&dir, &program, &["--shards", "8", "--threads", "1"]);
    let text = String::from_utf8_lossy(&alone[..alone.len().min(4096)]).into_owned();
    for workers in ["2", "4"] {
        let spread = trained(&dir, &program, &["--workers", workers, "--threads", "1"]);
        assert!(spread == alone, "{workers} ranks end with other weights than one process ({text})");
    }
}

#[test]
fn each_rank_reads_only_its_share_of_the_batches_and_of_the_metrics_batches() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-share");
    // 512 examples of 16 features (IDX, f32) and 4 classes, streamed.
    let features: Vec<u8> = (0..512 * 16)
        .flat_map(|i: u32| ((i.wrapping_mul(2_654_435_761) >> 20) as f32 / 4096.0).to_be_bytes())
        .collect();
    put(&dir, "x.idx", &support::idx(0x0D, &[512, 16], &features));
    let labels: Vec<u8> = (0..512u32).map(|i| ((i * 7919) % 4) as u8).collect();
    put(&dir, "y.idx", &support::idx(0x08, &[512], &labels));
    // With the map, which is moved behind the batch (map vectorization)
    // and computes each row on its own, a rank's batch keeps its shape
    // (zeros around its rows); without it the rank holds its rows alone.
    // Batches of 48 leave a last batch of 32.
    for map in ["|> map(fn(x, y) = (x * 2.0 - 1.0, y)) ", ""] {
        let program = format!(
            "use std.nn.{{Dense}}\nuse std.loss.softmax_cross_entropy\nuse std.optim.adam\nuse std.metrics.accuracy\n\
            model M {{\n    a = Dense(16, 32, act = relu)\n    b = Dense(32, 4)\n    fn forward(x: f32[B, 16]) -> f32[B, 4] = x |> a |> b\n}}\n\
            let net = M(seed = 0)\n\
            let data = load_idx(\"x.idx\", \"y.idx\") {map}|> shuffle(512, seed = 1) |> batch(48)\n\
            let test = load_idx(\"x.idx\", \"y.idx\") |> take(300) |> batch(50)\n\
            train net on data {{\n    loss(x, y) = softmax_cross_entropy(net(x), y)\n    optimizer = adam(lr = 1e-2)\n    epochs = 2\n    eval accuracy on test every 1 epochs\n    log \"log.jsonl\" every 1 epochs\n}}\n\
            save(net, \"w.safetensors\")\n\
            print(accuracy(net, test))\n"
        );
        let alone_run = run_with(&dir, &program, &["--shards", "8", "--threads", "1"], &[]);
        assert_eq!(alone_run.code, Some(0), "one process failed:\n{}", alone_run.stderr);
        let alone = saved_weights(&dir);
        let alone_log = std::fs::read_to_string(dir.join("log.jsonl")).expect("the log");
        for (workers, read) in [("2", 512), ("4", 256)] {
            let r = run_with(&dir, &program, &["--workers", workers, "--threads", "1", "--verbose"], &[]);
            assert_eq!(r.code, Some(0), "{workers} ranks failed:\n{}", r.stderr);
            let spread = saved_weights(&dir);
            assert!(spread == alone, "{workers} ranks end with other weights than one process ({map})");
            // The metric's batches are shared among the ranks, and its value
            // is one process's, bit for bit (the log writes every digit).
            let log = std::fs::read_to_string(dir.join("log.jsonl")).expect("the log");
            let strip = |l: &str| {
                l.lines().map(|l| l.split("\"examples_per_sec\"").next().unwrap_or("").to_string()).collect::<Vec<_>>()
            };
            assert_eq!(strip(&log), strip(&alone_log), "{workers} ranks logged other metrics");
            assert_eq!(r.stdout, alone_run.stdout, "{workers} ranks printed another metric");
            let shared = format!("metric: {} of 6 batches computed here", 6usize.div_ceil(workers.parse().unwrap()));
            says(&r.stderr, &shared);
            // Two epochs of 512 examples: rank 0 of W reads 1024 / W of them.
            let line = format!("this rank read {read} elements of the training data");
            says(&r.stderr, &line);
        }
    }
}

#[test]
fn a_checkpoint_that_only_rank_0_can_read_resumes_every_rank() {
    if !has_mpirun() {
        return;
    }
    let (settings, uninterrupted) = uninterrupted_resumable("dp-bcast-whole");
    // Rank 0's "host" has the checkpoint of two epochs, rank 1's has none.
    let (host0, host1) = (scratch("dp-bcast-0"), scratch("dp-bcast-1"));
    trained(&host0, &digits(2, settings), &["--workers", "2", "--threads", "1"]);
    let program = digits(4, settings);
    put(&host0, "main.tfl", program.as_bytes());
    put(&host1, "main.tfl", program.as_bytes());
    let (a, b) = (host0.join("main.tfl"), host1.join("main.tfl"));
    let threads = [OsStr::new("--threads"), OsStr::new("1")];
    let job = two_programs(&host0, &[a.as_os_str(), threads[0], threads[1]], &[b.as_os_str(), threads[0], threads[1]]);
    let (r, _) = finish(job, Duration::from_secs(120));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("resuming from"), "{}", r.stderr);
    assert!(!host1.join("w.safetensors").exists(), "rank 1 saved weights");
    let resumed = std::fs::read(host0.join("w.safetensors")).expect("rank 0's saved weights");
    assert!(resumed == uninterrupted, "rank 1 did not start from rank 0's checkpoint");
}

/// Models the data-parallel tests were not written around — the example
/// transformer (attention, LayerNorm, gelu, Adam) and the `scan` LSTM —
/// print the same bits on 1, 2 and 4 ranks over 4 virtual shards.
#[test]
fn held_out_models_print_the_same_bits_on_one_two_and_four_ranks() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-held-out");
    for example in ["transformer", "rnn_scan"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(format!("{example}.tfl"));
        let program = std::fs::read_to_string(&path).expect("the example");
        let printed = |extra: &[&str]| {
            let args = [&["--shards", "4", "--threads", "1"], extra].concat();
            let r = run_with(&dir, &program, &args, &[]);
            assert_eq!(r.code, Some(0), "{example} {args:?} failed:\n{}", r.stderr);
            r.stdout
        };
        let alone = printed(&[]);
        assert!(!alone.trim().is_empty(), "{example} printed nothing");
        for workers in ["2", "4"] {
            assert_eq!(printed(&["--workers", workers]), alone, "{example} on {workers} ranks");
        }
    }
}

#[test]
fn steps_fused_with_their_all_reduces_give_the_bits_of_the_two_halves() {
    if !has_mpirun() {
        return;
    }
    let dir = scratch("dp-fused");
    // One shard per rank: each rank runs the step as one region whose
    // all-reduces sum the gradients where they lie. One process with the
    // same shards runs the two halves and sums them in between. 130
    // examples in batches of 64 end with a batch of 2, whose 4 shards
    // leave two empty: on 4 ranks that batch runs as two halves again.
    // The first layer's weights (64 x 256 f32, 64 KiB) are large enough
    // that four ranks sum them by parts (a reduce-scatter, then an
    // all-gather), in shared memory and through MPI alike; two ranks, and
    // smaller values, are summed whole.
    let program = digits(2, "")
        .replace("train net on train_set |>", "train net on train_set |> take(130) |>")
        .replace("Dense(64, 128", "Dense(64, 256")
        .replace("Dense(128, 10", "Dense(256, 10");
    assert!(program.contains("Dense(64, 256"), "the wider layer");
    // Ranks on one host sum through shared memory; `TFC_DIST_SHM=0` sends
    // the same sums through MPI (as between hosts): the same bits.
    for (backend, shm) in [("jit", "1"), ("jit", "0"), ("interp", "1")] {
        for shards in ["2", "4"] {
            let args = ["--shards", shards, "--threads", "1", "--backend", backend];
            let alone = trained(&dir, &program, &args);
            let env = [("TFC_DIST_SHM", shm)];
            let r = run_with(&dir, &program, &[&args[..], &["--workers", shards, "--verbose"]].concat(), &env);
            assert_eq!(r.code, Some(0), "{shards} ranks on {backend} failed:\n{}", r.stderr);
            let fused = if shards == "2" { "6 of 6" } else { "4 of 6" };
            assert!(r.stderr.contains(&format!("{fused} steps fused")), "{shards} ranks:\n{}", r.stderr);
            let through = if shm == "1" { "sums through shared memory" } else { "sums through MPI (TFC_DIST_SHM=0)" };
            says(&r.stderr, through);
            let spread = saved_weights(&dir);
            assert!(spread == alone, "{shards} ranks on {backend} (shm {shm}) end with other weights than one process");
        }
    }
}
