//! The layout of a session: how many servers start and which ranks each serves. By
//! default one server per host serves every rank on it, as production tools run one
//! daemon per node (STAT's LaunchMON, CTI, TotalView's tvdsvr, Flux's brokers);
//! `--ranks-per-server K` splits a large host, and `--ranks-per-server 1` is the seed's
//! one server per rank.

use sdm_deploy::LauncherKind;
use sdm_topology::Placement;

use crate::error::{Error, Result};
use crate::session::SessionOptions;

/// Servers to start, and the ranks each serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Number of servers (launched in id order).
    pub servers: u32,
    /// Which ranks server `s` serves.
    pub placement: Placement,
}

/// The hosts `hosts` names, each once, in first-seen order.
pub fn distinct_hosts(hosts: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for h in hosts {
        if !out.contains(h) {
            out.push(h.clone());
        }
    }
    out
}

/// The layout `opts` asks for, with the hosts its launcher implies when none are given.
pub fn of(opts: &SessionOptions) -> Result<Layout> {
    let implied = opts
        .launcher
        .build_with(opts.hosts.clone(), Vec::new())
        .implied_hosts();
    layout(opts, &implied)
}

/// The layout `opts` asks for; `implied` are the hosts the launcher will use when none were
/// given (srun inside an allocation).
pub fn layout(opts: &SessionOptions, implied: &[String]) -> Result<Layout> {
    let n = opts.n;
    if let Some(p) = &opts.placement {
        return Ok(Layout {
            servers: p.servers_for(n),
            placement: p.clone(),
        });
    }
    // A topology file numbers its servers: one rank each, as it places them.
    if let Some(m) = opts.topology.servers()
        && opts.ranks_per_server.is_none()
    {
        return Ok(Layout {
            servers: m,
            placement: Placement::Identity,
        });
    }
    let per = match opts.ranks_per_server {
        Some(0) => {
            return Err(Error::invalid(
                "--ranks-per-server 0: a server serves at least one rank",
            ));
        }
        Some(k) => k,
        None => {
            let hosts = match opts.launcher {
                LauncherKind::Local => 1,
                _ if !opts.hosts.is_empty() => distinct_hosts(&opts.hosts).len() as u32,
                _ if !implied.is_empty() => distinct_hosts(implied).len() as u32,
                _ => nodes_in(&opts.launcher_args).unwrap_or(1),
            };
            n.div_ceil(hosts.clamp(1, n.max(1)))
        }
    };
    let placement = Placement::blocks(per, n);
    Ok(Layout {
        servers: placement.servers_for(n),
        placement,
    })
}

/// The node count a launcher's own arguments ask for (`-N K`, `--nodes=K`, `--nodes K`).
fn nodes_in(args: &[String]) -> Option<u32> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.as_str() {
            "-N" | "--nodes" => it.next().map(String::as_str),
            a => a
                .strip_prefix("--nodes=")
                .or_else(|| a.strip_prefix("-N").filter(|v| !v.is_empty())),
        };
        // `-N 2-4` (a range): its least.
        if let Some(k) = value.and_then(|v| v.split('-').next()?.parse().ok()) {
            return Some(k);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(n: u32, launcher: LauncherKind, hosts: &[&str], per: Option<u32>) -> SessionOptions {
        SessionOptions {
            n,
            launcher,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ranks_per_server: per,
            ..SessionOptions::default()
        }
    }

    #[test]
    fn one_server_per_host_by_default() {
        let l = layout(&opts(64, LauncherKind::Local, &[], None), &[]).unwrap();
        assert_eq!((l.servers, l.placement), (1, Placement::blocks(64, 64)));
        let hosts = ["a", "b", "c", "d", "a"];
        let l = layout(&opts(64, LauncherKind::Ssh, &hosts, None), &[]).unwrap();
        assert_eq!((l.servers, l.placement), (4, Placement::blocks(16, 64)));
        let implied = ["n1".to_string(), "n2".to_string()];
        let l = layout(&opts(5, LauncherKind::Srun, &[], None), &implied).unwrap();
        assert_eq!((l.servers, l.placement), (2, Placement::blocks(3, 5)));
        let mut o = opts(16, LauncherKind::Srun, &[], None);
        o.launcher_args = vec!["-N".into(), "4".into()];
        assert_eq!(layout(&o, &[]).unwrap().servers, 4);
        o.launcher_args = vec!["--nodes=2-3".into()];
        assert_eq!(layout(&o, &[]).unwrap().servers, 2);
    }

    #[test]
    fn ranks_per_server_splits_and_one_is_the_seeds_layout() {
        let l = layout(&opts(10, LauncherKind::Local, &[], Some(4)), &[]).unwrap();
        assert_eq!((l.servers, l.placement), (3, Placement::blocks(4, 10)));
        let l = layout(&opts(10, LauncherKind::Local, &[], Some(1)), &[]).unwrap();
        assert_eq!((l.servers, l.placement), (10, Placement::Identity));
        assert!(layout(&opts(10, LauncherKind::Local, &[], Some(0)), &[]).is_err());
    }
}
