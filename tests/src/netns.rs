//! Hosts on one machine for the multi-host tests: network namespaces joined by veth pairs to
//! a bridge in the root namespace (iproute2), deleted, with what runs in them, when dropped.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Keeps the other multi-host tests of this test process waiting while it lives: each makes
/// several hosts and starts many daemons in them, too much at once for a loaded machine.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `ip ARGS`; the error is the command and what it printed.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `ip ARGS` that must work (panics with the command and its error).
pub fn must(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("{e}");
    }
}

/// Sets of hosts made by this process so far (so two sets in one test binary differ).
static MADE: AtomicU32 = AtomicU32::new(0);

/// A set of hosts: namespaces `<tag>h<k>` (k from 1), each with veth `<tag>p<k>` at
/// `10.S.N.1<k>`, whose peer `<tag>v<k>` is a port of bridge `<tag>br` at `10.S.N.1`. The
/// tag is `sdmt<pid><set>`, N the pid modulo 256 and S 200 plus the set: runs and sets
/// apart do not clash. Dropping it deletes everything it created.
pub struct Hosts {
    tag: String,
    subnet: String,
    namespaces: Vec<String>,
    veths: Vec<String>,
    bridge: Option<String>,
}

impl Hosts {
    /// Builds `n` hosts; any failure panics (after cleaning up what was made).
    pub fn create(n: u32) -> Hosts {
        let pid = std::process::id();
        let set = MADE.fetch_add(1, Ordering::Relaxed) % 50;
        let mut hosts = Hosts {
            tag: format!("sdmt{pid}{set}"),
            subnet: format!("10.{}.{}", 200 + set, pid % 256),
            namespaces: Vec::new(),
            veths: Vec::new(),
            bridge: None,
        };
        let first = hosts.namespace(1);
        must(&["netns", "add", &first]);
        hosts.namespaces.push(first);
        // The subnet must be ours alone (a leftover or a concurrent run would clash).
        let taken = Command::new("ip")
            .args([
                "-o",
                "addr",
                "show",
                "to",
                &format!("{}.0/24", hosts.subnet),
            ])
            .output()
            .expect("ip addr show");
        assert!(
            taken.stdout.is_empty(),
            "{}.0/24 is already in use: {}",
            hosts.subnet,
            String::from_utf8_lossy(&taken.stdout)
        );
        let br = format!("{}br", hosts.tag);
        must(&["link", "add", &br, "type", "bridge"]);
        hosts.bridge = Some(br.clone());
        must(&[
            "addr",
            "add",
            &format!("{}/24", hosts.gateway()),
            "dev",
            &br,
        ]);
        must(&["link", "set", &br, "up"]);
        for k in 1..=n {
            let ns = hosts.namespace(k);
            if k > 1 {
                must(&["netns", "add", &ns]);
                hosts.namespaces.push(ns.clone());
            }
            let (root_end, host_end) = (hosts.veth(k), format!("{}p{k}", hosts.tag));
            must(&[
                "link", "add", &root_end, "type", "veth", "peer", "name", &host_end, "netns", &ns,
            ]);
            hosts.veths.push(root_end.clone());
            must(&["link", "set", &root_end, "master", &br]);
            must(&["link", "set", &root_end, "up"]);
            let addr = format!("{}/24", hosts.addr(k));
            must(&["-n", &ns, "addr", "add", &addr, "dev", &host_end]);
            must(&["-n", &ns, "link", "set", &host_end, "up"]);
            must(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        hosts
    }

    /// What every name of this set starts with (`sdmt<pid><set>`).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// How many hosts there are.
    pub fn count(&self) -> u32 {
        self.namespaces.len() as u32
    }

    /// The host (from 1) of server `id` when servers go round robin over the hosts, as the
    /// ssh launcher places them (subtrees then span hosts).
    pub fn host_of(&self, id: u32) -> u32 {
        id % self.count() + 1
    }

    /// Every host in Slurm's hostlist form, `<tag>h[1-N]`.
    pub fn hostlist(&self) -> String {
        format!("{}h[1-{}]", self.tag, self.count())
    }

    /// Host `k`'s namespace (and host name), `<tag>h<k>`.
    pub fn namespace(&self, k: u32) -> String {
        format!("{}h{k}", self.tag)
    }

    /// The root-namespace end of host `k`'s veth pair.
    pub fn veth(&self, k: u32) -> String {
        format!("{}v{k}", self.tag)
    }

    /// The bridge's address: the root namespace, where front-ends and masters live.
    pub fn gateway(&self) -> String {
        format!("{}.1", self.subnet)
    }

    /// Host `k`'s address.
    pub fn addr(&self, k: u32) -> String {
        format!("{}.{}", self.subnet, 10 + k)
    }

    /// Sets host `k`'s link (its veth's root end) up or down.
    pub fn set_link(&self, k: u32, up: bool) {
        must(&["link", "set", &self.veth(k), if up { "up" } else { "down" }]);
    }

    /// A command run inside host `k`'s namespace (`ip netns exec`).
    pub fn exec(&self, k: u32, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.namespace(k), program]);
        c
    }

    /// A command run in host `k`'s network namespace only (`nsenter --net`), seeing the
    /// machine's mounts: `ip netns exec` mounts a sysfs of its own on /sys, which hides the
    /// cgroup hierarchy under /sys/fs/cgroup (slurmd will not start without it).
    pub fn enter(&self, k: u32, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.namespace(k)))
            .arg(program);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Whatever still runs on a host (a daemon a failed test left) ends with it.
        for ns in &self.namespaces {
            let pids = Command::new("ip").args(["netns", "pids", ns]).output();
            let pids = pids.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            let pids: Vec<String> = pids
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect();
            if !pids.is_empty() {
                let _ = Command::new("kill").arg("-KILL").args(&pids).status();
            }
        }
        let mut failed = Vec::new();
        for v in &self.veths {
            failed.extend(ip(&["link", "del", v]).err());
        }
        for ns in &self.namespaces {
            failed.extend(ip(&["netns", "del", ns]).err());
        }
        if let Some(br) = &self.bridge {
            failed.extend(ip(&["link", "del", br]).err());
        }
        for e in failed {
            eprintln!("netns hosts cleanup: {e}");
        }
    }
}
