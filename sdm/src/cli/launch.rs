//! `sdm launch`: starts a tree (with a progress bar on a terminal), reports which servers
//! are ready where, sends the requests given on the command line, and holds the tree or
//! shuts it down.

use super::*;

pub(super) async fn launch(a: LaunchArgs) -> anyhow::Result<()> {
    let opts = SessionOptions {
        startup_timeout: Duration::from_secs(a.timeout),
        ..a.tree.options(a.n)?
    };
    let servers = sdm_client::layout::of(&opts)?.servers;
    let bar = progress_bar(servers, a.json);
    let quiet = a.json;
    let n = a.n;
    let session = Session::launch(&opts, |p| match (&bar, p) {
        (Some(b), Progress::Listening { count, .. }) => {
            b.set_message("servers listening");
            b.set_position(u64::from(*count));
        }
        (Some(b), Progress::MasterConnected) => b.set_message("master connected"),
        (Some(b), Progress::InitSent) => b.set_message("connecting the tree"),
        (Some(_), Progress::Launched) => {}
        (None, Progress::Listening { count, .. })
            if !quiet && (count.is_power_of_two() || *count == servers) =>
        {
            eprintln!("sdm: {count}/{servers} servers listening");
        }
        (None, Progress::Listening { .. }) => {}
        (None, Progress::Launched) if !quiet => eprintln!("sdm: servers launched"),
        (None, Progress::MasterConnected) if !quiet => eprintln!("sdm: master connected"),
        (None, Progress::InitSent) if !quiet => eprintln!("sdm: connecting the tree"),
        (None, _) => {}
    })
    .await
    .context("launching the tree")?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let r = session.report().clone();
    print_report(&r, n, servers, a.json)?;
    let all = session.all();
    // A filter that refused replies fails the run, as a failed start does.
    let mut refused = false;
    for req in &a.send {
        let mode = SyncMode::Timeout(30_000);
        let filter = a.filter.as_deref().unwrap_or("");
        let m = sdm_client::service::filtered(&a.service, &all, mode, filter, req.clone());
        let groups = session.request_command(m).await?;
        print_groups(req, &groups, a.json)?;
        refused |= groups.iter().any(|g| g.status == Status::Error);
    }
    if a.hold {
        eprintln!("sdm: tree is up; Ctrl-C shuts it down");
        crate::interrupt::Interrupts::catch()?.next().await;
    }
    session.shutdown(Duration::from_secs(10)).await;
    if !r.failed.is_empty() || refused {
        std::process::exit(1);
    }
    Ok(())
}

/// A progress bar of `servers` on stderr, if it is a terminal and the output is not JSON.
fn progress_bar(servers: u32, json: bool) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() || json {
        return None;
    }
    let b = ProgressBar::new(u64::from(servers));
    b.set_style(
        ProgressStyle::with_template("{spinner} {msg:<22} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    b.set_message("launching");
    Some(b)
}

/// Prints which of the `n` ranks' `servers` are ready, where, and which failed, as text
/// or one JSON line.
fn print_report(
    r: &sdm_client::session::LaunchReport,
    n: u32,
    servers: u32,
    json: bool,
) -> std::io::Result<()> {
    if json {
        let failed: Vec<_> = r
            .failed
            .iter()
            .map(|(ids, why)| serde_json::json!({"ids": ids.to_string(), "reason": why}))
            .collect();
        writeln!(
            std::io::stdout(),
            "{}",
            serde_json::json!({"ranks": n, "servers": servers, "ready": r.ready.to_string(), "ready_count": r.ready.len(),
                "failed": failed, "seconds": r.seconds,
                "processes": r.processes.iter().map(|(id, host, pid)| serde_json::json!({"id": id, "host": host, "pid": pid})).collect::<Vec<_>>()})
        )?;
    } else {
        writeln!(
            std::io::stdout(),
            "ready  {} ({} of {n}) in {:.2} s",
            r.ready,
            r.ready.len(),
            r.seconds
        )?;
        for line in hosts_summary(&r.processes) {
            writeln!(std::io::stdout(), "hosts  {line}")?;
        }
        for (ids, why) in &r.failed {
            writeln!(std::io::stdout(), "failed {ids}: {why}")?;
        }
    }
    Ok(())
}

fn print_groups(req: &str, groups: &[ReplyGroup], json: bool) -> std::io::Result<()> {
    let mut groups: Vec<&ReplyGroup> = groups.iter().collect();
    groups.sort_by_key(|g| (g.status, g.sources.first()));
    for g in groups {
        let body = String::from_utf8_lossy(&g.payload);
        if json {
            let status = match g.status {
                Status::Replied => "replied",
                Status::Lost => "lost",
                Status::TimedOut => "timed_out",
                Status::Error => "error",
            };
            let mut line = serde_json::json!({"request": req, "ids": g.sources.to_string(), "status": status, "reply": body});
            if let Some(end) = g.link_end {
                line["link_end"] = crate::console::link_end_name(end).into();
            }
            writeln!(std::io::stdout(), "{line}")?;
        } else {
            match g.status {
                Status::Replied => writeln!(std::io::stdout(), "{} {body}", g.sources),
                Status::Lost => writeln!(std::io::stdout(), "{} lost: {body}", g.sources),
                Status::TimedOut => writeln!(std::io::stdout(), "{} timed out", g.sources),
                Status::Error => writeln!(std::io::stdout(), "{} error: {body}", g.sources),
            }?;
        }
    }
    Ok(())
}

/// Where the servers run, in hostlist form: one host as `vm: [0-15]`; several as one line
/// per share, `h[1-4]: 4 servers each` (the ranks of each host are in `--json`).
fn hosts_summary(processes: &[(u32, String, u32)]) -> Vec<String> {
    let mut per_host: Vec<(String, IdSet)> = Vec::new();
    for (id, host, _) in processes {
        match per_host.iter_mut().find(|(h, _)| h == host) {
            Some((_, ids)) => {
                ids.insert(*id);
            }
            None => per_host.push((host.clone(), IdSet::single(*id))),
        }
    }
    if let [(host, ids)] = per_host.as_slice() {
        return vec![format!("{host}: {ids}")];
    }
    let mut by_count: Vec<(u64, Vec<String>)> = Vec::new();
    for (host, ids) in per_host {
        match by_count.iter_mut().find(|(c, _)| *c == ids.len()) {
            Some((_, hosts)) => hosts.push(host),
            None => by_count.push((ids.len(), vec![host])),
        }
    }
    by_count
        .into_iter()
        .map(|(count, hosts)| {
            let each = if hosts.len() > 1 { " each" } else { "" };
            let s = if count == 1 { "" } else { "s" };
            format!(
                "{}: {count} server{s}{each}",
                sdm_deploy::hostlist::compress(&hosts)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_summarised_in_hostlist_form() {
        let one: Vec<(u32, String, u32)> = (0..16).map(|i| (i, "vm".into(), 100 + i)).collect();
        assert_eq!(hosts_summary(&one), ["vm: [0-15]"]);
        let mut many: Vec<(u32, String, u32)> =
            (0..16).map(|i| (i, format!("h{}", i % 4 + 1), i)).collect();
        many.push((16, "login1".into(), 1));
        assert_eq!(
            hosts_summary(&many),
            ["h[1-4]: 4 servers each", "login1: 1 server"]
        );
    }
}
