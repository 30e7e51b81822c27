//! The launcher variables of a program a server starts. A server started by srun or
//! mpirun inherits its own task's identity (`SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`, …):
//! right for the program when the server serves that one rank (the seed's layout, where an
//! MPI program finds its launcher's PMI through them), wrong once it serves several. Then
//! each program gets its own rank's values, and the variables naming the server's task
//! itself (its PMI or PMIx identity, its pid) are removed.

use std::process::Command;

/// The launchers' rank variables (kept in sdm-deploy, which reads a server's own rank
/// from them too).
pub use sdm_deploy::RANK_VARS;

/// Variables holding the task's index on its host.
const LOCAL: [&str; 5] = [
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_NODE_RANK",
    "MPI_LOCALRANKID",
    "FLUX_TASK_LOCAL_ID",
];

/// Variables naming the server's own task to its launcher: a program given them would
/// speak to the launcher's PMI or PMIx server as that task.
const TASK: [&str; 5] = [
    "SLURM_TASK_PID",
    "PMIX_RANK",
    "PMIX_ID",
    "OMPI_MCA_ess_base_vpid",
    "PMI_FD",
];

/// Sets `cmd`'s launcher variables for `rank` (`local`: its index among the server's
/// ranks) unless `own` (the server serves only `rank`, which is its own task's): those
/// present in `env` (this process's environment) are rewritten or removed.
pub fn set(
    cmd: &mut Command,
    env: impl IntoIterator<Item = (String, String)>,
    rank: u32,
    local: Option<u32>,
    own: bool,
) {
    if own {
        return;
    }
    for (name, _) in env {
        let name = name.as_str();
        // The task's own identity first: PMIX_RANK names it, not the program's rank.
        if TASK.contains(&name) {
            cmd.env_remove(name);
        } else if RANK_VARS.iter().any(|&(r, _)| r == name) {
            cmd.env(name, rank.to_string());
        } else if LOCAL.contains(&name) {
            match local {
                Some(l) => cmd.env(name, l.to_string()),
                None => cmd.env_remove(name),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envs(cmd: &Command) -> Vec<(String, Option<String>)> {
        let mut v: Vec<_> = cmd
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        v.sort();
        v
    }

    fn server_env() -> Vec<(String, String)> {
        [
            ("SLURM_PROCID", "1"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_TASK_PID", "77"),
            ("SLURM_NTASKS", "2"),
            ("HOME", "/root"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn a_program_of_a_server_of_many_ranks_gets_its_own_rank() {
        let mut cmd = Command::new("true");
        set(&mut cmd, server_env(), 5, Some(1), false);
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(
            envs(&cmd),
            [
                ("SLURM_LOCALID".to_owned(), s("1")),
                ("SLURM_PROCID".to_owned(), s("5")),
                ("SLURM_TASK_PID".to_owned(), None),
            ]
        );
    }

    #[test]
    fn the_servers_own_rank_and_absent_variables_are_left_alone() {
        let mut cmd = Command::new("true");
        set(&mut cmd, server_env(), 1, Some(0), true);
        assert!(envs(&cmd).is_empty());
        let mut cmd = Command::new("true");
        set(&mut cmd, Vec::new(), 3, None, false);
        assert!(envs(&cmd).is_empty());
    }
}
