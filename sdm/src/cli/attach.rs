//! `sdm attach`'s process table: from the launcher's MPIR table, from the processes
//! `--pids HOST:PID,...` names, or from launchers' process trees (`--tree`, and a launcher
//! without MPIR), ranks read from the tasks' environments; and its printing (`--table`).

use super::*;
use sdm_server::mpir::TableSource;

/// `sdm attach`: the job's process table (from its launcher, or `--pids`), one server per
/// rank on the rank's host, each attached to its rank's process; then the console.
pub(super) async fn attach_job(mut a: AttachArgs) -> anyhow::Result<()> {
    // A report that could not be written is said before anything is attached.
    if let Some(path) = &a.report {
        a.console.commands = crate::report::one_shot(path)?;
    }
    let reader = reader(&a.console.tree, a.rank_env.as_deref())?;
    let (table, source) = match a.launcher_pid {
        Some(pid) => {
            let (t, source) = launcher_tasks(pid, &reader)?;
            (t, Some(source))
        }
        None if a.tree => (
            reader.trees(&parse_host_pids(&a.pids)?)?,
            Some(TableSource::ProcessTree),
        ),
        None => {
            let tasks = reader.pids(&parse_host_pids(&a.pids)?)?;
            // A table names a vanished task here; attaching reports it for its rank.
            let gone = tasks
                .iter()
                .find(|(d, gone)| *gone && is_this_host(&d.host, &reader.here));
            if let (true, Some((d, _))) = (a.table, gone) {
                anyhow::bail!("--pids: rank {}: no process {} on this host", d.rank, d.pid);
            }
            (tasks.into_iter().map(|(d, _)| d).collect(), None)
        }
    };
    if a.table {
        print_proctable(&table, source, a.console.json);
        return Ok(());
    }
    let tasks: Vec<(String, u32)> = table.into_iter().map(|d| (d.host, d.pid)).collect();
    let n = u32::try_from(tasks.len()).context("too many ranks")?;
    let opts = crate::hosts::per_host_options(n, &a.console.tree, &tasks, None)?;
    let pids = tasks.iter().map(|&(_, p)| p).collect();
    super::job::run_console(n, a.console, Some(opts), pids, Vec::new(), None).await
}

/// The reader of tasks on this host and others for the tree `tree` describes (ssh's
/// options, the remote `sdm`), ranks from `rank_env` or the usual variables.
pub(super) fn reader(
    tree: &TreeArgs,
    rank_env: Option<&str>,
) -> anyhow::Result<crate::tasks::Reader> {
    Ok(crate::tasks::Reader {
        vars: match rank_env {
            Some(n) => sdm_server::proctree::RankVars::named(n),
            None => sdm_server::proctree::RankVars::standard(),
        },
        ssh_options: match tree.launcher {
            LauncherKind::Ssh => tree.launcher_args(),
            _ => Vec::new(),
        },
        remote_sdm: match &tree.remote_sdm {
            Some(p) => p.clone(),
            None => std::env::current_exe().context("this program's path")?,
        },
        here: sdm_server::monitor::hostname(),
    })
}

/// The tasks of the job `launcher` runs, and where they were read: its MPIR table when it
/// keeps a filled one (a job still starting gets a few seconds to fill it), its PMIx
/// server's table (Open MPI 5), else its process tree on this host and on the hosts it
/// reaches through ssh, ranks from the tasks' environments. `--rank-env` skips MPIR and
/// PMIx: the user says where the ranks are.
fn launcher_tasks(
    launcher: u32,
    reader: &crate::tasks::Reader,
) -> anyhow::Result<(Vec<sdm_server::mpir::ProcDesc>, TableSource)> {
    use sdm_server::mpir::{MpirError, read_proctable, read_proctable_waiting};
    let patience = Duration::from_secs(10);
    if reader.vars.name().is_none() {
        match read_proctable(launcher) {
            Ok(t) if t.source != TableSource::ProcessTree => return Ok((t.tasks, t.source)),
            Err(MpirError::NotSpawned { .. }) => {
                let t = read_proctable_waiting(launcher, patience)?;
                return Ok((t.tasks, t.source));
            }
            // A PMIx launcher that cannot be asked (sdm built without PMIx, a library that
            // does not speak its version) is said, not hidden behind a partial tree.
            Err(
                e @ (MpirError::NoProcess { .. }
                | MpirError::Trace { .. }
                | MpirError::Memory { .. }
                | MpirError::Pmix(_)),
            ) => return Err(e.into()),
            // No MPIR table: the process tree, across hosts.
            _ => {}
        }
    }
    // Tasks still starting are waited for, as a filling MPIR table is.
    let deadline = std::time::Instant::now() + patience;
    loop {
        match reader.trees(&[(String::new(), launcher)]) {
            Err(e)
                if std::time::Instant::now() < deadline
                    && e.downcast_ref::<sdm_server::proctree::RankError>()
                        .is_some_and(|e| {
                            !matches!(e, sdm_server::proctree::RankError::Duplicate { .. })
                        }) =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => {
                let t = other.with_context(|| format!("launcher {launcher}"))?;
                tracing::info!(
                    "launcher {launcher}: {} ranks from its process tree",
                    t.len()
                );
                return Ok((t, TableSource::ProcessTree));
            }
        }
    }
}

/// Whether `host` (a name from a process table or `--pids`, empty for none) is this host,
/// named `here`.
pub(crate) fn is_this_host(host: &str, here: &str) -> bool {
    host.is_empty()
        || host == here
        || host == "localhost"
        || host.starts_with("127.")
        || host.split('.').next() == here.split('.').next()
}

/// `--pids HOST:PID,...` (a bare PID is on this host) in rank order.
fn parse_host_pids(items: &[String]) -> anyhow::Result<Vec<(String, u32)>> {
    items
        .iter()
        .enumerate()
        .map(|(rank, item)| {
            let (host, pid) = item.rsplit_once(':').unwrap_or(("", item));
            let pid = pid.parse::<u32>().map_err(|_| {
                anyhow::anyhow!("--pids: {item:?} (rank {rank}) is not HOST:PID or PID")
            })?;
            Ok((host.to_owned(), pid))
        })
        .collect()
}

/// The executable of process `pid` on this host: its path, else (another user's process)
/// the first word of its command line.
pub(crate) fn local_executable(pid: u32) -> std::io::Result<String> {
    match std::fs::read_link(format!("/proc/{pid}/exe")) {
        Ok(p) => Ok(p.display().to_string()),
        Err(e) => {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|_| e)?;
            let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
            Ok(String::from_utf8_lossy(argv0).into_owned())
        }
    }
}

/// `sdm attach PID --table` (or `--pids ... --table`): the process table, one rank per line;
/// in JSON each line also names where a launcher's table came from (`source`).
fn print_proctable(tasks: &[sdm_server::mpir::ProcDesc], source: Option<TableSource>, json: bool) {
    for d in tasks {
        if json {
            let mut line = serde_json::json!({"rank": d.rank, "host": d.host, "pid": d.pid, "executable": d.executable});
            if let Some(s) = source {
                line["source"] = s.name().into();
            }
            println!("{line}");
        } else {
            println!("{} {} {} {}", d.rank, d.host, d.pid, d.executable);
        }
    }
}

/// `sdm tasks`: what [`crate::tasks::query_here`] finds, a JSON line each.
pub(super) fn print_tasks(
    tree: Option<u32>,
    command: Option<String>,
    pids: Vec<u32>,
    rank_env: Option<&str>,
) -> anyhow::Result<()> {
    use crate::tasks::Query;
    let query = match (tree, command) {
        (Some(pid), _) => Query::Tree(pid),
        (None, Some(c)) => Query::Command(c),
        (None, None) => Query::Pids(pids),
    };
    let vars = match rank_env {
        Some(n) => sdm_server::proctree::RankVars::named(n),
        None => sdm_server::proctree::RankVars::standard(),
    };
    let mut out = std::io::stdout().lock();
    for f in crate::tasks::query_here(&query, &vars)? {
        writeln!(out, "{}", serde_json::to_string(&f)?)?;
    }
    Ok(())
}
