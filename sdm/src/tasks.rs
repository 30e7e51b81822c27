//! The process table of a job whose launcher keeps none (a shell loop, torchrun, MPICH's
//! hydra, any launcher): each task's rank read from its environment, on every host the
//! job runs on. Tasks on this host are read from /proc; on another host, `sdm tasks` (this
//! binary) reads them there, run over ssh. A launcher's process tree is followed across
//! the ssh commands with which it starts its part on other hosts (hydra's proxies), so
//! `sdm attach LAUNCHER` finds every rank from the launcher's pid alone.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use sdm_server::mpir::ProcDesc;
use sdm_server::proctree::{self, RankVars, RemoteLaunch, Task, check_ranks};

/// What to read on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Query {
    /// The tasks below this launcher process.
    Tree(u32),
    /// The tasks below the process running this command (a remote launch's).
    Command(String),
    /// These processes, each a task (its rank from its environment if it has one).
    Pids(Vec<u32>),
}

/// One process found by a query: a task with its rank, a process given by pid that
/// carries none, or a launch onto another host.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub(crate) struct Found {
    /// The process (0 for a launch).
    #[serde(default)]
    pid: u32,
    /// Its rank, when its environment carries one.
    #[serde(default)]
    rank: Option<u32>,
    /// The job's size its environment gives.
    #[serde(default)]
    size: Option<u32>,
    /// Its executable.
    #[serde(default)]
    executable: String,
    /// For a launch onto another host: the host, and the command run there.
    #[serde(default)]
    ssh: Option<(String, String)>,
    /// A process given by pid that does not exist; for a command, that none runs it.
    #[serde(default)]
    pub gone: bool,
    /// A task stopped and untraced (see [`Task::held`]).
    #[serde(default)]
    held: bool,
}

impl From<Task> for Found {
    fn from(t: Task) -> Self {
        Found {
            pid: t.pid,
            rank: Some(t.rank),
            size: t.size,
            executable: t.executable,
            ssh: None,
            gone: false,
            held: t.held,
        }
    }
}

/// Runs `query` on this host (what `sdm tasks` prints, a JSON line each).
pub(crate) fn query_here(query: &Query, vars: &RankVars) -> anyhow::Result<Vec<Found>> {
    let tree = |root: u32| {
        let t = proctree::read_tree(root, vars);
        let launches = t.launches.into_iter().map(|l: RemoteLaunch| Found {
            pid: 0,
            rank: None,
            size: None,
            executable: String::new(),
            ssh: Some((l.host, l.command)),
            gone: false,
            held: false,
        });
        t.tasks.into_iter().map(Found::from).chain(launches)
    };
    Ok(match query {
        Query::Tree(pid) => {
            anyhow::ensure!(exists(*pid), "no process {pid}");
            tree(*pid).collect()
        }
        Query::Command(c) => {
            let roots = proctree::find_command(c);
            if roots.is_empty() {
                // Said, not left out: that host's ranks would be silently missing.
                return Ok(vec![Found {
                    pid: 0,
                    rank: None,
                    size: None,
                    executable: String::new(),
                    ssh: None,
                    gone: true,
                    held: false,
                }]);
            }
            roots.into_iter().flat_map(tree).collect()
        }
        Query::Pids(pids) => pids.iter().map(|&pid| pid_task(pid, vars)).collect(),
    })
}

/// Process `pid` as a task: ranked when its environment carries a rank, `gone` when there
/// is no such process (attaching to it then fails for its rank, as for any vanished task).
fn pid_task(pid: u32, vars: &RankVars) -> Found {
    if let Some(t) = proctree::read_task(pid, vars) {
        return t.into();
    }
    let executable = crate::cli::local_executable(pid);
    Found {
        pid,
        rank: None,
        size: None,
        gone: executable.is_err(),
        executable: executable.unwrap_or_default(),
        ssh: None,
        held: false,
    }
}

fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Reads tasks on the job's hosts: here from /proc, elsewhere through `sdm tasks` over
/// ssh.
pub(crate) struct Reader {
    /// The rank variables.
    pub vars: RankVars,
    /// ssh's own options (`--launcher-args` with `--launcher ssh`).
    pub ssh_options: Vec<String>,
    /// The `sdm` binary on the other hosts.
    pub remote_sdm: PathBuf,
    /// This host's name.
    pub here: String,
}

impl Reader {
    /// Runs `query` on `host` ("" or this host's name: here).
    fn query(&self, host: &str, query: &Query) -> anyhow::Result<Vec<Found>> {
        if crate::cli::is_this_host(host, &self.here) {
            return query_here(query, &self.vars);
        }
        let mut words = vec![self.remote_sdm.display().to_string(), "tasks".into()];
        match query {
            Query::Tree(pid) => words.extend(["--tree".into(), pid.to_string()]),
            Query::Command(c) => words.extend(["--command".into(), c.clone()]),
            Query::Pids(p) => {
                for pid in p {
                    words.extend(["--pid".into(), pid.to_string()]);
                }
            }
        }
        if let Some(n) = self.vars.name() {
            words.extend(["--rank-env".into(), n.to_owned()]);
        }
        let script: Vec<String> = words.iter().map(|w| sdm_deploy::shell_quote(w)).collect();
        let out = Command::new("ssh")
            .args(sdm_deploy::ssh_args(
                &self.ssh_options,
                host,
                script.join(" "),
            ))
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("running ssh to {host}"))?;
        anyhow::ensure!(
            out.status.success(),
            "reading the tasks on {host} (`{}` there) failed ({}): {}",
            words.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .with_context(|| format!("{host}: unexpected `sdm tasks` line {l:?}"))
            })
            .collect()
    }

    /// [`Reader::query`] of each `(host, query)`, all at once (ssh to each host takes a
    /// while), the answers in the same order.
    fn query_all(&self, queries: &[(String, Query)]) -> Vec<anyhow::Result<Vec<Found>>> {
        std::thread::scope(|s| {
            let asked: Vec<_> = queries
                .iter()
                .map(|(host, q)| s.spawn(move || self.query(host, q)))
                .collect();
            asked
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a thread reading tasks failed")))
                })
                .collect()
        })
    }

    /// The tasks below each launcher `(host, pid)` (and below what they start on other
    /// hosts over ssh), checked: each rank once, none missing.
    pub(crate) fn trees(&self, roots: &[(String, u32)]) -> anyhow::Result<Vec<ProcDesc>> {
        Ok(self.trees_held(roots)?.0)
    }

    /// [`Reader::trees`], and whether every task is held (stopped, untraced).
    pub(crate) fn trees_held(
        &self,
        roots: &[(String, u32)],
    ) -> anyhow::Result<(Vec<ProcDesc>, bool)> {
        let mut pending: Vec<(String, Query)> = roots
            .iter()
            .map(|(h, p)| (h.clone(), Query::Tree(*p)))
            .collect();
        let mut seen = HashSet::new();
        let (mut tasks, mut size, mut held) = (Vec::new(), None, true);
        // In waves: the hosts of one wave are asked at once.
        while !pending.is_empty() {
            let wave = std::mem::take(&mut pending);
            for ((host, query), answer) in wave.iter().zip(self.query_all(&wave)) {
                for f in answer? {
                    if let (Query::Command(command), true) = (query, f.gone) {
                        return Err(proctree::RankError::NoRemoteRoot {
                            host: self.host_name(host),
                            command: command.clone(),
                        }
                        .into());
                    }
                    if let Some((to, command)) = f.ssh {
                        if seen.insert((to.clone(), command.clone())) {
                            pending.push((to, Query::Command(command)));
                        }
                    } else if let Some(rank) = f.rank {
                        size = size.max(f.size);
                        held &= f.held;
                        tasks.push(self.desc(host, f.pid, rank, f.executable));
                    }
                }
            }
        }
        if tasks.is_empty() {
            let roots: Vec<String> = roots.iter().map(|(h, p)| self.named(h, *p)).collect();
            return Err(proctree::RankError::NoTasks {
                roots: roots.join(", "),
                vars: self.vars.describe(),
            }
            .into());
        }
        check_ranks(&tasks, size)?;
        tasks.sort_by_key(|t| t.rank);
        Ok((tasks, held))
    }

    /// The tasks `(host, pid)`, ranked from their environments when every one carries a
    /// rank (or `--rank-env` names the variable: then each must), else by position; each
    /// with whether its process is gone.
    pub(crate) fn pids(&self, tasks: &[(String, u32)]) -> anyhow::Result<Vec<(ProcDesc, bool)>> {
        let mut found: Vec<Option<Found>> = vec![None; tasks.len()];
        let mut hosts: Vec<&str> = Vec::new();
        for (h, _) in tasks {
            if !hosts.contains(&h.as_str()) {
                hosts.push(h);
            }
        }
        let at: Vec<Vec<usize>> = hosts
            .iter()
            .map(|&host| (0..tasks.len()).filter(|&i| tasks[i].0 == host).collect())
            .collect();
        let queries: Vec<(String, Query)> = hosts
            .iter()
            .zip(&at)
            .map(|(&h, at)| {
                (
                    h.to_owned(),
                    Query::Pids(at.iter().map(|&i| tasks[i].1).collect()),
                )
            })
            .collect();
        for ((host, at), got) in hosts.iter().zip(at).zip(self.query_all(&queries)) {
            let got = got.with_context(|| format!("--pids on {}", self.host_name(host)))?;
            for (i, f) in at.into_iter().zip(got) {
                found[i] = Some(f);
            }
        }
        let found: Vec<Found> = found.into_iter().flatten().collect();
        anyhow::ensure!(
            found.len() == tasks.len(),
            "--pids: a host answered for too few pids"
        );
        // A vanished task is reported when attached to; the others decide.
        let unranked: Vec<String> = (0..found.len())
            .filter(|&i| found[i].rank.is_none() && !found[i].gone)
            .map(|i| self.named(&tasks[i].0, tasks[i].1))
            .collect();
        let by_env = unranked.is_empty() && found.iter().any(|f| f.rank.is_some());
        if let (Some(name), false) = (self.vars.name(), by_env) {
            anyhow::bail!("--rank-env {name}: not set in {}", unranked.join(", "));
        }
        let mut out: Vec<(ProcDesc, bool)> = (0u32..)
            .zip(tasks.iter().zip(found))
            .map(|(position, ((host, pid), f))| {
                let rank = if by_env { f.rank } else { None };
                let d = self.desc(host, *pid, rank.unwrap_or(position), f.executable);
                (d, f.gone)
            })
            .collect();
        if by_env {
            anyhow::ensure!(
                !out.iter().any(|(_, gone)| *gone),
                "--pids: {} no longer exist: their ranks are unknown",
                out.iter()
                    .filter(|(_, gone)| *gone)
                    .map(|(d, _)| self.named(&d.host, d.pid))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let descs: Vec<ProcDesc> = out.iter().map(|(d, _)| d.clone()).collect();
            check_ranks(&descs, None)?;
            out.sort_by_key(|(d, _)| d.rank);
        }
        Ok(out)
    }

    fn desc(&self, host: &str, pid: u32, rank: u32, executable: String) -> ProcDesc {
        ProcDesc {
            rank,
            host: self.host_name(host),
            executable,
            pid,
        }
    }

    /// `host` as a table names it: this host by its name.
    fn host_name(&self, host: &str) -> String {
        if crate::cli::is_this_host(host, &self.here) {
            self.here.clone()
        } else {
            host.to_owned()
        }
    }

    fn named(&self, host: &str, pid: u32) -> String {
        format!("{}:{pid}", self.host_name(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A launch onto a host (here `localhost`, read from /proc) whose command runs no
    /// process there is an error naming the host and the command, not ranks left out.
    #[test]
    fn a_launch_whose_command_runs_nowhere_is_named() {
        // A process that looks like `ssh localhost no-such-proxy --id 0` (argv only).
        let mut ssh = Command::new("/bin/sh")
            .arg0("ssh")
            .args(["-c", "sleep 60; true"])
            .args(["localhost", "no-such-proxy", "--id", "0"])
            .process_group(0)
            .spawn()
            .expect("starting sh");
        let reader = Reader {
            vars: RankVars::standard(),
            ssh_options: Vec::new(),
            remote_sdm: PathBuf::from("sdm"),
            here: "thishost".into(),
        };
        let got = reader.trees_held(&[(String::new(), std::process::id())]);
        // Its group: sh and its sleep.
        let group = nix::unistd::Pid::from_raw(-(ssh.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = ssh.wait();
        let e = got.expect_err("no task and no remote root");
        match e.downcast_ref::<proctree::RankError>() {
            Some(proctree::RankError::NoRemoteRoot { host, command }) => {
                assert_eq!(
                    (host.as_str(), command.as_str()),
                    ("thishost", "no-such-proxy --id 0")
                );
            }
            _ => panic!("{e:#}"),
        }
    }
}
