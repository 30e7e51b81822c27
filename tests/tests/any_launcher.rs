//! `sdm attach` to a job whose launcher keeps no process table (neither MPIR nor PMIx): a
//! plain shell loop starting Python ranks (tests/programs/ranked.py), `for r in 0 1 2 3;
//! do RANK=$r python3 ranked.py RANK 3 & done; wait`, rank 3 computing and the others
//! sleeping. The tasks are the shell's descendants, each ranked by its environment:
//!
//! - `sdm attach SHELL --table`: ranks 0-3, each the process whose `RANK` says so; `bt
//!   --classes` over them: two classes, the sleepers `[0-2]` and the computing `[3]`.
//! - A custom variable (`MY_RANK`) is read with `--rank-env MY_RANK`, through `--pids
//!   HOST:SHELL --tree`; without it the shell is no launcher, said so.
//! - `--pids` given in another order: each task keeps the rank its environment gives.
//! - Two tasks with the same rank: an error naming the rank and both processes.
//! - One shell loop per host on the four namespace hosts (as torchrun runs one agent per
//!   node), attached with `--pids h1:SHELL1,...,h4:SHELL4 --tree`: each host's tasks read
//!   there (`sdm tasks` over ssh), the table placing ranks on their hosts, two classes.

use sdm_e2e as support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use sdm_proto::IdSet;

/// The job's size; its last rank computes.
const N: u32 = 4;

/// A shell loop running ranked.py once per rank in `ranks`, each with `VAR=rank`; its
/// processes killed when dropped.
struct ShellJob {
    shell: Child,
}

impl ShellJob {
    fn start(var: &str, ranks: &[u32]) -> ShellJob {
        Self::start_in(Command::new("sh"), var, ranks, N - 1)
    }

    /// [`ShellJob::start`] with `sh` run as `shell` says (in a host's namespace), rank
    /// `busy` computing.
    fn start_in(mut shell: Command, var: &str, ranks: &[u32], busy: u32) -> ShellJob {
        let prog = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/ranked.py");
        let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
        let script = format!(
            "for r in {}; do {var}=$r python3 {} {var} {} & done; wait",
            list.join(" "),
            prog.display(),
            busy
        );
        let mut shell = shell
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting sh");
        let out = shell.stdout.take().unwrap();
        let job = ShellJob { shell };
        let mut lines = BufReader::new(out).lines();
        // Lines of ranks writing at once may join: `readyready`, then an empty one.
        let mut ready = 0;
        while ready < ranks.len() {
            let l = lines.next().expect("a rank's ready line").unwrap();
            assert!(l.replace("ready", "").is_empty(), "{l:?}");
            ready += l.matches("ready").count();
        }
        std::thread::spawn(move || for _ in lines {});
        job
    }

    fn pid(&self) -> String {
        self.shell.id().to_string()
    }

    /// The Python processes, by the rank in their environment's `var`.
    fn ranks(&self, var: &str) -> HashMap<u32, u32> {
        support::children_of(self.shell.id())
            .into_iter()
            .map(|p| {
                let env = std::fs::read(format!("/proc/{p}/environ")).unwrap();
                let rank = env
                    .split(|&b| b == 0)
                    .find_map(|kv| kv.strip_prefix(format!("{var}=").as_bytes()))
                    .map(|r| String::from_utf8_lossy(r).parse::<u32>().unwrap())
                    .unwrap_or_else(|| panic!("process {p} has no {var}"));
                (rank, p)
            })
            .collect()
    }
}

impl Drop for ShellJob {
    fn drop(&mut self) {
        for p in support::descendants_of(self.shell.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.shell.kill();
        let _ = self.shell.wait();
    }
}

/// `sdm ARGS`, its output.
fn sdm(args: &[&str]) -> Output {
    Command::new(support::sdm())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running sdm")
}

/// A `--table` printed: rank -> pid, every line naming this host and python.
fn table(out: &Output) -> HashMap<u32, u32> {
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {text}{err}", out.status);
    let here = sdm_server::monitor::hostname();
    text.lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            assert_eq!(w.len(), 4, "{text}");
            assert_eq!(w[1], here, "{text}");
            assert!(w[3].contains("python3"), "{text}");
            (w[0].parse().unwrap(), w[2].parse().unwrap())
        })
        .collect()
}

/// `-c stop -c "bt --classes" -c detach` printed two classes of the main threads, the
/// sleepers `[0-2]` and the computing `[3]`, every rank in one class, and detached.
fn assert_two_classes(out: &Output) {
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let context = format!("{text}{err}");
    assert!(out.status.success(), "{:?}: {context}", out.status);
    let classes: Vec<IdSet> = text
        .lines()
        .filter(|l| l.contains("(representative"))
        .map(|l| {
            let ids = l.split_once(' ').unwrap().0;
            ids.parse().unwrap()
        })
        .collect();
    let last = N - 1;
    assert_eq!(
        classes,
        [
            format!("[0-{}]", last - 1).parse().unwrap(),
            format!("[{last}]").parse().unwrap()
        ],
        "{context}"
    );
    assert_eq!(
        text.lines().last(),
        Some(format!("[0-{last}] detached").as_str()),
        "{context}"
    );
}

const CLASSES: [&str; 6] = ["-c", "stop", "-c", "bt --classes", "-c", "detach"];

#[test]
fn a_shell_loops_ranks_are_read_from_rank_in_its_process_tree() {
    let job = ShellJob::start("RANK", &[0, 1, 2, 3]);
    let want = job.ranks("RANK");
    assert_eq!(table(&sdm(&["attach", &job.pid(), "--table"])), want);
    let mut args = vec!["attach", "--pids"];
    let root = format!("localhost:{}", job.pid());
    args.extend([root.as_str(), "--tree", "--table"]);
    assert_eq!(table(&sdm(&args)), want);
    let pid = job.pid();
    let mut args = vec!["attach", pid.as_str()];
    args.extend(CLASSES);
    assert_two_classes(&sdm(&args));
}

#[test]
fn a_custom_rank_variable_is_read_with_rank_env() {
    let job = ShellJob::start("MY_RANK", &[0, 1, 2, 3]);
    let want = job.ranks("MY_RANK");
    let root = format!("localhost:{}", job.pid());
    let tree = ["attach", "--pids", root.as_str(), "--tree"];
    let mut args = tree.to_vec();
    args.extend(["--rank-env", "MY_RANK", "--table"]);
    assert_eq!(table(&sdm(&args)), want);
    let mut args = tree.to_vec();
    args.extend(["--rank-env", "MY_RANK"]);
    args.extend(CLASSES);
    assert_two_classes(&sdm(&args));
    // Without it, none of the usual variables is there: said so, nothing attached.
    let mut args = tree.to_vec();
    args.push("--table");
    let out = sdm(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "no process under {}:{} carries a rank variable (",
            sdm_server::monitor::hostname(),
            job.pid()
        )),
        "{err}"
    );
}

#[test]
fn pids_keep_the_rank_their_environment_gives() {
    let job = ShellJob::start("RANK", &[0, 1, 2, 3]);
    let want = job.ranks("RANK");
    // Highest rank first: positions would rank them backwards.
    let list: Vec<String> = (0..N).rev().map(|r| want[&r].to_string()).collect();
    let list = list.join(",");
    assert_eq!(table(&sdm(&["attach", "--pids", &list, "--table"])), want);
    let mut args = vec!["attach", "--pids", list.as_str()];
    args.extend(CLASSES);
    assert_two_classes(&sdm(&args));
}

#[test]
fn two_tasks_with_one_rank_are_an_error_naming_both() {
    let job = ShellJob::start("RANK", &[0, 1, 1, 2]);
    let twice: Vec<u32> = support::children_of(job.shell.id())
        .into_iter()
        .filter(|p| {
            let env = std::fs::read(format!("/proc/{p}/environ")).unwrap();
            env.split(|&b| b == 0).any(|kv| kv == b"RANK=1")
        })
        .collect();
    assert_eq!(twice.len(), 2);
    let out = sdm(&["attach", &job.pid(), "--table"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let here = sdm_server::monitor::hostname();
    assert!(
        err.contains(&format!(
            "rank 1 is carried by two processes, {here}:{} and {here}:{}",
            twice[0], twice[1]
        )),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
#[cfg_attr(
    not(all(sdm_have_netns, sdm_have_ssh)),
    ignore = "needs root's CAP_SYS_ADMIN and CAP_NET_ADMIN, iproute2 and sshd (deploy/ci-setup.sh)"
)]
fn one_launcher_per_host_is_read_on_each_host() {
    let _one = support::netns::one_at_a_time();
    let h = support::sshhosts::SshHosts::create(4);
    let names = h.names();
    let jobs: Vec<ShellJob> = (1..=4u32)
        .map(|k| {
            let first = 2 * (k - 1);
            ShellJob::start_in(h.hosts.exec(k, "sh"), "RANK", &[first, first + 1], 7)
        })
        .collect();
    let roots: Vec<String> = names
        .iter()
        .zip(&jobs)
        .map(|(name, j)| format!("{name}:{}", j.pid()))
        .collect();
    let roots = roots.join(",");
    let out = sdm(&["attach", "--pids", &roots, "--tree", "--table"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(u32, String, u32)> = text
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (
                w[0].parse().unwrap(),
                w[1].to_owned(),
                w[2].parse().unwrap(),
            )
        })
        .collect();
    let mut want = Vec::new();
    for (k, (name, job)) in names.iter().zip(&jobs).enumerate() {
        let ranks = job.ranks("RANK");
        for r in [2 * k as u32, 2 * k as u32 + 1] {
            want.push((r, name.clone(), ranks[&r]));
        }
    }
    assert_eq!(rows, want, "{text}");
    let mut args = vec!["attach", "--pids", roots.as_str(), "--tree"];
    args.extend(CLASSES);
    let out = sdm(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let classes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("(representative"))
        .map(|l| l.split_once(' ').unwrap().0)
        .collect();
    assert_eq!(classes, ["[0-6]", "[7]"], "{text}{err}");
    assert_eq!(text.lines().last(), Some("[0-7] detached"), "{text}{err}");
    support::daemons::assert_daemons_gone(&h.hosts, "tcp", "detach");
    drop(jobs);
}

/// `sdm hold-task -- sh -c 'grep SigIgn /proc/self/status'`: the task is held stopped
/// until continued, then runs with the signal state it would have without sdm: SIGPIPE
/// (signal 13, bit 12 of SigIgn) not ignored; the wrapper exits as the task did.
#[test]
fn a_held_task_does_not_ignore_sigpipe() {
    let wrapper = Command::new(support::sdm())
        .args([
            "hold-task",
            "--",
            "sh",
            "-c",
            "grep SigIgn /proc/self/status",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting sdm hold-task");
    // Hang guard only: the task is held (state T) as soon as it has exec'd.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let task = loop {
        let held = support::children_of(wrapper.id())
            .into_iter()
            .find(|&p| support::procs::state(p) == Some('T'));
        if let Some(p) = held {
            break p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the task was never held"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let pid = nix::unistd::Pid::from_raw(task as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let out = wrapper.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}: {text}", out.status);
    let mask = text
        .trim()
        .strip_prefix("SigIgn:")
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap_or_else(|| panic!("no SigIgn line: {text}"));
    assert_eq!(mask & (1 << 12), 0, "SIGPIPE is ignored: {text}");
}
