//! How a multi-process run is launched: the rank and world size a launcher
//! gave this process, the hosts a user asked for (`--hosts`, `--hostfile`,
//! `TF_CONFIG`) and the `mpirun` command line that starts the ranks.
//!
//! Everything here is pure: the environment comes in as a function and files
//! as text, so every case is testable without MPI. Nothing panics on any
//! input; every refusal is a [`Diagnostic`] with code E0410 (`Code::Launch`).
//!
//! ```text
//! parse_hosts("h1:2,h2")        -> [Host { name: "h1", slots: 2 }, Host { name: "h2", slots: 1 }]
//! placement(OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4) -> Some(Placement { rank: 1, size: 4 })
//! mpirun_command(Local(4))      -> mpirun -n 4 --oversubscribe ... /path/to/tfc run train.tfl
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::diag::{Code, Diagnostic};

/// Where this process sits in a job that a launcher started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub rank: usize,
    pub size: usize,
}

/// The (rank, size) variables each launcher sets, in the order they are trusted:
/// `mpirun` inside a Slurm allocation sets both its own and Slurm's, and its own are right.
const LAUNCHER_VARIABLES: [(&str, &str); 3] =
    [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")];

/// Reads the rank and world size that a launcher set (Open MPI, then MPICH / Hydra and
/// Intel MPI, then Slurm's srun). `None` when no launcher set both of its variables.
pub fn placement(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Placement>, Diagnostic> {
    for (rank_var, size_var) in LAUNCHER_VARIABLES {
        let rank = env(rank_var).map(|value| launcher_number(rank_var, &value)).transpose()?;
        let size = env(size_var).map(|value| launcher_number(size_var, &value)).transpose()?;
        // A launcher sets both: a Slurm batch script without `--ntasks` has SLURM_PROCID=0
        // alone, and the plain single process it starts must still run.
        let (Some(rank), Some(size)) = (rank, size) else { continue };
        if rank >= size {
            let message = format!("rank `{rank_var}={rank}` is outside a job of `{size_var}={size}` ranks");
            return Err(Diagnostic::new(Code::Launch, message).note("ranks count from 0 and a job has at least one"));
        }
        return Ok(Some(Placement { rank, size }));
    }
    Ok(None)
}

/// The threads each of `ranks` ranks on a host of `cores` cores runs by
/// default (`Communicator::ranks_on_this_host` counts them): an equal share, at least one (two ranks of two threads on two
/// cores would take turns on them).
pub fn threads_per_rank(cores: usize, ranks: usize) -> usize {
    (cores / ranks.max(1)).max(1)
}

fn launcher_number(var: &str, value: &str) -> Result<usize, Diagnostic> {
    digits(value.trim()).ok_or_else(|| {
        Diagnostic::new(Code::Launch, format!("`{var}` is `{value}`, not a number"))
            .help(format!("unset `{var}` or let the MPI launcher set it"))
    })
}

/// A plain decimal number: `usize::from_str` would also take `+3`.
fn digits(text: &str) -> Option<usize> {
    text.parse().ok().filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
}

fn slot_count(text: &str) -> Option<usize> {
    digits(text).filter(|&n| n > 0)
}

/// One host and how many ranks (slots) run on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub slots: usize,
}

/// `--hosts h1:2,h2:2`; a host without `:N` has 1 slot. Spaces around a comma are allowed.
pub fn parse_hosts(spec: &str) -> Result<Vec<Host>, Diagnostic> {
    let bad = |message: String| {
        Diagnostic::new(Code::Launch, message).help("write `--hosts` as `name:slots,...`, e.g. `--hosts h1:2,h2:2`")
    };
    if spec.trim().is_empty() {
        return Err(bad("`--hosts` lists no host".to_string()));
    }
    let mut hosts: Vec<Host> = Vec::new();
    for (i, element) in spec.split(',').map(str::trim).enumerate() {
        if element.is_empty() {
            return Err(bad(format!("host {} in `--hosts` is empty (two commas, or one at an end)", i + 1)));
        }
        let (name, slots) = match element.split_once(':') {
            Some((name, count)) => {
                let wrong = || bad(format!("`{element}` in `--hosts` has `{count}` slots, not a positive number"));
                (name, slot_count(count).ok_or_else(wrong)?)
            }
            None => (element, 1),
        };
        if name.is_empty() {
            return Err(bad(format!("`{element}` in `--hosts` has no host name")));
        }
        if name.contains(char::is_whitespace) {
            return Err(bad(format!("host name `{name}` in `--hosts` contains whitespace")));
        }
        if hosts.iter().any(|h| h.name == name) {
            return Err(bad(format!("host `{name}` is listed twice in `--hosts`"))
                .note("give a host several ranks with `name:slots` instead of repeating it"));
        }
        hosts.push(Host { name: name.to_string(), slots });
    }
    Ok(hosts)
}

/// An Open MPI hostfile: `name` or `name slots=N` a line (`max_slots=N` is accepted and
/// ignored), `#` comments and blank lines skipped. A host listed twice gets the slots of
/// both lines, as Open MPI does. `path` is only for the messages.
pub fn parse_hostfile(text: &str, path: &str) -> Result<Vec<Host>, Diagnostic> {
    let mut hosts: Vec<Host> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |message: String| {
            Diagnostic::new(Code::Launch, format!("{path}:{}: {message}", i + 1))
                .help("write one host a line, as `name` or `name slots=N`")
        };
        let mut words = line.split('#').next().unwrap_or("").split_whitespace();
        let Some(name) = words.next() else { continue };
        if name.contains(':') || name.contains('=') {
            return Err(bad(format!("expected a host name, found `{name}`")));
        }
        let mut slots = None;
        for word in words {
            let (key, value) = word.split_once('=').unwrap_or((word, ""));
            let count = slot_count(value).filter(|_| key == "max_slots" || (key == "slots" && slots.is_none()));
            match (key, count) {
                ("slots", Some(n)) => slots = Some(n),
                ("max_slots", Some(_)) => {}
                _ => return Err(bad(format!("expected `slots=N` once, N a positive number, found `{word}`"))),
            }
        }
        add_slots(&mut hosts, name, slots.unwrap_or(1));
    }
    if hosts.is_empty() {
        return Err(Diagnostic::new(Code::Launch, format!("hostfile `{path}` lists no host"))
            .help("write one host a line, as `name` or `name slots=N`"));
    }
    Ok(hosts)
}

/// Gives `name` `slots` more slots, adding it at the end if it is new.
fn add_slots(hosts: &mut Vec<Host>, name: &str, slots: usize) {
    match hosts.iter_mut().find(|h| h.name == name) {
        Some(host) => host.slots += slots,
        None => hosts.push(Host { name: name.to_string(), slots }),
    }
}

/// TensorFlow's `TF_CONFIG` as a cluster spec: the `worker` addresses, in order, give the
/// hosts with one slot each. Ports are dropped (MPI picks its own), so a host listed twice
/// becomes one host with two slots, where it was first seen.
pub fn parse_tf_config(text: &str) -> Result<Vec<Host>, Diagnostic> {
    let bad = |message: String| {
        Diagnostic::new(Code::Launch, format!("`TF_CONFIG`: {message}"))
            .help(r#"write it as {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}"#)
    };
    let config: serde_json::Value =
        serde_json::from_str(text).map_err(|e| bad(format!("this is not valid JSON ({e})")))?;
    let cluster = config.get("cluster").ok_or_else(|| bad("there is no `cluster`".to_string()))?;
    let jobs = cluster.as_object().ok_or_else(|| bad("`cluster` is not an object".to_string()))?;
    if let Some(job) = jobs.keys().find(|&job| job != "worker") {
        let message = format!(
            "`TF_CONFIG` has a `{job}` job, but tfc runs synchronous data parallelism only, with no parameter servers"
        );
        return Err(Diagnostic::new(Code::Launch, message)
            .note("there is no chief or evaluator either: every process is a worker, training in step with the others")
            .help(r#"list every machine under "worker" and remove the other jobs"#));
    }
    let workers = match jobs.get("worker").and_then(|w| w.as_array()) {
        Some(list) if !list.is_empty() => list,
        Some(_) => return Err(bad("the `worker` list is empty".to_string())),
        None => return Err(bad("`cluster` has no `worker` list".to_string())),
    };
    let mut hosts: Vec<Host> = Vec::new();
    for (i, entry) in workers.iter().enumerate() {
        let address =
            entry.as_str().ok_or_else(|| bad(format!("worker {i} is `{entry}`, not a \"host:port\" string")))?;
        let name = host_of(address);
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad(format!("worker {i} is `{address}`, not a \"host:port\" address")));
        }
        add_slots(&mut hosts, name, 1);
    }
    if let Some(task) = config.get("task") {
        let task = task.as_object().ok_or_else(|| bad(format!("`task` is `{task}`, not an object")))?;
        if let Some(kind) = task.get("type").filter(|kind| kind.as_str() != Some("worker")) {
            return Err(bad(format!("the task type is `{kind}`, but tfc runs workers only")));
        }
        if let Some(index) = task.get("index") {
            if index.as_u64().is_none_or(|n| n >= workers.len() as u64) {
                return Err(bad(format!("the task index `{index}` is not one of the {} workers", workers.len())));
            }
        }
    }
    Ok(hosts)
}

/// The host of `host:port`, `host` or `[v6 address]:port`.
fn host_of(address: &str) -> &str {
    let address = address.trim();
    if let Some(bracketed) = address.strip_prefix('[') {
        return bracketed.split_once(']').map_or("", |(host, _)| host);
    }
    address.rsplit_once(':').map_or(address, |(host, _)| host)
}

/// How a `tfc run` asked for several processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cluster {
    /// `--workers N` on this machine.
    Local(usize),
    /// `--hosts` or `TF_CONFIG`.
    Hosts(Vec<Host>),
    /// `--hostfile PATH`, with the hosts read from it.
    Hostfile(PathBuf, Vec<Host>),
}

impl Cluster {
    /// The number of ranks: every slot of every host.
    pub fn ranks(&self) -> usize {
        match self {
            Cluster::Local(n) => *n,
            Cluster::Hosts(hosts) | Cluster::Hostfile(_, hosts) => hosts.iter().map(|h| h.slots).sum(),
        }
    }
}

/// A program to start, its arguments and the variables to add to its environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
}

/// The Open MPI `mpirun` command that starts `cluster.ranks()` copies of `exe` with `args`
/// (the tfc arguments, without `--workers`, `--hosts` or `--hostfile`).
pub fn mpirun_command(mpirun: &Path, cluster: &Cluster, exe: &Path, args: &[OsString], as_root: bool) -> LaunchCommand {
    let mut command: Vec<OsString> = vec!["-n".into(), cluster.ranks().to_string().into()];
    // More ranks than cores must start, and ranks sharing a core must sleep while they
    // wait instead of busy-polling; each rank runs one thread, left unpinned.
    command.push("--oversubscribe".into());
    command.extend(["--mca", "mpi_yield_when_idle", "1"].map(OsString::from));
    command.extend(["--bind-to", "none"].map(OsString::from));
    match cluster {
        Cluster::Local(_) => {}
        // A hostfile goes to mpirun as the host list tfc read from it: Open
        // MPI would give a host without `slots=` as many slots as it has
        // cores, and the ranks would not land where the file says.
        Cluster::Hosts(hosts) | Cluster::Hostfile(_, hosts) => {
            let list: Vec<String> = hosts.iter().map(|h| format!("{}:{}", h.name, h.slots)).collect();
            command.extend(["--host".into(), list.join(",").into()]);
        }
    }
    command.push(exe.as_os_str().to_owned());
    command.extend(args.iter().cloned());
    let mut env = vec![("TFC_LAUNCHED_BY_TFC".to_string(), "1".to_string())];
    if as_root {
        // Open MPI 4.1 refuses root even with `--allow-run-as-root` unless both of these are set.
        env.push(("OMPI_ALLOW_RUN_AS_ROOT".to_string(), "1".to_string()));
        env.push(("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM".to_string(), "1".to_string()));
    }
    LaunchCommand { program: mpirun.to_path_buf(), args: command, env }
}

/// Finds the launcher: `$TFC_MPIRUN` if set (it must exist), else `mpirun`, then `mpiexec`, on `$PATH`.
pub fn find_mpirun(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, Diagnostic> {
    if let Some(chosen) = env("TFC_MPIRUN").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&chosen);
        return Some(path).filter(|p| p.is_file()).ok_or_else(|| {
            Diagnostic::new(Code::Launch, format!("`TFC_MPIRUN` is `{chosen}`, which is not a file"))
                .help("set `TFC_MPIRUN` to the full path of `mpirun`, or unset it to search `PATH`")
        });
    }
    let search = env("PATH").unwrap_or_default();
    for name in ["mpirun", "mpiexec"] {
        let mut found = search.split(':').filter(|dir| !dir.is_empty()).map(|dir| Path::new(dir).join(name));
        if let Some(path) = found.find(|p| is_executable(p)) {
            return Ok(path);
        }
    }
    Err(Diagnostic::new(Code::Launch, "a multi-process run needs `mpirun`, and there is none on `PATH`")
        .help("install Open MPI (`apt-get install openmpi-bin`) or set `TFC_MPIRUN` to the launcher's path"))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k: &str| pairs.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn a_rank_runs_its_share_of_the_host_cores_by_default() {
        assert_eq!(threads_per_rank(2, 2), 1);
        assert_eq!(threads_per_rank(16, 4), 4);
        assert_eq!(threads_per_rank(2, 4), 1, "at least one thread");
        assert_eq!(threads_per_rank(7, 2), 3);
    }

    fn host(name: &str, slots: usize) -> Host {
        Host { name: name.to_string(), slots }
    }

    fn refusal<T: std::fmt::Debug>(result: Result<T, Diagnostic>) -> String {
        let d = result.expect_err("an error");
        assert_eq!(d.code, Code::Launch);
        d.message
    }

    #[test]
    fn a_plain_process_has_no_placement() {
        assert_eq!(placement(&vars(&[])), Ok(None));
        assert_eq!(placement(&vars(&[("SLURM_PROCID", "0")])), Ok(None));
    }

    #[test]
    fn open_mpi_is_trusted_before_pmi_and_slurm() {
        let all = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "4"), ("PMI_RANK", "2"), ("PMI_SIZE", "3")];
        let all = [&all[..], &[("SLURM_PROCID", "5"), ("SLURM_NTASKS", "8")]].concat();
        let found = |from: usize| placement(&vars(&all[from..])).map(|p| p.map(|p| (p.rank, p.size)));
        assert_eq!([found(0), found(2), found(4)], [Ok(Some((1, 4))), Ok(Some((2, 3))), Ok(Some((5, 8)))]);
    }

    #[test]
    fn a_launcher_variable_that_is_not_a_number_is_named_with_its_value() {
        let message = refusal(placement(&vars(&[("PMI_RANK", "one"), ("PMI_SIZE", "2")])));
        assert!(message.contains("PMI_RANK") && message.contains("one"), "{message}");
        let message = refusal(placement(&vars(&[("PMI_RANK", "0"), ("PMI_SIZE", "-2")])));
        assert!(message.contains("PMI_SIZE") && message.contains("-2"), "{message}");
        assert!(refusal(placement(&vars(&[("SLURM_PROCID", "x")]))).contains("`SLURM_PROCID` is `x`"));
    }

    #[test]
    fn a_rank_outside_the_world_or_an_empty_world_is_refused() {
        let message = refusal(placement(&vars(&[("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "4")])));
        assert!(message.contains("OMPI_COMM_WORLD_RANK=4") && message.contains("OMPI_COMM_WORLD_SIZE=4"), "{message}");
        let message = refusal(placement(&vars(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "0")])));
        assert!(message.contains("SLURM_NTASKS") && message.contains('0'), "{message}");
    }

    #[test]
    fn hosts_take_one_slot_unless_given_a_count() {
        assert_eq!(parse_hosts("h1:2, h2"), Ok(vec![host("h1", 2), host("h2", 1)]));
    }

    #[test]
    fn malformed_host_lists_are_refused_with_the_bad_part() {
        assert!(refusal(parse_hosts(" ")).contains("no host"));
        assert!(refusal(parse_hosts(":2")).contains("no host name"));
        assert!(refusal(parse_hosts("h1,,h2")).contains("host 2"));
        assert!(refusal(parse_hosts("h1,")).contains("empty"));
        assert!(refusal(parse_hosts("h1:0")).contains("`0`"));
        assert!(refusal(parse_hosts("h1:+2")).contains("`+2`"));
        assert!(refusal(parse_hosts("h1:")).contains("positive"));
        assert!(refusal(parse_hosts("my host:2")).contains("whitespace"));
        assert!(refusal(parse_hosts("h1:2,h1:1")).contains("`h1` is listed twice"));
    }

    #[test]
    fn a_hostfile_skips_comments_and_merges_repeated_hosts() {
        let text = "# cluster\n\nh1 slots=2 max_slots=8\nh2   # one slot\nh1 slots=1\n";
        assert_eq!(parse_hostfile(text, "hosts.txt"), Ok(vec![host("h1", 3), host("h2", 1)]));
    }

    #[test]
    fn hostfile_errors_name_the_file_and_line_and_an_empty_hostfile_is_refused() {
        let message = refusal(parse_hostfile("h1\nh2 slots=two\n", "hosts.txt"));
        assert!(message.starts_with("hosts.txt:2:") && message.contains("slots=N"), "{message}");
        let message = refusal(parse_hostfile("h1\n\nh2 cpus=4\n", "hosts.txt"));
        assert!(message.starts_with("hosts.txt:3:") && message.contains("cpus=4"), "{message}");
        assert!(refusal(parse_hostfile("h1:2\n", "f")).starts_with("f:1: expected a host name"));
        assert!(refusal(parse_hostfile("h1 slots=2 slots=3\n", "f")).contains("once"));
        assert!(refusal(parse_hostfile("h1 max_slots=0\n", "f")).contains("max_slots=0"));
        assert!(refusal(parse_hostfile("# nothing\n\n", "empty.txt")).contains("`empty.txt` lists no host"));
    }

    #[test]
    fn tf_config_workers_become_hosts_in_order_without_ports() {
        let text = r#"{"cluster": {"worker": ["b:2222", "a:2222", "b:2223", "[::1]:9"]},
                       "task": {"type": "worker", "index": 3}}"#;
        assert_eq!(parse_tf_config(text), Ok(vec![host("b", 2), host("a", 1), host("::1", 1)]));
        assert_eq!(parse_tf_config(r#"{"cluster": {"worker": ["solo"]}}"#), Ok(vec![host("solo", 1)]));
    }

    #[test]
    fn tf_config_with_a_parameter_server_job_is_refused() {
        let d = parse_tf_config(r#"{"cluster": {"worker": ["a:1"], "ps": ["p:1"]}}"#).expect_err("refused");
        assert!(d.message.contains("`ps`") && d.message.contains("synchronous"), "{}", d.message);
        assert!(d.help.is_some_and(|h| h.contains("\"worker\"")));
        assert!(refusal(parse_tf_config(r#"{"cluster": {"chief": ["c:1"]}}"#)).contains("`chief`"));
    }

    #[test]
    fn tf_config_with_a_task_that_is_not_a_worker_is_refused() {
        let text = r#"{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}"#;
        assert!(refusal(parse_tf_config(text)).contains("chief"));
        let text = r#"{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}"#;
        assert!(refusal(parse_tf_config(text)).contains("index `1`"));
    }

    #[test]
    fn malformed_tf_config_is_refused_with_the_reason() {
        assert!(refusal(parse_tf_config("{cluster")).contains("not valid JSON"));
        assert!(refusal(parse_tf_config("{}")).contains("no `cluster`"));
        assert!(refusal(parse_tf_config(r#"{"cluster": {}}"#)).contains("no `worker` list"));
        assert!(refusal(parse_tf_config(r#"{"cluster": {"worker": []}}"#)).contains("empty"));
        assert!(refusal(parse_tf_config(r#"{"cluster": {"worker": ["a:1", 7]}}"#)).contains("worker 1 is `7`"));
        assert!(refusal(parse_tf_config(r#"{"cluster": {"worker": [":2222"]}}"#)).contains("not a \"host:port\""));
        assert!(refusal(parse_tf_config(r#"{"cluster": {"worker": ["a:1"]}, "task": "worker"}"#)).contains("`task`"));
    }

    #[test]
    fn a_cluster_has_as_many_ranks_as_slots() {
        assert_eq!(Cluster::Local(3).ranks(), 3);
        assert_eq!(Cluster::Hosts(vec![host("a", 2), host("b", 3)]).ranks(), 5);
        assert_eq!(Cluster::Hostfile("f".into(), vec![host("a", 4)]).ranks(), 4);
    }

    #[test]
    fn mpirun_starts_every_slot_with_the_tfc_arguments_last() {
        let line = |cluster: &Cluster, args: &[OsString], as_root: bool| {
            let command = mpirun_command(Path::new("/usr/bin/mpirun"), cluster, Path::new("/bin/tfc"), args, as_root);
            assert_eq!(command.program, Path::new("/usr/bin/mpirun"));
            let words: Vec<String> = command.args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
            (words.join(" "), command.env)
        };
        let flags = "-n 4 --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none";
        let hosts = Cluster::Hosts(vec![host("h1", 2), host("h2", 2)]);
        let (words, env) = line(&hosts, &["run".into(), "train.tfl".into()], false);
        assert_eq!(words, format!("{flags} --host h1:2,h2:2 /bin/tfc run train.tfl"));
        assert_eq!(env, [("TFC_LAUNCHED_BY_TFC".to_string(), "1".to_string())]);
        let (words, env) = line(&Cluster::Hostfile("hosts.txt".into(), vec![host("h1", 4)]), &[], true);
        assert_eq!(words, format!("{flags} --host h1:4 /bin/tfc"));
        let names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["TFC_LAUNCHED_BY_TFC", "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"]);
        assert_eq!(line(&Cluster::Local(4), &[], false).0, format!("{flags} /bin/tfc"));
    }

    #[test]
    fn the_launcher_is_found_on_path_or_where_tfc_mpirun_says() {
        let dir = std::env::temp_dir().join(format!("tfc-launch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        let mpiexec = dir.join("mpiexec");
        std::fs::write(&mpiexec, "#!/bin/sh\n").expect("a fake launcher");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&mpiexec, std::fs::Permissions::from_mode(0o755)).expect("executable");
        }
        let on_path = format!("/nonexistent::{}", dir.display());
        assert_eq!(find_mpirun(&vars(&[("PATH", &on_path)])), Ok(mpiexec.clone()));
        let chosen = mpiexec.display().to_string();
        assert_eq!(find_mpirun(&vars(&[("TFC_MPIRUN", &chosen), ("PATH", "")])), Ok(mpiexec.clone()));
        let message = refusal(find_mpirun(&vars(&[("TFC_MPIRUN", "/nonexistent/mpirun"), ("PATH", &on_path)])));
        assert!(message.contains("TFC_MPIRUN") && message.contains("/nonexistent/mpirun"), "{message}");
        let d = find_mpirun(&vars(&[("PATH", "/nonexistent")])).expect_err("no launcher");
        assert!(d.help.is_some_and(|h| h.contains("openmpi-bin") && h.contains("TFC_MPIRUN")));
        std::fs::remove_dir_all(&dir).ok();
    }
}
