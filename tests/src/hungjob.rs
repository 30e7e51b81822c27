//! A hung MPI job across [`SshHosts`], started by `mpirun` outside sdm (the job `sdm
//! attach` is for): tests/programs/mpi_hang.c, every rank but the last waiting in a
//! barrier, the last computing.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::daemons::terminate;
use crate::sshhosts::SshHosts;

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
        let mut mpirun = Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "--host"])
            .arg(hosts.join(","))
            .args(["-n", &n.to_string()])
            .arg(&prog)
            .env("OMPI_MCA_btl", "self,tcp")
            // The waiting ranks poll: let them yield the machine's few cores.
            .env("OMPI_MCA_mpi_yield_when_idle", "1")
            .env_remove("SLURM_JOB_ID")
            .env_remove("SLURM_JOBID")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting mpirun");
        let out = mpirun.stdout.take().unwrap();
        let job = HungJobAcross { mpirun, prog };
        let mut lines = BufReader::new(out).lines();
        for _ in 0..n {
            let l = lines.next().expect("a rank's ready line").unwrap();
            assert_eq!(l, "ready");
        }
        std::thread::spawn(move || for _ in lines {});
        job
    }

    /// The pids of this job's ranks (on any host): the processes running its program, a
    /// file of this test process.
    fn ranks(&self) -> Vec<i32> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == self.prog)
            })
            .collect()
    }
}

impl Drop for HungJobAcross {
    fn drop(&mut self) {
        // SIGTERM first: mpirun then ends the ranks on every host through its daemons.
        terminate(&mut self.mpirun);
        // Never leave a spinning rank behind for the tests that follow.
        for pid in self.ranks() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
