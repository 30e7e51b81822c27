//! The local launcher: fork/exec on this machine, each daemon in a session of its own.

use std::io;

use tokio::process::Command;

use crate::{LaunchError, LaunchSpec, Launched, Launcher};

/// Fork/exec on this machine; rank in `SDM_ID`.
#[derive(Debug, Default)]
pub struct Local;

impl Local {
    /// Starts one copy with no rank variable (the master).
    pub fn launch_one(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let (mut l, tx) = Launched::new("local");
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args).envs(spec.env.iter().cloned());
        own_session(&mut cmd);
        l.spawn(cmd, None, &tx)?;
        Ok(l)
    }
}

/// Starts the daemon `cmd` in a session of its own, as srun's daemons run on other
/// machines: a Ctrl-C or Ctrl-Z typed at the front-end's terminal reaches the front-end
/// alone, which decides what the programs and the tree do, instead of every daemon dying
/// or stopping at once. The daemons still end with the front-end: they exit when their
/// link to it is lost.
fn own_session(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe and touches nothing of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Launcher for Local {
    fn name(&self) -> &str {
        "local"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        let (mut l, tx) = Launched::new("local");
        for id in 0..spec.n {
            let mut cmd = Command::new(&spec.program);
            cmd.args(&spec.args)
                .envs(spec.env.iter().cloned())
                .env("SDM_ID", id.to_string())
                .env("SDM_LOCAL_ID", id.to_string());
            own_session(&mut cmd);
            l.spawn(cmd, None, &tx)?;
        }
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn local_launches_and_collects_lines() {
        let spec = LaunchSpec {
            n: 3,
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "echo rank=$SDM_ID secret=$S".into()],
            env: vec![("S".into(), "x".into())],
        };
        let mut l = Local.launch(&spec).unwrap();
        let mut got = Vec::new();
        while let Some(line) = l.next_line().await {
            got.push(line);
        }
        got.sort();
        assert_eq!(
            got,
            ["rank=0 secret=x", "rank=1 secret=x", "rank=2 secret=x"]
        );
        l.shutdown(Duration::from_secs(5)).await;
    }
}
