//! The layout of a session: how many servers start and which ranks each serves. By
//! default one server per host serves every rank on it, as production tools run one
//! daemon per node (STAT's LaunchMON, CTI, TotalView's tvdsvr, Flux's brokers);
//! `--ranks-per-server K` splits a large host, and `--ranks-per-server 1` is the seed's
//! one server per rank.

use sdm_deploy::LauncherKind;
use sdm_proto::IdSet;
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
                _ => distinct_hosts(implied).len().max(1) as u32,
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

/// The servers for a job whose rank `r` runs on `hosts[r]` (a process table, for `sdm
/// attach`): one server per host serving every rank on it, or, with `per`, one per `per`
/// of a host's ranks (in rank order). Returns each server's host (in order of the hosts'
/// first ranks) and the placement of the ranks on them.
pub fn by_host(hosts: &[String], per: Option<u32>) -> (Vec<String>, Placement) {
    let names = distinct_hosts(hosts);
    let per = per.unwrap_or(u32::MAX).max(1) as usize;
    let mut servers = Vec::new();
    let mut sets = Vec::new();
    for name in names {
        let ranks: Vec<u32> = (0u32..)
            .zip(hosts)
            .filter(|(_, h)| **h == name)
            .map(|(r, _)| r)
            .collect();
        for chunk in ranks.chunks(per) {
            servers.push(name.clone());
            sets.push(chunk.iter().copied().collect::<IdSet>());
        }
    }
    let placement = Placement::sets(sets).expect("each rank is on one host");
    (servers, placement)
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
    }

    #[test]
    fn ranks_per_server_splits_and_one_is_the_seeds_layout() {
        let l = layout(&opts(10, LauncherKind::Local, &[], Some(4)), &[]).unwrap();
        assert_eq!((l.servers, l.placement), (3, Placement::blocks(4, 10)));
        let l = layout(&opts(10, LauncherKind::Local, &[], Some(1)), &[]).unwrap();
        assert_eq!((l.servers, l.placement), (10, Placement::Identity));
        assert!(layout(&opts(10, LauncherKind::Local, &[], Some(0)), &[]).is_err());
    }

    #[test]
    fn a_process_table_is_grouped_by_host() {
        let hosts: Vec<String> = ["b", "a", "b", "a", "b"].map(str::to_owned).to_vec();
        let set = |r: &[u32]| r.iter().copied().collect::<IdSet>();
        let (servers, p) = by_host(&hosts, None);
        assert_eq!(servers, ["b", "a"]);
        assert_eq!(
            p,
            Placement::sets(vec![set(&[0, 2, 4]), set(&[1, 3])]).unwrap()
        );
        let (servers, p) = by_host(&hosts, Some(2));
        assert_eq!(servers, ["b", "b", "a"]);
        let sets = vec![set(&[0, 2]), set(&[4]), set(&[1, 3])];
        assert_eq!(p, Placement::sets(sets).unwrap());
    }
}
