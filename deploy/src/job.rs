//! The command line that starts an application job through its own launcher, for launch
//! mode: the launcher wires the job (MPI, PMI) as it would without a tool, and the tool
//! holds it (MPIR) and attaches one server per host to its tasks.

use crate::{LaunchError, LauncherKind, hostlist, mpirun_hosts, mpirun_is_open_mpi};

/// `launcher -n N ... program args...` for `kind` (srun or mpirun), with `hosts` (a
/// node list; empty: the launcher's own placement) and the site's `extra` arguments.
pub fn job_command(
    kind: LauncherKind,
    hosts: &[String],
    extra: &[String],
    n: u32,
    program: &[String],
) -> Result<Vec<String>, LaunchError> {
    let mut argv: Vec<String> = Vec::new();
    let n = n.to_string();
    match kind {
        LauncherKind::Srun => {
            argv.extend(["srun", "-n", &n].map(String::from));
            if !hosts.is_empty() {
                argv.push(format!("--nodelist={}", hostlist::compress(hosts)));
            }
        }
        LauncherKind::Mpirun if mpirun_is_open_mpi()? => {
            argv.extend(
                ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", &n].map(String::from),
            );
            if !hosts.is_empty() {
                argv.extend(["--host".into(), mpirun_hosts(hosts, n.parse().unwrap_or(1))]);
            }
        }
        LauncherKind::Mpirun => {
            argv.extend(["mpirun", "-n", &n].map(String::from));
            if !hosts.is_empty() {
                argv.extend(["-hosts".into(), mpirun_hosts(hosts, n.parse().unwrap_or(1))]);
            }
        }
        LauncherKind::Local | LauncherKind::Ssh => {
            return Err(LaunchError::Invalid {
                launcher: "job",
                what: format!("{kind} does not start parallel jobs: use srun or mpirun"),
            });
        }
    }
    argv.extend(extra.iter().cloned());
    argv.extend(program.iter().cloned());
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srun_gets_the_count_the_nodes_and_the_program() {
        let hosts = ["n1".to_string(), "n2".to_string()];
        let argv = job_command(
            LauncherKind::Srun,
            &hosts,
            &["-p".into(), "debug".into()],
            8,
            &["./app".into(), "x".into()],
        )
        .unwrap();
        assert_eq!(
            argv,
            [
                "srun",
                "-n",
                "8",
                "--nodelist=n[1-2]",
                "-p",
                "debug",
                "./app",
                "x"
            ]
        );
        assert!(job_command(LauncherKind::Ssh, &[], &[], 2, &["a".into()]).is_err());
    }
}
