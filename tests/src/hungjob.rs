//! Hung MPI jobs, started outside sdm (the jobs `sdm attach` is for): tests/programs/
//! mpi_hang.c, every rank but the last waiting in a barrier, the last computing. [`HungJob`]
//! runs on this host under `mpirun`, `srun` or MPICH's `mpiexec.hydra`, [`HungJobAcross`]
//! across [`SshHosts`] under `mpirun` or `mpiexec.hydra`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use crate::daemons::terminate;
use crate::sshhosts::SshHosts;

/// A hung job on this host; its launcher ended when dropped, whatever happens, and its
/// ranks with it (by pid: tests running at once share the program, so not by its path).
pub struct HungJob {
    /// The job's launcher, whose MPIR table `sdm attach` reads.
    pub launcher: Child,
}

impl HungJob {
    /// `mpirun -n N mpi_hang` or `srun -n N mpi_hang`, once every rank printed `ready`.
    pub fn start(launcher: &str, n: u32) -> Self {
        Self::start_program(launcher, n, "mpi_hang")
    }

    /// [`HungJob::start`] with tests/programs/NAME.c.
    pub fn start_program(launcher: &str, n: u32, name: &str) -> Self {
        let prog = match launcher {
            "mpiexec.hydra" => crate::mpich_program(name),
            _ => crate::mpi_program(name),
        };
        let mut cmd = Command::new(launcher);
        if launcher == "mpirun" {
            cmd.args(["--allow-run-as-root", "--oversubscribe"])
                .env_remove("SLURM_JOB_ID")
                .env_remove("SLURM_JOBID");
        }
        let mut child = cmd
            .args(["-n", &n.to_string()])
            .arg(&prog)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {launcher}: {e}"));
        let out = child.stdout.take().unwrap();
        let job = HungJob { launcher: child };
        await_ready(out, n);
        job
    }

    /// The launcher's pid.
    pub fn pid(&self) -> u32 {
        self.launcher.id()
    }

    /// The ranks' pids, from the launcher's table.
    pub fn ranks(&self) -> Vec<u32> {
        let out = crate::sdm_ok(["attach", &self.pid().to_string(), "--table", "--json"]);
        out.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["pid"].as_u64().unwrap() as u32
            })
            .collect()
    }
}

impl Drop for HungJob {
    fn drop(&mut self) {
        // SIGTERM first: the launcher ends its job (hydra its proxies and ranks); whatever
        // of its tree outlives it is killed, by pid (tests share the program's path).
        let below = crate::descendants_of(self.launcher.id());
        terminate(&mut self.launcher);
        for pid in below {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Reads the job's standard output until each of its `n` ranks has printed `ready` (MPI is
/// up), then drains it on a thread, so a rank writing later never blocks on a full pipe.
/// (hydra may join two ranks' lines, `readyready` then an empty one.)
fn await_ready(out: ChildStdout, n: u32) {
    let mut lines = BufReader::new(out).lines();
    let mut ready = 0;
    while ready < n as usize {
        let l = lines.next().expect("a rank's ready line").unwrap();
        assert!(l.replace("ready", "").is_empty(), "{l:?}");
        ready += l.matches("ready").count();
    }
    std::thread::spawn(move || for _ in lines {});
}

/// The pids of the processes running `prog`.
pub fn running(prog: &Path) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == prog))
        .collect()
}

/// SIGKILL to every process running `prog`, a program of this test process (of the one
/// multi-host test running): never leave a spinning rank behind for the tests that follow.
pub fn kill_running(prog: &Path) {
    for pid in running(prog) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The running job; terminated (and its ranks with it) when dropped, whatever happens.
pub struct HungJobAcross {
    /// The job's launcher, whose MPIR table `sdm attach` reads.
    pub mpirun: Child,
    prog: PathBuf,
}

impl HungJobAcross {
    /// `n` ranks, an equal share on each host of `h` in rank order, once every rank has
    /// printed `ready` (MPI is up).
    pub fn start(h: &SshHosts, n: u32) -> HungJobAcross {
        let prog = crate::mpi_program("mpi_hang");
        let per_host = n / h.hosts.count();
        let hosts: Vec<String> = h
            .names()
            .iter()
            .map(|name| format!("{name}:{per_host}"))
            .collect();
        let mut mpirun = Command::new("mpirun");
        mpirun
            .args(["--allow-run-as-root", "--oversubscribe", "--host"])
            .arg(hosts.join(","))
            .args(["-n", &n.to_string()])
            .arg(&prog)
            .env("OMPI_MCA_btl", "self,tcp")
            // The waiting ranks poll: let them yield the machine's few cores.
            .env("OMPI_MCA_mpi_yield_when_idle", "1");
        Self::spawn(mpirun, prog, n)
    }

    /// [`HungJobAcross::start`] under MPICH's `mpiexec.hydra` (the program built with
    /// `mpicc.mpich`), which starts its proxies on the hosts over ssh. The hosts share
    /// this machine's host name, which they resolve to their own loopback, so the proxies
    /// are told the launcher's address on the bridge (`-localhost`).
    pub fn start_hydra(h: &SshHosts, n: u32) -> HungJobAcross {
        let prog = crate::mpich_program("mpi_hang");
        let mut hydra = Command::new("mpiexec.hydra");
        hydra
            .args(["-launcher", "ssh", "-localhost", &h.hosts.gateway()])
            .args(["-hosts", &h.names().join(",")])
            .args(["-n", &n.to_string()])
            .arg(&prog);
        Self::spawn(hydra, prog, n)
    }

    /// Runs the launcher `cmd` of `n` ranks of `prog` until every rank is ready.
    fn spawn(mut cmd: Command, prog: PathBuf, n: u32) -> HungJobAcross {
        let mut mpirun = cmd
            .env_remove("SLURM_JOB_ID")
            .env_remove("SLURM_JOBID")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the job's launcher");
        let out = mpirun.stdout.take().unwrap();
        let job = HungJobAcross { mpirun, prog };
        await_ready(out, n);
        job
    }
}

impl Drop for HungJobAcross {
    fn drop(&mut self) {
        // SIGTERM first: mpirun then ends the ranks on every host through its daemons.
        terminate(&mut self.mpirun);
        kill_running(&self.prog);
    }
}
