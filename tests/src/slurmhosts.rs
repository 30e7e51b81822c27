//! A Slurm cluster of the multi-host tests' own: slurmctld in the root namespace, one
//! slurmd per [`crate::netns::Hosts`] host as its own node (see [`SlurmHosts`]).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::daemons::{terminate, wait_for};
use crate::netns::Hosts;

/// The port every slurmd of [`SlurmHosts`] listens on, inside its own host.
const SLURMD_PORT: u16 = 6818;

/// A Slurm cluster of its own on hosts of its own: slurmctld in the root namespace on the bridge's
/// address, one slurmd per host as node `<tag>h<k>` (its `NodeAddr` that host's address,
/// `cpus` CPUs), with configuration, state, spool and logs in a directory of its own,
/// named to every Slurm command by `SLURM_CONF`. The machine's cluster (deploy/ci-setup.sh)
/// is left alone: this one has its own name, partition and slurmctld port; munge is shared.
/// Dropping it cancels its jobs, stops its daemons and removes the directory, then the hosts.
pub struct SlurmHosts {
    slurmds: Vec<Child>,
    slurmctld: Option<Child>,
    dir: PathBuf,
    conf: PathBuf,
    /// CPUs of each node.
    cpus: u32,
    /// The hosts.
    pub hosts: Hosts,
}

impl SlurmHosts {
    /// `n` hosts as nodes of `cpus` CPUs each, all idle.
    pub fn create(n: u32, cpus: u32) -> SlurmHosts {
        let hosts = Hosts::create(n);
        let dir = std::env::temp_dir().join(format!("{}-slurm", hosts.tag()));
        let mut me = SlurmHosts {
            slurmds: Vec::new(),
            slurmctld: None,
            conf: dir.join("slurm.conf"),
            dir,
            cpus,
            hosts,
        };
        for k in 1..=me.hosts.count() {
            std::fs::create_dir_all(me.dir.join("spool").join(me.hosts.namespace(k))).unwrap();
        }
        std::fs::create_dir_all(me.dir.join("state")).unwrap();
        std::fs::write(&me.conf, me.config()).unwrap();

        let out = std::fs::File::create(me.dir.join("slurmctld.out")).unwrap();
        let slurmctld = me
            .slurm(&mut Command::new("/usr/sbin/slurmctld"))
            .arg("-D")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("starting slurmctld");
        me.slurmctld = Some(slurmctld);
        let up = wait_for(|| {
            me.slurm(&mut Command::new("scontrol"))
                .arg("ping")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"))
        });
        assert!(up, "slurmctld never answered: {}", me.logs());

        for k in 1..=me.hosts.count() {
            let out = std::fs::File::create(me.dir.join(format!("slurmd-h{k}.out"))).unwrap();
            let slurmd = me
                .slurm(&mut me.hosts.enter(k, "/usr/sbin/slurmd"))
                .args(["-D", "-N", &me.hosts.namespace(k)])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(out)
                .spawn()
                .expect("starting slurmd in a namespace");
            me.slurmds.push(slurmd);
        }
        let idle = wait_for(|| {
            let states = me.squery("sinfo", &["-h", "-N", "-o", "%N %T"]);
            states.lines().filter(|l| l.ends_with(" idle")).count() == me.hosts.count() as usize
        });
        assert!(
            idle,
            "the nodes never all became idle: {}{}",
            me.squery("sinfo", &["-N", "-l"]),
            me.logs()
        );
        me
    }

    /// The cluster's slurm.conf.
    fn config(&self) -> String {
        let tag = self.hosts.tag();
        let dir = self.dir.display();
        let controller = sdm_server::monitor::hostname();
        let controller = controller.split('.').next().unwrap();
        // A port for slurmctld that is free now on the bridge's address.
        let port = std::net::TcpListener::bind((self.hosts.gateway().as_str(), 0))
            .and_then(|l| l.local_addr())
            .expect("a free port for slurmctld")
            .port();
        let mut conf = format!(
            "ClusterName={tag}\nSlurmctldHost={controller}({gw})\nSlurmctldPort={port}\n\
             SlurmdPort={SLURMD_PORT}\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nCredType=cred/munge\n\
             StateSaveLocation={dir}/state\nSlurmdSpoolDir={dir}/spool/%n\n\
             SlurmctldPidFile={dir}/slurmctld.pid\nSlurmdPidFile={dir}/slurmd-%n.pid\n\
             SlurmctldLogFile={dir}/slurmctld.log\nSlurmdLogFile={dir}/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\nMpiDefault=none\nSwitchType=switch/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
             SlurmdParameters=config_overrides\nReturnToService=2\nInactiveLimit=0\n\
             KillWait=5\nMinJobAge=30\nMessageTimeout=20\nMailProg=/bin/true\n",
            gw = self.hosts.gateway(),
        );
        for k in 1..=self.hosts.count() {
            conf.push_str(&format!(
                "NodeName={} NodeAddr={} CPUs={} RealMemory=1000 State=UNKNOWN\n",
                self.hosts.namespace(k),
                self.hosts.addr(k),
                self.cpus,
            ));
        }
        conf.push_str(&format!(
            "PartitionName={tag} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        ));
        conf
    }

    /// `cmd` set to act on this cluster: `SLURM_CONF` names its configuration, and no
    /// `SLURM_*` variable of the caller (a job it runs in) comes along.
    pub fn slurm<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SLURM_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("SLURM_CONF", &self.conf)
    }

    /// What the Slurm command `program args` printed about this cluster (errors included).
    pub fn squery(&self, program: &str, args: &[&str]) -> String {
        match self.slurm(&mut Command::new(program)).args(args).output() {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("{program}: {e}"),
        }
    }

    /// The ends of the daemons' logs, for a failure's message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        let mut names = vec!["slurmctld.log".to_owned()];
        names.extend(
            (1..=self.hosts.count()).map(|k| format!("slurmd-{}.log", self.hosts.namespace(k))),
        );
        for name in names {
            let log = std::fs::read_to_string(self.dir.join(&name)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            text.push_str(&format!("\n--- {name}:\n{tail}"));
        }
        text
    }

    /// The ids of this cluster's jobs.
    pub fn jobs(&self) -> Vec<String> {
        let out = self
            .slurm(&mut Command::new("squeue"))
            .args(["-h", "-o", "%i"])
            .output();
        out.map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
    }
}

impl Drop for SlurmHosts {
    fn drop(&mut self) {
        // Jobs first (an srun a failed test left ends with its job), then the daemons.
        let jobs = self.jobs();
        if !jobs.is_empty() {
            let _ = self
                .slurm(&mut Command::new("scancel"))
                .args(&jobs)
                .status();
            wait_for(|| self.jobs().is_empty());
        }
        for d in &mut self.slurmds {
            terminate(d);
        }
        if let Some(c) = &mut self.slurmctld {
            terminate(c);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
