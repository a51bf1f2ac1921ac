//! Data-parallel training in any build: what `tfc run` says about a bad
//! request — a hostfile that does not parse, a host list or `TF_CONFIG` it
//! cannot use, shards that do not fit the batch — each before anything
//! starts, with a non-zero exit and no panic; and the step it plans (the
//! `all_reduce` pass, the plan's all-reduce kernels). (tests/distributed.rs
//! runs the ranks themselves, with feature `mpi`.)

mod support;

use support::{digits_trained, put, run_with, scratch, Run};

fn flat(r: &Run) -> String {
    r.stderr
        .lines()
        .map(|l| l.trim_start_matches(|c: char| c.is_whitespace() || c == '│'))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the digits MLP with `args` and `env`; expects exit `code` and every
/// needle in the message.
fn refused(test: &str, args: &[&str], env: &[(&str, &str)], code: i32, needles: &[&str]) {
    let dir = scratch(test);
    put(&dir, "hosts.txt", b"# two machines\nnode1 slots=2\nnode2 slots two\n");
    let r = run_with(&dir, &digits_trained(1, ""), args, env);
    assert_eq!(r.code, Some(code), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let text = flat(&r);
    for n in needles {
        assert!(text.contains(n), "the message lacks `{n}`:\n{}", r.stderr);
    }
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

#[test]
fn zero_workers_is_a_usage_error() {
    refused("dp-zero-workers", &["--workers", "0"], &[], 2, &["--workers", "0"]);
}

#[test]
fn a_hostfile_that_does_not_parse_names_its_line() {
    refused("dp-hostfile", &["--hostfile", "hosts.txt"], &[], 1, &["E0410", "hosts.txt:3"]);
}

#[test]
fn a_missing_hostfile_is_named() {
    refused("dp-no-hostfile", &["--hostfile", "nowhere.txt"], &[], 1, &["nowhere.txt"]);
}

#[test]
fn a_host_with_no_slots_is_refused() {
    refused("dp-hosts", &["--hosts", "a:2,b:0"], &[], 1, &["E0410"]);
}

#[test]
fn two_ways_of_choosing_ranks_are_refused() {
    refused("dp-two-ways", &["--workers", "2", "--hosts", "a:2"], &[], 1, &["give one of"]);
}

#[test]
fn a_tf_config_with_a_parameter_server_is_refused() {
    let config =
        r#"{"cluster": {"worker": ["a:2222", "b:2222"], "ps": ["c:2222"]}, "task": {"type": "worker", "index": 0}}"#;
    refused("dp-tf-ps", &[], &[("TF_CONFIG", config)], 1, &["E0410", "ps", "worker"]);
}

#[test]
fn a_tf_config_that_is_not_json_is_refused() {
    refused("dp-tf-json", &[], &[("TF_CONFIG", "{cluster")], 1, &["E0410", "TF_CONFIG"]);
}

#[test]
fn shards_must_be_a_power_of_two() {
    refused("dp-shards-3", &["--shards", "3"], &[], 1, &["E0411", "power of two"]);
}

#[test]
fn shards_cannot_outnumber_the_examples_of_a_batch() {
    refused("dp-shards-128", &["--shards", "128"], &[], 1, &["E0411", "batch of 64", "--shards 64"]);
}

#[test]
fn a_launcher_variable_that_is_not_a_number_is_named() {
    let env = [("OMPI_COMM_WORLD_RANK", "one"), ("OMPI_COMM_WORLD_SIZE", "2")];
    refused("dp-bad-rank", &[], &env, 1, &["E0410", "OMPI_COMM_WORLD_RANK"]);
}

#[cfg(not(feature = "mpi"))]
#[test]
fn workers_in_a_build_without_mpi_say_how_to_build_it() {
    refused("dp-no-mpi", &["--workers", "2"], &[], 1, &["E0410", "without MPI", "--features mpi"]);
}

#[test]
fn one_process_with_shards_trains_to_the_accuracy_of_a_plain_run() {
    let dir = scratch("dp-one-process");
    let program = digits_trained(5, "") + "print(accuracy(net, test_set |> batch(256)))\n";
    let printed = |args: &[&str]| -> String {
        let r = run_with(&dir, &program, args, &[]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        r.stdout.trim().to_string()
    };
    let accuracy = |text: &str| -> f64 { text.trim_start_matches("f32 ").parse().expect("an accuracy") };
    let plain = printed(&[]);
    let sharded = printed(&["--shards", "8"]);
    assert!((accuracy(&plain) - accuracy(&sharded)).abs() < 0.02, "plain {plain}, 8 shards {sharded}");
    // One shard is the plain step, bit for bit.
    assert_eq!(printed(&["--shards", "1"]), plain);
}

#[test]
fn verbose_reports_where_a_data_parallel_step_goes() {
    let dir = scratch("dp-verbose");
    let r = run_with(&dir, &digits_trained(1, ""), &["--shards", "2", "--verbose"], &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let line = r
        .stderr
        .lines()
        .find(|l| l.starts_with("data-parallel steps on 1 rank(s), 2 shards"))
        .unwrap_or_else(|| panic!("no summary:\n{}", r.stderr));
    // Two shards in one process run as two halves, never fused.
    for part in ["gradients", "exchange", "update", "between steps", "(23 steps;", "0 of 23 steps fused"] {
        assert!(line.contains(part), "{line}");
    }
}

#[test]
fn the_plan_shows_a_fused_step_with_one_all_reduce_per_gradient_and_the_loss() {
    let dir = scratch("dp-plan");
    put(&dir, "mlp.tfl", digits_trained(1, "").as_bytes());
    let plan = |extra: &[&str]| {
        let args: Vec<std::ffi::OsString> =
            [&["build", "mlp.tfl", "--emit", "plan"], extra].concat().iter().map(Into::into).collect();
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let r = support::tfc(&dir, &args);
        assert_eq!(r.code, Some(0), "{extra:?}:\n{}", r.stderr);
        r.stdout
    };
    // One shard per process: the step is one unit; its four gradients
    // (two layers' weights and biases) and the f64 loss are summed over
    // the processes on the CPU.
    let fused = plan(&["--workers", "2", "--shards", "2"]);
    assert!(fused.contains("step with all-reduce (shard of 32)"), "{fused}");
    let sums: Vec<&str> = fused.lines().filter(|l| l.contains("all_reduce_sum")).collect();
    assert_eq!(sums.len(), 2 * 5, "two shard sizes of five sums each:\n{fused}");
    assert!(sums.iter().all(|l| l.contains("on Cpu")), "{sums:?}");
    assert_eq!(sums.iter().filter(|l| l.ends_with("all_reduce_sum 1 f64")).count(), 2, "{sums:?}");
    // Eight shards on two processes: the two halves, no all-reduce.
    let halves = plan(&["--workers", "2"]);
    assert!(halves.contains("step update") && !halves.contains("all_reduce_sum"), "{halves}");
}

/// A two-parameter model's program lowered (`Session::check`, which ends
/// with the `all_reduce` pass) for `shards` shards on `world` processes.
fn lowered(world: usize, shards: usize) -> tfc::ir::Program {
    let mut session = tfc::driver::Session::new();
    session.data_parallel = Some(tfc::ir::plan::DataParallel { shards: Some(shards), world });
    let source = "use std.optim.sgd
model M { param w: f32[3, 2] = ones()
 param b: f32[2] = zeros()
 fn forward(x) = x @ w + b }
let net = M()
let xs = [[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [0.0, 1.0, 1.0], [2.0, 0.0, -1.0]]
train net on from_tensors(xs) |> batch(4) {
    loss(x) = mean(square(net(x)))
    optimizer = sgd(lr = 0.1)
    clip_grad_norm = 1.0
    steps = 1
}
";
    let file = session.add_source("case.tfl", source);
    session.check(file).unwrap_or_else(|d| panic!("{d:?}"))
}

fn all_reduces(p: &tfc::ir::Program) -> Vec<tfc::ir::NodeId> {
    p.graph.node_ids().into_iter().filter(|&n| p.graph.node(n).op == tfc::ir::Op::AllReduce).collect()
}

#[test]
fn the_all_reduce_pass_sums_every_gradient_and_the_loss_before_anything_reads_them() {
    let p = lowered(2, 2);
    let step = p
        .effects
        .iter()
        .find_map(|e| match e {
            tfc::ir::Effect::Train(t) => t.parallel.clone(),
            _ => None,
        })
        .expect("a data-parallel step");
    assert_eq!(step.fused.len(), 1);
    assert!(step.to_sum.iter().all(Vec::is_empty), "the records are used up");
    let sums = all_reduces(&p);
    // The loss, `w`'s gradient and `b`'s.
    assert_eq!(sums.len(), 3, "{}", tfc::ir::print::print_program(&p));
    assert!(sums.contains(&step.fused[0].1.outputs[0]), "the step's loss is the sum over the processes");
    for &s in &sums {
        let summed = p.graph.inputs(s)[0];
        assert_eq!(p.graph.users(summed), vec![s], "node {} is read around its sum", summed.index());
    }
    let mut again = p.clone();
    tfc::passes::all_reduce::run(&mut again, &Default::default()).expect("the pass");
    assert_eq!(all_reduces(&again).len(), 3, "a second run inserts nothing");
}

#[test]
fn without_one_shard_per_process_no_step_sums_over_the_processes() {
    assert!(all_reduces(&lowered(2, 4)).is_empty());
    assert!(all_reduces(&lowered(1, 2)).is_empty());
}
