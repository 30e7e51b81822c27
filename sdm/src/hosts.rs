//! Where the servers of a running job go: one per host, serving the ranks the job's
//! process table places there (split in blocks of `--ranks-per-server`), for `sdm attach`
//! and for a job held in launch mode.

use sdm_client::session::SessionOptions;
use sdm_deploy::LauncherKind;
use sdm_proto::IdSet;
use sdm_server::hold::SlurmStep;
use sdm_topology::Placement;

/// Options for servers attaching to `tasks` (host, pid by rank): one server per host serves
/// that host's ranks (split in blocks of --ranks-per-server), on this host by fork; on
/// others as a step of the job's own allocation when the job is a Slurm `step` (see
/// [`in_step`]), else through ssh (server i on hosts[i]).
pub(crate) fn per_host_options(
    n: u32,
    tree: &crate::cli::TreeArgs,
    tasks: &[(String, u32)],
    step: Option<&SlurmStep>,
) -> anyhow::Result<SessionOptions> {
    let here = sdm_server::monitor::hostname();
    let mut opts = tree.options(n)?;
    let per = tree.ranks_per_server.unwrap_or(u32::MAX);
    let (mut sets, mut server_hosts) = ranks_by_host(tasks, per);
    let elsewhere = !tasks
        .iter()
        .all(|(h, _)| crate::cli::is_this_host(h, &here));
    match step {
        Some(step) if elsewhere && opts.launcher != LauncherKind::Ssh => {
            in_step(&mut sets, &mut server_hosts);
            opts.launcher = LauncherKind::Srun;
            opts.launcher_args = vec![
                format!("--jobid={}", step.job_id),
                "--overlap".into(),
                "--distribution=arbitrary".into(),
            ];
            opts.hosts = server_hosts;
        }
        _ if elsewhere || opts.launcher == LauncherKind::Ssh => {
            // The job launcher's own arguments are not ssh's.
            if opts.launcher != LauncherKind::Ssh {
                opts.launcher_args.clear();
            }
            opts.launcher = LauncherKind::Ssh;
            opts.hosts = server_hosts;
        }
        _ => {
            opts.launcher = LauncherKind::Local;
            opts.hosts.clear();
        }
    }
    opts.placement = Some(Placement::sets(sets)?);
    Ok(opts)
}

/// Servers started as a step of the job's allocation (`srun --jobid=J --overlap
/// --distribution=arbitrary --nodelist=LIST`, LIST in hostlist form), as STAT's and CTI's
/// daemons are: the arbitrary distribution puts task i (server id i, its `SLURM_PROCID`)
/// on the i-th node of LIST as srun expands it, so the servers are put in that order,
/// each with its host's ranks.
fn in_step(sets: &mut Vec<IdSet>, hosts: &mut Vec<String>) {
    let order = sdm_deploy::hostlist::expand(&sdm_deploy::hostlist::compress(hosts))
        .unwrap_or_else(|_| hosts.clone());
    let at = |h: &String| order.iter().position(|o| o == h).unwrap_or(usize::MAX);
    let mut servers: Vec<(IdSet, String)> = sets.drain(..).zip(hosts.drain(..)).collect();
    servers.sort_by_key(|(_, h)| at(h));
    for (set, host) in servers {
        sets.push(set);
        hosts.push(host);
    }
}

/// The ranks of `tasks` (host, pid by rank) grouped by host in first-seen order, each
/// host's split in blocks of `per`: one server's ranks each, with that server's host.
fn ranks_by_host(tasks: &[(String, u32)], per: u32) -> (Vec<IdSet>, Vec<String>) {
    let mut hosts: Vec<(&str, Vec<u32>)> = Vec::new();
    for (rank, (h, _)) in tasks.iter().enumerate() {
        match hosts.iter_mut().find(|(x, _)| x == h) {
            Some((_, v)) => v.push(rank as u32),
            None => hosts.push((h, vec![rank as u32])),
        }
    }
    let mut sets = Vec::new();
    let mut names = Vec::new();
    for (h, ranks) in hosts {
        for chunk in ranks.chunks(per.max(1) as usize) {
            sets.push(chunk.iter().copied().collect());
            names.push(h.to_owned());
        }
    }
    (sets, names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attached_ranks_are_grouped_by_host_and_split_in_blocks() {
        let tasks: Vec<(String, u32)> = ["a", "b", "a", "b", "a"]
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_string(), 100 + i as u32))
            .collect();
        let (sets, hosts) = ranks_by_host(&tasks, u32::MAX);
        assert_eq!(
            sets,
            vec!["[0,2,4]".parse().unwrap(), "[1,3]".parse().unwrap()]
        );
        assert_eq!(hosts, ["a", "b"]);
        let (sets, hosts) = ranks_by_host(&tasks, 2);
        assert_eq!(sets.len(), 3);
        assert_eq!(sets[1], IdSet::single(4));
        assert_eq!(hosts, ["a", "a", "b"]);
    }

    #[test]
    fn servers_in_a_step_follow_the_node_list_srun_expands() {
        let mut sets: Vec<IdSet> = ["[0-1]", "[2-3]", "[4-5]", "[6]"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let mut hosts: Vec<String> = ["n3", "n10", "n1", "m2"].map(String::from).to_vec();
        in_step(&mut sets, &mut hosts);
        // `n[1,3],n10,m2` as srun gets it, expanded in that order.
        assert_eq!(
            sdm_deploy::hostlist::compress(&hosts),
            "n[1,3],n10,m2",
            "{hosts:?}"
        );
        assert_eq!(hosts, ["n1", "n3", "n10", "m2"]);
        let want: Vec<IdSet> = ["[4-5]", "[0-1]", "[2-3]", "[6]"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(sets, want);
    }
}
