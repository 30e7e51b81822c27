//! The hydra launcher: MPICH's `mpiexec.hydra` (also what MPICH installs as `mpirun` and
//! `mpiexec`), one job of `n` ranks; it reaches other hosts through its own launcher
//! (`-launcher ssh` by default outside a resource manager).

use std::io;

use tokio::process::Command;

use crate::ssh::ssh_network_name;
use crate::{LaunchError, LaunchSpec, Launched, Launcher, mpirun_hosts};

/// The program hydra is run as.
pub const HYDRA: &str = "mpiexec.hydra";

/// `mpiexec.hydra` of MPICH.
#[derive(Debug, Default)]
pub struct Hydra {
    /// Extra arguments before the program (e.g. `-f HOSTFILE`, `-launcher ssh`).
    pub extra: Vec<String>,
    /// Hosts to spread the copies over (`-hosts`); empty: hydra's default placement.
    pub hosts: Vec<String>,
}

/// Adds hydra's arguments for `n` copies over `hosts` with the variables `names` passed
/// on (their values from the launcher's environment) to `cmd`.
pub(crate) fn hydra_args(cmd: &mut Command, n: u32, names: &[&str], hosts: &[String]) {
    cmd.args(["-n", &n.to_string()]);
    if !names.is_empty() {
        cmd.args(["-genvlist", &names.join(",")]);
    }
    if !hosts.is_empty() {
        cmd.args(["-hosts", &mpirun_hosts(hosts, n)]);
    }
}

impl Launcher for Hydra {
    fn name(&self) -> &str {
        "hydra"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let names: Vec<&str> = spec.env.iter().map(|(k, _)| k.as_str()).collect();
        let mut cmd = Command::new(HYDRA);
        cmd.envs(spec.env.iter().cloned());
        hydra_args(&mut cmd, spec.n, &names, &self.hosts);
        cmd.args(&self.extra).arg(&spec.program).args(&spec.args);
        let (mut l, tx) = Launched::new("hydra");
        l.spawn(cmd, None, &tx)?;
        Ok(l)
    }

    /// hydra starts its proxies on other hosts through ssh: a host is what ssh's
    /// configuration makes of it.
    fn network_name(&self, host: &str) -> io::Result<String> {
        ssh_network_name(&[], host).or_else(|_| Ok(host.to_owned()))
    }
}
