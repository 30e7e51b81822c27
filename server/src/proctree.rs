//! A job's tasks read from the process tree of its launcher on this host, for launchers
//! that keep no process table (a shell loop, torchrun, MPICH's hydra here, a launcher whose
//! MPIR table is empty): the launcher's descendants carrying a rank variable in their
//! environment ([`RankVars`]), and the ssh commands by which it starts processes on other
//! hosts ([`RemoteLaunch`]), so a front-end can read those hosts' trees in turn.

use std::collections::{BTreeMap, HashMap};

use crate::mpir::{MpirError, ProcDesc, ProcTable, TableSource};
use crate::rankenv::RANK_VARS;

/// The environment variables that carry a task's rank: the launchers' own
/// ([`RANK_VARS`], each with the variable of the job's size beside it), or one a user
/// names (`--rank-env NAME`), then the only one looked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankVars {
    named: Option<String>,
}

impl RankVars {
    /// The launchers' variables, in [`RANK_VARS`]'s order.
    pub fn standard() -> Self {
        Self::default()
    }

    /// Only `name` (a launcher's variable not among [`RANK_VARS`], or one that tells tasks
    /// apart where an inherited standard one does not).
    pub fn named(name: &str) -> Self {
        Self {
            named: Some(name.to_owned()),
        }
    }

    /// The variable asked for with [`RankVars::named`], if any.
    pub fn name(&self) -> Option<&str> {
        self.named.as_deref()
    }

    /// The variables looked for, for messages: `RANK, PMIX_RANK, ...`.
    pub fn describe(&self) -> String {
        match &self.named {
            Some(n) => n.clone(),
            None => RANK_VARS.map(|(r, _)| r).join(", "),
        }
    }

    /// The rank `env` carries, and the job's size when the variable beside it is set.
    pub fn rank_in(&self, env: &HashMap<String, String>) -> Option<(u32, Option<u32>)> {
        let number = |v: &str| env.get(v).and_then(|r| r.trim().parse::<u32>().ok());
        match &self.named {
            Some(n) => number(n).map(|r| (r, None)),
            None => RANK_VARS
                .iter()
                .find_map(|&(r, size)| number(r).map(|rank| (rank, number(size)))),
        }
    }
}

/// A task found on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Its rank, from its environment.
    pub rank: u32,
    /// Its pid.
    pub pid: u32,
    /// Its executable (empty when /proc does not say).
    pub executable: String,
    /// The job's size its environment gives, if it does.
    pub size: Option<u32>,
    /// It is stopped and no process traces it (a task held before its first instruction
    /// is, once its holder let it go).
    pub held: bool,
}

impl Task {
    /// The task as a process table's entry on `host`.
    pub fn desc(&self, host: &str) -> ProcDesc {
        ProcDesc {
            rank: self.rank,
            host: host.to_owned(),
            executable: self.executable.clone(),
            pid: self.pid,
        }
    }
}

/// A process the launcher started on another host through ssh: the host, and the command
/// run there (whose process is the root of that host's part of the job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteLaunch {
    /// The host as ssh was given it (`user@` removed).
    pub host: String,
    /// The remote command, its words joined by spaces, quotes removed.
    pub command: String,
}

/// What a launcher's process tree on this host holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostTree {
    /// The tasks: the topmost process of each lineage carrying a rank (a task's own
    /// children inherit it), in rank order.
    pub tasks: Vec<Task>,
    /// The launcher's ssh commands to other hosts (none below a task).
    pub launches: Vec<RemoteLaunch>,
}

/// Why a job's tasks do not make a process table.
#[derive(Debug, thiserror::Error)]
pub enum RankError {
    /// Two processes carry the same rank.
    #[error(
        "rank {rank} is carried by two processes, {first} and {second}: name the variable \
         that tells the tasks apart with --rank-env NAME"
    )]
    Duplicate {
        /// The rank.
        rank: u32,
        /// One process (`HOST:PID`).
        first: String,
        /// The other.
        second: String,
    },
    /// Ranks below the job's size (or the highest rank found) that no process carries.
    #[error("no task has rank {missing} (ranks 0 to {last} expected, {found} found)")]
    Missing {
        /// The ranks absent, in range form.
        missing: String,
        /// The highest rank expected.
        last: u32,
        /// How many tasks were found.
        found: usize,
    },
    /// A launch onto another host whose command runs no process there (not yet, or gone):
    /// that host's ranks cannot be read.
    #[error("no process runs `{command}` on {host}: its ranks there cannot be read")]
    NoRemoteRoot {
        /// The host the launch went to.
        host: String,
        /// The command it runs there.
        command: String,
    },
    /// No process carries a rank variable.
    #[error("no process under {roots} carries a rank variable ({vars})")]
    NoTasks {
        /// Where the tasks were looked for.
        roots: String,
        /// The variables looked for.
        vars: String,
    },
}

/// Checks that `tasks` hold each rank once and every rank below `size` (without a size,
/// below the highest rank found).
pub fn check_ranks(tasks: &[ProcDesc], size: Option<u32>) -> Result<(), RankError> {
    let mut by_rank: BTreeMap<u32, &ProcDesc> = BTreeMap::new();
    for t in tasks {
        if let Some(other) = by_rank.insert(t.rank, t) {
            return Err(RankError::Duplicate {
                rank: t.rank,
                first: format!("{}:{}", other.host, other.pid),
                second: format!("{}:{}", t.host, t.pid),
            });
        }
    }
    let Some(end) = size.or_else(|| by_rank.keys().next_back().map(|&r| r + 1)) else {
        return Ok(());
    };
    let missing: sdm_proto::IdSet = (0..end).filter(|r| !by_rank.contains_key(r)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(RankError::Missing {
        missing: missing.to_string(),
        last: end.saturating_sub(1),
        found: tasks.len(),
    })
}

/// The launcher's descendants on this host that carry a rank variable, checked complete
/// against the job size they carry.
pub fn read_process_tree(launcher: u32) -> Result<ProcTable, MpirError> {
    let host = crate::monitor::hostname();
    let tree = read_tree(launcher, &RankVars::standard());
    let size = tree.tasks.iter().filter_map(|t| t.size).max();
    let tasks: Vec<ProcDesc> = tree.tasks.iter().map(|t| t.desc(&host)).collect();
    match check_ranks(&tasks, size) {
        Ok(()) => {}
        // With its size known, a rank missing here may run on another host.
        Err(RankError::Missing { missing, .. }) if size.is_some() => {
            return Err(MpirError::Incomplete {
                pid: launcher,
                missing,
                size: size.unwrap_or_default(),
            });
        }
        Err(RankError::Missing { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(ProcTable {
        launcher,
        tasks,
        source: TableSource::ProcessTree,
    })
}

/// The tasks below `root` on this host (see [`HostTree`]).
pub fn read_tree(root: u32, vars: &RankVars) -> HostTree {
    let parents = parent_map();
    let mut below: Vec<u32> = parents
        .keys()
        .copied()
        .filter(|&pid| pid != root && descends_from(pid, root, &parents))
        .collect();
    // Parents before children (a child's pid may be lower once pids wrap): by depth.
    below.sort_by_key(|&p| (depth(p, &parents), p));
    let mut out = HostTree::default();
    let mut taken: Vec<u32> = Vec::new();
    // This program's own processes (a server, the wrapper holding a task of a job sdm
    // launched) carry a rank but are not tasks: their children may be.
    let own = std::env::current_exe().ok();
    for pid in below {
        if taken.iter().any(|&t| descends_from(pid, t, &parents)) {
            continue;
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        if (own.is_some() && exe == own) || argv(pid).is_some_and(|a| is_hold_wrapper(&a)) {
            continue;
        }
        if let Some(task) = read_task(pid, vars) {
            taken.push(pid);
            out.tasks.push(task);
        } else if let Some(l) = ssh_launch(pid) {
            taken.push(pid);
            out.launches.push(l);
        }
    }
    out.tasks.sort_by_key(|t| (t.rank, t.pid));
    out
}

/// Process `pid` as a task, when its environment carries a rank.
pub fn read_task(pid: u32, vars: &RankVars) -> Option<Task> {
    let (rank, size) = vars.rank_in(&environ(pid)?)?;
    let executable = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    let held = field("State:").starts_with('T') && field("TracerPid:") == "0";
    Some(Task {
        rank,
        pid,
        executable,
        size,
        held,
    })
}

/// The processes whose command line (words joined by spaces) is `command`: where a
/// remote launch's command runs.
pub fn find_command(command: &str) -> Vec<u32> {
    let mut out: Vec<u32> = parent_map()
        .into_keys()
        .filter(|&pid| argv(pid).is_some_and(|a| a.join(" ") == command))
        .collect();
    out.sort_unstable();
    out
}

/// Whether `argv` is `sdm hold-task -- PROGRAM...`: the wrapper holding a task, which
/// carries its rank but is no task, whatever binary (`--remote-sdm`) it runs.
fn is_hold_wrapper(argv: &[String]) -> bool {
    matches!(argv, [_, cmd, dashes, ..] if cmd == "hold-task" && dashes == "--")
}

/// The words of process `pid`'s command line.
fn argv(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut words: Vec<String> = raw
        .split(|&b| b == 0)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    Some(words)
}

/// Process `pid` as an ssh command running something on another host.
fn ssh_launch(pid: u32) -> Option<RemoteLaunch> {
    let words = argv(pid)?;
    let name = words.first()?.rsplit('/').next()?;
    if name != "ssh" {
        return None;
    }
    parse_ssh(&words[1..])
}

/// ssh's arguments: its options (those of them taking a value skipped with it), the host,
/// then the remote command's words (their quotes removed: the remote shell removes them).
pub(crate) fn parse_ssh(args: &[String]) -> Option<RemoteLaunch> {
    const WITH_VALUE: &str = "BbcDEeFIiJLlmOoPpQRSWw";
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let Some(flags) = a.strip_prefix('-') else {
            break;
        };
        // `-p 22` or `-p22`; `-xT` is two flags without values.
        match flags.char_indices().find(|&(_, c)| WITH_VALUE.contains(c)) {
            Some((at, _)) if at + 1 == flags.len() => i += 2,
            _ => i += 1,
        }
    }
    let host = args.get(i)?;
    let host = host.rsplit_once('@').map_or(host.as_str(), |(_, h)| h);
    let command: Vec<String> = args[i + 1..]
        .iter()
        .map(|w| w.chars().filter(|&c| c != '"' && c != '\'').collect())
        .collect();
    if command.is_empty() {
        return None;
    }
    Some(RemoteLaunch {
        host: host.to_owned(),
        command: command.join(" "),
    })
}

/// How many ancestors `pid` has (up to 64).
fn depth(mut pid: u32, parents: &HashMap<u32, u32>) -> u32 {
    let mut d = 0;
    while let Some(&p) = parents.get(&pid) {
        if p <= 1 || d >= 64 {
            break;
        }
        pid = p;
        d += 1;
    }
    d
}

/// pid -> parent pid of every process.
pub(crate) fn parent_map() -> HashMap<u32, u32> {
    all_stats()
        .into_iter()
        .map(|s| (s.pid as u32, s.ppid as u32))
        .collect()
}

/// The fields of `/proc/PID/stat` sdm reads.
pub(crate) struct ProcStat {
    /// The process.
    pub pid: i32,
    /// Its state letter (`R`, `S`, `Z`…).
    pub state: char,
    /// Its parent.
    pub ppid: i32,
    /// Its session.
    pub session: i32,
}

/// `/proc/PID/stat` of every process there.
pub(crate) fn all_stats() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the command name (which may hold spaces and parentheses): state, ppid,
        // process group, session.
        let mut f = stat.rsplit_once(')')?.1.split_whitespace();
        let state = f.next()?.chars().next()?;
        let ppid = f.next()?.parse().ok()?;
        let _pgrp = f.next()?;
        let session = f.next()?.parse().ok()?;
        Some(ProcStat {
            pid,
            state,
            ppid,
            session,
        })
    })
    .collect()
}

/// The processes whose parent is `pid` (from /proc), in pid order.
pub fn children(pid: u32) -> Vec<u32> {
    let mut kids: Vec<u32> = parent_map()
        .into_iter()
        .filter(|&(_, parent)| parent == pid)
        .map(|(p, _)| p)
        .collect();
    kids.sort_unstable();
    kids
}

/// Every process below `root` (children, their children, ...; not `root` itself), from one
/// read of /proc.
pub fn descendants(root: u32) -> Vec<u32> {
    let parents = parent_map();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&c, _) in parents.iter().filter(|&(_, &pp)| pp == p) {
            out.push(c);
            frontier.push(c);
        }
    }
    out.sort_unstable();
    out
}

fn descends_from(mut pid: u32, ancestor: u32, parents: &HashMap<u32, u32>) -> bool {
    for _ in 0..64 {
        match parents.get(&pid) {
            Some(&p) if p == ancestor => return true,
            Some(&p) if p > 1 => pid = p,
            _ => return false,
        }
    }
    false
}

/// The environment process `pid` was started with (its UTF-8 variables); `None` when
/// it cannot be read.
pub(crate) fn environ(pid: u32) -> Option<HashMap<String, String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter_map(|kv| {
                let kv = std::str::from_utf8(kv).ok()?;
                let (k, v) = kv.split_once('=')?;
                Some((k.to_owned(), v.to_owned()))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn an_ssh_command_line_gives_its_host_and_remote_command() {
        let l = parse_ssh(&words(
            "-x h1 \"/usr/bin/hydra_pmi_proxy\" --control-port 10.0.0.1:5 --proxy-id 0",
        ))
        .unwrap();
        assert_eq!(l.host, "h1");
        assert_eq!(
            l.command,
            "/usr/bin/hydra_pmi_proxy --control-port 10.0.0.1:5 --proxy-id 0"
        );
        let l = parse_ssh(&words("-p 2222 -oBatchMode=yes -T me@h2 'orted' -x")).unwrap();
        assert_eq!((l.host.as_str(), l.command.as_str()), ("h2", "orted -x"));
        // An interactive login runs nothing there.
        assert_eq!(parse_ssh(&words("-p 22 h3")), None);
    }

    fn desc(rank: u32, pid: u32) -> ProcDesc {
        ProcDesc {
            rank,
            host: "h".into(),
            executable: "x".into(),
            pid,
        }
    }

    #[test]
    fn a_rank_twice_or_missing_is_named() {
        assert!(check_ranks(&[desc(1, 10), desc(0, 11)], None).is_ok());
        let e = check_ranks(&[desc(0, 10), desc(1, 11), desc(1, 12)], None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rank 1 is carried by two processes, h:11 and h:12: name the variable that \
             tells the tasks apart with --rank-env NAME"
        );
        let e = check_ranks(&[desc(0, 10), desc(3, 11)], None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no task has rank [1-2] (ranks 0 to 3 expected, 2 found)"
        );
        let e = check_ranks(&[desc(0, 10)], Some(2)).unwrap_err();
        assert!(matches!(e, RankError::Missing { last: 1, .. }), "{e}");
    }

    #[test]
    fn a_named_variable_is_the_only_one_read() {
        let env: HashMap<String, String> = [("RANK", "3"), ("WORLD_SIZE", "8"), ("MY", "5")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(RankVars::standard().rank_in(&env), Some((3, Some(8))));
        assert_eq!(RankVars::named("MY").rank_in(&env), Some((5, None)));
        assert_eq!(RankVars::named("NONE").rank_in(&env), None);
    }

    /// A process running `X hold-task -- ...` (sdm's wrapper, whatever its binary) carries
    /// the rank but is no task: the task is its child.
    #[test]
    fn a_hold_task_wrapper_is_not_a_task() {
        assert!(is_hold_wrapper(&words("/opt/sdm hold-task -- prog a")));
        assert!(!is_hold_wrapper(&words("/opt/sdm tasks --tree 1")));
        // `sh hold-task --`, run where `hold-task` is a script: the wrapper, not sdm's exe.
        let dir = std::env::temp_dir().join(format!("sdm-holdwrap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hold-task"), "sleep 60\ntrue\n").unwrap();
        let mut root = std::process::Command::new("sh")
            .args(["-c", "sh hold-task --; true"])
            .current_dir(&dir)
            .env("PMI_RANK", "0")
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let tasks = loop {
            let t = read_tree(root.id(), &RankVars::standard()).tasks;
            if t.iter().any(|t| t.executable.ends_with("sleep"))
                || std::time::Instant::now() > deadline
            {
                break t;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let parents = parent_map();
        for pid in parents.keys() {
            if descends_from(*pid, root.id(), &parents) {
                let pid = nix::unistd::Pid::from_raw(*pid as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        let _ = root.kill();
        let _ = root.wait();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(tasks.len(), 1, "{tasks:?}");
        assert!(tasks[0].executable.ends_with("sleep"), "{tasks:?}");
    }
}
