//! The mpirun launcher: Open MPI's or MPICH's `mpirun`, one job of `n` ranks.

use std::io;

use tokio::process::Command;

use crate::ssh::ssh_network_name;
use crate::{LaunchError, LaunchSpec, Launched, Launcher};

/// `mpirun` of Open MPI or MPICH (detected from `mpirun --version`; `SDM_MPIRUN` names
/// another than `PATH`'s).
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

/// The `mpirun` to run: `SDM_MPIRUN` (a path, e.g. another MPI's `mpirun`), else
/// `mpirun` from `PATH`.
pub fn mpirun_program() -> String {
    std::env::var("SDM_MPIRUN")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "mpirun".into())
}

/// Which MPI an `mpirun` belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpirunFlavor {
    /// Open MPI of this major version (4: ORTE with MPIR; 5: PRRTE with PMIx only).
    OpenMpi(u32),
    /// MPICH's hydra.
    Mpich,
}

impl MpirunFlavor {
    /// From `mpirun --version`'s output (`mpirun (Open MPI) 5.0.11`).
    pub fn from_version(text: &str) -> Self {
        let Some(at) = text.find("Open MPI").or_else(|| text.find("OpenRTE")) else {
            return Self::Mpich;
        };
        let major = text[at..]
            .split(|c: char| c.is_whitespace() || c == ')')
            .find_map(|w| w.split('.').next()?.parse::<u32>().ok())
            .unwrap_or(4);
        Self::OpenMpi(major)
    }
}

/// Which MPI [`mpirun_program`] is, from its `--version`.
pub fn mpirun_flavor() -> Result<MpirunFlavor, LaunchError> {
    let program = mpirun_program();
    let version = std::process::Command::new(&program)
        .arg("--version")
        .output()
        .map_err(|source| LaunchError::Spawn {
            launcher: "mpirun",
            program: format!("{program} --version (install openmpi-bin, or set SDM_MPIRUN)"),
            source,
        })?;
    let text = String::from_utf8_lossy(&version.stdout).to_string()
        + &String::from_utf8_lossy(&version.stderr);
    Ok(MpirunFlavor::from_version(&text))
}

/// Whether `mpirun` is Open MPI's (else MPICH's hydra).
fn mpirun_is_open_mpi() -> Result<bool, LaunchError> {
    Ok(matches!(mpirun_flavor()?, MpirunFlavor::OpenMpi(_)))
}

impl Launcher for Mpirun {
    fn name(&self) -> &str {
        "mpirun"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let open_mpi = mpirun_is_open_mpi()?;
        let names: Vec<&str> = spec.env.iter().map(|(k, _)| k.as_str()).collect();
        let mut cmd = Command::new(mpirun_program());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flavor_comes_from_the_version() {
        let v5 = "mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/";
        assert_eq!(MpirunFlavor::from_version(v5), MpirunFlavor::OpenMpi(5));
        let v4 = "mpirun (Open MPI) 4.1.4\n";
        assert_eq!(MpirunFlavor::from_version(v4), MpirunFlavor::OpenMpi(4));
        let hydra = "HYDRA build details:\n    Version: 4.0.2\n";
        assert_eq!(MpirunFlavor::from_version(hydra), MpirunFlavor::Mpich);
    }
}
