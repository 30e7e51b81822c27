//! Hosts reachable over ssh for the multi-host tests: [`crate::netns::Hosts`] with an sshd
//! inside each (key-only, host and user keys made here), named `<tag>h<k>` in an ssh
//! configuration written into /etc/ssh/ssh_config.d/ (included by ssh's system-wide
//! configuration; deploy/ci-setup.sh makes sure), with `SetEnv` passing the daemons short
//! keepalive timings. Everything made here is removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use sdm_overlay::driver::KEEPALIVE_ENV;
use sdm_overlay::setup::PATIENCE_ENV;

use crate::daemons::{output_ok, wait_for};
use crate::netns::Hosts;

/// The directory ssh's system-wide configuration includes (Debian's /etc/ssh/ssh_config
/// has `Include /etc/ssh/ssh_config.d/*.conf`; deploy/ci-setup.sh makes sure).
const SSH_INCLUDE_DIR: &str = "/etc/ssh/ssh_config.d";

/// Hosts with an sshd each, reachable as `<tag>h<k>` through root's ssh configuration.
/// Dropping it stops the sshds and removes the keys and the configuration, then the hosts.
pub struct SshHosts {
    sshds: Vec<Child>,
    /// Where the keys, the sshds' configurations and their logs are (removed when dropped).
    pub dir: PathBuf,
    config: PathBuf,
    /// The hosts.
    pub hosts: Hosts,
}

impl SshHosts {
    /// `n` hosts, each with its sshd answering.
    pub fn create(n: u32) -> SshHosts {
        Self::create_with(n, false)
    }

    /// [`SshHosts::create`], each host with a host name of its own, its ssh name (a UTS
    /// namespace for its sshd and what it starts): for launchers that name a host by what
    /// its daemon calls it, as PRRTE (Open MPI 5) does.
    pub fn create_named(n: u32) -> SshHosts {
        Self::create_with(n, true)
    }

    fn create_with(n: u32, named: bool) -> SshHosts {
        let hosts = Hosts::create(n);
        let dir = std::env::temp_dir().join(hosts.tag());
        let config = Path::new(SSH_INCLUDE_DIR).join(format!("{}.conf", hosts.tag()));
        let mut me = SshHosts {
            sshds: Vec::new(),
            dir,
            config,
            hosts,
        };
        std::fs::create_dir_all(&me.dir).unwrap();
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let key = |name: &str| {
            output_ok(
                Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", "", "-C"])
                    .args([name, "-f", me.dir.join(name).to_str().unwrap()]),
            );
            me.dir.join(name)
        };
        let host_key = key("host_key");
        let user_key = key("user_key");
        let authorized = me.dir.join("authorized_keys");
        std::fs::copy(user_key.with_extension("pub"), &authorized).unwrap();
        let mut client = String::new();
        for k in 1..=me.hosts.count() {
            let addr = me.hosts.addr(k);
            let conf = me.dir.join(format!("sshd_h{k}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "ListenAddress {addr}\nPort 22\nHostKey {}\nPidFile {}\n\
                     AuthorizedKeysFile {}\nPermitRootLogin prohibit-password\n\
                     PubkeyAuthentication yes\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n\
                     PrintMotd no\nAcceptEnv SDM_*\nMaxStartups 200:30:400\nMaxSessions 200\n",
                    host_key.display(),
                    me.dir.join(format!("sshd_h{k}.pid")).display(),
                    authorized.display(),
                ),
            )
            .unwrap();
            let log = std::fs::File::create(me.dir.join(format!("sshd_h{k}.log"))).unwrap();
            let mut sshd = if named {
                let mut c = me.hosts.exec(k, "unshare");
                c.args(["--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\""])
                    .arg(me.hosts.namespace(k))
                    .arg("/usr/sbin/sshd");
                c
            } else {
                me.hosts.exec(k, "/usr/sbin/sshd")
            };
            let sshd = sshd
                .args(["-D", "-e", "-f"])
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("starting sshd in a namespace");
            me.sshds.push(sshd);
            client.push_str(&format!(
                "Host {}\n    HostName {addr}\n    User root\n    IdentityFile {}\n    \
                 IdentitiesOnly yes\n    StrictHostKeyChecking no\n    \
                 UserKnownHostsFile /dev/null\n    LogLevel ERROR\n    BatchMode yes\n    \
                 ConnectTimeout 20\n    SetEnv {KEEPALIVE_ENV}=100,3000 {PATIENCE_ENV}=60000\n",
                me.hosts.namespace(k),
                user_key.display()
            ));
        }
        std::fs::write(&me.config, client).unwrap();
        // ssh must read it (deploy/ci-setup.sh puts the Include in root's ssh configuration).
        let first = me.name(1);
        let g = output_ok(Command::new("ssh").args(["-G", &first]));
        assert!(
            g.lines()
                .any(|l| l == format!("hostname {}", me.hosts.addr(1))),
            "ssh does not read {}: run deploy/ci-setup.sh, which makes /etc/ssh/ssh_config \
             include {SSH_INCLUDE_DIR}/*.conf",
            me.config.display()
        );
        for k in 1..=me.hosts.count() {
            let name = me.name(k);
            let ok = wait_for(|| {
                Command::new("ssh")
                    .args(["-n", &name, "true"])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            });
            let log = std::fs::read_to_string(me.dir.join(format!("sshd_h{k}.log")));
            assert!(ok, "ssh {name} true never worked; sshd said: {log:?}");
        }
        me
    }

    /// Host `k`'s ssh name.
    pub fn name(&self, k: u32) -> String {
        self.hosts.namespace(k)
    }

    /// Every host's ssh name.
    pub fn names(&self) -> Vec<String> {
        (1..=self.hosts.count()).map(|k| self.name(k)).collect()
    }
}

impl Drop for SshHosts {
    fn drop(&mut self) {
        for s in &mut self.sshds {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = std::fs::remove_file(&self.config);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
