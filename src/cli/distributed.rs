//! `tfc run` on several processes: `--workers N` (this machine), `--hosts`
//! or `--hostfile` (several), or a TensorFlow `TF_CONFIG` cluster spec
//! start the ranks through `mpirun`; a `tfc run` that a launcher started
//! (`mpirun -n 2 tfc run …`, `srun`) joins its job (`dist::join`).
//!
//! Contract: the launching `tfc` only starts the job and passes on its exit
//! status; each rank compiles and runs the program, rank 0 prints. A rank
//! that fails reports its errors with its rank and exits without saying
//! goodbye to MPI, so the launcher stops the others at once.
//!
//! Example: `tfc run --workers 2 prog.tfl` runs `mpirun -n 2
//! --oversubscribe … tfc run prog.tfl`.

use crate::diag::{Code, Diagnostic};
use crate::dist::launch::{self, Cluster, Placement};
use crate::dist::Communicator;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// How `tfc run` was asked to spread over processes.
pub(super) struct Spread<'a> {
    pub workers: Option<usize>,
    pub hosts: Option<&'a str>,
    pub hostfile: Option<&'a PathBuf>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The cluster to launch, if this `tfc run` should start ranks instead of
/// running the program itself: never when a launcher started it.
fn cluster(spread: &Spread) -> Result<Option<Cluster>, Diagnostic> {
    let given = [spread.workers.is_some(), spread.hosts.is_some(), spread.hostfile.is_some()];
    if given.iter().filter(|&&g| g).count() > 1 {
        return Err(Diagnostic::new(Code::Launch, "give one of `--workers`, `--hosts` and `--hostfile`"));
    }
    if launch::placement(&env)?.is_some() {
        return match given.iter().any(|&g| g) {
            true => Err(Diagnostic::new(
                Code::Launch,
                "this tfc was started by an MPI launcher, which already chose the ranks",
            )
            .help("drop `--workers`, `--hosts` and `--hostfile`, or run tfc without `mpirun`")),
            false => Ok(None),
        };
    }
    if let Some(n) = spread.workers {
        return Ok(Some(Cluster::Local(n)));
    }
    if let Some(spec) = spread.hosts {
        return Ok(Some(Cluster::Hosts(launch::parse_hosts(spec)?)));
    }
    if let Some(path) = spread.hostfile {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Diagnostic::new(Code::Io, format!("cannot read the hostfile `{}`: {e}", path.display())))?;
        return Ok(Some(Cluster::Hostfile(path.clone(), launch::parse_hostfile(&text, &path.display().to_string())?)));
    }
    if let Some(config) = env("TF_CONFIG").filter(|c| !c.trim().is_empty()) {
        return Ok(Some(Cluster::Hosts(launch::parse_tf_config(&config).map_err(|d| d.note("from `TF_CONFIG`"))?)));
    }
    Ok(None)
}

/// Starts the ranks if `spread` (or `TF_CONFIG`) asks for several
/// processes: returns the job's exit status, or `None` to run here.
pub(super) fn launch_if_asked(spread: &Spread) -> Result<Option<ExitCode>, Diagnostic> {
    let Some(cluster) = cluster(spread)? else { return Ok(None) };
    if !crate::dist::HAS_MPI {
        return Err(crate::dist::without_mpi(format!("{} ranks were asked for", cluster.ranks())));
    }
    let mpirun = launch::find_mpirun(&env)?;
    let exe = std::env::current_exe()
        .map_err(|e| Diagnostic::new(Code::Launch, format!("cannot find the tfc executable to start: {e}")))?;
    let args = rank_args(std::env::args_os().skip(1));
    let as_root = unsafe { libc::geteuid() } == 0;
    let command = launch::mpirun_command(&mpirun, &cluster, &exe, &args, as_root);
    let status = std::process::Command::new(&command.program)
        .args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        // The ranks run the cluster given here, not TF_CONFIG's again.
        .env_remove("TF_CONFIG")
        .status()
        .map_err(|e| Diagnostic::new(Code::Launch, format!("cannot start `{}`: {e}", command.program.display())))?;
    match status.code() {
        Some(0) => Ok(Some(ExitCode::SUCCESS)),
        // The ranks' own errors (or mpirun's, for a host it could not
        // reach) are above; this says how the job as a whole ended.
        code => Err(Diagnostic::new(
            Code::Launch,
            format!(
                "the job of {} ranks failed: `{}` exited with {}",
                cluster.ranks(),
                command.program.display(),
                code.map_or("a signal".to_string(), |c| format!("status {c}"))
            ),
        )
        .help("the messages above say which rank failed and why; a host must be reachable by `ssh` (or Open MPI's `plm_rsh_agent`) and hold tfc and the program at the same paths")),
    }
}

/// The arguments each rank runs with: this command's, less the options
/// that chose the ranks.
fn rank_args(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    const CHOOSING: [&str; 3] = ["--workers", "--hosts", "--hostfile"];
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let text = arg.to_string_lossy();
        if CHOOSING.contains(&text.as_ref()) {
            skip_value = true;
        } else if !CHOOSING.iter().any(|c| text.starts_with(&format!("{c}="))) {
            out.push(arg);
        }
    }
    out
}

/// This process's place in a job a launcher started (`None`: alone).
pub(super) fn placement() -> Result<Option<Placement>, Diagnostic> {
    launch::placement(&env)
}

/// Joins the job of `placement`.
pub(super) fn join(placement: Placement) -> Result<Arc<dyn Communicator>, Diagnostic> {
    Ok(Arc::from(crate::dist::join(placement)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_run_without_the_options_that_chose_them() {
        let args = ["run", "--workers", "2", "--threads=1", "--hosts=a:2", "--hostfile", "h.txt", "p.tfl"];
        let kept = rank_args(args.iter().map(OsString::from));
        assert_eq!(kept, ["run", "--threads=1", "p.tfl"].map(OsString::from));
    }
}
