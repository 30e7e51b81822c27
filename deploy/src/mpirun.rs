//! The mpirun launcher: Open MPI's or MPICH's `mpirun`, one job of `n` ranks.

use std::io;

use tokio::process::Command;

use crate::ssh::ssh_network_name;
use crate::{LaunchError, LaunchSpec, Launched, Launcher};

/// `mpirun` of Open MPI or MPICH (detected from `mpirun --version`).
#[derive(Debug, Default)]
pub struct Mpirun {
    /// Extra arguments before the program (e.g. a hostfile).
    pub extra: Vec<String>,
    /// Hosts to spread the copies over (`--host`); empty: mpirun's default placement.
    pub hosts: Vec<String>,
}

/// `--host` for mpirun: every distinct host with an equal share of `n` slots (rounded up).
pub(crate) fn mpirun_hosts(hosts: &[String], n: u32) -> String {
    let mut distinct: Vec<&str> = Vec::new();
    for h in hosts {
        if !distinct.contains(&h.as_str()) {
            distinct.push(h);
        }
    }
    let slots = n.div_ceil(distinct.len().max(1) as u32).max(1);
    distinct
        .iter()
        .map(|h| format!("{h}:{slots}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `mpirun` is Open MPI's (else MPICH's hydra), from `mpirun --version`.
pub(crate) fn mpirun_is_open_mpi() -> Result<bool, LaunchError> {
    let version = std::process::Command::new("mpirun")
        .arg("--version")
        .output()
        .map_err(|source| LaunchError::Spawn {
            launcher: "mpirun",
            program: "mpirun --version (install openmpi-bin)".into(),
            source,
        })?;
    let text = String::from_utf8_lossy(&version.stdout).to_string()
        + &String::from_utf8_lossy(&version.stderr);
    Ok(text.contains("Open MPI") || text.contains("OpenRTE"))
}

impl Launcher for Mpirun {
    fn name(&self) -> &str {
        "mpirun"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let open_mpi = mpirun_is_open_mpi()?;
        let names: Vec<&str> = spec.env.iter().map(|(k, _)| k.as_str()).collect();
        let mut cmd = Command::new("mpirun");
        // Open MPI 4.1 loses a child's exit when many ranks end at once and mpirun hangs;
        // launching from the main thread avoids it (see deploy/README.md).
        cmd.envs(spec.env.iter().cloned())
            .env("OMPI_MCA_odls_base_max_threads", "0");
        if open_mpi {
            // Names only: the values come from our environment.
            cmd.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "-n",
                &spec.n.to_string(),
            ]);
            for n in &names {
                cmd.args(["-x", n]);
            }
            if !self.hosts.is_empty() {
                cmd.args(["--host", &mpirun_hosts(&self.hosts, spec.n)]);
            }
        } else {
            crate::hydra::hydra_args(&mut cmd, spec.n, &names, &self.hosts);
        }
        cmd.args(&self.extra).arg(&spec.program).args(&spec.args);
        let (mut l, tx) = Launched::new("mpirun");
        l.spawn(cmd, None, &tx)?;
        Ok(l)
    }

    /// mpirun starts its daemons on other hosts through ssh (Open MPI's rsh launcher,
    /// MPICH's hydra): a host is what ssh's configuration makes of it.
    fn network_name(&self, host: &str) -> io::Result<String> {
        ssh_network_name(&[], host).or_else(|_| Ok(host.to_owned()))
    }
}
