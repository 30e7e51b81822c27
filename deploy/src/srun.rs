//! The srun launcher: Slurm's `srun`, one job step of `n` tasks.

use std::io;
use std::process::Stdio;

use tokio::process::Command;

use crate::{LaunchError, LaunchSpec, Launched, Launcher, hostlist};

/// Slurm's `srun`: one job step of `n` tasks; the environment is inherited.
#[derive(Debug, Default)]
pub struct Srun {
    /// Extra arguments (partition, nodes…).
    pub extra: Vec<String>,
    /// Nodes for the step (`--nodelist`, in hostlist form); empty: Slurm's choice.
    pub hosts: Vec<String>,
}

impl Launcher for Srun {
    fn name(&self) -> &str {
        "srun"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let mut cmd = Command::new("srun");
        cmd.envs(spec.env.iter().cloned()).args([
            "-n",
            &spec.n.to_string(),
            "--export=ALL",
            "--kill-on-bad-exit=0",
        ]);
        if !self.hosts.is_empty() {
            cmd.arg(format!("--nodelist={}", hostlist::compress(&self.hosts)));
        }
        cmd.args(&self.extra).arg(&spec.program).args(&spec.args);
        let (mut l, tx) = Launched::new("srun");
        l.spawn(cmd, None, &tx)?;
        Ok(l)
    }

    /// Inside an allocation (`salloc`, a batch script) the step runs on the job's nodes,
    /// `SLURM_JOB_NODELIST`.
    fn implied_hosts(&self) -> Vec<String> {
        std::env::var("SLURM_JOB_NODELIST")
            .ok()
            .and_then(|list| hostlist::expand(&list).ok())
            .unwrap_or_default()
    }

    /// A Slurm node is known to the network by its `NodeAddr` (`scontrol show node`), which
    /// DNS may not know; `host` itself when Slurm does not know it either.
    fn network_name(&self, host: &str) -> io::Result<String> {
        let out = std::process::Command::new("scontrol")
            .args(["--oneliner", "show", "node", host])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let addr = out
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| slurm_node_addr(&String::from_utf8_lossy(&o.stdout)).map(str::to_owned));
        Ok(addr.unwrap_or_else(|| host.to_owned()))
    }
}

/// The `NodeAddr` in `scontrol --oneliner show node`'s line for one node.
fn slurm_node_addr(line: &str) -> Option<&str> {
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("NodeAddr="))
        .filter(|addr| !addr.is_empty() && *addr != "(null)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_node_addresses() {
        let line = "NodeName=n01 Arch=x86_64 CoresPerSocket=4 NodeAddr=10.1.2.3 \
                    NodeHostName=n01 Version=22.05.8";
        assert_eq!(slurm_node_addr(line), Some("10.1.2.3"));
        assert_eq!(slurm_node_addr("NodeName=n01 NodeHostName=n01"), None);
        assert_eq!(slurm_node_addr("NodeName=n01 NodeAddr=(null)"), None);
        assert_eq!(slurm_node_addr("Node n01 not found"), None);
    }
}
